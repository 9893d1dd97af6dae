/* choice.c - nu_choice_loglik: the log-likelihood of each ending of a
 * multiple-choice task (HellaSwag-style), the context read once.
 *
 * As llama-perplexity's --hellaswag: each candidate is the text context + " "
 * + ending, tokenized with BOS; the tokens every candidate shares (the
 * common prefix) are decoded once in sequence 0 and copied to the other
 * candidates' sequences (the cache shares the cells), then every
 * candidate's remaining tokens are decoded in its own sequence, all in the
 * same batches. A candidate's score is the sum of ln p of its tokens after
 * the common prefix, the first of them from the prefix's last logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gen_output.h"
#include "nucleus.h"

/* ln softmax(logits)[token], in double. */
static double token_logprob(const float *logits, int32_t n_vocab, int32_t token) {
    double log_z;
    nu_logprob_of(logits, n_vocab, token, &log_z);
    return (double)logits[token] - log_z;
}

/* The candidates' tokens. */
typedef struct candidates {
    int32_t **tok;
    size_t *len;
    int32_t n;
} candidates;

static void candidates_free(candidates *c) {
    for (int32_t i = 0; c->tok && i < c->n; i++) free(c->tok[i]);
    free(c->tok);
    free(c->len);
}

static nu_status tokenize_candidates(const nu_model *m, const char *context,
                                     const char *const *endings, int32_t n, candidates *c,
                                     nu_error *err) {
    c->n = n;
    c->tok = calloc((size_t)n, sizeof *c->tok);
    c->len = calloc((size_t)n, sizeof *c->len);
    if (!c->tok || !c->len) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    const size_t nc = strlen(context);
    for (int32_t i = 0; i < n; i++) {
        if (!endings[i]) return nu_fail(err, NU_ERR_INVALID_ARG, "ending %d is NULL", i);
        const size_t ne = strlen(endings[i]), len = nc + 1 + ne;
        char *text = malloc(len + 1);
        c->tok[i] = malloc((len + 8) * sizeof *c->tok[i]);
        if (!text || !c->tok[i]) {
            free(text);
            return nu_fail(err, NU_ERR_NOMEM, "out of memory");
        }
        memcpy(text, context, nc);
        text[nc] = ' ';
        memcpy(text + nc + 1, endings[i], ne + 1);
        nu_status st =
            nu_tokenize(m, text, len, NU_TOKENIZE_ADD_BOS, c->tok[i], len + 8, &c->len[i], err);
        free(text);
        if (st) return st;
    }
    return NU_OK;
}

/* How many leading tokens every candidate shares. */
static size_t common_prefix(const candidates *c) {
    size_t k = 0;
    for (;; k++)
        for (int32_t i = 0; i < c->n; i++)
            if (k >= c->len[i] || c->tok[i][k] != c->tok[0][k]) return k;
}

/* Decodes entries [0, n) of `all` in batches, adding the log-prob of the
 * token after each entry that asks for logits to score[its sequence]. The
 * token that follows entry e is next[e]. */
static nu_status decode_scored(nu_context *ctx, const nu_batch_entry *all, const int32_t *next,
                               int64_t n, double *score, nu_error *err) {
    const int32_t n_batch = nu_context_n_batch(ctx);
    const int32_t n_vocab = nu_model_n_vocab(nu_context_model(ctx));
    for (int64_t b0 = 0; b0 < n; b0 += n_batch) {
        const int32_t k = (int32_t)(n - b0 < n_batch ? n - b0 : n_batch);
        nu_status st = nu_decode(ctx, all + b0, k, err);
        if (st) return st;
        for (int32_t i = 0; i < k; i++)
            if (all[b0 + i].logits)
                score[all[b0 + i].seq] += token_logprob(nu_logits(ctx, i), n_vocab, next[b0 + i]);
    }
    return NU_OK;
}

nu_status nu_choice_loglik(nu_context *ctx, const char *context, const char *const *endings,
                           int32_t n_endings, double *loglik, int32_t *n_scored, nu_error *err) {
    if (!context || !endings || n_endings < 2)
        return nu_fail(err, NU_ERR_INVALID_ARG, "a task needs a context and at least 2 endings");
    if (n_endings > nu_context_n_seq_max(ctx))
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "%d endings need %d sequences; the context has n_seq_max %d", n_endings,
                       n_endings, nu_context_n_seq_max(ctx));
    const nu_model *m = nu_context_model(ctx);
    candidates c = {0};
    nu_status st = tokenize_candidates(m, context, endings, n_endings, &c, err);
    size_t total = 0, prefix = st == NU_OK ? common_prefix(&c) : 0;
    for (int32_t i = 0; st == NU_OK && i < n_endings; i++) {
        if (c.len[i] <= prefix)
            st = nu_fail(err, NU_ERR_INVALID_ARG,
                         "ending %d adds no token to what every ending shares", i);
        total += c.len[i];
    }
    if (st == NU_OK && prefix == 0) /* BOS at least is shared when the model adds it */
        st = nu_fail(err, NU_ERR_INVALID_ARG,
                     "the endings share no first token (the model "
                     "adds no BOS): nothing to condition on");
    if (st == NU_OK && total - (size_t)(n_endings - 1) * prefix > (size_t)nu_context_n_ctx(ctx))
        st = nu_fail(err, NU_ERR_INVALID_ARG, "the task needs %zu cells, the context has %d",
                     total - (size_t)(n_endings - 1) * prefix, nu_context_n_ctx(ctx));
    nu_batch_entry *batch = st == NU_OK ? malloc((total + 1) * sizeof *batch) : NULL;
    int32_t *next = st == NU_OK ? malloc((total + 1) * sizeof *next) : NULL;
    if (st == NU_OK && (!batch || !next)) st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n_endings; i++) {
        loglik[i] = 0;
        n_scored[i] = st == NU_OK ? (int32_t)(c.len[i] - prefix) : 0;
    }
    if (st == NU_OK) {
        nu_kv_clear(ctx);
        /* the shared prefix once, in sequence 0: its last logits give every
         * candidate's first scored token (the same for all: scored below) */
        for (size_t p = 0; p < prefix; p++) {
            batch[p] = (nu_batch_entry){c.tok[0][p], (int32_t)p, 0, false};
            next[p] = -1;
        }
        st = decode_scored(ctx, batch, next, (int64_t)prefix - 1, loglik, err);
    }
    if (st == NU_OK) {
        batch[0] = (nu_batch_entry){c.tok[0][prefix - 1], (int32_t)prefix - 1, 0, true};
        /* the prefix's last token, with logits; its log-prob for each
         * candidate's first own token is added per candidate below */
        const int32_t n_vocab = nu_model_n_vocab(m);
        st = nu_decode(ctx, batch, 1, err);
        if (st == NU_OK) {
            const float *l = nu_logits(ctx, 0);
            for (int32_t i = 0; i < n_endings; i++)
                loglik[i] += token_logprob(l, n_vocab, c.tok[i][prefix]);
        }
    }
    if (st == NU_OK) {
        for (int32_t i = 1; i < n_endings; i++) nu_kv_seq_copy(ctx, 0, i, 0, -1);
        int64_t k = 0;
        for (int32_t i = 0; i < n_endings; i++)
            for (size_t p = prefix; p < c.len[i]; p++) {
                const bool more = p + 1 < c.len[i];
                batch[k] = (nu_batch_entry){c.tok[i][p], (int32_t)p, i, more};
                next[k++] = more ? c.tok[i][p + 1] : -1;
            }
        st = decode_scored(ctx, batch, next, k, loglik, err);
    }
    nu_kv_clear(ctx);
    free(batch);
    free(next);
    candidates_free(&c);
    return st;
}
