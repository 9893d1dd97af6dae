#!/usr/bin/env bash
# `nucleus chat` holds a multi-turn session on stories260K with a built-in
# template, driven through stdin: replies stream, later turns reuse the
# cached conversation, and /save, /load, /reset, /system and /exit work.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_chat
mkdir -p "$tmp"
model=$shared/models/stories260K.gguf
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }

printf 'Once upon a time there was a cat.\nWhat did the cat do?\n/save %s\n/exit\nnever read\n' "$tmp/conv.json" |
  "$nucleus" chat -m "$model" --chat-template plain -n 16 --temp 0 >"$tmp/out1" 2>"$tmp/err1"
rc=$?
check "exits 0" '[ $rc -eq 0 ]'
check "two replies with statistics" '[ "$(grep -c "prompt tokens" "$tmp/err1")" -eq 2 ]'
check "the second turn reuses the cache" 'grep "prompt tokens" "$tmp/err1" | tail -1 | grep -qE ", [1-9][0-9]* reused"'
check "the first turn reuses nothing" 'grep "prompt tokens" "$tmp/err1" | head -1 | grep -q ", 0 reused"'
check "/save wrote 4 messages" 'python3 -c "import json,sys; m=json.load(open(\"$tmp/conv.json\")); sys.exit(0 if [x[\"role\"] for x in m]==[\"user\",\"assistant\",\"user\",\"assistant\"] else 1)"'
check "/exit stops reading" '! grep -q "never read" "$tmp/out1"'

# /load continues a saved conversation: the next reply's prompt holds all of it
printf '/load %s\nAnd then?\n/reset\nHello\n/system You tell stories.\nHi\n' "$tmp/conv.json" |
  "$nucleus" chat -m "$model" --chat-template plain -n 8 --temp 0 >"$tmp/out2" 2>"$tmp/err2"
check "/load reports 4 messages" 'grep -q "loaded 4 messages" "$tmp/out2"'
check "three replies after load, reset and system" '[ "$(grep -c "prompt tokens" "$tmp/err2")" -eq 3 ]'
first=$(grep "prompt tokens" "$tmp/err2" | head -1 | grep -oE "^\[[0-9]+" | tr -d "[")
second=$(grep "prompt tokens" "$tmp/err2" | sed -n 2p | grep -oE "^\[[0-9]+" | tr -d "[")
check "the loaded conversation is longer than a reset one" '[ "$first" -gt "$second" ]'
check "/system clears and sets" 'grep -q "system message set" "$tmp/out2"'

# a bad conversation file is refused with a message, and the chat goes on
echo '{"not": "a list"}' >"$tmp/bad.json"
printf '/load %s\nHi\n' "$tmp/bad.json" | "$nucleus" chat -m "$model" --chat-template plain -n 4 --temp 0 >/dev/null 2>"$tmp/err3"
check "bad /load file refused" 'grep -q "is not a list" "$tmp/err3"'
check "and the chat went on" 'grep -q "prompt tokens" "$tmp/err3"'
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
