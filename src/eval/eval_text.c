/* eval_text.c - text as code points, words, word ids and n-gram counts for
 * the text metrics (eval_text.h). */
#include <stdlib.h>
#include <string.h>

#include "eval_text.h"
#include "unicode.h"

/* ---- code points ---------------------------------------------------------- */

static bool cps_reserve(nu_cps *c, size_t need) {
    if (need <= c->cap) return true;
    size_t cap = c->cap ? c->cap * 2 : 64;
    while (cap < need) cap *= 2;
    uint32_t *v = realloc(c->v, cap * sizeof *v);
    if (!v) return false;
    c->v = v;
    c->cap = cap;
    return true;
}

bool nu_cps_push(nu_cps *c, uint32_t cp) {
    if (!cps_reserve(c, c->n + 1)) return false;
    c->v[c->n++] = cp;
    return true;
}

bool nu_cps_append(nu_cps *c, const uint32_t *v, size_t n) {
    if (!cps_reserve(c, c->n + n)) return false;
    if (n) memcpy(c->v + c->n, v, n * sizeof *v);
    c->n += n;
    return true;
}

void nu_cps_free(nu_cps *c) {
    free(c->v);
    *c = (nu_cps){0};
}

bool nu_cps_decode(nu_cps *c, const char *s, size_t n) {
    c->n = 0;
    if (!cps_reserve(c, n + 1)) return false; /* never more code points than bytes */
    for (size_t i = 0; i < n;) c->v[c->n++] = nu_utf8_next_escaped(s, n, &i);
    return true;
}

bool nu_cps_lower(nu_cps *c) {
    nu_cps out = {0};
    if (!cps_reserve(&out, c->n + 1)) return false;
    for (size_t i = 0; i < c->n; i++) {
        uint32_t m[3];
        int k = nu_uni_lower(c->v[i], m);
        if (!nu_cps_append(&out, m, (size_t)k)) {
            nu_cps_free(&out);
            return false;
        }
    }
    nu_cps_free(c);
    *c = out;
    return true;
}

void nu_cps_rstrip(nu_cps *c) {
    while (c->n && nu_uni_isspace(c->v[c->n - 1])) c->n--;
}

void nu_cps_strip(nu_cps *c) {
    nu_cps_rstrip(c);
    size_t i = 0;
    while (i < c->n && nu_uni_isspace(c->v[i])) i++;
    if (i) memmove(c->v, c->v + i, (c->n - i) * sizeof *c->v);
    c->n -= i;
}

/* ---- words ---------------------------------------------------------------- */

bool nu_words_push(nu_words *w, size_t start, size_t len) {
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 32;
        size_t *s = realloc(w->start, cap * sizeof *s);
        if (!s) return false;
        w->start = s;
        size_t *l = realloc(w->len, cap * sizeof *l);
        if (!l) return false;
        w->len = l;
        w->cap = cap;
    }
    w->start[w->n] = start;
    w->len[w->n++] = len;
    return true;
}

bool nu_words_split(nu_words *w, const uint32_t *text, size_t n) {
    for (size_t i = 0; i < n;) {
        while (i < n && nu_uni_isspace(text[i])) i++;
        size_t j = i;
        while (j < n && !nu_uni_isspace(text[j])) j++;
        if (j > i && !nu_words_push(w, i, j - i)) return false;
        i = j;
    }
    return true;
}

void nu_words_free(nu_words *w) {
    free(w->start);
    free(w->len);
    *w = (nu_words){0};
}

/* ---- word ids ------------------------------------------------------------- */

/* FNV-1a over the code points, then a final mix. */
static uint64_t hash_cps(const uint32_t *w, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ w[i]) * 1099511628211ull;
    h ^= h >> 29;
    return h * 0xbf58476d1ce4e5b9ull;
}

static bool vocab_grow(nu_word_ids *v) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    nu_word_ids g = {.text = calloc(cap, sizeof *g.text),
                     .len = calloc(cap, sizeof *g.len),
                     .id = calloc(cap, sizeof *g.id),
                     .cap = cap,
                     .n = v->n};
    if (!g.text || !g.len || !g.id) {
        nu_word_ids_free(&g);
        return false;
    }
    for (size_t i = 0; i < v->cap; i++) {
        if (!v->text[i]) continue;
        size_t j = hash_cps(v->text[i], v->len[i]) & (cap - 1);
        while (g.text[j]) j = (j + 1) & (cap - 1);
        g.text[j] = v->text[i];
        g.len[j] = v->len[i];
        g.id[j] = v->id[i];
    }
    nu_word_ids_free(v);
    *v = g;
    return true;
}

int32_t nu_word_id(nu_word_ids *v, const uint32_t *w, size_t n, bool add) {
    if ((v->n + 1) * 2 > v->cap && !vocab_grow(v)) return -2;
    size_t j = hash_cps(w, n) & (v->cap - 1);
    for (; v->text[j]; j = (j + 1) & (v->cap - 1))
        if (v->len[j] == n && !memcmp(v->text[j], w, n * sizeof *w)) return v->id[j];
    if (!add) return -1;
    v->text[j] = w;
    v->len[j] = n;
    v->id[j] = (int32_t)v->n++;
    return v->id[j];
}

void nu_word_ids_free(nu_word_ids *v) {
    free(v->text);
    free(v->len);
    free(v->id);
    *v = (nu_word_ids){0};
}

/* ---- n-grams -------------------------------------------------------------- */

static uint64_t hash_ids(const int32_t *ids, int32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)ids[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h;
}

static bool ngrams_grow(nu_ngrams *t) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    nu_ngram *e = calloc(cap, sizeof *e);
    if (!e) return false;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->e[i].ids) continue;
        size_t j = hash_ids(t->e[i].ids, t->e[i].n) & (cap - 1);
        while (e[j].ids) j = (j + 1) & (cap - 1);
        e[j] = t->e[i];
    }
    free(t->e);
    t->e = e;
    t->cap = cap;
    return true;
}

nu_ngram *nu_ngrams_find(nu_ngrams *t, const int32_t *ids, int32_t n, bool add, bool *nomem) {
    if ((t->used + 1) * 2 > t->cap && !ngrams_grow(t)) {
        *nomem = true;
        return NULL;
    }
    size_t j = hash_ids(ids, n) & (t->cap - 1);
    for (; t->e[j].ids; j = (j + 1) & (t->cap - 1))
        if (t->e[j].n == n && !memcmp(t->e[j].ids, ids, (size_t)n * sizeof *ids)) return &t->e[j];
    if (!add) return NULL;
    t->e[j] = (nu_ngram){.ids = ids, .n = n};
    t->used++;
    return &t->e[j];
}

bool nu_ngrams_count(nu_ngrams *t, const int32_t *ids, size_t len, int32_t lo, int32_t hi) {
    bool nomem = false;
    for (int32_t n = lo; n <= hi; n++)
        for (size_t i = 0; i + (size_t)n <= len; i++) {
            nu_ngram *e = nu_ngrams_find(t, ids + i, n, true, &nomem);
            if (!e) return false;
            e->count++;
        }
    return true;
}

void nu_ngrams_clear_cur(nu_ngrams *t) {
    for (size_t i = 0; i < t->cap; i++) t->e[i].cur = 0;
}

void nu_ngrams_free(nu_ngrams *t) {
    free(t->e);
    *t = (nu_ngrams){0};
}
