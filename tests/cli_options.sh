#!/usr/bin/env bash
# The command line's option parser (cli/cli_parse.c) as users meet it:
# unknown options with the closest name, missing values, malformed numbers,
# out-of-range values refused (never clamped) with the range named, the
# --name=value form, repeatable options, `--` and positional arguments, exit
# status 2 for usage errors; and every command's --help against what the
# command accepts: each option the help names is accepted, as a flag or with
# a value as the help says, and each has a line of help.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_options
mkdir -p "$tmp"
model=$shared/models/stories260K.gguf
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }

# usage_error PATTERN COMMAND...: exit status 2, nothing on stdout, one line
# on stderr that matches the extended regex PATTERN.
usage_error() {
  local pattern=$1; shift
  local out rc
  out=$("$@" 2>"$tmp/err"); rc=$?
  if [ $rc -ne 2 ] || [ -n "$out" ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qE -- "$pattern" "$tmp/err"; then
    echo "  $* -> rc=$rc, stderr: $(cat "$tmp/err")"
    return 1
  fi
}
gen() { "$nucleus" generate -m "$model" -p "Once upon a time" "$@"; }

# --- unknown options and commands --------------------------------------------
check "a typo finds the option" 'usage_error "^nucleus: unknown option .--tmep. \(did you mean --temp\?\)$" gen --tmep 0'
check "a typo with =value finds the option" 'usage_error "unknown option .--tmep. \(did you mean --temp\?\)" gen --tmep=0'
check "serve: a missing letter" 'usage_error "unknown option .--paralel. \(did you mean --parallel\?\)" "$nucleus" serve -m "$model" --paralel 2'
check "info: a missing s" 'usage_error "did you mean --no-tensors\?" "$nucleus" info -m "$model" --no-tensor'
check "a swapped pair of letters" 'usage_error "did you mean --seed\?" gen --sede 3'
check "nothing close: the help is named" 'usage_error "^nucleus: unknown option .--bogus. \(see nucleus generate --help\)$" gen --bogus'
check "an option of another command" 'usage_error "unknown option .--zipf." "$nucleus" info -m "$model" --zipf 5'
check "an unknown command finds the command" 'usage_error "unknown command .generat. \(did you mean generate\?\)" "$nucleus" generat'
check "an unknown subcommand finds the subcommand" 'usage_error "unknown command .detekt. \(did you mean detect\?\)" "$nucleus" watermark detekt'
check "nucleus' own option" 'usage_error "did you mean --version\?" "$nucleus" --verison'

# --- missing and unexpected values -------------------------------------------
check "a value option last: needs a value" 'usage_error "^nucleus: --temp needs a value: --temp X$" gen --temp'
check "a short name needs a value too" 'usage_error "^nucleus: -n needs a value" gen -n'
check "a flag given a value" 'usage_error "^nucleus: --echo takes no value \(got .yes.\)$" gen --echo=yes'
check "an empty --name= value is not a number" 'usage_error "--top-k expects an integer .*; .. is not an integer" gen --top-k='
check "a stray argument" 'usage_error "unexpected argument .stray." gen stray'

# --- numbers -------------------------------------------------------------------
for v in 5x 1.5 "" " 5" "5 " 0x10 1e3 ++5 - abc; do
  check "--top-k '$v' is not an integer" 'usage_error "^nucleus: --top-k expects an integer in \[0, 1073741824\]; .$v. is not an integer$" gen --top-k "$v"'
done
for v in abc 0.5x "" nan inf -inf 0x1p-2 " 1" 1e 1..2; do
  check "--temp '$v' is not a number" 'usage_error "^nucleus: --temp expects a number in \[0, 100\]; .$v. is not a number$" gen --temp "$v"'
done
check "--temp 1e999 overflows" 'usage_error "--temp expects a number in \[0, 100\]; .1e999. is out of range" gen --temp 1e999'

# out of range: refused with the range, never clamped to it
check "int below the range" 'usage_error "^nucleus: --threads expects an integer in \[1, 256\]; .0. is out of range$" gen -t 0'
check "int above the range" 'usage_error "^nucleus: --logprobs expects an integer in \[0, 20\]; .21. is out of range$" gen --logprobs 21'
check "negative where the range starts at -1" 'usage_error "--repeat-last-n expects an integer in \[-1, 1073741824\]; .-2. is out of range" gen --repeat-last-n -2'
check "float above the range" 'usage_error "^nucleus: --top-p expects a number in \(0, 1\]; .1.5. is out of range$" gen --top-p 1.5'
check "float at an excluded bound" 'usage_error "--top-p expects a number in \(0, 1\]; .0. is out of range" gen --top-p 0'
check "float that a float rounds to an excluded bound" 'usage_error "--top-p .*1e-50. is out of range" gen --top-p 1e-50'
check "float below the range" 'usage_error "--temp expects a number in \[0, 100\]; .-0.1. is out of range" gen --temp -0.1'
check "both bounds excluded" 'usage_error "--watermark-gamma expects a number in \(0, 1\); .1. is out of range" gen --watermark k --watermark-gamma 1'
check "float range of another command" 'usage_error "--zipf-s expects a number in \[0, 10\]; .10.5. is out of range" "$nucleus" compare --zipf 8 --zipf-s 10.5'
check "serve's ranges" 'usage_error "--port expects an integer in \[0, 65535\]; .65536. is out of range" "$nucleus" serve -m "$model" --port 65536'

# the edges of 64-bit integers: read exactly, one past them refused
check "seed one past the largest" 'usage_error "--seed expects an integer in \[0, 9223372036854775807\]; .9223372036854775808. is out of range" gen --seed 9223372036854775808'
check "the smallest 64-bit integer is a number, out of the seed range" 'usage_error "--seed expects .*; .-9223372036854775808. is out of range" gen --seed -9223372036854775808'
check "below the smallest 64-bit integer" 'usage_error "--repeat-last-n .*; .-9223372036854775809. is out of range" gen --repeat-last-n -9223372036854775809'
check "far beyond 64 bits" 'usage_error "--seed .*; .99999999999999999999999. is out of range" gen --seed 99999999999999999999999'
gen -n 12 --temp 1 --top-k 0 --top-p 1 --min-p 0 --seed 9223372036854775807 --no-summary >"$tmp/max1" 2>/dev/null
rc1=$?
gen -n 12 --temp 1 --top-k 0 --top-p 1 --min-p 0 --seed=9223372036854775807 --no-summary >"$tmp/max2" 2>/dev/null
gen -n 12 --temp 1 --top-k 0 --top-p 1 --min-p 0 --seed 9223372036854775806 --no-summary >"$tmp/max3" 2>/dev/null
check "the largest seed runs, the same with =" '[ $rc1 -eq 0 ] && [ -s "$tmp/max1" ] && cmp -s "$tmp/max1" "$tmp/max2"'
check "the largest seed and the one below it draw differently (read exactly)" '! cmp -s "$tmp/max1" "$tmp/max3"'

# --- enums ---------------------------------------------------------------------
check "an enum names its choices" 'usage_error "^nucleus: --kv-type expects one of f16, f32, q8_0, q4_0; got .f64.$" gen --kv-type f64'
check "serve's enum too" 'usage_error "--kv-type expects one of f16, f32, q8_0, q4_0; got .q8." "$nucleus" serve -m "$model" --kv-type q8'
"$nucleus" info -m "$model" --kv-type-v q4_0 >"$tmp/info_q4" 2>&1
check "info names the cache type the heads cannot take (8 values, not whole blocks of 32), no size" \
  'grep -q "^memory: not available (a q4_0 value cache needs heads of a multiple of 32 values" "$tmp/info_q4" && ! grep -q "kv cache" "$tmp/info_q4"'

# --- --name=value, values that start with '-', last one wins -------------------
gen -n 16 --temp 0 --no-summary >"$tmp/spaced" 2>/dev/null
"$nucleus" generate --model="$model" --prompt="Once upon a time" --n-predict=16 --temp=0 --no-summary >"$tmp/equals" 2>/dev/null
check "--name=value reads as --name value" '[ -s "$tmp/spaced" ] && cmp -s "$tmp/spaced" "$tmp/equals"'
gen -n 16 --temp 5 --temp 0 --no-summary >"$tmp/last" 2>/dev/null
check "a single-valued option given twice: the last one counts" 'cmp -s "$tmp/spaced" "$tmp/last"'
gen -n 16 --temp 0 --repeat-last-n -1 --no-summary >"$tmp/dash" 2>/dev/null
rc=$?
check "a value that starts with -" '[ $rc -eq 0 ] && [ -s "$tmp/dash" ]'
"$nucleus" grammar --regex='[0-9]+' --check=123 >"$tmp/g.out" 2>&1
check "--regex=RE --check=TEXT" 'grep -qx match "$tmp/g.out"'
"$nucleus" grammar --regex '[0-9]+' --check=a=b >"$tmp/g2.out" 2>&1
check "a value holding = keeps it" 'grep -q "^no match" "$tmp/g2.out"'

# --- repeatable options ----------------------------------------------------------
full=$(cat "$tmp/spaced")
want=$(python3 -c '
import sys
full, stops = sys.argv[1], sys.argv[2:]
cut = min(full.find(s) for s in stops if s in full)
print(full[:cut], end="")' "$full" " was" " a ")
gen -n 16 --temp 0 --no-summary --stop " was" --stop " a " >"$tmp/stop1" 2>/dev/null
gen -n 16 --temp 0 --no-summary --stop " a " --stop " was" >"$tmp/stop2" 2>/dev/null
gen -n 16 --temp 0 --no-summary --stop " a " >"$tmp/stop3" 2>/dev/null
check "the stop texts are in the reference text" 'grep -q " was" <<<"$full" && grep -q " a " <<<"$full"'
check "--stop twice: both count, either order" '[ "$(cat "$tmp/stop1")" = "$want" ] && [ "$(cat "$tmp/stop2")" = "$want" ]'
check "one --stop alone stops later" '[ "$(cat "$tmp/stop3")" != "$want" ]'
stops=()
for i in $(seq 17); do stops+=(--stop "s$i"); done
check "at most 16 --stop options" 'usage_error "^nucleus: at most 16 --stop options$" gen "${stops[@]}"'
biases=()
for i in $(seq 257); do biases+=(--logit-bias "$i=-1"); done
check "at most 256 --logit-bias options" 'usage_error "at most 256 --logit-bias options" gen "${biases[@]}"'
check "a custom value names its form" 'usage_error "^nucleus: --logit-bias: expected TOKEN_ID=BIAS" gen --logit-bias 5'
check "a custom value: the library's message" 'usage_error "^nucleus: --sampler-order: .*bogus" gen --sampler-order top_k,bogus'

# --- positional arguments and -- ---------------------------------------------------
check "missing positional" 'usage_error "^nucleus: missing TYPE \(usage: nucleus quantize" "$nucleus" quantize a.gguf b.gguf'
check "one positional too many" 'usage_error "unexpected argument .d." "$nucleus" quantize a b c d'
check "an option-like word is an option" 'usage_error "unknown option .-x." "$nucleus" pull -x'
check "after --, it is an argument" 'usage_error "^nucleus: .-x. is not a model reference" "$nucleus" pull -- -x'
check "-- then an option name is an argument too" 'usage_error "unexpected argument .--echo." gen -- --echo'

# --- exit status --------------------------------------------------------------------
"$nucleus" generate --help >/dev/null 2>&1
rc=$?
check "help exits 0" '[ $rc -eq 0 ]'
"$nucleus" >/dev/null 2>"$tmp/none"
rc=$?
check "no command: usage on stderr, exit 2" '[ $rc -eq 2 ] && grep -q "^usage: nucleus COMMAND" "$tmp/none"'
"$nucleus" info -m "$tmp/missing.gguf" >/dev/null 2>&1
rc=$?
check "a failure that is not a usage error exits 1" '[ $rc -eq 1 ]'
check "a usage error after a command's own check exits 2" 'usage_error "exactly one of" "$nucleus" generate -m "$model"'

# --- every command's help against what it accepts -------------------------------------
python3 - "$nucleus" "$tmp" <<'PY' || { echo "FAIL: help against the parser"; fail=$((fail + 1)); }
import re, subprocess, sys
nucleus, tmp = sys.argv[1], sys.argv[2]
problems = []

def run(args):
    p = subprocess.run([nucleus] + args, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr

# "  -p, --prompt, --text TEXT   the text": names, an optional placeholder,
# then the help after two or more spaces (or on the next line when the
# names are long).
ROW = re.compile(r"^ {2,6}(-{1,2}[a-z][a-z0-9-]*(?:, -{1,2}[a-z][a-z0-9-]*)*)"
                 r"(?: ([A-Z][A-Za-z0-9,=_|]*))?(?: {2,}(\S.*))?$")

def options_of(words):
    rc, out, err = run(words + ["--help"])
    if rc != 0 or err or not out.startswith("usage: "):
        problems.append(f"{' '.join(words)} --help: rc {rc}, stderr {err!r}")
        return [], out
    rc2, out2, _ = run(words + ["-h"])
    if rc2 != 0 or out2 != out:
        problems.append(f"{' '.join(words)} -h differs from --help")
    lines = out.split("\n")
    rows = []
    for i, line in enumerate(lines):
        m = ROW.match(line)
        if not m:
            continue
        names = m.group(1).split(", ")
        text = m.group(3) or (lines[i + 1].strip() if i + 1 < len(lines) and
                               lines[i + 1].startswith(" " * 10) else "")
        if not text:
            problems.append(f"{' '.join(words)}: {names} has no help")
        rows.append((names, m.group(2)))
    return rows, out

def check_command(words):
    rows, out = options_of(words)
    seen = set()
    for names, placeholder in rows:
        for name in names:
            if name in seen:
                problems.append(f"{' '.join(words)}: {name} appears twice in the help")
            seen.add(name)
            if name in ("-h", "--help"):
                continue
            if placeholder:
                # the last argument: the parser must ask for its value
                rc, _, err = run(words + [name])
                if rc != 2 or f"{name} needs a value: {name} {placeholder}" not in err:
                    problems.append(f"{' '.join(words)} {name}: expected a value ({placeholder}), "
                                    f"got rc {rc}: {err.strip()}")
            else:
                # a flag takes nothing: the next argument is read as an option
                rc, _, err = run(words + [name, "--zz-not-an-option"])
                if rc != 2 or "unknown option '--zz-not-an-option'" not in err:
                    problems.append(f"{' '.join(words)} {name}: expected a flag, "
                                    f"got rc {rc}: {err.strip()}")
    if "--help" not in seen:
        problems.append(f"{' '.join(words)}: the help does not list --help")
    return seen, out

def subcommands(out):
    part = out.split("\ncommands:\n", 1)
    if len(part) < 2:
        return []
    return [l.split()[0] for l in part[1].split("\n") if l.startswith("  ") and l.split()]

names, top = check_command([])
commands = subcommands(top)
want = {"generate", "chat", "compare", "inspect", "info", "tokenize", "watermark", "template",
        "grammar", "bench", "perplexity", "score", "embed", "serve", "quantize", "pull"}
if set(commands) != want:
    problems.append(f"nucleus --help lists {commands}")
accepted = {}
for c in commands:
    accepted[c], out = check_command([c])
    for sub in subcommands(out):
        accepted[c + " " + sub], _ = check_command([c, sub])

# the rows the parse found must include what each command is known to take,
# so that a help the pattern misses cannot pass
expect = {"generate": {"-p", "--prompt", "--temp", "--temperature", "--stop", "--logit-bias",
                       "--json-whitespace", "--watermark-context", "-n", "--draft-fixed"},
          "serve": {"-np", "--parallel", "--api-key-file", "--test-step-delay-ms", "--kv-type"},
          "watermark detect": {"--watermark", "--key", "-p", "--text", "--tokens"},
          "watermark cost": {"--steps", "--watermark-gamma"},
          "pull": {"-q", "--quiet"}, "grammar": {"--gbnf", "--ws"},
          "score bleu": {"-tok", "--tokenize", "-lc", "--smooth-method", "--weights"},
          "score rouge": {"--types", "--stemmer", "--whole-file", "--bootstrap", "--seed"}}
for c, names in expect.items():
    if not names <= accepted.get(c, set()):
        problems.append(f"{c}: the help lacks {sorted(names - accepted.get(c, set()))}")
total = sum(len(v) for v in accepted.values())
if total < 250:
    problems.append(f"only {total} option names found in the helps")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
n=$((n + 1))

echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
