#!/usr/bin/env bash
# `nucleus tokenize --ids --no-bos` reproduces the test vectors of every
# vocabulary in ../shared/vocab that has them, SentencePiece-style and
# byte-level BPE (ids from the Hugging Face tokenizer, no special tokens
# added or parsed).
set -euo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_tokenize
mkdir -p "$tmp"
fail=0 total=0
for vocab in llama-spm phi-3 gpt-2 deepseek-coder falcon starcoder; do
  gguf=$shared/vocab/ggml-vocab-$vocab.gguf
  python3 - "$gguf.inp" "$gguf.out" "$tmp/$vocab" <<'PY'
import sys, os
inp = open(sys.argv[1], 'rb').read().split(b'\n__ggml_vocab_test__\n')[:-1]
out = open(sys.argv[2]).read().split('\n')
os.makedirs(sys.argv[3], exist_ok=True)
for i, text in enumerate(inp):
    open(f'{sys.argv[3]}/{i}.txt', 'wb').write(text)
    open(f'{sys.argv[3]}/{i}.want', 'w').write(' '.join(out[i].split()) + '\n')
PY
  n=0 bad=0
  for want in "$tmp/$vocab"/*.want; do
    txt=${want%.want}.txt
    got=$("$nucleus" tokenize -m "$gguf" -f "$txt" --ids --no-bos)
    n=$((n + 1))
    if [ "$got" != "$(cat "$want")" ]; then
      bad=$((bad + 1))
      echo "MISMATCH $vocab $(basename "$txt"): input $(head -c 80 "$txt" | od -c | head -2 | tr -s ' ')"
      echo "  want: $(cat "$want")"
      echo "  got:  $got"
    fi
  done
  echo "$vocab: $((n - bad))/$n vectors"
  total=$((total + n)); fail=$((fail + bad))
done
# BOS is added unless --no-bos; stories260K's reference prompt tokens
got=$("$nucleus" tokenize -m "$shared/models/stories260K.gguf" -p "Once upon a time" --ids)
[ "$got" = "1 403 407 261 378" ] || { echo "stories260K: got '$got'"; fail=$((fail + 1)); }
# the default listing shows ids and pieces
"$nucleus" tokenize -m "$shared/models/stories260K.gguf" -p "Once upon" | grep -q "403 -> ' Once'" \
  || { echo "listing lacks 403 -> ' Once'"; fail=$((fail + 1)); }
# byte-level BPE: special-token text becomes its id only with --special
got=$("$nucleus" tokenize -m "$shared/vocab/ggml-vocab-gpt-2.gguf" -p "a<|endoftext|>" --ids --special)
[ "$got" = "64 50256" ] || { echo "gpt-2 --special: got '$got'"; fail=$((fail + 1)); }
got=$("$nucleus" tokenize -m "$shared/vocab/ggml-vocab-gpt-2.gguf" -p "a<|endoftext|>" --ids)
[ "$got" = "64 27 91 437 1659 5239 91 29" ] || { echo "gpt-2 plain: got '$got'"; fail=$((fail + 1)); }
echo "$((total - fail + 4)) passed, $fail failed"
[ "$fail" -eq 0 ]
