/* panel_avx512.c - panel kernels (see packed.c) for AVX-512 + VNNI.
 *
 * For one block of one panel, vector j (j < 8) holds columns 4j..4j+3 of the
 * 16 rows as unsigned bytes. vpdpbusd with the four activation bytes of
 * those columns broadcast to every lane adds each row's four products into
 * that row's lane, so after 8 instructions lane r holds the whole block's
 * integer dot product for row r. The block then costs, per activation row,
 * one conversion and two multiply-adds for all 16 rows:
 *   sum += float(dot) * (d_w * d_a)           (16 row scales times d_a)
 *   sum -= (off * d_w) * (d_a * sum(q_a))     (the stored offset: 8 or 128)
 * The weight vectors are unpacked once per block and reused for up to 8
 * activation rows. Integer sums are exact, so however the 8 instructions
 * are grouped the lanes are the same; the float operations per activation
 * row are the same sequence for any k, so results do not depend on the
 * batch or the grouping.
 */
#include <immintrin.h>

#include "kquant.h"

#define INLINE static inline __attribute__((always_inline))
#define PREFETCH_BYTES 4096 /* how far ahead in the panel to prefetch */

/* Prefetches part `part` of `parts` of the 64-byte lines of the `bytes` at
 * p + PREFETCH_BYTES. A block's prefetches are spread over its work, a few
 * lines at a time: issued together at its start (37 lines for a Q4_K
 * super-block, 17 for a Q8_0 pair) they queue behind each other for the
 * core's few outstanding misses and the stream falls behind (2 threads,
 * 2048x5632 from memory, bench_kernels cold medians: Q4_K 21.8 -> 28.5 GB/s,
 * Q8_0 25.9 -> 29.9, Q4_0 29.7 -> 32.8). */
INLINE void prefetch_part(const uint8_t *p, size_t bytes, int part, int parts) {
    const size_t lines = bytes / 64;
    for (size_t l = lines * (size_t)part / (size_t)parts;
         l < lines * (size_t)(part + 1) / (size_t)parts; l++)
        _mm_prefetch((const char *)(p + PREFETCH_BYTES + 64 * l), _MM_HINT_T0);
}

/* The 8 weight vectors of one block (Q4_0: nibbles; Q8_0: bytes + 128). */
INLINE void load_block(uint32_t type, const uint8_t *q, __m512i w[8]) {
    if (type == NU_TYPE_Q4_0) {
        const __m512i low = _mm512_set1_epi8(0x0F);
        for (int j = 0; j < 4; j++) {
            __m512i v = _mm512_load_si512((const void *)(q + 64 * j));
            w[j] = _mm512_and_si512(v, low);
            w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        }
    } else {
        for (int j = 0; j < 8; j++) w[j] = _mm512_load_si512((const void *)(q + 64 * j));
    }
}

/* acc + the row-wise dot of w with the four bytes at x broadcast, the
 * broadcast folded into the instruction's memory operand ({1to16}): the
 * compiler emits a separate broadcast load for _mm512_set1_epi32, and with
 * one activation row these loads are a third of a Q8_0 block's
 * instructions (2 threads from memory, bench_kernels cold medians: Q8_0
 * 28.4 -> 31.8 GB/s). */
INLINE __m512i dpbusd_b(__m512i acc, __m512i w, const void *x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const uint32_t *)x));
    return acc;
}

/* The block's integer dot products for one activation row (its 32 quants
 * at x): two chains of four so consecutive instructions are independent. */
INLINE __m512i block_dot(const __m512i w[8], const int8_t *x) {
    __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
    for (int j = 0; j < 8; j += 2) {
        a = dpbusd_b(a, w[j], x + 4 * j);
        b = dpbusd_b(b, w[j + 1], x + 4 * j + 4);
    }
    return _mm512_add_epi32(a, b);
}

INLINE void panel_kernel(uint32_t type, const nu_matmul_job *job, int64_t panel, int32_t b0,
                         int k) {
    const float off = type == NU_TYPE_Q4_0 ? 8.0f : 128.0f;
    const size_t pair = nu_panel_pair_bytes(type), qb = nu_panel_quant_bytes(type);
    const int64_t pairs = nu_panel_pairs(job->W->n_in), n_pad = job->act_n_pad;
    const uint8_t *base =
        (const uint8_t *)job->W->packed + (size_t)panel * nu_panel_bytes(type, job->W->n_in);
    const int8_t *xq[NU_PANEL_ACT];
    const float *xd[NU_PANEL_ACT], *xs[NU_PANEL_ACT];
    __m512 sum[NU_PANEL_ACT];
    for (int v = 0; v < k; v++) {
        const uint8_t *row = nu_job_act(job, b0 + v);
        xq[v] = nu_act_q(row);
        xd[v] = nu_act_d(row, n_pad);
        xs[v] = nu_act_s(row, n_pad);
        sum[v] = _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < pairs; p++) {
        const uint8_t *slot = base + (size_t)p * pair;
        for (int h = 0; h < 2; h++) {
            const int64_t kb = 2 * p + h;
            prefetch_part(slot, pair, h, 2);
            const __m512 dw =
                _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(slot + 32 * h)));
            const __m512 dw_off = _mm512_mul_ps(dw, _mm512_set1_ps(off));
            __m512i w[8];
            load_block(type, slot + 64 + (size_t)h * qb, w);
            for (int v = 0; v < k; v++) {
                const __m512i dot = block_dot(w, xq[v] + kb * NU_QK);
                const __m512 dwa = _mm512_mul_ps(dw, _mm512_set1_ps(xd[v][kb]));
                sum[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), dwa, sum[v]);
                sum[v] = _mm512_fnmadd_ps(dw_off, _mm512_set1_ps(xs[v][kb]), sum[v]);
            }
        }
    }
    const int64_t n_out = job->W->n_out;
    for (int v = 0; v < k; v++)
        _mm512_storeu_ps(job->y + (size_t)(b0 + v) * (size_t)n_out + (size_t)panel * NU_PANEL_ROWS,
                         sum[v]);
}

/* Q4_K against Q8_K activations (k <= 4: with the per-row sums below, more
 * would not fit the 32 vector registers). Per group s of 32 and activation
 * row, the integer block dot becomes float and is weighted by the 16 rows'
 * six-bit scales; the mins are weighted integer sums of the activations'
 * 16-element sums (vpdpwssd: each row's min twice, against two sums). At the
 * super-block's end:
 *   sum += groups * (d_w * d_a) - float(mins) * (dmin_w * d_a). */
INLINE void panel_q4_k(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    const int64_t n_in = job->W->n_in, nsb = n_in / NU_QK_K;
    const uint8_t *base =
        (const uint8_t *)job->W->packed + (size_t)panel * nu_panel_bytes(NU_TYPE_Q4_K, n_in);
    const __m512i low = _mm512_set1_epi8(0x0F);
    const int8_t *xq[4];
    const float *xd[4];
    const int16_t *xb[4];
    __m512 sum[4];
    for (int v = 0; v < k; v++) {
        const uint8_t *row = nu_job_act(job, b0 + v);
        xq[v] = nu_actk_q(row);
        xd[v] = nu_actk_d(row, n_in);
        xb[v] = nu_actk_bsums(row, n_in);
        sum[v] = _mm512_setzero_ps();
    }
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = base + (size_t)sb * NU_PANEL_Q4_K_BYTES;
        __m512 groups[4];
        __m512i mins[4];
        for (int v = 0; v < k; v++) {
            groups[v] = _mm512_setzero_ps();
            mins[v] = _mm512_setzero_si512();
        }
        /* groups 2i and 2i + 1 are the low and high nibbles of the same
         * eight vectors: loaded once for both (Q4_K 2 threads from memory,
         * bench_kernels cold medians: 28.7 -> 32.0 GB/s) */
        __m512i raw[8] = {0};
        for (int g = 0; g < 8; g++) {
            prefetch_part(blk, NU_PANEL_Q4_K_BYTES, g, 8);
            if (g % 2 == 0)
                for (int j = 0; j < 8; j++)
                    raw[j] = _mm512_load_si512((const void *)(blk + 320 + 512 * (g / 2) + 64 * j));
            __m512i w[8];
            for (int j = 0; j < 8; j++)
                w[j] = _mm512_and_si512(g % 2 ? _mm512_srli_epi16(raw[j], 4) : raw[j], low);
            const __m512 scale = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                _mm_load_si128((const __m128i *)(const void *)(blk + 64 + 16 * g))));
            const __m512i m32 = _mm512_cvtepu8_epi32(
                _mm_load_si128((const __m128i *)(const void *)(blk + 192 + 16 * g)));
            const __m512i m_twice = _mm512_or_si512(m32, _mm512_slli_epi32(m32, 16));
            for (int v = 0; v < k; v++) {
                const __m512i dot = block_dot(w, xq[v] + sb * NU_QK_K + 32 * g);
                groups[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, groups[v]);
                mins[v] = _mm512_dpwssd_epi32(
                    mins[v], m_twice, _mm512_set1_epi32((int)nu_load_u32(xb[v] + sb * 16 + 2 * g)));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)blk));
        const __m512 dmw =
            _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(blk + 32)));
        for (int v = 0; v < k; v++) {
            const __m512 da = _mm512_set1_ps(xd[v][sb]);
            sum[v] = _mm512_fmadd_ps(groups[v], _mm512_mul_ps(dw, da), sum[v]);
            sum[v] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins[v]), _mm512_mul_ps(dmw, da), sum[v]);
        }
    }
    const int64_t n_out = job->W->n_out;
    for (int v = 0; v < k; v++)
        _mm512_storeu_ps(job->y + (size_t)(b0 + v) * (size_t)n_out + (size_t)panel * NU_PANEL_ROWS,
                         sum[v]);
}

void nu_panel_q4_k_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    for (int done = 0; done < k; done += 4) {
        switch (k - done) {
        case 1: panel_q4_k(job, panel, b0 + done, 1); break;
        case 2: panel_q4_k(job, panel, b0 + done, 2); break;
        case 3: panel_q4_k(job, panel, b0 + done, 3); break;
        default: panel_q4_k(job, panel, b0 + done, 4); break;
        }
    }
}

/* F16 weights against float activations, np (1, 2 or 4) consecutive panels
 * at once: per column, each panel's 16 halves are widened once and multiplied
 * with every activation row's value broadcast, one multiply-add per (panel,
 * activation row) into its own accumulator; two panels share the broadcasts
 * and give 16 independent accumulators for k = 8. Each output is the same
 * column-ordered chain of multiply-adds whatever np and k are, so a single
 * activation row (generation) waits on the multiply-add's latency once per
 * column: one panel then computes 32 bytes per ~4 cycles, below what memory
 * delivers, and four panels (np = 4, k = 1) keep four chains in flight. */
INLINE void panel_f16(const nu_matmul_job *job, int64_t panel, int np, int32_t b0, int k) {
    const int64_t n_in = job->W->n_in;
    int64_t stride;
    const uint8_t *base =
        nu_panel_f16_col0(job->W->packed, n_in, job->W->n_out / NU_PANEL_ROWS, panel, &stride);
    const float *x[NU_PANEL_ACT];
    __m512 acc[4][NU_PANEL_ACT];
    for (int v = 0; v < k; v++) {
        x[v] = job->x + (size_t)(b0 + v) * (size_t)n_in;
        for (int q = 0; q < np; q++) acc[q][v] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < n_in; i++) {
        const uint8_t *col = base + (size_t)(stride * i);
        /* a prefetch per 64-byte line of the group's stream */
        if (stride >= 64)
            for (int64_t off = 0; off < stride; off += 64)
                _mm_prefetch((const char *)(col + PREFETCH_BYTES + off), _MM_HINT_T0);
        else if (i % 2 == 0)
            _mm_prefetch((const char *)(col + PREFETCH_BYTES), _MM_HINT_T0);
        __m512 w[4];
        for (int q = 0; q < np; q++)
            w[q] =
                _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(col + 32 * q)));
        for (int v = 0; v < k; v++) {
            const __m512 xv = _mm512_set1_ps(x[v][i]);
            for (int q = 0; q < np; q++) acc[q][v] = _mm512_fmadd_ps(w[q], xv, acc[q][v]);
        }
    }
    const int64_t n_out = job->W->n_out;
    for (int v = 0; v < k; v++)
        for (int q = 0; q < np; q++)
            _mm512_storeu_ps(job->y + (size_t)(b0 + v) * (size_t)n_out +
                                 (size_t)(panel + q) * NU_PANEL_ROWS,
                             acc[q][v]);
}

/* One function per type, the activation count a compile-time constant. */
#define DEFINE_PANEL(fn, TYPE)                                                                     \
    void fn(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {                          \
        switch (k) {                                                                               \
        case 1: panel_kernel(TYPE, job, panel, b0, 1); break;                                      \
        case 2: panel_kernel(TYPE, job, panel, b0, 2); break;                                      \
        case 3: panel_kernel(TYPE, job, panel, b0, 3); break;                                      \
        case 4: panel_kernel(TYPE, job, panel, b0, 4); break;                                      \
        case 5: panel_kernel(TYPE, job, panel, b0, 5); break;                                      \
        case 6: panel_kernel(TYPE, job, panel, b0, 6); break;                                      \
        case 7: panel_kernel(TYPE, job, panel, b0, 7); break;                                      \
        default: panel_kernel(TYPE, job, panel, b0, 8); break;                                     \
        }                                                                                          \
    }

DEFINE_PANEL(nu_panel_q4_0_avx512, NU_TYPE_Q4_0)
DEFINE_PANEL(nu_panel_q8_0_avx512, NU_TYPE_Q8_0)

void nu_panel_f16_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    switch (k) {
    case 1: panel_f16(job, panel, 1, b0, 1); break;
    case 2: panel_f16(job, panel, 1, b0, 2); break;
    case 3: panel_f16(job, panel, 1, b0, 3); break;
    case 4: panel_f16(job, panel, 1, b0, 4); break;
    case 5: panel_f16(job, panel, 1, b0, 5); break;
    case 6: panel_f16(job, panel, 1, b0, 6); break;
    case 7: panel_f16(job, panel, 1, b0, 7); break;
    default: panel_f16(job, panel, 1, b0, 8); break;
    }
}

void nu_panel2_f16_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    switch (k) {
    case 1: panel_f16(job, panel, 2, b0, 1); break;
    case 2: panel_f16(job, panel, 2, b0, 2); break;
    case 3: panel_f16(job, panel, 2, b0, 3); break;
    case 4: panel_f16(job, panel, 2, b0, 4); break;
    case 5: panel_f16(job, panel, 2, b0, 5); break;
    case 6: panel_f16(job, panel, 2, b0, 6); break;
    case 7: panel_f16(job, panel, 2, b0, 7); break;
    default: panel_f16(job, panel, 2, b0, 8); break;
    }
}

void nu_panel4_f16_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k) {
    (void)k; /* always 1 */
    panel_f16(job, panel, 4, b0, 1);
}
