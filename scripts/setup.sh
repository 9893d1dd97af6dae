#!/usr/bin/env bash
# Installs what nucleus needs to build (Debian packages) and builds it into
# build/. Safe to run again: packages already present are not reinstalled.
#   scripts/setup.sh            install dependencies and build
#   scripts/setup.sh --deps     install dependencies only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config git python3 ca-certificates
          libcurl4-openssl-dev libssl-dev libcjson-dev libcmocka-dev libpcre2-dev
          libmicrohttpd-dev libedit-dev clang libclang-rt-14-dev clang-format
          chromium) # chromium: the web page's end-to-end tests (tests/cli_web.sh)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "${1:-}" = "--deps" ] && exit 0

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
