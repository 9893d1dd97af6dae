#!/usr/bin/env bash
# `nucleus serve` driven by the official OpenAI, Anthropic and Ollama
# clients (npm `openai`, `@anthropic-ai/sdk`, `ollama`) under node's
# built-in test runner:
# tests/server/*.test.mjs. Installs the clients with `npm ci` the first
# time (tests/server/node_modules, and ajv in tests/js/node_modules for the
# tool-call tests). Every server the tests start listens on 127.0.0.1 on a
# free port.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_server
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$tmp"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "FAIL: the server tests need node (>= 20) and npm" >&2
  exit 1
fi
# the clients of package.json: openai, @anthropic-ai/sdk, ollama
have_clients() {
  [ -d "$here/server/node_modules/openai" ] && [ -d "$here/server/node_modules/@anthropic-ai/sdk" ] &&
    [ -d "$here/server/node_modules/ollama" ]
}
if ! have_clients; then
  # one installer at a time (the release and sanitizer builds may run together)
  (
    flock 9
    have_clients ||
      (cd "$here/server" && npm ci --no-audit --no-fund --loglevel=error) >&2
  ) 9>"$tmp/npm.lock" || { echo "FAIL: npm ci in tests/server" >&2; exit 1; }
fi

# tools.test.mjs validates arguments with ajv from tests/js
if [ ! -d "$here/js/node_modules/ajv" ]; then
  (
    flock 9
    [ -d "$here/js/node_modules/ajv" ] ||
      (cd "$here/js" && npm ci --no-audit --no-fund --loglevel=error) >&2
  ) 9>"$tmp/npm-js.lock" || { echo "FAIL: npm ci in tests/js" >&2; exit 1; }
fi

cd "$tmp" || exit 1
# a sanitizer build ($5 = 1) runs several times slower: longer per-file limits
per_file=180000 total=1500
# the soak (soak.test.mjs): 2 minutes of mixed load; 30 s from 4 clients under
# the sanitizers, which share the machine with the rest of the suite and whose
# allocator keeps freed memory aside (so resident memory is not checked there)
soak_s=${NUCLEUS_SOAK_SECONDS:-120} soak_c=${NUCLEUS_SOAK_CONCURRENCY:-8} soak_rss=1
[ "${5:-0}" = 1 ] && per_file=480000 soak_s=${NUCLEUS_SOAK_SECONDS:-30} \
  soak_c=${NUCLEUS_SOAK_CONCURRENCY:-4} soak_rss=0
NUCLEUS_SOAK_SECONDS=$soak_s NUCLEUS_SOAK_CONCURRENCY=$soak_c NUCLEUS_SOAK_CHECK_RSS=$soak_rss \
NUCLEUS_BIN="$nucleus" NUCLEUS_SHARED="$shared" TMPDIR="$tmp" \
  timeout "$total" node --test --test-timeout="$per_file" --test-reporter=spec "$here/server/"
