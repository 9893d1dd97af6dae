/* arch_hparams.c - hyperparameters only some families have: sliding-window
 * patterns, soft-capping, query scales. The defaults are those of the
 * families' reference configurations, which files may leave out. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "error.h"
#include "loader.h"

/* Gemma 2 and 3 scale queries by 1 / sqrt(query_pre_attn_scalar): the head
 * size, except in the 27B models (n_embd / n_head), which nothing else in
 * the file tells apart but the layer count (46 layers for Gemma 2 27B, 62
 * for Gemma 3 27B). */
static void gemma_query_scale(nu_model *m, int32_t layers_27b) {
    nu_hparams *hp = &m->hp;
    if (hp->attn_scale > 0) return; /* the file says */
    float d = hp->n_layer == layers_27b ? (float)(hp->n_embd / hp->layer[0].n_head)
                                        : (float)hp->layer[0].head_dim;
    hp->attn_scale = 1.0f / sqrtf(d);
}

/* Gemma 2: every other layer (0, 2, ...) attends within a window (4096 by
 * default), scores and logits are soft-capped (50 and 30 by default). */
nu_status nu_arch_gemma2_hparams(nu_model *m, nu_error *err) {
    nu_hparams *hp = &m->hp;
    hp->attn_softcap = 50.0f;
    hp->final_softcap = 30.0f;
    nu_status st;
    if ((st = nu_arch_float(m, "attn_logit_softcapping", false, &hp->attn_softcap, err)) ||
        (st = nu_arch_float(m, "final_logit_softcapping", false, &hp->final_softcap, err)) ||
        (st = nu_arch_windows(m, 4096, 2, err)))
        return st;
    gemma_query_scale(m, 46);
    return NU_OK;
}

/* Gemma 3: with a window, five layers in six use it (0-4, 6-10, ...) with
 * their own RoPE base (10000 unless the file says), the others the global
 * base and scaling; no score soft-capping; logits capped only if the file
 * says. */
nu_status nu_arch_gemma3_hparams(nu_model *m, nu_error *err) {
    nu_hparams *hp = &m->hp;
    hp->attn_softcap = 0;
    nu_status st = nu_arch_windows(m, 0, 6, err);
    if (st) return st;
    bool windows = false;
    for (int32_t il = 0; il < hp->n_layer; il++) windows |= hp->layer[il].window > 0;
    if (windows && hp->n_rope == 1) nu_arch_set_swa_rope(m, 10000.0f);
    gemma_query_scale(m, 62);
    return NU_OK;
}

/* gpt-oss: every other layer (0, 2, ...) attends within a window the file
 * must give, with the global layers' RoPE unless it gives another base; the
 * experts are always present. */
nu_status nu_arch_gpt_oss_hparams(nu_model *m, nu_error *err) {
    int32_t window = 0;
    nu_status st = nu_arch_int(m, "attention.sliding_window", true, &window, err);
    if (st == NU_OK && m->hp.n_expert == 0)
        st = nu_fail(err, NU_ERR_FORMAT, "a gpt-oss file without expert_count");
    return st ? st : nu_arch_windows(m, window, 2, err);
}

/* Gemma 4: the window layers (a bool per layer) have their own head size,
 * RoPE base (10000 unless the file says) and rotated width; the global
 * layers rotate with the file's frequency factors; scores are not scaled;
 * the last attention.shared_kv_layers layers read the cache of the last
 * window layer (window layers) or the last global layer before them; token
 * embeddings per layer when embedding_length_per_layer_input is not 0. */
nu_status nu_arch_gemma4_hparams(nu_model *m, nu_error *err) {
    nu_hparams *hp = &m->hp;
    char key[NU_MAX_KEY];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch_name);
    if (!nu_gguf_get_arr(m->file, key, GGUF_BOOL))
        return nu_fail(err, NU_ERR_FORMAT, "missing metadata key %s (one bool per layer)", key);
    int32_t window = 0, kd = 0, vd = 0, shared = 0, n_rot_swa = 0;
    nu_status st;
    if ((st = nu_arch_int(m, "attention.sliding_window", true, &window, err)) ||
        (st = nu_arch_windows(m, window, 1, err)) ||
        (st = nu_arch_int(m, "attention.key_length_swa", true, &kd, err)) ||
        (st = nu_arch_int(m, "attention.value_length_swa", true, &vd, err)) ||
        (st = nu_arch_int(m, "attention.shared_kv_layers", false, &shared, err)) ||
        (st = nu_arch_int(m, "embedding_length_per_layer_input", false, &hp->n_embd_pl, err)))
        return st;
    hp->attn_scale = 1.0f;
    if (hp->n_rope == 1) nu_arch_set_swa_rope(m, 10000.0f);
    n_rot_swa = kd;
    if ((st = nu_arch_int(m, "rope.dimension_count_swa", false, &n_rot_swa, err))) return st;
    hp->rope[1].n_rot = n_rot_swa;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        nu_layer_hp *l = &hp->layer[il];
        if (l->window > 0) l->head_dim = kd, l->head_dim_v = vd;
    }
    if (shared < 0 || shared > hp->n_layer - 2)
        return nu_fail(err, NU_ERR_FORMAT,
                       "attention.shared_kv_layers %d leaves fewer than 2 layers", shared);
    const int32_t first = hp->n_layer - shared;
    if (shared > 0 && (hp->layer[first - 1].window > 0 || hp->layer[first - 2].window == 0))
        return nu_fail(err, NU_ERR_FORMAT,
                       "with shared keys and values, layer %d must be global and layer %d a "
                       "window layer",
                       first - 1, first - 2);
    for (int32_t il = first; il < hp->n_layer; il++)
        hp->layer[il].kv_from = hp->layer[il].window > 0 ? first - 2 : first - 1;
    return NU_OK;
}

/* SmolLM3: every fourth layer (3, 7, ...) uses no rotary positions. */
nu_status nu_arch_smollm3_hparams(nu_model *m, nu_error *err) {
    (void)err;
    for (int32_t il = 0; il < m->hp.n_layer; il++)
        if ((il + 1) % 4 == 0) m->hp.layer[il].rope = -1;
    return NU_OK;
}

/* Qwen 3.5 / 3.6: Gated DeltaNet layers (attention.recurrent_layers, one
 * bool per layer, or all but every full_attention_interval-th: 3 in 4 by
 * default) beside gated full-attention layers; the DeltaNet's sizes from
 * the ssm.* keys (state_size is the head size of keys and values,
 * group_count the key heads, time_step_rank the value heads). Layers of
 * multi-token prediction (nextn_predict_layers, after the others) are left
 * out. RoPE is
 * interleaved M-RoPE, which for text (one position in every section) is
 * NeoX rotation over rope.dimension_count dimensions. */
nu_status nu_arch_qwen35_hparams(nu_model *m, nu_error *err) {
    nu_hparams *hp = &m->hp;
    nu_ssm_hp *s = &hp->ssm;
    int32_t inner = 0, interval = 4, nextn = 0;
    nu_status st;
    if ((st = nu_arch_int(m, "ssm.conv_kernel", true, &s->d_conv, err)) ||
        (st = nu_arch_int(m, "ssm.state_size", true, &s->head_dim, err)) ||
        (st = nu_arch_int(m, "ssm.group_count", true, &s->n_k_heads, err)) ||
        (st = nu_arch_int(m, "ssm.time_step_rank", true, &s->n_v_heads, err)) ||
        (st = nu_arch_int(m, "ssm.inner_size", true, &inner, err)) ||
        (st = nu_arch_int(m, "full_attention_interval", false, &interval, err)) ||
        (st = nu_arch_int(m, "expert_shared_feed_forward_length", false, &hp->n_ff_shexp, err)) ||
        (st = nu_arch_int(m, "nextn_predict_layers", false, &nextn, err)))
        return st;
    /* multi-token prediction layers come after the others (block_count counts
     * them); the main pass does not run them, so nucleus does not load them */
    const int32_t n_all = hp->n_layer;
    if (nextn >= n_all)
        return nu_fail(err, NU_ERR_FORMAT, "nextn_predict_layers %d leaves no layer of %d", nextn,
                       n_all);
    hp->n_layer = n_all - nextn;
    if (s->d_conv < 1 || s->d_conv > 64 || s->head_dim < 1 || s->head_dim > NU_MAX_HEAD_DIM ||
        s->n_k_heads < 1 || s->n_v_heads < 1 || s->n_v_heads % s->n_k_heads ||
        (int64_t)s->n_v_heads * s->head_dim != inner || s->n_v_heads > (1 << 16))
        return nu_fail(err, NU_ERR_FORMAT,
                       "Gated DeltaNet sizes do not fit: conv_kernel %d (1..64), state_size %d "
                       "(1..%d), group_count %d, time_step_rank %d (a multiple of it), "
                       "inner_size %d (time_step_rank x state_size)",
                       s->d_conv, s->head_dim, NU_MAX_HEAD_DIM, s->n_k_heads, s->n_v_heads, inner);
    if (strcmp(m->arch_name, "qwen35moe") == 0 && hp->n_expert == 0)
        return nu_fail(err, NU_ERR_FORMAT, "a qwen35moe file without expert_count");
    if (hp->n_expert > 0 && hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->layer[0].n_ff;
    char key[NU_MAX_KEY];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", m->arch_name);
    const nu_gguf_value *flags = nu_gguf_get_arr(m->file, key, GGUF_BOOL);
    if (!flags && nu_gguf_find(m->file, key))
        return nu_fail(err, NU_ERR_FORMAT, "metadata %s must be an array of bools", key);
    if (flags && flags->v.arr.n != (uint64_t)n_all)
        return nu_fail(err, NU_ERR_FORMAT, "metadata %s has %llu items, not %d", key,
                       (unsigned long long)flags->v.arr.n, n_all);
    if (interval < 1)
        return nu_fail(err, NU_ERR_FORMAT, "full_attention_interval must be positive");
    for (int32_t il = 0; il < hp->n_layer; il++) {
        nu_layer_hp *l = &hp->layer[il];
        bool recurrent = flags ? flags->v.arr.items[il].v.u != 0 : (il + 1) % interval != 0;
        if (recurrent) {
            l->kind = NU_LAYER_DELTANET;
            l->state_plane = hp->n_state_planes++;
        } else if (l->head_dim != l->head_dim_v) {
            return nu_fail(err, NU_ERR_FORMAT,
                           "layer %d: gated attention needs key_length %d = value_length %d", il,
                           l->head_dim, l->head_dim_v);
        }
    }
    return NU_OK;
}
