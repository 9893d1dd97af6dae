/* quant_iq.c - reference dequantisation and quantisation of the non-linear
 * 4-bit formats IQ4_NL, IQ4_XS and MXFP4 (iquant.h has the layouts and the
 * encoder's rule). */
#include <math.h>

#include "iquant.h"

const int8_t nu_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
const int8_t nu_fp4x2_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

#define SUB 32 /* elements per IQ4_NL / MXFP4 block and IQ4_XS sub-block */

/* ---- Dequantisation -------------------------------------------------------- */

/* 32 values from 16 code bytes: element j is the low nibble of byte j,
 * element j + 16 the high nibble. */
static void decode_codes(const uint8_t *qs, const int8_t *table, float scale, float *y) {
    for (int j = 0; j < 16; j++) {
        y[j] = scale * (float)table[qs[j] & 15];
        y[j + 16] = scale * (float)table[qs[j] >> 4];
    }
}

void nu_dequantize_row_iq(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    switch (type) {
    case NU_TYPE_IQ4_NL:
        for (int64_t i = 0; i < n / SUB; i++, s += NU_IQ4_NL_BYTES)
            decode_codes(s + 2, nu_iq4nl_values, nu_half_to_float(nu_load_u16(s)), dst + i * SUB);
        return;
    case NU_TYPE_MXFP4:
        for (int64_t i = 0; i < n / SUB; i++, s += NU_MXFP4_BYTES)
            decode_codes(s + 1, nu_fp4x2_values, nu_e8m0_half(s[0]), dst + i * SUB);
        return;
    case NU_TYPE_IQ4_XS:
        for (int64_t i = 0; i < n / NU_QK_K; i++, s += NU_IQ4_XS_BYTES) {
            const float d = nu_half_to_float(nu_load_u16(s));
            for (int b = 0; b < 8; b++)
                decode_codes(s + 8 + 16 * b, nu_iq4nl_values,
                             d * (float)(nu_iq4_xs_scale(s, b) - 32), dst + i * NU_QK_K + b * SUB);
        }
        return;
    default: return;
    }
}

/* ---- Quantisation ----------------------------------------------------------- */

/* The code whose table value is nearest to v (ties to the lower code): the
 * table is ascending, so count the midpoints between neighbours below v. */
static int nearest_code(float v) {
    static const float mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                  7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};
    int lo = 0, hi = 15; /* the answer is in [lo, hi] */
    while (lo < hi) {
        int m = (lo + hi) / 2;
        if (v > mid[m])
            lo = m + 1;
        else
            hi = m;
    }
    return lo;
}

/* Codes nearest to x / s for one sub-block (code 8, value 1, when s is 0:
 * any code gives 0 then). */
static void pick_codes(const float *x, float s, uint8_t *code) {
    const float inv = s != 0.0f ? 1.0f / s : 0.0f;
    for (int j = 0; j < SUB; j++) code[j] = (uint8_t)(s != 0.0f ? nearest_code(x[j] * inv) : 8);
}

/* sum w x v and sum w v^2 of a sub-block's codes. */
static void code_sums(const float *x, const float *w, const uint8_t *code, double *sxv,
                      double *svv) {
    *sxv = *svv = 0.0;
    for (int j = 0; j < SUB; j++) {
        double v = nu_iq4nl_values[code[j]];
        *sxv += w[j] * x[j] * v;
        *svv += w[j] * v * v;
    }
}

/* Weighted squared error of x against s * table[code]. */
static double sub_error(const float *x, const float *w, const uint8_t *code, float s) {
    double e = 0.0;
    for (int j = 0; j < SUB; j++) {
        double r = (double)x[j] - (double)s * nu_iq4nl_values[code[j]];
        e += w[j] * r * r;
    }
    return e;
}

/* The best real-valued scale of one sub-block (see iquant.h): candidates
 * map the element of largest magnitude to a value near -127 or near 113,
 * each refit by least squares; the one removing the most weighted energy
 * (sxv^2 / svv) wins. Returns 0 for an all-zero block. */
static float fit_sub_scale(const float *x, const float *w) {
    float xm = 0.0f;
    for (int j = 0; j < SUB; j++)
        if (fabsf(x[j]) > fabsf(xm)) xm = x[j];
    if (xm == 0.0f) return 0.0f;
    static const float ends[2] = {-127.0f, 113.0f};
    double best_gain = -1.0;
    float best = xm / -127.0f;
    uint8_t code[SUB];
    for (int e = 0; e < 2; e++) {
        for (int t = -8; t <= 8; t++) {
            const float s = xm / (ends[e] + (float)t);
            pick_codes(x, s, code);
            double sxv, svv;
            code_sums(x, w, code, &sxv, &svv);
            if (svv <= 0.0) continue;
            const double gain = sxv * sxv / svv;
            if (gain > best_gain) best_gain = gain, best = (float)(sxv / svv);
        }
    }
    return best;
}

/* The weights of a block: importance (or 1), and 1 throughout when the
 * block's importances are all 0 (or absent). */
static void block_weights(const float *importance, int64_t at, int n, float *w) {
    double total = 0.0;
    for (int j = 0; j < n; j++) {
        w[j] = importance ? importance[at + j] : 1.0f;
        if (!(w[j] >= 0.0f)) w[j] = 0.0f; /* NaN or negative: no weight */
        total += w[j];
    }
    if (!(total > 0.0))
        for (int j = 0; j < n; j++) w[j] = 1.0f;
}

/* Packs 32 codes into 16 bytes (element j low nibble of byte j). */
static void pack_codes(const uint8_t *code, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(code[j] | code[j + 16] << 4);
}

static void quantize_iq4_nl_block(const float *x, const float *w, uint8_t *dst) {
    const uint16_t d = nu_f32_to_f16(fit_sub_scale(x, w));
    uint8_t code[SUB];
    pick_codes(x, nu_half_to_float(d), code);
    memcpy(dst, &d, 2);
    pack_codes(code, dst + 2);
}

/* One IQ4_XS super-block: sub-block scales fitted alone, then expressed as
 * d * (ls - 32): d from the largest (mapped to -32), each ls the rounded
 * ratio or a neighbour, whichever gives the smaller error with codes
 * requantised for it. */
static void quantize_iq4_xs_block(const float *x, const float *w, uint8_t *dst) {
    float s[8], smax = 0.0f;
    for (int b = 0; b < 8; b++) {
        s[b] = fit_sub_scale(x + b * SUB, w + b * SUB);
        if (fabsf(s[b]) > fabsf(smax)) smax = s[b];
    }
    const uint16_t dh = nu_f32_to_f16(smax / -32.0f);
    const float d = nu_half_to_float(dh);
    uint16_t scales_h = 0;
    uint8_t scales_l[4] = {0};
    uint8_t *qs = dst + 8;
    for (int b = 0; b < 8; b++) {
        const float *xb = x + b * SUB, *wb = w + b * SUB;
        int best_l = 0;
        uint8_t code[SUB], best_code[SUB];
        pick_codes(xb, 0.0f, best_code);
        if (d != 0.0f) {
            double best_err = INFINITY;
            const int l0 = (int)lrintf(s[b] / d);
            for (int l = l0 - 1; l <= l0 + 1; l++) {
                if (l < -32 || l > 31) continue;
                pick_codes(xb, d * (float)l, code);
                double e = sub_error(xb, wb, code, d * (float)l);
                if (e < best_err) best_err = e, best_l = l, memcpy(best_code, code, SUB);
            }
        }
        const int ls = best_l + 32;
        scales_l[b / 2] |= (uint8_t)((ls & 15) << (4 * (b % 2)));
        scales_h |= (uint16_t)((ls >> 4) << (2 * b));
        pack_codes(best_code, qs + 16 * b);
    }
    memcpy(dst, &dh, 2);
    memcpy(dst + 2, &scales_h, 2);
    memcpy(dst + 4, scales_l, 4);
}

void nu_quantize_row_iq(uint32_t type, const float *src, void *dst, int64_t n,
                        const float *importance) {
    uint8_t *out = dst;
    float w[NU_QK_K];
    if (type == NU_TYPE_IQ4_NL) {
        for (int64_t i = 0; i < n / SUB; i++) {
            block_weights(importance, i * SUB, SUB, w);
            quantize_iq4_nl_block(src + i * SUB, w, out + i * NU_IQ4_NL_BYTES);
        }
    } else if (type == NU_TYPE_IQ4_XS) {
        for (int64_t i = 0; i < n / NU_QK_K; i++) {
            for (int b = 0; b < 8; b++)
                block_weights(importance, i * NU_QK_K + b * SUB, SUB, w + b * SUB);
            quantize_iq4_xs_block(src + i * NU_QK_K, w, out + i * NU_IQ4_XS_BYTES);
        }
    }
}
