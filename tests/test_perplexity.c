/* test_perplexity.c - nu_perplexity and nu_kl_divergence on stories260K:
 *  - in windows mode its total score equals an independent computation (each
 *    window read a token at a time, -ln softmax in long double), for
 *    second-half scoring and for scoring every token, with a short last
 *    window;
 *  - in chunks mode it gives llama-perplexity's figure on the same text and
 *    context, and writes a KL-divergence base in llama.cpp's format;
 *  - multiple-choice log-likelihoods equal each candidate read alone;
 *  - the KL-divergence of q8_0 and q4_0 copies from the f32 model agrees
 *    with llama-perplexity --kl-divergence's statistics (the reference
 *    figures and how they were made: tests/eval/perplexity/README.md);
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

/* ln softmax(l)[token] in long double. */
static long double ld_logprob(const float *l, int32_t n_vocab, int32_t token) {
    long double m = l[0], z = 0;
    for (int32_t i = 1; i < n_vocab; i++) m = l[i] > m ? l[i] : m;
    for (int32_t i = 0; i < n_vocab; i++) z += expl((long double)l[i] - m);
    return ((long double)l[token] - m) - logl(z);
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
            long double s = -ld_logprob(nu_logits(c, 0), n_vocab, t[w0 + pos + 1]);
            *sum += s;
            *sq += s * s;
            (*count)++;
        }
    }
}

static void check_against_reference(int32_t window, int32_t from) {
    nu_context *c = new_ctx(128);
    nu_perplexity_params p = nu_perplexity_default_params();
    p.mode = NU_PERPLEXITY_WINDOWS;
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
    p.mode = NU_PERPLEXITY_WINDOWS;
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
    p.mode = NU_PERPLEXITY_WINDOWS;
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
    int32_t bad[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, nu_model_n_vocab(model), 2, 3};
    assert_int_equal(nu_perplexity(c, bad, 12, &p, &r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "vocabulary"));
    /* a text no longer than score_from (16 / 2 = 8): nothing to score is an error, not 0 */
    assert_int_equal(nu_perplexity(c, toks, 8, &p, &r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "nothing would be scored"));
    assert_int_equal(nu_perplexity(c, toks, 9, &p, &r, &err), NU_OK);
    assert_int_equal(r.n_scored, 1);
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

/* ---- llama-perplexity's chunks and KL-divergence ------------------------- */

/* The story's tokens (BOS added), malloc'd. */
static int32_t *story_tokens(size_t *n) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/eval/perplexity/story.txt", NU_SOURCE_DIR);
    size_t len;
    char *text = nu_test_read_file(path, &len);
    assert_non_null(text);
    int32_t *t = malloc((len + 8) * sizeof *t);
    assert_int_equal(nu_tokenize(model, text, len, NU_TOKENIZE_ADD_BOS, t, len + 8, n, NULL),
                     NU_OK);
    free(text);
    assert_int_equal(*n, 2264); /* as llama-perplexity tokenizes it */
    return t;
}

static bool first_chunk(int32_t window, const nu_perplexity_result *r, void *user) {
    if (window == 0) *(double *)user = r->perplexity;
    return true;
}

static void near_rel(double got, double want, double rel, const char *what) {
    print_message("%s: %.6f (llama.cpp %.6f, %+.3f%%)\n", what, got, want,
                  100 * (got - want) / want);
    assert_true(fabs(got - want) <= rel * fabs(want));
}

/* llama-perplexity -fa off -c 128 and -c 64 on story.txt: "Final estimate:
 * PPL = 4.5597 +/- 0.26453" (17 chunks, first chunk [1]3.4518) and "4.9041
 * +/- 0.27626" (35 chunks, [1]3.3712); -fa off because nucleus computes
 * attention as llama.cpp's path without flash attention does (README). */
static void test_chunks_match_llama_perplexity(void **state) {
    (void)state;
    size_t n;
    int32_t *t = story_tokens(&n);
    static const struct {
        int32_t ctx, chunks;
        double ppl, err, first;
    } want[] = {{128, 17, 4.5597, 0.26453, 3.4518}, {64, 35, 4.9041, 0.27626, 3.3712}};
    for (int i = 0; i < 2; i++) {
        nu_context *c = new_ctx(want[i].ctx);
        nu_perplexity_params p = nu_perplexity_default_params();
        double first = 0;
        p.on_window = first_chunk;
        p.user = &first;
        nu_perplexity_result r;
        assert_int_equal(nu_perplexity(c, t, (int64_t)n, &p, &r, NULL), NU_OK);
        assert_int_equal(r.n_windows, want[i].chunks);
        assert_int_equal(r.n_scored, want[i].chunks * (want[i].ctx - 1 - want[i].ctx / 2));
        near_rel(r.perplexity, want[i].ppl, 0.005, "perplexity");
        near_rel(r.stderr_ppl, want[i].err, 0.01, "its uncertainty");
        near_rel(first, want[i].first, 0.005, "first chunk");
        nu_context_free(c);
    }
    free(t);
}

static void quantized_copy(const char *type, char *path, size_t cap) {
    char in[512], name[64];
    snprintf(in, sizeof in, "%s", nu_test_shared("models/stories260K.gguf"));
    snprintf(name, sizeof name, "ppl_stories260K_%s.gguf", type);
    snprintf(path, cap, "%s", nu_test_tmp(name));
    nu_error err;
    nu_status st = nu_quantize_file(in, path, type, &err);
    if (st) print_message("quantize: %s\n", err.message);
    assert_int_equal(st, NU_OK);
}

/* The KL-divergence of the q8_0 and q4_0 copies from the f32 model at -c 128
 * on story.txt, against llama-perplexity -fa off --kl-divergence's figures
 * (base and copies both run with -fa off; commands in the README): mean
 * KLD within 2% (the bound), the top-token agreement and the
 * perplexities closer. For q4_0 also RMS Δp within 2% and the median and
 * 99th percentile of the rows' KLD within 5%. For q8_0 those three are not
 * checked: its rows' KLD (about 5e-4) is the size of the summation-order
 * noise of a 64-wide model, where one 8-bit activation rounding the other
 * way moves a row, so they move with the kernel level (nucleus's own scalar,
 * AVX2 and AVX-512 products, all exact to their references, put the median
 * 2.4% to 9.4% under llama.cpp's and the 99th percentile 3.8% to 11.7% over
 * it; llama.cpp's own flash-attention switch moves its 99th percentile by
 * 5.6% and RMS dp by 3.1%), while the mean stays within 1.5% at every level. */
static void test_kl_divergence_matches_llama(void **state) {
    (void)state;
    size_t n;
    int32_t *t = story_tokens(&n);
    char base[512];
    snprintf(base, sizeof base, "%s", nu_test_tmp("ppl_base_128.bin"));
    nu_context *c = new_ctx(128);
    nu_perplexity_params p = nu_perplexity_default_params();
    p.save_base = base;
    nu_perplexity_result r;
    assert_int_equal(nu_perplexity(c, t, (int64_t)n, &p, &r, NULL), NU_OK);
    nu_context_free(c);
    /* llama.cpp's layout: header, 17 * 128 tokens, 17 * 63 rows of 516 uint16 */
    size_t len;
    unsigned char *file = (unsigned char *)nu_test_read_file(base, &len);
    assert_non_null(file);
    assert_int_equal(len, 1113996); /* llama-perplexity --kl-divergence-base's file size */
    assert_memory_equal(file, "_logits_", 8);
    int32_t head[3];
    memcpy(head, file + 8, sizeof head);
    assert_true(head[0] == 128 && head[1] == 512 && head[2] == 17);
    assert_memory_equal(file + 20, t, 17 * 128 * sizeof *t);
    free(file);
    static const struct {
        const char *type;
        double kld, median, p99, dp_rms, same_top, ppl, ppl_base;
    } want[] = {
        {"q8_0", 0.000712, 0.000496, 0.003742, 0.00848, 0.99346, 4.565620, 4.559684},
        {"q4_0", 0.078073, 0.044535, 0.615388, 0.09423, 0.85808, 4.879207, 4.559684},
    };
    for (int i = 0; i < 2; i++) {
        char q[512];
        quantized_copy(want[i].type, q, sizeof q);
        nu_model *qm;
        assert_int_equal(nu_model_load(q, NU_LOAD_FULL, &qm, NULL), NU_OK);
        nu_context_params cp = nu_context_default_params();
        cp.n_ctx = 128;
        cp.n_threads = 2;
        nu_context *qc;
        assert_int_equal(nu_context_new(qm, &cp, &qc, NULL), NU_OK);
        nu_kld_result k;
        nu_error err;
        nu_status st = nu_kl_divergence(qc, base, NULL, &k, &err);
        if (st) print_message("kl: %s\n", err.message);
        assert_int_equal(st, NU_OK);
        print_message("%s:\n", want[i].type);
        assert_int_equal(k.n_scored, 1071);
        assert_int_equal(k.n_chunks, 17);
        near_rel(k.kld_mean, want[i].kld, 0.02, "mean KLD");
        if (strcmp(want[i].type, "q8_0")) {
            near_rel(k.kld_percentiles[5], want[i].median, 0.05, "median KLD");
            near_rel(k.kld_percentiles[2], want[i].p99, 0.05, "99% KLD");
            near_rel(k.dp_rms, want[i].dp_rms, 0.02, "RMS dp");
        }
        near_rel(k.same_top, want[i].same_top, 0.01, "same top");
        near_rel(k.ppl, want[i].ppl, 0.005, "PPL(Q)");
        near_rel(k.ppl_base, want[i].ppl_base, 0.001, "PPL(base)");
        assert_true(k.kld_percentiles[0] >= k.kld_percentiles[2] &&
                    k.kld_percentiles[2] >= k.kld_percentiles[5] &&
                    k.kld_percentiles[5] >= k.kld_percentiles[10]);
        nu_context_free(qc);
        nu_model_free(qm);
    }
    free(t);
}

/* A file that is not a base, one cut short, one of another vocabulary. */
static void test_kl_divergence_bad_files(void **state) {
    (void)state;
    nu_context *c = new_ctx(128);
    nu_kld_result k;
    nu_error err;
    char path[512];
    snprintf(path, sizeof path, "%s", nu_test_tmp("ppl_not_base.bin"));
    FILE *f = fopen(path, "wb");
    fputs("not a base file at all", f);
    fclose(f);
    assert_int_equal(nu_kl_divergence(c, path, NULL, &k, &err), NU_ERR_FORMAT);
    assert_non_null(strstr(err.message, "not a file of base log-probs"));
    assert_int_equal(nu_kl_divergence(c, "/nonexistent/base.bin", NULL, &k, &err), NU_ERR_IO);
    const int32_t head[3] = {16, 512, 2};
    f = fopen(path, "wb");
    fwrite("_logits_", 1, 8, f);
    fwrite(head, sizeof head, 1, f);
    int32_t tok[32] = {0};
    fwrite(tok, sizeof tok, 1, f); /* the tokens, then no log-probs */
    fclose(f);
    assert_int_equal(nu_kl_divergence(c, path, NULL, &k, &err), NU_ERR_FORMAT);
    assert_non_null(strstr(err.message, "truncated"));
    const int32_t other[3] = {16, 32000, 2};
    f = fopen(path, "wb");
    fwrite("_logits_", 1, 8, f);
    fwrite(other, sizeof other, 1, f);
    fclose(f);
    assert_int_equal(nu_kl_divergence(c, path, NULL, &k, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "vocabulary"));
    /* chunks mode refuses a text shorter than a chunk, and a score_from */
    nu_perplexity_params p = nu_perplexity_default_params();
    nu_perplexity_result r;
    assert_int_equal(nu_perplexity(c, toks, (int64_t)n_toks, &p, &r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "needs at least 128 tokens"));
    p.n_window = 16;
    p.score_from = 4;
    assert_int_equal(nu_perplexity(c, toks, (int64_t)n_toks, &p, &r, &err), NU_ERR_INVALID_ARG);
    nu_context_free(c);
}

/* ---- multiple choice ------------------------------------------------------ */

/* ln p of tokens[from..n) given the ones before, read one token at a time in
 * a fresh cache (long double softmax). */
static double sequential_loglik(nu_context *c, const int32_t *t, size_t n, size_t from) {
    const int32_t n_vocab = nu_model_n_vocab(model);
    nu_kv_clear(c);
    long double sum = 0;
    for (size_t pos = 0; pos + 1 < n; pos++) {
        nu_batch_entry e = {t[pos], (int32_t)pos, 0, true};
        assert_int_equal(nu_decode(c, &e, 1, NULL), NU_OK);
        if (pos + 1 < from) continue;
        sum += ld_logprob(nu_logits(c, 0), n_vocab, t[pos + 1]);
    }
    return (double)sum;
}

/* nu_choice_loglik reads the shared prefix once; each ending's score equals
 * the candidate read alone, token by token. */
static void test_choice_matches_sequential(void **state) {
    (void)state;
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 4;
    cp.n_threads = 2;
    nu_context *c;
    assert_int_equal(nu_context_new(model, &cp, &c, NULL), NU_OK);
    const char *context = "Once upon a time, there was a little girl named Lily. She loved to";
    const char *endings[] = {"play outside in the park.", "play with her dog.", "sing.",
                             "eat green thunder."};
    double ll[4];
    int32_t n[4];
    assert_int_equal(nu_choice_loglik(c, context, endings, 4, ll, n, NULL), NU_OK);
    /* the candidates' tokens and their common prefix, computed here */
    int32_t tok[4][128];
    size_t len[4];
    for (int i = 0; i < 4; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s %s", context, endings[i]);
        assert_int_equal(
            nu_tokenize(model, text, strlen(text), NU_TOKENIZE_ADD_BOS, tok[i], 128, &len[i], NULL),
            NU_OK);
    }
    size_t prefix = 0;
    while (tok[0][prefix] == tok[1][prefix] && tok[0][prefix] == tok[2][prefix] &&
           tok[0][prefix] == tok[3][prefix])
        prefix++;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(n[i], (int32_t)(len[i] - prefix));
        const double want = sequential_loglik(c, tok[i], len[i], prefix);
        print_message("ending %d: %.9f (read alone %.9f)\n", i, ll[i], want);
        assert_true(fabs(ll[i] - want) <= 1e-9 * fabs(want));
    }
    assert_true(ll[0] > ll[3] && ll[1] > ll[3]);
    nu_error err;
    assert_int_equal(nu_choice_loglik(c, context, endings, 1, ll, n, &err), NU_ERR_INVALID_ARG);
    const char *same[] = {"play", "play"}; /* nothing of its own to score */
    assert_int_equal(nu_choice_loglik(c, context, same, 2, ll, n, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "adds no token"));
    nu_context_free(c);
    c = new_ctx(128); /* n_seq_max 1: no room for 4 endings */
    assert_int_equal(nu_choice_loglik(c, context, endings, 4, ll, n, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "n_seq_max"));
    nu_context_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_greedy_text_vs_reversed),
        cmocka_unit_test(test_bad_arguments_and_stop),
        cmocka_unit_test(test_chunks_match_llama_perplexity),
        cmocka_unit_test(test_kl_divergence_matches_llama),
        cmocka_unit_test(test_kl_divergence_bad_files),
        cmocka_unit_test(test_choice_matches_sequential),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
