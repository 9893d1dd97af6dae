/* watermark.c - the green-list watermark of Kirchenbauer et al. (ICML 2023):
 * the pseudo-random green lists, the sampler stage that adds delta to the
 * green logits, and detection by a one-sided z-test on the green count.
 *
 * Green lists. The paper seeds a random generator with a hash of the key and
 * the previous token and permutes the vocabulary; a permutation costs a
 * shuffle of |V| entries per token. Here each token gets its own 64-bit hash
 * of (key, context, token), compared with gamma * 2^64: one multiply-xorshift
 * chain per vocabulary entry, no memory, and exactly what the test needs, as
 * under the null hypothesis (text written without the key) every token is
 * green with probability gamma. The price is that the list's size is
 * binomial around gamma * |V| instead of exactly that (for 32000 tokens and
 * gamma 0.25, 8000 +- 77), which changes neither the generation nor the test.
 *
 * Detection. Natural text repeats itself ("the the", list markup, code),
 * and a repeated (context, token) n-gram is green or red every time it
 * occurs, so counting repeats would make the counts dependent and the
 * z-score overconfident. As the follow-up paper ("On the Reliability of
 * Watermarks for Large Language Models") recommends, each distinct n-gram
 * is scored once. */
#include "watermark.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* ---- the pseudo-random function --------------------------------------- */

/* The splitmix64 finalizer: a bijection of 64-bit words whose outputs pass
 * the usual statistical test batteries even for consecutive inputs. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The step between consecutive tokens' inputs: 2^64 / golden ratio, odd, so
 * every token id maps to a different input. */
#define WM_STEP 0x9E3779B97F4A7C15ull

uint64_t nu_watermark_key_hash(const char *key) {
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a 64 */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h ^= *p;
        h *= 0x100000001B3ull;
    }
    return mix(h);
}

uint64_t nu_watermark_context_seed(uint64_t key, const int32_t *prev, int32_t h) {
    uint64_t s = key;
    for (int32_t i = 0; i < h; i++) s = mix(s ^ (uint64_t)(uint32_t)prev[i]);
    return s;
}

/* gamma * 2^64, exactly: a float has 24 significant bits, so the product is
 * an integer below 2^64 for 0 < gamma < 1. */
uint64_t nu_watermark_threshold(float gamma) {
    return (uint64_t)ldexp((double)gamma, 64);
}

/* Static, so that it inlines: the library is built with -fPIC, where calls
 * to exported functions are not inlined (they could be interposed). */
static bool is_green(uint64_t seed, uint64_t threshold, int32_t token) {
    return mix(seed + ((uint64_t)(uint32_t)token + 1) * WM_STEP) < threshold;
}

bool nu_watermark_green(uint64_t seed, uint64_t threshold, int32_t token) {
    return is_green(seed, threshold, token);
}

/* ---- parameters --------------------------------------------------------- */

nu_watermark_params nu_watermark_default_params(void) {
    nu_watermark_params p = {.key = NULL, .gamma = 0.25f, .delta = 2.0f, .context = 1};
    return p;
}

nu_status nu_watermark_params_check(const nu_watermark_params *p, nu_error *err) {
    if (!p->key) return nu_fail(err, NU_ERR_INVALID_ARG, "watermark: no key given");
    if (!p->key[0]) return nu_fail(err, NU_ERR_INVALID_ARG, "watermark: the key is empty");
    if (!(p->gamma > 0.0f && p->gamma < 1.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "watermark gamma %g is out of range (0 < gamma < 1)", p->gamma);
    if (!(p->delta >= 0.0f && p->delta <= 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "watermark delta %g is out of range (0..100)",
                       p->delta);
    if (p->context < 1 || p->context > NU_WATERMARK_MAX_CONTEXT)
        return nu_fail(err, NU_ERR_INVALID_ARG, "watermark context %d is out of range (1..%d)",
                       p->context, NU_WATERMARK_MAX_CONTEXT);
    return NU_OK;
}

bool nu_watermark_is_green(const nu_watermark_params *p, const int32_t *prev, int32_t token) {
    uint64_t seed = nu_watermark_context_seed(nu_watermark_key_hash(p->key), prev, p->context);
    return is_green(seed, nu_watermark_threshold(p->gamma), token);
}

/* ---- the sampler's state ------------------------------------------------ */

nu_status nu_watermark_init(nu_watermark *w, const nu_watermark_params *p, nu_error *err) {
    nu_status st = nu_watermark_params_check(p, err);
    if (st) return st;
    memset(w, 0, sizeof *w);
    w->key = nu_watermark_key_hash(p->key);
    w->threshold = nu_watermark_threshold(p->gamma);
    w->delta = p->delta;
    w->h = p->context;
    return NU_OK;
}

void nu_watermark_push(nu_watermark *w, int32_t token) {
    if (w->n_last == w->h) {
        memmove(w->last, w->last + 1, (size_t)(w->h - 1) * sizeof *w->last);
        w->n_last--;
    }
    w->last[w->n_last++] = token;
}

void nu_watermark_clear(nu_watermark *w) {
    w->n_last = 0;
}

bool nu_watermark_ready(const nu_watermark *w) {
    return w->n_last == w->h;
}

/* Green flags of the ids first .. first + n - 1 (is_green with the
 * multiply by the token turned into an addition per step; independent
 * iterations, two multiplies each). */
static void green_flags(uint64_t seed, uint64_t threshold, int32_t first, int32_t n,
                        uint8_t *green) {
    uint64_t x = seed + (uint64_t)first * WM_STEP;
    for (int32_t i = 0; i < n; i++) {
        x += WM_STEP;
        green[i] = mix(x) < threshold;
    }
}

enum { FLAG_CHUNK = 256 };

void nu_watermark_apply(const nu_watermark *w, nu_candidates *c, bool identity) {
    if (!nu_watermark_ready(w)) return;
    uint64_t seed = nu_watermark_context_seed(w->key, w->last, w->h);
    const float add[2] = {0.0f, w->delta};
    if (identity) {
        /* ids 0..size-1 in order: the hashes in chunks, then the adds */
        uint8_t green[FLAG_CHUNK];
        for (size_t start = 0; start < c->size; start += FLAG_CHUNK) {
            size_t n = c->size - start < FLAG_CHUNK ? c->size - start : FLAG_CHUNK;
            green_flags(seed, w->threshold, (int32_t)start, (int32_t)n, green);
            /* branch-free: a branch on a coin flip mispredicts often */
            for (size_t i = 0; i < n; i++) c->data[start + i].logit += add[green[i]];
        }
    } else {
        for (size_t i = 0; i < c->size; i++)
            c->data[i].logit += add[is_green(seed, w->threshold, c->data[i].id)];
    }
    c->sorted = false;
}

/* ---- detection ---------------------------------------------------------- */

/* The n-grams seen so far: open addressing over their start positions in
 * the token array (-1: empty), compared token by token. */
typedef struct nu_gram_set {
    int64_t *slot;
    size_t mask;
    const int32_t *tokens;
    size_t len; /* tokens per n-gram */
} nu_gram_set;

static nu_status nu_gram_set_init(nu_gram_set *g, const int32_t *tokens, size_t n, size_t len,
                                  nu_error *err) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    g->slot = malloc(cap * sizeof *g->slot);
    if (!g->slot) return nu_fail(err, NU_ERR_NOMEM, "out of memory for watermark detection");
    memset(g->slot, 0xff, cap * sizeof *g->slot); /* every slot -1 */
    g->mask = cap - 1;
    g->tokens = tokens;
    g->len = len;
    return NU_OK;
}

/* Adds the n-gram starting at `start`; false if it was there already. */
static bool nu_gram_set_add(nu_gram_set *g, size_t start) {
    const int32_t *gram = g->tokens + start;
    uint64_t h = 0;
    for (size_t i = 0; i < g->len; i++) h = mix(h ^ (uint64_t)(uint32_t)gram[i]);
    for (size_t at = (size_t)h & g->mask;; at = (at + 1) & g->mask) {
        int64_t other = g->slot[at];
        if (other < 0) {
            g->slot[at] = (int64_t)start;
            return true;
        }
        if (!memcmp(g->tokens + other, gram, g->len * sizeof *gram)) return false;
    }
}

/* z-score and one-sided p-value of G green among T, under P(green) = gamma. */
static void finish_stats(nu_watermark_result *r, double gamma, double z_threshold) {
    double t = (double)r->scored;
    r->green_fraction = t > 0 ? (double)r->green / t : 0.0;
    r->z = t > 0 ? ((double)r->green - gamma * t) / sqrt(t * gamma * (1.0 - gamma)) : 0.0;
    r->p_value = t > 0 ? 0.5 * erfc(r->z / sqrt(2.0)) : 1.0;
    r->detected = r->z > z_threshold;
}

static nu_status check_tokens(const nu_model *model, const int32_t *tokens, size_t n,
                              nu_error *err) {
    int32_t n_vocab = model ? nu_model_n_vocab(model) : INT32_MAX;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "token %zu (%d) is not in the vocabulary (0..%d)", i, tokens[i],
                           n_vocab - 1);
    return NU_OK;
}

nu_status nu_watermark_detect(const nu_model *model, const nu_watermark_params *p,
                              const int32_t *tokens, size_t n, double z_threshold,
                              signed char *marks, nu_watermark_result *out, nu_error *err) {
    memset(out, 0, sizeof *out);
    nu_status st = nu_watermark_params_check(p, err);
    if (!st && !isfinite(z_threshold))
        st =
            nu_fail(err, NU_ERR_INVALID_ARG, "watermark z threshold %g is not finite", z_threshold);
    if (!st && n > 0 && !tokens) st = nu_fail(err, NU_ERR_INVALID_ARG, "no tokens given");
    if (!st) st = check_tokens(model, tokens, n, err);
    if (st) return st;
    size_t h = (size_t)p->context;
    nu_gram_set set = {0};
    if (n > h && (st = nu_gram_set_init(&set, tokens, n - h, h + 1, err))) return st;
    uint64_t key = nu_watermark_key_hash(p->key), threshold = nu_watermark_threshold(p->gamma);
    out->n_tokens = (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        signed char mark = -1;
        if (i >= h && nu_gram_set_add(&set, i - h)) {
            uint64_t seed = nu_watermark_context_seed(key, tokens + i - h, (int32_t)h);
            mark = is_green(seed, threshold, tokens[i]);
            out->scored++;
            out->green += mark;
        } else if (i >= h) {
            out->repeated++;
        }
        if (marks) marks[i] = mark;
    }
    free(set.slot);
    finish_stats(out, (double)p->gamma, z_threshold);
    return NU_OK;
}

nu_status nu_watermark_detect_text(const nu_model *model, const nu_watermark_params *p,
                                   const char *text, size_t len, double z_threshold,
                                   nu_watermark_result *out, nu_error *err) {
    memset(out, 0, sizeof *out);
    nu_status st = nu_watermark_params_check(p, err);
    if (st) return st;
    if (!model) return nu_fail(err, NU_ERR_INVALID_ARG, "detection over text needs a tokenizer");
    size_t cap = len + 8, n = 0;
    int32_t *tokens = malloc(cap * sizeof *tokens);
    if (!tokens) return nu_fail(err, NU_ERR_NOMEM, "out of memory for watermark detection");
    st = nu_tokenize(model, text, len, 0, tokens, cap, &n, err);
    if (st == NU_ERR_BUFFER_SMALL) {
        int32_t *bigger = realloc(tokens, (n + 1) * sizeof *tokens);
        st = bigger ? nu_tokenize(model, text, len, 0, bigger, n + 1, &n, err)
                    : nu_fail(err, NU_ERR_NOMEM, "out of memory for watermark detection");
        if (bigger) tokens = bigger;
    }
    if (!st) st = nu_watermark_detect(model, p, tokens, n, z_threshold, NULL, out, err);
    free(tokens);
    return st;
}
