/* test_gguf.c - the GGUF reader: round trips of every value type through the
 * test writer, tensor layout and alignment, the typed getters, every kind of
 * malformed file (each must fail with NU_ERR_FORMAT and a one-line message,
 * never crash), and the real model and vocabulary files in ../shared. */
#include "test_support.h"

#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "tensor_type.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* An emitted image from a writer (the writer is freed). */
typedef struct image {
    uint8_t *bytes;
    size_t len;
} image;

static image emit(gw_writer *w) {
    image im = {NULL, 0};
    bool ok = gw_emit(w, &im.bytes, &im.len);
    if (!ok) fail_msg("gw_emit: %s", gw_error(w));
    gw_free(w);
    return im;
}

/* Opens an image that must be valid. */
static nu_gguf_file *open_ok(const image *im) {
    nu_gguf_file *f = NULL;
    nu_error err = {0};
    nu_status st = nu_gguf_open_memory(im->bytes, im->len, &f, &err);
    if (st != NU_OK) fail_msg("expected a valid file, got: %s", err.message);
    assert_non_null(f);
    return f;
}

/* Opens the first len bytes of an image (copied to a buffer of exactly that
 * size, so AddressSanitizer sees any read past the end) and expects a format
 * error with a one-line message; returns the message. */
static const char *open_bad_len(const uint8_t *bytes, size_t len) {
    static nu_error err;
    memset(&err, 0, sizeof err);
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len) memcpy(copy, bytes, len);
    nu_gguf_file *f = (nu_gguf_file *)1;
    nu_status st = nu_gguf_open_memory(copy, len, &f, &err);
    free(copy);
    if (st != NU_ERR_FORMAT) {
        nu_gguf_close(st == NU_OK ? f : NULL);
        fail_msg("length %zu: expected a format error, got status %d", len, (int)st);
    }
    assert_null(f);
    assert_int_equal(err.status, NU_ERR_FORMAT);
    assert_true(strlen(err.message) > 10);
    assert_null(strchr(err.message, '\n'));
    return err.message;
}

/* Expects the image to be rejected with a message containing want. */
static void expect_bad(const image *im, const char *want) {
    const char *msg = open_bad_len(im->bytes, im->len);
    if (!strstr(msg, want)) fail_msg("message '%s' lacks '%s'", msg, want);
}

/* A file with one key whose value bytes and type id are given raw. */
static image raw_kv_image(uint32_t type, const void *bytes, size_t len) {
    gw_writer *w = gw_new();
    gw_add_u32(w, "first", 1);
    gw_add_raw(w, "bad", type, bytes, len);
    return emit(w);
}

/* Every value type, nested arrays and three tensors: the file the
 * truncation and mutation tests cut up. */
static image rich_image(void) {
    gw_writer *w = gw_new();
    gw_add_str(w, "general.architecture", "llama");
    gw_add_u8(w, "u8", 200);
    gw_add_i8(w, "i8", -100);
    gw_add_u16(w, "u16", 60000);
    gw_add_i16(w, "i16", -30000);
    gw_add_u32(w, "u32", 4000000000u);
    gw_add_i32(w, "i32", -2000000000);
    gw_add_f32(w, "f32", 0.25f);
    gw_add_bool(w, "bool", true);
    gw_add_u64(w, "u64", UINT64_MAX);
    gw_add_i64(w, "i64", INT64_MIN);
    gw_add_f64(w, "f64", -1e300);
    const char *toks[] = {"<unk>", "", "hello"};
    gw_add_arr(w, "tokens", GGUF_STRING, toks, 3);
    gw_add_arr(w, "scores", GGUF_FLOAT32, (float[]){0, -1, -2}, 3);
    gw_add_arr(w, "flags", GGUF_BOOL, (bool[]){true, false}, 2);
    gw_begin_arr(w, "nested", GGUF_ARRAY);
    gw_add_arr(w, NULL, GGUF_UINT16, (uint16_t[]){1, 2}, 2);
    gw_begin_arr(w, NULL, GGUF_STRING);
    gw_add_str(w, NULL, "x");
    gw_end_arr(w);
    gw_end_arr(w);
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    gw_add_tensor(w, "a", NU_TYPE_F32, 2, (int64_t[]){4, 2}, a);
    gw_add_tensor(w, "b", NU_TYPE_Q8_0, 1, (int64_t[]){32}, NULL);
    gw_add_tensor(w, "c", NU_TYPE_F16, 3, (int64_t[]){3, 1, 1}, NULL);
    return emit(w);
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                              */
/* ------------------------------------------------------------------------ */

/* Every scalar type at its extremes, plus strings, in file order. */
static void test_scalars_round_trip(void **state) {
    gw_writer *w = gw_new();
    gw_add_u8(w, "u8", 255);
    gw_add_i8(w, "i8", -128);
    gw_add_u16(w, "u16", 65535);
    gw_add_i16(w, "i16", -32768);
    gw_add_u32(w, "u32", UINT32_MAX);
    gw_add_i32(w, "i32", INT32_MIN);
    gw_add_f32(w, "f32", 1.5f);
    gw_add_bool(w, "yes", true);
    gw_add_bool(w, "no", false);
    gw_add_u64(w, "u64", UINT64_MAX);
    gw_add_i64(w, "i64", INT64_MIN);
    gw_add_f64(w, "f64", -2.25e300);
    gw_add_str(w, "str", "hello");
    gw_add_str(w, "empty", "");
    gw_add_strn(w, "nul", "a\0b", 3);
    image im = emit(w);
    nu_gguf_file *f = open_ok(&im);

    assert_int_equal(f->version, 3);
    assert_int_equal(f->n_kv, 15);
    assert_int_equal(f->n_tensors, 0);
    assert_true(nu_gguf_str_eq(f->kv[0].key, "u8"));
    assert_true(nu_gguf_str_eq(f->kv[14].key, "nul"));
    assert_int_equal(nu_gguf_find(f, "u8")->type, GGUF_UINT8);
    assert_int_equal(nu_gguf_find(f, "u8")->v.u, 255);
    assert_int_equal(nu_gguf_find(f, "i8")->v.i, -128);
    assert_int_equal(nu_gguf_find(f, "u16")->v.u, 65535);
    assert_int_equal(nu_gguf_find(f, "i16")->v.i, -32768);
    assert_int_equal(nu_gguf_find(f, "u32")->v.u, UINT32_MAX);
    assert_int_equal(nu_gguf_find(f, "i32")->v.i, INT32_MIN);
    assert_true(nu_gguf_find(f, "f32")->v.f == 1.5);
    assert_int_equal(nu_gguf_find(f, "yes")->type, GGUF_BOOL);
    assert_int_equal(nu_gguf_find(f, "yes")->v.u, 1);
    assert_int_equal(nu_gguf_find(f, "no")->v.u, 0);
    assert_true(nu_gguf_find(f, "u64")->v.u == UINT64_MAX);
    assert_true(nu_gguf_find(f, "i64")->v.i == INT64_MIN);
    assert_int_equal(nu_gguf_find(f, "i64")->type, GGUF_INT64);
    assert_true(nu_gguf_find(f, "f64")->v.f == -2.25e300);
    assert_int_equal(nu_gguf_find(f, "f64")->type, GGUF_FLOAT64);
    assert_true(nu_gguf_str_eq(nu_gguf_find(f, "str")->v.s, "hello"));
    assert_int_equal(nu_gguf_find(f, "empty")->v.s.len, 0);
    const nu_gguf_value *nul = nu_gguf_find(f, "nul");
    assert_int_equal(nul->v.s.len, 3);
    assert_memory_equal(nul->v.s.data, "a\0b", 3);
    /* Strings point into the caller's buffer: no copy. */
    assert_true((const uint8_t *)nul->v.s.data > im.bytes &&
                (const uint8_t *)nul->v.s.data < im.bytes + im.len);
    nu_gguf_close(f);
    free(im.bytes);
}

/* Flat arrays of every element type; scalar ones expose their raw bytes. */
static void test_arrays_round_trip(void **state) {
    const uint8_t u8[] = {0, 1, 255};
    const int8_t i8[] = {-128, 0, 127};
    const uint16_t u16[] = {0, 65535};
    const int16_t i16[] = {-32768, 32767};
    const uint32_t u32[] = {1, 2, UINT32_MAX};
    const int32_t i32[] = {INT32_MIN, -1, INT32_MAX};
    const float f32[] = {0.5f, -1e30f, 3.0f};
    const bool bools[] = {true, false, true};
    const uint64_t u64[] = {UINT64_MAX, 0};
    const int64_t i64[] = {INT64_MIN, INT64_MAX};
    const double f64[] = {1e-300, -0.0};
    const char *strs[] = {"a", "", "ccc"};
    gw_writer *w = gw_new();
    gw_add_arr(w, "u8", GGUF_UINT8, u8, 3);
    gw_add_arr(w, "i8", GGUF_INT8, i8, 3);
    gw_add_arr(w, "u16", GGUF_UINT16, u16, 2);
    gw_add_arr(w, "i16", GGUF_INT16, i16, 2);
    gw_add_arr(w, "u32", GGUF_UINT32, u32, 3);
    gw_add_arr(w, "i32", GGUF_INT32, i32, 3);
    gw_add_arr(w, "f32", GGUF_FLOAT32, f32, 3);
    gw_add_arr(w, "bool", GGUF_BOOL, bools, 3);
    gw_add_arr(w, "u64", GGUF_UINT64, u64, 2);
    gw_add_arr(w, "i64", GGUF_INT64, i64, 2);
    gw_add_arr(w, "f64", GGUF_FLOAT64, f64, 2);
    gw_add_arr(w, "str", GGUF_STRING, strs, 3);
    gw_add_arr(w, "empty", GGUF_UINT32, NULL, 0);
    image im = emit(w);
    nu_gguf_file *f = open_ok(&im);

    const nu_gguf_value *v = nu_gguf_get_arr(f, "u8", GGUF_UINT8);
    assert_non_null(v);
    assert_int_equal(v->v.arr.n, 3);
    assert_int_equal(v->v.arr.items[2].v.u, 255);
    assert_int_equal(v->v.arr.items[2].type, GGUF_UINT8);
    assert_memory_equal(v->v.arr.raw, u8, sizeof u8);
    assert_int_equal(nu_gguf_get_arr(f, "i8", GGUF_INT8)->v.arr.items[0].v.i, -128);
    assert_int_equal(nu_gguf_get_arr(f, "u16", GGUF_UINT16)->v.arr.items[1].v.u, 65535);
    assert_int_equal(nu_gguf_get_arr(f, "i16", GGUF_INT16)->v.arr.items[0].v.i, -32768);
    assert_int_equal(nu_gguf_get_arr(f, "u32", GGUF_UINT32)->v.arr.items[2].v.u, UINT32_MAX);
    v = nu_gguf_get_arr(f, "i32", GGUF_INT32);
    assert_int_equal(v->v.arr.items[0].v.i, INT32_MIN);
    assert_memory_equal(v->v.arr.raw, i32, sizeof i32); /* the host is little-endian */
    v = nu_gguf_get_arr(f, "f32", GGUF_FLOAT32);
    assert_true(v->v.arr.items[1].v.f == -1e30f);
    assert_memory_equal(v->v.arr.raw, f32, sizeof f32);
    v = nu_gguf_get_arr(f, "bool", GGUF_BOOL);
    assert_int_equal(v->v.arr.items[0].v.u, 1);
    assert_int_equal(v->v.arr.items[1].v.u, 0);
    assert_non_null(v->v.arr.raw);
    assert_true(nu_gguf_get_arr(f, "u64", GGUF_UINT64)->v.arr.items[0].v.u == UINT64_MAX);
    assert_true(nu_gguf_get_arr(f, "i64", GGUF_INT64)->v.arr.items[0].v.i == INT64_MIN);
    assert_true(nu_gguf_get_arr(f, "i64", GGUF_INT64)->v.arr.items[1].v.i == INT64_MAX);
    v = nu_gguf_get_arr(f, "f64", GGUF_FLOAT64);
    assert_true(v->v.arr.items[0].v.f == 1e-300);
    assert_true(signbit(v->v.arr.items[1].v.f));
    v = nu_gguf_get_arr(f, "str", GGUF_STRING);
    assert_int_equal(v->v.arr.n, 3);
    assert_null(v->v.arr.raw);
    assert_true(nu_gguf_str_eq(v->v.arr.items[0].v.s, "a"));
    assert_true(nu_gguf_str_eq(v->v.arr.items[1].v.s, ""));
    assert_true(nu_gguf_str_eq(v->v.arr.items[2].v.s, "ccc"));
    v = nu_gguf_get_arr(f, "empty", GGUF_UINT32);
    assert_int_equal(v->v.arr.n, 0);
    /* The element type must match. */
    assert_null(nu_gguf_get_arr(f, "u8", GGUF_INT8));
    assert_null(nu_gguf_get_arr(f, "missing", GGUF_INT8));
    nu_gguf_close(f);
    free(im.bytes);
}

/* Arrays of arrays, three levels deep, with empty inner arrays. */
static void test_nested_arrays(void **state) {
    gw_writer *w = gw_new();
    gw_begin_arr(w, "merges_like", GGUF_ARRAY);
    gw_add_arr(w, NULL, GGUF_UINT32, (uint32_t[]){7, 8}, 2);
    gw_add_arr(w, NULL, GGUF_STRING, (const char *[]){"p", "q", "r"}, 3);
    gw_add_arr(w, NULL, GGUF_INT8, NULL, 0);
    gw_begin_arr(w, NULL, GGUF_ARRAY);
    gw_add_arr(w, NULL, GGUF_FLOAT64, (double[]){2.5}, 1);
    gw_end_arr(w);
    gw_end_arr(w);
    gw_begin_arr(w, "empty_outer", GGUF_ARRAY);
    gw_end_arr(w);
    gw_add_u8(w, "after", 9);
    image im = emit(w);
    nu_gguf_file *f = open_ok(&im);

    const nu_gguf_value *v = nu_gguf_get_arr(f, "merges_like", GGUF_ARRAY);
    assert_non_null(v);
    assert_null(v->v.arr.raw);
    assert_int_equal(v->v.arr.n, 4);
    const nu_gguf_value *it = v->v.arr.items;
    assert_int_equal(it[0].type, GGUF_ARRAY);
    assert_int_equal(it[0].v.arr.elem_type, GGUF_UINT32);
    assert_int_equal(it[0].v.arr.n, 2);
    assert_int_equal(it[0].v.arr.items[1].v.u, 8);
    assert_int_equal(it[1].v.arr.elem_type, GGUF_STRING);
    assert_true(nu_gguf_str_eq(it[1].v.arr.items[2].v.s, "r"));
    assert_int_equal(it[2].v.arr.elem_type, GGUF_INT8);
    assert_int_equal(it[2].v.arr.n, 0);
    assert_int_equal(it[3].v.arr.elem_type, GGUF_ARRAY);
    assert_int_equal(it[3].v.arr.n, 1);
    const nu_gguf_value *deep = &it[3].v.arr.items[0];
    assert_int_equal(deep->v.arr.elem_type, GGUF_FLOAT64);
    assert_true(deep->v.arr.items[0].v.f == 2.5);
    assert_int_equal(nu_gguf_get_arr(f, "empty_outer", GGUF_ARRAY)->v.arr.n, 0);
    assert_int_equal(nu_gguf_find(f, "after")->v.u, 9);
    nu_gguf_close(f);
    free(im.bytes);
}

/* Versions 2 and 3 share the layout and both load. */
static void test_versions_2_and_3(void **state) {
    for (uint32_t version = 2; version <= 3; version++) {
        gw_writer *w = gw_new();
        gw_set_version(w, version);
        gw_add_str(w, "general.name", "v");
        gw_add_tensor(w, "t", NU_TYPE_F32, 1, (int64_t[]){4}, (float[]){1, 2, 3, 4});
        image im = emit(w);
        nu_gguf_file *f = open_ok(&im);
        assert_int_equal(f->version, version);
        assert_int_equal(f->n_tensors, 1);
        assert_true(((const float *)f->tensors[0].data)[3] == 4.0f);
        nu_gguf_close(f);
        free(im.bytes);
    }
}

/* Tensor data lands at aligned offsets with the right bytes, for the
 * default and several custom alignments. */
static void test_alignment_and_tensor_data(void **state) {
    const uint32_t alignments[] = {0 /* default */, 1, 8, 64, 4096};
    float small[3] = {1, 2, 3};
    uint8_t q8[2 * 34];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 7);
    for (size_t k = 0; k < sizeof alignments / sizeof *alignments; k++) {
        gw_writer *w = gw_new();
        gw_add_u32(w, "first", 1);
        if (alignments[k]) gw_set_alignment(w, alignments[k]);
        gw_add_tensor(w, "small", NU_TYPE_F32, 1, (int64_t[]){3}, small);
        gw_add_tensor(w, "blk.0.q8", NU_TYPE_Q8_0, 2, (int64_t[]){32, 2}, q8);
        gw_add_tensor(w, "four_d", NU_TYPE_F16, 4, (int64_t[]){5, 3, 2, 1}, NULL);
        image im = emit(w);
        nu_gguf_file *f = open_ok(&im);
        uint64_t a = alignments[k] ? alignments[k] : 32;
        assert_int_equal(f->alignment, a);
        assert_int_equal(f->data_offset % a, 0);
        assert_true(f->data_offset <= im.len);
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const nu_gguf_tensor *t = &f->tensors[i];
            assert_int_equal(((const uint8_t *)t->data - f->base) % a, 0);
            assert_int_equal(t->offset % a, 0);
            assert_ptr_equal(t->data, f->base + f->data_offset + t->offset);
        }
        const nu_gguf_tensor *t = nu_gguf_find_tensor(f, "small");
        assert_non_null(t);
        assert_int_equal(t->n_dims, 1);
        assert_int_equal(t->ne[0], 3);
        assert_int_equal(t->ne[1], 1);
        assert_int_equal(t->n_elements, 3);
        assert_int_equal(t->n_bytes, 12);
        assert_memory_equal(t->data, small, sizeof small);
        t = nu_gguf_find_tensor(f, "blk.0.q8");
        assert_int_equal(t->type, NU_TYPE_Q8_0);
        assert_int_equal(t->n_bytes, 68);
        assert_int_equal(t->n_elements, 64);
        assert_memory_equal(t->data, q8, sizeof q8);
        t = nu_gguf_find_tensor(f, "four_d");
        assert_int_equal(t->n_dims, 4);
        assert_int_equal(t->ne[0], 5);
        assert_int_equal(t->ne[1], 3);
        assert_int_equal(t->ne[2], 2);
        assert_int_equal(t->ne[3], 1);
        assert_int_equal(t->n_bytes, 5 * 3 * 2 * 2);
        assert_null(nu_gguf_find_tensor(f, "blk.0"));
        assert_null(nu_gguf_find_tensor(f, "smal"));
        nu_gguf_close(f);
        free(im.bytes);
    }
}

/* Many tensors and keys: the hash indexes find every one. */
static void test_many_names(void **state) {
    gw_writer *w = gw_new();
    char name[64];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "key.%d", i);
        gw_add_i32(w, name, -i);
    }
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "blk.%d.weight", i);
        gw_add_tensor(w, name, NU_TYPE_F32, 1, (int64_t[]){1}, (float[]){(float)i});
    }
    image im = emit(w);
    nu_gguf_file *f = open_ok(&im);
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "key.%d", i);
        int32_t v;
        assert_true(nu_gguf_get_i32(f, name, &v));
        assert_int_equal(v, -i);
    }
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "blk.%d.weight", i);
        const nu_gguf_tensor *t = nu_gguf_find_tensor(f, name);
        assert_non_null(t);
        assert_true(*(const float *)t->data == (float)i);
    }
    nu_gguf_close(f);
    free(im.bytes);
}

/* The typed getters convert without loss or refuse. */
static void test_getters(void **state) {
    gw_writer *w = gw_new();
    gw_add_u8(w, "u8", 7);
    gw_add_i64(w, "i64_small", -5);
    gw_add_i64(w, "i64_big", (int64_t)1 << 40);
    gw_add_u64(w, "u64_max", UINT64_MAX);
    gw_add_u32(w, "u32_big", 3000000000u);
    gw_add_i16(w, "i16_pos", 300);
    gw_add_f32(w, "f32", 0.1f);
    gw_add_f64(w, "f64", 0.5);
    gw_add_f64(w, "f64_huge", 1e300);
    gw_add_bool(w, "bool", true);
    gw_add_str(w, "str", "text");
    image im = emit(w);
    nu_gguf_file *f = open_ok(&im);

    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f32;
    bool b;
    nu_gguf_string s;
    assert_true(nu_gguf_get_u32(f, "u8", &u32));
    assert_int_equal(u32, 7);
    assert_true(nu_gguf_get_u32(f, "i16_pos", &u32));
    assert_int_equal(u32, 300);
    assert_false(nu_gguf_get_u32(f, "i64_small", &u32));
    assert_false(nu_gguf_get_u32(f, "i64_big", &u32));
    assert_true(nu_gguf_get_u32(f, "u32_big", &u32));
    assert_false(nu_gguf_get_i32(f, "u32_big", &i32));
    assert_true(nu_gguf_get_i32(f, "i64_small", &i32));
    assert_int_equal(i32, -5);
    assert_false(nu_gguf_get_i32(f, "i64_big", &i32));
    assert_true(nu_gguf_get_u64(f, "u64_max", &u64));
    assert_true(u64 == UINT64_MAX);
    assert_true(nu_gguf_get_u64(f, "i64_big", &u64));
    assert_true(u64 == (uint64_t)1 << 40);
    assert_false(nu_gguf_get_u64(f, "i64_small", &u64));
    assert_false(nu_gguf_get_u32(f, "f32", &u32));
    assert_false(nu_gguf_get_u32(f, "bool", &u32));
    assert_false(nu_gguf_get_u32(f, "str", &u32));
    assert_false(nu_gguf_get_u32(f, "missing", &u32));
    assert_true(nu_gguf_get_f32(f, "f32", &f32));
    assert_true(f32 == 0.1f);
    assert_true(nu_gguf_get_f32(f, "f64", &f32));
    assert_true(f32 == 0.5f);
    assert_false(nu_gguf_get_f32(f, "f64_huge", &f32));
    assert_false(nu_gguf_get_f32(f, "u8", &f32));
    assert_true(nu_gguf_get_bool(f, "bool", &b));
    assert_true(b);
    assert_false(nu_gguf_get_bool(f, "u8", &b));
    assert_true(nu_gguf_get_str(f, "str", &s));
    assert_true(nu_gguf_str_eq(s, "text"));
    assert_false(nu_gguf_get_str(f, "u8", &s));
    assert_null(nu_gguf_find(f, "st"));
    assert_null(nu_gguf_find(f, ""));
    assert_null(nu_gguf_find(NULL, "str"));
    assert_null(nu_gguf_find(f, NULL));
    nu_gguf_close(f);
    free(im.bytes);
}

/* Names and comparisons. */
static void test_names(void **state) {
    const char *want[GGUF_TYPE_COUNT] = {"u8",   "i8",  "u16", "i16", "u32", "i32", "f32",
                                         "bool", "str", "arr", "u64", "i64", "f64"};
    for (int t = 0; t < GGUF_TYPE_COUNT; t++)
        assert_string_equal(nu_gguf_type_name((nu_gguf_value_type)t), want[t]);
    assert_string_equal(nu_gguf_type_name(GGUF_TYPE_COUNT), "?");
    nu_gguf_string s = {"abc", 3};
    assert_true(nu_gguf_str_eq(s, "abc"));
    assert_false(nu_gguf_str_eq(s, "ab"));
    assert_false(nu_gguf_str_eq(s, "abcd"));
    assert_false(nu_gguf_str_eq(s, NULL));
    nu_gguf_string empty = {NULL, 0};
    assert_true(nu_gguf_str_eq(empty, ""));
    nu_gguf_close(NULL); /* allowed */
}

/* nu_gguf_open maps a file; I/O problems are NU_ERR_IO naming the path. */
static void test_open_file(void **state) {
    image im = rich_image();
    const char *path = nu_test_tmp("gguf_rich.gguf");
    char saved[4096];
    snprintf(saved, sizeof saved, "%s", path);
    FILE *out = fopen(saved, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(im.bytes, 1, im.len, out), im.len);
    fclose(out);

    nu_gguf_file *f = NULL;
    nu_error err = {0};
    assert_int_equal(nu_gguf_open(saved, &f, &err), NU_OK);
    assert_true(f->mapped);
    assert_int_equal(f->size, im.len);
    assert_int_equal(f->n_kv, 16);
    assert_int_equal(f->n_tensors, 3);
    assert_true(nu_gguf_str_eq(nu_gguf_find(f, "general.architecture")->v.s, "llama"));
    assert_true(((const float *)nu_gguf_find_tensor(f, "a")->data)[7] == 8.0f);
    nu_gguf_close(f);
    free(im.bytes);

    f = (nu_gguf_file *)1;
    assert_int_equal(nu_gguf_open("/nonexistent/dir/x.gguf", &f, &err), NU_ERR_IO);
    assert_null(f);
    assert_non_null(strstr(err.message, "/nonexistent/dir/x.gguf"));
    assert_int_equal(nu_gguf_open("/tmp", &f, &err), NU_ERR_IO);
    assert_non_null(strstr(err.message, "not a regular file"));

    /* An empty or cut file is a format error, prefixed with the path. */
    snprintf(saved, sizeof saved, "%s", nu_test_tmp("gguf_empty.gguf"));
    out = fopen(saved, "wb");
    assert_non_null(out);
    fclose(out);
    assert_int_equal(nu_gguf_open(saved, &f, &err), NU_ERR_FORMAT);
    assert_non_null(strstr(err.message, saved));
    assert_non_null(strstr(err.message, "truncated"));
    out = fopen(saved, "wb");
    fwrite("GGUF\3\0\0\0", 1, 8, out);
    fclose(out);
    assert_int_equal(nu_gguf_open(saved, &f, &err), NU_ERR_FORMAT);
    assert_null(f);
    remove(saved);

    assert_int_equal(nu_gguf_open_memory(NULL, 5, &f, &err), NU_ERR_INVALID_ARG);
    assert_int_equal(nu_gguf_open_memory("x", 1, NULL, &err), NU_ERR_INVALID_ARG);
    assert_int_equal(nu_gguf_open(NULL, &f, NULL), NU_ERR_INVALID_ARG); /* err may be NULL */
}

/* ------------------------------------------------------------------------ */
/* Malformed files                                                          */
/* ------------------------------------------------------------------------ */

/* Cutting a valid file at every length gives a format error, never a crash
 * or a read past the end. */
static void test_truncated_everywhere(void **state) {
    image im = rich_image();
    nu_gguf_file *f = open_ok(&im);
    nu_gguf_close(f);
    for (size_t len = 0; len < im.len; len++) open_bad_len(im.bytes, len);
    const char *msg = open_bad_len(im.bytes, 2);
    assert_string_equal(msg, "truncated: header needs 4 bytes at byte 0 but the file ends at 2");
    msg = open_bad_len(im.bytes, 30);
    assert_string_equal(msg, "kv count 16 at byte 16 cannot fit in the remaining 6 bytes (a "
                             "key-value pair takes at least 13)");
    msg = open_bad_len(im.bytes, im.len - 1);
    assert_non_null(strstr(msg, "tensor 2 'c': data ends at byte"));
    assert_non_null(strstr(msg, "past the end of the file"));
    free(im.bytes);

    gw_writer *w = gw_new();
    gw_add_u32(w, "k", 5);
    im = emit(w);
    msg = open_bad_len(im.bytes, 39);
    assert_string_equal(msg,
                        "truncated: key 0 'k' needs 4 bytes at byte 37 but the file ends at 39");
    free(im.bytes);
}

/* Flipping random bytes of a valid file: every result is either a valid
 * file (then everything in it is readable) or a format error. */
static void test_random_mutations(void **state) {
    image im = rich_image();
    uint8_t *copy = malloc(im.len);
    assert_non_null(copy);
    uint64_t rng = 0x9E3779B97F4A7C15u;
    int n_ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(copy, im.bytes, im.len);
        int n_flips = 1 + iter % 4;
        for (int k = 0; k < n_flips; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t at = (size_t)(rng % im.len);
            uint8_t b = (uint8_t)(rng >> 32);
            copy[at] = (iter & 1) ? b : (uint8_t)(b & 1 ? 0xff : copy[at] ^ (1u << (b % 8)));
        }
        nu_gguf_file *f = NULL;
        nu_error err = {0};
        nu_status st = nu_gguf_open_memory(copy, im.len, &f, &err);
        if (st == NU_OK) {
            n_ok++;
            uint64_t sum = 0;
            for (uint64_t i = 0; i < f->n_tensors; i++) {
                const uint8_t *d = f->tensors[i].data;
                for (uint64_t j = 0; j < f->tensors[i].n_bytes; j++) sum += d[j];
            }
            (void)sum;
            nu_gguf_close(f);
        } else {
            assert_int_equal(st, NU_ERR_FORMAT);
            assert_null(f);
            assert_null(strchr(err.message, '\n'));
        }
    }
    assert_true(n_ok > 0); /* some flips only touch values or data */
    free(copy);
    free(im.bytes);
}

static void test_bad_magic(void **state) {
    image im = rich_image();
    memcpy(im.bytes, "GGML", 4);
    expect_bad(&im, "bad magic 0x4c4d4747 at byte 0 (not a GGUF file)");
    memcpy(im.bytes, "\0\0\0\0", 4);
    expect_bad(&im, "bad magic 0x00000000 at byte 0");
    free(im.bytes);
}

static void test_bad_versions(void **state) {
    image im = rich_image();
    gw_patch_u32(im.bytes, GW_OFFSET_VERSION, 1);
    expect_bad(&im, "GGUF version 1 at byte 4 is not supported");
    gw_patch_u32(im.bytes, GW_OFFSET_VERSION, 99);
    expect_bad(&im, "unsupported GGUF version 99 at byte 4");
    gw_patch_u32(im.bytes, GW_OFFSET_VERSION, 0);
    expect_bad(&im, "unsupported GGUF version 0");
    gw_patch_u32(im.bytes, GW_OFFSET_VERSION, 0x03000000);
    expect_bad(&im, "big-endian");
    free(im.bytes);
}

/* Huge counts are refused before anything is allocated. */
static void test_absurd_counts(void **state) {
    const uint64_t absurd[] = {(uint64_t)1 << 63, UINT32_MAX, UINT64_MAX, 1000};
    image im = rich_image();
    for (size_t i = 0; i < 4; i++) {
        uint8_t saved[8];
        memcpy(saved, im.bytes + GW_OFFSET_N_KV, 8);
        gw_patch_u64(im.bytes, GW_OFFSET_N_KV, absurd[i]);
        expect_bad(&im, "kv count");
        expect_bad(&im, "cannot fit in the remaining");
        memcpy(im.bytes + GW_OFFSET_N_KV, saved, 8);
        gw_patch_u64(im.bytes, GW_OFFSET_N_TENSORS, absurd[i]);
        expect_bad(&im, "tensor count");
        gw_patch_u64(im.bytes, GW_OFFSET_N_TENSORS, 3);
    }
    free(im.bytes);
}

/* String and array lengths beyond the bytes left. */
static void test_absurd_lengths(void **state) {
    const uint64_t absurd[] = {(uint64_t)1 << 63, UINT32_MAX, UINT64_MAX};
    for (size_t i = 0; i < 3; i++) {
        /* The key's own length. */
        gw_writer *w = gw_new();
        gw_add_str(w, "k", "value");
        image im = emit(w);
        gw_patch_u64(im.bytes, GW_OFFSET_FIRST_KV, absurd[i]);
        expect_bad(&im, "key 0: string of");
        expect_bad(&im, "at byte 24 cannot fit in the remaining");
        /* A string value's length: after key length, "k" and the type. */
        gw_patch_u64(im.bytes, GW_OFFSET_FIRST_KV, 1);
        gw_patch_u64(im.bytes, GW_OFFSET_FIRST_KV + 8 + 1 + 4, absurd[i]);
        expect_bad(&im, "key 0 'k': string of");
        free(im.bytes);

        /* Array counts, for scalar, string and array elements. */
        const nu_gguf_value_type elems[] = {GGUF_UINT8, GGUF_FLOAT64, GGUF_STRING, GGUF_ARRAY};
        for (size_t e = 0; e < 4; e++) {
            w = gw_new();
            if (elems[e] == GGUF_ARRAY) {
                gw_begin_arr(w, "a", GGUF_ARRAY);
                gw_add_arr(w, NULL, GGUF_UINT8, (uint8_t[]){1}, 1);
                gw_end_arr(w);
            } else if (elems[e] == GGUF_STRING) {
                gw_add_arr(w, "a", GGUF_STRING, (const char *[]){"s"}, 1);
            } else {
                gw_add_arr(w, "a", elems[e], (uint64_t[]){1}, 1);
            }
            im = emit(w);
            uint64_t count_at = GW_OFFSET_FIRST_KV + 8 + 1 + 4 + 4;
            gw_patch_u64(im.bytes, count_at, absurd[i]);
            char want[128];
            snprintf(want, sizeof want, "key 0 'a': array of %llu items at byte %llu cannot fit",
                     (unsigned long long)absurd[i], (unsigned long long)count_at);
            expect_bad(&im, want);
            free(im.bytes);
        }
    }
    /* An inner array's count. */
    gw_writer *w = gw_new();
    gw_begin_arr(w, "a", GGUF_ARRAY);
    gw_add_arr(w, NULL, GGUF_UINT32, (uint32_t[]){1, 2}, 2);
    gw_end_arr(w);
    image im = emit(w);
    gw_patch_u64(im.bytes, GW_OFFSET_FIRST_KV + 8 + 1 + 4 + 4 + 8 + 4, UINT32_MAX);
    expect_bad(&im, "key 0 'a' item [0]: array of 4294967295 items");
    free(im.bytes);
}

/* A file with one tensor info given raw; its tensor info starts after
 * key "first". */
static image raw_tensor_image(const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                              uint64_t offset) {
    gw_writer *w = gw_new();
    gw_add_u32(w, "first", 1);
    gw_add_tensor(w, "ok", NU_TYPE_F32, 1, (int64_t[]){8}, NULL);
    gw_add_tensor_info(w, name, type, n_dims, ne, offset);
    return emit(w);
}

static void test_bad_tensor_shapes(void **state) {
    image im = raw_tensor_image("t", NU_TYPE_F32, 0, NULL, 0);
    expect_bad(&im, "tensor 1 't': n_dims 0 at byte");
    free(im.bytes);
    im = raw_tensor_image("t", NU_TYPE_F32, 5, (uint64_t[]){1, 1, 1, 1, 1}, 0);
    expect_bad(&im, "tensor 1 't': n_dims 5 at byte");
    expect_bad(&im, "is not in 1..4");
    free(im.bytes);
    im = raw_tensor_image("t", NU_TYPE_F32, 2, (uint64_t[]){4, 0}, 0);
    expect_bad(&im, "tensor 1 't': dimension 1 at byte");
    expect_bad(&im, "is 0");
    free(im.bytes);
    im = raw_tensor_image("t", NU_TYPE_F32, 3,
                          (uint64_t[]){(uint64_t)1 << 31, (uint64_t)1 << 31, 2}, 0);
    expect_bad(&im, "dimension 2 (2) at byte");
    expect_bad(&im, "more than 2^62 elements");
    free(im.bytes);
    im = raw_tensor_image("t", NU_TYPE_F32, 1, (uint64_t[]){UINT64_MAX}, 0);
    expect_bad(&im, "more than 2^62 elements");
    free(im.bytes);
    /* 2^62 f32 elements: the element count is fine, the byte size is not. */
    im = raw_tensor_image("t", NU_TYPE_F32, 1, (uint64_t[]){(uint64_t)1 << 62}, 0);
    expect_bad(&im, "overflows");
    free(im.bytes);
    im = raw_tensor_image("t", NU_TYPE_F32, 2, (uint64_t[]){(uint64_t)1 << 31, (uint64_t)1 << 31},
                          0);
    expect_bad(&im, "overflows");
    free(im.bytes);
    /* 2^62 one-byte elements: no overflow, but far past the end. */
    im = raw_tensor_image("t", NU_TYPE_I8, 1, (uint64_t[]){(uint64_t)1 << 62}, 0);
    expect_bad(&im, "past the end of the file");
    free(im.bytes);
}

static void test_bad_tensor_types(void **state) {
    const uint32_t unknown[] = {4, 5, 31, 38, 40, 99, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        image im = raw_tensor_image("t", unknown[i], 1, (uint64_t[]){32}, 0);
        char want[64];
        snprintf(want, sizeof want, "tensor 1 't': unknown tensor type %u at byte", unknown[i]);
        expect_bad(&im, want);
        free(im.bytes);
    }
    image im = raw_tensor_image("t", NU_TYPE_Q4_0, 1, (uint64_t[]){33}, 0);
    expect_bad(&im, "row length 33 is not a multiple of the q4_0 block size 32");
    free(im.bytes);
    im = raw_tensor_image("t", NU_TYPE_Q4_K, 2, (uint64_t[]){128, 2}, 0);
    expect_bad(&im, "block size 256");
    free(im.bytes);
}

static void test_bad_tensor_offsets(void **state) {
    /* The valid tensor "ok" (8 f32) occupies [0, 32) of the data section. */
    image im = raw_tensor_image("t", NU_TYPE_F32, 1, (uint64_t[]){8}, 32);
    expect_bad(&im, "tensor 1 't': data ends at byte");
    char want[128];
    snprintf(want, sizeof want, "past the end of the file (%zu bytes)", im.len);
    expect_bad(&im, want);
    free(im.bytes);
    im = raw_tensor_image("t", NU_TYPE_F32, 1, (uint64_t[]){8}, 16);
    expect_bad(&im, "tensor 1 't': offset 16 at byte");
    expect_bad(&im, "is not a multiple of the alignment 32");
    free(im.bytes);
    im = raw_tensor_image("t", NU_TYPE_F32, 1, (uint64_t[]){8}, UINT64_MAX - 31);
    expect_bad(&im, "runs past the end of the file");
    free(im.bytes);
    im = raw_tensor_image("t", NU_TYPE_F32, 1, (uint64_t[]){8}, (uint64_t)1 << 63);
    expect_bad(&im, "past the end of the file");
    free(im.bytes);
    /* Exactly at the end is fine: overlapping the valid tensor is allowed. */
    im = raw_tensor_image("t", NU_TYPE_F32, 1, (uint64_t[]){8}, 0);
    nu_gguf_file *f = open_ok(&im);
    assert_ptr_equal(f->tensors[1].data, f->tensors[0].data);
    nu_gguf_close(f);
    free(im.bytes);
}

static void test_bad_alignment(void **state) {
    const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < 4; i++) {
        gw_writer *w = gw_new();
        gw_add_u32(w, "general.alignment", bad[i]);
        image im = emit(w);
        expect_bad(&im, "key 0 'general.alignment': alignment");
        expect_bad(&im, "is not a nonzero power of two");
        free(im.bytes);
    }
    gw_writer *w = gw_new();
    gw_add_u8(w, "x", 1);
    gw_add_u64(w, "general.alignment", 32);
    image im = emit(w);
    expect_bad(&im, "key 1 'general.alignment': the alignment must be a u32, not a u64");
    free(im.bytes);
    w = gw_new();
    gw_add_str(w, "general.alignment", "32");
    im = emit(w);
    expect_bad(&im, "not a str");
    free(im.bytes);
    /* The largest power of two is accepted. */
    w = gw_new();
    gw_add_u32(w, "general.alignment", 0x80000000u);
    im = emit(w);
    nu_gguf_file *f = open_ok(&im);
    assert_int_equal(f->alignment, 0x80000000u);
    nu_gguf_close(f);
    free(im.bytes);
}

static void test_duplicates(void **state) {
    gw_writer *w = gw_new();
    gw_add_u32(w, "a", 1);
    gw_add_u32(w, "b", 2);
    gw_add_str(w, "a", "again");
    image im = emit(w);
    expect_bad(&im, "key 2 'a': duplicates key 0");
    free(im.bytes);
    w = gw_new();
    gw_add_tensor(w, "x", NU_TYPE_F32, 1, (int64_t[]){1}, NULL);
    gw_add_tensor(w, "y", NU_TYPE_F32, 1, (int64_t[]){1}, NULL);
    gw_add_tensor(w, "x", NU_TYPE_F32, 1, (int64_t[]){1}, NULL);
    im = emit(w);
    expect_bad(&im, "tensor 2 'x': duplicates tensor 0");
    free(im.bytes);
}

static void test_bad_values(void **state) {
    image im = raw_kv_image(GGUF_BOOL, "\2", 1);
    expect_bad(&im, "key 1 'bad': bool value 2 at byte");
    free(im.bytes);
    /* A bool array: element type, count 3, items 1 0 7. */
    im = raw_kv_image(GGUF_ARRAY, "\7\0\0\0\3\0\0\0\0\0\0\0\1\0\7", 15);
    expect_bad(&im, "key 1 'bad' item [2]: bool value 7 at byte");
    free(im.bytes);
    im = raw_kv_image(GGUF_TYPE_COUNT, "\0\0\0\0", 4);
    expect_bad(&im, "key 1 'bad': value type 13 at byte");
    expect_bad(&im, "is not a GGUF type (0..12)");
    free(im.bytes);
    im = raw_kv_image(UINT32_MAX, "\0\0\0\0", 4);
    expect_bad(&im, "value type 4294967295");
    free(im.bytes);
    /* An array whose element type is out of range. */
    im = raw_kv_image(GGUF_ARRAY, "\x0d\0\0\0\0\0\0\0\0\0\0\0", 12);
    expect_bad(&im, "key 1 'bad': value type 13");
    free(im.bytes);
    /* An empty key. */
    gw_writer *w = gw_new();
    gw_add_u8(w, "", 1);
    im = emit(w);
    expect_bad(&im, "key 0: empty key at byte 24");
    free(im.bytes);
}

/* Nesting is bounded, so a file cannot exhaust the stack. */
static void test_nesting_limit(void **state) {
    for (int levels = 31; levels <= 40; levels += 9) {
        /* levels-1 wrappers of one array each, around an empty u8 array. */
        uint8_t raw[64 * 12];
        size_t n = 0;
        for (int i = 0; i < levels - 1; i++) {
            gw_patch_u32(raw, n, GGUF_ARRAY);
            gw_patch_u64(raw, n + 4, 1);
            n += 12;
        }
        gw_patch_u32(raw, n, GGUF_UINT8);
        gw_patch_u64(raw, n + 4, 0);
        n += 12;
        image im = raw_kv_image(GGUF_ARRAY, raw, n);
        if (levels <= 32) {
            nu_gguf_file *f = open_ok(&im);
            const nu_gguf_value *v = nu_gguf_find(f, "bad");
            for (int i = 0; i < levels - 1; i++) v = &v->v.arr.items[0];
            assert_int_equal(v->v.arr.elem_type, GGUF_UINT8);
            nu_gguf_close(f);
        } else {
            expect_bad(&im, "arrays nested deeper than 32 levels");
        }
        free(im.bytes);
    }
}

/* ------------------------------------------------------------------------ */
/* Real files                                                               */
/* ------------------------------------------------------------------------ */

/* The tiny Llama in ../shared/models (see PROVENANCE.md there). */
static void test_stories260k(void **state) {
    char path[4096];
    snprintf(path, sizeof path, "%s", nu_test_shared("models/stories260K.gguf"));
    if (!nu_test_exists(path)) skip();
    nu_gguf_file *f = NULL;
    nu_error err = {0};
    nu_status st = nu_gguf_open(path, &f, &err);
    if (st != NU_OK) fail_msg("%s", err.message);
    assert_int_equal(f->version, 3);
    assert_int_equal(f->n_kv, 19);
    assert_int_equal(f->n_tensors, 48);
    assert_int_equal(f->alignment, 32);
    assert_int_equal(f->data_offset, 14176);
    assert_int_equal(f->size, 1185376);

    nu_gguf_string s;
    assert_true(nu_gguf_get_str(f, "general.architecture", &s));
    assert_true(nu_gguf_str_eq(s, "llama"));
    uint32_t u;
    assert_true(nu_gguf_get_u32(f, "llama.embedding_length", &u));
    assert_int_equal(u, 64);
    assert_true(nu_gguf_get_u32(f, "llama.block_count", &u));
    assert_int_equal(u, 5);
    assert_true(nu_gguf_get_u32(f, "llama.feed_forward_length", &u));
    assert_int_equal(u, 172);
    assert_true(nu_gguf_get_u32(f, "llama.attention.head_count_kv", &u));
    assert_int_equal(u, 4);
    float eps;
    assert_true(nu_gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps));
    assert_true(fabsf(eps - 1e-5f) < 1e-9f);
    const nu_gguf_value *toks = nu_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    assert_non_null(toks);
    assert_int_equal(toks->v.arr.n, 512);
    assert_true(nu_gguf_str_eq(toks->v.arr.items[1].v.s, "<s>"));
    assert_true(nu_gguf_str_eq(toks->v.arr.items[13].v.s, "<0x0A>"));
    const nu_gguf_value *scores = nu_gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_FLOAT32);
    assert_non_null(scores);
    assert_true(scores->v.arr.items[300].v.f == -(300.0 - 259.0));

    const nu_gguf_tensor *emb = nu_gguf_find_tensor(f, "token_embd.weight");
    assert_non_null(emb);
    assert_int_equal(emb->type, NU_TYPE_F32);
    assert_int_equal(emb->n_dims, 2);
    assert_int_equal(emb->ne[0], 64);
    assert_int_equal(emb->ne[1], 512);
    const nu_gguf_tensor *down = nu_gguf_find_tensor(f, "blk.0.ffn_down.weight");
    assert_int_equal(down->ne[0], 172);
    assert_int_equal(down->ne[1], 64);
    const nu_gguf_tensor *k = nu_gguf_find_tensor(f, "blk.4.attn_k.weight");
    assert_int_equal(k->ne[0], 64);
    assert_int_equal(k->ne[1], 32);
    const nu_gguf_tensor *norm = nu_gguf_find_tensor(f, "output_norm.weight");
    assert_int_equal(norm->n_dims, 1);
    assert_int_equal(norm->ne[0], 64);
    /* llama2.c ties the classifier to the embedding; the file holds a copy. */
    const nu_gguf_tensor *out = nu_gguf_find_tensor(f, "output.weight");
    assert_memory_equal(out->data, emb->data, emb->n_bytes);
    uint64_t total = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        assert_int_equal(((const uint8_t *)f->tensors[i].data - f->base) % 32, 0);
        total += f->tensors[i].n_bytes;
    }
    assert_int_equal(total, 1171200);
    nu_gguf_close(f);
}

/* Token counts from ../shared/vocab/README.md. */
static int64_t expected_vocab_size(const char *file) {
    static const struct {
        const char *file;
        int64_t n;
    } table[] = {
        {"ggml-vocab-baichuan.gguf", 64000}, {"ggml-vocab-deepseek-coder.gguf", 32256},
        {"ggml-vocab-falcon.gguf", 65024},   {"ggml-vocab-gpt-2.gguf", 50257},
        {"ggml-vocab-gpt-neox.gguf", 50432}, {"ggml-vocab-llama-spm.gguf", 32000},
        {"ggml-vocab-phi-3.gguf", 32064},    {"ggml-vocab-starcoder.gguf", 49152},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strcmp(table[i].file, file) == 0) return table[i].n;
    return -1;
}

/* Checks one vocabulary file: it loads and its token arrays agree. */
static void check_vocab_file(const char *dir, const char *name) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    nu_gguf_file *f = NULL;
    nu_error err = {0};
    nu_status st = nu_gguf_open(path, &f, &err);
    if (st != NU_OK) fail_msg("%s", err.message);
    assert_int_equal(f->version, 3);
    assert_int_equal(f->n_tensors, 0);
    const nu_gguf_value *toks = nu_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    assert_non_null(toks);
    int64_t want = expected_vocab_size(name);
    if (want >= 0 && (int64_t)toks->v.arr.n != want)
        fail_msg("%s: %llu tokens, expected %lld", name, (unsigned long long)toks->v.arr.n,
                 (long long)want);
    const nu_gguf_value *types = nu_gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_INT32);
    if (types) assert_int_equal(types->v.arr.n, toks->v.arr.n);
    const nu_gguf_value *scores = nu_gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_FLOAT32);
    if (scores) assert_int_equal(scores->v.arr.n, toks->v.arr.n);
    nu_gguf_string model;
    assert_true(nu_gguf_get_str(f, "tokenizer.ggml.model", &model));
    nu_gguf_close(f);
}

static void test_vocab_files(void **state) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", nu_test_shared("vocab"));
    DIR *d = opendir(dir);
    if (!d) skip();
    int n_files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        check_vocab_file(dir, e->d_name);
        n_files++;
    }
    closedir(d);
    assert_true(n_files >= 8);

    /* llama-spm: the SentencePiece basics. */
    char path[8192];
    snprintf(path, sizeof path, "%s/ggml-vocab-llama-spm.gguf", dir);
    nu_gguf_file *f = NULL;
    assert_int_equal(nu_gguf_open(path, &f, NULL), NU_OK);
    const nu_gguf_value *toks = nu_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    assert_int_equal(toks->v.arr.n, 32000);
    assert_true(nu_gguf_str_eq(toks->v.arr.items[0].v.s, "<unk>"));
    assert_true(nu_gguf_str_eq(toks->v.arr.items[2].v.s, "</s>"));
    nu_gguf_string model;
    assert_true(nu_gguf_get_str(f, "tokenizer.ggml.model", &model));
    assert_true(nu_gguf_str_eq(model, "llama"));
    nu_gguf_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars_round_trip),
        cmocka_unit_test(test_arrays_round_trip),
        cmocka_unit_test(test_nested_arrays),
        cmocka_unit_test(test_versions_2_and_3),
        cmocka_unit_test(test_alignment_and_tensor_data),
        cmocka_unit_test(test_many_names),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_open_file),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_random_mutations),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_bad_versions),
        cmocka_unit_test(test_absurd_counts),
        cmocka_unit_test(test_absurd_lengths),
        cmocka_unit_test(test_bad_tensor_shapes),
        cmocka_unit_test(test_bad_tensor_types),
        cmocka_unit_test(test_bad_tensor_offsets),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_vocab_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
