/* test_kquant_kernels.c - the K-quant (Q2_K .. Q6_K) matmul kernels of every
 * SIMD level the CPU has, and the Q8_K activation quantisers.
 *
 * The reference here is a per-element decoder written from the format
 * description in kquant.h (independent of quant_k.c's, which it is also
 * checked against): element e of a super-block is w_e = a_e - b_e with
 * a_e = d * sc * q_e (signed q for Q3_K and Q6_K) and b_e = dmin * m.
 *
 * Tolerances, per output y of a weight row w and activation row x; xq is x
 * after the Q8_K rounding (d_a * q, as nu_quantize_act_k_scalar makes it):
 *   T = sum_e (|a_e| + |b_e|) * |xq_e|, the size of the terms a kernel adds in
 *       float (one rounding each per super-block, <= 30 float additions of
 *       partial sums for the shapes here: 1e-5 * T covers them);
 *   E = sum over super-blocks of (max |x| / 254) * sum |w_e|: rounding an
 *       activation to d_a * q with d_a = max|x| / 127 moves it by d_a / 2 at
 *       most, so the exact dot with xq differs from the one with x by <= E.
 *   level vs exact sum of w * xq (double):     |y - y_q|   <= 1e-5 * T + 1e-30
 *   level vs exact sum of w * x, and vs nu_matmul_ref:
 *                                              |y - y_ref| <= E * (1 + 1e-5) + 1e-5 * T + 1e-30
 *   level vs the scalar level (both within 1e-5 * T of y_q):
 *                                              |y - y_sc|  <= 2e-5 * T + 1e-30
 * Hand-made blocks whose products are exact in float are checked exactly.
 */
#include "test_support.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "kernels.h"
#include "kquant.h"
#include "test_rng.h"

/* ---- Helpers --------------------------------------------------------------- */

static const uint32_t k_types[] = {NU_TYPE_Q2_K, NU_TYPE_Q3_K, NU_TYPE_Q4_K, NU_TYPE_Q5_K,
                                   NU_TYPE_Q6_K};
#define N_KTYPES (sizeof k_types / sizeof k_types[0])

static const char *level_name(nu_simd l) {
    return l == NU_SIMD_SCALAR ? "scalar" : l == NU_SIMD_AVX2 ? "avx2" : "avx512";
}

static size_t kblock_bytes(uint32_t type) {
    return nu_type_get(type)->block_bytes;
}

static double half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return (double)nu_f16_to_f32(h);
}

/* ---- The reference decoder (from the kquant.h description) ---------------- */

/* Q2_K / Q3_K low bits of element e: bits 2j of qs[32n + l]. */
static int low2(const uint8_t *qs, int e) {
    int n = e / 128, j = e % 128 / 32, l = e % 32;
    return (qs[32 * n + l] >> (2 * j)) & 3;
}

/* Six-bit scale (is_min = 0) or min (1) of group j of Q4_K / Q5_K. */
static int k4_scale(const uint8_t *s, int j, int is_min) {
    if (j < 4) return s[j + 4 * is_min] & 63;
    if (!is_min) return (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    return (s[j + 4] >> 4) | (s[j] >> 6) << 4;
}

/* a_e and b_e of every element of one super-block (w_e = a_e - b_e). */
static void decode_ref(uint32_t type, const uint8_t *blk, double *a, double *b) {
    for (int e = 0; e < NU_QK_K; e++) {
        const int g16 = e / 16, g32 = e / 32, c = e / 64, r = e % 64;
        switch (type) {
        case NU_TYPE_Q2_K: {
            const uint8_t *sc = blk + offsetof(nu_block_q2_k, scales);
            int n = e / 128, j = e % 128 / 32, l = e % 32, g = 8 * n + 2 * j + l / 16;
            a[e] = half_at(blk + offsetof(nu_block_q2_k, d)) * (sc[g] & 15) *
                   low2(blk + offsetof(nu_block_q2_k, qs), e);
            b[e] = half_at(blk + offsetof(nu_block_q2_k, dmin)) * (sc[g] >> 4);
            break;
        }
        case NU_TYPE_Q3_K: {
            const uint8_t *hm = blk + offsetof(nu_block_q3_k, hmask);
            const uint8_t *s = blk + offsetof(nu_block_q3_k, scales);
            int n = e / 128, j = e % 128 / 32, l = e % 32;
            int hbit = (hm[l] >> (4 * n + j)) & 1;
            int q = low2(blk + offsetof(nu_block_q3_k, qs), e) - (hbit ? 0 : 4);
            int lowbits = g16 < 8 ? s[g16 % 8] & 15 : s[g16 % 8] >> 4;
            int top = (s[8 + g16 % 4] >> (2 * (g16 / 4))) & 3;
            a[e] = half_at(blk + offsetof(nu_block_q3_k, d)) * ((lowbits | top << 4) - 32) * q;
            b[e] = 0.0;
            break;
        }
        case NU_TYPE_Q4_K:
        case NU_TYPE_Q5_K: {
            const int five = type == NU_TYPE_Q5_K;
            const uint8_t *s =
                blk + (five ? offsetof(nu_block_q5_k, scales) : offsetof(nu_block_q4_k, scales));
            const uint8_t *qs =
                blk + (five ? offsetof(nu_block_q5_k, qs) : offsetof(nu_block_q4_k, qs));
            int byte = qs[32 * c + r % 32], q = r < 32 ? byte & 15 : byte >> 4;
            if (five)
                q |= ((blk[offsetof(nu_block_q5_k, qh) + r % 32] >> (2 * c + r / 32)) & 1) << 4;
            a[e] = half_at(blk) * k4_scale(s, g32, 0) * q;
            b[e] = half_at(blk + 2) * k4_scale(s, g32, 1);
            break;
        }
        default: { /* Q6_K */
            const uint8_t *ql = blk + 64 * (e / 128), *qh = blk + 128 + 32 * (e / 128);
            int t = e % 128 / 32, l = e % 32, byte = ql[l + 32 * (t % 2)];
            int q = (t < 2 ? byte & 15 : byte >> 4) | ((qh[l] >> (2 * t)) & 3) << 4;
            int8_t sc = (int8_t)blk[offsetof(nu_block_q6_k, scales) + g16];
            a[e] = half_at(blk + offsetof(nu_block_q6_k, d)) * sc * (q - 32);
            b[e] = 0.0;
            break;
        }
        }
    }
}

/* ---- Test data -------------------------------------------------------------- */

/* A random super-block scale as f16: +-2^-14 .. 2^-4 (small so dot products
 * stay in a sane range, and negative too, to exercise signs). */
static uint16_t random_scale(rng *r) {
    float mag = ldexpf(1.0f + 0.5f * (rng_sym(r) + 1.0f), -4 - (int)(rng_next(r) % 11));
    return nu_f32_to_f16(rng_next(r) & 1 ? -mag : mag);
}

/* Writes the f16 super-block scales (d, and dmin where the type has one). */
static void set_scales(uint32_t type, uint8_t *blk, uint16_t d, uint16_t dmin) {
    switch (type) {
    case NU_TYPE_Q2_K:
        memcpy(blk + offsetof(nu_block_q2_k, d), &d, 2);
        memcpy(blk + offsetof(nu_block_q2_k, dmin), &dmin, 2);
        break;
    case NU_TYPE_Q3_K: memcpy(blk + offsetof(nu_block_q3_k, d), &d, 2); break;
    case NU_TYPE_Q6_K: memcpy(blk + offsetof(nu_block_q6_k, d), &d, 2); break;
    default: /* Q4_K, Q5_K: d, dmin first */
        memcpy(blk, &d, 2);
        memcpy(blk + 2, &dmin, 2);
        break;
    }
}

/* One super-block: random bits (every bit pattern of the quants and scales
 * is a valid block) with random finite f16 scales; every 7th block has all
 * bits set (the largest quants, scales and mins) and every 11th is zero. */
static void random_block(uint32_t type, uint8_t *blk, int64_t index, rng *r) {
    const size_t bytes = kblock_bytes(type);
    if (index % 11 == 10) {
        memset(blk, 0, bytes);
        return;
    }
    for (size_t i = 0; i < bytes; i++) blk[i] = (uint8_t)rng_next(r);
    if (index % 7 == 3) memset(blk, 0xFF, bytes);
    set_scales(type, blk, random_scale(r), random_scale(r));
}

typedef struct kmatrix {
    nu_matrix m;
    uint8_t *data;
    double *a, *b; /* decoded rows */
} kmatrix;

/* n_out rows of n_in elements: rows 1 and 5 (mod 6) come from quantising
 * random floats with nu_quantize_row (realistic blocks), the others are
 * random bits. */
static kmatrix make_kmatrix(uint32_t type, int64_t n_in, int64_t n_out, rng *r) {
    kmatrix k;
    const size_t row_bytes = (size_t)(n_in / NU_QK_K) * kblock_bytes(type);
    k.data = malloc(row_bytes * (size_t)n_out);
    k.a = malloc(sizeof(double) * (size_t)(n_in * n_out));
    k.b = malloc(sizeof(double) * (size_t)(n_in * n_out));
    float *row = malloc(sizeof(float) * (size_t)n_in);
    assert_true(k.data && k.a && k.b && row);
    for (int64_t o = 0; o < n_out; o++) {
        uint8_t *w = k.data + row_bytes * (size_t)o;
        if (o % 6 == 1 || o % 6 == 5) {
            for (int64_t i = 0; i < n_in; i++) row[i] = 0.1f * rng_sym(r) + 0.02f * (float)(o % 3);
            nu_quantize_row(type, row, w, n_in);
        } else {
            for (int64_t s = 0; s < n_in / NU_QK_K; s++)
                random_block(type, w + (size_t)s * kblock_bytes(type), o * 5 + s, r);
        }
        for (int64_t s = 0; s < n_in / NU_QK_K; s++)
            decode_ref(type, w + (size_t)s * kblock_bytes(type), k.a + o * n_in + s * NU_QK_K,
                       k.b + o * n_in + s * NU_QK_K);
    }
    free(row);
    k.m = (nu_matrix){
        .type = type, .n_in = n_in, .n_out = n_out, .data = k.data, .row_bytes = row_bytes};
    return k;
}

static void free_kmatrix(kmatrix *k) {
    free(k->data);
    free(k->a);
    free(k->b);
}

/* Activation rows: roughly normal with outliers; row 2 has a zero
 * super-block, row 3 is all zero, row 4 all 3.0 (every q = 127, the largest
 * integer sums), row 5 alternates +-1e3, row 6 is tiny (1e-20). */
static float *make_kacts(int64_t n_in, int32_t n_batch, rng *r) {
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_batch));
    for (int32_t b = 0; b < n_batch; b++) {
        float *row = x + (int64_t)b * n_in;
        for (int64_t i = 0; i < n_in; i++) {
            float v = rng_sym(r) + rng_sym(r) + rng_sym(r);
            if ((rng_next(r) & 255) == 0) v *= 30.0f;
            row[i] = v;
            if (b == 3) row[i] = 0.0f;
            if (b == 4) row[i] = 3.0f;
            if (b == 5) row[i] = i % 2 ? 1e3f : -1e3f;
            if (b == 6) row[i] = 1e-20f * v;
        }
        if (b == 2) memset(row, 0, sizeof(float) * NU_QK_K);
    }
    return x;
}

/* The activations after Q8_K rounding, as doubles (d_a * q). */
static double *dequantized_acts(const float *x, int64_t n_in, int32_t n_batch) {
    uint8_t *row = aligned_alloc(64, nu_actk_row_bytes(n_in));
    double *xq = malloc(sizeof(double) * (size_t)(n_in * n_batch));
    for (int32_t b = 0; b < n_batch; b++) {
        nu_quantize_act_k_scalar(x + (int64_t)b * n_in, n_in, row);
        for (int64_t i = 0; i < n_in; i++)
            xq[(int64_t)b * n_in + i] =
                (double)nu_actk_d(row, n_in)[i / NU_QK_K] * nu_actk_q(row)[i];
    }
    free(row);
    return xq;
}

/* Runs nu_matmul at the current level with a pool of n_threads (0: none). */
static void run_matmul(const nu_matrix *W, const float *x, int32_t n_batch, float *y,
                       int n_threads) {
    void *scratch = malloc(nu_matmul_scratch_bytes(W->type, W->n_in, n_batch));
    nu_threadpool *pool = n_threads > 0 ? nu_threadpool_new(n_threads) : NULL;
    nu_matmul(pool, W, x, n_batch, y, scratch);
    nu_threadpool_free(pool);
    free(scratch);
}

/* Exact dots and the bounds of the file comment for row o and activation
 * row b: yq = w . xq, yx = w . x. */
typedef struct expect {
    double yq, yx, T, E;
} expect;

static expect expected(const kmatrix *k, int64_t o, const float *x, const double *xq) {
    const int64_t n = k->m.n_in;
    const double *a = k->a + o * n, *b = k->b + o * n;
    expect r = {0, 0, 0, 0};
    for (int64_t s = 0; s < n; s += NU_QK_K) {
        double amax = 0.0, wsum = 0.0;
        for (int64_t i = s; i < s + NU_QK_K; i++) {
            r.yq += (a[i] - b[i]) * xq[i];
            r.yx += (a[i] - b[i]) * (double)x[i];
            r.T += (fabs(a[i]) + fabs(b[i])) * fabs(xq[i]);
            amax = fmax(amax, fabs((double)x[i]));
            wsum += fabs(a[i] - b[i]);
        }
        r.E += amax / 254.0 * wsum;
    }
    return r;
}

/* ---- The reference decoder against quant_k.c ---------------------------------- */

/* Two independent readings of the formats agree on random blocks (up to the
 * float rounding of quant_k.c's (d * sc) * q - dmin * m). */
static void test_decoders_agree(void **state) {
    (void)state;
    rng r = {17};
    for (size_t t = 0; t < N_KTYPES; t++) {
        const uint32_t type = k_types[t];
        uint8_t blk[256];
        double a[NU_QK_K], b[NU_QK_K];
        float got[NU_QK_K];
        for (int i = 0; i < 200; i++) {
            random_block(type, blk, i, &r);
            decode_ref(type, blk, a, b);
            nu_dequantize_row(type, blk, got, NU_QK_K);
            for (int e = 0; e < NU_QK_K; e++) {
                double want = a[e] - b[e], tol = 0x1p-22 * (fabs(a[e]) + fabs(b[e]));
                if (!(fabs(got[e] - want) <= tol))
                    fail_msg("%s block %d element %d: quant_k %.9g, reference %.9g",
                             nu_type_get(type)->name, i, e, got[e], want);
            }
        }
    }
}

/* ---- Hand-made blocks ---------------------------------------------------------- */

/* One weight row of one super-block against one-hot activation rows: x_e =
 * 127 quantises to d_a = 1, q = 127, so y = 127 * w_e, exact in float. */
static void check_one_hot(const char *what, uint32_t type, const uint8_t *blk, const int *elems,
                          const double *want, int count) {
    float x[4 * NU_QK_K], y[4];
    memset(x, 0, sizeof x);
    for (int v = 0; v < count; v++) x[v * NU_QK_K + elems[v]] = 127.0f;
    nu_matrix m = {
        .type = type, .n_in = NU_QK_K, .n_out = 1, .data = blk, .row_bytes = kblock_bytes(type)};
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        for (int n = 1; n <= count; n++) { /* the same values alone and in tiles of n */
            memset(y, 0xFF, sizeof y);
            run_matmul(&m, x, n, y, 0);
            for (int v = 0; v < n; v++)
                if (y[v] != (float)(127.0 * want[v]))
                    fail_msg("%s %s element %d: got %.9g, want 127 * %g", what, level_name(l),
                             elems[v], y[v], want[v]);
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

static void set_half(uint8_t *p, uint16_t h) {
    memcpy(p, &h, 2);
}

/* Values worked out by hand from the format description (d = 1, dmin = 0.5). */
static void test_hand_made_blocks(void **state) {
    (void)state;
    uint8_t blk[256];
    { /* Q2_K. Element 84 = 64 + 20: n 0, j 2, l 20, bits 4-5 of qs[20], group 5.
       * Element 227 = 128 + 96 + 3: bits 6-7 of qs[35], group 8 + 6 + 0 = 14. */
        memset(blk, 0, sizeof blk);
        set_half(blk + 80, 0x3C00), set_half(blk + 82, 0x3800);
        blk[5] = 0x37;       /* group 5: sc 7, m 3 */
        blk[14] = 0x1F;      /* group 14: sc 15, m 1 */
        blk[16 + 20] = 0x20; /* q 2 */
        blk[16 + 35] = 0xC0; /* q 3 */
        const int e[] = {84, 227};
        const double w[] = {7 * 2 - 0.5 * 3, 15 * 3 - 0.5 * 1};
        check_one_hot("q2_k", NU_TYPE_Q2_K, blk, e, w, 2);
    }
    { /* Q3_K. Element 84: low2 = bits 4-5 of qs[20], hbit = bit 2 of hmask[20],
       * group 5: low nibble of scales[5], top bits 2-3 of scales[9].
       * Element 227: bits 6-7 of qs[35] (0), hbit = bit 7 of hmask[3] (0, so
       * q = -4), group 14: high nibble of scales[6], bits 6-7 of scales[10]. */
        memset(blk, 0, sizeof blk);
        set_half(blk + 108, 0x3C00);
        blk[32 + 20] = 0x30; /* low2 3 */
        blk[20] = 0x04;      /* hbit 1: q = 3 */
        blk[96 + 5] = 0x0D;  /* group 5: 13 | 2 << 4 = 45 */
        blk[96 + 9] = 0x08;
        blk[96 + 6] = 0x50; /* group 14: 5 */
        const int e[] = {84, 227};
        const double w[] = {(45 - 32) * 3, (5 - 32) * -4};
        check_one_hot("q3_k", NU_TYPE_Q3_K, blk, e, w, 2);
    }
    { /* Q4_K. Element 100 = 64 + 36: high nibble of qs[36], group 3 (sc =
       * scales[3] & 63, m = scales[7] & 63). Element 230 = 192 + 38: high
       * nibble of qs[102], group 7: sc = scales[11] & 15 | (scales[3] >> 6) << 4,
       * m = scales[11] >> 4 | (scales[7] >> 6) << 4. */
        memset(blk, 0, sizeof blk);
        set_half(blk, 0x3C00), set_half(blk + 2, 0x3800);
        blk[4 + 3] = 0xC5;  /* sc3 5; top bits 3 for sc7 */
        blk[4 + 7] = 0x09;  /* m3 9 */
        blk[4 + 11] = 0x21; /* sc7 1 | 3 << 4 = 49, m7 2 */
        blk[16 + 36] = 0xA0;
        blk[16 + 102] = 0xF3;
        const int e[] = {100, 230};
        const double w[] = {5 * 10 - 0.5 * 9, 49 * 15 - 0.5 * 2};
        check_one_hot("q4_k", NU_TYPE_Q4_K, blk, e, w, 2);
    }
    { /* Q5_K: the Q4_K scales; bit 4 of element 64c + l is bit 2c of qh[l],
       * of 64c + 32 + l bit 2c + 1. Element 100 (c 1, upper, l 4): bit 3 of
       * qh[4] set: q = 10 + 16. Element 230 (c 3, upper, l 6): bit 7 of qh[6]
       * clear, q = 15. Element 198 (c 3, lower, l 6): bit 6 of qh[6] set,
       * low nibble of qs[102] = 3, q = 19; group 6: sc = scales[10] & 15 |
       * (scales[2] >> 6) << 4 = 4, m = scales[10] >> 4 | (scales[6] >> 6) << 4 = 3. */
        memset(blk, 0, sizeof blk);
        set_half(blk, 0x3C00), set_half(blk + 2, 0x3800);
        blk[4 + 3] = 0xC5, blk[4 + 7] = 0x09, blk[4 + 11] = 0x21;
        blk[4 + 10] = 0x34;
        blk[16 + 4] = 0x08;
        blk[16 + 6] = 0x40;
        blk[48 + 36] = 0xA0;
        blk[48 + 102] = 0xF3;
        const int e[] = {100, 230, 198};
        const double w[] = {5 * 26 - 0.5 * 9, 49 * 15 - 0.5 * 2, 4 * 19 - 0.5 * 3};
        check_one_hot("q5_k", NU_TYPE_Q5_K, blk, e, w, 3);
    }
    { /* Q6_K. Element 100 (n 0, t 3, l 4): high nibble of ql[36] | bits 6-7 of
       * qh[4] << 4, group 6. Element 130 (n 1, t 0, l 2): low nibble of
       * ql[66] | bits 0-1 of qh[34] << 4, group 8. Element 255 (n 1, t 3,
       * l 31): high nibble of ql[127] | bits 6-7 of qh[63] << 4, group 15. */
        memset(blk, 0, sizeof blk);
        set_half(blk + 208, 0x3C00);
        blk[36] = 0x70, blk[128 + 4] = 0x80;                                  /* 7 | 2 << 4 = 39 */
        blk[66] = 0x05;                                                       /* 5 */
        blk[127] = 0xF0, blk[128 + 63] = 0xC0;                                /* 63 */
        blk[192 + 6] = (uint8_t)-3, blk[192 + 8] = 100, blk[192 + 15] = 0x80; /* -128 */
        const int e[] = {100, 130, 255};
        const double w[] = {-3 * (39 - 32), 100 * (5 - 32), -128 * (63 - 32)};
        check_one_hot("q6_k", NU_TYPE_Q6_K, blk, e, w, 3);
    }
}

/* ---- Every level against the references ------------------------------------------ */

static const int64_t k_n_in[] = {256, 512, 2816, 5632};
#define MAX_BATCH 9

/* One type and n_in at one level, n_batch 1..MAX_BATCH, with 0..2 threads. */
static void check_kmatrix(const kmatrix *kp, nu_simd level, rng *r, const char *what) {
    const kmatrix k = *kp;
    const uint32_t type = k.m.type;
    const int64_t n_in = k.m.n_in, n_out = k.m.n_out;
    float *x = make_kacts(n_in, MAX_BATCH, r);
    double *xq = dequantized_acts(x, n_in, MAX_BATCH);
    const size_t ny = (size_t)(n_out * MAX_BATCH);
    float *ref = malloc(sizeof(float) * ny), *scalar = malloc(sizeof(float) * ny);
    float *y = malloc(sizeof(float) * ny);
    for (size_t i = 0; i < ny; i++) ref[i] = NAN;
    nu_matmul_ref(&k.m, x, MAX_BATCH, ref);
    assert_true(nu_kernels_force_level(NU_SIMD_SCALAR));
    run_matmul(&k.m, x, MAX_BATCH, scalar, 0);
    assert_true(nu_kernels_force_level(level));
    for (int32_t nb = 1; nb <= MAX_BATCH; nb++) {
        memset(y, 0xFF, sizeof(float) * ny);
        run_matmul(&k.m, x, nb, y, nb % 3);
        for (int32_t b = 0; b < nb; b++) {
            for (int64_t o = 0; o < n_out; o++) {
                const expect e = expected(&k, o, x + b * n_in, xq + b * n_in);
                const size_t i = (size_t)(b * n_out + o);
                const double got = y[i];
                const double tol_q = 1e-5 * e.T + 1e-30, tol_x = e.E * (1 + 1e-5) + tol_q;
                if (!(fabs(got - e.yq) <= tol_q) || !(fabs(got - e.yx) <= tol_x) ||
                    !(fabs(got - ref[i]) <= tol_x) || !(fabs(got - scalar[i]) <= 2 * tol_q))
                    fail_msg("%s%s %s n_in %lld row %lld act %d/%d: got %.9g, exact on rounded "
                             "acts %.9g (tol %.3g), exact %.9g, nu_matmul_ref %.9g (tol %.3g), "
                             "scalar %.9g",
                             what, level_name(level), nu_type_get(type)->name, (long long)n_in,
                             (long long)o, b, nb, got, e.yq, tol_q, e.yx, ref[i], tol_x, scalar[i]);
            }
        }
    }
    free(x);
    free(xq);
    free(ref);
    free(scalar);
    free(y);
}

static void check_level(uint32_t type, int64_t n_in, nu_simd level, rng *r) {
    kmatrix k = make_kmatrix(type, n_in, 13, r);
    check_kmatrix(&k, level, r, "");
    free_kmatrix(&k);
}

static void test_levels_against_references(void **state) {
    (void)state;
    rng r = {2024};
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++)
        for (size_t t = 0; t < N_KTYPES; t++)
            for (size_t i = 0; i < sizeof k_n_in / sizeof *k_n_in; i++)
                check_level(k_types[t], k_n_in[i], (nu_simd)l, &r);
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* Every K-type matrix of the files llama-quantize --pure wrote from a tiny
 * model (tests/arch/quantized, its own encoder: scales, minima and quants as
 * real files have them), at every level, with the panel copy where the level
 * has one, against the same references as above. */
static void check_file_matrix(const nu_gguf_tensor *g, const char *what, void *ctx) {
    kmatrix k;
    const int64_t n_in = g->ne[0], n_out = g->ne[1];
    const size_t row_bytes = (size_t)(n_in / NU_QK_K) * kblock_bytes(g->type);
    k.data = malloc(row_bytes * (size_t)n_out);
    k.a = malloc(sizeof(double) * (size_t)(n_in * n_out));
    k.b = malloc(sizeof(double) * (size_t)(n_in * n_out));
    assert_true(k.data && k.a && k.b);
    memcpy(k.data, g->data, row_bytes * (size_t)n_out);
    for (int64_t o = 0; o < n_out; o++)
        for (int64_t s = 0; s < n_in / NU_QK_K; s++)
            decode_ref(g->type, k.data + row_bytes * (size_t)o + (size_t)s * kblock_bytes(g->type),
                       k.a + o * n_in + s * NU_QK_K, k.b + o * n_in + s * NU_QK_K);
    k.m = (nu_matrix){
        .type = g->type, .n_in = n_in, .n_out = n_out, .data = k.data, .row_bytes = row_bytes};
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        nu_kernels_force_level((nu_simd)l);
        void *packed = NULL;
        const size_t pb = nu_matrix_pack_bytes(&k.m);
        if (pb) {
            packed = aligned_alloc(64, (pb + 63) / 64 * 64);
            assert_non_null(packed);
            nu_matrix_pack(&k.m, packed, 0, n_out / 16);
        }
        k.m.packed = packed;
        check_kmatrix(&k, (nu_simd)l, ctx, what);
        k.m.packed = NULL;
        free(packed);
    }
    free_kmatrix(&k);
}

static void test_llama_quantize_files(void **state) {
    (void)state;
    rng r = {99};
    static const char *const names[] = {"q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};
    for (size_t t = 0; t < N_KTYPES; t++)
        assert_true(nu_test_each_quantized_matrix(names[t], k_types[t], check_file_matrix, &r) >=
                    7);
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* ---- Reproducibility --------------------------------------------------------------- */

/* A (row, activation row) value is bit-identical alone, at any place in a
 * batch (so in any tile position and tile width) and with 1..3 threads. */
static void check_reproducible(uint32_t type, nu_simd level, rng *r) {
    const int64_t n_in = 2816, n_out = 37;
    const int32_t nb = 9;
    kmatrix k = make_kmatrix(type, n_in, n_out, r);
    float *x = make_kacts(n_in, nb, r);
    float *all = malloc(sizeof(float) * (size_t)(n_out * nb));
    float *y = malloc(sizeof(float) * (size_t)(n_out * nb));
    assert_true(nu_kernels_force_level(level));
    run_matmul(&k.m, x, nb, all, 2);
    for (int32_t b = 0; b < nb; b++) {
        run_matmul(&k.m, x + b * n_in, 1, y, 0);
        assert_memory_equal(y, all + b * n_out, sizeof(float) * (size_t)n_out);
    }
    for (int32_t skip = 1; skip <= 3; skip++) { /* rows shifted to other tile slots */
        run_matmul(&k.m, x + skip * n_in, nb - skip, y, skip % 2);
        assert_memory_equal(y, all + skip * n_out, sizeof(float) * (size_t)(n_out * (nb - skip)));
    }
    for (int threads = 1; threads <= 3; threads++) {
        memset(y, 0, sizeof(float) * (size_t)(n_out * nb));
        run_matmul(&k.m, x, nb, y, threads);
        assert_memory_equal(y, all, sizeof(float) * (size_t)(n_out * nb));
    }
    free(x);
    free(all);
    free(y);
    free_kmatrix(&k);
}

static void test_reproducible(void **state) {
    (void)state;
    rng r = {77};
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++)
        for (size_t t = 0; t < N_KTYPES; t++) check_reproducible(k_types[t], (nu_simd)l, &r);
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* ---- Q8_K activation quantisers ------------------------------------------------------ */

/* Every level's quantiser writes the same bytes as the scalar one, padding
 * included, on data with NaN, infinities, zeros, tiny, huge and subnormal
 * values and exact rounding ties. */
static void test_quantize_act_k_identical(void **state) {
    (void)state;
    rng r = {5};
    const int64_t n = NU_QK_K * 21; /* d and bsums both need padding */
    float *x = malloc(sizeof(float) * (size_t)n);
    const size_t bytes = nu_actk_row_bytes(n);
    uint8_t *want = aligned_alloc(64, bytes), *got = aligned_alloc(64, bytes);
    for (int64_t i = 0; i < n; i++) {
        float v = rng_sym(&r) + rng_sym(&r) + rng_sym(&r);
        x[i] = v * powf(10.0f, (float)(i / NU_QK_K % 11) - 5.0f);
    }
    float *blk = x;
    blk[7] = NAN, blk[200] = -NAN;                                              /* block 0 */
    blk = x + NU_QK_K;                                                          /* block 1 */
    blk[3] = INFINITY;                                                          /* all -127 or 0 */
    blk = x + 2 * NU_QK_K;                                                      /* block 2 */
    for (int j = 0; j < NU_QK_K; j++) blk[j] = 1e-35f * (float)j;               /* tiny: zero */
    blk = x + 3 * NU_QK_K;                                                      /* block 3 */
    for (int j = 0; j < NU_QK_K; j++) blk[j] = (float)(j % 2 ? 127 : 63.5);     /* ties at 1 */
    blk = x + 4 * NU_QK_K;                                                      /* block 4 */
    for (int j = 0; j < NU_QK_K; j++) blk[j] = 2.5f * (float)(j % 64 - 32);     /* ties */
    blk = x + 5 * NU_QK_K;                                                      /* block 5 */
    for (int j = 0; j < NU_QK_K; j++) blk[j] = j % 3 ? 3e38f : -3.4e38f;        /* huge */
    blk = x + 6 * NU_QK_K;                                                      /* block 6 */
    for (int j = 0; j < NU_QK_K; j++) blk[j] = 0x1p-140f * (float)(j - 128);    /* subnormal */
    blk = x + 7 * NU_QK_K;                                                      /* block 7 */
    memset(blk, 0, sizeof(float) * NU_QK_K);                                    /* zeros */
    blk = x + 8 * NU_QK_K;                                                      /* block 8 */
    for (int j = 0; j < NU_QK_K; j++) blk[j] = NAN;                             /* all NaN */
    blk = x + 9 * NU_QK_K;                                                      /* block 9 */
    for (int j = 0; j < NU_QK_K; j++) blk[j] = (j % 2 ? -1.0f : 1.0f) * 1e-29f; /* near TINY */
    memset(want, 0xEE, bytes);
    nu_quantize_act_k_scalar(x, n, want);
    for (int l = 1; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        memset(got, 0xEE, bytes);
        nu_kernels_current()->quantize_act_k(x, n, got);
        for (size_t i = 0; i < bytes; i++)
            if (got[i] != want[i])
                fail_msg("%s: byte %zu of %zu differs: %d, scalar %d", level_name(l), i, bytes,
                         got[i], want[i]);
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
    /* The layout as documented (llama.cpp's Q8_K): the scale -127 / m of the
     * first element of largest magnitude (127 in block 3: x * -1), ties
     * round to even (-63.5 -> -64), d = 1 / (-127 / m) = -1, bsums add up the
     * quants, NaN clamps to -127, padding is zero. Block 4's first largest
     * is -80 (j = 0): scale 127 / 80, 2.5 * 127 / 80 = 3.96875 -> 4. */
    const int8_t *q = nu_actk_q(want);
    const int16_t *bs = nu_actk_bsums(want, n);
    assert_int_equal(q[3 * NU_QK_K], -64);
    assert_int_equal(q[3 * NU_QK_K + 1], -127);
    assert_int_equal(bs[3 * 16], -(8 * 64 + 8 * 127));
    assert_int_equal(q[7], -127);
    assert_true(nu_actk_d(want, n)[3] == -1.0f);
    assert_int_equal(q[4 * NU_QK_K], -127);
    assert_int_equal(q[4 * NU_QK_K + 33], 4);
    assert_true(nu_actk_d(want, n)[4] == 1.0f / (127.0f / 80.0f));
    assert_true(nu_actk_d(want, n)[2] == 0.0f && nu_actk_d(want, n)[8] == 0.0f);
    for (int64_t i = n / NU_QK_K; i < nu_actk_d_count(n); i++)
        assert_true(nu_actk_d(want, n)[i] == 0.0f);
    for (int64_t i = n / 16; i < nu_actk_bsum_count(n); i++) assert_int_equal(bs[i], 0);
    free(x);
    free(want);
    free(got);
}

/* Random rows of many magnitudes, many times: identical bytes at every level. */
static void test_quantize_act_k_random(void **state) {
    (void)state;
    rng r = {6};
    const int64_t n = NU_QK_K * 8;
    float *x = malloc(sizeof(float) * (size_t)n);
    const size_t bytes = nu_actk_row_bytes(n);
    uint8_t *want = aligned_alloc(64, bytes), *got = aligned_alloc(64, bytes);
    for (int iter = 0; iter < 300; iter++) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)rng_next(&r);
            float v;
            memcpy(&v, &bits, 4); /* any float, NaN and infinities included */
            x[i] = iter % 2 ? v : rng_sym(&r) * ldexpf(1.0f, (int)(rng_next(&r) % 60) - 30);
        }
        nu_quantize_act_k_scalar(x, n, want);
        for (int l = 1; l <= (int)nu_kernels_cpu_level(); l++) {
            assert_true(nu_kernels_force_level((nu_simd)l));
            memset(got, 0xEE, bytes);
            nu_kernels_current()->quantize_act_k(x, n, got);
            if (memcmp(got, want, bytes) != 0)
                fail_msg("%s: iteration %d differs from the scalar quantiser", level_name(l), iter);
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
    free(x);
    free(want);
    free(got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decoders_agree),
        cmocka_unit_test(test_hand_made_blocks),
        cmocka_unit_test(test_levels_against_references),
        cmocka_unit_test(test_llama_quantize_files),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_quantize_act_k_identical),
        cmocka_unit_test(test_quantize_act_k_random),
    };
    printf("kernel levels tested: scalar..%s\n", level_name(nu_kernels_cpu_level()));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
