/* test_sampler_llama.c - the samplers llama.cpp's users reach for: DRY, XTC,
 * top-nσ, dynamic temperature, mirostat v1 and v2, and the bans (strings
 * and token sequences).
 *
 * Exact checks use the vectors of llama.cpp's tests/test-sampling.cpp (its
 * inputs and expected probabilities), the formulas of its documentation and
 * hand-made logits; statistical ones draw many seeded tokens and compare the
 * frequencies with the exact filtered distribution (chi-square at
 * p = 0.001); mirostat's observed surprise is checked to converge to tau;
 * banned strings are checked never to appear in generated text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test_support.h"

/* ---- helpers ------------------------------------------------------------- */

/* A sampler params with every filter off, temperature 1, a fixed seed. */
static nu_sampler_params plain(void) {
    nu_sampler_params sp = nu_sampler_default_params();
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = 2024;
    return sp;
}

static nu_sampler *new_sampler(const nu_sampler_params *sp, int32_t n_vocab) {
    nu_sampler *s = NULL;
    nu_error err;
    nu_status st = nu_sampler_new(sp, n_vocab, &s, &err);
    if (st) print_message("nu_sampler_new: %s\n", err.message);
    assert_int_equal(st, NU_OK);
    return s;
}

/* logits = ln(probs) (llama.cpp's sampler_tester). */
static void log_of(const float *probs, float *logits, int n) {
    for (int i = 0; i < n; i++) logits[i] = logf(probs[i]);
}

/* The probability of each id in a distribution (0 for the ids not in it). */
static void dense(const nu_candidates *c, double *out, int n) {
    for (int i = 0; i < n; i++) out[i] = 0;
    for (size_t i = 0; i < c->size; i++) out[c->data[i].id] += c->data[i].prob;
}

#define N_DRAWS 40000
/* chi-square critical values at p = 0.001, 1..9 degrees of freedom */
static const double chi2_crit[] = {0,     10.83, 13.82, 16.27, 18.47,
                                   20.52, 22.46, 24.32, 26.12, 27.88};

static const double base_probs[7] = {0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.02};

/* Draws N_DRAWS tokens from ln(base_probs) (accepting nothing) and checks
 * their frequencies against want (normalised here; 0: never drawn). */
static void expect_draws(const nu_sampler_params *sp, double *want) {
    float logits[7];
    for (int i = 0; i < 7; i++) logits[i] = (float)log(base_probs[i]);
    double sum = 0;
    for (int i = 0; i < 7; i++) sum += want[i];
    for (int i = 0; i < 7; i++) want[i] /= sum;
    nu_sampler *s = new_sampler(sp, 7);
    int counts[7] = {0};
    for (int i = 0; i < N_DRAWS; i++) counts[nu_sampler_sample(s, logits)]++;
    nu_sampler_free(s);
    double chi = 0;
    int df = -1;
    for (int i = 0; i < 7; i++) {
        if (want[i] == 0) {
            assert_int_equal(counts[i], 0);
            continue;
        }
        double e = want[i] * N_DRAWS;
        chi += (counts[i] - e) * (counts[i] - e) / e;
        df++;
    }
    print_message("chi2 = %.2f (df %d, critical %.2f)\n", chi, df, chi2_crit[df]);
    assert_true(df >= 1 && chi < chi2_crit[df]);
}

/* The candidates of a hand-made array. */
static void fill(nu_candidate *data, nu_candidates *c, const float *logits, int n) {
    for (int i = 0; i < n; i++) data[i] = (nu_candidate){i, logits[i], 0};
    *c = (nu_candidates){data, (size_t)n, false, -1};
}

/* ---- XTC ----------------------------------------------------------------- */

/* llama.cpp's XTC vectors: {0.4, 0.3, 0.2, 0.1} with thresholds 0.09, 0.19,
 * 0.29 keep {0.1}, {0.2, 0.1}, {0.3, 0.2, 0.1}; with 0.39 only one token
 * passes and nothing is removed. (llama.cpp uses probability 0.99; 1 makes
 * the removal certain.) */
static void test_xtc_exact(void **state) {
    (void)state;
    const float probs[4] = {0.4f, 0.3f, 0.2f, 0.1f};
    const float thresholds[] = {0.09f, 0.19f, 0.29f, 0.39f};
    const size_t kept[] = {1, 2, 3, 4};
    nu_rng rng;
    nu_rng_seed(&rng, 1);
    for (int k = 0; k < 4; k++) {
        float logits[4];
        log_of(probs, logits, 4);
        nu_candidate data[4];
        nu_candidates c;
        fill(data, &c, logits, 4);
        nu_stage_xtc(&c, 1.0f, thresholds[k], &rng);
        assert_int_equal(c.size, kept[k]);
        /* the least likely tokens stay: ids 4 - kept .. 3 */
        for (size_t i = 0; i < c.size; i++) assert_true(c.data[i].id >= 4 - (int)kept[k]);
    }
    /* off: probability 0, or a threshold above 0.5 */
    float logits[4];
    log_of(probs, logits, 4);
    nu_candidate data[4];
    nu_candidates c;
    fill(data, &c, logits, 4);
    nu_stage_xtc(&c, 0.0f, 0.09f, &rng);
    assert_int_equal(c.size, 4);
    nu_stage_xtc(&c, 1.0f, 0.51f, &rng);
    assert_int_equal(c.size, 4);
}

/* With probability 0.5 and threshold 0.12 the tokens 0.40 and 0.25 go
 * (0.15 is the least likely above it): half the draws come from the full
 * distribution, half from the rest renormalised. */
static void test_xtc_distribution(void **state) {
    (void)state;
    nu_sampler_params sp = plain();
    sp.xtc_probability = 0.5f;
    sp.xtc_threshold = 0.12f;
    double rest = 0.15 + 0.10 + 0.05 + 0.03 + 0.02, want[7];
    for (int i = 0; i < 7; i++)
        want[i] = 0.5 * base_probs[i] + (i >= 2 ? 0.5 * base_probs[i] / rest : 0);
    expect_draws(&sp, want);
    /* probability 1: always removed */
    sp.xtc_probability = 1.0f;
    double only_rest[7] = {0, 0, 0.15, 0.10, 0.05, 0.03, 0.02};
    expect_draws(&sp, only_rest);
}

/* ---- top-nσ -------------------------------------------------------------- */

/* llama.cpp's vectors: {0.1, 0.2, 0.3, 0.4} with n = 1 gives {0, 0,
 * 0.428571, 0.571429}; n = 0 and n = 3 change nothing. */
static void test_top_n_sigma_exact(void **state) {
    (void)state;
    const float probs[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    const float ns[] = {1.0f, 0.0f, 3.0f, -1.0f};
    const double want[][4] = {{0, 0, 0.428571, 0.571429},
                              {0.1, 0.2, 0.3, 0.4},
                              {0.1, 0.2, 0.3, 0.4},
                              {0.1, 0.2, 0.3, 0.4}};
    for (int k = 0; k < 4; k++) {
        float logits[4];
        log_of(probs, logits, 4);
        nu_candidate data[4];
        nu_candidates c;
        fill(data, &c, logits, 4);
        nu_stage_top_n_sigma(&c, ns[k]);
        assert_int_equal(c.size, 4); /* masked, not removed */
        nu_candidates_softmax(&c);
        double got[4];
        dense(&c, got, 4);
        for (int i = 0; i < 4; i++) assert_true(fabs(got[i] - want[k][i]) < 1e-5);
    }
}

/* The draws follow the tokens within n standard deviations of the top
 * logit: with n = 1, on the base logits. */
static void test_top_n_sigma_distribution(void **state) {
    (void)state;
    double l[7], mean = 0, var = 0, want[7];
    for (int i = 0; i < 7; i++) mean += (l[i] = log(base_probs[i])) / 7;
    for (int i = 0; i < 7; i++) var += (l[i] - mean) * (l[i] - mean) / 7;
    for (int i = 0; i < 7; i++) want[i] = l[i] >= l[0] - sqrt(var) ? base_probs[i] : 0;
    assert_true(want[2] > 0 && want[4] == 0); /* the cut falls inside the array */
    nu_sampler_params sp = plain();
    sp.top_n_sigma = 1.0f;
    expect_draws(&sp, want);
}

/* ---- dynamic temperature --------------------------------------------------- */

/* The temperature llama.cpp's temp_ext would pick: t0 + (t1 - t0) *
 * (H / ln n)^exponent over the softmax of the logits. */
static double dynatemp_of(const double *p, int n, double t, double range, double exponent) {
    double h = 0, lo = t - range > 0 ? t - range : 0, hi = t + range;
    for (int i = 0; i < n; i++)
        if (p[i] > 0) h -= p[i] * log(p[i]);
    return lo + (hi - lo) * pow(h / log((double)n), exponent);
}

/* llama.cpp's vectors for range 0 (plain temperature, and temperature 0
 * keeping only the most likely token), then the formula for a range. */
static void test_dynatemp_exact(void **state) {
    (void)state;
    const float probs[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    float logits[4];
    nu_candidate data[4];
    nu_candidates c;
    log_of(probs, logits, 4);
    fill(data, &c, logits, 4);
    assert_true(nu_stage_dynatemp(&c, 1.0f, 0.0f, 1.0f) == 1.0f);
    nu_candidates_softmax(&c);
    for (int i = 0; i < 4; i++) assert_true(fabs(c.data[i].prob - probs[i]) < 1e-5);

    double p[4] = {0.1, 0.2, 0.3, 0.4};
    const float ts[] = {1.0f, 0.5f, 0.2f}, ranges[] = {0.5f, 0.5f, 0.5f}, exps[] = {1, 2, 0.5f};
    for (int k = 0; k < 3; k++) {
        fill(data, &c, logits, 4);
        double want = dynatemp_of(p, 4, ts[k], ranges[k], exps[k]);
        float got = nu_stage_dynatemp(&c, ts[k], ranges[k], exps[k]);
        assert_true(fabs(got - want) < 1e-5);
        nu_candidates_softmax(&c);
        double z = 0;
        for (int i = 0; i < 4; i++) z += pow(p[i], 1 / want);
        for (int i = 0; i < 4; i++)
            assert_true(fabs(c.data[i].prob - pow(p[i], 1 / want) / z) < 1e-5);
    }
    /* a single finite candidate: entropy 0, temperature max(0, t - range) = 0,
     * which keeps the most likely token only */
    float one[3] = {1.0f, -INFINITY, -INFINITY};
    fill(data, &c, one, 3);
    assert_true(nu_stage_dynatemp(&c, 0.3f, 0.5f, 1.0f) == 0.0f);
    assert_true(c.data[0].logit == 1.0f && c.data[1].logit == -INFINITY);
}

/* Temperature 1 +- 0.5 and exponents 1 and 3: the draws follow p^(1/T). */
static void test_dynatemp_distribution(void **state) {
    (void)state;
    const float exps[] = {1.0f, 3.0f};
    for (int k = 0; k < 2; k++) {
        double t = dynatemp_of(base_probs, 7, 1.0, 0.5, exps[k]), want[7];
        print_message("dynamic temperature %.4f\n", t);
        for (int i = 0; i < 7; i++) want[i] = pow(base_probs[i], 1 / t);
        nu_sampler_params sp = plain();
        sp.dynatemp_range = 0.5f;
        sp.dynatemp_exponent = exps[k];
        expect_draws(&sp, want);
    }
    /* temperature 0 with a range samples (at T in [0, range]), it is not greedy */
    nu_sampler_params sp = plain();
    sp.temperature = 0.0f;
    sp.dynatemp_range = 1.0f;
    double t = dynatemp_of(base_probs, 7, 0.0, 1.0, 1.0), want[7];
    for (int i = 0; i < 7; i++) want[i] = pow(base_probs[i], 1 / t);
    expect_draws(&sp, want);
}

/* LLaMA's SentencePiece vocabulary (a vocab-only file). */
static nu_model *llama_vocab(void) {
    nu_model *m = NULL;
    nu_model_params mp = nu_model_default_params();
    mp.mode = NU_LOAD_VOCAB_ONLY;
    assert_int_equal(
        nu_model_load(nu_test_shared("vocab/ggml-vocab-llama-spm.gguf"), &mp, &m, NULL), NU_OK);
    return m;
}

/* ---- DRY ------------------------------------------------------------------- */

/* A DRY-only sampler after the history; breakers as token sequences. */
static void dry_probs(const float *probs, int n, const int32_t *hist, int n_hist, float mult,
                      float base, int32_t allowed, int32_t last_n, const nu_token_seq *breakers,
                      int n_breakers, double *out) {
    nu_sampler_params sp = plain();
    sp.dry_multiplier = mult;
    sp.dry_base = base;
    sp.dry_allowed_length = allowed;
    sp.dry_penalty_last_n = last_n;
    sp.n_dry_sequence_breakers = 0;
    sp.order[0] = NU_STAGE_DRY;
    sp.n_stages = 1;
    nu_sampler *s = new_sampler(&sp, n);
    assert_int_equal(nu_sampler_set_dry_breakers(s, breakers, n_breakers, NULL), NU_OK);
    for (int i = 0; i < n_hist; i++) nu_sampler_accept(s, hist[i]);
    float logits[16];
    log_of(probs, logits, n);
    dense(nu_sampler_distribution(s, logits), out, n);
    nu_sampler_free(s);
}

static void expect_probs(const double *got, const double *want, int n) {
    for (int i = 0; i < n; i++) {
        if (fabs(got[i] - want[i]) >= 1e-5)
            print_message("p[%d] = %.6f, want %.6f\n", i, got[i], want[i]);
        assert_true(fabs(got[i] - want[i]) < 1e-5);
    }
}

/* llama.cpp's five DRY vectors (tests/test-sampling.cpp). */
static void test_dry_llama_vectors(void **state) {
    (void)state;
    const float q4[4] = {0.25f, 0.25f, 0.25f, 0.25f}, q5[5] = {0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
    double got[5];
    {
        const int32_t h[] = {0, 1};
        const double want[] = {0.25, 0.25, 0.25, 0.25};
        dry_probs(q4, 4, h, 2, 1.0f, 1.1f, 2, 4, NULL, 0, got);
        expect_probs(got, want, 4);
    }
    {
        const int32_t h[] = {0, 1, 2, 0, 1};
        const double want[] = {0.296923, 0.296923, 0.109232, 0.296923};
        dry_probs(q4, 4, h, 5, 1.0f, 1.1f, 2, 5, NULL, 0, got);
        expect_probs(got, want, 4);
    }
    {
        const int32_t h[] = {0, 1, 3, 4, 0, 1}, b3[] = {3};
        const nu_token_seq br[] = {{b3, 1}};
        const double want[] = {0.2, 0.2, 0.2, 0.2, 0.2};
        dry_probs(q5, 5, h, 6, 1.0f, 1.1f, 2, 6, br, 1, got);
        expect_probs(got, want, 5);
    }
    {
        const int32_t h[] = {0, 1, 2, 0, 1};
        const double want[] = {0.241818, 0.241818, 0.032727, 0.241818, 0.241818};
        dry_probs(q5, 5, h, 5, 2.0f, 1.1f, 2, 5, NULL, 0, got);
        expect_probs(got, want, 5);
    }
    {
        const int32_t h[] = {0, 1, 2, 3, 4, 0, 1};
        const double want[] = {0.2, 0.2, 0.2, 0.2, 0.2};
        dry_probs(q5, 5, h, 7, 1.0f, 1.1f, 4, 7, NULL, 0, got);
        expect_probs(got, want, 5);
    }
}

/* The penalty multiplier * base^(L - allowed) of the longest repeat a token
 * extends, on logits 0: "1 2 3 4 1 2 3" makes 4 extend "1 2 3" (L = 3). */
static void dry_logits(const int32_t *hist, int n_hist, int32_t last_n, const nu_token_seq *br,
                       int n_br, float mult, float base, float *out) {
    nu_sampler_params sp = plain();
    sp.dry_multiplier = mult;
    sp.dry_base = base;
    sp.dry_allowed_length = 2;
    sp.dry_penalty_last_n = last_n;
    sp.n_dry_sequence_breakers = 0;
    sp.order[0] = NU_STAGE_DRY;
    sp.n_stages = 1;
    nu_sampler *s = new_sampler(&sp, 10);
    assert_int_equal(nu_sampler_set_dry_breakers(s, br, n_br, NULL), NU_OK);
    for (int i = 0; i < n_hist; i++) nu_sampler_accept(s, hist[i]);
    float logits[10] = {0};
    const nu_candidates *c = nu_sampler_distribution(s, logits);
    for (size_t i = 0; i < c->size; i++) out[c->data[i].id] = c->data[i].logit;
    nu_sampler_free(s);
}

static void test_dry_penalties(void **state) {
    (void)state;
    const int32_t h[] = {1, 2, 3, 4, 1, 2, 3};
    float l[10];
    dry_logits(h, 7, 64, NULL, 0, 0.8f, 1.75f, l);
    assert_true(fabs(l[4] + 0.8f * 1.75f) < 1e-6); /* L = 3: 0.8 * 1.75^1 */
    for (int i = 0; i < 10; i++)
        if (i != 4) assert_true(l[i] == 0.0f);
    /* a window of 3 sees only "1 2 3": nothing repeats */
    dry_logits(h, 7, 3, NULL, 0, 0.8f, 1.75f, l);
    assert_true(l[4] == 0.0f);
    /* -1: the whole history */
    dry_logits(h, 7, -1, NULL, 0, 0.8f, 1.75f, l);
    assert_true(fabs(l[4] + 0.8f * 1.75f) < 1e-6);
    /* multi-token breakers: "2 3" at the end limits repeats to the 0 tokens
     * after it, "1 2" to 1: no penalty; "2 4" never occurs: penalty */
    const int32_t s23[] = {2, 3}, s12[] = {1, 2}, s24[] = {2, 4};
    const nu_token_seq b23 = {s23, 2}, b12 = {s12, 2}, b24 = {s24, 2};
    dry_logits(h, 7, 64, &b23, 1, 0.8f, 1.75f, l);
    assert_true(l[4] == 0.0f);
    dry_logits(h, 7, 64, &b12, 1, 0.8f, 1.75f, l);
    assert_true(l[4] == 0.0f);
    dry_logits(h, 7, 64, &b24, 1, 0.8f, 1.75f, l);
    assert_true(fabs(l[4] + 0.8f * 1.75f) < 1e-6);
    /* a token that is a breaker by itself is never penalised */
    const int32_t s4[] = {4};
    const nu_token_seq b4 = {s4, 1};
    dry_logits(h, 7, 64, &b4, 1, 0.8f, 1.75f, l);
    assert_true(l[4] == 0.0f);
    /* the longest repeat counts: "5 1 2 3 9 ... 1 2 3 7 ... 5 1 2 3": 9 extends
     * "5 1 2 3" (L = 4), 7 only "1 2 3" (L = 3) */
    const int32_t h2[] = {5, 1, 2, 3, 9, 8, 1, 2, 3, 7, 6, 5, 1, 2, 3};
    dry_logits(h2, 15, -1, NULL, 0, 1.0f, 2.0f, l);
    assert_true(fabs(l[9] + 4.0f) < 1e-6); /* 2^(4-2) */
    assert_true(fabs(l[7] + 2.0f) < 1e-6); /* 2^(3-2) */
    /* the exponent is capped where base^x would overflow a float: base 100
     * allows 100^19 (19 = floor(88.72 / ln 100)); a repeat of 40 stays finite */
    int32_t h3[81];
    for (int i = 0; i < 81; i++) h3[i] = i < 40 ? 1 + i % 3 : i == 40 ? 9 : 1 + (i - 41) % 3;
    dry_logits(h3, 81, -1, NULL, 0, 1.0f, 100.0f, l);
    assert_true(isfinite(l[9]));
    assert_true(fabs(l[9] + 1e38f) < 1e32f);
}

/* Breaker strings looked up in a real vocabulary (LLaMA's SentencePiece):
 * "\n" makes the newline token a breaker by itself, so "a b \n a b" does
 * not penalise a newline that would extend "a b", which it does without. */
static void test_dry_breaker_strings(void **state) {
    (void)state;
    nu_model *m = llama_vocab();
    nu_error err;
    int32_t n_vocab = nu_model_n_vocab(m), nl = -1;
    char buf[16];
    for (int32_t t = 0; t < n_vocab && nl < 0; t++)
        if (nu_token_to_bytes(m, t, true, buf, sizeof buf) == 1 && buf[0] == '\n') nl = t;
    assert_true(nl >= 0);
    int32_t a = 263, b = 289; /* any two ordinary tokens */
    const int32_t h[] = {a, b, nl, a, b};
    for (int with = 0; with < 2; with++) {
        nu_sampler_params sp = plain();
        sp.dry_multiplier = 1.0f;
        sp.order[0] = NU_STAGE_DRY;
        sp.n_stages = 1;
        if (!with) sp.n_dry_sequence_breakers = 0;
        nu_sampler *s;
        assert_int_equal(nu_sampler_new_for_model(&sp, m, &s, &err), NU_OK);
        for (int i = 0; i < 5; i++) nu_sampler_accept(s, h[i]);
        float *logits = calloc((size_t)n_vocab, sizeof *logits);
        const nu_candidates *c = nu_sampler_distribution(s, logits);
        float nl_logit = 0;
        for (size_t i = 0; i < c->size; i++)
            if (c->data[i].id == nl) nl_logit = c->data[i].logit;
        assert_true(with ? nl_logit == 0.0f : fabs(nl_logit + 1.0f) < 1e-6);
        free(logits);
        nu_sampler_free(s);
    }
    /* without a model, breaker strings are an error that says why */
    nu_sampler_params sp = plain();
    sp.dry_multiplier = 1.0f;
    nu_sampler *s;
    assert_int_equal(nu_sampler_new(&sp, 10, &s, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "sequence breakers"));
    nu_model_free(m);
}

/* ---- mirostat ------------------------------------------------------------- */

/* Zipf logits over n tokens: -s ln(i + 1). */
static float *zipf_logits(int n, double s) {
    float *l = malloc((size_t)n * sizeof *l);
    for (int i = 0; i < n; i++) l[i] = (float)(-s * log(i + 1.0));
    return l;
}

/* On an exact Zipf law the estimated exponent is s itself, so v1 keeps
 * k = ((s - 1) 2^mu / (1 - N^(1 - s)))^(1 / s) tokens, the formula of
 * llama.cpp's mirostat (and Basu et al.'s Algorithm 1). v2 keeps the tokens
 * of surprise -log2 p <= mu. */
static void test_mirostat_truncation(void **state) {
    (void)state;
    const int n = 1000;
    const double s = 1.5;
    float *logits = zipf_logits(n, s);
    double z = 0;
    for (int i = 0; i < n; i++) z += exp(logits[i]);
    const float mus[] = {4.0f, 6.0f, 10.0f};
    for (int k = 0; k < 3; k++) {
        nu_sampler_params sp = plain();
        sp.mirostat = 1;
        sp.mirostat_tau = mus[k] / 2; /* mu starts at 2 tau */
        nu_sampler *smp = new_sampler(&sp, n);
        const nu_candidates *c = nu_sampler_distribution(smp, logits);
        double want = pow((s - 1) * pow(2, mus[k]) / (1 - pow(n, 1 - s)), 1 / s);
        print_message("mu %g: v1 keeps %zu, k = %.3f\n", mus[k], c->size, want);
        assert_int_equal(c->size, (size_t)want);
        nu_sampler_free(smp);

        sp.mirostat = 2;
        smp = new_sampler(&sp, n);
        c = nu_sampler_distribution(smp, logits);
        size_t kept = 0;
        for (int i = 0; i < n; i++) kept += -log2(exp(logits[i]) / z) <= mus[k];
        assert_int_equal(c->size, kept);
        for (size_t i = 0; i < c->size; i++) assert_true(c->data[i].id < (int32_t)kept);
        nu_sampler_free(smp);
    }
    free(logits);
}

/* Generating from a fixed Zipf distribution, the surprise of the drawn
 * tokens (in the distribution they were drawn from) converges to tau: the
 * mean over the last 1500 of 2000 tokens is within 0.1 bit of it. */
static void test_mirostat_surprise_converges(void **state) {
    (void)state;
    const int n = 2000;
    float *logits = zipf_logits(n, 1.1);
    const float taus[] = {3.0f, 5.0f};
    for (int v = 1; v <= 2; v++) {
        for (int k = 0; k < 2; k++) {
            nu_sampler_params sp = plain();
            sp.mirostat = v;
            sp.mirostat_tau = taus[k];
            sp.top_k = 40; /* skipped by mirostat */
            nu_sampler *s = new_sampler(&sp, n);
            double sum = 0, first = 0;
            for (int i = 0; i < 2000; i++) {
                int32_t t = nu_sampler_sample(s, logits);
                const nu_candidates *c = nu_sampler_last_candidates(s);
                double surprise = -log2(c->data[c->selected].prob);
                assert_int_equal(c->data[c->selected].id, t);
                if (i < 10) first += surprise / 10;
                if (i >= 500) sum += surprise;
                nu_sampler_accept(s, t);
            }
            double mean = sum / 1500;
            print_message("mirostat v%d, tau %.1f: first surprises %.2f, then %.3f\n", v, taus[k],
                          first, mean);
            assert_true(fabs(mean - taus[k]) < 0.1);
            nu_sampler_free(s);
        }
    }
    free(logits);
}

/* mu starts again at 2 tau after a reset, and greedy skips mirostat. */
static void test_mirostat_reset_and_greedy(void **state) {
    (void)state;
    const int n = 500;
    float *logits = zipf_logits(n, 1.2);
    nu_sampler_params sp = plain();
    sp.mirostat = 2;
    sp.mirostat_tau = 4.0f;
    nu_sampler *s = new_sampler(&sp, n);
    size_t first = nu_sampler_distribution(s, logits)->size;
    for (int i = 0; i < 50; i++) nu_sampler_accept(s, nu_sampler_sample(s, logits));
    nu_sampler_reset(s);
    assert_int_equal(nu_sampler_distribution(s, logits)->size, first);
    nu_sampler_free(s);
    sp.temperature = 0.0f;
    s = new_sampler(&sp, n);
    for (int i = 0; i < 20; i++) assert_int_equal(nu_sampler_sample(s, logits), 0);
    nu_sampler_free(s);
    free(logits);
}

/* ---- bans ------------------------------------------------------------------ */

/* A banned sequence {1, 2}: token 2 can follow anything but 1; {5} is never
 * drawn. */
static void test_banned_sequences(void **state) {
    (void)state;
    const int32_t s12[] = {1, 2}, s5[] = {5};
    const nu_token_seq bans[] = {{s12, 2}, {s5, 1}};
    nu_sampler_params sp = plain();
    sp.banned_tokens = bans;
    sp.n_banned_tokens = 2;
    double want[7];
    for (int i = 0; i < 7; i++) want[i] = i == 5 ? 0 : base_probs[i];
    expect_draws(&sp, want);
    nu_sampler *s = new_sampler(&sp, 7);
    float logits[7];
    for (int i = 0; i < 7; i++) logits[i] = (float)log(base_probs[i]);
    double p[7];
    nu_sampler_accept(s, 1);
    dense(nu_sampler_distribution(s, logits), p, 7);
    assert_true(p[2] == 0 && p[5] == 0 && p[1] > 0);
    nu_sampler_accept(s, 3);
    dense(nu_sampler_distribution(s, logits), p, 7);
    assert_true(p[2] > 0 && p[5] == 0);
    /* the prompt is not generated text: a prompt ending in 1 bans nothing */
    nu_sampler_reset(s);
    nu_sampler_accept_prompt(s, s12, 1);
    dense(nu_sampler_distribution(s, logits), p, 7);
    assert_true(p[2] > 0);
    nu_sampler_free(s);
    /* a token outside the vocabulary is refused when the sampler is made */
    const int32_t big[] = {7};
    const nu_token_seq bad = {big, 1};
    sp.banned_tokens = &bad;
    sp.n_banned_tokens = 1;
    nu_error err;
    assert_int_equal(nu_sampler_new(&sp, 7, &s, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "banned_tokens"));
}

/* Random text from a real vocabulary, pushed towards the pieces of the
 * banned strings (each token whose text is a piece of one gets +6): without
 * the ban they appear, with it they never do, whatever tokens spell them. */
static void test_banned_strings_never_appear(void **state) {
    (void)state;
    nu_model *m = llama_vocab();
    nu_error err;
    const char *banned[] = {"hello world", "abc", "xyz!"};
    int32_t n_vocab = nu_model_n_vocab(m);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    char piece[64];
    for (int32_t t = 0; t < n_vocab; t++) {
        size_t k = nu_token_to_bytes(m, t, false, piece, sizeof piece - 1);
        piece[k < sizeof piece ? k : sizeof piece - 1] = 0;
        bool part = false;
        for (int b = 0; b < 3 && k > 0 && k < sizeof piece; b++)
            part |= strstr(banned[b], piece) != NULL;
        logits[t] = part ? 6.0f : 0.0f;
    }
    int found[2] = {0, 0};
    for (int with = 0; with < 2; with++) {
        for (int run = 0; run < 4; run++) {
            nu_sampler_params sp = plain();
            sp.seed = (uint64_t)run + 1;
            if (with) sp.banned_strings = banned, sp.n_banned_strings = 3;
            nu_sampler *s;
            assert_int_equal(nu_sampler_new_for_model(&sp, m, &s, &err), NU_OK);
            char *text = calloc(1, 1 << 16);
            size_t len = 0;
            for (int i = 0; i < 400; i++) {
                int32_t t = nu_sampler_sample(s, logits);
                nu_sampler_accept(s, t);
                len += nu_token_to_bytes(m, t, false, text + len, (1 << 16) - 1 - len);
            }
            for (int b = 0; b < 3; b++)
                found[with] += memmem(text, len, banned[b], strlen(banned[b])) != NULL;
            free(text);
            nu_sampler_free(s);
        }
    }
    print_message("banned strings found: %d without the ban, %d with it\n", found[0], found[1]);
    assert_true(found[0] > 0);
    assert_int_equal(found[1], 0);
    /* without a model, banned strings are an error that says why */
    nu_sampler_params sp = plain();
    sp.banned_strings = banned;
    sp.n_banned_strings = 1;
    nu_sampler *s;
    assert_int_equal(nu_sampler_new(&sp, 10, &s, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "banned strings"));
    free(logits);
    nu_model_free(m);
}

/* A real model's greedy story names Lily; with "Lily" banned, the text
 * never holds it (the model has to spell something else). */
static void test_banned_strings_generation(void **state) {
    (void)state;
    nu_model *m;
    assert_int_equal(nu_test_load_model("models/stories260K.gguf", &m), 0);
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 1;
    nu_context *ctx;
    assert_int_equal(nu_context_new(m, &cp, &ctx, NULL), NU_OK);
    const char *banned[] = {"Lily", " park"};
    for (int with = 0; with < 2; with++) {
        nu_generate_params gp = nu_generate_default_params();
        gp.n_predict = 100;
        gp.sampling.temperature = 0.0f;
        if (with) gp.sampling.banned_strings = banned, gp.sampling.n_banned_strings = 2;
        nu_generate_result res;
        nu_error err;
        assert_int_equal(nu_generate(ctx, "Once upon a time", &gp, &res, &err), NU_OK);
        print_message("%s: %s\n", with ? "banned" : "plain", res.text);
        bool lily = strstr(res.text, "Lily") != NULL, park = strstr(res.text, " park") != NULL;
        assert_true(with ? !lily && !park : lily && park);
        nu_generate_result_free(&res);
    }
    nu_context_free(ctx);
    nu_model_free(m);
}

/* ---- parameters ------------------------------------------------------------ */

static void expect_refused(nu_sampler_params sp, const char *field) {
    nu_error err;
    assert_int_equal(nu_sampler_params_check(&sp, &err), NU_ERR_INVALID_ARG);
    if (!strstr(err.message, field)) print_message("message: %s\n", err.message);
    assert_non_null(strstr(err.message, field));
}

static void test_bad_params(void **state) {
    (void)state;
    nu_sampler_params d = nu_sampler_default_params(), sp;
    assert_int_equal(nu_sampler_params_check(&d, NULL), NU_OK);
#define REFUSE(assign, name) (sp = d, assign, expect_refused(sp, name))
    REFUSE(sp.dry_multiplier = -0.1f, "dry_multiplier");
    REFUSE(sp.dry_multiplier = NAN, "dry_multiplier");
    REFUSE(sp.dry_base = 0.9f, "dry_base");
    REFUSE(sp.dry_allowed_length = -1, "dry_allowed_length");
    REFUSE(sp.dry_penalty_last_n = -2, "dry_penalty_last_n");
    REFUSE(sp.xtc_probability = 1.5f, "xtc_probability");
    REFUSE(sp.xtc_threshold = -0.1f, "xtc_threshold");
    REFUSE(sp.top_n_sigma = -2.0f, "top_n_sigma");
    REFUSE(sp.top_n_sigma = INFINITY, "top_n_sigma");
    REFUSE(sp.dynatemp_range = -1.0f, "dynatemp_range");
    REFUSE(sp.dynatemp_exponent = -1.0f, "dynatemp_exponent");
    REFUSE(sp.mirostat = 3, "mirostat");
    REFUSE(sp.mirostat_tau = -1.0f, "mirostat_tau");
    REFUSE(sp.mirostat_eta = 2.0f, "mirostat_eta");
    const char *empty[] = {""}, *long_one[] = {"0123456789012345678901234567890123456789x"};
    REFUSE((sp.dry_sequence_breakers = empty, sp.n_dry_sequence_breakers = 1),
           "dry_sequence_breakers");
    REFUSE((sp.dry_sequence_breakers = long_one, sp.n_dry_sequence_breakers = 1),
           "dry_sequence_breakers");
    REFUSE((sp.banned_strings = empty, sp.n_banned_strings = 1), "banned_strings");
    const nu_token_seq none = {NULL, 0};
    REFUSE((sp.banned_tokens = &none, sp.n_banned_tokens = 1), "banned_tokens");
#undef REFUSE
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xtc_exact),
        cmocka_unit_test(test_xtc_distribution),
        cmocka_unit_test(test_top_n_sigma_exact),
        cmocka_unit_test(test_top_n_sigma_distribution),
        cmocka_unit_test(test_dynatemp_exact),
        cmocka_unit_test(test_dynatemp_distribution),
        cmocka_unit_test(test_dry_llama_vectors),
        cmocka_unit_test(test_dry_penalties),
        cmocka_unit_test(test_dry_breaker_strings),
        cmocka_unit_test(test_mirostat_truncation),
        cmocka_unit_test(test_mirostat_surprise_converges),
        cmocka_unit_test(test_mirostat_reset_and_greedy),
        cmocka_unit_test(test_banned_sequences),
        cmocka_unit_test(test_banned_strings_never_appear),
        cmocka_unit_test(test_banned_strings_generation),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
