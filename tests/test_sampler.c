/* test_sampler.c - the sampler chain, tested statistically: many seeded
 * draws from a known distribution, their frequencies compared with the exact
 * filtered distribution by a chi-square test (critical value at p = 0.001),
 * plus exact checks of what each stage keeps or changes on hand-made logits,
 * of the order, of parameter validation and of the observer. */
#include <math.h>
#include <stdlib.h>
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

/* What a sampler knows before the draws: prompt tokens, accepted tokens and
 * end-of-generation tokens (any may be empty). */
typedef struct history {
    const int32_t *prompt, *accepted, *eog;
    int n_prompt, n_accepted, n_eog;
} history;

static nu_sampler *make_sampler(nu_sampler_params sp, int n_vocab, const history *h) {
    nu_sampler *s;
    nu_error err;
    nu_status st = nu_sampler_new(&sp, n_vocab, &s, &err);
    if (st) print_message("nu_sampler_new: %s\n", err.message);
    assert_int_equal(st, NU_OK);
    if (!h) return s;
    assert_int_equal(nu_sampler_set_eog(s, h->eog, h->n_eog, NULL), NU_OK);
    nu_sampler_accept_prompt(s, h->prompt, h->n_prompt);
    for (int i = 0; i < h->n_accepted; i++) nu_sampler_accept(s, h->accepted[i]);
    return s;
}

/* Draws N_DRAWS tokens from the base logits (sampling accepts nothing, so
 * every draw sees the same history) and returns the chi-square statistic
 * against want (tokens with want 0 must never be drawn). */
static double chi_square_with(nu_sampler_params sp, const history *h, const double *want, int *df) {
    nu_sampler *s = make_sampler(sp, N_VOCAB, h);
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

static void expect_distribution_with(nu_sampler_params sp, const history *h, double *want) {
    normalise(want, N_VOCAB);
    int df;
    double chi = chi_square_with(sp, h, want, &df);
    print_message("chi2 = %.2f (df %d, critical %.2f)\n", chi, df, chi2_crit[df]);
    assert_true(df >= 1);
    assert_true(chi < chi2_crit[df]);
}

static void expect_distribution(nu_sampler_params sp, double *want) {
    expect_distribution_with(sp, NULL, want);
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

/* ---- helpers for the stages that keep state ------------------------------ */

/* want = softmax(logits) in double; -INFINITY gives 0. */
static void want_from_logits(const float *logits, double *want) {
    for (int i = 0; i < N_VOCAB; i++) want[i] = isinf(logits[i]) ? 0 : exp((double)logits[i]);
    normalise(want, N_VOCAB);
}

/* Pure sampling at temperature 1: only the stages under test change
 * anything. */
static nu_sampler_params plain(void) {
    return only(1.0f, 0, 1.0f, 0.0f);
}

static float ctrl(float logit, float penalty) {
    return logit > 0 ? logit / penalty : logit * penalty;
}

#define SMALL_VOCAB 6
static const float small_logits[SMALL_VOCAB] = {2.0f, -1.0f, 0.5f, -0.5f, 1.0f, 3.0f};

/* Samples once from logits and writes the logit the chain left for each
 * token to out (NAN for tokens a filter dropped); returns the token. */
static int32_t chain_logits(nu_sampler_params sp, const history *h, const float *logits,
                            int n_vocab, float *out) {
    nu_sampler *s = make_sampler(sp, n_vocab, h);
    int32_t tok = nu_sampler_sample(s, logits);
    const nu_candidates *c = nu_sampler_last_candidates(s);
    assert_non_null(c);
    for (int i = 0; i < n_vocab; i++) out[i] = NAN;
    for (size_t i = 0; i < c->size; i++) out[c->data[i].id] = c->data[i].logit;
    nu_sampler_free(s);
    return tok;
}

static void assert_logit(float got, float want) {
    if (isinf(want))
        assert_true(got == want);
    else
        assert_true(fabsf(got - want) < 1e-5f);
}

/* ---- statistical tests of the new stages --------------------------------- */

/* Typical-p on the base distribution (entropy H = 1.5611 nats): scores
 * |-ln p - H| order the tokens 1 (0.175), 2 (0.336), 0 (0.645), 3 (0.741),
 * ... so p = 0.3 keeps {1, 2} (0.25 + 0.15 = 0.40), dropping the most
 * likely token, and p = 0.85 keeps {1, 2, 0, 3} (0.90). */
static void test_typical_p(void **state) {
    (void)state;
    nu_sampler_params sp = plain();
    sp.typical_p = 0.3f;
    double want[N_VOCAB] = {0, 0.25, 0.15};
    expect_distribution(sp, want);
    sp.typical_p = 0.85f;
    double want2[N_VOCAB] = {0.40, 0.25, 0.15, 0.10};
    expect_distribution(sp, want2);
}

/* Additive biases (two entries for one token add up) and a ban. */
static void test_logit_bias_distribution(void **state) {
    (void)state;
    nu_logit_bias bias[] = {{6, logf(10.0f)}, {0, -INFINITY}, {3, -1.0f}, {3, -0.5f}};
    nu_sampler_params sp = plain();
    sp.logit_bias = bias;
    sp.n_logit_bias = 4;
    float l[N_VOCAB];
    base_logits(l);
    l[6] += logf(10.0f);
    l[0] = -INFINITY;
    l[3] -= 1.5f;
    double want[N_VOCAB];
    want_from_logits(l, want);
    expect_distribution(sp, want);
}

/* Repetition, frequency and presence penalties over history 0 0 2 5:
 * token 0 (positive logit, count 2), 2 and 5 (negative, count 1). */
static void test_penalties_distribution(void **state) {
    (void)state;
    nu_sampler_params sp = plain();
    sp.repeat_penalty = 1.5f;
    sp.frequency_penalty = 0.2f;
    sp.presence_penalty = 0.3f;
    const int32_t seen[] = {0, 0, 2, 5};
    history h = {.accepted = seen, .n_accepted = 4};
    float l[N_VOCAB];
    base_logits(l);
    l[0] = ctrl(l[0], 1.5f) - 2 * 0.2f - 0.3f;
    l[2] = ctrl(l[2], 1.5f) - 0.2f - 0.3f;
    l[5] = ctrl(l[5], 1.5f) - 0.2f - 0.3f;
    double want[N_VOCAB];
    want_from_logits(l, want);
    expect_distribution_with(sp, &h, want);
}

/* No repeated bigram: after 1 2 0 1, "1 2" exists, so 2 is banned. */
static void test_no_repeat_ngram_distribution(void **state) {
    (void)state;
    nu_sampler_params sp = plain();
    sp.no_repeat_ngram_size = 2;
    const int32_t seen[] = {1, 2, 0, 1};
    history h = {.accepted = seen, .n_accepted = 4};
    double want[N_VOCAB];
    memcpy(want, base_probs, sizeof want);
    want[2] = 0;
    expect_distribution_with(sp, &h, want);
}

/* The guard over 0 1 0 1 0 1: n = 6, distinct tokens 2, distinct bigrams 2
 * of 5, longest repeated suffix 4 ("0 1 0 1" also ends at position 3), so
 * severity = (4/6 + 3/5 + 4/6) / 3 and tokens 0 and 1 get the CTRL penalty
 * 1 + 2 * severity. */
static void test_repetition_guard_distribution(void **state) {
    (void)state;
    nu_sampler_params sp = plain();
    sp.guard_strength = 2.0f;
    const int32_t seen[] = {0, 1, 0, 1, 0, 1};
    history h = {.accepted = seen, .n_accepted = 6};
    double severity = (4.0 / 6 + 3.0 / 5 + 4.0 / 6) / 3;
    float factor = (float)(1 + 2 * severity), l[N_VOCAB];
    base_logits(l);
    l[0] = ctrl(l[0], factor);
    l[1] = ctrl(l[1], factor);
    double want[N_VOCAB];
    want_from_logits(l, want);
    expect_distribution_with(sp, &h, want);
}

/* ignore_eos removes the end-of-generation tokens from the distribution. */
static void test_ignore_eos_distribution(void **state) {
    (void)state;
    nu_sampler_params sp = plain();
    sp.ignore_eos = true;
    const int32_t eog[] = {0, 4};
    history h = {.eog = eog, .n_eog = 2};
    double want[N_VOCAB];
    memcpy(want, base_probs, sizeof want);
    want[0] = want[4] = 0;
    expect_distribution_with(sp, &h, want);
}

/* The temp_first preset: temperature 3, then top-k 5, then top-p 0.5 on
 * the renormalised top 5. */
static void test_temp_first_distribution(void **state) {
    (void)state;
    nu_sampler_params sp = only(3.0f, 5, 0.5f, 0.0f);
    assert_int_equal(nu_sampler_order_parse("temp_first", sp.order, &sp.n_stages, NULL), NU_OK);
    double t[N_VOCAB], want[N_VOCAB] = {0};
    for (int i = 0; i < N_VOCAB; i++) t[i] = i < 5 ? pow(base_probs[i], 1.0 / 3.0) : 0;
    normalise(t, N_VOCAB);
    double cum = 0;
    for (int i = 0; i < N_VOCAB && cum < 0.5; i++) cum += want[i] = t[i];
    expect_distribution(sp, want);
}

/* ---- exact tests of the stages that keep state --------------------------- */

/* Repetition (CTRL), frequency and presence penalties on hand-made logits,
 * by the formula: positive logits divided, negative multiplied, then
 * count * frequency + presence subtracted. */
static void test_penalties_exact(void **state) {
    (void)state;
    nu_sampler_params sp = plain();
    sp.repeat_penalty = 2.0f;
    sp.frequency_penalty = 0.5f;
    sp.presence_penalty = 0.25f;
    const int32_t seen[] = {0, 1, 1, 3};
    history h = {.accepted = seen, .n_accepted = 4};
    float out[SMALL_VOCAB];
    chain_logits(sp, &h, small_logits, SMALL_VOCAB, out);
    const float want[SMALL_VOCAB] = {2.0f / 2 - 0.5f - 0.25f,
                                     -1.0f * 2 - 2 * 0.5f - 0.25f,
                                     0.5f,
                                     -0.5f * 2 - 0.5f - 0.25f,
                                     1.0f,
                                     3.0f};
    for (int i = 0; i < SMALL_VOCAB; i++) assert_logit(out[i], want[i]);
    /* a window of the last 2 tokens (1 3): token 0 is free again, 1 counts once */
    sp.penalty_last_n = 2;
    chain_logits(sp, &h, small_logits, SMALL_VOCAB, out);
    assert_logit(out[0], 2.0f);
    assert_logit(out[1], -1.0f * 2 - 0.5f - 0.25f);
    assert_logit(out[3], -0.5f * 2 - 0.5f - 0.25f);
    /* penalty_last_n 0 turns the penalties off */
    sp.penalty_last_n = 0;
    chain_logits(sp, &h, small_logits, SMALL_VOCAB, out);
    for (int i = 0; i < SMALL_VOCAB; i++) assert_logit(out[i], small_logits[i]);
}

/* The window: -1 is the whole history, n the last n tokens; the prompt
 * counts only with penalize_prompt; reset forgets everything. */
static void test_penalty_window(void **state) {
    (void)state;
    int32_t seen[101];
    seen[0] = 4;
    for (int i = 1; i < 101; i++) seen[i] = 5;
    const int32_t prompt[] = {2};
    history h = {.prompt = prompt, .n_prompt = 1, .accepted = seen, .n_accepted = 101};
    nu_sampler_params sp = plain();
    sp.presence_penalty = 1.0f;
    float out[SMALL_VOCAB];
    chain_logits(sp, &h, small_logits, SMALL_VOCAB, out); /* last 64 */
    assert_logit(out[4], 1.0f);
    assert_logit(out[5], 2.0f);
    assert_logit(out[2], 0.5f);
    sp.penalty_last_n = -1;
    chain_logits(sp, &h, small_logits, SMALL_VOCAB, out);
    assert_logit(out[4], 0.0f);
    assert_logit(out[2], 0.5f);
    sp.penalize_prompt = true;
    chain_logits(sp, &h, small_logits, SMALL_VOCAB, out);
    assert_logit(out[2], -0.5f);
    nu_sampler *s = make_sampler(sp, SMALL_VOCAB, &h);
    nu_sampler_reset(s);
    nu_sampler_sample(s, small_logits);
    const nu_candidates *c = nu_sampler_last_candidates(s);
    for (size_t i = 0; i < c->size; i++)
        assert_logit(c->data[i].logit, small_logits[c->data[i].id]);
    nu_sampler_free(s);
}

/* Long histories: the window slides correctly while the history array
 * grows and is compacted (last_n 300 over 1000 tokens), and the whole
 * history (-1) counts everything. */
static void test_long_history(void **state) {
    (void)state;
    int32_t seen[1000];
    for (int i = 0; i < 1000; i++) seen[i] = (int32_t)((i * i + i / 7) % SMALL_VOCAB);
    history h = {.accepted = seen, .n_accepted = 1000};
    const int32_t windows[] = {300, -1};
    for (int w = 0; w < 2; w++) {
        nu_sampler_params sp = plain();
        sp.frequency_penalty = 0.01f;
        sp.penalty_last_n = windows[w];
        sp.no_repeat_ngram_size = w ? 5000 : 0; /* keeps (but never bans from) all history */
        int count[SMALL_VOCAB] = {0};
        for (int i = windows[w] < 0 ? 0 : 1000 - windows[w]; i < 1000; i++) count[seen[i]]++;
        float out[SMALL_VOCAB];
        chain_logits(sp, &h, small_logits, SMALL_VOCAB, out);
        for (int i = 0; i < SMALL_VOCAB; i++)
            assert_logit(out[i], small_logits[i] - 0.01f * (float)count[i]);
    }
}

/* After a filter the array is no longer indexed by token id; the stages
 * then look tokens up and must give the same logits. */
static void test_stages_after_a_filter(void **state) {
    (void)state;
    nu_logit_bias bias[] = {{0, -1.0f}, {2, 0.25f}, {3, -INFINITY}};
    const int32_t seen[] = {0, 2, 0, 4, 3, 0, 2};
    history h = {.accepted = seen, .n_accepted = 7};
    nu_sampler_params sp = plain();
    sp.repeat_penalty = 1.3f;
    sp.frequency_penalty = 0.1f;
    sp.presence_penalty = 0.2f;
    sp.no_repeat_ngram_size = 2;
    sp.guard_strength = 1.0f;
    sp.logit_bias = bias;
    sp.n_logit_bias = 3;
    float by_id[SMALL_VOCAB], filtered[SMALL_VOCAB];
    chain_logits(sp, &h, small_logits, SMALL_VOCAB, by_id);
    sp.top_k = SMALL_VOCAB - 1; /* drops token 1, the lowest logit */
    assert_int_equal(nu_sampler_order_parse("top_k,logit_bias,penalties,no_repeat_ngram,"
                                            "repetition_guard",
                                            sp.order, &sp.n_stages, NULL),
                     NU_OK);
    chain_logits(sp, &h, small_logits, SMALL_VOCAB, filtered);
    assert_true(isnan(filtered[1]));
    for (int i = 0; i < SMALL_VOCAB; i++)
        if (i != 1) assert_logit(filtered[i], by_id[i]);
    assert_true(by_id[3] == -INFINITY); /* the bias bans 3 */
    assert_true(by_id[0] == -INFINITY); /* "2 0" occurred and the history ends in 2 */
}

/* Biases add up per token, -inf bans, and greedy takes the argmax of the
 * biased logits; a token outside the vocabulary is refused. */
static void test_logit_bias_exact(void **state) {
    (void)state;
    nu_logit_bias bias[] = {{1, 2.0f}, {1, 0.5f}, {3, -INFINITY}, {4, -1.0f}};
    nu_sampler_params sp = only(0.0f, 40, 0.95f, 0.05f);
    sp.logit_bias = bias;
    sp.n_logit_bias = 4;
    const float zeros[5] = {0};
    float out[5];
    assert_int_equal(chain_logits(sp, NULL, zeros, 5, out), 1);
    const float want[5] = {0, 2.5f, 0, -INFINITY, -1.0f};
    for (int i = 0; i < 5; i++) assert_logit(out[i], want[i]);
    nu_sampler *s;
    nu_error err;
    assert_int_equal(nu_sampler_new(&sp, 4, &s, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "logit_bias"));
}

/* Which tokens each n-gram size bans after 1 2 3 1 2. */
static void test_no_repeat_ngram_exact(void **state) {
    (void)state;
    const int32_t seen[] = {1, 2, 3, 1, 2};
    history h = {.accepted = seen, .n_accepted = 5};
    /* n = 3: "1 2" was followed by 3; n = 2: "2" by 3; n = 1: all seen;
     * n = 5: "1 2 3 1" never occurs before; n = 6: no 6-gram yet */
    const bool banned[][SMALL_VOCAB] = {
        {0, 1, 1, 1, 0, 0}, {0, 0, 0, 1, 0, 0}, {0, 0, 0, 1, 0, 0}, {0}, {0}};
    const int sizes[] = {1, 2, 3, 5, 6};
    for (int k = 0; k < 5; k++) {
        nu_sampler_params sp = plain();
        sp.no_repeat_ngram_size = sizes[k];
        float out[SMALL_VOCAB];
        chain_logits(sp, &h, small_logits, SMALL_VOCAB, out);
        for (int i = 0; i < SMALL_VOCAB; i++)
            assert_logit(out[i], banned[k][i] ? -INFINITY : small_logits[i]);
    }
}

/* Greedy decoding of fixed logits with no_repeat_ngram 2 never repeats a
 * bigram (plain greedy would repeat token 0 forever): 0 0 1 0 2 0 3 ... */
static void test_no_repeat_ngram_greedy(void **state) {
    (void)state;
    nu_sampler_params sp = only(0.0f, 0, 1.0f, 0.0f);
    sp.no_repeat_ngram_size = 2;
    float logits[32];
    for (int i = 0; i < 32; i++) logits[i] = 32.0f - (float)i;
    nu_sampler *s = make_sampler(sp, 32, NULL);
    int32_t out[40];
    for (int i = 0; i < 40; i++) nu_sampler_accept(s, out[i] = nu_sampler_sample(s, logits));
    nu_sampler_free(s);
    for (int i = 0; i < 40; i++) assert_int_equal(out[i], i % 2 ? 0 : i / 2);
    for (int i = 0; i + 1 < 40; i++)
        for (int j = 0; j < i; j++) assert_false(out[i] == out[j] && out[i + 1] == out[j + 1]);
}

static float severity_of(const int32_t *toks, int n, int32_t window, const history *prompt) {
    nu_sampler_params sp = plain();
    sp.guard_window = window;
    sp.penalize_prompt = true;
    nu_sampler *s = make_sampler(sp, SMALL_VOCAB, prompt);
    for (int i = 0; i < n; i++) nu_sampler_accept(s, toks[i]);
    float r = nu_sampler_repetition_severity(s);
    nu_sampler_free(s);
    return r;
}

/* The severity formula of nu_sampler_repetition_severity on hand-made
 * windows, and the guard's penalty on logits. */
static void test_repetition_guard_exact(void **state) {
    (void)state;
    const int32_t abc[] = {0, 1, 2, 0, 1, 2, 0, 1}; /* a b c a b c a b */
    assert_true(fabsf(severity_of(abc, 8, 64, NULL) - (float)((5.0 / 8 + 4.0 / 7 + 5.0 / 8) / 3)) <
                1e-6f);
    const int32_t distinct[] = {0, 1, 2, 3, 4, 5};
    assert_true(severity_of(distinct, 6, 64, NULL) == 0.0f);
    assert_true(severity_of(abc, 1, 64, NULL) == 0.0f); /* fewer than 2 tokens */
    const int32_t tail[] = {0, 0, 0, 0, 1, 2, 3, 4};
    assert_true(severity_of(tail, 8, 4, NULL) == 0.0f); /* only the last 4 count */
    /* 1 1 1 1: 3/4 repeated tokens, 2/3 bigrams, suffix "1 1 1" */
    assert_true(fabsf(severity_of(tail + 1, 3, 3, NULL) -
                      (float)((2.0 / 3 + 1.0 / 2 + 2.0 / 3) / 3)) < 1e-6f);
    const int32_t prompt[] = {5, 5, 5, 5};
    history h = {.prompt = prompt, .n_prompt = 4};
    assert_true(severity_of(distinct, 3, 64, &h) == 0.0f); /* the prompt is not output */

    nu_sampler_params sp = plain();
    sp.guard_strength = 1.0f;
    sp.repeat_penalty = 1.5f;
    const int32_t seen[] = {0, 1, 0, 1, 0, 1};
    history g = {.accepted = seen, .n_accepted = 6};
    float factor = 1.0f + (float)((4.0 / 6 + 3.0 / 5 + 4.0 / 6) / 3), out[SMALL_VOCAB];
    chain_logits(sp, &g, small_logits, SMALL_VOCAB, out);
    assert_logit(out[0], ctrl(ctrl(2.0f, 1.5f), factor));
    assert_logit(out[1], ctrl(ctrl(-1.0f, 1.5f), factor));
    for (int i = 2; i < SMALL_VOCAB; i++) assert_logit(out[i], small_logits[i]);
}

/* min_tokens holds the end-of-generation tokens back for that many
 * accepted tokens; ignore_eos always; without known EOG tokens neither
 * changes anything. */
static void test_min_tokens_and_ignore_eos(void **state) {
    (void)state;
    const int32_t eog[] = {5};
    history h = {.eog = eog, .n_eog = 1};
    nu_sampler_params sp = only(0.0f, 40, 0.95f, 0.05f);
    sp.min_tokens = 3;
    nu_sampler *s = make_sampler(sp, SMALL_VOCAB, &h);
    for (int i = 0; i < 3; i++) {
        int32_t t = nu_sampler_sample(s, small_logits);
        assert_int_equal(t, 0);
        nu_sampler_accept(s, t);
    }
    assert_int_equal(nu_sampler_sample(s, small_logits), 5);
    nu_sampler_free(s);
    sp.min_tokens = 0;
    sp.ignore_eos = true;
    s = make_sampler(sp, SMALL_VOCAB, &h);
    for (int i = 0; i < 10; i++) nu_sampler_accept(s, nu_sampler_sample(s, small_logits));
    assert_int_equal(nu_sampler_sample(s, small_logits), 0);
    nu_sampler_free(s);
    s = make_sampler(sp, SMALL_VOCAB, NULL);
    assert_int_equal(nu_sampler_sample(s, small_logits), 5);
    const int32_t bad[] = {6};
    nu_error err;
    assert_int_equal(nu_sampler_set_eog(s, bad, 1, &err), NU_ERR_INVALID_ARG);
    nu_sampler_free(s);
}

/* Greedy is the argmax after the logit-shaping stages. */
static void test_greedy_after_penalties(void **state) {
    (void)state;
    nu_sampler_params sp = only(0.0f, 40, 0.95f, 0.05f);
    sp.repeat_penalty = 2.0f;
    const int32_t seen[] = {5};
    history h = {.accepted = seen, .n_accepted = 1};
    float out[SMALL_VOCAB];
    assert_int_equal(chain_logits(sp, &h, small_logits, SMALL_VOCAB, out), 0); /* 3/2 < 2 */
}

/* When every token is banned the raw argmax comes back, marked by
 * selected = -1 in the last candidates. */
static void test_all_banned(void **state) {
    (void)state;
    nu_logit_bias bias[SMALL_VOCAB];
    for (int i = 0; i < SMALL_VOCAB; i++) bias[i] = (nu_logit_bias){i, -INFINITY};
    for (int greedy = 0; greedy < 2; greedy++) {
        nu_sampler_params sp = only(greedy ? 0.0f : 1.0f, 40, 0.95f, 0.05f);
        sp.logit_bias = bias;
        sp.n_logit_bias = SMALL_VOCAB;
        nu_sampler *s = make_sampler(sp, SMALL_VOCAB, NULL);
        assert_int_equal(nu_sampler_sample(s, small_logits), 5);
        assert_int_equal(nu_sampler_last_candidates(s)->selected, -1);
        nu_sampler_free(s);
    }
}

/* ---- order, parameters, observer ------------------------------------------ */

static void test_order_parse(void **state) {
    (void)state;
    nu_stage_kind order[NU_MAX_STAGES];
    int32_t n;
    char buf[256];
    assert_int_equal(nu_sampler_order_parse("penalties,top_k,typical_p,top_p,min_p,temperature",
                                            order, &n, NULL),
                     NU_OK);
    assert_int_equal(n, 6);
    assert_int_equal(order[0], NU_STAGE_PENALTIES);
    assert_int_equal(order[2], NU_STAGE_TYPICAL_P);
    nu_sampler_order_string(order, n, buf, sizeof buf);
    assert_string_equal(buf, "penalties,top_k,typical_p,top_p,min_p,temperature");
    assert_int_equal(nu_sampler_order_parse(" top-k , temperature ", order, &n, NULL), NU_OK);
    assert_int_equal(n, 2);
    assert_int_equal(order[1], NU_STAGE_TEMPERATURE);
    assert_int_equal(nu_sampler_order_parse("default", order, &n, NULL), NU_OK);
    nu_sampler_order_string(order, n, buf, sizeof buf);
    assert_string_equal(buf, "logit_bias,penalties,dry,no_repeat_ngram,repetition_guard,"
                             "top_n_sigma,top_k,typical_p,top_p,min_p,xtc,temperature");
    nu_sampler_order_string(NULL, 0, buf, 12); /* the default, cut to fit */
    assert_string_equal(buf, "logit_bias,");
    assert_int_equal(
        nu_sampler_order_string(NULL, 0, NULL, 0),
        strlen("logit_bias,penalties,dry,no_repeat_ngram,repetition_guard,top_n_sigma,top_k,"
               "typical_p,top_p,min_p,xtc,temperature"));
    assert_int_equal(nu_sampler_order_parse("temp_first", order, &n, NULL), NU_OK);
    assert_int_equal(n, 12);
    assert_int_equal(order[5], NU_STAGE_TEMPERATURE);
    assert_int_equal(order[6], NU_STAGE_TOP_N_SIGMA);
    assert_int_equal(order[7], NU_STAGE_TOP_K);
    assert_int_equal(order[8], NU_STAGE_TOP_P);
    assert_int_equal(order[11], NU_STAGE_XTC);
    nu_error err;
    assert_int_equal(nu_sampler_order_parse("top_k,bogus", order, &n, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "'bogus'"));
    assert_int_equal(nu_sampler_order_parse("top_k,top_k", order, &n, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "top_k appears twice"));
    assert_int_equal(nu_sampler_order_parse("", order, &n, &err), NU_ERR_INVALID_ARG);
    assert_int_equal(nu_sampler_order_parse("top_k,", order, &n, &err), NU_ERR_INVALID_ARG);
    for (int k = 0; k < NU_STAGE_COUNT_; k++) {
        const char *name = nu_stage_name((nu_stage_kind)k);
        assert_non_null(name);
        assert_int_equal(nu_sampler_order_parse(name, order, &n, NULL), NU_OK);
        assert_int_equal(order[0], k);
    }
    assert_null(nu_stage_name(NU_STAGE_COUNT_));
}

/* Checks that params are refused and that the message names field. */
static void expect_refused(nu_sampler_params sp, const char *field) {
    nu_error err;
    nu_sampler *s = NULL;
    assert_int_equal(nu_sampler_params_check(&sp, &err), NU_ERR_INVALID_ARG);
    if (!strstr(err.message, field)) print_message("message: %s\n", err.message);
    assert_non_null(strstr(err.message, field));
    assert_int_equal(nu_sampler_new(&sp, 10, &s, &err), NU_ERR_INVALID_ARG);
    assert_null(s);
}

/* Every out-of-range value of the new fields is refused (never clamped)
 * with a message naming the field. */
static void test_bad_new_params(void **state) {
    (void)state;
    const nu_sampler_params d = nu_sampler_default_params();
    nu_sampler_params sp;
    const float bad_typical[] = {0.0f, 1.5f, NAN};
    for (int i = 0; i < 3; i++) {
        sp = d, sp.typical_p = bad_typical[i];
        expect_refused(sp, "typical_p");
    }
    const float bad_repeat[] = {0.0f, -1.0f, 101.0f, NAN};
    for (int i = 0; i < 4; i++) {
        sp = d, sp.repeat_penalty = bad_repeat[i];
        expect_refused(sp, "repeat_penalty");
    }
    sp = d, sp.frequency_penalty = 2.5f;
    expect_refused(sp, "frequency_penalty");
    sp = d, sp.presence_penalty = -2.5f;
    expect_refused(sp, "presence_penalty");
    sp = d, sp.penalty_last_n = -2;
    expect_refused(sp, "penalty_last_n");
    sp = d, sp.no_repeat_ngram_size = -1;
    expect_refused(sp, "no_repeat_ngram_size");
    sp = d, sp.guard_strength = -0.1f;
    expect_refused(sp, "guard_strength");
    sp = d, sp.guard_strength = 11.0f;
    expect_refused(sp, "guard_strength");
    sp = d, sp.guard_window = 1;
    expect_refused(sp, "guard_window");
    sp = d, sp.guard_window = 513;
    expect_refused(sp, "guard_window");
    sp = d, sp.min_tokens = -1;
    expect_refused(sp, "min_tokens");
    const nu_logit_bias nan_bias[] = {{1, NAN}}, inf_bias[] = {{1, INFINITY}},
                        neg_bias[] = {{-1, 1.0f}};
    sp = d, sp.logit_bias = nan_bias, sp.n_logit_bias = 1;
    expect_refused(sp, "logit_bias");
    sp = d, sp.logit_bias = inf_bias, sp.n_logit_bias = 1;
    expect_refused(sp, "logit_bias");
    sp = d, sp.logit_bias = neg_bias, sp.n_logit_bias = 1;
    expect_refused(sp, "logit_bias");
    sp = d, sp.logit_bias = NULL, sp.n_logit_bias = 2;
    expect_refused(sp, "logit_bias");
    sp = d, sp.order[0] = NU_STAGE_MIN_P, sp.order[1] = NU_STAGE_MIN_P, sp.n_stages = 2;
    expect_refused(sp, "min_p appears twice");
    sp = d, sp.n_stages = NU_MAX_STAGES + 1;
    expect_refused(sp, "stages");
    sp = d, sp.temperature = NAN;
    expect_refused(sp, "temperature");
    /* the defaults and the edges of each range are fine */
    sp = d, sp.typical_p = 1.0f, sp.repeat_penalty = 100.0f, sp.frequency_penalty = -2.0f;
    sp.presence_penalty = 2.0f, sp.penalty_last_n = -1, sp.guard_strength = 10.0f;
    sp.guard_window = 512;
    assert_int_equal(nu_sampler_params_check(&sp, NULL), NU_OK);
    assert_int_equal(nu_sampler_params_check(&d, NULL), NU_OK);
}

/* What an observer saw. */
typedef struct observed {
    char names[24][24];
    size_t before[24], after[24];
    int32_t selected;
    int n;
    bool normalised;
} observed;

static double prob_sum(const nu_candidates *c) {
    double sum = 0;
    for (size_t i = 0; i < c->size; i++) sum += c->data[i].prob;
    return sum;
}

static void observe(void *user, const char *stage, const nu_candidates *before,
                    const nu_candidates *after) {
    observed *o = user;
    assert_true(o->n < 24);
    strncpy(o->names[o->n], stage, sizeof o->names[0] - 1);
    o->before[o->n] = before->size;
    o->after[o->n] = after->size;
    o->selected = after->selected;
    if (fabs(prob_sum(before) - 1) > 1e-5 || fabs(prob_sum(after) - 1) > 1e-5)
        o->normalised = false;
    o->n++;
}

/* The observer sees every stage that runs, in order, with its input and
 * output; greedy skips the filters; the last call is the choice. */
static void test_observer(void **state) {
    (void)state;
    const int32_t eog[] = {4};
    history h = {.eog = eog, .n_eog = 1};
    nu_sampler_params sp = only(1.0f, 3, 0.95f, 0.0f);
    sp.min_tokens = 1;
    nu_sampler *s = make_sampler(sp, SMALL_VOCAB, &h);
    observed o = {.n = 0, .normalised = true};
    assert_int_equal(nu_sampler_set_observer(s, observe, &o, NULL), NU_OK);
    int32_t tok = nu_sampler_sample(s, small_logits);
    const char *want[] = {
        "eog",         "logit_bias", "penalties", "dry",   "no_repeat_ngram", "repetition_guard",
        "top_n_sigma", "top_k",      "typical_p", "top_p", "min_p",           "xtc",
        "temperature", "dist"};
    assert_int_equal(o.n, 14);
    for (int i = 0; i < 14; i++) assert_string_equal(o.names[i], want[i]);
    assert_true(o.normalised);
    assert_int_equal(o.before[7], SMALL_VOCAB); /* top_k: 6 -> 3 */
    assert_int_equal(o.after[7], 3);
    const nu_candidates *c = nu_sampler_last_candidates(s);
    assert_int_equal(c->data[o.selected].id, tok);
    nu_sampler_free(s);

    sp.temperature = 0.0f;
    s = make_sampler(sp, SMALL_VOCAB, &h);
    nu_sampler_accept(s, 0); /* min_tokens reached: no "eog" */
    o = (observed){.n = 0, .normalised = true};
    assert_int_equal(nu_sampler_set_observer(s, observe, &o, NULL), NU_OK);
    assert_int_equal(nu_sampler_sample(s, small_logits), 5);
    assert_int_equal(o.n, 6);
    assert_string_equal(o.names[0], "logit_bias");
    assert_string_equal(o.names[5], "greedy");
    assert_true(o.normalised);
    nu_sampler_set_observer(s, NULL, NULL, NULL);
    nu_sampler_sample(s, small_logits);
    assert_int_equal(o.n, 6);
    nu_sampler_free(s);
}

/* Generates n tokens from fixed logits, accepting each, optionally observed. */
static void generate(nu_sampler_params sp, bool with_observer, int32_t *out, int n) {
    nu_sampler *s = make_sampler(sp, N_VOCAB, NULL);
    observed o = {.n = 0};
    float logits[N_VOCAB];
    base_logits(logits);
    for (int i = 0; i < n; i++) {
        o.n = 0;
        if (with_observer) nu_sampler_set_observer(s, observe, &o, NULL);
        nu_sampler_accept(s, out[i] = nu_sampler_sample(s, logits));
    }
    nu_sampler_free(s);
}

/* Same seed and settings give the same tokens, observed or not, with every
 * stage active. */
static void test_reproducible_with_history(void **state) {
    (void)state;
    nu_logit_bias bias[] = {{2, 0.5f}};
    nu_sampler_params sp = only(1.2f, 6, 0.95f, 0.01f);
    sp.typical_p = 0.98f;
    sp.repeat_penalty = 1.2f;
    sp.frequency_penalty = 0.1f;
    sp.presence_penalty = 0.1f;
    sp.no_repeat_ngram_size = 4;
    sp.guard_strength = 1.0f;
    sp.logit_bias = bias;
    sp.n_logit_bias = 1;
    int32_t a[300], b[300], c[300];
    generate(sp, false, a, 300);
    generate(sp, true, b, 300);
    sp.seed++;
    generate(sp, false, c, 300);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
}

/* The last candidates are the distribution drawn from: after top-k 3 three
 * tokens with probabilities summing to 1, the chosen one marked. */
static void test_last_candidates(void **state) {
    (void)state;
    nu_sampler *s = make_sampler(only(1.0f, 3, 1.0f, 0.0f), SMALL_VOCAB, NULL);
    assert_null(nu_sampler_last_candidates(s));
    int32_t tok = nu_sampler_sample(s, small_logits);
    const nu_candidates *c = nu_sampler_last_candidates(s);
    assert_int_equal(c->size, 3);
    assert_true(fabs(prob_sum(c) - 1) < 1e-6);
    assert_int_equal(c->data[c->selected].id, tok);
    double e = exp(-1.0), z = 1 + e + e * e; /* logits 3, 2, 1 */
    assert_true(fabs(c->data[0].prob - 1 / z) < 1e-6);
    nu_sampler_free(s);
    s = make_sampler(only(0.0f, 3, 1.0f, 0.0f), SMALL_VOCAB, NULL); /* greedy: T = 1, all */
    assert_int_equal(nu_sampler_sample(s, small_logits), 5);
    c = nu_sampler_last_candidates(s);
    assert_int_equal(c->size, SMALL_VOCAB);
    assert_true(fabs(prob_sum(c) - 1) < 1e-6);
    assert_int_equal(c->data[c->selected].id, 5);
    nu_sampler_free(s);
}

/* ---- partial selection on a large vocabulary --------------------------------- */

#define BIG_VOCAB 5000

/* Smooth random logits (seed 1..3), or with many ties: integers 0..9
 * (seed 4) or all equal (seed 5). */
static void big_logits(float *logits, uint64_t seed) {
    nu_rng r;
    nu_rng_seed(&r, seed);
    for (int i = 0; i < BIG_VOCAB; i++) {
        double u = 0;
        for (int k = 0; k < 4; k++) u += nu_rng_uniform(&r);
        logits[i] = (float)(3.0 * (u - 2.0));
        if (seed == 4) logits[i] = (float)(int)(10 * nu_rng_uniform(&r));
        if (seed == 5) logits[i] = 1.0f;
    }
}

static const float *g_sort_logits;
static const double *g_sort_scores;

static int by_logit_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (g_sort_logits[x] != g_sort_logits[y]) return g_sort_logits[x] > g_sort_logits[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static int by_score_asc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (g_sort_scores[x] != g_sort_scores[y]) return g_sort_scores[x] < g_sort_scores[y] ? -1 : 1;
    return by_logit_desc(a, b);
}

/* The reference: sort everything (by logit for top-p, by typical score for
 * typical-p), keep the prefix reaching mass p; marks keep[id]. */
static void reference_keep(const float *logits, float p, bool typical, bool *keep) {
    static int idx[BIG_VOCAB];
    static double prob[BIG_VOCAB], score[BIG_VOCAB];
    double max = -INFINITY, sum = 0, entropy = 0;
    for (int i = 0; i < BIG_VOCAB; i++) max = fmax(max, logits[i]);
    for (int i = 0; i < BIG_VOCAB; i++) sum += exp(logits[i] - max);
    for (int i = 0; i < BIG_VOCAB; i++) {
        prob[i] = exp(logits[i] - max) / sum;
        entropy -= prob[i] * log(prob[i]);
    }
    for (int i = 0; i < BIG_VOCAB; i++) score[i] = fabs(-log(prob[i]) - entropy), idx[i] = i;
    g_sort_logits = logits;
    g_sort_scores = score;
    qsort(idx, BIG_VOCAB, sizeof *idx, typical ? by_score_asc : by_logit_desc);
    memset(keep, 0, BIG_VOCAB * sizeof *keep);
    double cum = 0;
    for (int i = 0; i < BIG_VOCAB && cum < p; i++) cum += prob[idx[i]], keep[idx[i]] = true;
}

/* top-p and typical-p find their cut by bucketing instead of sorting all;
 * what they keep must equal what a full sort keeps, for small and large p,
 * smooth logits and logits with many ties (where the lower id wins). */
static void test_partial_selection(void **state) {
    (void)state;
    static float logits[BIG_VOCAB];
    static nu_candidate data[BIG_VOCAB];
    static bool want[BIG_VOCAB];
    const float ps[] = {0.1f, 0.5f, 0.9f, 0.999f};
    for (int seed = 1; seed <= 5; seed++) {
        big_logits(logits, (uint64_t)seed);
        for (int typical = 0; typical < 2; typical++) {
            for (int k = 0; k < 4; k++) {
                for (int i = 0; i < BIG_VOCAB; i++) data[i] = (nu_candidate){i, logits[i], 0};
                nu_candidates c = {data, BIG_VOCAB, false, -1};
                if (typical)
                    nu_stage_typical_p(&c, ps[k]);
                else
                    nu_stage_top_p(&c, ps[k]);
                reference_keep(logits, ps[k], typical, want);
                size_t n_want = 0;
                for (int i = 0; i < BIG_VOCAB; i++) n_want += want[i];
                assert_int_equal(c.size, n_want);
                for (size_t i = 0; i < c.size; i++) assert_true(want[data[i].id]);
            }
        }
        for (int i = 0; i < BIG_VOCAB; i++) data[i] = (nu_candidate){i, logits[i], 0};
        nu_candidates c = {data, BIG_VOCAB, false, -1};
        nu_stage_top_k(&c, 100);
        g_sort_logits = logits;
        static int idx[BIG_VOCAB];
        for (int i = 0; i < BIG_VOCAB; i++) idx[i] = i;
        qsort(idx, BIG_VOCAB, sizeof *idx, by_logit_desc);
        for (int i = 0; i < 100; i++) assert_int_equal(data[i].id, idx[i]);
    }
}

/* The thinking budget on hand-made logits that always favour token 0:
 * open marker {5}, close {6}, forced sequence {4, 6}, 2 tokens allowed. */
static nu_sampler *think_sampler(float temperature, const int32_t *prompt, int n_prompt) {
    static const int32_t open[] = {5}, close[] = {6}, force[] = {4, 6};
    nu_think_budget b = {open, 1, close, 1, force, 2, 2, false};
    nu_sampler_params sp = nu_sampler_default_params();
    sp.temperature = temperature;
    nu_sampler *s = make_sampler(sp, N_VOCAB, NULL);
    assert_int_equal(nu_sampler_set_think_budget(s, &b, NULL), NU_OK);
    nu_sampler_accept_prompt(s, prompt, n_prompt);
    return s;
}

/* Samples greedily n times, accepting each token; writes them to out. */
static void think_run(nu_sampler *s, int n, int32_t *out) {
    float logits[N_VOCAB];
    base_logits(logits);
    for (int i = 0; i < n; i++) {
        out[i] = nu_sampler_sample(s, logits);
        nu_sampler_accept(s, out[i]);
    }
}

static void test_think_budget(void **state) {
    (void)state;
    int32_t got[8];
    /* a prompt that ends with the open marker starts inside: two free
     * tokens, then the forced sequence, then free again */
    static const int32_t inside[] = {1, 5}, outside[] = {1, 2}, closed[] = {5, 1, 6};
    nu_sampler *s = think_sampler(0, inside, 2);
    think_run(s, 6, got);
    static const int32_t want_inside[] = {0, 0, 4, 6, 0, 0};
    assert_memory_equal(got, want_inside, sizeof want_inside);
    /* after a reset the model opens a block itself: the budget counts from there */
    nu_sampler_reset(s);
    nu_sampler_accept_prompt(s, outside, 2);
    think_run(s, 5, got);
    static const int32_t free_run[] = {0, 0, 0, 0, 0};
    assert_memory_equal(got, free_run, sizeof free_run);
    nu_sampler_accept(s, 5);
    think_run(s, 4, got);
    static const int32_t want_opened[] = {0, 0, 4, 6};
    assert_memory_equal(got, want_opened, sizeof want_opened);
    nu_sampler_free(s);
    /* a block closed in the prompt is not counted */
    s = think_sampler(0, closed, 3);
    think_run(s, 5, got);
    assert_memory_equal(got, free_run, sizeof free_run);
    nu_sampler_free(s);
    /* a block the model closes itself is not forced */
    s = think_sampler(0, inside, 2);
    nu_sampler_accept(s, 0);
    nu_sampler_accept(s, 6);
    think_run(s, 5, got);
    assert_memory_equal(got, free_run, sizeof free_run);
    nu_sampler_free(s);
    /* start_inside: the caller knows better than the prompt's tokens */
    static const int32_t open[] = {5}, close[] = {6}, force[] = {4, 6};
    nu_think_budget b = {open, 1, close, 1, force, 2, 1, true};
    nu_sampler_params greedy = nu_sampler_default_params();
    greedy.temperature = 0;
    s = make_sampler(greedy, N_VOCAB, NULL);
    assert_int_equal(nu_sampler_set_think_budget(s, &b, NULL), NU_OK);
    nu_sampler_accept_prompt(s, outside, 2);
    think_run(s, 4, got);
    static const int32_t want_start_inside[] = {0, 4, 6, 0};
    assert_memory_equal(got, want_start_inside, sizeof want_start_inside);
    nu_sampler_free(s);
    /* sampling at temperature 1 takes the forced token every time, and the
     * distribution is a point mass on it */
    static const int32_t spent[] = {5, 0, 0};
    s = think_sampler(1, spent, 1);
    nu_sampler_accept(s, 0);
    nu_sampler_accept(s, 0);
    float logits[N_VOCAB];
    base_logits(logits);
    for (int i = 0; i < 1000; i++) assert_int_equal(nu_sampler_sample(s, logits), 4);
    const nu_candidates *c = nu_sampler_distribution(s, logits);
    for (size_t i = 0; i < c->size; i++)
        assert_true(c->data[i].id == 4 ? c->data[i].prob == 1.0f : c->data[i].prob == 0.0f);
    nu_sampler_free(s);
}

static void test_think_budget_checks(void **state) {
    (void)state;
    static const int32_t one[] = {1}, far[] = {N_VOCAB}, nine[9] = {0};
    nu_sampler *s = make_sampler(nu_sampler_default_params(), N_VOCAB, NULL);
    nu_error err;
    nu_think_budget b = {one, 1, one, 1, one, 1, 0, false};
    assert_int_equal(nu_sampler_set_think_budget(s, &b, &err), NU_OK);
    b.max_tokens = -1;
    assert_int_equal(nu_sampler_set_think_budget(s, &b, &err), NU_ERR_INVALID_ARG);
    b.max_tokens = 0, b.open = nine, b.n_open = 9;
    assert_int_equal(nu_sampler_set_think_budget(s, &b, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "open"));
    b.open = one, b.n_open = 1, b.force = far;
    assert_int_equal(nu_sampler_set_think_budget(s, &b, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "vocabulary"));
    b.n_close = 0;
    assert_int_equal(nu_think_budget_check(&b, 0, &err), NU_ERR_INVALID_ARG);
    nu_think_budget none = {0};
    assert_int_equal(nu_think_budget_check(&none, N_VOCAB, &err), NU_OK);
    nu_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pure_sampling),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_temperature),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_custom_order),
        cmocka_unit_test(test_greedy_is_argmax),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_stages_exact),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_rng_uniform),
        cmocka_unit_test(test_typical_p),
        cmocka_unit_test(test_logit_bias_distribution),
        cmocka_unit_test(test_penalties_distribution),
        cmocka_unit_test(test_no_repeat_ngram_distribution),
        cmocka_unit_test(test_repetition_guard_distribution),
        cmocka_unit_test(test_ignore_eos_distribution),
        cmocka_unit_test(test_temp_first_distribution),
        cmocka_unit_test(test_penalties_exact),
        cmocka_unit_test(test_penalty_window),
        cmocka_unit_test(test_long_history),
        cmocka_unit_test(test_stages_after_a_filter),
        cmocka_unit_test(test_logit_bias_exact),
        cmocka_unit_test(test_no_repeat_ngram_exact),
        cmocka_unit_test(test_no_repeat_ngram_greedy),
        cmocka_unit_test(test_repetition_guard_exact),
        cmocka_unit_test(test_min_tokens_and_ignore_eos),
        cmocka_unit_test(test_greedy_after_penalties),
        cmocka_unit_test(test_all_banned),
        cmocka_unit_test(test_order_parse),
        cmocka_unit_test(test_bad_new_params),
        cmocka_unit_test(test_observer),
        cmocka_unit_test(test_reproducible_with_history),
        cmocka_unit_test(test_last_candidates),
        cmocka_unit_test(test_partial_selection),
        cmocka_unit_test(test_think_budget),
        cmocka_unit_test(test_think_budget_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
