#!/usr/bin/env bash
# The decoding toolbox from the command line on stories260K: constrained
# output (--json, --choice, --regex), speculative decoding with a quantised
# draft and with prompt lookup (same text as plain greedy), beam search,
# best-of and self-consistency, log-probs as JSON, inspect, quantize errors.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_decoding
mkdir -p "$tmp"
model=$shared/models/stories260K.gguf
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }
gen() { "$nucleus" generate -m "$model" -p "Once upon a time" --no-summary "$@" 2>"$tmp/err"; }

for seed in 1 2 3 4 5; do
  gen -n 48 --json --seed $seed --temp 1.2 >"$tmp/json$seed.out"
  check "--json seed $seed parses as an object" 'python3 -c "import json,sys; o=json.load(open(\"$tmp/json$seed.out\")); sys.exit(0 if isinstance(o, dict) else 1)"'
done
out=$(gen -n 10 --choice "red,green,blue" --seed 9)
check "--choice gives one of the choices" '[[ "$out" =~ ^(red|green|blue)$ ]]'
out=$(gen -n 20 --regex "[0-9]{3}-[a-z]{2}")
check "--regex output matches" '[[ "$out" =~ ^[0-9]{3}-[a-z]{2}$ ]]'
check "two grammars at once are refused" '! gen -n 5 --json --choice a,b >/dev/null'

plain=$(gen -n 60 --temp 0)
"$nucleus" quantize "$model" "$tmp/q4.gguf" q4_0 2>/dev/null
check "quantize wrote a q4_0 copy" 'grep -q "general.file_type .* 2$" <<<"$("$nucleus" info -m "$tmp/q4.gguf" --no-tensors)"'
spec=$(gen -n 60 --temp 0 --draft "$tmp/q4.gguf")
check "draft-model speculation equals plain greedy" '[ "$spec" = "$plain" ]'
"$nucleus" generate -m "$model" -p "Once upon a time" -n 20 --temp 0 --draft "$tmp/q4.gguf" 2>"$tmp/err" >/dev/null
check "speculation reports acceptance" 'grep -qE "accepted \([0-9.]+%\).* tokens per target pass" "$tmp/err"'
look=$(gen -n 60 --temp 0 --lookup --draft-max 4)
check "prompt lookup equals plain greedy" '[ "$look" = "$plain" ]'
check "a draft with another vocabulary is refused" '! gen -n 5 --draft "$shared/vocab/ggml-vocab-llama-spm.gguf" >/dev/null'
# stories260K's ffn_down rows are 172 values, not whole blocks of 32: those 5 matrices fall back
# to f16, and quantize says how many did (count checked against the file's tensor types)
"$nucleus" quantize "$model" "$tmp/q8.gguf" q8_0 2>"$tmp/q8.err"
f16_rows=$("$nucleus" info -m "$tmp/q8.gguf" | grep -cE "^  blk\.[0-9]+\.ffn_down\.weight +f16 ")
check "quantize counts the matrices that fell back" '[ "$f16_rows" -eq 5 ] && grep -q "^note: 5 matrices are not in the type q8_0 gives them" "$tmp/q8.err"'
"$nucleus" quantize "$model" "$tmp/f16.gguf" f16 2>"$tmp/f16.err"
check "quantize says nothing of fallbacks when none happened" '[ -s "$tmp/f16.gguf" ] && ! grep -q "^note:" "$tmp/f16.err"'
check "unknown quantize type is refused" '! "$nucleus" quantize "$model" "$tmp/x.gguf" q3_z 2>/dev/null && [ ! -e "$tmp/x.gguf" ]'

gen -n 12 --beam 3 --beam-return 2 >"$tmp/beam.out"
check "beam search prints two hypotheses" '[ "$(grep -c "^--- hypothesis" "$tmp/beam.out")" -eq 2 ]'
gen -n 12 --best-of 4 --seed 2 >/dev/null
check "best-of names the chosen sample" 'grep -q "best of 4: sample" "$tmp/err"'
gen -n 12 --self-consistency 4 --seed 2 --answer-regex "[a-z]+" >/dev/null
check "self-consistency reports votes" 'grep -qE "answer .* with [0-9]+ of 4 votes" "$tmp/err"'
gen -n 4 --temp 0 --logprobs 3 --json-output >"$tmp/lp.json"
check "log-probs as JSON" 'python3 -c "import json; o=json.load(open(\"$tmp/lp.json\")); assert len(o[\"logprobs\"])==4 and len(o[\"logprobs\"][0][\"top\"])==3"'

"$nucleus" inspect -m "$model" -p "Once upon a time" -n 3 --top-k 10 --temp 1 >"$tmp/inspect.txt"
check "inspect shows stages, entropy and the choice" 'grep -q "top_k" "$tmp/inspect.txt" && grep -q "entropy" "$tmp/inspect.txt" && [ "$(grep -c "chosen:" "$tmp/inspect.txt")" -eq 3 ]'
"$nucleus" inspect -m "$model" -p "Once upon a time" -n 2 --json >"$tmp/inspect.json"
check "inspect --json is one object per step" 'python3 -c "import json; [json.loads(l) for l in open(\"$tmp/inspect.json\")]" && [ "$(wc -l <"$tmp/inspect.json")" -eq 2 ]'
printf 'Once upon a time\nLily and Ben went to the park\nThe dog\n' >"$tmp/prompts.txt"
"$nucleus" generate -m "$model" --prompts "$tmp/prompts.txt" -n 20 --seed 5 --json-output >"$tmp/batch.json" 2>/dev/null
i=0
while read -r p; do
  alone=$("$nucleus" generate -m "$model" -p "$p" -n 20 --seed 5 --json-output 2>/dev/null)
  check "batch prompt $i equals the prompt alone" 'python3 -c "import json,sys; a=json.loads(sys.argv[1]); b=[json.loads(l) for l in open(sys.argv[2])][$i]; sys.exit(0 if a[\"tokens\"]==b[\"tokens\"] else 1)" "$alone" "$tmp/batch.json"'
  i=$((i + 1))
done <"$tmp/prompts.txt"
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
