/* watermark.h - the green-list watermark inside the sampler (internal).
 *
 * A nu_watermark is what one sampler needs to apply the watermark: the
 * hashed key, gamma as a 64-bit threshold, delta, and the last h tokens
 * (prompt and generated), which choose the green list. The function that
 * decides green and red is documented in include/nucleus.h. */
#ifndef NU_WATERMARK_H
#define NU_WATERMARK_H

#include "nucleus.h"

typedef struct nu_watermark {
    uint64_t key;       /* K: the hashed key */
    uint64_t threshold; /* gamma * 2^64: green below it */
    float delta;
    int32_t h;                              /* context width */
    int32_t last[NU_WATERMARK_MAX_CONTEXT]; /* the last n_last tokens, oldest first */
    int32_t n_last;                         /* how many of the h are known yet */
} nu_watermark;

/* Prepares w from checked parameters (with a key). */
nu_status nu_watermark_init(nu_watermark *w, const nu_watermark_params *p, nu_error *err);
/* A token was read or generated: it becomes the newest of the context. */
void nu_watermark_push(nu_watermark *w, int32_t token);
/* Forgets the context (a new sequence starts). */
void nu_watermark_clear(nu_watermark *w);
/* Whether h tokens are known, so that the next token has a green list. */
bool nu_watermark_ready(const nu_watermark *w);
/* Adds delta to the logits of the candidates in the current green list;
 * identity says the array holds every id in order (the fast path). */
void nu_watermark_apply(const nu_watermark *w, nu_candidates *c, bool identity);

/* The building blocks of the function in nucleus.h. */
uint64_t nu_watermark_key_hash(const char *key);
uint64_t nu_watermark_context_seed(uint64_t key, const int32_t *prev, int32_t h);
uint64_t nu_watermark_threshold(float gamma);
bool nu_watermark_green(uint64_t seed, uint64_t threshold, int32_t token);

#endif
