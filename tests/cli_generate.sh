#!/usr/bin/env bash
# `nucleus generate` streams the reference continuation for stories260K
# greedily, echoes the prompt when asked, reports a summary, is reproducible
# with a seed whatever the thread count, and `nucleus bench` / `info` run.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_generate
mkdir -p "$tmp"
model=$shared/models/stories260K.gguf
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }

want=$(python3 -c "import json;d=json.load(open('$shared/refs/stories260K_greedy.json'));print(d['prompts'][0]['generated_text'],end='')")
"$nucleus" generate -m "$model" -p "Once upon a time" -n 100 --temp 0 -t 2 >"$tmp/greedy.out" 2>"$tmp/greedy.err"
check "greedy text equals the reference continuation" '[ "$(cat "$tmp/greedy.out")" = "$want" ]'
check "summary on stderr" 'grep -qE "prompt: 5 tokens .* generated: 100 tokens .* stop: length" "$tmp/greedy.err"'

"$nucleus" generate -m "$model" -p "Once upon a time" -n 10 --temp 0 --echo --no-summary >"$tmp/echo.out" 2>/dev/null
check "echo starts with the prompt" 'grep -q "^Once upon a time, there was" "$tmp/echo.out"'

printf 'Once upon a time' >"$tmp/prompt.txt"
"$nucleus" generate -m "$model" -f "$tmp/prompt.txt" -n 100 --temp 0 >"$tmp/file.out" 2>/dev/null
check "prompt from a file" '[ "$(cat "$tmp/file.out")" = "$want" ]'

"$nucleus" generate -m "$model" -p "Once upon a time" -n 60 --seed 7 -t 1 >"$tmp/s1.out" 2>/dev/null
"$nucleus" generate -m "$model" -p "Once upon a time" -n 60 --seed 7 -t 2 >"$tmp/s2.out" 2>/dev/null
"$nucleus" generate -m "$model" -p "Once upon a time" -n 60 --seed 8 -t 2 >"$tmp/s3.out" 2>/dev/null
check "same seed, 1 and 2 threads: same text" 'cmp -s "$tmp/s1.out" "$tmp/s2.out"'
check "another seed: other text" '! cmp -s "$tmp/s2.out" "$tmp/s3.out"'

"$nucleus" bench -m "$model" -p 64 -n 16 -r 2 >"$tmp/bench.out" 2>&1
check "bench prints pp64 and tg16 rows" 'grep -q "pp64" "$tmp/bench.out" && grep -q "tg16" "$tmp/bench.out"'
# -d: the tests start after that many tokens, named as llama-bench names them
"$nucleus" bench -m "$model" -p 64 -n 16 -d 100 -r 2 --json >"$tmp/depth.out" 2>&1
check "bench -d names its tests as llama-bench does" \
  'grep -q "\"test\": \"pp64 @ d100\"" "$tmp/depth.out" && grep -q "\"test\": \"tg16 @ d100\"" "$tmp/depth.out"'

# --ceiling: the bytes read after each token are the matrices a step multiplies with
# (output and each layer's seven, each within the 64 bytes its aligned lines leave out;
# not the token embeddings), and a fraction is reported
"$nucleus" bench -m "$model" -p 0 -n 16 -r 2 --ceiling --json >"$tmp/ceiling.out" 2>&1
"$nucleus" info -m "$model" >"$tmp/info.out" 2>&1
check "bench --ceiling reads the step's matrices" 'python3 - "$tmp/ceiling.out" "$tmp/info.out" <<'"'"'EOF'"'"'
import json, re, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
mats = [int(m.group(2)) for m in re.finditer(r"^\s*(output|blk\.\d+\.(?:attn_[qkv]|attn_output|ffn_gate|ffn_up|ffn_down))\.weight\s+\S+\s+\[[^]]*\]\s+(\d+)", open(sys.argv[2]).read(), re.M)]
want = sum(mats)
assert len(mats) == 36 and want - 64 * len(mats) <= r["read_bytes"] <= want, (r["read_bytes"], want)
assert r["read_gbps"] > 0 and r["ceiling_fraction"] > 0, r
EOF'
"$nucleus" bench -m "$model" -p 0 -n 4 -r 1 --ceiling >"$tmp/ceiling.txt" 2>&1
check "bench --ceiling prints the ceiling line" 'grep -q "^tg4 ceiling: .* GB of weights a token streams" "$tmp/ceiling.txt"'
"$nucleus" bench -m "$model" -p 8 -n 0 --ceiling >"$tmp/ceiling0.txt" 2>&1
rc=$?
check "bench --ceiling without generation is refused" '[ $rc -eq 2 ] && grep -q "needs -n above 0" "$tmp/ceiling0.txt"'

# perplexity of the reference greedy text: low (the model wrote it), in chunks of 32 scoring
# their tokens 17..31, with the per-chunk figures on stderr; a bad window is refused
printf '%s' "$want" >"$tmp/ppl.txt"
"$nucleus" perplexity -m "$model" -f "$tmp/ppl.txt" --window 32 >"$tmp/ppl.out" 2>"$tmp/ppl.err"
check "perplexity line" 'grep -qE "^perplexity: [0-9.]+ \+/- [0-9.]+ over [0-9]+ scored tokens of [0-9]+ \([0-9]+ chunks" "$tmp/ppl.out" && grep -q "^\[1\] " "$tmp/ppl.err"'
"$nucleus" perplexity -m "$model" -f "$tmp/ppl.txt" --window 32 --json >"$tmp/ppl.json" 2>"$tmp/ppl_json.err"
check "perplexity --json: progress on stderr" 'grep -q "^\[1\] " "$tmp/ppl_json.err"'
check "perplexity --json: greedy text scores low, the second half of each chunk scored" 'python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert 1 < r[\"perplexity\"] < 5 and r[\"scored\"] == 15 * r[\"windows\"] and r[\"windows\"] == r[\"tokens\"] // 32, r
" "$tmp/ppl.json"'
"$nucleus" perplexity -m "$model" -f "$tmp/ppl.txt" --window 32 --score-from 32 >"$tmp/ppl_bad.out" 2>&1
rc=$?
check "perplexity: a bad --score-from is refused" '[ $rc -eq 1 ] && grep -q "score_from 32 must be 1..31" "$tmp/ppl_bad.out"'

"$nucleus" info -m "$model" >"$tmp/info.out" 2>&1
check "info shows metadata, tensors, params and memory" 'grep -q "llama.embedding_length" "$tmp/info.out" && grep -q "blk.0.attn_q.weight" "$tmp/info.out" && grep -q "parameters: 292" "$tmp/info.out" && grep -q "kv cache" "$tmp/info.out"'
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
