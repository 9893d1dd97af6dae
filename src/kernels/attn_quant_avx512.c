/* attn_quant_avx512.c - attention over a Q8_0 / Q4_0 cache at the AVX-512
 * level. Keys: attn_quant_x86.h (VNNI integer block dots). Values: each
 * block is dequantised in registers (q * d, or (u - 8) * d: exact products,
 * as nu_dequantize_row computes them) and added with its weight by one
 * fused multiply-add per lane, as the level's float mads does for an f32
 * row: the same operations in the same order as attn_quant.c's dequantise-
 * then-mads path, so the results are bit-identical to it, without the row's
 * round trip through memory and with 64 columns of every head kept in
 * registers over all rows. */
#include "attn_quant_x86.h"

/* Columns [32 * b0, 32 * (b0 + NB)) (NB blocks, 1 or 2) of K heads. */
AQ_INLINE void mads_chunk(uint32_t type, int K, int NB, float *const *y, const float *a,
                          size_t a_stride, const uint8_t *base, size_t stride, const int32_t *cells,
                          int64_t n_rows, int64_t b0) {
    const size_t bytes = type == NU_TYPE_Q4_0 ? NU_Q4_0_BYTES : NU_Q8_0_BYTES;
    const size_t at = (size_t)b0 * bytes;
    __m512 acc[4][4];
    for (int v = 0; v < K; v++)
        for (int c = 0; c < 2 * NB; c++) acc[v][c] = _mm512_loadu_ps(y[v] + 32 * b0 + 16 * c);
    for (int64_t j = 0; j < n_rows; j++) {
        const uint8_t *row = base + (size_t)cells[j] * stride + at;
        if (j + 16 < n_rows) /* the rows are scattered: ask for a later one early */
            for (size_t off = 0; off < NB * bytes; off += 64)
                _mm_prefetch((const char *)base + (size_t)cells[j + 16] * stride + at + off,
                             _MM_HINT_T0);
        for (int c = 0; c < NB; c++) {
            const uint8_t *blk = row + (size_t)c * bytes;
            const __m512 d = _mm512_broadcastss_ps(nu_half_at(blk));
            __m512 x[2];
            if (type == NU_TYPE_Q4_0) {
                const __m512i u =
                    _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(blk + 2)));
                const __m512i eight = _mm512_set1_epi32(8);
                x[0] = _mm512_cvtepi32_ps(
                    _mm512_sub_epi32(_mm512_and_si512(u, _mm512_set1_epi32(15)), eight));
                x[1] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(u, 4), eight));
            } else {
                for (int h = 0; h < 2; h++)
                    x[h] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                        _mm_loadu_si128((const __m128i *)(const void *)(blk + 2 + 16 * h))));
            }
            for (int h = 0; h < 2; h++) {
                const __m512 xv = _mm512_mul_ps(x[h], d);
                for (int v = 0; v < K; v++)
                    acc[v][2 * c + h] = _mm512_fmadd_ps(
                        _mm512_set1_ps(a[(size_t)v * a_stride + (size_t)j]), xv, acc[v][2 * c + h]);
            }
        }
    }
    for (int v = 0; v < K; v++)
        for (int c = 0; c < 2 * NB; c++) _mm512_storeu_ps(y[v] + 32 * b0 + 16 * c, acc[v][c]);
}

void nu_quant_mads_rows_avx512(uint32_t type, float *const *y, const float *a, size_t a_stride,
                               int k, const void *base, size_t stride, const int32_t *cells,
                               int64_t n_rows, int64_t n) {
    const int64_t nb = n / NU_QK;
    for (int64_t b0 = 0; b0 < nb; b0 += 2) {
#define AQ_CHUNK2(T, K) mads_chunk(T, K, 2, y, a, a_stride, base, stride, cells, n_rows, b0)
#define AQ_CHUNK1(T, K) mads_chunk(T, K, 1, y, a, a_stride, base, stride, cells, n_rows, b0)
        if (nb - b0 >= 2) {
            AQ_SWITCH(type, k, AQ_CHUNK2)
        } else {
            AQ_SWITCH(type, k, AQ_CHUNK1)
        }
#undef AQ_CHUNK1
#undef AQ_CHUNK2
    }
}

void nu_quant_dots_rows_avx512(uint32_t type, const float *const *q, int k, const void *base,
                               size_t stride, const int32_t *cells, int64_t n_rows, int64_t n,
                               float *out, size_t out_stride) {
    aq_dots_rows(type, q, k, base, stride, cells, n_rows, n, out, out_stride);
}
