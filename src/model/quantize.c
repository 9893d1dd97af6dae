/* quantize.c - writing a model in another tensor type: every metadata key is
 * copied, general.file_type is set, and each weight matrix is converted row
 * by row (read as floats through the reference dequantiser, written by the
 * reference quantiser, rows shared among threads). Vectors (norms, biases)
 * stay F32, as in real files. The file is written to OUT.tmp and renamed
 * into place when complete.
 *
 * The K-quant names are llama.cpp's quantize recipes (llama-quant.cpp, for
 * dense llama-family models), so a nucleus q4_k_m file has the same tensor
 * types as llama.cpp's. For every K recipe the output projection (or the
 * token embedding when the output is tied to it) is Q6_K, and:
 *   q2_k    attn_v Q4_K if n_head / n_head_kv >= 4 else Q3_K; ffn_down and
 *           attn_output Q3_K; the rest Q2_K
 *   q3_k_m  attn_v Q5_K in layers 0-1, else Q4_K; ffn_down Q5_K in the first
 *           sixteenth of the layers, else Q4_K; attn_output Q4_K; rest Q3_K
 *   q3_k_l  attn_v, ffn_down, attn_output Q5_K; rest Q3_K
 *   q4_k_s  attn_v Q5_K in layers 0-3, ffn_down Q5_K in the first eighth;
 *           rest Q4_K
 *   q4_k_m  attn_v and ffn_down Q6_K in "more bits" layers (the first and
 *   q5_k_m  last eighth and every third layer between); rest Q4_K / Q5_K
 *   q3_k_s, q5_k_s, q6_k: every other matrix Q3_K / Q5_K / Q6_K.
 * q3_k, q4_k, q5_k mean every matrix in that type (output Q6_K); llama.cpp
 * uses "Q4_K" as another name for Q4_K_M, nucleus does not.
 * Rows whose length is not a multiple of 256 fall back to a 32-element
 * block type of about the same size, as llama.cpp does: Q2_K and Q3_K to
 * Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0; rows of at least 32 that
 * fit no block (not a multiple of 32) become F16, as llama.cpp's "must use
 * F16 due to unusual shape", so both programs' files have the same tensor
 * types; shorter rows (convolution kernels) keep their type. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "gguf.h"
#include "imatrix.h"
#include "kernels.h"

/* ---- recipes ---------------------------------------------------------------- */

typedef enum recipe_kind {
    PLAIN,  /* one type for every matrix (the 32-element and float types) */
    K_PURE, /* one K type, output Q6_K */
    K_Q2_K,
    K_Q3_K_M,
    K_Q3_K_L,
    K_Q4_K_S,
    K_Q4_K_M,
    K_Q5_K_M,
    K_IQ4, /* iq4_nl, iq4_xs */
} recipe_kind;

typedef struct recipe {
    const char *name;
    uint32_t base; /* the type most matrices get */
    int file_type; /* llama.cpp's general.file_type number */
    recipe_kind kind;
} recipe;

static const recipe recipes[] = {
    {"f32", NU_TYPE_F32, 0, PLAIN},         {"f16", NU_TYPE_F16, 1, PLAIN},
    {"bf16", NU_TYPE_BF16, 32, PLAIN},      {"q8_0", NU_TYPE_Q8_0, 7, PLAIN},
    {"q5_1", NU_TYPE_Q5_1, 9, PLAIN},       {"q5_0", NU_TYPE_Q5_0, 8, PLAIN},
    {"q4_1", NU_TYPE_Q4_1, 3, PLAIN},       {"q4_0", NU_TYPE_Q4_0, 2, PLAIN},
    {"q2_k", NU_TYPE_Q2_K, 10, K_Q2_K},     {"q3_k_s", NU_TYPE_Q3_K, 11, K_PURE},
    {"q3_k_m", NU_TYPE_Q3_K, 12, K_Q3_K_M}, {"q3_k_l", NU_TYPE_Q3_K, 13, K_Q3_K_L},
    {"q4_k_s", NU_TYPE_Q4_K, 14, K_Q4_K_S}, {"q4_k_m", NU_TYPE_Q4_K, 15, K_Q4_K_M},
    {"q5_k_s", NU_TYPE_Q5_K, 16, K_PURE},   {"q5_k_m", NU_TYPE_Q5_K, 17, K_Q5_K_M},
    {"q6_k", NU_TYPE_Q6_K, 18, K_PURE},     {"q3_k", NU_TYPE_Q3_K, 11, K_PURE},
    {"q4_k", NU_TYPE_Q4_K, 14, K_PURE},     {"q5_k", NU_TYPE_Q5_K, 16, K_PURE},
    {"iq4_nl", NU_TYPE_IQ4_NL, 25, K_IQ4},  {"iq4_xs", NU_TYPE_IQ4_XS, 30, K_IQ4},
};

/* What the recipes need to know about the model. */
typedef struct model_shape {
    int n_layer;      /* <arch>.block_count (0 if absent) */
    int n_gqa;        /* attention heads per key/value head (1 if unknown) */
    int n_expert;     /* <arch>.expert_count (0 if absent) */
    bool has_output;  /* a separate output.weight (else it is tied to token_embd) */
    bool has_imatrix; /* an importance matrix was given */
} model_shape;

typedef enum role { ROLE_OTHER, ROLE_OUTPUT, ROLE_ATTN_V, ROLE_FFN_DOWN, ROLE_ATTN_OUTPUT } role;

static bool name_has(nu_gguf_string name, const char *part) {
    size_t n = strlen(part);
    for (size_t i = 0; i + n <= name.len; i++)
        if (memcmp(name.data + i, part, n) == 0) return true;
    return false;
}

static role role_of(nu_gguf_string name, const model_shape *m) {
    if (nu_gguf_str_eq(name, "output.weight")) return ROLE_OUTPUT;
    if (nu_gguf_str_eq(name, "token_embd.weight")) return m->has_output ? ROLE_OTHER : ROLE_OUTPUT;
    if (name_has(name, "attn_v.weight") || name_has(name, "attn_qkv.weight")) return ROLE_ATTN_V;
    if (name_has(name, "ffn_down")) return ROLE_FFN_DOWN;
    if (name_has(name, "attn_output.weight")) return ROLE_ATTN_OUTPUT;
    return ROLE_OTHER;
}

/* The layer of a "blk.N." tensor, or -1. */
static int layer_of(nu_gguf_string name) {
    if (name.len < 5 || memcmp(name.data, "blk.", 4) != 0) return -1;
    int layer = 0;
    size_t i = 4;
    for (; i < name.len && name.data[i] >= '0' && name.data[i] <= '9' && layer < 100000; i++)
        layer = layer * 10 + (name.data[i] - '0');
    return i > 4 && i < name.len && name.data[i] == '.' ? layer : -1;
}

/* llama.cpp's "use more bits" layers: the first and last eighth, and every
 * third layer in between. */
static bool more_bits(int layer, int n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

/* The K type one matrix gets under a K recipe (before the row-length
 * fallback). */
static uint32_t k_recipe_type(const recipe *rc, role r, int layer, const model_shape *m) {
    const int n = m->n_layer;
    if (r == ROLE_OUTPUT) return NU_TYPE_Q6_K;
    switch (rc->kind) {
    case K_Q2_K:
        if (r == ROLE_ATTN_V) return m->n_gqa >= 4 ? NU_TYPE_Q4_K : NU_TYPE_Q3_K;
        if (r == ROLE_FFN_DOWN || r == ROLE_ATTN_OUTPUT) return NU_TYPE_Q3_K;
        break;
    case K_Q3_K_M:
        if (r == ROLE_ATTN_V) return layer < 2 ? NU_TYPE_Q5_K : NU_TYPE_Q4_K;
        if (r == ROLE_FFN_DOWN) return layer < n / 16 ? NU_TYPE_Q5_K : NU_TYPE_Q4_K;
        if (r == ROLE_ATTN_OUTPUT) return NU_TYPE_Q4_K;
        break;
    case K_Q3_K_L:
        if (r == ROLE_ATTN_V || r == ROLE_FFN_DOWN || r == ROLE_ATTN_OUTPUT) return NU_TYPE_Q5_K;
        break;
    case K_Q4_K_S:
        if (r == ROLE_ATTN_V && layer < 4) return NU_TYPE_Q5_K;
        if (r == ROLE_FFN_DOWN && layer < n / 8) return NU_TYPE_Q5_K;
        break;
    case K_Q4_K_M:
    case K_Q5_K_M:
        if ((r == ROLE_ATTN_V || r == ROLE_FFN_DOWN) && more_bits(layer, n)) return NU_TYPE_Q6_K;
        break;
    case K_IQ4:
        if (r == ROLE_ATTN_V && m->n_gqa >= 4) return NU_TYPE_Q5_K;
        if (r == ROLE_FFN_DOWN && layer < n / 8 && !m->has_imatrix) return NU_TYPE_Q5_K;
        if (r == ROLE_ATTN_OUTPUT && m->n_expert == 8) return NU_TYPE_Q5_K;
        break;
    default: break;
    }
    return rc->base;
}

/* A 32-element block type of about the size of a K type. */
static uint32_t k_fallback(uint32_t type) {
    switch (type) {
    case NU_TYPE_IQ4_XS: return NU_TYPE_IQ4_NL;
    case NU_TYPE_Q2_K:
    case NU_TYPE_Q3_K: return NU_TYPE_Q4_0;
    case NU_TYPE_Q4_K: return NU_TYPE_Q5_0;
    case NU_TYPE_Q5_K: return NU_TYPE_Q5_1;
    default: return NU_TYPE_Q8_0;
    }
}

/* The type a tensor gets: vectors (and types nucleus cannot read) stay as
 * they are; matrices take the recipe's type, falling back to a smaller
 * block or to F16 when their rows do not fit it (rows shorter than a block
 * keep their type). Under the plain
 * recipes the output projection of a 4/5-bit file gets Q8_0 (it decides
 * every logit, so it keeps more precision). */
static uint32_t target_type(const nu_gguf_tensor *t, const recipe *rc, const model_shape *m,
                            bool pure, bool *fell_back) {
    *fell_back = false;
    bool matrix = t->n_dims >= 2 && t->ne[1] > 1;
    if (!matrix || !nu_type_get(t->type)->computable) return t->type;
    /* a recurrent layer's convolution taps stay as they are (llama-quantize
     * leaves them too; loaders take them in f32 only) */
    if (name_has(t->name, "ssm_conv1d")) return t->type;
    uint32_t want = rc->base;
    if (pure) return t->ne[0] % nu_type_get(want)->block_size ? NU_TYPE_COUNT : want;
    if (rc->kind != PLAIN) {
        want = k_recipe_type(rc, role_of(t->name, m), layer_of(t->name), m);
        if (t->ne[0] % 256 && nu_type_get(want)->block_size == 256)
            want = k_fallback(want), *fell_back = true;
    } else {
        bool low_bits = want == NU_TYPE_Q4_0 || want == NU_TYPE_Q4_1 || want == NU_TYPE_Q5_0 ||
                        want == NU_TYPE_Q5_1;
        if (low_bits && nu_gguf_str_eq(t->name, "output.weight")) want = NU_TYPE_Q8_0;
    }
    const uint32_t block = nu_type_get(want)->block_size;
    if (t->ne[0] % block) {
        *fell_back = true;
        if (t->ne[0] < block) return t->type == NU_TYPE_F32 ? NU_TYPE_F32 : NU_TYPE_F16;
        return want == NU_TYPE_F32 ? NU_TYPE_F32 : NU_TYPE_F16;
    }
    return want;
}

/* Reads the recipes' model facts from the metadata. */
static model_shape read_shape(const nu_gguf_file *in, bool has_imatrix) {
    model_shape m = {.n_gqa = 1,
                     .has_output = nu_gguf_find_tensor(in, "output.weight") != NULL,
                     .has_imatrix = has_imatrix};
    nu_gguf_string arch;
    char key[256];
    uint32_t v, heads = 0, kv_heads = 0;
    if (!nu_gguf_get_str(in, "general.architecture", &arch) || arch.len > 128) return m;
    snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.data);
    if (nu_gguf_get_u32(in, key, &v) && v < 100000) m.n_layer = (int)v;
    snprintf(key, sizeof key, "%.*s.attention.head_count", (int)arch.len, arch.data);
    if (nu_gguf_get_u32(in, key, &v)) heads = v;
    snprintf(key, sizeof key, "%.*s.attention.head_count_kv", (int)arch.len, arch.data);
    kv_heads = nu_gguf_get_u32(in, key, &v) ? v : heads;
    if (heads && kv_heads) m.n_gqa = (int)(heads / kv_heads);
    snprintf(key, sizeof key, "%.*s.expert_count", (int)arch.len, arch.data);
    if (nu_gguf_get_u32(in, key, &v) && v < 100000) m.n_expert = (int)v;
    if (m.n_layer == 0) /* no block count: as llama.cpp, count the attn_v tensors */
        for (uint64_t i = 0; i < in->n_tensors; i++)
            m.n_layer += role_of(in->tensors[i].name, &m) == ROLE_ATTN_V;
    return m;
}

/* ---- writing GGUF --------------------------------------------------------- */

typedef struct writer {
    FILE *f;
    bool failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (!w->failed && n && fwrite(p, 1, n, w->f) != n) w->failed = true;
}
static void put_u32(writer *w, uint32_t v) {
    put(w, &v, 4);
}
static void put_u64(writer *w, uint64_t v) {
    put(w, &v, 8);
}
static void put_str(writer *w, nu_gguf_string s) {
    put_u64(w, s.len);
    put(w, s.data, s.len);
}

/* A value's payload (not its type), recursively for arrays. */
static void put_value(writer *w, const nu_gguf_value *v) {
    switch (v->type) {
    case GGUF_UINT8:
    case GGUF_BOOL: {
        uint8_t x = (uint8_t)v->v.u;
        put(w, &x, 1);
        break;
    }
    case GGUF_INT8: {
        int8_t x = (int8_t)v->v.i;
        put(w, &x, 1);
        break;
    }
    case GGUF_UINT16: {
        uint16_t x = (uint16_t)v->v.u;
        put(w, &x, 2);
        break;
    }
    case GGUF_INT16: {
        int16_t x = (int16_t)v->v.i;
        put(w, &x, 2);
        break;
    }
    case GGUF_UINT32: put_u32(w, (uint32_t)v->v.u); break;
    case GGUF_INT32: {
        int32_t x = (int32_t)v->v.i;
        put(w, &x, 4);
        break;
    }
    case GGUF_FLOAT32: {
        float x = (float)v->v.f;
        put(w, &x, 4);
        break;
    }
    case GGUF_UINT64: put_u64(w, v->v.u); break;
    case GGUF_INT64: put(w, &v->v.i, 8); break;
    case GGUF_FLOAT64: put(w, &v->v.f, 8); break;
    case GGUF_STRING: put_str(w, v->v.s); break;
    case GGUF_ARRAY:
        put_u32(w, v->v.arr.elem_type);
        put_u64(w, v->v.arr.n);
        for (uint64_t i = 0; i < v->v.arr.n; i++) put_value(w, &v->v.arr.items[i]);
        break;
    default: w->failed = true; break;
    }
}

static void put_kv(writer *w, const char *key, uint32_t type, const void *payload, size_t n) {
    nu_gguf_string k = {key, strlen(key)};
    put_str(w, k);
    put_u32(w, type);
    put(w, payload, n);
}

static void pad_to(writer *w, uint64_t *pos, uint64_t align) {
    static const char zeros[64] = {0};
    while (*pos % align) {
        size_t n = (size_t)(align - *pos % align);
        if (n > sizeof zeros) n = sizeof zeros;
        put(w, zeros, n);
        *pos += n;
    }
}

/* Header, metadata (general.file_type replaced) and tensor directory. */
static uint64_t write_header(writer *w, const nu_gguf_file *in, const uint32_t *types,
                             uint32_t file_type) {
    uint64_t n_kv = in->n_kv + (nu_gguf_find(in, "general.file_type") ? 0 : 1);
    put(w, "GGUF", 4);
    put_u32(w, 3);
    put_u64(w, in->n_tensors);
    put_u64(w, n_kv);
    for (uint64_t i = 0; i < in->n_kv; i++) {
        if (nu_gguf_str_eq(in->kv[i].key, "general.file_type")) continue;
        put_str(w, in->kv[i].key);
        put_u32(w, in->kv[i].value.type);
        put_value(w, &in->kv[i].value);
    }
    put_kv(w, "general.file_type", GGUF_UINT32, &file_type, 4);
    uint64_t offset = 0;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const nu_gguf_tensor *t = &in->tensors[i];
        put_str(w, t->name);
        put_u32(w, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(w, (uint64_t)t->ne[d]);
        put_u32(w, types[i]);
        put_u64(w, offset);
        uint64_t rows = t->n_elements / (uint64_t)t->ne[0];
        offset += nu_type_row_bytes(types[i], (uint64_t)t->ne[0]) * rows;
        offset = (offset + in->alignment - 1) / in->alignment * in->alignment;
    }
    long pos = ftell(w->f);
    return pos < 0 ? 0 : (uint64_t)pos;
}

/* Rows converted per batch: enough output bytes to keep every thread busy,
 * few enough to keep the buffer small. */
#define BATCH_BYTES (8u << 20)

/* One batch of rows of a tensor, converted by the pool's threads. */
typedef struct convert_job {
    const nu_gguf_tensor *t;
    uint32_t type;
    uint64_t row0, rows;
    size_t in_bytes, out_bytes;
    float *scratch;          /* one row of floats per thread */
    uint8_t *out;            /* rows * out_bytes */
    const float *importance; /* ne[0] per expert (3-D tensors: ne[1] rows each), or NULL */
} convert_job;

/* This thread's share of the batch: each row through floats. */
static void convert_task(void *arg, int ith, int nth) {
    const convert_job *j = arg;
    const int64_t n = j->t->ne[0];
    float *row = j->scratch + (size_t)ith * (size_t)n;
    int64_t r0, r1;
    nu_split_range((int64_t)j->rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *src = (const char *)j->t->data + (j->row0 + (uint64_t)r) * j->in_bytes;
        nu_dequantize_row(j->t->type, src, row, n);
        const float *imp = NULL;
        if (j->importance)
            imp = j->importance + (j->row0 + (uint64_t)r) / j->t->ne[1] * (uint64_t)n;
        nu_quantize_row_weighted(j->type, row, j->out + (size_t)r * j->out_bytes, n, imp);
    }
}

/* Converts one tensor batch by batch (rows in order, so the bytes written
 * do not depend on the thread count). */
static void write_tensor(writer *w, nu_threadpool *pool, const nu_gguf_tensor *t, uint32_t type,
                         const float *importance, float *scratch, uint8_t *out) {
    uint64_t n = (uint64_t)t->ne[0], rows = t->n_elements / n;
    convert_job j = {
        .t = t, .type = type, .scratch = scratch, .out = out, .importance = importance};
    j.in_bytes = (size_t)nu_type_row_bytes(t->type, n);
    j.out_bytes = (size_t)nu_type_row_bytes(type, n);
    if (type == t->type) {
        put(w, t->data, j.in_bytes * rows);
        return;
    }
    uint64_t batch = BATCH_BYTES / j.out_bytes ? BATCH_BYTES / j.out_bytes : 1;
    for (j.row0 = 0; j.row0 < rows && !w->failed; j.row0 += batch) {
        j.rows = rows - j.row0 < batch ? rows - j.row0 : batch;
        nu_threadpool_run(pool, convert_task, &j);
        put(w, out, j.rows * j.out_bytes);
    }
}

static nu_status plan_types(const nu_gguf_file *in, const recipe *rc, bool pure,
                            const nu_imatrix *imatrix, uint32_t **types, int64_t *n_fallback,
                            nu_error *err) {
    *n_fallback = 0;
    const model_shape m = read_shape(in, imatrix != NULL);
    *types = malloc((size_t)(in->n_tensors + 1) * sizeof **types);
    if (!*types) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const nu_gguf_tensor *t = &in->tensors[i];
        bool known = nu_type_get(t->type)->computable || t->n_dims == 1;
        if (!known)
            return nu_fail(err, NU_ERR_UNSUPPORTED,
                           "tensor '%.*s' has type %s, which nucleus "
                           "cannot convert",
                           (int)t->name.len, t->name.data, nu_type_get(t->type)->name);
        bool fell_back;
        (*types)[i] = target_type(t, rc, &m, pure, &fell_back);
        *n_fallback += fell_back;
        if ((*types)[i] == NU_TYPE_COUNT)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "tensor '%.*s' has rows of %lld values, not whole blocks of %s "
                           "(a pure %s file cannot hold it)",
                           (int)t->name.len, t->name.data, (long long)t->ne[0],
                           nu_type_get(rc->base)->name, rc->name);
    }
    return NU_OK;
}

/* Threads for converting: the online cores, at most 8. */
static int convert_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* The importances of tensor t from the matrix (NULL if it has none), after
 * checking that they fit the tensor: ne[0] values per expert. */
static nu_status tensor_importance(const nu_imatrix *imatrix, const nu_gguf_tensor *t,
                                   const float **out, nu_error *err) {
    int64_t n;
    *out = nu_imatrix_find(imatrix, t->name.data, (size_t)t->name.len, &n);
    const int64_t want = t->ne[0] * (t->n_dims >= 3 ? t->ne[2] : 1);
    if (*out && n != want)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "the importance matrix has %lld values for '%.*s', which needs %lld",
                       (long long)n, (int)t->name.len, t->name.data, (long long)want);
    return NU_OK;
}

/* Checks the importance matrix against the tensors to convert: every entry's
 * size, and that it has an entry for at least one matrix whose encoder weighs
 * by it (else it is another model's). Counts the matrices it weighs and
 * those of such a type it has no entry for. */
static nu_status check_importance(const nu_gguf_file *in, const uint32_t *types,
                                  const nu_imatrix *imatrix, const char *path, int64_t *n_weighted,
                                  int64_t *n_unweighted, nu_error *err) {
    *n_weighted = *n_unweighted = 0;
    if (!imatrix) return NU_OK;
    const nu_gguf_tensor *missing = NULL;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const nu_gguf_tensor *t = &in->tensors[i];
        const float *imp;
        nu_status st = tensor_importance(imatrix, t, &imp, err);
        if (st) return st;
        if (types[i] == t->type || !nu_quantize_weighs(types[i])) continue;
        if (imp)
            ++*n_weighted;
        else if (++*n_unweighted == 1)
            missing = t;
    }
    if (*n_unweighted && !*n_weighted)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "the importance matrix %s has no entry for any of the %lld matrices it "
                       "would weigh (such as '%.*s'): is it another model's?",
                       path, (long long)*n_unweighted, (int)missing->name.len, missing->name.data);
    return NU_OK;
}

static nu_status write_all(const nu_gguf_file *in, const char *tmp, const uint32_t *types,
                           const recipe *rc, const nu_imatrix *imatrix, nu_error *err) {
    int64_t widest = 1;
    for (uint64_t i = 0; i < in->n_tensors; i++)
        if (in->tensors[i].ne[0] > widest) widest = in->tensors[i].ne[0];
    const int nth = convert_threads();
    /* a batch holds at least one row of the widest tensor in its widest type */
    size_t out_bytes = BATCH_BYTES + (size_t)widest * sizeof(float);
    float *scratch = malloc((size_t)nth * (size_t)widest * sizeof(float));
    uint8_t *out = malloc(out_bytes);
    nu_threadpool *pool = nth > 1 ? nu_threadpool_new(nth) : NULL;
    writer w = {fopen(tmp, "wb"), false};
    if (!scratch || !out || !w.f || (nth > 1 && !pool)) {
        free(scratch), free(out), nu_threadpool_free(pool);
        if (w.f) fclose(w.f);
        return w.f ? nu_fail(err, NU_ERR_NOMEM, "out of memory")
                   : nu_fail(err, NU_ERR_IO, "cannot write %s", tmp);
    }
    uint64_t pos = write_header(&w, in, types, (uint32_t)rc->file_type);
    pad_to(&w, &pos, in->alignment);
    for (uint64_t i = 0; i < in->n_tensors && !w.failed; i++) {
        const nu_gguf_tensor *t = &in->tensors[i];
        const float *imp = NULL;
        if (types[i] != t->type) tensor_importance(imatrix, t, &imp, err);
        write_tensor(&w, pool, t, types[i], imp, scratch, out);
        pos +=
            nu_type_row_bytes(types[i], (uint64_t)t->ne[0]) * (t->n_elements / (uint64_t)t->ne[0]);
        pad_to(&w, &pos, in->alignment);
    }
    free(scratch);
    free(out);
    nu_threadpool_free(pool);
    if (fclose(w.f) != 0) w.failed = true;
    return w.failed ? nu_fail(err, NU_ERR_IO, "writing %s failed (disk full?)", tmp) : NU_OK;
}

nu_quantize_params nu_quantize_default_params(void) {
    return (nu_quantize_params){.pure = false,
                                .imatrix = NULL,
                                .n_fallback = NULL,
                                .n_weighted = NULL,
                                .n_unweighted = NULL};
}

nu_status nu_quantize_file(const char *in_path, const char *out_path, const char *type_name,
                           nu_error *err) {
    return nu_quantize_file_with(in_path, out_path, type_name, NULL, err);
}

nu_status nu_quantize_file_with(const char *in_path, const char *out_path, const char *type_name,
                                const nu_quantize_params *params, nu_error *err) {
    const nu_quantize_params p = params ? *params : nu_quantize_default_params();
    const recipe *rc = NULL;
    for (size_t i = 0; i < sizeof recipes / sizeof *recipes; i++)
        if (strcmp(recipes[i].name, type_name) == 0) rc = &recipes[i];
    if (!rc)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "unknown target type '%s' (f32, f16, bf16, q8_0, "
                       "q5_1, q5_0, q4_1, q4_0, q6_k, q5_k_m, q5_k_s, q4_k_m, q4_k_s, q3_k_l, "
                       "q3_k_m, q3_k_s, q2_k, q5_k, q4_k, q3_k, iq4_xs, iq4_nl)",
                       type_name);
    nu_kernels_init();
    nu_gguf_file *in;
    nu_status st = nu_gguf_open(in_path, &in, err);
    if (st) return st;
    uint32_t *types = NULL;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    nu_imatrix *imatrix = NULL;
    if (p.imatrix) {
        st = nu_imatrix_load(p.imatrix, &imatrix, err);
        if (st) {
            nu_gguf_close(in);
            return st;
        }
    }
    int64_t n_fallback;
    st = plan_types(in, rc, p.pure, imatrix, &types, &n_fallback, err);
    if (st == NU_OK && p.n_fallback) *p.n_fallback = n_fallback;
    int64_t n_weighted, n_unweighted;
    if (st == NU_OK)
        st = check_importance(in, types, imatrix, p.imatrix, &n_weighted, &n_unweighted, err);
    if (st == NU_OK && p.n_weighted) *p.n_weighted = n_weighted;
    if (st == NU_OK && p.n_unweighted) *p.n_unweighted = n_unweighted;
    if (st == NU_OK) st = write_all(in, tmp, types, rc, imatrix, err);
    nu_imatrix_free(imatrix);
    if (st == NU_OK && rename(tmp, out_path) != 0)
        st = nu_fail(err, NU_ERR_IO, "cannot rename %s to %s", tmp, out_path);
    if (st) unlink(tmp);
    free(types);
    nu_gguf_close(in);
    return st;
}
