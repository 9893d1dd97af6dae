/* scheduler.c - many requests advancing together through shared forward
 * batches (continuous batching).
 *
 * A request is a prompt and its n samples. It waits in a queue until the
 * context has n free sequences; then its prompt is read in chunks into one
 * sequence (reusing the cached tokens an idle sequence already shares with
 * it), and when the prompt is done the other samples share those cells
 * (nu_kv_seq_copy) and every sample draws from the same logits with its own
 * sampler. Each step makes one batch: first the pending token of every
 * generating sample, then prompt chunks with the room left. Because the
 * forward pass gives each entry the same result whatever else is in the
 * batch, a sample's tokens do not depend on its neighbours.
 *
 * Speculation (nu_scheduler_set_speculation). Before the target's batch,
 * every generating sample that speculates proposes up to k tokens: with a
 * draft model, whose context keeps its own cells per sequence (the draft
 * reads each prompt beside the target and catches up with what was
 * generated), every sample's draft steps run together as shared batches;
 * with prompt lookup, from its own text. The target batch then carries each
 * such sample's pending token followed by its proposals, every one asking
 * for logits, beside the other samples and prompt chunks. After the pass
 * the exact acceptance rule of speculative.c (nu_spec_verify) emits the
 * accepted proposals and one more token, and the cells of rejected
 * positions are removed from both caches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "error.h"
#include "gen_output.h"
#include "speculative.h"

typedef enum req_state { REQ_QUEUED, REQ_PREFILL, REQ_RUNNING, REQ_DONE } req_state;

/* What a speculating sample keeps besides its sampler. */
typedef struct nu_spec_sample {
    nu_speculative_params sp; /* the scheduler's lengths, capped by the request's draft_max */
    nu_spec_length len;       /* adaptive draft length */
    nu_sampler *ds;           /* the draft model's sampler (NULL with lookup) */
    nu_rng rng;               /* drafting, acceptance and residual draws */
    int32_t *toks;            /* prompt + generated tokens [n_ctx + 1] */
    int32_t n_toks;           /* the last one is the pending token */
    int32_t dft_n;            /* toks[0, dft_n) are in the draft's cache */
    int32_t *draft;           /* this step's proposals [sp.draft_max] */
    float *q;                 /* [sp.draft_max][n_vocab] their distributions (draft model) */
    int32_t k;                /* proposals planned for this step */
    int32_t n_draft;          /* proposals made */
    int32_t pass_pos;         /* while verifying: position of the first token emitted */
    int32_t n_emitted;        /* tokens emitted so far in this pass */
} nu_spec_sample;

typedef struct gen_sample {
    struct gen_request *req;
    int32_t index;
    int32_t seq; /* KV sequence */
    nu_sampler *sampler;
    gen_output out;
    int32_t n_pos;   /* next position */
    int32_t pending; /* sampled, not yet decoded; -1 when none */
    int32_t entry;   /* entry of the current batch that carries `pending` */
    bool done;
    nu_spec_sample *spec; /* NULL: this sample does not speculate */
} gen_sample;

typedef struct gen_request {
    int32_t id;
    req_state state;
    nu_generate_params p; /* with stop and stop_tokens pointing at copies below */
    char **stop_copy;
    int32_t *stop_tokens_copy;
    int32_t *prompt;
    int32_t n_prompt;
    int32_t n_read;      /* prompt tokens in the cache */
    int32_t last_entry;  /* entry of the prompt's last token in this step's batch */
    int32_t first_entry; /* entry of the first prompt token of this step's chunk */
    int32_t chunk_pos;   /* position of that first token */
    bool cancelled;
    bool spec;        /* its samples speculate */
    int32_t dft_read; /* prompt tokens in the draft's cache (first sample's sequence) */
    double t_start, t_prompt_done;
    nu_generate_result *results;
    gen_sample *samples;
    struct gen_request *next;
} gen_request;

struct nu_scheduler {
    nu_context *ctx;
    gen_request *head, *tail;
    int32_t next_id;
    gen_sample *owner[NU_MAX_SEQ]; /* sample using each sequence, or NULL */
    double last_used[NU_MAX_SEQ];
    nu_batch_entry *batch;
    int32_t n_batch;
    /* speculation (nu_scheduler_set_speculation) */
    bool nu_spec_on;
    nu_speculative_params sp;
    nu_context *dft;        /* the draft model's context (owned), NULL with lookup */
    nu_batch_entry *dbatch; /* a draft batch being filled */
    gen_sample **downer;    /* per draft entry: the sample its logits propose for, or NULL */
    float *pbuf;            /* [n_vocab] the target's distribution while verifying */
    nu_speculative_stats stats;
};

nu_status nu_scheduler_new(nu_context *ctx, nu_scheduler **out, nu_error *err) {
    nu_scheduler *s = calloc(1, sizeof *s);
    if (s) s->batch = malloc((size_t)nu_context_n_batch(ctx) * sizeof *s->batch);
    if (!s || !s->batch) {
        free(s);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for a scheduler");
    }
    s->ctx = ctx;
    *out = s;
    return NU_OK;
}

static void free_spec_sample(nu_spec_sample *sp) {
    if (!sp) return;
    nu_sampler_free(sp->ds);
    free(sp->toks);
    free(sp->draft);
    free(sp->q);
    free(sp);
}

static void free_request(gen_request *r) {
    for (int32_t i = 0; r->samples && i < r->p.n; i++) {
        nu_sampler_free(r->samples[i].sampler);
        free_spec_sample(r->samples[i].spec);
    }
    for (int32_t i = 0; r->stop_copy && i < r->p.n_stop; i++) free(r->stop_copy[i]);
    free(r->stop_copy);
    free(r->stop_tokens_copy);
    free(r->prompt);
    free(r->samples);
    free(r);
}

void nu_scheduler_free(nu_scheduler *s) {
    if (!s) return;
    for (gen_request *r = s->head, *next; r; r = next) {
        next = r->next;
        free_request(r);
    }
    free(s->batch);
    nu_context_free(s->dft);
    free(s->dbatch);
    free(s->downer);
    free(s->pbuf);
    free(s);
}

/* ---- speculation settings ------------------------------------------------ */

/* Drops the draft context and buffers: no speculation. */
static void speculation_off(nu_scheduler *s) {
    nu_context_free(s->dft);
    free(s->dbatch);
    free(s->downer);
    free(s->pbuf);
    s->dft = NULL;
    s->dbatch = NULL;
    s->downer = NULL;
    s->pbuf = NULL;
    s->nu_spec_on = false;
}

nu_status nu_scheduler_set_speculation(nu_scheduler *s, const nu_model *draft,
                                       const nu_speculative_params *sp, nu_error *err) {
    if (s->head)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "speculation can only be set up while the "
                       "scheduler has no requests");
    speculation_off(s);
    if (!sp || (!draft && !sp->lookup)) return NU_OK;
    if (sp->draft)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "give the scheduler the draft model, not a draft "
                       "context (it makes its own with the target's sizes)");
    const nu_context_params *cp = &s->ctx->params;
    nu_status st = nu_spec_params_check(sp, nu_context_model(s->ctx), draft, cp->n_batch, err);
    if (st) return st;
    int32_t n_vocab = nu_model_n_vocab(nu_context_model(s->ctx));
    s->pbuf = malloc((size_t)n_vocab * sizeof *s->pbuf);
    if (!s->pbuf) return nu_fail(err, NU_ERR_NOMEM, "out of memory for speculation");
    if (draft) {
        s->dbatch = malloc((size_t)cp->n_batch * sizeof *s->dbatch);
        s->downer = malloc((size_t)cp->n_batch * sizeof *s->downer);
        if (!s->dbatch || !s->downer) {
            speculation_off(s);
            return nu_fail(err, NU_ERR_NOMEM, "out of memory for speculation");
        }
        if ((st = nu_context_new(draft, cp, &s->dft, err))) {
            speculation_off(s);
            return st;
        }
    }
    s->sp = *sp;
    s->nu_spec_on = true;
    return NU_OK;
}

void nu_scheduler_speculative_stats(const nu_scheduler *s, nu_speculative_stats *out) {
    *out = s->stats;
}

/* ---- submitting --------------------------------------------------------- */

static nu_status copy_params(gen_request *r, const nu_generate_params *p, nu_error *err) {
    r->p = *p;
    r->stop_copy = calloc((size_t)p->n_stop + 1, sizeof *r->stop_copy);
    r->stop_tokens_copy = malloc(((size_t)p->n_stop_tokens + 1) * sizeof(int32_t));
    if (!r->stop_copy || !r->stop_tokens_copy) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < p->n_stop; i++)
        if (!(r->stop_copy[i] = strdup(p->stop[i])))
            return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    if (p->n_stop_tokens)
        memcpy(r->stop_tokens_copy, p->stop_tokens, (size_t)p->n_stop_tokens * sizeof(int32_t));
    r->p.stop = (const char *const *)r->stop_copy;
    r->p.stop_tokens = r->stop_tokens_copy;
    return NU_OK;
}

static nu_status tokenize_prompt(gen_request *r, const nu_model *m, const char *text,
                                 nu_error *err) {
    size_t len = strlen(text), n = 0, cap = len + 8;
    unsigned flags = (r->p.add_bos ? NU_TOKENIZE_ADD_BOS : 0) |
                     (r->p.parse_special ? NU_TOKENIZE_PARSE_SPECIAL : 0);
    if (!(r->prompt = malloc(cap * sizeof(int32_t))))
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for the prompt");
    nu_status st = nu_tokenize(m, text, len, flags, r->prompt, cap, &n, err);
    if (st == NU_ERR_BUFFER_SMALL) {
        int32_t *bigger = realloc(r->prompt, n * sizeof(int32_t));
        if (!bigger) return nu_fail(err, NU_ERR_NOMEM, "out of memory for the prompt");
        r->prompt = bigger;
        st = nu_tokenize(m, text, len, flags, r->prompt, n, &n, err);
    }
    r->n_prompt = (int32_t)n;
    return st;
}

static nu_status check_prompt(const nu_scheduler *s, const gen_request *r, nu_error *err) {
    int32_t n_vocab = nu_model_n_vocab(nu_context_model(s->ctx));
    if (r->n_prompt == 0)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the prompt is empty (and the model adds no BOS)");
    if (r->n_prompt >= nu_context_n_ctx(s->ctx))
        return nu_fail(err, NU_ERR_CONTEXT_FULL, "the prompt has %d tokens; the context holds %d",
                       r->n_prompt, nu_context_n_ctx(s->ctx));
    if (r->p.n > nu_context_n_seq_max(s->ctx))
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "n = %d samples, but the context has only %d "
                       "sequences",
                       r->p.n, nu_context_n_seq_max(s->ctx));
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= n_vocab)
            return nu_fail(err, NU_ERR_INVALID_ARG, "prompt token %d (%d) is not in the vocabulary",
                           i, r->prompt[i]);
    return NU_OK;
}

/* The request's draft_max against what the scheduler does; whether it speculates. */
static nu_status check_speculation(const nu_scheduler *s, gen_request *r, nu_error *err) {
    int32_t k = r->p.draft_max; /* -1..64 (nu_generate_params_check) */
    if (k > 0 && !s->nu_spec_on)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "draft_max %d asks for speculative decoding, "
                       "which this scheduler was not set up for",
                       k);
    if (k > 0 && k > s->sp.draft_max)
        return nu_fail(err, NU_ERR_INVALID_ARG, "draft_max %d is above the scheduler's %d", k,
                       s->sp.draft_max);
    /* A grammar-constrained sample does not speculate: its plain path draws
     * from the unmasked chain first, whose law differs from the masked one
     * verification would use when truncating stages run, and a draft that
     * ignores the grammar would mostly be rejected. Greedy log-probs after
     * the chain need the chain's shaped distribution, which verification
     * (a point mass when greedy) does not keep. */
    bool greedy = r->p.sampling.temperature <= 0.0f && r->p.sampling.dynatemp_range <= 0.0f;
    r->spec = s->nu_spec_on && k != -1 && !r->p.grammar &&
              !(greedy && r->p.logprobs >= 0 && r->p.logprobs_after_chain);
    return NU_OK;
}

/* What sample g needs to speculate: its text so far, a draft sampler and
 * buffers, all sized once here. */
static nu_status make_spec_sample(const nu_scheduler *s, gen_request *r, gen_sample *g,
                                  const nu_sampler_params *sampling, nu_error *err) {
    int32_t n_vocab = nu_model_n_vocab(nu_context_model(s->ctx));
    nu_spec_sample *sp = g->spec = calloc(1, sizeof *sp);
    if (!sp) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    sp->sp = s->sp;
    if (r->p.draft_max > 0) {
        sp->sp.draft_max = r->p.draft_max;
        if (sp->sp.draft_min > r->p.draft_max) sp->sp.draft_min = r->p.draft_max;
    }
    nu_spec_length_init(&sp->len, &sp->sp);
    nu_rng_seed(&sp->rng, sampling->seed ^ 0x9e3779b97f4a7c15ull); /* apart from the sampler's */
    sp->toks = malloc(((size_t)nu_context_n_ctx(s->ctx) + 1) * sizeof *sp->toks);
    sp->draft = malloc((size_t)sp->sp.draft_max * sizeof *sp->draft);
    if (s->dft) sp->q = malloc((size_t)sp->sp.draft_max * (size_t)n_vocab * sizeof *sp->q);
    if (!sp->toks || !sp->draft || (s->dft && !sp->q))
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for speculation");
    memcpy(sp->toks, r->prompt, (size_t)r->n_prompt * sizeof *sp->toks);
    sp->n_toks = r->n_prompt;
    if (!s->dft) return NU_OK;
    nu_sampler_params dp = *sampling;
    dp.seed ^= 0x5bd1e995u; /* the draft's own stream */
    nu_status st = nu_sampler_new_for_model(&dp, nu_context_model(s->ctx), &sp->ds, err);
    if (st == NU_OK) st = nu_sampler_set_think_budget(sp->ds, &r->p.think, err);
    if (st == NU_OK) nu_sampler_accept_prompt(sp->ds, r->prompt, r->n_prompt);
    return st;
}

static nu_status make_samples(const nu_scheduler *s, gen_request *r, nu_error *err) {
    const nu_model *m = nu_context_model(s->ctx);
    r->samples = calloc((size_t)r->p.n, sizeof *r->samples);
    if (!r->samples) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < r->p.n; i++) {
        gen_sample *g = &r->samples[i];
        nu_sampler_params sp = r->p.sampling;
        sp.seed += (uint64_t)i; /* each sample its own stream, reproducibly */
        /* a sampler that knows the end-of-generation tokens, for min_tokens and ignore_eos */
        nu_status st = nu_sampler_new_for_model(&sp, m, &g->sampler, err);
        if (!st) st = nu_sampler_set_think_budget(g->sampler, &r->p.think, err);
        if (st) return st;
        nu_sampler_accept_prompt(g->sampler, r->prompt, r->n_prompt);
        if (r->p.grammar &&
            (st = nu_sampler_set_grammar(g->sampler, r->p.grammar, r->p.n_predict, err)))
            return st;
        g->req = r;
        g->index = i;
        g->seq = -1;
        g->pending = -1;
        g->entry = -1;
        nu_gen_output_init(&g->out, &r->results[i], &r->p, m, i);
        r->results[i].n_prompt = r->n_prompt;
        if (r->spec && (st = make_spec_sample(s, r, g, &sp, err))) return st;
    }
    return NU_OK;
}

nu_status nu_scheduler_submit(nu_scheduler *s, const char *text, const int32_t *tokens,
                              size_t n_tokens, const nu_generate_params *params,
                              nu_generate_result *results, int32_t *id, nu_error *err) {
    nu_status st = nu_generate_params_check(params, err);
    if (st) return st;
    gen_request *r = calloc(1, sizeof *r);
    if (!r) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    r->results = results;
    st = copy_params(r, params, err);
    if (st == NU_OK && text) {
        st = tokenize_prompt(r, nu_context_model(s->ctx), text, err);
    } else if (st == NU_OK) {
        r->prompt = malloc((n_tokens + 1) * sizeof(int32_t));
        if (!r->prompt)
            st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
        else
            memcpy(r->prompt, tokens, n_tokens * sizeof(int32_t));
        r->n_prompt = (int32_t)n_tokens;
    }
    if (st == NU_OK) st = check_prompt(s, r, err);
    if (st == NU_OK) st = check_speculation(s, r, err);
    if (st == NU_OK) st = make_samples(s, r, err);
    if (st) {
        free_request(r);
        return st;
    }
    r->id = s->next_id++;
    r->t_start = nu_time_ms();
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
    if (id) *id = r->id;
    return NU_OK;
}

/* ---- sequences ---------------------------------------------------------- */

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* Free sequences (no sample owns them); the one whose cached tokens share
 * the longest prefix with the prompt comes first. */
static int32_t free_sequences(const nu_scheduler *s, const gen_request *r, int32_t *seqs,
                              int32_t *best_prefix) {
    int32_t n = 0, best = -1, best_len = -1;
    for (int32_t q = 0; q < nu_context_n_seq_max(s->ctx); q++) {
        if (s->owner[q]) continue;
        seqs[n++] = q;
        int32_t len;
        const int32_t *toks = nu_context_seq_tokens(s->ctx, q, &len);
        int32_t k = common_prefix(toks, len, r->prompt, r->n_prompt);
        if (k > best_len) best_len = k, best = n - 1;
    }
    if (best > 0) {
        int32_t t = seqs[0];
        seqs[0] = seqs[best];
        seqs[best] = t;
    }
    *best_prefix = best_len;
    return n;
}

/* The draft's cache for a starting request: the first sample's sequence
 * keeps what it already shares with the prompt (the draft's own record, as
 * it may hold more or less than the target's), the others start empty; a
 * request that does not speculate leaves the draft nothing. */
static void start_draft(nu_scheduler *s, gen_request *r) {
    int32_t len, seq0 = r->samples[0].seq;
    const int32_t *toks = nu_context_seq_tokens(s->dft, seq0, &len);
    r->dft_read = r->spec ? common_prefix(toks, len, r->prompt, r->n_prompt) : 0;
    nu_kv_seq_remove(s->dft, seq0, r->dft_read, -1);
    for (int32_t i = 1; i < r->p.n; i++) nu_kv_seq_remove(s->dft, r->samples[i].seq, 0, -1);
}

/* Gives a queued request its sequences if enough are free. */
static bool start_request(nu_scheduler *s, gen_request *r) {
    int32_t seqs[NU_MAX_SEQ], prefix;
    if (free_sequences(s, r, seqs, &prefix) < r->p.n) return false;
    /* keep the shared prefix of the first sequence (but re-read at least the
     * last prompt token, for its logits); echoed log-probs need every logit */
    int32_t keep = prefix < r->n_prompt - 1 ? prefix : r->n_prompt - 1;
    if (r->p.echo && r->p.logprobs >= 0) keep = 0;
    for (int32_t i = 0; i < r->p.n; i++) {
        gen_sample *g = &r->samples[i];
        g->seq = seqs[i];
        s->owner[g->seq] = g;
        nu_kv_seq_remove(s->ctx, g->seq, i == 0 ? keep : 0, -1);
    }
    if (s->dft) start_draft(s, r);
    r->n_read = keep;
    r->state = REQ_PREFILL;
    /* a recurrent state that went back past the kept prefix (no checkpoint
     * there) reads the positions in between again: those are not cached */
    int32_t reached = nu_kv_seq_state_pos(s->ctx, seqs[0]) + 1;
    int32_t cached = reached < keep ? reached : keep;
    for (int32_t i = 0; i < r->p.n; i++) r->results[i].n_cached = cached;
    if (r->p.echo) {
        for (int32_t i = 0; i < r->p.n; i++) {
            gen_sample *g = &r->samples[i];
            nu_gen_output_echo(&g->out, r->prompt, r->n_prompt);
            if (r->p.logprobs >= 0) nu_gen_output_prompt_logprob(&g->out, r->prompt[0], NULL);
        }
    }
    return true;
}

static void finish_sample(nu_scheduler *s, gen_sample *g, nu_finish_reason why) {
    if (g->done) return;
    g->done = true;
    g->pending = -1;
    nu_gen_output_finish(&g->out, why);
    nu_generate_result *res = g->out.res;
    res->n_generated = res->n_tokens;
    res->prompt_ms = g->req->t_prompt_done > 0 ? g->req->t_prompt_done - g->req->t_start : 0;
    res->generate_ms = g->req->t_prompt_done > 0 ? nu_time_ms() - g->req->t_prompt_done : 0;
    if (g->seq >= 0) {
        s->owner[g->seq] = NULL;
        s->last_used[g->seq] = nu_time_ms();
    }
}

static void finish_request_if_done(gen_request *r) {
    for (int32_t i = 0; i < r->p.n; i++)
        if (!r->samples[i].done) return;
    r->state = REQ_DONE;
}

/* ---- one step ----------------------------------------------------------- */

static int32_t free_cells(const nu_context *c) {
    return nu_kv_n_cells(c) - nu_kv_used(c);
}

/* Frees the cells idle sequences keep in c (the target's or the draft's
 * cache) for prefix reuse, least recent first, until `need` cells are free. */
static void evict_idle(nu_scheduler *s, nu_context *c, int32_t need) {
    while (free_cells(c) < need) {
        int32_t victim = -1;
        for (int32_t q = 0; q < nu_context_n_seq_max(c); q++) {
            bool has_cells = nu_kv_seq_pos_max(c, q) >= 0;
            if (s->owner[q] || !has_cells) continue;
            if (victim < 0 || s->last_used[q] < s->last_used[victim]) victim = q;
        }
        if (victim < 0) return;
        nu_kv_seq_remove(c, victim, 0, -1);
    }
}

static bool is_stop_token(const gen_request *r, int32_t tok) {
    for (int32_t i = 0; i < r->p.n_stop_tokens; i++)
        if (r->p.stop_tokens[i] == tok) return true;
    return false;
}

/* Whether g ends after the token it just recorded (the grammar allows
 * nothing more, it has its tokens, or the next position is past the end). */
static nu_finish_reason ends_after_token(const nu_scheduler *s, const gen_sample *g) {
    const nu_generate_params *p = &g->req->p;
    if (nu_sampler_grammar_must_end(g->sampler)) return NU_FINISH_STOP;
    if (p->n_predict >= 0 && g->out.res->n_tokens >= p->n_predict) return NU_FINISH_LENGTH;
    if (g->n_pos >= nu_context_n_ctx(s->ctx)) return NU_FINISH_CONTEXT;
    return NU_FINISH_NONE;
}

/* Records token tok (drawn from logits) for g and decides whether g goes
 * on: it then becomes g's pending token, else g finishes. */
static nu_finish_reason emit_token(nu_scheduler *s, gen_sample *g, int32_t tok,
                                   const float *logits) {
    gen_request *r = g->req;
    nu_sampler_accept(g->sampler, tok);
    nu_finish_reason why;
    if (nu_token_is_eog(nu_context_model(s->ctx), tok)) {
        why = NU_FINISH_EOS;
    } else if (is_stop_token(r, tok)) {
        why = NU_FINISH_STOP;
    } else {
        if (g->spec) g->spec->toks[g->spec->n_toks++] = tok;
        why = nu_gen_output_token(&g->out, tok, logits,
                                  r->p.logprobs_after_chain ? nu_sampler_last_candidates(g->sampler)
                                                            : NULL);
        if (why == NU_FINISH_NONE) why = ends_after_token(s, g);
    }
    if (why != NU_FINISH_NONE)
        finish_sample(s, g, why);
    else
        g->pending = tok;
    return why;
}

/* False (g finished) when g was cancelled or has all its tokens. */
static bool may_go_on(nu_scheduler *s, gen_sample *g) {
    gen_request *r = g->req;
    if (r->cancelled) {
        finish_sample(s, g, NU_FINISH_CANCELLED);
        return false;
    }
    if (r->p.n_predict >= 0 && g->out.res->n_tokens >= r->p.n_predict) {
        finish_sample(s, g, NU_FINISH_LENGTH);
        return false;
    }
    return true;
}

/* nu_spec_verify's emit: each emitted token takes the next position. */
typedef struct nu_spec_emit_ctx {
    nu_scheduler *s;
    gen_sample *g;
} nu_spec_emit_ctx;

static nu_finish_reason nu_spec_emit(void *user, int32_t tok, const float *logits) {
    nu_spec_emit_ctx *e = user;
    nu_spec_sample *sp = e->g->spec;
    e->g->n_pos = sp->pass_pos + sp->n_emitted++;
    return emit_token(e->s, e->g, tok, logits);
}

/* The end of a speculating sample's pass: the target's logits for its
 * pending token and proposals start at `entry`. Accepts or rejects the
 * proposals, emits what the rule gives, removes the rejected positions from
 * both caches and adapts the draft length. Also the first token after the
 * prompt (no proposals). */
static void nu_spec_advance(nu_scheduler *s, gen_sample *g, int32_t entry) {
    nu_spec_sample *sp = g->spec;
    int32_t first = sp->n_toks; /* toks before this pass; the pending one is at first - 1 */
    int32_t accepted = 0;
    if (may_go_on(s, g)) {
        sp->pass_pos = g->n_pos;
        sp->n_emitted = 0;
        nu_spec_emit_ctx ec = {s, g};
        nu_spec_verify_args va = {.sampler = g->sampler,
                                  .tgt = s->ctx,
                                  .first_entry = entry,
                                  .draft = sp->draft,
                                  .n_draft = sp->n_draft,
                                  .q = s->dft ? sp->q : NULL,
                                  .pbuf = s->pbuf,
                                  .n_vocab = nu_model_n_vocab(nu_context_model(s->ctx)),
                                  .rng = &sp->rng,
                                  .emit = nu_spec_emit,
                                  .user = &ec};
        nu_finish_reason why;
        accepted = nu_spec_verify(&va, &why);
        nu_spec_length_adapt(&sp->len, &sp->sp, sp->n_draft, accepted);
        s->stats.drafted += sp->n_draft;
        s->stats.accepted += accepted;
        g->out.res->n_drafted += sp->n_draft;
        g->out.res->n_accepted += accepted;
    }
    /* both caches keep the accepted proposals; the token drawn last is pending */
    if (sp->n_draft > accepted) nu_kv_seq_remove(s->ctx, g->seq, first + accepted, -1);
    if (s->dft && sp->dft_n > first + accepted) {
        nu_kv_seq_remove(s->dft, g->seq, first + accepted, -1);
        sp->dft_n = first + accepted;
    }
    /* the draft sampler's history held the proposals: tell it the text */
    if (sp->ds && sp->n_draft > 0)
        nu_spec_draft_sampler_sync(sp->ds, sp->toks, g->req->n_prompt, sp->n_toks);
    else if (sp->ds)
        for (int32_t i = first; i < sp->n_toks; i++) nu_sampler_accept(sp->ds, sp->toks[i]);
    sp->n_draft = 0;
    sp->k = 0;
}

/* Samples the next token of g from the logits of batch entry `entry` and
 * decides whether it goes on. */
static void advance_sample(nu_scheduler *s, gen_sample *g, int32_t entry) {
    if (g->spec) {
        nu_spec_advance(s, g, entry);
        return;
    }
    if (!may_go_on(s, g)) return;
    const float *logits = nu_logits(s->ctx, entry);
    emit_token(s, g, nu_sampler_sample(g->sampler, logits), logits);
}

/* Adds each generating sample's pending token, and after it the sample's
 * proposals; a sample without room in the cache ends with NU_FINISH_CONTEXT. */
static int32_t add_decode_entries(nu_scheduler *s, int32_t *n_drafts) {
    int32_t n = 0;
    *n_drafts = 0;
    for (gen_request *r = s->head; r; r = r->next) {
        if (r->state != REQ_RUNNING) continue;
        for (int32_t i = 0; i < r->p.n; i++) {
            gen_sample *g = &r->samples[i];
            if (g->done || g->pending < 0) continue;
            int32_t n_draft = g->spec ? g->spec->n_draft : 0;
            if (r->cancelled) {
                if (g->spec)
                    nu_spec_advance(s, g, -1); /* finishes it, drops its proposals */
                else
                    finish_sample(s, g, NU_FINISH_CANCELLED);
                continue;
            }
            evict_idle(s, s->ctx, n + 1 + n_draft);
            if (n + 1 + n_draft > nu_context_n_batch(s->ctx) ||
                free_cells(s->ctx) < n + 1 + n_draft) {
                if (g->spec) g->spec->n_draft = 0;
                if (n >= nu_context_n_batch(s->ctx) || free_cells(s->ctx) < n + 1) {
                    finish_sample(s, g, NU_FINISH_CONTEXT);
                    continue;
                }
                n_draft = 0;
            }
            g->entry = n;
            *n_drafts += n_draft;
            s->batch[n++] = (nu_batch_entry){g->pending, g->n_pos, g->seq, true};
            for (int32_t d = 0; d < n_draft; d++)
                s->batch[n++] = (nu_batch_entry){g->spec->draft[d], g->n_pos + 1 + d, g->seq, true};
            g->n_pos++;
            g->pending = -1;
        }
        finish_request_if_done(r);
    }
    return n;
}

/* ---- speculation: planning and drafting ----------------------------------- */

/* Whether g has a pending token and proposals planned for this step. */
static bool drafting(const gen_sample *g) {
    return g->spec && !g->done && g->pending >= 0 && g->spec->k > 0;
}

/* The most proposals g may make now: its draft length, the tokens it may
 * still generate (the pass emits one more than it accepts) and the context
 * (the last token drawn must have a position). */
static int32_t proposal_limit(const nu_scheduler *s, const gen_sample *g) {
    int32_t limit = nu_context_n_ctx(s->ctx) - g->n_pos - 2;
    const nu_generate_params *p = &g->req->p;
    if (p->n_predict >= 0 && p->n_predict - g->out.res->n_tokens - 1 < limit)
        limit = p->n_predict - g->out.res->n_tokens - 1;
    return limit;
}

/* Sets each speculating sample's k for this step: its adaptive length
 * within its limits, then within the room the batch and the cache have
 * beside every sample's pending token (first come, first served). While a
 * prompt waits, proposals take at most half of the batch room, so prompts
 * keep advancing. */
static void plan_proposals(nu_scheduler *s) {
    int32_t pending = 0, want = 0;
    bool prompts_wait = false;
    for (gen_request *r = s->head; r; r = r->next) {
        prompts_wait |= r->state == REQ_QUEUED || r->state == REQ_PREFILL;
        for (int32_t i = 0; r->state == REQ_RUNNING && i < r->p.n; i++) {
            gen_sample *g = &r->samples[i];
            if (g->done || g->pending < 0) continue;
            pending++;
            if (!g->spec) continue;
            g->spec->n_draft = 0;
            g->spec->k =
                r->cancelled ? 0 : nu_spec_length_next(&g->spec->len, proposal_limit(s, g));
            want += g->spec->k;
        }
    }
    int32_t batch_room = nu_context_n_batch(s->ctx) - pending;
    if (prompts_wait) batch_room /= 2;
    evict_idle(s, s->ctx, pending + want);
    int32_t cell_room = free_cells(s->ctx) - pending;
    for (gen_request *r = s->head; r; r = r->next) {
        for (int32_t i = 0; r->state == REQ_RUNNING && i < r->p.n; i++) {
            gen_sample *g = &r->samples[i];
            if (!drafting(g)) continue;
            nu_spec_sample *sp = g->spec;
            if (sp->k > batch_room) sp->k = batch_room;
            if (sp->k > cell_room) sp->k = cell_room;
            if (sp->k < 0) sp->k = 0;
            batch_room -= sp->k;
            cell_room -= sp->k;
        }
    }
}

/* Decodes the draft entries gathered so far; each entry with an owner
 * gives that sample its next proposal. */
static nu_status draft_flush(nu_scheduler *s, int32_t *n, nu_error *err) {
    if (*n == 0) return NU_OK;
    nu_status st = nu_decode(s->dft, s->dbatch, *n, err);
    if (st) return st;
    s->stats.draft_passes++;
    int32_t n_vocab = nu_model_n_vocab(nu_context_model(s->ctx));
    for (int32_t e = 0; e < *n; e++) {
        gen_sample *g = s->downer[e];
        if (!g) continue;
        nu_spec_sample *sp = g->spec;
        float *q = sp->q + (size_t)sp->n_draft * (size_t)n_vocab;
        sp->draft[sp->n_draft++] =
            nu_spec_propose(sp->ds, nu_logits(s->dft, e), q, n_vocab, &sp->rng);
    }
    *n = 0;
    return NU_OK;
}

/* Adds an entry to the draft batch (decoding it first when full); owner is
 * the sample whose next proposal comes from its logits, or NULL. */
static nu_status draft_add(nu_scheduler *s, int32_t *n, nu_batch_entry e, gen_sample *owner,
                           nu_error *err) {
    if (*n == nu_context_n_batch(s->dft)) {
        nu_status st = draft_flush(s, n, err);
        if (st) return st;
    }
    e.logits = owner != NULL;
    s->downer[*n] = owner;
    s->dbatch[(*n)++] = e;
    return NU_OK;
}

/* Room in the draft's cache: a sample reads what the draft has not seen of
 * its text and then k - 1 of its proposals (the last one is not read);
 * without room for that it drafts less, or not at all this step. */
static void reserve_draft_cells(nu_scheduler *s) {
    int32_t reserved = 0;
    for (gen_request *r = s->head; r; r = r->next) {
        for (int32_t i = 0; r->state == REQ_RUNNING && i < r->p.n; i++) {
            gen_sample *g = &r->samples[i];
            if (!drafting(g)) continue;
            nu_spec_sample *sp = g->spec;
            if (sp->dft_n >= sp->n_toks) { /* the last token must be read for its logits */
                sp->dft_n = sp->n_toks - 1;
                nu_kv_seq_remove(s->dft, g->seq, sp->dft_n, -1);
            }
            int32_t unread = sp->n_toks - sp->dft_n;
            evict_idle(s, s->dft, reserved + unread + sp->k - 1);
            int32_t room = free_cells(s->dft) - reserved;
            if (unread + sp->k - 1 > room) sp->k = room - unread + 1;
            if (sp->k < 1) {
                sp->k = 0;
                continue;
            }
            reserved += unread + sp->k - 1;
        }
    }
}

/* Every drafting sample's proposals from the draft model, all samples in
 * shared batches: first each one's unread text (logits for its last token),
 * then one proposal of each per batch until each has its k. */
static nu_status draft_with_model(nu_scheduler *s, nu_error *err) {
    reserve_draft_cells(s);
    int32_t n = 0;
    nu_status st = NU_OK;
    for (gen_request *r = s->head; r && st == NU_OK; r = r->next) {
        for (int32_t i = 0; r->state == REQ_RUNNING && i < r->p.n && st == NU_OK; i++) {
            gen_sample *g = &r->samples[i];
            if (!drafting(g)) continue;
            nu_spec_sample *sp = g->spec;
            for (int32_t t = sp->dft_n; t < sp->n_toks && st == NU_OK; t++)
                st = draft_add(s, &n, (nu_batch_entry){sp->toks[t], t, g->seq, false},
                               t == sp->n_toks - 1 ? g : NULL, err);
            sp->dft_n = sp->n_toks;
        }
    }
    if (st == NU_OK) st = draft_flush(s, &n, err);
    for (bool more = true; more && st == NU_OK;) {
        more = false;
        for (gen_request *r = s->head; r && st == NU_OK; r = r->next) {
            for (int32_t i = 0; r->state == REQ_RUNNING && i < r->p.n && st == NU_OK; i++) {
                gen_sample *g = &r->samples[i];
                nu_spec_sample *sp = g->spec;
                if (!drafting(g) || sp->n_draft == 0 || sp->n_draft >= sp->k) continue;
                int32_t pos = sp->n_toks + sp->n_draft - 1;
                st = draft_add(s, &n,
                               (nu_batch_entry){sp->draft[sp->n_draft - 1], pos, g->seq, false}, g,
                               err);
                sp->dft_n = pos + 1;
                more = true;
            }
        }
        if (st == NU_OK) st = draft_flush(s, &n, err);
    }
    return st;
}

/* Plans this step's proposals and makes them. */
static nu_status propose(nu_scheduler *s, nu_error *err) {
    plan_proposals(s);
    if (s->dft) return draft_with_model(s, err);
    for (gen_request *r = s->head; r; r = r->next) {
        for (int32_t i = 0; r->state == REQ_RUNNING && i < r->p.n; i++) {
            gen_sample *g = &r->samples[i];
            if (!drafting(g)) continue;
            nu_spec_sample *sp = g->spec;
            sp->n_draft = nu_spec_lookup(sp->toks, sp->n_toks, sp->k, sp->sp.lookup_ngram_min,
                                         sp->sp.lookup_ngram_max, sp->draft);
        }
    }
    return NU_OK;
}

/* The draft reads the prompts beside the target, into the first sample's
 * sequence (as far as its cache has room; a sample catches up later). */
static nu_status draft_prefill(nu_scheduler *s, nu_error *err) {
    int32_t n = 0;
    nu_status st = NU_OK;
    for (gen_request *r = s->head; r && st == NU_OK; r = r->next) {
        if (r->state != REQ_PREFILL || !r->spec || r->dft_read >= r->n_read) continue;
        int32_t want = r->n_read - r->dft_read;
        evict_idle(s, s->dft, n + want);
        int32_t room = free_cells(s->dft) - n;
        if (want > room) want = room;
        for (int32_t i = 0; i < want && st == NU_OK; i++, r->dft_read++)
            st = draft_add(
                s, &n,
                (nu_batch_entry){r->prompt[r->dft_read], r->dft_read, r->samples[0].seq, false},
                NULL, err);
    }
    return st == NU_OK ? draft_flush(s, &n, err) : st;
}

/* Adds prompt chunks of requests being read, with the room left. */
static int32_t add_prefill_entries(nu_scheduler *s, int32_t n) {
    for (gen_request *r = s->head; r && n < nu_context_n_batch(s->ctx); r = r->next) {
        if (r->state == REQ_QUEUED && !start_request(s, r)) break; /* keep arrival order */
        if (r->state != REQ_PREFILL) continue;
        r->first_entry = -1;
        r->last_entry = -1;
        evict_idle(s, s->ctx, n + (r->n_prompt - r->n_read));
        int32_t room = nu_context_n_batch(s->ctx) - n, cells = free_cells(s->ctx) - n;
        int32_t k = r->n_prompt - r->n_read;
        if (k > room) k = room;
        if (k > cells) k = cells;
        bool all_logits = r->p.echo && r->p.logprobs >= 0;
        r->first_entry = k > 0 ? n : -1;
        r->chunk_pos = r->n_read;
        for (int32_t i = 0; i < k; i++, r->n_read++) {
            bool last = r->n_read == r->n_prompt - 1;
            s->batch[n] = (nu_batch_entry){r->prompt[r->n_read], r->n_read, r->samples[0].seq,
                                           last || all_logits};
            if (last) r->last_entry = n;
            n++;
        }
    }
    return n;
}

/* The prompt of r is read: every sample starts from its last logits (and,
 * speculating with a draft model, from the prompt the draft has read). */
static void start_samples(nu_scheduler *s, gen_request *r) {
    r->t_prompt_done = nu_time_ms();
    r->state = REQ_RUNNING;
    for (int32_t i = 0; i < r->p.n; i++) {
        gen_sample *g = &r->samples[i];
        if (i > 0) nu_kv_seq_copy(s->ctx, r->samples[0].seq, g->seq, 0, -1);
        if (i > 0 && g->spec && s->dft)
            nu_kv_seq_copy(s->dft, r->samples[0].seq, g->seq, 0, r->dft_read);
        if (g->spec) g->spec->dft_n = r->dft_read;
        g->n_pos = r->n_prompt;
        advance_sample(s, g, r->last_entry);
    }
    finish_request_if_done(r);
}

/* Log-probs of the prompt tokens read in this step (echo with logprobs). */
static void record_prompt_logprobs(nu_scheduler *s, gen_request *r) {
    for (int32_t e = r->first_entry, pos = r->chunk_pos;
         e >= 0 && pos + 1 < r->n_prompt && e < s->ctx->n_last; e++, pos++) {
        const float *lg = nu_logits(s->ctx, e);
        if (!lg) break;
        for (int32_t i = 0; i < r->p.n; i++)
            nu_gen_output_prompt_logprob(&r->samples[i].out, r->prompt[pos + 1], lg);
    }
}

/* Ends every request that had entries in a batch the model refused. */
static void fail_batch(nu_scheduler *s) {
    for (gen_request *r = s->head; r; r = r->next) {
        if (r->state != REQ_RUNNING && r->state != REQ_PREFILL) continue;
        for (int32_t i = 0; i < r->p.n; i++) finish_sample(s, &r->samples[i], NU_FINISH_CANCELLED);
        r->state = REQ_DONE;
    }
}

/* Drops finished requests from the list (their results stay with the caller). */
static void reap(nu_scheduler *s) {
    gen_request **pp = &s->head;
    s->tail = NULL;
    while (*pp) {
        gen_request *r = *pp;
        if (r->state == REQ_DONE) {
            *pp = r->next;
            free_request(r);
        } else {
            s->tail = r;
            pp = &r->next;
        }
    }
}

nu_status nu_scheduler_step(nu_scheduler *s, bool *active, nu_error *err) {
    nu_status st = s->nu_spec_on ? propose(s, err) : NU_OK;
    int32_t n = 0, n_drafts = 0;
    if (st == NU_OK) {
        n = add_prefill_entries(s, add_decode_entries(s, &n_drafts));
        if (s->dft) st = draft_prefill(s, err);
    }
    if (st == NU_OK && n > 0) st = nu_decode(s->ctx, s->batch, n, err);
    if (st) {
        fail_batch(s);
        reap(s);
        *active = s->head != NULL;
        return st;
    }
    if (n_drafts > 0) s->stats.target_passes++;
    for (gen_request *r = s->head; r; r = r->next) {
        if (r->state == REQ_RUNNING) {
            for (int32_t i = 0; i < r->p.n; i++) {
                gen_sample *g = &r->samples[i];
                if (!g->done && g->pending < 0 && g->entry >= 0 && n > 0)
                    advance_sample(s, g, g->entry);
                g->entry = -1;
            }
            finish_request_if_done(r);
        } else if (r->state == REQ_PREFILL && r->first_entry >= 0) {
            if (r->p.echo && r->p.logprobs >= 0) record_prompt_logprobs(s, r);
            if (r->last_entry >= 0) start_samples(s, r);
        } else if (r->state == REQ_PREFILL && r->cancelled) {
            for (int32_t i = 0; i < r->p.n; i++)
                finish_sample(s, &r->samples[i], NU_FINISH_CANCELLED);
            r->state = REQ_DONE;
        }
    }
    reap(s);
    *active = s->head != NULL;
    if (n == 0 && s->head && s->head->state == REQ_PREFILL) {
        /* nothing could run: the prompt does not fit beside what is cached */
        gen_request *r = s->head;
        for (int32_t i = 0; i < r->p.n; i++) finish_sample(s, &r->samples[i], NU_FINISH_CONTEXT);
        r->state = REQ_DONE;
        reap(s);
        *active = s->head != NULL;
    }
    return NU_OK;
}

nu_status nu_scheduler_run(nu_scheduler *s, nu_error *err) {
    bool active = s->head != NULL;
    while (active) {
        nu_status st = nu_scheduler_step(s, &active, err);
        if (st) return st;
    }
    return NU_OK;
}

static gen_request *find(const nu_scheduler *s, int32_t id) {
    for (gen_request *r = s->head; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

bool nu_scheduler_is_done(const nu_scheduler *s, int32_t id) {
    return find(s, id) == NULL;
}

void nu_scheduler_cancel(nu_scheduler *s, int32_t id) {
    gen_request *r = find(s, id);
    if (!r) return;
    r->cancelled = true;
    if (r->state == REQ_QUEUED) {
        for (int32_t i = 0; i < r->p.n; i++) finish_sample(s, &r->samples[i], NU_FINISH_CANCELLED);
        r->state = REQ_DONE;
        reap(s);
    }
}

int32_t nu_scheduler_queued(const nu_scheduler *s) {
    int32_t n = 0;
    for (gen_request *r = s->head; r; r = r->next) n += r->state == REQ_QUEUED;
    return n;
}

int32_t nu_scheduler_running(const nu_scheduler *s) {
    int32_t n = 0;
    for (gen_request *r = s->head; r; r = r->next)
        for (int32_t i = 0; r->state != REQ_QUEUED && i < r->p.n; i++) n += !r->samples[i].done;
    return n;
}
