#!/usr/bin/env bash
# Bad model files and bad options give a clear one-line error and a non-zero
# exit, never a crash (exit codes >= 128 are signals).
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_errors
mkdir -p "$tmp"
model=$shared/models/stories260K.gguf
fail=0 n=0

# expect CODE-PATTERN MESSAGE-PATTERN -- command...
expect() {
  local pattern=$1; shift
  n=$((n + 1))
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ] || ! grep -qE "$pattern" <<<"$out" || [ "$(wc -l <<<"$out")" -gt 2 ]; then
    echo "FAIL: $* -> rc=$rc, stderr: $out"
    fail=$((fail + 1))
  fi
}

python3 - "$model" "$tmp" <<'PY'
import sys, struct
src, tmp = sys.argv[1], sys.argv[2]
data = open(src, 'rb').read()
open(f'{tmp}/truncated_header.gguf', 'wb').write(data[:100])
open(f'{tmp}/truncated_data.gguf', 'wb').write(data[:len(data) // 2])
open(f'{tmp}/bad_magic.gguf', 'wb').write(b'GGUX' + data[4:])
open(f'{tmp}/bad_version.gguf', 'wb').write(data[:4] + struct.pack('<I', 99) + data[8:])
# absurd tensor count (bytes 8..16) and kv count (16..24)
open(f'{tmp}/absurd_tensors.gguf', 'wb').write(data[:8] + struct.pack('<Q', 1 << 62) + data[16:])
open(f'{tmp}/absurd_kv.gguf', 'wb').write(data[:16] + struct.pack('<Q', (1 << 64) - 1) + data[24:])
open(f'{tmp}/empty.gguf', 'wb').write(b'')
# a tensor renamed (same length) as one expert of the older per-expert layout
assert data.count(b'blk.0.ffn_gate.weight') == 1
open(f'{tmp}/split_experts.gguf', 'wb').write(data.replace(b'blk.0.ffn_gate.weight', b'blk.0.ffn_up.0.weight'))
open(f'{tmp}/short.txt', 'w').write('Once upon a time')
PY

expect "truncat|end of the file|past the end" "$nucleus" info -m "$tmp/truncated_header.gguf"
expect "truncat|end of the file|past the end" "$nucleus" generate -m "$tmp/truncated_data.gguf" -p hi
expect "magic" "$nucleus" info -m "$tmp/bad_magic.gguf"
expect "version" "$nucleus" generate -m "$tmp/bad_version.gguf" -p hi
expect "tensor" "$nucleus" info -m "$tmp/absurd_tensors.gguf"
expect "count|key|kv|metadata" "$nucleus" info -m "$tmp/absurd_kv.gguf"
expect "truncat|empty|too small|end of the file" "$nucleus" info -m "$tmp/empty.gguf"
expect "No such file|cannot open|not found|could not" "$nucleus" info -m "$tmp/missing.gguf"
expect "temp" "$nucleus" generate -m "$model" -p hi --temp -1
expect "top-p" "$nucleus" generate -m "$model" -p hi --top-p 1.5
expect "threads|-t " "$nucleus" generate -m "$model" -p hi -t 0
expect "unknown command" "$nucleus" frobnicate
expect "unknown option" "$nucleus" generate -m "$model" -p hi --bogus
expect "exactly one of" "$nucleus" generate -m "$model"
expect "prompt has|context" "$nucleus" generate -m "$model" -c 4 -p "Once upon a time there was"
# issue 20: an unsupported expert layout is named, not "missing tensor"
expect "unsupported mixture-of-experts layout: 'blk.0.ffn_up.0.weight' holds one expert" \
  "$nucleus" generate -m "$tmp/split_experts.gguf" -p hi
# a text too short to score anything, and a benchmark of nothing, are errors
expect "chunks of 2048 tokens needs at least 2048 tokens, the text has [0-9]+" "$nucleus" perplexity -m "$model" -f "$tmp/short.txt"
expect "nothing would be scored" "$nucleus" perplexity -m "$model" -f "$tmp/short.txt" --windows
expect "nothing to measure" "$nucleus" bench -m "$model" -p 0 -n 0
# a context too small for the depth is refused, not raised behind the user's back
expect "c 64 holds fewer than the 117 tokens a test needs" "$nucleus" bench -m "$model" -p 16 -n 8 -d 100 -c 64
# a context the memory cannot hold is refused with the figures, not killed later:
# 4M f32 cells of stories260K need 5 GiB, more than 2 GiB of address space
# (not under the sanitizers, whose shadow memory needs far more than that)
if [ "${5:-0}" != 1 ]; then
  expect "needs [0-9]+ MiB \(KV cache 5120 MiB.*but only [0-9]+ MiB of memory are available" \
    bash -c 'ulimit -v 2097152; exec "$0" generate -m "$1" -c 4194304 --kv-type f32 -p hi' \
    "$nucleus" "$model"
fi
# a context past the trained one runs, with a warning
out=$("$nucleus" generate -m "$model" -c 4096 -p hi -n 2 2>&1 >/dev/null)
n=$((n + 1))
if ! grep -q "a context of 4096 tokens is more than the 2048 the model was trained on" <<<"$out"; then
  echo "FAIL: no warning for -c 4096 on a model trained on 2048: $out"
  fail=$((fail + 1))
fi
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
