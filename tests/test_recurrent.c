/* test_recurrent.c - the recurrent state of a hybrid model (a tiny random
 * qwen35 written by tests/arch/tiny_gguf.py: Gated DeltaNet layers beside
 * gated attention) behaves like the KV cache it lives in:
 *  - a position's logits do not depend on how the positions were batched
 *    (one batch, one by one, chunks, two sequences interleaved): bit for bit;
 *  - removing positions returns to the state of the last one kept, whether
 *    a checkpoint of it was kept or the positions are read again: logits
 *    bit-identical to reading the kept tokens from scratch;
 *  - sequences copied from one another continue independently;
 *  - greedy speculative decoding (prompt lookup, a draft model that is
 *    itself recurrent) gives plain greedy's tokens, with nu_generate_speculative
 *    and in the scheduler with n samples and a second round reusing the
 *    cached prefix; beam search scores its hypotheses as a plain decode of
 *    their tokens does;
 *  - a sequence must be continued in order;
 *  - a file with a multi-token prediction layer (nextn_predict_layers, as
 *    llama.cpp's converter writes Qwen 3.5) runs as the same file without it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "draft_support.h"
#include "kv_cache.h"
#include "nucleus.h"
#include "test_support.h"

static nu_model *model, *draft;
static char model_path[1024], mtp_path[1024];
static int32_t n_vocab;

/* Writes the test model (with a multi-token prediction layer when mtp). */
static int write_model(const char *path, bool mtp) {
    char vocab[1024], cmd[4096];
    snprintf(vocab, sizeof vocab, "%s", nu_test_shared("vocab/ggml-vocab-llama-spm.gguf"));
    snprintf(cmd, sizeof cmd,
             "python3 '%s/tests/arch/tiny_gguf.py' --arch qwen35 --seed 5 --vocab-from '%s' "
             "--vocab-size 2048 %s -o '%s' >/dev/null",
             NU_SOURCE_DIR, vocab, mtp ? "--mtp" : "", path);
    return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s", nu_test_tmp("recurrent_qwen35.gguf"));
    snprintf(mtp_path, sizeof mtp_path, "%s", nu_test_tmp("recurrent_qwen35_mtp.gguf"));
    if (write_model(model_path, false) || write_model(mtp_path, true)) {
        print_message("could not write the test models with tests/arch/tiny_gguf.py\n");
        return -1;
    }
    nu_error err;
    if (nu_model_load(model_path, NULL, &model, &err)) {
        print_message("%s: %s\n", model_path, err.message);
        return -1;
    }
    n_vocab = nu_model_n_vocab(model);
    draft = nu_test_make_draft(model_path, "recurrent_qwen35_q8_0.gguf", "q8_0", 1.0f);
    if (!draft) print_message("could not make the q8_0 draft\n");
    return draft ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    nu_model_free(model);
    nu_model_free(draft);
    return 0;
}

static nu_context *make_ctx(int32_t n_seq, int32_t checkpoints, int32_t threads) {
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 64;
    cp.n_seq_max = n_seq;
    cp.n_threads = threads;
    cp.kv_type = NU_KV_F32;
    cp.n_state_checkpoints = checkpoints;
    nu_context *c;
    nu_error err;
    if (nu_context_new(model, &cp, &c, &err)) fail_msg("context: %s", err.message);
    return c;
}

static void decode(nu_context *c, const nu_batch_entry *e, int32_t n) {
    nu_error err;
    if (nu_decode(c, e, n, &err)) fail_msg("decode: %s", err.message);
}

/* Decodes toks[0..n) on seq from position pos in batches of `chunk`, every
 * entry asking for logits; copies each position's logits to out[i]. */
static void read_tokens(nu_context *c, int32_t seq, int32_t pos, const int32_t *toks, int32_t n,
                        int32_t chunk, float *out) {
    nu_batch_entry e[64];
    for (int32_t i = 0; i < n; i += chunk) {
        int32_t m = n - i < chunk ? n - i : chunk;
        for (int32_t j = 0; j < m; j++)
            e[j] = (nu_batch_entry){toks[i + j], pos + i + j, seq, true};
        decode(c, e, m);
        for (int32_t j = 0; j < m && out; j++)
            memcpy(out + (size_t)(i + j) * n_vocab, nu_logits(c, j), (size_t)n_vocab * 4);
    }
}

static void random_tokens(int32_t *t, int32_t n, uint32_t seed) {
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((seed >> 8) % 2000);
    }
}

static void assert_rows_equal(const float *a, const float *b, int32_t rows, const char *what) {
    for (int32_t r = 0; r < rows; r++)
        if (memcmp(a + (size_t)r * n_vocab, b + (size_t)r * n_vocab, (size_t)n_vocab * 4))
            fail_msg("%s: position %d's logits differ", what, r);
}

enum { NP = 24 };

static void test_batching(void **state) {
    (void)state;
    int32_t p[NP], q[NP];
    random_tokens(p, NP, 1);
    random_tokens(q, NP, 2);
    float *one = malloc((size_t)NP * n_vocab * 4), *other = malloc((size_t)NP * n_vocab * 4);
    nu_context *c = make_ctx(2, 0, 2);
    read_tokens(c, 0, 0, p, NP, NP, one);
    const int32_t chunks[] = {1, 5};
    for (int i = 0; i < 2; i++) {
        nu_kv_clear(c);
        read_tokens(c, 0, 0, p, NP, chunks[i], other);
        assert_rows_equal(one, other, NP, chunks[i] == 1 ? "one by one" : "chunks of 5");
    }
    /* two sequences interleaved in each batch */
    nu_kv_clear(c);
    nu_batch_entry e[2 * NP];
    for (int32_t i = 0; i < NP; i++) {
        e[2 * i] = (nu_batch_entry){q[i], i, 1, false};
        e[2 * i + 1] = (nu_batch_entry){p[i], i, 0, true};
    }
    decode(c, e, NP);
    decode(c, e + NP, NP);
    for (int32_t i = 0; i < NP; i++)
        memcpy(other + (size_t)i * n_vocab, nu_logits(c, i < NP / 2 ? 2 * i + 1 : 2 * i + 1 - NP),
               (size_t)n_vocab * 4);
    assert_rows_equal(one + (size_t)(NP / 2) * n_vocab, other + (size_t)(NP / 2) * n_vocab, NP / 2,
                      "interleaved with another sequence");
    nu_context_free(c);
    free(one);
    free(other);
}

/* Removing positions (a kept checkpoint, or positions read again) gives the
 * state of the last one kept. */
static void test_rollback(void **state) {
    (void)state;
    int32_t p[NP + 8 + 3];
    random_tokens(p, NP + 8 + 3, 3);
    const int32_t *x = p + NP, y[3] = {7, 700, 1500};
    float *want = malloc(3 * (size_t)n_vocab * 4), *got = malloc(3 * (size_t)n_vocab * 4);
    nu_context *ref = make_ctx(1, 0, 2);
    const int32_t checkpoints[] = {0, 1}; /* the default, and too few to keep any */
    for (int ci = 0; ci < 2; ci++) {
        nu_context *c = make_ctx(1, checkpoints[ci], 2);
        read_tokens(c, 0, 0, p, NP, NP, NULL);
        const int32_t keep[] = {0, 2, 5, 7, 8};
        for (int k = 0; k < 5; k++) {
            int32_t j = keep[k];
            read_tokens(c, 0, NP, x, 8, 8, NULL); /* proposals, all with logits */
            nu_kv_seq_remove(c, 0, NP + j, -1);
            assert_int_equal(nu_kv_seq_pos_max(c, 0), NP + j - 1);
            read_tokens(c, 0, NP + j, y, 3, 3, got);
            /* the kept tokens read from scratch */
            int32_t all[NP + 8 + 3];
            memcpy(all, p, (size_t)(NP + j) * 4);
            memcpy(all + NP + j, y, sizeof y);
            nu_kv_clear(ref);
            read_tokens(ref, 0, 0, all, NP + j, NP + j, NULL);
            read_tokens(ref, 0, NP + j, y, 3, 3, want);
            char what[96];
            snprintf(what, sizeof what, "checkpoints %d, back to %d", checkpoints[ci], NP + j);
            assert_rows_equal(want, got, 3, what);
            nu_kv_seq_remove(c, 0, NP, -1);
        }
        /* back into the prompt, far from any checkpoint */
        nu_kv_seq_remove(c, 0, 9, -1);
        read_tokens(c, 0, 9, y, 3, 3, got);
        int32_t all[12];
        memcpy(all, p, 9 * 4);
        memcpy(all + 9, y, sizeof y);
        nu_kv_clear(ref);
        read_tokens(ref, 0, 0, all, 12, 12, NULL);
        memcpy(want, nu_logits(ref, 9), (size_t)n_vocab * 4);
        assert_rows_equal(want, got, 1, "back to position 9");
        nu_context_free(c);
    }
    nu_context_free(ref);
    free(want);
    free(got);
}

/* Copies share the prompt's states and continue on their own. */
static void test_copy(void **state) {
    (void)state;
    int32_t p[NP];
    random_tokens(p, NP, 4);
    const int32_t next[3] = {11, 222, 1333};
    nu_context *c = make_ctx(3, 0, 2), *ref = make_ctx(1, 0, 1);
    read_tokens(c, 0, 0, p, NP, NP, NULL);
    nu_kv_seq_copy(c, 0, 1, 0, -1);
    nu_kv_seq_copy(c, 0, 2, 0, -1);
    nu_batch_entry e[3];
    for (int32_t i = 0; i < 3; i++) e[i] = (nu_batch_entry){next[i], NP, i, true};
    decode(c, e, 3);
    for (int32_t i = 0; i < 3; i++) {
        nu_kv_clear(ref);
        read_tokens(ref, 0, 0, p, NP, NP, NULL);
        read_tokens(ref, 0, NP, &next[i], 1, 1, NULL);
        assert_rows_equal(nu_logits(ref, 0), nu_logits(c, i), 1, "a copy's next token");
    }
    /* the original goes; a copy rolled back into the shared part goes on */
    nu_kv_seq_remove(c, 0, 0, -1);
    nu_kv_seq_remove(c, 2, NP - 3, -1);
    read_tokens(c, 2, NP - 3, next, 3, 3, NULL);
    nu_kv_clear(ref);
    int32_t all[NP];
    memcpy(all, p, (NP - 3) * 4);
    memcpy(all + NP - 3, next, sizeof next);
    read_tokens(ref, 0, 0, all, NP, NP, NULL);
    assert_rows_equal(nu_logits(ref, NP - 1), nu_logits(c, 2), 1, "a rolled-back copy");
    nu_context_free(c);
    nu_context_free(ref);
}

static void test_order(void **state) {
    (void)state;
    nu_context *c = make_ctx(1, 0, 1);
    nu_batch_entry e[3] = {{5, 0, 0, false}, {6, 1, 0, false}, {7, 3, 0, true}};
    nu_error err;
    assert_int_equal(nu_decode(c, e, 3, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "in order"));
    assert_int_equal(nu_kv_seq_pos_max(c, 0), -1);
    e[2].pos = 2;
    assert_int_equal(nu_decode(c, e, 3, &err), NU_OK);
    nu_batch_entry again = {8, 1, 0, true}; /* a position it holds */
    assert_int_equal(nu_decode(c, &again, 1, &err), NU_ERR_INVALID_ARG);
    nu_context_free(c);
}

static void test_mtp_layer(void **state) {
    (void)state;
    nu_model *with;
    nu_error err;
    if (nu_model_load(mtp_path, NULL, &with, &err)) fail_msg("load: %s", err.message);
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    nu_context *a, *b;
    assert_int_equal(nu_context_new(with, &cp, &a, &err), NU_OK);
    assert_int_equal(nu_context_new(model, &cp, &b, &err), NU_OK);
    int32_t p[NP];
    random_tokens(p, NP, 6);
    read_tokens(a, 0, 0, p, NP, NP, NULL);
    read_tokens(b, 0, 0, p, NP, NP, NULL);
    assert_rows_equal(nu_logits(a, NP - 1), nu_logits(b, NP - 1), 1, "with an MTP layer");
    nu_context_free(a);
    nu_context_free(b);
    nu_model_free(with);
}

/* ---- generation over the recurrent state -------------------------------- */

static const char *prompt = "the cat sat on the mat and the cat sat on the mat and the cat";

static void greedy(nu_generate_params *gp) {
    *gp = nu_generate_default_params();
    gp->n_predict = 40;
    gp->sampling.temperature = 0;
}

static void assert_same_tokens(const nu_generate_result *a, const nu_generate_result *b,
                               const char *what) {
    if (a->n_tokens != b->n_tokens ||
        memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t))) {
        int32_t i = 0;
        while (i < a->n_tokens && i < b->n_tokens && a->tokens[i] == b->tokens[i]) i++;
        print_message("first difference at %d; finish %s / %s; text %s\n", i,
                      nu_finish_reason_name(a->finish), nu_finish_reason_name(b->finish), b->text);
    }
    if (a->n_tokens != b->n_tokens ||
        memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t)))
        fail_msg("%s: %d tokens, plain greedy %d, or other tokens", what, b->n_tokens, a->n_tokens);
}

static void test_speculative(void **state) {
    (void)state;
    nu_generate_params gp;
    greedy(&gp);
    nu_error err;
    nu_context *c = make_ctx(1, 0, 2);
    nu_generate_result plain, spec;
    if (nu_generate(c, prompt, &gp, &plain, &err)) fail_msg("generate: %s", err.message);
    for (int with_draft = 0; with_draft < 2; with_draft++) {
        nu_speculative_params sp = nu_speculative_default_params();
        nu_context_params dp = nu_context_default_params();
        dp.n_ctx = 256;
        dp.n_threads = 1;
        nu_context *dc = NULL;
        if (with_draft) {
            if (nu_context_new(draft, &dp, &dc, &err)) fail_msg("draft: %s", err.message);
            sp.draft = dc;
        } else {
            sp.lookup = true;
        }
        nu_speculative_stats stats;
        if (nu_generate_speculative(c, prompt, &gp, &sp, &spec, &stats, &err))
            fail_msg("speculative: %s", err.message);
        print_message("speculative (%s): %lld drafted, %lld accepted\n",
                      with_draft ? "draft" : "lookup", (long long)stats.drafted,
                      (long long)stats.accepted);
        assert_same_tokens(&plain, &spec, with_draft ? "a recurrent draft" : "prompt lookup");
        /* the draft (a q8_0 copy: the tiny model's near ties differ) is
         * partly accepted, so both full and partial rollbacks are exercised */
        assert_true(stats.drafted > 0);
        if (with_draft) assert_true(stats.accepted > 0 && stats.accepted < stats.drafted);
        nu_generate_result_free(&spec);
        nu_context_free(dc);
    }
    nu_generate_result_free(&plain);
    nu_context_free(c);
}

/* Two samples of each of three prompts at once, with and without
 * speculation, then the same again reusing the cached prefixes. */
static void test_scheduler(void **state) {
    (void)state;
    const char *prompts[3] = {prompt, "one two three four five", "a b c a b c a b"};
    nu_generate_params gp;
    greedy(&gp);
    gp.n = 2;
    nu_generate_result want[3][2], got[3][2];
    nu_error err;
    for (int mode = 0; mode < 3; mode++) {
        /* 48 checkpoints: with the default (n_seq_max + 8), six sequences
         * verifying 7 drafted positions each use every slot, and the
         * prompts' states are gone by the second round */
        nu_context *c = make_ctx(8, 48, 2);
        nu_scheduler *s;
        assert_int_equal(nu_scheduler_new(c, &s, &err), NU_OK);
        if (mode > 0) {
            nu_speculative_params sp = nu_speculative_default_params();
            sp.lookup = mode == 1;
            sp.draft_max = 6;
            if (nu_scheduler_set_speculation(s, mode == 2 ? draft : NULL, &sp, &err))
                fail_msg("speculation: %s", err.message);
        }
        for (int round = 0; round < 2; round++) {
            nu_generate_result(*res)[2] = mode == 0 && round == 0 ? want : got;
            for (int i = 0; i < 3; i++) {
                int32_t id;
                if (nu_scheduler_submit(s, prompts[i], NULL, 0, &gp, res[i], &id, &err))
                    fail_msg("submit: %s", err.message);
            }
            if (nu_scheduler_run(s, &err)) fail_msg("run: %s", err.message);
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 2; k++) {
                    if (res == got) {
                        char what[64];
                        snprintf(what, sizeof what, "mode %d round %d prompt %d sample %d", mode,
                                 round, i, k);
                        assert_same_tokens(&want[i][k], &got[i][k], what);
                        if (round == 1 && k == 0) assert_true(got[i][k].n_cached > 0);
                        nu_generate_result_free(&got[i][k]);
                    }
                }
        }
        nu_speculative_stats st;
        nu_scheduler_speculative_stats(s, &st);
        if (mode > 0)
            print_message("scheduler (%s): %lld drafted, %lld accepted\n",
                          mode == 1 ? "lookup" : "draft", (long long)st.drafted,
                          (long long)st.accepted);
        if (mode == 2) assert_true(st.accepted > 0 && st.accepted < st.drafted);
        nu_scheduler_free(s);
        nu_context_free(c);
    }
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) nu_generate_result_free(&want[i][k]);
}

/* Each hypothesis's log-prob is what a plain decode of its tokens gives. */
static void test_beam(void **state) {
    (void)state;
    nu_context *c = make_ctx(8, 0, 2), *ref = make_ctx(1, 0, 1);
    nu_beam_params bp = nu_beam_default_params();
    bp.width = 3;
    bp.n_return = 3;
    bp.n_predict = 12;
    nu_generate_result res[3];
    nu_error err;
    if (nu_beam_search(c, prompt, &bp, res, &err)) fail_msg("beam: %s", err.message);
    int32_t toks[128];
    size_t n_toks = 0;
    assert_int_equal(
        nu_tokenize(model, prompt, strlen(prompt), NU_TOKENIZE_ADD_BOS, toks, 128, &n_toks, &err),
        NU_OK);
    const int32_t n = (int32_t)n_toks;
    for (int h = 0; h < 3; h++) {
        int32_t all[160];
        memcpy(all, toks, (size_t)n * 4);
        memcpy(all + n, res[h].tokens, (size_t)res[h].n_tokens * 4);
        nu_kv_clear(ref);
        nu_batch_entry e[160];
        for (int32_t i = 0; i < n + res[h].n_tokens; i++)
            e[i] = (nu_batch_entry){all[i], i, 0, i >= n - 1};
        decode(ref, e, n + res[h].n_tokens);
        double sum = 0;
        for (int32_t i = 0; i < res[h].n_tokens; i++) {
            const float *l = nu_logits(ref, n - 1 + i);
            double max = l[0], z = 0;
            for (int32_t t = 1; t < n_vocab; t++) max = l[t] > max ? l[t] : max;
            for (int32_t t = 0; t < n_vocab; t++) z += exp(l[t] - max);
            sum += l[res[h].tokens[i]] - max - log(z);
        }
        if (fabs(sum - res[h].sum_logprob) > 1e-3)
            fail_msg("hypothesis %d: log-prob %.5f, a plain decode gives %.5f", h,
                     res[h].sum_logprob, sum);
        nu_generate_result_free(&res[h]);
    }
    nu_context_free(c);
    nu_context_free(ref);
}

/* Beam search of width 1 keeps the single best token at every step: plain
 * greedy decoding's tokens (nu_generate, and the scheduler). */
static void test_beam_width1(void **state) {
    (void)state;
    nu_context *c = make_ctx(2, 0, 2), *g = make_ctx(1, 0, 2);
    nu_generate_params gp;
    greedy(&gp);
    gp.n_predict = 24;
    nu_beam_params bp = nu_beam_default_params();
    bp.width = 1;
    bp.n_return = 1;
    bp.n_predict = gp.n_predict;
    nu_generate_result plain, beam;
    nu_error err;
    if (nu_generate(g, prompt, &gp, &plain, &err)) fail_msg("generate: %s", err.message);
    if (nu_beam_search(c, prompt, &bp, &beam, &err)) fail_msg("beam: %s", err.message);
    assert_int_equal(plain.n_tokens, gp.n_predict); /* the tiny model never picks an end token */
    assert_same_tokens(&plain, &beam, "beam search of width 1");
    nu_generate_result_free(&plain);
    nu_generate_result_free(&beam);
    nu_context_free(c);
    nu_context_free(g);
}

/* n sampled answers of one prompt share its cache; sample i draws from the
 * seed + i stream, so each gives the tokens of that prompt sampled alone
 * with seed + i, through nu_generate and the scheduler alike. */
static void test_samples_alone(void **state) {
    (void)state;
    enum { N = 4 };
    nu_generate_params gp = nu_generate_default_params();
    gp.n_predict = 24;
    gp.sampling.temperature = 1.5f; /* flat enough that the samples differ */
    gp.sampling.top_k = 0;
    gp.sampling.top_p = 1.0f;
    gp.sampling.min_p = 0.0f;
    gp.sampling.seed = 1234;
    gp.n = N;
    nu_error err;
    nu_generate_result together[N], sched[N], alone;
    nu_context *c = make_ctx(N, 0, 2);
    if (nu_generate(c, prompt, &gp, together, &err)) fail_msg("generate: %s", err.message);
    nu_scheduler *s;
    assert_int_equal(nu_scheduler_new(c, &s, &err), NU_OK);
    int32_t id;
    if (nu_scheduler_submit(s, prompt, NULL, 0, &gp, sched, &id, &err))
        fail_msg("submit: %s", err.message);
    if (nu_scheduler_run(s, &err)) fail_msg("run: %s", err.message);
    nu_scheduler_free(s);
    nu_context_free(c);
    bool differ = false;
    for (int i = 0; i < N; i++) {
        nu_generate_params one = gp;
        one.n = 1;
        one.sampling.seed = gp.sampling.seed + (uint64_t)i;
        nu_context *fresh = make_ctx(1, 0, 2);
        if (nu_generate(fresh, prompt, &one, &alone, &err)) fail_msg("alone: %s", err.message);
        char what[64];
        snprintf(what, sizeof what, "sample %d of %d (nu_generate)", i, N);
        assert_same_tokens(&alone, &together[i], what);
        snprintf(what, sizeof what, "sample %d of %d (scheduler)", i, N);
        assert_same_tokens(&alone, &sched[i], what);
        if (i > 0 && (together[i].n_tokens != together[0].n_tokens ||
                      memcmp(together[i].tokens, together[0].tokens,
                             (size_t)together[0].n_tokens * sizeof(int32_t))))
            differ = true;
        nu_generate_result_free(&alone);
        nu_context_free(fresh);
    }
    assert_true(differ); /* the samples are not all one answer */
    for (int i = 0; i < N; i++) {
        nu_generate_result_free(&together[i]);
        nu_generate_result_free(&sched[i]);
    }
}

/* A prompt read in one batch keeps checkpoints along it (every 64
 * positions): removing its positions from 200 (a later request that shares
 * its first 200 tokens) leaves the state fewer than 64 positions behind, not
 * at the start, and reading new tokens from there gives the logits of a
 * fresh read of the shared tokens and the new ones, bit for bit. */
static void test_prompt_checkpoints(void **state) {
    (void)state;
    enum { N = 204, KEEP = 200, NEW = 3 };
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 256;
    cp.n_threads = 2;
    cp.kv_type = NU_KV_F32;
    nu_context *c, *fresh;
    nu_error err;
    if (nu_context_new(model, &cp, &c, &err) || nu_context_new(model, &cp, &fresh, &err))
        fail_msg("context: %s", err.message);
    int32_t toks[N + NEW];
    random_tokens(toks, N + NEW, 77);
    nu_batch_entry e[N];
    for (int32_t i = 0; i < N; i++) e[i] = (nu_batch_entry){toks[i], i, 0, i == N - 1};
    decode(c, e, N); /* the first prompt in one batch, as a prefill reads it */
    nu_kv_seq_remove(c, 0, KEEP, -1);
    int32_t cur = nu_kv_state_current(&c->kv, 0);
    assert_true(cur >= 0);
    int32_t at = c->kv.slot_pos[cur];
    print_message("after removing from %d the state stands at %d\n", KEEP, at);
    assert_true(at < KEEP && KEEP - 1 - at < 64);
    assert_int_equal(nu_kv_seq_state_pos(c, 0), at); /* what the scheduler counts as cached */
    assert_int_equal(nu_kv_seq_pos_max(c, 0), KEEP - 1);
    float *a = malloc((size_t)NEW * n_vocab * 4), *b = malloc((size_t)NEW * n_vocab * 4);
    read_tokens(c, 0, KEEP, toks + N, NEW, NEW, a); /* the second prompt's own tokens */
    for (int32_t i = 0; i < KEEP; i++) e[i] = (nu_batch_entry){toks[i], i, 0, i == KEEP - 1};
    decode(fresh, e, KEEP);
    read_tokens(fresh, 0, KEEP, toks + N, NEW, NEW, b);
    assert_rows_equal(a, b, NEW, "after the rollback to a prompt checkpoint");
    assert_int_equal(nu_kv_seq_state_pos(c, 0), KEEP + NEW - 1);
    free(a);
    free(b);
    nu_context_free(c);
    nu_context_free(fresh);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batching),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_speculative),
        cmocka_unit_test(test_scheduler),
        cmocka_unit_test(test_beam),
        cmocka_unit_test(test_mtp_layer),
        cmocka_unit_test(test_beam_width1),
        cmocka_unit_test(test_samples_alone),
        cmocka_unit_test(test_prompt_checkpoints),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
