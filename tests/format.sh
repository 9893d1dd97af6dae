#!/usr/bin/env bash
# Every C file of the tree is formatted as .clang-format says
# (clang-format --dry-run --Werror; scripts/setup.sh installs clang-format).
#   format.sh SOURCE_DIR
set -u
cd "$1" || exit 1
command -v clang-format >/dev/null || { echo "FAIL: clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find src include cli server tests fuzz bench -name '*.[ch]')
out=$(clang-format --dry-run --Werror $files 2>&1)
if [ -n "$out" ]; then
  echo "FAIL: files differ from .clang-format (run clang-format -i on them):"
  grep -o '^[^:]*\.[ch]' <<<"$out" | sort -u
  exit 1
fi
echo "format: $(wc -w <<<"$files") files as .clang-format says"
