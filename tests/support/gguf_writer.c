/* gguf_writer.c - a small in-memory GGUF writer for tests (see gguf_writer.h).
 *
 * Keys are encoded as they are added into one growing byte buffer; tensors
 * are kept in a list and laid out only when the image is emitted, because
 * the alignment (and so every data offset) may still change until then. */
#include "gguf_writer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_type.h"

#define GW_MAX_DEPTH 16

/* A growable byte buffer. */
typedef struct gw_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} gw_buf;

/* One tensor as the caller described it. */
typedef struct gw_tensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[8];
    uint8_t *data;    /* NULL for gw_add_tensor_info */
    uint64_t n_bytes; /* of data */
    uint64_t offset;  /* given (raw infos) or assigned when emitting */
    bool raw;
} gw_tensor;

/* An array being filled: where its count goes and what it holds. */
typedef struct gw_open_array {
    size_t count_at;
    nu_gguf_value_type elem_type;
    uint64_t n;
} gw_open_array;

struct gw_writer {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    gw_buf kv; /* encoded key-value pairs */
    gw_tensor *tensors;
    size_t n_tensors;
    size_t cap_tensors;
    gw_open_array stack[GW_MAX_DEPTH];
    int depth;
    char error[256]; /* first misuse, "" if none */
};

/* Aborts: running out of memory in a test helper is not worth handling. */
static void *gw_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "gguf_writer: out of memory\n");
        abort();
    }
    return q;
}

static void buf_put(gw_buf *b, const void *p, size_t n) {
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) cap *= 2;
        b->data = gw_xrealloc(b->data, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* Little-endian integers whatever the host. */
static void put_le(gw_buf *b, uint64_t v, int bytes) {
    uint8_t tmp[8];
    for (int i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    buf_put(b, tmp, (size_t)bytes);
}

static void put_string(gw_buf *b, const char *s, uint64_t len) {
    put_le(b, len, 8);
    buf_put(b, s, (size_t)len);
}

/* Records the first misuse; emitting then fails. */
static void misuse(gw_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void misuse(gw_writer *w, const char *fmt, ...) {
    if (w->error[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->error, sizeof w->error, fmt, ap);
    va_end(ap);
}

gw_writer *gw_new(void) {
    gw_writer *w = gw_xrealloc(NULL, sizeof *w);
    memset(w, 0, sizeof *w);
    w->version = 3;
    w->alignment = 32;
    return w;
}

void gw_free(gw_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w->kv.data);
    free(w);
}

void gw_set_version(gw_writer *w, uint32_t version) {
    w->version = version;
}

void gw_set_alignment(gw_writer *w, uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)))
        misuse(w, "gw_set_alignment(%u): not a power of two (use gw_add_u32 for bad values)",
               alignment);
    else
        w->alignment = alignment;
    gw_add_u32(w, "general.alignment", alignment);
}

/* Starts a value of the given type: at top level writes the key and type;
 * inside an array checks the type matches and counts the item. */
static bool begin_value(gw_writer *w, const char *key, nu_gguf_value_type type) {
    if (w->depth == 0) {
        if (!key) {
            misuse(w, "a value without a key outside any array");
            return false;
        }
        put_string(&w->kv, key, strlen(key));
        put_le(&w->kv, (uint32_t)type, 4);
        w->n_kv++;
        return true;
    }
    gw_open_array *a = &w->stack[w->depth - 1];
    if (key) {
        misuse(w, "key '%s' given inside an open array (items take key NULL)", key);
        return false;
    }
    if (a->elem_type != type) {
        misuse(w, "a %s item in an array of %s", nu_gguf_type_name(type),
               nu_gguf_type_name(a->elem_type));
        return false;
    }
    a->n++;
    return true;
}

/* A fixed-width scalar: key/type or item bookkeeping, then the bytes. */
static void add_scalar(gw_writer *w, const char *key, nu_gguf_value_type type, uint64_t bits,
                       int bytes) {
    if (begin_value(w, key, type)) put_le(&w->kv, bits, bytes);
}

void gw_add_u8(gw_writer *w, const char *key, uint8_t v) {
    add_scalar(w, key, GGUF_UINT8, v, 1);
}

void gw_add_i8(gw_writer *w, const char *key, int8_t v) {
    add_scalar(w, key, GGUF_INT8, (uint64_t)(int64_t)v, 1);
}

void gw_add_u16(gw_writer *w, const char *key, uint16_t v) {
    add_scalar(w, key, GGUF_UINT16, v, 2);
}

void gw_add_i16(gw_writer *w, const char *key, int16_t v) {
    add_scalar(w, key, GGUF_INT16, (uint64_t)(int64_t)v, 2);
}

void gw_add_u32(gw_writer *w, const char *key, uint32_t v) {
    add_scalar(w, key, GGUF_UINT32, v, 4);
}

void gw_add_i32(gw_writer *w, const char *key, int32_t v) {
    add_scalar(w, key, GGUF_INT32, (uint64_t)(int64_t)v, 4);
}

void gw_add_f32(gw_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    add_scalar(w, key, GGUF_FLOAT32, bits, 4);
}

void gw_add_bool(gw_writer *w, const char *key, bool v) {
    add_scalar(w, key, GGUF_BOOL, v ? 1 : 0, 1);
}

void gw_add_u64(gw_writer *w, const char *key, uint64_t v) {
    add_scalar(w, key, GGUF_UINT64, v, 8);
}

void gw_add_i64(gw_writer *w, const char *key, int64_t v) {
    add_scalar(w, key, GGUF_INT64, (uint64_t)v, 8);
}

void gw_add_f64(gw_writer *w, const char *key, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    add_scalar(w, key, GGUF_FLOAT64, bits, 8);
}

void gw_add_str(gw_writer *w, const char *key, const char *s) {
    gw_add_strn(w, key, s, strlen(s));
}

void gw_add_strn(gw_writer *w, const char *key, const char *s, uint64_t len) {
    if (begin_value(w, key, GGUF_STRING)) put_string(&w->kv, s, len);
}

void gw_begin_arr(gw_writer *w, const char *key, nu_gguf_value_type elem_type) {
    if (w->depth >= GW_MAX_DEPTH) {
        misuse(w, "arrays nested deeper than %d", GW_MAX_DEPTH);
        return;
    }
    if (!begin_value(w, key, GGUF_ARRAY)) return;
    put_le(&w->kv, (uint32_t)elem_type, 4);
    gw_open_array *a = &w->stack[w->depth++];
    a->count_at = w->kv.len;
    a->elem_type = elem_type;
    a->n = 0;
    put_le(&w->kv, 0, 8); /* the count, filled in by gw_end_arr */
}

void gw_end_arr(gw_writer *w) {
    if (w->depth == 0) {
        misuse(w, "gw_end_arr without gw_begin_arr");
        return;
    }
    gw_open_array *a = &w->stack[--w->depth];
    gw_patch_u64(w->kv.data, a->count_at, a->n);
}

/* Appends item i of a C array as an item of the open array. */
static void add_item(gw_writer *w, nu_gguf_value_type t, const void *items, uint64_t i) {
    switch (t) {
    case GGUF_UINT8: gw_add_u8(w, NULL, ((const uint8_t *)items)[i]); break;
    case GGUF_INT8: gw_add_i8(w, NULL, ((const int8_t *)items)[i]); break;
    case GGUF_UINT16: gw_add_u16(w, NULL, ((const uint16_t *)items)[i]); break;
    case GGUF_INT16: gw_add_i16(w, NULL, ((const int16_t *)items)[i]); break;
    case GGUF_UINT32: gw_add_u32(w, NULL, ((const uint32_t *)items)[i]); break;
    case GGUF_INT32: gw_add_i32(w, NULL, ((const int32_t *)items)[i]); break;
    case GGUF_FLOAT32: gw_add_f32(w, NULL, ((const float *)items)[i]); break;
    case GGUF_BOOL: gw_add_bool(w, NULL, ((const bool *)items)[i]); break;
    case GGUF_STRING: gw_add_str(w, NULL, ((const char *const *)items)[i]); break;
    case GGUF_UINT64: gw_add_u64(w, NULL, ((const uint64_t *)items)[i]); break;
    case GGUF_INT64: gw_add_i64(w, NULL, ((const int64_t *)items)[i]); break;
    case GGUF_FLOAT64: gw_add_f64(w, NULL, ((const double *)items)[i]); break;
    default: misuse(w, "gw_add_arr cannot take element type %d", (int)t); break;
    }
}

void gw_add_arr(gw_writer *w, const char *key, nu_gguf_value_type elem_type, const void *items,
                uint64_t n) {
    if (elem_type == GGUF_ARRAY || (unsigned)elem_type >= GGUF_TYPE_COUNT) {
        misuse(w, "gw_add_arr cannot take element type %d (use gw_begin_arr)", (int)elem_type);
        return;
    }
    int depth = w->depth;
    gw_begin_arr(w, key, elem_type);
    if (w->depth != depth + 1) return; /* refused; already recorded */
    for (uint64_t i = 0; i < n; i++) add_item(w, elem_type, items, i);
    gw_end_arr(w);
}

void gw_add_raw(gw_writer *w, const char *key, uint32_t type, const void *bytes, size_t len) {
    if (w->depth != 0 || !key) {
        misuse(w, "gw_add_raw needs a key and no open array");
        return;
    }
    put_string(&w->kv, key, strlen(key));
    put_le(&w->kv, type, 4);
    buf_put(&w->kv, bytes, len);
    w->n_kv++;
}

/* Appends a tensor record (name copied). */
static gw_tensor *push_tensor(gw_writer *w, const char *name) {
    if (w->n_tensors == w->cap_tensors) {
        w->cap_tensors = w->cap_tensors ? 2 * w->cap_tensors : 8;
        w->tensors = gw_xrealloc(w->tensors, w->cap_tensors * sizeof *w->tensors);
    }
    gw_tensor *t = &w->tensors[w->n_tensors++];
    memset(t, 0, sizeof *t);
    size_t len = strlen(name);
    t->name = gw_xrealloc(NULL, len + 1);
    memcpy(t->name, name, len + 1);
    return t;
}

void gw_add_tensor(gw_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const int64_t *ne, const void *data) {
    if (n_dims < 1 || n_dims > 4) {
        misuse(w, "gw_add_tensor '%s': n_dims %u (use gw_add_tensor_info)", name, n_dims);
        return;
    }
    uint64_t rows = 1;
    for (uint32_t d = 1; d < n_dims; d++) rows *= (uint64_t)ne[d];
    uint64_t row_bytes = nu_type_row_bytes(type, (uint64_t)ne[0]);
    if (row_bytes == 0) {
        misuse(w, "gw_add_tensor '%s': type %u cannot hold rows of %lld", name, type,
               (long long)ne[0]);
        return;
    }
    gw_tensor *t = push_tensor(w, name);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->ne[d] = (uint64_t)ne[d];
    t->n_bytes = row_bytes * rows;
    t->data = gw_xrealloc(NULL, (size_t)t->n_bytes);
    if (data)
        memcpy(t->data, data, (size_t)t->n_bytes);
    else
        memset(t->data, 0, (size_t)t->n_bytes);
}

void gw_add_tensor_info(gw_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *ne, uint64_t offset) {
    if (n_dims > 8) {
        misuse(w, "gw_add_tensor_info '%s': at most 8 dims", name);
        return;
    }
    gw_tensor *t = push_tensor(w, name);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->ne[d] = ne[d];
    t->offset = offset;
    t->raw = true;
}

uint64_t gw_next_kv_offset(const gw_writer *w) {
    return GW_OFFSET_FIRST_KV + w->kv.len;
}

const char *gw_error(const gw_writer *w) {
    return w->error[0] ? w->error : NULL;
}

/* Gives each tensor with data its aligned offset in the data section. */
static void layout_data(gw_writer *w) {
    uint64_t at = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        gw_tensor *t = &w->tensors[i];
        if (t->raw) continue;
        at = (at + w->alignment - 1) / w->alignment * w->alignment;
        t->offset = at;
        at += t->n_bytes;
    }
}

/* Header, keys and tensor infos. */
static void emit_header(const gw_writer *w, gw_buf *out) {
    put_le(out, 0x46554747u, 4); /* "GGUF" */
    put_le(out, w->version, 4);
    put_le(out, w->n_tensors, 8);
    put_le(out, w->n_kv, 8);
    buf_put(out, w->kv.data, w->kv.len);
    for (size_t i = 0; i < w->n_tensors; i++) {
        const gw_tensor *t = &w->tensors[i];
        put_string(out, t->name, strlen(t->name));
        put_le(out, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) put_le(out, t->ne[d], 8);
        put_le(out, t->type, 4);
        put_le(out, t->offset, 8);
    }
}

bool gw_emit(gw_writer *w, uint8_t **out, size_t *len) {
    if (!w->error[0] && w->depth != 0) misuse(w, "%d array(s) still open", w->depth);
    if (w->error[0]) return false;
    layout_data(w);
    gw_buf b = {0};
    emit_header(w, &b);
    if (w->n_tensors > 0) {
        static const uint8_t zeros[256];
        size_t start = (b.len + w->alignment - 1) / w->alignment * w->alignment;
        while (b.len < start) {
            size_t n = start - b.len < sizeof zeros ? start - b.len : sizeof zeros;
            buf_put(&b, zeros, n);
        }
        for (size_t i = 0; i < w->n_tensors; i++) {
            const gw_tensor *t = &w->tensors[i];
            if (t->raw) continue;
            while (b.len < start + t->offset) {
                size_t gap = start + (size_t)t->offset - b.len;
                buf_put(&b, zeros, gap < sizeof zeros ? gap : sizeof zeros);
            }
            buf_put(&b, t->data, (size_t)t->n_bytes);
        }
    }
    *out = b.data ? b.data : gw_xrealloc(NULL, 1);
    *len = b.len;
    return true;
}

bool gw_write_file(gw_writer *w, const char *path) {
    uint8_t *bytes;
    size_t len;
    if (!gw_emit(w, &bytes, &len)) return false;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(bytes, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = false;
    free(bytes);
    return ok;
}

void gw_patch_u32(uint8_t *image, uint64_t offset, uint32_t v) {
    for (int i = 0; i < 4; i++) image[offset + (uint64_t)i] = (uint8_t)(v >> (8 * i));
}

void gw_patch_u64(uint8_t *image, uint64_t offset, uint64_t v) {
    for (int i = 0; i < 8; i++) image[offset + (uint64_t)i] = (uint8_t)(v >> (8 * i));
}
