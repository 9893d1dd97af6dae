/* test_sampler.c - the sampler chain, tested statistically: many seeded
 * draws from a known distribution, their frequencies compared with the exact
 * filtered distribution by a chi-square test, plus exact checks of what each
 * stage keeps. */
#include <math.h>
#include <string.h>

#include "nucleus.h"
#include "test_support.h"

#define N_VOCAB 7
#define N_DRAWS 40000
/* chi-square critical values at p = 0.001 for 1..6 degrees of freedom: a
 * correct sampler fails one run in a thousand (and the seed is fixed). */
static const double chi2_crit[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46};

static const double base_probs[N_VOCAB] = {0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.02};

static void base_logits(float *logits) {
    for (int i = 0; i < N_VOCAB; i++) logits[i] = (float)log(base_probs[i]) + 1.5f;
}

/* Draws N_DRAWS tokens and returns the chi-square statistic against want
 * (tokens with want 0 must never be drawn). */
static double chi_square(nu_sampler_params sp, const double *want, int *df) {
    nu_sampler *s;
    assert_int_equal(nu_sampler_new(&sp, N_VOCAB, &s, NULL), NU_OK);
    float logits[N_VOCAB];
    base_logits(logits);
    int counts[N_VOCAB] = {0};
    for (int i = 0; i < N_DRAWS; i++) {
        int32_t t = nu_sampler_sample(s, logits);
        assert_true(t >= 0 && t < N_VOCAB);
        counts[t]++;
    }
    nu_sampler_free(s);
    double chi = 0;
    *df = -1;
    for (int i = 0; i < N_VOCAB; i++) {
        if (want[i] == 0) {
            assert_int_equal(counts[i], 0);
            continue;
        }
        double e = want[i] * N_DRAWS;
        chi += (counts[i] - e) * (counts[i] - e) / e;
        (*df)++;
    }
    return chi;
}

static void normalise(double *p, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += p[i];
    for (int i = 0; i < n; i++) p[i] /= sum;
}

/* A sampler with only the given stages active. */
static nu_sampler_params only(float temp, int32_t top_k, float top_p, float min_p) {
    nu_sampler_params sp = nu_sampler_default_params();
    sp.temperature = temp;
    sp.top_k = top_k;
    sp.top_p = top_p;
    sp.min_p = min_p;
    sp.seed = 1234;
    return sp;
}

static void expect_distribution(nu_sampler_params sp, double *want) {
    normalise(want, N_VOCAB);
    int df;
    double chi = chi_square(sp, want, &df);
    print_message("chi2 = %.2f (df %d, critical %.2f)\n", chi, df, chi2_crit[df]);
    assert_true(df >= 1);
    assert_true(chi < chi2_crit[df]);
}

static void test_pure_sampling(void **state) {
    (void)state;
    double want[N_VOCAB];
    memcpy(want, base_probs, sizeof want);
    expect_distribution(only(1.0f, 0, 1.0f, 0.0f), want);
}

static void test_top_k(void **state) {
    (void)state;
    double want[N_VOCAB] = {0.40, 0.25, 0.15};
    expect_distribution(only(1.0f, 3, 1.0f, 0.0f), want);
}

static void test_top_p(void **state) {
    (void)state;
    /* 0.40 + 0.25 = 0.65 < 0.7, + 0.15 = 0.80 >= 0.7: three tokens */
    double want[N_VOCAB] = {0.40, 0.25, 0.15};
    expect_distribution(only(1.0f, 0, 0.7f, 0.0f), want);
}

static void test_min_p(void **state) {
    (void)state;
    /* 0.2 * 0.40 = 0.08: keeps 0.40, 0.25, 0.15, 0.10 */
    double want[N_VOCAB] = {0.40, 0.25, 0.15, 0.10};
    expect_distribution(only(1.0f, 0, 1.0f, 0.2f), want);
}

static void test_temperature(void **state) {
    (void)state;
    /* p^(1/T), renormalised */
    double want[N_VOCAB];
    for (int i = 0; i < N_VOCAB; i++) want[i] = pow(base_probs[i], 1.0 / 2.0);
    expect_distribution(only(2.0f, 0, 1.0f, 0.0f), want);
    for (int i = 0; i < N_VOCAB; i++) want[i] = pow(base_probs[i], 1.0 / 0.5);
    expect_distribution(only(0.5f, 0, 1.0f, 0.0f), want);
}

/* Default order: top-k, top-p, min-p on the T = 1 distribution, then the
 * temperature reshapes what is left. */
static void test_pipeline(void **state) {
    (void)state;
    double want[N_VOCAB] = {0};
    for (int i = 0; i < 4; i++) want[i] = pow(base_probs[i], 1.0 / 1.5);
    expect_distribution(only(1.5f, 5, 0.85f, 0.0f), want); /* top-p keeps 4 of 5 */
}

/* A custom order: temperature first changes what top-p keeps. */
static void test_custom_order(void **state) {
    (void)state;
    nu_sampler_params sp = only(3.0f, 0, 0.5f, 0.0f);
    sp.order[0] = NU_STAGE_TEMPERATURE;
    sp.order[1] = NU_STAGE_TOP_P;
    sp.n_stages = 2;
    double t[N_VOCAB], want[N_VOCAB] = {0};
    for (int i = 0; i < N_VOCAB; i++) t[i] = pow(base_probs[i], 1.0 / 3.0);
    normalise(t, N_VOCAB);
    double cum = 0;
    for (int i = 0; i < N_VOCAB && cum < 0.5; i++) cum += want[i] = t[i];
    expect_distribution(sp, want);
}

static void test_greedy_is_argmax(void **state) {
    (void)state;
    nu_sampler_params sp = only(0.0f, 40, 0.95f, 0.05f);
    nu_sampler *s;
    assert_int_equal(nu_sampler_new(&sp, 5, &s, NULL), NU_OK);
    float logits[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
    for (int i = 0; i < 100; i++) assert_int_equal(nu_sampler_sample(s, logits), 1);
    nu_sampler_free(s);
}

static void test_seed_reproducible(void **state) {
    (void)state;
    float logits[N_VOCAB];
    base_logits(logits);
    int32_t a[200], b[200], c[200];
    nu_sampler_params sp = only(1.0f, 0, 1.0f, 0.0f);
    nu_sampler *s;
    for (int run = 0; run < 3; run++) {
        sp.seed = run == 2 ? 99 : 5;
        assert_int_equal(nu_sampler_new(&sp, N_VOCAB, &s, NULL), NU_OK);
        int32_t *out = run == 0 ? a : run == 1 ? b : c;
        for (int i = 0; i < 200; i++) out[i] = nu_sampler_sample(s, logits);
        nu_sampler_free(s);
    }
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
}

/* Exact checks of what each stage keeps on a hand-made candidate array. */
static void test_stages_exact(void **state) {
    (void)state;
    nu_candidate data[6];
    nu_candidates c = {data, 6, false, -1};
    float logits[6] = {1.0f, 3.0f, 2.0f, 0.0f, 3.0f, -1.0f};
    for (int i = 0; i < 6; i++) data[i] = (nu_candidate){i, logits[i], 0};
    nu_stage_top_k(&c, 3);
    assert_int_equal(c.size, 3);
    assert_int_equal(data[0].id, 1); /* ties broken by the lower id */
    assert_int_equal(data[1].id, 4);
    assert_int_equal(data[2].id, 2);
    nu_stage_temperature(&c, 0.5f);
    assert_true(data[0].logit == 6.0f && data[2].logit == 4.0f);
    nu_candidates_softmax(&c);
    double e = exp(-2.0);
    assert_true(fabs(data[2].prob - e / (2 + e)) < 1e-6);
    nu_stage_min_p(&c, 0.2f); /* e^-2 = 0.135 < 0.2: dropped */
    assert_int_equal(c.size, 2);
}

static void test_bad_params(void **state) {
    (void)state;
    nu_error err;
    nu_sampler *s;
    nu_sampler_params sp = nu_sampler_default_params();
    sp.temperature = -0.5f;
    assert_int_equal(nu_sampler_new(&sp, 10, &s, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "temperature"));
    sp = nu_sampler_default_params();
    sp.top_p = 0.0f;
    assert_int_equal(nu_sampler_params_check(&sp, &err), NU_ERR_INVALID_ARG);
    sp = nu_sampler_default_params();
    sp.min_p = NAN;
    assert_int_equal(nu_sampler_params_check(&sp, &err), NU_ERR_INVALID_ARG);
    sp = nu_sampler_default_params();
    sp.top_k = -1;
    assert_int_equal(nu_sampler_params_check(&sp, &err), NU_ERR_INVALID_ARG);
    sp = nu_sampler_default_params();
    sp.n_stages = 1;
    sp.order[0] = (nu_stage_kind)77;
    assert_int_equal(nu_sampler_params_check(&sp, &err), NU_ERR_INVALID_ARG);
}

/* The RNG's uniform doubles are in [0, 1) and look uniform (mean, variance). */
static void test_rng_uniform(void **state) {
    (void)state;
    nu_rng r;
    nu_rng_seed(&r, 1);
    double sum = 0, sq = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = nu_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
        sq += u * u;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    assert_true(fabs(mean - 0.5) < 0.005);
    assert_true(fabs(var - 1.0 / 12) < 0.002);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pure_sampling),  cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_top_p),          cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_temperature),    cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_custom_order),   cmocka_unit_test(test_greedy_is_argmax),
        cmocka_unit_test(test_seed_reproducible), cmocka_unit_test(test_stages_exact),
        cmocka_unit_test(test_bad_params),     cmocka_unit_test(test_rng_uniform),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
