/* quant_k.c - the K-quant formats' plain C side: unpacking a super-block
 * into integers, reference dequantisation and quantisation of Q2_K..Q6_K,
 * and the Q8_K activation quantiser every SIMD level must match bit for bit.
 *
 * The encoder (nu_quantize_row_k) works in two stages per 256-element
 * super-block, minimising the squared error at each:
 *   1. Each group (16 or 32 elements) gets a real-valued scale s (and for
 *      the formats with mins, a min m >= 0, x ~ s * q - m). A few candidate
 *      scales are tried around the range-based one (range / (levels + t) for
 *      a handful of t); for each the group is quantised, s (and m) are refit
 *      by least squares to those quants, and the pair with the smallest
 *      squared error wins.
 *   2. The group scales (and mins) are themselves quantised against the
 *      super-block's f16 d (and dmin): d = largest scale / top level, each
 *      group's integer scale is the rounded ratio or one of its neighbours
 *      (and the same for the min), whichever gives the smallest error once
 *      the group is requantised with the scale the decoder will really use.
 * Symmetric formats (Q3_K, Q6_K) have signed scales; the largest one maps
 * to the most negative level, which the formats' asymmetric ranges favour.
 */
#include <float.h>
#include <math.h>

#include "kquant.h"

/* ---- Unpacking ---------------------------------------------------------------- */

/* Q2_K: 2-bit quant of element e and its group (see kquant.h). */
static void unpack_q2_k(const uint8_t *src, nu_kq_block *out) {
    nu_block_q2_k b;
    memcpy(&b, src, sizeof b);
    out->d = nu_half_to_float(b.d);
    out->dmin = nu_half_to_float(b.dmin);
    out->group = 16;
    for (int g = 0; g < 16; g++) {
        out->sc[g] = (int16_t)(b.scales[g] & 15);
        out->m[g] = (int16_t)(b.scales[g] >> 4);
    }
    for (int e = 0; e < NU_QK_K; e++) {
        int n = e / 128, j = e % 128 / 32, l = e % 32;
        out->q[e] = (int8_t)((b.qs[32 * n + l] >> (2 * j)) & 3);
    }
}

/* Q3_K: the low 2 bits as in Q2_K, minus 4 unless the element's high bit is
 * set; 6-bit scales stored with an offset of 32. */
static void unpack_q3_k(const uint8_t *src, nu_kq_block *out) {
    nu_block_q3_k b;
    memcpy(&b, src, sizeof b);
    out->d = nu_half_to_float(b.d);
    out->dmin = 0.0f;
    out->group = 16;
    for (int g = 0; g < 16; g++) {
        int low = g < 8 ? b.scales[g % 8] & 15 : b.scales[g % 8] >> 4;
        int high = (b.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
        out->sc[g] = (int16_t)((low | high << 4) - 32);
        out->m[g] = 0;
    }
    for (int e = 0; e < NU_QK_K; e++) {
        int n = e / 128, j = e % 128 / 32, l = e % 32;
        int low2 = (b.qs[32 * n + l] >> (2 * j)) & 3;
        int hbit = (b.hmask[l] >> (4 * n + j)) & 1;
        out->q[e] = (int8_t)(low2 - (hbit ? 0 : 4));
    }
}

/* Q4_K/Q5_K: the eight 6-bit scales and mins packed in 12 bytes. */
static void unpack_scales_min_6bit(const uint8_t *s, nu_kq_block *out) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out->sc[j] = (int16_t)(s[j] & 63);
            out->m[j] = (int16_t)(s[j + 4] & 63);
        } else {
            out->sc[j] = (int16_t)((s[j + 4] & 15) | (s[j - 4] >> 6) << 4);
            out->m[j] = (int16_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
        }
    }
    for (int j = 8; j < 16; j++) out->sc[j] = out->m[j] = 0;
}

/* Q4_K (qh NULL) and Q5_K: nibbles in 32-byte chunks, low then high. */
static void unpack_q45_k(uint16_t d, uint16_t dmin, const uint8_t *scales, const uint8_t *qs,
                         const uint8_t *qh, nu_kq_block *out) {
    out->d = nu_half_to_float(d);
    out->dmin = nu_half_to_float(dmin);
    out->group = 32;
    unpack_scales_min_6bit(scales, out);
    for (int e = 0; e < NU_QK_K; e++) {
        int c = e / 64, hi = e % 64 / 32, l = e % 32;
        int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
        if (qh) q |= ((qh[l] >> (2 * c + hi)) & 1) << 4;
        out->q[e] = (int8_t)q;
    }
}

/* Q6_K: low 4 bits in ql, high 2 bits in qh, offset 32; int8 scales. */
static void unpack_q6_k(const uint8_t *src, nu_kq_block *out) {
    nu_block_q6_k b;
    memcpy(&b, src, sizeof b);
    out->d = nu_half_to_float(b.d);
    out->dmin = 0.0f;
    out->group = 16;
    for (int g = 0; g < 16; g++) out->sc[g] = b.scales[g], out->m[g] = 0;
    for (int e = 0; e < NU_QK_K; e++) {
        int n = e / 128, k = e % 128 / 32, l = e % 32;
        const uint8_t *ql = b.ql + 64 * n, *qh = b.qh + 32 * n;
        int low = ql[l + 32 * (k & 1)];
        low = k < 2 ? low & 15 : low >> 4;
        int high = (qh[l] >> (2 * k)) & 3;
        out->q[e] = (int8_t)((low | high << 4) - 32);
    }
}

void nu_kq_unpack(uint32_t type, const uint8_t *src, nu_kq_block *out) {
    switch (type) {
    case NU_TYPE_Q2_K: unpack_q2_k(src, out); break;
    case NU_TYPE_Q3_K: unpack_q3_k(src, out); break;
    case NU_TYPE_Q4_K: {
        nu_block_q4_k b;
        memcpy(&b, src, sizeof b);
        unpack_q45_k(b.d, b.dmin, b.scales, b.qs, NULL, out);
        break;
    }
    case NU_TYPE_Q5_K: {
        nu_block_q5_k b;
        memcpy(&b, src, sizeof b);
        unpack_q45_k(b.d, b.dmin, b.scales, b.qs, b.qh, out);
        break;
    }
    default: unpack_q6_k(src, out); break;
    }
}

/* ---- Dequantisation --------------------------------------------------------------- */

void nu_dequantize_row_k(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    const size_t bytes = nu_type_get(type)->block_bytes;
    nu_kq_block b;
    for (int64_t i = 0; i < n / NU_QK_K; i++, dst += NU_QK_K) {
        nu_kq_unpack(type, s + (size_t)i * bytes, &b);
        for (int g = 0; g < NU_QK_K / b.group; g++) {
            /* As the format is defined: (d * scale) * q - dmin * min. */
            const float dl = b.d * (float)b.sc[g], ml = b.dmin * (float)b.m[g];
            for (int e = g * b.group; e < (g + 1) * b.group; e++) dst[e] = dl * (float)b.q[e] - ml;
        }
    }
}

/* ---- Quantisation: fitting groups --------------------------------------------------- */

/* Nearest integer to v in [lo, hi] (|lo|, |hi| <= 128), ties to even; NaN
 * gives lo. Clamping before the conversion keeps it defined for any input;
 * written as selects so the loops calling it vectorise. */
static int nearest_in(float v, int lo, int hi) {
    v = v > (float)lo ? v : (float)lo;
    v = v < (float)hi ? v : (float)hi;
    return (int)nu_round_even(v);
}

/* Squared error of x ~ s * q - m when every x takes its nearest level
 * q in [lo, hi], each element's weighed by w (NULL: 1); the quants go to q
 * when it is not NULL. */
static float group_error(const float *x, const float *w, int n, float s, float m, int lo, int hi,
                         int8_t *q) {
    const float inv = s != 0.0f ? 1.0f / s : 0.0f;
    float err = 0.0f;
    for (int j = 0; j < n; j++) {
        int v = s != 0.0f ? nearest_in((x[j] + m) * inv, lo, hi) : (lo < 0 ? 0 : lo);
        float diff = s * (float)v - m - x[j];
        err += (w ? w[j] : 1.0f) * diff * diff;
        if (q) q[j] = (int8_t)v;
    }
    return err;
}

/* Weighted (w NULL: plain) least-squares s and m >= 0 of x ~ s * q - m for
 * fixed quants q (with m = 0 when the unconstrained fit wants a negative
 * min). With weights 1 every sum is exact, as integer sums would be. */
static void refit_min(const float *x, const float *w, const int8_t *q, int n, float *s, float *m) {
    double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int j = 0; j < n; j++) {
        const double wj = w ? w[j] : 1.0;
        sw += wj, sq += wj * q[j], sqq += wj * q[j] * q[j], sx += wj * x[j],
            sqx += wj * q[j] * x[j];
    }
    const double det = sw * sqq - sq * sq;
    if (det <= 0.0) return; /* every q equal: keep the candidate */
    double slope = (sw * sqx - sq * sx) / det, offset = (sqq * sx - sq * sqx) / det;
    if (offset > 0.0) offset = 0.0, slope = sqx / sqq;
    if (slope < 0.0) return;
    *s = (float)slope;
    *m = (float)-offset;
}

/* Group scale and min for levels 0..top (x ~ s * q - m, s, m >= 0): range
 * candidates from the group's min (at most 0: mins are subtracted) to its
 * max, each quantised, refit, and scored. */
static float fit_group_min(const float *x, const float *w, int n, int top, float *m_out) {
    float lo = 0.0f, hi = x[0];
    for (int j = 0; j < n; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    *m_out = -lo;
    if (!(hi > lo)) return 0.0f; /* constant (or NaN) group: x = -m */
    int8_t q[32];
    float best_s = (hi - lo) / (float)top, best_m = -lo;
    float best_err = group_error(x, w, n, best_s, best_m, 0, top, NULL);
    for (int k = 0; k < 12; k++) {
        float s = (hi - lo) / ((float)top - 0.5f + 0.125f * (float)k), m = -lo;
        group_error(x, w, n, s, m, 0, top, q);
        refit_min(x, w, q, n, &s, &m);
        float err = group_error(x, w, n, s, m, 0, top, NULL);
        if (err < best_err) best_err = err, best_s = s, best_m = m;
    }
    *m_out = best_m;
    return best_s;
}

/* Signed group scale for levels lo..hi (lo = -hi - 1): the element of
 * largest magnitude is tried near the negative end (which has the extra
 * level) and near the positive end; each candidate is quantised, refit
 * (s = sum qx / sum qq) and scored. */
static float fit_group_sym(const float *x, const float *w, int n, int lo, int hi) {
    float amax = 0.0f, ext = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), ext = x[j];
    }
    if (!(amax > 0.0f)) return 0.0f;
    int8_t q[32];
    float best_s = ext / (float)lo, best_err = group_error(x, w, n, best_s, 0.0f, lo, hi, NULL);
    for (int k = 0; k < 12; k++) {
        /* divisors lo - 0.5 .. lo + 0.875, then hi - 0.5 .. hi + 0.25 */
        float t =
            k < 8 ? (float)lo - 0.5f + 0.1875f * (float)k : (float)hi - 0.5f + 0.25f * (k - 8);
        float s = ext / t;
        group_error(x, w, n, s, 0.0f, lo, hi, q);
        double sqq = 0, sqx = 0;
        for (int j = 0; j < n; j++) {
            const double wj = w ? w[j] : 1.0;
            sqq += wj * q[j] * q[j], sqx += wj * q[j] * x[j];
        }
        if (sqq > 0.0) s = (float)(sqx / sqq);
        float err = group_error(x, w, n, s, 0.0f, lo, hi, NULL);
        if (err < best_err) best_err = err, best_s = s;
    }
    return best_s;
}

/* ---- Quantisation: super-block scales ------------------------------------------------- */

/* How one K type quantises: groups, quant levels, scale levels. */
typedef struct kq_shape {
    int group;        /* elements per group */
    int q_lo, q_hi;   /* quant levels (as the decoder sees them) */
    int sc_lo, sc_hi; /* integer scale levels */
    int with_min;     /* mins 0..sc_hi against dmin */
} kq_shape;

static kq_shape shape_of(uint32_t type) {
    switch (type) {
    case NU_TYPE_Q2_K: return (kq_shape){16, 0, 3, 0, 15, 1};
    case NU_TYPE_Q3_K: return (kq_shape){16, -4, 3, -32, 31, 0};
    case NU_TYPE_Q4_K: return (kq_shape){32, 0, 15, 0, 63, 1};
    case NU_TYPE_Q5_K: return (kq_shape){32, 0, 31, 0, 63, 1};
    default: return (kq_shape){16, -32, 31, -128, 127, 0}; /* Q6_K */
    }
}

/* The f16 super-block scale for group scales s[0..ng): the one of largest
 * magnitude maps to the top level (mins, unsigned scales) or to the bottom
 * level (signed scales). Returns the f16 bits; *value is what decoders see. */
static uint16_t super_scale(const float *s, int ng, int sc_lo, int sc_hi, float *value) {
    float ext = 0.0f;
    for (int g = 0; g < ng; g++) {
        if (fabsf(s[g]) > fabsf(ext)) ext = s[g];
    }
    float d = sc_lo < 0 ? ext / (float)sc_lo : ext / (float)sc_hi;
    uint16_t h = nu_f32_to_f16(d);
    *value = nu_half_to_float(h);
    return h;
}

/* Integer scale (and min) of one group given the decoder's d and dmin: the
 * rounded ratios and their neighbours, scored with the group requantised
 * exactly as the decoder computes (d * sc) * q - dmin * m. */
static void pick_group_levels(const float *x, const float *w, const kq_shape *k, float s, float m,
                              float d, float dmin, int16_t *sc_out, int16_t *m_out, int8_t *q) {
    int sc0 = d != 0.0f ? nearest_in(s / d, k->sc_lo, k->sc_hi) : 0;
    int m0 = k->with_min && dmin != 0.0f ? nearest_in(m / dmin, 0, k->sc_hi) : 0;
    int span = k->with_min ? 1 : 0;
    float best = INFINITY;
    *sc_out = (int16_t)sc0, *m_out = (int16_t)m0;
    for (int a = sc0 - 1; a <= sc0 + 1; a++) {
        if (a < k->sc_lo || a > k->sc_hi) continue;
        for (int b = m0 - span; b <= m0 + span; b++) {
            if (b < 0 || b > k->sc_hi) continue;
            float err =
                group_error(x, w, k->group, d * (float)a, dmin * (float)b, k->q_lo, k->q_hi, NULL);
            if (err < best) best = err, *sc_out = (int16_t)a, *m_out = (int16_t)b;
        }
    }
    group_error(x, w, k->group, d * (float)*sc_out, dmin * (float)*m_out, k->q_lo, k->q_hi, q);
}

/* A group's weights: w's, or NULL (all 1) when there are none or they are
 * all 0 (or not all finite and >= 0). */
static const float *group_weights(const float *w, int n) {
    if (!w) return NULL;
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        if (!(w[j] >= 0.0f && w[j] <= FLT_MAX)) return NULL;
        sum += w[j];
    }
    return sum > 0.0f ? w : NULL;
}

/* Stage 1 and 2 for one super-block, each element's error weighed by w
 * (NULL: 1): fills the integer form in out and returns the f16 bits of d
 * and dmin. */
static void encode_super_block(uint32_t type, const float *x, const float *w, nu_kq_block *out,
                               uint16_t *dh, uint16_t *dminh) {
    const kq_shape k = shape_of(type);
    const int ng = NU_QK_K / k.group;
    float s[16], m[16] = {0};
    const float *wg[16];
    for (int g = 0; g < ng; g++) {
        const float *xg = x + g * k.group;
        wg[g] = group_weights(w ? w + g * k.group : NULL, k.group);
        s[g] = k.with_min ? fit_group_min(xg, wg[g], k.group, k.q_hi, &m[g])
                          : fit_group_sym(xg, wg[g], k.group, k.q_lo, k.q_hi);
    }
    *dh = super_scale(s, ng, k.sc_lo, k.sc_hi, &out->d);
    *dminh = 0;
    out->dmin = 0.0f;
    if (k.with_min) *dminh = super_scale(m, ng, 0, k.sc_hi, &out->dmin);
    out->group = k.group;
    for (int g = 0; g < ng; g++)
        pick_group_levels(x + g * k.group, wg[g], &k, s[g], m[g], out->d, out->dmin, &out->sc[g],
                          &out->m[g], out->q + g * k.group);
}

/* ---- Quantisation: packing ------------------------------------------------------------- */

static void pack_q2_k(const nu_kq_block *b, uint16_t d, uint16_t dmin, uint8_t *dst) {
    nu_block_q2_k p;
    memset(&p, 0, sizeof p);
    p.d = d, p.dmin = dmin;
    for (int g = 0; g < 16; g++) p.scales[g] = (uint8_t)(b->sc[g] | b->m[g] << 4);
    for (int e = 0; e < NU_QK_K; e++) {
        int n = e / 128, j = e % 128 / 32, l = e % 32;
        p.qs[32 * n + l] |= (uint8_t)(b->q[e] << (2 * j));
    }
    memcpy(dst, &p, sizeof p);
}

static void pack_q3_k(const nu_kq_block *b, uint16_t d, uint8_t *dst) {
    nu_block_q3_k p;
    memset(&p, 0, sizeof p);
    p.d = d;
    for (int g = 0; g < 16; g++) {
        int raw = b->sc[g] + 32;
        p.scales[g % 8] |= (uint8_t)(g < 8 ? raw & 15 : (raw & 15) << 4);
        p.scales[8 + g % 4] |= (uint8_t)((raw >> 4) << (2 * (g / 4)));
    }
    for (int e = 0; e < NU_QK_K; e++) {
        int n = e / 128, j = e % 128 / 32, l = e % 32, u = b->q[e] + 4;
        p.qs[32 * n + l] |= (uint8_t)((u & 3) << (2 * j));
        p.hmask[l] |= (uint8_t)((u >> 2) << (4 * n + j));
    }
    memcpy(dst, &p, sizeof p);
}

/* The 6-bit scales and mins of Q4_K/Q5_K: groups 0..3 in the low 6 bits of
 * bytes 0..7, groups 4..7 in nibbles of bytes 8..11 plus the top 2 bits of
 * bytes 0..7. */
static void pack_scales_min_6bit(const nu_kq_block *b, uint8_t *s) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(b->sc[j] | (b->sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(b->m[j] | (b->m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((b->sc[j + 4] & 15) | (b->m[j + 4] & 15) << 4);
    }
}

/* Q4_K (qh NULL) and Q5_K quants. */
static void pack_q45_quants(const nu_kq_block *b, uint8_t *qs, uint8_t *qh) {
    memset(qs, 0, NU_QK_K / 2);
    if (qh) memset(qh, 0, 32);
    for (int e = 0; e < NU_QK_K; e++) {
        int c = e / 64, hi = e % 64 / 32, l = e % 32, q = b->q[e];
        qs[32 * c + l] |= (uint8_t)((q & 15) << (4 * hi));
        if (qh) qh[l] |= (uint8_t)((q >> 4) << (2 * c + hi));
    }
}

static void pack_q6_k(const nu_kq_block *b, uint16_t d, uint8_t *dst) {
    nu_block_q6_k p;
    memset(&p, 0, sizeof p);
    p.d = d;
    for (int g = 0; g < 16; g++) p.scales[g] = (int8_t)b->sc[g];
    for (int e = 0; e < NU_QK_K; e++) {
        int n = e / 128, k = e % 128 / 32, l = e % 32, u = b->q[e] + 32;
        uint8_t *ql = p.ql + 64 * n, *qh = p.qh + 32 * n;
        ql[l + 32 * (k & 1)] |= (uint8_t)((u & 15) << (k < 2 ? 0 : 4));
        qh[l] |= (uint8_t)((u >> 4) << (2 * k));
    }
    memcpy(dst, &p, sizeof p);
}

void nu_kq_pack(uint32_t type, const nu_kq_block *b, uint16_t d, uint16_t dmin, uint8_t *dst) {
    switch (type) {
    case NU_TYPE_Q2_K: pack_q2_k(b, d, dmin, dst); break;
    case NU_TYPE_Q3_K: pack_q3_k(b, d, dst); break;
    case NU_TYPE_Q4_K: {
        nu_block_q4_k p;
        p.d = d, p.dmin = dmin;
        pack_scales_min_6bit(b, p.scales);
        pack_q45_quants(b, p.qs, NULL);
        memcpy(dst, &p, sizeof p);
        break;
    }
    case NU_TYPE_Q5_K: {
        nu_block_q5_k p;
        p.d = d, p.dmin = dmin;
        pack_scales_min_6bit(b, p.scales);
        pack_q45_quants(b, p.qs, p.qh);
        memcpy(dst, &p, sizeof p);
        break;
    }
    default: pack_q6_k(b, d, dst); break;
    }
}

void nu_quantize_row_k(uint32_t type, const float *src, void *dst, int64_t n,
                       const float *importance) {
    uint8_t *out = dst;
    const size_t bytes = nu_type_get(type)->block_bytes;
    nu_kq_block b;
    for (int64_t i = 0; i < n / NU_QK_K; i++) {
        uint16_t d, dmin;
        encode_super_block(type, src + i * NU_QK_K, importance ? importance + i * NU_QK_K : NULL,
                           &b, &d, &dmin);
        nu_kq_pack(type, &b, d, dmin, out + (size_t)i * bytes);
    }
}

/* ---- Q8_K activations ---------------------------------------------------------------- */

void nu_quantize_act_k_scalar(const float *x, int64_t n_in, uint8_t *dst) {
    int8_t *q = (int8_t *)dst;
    float *d = (float *)(void *)nu_actk_d(dst, n_in);
    int16_t *bsums = (int16_t *)(void *)nu_actk_bsums(dst, n_in);
    const int64_t nb = n_in / NU_QK_K;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * NU_QK_K;
        int8_t *qb = q + b * NU_QK_K;
        float amax = 0.0f, max = 0.0f; /* the first element of largest magnitude */
        for (int j = 0; j < NU_QK_K; j++) {
            float a = fabsf(xb[j]);
            if (a > amax) amax = a, max = xb[j];
        }
        if (!(amax >= NU_ACT_TINY)) {
            memset(qb, 0, NU_QK_K);
            memset(bsums + b * 16, 0, 16 * sizeof(int16_t));
            d[b] = 0.0f;
            continue;
        }
        const float inv = -127.0f / max;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) {
                float v = xb[j] * inv;
                v = v > -127.0f ? v : -127.0f; /* NaN fails the test and becomes -127 */
                v = v < 127.0f ? v : 127.0f;
                int qi = (int)nu_round_even(v);
                qb[j] = (int8_t)qi;
                sum += qi;
            }
            bsums[b * 16 + g] = (int16_t)sum;
        }
        d[b] = 1.0f / inv;
    }
    for (int64_t b = nb; b < nu_actk_d_count(n_in); b++) d[b] = 0.0f;
    for (int64_t g = nb * 16; g < nu_actk_bsum_count(n_in); g++) bsums[g] = 0;
}
