/* context.c - making and freeing contexts, the KV cache calls of nucleus.h,
 * and the memory calculator. */
#include "context.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"

nu_context_params nu_context_default_params(void) {
    nu_context_params p = {
        .n_ctx = 0, .n_batch = 512, .n_seq_max = 1, .n_threads = 0, .kv_type = NU_KV_F16};
    return p;
}

static int32_t default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int32_t)n;
}

static int32_t q_dim(const nu_hparams *hp) {
    return hp->n_head * hp->head_dim;
}
static int32_t kv_dim(const nu_hparams *hp) {
    return hp->n_head_kv * hp->head_dim;
}
static int32_t max_i32(int32_t a, int32_t b) {
    return a > b ? a : b;
}

/* The largest activation-conversion buffer any of the model's products needs. */
static size_t matmul_scratch(const nu_model *m, int32_t n_batch) {
    size_t best = nu_matmul_scratch_bytes(m->output.type, m->hp.n_embd, n_batch);
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        const nu_layer *l = &m->layers[il];
        const nu_matrix *mats[] = {&l->wq,     &l->wk,   &l->wv,    &l->wo,
                                   &l->w_gate, &l->w_up, &l->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
            size_t b = nu_matmul_scratch_bytes(mats[i]->type, mats[i]->n_in, n_batch);
            if (b > best) best = b;
        }
    }
    return best;
}

uint64_t nu_scratch_bytes(const nu_hparams *hp, int32_t n_ctx, int32_t n_batch, int32_t n_seq,
                          int32_t n_threads) {
    uint64_t f = 0;
    f += (uint64_t)n_batch * (uint64_t)hp->n_embd;                     /* x */
    f += (uint64_t)n_batch * (uint64_t)max_i32(hp->n_embd, q_dim(hp)); /* xb */
    f += (uint64_t)n_batch * (uint64_t)(q_dim(hp) + 2 * kv_dim(hp));   /* q, k, v */
    f += 2 * (uint64_t)n_batch * (uint64_t)hp->n_ff;                   /* gate, up */
    f += (uint64_t)n_batch * (uint64_t)hp->n_rot;                      /* rope */
    f += (uint64_t)n_threads * NU_ATTN_HEADS * (uint64_t)n_ctx;        /* scores */
    f += (uint64_t)n_seq * (uint64_t)hp->n_vocab;                      /* logits */
    uint64_t ints = (uint64_t)n_batch * 2 + (uint64_t)n_seq * (uint64_t)n_ctx;
    /* activation conversion: at most one float per input element */
    uint64_t conv = (uint64_t)n_batch * (uint64_t)max_i32(hp->n_ff, max_i32(hp->n_embd, q_dim(hp)));
    return 4 * (f + ints + conv);
}

static nu_status check_params(const nu_model *m, nu_context_params *p, nu_error *err) {
    if (m->mode != NU_LOAD_FULL)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the model was loaded without its weights");
    if (p->n_ctx == 0) p->n_ctx = m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (p->n_threads == 0) p->n_threads = default_threads();
    if (p->n_ctx < 1 || p->n_ctx > (1 << 24))
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_ctx %d is out of range (1..16777216)", p->n_ctx);
    if (p->n_batch < 1 || p->n_batch > (1 << 16))
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_batch %d is out of range (1..65536)",
                       p->n_batch);
    if (p->n_seq_max < 1 || p->n_seq_max > NU_MAX_SEQ)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_seq_max %d is out of range (1..%d)",
                       p->n_seq_max, NU_MAX_SEQ);
    if (p->n_threads < 1 || p->n_threads > 256)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_threads %d is out of range (1..256)",
                       p->n_threads);
    if (p->kv_type != NU_KV_F32 && p->kv_type != NU_KV_F16)
        return nu_fail(err, NU_ERR_INVALID_ARG, "unknown KV cache type %d", (int)p->kv_type);
    return NU_OK;
}

static nu_status alloc_scratch(nu_context *c, nu_error *err) {
    const nu_hparams *hp = &c->model->hp;
    const nu_context_params *p = &c->params;
    size_t nb = (size_t)p->n_batch;
    nu_scratch *s = &c->s;
    s->x = malloc(nb * (size_t)hp->n_embd * sizeof(float));
    s->xb = malloc(nb * (size_t)max_i32(hp->n_embd, q_dim(hp)) * sizeof(float));
    s->q = malloc(nb * (size_t)max_i32(hp->n_embd, q_dim(hp)) * sizeof(float));
    s->k = malloc(nb * (size_t)kv_dim(hp) * sizeof(float));
    s->v = malloc(nb * (size_t)kv_dim(hp) * sizeof(float));
    s->gate = malloc(nb * (size_t)hp->n_ff * sizeof(float));
    s->up = malloc(nb * (size_t)hp->n_ff * sizeof(float));
    s->rope = malloc(nb * (size_t)hp->n_rot * sizeof(float) + sizeof(float));
    s->scores = malloc((size_t)p->n_threads * NU_ATTN_HEADS * (size_t)p->n_ctx * sizeof(float));
    s->matmul = malloc(matmul_scratch(c->model, p->n_batch) + 64);
    s->cells = malloc(nb * sizeof(int32_t));
    s->out_rows = malloc(nb * sizeof(int32_t));
    s->seq_cells = malloc((size_t)p->n_seq_max * (size_t)p->n_ctx * sizeof(int32_t));
    c->seq_tokens = malloc((size_t)p->n_seq_max * (size_t)p->n_ctx * sizeof(int32_t));
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->gate || !s->up || !s->rope ||
        !s->scores || !s->matmul || !s->cells || !s->out_rows || !s->seq_cells || !c->seq_tokens)
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for the context's scratch buffers");
    return NU_OK;
}

nu_status nu_context_new(const nu_model *model, const nu_context_params *params, nu_context **out,
                         nu_error *err) {
    nu_context_params p = params ? *params : nu_context_default_params();
    *out = NULL;
    nu_status st = check_params(model, &p, err);
    if (st) return st;
    nu_context *c = calloc(1, sizeof *c);
    if (!c) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    c->model = model;
    c->params = p;
    st = nu_kv_cache_init(&c->kv, p.n_ctx, model->hp.n_layer, kv_dim(&model->hp), p.kv_type, err);
    if (st == NU_OK) st = alloc_scratch(c, err);
    if (st == NU_OK && p.n_threads > 1) {
        c->pool = nu_threadpool_new(p.n_threads);
        if (!c->pool) st = nu_fail(err, NU_ERR_NOMEM, "could not start %d threads", p.n_threads);
    }
    if (st) {
        nu_context_free(c);
        return st;
    }
    *out = c;
    return NU_OK;
}

void nu_context_free(nu_context *c) {
    if (!c) return;
    nu_threadpool_free(c->pool);
    nu_kv_cache_free(&c->kv);
    nu_scratch *s = &c->s;
    void *bufs[] = {s->x,     s->xb,       s->q,         s->k,      s->v,
                    s->gate,  s->up,       s->rope,      s->scores, s->matmul,
                    s->cells, s->out_rows, s->seq_cells, c->logits, c->seq_tokens};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(c);
}

const nu_model *nu_context_model(const nu_context *c) {
    return c->model;
}
int32_t nu_context_n_ctx(const nu_context *c) {
    return c->params.n_ctx;
}
int32_t nu_context_n_batch(const nu_context *c) {
    return c->params.n_batch;
}
int32_t nu_context_n_seq_max(const nu_context *c) {
    return c->params.n_seq_max;
}
int32_t nu_context_n_threads(const nu_context *c) {
    return c->params.n_threads;
}

/* nu_context_read_weights: the matrices' bytes (64-byte lines within each),
 * each matrix split among the threads as the products split it. */
typedef struct weight_read {
    const nu_matrix **mats;
    int n;
    _Atomic uint64_t sink;
} weight_read;

static void matrix_span(const nu_matrix *W, const uint8_t **p, size_t *lines) {
    size_t bytes = W->packed ? nu_matrix_pack_bytes(W) : (size_t)W->n_out * W->row_bytes;
    const uint8_t *b = W->packed ? W->packed : W->data;
    const uint8_t *a = (const uint8_t *)(((uintptr_t)b + 63) / 64 * 64);
    *p = a;
    *lines = bytes > (size_t)(a - b) ? (bytes - (size_t)(a - b)) / 64 : 0;
}

static void read_task(void *arg, int ith, int nth) {
    weight_read *r = arg;
    uint64_t sum = 0;
    for (int i = 0; i < r->n; i++) {
        const uint8_t *p;
        size_t lines;
        matrix_span(r->mats[i], &p, &lines);
        int64_t b, e;
        nu_split_range((int64_t)lines, ith, nth, &b, &e);
        if (e > b) sum += nu_vec_read(p + 64 * (size_t)b, 64 * (size_t)(e - b));
    }
    atomic_fetch_add(&r->sink, sum);
}

double nu_context_read_weights(nu_context *c, uint64_t *bytes) {
    const nu_model *m = c->model;
    weight_read r = {.mats = malloc(sizeof(nu_matrix *) * (size_t)(1 + 7 * m->hp.n_layer))};
    if (!r.mats) return 0;
    r.n = nu_model_matrices(m, r.mats);
    uint64_t total = 0;
    for (int i = 0; i < r.n; i++) {
        const uint8_t *p;
        size_t lines;
        matrix_span(r.mats[i], &p, &lines);
        total += 64 * (uint64_t)lines;
    }
    double t0 = nu_time_ms();
    nu_threadpool_run(c->pool, read_task, &r);
    double ms = nu_time_ms() - t0;
    free(r.mats);
    if (bytes) *bytes = total;
    return ms;
}

void nu_kv_clear(nu_context *c) {
    nu_kv_cache_clear(&c->kv);
    memset(c->seq_len, 0, sizeof c->seq_len);
}

const int32_t *nu_context_seq_tokens(const nu_context *c, int32_t seq, int32_t *n) {
    *n = c->seq_len[seq];
    return c->seq_tokens + (size_t)seq * c->params.n_ctx;
}
int32_t nu_kv_used(const nu_context *c) {
    return c->kv.used;
}
int32_t nu_kv_n_cells(const nu_context *c) {
    return c->kv.n_cells;
}

static bool seq_ok(const nu_context *c, int32_t seq) {
    return seq >= 0 && seq < c->params.n_seq_max;
}

void nu_kv_seq_remove(nu_context *c, int32_t seq, int32_t p0, int32_t p1) {
    if (!seq_ok(c, seq)) return;
    if (p0 < 0) p0 = 0;
    nu_kv_cache_seq_remove(&c->kv, seq, p0, p1);
    if (p0 < c->seq_len[seq]) c->seq_len[seq] = p0; /* what follows is no longer contiguous */
}

void nu_kv_seq_copy(nu_context *c, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    if (!seq_ok(c, src) || !seq_ok(c, dst) || src == dst) return;
    if (p0 < 0) p0 = 0;
    nu_kv_cache_seq_copy(&c->kv, src, dst, p0, p1);
    /* dst's known tokens grow only when the copy continues them */
    int32_t end = p1 < 0 || p1 > c->seq_len[src] ? c->seq_len[src] : p1;
    if (p0 <= c->seq_len[dst] && end > c->seq_len[dst]) {
        size_t row = (size_t)c->params.n_ctx;
        memcpy(c->seq_tokens + dst * row + c->seq_len[dst],
               c->seq_tokens + src * row + c->seq_len[dst],
               (size_t)(end - c->seq_len[dst]) * sizeof(int32_t));
        c->seq_len[dst] = end;
    }
}

int32_t nu_kv_seq_pos_max(const nu_context *c, int32_t seq) {
    return seq_ok(c, seq) ? nu_kv_cache_seq_pos_max(&c->kv, seq) : -1;
}

nu_status nu_model_memory(const nu_model *m, int32_t n_ctx, int32_t n_batch, int32_t n_seq,
                          nu_kv_type kv_type, nu_memory_estimate *out, nu_error *err) {
    if (m->mode != NU_LOAD_FULL)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the model was loaded without its weights");
    if (n_ctx < 1 || n_batch < 1 || n_seq < 1 || n_seq > NU_MAX_SEQ)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "n_ctx, n_batch and n_seq must be positive "
                       "(n_seq at most %d)",
                       NU_MAX_SEQ);
    out->weights = nu_model_weight_bytes(m);
    out->kv_cache = nu_kv_cache_bytes(n_ctx, m->hp.n_layer, kv_dim(&m->hp), kv_type);
    out->scratch = nu_scratch_bytes(&m->hp, n_ctx, n_batch, n_seq, default_threads());
    out->total = out->weights + out->kv_cache + out->scratch;
    return NU_OK;
}
