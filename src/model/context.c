/* context.c - making and freeing contexts, the KV cache calls of nucleus.h,
 * and the memory calculator. */
#include "context.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "arch.h"
#include "error.h"
#include "recurrent.h"

nu_context_params nu_context_default_params(void) {
    nu_context_params p = {.n_ctx = 0,
                           .n_batch = 512,
                           .n_seq_max = 1,
                           .n_threads = 0,
                           .kv_type = NU_KV_F16,
                           .kv_type_k = NU_KV_SAME,
                           .kv_type_v = NU_KV_SAME};
    return p;
}

static int32_t default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int32_t)n;
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

void nu_scratch_dims_of(const nu_model *m, nu_scratch_dims *d) {
    const nu_hparams *hp = &m->hp;
    memset(d, 0, sizeof *d);
    d->embd = hp->n_embd;
    d->vocab = hp->n_vocab;
    d->experts = hp->n_expert;
    d->experts_used = hp->n_expert_used;
    d->pl = hp->n_embd_pl;
    d->layers = hp->n_layer;
    d->ff = hp->n_expert > 0 ? hp->n_ff_exp : 0;
    d->up = d->ff;
    for (int32_t i = 0; i < hp->n_rope; i++) d->rot = max64(d->rot, hp->rope[i].n_rot);
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const nu_layer_hp *l = &hp->layer[il];
        d->q = max64(d->q, (int64_t)l->n_head * l->head_dim);
        d->kv = max64(d->kv, (int64_t)l->n_head_kv * l->head_dim);
        d->v = max64(d->v, (int64_t)l->n_head_kv * l->head_dim_v);
        d->attn = max64(d->attn, (int64_t)l->n_head * l->head_dim_v);
        d->ff = max64(d->ff, l->n_ff);
        d->up = max64(d->up, l->n_ff);
        if (m->layers && m->layers[il].wqkv.data) d->qkv = max64(d->qkv, d->q + d->kv + d->v);
        if (m->layers && m->layers[il].w_up.data && m->layers[il].w_up.n_out == 2 * l->n_ff)
            d->up = max64(d->up, 2 * (int64_t)l->n_ff);
        if (m->arch && m->arch->q_gate) d->q2 = max64(d->q2, 2 * (int64_t)l->n_head * l->head_dim);
    }
    /* the shared expert's hidden rows go through gate and up too */
    d->ff = max64(d->ff, hp->n_ff_shexp);
    d->up = max64(d->up, hp->n_ff_shexp);
    if (hp->n_state_planes > 0) {
        d->ssm_ch = nu_ssm_conv_dim(&hp->ssm);
        d->ssm_heads = hp->ssm.n_v_heads;
        d->ssm_inner = (int64_t)hp->ssm.n_v_heads * hp->ssm.head_dim;
    }
}

/* The activation conversions one nu_matmul_tasks call of the forward pass
 * may hold at once: a layer's products sharing an input may mix three
 * layouts (32-element blocks, Q8_K, f16- or bf16-rounded floats), so three
 * times the largest; the
 * experts' products convert every routed row (n_batch x experts used), one
 * conversion per expert; plus an alignment per task. */
static size_t matmul_scratch(const nu_model *m, int32_t n_batch) {
    int32_t n = nu_model_weights(m, NULL, 0);
    nu_weight *ws = malloc(sizeof *ws * (size_t)(n > 0 ? n : 1));
    if (!ws) return SIZE_MAX;
    nu_model_weights(m, ws, n);
    size_t dense = 0, experts = 0;
    for (int32_t i = 0; i < n; i++) {
        const nu_matrix *W = ws[i].m ? ws[i].m : &ws[i].experts->m;
        int32_t rows = ws[i].m ? n_batch : n_batch * m->hp.n_expert_used;
        size_t b = nu_matmul_scratch_bytes(W->type, W->n_in, rows);
        size_t *slot = ws[i].experts ? &experts : &dense;
        if (b > *slot) *slot = b;
    }
    free(ws);
    dense *= 3;
    return (dense > experts ? dense : experts) + 64 * (NU_MATMUL_MAX_TASKS + 2);
}

/* Every scratch buffer with its size: one list that allocation and the
 * memory estimate both read. */
typedef struct scratch_buf {
    void **p;
    size_t bytes;
} scratch_buf;

enum { N_SCRATCH = 39 };

static void scratch_plan(const nu_model *m, const nu_scratch_dims *d, nu_scratch *s,
                         int32_t **seq_tokens, int32_t n_ctx, int32_t n_batch, int32_t n_seq,
                         int32_t n_threads, scratch_buf *out) {
    const size_t nb = (size_t)n_batch, f = sizeof(float), i = sizeof(int32_t);
    const size_t moe = d->experts > 0 ? 1 : 0;
    int k = 0;
#define BUF(field, n) out[k++] = (scratch_buf){(void **)&(field), (n)}
    BUF(s->x, nb * (size_t)d->embd * f);
    BUF(s->xb, nb * (size_t)max64(d->embd, d->attn) * f);
    BUF(s->xn, nb * (size_t)d->embd * f);
    BUF(s->q, nb * (size_t)max64(d->embd, d->q) * f);
    BUF(s->k, nb * (size_t)d->kv * f);
    BUF(s->v, nb * (size_t)d->v * f);
    BUF(s->qkv, nb * (size_t)d->qkv * f);
    /* the FFN's hidden rows: dense, or every routed (entry, expert) pair */
    const size_t routed = (size_t)(d->experts_used > 1 ? d->experts_used : 1);
    BUF(s->gate, nb * routed * (size_t)d->ff * f);
    BUF(s->up, nb * routed * (size_t)d->up * f);
    BUF(s->rope, (size_t)NU_MAX_ROPES * nb * (size_t)d->rot * f);
    BUF(s->scores, (size_t)n_threads * NU_ATTN_HEADS * ((size_t)n_ctx + 1) * f);
    BUF(s->matmul, matmul_scratch(m, n_batch));
    BUF(s->router, moe * nb * (size_t)d->experts * f);
    BUF(s->sel, moe * nb * (size_t)d->experts_used * i);
    BUF(s->sel_w, moe * nb * (size_t)d->experts_used * f);
    BUF(s->by_expert, moe * nb * (size_t)d->experts_used * i);
    BUF(s->pair_row, moe * nb * (size_t)d->experts_used * i);
    BUF(s->expert_end, moe * (size_t)d->experts * i);
    BUF(s->xr, moe * nb * (size_t)d->embd * f);
    BUF(s->yd, moe * nb * (size_t)d->embd * f);
    BUF(s->pl, nb * (size_t)(d->pl * d->layers) * f);
    BUF(s->plt, (size_t)(d->pl * d->layers) * f);
    BUF(s->plg, nb * (size_t)d->pl * f);
    BUF(s->xg, moe * nb * routed * (size_t)d->embd * f);
    BUF(s->yg, moe * nb * routed * (size_t)d->embd * f);
    BUF(s->cells, nb * i);
    BUF(s->out_rows, nb * i);
    BUF(s->seq_cells, (size_t)n_seq * (size_t)n_ctx * i);
    BUF(*seq_tokens, (size_t)n_seq * (size_t)n_ctx * i);
    BUF(s->qg, nb * (size_t)d->q2 * f);
    BUF(s->ssm_x, nb * (size_t)d->ssm_ch * f);
    BUF(s->ssm_z, nb * (size_t)d->ssm_inner * f);
    BUF(s->ssm_o, nb * (size_t)d->ssm_inner * f);
    BUF(s->ssm_g, nb * (size_t)d->ssm_heads * f);
    BUF(s->ssm_b, nb * (size_t)d->ssm_heads * f);
    const size_t rec = d->ssm_ch > 0 ? 1 : 0;
    BUF(s->rs_src, rec * nb * i);
    BUF(s->rs_dst, rec * nb * i);
    BUF(s->rs_order, rec * nb * i);
    BUF(s->replay, rec * nb * sizeof(nu_batch_entry));
#undef BUF
    assert(k == N_SCRATCH);
}

uint64_t nu_scratch_bytes(const nu_model *m, int32_t n_ctx, int32_t n_batch, int32_t n_seq,
                          int32_t n_threads) {
    nu_scratch_dims d;
    nu_scratch_dims_of(m, &d);
    nu_scratch s;
    int32_t *toks;
    scratch_buf bufs[N_SCRATCH];
    scratch_plan(m, &d, &s, &toks, n_ctx, n_batch, n_seq, n_threads, bufs);
    uint64_t total = (uint64_t)n_seq * (uint64_t)d.vocab * sizeof(float); /* logits */
    for (int i = 0; i < N_SCRATCH; i++) total += bufs[i].bytes;
    return total;
}

/* Row sizes and head counts of each cache plane. */
static void kv_plane_dims(const nu_hparams *hp, int32_t *k_dim, int32_t *v_dim, int32_t *heads) {
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const nu_layer_hp *l = &hp->layer[il];
        if (l->kv_slot < 0) continue; /* a recurrent layer */
        k_dim[l->kv_slot] = l->n_head_kv * l->head_dim;
        v_dim[l->kv_slot] = l->n_head_kv * l->head_dim_v;
        heads[l->kv_slot] = l->n_head_kv;
    }
}

/* LongRoPE's factors: the long set when the context is longer than the
 * original one, else the short set. Other RoPEs keep the file's. */
static void choose_rope_factors(nu_context *c) {
    const nu_model *m = c->model;
    for (int32_t i = 0; i < m->hp.n_rope; i++) {
        const nu_rope *r = &m->hp.rope[i];
        c->rope_factors[i] = r->freq_factors;
        if (i == 0 && r->scaling == NU_ROPE_SCALING_LONGROPE)
            c->rope_factors[i] = c->params.n_ctx > r->orig_ctx ? m->rope_long : m->rope_short;
    }
}

/* Whether the model's attention layers can keep keys of type_k and values of
 * type_v: a quantised cache needs heads of whole 32-value blocks. */
static nu_status check_kv_types(const nu_model *m, nu_kv_type type_k, nu_kv_type type_v,
                                nu_error *err) {
    for (int kv = 0; kv < 2; kv++) {
        nu_kv_type t = kv ? type_v : type_k;
        if (t < NU_KV_F32 || t > NU_KV_Q4_0)
            return nu_fail(err, NU_ERR_INVALID_ARG, "unknown %s cache type %d",
                           kv ? "value" : "key", (int)t);
        if (t != NU_KV_Q8_0 && t != NU_KV_Q4_0) continue;
        for (int32_t il = 0; il < m->hp.n_layer; il++) {
            const nu_layer_hp *l = &m->hp.layer[il];
            int32_t hd = kv ? l->head_dim_v : l->head_dim;
            if (l->kv_slot >= 0 && (hd % 32 || hd > 512))
                return nu_fail(err, NU_ERR_UNSUPPORTED,
                               "a %s %s cache needs heads of a multiple of 32 values, at most "
                               "512 (layer %d's %s are %d)",
                               t == NU_KV_Q8_0 ? "q8_0" : "q4_0", kv ? "value" : "key", il,
                               kv ? "values" : "keys", hd);
        }
    }
    return NU_OK;
}

static nu_status check_params(const nu_model *m, nu_context_params *p, nu_error *err) {
    if (m->mode != NU_LOAD_FULL)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the model was loaded without its weights");
    if (p->n_ctx == 0) p->n_ctx = m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (p->n_threads == 0) p->n_threads = default_threads();
    if (p->n_ctx < 1 || p->n_ctx > (1 << 24))
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_ctx %d is out of range (1..16777216)", p->n_ctx);
    if (m->pos_embd.data && p->n_ctx > m->hp.n_ctx_train)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "n_ctx %d is beyond the %d positions the model learned (it has no "
                       "rotary positions to extend)",
                       p->n_ctx, m->hp.n_ctx_train);
    if (p->n_batch < 1 || p->n_batch > (1 << 16))
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_batch %d is out of range (1..65536)",
                       p->n_batch);
    if (p->n_seq_max < 1 || p->n_seq_max > NU_MAX_SEQ)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_seq_max %d is out of range (1..%d)",
                       p->n_seq_max, NU_MAX_SEQ);
    if (p->n_threads < 1 || p->n_threads > 256)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_threads %d is out of range (1..256)",
                       p->n_threads);
    if (p->kv_type < NU_KV_F32 || p->kv_type > NU_KV_Q4_0)
        return nu_fail(err, NU_ERR_INVALID_ARG, "unknown KV cache type %d", (int)p->kv_type);
    if (p->kv_type_k == NU_KV_SAME) p->kv_type_k = p->kv_type;
    if (p->kv_type_v == NU_KV_SAME) p->kv_type_v = p->kv_type;
    nu_status st = check_kv_types(m, p->kv_type_k, p->kv_type_v, err);
    if (st != NU_OK) return st;
    if (p->n_state_checkpoints == 0) p->n_state_checkpoints = p->n_seq_max + 8;
    if (p->n_state_checkpoints < p->n_seq_max || p->n_state_checkpoints > 4096)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "n_state_checkpoints %d is out of range (n_seq_max %d..4096)",
                       p->n_state_checkpoints, p->n_seq_max);
    return NU_OK;
}

static nu_status alloc_scratch(nu_context *c, nu_error *err) {
    const nu_context_params *p = &c->params;
    scratch_buf bufs[N_SCRATCH];
    scratch_plan(c->model, &c->dims, &c->s, &c->seq_tokens, p->n_ctx, p->n_batch, p->n_seq_max,
                 p->n_threads, bufs);
    for (int i = 0; i < N_SCRATCH; i++) {
        /* a buffer a model does not use still gets a valid pointer */
        *bufs[i].p = malloc(bufs[i].bytes ? bufs[i].bytes : 1);
        if (!*bufs[i].p)
            return nu_fail(err, NU_ERR_NOMEM,
                           "out of memory for the context's scratch buffers (%zu bytes)",
                           bufs[i].bytes);
    }
    return NU_OK;
}

/* Floats of each recurrent layer's state plane. */
static void state_plane_floats(const nu_hparams *hp, int64_t *floats) {
    for (int32_t il = 0; il < hp->n_layer; il++)
        if (hp->layer[il].state_plane >= 0)
            floats[hp->layer[il].state_plane] = nu_ssm_state_floats(&hp->ssm);
}

/* Bytes of the state slots of a context: every sequence's current state and
 * the checkpoints. */
static uint64_t state_bytes(const nu_hparams *hp, int32_t n_seq, int32_t n_checkpoints) {
    if (hp->n_state_planes == 0) return 0;
    int64_t floats[NU_MAX_LAYERS];
    state_plane_floats(hp, floats);
    return nu_kv_state_bytes(n_seq + n_checkpoints, hp->n_state_planes, floats);
}

/* The KV cache's planes: one per layer that stores keys and values; and the
 * state slots of the recurrent layers. */
static nu_status init_cache(nu_context *c, nu_error *err) {
    const nu_hparams *hp = &c->model->hp;
    const int32_t np = hp->n_kv_slots;
    int32_t *dims = malloc(3 * sizeof *dims * (size_t)(np + 1));
    if (!dims) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    kv_plane_dims(hp, dims, dims + np, dims + 2 * np);
    nu_status st = nu_kv_cache_init(&c->kv, c->params.n_ctx, np, dims, dims + np, dims + 2 * np,
                                    c->params.kv_type_k, c->params.kv_type_v, err);
    free(dims);
    if (st || hp->n_state_planes == 0) return st;
    int64_t floats[NU_MAX_LAYERS];
    state_plane_floats(hp, floats);
    return nu_kv_cache_init_state(&c->kv, c->params.n_seq_max + c->params.n_state_checkpoints,
                                  hp->n_state_planes, floats, err);
}

/* Reads the first number of a file (a cgroup's memory.max / memory.current);
 * false when it is absent or says "max". */
static bool read_number(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    unsigned long long v;
    bool ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (ok) *out = v;
    return ok;
}

/* Reads "Key: N kB" from a /proc file; false when the key is not there. */
static bool read_kb(const char *path, const char *key, uint64_t *out) {
    FILE *f = fopen(path, "r");
    char line[256];
    size_t n = strlen(key);
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        unsigned long long kb;
        found = !strncmp(line, key, n) && sscanf(line + n, " %llu kB", &kb) == 1;
        if (found) *out = (uint64_t)kb * 1024;
    }
    if (f) fclose(f);
    return found;
}

/* Memory the system can still give us: MemAvailable, within the cgroup's
 * limit when there is one (a container) and the address-space limit of
 * the process (ulimit -v). False when none is known. */
static bool available_memory(uint64_t *out) {
    bool known = read_kb("/proc/meminfo", "MemAvailable:", out);
    struct rlimit rl;
    uint64_t used;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        read_kb("/proc/self/status", "VmSize:", &used)) {
        uint64_t room = rl.rlim_cur > used ? rl.rlim_cur - used : 0;
        if (!known || room < *out) *out = room;
        known = true;
    }
    uint64_t max, cur;
    if (read_number("/sys/fs/cgroup/memory.max", &max) &&
        read_number("/sys/fs/cgroup/memory.current", &cur)) {
        uint64_t room = max > cur ? max - cur : 0;
        if (!known || room < *out) *out = room;
        known = true;
    }
    return known;
}

/* A context whose cache and scratch the system cannot hold is refused with
 * the figures, rather than allocated lazily and killed by the kernel when
 * the cache fills up. */
static nu_status check_memory(const nu_model *m, const nu_context_params *p, nu_error *err) {
    nu_memory_estimate est;
    uint64_t avail = 0;
    nu_error ignored;
    if (nu_model_memory(m, p->n_ctx, p->n_batch, p->n_seq_max, p->kv_type_k, p->kv_type_v, &est,
                        &ignored) ||
        !available_memory(&avail))
        return NU_OK;
    uint64_t need = est.kv_cache + est.scratch;
    if (need <= avail) return NU_OK;
    const double mib = 1024.0 * 1024.0;
    return nu_fail(err, NU_ERR_NOMEM,
                   "a context of %d cells needs %.0f MiB (KV cache %.0f MiB, scratch %.0f MiB) "
                   "but only %.0f MiB of memory are available: use a smaller context or batch, "
                   "or a smaller KV cache type",
                   p->n_ctx, (double)need / mib, (double)est.kv_cache / mib,
                   (double)est.scratch / mib, (double)avail / mib);
}

nu_status nu_context_new(const nu_model *model, const nu_context_params *params, nu_context **out,
                         nu_error *err) {
    nu_context_params p = params ? *params : nu_context_default_params();
    *out = NULL;
    nu_status st = check_params(model, &p, err);
    if (st == NU_OK && model->mode == NU_LOAD_FULL) st = check_memory(model, &p, err);
    if (st) return st;
    nu_context *c = calloc(1, sizeof *c);
    if (!c) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    c->model = model;
    c->params = p;
    nu_scratch_dims_of(model, &c->dims);
    choose_rope_factors(c);
    st = init_cache(c, err);
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
    scratch_buf bufs[N_SCRATCH];
    scratch_plan(c->model, &c->dims, &c->s, &c->seq_tokens, 1, 1, 1, 1, bufs);
    for (int i = 0; i < N_SCRATCH; i++) free(*bufs[i].p);
    free(c->logits);
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

/* nu_context_read_weights: the bytes of every weight a step streams (64-byte
 * lines within each; for experts, as many experts as a token uses), each
 * split among the threads as the products split them. */
typedef struct weight_read {
    const nu_model *m;
    nu_weight *ws;
    int32_t n;
    _Atomic uint64_t sink;
} weight_read;

static void weight_span(const nu_model *m, const nu_weight *w, const uint8_t **p, size_t *lines) {
    const nu_matrix *W = w->m ? w->m : &w->experts->m;
    size_t bytes;
    if (w->m)
        bytes = W->packed ? nu_matrix_pack_bytes(W) : (size_t)W->n_out * W->row_bytes;
    else
        bytes = (W->packed ? w->experts->packed_stride : w->experts->stride) *
                (size_t)m->hp.n_expert_used;
    const uint8_t *b = W->packed ? W->packed : W->data;
    const uint8_t *a = (const uint8_t *)(((uintptr_t)b + 63) / 64 * 64);
    *p = a;
    *lines = bytes > (size_t)(a - b) ? (bytes - (size_t)(a - b)) / 64 : 0;
}

static void read_task(void *arg, int ith, int nth) {
    weight_read *r = arg;
    uint64_t sum = 0;
    for (int32_t i = 0; i < r->n; i++) {
        const uint8_t *p;
        size_t lines;
        weight_span(r->m, &r->ws[i], &p, &lines);
        int64_t b, e;
        nu_split_range((int64_t)lines, ith, nth, &b, &e);
        if (e > b) sum += nu_vec_read(p + 64 * (size_t)b, 64 * (size_t)(e - b));
    }
    atomic_fetch_add(&r->sink, sum);
}

double nu_context_read_weights(nu_context *c, uint64_t *bytes) {
    const nu_model *m = c->model;
    weight_read r = {.m = m, .n = nu_model_weights(m, NULL, 0)};
    r.ws = malloc(sizeof *r.ws * (size_t)(r.n > 0 ? r.n : 1));
    if (!r.ws) return 0;
    nu_model_weights(m, r.ws, r.n);
    uint64_t total = 0;
    for (int32_t i = 0; i < r.n; i++) {
        const uint8_t *p;
        size_t lines;
        weight_span(m, &r.ws[i], &p, &lines);
        total += 64 * (uint64_t)lines;
    }
    double t0 = nu_time_ms();
    nu_threadpool_run(c->pool, read_task, &r);
    double ms = nu_time_ms() - t0;
    free(r.ws);
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
    if (c->kv.n_slots) p1 = -1; /* later states depend on the removed positions */
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

int32_t nu_kv_seq_state_pos(const nu_context *c, int32_t seq) {
    int32_t last = nu_kv_seq_pos_max(c, seq);
    if (last < 0 || !nu_model_recurrent(c->model)) return last;
    int32_t cur = nu_kv_state_current(&c->kv, seq);
    int32_t at = cur >= 0 ? c->kv.slot_pos[cur] : -1;
    return at < last ? at : last;
}

nu_status nu_model_memory(const nu_model *m, int32_t n_ctx, int32_t n_batch, int32_t n_seq,
                          nu_kv_type kv_type_k, nu_kv_type kv_type_v, nu_memory_estimate *out,
                          nu_error *err) {
    if (m->mode != NU_LOAD_FULL)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the model was loaded without its weights");
    nu_status st = check_kv_types(m, kv_type_k, kv_type_v, err);
    if (st != NU_OK) return st;
    if (n_ctx < 1 || n_batch < 1 || n_seq < 1 || n_seq > NU_MAX_SEQ)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "n_ctx, n_batch and n_seq must be positive "
                       "(n_seq at most %d)",
                       NU_MAX_SEQ);
    out->weights = nu_model_weight_bytes(m);
    const int32_t np = m->hp.n_kv_slots;
    int32_t *dims = malloc(3 * sizeof *dims * (size_t)(np + 1));
    if (!dims) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    kv_plane_dims(&m->hp, dims, dims + np, dims + 2 * np);
    out->kv_cache =
        nu_kv_cache_bytes(n_ctx, np, dims, dims + np, dims + 2 * np, kv_type_k, kv_type_v) +
        state_bytes(&m->hp, n_seq, n_seq + 8);
    free(dims);
    out->scratch = nu_scratch_bytes(m, n_ctx, n_batch, n_seq, default_threads());
    out->total = out->weights + out->kv_cache + out->scratch;
    return NU_OK;
}
