/* recurrent.c - the Gated DeltaNet layer and its state slots.
 *
 * Gated DeltaNet (Yang, Kautz, Hatamizadeh, ICLR 2025) as Qwen 3.5 runs it,
 * for one token with input a = attn_norm(x):
 *
 *   u      = W_qkv a                     the q, k and v channels
 *   y      = SiLU(conv(u))               causal depthwise conv of d_conv taps
 *                                        per channel over this and the
 *                                        previous d_conv - 1 inputs
 *   q, k, v = split(y)                   n_k heads, n_k heads, n_v heads
 *   q, k   = q / |q|, k / |k|            L2 per head (eps inside the root)
 *   beta   = sigmoid(W_beta a)           per value head
 *   g      = softplus(W_alpha a + dt) A  per value head (A = -exp(A_log) < 0)
 *   S_j    = e^g S_j + beta (v_j - e^g S_j . k) k     value head j, key
 *   o_j    = (S_j . q) / sqrt(d)                      head j mod n_k
 *   o      = RMSNorm(o) w_norm * SiLU(W_z a)          per value head
 *   out    = W_out o
 *
 * The state of a sequence is the convolution window (the last d_conv - 1
 * inputs u) and one d x d matrix S per value head; it lives in the cache's
 * state slots (kv_cache.h), read from the slot of the sequence's previous
 * position and written to a new one. A batch's entries of one sequence are
 * stepped in order; sequences and heads are independent, so each runs on
 * one thread with the same arithmetic whatever the batch or the threads. */
#include "recurrent.h"

#include <math.h>
#include <string.h>

#include "blocks.h"

bool nu_model_recurrent(const nu_model *m) {
    return m->hp.n_state_planes > 0;
}

/* ---- state slots ------------------------------------------------------------- */

/* Groups the batch's entries by sequence (in batch order within each). */
static void group_entries(nu_context *c, const nu_batch_entry *e, int32_t n) {
    nu_scratch *s = &c->s;
    int32_t group_of[NU_MAX_SEQ], count[NU_MAX_SEQ], groups = 0;
    for (int32_t q = 0; q < NU_MAX_SEQ; q++) group_of[q] = -1;
    for (int32_t b = 0; b < n; b++) {
        int32_t seq = e[b].seq;
        if (group_of[seq] < 0) {
            group_of[seq] = groups;
            s->rs_group_seq[groups] = seq;
            count[groups++] = 0;
        }
        count[group_of[seq]]++;
    }
    int32_t at = 0;
    for (int32_t g = 0; g < groups; g++) {
        s->rs_group_end[g] = at; /* its start, advanced to its end below */
        at += count[g];
    }
    for (int32_t b = 0; b < n; b++) s->rs_order[s->rs_group_end[group_of[e[b].seq]]++] = b;
    s->rs_groups = groups;
}

/* Positions apart of the checkpoints a long batch of one sequence keeps
 * (a prompt read at once): a later request sharing only part of it rolls
 * back to the nearest one and reads at most this many positions again. */
#define CHECKPOINT_STRIDE 64

/* Whether entry j (of group positions [begin, end)) is worth a slot of its
 * own: first (pass 0) one whose logits are read (a step a speculative or
 * sampled sequence may return to) and the one before the last; then (pass
 * 1), with the slots left, every CHECKPOINT_STRIDE-th position. */
static bool worth_keeping(const nu_batch_entry *e, const int32_t *order, int32_t j, int32_t end,
                          int pass) {
    const nu_batch_entry *x = &e[order[j]];
    bool step = x->logits || j == end - 2;
    return pass == 0 ? step : !step && (x->pos + 1) % CHECKPOINT_STRIDE == 0;
}

void nu_state_plan(nu_context *c, const nu_batch_entry *e, int32_t n) {
    nu_kv_cache *kv = &c->kv;
    nu_scratch *s = &c->s;
    group_entries(c, e, n);
    int32_t base[NU_MAX_SEQ];
    for (int32_t g = 0; g < s->rs_groups; g++) {
        base[g] = nu_kv_state_current(kv, s->rs_group_seq[g]);
        if (base[g] >= 0) kv->slot_busy[base[g]] = 1;
    }
    for (int32_t b = 0; b < n; b++) s->rs_dst[b] = -1;
    /* each sequence's new current state: always possible, as the slots
     * number at least the sequences plus the sequences of one batch */
    for (int32_t g = 0; g < s->rs_groups; g++) {
        int32_t last = s->rs_order[s->rs_group_end[g] - 1];
        s->rs_dst[last] = nu_kv_state_claim(kv, e[last].seq, e[last].pos, true);
    }
    /* checkpoints to roll back to, latest first, while slots can be had */
    bool room = true;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t g = 0; g < s->rs_groups && room; g++) {
            int32_t begin = g ? s->rs_group_end[g - 1] : 0, end = s->rs_group_end[g];
            for (int32_t j = end - 2; j >= begin && room; j--) {
                int32_t b = s->rs_order[j];
                if (!worth_keeping(e, s->rs_order, j, end, pass)) continue;
                s->rs_dst[b] = nu_kv_state_claim(kv, e[b].seq, e[b].pos, true);
                room = s->rs_dst[b] >= 0;
            }
        }
    /* the others step in place in the slot of the next kept entry */
    for (int32_t g = 0; g < s->rs_groups; g++) {
        int32_t begin = g ? s->rs_group_end[g - 1] : 0, end = s->rs_group_end[g];
        int32_t dst = -1;
        for (int32_t j = end - 1; j >= begin; j--) {
            int32_t b = s->rs_order[j];
            if (s->rs_dst[b] >= 0) dst = s->rs_dst[b];
            s->rs_dst[b] = dst;
        }
        int32_t src = base[g];
        for (int32_t j = begin; j < end; j++) {
            int32_t b = s->rs_order[j];
            s->rs_src[b] = src;
            src = s->rs_dst[b];
        }
    }
}

void nu_state_done(nu_context *c) {
    if (c->kv.n_slots) memset(c->kv.slot_busy, 0, (size_t)c->kv.n_slots);
}

/* ---- the Gated DeltaNet layer ---------------------------------------------------- */

/* Channels of the convolution one work unit steps. */
#define CONV_CHUNK 256

typedef struct delta_task {
    nu_context *ctx;
    const nu_layer *l;
    int32_t il, n;
} delta_task;

/* The group of sequence entries [begin, end) of unit u's sequence. */
static void group_range(const nu_scratch *s, int32_t g, int32_t *begin, int32_t *end) {
    *begin = g ? s->rs_group_end[g - 1] : 0;
    *end = s->rs_group_end[g];
}

/* Units (sequence, chunk of channels): each steps its channels through the
 * sequence's entries in order, u becoming the convolution's output. */
static void conv_worker(void *arg, int ith, int nth) {
    const delta_task *t = arg;
    nu_context *c = t->ctx;
    const nu_hparams *hp = &c->model->hp;
    const nu_scratch *s = &c->s;
    const int64_t ch = nu_ssm_conv_dim(&hp->ssm);
    const int32_t plane = hp->layer[t->il].state_plane;
    const int64_t chunks = (ch + CONV_CHUNK - 1) / CONV_CHUNK;
    for (int64_t u = ith; u < s->rs_groups * chunks; u += nth) {
        int32_t g = (int32_t)(u / chunks), begin, end;
        int64_t c0 = (u % chunks) * CONV_CHUNK, c1 = c0 + CONV_CHUNK < ch ? c0 + CONV_CHUNK : ch;
        group_range(s, g, &begin, &end);
        for (int32_t j = begin; j < end; j++) {
            int32_t b = s->rs_order[j];
            const float *win = s->rs_src[b] >= 0 ? nu_kv_state(&c->kv, s->rs_src[b], plane) : NULL;
            float *x = s->ssm_x + (size_t)b * (size_t)ch;
            nu_conv_step(t->l->ssm_conv, win, nu_kv_state(&c->kv, s->rs_dst[b], plane), x, x,
                         hp->ssm.d_conv, ch, c0, c1);
        }
    }
}

/* Per entry: SiLU of the convolution, q and k L2-normed, the decay's log g
 * and the write strength beta. */
static void gates_row(const delta_task *t, int32_t b) {
    nu_context *c = t->ctx;
    const nu_hparams *hp = &c->model->hp;
    const nu_ssm_hp *ss = &hp->ssm;
    const nu_layer *l = t->l;
    nu_scratch *s = &c->s;
    const int64_t ch = nu_ssm_conv_dim(ss), key = (int64_t)ss->n_k_heads * ss->head_dim;
    float *y = s->ssm_x + (size_t)b * (size_t)ch;
    nu_act_plain(NU_ACT_SILU, y, ch);
    nu_l2_norm_heads(y, ss->n_k_heads, ss->head_dim, hp->norm_eps);
    nu_l2_norm_heads(y + key, ss->n_k_heads, ss->head_dim, hp->norm_eps);
    float *g = s->ssm_g + (size_t)b * ss->n_v_heads, *beta = s->ssm_b + (size_t)b * ss->n_v_heads;
    for (int32_t h = 0; h < ss->n_v_heads; h++) {
        g[h] = nu_softplus(g[h] + l->ssm_dt[h]) * l->ssm_a[h];
        beta[h] = nu_sigmoid(beta[h]);
    }
}

/* Per entry: the gated norm of every value head's output. */
static void out_row(const delta_task *t, int32_t b) {
    nu_context *c = t->ctx;
    const nu_hparams *hp = &c->model->hp;
    const nu_ssm_hp *ss = &hp->ssm;
    nu_scratch *s = &c->s;
    const size_t inner = (size_t)ss->n_v_heads * ss->head_dim;
    float *o = s->ssm_o + b * inner, *z = s->ssm_z + b * inner;
    nu_act_plain(NU_ACT_SILU, z, (int64_t)inner);
    for (int32_t h = 0; h < ss->n_v_heads; h++) {
        float *oh = o + (size_t)h * ss->head_dim;
        const float *zh = z + (size_t)h * ss->head_dim;
        nu_rms_norm(oh, oh, t->l->ssm_norm, ss->head_dim, hp->norm_eps);
        for (int32_t i = 0; i < ss->head_dim; i++) oh[i] *= zh[i];
    }
}

typedef struct rows_task {
    const delta_task *t;
    void (*row)(const delta_task *t, int32_t b);
} rows_task;

static void rows_worker(void *arg, int ith, int nth) {
    const rows_task *r = arg;
    int64_t begin, end;
    nu_split_range(r->t->n, ith, nth, &begin, &end);
    for (int64_t b = begin; b < end; b++) r->row(r->t, (int32_t)b);
}

/* Batches with at least this many entries split their per-row steps among
 * the threads (as forward.c's). */
#define PARALLEL_ROWS 8

static void run_rows(const delta_task *t, void (*row)(const delta_task *, int32_t)) {
    rows_task r = {t, row};
    if (t->n >= PARALLEL_ROWS)
        nu_threadpool_run(t->ctx->pool, rows_worker, &r);
    else
        rows_worker(&r, 0, 1);
}

/* Units (sequence, value head): each steps its head's matrix through the
 * sequence's entries in order. */
static void delta_worker(void *arg, int ith, int nth) {
    const delta_task *t = arg;
    nu_context *c = t->ctx;
    const nu_hparams *hp = &c->model->hp;
    const nu_ssm_hp *ss = &hp->ssm;
    const nu_scratch *s = &c->s;
    const int32_t d = ss->head_dim, hv = ss->n_v_heads, plane = hp->layer[t->il].state_plane;
    const int64_t ch = nu_ssm_conv_dim(ss), key = (int64_t)ss->n_k_heads * d;
    const size_t conv = (size_t)(ss->d_conv - 1) * (size_t)ch, mat = (size_t)d * d;
    const float scale = 1.0f / sqrtf((float)d);
    for (int64_t u = ith; u < (int64_t)s->rs_groups * hv; u += nth) {
        int32_t g = (int32_t)(u / hv), h = (int32_t)(u % hv), kh = h % ss->n_k_heads, begin, end;
        group_range(s, g, &begin, &end);
        for (int32_t j = begin; j < end; j++) {
            int32_t b = s->rs_order[j];
            const float *y = s->ssm_x + (size_t)b * (size_t)ch;
            const float *in = s->rs_src[b] >= 0
                                  ? nu_kv_state(&c->kv, s->rs_src[b], plane) + conv + h * mat
                                  : NULL;
            float *out = nu_kv_state(&c->kv, s->rs_dst[b], plane) + conv + h * mat;
            nu_delta_step(out, in, y + (size_t)kh * d, y + key + (size_t)kh * d,
                          y + 2 * key + (size_t)h * d, s->ssm_g[(size_t)b * hv + h],
                          s->ssm_b[(size_t)b * hv + h], scale, d, d,
                          s->ssm_o + ((size_t)b * hv + h) * d);
        }
    }
}

void nu_deltanet_block(nu_context *c, const nu_layer *l, int32_t il, int32_t n) {
    nu_scratch *s = &c->s;
    const nu_matrix *in[] = {&l->ssm_qkv, &l->ssm_z, &l->ssm_alpha, &l->ssm_beta};
    float *out[] = {s->ssm_x, s->ssm_z, s->ssm_g, s->ssm_b};
    nu_matmul_multi(c->pool, in, out, 4, s->xb, n, s->matmul);
    delta_task t = {c, l, il, n};
    nu_threadpool_run(c->pool, conv_worker, &t);
    run_rows(&t, gates_row);
    nu_threadpool_run(c->pool, delta_worker, &t);
    run_rows(&t, out_row);
    nu_matmul(c->pool, &l->ssm_out, s->ssm_o, n, s->q, s->matmul);
}
