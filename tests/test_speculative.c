/* test_speculative.c - speculative decoding is exact:
 *  - greedy output is token-for-token plain greedy output, with a draft that
 *    agrees often (a q4_0 copy), one that never agrees (a copy whose output
 *    projection is negated, so it proposes the least likely tokens), and
 *    prompt lookup;
 *  - sampled output follows the target's distribution: over thousands of
 *    seeded runs with the disagreeing draft (every proposal goes through the
 *    rejection rule and the residual distribution), the first token's
 *    frequencies fit the exact distribution and the second token's match
 *    plain sampling (chi-square tests at p = 0.001); likewise with a draft
 *    that is too sure of the target's favourite tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft_support.h"
#include "nucleus.h"
#include "test_support.h"

static nu_model *target, *agree, *disagree, *sharp;

static int setup(void **state) {
    (void)state;
    const char *src = nu_test_shared("models/stories260K.gguf");
    if (nu_model_load(src, NULL, &target, NULL)) return -1;
    agree = nu_test_make_draft(src, "spec_q4_0.gguf", "q4_0", 1.0f);
    disagree = nu_test_make_draft(src, "spec_negated.gguf", "q8_0", -1.0f);
    sharp = nu_test_make_draft(src, "spec_sharpened.gguf", "q8_0", 4.0f);
    return agree && disagree && sharp ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    nu_model_free(target);
    nu_model_free(agree);
    nu_model_free(disagree);
    nu_model_free(sharp);
    return 0;
}

static nu_context *ctx_for(const nu_model *m) {
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 64;
    cp.n_threads = 1;
    nu_context *c;
    assert_int_equal(nu_context_new(m, &cp, &c, NULL), NU_OK);
    return c;
}

static const char *prompts[] = {"Once upon a time", "Lily and Ben went to the park",
                                "The little dog ran to the"};

static void expect_greedy_identical(const nu_model *draft, bool lookup, double *acceptance) {
    nu_context *t = ctx_for(target), *d = draft ? ctx_for(draft) : NULL;
    int64_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < 3; i++) {
        nu_generate_params p = nu_generate_default_params();
        p.n_predict = 80;
        p.sampling.temperature = 0;
        nu_generate_result plain, spec;
        assert_int_equal(nu_generate(t, prompts[i], &p, &plain, NULL), NU_OK);
        nu_speculative_params sp = nu_speculative_default_params();
        sp.draft = d;
        sp.lookup = lookup;
        nu_speculative_stats st;
        assert_int_equal(nu_generate_speculative(t, prompts[i], &p, &sp, &spec, &st, NULL), NU_OK);
        assert_int_equal(spec.n_tokens, plain.n_tokens);
        assert_memory_equal(spec.tokens, plain.tokens, sizeof(int32_t) * (size_t)plain.n_tokens);
        assert_string_equal(spec.text, plain.text);
        assert_int_equal(spec.finish, plain.finish);
        drafted += st.drafted;
        accepted += st.accepted;
        nu_generate_result_free(&plain);
        nu_generate_result_free(&spec);
    }
    *acceptance = drafted ? (double)accepted / (double)drafted : 0;
    nu_context_free(t);
    nu_context_free(d);
}

static void test_greedy_identical(void **state) {
    (void)state;
    double agree_rate, disagree_rate, lookup_rate;
    expect_greedy_identical(agree, false, &agree_rate);
    expect_greedy_identical(disagree, false, &disagree_rate);
    expect_greedy_identical(NULL, true, &lookup_rate);
    print_message("greedy acceptance: q4_0 draft %.1f%%, negated draft %.1f%%, lookup %.1f%%\n",
                  100 * agree_rate, 100 * disagree_rate, 100 * lookup_rate);
    assert_true(agree_rate > 0.5);    /* the q4_0 copy mostly agrees */
    assert_true(disagree_rate < 0.1); /* the negated copy mostly does not */
}

#define RUNS 3000
#define MAX_BINS 512

/* The first two generated tokens of many seeded runs. */
static void sample_pairs(const nu_model *draft, bool speculative, nu_sampler_params sp,
                         int32_t *first, int32_t *second) {
    nu_context *t = ctx_for(target), *d = draft ? ctx_for(draft) : NULL;
    for (int r = 0; r < RUNS; r++) {
        nu_generate_params p = nu_generate_default_params();
        p.n_predict = 3;
        p.sampling = sp;
        p.sampling.seed = 1000 + (uint64_t)r;
        nu_generate_result res;
        if (speculative) {
            nu_speculative_params s = nu_speculative_default_params();
            s.draft = d;
            s.draft_max = 4;
            assert_int_equal(nu_generate_speculative(t, prompts[0], &p, &s, &res, NULL, NULL),
                             NU_OK);
        } else {
            assert_int_equal(nu_generate(t, prompts[0], &p, &res, NULL), NU_OK);
        }
        assert_true(res.n_tokens >= 2);
        first[r] = res.tokens[0];
        second[r] = res.tokens[1];
        nu_generate_result_free(&res);
    }
    nu_context_free(t);
    nu_context_free(d);
}

static void sampled_distribution(const nu_model *draft, const char *name) {
    nu_sampler_params sp = nu_sampler_default_params();
    sp.temperature = 1.5f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    static int32_t f_spec[RUNS], s_spec[RUNS], f_plain[RUNS], s_plain[RUNS];
    sample_pairs(draft, true, sp, f_spec, s_spec);
    sample_pairs(NULL, false, sp, f_plain, s_plain);
    /* first token: the exact distribution after the chain */
    nu_context *t = ctx_for(target);
    int32_t toks[16];
    size_t n;
    assert_int_equal(nu_tokenize(target, prompts[0], strlen(prompts[0]), NU_TOKENIZE_ADD_BOS, toks,
                                 16, &n, NULL),
                     NU_OK);
    nu_batch_entry b[16];
    for (size_t i = 0; i < n; i++) b[i] = (nu_batch_entry){toks[i], (int32_t)i, 0, i == n - 1};
    assert_int_equal(nu_decode(t, b, (int32_t)n, NULL), NU_OK);
    nu_sampler *s;
    assert_int_equal(nu_sampler_new_for_model(&sp, target, &s, NULL), NU_OK);
    const nu_candidates *c = nu_sampler_distribution(s, nu_logits(t, (int32_t)n - 1));
    static double obs[MAX_BINS], expct[MAX_BINS];
    memset(obs, 0, sizeof obs);
    memset(expct, 0, sizeof expct);
    for (size_t i = 0; i < c->size; i++) expct[c->data[i].id] = c->data[i].prob * RUNS;
    for (int r = 0; r < RUNS; r++) obs[f_spec[r]]++;
    int df;
    double chi = nu_test_chi_square(obs, expct, MAX_BINS, &df);
    print_message("%s draft, first token: chi2 %.2f, df %d, critical %.2f\n", name, chi, df,
                  nu_test_chi2_critical(df));
    assert_true(df >= 3 && chi < nu_test_chi2_critical(df));
    /* second token: two samples (speculative vs plain) of the same law;
     * the pooled frequencies give each side's expected counts */
    static double a[MAX_BINS], bb[MAX_BINS], ea[MAX_BINS];
    memset(a, 0, sizeof a);
    memset(bb, 0, sizeof bb);
    for (int r = 0; r < RUNS; r++) a[s_spec[r]]++, bb[s_plain[r]]++;
    for (int i = 0; i < MAX_BINS; i++) ea[i] = (a[i] + bb[i]) / 2;
    double chi_a = nu_test_chi_square(a, ea, MAX_BINS, &df);
    int df_b;
    double chi_b = nu_test_chi_square(bb, ea, MAX_BINS, &df_b);
    print_message("%s draft, second token: two-sample chi2 %.2f, df %d, critical %.2f\n", name,
                  chi_a + chi_b, df, nu_test_chi2_critical(df));
    assert_true(df >= 3 && chi_a + chi_b < nu_test_chi2_critical(df));
    nu_sampler_free(s);
    nu_context_free(t);
}

/* The negated draft proposes what the target finds unlikely (the residual
 * is then nearly the target's own distribution); the sharpened one proposes
 * the target's favourites too often, so rejections and the residual
 * max(0, p - q) decide how often the other tokens come out. */
static void test_sampled_distribution(void **state) {
    (void)state;
    sampled_distribution(disagree, "negated");
    sampled_distribution(sharp, "sharpened");
}

static void test_bad_draft(void **state) {
    (void)state;
    nu_model *other;
    assert_int_equal(nu_model_load(nu_test_shared("vocab/ggml-vocab-llama-spm.gguf"),
                                   &(nu_model_params){NU_LOAD_VOCAB_ONLY}, &other, NULL),
                     NU_OK);
    nu_error err;
    assert_int_equal(nu_draft_check(target, other, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "vocabulary"));
    nu_model_free(other);
    nu_context *t = ctx_for(target);
    nu_generate_params p = nu_generate_default_params();
    nu_speculative_params sp = nu_speculative_default_params();
    nu_generate_result r;
    assert_int_equal(nu_generate_speculative(t, "Hi", &p, &sp, &r, NULL, &err), NU_ERR_INVALID_ARG);
    sp.lookup = true;
    sp.draft_max = 0;
    assert_int_equal(nu_generate_speculative(t, "Hi", &p, &sp, &r, NULL, &err), NU_ERR_INVALID_ARG);
    sp.draft_max = 4; /* the request may not ask for more than the parameters allow */
    p.draft_max = 5;
    assert_int_equal(nu_generate_speculative(t, "Hi", &p, &sp, &r, NULL, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "draft_max 5"));
    p.draft_max = -2;
    assert_int_equal(nu_generate_speculative(t, "Hi", &p, &sp, &r, NULL, &err), NU_ERR_INVALID_ARG);
    nu_context_free(t);
}

/* The request's draft_max: K caps the proposals of every pass (same greedy
 * output), -1 turns speculation off (no proposals, plain output). */
static void test_request_draft_max(void **state) {
    (void)state;
    nu_context *t = ctx_for(target), *d = ctx_for(agree);
    nu_generate_params p = nu_generate_default_params();
    p.n_predict = 60;
    p.sampling.temperature = 0;
    nu_generate_result plain;
    assert_int_equal(nu_generate(t, prompts[0], &p, &plain, NULL), NU_OK);
    nu_speculative_params sp = nu_speculative_default_params();
    sp.draft = d;
    sp.draft_max = 8;
    const int32_t asks[] = {0, 2, 1, -1};
    for (size_t i = 0; i < 4; i++) {
        p.draft_max = asks[i];
        nu_speculative_stats st;
        nu_generate_result spec;
        assert_int_equal(nu_generate_speculative(t, prompts[0], &p, &sp, &spec, &st, NULL), NU_OK);
        assert_int_equal(spec.n_tokens, plain.n_tokens);
        assert_memory_equal(spec.tokens, plain.tokens, sizeof(int32_t) * (size_t)plain.n_tokens);
        const int32_t cap = asks[i] > 0 ? asks[i] : asks[i] == 0 ? 8 : 0;
        assert_true(st.drafted <= (int64_t)cap * st.target_passes);
        if (asks[i] == -1)
            assert_int_equal(st.drafted, 0);
        else
            assert_true(st.drafted > 0);
        if (asks[i] == 0) /* the q4_0 copy agrees often: passes of more than 2 happen */
            assert_true(st.drafted > 2 * st.target_passes);
        nu_generate_result_free(&spec);
    }
    nu_generate_result_free(&plain);
    nu_context_free(t);
    nu_context_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_sampled_distribution),
        cmocka_unit_test(test_bad_draft),
        cmocka_unit_test(test_request_draft_max),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
