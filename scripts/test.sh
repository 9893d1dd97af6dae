#!/usr/bin/env bash
# The test suite: a release build and an ASan+UBSan build, each running every
# test under ctest, then the GGUF fuzzer for a bounded time.
#   scripts/test.sh             everything
#   FUZZ_SECONDS=0 scripts/test.sh   skip the fuzzer
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --deps

jobs=$(nproc)
# The server tests (tests/cli_server.sh) use the official OpenAI, Anthropic and Ollama clients
# from npm.
if command -v npm >/dev/null && { [ ! -d tests/server/node_modules/openai ] ||
  [ ! -d tests/server/node_modules/@anthropic-ai/sdk ] || [ ! -d tests/server/node_modules/ollama ]; }; then
  (cd tests/server && npm ci --no-audit --no-fund --loglevel=error)
fi
# The constrained-generation test validates its outputs with ajv from npm.
if command -v npm >/dev/null && [ ! -d tests/js/node_modules/ajv-formats ]; then
  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
fi
# The web page's tests (tests/cli_web.sh) drive Chromium with playwright-core from npm.
if command -v npm >/dev/null && [ ! -d tests/web/node_modules/playwright-core ]; then
  (cd tests/web && npm ci --no-audit --no-fund --loglevel=error)
fi
# The architecture tests' tiny models, written once for both builds.
export NU_ARCH_CACHE="$PWD/build-arch-models"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
(cd build && ctest --output-on-failure -j "$jobs")

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DNU_SANITIZE=ON >/dev/null
cmake --build build-asan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j "$jobs")

if [ "${FUZZ_SECONDS:-150}" != 0 ] && [ -x scripts/fuzz.sh ]; then
  scripts/fuzz.sh "${FUZZ_SECONDS:-150}"
fi
