/* forward.c - the transformer forward pass over a batch of entries.
 *
 * For every layer (llama family):
 *   h  = x + Wo * attention(RoPE(Wq * norm(x)), RoPE(Wk * norm(x)), Wv * norm(x))
 *   x' = h + Wdown * (silu(Wgate * norm(h)) * (Wup * norm(h)))
 * where norm is RMSNorm with the layer's weight. The batch's keys and values
 * go into the KV cache first, so an entry attends to everything cached for
 * its sequence at positions <= its own, whether it came in this batch or
 * an earlier one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "error.h"

/* ---- small vector operations -------------------------------------------- */

/* RMSNorm: out = x / sqrt(mean(x^2) + eps) * w. */
static void rms_norm(float *out, const float *x, const float *w, int32_t n, float eps) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int32_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void add_bias(float *y, const float *b, int32_t n_rows, int32_t dim) {
    if (!b) return;
    for (int32_t r = 0; r < n_rows; r++)
        for (int32_t i = 0; i < dim; i++) y[(size_t)r * dim + i] += b[i];
}

/* ---- rotary position embedding ------------------------------------------ */

/* YaRN's ramp: 0 for dimensions whose wavelength fits many times in the
 * original context (kept as they are), 1 for those that do not (interpolated). */
static double yarn_ramp(double wavelength, int32_t orig_ctx) {
    const double beta_fast = 32.0, beta_slow = 1.0;
    double rotations = orig_ctx / wavelength;
    double t = (rotations - beta_slow) / (beta_fast - beta_slow);
    return 1.0 - (t < 0 ? 0 : t > 1 ? 1 : t);
}

/* cos and sin of every rotated pair for each entry's position. Pair i turns
 * by pos * base^(-2i / n_rot), scaled as the file's RoPE scaling says. */
static void rope_tables(const nu_hparams *hp, const float *freq_factors, const nu_batch_entry *e,
                        int32_t n, float *rope) {
    double mscale = 1.0;
    if (hp->rope_scaling == NU_ROPE_SCALING_YARN && hp->rope_factor > 1.0f)
        mscale = 1.0 + 0.1 * log(hp->rope_factor);
    for (int32_t b = 0; b < n; b++) {
        for (int32_t i = 0; i < hp->n_rot / 2; i++) {
            double theta = pow(hp->rope_base, -2.0 * i / hp->n_rot);
            if (freq_factors) theta /= freq_factors[i];
            if (hp->rope_scaling == NU_ROPE_SCALING_LINEAR) {
                theta /= hp->rope_factor;
            } else if (hp->rope_scaling == NU_ROPE_SCALING_YARN) {
                double mix = yarn_ramp(2 * M_PI / theta, hp->rope_orig_ctx);
                theta = theta * (1 - mix) + theta / hp->rope_factor * mix;
            }
            double angle = (double)e[b].pos * theta;
            rope[(size_t)b * hp->n_rot + 2 * i] = (float)(cos(angle) * mscale);
            rope[(size_t)b * hp->n_rot + 2 * i + 1] = (float)(sin(angle) * mscale);
        }
    }
}

/* Rotates adjacent pairs (x0, x1), (x2, x3), ... of every head's first n_rot
 * dimensions: the llama layout (the converter already permuted Q and K). */
static void rope_apply(const nu_hparams *hp, float *v, int32_t n_heads, const float *rope,
                       int32_t n, int32_t row_dim) {
    for (int32_t b = 0; b < n; b++) {
        const float *cs = rope + (size_t)b * hp->n_rot;
        for (int32_t h = 0; h < n_heads; h++) {
            float *x = v + (size_t)b * row_dim + (size_t)h * hp->head_dim;
            for (int32_t i = 0; i < hp->n_rot; i += 2) {
                float c = cs[i], s = cs[i + 1], x0 = x[i], x1 = x[i + 1];
                x[i] = x0 * c - x1 * s;
                x[i + 1] = x0 * s + x1 * c;
            }
        }
    }
}

/* ---- attention ---------------------------------------------------------- */

typedef struct attn_task {
    nu_context *ctx;
    const nu_batch_entry *e;
    int32_t n, layer;
} attn_task;

/* How many of a sequence's cells (sorted by position) are at or before pos. */
static int32_t visible_cells(const nu_kv_cache *kv, const int32_t *cells, int32_t n, int32_t pos) {
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

/* Address of a cached key or value row's head-g part. */
static const void *kv_head_row(const nu_kv_cache *kv, bool value, int32_t layer, int32_t cell,
                               int32_t g, int32_t hd) {
    size_t idx = ((size_t)layer * (size_t)kv->n_cells + (size_t)cell) * (size_t)kv->kv_dim +
                 (size_t)g * (size_t)hd;
    return (const char *)(value ? kv->v : kv->k) + idx * kv->elem_bytes;
}

/* Query heads h0 .. h0+nh-1 (1 <= nh <= NU_ATTN_HEADS, all sharing key/value
 * head g) of one entry: softmax(q.k / sqrt(d)) weighted sums of the values
 * visible to it. Every cached row is read and converted once for the nh
 * heads; each head's arithmetic is the same as if it were alone. An f16
 * cache multiplies in half precision: queries and attention weights are
 * rounded to f16, as a half-precision kernel sees them. */
static void attend_heads(nu_context *c, const nu_batch_entry *e, int32_t b, int32_t h0, int32_t nh,
                         int32_t layer, float *scores) {
    const nu_hparams *hp = &c->model->hp;
    const nu_kv_cache *kv = &c->kv;
    const int32_t hd = hp->head_dim, g = h0 / (hp->n_head / hp->n_head_kv);
    const uint32_t type = kv->type == NU_KV_F16 ? NU_TYPE_F16 : NU_TYPE_F32;
    const int32_t *cells = c->s.seq_cells + (size_t)e->seq * c->params.n_ctx;
    const int32_t n = visible_cells(kv, cells, c->s.seq_count[e->seq], e->pos);
    const size_t n_ctx = (size_t)c->params.n_ctx;
    const float scale = 1.0f / sqrtf((float)hd);
    float q16[NU_ATTN_HEADS][256], max[NU_ATTN_HEADS];
    const float *q[NU_ATTN_HEADS];
    float *out[NU_ATTN_HEADS];
    for (int32_t i = 0; i < nh; i++) {
        size_t at = (size_t)b * hp->n_head * hd + (size_t)(h0 + i) * hd;
        q[i] = c->s.q + at;
        out[i] = c->s.xb + at;
        if (type == NU_TYPE_F16) {
            memcpy(q16[i], q[i], (size_t)hd * sizeof(float));
            nu_vec_round_f16(q16[i], hd);
            q[i] = q16[i];
        }
        max[i] = -INFINITY;
        memset(out[i], 0, (size_t)hd * sizeof(float));
    }
    nu_vec_dots_rows(type, q, nh, kv_head_row(kv, false, layer, 0, g, hd),
                     (size_t)kv->kv_dim * kv->elem_bytes, cells, n, hd, scores, n_ctx);
    for (int32_t i = 0; i < nh; i++)
        for (int32_t j = 0; j < n; j++) {
            float sc = scores[(size_t)i * n_ctx + j] *= scale;
            if (sc > max[i]) max[i] = sc;
        }
    for (int32_t i = 0; i < nh; i++)
        nu_vec_softmax(scores + (size_t)i * n_ctx, n, max[i], type == NU_TYPE_F16);
    nu_vec_mads_rows(type, out, scores, n_ctx, nh, kv_head_row(kv, true, layer, 0, g, hd),
                     (size_t)kv->kv_dim * kv->elem_bytes, cells, n, hd);
}

/* Work units: (entry, group of up to NU_ATTN_HEADS query heads sharing a
 * key/value head), dealt to the threads in turn: in a prompt, later entries
 * see more keys, so contiguous shares would leave the first thread idle. */
static void attention_worker(void *arg, int ith, int nth) {
    attn_task *t = arg;
    nu_context *c = t->ctx;
    const int32_t n_head = c->model->hp.n_head, rep = n_head / c->model->hp.n_head_kv;
    const int32_t per_kv = (rep + NU_ATTN_HEADS - 1) / NU_ATTN_HEADS;
    const int32_t units_per_entry = c->model->hp.n_head_kv * per_kv;
    float *scores = c->s.scores + (size_t)ith * NU_ATTN_HEADS * c->params.n_ctx;
    for (int64_t i = ith; i < (int64_t)t->n * units_per_entry; i += nth) {
        int32_t b = (int32_t)(i / units_per_entry), u = (int32_t)(i % units_per_entry);
        int32_t g = u / per_kv, part = u % per_kv;
        int32_t h0 = g * rep + part * NU_ATTN_HEADS;
        int32_t nh =
            rep - part * NU_ATTN_HEADS < NU_ATTN_HEADS ? rep - part * NU_ATTN_HEADS : NU_ATTN_HEADS;
        attend_heads(c, &t->e[b], b, h0, nh, t->layer, scores);
    }
}

/* ---- per-row steps, shared among threads for large batches ---------------- */

/* Batches with at least this many entries run their per-row steps on the
 * pool; smaller ones (generation) run them inline, where waking the pool
 * would cost more than the work. */
#define PARALLEL_ROWS 8

typedef enum row_step {
    ROW_ATTN_NORM, /* xb = norm(x) with the layer's attention weight */
    ROW_QKV,       /* biases, RoPE of q and k, k and v into the cache */
    ROW_FFN_NORM,  /* x += attention output (in q); xb = norm(x) */
    ROW_SWIGLU,    /* gate = silu(gate) * up */
    ROW_FFN_OUT,   /* x += FFN output (in q) */
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

static void row_step_one(const row_task *t, int32_t b) {
    nu_context *c = t->ctx;
    const nu_hparams *hp = &c->model->hp;
    const nu_layer *l = t->l;
    nu_scratch *s = &c->s;
    const size_t d = (size_t)hp->n_embd, qd = (size_t)hp->n_head * hp->head_dim;
    const size_t kvd = (size_t)hp->n_head_kv * hp->head_dim, ff = (size_t)hp->n_ff;
    switch (t->step) {
    case ROW_ATTN_NORM:
        rms_norm(s->xb + b * d, s->x + b * d, l->attn_norm, (int32_t)d, hp->norm_eps);
        break;
    case ROW_QKV: {
        float *q = s->q + b * qd, *k = s->k + b * kvd, *v = s->v + b * kvd;
        add_bias(q, l->bq, 1, (int32_t)qd);
        add_bias(k, l->bk, 1, (int32_t)kvd);
        add_bias(v, l->bv, 1, (int32_t)kvd);
        rope_apply(hp, q, hp->n_head, s->rope + (size_t)b * hp->n_rot, 1, (int32_t)qd);
        rope_apply(hp, k, hp->n_head_kv, s->rope + (size_t)b * hp->n_rot, 1, (int32_t)kvd);
        nu_kv_cache_store(&c->kv, false, t->il, s->cells[b], k);
        nu_kv_cache_store(&c->kv, true, t->il, s->cells[b], v);
        break;
    }
    case ROW_FFN_NORM:
        add_bias(s->q + b * d, l->bo, 1, (int32_t)d);
        add_rows(s->x + b * d, s->q + b * d, d);
        rms_norm(s->xb + b * d, s->x + b * d, l->ffn_norm, (int32_t)d, hp->norm_eps);
        break;
    case ROW_SWIGLU: nu_vec_swiglu(s->gate + b * ff, s->up + b * ff, (int64_t)ff); break;
    case ROW_FFN_OUT: add_rows(s->x + b * d, s->q + b * d, d); break;
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
    run_rows(c, l, il, n, ROW_ATTN_NORM);
    const nu_matrix *qkv[] = {&l->wq, &l->wk, &l->wv};
    float *qkv_out[] = {s->q, s->k, s->v};
    nu_matmul_multi(c->pool, qkv, qkv_out, 3, s->xb, n, s->matmul);
    run_rows(c, l, il, n, ROW_QKV);
    attn_task task = {c, e, n, il};
    nu_threadpool_run(c->pool, attention_worker, &task);
    /* the attention output (in xb) goes through Wo into q's buffer; the FFN
     * step adds it to x */
    nu_matmul(c->pool, &l->wo, s->xb, n, s->q, s->matmul);
}

static void ffn_block(nu_context *c, const nu_layer *l, int32_t il, int32_t n) {
    nu_scratch *s = &c->s;
    run_rows(c, l, il, n, ROW_FFN_NORM);
    const nu_matrix *gate_up[] = {&l->w_gate, &l->w_up};
    float *gate_up_out[] = {s->gate, s->up};
    nu_matmul_multi(c->pool, gate_up, gate_up_out, 2, s->xb, n, s->matmul);
    run_rows(c, l, il, n, ROW_SWIGLU);
    nu_matmul(c->pool, &l->w_down, s->gate, n, s->q, s->matmul);
    run_rows(c, l, il, n, ROW_FFN_OUT);
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
        float *p = realloc(c->logits, (size_t)rows * c->model->hp.n_vocab * sizeof(float));
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
            rms_norm(c->s.xb + (size_t)r * d, c->s.x + (size_t)b * d, m->output_norm, d,
                     m->hp.norm_eps);
    }
    if (n_out > 0) nu_matmul(c->pool, &m->output, c->s.xb, n_out, c->logits, c->s.matmul);
}

static void embed(nu_context *c, const nu_batch_entry *e, int32_t n) {
    const nu_matrix *t = &c->model->tok_embd;
    for (int32_t b = 0; b < n; b++)
        nu_dequantize_row(t->type, (const char *)t->data + (size_t)e[b].token * t->row_bytes,
                          c->s.x + (size_t)b * t->n_in, t->n_in);
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

nu_status nu_decode(nu_context *c, const nu_batch_entry *e, int32_t n, nu_error *err) {
    nu_status st = check_batch(c, e, n, err);
    if (st) return st;
    int32_t n_out = 0;
    if ((st = prepare_outputs(c, e, n, &n_out, err))) return st;
    /* claim a cell for each entry */
    int32_t *cells = c->s.cells;
    for (int32_t b = 0; b < n; b++) {
        int32_t one_seq = e[b].seq, one_pos = e[b].pos;
        if (!nu_kv_cache_claim(&c->kv, 1, &one_seq, &one_pos, &cells[b])) {
            nu_kv_cache_release(&c->kv, b, cells);
            c->n_last = 0;
            return nu_fail(err, NU_ERR_CONTEXT_FULL,
                           "the KV cache is full (%d cells in use of "
                           "%d); remove positions or use a larger context",
                           c->kv.used, c->kv.n_cells);
        }
    }
    if ((st = list_sequences(c, e, n, err))) {
        nu_kv_cache_release(&c->kv, n, cells);
        c->n_last = 0;
        return st;
    }
    const nu_model *m = c->model;
    rope_tables(&m->hp, m->rope_freq_factors, e, n, c->s.rope);
    embed(c, e, n);
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        attention_block(c, &m->layers[il], il, e, n);
        ffn_block(c, &m->layers[il], il, n);
    }
    compute_logits(c, n, n_out);
    c->n_last = n;
    remember_tokens(c, e, n);
    return NU_OK;
}

const float *nu_logits(const nu_context *c, int32_t i) {
    if (i < 0 || i >= c->n_last || c->s.out_rows[i] < 0) return NULL;
    return c->logits + (size_t)c->s.out_rows[i] * c->model->hp.n_vocab;
}
