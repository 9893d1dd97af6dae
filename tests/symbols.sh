#!/usr/bin/env bash
# The shared libraries export exactly what include/nucleus.h declares with
# NU_API (libnucleus and libnucleus-hub together, each name once), and every
# global symbol of the static library is under the nu prefix.
#   symbols.sh HEADER LIBNUCLEUS.so LIBNUCLEUS-HUB.so LIBNUCLEUS.a
set -u
header=$1 core=$2 hub=$3 archive=$4
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# A sanitizer build adds symbols of its own beside each global (ASan's
# __odr_asan_gen_NAME, its registration hooks): they are the instrumentation's,
# not the library's, and are left out.
sanitizer='^_{2,3}(odr_asan|asan|ubsan|sanitizer|sancov|lsan)'
not_sanitizer() { grep -Ev "$sanitizer" || true; }
# Declarations may span lines: join them, then take the name before "(".
grep -v "^#" "$header" | tr "\n" " " | grep -o 'NU_API [^;{]*(' | sed -E 's/\($//; s/.*[ *]//' | sort >"$tmp/declared"
nm -D --defined-only "$core" | awk '$2 ~ /[TDBRVW]/ {print $3}' | not_sanitizer | sort >"$tmp/core"
nm -D --defined-only "$hub" | awk '$2 ~ /[TDBRVW]/ {print $3}' | not_sanitizer | sort >"$tmp/hub"
sort "$tmp/core" "$tmp/hub" >"$tmp/exported"
fail=0
n_decl=$(wc -l <"$tmp/declared")
[ "$n_decl" -ge 100 ] || { echo "FAIL: only $n_decl NU_API declarations found in $header"; fail=1; }
dups=$(uniq -d "$tmp/exported")
[ -z "$dups" ] || { echo "FAIL: exported by both libraries: $dups"; fail=1; }
extra=$(comm -13 "$tmp/declared" <(sort -u "$tmp/exported"))
[ -z "$extra" ] || { echo "FAIL: exported but not declared in the header:"; echo "$extra"; fail=1; }
missing=$(comm -23 "$tmp/declared" <(sort -u "$tmp/exported"))
[ -z "$missing" ] || { echo "FAIL: declared but not exported:"; echo "$missing"; fail=1; }
stray=$(nm -g --defined-only "$archive" | awk 'NF == 3 && $2 ~ /[TDBRVW]/ {print $3}' | not_sanitizer | grep -v '^nu_' | sort -u)
[ -z "$stray" ] || { echo "FAIL: global symbols of the static library outside the nu prefix:"; echo "$stray" | head -40; echo "($(wc -l <<<"$stray") in all)"; fail=1; }
[ $fail -eq 0 ] && echo "symbols: $n_decl declared = exported ($(wc -l <"$tmp/core") libnucleus, $(wc -l <"$tmp/hub") libnucleus-hub); static library all under nu_"
exit $fail
