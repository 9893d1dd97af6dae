/* mirostat.h - the truncations of mirostat v1 and v2 (internal).
 *
 * Mirostat (Basu et al., "Mirostat: a neural text decoding algorithm that
 * directly controls perplexity", ICLR 2021) keeps the surprise of the drawn
 * tokens near a target tau by truncating the distribution at a level mu
 * that it adjusts after each token; the sampler keeps mu and updates it
 * when a token is accepted (sampler.c). These are the truncations, as
 * llama.cpp defines them (include/nucleus.h has the formulas). */
#ifndef NU_MIROSTAT_H
#define NU_MIROSTAT_H

#include "nucleus.h"

/* The Zipf exponent and top-k of mirostat v1: keeps the k most likely
 * candidates for mu, N = n_vocab. */
void nu_mirostat_v1(nu_candidates *c, float mu, int32_t n_vocab);
/* Mirostat v2: keeps the candidates whose surprise -log2 p is at most mu
 * (the most likely one when none is). */
void nu_mirostat_v2(nu_candidates *c, float mu);

#endif
