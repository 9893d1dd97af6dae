#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (NU_FUZZ=ON) and runs the GGUF
# fuzzer for a bounded time. Exits non-zero if the fuzzer finds a crash, a
# leak or undefined behaviour; the input that triggered it is left in the
# build directory's fuzz-artifacts/.
#
# usage: scripts/fuzz.sh [SECONDS]        (default 60)
#   NU_FUZZ_BUILD   build directory (default: build-fuzz in the project root)
#   NU_FUZZ_JOBS    parallel fuzzing processes (default 1)
set -euo pipefail

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
  echo "usage: $0 [SECONDS]" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${NU_FUZZ_BUILD:-$root/build-fuzz}"
jobs="${NU_FUZZ_JOBS:-1}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNU_FUZZ=ON -DNU_TESTS=OFF >/dev/null
# Only the fuzzer: it compiles its own copy of the sources it needs.
cmake --build "$build" --target fuzz_gguf

# New inputs go to a working corpus in the build directory; the committed
# seeds are only read.
work="$build/fuzz-corpus/gguf"
artifacts="$build/fuzz-artifacts/"
mkdir -p "$work" "$artifacts"

# With several jobs libFuzzer runs them as child processes logging to fuzz-N.log.
parallel=()
if [ "$jobs" -gt 1 ]; then parallel=(-jobs="$jobs" -workers="$jobs"); fi

echo "fuzzing gguf for ${seconds}s ..."
cd "$build"
"$build/fuzz/fuzz_gguf" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -dict="$root/fuzz/gguf.dict" -artifact_prefix="$artifacts" -print_final_stats=1 \
  "${parallel[@]}" "$work" "$root/fuzz/corpus/gguf"
