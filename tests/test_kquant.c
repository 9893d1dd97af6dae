/* test_kquant.c - the K-quant formats (Q2_K..Q6_K) and the Q8_K activations:
 * hand-made super-blocks whose bytes were written from the public format
 * description (checked element by element), encoder round trips on
 * Gaussian data, the scalar tile kernels against nu_matmul_ref, bit
 * reproducibility across batch sizes and threads, and the Q8_K activation
 * quantiser's edge cases.
 *
 * Round-trip bounds (RMS error on N(0, 1) data): the error of the plain
 * min/max rule with exact, unquantised group scales (levels spread evenly
 * from the group's min, at most 0, to its max; for the symmetric types the
 * element of largest magnitude on the most negative level), estimated by a
 * separate Monte Carlo computation over 200k samples: Q2_K 0.327, Q3_K
 * 0.155, Q4_K 0.0783, Q5_K 0.0379, Q6_K 0.0187. The encoder must beat those
 * by 3% although its scales are quantised: an encoder that only takes min and
 * max (or packs a bit wrongly) fails.
 *
 * Matmul tolerance, per output y of a weight row w (dequantised) and an
 * activation row x:
 *   E = sum over 256-blocks b of (max_b |x| / 254) * sum_{i in b} |w_i|: the
 *       activations are rounded to int8 with scale max|x| / 127 per block,
 *       moving each by at most half a step, and the rest is exact integer
 *       arithmetic;
 *   T = sum_i (|d sc_g q_i| + |dmin m_g|) |x_i|, the size of the float terms
 *       the kernel adds (at most 4 roundings per super-block, 8 super-blocks
 *       here, so (4 + 8) * 2^-24 * 2 * T < 1e-5 * T covers them);
 *   |y - y_ref| <= E * (1 + 1e-5) + 1e-5 * T + 1e-30.
 * E is a worst case (every rounding aligned), far above typical errors, so
 * each value is also checked against the exact dot of the dequantised
 * weights with the dequantised Q8_K activations (d * q, from the activation
 * quantiser tested here): |y - y_q8| <= 1e-5 * T + 1e-30, which catches a
 * kernel that is slightly off (say a min term 1% too small).
 */
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kquant.h"
#include "nucleus.h"
#include "test_rng.h"

/* ---- Helpers --------------------------------------------------------------- */

/* Uniform in (0, 1). */
static double rng_unit(rng *r) {
    return ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

/* Standard normal (Box-Muller). */
static float rng_gauss(rng *r) {
    double u = rng_unit(r), v = rng_unit(r);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static const uint32_t k_types[] = {NU_TYPE_Q2_K, NU_TYPE_Q3_K, NU_TYPE_Q4_K, NU_TYPE_Q5_K,
                                   NU_TYPE_Q6_K};
#define N_K_TYPES (sizeof k_types / sizeof k_types[0])

/* Dequantises one hand-made super-block and compares all 256 values. */
static void check_block(uint32_t type, const uint8_t *blk, const float *want) {
    float got[NU_QK_K];
    nu_dequantize_row(type, blk, got, NU_QK_K);
    for (int e = 0; e < NU_QK_K; e++)
        if (got[e] != want[e])
            fail_msg("%s element %d: got %.9g, want %.9g", nu_type_get(type)->name, e, got[e],
                     want[e]);
}

/* want[e] = per_group[e / group]. */
static void fill_groups(float *want, const float *per_group, int group) {
    for (int e = 0; e < NU_QK_K; e++) want[e] = per_group[e / group];
}

/* ---- Hand-made blocks ------------------------------------------------------ */

/* Q2_K: scales[16] @0 (low nibble scale, high nibble min), qs[64] @16, d @80,
 * dmin @82; element 128n + 32j + l is bits 2j..2j+1 of qs[32n + l], group
 * 8n + 2j + l / 16; x = d * sc * q - dmin * m. */
static void test_q2_k_block(void **state) {
    (void)state;
    uint8_t b[84] = {0};
    /* d = 1, dmin = 0.5 */
    b[80] = 0x00, b[81] = 0x3C, b[82] = 0x00, b[83] = 0x38;
    b[0] = 0x21;            /* g0: sc 1, m 2 */
    b[1] = 0x12;            /* g1: sc 2, m 1 */
    b[2] = 0x03;            /* g2: sc 3, m 0 */
    b[5] = 0x4F;            /* g5: sc 15, m 4 */
    b[6] = 0x11;            /* g6: sc 1, m 1 */
    b[9] = 0x35;            /* g9: sc 5, m 3 */
    b[15] = 0xF7;           /* g15: sc 7, m 15 */
    b[16 + 0] = 0xE4;       /* e0 q0, e32 q1, e64 q2, e96 q3 */
    b[16 + 17] = 0x1B;      /* e17 q3, e49 q2, e81 q1, e113 q0 */
    b[16 + 32 + 20] = 0xC6; /* e148 q2, e180 q1, e212 q0, e244 q3 */
    /* q = 0 elsewhere: x = -dmin * m of the group */
    const float base[16] = {-1.0f, -0.5f, 0, 0, 0, -2.0f, -0.5f, 0, 0, -1.5f, 0, 0, 0, 0, 0, -7.5f};
    float want[NU_QK_K];
    fill_groups(want, base, 16);
    want[0] = -1.0f;   /* 1 * 0 - 1 */
    want[32] = 3.0f;   /* 3 * 1 */
    want[64] = 0.0f;   /* g4 has scale 0 */
    want[96] = 2.5f;   /* 1 * 3 - 0.5 */
    want[17] = 5.5f;   /* 2 * 3 - 0.5 */
    want[81] = 13.0f;  /* 15 * 1 - 2 */
    want[148] = 8.5f;  /* 5 * 2 - 1.5 */
    want[244] = 13.5f; /* 7 * 3 - 7.5 */
    check_block(NU_TYPE_Q2_K, b, want);
}

/* Q3_K: hmask[32] @0, qs[64] @32, scales[12] @96, d @108. Scales are 6 bits
 * minus 32: group g's low nibble in scales[g % 8] (low nibble for g < 8,
 * high otherwise), top 2 bits at bit 2 * (g / 4) of scales[8 + g % 4].
 * Quant of element 128n + 32j + l: bits 2j of qs[32n + l], minus 4 unless
 * bit 4n + j of hmask[l] is set. */
static void test_q3_k_block(void **state) {
    (void)state;
    uint8_t b[110] = {0};
    uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    b[108] = 0x00, b[109] = 0x3C; /* d = 1 */
    /* every group's raw scale 32 (scale 0): top bits 2 everywhere */
    sc[8] = sc[9] = sc[10] = sc[11] = 0xAA;
    sc[0] = 0x01; /* g0 raw 33: +1 */
    sc[1] = 0x50; /* g9 raw 37: +5 */
    sc[6] = 0x0D; /* g6 raw 29 (low 13, top 1): -3 */
    sc[10] = 0xA6;
    sc[7] = 0xF0; /* g15 raw 63 (low 15, top 3): +31 */
    sc[11] = 0xEA;
    qs[1] = 0x83, hmask[1] = 0x09;        /* e1: 3 with high bit; e97: 2 with high bit */
    qs[2] = 0x02;                         /* e2: 2 - 4 */
    qs[32 + 22] = 0x01, hmask[22] = 0x10; /* e150: 1 with high bit */
    qs[32 + 31] = 0xC0, hmask[31] = 0x80; /* e255: 3 with high bit */
    qs[32 + 30] = 0x40;                   /* e254: 1 - 4 */
    /* untouched quants are -4 */
    const float base[16] = {-4.0f, 0, 0, 0, 0, 0, 12.0f, 0, 0, -20.0f, 0, 0, 0, 0, 0, -124.0f};
    float want[NU_QK_K];
    fill_groups(want, base, 16);
    want[1] = 3.0f;
    want[2] = -2.0f;
    want[97] = -6.0f;
    want[150] = 5.0f;
    want[255] = 93.0f;
    want[254] = -93.0f;
    check_block(NU_TYPE_Q3_K, b, want);
}

/* The 12 scale bytes of the Q4_K/Q5_K blocks below: group 0 sc 1 m 4,
 * group 3 sc 10 m 0, group 5 sc 33 m 18, group 7 sc 63 m 63, the rest 0
 * (groups j < 4 in the low 6 bits of bytes j and j + 4; groups j >= 4 in
 * the nibbles of byte j + 4 and the top 2 bits of bytes j - 4 and j). */
static const uint8_t q45_scales[12] = {0x01, 0x80, 0x00, 0xCA, 0x04, 0x40,
                                       0x00, 0xC0, 0x00, 0x21, 0x00, 0xFF};

/* Q4_K: d @0, dmin @2, scales @4, qs[128] @16; elements 64c + l are the low
 * nibbles of qs[32c + l], 64c + 32 + l the high nibbles; groups of 32. */
static void test_q4_k_block(void **state) {
    (void)state;
    uint8_t b[144] = {0};
    uint8_t *qs = b + 16;
    b[0] = 0x00, b[1] = 0x3C, b[2] = 0x00, b[3] = 0x34; /* d = 1, dmin = 0.25 */
    memcpy(b + 4, q45_scales, 12);
    qs[0] = 0x05;       /* e0: 5 (its high nibble, e32 in group 1, is 0) */
    qs[31] = 0x0F;      /* e31: 15 */
    qs[32 + 4] = 0x70;  /* e100: 7 */
    qs[64 + 1] = 0x30;  /* e161: 3 */
    qs[96 + 31] = 0xF0; /* e255: 15 */
    qs[96] = 0x0F;      /* e192: 15 in group 6, whose scale is 0 */
    const float base[8] = {-1.0f, 0, 0, 0, 0, -4.5f, 0, -15.75f};
    float want[NU_QK_K];
    fill_groups(want, base, 32);
    want[0] = 4.0f;      /* 1 * 5 - 1 */
    want[31] = 14.0f;    /* 1 * 15 - 1 */
    want[100] = 70.0f;   /* 10 * 7 */
    want[161] = 94.5f;   /* 33 * 3 - 4.5 */
    want[255] = 929.25f; /* 63 * 15 - 15.75 */
    check_block(NU_TYPE_Q4_K, b, want);
}

/* Q5_K: d @0, dmin @2, scales @4, qh[32] @16, qs[128] @48; bit 4 of element
 * 64c + l is bit 2c of qh[l], of element 64c + 32 + l bit 2c + 1. */
static void test_q5_k_block(void **state) {
    (void)state;
    uint8_t b[176] = {0};
    uint8_t *qh = b + 16, *qs = b + 48;
    b[0] = 0x00, b[1] = 0x38, b[2] = 0x00, b[3] = 0x3C; /* d = 0.5, dmin = 1 */
    memcpy(b + 4, q45_scales, 12);
    qs[0] = 0x05, qh[0] = 0x41;        /* e0: 5 + 16; bit 6 is e192 (scale 0) */
    qs[31] = 0x0F;                     /* e31: 15 */
    qs[32 + 4] = 0x70, qh[4] = 0x08;   /* e100: 7 + 16 */
    qs[64 + 1] = 0x30, qh[1] = 0x20;   /* e161: 3 + 16 */
    qs[96 + 31] = 0xF0, qh[31] = 0x80; /* e255: 15 + 16 */
    const float base[8] = {-4.0f, 0, 0, 0, 0, -18.0f, 0, -63.0f};
    float want[NU_QK_K];
    fill_groups(want, base, 32);
    want[0] = 6.5f;     /* 0.5 * 21 - 4 */
    want[31] = 3.5f;    /* 0.5 * 15 - 4 */
    want[100] = 115.0f; /* 0.5 * 10 * 23 */
    want[161] = 295.5f; /* 0.5 * 33 * 19 - 18 */
    want[255] = 913.5f; /* 0.5 * 63 * 31 - 63 */
    check_block(NU_TYPE_Q5_K, b, want);
}

/* Q6_K: ql[128] @0, qh[64] @128, int8 scales[16] @192, d @208; for
 * n < 2, l < 32 with ql += 64n, qh += 32n: element 128n + l is
 * ql[l] & 15 | (qh[l] & 3) << 4, + 32 is ql[l + 32] & 15 | bits 2..3,
 * + 64 is ql[l] >> 4 | bits 4..5, + 96 is ql[l + 32] >> 4 | bits 6..7;
 * minus 32; group e / 16. */
static void test_q6_k_block(void **state) {
    (void)state;
    uint8_t b[210] = {0};
    uint8_t *ql = b, *qh = b + 128;
    int8_t *sc = (int8_t *)(b + 192);
    b[208] = 0x00, b[209] = 0x38; /* d = 0.5 */
    sc[0] = 1, sc[2] = -2, sc[7] = 3, sc[9] = 10, sc[15] = -128;
    ql[0] = 0x0A, qh[0] = 0x0E; /* e0: 10 | 2 << 4; e32: 15 | 3 << 4 */
    ql[32] = 0x0F;
    ql[48] = 0x50, qh[16] = 0x40;           /* e112: 5 | 1 << 4 */
    ql[64 + 22] = 0x01, qh[32 + 22] = 0x02; /* e150: 1 | 2 << 4 */
    ql[64 + 63] = 0xF0, qh[32 + 31] = 0xC0; /* e255: 15 | 3 << 4 */
    /* untouched quants are 0 - 32 */
    const float base[16] = {-16.0f, 0,       32.0f, 0, 0, 0, 0, -48.0f,
                            0,      -160.0f, 0,     0, 0, 0, 0, 2048.0f};
    float want[NU_QK_K];
    fill_groups(want, base, 16);
    want[0] = 5.0f;       /* 0.5 * 1 * 10 */
    want[32] = -31.0f;    /* 0.5 * -2 * 31 */
    want[112] = -16.5f;   /* 0.5 * 3 * -11 */
    want[150] = 5.0f;     /* 0.5 * 10 * 1 */
    want[255] = -1984.0f; /* 0.5 * -128 * 31 */
    check_block(NU_TYPE_Q6_K, b, want);
}

/* Two super-blocks in a row land in the right places, and the traits say
 * what the GGUF specification says. */
static void test_k_traits_and_rows(void **state) {
    (void)state;
    const uint32_t bytes[] = {84, 110, 144, 176, 210};
    for (size_t t = 0; t < N_K_TYPES; t++) {
        const nu_type_traits *tt = nu_type_get(k_types[t]);
        assert_int_equal(tt->block_size, 256);
        assert_int_equal(tt->block_bytes, bytes[t]);
        assert_true(tt->computable);
        assert_int_equal(nu_type_row_bytes(k_types[t], 512), 2 * bytes[t]);
        assert_int_equal(nu_type_row_bytes(k_types[t], 300), 0);
    }
    assert_false(nu_type_get(NU_TYPE_Q8_K)->computable);
    /* Q6_K: a zero block then a block with d = 1, scale 1 everywhere, all
     * quants 32 + 1 (low nibble 1, high bits 2 in every position). */
    uint8_t row[420] = {0};
    uint8_t *b = row + 210;
    memset(b, 0x11, 128);
    memset(b + 128, 0xAA, 64);
    memset(b + 192, 1, 16);
    b[208] = 0x00, b[209] = 0x3C;
    float y[512];
    nu_dequantize_row(NU_TYPE_Q6_K, row, y, 512);
    for (int e = 0; e < 256; e++) assert_true(y[e] == 0.0f);
    for (int e = 256; e < 512; e++) assert_true(y[e] == 1.0f);
}

/* ---- Encoder round trips ---------------------------------------------------- */

static double rms_error(const float *a, const float *b, int64_t n) {
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(e / (double)n);
}

static void test_round_trip_gaussian(void **state) {
    (void)state;
    const double naive[] = {0.327, 0.155, 0.0783, 0.0379, 0.0187}; /* see the file comment */
    const int64_t n = 256 * 256;
    rng r = {2024};
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    uint8_t *q = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = rng_gauss(&r);
    double prev = INFINITY;
    for (size_t t = 0; t < N_K_TYPES; t++) {
        nu_quantize_row(k_types[t], x, q, n);
        nu_dequantize_row(k_types[t], q, y, n);
        double rms = rms_error(x, y, n);
        print_message("%s: RMS error %.5f on N(0,1) (min/max rule: %.4f)\n",
                      nu_type_get(k_types[t])->name, rms, naive[t]);
        if (!(rms < 0.97 * naive[t]))
            fail_msg("%s: RMS %.5f not below 0.97 * %.4f", nu_type_get(k_types[t])->name, rms,
                     naive[t]);
        assert_true(rms < prev); /* more bits, less error */
        prev = rms;
    }
    free(x);
    free(y);
    free(q);
}

/* Scaled data keeps a relative error in line with the Gaussian case (down to
 * weights of 1e-3; far smaller ones underflow the f16 super-block scale, as
 * in every K-quant encoder); one-sided data, zeros, an outlier, NaN. */
static void test_round_trip_shapes(void **state) {
    (void)state;
    const double rel_bound[] = {0.327, 0.155, 0.0783, 0.0379, 0.0187};
    /* levels on the side one-sided data uses: 0..top, or the negative side */
    const double side_levels[] = {3, 4, 15, 31, 32};
    const int64_t n = 256 * 8;
    float x[256 * 8], y[256 * 8];
    uint8_t q[256 * 8];
    rng r = {7};
    const float scales[] = {1e-3f, 1.0f, 40.0f, 1000.0f};
    for (size_t t = 0; t < N_K_TYPES; t++) {
        uint32_t type = k_types[t];
        for (size_t s = 0; s < sizeof scales / sizeof *scales; s++) {
            for (int64_t i = 0; i < n; i++) x[i] = scales[s] * rng_gauss(&r);
            nu_quantize_row(type, x, q, n);
            nu_dequantize_row(type, q, y, n);
            /* the min/max rule's bound, with 10% for the smaller sample */
            assert_true(rms_error(x, y, n) < 1.1 * rel_bound[t] * scales[s]);
        }
        /* All positive, then all negative: mins cannot be above 0, so the
         * levels span 0..max, and every element is within half a step of
         * one (step = max|x| / side levels; 10% for the scale grid). */
        double amax = 0.0;
        for (int64_t i = 0; i < n; i++) {
            x[i] = 2.0f + 0.5f * fabsf(rng_gauss(&r));
            amax = fmax(amax, x[i]);
        }
        const double one_sided = 1.1 * amax / side_levels[t] / 2.0;
        nu_quantize_row(type, x, q, n);
        nu_dequantize_row(type, q, y, n);
        assert_true(rms_error(x, y, n) < one_sided);
        for (int64_t i = 0; i < n; i++) x[i] = -x[i];
        nu_quantize_row(type, x, q, n);
        nu_dequantize_row(type, q, y, n);
        assert_true(rms_error(x, y, n) < one_sided);
        /* zeros: exact */
        memset(x, 0, sizeof x);
        nu_quantize_row(type, x, q, n);
        nu_dequantize_row(type, q, y, n);
        for (int64_t i = 0; i < n; i++) assert_true(y[i] == 0.0f);
        /* one outlier in a block of zeros comes back to within f16 rounding
         * and the scale grid (the other elements stay 0) */
        x[300] = 5.0f;
        nu_quantize_row(type, x, q, n);
        nu_dequantize_row(type, q, y, n);
        assert_true(fabsf(y[300] - 5.0f) < 0.02f * 5.0f);
        for (int64_t i = 0; i < n; i++)
            if (i != 300) assert_true(fabsf(y[i]) < 1e-3f);
        /* non-finite input: no crash, finite or not, other blocks intact */
        for (int64_t i = 0; i < n; i++) x[i] = rng_gauss(&r);
        x[5] = NAN, x[600] = INFINITY;
        nu_quantize_row(type, x, q, n);
        nu_dequantize_row(type, q, y, n);
        assert_true(rms_error(x + 1024, y + 1024, 1024) < 1.1 * rel_bound[t]);
    }
}

/* ---- Matmul ------------------------------------------------------------------ */

typedef struct kmatrix {
    nu_matrix m;
    uint8_t *data;
    float *deq;
} kmatrix;

static kmatrix make_kmatrix(uint32_t type, int64_t n_in, int64_t n_out, rng *r) {
    kmatrix k;
    size_t rb = (size_t)nu_type_row_bytes(type, (uint64_t)n_in);
    k.data = malloc(rb * (size_t)n_out);
    k.deq = malloc(sizeof(float) * (size_t)(n_in * n_out));
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        float scale = 0.02f * (float)(1 + o % 4), shift = 0.005f * (float)(o % 3);
        for (int64_t i = 0; i < n_in; i++) row[i] = scale * rng_gauss(r) + shift;
        if (o == 1) memset(row, 0, sizeof(float) * (size_t)n_in);
        nu_quantize_row(type, row, k.data + rb * (size_t)o, n_in);
        nu_dequantize_row(type, k.data + rb * (size_t)o, k.deq + o * n_in, n_in);
    }
    free(row);
    k.m = (nu_matrix){.type = type, .n_in = n_in, .n_out = n_out, .data = k.data, .row_bytes = rb};
    return k;
}

static void free_kmatrix(kmatrix *k) {
    free(k->data);
    free(k->deq);
}

/* Activations: roughly normal with occasional outliers; row 2 is zero. */
static float *make_acts(int64_t n_in, int32_t n_batch, rng *r) {
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_batch));
    for (int64_t i = 0; i < n_in * n_batch; i++) {
        x[i] = rng_gauss(r);
        if ((rng_next(r) & 127) == 0) x[i] *= 30.0f;
    }
    if (n_batch > 2) memset(x + 2 * n_in, 0, sizeof(float) * (size_t)n_in);
    return x;
}

/* E and T of the file comment for weight row o and activation row x. */
static void bounds(const kmatrix *k, int64_t o, const float *x, double *E, double *T) {
    const int64_t n = k->m.n_in;
    const float *w = k->deq + o * n;
    const uint8_t *raw = k->data + k->m.row_bytes * (size_t)o;
    *E = *T = 0.0;
    for (int64_t b = 0; b < n / NU_QK_K; b++) {
        nu_kq_block blk;
        nu_kq_unpack(k->m.type, raw + (size_t)b * nu_type_get(k->m.type)->block_bytes, &blk);
        double amax = 0.0, wsum = 0.0;
        for (int e = 0; e < NU_QK_K; e++) {
            int64_t i = b * NU_QK_K + e;
            int g = e / blk.group;
            amax = fmax(amax, fabs((double)x[i]));
            wsum += fabs((double)w[i]);
            *T += (fabs((double)blk.d * blk.sc[g] * blk.q[e]) + fabs((double)blk.dmin * blk.m[g])) *
                  fabs((double)x[i]);
        }
        *E += amax / 254.0 * wsum;
    }
}

static void run_matmul(const nu_matrix *W, const float *x, int32_t n_batch, float *y,
                       int n_threads) {
    size_t bytes = nu_matmul_scratch_bytes(W->type, W->n_in, n_batch);
    void *scratch = malloc(bytes);
    nu_threadpool *pool = n_threads > 0 ? nu_threadpool_new(n_threads) : NULL;
    nu_matmul(pool, W, x, n_batch, y, scratch);
    nu_threadpool_free(pool);
    free(scratch);
}

/* Sum of w_i * (d_b * q_i) over the Q8_K form of activation row x. */
static double dot_q8k(const float *w, const float *x, int64_t n) {
    uint8_t *raw = malloc(nu_actk_row_bytes(n) + 64);
    uint8_t *act = (uint8_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    nu_quantize_act_k_scalar(x, n, act);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)w[i] * ((double)nu_actk_d(act, n)[i / NU_QK_K] * nu_actk_q(act)[i]);
    free(raw);
    return sum;
}

static void check_matmul(uint32_t type, int64_t n_in, rng *r) {
    const int64_t n_out = 11;
    const int32_t max_batch = 9;
    kmatrix k = make_kmatrix(type, n_in, n_out, r);
    float *x = make_acts(n_in, max_batch, r);
    float *ref = malloc(sizeof(float) * (size_t)(n_out * max_batch));
    float *y = malloc(sizeof(float) * (size_t)(n_out * max_batch));
    nu_matmul_ref(&k.m, x, max_batch, ref);
    for (int32_t nb = 1; nb <= max_batch; nb++) {
        memset(y, 0xFF, sizeof(float) * (size_t)(n_out * nb));
        run_matmul(&k.m, x, nb, y, nb % 3);
        for (int32_t b = 0; b < nb; b++) {
            for (int64_t o = 0; o < n_out; o++) {
                double E, T;
                bounds(&k, o, x + b * n_in, &E, &T);
                double got = y[b * n_out + o], want = ref[b * n_out + o];
                double tol = E * (1 + 1e-5) + 1e-5 * T + 1e-30;
                double q8 = dot_q8k(k.deq + o * n_in, x + b * n_in, n_in);
                if (!(fabs(got - want) <= tol) || !(fabs(got - q8) <= 1e-5 * T + 1e-30))
                    fail_msg("%s n_in %lld row %lld batch %d/%d: got %.9g ref %.9g (tol %g) "
                             "exact with int8 activations %.9g (tol %g)",
                             nu_type_get(type)->name, (long long)n_in, (long long)o, b, nb, got,
                             want, tol, q8, 1e-5 * T + 1e-30);
            }
        }
    }
    free(x);
    free(ref);
    free(y);
    free_kmatrix(&k);
}

static void test_matmul_scalar(void **state) {
    (void)state;
    rng r = {31337};
    const int64_t sizes[] = {256, 512, 768, 2048};
    assert_true(nu_kernels_force_level(NU_SIMD_SCALAR));
    for (size_t t = 0; t < N_K_TYPES; t++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            check_matmul(k_types[t], sizes[s], &r);
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* A row's value is bit-identical alone or among 13, with 1, 2 or 3 threads. */
static void test_matmul_reproducible(void **state) {
    (void)state;
    rng r = {5};
    const int64_t n_in = 1024, n_out = 37;
    const int32_t nb = 13;
    assert_true(nu_kernels_force_level(NU_SIMD_SCALAR));
    for (size_t t = 0; t < N_K_TYPES; t++) {
        kmatrix k = make_kmatrix(k_types[t], n_in, n_out, &r);
        float *x = make_acts(n_in, nb, &r);
        float *batched = malloc(sizeof(float) * (size_t)(n_out * nb));
        float *y = malloc(sizeof(float) * (size_t)(n_out * nb));
        run_matmul(&k.m, x, nb, batched, 2);
        for (int32_t b = 0; b < nb; b++) {
            run_matmul(&k.m, x + b * n_in, 1, y, 0);
            assert_memory_equal(y, batched + b * n_out, sizeof(float) * (size_t)n_out);
        }
        for (int threads = 1; threads <= 3; threads++) {
            run_matmul(&k.m, x, nb, y, threads);
            assert_memory_equal(y, batched, sizeof(float) * (size_t)(n_out * nb));
        }
        free(x);
        free(batched);
        free(y);
        free_kmatrix(&k);
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* Q8_K is activation-only: matmul with it leaves y untouched. */
static void test_q8_k_not_computable(void **state) {
    (void)state;
    uint8_t blk[292] = {0};
    float x[256] = {0}, y = 42.0f;
    nu_matrix m = {.type = NU_TYPE_Q8_K, .n_in = 256, .n_out = 1, .data = blk, .row_bytes = 292};
    nu_matmul(NULL, &m, x, 1, &y, NULL);
    nu_matmul_ref(&m, x, 1, &y);
    assert_true(y == 42.0f);
}

/* ---- Q8_K activations ---------------------------------------------------------- */

static void test_act_k_quantiser(void **state) {
    (void)state;
    const int64_t n = 512;
    float x[512];
    uint8_t *row = malloc(nu_actk_row_bytes(n) + 64);
    uint8_t *dst = (uint8_t *)(((uintptr_t)row + 63) & ~(uintptr_t)63);
    /* Block 0: the first largest is 127, so the scale is -127 / 127 = -1 and
     * d = -1 (llama.cpp's Q8_K), ties to even, bsums; block 1: zeros. */
    for (int i = 0; i < 256; i++) x[i] = 0.0f;
    x[0] = 127.0f, x[1] = 2.5f, x[2] = 3.5f, x[3] = -2.5f, x[4] = -0.4f, x[20] = -127.0f;
    x[21] = 63.5f;
    for (int i = 256; i < 512; i++) x[i] = 0.0f;
    memset(row, 0x5A, nu_actk_row_bytes(n) + 64);
    nu_quantize_act_k_scalar(x, n, dst);
    const int8_t *q = nu_actk_q(dst);
    const float *d = nu_actk_d(dst, n);
    const int16_t *bs = nu_actk_bsums(dst, n);
    assert_true(d[0] == -1.0f);
    assert_int_equal(q[0], -127);
    assert_int_equal(q[1], -2);
    assert_int_equal(q[2], -4);
    assert_int_equal(q[3], 2);
    assert_int_equal(q[4], 0);
    assert_int_equal(q[20], 127);
    assert_int_equal(q[21], -64);
    assert_int_equal(bs[0], -(127 + 2 + 4 - 2));
    assert_int_equal(bs[1], 127 - 64);
    for (int g = 2; g < 16; g++) assert_int_equal(bs[g], 0);
    /* the zero block and the padding */
    assert_true(d[1] == 0.0f);
    for (int i = 256; i < 512; i++) assert_int_equal(q[i], 0);
    for (int64_t i = 2; i < nu_actk_d_count(n); i++) assert_true(d[i] == 0.0f);
    for (int64_t g = 16; g < nu_actk_bsum_count(n); g++) assert_int_equal(bs[g], 0);

    /* Tiny values (max below 1e-30) count as zero; just above, they scale. */
    for (int i = 0; i < 256; i++) x[i] = 1e-31f * (float)(i % 7);
    for (int i = 256; i < 512; i++) x[i] = i == 300 ? -2e-30f : 0.0f;
    nu_quantize_act_k_scalar(x, n, dst);
    assert_true(d[0] == 0.0f);
    for (int i = 0; i < 256; i++) assert_int_equal(q[i], 0);
    for (int g = 0; g < 16; g++) assert_int_equal(bs[g], 0);
    assert_true(d[1] == 1.0f / (-127.0f / -2e-30f));
    assert_int_equal(q[300], -127);
    assert_int_equal(bs[16 + 44 / 16], -127);

    /* NaN: ignored by the maximum, quantised to -127 (as the SIMD min/max
     * instructions clamp it); an all-NaN block is zero. */
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 5) - 2.0f;
    x[7] = NAN;
    for (int i = 256; i < 512; i++) x[i] = NAN;
    nu_quantize_act_k_scalar(x, n, dst);
    assert_true(d[0] == 2.0f / 127.0f);
    assert_int_equal(q[7], -127);
    assert_int_equal(q[0], -127); /* -2 / (2/127) */
    assert_int_equal(q[4], 127);
    assert_true(d[1] == 0.0f);
    for (int i = 256; i < 512; i++) assert_int_equal(q[i], 0);
    free(row);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q2_k_block),          cmocka_unit_test(test_q3_k_block),
        cmocka_unit_test(test_q4_k_block),          cmocka_unit_test(test_q5_k_block),
        cmocka_unit_test(test_q6_k_block),          cmocka_unit_test(test_k_traits_and_rows),
        cmocka_unit_test(test_round_trip_gaussian), cmocka_unit_test(test_round_trip_shapes),
        cmocka_unit_test(test_matmul_scalar),       cmocka_unit_test(test_matmul_reproducible),
        cmocka_unit_test(test_q8_k_not_computable), cmocka_unit_test(test_act_k_quantiser),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
