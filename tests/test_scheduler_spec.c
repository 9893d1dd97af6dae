/* test_scheduler_spec.c - speculative decoding inside the scheduler is exact:
 *  - several requests decoding greedily together (different prompts and
 *    lengths, n = 2 samples, a stop string, log-probs, echo, streaming, a
 *    grammar, one request that opts out) give exactly the tokens, text,
 *    log-probs and finish reasons of a scheduler without speculation, with a
 *    q8_0 and a q4_0 copy of the target as draft, with a draft that proposes
 *    the least likely tokens (output layer negated), and with prompt lookup;
 *    also a second round on the same scheduler (cached prefixes reused in
 *    both caches), and with a batch and a cache too small for every draft;
 *  - seeded sampling keeps the target's law: over many requests decoding 8
 *    at a time with the negated draft and with one too sure of the target's
 *    favourites (every proposal goes through the rejection rule and the
 *    residual), the first token's frequencies fit the exact distribution and
 *    the second and third tokens' frequencies match those of a scheduler
 *    without speculation (chi-square at p = 0.001);
 *  - bad settings and requests are refused with a clear error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft_support.h"
#include "nucleus.h"
#include "test_support.h"

static nu_model *target, *draft_q8, *draft_q4, *draft_negated, *draft_sharp;

static int setup(void **state) {
    (void)state;
    const char *src = nu_test_shared("models/stories260K.gguf");
    if (nu_model_load(src, NULL, &target, NULL)) return -1;
    draft_q8 = nu_test_make_draft(src, "sched_spec_q8_0.gguf", "q8_0", 1.0f);
    draft_q4 = nu_test_make_draft(src, "sched_spec_q4_0.gguf", "q4_0", 1.0f);
    draft_negated = nu_test_make_draft(src, "sched_spec_negated.gguf", "q8_0", -1.0f);
    draft_sharp = nu_test_make_draft(src, "sched_spec_sharpened.gguf", "q8_0", 4.0f);
    return draft_q8 && draft_q4 && draft_negated && draft_sharp ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    nu_model_free(target);
    nu_model_free(draft_q8);
    nu_model_free(draft_q4);
    nu_model_free(draft_negated);
    nu_model_free(draft_sharp);
    return 0;
}

static nu_context *make_ctx(int32_t n_ctx, int32_t n_batch, int32_t n_seq) {
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_seq_max = n_seq;
    cp.n_threads = 1;
    nu_context *c;
    assert_int_equal(nu_context_new(target, &cp, &c, NULL), NU_OK);
    return c;
}

/* A scheduler with speculation: draft model, or lookup when draft is NULL. */
static nu_scheduler *nu_spec_scheduler(nu_context *ctx, const nu_model *draft, int32_t draft_max) {
    nu_scheduler *s;
    assert_int_equal(nu_scheduler_new(ctx, &s, NULL), NU_OK);
    nu_speculative_params sp = nu_speculative_default_params();
    sp.lookup = draft == NULL;
    sp.draft_max = draft_max;
    nu_error err;
    nu_status st = nu_scheduler_set_speculation(s, draft, &sp, &err);
    if (st) fail_msg("set_speculation: %s", err.message);
    return s;
}

/* ---- greedy: the same tokens as without speculation ---------------------- */

#define N_REQ 7
#define MAX_RESULTS 16

static const char *prompts[N_REQ] = {"Once upon a time",           "Lily and Ben went to the park",
                                     "The little dog ran to the",  "One day, a bird",
                                     "Tom had a big red ball. He", "The sun was hot and",
                                     "Once upon a time, there"};

/* Streamed text per result, to compare with the result's text. */
typedef struct stream_buf {
    char text[4096];
    size_t len;
} stream_buf;

static bool on_text(void *user, int32_t index, const char *text, size_t len) {
    stream_buf *b = (stream_buf *)user + index;
    if (b->len + len < sizeof b->text) {
        memcpy(b->text + b->len, text, len);
        b->len += len;
    }
    return true;
}

/* One round of requests: varied lengths, n = 2, a stop string, log-probs,
 * echo with prompt log-probs, streaming, a grammar and an opt-out. */
typedef struct req_round {
    nu_generate_params p[N_REQ];
    nu_generate_result res[MAX_RESULTS];
    stream_buf streams[MAX_RESULTS];
    int32_t first[N_REQ]; /* index of each request's first result */
    int32_t n_results;
} req_round;

static const char *const stop_once[] = {"."};

static void make_params(req_round *rd, const nu_grammar *grammar) {
    memset(rd, 0, sizeof *rd);
    for (int i = 0; i < N_REQ; i++) {
        nu_generate_params *p = &rd->p[i];
        *p = nu_generate_default_params();
        p->sampling.temperature = 0;
        p->n_predict = 24 + 11 * i;
        rd->first[i] = rd->n_results;
        rd->n_results += i == 1 ? 2 : 1;
    }
    rd->p[1].n = 2;            /* two samples sharing the prompt */
    rd->p[2].stop = stop_once; /* a stop string */
    rd->p[2].n_stop = 1;
    rd->p[3].logprobs = 3; /* log-probs of the generated tokens */
    rd->p[4].echo = true;  /* the prompt's text and log-probs too */
    rd->p[4].logprobs = 2;
    rd->p[5].on_text = on_text; /* streaming */
    rd->p[5].user = &rd->streams[rd->first[5]];
    rd->p[5].n_predict = 60;
    rd->p[6].grammar = grammar; /* constrained: does not speculate */
    rd->p[6].n_predict = 40;
    rd->p[0].draft_max = -1; /* opts out */
}

static void run_round(nu_scheduler *s, req_round *rd) {
    for (int i = 0; i < N_REQ; i++) {
        nu_error err;
        nu_status st = nu_scheduler_submit(s, prompts[i], NULL, 0, &rd->p[i],
                                           &rd->res[rd->first[i]], NULL, &err);
        if (st) fail_msg("submit %d: %s", i, err.message);
    }
    assert_int_equal(nu_scheduler_run(s, NULL), NU_OK);
}

static void free_round(req_round *rd) {
    for (int i = 0; i < rd->n_results; i++) nu_generate_result_free(&rd->res[i]);
}

static void expect_same_logprobs(const nu_generate_result *a, const nu_generate_result *b) {
    assert_int_equal(a->n_logprobs, b->n_logprobs);
    for (int32_t i = 0; i < a->n_logprobs; i++) {
        assert_int_equal(a->logprobs[i].token, b->logprobs[i].token);
        float x = a->logprobs[i].logprob, y = b->logprobs[i].logprob;
        if (!(x == y || (isnan(x) && isnan(y)))) /* the first echoed token has none (NaN) */
            fail_msg("log-prob %d: %.9g vs %.9g", i, x, y);
        assert_int_equal(a->logprobs[i].n_top, b->logprobs[i].n_top);
        for (int32_t k = 0; k < a->logprobs[i].n_top; k++)
            assert_int_equal(a->logprobs[i].top[k].token, b->logprobs[i].top[k].token);
    }
}

static void expect_same(const req_round *plain, const req_round *spec) {
    for (int32_t i = 0; i < plain->n_results; i++) {
        const nu_generate_result *a = &plain->res[i], *b = &spec->res[i];
        assert_int_equal(b->n_tokens, a->n_tokens);
        assert_memory_equal(b->tokens, a->tokens, sizeof(int32_t) * (size_t)a->n_tokens);
        assert_string_equal(b->text, a->text);
        assert_int_equal(b->finish, a->finish);
        expect_same_logprobs(a, b);
    }
    const stream_buf *streamed = &spec->streams[spec->first[5]];
    const nu_generate_result *r5 = &spec->res[spec->first[5]];
    assert_int_equal(streamed->len, r5->text_len);
    assert_memory_equal(streamed->text, r5->text, r5->text_len);
    /* the opted-out and the constrained request did not draft */
    assert_int_equal(spec->res[spec->first[0]].n_drafted, 0);
    assert_int_equal(spec->res[spec->first[6]].n_drafted, 0);
}

/* Plain greedy results, once per scheduler layout. */
static void plain_round(req_round *rd, const nu_grammar *g, int32_t n_ctx, int32_t n_batch) {
    nu_context *ctx = make_ctx(n_ctx, n_batch, 8);
    nu_scheduler *s;
    assert_int_equal(nu_scheduler_new(ctx, &s, NULL), NU_OK);
    make_params(rd, g);
    run_round(s, rd);
    /* every sample ends on its own terms, not for want of cells */
    for (int32_t i = 0; i < rd->n_results; i++)
        assert_int_not_equal(rd->res[i].finish, NU_FINISH_CONTEXT);
    nu_scheduler_free(s);
    nu_context_free(ctx);
}

static nu_grammar *story_grammar(void) {
    nu_grammar *g;
    nu_error err;
    if (nu_grammar_from_regex(target, " [A-Za-z ]{1,60}\\.", &g, &err))
        fail_msg("grammar: %s", err.message);
    return g;
}

/* Runs two rounds with speculation on one scheduler, each compared with
 * the plain req_round; returns the acceptance rate of the speculating requests. */
static double expect_greedy_identical(const nu_model *draft, const char *name, int32_t n_ctx,
                                      int32_t n_batch) {
    nu_grammar *g = story_grammar();
    static req_round plain, spec;
    plain_round(&plain, g, n_ctx, n_batch);
    nu_context *ctx = make_ctx(n_ctx, n_batch, 8);
    nu_scheduler *s = nu_spec_scheduler(ctx, draft, 6);
    int64_t drafted = 0, accepted = 0;
    for (int pass = 0; pass < 2; pass++) { /* the second one reuses cached prefixes */
        make_params(&spec, g);
        run_round(s, &spec);
        expect_same(&plain, &spec);
        for (int32_t i = 0; i < spec.n_results; i++) {
            drafted += spec.res[i].n_drafted;
            accepted += spec.res[i].n_accepted;
        }
        if (pass == 1) assert_true(spec.res[spec.first[1]].n_cached > 0);
        free_round(&spec);
    }
    nu_speculative_stats st;
    nu_scheduler_speculative_stats(s, &st);
    assert_int_equal(st.drafted, drafted); /* the totals are the results' sums */
    assert_int_equal(st.accepted, accepted);
    assert_true(st.drafted > 0 && st.target_passes > 0);
    assert_true(draft ? st.draft_passes > 0 : st.draft_passes == 0);
    double rate = (double)accepted / (double)drafted;
    print_message("%s (n_ctx %d, n_batch %d): %lld drafted, %.1f%% accepted, %lld target "
                  "passes with drafts, %lld draft passes\n",
                  name, n_ctx, n_batch, (long long)drafted, 100 * rate, (long long)st.target_passes,
                  (long long)st.draft_passes);
    free_round(&plain);
    nu_scheduler_free(s);
    nu_context_free(ctx);
    nu_grammar_free(g);
    return rate;
}

static void test_greedy_identical(void **state) {
    (void)state;
    double q8 = expect_greedy_identical(draft_q8, "q8_0 draft", 2048, 256);
    double q4 = expect_greedy_identical(draft_q4, "q4_0 draft", 2048, 256);
    double neg = expect_greedy_identical(draft_negated, "negated draft", 2048, 256);
    expect_greedy_identical(NULL, "prompt lookup", 2048, 256);
    assert_true(q8 > 0.5); /* the close copies mostly agree */
    assert_true(q4 > 0.5);
    assert_true(neg < 0.1); /* the negated one mostly does not */
}

/* A batch of 12 entries cannot hold 8 samples' full drafts, and 600 cells
 * hardly more than the samples' own tokens: drafts are cut, and the output
 * is still the plain one. */
static void test_greedy_identical_tight(void **state) {
    (void)state;
    expect_greedy_identical(draft_q8, "q8_0 draft, tight", 600, 12);
}

/* A sample that runs into the end of the context finishes there, as without
 * speculation (drafts never go past the last position). */
static void test_context_end(void **state) {
    (void)state;
    nu_generate_params p = nu_generate_default_params();
    p.sampling.temperature = 0;
    p.n_predict = -1;
    p.sampling.ignore_eos = true;
    nu_generate_result plain, spec;
    nu_context *ctx = make_ctx(48, 32, 1);
    assert_int_equal(nu_generate(ctx, prompts[0], &p, &plain, NULL), NU_OK);
    nu_scheduler *s = nu_spec_scheduler(ctx, draft_q8, 8);
    assert_int_equal(nu_scheduler_submit(s, prompts[0], NULL, 0, &p, &spec, NULL, NULL), NU_OK);
    assert_int_equal(nu_scheduler_run(s, NULL), NU_OK);
    assert_int_equal(plain.finish, NU_FINISH_CONTEXT);
    assert_int_equal(spec.finish, NU_FINISH_CONTEXT);
    assert_int_equal(spec.n_tokens, plain.n_tokens);
    assert_memory_equal(spec.tokens, plain.tokens, sizeof(int32_t) * (size_t)plain.n_tokens);
    assert_true(spec.n_drafted > 0);
    nu_generate_result_free(&plain);
    nu_generate_result_free(&spec);
    nu_scheduler_free(s);
    nu_context_free(ctx);
}

/* ---- sampling: the target's law ------------------------------------------ */

#define RUNS 2400
#define WAVE 8
#define MAX_BINS 512

/* The first three tokens of RUNS seeded requests, WAVE at a time. */
static void sample_triples(const nu_model *draft, const char *name, const nu_sampler_params *sp,
                           int32_t (*toks)[3]) {
    bool speculative = name != NULL;
    nu_context *ctx = make_ctx(1024, 128, WAVE);
    nu_scheduler *s;
    if (speculative)
        s = nu_spec_scheduler(ctx, draft, 4);
    else
        assert_int_equal(nu_scheduler_new(ctx, &s, NULL), NU_OK);
    nu_generate_result res[WAVE];
    for (int r0 = 0; r0 < RUNS; r0 += WAVE) {
        for (int w = 0; w < WAVE; w++) {
            nu_generate_params p = nu_generate_default_params();
            p.n_predict = 4; /* the second pass verifies two proposals */
            p.sampling = *sp;
            p.sampling.seed = 5000 + (uint64_t)(r0 + w);
            assert_int_equal(nu_scheduler_submit(s, prompts[0], NULL, 0, &p, &res[w], NULL, NULL),
                             NU_OK);
        }
        assert_int_equal(nu_scheduler_run(s, NULL), NU_OK);
        for (int w = 0; w < WAVE; w++) {
            assert_int_equal(res[w].n_tokens, 4);
            memcpy(toks[r0 + w], res[w].tokens, sizeof toks[0]);
            nu_generate_result_free(&res[w]);
        }
    }
    if (speculative) {
        nu_speculative_stats st;
        nu_scheduler_speculative_stats(s, &st);
        print_message("sampled with the %s draft: %lld drafted, %lld accepted\n", name,
                      (long long)st.drafted, (long long)st.accepted);
        assert_true(st.drafted >= RUNS); /* proposals were verified (and mostly rejected) */
    }
    nu_scheduler_free(s);
    nu_context_free(ctx);
}

/* Two samples of one law: the pooled frequencies give both expected counts. */
static void expect_same_law(const int32_t (*a)[3], const int32_t (*b)[3], int pos) {
    static double ca[MAX_BINS], cb[MAX_BINS], e[MAX_BINS];
    memset(ca, 0, sizeof ca);
    memset(cb, 0, sizeof cb);
    for (int r = 0; r < RUNS; r++) ca[a[r][pos]]++, cb[b[r][pos]]++;
    for (int i = 0; i < MAX_BINS; i++) e[i] = (ca[i] + cb[i]) / 2;
    int df, df_b;
    double chi =
        nu_test_chi_square(ca, e, MAX_BINS, &df) + nu_test_chi_square(cb, e, MAX_BINS, &df_b);
    print_message("token %d: two-sample chi2 %.2f, df %d, critical %.2f\n", pos + 1, chi, df,
                  nu_test_chi2_critical(df));
    assert_true(df >= 3 && chi < nu_test_chi2_critical(df));
}

/* The first token against the exact distribution after the chain. */
static void expect_exact_first(const int32_t (*toks)[3], const nu_sampler_params *sp) {
    nu_context *ctx = make_ctx(64, 16, 1);
    int32_t t[16];
    size_t n;
    assert_int_equal(
        nu_tokenize(target, prompts[0], strlen(prompts[0]), NU_TOKENIZE_ADD_BOS, t, 16, &n, NULL),
        NU_OK);
    nu_batch_entry b[16];
    for (size_t i = 0; i < n; i++) b[i] = (nu_batch_entry){t[i], (int32_t)i, 0, i == n - 1};
    assert_int_equal(nu_decode(ctx, b, (int32_t)n, NULL), NU_OK);
    nu_sampler *s;
    assert_int_equal(nu_sampler_new_for_model(sp, target, &s, NULL), NU_OK);
    const nu_candidates *c = nu_sampler_distribution(s, nu_logits(ctx, (int32_t)n - 1));
    static double obs[MAX_BINS], expect[MAX_BINS];
    memset(obs, 0, sizeof obs);
    memset(expect, 0, sizeof expect);
    for (size_t i = 0; i < c->size; i++) expect[c->data[i].id] = c->data[i].prob * RUNS;
    for (int r = 0; r < RUNS; r++) obs[toks[r][0]]++;
    int df;
    double chi = nu_test_chi_square(obs, expect, MAX_BINS, &df);
    print_message("token 1: chi2 %.2f, df %d, critical %.2f\n", chi, df, nu_test_chi2_critical(df));
    assert_true(df >= 3 && chi < nu_test_chi2_critical(df));
    nu_sampler_free(s);
    nu_context_free(ctx);
}

/* The negated draft proposes what the target finds unlikely (nearly all
 * rejected, the residual is nearly the target's law); the sharpened one
 * proposes the target's favourites too often, so acceptance and the
 * residual max(0, p - q) together decide how often each token comes out. */
static void test_sampled_distribution(void **state) {
    (void)state;
    nu_sampler_params sp = nu_sampler_default_params();
    sp.temperature = 1.5f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.ignore_eos = true; /* every run has its tokens (the same rule for both sides) */
    static int32_t spec[RUNS][3], plain[RUNS][3];
    sample_triples(NULL, NULL, &sp, plain);
    const nu_model *drafts[] = {draft_negated, draft_sharp};
    const char *names[] = {"negated", "sharpened"};
    for (int d = 0; d < 2; d++) {
        sample_triples(drafts[d], names[d], &sp, spec);
        expect_exact_first((const int32_t(*)[3])spec, &sp);
        expect_same_law((const int32_t(*)[3])spec, (const int32_t(*)[3])plain, 1);
        expect_same_law((const int32_t(*)[3])spec, (const int32_t(*)[3])plain, 2);
    }
}

/* ---- errors --------------------------------------------------------------- */

static void expect_refused(nu_status st, const nu_error *err, const char *words) {
    assert_int_equal(st, NU_ERR_INVALID_ARG);
    if (!strstr(err->message, words)) fail_msg("'%s' does not say '%s'", err->message, words);
}

static void test_bad_settings(void **state) {
    (void)state;
    nu_context *ctx = make_ctx(256, 32, 2);
    nu_scheduler *s;
    assert_int_equal(nu_scheduler_new(ctx, &s, NULL), NU_OK);
    nu_error err;
    nu_speculative_params sp = nu_speculative_default_params();
    nu_model *other;
    assert_int_equal(nu_model_load(nu_test_shared("vocab/ggml-vocab-llama-spm.gguf"),
                                   &(nu_model_params){NU_LOAD_VOCAB_ONLY}, &other, NULL),
                     NU_OK);
    expect_refused(nu_scheduler_set_speculation(s, other, &sp, &err), &err, "vocabulary");
    nu_model_free(other);
    sp.draft_max = 40; /* the batch of 32 cannot hold it */
    expect_refused(nu_scheduler_set_speculation(s, draft_q8, &sp, &err), &err, "draft length");
    sp = nu_speculative_default_params();
    sp.draft_min = 0;
    expect_refused(nu_scheduler_set_speculation(s, draft_q8, &sp, &err), &err, "draft length");
    sp = nu_speculative_default_params();
    sp.draft = ctx;
    expect_refused(nu_scheduler_set_speculation(s, draft_q8, &sp, &err), &err, "draft model");
    /* requests: draft_max without speculation, then beyond the scheduler's */
    nu_generate_params p = nu_generate_default_params();
    nu_generate_result r;
    p.draft_max = 2;
    expect_refused(nu_scheduler_submit(s, "Hi", NULL, 0, &p, &r, NULL, &err), &err, "draft_max");
    sp = nu_speculative_default_params();
    sp.draft_max = 4;
    assert_int_equal(nu_scheduler_set_speculation(s, draft_q8, &sp, &err), NU_OK);
    p.draft_max = 5;
    expect_refused(nu_scheduler_submit(s, "Hi", NULL, 0, &p, &r, NULL, &err), &err, "draft_max");
    p.draft_max = -2;
    expect_refused(nu_scheduler_submit(s, "Hi", NULL, 0, &p, &r, NULL, &err), &err, "draft_max");
    /* not while requests are queued */
    p.draft_max = 3;
    assert_int_equal(nu_scheduler_submit(s, "Hi", NULL, 0, &p, &r, NULL, &err), NU_OK);
    expect_refused(nu_scheduler_set_speculation(s, NULL, NULL, &err), &err, "no requests");
    assert_int_equal(nu_scheduler_run(s, NULL), NU_OK);
    nu_generate_result_free(&r);
    nu_scheduler_free(s);
    nu_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identical), cmocka_unit_test(test_greedy_identical_tight),
        cmocka_unit_test(test_context_end),      cmocka_unit_test(test_sampled_distribution),
        cmocka_unit_test(test_bad_settings),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
