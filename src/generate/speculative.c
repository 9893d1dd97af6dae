/* speculative.c - speculative decoding: a cheap guesser proposes K tokens,
 * the target model scores all K + 1 positions in one batched pass, and a
 * rejection rule keeps exactly the target's distribution.
 *
 * With q the guesser's distribution and p the target's (both after the
 * sampler chain, so sampling settings mean what they mean without
 * speculation), draft token x_i is accepted with probability
 * min(1, p_i(x_i) / q_i(x_i)); at the first rejection a token is drawn from
 * the normalised residual max(0, p_i - q_i), and when all K are accepted one
 * more token is drawn from p_{K+1} (Leviathan et al. 2023; Chen et al.
 * 2023). Every emitted token is then distributed as under plain sampling.
 * Greedy decoding reduces to "accept while the target's argmax agrees".
 *
 * Guessers: a draft model with the same vocabulary, or prompt lookup, which
 * proposes the tokens that followed the latest earlier occurrence of the
 * text's last n-gram (q is then a point mass on each proposal). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "speculative.h"

#include "nucleus.h"
#include "error.h"
#include "gen_output.h"

nu_speculative_params nu_speculative_default_params(void) {
    nu_speculative_params p = {.draft = NULL,
                               .lookup = false,
                               .draft_max = 8,
                               .draft_min = 1,
                               .adaptive = true,
                               .lookup_ngram_max = 4,
                               .lookup_ngram_min = 1};
    return p;
}

nu_status nu_draft_check(const nu_model *target, const nu_model *draft, nu_error *err) {
    int32_t nt = nu_model_n_vocab(target), nd = nu_model_n_vocab(draft);
    if (nt != nd)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "the draft model's vocabulary has %d tokens, the "
                       "target's %d: a draft must share the target's vocabulary",
                       nd, nt);
    for (int32_t i = 0; i < nt; i++) {
        const char *a = nu_token_text(target, i), *b = nu_token_text(draft, i);
        if (strcmp(a ? a : "", b ? b : "") != 0)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "token %d is '%s' in the target but '%s' in "
                           "the draft: the vocabularies differ",
                           i, a ? a : "", b ? b : "");
    }
    if (nu_token_bos(target) != nu_token_bos(draft) || nu_token_eos(target) != nu_token_eos(draft))
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "the draft and target models have different "
                       "BOS/EOS tokens");
    return NU_OK;
}

/* ---- shared with the scheduler (speculative.h) ---------------------------- */

nu_status nu_spec_params_check(const nu_speculative_params *sp, const nu_model *target,
                               const nu_model *draft, int32_t n_batch, nu_error *err) {
    if (!draft && !sp->lookup)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "speculative decoding needs a draft model or lookup");
    if (sp->draft_min < 1 || sp->draft_max < sp->draft_min || sp->draft_max > 64 ||
        sp->draft_max + 1 > n_batch)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "draft length %d..%d is out of range (1..64, and "
                       "below the batch size %d)",
                       sp->draft_min, sp->draft_max, n_batch);
    if (sp->lookup && (sp->lookup_ngram_min < 1 || sp->lookup_ngram_max < sp->lookup_ngram_min ||
                       sp->lookup_ngram_max > 16))
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "lookup n-gram sizes %d..%d are out of range (1..16)", sp->lookup_ngram_min,
                       sp->lookup_ngram_max);
    return draft ? nu_draft_check(target, draft, err) : NU_OK;
}

void nu_spec_length_init(nu_spec_length *l, const nu_speculative_params *sp) {
    l->k = sp->adaptive ? (sp->draft_min + sp->draft_max) / 2 : sp->draft_max;
    l->pause = 0;
    l->misses = 0;
}

int32_t nu_spec_length_next(nu_spec_length *l, int32_t limit) {
    int32_t k = l->k < limit ? l->k : limit;
    if (k < 0) k = 0;
    if (l->pause > 0) {
        l->pause--;
        k = 0;
    }
    return k;
}

/* Longer after a fully accepted pass, shorter when less than half was
 * accepted. */
void nu_spec_length_adapt(nu_spec_length *l, const nu_speculative_params *sp, int32_t proposed,
                          int32_t accepted) {
    if (!sp->adaptive || proposed == 0) return;
    if (accepted == proposed && l->k < sp->draft_max)
        l->k++;
    else if (2 * accepted < proposed && l->k > sp->draft_min)
        l->k--;
    /* When even the shortest draft keeps failing, the guesser only costs
     * time: stop drafting for 2, 4, 8, ... 256 passes, then try again. */
    if (accepted > 0) {
        l->misses = 0;
    } else if (l->k == sp->draft_min) {
        l->misses = l->misses < 8 ? l->misses + 1 : 8;
        l->pause = 1 << l->misses;
    }
}

void nu_spec_dense(const nu_candidates *c, float *out, int32_t n_vocab) {
    memset(out, 0, (size_t)n_vocab * sizeof *out);
    for (size_t i = 0; i < c->size; i++) out[c->data[i].id] += c->data[i].prob;
}

int32_t nu_spec_draw(const float *d, int32_t n, nu_rng *rng) {
    double total = 0;
    for (int32_t i = 0; i < n; i++) total += d[i];
    double u = nu_rng_uniform(rng) * total, cum = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (d[i] <= 0) continue;
        cum += d[i];
        last = i;
        if (u < cum) return i;
    }
    return last;
}

int32_t nu_spec_propose(nu_sampler *ds, const float *logits, float *q, int32_t n_vocab,
                        nu_rng *rng) {
    nu_spec_dense(nu_sampler_distribution(ds, logits), q, n_vocab);
    int32_t tok = nu_spec_draw(q, n_vocab, rng);
    nu_sampler_accept(ds, tok);
    return tok;
}

int32_t nu_spec_lookup(const int32_t *t, int32_t n, int32_t k, int32_t ngram_min, int32_t ngram_max,
                       int32_t *out) {
    for (int32_t g = ngram_max; g >= ngram_min; g--) {
        if (g > n - 1) continue;
        for (int32_t start = n - g - 1; start >= 0; start--) {
            if (memcmp(t + start, t + n - g, (size_t)g * sizeof *t) != 0) continue;
            int32_t m = 0;
            while (m < k && start + g + m < n) {
                out[m] = t[start + g + m];
                m++;
            }
            if (m > 0) return m;
        }
    }
    return 0;
}

void nu_spec_draft_sampler_sync(nu_sampler *ds, const int32_t *toks, int32_t n_prompt, int32_t n) {
    nu_sampler_reset(ds);
    nu_sampler_accept_prompt(ds, toks, n_prompt);
    for (int32_t i = n_prompt; i < n; i++) nu_sampler_accept(ds, toks[i]);
}

int32_t nu_spec_verify(const nu_spec_verify_args *a, nu_finish_reason *why) {
    int32_t accepted = 0, nv = a->n_vocab;
    float *p = a->pbuf;
    *why = NU_FINISH_NONE;
    for (int32_t i = 0; i <= a->n_draft; i++) {
        const float *logits = nu_logits(a->tgt, a->first_entry + i);
        nu_spec_dense(nu_sampler_distribution(a->sampler, logits), p, nv);
        if (i == a->n_draft) { /* all accepted: one more from the target */
            *why = a->emit(a->user, nu_spec_draw(p, nv, a->rng), logits);
            return accepted;
        }
        int32_t x = a->draft[i];
        const float *q = a->q ? a->q + (size_t)i * nv : NULL;
        float px = p[x], qx = q ? q[x] : 1.0f;
        if (px >= qx || nu_rng_uniform(a->rng) < (double)px / qx) {
            accepted++;
            if ((*why = a->emit(a->user, x, logits)) != NU_FINISH_NONE) return accepted;
            continue;
        }
        /* rejected: draw from the residual max(0, p - q) */
        for (int32_t v = 0; v < nv; v++) {
            float qv = q ? q[v] : (v == x ? 1.0f : 0.0f);
            p[v] = p[v] > qv ? p[v] - qv : 0.0f;
        }
        *why = a->emit(a->user, nu_spec_draw(p, nv, a->rng), logits);
        return accepted;
    }
    return accepted;
}

/* ---- one speculative generation ------------------------------------------ */

/* Everything one speculative generation keeps. */
typedef struct nu_spec_state {
    nu_context *tgt, *dft;
    const nu_generate_params *p;
    const nu_speculative_params *sp;
    nu_sampler *ts, *ds; /* target and draft samplers */
    nu_rng rng;          /* acceptance draws */
    int32_t *toks;       /* prompt + generated */
    int32_t n_toks, n_prompt, cap;
    int32_t tgt_cached, dft_cached; /* positions in each cache */
    int32_t *draft;                 /* this pass's proposals */
    float *q;                       /* [draft_max][n_vocab] draft distributions (dense) */
    float *pbuf;                    /* [n_vocab] target distribution (dense) */
    nu_batch_entry *batch;
    nu_spec_length len; /* adaptive draft length */
    gen_output out;
    nu_speculative_stats *stats;
    int32_t n_vocab;
} nu_spec_state;

/* Decodes toks[from, to) into a cache (seq 0), logits for the last one. */
static nu_status catch_up(nu_context *ctx, nu_spec_state *s, int32_t from, int32_t to,
                          int32_t *last_entry, nu_error *err) {
    *last_entry = -1;
    int32_t nb = nu_context_n_batch(ctx);
    for (int32_t start = from; start < to; start += nb) {
        int32_t k = to - start < nb ? to - start : nb;
        for (int32_t i = 0; i < k; i++)
            s->batch[i] = (nu_batch_entry){s->toks[start + i], start + i, 0, start + i == to - 1};
        nu_status st = nu_decode(ctx, s->batch, k, err);
        if (st) return st;
        *last_entry = k - 1;
    }
    return NU_OK;
}

/* The draft model proposes k tokens, keeping each distribution. */
static nu_status propose_with_model(nu_spec_state *s, int32_t k, nu_error *err) {
    int32_t entry = 0;
    nu_status st = catch_up(s->dft, s, s->dft_cached, s->n_toks, &entry, err);
    if (st) return st;
    s->dft_cached = s->n_toks;
    for (int32_t n = 0; n < k; n++) {
        float *q = s->q + (size_t)n * s->n_vocab;
        s->draft[n] = nu_spec_propose(s->ds, nu_logits(s->dft, entry), q, s->n_vocab, &s->rng);
        s->stats->draft_passes++;
        if (n + 1 == k) break;
        nu_batch_entry e = {s->draft[n], s->n_toks + n, 0, true};
        if ((st = nu_decode(s->dft, &e, 1, err))) return st;
        s->dft_cached++;
        entry = 0;
    }
    return NU_OK;
}

/* Rolls a cache back to `keep` positions. */
static void rollback(nu_context *ctx, int32_t *cached, int32_t keep) {
    if (*cached > keep) {
        nu_kv_seq_remove(ctx, 0, keep, -1);
        *cached = keep;
    }
}

/* Appends an emitted token (nu_spec_emit_fn); returns a finish reason or NU_FINISH_NONE. */
static nu_finish_reason emit(void *user, int32_t tok, const float *logits) {
    nu_spec_state *s = user;
    const nu_model *m = nu_context_model(s->tgt);
    nu_sampler_accept(s->ts, tok);
    if (nu_token_is_eog(m, tok)) return NU_FINISH_EOS;
    for (int32_t i = 0; i < s->p->n_stop_tokens; i++)
        if (s->p->stop_tokens[i] == tok) return NU_FINISH_STOP;
    s->toks[s->n_toks++] = tok;
    nu_finish_reason why =
        nu_gen_output_token(&s->out, tok, logits, nu_sampler_last_candidates(s->ts));
    if (why != NU_FINISH_NONE) return why;
    if (s->p->n_predict >= 0 && s->out.res->n_tokens >= s->p->n_predict) return NU_FINISH_LENGTH;
    if (s->n_toks >= nu_context_n_ctx(s->tgt)) return NU_FINISH_CONTEXT;
    if (nu_sampler_grammar_must_end(s->ts)) return NU_FINISH_STOP;
    return NU_FINISH_NONE;
}

/* One pass: propose, verify in one target batch, roll back what was rejected. */
static nu_status pass(nu_spec_state *s, nu_finish_reason *why, nu_error *err) {
    int32_t limit = nu_context_n_ctx(s->tgt) - s->n_toks - 1, n_draft = 0;
    if (s->p->n_predict >= 0 && s->p->n_predict - s->out.res->n_tokens - 1 < limit)
        limit = s->p->n_predict - s->out.res->n_tokens - 1;
    int32_t k = nu_spec_length_next(&s->len, limit);
    nu_status st = NU_OK;
    if (k > 0 && s->sp->draft) {
        st = propose_with_model(s, k, err);
        n_draft = k;
    } else if (k > 0) {
        n_draft = nu_spec_lookup(s->toks, s->n_toks, k, s->sp->lookup_ngram_min,
                                 s->sp->lookup_ngram_max, s->draft);
    }
    if (st) return st;
    /* the target reads what it has not seen but the last token, then the
     * last token and the proposals in one batch */
    int32_t unused;
    if ((st = catch_up(s->tgt, s, s->tgt_cached, s->n_toks - 1, &unused, err))) return st;
    int32_t n = 0, pos = s->n_toks - 1;
    s->batch[n++] = (nu_batch_entry){s->toks[pos], pos, 0, true};
    for (int32_t i = 0; i < n_draft; i++)
        s->batch[n++] = (nu_batch_entry){s->draft[i], pos + 1 + i, 0, true};
    if ((st = nu_decode(s->tgt, s->batch, n, err))) return st;
    s->stats->target_passes++;
    s->stats->drafted += n_draft;
    int32_t before = s->n_toks;
    nu_spec_verify_args va = {.sampler = s->ts,
                              .tgt = s->tgt,
                              .first_entry = 0,
                              .draft = s->draft,
                              .n_draft = n_draft,
                              .q = s->sp->draft ? s->q : NULL,
                              .pbuf = s->pbuf,
                              .n_vocab = s->n_vocab,
                              .rng = &s->rng,
                              .emit = emit,
                              .user = s};
    int32_t accepted = nu_spec_verify(&va, why);
    s->stats->accepted += accepted;
    /* caches keep the accepted proposals; the token drawn last is not read yet */
    s->tgt_cached = before + n_draft;
    rollback(s->tgt, &s->tgt_cached, before + accepted);
    if (s->sp->draft) {
        rollback(s->dft, &s->dft_cached, before + accepted);
        nu_spec_draft_sampler_sync(s->ds, s->toks, s->n_prompt, s->n_toks);
    }
    nu_spec_length_adapt(&s->len, s->sp, n_draft, accepted);
    return NU_OK;
}

static nu_status check_params(const nu_context *tgt, const nu_generate_params *p,
                              const nu_speculative_params *sp, nu_error *err) {
    nu_status st = nu_generate_params_check(p, err);
    if (st) return st;
    if (p->n != 1)
        return nu_fail(err, NU_ERR_INVALID_ARG, "speculative decoding makes one sample (n = %d)",
                       p->n);
    return nu_spec_params_check(sp, nu_context_model(tgt),
                                sp->draft ? nu_context_model(sp->draft) : NULL,
                                nu_context_n_batch(tgt), err);
}

static nu_status setup(nu_spec_state *s, const char *prompt, nu_error *err) {
    const nu_model *m = nu_context_model(s->tgt);
    size_t len = strlen(prompt), n = 0;
    s->n_vocab = nu_model_n_vocab(m);
    s->cap = nu_context_n_ctx(s->tgt) + 1;
    if ((size_t)s->cap < len + 8) s->cap = (int32_t)len + 8;
    s->toks = malloc((size_t)s->cap * sizeof *s->toks);
    s->draft = malloc((size_t)s->sp->draft_max * sizeof *s->draft);
    s->q = malloc((size_t)s->sp->draft_max * s->n_vocab * sizeof *s->q);
    s->pbuf = malloc((size_t)s->n_vocab * sizeof *s->pbuf);
    s->batch = malloc((size_t)nu_context_n_batch(s->tgt) * sizeof *s->batch);
    if (!s->toks || !s->draft || !s->q || !s->pbuf || !s->batch)
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for speculative decoding");
    unsigned flags = (s->p->add_bos ? NU_TOKENIZE_ADD_BOS : 0) |
                     (s->p->parse_special ? NU_TOKENIZE_PARSE_SPECIAL : 0);
    nu_status st = nu_tokenize(m, prompt, len, flags, s->toks, (size_t)s->cap, &n, err);
    if (st) return st;
    if (n == 0 || n >= (size_t)nu_context_n_ctx(s->tgt))
        return nu_fail(err, NU_ERR_CONTEXT_FULL, "the prompt has %zu tokens; the context holds %d",
                       n, nu_context_n_ctx(s->tgt));
    if (s->sp->draft && n >= (size_t)nu_context_n_ctx(s->sp->draft))
        return nu_fail(err, NU_ERR_CONTEXT_FULL, "the prompt does not fit the draft's context");
    s->n_toks = s->n_prompt = (int32_t)n;
    nu_sampler_params dp = s->p->sampling;
    dp.seed ^= 0x5bd1e995u; /* the draft's own stream */
    if ((st = nu_sampler_new_for_model(&s->p->sampling, m, &s->ts, err))) return st;
    if (s->sp->draft && (st = nu_sampler_new_for_model(&dp, m, &s->ds, err))) return st;
    if ((st = nu_sampler_set_think_budget(s->ts, &s->p->think, err)) ||
        (s->ds && (st = nu_sampler_set_think_budget(s->ds, &s->p->think, err))))
        return st;
    nu_sampler_accept_prompt(s->ts, s->toks, s->n_prompt);
    if (s->p->grammar && (st = nu_sampler_set_grammar(s->ts, s->p->grammar, s->p->n_predict, err)))
        return st;
    if (s->ds) nu_sampler_accept_prompt(s->ds, s->toks, s->n_prompt);
    nu_rng_seed(&s->rng, s->p->sampling.seed);
    nu_spec_length_init(&s->len, s->sp);
    nu_kv_seq_remove(s->tgt, 0, 0, -1);
    if (s->sp->draft) nu_kv_seq_remove(s->sp->draft, 0, 0, -1);
    return NU_OK;
}

static void teardown(nu_spec_state *s) {
    nu_sampler_free(s->ts);
    nu_sampler_free(s->ds);
    free(s->toks);
    free(s->draft);
    free(s->q);
    free(s->pbuf);
    free(s->batch);
}

nu_status nu_generate_speculative(nu_context *target, const char *prompt,
                                  const nu_generate_params *params, const nu_speculative_params *sp,
                                  nu_generate_result *result, nu_speculative_stats *stats,
                                  nu_error *err) {
    nu_speculative_stats local = {0};
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    nu_status st = check_params(target, params, sp, err);
    if (st) return st;
    /* the request's own draft_max: -1 no speculation, K > 0 at most K per pass */
    nu_speculative_params capped;
    if (params->draft_max == -1) return nu_generate(target, prompt, params, result, err);
    if (params->draft_max > sp->draft_max)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "draft_max %d is above the speculative parameters' draft_max %d",
                       params->draft_max, sp->draft_max);
    if (params->draft_max > 0) {
        capped = *sp;
        capped.draft_max = params->draft_max;
        if (capped.draft_min > capped.draft_max) capped.draft_min = capped.draft_max;
        sp = &capped;
    }
    nu_spec_state s = {.tgt = target, .dft = sp->draft, .p = params, .sp = sp, .stats = stats};
    double t0 = nu_time_ms();
    if ((st = setup(&s, prompt, err)) == NU_OK) {
        nu_gen_output_init(&s.out, result, params, nu_context_model(target), 0);
        result->n_prompt = s.n_prompt;
        if (params->echo) nu_gen_output_echo(&s.out, s.toks, s.n_prompt);
        int32_t unused;
        st = catch_up(target, &s, 0, s.n_prompt - 1, &unused, err);
        s.tgt_cached = s.n_prompt - 1;
        result->prompt_ms = nu_time_ms() - t0;
        t0 = nu_time_ms();
        nu_finish_reason why = NU_FINISH_NONE;
        if (params->n_predict == 0) why = NU_FINISH_LENGTH;
        while (st == NU_OK && why == NU_FINISH_NONE) st = pass(&s, &why, err);
        nu_gen_output_finish(&s.out, why == NU_FINISH_NONE ? NU_FINISH_CANCELLED : why);
        result->n_generated = result->n_tokens;
        result->generate_ms = nu_time_ms() - t0;
        result->n_drafted = (int32_t)stats->drafted;
        result->n_accepted = (int32_t)stats->accepted;
    }
    teardown(&s);
    return st;
}
