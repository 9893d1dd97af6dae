/* generate.c - the generation loop: tokenize the prompt, run it through the
 * model in batches, then sample one token at a time, streaming whole UTF-8
 * characters to the caller as soon as they are final. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "context.h"
#include "error.h"

double nu_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

const char *nu_finish_reason_name(nu_finish_reason r) {
    switch (r) {
    case NU_FINISH_NONE: return "none";
    case NU_FINISH_LENGTH: return "length";
    case NU_FINISH_EOS: return "eos";
    case NU_FINISH_STOP: return "stop";
    case NU_FINISH_CONTEXT: return "context";
    case NU_FINISH_CANCELLED: return "cancelled";
    }
    return "unknown";
}

nu_generate_params nu_generate_default_params(void) {
    nu_generate_params p = {.n_predict = 128, .add_bos = true, .parse_special = false,
                            .echo = false, .sampling = nu_sampler_default_params()};
    return p;
}

/* Tokenizes text into a fresh array (caller frees). */
static nu_status tokenize_alloc(const nu_model *m, const char *text, unsigned flags,
                                int32_t **out, size_t *n, nu_error *err) {
    size_t len = strlen(text), cap = len + 8;
    int32_t *toks = malloc(cap * sizeof *toks);
    if (!toks) return nu_fail(err, NU_ERR_NOMEM, "out of memory for the prompt's tokens");
    nu_status st = nu_tokenize(m, text, len, flags, toks, cap, n, err);
    if (st == NU_ERR_BUFFER_SMALL) {
        cap = *n;
        int32_t *bigger = realloc(toks, cap * sizeof *toks);
        if (!bigger) st = nu_fail(err, NU_ERR_NOMEM, "out of memory for the prompt's tokens");
        else st = nu_tokenize(m, text, len, flags, toks = bigger, cap, n, err);
    }
    if (st) {
        free(toks);
        return st;
    }
    *out = toks;
    return NU_OK;
}

/* Runs tokens [0, n) of sequence seq through the model in n_batch chunks,
 * asking for logits after the last one. */
static nu_status prefill(nu_context *ctx, const int32_t *toks, int32_t n, int32_t seq,
                         nu_batch_entry *batch, nu_error *err) {
    int32_t n_batch = ctx->params.n_batch;
    for (int32_t start = 0; start < n; start += n_batch) {
        int32_t m = n - start < n_batch ? n - start : n_batch;
        for (int32_t i = 0; i < m; i++) {
            batch[i] = (nu_batch_entry){toks[start + i], start + i, seq, start + i == n - 1};
        }
        nu_status st = nu_decode(ctx, batch, m, err);
        if (st) return st;
    }
    return NU_OK;
}

/* Text out through the detokenizer; false when the caller asked to stop. */
static bool emit(const nu_generate_params *p, nu_detokenizer *d, int32_t tok) {
    char buf[512];
    size_t n = nu_detokenizer_push(d, tok, buf, sizeof buf);
    return n == 0 || !p->on_text || p->on_text(p->user, buf, n);
}

typedef struct gen_state {
    nu_context *ctx;
    const nu_generate_params *p;
    nu_sampler *sampler;
    nu_detokenizer detok;
    int32_t n_pos;
    int32_t logits_entry; /* entry of the last nu_decode that holds the logits */
} gen_state;

/* Samples until a stop condition; logits of the last prompt token are ready. */
static nu_status sample_loop(gen_state *g, nu_generate_result *r, nu_error *err) {
    const nu_model *m = g->ctx->model;
    for (;;) {
        if (g->p->n_predict >= 0 && r->n_generated >= g->p->n_predict) {
            r->finish = NU_FINISH_LENGTH;
            return NU_OK;
        }
        int32_t tok = nu_sampler_sample(g->sampler, nu_logits(g->ctx, g->logits_entry));
        nu_sampler_accept(g->sampler, tok);
        if (nu_token_is_eog(m, tok)) {
            r->finish = NU_FINISH_EOS;
            return NU_OK;
        }
        r->n_generated++;
        if (!emit(g->p, &g->detok, tok)) {
            r->finish = NU_FINISH_CANCELLED;
            return NU_OK;
        }
        if (g->n_pos >= g->ctx->params.n_ctx) {
            r->finish = NU_FINISH_CONTEXT;
            return NU_OK;
        }
        nu_batch_entry e = {tok, g->n_pos++, 0, true};
        nu_status st = nu_decode(g->ctx, &e, 1, err);
        if (st) return st;
        g->logits_entry = 0;
    }
}

static nu_status run(gen_state *g, const int32_t *toks, int32_t n, nu_generate_result *r,
                     nu_error *err) {
    const nu_generate_params *p = g->p;
    nu_batch_entry *batch = malloc((size_t)g->ctx->params.n_batch * sizeof *batch);
    if (!batch) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    nu_detokenizer_init(&g->detok, g->ctx->model, false,
                        p->echo && nu_vocab_adds_space_prefix(nu_model_vocab(g->ctx->model)));
    bool go_on = true;
    for (int32_t i = 0; p->echo && go_on && i < n; i++) go_on = emit(p, &g->detok, toks[i]);
    double t0 = nu_time_ms();
    nu_status st = prefill(g->ctx, toks, n, 0, batch, err);
    free(batch);
    if (st) return st;
    double t1 = nu_time_ms();
    r->prompt_ms = t1 - t0;
    g->n_pos = n;
    g->logits_entry = (n - 1) % g->ctx->params.n_batch;
    if (!go_on) r->finish = NU_FINISH_CANCELLED;
    else st = sample_loop(g, r, err);
    r->generate_ms = nu_time_ms() - t1;
    char tail[16];
    size_t k = nu_detokenizer_flush(&g->detok, tail, sizeof tail);
    if (k && p->on_text && r->finish != NU_FINISH_CANCELLED) p->on_text(p->user, tail, k);
    return st;
}

nu_status nu_generate(nu_context *ctx, const char *prompt, const nu_generate_params *params,
                      nu_generate_result *result, nu_error *err) {
    nu_generate_params defaults = nu_generate_default_params();
    const nu_generate_params *p = params ? params : &defaults;
    nu_generate_result r = {0};
    if (p->n_predict < -1)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_predict %d must be >= -1", p->n_predict);
    gen_state g = {.ctx = ctx, .p = p};
    nu_status st = nu_sampler_new(&p->sampling, ctx->model->hp.n_vocab, &g.sampler, err);
    if (st) return st;
    int32_t *toks = NULL;
    size_t n = 0;
    unsigned flags = (p->add_bos ? NU_TOKENIZE_ADD_BOS : 0) |
                     (p->parse_special ? NU_TOKENIZE_PARSE_SPECIAL : 0);
    st = tokenize_alloc(ctx->model, prompt, flags, &toks, &n, err);
    if (st == NU_OK && n == 0)
        st = nu_fail(err, NU_ERR_INVALID_ARG, "the prompt is empty (and the model adds no BOS)");
    if (st == NU_OK && n >= (size_t)ctx->params.n_ctx)
        st = nu_fail(err, NU_ERR_CONTEXT_FULL, "the prompt has %zu tokens; the context holds %d",
                     n, ctx->params.n_ctx);
    if (st == NU_OK) {
        nu_kv_seq_remove(ctx, 0, 0, -1);
        r.n_prompt = (int32_t)n;
        st = run(&g, toks, (int32_t)n, &r, err);
    }
    free(toks);
    nu_sampler_free(g.sampler);
    if (result) *result = r;
    return st;
}
