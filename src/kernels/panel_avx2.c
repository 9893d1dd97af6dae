/* panel_avx2.c - the Q4_0 and Q4_K panel kernels (see packed.c) for CPUs with
 * AVX2.
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
 * A batch runs each half of the panel (eight rows) as one pass over the
 * whole row: eight weight vectors and up to four activation rows' sums fit
 * the 16 registers. A single activation row (generation) runs both halves in
 * one pass, so each line is read once and the per-block loads serve both.
 * Integer sums are exact and the float operations per activation row and
 * half are the same sequence either way, so results do not depend on the
 * batch. The Q4_K kernel (below) works the same way per group of 32.
 */
#include <immintrin.h>

#include "kquant.h"

#define INLINE static inline __attribute__((always_inline))
#define PREFETCH_BYTES 4096 /* how far ahead in the panel to prefetch */
#define SUB 4               /* activation rows per pass */

/* Halves h0..h0+nh-1 (rows 8h..8h+7) of the Q4_0 panel at base against k
 * (<= SUB) activation rows from b0: one half per pass for a batch, both in
 * one pass for a single row (generation). */
INLINE void rows_q4_0(const nu_matmul_job *job, const uint8_t *base, int64_t panel, int h0, int nh,
                      int32_t b0, int k) {
    const size_t pair = nu_panel_pair_bytes(NU_TYPE_Q4_0), qb = nu_panel_quant_bytes(NU_TYPE_Q4_0);
    const int64_t pairs = nu_panel_pairs(job->W->n_in), n_pad = job->act_n_pad;
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const int8_t *xq[SUB];
    const float *xd[SUB], *xs[SUB];
    __m256 sum[2][SUB];
    for (int v = 0; v < k; v++) {
        const uint8_t *row = nu_job_act(job, b0 + v);
        xq[v] = nu_act_q(row);
        xd[v] = nu_act_d(row, n_pad);
        xs[v] = nu_act_s(row, n_pad);
        for (int h = 0; h < nh; h++) sum[h][v] = _mm256_setzero_ps();
    }
    for (int64_t p = 0; p < pairs; p++) {
        const uint8_t *slot = base + (size_t)p * pair;
        for (int hb = 0; hb < 2; hb++) {
            const int64_t kb = 2 * p + hb;
            /* the pass of half 0 brings in the block's lines (each holds
             * both halves): its scales and four quant lines */
            if (h0 == 0) {
                if (hb == 0) _mm_prefetch((const char *)(slot + PREFETCH_BYTES), _MM_HINT_T0);
                for (int l = 0; l < 4; l++)
                    _mm_prefetch(
                        (const char *)(slot + 64 + (size_t)hb * qb + PREFETCH_BYTES + 64 * l),
                        _MM_HINT_T0);
            }
            for (int h = h0; h < h0 + nh; h++) {
                const uint8_t *q = slot + 64 + (size_t)hb * qb + 32 * h;
                const __m256 dw = _mm256_cvtph_ps(
                    _mm_load_si128((const __m128i *)(const void *)(slot + 32 * hb + 16 * h)));
                const __m256 dw_off = _mm256_mul_ps(dw, _mm256_set1_ps(8.0f));
                __m256i w[8];
                for (int j = 0; j < 4; j++) {
                    const __m256i raw =
                        _mm256_load_si256((const __m256i *)(const void *)(q + 64 * j));
                    w[j] = _mm256_and_si256(raw, low);
                    w[j + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
                }
                for (int v = 0; v < k; v++) {
                    const uint8_t *x = (const uint8_t *)(xq[v] + kb * NU_QK);
                    /* vector j < 4: columns 4j..4j+3; j >= 4: 16 + 4(j-4).. */
                    __m256i acc =
                        _mm256_maddubs_epi16(w[0], _mm256_set1_epi32((int)nu_load_u32(x)));
                    for (int j = 1; j < 8; j++) {
                        const int col = j < 4 ? 4 * j : 16 + 4 * (j - 4);
                        acc = _mm256_add_epi16(
                            acc, _mm256_maddubs_epi16(
                                     w[j], _mm256_set1_epi32((int)nu_load_u32(x + col))));
                    }
                    const __m256i dot = _mm256_madd_epi16(acc, ones);
                    const __m256 dwa = _mm256_mul_ps(dw, _mm256_set1_ps(xd[v][kb]));
                    __m256 *s = &sum[h - h0][v];
                    *s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), dwa, *s);
                    *s = _mm256_fnmadd_ps(dw_off, _mm256_set1_ps(xs[v][kb]), *s);
                }
            }
        }
    }
    const int64_t n_out = job->W->n_out;
    for (int h = h0; h < h0 + nh; h++)
        for (int v = 0; v < k; v++)
            _mm256_storeu_ps(job->y + (size_t)(b0 + v) * (size_t)n_out +
                                 (size_t)panel * NU_PANEL_ROWS + 8 * (size_t)h,
                             sum[h - h0][v]);
}

/* Half h (rows 8h..8h+7) of a Q4_K panel against k (<= SUB) Q8_K activation
 * rows from b0. Per group g of 32 the eight rows' nibbles meet the
 * activations as in rows_q4_0, and vpmaddwd with the rows' six-bit scales
 * (each twice in its lane) adds sc_g * dot_g into int32 lanes: the
 * super-block's sum_g sc_g * dot_g is exact (at most 8 * 63 * 30480 * 2).
 * The mins meet the activations' 16-element sums the same way (each min
 * twice against the group's two sums). At the super-block's end:
 *   sum += float(isum) * (d_w * d_a) - float(msum) * (dmin_w * d_a). */
/* The byte shuffle that turns 16 rows' bytes (both 128-bit lanes) into
 * int16 pairs (b, b) of rows 8h..8h+7, one row per int32 lane. */
INLINE __m256i twice_pattern(int h) {
#define NU_TWICE(r) ((int)((unsigned)(8 * h + (r)) * 0x10001u | 0x80008000u))
    return _mm256_setr_epi32(NU_TWICE(0), NU_TWICE(1), NU_TWICE(2), NU_TWICE(3), NU_TWICE(4),
                             NU_TWICE(5), NU_TWICE(6), NU_TWICE(7));
#undef NU_TWICE
}

/* Halves h0..h0+nh-1 (rows 8h..8h+7) of a Q4_K panel against k (<= SUB)
 * Q8_K activation rows from b0: one half per pass for a batch, both halves
 * in one pass for a single row (generation: the scales' and activations'
 * loads then serve both, and the lines are read once). */
INLINE void rows_q4_k(const nu_matmul_job *job, const uint8_t *base, int64_t panel, int h0, int nh,
                      int32_t b0, int k) {
    const int64_t n_in = job->W->n_in, nsb = n_in / NU_QK_K;
    const __m256i low = _mm256_set1_epi8(0x0F);
    const int8_t *xq[SUB];
    const float *xd[SUB];
    const int16_t *xb[SUB];
    __m256 sum[2][SUB];
    for (int v = 0; v < k; v++) {
        const uint8_t *row = nu_job_act(job, b0 + v);
        xq[v] = nu_actk_q(row);
        xd[v] = nu_actk_d(row, n_in);
        xb[v] = nu_actk_bsums(row, n_in);
        for (int h = 0; h < nh; h++) sum[h][v] = _mm256_setzero_ps();
    }
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = base + (size_t)sb * NU_PANEL_Q4_K_BYTES;
        __m256i isum[2][SUB], msum[2][SUB];
        for (int h = 0; h < nh; h++)
            for (int v = 0; v < k; v++) isum[h][v] = msum[h][v] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            /* the pass of half 0 brings in the lines (each holds both
             * halves): the 320 bytes of scales with group 0, a chunk's
             * eight quant lines with its first group */
            if (h0 == 0 && g == 0)
                for (int l = 0; l < 5; l++)
                    _mm_prefetch((const char *)(blk + PREFETCH_BYTES + 64 * l), _MM_HINT_T0);
            if (h0 == 0 && g % 2 == 0)
                for (int l = 0; l < 8; l++)
                    _mm_prefetch((const char *)(blk + PREFETCH_BYTES + 320 + 256 * g + 64 * l),
                                 _MM_HINT_T0);
            const __m256i sc16 = _mm256_broadcastsi128_si256(
                _mm_load_si128((const __m128i *)(const void *)(blk + 64 + 16 * g)));
            const __m256i mn16 = _mm256_broadcastsi128_si256(
                _mm_load_si128((const __m128i *)(const void *)(blk + 192 + 16 * g)));
            for (int h = h0; h < h0 + nh; h++) {
                const uint8_t *q = blk + 320 + 512 * (g / 2) + 32 * h;
                __m256i w[8];
                for (int j = 0; j < 8; j++) {
                    const __m256i raw =
                        _mm256_load_si256((const __m256i *)(const void *)(q + 64 * j));
                    w[j] = _mm256_and_si256(g % 2 ? _mm256_srli_epi16(raw, 4) : raw, low);
                }
                const __m256i sc_twice = _mm256_shuffle_epi8(sc16, twice_pattern(h));
                const __m256i mn_twice = _mm256_shuffle_epi8(mn16, twice_pattern(h));
                for (int v = 0; v < k; v++) {
                    const uint8_t *x = (const uint8_t *)(xq[v] + sb * NU_QK_K + 32 * g);
                    __m256i acc =
                        _mm256_maddubs_epi16(w[0], _mm256_set1_epi32((int)nu_load_u32(x)));
                    for (int j = 1; j < 8; j++)
                        acc = _mm256_add_epi16(
                            acc, _mm256_maddubs_epi16(
                                     w[j], _mm256_set1_epi32((int)nu_load_u32(x + 4 * j))));
                    isum[h - h0][v] =
                        _mm256_add_epi32(isum[h - h0][v], _mm256_madd_epi16(acc, sc_twice));
                    msum[h - h0][v] = _mm256_add_epi32(
                        msum[h - h0][v],
                        _mm256_madd_epi16(mn_twice,
                                          _mm256_set1_epi32((int)nu_load_u32(
                                              (const uint8_t *)(xb[v] + sb * 16 + 2 * g)))));
                }
            }
        }
        for (int h = h0; h < h0 + nh; h++) {
            const __m256 dw =
                _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(blk + 16 * h)));
            const __m256 dmw =
                _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(blk + 32 + 16 * h)));
            for (int v = 0; v < k; v++) {
                const __m256 da = _mm256_set1_ps(xd[v][sb]);
                __m256 *s = &sum[h - h0][v];
                *s =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h - h0][v]), _mm256_mul_ps(dw, da), *s);
                *s = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[h - h0][v]), _mm256_mul_ps(dmw, da),
                                      *s);
            }
        }
    }
    const int64_t n_out = job->W->n_out;
    for (int h = h0; h < h0 + nh; h++)
        for (int v = 0; v < k; v++)
            _mm256_storeu_ps(job->y + (size_t)(b0 + v) * (size_t)n_out +
                                 (size_t)panel * NU_PANEL_ROWS + 8 * (size_t)h,
                             sum[h - h0][v]);
}

INLINE void panel_q4_k(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    const uint8_t *base = (const uint8_t *)job->W->packed +
                          (size_t)panel * nu_panel_bytes(NU_TYPE_Q4_K, job->W->n_in);
    if (k == 1) {
        rows_q4_k(job, base, panel, 0, 2, b0, 1);
        return;
    }
    rows_q4_k(job, base, panel, 0, 1, b0, k);
    rows_q4_k(job, base, panel, 1, 1, b0, k);
}

void nu_panel_q4_k_avx2(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    for (int done = 0; done < k; done += SUB) {
        switch (k - done) {
        case 1: panel_q4_k(job, panel, b0 + done, 1); break;
        case 2: panel_q4_k(job, panel, b0 + done, 2); break;
        case 3: panel_q4_k(job, panel, b0 + done, 3); break;
        default: panel_q4_k(job, panel, b0 + done, 4); break;
        }
    }
}

/* k (<= SUB) activation rows, both halves, the count a constant. */
INLINE void panel_q4_0(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    const uint8_t *base = (const uint8_t *)job->W->packed +
                          (size_t)panel * nu_panel_bytes(NU_TYPE_Q4_0, job->W->n_in);
    if (k == 1) {
        rows_q4_0(job, base, panel, 0, 2, b0, 1);
        return;
    }
    rows_q4_0(job, base, panel, 0, 1, b0, k);
    rows_q4_0(job, base, panel, 1, 1, b0, k);
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
