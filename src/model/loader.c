/* loader.c - a model's hyperparameters and weights, read through its
 * architecture's description (arch.h): the keys every family shares, the
 * family's own hook, then each layer's tensors as its manifest lists them,
 * every shape checked against the layer's hyperparameters. Also the one list
 * of the matrices a forward pass multiplies with, and their repacking. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arch.h"
#include "error.h"
#include "loader.h"

/* ---- keys ------------------------------------------------------------------ */

static void arch_key(const nu_model *m, const char *suffix, char *key, size_t cap) {
    snprintf(key, cap, "%s.%s", m->arch_name, suffix);
}

nu_status nu_arch_int(const nu_model *m, const char *suffix, bool required, int32_t *out,
                      nu_error *err) {
    char key[NU_MAX_KEY];
    arch_key(m, suffix, key, sizeof key);
    uint32_t v;
    if (!nu_gguf_find(m->file, key)) {
        if (required) return nu_fail(err, NU_ERR_FORMAT, "missing metadata key %s", key);
        return NU_OK;
    }
    if (!nu_gguf_get_u32(m->file, key, &v) || v > (1u << 30))
        return nu_fail(err, NU_ERR_FORMAT, "metadata %s must be an integer in 0..2^30", key);
    *out = (int32_t)v;
    return NU_OK;
}

nu_status nu_arch_float(const nu_model *m, const char *suffix, bool required, float *out,
                        nu_error *err) {
    char key[NU_MAX_KEY];
    arch_key(m, suffix, key, sizeof key);
    if (!nu_gguf_find(m->file, key)) {
        if (required) return nu_fail(err, NU_ERR_FORMAT, "missing metadata key %s", key);
        return NU_OK;
    }
    float v;
    if (!nu_gguf_get_f32(m->file, key, &v) || !(v >= 0) || v > 1e30f)
        return nu_fail(err, NU_ERR_FORMAT, "metadata %s must be a number in 0..1e30", key);
    *out = v;
    return NU_OK;
}

nu_status nu_arch_bool(const nu_model *m, const char *suffix, bool *out, nu_error *err) {
    char key[NU_MAX_KEY];
    arch_key(m, suffix, key, sizeof key);
    if (!nu_gguf_find(m->file, key)) return NU_OK;
    if (!nu_gguf_get_bool(m->file, key, out))
        return nu_fail(err, NU_ERR_FORMAT, "metadata %s must be a bool", key);
    return NU_OK;
}

/* A key that is one integer for every layer or an array of one per layer
 * (files of models whose layers differ write arrays). Writes
 * layer[i].<field at offset>; a missing key keeps the values. */
static nu_status per_layer_int(nu_model *m, const char *suffix, bool required, size_t offset,
                               int32_t min, nu_error *err) {
    char key[NU_MAX_KEY];
    arch_key(m, suffix, key, sizeof key);
    const nu_gguf_value *v = nu_gguf_find(m->file, key);
    nu_hparams *hp = &m->hp;
    if (!v) {
        if (required) return nu_fail(err, NU_ERR_FORMAT, "missing metadata key %s", key);
        return NU_OK;
    }
    for (int32_t il = 0; il < hp->n_layer; il++) {
        int64_t x;
        if (v->type == GGUF_ARRAY) {
            if (v->v.arr.n != (uint64_t)hp->n_layer)
                return nu_fail(err, NU_ERR_FORMAT, "metadata %s has %" PRIu64 " items, not %d", key,
                               v->v.arr.n, hp->n_layer);
            const nu_gguf_value *it = &v->v.arr.items[il];
            if (it->type >= GGUF_FLOAT32 && it->type != GGUF_UINT64 && it->type != GGUF_INT64)
                return nu_fail(err, NU_ERR_FORMAT, "metadata %s must hold integers", key);
            x = it->type == GGUF_INT8 || it->type == GGUF_INT16 || it->type == GGUF_INT32 ||
                        it->type == GGUF_INT64
                    ? it->v.i
                    : (int64_t)it->v.u;
        } else {
            uint32_t u;
            if (!nu_gguf_get_u32(m->file, key, &u))
                return nu_fail(err, NU_ERR_FORMAT, "metadata %s must be an integer", key);
            x = u;
        }
        if (x < min || x > (1 << 30))
            return nu_fail(err, NU_ERR_FORMAT,
                           "metadata %s: %" PRId64 " is out of range (%d..2^30)", key, x, min);
        *(int32_t *)((char *)&hp->layer[il] + offset) = (int32_t)x;
    }
    return NU_OK;
}

/* RoPE scaling keys: "<arch>.rope.scaling.type" (none | linear | yarn |
 * longrope) with ".factor", ".original_context_length" and ".attn_factor",
 * or the older ".rope.scale_linear". */
static nu_status read_rope_scaling(nu_model *m, nu_rope *r, nu_error *err) {
    char key[NU_MAX_KEY];
    nu_gguf_string type = {"", 0};
    r->scaling = NU_ROPE_SCALING_NONE;
    r->factor = 1.0f;
    r->attn_factor = 1.0f;
    r->orig_ctx = m->hp.n_ctx_train;
    arch_key(m, "rope.scaling.type", key, sizeof key);
    bool has_type = nu_gguf_get_str(m->file, key, &type);
    nu_status st = nu_arch_float(m, "rope.scaling.factor", false, &r->factor, err);
    if (st == NU_OK) st = nu_arch_float(m, "rope.scale_linear", false, &r->factor, err);
    if (st == NU_OK) st = nu_arch_float(m, "rope.scaling.attn_factor", false, &r->attn_factor, err);
    if (st == NU_OK)
        st = nu_arch_int(m, "rope.scaling.original_context_length", false, &r->orig_ctx, err);
    if (st != NU_OK) return st;
    if (!has_type) {
        arch_key(m, "rope.scale_linear", key, sizeof key);
        if (nu_gguf_find(m->file, key) && r->factor != 1.0f) r->scaling = NU_ROPE_SCALING_LINEAR;
    } else if (nu_gguf_str_eq(type, "linear")) {
        r->scaling = NU_ROPE_SCALING_LINEAR;
    } else if (nu_gguf_str_eq(type, "yarn")) {
        r->scaling = NU_ROPE_SCALING_YARN;
    } else if (nu_gguf_str_eq(type, "longrope")) {
        r->scaling = NU_ROPE_SCALING_LONGROPE;
    } else if (!nu_gguf_str_eq(type, "none")) {
        return nu_fail(err, NU_ERR_UNSUPPORTED, "rope scaling type '%.*s' is not supported",
                       (int)(type.len > 64 ? 64 : type.len), type.data);
    }
    if (r->scaling == NU_ROPE_SCALING_NONE || r->scaling == NU_ROPE_SCALING_LONGROPE)
        r->factor = 1.0f;
    if ((r->scaling == NU_ROPE_SCALING_LINEAR || r->scaling == NU_ROPE_SCALING_YARN) &&
        !(r->factor > 0))
        return nu_fail(err, NU_ERR_FORMAT, "rope scaling factor %g must be positive", r->factor);
    if (r->orig_ctx < 1)
        return nu_fail(err, NU_ERR_FORMAT, "rope scaling original context %d must be positive",
                       r->orig_ctx);
    return NU_OK;
}

nu_status nu_arch_windows(nu_model *m, int32_t default_window, int32_t default_pattern,
                          nu_error *err) {
    nu_hparams *hp = &m->hp;
    int32_t window = default_window, pattern = default_pattern;
    nu_status st = nu_arch_int(m, "attention.sliding_window", false, &window, err);
    if (st) return st;
    if (window == 0) return NU_OK;
    char key[NU_MAX_KEY];
    arch_key(m, "attention.sliding_window_pattern", key, sizeof key);
    const nu_gguf_value *flags = nu_gguf_get_arr(m->file, key, GGUF_BOOL);
    if (flags && flags->v.arr.n != (uint64_t)hp->n_layer)
        return nu_fail(err, NU_ERR_FORMAT, "metadata %s has %" PRIu64 " items, not %d", key,
                       flags->v.arr.n, hp->n_layer);
    if (!flags && (st = nu_arch_int(m, "attention.sliding_window_pattern", false, &pattern, err)))
        return st;
    /* a separate RoPE base for the window layers */
    float base_swa = 0;
    if ((st = nu_arch_float(m, "rope.freq_base_swa", false, &base_swa, err))) return st;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        bool swa =
            flags ? flags->v.arr.items[il].v.u != 0 : pattern <= 1 || il % pattern < pattern - 1;
        hp->layer[il].window = swa ? window : 0;
    }
    if (base_swa > 0) nu_arch_set_swa_rope(m, base_swa);
    return NU_OK;
}

void nu_arch_set_swa_rope(nu_model *m, float base) {
    nu_hparams *hp = &m->hp;
    nu_rope *r = &hp->rope[1];
    *r = hp->rope[0];
    r->base = base;
    r->scaling = NU_ROPE_SCALING_NONE;
    r->factor = 1.0f;
    r->attn_factor = 1.0f;
    r->freq_factors = NULL;
    hp->n_rope = 2;
    for (int32_t il = 0; il < hp->n_layer; il++) hp->layer[il].rope = hp->layer[il].window ? 1 : 0;
}

/* Keys every family shares, with the defaults files rely on. */
static nu_status read_common(nu_model *m, nu_error *err) {
    nu_hparams *hp = &m->hp;
    nu_status st;
    hp->n_ctx_train = 2048;
    if ((st = nu_arch_int(m, "embedding_length", true, &hp->n_embd, err)) ||
        (st = nu_arch_int(m, "block_count", true, &hp->n_layer, err)) ||
        (st = nu_arch_int(m, "context_length", false, &hp->n_ctx_train, err)))
        return st;
    if (hp->n_embd < 1 || hp->n_layer < 1 || hp->n_ctx_train < 1)
        return nu_fail(err, NU_ERR_FORMAT,
                       "embedding_length, block_count and context_length must be positive");
    if (hp->n_layer > NU_MAX_LAYERS)
        return nu_fail(err, NU_ERR_UNSUPPORTED, "%d layers (at most %d)", hp->n_layer,
                       NU_MAX_LAYERS);
    hp->layer = calloc((size_t)hp->n_layer, sizeof *hp->layer);
    if (!hp->layer) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    for (int32_t il = 0; il < hp->n_layer; il++) hp->layer[il].n_ff = 4 * hp->n_embd;
    if ((st =
             per_layer_int(m, "attention.head_count", true, offsetof(nu_layer_hp, n_head), 1, err)))
        return st;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        nu_layer_hp *l = &hp->layer[il];
        l->n_head_kv = l->n_head;
        l->head_dim = hp->n_embd / l->n_head;
        l->kv_from = -1;
        l->state_plane = -1;
    }
    if ((st = per_layer_int(m, "attention.head_count_kv", false, offsetof(nu_layer_hp, n_head_kv),
                            1, err)) ||
        (st =
             per_layer_int(m, "feed_forward_length", false, offsetof(nu_layer_hp, n_ff), 0, err)) ||
        (st = per_layer_int(m, "attention.key_length", false, offsetof(nu_layer_hp, head_dim), 1,
                            err)))
        return st;
    for (int32_t il = 0; il < hp->n_layer; il++) hp->layer[il].head_dim_v = hp->layer[il].head_dim;
    if ((st = per_layer_int(m, "attention.value_length", false, offsetof(nu_layer_hp, head_dim_v),
                            1, err)))
        return st;
    /* RoPE */
    nu_rope *r = &hp->rope[0];
    hp->n_rope = 1;
    r->n_rot = hp->layer[0].head_dim;
    r->base = 10000.0f;
    if ((st = nu_arch_int(m, "rope.dimension_count", false, &r->n_rot, err)) ||
        (st = nu_arch_float(m, "rope.freq_base", false, &r->base, err)) ||
        (st = read_rope_scaling(m, r, err)))
        return st;
    if (!(r->base > 0)) return nu_fail(err, NU_ERR_FORMAT, "rope.freq_base must be positive");
    /* norms */
    hp->norm_eps = 1e-5f;
    if ((st = nu_arch_float(m, "attention.layer_norm_rms_epsilon", false, &hp->norm_eps, err)) ||
        (st = nu_arch_float(m, "attention.layer_norm_epsilon", false, &hp->norm_eps, err)))
        return st;
    /* experts */
    if ((st = nu_arch_int(m, "expert_count", false, &hp->n_expert, err)) ||
        (st = nu_arch_int(m, "expert_used_count", false, &hp->n_expert_used, err)))
        return st;
    hp->n_ff_exp = hp->layer[0].n_ff;
    hp->expert_weights_norm = true;
    if ((st = nu_arch_int(m, "expert_feed_forward_length", false, &hp->n_ff_exp, err)) ||
        (st = nu_arch_bool(m, "expert_weights_norm", &hp->expert_weights_norm, err)))
        return st;
    /* embedding models say how their hidden states are pooled */
    hp->pooling = -1;
    {
        char key[NU_MAX_KEY];
        arch_key(m, "pooling_type", key, sizeof key);
        uint32_t v;
        if (nu_gguf_find(m->file, key)) {
            if (!nu_gguf_get_u32(m->file, key, &v) || v > 1000)
                return nu_fail(err, NU_ERR_FORMAT, "metadata %s must be a small integer", key);
            hp->pooling = (int32_t)v;
        }
        bool causal = true;
        if ((st = nu_arch_bool(m, "attention.causal", &causal, err))) return st;
        if (!causal)
            return nu_fail(err, NU_ERR_UNSUPPORTED,
                           "non-causal attention (%s.attention.causal = false) is not supported",
                           m->arch_name);
    }
    /* attention extras some files carry */
    hp->attn_scale = 0;
    hp->embd_scale = 1.0f;
    if ((st = nu_arch_float(m, "attention.scale", false, &hp->attn_scale, err)) ||
        (st = nu_arch_float(m, "attn_logit_softcapping", false, &hp->attn_softcap, err)) ||
        (st = nu_arch_float(m, "final_logit_softcapping", false, &hp->final_softcap, err)))
        return st;
    return NU_OK;
}

/* Checks what the forward pass assumes of every layer. */
static nu_status check_hparams(nu_model *m, nu_error *err) {
    nu_hparams *hp = &m->hp;
    if (hp->n_expert > 0) {
        if (hp->n_expert > NU_MAX_EXPERTS)
            return nu_fail(err, NU_ERR_UNSUPPORTED, "%d experts (at most %d)", hp->n_expert,
                           NU_MAX_EXPERTS);
        if (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert ||
            hp->n_expert_used > NU_MAX_EXPERTS_USED)
            return nu_fail(err, NU_ERR_FORMAT,
                           "expert_used_count %d must be in 1..expert_count (%d) and at most %d",
                           hp->n_expert_used, hp->n_expert, NU_MAX_EXPERTS_USED);
        if (hp->n_ff_exp < 1)
            return nu_fail(err, NU_ERR_FORMAT, "expert_feed_forward_length must be positive");
    }
    for (int32_t i = 0; i < hp->n_rope; i++) {
        const nu_rope *r = &hp->rope[i];
        if (r->n_rot % 2 || r->n_rot < 0)
            return nu_fail(err, NU_ERR_FORMAT, "rope.dimension_count %d must be even", r->n_rot);
    }
    int32_t slots = 0;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        nu_layer_hp *l = &hp->layer[il];
        if (l->n_head_kv < 1 || l->n_head % l->n_head_kv)
            return nu_fail(err, NU_ERR_FORMAT,
                           "layer %d: head_count %d is not a multiple of head_count_kv %d", il,
                           l->n_head, l->n_head_kv);
        if (l->head_dim > NU_MAX_HEAD_DIM || l->head_dim_v > NU_MAX_HEAD_DIM)
            return nu_fail(err, NU_ERR_UNSUPPORTED, "layer %d: head dimension %d is larger than %d",
                           il, l->head_dim > l->head_dim_v ? l->head_dim : l->head_dim_v,
                           NU_MAX_HEAD_DIM);
        if ((int64_t)l->n_head * l->head_dim > (1 << 20))
            return nu_fail(err, NU_ERR_FORMAT, "layer %d: %d heads of %d are too many", il,
                           l->n_head, l->head_dim);
        if (l->rope >= 0 && hp->rope[l->rope].n_rot > l->head_dim)
            return nu_fail(err, NU_ERR_FORMAT,
                           "rope.dimension_count %d is larger than the head (%d)",
                           hp->rope[l->rope].n_rot, l->head_dim);
        if (l->window < 0)
            return nu_fail(err, NU_ERR_FORMAT, "layer %d: negative sliding window", il);
        if (l->kind != NU_LAYER_ATTENTION) { /* no keys and values */
            l->kv_slot = -1;
            continue;
        }
        if (l->kv_from < 0) {
            l->kv_slot = slots++;
            continue;
        }
        const nu_layer_hp *src = &hp->layer[l->kv_from];
        if (l->kv_from >= il || src->kv_from >= 0 || src->kind != NU_LAYER_ATTENTION ||
            src->n_head_kv != l->n_head_kv || src->head_dim != l->head_dim ||
            src->head_dim_v != l->head_dim_v)
            return nu_fail(err, NU_ERR_FORMAT,
                           "layer %d cannot read the keys and values of layer %d (a later, "
                           "shared or differently shaped layer)",
                           il, l->kv_from);
        l->kv_slot = src->kv_slot;
    }
    hp->n_kv_slots = slots;
    hp->n_head = hp->layer[0].n_head;
    hp->n_head_kv = hp->layer[0].n_head_kv;
    hp->head_dim = hp->layer[0].head_dim;
    hp->n_ff = hp->layer[0].n_ff;
    return NU_OK;
}

/* ---- tensors --------------------------------------------------------------- */

typedef enum tensor_kind {
    VEC,  /* F32 [d0], or [d0, d1] when d1 is given */
    MAT,  /* [d0, d1]: d1 rows of d0 */
    EXPS, /* [d0, d1, n_expert]: a matrix per expert */
    EXPV, /* F32 [d0, n_expert]: a vector per expert */
} tensor_kind;

/* Sizes a tensor's shape is made of, resolved for each layer. */
typedef enum dim {
    D_EMBD = 1,
    D_Q,       /* n_head * head_dim */
    D_KV,      /* n_head_kv * head_dim */
    D_V,       /* n_head_kv * head_dim_v */
    D_QKV,     /* D_Q + D_KV + D_V */
    D_ATTN,    /* n_head * head_dim_v: the attention output */
    D_FF,      /* the layer's n_ff */
    D_FF2,     /* 2 n_ff: gate and up rows in one matrix */
    D_HEAD,    /* head_dim */
    D_EXPERTS, /* n_expert */
    D_FF_EXP,  /* n_ff_exp */
    D_HEADS,   /* n_head */
    D_ONE,     /* 1 */
    D_PL,      /* n_embd_pl: per-layer embedding width */
    D_Q2,      /* 2 n_head * head_dim: queries and their gates */
    D_CONV,    /* d_conv: a Gated DeltaNet's convolution taps */
    D_SSM_CH,  /* its convolution channels: q, k (key heads) and v (value heads) */
    D_SSM_IN,  /* its value heads x head size */
    D_SSM_VH,  /* its value heads */
    D_SSM_HD,  /* its head size */
    D_FF_SH,   /* n_ff_shexp: the shared expert's width */
} dim;

typedef struct tensor_info {
    const char *name; /* under "blk.N." */
    uint8_t kind, d0, d1;
    uint16_t offset; /* of the field in nu_layer */
} tensor_info;

#define T(id, name, kind, d0, d1, field) [id] = {name, kind, d0, d1, offsetof(nu_layer, field)}
static const tensor_info catalogue[NU_T_COUNT] = {
    T(NU_T_ATTN_NORM, "attn_norm.weight", VEC, D_EMBD, 0, attn_norm),
    T(NU_T_ATTN_NORM_B, "attn_norm.bias", VEC, D_EMBD, 0, attn_norm_b),
    T(NU_T_ATTN_Q, "attn_q.weight", MAT, D_EMBD, D_Q, wq),
    T(NU_T_ATTN_K, "attn_k.weight", MAT, D_EMBD, D_KV, wk),
    T(NU_T_ATTN_V, "attn_v.weight", MAT, D_EMBD, D_V, wv),
    T(NU_T_ATTN_QKV, "attn_qkv.weight", MAT, D_EMBD, D_QKV, wqkv),
    T(NU_T_ATTN_OUT, "attn_output.weight", MAT, D_ATTN, D_EMBD, wo),
    T(NU_T_ATTN_Q_B, "attn_q.bias", VEC, D_Q, 0, bq),
    T(NU_T_ATTN_K_B, "attn_k.bias", VEC, D_KV, 0, bk),
    T(NU_T_ATTN_V_B, "attn_v.bias", VEC, D_V, 0, bv),
    T(NU_T_ATTN_QKV_B, "attn_qkv.bias", VEC, D_QKV, 0, bqkv),
    T(NU_T_ATTN_OUT_B, "attn_output.bias", VEC, D_EMBD, 0, bo),
    T(NU_T_ATTN_Q_NORM, "attn_q_norm.weight", VEC, D_HEAD, 0, q_norm),
    T(NU_T_ATTN_K_NORM, "attn_k_norm.weight", VEC, D_HEAD, 0, k_norm),
    T(NU_T_ATTN_POST_NORM, "post_attention_norm.weight", VEC, D_EMBD, 0, post_attn_norm),
    T(NU_T_FFN_NORM, "ffn_norm.weight", VEC, D_EMBD, 0, ffn_norm),
    T(NU_T_FFN_NORM_B, "ffn_norm.bias", VEC, D_EMBD, 0, ffn_norm_b),
    T(NU_T_FFN_GATE, "ffn_gate.weight", MAT, D_EMBD, D_FF, w_gate),
    T(NU_T_FFN_UP, "ffn_up.weight", MAT, D_EMBD, D_FF, w_up),
    T(NU_T_FFN_UP_GATED, "ffn_up.weight", MAT, D_EMBD, D_FF2, w_up),
    T(NU_T_FFN_DOWN, "ffn_down.weight", MAT, D_FF, D_EMBD, w_down),
    T(NU_T_FFN_UP_B, "ffn_up.bias", VEC, D_FF, 0, b_up),
    T(NU_T_FFN_DOWN_B, "ffn_down.bias", VEC, D_EMBD, 0, b_down),
    T(NU_T_FFN_POST_NORM, "post_ffw_norm.weight", VEC, D_EMBD, 0, post_ffn_norm),
    T(NU_T_FFN_ROUTER, "ffn_gate_inp.weight", MAT, D_EMBD, D_EXPERTS, router),
    T(NU_T_FFN_GATE_EXPS, "ffn_gate_exps.weight", EXPS, D_EMBD, D_FF_EXP, gate_exps),
    T(NU_T_FFN_UP_EXPS, "ffn_up_exps.weight", EXPS, D_EMBD, D_FF_EXP, up_exps),
    T(NU_T_FFN_DOWN_EXPS, "ffn_down_exps.weight", EXPS, D_FF_EXP, D_EMBD, down_exps),
    T(NU_T_ATTN_SINKS, "attn_sinks.weight", VEC, D_HEADS, 0, attn_sinks),
    T(NU_T_FFN_NORM_POST_NAME, "post_attention_norm.weight", VEC, D_EMBD, 0, ffn_norm),
    T(NU_T_FFN_ROUTER_B, "ffn_gate_inp.bias", VEC, D_EXPERTS, 0, router_b),
    T(NU_T_FFN_GATE_EXPS_B, "ffn_gate_exps.bias", EXPV, D_FF_EXP, 0, gate_exps_b),
    T(NU_T_FFN_UP_EXPS_B, "ffn_up_exps.bias", EXPV, D_FF_EXP, 0, up_exps_b),
    T(NU_T_FFN_DOWN_EXPS_B, "ffn_down_exps.bias", EXPV, D_EMBD, 0, down_exps_b),
    T(NU_T_LAYER_OUT_SCALE, "layer_output_scale.weight", VEC, D_ONE, 0, out_scale),
    T(NU_T_FFN_POST_NORM_1, "post_ffw_norm_1.weight", VEC, D_EMBD, 0, post_ffn_norm_1),
    T(NU_T_FFN_PRE_NORM_2, "pre_ffw_norm_2.weight", VEC, D_EMBD, 0, pre_ffn_norm_2),
    T(NU_T_FFN_POST_NORM_2, "post_ffw_norm_2.weight", VEC, D_EMBD, 0, post_ffn_norm_2),
    T(NU_T_FFN_ROUTER_SCALE, "ffn_gate_inp.scale", VEC, D_EMBD, 0, router_scale),
    T(NU_T_FFN_DOWN_EXPS_SCALE, "ffn_down_exps.scale", VEC, D_EXPERTS, 0, down_exps_scale),
    T(NU_T_PL_GATE, "inp_gate.weight", MAT, D_EMBD, D_PL, pl_gate),
    T(NU_T_PL_PROJ, "proj.weight", MAT, D_PL, D_EMBD, pl_proj),
    T(NU_T_PL_POST_NORM, "post_norm.weight", VEC, D_EMBD, 0, pl_post_norm),
    T(NU_T_ATTN_Q_NORM_FULL, "attn_q_norm.weight", VEC, D_Q, 0, q_norm_full),
    T(NU_T_ATTN_K_NORM_FULL, "attn_k_norm.weight", VEC, D_KV, 0, k_norm_full),
    T(NU_T_ATTN_Q_GATED, "attn_q.weight", MAT, D_EMBD, D_Q2, wq),
    T(NU_T_SSM_QKV, "attn_qkv.weight", MAT, D_EMBD, D_SSM_CH, ssm_qkv),
    T(NU_T_SSM_Z, "attn_gate.weight", MAT, D_EMBD, D_SSM_IN, ssm_z),
    T(NU_T_SSM_CONV, "ssm_conv1d.weight", VEC, D_CONV, D_SSM_CH, ssm_conv),
    T(NU_T_SSM_DT, "ssm_dt.bias", VEC, D_SSM_VH, 0, ssm_dt),
    T(NU_T_SSM_A, "ssm_a", VEC, D_SSM_VH, 0, ssm_a),
    T(NU_T_SSM_BETA, "ssm_beta.weight", MAT, D_EMBD, D_SSM_VH, ssm_beta),
    T(NU_T_SSM_ALPHA, "ssm_alpha.weight", MAT, D_EMBD, D_SSM_VH, ssm_alpha),
    T(NU_T_SSM_NORM, "ssm_norm.weight", VEC, D_SSM_HD, 0, ssm_norm),
    T(NU_T_SSM_OUT, "ssm_out.weight", MAT, D_SSM_IN, D_EMBD, ssm_out),
    T(NU_T_FFN_SHEXP_ROUTER, "ffn_gate_inp_shexp.weight", MAT, D_EMBD, D_ONE, shexp_router),
    T(NU_T_FFN_GATE_SHEXP, "ffn_gate_shexp.weight", MAT, D_EMBD, D_FF_SH, shexp_gate),
    T(NU_T_FFN_UP_SHEXP, "ffn_up_shexp.weight", MAT, D_EMBD, D_FF_SH, shexp_up),
    T(NU_T_FFN_DOWN_SHEXP, "ffn_down_shexp.weight", MAT, D_FF_SH, D_EMBD, shexp_down),
};
#undef T

static int64_t resolve(const nu_hparams *hp, const nu_layer_hp *l, uint8_t d) {
    switch ((dim)d) {
    case D_EMBD: return hp->n_embd;
    case D_Q: return (int64_t)l->n_head * l->head_dim;
    case D_KV: return (int64_t)l->n_head_kv * l->head_dim;
    case D_V: return (int64_t)l->n_head_kv * l->head_dim_v;
    case D_QKV:
        return (int64_t)(l->n_head + l->n_head_kv) * l->head_dim +
               (int64_t)l->n_head_kv * l->head_dim_v;
    case D_ATTN: return (int64_t)l->n_head * l->head_dim_v;
    case D_FF: return l->n_ff;
    case D_FF2: return 2 * (int64_t)l->n_ff;
    case D_HEAD: return l->head_dim;
    case D_EXPERTS: return hp->n_expert;
    case D_FF_EXP: return hp->n_ff_exp;
    case D_HEADS: return l->n_head;
    case D_ONE: return 1;
    case D_PL: return hp->n_embd_pl;
    case D_Q2: return 2 * (int64_t)l->n_head * l->head_dim;
    case D_CONV: return hp->ssm.d_conv;
    case D_SSM_CH: return nu_ssm_conv_dim(&hp->ssm);
    case D_SSM_IN: return (int64_t)hp->ssm.n_v_heads * hp->ssm.head_dim;
    case D_SSM_VH: return hp->ssm.n_v_heads;
    case D_SSM_HD: return hp->ssm.head_dim;
    case D_FF_SH: return hp->n_ff_shexp;
    }
    return 1;
}

int64_t nu_ssm_conv_dim(const nu_ssm_hp *s) {
    return (int64_t)(2 * s->n_k_heads + s->n_v_heads) * s->head_dim;
}

int64_t nu_ssm_state_floats(const nu_ssm_hp *s) {
    return (int64_t)(s->d_conv - 1) * nu_ssm_conv_dim(s) +
           (int64_t)s->n_v_heads * s->head_dim * s->head_dim;
}

/* Finds a tensor and checks its type and shape [ne0, ne1, ne2] (1 for
 * unused dimensions). Vectors must be F32; matrices of a type the kernels
 * cannot multiply are refused by name. */
static nu_status find_tensor(const nu_model *m, const char *name, int64_t ne0, int64_t ne1,
                             int64_t ne2, bool matrix, bool required, const nu_gguf_tensor **out,
                             nu_error *err) {
    const nu_gguf_tensor *t = nu_gguf_find_tensor(m->file, name);
    *out = NULL;
    if (!t) {
        if (required) return nu_fail(err, NU_ERR_FORMAT, "missing tensor '%s'", name);
        return NU_OK;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return nu_fail(err, NU_ERR_FORMAT,
                       "tensor '%s' has shape [%" PRId64 ", %" PRId64 ", %" PRId64
                       "], expected [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                       name, t->ne[0], t->ne[1], t->ne[2], ne0, ne1, ne2);
    const nu_type_traits *tt = nu_type_get(t->type);
    if (!matrix && t->type != NU_TYPE_F32)
        return nu_fail(err, NU_ERR_UNSUPPORTED, "tensor '%s' is %s; vectors must be f32", name,
                       tt->name ? tt->name : "of an unknown type");
    if (matrix && !tt->computable)
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "tensor '%s' has type %s, which nucleus cannot compute with yet", name,
                       tt->name ? tt->name : "unknown");
    *out = t;
    return NU_OK;
}

static void set_matrix(nu_matrix *out, const nu_gguf_tensor *t, int64_t n_in, int64_t n_out) {
    out->type = t->type;
    out->n_in = n_in;
    out->n_out = n_out;
    out->data = t->data;
    out->row_bytes = (size_t)nu_type_row_bytes(t->type, (uint64_t)n_in);
    out->packed = NULL;
}

nu_status nu_load_matrix(const nu_model *m, const char *name, int64_t n_in, int64_t n_out,
                         bool required, nu_matrix *out, nu_error *err) {
    const nu_gguf_tensor *t;
    nu_status st = find_tensor(m, name, n_in, n_out, 1, true, required, &t, err);
    memset(out, 0, sizeof *out);
    if (st == NU_OK && t) set_matrix(out, t, n_in, n_out);
    return st;
}

nu_status nu_load_vector(const nu_model *m, const char *name, int64_t n, bool required,
                         const float **out, nu_error *err) {
    const nu_gguf_tensor *t;
    nu_status st = find_tensor(m, name, n, 1, 1, false, required, &t, err);
    *out = t ? (const float *)t->data : NULL;
    return st;
}

/* Expert layouts nucleus does not read, named before a "missing tensor"
 * would hide them: experts as one tensor each (blk.N.ffn_gate.E.weight, the
 * older Mixtral conversion) instead of stacked in ffn_*_exps, and expert
 * tensors in a file whose metadata gives no expert count. */
static nu_status check_expert_layout(const nu_model *m, int32_t il, nu_error *err) {
    static const char *const parts[] = {"ffn_gate", "ffn_up", "ffn_down"};
    char name[NU_MAX_KEY];
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        snprintf(name, sizeof name, "blk.%d.%s.0.weight", il, parts[i]);
        if (nu_gguf_find_tensor(m->file, name))
            return nu_fail(err, NU_ERR_UNSUPPORTED,
                           "unsupported mixture-of-experts layout: '%s' holds one expert (the "
                           "older per-expert conversion); nucleus reads experts stacked in "
                           "blk.N.%s_exps.weight (convert the model again with a current "
                           "converter)",
                           name, parts[i]);
        snprintf(name, sizeof name, "blk.%d.%s_exps.weight", il, parts[i]);
        if (m->hp.n_expert == 0 && nu_gguf_find_tensor(m->file, name))
            return nu_fail(err, NU_ERR_UNSUPPORTED,
                           "unsupported mixture-of-experts file: it has expert tensors ('%s') "
                           "but no %s.expert_count, so the experts cannot be sized",
                           name, m->arch->name);
    }
    return NU_OK;
}

/* One layer's tensors, as the manifest lists them. */
static nu_status load_layer(nu_model *m, int32_t il, nu_error *err) {
    const nu_hparams *hp = &m->hp;
    const nu_layer_hp *l = &hp->layer[il];
    nu_layer *layer = &m->layers[il];
    bool moe = hp->n_expert > 0, recurrent = l->kind != NU_LAYER_ATTENTION;
    char name[NU_MAX_KEY];
    nu_status layout = check_expert_layout(m, il, err);
    if (layout) return layout;
    for (const nu_tensor_use *u = m->arch->manifest; u->id != NU_T_END; u++) {
        const tensor_info *ti = &catalogue[u->id];
        if (((u->flags & NU_IF_RECURRENT) && !recurrent) ||
            ((u->flags & NU_IF_ATTENTION) && recurrent))
            continue; /* a tensor of the other kind of layer */
        bool required = (u->flags & NU_REQ) && !((u->flags & NU_IF_MOE) && !moe) &&
                        !((u->flags & NU_IF_DENSE) && moe);
        bool allowed = required || (u->flags & NU_OPT);
        if (!allowed) continue;
        snprintf(name, sizeof name, "blk.%d.%s", il, ti->name);
        int64_t d0 = resolve(hp, l, ti->d0), d1 = ti->d1 ? resolve(hp, l, ti->d1) : 1;
        void *field = (char *)layer + ti->offset;
        const nu_gguf_tensor *t;
        nu_status st;
        if (ti->kind == VEC) {
            st = find_tensor(m, name, d0, d1, 1, false, required, &t, err);
            *(const float **)field = st == NU_OK && t ? (const float *)t->data : NULL;
        } else if (ti->kind == EXPV) {
            st = find_tensor(m, name, d0, hp->n_expert, 1, false, required, &t, err);
            *(const float **)field = st == NU_OK && t ? (const float *)t->data : NULL;
        } else if (ti->kind == MAT) {
            st = nu_load_matrix(m, name, d0, d1, required, (nu_matrix *)field, err);
        } else {
            st = find_tensor(m, name, d0, d1, hp->n_expert, true, required, &t, err);
            if (st == NU_OK && t) {
                nu_experts *x = field;
                set_matrix(&x->m, t, d0, d1);
                x->n = hp->n_expert;
                x->stride = x->m.row_bytes * (size_t)d1;
            }
        }
        if (st) return st;
    }
    /* alternatives the manifest leaves open must be complete: Q, K and V
     * fused or split (V may be K's projection itself: Gemma 4), K and V
     * absent only where the layer reads another's cache */
    bool own_kv = l->kv_from < 0;
    if (!recurrent && !layer->wqkv.data && !(layer->wq.data && (layer->wk.data || !own_kv)))
        return nu_fail(err, NU_ERR_FORMAT,
                       "layer %d has neither attn_qkv.weight nor attn_q/k(/v).weight", il);
    if (!own_kv && (layer->wk.data || layer->wv.data || layer->wqkv.data))
        return nu_fail(err, NU_ERR_FORMAT,
                       "layer %d reads layer %d's keys and values but has its own", il, l->kv_from);
    if (layer->wk.data && !layer->wv.data && !m->arch->v_norm)
        return nu_fail(err, NU_ERR_FORMAT, "layer %d has attn_k.weight but no attn_v.weight", il);
    if (!moe && !layer->w_up.data)
        return nu_fail(err, NU_ERR_FORMAT, "layer %d has no ffn_up.weight", il);
    if (hp->n_embd_pl > 0 && !(layer->pl_gate.data && layer->pl_proj.data && layer->pl_post_norm))
        return nu_fail(err, NU_ERR_FORMAT,
                       "layer %d lacks inp_gate/proj/post_norm for its per-layer embedding", il);
    return NU_OK;
}

/* Token embeddings, positions, the final norm and the LM head. */
static nu_status load_globals(nu_model *m, nu_error *err) {
    const nu_hparams *hp = &m->hp;
    const nu_arch *a = m->arch;
    nu_status st;
    if ((st = nu_load_matrix(m, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &m->tok_embd,
                             err)) ||
        (st = nu_load_vector(m, "output_norm.weight", hp->n_embd, true, &m->output_norm, err)) ||
        (st = nu_load_vector(m, "output_norm.bias", hp->n_embd, a->output_norm_bias,
                             &m->output_norm_b, err)) ||
        (st = nu_load_matrix(m, "output.weight", hp->n_embd, hp->n_vocab, false, &m->output, err)))
        return st;
    if (!m->output.data) m->output = m->tok_embd; /* tied */
    if (a->learned_positions && (st = nu_load_matrix(m, "position_embd.weight", hp->n_embd,
                                                     hp->n_ctx_train, true, &m->pos_embd, err)))
        return st;
    if (hp->n_embd_pl > 0) {
        int64_t all = (int64_t)hp->n_embd_pl * hp->n_layer;
        if ((st = nu_load_matrix(m, "per_layer_token_embd.weight", all, hp->n_vocab, true,
                                 &m->pl_tok_embd, err)) ||
            (st = nu_load_matrix(m, "per_layer_model_proj.weight", hp->n_embd, all, true,
                                 &m->pl_model_proj, err)) ||
            (st = nu_load_vector(m, "per_layer_proj_norm.weight", hp->n_embd_pl, true,
                                 &m->pl_proj_norm, err)))
            return st;
    }
    /* RoPE frequency factors: one set (Llama 3), or LongRoPE's pair */
    nu_rope *r = &m->hp.rope[0];
    int64_t pairs = r->n_rot / 2;
    if ((st = nu_load_vector(m, "rope_freqs.weight", pairs, false, &r->freq_factors, err)) ||
        (st = nu_load_vector(m, "rope_factors_long.weight", pairs,
                             r->scaling == NU_ROPE_SCALING_LONGROPE, &m->rope_long, err)) ||
        (st = nu_load_vector(m, "rope_factors_short.weight", pairs,
                             r->scaling == NU_ROPE_SCALING_LONGROPE, &m->rope_short, err)))
        return st;
    if ((m->rope_long || m->rope_short) && r->scaling != NU_ROPE_SCALING_LONGROPE) {
        /* factors without the scaling type: LongRoPE all the same */
        if (!m->rope_long || !m->rope_short)
            return nu_fail(err, NU_ERR_FORMAT,
                           "the file has only one of rope_factors_long and rope_factors_short");
        r->scaling = NU_ROPE_SCALING_LONGROPE;
    }
    return NU_OK;
}

nu_status nu_load_architecture(nu_model *m, nu_error *err) {
    m->arch = nu_arch_find(m->arch_name);
    if (!m->arch) {
        char names[512];
        nu_arch_list(names, sizeof names);
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "architecture '%s' is not supported (nucleus runs: %s)", m->arch_name,
                       names);
    }
    nu_status st;
    if ((st = read_common(m, err))) return st;
    if (m->arch->embd_scale_sqrt) m->hp.embd_scale = sqrtf((float)m->hp.n_embd);
    if (m->arch->hparams && (st = m->arch->hparams(m, err))) return st;
    if ((st = check_hparams(m, err))) return st;
    if ((st = load_globals(m, err))) return st;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) return nu_fail(err, NU_ERR_NOMEM, "out of memory for %d layers", m->hp.n_layer);
    for (int32_t il = 0; il < m->hp.n_layer; il++)
        if ((st = load_layer(m, il, err))) return st;
    return NU_OK;
}

/* ---- the matrices a step multiplies with ----------------------------------- */

int32_t nu_model_weights(const nu_model *m, nu_weight *out, int32_t cap) {
    int32_t n = 0;
#define ADD(w) (n < cap ? (void)(out[n] = (w)) : (void)0, n++)
    for (int32_t il = 0; m->layers && il < m->hp.n_layer; il++) {
        const nu_layer *l = &m->layers[il];
        for (const nu_tensor_use *u = m->arch->manifest; u->id != NU_T_END; u++) {
            const tensor_info *ti = &catalogue[u->id];
            const void *field = (const char *)l + ti->offset;
            if (ti->kind == MAT && ((const nu_matrix *)field)->data) {
                ADD(((nu_weight){.m = field}));
            } else if (ti->kind == EXPS && ((const nu_experts *)field)->m.data) {
                ADD(((nu_weight){.experts = field}));
            }
        }
    }
    if (m->layers && m->pl_model_proj.data) ADD(((nu_weight){.m = &m->pl_model_proj}));
    if (m->layers) ADD(((nu_weight){.m = &m->output}));
#undef ADD
    return n;
}

nu_matrix nu_expert_matrix(const nu_experts *x, int32_t e) {
    nu_matrix w = x->m;
    w.data = (const char *)x->m.data + (size_t)e * x->stride;
    if (x->m.packed) w.packed = (const char *)x->m.packed + (size_t)e * x->packed_stride;
    return w;
}

uint64_t nu_weight_step_bytes(const nu_model *m, const nu_weight *w) {
    if (w->m) return (uint64_t)w->m->row_bytes * (uint64_t)w->m->n_out;
    return (uint64_t)w->experts->stride * (uint64_t)m->hp.n_expert_used;
}

/* ---- panels ------------------------------------------------------------------- */

/* Tells the kernel the file pages of a repacked matrix will not be read
 * again, so they stop counting towards the process's memory (they are
 * clean file pages: touching them again would simply re-read them). */
static void release_pages(const void *data, size_t bytes) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t begin = ((uintptr_t)data + page - 1) / page * page;
    uintptr_t end = ((uintptr_t)data + bytes) / page * page;
    if (end > begin) madvise((void *)begin, end - begin, MADV_DONTNEED);
}

static size_t align64(size_t n) {
    return (n + 63) / 64 * 64;
}

/* Bytes of a weight's panel copy (every expert's, for experts). */
static size_t weight_pack_bytes(const nu_weight *w) {
    if (w->m) return align64(nu_matrix_pack_bytes(w->m));
    return align64(nu_matrix_pack_bytes(&w->experts->m)) * (size_t)w->experts->n;
}

/* Bytes of a weight's file rows (every expert's, for experts). */
static size_t weight_row_bytes(const nu_weight *w) {
    if (w->m) return w->m->row_bytes * (size_t)w->m->n_out;
    return w->experts->stride * (size_t)w->experts->n;
}

/* Bytes a weight takes in the repacked area: its panels, or else a copy of
 * its rows as they are in the file. Rows streamed from the file mapping
 * cross a 4 KB page every 4 KB; in the area's huge pages the streaming row
 * kernels read faster (Q6_K 2048x5632 from memory on 2 threads,
 * bench_kernels: 26.4 -> 30.9 GB/s, medians of six). The token embeddings
 * stay where they are (a step reads a few of their rows, or all of them as
 * the tied output, which then shares them). */
static size_t weight_area_bytes(const nu_model *m, const nu_weight *w) {
    const size_t panels = weight_pack_bytes(w);
    if (panels) return panels;
    if (w->m && w->m->data == m->tok_embd.data) return 0;
    return align64(weight_row_bytes(w));
}

nu_status nu_repack_weights(nu_model *m, nu_error *err) {
    const char *env = getenv("NUCLEUS_REPACK");
    if (env && strcmp(env, "0") == 0) return NU_OK;
    int32_t n = nu_model_weights(m, NULL, 0);
    nu_weight *ws = malloc(sizeof *ws * (size_t)n);
    if (!ws) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    nu_model_weights(m, ws, n);
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += weight_area_bytes(m, &ws[i]);
    if (total == 0) {
        free(ws);
        return NU_OK;
    }
    /* Anonymous memory asked for in huge pages where the system allows: fewer
     * page faults while repacking and fewer TLB misses while streaming. */
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(ws);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for %zu bytes of repacked weights", total);
    }
    m->packed = p;
    m->packed_bytes = total;
    madvise(p, total, MADV_HUGEPAGE);
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t bytes = weight_area_bytes(m, &ws[i]);
        if (!bytes) continue;
        /* the weights are const for every reader; the loader owns them */
        nu_matrix *mat = ws[i].m ? (nu_matrix *)ws[i].m : (nu_matrix *)&ws[i].experts->m;
        int32_t n_mats = ws[i].m ? 1 : ws[i].experts->n;
        if (!weight_pack_bytes(&ws[i])) {
            /* no panels for this type: its rows, copied */
            const void *file_rows = mat->data;
            memcpy((uint8_t *)m->packed + at, file_rows, weight_row_bytes(&ws[i]));
            mat->data = (uint8_t *)m->packed + at;
            at += bytes;
            release_pages(file_rows, weight_row_bytes(&ws[i]));
            continue;
        }
        size_t one = ws[i].m ? bytes : bytes / (size_t)n_mats;
        for (int32_t e = 0; e < n_mats; e++) {
            nu_matrix src = ws[i].m ? *mat : nu_expert_matrix(ws[i].experts, e);
            src.packed = NULL;
            nu_matrix_pack(&src, (uint8_t *)m->packed + at + (size_t)e * one, 0, src.n_out / 16);
        }
        mat->packed = (uint8_t *)m->packed + at;
        if (!ws[i].m) ((nu_experts *)ws[i].experts)->packed_stride = one;
        at += bytes;
        if (mat->data != m->tok_embd.data) release_pages(mat->data, weight_row_bytes(&ws[i]));
    }
    free(ws);
    return NU_OK;
}
