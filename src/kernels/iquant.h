/* iquant.h - the non-linear 4-bit block formats: codes index a table of 16
 * values instead of standing for evenly spaced levels. Shared by the kernel
 * files only, like kquant.h.
 *
 *   IQ4_NL  32 elements: f16 d, then 16 bytes of codes (element j in the low
 *           nibble of byte j, j + 16 in the high nibble, as Q4_0);
 *           x = d * iq4nl[code].
 *   IQ4_XS  256 elements: f16 d, uint16 scales_h, uint8 scales_l[4], then 8
 *           sub-blocks of 32 with 16 code bytes each (nibbles as IQ4_NL).
 *           Sub-block b has the six-bit scale
 *             ls = (scales_l[b / 2] >> 4 (b % 2)) & 15 | ((scales_h >> 2b) & 3) << 4
 *           and x = d * (ls - 32) * iq4nl[code].
 *   MXFP4   32 elements (OCP microscaling FP4): one E8M0 byte e, then 16
 *           code bytes (nibbles as IQ4_NL); x = 2^(e - 127) * e2m1[code],
 *           kept as fp4x2[code] * 2^(e - 128) with fp4x2 the E2M1 values
 *           doubled (integers).
 * The tables are the formats' definitions (ggml's kvalues_iq4nl and the
 * OCP MX specification's E2M1 values).
 *
 * Products: IQ4_NL and MXFP4 multiply with the 32-element activation blocks
 * of kernels_internal.h, IQ4_XS with Q8_K (kquant.h), as llama.cpp does. Per
 * block the integer sum of table value times activation quant is exact; then
 *   IQ4_NL  acc += (d_w * d_a) * isum
 *   MXFP4   acc += (d_a * 2^(e - 128)) * isum
 *   IQ4_XS  acc += (d_w * d_a) * sum_b (ls_b - 32) * isum_b   (per super-block)
 */
#ifndef NU_IQUANT_H
#define NU_IQUANT_H

#include "kquant.h"

static inline int nu_type_is_iquant(uint32_t type) {
    return type == NU_TYPE_IQ4_NL || type == NU_TYPE_IQ4_XS || type == NU_TYPE_MXFP4;
}

#define NU_IQ4_NL_BYTES 18
#define NU_IQ4_XS_BYTES 136
#define NU_MXFP4_BYTES 17

/* The 16 IQ4_NL / IQ4_XS values. */
extern const int8_t nu_iq4nl_values[16];
/* The 16 E2M1 values doubled: 0, 1, 2, 3, 4, 6, 8, 12, then their negatives. */
extern const int8_t nu_fp4x2_values[16];

/* 2^(e - 128) as a float (the MXFP4 scale for the doubled table); e < 2
 * gives the subnormals 2^-128 and 2^-127. */
static inline float nu_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The six-bit scale (0..63) of sub-block b of an IQ4_XS super-block. */
static inline int nu_iq4_xs_scale(const uint8_t *blk, int b) {
    const uint16_t h = nu_load_u16(blk + 2);
    return ((blk[4 + b / 2] >> (4 * (b % 2))) & 15) | ((h >> (2 * b)) & 3) << 4;
}

/* Reference dequantisation and quantisation (quant_iq.c); n is a whole
 * number of blocks. The encoders minimise sum_i w_i (x_i - x'_i)^2 with
 * w_i = importance[i] (1 when importance is NULL, or when a block's
 * importances are all 0). With an importance matrix (the mean square of
 * each input column's activations) that is the expected squared error of
 * the row's output. Per 32 elements: candidate scales that map the largest
 * |x| near either end of the table, each with the codes nearest to x / s
 * and then the least-squares scale for those codes; the best wins. IQ4_XS
 * then expresses its 8 sub-block scales as d * (ls - 32) with d from the
 * largest of them, trying ls and its neighbours. Codes are picked last for
 * the scales as stored. MXFP4 has no encoder here. */
void nu_dequantize_row_iq(uint32_t type, const void *src, float *dst, int64_t n);
void nu_quantize_row_iq(uint32_t type, const float *src, void *dst, int64_t n,
                        const float *importance);

/* Scalar tiles (dot_iq.c). */
void nu_tile_iq4_nl_scalar(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_iq4_xs_scalar(const nu_matmul_job *job, int64_t row, int32_t b0, int k);
void nu_tile_mxfp4_scalar(const nu_matmul_job *job, int64_t row, int32_t b0, int k);

#endif
