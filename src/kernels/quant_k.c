/* quant_k.c - the K-quant formats' plain C side: the Q8_K activation
 * quantiser every SIMD level must match bit for bit. */
#include <math.h>

#include "kquant.h"

/* Rounds |v| <= 2^22 to the nearest integer, ties to even (see dot_scalar.c). */
static float round_even_k(float v) {
    const float magic = 12582912.0f;
    return (v + magic) - magic;
}

void nu_quantize_act_k_scalar(const float *x, int64_t n_in, uint8_t *dst) {
    int8_t *q = (int8_t *)dst;
    float *d = (float *)(void *)nu_actk_d(dst, n_in);
    int16_t *bsums = (int16_t *)(void *)nu_actk_bsums(dst, n_in);
    const int64_t nb = n_in / NU_QK_K;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * NU_QK_K;
        int8_t *qb = q + b * NU_QK_K;
        float amax = 0.0f;
        for (int j = 0; j < NU_QK_K; j++) {
            float a = fabsf(xb[j]);
            amax = a > amax ? a : amax;
        }
        if (!(amax >= NU_ACT_TINY)) {
            memset(qb, 0, NU_QK_K);
            memset(bsums + b * 16, 0, 16 * sizeof(int16_t));
            d[b] = 0.0f;
            continue;
        }
        const float scale = amax / 127.0f, inv = 1.0f / scale;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) {
                float v = xb[j] * inv;
                v = v > -127.0f ? v : -127.0f; /* NaN fails the test and becomes -127 */
                v = v < 127.0f ? v : 127.0f;
                int qi = (int)round_even_k(v);
                qb[j] = (int8_t)qi;
                sum += qi;
            }
            bsums[b * 16 + g] = (int16_t)sum;
        }
        d[b] = scale;
    }
    for (int64_t b = nb; b < nu_actk_d_count(n_in); b++) d[b] = 0.0f;
    for (int64_t g = nb * 16; g < nu_actk_bsum_count(n_in); g++) bsums[g] = 0;
}
