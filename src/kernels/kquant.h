/* kquant.h - the K-quant block formats (256-element super-blocks, as GGUF
 * files store them) and the 8-bit activation layout their dot products use.
 * Shared by the kernel files only, like kernels_internal.h.
 *
 * Element order inside a super-block (x = the dequantised value):
 *   Q2_K  16 groups of 16: scales[i] low nibble = scale, high nibble = min
 *         of group i; x = d * sc * q - dmin * m, q in 0..3.
 *         Elements 128n + 32j + l (n < 2, j < 4, l < 32) are bits 2j..2j+1
 *         of qs[32n + l]; their group is 8n + 2j + l / 16.
 *   Q3_K  x = d * (sc - 32) * (low2 - (hbit ? 0 : 4)); low2 as Q2_K's q, the
 *         high bit of element 128n + 32j + l is bit 4n + j of hmask[l]; the
 *         16 six-bit scales are packed in scales[12]: group i's low 4 bits
 *         are the low (i < 8) or high (i >= 8) nibble of scales[i % 8], its
 *         top 2 bits are bits 2 * (i / 4) of scales[8 + i % 4].
 *   Q4_K  8 groups of 32: x = d * sc * q - dmin * m, q in 0..15. Elements
 *         64c + l (c < 4, l < 32) are the low nibbles of qs[32c + l], elements
 *         64c + 32 + l the high nibbles. Six-bit scales and mins of group j
 *         in scales[12]: j < 4: sc = scales[j] & 63, m = scales[j + 4] & 63;
 *         j >= 4: sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4,
 *                 m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4.
 *   Q5_K  Q4_K plus bit 4 of each quant (q in 0..31): element 64c + l takes
 *         bit 2c of qh[l], element 64c + 32 + l bit 2c + 1.
 *   Q6_K  16 groups of 16, x = d * sc * (q - 32), q in 0..63, sc int8. For
 *         n < 2, l < 32, with ql = ql + 64n, qh = qh + 32n, elements 128n +
 *           l      : ql[l] & 15      | ((qh[l] >> 0) & 3) << 4
 *           32 + l : ql[l + 32] & 15 | ((qh[l] >> 2) & 3) << 4
 *           64 + l : ql[l] >> 4      | ((qh[l] >> 4) & 3) << 4
 *           96 + l : ql[l + 32] >> 4 | ((qh[l] >> 6) & 3) << 4
 *         and element e's group is e / 16.
 */
#ifndef NU_KQUANT_H
#define NU_KQUANT_H

#include "kernels_internal.h"

#define NU_QK_K 256 /* elements per K-quant super-block */

typedef struct nu_block_q2_k {
    uint8_t scales[16]; /* per group of 16: scale (low nibble), min (high) */
    uint8_t qs[64];     /* 2-bit quants */
    uint16_t d;         /* f16 super-block scale of the scales */
    uint16_t dmin;      /* f16 super-block scale of the mins */
} nu_block_q2_k;

typedef struct nu_block_q3_k {
    uint8_t hmask[32];  /* high bits */
    uint8_t qs[64];     /* low 2 bits */
    uint8_t scales[12]; /* 16 six-bit scales */
    uint16_t d;         /* f16 super-block scale */
} nu_block_q3_k;

typedef struct nu_block_q4_k {
    uint16_t d;         /* f16 scale of the scales */
    uint16_t dmin;      /* f16 scale of the mins */
    uint8_t scales[12]; /* 8 six-bit scales and 8 six-bit mins */
    uint8_t qs[128];    /* 4-bit quants */
} nu_block_q4_k;

typedef struct nu_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[32];  /* bit 4 of the quants */
    uint8_t qs[128]; /* low 4 bits */
} nu_block_q5_k;

typedef struct nu_block_q6_k {
    uint8_t ql[128];   /* low 4 bits */
    uint8_t qh[64];    /* high 2 bits */
    int8_t scales[16]; /* per group of 16 */
    uint16_t d;        /* f16 super-block scale */
} nu_block_q6_k;

_Static_assert(sizeof(nu_block_q2_k) == 84, "q2_k block is 84 bytes");
_Static_assert(sizeof(nu_block_q3_k) == 110, "q3_k block is 110 bytes");
_Static_assert(sizeof(nu_block_q4_k) == 144, "q4_k block is 144 bytes");
_Static_assert(sizeof(nu_block_q5_k) == 176, "q5_k block is 176 bytes");
_Static_assert(sizeof(nu_block_q6_k) == 210, "q6_k block is 210 bytes");

static inline int nu_type_is_kquant(uint32_t type) {
    return type == NU_TYPE_Q2_K || type == NU_TYPE_Q3_K || type == NU_TYPE_Q4_K ||
           type == NU_TYPE_Q5_K || type == NU_TYPE_Q6_K;
}

/* ---- Q8_K activations ------------------------------------------------------
 * For K-quant weights an activation row of n_in elements (a whole number of
 * super-blocks) is quantised per 256-element super-block as llama.cpp's
 * Q8_K: with m the first element of largest magnitude, s = -127 / m,
 * q = round-to-nearest-even(x * s) clamped to +-127 and d = 1 / s (so d is
 * negative when m is positive; zeros when |m| is below NU_ACT_TINY), and
 * the sums of q over each 16 elements. Layout of one
 * row, every part 64-byte aligned when the row is:
 *   int8    q[n_in]
 *   float   d[n_in / 256]      (padded to a multiple of 16 floats)
 *   int16   bsums[n_in / 16]   (padded to a multiple of 32 values)
 */
static inline int64_t nu_actk_d_count(int64_t n_in) {
    return (n_in / NU_QK_K + 15) / 16 * 16;
}
static inline int64_t nu_actk_bsum_count(int64_t n_in) {
    return (n_in / 16 + 31) / 32 * 32;
}
static inline size_t nu_actk_row_bytes(int64_t n_in) {
    size_t q = (size_t)(n_in + 63) / 64 * 64;
    return q + (size_t)nu_actk_d_count(n_in) * sizeof(float) +
           (size_t)nu_actk_bsum_count(n_in) * sizeof(int16_t);
}
static inline const int8_t *nu_actk_q(const uint8_t *row) {
    return (const int8_t *)row;
}
static inline const float *nu_actk_d(const uint8_t *row, int64_t n_in) {
    return (const float *)(const void *)(row + (n_in + 63) / 64 * 64);
}
static inline const int16_t *nu_actk_bsums(const uint8_t *row, int64_t n_in) {
    return (const int16_t *)(const void *)(nu_actk_d(row, n_in) + nu_actk_d_count(n_in));
}

/* ---- Reference codecs (quant_k.c) -----------------------------------------
 * One super-block in integer form: element e dequantises to
 *   (d * sc[g]) * q[e] - dmin * m[g],  g = e / group,
 * with signed q and sc for Q3_K/Q6_K (their offsets removed; dmin = m = 0)
 * and unsigned ones with mins for Q2_K/Q4_K/Q5_K. Verified against the
 * public ggml format description (the dequantisers of ggml-quants.c). */
typedef struct nu_kq_block {
    float d, dmin;  /* the f16 super-block scales as floats */
    int group;      /* elements per group: 16 (Q2_K, Q3_K, Q6_K) or 32 */
    int16_t sc[16]; /* integer scale per group */
    int16_t m[16];  /* integer min per group */
    int8_t q[NU_QK_K];
} nu_kq_block;

/* Unpacks one super-block of a K type (src need not be aligned). */
void nu_kq_unpack(uint32_t type, const uint8_t *src, nu_kq_block *out);
/* Packs the integer form (sc, m, q in range; d, dmin as f16 bits). */
void nu_kq_pack(uint32_t type, const nu_kq_block *b, uint16_t d, uint16_t dmin, uint8_t *dst);
/* nu_dequantize_row / nu_quantize_row_weighted for the K types (n a multiple
 * of 256): importance (n values or NULL) weighs each element's squared error
 * in the fits of group scales and mins and in the choice of their levels. */
void nu_dequantize_row_k(uint32_t type, const void *src, float *dst, int64_t n);
void nu_quantize_row_k(uint32_t type, const float *src, void *dst, int64_t n,
                       const float *importance);

/* The scalar tile kernels (dot_k_scalar.c). */
void nu_tile_q2_k_scalar(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q3_k_scalar(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q4_k_scalar(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q5_k_scalar(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q6_k_scalar(const nu_matmul_job *job, int64_t row, int32_t b0, int k);

/* ---- SIMD tiles and Q8_K quantisers (dot_k_avx2.c, dot_k_avx512.c) ------- */
void nu_tile_q2_k_avx2(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q3_k_avx2(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q4_k_avx2(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q5_k_avx2(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q6_k_avx2(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_quantize_act_k_avx2(const float *x, int64_t n_in, uint8_t *dst);
void nu_tile_q2_k_avx512(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q3_k_avx512(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q4_k_avx512(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q5_k_avx512(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_q6_k_avx512(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_quantize_act_k_avx512(const float *x, int64_t n_in, uint8_t *dst);

/* The six-bit scales of Q4_K/Q5_K as bytes, eight per word (byte j = group
 * j), worked on 32-bit words of scales[12] at once: groups 0..3 are the low
 * 6 bits of scales[0..3] (mins: of scales[4..7]); groups 4..7 take their low
 * nibble from scales[8..11] (mins: its high nibble) and their top 2 bits from
 * bits 6-7 of scales[0..3] (mins: of scales[4..7]). */
static inline void nu_q4_k_scales_mins(const uint8_t *s, uint64_t *sc, uint64_t *m) {
    const uint32_t a = nu_load_u32(s), b = nu_load_u32(s + 4), c = nu_load_u32(s + 8);
    const uint32_t low6 = 0x3F3F3F3Fu, low4 = 0x0F0F0F0Fu, low2 = 0x03030303u;
    *sc = (a & low6) | (uint64_t)((c & low4) | ((a >> 6) & low2) << 4) << 32;
    *m = (b & low6) | (uint64_t)(((c >> 4) & low4) | ((b >> 6) & low2) << 4) << 32;
}

/* The 16 six-bit (unsigned, 0..63) scales of Q3_K as bytes: *lo groups 0..7,
 * *hi groups 8..15. Low nibbles: scales[0..7] (lo), their high nibbles (hi);
 * top 2 bits of group i: bits 2 * (i / 4) of scales[8 + i % 4]. */
static inline void nu_q3_k_scales(const uint8_t *s, uint64_t *lo, uint64_t *hi) {
    const uint64_t a = nu_load_u32(s) | (uint64_t)nu_load_u32(s + 4) << 32;
    const uint32_t c = nu_load_u32(s + 8);
    /* Bytes 0..3: scales[8..11]; bytes 4..7: the same shifted right by 2. */
    const uint64_t top = c | (uint64_t)(c >> 2) << 32;
    const uint64_t low4 = 0x0F0F0F0F0F0F0F0Full, low2 = 0x0303030303030303ull;
    *lo = (a & low4) | (top & low2) << 4;
    *hi = ((a >> 4) & low4) | ((top >> 4) & low2) << 4;
}

#endif
