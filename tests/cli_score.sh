#!/usr/bin/env bash
# `nucleus score bleu` and `nucleus score rouge`. BLEU on sacreBLEU's README example (the expected figures
# are mjpost/sacrebleu test/test_bleu.py's @ 785d26bb42ff5cc738c8aa06efb288cf407fc4fd:
# 48.530827 for the default settings, 49.1919566 with -tok none, and the
# max-order table's "77.65" for order 1), its text and JSON output, one
# score per line, NLTK's flavour (nltk/translate/bleu_score.py's doctest
# 0.4118... for sentence_bleu([reference1], hypothesis1), NLTK 3.8), and
# the errors a user can make. ROUGE on rouge-score's test data
# (tests/eval/rouge; the figures are rouge/rouge_scorer_test.py's
# @ da0c44e0b13f46c6483b01608c3e7ba014655858, ROUGE-1.5.5's to 5 places).
set -uo pipefail
nucleus=$1 tmp=$3/cli_score
data=$(cd "$(dirname "$0")" && pwd)/eval/rouge
mkdir -p "$tmp"
cd "$tmp" || exit 1
fail=0
check() { # check NAME CONDITION-OUTPUT...
  if [ "$2" != ok ]; then echo "FAIL: $1: $2"; fail=1; fi
}
printf '%s\n' "The dog bit the man." "It wasn't surprising." "The man had just bitten him." >hyp
printf '%s\n' "The dog bit the man." "It was not unexpected." "The man bit him first." >ref1
printf '%s\n' "The dog had bit the man." "No one was surprised." "The man had bitten the dog." >ref2

out=$("$nucleus" score bleu --hyp hyp --ref ref1 --ref ref2)
[ "$out" = "BLEU|nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:nucleus-$("$nucleus" --version | cut -d' ' -f2) = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)" ] \
  && r=ok || r="text output: $out"
check default "$r"

json=$("$nucleus" score bleu -i hyp -r ref1 -r ref2 -tok none --json)
python3 - "$json" <<'PY' && r=ok || r="json: $json"
import json, sys
d = json.loads(sys.argv[1])
assert abs(d["score"] - 49.1919566) < 1e-6, d["score"]
assert d["signature"].startswith("nrefs:2|case:mixed|eff:no|tok:none|smooth:exp|version:")
assert d["counts"][0] <= d["totals"][0] and len(d["precisions"]) == 4
PY
check json "$r"

out=$("$nucleus" score bleu -i hyp -r ref1 -r ref2 --max-order 1 -w 2)
[[ "$out" == *" = 77.65 "* ]] && r=ok || r="max-order 1: $out"
check max-order "$r"

n=$("$nucleus" score bleu -i hyp -r ref1 --sentence --json | wc -l)
[ "$n" = 3 ] && r=ok || r="--sentence --json gave $n lines"
check sentence "$r"

printf '%s\n' "It is a guide to action which ensures that the military always obeys the commands of the party" >nh
printf '%s\n' "It is a guide to action that ensures that the military will forever heed Party commands" >nr
out=$("$nucleus" score bleu --flavor nltk -i nh -r nr --sentence)
[[ "$out" == "BLEU (nltk) = 0.4118 "* ]] && r=ok || r="nltk: $out"
check nltk "$r"

# errors: exit status 1 or 2 and a message naming the problem
expect_error() { # expect_error WANT-STATUS PATTERN ARGS...
  local want=$1 pat=$2
  shift 2
  local err
  err=$("$nucleus" score bleu "$@" 2>&1 >/dev/null)
  local rc=$?
  if [ $rc -ne "$want" ] || ! grep -q -- "$pat" <<<"$err"; then
    echo "FAIL: score bleu $*: status $rc, message '$err'"
    fail=1
  fi
}
head -2 ref1 >short
printf 'a\0b\n' >nul
printf '\n\n\n' >empty3
expect_error 1 "has 2 lines but the hypotheses" -i hyp -r short
expect_error 1 "NUL byte" -i nul -r nul
expect_error 1 "line 1: every reference of the segment is empty" -i hyp -r empty3
expect_error 1 "cannot open" -i hyp -r missing-file
expect_error 2 "at least one --ref" -i hyp
expect_error 2 "method0 .. method7 needs --flavor nltk" -i hyp -r ref1 -s method3
expect_error 2 "NLTK's" -i hyp -r ref1 --weights 0.5,0.5
expect_error 2 "sacreBLEU's" -i hyp -r ref1 --flavor nltk --max-order 3
expect_error 2 "comma-separated numbers" -i hyp -r ref1 --flavor nltk --weights 0.5,x
expect_error 2 "--tokenize" -i hyp -r ref1 -tok 14a
echo "a b c d" >abcd
echo "a b x y" >abxy
expect_error 1 "method6 needs a non-zero trigram" --flavor nltk -s method6 -i abcd -r abxy

# ROUGE: line by line with the stemmer (testRouge1AgainstRouge155WithStemming)
out=$("$nucleus" score rouge --hyp "$data/prediction.txt" --ref "$data/target.txt" --sentence \
  --stemmer --types rouge1,rougeL)
want="rouge1 P 0.68750 R 0.40741 F 0.51163  rougeL P 0.68750 R 0.40741 F 0.51163
rouge1 P 0.69231 R 0.42857 F 0.52941  rougeL P 0.69231 R 0.42857 F 0.52941"
[ "$out" = "$want" ] && r=ok || r="rouge --sentence: $out"
check rouge-lines "$r"
# the whole files, their lines as sentences (testRougeLSumAgainstRouge155WithStemming)
json=$("$nucleus" score rouge --hyp "$data/prediction_multi.0.txt" --ref "$data/target_multi.0.txt" \
  --whole-file --stemmer --types rougeLsum --json)
python3 - "$json" <<'PY' && r=ok || r="rouge --whole-file: $json"
import json, sys
d = json.loads(sys.argv[1])["rougeLsum"]
assert round(d["precision"] - 0.66667, 5) == 0 and round(d["recall"] - 0.36538, 5) == 0
assert round(d["fmeasure"] - 0.47205, 5) == 0
PY
check rouge-whole-file "$r"
# aggregated: the intervals hold the two lines' scores, the mid lies between
json=$("$nucleus" score rouge --hyp "$data/prediction.txt" --ref "$data/target.txt" --json --seed 7)
python3 - "$json" <<'PY' && r=ok || r="rouge aggregate: $json"
import json, sys
d = json.loads(sys.argv[1])
assert d["segments"] == 2 and set(d) >= {"rouge1", "rouge2", "rougeL", "rougeLsum"}
r1 = d["rouge1"]
assert round(r1["low"]["precision"] - 0.65385, 5) == 0 and round(r1["high"]["precision"] - 0.68750, 5) == 0
assert r1["low"]["fmeasure"] <= r1["fmeasure"] <= r1["high"]["fmeasure"]
PY
check rouge-aggregate "$r"
expect_rouge_error() { # expect_rouge_error PATTERN ARGS...
  local pat=$1
  shift
  local err
  err=$("$nucleus" score rouge "$@" 2>&1 >/dev/null)
  local rc=$?
  if [ $rc -ne 2 ] || ! grep -q -- "$pat" <<<"$err"; then
    echo "FAIL: score rouge $*: status $rc, message '$err'"
    fail=1
  fi
}
expect_rouge_error "unknown ROUGE type 'rouge0'" -i hyp -r ref1 --types rouge1,rouge0
expect_rouge_error "ends with a comma" -i hyp -r ref1 --types rouge1,
expect_rouge_error "at least one --ref" -i hyp
expect_rouge_error "--confidence" -i hyp -r ref1 --confidence 1.5
[ $fail -eq 0 ] && echo "cli_score: all checks passed"
exit $fail
