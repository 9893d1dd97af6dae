/* panel_avx2.c - the Q4_0 panel kernel (see packed.c) for CPUs with AVX2.
 *
 * A panel vector of 64 bytes holds four bytes of each of the 16 rows; its
 * lower 32 bytes are rows 0..7, its upper 32 rows 8..15, so one 256-bit load
 * gives eight rows' four bytes, and its low and high nibbles are columns
 * 4j..4j+3 and 16+4j..16+4j+3 of the block. With no integer dot-product
 * instruction, vpmaddubsw multiplies each nibble byte with the matching
 * activation byte (the four broadcast to every row) and adds neighbours into
 * int16; a block's eight such vectors add up in int16 (at most
 * 8 * 2 * 15 * 127 = 30480, so no wrap), and one vpmaddwd with ones leaves
 * each row's integer block dot in its own int32 lane: 17 instructions for
 * eight rows, where the row kernels spend six per row. Then, per activation
 * row, as at the AVX-512 level:
 *   sum += float(dot) * (d_w * d_a)      (8 row scales times d_a)
 *   sum -= (8 * d_w) * (d_a * sum(q_a))  (the stored offset)
 * The eight rows of each half of the panel are one pass over the whole row
 * (eight weight vectors, up to four activation rows' sums: the 16 registers
 * hold them). Integer sums are exact and the float operations per activation
 * row are the same sequence for any batch, so results do not depend on it.
 */
#include <immintrin.h>

#include "kquant.h"

#define INLINE static inline __attribute__((always_inline))
#define PREFETCH_BYTES 4096 /* how far ahead in the panel to prefetch */
#define SUB 4               /* activation rows per pass */

/* Half h (rows 8h..8h+7) of the panel starting at base, k (<= SUB)
 * activation rows from b0. */
INLINE void half_q4_0(const nu_matmul_job *job, const uint8_t *base, int64_t panel, int h,
                      int32_t b0, int k) {
    const size_t pair = nu_panel_pair_bytes(NU_TYPE_Q4_0), qb = nu_panel_quant_bytes(NU_TYPE_Q4_0);
    const int64_t pairs = nu_panel_pairs(job->W->n_in), n_pad = job->act_n_pad;
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const int8_t *xq[SUB];
    const float *xd[SUB], *xs[SUB];
    __m256 sum[SUB];
    for (int v = 0; v < k; v++) {
        const uint8_t *row = nu_job_act(job, b0 + v);
        xq[v] = nu_act_q(row);
        xd[v] = nu_act_d(row, n_pad);
        xs[v] = nu_act_s(row, n_pad);
        sum[v] = _mm256_setzero_ps();
    }
    for (int64_t p = 0; p < pairs; p++) {
        const uint8_t *slot = base + (size_t)p * pair;
        for (int hb = 0; hb < 2; hb++) {
            const int64_t kb = 2 * p + hb;
            const uint8_t *q = slot + 64 + (size_t)hb * qb + 32 * h;
            /* this half's 128 bytes of the block: one line in two, the
             * other half's pass reads the rest */
            _mm_prefetch((const char *)(q + PREFETCH_BYTES), _MM_HINT_T0);
            _mm_prefetch((const char *)(q + PREFETCH_BYTES + 128), _MM_HINT_T0);
            const __m256 dw = _mm256_cvtph_ps(
                _mm_load_si128((const __m128i *)(const void *)(slot + 32 * hb + 16 * h)));
            const __m256 dw_off = _mm256_mul_ps(dw, _mm256_set1_ps(8.0f));
            __m256i w[8];
            for (int j = 0; j < 4; j++) {
                const __m256i raw = _mm256_load_si256((const __m256i *)(const void *)(q + 64 * j));
                w[j] = _mm256_and_si256(raw, low);
                w[j + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
            }
            for (int v = 0; v < k; v++) {
                const int8_t *x = xq[v] + kb * NU_QK;
                /* vector j < 4: columns 4j..4j+3; j >= 4: 16 + 4(j-4).. */
                __m256i acc = _mm256_maddubs_epi16(
                    w[0], _mm256_set1_epi32((int)nu_load_u32((const uint8_t *)x)));
                for (int j = 1; j < 8; j++) {
                    const int col = j < 4 ? 4 * j : 16 + 4 * (j - 4);
                    acc = _mm256_add_epi16(
                        acc, _mm256_maddubs_epi16(w[j], _mm256_set1_epi32((int)nu_load_u32(
                                                            (const uint8_t *)x + col))));
                }
                const __m256i dot = _mm256_madd_epi16(acc, ones);
                const __m256 dwa = _mm256_mul_ps(dw, _mm256_set1_ps(xd[v][kb]));
                sum[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), dwa, sum[v]);
                sum[v] = _mm256_fnmadd_ps(dw_off, _mm256_set1_ps(xs[v][kb]), sum[v]);
            }
        }
    }
    const int64_t n_out = job->W->n_out;
    for (int v = 0; v < k; v++)
        _mm256_storeu_ps(job->y + (size_t)(b0 + v) * (size_t)n_out + (size_t)panel * NU_PANEL_ROWS +
                             8 * (size_t)h,
                         sum[v]);
}

/* k (<= SUB) activation rows, both halves, the count a constant. */
INLINE void panel_q4_0(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    const uint8_t *base = (const uint8_t *)job->W->packed +
                          (size_t)panel * nu_panel_bytes(NU_TYPE_Q4_0, job->W->n_in);
    half_q4_0(job, base, panel, 0, b0, k);
    half_q4_0(job, base, panel, 1, b0, k);
}

void nu_panel_q4_0_avx2(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    for (int done = 0; done < k; done += SUB) {
        switch (k - done) {
        case 1: panel_q4_0(job, panel, b0 + done, 1); break;
        case 2: panel_q4_0(job, panel, b0 + done, 2); break;
        case 3: panel_q4_0(job, panel, b0 + done, 3); break;
        default: panel_q4_0(job, panel, b0 + done, 4); break;
        }
    }
}
