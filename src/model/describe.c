/* describe.c - nu_model_describe: the hyperparameters as the loader read
 * them (after each family's defaults and hooks), one "name: value" line
 * each, so a user sees how nucleus will run a file. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"

typedef struct text_out {
    char *buf;
    size_t cap, len;
} text_out;

static void out(text_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(text_out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

static const char *norm_name(nu_norm_kind k) {
    return k == NU_NORM_LAYER ? "LayerNorm" : "RMSNorm";
}

static const char *act_name(nu_act a) {
    switch (a) {
    case NU_ACT_SILU: return "SiLU";
    case NU_ACT_GELU_TANH: return "GELU (tanh form)";
    case NU_ACT_GELU_ERF: return "GELU (erf form)";
    case NU_ACT_SWIGLU_CLAMPED: return "SwiGLU clamped at 7 (gpt-oss)";
    }
    return "?";
}

static const char *scaling_name(nu_rope_scaling s) {
    switch (s) {
    case NU_ROPE_SCALING_NONE: return "none";
    case NU_ROPE_SCALING_LINEAR: return "linear";
    case NU_ROPE_SCALING_YARN: return "YaRN";
    case NU_ROPE_SCALING_LONGROPE: return "LongRoPE";
    }
    return "?";
}

/* "a" when every layer has the same value, else "a, b, c, ..." per layer. */
static void per_layer(text_out *o, const char *name, const nu_hparams *hp, size_t offset) {
    bool same = true;
    int32_t first = *(const int32_t *)((const char *)&hp->layer[0] + offset);
    for (int32_t il = 1; il < hp->n_layer && same; il++)
        same = *(const int32_t *)((const char *)&hp->layer[il] + offset) == first;
    out(o, "%s: ", name);
    if (same) {
        out(o, "%d\n", first);
        return;
    }
    for (int32_t il = 0; il < hp->n_layer; il++)
        out(o, "%s%d", il ? " " : "", *(const int32_t *)((const char *)&hp->layer[il] + offset));
    out(o, " (per layer)\n");
}

size_t nu_model_describe(const nu_model *m, char *buf, size_t cap) {
    text_out o = {buf, cap, 0};
    if (cap) buf[0] = 0;
    if (!m->arch) {
        out(&o, "architecture: %s (hyperparameters are read when the weights are loaded)\n",
            m->arch_name);
        return o.len;
    }
    const nu_hparams *hp = &m->hp;
    const nu_arch *a = m->arch;
    out(&o, "architecture: %s\n", a->name);
    out(&o, "layers: %d\nembedding: %d\nvocabulary: %d\ntrained context: %d\n", hp->n_layer,
        hp->n_embd, hp->n_vocab, hp->n_ctx_train);
    per_layer(&o, "query heads", hp, offsetof(nu_layer_hp, n_head));
    per_layer(&o, "key/value heads", hp, offsetof(nu_layer_hp, n_head_kv));
    per_layer(&o, "head size", hp, offsetof(nu_layer_hp, head_dim));
    bool v_differs = false;
    for (int32_t il = 0; il < hp->n_layer; il++)
        v_differs |= hp->layer[il].head_dim_v != hp->layer[il].head_dim;
    if (v_differs) per_layer(&o, "value head size", hp, offsetof(nu_layer_hp, head_dim_v));
    const nu_layer *l0 = &m->layers[0], *la = l0; /* la: the first attention layer */
    for (int32_t il = hp->n_layer - 1; il >= 0; il--)
        if (hp->layer[il].kind == NU_LAYER_ATTENTION) la = &m->layers[il];
    const char *qkv = la->wqkv.data ? "fused" : "split";
    out(&o, "attention: Q/K/V %s%s%s%s, scale %g%s\n", qkv,
        la->bq || la->bqkv ? ", with biases" : "", la->q_norm ? ", per-head Q/K norms" : "",
        a->q_gate ? ", output gated by sigmoid(a gate from Q's projection)" : "",
        hp->attn_scale > 0 ? hp->attn_scale : 1.0 / __builtin_sqrt((double)hp->layer[0].head_dim),
        hp->attn_scale > 0 ? "" : " (1/sqrt(head size))");
    bool windows = false;
    for (int32_t il = 0; il < hp->n_layer; il++) windows |= hp->layer[il].window > 0;
    if (windows) per_layer(&o, "sliding window (0 = full)", hp, offsetof(nu_layer_hp, window));
    if (hp->attn_softcap > 0) out(&o, "attention soft-cap: %g\n", hp->attn_softcap);
    out(&o, "norm: %s, eps %g%s%s\n", norm_name(a->norm), (double)hp->norm_eps,
        l0->post_attn_norm ? ", post norms" : "",
        a->parallel_ffn && !l0->ffn_norm ? ", parallel FFN" : "");
    if (a->rope == NU_ROPE_NONE) {
        out(&o, "positions: learned (%d)\n", hp->n_ctx_train);
    } else {
        for (int32_t i = 0; i < hp->n_rope; i++) {
            const nu_rope *r = &hp->rope[i];
            out(&o, "RoPE%s: %s, %d of %d dims, base %g, scaling %s", i ? " (window layers)" : "",
                a->rope == NU_ROPE_PAIRS ? "adjacent pairs" : "halves", r->n_rot,
                hp->layer[0].head_dim, (double)r->base, scaling_name(r->scaling));
            if (r->scaling != NU_ROPE_SCALING_NONE)
                out(&o, " (factor %g, original context %d)", (double)r->factor, r->orig_ctx);
            if (r->freq_factors) out(&o, ", frequency factors");
            out(&o, "\n");
        }
    }
    if (hp->n_state_planes > 0) {
        const nu_ssm_hp *ss = &hp->ssm;
        out(&o,
            "recurrent layers: %d of %d Gated DeltaNet (conv %d, %d key and %d value heads of %d), "
            "state %.1f KiB per sequence and checkpoint\n",
            hp->n_state_planes, hp->n_layer, ss->d_conv, ss->n_k_heads, ss->n_v_heads, ss->head_dim,
            (double)nu_ssm_state_floats(ss) * 4 * hp->n_state_planes / 1024);
    }
    if (hp->n_expert > 0) {
        out(&o, "experts: %d, %d per token, FFN %d, %s, %s\n", hp->n_expert, hp->n_expert_used,
            hp->n_ff_exp, act_name(a->act),
            a->router == NU_ROUTER_TOPK_SOFTMAX ? "softmax over the chosen"
            : hp->expert_weights_norm           ? "softmax, chosen weights renormalised"
                                                : "softmax");
        if (hp->n_ff_shexp > 0 && l0->shexp_down.data)
            out(&o, "shared expert: FFN %d%s\n", hp->n_ff_shexp,
                l0->shexp_router.data ? ", scaled by sigmoid(its gate)" : "");
    } else {
        bool gated = l0->w_gate.data || l0->w_up.n_out == 2 * (int64_t)hp->layer[0].n_ff;
        per_layer(&o, "FFN", hp, offsetof(nu_layer_hp, n_ff));
        out(&o, "FFN form: %s%s%s\n", gated ? "gated " : "", act_name(a->act),
            l0->w_gate.data || !gated ? "" : ", gate and up fused");
    }
    if (hp->embd_scale != 1.0f) out(&o, "embedding scale: %g\n", (double)hp->embd_scale);
    out(&o, "output: %s\n", m->output.data == m->tok_embd.data ? "tied to the embeddings" : "own");
    if (hp->final_softcap > 0) out(&o, "logit soft-cap: %g\n", (double)hp->final_softcap);
    return o.len;
}
