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
 * batch, a sample's tokens do not depend on its neighbours. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "error.h"
#include "gen_output.h"

typedef enum req_state { REQ_QUEUED, REQ_PREFILL, REQ_RUNNING, REQ_DONE } req_state;

typedef struct gen_sample {
    struct gen_request *req;
    int32_t index;
    int32_t seq;          /* KV sequence */
    nu_sampler *sampler;
    gen_output out;
    int32_t n_pos;        /* next position */
    int32_t pending;      /* sampled, not yet decoded; -1 when none */
    int32_t entry;        /* entry of the current batch that carries `pending` */
    bool done;
} gen_sample;

typedef struct gen_request {
    int32_t id;
    req_state state;
    nu_generate_params p;  /* with stop and stop_tokens pointing at copies below */
    char **stop_copy;
    int32_t *stop_tokens_copy;
    int32_t *prompt;
    int32_t n_prompt;
    int32_t n_read;        /* prompt tokens in the cache */
    int32_t last_entry;    /* entry of the prompt's last token in this step's batch */
    int32_t first_entry;   /* entry of the first prompt token of this step's chunk */
    int32_t chunk_pos;     /* position of that first token */
    bool cancelled;
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
};

nu_status nu_scheduler_new(nu_context *ctx, nu_scheduler **out, nu_error *err) {
    nu_scheduler *s = calloc(1, sizeof *s);
    if (s) s->batch = malloc((size_t)ctx->params.n_batch * sizeof *s->batch);
    if (!s || !s->batch) {
        free(s);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for a scheduler");
    }
    s->ctx = ctx;
    *out = s;
    return NU_OK;
}

static void free_request(gen_request *r) {
    for (int32_t i = 0; r->samples && i < r->p.n; i++) nu_sampler_free(r->samples[i].sampler);
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
    free(s);
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
    int32_t n_vocab = nu_model_n_vocab(s->ctx->model);
    if (r->n_prompt == 0)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the prompt is empty (and the model adds no BOS)");
    if (r->n_prompt >= s->ctx->params.n_ctx)
        return nu_fail(err, NU_ERR_CONTEXT_FULL, "the prompt has %d tokens; the context holds %d",
                       r->n_prompt, s->ctx->params.n_ctx);
    if (r->p.n > s->ctx->params.n_seq_max)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n = %d samples, but the context has only %d "
                       "sequences", r->p.n, s->ctx->params.n_seq_max);
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= n_vocab)
            return nu_fail(err, NU_ERR_INVALID_ARG, "prompt token %d (%d) is not in the vocabulary",
                           i, r->prompt[i]);
    return NU_OK;
}

static nu_status make_samples(gen_request *r, const nu_model *m, nu_error *err) {
    r->samples = calloc((size_t)r->p.n, sizeof *r->samples);
    if (!r->samples) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < r->p.n; i++) {
        gen_sample *g = &r->samples[i];
        nu_sampler_params sp = r->p.sampling;
        sp.seed += (uint64_t)i; /* each sample its own stream, reproducibly */
        /* a sampler that knows the end-of-generation tokens, for min_tokens and ignore_eos */
        nu_status st = nu_sampler_new_for_model(&sp, m, &g->sampler, err);
        if (st) return st;
        nu_sampler_accept_prompt(g->sampler, r->prompt, r->n_prompt);
        if (r->p.grammar && (st = nu_sampler_set_grammar(g->sampler, r->p.grammar, r->p.n_predict,
                                                         err)))
            return st;
        g->req = r;
        g->index = i;
        g->seq = -1;
        g->pending = -1;
        g->entry = -1;
        gen_output_init(&g->out, &r->results[i], &r->p, m, i);
        r->results[i].n_prompt = r->n_prompt;
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
        st = tokenize_prompt(r, s->ctx->model, text, err);
    } else if (st == NU_OK) {
        r->prompt = malloc((n_tokens + 1) * sizeof(int32_t));
        if (!r->prompt) st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
        else memcpy(r->prompt, tokens, n_tokens * sizeof(int32_t));
        r->n_prompt = (int32_t)n_tokens;
    }
    if (st == NU_OK) st = check_prompt(s, r, err);
    if (st == NU_OK) st = make_samples(r, s->ctx->model, err);
    if (st) {
        free_request(r);
        return st;
    }
    r->id = s->next_id++;
    r->t_start = nu_time_ms();
    if (s->tail) s->tail->next = r;
    else s->head = r;
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
    for (int32_t q = 0; q < s->ctx->params.n_seq_max; q++) {
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
    r->n_read = keep;
    r->state = REQ_PREFILL;
    for (int32_t i = 0; i < r->p.n; i++) r->results[i].n_cached = keep;
    if (r->p.echo) {
        for (int32_t i = 0; i < r->p.n; i++) {
            gen_sample *g = &r->samples[i];
            gen_output_echo(&g->out, r->prompt, r->n_prompt);
            if (r->p.logprobs >= 0) gen_output_prompt_logprob(&g->out, r->prompt[0], NULL);
        }
    }
    return true;
}

static void finish_sample(nu_scheduler *s, gen_sample *g, nu_finish_reason why) {
    if (g->done) return;
    g->done = true;
    g->pending = -1;
    gen_output_finish(&g->out, why);
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

static int32_t free_cells(const nu_scheduler *s) {
    return s->ctx->kv.n_cells - s->ctx->kv.used;
}

/* Frees the cells idle sequences keep for prefix reuse, least recent first,
 * until `need` cells are free. */
static void evict_idle(nu_scheduler *s, int32_t need) {
    while (free_cells(s) < need) {
        int32_t victim = -1;
        for (int32_t q = 0; q < s->ctx->params.n_seq_max; q++) {
            int32_t len;
            nu_context_seq_tokens(s->ctx, q, &len);
            bool has_cells = nu_kv_seq_pos_max(s->ctx, q) >= 0;
            if (s->owner[q] || !has_cells) continue;
            if (victim < 0 || s->last_used[q] < s->last_used[victim]) victim = q;
        }
        if (victim < 0) return;
        nu_kv_seq_remove(s->ctx, victim, 0, -1);
    }
}

static bool is_stop_token(const gen_request *r, int32_t tok) {
    for (int32_t i = 0; i < r->p.n_stop_tokens; i++)
        if (r->p.stop_tokens[i] == tok) return true;
    return false;
}

/* Samples the next token of g from logits and decides whether it goes on. */
static void advance_sample(nu_scheduler *s, gen_sample *g, const float *logits) {
    const nu_model *m = s->ctx->model;
    gen_request *r = g->req;
    if (r->cancelled) {
        finish_sample(s, g, NU_FINISH_CANCELLED);
        return;
    }
    if (r->p.n_predict >= 0 && g->out.res->n_tokens >= r->p.n_predict) {
        finish_sample(s, g, NU_FINISH_LENGTH);
        return;
    }
    int32_t tok = nu_sampler_sample(g->sampler, logits);
    nu_sampler_accept(g->sampler, tok);
    if (nu_token_is_eog(m, tok)) {
        finish_sample(s, g, NU_FINISH_EOS);
        return;
    }
    if (is_stop_token(r, tok)) {
        finish_sample(s, g, NU_FINISH_STOP);
        return;
    }
    nu_finish_reason why = gen_output_token(&g->out, tok, logits,
                                            r->p.logprobs_after_chain
                                                ? nu_sampler_last_candidates(g->sampler) : NULL);
    if (why != NU_FINISH_NONE) finish_sample(s, g, why);
    else if (nu_sampler_grammar_must_end(g->sampler)) finish_sample(s, g, NU_FINISH_STOP);
    else if (r->p.n_predict >= 0 && g->out.res->n_tokens >= r->p.n_predict)
        finish_sample(s, g, NU_FINISH_LENGTH);
    else if (g->n_pos >= s->ctx->params.n_ctx) finish_sample(s, g, NU_FINISH_CONTEXT);
    else g->pending = tok;
}

/* Adds each generating sample's pending token; a sample without room in the
 * cache ends with NU_FINISH_CONTEXT. */
static int32_t add_decode_entries(nu_scheduler *s) {
    int32_t n = 0;
    for (gen_request *r = s->head; r; r = r->next) {
        if (r->state != REQ_RUNNING) continue;
        for (int32_t i = 0; i < r->p.n; i++) {
            gen_sample *g = &r->samples[i];
            if (g->done || g->pending < 0) continue;
            if (r->cancelled) {
                finish_sample(s, g, NU_FINISH_CANCELLED);
                continue;
            }
            evict_idle(s, n + 1);
            if (n >= s->ctx->params.n_batch || free_cells(s) < n + 1) {
                finish_sample(s, g, NU_FINISH_CONTEXT);
                continue;
            }
            g->entry = n;
            s->batch[n++] = (nu_batch_entry){g->pending, g->n_pos++, g->seq, true};
            g->pending = -1;
        }
        finish_request_if_done(r);
    }
    return n;
}

/* Adds prompt chunks of requests being read, with the room left. */
static int32_t add_prefill_entries(nu_scheduler *s, int32_t n) {
    for (gen_request *r = s->head; r && n < s->ctx->params.n_batch; r = r->next) {
        if (r->state == REQ_QUEUED && !start_request(s, r)) break; /* keep arrival order */
        if (r->state != REQ_PREFILL) continue;
        r->first_entry = -1;
        r->last_entry = -1;
        evict_idle(s, n + (r->n_prompt - r->n_read));
        int32_t room = s->ctx->params.n_batch - n, cells = free_cells(s) - n;
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

/* The prompt of r is read: every sample starts from its last logits. */
static void start_samples(nu_scheduler *s, gen_request *r) {
    const float *logits = nu_logits(s->ctx, r->last_entry);
    r->t_prompt_done = nu_time_ms();
    r->state = REQ_RUNNING;
    for (int32_t i = 0; i < r->p.n; i++) {
        gen_sample *g = &r->samples[i];
        if (i > 0) nu_kv_seq_copy(s->ctx, r->samples[0].seq, g->seq, 0, -1);
        g->n_pos = r->n_prompt;
        advance_sample(s, g, logits);
    }
    finish_request_if_done(r);
}

/* Log-probs of the prompt tokens read in this step (echo with logprobs). */
static void record_prompt_logprobs(nu_scheduler *s, gen_request *r) {
    for (int32_t e = r->first_entry, pos = r->chunk_pos; e >= 0 && pos + 1 < r->n_prompt &&
                                                       e < s->ctx->n_last; e++, pos++) {
        const float *lg = nu_logits(s->ctx, e);
        if (!lg) break;
        for (int32_t i = 0; i < r->p.n; i++)
            gen_output_prompt_logprob(&r->samples[i].out, r->prompt[pos + 1], lg);
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
    int32_t n = add_prefill_entries(s, add_decode_entries(s));
    if (n > 0) {
        nu_status st = nu_decode(s->ctx, s->batch, n, err);
        if (st) {
            fail_batch(s);
            reap(s);
            *active = s->head != NULL;
            return st;
        }
    }
    for (gen_request *r = s->head; r; r = r->next) {
        if (r->state == REQ_RUNNING) {
            for (int32_t i = 0; i < r->p.n; i++) {
                gen_sample *g = &r->samples[i];
                if (!g->done && g->pending < 0 && g->entry >= 0 && n > 0)
                    advance_sample(s, g, nu_logits(s->ctx, g->entry));
                g->entry = -1;
            }
            finish_request_if_done(r);
        } else if (r->state == REQ_PREFILL && r->first_entry >= 0) {
            if (r->p.echo && r->p.logprobs >= 0) record_prompt_logprobs(s, r);
            if (r->last_entry >= 0) start_samples(s, r);
        } else if (r->state == REQ_PREFILL && r->cancelled) {
            for (int32_t i = 0; i < r->p.n; i++) finish_sample(s, &r->samples[i], NU_FINISH_CANCELLED);
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
