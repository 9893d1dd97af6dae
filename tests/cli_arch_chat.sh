#!/usr/bin/env bash
# Each family end to end on a tiny random-weight model with its own
# tokenizer: `nucleus generate` runs, and `nucleus chat` renders the
# family's real chat template (../shared/chat_templates) and replies; GPT-2,
# which has no template, chats through the built-in plain one. The text is
# meaningless (random weights): what is checked is that every step works and
# that the template's markers reach the model (the prompt token count grows
# by the template's own tokens).
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_arch_chat
mkdir -p "$tmp"
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }
synth() { python3 "$shared/tools/synth_gguf.py" --shape tiny "$@" >/dev/null; }

# arch  vocabulary  template (or "" for the model's / the plain fallback)
while read -r arch vocab template; do
  model=$tmp/$arch.gguf
  synth --arch "$arch" --seed 3 --vocab-from "$shared/vocab/$vocab" -o "$model" || {
    echo "FAIL: synth $arch"; fail=$((fail + 1)); continue; }
  out=$("$nucleus" generate -m "$model" -p "Hello" -n 6 --temp 0 2>"$tmp/$arch.gen.err")
  check "$arch: generate" '[ $? -eq 0 ] && grep -q "generated: 6 tokens" "$tmp/$arch.gen.err"'
  args=(chat -m "$model" -n 4 --temp 0)
  [ "$template" != "-" ] && args+=(--chat-template "$shared/chat_templates/$template")
  printf 'Hi there\nAnd again\n' | "$nucleus" "${args[@]}" >"$tmp/$arch.out" 2>"$tmp/$arch.err"
  check "$arch: chat exits 0" '[ $? -eq 0 ]'
  check "$arch: two replies" '[ "$(grep -c "prompt tokens" "$tmp/$arch.err")" -eq 2 ]'
  p1=$(grep "prompt tokens" "$tmp/$arch.err" | head -1 | grep -oE "^\[[0-9]+" | tr -d "[")
  check "$arch: the template adds its own tokens around 'Hi there'" '[ "${p1:-0}" -gt 4 ]'
done <<'CASES'
gpt2 ggml-vocab-gpt-2.gguf -
qwen2 ggml-vocab-qwen2.gguf qwen2_5_instruct.jinja
qwen3 ggml-vocab-qwen2.gguf qwen3_0_6b.jinja
phi3 ggml-vocab-phi-3.gguf phi3_mini_instruct.jinja
gemma2 ggml-vocab-llama-spm.gguf gemma2_it.jinja
gemma3 ggml-vocab-llama-spm.gguf gemma2_it.jinja
starcoder2 ggml-vocab-starcoder.gguf -
stablelm ggml-vocab-gpt-neox.gguf -
CASES
grep -q "using the built-in 'plain'" "$tmp/gpt2.err"
check "gpt2 (no template) chats with the built-in plain template" '[ $? -eq 0 ]'

# Reasoning templates on the Qwen3 model. DeepSeek-R1's prompt opens the
# thinking: with a budget of 2 tokens the reply is 2 thinking tokens shown
# dimmed, the forced close (hidden), then the answer in the normal style.
q3=$tmp/qwen3.gguf
printf 'Hi\n' | CLICOLOR_FORCE=1 "$nucleus" chat -m "$q3" -n 8 --temp 0 --think-budget 2 \
  --chat-template "$shared/chat_templates/deepseek_r1_distill_qwen_32b.jinja" >"$tmp/r1.out" 2>"$tmp/r1.err"
check "r1: chat with a thinking budget exits 0" '[ $? -eq 0 ]'
check "r1: the thinking is dimmed, then the answer follows" \
  '[ "$(head -c 4 "$tmp/r1.out" | od -An -c | tr -d " ")" = "033[2m" ] && grep -q "$(printf "\033\\[0m")" "$tmp/r1.out"'
check "r1: the markers are not shown" '! grep -q "think>" "$tmp/r1.out"'
check "r1: 8 tokens generated" 'grep -q "| 8 tokens" "$tmp/r1.err"'
printf 'Hi\n' | NO_COLOR=1 "$nucleus" chat -m "$q3" -n 8 --temp 0 \
  --chat-template "$shared/chat_templates/deepseek_r1_distill_qwen_32b.jinja" >"$tmp/r1plain.out" 2>/dev/null
check "r1: no escape codes with NO_COLOR" '! grep -q "$(printf "\033")" "$tmp/r1plain.out"'
# Qwen3's switch: --no-think adds the template's empty block to the prompt
prompt_tokens() { grep "prompt tokens" "$1" | head -1 | grep -oE "^\[[0-9]+" | tr -d "["; }
printf 'Hi\n' | "$nucleus" chat -m "$q3" -n 2 --chat-template "$shared/chat_templates/qwen3_0_6b.jinja" \
  >/dev/null 2>"$tmp/think.err"
printf 'Hi\n' | "$nucleus" chat -m "$q3" -n 2 --no-think \
  --chat-template "$shared/chat_templates/qwen3_0_6b.jinja" >/dev/null 2>"$tmp/nothink.err"
printf '<think>\n\n</think>\n\n' >"$tmp/empty_block.txt"
empty=$("$nucleus" tokenize -m "$q3" --ids -f "$tmp/empty_block.txt" 2>/dev/null | wc -w)
check "qwen3: --no-think adds the empty thinking block ($empty tokens)" \
  '[ "$(prompt_tokens "$tmp/nothink.err")" -eq "$(( $(prompt_tokens "$tmp/think.err") + empty ))" ]'
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
