#!/usr/bin/env bash
# Installs what nucleus needs to build (Debian packages) and builds it into
# build/. Safe to run again: packages already present are not reinstalled, so
# once they are there it needs no network.
#   scripts/setup.sh            install the build dependencies and build
#   scripts/setup.sh --deps     install the build and test dependencies only
#                               (what scripts/test.sh runs)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config git python3 ca-certificates
          libcurl4-openssl-dev libssl-dev libcjson-dev libcmocka-dev libpcre2-dev
          libmicrohttpd-dev libedit-dev clang libclang-rt-14-dev clang-format)
# Tests only: the Python package (pip, setuptools, wheel for `pip install
# ./python`, pytest), nginx for the load-balancing test (tests/cli_nginx.sh),
# chromium for the web page's end-to-end tests (tests/cli_web.sh), dpkg-dev and
# man-db for the Debian package test (tests/cli_deb.sh).
test_packages=(python3-pip python3-setuptools python3-wheel python3-pytest nginx chromium dpkg-dev man-db)
[ "${1:-}" = "--deps" ] && packages+=("${test_packages[@]}")

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
