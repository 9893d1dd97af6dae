#!/usr/bin/env bash
# `nucleus quantize` to the K-quant types and llama.cpp's K mixes, on a small
# synthetic llama model whose rows are multiples of 256 (so the K types
# apply; ffn_down rows of 640 take the 32-element fallback): the file type
# numbers, the tensor types each recipe picks, and generation from every file.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_quantize_k
mkdir -p "$tmp"
fail=0 n=0
check() { n=$((n + 1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }

# synth_gguf.py with one more shape: n_embd 256, 4 layers, 4 heads sharing 1
# key/value head, n_ff 640.
model=$tmp/k256.gguf
python3 - "$shared/tools" "$shared/vocab/ggml-vocab-llama-spm.gguf" "$model" <<'PY' >/dev/null
import sys
sys.path.insert(0, sys.argv[1])
import synth_gguf as s
s.SHAPES["k256"] = s.Shape(256, 4, 4, 1, 640, 256)
sys.argv = ["synth_gguf.py", "--shape", "k256", "--type", "f32", "--fill", "random",
            "--scale", "0.05", "--output-scale", "0.5", "--vocab-from", sys.argv[2],
            "--vocab-size", "512", "--seed", "3", "-o", sys.argv[3]]
s.main()
PY
check "synthetic model written" '[ -s "$model" ]'

# The type of one tensor, from `nucleus info`.
ttype() { "$nucleus" info -m "$1" | awk -v t="$2" '$1 == t { print $2 }'; }
# The first greedy token of a prompt, and the number of tokens generated.
first() {
  "$nucleus" generate -m "$1" -p "Once upon a time" -n 8 --temp 0 --json-output 2>/dev/null |
    python3 -c 'import json,sys; o=json.loads(sys.stdin.readline()); print(o["tokens"][0] if o["completion_tokens"] == 8 else "short")'
}

# name, general.file_type, then tensor=type pairs the recipe must give
# (layers 2 and 3 are llama.cpp's "more bits" layers of a 4-layer model;
# n_head / n_head_kv = 4 gives q2_k's attn_v q4_k)
while read -r name ftype pairs; do
  out=$tmp/$name.gguf
  "$nucleus" quantize "$model" "$out" "$name" 2>"$tmp/err"
  check "$name: written" '[ -s "$out" ]'
  check "$name: general.file_type $ftype" 'grep -q "general.file_type .* $ftype$" <<<"$("$nucleus" info -m "$out" --no-tensors)"'
  for p in $pairs; do
    check "$name: ${p%=*} is ${p#*=}" '[ "$(ttype "$out" "${p%=*}")" = "${p#*=}" ]'
  done
  # The same weights dequantised to f32 give the same first token: the K
  # kernels (with int8 activations) compute the model the file describes.
  # (Against the original f32 weights the 2- and 3-bit files of this random
  # model already pick other tokens, with llama.cpp as with nucleus.)
  "$nucleus" quantize "$out" "$tmp/$name.f32.gguf" f32 2>/dev/null
  check "$name: generates, first token as with its weights in f32" '[ "$(first "$out")" = "$(first "$tmp/$name.f32.gguf")" ]'
done <<'EOF'
q2_k 10 blk.0.attn_q.weight=q2_k blk.0.attn_v.weight=q4_k blk.1.attn_output.weight=q3_k blk.0.ffn_down.weight=q4_0 output.weight=q6_k token_embd.weight=q2_k
q3_k_s 11 blk.0.attn_v.weight=q3_k blk.0.attn_output.weight=q3_k blk.0.ffn_down.weight=q4_0 output.weight=q6_k
q3_k_m 12 blk.0.attn_v.weight=q5_k blk.2.attn_v.weight=q4_k blk.0.attn_output.weight=q4_k blk.3.ffn_gate.weight=q3_k blk.1.ffn_down.weight=q5_0
q3_k_l 13 blk.3.attn_v.weight=q5_k blk.0.attn_output.weight=q5_k blk.0.ffn_up.weight=q3_k blk.1.ffn_down.weight=q5_1
q4_k_s 14 blk.3.attn_v.weight=q5_k blk.0.attn_q.weight=q4_k blk.0.ffn_down.weight=q5_0 output.weight=q6_k
q4_k_m 15 blk.0.attn_v.weight=q4_k blk.2.attn_v.weight=q6_k blk.3.attn_v.weight=q6_k blk.1.ffn_down.weight=q5_0 blk.2.ffn_down.weight=q8_0 token_embd.weight=q4_k output.weight=q6_k
q5_k_s 16 blk.2.attn_v.weight=q5_k blk.0.ffn_down.weight=q5_1 output.weight=q6_k
q5_k_m 17 blk.1.attn_v.weight=q5_k blk.2.attn_v.weight=q6_k blk.3.ffn_down.weight=q8_0 output.weight=q6_k
q6_k 18 blk.0.attn_q.weight=q6_k blk.0.ffn_down.weight=q8_0 output.weight=q6_k token_embd.weight=q6_k
q3_k 11 blk.0.attn_v.weight=q3_k blk.0.ffn_gate.weight=q3_k output.weight=q6_k
q4_k 14 blk.3.attn_v.weight=q4_k blk.0.ffn_gate.weight=q4_k blk.3.ffn_down.weight=q5_0 output.weight=q6_k
q5_k 16 blk.3.attn_v.weight=q5_k blk.0.ffn_gate.weight=q5_k output.weight=q6_k
EOF

# Reproducible output (rows are shared among threads but written in order),
# and a K file converts on to another type.
"$nucleus" quantize "$model" "$tmp/again.gguf" q4_k_m 2>/dev/null
check "quantize gives the same bytes twice" 'cmp -s "$tmp/q4_k_m.gguf" "$tmp/again.gguf"'
"$nucleus" quantize "$tmp/q4_k_m.gguf" "$tmp/q8.gguf" q8_0 2>/dev/null
check "a q4_k_m file converts to q8_0" '[ "$(ttype "$tmp/q8.gguf" blk.2.attn_v.weight)" = q8_0 ]'
check "unknown type names the K mixes" '! "$nucleus" quantize "$model" "$tmp/x.gguf" q4_k_x 2>"$tmp/err" && grep -q "q4_k_m" "$tmp/err" && [ ! -e "$tmp/x.gguf" ]'
check "q8_k (activations only) is refused" '! "$nucleus" quantize "$model" "$tmp/x.gguf" q8_k 2>/dev/null && [ ! -e "$tmp/x.gguf" ]'
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
