/* dot_avx512.c - kernels for CPUs with AVX-512 F/BW/VL/DQ and VNNI.
 *
 * Quantised weights. A row is walked in groups of 16 blocks (512 elements):
 *   - the 16 f16 scales (and, for the _1 types, the 16 f16 minima next to
 *     them) are picked out of the group's bytes with word permutes, widened
 *     and multiplied by the 16 activation scales: one float per block, in
 *     one register;
 *   - each pair of blocks becomes 64 unsigned bytes (nibbles unpacked in
 *     element order, plus bit 4 for Q5) and vpdpbusd multiplies them with the
 *     64 int8 activations, summing groups of 4 products into 16 int32 lanes
 *     (8 lanes per block);
 *   - the lanes are converted to float and multiplied by their block's scale
 *     (a lane permute broadcasts it to the block's 8 lanes) into one of two
 *     float accumulators, alternating pairs so consecutive FMAs are independent.
 * The _0 types store q + offset; vpdpbusd needs the unsigned form anyway, so
 * the offset is removed once at the end from a second accumulator that sums
 * d_w * (d_a * sum(q_a)) per block (the _1 types add m_w * d_a * sum(q_a) the
 * same way). Q8_0 weights are signed: their absolute values are multiplied
 * with activations that carry the weights' signs.
 *
 * Float weights (F32, F16, BF16) are widened to float and multiplied with the
 * F32 activations into four 16-lane accumulators (64 elements a step).
 *
 * Every tile kernel runs the same operation sequence for each of its 1..4
 * activation rows, so a result does not depend on the tile it was part of.
 */
#include <immintrin.h>
#include <stdalign.h>

#include "iquant.h"
#include "simd_x86.h"

#define INLINE static inline __attribute__((always_inline))
#define GROUP 16            /* blocks per scale vector */
#define NACC 2              /* float accumulators per activation row */
#define PREFETCH_BYTES 4096 /* how far ahead in the weights to prefetch */

/* ---- Helpers --------------------------------------------------------------- */

/* The 4-bit quants of two blocks as 64 bytes in element order. Each block's
 * 16 bytes are placed twice, [b0 b0 b1 b1], and the second copies shifted
 * right by 4, so masking with 0x0F leaves low nibbles (elements 0..15) then
 * high nibbles (elements 16..31) of each block. */
INLINE __m512i unpack_nibbles_pair(const uint8_t *q0, const uint8_t *q1) {
    /* Broadcasts from memory need no shuffle unit: q0 to all four 128-bit
     * lanes, then q1 into the upper two. */
    __m512i dup = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)q0));
    dup = _mm512_mask_broadcast_i32x4(dup, 0xFF00, _mm_loadu_si128((const __m128i *)q1));
    __m512i shifted = _mm512_srlv_epi64(dup, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
}

/* Adds 16 to the quants whose bit is set in the two blocks' 32-bit high-bit
 * words (bit j of a word is element j of its block). */
INLINE __m512i add_high_bits_pair(__m512i q, const uint8_t *h0, const uint8_t *h1) {
    uint64_t bits = (uint64_t)nu_load_u32(h0) | (uint64_t)nu_load_u32(h1) << 32;
    return _mm512_mask_add_epi8(q, _cvtu64_mask64(bits), q, _mm512_set1_epi8(16));
}

/* ---- Quantised weights ----------------------------------------------------- */

/* Accumulators of one tile: per activation row, NACC block-product sums and
 * the sum of offset/minimum terms. */
typedef struct quant_acc {
    __m512 sum[NU_TILE_MAX][NACC];
    __m512 corr[NU_TILE_MAX];
} quant_acc;

/* Bytes of a group of 16 blocks, and how many 64-byte chunks of it hold the
 * f16 scales (and minima): block 15's fields end at 15 * bytes + 4. */
INLINE int group_bytes(uint32_t type) {
    return GROUP * block_bytes(type);
}
INLINE int scale_chunks(uint32_t type) {
    return (15 * block_bytes(type) + (has_min(type) ? 4 : 2) + 63) / 64;
}

/* Chunk i of a group, not reading past the group's end (a partial last
 * chunk is a masked load, whose missing bytes read as zero). */
INLINE __m512i load_chunk(uint32_t type, const uint8_t *wg, int i) {
    const int left = group_bytes(type) - 64 * i;
    if (left >= 64) return _mm512_loadu_si512((const void *)(wg + 64 * i));
    return _mm512_maskz_loadu_epi8(((__mmask64)1 << left) - 1, wg + 64 * i);
}

/* The 16 f16 scales of a group in word lanes 0..15 and, for the _1 types,
 * the 16 minima in lanes 16..31. A gather would be simplest but is slow on
 * some CPUs; instead the group is read as 64-byte chunks and each pair of
 * chunks (64 words) gives the fields that lie in it through one two-source
 * word permute, merged into the result under a mask. The index and mask
 * vectors depend on the type only and are hoisted out of the row loop. */
INLINE __m512i group_fields(uint32_t type, const uint8_t *wg) {
    static const int16_t lane[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                     11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                     22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    const __m512i pos = _mm512_loadu_si512((const void *)lane);
    const __m512i block = _mm512_and_si512(pos, _mm512_set1_epi16(15));
    /* Word offset of lane p's field: block (p % 16), plus 1 for m (p >= 16). */
    const __m512i stride = _mm512_set1_epi16((short)(block_bytes(type) / 2));
    const __m512i word =
        _mm512_add_epi16(_mm512_mullo_epi16(block, stride), _mm512_srli_epi16(pos, 4));
    const __mmask32 wanted = has_min(type) ? 0xFFFFFFFFu : 0xFFFFu;
    __m512i out = _mm512_setzero_si512();
    for (int w = 0; 2 * w < scale_chunks(type); w++) {
        const __m512i base = _mm512_set1_epi16((short)(64 * w));
        const __mmask32 in =
            _mm512_mask_cmpge_epu16_mask(wanted, word, base) &
            _mm512_cmplt_epu16_mask(word, _mm512_add_epi16(base, _mm512_set1_epi16(64)));
        const __m512i lo = load_chunk(type, wg, 2 * w);
        const __m512i hi = 2 * w + 1 < scale_chunks(type) ? load_chunk(type, wg, 2 * w + 1) : lo;
        const __m512i picked = _mm512_permutex2var_epi16(lo, _mm512_sub_epi16(word, base), hi);
        out = w == 0 ? picked : _mm512_mask_mov_epi16(out, in, picked);
    }
    return out;
}

/* Per-block products of scales: scale[v] lane i = d_w(block i) * d_a(block i);
 * and corr[v] += (d_w or m_w) * s_a per lane. */
INLINE void group_scales(uint32_t type, const uint8_t *wg, const uint8_t *const *act, int64_t n_pad,
                         int64_t g, int k, __m512 *scale, quant_acc *a) {
    __m512 dw, mw;
    if (type == NU_TYPE_MXFP4) { /* E8M0 bytes at an odd stride: one by one */
        alignas(64) float e[GROUP];
        for (int i = 0; i < GROUP; i++) e[i] = nu_e8m0_half(wg[i * NU_MXFP4_BYTES]);
        dw = mw = _mm512_load_ps(e);
    } else {
        const __m512i fields = group_fields(type, wg);
        dw = _mm512_cvtph_ps(_mm512_castsi512_si256(fields));
        mw = has_min(type) ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(fields, 1)) : dw;
    }
    for (int v = 0; v < k; v++) {
        scale[v] = _mm512_mul_ps(dw, _mm512_load_ps(nu_act_d(act[v], n_pad) + g * GROUP));
        if (has_min(type) || quant_offset(type))
            a->corr[v] = _mm512_fmadd_ps(
                mw, _mm512_load_ps(act_sums(type, act[v], n_pad) + g * GROUP), a->corr[v]);
    }
}

/* One group of 16 blocks at wg against k activation rows (group g of each). */
INLINE void quant_group(uint32_t type, const uint8_t *wg, const uint8_t *const *act, int64_t n_pad,
                        int64_t g, int k, quant_acc *a) {
    const int bytes = block_bytes(type);
    const __m512i half_select = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 scale[NU_TILE_MAX];
    group_scales(type, wg, act, n_pad, g, k, scale, a);
#pragma GCC unroll 8
    for (int p = 0; p < GROUP / 2; p++) {
        const uint8_t *b0 = wg + 2 * p * bytes, *b1 = b0 + bytes;
        __m512i wq;
        __mmask64 negative = 0;
        if (type == NU_TYPE_Q8_0) {
            __m512i w = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b0 + 2)));
            w = _mm512_mask_broadcast_i64x4(w, 0xF0, _mm256_loadu_si256((const __m256i *)(b1 + 2)));
            negative = _mm512_movepi8_mask(w);
            wq = _mm512_abs_epi8(w);
        } else if (is_table(type)) {
            const int8_t *table = type == NU_TYPE_MXFP4 ? nu_fp4x2_values : nu_iq4nl_values;
            const __m512i w = _mm512_shuffle_epi8(
                _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)table)),
                unpack_nibbles_pair(b0 + nibble_offset(type), b1 + nibble_offset(type)));
            negative = _mm512_movepi8_mask(w);
            wq = _mm512_abs_epi8(w);
        } else {
            wq = unpack_nibbles_pair(b0 + nibble_offset(type), b1 + nibble_offset(type));
            if (has_high_bits(type))
                wq = add_high_bits_pair(wq, b0 + nibble_offset(type) - 4,
                                        b1 + nibble_offset(type) - 4);
        }
        /* Lanes 0..7 take block 2p's scale, lanes 8..15 block 2p+1's. */
        const __m512i select = _mm512_add_epi32(half_select, _mm512_set1_epi32(2 * p));
        for (int v = 0; v < k; v++) {
            __m512i x = _mm512_load_si512(
                (const void *)(nu_act_q(act[v]) + g * GROUP * NU_QK + p * 2 * NU_QK));
            if (signed_weights(type))
                x = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
            __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, x);
            __m512 s = _mm512_permutexvar_ps(select, scale[v]);
            a->sum[v][p % NACC] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, a->sum[v][p % NACC]);
        }
    }
}

/* Dot products of weight row `row` with activation rows b0 .. b0+k-1. A
 * last partial group is copied into a zero-padded buffer: zero blocks have
 * zero scales and add nothing. */
INLINE void quant_tile(uint32_t type, const nu_matmul_job *job, int64_t row, int32_t b0, int k) {
    const int bytes = block_bytes(type);
    const uint8_t *w = nu_job_row(job, row);
    const int64_t nb = job->W->n_in / NU_QK, n_pad = job->act_n_pad, full = nb / GROUP;
    const uint8_t *act[NU_TILE_MAX];
    quant_acc a;
    for (int v = 0; v < k; v++) {
        act[v] = nu_job_act(job, b0 + v);
        a.corr[v] = _mm512_setzero_ps();
        for (int i = 0; i < NACC; i++) a.sum[v][i] = _mm512_setzero_ps();
    }
    for (int64_t g = 0; g < full; g++) {
        const uint8_t *wg = w + g * GROUP * bytes;
        for (int i = 0; i < group_bytes(type); i += 64)
            _mm_prefetch((const char *)(wg + PREFETCH_BYTES + i), _MM_HINT_T0);
        quant_group(type, wg, act, n_pad, g, k, &a);
    }
    if (nb % GROUP) {
        alignas(64) uint8_t tail[GROUP * NU_Q8_0_BYTES];
        memset(tail, 0, sizeof tail);
        memcpy(tail, w + full * GROUP * bytes, (size_t)(nb % GROUP) * (size_t)bytes);
        quant_group(type, tail, act, n_pad, full, k, &a);
    }
    for (int v = 0; v < k; v++) {
        __m512 t = a.sum[v][0];
        for (int i = 1; i < NACC; i++) t = _mm512_add_ps(t, a.sum[v][i]);
        if (quant_offset(type))
            t = _mm512_fmadd_ps(a.corr[v], _mm512_set1_ps(-(float)quant_offset(type)), t);
        else if (has_min(type))
            t = _mm512_add_ps(t, a.corr[v]);
        job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = nu_hsum512_ps(t);
    }
}

NU_DEFINE_TILE(static, tile_q4_0, quant_tile, NU_TYPE_Q4_0)
NU_DEFINE_TILE(static, tile_q4_1, quant_tile, NU_TYPE_Q4_1)
NU_DEFINE_TILE(static, tile_q5_0, quant_tile, NU_TYPE_Q5_0)
NU_DEFINE_TILE(static, tile_q5_1, quant_tile, NU_TYPE_Q5_1)
NU_DEFINE_TILE(static, tile_q8_0, quant_tile, NU_TYPE_Q8_0)
NU_DEFINE_TILE(static, tile_iq4_nl, quant_tile, NU_TYPE_IQ4_NL)
NU_DEFINE_TILE(static, tile_mxfp4, quant_tile, NU_TYPE_MXFP4)

/* IQ4_XS against Q8_K, two sub-blocks (64 elements) per vector: vpdpbusd
 * of the table values' magnitudes with the activations carrying their
 * signs gives 8 int32 lanes per sub-block, multiplied by the sub-block's
 * ls - 32; the lanes hold the super-block's exact sum_b (ls_b - 32) *
 * isum_b, and sum += (d_w * d_a) * that. */
INLINE void iq4_xs_tile(uint32_t type, const nu_matmul_job *job, int64_t row, int32_t b0, int k) {
    (void)type;
    const uint8_t *w = nu_job_row(job, row);
    const int64_t n_in = job->W->n_in, nsb = n_in / NU_QK_K;
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)nu_iq4nl_values));
    const uint8_t *act[NU_TILE_MAX];
    __m512 sum[NU_TILE_MAX];
    for (int v = 0; v < k; v++) act[v] = nu_job_act(job, b0 + v), sum[v] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = w + sb * NU_IQ4_XS_BYTES;
        for (int i = 0; i < NU_IQ4_XS_BYTES; i += 64)
            _mm_prefetch((const char *)(blk + PREFETCH_BYTES + i), _MM_HINT_T0);
        __m512i isum[NU_TILE_MAX];
        for (int v = 0; v < k; v++) isum[v] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const uint8_t *qs = blk + 8 + 32 * p;
            const __m512i val = _mm512_shuffle_epi8(table, unpack_nibbles_pair(qs, qs + 16));
            const __mmask64 negative = _mm512_movepi8_mask(val);
            const __m512i mag = _mm512_abs_epi8(val);
            const __m512i scale =
                _mm512_mask_set1_epi32(_mm512_set1_epi32(nu_iq4_xs_scale(blk, 2 * p) - 32), 0xFF00,
                                       nu_iq4_xs_scale(blk, 2 * p + 1) - 32);
            for (int v = 0; v < k; v++) {
                __m512i x =
                    _mm512_load_si512((const void *)(nu_actk_q(act[v]) + sb * NU_QK_K + 64 * p));
                x = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
                const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), mag, x);
                isum[v] = _mm512_add_epi32(isum[v], _mm512_mullo_epi32(dot, scale));
            }
        }
        const float d = nu_half_to_float(nu_load_u16(blk));
        for (int v = 0; v < k; v++)
            sum[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[v]),
                                     _mm512_set1_ps(d * nu_actk_d(act[v], n_in)[sb]), sum[v]);
    }
    for (int v = 0; v < k; v++)
        job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = nu_hsum512_ps(sum[v]);
}

NU_DEFINE_TILE(static, tile_iq4_xs, iq4_xs_tile, NU_TYPE_IQ4_XS)

/* ---- Activation quantisation ----------------------------------------------- */

/* Same operations as nu_quantize_act_scalar: max|x| ignoring NaN (max_ps
 * returns its second operand when the first is NaN), q = RNE(clamp(x *
 * (127 / max))), d = f16(max / 127), s = d * sum q, m = f16(max / 127 *
 * sum q). */
static void quantize_act(const float *x, int64_t n_in, uint8_t *dst) {
    const int64_t n_pad = nu_act_n_pad(n_in), nb = n_in / NU_QK;
    int8_t *q = (int8_t *)dst;
    float *d = (float *)(void *)(dst + n_pad), *s = d + n_pad / NU_QK, *m_sum = s + n_pad / NU_QK;
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    for (int64_t b = 0; b < nb; b++) {
        __m512 x0 = _mm512_loadu_ps(x + b * NU_QK), x1 = _mm512_loadu_ps(x + b * NU_QK + 16);
        __m512 m = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps());
        m = _mm512_max_ps(_mm512_abs_ps(x1), m);
        float amax = _mm512_reduce_max_ps(m);
        if (!(amax >= NU_ACT_TINY)) {
            memset(q + b * NU_QK, 0, NU_QK);
            d[b] = s[b] = m_sum[b] = 0.0f;
            continue;
        }
        float scale = amax / 127.0f;
        __m512 inv = _mm512_set1_ps(127.0f / amax);
        __m512i q0 =
            _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x0, inv), lo), hi));
        __m512i q1 =
            _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x1, inv), lo), hi));
        _mm_storeu_si128((__m128i *)(q + b * NU_QK), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(q + b * NU_QK + 16), _mm512_cvtepi32_epi8(q1));
        const int isum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        d[b] = nu_round_half(scale);
        s[b] = d[b] * (float)isum;
        m_sum[b] = nu_round_half(scale * (float)isum);
    }
    memset(q + nb * NU_QK, 0, (size_t)(n_pad - nb * NU_QK));
    for (int64_t b = nb; b < n_pad / NU_QK; b++) d[b] = s[b] = m_sum[b] = 0.0f;
}

/* ---- Float weights ----------------------------------------------------------- */

/* 16 weights of a float-type row from element i, widened to float; lanes
 * outside `mask` are zero and not read. */
INLINE __m512 load_weights(uint32_t type, const uint8_t *w, int64_t i, __mmask16 mask) {
    if (type == NU_TYPE_F32) return _mm512_maskz_loadu_ps(mask, w + 4 * i);
    __m256i h = _mm256_maskz_loadu_epi16(mask, w + 2 * i);
    if (type == NU_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16 */
}

/* Dots of one float-type row (n elements) with k float vectors: element i
 * goes to accumulator (i / 16) % 4, lane i % 16; the tail uses masked loads
 * (zero lanes add nothing). */
INLINE void float_dots_vec(uint32_t type, const uint8_t *w, const float *const *x, int k, int64_t n,
                           __m512 *s) {
    __m512 acc[NU_TILE_MAX][4];
    for (int v = 0; v < k; v++)
        for (int u = 0; u < 4; u++) acc[v][u] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int u = 0; u < 4; u++) {
            __m512 wv = load_weights(type, w, i + 16 * u, 0xFFFF);
            for (int v = 0; v < k; v++)
                acc[v][u] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[v] + i + 16 * u), acc[v][u]);
        }
    }
    for (int u = 0; u < 4 && i + 16 * u < n; u++) {
        int64_t left = n - i - 16 * u;
        __mmask16 mask = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
        __m512 wv = load_weights(type, w, i + 16 * u, mask);
        for (int v = 0; v < k; v++)
            acc[v][u] =
                _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, x[v] + i + 16 * u), acc[v][u]);
    }
    for (int v = 0; v < k; v++)
        s[v] =
            _mm512_add_ps(_mm512_add_ps(acc[v][0], acc[v][1]), _mm512_add_ps(acc[v][2], acc[v][3]));
}

INLINE void float_dots(uint32_t type, const uint8_t *w, const float *const *x, int k, int64_t n,
                       float *out) {
    __m512 s[NU_TILE_MAX];
    float_dots_vec(type, w, x, k, n, s);
    for (int v = 0; v < k; v++) out[v] = nu_hsum512_ps(s[v]);
}

/* Float-weight tile: activation rows straight from x. */
INLINE void float_tile(uint32_t type, const nu_matmul_job *job, int64_t row, int32_t b0, int k) {
    const float *x[NU_TILE_MAX];
    float out[NU_TILE_MAX];
    const int64_t n = job->W->n_in;
    for (int v = 0; v < k; v++) x[v] = job->x + (size_t)(b0 + v) * (size_t)n;
    float_dots(type, nu_job_row(job, row), x, k, n, out);
    for (int v = 0; v < k; v++) job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = out[v];
}

NU_DEFINE_TILE(static, tile_f32, float_tile, NU_TYPE_F32)
NU_DEFINE_TILE(static, tile_f16, float_tile, NU_TYPE_F16)
NU_DEFINE_TILE(static, tile_bf16, float_tile, NU_TYPE_BF16)

/* ---- Vector helpers (the k = 1 float kernels) ------------------------------ */

/* ---- Attention: query heads against f16 / f32 key and value rows ---------- */

/* Most heads one call of dots, mads, dots_rows or mads_rows takes here. */
#define HEADS 8

/* Runs CALL(T, K) with the row type (NU_TYPE_F32 or NU_TYPE_F16) and the
 * head count k (1..HEADS) as the compile-time constants T and K. */
#define SWITCH_ROW_HEADS(type, k, CALL)                                                            \
    switch ((k) + HEADS * ((type) == NU_TYPE_F16)) {                                               \
    case 1: CALL(NU_TYPE_F32, 1); break;                                                           \
    case 2: CALL(NU_TYPE_F32, 2); break;                                                           \
    case 3: CALL(NU_TYPE_F32, 3); break;                                                           \
    case 4: CALL(NU_TYPE_F32, 4); break;                                                           \
    case 5: CALL(NU_TYPE_F32, 5); break;                                                           \
    case 6: CALL(NU_TYPE_F32, 6); break;                                                           \
    case 7: CALL(NU_TYPE_F32, 7); break;                                                           \
    case 8: CALL(NU_TYPE_F32, 8); break;                                                           \
    case 9: CALL(NU_TYPE_F16, 1); break;                                                           \
    case 10: CALL(NU_TYPE_F16, 2); break;                                                          \
    case 11: CALL(NU_TYPE_F16, 3); break;                                                          \
    case 12: CALL(NU_TYPE_F16, 4); break;                                                          \
    case 13: CALL(NU_TYPE_F16, 5); break;                                                          \
    case 14: CALL(NU_TYPE_F16, 6); break;                                                          \
    case 15: CALL(NU_TYPE_F16, 7); break;                                                          \
    default: CALL(NU_TYPE_F16, 8); break;                                                          \
    }

/* One row's dots with k query vectors: a single chain of multiply-adds per
 * vector over the row's 16-element chunks (element i in lane i % 16), the
 * tail chunk masked (zero lanes add nothing). A head row is short (64 to
 * 256 elements) and k chains, and the next rows', run side by side; one
 * chain keeps the work at one multiply-add per chunk and vector. */
INLINE void head_dots_vec(uint32_t type, const uint8_t *w, const float *const *x, int k, int64_t n,
                          __m512 *s) {
    for (int v = 0; v < k; v++) s[v] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mask = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 wv = load_weights(type, w, i, mask);
        for (int v = 0; v < k; v++)
            s[v] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, x[v] + i), s[v]);
    }
}

INLINE void head_dots(uint32_t type, const uint8_t *w, const float *const *x, int k, int64_t n,
                      float *out) {
    __m512 s[HEADS];
    head_dots_vec(type, w, x, k, n, s);
    for (int v = 0; v < k; v++) out[v] = nu_hsum512_ps(s[v]);
}

static float dot_f32(const float *a, const float *b, int64_t n) {
    float out;
    head_dots(NU_TYPE_F32, (const uint8_t *)a, &b, 1, n, &out);
    return out;
}

static float dot_f16(const uint16_t *a, const float *b, int64_t n) {
    float out;
    head_dots(NU_TYPE_F16, (const uint8_t *)a, &b, 1, n, &out);
    return out;
}

static void dots(uint32_t type, const void *row, const float *const *q, int k, int64_t n,
                 float *out){
#define DOTS(T, K) head_dots(T, row, q, K, n, out)
    SWITCH_ROW_HEADS(type, k, DOTS)
#undef DOTS
}

/* y += a * x, 16 lanes at a time, the tail masked. */
INLINE void mad(uint32_t type, float *y, const void *x, float a, int64_t n) {
    const __m512 av = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = load_weights(type, x, i, mask);
        __m512 yv = _mm512_maskz_loadu_ps(mask, y + i);
        _mm512_mask_storeu_ps(y + i, mask, _mm512_fmadd_ps(av, xv, yv));
    }
}

static void mad_f32(float *y, const float *x, float a, int64_t n) {
    mad(NU_TYPE_F32, y, x, a, n);
}

static void mad_f16(float *y, const uint16_t *x, float a, int64_t n) {
    mad(NU_TYPE_F16, y, x, a, n);
}

/* nu_hsum512_ps of 16 vectors at once: the same tree of additions (halves,
 * quarters, pairs, then the last two) on lanes packed from several vectors,
 * so each result is bit-identical. It is split where the tree allows:
 * hsum_quad takes vectors 4m .. 4m+3 through the first two levels (to lane
 * 4c + j: vector 4m + j's quarter c), hsum_finish the four quads through the
 * last two, after which lane 4c + m holds vector 4m + c, and a permutation
 * puts vector r in lane r. */
INLINE __m512 hsum_quad(__m512 s0, __m512 s1, __m512 s2, __m512 s3) {
    /* [a0..7 + a8..15 | b0..7 + b8..15] */
    const __m512 h0 = _mm512_add_ps(_mm512_shuffle_f32x4(s0, s1, 0x44),
                                    _mm512_shuffle_f32x4(s0, s1, 0xEE)),
                 h1 = _mm512_add_ps(_mm512_shuffle_f32x4(s2, s3, 0x44),
                                    _mm512_shuffle_f32x4(s2, s3, 0xEE));
    /* 128-bit blocks: the four vectors, four lanes each */
    return _mm512_add_ps(_mm512_shuffle_f32x4(h0, h1, 0x88), _mm512_shuffle_f32x4(h0, h1, 0xDD));
}

INLINE __m512 hsum_finish(__m512 q0, __m512 q1, __m512 q2, __m512 q3) {
    /* block c: vectors c and 4 + c (then 8 + c and 12 + c), two lanes each */
    const __m512 p0 = _mm512_add_ps(_mm512_shuffle_ps(q0, q1, 0x44),
                                    _mm512_shuffle_ps(q0, q1, 0xEE)),
                 p1 = _mm512_add_ps(_mm512_shuffle_ps(q2, q3, 0x44),
                                    _mm512_shuffle_ps(q2, q3, 0xEE));
    const __m512 r =
        _mm512_add_ps(_mm512_shuffle_ps(p0, p1, 0x88), _mm512_shuffle_ps(p0, p1, 0xDD));
    return _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

/* The dots of 16 rows with H (1..4) query heads from head h0, in head_dots's
 * order: rows are taken four at a time, and for each 16-element chunk the
 * four rows' chunks and the H heads' chunks are loaded once for their 4 H
 * multiply-adds (4 H chains, held in registers); each four rows go through
 * the first two levels of the reduction at once. `ahead` (NULL: none) are
 * the next 16 rows, prefetched. */
INLINE void dots16_heads(uint32_t type, const uint8_t *const *rows, const uint8_t *const *ahead,
                         const float *const *q, int h0, int H, int64_t n, float *out,
                         size_t out_stride) {
    const size_t bytes = (size_t)n * (type == NU_TYPE_F16 ? 2 : 4);
    __m512 quad[4][4];
    for (int m = 0; m < 4; m++) {
        if (ahead)
            for (int r = 0; r < 4; r++)
                for (size_t off = 0; off < bytes; off += 64)
                    _mm_prefetch((const char *)(ahead[4 * m + r] + off), _MM_HINT_T0);
        __m512 acc[4][4];
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < H; h++) acc[r][h] = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 mask = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
            __m512 w[4];
            for (int r = 0; r < 4; r++) w[r] = load_weights(type, rows[4 * m + r], i, mask);
            for (int h = 0; h < H; h++) {
                const __m512 qv = _mm512_maskz_loadu_ps(mask, q[h0 + h] + i);
                for (int r = 0; r < 4; r++) acc[r][h] = _mm512_fmadd_ps(w[r], qv, acc[r][h]);
            }
        }
        for (int h = 0; h < H; h++)
            quad[h][m] = hsum_quad(acc[0][h], acc[1][h], acc[2][h], acc[3][h]);
    }
    for (int h = 0; h < H; h++)
        _mm512_storeu_ps(out + (size_t)(h0 + h) * out_stride,
                         hsum_finish(quad[h][0], quad[h][1], quad[h][2], quad[h][3]));
}

/* dots16_heads specialised on the common head sizes (constant chunk loops). */
INLINE void dots16_heads_n(uint32_t type, const uint8_t *const *rows, const uint8_t *const *ahead,
                           const float *const *q, int h0, int H, int64_t n, float *out,
                           size_t out_stride) {
    if (n == 64)
        dots16_heads(type, rows, ahead, q, h0, H, 64, out, out_stride);
    else if (n == 128)
        dots16_heads(type, rows, ahead, q, h0, H, 128, out, out_stride);
    else
        dots16_heads(type, rows, ahead, q, h0, H, n, out, out_stride);
}

/* nu_vec_dots_rows: 16 rows at a time, the heads four at a time over them
 * (the rows stay in L1 between head groups); the tail row by row. */
INLINE void dots_rows_k(uint32_t type, const float *const *q, int k, const uint8_t *base,
                        size_t stride, const int32_t *cells, int64_t n_rows, int64_t n, float *out,
                        size_t out_stride) {
    int64_t j0 = 0;
    for (; j0 + 16 <= n_rows; j0 += 16) {
        const uint8_t *rows[16], *ahead[16];
        const bool more = nu_rows_at(base, stride, cells, j0, 16, n_rows, rows, ahead);
        for (int h0 = 0; h0 < k; h0 += 4)
            dots16_heads_n(type, rows, h0 == 0 && more ? ahead : NULL, q, h0,
                           k - h0 < 4 ? k - h0 : 4, n, out + (size_t)j0, out_stride);
    }
    for (; j0 < n_rows; j0++) {
        float o[HEADS];
        head_dots(type, base + (size_t)cells[j0] * stride, q, k, n, o);
        for (int v = 0; v < k; v++) out[(size_t)v * out_stride + (size_t)j0] = o[v];
    }
}

static void dots_rows(uint32_t type, const float *const *q, int k, const void *base, size_t stride,
                      const int32_t *cells, int64_t n_rows, int64_t n, float *out,
                      size_t out_stride) {
#define DOTS_ROWS(T, K) dots_rows_k(T, q, K, base, stride, cells, n_rows, n, out, out_stride)
    SWITCH_ROW_HEADS(type, k, DOTS_ROWS)
#undef DOTS_ROWS
}

/* mad() for k outputs, the row converted once per 16 elements. */
static void mads(uint32_t type, float *const *y, const float *a, int k, const void *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = load_weights(type, x, i, mask);
        for (int v = 0; v < k; v++) {
            __m512 yv = _mm512_maskz_loadu_ps(mask, y[v] + i);
            _mm512_mask_storeu_ps(y[v] + i, mask, _mm512_fmadd_ps(_mm512_set1_ps(a[v]), xv, yv));
        }
    }
}

/* Columns [i0, i0 + 16 D) of k heads in k D accumulators over every row
 * (D = 4 up to four heads, 2 beyond, so they stay in registers). */
INLINE void mads_rows_block(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                            const uint8_t *base, size_t stride, const int32_t *cells,
                            int64_t n_rows, int64_t n, int64_t i0) {
    enum { D = 4 };
    const int nd = k > 4 ? 2 : D;
    __m512 acc[HEADS][D];
    __mmask16 mask[D];
    for (int d = 0; d < nd; d++) {
        int64_t left = n - i0 - 16 * d;
        mask[d] = left >= 16 ? 0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        for (int v = 0; v < k; v++) acc[v][d] = _mm512_maskz_loadu_ps(mask[d], y[v] + i0 + 16 * d);
    }
    const size_t esz = type == NU_TYPE_F32 ? 4 : 2;
    for (int64_t j = 0; j < n_rows; j++) {
        const uint8_t *row = base + (size_t)cells[j] * stride;
        if (j + 16 < n_rows) /* the rows are scattered: ask for a later one early */
            for (size_t off = 0; off < (size_t)(16 * nd) * esz; off += 64)
                _mm_prefetch(
                    (const char *)(base + (size_t)cells[j + 16] * stride + (size_t)i0 * esz + off),
                    _MM_HINT_T0);
        for (int d = 0; d < nd; d++) {
            __m512 xv = load_weights(type, row, i0 + 16 * d, mask[d]);
            for (int v = 0; v < k; v++)
                acc[v][d] = _mm512_fmadd_ps(_mm512_set1_ps(a[(size_t)v * a_stride + (size_t)j]), xv,
                                            acc[v][d]);
        }
    }
    for (int d = 0; d < nd; d++)
        for (int v = 0; v < k; v++) _mm512_mask_storeu_ps(y[v] + i0 + 16 * d, mask[d], acc[v][d]);
}

static void mads_rows(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                      const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                      int64_t n) {
    const int64_t width = k > 4 ? 32 : 64;
#define MADS_ROWS(T, K) mads_rows_block(T, y, a, a_stride, K, base, stride, cells, n_rows, n, i0)
    for (int64_t i0 = 0; i0 < n; i0 += width) {
        SWITCH_ROW_HEADS(type, k, MADS_ROWS)
    }
#undef MADS_ROWS
}

static void round_f16(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mask, x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm512_mask_storeu_ps(x + i, mask, _mm512_cvtph_ps(h));
    }
}

/* e^x for x <= 0: x = n ln2 + r with n = round(x log2 e) and |r| <= ln2 / 2
 * (ln2 split in two so n ln2 is exact to float precision), e^r by its
 * degree-6 Taylor polynomial (relative error below 2e-7 on that range),
 * then scaled by 2^n with vscalefps, which underflows smoothly to 0. */
INLINE __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f)); /* e^-104 is 0 in float */
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static void softmax(float *x, int64_t n, float max, int round16) {
    const __m512 m = _mm512_set1_ps(max);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), m));
        e = _mm512_maskz_mov_ps(mask, e);
        _mm512_mask_storeu_ps(x + i, mask, e);
        acc = _mm512_add_ps(acc, e);
    }
    const __m512 sum = _mm512_set1_ps(nu_hsum512_ps(acc));
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, mask, _mm512_div_ps(_mm512_maskz_loadu_ps(mask, x + i), sum));
    }
    if (round16) round_f16(x, n);
}

static void swiglu(float *gate, const float *up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(mask, gate + i);
        const __m512 t = exp_neg(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
        const __mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
        const __m512 s = _mm512_div_ps(_mm512_mask_mov_ps(one, neg, t), _mm512_add_ps(one, t));
        _mm512_mask_storeu_ps(
            gate + i, mask,
            _mm512_mul_ps(_mm512_mul_ps(g, s), _mm512_maskz_loadu_ps(mask, up + i)));
    }
}

/* The row in 16-lane steps, the tail masked. */
static void delta_rule(float *m_out, const float *m_in, const float *q, const float *k,
                       const float *v, float a, float beta, float scale, int64_t dk, int64_t dv,
                       float *o) {
    const __m512 av = _mm512_set1_ps(a);
    for (int64_t j = 0; j < dv; j++) {
        float *row = m_out + j * dk;
        const float *in = m_in ? m_in + j * dk : NULL;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; in && i < dk; i += 16) {
            __mmask16 mask = dk - i >= 16 ? 0xFFFF : (__mmask16)((1u << (dk - i)) - 1);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, in + i),
                                  _mm512_maskz_loadu_ps(mask, k + i), acc);
        }
        const __m512 d = _mm512_set1_ps(beta * (v[j] - a * nu_hsum512_ps(acc)));
        __m512 s = _mm512_setzero_ps();
        for (int64_t i = 0; i < dk; i += 16) {
            __mmask16 mask = dk - i >= 16 ? 0xFFFF : (__mmask16)((1u << (dk - i)) - 1);
            __m512 x =
                in ? _mm512_mul_ps(av, _mm512_maskz_loadu_ps(mask, in + i)) : _mm512_setzero_ps();
            x = _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(mask, k + i), x);
            _mm512_mask_storeu_ps(row + i, mask, x);
            s = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(mask, q + i), s);
        }
        o[j] = scale * nu_hsum512_ps(s);
    }
}

static void to_f16(uint16_t *dst, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(
            dst + i, mask,
            _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mask, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

const nu_kernel_set nu_kernels_avx512_set = {
    .name = "avx512",
    .tile =
        {
            [NU_TYPE_F32] = tile_f32,
            [NU_TYPE_F16] = tile_f16,
            [NU_TYPE_BF16] = tile_bf16,
            [NU_TYPE_Q4_0] = tile_q4_0,
            [NU_TYPE_Q4_1] = tile_q4_1,
            [NU_TYPE_Q5_0] = tile_q5_0,
            [NU_TYPE_Q5_1] = tile_q5_1,
            [NU_TYPE_Q8_0] = tile_q8_0,
            [NU_TYPE_Q2_K] = nu_tile_q2_k_avx512,
            [NU_TYPE_Q3_K] = nu_tile_q3_k_avx512,
            [NU_TYPE_Q4_K] = nu_tile_q4_k_avx512,
            [NU_TYPE_Q5_K] = nu_tile_q5_k_avx512,
            [NU_TYPE_Q6_K] = nu_tile_q6_k_avx512,
            [NU_TYPE_IQ4_NL] = tile_iq4_nl,
            [NU_TYPE_IQ4_XS] = tile_iq4_xs,
            [NU_TYPE_MXFP4] = tile_mxfp4,
        },
    .panel = {[NU_TYPE_Q4_0] = nu_panel_q4_0_avx512,
              [NU_TYPE_Q8_0] = nu_panel_q8_0_avx512,
              [NU_TYPE_Q4_K] = nu_panel_q4_k_avx512,
              [NU_TYPE_F16] = nu_panel_f16_avx512},
    .panel2 = {[NU_TYPE_F16] = nu_panel2_f16_avx512},
    .panel4 = {[NU_TYPE_F16] = nu_panel4_f16_avx512},
    .quantize_act = quantize_act,
    .quantize_act_k = nu_quantize_act_k_avx512,
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .mad_f32 = mad_f32,
    .mad_f16 = mad_f16,
    .dots = dots,
    .mads = mads,
    .mads_rows = mads_rows,
    .quant_dots_rows = nu_quant_dots_rows_avx512,
    .quant_mads_rows = nu_quant_mads_rows_avx512,
    .dots_rows = dots_rows,
    .attn_heads = HEADS,
    .round_f16 = round_f16,
    .softmax = softmax,
    .scale_max = nu_scale_max_avx2,
    .read = nu_read_avx2,
    .swiglu = swiglu,
    .to_f16 = to_f16,
    .delta_rule = delta_rule,
};
