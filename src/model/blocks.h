/* blocks.h - the row operations layers are built from (internal): norms,
 * rotary position embeddings, FFN activations, soft-capping. Each works on
 * one entry's row, so its result never depends on the batch or the thread;
 * tests/test_blocks.c checks each against a plain double-precision
 * reference. */
#ifndef NU_BLOCKS_H
#define NU_BLOCKS_H

#include "arch.h"

/* RMSNorm: out = x / sqrt(mean(x^2) + eps) * w (w NULL: no weight). */
void nu_rms_norm(float *out, const float *x, const float *w, int32_t n, float eps);

/* LayerNorm: out = (x - mean) / sqrt(var + eps) * w + b (w or b NULL: none). */
void nu_layer_norm(float *out, const float *x, const float *w, const float *b, int32_t n,
                   float eps);

/* The norm the architecture uses; b only for NU_NORM_LAYER. */
void nu_norm(nu_norm_kind kind, float *out, const float *x, const float *w, const float *b,
             int32_t n, float eps);

/* The same norm over each of n_heads consecutive heads of head_dim, with one
 * weight vector shared by the heads (per-head Q/K norms). In place. */
void nu_norm_heads(nu_norm_kind kind, float *x, const float *w, const float *b, int32_t n_heads,
                   int32_t head_dim, float eps);

/* cos and sin of every rotated pair at position pos, for rope r (which
 * freq_factors it uses was decided for the context): pair i turns by
 * pos * base^(-2i / n_rot) / freq_factors[i], scaled as r says. Writes
 * n_rot floats: (cos, sin) for each pair. */
void nu_rope_table(const nu_rope *r, const float *freq_factors, int32_t pos, float *cs);

/* Rotates the first n_rot dimensions of each of n_heads heads (head_dim
 * apart) with a table from nu_rope_table: adjacent pairs (x_2i, x_2i+1) or
 * halves (x_i, x_i+n_rot/2). */
void nu_rope_apply(nu_rope_layout layout, float *x, int32_t n_heads, int32_t head_dim,
                   int32_t n_rot, const float *cs);

/* Gated activation in place: gate[i] = act(gate[i]) * up[i]. */
void nu_act_gated(nu_act act, float *gate, const float *up, int64_t n);

/* Activation in place: x[i] = act(x[i]). */
void nu_act_plain(nu_act act, float *x, int64_t n);

/* A mixture's choice for one entry: the k experts with the largest router
 * logits z (largest first; equal logits: the lower id) into sel, and their
 * weights into w: a softmax over all n_expert logits, renormalised over the
 * chosen k when renormalise is set (NU_ROUTER_SOFTMAX_TOPK), or a softmax
 * over the k chosen logits (NU_ROUTER_TOPK_SOFTMAX). k <= NU_MAX_EXPERTS_USED. */
void nu_route(nu_router_kind kind, bool renormalise, const float *z, int32_t n_expert, int32_t k,
              int32_t *sel, float *w);

/* x[i] = c * tanh(x[i] / c). */
void nu_softcap(float *x, int64_t n, float c);

#endif
