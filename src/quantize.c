/* quantize.c - writing a model in another tensor type: every metadata key is
 * copied, general.file_type is set, and each weight matrix is converted row
 * by row (read as floats through the reference dequantiser, written by the
 * reference quantiser). Vectors (norms, biases) stay F32, as in real files.
 * The file is written to OUT.tmp and renamed into place when complete. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "gguf.h"
#include "kernels/kernels.h"

/* llama.cpp's general.file_type numbers for the whole-file types. */
static int file_type_of(uint32_t type) {
    switch (type) {
    case NU_TYPE_F32: return 0;
    case NU_TYPE_F16: return 1;
    case NU_TYPE_Q4_0: return 2;
    case NU_TYPE_Q4_1: return 3;
    case NU_TYPE_Q8_0: return 7;
    case NU_TYPE_Q5_0: return 8;
    case NU_TYPE_Q5_1: return 9;
    case NU_TYPE_BF16: return 32;
    default: return -1;
    }
}

/* The type a tensor gets: matrices whose rows fit the block size take the
 * requested type; the output projection of a 4/5-bit file gets Q8_0 (it
 * decides every logit, so it keeps more precision); vectors stay as they are
 * when F32. */
static uint32_t target_type(const gguf_tensor *t, uint32_t want) {
    const nu_type_traits *tt = nu_type_get(want);
    bool matrix = t->n_dims >= 2 && t->ne[1] > 1;
    if (!matrix || !nu_type_get(t->type)->computable) return t->type;
    if (t->ne[0] % tt->block_size) return t->type == NU_TYPE_F32 ? NU_TYPE_F32 : NU_TYPE_F16;
    bool low_bits = want == NU_TYPE_Q4_0 || want == NU_TYPE_Q4_1 || want == NU_TYPE_Q5_0 ||
                    want == NU_TYPE_Q5_1;
    if (low_bits && gguf_str_eq(t->name, "output.weight")) return NU_TYPE_Q8_0;
    return want;
}

/* ---- writing GGUF --------------------------------------------------------- */

typedef struct writer {
    FILE *f;
    bool failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (!w->failed && n && fwrite(p, 1, n, w->f) != n) w->failed = true;
}
static void put_u32(writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(writer *w, gguf_string s) {
    put_u64(w, s.len);
    put(w, s.data, s.len);
}

/* A value's payload (not its type), recursively for arrays. */
static void put_value(writer *w, const gguf_value *v) {
    switch (v->type) {
    case GGUF_UINT8: case GGUF_BOOL: { uint8_t x = (uint8_t)v->v.u; put(w, &x, 1); break; }
    case GGUF_INT8: { int8_t x = (int8_t)v->v.i; put(w, &x, 1); break; }
    case GGUF_UINT16: { uint16_t x = (uint16_t)v->v.u; put(w, &x, 2); break; }
    case GGUF_INT16: { int16_t x = (int16_t)v->v.i; put(w, &x, 2); break; }
    case GGUF_UINT32: put_u32(w, (uint32_t)v->v.u); break;
    case GGUF_INT32: { int32_t x = (int32_t)v->v.i; put(w, &x, 4); break; }
    case GGUF_FLOAT32: { float x = (float)v->v.f; put(w, &x, 4); break; }
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
    gguf_string k = {key, strlen(key)};
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
static uint64_t write_header(writer *w, const gguf_file *in, const uint32_t *types,
                             uint32_t file_type) {
    uint64_t n_kv = in->n_kv + (gguf_find(in, "general.file_type") ? 0 : 1);
    put(w, "GGUF", 4);
    put_u32(w, 3);
    put_u64(w, in->n_tensors);
    put_u64(w, n_kv);
    for (uint64_t i = 0; i < in->n_kv; i++) {
        if (gguf_str_eq(in->kv[i].key, "general.file_type")) continue;
        put_str(w, in->kv[i].key);
        put_u32(w, in->kv[i].value.type);
        put_value(w, &in->kv[i].value);
    }
    put_kv(w, "general.file_type", GGUF_UINT32, &file_type, 4);
    uint64_t offset = 0;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const gguf_tensor *t = &in->tensors[i];
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

/* Converts one tensor row by row through floats. */
static void write_tensor(writer *w, const gguf_tensor *t, uint32_t type, float *row, void *out) {
    uint64_t n = (uint64_t)t->ne[0], rows = t->n_elements / n;
    size_t in_bytes = (size_t)nu_type_row_bytes(t->type, n);
    size_t out_bytes = (size_t)nu_type_row_bytes(type, n);
    for (uint64_t r = 0; r < rows && !w->failed; r++) {
        const char *src = (const char *)t->data + r * in_bytes;
        if (type == t->type) {
            put(w, src, in_bytes);
            continue;
        }
        nu_dequantize_row(t->type, src, row, (int64_t)n);
        nu_quantize_row(type, row, out, (int64_t)n);
        put(w, out, out_bytes);
    }
}

static nu_status plan_types(const gguf_file *in, uint32_t want, uint32_t **types, nu_error *err) {
    *types = malloc((size_t)(in->n_tensors + 1) * sizeof **types);
    if (!*types) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const gguf_tensor *t = &in->tensors[i];
        bool known = nu_type_get(t->type)->computable || t->n_dims == 1;
        if (!known)
            return nu_fail(err, NU_ERR_UNSUPPORTED, "tensor '%.*s' has type %s, which nucleus "
                           "cannot convert", (int)t->name.len, t->name.data,
                           nu_type_get(t->type)->name);
        (*types)[i] = target_type(t, want);
    }
    return NU_OK;
}

static nu_status write_all(const gguf_file *in, const char *tmp, const uint32_t *types,
                           uint32_t want, nu_error *err) {
    int64_t widest = 1;
    for (uint64_t i = 0; i < in->n_tensors; i++)
        if (in->tensors[i].ne[0] > widest) widest = in->tensors[i].ne[0];
    float *row = malloc((size_t)widest * sizeof(float));
    void *out = malloc((size_t)widest * sizeof(float) + 64);
    writer w = {fopen(tmp, "wb"), false};
    if (!row || !out || !w.f) {
        free(row), free(out);
        if (w.f) fclose(w.f);
        return nu_fail(err, NU_ERR_IO, "cannot write %s", tmp);
    }
    uint64_t pos = write_header(&w, in, types, (uint32_t)file_type_of(want));
    pad_to(&w, &pos, in->alignment);
    for (uint64_t i = 0; i < in->n_tensors && !w.failed; i++) {
        const gguf_tensor *t = &in->tensors[i];
        write_tensor(&w, t, types[i], row, out);
        pos += nu_type_row_bytes(types[i], (uint64_t)t->ne[0]) * (t->n_elements / (uint64_t)t->ne[0]);
        pad_to(&w, &pos, in->alignment);
    }
    free(row);
    free(out);
    if (fclose(w.f) != 0) w.failed = true;
    return w.failed ? nu_fail(err, NU_ERR_IO, "writing %s failed (disk full?)", tmp) : NU_OK;
}

nu_status nu_quantize_file(const char *in_path, const char *out_path, const char *type_name,
                           nu_error *err) {
    uint32_t want = NU_TYPE_COUNT;
    for (uint32_t t = 0; t < NU_TYPE_COUNT; t++) {
        const nu_type_traits *tt = nu_type_get(t);
        if (tt->name && tt->computable && strcmp(tt->name, type_name) == 0) want = t;
    }
    if (want == NU_TYPE_COUNT || file_type_of(want) < 0)
        return nu_fail(err, NU_ERR_INVALID_ARG, "unknown target type '%s' (f32, f16, bf16, q8_0, "
                       "q5_1, q5_0, q4_1, q4_0)", type_name);
    nu_kernels_init();
    gguf_file *in;
    nu_status st = gguf_open(in_path, &in, err);
    if (st) return st;
    uint32_t *types = NULL;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    st = plan_types(in, want, &types, err);
    if (st == NU_OK) st = write_all(in, tmp, types, want, err);
    if (st == NU_OK && rename(tmp, out_path) != 0)
        st = nu_fail(err, NU_ERR_IO, "cannot rename %s to %s", tmp, out_path);
    if (st) unlink(tmp);
    free(types);
    gguf_close(in);
    return st;
}
