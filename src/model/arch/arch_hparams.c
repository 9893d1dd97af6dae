/* arch_hparams.c - hyperparameters only some families have: sliding-window
 * patterns, soft-capping, query scales. The defaults are those of the
 * families' reference configurations, which files may leave out. */
#include <math.h>

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
