/* test_kernels.c - the numeric kernels: half/bfloat16 conversion, the block
 * formats (hand-made blocks with values worked out from the format
 * definitions), quantisation round trips, every SIMD level's matmul against
 * the reference, reproducibility across batch sizes and thread counts, the
 * vector helpers, the thread pool and level selection.
 *
 * Tolerances (per output value y of a row w and an activation row x):
 *   T = sum_i |w_i x_i|, or for block types sum_i (|w_i| + 16|d_b| + |m_b|)|x_i|,
 *       which also covers the size of the offset/minimum terms the kernels add;
 *   E = sum over 32-blocks b of max_b |x| * (1/254 + 1/2048) * (sum_{i in b} |w_i - m_b|
 *       + 32 |m_b|), the most rounding activations to int8 with scale max|x|/127
 *       (stored as f16: relative error 2^-11 on each q * d and on the minimum's
 *       block sum) can change y (0 for F32/F16/BF16, whose activations stay
 *       float, rounded to f16/bf16 for F16/BF16 as llama.cpp's CPU backend
 *       does; m_b is the block minimum of the _1 types, else 0);
 *   level vs nu_matmul_ref:      |y - y_ref|    <= E * (1 + 1e-5) + 1e-5 * T + 1e-30
 *   level vs the scalar level:   |y - y_scalar| <= 1e-5 * T + 1e-30
 *     (same int8 activations; only the float summation order differs).
 *   F16/BF16, vs sum_i w_i * round(x_i) in double, x_i rounded here by
 *   arithmetic to 11 (f16) / 8 (bf16) significant bits: nu_matmul_ref within
 *   1e-6 * T, every level within 1e-5 * T (unrounded activations are off by
 *   up to 2^-12 (2^-9) of each |w_i x_i|).
 */
#include "test_support.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "kernels_internal.h"
#include "nucleus.h"
#include "test_rng.h"

/* ---- Helpers --------------------------------------------------------------- */

/* Roughly normal (sum of uniforms), with an occasional outlier. */
static float rng_act(rng *r) {
    float v = rng_sym(r) + rng_sym(r) + rng_sym(r);
    if ((rng_next(r) & 255) == 0) v *= 20.0f;
    return v;
}

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t float_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static const uint32_t all_types[] = {NU_TYPE_F32,  NU_TYPE_F16,  NU_TYPE_BF16, NU_TYPE_Q4_0,
                                     NU_TYPE_Q4_1, NU_TYPE_Q5_0, NU_TYPE_Q5_1, NU_TYPE_Q8_0};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

/* A weight matrix made by quantising random values, owning its data. */
typedef struct test_matrix {
    nu_matrix m;
    uint8_t *data;
    float *deq; /* dequantised rows */
} test_matrix;

static test_matrix make_matrix(uint32_t type, int64_t n_in, int64_t n_out, rng *r) {
    test_matrix t;
    size_t row_bytes = nu_type_row_bytes(type, (uint64_t)n_in);
    t.data = malloc(row_bytes * (size_t)n_out + 1);
    t.deq = malloc(sizeof(float) * (size_t)(n_in * n_out));
    float *row = malloc(sizeof(float) * (size_t)n_in);
    assert_non_null(t.data);
    for (int64_t o = 0; o < n_out; o++) {
        float scale = 0.05f + 0.1f * (float)(o % 5);
        for (int64_t i = 0; i < n_in; i++) row[i] = scale * rng_sym(r) + 0.01f * (float)(o % 3);
        if (o == 2) memset(row, 0, sizeof(float) * (size_t)n_in); /* an all-zero row */
        nu_quantize_row(type, row, t.data + row_bytes * (size_t)o, n_in);
        nu_dequantize_row(type, t.data + row_bytes * (size_t)o, t.deq + o * n_in, n_in);
    }
    free(row);
    t.m = (nu_matrix){type, n_in, n_out, t.data, row_bytes, NULL};
    return t;
}

static void free_matrix(test_matrix *t) {
    free(t->data);
    free(t->deq);
}

static float *make_activations(int64_t n_in, int32_t n_batch, rng *r) {
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_batch));
    for (int64_t i = 0; i < n_in * n_batch; i++) x[i] = rng_act(r);
    if (n_batch > 3) memset(x + 3 * n_in, 0, sizeof(float) * (size_t)n_in); /* a zero row */
    return x;
}

/* d (and m) of the block holding element i of a dequantised row, read from
 * the raw block: d is the first f16, m the second for the _1 types (signed). */
static void block_scales(const test_matrix *t, int64_t row, int64_t i, float *d, float *m) {
    *d = *m = 0.0f;
    if (!nu_type_is_quantized(t->m.type)) return;
    const uint8_t *blk = t->data + t->m.row_bytes * (size_t)row +
                         (size_t)(i / 32) * nu_type_get(t->m.type)->block_bytes;
    uint16_t h;
    memcpy(&h, blk, 2);
    *d = nu_f16_to_f32(h);
    if (t->m.type == NU_TYPE_Q4_1 || t->m.type == NU_TYPE_Q5_1) {
        memcpy(&h, blk + 2, 2);
        *m = nu_f16_to_f32(h);
    }
}

/* The T and E bounds of the file comment for one (row, activation row). */
static void error_bounds(const test_matrix *t, int64_t row, const float *x, double *T, double *E) {
    const int64_t n = t->m.n_in;
    const float *w = t->deq + row * n;
    *T = *E = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float d, m;
        block_scales(t, row, i, &d, &m);
        *T += ((double)fabsf(w[i]) + 16.0 * fabsf(d) + fabsf(m)) * fabs((double)x[i]);
    }
    if (!nu_type_is_quantized(t->m.type)) return;
    for (int64_t b = 0; b < n; b += 32) {
        double amax = 0.0, wsum = 0.0;
        float d, m;
        block_scales(t, row, b, &d, &m);
        for (int j = 0; j < 32; j++) {
            amax = fmax(amax, fabs((double)x[b + j]));
            wsum += fabs((double)w[b + j] - (double)m) + fabs((double)m);
        }
        *E += amax * (1.0 / 254.0 + 1.0 / 2048.0) * wsum;
    }
}

/* Runs nu_matmul at the current level with a pool of n_threads (0: no pool). */
static void run_matmul(const nu_matrix *W, const float *x, int32_t n_batch, float *y,
                       int n_threads) {
    size_t bytes = nu_matmul_scratch_bytes(W->type, W->n_in, n_batch);
    void *scratch = bytes ? malloc(bytes) : NULL;
    nu_threadpool *pool = n_threads > 0 ? nu_threadpool_new(n_threads) : NULL;
    nu_matmul(pool, W, x, n_batch, y, scratch);
    nu_threadpool_free(pool);
    free(scratch);
}

/* ---- Half and bfloat16 ------------------------------------------------------- */

static void test_f16_to_f32_known(void **state) {
    (void)state;
    assert_true(nu_f16_to_f32(0x0000) == 0.0f && !signbit(nu_f16_to_f32(0x0000)));
    assert_true(nu_f16_to_f32(0x8000) == 0.0f && signbit(nu_f16_to_f32(0x8000)));
    assert_true(nu_f16_to_f32(0x3C00) == 1.0f);
    assert_true(nu_f16_to_f32(0xC000) == -2.0f);
    assert_true(nu_f16_to_f32(0x3800) == 0.5f);
    assert_true(nu_f16_to_f32(0x3555) == 0.333251953125f);
    assert_true(nu_f16_to_f32(0x7BFF) == 65504.0f);
    assert_true(nu_f16_to_f32(0x0400) == 0x1p-14f); /* smallest normal */
    assert_true(nu_f16_to_f32(0x0001) == 0x1p-24f); /* smallest subnormal */
    assert_true(nu_f16_to_f32(0x03FF) == 1023.0f * 0x1p-24f);
    assert_true(nu_f16_to_f32(0x8200) == -0x1p-15f);
    assert_true(isinf(nu_f16_to_f32(0x7C00)) && nu_f16_to_f32(0x7C00) > 0);
    assert_true(isinf(nu_f16_to_f32(0xFC00)) && nu_f16_to_f32(0xFC00) < 0);
    assert_true(isnan(nu_f16_to_f32(0x7E00)));
    assert_true(isnan(nu_f16_to_f32(0x7C01)));
}

static void test_f32_to_f16_known(void **state) {
    (void)state;
    assert_int_equal(nu_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(nu_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(nu_f32_to_f16(1.0f), 0x3C00);
    assert_int_equal(nu_f32_to_f16(0.1f), 0x2E66);
    assert_int_equal(nu_f32_to_f16(-2.0f), 0xC000);
    assert_int_equal(nu_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(nu_f32_to_f16(65519.996f), 0x7BFF); /* below the midpoint */
    assert_int_equal(nu_f32_to_f16(65520.0f), 0x7C00);   /* midpoint ties to even: inf */
    assert_int_equal(nu_f32_to_f16(1e9f), 0x7C00);
    assert_int_equal(nu_f32_to_f16(-1e9f), 0xFC00);
    assert_int_equal(nu_f32_to_f16(INFINITY), 0x7C00);
    /* Ties to even at 1.0: the ulp is 2^-10. */
    assert_int_equal(nu_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
    assert_int_equal(nu_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    assert_int_equal(nu_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    /* Subnormals: units of 2^-24. */
    assert_int_equal(nu_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(nu_f32_to_f16(0x1p-25f), 0x0000);        /* half a unit: ties to 0 */
    assert_int_equal(nu_f32_to_f16(1.5f * 0x1p-25f), 0x0001); /* 0.75 unit */
    assert_int_equal(nu_f32_to_f16(3 * 0x1p-25f), 0x0002);    /* 1.5 units: ties to 2 */
    assert_int_equal(nu_f32_to_f16(5 * 0x1p-25f), 0x0002);    /* 2.5 units: ties to 2 */
    assert_int_equal(nu_f32_to_f16(-0x1p-26f), 0x8000);
    assert_int_equal(nu_f32_to_f16(1023.0f * 0x1p-24f), 0x03FF);
    assert_int_equal(nu_f32_to_f16(1023.5f * 0x1p-24f), 0x0400); /* ties up into the normals */
    assert_int_equal(nu_f32_to_f16(bits_to_float(0x387FFFFF)), 0x0400);
    assert_int_equal(nu_f32_to_f16(0x1p-14f), 0x0400);
    assert_int_equal(nu_f32_to_f16(1e-10f), 0x0000);
    /* NaN stays NaN, sign kept. */
    uint16_t h = nu_f32_to_f16(NAN);
    assert_true((h & 0x7C00) == 0x7C00 && (h & 0x3FF));
    h = nu_f32_to_f16(bits_to_float(0xFF800001)); /* payload only in dropped bits */
    assert_true((h & 0xFC00) == 0xFC00 && (h & 0x3FF));
}

/* Every half survives half -> float -> half; NaNs stay NaN. */
static void test_f16_round_trip_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nu_f16_to_f32((uint16_t)h);
        uint16_t back = nu_f32_to_f16(f);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) {
            assert_true(isnan(f));
            assert_true((back & 0x7C00) == 0x7C00 && (back & 0x3FF));
        } else {
            assert_int_equal(back, h);
        }
    }
}

/* For random finite floats in the half range, the result is the nearest half
 * (no neighbour is closer) and, on an exact tie, the even one. */
static void test_f32_to_f16_nearest(void **state) {
    (void)state;
    rng r = {42};
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)rng_next(&r);
        float f = bits_to_float(bits);
        if (!isfinite(f) || fabsf(f) >= 65504.0f) continue;
        uint16_t h = nu_f32_to_f16(f);
        double got = nu_f16_to_f32(h), err = fabs(got - f);
        uint16_t mag = h & 0x7FFF;
        if (mag < 0x7BFF) {
            double up = nu_f16_to_f32((uint16_t)(h + 1));
            assert_true(err <= fabs(up - f));
            if (err == fabs(up - f)) assert_true((h & 1) == 0);
        }
        if (mag > 0) {
            double down = nu_f16_to_f32((uint16_t)(h - 1));
            assert_true(err <= fabs(down - f));
            if (err == fabs(down - f)) assert_true((h & 1) == 0);
        }
    }
}

static void test_bf16(void **state) {
    (void)state;
    assert_true(nu_bf16_to_f32(0x3F80) == 1.0f);
    assert_true(nu_bf16_to_f32(0x4049) == 3.140625f);
    assert_true(nu_bf16_to_f32(0xC000) == -2.0f);
    assert_true(nu_bf16_to_f32(0x0001) == 0x1p-133f); /* subnormal */
    assert_true(isinf(nu_bf16_to_f32(0xFF80)));
    assert_int_equal(nu_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(nu_f32_to_bf16(bits_to_float(0x3F808000)), 0x3F80); /* tie: even */
    assert_int_equal(nu_f32_to_bf16(bits_to_float(0x3F818000)), 0x3F82); /* tie: even */
    assert_int_equal(nu_f32_to_bf16(bits_to_float(0x3F808001)), 0x3F81);
    assert_int_equal(nu_f32_to_bf16(bits_to_float(0x3F807FFF)), 0x3F80);
    assert_int_equal(nu_f32_to_bf16(bits_to_float(0x7F7FFFFF)), 0x7F80); /* overflows to inf */
    assert_int_equal(nu_f32_to_bf16(-INFINITY), 0xFF80);
    assert_int_equal(nu_f32_to_bf16(bits_to_float(0x00000001)), 0x0000);
    assert_int_equal(nu_f32_to_bf16(bits_to_float(0x80018000)), 0x8002);
    uint16_t h = nu_f32_to_bf16(bits_to_float(0x7F800001)); /* NaN, payload in low bits */
    assert_true((h & 0x7F80) == 0x7F80 && (h & 0x7F));
    for (uint32_t b = 0; b < 65536; b++) {
        float f = nu_bf16_to_f32((uint16_t)b);
        assert_true(float_to_bits(f) == b << 16);
        if (!isnan(f)) assert_int_equal(nu_f32_to_bf16(f), b);
    }
}

/* ---- Hand-made blocks -------------------------------------------------------- */

/* qs[j] = j | (15 - j) << 4: element j has nibble j, element 16 + j has 15 - j. */
static void ramp_nibbles(uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(j | (15 - j) << 4);
}

static void assert_floats(const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i]) fail_msg("element %d: got %.9g, want %.9g", i, got[i], want[i]);
    }
}

static void test_dequantize_q4_0(void **state) {
    (void)state;
    uint8_t blk[18] = {0x00, 0x38}; /* d = 0.5 */
    ramp_nibbles(blk + 2);
    static const float want[32] = {-4,  -3.5, -3,   -2.5, -2,   -1.5, -1,   -0.5, 0,    0.5, 1,
                                   1.5, 2,    2.5,  3,    3.5,  3.5,  3,    2.5,  2,    1.5, 1,
                                   0.5, 0,    -0.5, -1,   -1.5, -2,   -2.5, -3,   -3.5, -4};
    float got[32];
    nu_dequantize_row(NU_TYPE_Q4_0, blk, got, 32);
    assert_floats(got, want, 32);
}

static void test_dequantize_q4_1(void **state) {
    (void)state;
    uint8_t blk[20] = {0x00, 0x3C, 0x00, 0xBC}; /* d = 1, m = -1 */
    ramp_nibbles(blk + 4);
    static const float want[32] = {-1, 0,  1,  2,  3,  4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                   14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3,  2,  1,  0,  -1};
    float got[32];
    nu_dequantize_row(NU_TYPE_Q4_1, blk, got, 32);
    assert_floats(got, want, 32);
}

static void test_dequantize_q5_0(void **state) {
    (void)state;
    /* d = 2; high-bit word 0xAAAAAAAA: odd elements get +16 before the -16. */
    uint8_t blk[22] = {0x00, 0x40, 0xAA, 0xAA, 0xAA, 0xAA};
    ramp_nibbles(blk + 6);
    static const float want[32] = {-32, 2,  -28, 6,  -24, 10, -20, 14, -16, 18,  -12,
                                   22,  -8, 26,  -4, 30,  -2, 28,  -6, 24,  -10, 20,
                                   -14, 16, -18, 12, -22, 8,  -26, 4,  -30, 0};
    float got[32];
    nu_dequantize_row(NU_TYPE_Q5_0, blk, got, 32);
    assert_floats(got, want, 32);
}

static void test_dequantize_q5_1(void **state) {
    (void)state;
    /* d = 0.5, m = 2; high-bit word 0x80000001 (bytes 01 00 00 80): elements
     * 0 and 31 get bit 4. */
    uint8_t blk[24] = {0x00, 0x38, 0x00, 0x40, 0x01, 0x00, 0x00, 0x80};
    ramp_nibbles(blk + 8);
    static const float want[32] = {10,  2.5, 3,   3.5, 4,   4.5, 5,   5.5, 6,   6.5, 7,
                                   7.5, 8,   8.5, 9,   9.5, 9.5, 9,   8.5, 8,   7.5, 7,
                                   6.5, 6,   5.5, 5,   4.5, 4,   3.5, 3,   2.5, 10};
    float got[32];
    nu_dequantize_row(NU_TYPE_Q5_1, blk, got, 32);
    assert_floats(got, want, 32);
}

static void test_dequantize_q8_0(void **state) {
    (void)state;
    uint8_t blk[34] = {0x00, 0x34}; /* d = 0.25 */
    for (int j = 0; j < 32; j++) blk[2 + j] = (uint8_t)(int8_t)(-128 + 8 * j);
    static const float want[32] = {-32, -30, -28, -26, -24, -22, -20, -18, -16, -14, -12,
                                   -10, -8,  -6,  -4,  -2,  0,   2,   4,   6,   8,   10,
                                   12,  14,  16,  18,  20,  22,  24,  26,  28,  30};
    float got[32];
    nu_dequantize_row(NU_TYPE_Q8_0, blk, got, 32);
    assert_floats(got, want, 32);
}

static void test_dequantize_float_types(void **state) {
    (void)state;
    const uint8_t f16[8] = {0x00, 0x3C, 0x00, 0xC2, 0x01, 0x00, 0xFF, 0x7B};
    const float want16[4] = {1.0f, -3.0f, 0x1p-24f, 65504.0f};
    const uint8_t bf16[6] = {0x80, 0x3F, 0x49, 0x40, 0x00, 0xC1};
    const float wantbf[3] = {1.0f, 3.140625f, -8.0f};
    const float f32[3] = {1.5f, -0.0f, 1e30f};
    float got[4];
    nu_dequantize_row(NU_TYPE_F16, f16, got, 4);
    assert_floats(got, want16, 4);
    nu_dequantize_row(NU_TYPE_BF16, bf16, got, 3);
    assert_floats(got, wantbf, 3);
    nu_dequantize_row(NU_TYPE_F32, f32, got, 3);
    assert_memory_equal(got, f32, sizeof f32);
    /* A type the kernels cannot compute gives zeros. */
    uint8_t junk[292];
    memset(junk, 0x55, sizeof junk);
    float out[256];
    out[0] = out[255] = 1.0f;
    nu_dequantize_row(NU_TYPE_Q8_K, junk, out, 256);
    assert_true(out[0] == 0.0f && out[255] == 0.0f);
}

/* ---- Quantisation ---------------------------------------------------------------- */

/* Inputs that each format represents exactly, and the bytes its encoder
 * must produce for them. */
static void test_quantize_exact(void **state) {
    (void)state;
    float x[32];
    uint8_t blk[128], want[34];
    float back[32];

    /* Q4_0: x = (j % 16) - 8; the extreme is -8, so d = -8 / -8 = 1 and q = x + 8. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 16 - 8);
    nu_quantize_row(NU_TYPE_Q4_0, x, blk, 32);
    want[0] = 0x00, want[1] = 0x3C;
    for (int j = 0; j < 16; j++) want[2 + j] = (uint8_t)(j | j << 4);
    assert_memory_equal(blk, want, 18);
    nu_dequantize_row(NU_TYPE_Q4_0, blk, back, 32);
    assert_floats(back, x, 32);

    /* Q4_1: x = j % 16: min 0, d = 15 / 15 = 1, q = x. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 16);
    nu_quantize_row(NU_TYPE_Q4_1, x, blk, 32);
    want[0] = 0x00, want[1] = 0x3C, want[2] = 0x00, want[3] = 0x00;
    for (int j = 0; j < 16; j++) want[4 + j] = (uint8_t)(j | j << 4);
    assert_memory_equal(blk, want, 20);

    /* Q5_0: x = j - 16: the extreme is -16, d = 1, q = j; bit 4 set for j >= 16. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    nu_quantize_row(NU_TYPE_Q5_0, x, blk, 32);
    const uint8_t want50[6] = {0x00, 0x3C, 0x00, 0x00, 0xFF, 0xFF};
    assert_memory_equal(blk, want50, 6);
    for (int j = 0; j < 16; j++) assert_int_equal(blk[6 + j], (j & 15) | ((j + 16) & 15) << 4);
    nu_dequantize_row(NU_TYPE_Q5_0, blk, back, 32);
    assert_floats(back, x, 32);

    /* Q5_1: x = j / 2 + 1: min 1, d = 15.5 / 31 = 0.5, q = j. */
    for (int j = 0; j < 32; j++) x[j] = (float)j * 0.5f + 1.0f;
    nu_quantize_row(NU_TYPE_Q5_1, x, blk, 32);
    const uint8_t want51[8] = {0x00, 0x38, 0x00, 0x3C, 0x00, 0x00, 0xFF, 0xFF};
    assert_memory_equal(blk, want51, 8);
    nu_dequantize_row(NU_TYPE_Q5_1, blk, back, 32);
    assert_floats(back, x, 32);

    /* Q8_0: x = 127 - 8j: max|x| = 127, d = 1, q = x. */
    for (int j = 0; j < 32; j++) x[j] = (float)(127 - 8 * j);
    nu_quantize_row(NU_TYPE_Q8_0, x, blk, 32);
    assert_int_equal(blk[0], 0x00);
    assert_int_equal(blk[1], 0x3C);
    for (int j = 0; j < 32; j++) assert_int_equal((int8_t)blk[2 + j], 127 - 8 * j);

    /* All zeros stay zeros (d = 0, no division by zero). */
    memset(x, 0, sizeof x);
    for (size_t t = 0; t < N_TYPES; t++) {
        uint32_t type = all_types[t];
        nu_quantize_row(type, x, blk, 32);
        nu_dequantize_row(type, blk, back, 32);
        assert_floats(back, x, 32);
    }
}

/* The largest error quantise -> dequantise may make on one block, from the
 * rounding step d and the f16 rounding of d (relative 2^-11) and m. */
static double round_trip_bound(uint32_t type, const float *x) {
    double amax = 0, mn = x[0], mx = x[0];
    for (int j = 0; j < 32; j++) {
        amax = fmax(amax, fabs(x[j]));
        mn = fmin(mn, x[j]);
        mx = fmax(mx, x[j]);
    }
    /* f16 rounding of a scale: relative 2^-11, or up to 2^-25 when subnormal. */
    const double f16 = 0x1p-11, sub = 0x1p-25, slack = 1e-6 * amax + 1e-30;
    switch (type) {
    case NU_TYPE_Q4_0: return amax / 8 * (1 + 8 * f16) + 8 * sub + slack; /* clamp: a full step */
    case NU_TYPE_Q5_0: return amax / 16 * (1 + 16 * f16) + 16 * sub + slack;
    case NU_TYPE_Q8_0: return amax / 127 * (0.5 + 127 * f16) + 127 * sub + slack;
    case NU_TYPE_Q4_1:
        return (mx - mn) / 15 * (0.5 + 15 * f16) + 15 * sub + fabs(mn) * f16 + sub + slack;
    case NU_TYPE_Q5_1:
        return (mx - mn) / 31 * (0.5 + 31 * f16) + 31 * sub + fabs(mn) * f16 + sub + slack;
    case NU_TYPE_F16: return amax * f16 + 0x1p-25;
    case NU_TYPE_BF16: return amax * 0x1p-8;
    default: return 0;
    }
}

static void test_quantize_round_trip(void **state) {
    (void)state;
    rng r = {7};
    float x[32], back[32];
    uint8_t blk[128];
    for (int trial = 0; trial < 2000; trial++) {
        float scale = powf(10.0f, (float)(trial % 7) - 3.0f);
        for (int j = 0; j < 32; j++) x[j] = scale * rng_sym(&r);
        if (trial % 5 == 1) x[trial % 32] *= 30.0f; /* one outlier */
        if (trial % 5 == 2)
            for (int j = 0; j < 32; j++) x[j] = fabsf(x[j]) + 3.0f * scale; /* one-sided */
        for (size_t t = 0; t < N_TYPES; t++) {
            uint32_t type = all_types[t];
            nu_quantize_row(type, x, blk, 32);
            nu_dequantize_row(type, blk, back, 32);
            double bound = round_trip_bound(type, x);
            for (int j = 0; j < 32; j++) {
                double err = fabs((double)back[j] - x[j]);
                if (err > bound)
                    fail_msg("%s trial %d element %d: %g -> %g (bound %g)", nu_type_get(type)->name,
                             trial, j, x[j], back[j], bound);
            }
        }
    }
}

/* A multi-block row quantises block by block. */
static void test_quantize_row_blocks(void **state) {
    (void)state;
    rng r = {11};
    float x[128];
    uint8_t whole[4 * 34], parts[4 * 34];
    for (int j = 0; j < 128; j++) x[j] = rng_sym(&r);
    for (size_t t = 3; t < N_TYPES; t++) {
        uint32_t type = all_types[t];
        uint32_t bytes = nu_type_get(type)->block_bytes;
        nu_quantize_row(type, x, whole, 128);
        for (int b = 0; b < 4; b++) nu_quantize_row(type, x + 32 * b, parts + b * bytes, 32);
        assert_memory_equal(whole, parts, 4 * bytes);
    }
}

/* ---- Levels ---------------------------------------------------------------------- */

static const nu_kernel_set *set_of(nu_simd level) {
    return level == NU_SIMD_AVX512 ? &nu_kernels_avx512_set
           : level == NU_SIMD_AVX2 ? &nu_kernels_avx2_set
                                   : &nu_kernels_scalar_set;
}

static const char *level_name(nu_simd level) {
    return set_of(level)->name;
}

static void test_level_selection(void **state) {
    (void)state;
    nu_simd cpu = nu_kernels_cpu_level();
    assert_int_equal(nu_kernels_pick_level(NULL, cpu), cpu);
    assert_int_equal(nu_kernels_pick_level("", cpu), cpu);
    assert_int_equal(nu_kernels_pick_level("bogus", cpu), cpu);
    assert_int_equal(nu_kernels_pick_level("scalar", NU_SIMD_AVX512), NU_SIMD_SCALAR);
    assert_int_equal(nu_kernels_pick_level("avx2", NU_SIMD_AVX512), NU_SIMD_AVX2);
    assert_int_equal(nu_kernels_pick_level("avx512", NU_SIMD_AVX512), NU_SIMD_AVX512);
    assert_int_equal(nu_kernels_pick_level("avx512", NU_SIMD_AVX2), NU_SIMD_AVX2);
    assert_int_equal(nu_kernels_pick_level("avx2", NU_SIMD_SCALAR), NU_SIMD_SCALAR);
    nu_kernels_init();
    const char *name = nu_simd_level();
    assert_true(strcmp(name, "scalar") == 0 || strcmp(name, "avx2") == 0 ||
                strcmp(name, "avx512") == 0);
    assert_string_equal(name, nu_kernels_level());
    if (cpu < NU_SIMD_AVX512) assert_false(nu_kernels_force_level(NU_SIMD_AVX512));
    for (int l = 0; l <= (int)cpu; l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        assert_string_equal(nu_simd_level(), level_name((nu_simd)l));
    }
    print_message("CPU level: %s\n", level_name(cpu));
}

/* Every level quantises activations to the same bytes as the scalar code,
 * including NaN, infinities, tiny blocks and exact rounding ties; and the
 * bytes are llama.cpp's activation blocks (a worked example). */
static void test_activation_quant_identical(void **state) {
    (void)state;
    rng r = {5};
    const int64_t n = 32 * 40;
    float *x = malloc(sizeof(float) * n);
    size_t bytes = nu_act_row_bytes(n);
    uint8_t *want = aligned_alloc(64, bytes), *got = aligned_alloc(64, bytes);
    for (int64_t i = 0; i < n; i++) x[i] = rng_act(&r) * powf(10.0f, (float)(i / 32 % 9) - 4.0f);
    x[40] = NAN;
    x[70] = INFINITY;
    for (int j = 0; j < 32; j++) x[96 + j] = 1e-35f * (float)j;            /* tiny: zeros */
    for (int j = 0; j < 32; j++) x[128 + j] = (float)(j % 2 ? 127 : 63.5); /* 63.5 * 1 ties */
    for (int j = 0; j < 32; j++) x[160 + j] = 2.5f * (float)(j - 16);      /* more ties */
    for (int j = 0; j < 32; j++) x[192 + j] = 0.25f * (float)(j - 15);     /* worked example */
    nu_quantize_act_scalar(x, n, want);
    for (int l = 1; l <= (int)nu_kernels_cpu_level(); l++) {
        memset(got, 0xEE, bytes);
        set_of((nu_simd)l)->quantize_act(x, n, got);
        assert_memory_equal(got, want, bytes);
    }
    /* The tie case: 63.5 * (127 / 127) rounds to the even 64. */
    assert_int_equal(nu_act_q(want)[128], 64);
    assert_int_equal(nu_act_q(want)[129], 127);
    /* llama.cpp's Q8_0 / Q8_1 blocks for x = (j - 15) / 4, j < 32 (block 6):
     * q = RNE(x * 127 / 4) = RNE(7.9375 (j - 15)), ties -63.5 and 63.5 to
     * even, sum 127; d = f16(4 / 127) = 0.031494140625; s = d * 127;
     * Q8_1's sum f16(4 / 127 * 127) = 4 (llama.cpp's d * sum, then f16). */
    static const int8_t q6[32] = {-119, -111, -103, -95, -87, -79, -71, -64, -56, -48, -40,
                                  -32,  -24,  -16,  -8,  0,   8,   16,  24,  32,  40,  48,
                                  56,   64,   71,   79,  87,  95,  103, 111, 119, 127};
    assert_memory_equal(nu_act_q(want) + 192, q6, 32);
    const int64_t n_pad = nu_act_n_pad(n);
    assert_true(nu_act_d(want, n_pad)[6] == 0.031494140625f);
    assert_true(nu_act_s(want, n_pad)[6] == 3.999755859375f);
    assert_true(nu_act_m(want, n_pad)[6] == 4.0f);
    /* every scale is a half-precision value */
    for (int64_t b = 0; b < n / 32; b++) {
        float d = nu_act_d(want, n_pad)[b], m = nu_act_m(want, n_pad)[b];
        assert_true(nu_f16_to_f32(nu_f32_to_f16(d)) == d);
        assert_true(nu_f16_to_f32(nu_f32_to_f16(m)) == m);
    }
    free(x);
    free(want);
    free(got);
}

/* x rounded to nearest, ties to even, to `bits` significant bits with
 * exponents no lower than emin (the format's smallest normal exponent in
 * frexp's convention; below it the spacing stays that of the subnormals):
 * f16 is (11, -13), bf16 (8, -125). Written with frexp/ldexp/rint, apart
 * from the library's bit manipulation; finite x below the overflow only. */
static double round_sig(float x, int bits, int emin) {
    int e;
    frexp((double)x, &e);
    if (e < emin) e = emin;
    return ldexp(rint(ldexp((double)x, bits - e)), e - bits);
}

/* What y[b][row] must be for F16/BF16 weights: the dot of the row with the
 * activations rounded to the format, in double. */
static double rounded_dot(const test_matrix *t, int64_t row, const float *x) {
    const int f16 = t->m.type == NU_TYPE_F16;
    double sum = 0.0;
    for (int64_t i = 0; i < t->m.n_in; i++)
        sum +=
            (double)t->deq[row * t->m.n_in + i] * round_sig(x[i], f16 ? 11 : 8, f16 ? -13 : -125);
    return sum;
}

/* A matrix shape for the matmul tests. */
typedef struct shape {
    int64_t n_in, n_out;
} shape;

static const shape block_shapes[] = {{32, 5}, {64, 3}, {96, 17}, {544, 7}, {2048, 9}, {5632, 3}};
static const shape float_shapes[] = {{1, 3},    {7, 5},    {33, 4},  {100, 3},
                                     {2048, 5}, {5632, 2}, {64, 11}, {1000, 1}};

/* Checks one level's nu_matmul against the reference and the scalar level. */
static void check_matmul_shape(uint32_t type, shape s, nu_simd level, rng *r) {
    test_matrix t = make_matrix(type, s.n_in, s.n_out, r);
    const int32_t max_batch = 17;
    float *x = make_activations(s.n_in, max_batch, r);
    float *ref = malloc(sizeof(float) * (size_t)(s.n_out * max_batch));
    float *base = malloc(sizeof(float) * (size_t)(s.n_out * max_batch));
    float *y = malloc(sizeof(float) * (size_t)(s.n_out * max_batch));
    nu_matmul_ref(&t.m, x, max_batch, ref);
    const int half = type == NU_TYPE_F16 || type == NU_TYPE_BF16;
    for (int32_t b = 0; half && b < max_batch; b++)
        for (int64_t o = 0; o < s.n_out; o++) {
            double T, E, want = rounded_dot(&t, o, x + b * s.n_in);
            error_bounds(&t, o, x + b * s.n_in, &T, &E);
            if (!(fabs(ref[b * s.n_out + o] - want) <= 1e-6 * T + 1e-30))
                fail_msg("nu_matmul_ref %s n_in %lld row %lld: %.9g, rounded activations %.9g",
                         nu_type_get(type)->name, (long long)s.n_in, (long long)o,
                         ref[b * s.n_out + o], want);
        }
    assert_true(nu_kernels_force_level(NU_SIMD_SCALAR));
    run_matmul(&t.m, x, max_batch, base, 0);
    assert_true(nu_kernels_force_level(level));
    for (int32_t nb = 1; nb <= max_batch; nb += (s.n_in > 1000 ? 4 : 1)) {
        memset(y, 0xFF, sizeof(float) * (size_t)(s.n_out * nb));
        run_matmul(&t.m, x, nb, y, nb % 3);
        for (int32_t b = 0; b < nb; b++) {
            for (int64_t o = 0; o < s.n_out; o++) {
                double T, E;
                error_bounds(&t, o, x + b * s.n_in, &T, &E);
                double got = y[b * s.n_out + o], want = ref[b * s.n_out + o];
                double tol_ref = E * (1 + 1e-5) + 1e-5 * T + 1e-30, tol_scalar = 1e-5 * T + 1e-30;
                if (!(fabs(got - want) <= tol_ref) ||
                    !(fabs(got - base[b * s.n_out + o]) <= tol_scalar) ||
                    (half && !(fabs(got - rounded_dot(&t, o, x + b * s.n_in)) <= tol_scalar)))
                    fail_msg("%s %s n_in %lld row %lld batch %d/%d: got %.9g ref %.9g scalar "
                             "%.9g (tol %g, %g)",
                             level_name(level), nu_type_get(type)->name, (long long)s.n_in,
                             (long long)o, b, nb, got, want, base[b * s.n_out + o], tol_ref,
                             tol_scalar);
            }
        }
    }
    free(x);
    free(ref);
    free(base);
    free(y);
    free_matrix(&t);
}

static void test_matmul_levels(void **state) {
    (void)state;
    rng r = {1234};
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        for (size_t t = 0; t < N_TYPES; t++) {
            uint32_t type = all_types[t];
            int quant = nu_type_is_quantized(type);
            const shape *shapes = quant ? block_shapes : float_shapes;
            size_t n = quant ? sizeof block_shapes / sizeof *block_shapes
                             : sizeof float_shapes / sizeof *float_shapes;
            for (size_t i = 0; i < n; i++) check_matmul_shape(type, shapes[i], (nu_simd)l, &r);
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* The value of one (row, activation row) pair is bit-identical whether the
 * activation row is alone or one of 13, and with 1, 2 or 3 threads. */
static void check_reproducible(uint32_t type, int64_t n_in, nu_simd level, rng *r) {
    const int64_t n_out = 37;
    const int32_t nb = 13;
    test_matrix t = make_matrix(type, n_in, n_out, r);
    float *x = make_activations(n_in, nb, r);
    float *batched = malloc(sizeof(float) * (size_t)(n_out * nb));
    float *y = malloc(sizeof(float) * (size_t)(n_out * nb));
    assert_true(nu_kernels_force_level(level));
    run_matmul(&t.m, x, nb, batched, 2);
    for (int32_t b = 0; b < nb; b++) {
        run_matmul(&t.m, x + b * n_in, 1, y, 0);
        assert_memory_equal(y, batched + b * n_out, sizeof(float) * (size_t)n_out);
    }
    for (int threads = 1; threads <= 3; threads++) {
        run_matmul(&t.m, x, nb, y, threads);
        assert_memory_equal(y, batched, sizeof(float) * (size_t)(n_out * nb));
    }
    free(x);
    free(batched);
    free(y);
    free_matrix(&t);
}

static void test_matmul_reproducible(void **state) {
    (void)state;
    rng r = {99};
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        for (size_t t = 0; t < N_TYPES; t++) {
            check_reproducible(all_types[t], 2048, (nu_simd)l, &r);
            check_reproducible(all_types[t], 96, (nu_simd)l, &r);
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* The grouped helpers (several heads sharing one cached row) give each
 * vector exactly what the single-vector helpers give it, and the f16
 * rounding helper equals the scalar round trip, specials included. */
static void test_grouped_vector_helpers(void **state) {
    (void)state;
    rng r = {17};
    const int64_t sizes[] = {1, 7, 16, 33, 64, 100, 256};
    static float rows[NU_VEC_HEADS][256], y[NU_VEC_HEADS][256], one[256], got[NU_VEC_HEADS], x[300],
        want[300];
    static uint16_t h[256];
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            const int64_t n = sizes[s];
            float f32row[256];
            for (int64_t i = 0; i < n; i++) {
                f32row[i] = rng_sym(&r);
                h[i] = nu_f32_to_f16(rng_sym(&r));
                for (int v = 0; v < NU_VEC_HEADS; v++) rows[v][i] = rng_sym(&r);
            }
            const float *q[NU_VEC_HEADS];
            float *out[NU_VEC_HEADS];
            for (int v = 0; v < NU_VEC_HEADS; v++) q[v] = rows[v], out[v] = y[v];
            for (int k = 1; k <= NU_VEC_HEADS; k++) {
                nu_vec_dots(NU_TYPE_F16, h, q, k, n, got);
                for (int v = 0; v < k; v++)
                    assert_int_equal(float_to_bits(got[v]),
                                     float_to_bits(nu_vec_dot_f16(h, rows[v], n)));
                nu_vec_dots(NU_TYPE_F32, f32row, q, k, n, got);
                for (int v = 0; v < k; v++)
                    assert_int_equal(float_to_bits(got[v]),
                                     float_to_bits(nu_vec_dot_f32(f32row, rows[v], n)));
                const float a[NU_VEC_HEADS] = {0.5f,  -1.25f, 3.0f, 1e-3f,
                                               -7.5f, 0.125f, 2.0f, -0.01f};
                for (int type = 0; type < 2; type++) {
                    for (int v = 0; v < k; v++) memcpy(y[v], rows[v], sizeof(float) * (size_t)n);
                    nu_vec_mads(type ? NU_TYPE_F16 : NU_TYPE_F32, out, a, k,
                                type ? (const void *)h : (const void *)f32row, n);
                    for (int v = 0; v < k; v++) {
                        memcpy(one, rows[v], sizeof(float) * (size_t)n);
                        if (type)
                            nu_vec_mad_f16(one, h, a[v], n);
                        else
                            nu_vec_mad_f32(one, f32row, a[v], n);
                        assert_memory_equal(one, y[v], sizeof(float) * (size_t)n);
                    }
                }
            }
        }
        /* nu_vec_mads_rows: rows picked from a table by cell index, weights
         * with a stride, bit-identical to nu_vec_mads row after row; and
         * nu_vec_dots_rows (full groups of 16 rows and a tail) to nu_vec_dots */
        static uint8_t table[9 * 260 * 4];
        static float wts[NU_VEC_HEADS * 9], dout[NU_VEC_HEADS * 41];
        int32_t cells[40];
        for (int j = 0; j < 40; j++) cells[j] = (int32_t)(j * 5 % 9);
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            const int64_t n = sizes[s];
            for (int type = 0; type < 2; type++) {
                const size_t esz = type ? 2 : 4, stride = (size_t)n * esz + 4 * esz;
                for (size_t i = 0; i < 9 * stride / esz; i++) {
                    if (type) {
                        uint16_t hv = nu_f32_to_f16(rng_sym(&r));
                        memcpy(table + 2 * i, &hv, 2);
                    } else {
                        float fv = rng_sym(&r);
                        memcpy(table + 4 * i, &fv, 4);
                    }
                }
                for (int i = 0; i < NU_VEC_HEADS * 9; i++) wts[i] = rng_sym(&r);
                float *out[NU_VEC_HEADS];
                for (int v = 0; v < NU_VEC_HEADS; v++) out[v] = y[v];
                for (int k = 1; k <= NU_VEC_HEADS; k++)
                    for (int64_t nr = 0; nr <= 7; nr += 7) {
                        for (int v = 0; v < k; v++)
                            for (int64_t i = 0; i < n; i++) y[v][i] = rows[v][i] = rng_sym(&r);
                        const uint32_t t = type ? NU_TYPE_F16 : NU_TYPE_F32;
                        nu_vec_mads_rows(t, out, wts, 9, k, table, stride, cells, nr, n);
                        float *ref[NU_VEC_HEADS];
                        for (int v = 0; v < NU_VEC_HEADS; v++) ref[v] = rows[v];
                        for (int64_t j = 0; j < nr; j++) {
                            float a[NU_VEC_HEADS];
                            for (int v = 0; v < k; v++) a[v] = wts[9 * v + j];
                            nu_vec_mads(t, ref, a, k, table + (size_t)cells[j] * stride, n);
                        }
                        for (int v = 0; v < k; v++)
                            assert_memory_equal(rows[v], y[v], sizeof(float) * (size_t)n);
                    }
                for (int k = 1; k <= NU_VEC_HEADS; k++) {
                    /* none, a tail, one group, two (the second one's rows
                     * prefetched ahead), two and a tail */
                    const int64_t counts[] = {0, 5, 16, 32, 40};
                    for (int v = 0; v < k; v++)
                        for (int64_t i = 0; i < n; i++) rows[v][i] = rng_sym(&r);
                    const float *qv[NU_VEC_HEADS];
                    for (int v = 0; v < NU_VEC_HEADS; v++) qv[v] = rows[v];
                    const uint32_t t = type ? NU_TYPE_F16 : NU_TYPE_F32;
                    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                        memset(dout, 0xFF, sizeof dout);
                        nu_vec_dots_rows(t, qv, k, table, stride, cells, counts[c], n, dout, 41);
                        for (int64_t j = 0; j < counts[c]; j++) {
                            float want4[NU_VEC_HEADS];
                            nu_vec_dots(t, table + (size_t)cells[j] * stride, qv, k, n, want4);
                            for (int v = 0; v < k; v++)
                                assert_int_equal(float_to_bits(dout[41 * v + j]),
                                                 float_to_bits(want4[v]));
                        }
                        /* nothing past the rows is written */
                        for (int v = 0; v < k; v++)
                            assert_int_equal(float_to_bits(dout[41 * v + counts[c]]), 0xFFFFFFFFu);
                    }
                }
            }
        }
        const float specials[] = {0.0f,  -0.0f,   65504.0f,    65520.0f, -1e9f,    1e-8f,
                                  6e-8f, 3.0e-5f, 1.0f / 3.0f, INFINITY, -INFINITY};
        for (int64_t i = 0; i < 300; i++)
            x[i] = i < 11 ? specials[i] : rng_sym(&r) * (float)(1 << (i % 20));
        for (int64_t i = 0; i < 300; i++) want[i] = nu_f16_to_f32(nu_f32_to_f16(x[i]));
        nu_vec_round_f16(x, 300);
        for (int64_t i = 0; i < 300; i++)
            assert_int_equal(float_to_bits(x[i]), float_to_bits(want[i]));
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* nu_vec_scale_max at every level: each x[i] becomes x[i] * scale, bit for
 * bit, and the result is the largest of them, NaNs passed over (a row of
 * NaNs and -infinities gives -infinity), for lengths around the vector
 * widths. */
static void test_scale_max(void **state) {
    (void)state;
    rng r = {41};
    static float x[70], want[70];
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        for (int64_t n = 0; n <= 70; n++)
            for (int nan = 0; nan < 3; nan++) {
                float best = -INFINITY;
                for (int64_t i = 0; i < n; i++) {
                    x[i] = nan == 2 ? (i % 2 ? NAN : -INFINITY)
                                    : rng_sym(&r) * 100.0f + (nan && i % 5 == 1 ? NAN : 0.0f);
                    want[i] = x[i] * 0.125f;
                    if (want[i] > best) best = want[i];
                }
                const float got = nu_vec_scale_max(x, n, 0.125f);
                assert_int_equal(float_to_bits(got), float_to_bits(best));
                for (int64_t i = 0; i < n; i++)
                    if (!isnan(want[i]))
                        assert_int_equal(float_to_bits(x[i]), float_to_bits(want[i]));
                    else
                        assert_true(isnan(x[i]));
            }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* Attention over a quantised cache: nu_vec_dots_rows on Q8_0 / Q4_0 rows
 * is the exact dot of each row's dequantised values with the query rounded
 * as a matrix product's activations (within float summation, 1e-5 of the
 * terms' size), identical at every level to the scalar loop, and the same
 * for every grouping of heads and every number of rows (the SIMD levels
 * take rows eight at a time: full groups and tails); nu_vec_mads_rows is
 * the f32 multiply-add of the dequantised rows at the same level, bit for
 * bit. Head sizes 32 .. 256 (an odd block count among them), a Q8_0 row
 * holding -128 (which nu_quantize_row never writes, a file could). */
static void test_quantized_cache_rows(void **state) {
    (void)state;
    rng r = {29};
    const uint32_t types[2] = {NU_TYPE_Q8_0, NU_TYPE_Q4_0};
    const int64_t sizes[5] = {32, 64, 96, 128, 256};
    const int64_t counts[5] = {1, 5, 8, 16, 37};
    enum { ROWS = 11, CELLS = 37, N = 256 };
    static uint8_t table[ROWS * (N / 32 * 34 + 6)];
    enum { H = NU_VEC_HEADS };
    static float deq[ROWS][N], q[H][N], scores[H][CELLS + 1], base_scores[H][CELLS];
    static float y[H][N], y_ref[H][N], wts[H * CELLS];
    int32_t cells[CELLS];
    for (int j = 0; j < CELLS; j++) cells[j] = (int32_t)(j * 7 % ROWS);
    for (int t = 0; t < 2; t++) {
        for (int s = 0; s < 5; s++) {
            const int64_t n = sizes[s];
            const size_t stride = (size_t)nu_type_row_bytes(types[t], (uint64_t)n) + 6;
            for (int row = 0; row < ROWS; row++) {
                float x[N];
                for (int64_t i = 0; i < n; i++) x[i] = rng_act(&r) * (float)(row + 1);
                nu_quantize_row(types[t], x, table + (size_t)row * stride, n);
                if (types[t] == NU_TYPE_Q8_0 && row == 3)
                    for (int64_t i = 0; i < n; i += 5)
                        table[(size_t)row * stride + 2 + i / 32 * 34 + i % 32] = 0x80;
                nu_dequantize_row(types[t], table + (size_t)row * stride, deq[row], n);
            }
            const float *qp[H];
            for (int v = 0; v < H; v++) {
                for (int64_t i = 0; i < n; i++) q[v][i] = rng_act(&r);
                qp[v] = q[v];
            }
            /* the queries as the kernel rounds them */
            static double qq[H][N];
            for (int v = 0; v < H; v++) {
                static uint8_t act[2048];
                nu_quantize_act_scalar(q[v], n, act);
                for (int64_t i = 0; i < n; i++)
                    qq[v][i] = (double)nu_act_d(act, nu_act_n_pad(n))[i / 32] * nu_act_q(act)[i];
            }
            for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
                assert_true(nu_kernels_force_level((nu_simd)l));
                for (int k = H; k >= 1; k--)
                    for (int c = 4; c >= 0; c--) {
                        const int64_t nr = counts[c];
                        for (int v = 0; v < H; v++) scores[v][nr] = -7.0f;
                        nu_vec_dots_rows(types[t], qp, k, table, stride, cells, nr, n,
                                         &scores[0][0], CELLS + 1);
                        for (int v = 0; v < k; v++) {
                            assert_true(scores[v][nr] == -7.0f); /* nothing past the rows */
                            for (int j = 0; j < nr; j++) {
                                double exact = 0, size = 0;
                                for (int64_t i = 0; i < n; i++) {
                                    exact += deq[cells[j]][i] * qq[v][i];
                                    size += fabs(deq[cells[j]][i] * qq[v][i]);
                                }
                                if (!(fabs(scores[v][j] - exact) <= 1e-5 * size + 1e-30))
                                    fail_msg("%s %s n %lld head %d row %d: %.9g, exact %.9g",
                                             level_name((nu_simd)l), nu_type_get(types[t])->name,
                                             (long long)n, v, j, scores[v][j], exact);
                                if (l == 0 && k == H && nr == CELLS)
                                    base_scores[v][j] = scores[v][j];
                                else if (float_to_bits(scores[v][j]) !=
                                         float_to_bits(base_scores[v][j]))
                                    fail_msg("%s %s n %lld k %d rows %lld head %d row %d: %.9g, "
                                             "scalar %.9g",
                                             level_name((nu_simd)l), nu_type_get(types[t])->name,
                                             (long long)n, k, (long long)nr, v, j, scores[v][j],
                                             base_scores[v][j]);
                            }
                        }
                    }
                for (int k = 1; k <= H; k++)
                    for (int c = 0; c < 5; c++) {
                        for (int i = 0; i < H * CELLS; i++) wts[i] = rng_sym(&r);
                        float *out[H], *out_ref[H];
                        for (int v = 0; v < H; v++) {
                            out[v] = y[v], out_ref[v] = y_ref[v];
                            for (int64_t i = 0; i < n; i++) y[v][i] = y_ref[v][i] = q[v][i];
                        }
                        nu_vec_mads_rows(types[t], out, wts, CELLS, k, table, stride, cells,
                                         counts[c], n);
                        nu_vec_mads_rows(NU_TYPE_F32, out_ref, wts, CELLS, k, deq, sizeof deq[0],
                                         cells, counts[c], n);
                        for (int v = 0; v < H; v++)
                            if (memcmp(y[v], y_ref[v], sizeof(float) * (size_t)n))
                                fail_msg("mads %s %s n %lld k %d rows %lld head %d differs",
                                         level_name((nu_simd)l), nu_type_get(types[t])->name,
                                         (long long)n, k, (long long)counts[c], v);
                    }
            }
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* nu_vec_swiglu at every level: within 4e-7 relative (plus 1e-30) of the
 * double-precision formula, large |g| included (no overflow: silu(-200) is
 * -0 or a tiny negative, silu(200) is 200 * up); nu_vec_to_f16 equals the
 * scalar conversion, specials included. */
static void test_swiglu_to_f16(void **state) {
    (void)state;
    rng r = {29};
    static float gate[1000], up[1000], g0[1000];
    static uint16_t h[1000];
    const int64_t sizes[] = {1, 7, 8, 17, 1000};
    const float specials[] = {0.0f,   -0.0f,    200.0f, -200.0f, 88.0f,    -88.0f,
                              1e-30f, 65520.0f, -1e9f,  6e-8f,   INFINITY, -INFINITY};
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            const int64_t n = sizes[s];
            for (int64_t i = 0; i < n; i++) {
                g0[i] = gate[i] = i < 10 ? specials[i] : rng_sym(&r) * (float)(1 << (i % 6));
                up[i] = rng_sym(&r);
            }
            nu_vec_swiglu(gate, up, n);
            for (int64_t i = 0; i < n; i++) {
                double g = g0[i], want = g / (1.0 + exp(-g)) * up[i];
                if (!(fabs(gate[i] - want) <= 4e-7 * fabs(want) + 1e-30))
                    fail_msg("swiglu level %d n %lld i %lld: g %.9g up %.9g got %.9g want %.9g", l,
                             (long long)n, (long long)i, g, (double)up[i], (double)gate[i], want);
            }
            for (int64_t i = 0; i < n; i++)
                gate[i] = i < 12 ? specials[i] : rng_sym(&r) * (float)(1 << (i % 20));
            nu_vec_to_f16(h, gate, n);
            for (int64_t i = 0; i < n; i++) assert_int_equal(h[i], nu_f32_to_f16(gate[i]));
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* nu_vec_delta_rule at every level against the formula in double: rows of
 * 128 (whole vectors), 20 and 7 (tails), from a state, in place and from
 * zeros; each output within 2e-5 relative (plus 1e-5) of the exact value. */
static void test_delta_rule(void **state) {
    (void)state;
    rng r = {31};
    static float m[64 * 128], in[64 * 128], q[128], k[128], v[64], o[64];
    const int64_t dks[] = {128, 20, 7};
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        for (int c = 0; c < 3; c++) {
            const int64_t dk = dks[c], dv = 64 - 8 * c;
            for (int64_t i = 0; i < dk; i++) q[i] = rng_sym(&r), k[i] = rng_sym(&r) * 0.2f;
            for (int64_t j = 0; j < dv; j++) v[j] = rng_sym(&r) * 3;
            for (int64_t i = 0; i < dv * dk; i++) in[i] = rng_sym(&r);
            const float a = 0.9f, beta = 0.6f, scale = 0.125f;
            for (int mode = 0; mode < 3; mode++) { /* from in; in place; from zeros */
                memcpy(m, in, sizeof(float) * (size_t)(dv * dk));
                nu_vec_delta_rule(m,
                                  mode == 0   ? in
                                  : mode == 1 ? m
                                              : NULL,
                                  q, k, v, a, beta, scale, dk, dv, o);
                for (int64_t j = 0; j < dv; j++) {
                    double u = 0, s = 0, row[128];
                    for (int64_t i = 0; i < dk && mode < 2; i++) u += (double)in[j * dk + i] * k[i];
                    double d = beta * (v[j] - a * u);
                    for (int64_t i = 0; i < dk; i++) {
                        row[i] = (mode < 2 ? a * (double)in[j * dk + i] : 0) + d * k[i];
                        s += row[i] * q[i];
                        if (fabs(m[j * dk + i] - row[i]) > 2e-5 * fabs(row[i]) + 1e-5)
                            fail_msg(
                                "delta level %d dk %lld mode %d: M[%lld][%lld] %.9g, want %.9g", l,
                                (long long)dk, mode, (long long)j, (long long)i,
                                (double)m[j * dk + i], row[i]);
                    }
                    if (fabs(o[j] - scale * s) > 2e-5 * fabs(scale * s) + 1e-5)
                        fail_msg("delta level %d dk %lld mode %d: o[%lld] %.9g, want %.9g", l,
                                 (long long)dk, mode, (long long)j, (double)o[j], scale * s);
                }
            }
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* nu_vec_softmax at every level: each weight within 1e-6 (relative, plus
 * 1e-30, plus what rounding x - max to float may move e^(x - max): up to
 * |x - max| * 2^-24 relative) of the double-precision softmax, weights far below the maximum
 * (e^-100 and less) give 0 or that tiny value, the f16 flag equals rounding
 * afterwards, and the weights sum to 1 within 1e-5. */
static void test_softmax(void **state) {
    (void)state;
    rng r = {23};
    const int64_t sizes[] = {1, 2, 7, 16, 17, 33, 300, 1000};
    static float x[1000], y[1000], z[1000];
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            const int64_t n = sizes[si];
            float max = -INFINITY;
            for (int64_t i = 0; i < n; i++) {
                x[i] = rng_sym(&r) * (i % 7 == 3 ? 150.0f : 12.0f);
                max = x[i] > max ? x[i] : max;
            }
            double sum = 0.0;
            for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - max);
            memcpy(y, x, sizeof(float) * (size_t)n);
            memcpy(z, x, sizeof(float) * (size_t)n);
            nu_vec_softmax(y, n, max, 0);
            nu_vec_softmax(z, n, max, 1);
            double total = 0.0;
            for (int64_t i = 0; i < n; i++) {
                double want = exp((double)x[i] - max) / sum;
                double rel = 1e-6 + fabs((double)x[i] - max) * 0x1p-23;
                if (!(fabs(y[i] - want) <= rel * want + 1e-30))
                    fail_msg("%s softmax n %lld [%lld]: %.9g, want %.9g", level_name((nu_simd)l),
                             (long long)n, (long long)i, y[i], want);
                total += y[i];
                assert_int_equal(float_to_bits(z[i]),
                                 float_to_bits(nu_f16_to_f32(nu_f32_to_f16(y[i]))));
            }
            assert_true(fabs(total - 1.0) <= 1e-5);
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* Panel layout (matrices repacked 16 rows at a time, for the levels that
 * have panel kernels): every value within the reference's bound and within
 * float rounding of the row kernels of the same level; bit-identical for
 * any batch size (1..20 covers full and partial groups of 8) and thread
 * count. Shapes include odd block counts (a zero block pads the last pair). */
static void check_panels(uint32_t type, shape s, nu_simd level, rng *r) {
    test_matrix t = make_matrix(type, s.n_in, s.n_out, r);
    const int32_t max_batch = 20;
    float *x = make_activations(s.n_in, max_batch, r);
    float *ref = malloc(sizeof(float) * (size_t)(s.n_out * max_batch));
    float *rows = malloc(sizeof(float) * (size_t)(s.n_out * max_batch));
    float *all = malloc(sizeof(float) * (size_t)(s.n_out * max_batch));
    float *y = malloc(sizeof(float) * (size_t)(s.n_out * max_batch));
    assert_true(nu_kernels_force_level(level));
    size_t bytes = nu_matrix_pack_bytes(&t.m);
    if (type == NU_TYPE_Q4_K || type == NU_TYPE_Q5_K || type == NU_TYPE_Q6_K)
        assert_int_equal(bytes, (size_t)(s.n_out / 16) * (size_t)(s.n_in / 256) *
                                    (type == NU_TYPE_Q4_K   ? 2368
                                     : type == NU_TYPE_Q5_K ? 2880
                                                            : 3360));
    else if (type == NU_TYPE_F16)
        assert_int_equal(bytes, (size_t)(s.n_out / 16) * (size_t)((s.n_in + 1) / 2) * 64);
    else
        assert_int_equal(bytes, (size_t)(s.n_out / 16) * (size_t)((s.n_in / 32 + 1) / 2) *
                                    (64 + 2 * (type == NU_TYPE_Q4_0 ? 256 : 512)));
    void *packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
    nu_matrix_pack(&t.m, packed, 0, s.n_out / 16);
    nu_matrix pm = t.m;
    pm.packed = packed;
    nu_matmul_ref(&t.m, x, max_batch, ref);
    run_matmul(&t.m, x, max_batch, rows, 2);
    run_matmul(&pm, x, max_batch, all, 2);
    for (int32_t b = 0; b < max_batch; b++)
        for (int64_t o = 0; o < s.n_out; o++) {
            double T, E;
            error_bounds(&t, o, x + b * s.n_in, &T, &E);
            if (nu_type_get(type)->block_size == 256) /* 8-bit activations per 256 */
                for (int64_t i = 0; i < s.n_in; i += 256) {
                    double amax = 0.0, wsum = 0.0;
                    for (int j = 0; j < 256; j++) {
                        amax = fmax(amax, fabs((double)x[b * s.n_in + i + j]));
                        wsum += fabs((double)t.deq[o * s.n_in + i + j]);
                    }
                    E += amax / 254.0 * wsum;
                }
            double got = all[b * s.n_out + o], want = ref[b * s.n_out + o];
            if (!(fabs(got - want) <= E * (1 + 1e-5) + 1e-5 * T + 1e-30) ||
                !(fabs(got - rows[b * s.n_out + o]) <= 1e-5 * T + 1e-30))
                fail_msg("panel %s n_in %lld row %lld batch row %d: got %.9g ref %.9g rows %.9g",
                         nu_type_get(type)->name, (long long)s.n_in, (long long)o, b, got, want,
                         rows[b * s.n_out + o]);
        }
    for (int32_t nb = 1; nb <= max_batch; nb++) {
        memset(y, 0xFF, sizeof(float) * (size_t)(s.n_out * nb));
        run_matmul(&pm, x + (max_batch - nb) * s.n_in, nb, y, nb % 4);
        assert_memory_equal(y, all + (max_batch - nb) * s.n_out,
                            sizeof(float) * (size_t)(s.n_out * nb));
    }
    free(packed);
    free(x);
    free(ref);
    free(rows);
    free(all);
    free(y);
    free_matrix(&t);
}

static void test_matmul_panels(void **state) {
    (void)state;
    rng r = {4321};
    static const shape shapes[] = {{32, 16}, {96, 48}, {544, 32}, {2048, 16}, {5632, 16}};
    static const shape k_shapes[] = {{256, 16}, {768, 32}, {2048, 16}, {5632, 16}};
    static const shape f_shapes[] = {{1, 16},
                                     {7, 32},
                                     {64, 16},
                                     {2048, 16},
                                     {5632, 16},
                                     {64, 512},
                                     {99, 272},
                                     /* F16 groups of 4 panels: last group of 3 */
                                     {33, 112},
                                     {130, 1040},
                                     /* rows of 557 KB: several activation chunks */
                                     {139264, 32}};
    static const uint32_t types[] = {NU_TYPE_F32,  NU_TYPE_F16,  NU_TYPE_BF16, NU_TYPE_Q4_0,
                                     NU_TYPE_Q4_1, NU_TYPE_Q5_0, NU_TYPE_Q5_1, NU_TYPE_Q8_0,
                                     NU_TYPE_Q2_K, NU_TYPE_Q3_K, NU_TYPE_Q4_K, NU_TYPE_Q5_K,
                                     NU_TYPE_Q6_K};
    int tested = 0;
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
            const int kq = nu_type_get(types[t])->block_size == 256;
            test_matrix probe = make_matrix(types[t], kq ? 256 : 32, 16, &r);
            size_t bytes = nu_matrix_pack_bytes(&probe.m);
            free_matrix(&probe);
            if (!bytes) continue;
            const int fl = !nu_type_is_quantized(types[t]) && !kq;
            const shape *sh = kq ? k_shapes : fl ? f_shapes : shapes;
            size_t n = kq   ? sizeof k_shapes / sizeof *k_shapes
                       : fl ? sizeof f_shapes / sizeof *f_shapes
                            : sizeof shapes / sizeof *shapes;
            for (size_t i = 0; i < n; i++) check_panels(types[t], sh[i], (nu_simd)l, &r);
            tested++;
        }
    }
    /* rows that do not fill whole panels keep the row layout */
    test_matrix odd = make_matrix(NU_TYPE_Q4_0, 64, 17, &r);
    assert_int_equal(nu_matrix_pack_bytes(&odd.m), 0);
    free_matrix(&odd);
    nu_kernels_force_level(nu_kernels_cpu_level());
    /* AVX2: Q4_0, Q4_K, Q5_K, Q6_K; AVX-512: Q4_0, Q8_0, Q4_K, F16 (the levels
     * below it too) */
    if (nu_kernels_cpu_level() == NU_SIMD_AVX512) assert_int_equal(tested, 8);
    if (nu_kernels_cpu_level() == NU_SIMD_AVX2) assert_int_equal(tested, 4);
}

/* nu_matmul_multi gives each matrix exactly what nu_matmul gives it: with a
 * shared input conversion (same type family), with mixed families (Q8_0 +
 * F16 + Q4_K: converted separately), packed or not, and with threads. */
/* Products with their own inputs and batch sizes in one pass (the experts'
 * products): each bit-identical to nu_matmul alone, whatever the threads;
 * tasks sharing an input share its conversion. */
static void test_matmul_tasks(void **state) {
    (void)state;
    rng r = {91};
    const int64_t n_in = 512;
    const uint32_t types[] = {NU_TYPE_Q4_0, NU_TYPE_Q8_0, NU_TYPE_Q4_K, NU_TYPE_F16, NU_TYPE_Q6_K};
    enum { N = 9 };
    test_matrix t[N];
    void *packed[N] = {0};
    nu_matmul_task task[N];
    float *want[N], *xs[3];
    const int32_t rows[3] = {1, 5, 13};
    for (int i = 0; i < 3; i++) xs[i] = make_activations(n_in, rows[i], &r);
    for (int i = 0; i < N; i++) {
        t[i] = make_matrix(types[i % 5], n_in, 16 * (1 + i % 3), &r);
        size_t pb = nu_matrix_pack_bytes(&t[i].m);
        if (pb && i % 2) {
            packed[i] = aligned_alloc(64, (pb + 63) / 64 * 64);
            nu_matrix_pack(&t[i].m, packed[i], 0, t[i].m.n_out / 16);
            t[i].m.packed = packed[i];
        }
        int xi = i % 3; /* tasks 0, 3, 6 share an input, and so on */
        task[i] = (nu_matmul_task){&t[i].m, xs[xi], rows[xi], NULL};
        task[i].y = malloc(sizeof(float) * (size_t)(t[i].m.n_out * rows[xi]));
        want[i] = malloc(sizeof(float) * (size_t)(t[i].m.n_out * rows[xi]));
        run_matmul(&t[i].m, xs[xi], rows[xi], want[i], 0);
    }
    size_t bytes = nu_matmul_tasks_scratch_bytes(task, N);
    void *scratch = malloc(bytes);
    for (int threads = 0; threads <= 2; threads++) {
        nu_threadpool *pool = threads ? nu_threadpool_new(threads) : NULL;
        for (int i = 0; i < N; i++)
            memset(task[i].y, 0xff, sizeof(float) * (size_t)(t[i].m.n_out * task[i].n_batch));
        nu_matmul_tasks(pool, task, N, scratch);
        nu_threadpool_free(pool);
        for (int i = 0; i < N; i++)
            assert_memory_equal(task[i].y, want[i],
                                sizeof(float) * (size_t)(t[i].m.n_out * task[i].n_batch));
    }
    free(scratch);
    for (int i = 0; i < N; i++) {
        free(task[i].y);
        free(want[i]);
        free(packed[i]);
        free_matrix(&t[i]);
    }
    for (int i = 0; i < 3; i++) free(xs[i]);
}

static void test_matmul_multi(void **state) {
    (void)state;
    rng r = {77};
    const int64_t n_in = 512;
    const int32_t nb = 11;
    const uint32_t sets[][3] = {{NU_TYPE_Q4_0, NU_TYPE_Q8_0, NU_TYPE_Q4_1},
                                {NU_TYPE_Q8_0, NU_TYPE_F16, NU_TYPE_Q4_K},
                                {NU_TYPE_Q4_K, NU_TYPE_Q6_K, NU_TYPE_Q4_K}};
    float *x = make_activations(n_in, nb, &r);
    for (size_t set = 0; set < sizeof sets / sizeof *sets; set++) {
        test_matrix t[3];
        void *packed[3] = {NULL, NULL, NULL};
        const nu_matrix *W[3];
        float *y[3], *want[3];
        size_t scratch_bytes = 0;
        for (int i = 0; i < 3; i++) {
            t[i] = make_matrix(sets[set][i], n_in, 32 + 16 * i, &r);
            size_t pb = nu_matrix_pack_bytes(&t[i].m);
            if (pb && i != 1) { /* one matrix keeps the row layout */
                packed[i] = aligned_alloc(64, (pb + 63) / 64 * 64);
                nu_matrix_pack(&t[i].m, packed[i], 0, t[i].m.n_out / 16);
                t[i].m.packed = packed[i];
            }
            W[i] = &t[i].m;
            y[i] = malloc(sizeof(float) * (size_t)(t[i].m.n_out * nb));
            want[i] = malloc(sizeof(float) * (size_t)(t[i].m.n_out * nb));
            size_t sb = nu_matmul_scratch_bytes(sets[set][i], n_in, nb);
            if (sb > scratch_bytes) scratch_bytes = sb;
            run_matmul(W[i], x, nb, want[i], 0);
        }
        void *scratch = malloc(scratch_bytes + 1);
        for (int threads = 0; threads <= 2; threads++) {
            nu_threadpool *pool = threads ? nu_threadpool_new(threads) : NULL;
            nu_matmul_multi(pool, W, y, 3, x, nb, scratch);
            nu_threadpool_free(pool);
            for (int i = 0; i < 3; i++)
                assert_memory_equal(y[i], want[i], sizeof(float) * (size_t)(W[i]->n_out * nb));
        }
        free(scratch);
        for (int i = 0; i < 3; i++) {
            free(y[i]);
            free(want[i]);
            free(packed[i]);
            free_matrix(&t[i]);
        }
    }
    free(x);
}

/* The AMX answer agrees with what the kernel tells /proc/cpuinfo: without
 * the amx_tile flag the units are absent or not enabled; with it (and the
 * kernel listing it only when the OS supports it) they are at least
 * enabled. Asking twice gives the same answer. */
static void test_amx_status(void **state) {
    (void)state;
    const char *s = nu_amx_status();
    assert_non_null(s);
    assert_string_equal(s, nu_amx_status());
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) skip();
    char line[4096];
    int flag = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0 && strstr(line, " amx_tile")) flag = 1;
    fclose(f);
    if (flag)
        assert_true(strncmp(s, "available", 9) == 0 || strncmp(s, "enabled", 7) == 0);
    else
        assert_true(strncmp(s, "absent", 6) == 0 || strncmp(s, "reported", 8) == 0);
}

/* Degenerate calls do nothing and touch nothing. */
static void test_matmul_empty(void **state) {
    (void)state;
    float y = 42.0f;
    uint8_t w[18] = {0};
    nu_matrix m = {NU_TYPE_Q4_0, 32, 1, w, 18, NULL};
    nu_matmul(NULL, &m, NULL, 0, &y, NULL);
    assert_true(y == 42.0f);
    /* A type the kernels cannot multiply (Q8_K: activations only) leaves y
     * as it was. */
    uint8_t k_block[292] = {0};
    float x[256] = {0};
    nu_matrix q8k = {NU_TYPE_Q8_K, 256, 1, k_block, 292, NULL};
    nu_matmul(NULL, &q8k, x, 1, &y, NULL);
    assert_true(y == 42.0f);
    nu_matrix unknown = {1000, 256, 1, k_block, 84, NULL};
    nu_matmul(NULL, &unknown, x, 1, &y, NULL);
    assert_true(y == 42.0f);
    assert_int_equal(nu_matmul_scratch_bytes(NU_TYPE_F32, 2048, 64), 0);
    assert_true(nu_matmul_scratch_bytes(NU_TYPE_F16, 2048, 64) >= 64 * 2048 * sizeof(float));
    assert_true(nu_matmul_scratch_bytes(NU_TYPE_Q4_0, 2048, 2) >= 2 * (2048 + 2048 / 32 * 8));
}

/* ---- Vector helpers -------------------------------------------------------- */

static void test_vector_helpers(void **state) {
    (void)state;
    rng r = {3};
    const int64_t sizes[] = {0, 1, 7, 16, 33, 100, 1000};
    float a[1000], b[1000], y[1000], want[1000];
    uint16_t h[1000];
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            int64_t n = sizes[s];
            double dot = 0, dot16 = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                a[i] = rng_sym(&r), b[i] = rng_sym(&r), h[i] = nu_f32_to_f16(a[i]);
                dot += (double)a[i] * b[i];
                dot16 += (double)nu_f16_to_f32(h[i]) * b[i];
                mag += fabs((double)a[i] * b[i]);
            }
            assert_true(fabs(nu_vec_dot_f32(a, b, n) - dot) <= 1e-5 * mag + 1e-30);
            assert_true(fabs(nu_vec_dot_f16(h, b, n) - dot16) <= 1e-5 * mag + 1e-30);
            for (int64_t i = 0; i < n; i++) y[i] = b[i], want[i] = b[i] + 0.75f * a[i];
            nu_vec_mad_f32(y, a, 0.75f, n);
            for (int64_t i = 0; i < n; i++) assert_true(fabsf(y[i] - want[i]) <= 1e-6f);
            for (int64_t i = 0; i < n; i++)
                y[i] = b[i], want[i] = b[i] + 0.75f * nu_f16_to_f32(h[i]);
            nu_vec_mad_f16(y, h, 0.75f, n);
            for (int64_t i = 0; i < n; i++) assert_true(fabsf(y[i] - want[i]) <= 1e-6f);
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
}

/* ---- Thread pool ---------------------------------------------------------------- */

typedef struct pool_probe {
    _Atomic int calls[8];
    _Atomic int bad_nth;
    int expected_nth;
} pool_probe;

static void probe_task(void *arg, int ith, int nth) {
    pool_probe *p = arg;
    if (nth != p->expected_nth || ith < 0 || ith >= nth)
        atomic_fetch_add(&p->bad_nth, 1);
    else
        atomic_fetch_add(&p->calls[ith], 1);
}

static void test_threadpool(void **state) {
    (void)state;
    for (int n = 1; n <= 4; n++) {
        nu_threadpool *pool = nu_threadpool_new(n);
        assert_non_null(pool);
        assert_int_equal(nu_threadpool_size(pool), n);
        pool_probe p = {.expected_nth = n};
        const int runs = 500;
        for (int i = 0; i < runs; i++) nu_threadpool_run(pool, probe_task, &p);
        assert_int_equal(atomic_load(&p.bad_nth), 0);
        for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&p.calls[i]), runs);
        nu_threadpool_free(pool);
    }
    pool_probe single = {.expected_nth = 1};
    nu_threadpool_run(NULL, probe_task, &single);
    assert_int_equal(atomic_load(&single.calls[0]), 1);
    assert_int_equal(nu_threadpool_size(NULL), 1);
    assert_null(nu_threadpool_new(0));
    nu_threadpool_free(NULL);
}

/* Workers that fell asleep (futex) wake up for the next run. */
static void test_threadpool_sleep_wake(void **state) {
    (void)state;
    nu_threadpool *pool = nu_threadpool_new(3);
    pool_probe p = {.expected_nth = 3};
    for (int i = 0; i < 3; i++) {
        nu_threadpool_run(pool, probe_task, &p);
        struct timespec ts = {0, 20 * 1000 * 1000}; /* longer than the spin phase */
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 3; i++) assert_int_equal(atomic_load(&p.calls[i]), 3);
    nu_threadpool_free(pool);
}

static void test_split_range(void **state) {
    (void)state;
    const int64_t ns[] = {0, 1, 5, 7, 100, 5632, 32000};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        for (int nth = 1; nth <= 7; nth++) {
            int64_t next = 0, lo = INT64_MAX, hi = 0;
            for (int ith = 0; ith < nth; ith++) {
                int64_t b, e;
                nu_split_range(ns[k], ith, nth, &b, &e);
                assert_true(b == next && e >= b);
                lo = e - b < lo ? e - b : lo;
                hi = e - b > hi ? e - b : hi;
                next = e;
            }
            assert_true(next == ns[k]);
            assert_true(hi - lo <= 1);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_to_f32_known),
        cmocka_unit_test(test_f32_to_f16_known),
        cmocka_unit_test(test_f16_round_trip_all),
        cmocka_unit_test(test_f32_to_f16_nearest),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_dequantize_q4_0),
        cmocka_unit_test(test_dequantize_q4_1),
        cmocka_unit_test(test_dequantize_q5_0),
        cmocka_unit_test(test_dequantize_q5_1),
        cmocka_unit_test(test_dequantize_q8_0),
        cmocka_unit_test(test_dequantize_float_types),
        cmocka_unit_test(test_quantize_exact),
        cmocka_unit_test(test_quantize_round_trip),
        cmocka_unit_test(test_quantize_row_blocks),
        cmocka_unit_test(test_level_selection),
        cmocka_unit_test(test_activation_quant_identical),
        cmocka_unit_test(test_matmul_empty),
        cmocka_unit_test(test_matmul_levels),
        cmocka_unit_test(test_matmul_reproducible),
        cmocka_unit_test(test_matmul_panels),
        cmocka_unit_test(test_swiglu_to_f16),
        cmocka_unit_test(test_delta_rule),
        cmocka_unit_test(test_quantized_cache_rows),
        cmocka_unit_test(test_grouped_vector_helpers),
        cmocka_unit_test(test_scale_max),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_matmul_multi),
        cmocka_unit_test(test_matmul_tasks),
        cmocka_unit_test(test_amx_status),
        cmocka_unit_test(test_vector_helpers),
        cmocka_unit_test(test_threadpool),
        cmocka_unit_test(test_threadpool_sleep_wake),
        cmocka_unit_test(test_split_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
