/* forward.c - the transformer forward pass over a batch of entries.
 *
 * Every architecture runs the same layer recipe; its description (arch.h)
 * and the tensors a layer has switch the steps:
 *
 *   a  = norm(x)                         RMSNorm, or LayerNorm with bias
 *   q, k, v = Wq a, Wk a, Wv a           or one fused Wqkv a; optional biases
 *   q, k = headnorm(q), headnorm(k)      per-head Q/K norms, when present
 *   q, k = RoPE(q), RoPE(k)              adjacent pairs or halves, partial,
 *                                        scaled, per-layer base
 *   o  = Wo attention(q, k, v) (+ bo)    GQA, sliding window per layer,
 *                                        score soft-capping
 *   o  = postnorm(o)                     when present (Gemma 2/3)
 *   h  = x + o
 *   f  = FFN(norm(h))                    SwiGLU / GeGLU (gate and up split or
 *                                        fused), plain GELU with biases, or
 *                                        a mixture of experts; with a
 *                                        parallel FFN, FFN(a)
 *   x' = h + postnorm(f)
 *
 * Token embeddings may be scaled (Gemma) and learned positions added
 * (GPT-2); the logits may be soft-capped. The batch's keys and values go
 * into the KV cache first, so an entry attends to everything cached for its
 * sequence at positions <= its own (and inside its layer's window), whether
 * it came in this batch or an earlier one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "blocks.h"
#include "context.h"
#include "error.h"
#include "recurrent.h"

/* ---- attention ---------------------------------------------------------- */

/* What q.k is multiplied by: the file's or the family's scale, else
 * 1 / sqrt(head_dim). */
static float attn_scale(const nu_hparams *hp, const nu_layer_hp *L) {
    return hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)L->head_dim);
}

typedef struct attn_task {
    nu_context *ctx;
    const nu_batch_entry *e;
    int32_t n, layer;
} attn_task;

/* How many of a sequence's cells (sorted by position) are at or before pos. */
static int32_t cells_upto(const nu_kv_cache *kv, const int32_t *cells, int32_t n, int32_t pos) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (kv->pos[cells[mid]] <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Query heads h0 .. h0+nh-1 (1 <= nh <= NU_ATTN_HEADS, all sharing key/value
 * head g) of one entry: softmax(scale q.k) weighted sums of the values
 * visible to it (positions <= its own, and inside the layer's window).
 * Every cached row is read and converted once for the nh heads; each head's
 * arithmetic is the same as if it were alone. An f16 cache multiplies in
 * half precision: queries (f16 keys) and attention weights (f16 values) are
 * rounded to f16, as a half-precision kernel sees them; q8_0 / q4_0 keys
 * meet the query rounded to 8 bits per block (nu_vec_dots_rows). */
static void attend_heads(nu_context *c, const nu_batch_entry *e, int32_t b, int32_t h0, int32_t nh,
                         int32_t layer, float *scores) {
    const nu_model *m = c->model;
    const nu_hparams *hp = &m->hp;
    const nu_layer_hp *L = &hp->layer[layer];
    const nu_kv_cache *kv = &c->kv;
    const nu_kv_plane *plane = &kv->planes[L->kv_slot];
    const int32_t hd = L->head_dim, hdv = L->head_dim_v, g = h0 / (L->n_head / L->n_head_kv);
    const uint32_t tk = kv->type_k, tv = kv->type_v;
    const int32_t *cells = c->s.seq_cells + (size_t)e->seq * c->params.n_ctx;
    int32_t n = cells_upto(kv, cells, c->s.seq_count[e->seq], e->pos);
    int32_t first = L->window > 0 ? cells_upto(kv, cells, n, e->pos - L->window) : 0;
    cells += first;
    n -= first;
    const size_t n_ctx = (size_t)c->params.n_ctx + 1; /* a row of scores, and a sink */
    const float scale = m->arch->prescale_q ? 1.0f : attn_scale(hp, L);
    float q16[NU_ATTN_HEADS][NU_MAX_HEAD_DIM], max[NU_ATTN_HEADS];
    const float *q[NU_ATTN_HEADS] = {0};
    float *out[NU_ATTN_HEADS] = {0};
    for (int32_t i = 0; i < nh; i++) {
        q[i] = c->s.q + (size_t)b * L->n_head * hd + (size_t)(h0 + i) * hd;
        out[i] = c->s.xb + (size_t)b * L->n_head * hdv + (size_t)(h0 + i) * hdv;
        if (tk == NU_TYPE_F16) {
            memcpy(q16[i], q[i], (size_t)hd * sizeof(float));
            nu_vec_round_f16(q16[i], hd);
            q[i] = q16[i];
        }
        memset(out[i], 0, (size_t)hdv * sizeof(float));
    }
    nu_vec_dots_rows(tk, q, nh, nu_kv_plane_keys(plane, kv->n_cells, g), plane->k_head, cells, n,
                     hd, scores, n_ctx);
    for (int32_t i = 0; i < nh; i++) {
        float *sc = scores + (size_t)i * n_ctx;
        max[i] = nu_vec_scale_max(sc, n, scale);
        if (hp->attn_softcap > 0) {
            nu_softcap(sc, n, hp->attn_softcap);
            max[i] = nu_vec_scale_max(sc, n, 1.0f);
        }
    }
    /* a sink is one more score (no value): it takes part in the max and the
     * sum, so the weights of the real positions add up to less than 1 */
    const float *sinks = c->model->layers[layer].attn_sinks;
    for (int32_t i = 0; sinks && i < nh; i++) {
        scores[(size_t)i * n_ctx + n] = sinks[h0 + i];
        if (sinks[h0 + i] > max[i]) max[i] = sinks[h0 + i];
    }
    for (int32_t i = 0; i < nh; i++)
        nu_vec_softmax(scores + (size_t)i * n_ctx, n + (sinks ? 1 : 0), max[i], tv == NU_TYPE_F16);
    nu_vec_mads_rows(tv, out, scores, n_ctx, nh, nu_kv_plane_values(plane, kv->n_cells, g),
                     plane->v_head, cells, n, hdv);
}

/* Work units: (entry, group of up to NU_ATTN_HEADS query heads sharing a
 * key/value head), dealt to the threads in turn: in a prompt, later entries
 * see more keys, so contiguous shares would leave the first thread idle.
 * A key/value head's query heads are cut into `parts` groups of `size`
 * (the last may be smaller): as few as NU_ATTN_HEADS allows, so each row is
 * read by few passes, but enough for every thread to have a unit when the
 * entries and key/value heads alone are fewer than the threads (one entry
 * of a model with one or two key/value heads). */
static void attention_worker(void *arg, int ith, int nth) {
    attn_task *t = arg;
    nu_context *c = t->ctx;
    const nu_layer_hp *L = &c->model->hp.layer[t->layer];
    const int32_t rep = L->n_head / L->n_head_kv;
    int32_t parts = (rep + NU_ATTN_HEADS - 1) / NU_ATTN_HEADS;
    const int64_t groups = (int64_t)t->n * L->n_head_kv;
    if (groups < nth) {
        const int32_t want = (int32_t)((nth + groups - 1) / groups);
        if (want > parts) parts = want < rep ? want : rep;
    }
    const int32_t size = (rep + parts - 1) / parts;
    parts = (rep + size - 1) / size;
    const int32_t units_per_entry = L->n_head_kv * parts;
    float *scores = c->s.scores + (size_t)ith * NU_ATTN_HEADS * (c->params.n_ctx + 1);
    for (int64_t i = ith; i < (int64_t)t->n * units_per_entry; i += nth) {
        int32_t b = (int32_t)(i / units_per_entry), u = (int32_t)(i % units_per_entry);
        int32_t g = u / parts, part = u % parts;
        int32_t h0 = g * rep + part * size;
        int32_t nh = rep - part * size < size ? rep - part * size : size;
        attend_heads(c, &t->e[b], b, h0, nh, t->layer, scores);
    }
}

/* ---- per-row steps, shared among threads for large batches ---------------- */

/* Batches with at least this many entries run their per-row steps on the
 * pool; smaller ones (generation) run them inline, where waking the pool
 * would cost more than the work. */
#define PARALLEL_ROWS 8

typedef enum row_step {
    ROW_ATTN_NORM,  /* xb = norm(x) with the layer's attention weight */
    ROW_QKV,        /* split, biases, Q/K norms, RoPE of q and k, k and v into the cache */
    ROW_FFN_NORM,   /* x += attention output (in q); xb = FFN input */
    ROW_FFN_ACT,    /* gate = act(gate) * up, or act(up + b) */
    ROW_FFN_OUT,    /* x += FFN output (in q) */
    ROW_MOE_INPUTS, /* beside a dense FFN: the experts' and the router's inputs (Gemma 4) */
    ROW_MOE_MERGE,  /* q = norm_1(dense, in yd) + norm_2(experts, in q) (Gemma 4) */
    ROW_PL_ACT,     /* per-layer embedding: gate = gelu(gate) * this layer's input */
    ROW_PL_OUT,     /* x += norm(q); then x *= the layer's output scale */
    ROW_ATTN_GATE,  /* attention output (xb) *= sigmoid(its gate in qg) */
    ROW_SHEXP_ACT,  /* the shared expert: gate = act(gate) * up */
    ROW_SHEXP_ADD,  /* q += sigmoid(router logit) * the shared expert's output (in yd) */
} row_step;

typedef struct row_task {
    nu_context *ctx;
    const nu_layer *l;
    int32_t il, n;
    row_step step;
} row_task;

static void add_rows(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static void add_bias(float *y, const float *b, size_t n) {
    if (b) add_rows(y, b, n);
}

/* The parallel-FFN form: no FFN norm, the FFN reads the attention's input
 * norm (which xn keeps). */
static bool parallel_ffn(const nu_model *m, const nu_layer *l) {
    return m->arch->parallel_ffn && !l->ffn_norm;
}

/* Q, K and V of one entry: split from the fused product, biased, normed per
 * head, rotated, and k and v stored in the layer's cache plane. */
static void qkv_row(nu_context *c, const nu_layer *l, int32_t il, int32_t b) {
    const nu_model *m = c->model;
    const nu_hparams *hp = &m->hp;
    const nu_layer_hp *L = &hp->layer[il];
    const nu_arch *a = m->arch;
    nu_scratch *s = &c->s;
    const size_t qd = (size_t)L->n_head * L->head_dim, kd = (size_t)L->n_head_kv * L->head_dim;
    const size_t vd = (size_t)L->n_head_kv * L->head_dim_v;
    const bool own_kv = L->kv_from < 0;
    float *q = s->q + b * qd, *k = s->k + b * kd, *v = s->v + b * vd;
    if (l->wqkv.data) {
        float *row = s->qkv + b * (qd + kd + vd);
        add_bias(row, l->bqkv, qd + kd + vd);
        memcpy(q, row, qd * sizeof(float));
        memcpy(k, row + qd, kd * sizeof(float));
        memcpy(v, row + qd + kd, vd * sizeof(float));
    } else if (own_kv && !l->wv.data) {
        memcpy(v, k, kd * sizeof(float)); /* V is K's projection itself (Gemma 4) */
    }
    if (a->q_gate) /* each head's query, then its gate (which stays in qg) */
        for (int32_t h = 0; h < L->n_head; h++)
            memcpy(q + (size_t)h * L->head_dim, s->qg + b * 2 * qd + (size_t)h * 2 * L->head_dim,
                   (size_t)L->head_dim * sizeof(float));
    add_bias(q, l->bq, qd);
    if (l->q_norm)
        nu_norm_heads(a->qk_norm, q, l->q_norm, NULL, L->n_head, L->head_dim, hp->norm_eps);
    if (l->q_norm_full) nu_rms_norm(q, q, l->q_norm_full, (int32_t)qd, hp->norm_eps);
    const bool rotate = a->rope != NU_ROPE_NONE && L->rope >= 0;
    const nu_rope *r = rotate ? &hp->rope[L->rope] : NULL;
    const float *cs =
        rotate ? s->rope + ((size_t)L->rope * c->params.n_batch + b) * c->dims.rot : NULL;
    if (rotate) nu_rope_apply(a->rope, q, L->n_head, L->head_dim, r->n_rot, cs);
    if (a->prescale_q) {
        const float scale = attn_scale(hp, L);
        for (size_t i = 0; i < qd; i++) q[i] *= scale;
    }
    if (!own_kv) return; /* the layer reads another layer's cache */
    add_bias(k, l->bk, kd);
    add_bias(v, l->bv, vd);
    if (l->k_norm)
        nu_norm_heads(a->qk_norm, k, l->k_norm, NULL, L->n_head_kv, L->head_dim, hp->norm_eps);
    if (l->k_norm_full) nu_rms_norm(k, k, l->k_norm_full, (int32_t)kd, hp->norm_eps);
    if (a->v_norm)
        nu_norm_heads(NU_NORM_RMS, v, NULL, NULL, L->n_head_kv, L->head_dim_v, hp->norm_eps);
    if (rotate) nu_rope_apply(a->rope, k, L->n_head_kv, L->head_dim, r->n_rot, cs);
    nu_kv_cache_store(&c->kv, false, L->kv_slot, s->cells[b], k);
    nu_kv_cache_store(&c->kv, true, L->kv_slot, s->cells[b], v);
}

static void row_step_one(const row_task *t, int32_t b) {
    nu_context *c = t->ctx;
    const nu_model *m = c->model;
    const nu_hparams *hp = &m->hp;
    const nu_arch *a = m->arch;
    const nu_layer *l = t->l;
    const nu_layer_hp *L = &hp->layer[t->il];
    nu_scratch *s = &c->s;
    const size_t d = (size_t)hp->n_embd;
    switch (t->step) {
    case ROW_ATTN_NORM:
        if (l->attn_norm) /* else no norm before attention (OLMo 2) */
            nu_norm(a->norm, s->xb + b * d, s->x + b * d, l->attn_norm, l->attn_norm_b, (int32_t)d,
                    hp->norm_eps);
        else
            memcpy(s->xb + b * d, s->x + b * d, d * sizeof(float));
        if (parallel_ffn(m, l)) memcpy(s->xn + b * d, s->xb + b * d, d * sizeof(float));
        break;
    case ROW_QKV: qkv_row(c, l, t->il, b); break;
    case ROW_FFN_NORM: {
        float *o = s->q + b * d;
        add_bias(o, l->bo, d);
        if (l->post_attn_norm) nu_rms_norm(o, o, l->post_attn_norm, (int32_t)d, hp->norm_eps);
        add_rows(s->x + b * d, o, d);
        if (parallel_ffn(m, l))
            memcpy(s->xb + b * d, s->xn + b * d, d * sizeof(float));
        else if (l->ffn_norm)
            nu_norm(a->norm, s->xb + b * d, s->x + b * d, l->ffn_norm, l->ffn_norm_b, (int32_t)d,
                    hp->norm_eps);
        else /* no norm before the FFN (OLMo 2) */
            memcpy(s->xb + b * d, s->x + b * d, d * sizeof(float));
        break;
    }
    case ROW_FFN_ACT: {
        const size_t ff = (size_t)L->n_ff;
        if (l->w_gate.data) {
            nu_act_gated(a->act, s->gate + b * ff, s->up + b * ff, (int64_t)ff);
        } else if (l->w_up.n_out == 2 * (int64_t)ff) {
            /* fused: the gate's rows first, then the up rows */
            float *gu = s->up + b * 2 * ff, *g = s->gate + b * ff;
            memcpy(g, gu, ff * sizeof(float));
            nu_act_gated(a->act, g, gu + ff, (int64_t)ff);
        } else {
            float *u = s->gate + b * ff;
            add_bias(u, l->b_up, ff);
            nu_act_plain(a->act, u, (int64_t)ff);
        }
        break;
    }
    case ROW_FFN_OUT: {
        float *o = s->q + b * d;
        add_bias(o, l->b_down, d);
        if (l->post_ffn_norm) nu_rms_norm(o, o, l->post_ffn_norm, (int32_t)d, hp->norm_eps);
        add_rows(s->x + b * d, o, d);
        if (l->out_scale && !l->pl_gate.data)
            for (size_t i = 0; i < d; i++) s->x[b * d + i] *= l->out_scale[0];
        break;
    }
    case ROW_MOE_INPUTS: {
        /* experts read pre_norm_2(h); the router rms(h) / sqrt(n_embd) * scale */
        const float *h = s->x + b * d;
        float *r = s->xr + b * d;
        nu_rms_norm(s->xn + b * d, h, l->pre_ffn_norm_2, (int32_t)d, hp->norm_eps);
        nu_rms_norm(r, h, NULL, (int32_t)d, hp->norm_eps);
        const float k = 1.0f / sqrtf((float)d);
        for (size_t i = 0; i < d; i++) r[i] = r[i] * k * (l->router_scale ? l->router_scale[i] : 1);
        break;
    }
    case ROW_MOE_MERGE: {
        float *dense = s->yd + b * d, *experts = s->q + b * d;
        nu_rms_norm(dense, dense, l->post_ffn_norm_1, (int32_t)d, hp->norm_eps);
        nu_rms_norm(experts, experts, l->post_ffn_norm_2, (int32_t)d, hp->norm_eps);
        add_rows(experts, dense, d);
        break;
    }
    case ROW_PL_ACT: {
        const size_t pl = (size_t)hp->n_embd_pl;
        float *g = s->plg + b * pl;
        nu_act_plain(NU_ACT_GELU_TANH, g, (int64_t)pl);
        const float *in = s->pl + (b * (size_t)hp->n_layer + (size_t)t->il) * pl;
        for (size_t i = 0; i < pl; i++) g[i] *= in[i];
        break;
    }
    case ROW_ATTN_GATE: {
        const size_t hd = (size_t)L->head_dim, qd = (size_t)L->n_head * hd;
        float *o = s->xb + b * qd;
        const float *g = s->qg + b * 2 * qd;
        for (size_t h = 0; h < (size_t)L->n_head; h++)
            for (size_t i = 0; i < hd; i++) o[h * hd + i] *= nu_sigmoid(g[(2 * h + 1) * hd + i]);
        break;
    }
    case ROW_SHEXP_ACT: {
        const size_t ff = (size_t)hp->n_ff_shexp;
        nu_act_gated(a->act, s->gate + b * ff, s->up + b * ff, (int64_t)ff);
        break;
    }
    case ROW_SHEXP_ADD: {
        const float w = l->shexp_router.data ? nu_sigmoid(s->router[b]) : 1.0f;
        nu_vec_mad_f32(s->q + b * d, s->yd + b * d, w, (int64_t)d);
        break;
    }
    case ROW_PL_OUT: {
        float *o = s->q + b * d, *x = s->x + b * d;
        nu_rms_norm(o, o, l->pl_post_norm, (int32_t)d, hp->norm_eps);
        add_rows(x, o, d);
        if (l->out_scale)
            for (size_t i = 0; i < d; i++) x[i] *= l->out_scale[0];
        break;
    }
    }
}

static void row_worker(void *arg, int ith, int nth) {
    const row_task *t = arg;
    int64_t begin, end;
    nu_split_range(t->n, ith, nth, &begin, &end);
    for (int64_t b = begin; b < end; b++) row_step_one(t, (int32_t)b);
}

/* One step for every entry; each entry's result is the same whichever
 * thread computes it. */
static void run_rows(nu_context *c, const nu_layer *l, int32_t il, int32_t n, row_step step) {
    row_task t = {c, l, il, n, step};
    if (n >= PARALLEL_ROWS)
        nu_threadpool_run(c->pool, row_worker, &t);
    else
        row_worker(&t, 0, 1);
}

/* ---- one layer ------------------------------------------------------------ */

static void attention_block(nu_context *c, const nu_layer *l, int32_t il, const nu_batch_entry *e,
                            int32_t n) {
    nu_scratch *s = &c->s;
    if (l->wqkv.data) {
        nu_matmul(c->pool, &l->wqkv, s->xb, n, s->qkv, s->matmul);
    } else {
        /* Q (with its gates, split by ROW_QKV), and K and V where the layer
         * has them (V may be K itself) */
        const nu_matrix *qkv[] = {&l->wq, &l->wk, &l->wv};
        float *qkv_out[] = {c->model->arch->q_gate ? s->qg : s->q, s->k, s->v};
        int count = !l->wk.data ? 1 : !l->wv.data ? 2 : 3;
        nu_matmul_multi(c->pool, qkv, qkv_out, count, s->xb, n, s->matmul);
    }
    run_rows(c, l, il, n, ROW_QKV);
    attn_task task = {c, e, n, il};
    nu_threadpool_run(c->pool, attention_worker, &task);
    if (c->model->arch->q_gate) run_rows(c, l, il, n, ROW_ATTN_GATE);
    /* the attention output (in xb) goes through Wo into q's buffer; the FFN
     * step adds it to x */
    nu_matmul(c->pool, &l->wo, s->xb, n, s->q, s->matmul);
}

/* ---- mixture of experts ----------------------------------------------------- */

/* Each entry's experts and their weights from the router's logits. */
static void route(nu_context *c, const nu_layer *l, int32_t n) {
    const nu_hparams *hp = &c->model->hp;
    nu_scratch *s = &c->s;
    const int32_t ne = hp->n_expert, k = hp->n_expert_used;
    for (int32_t b = 0; b < n && l->router_b; b++)
        add_bias(s->router + (size_t)b * ne, l->router_b, (size_t)ne);
    for (int32_t b = 0; b < n; b++)
        nu_route(c->model->arch->router, hp->expert_weights_norm, s->router + (size_t)b * ne, ne, k,
                 s->sel + (size_t)b * k, s->sel_w + (size_t)b * k);
}

/* Groups the (entry, choice) pairs by expert: by_expert holds, for expert
 * 0, 1, ... in turn, the pairs that chose it in entry order; pair_row is the
 * inverse (where each pair's rows are). */
static void group_by_expert(nu_context *c, int32_t n) {
    const nu_hparams *hp = &c->model->hp;
    const int32_t ne = hp->n_expert, pairs = n * hp->n_expert_used;
    nu_scratch *s = &c->s;
    int32_t *end = s->expert_end, acc = 0;
    memset(end, 0, (size_t)ne * sizeof(int32_t));
    for (int32_t i = 0; i < pairs; i++) end[s->sel[i]]++;
    for (int32_t e = 0; e < ne; e++) {
        int32_t count = end[e];
        end[e] = acc; /* its group's start, advanced to its end below */
        acc += count;
    }
    for (int32_t i = 0; i < pairs; i++) {
        int32_t row = end[s->sel[i]]++;
        s->by_expert[row] = i;
        s->pair_row[i] = row;
    }
}

typedef struct moe_rows_task {
    nu_context *ctx;
    const nu_layer *l;
    int32_t pairs;
    int step; /* 0: gather the inputs, 1: the activation */
} moe_rows_task;

/* Per routed row: gathers each pair's input, or applies the activation. */
static void moe_rows_worker(void *arg, int ith, int nth) {
    const moe_rows_task *t = arg;
    nu_context *c = t->ctx;
    const nu_hparams *hp = &c->model->hp;
    nu_scratch *s = &c->s;
    const size_t d = (size_t)hp->n_embd, ff = (size_t)hp->n_ff_exp;
    int64_t r0, r1;
    nu_split_range(t->pairs, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        if (t->step == 0) {
            int32_t b = s->by_expert[r] / hp->n_expert_used;
            memcpy(s->xg + r * d, s->moe_in + (size_t)b * d, d * sizeof(float));
        } else {
            const nu_layer *l = t->l;
            int32_t e = s->sel[s->by_expert[r]];
            add_bias(s->gate + r * ff, l->gate_exps_b ? l->gate_exps_b + (size_t)e * ff : NULL, ff);
            add_bias(s->up + r * ff, l->up_exps_b ? l->up_exps_b + (size_t)e * ff : NULL, ff);
            nu_act_gated(c->model->arch->act, s->gate + r * ff, s->up + r * ff, (int64_t)ff);
        }
    }
}

static void moe_rows(nu_context *c, const nu_layer *l, int32_t pairs, int step) {
    moe_rows_task t = {c, l, pairs, step};
    if (pairs >= PARALLEL_ROWS)
        nu_threadpool_run(c->pool, moe_rows_worker, &t);
    else
        moe_rows_worker(&t, 0, 1);
}

/* The experts' FFNs for the batch: the (entry, expert) pairs are grouped by
 * expert, each expert multiplies the rows of the entries that chose it
 * (only the chosen experts' weights are read), all the experts' gate and up
 * products run in one pass of the pool and all their down products in
 * another; then each entry sums its experts' outputs in the order it chose
 * them, so its result does not depend on the rest of the batch. */
static void experts_block(nu_context *c, const nu_layer *l, const float *in, const float *router_in,
                          int32_t n) {
    const nu_model *m = c->model;
    const nu_hparams *hp = &m->hp;
    const int32_t k = hp->n_expert_used, d = hp->n_embd, ff = hp->n_ff_exp, pairs = n * k;
    nu_scratch *s = &c->s;
    nu_matmul(c->pool, &l->router, router_in, n, s->router, s->matmul);
    route(c, l, n);
    group_by_expert(c, n);
    /* one entry: every expert reads the input itself (one shared conversion) */
    s->moe_in = in;
    if (n > 1) moe_rows(c, l, pairs, 0);
    nu_matrix mats[3 * NU_MATMUL_MAX_TASKS / 2];
    nu_matmul_task tasks[NU_MATMUL_MAX_TASKS];
    int32_t n_tasks = 0, n_mats = 0, begin = 0;
    int32_t experts[NU_MAX_EXPERTS_USED * 4], n_active = 0;
    for (int32_t e = 0; e < hp->n_expert; e++) {
        int32_t end = s->expert_end[e], rows = end - begin;
        if (rows > 0) {
            const float *x = n > 1 ? s->xg + (size_t)begin * d : in;
            mats[n_mats] = nu_expert_matrix(&l->gate_exps, e);
            mats[n_mats + 1] = nu_expert_matrix(&l->up_exps, e);
            tasks[n_tasks++] =
                (nu_matmul_task){&mats[n_mats], x, rows, s->gate + (size_t)begin * ff};
            tasks[n_tasks++] =
                (nu_matmul_task){&mats[n_mats + 1], x, rows, s->up + (size_t)begin * ff};
            n_mats += 2;
            if (n_active < (int32_t)(sizeof experts / sizeof *experts)) experts[n_active++] = e;
        }
        /* a full task list runs now (many active experts in a long prompt) */
        if (n_tasks + 2 > NU_MATMUL_MAX_TASKS || e == hp->n_expert - 1) {
            nu_matmul_tasks(c->pool, tasks, n_tasks, s->matmul);
            n_tasks = n_mats = 0;
        }
        begin = end;
    }
    moe_rows(c, l, pairs, 1);
    begin = 0;
    for (int32_t e = 0; e < hp->n_expert; e++) {
        int32_t end = s->expert_end[e], rows = end - begin;
        if (rows > 0) {
            mats[n_mats] = nu_expert_matrix(&l->down_exps, e);
            tasks[n_tasks++] = (nu_matmul_task){&mats[n_mats], s->gate + (size_t)begin * ff, rows,
                                                s->yg + (size_t)begin * d};
            n_mats++;
        }
        if (n_tasks + 1 > NU_MATMUL_MAX_TASKS || e == hp->n_expert - 1) {
            nu_matmul_tasks(c->pool, tasks, n_tasks, s->matmul);
            n_tasks = n_mats = 0;
        }
        begin = end;
    }
    (void)experts;
    for (int32_t b = 0; b < n; b++) {
        float *out = s->q + (size_t)b * d;
        memset(out, 0, (size_t)d * sizeof(float));
        for (int32_t j = 0; j < k; j++) {
            int32_t pair = b * k + j;
            float *y = s->yg + (size_t)s->pair_row[pair] * d;
            if (l->down_exps_scale)
                for (int32_t i = 0; i < d; i++) y[i] *= l->down_exps_scale[s->sel[pair]];
            if (l->down_exps_b) add_bias(y, l->down_exps_b + (size_t)s->sel[pair] * d, (size_t)d);
            nu_vec_mad_f32(out, y, s->sel_w[pair], d);
        }
    }
}

/* The dense FFN of the layer's input xb, into q. */
static void dense_ffn(nu_context *c, const nu_layer *l, int32_t il, int32_t n) {
    nu_scratch *s = &c->s;
    if (l->w_gate.data) {
        const nu_matrix *gate_up[] = {&l->w_gate, &l->w_up};
        float *gate_up_out[] = {s->gate, s->up};
        nu_matmul_multi(c->pool, gate_up, gate_up_out, 2, s->xb, n, s->matmul);
    } else {
        /* fused gate and up (into up), or a plain FFN's up (into gate) */
        bool fused = l->w_up.n_out == 2 * (int64_t)c->model->hp.layer[il].n_ff;
        nu_matmul(c->pool, &l->w_up, s->xb, n, fused ? s->up : s->gate, s->matmul);
    }
    run_rows(c, l, il, n, ROW_FFN_ACT);
    nu_matmul(c->pool, &l->w_down, s->gate, n, s->q, s->matmul);
}

/* The shared expert beside routed ones: SwiGLU of the layer's input xb,
 * scaled by sigmoid of its router's logit, added to the experts' sum in q. */
static void shared_expert(nu_context *c, const nu_layer *l, int32_t il, int32_t n) {
    nu_scratch *s = &c->s;
    const nu_matrix *gate_up[] = {&l->shexp_gate, &l->shexp_up};
    float *gate_up_out[] = {s->gate, s->up};
    nu_matmul_multi(c->pool, gate_up, gate_up_out, 2, s->xb, n, s->matmul);
    run_rows(c, l, il, n, ROW_SHEXP_ACT);
    nu_matmul(c->pool, &l->shexp_down, s->gate, n, s->yd, s->matmul);
    if (l->shexp_router.data) nu_matmul(c->pool, &l->shexp_router, s->xb, n, s->router, s->matmul);
    run_rows(c, l, il, n, ROW_SHEXP_ADD);
}

static void ffn_block(nu_context *c, const nu_layer *l, int32_t il, int32_t n) {
    nu_scratch *s = &c->s;
    const size_t d = (size_t)c->model->hp.n_embd;
    run_rows(c, l, il, n, ROW_FFN_NORM);
    if (l->router.data && l->w_up.data) {
        /* experts beside a dense FFN (Gemma 4): each branch normed, then summed */
        dense_ffn(c, l, il, n);
        memcpy(s->yd, s->q, (size_t)n * d * sizeof(float));
        run_rows(c, l, il, n, ROW_MOE_INPUTS);
        experts_block(c, l, s->xn, s->xr, n);
        run_rows(c, l, il, n, ROW_MOE_MERGE);
    } else if (l->router.data) {
        experts_block(c, l, s->xb, s->xb, n);
        if (l->shexp_down.data) shared_expert(c, l, il, n);
    } else {
        dense_ffn(c, l, il, n);
    }
    run_rows(c, l, il, n, ROW_FFN_OUT);
}

/* Gemma 4's per-layer embeddings, once per batch: each entry's row of
 * n_embd_pl x n_layer, the projection of its scaled token embedding (normed
 * per layer slice) plus its row of the per-layer token table, over sqrt(2). */
static void per_layer_inputs(nu_context *c, const nu_batch_entry *e, int32_t n) {
    const nu_model *m = c->model;
    const nu_hparams *hp = &m->hp;
    nu_scratch *s = &c->s;
    const int64_t pl = hp->n_embd_pl, all = pl * hp->n_layer;
    nu_matmul(c->pool, &m->pl_model_proj, s->x, n, s->pl, s->matmul);
    const float proj_scale = 1.0f / sqrtf((float)hp->n_embd), tok_scale = sqrtf((float)pl);
    const float half = 1.0f / sqrtf(2.0f);
    for (int32_t b = 0; b < n; b++) {
        float *row = s->pl + (size_t)b * all, *tok = s->plt;
        const nu_matrix *t = &m->pl_tok_embd;
        nu_dequantize_row(t->type, (const char *)t->data + (size_t)e[b].token * t->row_bytes, tok,
                          all);
        for (int64_t i = 0; i < all; i++) row[i] *= proj_scale;
        for (int32_t il = 0; il < hp->n_layer; il++)
            nu_rms_norm(row + il * pl, row + il * pl, m->pl_proj_norm, (int32_t)pl, hp->norm_eps);
        for (int64_t i = 0; i < all; i++) row[i] = (row[i] + tok[i] * tok_scale) * half;
    }
}

/* After layer il: x += norm(proj(gelu(gate x) * the layer's input)). */
static void per_layer_block(nu_context *c, const nu_layer *l, int32_t il, int32_t n) {
    nu_scratch *s = &c->s;
    nu_matmul(c->pool, &l->pl_gate, s->x, n, s->plg, s->matmul);
    run_rows(c, l, il, n, ROW_PL_ACT);
    nu_matmul(c->pool, &l->pl_proj, s->plg, n, s->q, s->matmul);
    run_rows(c, l, il, n, ROW_PL_OUT);
}

/* ---- the batch ------------------------------------------------------------ */

static nu_status check_batch(const nu_context *c, const nu_batch_entry *e, int32_t n,
                             nu_error *err) {
    if (n < 1 || n > c->params.n_batch)
        return nu_fail(err, NU_ERR_INVALID_ARG, "batch of %d entries (must be 1..%d)", n,
                       c->params.n_batch);
    for (int32_t i = 0; i < n; i++) {
        if (e[i].token < 0 || e[i].token >= c->model->hp.n_vocab)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "entry %d: token %d is not in the vocabulary "
                           "(0..%d)",
                           i, e[i].token, c->model->hp.n_vocab - 1);
        if (e[i].seq < 0 || e[i].seq >= c->params.n_seq_max)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "entry %d: sequence %d is out of range "
                           "(0..%d)",
                           i, e[i].seq, c->params.n_seq_max - 1);
        if (e[i].pos < 0 || e[i].pos >= (1 << 30))
            return nu_fail(err, NU_ERR_INVALID_ARG, "entry %d: position %d is out of range", i,
                           e[i].pos);
        if (c->model->pos_embd.data && e[i].pos >= c->model->hp.n_ctx_train)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "entry %d: position %d is beyond the %d positions the model learned", i,
                           e[i].pos, c->model->hp.n_ctx_train);
    }
    return NU_OK;
}

/* Lists each batch sequence's cells by position; fails if a position is
 * cached twice for one sequence (the caller must remove it first). */
static nu_status list_sequences(nu_context *c, const nu_batch_entry *e, int32_t n, nu_error *err) {
    uint64_t done = 0;
    for (int32_t b = 0; b < n; b++) {
        int32_t seq = e[b].seq;
        if (done & (1ull << seq)) continue;
        done |= 1ull << seq;
        int32_t *cells = c->s.seq_cells + (size_t)seq * c->params.n_ctx;
        int32_t cnt = nu_kv_cache_seq_cells(&c->kv, seq, cells, c->params.n_ctx);
        c->s.seq_count[seq] = cnt;
        for (int32_t j = 1; j < cnt; j++)
            if (c->kv.pos[cells[j]] == c->kv.pos[cells[j - 1]])
                return nu_fail(err, NU_ERR_INVALID_ARG,
                               "sequence %d already has position %d "
                               "in the cache",
                               seq, c->kv.pos[cells[j]]);
    }
    return NU_OK;
}

/* Makes room for the logits rows this batch asks for and maps entries to rows. */
static nu_status prepare_outputs(nu_context *c, const nu_batch_entry *e, int32_t n, int32_t *n_out,
                                 nu_error *err) {
    int32_t rows = 0;
    for (int32_t b = 0; b < n; b++) c->s.out_rows[b] = e[b].logits ? rows++ : -1;
    if (rows > c->logits_cap) {
        size_t width =
            c->params.embeddings ? (size_t)c->model->hp.n_embd : (size_t)c->model->hp.n_vocab;
        float *p = realloc(c->logits, (size_t)rows * width * sizeof(float));
        if (!p) return nu_fail(err, NU_ERR_NOMEM, "out of memory for %d rows of logits", rows);
        c->logits = p;
        c->logits_cap = rows;
    }
    *n_out = rows;
    return NU_OK;
}

/* Final norm and LM head for the entries that asked for logits. */
static void compute_logits(nu_context *c, int32_t n, int32_t n_out) {
    const nu_model *m = c->model;
    int32_t d = m->hp.n_embd;
    for (int32_t b = 0; b < n; b++) {
        int32_t r = c->s.out_rows[b];
        if (r >= 0)
            nu_norm(m->arch->norm, c->s.xb + (size_t)r * d, c->s.x + (size_t)b * d, m->output_norm,
                    m->output_norm_b, d, m->hp.norm_eps);
    }
    if (n_out == 0) return;
    if (c->params.embeddings) { /* the hidden states are the result */
        memcpy(c->logits, c->s.xb, (size_t)n_out * (size_t)d * sizeof(float));
        return;
    }
    nu_matmul(c->pool, &m->output, c->s.xb, n_out, c->logits, c->s.matmul);
    if (m->hp.final_softcap > 0)
        nu_softcap(c->logits, (int64_t)n_out * m->hp.n_vocab, m->hp.final_softcap);
}

/* Token embeddings (scaled, plus learned positions where the model has them). */
static void embed(nu_context *c, const nu_batch_entry *e, int32_t n) {
    const nu_model *m = c->model;
    const nu_matrix *t = &m->tok_embd, *p = &m->pos_embd;
    const int64_t d = t->n_in;
    for (int32_t b = 0; b < n; b++) {
        float *x = c->s.x + (size_t)b * d;
        nu_dequantize_row(t->type, (const char *)t->data + (size_t)e[b].token * t->row_bytes, x, d);
        if (m->hp.embd_scale != 1.0f)
            for (int64_t i = 0; i < d; i++) x[i] *= m->hp.embd_scale;
        if (p->data) {
            float *pos = c->s.xb + (size_t)b * d; /* free until the first norm */
            nu_dequantize_row(p->type, (const char *)p->data + (size_t)e[b].pos * p->row_bytes, pos,
                              d);
            add_rows(x, pos, (size_t)d);
        }
    }
}

/* cos and sin tables of every entry's position, for each RoPE the model has. */
static void rope_tables(nu_context *c, const nu_batch_entry *e, int32_t n) {
    const nu_hparams *hp = &c->model->hp;
    if (c->model->arch->rope == NU_ROPE_NONE) return;
    for (int32_t i = 0; i < hp->n_rope; i++)
        for (int32_t b = 0; b < n; b++)
            nu_rope_table(&hp->rope[i], c->rope_factors[i], e[b].pos,
                          c->s.rope + ((size_t)i * c->params.n_batch + b) * c->dims.rot);
}

/* Keeps each sequence's contiguous token history up to date. */
static void remember_tokens(nu_context *c, const nu_batch_entry *e, int32_t n) {
    for (int32_t b = 0; b < n; b++) {
        int32_t seq = e[b].seq;
        if (e[b].pos > c->seq_len[seq] || e[b].pos >= c->params.n_ctx) continue;
        c->seq_tokens[(size_t)seq * c->params.n_ctx + e[b].pos] = e[b].token;
        if (e[b].pos == c->seq_len[seq]) c->seq_len[seq]++;
    }
}

/* Each entry's cell: a new one (claimed; all given back on failure), or
 * when reading positions again, the sequence's cell of that position. */
static nu_status find_cells(nu_context *c, const nu_batch_entry *e, int32_t n, bool again,
                            nu_error *err) {
    int32_t *cells = c->s.cells;
    for (int32_t b = 0; b < n && !again; b++) {
        int32_t one_seq = e[b].seq, one_pos = e[b].pos;
        if (!nu_kv_cache_claim(&c->kv, 1, &one_seq, &one_pos, &cells[b])) {
            nu_kv_cache_release(&c->kv, b, cells);
            return nu_fail(err, NU_ERR_CONTEXT_FULL,
                           "the KV cache is full (%d cells in use of "
                           "%d); remove positions or use a larger context",
                           c->kv.used, c->kv.n_cells);
        }
    }
    nu_status st = list_sequences(c, e, n, err);
    if (st && !again) nu_kv_cache_release(&c->kv, n, cells);
    for (int32_t b = 0; b < n && again && st == NU_OK; b++) {
        const int32_t *seq = c->s.seq_cells + (size_t)e[b].seq * c->params.n_ctx;
        int32_t cnt = c->s.seq_count[e[b].seq], i = cells_upto(&c->kv, seq, cnt, e[b].pos) - 1;
        if (i < 0 || c->kv.pos[seq[i]] != e[b].pos)
            return nu_fail(err, NU_ERR_INVALID_ARG, "sequence %d has no position %d to read again",
                           e[b].seq, e[b].pos);
        cells[b] = seq[i];
    }
    return st;
}

/* Runs the model over a checked batch. again: the entries are positions
 * the cache holds, read again to rebuild a recurrent state (their keys and
 * values are written over with the same values). */
static nu_status run_batch(nu_context *c, const nu_batch_entry *e, int32_t n, bool again,
                           nu_error *err) {
    int32_t n_out = 0;
    nu_status st = prepare_outputs(c, e, n, &n_out, err);
    if (st == NU_OK) st = find_cells(c, e, n, again, err);
    if (st) {
        c->n_last = 0;
        return st;
    }
    const nu_model *m = c->model;
    const bool recurrent = nu_model_recurrent(m);
    if (recurrent) nu_state_plan(c, e, n);
    rope_tables(c, e, n);
    embed(c, e, n);
    if (m->hp.n_embd_pl > 0) per_layer_inputs(c, e, n);
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        const nu_layer *l = &m->layers[il];
        run_rows(c, l, il, n, ROW_ATTN_NORM);
        if (m->hp.layer[il].kind == NU_LAYER_DELTANET)
            nu_deltanet_block(c, l, il, n);
        else
            attention_block(c, l, il, e, n);
        ffn_block(c, l, il, n);
        if (l->pl_gate.data) per_layer_block(c, l, il, n);
    }
    compute_logits(c, n, n_out);
    if (recurrent) nu_state_done(c);
    c->n_last = n;
    if (!again) remember_tokens(c, e, n);
    return NU_OK;
}

/* With recurrent layers every sequence is read in order: its entries in the
 * batch continue it, one position after another. */
static nu_status check_order(const nu_context *c, const nu_batch_entry *e, int32_t n,
                             nu_error *err) {
    int32_t next[NU_MAX_SEQ];
    for (int32_t q = 0; q < NU_MAX_SEQ; q++) next[q] = -2;
    for (int32_t b = 0; b < n; b++) {
        int32_t seq = e[b].seq;
        if (next[seq] == -2) next[seq] = nu_kv_cache_seq_pos_max(&c->kv, seq) + 1;
        if (e[b].pos != next[seq])
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "entry %d: sequence %d continues at position %d, not %d (a model with "
                           "recurrent layers reads each sequence in order)",
                           b, seq, next[seq], e[b].pos);
        next[seq]++;
    }
    return NU_OK;
}

/* Brings the recurrent state of every sequence of the batch up to its last
 * cached position: a sequence whose kept states stop earlier (positions were
 * removed past its checkpoints) reads the tokens in between again. */
static nu_status catch_up(nu_context *c, const nu_batch_entry *e, int32_t n, nu_error *err) {
    uint64_t done = 0;
    for (int32_t b = 0; b < n; b++) {
        int32_t seq = e[b].seq;
        if (done & (1ull << seq)) continue;
        done |= 1ull << seq;
        int32_t last = nu_kv_cache_seq_pos_max(&c->kv, seq);
        int32_t cur = nu_kv_state_current(&c->kv, seq);
        int32_t from = cur >= 0 ? c->kv.slot_pos[cur] + 1 : 0;
        if (from > last) continue;
        if (c->seq_len[seq] <= last)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "sequence %d: its recurrent state stops at position %d and the tokens "
                           "after it are not known; remove its positions from %d and read them "
                           "again",
                           seq, from - 1, from);
        const int32_t *toks = c->seq_tokens + (size_t)seq * c->params.n_ctx;
        while (from <= last) {
            int32_t m = last + 1 - from < c->params.n_batch ? last + 1 - from : c->params.n_batch;
            for (int32_t i = 0; i < m; i++)
                c->s.replay[i] = (nu_batch_entry){toks[from + i], from + i, seq, false};
            nu_status st = run_batch(c, c->s.replay, m, true, err);
            if (st) return st;
            from += m;
        }
    }
    return NU_OK;
}

nu_status nu_decode(nu_context *c, const nu_batch_entry *e, int32_t n, nu_error *err) {
    nu_status st = check_batch(c, e, n, err);
    if (st == NU_OK && nu_model_recurrent(c->model)) {
        st = check_order(c, e, n, err);
        if (st == NU_OK) st = catch_up(c, e, n, err);
    }
    return st ? st : run_batch(c, e, n, false, err);
}

const float *nu_embedding(const nu_context *c, int32_t i) {
    if (!c->params.embeddings || i < 0 || i >= c->n_last || c->s.out_rows[i] < 0) return NULL;
    return c->logits + (size_t)c->s.out_rows[i] * c->model->hp.n_embd;
}

const float *nu_logits(const nu_context *c, int32_t i) {
    if (c->params.embeddings || i < 0 || i >= c->n_last || c->s.out_rows[i] < 0) return NULL;
    return c->logits + (size_t)c->s.out_rows[i] * c->model->hp.n_vocab;
}
