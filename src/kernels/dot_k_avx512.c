/* dot_k_avx512.c - the K-quant tile kernels and the Q8_K activation
 * quantiser for CPUs with AVX-512 F/BW/VL/DQ and VNNI.
 *
 * A weight row is walked one 256-element super-block at a time. Each
 * super-block is unpacked once, however many activation rows share it:
 *   - its quants become 4 vectors of 64 unsigned bytes in element order
 *     (the stored, unsigned form: Q3_K's -4 and Q6_K's -32 are left out and
 *     put back below);
 *   - its group scales become 4 vectors of int16: lane i of vector c holds
 *     the scale of the group that elements 64c + 2i and 64c + 2i + 1 are in
 *     (groups of 16 elements, or 32 for Q4_K and Q5_K);
 *   - per 16 elements, the int16 factor of the activation sums (bsums): the
 *     group's min for Q2_K, Q4_K, Q5_K, offset * scale for Q3_K and Q6_K.
 * Per activation row, vpmaddubsw multiplies 64 weight bytes with 64 int8
 * activations and adds neighbours into int16 (at most 2 * 63 * 127: no
 * saturation), vpdpwssd multiplies those pairs by their scales and adds them
 * into int32 lanes, and one vpmaddwd of the 16 bsums with their factors gives
 * the min or offset sum. All of that is exact integer arithmetic (below 2^28
 * per super-block); it becomes float once per super-block:
 *   sum  += (d_w * d_a) * isum      (Q3_K, Q6_K: isum - offset sum)
 *   mins += (dmin_w * d_a) * msum   (Q2_K, Q4_K, Q5_K)
 * and y = hsum(sum) - hsum(mins). Every activation row of a tile goes through
 * the same operations, so a result does not depend on the tile it was in.
 */
#include <immintrin.h>

#include "kquant.h"
#include "simd_x86.h"

#define INLINE static inline __attribute__((always_inline))
#define PREFETCH_BYTES 4096 /* how far ahead in the weights to prefetch */

/* ---- Helpers --------------------------------------------------------------- */

/* 32 bytes at p in both halves of a vector (a load, no shuffle unit). */
INLINE __m512i load_twice(const uint8_t *p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

/* Shifts the lower 32 bytes right by lo bits and the upper 32 by hi bits
 * (bits crossing into a neighbour byte are masked off by the caller). */
INLINE __m512i shift_halves(__m512i v, int lo, int hi) {
    return _mm512_srlv_epi64(v, _mm512_setr_epi64(lo, lo, lo, lo, hi, hi, hi, hi));
}

/* q + 2^to (q < 2^to) where bit lo (lower 32 bytes) or hi (upper 32) of the
 * bytes of bits is set: one shift brings both bits to bit `to` (constants,
 * both on the same side of it; a 64-bit shift is fine, the wanted bit stays
 * in its byte), one ternary-logic op masks and merges (0xF8 = A | (B & C)). */
INLINE __m512i add_bit_halves(__m512i q, __m512i bits, int lo, int hi, int to) {
    const __m512i moved =
        lo <= to && hi <= to
            ? _mm512_sllv_epi64(bits, _mm512_setr_epi64(to - lo, to - lo, to - lo, to - lo, to - hi,
                                                        to - hi, to - hi, to - hi))
            : shift_halves(bits, lo - to, hi - to);
    return _mm512_ternarylogic_epi32(q, moved, _mm512_set1_epi8((char)(1 << to)), 0xF8);
}

/* ---- Unpacking a super-block ------------------------------------------------ */

typedef struct superblock {
    __m512i q[4];     /* unsigned quants, elements 64c .. 64c + 63 */
    __m512i scale[4]; /* int16 scale of each pair of elements of q[c] */
    __m256i bscale;   /* int16 factor of each of the 16 bsums */
    __m128 dd;        /* d in lane 0, dmin (or 0) in lane 1 */
} superblock;

/* Spreads 16 int16 group values over the pair lanes of the four vectors:
 * lane i of vector c takes value 4c + i / 8 (groups of 16 elements) or
 * 2c + i / 16 (groups of 32). The index vectors are constants. */
INLINE void spread_scales(__m256i values, int group_len, __m512i *out) {
    const __m512i v = _mm512_castsi256_si512(values);
    for (int c = 0; c < 4; c++) {
        __m512i idx;
        if (group_len == 16)
            idx = _mm512_set_epi16(4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3,
                                   4 * c + 3, 4 * c + 3, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2,
                                   4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 1, 4 * c + 1,
                                   4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1,
                                   4 * c, 4 * c, 4 * c, 4 * c, 4 * c, 4 * c, 4 * c, 4 * c);
        else
            idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)),
                                     _mm256_set1_epi16((short)(2 * c + 1)), 1);
        out[c] = _mm512_permutexvar_epi16(idx, v);
    }
}

/* Q2_K: 2-bit quants, element 128n + 32j + l in bits 2j of qs[32n + l]; a
 * vector c = 2n + t holds j = 2t (lower half) and 2t + 1 (upper half).
 * Scales and mins are the nibbles of scales[16]. */
INLINE void unpack_q2_k(const uint8_t *b, superblock *s) {
    const nu_block_q2_k *blk = (const nu_block_q2_k *)(const void *)b;
    for (int n = 0; n < 2; n++) {
        const __m512i bits = load_twice(blk->qs + 32 * n);
        for (int t = 0; t < 2; t++)
            s->q[2 * n + t] =
                _mm512_and_si512(shift_halves(bits, 4 * t, 4 * t + 2), _mm512_set1_epi8(3));
    }
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)blk->scales);
    const __m128i nib = _mm_set1_epi8(0x0F);
    spread_scales(_mm256_cvtepu8_epi16(_mm_and_si128(raw, nib)), 16, s->scale);
    s->bscale = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), nib));
    s->dd = nu_halves_at(b + offsetof(nu_block_q2_k, d)); /* dmin follows d */
}

/* Q3_K: Q2_K's low bits plus 4 where the hmask bit (bit 4n + j of
 * hmask[l]) is set gives low2 + 4 * hbit = q + 4, in 0..7. The scales are
 * sc - 32; the -4 comes back as -4 * (sc - 32) * bsum. */
INLINE void unpack_q3_k(const uint8_t *b, superblock *s) {
    const nu_block_q3_k *blk = (const nu_block_q3_k *)(const void *)b;
    const __m512i high = load_twice(blk->hmask);
    for (int n = 0; n < 2; n++) {
        const __m512i bits = load_twice(blk->qs + 32 * n);
        for (int t = 0; t < 2; t++) {
            const int j = 2 * t;
            const __m512i q =
                _mm512_and_si512(shift_halves(bits, 2 * j, 2 * j + 2), _mm512_set1_epi8(3));
            s->q[2 * n + t] = add_bit_halves(q, high, 4 * n + j, 4 * n + j + 1, 2);
        }
    }
    uint64_t lo, hi;
    nu_q3_k_scales(blk->scales, &lo, &hi);
    const __m128i sc =
        _mm_sub_epi8(_mm_set_epi64x((long long)hi, (long long)lo), _mm_set1_epi8(32));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
    spread_scales(sc16, 16, s->scale);
    s->bscale = _mm256_slli_epi16(sc16, 2); /* 4 * (sc - 32) */
    s->dd = nu_half_at(b + offsetof(nu_block_q3_k, d));
}

/* The 4-bit quants of 64 elements (32 bytes at qs): low nibbles are the
 * first 32 elements, high nibbles the next 32. */
INLINE __m512i nibbles64(const uint8_t *qs) {
    return _mm512_and_si512(shift_halves(load_twice(qs), 0, 4), _mm512_set1_epi8(0x0F));
}

/* The scales (groups of 32) and mins (as bsum factors, each min twice) of
 * Q4_K and Q5_K. */
INLINE void scales_mins_k4(const uint8_t *packed, superblock *s) {
    uint64_t sc, m;
    nu_q4_k_scales_mins(packed, &sc, &m);
    spread_scales(_mm256_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)), 32, s->scale);
    const __m128i mins = _mm_cvtsi64_si128((long long)m);
    s->bscale = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins, mins));
}

INLINE void unpack_q4_k(const uint8_t *b, superblock *s) {
    const nu_block_q4_k *blk = (const nu_block_q4_k *)(const void *)b;
    for (int c = 0; c < 4; c++) s->q[c] = nibbles64(blk->qs + 32 * c);
    scales_mins_k4(blk->scales, s);
    s->dd = nu_halves_at(b); /* d, dmin */
}

/* Q5_K: Q4_K plus 16 where bit 2c (first 32 elements of vector c) or 2c + 1
 * (next 32) of qh[l] is set. */
INLINE void unpack_q5_k(const uint8_t *b, superblock *s) {
    const nu_block_q5_k *blk = (const nu_block_q5_k *)(const void *)b;
    const __m512i high = load_twice(blk->qh);
    for (int c = 0; c < 4; c++) {
        s->q[c] = add_bit_halves(nibbles64(blk->qs + 32 * c), high, 2 * c, 2 * c + 1, 4);
    }
    scales_mins_k4(blk->scales, s);
    s->dd = nu_halves_at(b); /* d, dmin */
}

/* Q6_K: vector 2n holds elements 128n + 0..63 (low nibbles of ql[64n ..
 * 64n + 63], with bits 0-1 resp. 2-3 of qh[32n + l] on top), vector 2n + 1
 * elements 128n + 64..127 (high nibbles, bits 4-5 resp. 6-7). The -32 comes
 * back as -32 * sc * bsum. */
INLINE void unpack_q6_k(const uint8_t *b, superblock *s) {
    const nu_block_q6_k *blk = (const nu_block_q6_k *)(const void *)b;
    const __m512i nib = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
    for (int n = 0; n < 2; n++) {
        const __m512i low = _mm512_loadu_si512((const void *)(blk->ql + 64 * n));
        const __m512i high = load_twice(blk->qh + 32 * n);
        /* Two high bits moved to bits 4-5: left by 4 / 2 for the low
         * nibbles, right by 0 / 2 for the high ones. */
        const __m512i h0 = _mm512_sllv_epi64(high, _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2));
        const __m512i h1 = shift_halves(high, 0, 2);
        /* (h & 0x30) | nibble in one ternary-logic op: imm 0xEA = (A & B) | C. */
        s->q[2 * n] = _mm512_ternarylogic_epi32(h0, top, _mm512_and_si512(low, nib), 0xEA);
        s->q[2 * n + 1] = _mm512_ternarylogic_epi32(
            h1, top, _mm512_and_si512(_mm512_srli_epi16(low, 4), nib), 0xEA);
    }
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)blk->scales));
    spread_scales(sc16, 16, s->scale);
    s->bscale = _mm256_slli_epi16(sc16, 5); /* 32 * sc */
    s->dd = nu_half_at(b + offsetof(nu_block_q6_k, d));
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

/* Types whose bsum term carries its own scale (dmin) rather than d. */
INLINE int has_kmin(uint32_t type) {
    return type == NU_TYPE_Q2_K || type == NU_TYPE_Q4_K || type == NU_TYPE_Q5_K;
}

INLINE void unpack(uint32_t type, const uint8_t *b, superblock *s) {
    switch (type) {
    case NU_TYPE_Q2_K: unpack_q2_k(b, s); break;
    case NU_TYPE_Q3_K: unpack_q3_k(b, s); break;
    case NU_TYPE_Q4_K: unpack_q4_k(b, s); break;
    case NU_TYPE_Q5_K: unpack_q5_k(b, s); break;
    default: unpack_q6_k(b, s); break;
    }
}

/* ---- Tiles ------------------------------------------------------------------- */

typedef struct kacc {
    __m512 sum[NU_TILE_MAX];
    __m256 mins[NU_TILE_MAX];
} kacc;

/* Super-block sb of the weights against k activation rows. */
INLINE void superblock_rows(uint32_t type, const superblock *s, const uint8_t *const *act,
                            int64_t n_in, int64_t sb, int k, kacc *a) {
    for (int v = 0; v < k; v++) {
        const int8_t *x = nu_actk_q(act[v]) + sb * NU_QK_K;
        __m512i p[4];
        for (int c = 0; c < 4; c++)
            p[c] = _mm512_maddubs_epi16(s->q[c], _mm512_load_si512((const void *)(x + 64 * c)));
        /* Two independent chains of dot-accumulates, joined at the end. */
        __m512i i0 = _mm512_madd_epi16(p[0], s->scale[0]);
        __m512i i1 = _mm512_madd_epi16(p[1], s->scale[1]);
        i0 = _mm512_dpwssd_epi32(i0, p[2], s->scale[2]);
        i1 = _mm512_dpwssd_epi32(i1, p[3], s->scale[3]);
        __m512i isum = _mm512_add_epi32(i0, i1);
        const __m256i bsums = _mm256_load_si256(
            (const __m256i *)(const void *)(nu_actk_bsums(act[v], n_in) + 16 * sb));
        const __m256i bterm = _mm256_madd_epi16(bsums, s->bscale);
        /* d * d_a and dmin * d_a in one multiply. */
        const __m128 scales = _mm_mul_ps(s->dd, _mm_broadcast_ss(nu_actk_d(act[v], n_in) + sb));
        if (has_kmin(type))
            a->mins[v] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(bterm),
                _mm256_permutexvar_ps(_mm256_set1_epi32(1), _mm256_castps128_ps256(scales)),
                a->mins[v]);
        else
            isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(bterm));
        a->sum[v] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_broadcastss_ps(scales), a->sum[v]);
    }
}

/* Dot products of weight row `row` with activation rows b0 .. b0 + k - 1. */
INLINE void k_tile(uint32_t type, const nu_matmul_job *job, int64_t row, int32_t b0, int k) {
    const int bytes = kblock_bytes(type);
    const uint8_t *w = nu_job_row(job, row);
    const int64_t n_in = job->W->n_in, nsb = n_in / NU_QK_K;
    const uint8_t *act[NU_TILE_MAX];
    kacc a;
    for (int v = 0; v < k; v++) {
        act[v] = nu_job_act(job, b0 + v);
        a.sum[v] = _mm512_setzero_ps();
        a.mins[v] = _mm256_setzero_ps();
    }
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = w + sb * bytes;
        /* Every 64-byte line of the block, PREFETCH_BYTES ahead: consecutive
         * blocks leave no line out. */
        for (int i = 0; i < bytes; i += 64)
            _mm_prefetch((const char *)(blk + PREFETCH_BYTES + i), _MM_HINT_T0);
        superblock s;
        unpack(type, blk, &s);
        superblock_rows(type, &s, act, n_in, sb, k, &a);
    }
    for (int v = 0; v < k; v++) {
        float y = nu_hsum512_ps(a.sum[v]);
        if (has_kmin(type)) y -= nu_hsum256_ps(a.mins[v]);
        job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = y;
    }
}

NU_DEFINE_TILE(, nu_tile_q2_k_avx512, k_tile, NU_TYPE_Q2_K)
NU_DEFINE_TILE(, nu_tile_q3_k_avx512, k_tile, NU_TYPE_Q3_K)
NU_DEFINE_TILE(, nu_tile_q4_k_avx512, k_tile, NU_TYPE_Q4_K)
NU_DEFINE_TILE(, nu_tile_q5_k_avx512, k_tile, NU_TYPE_Q5_K)
NU_DEFINE_TILE(, nu_tile_q6_k_avx512, k_tile, NU_TYPE_Q6_K)

/* ---- Q8_K activation quantisation --------------------------------------------- */

/* The same float operations as nu_quantize_act_k_scalar: max|x| ignoring NaN
 * (max_ps returns its second operand when the first is NaN), the first
 * element m of that magnitude, q = RNE(clamp(x * (-127 / m))) with NaN
 * clamped to -127, d = 1 / (-127 / m), the sums of q per 16. One 16-lane
 * vector is one group of 16. */
void nu_quantize_act_k_avx512(const float *x, int64_t n_in, uint8_t *dst) {
    int8_t *q = (int8_t *)dst;
    float *d = (float *)(void *)nu_actk_d(dst, n_in);
    int16_t *bsums = (int16_t *)(void *)nu_actk_bsums(dst, n_in);
    const int64_t nb = n_in / NU_QK_K;
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * NU_QK_K;
        __m512 m = _mm512_setzero_ps();
        for (int g = 0; g < 16; g++)
            m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + 16 * g)), m);
        const float amax = _mm512_reduce_max_ps(m);
        if (!(amax >= NU_ACT_TINY)) {
            memset(q + b * NU_QK_K, 0, NU_QK_K);
            memset(bsums + b * 16, 0, 16 * sizeof(int16_t));
            d[b] = 0.0f;
            continue;
        }
        float max = amax;
        for (int g = 0; g < 16; g++) {
            const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + 16 * g)),
                                                     _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (hit) {
                max = xb[16 * g + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 inv = _mm512_set1_ps(iscale);
        for (int g = 0; g < 16; g++) {
            __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xb + 16 * g), inv);
            __m512i qi = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
            _mm_storeu_si128((__m128i *)(void *)(q + b * NU_QK_K + 16 * g),
                             _mm512_cvtepi32_epi8(qi));
            bsums[b * 16 + g] = (int16_t)_mm512_reduce_add_epi32(qi);
        }
        d[b] = 1.0f / iscale;
    }
    for (int64_t b = nb; b < nu_actk_d_count(n_in); b++) d[b] = 0.0f;
    for (int64_t g = nb * 16; g < nu_actk_bsum_count(n_in); g++) bsums[g] = 0;
}
