/* test_bleu.c - BLEU against the reference tools' own test suites: every
 * expected value below is copied from the file named beside it, with the
 * precision that file asserts.
 *
 *   [SB]  mjpost/sacrebleu test/test_bleu.py
 *         @ 785d26bb42ff5cc738c8aa06efb288cf407fc4fd (EPSILON 1e-8 unless said)
 *   [SBS] mjpost/sacrebleu test/test_sentence_bleu.py
 *         @ ad62c9b5a4c1381598c0774c8ea1dc3597638ac0 (EPSILON 1e-3)
 *   [ND]  nltk/nltk nltk/translate/bleu_score.py doctests, NLTK 3.8 (as in
 *         @ 902dbeb523b0816ee38c9a100e4e6a54f06e7d14 where the doctest is
 *         older; "0.5045..." asserts the leading digits)
 *   [NU]  nltk/nltk nltk/test/unit/translate/test_bleu.py, NLTK 3.8
 *         @ e7749d34d90efa3bed4ae9ce036c70a01589687d
 *   [NB]  nltk/nltk nltk/test/bleu.doctest, NLTK 3.8
 *
 * sacreBLEU's raw_corpus_bleu(hyps, refs, v) is floor smoothing with v,
 * tokenizer none and effective order; its compute_bleu defaults to no
 * smoothing and no effective order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test_support.h"

#define MAX_SEGS 8

/* ---- helpers -------------------------------------------------------------- */

/* Corpus BLEU of n hypotheses against n_refs streams. */
static nu_bleu_result corpus(const nu_bleu_params *p, const char *const *hyps, int n,
                             const char *const *refs0, const char *const *refs1) {
    const char *const *streams[2] = {refs0, refs1};
    nu_bleu_result r;
    nu_error err;
    nu_status st = nu_bleu_corpus(p, hyps, n, streams, refs1 ? 2 : 1, &r, &err);
    if (st) fprintf(stderr, "nu_bleu_corpus: %s\n", err.message);
    assert_int_equal(st, NU_OK);
    return r;
}

static nu_bleu_params raw_params(double floor_value) {
    nu_bleu_params p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
    p.smooth = NU_BLEU_SMOOTH_FLOOR;
    p.smooth_value = floor_value;
    p.tokenizer = NU_BLEU_TOK_NONE;
    p.effective_order = true;
    return p;
}

/* Statistics of one segment. */
static nu_bleu_stats segment(const nu_bleu_params *p, const char *hyp, const char *const *refs,
                             int n_refs) {
    nu_bleu_stats s;
    nu_error err;
    nu_status st = nu_bleu_segment(p, hyp, refs, n_refs, &s, &err);
    if (st) fprintf(stderr, "nu_bleu_segment: %s\n", err.message);
    assert_int_equal(st, NU_OK);
    return s;
}

static double compute(const nu_bleu_params *p, const nu_bleu_stats *s) {
    nu_bleu_result r;
    nu_error err;
    assert_int_equal(nu_bleu_compute(p, s, &r, &err), NU_OK);
    return r.score;
}

/* x starts with the digits of `prefix` (a doctest's "0.5045..."). */
static void assert_leading(double x, const char *prefix) {
    const char *dot = strchr(prefix, '.');
    int decimals = dot ? (int)strlen(dot + 1) : 0;
    double lo = atof(prefix), step = pow(10, -decimals);
    if (!(x >= lo - 1e-12 && x < lo + step)) {
        fprintf(stderr, "%.17g does not start with %s\n", x, prefix);
        fail();
    }
}

static void assert_near(double x, double want, double eps) {
    if (!(fabs(x - want) < eps)) {
        fprintf(stderr, "%.17g differs from %.17g by more than %g\n", x, want, eps);
        fail();
    }
}

/* ---- sacreBLEU: test_bleu.py ---------------------------------------------- */

static const char *const readme_refs0[] = {"The dog bit the man.", "It was not unexpected.",
                                           "The man bit him first."};
static const char *const readme_refs1[] = {"The dog had bit the man.", "No one was surprised.",
                                           "The man had bitten the dog."};
static const char *const readme_hyps[] = {"The dog bit the man.", "It wasn't surprising.",
                                          "The man had just bitten him."};

/* [SB] test_raw_bleu_cases: raw_corpus_bleu(hyps, refs, .01).score / 100 */
static void test_sacrebleu_raw(void **state) {
    (void)state;
    nu_bleu_params p = raw_params(0.01);
    const char *h1[] = {"this is a test", "another test"}, *r1[] = {"ref1", "ref2"};
    assert_near(corpus(&p, h1, 2, r1, NULL).score / 100, 0.0, 1e-8); /* #141: now 0 */
    const char *h2[] = {"this is a test"}, *r2[] = {"this is a test"};
    assert_near(corpus(&p, h2, 1, r2, NULL).score / 100, 1.0, 1e-8);
    const char *h3[] = {"this is a fest"}, *r3[] = {"this is a test"};
    assert_near(corpus(&p, h3, 1, r3, NULL).score / 100, 0.223606797749979, 1e-8);
}

/* [SB] test_corpus_bleu_cases: corpus_bleu(hyps, refs, **kwargs).score */
static void test_sacrebleu_corpus(void **state) {
    (void)state;
    nu_bleu_params p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
    assert_near(corpus(&p, readme_hyps, 3, readme_refs0, readme_refs1).score, 48.530827, 1e-6);
    const char *empty[] = {"", "", ""}; /* empty hypotheses are not removed */
    assert_near(corpus(&p, empty, 3, readme_refs0, readme_refs1).score, 0.0, 1e-8);
    p.tokenizer = NU_BLEU_TOK_NONE;
    assert_near(corpus(&p, readme_hyps, 3, readme_refs0, readme_refs1).score, 49.1919566, 1e-7);
    p.tokenizer = NU_BLEU_TOK_13A;
    assert_near(corpus(&p, readme_hyps, 3, readme_refs0, readme_refs1).score, 48.530827, 1e-6);
    p.tokenizer = NU_BLEU_TOK_INTL;
    assert_near(corpus(&p, readme_hyps, 3, readme_refs0, readme_refs1).score, 43.91623493, 1e-8);
    p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
    p.smooth = NU_BLEU_SMOOTH_NONE;
    assert_near(corpus(&p, readme_hyps, 3, readme_refs0, readme_refs1).score, 48.530827, 1e-6);
}

/* [SB] test_case_offset and test_case_statistics */
static void test_sacrebleu_offset_and_statistics(void **state) {
    (void)state;
    const char *h[] = {"am I am a character sequence"},
               *r[] = {"I am a symbol string sequence a a"};
    nu_bleu_params p = raw_params(0.0);
    assert_near(corpus(&p, h, 1, r, NULL).score / 100, 0, 1e-8); /* without offset */
    p = raw_params(-1);                                          /* floor's default, 0.1 */
    assert_near(corpus(&p, h, 1, r, NULL).score / 100, 0.1555722182, 1e-8);
    p = raw_params(0.01);
    nu_bleu_stats s = segment(&p, h[0], r, 1);
    const int64_t counts[] = {4, 2, 1, 0}, totals[] = {6, 5, 4, 3};
    for (int n = 0; n < 4; n++) {
        assert_int_equal(s.correct[n], counts[n]);
        assert_int_equal(s.total[n], totals[n]);
    }
}

/* [SB] test_case_scoring: compute_bleu([9,7,5,3], [10,8,6,4], 11, 11) */
static void test_sacrebleu_scoring(void **state) {
    (void)state;
    nu_bleu_params p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
    p.smooth = NU_BLEU_SMOOTH_NONE; /* compute_bleu's default */
    nu_bleu_stats s = {.hyp_len = 11, .ref_len = 11, .n_segments = 1, .n_refs = 1};
    const int64_t c[] = {9, 7, 5, 3}, t[] = {10, 8, 6, 4};
    memcpy(s.correct, c, sizeof c);
    memcpy(s.total, t, sizeof t);
    assert_near(compute(&p, &s) / 100, 0.8375922397, 1e-8);
}

/* [SB] test_case_effective_order: raw_corpus_bleu(hyps, refs, .01) */
static void test_sacrebleu_effective_order(void **state) {
    (void)state;
    nu_bleu_params p = raw_params(0.01);
    const char *h1[] = {"test"}, *h2[] = {"a test"}, *h3[] = {"a little test"}, *r[] = {"a test"};
    assert_near(corpus(&p, h1, 1, r, NULL).score / 100, 0.3678794411714425, 1e-8);
    assert_near(corpus(&p, h2, 1, r, NULL).score / 100, 1.0, 1e-8);
    assert_near(corpus(&p, h3, 1, r, NULL).score / 100, 0.03218297948685433, 1e-8);
}

/* [SB] test_case_degenerate_stats: compute_bleu(..., smooth_method='floor',
 * smooth_value=offset).score / 100 == 0.0 exactly */
static void test_sacrebleu_degenerate(void **state) {
    (void)state;
    static const struct {
        int64_t correct[4], total[4], sys_len, ref_len;
        double offset;
    } cases[] = {
        {{0, 0, 0, 0}, {4, 4, 2, 1}, 0, 1, 0.0}, {{0, 0, 0, 0}, {10, 11, 12, 0}, 14, 10, 0.0},
        {{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0, 0.0}, {{6, 5, 4, 0}, {6, 5, 4, 3}, 6, 6, 0.0},
        {{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0, 0.1}, {{0, 0, 0, 0}, {0, 0, 0, 0}, 1, 5, 0.01},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nu_bleu_params p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
        p.smooth = NU_BLEU_SMOOTH_FLOOR;
        p.smooth_value = cases[i].offset;
        nu_bleu_stats s = {.hyp_len = cases[i].sys_len, .ref_len = cases[i].ref_len};
        memcpy(s.correct, cases[i].correct, sizeof s.correct[0] * 4);
        memcpy(s.total, cases[i].total, sizeof s.total[0] * 4);
        assert_true(compute(&p, &s) / 100 == 0.0);
    }
}

/* [SB] test_bleu_max_order: f"{BLEU(max_ngram_order=order).corpus_score(...).score:.2f}" */
static void test_sacrebleu_max_order(void **state) {
    (void)state;
    static const char *const want[] = {"77.65", "60.50", "53.93", "48.53", "46.14", "43.28"};
    for (int order = 1; order <= 6; order++) {
        nu_bleu_params p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
        p.max_order = order;
        char got[32];
        snprintf(got, sizeof got, "%.2f",
                 corpus(&p, readme_hyps, 3, readme_refs0, readme_refs1).score);
        assert_string_equal(got, want[order - 1]);
    }
}

/* ---- sacreBLEU: test_sentence_bleu.py ------------------------------------- */

/* [SBS] test_api_sentence_bleu: BLEU(lowercase, tokenize, smooth_method,
 * smooth_value, effective_order=True).sentence_score(SYS, [REF]) */
static void test_sacrebleu_sentence(void **state) {
    (void)state;
    static const char *ref = "producţia de zahăr brut se exprimă în zahăr alb;";
    static const char *sys =
        "Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;";
    static const struct {
        nu_bleu_smooth smooth;
        double value;
        bool lowercase;
        nu_bleu_tokenizer tok;
        double want;
    } cases[] = {
        {NU_BLEU_SMOOTH_EXP, -1, false, NU_BLEU_TOK_13A, 8.493},
        {NU_BLEU_SMOOTH_NONE, -1, false, NU_BLEU_TOK_13A, 0.0},
        {NU_BLEU_SMOOTH_FLOOR, -1, false, NU_BLEU_TOK_13A, 4.51688},
        {NU_BLEU_SMOOTH_FLOOR, 0.1, false, NU_BLEU_TOK_13A, 4.51688},
        {NU_BLEU_SMOOTH_FLOOR, 0.5, false, NU_BLEU_TOK_13A, 10.10},
        {NU_BLEU_SMOOTH_ADD_K, -1, false, NU_BLEU_TOK_13A, 14.882},
        {NU_BLEU_SMOOTH_ADD_K, 1, false, NU_BLEU_TOK_13A, 14.882},
        {NU_BLEU_SMOOTH_ADD_K, 2, false, NU_BLEU_TOK_13A, 21.389},
        {NU_BLEU_SMOOTH_EXP, -1, false, NU_BLEU_TOK_NONE, 7.347},
        {NU_BLEU_SMOOTH_EXP, -1, false, NU_BLEU_TOK_INTL, 8.493},
        {NU_BLEU_SMOOTH_EXP, -1, false, NU_BLEU_TOK_CHAR, 40.8759},
        {NU_BLEU_SMOOTH_EXP, -1, true, NU_BLEU_TOK_CHAR, 42.0267},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nu_bleu_params p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
        p.smooth = cases[i].smooth;
        p.smooth_value = cases[i].value;
        p.lowercase = cases[i].lowercase;
        p.tokenizer = cases[i].tok;
        p.effective_order = true;
        nu_bleu_stats s = segment(&p, sys, &ref, 1);
        assert_near(compute(&p, &s), cases[i].want, 1e-3);
    }
}

/* [SBS] test_api_sentence_bleu_zero: "this is a cat" against "okay thanks" */
static void test_sacrebleu_sentence_zero(void **state) {
    (void)state;
    static const char *ref = "okay thanks";
    static const struct {
        nu_bleu_smooth smooth;
        double value;
    } cases[] = {{NU_BLEU_SMOOTH_EXP, -1},   {NU_BLEU_SMOOTH_NONE, -1},
                 {NU_BLEU_SMOOTH_FLOOR, -1}, {NU_BLEU_SMOOTH_FLOOR, 0.1},
                 {NU_BLEU_SMOOTH_ADD_K, -1}, {NU_BLEU_SMOOTH_ADD_K, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nu_bleu_params p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
        p.smooth = cases[i].smooth;
        p.smooth_value = cases[i].value;
        p.effective_order = true;
        nu_bleu_stats s = segment(&p, "this is a cat", &ref, 1);
        assert_near(compute(&p, &s), 0.0, 1e-3);
    }
}

/* ---- NLTK ----------------------------------------------------------------- */

static const char *nltk_hyp1 =
    "It is a guide to action which ensures that the military always obeys the commands of the "
    "party";
static const char *nltk_hyp2 =
    "It is to insure the troops forever hearing the activity guidebook that party direct";
static const char *const nltk_refs[] = {
    "It is a guide to action that ensures that the military will forever heed Party commands",
    "It is the guiding principle which guarantees the military forces always being under the "
    "command of the Party",
    "It is the practical guide for the army always to heed the directions of the party"};
static const char *nltk_hyp_b = "he read the book because he was interested in world history";
static const char *nltk_ref_b = "he was interested in world history because he read the book";

static nu_bleu_params nltk(nu_bleu_smooth smooth, int n_weights, const double *w) {
    nu_bleu_params p = nu_bleu_default_params(NU_BLEU_NLTK);
    p.smooth = smooth;
    p.n_weights = n_weights;
    for (int i = 0; i < n_weights; i++) p.weights[i] = w[i];
    return p;
}

/* sentence_bleu(refs, hyp, weights, smoothing) */
static double nltk_sentence(const nu_bleu_params *p, const char *hyp, const char *const *refs,
                            int n_refs) {
    nu_bleu_stats s = segment(p, hyp, refs, n_refs);
    return compute(p, &s);
}

/* corpus_bleu([[r1a, r1b, r1c], [r2a]], [hyp1, hyp2]) of the doctests */
static double nltk_corpus_doctest(const nu_bleu_params *p) {
    nu_bleu_stats sum = {0};
    nu_bleu_stats a = segment(p, nltk_hyp1, nltk_refs, 3);
    nu_bleu_stats b = segment(p, nltk_hyp_b, &nltk_ref_b, 1);
    nu_bleu_stats_add(&sum, &a);
    nu_bleu_stats_add(&sum, &b);
    return compute(p, &sum);
}

/* [ND] sentence_bleu's doctests */
static void test_nltk_sentence_doctests(void **state) {
    (void)state;
    nu_bleu_params p = nltk(NU_BLEU_NLTK_METHOD0, 0, NULL);
    assert_leading(nltk_sentence(&p, nltk_hyp1, nltk_refs, 3), "0.5045");
    double x = nltk_sentence(&p, nltk_hyp2, nltk_refs, 3);
    assert_true(round(x * 1e4) / 1e4 == 0.0); /* round(..., 4) == 0.0 */
    p.smooth = NU_BLEU_NLTK_METHOD1;
    assert_leading(nltk_sentence(&p, nltk_hyp2, nltk_refs, 3), "0.0370");
    const double w5[] = {1. / 5., 1. / 5., 1. / 5., 1. / 5., 1. / 5.};
    p = nltk(NU_BLEU_NLTK_METHOD0, 5, w5);
    assert_leading(nltk_sentence(&p, nltk_hyp1, nltk_refs, 3), "0.3920");
    /* several weights at once: [0.7453..., 0.6240..., 0.5045...] */
    const double w2[] = {1. / 2., 1. / 2.}, w3[] = {1. / 3., 1. / 3., 1. / 3.},
                 w4[] = {1. / 4., 1. / 4., 1. / 4., 1. / 4.};
    p = nltk(NU_BLEU_NLTK_METHOD0, 2, w2);
    assert_leading(nltk_sentence(&p, nltk_hyp1, nltk_refs, 3), "0.7453");
    p = nltk(NU_BLEU_NLTK_METHOD0, 3, w3);
    assert_leading(nltk_sentence(&p, nltk_hyp1, nltk_refs, 3), "0.6240");
    p = nltk(NU_BLEU_NLTK_METHOD0, 4, w4);
    assert_leading(nltk_sentence(&p, nltk_hyp1, nltk_refs, 3), "0.5045");
}

/* [ND] corpus_bleu's doctests */
static void test_nltk_corpus_doctests(void **state) {
    (void)state;
    nu_bleu_params p = nltk(NU_BLEU_NLTK_METHOD0, 0, NULL);
    assert_leading(nltk_corpus_doctest(&p), "0.5920");
    /* corpus_bleu differs from the mean of sentence_bleu: 0.6223... */
    double s1 = nltk_sentence(&p, nltk_hyp1, nltk_refs, 3);
    double s2 = nltk_sentence(&p, nltk_hyp_b, &nltk_ref_b, 1);
    assert_leading((s1 + s2) / 2, "0.6223");
    const double w[] = {0.1, 0.3, 0.5, 0.1};
    p = nltk(NU_BLEU_NLTK_METHOD0, 4, w);
    assert_leading(nltk_corpus_doctest(&p), "0.5818");
    /* [(0.5, 0.5), (0.333, 0.333, 0.334), (0.25,)*4, (0.2,)*5] ->
     * [0.8242..., 0.7067..., 0.5920..., 0.4719...] */
    const double wa[] = {0.5, 0.5}, wb[] = {0.333, 0.333, 0.334}, wc[] = {0.25, 0.25, 0.25, 0.25},
                 wd[] = {0.2, 0.2, 0.2, 0.2, 0.2};
    p = nltk(NU_BLEU_NLTK_METHOD0, 2, wa);
    assert_leading(nltk_corpus_doctest(&p), "0.8242");
    p = nltk(NU_BLEU_NLTK_METHOD0, 3, wb);
    assert_leading(nltk_corpus_doctest(&p), "0.7067");
    p = nltk(NU_BLEU_NLTK_METHOD0, 4, wc);
    assert_leading(nltk_corpus_doctest(&p), "0.5920");
    p = nltk(NU_BLEU_NLTK_METHOD0, 5, wd);
    assert_leading(nltk_corpus_doctest(&p), "0.4719");
}

/* modified_precision(references, hypothesis, n) as the statistics give it */
static double modified_precision(const char *hyp, const char *const *refs, int n_refs, int n) {
    nu_bleu_params p = nltk(NU_BLEU_NLTK_METHOD0, 0, NULL);
    nu_bleu_stats s = segment(&p, hyp, refs, n_refs);
    return (double)s.correct[n - 1] / (double)s.total[n - 1];
}

/* [ND] modified_precision's doctests and [NU] test_modified_precision */
static void test_nltk_modified_precision(void **state) {
    (void)state;
    const char *cat[] = {"the cat is on the mat", "there is a cat on the mat"};
    const char *the7 = "the the the the the the the";
    assert_leading(modified_precision(the7, cat, 2, 1), "0.2857");
    assert_near(modified_precision(the7, cat, 2, 1), 0.28571428, 0.5e-4); /* places=4 */
    assert_true(modified_precision(the7, cat, 2, 2) == 0.0);
    assert_true(modified_precision("of the", nltk_refs, 3, 1) == 1.0);
    assert_true(modified_precision("of the", nltk_refs, 3, 2) == 1.0);
    assert_leading(modified_precision(nltk_hyp1, nltk_refs, 3, 1), "0.9444");
    assert_leading(modified_precision(nltk_hyp2, nltk_refs, 3, 1), "0.5714");
    assert_true(modified_precision(nltk_hyp1, nltk_refs, 3, 2) == 0.5882352941176471);
    assert_leading(modified_precision(nltk_hyp2, nltk_refs, 3, 2), "0.07692");
    /* [NU] round(..., 4) */
    assert_true(round(modified_precision(nltk_hyp1, nltk_refs, 3, 1) * 1e4) / 1e4 == 0.9444);
    assert_true(round(modified_precision(nltk_hyp2, nltk_refs, 3, 1) * 1e4) / 1e4 == 0.5714);
    assert_true(round(modified_precision(nltk_hyp1, nltk_refs, 3, 2) * 1e4) / 1e4 == 0.5882);
    assert_true(round(modified_precision(nltk_hyp2, nltk_refs, 3, 2) * 1e4) / 1e4 == 0.0769);
}

/* "a a a ..." of n tokens */
static const char *as(int n) {
    static char buf[8][64];
    static int next;
    char *b = buf[next++ % 8];
    b[0] = 0;
    for (int i = 0; i < n; i++) strcat(b, i ? " a" : "a");
    return b;
}

static double nltk_bp(int hyp, const int *refs, int n_refs) {
    const char *r[4];
    for (int i = 0; i < n_refs; i++) r[i] = as(refs[i]);
    nu_bleu_params p = nltk(NU_BLEU_NLTK_METHOD0, 0, NULL);
    nu_bleu_stats s = segment(&p, as(hyp), r, n_refs);
    nu_bleu_result res;
    assert_int_equal(nu_bleu_compute(&p, &s, &res, NULL), NU_OK);
    return res.bp;
}

/* [ND] brevity_penalty's doctests and [NU] test_brevity_penalty */
static void test_nltk_brevity_penalty(void **state) {
    (void)state;
    assert_true(nltk_bp(12, (int[]){12, 15, 17}, 3) == 1.0);
    assert_true(nltk_bp(12, (int[]){28, 28}, 2) == 0.2635971381157267);
    assert_leading(nltk_bp(12, (int[]){13, 2}, 2), "0.9200");
    assert_true(nltk_bp(12, (int[]){13, 11}, 2) == 1 && nltk_bp(12, (int[]){11, 13}, 2) == 1);
    assert_leading(nltk_bp(7, (int[]){11, 8}, 2), "0.8668");
    assert_true(nltk_bp(7, (int[]){11, 8, 6, 7}, 4) == 1.0);
    assert_near(nltk_bp(7, (int[]){11, 8}, 2), 0.8669, 0.5e-4); /* [NU] places=4 */
}

/* [ND] SmoothingFunction's doctest: sentence_bleu([reference1], hypothesis1,
 * smoothing_function=chencherry.methodN) */
static void test_nltk_smoothing_methods(void **state) {
    (void)state;
    static const char *const want[] = {"0.4118", "0.4118", "0.4452", "0.4118",
                                       "0.4118", "0.4905", "0.4135", "0.4905"};
    nu_bleu_params p = nltk(NU_BLEU_NLTK_METHOD0, 0, NULL);
    assert_leading(nltk_sentence(&p, nltk_hyp1, nltk_refs, 1), "0.4118"); /* no smoothing */
    for (int m = 0; m < 8; m++) {
        p.smooth = (nu_bleu_smooth)(NU_BLEU_NLTK_METHOD0 + m);
        assert_leading(nltk_sentence(&p, nltk_hyp1, nltk_refs, 1), want[m]);
    }
}

/* [NU] the zero, full, partial and fringe cases; [NB] bleu.doctest */
static void test_nltk_unit_cases(void **state) {
    (void)state;
    const char *no_align = "The candidate has no alignment to any of the references";
    for (int n = 1; n < 3; n++) { /* range(1, len(hypothesis)) */
        double w[3];
        for (int i = 0; i < n; i++) w[i] = 1.0 / n;
        nu_bleu_params p = nltk(NU_BLEU_NLTK_METHOD0, n, w);
        assert_true(nltk_sentence(&p, "John loves Mary", &no_align, 1) == 0);
        const char *same = "John loves Mary";
        assert_true(nltk_sentence(&p, "John loves Mary", &same, 1) == 1.0);
    }
    nu_bleu_params p = nltk(NU_BLEU_NLTK_METHOD0, 0, NULL);
    const char *jlm = "John loves Mary", *jlmq = "John loves Mary ?", *empty = "";
    assert_near(nltk_sentence(&p, "John loves Mary who loves Mike", &jlm, 1), 0.0, 0.5e-4);
    assert_near(nltk_sentence(&p, "John loves Mary", &jlmq, 1), 0.0, 0.5e-4);
    assert_near(nltk_sentence(&p, "John loves Mary", &jlm, 1), 0.0, 0.5e-4);
    assert_true(nltk_sentence(&p, "", &no_align, 1) == 0);             /* empty hypothesis */
    assert_true(nltk_sentence(&p, "John loves Mary", &empty, 1) == 0); /* empty reference */
    assert_true(nltk_sentence(&p, "", &empty, 1) == 0);
    const char *let = "let it go";
    assert_near(nltk_sentence(&p, "let go it", &let, 1), 0.0, 0.5e-4);
    p.smooth = NU_BLEU_NLTK_METHOD4; /* a one-token hypothesis with method4: no error */
    assert_true(nltk_sentence(&p, "Foo", &no_align, 1) == 0);
    /* test_corpus_bleu_with_bad_sentence */
    p = nltk(NU_BLEU_NLTK_METHOD0, 0, NULL);
    const char *bad_ref = "Their tasks include changing a pump on the faulty stokehold ."
                          "Likewise , two species that are very similar in morphology "
                          "were distinguished using genetics .";
    assert_near(nltk_sentence(&p,
                              "Teo S yb , oe uNb , R , T t , , t Tue Ar saln S , , 5istsi l , "
                              "5oe R ulO sae oR R",
                              &bad_ref, 1),
                0.0, 0.5e-4);
    /* [NB] bleu(refs, 'John loves Mary'.split(), (1,)) == 0 */
    p = nltk(NU_BLEU_NLTK_METHOD0, 1, (double[]){1});
    assert_true(nltk_sentence(&p, "John loves Mary", &no_align, 1) == 0);
    /* [NB] sentence_bleu(['It is a place of quiet contemplation .'], 'It is .',
     * method4) * 100 == 4.4267... */
    p = nltk(NU_BLEU_NLTK_METHOD4, 0, NULL);
    const char *quiet = "It is a place of quiet contemplation .";
    assert_leading(nltk_sentence(&p, "It is .", &quiet, 1) * 100, "4.4267");
}

/* ---- the API's contract --------------------------------------------------- */

static void test_signature_and_errors(void **state) {
    (void)state;
    nu_bleu_params p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
    nu_bleu_stats s = segment(&p, readme_hyps[0], (const char *[]){readme_refs0[0]}, 1);
    char sig[256];
    assert_int_equal(nu_bleu_signature(&p, &s, sig, sizeof sig, NULL), NU_OK);
    assert_string_equal(
        sig, "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:nucleus-" NU_VERSION_STRING);
    p.smooth = NU_BLEU_SMOOTH_FLOOR;
    p.lowercase = true;
    p.effective_order = true;
    p.tokenizer = NU_BLEU_TOK_INTL;
    s.n_refs = -1;
    assert_int_equal(nu_bleu_signature(&p, &s, sig, sizeof sig, NULL), NU_OK);
    assert_string_equal(
        sig,
        "nrefs:var|case:lc|eff:yes|tok:intl|smooth:floor[0.10]|version:nucleus-" NU_VERSION_STRING);
    nu_error err;
    assert_int_equal(nu_bleu_signature(&p, &s, sig, 8, &err), NU_ERR_BUFFER_SMALL);
    /* every reference empty (sacreBLEU: "Empty or None reference sentence") */
    nu_bleu_stats out;
    assert_int_equal(nu_bleu_segment(&p, "a b", (const char *[]){"", NULL}, 2, &out, &err),
                     NU_ERR_INVALID_ARG);
    p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
    p.smooth = NU_BLEU_NLTK_METHOD3; /* NLTK's method with the sacreBLEU flavor */
    assert_int_equal(nu_bleu_segment(&p, "a", (const char *[]){"a"}, 1, &out, &err),
                     NU_ERR_INVALID_ARG);
    p = nu_bleu_default_params(NU_BLEU_SACREBLEU);
    p.max_order = NU_BLEU_MAX_ORDER + 1;
    assert_int_equal(nu_bleu_segment(&p, "a", (const char *[]){"a"}, 1, &out, &err),
                     NU_ERR_INVALID_ARG);
    p = nltk(NU_BLEU_NLTK_METHOD6, 0, NULL); /* NLTK asserts a non-zero trigram precision */
    nu_bleu_stats z = segment(&p, "a b c d", (const char *[]){"a b x y"}, 1);
    nu_bleu_result r;
    assert_int_equal(nu_bleu_compute(&p, &z, &r, &err), NU_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sacrebleu_raw),
        cmocka_unit_test(test_sacrebleu_corpus),
        cmocka_unit_test(test_sacrebleu_offset_and_statistics),
        cmocka_unit_test(test_sacrebleu_scoring),
        cmocka_unit_test(test_sacrebleu_effective_order),
        cmocka_unit_test(test_sacrebleu_degenerate),
        cmocka_unit_test(test_sacrebleu_max_order),
        cmocka_unit_test(test_sacrebleu_sentence),
        cmocka_unit_test(test_sacrebleu_sentence_zero),
        cmocka_unit_test(test_nltk_sentence_doctests),
        cmocka_unit_test(test_nltk_corpus_doctests),
        cmocka_unit_test(test_nltk_modified_precision),
        cmocka_unit_test(test_nltk_brevity_penalty),
        cmocka_unit_test(test_nltk_smoothing_methods),
        cmocka_unit_test(test_nltk_unit_cases),
        cmocka_unit_test(test_signature_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
