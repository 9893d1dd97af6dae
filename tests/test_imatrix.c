/* test_imatrix.c - nu_imatrix_load on importance matrices that llama.cpp's
 * own llama-imatrix wrote (tests/imatrix/README.md gives the commands), in
 * its two formats: GGUF (NAME.in_sum2, NAME.counts) and the legacy .dat.
 * Each file is read here a second time, independently (the GGUF tensors
 * through the GGUF reader, the .dat byte by byte), and the importances
 * nu_imatrix_load derives must be exactly what the file holds: in_sum2 /
 * count, and value / ncall. Both files come from one run, with ncall 8 (a
 * power of two), so both must give the very same importances. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "imatrix.h"
#include "test_support.h"

/* The matrices of tiny_gguf.py --arch llama-k1 that llama-imatrix saw (the
 * output matrix is token_embd, which it does not collect). */
static const char *const k_names[] = {
    "blk.0.attn_k.weight", "blk.0.attn_output.weight", "blk.0.attn_q.weight",
    "blk.0.attn_v.weight", "blk.0.ffn_down.weight",    "blk.0.ffn_gate.weight",
    "blk.0.ffn_up.weight",
};
#define N_NAMES (sizeof k_names / sizeof *k_names)
#define N_IN 256

static const char *data_path(const char *name) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/tests/imatrix/%s", NU_SOURCE_DIR, name);
    return path;
}

static nu_imatrix *load(const char *name) {
    nu_imatrix *m;
    nu_error err;
    if (nu_imatrix_load(data_path(name), &m, &err) != NU_OK) fail_msg("%s", err.message);
    return m;
}

static void test_gguf(void **state) {
    (void)state;
    nu_imatrix *m = load("llama-k1.imatrix.gguf");
    nu_gguf_file *f;
    nu_error err;
    if (nu_gguf_open(data_path("llama-k1.imatrix.gguf"), &f, &err) != NU_OK)
        fail_msg("%s", err.message);
    const nu_gguf_value *chunks = nu_gguf_find(f, "imatrix.chunk_count");
    const nu_gguf_value *size = nu_gguf_find(f, "imatrix.chunk_size");
    assert_non_null(chunks);
    assert_non_null(size);
    assert_non_null(nu_gguf_find(f, "imatrix.datasets"));
    assert_int_equal(f->n_tensors, 2 * N_NAMES);
    for (size_t i = 0; i < N_NAMES; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s.in_sum2", k_names[i]);
        const nu_gguf_tensor *sums = nu_gguf_find_tensor(f, name);
        snprintf(name, sizeof name, "%s.counts", k_names[i]);
        const nu_gguf_tensor *counts = nu_gguf_find_tensor(f, name);
        assert_non_null(sums);
        assert_non_null(counts);
        assert_int_equal(sums->n_elements, N_IN);
        assert_int_equal(counts->n_elements, 1);
        const float count = ((const float *)counts->data)[0];
        /* 8 chunks of 64 tokens, every token a row of every matrix */
        assert_true(count == 512.0f);
        int64_t n;
        const float *v = nu_imatrix_find(m, k_names[i], strlen(k_names[i]), &n);
        assert_non_null(v);
        assert_int_equal(n, N_IN);
        for (int k = 0; k < N_IN; k++) {
            const float want = ((const float *)sums->data)[k] / count;
            if (!(v[k] == want) || !(want > 0.0f))
                fail_msg("%s[%d]: %.9g, the file holds %.9g", k_names[i], k, v[k], want);
        }
    }
    int64_t n;
    assert_null(nu_imatrix_find(m, "token_embd.weight", 17, &n));
    assert_int_equal(n, 0);
    nu_gguf_close(f);
    nu_imatrix_free(m);
}

static int32_t i32_at(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void test_legacy_dat(void **state) {
    (void)state;
    nu_imatrix *m = load("llama-k1.imatrix.dat");
    nu_imatrix *g = load("llama-k1.imatrix.gguf");
    size_t len;
    uint8_t *d = (uint8_t *)nu_test_read_file(data_path("llama-k1.imatrix.dat"), &len);
    assert_non_null(d);
    size_t at = 0;
    assert_int_equal(i32_at(d), N_NAMES);
    at += 4;
    for (size_t i = 0; i < N_NAMES; i++) { /* sorted by name, as llama-imatrix writes them */
        const int32_t name_len = i32_at(d + at);
        at += 4;
        assert_int_equal(name_len, strlen(k_names[i]));
        assert_memory_equal(d + at, k_names[i], (size_t)name_len);
        at += (size_t)name_len;
        const int32_t ncall = i32_at(d + at), nval = i32_at(d + at + 4);
        at += 8;
        assert_int_equal(ncall, 8); /* 512 rows in chunks of 64 */
        assert_int_equal(nval, N_IN);
        int64_t n, ng;
        const float *v = nu_imatrix_find(m, k_names[i], strlen(k_names[i]), &n);
        const float *vg = nu_imatrix_find(g, k_names[i], strlen(k_names[i]), &ng);
        assert_non_null(v);
        assert_non_null(vg);
        assert_int_equal(n, N_IN);
        for (int k = 0; k < N_IN; k++, at += 4) {
            float value;
            memcpy(&value, d + at, 4);
            const float want = value / (float)ncall;
            if (!(v[k] == want) || !(v[k] == vg[k]))
                fail_msg("%s[%d]: %.9g, the file holds %.9g, the GGUF file gives %.9g", k_names[i],
                         k, v[k], want, vg[k]);
        }
    }
    /* then the chunk count and the dataset's name, which nucleus ignores */
    assert_int_equal(i32_at(d + at), 8);
    const char *dataset = "tests/imatrix/text.txt";
    assert_int_equal(i32_at(d + at + 4), strlen(dataset));
    assert_int_equal(len, at + 8 + strlen(dataset));
    assert_memory_equal(d + at + 8, dataset, strlen(dataset));
    free(d);
    nu_imatrix_free(g);
    nu_imatrix_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf),
        cmocka_unit_test(test_legacy_dat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
