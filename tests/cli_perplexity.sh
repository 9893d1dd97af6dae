#!/usr/bin/env bash
# `nucleus perplexity` as llama-perplexity measures it, and KL-divergence
# from a saved base. The figures are llama-perplexity's on
# tests/eval/perplexity/story.txt (its README says how they were made):
# -fa off -c 128 gives "PPL = 4.5597 +/- 0.26453" over 17 chunks; the q4_0
# copy's mean KLD from the f32 model is 0.078073 (within 2% here).
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_perplexity
source "$(dirname "$0")/cli_lib.sh"
mkdir -p "$tmp"
model=$shared/models/stories260K.gguf
story=$(cd "$(dirname "$0")" && pwd)/eval/perplexity/story.txt

"$nucleus" perplexity -m "$model" -f "$story" -c 128 --kl-divergence-base "$tmp/base.bin" --json \
  >"$tmp/ppl.json" 2>"$tmp/ppl.err"
check "chunks: llama-perplexity's figure within 0.5%, 17 chunks of 63 scored tokens" python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert abs(r['perplexity'] - 4.5597) <= 0.005 * 4.5597 and abs(r['stderr'] - 0.26453) <= 0.01 * 0.26453, r
assert r['windows'] == 17 and r['scored'] == 17 * 63 and r['mode'] == 'chunks', r
" "$tmp/ppl.json"
check "the base file has llama-perplexity's size and magic" \
  bash -c '[ "$(stat -c %s "$1")" = 1113996 ] && [ "$(head -c 8 "$1")" = _logits_ ]' _ "$tmp/base.bin"

"$nucleus" quantize "$model" "$tmp/q4_0.gguf" q4_0 >/dev/null 2>&1
"$nucleus" perplexity -m "$tmp/q4_0.gguf" -c 128 --kl-divergence "$tmp/base.bin" >"$tmp/kld.txt" 2>"$tmp/kld.err"
check "KL-divergence text: llama.cpp's statistics, mean KLD within 2%" python3 -c "
import re, sys
t = open(sys.argv[1]).read()
kld = float(re.search(r'Mean    KLD: +([0-9.]+)', t).group(1))
assert abs(kld - 0.078073) <= 0.02 * 0.078073, kld
for key in ('Mean PPL(Q)', 'Mean PPL(base)', '99.0%   KLD', '99.9%   KLD', 'Median  KLD', 'RMS Δp', 'Same top p'):
    assert key in t, key
" "$tmp/kld.txt"
check "KL-divergence: the running perplexity per chunk on stderr" grep -q "^\[17\] " "$tmp/kld.err"
"$nucleus" perplexity -m "$tmp/q4_0.gguf" -c 128 --kl-divergence "$tmp/base.bin" --json >"$tmp/kld.json" 2>/dev/null
check "KL-divergence --json" python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert r['rows'] == 1071 and r['chunks'] == 17 and 0 < r['kld_median'] < r['kld_p99'] < r['kld_max'], r
assert 0.5 < r['same_top'] < 1 and r['ppl'] > r['ppl_base'], r
" "$tmp/kld.json"

# multiple choice: llama-perplexity --hellaswag on each task alone (README: its tasks in a
# whole file are drawn with replacement) says task by task whether the ending of highest mean
# log-prob per token is the labelled one; nucleus's running acc_token must agree on every task
choices=$(cd "$(dirname "$0")" && pwd)/eval/perplexity/choices.jsonl
close=$(cd "$(dirname "$0")" && pwd)/eval/perplexity/choices_close.jsonl
"$nucleus" perplexity -m "$model" --multiple-choice "$choices" --json >"$tmp/mc.json" 2>/dev/null
check "multiple choice: llama-perplexity's hellaswag accuracy" python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert r['tasks'] == 20 and r['acc_token'] == 0.9 and 0 < r['acc_token_stderr'] < 0.1, r
assert 0 <= r['acc'] <= 1 and 0 <= r['acc_norm'] <= 1, r
" "$tmp/mc.json"
"$nucleus" perplexity -m "$model" --multiple-choice "$choices" 2>"$tmp/mc.err" >/dev/null
"$nucleus" perplexity -m "$model" --multiple-choice "$close" 2>"$tmp/mc_close.err" >/dev/null
per_task() { # per_task STDERR WANT: each task's acc_token from the running figures
  python3 -c "
import re, sys
runs = [float(m.group(2)) for m in re.finditer(r'^\[(\d+)\] .*acc_token ([0-9.]+)$', open(sys.argv[1]).read(), re.M)]
got, prev = '', 0
for i, a in enumerate(runs, 1):
    n = round(a * i)
    got += str(n - prev)
    prev = n
assert got == sys.argv[2], (got, sys.argv[2])
" "$1" "$2"
}
check "multiple choice: llama-perplexity's verdict on each of 20 tasks" \
  per_task "$tmp/mc.err" 11111111111110011111
check "multiple choice: llama-perplexity's verdict on each of 24 close tasks (8 right)" \
  per_task "$tmp/mc_close.err" 000011011001000100101000
printf '{"context": "a", "endings": ["b"], "label": 0}\n' >"$tmp/bad1.jsonl"
printf '{"context": "a", "endings": ["b", "c"], "label": 2}\n' >"$tmp/bad2.jsonl"
printf 'not json\n' >"$tmp/bad3.jsonl"

# errors: a usage error is status 2, a bad file 1, each with a message
expect() { # expect STATUS PATTERN ARGS...
  local want=$1 pat=$2
  shift 2
  local err
  err=$("$nucleus" perplexity -m "$model" "$@" 2>&1 >/dev/null)
  [ $? -eq "$want" ] && grep -q -- "$pat" <<<"$err"
}
printf 'short text' >"$tmp/short.txt"
check "a text shorter than a chunk is refused" expect 1 "needs at least 128 tokens" -f "$tmp/short.txt" -c 128
check "--kl-divergence takes no -f" expect 2 "no -f" -f "$story" --kl-divergence "$tmp/base.bin"
check "the base is written in chunks mode" expect 2 "chunks mode" -f "$story" --windows --kl-divergence-base "$tmp/x.bin"
check "a file that is not a base" expect 1 "not a file of base log-probs" -c 128 --kl-divergence "$story"
check "a task with one ending" expect 1 "line 1 has no \"endings\" array of at least 2" --multiple-choice "$tmp/bad1.jsonl"
check "a label out of range" expect 1 "line 1 has no \"label\"" --multiple-choice "$tmp/bad2.jsonl"
check "a line that is not JSON" expect 1 "line 1 is not a JSON object" --multiple-choice "$tmp/bad3.jsonl"
check "--multiple-choice takes no -f" expect 2 "no -f" --multiple-choice "$choices" -f "$story"
check_report
