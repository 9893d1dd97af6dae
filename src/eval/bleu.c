/* bleu.c - BLEU as sacreBLEU and NLTK compute it (nucleus.h, "Text
 * metrics: BLEU"): a segment's sufficient statistics (clipped n-gram
 * matches and totals per order, hypothesis and closest reference lengths),
 * their sum over a corpus, and the score with each tool's smoothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "eval.h"

/* sacreBLEU's floor for ln 0 (utils.my_log). */
#define SACREBLEU_LOG_ZERO (-9999999999.0)
/* NLTK's SmoothingFunction defaults (method6's alpha, method4's k) and the
 * order method5 always adds (modified_precision(..., 5)). */
#define NLTK_ALPHA 5.0
#define NLTK_K 5.0
#define NLTK_METHOD5_ORDER 5

nu_bleu_params nu_bleu_default_params(nu_bleu_flavor flavor) {
    nu_bleu_params p = {.flavor = flavor, .smooth_value = -1, .max_order = 4};
    if (flavor == NU_BLEU_NLTK) {
        p.tokenizer = NU_BLEU_TOK_NONE;
        p.smooth = NU_BLEU_NLTK_METHOD0;
    }
    return p;
}

/* The n-gram order the score uses. */
static int32_t score_order(const nu_bleu_params *p) {
    if (p->flavor == NU_BLEU_SACREBLEU) return p->max_order;
    return p->n_weights ? p->n_weights : 4;
}

static nu_status check_params(const nu_bleu_params *p, nu_error *err) {
    if (!p) return nu_fail(err, NU_ERR_INVALID_ARG, "no BLEU parameters");
    if (p->flavor != NU_BLEU_SACREBLEU && p->flavor != NU_BLEU_NLTK)
        return nu_fail(err, NU_ERR_INVALID_ARG, "unknown BLEU flavor %d", (int)p->flavor);
    if ((unsigned)p->tokenizer > NU_BLEU_TOK_NONE)
        return nu_fail(err, NU_ERR_INVALID_ARG, "unknown BLEU tokenizer %d", (int)p->tokenizer);
    const bool nltk_method = p->smooth >= NU_BLEU_NLTK_METHOD0 && p->smooth <= NU_BLEU_NLTK_METHOD7;
    if ((unsigned)p->smooth > NU_BLEU_NLTK_METHOD7 || nltk_method != (p->flavor == NU_BLEU_NLTK))
        return nu_fail(err, NU_ERR_INVALID_ARG, "smoothing %d is not one of the %s methods",
                       (int)p->smooth, p->flavor == NU_BLEU_NLTK ? "NLTK" : "sacreBLEU");
    if (isnan(p->smooth_value) || isinf(p->smooth_value))
        return nu_fail(err, NU_ERR_INVALID_ARG, "the smoothing value must be a finite number");
    if (p->max_order < 1 || p->max_order > NU_BLEU_MAX_ORDER)
        return nu_fail(err, NU_ERR_INVALID_ARG, "max_order %d must be 1..%d", p->max_order,
                       NU_BLEU_MAX_ORDER);
    if (p->n_weights < 0 || p->n_weights > NU_BLEU_MAX_ORDER)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_weights %d must be 0..%d", p->n_weights,
                       NU_BLEU_MAX_ORDER);
    for (int32_t i = 0; i < p->n_weights; i++)
        if (!isfinite(p->weights[i]))
            return nu_fail(err, NU_ERR_INVALID_ARG, "weight %d is not a finite number", i + 1);
    return NU_OK;
}

/* ---- a segment's statistics ----------------------------------------------- */

/* A tokenized text: its code points, words and word ids. */
typedef struct text_ids {
    nu_cps cps;
    nu_words words;
    int32_t *ids;
} text_ids;

static void text_ids_free(text_ids *t) {
    nu_cps_free(&t->cps);
    nu_words_free(&t->words);
    free(t->ids);
    *t = (text_ids){0};
}

/* Tokenizes text and gives each word its id in v (added when add; -1 for a
 * word v does not know otherwise). */
static bool text_ids_make(text_ids *t, const nu_bleu_params *p, const char *text, nu_word_ids *v,
                          bool add) {
    t->words.n = 0;
    if (!nu_bleu_tokenize(p->tokenizer, p->lowercase, text ? text : "", &t->cps) ||
        !nu_words_split(&t->words, t->cps.v, t->cps.n))
        return false;
    free(t->ids);
    t->ids = malloc((t->words.n + 1) * sizeof *t->ids);
    if (!t->ids) return false;
    for (size_t i = 0; i < t->words.n; i++) {
        t->ids[i] = nu_word_id(v, t->cps.v + t->words.start[i], t->words.len[i], add);
        if (t->ids[i] == -2) return false;
    }
    return true;
}

/* Raises every hypothesis n-gram's `best` to its count in one reference. */
static bool clip_by_reference(nu_ngrams *hyp, const int32_t *ids, size_t len, int32_t orders) {
    bool nomem = false;
    nu_ngrams_clear_cur(hyp);
    for (int32_t n = 1; n <= orders; n++)
        for (size_t i = 0; i + (size_t)n <= len; i++) {
            nu_ngram *e = nu_ngrams_find(hyp, ids + i, n, false, &nomem);
            if (nomem) return false;
            if (e) e->cur++;
        }
    for (size_t i = 0; i < hyp->cap; i++)
        if (hyp->e[i].ids && hyp->e[i].cur > hyp->e[i].best) hyp->e[i].best = hyp->e[i].cur;
    return true;
}

/* The reference length closest to hyp_len, the shorter on a tie (both
 * tools). */
static int64_t closest_length(const int64_t *lens, int32_t n, int64_t hyp_len) {
    int64_t best = -1;
    for (int32_t i = 0; i < n; i++) {
        const int64_t d = llabs(lens[i] - hyp_len), bd = llabs(best - hyp_len);
        if (best < 0 || d < bd || (d == bd && lens[i] < best)) best = lens[i];
    }
    return best < 0 ? 0 : best;
}

nu_status nu_bleu_segment(const nu_bleu_params *p, const char *hyp, const char *const *refs,
                          int32_t n_refs, nu_bleu_stats *out, nu_error *err) {
    nu_status st = check_params(p, err);
    if (st) return st;
    if (n_refs < 1 || !refs)
        return nu_fail(err, NU_ERR_INVALID_ARG, "a segment needs at least one reference");
    *out = (nu_bleu_stats){.n_segments = 1};
    const bool nltk = p->flavor == NU_BLEU_NLTK;
    const int32_t order = score_order(p);
    /* NLTK's method5 also reads the 5-gram precision */
    const int32_t orders = nltk && order < NLTK_METHOD5_ORDER ? NLTK_METHOD5_ORDER : order;
    nu_word_ids vocab = {0};
    nu_ngrams table = {0};
    text_ids h = {0}, r = {0};
    int64_t *ref_lens = malloc((size_t)n_refs * sizeof *ref_lens);
    int32_t used = 0;
    bool ok = ref_lens && text_ids_make(&h, p, hyp, &vocab, true) &&
              nu_ngrams_count(&table, h.ids, h.words.n, 1, orders);
    for (int32_t k = 0; ok && k < n_refs; k++) {
        if (!nltk && (!refs[k] || !refs[k][0])) continue; /* sacreBLEU drops empty references */
        ok = text_ids_make(&r, p, refs[k], &vocab, false) &&
             clip_by_reference(&table, r.ids, r.words.n, orders);
        if (ok) ref_lens[used++] = (int64_t)r.words.n;
    }
    if (ok && used == 0)
        st = nu_fail(err, NU_ERR_INVALID_ARG, "every reference of the segment is empty");
    else if (!ok)
        st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
    if (st == NU_OK) {
        int64_t correct[NU_BLEU_MAX_ORDER] = {0}, total[NU_BLEU_MAX_ORDER] = {0};
        for (size_t i = 0; i < table.cap; i++) {
            const nu_ngram *e = &table.e[i];
            if (!e->ids) continue;
            total[e->n - 1] += e->count;
            correct[e->n - 1] += e->count < e->best ? e->count : e->best;
        }
        for (int32_t n = 0; n < orders; n++) {
            /* NLTK: the denominator of a segment's precision is at least 1 */
            if (nltk && total[n] < 1) total[n] = 1;
            if (n < NU_BLEU_MAX_ORDER) {
                out->correct[n] = correct[n];
                out->total[n] = total[n];
            }
        }
        out->hyp_len = out->last_hyp_len = (int64_t)h.words.n;
        out->ref_len = closest_length(ref_lens, used, out->hyp_len);
        out->n_refs = used;
        if (nltk) {
            out->last_correct5 = correct[NLTK_METHOD5_ORDER - 1];
            out->last_total5 = total[NLTK_METHOD5_ORDER - 1];
        }
    }
    free(ref_lens);
    text_ids_free(&h);
    text_ids_free(&r);
    nu_ngrams_free(&table);
    nu_word_ids_free(&vocab);
    return st;
}

void nu_bleu_stats_add(nu_bleu_stats *sum, const nu_bleu_stats *seg) {
    if (sum->n_segments == 0)
        sum->n_refs = seg->n_refs;
    else if (sum->n_refs != seg->n_refs)
        sum->n_refs = -1;
    sum->hyp_len += seg->hyp_len;
    sum->ref_len += seg->ref_len;
    for (int32_t n = 0; n < NU_BLEU_MAX_ORDER; n++) {
        sum->correct[n] += seg->correct[n];
        sum->total[n] += seg->total[n];
    }
    sum->n_segments += seg->n_segments;
    sum->last_hyp_len = seg->last_hyp_len;
    sum->last_correct5 = seg->last_correct5;
    sum->last_total5 = seg->last_total5;
}

/* ---- sacreBLEU's score ---------------------------------------------------- */

static double sacrebleu_default_value(nu_bleu_smooth s) {
    return s == NU_BLEU_SMOOTH_FLOOR ? 0.1 : s == NU_BLEU_SMOOTH_ADD_K ? 1 : 0;
}

/* BLEU.compute_bleu: precisions in percent, the zero ones smoothed. */
static void sacrebleu_score(const nu_bleu_params *p, const nu_bleu_stats *s, nu_bleu_result *r) {
    const int32_t order = p->max_order;
    const double value =
        p->smooth_value >= 0 ? p->smooth_value : sacrebleu_default_value(p->smooth);
    r->order = order;
    if (s->hyp_len < s->ref_len)
        r->bp = s->hyp_len > 0 ? exp(1.0 - (double)s->ref_len / (double)s->hyp_len) : 0.0;
    else
        r->bp = 1.0;
    bool any = false;
    for (int32_t n = 0; n < order; n++) any = any || s->correct[n] != 0;
    if (!any) return; /* no match at all: 0 (sacreBLEU #141) */
    double mteval = 1;
    int32_t eff = order;
    for (int32_t n = 1; n <= order; n++) {
        double correct = (double)s->correct[n - 1], total = (double)s->total[n - 1];
        if (p->smooth == NU_BLEU_SMOOTH_ADD_K && n > 1) {
            correct += value;
            total += value;
        }
        if (total == 0) break;
        if (p->effective_order) eff = n;
        if (correct == 0) {
            if (p->smooth == NU_BLEU_SMOOTH_EXP) {
                mteval *= 2;
                r->precisions[n - 1] = 100.0 / (mteval * total);
            } else if (p->smooth == NU_BLEU_SMOOTH_FLOOR) {
                r->precisions[n - 1] = 100.0 * value / total;
            }
        } else {
            r->precisions[n - 1] = 100.0 * correct / total;
        }
    }
    double sum = 0;
    for (int32_t n = 0; n < eff; n++)
        sum += r->precisions[n] == 0 ? SACREBLEU_LOG_ZERO : log(r->precisions[n]);
    r->score = r->bp * exp(sum / eff);
}

/* ---- NLTK's score --------------------------------------------------------- */

/* Neumaier's compensated sum, close to math.fsum for a few terms. */
static double compensated_sum(const double *x, int32_t n) {
    double s = 0, c = 0;
    for (int32_t i = 0; i < n; i++) {
        const double t = s + x[i];
        c += fabs(s) >= fabs(x[i]) ? (s - t) + x[i] : (x[i] - t) + s;
        s = t;
    }
    return s + c;
}

/* SmoothingFunction().methodN over the corpus precisions num[i] / den[i];
 * p receives the smoothed values. */
static nu_status nltk_smooth(const nu_bleu_params *p, const nu_bleu_stats *s, int32_t order,
                             double *prec, nu_error *err) {
    const double epsilon = p->smooth_value >= 0 ? p->smooth_value : 0.1;
    const int64_t *num = s->correct, *den = s->total;
    for (int32_t i = 0; i < order; i++) prec[i] = (double)num[i] / (double)den[i];
    int method = (int)(p->smooth - NU_BLEU_NLTK_METHOD0);
    switch (method) {
    case 0: /* zero precisions become the smallest positive double */
        for (int32_t i = 0; i < order; i++)
            if (num[i] == 0) prec[i] = 2.2250738585072014e-308;
        return NU_OK;
    case 1:
        for (int32_t i = 0; i < order; i++)
            if (num[i] == 0) prec[i] = ((double)num[i] + epsilon) / (double)den[i];
        return NU_OK;
    case 2:
        for (int32_t i = 1; i < order; i++) prec[i] = (double)(num[i] + 1) / (double)(den[i] + 1);
        return NU_OK;
    case 3: {
        double k = 1;
        for (int32_t i = 0; i < order; i++)
            if (num[i] == 0) {
                k *= 2;
                prec[i] = 1.0 / (k * (double)den[i]);
            }
        return NU_OK;
    }
    case 4:
    case 7: {
        double k = 1;
        const double len = (double)s->hyp_len;
        for (int32_t i = 0; i < order; i++)
            if (num[i] == 0 && s->hyp_len > 1) {
                k *= 2;
                prec[i] = 1.0 / (k * NLTK_K / log(len)) / (double)den[i];
            }
        if (method == 4) return NU_OK;
        __attribute__((fallthrough)); /* method7 is method4 then method5 */
    }
    case 5: {
        /* the average of the previous (smoothed), own and next precision; the
         * one after the last is the last segment's 5-gram precision */
        double next[NU_BLEU_MAX_ORDER + 1];
        memcpy(next, prec, (size_t)order * sizeof *prec);
        next[order] = (double)s->last_correct5 / (double)(s->last_total5 > 0 ? s->last_total5 : 1);
        double m = prec[0] + 1;
        for (int32_t i = 0; i < order; i++) {
            prec[i] = (m + next[i] + next[i + 1]) / 3;
            m = prec[i];
        }
        return NU_OK;
    }
    case 6:
        if (order < 3 || num[2] == 0)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "NLTK's method6 needs a non-zero trigram precision");
        for (int32_t i = 2; i < order; i++) {
            const double pi0 = prec[i - 2] == 0 ? 0 : prec[i - 1] * prec[i - 1] / prec[i - 2];
            const int64_t l = s->last_hyp_len - i > 0 ? s->last_hyp_len - i : 0;
            prec[i] = ((double)num[i] + NLTK_ALPHA * pi0) / ((double)l + NLTK_ALPHA);
        }
        return NU_OK;
    }
    return NU_OK;
}

static nu_status nltk_score(const nu_bleu_params *p, const nu_bleu_stats *s, nu_bleu_result *r,
                            nu_error *err) {
    int32_t order = score_order(p);
    double w[NU_BLEU_MAX_ORDER];
    for (int32_t i = 0; i < order; i++) w[i] = p->n_weights ? p->weights[i] : 0.25;
    r->order = order;
    const int64_t c = s->hyp_len, ref = s->ref_len;
    r->bp = c > ref ? 1.0 : c == 0 ? 0.0 : exp(1.0 - (double)ref / (double)c);
    if (s->correct[0] == 0) return NU_OK; /* no matching unigram: 0 */
    nu_status st = nltk_smooth(p, s, order, r->precisions, err);
    if (st) return st;
    int32_t used = order;
    bool uniform4 = p->n_weights == 0 || (p->n_weights == 4 && w[0] == 0.25 && w[1] == 0.25 &&
                                          w[2] == 0.25 && w[3] == 0.25);
    if (p->auto_reweigh && c < 4 && uniform4) {
        used = (int32_t)c;
        for (int32_t i = 0; i < used; i++) w[i] = 1.0 / (double)c;
    }
    double terms[NU_BLEU_MAX_ORDER];
    int32_t k = 0;
    for (int32_t i = 0; i < used && i < order; i++)
        if (r->precisions[i] > 0) terms[k++] = w[i] * log(r->precisions[i]);
    r->score = r->bp * exp(compensated_sum(terms, k));
    return NU_OK;
}

nu_status nu_bleu_compute(const nu_bleu_params *p, const nu_bleu_stats *s, nu_bleu_result *r,
                          nu_error *err) {
    nu_status st = check_params(p, err);
    if (st) return st;
    *r = (nu_bleu_result){.hyp_len = s->hyp_len, .ref_len = s->ref_len};
    r->ratio = s->ref_len ? (double)s->hyp_len / (double)s->ref_len : 0;
    if (p->flavor == NU_BLEU_NLTK) return nltk_score(p, s, r, err);
    sacrebleu_score(p, s, r);
    return NU_OK;
}

nu_status nu_bleu_corpus(const nu_bleu_params *p, const char *const *hyps, int64_t n,
                         const char *const *const *refs, int32_t n_refs, nu_bleu_result *out,
                         nu_error *err) {
    if (n_refs < 1 || !refs || (n > 0 && !hyps))
        return nu_fail(err, NU_ERR_INVALID_ARG, "corpus BLEU needs hypotheses and references");
    const char **seg_refs = malloc((size_t)n_refs * sizeof *seg_refs);
    if (!seg_refs) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    nu_bleu_stats sum = {0}, seg;
    nu_status st = check_params(p, err);
    for (int64_t i = 0; st == NU_OK && i < n; i++) {
        for (int32_t r = 0; r < n_refs; r++) seg_refs[r] = refs[r] ? refs[r][i] : NULL;
        nu_error seg_err;
        st = nu_bleu_segment(p, hyps[i], seg_refs, n_refs, &seg, &seg_err);
        if (st == NU_ERR_INVALID_ARG)
            st = nu_fail(err, st, "segment %lld: %s", (long long)i + 1, seg_err.message);
        else if (st)
            st = nu_fail(err, st, "%s", seg_err.message);
        if (st == NU_OK) nu_bleu_stats_add(&sum, &seg);
    }
    free(seg_refs);
    return st ? st : nu_bleu_compute(p, &sum, out, err);
}

nu_status nu_bleu_signature(const nu_bleu_params *p, const nu_bleu_stats *stats, char *buf,
                            size_t cap, nu_error *err) {
    nu_status st = check_params(p, err);
    if (st) return st;
    if (p->flavor != NU_BLEU_SACREBLEU)
        return nu_fail(err, NU_ERR_INVALID_ARG, "only sacreBLEU has a signature");
    static const char *const toks[] = {"13a", "intl", "zh", "char", "none"};
    static const char *const smooths[] = {"exp", "floor", "add-k", "none"};
    char nrefs[24], smooth[48];
    if (stats->n_refs < 0)
        snprintf(nrefs, sizeof nrefs, "var");
    else
        snprintf(nrefs, sizeof nrefs, "%d", stats->n_refs);
    if (p->smooth == NU_BLEU_SMOOTH_FLOOR || p->smooth == NU_BLEU_SMOOTH_ADD_K)
        snprintf(smooth, sizeof smooth, "%s[%.2f]", smooths[p->smooth],
                 p->smooth_value >= 0 ? p->smooth_value : sacrebleu_default_value(p->smooth));
    else
        snprintf(smooth, sizeof smooth, "%s", smooths[p->smooth]);
    int n = snprintf(buf, cap, "nrefs:%s|case:%s|eff:%s|tok:%s|smooth:%s|version:nucleus-%s", nrefs,
                     p->lowercase ? "lc" : "mixed", p->effective_order ? "yes" : "no",
                     toks[p->tokenizer], smooth, NU_VERSION_STRING);
    if (n < 0 || (size_t)n >= cap)
        return nu_fail(err, NU_ERR_BUFFER_SMALL, "the signature needs %d bytes", n + 1);
    return NU_OK;
}
