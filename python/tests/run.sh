#!/usr/bin/env bash
# Runs the Python package's tests (pytest) against a built library; ctest
# calls it (tests/CMakeLists.txt). Exit 77 (skipped) when no Python with
# pytest is installed (scripts/setup.sh --deps installs python3-pytest).
# Arguments: $1 libnucleus.so, $2 the nucleus executable, $3 scratch directory.
set -uo pipefail
lib=$1 bin=$2 tmp=$3/python
here=$(cd "$(dirname "$0")" && pwd)
python=
# Debian's python3-pytest goes with Debian's python3; another python3 on the
# PATH (pyenv, a virtual environment) is used when it has pytest itself.
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import pytest" 2>/dev/null; then python=$p; break; fi
done
if [ -z "$python" ]; then
  echo "SKIPPED: no python3 with pytest (install python3-pytest: scripts/setup.sh --deps)"
  exit 77
fi
rm -rf "$tmp" && mkdir -p "$tmp"
export NUCLEUS_LIBRARY=$lib NUCLEUS_BIN=$bin PYTHONDONTWRITEBYTECODE=1
unset NUCLEUS_CACHE NUCLEUS_HF_ENDPOINT
# A sanitizer build's library needs the sanitizer runtimes loaded first, and
# the interpreter's own allocations are not ours to check for leaks.
if [ "${NU_SANITIZE:-}" = 1 ]; then
  asan=$(${CC:-cc} -print-file-name=libasan.so) ubsan=$(${CC:-cc} -print-file-name=libubsan.so)
  export LD_PRELOAD="$asan $ubsan" ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
fi
cd "$here/.." && exec "$python" -m pytest -q -p no:cacheprovider --basetemp "$tmp" tests
