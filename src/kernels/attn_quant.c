/* attn_quant.c - attention over a quantised KV cache (Q8_0 or Q4_0 rows).
 *
 * Keys: each query head is quantised once into the 32-element activation
 * blocks (kernels_internal.h, llama.cpp's Q8_0: q = RNE(x * 127 / amax), the
 * scale rounded to f16), then every cached row's head slice is multiplied
 * block by block in integers, as a matrix of those weights would be:
 *   score = sum over blocks of (d_k * d_q) * sum(qk * qq)      (Q8_0)
 *         = sum over blocks of (d_k * d_q) * sum((qk - 8) * qq) (Q4_0)
 * Values: each row's head slice is dequantised (nu_dequantize_row) and added
 * with its weight by the level's float multiply-add, so a value's arithmetic
 * is that of an f32 cache holding the dequantised row.
 * The integer sums are exact and the float steps run in block order per
 * head, so a head's result does not depend on which heads it is grouped
 * with, nor on the level (the activation quantisers agree bit for bit).
 * These loops are the scalar level's; the AVX2 and AVX-512 levels
 * (attn_quant_x86.h, attn_quant_avx2.c, attn_quant_avx512.c, through the
 * kernel set's quant_dots_rows / quant_mads_rows) perform the same float
 * operations in the same order, so their scores are bit-identical to these
 * and their value sums to this file's dequantise-then-mads at their level
 * (test_kernels checks both). */
#include "kquant.h"

/* Exact dot of one Q8_0 or Q4_0 block with 32 int8 activations. */
static int32_t block_dot(uint32_t type, const uint8_t *blk, const int8_t *a) {
    int32_t sum = 0;
    if (type == NU_TYPE_Q8_0) {
        const int8_t *w = (const int8_t *)(blk + 2);
        for (int j = 0; j < NU_QK; j++) sum += (int32_t)w[j] * a[j];
    } else {
        const uint8_t *qs = blk + 2;
        for (int j = 0; j < 16; j++)
            sum += ((qs[j] & 15) - 8) * a[j] + ((qs[j] >> 4) - 8) * a[j + 16];
    }
    return sum;
}

void nu_quant_dots_rows(uint32_t type, const float *const *q, int k, const void *base,
                        size_t stride, const int32_t *cells, int64_t n_rows, int64_t n, float *out,
                        size_t out_stride) {
    const nu_kernel_set *ks = nu_kernels_current();
    const size_t bytes = nu_type_get(type)->block_bytes;
    const int64_t nb = n / NU_QK, n_pad = nu_act_n_pad(n);
    _Alignas(64) uint8_t act[4][NU_ATTN_QUANT_MAX + NU_ATTN_QUANT_MAX / NU_QK * 12 + 64];
    for (int v = 0; v < k; v++) ks->quantize_act(q[v], n, act[v]);
    for (int64_t j = 0; j < n_rows; j++) {
        const uint8_t *row = (const uint8_t *)base + (size_t)cells[j] * stride;
        if (j + 8 < n_rows) /* rows are scattered: ask for a later one early */
            for (size_t off = 0; off < (size_t)nb * bytes; off += 64)
                __builtin_prefetch((const char *)base + (size_t)cells[j + 8] * stride + off);
        for (int v = 0; v < k; v++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = row + (size_t)b * bytes;
                const float d = nu_half_to_float(nu_load_u16(blk)) * nu_act_d(act[v], n_pad)[b];
                acc += d * (float)block_dot(type, blk, nu_act_q(act[v]) + b * NU_QK);
            }
            out[(size_t)v * out_stride + (size_t)j] = acc;
        }
    }
}

void nu_quant_mads_rows(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                        const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                        int64_t n) {
    const nu_kernel_set *ks = nu_kernels_current();
    _Alignas(64) float row[NU_ATTN_QUANT_MAX];
    for (int64_t j = 0; j < n_rows; j++) {
        nu_dequantize_row(type, (const uint8_t *)base + (size_t)cells[j] * stride, row, n);
        float w[4];
        for (int v = 0; v < k; v++) w[v] = a[(size_t)v * a_stride + (size_t)j];
        ks->mads(NU_TYPE_F32, y, w, k, row, n);
    }
}
