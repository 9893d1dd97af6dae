/* attn_quant_avx2.c - attention over a Q8_0 / Q4_0 cache at the AVX2 level.
 * Keys: attn_quant_x86.h. Values: each block dequantised in registers (q * d,
 * or (u - 8) * d: exact products, as nu_dequantize_row computes them) and
 * added with its weight by one fused multiply-add per lane, as the level's
 * float mads does for an f32 row: the same operations in the same order as
 * attn_quant.c's dequantise-then-mads path, so the results are bit-identical
 * to it, without the row's round trip through memory and with a chunk of
 * columns of every head kept in registers over all rows (32 columns for up
 * to two heads, 16 for three or four: sixteen registers). */
#include "attn_quant_x86.h"

/* Columns [i0, i0 + 8 * NV) (NV = 2 or 4, within one block) of K heads. */
AQ_INLINE void mads_chunk(uint32_t type, int K, int NV, float *const *y, const float *a,
                          size_t a_stride, const uint8_t *base, size_t stride, const int32_t *cells,
                          int64_t n_rows, int64_t i0) {
    const size_t bytes = type == NU_TYPE_Q4_0 ? NU_Q4_0_BYTES : NU_Q8_0_BYTES;
    const size_t at = (size_t)(i0 / NU_QK) * bytes;
    const int e0 = (int)(i0 % NU_QK); /* the chunk's first element in its block */
    __m256 acc[4][4];
    for (int v = 0; v < K; v++)
        for (int c = 0; c < NV; c++) acc[v][c] = _mm256_loadu_ps(y[v] + i0 + 8 * c);
    for (int64_t j = 0; j < n_rows; j++) {
        const uint8_t *blk = base + (size_t)cells[j] * stride + at;
        if (j + 16 < n_rows) /* the rows are scattered: ask for a later one early */
            _mm_prefetch((const char *)base + (size_t)cells[j + 16] * stride + at, _MM_HINT_T0);
        const __m256 d = _mm256_broadcastss_ps(nu_half_at(blk));
        for (int c = 0; c < NV; c++) {
            const int e = e0 + 8 * c;
            __m256i qi;
            if (type == NU_TYPE_Q4_0) {
                __m128i u = _mm_loadl_epi64((const __m128i *)(const void *)(blk + 2 + (e & 15)));
                if (e >= 16) u = _mm_srli_epi16(u, 4);
                qi = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_and_si128(u, _mm_set1_epi8(15))),
                                      _mm256_set1_epi32(8));
            } else {
                qi = _mm256_cvtepi8_epi32(
                    _mm_loadl_epi64((const __m128i *)(const void *)(blk + 2 + e)));
            }
            const __m256 xv = _mm256_mul_ps(_mm256_cvtepi32_ps(qi), d);
            for (int v = 0; v < K; v++)
                acc[v][c] = _mm256_fmadd_ps(_mm256_set1_ps(a[(size_t)v * a_stride + (size_t)j]), xv,
                                            acc[v][c]);
        }
    }
    for (int v = 0; v < K; v++)
        for (int c = 0; c < NV; c++) _mm256_storeu_ps(y[v] + i0 + 8 * c, acc[v][c]);
}

void nu_quant_mads_rows_avx2(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                             const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                             int64_t n) {
    const int64_t w = k <= 2 ? 32 : 16;
    for (int64_t i0 = 0; i0 < n; i0 += w) {
#define AQ_CHUNK(T, K)                                                                             \
    mads_chunk(T, K, (K) <= 2 ? 4 : 2, y, a, a_stride, base, stride, cells, n_rows, i0)
        AQ_SWITCH(type, k, AQ_CHUNK)
#undef AQ_CHUNK
    }
}

void nu_quant_dots_rows_avx2(uint32_t type, const float *const *q, int k, const void *base,
                             size_t stride, const int32_t *cells, int64_t n_rows, int64_t n,
                             float *out, size_t out_stride) {
    aq_dots_rows(type, q, k, base, stride, cells, n_rows, n, out, out_stride);
}
