/* sampler_dry.c - DRY, "Don't Repeat Yourself" (p-e-w's sampler, as
 * llama.cpp defines it; see include/nucleus.h for the formula).
 *
 * Per token, for the window w[0..n) (the last tokens of the history):
 *  1. the repetition limit: walking back from the end, the first breaker
 *     found (a head token followed by its tail) ends every match, so no
 *     repeat may be longer than the tokens after it;
 *  2. for each earlier end position i, the length of the longest common
 *     suffix of w[0..i] and w: the Z-array of the reversed window, in O(n);
 *  3. a suffix of length L >= allowed_length ending at i means that w[i+1]
 *     would extend a repeat of L tokens; each token keeps its longest;
 *  4. those tokens, unless a breaker by themselves, lose
 *     multiplier * base^(L - allowed_length).
 * Breaker strings become token sequences once, when the sampler is made:
 * every token whose text contains the string is a breaker by itself; a
 * token whose text ends with a proper prefix of the string is a head, with
 * the tokenization of the rest (at most MAX_TAIL tokens) as its tail. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dry.h"
#include "error.h"

/* llama.cpp's limits: a tail is cut to this many tokens. */
enum { MAX_TAIL = 20 };

/* ln(FLT_MAX), for the exponent cap. */
#define FLOAT_MAX_LOG 88.7228391f

static int cmp_breaker(const void *a, const void *b) {
    const nu_dry_breaker *x = a, *y = b;
    if (x->head != y->head) return x->head < y->head ? -1 : 1;
    return (x->len > y->len) - (x->len < y->len);
}

/* A growable list of breakers while they are collected. */
typedef struct breaker_list {
    nu_dry_breaker *items;
    int32_t n, cap;
    int32_t *tails;
    int32_t n_tails, cap_tails;
} breaker_list;

static bool grow_to(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, (size_t)n * elem);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

/* Adds (head, tail) unless the same breaker was just added: a token's
 * breakers are added together, so only the last entries need a look (a
 * repeat elsewhere would change nothing anyway). */
static bool add_breaker(breaker_list *l, int32_t head, const int32_t *tail, int32_t len) {
    for (int32_t i = l->n - 1; i >= 0 && l->items[i].head == head; i--) {
        const nu_dry_breaker *b = &l->items[i];
        if (b->len == len &&
            (len == 0 || !memcmp(l->tails + b->start, tail, (size_t)len * sizeof *tail)))
            return true;
    }
    if (!grow_to((void **)&l->items, &l->cap, l->n + 1, sizeof *l->items) ||
        !grow_to((void **)&l->tails, &l->cap_tails, l->n_tails + len + 1, sizeof *l->tails))
        return false;
    l->items[l->n++] = (nu_dry_breaker){head, l->n_tails, len};
    if (len) memcpy(l->tails + l->n_tails, tail, (size_t)len * sizeof *tail);
    l->n_tails += len;
    return true;
}

/* The tokens of text (no BOS, special-token text read as text), cut to
 * MAX_TAIL; false when it cannot be tokenized. */
static bool tail_tokens(const nu_model *m, const char *text, size_t len, int32_t *out, int32_t *n) {
    int32_t buf[2 * NU_DRY_MAX_BREAKER_LEN + 8];
    size_t got = 0;
    nu_error err;
    if (nu_tokenize(m, text, len, 0, buf, sizeof buf / sizeof *buf, &got, &err) != NU_OK)
        return false;
    *n = got > MAX_TAIL ? MAX_TAIL : (int32_t)got;
    memcpy(out, buf, (size_t)*n * sizeof *out);
    return true;
}

/* The breakers one string makes with one token's text word[0..wlen). */
static bool token_breakers(breaker_list *l, const nu_model *m, int32_t token, const char *word,
                           size_t wlen, const char *s, size_t slen) {
    if (wlen >= slen && memmem(word, wlen, s, slen)) return add_breaker(l, token, NULL, 0);
    for (size_t pos = 0; pos < wlen; pos++) {
        size_t i = 0;
        while (i < slen && pos + i < wlen && word[pos + i] == s[i]) i++;
        if (pos + i < wlen) continue; /* a mismatch before the end of the token */
        int32_t tail[MAX_TAIL], n;
        if (!tail_tokens(m, s + i, slen - i, tail, &n) || !add_breaker(l, token, tail, n))
            return false;
    }
    return true;
}

/* Looks every breaker string up in the vocabulary. */
static nu_status breakers_from_strings(breaker_list *l, const nu_sampler_params *p,
                                       const nu_model *m, nu_error *err) {
    int32_t n_vocab = nu_model_n_vocab(m);
    size_t cap = 256;
    char *word = malloc(cap);
    for (int32_t t = 0; word && t < n_vocab; t++) {
        size_t wlen = nu_token_to_bytes(m, t, true, word, cap);
        if (wlen > cap) {
            char *bigger = realloc(word, wlen);
            if (!bigger) break;
            word = bigger;
            cap = wlen;
            nu_token_to_bytes(m, t, true, word, cap);
        }
        for (int32_t b = 0; b < p->n_dry_sequence_breakers; b++) {
            const char *s = p->dry_sequence_breakers[b];
            if (!token_breakers(l, m, t, word, wlen, s, strlen(s))) {
                free(word);
                return nu_fail(err, NU_ERR_NOMEM, "out of memory for DRY's sequence breakers");
            }
        }
    }
    bool ok = word != NULL;
    free(word);
    return ok ? NU_OK : nu_fail(err, NU_ERR_NOMEM, "out of memory for DRY's sequence breakers");
}

/* Takes the collected breakers, sorted. */
static void take_breakers(nu_dry *d, breaker_list *l) {
    free(d->breakers);
    free(d->tails);
    if (l->n > 1) qsort(l->items, (size_t)l->n, sizeof *l->items, cmp_breaker);
    d->breakers = l->items;
    d->n_breakers = l->n;
    d->tails = l->tails;
}

nu_status nu_dry_init(nu_dry *d, const nu_sampler_params *p, const nu_model *model, int32_t n_vocab,
                      nu_error *err) {
    memset(d, 0, sizeof *d);
    d->multiplier = p->dry_multiplier;
    d->base = p->dry_base;
    d->allowed_length = p->dry_allowed_length;
    d->last_n = p->dry_penalty_last_n;
    d->n_vocab = n_vocab;
    if (d->base > 1.000001f) d->max_exponent = (int32_t)(FLOAT_MAX_LOG / logf(d->base));
    d->longest = calloc((size_t)n_vocab, sizeof *d->longest);
    d->touched = malloc((size_t)n_vocab * sizeof *d->touched);
    if (!d->longest || !d->touched) return nu_fail(err, NU_ERR_NOMEM, "out of memory for DRY");
    if (p->n_dry_sequence_breakers == 0) return NU_OK;
    if (!model)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "DRY's sequence breakers are strings and need the model's vocabulary "
                       "(nu_sampler_new_for_model), or nu_sampler_set_dry_breakers with token ids");
    breaker_list l = {0};
    nu_status st = breakers_from_strings(&l, p, model, err);
    take_breakers(d, &l);
    return st;
}

nu_status nu_dry_set_breakers(nu_dry *d, const nu_token_seq *seqs, int32_t n, nu_error *err) {
    if (n < 0 || (n > 0 && !seqs))
        return nu_fail(err, NU_ERR_INVALID_ARG, "%d DRY sequence breakers", n);
    for (int32_t i = 0; i < n; i++) {
        if (seqs[i].n < 1 || !seqs[i].tokens)
            return nu_fail(err, NU_ERR_INVALID_ARG, "DRY sequence breaker %d is empty", i);
        for (int32_t k = 0; k < seqs[i].n; k++)
            if (seqs[i].tokens[k] < 0 || seqs[i].tokens[k] >= d->n_vocab)
                return nu_fail(err, NU_ERR_INVALID_ARG,
                               "DRY sequence breaker %d: token %d is outside the vocabulary "
                               "(%d tokens)",
                               i, seqs[i].tokens[k], d->n_vocab);
    }
    breaker_list l = {0};
    for (int32_t i = 0; i < n; i++) {
        int32_t len = seqs[i].n - 1 > MAX_TAIL ? MAX_TAIL : seqs[i].n - 1;
        if (!add_breaker(&l, seqs[i].tokens[0], seqs[i].tokens + 1, len)) {
            free(l.items);
            free(l.tails);
            return nu_fail(err, NU_ERR_NOMEM, "out of memory for DRY's sequence breakers");
        }
    }
    take_breakers(d, &l);
    return NU_OK;
}

void nu_dry_free(nu_dry *d) {
    free(d->breakers);
    free(d->tails);
    free(d->longest);
    free(d->touched);
    free(d->z);
    memset(d, 0, sizeof *d);
}

/* The first breaker with this head, or -1 (they are sorted by head). */
static int32_t first_breaker(const nu_dry *d, int32_t head) {
    int32_t lo = 0, hi = d->n_breakers;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (d->breakers[mid].head < head)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->n_breakers && d->breakers[lo].head == head ? lo : -1;
}

/* Whether the token is a breaker by itself (its shortest tail is empty). */
static bool lone_breaker(const nu_dry *d, int32_t token) {
    int32_t i = first_breaker(d, token);
    return i >= 0 && d->breakers[i].len == 0;
}

/* Step 1: how many tokens at the end of w[0..n) follow the last breaker
 * (the whole window when there is none). The breaker whose head is at
 * distance i from the end is matched against the tokens after it; of the
 * breakers of one head, the longest that fits counts. */
static size_t repeat_limit(const nu_dry *d, const int32_t *w, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t k = first_breaker(d, w[n - 1 - i]);
        if (k < 0) continue;
        int32_t longest = -1;
        for (; k < d->n_breakers && d->breakers[k].head == w[n - 1 - i]; k++) {
            const nu_dry_breaker *b = &d->breakers[k];
            if ((size_t)b->len > i || b->len <= longest) continue;
            if (b->len == 0 || !memcmp(d->tails + b->start, w + n - i, (size_t)b->len * sizeof *w))
                longest = b->len;
        }
        if (longest >= 0) return i - (size_t)longest;
    }
    return n;
}

/* Step 2: z[k] = the length of the longest common suffix of w[0..n-k) and
 * w[0..n), i.e. the Z-array of the reversed window (z[0] = n). */
static void reversed_z(const int32_t *w, size_t n, int32_t *z) {
#define REV(j) w[n - 1 - (j)]
    size_t l = 0, r = 0; /* the rightmost match found: [l, r) */
    z[0] = (int32_t)n;
    for (size_t k = 1; k < n; k++) {
        size_t len = 0;
        if (k < r) len = (size_t)z[k - l] < r - k ? (size_t)z[k - l] : r - k;
        while (k + len < n && REV(len) == REV(k + len)) len++;
        z[k] = (int32_t)len;
        if (k + len > r) l = k, r = k + len;
    }
#undef REV
}

/* Makes room for a window of n (grows with a window of -1). */
static bool z_room(nu_dry *d, size_t n) {
    if (n <= d->cap_z) return true;
    size_t cap = d->cap_z ? d->cap_z : 256;
    while (cap < n) cap *= 2;
    int32_t *z = realloc(d->z, cap * sizeof *z);
    if (!z) return false;
    d->z = z;
    d->cap_z = cap;
    return true;
}

/* multiplier * base^(length - allowed), the exponent capped. */
static float penalty(const nu_dry *d, int32_t length) {
    int32_t e = length - d->allowed_length;
    if (d->max_exponent > 0 && e > d->max_exponent) e = d->max_exponent;
    return (float)(d->multiplier * pow(d->base, e));
}

/* Steps 2 and 3: each token that would extend a repeat of at least
 * allowed_length tokens, with its longest (recorded as length + 1). */
static void find_extensions(nu_dry *d, const int32_t *w, size_t n, size_t limit) {
    reversed_z(w, n, d->z);
    for (size_t k = 1; k < n; k++) {
        size_t len = (size_t)d->z[k] < limit ? (size_t)d->z[k] : limit;
        if (len < (size_t)d->allowed_length) continue;
        int32_t t = w[n - k]; /* what followed the match ending at n - 1 - k */
        if (d->longest[t] == 0) d->touched[d->n_touched++] = t;
        if (d->longest[t] < (int32_t)len + 1) d->longest[t] = (int32_t)len + 1;
    }
}

void nu_dry_apply(nu_dry *d, const int32_t *hist, size_t n_hist, nu_candidates *c, bool identity) {
    size_t n = d->last_n < 0 || (size_t)d->last_n > n_hist ? n_hist : (size_t)d->last_n;
    if (n <= (size_t)d->allowed_length || !z_room(d, n)) return;
    const int32_t *w = hist + n_hist - n;
    size_t limit = repeat_limit(d, w, n);
    if (limit < (size_t)d->allowed_length) return;
    find_extensions(d, w, n, limit);
    if (identity) {
        for (size_t i = 0; i < d->n_touched; i++) {
            int32_t t = d->touched[i];
            if (!lone_breaker(d, t)) c->data[t].logit -= penalty(d, d->longest[t] - 1);
        }
    } else {
        for (size_t i = 0; i < c->size; i++) {
            int32_t t = c->data[i].id, l = d->longest[t];
            if (l > 0 && !lone_breaker(d, t)) c->data[i].logit -= penalty(d, l - 1);
        }
    }
    for (size_t i = 0; i < d->n_touched; i++) d->longest[d->touched[i]] = 0;
    d->n_touched = 0;
    c->sorted = false;
}
