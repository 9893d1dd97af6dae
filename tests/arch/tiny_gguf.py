#!/usr/bin/env python3
"""Write tiny random-weight GGUF models of the hybrid and late-2026 families.

  tiny_gguf.py --arch qwen35|qwen35moe|gemma4|gemma4-moe|gemma4-e2b|gpt-oss|smollm3|olmo2|llama-wide|llama-k1
               [--mxfp4]
               --seed N --vocab-from VOCAB.gguf [--vocab-size N] [--sliding-window N] -o out.gguf
  tiny_gguf.py --arch qwen35moe --speed [--experts N] --vocab-from VOCAB.gguf -o out.gguf

--speed writes a speed shape instead of a tiny model: Qwen3.5-35B-A3B's layers (2048 wide, 40
layers, 30 Gated DeltaNet of 16 key / 32 value heads of 128, 10 gated attention of 16 heads of
256 with 2 KV heads, experts of 512 with 8 used and a shared expert of 512) with fewer experts
(--experts, default 40: about 4 GB), matrices in Q4_0 filled from a bank of random blocks.

The files carry the tensor names, shapes and metadata keys that llama.cpp's converter writes for
the real models (see README.md in this folder for the layouts), with small dimensions and random
weights; the tokenizer.* keys are copied from a real vocabulary file (optionally its first N
tokens). Their text output is meaningless: they exist so that a forward pass can be compared
with llama.cpp's on the same bytes. The same arguments always give the same bytes.
Standard library only.
"""
import argparse
import math
import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gguf_tensors import (ARR, BOOL, F32, I32, SCALAR_FMT, STR, U32, read_metadata)  # noqa: E402

# ggml tensor types used here: (type id, values per block, bytes per block)
GGML_F32, GGML_MXFP4, GGML_Q4_0 = (0, 1, 4), (39, 32, 17), (2, 32, 18)
ALIGN = 32


# ---------------------------------------------------------------- reading a vocabulary
def tokenizer_keys(path, n_keep):
    """The tokenizer.* keys of a vocabulary file, cut to its first n_keep tokens (with the merges
    whose pieces all survive). A special-token id that the cut would drop is an error."""
    keys = [kv for kv in read_metadata(path) if kv[0].startswith("tokenizer.")]
    if n_keep is None:
        return keys
    tokens = next(v[1] for k, t, v in keys if k == "tokenizer.ggml.tokens")
    if n_keep > len(tokens):
        sys.exit(f"--vocab-size {n_keep}: the vocabulary has only {len(tokens)} tokens")
    kept = set(tokens[:n_keep])
    out = []
    for k, t, v in keys:
        if k in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            v = (v[0], v[1][:n_keep])
        elif k == "tokenizer.ggml.merges":
            keep = []
            for m in v[1]:
                left, _, right = m.partition(" ")
                if left in kept and right in kept and left + right in kept:
                    keep.append(m)
            v = (v[0], keep)
        elif k.endswith("_token_id") and t in (U32, I32) and v >= n_keep:
            sys.exit(f"--vocab-size {n_keep} would drop {k} = {v}")
        out.append((k, t, v))
    return out


# ---------------------------------------------------------------- the model description
class Model:
    """Metadata and a tensor list; each tensor knows how to draw its values."""

    def __init__(self, arch):
        self.arch = arch
        self.meta = []      # (key, type, value)
        self.tensors = []   # (name, dims innermost first, ggml type, fill)

    def kv(self, key, typ, value):
        self.meta.append((key if key.startswith(("general.", "tokenizer.")) else f"{self.arch}.{key}", typ, value))

    def t(self, name, dims, fill, ggml=GGML_F32):
        self.tensors.append((name, tuple(dims), ggml, fill))


# fills: ("gauss", std) | ("uniform", lo, hi) | ("const", v) | ("list", [values])
def gauss(std):
    return ("gauss", std)


JITTER = ("uniform", 0.5, 1.5)   # norm weights near 1: a skipped or misplaced norm shows


def qwen35(a, moe):
    """Qwen 3.5 / 3.6: three Gated DeltaNet layers, then one gated full-attention layer."""
    arch = "qwen35moe" if moe else "qwen35"
    m = Model(arch)
    n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff = 64, 8, 4, 2, 32, 128
    interval = 4                       # every 4th layer is full attention
    n_rot = head_dim // 4              # partial rotary factor 0.25
    sections = [2, 1, 1, 0]            # interleaved M-RoPE sections (sum = n_rot / 2)
    d_conv, k_heads, v_heads, head_k = 4, 2, 4, 16   # DeltaNet: key heads, value heads, head size
    n_exp, n_used, n_ff_exp, n_ff_shexp = 8, 2, 32, 64
    s = a.scale
    mat = GGML_F32
    if a.speed:   # Qwen3.5-35B-A3B's layers with fewer experts, Q4_0 matrices
        n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff = 2048, 40, 16, 2, 256, 512
        n_rot, sections = 64, [11, 11, 10, 0]
        k_heads, v_heads, head_k = 16, 32, 128
        n_exp, n_used, n_ff_exp, n_ff_shexp = a.experts, 8, 512, 512
        s, mat = 0.02, GGML_Q4_0
    d_inner = v_heads * head_k

    def w(std):   # a matrix's fill: independent values, or repeated Q4_0 blocks
        return ("bank", std) if a.speed else gauss(std)
    m.kv("context_length", U32, 262144)
    m.kv("embedding_length", U32, n_embd)
    n_mtp = 1 if a.mtp else 0   # a multi-token prediction layer after the others
    m.kv("block_count", U32, n_layer + n_mtp)
    m.kv("feed_forward_length", U32, n_ff)
    m.kv("attention.head_count", U32, n_head)
    m.kv("attention.head_count_kv", U32, n_head_kv)
    m.kv("rope.freq_base", F32, 10000000.0)
    m.kv("attention.layer_norm_rms_epsilon", F32, 1e-6)
    m.kv("attention.key_length", U32, head_dim)
    m.kv("attention.value_length", U32, head_dim)
    if moe:
        m.kv("expert_count", U32, n_exp)
        m.kv("expert_used_count", U32, n_used)
        m.kv("expert_feed_forward_length", U32, n_ff_exp)
        m.kv("expert_shared_feed_forward_length", U32, n_ff_shexp)
    m.kv("ssm.conv_kernel", U32, d_conv)
    m.kv("ssm.state_size", U32, head_k)
    m.kv("ssm.group_count", U32, k_heads)
    m.kv("ssm.time_step_rank", U32, v_heads)
    m.kv("ssm.inner_size", U32, d_inner)
    if a.mtp:
        m.kv("nextn_predict_layers", U32, n_mtp)
    m.kv("attention.recurrent_layers", ARR,
         (BOOL, [(i + 1) % interval != 0 and i < n_layer for i in range(n_layer + n_mtp)]))
    m.kv("full_attention_interval", U32, interval)
    m.kv("rope.dimension_count", U32, n_rot)
    m.kv("rope.dimension_sections", ARR, (I32, sections))

    m.t("token_embd.weight", (n_embd, a.n_vocab), w(s), mat)
    m.t("output_norm.weight", (n_embd,), ("const", a.output_scale / s) if not moe else JITTER)
    if moe:   # the MoE file has its own output matrix, the dense one is tied to token_embd
        m.t("output.weight", (n_embd, a.n_vocab), w(a.output_scale if not a.speed else s), mat)

    def full_attention(p):   # the gated full-attention tensors of layer prefix p
        m.t(p + "attn_q.weight", (n_embd, 2 * n_head * head_dim), w(s), mat)
        m.t(p + "attn_k.weight", (n_embd, n_head_kv * head_dim), w(s), mat)
        m.t(p + "attn_v.weight", (n_embd, n_head_kv * head_dim), w(s), mat)
        m.t(p + "attn_output.weight", (n_head * head_dim, n_embd), w(s), mat)
        m.t(p + "attn_q_norm.weight", (head_dim,), JITTER)
        m.t(p + "attn_k_norm.weight", (head_dim,), JITTER)

    def feed_forward(p):     # the experts and shared expert, or the dense FFN, of prefix p
        if moe:
            m.t(p + "ffn_gate_inp.weight", (n_embd, n_exp), gauss(s))
            m.t(p + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_exp), w(s), mat)
            m.t(p + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_exp), w(s), mat)
            m.t(p + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_exp), w(s), mat)
            m.t(p + "ffn_gate_inp_shexp.weight", (n_embd,), gauss(s))
            m.t(p + "ffn_gate_shexp.weight", (n_embd, n_ff_shexp), w(s), mat)
            m.t(p + "ffn_up_shexp.weight", (n_embd, n_ff_shexp), w(s), mat)
            m.t(p + "ffn_down_shexp.weight", (n_ff_shexp, n_embd), w(s), mat)
        else:
            m.t(p + "ffn_gate.weight", (n_embd, n_ff), w(s), mat)
            m.t(p + "ffn_up.weight", (n_embd, n_ff), w(s), mat)
            m.t(p + "ffn_down.weight", (n_ff, n_embd), w(s), mat)

    conv_dim = 2 * k_heads * head_k + d_inner
    for i in range(n_layer):
        p = f"blk.{i}."
        m.t(p + "attn_norm.weight", (n_embd,), JITTER)
        if (i + 1) % interval != 0:   # Gated DeltaNet
            m.t(p + "attn_qkv.weight", (n_embd, conv_dim), w(s), mat)
            m.t(p + "attn_gate.weight", (n_embd, d_inner), w(s), mat)
            m.t(p + "ssm_conv1d.weight", (d_conv, conv_dim), gauss(0.5))
            m.t(p + "ssm_dt.bias", (v_heads,), ("uniform", -5.0, -2.0))
            m.t(p + "ssm_a", (v_heads,), ("uniform", -8.0, -1.0))      # stored as -exp(A_log)
            m.t(p + "ssm_beta.weight", (n_embd, v_heads), w(s), mat)
            m.t(p + "ssm_alpha.weight", (n_embd, v_heads), w(s), mat)
            m.t(p + "ssm_norm.weight", (head_k,), JITTER)
            m.t(p + "ssm_out.weight", (d_inner, n_embd), w(s), mat)
        else:                         # gated full attention
            full_attention(p)
        m.t(p + "post_attention_norm.weight", (n_embd,), JITTER)
        feed_forward(p)
    if a.mtp:   # drawn after every other tensor, so those stay as without it
        p = f"blk.{n_layer}."
        m.t(p + "attn_norm.weight", (n_embd,), JITTER)
        m.t(p + "post_attention_norm.weight", (n_embd,), JITTER)
        full_attention(p)
        feed_forward(p)
        m.t(p + "nextn.eh_proj.weight", (2 * n_embd, n_embd), w(s), mat)
        m.t(p + "nextn.enorm.weight", (n_embd,), JITTER)
        m.t(p + "nextn.hnorm.weight", (n_embd,), JITTER)
        m.t(p + "nextn.shared_head_norm.weight", (n_embd,), JITTER)
    return m


def gemma4(a, variant):
    """Gemma 4: per-layer sliding-window pattern with its own head size and RoPE for window
    layers, proportional RoPE (rope_freqs) on global layers, Q/K/V norms, no attention scale,
    GeGLU, layer output scales; variants with experts or with per-layer embeddings and KV
    shared across layers."""
    m = Model("gemma4")
    n_embd, n_head, n_ff = 64, 4, 128
    hd_full, hd_swa = 64, 32
    if variant == "e2b":      # E2B-like: 4 window layers to 1 global, last 4 layers share KV
        swa = [True, True, True, False, True, True, True, False]
        kv_heads = [1] * len(swa)
        shared_kv, n_pl = 4, 16
        n_ff_layer = [n_ff if i < len(swa) - shared_kv else 2 * n_ff for i in range(len(swa))]
    else:                     # 31B / 26B-A4B-like: 5 window layers to 1 global
        swa = [True, True, True, True, True, False, True]
        kv_heads = [2 if w else 1 for w in swa]
        shared_kv, n_pl = 0, 0
        n_ff_layer = [n_ff] * len(swa)
    n_layer = len(swa)
    moe = variant == "moe"
    k_eq_v = variant == "dense"   # global layers without attn_v: V is K (attention_k_eq_v)
    n_exp, n_used, n_ff_exp = 8, 2, 32
    s = a.scale
    embd_std = s / math.sqrt(n_embd)   # the model multiplies embeddings by sqrt(n_embd)
    m.kv("context_length", U32, 262144)
    m.kv("embedding_length", U32, n_embd)
    m.kv("block_count", U32, n_layer)
    if len(set(n_ff_layer)) == 1:
        m.kv("feed_forward_length", U32, n_ff)
    else:
        m.kv("feed_forward_length", ARR, (I32, n_ff_layer))
    m.kv("attention.head_count", U32, n_head)
    m.kv("attention.head_count_kv", ARR, (I32, kv_heads))
    m.kv("rope.freq_base", F32, 1000000.0)
    m.kv("rope.freq_base_swa", F32, 10000.0)
    m.kv("attention.layer_norm_rms_epsilon", F32, 1e-6)
    if moe:
        m.kv("expert_count", U32, n_exp)
        m.kv("expert_used_count", U32, n_used)
        m.kv("expert_feed_forward_length", U32, n_ff_exp)
    m.kv("attention.key_length", U32, hd_full)
    m.kv("attention.value_length", U32, hd_full)
    m.kv("final_logit_softcapping", F32, 30.0)
    m.kv("attention.sliding_window", U32, a.sliding_window or 16)
    m.kv("attention.shared_kv_layers", U32, shared_kv)
    m.kv("embedding_length_per_layer_input", U32, n_pl)
    m.kv("attention.sliding_window_pattern", ARR, (BOOL, swa))
    m.kv("attention.key_length_swa", U32, hd_swa)
    m.kv("attention.value_length_swa", U32, hd_swa)
    m.kv("rope.dimension_count", U32, hd_full)
    m.kv("rope.dimension_count_swa", U32, hd_swa)

    # proportional RoPE on global layers: rotate the first quarter of the pairs, freeze the rest
    n_rot_pairs = hd_full // 4 // 2
    rope_freqs = [1.0] * n_rot_pairs + [1e30] * (hd_full // 2 - n_rot_pairs)

    m.t("token_embd.weight", (n_embd, a.n_vocab), gauss(embd_std))
    if n_pl:
        m.t("per_layer_token_embd.weight", (n_pl * n_layer, a.n_vocab), gauss(s))
        m.t("per_layer_model_proj.weight", (n_embd, n_pl * n_layer), gauss(s))
        m.t("per_layer_proj_norm.weight", (n_pl,), JITTER)
    # tied output: the final norm spreads the logits (see synth_gguf.py's fill_plan)
    m.t("output_norm.weight", (n_embd,), ("const", a.output_scale / embd_std))
    m.t("rope_freqs.weight", (hd_full // 2,), ("list", rope_freqs))
    for i in range(n_layer):
        p = f"blk.{i}."
        hd = hd_swa if swa[i] else hd_full
        has_kv = i < n_layer - shared_kv
        m.t(p + "attn_norm.weight", (n_embd,), JITTER)
        m.t(p + "attn_q.weight", (n_embd, n_head * hd), gauss(s))
        if has_kv:
            m.t(p + "attn_k.weight", (n_embd, kv_heads[i] * hd), gauss(s))
            if not (k_eq_v and not swa[i]):
                m.t(p + "attn_v.weight", (n_embd, kv_heads[i] * hd), gauss(s))
        m.t(p + "attn_output.weight", (n_head * hd, n_embd), gauss(s))
        m.t(p + "attn_q_norm.weight", (hd,), JITTER)
        if has_kv:
            m.t(p + "attn_k_norm.weight", (hd,), JITTER)
        m.t(p + "post_attention_norm.weight", (n_embd,), JITTER)
        m.t(p + "layer_output_scale.weight", (1,), ("uniform", 0.5, 1.0))
        m.t(p + "ffn_norm.weight", (n_embd,), JITTER)
        m.t(p + "ffn_gate.weight", (n_embd, n_ff_layer[i]), gauss(s))
        m.t(p + "ffn_up.weight", (n_embd, n_ff_layer[i]), gauss(s))
        m.t(p + "ffn_down.weight", (n_ff_layer[i], n_embd), gauss(s))
        m.t(p + "post_ffw_norm.weight", (n_embd,), JITTER)
        if moe:
            m.t(p + "ffn_gate_inp.weight", (n_embd, n_exp), gauss(s))
            m.t(p + "ffn_gate_inp.scale", (n_embd,), JITTER)
            m.t(p + "pre_ffw_norm_2.weight", (n_embd,), JITTER)
            m.t(p + "post_ffw_norm_1.weight", (n_embd,), JITTER)
            m.t(p + "post_ffw_norm_2.weight", (n_embd,), JITTER)
            m.t(p + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_exp), gauss(s))
            m.t(p + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_exp), gauss(s))
            m.t(p + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_exp), gauss(s))
            m.t(p + "ffn_down_exps.scale", (n_exp,), ("uniform", 0.5, 1.5))
        if n_pl:
            m.t(p + "inp_gate.weight", (n_embd, n_pl), gauss(s))
            m.t(p + "proj.weight", (n_pl, n_embd), gauss(s))
            m.t(p + "post_norm.weight", (n_embd,), JITTER)
    return m


def llama_layout(a, arch, dims, context, rope_base, eps, tied=False):
    """The llama layout (RMS pre-norms, split Q/K/V, SwiGLU, untied output unless tied) with
    dims = (n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff)."""
    m = Model(arch)
    n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff = dims
    s = a.scale
    m.kv("context_length", U32, context)
    m.kv("embedding_length", U32, n_embd)
    m.kv("block_count", U32, n_layer)
    m.kv("feed_forward_length", U32, n_ff)
    m.kv("attention.head_count", U32, n_head)
    m.kv("attention.head_count_kv", U32, n_head_kv)
    m.kv("rope.freq_base", F32, rope_base)
    m.kv("rope.dimension_count", U32, head_dim)
    m.kv("attention.layer_norm_rms_epsilon", F32, eps)
    m.t("token_embd.weight", (n_embd, a.n_vocab), gauss(s))
    m.t("output_norm.weight", (n_embd,), JITTER)
    if not tied:
        m.t("output.weight", (n_embd, a.n_vocab), gauss(a.output_scale))
    for i in range(n_layer):
        p = f"blk.{i}."
        m.t(p + "attn_norm.weight", (n_embd,), JITTER)
        m.t(p + "attn_q.weight", (n_embd, n_head * head_dim), gauss(s))
        m.t(p + "attn_k.weight", (n_embd, n_head_kv * head_dim), gauss(s))
        m.t(p + "attn_v.weight", (n_embd, n_head_kv * head_dim), gauss(s))
        m.t(p + "attn_output.weight", (n_head * head_dim, n_embd), gauss(s))
        m.t(p + "ffn_norm.weight", (n_embd,), JITTER)
        m.t(p + "ffn_gate.weight", (n_embd, n_ff), gauss(s))
        m.t(p + "ffn_up.weight", (n_embd, n_ff), gauss(s))
        m.t(p + "ffn_down.weight", (n_ff, n_embd), gauss(s))
    return m


def smollm3(a):
    """SmolLM3: the llama layout whose every fourth layer (3, 7, ...) uses no RoPE."""
    return llama_layout(a, "smollm3", (64, 4, 4, 2, 16, 128), 65536, 5000000.0, 1e-6)


def llama_wide(a):
    """llama with rows of 256 and 512 values (n_embd 256, n_ff 512), so that every matrix can be
    quantised to the 256-element K types: the model the quantised-type references start from."""
    return llama_layout(a, "llama", (256, 2, 4, 2, 64, 512), 4096, 10000.0, 1e-5)


def llama_k1(a):
    """The smallest llama whose every matrix has rows of 256 values (n_embd 256, n_ff 256, one
    layer, 4 query heads sharing one key/value head of 64, output tied to token_embd): the model
    llama-quantize's own K / IQ files in tests/arch/quantized are made from (~100-400 KB each)."""
    return llama_layout(a, "llama", (256, 1, 4, 1, 64, 256), 4096, 10000.0, 1e-5, tied=True)


def olmo2(a):
    """OLMo 2: no norm before attention or the FFN, a norm after each (before the residual
    add), Q and K normed over their whole projection (not per head)."""
    m = Model("olmo2")
    n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff = 64, 3, 4, 2, 16, 128
    s = a.scale
    m.kv("context_length", U32, 4096)
    m.kv("embedding_length", U32, n_embd)
    m.kv("block_count", U32, n_layer)
    m.kv("feed_forward_length", U32, n_ff)
    m.kv("attention.head_count", U32, n_head)
    m.kv("attention.head_count_kv", U32, n_head_kv)
    m.kv("rope.freq_base", F32, 500000.0)
    m.kv("attention.layer_norm_rms_epsilon", F32, 1e-6)
    m.t("token_embd.weight", (n_embd, a.n_vocab), gauss(s))
    m.t("output_norm.weight", (n_embd,), JITTER)
    m.t("output.weight", (n_embd, a.n_vocab), gauss(a.output_scale))
    for i in range(n_layer):
        p = f"blk.{i}."
        m.t(p + "attn_q.weight", (n_embd, n_head * head_dim), gauss(s))
        m.t(p + "attn_k.weight", (n_embd, n_head_kv * head_dim), gauss(s))
        m.t(p + "attn_v.weight", (n_embd, n_head_kv * head_dim), gauss(s))
        m.t(p + "attn_output.weight", (n_head * head_dim, n_embd), gauss(s))
        m.t(p + "attn_q_norm.weight", (n_head * head_dim,), JITTER)
        m.t(p + "attn_k_norm.weight", (n_head_kv * head_dim,), JITTER)
        m.t(p + "post_attention_norm.weight", (n_embd,), JITTER)
        m.t(p + "ffn_gate.weight", (n_embd, n_ff), gauss(s))
        m.t(p + "ffn_up.weight", (n_embd, n_ff), gauss(s))
        m.t(p + "ffn_down.weight", (n_ff, n_embd), gauss(s))
        m.t(p + "post_ffw_norm.weight", (n_embd,), JITTER)
    return m


def gpt_oss(a):
    """gpt-oss: alternating sliding-window and full attention with sinks and Q/K/V/O biases,
    YaRN RoPE, a softmax-over-top-k router with bias, experts with biases and clamped SwiGLU."""
    m = Model("gpt-oss")
    n_embd, n_layer, n_head, n_head_kv, head_dim = 64, 4, 4, 2, 32
    n_exp, n_used, n_ff_exp = 8, 2, 64
    s = a.scale
    m.kv("context_length", U32, 131072)
    m.kv("embedding_length", U32, n_embd)
    m.kv("block_count", U32, n_layer)
    m.kv("feed_forward_length", U32, n_ff_exp)
    m.kv("attention.head_count", U32, n_head)
    m.kv("attention.head_count_kv", U32, n_head_kv)
    m.kv("rope.freq_base", F32, 150000.0)
    m.kv("attention.layer_norm_rms_epsilon", F32, 1e-5)
    m.kv("expert_count", U32, n_exp)
    m.kv("expert_used_count", U32, n_used)
    m.kv("attention.key_length", U32, head_dim)
    m.kv("attention.value_length", U32, head_dim)
    m.kv("rope.dimension_count", U32, head_dim)
    m.kv("rope.scaling.type", STR, "yarn")
    m.kv("rope.scaling.factor", F32, 32.0)
    m.kv("rope.scaling.original_context_length", U32, 4096)
    m.kv("rope.scaling.yarn_beta_fast", F32, 32.0)
    m.kv("rope.scaling.yarn_beta_slow", F32, 1.0)
    m.kv("attention.sliding_window", U32, a.sliding_window or 16)
    m.kv("expert_feed_forward_length", U32, n_ff_exp)
    exp_type = GGML_MXFP4 if a.mxfp4 else GGML_F32
    exp_fill = ("mxfp4", s) if a.mxfp4 else gauss(s)

    m.t("token_embd.weight", (n_embd, a.n_vocab), gauss(s))
    m.t("output_norm.weight", (n_embd,), JITTER)
    m.t("output.weight", (n_embd, a.n_vocab), gauss(a.output_scale))
    for i in range(n_layer):
        p = f"blk.{i}."
        m.t(p + "attn_norm.weight", (n_embd,), JITTER)
        m.t(p + "attn_q.weight", (n_embd, n_head * head_dim), gauss(s))
        m.t(p + "attn_q.bias", (n_head * head_dim,), gauss(s))
        m.t(p + "attn_k.weight", (n_embd, n_head_kv * head_dim), gauss(s))
        m.t(p + "attn_k.bias", (n_head_kv * head_dim,), gauss(s))
        m.t(p + "attn_v.weight", (n_embd, n_head_kv * head_dim), gauss(s))
        m.t(p + "attn_v.bias", (n_head_kv * head_dim,), gauss(s))
        m.t(p + "attn_output.weight", (n_head * head_dim, n_embd), gauss(s))
        m.t(p + "attn_output.bias", (n_embd,), gauss(s))
        m.t(p + "attn_sinks.weight", (n_head,), gauss(1.0))
        m.t(p + "post_attention_norm.weight", (n_embd,), JITTER)
        m.t(p + "ffn_gate_inp.weight", (n_embd, n_exp), gauss(s))
        m.t(p + "ffn_gate_inp.bias", (n_exp,), gauss(s))
        m.t(p + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_exp), exp_fill, exp_type)
        m.t(p + "ffn_gate_exps.bias", (n_ff_exp, n_exp), gauss(s))
        m.t(p + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_exp), exp_fill, exp_type)
        m.t(p + "ffn_up_exps.bias", (n_ff_exp, n_exp), gauss(s))
        m.t(p + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_exp), exp_fill, exp_type)
        m.t(p + "ffn_down_exps.bias", (n_embd, n_exp), gauss(s))
    return m


# ---------------------------------------------------------------- writing
def pack_value(b, t, v):
    if t == STR:
        e = v.encode("utf-8", "surrogateescape")
        b += struct.pack("<Q", len(e)) + e
    elif t == ARR:
        et, items = v
        b += struct.pack("<IQ", et, len(items))
        if et in SCALAR_FMT:
            b += struct.pack("<" + SCALAR_FMT[et][1] * len(items), *items)
        else:
            for it in items:
                pack_value(b, et, it)
    else:
        b += struct.pack(SCALAR_FMT[t], v)


def mxfp4_blocks(rng, n, std):
    """n values as MXFP4 blocks of 32: one E8M0 exponent byte, then 16 bytes of 4-bit codes
    (value = code table entry * 2^(e-127) / 2). Random codes have a table std of about 5.85."""
    out = bytearray()
    target = std / (5.85 * 0.5)
    e_lo = 127 + math.floor(math.log2(target))
    for _ in range(n // 32):
        out.append(rng.choice((e_lo, e_lo + 1)))
        out += rng.randbytes(16)
    return bytes(out)


BANKS = {}


def q4_0_bank(rng, std):
    """4096 random Q4_0 blocks whose values have about that std (uniform 4-bit codes minus 8
    have a std of 4.61), drawn once per std; speed shapes repeat it."""
    if std not in BANKS:
        d = struct.pack("<e", std / 4.61)
        BANKS[std] = b"".join(d + rng.randbytes(16) for _ in range(4096))
    return BANKS[std]


def tensor_bytes(rng, dims, ggml, fill):
    n = 1
    for d in dims:
        n *= d
    kind = fill[0]
    if kind == "mxfp4":
        return mxfp4_blocks(rng, n, fill[1])
    if kind == "bank":
        bank, size = q4_0_bank(rng, fill[1]), n // 32 * 18
        return (bank * (size // len(bank) + 1))[:size]
    if kind == "gauss":
        vals = [rng.gauss(0.0, fill[1]) for _ in range(n)]
    elif kind == "uniform":
        vals = [rng.uniform(fill[1], fill[2]) for _ in range(n)]
    elif kind == "const":
        vals = [fill[1]] * n
    elif kind == "list":
        vals = list(fill[1])
    else:
        raise ValueError(kind)
    if len(vals) != n:
        raise ValueError(f"fill of {len(vals)} values for {n}")
    return struct.pack(f"<{n}f", *vals)


def write(m, path, rng):
    infos, off = [], 0
    for name, dims, ggml, fill in m.tensors:
        tid, blk, bsz = ggml
        if dims[0] % blk:
            sys.exit(f"{name}: rows of {dims[0]} values are not whole blocks of {blk}")
        n = 1
        for d in dims:
            n *= d
        infos.append((name, dims, tid, off))
        off += (n // blk * bsz + ALIGN - 1) // ALIGN * ALIGN
    head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(m.meta)))
    for k, t, v in m.meta:
        pack_value(head, STR, k)
        head += struct.pack("<I", t)
        pack_value(head, t, v)
    for name, dims, tid, o in infos:
        pack_value(head, STR, name)
        head += struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", tid, o)
    head += b"\0" * (-len(head) % ALIGN)
    with open(path, "wb") as f:
        f.write(head)
        for name, dims, ggml, fill in m.tensors:   # drawn in order, written as drawn
            data = tensor_bytes(rng, dims, ggml, fill)
            n = 1
            for d in dims:
                n *= d
            assert len(data) == n // ggml[1] * ggml[2], name
            f.write(data)
            f.write(b"\0" * (-len(data) % ALIGN))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", required=True,
                    choices=("qwen35", "qwen35moe", "gemma4", "gemma4-moe", "gemma4-e2b", "gpt-oss",
                             "smollm3", "olmo2", "llama-wide", "llama-k1"))
    ap.add_argument("--vocab-from", required=True, help="a GGUF whose tokenizer.* keys are copied")
    ap.add_argument("--vocab-size", type=int, help="keep only the first N tokens")
    ap.add_argument("--sliding-window", type=int, help="gemma4, gpt-oss: window length (default 16)")
    ap.add_argument("--mxfp4", action="store_true", help="gpt-oss: expert weights in MXFP4")
    ap.add_argument("--scale", type=float, default=0.25, help="std of the random weights")
    ap.add_argument("--output-scale", type=float, default=2.0, help="spread of the output logits")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--speed", action="store_true", help="qwen35moe: a ~4 GB speed shape")
    ap.add_argument("--experts", type=int, default=40, help="--speed: experts per layer")
    ap.add_argument("--mtp", action="store_true",
                    help="qwen35*: a multi-token prediction layer after the others (not run)")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    if a.mtp and not a.arch.startswith("qwen35"):
        sys.exit("--mtp is for qwen35 and qwen35moe")
    if a.speed and a.arch != "qwen35moe":
        sys.exit("--speed is for qwen35moe")
    if a.mxfp4 and a.arch != "gpt-oss":
        sys.exit("--mxfp4 is for gpt-oss")
    if a.sliding_window is not None and not a.arch.startswith(("gemma4", "gpt-oss")):
        sys.exit(f"--sliding-window: {a.arch} has no sliding window")
    tok = tokenizer_keys(a.vocab_from, a.vocab_size)
    a.n_vocab = len(next(v[1] for k, t, v in tok if k == "tokenizer.ggml.tokens"))
    if a.arch in ("qwen35", "qwen35moe"):
        m = qwen35(a, a.arch == "qwen35moe")
    elif a.arch.startswith("gemma4"):
        m = gemma4(a, {"gemma4": "dense", "gemma4-moe": "moe", "gemma4-e2b": "e2b"}[a.arch])
    elif a.arch == "smollm3":
        m = smollm3(a)
    elif a.arch == "olmo2":
        m = olmo2(a)
    elif a.arch == "llama-wide":
        m = llama_wide(a)
    elif a.arch == "llama-k1":
        m = llama_k1(a)
    else:
        m = gpt_oss(a)
    head = [("general.architecture", STR, m.arch), ("general.name", STR, f"tiny-{a.arch}"),
            ("general.file_type", U32, 38 if a.mxfp4 else 2 if a.speed else 0),
            ("general.alignment", U32, ALIGN)]
    m.meta = head + m.meta + tok
    write(m, a.out, random.Random(a.seed))
    print(f"{a.out}: {a.arch}, {len(m.tensors)} tensors, vocab {a.n_vocab}")


if __name__ == "__main__":
    main()
