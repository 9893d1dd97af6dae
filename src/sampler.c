/* sampler.c - choosing the next token: a chain of stages over a candidate
 * array, then a seeded draw (or the argmax when the temperature is 0).
 *
 * Each stage works on {id, logit, prob} entries. Filtering stages shrink the
 * array; probabilities are recomputed from the logits that remain (softmax)
 * whenever a stage needs them, so a stage always sees the distribution the
 * previous stages left. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "nucleus.h"

/* ---- random numbers ------------------------------------------------------ */

/* splitmix64 spreads a 64-bit seed over xoshiro's 256-bit state. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void nu_rng_seed(nu_rng *rng, uint64_t seed) {
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna). */
uint64_t nu_rng_next(nu_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double nu_rng_uniform(nu_rng *rng) {
    return (double)(nu_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- candidate arrays ---------------------------------------------------- */

/* Descending logit; ties by ascending id so that the order is total. */
static int cmp_candidates(const void *a, const void *b) {
    const nu_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void sort_candidates(nu_candidates *c) {
    if (c->sorted) return;
    qsort(c->data, c->size, sizeof *c->data, cmp_candidates);
    c->sorted = true;
}

/* prob = softmax(logit) over the candidates left, computed in double. */
void nu_candidates_softmax(nu_candidates *c) {
    if (c->size == 0) return;
    float max = -INFINITY;
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].logit > max) max = c->data[i].logit;
    double sum = 0;
    for (size_t i = 0; i < c->size; i++) sum += exp((double)c->data[i].logit - max);
    for (size_t i = 0; i < c->size; i++)
        c->data[i].prob = (float)(exp((double)c->data[i].logit - max) / sum);
}

/* Sifts entry i down a heap whose root is the worst of the k kept (the
 * heap order is the reverse of the candidate order). */
static void heap_sift_down(nu_candidate *h, size_t k, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < k && cmp_candidates(&h[l], &h[worst]) > 0) worst = l;
        if (r < k && cmp_candidates(&h[r], &h[worst]) > 0) worst = r;
        if (worst == i) return;
        nu_candidate t = h[i];
        h[i] = h[worst];
        h[worst] = t;
        i = worst;
    }
}

/* Moves the k best candidates to the front, sorted, in O(n log k): a heap of
 * the k best so far, whose root is replaced whenever a better one comes. */
static void select_top(nu_candidates *c, size_t k) {
    if (c->sorted || k >= c->size) {
        sort_candidates(c);
        return;
    }
    nu_candidate *h = c->data;
    for (size_t i = k / 2; i-- > 0;) heap_sift_down(h, k, i);
    for (size_t i = k; i < c->size; i++) {
        if (cmp_candidates(&c->data[i], &h[0]) < 0) {
            nu_candidate t = h[0];
            h[0] = c->data[i];
            c->data[i] = t;
            heap_sift_down(h, k, 0);
        }
    }
    qsort(c->data, k, sizeof *c->data, cmp_candidates);
}

void nu_stage_top_k(nu_candidates *c, int32_t k) {
    if (k <= 0 || (size_t)k >= c->size) return;
    select_top(c, (size_t)k);
    c->size = (size_t)k;
    c->sorted = true;
}

/* Keeps the smallest set of most likely tokens whose probability adds up to
 * at least p (never fewer than one). */
void nu_stage_top_p(nu_candidates *c, float p) {
    if (p >= 1.0f || c->size == 0) return;
    sort_candidates(c);
    nu_candidates_softmax(c);
    double cum = 0;
    size_t keep = c->size;
    for (size_t i = 0; i < c->size; i++) {
        cum += c->data[i].prob;
        if (cum >= p) {
            keep = i + 1;
            break;
        }
    }
    c->size = keep;
}

/* Keeps tokens whose probability is at least p times the top token's. */
void nu_stage_min_p(nu_candidates *c, float p) {
    if (p <= 0.0f || c->size == 0) return;
    float max = -INFINITY;
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].logit > max) max = c->data[i].logit;
    /* prob_i >= p * prob_max  <=>  logit_i >= logit_max + ln p */
    float threshold = max + logf(p);
    size_t n = 0;
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].logit >= threshold) c->data[n++] = c->data[i];
    c->size = n;
}

void nu_stage_temperature(nu_candidates *c, float t) {
    if (t <= 0.0f || t == 1.0f) return;
    for (size_t i = 0; i < c->size; i++) c->data[i].logit /= t;
}

/* ---- the sampler ---------------------------------------------------------- */

struct nu_sampler {
    nu_sampler_params p;
    int32_t n_vocab;
    nu_candidate *cand;
    nu_rng rng;
};

nu_sampler_params nu_sampler_default_params(void) {
    nu_sampler_params p = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                           .seed = 0xC0FFEE, .n_stages = 0};
    return p;
}

static const nu_stage_kind default_order[] = {NU_STAGE_TOP_K, NU_STAGE_TOP_P, NU_STAGE_MIN_P,
                                              NU_STAGE_TEMPERATURE};

nu_status nu_sampler_params_check(const nu_sampler_params *p, nu_error *err) {
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "temperature %g is out of range (0..100)",
                       p->temperature);
    if (p->top_k < 0)
        return nu_fail(err, NU_ERR_INVALID_ARG, "top_k %d must be >= 0 (0 turns it off)",
                       p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "top_p %g is out of range (0 < p <= 1)", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return nu_fail(err, NU_ERR_INVALID_ARG, "min_p %g is out of range (0..1)", p->min_p);
    if (p->n_stages < 0 || p->n_stages > NU_MAX_STAGES)
        return nu_fail(err, NU_ERR_INVALID_ARG, "%d sampler stages (at most %d)", p->n_stages,
                       NU_MAX_STAGES);
    for (int32_t i = 0; i < p->n_stages; i++)
        if ((unsigned)p->order[i] >= NU_STAGE_COUNT_)
            return nu_fail(err, NU_ERR_INVALID_ARG, "unknown sampler stage %d", (int)p->order[i]);
    return NU_OK;
}

nu_status nu_sampler_new(const nu_sampler_params *params, int32_t n_vocab, nu_sampler **out,
                         nu_error *err) {
    *out = NULL;
    nu_status st = nu_sampler_params_check(params, err);
    if (st) return st;
    if (n_vocab < 1) return nu_fail(err, NU_ERR_INVALID_ARG, "vocabulary size %d", n_vocab);
    nu_sampler *s = calloc(1, sizeof *s);
    if (s) s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    if (!s || !s->cand) {
        if (s) free(s);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for a sampler");
    }
    s->p = *params;
    if (s->p.n_stages == 0) {
        s->p.n_stages = (int32_t)(sizeof default_order / sizeof *default_order);
        memcpy(s->p.order, default_order, sizeof default_order);
    }
    s->n_vocab = n_vocab;
    nu_rng_seed(&s->rng, params->seed);
    *out = s;
    return NU_OK;
}

void nu_sampler_free(nu_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s);
}

void nu_sampler_reseed(nu_sampler *s, uint64_t seed) { nu_rng_seed(&s->rng, seed); }

void nu_sampler_accept(nu_sampler *s, int32_t token) {
    (void)s, (void)token; /* no stage keeps history yet */
}

/* The highest logit; the lowest id among equals. */
static int32_t argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static void run_stage(const nu_sampler_params *p, nu_stage_kind kind, nu_candidates *c) {
    switch (kind) {
    case NU_STAGE_TOP_K: nu_stage_top_k(c, p->top_k); break;
    case NU_STAGE_TOP_P: nu_stage_top_p(c, p->top_p); break;
    case NU_STAGE_MIN_P: nu_stage_min_p(c, p->min_p); break;
    case NU_STAGE_TEMPERATURE: nu_stage_temperature(c, p->temperature); break;
    default: break;
    }
}

/* Inverse-CDF draw over the candidates' probabilities. */
static size_t draw(nu_candidates *c, nu_rng *rng) {
    nu_candidates_softmax(c);
    double u = nu_rng_uniform(rng), cum = 0;
    for (size_t i = 0; i < c->size; i++) {
        cum += c->data[i].prob;
        if (u < cum) return i;
    }
    return c->size - 1; /* rounding left u above the last partial sum */
}

int32_t nu_sampler_sample(nu_sampler *s, const float *logits) {
    if (s->p.temperature <= 0.0f) return argmax(logits, s->n_vocab);
    nu_candidates c = {s->cand, (size_t)s->n_vocab, false, -1};
    for (int32_t i = 0; i < s->n_vocab; i++) {
        c.data[i].id = i;
        c.data[i].logit = logits[i];
        c.data[i].prob = 0;
    }
    for (int32_t i = 0; i < s->p.n_stages; i++) run_stage(&s->p, s->p.order[i], &c);
    if (c.size == 0) return argmax(logits, s->n_vocab);
    return c.data[draw(&c, &s->rng)].id;
}
