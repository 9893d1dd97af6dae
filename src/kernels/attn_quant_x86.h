/* attn_quant_x86.h - the key side of attention over a Q8_0 / Q4_0 cache
 * (nu_vec_dots_rows) for the AVX2 and AVX-512 levels; included by
 * attn_quant_avx2.c and attn_quant_avx512.c, each compiling it for its ISA.
 *
 * The arithmetic is that of attn_quant.c's scalar loop, so every level's
 * scores are bit-identical to it: per row and head, over the blocks b in
 * order, acc += (d_k[b] * d_q[b]) * (float)isum[b], with isum the exact
 * integer dot of the block's quants with the query's int8 block. Only how
 * the integer sums are formed differs (any order gives the same integer):
 * eight rows are taken at a time, one row per lane, so the float steps run
 * as eight-lane vectors in exactly the scalar order.
 *   isum, AVX2:    Q8_0 by the sign trick (|k| * (q * sign k), maddubs never
 *                  saturates: |k| <= 128, |q| <= 127); Q4_0 as sum(u * q) -
 *                  8 * sum(q) with u the unsigned nibble.
 *   isum, VNNI:    vpdpbusd of the unsigned key (Q8_0: k + 128, Q4_0: u)
 *                  with q, minus 128 * sum(q) or 8 * sum(q). */
#ifndef NU_ATTN_QUANT_X86_H
#define NU_ATTN_QUANT_X86_H

#include "simd_x86.h"

#define AQ_INLINE static inline __attribute__((always_inline))
#define AQ_ROWS 8 /* rows (lanes) per group */

/* Runs CALL(T, K) with the cache type (NU_TYPE_Q8_0 or NU_TYPE_Q4_0) and the
 * head count k (1..4) as the compile-time constants T and K. */
#define AQ_SWITCH(type, k, CALL)                                                                   \
    switch ((k) + 4 * ((type) == NU_TYPE_Q4_0)) {                                                  \
    case 1: CALL(NU_TYPE_Q8_0, 1); break;                                                          \
    case 2: CALL(NU_TYPE_Q8_0, 2); break;                                                          \
    case 3: CALL(NU_TYPE_Q8_0, 3); break;                                                          \
    case 4: CALL(NU_TYPE_Q8_0, 4); break;                                                          \
    case 5: CALL(NU_TYPE_Q4_0, 1); break;                                                          \
    case 6: CALL(NU_TYPE_Q4_0, 2); break;                                                          \
    case 7: CALL(NU_TYPE_Q4_0, 3); break;                                                          \
    default: CALL(NU_TYPE_Q4_0, 4); break;                                                         \
    }

/* Eight int32 partial sums of one block of a row with 32 query int8 whose
 * total is the block dot plus offset * sum(q) (aq_offset below). */
AQ_INLINE __m256i aq_block_dot(uint32_t type, const uint8_t *blk, __m256i q) {
    __m256i u;
    if (type == NU_TYPE_Q4_0) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2));
        u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(15));
    } else {
        const __m256i k = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
#ifdef __AVX512VNNI__
        u = _mm256_xor_si256(k, _mm256_set1_epi8((char)0x80));
#else
        return _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(k, k), _mm256_sign_epi8(q, k)),
            _mm256_set1_epi16(1));
#endif
    }
#ifdef __AVX512VNNI__
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, q);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
#endif
}

/* What aq_block_dot adds per unit of sum(q). */
AQ_INLINE int32_t aq_offset(uint32_t type) {
#ifdef __AVX512VNNI__
    return type == NU_TYPE_Q4_0 ? 8 : 128;
#else
    return type == NU_TYPE_Q4_0 ? 8 : 0;
#endif
}

/* Lane r: the sum of the eight lanes of x[r]. */
AQ_INLINE __m256i aq_reduce8(const __m256i x[8]) {
    const __m256i a0 = _mm256_hadd_epi32(x[0], x[1]), a1 = _mm256_hadd_epi32(x[2], x[3]);
    const __m256i a2 = _mm256_hadd_epi32(x[4], x[5]), a3 = _mm256_hadd_epi32(x[6], x[7]);
    const __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);
    /* b0: rows 0-3 of the low halves, then rows 0-3 of the high halves */
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20),
                            _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* Scores of K heads (quantised activations act[v], nb blocks) for rows
 * j0 .. j0 + 7 (those at or past n_rows repeat the last row and are not
 * stored). */
AQ_INLINE void aq_dots_group(uint32_t type, int K, const uint8_t *const *act, int64_t n_pad,
                             const int32_t *qsum, const uint8_t *base, size_t stride,
                             const int32_t *cells, int64_t j0, int64_t n_rows, int64_t nb,
                             float *out, size_t out_stride) {
    const size_t bytes = type == NU_TYPE_Q4_0 ? NU_Q4_0_BYTES : NU_Q8_0_BYTES;
    const uint8_t *rp[AQ_ROWS];
    for (int r = 0; r < AQ_ROWS; r++)
        rp[r] = base + (size_t)cells[j0 + r < n_rows ? j0 + r : n_rows - 1] * stride;
    for (int r = 0; r < AQ_ROWS; r++) /* rows are scattered: ask for the next group early */
        if (j0 + AQ_ROWS + r < n_rows)
            for (size_t off = 0; off < (size_t)nb * bytes; off += 64)
                _mm_prefetch((const char *)base + (size_t)cells[j0 + AQ_ROWS + r] * stride + off,
                             _MM_HINT_T0);
    _Alignas(16) uint16_t dkh[NU_ATTN_QUANT_MAX / NU_QK][AQ_ROWS];
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < AQ_ROWS; r++) dkh[b][r] = nu_load_u16(rp[r] + (size_t)b * bytes);
    const __m256i off = _mm256_set1_epi32(aq_offset(type));
    const int64_t left = n_rows - j0;
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(left < AQ_ROWS ? (int)left : AQ_ROWS),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int v = 0; v < K; v++) {
        const int8_t *aq = nu_act_q(act[v]);
        const float *dq = nu_act_d(act[v], n_pad);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const __m256i qv = _mm256_load_si256((const __m256i *)(const void *)(aq + b * NU_QK));
            __m256i x[AQ_ROWS];
            for (int r = 0; r < AQ_ROWS; r++)
                x[r] = aq_block_dot(type, rp[r] + (size_t)b * bytes, qv);
            const __m256i isum = _mm256_sub_epi32(
                aq_reduce8(x), _mm256_mullo_epi32(off, _mm256_set1_epi32(qsum[v * nb + b])));
            const __m256 d = _mm256_mul_ps(
                _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)dkh[b])),
                _mm256_set1_ps(dq[b]));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
        }
        float *o = out + (size_t)v * out_stride + (size_t)j0;
        if (left >= AQ_ROWS)
            _mm256_storeu_ps(o, acc);
        else
            _mm256_maskstore_ps(o, keep, acc);
    }
}

/* nu_vec_dots_rows for Q8_0 / Q4_0 rows (see attn_quant.c for the
 * contract): the queries quantised by the level, then groups of 8 rows. */
AQ_INLINE void aq_dots_rows(uint32_t type, const float *const *q, int k, const void *base,
                            size_t stride, const int32_t *cells, int64_t n_rows, int64_t n,
                            float *out, size_t out_stride) {
    const nu_kernel_set *ks = nu_kernels_current();
    const int64_t nb = n / NU_QK, n_pad = nu_act_n_pad(n);
    _Alignas(64) uint8_t act[4][NU_ATTN_QUANT_MAX + NU_ATTN_QUANT_MAX / NU_QK * 12 + 64];
    const uint8_t *ap[4] = {act[0], act[1], act[2], act[3]};
    int32_t qsum[4 * (NU_ATTN_QUANT_MAX / NU_QK)];
    for (int v = 0; v < k; v++) {
        ks->quantize_act(q[v], n, act[v]);
        for (int64_t b = 0; b < nb; b++) {
            int32_t s = 0;
            for (int i = 0; i < NU_QK; i++) s += nu_act_q(act[v])[b * NU_QK + i];
            qsum[v * nb + b] = s;
        }
    }
    const uint8_t *rows = (const uint8_t *)base;
    for (int64_t j0 = 0; j0 < n_rows; j0 += AQ_ROWS) {
#define AQ_GROUP(T, K)                                                                             \
    aq_dots_group(T, K, ap, n_pad, qsum, rows, stride, cells, j0, n_rows, nb, out, out_stride)
        AQ_SWITCH(type, k, AQ_GROUP)
#undef AQ_GROUP
    }
}

#endif
