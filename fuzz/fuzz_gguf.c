/* fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Parses the input with nu_gguf_open_memory. A rejected input must come back
 * as a format error with a one-line message and no file; an accepted one
 * must keep every promise gguf.h makes (strings, arrays and tensor data
 * inside the buffer, tensor data aligned, lookups finding what the tables
 * hold), which we check by touching every byte the tables point at. Any
 * broken promise aborts, which libFuzzer reports as a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tensor_type.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink; /* keeps the reads below from being optimised away */

/* The input buffer, for range checks. */
static const uint8_t *input;
static size_t input_size;

/* Aborts unless [p, p + n) lies inside the input. */
static void check_inside(const void *p, uint64_t n) {
    const uint8_t *b = p;
    if (n == 0) return;
    if (b < input || b > input + input_size || n > (uint64_t)(input + input_size - b)) abort();
}

/* Reads every byte of a region (ASan catches anything outside the buffer). */
static void touch(const void *p, uint64_t n) {
    check_inside(p, n);
    const uint8_t *b = p;
    uint8_t acc = 0;
    for (uint64_t i = 0; i < n; i++) acc ^= b[i];
    sink ^= acc;
}

/* Walks a value and everything under it. */
static void touch_value(const nu_gguf_value *v, int depth) {
    if (depth > 64 || (unsigned)v->type >= GGUF_TYPE_COUNT) abort();
    if (v->type == GGUF_BOOL && v->v.u > 1) abort();
    if (v->type == GGUF_STRING) touch(v->v.s.data, v->v.s.len);
    if (v->type != GGUF_ARRAY) return;
    if (v->v.arr.n > 0 && !v->v.arr.items) abort();
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        if (v->v.arr.items[i].type != v->v.arr.elem_type) abort();
        touch_value(&v->v.arr.items[i], depth + 1);
    }
    if (v->v.arr.raw) {
        static const uint8_t width[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        touch(v->v.arr.raw, v->v.arr.n * width[v->v.arr.elem_type]);
    }
}

/* Looks a name up as a C string; names with NUL bytes cannot be looked up. */
static bool as_c_string(nu_gguf_string s, char *buf, size_t cap) {
    if (s.len >= cap || memchr(s.data, 0, s.len)) return false;
    memcpy(buf, s.data, s.len);
    buf[s.len] = 0;
    return true;
}

/* Every key: its bytes, its value, and nu_gguf_find returning it. */
static void touch_kvs(const nu_gguf_file *f) {
    static char name[65536 + 1];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const nu_gguf_kv *kv = &f->kv[i];
        touch(kv->key.data, kv->key.len);
        touch_value(&kv->value, 0);
        if (as_c_string(kv->key, name, sizeof name) && nu_gguf_find(f, name) != &kv->value) abort();
    }
    uint32_t u32;
    uint64_t u64;
    int32_t i32;
    float f32;
    bool b;
    nu_gguf_string s;
    if (f->n_kv > 0 && as_c_string(f->kv[0].key, name, sizeof name)) {
        sink ^= (uint8_t)(nu_gguf_get_u32(f, name, &u32) + nu_gguf_get_u64(f, name, &u64) +
                          nu_gguf_get_i32(f, name, &i32) + nu_gguf_get_f32(f, name, &f32) +
                          nu_gguf_get_bool(f, name, &b) + nu_gguf_get_str(f, name, &s));
    }
}

/* Every tensor: shape and size consistent, data inside and aligned. */
static void touch_tensors(const nu_gguf_file *f) {
    static char name[4096];
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const nu_gguf_tensor *t = &f->tensors[i];
        touch(t->name.data, t->name.len);
        if (t->n_dims < 1 || t->n_dims > 4 || !nu_type_get(t->type)->name) abort();
        uint64_t n = 1;
        for (int d = 0; d < 4; d++) {
            if (t->ne[d] < 1) abort();
            n *= (uint64_t)t->ne[d];
        }
        if (n != t->n_elements || t->n_bytes == 0) abort();
        if (((const uint8_t *)t->data - f->base) % f->alignment != 0) abort();
        touch(t->data, t->n_bytes);
        if (as_c_string(t->name, name, sizeof name) && nu_gguf_find_tensor(f, name) != t) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input = data;
    input_size = size;
    static nu_gguf_file poison;
    nu_gguf_file *f = &poison; /* nu_gguf_open_memory must set it to NULL on failure */
    nu_error err = {0};
    nu_status st = nu_gguf_open_memory(data, size, &f, &err);
    if (st != NU_OK) {
        if (f != NULL || err.status != st || err.message[0] == 0) abort();
        if (st != NU_ERR_FORMAT && st != NU_ERR_NOMEM) abort();
        if (strchr(err.message, '\n')) abort();
        return 0;
    }
    if (f->base != data || f->size != size || f->alignment == 0) abort();
    if (f->n_tensors > 0 && f->data_offset > size) abort();
    touch_kvs(f);
    touch_tensors(f);
    nu_gguf_close(f);
    return 0;
}
