/* eval_text.h - what the text metrics (BLEU, ROUGE) share: text as code
 * points, words as slices of it, words as interned ids, and counting
 * n-grams of ids in a hash table.
 *
 * The metrics reproduce Python tools (sacreBLEU, NLTK, rouge-score), so text
 * is handled as Python's str: a sequence of code points (invalid UTF-8
 * bytes kept as 0xDC80.. like surrogateescape), split on what str.split()
 * calls whitespace (base/unicode.h). */
#ifndef NU_EVAL_TEXT_H
#define NU_EVAL_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"

/* A growable array of code points. */
typedef struct nu_cps {
    uint32_t *v;
    size_t n, cap;
} nu_cps;

bool nu_cps_push(nu_cps *c, uint32_t cp);
bool nu_cps_append(nu_cps *c, const uint32_t *v, size_t n);
void nu_cps_free(nu_cps *c);
/* c = the code points of n bytes of UTF-8 (replacing what c held). */
bool nu_cps_decode(nu_cps *c, const char *s, size_t n);
/* Python's str.lower() of c, in place (through a scratch array). */
bool nu_cps_lower(nu_cps *c);
/* Python's str.rstrip() / str.strip() with no argument. */
void nu_cps_rstrip(nu_cps *c);
void nu_cps_strip(nu_cps *c);

/* The words of a text: slices [start, start + len) of its code points,
 * split as str.split() does. */
typedef struct nu_words {
    size_t *start, *len;
    size_t n, cap;
} nu_words;

bool nu_words_split(nu_words *w, const uint32_t *text, size_t n); /* appends */
bool nu_words_push(nu_words *w, size_t start, size_t len);
void nu_words_free(nu_words *w);

/* Words to small integer ids: equal words, equal ids. */
typedef struct nu_word_ids {
    const uint32_t **text; /* per slot: the word (NULL: empty slot) */
    size_t *len;
    int32_t *id;
    size_t cap, n;
} nu_word_ids;

/* The id of a word, added when new (add) or -1 when unknown (!add);
 * -2 when out of memory. */
int32_t nu_word_id(nu_word_ids *v, const uint32_t *w, size_t n, bool add);
void nu_word_ids_free(nu_word_ids *v);

/* Counts of n-grams of ids (n >= 1). An entry points into the caller's id
 * array, which must outlive the table. `count` is the n-gram's count in
 * the text the table was built from; `cur` and `best` are scratch the
 * metrics use while reading references. */
typedef struct nu_ngram {
    const int32_t *ids;
    int32_t n;
    int64_t count, cur, best;
} nu_ngram;

typedef struct nu_ngrams {
    nu_ngram *e; /* ids == NULL: empty slot */
    size_t cap, used;
} nu_ngrams;

/* The entry of ids[0..n), added with count 0 when absent and add; NULL when
 * absent and !add, or out of memory (*nomem set). */
nu_ngram *nu_ngrams_find(nu_ngrams *t, const int32_t *ids, int32_t n, bool add, bool *nomem);
/* Adds every n-gram of ids[0..len) for n in [lo, hi] to the counts. */
bool nu_ngrams_count(nu_ngrams *t, const int32_t *ids, size_t len, int32_t lo, int32_t hi);
void nu_ngrams_clear_cur(nu_ngrams *t);
void nu_ngrams_free(nu_ngrams *t);

#endif
