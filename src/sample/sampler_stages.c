/* sampler_stages.c - the stateless stages of the sampler chain (top-k,
 * top-p, min-p, typical-p, temperature) over a candidate array, and the
 * seeded random source the draw uses.
 *
 * Stages work on {id, logit, prob} entries and derive whatever probabilities
 * they need from the logits, so a stage always sees the distribution the
 * previous ones left. The full vocabulary is never sorted: top-k keeps a
 * heap of the k best, and top-p and typical-p find their cut by bucketing
 * (see keep_nearest), sorting only the few tokens next to the cut. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- ordering and partial selection -------------------------------------- */

typedef int (*candidate_cmp)(const void *a, const void *b);

/* Descending logit; ties by ascending id so that the order is total. */
static int cmp_by_logit(const void *a, const void *b) {
    const nu_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The order of keep_nearest below: while it sorts, prob holds each
 * candidate's distance from the center. Ascending distance, then the logit
 * order. */
static int cmp_by_score(const void *a, const void *b) {
    const nu_candidate *x = a, *y = b;
    if (x->prob != y->prob) return x->prob < y->prob ? -1 : 1;
    return cmp_by_logit(a, b);
}

/* Sifts entry i down a heap whose root is the worst of the k kept (the heap
 * order is the reverse of cmp). */
static void heap_sift_down(nu_candidate *h, size_t k, size_t i, candidate_cmp cmp) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < k && cmp(&h[l], &h[worst]) > 0) worst = l;
        if (r < k && cmp(&h[r], &h[worst]) > 0) worst = r;
        if (worst == i) return;
        nu_candidate t = h[i];
        h[i] = h[worst];
        h[worst] = t;
        i = worst;
    }
}

/* Moves the k first entries by cmp to the front of d[0..n), sorted, in
 * O(n log k): a heap of the k best so far whose root (the worst of them) is
 * replaced whenever a better one comes. */
static void select_first(nu_candidate *d, size_t n, size_t k, candidate_cmp cmp) {
    if (k >= n) {
        qsort(d, n, sizeof *d, cmp);
        return;
    }
    for (size_t i = k / 2; i-- > 0;) heap_sift_down(d, k, i, cmp);
    for (size_t i = k; i < n; i++) {
        if (cmp(&d[i], &d[0]) < 0) {
            nu_candidate t = d[0];
            d[0] = d[i];
            d[i] = t;
            heap_sift_down(d, k, 0, cmp);
        }
    }
    qsort(d, k, sizeof *d, cmp);
}

/* ---- probabilities -------------------------------------------------------- */

static float max_logit(const nu_candidates *c) {
    float max = -INFINITY;
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].logit > max) max = c->data[i].logit;
    return max;
}

/* Writes exp(logit - max) to each prob and returns their sum (in double):
 * one exp() per candidate, the main cost of the stages on a large array. */
static double exp_into_prob(nu_candidates *c, float max) {
    double sum = 0;
    for (size_t i = 0; i < c->size; i++) {
        double e = exp((double)c->data[i].logit - max);
        c->data[i].prob = (float)e;
        sum += e;
    }
    return sum;
}

/* prob *= factor: normalises what exp_into_prob left. */
static void scale_probs(nu_candidates *c, double factor) {
    for (size_t i = 0; i < c->size; i++) c->data[i].prob = (float)(c->data[i].prob * factor);
}

/* prob = softmax(logit) over the candidates left. When every logit is
 * -INFINITY (all banned), every prob is 0. */
void nu_candidates_softmax(nu_candidates *c) {
    if (c->size == 0) return;
    float max = max_logit(c);
    if (max == -INFINITY) {
        for (size_t i = 0; i < c->size; i++) c->data[i].prob = 0;
        return;
    }
    scale_probs(c, 1.0 / exp_into_prob(c, max));
}

/* ---- the stages ----------------------------------------------------------- */

void nu_stage_top_k(nu_candidates *c, int32_t k) {
    if (k <= 0 || (size_t)k >= c->size) return;
    if (!c->sorted) select_first(c->data, c->size, (size_t)k, cmp_by_logit);
    c->size = (size_t)k;
    c->sorted = true;
}

/* ---- keeping the tokens nearest to a center ------------------------------
 *
 * Top-p and typical-p both keep tokens in ascending order of a distance
 * |center - logit| until their probability adds up to p: top-p with the
 * center at the highest logit (most likely first), typical-p with the center
 * at the logit whose surprise -ln p equals the entropy. Ties go to the
 * higher logit, then the lower id. Instead of sorting all n candidates, the
 * distances are put into N_BUCKETS equal-width buckets; the bucket where the
 * running mass crosses p is the only one whose order matters, so the region
 * is partitioned around it and the search repeats inside it, until it is
 * small enough to sort. Cost O(n) per pass; a pass shrinks the region by
 * about N_BUCKETS for any spread of distances. */

enum { N_BUCKETS = 256, SMALL_REGION = 64 };

/* How far a logit is from the center (infinite for a banned token). */
static double distance(const nu_candidate *x, double center) {
    return fabs(center - (double)x->logit);
}

/* The smallest and largest finite distance in d[0..n). */
static void distance_range(const nu_candidate *d, size_t n, double center, double *lo, double *hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double k = distance(&d[i], center);
        if (!isfinite(k)) continue;
        if (k < *lo) *lo = k;
        if (k > *hi) *hi = k;
    }
}

/* The bucket of a candidate; banned tokens (infinite distance) go to the
 * extra bucket N_BUCKETS. */
static size_t bucket_of(const nu_candidate *x, double center, double lo, double scale) {
    double k = distance(x, center);
    if (!isfinite(k)) return N_BUCKETS;
    size_t b = (size_t)((k - lo) * scale);
    return b < N_BUCKETS ? b : N_BUCKETS - 1;
}

/* Moves the candidates whose bucket is below limit to the front of d[0..n),
 * keeping the others, and returns their count. Swapping every entry keeps
 * the loop free of hard-to-predict branches. */
static size_t move_front(nu_candidate *d, size_t n, size_t limit, double center, double lo,
                         double scale) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        bool below = bucket_of(&d[i], center, lo, scale) < limit;
        nu_candidate t = d[i];
        d[i] = d[w];
        d[w] = t;
        w += below;
    }
    return w;
}

/* Partitions d[0..n) into buckets < cut, == cut, > cut (in that order);
 * *n_before and *n_at get the sizes of the first two groups. */
static void partition_at(nu_candidate *d, size_t n, size_t cut, double center, double lo,
                         double scale, size_t *n_before, size_t *n_at) {
    *n_before = move_front(d, n, cut, center, lo, scale);
    *n_at = move_front(d + *n_before, n - *n_before, cut + 1, center, lo, scale);
}

/* Sorts a small region by distance (held in prob while sorting) and returns
 * how many of it to keep for the running mass *cum to reach p. */
static size_t keep_sorted(nu_candidate *d, size_t n, double center, float max, double inv_sum,
                          double *cum, double p) {
    for (size_t i = 0; i < n; i++) d[i].prob = (float)distance(&d[i], center);
    qsort(d, n, sizeof *d, cmp_by_score);
    for (size_t i = 0; i < n; i++) {
        d[i].prob = (float)(exp((double)d[i].logit - max) * inv_sum);
        *cum += d[i].prob;
        if (*cum >= p) return i + 1;
    }
    return n;
}

/* Moves the tokens nearest to center, up to probability p, to the front of
 * the array and returns their count (at least one). prob must hold each
 * candidate's probability; inv_sum and max give it again from the logit. */
static size_t keep_nearest(nu_candidates *c, double center, double p, float max, double inv_sum) {
    nu_candidate *d = c->data;
    size_t start = 0, end = c->size; /* [0, start) kept, [start, end) undecided */
    double cum = 0;
    for (;;) {
        double lo, hi;
        distance_range(d + start, end - start, center, &lo, &hi);
        if (end - start <= SMALL_REGION || !(hi > lo))
            return start + keep_sorted(d + start, end - start, center, max, inv_sum, &cum, p);
        double scale = N_BUCKETS / (hi - lo), mass[N_BUCKETS + 1] = {0};
        for (size_t i = start; i < end; i++) mass[bucket_of(&d[i], center, lo, scale)] += d[i].prob;
        size_t cut = 0;
        while (cut < N_BUCKETS && cum + mass[cut] < p) cum += mass[cut++];
        if (cut == N_BUCKETS) return end; /* rounding kept the total below p */
        size_t n_before, n_at;
        partition_at(d + start, end - start, cut, center, lo, scale, &n_before, &n_at);
        start += n_before;
        end = start + n_at;
    }
}

/* Keeps the smallest set of most likely tokens whose probability adds up to
 * at least p (never fewer than one). A sorted array (after top-k, say) is
 * cut by one walk; otherwise keep_nearest finds the set without sorting it. */
void nu_stage_top_p(nu_candidates *c, float p) {
    if (p >= 1.0f || c->size <= 1) return;
    float max = max_logit(c);
    if (max == -INFINITY) return;
    double inv = 1.0 / exp_into_prob(c, max), cum = 0;
    scale_probs(c, inv);
    if (c->sorted) {
        size_t i = 0;
        while (i < c->size && cum < p) cum += c->data[i++].prob;
        c->size = i;
        return;
    }
    c->size = keep_nearest(c, max, p, max, inv);
}

/* Keeps tokens whose probability is at least p times the top token's. */
void nu_stage_min_p(nu_candidates *c, float p) {
    if (p <= 0.0f || c->size == 0) return;
    float max = max_logit(c);
    if (max == -INFINITY) return;
    /* prob_i >= p * prob_max  <=>  logit_i >= logit_max + ln p */
    float threshold = max + logf(p);
    size_t n = 0;
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].logit >= threshold) c->data[n++] = c->data[i];
    c->size = n;
}

/* Locally typical sampling (Meister et al.): keeps the tokens whose
 * information content -ln p_i is closest to the entropy H, in that order,
 * until their probability adds up to at least p (never fewer than one).
 * With S = sum_i exp(l_i - max), -ln p_i = max + ln S - l_i, so the score
 * |-ln p_i - H| is the distance of l_i from the center max + ln S - H; and
 * H = ln S - (1/S) sum_i exp(l_i - max) (l_i - max), one pass. */
void nu_stage_typical_p(nu_candidates *c, float p) {
    if (p >= 1.0f || c->size <= 1) return;
    float max = max_logit(c);
    if (max == -INFINITY) return;
    double sum = 0, weighted = 0;
    for (size_t i = 0; i < c->size; i++) {
        double x = (double)c->data[i].logit - max, e = exp(x);
        c->data[i].prob = (float)e;
        sum += e;
        if (e > 0) weighted += e * x;
    }
    double entropy = log(sum) - weighted / sum;
    scale_probs(c, 1.0 / sum);
    c->size = keep_nearest(c, max + log(sum) - entropy, p, max, 1.0 / sum);
    c->sorted = false;
}

void nu_stage_temperature(nu_candidates *c, float t) {
    if (t <= 0.0f || t == 1.0f) return;
    for (size_t i = 0; i < c->size; i++) c->data[i].logit /= t;
}

/* The temperature t applied: logit /= t, or for t <= 0 only the first
 * highest logit kept (the others get -INFINITY), as llama.cpp does when a
 * dynamic temperature comes out as 0. */
static void apply_temperature(nu_candidates *c, float t) {
    if (t > 0.0f) {
        nu_stage_temperature(c, t);
        return;
    }
    size_t best = 0;
    for (size_t i = 1; i < c->size; i++)
        if (c->data[i].logit > c->data[best].logit) best = i;
    for (size_t i = 0; i < c->size; i++)
        if (i != best) c->data[i].logit = -INFINITY;
}

/* Dynamic temperature: the normalised entropy H / ln n of the candidates
 * (all n of them, banned ones included) chooses a temperature between
 * max(0, t - range) and t + range. */
float nu_stage_dynatemp(nu_candidates *c, float t, float range, float exponent) {
    if (range <= 0.0f) {
        nu_stage_temperature(c, t);
        return t;
    }
    if (c->size <= 1) return t;
    float lo = t - range > 0.0f ? t - range : 0.0f, hi = t + range;
    nu_candidates_softmax(c);
    double entropy = 0;
    for (size_t i = 0; i < c->size; i++) {
        double p = c->data[i].prob;
        if (p > 0) entropy -= p * log(p);
    }
    double normalised = entropy / log((double)c->size);
    float dyn = (float)(lo + (hi - lo) * pow(normalised, exponent));
    apply_temperature(c, dyn);
    return dyn;
}

/* top-nσ: logits below max - n * σ (over the finite logits) are banned; the
 * array keeps its order and size. */
void nu_stage_top_n_sigma(nu_candidates *c, float n) {
    if (n <= 0.0f || c->size <= 1) return;
    double max = -INFINITY, sum = 0, acc = 0;
    size_t finite = 0;
    for (size_t i = 0; i < c->size; i++) {
        float l = c->data[i].logit;
        if (l == -INFINITY) continue;
        if (l > max) max = l;
        sum += l;
        finite++;
    }
    if (finite == 0) return;
    double mean = sum / (double)finite;
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].logit != -INFINITY)
            acc += (c->data[i].logit - mean) * (c->data[i].logit - mean);
    double cut = max - n * sqrt(acc / (double)finite);
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].logit < cut) c->data[i].logit = -INFINITY;
}

/* XTC: with probability `probability`, of the tokens with p >= threshold
 * (when there are two or more) only the least likely stays (the last of
 * them in the logit order: lowest logit, then highest id). */
void nu_stage_xtc(nu_candidates *c, float probability, float threshold, nu_rng *rng) {
    if (probability <= 0.0f || threshold > 0.5f || c->size < 2) return;
    if (!(nu_rng_uniform(rng) < (double)probability)) return;
    nu_candidates_softmax(c);
    size_t above = 0, last = 0;
    for (size_t i = 0; i < c->size; i++) {
        if (!(c->data[i].prob >= threshold)) continue;
        if (above++ == 0 || cmp_by_logit(&c->data[i], &c->data[last]) > 0) last = i;
    }
    if (above < 2) return;
    size_t n = 0;
    for (size_t i = 0; i < c->size; i++)
        if (i == last || !(c->data[i].prob >= threshold)) c->data[n++] = c->data[i];
    c->size = n;
}
