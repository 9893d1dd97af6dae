/* think_budget.c - the thinking budget: a small automaton over the accepted
 * tokens that finds the open and close markers of thinking blocks, counts
 * the tokens generated inside one, and names the token to force once the
 * budget is spent. */
#include "think_budget.h"

#include <string.h>

#include "error.h"

/* n tokens, each within the vocabulary when n_vocab > 0. */
static nu_status check_seq(const char *what, const int32_t *toks, int32_t n, int32_t max,
                           int32_t n_vocab, nu_error *err) {
    if (n < 1 || n > max || !toks)
        return nu_fail(err, NU_ERR_INVALID_ARG, "think budget: %s has %d tokens (1..%d)", what, n,
                       max);
    for (int32_t i = 0; i < n; i++)
        if (toks[i] < 0 || (n_vocab > 0 && toks[i] >= n_vocab))
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "think budget: %s token %d is outside the vocabulary", what, toks[i]);
    return NU_OK;
}

nu_status nu_think_budget_check(const nu_think_budget *b, int32_t n_vocab, nu_error *err) {
    if (!b || b->n_open == 0) return NU_OK;
    nu_status st = check_seq("open", b->open, b->n_open, NU_THINK_MAX_MARKER, n_vocab, err);
    if (!st) st = check_seq("close", b->close, b->n_close, NU_THINK_MAX_MARKER, n_vocab, err);
    if (!st) st = check_seq("force", b->force, b->n_force, NU_THINK_MAX_FORCE, n_vocab, err);
    if (!st && b->max_tokens < 0)
        st = nu_fail(err, NU_ERR_INVALID_ARG, "think budget: max_tokens %d must be >= 0",
                     b->max_tokens);
    return st;
}

nu_status nu_think_set(nu_think_state *t, const nu_think_budget *b, int32_t n_vocab,
                       nu_error *err) {
    nu_status st = nu_think_budget_check(b, n_vocab, err);
    if (st) return st;
    memset(t, 0, sizeof *t);
    if (!b || b->n_open == 0) return NU_OK;
    t->on = true;
    memcpy(t->open, b->open, (size_t)b->n_open * sizeof *t->open);
    memcpy(t->close, b->close, (size_t)b->n_close * sizeof *t->close);
    memcpy(t->force, b->force, (size_t)b->n_force * sizeof *t->force);
    t->n_open = b->n_open, t->n_close = b->n_close, t->n_force = b->n_force;
    t->max_tokens = b->max_tokens;
    t->start_inside = b->start_inside;
    return NU_OK;
}

void nu_think_reset(nu_think_state *t) {
    t->n_recent = 0;
    t->inside = t->forcing = false;
    t->n_inside = t->n_forced = 0;
}

/* Whether the recent tokens end with seq. */
static bool ends_with(const nu_think_state *t, const int32_t *seq, int32_t n) {
    if (t->n_recent < n) return false;
    return !memcmp(t->recent + t->n_recent - n, seq, (size_t)n * sizeof *seq);
}

void nu_think_accept(nu_think_state *t, int32_t token, bool generated) {
    if (!t->on) return;
    if (t->n_recent == NU_THINK_MAX_MARKER) {
        memmove(t->recent, t->recent + 1, (NU_THINK_MAX_MARKER - 1) * sizeof *t->recent);
        t->n_recent--;
    }
    t->recent[t->n_recent++] = token;
    if (!t->inside) {
        if (ends_with(t, t->open, t->n_open)) t->inside = true, t->n_inside = 0;
        return;
    }
    if (generated && (t->forcing || t->n_inside >= t->max_tokens)) {
        /* a forced token (whatever the caller chose, the sequence goes on) */
        t->forcing = true;
        if (++t->n_forced >= t->n_force) t->inside = t->forcing = false, t->n_forced = 0;
        return;
    }
    if (generated) t->n_inside++;
    if (ends_with(t, t->close, t->n_close)) t->inside = false;
}

void nu_think_prompt_end(nu_think_state *t) {
    if (t->on && t->start_inside) t->inside = true, t->n_inside = 0;
}

int32_t nu_think_forced(const nu_think_state *t) {
    if (!t->on || !t->inside) return -1;
    if (t->forcing) return t->force[t->n_forced];
    return t->n_inside >= t->max_tokens ? t->force[0] : -1;
}
