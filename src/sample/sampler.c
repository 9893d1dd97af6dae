/* sampler.c - choosing the next token: the sampler object, its parameters
 * and stage order, the history it keeps (for the repetition stages), the
 * stages that need that state (logit bias, penalties, no-repeat-n-gram, the
 * repetition guard, end-of-generation suppression), and the chain itself:
 * stages in the configured order, then a seeded draw, mirostat or the
 * argmax.
 *
 * The stateless stages (top-k, top-p, min-p, typical-p, temperature and
 * its dynamic form, top-nσ, XTC) and the RNG live in sampler_stages.c, DRY
 * in sampler_dry.c, the bans in sampler_bans.c, mirostat's truncations in
 * sampler_mirostat.c, the watermark's green lists in watermark.c.
 *
 * Cost per token: one copy of the logits into the candidate array, then each
 * stage. While no filtering stage has run, the candidate array is still
 * indexed by token id ("identity"), and the state-keeping stages touch only
 * the tokens they change (O(history window), not O(vocabulary)). Nothing is
 * allocated per token: every buffer is sized by nu_sampler_new, except the
 * history, which doubles a few times per generation while it fills. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bans.h"
#include "dry.h"
#include "error.h"
#include "mirostat.h"
#include "nucleus.h"
#include "think_budget.h"
#include "watermark.h"

struct nu_sampler {
    nu_sampler_params p; /* order filled in; logit_bias points to bias */
    int32_t n_vocab;
    nu_rng rng;
    nu_candidate *cand; /* n_vocab entries: the working array */
    nu_candidates last; /* what the chain left at the last sample */
    bool have_last;
    bool last_normalised; /* last's probs are up to date */
    nu_logit_bias *bias;  /* a copy of params->logit_bias */
    float *bias_table;    /* n_vocab summed biases, when there are biases */
    int32_t *eog;         /* end-of-generation tokens */
    int32_t n_eog;
    /* History: the last tokens (prompt ones first when penalize_prompt).
     * Bounded to the last keep_hist tokens unless the n-gram ban needs all. */
    int32_t *hist;
    size_t n_hist, cap_hist, keep_hist;
    bool hist_unbounded;
    bool window_lost;    /* out of memory dropped part of the penalty window */
    int64_t n_generated; /* nu_sampler_accept calls since new or reset */
    /* The penalty window: count per token, and the tokens with count > 0. */
    int32_t *counts;
    int32_t *seen;
    size_t n_seen;
    /* A token set for the stages that work on non-identity arrays: token t
     * is in it when mark[t] == epoch. */
    uint32_t *mark;
    uint32_t epoch;
    nu_stage_observer observer;
    void *observer_user;
    nu_candidate *before;      /* n_vocab: the observer's copy */
    nu_grammar_state *grammar; /* constrains the tokens drawn, or NULL */
    /* The watermark when p.watermark has a key (p.watermark.key is not kept:
     * the caller's string need not outlive nu_sampler_new). */
    bool watermark_on;
    nu_watermark wm;
    nu_think_state think; /* the thinking budget (think.on: set) */
    bool dry_on;          /* dry_multiplier > 0 and a window */
    nu_dry dry;
    nu_bans bans;
    float mu;              /* mirostat's truncation level */
    bool mirostat_pending; /* the last chain was mirostat's: accept updates mu */
};

/* ---- parameters ------------------------------------------------------------ */

static const nu_stage_kind default_order[] = {NU_STAGE_LOGIT_BIAS,
                                              NU_STAGE_PENALTIES,
                                              NU_STAGE_DRY,
                                              NU_STAGE_NO_REPEAT_NGRAM,
                                              NU_STAGE_REPETITION_GUARD,
                                              NU_STAGE_TOP_N_SIGMA,
                                              NU_STAGE_TOP_K,
                                              NU_STAGE_TYPICAL_P,
                                              NU_STAGE_TOP_P,
                                              NU_STAGE_MIN_P,
                                              NU_STAGE_XTC,
                                              NU_STAGE_TEMPERATURE};

static const nu_stage_kind temp_first_order[] = {NU_STAGE_LOGIT_BIAS,
                                                 NU_STAGE_PENALTIES,
                                                 NU_STAGE_DRY,
                                                 NU_STAGE_NO_REPEAT_NGRAM,
                                                 NU_STAGE_REPETITION_GUARD,
                                                 NU_STAGE_TEMPERATURE,
                                                 NU_STAGE_TOP_N_SIGMA,
                                                 NU_STAGE_TOP_K,
                                                 NU_STAGE_TOP_P,
                                                 NU_STAGE_MIN_P,
                                                 NU_STAGE_TYPICAL_P,
                                                 NU_STAGE_XTC};

/* llama.cpp's default DRY sequence breakers. */
static const char *const default_breakers[] = {"\n", ":", "\"", "*"};

#define N_DEFAULT_STAGES ((int32_t)(sizeof default_order / sizeof *default_order))

nu_sampler_params nu_sampler_default_params(void) {
    nu_sampler_params p = {.temperature = 0.8f,
                           .top_k = 40,
                           .top_p = 0.95f,
                           .min_p = 0.05f,
                           .typical_p = 1.0f,
                           .repeat_penalty = 1.0f,
                           .frequency_penalty = 0.0f,
                           .presence_penalty = 0.0f,
                           .penalty_last_n = 64,
                           .penalize_prompt = false,
                           .no_repeat_ngram_size = 0,
                           .guard_strength = 0.0f,
                           .guard_window = 64,
                           .min_tokens = 0,
                           .ignore_eos = false,
                           .logit_bias = NULL,
                           .n_logit_bias = 0,
                           .dry_multiplier = 0.0f,
                           .dry_base = 1.75f,
                           .dry_allowed_length = 2,
                           .dry_penalty_last_n = 64,
                           .dry_sequence_breakers = default_breakers,
                           .n_dry_sequence_breakers = 4,
                           .xtc_probability = 0.0f,
                           .xtc_threshold = 0.1f,
                           .top_n_sigma = -1.0f,
                           .dynatemp_range = 0.0f,
                           .dynatemp_exponent = 1.0f,
                           .mirostat = 0,
                           .mirostat_tau = 5.0f,
                           .mirostat_eta = 0.1f,
                           .seed = 0xC0FFEE,
                           .n_stages = 0};
    p.watermark = nu_watermark_default_params();
    return p;
}

/* lo <= x <= hi, false for NaN. */
static bool in_range(float x, float lo, float hi) {
    return x >= lo && x <= hi;
}

/* The probability-shaped parameters and the temperature. */
static nu_status check_filters(const nu_sampler_params *p, nu_error *err) {
    if (!in_range(p->temperature, 0.0f, 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "temperature %g is out of range (0..100)",
                       p->temperature);
    if (p->top_k < 0)
        return nu_fail(err, NU_ERR_INVALID_ARG, "top_k %d must be >= 0 (0 turns it off)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "top_p %g is out of range (0 < top_p <= 1)",
                       p->top_p);
    if (!in_range(p->min_p, 0.0f, 1.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "min_p %g is out of range (0..1)", p->min_p);
    if (!(p->typical_p > 0.0f && p->typical_p <= 1.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "typical_p %g is out of range (0 < typical_p <= 1)",
                       p->typical_p);
    return NU_OK;
}

/* The repetition parameters. */
static nu_status check_repetition(const nu_sampler_params *p, nu_error *err) {
    if (!(p->repeat_penalty > 0.0f && p->repeat_penalty <= 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "repeat_penalty %g is out of range (0 < repeat_penalty <= 100)",
                       p->repeat_penalty);
    if (!in_range(p->frequency_penalty, -2.0f, 2.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "frequency_penalty %g is out of range (-2..2)",
                       p->frequency_penalty);
    if (!in_range(p->presence_penalty, -2.0f, 2.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "presence_penalty %g is out of range (-2..2)",
                       p->presence_penalty);
    if (p->penalty_last_n < -1)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "penalty_last_n %d must be >= -1 (0 is off, -1 the whole history)",
                       p->penalty_last_n);
    if (p->no_repeat_ngram_size < 0)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "no_repeat_ngram_size %d must be >= 0 (0 turns it off)",
                       p->no_repeat_ngram_size);
    if (!in_range(p->guard_strength, 0.0f, 10.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "guard_strength %g is out of range (0..10)",
                       p->guard_strength);
    if (p->guard_window < 2 || p->guard_window > 512)
        return nu_fail(err, NU_ERR_INVALID_ARG, "guard_window %d is out of range (2..512)",
                       p->guard_window);
    if (p->min_tokens < 0)
        return nu_fail(err, NU_ERR_INVALID_ARG, "min_tokens %d must be >= 0", p->min_tokens);
    return NU_OK;
}

/* DRY, XTC, top-nσ, the dynamic temperature and mirostat. */
static nu_status check_newer_stages(const nu_sampler_params *p, nu_error *err) {
    if (!in_range(p->dry_multiplier, 0.0f, 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "dry_multiplier %g is out of range (0..100)",
                       p->dry_multiplier);
    if (!in_range(p->dry_base, 1.0f, 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "dry_base %g is out of range (1..100)",
                       p->dry_base);
    if (p->dry_allowed_length < 0 || p->dry_allowed_length > (1 << 30))
        return nu_fail(err, NU_ERR_INVALID_ARG, "dry_allowed_length %d is out of range (0..2^30)",
                       p->dry_allowed_length);
    if (p->dry_penalty_last_n < -1)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "dry_penalty_last_n %d must be >= -1 (0 is off, -1 the whole history)",
                       p->dry_penalty_last_n);
    if (!in_range(p->xtc_probability, 0.0f, 1.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "xtc_probability %g is out of range (0..1)",
                       p->xtc_probability);
    if (!in_range(p->xtc_threshold, 0.0f, 1.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "xtc_threshold %g is out of range (0..1)",
                       p->xtc_threshold);
    if (!in_range(p->top_n_sigma, -1.0f, 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "top_n_sigma %g is out of range (-1..100; <= 0 turns it off)",
                       p->top_n_sigma);
    if (!in_range(p->dynatemp_range, 0.0f, 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "dynatemp_range %g is out of range (0..100)",
                       p->dynatemp_range);
    if (!in_range(p->dynatemp_exponent, 0.0f, 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "dynatemp_exponent %g is out of range (0..100)",
                       p->dynatemp_exponent);
    if (p->mirostat < 0 || p->mirostat > 2)
        return nu_fail(err, NU_ERR_INVALID_ARG, "mirostat %d must be 0 (off), 1 or 2", p->mirostat);
    if (!in_range(p->mirostat_tau, 0.0f, 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "mirostat_tau %g is out of range (0..100)",
                       p->mirostat_tau);
    if (!in_range(p->mirostat_eta, 0.0f, 1.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "mirostat_eta %g is out of range (0..1)",
                       p->mirostat_eta);
    return NU_OK;
}

/* A list of n strings at list; each 1..max_len bytes (max_len 0: any). */
static nu_status check_strings(const char *what, const char *const *list, int32_t n, size_t max_len,
                               nu_error *err) {
    if (n < 0 || (n > 0 && !list))
        return nu_fail(err, NU_ERR_INVALID_ARG, "%s: %d entries at %p", what, n,
                       (const void *)list);
    for (int32_t i = 0; i < n; i++) {
        size_t len = list[i] ? strlen(list[i]) : 0;
        if (len == 0) return nu_fail(err, NU_ERR_INVALID_ARG, "%s[%d] is empty", what, i);
        if (max_len && len > max_len)
            return nu_fail(err, NU_ERR_INVALID_ARG, "%s[%d] has %zu bytes (at most %zu)", what, i,
                           len, max_len);
    }
    return NU_OK;
}

/* The breaker and ban lists (ban tokens' range is checked by nu_sampler_new). */
static nu_status check_lists(const nu_sampler_params *p, nu_error *err) {
    nu_status st = check_strings("dry_sequence_breakers", p->dry_sequence_breakers,
                                 p->n_dry_sequence_breakers, NU_DRY_MAX_BREAKER_LEN, err);
    if (!st) st = check_strings("banned_strings", p->banned_strings, p->n_banned_strings, 0, err);
    if (st) return st;
    if (p->n_banned_tokens < 0 || (p->n_banned_tokens > 0 && !p->banned_tokens))
        return nu_fail(err, NU_ERR_INVALID_ARG, "banned_tokens: %d entries at %p",
                       p->n_banned_tokens, (const void *)p->banned_tokens);
    for (int32_t i = 0; i < p->n_banned_tokens; i++) {
        const nu_token_seq *q = &p->banned_tokens[i];
        if (q->n < 1 || !q->tokens)
            return nu_fail(err, NU_ERR_INVALID_ARG, "banned_tokens[%d] is empty", i);
        for (int32_t k = 0; k < q->n; k++)
            if (q->tokens[k] < 0)
                return nu_fail(err, NU_ERR_INVALID_ARG, "banned_tokens[%d]: token %d is negative",
                               i, q->tokens[k]);
    }
    return NU_OK;
}

/* The bias list (its tokens' range is checked by nu_sampler_new). */
static nu_status check_bias(const nu_sampler_params *p, nu_error *err) {
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return nu_fail(err, NU_ERR_INVALID_ARG, "logit_bias: %d entries at %p", p->n_logit_bias,
                       (const void *)p->logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const nu_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0)
            return nu_fail(err, NU_ERR_INVALID_ARG, "logit_bias token %d is negative", b->token);
        if (isnan(b->bias) || b->bias == INFINITY)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "logit_bias of token %d is %g (finite or -inf only)", b->token, b->bias);
    }
    return NU_OK;
}

/* Known stages, none twice, at most NU_MAX_STAGES. */
static nu_status check_order(const nu_stage_kind *order, int32_t n, nu_error *err) {
    if (n < 0 || n > NU_MAX_STAGES)
        return nu_fail(err, NU_ERR_INVALID_ARG, "%d sampler stages (at most %d)", n, NU_MAX_STAGES);
    for (int32_t i = 0; i < n; i++) {
        if ((unsigned)order[i] >= NU_STAGE_COUNT_)
            return nu_fail(err, NU_ERR_INVALID_ARG, "unknown sampler stage %d", (int)order[i]);
        for (int32_t j = 0; j < i; j++)
            if (order[j] == order[i])
                return nu_fail(err, NU_ERR_INVALID_ARG,
                               "sampler stage %s appears twice in the order",
                               nu_stage_name(order[i]));
    }
    return NU_OK;
}

nu_status nu_sampler_params_check(const nu_sampler_params *p, nu_error *err) {
    nu_status st = check_filters(p, err);
    if (!st) st = check_repetition(p, err);
    if (!st) st = check_newer_stages(p, err);
    if (!st) st = check_lists(p, err);
    if (!st) st = check_bias(p, err);
    if (!st) st = check_order(p->order, p->n_stages, err);
    if (!st && p->watermark.key) st = nu_watermark_params_check(&p->watermark, err);
    return st;
}

/* ---- stage names and orders ------------------------------------------------ */

static const char *const stage_names[NU_STAGE_COUNT_] = {
    [NU_STAGE_TOP_K] = "top_k",
    [NU_STAGE_TOP_P] = "top_p",
    [NU_STAGE_MIN_P] = "min_p",
    [NU_STAGE_TEMPERATURE] = "temperature",
    [NU_STAGE_TYPICAL_P] = "typical_p",
    [NU_STAGE_LOGIT_BIAS] = "logit_bias",
    [NU_STAGE_PENALTIES] = "penalties",
    [NU_STAGE_NO_REPEAT_NGRAM] = "no_repeat_ngram",
    [NU_STAGE_REPETITION_GUARD] = "repetition_guard",
    [NU_STAGE_DRY] = "dry",
    [NU_STAGE_TOP_N_SIGMA] = "top_n_sigma",
    [NU_STAGE_XTC] = "xtc",
};

const char *nu_stage_name(nu_stage_kind kind) {
    return (unsigned)kind < NU_STAGE_COUNT_ ? stage_names[kind] : NULL;
}

/* The stage whose name is text[0..len) ('-' matching '_'); -1 if none. */
static int stage_by_name(const char *text, size_t len) {
    for (int k = 0; k < NU_STAGE_COUNT_; k++) {
        const char *name = stage_names[k];
        if (strlen(name) != len) continue;
        size_t i = 0;
        while (i < len && (text[i] == name[i] || (text[i] == '-' && name[i] == '_'))) i++;
        if (i == len) return k;
    }
    return -1;
}

/* Blanks allowed around stage names. */
static bool is_blank(char ch) {
    return ch == ' ' || ch == '\t';
}

/* Copies a preset into order when text names one. */
static bool order_preset(const char *text, nu_stage_kind *order, int32_t *n) {
    const nu_stage_kind *src = NULL;
    if (!strcmp(text, "default"))
        src = default_order;
    else if (!strcmp(text, "temp_first") || !strcmp(text, "temp-first"))
        src = temp_first_order;
    if (!src) return false;
    memcpy(order, src, sizeof default_order);
    *n = N_DEFAULT_STAGES;
    return true;
}

nu_status nu_sampler_order_parse(const char *text, nu_stage_kind *order, int32_t *n,
                                 nu_error *err) {
    *n = 0;
    if (order_preset(text, order, n)) return NU_OK;
    const char *s = text;
    for (;;) {
        while (is_blank(*s)) s++;
        size_t len = strcspn(s, ",");
        size_t trimmed = len;
        while (trimmed > 0 && is_blank(s[trimmed - 1])) trimmed--;
        int kind = stage_by_name(s, trimmed);
        if (kind < 0)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "unknown sampler stage '%.*s' (stages: logit_bias, penalties, dry, "
                           "no_repeat_ngram, repetition_guard, top_n_sigma, top_k, typical_p, "
                           "top_p, min_p, xtc, temperature; presets: default, temp_first)",
                           (int)trimmed, s);
        if (*n == NU_MAX_STAGES)
            return nu_fail(err, NU_ERR_INVALID_ARG, "more than %d sampler stages", NU_MAX_STAGES);
        order[(*n)++] = (nu_stage_kind)kind;
        if (s[len] != ',') break;
        s += len + 1;
    }
    return check_order(order, *n, err);
}

size_t nu_sampler_order_string(const nu_stage_kind *order, int32_t n, char *buf, size_t cap) {
    if (n == 0) {
        order = default_order;
        n = N_DEFAULT_STAGES;
    }
    size_t len = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *name = nu_stage_name(order[i]);
        if (!name) name = "?";
        for (const char *q = i ? "," : ""; *q; q++, len++)
            if (len + 1 < cap) buf[len] = *q;
        for (const char *q = name; *q; q++, len++)
            if (len + 1 < cap) buf[len] = *q;
    }
    if (cap) buf[len < cap ? len : cap - 1] = 0;
    return len;
}

/* ---- creating a sampler ---------------------------------------------------- */

static bool penalties_on(const nu_sampler_params *p) {
    return p->penalty_last_n != 0 && (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f ||
                                      p->presence_penalty != 0.0f);
}

static bool dry_on(const nu_sampler_params *p) {
    return p->dry_multiplier > 0.0f && p->dry_penalty_last_n != 0;
}

/* How many of the last history tokens the windows need. */
static size_t history_keep(const nu_sampler *s) {
    const nu_sampler_params *p = &s->p;
    size_t keep = (size_t)p->guard_window;
    if (p->penalty_last_n > 0 && (size_t)p->penalty_last_n > keep) keep = (size_t)p->penalty_last_n;
    if (s->dry_on && p->dry_penalty_last_n > 0 && (size_t)p->dry_penalty_last_n > keep)
        keep = (size_t)p->dry_penalty_last_n;
    if ((size_t)s->bans.max_seq_len > keep) keep = (size_t)s->bans.max_seq_len;
    return keep;
}

/* The copy of the biases, and their per-token sums for arrays that are no
 * longer indexed by id. */
static nu_status make_bias(nu_sampler *s, nu_error *err) {
    int32_t n = s->p.n_logit_bias;
    if (n <= 0) return NU_OK;
    for (int32_t i = 0; i < n; i++)
        if (s->p.logit_bias[i].token >= s->n_vocab)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "logit_bias token %d is outside the vocabulary (%d tokens)",
                           s->p.logit_bias[i].token, s->n_vocab);
    s->bias = malloc((size_t)n * sizeof *s->bias);
    s->bias_table = calloc((size_t)s->n_vocab, sizeof *s->bias_table);
    if (!s->bias || !s->bias_table)
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for the logit biases");
    memcpy(s->bias, s->p.logit_bias, (size_t)n * sizeof *s->bias);
    for (int32_t i = 0; i < n; i++) s->bias_table[s->bias[i].token] += s->bias[i].bias;
    s->p.logit_bias = s->bias;
    return NU_OK;
}

/* The history array starts with room for HISTORY_FIRST tokens and doubles
 * when the windows need more (a few times per generation at most), so a
 * large penalty_last_n costs memory only once that many tokens exist. */
enum { HISTORY_FIRST = 256 };

/* Every buffer the sampler will use while sampling. */
static nu_status make_buffers(nu_sampler *s, nu_error *err) {
    size_t nv = (size_t)s->n_vocab;
    s->keep_hist = history_keep(s);
    s->hist_unbounded = s->p.no_repeat_ngram_size > 0 || (s->dry_on && s->p.dry_penalty_last_n < 0);
    s->cap_hist = HISTORY_FIRST;
    s->cand = malloc(nv * sizeof *s->cand);
    s->hist = malloc(s->cap_hist * sizeof *s->hist);
    bool ok = s->cand && s->hist;
    if (ok && penalties_on(&s->p)) {
        s->counts = calloc(nv, sizeof *s->counts);
        s->seen = malloc(nv * sizeof *s->seen);
        ok = s->counts && s->seen;
    }
    if (ok && (s->p.no_repeat_ngram_size > 0 || s->p.guard_strength > 0)) {
        s->mark = calloc(nv, sizeof *s->mark);
        ok = s->mark != NULL;
    }
    if (!ok) return nu_fail(err, NU_ERR_NOMEM, "out of memory for a sampler");
    return make_bias(s, err);
}

/* The state of the stages that were given strings or lists (DRY, bans);
 * model NULL when there is none. The caller's lists are not kept. */
static nu_status make_list_stages(nu_sampler *s, const nu_sampler_params *params,
                                  const nu_model *model, nu_error *err) {
    s->p.dry_sequence_breakers = NULL, s->p.n_dry_sequence_breakers = 0;
    s->p.banned_strings = NULL, s->p.n_banned_strings = 0;
    s->p.banned_tokens = NULL, s->p.n_banned_tokens = 0;
    s->dry_on = dry_on(params);
    nu_status st = nu_bans_init(&s->bans, params, model, s->n_vocab, err);
    if (!st && s->dry_on) st = nu_dry_init(&s->dry, params, model, s->n_vocab, err);
    return st;
}

/* nu_sampler_new, with the model whose vocabulary strings are looked up in
 * (NULL: none). */
static nu_status sampler_create(const nu_sampler_params *params, int32_t n_vocab,
                                const nu_model *model, nu_sampler **out, nu_error *err) {
    *out = NULL;
    nu_status st = nu_sampler_params_check(params, err);
    if (st) return st;
    if (n_vocab < 1) return nu_fail(err, NU_ERR_INVALID_ARG, "vocabulary size %d", n_vocab);
    nu_sampler *s = calloc(1, sizeof *s);
    if (!s) return nu_fail(err, NU_ERR_NOMEM, "out of memory for a sampler");
    s->p = *params;
    if (s->p.n_stages == 0) {
        s->p.n_stages = N_DEFAULT_STAGES;
        memcpy(s->p.order, default_order, sizeof default_order);
    }
    s->n_vocab = n_vocab;
    s->epoch = 1;
    nu_rng_seed(&s->rng, params->seed);
    s->watermark_on = params->watermark.key != NULL;
    s->p.watermark.key = NULL;
    s->mu = 2.0f * params->mirostat_tau;
    if ((s->watermark_on && (st = nu_watermark_init(&s->wm, &params->watermark, err))) ||
        (st = make_list_stages(s, params, model, err)) || (st = make_buffers(s, err))) {
        nu_sampler_free(s);
        return st;
    }
    *out = s;
    return NU_OK;
}

nu_status nu_sampler_new(const nu_sampler_params *params, int32_t n_vocab, nu_sampler **out,
                         nu_error *err) {
    return sampler_create(params, n_vocab, NULL, out, err);
}

nu_status nu_sampler_new_for_model(const nu_sampler_params *params, const nu_model *model,
                                   nu_sampler **out, nu_error *err) {
    int32_t n_vocab = nu_model_n_vocab(model);
    nu_status st = sampler_create(params, n_vocab, model, out, err);
    if (st) return st;
    int32_t n = 0;
    for (int32_t t = 0; t < n_vocab; t++) n += nu_token_is_eog(model, t);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) st = nu_fail(err, NU_ERR_NOMEM, "out of memory for a sampler");
    n = 0;
    for (int32_t t = 0; ids && t < n_vocab; t++)
        if (nu_token_is_eog(model, t)) ids[n++] = t;
    if (!st) st = nu_sampler_set_eog(*out, ids, n, err);
    free(ids);
    if (st) {
        nu_sampler_free(*out);
        *out = NULL;
    }
    return st;
}

void nu_sampler_free(nu_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->bias);
    free(s->bias_table);
    free(s->eog);
    free(s->hist);
    free(s->counts);
    free(s->seen);
    free(s->mark);
    free(s->before);
    nu_grammar_state_free(s->grammar);
    nu_dry_free(&s->dry);
    nu_bans_free(&s->bans);
    free(s);
}

nu_status nu_sampler_set_grammar(nu_sampler *s, const nu_grammar *g, int32_t budget,
                                 nu_error *err) {
    nu_grammar_state_free(s->grammar);
    s->grammar = NULL;
    if (!g) return NU_OK;
    nu_status st = nu_grammar_state_new(g, &s->grammar, err);
    if (st == NU_OK && budget >= 0) st = nu_grammar_state_set_budget(s->grammar, budget, err);
    if (st != NU_OK) {
        nu_grammar_state_free(s->grammar);
        s->grammar = NULL;
    }
    return st;
}

bool nu_sampler_grammar_must_end(const nu_sampler *s) {
    return s->grammar && nu_grammar_must_end(s->grammar);
}

nu_status nu_sampler_set_think_budget(nu_sampler *s, const nu_think_budget *b, nu_error *err) {
    return nu_think_set(&s->think, b, s->n_vocab, err);
}

nu_status nu_sampler_set_eog(nu_sampler *s, const int32_t *tokens, int32_t n, nu_error *err) {
    if (n < 0 || (n > 0 && !tokens))
        return nu_fail(err, NU_ERR_INVALID_ARG, "%d end-of-generation tokens", n);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "end-of-generation token %d is outside the vocabulary (%d tokens)",
                           tokens[i], s->n_vocab);
    int32_t *copy = malloc(((size_t)n + 1) * sizeof *copy);
    if (!copy) return nu_fail(err, NU_ERR_NOMEM, "out of memory for end-of-generation tokens");
    if (n) memcpy(copy, tokens, (size_t)n * sizeof *copy);
    free(s->eog);
    s->eog = copy;
    s->n_eog = n;
    return NU_OK;
}

nu_status nu_sampler_set_dry_breakers(nu_sampler *s, const nu_token_seq *seqs, int32_t n,
                                      nu_error *err) {
    if (!s->dry_on) {
        /* checked as if DRY were on, kept nowhere: DRY is off */
        nu_dry probe = {.n_vocab = s->n_vocab};
        nu_status st = nu_dry_set_breakers(&probe, seqs, n, err);
        nu_dry_free(&probe);
        return st;
    }
    return nu_dry_set_breakers(&s->dry, seqs, n, err);
}

nu_status nu_sampler_set_observer(nu_sampler *s, nu_stage_observer fn, void *user, nu_error *err) {
    if (fn && !s->before) {
        s->before = malloc((size_t)s->n_vocab * sizeof *s->before);
        if (!s->before) return nu_fail(err, NU_ERR_NOMEM, "out of memory for an observer");
    }
    s->observer = fn;
    s->observer_user = user;
    return NU_OK;
}

void nu_sampler_reseed(nu_sampler *s, uint64_t seed) {
    nu_rng_seed(&s->rng, seed);
}

/* ---- history ----------------------------------------------------------------- */

void nu_sampler_reset(nu_sampler *s) {
    s->n_hist = 0;
    s->n_generated = 0;
    s->window_lost = false;
    if (s->counts)
        for (size_t i = 0; i < s->n_seen; i++) s->counts[s->seen[i]] = 0;
    s->n_seen = 0;
    nu_watermark_clear(&s->wm);
    nu_think_reset(&s->think);
    nu_bans_reset(&s->bans);
    s->mu = 2.0f * s->p.mirostat_tau;
    s->mirostat_pending = false;
}

/* Makes room for one more token: doubles the array while the windows need
 * more room (always, when the n-gram ban needs the whole history); then
 * drops all but the last keep_hist tokens, all the windows look at. If
 * memory runs out, half the history goes and the penalty counts stop
 * decrementing (safe, if no longer windowed). */
static void history_make_room(nu_sampler *s) {
    bool grow = s->hist_unbounded || s->cap_hist < 2 * s->keep_hist + 64;
    if (grow && s->cap_hist <= SIZE_MAX / 2 / sizeof *s->hist) {
        int32_t *bigger = realloc(s->hist, 2 * s->cap_hist * sizeof *s->hist);
        if (bigger) {
            s->hist = bigger;
            s->cap_hist *= 2;
            return;
        }
    }
    size_t keep = s->keep_hist;
    if (keep > s->n_hist / 2) {
        keep = s->n_hist / 2;
        s->window_lost = true;
    }
    memmove(s->hist, s->hist + s->n_hist - keep, keep * sizeof *s->hist);
    s->n_hist = keep;
}

/* One more occurrence of t in the penalty window (delta +1) or one fewer
 * (delta -1), keeping the list of tokens with a count. */
static void count_token(nu_sampler *s, int32_t t, int delta) {
    if (delta > 0 && s->counts[t]++ == 0) s->seen[s->n_seen++] = t;
    if (delta < 0 && --s->counts[t] == 0) {
        size_t i = 0;
        while (s->seen[i] != t) i++;
        s->seen[i] = s->seen[--s->n_seen];
    }
}

/* Appends t to the history; the token that leaves the penalty window (the
 * one penalty_last_n places back) loses its count. */
static void history_push(nu_sampler *s, int32_t t) {
    if (t < 0 || t >= s->n_vocab) return;
    if (s->n_hist == s->cap_hist) history_make_room(s);
    s->hist[s->n_hist++] = t;
    if (!s->counts) return;
    count_token(s, t, +1);
    size_t last_n = (size_t)s->p.penalty_last_n;
    if (s->p.penalty_last_n > 0 && !s->window_lost && s->n_hist > last_n)
        count_token(s, s->hist[s->n_hist - 1 - last_n], -1);
}

void nu_sampler_accept_prompt(nu_sampler *s, const int32_t *tokens, int32_t n) {
    /* the prompt's last tokens choose the first green list */
    for (int32_t i = 0; s->watermark_on && i < n; i++) nu_watermark_push(&s->wm, tokens[i]);
    for (int32_t i = 0; s->think.on && i < n; i++) nu_think_accept(&s->think, tokens[i], false);
    nu_think_prompt_end(&s->think);
    if (!s->p.penalize_prompt) return;
    for (int32_t i = 0; i < n; i++) history_push(s, tokens[i]);
}

/* mu -= eta * (surprise - tau), the surprise of the token in the
 * distribution mirostat drew from (the last candidates); a token outside it
 * (not drawn by this sampler) leaves mu alone. */
static void mirostat_update(nu_sampler *s, int32_t token) {
    s->mirostat_pending = false;
    const nu_candidates *c = nu_sampler_last_candidates(s);
    for (size_t i = 0; c && i < c->size; i++) {
        if (c->data[i].id != token) continue;
        if (c->data[i].prob > 0.0f) {
            float surprise = -log2f(c->data[i].prob);
            s->mu -= s->p.mirostat_eta * (surprise - s->p.mirostat_tau);
        }
        return;
    }
}

void nu_sampler_accept(nu_sampler *s, int32_t token) {
    if (s->mirostat_pending) mirostat_update(s, token);
    history_push(s, token);
    if (s->watermark_on) nu_watermark_push(&s->wm, token);
    nu_bans_accept(&s->bans, token);
    s->n_generated++;
    nu_think_accept(&s->think, token, true);
    /* a token the grammar refuses leaves its state as it was (the caller
     * chose it: nu_sampler_sample never does) */
    if (s->grammar) nu_grammar_accept(s->grammar, token, NULL);
}

/* ---- token sets ---------------------------------------------------------------- */

/* Starts an empty token set (see mark/epoch). */
static void set_clear(nu_sampler *s) {
    if (++s->epoch == 0) { /* wrapped: old marks could look current */
        memset(s->mark, 0, (size_t)s->n_vocab * sizeof *s->mark);
        s->epoch = 1;
    }
}

/* Adds t; returns true if it was not in the set yet. */
static bool set_add(nu_sampler *s, int32_t t) {
    if (s->mark[t] == s->epoch) return false;
    s->mark[t] = s->epoch;
    return true;
}

/* Whether t is in the set. */
static bool set_has(const nu_sampler *s, int32_t t) {
    return s->mark[t] == s->epoch;
}

/* ---- the stages that keep state ------------------------------------------------ */

/* The CTRL repetition penalty: positive logits are divided by it, negative
 * ones multiplied, so that it always makes the token less likely (for
 * penalty > 1). */
static float ctrl_penalty(float logit, float penalty) {
    return logit > 0.0f ? logit / penalty : logit * penalty;
}

/* logit += bias. With an identity array only the biased entries are
 * touched; otherwise each candidate looks up its summed bias. */
static void stage_logit_bias(nu_sampler *s, nu_candidates *c, bool identity) {
    if (s->p.n_logit_bias == 0) return;
    if (identity) {
        for (int32_t i = 0; i < s->p.n_logit_bias; i++)
            c->data[s->bias[i].token].logit += s->bias[i].bias;
    } else {
        for (size_t i = 0; i < c->size; i++) c->data[i].logit += s->bias_table[c->data[i].id];
    }
    c->sorted = false;
}

/* Repetition (CTRL), frequency and presence penalties of one candidate that
 * occurs count > 0 times in the window. */
static void penalise(const nu_sampler_params *p, nu_candidate *x, int32_t count) {
    x->logit = ctrl_penalty(x->logit, p->repeat_penalty);
    x->logit -= (float)count * p->frequency_penalty + p->presence_penalty;
}

/* The penalties over the tokens of the penalty window: through the list of
 * tokens seen when the array is indexed by id, else through the counts. */
static void stage_penalties(nu_sampler *s, nu_candidates *c, bool identity) {
    if (!s->counts || s->n_seen == 0) return;
    if (identity) {
        for (size_t i = 0; i < s->n_seen; i++) {
            int32_t t = s->seen[i];
            penalise(&s->p, &c->data[t], s->counts[t]);
        }
    } else {
        for (size_t i = 0; i < c->size; i++) {
            int32_t count = s->counts[c->data[i].id];
            if (count > 0) penalise(&s->p, &c->data[i], count);
        }
    }
    c->sorted = false;
}

/* Sets logit -INFINITY for the tokens in the set (non-identity arrays). */
static void ban_marked(nu_sampler *s, nu_candidates *c) {
    for (size_t i = 0; i < c->size; i++)
        if (set_has(s, c->data[i].id)) c->data[i].logit = -INFINITY;
}

/* Bans every token that follows an earlier occurrence of the last n-1
 * tokens (each n-gram h[i..i+n) of the history whose first n-1 tokens equal
 * the history's last n-1 would be repeated by h[i+n-1]). O(history * n). */
static void stage_no_repeat_ngram(nu_sampler *s, nu_candidates *c, bool identity) {
    size_t n = (size_t)s->p.no_repeat_ngram_size, len = s->n_hist;
    if (n == 0 || len < n) return;
    const int32_t *h = s->hist, *suffix = h + len - (n - 1);
    set_clear(s);
    for (size_t i = 0; i + n <= len; i++) {
        if (memcmp(h + i, suffix, (n - 1) * sizeof *h) != 0) continue;
        int32_t t = h[i + n - 1];
        if (identity)
            c->data[t].logit = -INFINITY;
        else
            set_add(s, t);
    }
    if (!identity) ban_marked(s, c);
    c->sorted = false;
}

/* The generated tokens the guard looks at: the last min(guard_window,
 * generated) of the history. */
static const int32_t *guard_window(const nu_sampler *s, size_t *n) {
    size_t w = (size_t)s->p.guard_window;
    if ((uint64_t)s->n_generated < w) w = (size_t)s->n_generated;
    if (s->n_hist < w) w = s->n_hist;
    *n = w;
    return s->hist + s->n_hist - w;
}

/* Distinct g-grams among the n - g + 1 of w (O(n^2 g), n <= 512). */
static size_t distinct_grams(const int32_t *w, size_t n, size_t g) {
    size_t distinct = 0;
    for (size_t i = 0; i + g <= n; i++) {
        size_t j = 0;
        while (j < i && memcmp(w + j, w + i, g * sizeof *w) != 0) j++;
        distinct += j == i;
    }
    return distinct;
}

/* The length of the longest suffix of w that also ends at an earlier
 * position (occurrences may overlap the suffix). */
static size_t longest_repeated_suffix(const int32_t *w, size_t n) {
    size_t best = 0;
    for (size_t end = 0; end + 1 < n; end++) {
        size_t k = 0;
        while (k <= end && w[end - k] == w[n - 1 - k]) k++;
        if (k > best) best = k;
    }
    return best;
}

float nu_sampler_repetition_severity(const nu_sampler *s) {
    size_t n;
    const int32_t *w = guard_window(s, &n);
    if (n < 2) return 0.0f;
    double r_tokens = 1.0 - (double)distinct_grams(w, n, 1) / (double)n;
    double r_bigrams = 1.0 - (double)distinct_grams(w, n, 2) / (double)(n - 1);
    double r_span = (double)longest_repeated_suffix(w, n) / (double)n;
    return (float)((r_tokens + r_bigrams + r_span) / 3.0);
}

/* The CTRL penalty 1 + guard_strength * severity on each token of the
 * guard window. */
static void stage_repetition_guard(nu_sampler *s, nu_candidates *c, bool identity) {
    if (s->p.guard_strength <= 0.0f) return;
    float factor = 1.0f + s->p.guard_strength * nu_sampler_repetition_severity(s);
    if (factor == 1.0f) return;
    size_t n;
    const int32_t *w = guard_window(s, &n);
    set_clear(s);
    for (size_t i = 0; i < n; i++) {
        if (set_add(s, w[i]) && identity)
            c->data[w[i]].logit = ctrl_penalty(c->data[w[i]].logit, factor);
    }
    for (size_t i = 0; !identity && i < c->size; i++)
        if (set_has(s, c->data[i].id)) c->data[i].logit = ctrl_penalty(c->data[i].logit, factor);
    c->sorted = false;
}

/* min_tokens and ignore_eos: whether the end-of-generation tokens are banned
 * before the chain of this sample (the array is then still indexed by id). */
static bool eog_suppressed(const nu_sampler *s) {
    return s->n_eog > 0 && (s->p.ignore_eos || s->n_generated < s->p.min_tokens);
}

/* Bans every end-of-generation token (identity array). */
static void suppress_eog(nu_sampler *s, nu_candidates *c) {
    for (int32_t i = 0; i < s->n_eog; i++) c->data[s->eog[i]].logit = -INFINITY;
    c->sorted = false;
}

/* ---- the chain --------------------------------------------------------------- */

/* Not nu_stage_kinds: the EOG suppression, the watermark, the thinking
 * budget's forced token, the bans and mirostat's truncation, run (and
 * observed) like stages. */
#define STAGE_EOG NU_STAGE_COUNT_
#define STAGE_WATERMARK (NU_STAGE_COUNT_ + 1)
#define STAGE_THINK (NU_STAGE_COUNT_ + 2)
#define STAGE_BANNED (NU_STAGE_COUNT_ + 3)
#define STAGE_MIROSTAT (NU_STAGE_COUNT_ + 4)

/* The thinking budget is spent: only its next forced token stays. */
static void force_think_token(nu_sampler *s, nu_candidates *c) {
    int32_t keep = nu_think_forced(&s->think);
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].id != keep) c->data[i].logit = -INFINITY;
    c->sorted = false;
}

/* The stages greedy decoding (and mirostat) skips: they cannot change the
 * argmax, or could drop it (typical-p, XTC), which greedy does not want. */
static bool is_filter(int kind) {
    return kind == NU_STAGE_TOP_K || kind == NU_STAGE_TOP_P || kind == NU_STAGE_MIN_P ||
           kind == NU_STAGE_TYPICAL_P || kind == NU_STAGE_TOP_N_SIGMA || kind == NU_STAGE_XTC;
}

/* Whether a stage leaves an identity array indexed by id: the stages that
 * only change logits do (top-nσ and a temperature of 0 ban, they do not
 * remove), and a filter that is switched off. */
static bool keeps_identity(const nu_sampler_params *p, int kind) {
    switch (kind) {
    case NU_STAGE_TOP_K: return p->top_k == 0;
    case NU_STAGE_TOP_P: return p->top_p >= 1.0f;
    case NU_STAGE_MIN_P: return p->min_p <= 0.0f;
    case NU_STAGE_TYPICAL_P: return p->typical_p >= 1.0f;
    case NU_STAGE_XTC: return p->xtc_probability <= 0.0f || p->xtc_threshold > 0.5f;
    case STAGE_MIROSTAT: return false;
    default: return true;
    }
}

/* Temperature 0 without a dynamic range: the argmax. */
static bool is_greedy(const nu_sampler_params *p) {
    return p->temperature <= 0.0f && p->dynatemp_range <= 0.0f;
}

/* The temperature stage: mirostat uses the plain temperature, as llama.cpp. */
static void stage_temperature(const nu_sampler_params *p, nu_candidates *c) {
    if (p->mirostat)
        nu_stage_temperature(c, p->temperature);
    else
        nu_stage_dynatemp(c, p->temperature, p->dynatemp_range, p->dynatemp_exponent);
}

/* The generated tokens in the history (the bans look at these only). */
static const int32_t *generated(const nu_sampler *s, size_t *n) {
    *n = (uint64_t)s->n_generated < s->n_hist ? (size_t)s->n_generated : s->n_hist;
    return s->hist + s->n_hist - *n;
}

static void stage_bans(nu_sampler *s, nu_candidates *c, bool identity) {
    size_t n;
    const int32_t *gen = generated(s, &n);
    nu_bans_apply(&s->bans, gen, n, c, identity);
}

static void stage_mirostat(nu_sampler *s, nu_candidates *c) {
    if (s->p.mirostat == 1)
        nu_mirostat_v1(c, s->mu, s->n_vocab);
    else
        nu_mirostat_v2(c, s->mu);
}

/* One stage with its parameters; identity says the array is still indexed
 * by token id. */
static void run_stage(nu_sampler *s, int kind, nu_candidates *c, bool identity) {
    const nu_sampler_params *p = &s->p;
    switch (kind) {
    case NU_STAGE_TOP_K: nu_stage_top_k(c, p->top_k); break;
    case NU_STAGE_TOP_P: nu_stage_top_p(c, p->top_p); break;
    case NU_STAGE_MIN_P: nu_stage_min_p(c, p->min_p); break;
    case NU_STAGE_TYPICAL_P: nu_stage_typical_p(c, p->typical_p); break;
    case NU_STAGE_TEMPERATURE: stage_temperature(p, c); break;
    case NU_STAGE_TOP_N_SIGMA: nu_stage_top_n_sigma(c, p->top_n_sigma); break;
    case NU_STAGE_XTC: nu_stage_xtc(c, p->xtc_probability, p->xtc_threshold, &s->rng); break;
    case NU_STAGE_DRY:
        if (s->dry_on) nu_dry_apply(&s->dry, s->hist, s->n_hist, c, identity);
        break;
    case NU_STAGE_LOGIT_BIAS: stage_logit_bias(s, c, identity); break;
    case NU_STAGE_PENALTIES: stage_penalties(s, c, identity); break;
    case NU_STAGE_NO_REPEAT_NGRAM: stage_no_repeat_ngram(s, c, identity); break;
    case NU_STAGE_REPETITION_GUARD: stage_repetition_guard(s, c, identity); break;
    case STAGE_EOG: suppress_eog(s, c); break;
    case STAGE_WATERMARK: nu_watermark_apply(&s->wm, c, identity); break;
    case STAGE_THINK: force_think_token(s, c); break;
    case STAGE_BANNED: stage_bans(s, c, identity); break;
    case STAGE_MIROSTAT: stage_mirostat(s, c); break;
    default: break;
    }
}

/* Runs one stage; with an observer, shows it the array before and after
 * (both softmax-normalised; the stages never read prob, so this changes
 * nothing that follows). */
static void run_observed(nu_sampler *s, int kind, nu_candidates *c, bool *identity) {
    if (!s->observer) {
        run_stage(s, kind, c, *identity);
    } else {
        nu_candidates before = {s->before, c->size, c->sorted, -1};
        memcpy(s->before, c->data, c->size * sizeof *c->data);
        run_stage(s, kind, c, *identity);
        nu_candidates_softmax(&before);
        nu_candidates_softmax(c);
        const char *name = kind == STAGE_EOG         ? "eog"
                           : kind == STAGE_WATERMARK ? "watermark"
                           : kind == STAGE_THINK     ? "think_budget"
                           : kind == STAGE_BANNED    ? "banned"
                           : kind == STAGE_MIROSTAT
                               ? (s->p.mirostat == 1 ? "mirostat" : "mirostat_v2")
                               : nu_stage_name(kind);
        s->observer(s->observer_user, name, &before, c);
    }
    *identity = *identity && keeps_identity(&s->p, kind);
}

/* The index of the highest finite logit (lowest id among equals), or -1. */
static int32_t best_index(const nu_candidates *c) {
    int32_t best = -1;
    for (size_t i = 0; i < c->size; i++) {
        const nu_candidate *x = &c->data[i];
        if (x->logit == -INFINITY) continue;
        if (best < 0 || x->logit > c->data[best].logit ||
            (x->logit == c->data[best].logit && x->id < c->data[best].id))
            best = (int32_t)i;
    }
    return best;
}

/* Inverse-CDF draw over the candidates' probabilities; -1 when all are 0. */
static int32_t draw(nu_candidates *c, nu_rng *rng) {
    nu_candidates_softmax(c);
    double u = nu_rng_uniform(rng), cum = 0;
    int32_t last = -1;
    for (size_t i = 0; i < c->size; i++) {
        if (c->data[i].prob <= 0.0f) continue;
        cum += c->data[i].prob;
        last = (int32_t)i;
        if (u < cum) return last;
    }
    return last; /* rounding left u above the last partial sum */
}

/* The highest raw logit; the lowest id among equals. */
static int32_t raw_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* The last step: argmax (greedy) or draw, shown to the observer. */
static int32_t pick(nu_sampler *s, nu_candidates *c, bool greedy) {
    int32_t i = greedy ? best_index(c) : draw(c, &s->rng);
    s->last_normalised = !greedy;
    if (s->observer) {
        if (greedy) nu_candidates_softmax(c);
        s->last_normalised = true;
        nu_candidates before = *c;
        c->selected = i;
        s->observer(s->observer_user, greedy ? "greedy" : "dist", &before, c);
    }
    c->selected = i;
    return i;
}

/* Copies the logits into the candidate array (indexed by id), bans the
 * EOG tokens if asked and the banned strings and sequences, runs the order
 * (greedy and mirostat skip the filters) and mirostat's truncation. */
static nu_candidates *run_chain(nu_sampler *s, const float *logits, bool greedy, bool masked) {
    nu_candidates *c = &s->last;
    *c = (nu_candidates){s->cand, (size_t)s->n_vocab, false, -1};
    for (int32_t i = 0; i < s->n_vocab; i++) c->data[i] = (nu_candidate){i, logits[i], 0.0f};
    s->have_last = true;
    bool identity = true;
    if (masked) {
        nu_grammar_mask(s->grammar, c);
        identity = false;
    }
    if (eog_suppressed(s)) run_observed(s, STAGE_EOG, c, &identity);
    if (nu_think_forced(&s->think) >= 0) run_observed(s, STAGE_THINK, c, &identity);
    if (nu_bans_on(&s->bans)) run_observed(s, STAGE_BANNED, c, &identity);
    bool mirostat = s->p.mirostat && !greedy;
    /* the watermark shifts the logits the filters and temperature will see,
     * the logits after the bias and penalties of the default order */
    bool watermark = s->watermark_on && nu_watermark_ready(&s->wm);
    for (int32_t k = 0; k < s->p.n_stages; k++) {
        int kind = s->p.order[k];
        bool shaping = !(is_filter(kind) || kind == NU_STAGE_TEMPERATURE);
        if (watermark && !shaping) {
            run_observed(s, STAGE_WATERMARK, c, &identity);
            watermark = false;
        }
        if ((greedy && !shaping) || (mirostat && is_filter(kind))) continue;
        run_observed(s, kind, c, &identity);
    }
    if (watermark) run_observed(s, STAGE_WATERMARK, c, &identity);
    if (mirostat) run_observed(s, STAGE_MIROSTAT, c, &identity);
    s->mirostat_pending = mirostat;
    return c;
}

/* Runs the chain and picks; the raw argmax when nothing finite is left.
 * With a grammar: a pick the grammar refuses is redone with the refused
 * tokens removed before the chain (exactly the masked distribution for
 * temperature sampling and greedy; with truncating stages the cheap first
 * pick sees the unmasked candidates, as in llama.cpp). */
int32_t nu_sampler_sample(nu_sampler *s, const float *logits) {
    bool greedy = is_greedy(&s->p);
    nu_candidates *c = run_chain(s, logits, greedy, false);
    int32_t i = pick(s, c, greedy);
    int32_t tok = i >= 0 ? c->data[i].id : raw_argmax(logits, s->n_vocab);
    if (!s->grammar || nu_grammar_allows(s->grammar, tok)) return tok;
    c = run_chain(s, logits, greedy, true);
    i = pick(s, c, greedy);
    return i >= 0 ? c->data[i].id : tok;
}

/* The chain without the draw: greedy gives a point mass on its choice. */
const nu_candidates *nu_sampler_distribution(nu_sampler *s, const float *logits) {
    bool greedy = is_greedy(&s->p);
    nu_candidates *c = run_chain(s, logits, greedy, s->grammar != NULL);
    int32_t i = greedy ? best_index(c) : -1;
    bool finite = false;
    for (size_t k = 0; !greedy && k < c->size && !finite; k++)
        finite = c->data[k].logit > -INFINITY;
    if (greedy || !finite) {
        int32_t id = i >= 0 ? c->data[i].id : raw_argmax(logits, s->n_vocab);
        c->data[0] = (nu_candidate){id, 0.0f, 1.0f};
        c->size = 1;
        c->sorted = true;
    } else {
        nu_candidates_softmax(c);
    }
    c->selected = -1;
    s->last_normalised = true;
    return c;
}

const nu_candidates *nu_sampler_last_candidates(const nu_sampler *s) {
    if (!s->have_last) return NULL;
    if (!s->last_normalised) {
        /* Normalising lazily keeps greedy decoding free of n_vocab exp()s;
         * the sampler itself is never const, so this cast is sound. */
        nu_sampler *m = (nu_sampler *)s;
        nu_candidates_softmax(&m->last);
        m->last_normalised = true;
    }
    return &s->last;
}
