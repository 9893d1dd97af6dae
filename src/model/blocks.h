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

/* ---- recurrent layers (Gated DeltaNet) ---------------------------------- */

/* 1 / (1 + e^-x), and ln(1 + e^x) (x itself above 20, where they agree in float). */
float nu_sigmoid(float x);
float nu_softplus(float x);

/* L2 norm of each of n_heads heads of head_dim in place:
 * x / sqrt(sum(x^2) + eps). */
void nu_l2_norm_heads(float *x, int32_t n_heads, int32_t head_dim, float eps);

/* One step of a causal depthwise convolution over channels [c0, c1) of
 * n_ch: out[c] = sum_k win[k][c] w[c][k] (k < d_conv - 1, oldest first) +
 * x[c] w[c][d_conv - 1], where win ([d_conv - 1][n_ch]) holds each
 * channel's previous inputs (NULL: zeros, the start of a sequence); then the
 * window moves on into win_out (which may be win): win_out = win[1..], x.
 * w is [n_ch][d_conv]. out may be x. */
void nu_conv_step(const float *w, const float *win, float *win_out, const float *x, float *out,
                  int32_t d_conv, int64_t n_ch, int64_t c0, int64_t c1);

/* One token of the gated delta rule for one head: with the state as dv rows
 * of dk (row j = the column S[:, j] of the dk x dv memory), a = e^g,
 *   M_j <- a M_j + beta (v_j - a M_j . k) k,   o_j = scale (M_j . q)
 * for every row j (Gated DeltaNet's S_t = a S_{t-1} (I - beta k k^T) +
 * beta k v^T with its readout S_t^T q). m_out may be m_in; m_in NULL is a
 * zero state. */
void nu_delta_step(float *m_out, const float *m_in, const float *q, const float *k, const float *v,
                   float g, float beta, float scale, int32_t dk, int32_t dv, float *o);

#endif
