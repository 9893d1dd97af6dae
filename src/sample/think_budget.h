/* think_budget.h - the thinking budget's state inside a sampler (internal):
 * whether the tokens accepted so far are inside a thinking block, how many
 * were generated there, and which forced token comes next. nucleus.h
 * (nu_think_budget) says what it does. */
#ifndef NU_THINK_BUDGET_H
#define NU_THINK_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"

typedef struct nu_think_state {
    bool on;
    int32_t open[NU_THINK_MAX_MARKER], n_open;
    int32_t close[NU_THINK_MAX_MARKER], n_close;
    int32_t force[NU_THINK_MAX_FORCE], n_force;
    int32_t max_tokens;
    bool start_inside;
    int32_t recent[NU_THINK_MAX_MARKER]; /* the last tokens accepted, oldest first */
    int32_t n_recent;
    bool inside;      /* inside a thinking block */
    int32_t n_inside; /* generated tokens accepted inside it */
    bool forcing;     /* the forced sequence has begun */
    int32_t n_forced; /* of which this many tokens were accepted */
} nu_think_state;

/* Copies a budget (checked) into t, which starts outside any block. */
nu_status nu_think_set(nu_think_state *t, const nu_think_budget *b, int32_t n_vocab, nu_error *err);
/* Back outside any block (the settings stay). */
void nu_think_reset(nu_think_state *t);
/* The prompt's tokens were all accepted. */
void nu_think_prompt_end(nu_think_state *t);
/* One more token accepted: a prompt token (generated false) or a sampled one. */
void nu_think_accept(nu_think_state *t, int32_t token, bool generated);
/* The token the next sample must be, or -1 when it is free. */
int32_t nu_think_forced(const nu_think_state *t);

#endif
