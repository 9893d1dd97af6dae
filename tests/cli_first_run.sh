#!/usr/bin/env bash
# A new user's first commands, on a machine without network: README's first
# command runs on the demo model the repository carries (models/, the default
# when -m is not given), found beside the executable in a build tree and in an
# installed layout; without it, the error names where it was looked for; and
# README's second example (an hf: reference) fails cleanly when the server
# cannot be reached, saying what to do and leaving nothing in the cache.
# Arguments: $1 nucleus binary, $2 shared assets, $3 scratch directory.
set -uo pipefail
nucleus=$1 tmp=$3/cli_first_run
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$tmp" && mkdir -p "$tmp"
unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY HF_TOKEN
# No network: downloads go to a loopback port that nothing listens on.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export NUCLEUS_HF_ENDPOINT=http://127.0.0.1:$port NUCLEUS_CACHE=$tmp/cache
. "$(dirname "$0")/cli_lib.sh"

# The continuation another GGUF implementation gives for this file, greedy
# (models/PROVENANCE.md).
greedy=", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.
Lily's mom said"

# README's first command, as written there.
first='scripts/setup.sh && build/nucleus generate -p "Once upon a time" -n 64'
check "README's first command is: $first" grep -qF "    $first" "$src/README.md"

# A build tree: build/nucleus finds build/../models. A build directory
# elsewhere gets the same layout made for it.
bin=$nucleus
if [ ! -f "$(dirname "$nucleus")/../models/stories260K.gguf" ]; then
  mkdir -p "$tmp/tree/build" && cp "$nucleus" "$tmp/tree/build/" && ln -s "$src/models" "$tmp/tree/models"
  bin=$tmp/tree/build/nucleus
fi
text=$("$bin" generate -p "Once upon a time" -n 64 2>"$tmp/err1"); rc=$?
check "first command succeeds (rc=$rc, $(head -c 300 "$tmp/err1"))" test "$rc" -eq 0
check "first command prints text" test "$(printf %s "$text" | wc -w)" -ge 5
check "stderr names the demo model" grep -q "using the demo model .*models/stories260K.gguf" "$tmp/err1"
check "nothing was downloaded" test ! -e "$NUCLEUS_CACHE"
text=$("$bin" generate -p "Once upon a time" -n 64 --temp 0 2>/dev/null)
check "greedy text of the demo model" test "$text" = "$greedy"

# The other commands that take -m default to it too.
check "tokenize without -m" bash -c '"$0" tokenize -p "Once upon a time" --ids 2>/dev/null | grep -q "[0-9]"' "$bin"
check "info without -m" bash -c '"$0" info --no-tensors 2>/dev/null | grep -q "architecture: llama"' "$bin"
printf 'Once upon a time, there was a little girl named Lily. She loved to play outside.\n' >"$tmp/text.txt"
check "perplexity without -m" bash -c '"$0" perplexity -f "$1" --window 16 --json 2>/dev/null | grep -q "\"perplexity\""' "$bin" "$tmp/text.txt"

# Installed (cmake --install of this build into another prefix): the
# executable finds bin/../share/nucleus/models, with its licence beside it.
cmake --install "$(dirname "$nucleus")" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1; rc=$?
check "cmake --install (rc=$rc, $(tail -c 300 "$tmp/install.log"))" test "$rc" -eq 0
check "the model's licence and provenance are installed" \
  test -f "$tmp/prefix/share/nucleus/models/LICENSE" -a -f "$tmp/prefix/share/nucleus/models/PROVENANCE.md"
text=$("$tmp/prefix/bin/nucleus" generate -p "Once upon a time" -n 64 --temp 0 2>"$tmp/err2"); rc=$?
check "installed nucleus finds share/nucleus/models (rc=$rc, $(head -c 300 "$tmp/err2"))" test "$text" = "$greedy"
check "... and says which" grep -q "demo model $tmp/prefix/share/nucleus/models/stories260K.gguf" "$tmp/err2"

# No demo model anywhere: a clear error naming the places looked in (unless
# one is installed in the configured prefix on this machine).
mkdir -p "$tmp/bare/bin" && cp "$nucleus" "$tmp/bare/bin/"
out=$("$tmp/bare/bin/nucleus" generate -p "Once upon a time" -n 4 2>&1); rc=$?
if grep -q "using the demo model" <<<"$out"; then
  echo "note: a demo model is installed on this machine; the missing-model error was not checked"
else
  check "missing demo model: usage error (rc=$rc)" test "$rc" -eq 2
  check "missing demo model: message names -m and the places looked in" \
    grep -q "^nucleus: no model given (-m FILE.*demo model is not at $tmp/bare/bin/../models/stories260K.gguf" <<<"$out"
fi

# README's second example with no network: a clear error, nothing left behind.
out=$("$bin" generate -m hf:ggml-org/models/tinyllamas/stories260K.gguf -p "Once upon a time" -n 8 2>&1); rc=$?
check "hf: reference without network fails (rc=$rc)" test "$rc" -eq 1
check "the message says what to do ($out)" \
  grep -q "^nucleus: cannot download .*local .gguf file.*NUCLEUS_HF_ENDPOINT.*$NUCLEUS_CACHE" <<<"$out"
check "the failed download left nothing ($(find "$NUCLEUS_CACHE" -mindepth 1 2>/dev/null | head -3))" \
  test -z "$(find "$NUCLEUS_CACHE" -mindepth 1 2>/dev/null)"

check_report
