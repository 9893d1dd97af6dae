#!/usr/bin/env bash
# `nucleus quantize` to iq4_xs / iq4_nl with and without an importance matrix
# (--imatrix, in llama-imatrix's GGUF layout and in its legacy .dat layout):
# the tensor types of llama.cpp's IQ4 recipes, the two layouts giving the same
# file, the importances lowering the importance-weighted error of every
# matrix, generation from the files, and clear errors for bad matrices.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_quantize_iq
source "$(dirname "$0")/cli_lib.sh"
mkdir -p "$tmp"

# synth_gguf.py with one more shape: n_embd 256, 4 layers, 4 heads sharing 1
# key/value head (so attn_v gets q5_k), n_ff 640 (ffn_down rows of 640: the
# 32-element fallback iq4_nl).
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
check "synthetic model written" test -s "$model"

# An importance matrix for every 2-D weight: per column a mean square drawn
# log-uniformly over 1e-3 .. 1e3 (so the weighting matters), written as
# llama-imatrix writes it (GGUF: NAME.in_sum2 = sums of squares over
# `count` activations, NAME.counts = count; imatrix.* metadata) and in the
# legacy layout (per entry: name, ncall, nval, values averaged per call
# times ncall).
python3 - "$model" "$tmp/imatrix.gguf" "$tmp/imatrix.dat" "$tmp/importance.txt" "$(dirname "$0")" <<'PY'
import random, struct, sys
src, out_gguf, out_dat, out_txt = sys.argv[1:5]
sys.path.insert(0, sys.argv[5])
import gguf_tensors
mats = [(name, ne[0]) for name, (ne, _, _) in gguf_tensors.read(src).items()
        if len(ne) == 2 and ne[1] > 1]
rng = random.Random(7)
imp = {name: [10 ** rng.uniform(-3, 3) for _ in range(n)] for name, n in mats}
count = 512
# GGUF v3
def s(x):
    b = x.encode(); return struct.pack("<Q", len(b)) + b
kv = [(b"imatrix.datasets", 9, struct.pack("<IQ", 8, 1) + s("synthetic")),
      (b"imatrix.chunk_count", 4, struct.pack("<I", 1)),
      (b"imatrix.chunk_size", 4, struct.pack("<I", count))]
tensors = []
for name, n in mats:
    tensors.append((name + ".in_sum2", [n], struct.pack(f"<{n}f", *[v * count for v in imp[name]])))
    tensors.append((name + ".counts", [1], struct.pack("<f", float(count))))
head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
for k, t, payload in kv:
    head += struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + payload
off = 0
for name, dims, blob in tensors:
    head += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    head += struct.pack("<IQ", 0, off)
    off += (len(blob) + 31) // 32 * 32
head += b"\0" * (-len(head) % 32)
with open(out_gguf, "wb") as f:
    f.write(head)
    for _, _, blob in tensors:
        f.write(blob + b"\0" * (-len(blob) % 32))
# legacy
ncall = 8  # a power of two: the averages divide back exactly
with open(out_dat, "wb") as f:
    f.write(struct.pack("<i", len(mats)))
    for name, n in mats:
        b = name.encode()
        f.write(struct.pack("<i", len(b)) + b + struct.pack("<ii", ncall, n))
        f.write(struct.pack(f"<{n}f", *[v * ncall for v in imp[name]]))
    f.write(struct.pack("<i", 1) + struct.pack("<i", 9) + b"synthetic")
with open(out_txt, "w") as f:
    for name, n in mats:
        f.write(name + " " + " ".join("%.9g" % v for v in imp[name]) + "\n")
PY
check "importance matrices written" test -s "$tmp/imatrix.gguf" -a -s "$tmp/imatrix.dat"

ttype() { "$nucleus" info -m "$1" | awk -v t="$2" '$1 == t { print $2 }'; }
is_type() { [ "$(ttype "$1" "$2")" = "$3" ]; }

# Every matrix in type $1: the importance-weighted squared error is lower
# in $tmp/$1.im.gguf (with the matrix) than in $tmp/$1.gguf (without); the
# encoders minimise exactly that. Needs their f32 copies.
weighted_error_lower() {
  local t=$1
  "$nucleus" quantize "$tmp/$t.gguf" "$tmp/$t.f32.gguf" f32 2>/dev/null
  "$nucleus" quantize "$tmp/$t.im.gguf" "$tmp/$t.im.f32.gguf" f32 2>/dev/null
  python3 - "$model" "$tmp/$t.f32.gguf" "$tmp/$t.im.f32.gguf" "$tmp/importance.txt" "$t" \
    <("$nucleus" info -m "$tmp/$t.im.gguf") "$(dirname "$0")" <<'PY'
import sys
sys.path.insert(0, sys.argv[7])
import gguf_tensors
orig, plain, weighted = (gguf_tensors.floats(p) for p in sys.argv[1:4])
imp = {}
for line in open(sys.argv[4]):
    name, *vals = line.split(); imp[name] = [float(v) for v in vals]
# only the matrices the recipe puts in the type (e.g. attn_v is q5_k, output q6_k)
typed = {l.split()[0] for l in open(sys.argv[6]) if len(l.split()) > 1 and l.split()[1] == sys.argv[5]}
better = worse = 0
for name, w in imp.items():
    if name not in typed: continue
    n, x = orig[name]
    e = [sum(w[i % n] * (x[i] - q[i]) ** 2 for i in range(len(x))) for q in (plain[name][1], weighted[name][1])]
    if e[1] < e[0]: better += 1
    else: worse += 1
print(f"{sys.argv[5]}: importance-weighted error lower with the matrix in {better} of {better + worse} matrices")
sys.exit(0 if worse == 0 and better > 0 else 1)
PY
}

for t in iq4_xs iq4_nl; do
  check "$t: written" "$nucleus" quantize "$model" "$tmp/$t.gguf" $t
  check "$t: written with the GGUF matrix" \
    "$nucleus" quantize --imatrix "$tmp/imatrix.gguf" "$model" "$tmp/$t.im.gguf" $t
  check "$t: written with the legacy matrix" \
    "$nucleus" quantize --imatrix "$tmp/imatrix.dat" "$model" "$tmp/$t.dat.gguf" $t
  check "$t: both layouts give the same file" cmp -s "$tmp/$t.im.gguf" "$tmp/$t.dat.gguf"
  check "$t: the matrix changes the file" bash -c "! cmp -s '$tmp/$t.gguf' '$tmp/$t.im.gguf'"
  # llama.cpp's recipe: output q6_k, attn_v q5_k (4 heads per key/value head)
  check "$t: attn_q is $t" is_type "$tmp/$t.im.gguf" blk.0.attn_q.weight $t
  check "$t: attn_v is q5_k" is_type "$tmp/$t.im.gguf" blk.0.attn_v.weight q5_k
  check "$t: output is q6_k" is_type "$tmp/$t.im.gguf" output.weight q6_k
  check "$t: generates" bash -c "'$nucleus' generate -m '$tmp/$t.im.gguf' -p 'Once upon' -n 4 --temp 0 >/dev/null 2>&1"
  check "$t: importance-weighted error lower with the matrix" weighted_error_lower $t
done

# The K types weigh by the matrix too (rows of 640, ffn_down, fall back to a
# 32-element type, which does not: the check takes the matrices in the type).
for t in q2_k q3_k q4_k q5_k q6_k; do
  "$nucleus" quantize "$model" "$tmp/$t.gguf" $t 2>/dev/null
  check "$t: written with the matrix" \
    "$nucleus" quantize --imatrix "$tmp/imatrix.gguf" "$model" "$tmp/$t.im.gguf" $t
  check "$t: importance-weighted error lower with the matrix" weighted_error_lower $t
done

# Importance matrices llama-imatrix itself wrote (tests/imatrix/README.md) for
# tiny_gguf.py's llama-k1 model, in both its formats: the same file from each
# (their importances are equal, test_imatrix checks), a different one from no
# matrix, the tensor types llama-quantize --imatrix gives that model (seen:
# attn_v q5_k, the tied output token_embd q6_k), and generation.
k1=$tmp/llama-k1.gguf
python3 "$(dirname "$0")/arch/tiny_gguf.py" --arch llama-k1 --seed 1 --scale 0.125 \
  --vocab-size 384 --vocab-from "$shared/vocab/ggml-vocab-llama-spm.gguf" -o "$k1" >/dev/null
check "llama-k1 model as the matrices were made from" bash -c \
  "sha256sum '$k1' | grep -q ^6550fbba1d4c455d0d7e43aa7849acd4c8f6cc5a0e187fd0bd7ce70010fe23ac"
im=$(dirname "$0")/imatrix/llama-k1.imatrix
for t in iq4_xs iq4_nl; do
  "$nucleus" quantize "$k1" "$tmp/k1.$t.gguf" $t 2>/dev/null
  check "llama-imatrix's GGUF matrix: $t written" \
    "$nucleus" quantize --imatrix "$im.gguf" "$k1" "$tmp/k1.$t.im.gguf" $t
  check "llama-imatrix's .dat matrix: $t written" \
    "$nucleus" quantize --imatrix "$im.dat" "$k1" "$tmp/k1.$t.dat.gguf" $t
  check "$t: llama-imatrix's two formats give the same file" \
    cmp -s "$tmp/k1.$t.im.gguf" "$tmp/k1.$t.dat.gguf"
  check "$t: llama-imatrix's matrix changes the file" \
    bash -c "! cmp -s '$tmp/k1.$t.gguf' '$tmp/k1.$t.im.gguf'"
  check "$t: attn_q is $t" is_type "$tmp/k1.$t.im.gguf" blk.0.attn_q.weight $t
  check "$t: attn_v is q5_k" is_type "$tmp/k1.$t.im.gguf" blk.0.attn_v.weight q5_k
  check "$t: token_embd (the output) is q6_k" is_type "$tmp/k1.$t.im.gguf" token_embd.weight q6_k
  check "$t with llama-imatrix's matrix: generates" bash -c \
    "'$nucleus' generate -m '$tmp/k1.$t.im.gguf' -p 'The light' -n 8 --temp 0 2>/dev/null | grep -q ."
done

# Bad matrices: a row count that does not fit, and a file that is neither.
python3 - "$tmp/imatrix.dat" "$tmp/short.dat" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<i", d, 0)[0]
ln = struct.unpack_from("<i", d, 4)[0]
name = d[8:8 + ln]
nval = struct.unpack_from("<i", d, 8 + ln + 4)[0]
out = struct.pack("<i", 1) + struct.pack("<i", ln) + name + struct.pack("<ii", 1, nval - 32)
out += struct.pack(f"<{nval - 32}f", *([1.0] * (nval - 32)))
open(sys.argv[2], "wb").write(out)
PY
"$nucleus" quantize --imatrix "$tmp/short.dat" "$model" "$tmp/bad.gguf" iq4_xs 2>"$tmp/err"
check "a matrix of the wrong size is refused by name" grep -q "values for '.*', which needs" "$tmp/err"
printf 'junk' >"$tmp/junk.dat"
"$nucleus" quantize --imatrix "$tmp/junk.dat" "$model" "$tmp/bad.gguf" iq4_xs 2>"$tmp/err"
check "a file that is no importance matrix is refused" grep -q "junk.dat" "$tmp/err"
check "nothing written on errors" test ! -e "$tmp/bad.gguf"

# Entry names against the model's (renamed in place: same lengths, same
# offsets): none matching is another model's matrix and refused; one missing
# is quantised unweighted and counted; a type whose encoder takes no matrix
# is said to have used none.
python3 - "$tmp/imatrix.gguf" "$tmp" <<'PY'
import sys
d = open(sys.argv[1], "rb").read()
open(sys.argv[2] + "/renamed.gguf", "wb").write(
    d.replace(b"blk.", b"lyr.").replace(b"output.", b"outpux.").replace(b"token_embd.", b"token_embx."))
open(sys.argv[2] + "/one_less.gguf", "wb").write(d.replace(b"blk.3.ffn_up.", b"blk.3.ffn_XX."))
PY
"$nucleus" quantize --imatrix "$tmp/renamed.gguf" "$model" "$tmp/bad.gguf" iq4_xs 2>"$tmp/err"
check "a matrix with no entry for the model's matrices is refused" \
  grep -q "renamed.gguf has no entry for any of the .* matrices it would weigh" "$tmp/err"
check "nothing written for it" test ! -e "$tmp/bad.gguf"
"$nucleus" quantize --imatrix "$tmp/one_less.gguf" "$model" "$tmp/one_less.iq4_xs.gguf" iq4_xs \
  2>"$tmp/err"
n_weighable=$("$nucleus" info -m "$tmp/one_less.iq4_xs.gguf" | grep -cE "^  [a-z_.0-9]+ +(iq4_xs|iq4_nl|q[2-6]_k) ")
check "a missing entry is counted" \
  grep -q "^note: the importance matrix weighed $((n_weighable - 1)) matrices; it has no entry for 1 more" \
  "$tmp/err"
# the files share their layout (same types), so a tensor is the same bytes at
# the same place: ffn_up of layer 3 as without a matrix, its ffn_gate as with
check "the matrix without an entry is quantised unweighted, the others weighted" \
  python3 - "$tmp/one_less.iq4_xs.gguf" "$tmp/iq4_xs.gguf" "$tmp/iq4_xs.im.gguf" "$(dirname "$0")" \
  <<'PY'
import sys
sys.path.insert(0, sys.argv[4])
import gguf_tensors
ol, plain, weighted = ({k: v[2] for k, v in gguf_tensors.read(p).items()} for p in sys.argv[1:4])
up, gate = "blk.3.ffn_up.weight", "blk.3.ffn_gate.weight"
ok = ol[up] == plain[up] != weighted[up] and ol[gate] == weighted[gate] != plain[gate]
sys.exit(0 if ok else 1)
PY
"$nucleus" quantize --imatrix "$tmp/imatrix.gguf" "$model" "$tmp/k.gguf" q8_0 2>"$tmp/err"
check "a type that uses no matrix says so" \
  grep -q "^note: the importance matrix weighed no matrix: only iq4_nl, iq4_xs and the K types" \
  "$tmp/err"
"$nucleus" quantize --imatrix "$tmp/imatrix.gguf" "$model" "$tmp/iq.gguf" iq4_xs 2>"$tmp/err"
check "a matrix with every entry adds no note" bash -c "! grep -q importance '$tmp/err'"

check_report
