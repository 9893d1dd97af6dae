#!/usr/bin/env bash
# src/base/unicode_tables.h is what scripts/gen_unicode_tables.py
# writes: regenerated here and compared byte for byte, when this machine's
# Python has the Unicode version the committed tables were made from.
#   unicode_tables.sh SOURCE_DIR TMP_DIR
set -u
src=$1 tmp=$2/unicode_tables
mkdir -p "$tmp"
header=$src/src/base/unicode_tables.h
want=$(grep -o 'NU_UNICODE_VERSION "[^"]*"' "$header" | cut -d'"' -f2)
have=$(python3 -c 'import unicodedata; print(unicodedata.unidata_version)')
if [ "$want" != "$have" ]; then
  echo "skipped: the tables are Unicode $want, this Python's unicodedata is $have"
  exit 0
fi
python3 "$src/scripts/gen_unicode_tables.py" "$tmp/tables.h" || exit 1
if ! cmp -s "$header" "$tmp/tables.h"; then
  echo "FAIL: the committed tables differ from the generator's output:"
  diff "$header" "$tmp/tables.h" | head -20
  exit 1
fi
echo "unicode tables: regenerated (Unicode $have), identical"
