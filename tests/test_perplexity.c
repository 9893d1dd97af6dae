/* test_perplexity.c - nu_perplexity on stories260K:
 *  - its total score equals an independent computation (each window read a
 *    token at a time, -ln softmax in long double), for second-half scoring
 *    and for scoring every token, with a short last window;
 *  - its standard error is the one of e^mean computed here;
 *  - the model's own greedy text is far more predictable than the same
 *    tokens reversed;
 *  - bad arguments are refused, and a callback can stop it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test_support.h"

static nu_model *model;
static int32_t toks[512];
static size_t n_toks;

static int setup(void **state) {
    (void)state;
    if (nu_test_load_model("models/stories260K.gguf", &model)) return -1;
    /* the reference greedy continuations: text the model finds likely */
    const char *text =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.";
    return nu_tokenize(model, text, strlen(text), NU_TOKENIZE_ADD_BOS, toks, 512, &n_toks, NULL);
}

static int teardown(void **state) {
    (void)state;
    nu_model_free(model);
    return 0;
}

static nu_context *new_ctx(int32_t n_ctx) {
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    nu_context *c;
    assert_int_equal(nu_context_new(model, &cp, &c, NULL), NU_OK);
    return c;
}

/* Sum and sum of squares of the scores, windows read one token at a time. */
static void reference(nu_context *c, const int32_t *t, int64_t n, int32_t window, int32_t from,
                      long double *sum, long double *sq, int64_t *count) {
    const int32_t n_vocab = nu_model_n_vocab(model);
    *sum = *sq = 0;
    *count = 0;
    for (int64_t w0 = 0; w0 < n; w0 += window) {
        int32_t len = (int32_t)(n - w0 < window ? n - w0 : window);
        if (len <= from) break;
        nu_kv_clear(c);
        for (int32_t pos = 0; pos + 1 < len; pos++) {
            nu_batch_entry e = {t[w0 + pos], pos, 0, true};
            assert_int_equal(nu_decode(c, &e, 1, NULL), NU_OK);
            if (pos + 1 < from) continue;
            const float *l = nu_logits(c, 0);
            long double m = l[0], z = 0;
            for (int32_t i = 1; i < n_vocab; i++) m = l[i] > m ? l[i] : m;
            for (int32_t i = 0; i < n_vocab; i++) z += expl((long double)l[i] - m);
            long double s = logl(z) - ((long double)l[t[w0 + pos + 1]] - m);
            *sum += s;
            *sq += s * s;
            (*count)++;
        }
    }
}

static void check_against_reference(int32_t window, int32_t from) {
    nu_context *c = new_ctx(128);
    nu_perplexity_params p = nu_perplexity_default_params();
    p.n_window = window;
    p.score_from = from;
    nu_perplexity_result r;
    assert_int_equal(nu_perplexity(c, toks, (int64_t)n_toks, &p, &r, NULL), NU_OK);
    long double sum, sq;
    int64_t count;
    reference(c, toks, (int64_t)n_toks, window, from ? from : window / 2, &sum, &sq, &count);
    assert_int_equal(r.n_scored, count);
    assert_true(fabs(r.nll - (double)sum) <= 1e-9 * (double)sum);
    const long double mean = sum / count, var = (sq / count - mean * mean) * count / (count - 1);
    assert_true(fabs(r.perplexity - (double)expl(mean)) <= 1e-9 * r.perplexity);
    assert_true(fabs(r.stderr_ppl - (double)(expl(mean) * sqrtl(var / count))) <=
                1e-6 * r.stderr_ppl);
    nu_context_free(c);
}

static void test_matches_reference(void **state) {
    (void)state;
    assert_true(n_toks > 40);
    check_against_reference(16, 0);  /* second halves, a short last window */
    check_against_reference(32, 1);  /* every token after a window's first */
    check_against_reference(128, 5); /* one window */
}

static void test_greedy_text_vs_reversed(void **state) {
    (void)state;
    nu_context *c = new_ctx(128);
    nu_perplexity_params p = nu_perplexity_default_params();
    p.n_window = 64;
    p.score_from = 1;
    nu_perplexity_result fwd, rev;
    assert_int_equal(nu_perplexity(c, toks, (int64_t)n_toks, &p, &fwd, NULL), NU_OK);
    int32_t back[512];
    back[0] = toks[0];
    for (size_t i = 1; i < n_toks; i++) back[i] = toks[n_toks - i];
    assert_int_equal(nu_perplexity(c, back, (int64_t)n_toks, &p, &rev, NULL), NU_OK);
    print_message("perplexity: text %.3f, reversed %.3f\n", fwd.perplexity, rev.perplexity);
    assert_true(fwd.perplexity > 1.0 && fwd.perplexity < 10.0);
    assert_true(rev.perplexity > 10 * fwd.perplexity);
    nu_context_free(c);
}

static bool stop_after_first(int32_t window, const nu_perplexity_result *r, void *user) {
    (void)r;
    *(int *)user += 1;
    return window < 0;
}

static void test_bad_arguments_and_stop(void **state) {
    (void)state;
    nu_context *c = new_ctx(64);
    nu_perplexity_params p = nu_perplexity_default_params();
    nu_perplexity_result r;
    nu_error err;
    p.n_window = 65; /* above the context */
    assert_int_equal(nu_perplexity(c, toks, (int64_t)n_toks, &p, &r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "n_window"));
    p.n_window = 1;
    assert_int_equal(nu_perplexity(c, toks, (int64_t)n_toks, &p, &r, &err), NU_ERR_INVALID_ARG);
    p.n_window = 16;
    p.score_from = 16;
    assert_int_equal(nu_perplexity(c, toks, (int64_t)n_toks, &p, &r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "score_from"));
    p.score_from = 0;
    assert_int_equal(nu_perplexity(c, toks, 1, &p, &r, &err), NU_ERR_INVALID_ARG);
    int32_t bad[3] = {1, nu_model_n_vocab(model), 2};
    assert_int_equal(nu_perplexity(c, bad, 3, &p, &r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "vocabulary"));
    int calls = 0;
    p.on_window = stop_after_first;
    p.user = &calls;
    assert_int_equal(nu_perplexity(c, toks, (int64_t)n_toks, &p, &r, &err), NU_ERR_CANCELLED);
    assert_int_equal(calls, 1);
    assert_int_equal(r.n_windows, 1);
    assert_int_equal(r.n_scored, 8);
    /* the context still works after all that */
    p.on_window = NULL;
    assert_int_equal(nu_perplexity(c, toks, (int64_t)n_toks, &p, &r, &err), NU_OK);
    nu_context_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_greedy_text_vs_reversed),
        cmocka_unit_test(test_bad_arguments_and_stop),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
