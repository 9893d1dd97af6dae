/* dot_avx2.c - kernels for CPUs with AVX2, FMA and F16C.
 *
 * The same scheme as the AVX-512 kernels (see dot_avx512.c), one block per
 * 256-bit register and groups of 8 blocks per scale vector:
 *   - the 8 f16 scales (and minima) of a group are loaded and widened; times
 *     the 8 activation scales they give one float per block;
 *   - each block's 32 quants become unsigned bytes; vpmaddubsw multiplies them
 *     with the int8 activations and adds neighbours into int16 (no overflow:
 *     2 * 31 * 127 for Q5, 2 * 128 * 127 for Q8), vpmaddwd adds pairs of those
 *     into 8 int32 lanes;
 *   - the lanes, converted to float, are multiplied by the block's scale into
 *     one of two accumulators (alternating blocks).
 * The _0 offsets and _1 minima are handled through d_a * sum(q_a) terms, and
 * Q8_0 through |w| and sign-adjusted activations, as at the AVX-512 level.
 */
#include <immintrin.h>
#include <math.h>
#include <stdalign.h>

#include "iquant.h"
#include "simd_x86.h"

#define INLINE static inline __attribute__((always_inline))
#define GROUP 8             /* blocks per scale vector */
#define NACC 2              /* float accumulators per activation row */
#define PREFETCH_BYTES 4096 /* how far ahead in the weights to prefetch */

/* ---- Helpers --------------------------------------------------------------- */

/* A block's 4-bit quants as 32 bytes in element order: the 16 bytes twice,
 * the upper copy shifted right by 4, masked to nibbles. */
INLINE __m256i unpack_nibbles(const uint8_t *qs) {
    __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    __m256i shifted = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
}

/* 16 in the bytes whose bit is set in a Q5 high-bit word: byte j takes
 * byte j / 8 of the word and tests bit j % 8. */
INLINE __m256i high_bits(const uint8_t *qh) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)nu_load_u32(qh)), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(16));
}

/* The low 16 bits of 8 int32 lanes, packed into 8 int16. */
INLINE __m128i low_halves(__m256i v) {
    const __m256i pick = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i packed =
        _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, pick), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_castsi256_si128(packed);
}

/* Four 32-bit words `stride` bytes apart, built with inserts (an initialiser
 * list tends to go through the stack and stall store forwarding). */
INLINE __m128i load4_u32(const uint8_t *p, int stride) {
    __m128i v = _mm_cvtsi32_si128((int)nu_load_u32(p));
    v = _mm_insert_epi32(v, (int)nu_load_u32(p + stride), 1);
    v = _mm_insert_epi32(v, (int)nu_load_u32(p + 2 * stride), 2);
    return _mm_insert_epi32(v, (int)nu_load_u32(p + 3 * stride), 3);
}

/* ---- Quantised weights ----------------------------------------------------- */

typedef struct quant_acc {
    __m256 sum[NU_TILE_MAX][NACC];
    __m256 corr[NU_TILE_MAX];
} quant_acc;

/* scale[v] lane i = d_w(block i) * d_a(block i); corr[v] += d_w * s_a (_0
 * types) or m_w * m_a (_1 types). */
INLINE void group_scales(uint32_t type, const uint8_t *wg, const uint8_t *const *act, int64_t n_pad,
                         int64_t g, int k, __m256 *scale, quant_acc *a) {
    const int b = block_bytes(type);
    /* 32 bits at each block start: d in the low half, m (if any) in the high.
     * Plain loads: vpgatherdd is slow on several AVX2 CPUs. */
    const __m256i raw = _mm256_inserti128_si256(_mm256_castsi128_si256(load4_u32(wg, b)),
                                                load4_u32(wg + 4 * b, b), 1);
    __m256 dw = _mm256_cvtph_ps(low_halves(raw));
    if (type == NU_TYPE_MXFP4) { /* E8M0 bytes, not halves */
        alignas(32) float e[GROUP];
        for (int i = 0; i < GROUP; i++) e[i] = nu_e8m0_half(wg[i * NU_MXFP4_BYTES]);
        dw = _mm256_load_ps(e);
    }
    const __m256 mw = has_min(type) ? _mm256_cvtph_ps(low_halves(_mm256_srli_epi32(raw, 16))) : dw;
    for (int v = 0; v < k; v++) {
        scale[v] = _mm256_mul_ps(dw, _mm256_load_ps(nu_act_d(act[v], n_pad) + g * GROUP));
        if (has_min(type) || quant_offset(type))
            a->corr[v] = _mm256_fmadd_ps(
                mw, _mm256_load_ps(act_sums(type, act[v], n_pad) + g * GROUP), a->corr[v]);
    }
}

/* One group of 8 blocks at wg against k activation rows (group g of each). */
INLINE void quant_group(uint32_t type, const uint8_t *wg, const uint8_t *const *act, int64_t n_pad,
                        int64_t g, int k, quant_acc *a) {
    const int bytes = block_bytes(type);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 scale[NU_TILE_MAX];
    group_scales(type, wg, act, n_pad, g, k, scale, a);
#pragma GCC unroll 8
    for (int b = 0; b < GROUP; b++) {
        const uint8_t *blk = wg + b * bytes;
        __m256i wq, w = _mm256_setzero_si256();
        if (type == NU_TYPE_Q8_0) {
            w = _mm256_loadu_si256((const __m256i *)(blk + 2));
            wq = _mm256_abs_epi8(w);
        } else if (is_table(type)) {
            const int8_t *table = type == NU_TYPE_MXFP4 ? nu_fp4x2_values : nu_iq4nl_values;
            w = _mm256_shuffle_epi8(
                _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)table)),
                unpack_nibbles(blk + nibble_offset(type)));
            wq = _mm256_abs_epi8(w);
        } else {
            wq = unpack_nibbles(blk + nibble_offset(type));
            if (has_high_bits(type))
                wq = _mm256_or_si256(wq, high_bits(blk + nibble_offset(type) - 4));
        }
        const __m256i select = _mm256_set1_epi32(b);
        for (int v = 0; v < k; v++) {
            __m256i x = _mm256_load_si256(
                (const __m256i *)(const void *)(nu_act_q(act[v]) + (g * GROUP + b) * NU_QK));
            if (signed_weights(type)) x = _mm256_sign_epi8(x, w);
            __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, x), ones);
            __m256 s = _mm256_permutevar8x32_ps(scale[v], select);
            a->sum[v][b % NACC] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, a->sum[v][b % NACC]);
        }
    }
}

/* Dot products of weight row `row` with activation rows b0 .. b0+k-1; a last
 * partial group goes through a zero-padded copy. */
INLINE void quant_tile(uint32_t type, const nu_matmul_job *job, int64_t row, int32_t b0, int k) {
    const int bytes = block_bytes(type);
    const uint8_t *w = nu_job_row(job, row);
    const int64_t nb = job->W->n_in / NU_QK, n_pad = job->act_n_pad, full = nb / GROUP;
    const uint8_t *act[NU_TILE_MAX];
    quant_acc a;
    for (int v = 0; v < k; v++) {
        act[v] = nu_job_act(job, b0 + v);
        a.corr[v] = _mm256_setzero_ps();
        for (int i = 0; i < NACC; i++) a.sum[v][i] = _mm256_setzero_ps();
    }
    for (int64_t g = 0; g < full; g++) {
        const uint8_t *wg = w + g * GROUP * bytes;
        for (int i = 0; i < GROUP * bytes; i += 64)
            _mm_prefetch((const char *)(wg + PREFETCH_BYTES + i), _MM_HINT_T0);
        quant_group(type, wg, act, n_pad, g, k, &a);
    }
    if (nb % GROUP) {
        alignas(32) uint8_t tail[GROUP * NU_Q8_0_BYTES];
        memset(tail, 0, sizeof tail);
        memcpy(tail, w + full * GROUP * bytes, (size_t)(nb % GROUP) * (size_t)bytes);
        quant_group(type, tail, act, n_pad, full, k, &a);
    }
    for (int v = 0; v < k; v++) {
        __m256 t = _mm256_add_ps(a.sum[v][0], a.sum[v][1]);
        if (quant_offset(type))
            t = _mm256_fmadd_ps(a.corr[v], _mm256_set1_ps(-(float)quant_offset(type)), t);
        else if (has_min(type))
            t = _mm256_add_ps(t, a.corr[v]);
        job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = nu_hsum256_ps(t);
    }
}

NU_DEFINE_TILE(static, tile_q4_0, quant_tile, NU_TYPE_Q4_0)
NU_DEFINE_TILE(static, tile_q4_1, quant_tile, NU_TYPE_Q4_1)
NU_DEFINE_TILE(static, tile_q5_0, quant_tile, NU_TYPE_Q5_0)
NU_DEFINE_TILE(static, tile_q5_1, quant_tile, NU_TYPE_Q5_1)
NU_DEFINE_TILE(static, tile_q8_0, quant_tile, NU_TYPE_Q8_0)
NU_DEFINE_TILE(static, tile_iq4_nl, quant_tile, NU_TYPE_IQ4_NL)
NU_DEFINE_TILE(static, tile_mxfp4, quant_tile, NU_TYPE_MXFP4)

/* IQ4_XS against Q8_K: per sub-block of 32 the table values' magnitudes
 * meet the activations carrying their signs (vpmaddubsw: at most
 * 2 * 127 * 127, no saturation), vpmaddwd applies the sub-block's scale
 * ls - 32, and the int32 lanes hold the super-block's exact
 * sum_b (ls_b - 32) * isum_b; then sum += (d_w * d_a) * that. */
INLINE void iq4_xs_tile(uint32_t type, const nu_matmul_job *job, int64_t row, int32_t b0, int k) {
    (void)type;
    const uint8_t *w = nu_job_row(job, row);
    const int64_t n_in = job->W->n_in, nsb = n_in / NU_QK_K;
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)nu_iq4nl_values));
    const uint8_t *act[NU_TILE_MAX];
    __m256 sum[NU_TILE_MAX];
    for (int v = 0; v < k; v++) act[v] = nu_job_act(job, b0 + v), sum[v] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = w + sb * NU_IQ4_XS_BYTES;
        for (int i = 0; i < NU_IQ4_XS_BYTES; i += 64)
            _mm_prefetch((const char *)(blk + PREFETCH_BYTES + i), _MM_HINT_T0);
        __m256i isum[NU_TILE_MAX];
        for (int v = 0; v < k; v++) isum[v] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int b = 0; b < 8; b++) {
            const __m256i val = _mm256_shuffle_epi8(table, unpack_nibbles(blk + 8 + 16 * b));
            const __m256i mag = _mm256_abs_epi8(val);
            const __m256i scale = _mm256_set1_epi16((short)(nu_iq4_xs_scale(blk, b) - 32));
            for (int v = 0; v < k; v++) {
                const __m256i x = _mm256_load_si256(
                    (const __m256i *)(const void *)(nu_actk_q(act[v]) + sb * NU_QK_K + 32 * b));
                const __m256i p = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(x, val));
                isum[v] = _mm256_add_epi32(isum[v], _mm256_madd_epi16(p, scale));
            }
        }
        const float d = nu_half_to_float(nu_load_u16(blk));
        for (int v = 0; v < k; v++)
            sum[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[v]),
                                     _mm256_set1_ps(d * nu_actk_d(act[v], n_in)[sb]), sum[v]);
    }
    for (int v = 0; v < k; v++)
        job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = nu_hsum256_ps(sum[v]);
}

NU_DEFINE_TILE(static, tile_iq4_xs, iq4_xs_tile, NU_TYPE_IQ4_XS)

/* ---- Activation quantisation ----------------------------------------------- */

/* The largest of 8 floats (exact in any order). */
INLINE float hmax_ps(__m256 v) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* The same operations as nu_quantize_act_scalar (see dot_avx512.c). */
static void quantize_act(const float *x, int64_t n_in, uint8_t *dst) {
    const int64_t n_pad = nu_act_n_pad(n_in), nb = n_in / NU_QK;
    int8_t *q = (int8_t *)dst;
    float *d = (float *)(void *)(dst + n_pad), *s = d + n_pad / NU_QK, *m_sum = s + n_pad / NU_QK;
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t b = 0; b < nb; b++) {
        __m256 xv[4];
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            xv[i] = _mm256_loadu_ps(x + b * NU_QK + 8 * i);
            m = _mm256_max_ps(_mm256_and_ps(xv[i], abs_mask), m);
        }
        float amax = hmax_ps(m);
        if (!(amax >= NU_ACT_TINY)) {
            memset(q + b * NU_QK, 0, NU_QK);
            d[b] = s[b] = m_sum[b] = 0.0f;
            continue;
        }
        float scale = amax / 127.0f;
        __m256 inv = _mm256_set1_ps(127.0f / amax);
        __m256i qi[4];
        for (int i = 0; i < 4; i++)
            qi[i] =
                _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(xv[i], inv), lo), hi));
        /* int32 -> int8 with saturating packs, then undo their lane interleave. */
        __m256i p16 = _mm256_packs_epi32(qi[0], qi[1]), p16b = _mm256_packs_epi32(qi[2], qi[3]);
        __m256i p8 = _mm256_packs_epi16(p16, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + b * NU_QK), p8);
        __m256i sum =
            _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
        const int isum = _mm_cvtsi128_si32(s4);
        d[b] = nu_round_half(scale);
        s[b] = d[b] * (float)isum;
        m_sum[b] = nu_round_half(scale * (float)isum);
    }
    memset(q + nb * NU_QK, 0, (size_t)(n_pad - nb * NU_QK));
    for (int64_t b = nb; b < n_pad / NU_QK; b++) d[b] = s[b] = m_sum[b] = 0.0f;
}

/* ---- Float weights ----------------------------------------------------------- */

/* 8 weights of a float-type row from element i, widened to float. */
INLINE __m256 load_weights(uint32_t type, const uint8_t *w, int64_t i) {
    if (type == NU_TYPE_F32) return _mm256_loadu_ps((const float *)(const void *)(w + 4 * i));
    __m128i h = _mm_loadu_si128((const __m128i *)(w + 2 * i));
    if (type == NU_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16 */
}

/* Bytes per element of a float type. */
INLINE int elem_bytes(uint32_t type) {
    return type == NU_TYPE_F32 ? 4 : 2;
}

/* Dots of one float-type row (n elements) with k float vectors: element i
 * goes to accumulator (i / 8) % 4, lane i % 8. A tail of fewer than 32
 * elements is copied into zero-padded buffers and run as one more step. */
INLINE void float_dots(uint32_t type, const uint8_t *w, const float *const *x, int k, int64_t n,
                       float *out) {
    __m256 acc[NU_TILE_MAX][4];
    for (int v = 0; v < k; v++)
        for (int u = 0; u < 4; u++) acc[v][u] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int u = 0; u < 4; u++) {
            __m256 wv = load_weights(type, w, i + 8 * u);
            for (int v = 0; v < k; v++)
                acc[v][u] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[v] + i + 8 * u), acc[v][u]);
        }
    }
    if (i < n) {
        alignas(32) uint8_t wt[32 * 4] = {0};
        alignas(32) float xt[32];
        const int left = (int)(n - i);
        memcpy(wt, w + i * elem_bytes(type), (size_t)left * (size_t)elem_bytes(type));
        for (int u = 0; u < 4 && 8 * u < left; u++) {
            __m256 wv = load_weights(type, wt, 8 * u);
            for (int v = 0; v < k; v++) {
                memset(xt, 0, sizeof xt);
                memcpy(xt, x[v] + i, (size_t)left * sizeof(float));
                acc[v][u] = _mm256_fmadd_ps(wv, _mm256_load_ps(xt + 8 * u), acc[v][u]);
            }
        }
    }
    for (int v = 0; v < k; v++)
        out[v] = nu_hsum256_ps(_mm256_add_ps(_mm256_add_ps(acc[v][0], acc[v][1]),
                                             _mm256_add_ps(acc[v][2], acc[v][3])));
}

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

/* ---- Vector helpers ----------------------------------------------------------- */

/* Attention's dots (nu_vec_dot_f32/f16, nu_vec_dots, nu_vec_dots_rows):
 * one chain of multiply-adds per query vector over the row's 8-element
 * chunks (element i in lane i % 8), a tail of fewer than 8 from zero-padded
 * copies, then nu_hsum256_ps. A head row is short and the vectors' chains,
 * and the next rows', run side by side. */
INLINE void head_dots_vec(uint32_t type, const uint8_t *w, const float *const *x, int k, int64_t n,
                          __m256 *s) {
    for (int v = 0; v < k; v++) s[v] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 wv = load_weights(type, w, i);
        for (int v = 0; v < k; v++) s[v] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[v] + i), s[v]);
    }
    if (i < n) {
        alignas(32) uint8_t wt[8 * 4] = {0};
        alignas(32) float xt[8];
        const int left = (int)(n - i);
        memcpy(wt, w + i * elem_bytes(type), (size_t)left * (size_t)elem_bytes(type));
        const __m256 wv = load_weights(type, wt, 0);
        for (int v = 0; v < k; v++) {
            memset(xt, 0, sizeof xt);
            memcpy(xt, x[v] + i, (size_t)left * sizeof(float));
            s[v] = _mm256_fmadd_ps(wv, _mm256_load_ps(xt), s[v]);
        }
    }
}

INLINE void head_dots(uint32_t type, const uint8_t *w, const float *const *x, int k, int64_t n,
                      float *out) {
    __m256 s[NU_TILE_MAX];
    head_dots_vec(type, w, x, k, n, s);
    for (int v = 0; v < k; v++) out[v] = nu_hsum256_ps(s[v]);
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

static void mad_f32(float *y, const float *x, float a, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static void mad_f16(float *y, const uint16_t *x, float a, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, xv, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += a * nu_f16_to_f32(x[i]);
}

static void dots(uint32_t type, const void *row, const float *const *q, int k, int64_t n,
                 float *out){
#define DOTS(T, K) head_dots(T, row, q, K, n, out)
    NU_SWITCH_FLOAT_HEADS(type, k, DOTS)
#undef DOTS
}

/* nu_hsum256_ps of 8 vectors at once, split where its tree allows:
 * hsum_pair takes the halves step of two vectors (lanes 0-3 vector a's
 * half-sums, 4-7 b's), hsum_quarters the next step of two such pairs (the
 * vectors of pair a in lanes 0-1 and 4-5, of pair b in 2-3 and 6-7), and
 * hsum_last the final step of two of those, after which a permutation puts
 * vector r in lane r. Each result is the bits nu_hsum256_ps gives. */
INLINE __m256 hsum_pair(__m256 a, __m256 b) {
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
INLINE __m256 hsum_quarters(__m256 a, __m256 b) {
    return _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x44), _mm256_shuffle_ps(a, b, 0xEE));
}
INLINE __m256 hsum_last(__m256 a, __m256 b) {
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The dots of 8 rows with H (1 or 2) query heads from head h0, in
 * head_dots's order: four rows at a time, each 8-element chunk of the four
 * rows and of the H heads loaded once for their 4 H multiply-adds (chains
 * held in registers), the four rows through the first two reduction steps
 * at once. `ahead` (NULL: none) are the next 8 rows, prefetched. */
INLINE void dots8_heads(uint32_t type, const uint8_t *const *rows, const uint8_t *const *ahead,
                        const float *const *q, int h0, int H, int64_t n, float *out,
                        size_t out_stride) {
    const size_t bytes = (size_t)n * (size_t)elem_bytes(type);
    __m256 part[2][2];
    for (int m = 0; m < 2; m++) {
        if (ahead)
            for (int r = 0; r < 4; r++)
                for (size_t off = 0; off < bytes; off += 64)
                    _mm_prefetch((const char *)(ahead[4 * m + r] + off), _MM_HINT_T0);
        __m256 acc[4][2];
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < H; h++) acc[r][h] = _mm256_setzero_ps();
        for (int64_t i = 0; i < n; i += 8) {
            __m256 w[4];
            for (int r = 0; r < 4; r++) w[r] = load_weights(type, rows[4 * m + r], i);
            for (int h = 0; h < H; h++) {
                const __m256 qv = _mm256_loadu_ps(q[h0 + h] + i);
                for (int r = 0; r < 4; r++) acc[r][h] = _mm256_fmadd_ps(w[r], qv, acc[r][h]);
            }
        }
        for (int h = 0; h < H; h++)
            part[h][m] =
                hsum_quarters(hsum_pair(acc[0][h], acc[1][h]), hsum_pair(acc[2][h], acc[3][h]));
    }
    for (int h = 0; h < H; h++)
        _mm256_storeu_ps(out + (size_t)(h0 + h) * out_stride, hsum_last(part[h][0], part[h][1]));
}

/* dots8_heads specialised on the common head sizes (constant chunk loops). */
INLINE void dots8_heads_n(uint32_t type, const uint8_t *const *rows, const uint8_t *const *ahead,
                          const float *const *q, int h0, int H, int64_t n, float *out,
                          size_t out_stride) {
    if (n == 64)
        dots8_heads(type, rows, ahead, q, h0, H, 64, out, out_stride);
    else if (n == 128)
        dots8_heads(type, rows, ahead, q, h0, H, 128, out, out_stride);
    else
        dots8_heads(type, rows, ahead, q, h0, H, n, out, out_stride);
}

/* nu_vec_dots_rows: 8 rows at a time when the head size is a multiple of 8,
 * the heads two at a time over them (the rows stay in L1 between head
 * pairs); other sizes and the tail row by row. */
INLINE void dots_rows_k(uint32_t type, const float *const *q, int k, const uint8_t *base,
                        size_t stride, const int32_t *cells, int64_t n_rows, int64_t n, float *out,
                        size_t out_stride) {
    int64_t j0 = 0;
    for (; n % 8 == 0 && j0 + 8 <= n_rows; j0 += 8) {
        const uint8_t *rows[8], *ahead[8];
        const bool more = nu_rows_at(base, stride, cells, j0, 8, n_rows, rows, ahead);
        for (int h0 = 0; h0 < k; h0 += 2)
            dots8_heads_n(type, rows, h0 == 0 && more ? ahead : NULL, q, h0,
                          k - h0 < 2 ? k - h0 : 2, n, out + (size_t)j0, out_stride);
    }
    for (; j0 < n_rows; j0++) {
        float o[NU_TILE_MAX];
        head_dots(type, base + (size_t)cells[j0] * stride, q, k, n, o);
        for (int v = 0; v < k; v++) out[(size_t)v * out_stride + (size_t)j0] = o[v];
    }
}

static void dots_rows(uint32_t type, const float *const *q, int k, const void *base, size_t stride,
                      const int32_t *cells, int64_t n_rows, int64_t n, float *out,
                      size_t out_stride) {
#define DOTS_ROWS(T, K) dots_rows_k(T, q, K, base, stride, cells, n_rows, n, out, out_stride)
    NU_SWITCH_FLOAT_HEADS(type, k, DOTS_ROWS)
#undef DOTS_ROWS
}

/* mad_f32/mad_f16 for k outputs, the row converted once per 8 elements. */
static void mads(uint32_t type, float *const *y, const float *a, int k, const void *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv =
            type == NU_TYPE_F16
                ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + i)))
                : _mm256_loadu_ps((const float *)x + i);
        for (int v = 0; v < k; v++)
            _mm256_storeu_ps(y[v] + i,
                             _mm256_fmadd_ps(_mm256_set1_ps(a[v]), xv, _mm256_loadu_ps(y[v] + i)));
    }
    for (; i < n; i++) {
        float xf =
            type == NU_TYPE_F16 ? nu_f16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
        for (int v = 0; v < k; v++) y[v][i] += a[v] * xf;
    }
}

/* Columns [i0, i0 + 16) (all within the 8-aligned part) of k heads in 8
 * accumulators over every row. */
INLINE void mads_rows_block(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                            const uint8_t *base, size_t stride, const int32_t *cells, int64_t j0,
                            int64_t j1, int nd, int64_t i0) {
    __m256 acc[4][2];
    for (int d = 0; d < nd; d++)
        for (int v = 0; v < k; v++) acc[v][d] = _mm256_loadu_ps(y[v] + i0 + 8 * d);
    for (int64_t j = j0; j < j1; j++) {
        const uint8_t *row = base + (size_t)cells[j] * stride;
        for (int d = 0; d < nd; d++) {
            const __m256 xv = load_weights(type, row, i0 + 8 * d);
            for (int v = 0; v < k; v++)
                acc[v][d] = _mm256_fmadd_ps(_mm256_set1_ps(a[(size_t)v * a_stride + (size_t)j]), xv,
                                            acc[v][d]);
        }
    }
    for (int d = 0; d < nd; d++)
        for (int v = 0; v < k; v++) _mm256_storeu_ps(y[v] + i0 + 8 * d, acc[v][d]);
}

/* Rows in blocks of 64, each block's columns 16 at a time, so a block's
 * rows are read from memory once and from L1 for the other columns; every
 * y element still takes the rows in order. */
static void mads_rows(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                      const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                      int64_t n) {
    const int64_t n8 = n / 8 * 8;
    for (int64_t j0 = 0; j0 < n_rows; j0 += 64) {
        const int64_t j1 = n_rows - j0 < 64 ? n_rows : j0 + 64;
        for (int64_t i0 = 0; i0 < n8; i0 += 16) {
            const int nd = n8 - i0 >= 16 ? 2 : 1;
#define MADS_ROWS(T, K) mads_rows_block(T, y, a, a_stride, K, base, stride, cells, j0, j1, nd, i0)
            NU_SWITCH_FLOAT_HEADS(type, k, MADS_ROWS)
#undef MADS_ROWS
        }
    }
    if (n8 == n) return;
    /* the tail as mads computes it, row after row */
    for (int64_t j = 0; j < n_rows; j++) {
        const char *row = (const char *)base + (size_t)cells[j] * stride;
        for (int64_t i = n8; i < n; i++) {
            float xf = type == NU_TYPE_F16 ? nu_f16_to_f32(((const uint16_t *)(const void *)row)[i])
                                           : ((const float *)(const void *)row)[i];
            for (int v = 0; v < k; v++) y[v][i] += a[(size_t)v * a_stride + (size_t)j] * xf;
        }
    }
}

static void round_f16(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) x[i] = nu_half_to_float(nu_f32_to_f16(x[i]));
}

/* e^x for x <= 0 as in dot_avx512.c's exp_neg, 2^n put together from its
 * exponent bits; inputs below -87 (whose e^x is below the smallest normal
 * float) give 0. */
INLINE __m256 exp_neg(__m256 x) {
    const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

static void softmax(float *x, int64_t n, float max, int round16) {
    const __m256 m = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (i < n) { /* the tail through a zero-padded buffer */
        float buf[8] = {0};
        memcpy(buf, x + i, sizeof(float) * (size_t)(n - i));
        __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(buf), m));
        _mm256_storeu_ps(buf, e);
        for (int64_t j = 0; j < n - i; j++) x[i + j] = buf[j];
        for (int64_t j = n - i; j < 8; j++) buf[j] = 0.0f;
        acc = _mm256_add_ps(acc, _mm256_loadu_ps(buf));
    }
    const __m256 sum = _mm256_set1_ps(nu_hsum256_ps(acc));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_div_ps(_mm256_loadu_ps(x + i), sum));
    for (; i < n; i++) x[i] /= _mm256_cvtss_f32(sum);
    if (round16) round_f16(x, n);
}

INLINE __m256 swiglu8(__m256 g, __m256 u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 t = exp_neg(_mm256_or_ps(g, _mm256_set1_ps(-0.0f))); /* e^-|g| */
    const __m256 neg = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 s = _mm256_div_ps(_mm256_blendv_ps(one, t, neg), _mm256_add_ps(one, t));
    return _mm256_mul_ps(_mm256_mul_ps(g, s), u);
}

static void swiglu(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) { /* the tail through zero-padded buffers */
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(g, swiglu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, sizeof(float) * (size_t)(n - i));
    }
}

static void to_f16(uint16_t *dst, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = nu_f32_to_f16(x[i]);
}

/* The row in 8-lane steps, a tail of fewer than 8 through zero-padded
 * buffers (so the sums' order depends only on dk). */
static void delta_rule(float *m_out, const float *m_in, const float *q, const float *k,
                       const float *v, float a, float beta, float scale, int64_t dk, int64_t dv,
                       float *o) {
    const int64_t whole = dk / 8 * 8, tail = dk - whole;
    float kt[8] = {0}, qt[8] = {0};
    memcpy(kt, k + whole, sizeof(float) * (size_t)tail);
    memcpy(qt, q + whole, sizeof(float) * (size_t)tail);
    const __m256 av = _mm256_set1_ps(a);
    for (int64_t j = 0; j < dv; j++) {
        float *row = m_out + j * dk;
        const float *in = m_in ? m_in + j * dk : NULL;
        float it[8] = {0}, rt[8];
        if (in) memcpy(it, in + whole, sizeof(float) * (size_t)tail);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; in && i < whole; i += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(in + i), _mm256_loadu_ps(k + i), acc);
        if (in && tail) acc = _mm256_fmadd_ps(_mm256_loadu_ps(it), _mm256_loadu_ps(kt), acc);
        const __m256 d = _mm256_set1_ps(beta * (v[j] - a * nu_hsum256_ps(acc)));
        __m256 s = _mm256_setzero_ps();
        for (int64_t i = 0; i < whole; i += 8) {
            __m256 x = in ? _mm256_mul_ps(av, _mm256_loadu_ps(in + i)) : _mm256_setzero_ps();
            x = _mm256_fmadd_ps(d, _mm256_loadu_ps(k + i), x);
            _mm256_storeu_ps(row + i, x);
            s = _mm256_fmadd_ps(x, _mm256_loadu_ps(q + i), s);
        }
        if (tail) {
            __m256 x =
                _mm256_fmadd_ps(d, _mm256_loadu_ps(kt), _mm256_mul_ps(av, _mm256_loadu_ps(it)));
            _mm256_storeu_ps(rt, x);
            memcpy(row + whole, rt, sizeof(float) * (size_t)tail);
            s = _mm256_fmadd_ps(x, _mm256_loadu_ps(qt), s);
        }
        o[j] = scale * nu_hsum256_ps(s);
    }
}

/* Lanes that hold no element are -infinity; max(x, m) keeps m where x is
 * a NaN. */
float nu_scale_max_avx2(float *x, int64_t n, float scale) {
    const __m256 sv = _mm256_set1_ps(scale);
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv);
        _mm256_storeu_ps(x + i, v);
        m = _mm256_max_ps(v, m);
    }
    float max = nu_hmax256_ps(m);
    for (; i < n; i++) {
        x[i] *= scale;
        if (x[i] > max) max = x[i];
    }
    return max;
}

/* Four independent sums, two lines per step. */
uint64_t nu_read_avx2(const void *p, size_t n) {
    const __m256i *v = p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 4 <= n / 32; i += 4) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(v + i));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(v + i + 1));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(v + i + 2));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(v + i + 3));
    }
    for (; i < n / 32; i++) a0 = _mm256_add_epi64(a0, _mm256_load_si256(v + i));
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    __m128i s = _mm_add_epi64(_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1));
    return (uint64_t)_mm_cvtsi128_si64(s) + (uint64_t)_mm_extract_epi64(s, 1);
}

const nu_kernel_set nu_kernels_avx2_set = {
    .name = "avx2",
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
            [NU_TYPE_Q2_K] = nu_tile_q2_k_avx2,
            [NU_TYPE_Q3_K] = nu_tile_q3_k_avx2,
            [NU_TYPE_Q4_K] = nu_tile_q4_k_avx2,
            [NU_TYPE_Q5_K] = nu_tile_q5_k_avx2,
            [NU_TYPE_Q6_K] = nu_tile_q6_k_avx2,
            [NU_TYPE_IQ4_NL] = tile_iq4_nl,
            [NU_TYPE_IQ4_XS] = tile_iq4_xs,
            [NU_TYPE_MXFP4] = tile_mxfp4,
        },
    .panel = {[NU_TYPE_Q4_0] = nu_panel_q4_0_avx2,
              [NU_TYPE_Q4_K] = nu_panel_q4_k_avx2,
              [NU_TYPE_Q5_K] = nu_panel_q5_k_avx2,
              [NU_TYPE_Q6_K] = nu_panel_q6_k_avx2},
    .quantize_act = quantize_act,
    .quantize_act_k = nu_quantize_act_k_avx2,
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .mad_f32 = mad_f32,
    .mad_f16 = mad_f16,
    .dots = dots,
    .dots_rows = dots_rows,
    .mads = mads,
    .mads_rows = mads_rows,
    .quant_dots_rows = nu_quant_dots_rows_avx2,
    .quant_mads_rows = nu_quant_mads_rows_avx2,
    .round_f16 = round_f16,
    .attn_heads = 4,
    .softmax = softmax,
    .scale_max = nu_scale_max_avx2,
    .read = nu_read_avx2,
    .swiglu = swiglu,
    .to_f16 = to_f16,
    .delta_rule = delta_rule,
};
