#!/usr/bin/env bash
# The watermark from the command line on stories260K: generate --watermark
# KEY at temperature 1 (delta 4, 200 tokens, three seeds) is detected by
# `nucleus watermark detect` (z > 8), plain generation and a wrong key are
# not (|z| < 3); --tokens, --json and --show; greedy and prompt-lookup
# speculation give the same watermarked text; inspect shows the stage;
# detection with a vocab-only file; `watermark cost`; bad parameters and
# --beam are refused with a message naming the option.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_watermark
mkdir -p "$tmp"
model=$shared/models/stories260K.gguf
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }
gen() { "$nucleus" generate -m "$model" -p "Once upon a time" --no-summary "$@" 2>"$tmp/err"; }
sample() { gen -n 200 --temp 1 --top-k 0 --top-p 1 --min-p 0 --ignore-eos "$@"; }
detect() { "$nucleus" watermark detect -m "$model" "$@" 2>"$tmp/err"; }
# z of a --json detection result
zof() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["z"])' "$1"; }
above() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' "$1" "$2"; }
small() { python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1])) < 3 else 1)' "$1"; }

key="cli secret"
for seed in 1 2 3; do
  sample --seed $seed --watermark "$key" --watermark-delta 4 >"$tmp/marked$seed.txt"
  sample --seed $seed >"$tmp/plain$seed.txt"
  out=$(detect --watermark "$key" -f "$tmp/marked$seed.txt")
  check "seed $seed: watermarked text is detected" 'grep -q "^watermark detected (z > 4)" <<<"$out"'
  check "seed $seed: the output says repeats are ignored" 'grep -q "each distinct (context, token) n-gram once" <<<"$out"'
  z=$(zof "$(detect --watermark "$key" -f "$tmp/marked$seed.txt" --json)")
  check "seed $seed: z = $z > 8" 'above "$z" 8'
  z=$(zof "$(detect --watermark "$key" -f "$tmp/plain$seed.txt" --json)")
  check "seed $seed: plain text has |z| = |$z| < 3" 'small "$z"'
  check "seed $seed: plain text is not detected" 'grep -q "^no watermark detected" <<<"$(detect --watermark "$key" -f "$tmp/plain$seed.txt")"'
  z=$(zof "$(detect --watermark "another key" -f "$tmp/marked$seed.txt" --json)")
  check "seed $seed: the wrong key gives |z| = |$z| < 3" 'small "$z"'
done

# the generated token ids score like the text
gen -n 200 --temp 1 --top-k 0 --top-p 1 --min-p 0 --ignore-eos --seed 4 --watermark 77 \
  --watermark-delta 4 --watermark-context 2 --watermark-gamma 0.5 --json-output >"$tmp/ids.json"
ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' "$tmp/ids.json")
res=$(detect --watermark 77 --watermark-context 2 --watermark-gamma 0.5 --tokens "$ids" --json)
check "--tokens: z > 8 with context 2 and gamma 0.5" 'above "$(zof "$res")" 8'
check "--json has the counts" 'python3 -c "import json,sys; o=json.loads(sys.argv[1]); assert o[\"tokens\"]==200 and o[\"scored\"]+o[\"repeated\"]==198 and o[\"detected\"] and 0<o[\"p_value\"]<1e-6" "$res"'
res=$(detect --watermark 77 --watermark-context 1 --watermark-gamma 0.5 --tokens "$ids" --json)
check "another context width does not detect it" 'small "$(zof "$res")"'
detect --watermark 77 --watermark-context 2 --watermark-gamma 0.5 --tokens "$ids" --show >"$tmp/show.txt"
check "--show marks every token" '[ "$(grep -cE "^[-+.] +[0-9]+  " "$tmp/show.txt")" -eq 200 ] && [ "$(grep -cE "^\. " "$tmp/show.txt")" -ge 2 ]'

# greedy is biased, and prompt lookup keeps the watermarked text
plain=$(gen -n 60 --temp 0)
marked=$(gen -n 60 --temp 0 --watermark "$key" --watermark-delta 4)
check "greedy with a watermark differs from plain greedy" '[ "$plain" != "$marked" ]'
look=$(gen -n 60 --temp 0 --watermark "$key" --watermark-delta 4 --lookup --draft-max 4)
check "prompt lookup equals watermarked greedy" '[ "$look" = "$marked" ]'
"$nucleus" inspect -m "$model" -p "Once upon a time" -n 2 --temp 1 --watermark "$key" >"$tmp/inspect.txt" 2>&1
check "inspect shows the watermark stage" 'grep -q "watermark" "$tmp/inspect.txt"'

# detection needs only a tokenizer
vocab=$shared/vocab/ggml-vocab-llama-spm.gguf
out=$("$nucleus" watermark detect -m "$vocab" --watermark "$key" -p "The quick brown fox jumps over the lazy dog." 2>"$tmp/err")
check "a vocab-only file is enough for detection" 'grep -q "^no watermark detected" <<<"$out"'
"$nucleus" watermark cost -m "$vocab" --steps 20 >"$tmp/cost.txt" 2>&1
check "watermark cost times a 32000-token vocabulary" 'grep -q "32000 tokens" "$tmp/cost.txt" && grep -q "with the watermark" "$tmp/cost.txt"'

# bad parameters: refused, naming the option
refused() { # $1: what the message must name, then the command
  local word=$1; shift
  "$@" >/dev/null 2>"$tmp/err"
  local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$word" "$tmp/err"
}
for g in 0 1 -0.1 1.5; do
  check "generate --watermark-gamma $g is refused" 'refused watermark-gamma gen -n 5 --watermark k --watermark-gamma $g'
  check "detect --watermark-gamma $g is refused" 'refused watermark-gamma detect --watermark k --watermark-gamma $g -p hi'
done
check "negative delta is refused" 'refused watermark-delta gen -n 5 --watermark k --watermark-delta -1'
for c in 0 9; do
  check "--watermark-context $c is refused" 'refused watermark-context gen -n 5 --watermark k --watermark-context $c'
  check "detect --watermark-context $c is refused" 'refused watermark-context detect --watermark k --watermark-context $c -p hi'
done
check "an empty key is refused" 'refused "non-empty key" gen -n 5 --watermark ""'
check "detect without a key is refused" 'refused "needs the key" detect -p hi'
check "detect with an empty key is refused" 'refused "needs the key" detect --watermark "" -p hi'
check "settings without a key are refused" 'refused "need --watermark KEY" gen -n 5 --watermark-delta 3'
check "compare with --watermark is refused" 'refused "compare does not take --watermark" "$nucleus" compare -m "$model" -p hi --watermark k'
check "--beam with --watermark is refused" 'refused "cannot be combined with --beam" gen -n 5 --beam 2 --watermark k'
check "bad --tokens are refused" '! detect --watermark k --tokens 1,x,3 >/dev/null'
check "ids outside the vocabulary are refused" '! detect --watermark k --tokens 1,512 >/dev/null && grep -q vocabulary "$tmp/err"'
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
