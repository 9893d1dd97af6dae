#!/usr/bin/env bash
# `nucleus template` prints exactly the renderings in ../shared/chat_templates
# (compared byte for byte with cmp), takes the template from a model's
# vocabulary with its BOS / EOS texts, renders built-in templates, and fails
# with a message where the template raises.
set -euo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_template
mkdir -p "$tmp"
export SOURCE_DATE_EPOCH=1795219200
ct=$shared/chat_templates
fail=0

# Writes case $1 of cases.json as a conversation file for the CLI.
conversation() {
  python3 - "$ct/cases.json" "$1" "$tmp/$1.json" <<'PY'
import json, sys
case = json.load(open(sys.argv[1]))[sys.argv[2]]
out = {"messages": case["messages"]}
if case["tools"] is not None:
    out["tools"] = case["tools"]
json.dump(out, open(sys.argv[3], "w"), ensure_ascii=False)
PY
}

# check NAME CASE [options...]: renders and compares with the expected file.
check() {
  local name=$1 kase=$2
  shift 2
  if ! "$nucleus" template --template "$ct/$name.jinja" --messages "$tmp/$kase.json" "$@" \
      >"$tmp/$name.$kase.out" 2>"$tmp/$name.$kase.err"; then
    echo "FAIL $name.$kase: $(cat "$tmp/$name.$kase.err")"
    fail=$((fail + 1))
  elif ! cmp -s "$tmp/$name.$kase.out" "$ct/expected/$name.$kase.txt"; then
    echo "FAIL $name.$kase: output differs"
    cmp "$tmp/$name.$kase.out" "$ct/expected/$name.$kase.txt" || true
    fail=$((fail + 1))
  fi
}

for kase in a_hello b_system_gen c_system_nogen d_unicode e_three_turns f_tools; do conversation $kase; done
check llama3_1_instruct d_unicode --add-generation-prompt --bos-token '<|begin_of_text|>' --eos-token '<|eot_id|>'
check llama3_2_instruct f_tools --add-generation-prompt --bos-token '<|begin_of_text|>' --eos-token '<|eot_id|>'
check qwen2_5_instruct f_tools --add-generation-prompt --eos-token '<|im_end|>'
check granite_3_0_instruct f_tools --add-generation-prompt --bos-token '<|end_of_text|>' --eos-token '<|end_of_text|>'
check zephyr_tinyllama c_system_nogen --bos-token '<s>' --eos-token '</s>'
check falcon_7b_instruct d_unicode --add-generation-prompt --eos-token '<|endoftext|>'
check llama2_chat e_three_turns --bos-token '<s>' --eos-token '</s>'

# a plain list of messages works too, and the flag can come from the file
python3 -c "import json; print(json.dumps(json.load(open('$tmp/a_hello.json'))['messages']))" >"$tmp/list.json"
"$nucleus" template --template "$ct/qwen2_instruct.jinja" --messages "$tmp/list.json" \
  --add-generation-prompt --eos-token '<|im_end|>' >"$tmp/list.out"
cmp -s "$tmp/list.out" "$ct/expected/qwen2_instruct.a_hello.txt" || { echo "FAIL list form"; fail=$((fail + 1)); }

# the template embedded in the Phi-3 vocabulary, with the model's own BOS / EOS texts
phi3=$shared/vocab/ggml-vocab-phi-3.gguf
"$nucleus" template -m "$phi3" --messages "$tmp/b_system_gen.json" --add-generation-prompt >"$tmp/phi3.out"
cmp -s "$tmp/phi3.out" "$ct/expected/phi3_mini_instruct_gguf.b_system_gen.txt" \
  || { echo "FAIL phi-3 vocabulary template"; fail=$((fail + 1)); }

# built-in templates, alone and with a model's tokens
out=$("$nucleus" template --chat-template chatml --messages "$tmp/a_hello.json" --add-generation-prompt)
want=$'<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant'
[ "$out" = "$want" ] || { echo "FAIL chatml built-in: '$out'"; fail=$((fail + 1)); }
out=$("$nucleus" template -m "$phi3" --chat-template llama2 --messages "$tmp/a_hello.json")
[ "$out" = "<s>[INST] Hello! [/INST]" ] || { echo "FAIL llama2 built-in: '$out'"; fail=$((fail + 1)); }
"$nucleus" template --list | grep -qx plain || { echo "FAIL --list"; fail=$((fail + 1)); }

# a model without a template: a clear error that suggests a built-in
if "$nucleus" template -m "$shared/models/stories260K.gguf" --messages "$tmp/a_hello.json" 2>"$tmp/err.txt"; then
  echo "FAIL stories260K should have no template"; fail=$((fail + 1))
fi
grep -q "plain" "$tmp/err.txt" || { echo "FAIL no suggestion: $(cat "$tmp/err.txt")"; fail=$((fail + 1)); }

# raise_exception in the template: exit status 1 and its message
if "$nucleus" template --template "$ct/gemma2_it.jinja" --messages "$tmp/b_system_gen.json" 2>"$tmp/err.txt"; then
  echo "FAIL gemma2 should refuse a system message"; fail=$((fail + 1))
fi
grep -q "System role not supported" "$tmp/err.txt" || { echo "FAIL message: $(cat "$tmp/err.txt")"; fail=$((fail + 1)); }

# usage errors
if "$nucleus" template --messages "$tmp/a_hello.json" 2>/dev/null; then echo "FAIL no template"; fail=$((fail + 1)); fi
echo '{"messages": 3}' >"$tmp/bad.json"
if "$nucleus" template --chat-template chatml --messages "$tmp/bad.json" 2>/dev/null; then
  echo "FAIL bad messages"; fail=$((fail + 1))
fi

if [ "$fail" -ne 0 ]; then
  echo "cli_template: $fail failure(s)"
  exit 1
fi
echo "cli_template: all checks passed"
