/* test_support.c - helpers shared by the tests. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "gguf.h"

const char *nu_test_shared(const char *rel) {
    static char buf[4096];
    const char *dir = getenv("NU_SHARED_DIR");
    snprintf(buf, sizeof buf, "%s/%s", dir && *dir ? dir : NU_SHARED_DIR, rel);
    return buf;
}

const char *nu_test_tmp(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", NU_TEST_TMP, name);
    return buf;
}

char *nu_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

int nu_test_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

nu_model *nu_test_demo;

int nu_test_demo_setup(void **state) {
    (void)state;
    return nu_test_load_model("models/stories260K.gguf", &nu_test_demo);
}

int nu_test_demo_teardown(void **state) {
    (void)state;
    nu_model_free(nu_test_demo);
    nu_test_demo = NULL;
    return 0;
}

int nu_test_load_model(const char *rel, nu_model **model) {
    nu_error err;
    if (nu_model_load(nu_test_shared(rel), NULL, model, &err) != NU_OK) {
        print_error("load %s: %s\n", rel, err.message);
        return -1;
    }
    return 0;
}

int nu_test_each_quantized_matrix(const char *name, uint32_t type, nu_test_matrix_fn fn,
                                  void *ctx) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/arch/quantized/llama-k1-%s.gguf", NU_SOURCE_DIR, name);
    nu_gguf_file *f;
    nu_error err;
    if (nu_gguf_open(path, &f, &err) != NU_OK) fail_msg("%s: %s", path, err.message);
    int n = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const nu_gguf_tensor *g = &f->tensors[i];
        if (g->n_dims != 2) continue;
        assert_int_equal(g->type, type);
        char what[160];
        snprintf(what, sizeof what, "%s %.*s: ", name, (int)g->name.len, g->name.data);
        fn(g, what, ctx);
        n++;
    }
    nu_gguf_close(f);
    return n;
}
