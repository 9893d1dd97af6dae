/* test_rouge.c - ROUGE against rouge-score's own test suite, and the Porter
 * stemmer against NLTK's: every expected value below is copied from the
 * file named beside it, with the precision that file asserts
 * (assertAlmostEqual: 7 places unless said).
 *
 *   [RS]  google-research/google-research rouge/rouge_scorer_test.py
 *         @ da0c44e0b13f46c6483b01608c3e7ba014655858 (its test data, copied
 *         into tests/eval/rouge/, README there)
 *   [SC]  google-research/google-research rouge/scoring_test.py
 *         @ 0c1bbe5fc971a1de1a427debc814e66ab4f1e7fa
 *   [TK]  google-research/google-research rouge/tokenize_test.py
 *         @ 0c1bbe5fc971a1de1a427debc814e66ab4f1e7fa
 *   [NS]  nltk/nltk nltk/test/stem.doctest (the 19 plurals)
 *         @ 1189c0ca3a921b4f5683728185486caa5c18e897, and
 *         nltk/test/unit/test_stem.py's test_oed_bug ("oed" -> "o"), NLTK 3.8 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "nucleus.h"
#include "test_support.h"

static void near(double got, double want, int places) {
    const double tol = 0.5 * pow(10, -places);
    if (!(fabs(got - want) <= tol)) {
        fprintf(stderr, "%.12g differs from %.12g at %d places\n", got, want, places);
        fail();
    }
}

static nu_rouge_score score1(const char *type, bool stem, const char *target,
                             const char *prediction) {
    int32_t t;
    assert_int_equal(nu_rouge_type(type, &t, NULL), NU_OK);
    nu_rouge_score s;
    nu_error err;
    nu_status st = nu_rouge(&t, 1, stem, &target, 1, prediction, &s, &err);
    if (st) fprintf(stderr, "nu_rouge: %s\n", err.message);
    assert_int_equal(st, NU_OK);
    return s;
}

static void check(nu_rouge_score s, double p, double r, double f, int places) {
    near(s.precision, p, places);
    near(s.recall, r, places);
    near(s.fmeasure, f, places);
}

/* Line i (with its "\n", as readlines() gives it) of a test data file. */
static char *data_line(const char *file, int i) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/eval/rouge/%s", NU_SOURCE_DIR, file);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[4][4096];
    static int next;
    char *b = buf[next++ % 4];
    for (int k = 0; k <= i; k++) assert_non_null(fgets(b, sizeof buf[0], f));
    fclose(f);
    return b;
}

static char *data_file(const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/eval/rouge/%s", NU_SOURCE_DIR, file);
    size_t len;
    char *text = nu_test_read_file(path, &len);
    assert_non_null(text);
    return text;
}

/* [RS] testInvalidRougeTypes, testValidRougeTypes */
static void test_types(void **state) {
    (void)state;
    int32_t t;
    nu_error err;
    const char *invalid[] = {"rougen", "rouge0", "rouge10"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(nu_rouge_type(invalid[i], &t, &err), NU_ERR_INVALID_ARG);
    const char *valid[] = {"rouge1", "rouge9", "rougeL", "rougeLsum"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(nu_rouge_type(valid[i], &t, &err), NU_OK);
        nu_rouge_score s;
        const char *target = "testing one two";
        assert_int_equal(nu_rouge(&t, 1, false, &target, 1, "testing", &s, &err), NU_OK);
    }
}

/* [RS] testRouge1, testRougeEmpty, testRouge2, testRougeLConsecutive,
 * testRougeLNonConsecutive, testMultipleRougeTypes */
static void test_small_cases(void **state) {
    (void)state;
    check(score1("rouge1", false, "testing one two", "testing"), 1, 1. / 3, 1. / 2, 7);
    const char *types[] = {"rouge1", "rouge2", "rougeL", "rougeLsum"};
    for (int i = 0; i < 4; i++) check(score1(types[i], false, "testing one two", ""), 0, 0, 0, 7);
    check(score1("rouge2", false, "testing one two", "testing one"), 1, 1. / 2, 2. / 3, 7);
    check(score1("rougeL", false, "testing one two", "testing one"), 1, 2. / 3, 4. / 5, 7);
    check(score1("rougeL", false, "testing one two", "testing two"), 1, 2. / 3, 4. / 5, 7);
    int32_t both[2] = {1, NU_ROUGE_L};
    nu_rouge_score s[2];
    const char *target = "testing one two";
    assert_int_equal(nu_rouge(both, 2, false, &target, 1, "testing one", s, NULL), NU_OK);
    check(s[0], 1, 2. / 3, 4. / 5, 7);
    check(s[1], 1, 2. / 3, 4. / 5, 7);
}

/* [RS] the *AgainstRouge155* tests: ROUGE-1.5.5's figures on testdata/
 * target.txt and prediction.txt, 5 places */
static void test_against_rouge155(void **state) {
    (void)state;
    const char *t0 = data_line("target.txt", 0), *p0 = data_line("prediction.txt", 0);
    const char *t1 = data_line("target.txt", 1), *p1 = data_line("prediction.txt", 1);
    /* testRouge1AgainstRouge155 (P, R, F) */
    check(score1("rouge1", false, t0, p0), 0.68750, 0.40741, 0.51163, 5);
    check(score1("rouge1", false, t1, p1), 0.65385, 0.40476, 0.50000, 5);
    /* testRouge1AgainstRouge155WithStemming */
    check(score1("rouge1", true, t0, p0), 0.68750, 0.40741, 0.51163, 5);
    check(score1("rouge1", true, t1, p1), 0.69231, 0.42857, 0.52941, 5);
    /* testRouge2AgainstRouge155 and ...WithStemming */
    check(score1("rouge2", false, t0, p0), 0.53333, 0.30769, 0.39024, 5);
    check(score1("rouge2", false, t1, p1), 0.48000, 0.29268, 0.36364, 5);
    check(score1("rouge2", true, t0, p0), 0.53333, 0.30769, 0.39024, 5);
    check(score1("rouge2", true, t1, p1), 0.48000, 0.29268, 0.36364, 5);
    /* testRougeLAgainstRouge155 */
    check(score1("rougeL", false, t0, p0), 0.68750, 0.40741, 0.51163, 5);
    check(score1("rougeL", false, t1, p1), 0.65385, 0.40476, 0.50000, 5);
    /* testRougeLSumAgainstRouge155WithStemming: the whole multi-line files */
    char *target = data_file("target_multi.0.txt"),
         *prediction = data_file("prediction_multi.0.txt");
    check(score1("rougeLsum", true, target, prediction), 0.66667, 0.36538, 0.47205, 5);
    free(target);
    free(prediction);
}

/* [RS] testRougeLsum and testSummaryLevelLcs (the example of section 3.2 of
 * the ROUGE paper) */
static void test_rouge_lsum(void **state) {
    (void)state;
    nu_rouge_score s =
        score1("rougeLsum", false, "w1 w2 w3 w4 w5", "w1 w2 w6 w7 w8\nw1 w3 w8 w9 w5");
    near(s.recall, 0.8, 7);
    near(s.precision, 0.4, 7);
    near(s.fmeasure, 0.5333, 3);
    check(score1("rougeLsum", false, "w1 w2 w3 w4 w5", ""), 0, 0, 0, 3);
    check(score1("rougeLsum", false, "", "w1"), 0, 0, 0, 3);
    check(score1("rougeLsum", false, "w1 w2 w3 w4 w5", "/"), 0, 0, 0, 3);
    /* testSummaryLevelLcs: exact 0.8 and 0.4; a candidate the tokenizer
     * empties gives recall 0 */
    assert_true(s.recall == 0.8 && s.precision == 0.4);
    assert_true(score1("rougeLsum", false, "reference", "").recall == 0.0);
}

/* [TK] test_give_me_a_name: 'one Two three' and 'one\n Two \nthree' are
 * ['one', 'two', 'three'] (seen through rouge1 against that list) */
static void test_tokenizer(void **state) {
    (void)state;
    check(score1("rouge1", false, "one two three", "one Two three"), 1, 1, 1, 7);
    check(score1("rouge2", false, "one two three", "one\n Two \nthree"), 1, 1, 1, 7);
    check(score1("rougeL", false, "one two three", "one\n Two \nthree"), 1, 1, 1, 7);
}

/* [SC] testConsistentPercentiles and testLargeConfidence: three scores,
 * 1000 resamples (delta 1e-8) */
static void test_bootstrap(void **state) {
    (void)state;
    const nu_rouge_score scores[3] = {{1, 1. / 3, 1. / 2}, {0, 0, 0}, {1, 1, 1}};
    nu_rouge_interval iv;
    assert_int_equal(nu_rouge_bootstrap(scores, 3, 0.9, 1000, 123, &iv, NULL), NU_OK);
    check(iv.low, 1. / 3, 1. / 9, 1. / 6, 8);
    check(iv.mid, 2. / 3, 4. / 9, 3. / 6, 8);
    check(iv.high, 3. / 3, 7. / 9, 5. / 6, 8);
    assert_int_equal(nu_rouge_bootstrap(scores, 3, 0.0, 1000, 123, &iv, NULL), NU_OK);
    check(iv.low, 2. / 3, 4. / 9, 3. / 6, 8);
    check(iv.mid, 2. / 3, 4. / 9, 3. / 6, 8);
    check(iv.high, 2. / 3, 4. / 9, 3. / 6, 8);
    nu_error err; /* BootstrapAggregator's ValueErrors */
    assert_int_equal(nu_rouge_bootstrap(scores, 3, 1.5, 1000, 1, &iv, &err), NU_ERR_INVALID_ARG);
    assert_int_equal(nu_rouge_bootstrap(scores, 3, 0.9, 0, 1, &iv, &err), NU_ERR_INVALID_ARG);
}

/* [NS] stem.doctest's plurals, and test_oed_bug */
static void test_porter(void **state) {
    (void)state;
    static const char *const pairs[][2] = {
        {"caresses", "caress"},    {"flies", "fli"},
        {"dies", "die"},           {"mules", "mule"},
        {"denied", "deni"},        {"died", "die"},
        {"agreed", "agre"},        {"owned", "own"},
        {"humbled", "humbl"},      {"sized", "size"},
        {"meeting", "meet"},       {"stating", "state"},
        {"siezing", "siez"},       {"itemization", "item"},
        {"sensational", "sensat"}, {"traditional", "tradit"},
        {"reference", "refer"},    {"colonizer", "colon"},
        {"plotted", "plot"},       {"oed", "o"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        char buf[64];
        size_t n = strlen(pairs[i][0]);
        memcpy(buf, pairs[i][0], n);
        n = nu_porter_stem(buf, n);
        buf[n] = 0;
        assert_string_equal(buf, pairs[i][1]);
    }
}

/* several targets: the best F-measure per type (score_multi) */
static void test_multi_target(void **state) {
    (void)state;
    int32_t t[2] = {1, 2};
    const char *targets[] = {"the cat sat", "a cat sat on the mat"};
    nu_rouge_score s[2], a, b;
    assert_int_equal(nu_rouge(t, 2, false, targets, 2, "the cat sat on a mat", s, NULL), NU_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(
            nu_rouge(&t[i], 1, false, &targets[0], 1, "the cat sat on a mat", &a, NULL), NU_OK);
        assert_int_equal(
            nu_rouge(&t[i], 1, false, &targets[1], 1, "the cat sat on a mat", &b, NULL), NU_OK);
        assert_true(s[i].fmeasure == (a.fmeasure >= b.fmeasure ? a.fmeasure : b.fmeasure));
    }
    nu_error err;
    assert_int_equal(nu_rouge(t, 2, false, targets, 0, "x", s, &err), NU_ERR_INVALID_ARG);
    int32_t bad = 12;
    assert_int_equal(nu_rouge(&bad, 1, false, targets, 1, "x", s, &err), NU_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_small_cases),
        cmocka_unit_test(test_against_rouge155),
        cmocka_unit_test(test_rouge_lsum),
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_bootstrap),
        cmocka_unit_test(test_porter),
        cmocka_unit_test(test_multi_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
