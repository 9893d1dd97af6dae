/* test_generate.c - the generation loop and the scheduler on stories260K:
 * stop strings matched across tokens and never streamed out partially,
 * reproducibility across thread counts and batch compositions, n samples,
 * log-probs and echo, prefix reuse, cancellation, parameter checks. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test_support.h"

static nu_context *make_context(int32_t threads, int32_t n_seq, int32_t n_batch) {
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = threads;
    cp.n_seq_max = n_seq;
    cp.n_batch = n_batch;
    nu_context *ctx;
    assert_int_equal(nu_context_new(nu_test_demo, &cp, &ctx, NULL), NU_OK);
    return ctx;
}

static nu_generate_params greedy(int32_t n) {
    nu_generate_params p = nu_generate_default_params();
    p.n_predict = n;
    p.sampling.temperature = 0;
    return p;
}

/* Collects streamed chunks, remembering whether any chunk ever held the
 * beginning of a stop string. */
typedef struct stream {
    char text[8192];
    size_t len;
    int chunks;
    int stop_after;
} stream;

static bool collect(void *user, int32_t index, const char *text, size_t len) {
    stream *s = user;
    (void)index;
    assert_true(s->len + len < sizeof s->text);
    memcpy(s->text + s->len, text, len);
    s->len += len;
    s->text[s->len] = 0;
    s->chunks++;
    return s->stop_after == 0 || s->chunks < s->stop_after;
}

static const char *reference = ", there was a little girl named Lily. She loved to play outside";

/* "le gi" spans the tokens " little" and " girl": the text ends before it,
 * and no streamed chunk ever carried its first bytes. */
static void test_stop_string_across_tokens(void **state) {
    (void)state;
    nu_context *ctx = make_context(2, 1, 64);
    nu_generate_params p = greedy(40);
    const char *stops[] = {"le gi", "never"};
    p.stop = stops;
    p.n_stop = 2;
    stream s = {0};
    p.on_text = collect;
    p.user = &s;
    nu_generate_result r;
    assert_int_equal(nu_generate(ctx, "Once upon a time", &p, &r, NULL), NU_OK);
    assert_int_equal(r.finish, NU_FINISH_STOP);
    assert_string_equal(r.text, ", there was a litt");
    assert_string_equal(s.text, r.text);
    assert_null(strstr(s.text, "le"));
    assert_int_equal(r.stop_index, 0); /* "le gi" */
    nu_generate_result_free(&r);
    /* which stop string matched: the second of these */
    const char *other[] = {"never", "le gi"};
    p.stop = other;
    s = (stream){0};
    assert_int_equal(nu_generate(ctx, "Once upon a time", &p, &r, NULL), NU_OK);
    assert_int_equal(r.stop_index, 1);
    nu_generate_result_free(&r);
    p.stop = stops;
    /* kept when asked */
    p.include_stop = true;
    s = (stream){0};
    assert_int_equal(nu_generate(ctx, "Once upon a time", &p, &r, NULL), NU_OK);
    assert_string_equal(r.text, ", there was a little gi");
    assert_string_equal(s.text, r.text);
    nu_generate_result_free(&r);
    nu_context_free(ctx);
}

/* Without a stop string the streamed text is the whole text. */
static void test_stream_equals_text(void **state) {
    (void)state;
    nu_context *ctx = make_context(1, 1, 64);
    nu_generate_params p = greedy(12);
    stream s = {0};
    p.on_text = collect;
    p.user = &s;
    p.echo = true;
    nu_generate_result r;
    assert_int_equal(nu_generate(ctx, "Once upon a time", &p, &r, NULL), NU_OK);
    assert_int_equal(r.finish, NU_FINISH_LENGTH);
    assert_int_equal(r.stop_index, -1);
    assert_int_equal(r.n_generated, 12);
    assert_string_equal(s.text, r.text);
    assert_int_equal(strncmp(r.text, "Once upon a time", 16), 0);
    assert_int_equal(strncmp(r.text + 16, reference, 30), 0);
    nu_generate_result_free(&r);
    nu_context_free(ctx);
}

/* The callback returning false stops the sample. */
static void test_cancel_from_callback(void **state) {
    (void)state;
    nu_context *ctx = make_context(1, 1, 64);
    nu_generate_params p = greedy(50);
    stream s = {.stop_after = 3};
    p.on_text = collect;
    p.user = &s;
    nu_generate_result r;
    assert_int_equal(nu_generate(ctx, "Once upon a time", &p, &r, NULL), NU_OK);
    assert_int_equal(r.finish, NU_FINISH_CANCELLED);
    assert_int_equal(s.chunks, 3);
    nu_generate_result_free(&r);
    nu_context_free(ctx);
}

static const char *prompts[] = {"Once upon a time", "Lily and Ben went to the park",
                                "The cat sat on the mat and"};

/* Seeded samples: the same text alone or in a batch of three requests, with
 * one or two threads, with small or large batches. */
static void test_batch_and_threads_do_not_change_tokens(void **state) {
    (void)state;
    nu_generate_result alone[3], together[3];
    for (int i = 0; i < 3; i++) {
        nu_context *ctx = make_context(1, 1, 64);
        nu_generate_params p = nu_generate_default_params();
        p.n_predict = 40;
        p.sampling.seed = 100 + (uint64_t)i;
        assert_int_equal(nu_generate(ctx, prompts[i], &p, &alone[i], NULL), NU_OK);
        nu_context_free(ctx);
    }
    int32_t configs[][2] = {{2, 64}, {1, 5}, {2, 7}};
    for (size_t c = 0; c < 3; c++) {
        nu_context *ctx = make_context(configs[c][0], 3, configs[c][1]);
        nu_scheduler *s;
        assert_int_equal(nu_scheduler_new(ctx, &s, NULL), NU_OK);
        nu_generate_params p[3];
        for (int i = 0; i < 3; i++) {
            p[i] = nu_generate_default_params();
            p[i].n_predict = 40;
            p[i].sampling.seed = 100 + (uint64_t)i;
            assert_int_equal(
                nu_scheduler_submit(s, prompts[i], NULL, 0, &p[i], &together[i], NULL, NULL),
                NU_OK);
        }
        assert_int_equal(nu_scheduler_run(s, NULL), NU_OK);
        for (int i = 0; i < 3; i++) {
            assert_string_equal(together[i].text, alone[i].text);
            nu_generate_result_free(&together[i]);
        }
        nu_scheduler_free(s);
        nu_context_free(ctx);
    }
    for (int i = 0; i < 3; i++) nu_generate_result_free(&alone[i]);
}

/* More requests than sequences: they queue and all complete, in order. */
static void test_requests_queue_for_sequences(void **state) {
    (void)state;
    nu_context *ctx = make_context(2, 2, 32);
    nu_scheduler *s;
    assert_int_equal(nu_scheduler_new(ctx, &s, NULL), NU_OK);
    nu_generate_result r[6];
    nu_generate_params p = greedy(10);
    for (int i = 0; i < 6; i++)
        assert_int_equal(nu_scheduler_submit(s, prompts[i % 3], NULL, 0, &p, &r[i], NULL, NULL),
                         NU_OK);
    assert_int_equal(nu_scheduler_queued(s), 6);
    assert_int_equal(nu_scheduler_run(s, NULL), NU_OK);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(r[i].n_generated, 10);
        assert_string_equal(r[i].text, r[i % 3].text);
    }
    for (int i = 0; i < 6; i++) nu_generate_result_free(&r[i]);
    nu_scheduler_free(s);
    nu_context_free(ctx);
}

/* n samples share the prompt; sample i is what seed + i gives alone. */
static void test_n_samples(void **state) {
    (void)state;
    nu_context *ctx = make_context(2, 4, 64);
    nu_generate_params p = nu_generate_default_params();
    p.n_predict = 30;
    p.n = 4;
    p.sampling.seed = 7;
    nu_generate_result r[4];
    assert_int_equal(nu_generate(ctx, prompts[0], &p, r, NULL), NU_OK);
    for (int i = 0; i < 4; i++) {
        nu_generate_params one = p;
        one.n = 1;
        one.sampling.seed = 7 + (uint64_t)i;
        nu_generate_result alone;
        assert_int_equal(nu_generate(ctx, prompts[0], &one, &alone, NULL), NU_OK);
        assert_string_equal(alone.text, r[i].text);
        assert_true(fabs(alone.sum_logprob - r[i].sum_logprob) < 1e-9);
        nu_generate_result_free(&alone);
    }
    assert_true(strcmp(r[0].text, r[1].text) || strcmp(r[1].text, r[2].text));
    for (int i = 0; i < 4; i++) nu_generate_result_free(&r[i]);
    nu_context_free(ctx);
}

/* Greedy log-probs equal the reference top-5 (f16 cache, like the reference),
 * and echo gives the prompt tokens' log-probs computed from the model. */
static void test_logprobs_and_echo(void **state) {
    (void)state;
    char *json = nu_test_read_file(nu_test_shared("refs/stories260K_greedy.json"), NULL);
    assert_non_null(json);
    cJSON *refs = cJSON_Parse(json);
    free(json);
    cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(refs, "prompts"), 0);
    nu_context *ctx = make_context(2, 1, 64);
    nu_generate_params p = greedy(20);
    p.logprobs = 5;
    p.echo = true;
    nu_generate_result r;
    assert_int_equal(nu_generate(ctx, "Once upon a time", &p, &r, NULL), NU_OK);
    assert_int_equal(r.n_prompt, 5);
    assert_int_equal(r.n_prompt_logprobs, 5);
    assert_int_equal(r.n_logprobs, 25);
    assert_true(isnan(r.logprobs[0].logprob)); /* BOS has nothing before it */
    for (int i = 1; i < 5; i++) assert_true(r.logprobs[i].logprob < 0 && r.logprobs[i].n_top == 5);
    double worst = 0;
    for (int s = 0; s < 20; s++) {
        const nu_token_logprob *lp = &r.logprobs[5 + s];
        cJSON *step = cJSON_GetArrayItem(cJSON_GetObjectItem(first, "per_token"), s);
        assert_int_equal(lp->token, cJSON_GetObjectItem(step, "id")->valueint);
        assert_int_equal(lp->n_top, 5);
        for (int k = 0; k < 5; k++) {
            cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(step, "top5"), k);
            assert_int_equal(lp->top[k].token, cJSON_GetObjectItem(t, "id")->valueint);
            double d = fabs(lp->top[k].logprob - cJSON_GetObjectItem(t, "logprob")->valuedouble);
            if (d > worst) worst = d;
        }
        assert_true(lp->top[0].logprob == lp->logprob); /* greedy takes the top token */
    }
    assert_true(worst < 1e-2);
    /* token text offsets point into the text */
    assert_true(r.logprobs[5].text_offset == 16);
    nu_generate_result_free(&r);
    cJSON_Delete(refs);
    nu_context_free(ctx);
}

/* A second prompt that extends the first reuses its cached positions and
 * gives the same tokens as a fresh context. */
static void test_prefix_reuse(void **state) {
    (void)state;
    nu_context *ctx = make_context(2, 1, 64), *fresh = make_context(2, 1, 64);
    nu_generate_params p = greedy(16);
    nu_generate_result a, b, c;
    assert_int_equal(nu_generate(ctx, "Lily and Ben went to the park", &p, &a, NULL), NU_OK);
    int32_t used = nu_kv_used(ctx);
    assert_true(used >= 12);
    assert_int_equal(nu_generate(ctx, "Lily and Ben went to the park. They", &p, &b, NULL), NU_OK);
    assert_int_equal(nu_generate(fresh, "Lily and Ben went to the park. They", &p, &c, NULL),
                     NU_OK);
    assert_string_equal(b.text, c.text);
    nu_generate_result_free(&a);
    nu_generate_result_free(&b);
    nu_generate_result_free(&c);
    nu_context_free(ctx);
    nu_context_free(fresh);
}

static void test_bad_params(void **state) {
    (void)state;
    nu_context *ctx = make_context(1, 2, 64);
    nu_generate_params p = greedy(5);
    nu_generate_result r[4];
    nu_error err;
    p.n = 3; /* more samples than sequences */
    assert_int_equal(nu_generate(ctx, "Hi", &p, r, &err), NU_ERR_INVALID_ARG);
    p = greedy(5);
    p.logprobs = 21;
    assert_int_equal(nu_generate(ctx, "Hi", &p, r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "logprobs"));
    p = greedy(-2);
    assert_int_equal(nu_generate(ctx, "Hi", &p, r, &err), NU_ERR_INVALID_ARG);
    const char *empty[] = {""};
    p = greedy(5);
    p.stop = empty;
    p.n_stop = 1;
    assert_int_equal(nu_generate(ctx, "Hi", &p, r, &err), NU_ERR_INVALID_ARG);
    nu_context_free(ctx);
}

/* The thinking budget through the scheduler and speculative decoding: the
 * prompt's last token stands for the open marker, so generation starts
 * inside a block; after 3 tokens the forced pair comes, whatever the model
 * prefers, in every sample and with prompt-lookup speculation alike. */
static void test_think_budget(void **state) {
    (void)state;
    nu_context *ctx = make_context(1, 2, 64);
    const char *prompt = "Once upon a time";
    int32_t toks[16];
    size_t n = 0;
    assert_int_equal(
        nu_tokenize(nu_test_demo, prompt, strlen(prompt), NU_TOKENIZE_ADD_BOS, toks, 16, &n, NULL),
        NU_OK);
    nu_generate_params p = greedy(8);
    nu_generate_result plain, r[2];
    assert_int_equal(nu_generate(ctx, prompt, &p, &plain, NULL), NU_OK);
    /* a close marker the plain text never writes, two forced tokens */
    int32_t close = 0;
    for (bool used = true; used; close++) {
        used = false;
        for (int32_t i = 0; i < plain.n_tokens; i++) used |= plain.tokens[i] == close;
    }
    close--;
    int32_t open = toks[n - 1], force[] = {100, 101};
    p.think = (nu_think_budget){&open, 1, &close, 1, force, 2, 3, false};
    assert_int_equal(nu_generate(ctx, prompt, &p, r, NULL), NU_OK);
    assert_int_equal(r[0].n_tokens, 8);
    assert_memory_equal(r[0].tokens, plain.tokens, 3 * sizeof(int32_t));
    assert_int_equal(r[0].tokens[3], 100);
    assert_int_equal(r[0].tokens[4], 101);
    int32_t budgeted[8];
    memcpy(budgeted, r[0].tokens, sizeof budgeted);
    nu_generate_result_free(&r[0]);
    /* sampled, two samples */
    p.n = 2;
    p.sampling.temperature = 1;
    assert_int_equal(nu_generate(ctx, prompt, &p, r, NULL), NU_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].tokens[3], 100);
        assert_int_equal(r[i].tokens[4], 101);
        nu_generate_result_free(&r[i]);
    }
    /* greedy with prompt lookup: the same tokens */
    p.n = 1;
    p.sampling.temperature = 0;
    nu_speculative_params sp = nu_speculative_default_params();
    sp.lookup = true;
    assert_int_equal(nu_generate_speculative(ctx, prompt, &p, &sp, &r[0], NULL, NULL), NU_OK);
    assert_memory_equal(r[0].tokens, budgeted, sizeof budgeted);
    nu_generate_result_free(&r[0]);
    /* a bad budget is refused */
    nu_error err;
    p.think.max_tokens = -1;
    assert_int_equal(nu_generate(ctx, prompt, &p, r, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "think budget"));
    nu_generate_result_free(&plain);
    nu_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_string_across_tokens),
        cmocka_unit_test(test_stream_equals_text),
        cmocka_unit_test(test_cancel_from_callback),
        cmocka_unit_test(test_batch_and_threads_do_not_change_tokens),
        cmocka_unit_test(test_requests_queue_for_sequences),
        cmocka_unit_test(test_n_samples),
        cmocka_unit_test(test_logprobs_and_echo),
        cmocka_unit_test(test_prefix_reuse),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_think_budget),
    };
    return cmocka_run_group_tests(tests, nu_test_demo_setup, nu_test_demo_teardown);
}
