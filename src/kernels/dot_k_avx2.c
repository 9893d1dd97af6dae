/* dot_k_avx2.c - the K-quant tile kernels and the Q8_K activation quantiser
 * for CPUs with AVX2, FMA and F16C.
 *
 * The scheme of dot_k_avx512.c with 32-element vectors: a super-block is
 * eight vectors of unsigned quants (i = 0..7, elements 32i .. 32i + 31), each
 * unpacked once per super-block and used for every activation row of the
 * tile. vpmaddubsw multiplies one with 32 int8 activations into 16 int16 pair
 * sums (no saturation: at most 2 * 63 * 127), vpmaddwd multiplies those by
 * their group's int16 scale and adds pairs into 8 int32 lanes, which add up
 * to the exact integer sum_g sc_g * dot_g of the super-block. The scale
 * vector of vector i holds group 2i's scale in its lower 128 bits and group
 * 2i + 1's in the upper (groups of 16), or group i's throughout (groups of
 * 32, Q4_K and Q5_K). One vpmaddwd of the 16 bsums with their factors (min,
 * or offset * scale) gives the min or offset sum, and once per super-block
 *   sum += (d_w * d_a) * isum - (dmin_w * d_a) * msum   (Q2_K, Q4_K, Q5_K)
 *   sum += (d_w * d_a) * (isum - offset sum)            (Q3_K, Q6_K)
 * Every activation row of a tile goes through the same operations.
 */
#include <immintrin.h>

#include "kquant.h"
#include "simd_x86.h"

#define INLINE static inline __attribute__((always_inline))
#define PREFETCH_BYTES 4096 /* how far ahead in the weights to prefetch */

/* ---- Helpers --------------------------------------------------------------- */

INLINE __m256i load256(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* Moves bit `from` of every byte to bit `to` (from, to constants), masked to
 * that bit: 16-bit shifts are fine, the wanted bit stays in its byte. */
INLINE __m256i move_bit(__m256i v, int from, int to) {
    const __m256i shifted = from > to   ? _mm256_srli_epi16(v, from - to)
                            : from < to ? _mm256_slli_epi16(v, to - from)
                                        : v;
    return _mm256_and_si256(shifted, _mm256_set1_epi8((char)(1 << to)));
}

/* ---- Unpacking -------------------------------------------------------------- */

/* What a super-block needs besides its quants. */
typedef struct superblock {
    __m256i scales_lo; /* int16 scales of groups 0..7, in both 128-bit halves */
    __m256i scales_hi; /* groups 8..15 (groups of 16 only) */
    __m256i bscale;    /* int16 factor of each of the 16 bsums */
    __m128 dd;         /* d in lane 0, dmin (or 0) in lane 1 */
} superblock;

INLINE int group_len(uint32_t type) {
    return type == NU_TYPE_Q4_K || type == NU_TYPE_Q5_K ? 32 : 16;
}

/* Types whose bsum term carries its own scale (dmin) rather than d. */
INLINE int has_kmin(uint32_t type) {
    return type == NU_TYPE_Q2_K || type == NU_TYPE_Q4_K || type == NU_TYPE_Q5_K;
}

INLINE int kblock_bytes(uint32_t type) {
    switch (type) {
    case NU_TYPE_Q2_K: return (int)sizeof(nu_block_q2_k);
    case NU_TYPE_Q3_K: return (int)sizeof(nu_block_q3_k);
    case NU_TYPE_Q4_K: return (int)sizeof(nu_block_q4_k);
    case NU_TYPE_Q5_K: return (int)sizeof(nu_block_q5_k);
    default: return (int)sizeof(nu_block_q6_k);
    }
}

/* 16 int16 group scales split into the two broadcast halves. */
INLINE void split_scales(__m256i s16, superblock *s) {
    s->scales_lo = _mm256_permute4x64_epi64(s16, _MM_SHUFFLE(1, 0, 1, 0));
    s->scales_hi = _mm256_permute4x64_epi64(s16, _MM_SHUFFLE(3, 2, 3, 2));
}

/* Scales, bsum factors and super-block scales of one block. */
INLINE void unpack_scales(uint32_t type, const uint8_t *b, superblock *s) {
    switch (type) {
    case NU_TYPE_Q2_K: {
        const nu_block_q2_k *blk = (const nu_block_q2_k *)(const void *)b;
        const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)blk->scales);
        const __m128i nib = _mm_set1_epi8(0x0F);
        split_scales(_mm256_cvtepu8_epi16(_mm_and_si128(raw, nib)), s);
        s->bscale = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), nib));
        s->dd = nu_halves_at(b + offsetof(nu_block_q2_k, d)); /* dmin follows d */
        break;
    }
    case NU_TYPE_Q3_K: {
        uint64_t lo, hi;
        nu_q3_k_scales(b + offsetof(nu_block_q3_k, scales), &lo, &hi);
        const __m128i sc =
            _mm_sub_epi8(_mm_set_epi64x((long long)hi, (long long)lo), _mm_set1_epi8(32));
        const __m256i s16 = _mm256_cvtepi8_epi16(sc);
        split_scales(s16, s);
        s->bscale = _mm256_slli_epi16(s16, 2); /* 4 * (sc - 32) */
        s->dd = nu_half_at(b + offsetof(nu_block_q3_k, d));
        break;
    }
    case NU_TYPE_Q4_K:
    case NU_TYPE_Q5_K: {
        uint64_t sc, m;
        nu_q4_k_scales_mins(b + offsetof(nu_block_q4_k, scales), &sc, &m);
        s->scales_lo =
            _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        s->scales_hi = s->scales_lo;
        const __m128i mins = _mm_cvtsi64_si128((long long)m);
        s->bscale = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins, mins)); /* each min twice */
        s->dd = nu_halves_at(b);                                         /* d, dmin */
        break;
    }
    default: { /* Q6_K */
        const nu_block_q6_k *blk = (const nu_block_q6_k *)(const void *)b;
        const __m256i s16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)blk->scales));
        split_scales(s16, s);
        s->bscale = _mm256_slli_epi16(s16, 5); /* 32 * sc */
        s->dd = nu_half_at(b + offsetof(nu_block_q6_k, d));
        break;
    }
    }
}

/* The scale vector of quant vector i (constant): word lane pairs picked with
 * a byte shuffle from the broadcast halves. */
INLINE __m256i scale_vector(uint32_t type, const superblock *s, int i) {
    if (group_len(type) == 32) {
        const short pick = (short)((2 * i + 1) << 8 | 2 * i);
        return _mm256_shuffle_epi8(s->scales_lo, _mm256_set1_epi16(pick));
    }
    const int p = i % 4; /* groups 2i, 2i + 1 are words 2p, 2p + 1 of their half */
    const short lo = (short)((4 * p + 1) << 8 | 4 * p),
                hi = (short)((4 * p + 3) << 8 | (4 * p + 2));
    const __m256i idx = _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
    return _mm256_shuffle_epi8(i < 4 ? s->scales_lo : s->scales_hi, idx);
}

/* Quant vector i (constant) of block b as unsigned bytes, element order. */
INLINE __m256i quant_vector(uint32_t type, const uint8_t *b, int i) {
    const __m256i nib = _mm256_set1_epi8(0x0F);
    switch (type) {
    case NU_TYPE_Q2_K: { /* elements 128n + 32j + l: bits 2j of qs[32n + l] */
        const __m256i bits = load256(b + offsetof(nu_block_q2_k, qs) + 32 * (i / 4));
        return _mm256_and_si256(_mm256_srli_epi16(bits, 2 * (i % 4)), _mm256_set1_epi8(3));
    }
    case NU_TYPE_Q3_K: { /* Q2_K's bits, plus 4 from bit 4n + j of hmask[l] */
        const int n = i / 4, j = i % 4;
        const __m256i bits = load256(b + offsetof(nu_block_q3_k, qs) + 32 * n);
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), _mm256_set1_epi8(3));
        const __m256i high = load256(b + offsetof(nu_block_q3_k, hmask));
        return _mm256_or_si256(low, move_bit(high, 4 * n + j, 2));
    }
    case NU_TYPE_Q4_K:
    case NU_TYPE_Q5_K: { /* 64c + l: low nibble of qs[32c + l], 64c + 32 + l: high */
        const int c = i / 2, upper = i % 2;
        const size_t qs =
            type == NU_TYPE_Q4_K ? offsetof(nu_block_q4_k, qs) : offsetof(nu_block_q5_k, qs);
        const __m256i bytes = load256(b + qs + 32 * c);
        __m256i q = _mm256_and_si256(upper ? _mm256_srli_epi16(bytes, 4) : bytes, nib);
        if (type == NU_TYPE_Q5_K) /* bit 4 from bit 2c (+1) of qh[l] */
            q = _mm256_or_si256(q, move_bit(load256(b + offsetof(nu_block_q5_k, qh)), i, 4));
        return q;
    }
    default: { /* Q6_K, see kquant.h: i = 4n + u */
        const int n = i / 4, u = i % 4;
        const __m256i low = load256(b + 64 * n + 32 * (u % 2));
        const __m256i nibble = _mm256_and_si256(u < 2 ? low : _mm256_srli_epi16(low, 4), nib);
        const __m256i high = load256(b + offsetof(nu_block_q6_k, qh) + 32 * n);
        /* bits 2u, 2u + 1 of qh to bits 4, 5 */
        const __m256i h = 2 * u > 4   ? _mm256_srli_epi16(high, 2 * u - 4)
                          : 2 * u < 4 ? _mm256_slli_epi16(high, 4 - 2 * u)
                                      : high;
        return _mm256_or_si256(nibble, _mm256_and_si256(h, _mm256_set1_epi8(0x30)));
    }
    }
}

/* ---- Tiles ------------------------------------------------------------------- */

/* Dot products of weight row `row` with activation rows b0 .. b0 + k - 1. */
INLINE void k_tile(uint32_t type, const nu_matmul_job *job, int64_t row, int32_t b0, int k) {
    const int bytes = kblock_bytes(type);
    const uint8_t *w = nu_job_row(job, row);
    const int64_t n_in = job->W->n_in, nsb = n_in / NU_QK_K;
    const uint8_t *act[NU_TILE_MAX];
    __m256 sum[NU_TILE_MAX];
    for (int v = 0; v < k; v++) {
        act[v] = nu_job_act(job, b0 + v);
        sum[v] = _mm256_setzero_ps();
    }
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = w + sb * bytes;
        /* Every 64-byte line of the block, PREFETCH_BYTES ahead: consecutive
         * blocks leave no line out. */
        for (int i = 0; i < bytes; i += 64)
            _mm_prefetch((const char *)(blk + PREFETCH_BYTES + i), _MM_HINT_T0);
        superblock s;
        unpack_scales(type, blk, &s);
        __m256i isum[NU_TILE_MAX];
        for (int v = 0; v < k; v++) isum[v] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const __m256i q = quant_vector(type, blk, i), scale = scale_vector(type, &s, i);
            for (int v = 0; v < k; v++) {
                const __m256i x = _mm256_load_si256(
                    (const __m256i *)(const void *)(nu_actk_q(act[v]) + sb * NU_QK_K + 32 * i));
                isum[v] =
                    _mm256_add_epi32(isum[v], _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scale));
            }
        }
        for (int v = 0; v < k; v++) {
            const __m256i bsums = _mm256_load_si256(
                (const __m256i *)(const void *)(nu_actk_bsums(act[v], n_in) + 16 * sb));
            const __m256i bterm = _mm256_madd_epi16(bsums, s.bscale);
            /* d * d_a and dmin * d_a in one multiply. */
            const __m128 scales = _mm_mul_ps(s.dd, _mm_broadcast_ss(nu_actk_d(act[v], n_in) + sb));
            const __m256 d = _mm256_broadcastss_ps(scales);
            if (has_kmin(type)) {
                const __m256 dmin =
                    _mm256_permutevar8x32_ps(_mm256_castps128_ps256(scales), _mm256_set1_epi32(1));
                sum[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[v]), d, sum[v]);
                sum[v] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(bterm), dmin, sum[v]);
            } else {
                sum[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[v], bterm)), d,
                                         sum[v]);
            }
        }
    }
    for (int v = 0; v < k; v++)
        job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = nu_hsum256_ps(sum[v]);
}

NU_DEFINE_TILE(, nu_tile_q2_k_avx2, k_tile, NU_TYPE_Q2_K)
NU_DEFINE_TILE(, nu_tile_q3_k_avx2, k_tile, NU_TYPE_Q3_K)
NU_DEFINE_TILE(, nu_tile_q4_k_avx2, k_tile, NU_TYPE_Q4_K)
NU_DEFINE_TILE(, nu_tile_q5_k_avx2, k_tile, NU_TYPE_Q5_K)
NU_DEFINE_TILE(, nu_tile_q6_k_avx2, k_tile, NU_TYPE_Q6_K)

/* ---- Q8_K activation quantisation --------------------------------------------- */

/* The largest of 8 floats (exact in any order: none is NaN). */
INLINE float hmax_ps(__m256 v) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* The sum of 8 int32 lanes. */
INLINE int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* The same float operations as nu_quantize_act_k_scalar: max|x| ignoring NaN
 * (max_ps returns its second operand when the first is NaN), the first
 * element m of that magnitude, q = RNE(clamp(x * (-127 / m))) with NaN
 * clamped to -127, d = 1 / (-127 / m), the sums of q per 16. Two groups (32
 * elements, four vectors) at a time. */
void nu_quantize_act_k_avx2(const float *x, int64_t n_in, uint8_t *dst) {
    int8_t *q = (int8_t *)dst;
    float *d = (float *)(void *)nu_actk_d(dst, n_in);
    int16_t *bsums = (int16_t *)(void *)nu_actk_bsums(dst, n_in);
    const int64_t nb = n_in / NU_QK_K;
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * NU_QK_K;
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < NU_QK_K / 8; i++)
            m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb + 8 * i), abs_mask), m);
        const float amax = hmax_ps(m);
        if (!(amax >= NU_ACT_TINY)) {
            memset(q + b * NU_QK_K, 0, NU_QK_K);
            memset(bsums + b * 16, 0, 16 * sizeof(int16_t));
            d[b] = 0.0f;
            continue;
        }
        float max = amax;
        for (int i = 0; i < NU_QK_K / 8; i++) {
            const __m256 v = _mm256_loadu_ps(xb + 8 * i);
            const int hit = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (hit) {
                max = xb[8 * i + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 inv = _mm256_set1_ps(iscale);
        for (int p = 0; p < 8; p++) {
            __m256i qi[4];
            for (int i = 0; i < 4; i++) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 32 * p + 8 * i), inv);
                qi[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
            }
            /* int32 -> int8 with saturating packs (values are within +-127),
             * then undo their lane interleave. */
            __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]),
                                            _mm256_packs_epi32(qi[2], qi[3]));
            p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(void *)(q + b * NU_QK_K + 32 * p), p8);
            bsums[b * 16 + 2 * p] = (int16_t)hsum_epi32(_mm256_add_epi32(qi[0], qi[1]));
            bsums[b * 16 + 2 * p + 1] = (int16_t)hsum_epi32(_mm256_add_epi32(qi[2], qi[3]));
        }
        d[b] = 1.0f / iscale;
    }
    for (int64_t b = nb; b < nu_actk_d_count(n_in); b++) d[b] = 0.0f;
    for (int64_t g = nb * 16; g < nu_actk_bsum_count(n_in); g++) bsums[g] = 0;
}
