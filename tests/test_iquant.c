/* test_iquant.c - the non-linear 4-bit formats IQ4_NL, IQ4_XS and MXFP4:
 * decoding hand-made blocks (values worked out from the format definitions),
 * the encoders (exact on representable rows, error on random rows, the
 * importance weighting), and every SIMD level's matmul.
 *
 * The reference decoder here is written from the format description
 * (iquant.h: ggml's IQ4_NL table, the OCP MX specification's E2M1 values)
 * independently of quant_iq.c. Tolerances per output y of a weight row w
 * and an activation row x, xq being x after the activation rounding the
 * type multiplies with (32-element blocks with an f16 scale for IQ4_NL and
 * MXFP4, Q8_K for IQ4_XS):
 *   T = sum |w_i xq_i|;  level vs the exact w . xq (double): 1e-5 T + 1e-30;
 *   level vs the scalar level: 2e-5 T + 1e-30;
 *   E = sum |w_i| |x_i - xq_i|: nu_matmul_ref (w . x) may differ by E
 *   plus 1e-5 T.
 */
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "iquant.h"
#include "kernels.h"
#include "test_rng.h"

/* The formats' tables, as published. */
static const int iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                              1,    13,   25,  38,  53,  69,  89,  113};
static const double e2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

static const uint32_t iq_types[] = {NU_TYPE_IQ4_NL, NU_TYPE_IQ4_XS, NU_TYPE_MXFP4};
#define N_IQ (sizeof iq_types / sizeof iq_types[0])

static const char *level_name(nu_simd l) {
    return l == NU_SIMD_SCALAR ? "scalar" : l == NU_SIMD_AVX2 ? "avx2" : "avx512";
}

static double half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return (double)nu_f16_to_f32(h);
}

/* Code of element j of a 32-element group whose 16 code bytes are at qs. */
static int code_at(const uint8_t *qs, int j) {
    return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
}

/* The reference decoder: one block of `type` into out (32 or 256 values). */
static void decode_ref(uint32_t type, const uint8_t *blk, double *out) {
    if (type == NU_TYPE_IQ4_NL) {
        for (int j = 0; j < 32; j++) out[j] = half(blk) * iq4nl[code_at(blk + 2, j)];
    } else if (type == NU_TYPE_MXFP4) {
        for (int j = 0; j < 32; j++) out[j] = ldexp(e2m1[code_at(blk + 1, j)], blk[0] - 127);
    } else {
        uint16_t scales_h;
        memcpy(&scales_h, blk + 2, 2);
        for (int b = 0; b < 8; b++) {
            int low = (blk[4 + b / 2] >> (4 * (b % 2))) & 15, high = (scales_h >> (2 * b)) & 3;
            double dl = half(blk) * ((low | high << 4) - 32);
            for (int j = 0; j < 32; j++) out[32 * b + j] = dl * iq4nl[code_at(blk + 8 + 16 * b, j)];
        }
    }
}

static int64_t block_elems(uint32_t type) {
    return nu_type_get(type)->block_size;
}

/* ---- Hand-made blocks --------------------------------------------------------- */

static void test_hand_made_blocks(void **state) {
    (void)state;
    float got[256];
    /* IQ4_NL: d = 0.5 (f16 0x3800), byte j = code j low, code 15 - j high. */
    uint8_t nl[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++) nl[2 + j] = (uint8_t)(j | (15 - j) << 4);
    nu_dequantize_row(NU_TYPE_IQ4_NL, nl, got, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(got[j] == 0.5f * (float)iq4nl[j]);
        assert_true(got[16 + j] == 0.5f * (float)iq4nl[15 - j]);
    }
    assert_true(got[0] == -63.5f && got[15] == 56.5f && got[16] == 56.5f);
    /* MXFP4: e = 128 gives the doubled E2M1 values 2 * e2m1; e = 125 a
     * quarter of e2m1; e = 1 the subnormal 2^-126 * e2m1. */
    uint8_t mx[3][17];
    const uint8_t exps[3] = {128, 125, 1};
    for (int b = 0; b < 3; b++) {
        mx[b][0] = exps[b];
        for (int j = 0; j < 16; j++) mx[b][1 + j] = (uint8_t)(j | j << 4);
    }
    float mxv[96];
    nu_dequantize_row(NU_TYPE_MXFP4, mx, mxv, 96);
    static const float doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int j = 0; j < 16; j++) {
        assert_true(mxv[j] == doubled[j] && mxv[16 + j] == doubled[j]);
        assert_true(mxv[32 + j] == (float)(e2m1[j] / 4));
        assert_true(mxv[64 + j] == ldexpf((float)e2m1[j], -126));
    }
    /* IQ4_XS: d = 1, sub-block b has ls = 28 + b (scale b - 4), code
     * (j + b) % 16 for element j < 16 and 15 - j for j >= 16. */
    uint8_t xs[136] = {0x00, 0x3C};
    uint16_t scales_h = 0;
    for (int b = 0; b < 8; b++) {
        int ls = 28 + b;
        xs[4 + b / 2] |= (uint8_t)((ls & 15) << (4 * (b % 2)));
        scales_h |= (uint16_t)((ls >> 4) << (2 * b));
        for (int j = 0; j < 16; j++) xs[8 + 16 * b + j] = (uint8_t)((j + b) % 16 | (15 - j) << 4);
    }
    memcpy(xs + 2, &scales_h, 2);
    nu_dequantize_row(NU_TYPE_IQ4_XS, xs, got, 256);
    for (int b = 0; b < 8; b++)
        for (int j = 0; j < 32; j++) {
            int code = j < 16 ? (j + b) % 16 : 15 - (j - 16);
            assert_true(got[32 * b + j] == (float)((b - 4) * iq4nl[code]));
        }
    /* The reference decoder reads the same blocks the same way. */
    double ref[256];
    decode_ref(NU_TYPE_IQ4_XS, xs, ref);
    for (int e = 0; e < 256; e++) assert_true(ref[e] == (double)got[e]);
}

/* The reference decoder agrees with nu_dequantize_row on random blocks. */
static void test_decoders_agree(void **state) {
    (void)state;
    rng r = {23};
    for (size_t t = 0; t < N_IQ; t++) {
        const uint32_t type = iq_types[t];
        const size_t bytes = nu_type_get(type)->block_bytes;
        uint8_t blk[136];
        double want[256];
        float got[256];
        for (int i = 0; i < 300; i++) {
            for (size_t j = 0; j < bytes; j++) blk[j] = (uint8_t)rng_next(&r);
            if (type != NU_TYPE_MXFP4) blk[1] = (uint8_t)(blk[1] & 0x3F); /* |d| < 4, finite */
            if (type == NU_TYPE_MXFP4) blk[0] = (uint8_t)(blk[0] % 250);  /* 6 * 2^(e-127) finite */
            decode_ref(type, blk, want);
            nu_dequantize_row(type, blk, got, block_elems(type));
            for (int e = 0; e < block_elems(type); e++)
                if (!((double)got[e] == want[e]))
                    fail_msg("%s block %d element %d: %.9g, reference %.9g",
                             nu_type_get(type)->name, i, e, got[e], want[e]);
        }
    }
}

/* ---- Encoders ------------------------------------------------------------------ */

/* Rows made of a representable scale times table values come back exactly. */
static void test_encoder_exact(void **state) {
    (void)state;
    rng r = {29};
    float x[512], y[512];
    uint8_t q[512];
    for (int j = 0; j < 512; j++) x[j] = 0.25f * (float)iq4nl[rng_next(&r) % 16];
    for (int b = 0; b < 16; b++) x[32 * b + (b % 32)] = -0.25f * 127.0f; /* each block's extreme */
    nu_quantize_row(NU_TYPE_IQ4_NL, x, q, 512);
    nu_dequantize_row(NU_TYPE_IQ4_NL, q, y, 512);
    assert_memory_equal(x, y, sizeof x);
    /* IQ4_XS: d = 2^-6 and sub-block b's scale ls - 32 = -32 + 9 (b % 8)
     * (-32 .. 31), each sub-block holding the code of -127. */
    for (int b = 0; b < 16; b++) {
        const int l = -32 + 9 * (b % 8);
        for (int j = 0; j < 32; j++)
            x[32 * b + j] = 0x1p-6f * (float)(l * iq4nl[rng_next(&r) % 16]);
        x[32 * b] = 0x1p-6f * (float)(l * -127);
    }
    nu_quantize_row(NU_TYPE_IQ4_XS, x, q, 512);
    nu_dequantize_row(NU_TYPE_IQ4_XS, q, y, 512);
    for (int j = 0; j < 512; j++)
        if (x[j] != y[j]) fail_msg("iq4_xs element %d: %.9g, want %.9g", j, y[j], x[j]);
}

/* Root-mean-square error of quantising N(0, 1)-like rows, and the importance
 * weighting: with weights on half of the columns the weighted error drops. */
static void test_encoder_error(void **state) {
    (void)state;
    rng r = {31};
    enum { N = 256 * 64 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    float *imp = malloc(sizeof(float) * N);
    uint8_t *q = malloc(N);
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int k = 0; k < 12; k++) s += (rng_sym(&r) + 1.0) / 2.0;
        x[i] = (float)(s - 6.0);
        imp[i] = i % 2 ? 10.0f : 0.1f;
    }
    const uint32_t types[2] = {NU_TYPE_IQ4_NL, NU_TYPE_IQ4_XS};
    const double max_rms[2] = {0.08, 0.08}; /* Q4_0's is 0.086 on the same rows */
    for (int t = 0; t < 2; t++) {
        nu_quantize_row(types[t], x, q, N);
        nu_dequantize_row(types[t], q, y, N);
        double se = 0, wse_plain = 0, wse_weighted = 0;
        for (int i = 0; i < N; i++) {
            se += (double)(x[i] - y[i]) * (x[i] - y[i]);
            wse_plain += imp[i] * (double)(x[i] - y[i]) * (x[i] - y[i]);
        }
        nu_quantize_row_weighted(types[t], x, q, N, imp);
        nu_dequantize_row(types[t], q, y, N);
        for (int i = 0; i < N; i++) wse_weighted += imp[i] * (double)(x[i] - y[i]) * (x[i] - y[i]);
        double rms = sqrt(se / N);
        print_message("%s: rms %.4f; importance-weighted error %.4f plain, %.4f weighted\n",
                      nu_type_get(types[t])->name, rms, wse_plain / N, wse_weighted / N);
        assert_true(rms < max_rms[t]);
        assert_true(wse_weighted < 0.95 * wse_plain);
    }
    /* Q4_0's error on the same rows, for the comparison in the comment. */
    uint8_t *q40 = malloc(N);
    nu_quantize_row(NU_TYPE_Q4_0, x, q40, N);
    nu_dequantize_row(NU_TYPE_Q4_0, q40, y, N);
    double se = 0;
    for (int i = 0; i < N; i++) se += (double)(x[i] - y[i]) * (x[i] - y[i]);
    print_message("q4_0: rms %.4f\n", sqrt(se / N));
    free(q40);
    free(x), free(y), free(imp), free(q);
}

/* ---- Matmul at every level -------------------------------------------------- */

typedef struct imatrix {
    nu_matrix m;
    uint8_t *data;
    double *w; /* decoded rows */
} imatrix;

/* Rows: even ones from the encoder (random floats; MXFP4 has none: random
 * codes with exponents 120..131), odd ones random codes with sane scales. */
static imatrix make_matrix(uint32_t type, int64_t n_in, int64_t n_out, rng *r) {
    imatrix k;
    const size_t row_bytes = nu_type_row_bytes(type, (uint64_t)n_in);
    const size_t bytes = nu_type_get(type)->block_bytes;
    const int64_t nb = n_in / block_elems(type);
    k.data = malloc(row_bytes * (size_t)n_out);
    k.w = malloc(sizeof(double) * (size_t)(n_in * n_out));
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        uint8_t *w = k.data + row_bytes * (size_t)o;
        if (o % 2 == 0 && type != NU_TYPE_MXFP4) {
            for (int64_t i = 0; i < n_in; i++) row[i] = 0.1f * rng_sym(r) + 0.01f * (float)(o % 3);
            nu_quantize_row(type, row, w, n_in);
        } else {
            for (size_t j = 0; j < row_bytes; j++) w[j] = (uint8_t)rng_next(r);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *blk = w + (size_t)b * bytes;
                if (type == NU_TYPE_MXFP4) {
                    blk[0] = (uint8_t)(120 + rng_next(r) % 12);
                } else { /* f16 d of magnitude 2^-9 .. 2^-6 */
                    uint16_t d = (uint16_t)(0x1800 + rng_next(r) % 0x0C00) |
                                 (uint16_t)(rng_next(r) & 1 ? 0x8000 : 0);
                    memcpy(blk, &d, 2);
                }
            }
        }
        for (int64_t b = 0; b < nb; b++)
            decode_ref(type, w + (size_t)b * bytes, k.w + o * n_in + b * block_elems(type));
    }
    free(row);
    k.m = (nu_matrix){
        .type = type, .n_in = n_in, .n_out = n_out, .data = k.data, .row_bytes = row_bytes};
    return k;
}

/* Activation rows: roughly normal with outliers; row 3 all zero, row 4 all
 * 3.0 (every q = 127), row 5 tiny. */
static float *make_acts(int64_t n_in, int32_t n_batch, rng *r) {
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_batch));
    for (int32_t b = 0; b < n_batch; b++)
        for (int64_t i = 0; i < n_in; i++) {
            float v = rng_sym(r) + rng_sym(r) + rng_sym(r);
            if ((rng_next(r) & 255) == 0) v *= 30.0f;
            x[b * n_in + i] = b == 3 ? 0.0f : b == 4 ? 3.0f : b == 5 ? 1e-20f * v : v;
        }
    return x;
}

/* The activations as the type's kernels see them, as doubles. */
static double *rounded_acts(uint32_t type, const float *x, int64_t n_in, int32_t n_batch) {
    const int k = type == NU_TYPE_IQ4_XS;
    const size_t bytes = k ? nu_actk_row_bytes(n_in) : nu_act_row_bytes(n_in);
    uint8_t *row = aligned_alloc(64, (bytes + 63) / 64 * 64);
    double *xq = malloc(sizeof(double) * (size_t)(n_in * n_batch));
    for (int32_t b = 0; b < n_batch; b++) {
        if (k) {
            nu_quantize_act_k_scalar(x + b * n_in, n_in, row);
            for (int64_t i = 0; i < n_in; i++)
                xq[b * n_in + i] = (double)nu_actk_d(row, n_in)[i / 256] * nu_actk_q(row)[i];
        } else {
            nu_quantize_act_scalar(x + b * n_in, n_in, row);
            for (int64_t i = 0; i < n_in; i++)
                xq[b * n_in + i] =
                    (double)nu_act_d(row, nu_act_n_pad(n_in))[i / 32] * nu_act_q(row)[i];
        }
    }
    free(row);
    return xq;
}

static void run_matmul(const nu_matrix *W, const float *x, int32_t n_batch, float *y,
                       int n_threads) {
    void *scratch = malloc(nu_matmul_scratch_bytes(W->type, W->n_in, n_batch));
    nu_threadpool *pool = n_threads > 0 ? nu_threadpool_new(n_threads) : NULL;
    nu_matmul(pool, W, x, n_batch, y, scratch);
    nu_threadpool_free(pool);
    free(scratch);
}

/* Every level against the references on the matrix k; `what` names it. */
static void check_matrix(const imatrix *kp, rng *r, const char *what) {
    const imatrix k = *kp;
    const uint32_t type = k.m.type;
    const int64_t n_in = k.m.n_in, n_out = k.m.n_out;
    const int32_t nb = 9;
    float *x = make_acts(n_in, nb, r);
    double *xq = rounded_acts(type, x, n_in, nb);
    float *scalar = malloc(sizeof(float) * (size_t)(n_out * nb));
    float *y = malloc(sizeof(float) * (size_t)(n_out * nb));
    float *ref = malloc(sizeof(float) * (size_t)(n_out * nb));
    nu_matmul_ref(&k.m, x, nb, ref);
    assert_true(nu_kernels_force_level(NU_SIMD_SCALAR));
    run_matmul(&k.m, x, nb, scalar, 0);
    for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
        assert_true(nu_kernels_force_level((nu_simd)l));
        for (int32_t n = 1; n <= nb; n += 4) {
            memset(y, 0xFF, sizeof(float) * (size_t)(n_out * n));
            run_matmul(&k.m, x, n, y, n % 3);
            for (int32_t b = 0; b < n; b++)
                for (int64_t o = 0; o < n_out; o++) {
                    double yq = 0, T = 0, E = 0;
                    const double *w = k.w + o * n_in, *a = xq + b * n_in;
                    for (int64_t i = 0; i < n_in; i++) {
                        yq += w[i] * a[i], T += fabs(w[i] * a[i]);
                        E += fabs(w[i]) * fabs((double)x[b * n_in + i] - a[i]);
                    }
                    const double got = y[b * n_out + o];
                    if (!(fabs(got - yq) <= 1e-5 * T + 1e-30) ||
                        !(fabs(got - scalar[b * n_out + o]) <= 2e-5 * T + 1e-30) ||
                        !(fabs(got - ref[b * n_out + o]) <= E * (1 + 1e-5) + 1e-5 * T + 1e-30))
                        fail_msg("%s%s %s n_in %lld row %lld batch %d/%d: %.9g, exact %.9g, "
                                 "scalar %.9g, ref %.9g (T %g, E %g)",
                                 what, level_name((nu_simd)l), nu_type_get(type)->name,
                                 (long long)n_in, (long long)o, b, n, got, yq,
                                 scalar[b * n_out + o], ref[b * n_out + o], T, E);
                }
        }
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
    free(x), free(xq), free(scalar), free(y), free(ref);
}

static void check_levels(uint32_t type, int64_t n_in, int64_t n_out, rng *r) {
    imatrix k = make_matrix(type, n_in, n_out, r);
    check_matrix(&k, r, "");
    free(k.data), free(k.w);
}

static void test_levels(void **state) {
    (void)state;
    rng r = {37};
    for (size_t t = 0; t < N_IQ; t++) {
        const int64_t unit = block_elems(iq_types[t]) == 256 ? 256 : 32;
        /* a partial group of blocks, whole groups, several super-blocks */
        const int64_t sizes[3] = {unit == 256 ? 256 : 96, 512, unit == 256 ? 2816 : 5632};
        for (int s = 0; s < 3; s++) check_levels(iq_types[t], sizes[s], 19, &r);
    }
}

/* Every IQ4_NL / IQ4_XS matrix of the files llama-quantize --pure wrote
 * from a tiny model (tests/arch/quantized: its own encoder's blocks) at
 * every level against the same references. */
static void check_file_matrix(const nu_gguf_tensor *g, const char *what, void *ctx) {
    const int64_t n_in = g->ne[0], n_out = g->ne[1];
    const size_t row_bytes = nu_type_row_bytes(g->type, (uint64_t)n_in);
    const size_t bytes = nu_type_get(g->type)->block_bytes;
    imatrix k;
    k.data = malloc(row_bytes * (size_t)n_out);
    k.w = malloc(sizeof(double) * (size_t)(n_in * n_out));
    assert_true(k.data && k.w);
    memcpy(k.data, g->data, row_bytes * (size_t)n_out);
    for (int64_t o = 0; o < n_out; o++)
        for (int64_t b = 0; b < n_in / block_elems(g->type); b++)
            decode_ref(g->type, k.data + row_bytes * (size_t)o + (size_t)b * bytes,
                       k.w + o * n_in + b * block_elems(g->type));
    k.m = (nu_matrix){
        .type = g->type, .n_in = n_in, .n_out = n_out, .data = k.data, .row_bytes = row_bytes};
    check_matrix(&k, ctx, what);
    free(k.data), free(k.w);
}

static void test_llama_quantize_files(void **state) {
    (void)state;
    rng r = {41};
    assert_true(nu_test_each_quantized_matrix("iq4_nl", NU_TYPE_IQ4_NL, check_file_matrix, &r) >=
                7);
    assert_true(nu_test_each_quantized_matrix("iq4_xs", NU_TYPE_IQ4_XS, check_file_matrix, &r) >=
                7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_made_blocks), cmocka_unit_test(test_decoders_agree),
        cmocka_unit_test(test_encoder_exact),    cmocka_unit_test(test_encoder_error),
        cmocka_unit_test(test_levels),           cmocka_unit_test(test_llama_quantize_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
