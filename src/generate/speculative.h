/* speculative.h - the parts of speculative decoding that nu_generate_speculative
 * (speculative.c) and the scheduler (scheduler.c) share (internal): the
 * draft length and its adaptation, drafting one token, prompt lookup, and
 * the exact acceptance rule with its residual draw. One implementation, so
 * a single generation and a batched one keep the same law. */
#ifndef NU_SPECULATIVE_H
#define NU_SPECULATIVE_H

#include "nucleus.h"

/* Checks draft lengths and lookup n-gram sizes against their ranges (and
 * the target's batch, which must hold the last token and every proposal),
 * that there is a guesser (a draft model or lookup), and that the draft's
 * vocabulary is the target's. draft may be NULL (lookup). */
nu_status nu_spec_params_check(const nu_speculative_params *sp, const nu_model *target,
                               const nu_model *draft, int32_t n_batch, nu_error *err);

/* The adaptive draft length of one generation. */
typedef struct nu_spec_length {
    int32_t k;      /* proposals for the next pass */
    int32_t pause;  /* passes left without drafting (back-off) */
    int32_t misses; /* consecutive passes at the shortest length with nothing accepted */
} nu_spec_length;

void nu_spec_length_init(nu_spec_length *l, const nu_speculative_params *sp);
/* How many tokens to propose in this pass, at most limit (0 while backing off). */
int32_t nu_spec_length_next(nu_spec_length *l, int32_t limit);
/* Adapts after a pass that proposed `proposed` tokens and had `accepted` accepted. */
void nu_spec_length_adapt(nu_spec_length *l, const nu_speculative_params *sp, int32_t proposed,
                          int32_t accepted);

/* A candidate array as a dense distribution over the vocabulary. */
void nu_spec_dense(const nu_candidates *c, float *out, int32_t n_vocab);
/* Draws from a dense distribution (not necessarily normalised). */
int32_t nu_spec_draw(const float *d, int32_t n_vocab, nu_rng *rng);

/* The draft model's next proposal from its logits: its distribution (after
 * the draft sampler's chain) goes to q (n_vocab floats), a token is drawn
 * from it with rng and accepted by the draft sampler. */
int32_t nu_spec_propose(nu_sampler *draft_sampler, const float *logits, float *q, int32_t n_vocab,
                        nu_rng *rng);

/* Prompt lookup: up to k tokens that followed the latest earlier occurrence
 * of the last n-gram of toks[0, n) (longest n-gram first, ngram_max down to
 * ngram_min) go to out; returns how many. */
int32_t nu_spec_lookup(const int32_t *toks, int32_t n, int32_t k, int32_t ngram_min,
                       int32_t ngram_max, int32_t *out);

/* Re-tells a draft sampler the text after a pass (its history held the
 * rejected proposals): the prompt toks[0, n_prompt), then toks[n_prompt, n). */
void nu_spec_draft_sampler_sync(nu_sampler *draft_sampler, const int32_t *toks, int32_t n_prompt,
                                int32_t n);

/* Emits one token of a verified pass (logits: the target's at its position);
 * returns why generation ends there, or NU_FINISH_NONE. */
typedef nu_finish_reason (*nu_spec_emit_fn)(void *user, int32_t token, const float *logits);

/* One pass's verification: the target's logits for the last token and each
 * proposal are entries first_entry .. first_entry + n_draft of tgt's last
 * batch. */
typedef struct nu_spec_verify_args {
    nu_sampler *sampler; /* the target's: distributions after its chain, history */
    const nu_context *tgt;
    int32_t first_entry;
    const int32_t *draft; /* the proposals */
    int32_t n_draft;
    const float *q; /* [n_draft][n_vocab] draft distributions; NULL: point masses (lookup) */
    float *pbuf;    /* n_vocab floats of scratch */
    int32_t n_vocab;
    nu_rng *rng; /* acceptance and residual draws */
    nu_spec_emit_fn emit;
    void *user;
} nu_spec_verify_args;

/* Accepts proposal x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the
 * first rejection draws from the normalised residual max(0, p_i - q_i); when
 * all are accepted draws one more from p. Emits every accepted token and the
 * drawn one (stopping early when emit says generation ends, *why then set)
 * and returns how many proposals were accepted. n_draft 0 is a plain draw. */
int32_t nu_spec_verify(const nu_spec_verify_args *a, nu_finish_reason *why);

#endif
