/* sampler_mirostat.c - the truncations of mirostat v1 and v2 (see
 * mirostat.h). Both start from the softmax of the candidates; neither sorts
 * the whole array. */
#include <math.h>

#include "mirostat.h"

/* Mirostat v1 estimates the Zipf exponent from this many of the most
 * likely tokens (llama.cpp's m). */
enum { MIROSTAT_M = 100 };

/* The n most likely probabilities (> 0) of c, best first; returns how many. */
static int top_probs(const nu_candidates *c, double *out, int n) {
    int k = 0;
    for (size_t i = 0; i < c->size; i++) {
        double p = c->data[i].prob;
        if (p <= 0 || (k == n && p <= out[k - 1])) continue;
        int j = k < n ? k++ : n - 1;
        while (j > 0 && out[j - 1] < p) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = p;
    }
    return k;
}

/* The least-squares Zipf exponent s of p_i ~ i^-s over the sorted top
 * probabilities: ln(p_i / p_i+1) = s ln((i+2)/(i+1)). NAN with fewer than
 * two probabilities. */
static double zipf_exponent(const double *p, int n) {
    double sum_tb = 0, sum_tt = 0;
    for (int i = 0; i + 1 < n; i++) {
        double t = log((double)(i + 2) / (double)(i + 1)), b = log(p[i] / p[i + 1]);
        sum_tb += t * b;
        sum_tt += t * t;
    }
    return sum_tt > 0 ? sum_tb / sum_tt : NAN;
}

void nu_mirostat_v1(nu_candidates *c, float mu, int32_t n_vocab) {
    if (c->size == 0) return;
    nu_candidates_softmax(c);
    double top[MIROSTAT_M];
    double s = zipf_exponent(top, top_probs(c, top, MIROSTAT_M));
    double eps = s - 1;
    double k = pow(eps * pow(2.0, mu) / (1 - pow((double)n_vocab, -eps)), 1 / s);
    size_t keep = 1;
    if (k >= (double)c->size)
        keep = c->size;
    else if (k >= 1)
        keep = (size_t)k;
    nu_stage_top_k(c, (int32_t)(keep < (size_t)INT32_MAX ? keep : INT32_MAX));
}

void nu_mirostat_v2(nu_candidates *c, float mu) {
    if (c->size == 0) return;
    nu_candidates_softmax(c);
    size_t n = 0, best = 0;
    for (size_t i = 0; i < c->size; i++) {
        if (c->data[i].prob > c->data[best].prob) best = i;
        if (c->data[i].prob > 0 && -log2(c->data[i].prob) <= mu) n++;
    }
    if (n == 0) {
        c->data[0] = c->data[best];
        c->size = 1;
        c->sorted = true;
        return;
    }
    size_t w = 0;
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].prob > 0 && -log2(c->data[i].prob) <= mu) c->data[w++] = c->data[i];
    c->size = w;
}
