/* beam.c - beam search.
 *
 * Each step, every live beam's next-token log-probabilities are added to its
 * running total; the best (2 * width) extensions over all beams are taken in
 * order: an extension by an end-of-generation token becomes a finished
 * hypothesis, the others become the next live beams until there are width
 * of them. The KV cache is shared: a new beam's sequence gets its parent's
 * cells by nu_kv_seq_copy (no copying of keys and values), then its new
 * token is decoded; sequences alternate between two banks of `width`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "error.h"
#include "gen_output.h"

typedef struct beam {
    int32_t *tokens; /* generated so far */
    int32_t n;
    double sum; /* total log-prob */
    int32_t seq;
    int32_t entry; /* entry of the last batch holding its next-token logits */
} beam;

typedef struct hypothesis {
    int32_t *tokens;
    int32_t n;
    double sum, score;
    nu_finish_reason finish;
} hypothesis;

typedef struct extension {
    int32_t parent;
    int32_t token;
    double sum;
} extension;

typedef struct beam_state {
    nu_context *ctx;
    const nu_beam_params *p;
    int32_t n_prompt;
    beam *live, *next;
    int32_t n_live;
    hypothesis *hyps;
    int32_t n_hyps;
    extension *ext;
    double *logp; /* [n_vocab] */
    nu_top_logprob *top;
    nu_batch_entry *batch;
} beam_state;

nu_beam_params nu_beam_default_params(void) {
    nu_beam_params p = {.width = 4,
                        .n_return = 1,
                        .length_penalty = 1.0f,
                        .early_stopping = false,
                        .n_predict = 64,
                        .add_bos = true};
    return p;
}

static nu_status check_params(const nu_context *ctx, const nu_beam_params *p, nu_error *err) {
    if (p->width < 1 || p->width > 32)
        return nu_fail(err, NU_ERR_INVALID_ARG, "beam width %d is out of range (1..32)", p->width);
    if (p->n_return < 1 || p->n_return > p->width)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_return %d is out of range (1..%d, the width)",
                       p->n_return, p->width);
    if (!(p->length_penalty >= -10.0f && p->length_penalty <= 10.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "length_penalty %g is out of range (-10..10)",
                       p->length_penalty);
    if (p->n_predict < 1)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_predict %d must be >= 1 for beam search",
                       p->n_predict);
    if (2 * p->width > nu_context_n_seq_max(ctx))
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "beam width %d needs a context with %d sequences "
                       "(it has %d)",
                       p->width, 2 * p->width, nu_context_n_seq_max(ctx));
    return NU_OK;
}

static double length_score(double sum, int32_t n, float alpha) {
    return n > 0 && alpha != 0.0f ? sum / pow((double)n, alpha) : sum;
}

/* Adds a finished hypothesis; keeps the list sorted by score, best first,
 * and at most width long. */
static void add_hypothesis(beam_state *b, const beam *from, int32_t extra, double sum,
                           nu_finish_reason why) {
    int32_t n = from->n;
    double score = length_score(sum, n, b->p->length_penalty);
    int32_t cap = b->p->width;
    if (b->n_hyps == cap && score <= b->hyps[cap - 1].score) return;
    int32_t i = b->n_hyps < cap ? b->n_hyps++ : cap - 1;
    free(b->hyps[i].tokens);
    while (i > 0 && b->hyps[i - 1].score < score) {
        b->hyps[i] = b->hyps[i - 1];
        i--;
    }
    hypothesis *h = &b->hyps[i];
    h->tokens = malloc(((size_t)n + 1) * sizeof(int32_t));
    if (h->tokens) memcpy(h->tokens, from->tokens, (size_t)n * sizeof(int32_t));
    h->n = h->tokens ? n : 0;
    h->sum = sum;
    h->score = score;
    h->finish = why;
    (void)extra;
}

/* The best 2 * width extensions over every live beam, best first. */
static int32_t best_extensions(beam_state *b) {
    int32_t n_vocab = nu_model_n_vocab(nu_context_model(b->ctx)), k = 2 * b->p->width, n_ext = 0;
    for (int32_t i = 0; i < b->n_live; i++) {
        const float *logits = nu_logits(b->ctx, b->live[i].entry);
        double log_z;
        nu_logprob_of(logits, n_vocab, 0, &log_z);
        int32_t got = nu_top_logprobs(logits, n_vocab, log_z, k, b->top);
        for (int32_t t = 0; t < got; t++) {
            double sum = b->live[i].sum + b->top[t].logprob;
            if (n_ext == k && sum <= b->ext[k - 1].sum) continue;
            int32_t j = n_ext < k ? n_ext++ : k - 1;
            while (j > 0 && b->ext[j - 1].sum < sum) {
                b->ext[j] = b->ext[j - 1];
                j--;
            }
            b->ext[j] = (extension){i, b->top[t].token, sum};
        }
    }
    return n_ext;
}

/* Whether the search can stop: enough hypotheses, and (without early
 * stopping) no live beam can still beat the worst of them. */
static bool done(const beam_state *b, int32_t len) {
    if (b->n_live == 0) return true;
    if (b->n_hyps < b->p->width) return false;
    if (b->p->early_stopping) return true;
    double best_live = b->live[0].sum;
    for (int32_t i = 1; i < b->n_live; i++)
        if (b->live[i].sum > best_live) best_live = b->live[i].sum;
    return length_score(best_live, len, b->p->length_penalty) <= b->hyps[b->n_hyps - 1].score;
}

/* Turns the extensions into the next live beams and decodes their tokens. */
static nu_status step(beam_state *b, int32_t n_ext, int32_t bank, nu_error *err) {
    const nu_model *m = nu_context_model(b->ctx);
    int32_t n_next = 0, len = b->live[0].n + 1;
    for (int32_t e = 0; e < n_ext && n_next < b->p->width; e++) {
        const extension *x = &b->ext[e];
        const beam *parent = &b->live[x->parent];
        if (nu_token_is_eog(m, x->token)) {
            add_hypothesis(b, parent, 0, x->sum, NU_FINISH_EOS);
            continue;
        }
        beam *nb = &b->next[n_next];
        memcpy(nb->tokens, parent->tokens, (size_t)parent->n * sizeof(int32_t));
        nb->tokens[parent->n] = x->token;
        nb->n = len;
        nb->sum = x->sum;
        nb->seq = bank * b->p->width + n_next;
        nb->entry = n_next;
        nu_kv_seq_remove(b->ctx, nb->seq, 0, -1);
        nu_kv_seq_copy(b->ctx, parent->seq, nb->seq, 0, -1);
        b->batch[n_next] = (nu_batch_entry){x->token, b->n_prompt + len - 1, nb->seq, true};
        n_next++;
    }
    for (int32_t i = 0; i < b->n_live; i++) nu_kv_seq_remove(b->ctx, b->live[i].seq, 0, -1);
    beam *t = b->live;
    b->live = b->next;
    b->next = t;
    b->n_live = n_next;
    if (n_next == 0) return NU_OK;
    return nu_decode(b->ctx, b->batch, n_next, err);
}

static nu_status alloc_state(beam_state *b, nu_error *err) {
    int32_t w = b->p->width;
    b->live = calloc((size_t)w, sizeof(beam));
    b->next = calloc((size_t)w, sizeof(beam));
    b->hyps = calloc((size_t)w, sizeof(hypothesis));
    b->ext = calloc(2 * (size_t)w, sizeof(extension));
    b->top = calloc(2 * (size_t)w, sizeof(nu_top_logprob));
    b->batch = calloc((size_t)(w > b->n_prompt ? w : b->n_prompt), sizeof(nu_batch_entry));
    bool ok = b->live && b->next && b->hyps && b->ext && b->top && b->batch;
    for (int32_t i = 0; ok && i < w; i++) {
        b->live[i].tokens = malloc((size_t)b->p->n_predict * sizeof(int32_t));
        b->next[i].tokens = malloc((size_t)b->p->n_predict * sizeof(int32_t));
        ok = b->live[i].tokens && b->next[i].tokens;
    }
    return ok ? NU_OK : nu_fail(err, NU_ERR_NOMEM, "out of memory for beam search");
}

static void free_state(beam_state *b) {
    for (int32_t i = 0; b->live && b->next && i < b->p->width; i++) {
        free(b->live[i].tokens);
        free(b->next[i].tokens);
    }
    for (int32_t i = 0; b->hyps && i < b->p->width; i++) free(b->hyps[i].tokens);
    free(b->live);
    free(b->next);
    free(b->hyps);
    free(b->ext);
    free(b->top);
    free(b->batch);
}

/* Reads the prompt into sequence 0 in n_batch chunks. */
static nu_status read_prompt(beam_state *b, const int32_t *toks, nu_error *err) {
    int32_t nb = nu_context_n_batch(b->ctx);
    for (int32_t s = 0; s < b->n_prompt; s += nb) {
        int32_t k = b->n_prompt - s < nb ? b->n_prompt - s : nb;
        for (int32_t i = 0; i < k; i++)
            b->batch[i] = (nu_batch_entry){toks[s + i], s + i, 0, s + i == b->n_prompt - 1};
        nu_status st = nu_decode(b->ctx, b->batch, k, err);
        if (st) return st;
    }
    /* the prompt's logits become entry 0, the only live beam */
    return NU_OK;
}

static void write_results(beam_state *b, nu_generate_result *results) {
    const nu_model *m = nu_context_model(b->ctx);
    for (int32_t r = 0; r < b->p->n_return; r++) {
        nu_generate_result *res = &results[r];
        memset(res, 0, sizeof *res);
        res->stop_index = -1;
        res->index = r;
        res->n_prompt = b->n_prompt;
        if (r >= b->n_hyps) continue;
        hypothesis *h = &b->hyps[r];
        size_t cap = 16;
        for (int32_t i = 0; i < h->n; i++)
            cap += nu_token_to_bytes(m, h->tokens[i], false, NULL, 0);
        res->text = malloc(cap + 1);
        nu_detokenizer d;
        nu_detokenizer_init(&d, m, false, false);
        for (int32_t i = 0; res->text && i < h->n; i++)
            res->text_len += nu_detokenizer_push(&d, h->tokens[i], res->text + res->text_len,
                                                 cap - res->text_len);
        if (res->text) {
            res->text_len +=
                nu_detokenizer_flush(&d, res->text + res->text_len, cap - res->text_len);
            res->text[res->text_len] = 0;
        }
        res->tokens = h->tokens;
        h->tokens = NULL;
        res->n_tokens = res->n_generated = h->n;
        res->sum_logprob = h->sum;
        res->score = h->score;
        res->finish = h->finish;
    }
}

static nu_status search(beam_state *b, const int32_t *toks, nu_error *err) {
    nu_status st = read_prompt(b, toks, err);
    if (st) return st;
    /* one live beam: the empty continuation in sequence 0, whose logits are
     * at the last entry of the prompt's last chunk */
    b->live[0].n = 0;
    b->live[0].sum = 0;
    b->live[0].seq = 0;
    b->live[0].entry = (b->n_prompt - 1) % nu_context_n_batch(b->ctx);
    b->n_live = 1;
    for (int32_t len = 0, bank = 1; len < b->p->n_predict; len++, bank ^= 1) {
        int32_t n_ext = best_extensions(b);
        if ((st = step(b, n_ext, bank, err))) return st;
        if (done(b, len + 1)) break;
    }
    for (int32_t i = 0; i < b->n_live; i++)
        add_hypothesis(b, &b->live[i], 0, b->live[i].sum, NU_FINISH_LENGTH);
    return NU_OK;
}

nu_status nu_beam_search(nu_context *ctx, const char *prompt, const nu_beam_params *params,
                         nu_generate_result *results, nu_error *err) {
    nu_beam_params defaults = nu_beam_default_params();
    const nu_beam_params *p = params ? params : &defaults;
    nu_status st = check_params(ctx, p, err);
    if (st) return st;
    size_t len = strlen(prompt), n = 0;
    int32_t *toks = malloc((len + 8) * sizeof(int32_t));
    if (!toks) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    unsigned flags =
        (p->add_bos ? NU_TOKENIZE_ADD_BOS : 0) | (p->parse_special ? NU_TOKENIZE_PARSE_SPECIAL : 0);
    st = nu_tokenize(nu_context_model(ctx), prompt, len, flags, toks, len + 8, &n, err);
    if (st == NU_OK && n == 0) st = nu_fail(err, NU_ERR_INVALID_ARG, "the prompt is empty");
    /* the beams' tree can hold up to width new positions per step */
    if (st == NU_OK && (int64_t)n + (int64_t)p->width * p->n_predict > nu_context_n_ctx(ctx))
        st = nu_fail(err, NU_ERR_CONTEXT_FULL,
                     "prompt (%zu tokens) + width x n_predict (%d x %d) "
                     "exceed the context (%d)",
                     n, p->width, p->n_predict, nu_context_n_ctx(ctx));
    beam_state b = {.ctx = ctx, .p = p, .n_prompt = (int32_t)n};
    if (st == NU_OK) st = alloc_state(&b, err);
    if (st == NU_OK) {
        for (int32_t q = 0; q < 2 * p->width; q++) nu_kv_seq_remove(ctx, q, 0, -1);
        st = search(&b, toks, err);
    }
    if (st == NU_OK) write_results(&b, results);
    for (int32_t q = 0; q < 2 * p->width; q++) nu_kv_seq_remove(ctx, q, 0, -1);
    free_state(&b);
    free(toks);
    return st;
}
