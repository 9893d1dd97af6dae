/* test_beam.c - beam search on stories260K against an exact search: for
 * short lengths the best continuations can be found exactly by best-first
 * search (log-probs only fall as a sequence grows, so the first complete
 * sequences taken from a priority queue are the best ones). Beam search
 * must return the same sequences and the documented scores. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test_support.h"

#define MAX_LEN 4

static nu_model *model;

static int setup(void **state) {
    (void)state;
    return nu_model_load(nu_test_shared("models/stories260K.gguf"), NULL, &model, NULL) == NU_OK
               ? 0
               : -1;
}

static int teardown(void **state) {
    (void)state;
    nu_model_free(model);
    return 0;
}

typedef struct node {
    double sum;
    int32_t n;
    int32_t tok[MAX_LEN];
    bool complete;
} node;

/* A binary max-heap of nodes by sum. */
typedef struct heap {
    node *a;
    size_t n, cap;
} heap;

static void heap_push(heap *h, const node *x) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 1024;
        h->a = realloc(h->a, h->cap * sizeof *h->a);
        assert_non_null(h->a);
    }
    size_t i = h->n++;
    while (i > 0 && h->a[(i - 1) / 2].sum < x->sum) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = *x;
}

static node heap_pop(heap *h) {
    node top = h->a[0], last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->a[c + 1].sum > h->a[c].sum) c++;
        if (h->a[c].sum <= last.sum) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n) h->a[i] = last;
    return top;
}

/* Next-token log-probs after prompt + prefix (recomputed from scratch). */
static void next_logprobs(nu_context *ctx, const int32_t *prompt, int32_t np, const node *x,
                          double *lp) {
    nu_batch_entry b[64];
    int32_t n = 0;
    for (int32_t i = 0; i < np; i++) b[n++] = (nu_batch_entry){prompt[i], n, 0, false};
    for (int32_t i = 0; i < x->n; i++) b[n++] = (nu_batch_entry){x->tok[i], n, 0, false};
    b[n - 1].logits = true;
    nu_kv_clear(ctx);
    assert_int_equal(nu_decode(ctx, b, n, NULL), NU_OK);
    const float *l = nu_logits(ctx, n - 1);
    int32_t V = nu_model_n_vocab(model);
    double max = -INFINITY, sum = 0;
    for (int32_t i = 0; i < V; i++) max = l[i] > max ? l[i] : max;
    for (int32_t i = 0; i < V; i++) sum += exp(l[i] - max);
    for (int32_t i = 0; i < V; i++) lp[i] = l[i] - max - log(sum);
}

/* The k best complete sequences (length len, or ending with EOS). */
static int exact_best(nu_context *ctx, const char *prompt, int32_t len, int k, node *out) {
    int32_t toks[64];
    size_t np;
    assert_int_equal(
        nu_tokenize(model, prompt, strlen(prompt), NU_TOKENIZE_ADD_BOS, toks, 64, &np, NULL),
        NU_OK);
    heap h = {0};
    node root = {0};
    heap_push(&h, &root);
    int found = 0, expansions = 0;
    double lp[512];
    while (found < k && h.n) {
        node x = heap_pop(&h);
        if (x.complete) {
            out[found++] = x;
            continue;
        }
        next_logprobs(ctx, toks, (int32_t)np, &x, lp);
        expansions++;
        for (int32_t t = 0; t < nu_model_n_vocab(model); t++) {
            node c = x;
            c.sum += lp[t];
            if (nu_token_is_eog(model, t)) {
                c.complete = true;
            } else {
                c.tok[c.n++] = t;
                c.complete = c.n == len;
            }
            heap_push(&h, &c);
        }
    }
    print_message("exact search: %d expansions\n", expansions);
    free(h.a);
    return found;
}

static nu_context *make_context(int32_t n_seq) {
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = n_seq;
    cp.kv_type = NU_KV_F32;
    nu_context *ctx;
    assert_int_equal(nu_context_new(model, &cp, &ctx, NULL), NU_OK);
    return ctx;
}

static void expect_same(const char *prompt, int32_t len, int32_t width, int k) {
    nu_context *ctx = make_context(2 * width);
    node best[4];
    assert_int_equal(exact_best(ctx, prompt, len, k, best), k);
    nu_beam_params bp = nu_beam_default_params();
    bp.width = width;
    bp.n_return = k;
    bp.length_penalty = 0.0f;
    bp.n_predict = len;
    nu_generate_result r[4];
    assert_int_equal(nu_beam_search(ctx, prompt, &bp, r, NULL), NU_OK);
    for (int i = 0; i < k; i++) {
        assert_int_equal(r[i].n_tokens, best[i].n);
        assert_memory_equal(r[i].tokens, best[i].tok, sizeof(int32_t) * (size_t)best[i].n);
        assert_true(fabs(r[i].sum_logprob - best[i].sum) < 1e-4);
        assert_true(r[i].score == r[i].sum_logprob); /* alpha 0: no normalisation */
        print_message("'%s' #%d: '%s' log-prob %.5f (exact %.5f)\n", prompt, i, r[i].text,
                      r[i].sum_logprob, best[i].sum);
        nu_generate_result_free(&r[i]);
    }
    nu_context_free(ctx);
}

static void test_equals_exact_search(void **state) {
    (void)state;
    expect_same("Once upon a time", 4, 8, 3);
    expect_same("Lily and Ben went to the", 3, 6, 3);
    expect_same("The dog", 4, 8, 2);
}

/* Width 1 is greedy decoding. */
static void test_width_one_is_greedy(void **state) {
    (void)state;
    nu_context *ctx = make_context(2);
    nu_beam_params bp = nu_beam_default_params();
    bp.width = 1;
    bp.n_predict = 20;
    nu_generate_result b, g;
    assert_int_equal(nu_beam_search(ctx, "Once upon a time", &bp, &b, NULL), NU_OK);
    nu_generate_params gp = nu_generate_default_params();
    gp.sampling.temperature = 0;
    gp.n_predict = 20;
    assert_int_equal(nu_generate(ctx, "Once upon a time", &gp, &g, NULL), NU_OK);
    assert_string_equal(b.text, g.text);
    assert_true(fabs(b.sum_logprob - g.sum_logprob) < 1e-4);
    nu_generate_result_free(&b);
    nu_generate_result_free(&g);
    nu_context_free(ctx);
}

/* Scores are sum / length^alpha, returned best first. */
static void test_length_penalty_scores(void **state) {
    (void)state;
    nu_context *ctx = make_context(8);
    nu_beam_params bp = nu_beam_default_params();
    bp.width = 4;
    bp.n_return = 4;
    bp.length_penalty = 1.0f;
    bp.n_predict = 12;
    nu_generate_result r[4];
    assert_int_equal(nu_beam_search(ctx, "Once upon a time", &bp, r, NULL), NU_OK);
    for (int i = 0; i < 4; i++) {
        assert_true(r[i].n_tokens > 0);
        assert_true(fabs(r[i].score - r[i].sum_logprob / r[i].n_tokens) < 1e-9);
        if (i) assert_true(r[i - 1].score >= r[i].score);
        nu_generate_result_free(&r[i]);
    }
    nu_context_free(ctx);
}

static void test_bad_params(void **state) {
    (void)state;
    nu_context *ctx = make_context(4);
    nu_beam_params bp = nu_beam_default_params();
    nu_generate_result r[8];
    nu_error err;
    bp.width = 3; /* needs 6 sequences */
    assert_int_equal(nu_beam_search(ctx, "Hi", &bp, r, &err), NU_ERR_INVALID_ARG);
    bp.width = 2;
    bp.n_return = 3;
    assert_int_equal(nu_beam_search(ctx, "Hi", &bp, r, &err), NU_ERR_INVALID_ARG);
    bp.n_return = 1;
    bp.length_penalty = NAN;
    assert_int_equal(nu_beam_search(ctx, "Hi", &bp, r, &err), NU_ERR_INVALID_ARG);
    nu_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equals_exact_search),
        cmocka_unit_test(test_width_one_is_greedy),
        cmocka_unit_test(test_length_penalty_scores),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
