/* panel_avx2.c - the Q4_0, Q4_K, Q5_K and Q6_K panel kernels (see packed.c)
 * for CPUs with AVX2.
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
 * batch. The Q4_K kernel (below) works the same way per group of 32, Q5_K
 * with five bits a byte, Q6_K per group of 16 (six bits a byte).
 */
#include <immintrin.h>

#include "kquant.h"

#define INLINE static inline __attribute__((always_inline))
#define PREFETCH_BYTES 4096 /* how far ahead in the panel to prefetch */
#define SUB 4               /* activation rows per pass */

/* Writes the panel's outputs of halves h0..h0+nh-1 for k activation rows. */
INLINE void store_halves(const nu_matmul_job *job, int64_t panel, int h0, int nh, int32_t b0, int k,
                         __m256 sum[2][SUB]) {
    const int64_t n_out = job->W->n_out;
    for (int h = h0; h < h0 + nh; h++)
        for (int v = 0; v < k; v++)
            _mm256_storeu_ps(job->y + (size_t)(b0 + v) * (size_t)n_out +
                                 (size_t)panel * NU_PANEL_ROWS + 8 * (size_t)h,
                             sum[h - h0][v]);
}

/* The Q8_K activation rows b0..b0+k-1 of a K panel pass (quants, scales,
 * 16-element sums) and their sums of nh halves, zeroed. */
typedef struct k_acts {
    const int8_t *q[SUB];
    const float *d[SUB];
    const int16_t *bsums[SUB];
    __m256 sum[2][SUB];
} k_acts;

INLINE void k_act_rows(const nu_matmul_job *job, int32_t b0, int k, int nh, k_acts *a) {
    const int64_t n_in = job->W->n_in;
    for (int v = 0; v < k; v++) {
        const uint8_t *row = nu_job_act(job, b0 + v);
        a->q[v] = nu_actk_q(row);
        a->d[v] = nu_actk_d(row, n_in);
        a->bsums[v] = nu_actk_bsums(row, n_in);
        for (int h = 0; h < nh; h++) a->sum[h][v] = _mm256_setzero_ps();
    }
}

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
    store_halves(job, panel, h0, nh, b0, k, sum);
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

/* Quant vector j (elements 32g + 4j + b) of group g of half h of a Q4_K or
 * Q5_K panel super-block, as unsigned bytes; loads what it needs (repeated
 * loads of a group's vectors are the compiler's to merge). */
INLINE __m256i q45_vector(uint32_t type, const uint8_t *blk, int g, int h, int j) {
    if (type == NU_TYPE_Q4_K) {
        const __m256i raw = _mm256_load_si256(
            (const __m256i *)(const void *)(blk + 320 + 512 * (g / 2) + 32 * h + 64 * j));
        return _mm256_and_si256(g % 2 ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0F));
    }
    /* Q5_K: five vectors' low five bits; their top three bits make the last
     * three (kernels_internal.h) */
    const uint8_t *q = blk + 320 + 320 * g + 32 * h;
#define NU_U(i) _mm256_load_si256((const __m256i *)(const void *)(q + 64 * (i)))
#define NU_BITS(i, shift, mask)                                                                    \
    _mm256_and_si256(_mm256_srli_epi16(NU_U(i), shift), _mm256_set1_epi8(mask))
    __m256i w;
    switch (j) {
    case 5: w = _mm256_or_si256(NU_BITS(0, 5, 0x07), NU_BITS(1, 2, 0x18)); break;
    case 6:
        w = _mm256_or_si256(_mm256_or_si256(NU_BITS(1, 7, 0x01), NU_BITS(2, 4, 0x0E)),
                            NU_BITS(3, 1, 0x10));
        break;
    case 7: w = _mm256_or_si256(NU_BITS(3, 6, 0x03), NU_BITS(4, 3, 0x1C)); break;
    default: w = _mm256_and_si256(NU_U(j), _mm256_set1_epi8(0x1F)); break;
    }
#undef NU_BITS
#undef NU_U
    return w;
}

/* Prefetches, PREFETCH_BYTES ahead, the lines group g of a Q4_K or Q5_K
 * panel super-block starts to need: the 320 bytes of scales with group 0,
 * then Q5_K's five lines per group or Q4_K's eight per two groups. */
INLINE void prefetch_q45_group(uint32_t type, const uint8_t *blk, int g) {
    const uint8_t *ahead = blk + PREFETCH_BYTES;
    if (g == 0)
        for (int l = 0; l < 5; l++) _mm_prefetch((const char *)(ahead + 64 * l), _MM_HINT_T0);
    if (type == NU_TYPE_Q5_K)
        for (int l = 0; l < 5; l++)
            _mm_prefetch((const char *)(ahead + 320 + 320 * g + 64 * l), _MM_HINT_T0);
    else if (g % 2 == 0)
        for (int l = 0; l < 8; l++)
            _mm_prefetch((const char *)(ahead + 320 + 256 * g + 64 * l), _MM_HINT_T0);
}

/* sum += float(isum) * (d_w * d_a) - float(msum) * (dmin_w * d_a) for half h
 * of a Q4_K or Q5_K panel super-block. */
INLINE __m256 add_q45_superblock(const uint8_t *blk, int h, __m256i isum, __m256i msum, float d_a,
                                 __m256 sum) {
    const __m256 da = _mm256_set1_ps(d_a);
    const __m256 dw =
        _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(blk + 16 * h)));
    const __m256 dmw =
        _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(blk + 32 + 16 * h)));
    sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, da), sum);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmw, da), sum);
}

/* Half h (rows 8h..8h+7) of a Q4_K or Q5_K panel against k (<= SUB) Q8_K
 * activation rows from b0 (a batch: the half's eight weight vectors and the
 * k rows' sums fit the 16 registers; one row goes through one_q45_k). The
 * pass of half 0 prefetches the lines, which hold both halves. */
INLINE void rows_q45_k(uint32_t type, const nu_matmul_job *job, const uint8_t *base, int64_t panel,
                       int h, int32_t b0, int k) {
    const int q5 = type == NU_TYPE_Q5_K;
    const size_t sb_bytes = nu_panel_bytes(type, NU_QK_K);
    const int64_t nsb = job->W->n_in / NU_QK_K;
    k_acts a;
    k_act_rows(job, b0, k, 1, &a);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = base + (size_t)sb * sb_bytes;
        __m256i isum[SUB], msum[SUB];
        for (int v = 0; v < k; v++) isum[v] = msum[v] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            if (h == 0) prefetch_q45_group(type, blk, g);
            __m256i w[8]; /* elements 32g + 4j + b of the rows */
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) w[j] = q45_vector(type, blk, g, h, j);
            const __m256i sc_twice =
                _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(
                                        (const __m128i *)(const void *)(blk + 64 + 16 * g))),
                                    twice_pattern(h));
            const __m256i mn_twice =
                _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(
                                        (const __m128i *)(const void *)(blk + 192 + 16 * g))),
                                    twice_pattern(h));
            for (int v = 0; v < k; v++) {
                const uint8_t *x = (const uint8_t *)(a.q[v] + sb * NU_QK_K + 32 * g);
                /* Q5_K's pair sums (at most 2 * 31 * 127) add up four at a time */
                __m256i acc = _mm256_maddubs_epi16(w[0], _mm256_set1_epi32((int)nu_load_u32(x)));
#pragma GCC unroll 8
                for (int j = 1; j < 8; j++) {
                    if (q5 && j == 4) {
                        isum[v] = _mm256_add_epi32(isum[v], _mm256_madd_epi16(acc, sc_twice));
                        acc = _mm256_setzero_si256();
                    }
                    acc = _mm256_add_epi16(
                        acc,
                        _mm256_maddubs_epi16(w[j], _mm256_set1_epi32((int)nu_load_u32(x + 4 * j))));
                }
                isum[v] = _mm256_add_epi32(isum[v], _mm256_madd_epi16(acc, sc_twice));
                msum[v] = _mm256_add_epi32(
                    msum[v], _mm256_madd_epi16(
                                 mn_twice, _mm256_set1_epi32((int)nu_load_u32(
                                               (const uint8_t *)(a.bsums[v] + sb * 16 + 2 * g)))));
            }
        }
        for (int v = 0; v < k; v++)
            a.sum[0][v] = add_q45_superblock(blk, h, isum[v], msum[v], a.d[v][sb], a.sum[0][v]);
    }
    store_halves(job, panel, h, 1, b0, k, a.sum);
}

/* Halves h0..h0+nh-1 (rows 8h..8h+7) of a Q6_K panel against k (<= SUB)
 * Q8_K activation rows from b0. A group's three vectors give its first
 * three quant vectors by masking the low six bits (unsigned q + 32) and its
 * fourth from their top two bits; vpmaddubsw pair sums (at most
 * 2 * 63 * 127) add up two at a time in int16 and vpmaddwd with the rows'
 * group scale (sign-extended, twice in each lane) adds sc_g * dot_g into
 * int32 lanes. The offset's share sum_g sc_g * bsum_g is one vpmaddwd per
 * two groups: (sc_g, sc_g+1) of each row against the activations' two
 * 16-element sums. At the super-block's end
 *   sum += float(isum - 32 * osum) * (d_w * d_a),
 * exact integers up to the one conversion, as the row kernels have them. */
INLINE void rows_q6_k(const nu_matmul_job *job, const uint8_t *base, int64_t panel, int h0, int nh,
                      int32_t b0, int k) {
    const int64_t n_in = job->W->n_in, nsb = n_in / NU_QK_K;
    const __m256i six = _mm256_set1_epi8(0x3F);
    /* int16 word 0 (1) of each int32 lane twice (byte indices within a
     * 128-bit lane) */
    const __m256i dup_lo = _mm256_broadcastsi128_si256(
                      _mm_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13)),
                  dup_hi = _mm256_broadcastsi128_si256(
                      _mm_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15));
    k_acts a;
    k_act_rows(job, b0, k, nh, &a);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = base + (size_t)sb * NU_PANEL_Q6_K_BYTES;
        __m256i isum[2][SUB], osum[2][SUB];
        for (int h = 0; h < nh; h++)
            for (int v = 0; v < k; v++) isum[h][v] = osum[h][v] = _mm256_setzero_si256();
        for (int pr = 0; pr < 8; pr++) { /* groups 2pr, 2pr + 1 */
            const uint8_t *q2 = blk + 288 + 384 * pr;
            /* the pass of half 0 brings in the lines (each holds both
             * halves): d and scales (288 bytes) first, the pair's six */
            if (h0 == 0) {
                if (pr == 0)
                    for (int l = 0; l < 5; l++)
                        _mm_prefetch((const char *)(blk + PREFETCH_BYTES + 64 * l), _MM_HINT_T0);
                for (int l = 0; l < 6; l++)
                    _mm_prefetch((const char *)(q2 + PREFETCH_BYTES + 64 * l), _MM_HINT_T0);
            }
            const uint8_t *sc = blk + 32 + 32 * pr;
            const __m128i s0 = _mm_load_si128((const __m128i *)(const void *)sc),
                          s1 = _mm_load_si128((const __m128i *)(const void *)(sc + 16));
#pragma GCC unroll 2
            for (int h = h0; h < h0 + nh; h++) {
                /* (sc_g, sc_g+1) of rows 8h..8h+7, int16, a row per lane */
                const __m256i pair =
                    _mm256_cvtepi8_epi16(h ? _mm_unpackhi_epi8(s0, s1) : _mm_unpacklo_epi8(s0, s1));
                for (int v = 0; v < k; v++)
                    osum[h - h0][v] = _mm256_add_epi32(
                        osum[h - h0][v],
                        _mm256_madd_epi16(pair,
                                          _mm256_set1_epi32((int)nu_load_u32(
                                              (const uint8_t *)(a.bsums[v] + 16 * sb + 2 * pr)))));
#pragma GCC unroll 2
                for (int gg = 0; gg < 2; gg++) {
                    const uint8_t *q = q2 + 192 * gg + 32 * h;
                    const __m256i twice = _mm256_shuffle_epi8(pair, gg ? dup_hi : dup_lo);
                    const __m256i v0 = _mm256_load_si256((const __m256i *)(const void *)q),
                                  v1 = _mm256_load_si256((const __m256i *)(const void *)(q + 64)),
                                  v2 = _mm256_load_si256((const __m256i *)(const void *)(q + 128));
                    /* the fourth vector: two bits from each top */
                    const __m256i w3 = _mm256_or_si256(
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(v0, 6), _mm256_set1_epi8(0x03)),
                            _mm256_and_si256(_mm256_srli_epi16(v1, 4), _mm256_set1_epi8(0x0C))),
                        _mm256_and_si256(_mm256_srli_epi16(v2, 2), _mm256_set1_epi8(0x30)));
                    const __m256i w[4] = {_mm256_and_si256(v0, six), _mm256_and_si256(v1, six),
                                          _mm256_and_si256(v2, six), w3};
                    for (int v = 0; v < k; v++) {
                        const uint8_t *x =
                            (const uint8_t *)(a.q[v] + sb * NU_QK_K + 32 * pr + 16 * gg);
#pragma GCC unroll 2
                        for (int half = 0; half < 2; half++) {
                            const __m256i acc = _mm256_add_epi16(
                                _mm256_maddubs_epi16(
                                    w[2 * half], _mm256_set1_epi32((int)nu_load_u32(x + 8 * half))),
                                _mm256_maddubs_epi16(
                                    w[2 * half + 1],
                                    _mm256_set1_epi32((int)nu_load_u32(x + 8 * half + 4))));
                            isum[h - h0][v] =
                                _mm256_add_epi32(isum[h - h0][v], _mm256_madd_epi16(acc, twice));
                        }
                    }
                }
            }
        }
        for (int h = h0; h < h0 + nh; h++) {
            const __m256 dw =
                _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(blk + 16 * h)));
            for (int v = 0; v < k; v++) {
                const __m256i dot =
                    _mm256_sub_epi32(isum[h - h0][v], _mm256_slli_epi32(osum[h - h0][v], 5));
                a.sum[h - h0][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                                   _mm256_mul_ps(dw, _mm256_set1_ps(a.d[v][sb])),
                                                   a.sum[h - h0][v]);
            }
        }
    }
    store_halves(job, panel, h0, nh, b0, k, a.sum);
}

/* One activation row (generation) against both halves of a Q4_K or Q5_K
 * panel: vector j of the two halves meets one broadcast of the activations,
 * so the broadcasts and the two halves' sums stay in registers. Per half,
 * the same exact integer sums and the same float operations as rows_q45_k:
 * the results are those of a batch. */
INLINE void one_q45_k(uint32_t type, const nu_matmul_job *job, const uint8_t *base, int64_t panel,
                      int32_t b0) {
    const size_t sb_bytes = nu_panel_bytes(type, NU_QK_K);
    const int64_t n_in = job->W->n_in, nsb = n_in / NU_QK_K;
    const uint8_t *row = nu_job_act(job, b0);
    const int8_t *xq = nu_actk_q(row);
    const float *xd = nu_actk_d(row, n_in);
    const int16_t *xb = nu_actk_bsums(row, n_in);
    __m256 sum[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = base + (size_t)sb * sb_bytes;
        __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()},
                msum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int g = 0; g < 8; g++) {
            prefetch_q45_group(type, blk, g);
            const uint8_t *x = (const uint8_t *)(xq + sb * NU_QK_K + 32 * g);
            __m256i acc[2][2]; /* [half][first / last four vectors] (Q5_K: two) */
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                const __m256i xj = _mm256_set1_epi32((int)nu_load_u32(x + 4 * j));
                for (int h = 0; h < 2; h++) {
                    const __m256i p = _mm256_maddubs_epi16(q45_vector(type, blk, g, h, j), xj);
                    /* Q5_K's pair sums (at most 2 * 31 * 127) add up four at a time */
                    const int part = type == NU_TYPE_Q5_K && j >= 4;
                    acc[h][part] = j % (type == NU_TYPE_Q5_K ? 4 : 8) == 0
                                       ? p
                                       : _mm256_add_epi16(acc[h][part], p);
                }
            }
            const __m256i sc16 = _mm256_broadcastsi128_si256(
                _mm_load_si128((const __m128i *)(const void *)(blk + 64 + 16 * g)));
            const __m256i mn16 = _mm256_broadcastsi128_si256(
                _mm_load_si128((const __m128i *)(const void *)(blk + 192 + 16 * g)));
            const __m256i bs =
                _mm256_set1_epi32((int)nu_load_u32((const uint8_t *)(xb + sb * 16 + 2 * g)));
            for (int h = 0; h < 2; h++) {
                const __m256i sc_twice = _mm256_shuffle_epi8(sc16, twice_pattern(h));
                isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(acc[h][0], sc_twice));
                if (type == NU_TYPE_Q5_K)
                    isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(acc[h][1], sc_twice));
                msum[h] = _mm256_add_epi32(
                    msum[h], _mm256_madd_epi16(_mm256_shuffle_epi8(mn16, twice_pattern(h)), bs));
            }
        }
        for (int h = 0; h < 2; h++)
            sum[h] = add_q45_superblock(blk, h, isum[h], msum[h], xd[sb], sum[h]);
    }
    float *y = job->y + (size_t)b0 * (size_t)job->W->n_out + (size_t)panel * NU_PANEL_ROWS;
    _mm256_storeu_ps(y, sum[0]);
    _mm256_storeu_ps(y + 8, sum[1]);
}

INLINE void panel_q45_k(uint32_t type, const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    const uint8_t *base =
        (const uint8_t *)job->W->packed + (size_t)panel * nu_panel_bytes(type, job->W->n_in);
    if (k == 1) {
        one_q45_k(type, job, base, panel, b0);
        return;
    }
    rows_q45_k(type, job, base, panel, 0, b0, k);
    rows_q45_k(type, job, base, panel, 1, b0, k);
}

INLINE void panel_q6_k(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    const uint8_t *base = (const uint8_t *)job->W->packed +
                          (size_t)panel * nu_panel_bytes(NU_TYPE_Q6_K, job->W->n_in);
    if (k == 1) {
        rows_q6_k(job, base, panel, 0, 2, b0, 1);
        return;
    }
    rows_q6_k(job, base, panel, 0, 1, b0, k);
    rows_q6_k(job, base, panel, 1, 1, b0, k);
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

/* The entry points: k activation rows SUB at a time, each count a constant. */
#define NU_DEFINE_PANEL(fn, CALL)                                                                  \
    void fn(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {                          \
        for (int done = 0; done < k; done += SUB) {                                                \
            switch (k - done) {                                                                    \
            case 1: CALL(job, panel, b0 + done, 1); break;                                         \
            case 2: CALL(job, panel, b0 + done, 2); break;                                         \
            case 3: CALL(job, panel, b0 + done, 3); break;                                         \
            default: CALL(job, panel, b0 + done, 4); break;                                        \
            }                                                                                      \
        }                                                                                          \
    }
#define NU_Q4_K(...) panel_q45_k(NU_TYPE_Q4_K, __VA_ARGS__)
#define NU_Q5_K(...) panel_q45_k(NU_TYPE_Q5_K, __VA_ARGS__)
NU_DEFINE_PANEL(nu_panel_q4_k_avx2, NU_Q4_K)
NU_DEFINE_PANEL(nu_panel_q5_k_avx2, NU_Q5_K)
NU_DEFINE_PANEL(nu_panel_q6_k_avx2, panel_q6_k)
NU_DEFINE_PANEL(nu_panel_q4_0_avx2, panel_q4_0)
