#!/usr/bin/env bash
# The web page of `nucleus serve` end to end: tests/web/web.test.mjs drives
# it in Debian's headless Chromium (/usr/bin/chromium, installed by
# scripts/setup.sh) with playwright-core from npm (installed here with
# `npm ci` the first time), against stories260K on 127.0.0.1. Screenshots
# go to the build's tmp dir (tmp/cli_web/*.png).
set -uo pipefail
nucleus=$(realpath "$1") shared=$(realpath "$2") tmp=$(realpath "$3")/cli_web
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$tmp"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "FAIL: the web tests need node (>= 20) and npm" >&2
  exit 1
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "FAIL: the web tests need Debian's chromium (scripts/setup.sh --deps installs it)" >&2
  exit 1
fi
if [ ! -d "$here/web/node_modules/playwright-core" ]; then
  (
    flock 9
    [ -d "$here/web/node_modules/playwright-core" ] ||
      (cd "$here/web" && npm ci --no-audit --no-fund --loglevel=error) >&2
  ) 9>"$tmp/npm.lock" || { echo "FAIL: npm ci in tests/web" >&2; exit 1; }
fi

cd "$tmp" || exit 1
NUCLEUS_BIN="$nucleus" NUCLEUS_SHARED="$shared" SHOTS="$tmp" TMPDIR="$tmp" \
  timeout 540 node --test --test-timeout=240000 --test-concurrency=1 --test-reporter=spec "$here/web/"
