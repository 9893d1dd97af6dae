/* test_embed.c - nu_embed on stories260K: the pooled hidden states are what
 * a position-by-position computation gives (a causal model's hidden state
 * at position i is the last one of the prefix ending there), whatever the
 * batch size; normalisation; the refusals. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static nu_context *embed_context(int32_t n_batch) {
    nu_context_params p = nu_context_default_params();
    p.n_ctx = 128;
    p.n_batch = n_batch;
    p.n_threads = 2;
    p.embeddings = true;
    nu_context *c;
    nu_error err;
    if (nu_context_new(nu_test_demo, &p, &c, &err) != NU_OK) fail_msg("%s", err.message);
    return c;
}

static size_t tokens_of(const char *text, int32_t *toks, size_t cap) {
    size_t n;
    assert_int_equal(
        nu_tokenize(nu_test_demo, text, strlen(text), NU_TOKENIZE_ADD_BOS, toks, cap, &n, NULL),
        NU_OK);
    return n;
}

static void test_mean_is_mean_of_prefix_ends(void **state) {
    (void)state;
    int32_t toks[64];
    size_t n = tokens_of("Once upon a time there was a little dog named Max.", toks, 64);
    assert_true(n > 8);
    nu_context *c = embed_context(512);
    int32_t d = nu_model_n_embd(nu_test_demo);
    float *mean = malloc(sizeof(float) * (size_t)d), *last = malloc(sizeof(float) * (size_t)d);
    double *want = calloc((size_t)d, sizeof *want);
    assert_int_equal(nu_embed(c, toks, (int32_t)n, NU_POOLING_MEAN, false, mean, NULL), NU_OK);
    for (size_t i = 1; i <= n; i++) {
        assert_int_equal(nu_embed(c, toks, (int32_t)i, NU_POOLING_LAST, false, last, NULL), NU_OK);
        for (int32_t j = 0; j < d; j++) want[j] += last[j] / (double)n;
    }
    for (int32_t j = 0; j < d; j++)
        if (fabs(mean[j] - want[j]) > 1e-5 * (1 + fabs(want[j])))
            fail_msg("dimension %d: mean %g, position by position %g", j, mean[j], want[j]);
    /* the first token's state is the last of a one-token prefix */
    float *first = malloc(sizeof(float) * (size_t)d);
    assert_int_equal(nu_embed(c, toks, (int32_t)n, NU_POOLING_FIRST, false, first, NULL), NU_OK);
    assert_int_equal(nu_embed(c, toks, 1, NU_POOLING_LAST, false, last, NULL), NU_OK);
    for (int32_t j = 0; j < d; j++) assert_true(fabsf(first[j] - last[j]) <= 1e-5f);
    free(mean), free(last), free(first), free(want);
    nu_context_free(c);
}

static void test_batches_and_normalisation(void **state) {
    (void)state;
    int32_t toks[64];
    size_t n = tokens_of("The sun was warm and the grass was green.", toks, 64);
    nu_context *whole = embed_context(512), *small = embed_context(3);
    int32_t d = nu_model_n_embd(nu_test_demo);
    float *a = malloc(sizeof(float) * (size_t)d), *b = malloc(sizeof(float) * (size_t)d);
    float *raw = malloc(sizeof(float) * (size_t)d);
    /* chunks of 3 tokens: the same bits (results do not depend on the batch) */
    for (int pooling = NU_POOLING_MEAN; pooling <= NU_POOLING_FIRST; pooling++) {
        assert_int_equal(nu_embed(whole, toks, (int32_t)n, pooling, true, a, NULL), NU_OK);
        assert_int_equal(nu_embed(small, toks, (int32_t)n, pooling, true, b, NULL), NU_OK);
        assert_memory_equal(a, b, sizeof(float) * (size_t)d);
    }
    assert_int_equal(nu_embed(whole, toks, (int32_t)n, NU_POOLING_MEAN, true, a, NULL), NU_OK);
    assert_int_equal(nu_embed(whole, toks, (int32_t)n, NU_POOLING_MEAN, false, raw, NULL), NU_OK);
    double norm = 0, raw_norm = 0;
    for (int32_t j = 0; j < d; j++)
        norm += (double)a[j] * a[j], raw_norm += (double)raw[j] * raw[j];
    assert_true(fabs(norm - 1) < 1e-5);
    for (int32_t j = 0; j < d; j++) assert_true(fabs(a[j] - raw[j] / sqrt(raw_norm)) < 1e-6);
    /* the same text twice: the same vector (nothing left over in the cache) */
    assert_int_equal(nu_embed(whole, toks, (int32_t)n, NU_POOLING_MEAN, false, b, NULL), NU_OK);
    assert_memory_equal(raw, b, sizeof(float) * (size_t)d);
    free(a), free(b), free(raw);
    nu_context_free(whole);
    nu_context_free(small);
}

static void test_refusals(void **state) {
    (void)state;
    int32_t toks[200] = {1, 2, 3};
    float out[512];
    nu_error err;
    nu_context *c = embed_context(64);
    assert_int_equal(nu_embed(c, toks, 0, NU_POOLING_MEAN, true, out, &err), NU_ERR_INVALID_ARG);
    assert_int_equal(nu_embed(c, toks, 129, NU_POOLING_MEAN, true, out, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "1..128"));
    assert_int_equal(nu_embed(c, toks, 3, (nu_pooling)9, true, out, &err), NU_ERR_INVALID_ARG);
    toks[1] = 100000;
    assert_int_not_equal(nu_embed(c, toks, 3, NU_POOLING_MEAN, true, out, &err), NU_OK);
    toks[1] = 2;
    assert_int_equal(nu_embed(c, toks, 3, NU_POOLING_MEAN, true, out, &err), NU_OK);
    /* an embeddings context gives no logits; a logits context no embeddings */
    nu_batch_entry e = {1, 0, 0, true};
    assert_int_equal(nu_decode(c, &e, 1, NULL), NU_OK);
    assert_null(nu_logits(c, 0));
    assert_non_null(nu_embedding(c, 0));
    nu_context_free(c);
    nu_context *plain;
    assert_int_equal(nu_context_new(nu_test_demo, NULL, &plain, NULL), NU_OK);
    assert_int_equal(nu_embed(plain, toks, 3, NU_POOLING_MEAN, true, out, &err),
                     NU_ERR_INVALID_ARG);
    assert_int_equal(nu_decode(plain, &e, 1, NULL), NU_OK);
    assert_null(nu_embedding(plain, 0));
    assert_non_null(nu_logits(plain, 0));
    nu_context_free(plain);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mean_is_mean_of_prefix_ends),
        cmocka_unit_test(test_batches_and_normalisation),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, nu_test_demo_setup, nu_test_demo_teardown);
}
