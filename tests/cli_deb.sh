#!/usr/bin/env bash
# The Debian package: `cpack -G DEB` in the build directory makes it, it
# installs with dpkg, a small C program builds against it with
# `pkg-config --cflags --libs nucleus` and generates from the packaged demo
# model, `nucleus` and its manual page are there, and `dpkg -r` removes every
# file again. Skipped (77) when not root, without dpkg-deb, in a sanitizer
# build (its libraries need the sanitizer runtime), or when a nucleus
# package is already installed (the test would remove it).
#   cli_deb.sh NUCLEUS SHARED TMP BUILD_DIR SANITIZE
set -uo pipefail
build=$4 sanitize=$5 tmp=$3/cli_deb
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root to install a package"; exit 77; }
command -v dpkg-deb >/dev/null && command -v cpack >/dev/null || { echo "skipped: no dpkg-deb/cpack"; exit 77; }
[ "$sanitize" = 1 ] && { echo "skipped: sanitizer build"; exit 77; }
dpkg-query -W nucleus >/dev/null 2>&1 && { echo "skipped: a nucleus package is already installed"; exit 77; }
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }

(cd "$build" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1)
deb=$(ls "$tmp"/pkg/nucleus_*.deb 2>/dev/null | head -1)
check "cpack made a .deb" '[ -n "$deb" ]'
[ -n "$deb" ] || { cat "$tmp/cpack.log"; exit 1; }
dpkg-deb -c "$deb" >"$tmp/contents"
for f in ./usr/bin/nucleus ./usr/include/nucleus.h ./usr/share/man/man1/nucleus.1 \
         ./usr/share/nucleus/models/stories260K.gguf; do
  check "the package holds $f" 'grep -q " $f\$" "$tmp/contents"'
done
check "a versioned shared object with its soname link" 'grep -qE "libnucleus\.so\.0\.[0-9]" "$tmp/contents" && grep -q "libnucleus.so.0 ->" "$tmp/contents"'
check "pkg-config files" 'grep -q "pkgconfig/nucleus.pc" "$tmp/contents" && grep -q "pkgconfig/nucleus-hub.pc" "$tmp/contents"'
check "the package depends on the libraries it links" 'grep -q libpcre2 <<<"$(dpkg-deb -f "$deb" Depends)"'

apt-get install -y -qq "$deb" >"$tmp/install.log" 2>&1 || dpkg -i "$deb" >>"$tmp/install.log" 2>&1
check "it installs" 'dpkg-query -W nucleus >/dev/null 2>&1'
check "nucleus runs from the package" 'grep -q "^nucleus " <<<"$(/usr/bin/nucleus --version)"'
check "its manual page renders" 'grep -q "COMMAND: GENERATE" <<<"$(man -l /usr/share/man/man1/nucleus.1 2>/dev/null; zcat -f /usr/share/man/man1/nucleus.1*)"'
check "generate without -m finds the packaged demo model" '/usr/bin/nucleus generate -p "Once" -n 4 --temp 0 >/dev/null 2>&1'

cat >"$tmp/probe.c" <<'C'
#include <stdio.h>
#include <nucleus.h>
int main(int argc, char **argv) {
    nu_model *m; nu_context *c; nu_error err;
    if (nu_model_load(argv[1], NULL, &m, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    if (nu_context_new(m, NULL, &c, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    nu_generate_params p = nu_generate_default_params();
    p.n_predict = 8;
    p.sampling.temperature = 0;
    nu_generate_result r;
    if (nu_generate(c, "Once upon a time", &p, &r, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    printf("%s\n", r.text);
    nu_generate_result_free(&r);
    nu_context_free(c);
    nu_model_free(m);
    return 0;
}
C
cc $(pkg-config --cflags nucleus) -o "$tmp/probe" "$tmp/probe.c" $(pkg-config --libs nucleus) 2>"$tmp/cc.log"
check "a C program builds with pkg-config --cflags --libs nucleus" '[ -x "$tmp/probe" ]'
out=$("$tmp/probe" /usr/share/nucleus/models/stories260K.gguf 2>&1)
check "and generates with the installed library" '[ -n "$out" ] && grep -q "/libnucleus.so.0" <<<"$(ldd "$tmp/probe")"'
want=$(/usr/bin/nucleus generate -p "Once upon a time" -n 8 --temp 0 2>/dev/null)
check "the same text as the packaged nucleus" '[ -n "$want" ] && { [ "$out" = "Once upon a time$want" ] || [ "$out" = "$want" ]; }'

dpkg -r nucleus >"$tmp/remove.log" 2>&1 && dpkg -P nucleus >>"$tmp/remove.log" 2>&1
check "it is removed and purged" '! grep -q "installed" <<<"$(dpkg-query -W -f="\${Status}" nucleus 2>/dev/null)"'
left=""
while read -r _ _ _ _ _ path _; do
  p=${path#.}
  [ -n "$p" ] && [ "$p" != / ] && [ ! -d "$p" ] && [ -e "$p" ] && left="$left $p"
done <"$tmp/contents"
check "no file of the package is left" '[ -z "$left" ]'
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
