/* rouge.c - ROUGE as Google's rouge-score computes it (nucleus.h, "Text
 * metrics: ROUGE"): its tokenizer, ROUGE-N, ROUGE-L, summary-level
 * ROUGE-Lsum, the best of several targets, and bootstrap confidence
 * intervals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "eval.h"
#include "unicode.h"

/* The largest LCS table rougeLsum backtracks through (cells). */
#define ROUGE_MAX_LCS_CELLS (1u << 26)

/* ---- the tokenizer -------------------------------------------------------- */

/* A text as rouge-score's tokenizer leaves it: lowercase (str.lower()), every
 * run of characters other than a-z and 0-9 a separator, tokens longer than
 * three letters stemmed if asked; each token with its id and its line (the
 * sentences of rougeLsum are the text's non-empty lines). */
typedef struct rouge_text {
    nu_cps cps;     /* the kept letters and digits, ' ' elsewhere */
    size_t *line;   /* per code point of cps: its line in the original text */
    nu_words words; /* the tokens, as slices of cps */
    int32_t *ids;
    size_t *token_line;
} rouge_text;

static void rouge_text_free(rouge_text *t) {
    nu_cps_free(&t->cps);
    free(t->line);
    nu_words_free(&t->words);
    free(t->ids);
    free(t->token_line);
    *t = (rouge_text){0};
}

static bool is_kept(uint32_t c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* Stems a token in place (its code points are ASCII). */
static void stem_token(rouge_text *t, size_t k) {
    char buf[256];
    const size_t start = t->words.start[k], len = t->words.len[k];
    if (len <= 3 || len >= sizeof buf) return; /* rouge-score stems tokens longer than 3 */
    for (size_t i = 0; i < len; i++) buf[i] = (char)t->cps.v[start + i];
    const size_t n = nu_porter_stem(buf, len);
    for (size_t i = 0; i < n; i++) t->cps.v[start + i] = (unsigned char)buf[i];
    t->words.len[k] = n;
}

static bool rouge_tokenize(rouge_text *t, const char *text, bool stemmer, nu_word_ids *vocab) {
    nu_cps raw = {0};
    const size_t n = strlen(text);
    bool ok = nu_cps_decode(&raw, text, n);
    size_t cap = raw.n * 3 + 1, line = 0;
    t->line = ok ? malloc(cap * sizeof *t->line) : NULL;
    ok = ok && t->line;
    for (size_t i = 0; ok && i < raw.n; i++) {
        uint32_t m[3];
        const int k = nu_uni_lower(raw.v[i], m);
        for (int j = 0; ok && j < k; j++) {
            t->line[t->cps.n] = line;
            ok = nu_cps_push(&t->cps, is_kept(m[j]) ? m[j] : ' ');
        }
        if (raw.v[i] == '\n') line++;
    }
    nu_cps_free(&raw);
    ok = ok && nu_words_split(&t->words, t->cps.v, t->cps.n);
    if (!ok) return false;
    t->ids = malloc((t->words.n + 1) * sizeof *t->ids);
    t->token_line = malloc((t->words.n + 1) * sizeof *t->token_line);
    if (!t->ids || !t->token_line) return false;
    for (size_t k = 0; k < t->words.n; k++) {
        t->token_line[k] = t->line[t->words.start[k]];
        if (stemmer) stem_token(t, k);
        t->ids[k] = nu_word_id(vocab, t->cps.v + t->words.start[k], t->words.len[k], true);
        if (t->ids[k] < 0) return false;
    }
    return true;
}

/* ---- the scores ----------------------------------------------------------- */

static nu_rouge_score from_counts(double hits, double n_prediction, double n_target) {
    nu_rouge_score s = {.precision = n_prediction > 0 ? hits / n_prediction : 0,
                        .recall = n_target > 0 ? hits / n_target : 0};
    s.fmeasure =
        s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
    return s;
}

/* ROUGE-N: clipped n-gram overlap over the n-gram counts (at least 1). */
static bool rouge_n(const rouge_text *target, const rouge_text *pred, int32_t n,
                    nu_rouge_score *out) {
    nu_ngrams table = {0};
    bool nomem = false;
    if (!nu_ngrams_count(&table, pred->ids, pred->words.n, n, n)) {
        nu_ngrams_free(&table);
        return false;
    }
    int64_t hits = 0;
    for (size_t i = 0; i + (size_t)n <= target->words.n; i++) {
        nu_ngram *e = nu_ngrams_find(&table, target->ids + i, n, false, &nomem);
        if (e && e->cur < e->count) {
            e->cur++;
            hits++;
        }
    }
    nu_ngrams_free(&table);
    if (nomem) return false;
    const size_t nt = target->words.n >= (size_t)n ? target->words.n - (size_t)n + 1 : 0;
    const size_t np = pred->words.n >= (size_t)n ? pred->words.n - (size_t)n + 1 : 0;
    /* rouge-score divides by max(count, 1) */
    *out = from_counts((double)hits, (double)(np ? np : 1), (double)(nt ? nt : 1));
    return true;
}

/* The length of the longest common subsequence of a and b (two rows). */
static bool lcs_length(const int32_t *a, size_t na, const int32_t *b, size_t nb, size_t *out) {
    size_t *prev = calloc(nb + 1, sizeof *prev), *row = calloc(nb + 1, sizeof *row);
    if (!prev || !row) {
        free(prev);
        free(row);
        return false;
    }
    for (size_t i = 1; i <= na; i++) {
        for (size_t j = 1; j <= nb; j++)
            row[j] = a[i - 1] == b[j - 1]   ? prev[j - 1] + 1
                     : prev[j] > row[j - 1] ? prev[j]
                                            : row[j - 1];
        size_t *t = prev;
        prev = row;
        row = t;
    }
    *out = prev[nb];
    free(prev);
    free(row);
    return true;
}

/* Marks in `in_lcs` the positions of ref that one longest common
 * subsequence with can uses, read back through the full table as
 * rouge-score's _backtrack_norec does (a match first, then left when the
 * left cell is strictly larger, else up). */
static nu_status mark_lcs(const int32_t *ref, size_t nr, const int32_t *can, size_t nc,
                          bool *in_lcs, nu_error *err) {
    const size_t w = nc + 1;
    if ((double)(nr + 1) * (double)w > ROUGE_MAX_LCS_CELLS)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "rougeLsum: sentences of %zu and %zu tokens are too long (at most %u LCS "
                       "cells; end sentences with newlines)",
                       nr, nc, ROUGE_MAX_LCS_CELLS);
    uint32_t *t = calloc((nr + 1) * w, sizeof *t);
    if (!t) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    for (size_t i = 1; i <= nr; i++)
        for (size_t j = 1; j <= nc; j++) {
            const uint32_t up = t[(i - 1) * w + j], left = t[i * w + j - 1];
            t[i * w + j] = ref[i - 1] == can[j - 1] ? t[(i - 1) * w + j - 1] + 1
                           : up > left              ? up
                                                    : left;
        }
    for (size_t i = nr, j = nc; i > 0 && j > 0;) {
        if (ref[i - 1] == can[j - 1]) {
            in_lcs[i - 1] = true;
            i--;
            j--;
        } else if (t[i * w + j - 1] > t[(i - 1) * w + j]) {
            j--;
        } else {
            i--;
        }
    }
    free(t);
    return NU_OK;
}

/* The sentences of a text: [first, end) token ranges of its lines. */
typedef struct sentences {
    size_t *first, *end;
    size_t n;
} sentences;

/* The lines holding tokens; a line without tokens adds nothing to
 * rougeLsum, so it is left out. */
static bool split_sentences(const rouge_text *t, sentences *s) {
    s->first = malloc((t->words.n + 1) * sizeof *s->first);
    s->end = malloc((t->words.n + 1) * sizeof *s->end);
    s->n = 0;
    if (!s->first || !s->end) return false;
    for (size_t k = 0; k < t->words.n; k++) {
        if (k == 0 || t->token_line[k] != t->token_line[k - 1]) s->first[s->n++] = k;
        s->end[s->n - 1] = k + 1;
    }
    return true;
}

/* Summary-level LCS (rouge-score's _summary_level_lcs): for each target
 * sentence the union of its LCS positions with every prediction sentence;
 * a union token is a hit while both texts still have an unmatched copy of
 * it. */
static nu_status rouge_lsum(const rouge_text *target, const rouge_text *pred, size_t n_ids,
                            nu_rouge_score *out, nu_error *err) {
    *out = (nu_rouge_score){0};
    if (target->words.n == 0 || pred->words.n == 0) return NU_OK;
    sentences ts = {0}, ps = {0};
    int64_t *count_t = calloc(n_ids + 1, sizeof *count_t);
    int64_t *count_p = calloc(n_ids + 1, sizeof *count_p);
    bool *in_lcs = calloc(target->words.n + 1, sizeof *in_lcs);
    nu_status st = NU_OK;
    if (!count_t || !count_p || !in_lcs || !split_sentences(target, &ts) ||
        !split_sentences(pred, &ps))
        st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
    for (size_t k = 0; st == NU_OK && k < target->words.n; k++) count_t[target->ids[k]]++;
    for (size_t k = 0; st == NU_OK && k < pred->words.n; k++) count_p[pred->ids[k]]++;
    int64_t hits = 0;
    for (size_t r = 0; st == NU_OK && r < ts.n; r++) {
        const int32_t *ref = target->ids + ts.first[r];
        const size_t nr = ts.end[r] - ts.first[r];
        memset(in_lcs, 0, nr * sizeof *in_lcs);
        for (size_t c = 0; st == NU_OK && c < ps.n; c++)
            st = mark_lcs(ref, nr, pred->ids + ps.first[c], ps.end[c] - ps.first[c], in_lcs, err);
        for (size_t i = 0; st == NU_OK && i < nr; i++) {
            const int32_t id = ref[i];
            if (in_lcs[i] && count_t[id] > 0 && count_p[id] > 0) {
                hits++;
                count_t[id]--;
                count_p[id]--;
            }
        }
    }
    if (st == NU_OK)
        *out = from_counts((double)hits, (double)pred->words.n, (double)target->words.n);
    free(ts.first);
    free(ts.end);
    free(ps.first);
    free(ps.end);
    free(count_t);
    free(count_p);
    free(in_lcs);
    return st;
}

static nu_status score_type(int32_t type, const rouge_text *target, const rouge_text *pred,
                            size_t n_ids, nu_rouge_score *out, nu_error *err) {
    if (type == NU_ROUGE_LSUM) return rouge_lsum(target, pred, n_ids, out, err);
    if (type == NU_ROUGE_L) {
        *out = (nu_rouge_score){0};
        if (target->words.n == 0 || pred->words.n == 0) return NU_OK;
        size_t lcs;
        if (!lcs_length(target->ids, target->words.n, pred->ids, pred->words.n, &lcs))
            return nu_fail(err, NU_ERR_NOMEM, "out of memory");
        *out = from_counts((double)lcs, (double)pred->words.n, (double)target->words.n);
        return NU_OK;
    }
    if (!rouge_n(target, pred, type, out)) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    return NU_OK;
}

/* ---- the API -------------------------------------------------------------- */

nu_status nu_rouge_type(const char *name, int32_t *type, nu_error *err) {
    if (name && strcmp(name, "rougeL") == 0) {
        *type = NU_ROUGE_L;
        return NU_OK;
    }
    if (name && strcmp(name, "rougeLsum") == 0) {
        *type = NU_ROUGE_LSUM;
        return NU_OK;
    }
    /* rouge-score: rouge[0-9]$ with a positive n */
    if (name && strncmp(name, "rouge", 5) == 0 && name[5] >= '1' && name[5] <= '9' && !name[6]) {
        *type = name[5] - '0';
        return NU_OK;
    }
    return nu_fail(err, NU_ERR_INVALID_ARG,
                   "unknown ROUGE type '%s' (rouge1 .. rouge9, rougeL, rougeLsum)",
                   name ? name : "(null)");
}

static bool valid_type(int32_t t) {
    return (t >= 1 && t <= 9) || t == NU_ROUGE_L || t == NU_ROUGE_LSUM;
}

nu_status nu_rouge(const int32_t *types, int32_t n_types, bool stemmer, const char *const *targets,
                   int32_t n_targets, const char *prediction, nu_rouge_score *out, nu_error *err) {
    if (n_types < 1 || !types || !out)
        return nu_fail(err, NU_ERR_INVALID_ARG, "no ROUGE type asked for");
    for (int32_t i = 0; i < n_types; i++)
        if (!valid_type(types[i]))
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "ROUGE type %d is not one of 1..9, "
                           "NU_ROUGE_L, NU_ROUGE_LSUM",
                           types[i]);
    if (n_targets < 1 || !targets)
        return nu_fail(err, NU_ERR_INVALID_ARG, "ROUGE needs at least one target");
    nu_word_ids vocab = {0};
    rouge_text pred = {0}, target = {0};
    nu_status st = NU_OK;
    if (!rouge_tokenize(&pred, prediction ? prediction : "", stemmer, &vocab))
        st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
    /* several targets: per type, the one with the highest F-measure (the
     * first on a tie), as rouge-score's score_multi */
    for (int32_t k = 0; st == NU_OK && k < n_targets; k++) {
        rouge_text_free(&target);
        if (!rouge_tokenize(&target, targets[k] ? targets[k] : "", stemmer, &vocab)) {
            st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
            break;
        }
        for (int32_t i = 0; st == NU_OK && i < n_types; i++) {
            nu_rouge_score s;
            st = score_type(types[i], &target, &pred, vocab.n, &s, err);
            if (st == NU_OK && (k == 0 || s.fmeasure > out[i].fmeasure)) out[i] = s;
        }
    }
    rouge_text_free(&pred);
    rouge_text_free(&target);
    nu_word_ids_free(&vocab);
    return st;
}

/* ---- bootstrap ------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform integer in [0, n), without modulo bias. */
static uint64_t uniform_below(uint64_t *s, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = splitmix64(s);
    while (x >= limit);
    return x % n;
}

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* numpy.percentile's default (linear): the value at rank q/100 * (n - 1). */
static double percentile(const double *sorted, int32_t n, double q) {
    const double rank = q / 100 * (n - 1);
    int32_t lo = (int32_t)floor(rank);
    if (lo >= n - 1) return sorted[n - 1];
    const double f = rank - lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * f;
}

nu_status nu_rouge_bootstrap(const nu_rouge_score *scores, int64_t n, double confidence,
                             int32_t n_samples, uint64_t seed, nu_rouge_interval *out,
                             nu_error *err) {
    if (n < 1 || !scores) return nu_fail(err, NU_ERR_INVALID_ARG, "no scores to aggregate");
    if (!(confidence >= 0 && confidence <= 1))
        return nu_fail(err, NU_ERR_INVALID_ARG, "confidence %g must be in [0, 1]", confidence);
    if (n_samples < 1)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_samples %d must be positive", n_samples);
    double *means = malloc((size_t)n_samples * 3 * sizeof *means);
    if (!means) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    uint64_t state = seed;
    for (int32_t k = 0; k < n_samples; k++) {
        double sum[3] = {0, 0, 0};
        for (int64_t i = 0; i < n; i++) {
            const nu_rouge_score *s = &scores[uniform_below(&state, (uint64_t)n)];
            sum[0] += s->precision;
            sum[1] += s->recall;
            sum[2] += s->fmeasure;
        }
        for (int m = 0; m < 3; m++) means[m * n_samples + k] = sum[m] / (double)n;
    }
    const double delta = (1 - confidence) / 2;
    const double q[3] = {100 * delta, 100 * 0.5, 100 * (1 - delta)};
    double v[3][3]; /* [bound][measure] */
    for (int m = 0; m < 3; m++) {
        double *col = means + (size_t)m * n_samples;
        qsort(col, (size_t)n_samples, sizeof *col, compare_doubles);
        for (int b = 0; b < 3; b++) v[b][m] = percentile(col, n_samples, q[b]);
    }
    free(means);
    out->low = (nu_rouge_score){v[0][0], v[0][1], v[0][2]};
    out->mid = (nu_rouge_score){v[1][0], v[1][1], v[1][2]};
    out->high = (nu_rouge_score){v[2][0], v[2][1], v[2][2]};
    return NU_OK;
}
