/* dry.h - the DRY repetition penalty inside the sampler (internal).
 *
 * A nu_dry holds DRY's parameters, its sequence breakers as token
 * sequences, and the scratch its stage needs (sized once, but for the
 * repeat lengths of a window given as -1, which grow with the history).
 * The stage is described in include/nucleus.h; the breakers are found in
 * the vocabulary as llama.cpp finds them. */
#ifndef NU_DRY_H
#define NU_DRY_H

#include "nucleus.h"

/* One breaker: a head token and the tokens that must follow it (none for a
 * token that is a breaker by itself), tails[start .. start + len). */
typedef struct nu_dry_breaker {
    int32_t head, start, len;
} nu_dry_breaker;

typedef struct nu_dry {
    float multiplier, base;
    int32_t allowed_length, last_n; /* last_n -1: the whole history */
    int32_t max_exponent;           /* caps base^x below FLT_MAX; 0 for none */
    nu_dry_breaker *breakers;       /* sorted by head, then len */
    int32_t n_breakers;
    int32_t *tails;
    int32_t n_vocab;
    int32_t *longest; /* n_vocab: 1 + the longest repeat a token extends, 0 none */
    int32_t *touched; /* the tokens with longest > 0 */
    size_t n_touched;
    int32_t *z; /* the window's Z-array, cap_z long */
    size_t cap_z;
} nu_dry;

/* Prepares d from checked parameters with dry_multiplier > 0; the
 * breaker strings are looked up in model's vocabulary (model NULL: there
 * must be none). */
nu_status nu_dry_init(nu_dry *d, const nu_sampler_params *p, const nu_model *model, int32_t n_vocab,
                      nu_error *err);
/* Replaces the breakers with token sequences. */
nu_status nu_dry_set_breakers(nu_dry *d, const nu_token_seq *seqs, int32_t n, nu_error *err);
/* The stage over c, for history hist[0..n_hist). */
void nu_dry_apply(nu_dry *d, const int32_t *hist, size_t n_hist, nu_candidates *c, bool identity);
void nu_dry_free(nu_dry *d);

#endif
