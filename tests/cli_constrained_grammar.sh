#!/usr/bin/env bash
# `nucleus grammar`: prints the GBNF of a JSON Schema, regex or choice list,
# reports GBNF errors with line and column, and checks texts (exit 0 for a
# match, 1 otherwise, 2 for a usage error).
set -uo pipefail
nucleus=$1 tmp=$3/cli_constrained_grammar
mkdir -p "$tmp"
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }

"$nucleus" grammar --regex '[0-9]{3}-[a-z]+' --check '123-abc' >"$tmp/out" 2>&1
rc=$?
check "a regex match exits 0" '[ $rc -eq 0 ] && grep -qx match "$tmp/out"'
"$nucleus" grammar --regex '[0-9]{3}-[a-z]+' --check '12' >"$tmp/out" 2>&1
rc=$?
check "a prefix is incomplete, exit 1" '[ $rc -eq 1 ] && grep -q "^incomplete" "$tmp/out"'
"$nucleus" grammar --regex '[0-9]{3}' --check '12x' >"$tmp/out" 2>&1
rc=$?
check "a mismatch names the byte" '[ $rc -eq 1 ] && grep -q "no match: byte 2 (0x78)" "$tmp/out"'

"$nucleus" grammar --choice 'yes,no,a\,b' >"$tmp/out" 2>&1
rc=$?
check "choices print as GBNF" 'grep -qx "root ::= \"yes\" | \"no\" | \"a,b\"" "$tmp/out"'
"$nucleus" grammar --choice 'yes,no,a\,b' --check 'a,b' >/dev/null 2>&1
rc=$?
check "an escaped comma stays in the choice" '[ $rc -eq 0 ]'

cat >"$tmp/schema.json" <<'JSON'
{"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 12},
 "when": {"type": "string", "format": "date"}}, "required": ["n"]}
JSON
"$nucleus" grammar --json-schema "$tmp/schema.json" >"$tmp/gbnf" 2>&1
rc=$?
check "a schema prints its GBNF" 'grep -q "^root ::= " "$tmp/gbnf" && grep -q "^date ::= " "$tmp/gbnf"'
"$nucleus" grammar --gbnf "$tmp/gbnf" --check '{"n":12,"when":"2024-02-29"}' >/dev/null 2>&1
rc=$?
check "the printed GBNF compiles and matches" '[ $rc -eq 0 ]'
"$nucleus" grammar --json-schema "$tmp/schema.json" --check '{"n":13}' >/dev/null 2>&1
rc=$?
check "out of range is refused" '[ $rc -eq 1 ]'
printf '{"type": "string", "format": "hostname"}' >"$tmp/bad.json"
"$nucleus" grammar --json-schema "$tmp/bad.json" >"$tmp/out" 2>&1
rc=$?
check "unsupported formats are errors" '[ $rc -eq 1 ] && grep -q "format .hostname. is not supported" "$tmp/out"'

printf 'root ::= "a"\n  | [b-c\n' >"$tmp/bad.gbnf"
"$nucleus" grammar --gbnf "$tmp/bad.gbnf" >"$tmp/out" 2>&1
rc=$?
check "GBNF errors give line and column" '[ $rc -eq 1 ] && grep -q "line 2, column 5: unterminated character class" "$tmp/out"'

"$nucleus" grammar --json --ws 1 --check '{"a": [1, {"b": null}]}' >/dev/null 2>&1
rc=$?
check "--json with whitespace" '[ $rc -eq 0 ]'
"$nucleus" grammar --json --check '[1]' >/dev/null 2>&1
rc=$?
check "--json wants an object" '[ $rc -eq 1 ]'
"$nucleus" grammar >/dev/null 2>&1
rc=$?
check "no source is a usage error" '[ $rc -eq 2 ]'
"$nucleus" grammar --regex 'a(?=b)' >"$tmp/out" 2>&1
rc=$?
check "lookaround is refused" '[ $rc -eq 1 ] && grep -q "lookaround" "$tmp/out"'

echo "$((n - fail))/$n checks passed"
[ "$fail" -eq 0 ]
