#!/usr/bin/env bash
# `nucleus compare` tabulates decoding strategies on one next-token
# distribution: stories260K's after a prompt, and a synthetic Zipf law whose
# exact numbers (kept tokens, entropies, KL divergences) are computed here
# independently. Also the sampling flags it shares with generate.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_compare
mkdir -p "$tmp"
model=$shared/models/stories260K.gguf
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }

# ---- the model's distribution -------------------------------------------
"$nucleus" compare -m "$model" -p "Once upon a time, there was a" --samples 3000 >"$tmp/model.txt" 2>"$tmp/model.err"
rc=$?
check "table exits 0" '[ $rc -eq 0 ]'
check "header names the distribution" 'grep -q "512 tokens, entropy" "$tmp/model.txt" && grep -q "most likely: '"'"' little'"'"'" "$tmp/model.txt"'
check "a row per strategy" '[ "$(grep -cE "^[a-z0-9_]+(=[0-9.]+)? +[0-9]+ +[0-9]+ " "$tmp/model.txt")" -eq 23 ]'
check "greedy keeps and draws one token" 'grep -qE "^greedy +1 +1 " "$tmp/model.txt"'
check "top_k=5 keeps 5" 'grep -qE "^top_k=5 +5 " "$tmp/model.txt"'

"$nucleus" compare -m "$model" -p "Once upon a time, there was a" --samples 3000 --json >"$tmp/model.json" 2>&1
check "model JSON is consistent" 'python3 - "$tmp/model.json" <<PY
import json, sys, math
d = json.load(open(sys.argv[1]))
s = {x["name"]: x for x in d["strategies"]}
assert d["distribution"]["source"] == "model" and d["distribution"]["n_vocab"] == 512, d
assert len(s) == 23 and d["samples"] == 3000
assert s["greedy"]["kept"] == 1 and s["greedy"]["unique"] == 1
assert abs(s["greedy"]["kl_bits"] + math.log2(d["distribution"]["top_prob"])) < 1e-4
assert s["pure"]["kept"] == 512 and s["pure"]["kl_bits"] < 1e-6
assert abs(s["pure"]["entropy_bits"] - d["distribution"]["entropy_bits"]) < 1e-4
for x in s.values():
    assert x["unique"] <= x["kept"], x
    assert x["kl_bits"] >= 0 and x["sample_kl_bits"] >= 0
assert s["top_k=5"]["kept"] == 5 and s["top_k=20"]["kept"] == 20 and s["top_k=50"]["kept"] == 50
assert s["top_k=5"]["kl_bits"] >= s["top_k=20"]["kl_bits"] >= s["top_k=50"]["kl_bits"]
assert s["top_p=0.5"]["kept"] <= s["top_p=0.9"]["kept"] <= s["top_p=0.95"]["kept"]
assert s["min_p=0.2"]["kept"] <= s["min_p=0.1"]["kept"] <= s["min_p=0.05"]["kept"]
assert s["temp=0.5"]["entropy_bits"] < s["pure"]["entropy_bits"] < s["temp=1.5"]["entropy_bits"]
PY'

"$nucleus" compare -m "$model" -p "Once upon a time, there was a" --samples 500 --json >"$tmp/again.json" 2>&1
"$nucleus" compare -m "$model" -p "Once upon a time, there was a" --samples 500 --json --seed 5 >"$tmp/seed5.json" 2>&1
"$nucleus" compare -m "$model" -p "Once upon a time, there was a" --samples 500 --json >"$tmp/again2.json" 2>&1
check "same seed: same output" 'cmp -s "$tmp/again.json" "$tmp/again2.json"'
check "another seed: other draws" '! cmp -s "$tmp/again.json" "$tmp/seed5.json"'

# ---- a Zipf law, checked against exact numbers ---------------------------
"$nucleus" compare --zipf 1000 --samples 2000 >"$tmp/zipf.txt" 2>&1
check "zipf table" 'grep -q "Zipf distribution, s = 1: 1000 tokens" "$tmp/zipf.txt" && grep -qE "^min_p=0.1 +10 +10 " "$tmp/zipf.txt"'
"$nucleus" compare --zipf 1000 --zipf-s 1.1 --samples 20000 --json --top-k 3 --top-p 1 --min-p 0 \
    --temp 1 --logit-bias 0=-inf >"$tmp/zipf.json" 2>&1
check "zipf JSON matches the exact distribution" 'python3 - "$tmp/zipf.json" <<PY
import json, sys, math
d = json.load(open(sys.argv[1]))
s = {x["name"]: x for x in d["strategies"]}
w = [(i + 1) ** -1.1 for i in range(1000)]
z = sum(w); p = [x / z for x in w]
H = lambda q: -sum(x * math.log2(x) for x in q if x > 0)
def near(a, b, tol=1e-4): assert abs(a - b) < tol, (a, b)
near(d["distribution"]["entropy_bits"], H(p))
near(d["distribution"]["top_prob"], p[0], 1e-6)
near(s["greedy"]["kl_bits"], -math.log2(p[0]))
near(s["pure"]["entropy_bits"], H(p))
for k in (5, 20, 50):   # top-k: q = p on the top k, renormalised; KL = -log2(mass)
    m = sum(p[:k])
    assert s["top_k=%d" % k]["kept"] == k
    near(s["top_k=%d" % k]["kl_bits"], -math.log2(m))
    near(s["top_k=%d" % k]["entropy_bits"], H([x / m for x in p[:k]]))
for P in (0.5, 0.9, 0.95):  # top-p: the smallest prefix with mass >= P
    c, k = 0, 0
    while c < P: c += p[k]; k += 1
    assert s["top_p=%g" % P]["kept"] == k, (P, k, s["top_p=%g" % P]["kept"])
    near(s["top_p=%g" % P]["kl_bits"], -math.log2(c))
for P in (0.05, 0.1, 0.2):  # min-p: p_i >= P * p_0
    assert s["min_p=%g" % P]["kept"] == sum(x >= P * p[0] for x in p)
for T in (0.5, 0.8, 1.5):   # temperature: q ~ p^(1/T)
    q = [x ** (1 / T) for x in p]; zq = sum(q); q = [x / zq for x in q]
    near(s["temp=%g" % T]["entropy_bits"], H(q), 1e-3)
    near(s["temp=%g" % T]["kl_bits"], sum(a * math.log2(a / b) for a, b in zip(q, p)), 1e-3)
for P in (0.5, 0.9):        # typical: ascending |-ln p - H| until mass >= P
    h = -sum(x * math.log(x) for x in p)
    order = sorted(range(1000), key=lambda i: abs(-math.log(p[i]) - h))
    c, k = 0, 0
    while c < P: c += p[order[k]]; k += 1
    assert abs(s["typical_p=%g" % P]["kept"] - k) <= 1, (P, k, s["typical_p=%g" % P]["kept"])
l = [-1.1 * math.log(i + 1) for i in range(1000)]
for n in (1, 2):            # top-n-sigma: logits >= max - n * std
    mean = sum(l) / 1000; sd = math.sqrt(sum((x - mean) ** 2 for x in l) / 1000)
    k = sum(x >= l[0] - n * sd for x in l)
    assert s["top_n_sigma=%d" % n]["kept"] == k, (n, k)
    near(s["top_n_sigma=%d" % n]["kl_bits"], -math.log2(sum(p[:k])))
# XTC (threshold 0.05, probability 0.5): half the time the tokens above 0.05
# but the last of them go
k = sum(x >= 0.05 for x in p)
assert k == 3
rest = sum(p[k - 1:])
q = [0.5 * x + (0.5 * x / rest if i >= k - 1 else 0) for i, x in enumerate(p)]
near(s["xtc=0.05"]["entropy_bits"], H(q))
near(s["xtc=0.05"]["kl_bits"], sum(a * math.log2(a / b) for a, b in zip(q, p)))
# dynamic temperature 1 +- 0.5: T = 0.5 + H / ln 1000, q ~ p^(1/T)
T = 0.5 + (-sum(x * math.log(x) for x in p)) / math.log(1000)
q = [x ** (1 / T) for x in p]; zq = sum(q); q = [x / zq for x in q]
near(s["dynatemp=0.5"]["entropy_bits"], H(q), 1e-3)
# mirostat at mu = 2 tau = 6: v1 keeps ((s-1) 2^mu / (1 - N^(1-s)))^(1/s), v2 the tokens of
# surprise <= mu
assert s["mirostat=3"]["kept"] == int((0.1 * 2 ** 6 / (1 - 1000 ** -0.1)) ** (1 / 1.1))
assert s["mirostat_v2=3"]["kept"] == sum(-math.log2(x) <= 6 for x in p)
# the drawn frequencies follow the exact ones (20000 draws)
near(s["pure"]["sample_entropy_bits"], H(p), 0.1)
assert s["pure"]["sample_kl_bits"] < 0.1
for x in s.values(): assert abs(x["sample_entropy_bits"] - x["entropy_bits"]) < 0.1, x
# the chain of the flags: token 0 banned by the bias, then top-k 3
c = s["chain"]
assert c["kept"] == 3 and not c["top_token_drawn"] and c["unique"] == 3, c
near(c["kl_bits"], -math.log2(sum(p[1:4])))
PY'

# ---- errors --------------------------------------------------------------
"$nucleus" compare --samples 10 >/dev/null 2>"$tmp/err1"
rc=$?
check "no distribution: usage error" '[ $rc -eq 2 ] && grep -qF "either [-m MODEL] -p PROMPT or --zipf N" "$tmp/err1"'
"$nucleus" compare --zipf 10 -m "$model" -p hi >/dev/null 2>"$tmp/err2"
rc=$?
check "both sources: usage error" '[ $rc -eq 2 ]'
"$nucleus" compare --zipf 10 --sampler-order top_k,bogus >/dev/null 2>"$tmp/err3"
rc=$?
check "bad --sampler-order names the stage" '[ $rc -eq 2 ] && grep -q "bogus" "$tmp/err3"'
"$nucleus" compare --zipf 10 --logit-bias 3 >/dev/null 2>"$tmp/err4"
rc=$?
check "bad --logit-bias" '[ $rc -eq 2 ] && grep -q "TOKEN_ID=BIAS" "$tmp/err4"'
"$nucleus" compare --zipf 10 --logit-bias 10=1 >/dev/null 2>"$tmp/err5"
rc=$?
check "--logit-bias outside the vocabulary" '[ $rc -eq 1 ] && grep -q "outside the vocabulary" "$tmp/err5"'
"$nucleus" compare --zipf 10 --repeat-penalty 0 >/dev/null 2>"$tmp/err6"
rc=$?
check "--repeat-penalty 0 refused" '[ $rc -eq 2 ] && grep -q "repeat-penalty" "$tmp/err6"'
"$nucleus" compare --zipf 10 --typical-p 1.5 >/dev/null 2>"$tmp/err7"
rc=$?
check "--typical-p 1.5 refused" '[ $rc -eq 2 ]'

# ---- the sampling flags through generate -----------------------------------
"$nucleus" generate -m "$model" -p "Once upon a time" -n 60 --temp 0 --no-summary >"$tmp/plain.out" 2>/dev/null
"$nucleus" generate -m "$model" -p "Once upon a time" -n 60 --temp 0 --no-summary --repeat-penalty 1.5 \
    --frequency-penalty 0.5 --no-repeat-ngram 3 --repetition-guard --sampler-order default >"$tmp/pen.out" 2>"$tmp/pen.err"
check "generate takes the repetition flags and they change greedy text" '[ -s "$tmp/pen.out" ] && ! cmp -s "$tmp/plain.out" "$tmp/pen.out"'
"$nucleus" generate --help >"$tmp/help.out" 2>&1
check "help lists the sampling flags" 'for f in --repeat-penalty --repeat-last-n --frequency-penalty --presence-penalty --penalize-prompt --no-repeat-ngram --repetition-guard --typical-p --logit-bias --min-tokens --ignore-eos --sampler-order --dry-multiplier --dry-base --dry-allowed-length --dry-penalty-last-n --dry-sequence-breaker --xtc-probability --xtc-threshold --top-n-sigma --dynatemp-range --dynatemp-exp --mirostat --mirostat-tau --mirostat-eta --ban --ban-tokens; do grep -q -- "$f" "$tmp/help.out" || exit 1; done'
"$nucleus" compare --zipf 10 --dry-multiplier 1 >/dev/null 2>"$tmp/err8"
rc=$?
check "compare refuses DRY (no history)" '[ $rc -eq 2 ] && grep -q "dry-multiplier" "$tmp/err8"'
"$nucleus" compare --zipf 10 --ban abc >/dev/null 2>"$tmp/err9"
rc=$?
check "banned strings without a model: the library says why" '[ $rc -eq 1 ] && grep -q "banned strings need" "$tmp/err9"'
"$nucleus" generate -m "$model" -p "Once upon a time" -n 60 --temp 0 --no-summary --ban Lily --ban " park" >"$tmp/ban.out" 2>/dev/null
check "generate --ban: the greedy story loses Lily and the park" 'grep -q Lily "$tmp/plain.out" && [ -s "$tmp/ban.out" ] && ! grep -qE "Lily| park" "$tmp/ban.out"'
for bad in "--mirostat 3" "--xtc-threshold 1.5" "--dry-base 0.5" "--top-n-sigma -2" "--dynatemp-exp -1" "--ban-tokens 1,x" "--dry-sequence-breaker 01234567890123456789012345678901234567890"; do
  "$nucleus" generate -m "$model" -p hi -n 1 $bad >/dev/null 2>"$tmp/bad.err"
  rc=$?
  check "refused: $bad" '[ $rc -eq 2 ] && grep -q -- "${bad%% *}" "$tmp/bad.err"'
done
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
