/* test_watermark.c - the green-list watermark: the pseudo-random function
 * against its documented definition and published hash vectors, the share
 * and independence of the green lists, the sampler stage (place in the
 * chain, greedy, the distribution it leaves, the observer), detection on a
 * hand-computed case, parameter checks, and generation on stories260K:
 * watermarked text is detected, plain text and other keys are not, and
 * speculative decoding gives the same watermarked tokens as plain decoding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test_support.h"
#include "watermark.h"

static nu_watermark_params params(const char *key, float gamma, int32_t h) {
    nu_watermark_params p = nu_watermark_default_params();
    p.key = key;
    p.gamma = gamma;
    p.context = h;
    return p;
}

/* ---- the function, written again from its definition in nucleus.h -------- */

static uint64_t ref_mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t ref_fnv1a(const char *s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
    return h;
}

static bool ref_green(const char *key, const int32_t *prev, int h, float gamma, int32_t t) {
    uint64_t s = ref_mix(ref_fnv1a(key));
    for (int i = 0; i < h; i++) s = ref_mix(s ^ (uint32_t)prev[i]);
    long double limit = (long double)gamma * 18446744073709551616.0L; /* gamma * 2^64 */
    return (long double)ref_mix(s + ((uint64_t)t + 1) * 0x9E3779B97F4A7C15ull) < limit;
}

/* The reference pieces reproduce published vectors: FNV-1a 64 of "a" and
 * "foobar" (the FNV test suite), and the first outputs of splitmix64 seeded
 * with 1234567 (Vigna's reference), which the green test of token t with
 * context seed 1234567 hashes. */
static void test_function_matches_published_vectors(void **state) {
    (void)state;
    assert_true(ref_fnv1a("a") == 0xAF63DC4C8601EC8Cull);
    assert_true(ref_fnv1a("foobar") == 0x85944171F73967E8ull);
    const uint64_t splitmix[3] = {6457827717110365317ull, 3203168211198807973ull,
                                  9817491932198370423ull};
    for (int32_t t = 0; t < 3; t++) {
        assert_true(ref_mix(1234567 + ((uint64_t)t + 1) * 0x9E3779B97F4A7C15ull) == splitmix[t]);
        /* green exactly below the threshold */
        assert_true(nu_watermark_green(1234567, splitmix[t] + 1, t));
        assert_false(nu_watermark_green(1234567, splitmix[t], t));
    }
}

/* The library's lists are the documented function's, for several keys,
 * widths and gammas. */
static void test_function_matches_definition(void **state) {
    (void)state;
    const char *keys[] = {"a", "secret key", "42", "\xc3\xa9t\xc3\xa9"};
    const float gammas[] = {0.25f, 0.5f, 0.1f, 0.9f};
    int32_t prev[NU_WATERMARK_MAX_CONTEXT] = {1, 31999, 7, 0, 123, 5, 6, 2};
    for (int k = 0; k < 4; k++)
        for (int h = 1; h <= NU_WATERMARK_MAX_CONTEXT; h++) {
            nu_watermark_params p = params(keys[k], gammas[(k + h) % 4], h);
            for (int32_t t = 0; t < 2000; t++)
                assert_int_equal(nu_watermark_is_green(&p, prev, t),
                                 ref_green(keys[k], prev, h, p.gamma, t));
        }
}

/* Over many contexts, the green share of a 32000-token vocabulary is gamma:
 * each list's size is Binomial(32000, gamma), so it stays within 6 standard
 * deviations, and the pooled share within 5 of its own. */
static void test_green_share_is_gamma(void **state) {
    (void)state;
    const float gammas[] = {0.25f, 0.5f, 0.1f};
    const int32_t n_vocab = 32000, n_ctx = 300;
    for (int g = 0; g < 3; g++) {
        double gamma = gammas[g], sd = sqrt(n_vocab * gamma * (1 - gamma)), total = 0;
        nu_watermark w;
        nu_watermark_params p = params("share", gammas[g], 2);
        assert_int_equal(nu_watermark_init(&w, &p, NULL), NU_OK);
        for (int32_t c = 0; c < n_ctx; c++) {
            int32_t prev[2] = {c * 97 % n_vocab, c};
            uint64_t seed = nu_watermark_context_seed(w.key, prev, 2);
            int32_t green = 0;
            for (int32_t t = 0; t < n_vocab; t++) green += nu_watermark_green(seed, w.threshold, t);
            assert_true(fabs(green - n_vocab * gamma) < 6 * sd);
            total += green;
        }
        double n = (double)n_vocab * n_ctx;
        assert_true(fabs(total / n - gamma) < 5 * sqrt(gamma * (1 - gamma) / n));
    }
}

/* Two lists drawn independently agree on a token with probability
 * gamma^2 + (1 - gamma)^2 (0.625 for gamma 0.25); the same list agrees with
 * itself always. Another key, another previous token, a wider context with
 * the same last token: all give independent-looking lists. */
static void test_list_changes_with_key_and_context(void **state) {
    (void)state;
    const int32_t n = 32000;
    const int32_t a[2] = {17, 99}, b[2] = {17, 100}, wide[2] = {5, 99};
    nu_watermark_params k1 = params("key one", 0.25f, 1), k2 = params("key two", 0.25f, 1);
    nu_watermark_params h2 = params("key one", 0.25f, 2);
    int32_t same = 0, by_key = 0, by_token = 0, by_width = 0;
    for (int32_t t = 0; t < n; t++) {
        bool base = nu_watermark_is_green(&k1, a + 1, t); /* context {99} */
        same += base == nu_watermark_is_green(&k1, wide + 1, t);
        by_key += base == nu_watermark_is_green(&k2, a + 1, t);
        by_token += base == nu_watermark_is_green(&k1, b + 1, t);
        by_width += base == nu_watermark_is_green(&h2, wide, t); /* {5, 99} */
    }
    double expect = 0.625, sd = sqrt(expect * (1 - expect) / n);
    assert_int_equal(same, n);
    assert_true(fabs((double)by_key / n - expect) < 6 * sd);
    assert_true(fabs((double)by_token / n - expect) < 6 * sd);
    assert_true(fabs((double)by_width / n - expect) < 6 * sd);
}

/* ---- the sampler stage --------------------------------------------------- */

/* The stage adds delta exactly to the tokens the documented function calls
 * green: over a whole vocabulary in id order (the chunked fast path, 1000
 * ids = 3 full chunks and a partial one) and over a shuffled subset (what a
 * grammar mask leaves). Tokens pushed before the last h do not matter. */
static void test_stage_marks_the_green_list(void **state) {
    (void)state;
    enum { V = 1000 };
    nu_watermark_params p = params("stage", 0.3f, 2);
    p.delta = 1.5f;
    nu_watermark w;
    assert_int_equal(nu_watermark_init(&w, &p, NULL), NU_OK);
    nu_watermark_push(&w, 11);
    assert_false(nu_watermark_ready(&w));
    nu_watermark_push(&w, 500);
    nu_watermark_push(&w, 42);
    assert_true(nu_watermark_ready(&w));
    const int32_t prev[2] = {500, 42};
    static nu_candidate all[V], some[V / 2];
    for (int32_t i = 0; i < V; i++) all[i] = (nu_candidate){i, (float)i * 0.01f, 0};
    for (int32_t i = 0; i < V / 2; i++) some[i] = (nu_candidate){(i * 7 + 3) % V, -1.0f, 0};
    nu_candidates a = {all, V, true, -1}, b = {some, V / 2, false, -1};
    nu_watermark_apply(&w, &a, true);
    nu_watermark_apply(&w, &b, false);
    assert_false(a.sorted);
    int32_t green = 0;
    for (int32_t i = 0; i < V; i++) {
        bool g = ref_green("stage", prev, 2, 0.3f, i);
        green += g;
        assert_float_equal(all[i].logit, (float)i * 0.01f + (g ? 1.5f : 0.0f), 1e-6);
    }
    for (int32_t i = 0; i < V / 2; i++)
        assert_float_equal(some[i].logit,
                           ref_green("stage", prev, 2, 0.3f, some[i].id) ? 0.5 : -1.0, 1e-6);
    assert_true(green > 200 && green < 400); /* 300 expected, sd 14.5 */
    nu_watermark_clear(&w);
    assert_false(nu_watermark_ready(&w));
}

/* A green and a red token for the context {prev}. */
static void green_and_red(const nu_watermark_params *p, int32_t prev, int32_t n_vocab,
                          int32_t *green, int32_t *red) {
    *green = *red = -1;
    for (int32_t t = 0; t < n_vocab && (*green < 0 || *red < 0); t++) {
        if (nu_watermark_is_green(p, &prev, t)) {
            if (*green < 0) *green = t;
        } else if (*red < 0) {
            *red = t;
        }
    }
    assert_true(*green >= 0 && *red >= 0);
}

/* Greedy takes the argmax of logit + delta * green: a red token ahead by
 * less than delta loses to a green one, ahead by more it wins. */
static void test_greedy_argmax_is_biased(void **state) {
    (void)state;
    enum { V = 64 };
    nu_sampler_params sp = nu_sampler_default_params();
    sp.temperature = 0;
    sp.watermark = params("greedy", 0.5f, 1);
    sp.watermark.delta = 2;
    int32_t green, red, prompt = 9;
    green_and_red(&sp.watermark, prompt, V, &green, &red);
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = -10;
    for (int k = 0; k < 2; k++) {
        logits[red] = k == 0 ? 1.9f : 2.1f;
        logits[green] = 0;
        nu_sampler *s;
        assert_int_equal(nu_sampler_new(&sp, V, &s, NULL), NU_OK);
        nu_sampler_accept_prompt(s, &prompt, 1);
        assert_int_equal(nu_sampler_sample(s, logits), k == 0 ? green : red);
        nu_sampler_free(s);
    }
}

/* At temperature 1 without filters the chain's distribution is
 * softmax(logit + delta * green), computed here directly. Before the
 * context is complete (no token seen) nothing is added. */
static void test_distribution_is_shifted_softmax(void **state) {
    (void)state;
    enum { V = 200 };
    nu_sampler_params sp = nu_sampler_default_params();
    sp.temperature = 1, sp.top_k = 0, sp.top_p = 1, sp.min_p = 0;
    sp.watermark = params("dist", 0.25f, 1);
    sp.watermark.delta = 3;
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)sin(i * 0.7) * 2;
    nu_sampler *s;
    assert_int_equal(nu_sampler_new(&sp, V, &s, NULL), NU_OK);
    const nu_candidates *c = nu_sampler_distribution(s, logits);
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(logits[i]);
    for (size_t i = 0; i < c->size; i++)
        assert_float_equal(c->data[i].prob, exp(logits[c->data[i].id]) / z, 1e-6);
    int32_t prev = 123;
    nu_sampler_accept(s, prev);
    c = nu_sampler_distribution(s, logits);
    double shifted[V], zs = 0;
    for (int32_t i = 0; i < V; i++) {
        shifted[i] = exp(logits[i] + (nu_watermark_is_green(&sp.watermark, &prev, i) ? 3.0 : 0.0));
        zs += shifted[i];
    }
    assert_int_equal(c->size, V);
    for (size_t i = 0; i < c->size; i++)
        assert_float_equal(c->data[i].prob, shifted[c->data[i].id] / zs, 1e-6);
    nu_sampler_free(s);
}

typedef struct stage_log {
    char names[24][24];
    int n;
} stage_log;

static void log_stage(void *user, const char *stage, const nu_candidates *before,
                      const nu_candidates *after) {
    (void)before, (void)after;
    stage_log *l = user;
    if (l->n < 24) snprintf(l->names[l->n++], sizeof l->names[0], "%s", stage);
}

/* The stages observed for one sample of a sampler built from sp. */
static void observe_one(const nu_sampler_params *sp, stage_log *log) {
    enum { V = 50 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)(i % 7);
    nu_sampler *s;
    int32_t prompt[2] = {3, 4};
    assert_int_equal(nu_sampler_new(sp, V, &s, NULL), NU_OK);
    assert_int_equal(nu_sampler_set_observer(s, log_stage, log, NULL), NU_OK);
    nu_sampler_accept_prompt(s, prompt, 2);
    memset(log, 0, sizeof *log);
    nu_sampler_sample(s, logits);
    nu_sampler_free(s);
}

static int index_of(const stage_log *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->names[i], name)) return i;
    return -1;
}

/* The observer sees "watermark" after the bias and penalties and before
 * the first filter or temperature, whatever the order; greedy runs it too;
 * with a context wider than what was seen it does not run. */
static void test_stage_place_and_observer(void **state) {
    (void)state;
    nu_sampler_params sp = nu_sampler_default_params();
    sp.watermark = params("observed", 0.25f, 1);
    stage_log log;
    observe_one(&sp, &log);
    int w = index_of(&log, "watermark");
    assert_true(w > 0);
    assert_int_equal(w, index_of(&log, "repetition_guard") + 1);
    assert_int_equal(w + 1, index_of(&log, "top_n_sigma"));

    assert_int_equal(
        nu_sampler_order_parse("top_k,penalties,temperature", sp.order, &sp.n_stages, NULL), NU_OK);
    observe_one(&sp, &log);
    assert_int_equal(index_of(&log, "watermark") + 1, index_of(&log, "top_k"));

    assert_int_equal(nu_sampler_order_parse("logit_bias,penalties", sp.order, &sp.n_stages, NULL),
                     NU_OK);
    observe_one(&sp, &log);
    assert_int_equal(index_of(&log, "watermark"), index_of(&log, "penalties") + 1);

    sp.n_stages = 0;
    sp.temperature = 0;
    observe_one(&sp, &log);
    assert_true(index_of(&log, "watermark") >= 0);
    assert_int_equal(index_of(&log, "top_k"), -1);
    assert_string_equal(log.names[log.n - 1], "greedy");

    sp.watermark.context = 3; /* two prompt tokens: no full context yet */
    observe_one(&sp, &log);
    assert_int_equal(index_of(&log, "watermark"), -1);
}

/* ---- detection ------------------------------------------------------------ */

/* Tokens 5 7 5 7 9 5 7 3 with h = 1: the n-grams (5,7) (7,5) (5,7) (7,9)
 * (9,5) (5,7) (7,3), of which (5,7) repeats twice: T = 5 distinct are
 * scored, 2 are left out, token 0 has no context. The green count G comes
 * from the documented function. With gamma 0.5, z = (G - 2.5) / sqrt(5 *
 * 0.25) = (G - 2.5) / 1.118034, and p = 1 - Phi(z); by hand from the normal
 * table, for G = 0..5:
 *   z = -2.236068 -1.341641 -0.447214  0.447214  1.341641  2.236068
 *   p =  0.987326  0.910144  0.672640  0.327360  0.089856  0.012674 */
static void test_detect_hand_case(void **state) {
    (void)state;
    const double z_of[6] = {-2.236068, -1.341641, -0.447214, 0.447214, 1.341641, 2.236068};
    const double p_of[6] = {0.987326, 0.910144, 0.672640, 0.327360, 0.089856, 0.012674};
    const int32_t toks[8] = {5, 7, 5, 7, 9, 5, 7, 3};
    const char *keys[] = {"hand", "another", "7", "x"};
    for (int k = 0; k < 4; k++) {
        nu_watermark_params p = params(keys[k], 0.5f, 1);
        int green = 0;
        green += ref_green(keys[k], &toks[0], 1, 0.5f, 7); /* (5,7) */
        green += ref_green(keys[k], &toks[1], 1, 0.5f, 5); /* (7,5) */
        green += ref_green(keys[k], &toks[3], 1, 0.5f, 9); /* (7,9) */
        green += ref_green(keys[k], &toks[4], 1, 0.5f, 5); /* (9,5) */
        green += ref_green(keys[k], &toks[6], 1, 0.5f, 3); /* (7,3) */
        nu_watermark_result r;
        signed char marks[8];
        assert_int_equal(nu_watermark_detect(NULL, &p, toks, 8, 4.0, marks, &r, NULL), NU_OK);
        assert_int_equal(r.n_tokens, 8);
        assert_int_equal(r.scored, 5);
        assert_int_equal(r.repeated, 2);
        assert_int_equal(r.green, green);
        assert_float_equal(r.z, z_of[green], 1e-6);
        assert_float_equal(r.p_value, p_of[green], 1e-6);
        assert_float_equal(r.green_fraction, green / 5.0, 1e-12);
        assert_false(r.detected);
        assert_int_equal(marks[0], -1);
        assert_int_equal(marks[3], -1); /* second (5,7) */
        assert_int_equal(marks[6], -1); /* third (5,7) */
        assert_int_equal(marks[1], ref_green(keys[k], &toks[0], 1, 0.5f, 7));
    }
}

/* 16 distinct all-green n-grams at gamma 0.25: z = (16 - 4) / sqrt(16 *
 * 0.25 * 0.75) = 12 / sqrt(3) = 6.928203, p = 2.13e-12 (tail of the normal
 * at 6.93); detected at the threshold 4, not at 7. With h = 2 the same
 * tokens are scored with other contexts. */
static void test_detect_all_green(void **state) {
    (void)state;
    nu_watermark_params p = params("all green", 0.25f, 1);
    int32_t toks[17] = {1000};
    for (int i = 1; i < 17; i++) {
        int32_t t = toks[i - 1] + 1;
        while (!ref_green(p.key, &toks[i - 1], 1, p.gamma, t)) t++;
        toks[i] = t; /* increasing, so every n-gram is new */
    }
    nu_watermark_result r;
    assert_int_equal(nu_watermark_detect(NULL, &p, toks, 17, 4.0, NULL, &r, NULL), NU_OK);
    assert_int_equal(r.scored, 16);
    assert_int_equal(r.green, 16);
    assert_float_equal(r.z, 6.928203, 1e-6);
    assert_true(fabs(r.p_value - 2.131e-12) < 0.01e-12);
    assert_true(r.detected);
    assert_int_equal(nu_watermark_detect(NULL, &p, toks, 17, 7.0, NULL, &r, NULL), NU_OK);
    assert_false(r.detected);
    /* too few tokens for a context: nothing scored */
    assert_int_equal(nu_watermark_detect(NULL, &p, toks, 1, 4.0, NULL, &r, NULL), NU_OK);
    assert_int_equal(r.scored, 0);
    assert_float_equal(r.z, 0, 0);
    assert_float_equal(r.p_value, 1, 0);
    assert_false(r.detected);
}

/* ---- parameters ---------------------------------------------------------- */

static void expect_bad(const nu_watermark_params *p, const char *word) {
    nu_error err = {0};
    assert_int_equal(nu_watermark_params_check(p, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, word));
    nu_sampler_params sp = nu_sampler_default_params();
    sp.watermark = *p;
    nu_sampler *s = NULL;
    assert_int_equal(nu_sampler_new(&sp, 100, &s, &err), NU_ERR_INVALID_ARG);
    assert_null(s);
    assert_non_null(strstr(err.message, word));
    nu_watermark_result r;
    int32_t toks[3] = {1, 2, 3};
    assert_int_equal(nu_watermark_detect(NULL, p, toks, 3, 4, NULL, &r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, word));
}

static void test_invalid_params(void **state) {
    (void)state;
    nu_watermark_params p = params("k", 0.25f, 1);
    p.gamma = 0, expect_bad(&p, "gamma");
    p.gamma = 1, expect_bad(&p, "gamma");
    p.gamma = -0.5f, expect_bad(&p, "gamma");
    p.gamma = NAN, expect_bad(&p, "gamma");
    p = params("k", 0.25f, 1);
    p.delta = -1, expect_bad(&p, "delta");
    p.delta = NAN, expect_bad(&p, "delta");
    p.delta = 101, expect_bad(&p, "delta");
    p = params("k", 0.25f, 0), expect_bad(&p, "context");
    p = params("k", 0.25f, NU_WATERMARK_MAX_CONTEXT + 1), expect_bad(&p, "context");
    p = params("", 0.25f, 1), expect_bad(&p, "empty");
    /* detection needs a key; a sampler without one simply does not mark */
    p = params(NULL, 0.25f, 1);
    nu_error err;
    nu_watermark_result r;
    assert_int_equal(nu_watermark_detect(NULL, &p, NULL, 0, 4, NULL, &r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "key"));
    /* ids outside the vocabulary, a threshold that is not a number */
    p = params("k", 0.25f, 1);
    int32_t toks[3] = {1, 512, 3};
    assert_int_equal(nu_watermark_detect(nu_test_demo, &p, toks, 3, 4, NULL, &r, &err),
                     NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "vocabulary"));
    toks[1] = -1;
    assert_int_equal(nu_watermark_detect(NULL, &p, toks, 3, 4, NULL, &r, &err), NU_ERR_INVALID_ARG);
    toks[1] = 2;
    assert_int_equal(nu_watermark_detect(NULL, &p, toks, 3, NAN, NULL, &r, &err),
                     NU_ERR_INVALID_ARG);
}

/* ---- generation on stories260K ------------------------------------------- */

static nu_context *make_context(int32_t threads) {
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = threads;
    nu_context *ctx;
    assert_int_equal(nu_context_new(nu_test_demo, &cp, &ctx, NULL), NU_OK);
    return ctx;
}

/* Plain temperature-1 sampling (no filter), 200 tokens, no early end. */
static nu_generate_params sampling(uint64_t seed, const nu_watermark_params *wm) {
    nu_generate_params p = nu_generate_default_params();
    p.n_predict = 200;
    p.sampling.temperature = 1;
    p.sampling.top_k = 0, p.sampling.top_p = 1, p.sampling.min_p = 0;
    p.sampling.ignore_eos = true;
    p.sampling.seed = seed;
    if (wm) p.sampling.watermark = *wm;
    return p;
}

/* Five seeds, 200 tokens each, gamma 0.25, delta 4. Watermarked: z > 8
 * (twice the threshold) over the tokens and over the re-tokenized text
 * (measured 12 to 15). Without the watermark, and with the wrong key: |z| < 3
 * (measured at most 1.6), as z is about N(0, 1) then. */
static void test_generation_is_detected(void **state) {
    (void)state;
    nu_context *ctx = make_context(1);
    nu_watermark_params wm = params("stories secret", 0.25f, 1), other = wm;
    wm.delta = 4;
    other.key = "another secret";
    for (uint64_t seed = 1; seed <= 5; seed++) {
        for (int marked = 0; marked < 2; marked++) {
            nu_generate_params p = sampling(seed, marked ? &wm : NULL);
            nu_generate_result r;
            nu_error err;
            assert_int_equal(nu_generate(ctx, "Once upon a time", &p, &r, &err), NU_OK);
            assert_int_equal(r.n_tokens, 200);
            nu_watermark_result d, text, wrong;
            assert_int_equal(
                nu_watermark_detect(nu_test_demo, &wm, r.tokens, 200, 4, NULL, &d, &err), NU_OK);
            assert_int_equal(
                nu_watermark_detect_text(nu_test_demo, &wm, r.text, r.text_len, 4, &text, &err),
                NU_OK);
            assert_int_equal(
                nu_watermark_detect(nu_test_demo, &other, r.tokens, 200, 4, NULL, &wrong, &err),
                NU_OK);
            assert_true(d.scored > 100);
            assert_int_equal(d.scored + d.repeated, 199);
            if (marked) {
                assert_true(d.z > 8 && d.detected);
                assert_true(text.z > 8 && text.detected);
            } else {
                assert_true(fabs(d.z) < 3 && !d.detected);
                assert_true(fabs(text.z) < 3);
            }
            assert_true(fabs(wrong.z) < 3 && !wrong.detected);
            nu_generate_result_free(&r);
        }
    }
    nu_context_free(ctx);
}

/* The same watermarked tokens with 1 or 3 threads and with the sample run
 * beside two others in one scheduler. */
static void test_threads_and_batch_do_not_change_marks(void **state) {
    (void)state;
    nu_watermark_params wm = params("threads", 0.5f, 2);
    nu_generate_params p = sampling(7, &wm);
    p.n_predict = 60;
    nu_generate_result a, b[3];
    nu_context *one = make_context(1);
    assert_int_equal(nu_generate(one, "Lily and Tom", &p, &a, NULL), NU_OK);
    nu_context_free(one);
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 512, cp.n_threads = 3, cp.n_seq_max = 3;
    nu_context *ctx;
    assert_int_equal(nu_context_new(nu_test_demo, &cp, &ctx, NULL), NU_OK);
    nu_scheduler *s;
    assert_int_equal(nu_scheduler_new(ctx, &s, NULL), NU_OK);
    nu_generate_params plain = sampling(9, NULL);
    plain.n_predict = 60;
    assert_int_equal(nu_scheduler_submit(s, "The dog", NULL, 0, &plain, &b[0], NULL, NULL), NU_OK);
    assert_int_equal(nu_scheduler_submit(s, "Lily and Tom", NULL, 0, &p, &b[1], NULL, NULL), NU_OK);
    assert_int_equal(nu_scheduler_submit(s, "A cat", NULL, 0, &plain, &b[2], NULL, NULL), NU_OK);
    assert_int_equal(nu_scheduler_run(s, NULL), NU_OK);
    assert_int_equal(a.n_tokens, b[1].n_tokens);
    assert_memory_equal(a.tokens, b[1].tokens, (size_t)a.n_tokens * sizeof *a.tokens);
    nu_scheduler_free(s);
    nu_context_free(ctx);
    nu_generate_result_free(&a);
    for (int i = 0; i < 3; i++) nu_generate_result_free(&b[i]);
}

/* Speculative decoding applies the same stage to the draft's and the
 * target's distributions, so greedy watermarked output is token for token
 * that of plain greedy watermarked decoding (prompt lookup, and the model as
 * its own draft), and differs from greedy without the watermark. */
static void test_speculative_keeps_the_watermark(void **state) {
    (void)state;
    nu_watermark_params wm = params("speculate", 0.25f, 1);
    wm.delta = 4;
    nu_generate_params p = nu_generate_default_params();
    p.n_predict = 80;
    p.sampling.temperature = 0;
    p.sampling.ignore_eos = true;
    nu_context *ctx = make_context(1), *draft = make_context(1);
    nu_generate_result plain, marked, spec;
    const char *prompt = "Once upon a time";
    assert_int_equal(nu_generate(ctx, prompt, &p, &plain, NULL), NU_OK);
    p.sampling.watermark = wm;
    assert_int_equal(nu_generate(ctx, prompt, &p, &marked, NULL), NU_OK);
    assert_int_equal(marked.n_tokens, 80);
    assert_true(memcmp(plain.tokens, marked.tokens, 80 * sizeof(int32_t)) != 0);
    for (int mode = 0; mode < 2; mode++) {
        nu_speculative_params sp = nu_speculative_default_params();
        if (mode == 0)
            sp.lookup = true;
        else
            sp.draft = draft;
        nu_error err;
        assert_int_equal(nu_generate_speculative(ctx, prompt, &p, &sp, &spec, NULL, &err), NU_OK);
        assert_int_equal(spec.n_tokens, 80);
        assert_memory_equal(spec.tokens, marked.tokens, 80 * sizeof(int32_t));
        nu_generate_result_free(&spec);
    }
    nu_watermark_result d;
    assert_int_equal(nu_watermark_detect(nu_test_demo, &wm, marked.tokens, 80, 4, NULL, &d, NULL),
                     NU_OK);
    assert_true(d.detected);
    nu_generate_result_free(&plain);
    nu_generate_result_free(&marked);
    nu_context_free(draft);
    nu_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_function_matches_published_vectors),
        cmocka_unit_test(test_function_matches_definition),
        cmocka_unit_test(test_green_share_is_gamma),
        cmocka_unit_test(test_list_changes_with_key_and_context),
        cmocka_unit_test(test_stage_marks_the_green_list),
        cmocka_unit_test(test_greedy_argmax_is_biased),
        cmocka_unit_test(test_distribution_is_shifted_softmax),
        cmocka_unit_test(test_stage_place_and_observer),
        cmocka_unit_test(test_detect_hand_case),
        cmocka_unit_test(test_detect_all_green),
        cmocka_unit_test(test_invalid_params),
        cmocka_unit_test(test_generation_is_detected),
        cmocka_unit_test(test_threads_and_batch_do_not_change_marks),
        cmocka_unit_test(test_speculative_keeps_the_watermark),
    };
    return cmocka_run_group_tests(tests, nu_test_demo_setup, nu_test_demo_teardown);
}
