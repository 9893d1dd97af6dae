/* quant.c - plain C reference dequantisation and quantisation of the block
 * formats the kernels multiply with (GGUF/ggml layouts, 32 elements a block).
 *
 * These are the definitions every faster kernel is checked against, so they
 * favour being obviously right over being fast.
 */
#include <math.h>

#include "iquant.h"

/* ---- Dequantisation -------------------------------------------------------- */

/* The 4-bit quant of element j of a block: element j sits in the low nibble
 * of byte j, element j + 16 in the high nibble of byte j. */
static int nibble(const uint8_t *qs, int j) {
    return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4;
}

/* Bit j of the little-endian 32-bit high-bit word of a Q5 block, as bit 4. */
static int high_bit(const uint8_t *qh, int j) {
    return (int)((nu_load_u32(qh) >> j) & 1u) << 4;
}

/* Q4_0: x = (q - 8) * d. */
static void dequantize_q4_0(const uint8_t *src, float *y) {
    nu_block_q4_0 b;
    memcpy(&b, src, sizeof b);
    float d = nu_f16_to_f32(b.d);
    for (int j = 0; j < NU_QK; j++) y[j] = (float)(nibble(b.qs, j) - 8) * d;
}

/* Q4_1: x = q * d + m. */
static void dequantize_q4_1(const uint8_t *src, float *y) {
    nu_block_q4_1 b;
    memcpy(&b, src, sizeof b);
    float d = nu_f16_to_f32(b.d), m = nu_f16_to_f32(b.m);
    for (int j = 0; j < NU_QK; j++) y[j] = (float)nibble(b.qs, j) * d + m;
}

/* Q5_0: x = (q - 16) * d with q = nibble | high bit << 4. */
static void dequantize_q5_0(const uint8_t *src, float *y) {
    nu_block_q5_0 b;
    memcpy(&b, src, sizeof b);
    float d = nu_f16_to_f32(b.d);
    for (int j = 0; j < NU_QK; j++) {
        int q = nibble(b.qs, j) | high_bit(b.qh, j);
        y[j] = (float)(q - 16) * d;
    }
}

/* Q5_1: x = q * d + m with q as in Q5_0. */
static void dequantize_q5_1(const uint8_t *src, float *y) {
    nu_block_q5_1 b;
    memcpy(&b, src, sizeof b);
    float d = nu_f16_to_f32(b.d), m = nu_f16_to_f32(b.m);
    for (int j = 0; j < NU_QK; j++) {
        int q = nibble(b.qs, j) | high_bit(b.qh, j);
        y[j] = (float)q * d + m;
    }
}

/* Q8_0: x = q * d. */
static void dequantize_q8_0(const uint8_t *src, float *y) {
    nu_block_q8_0 b;
    memcpy(&b, src, sizeof b);
    float d = nu_f16_to_f32(b.d);
    for (int j = 0; j < NU_QK; j++) y[j] = (float)b.qs[j] * d;
}

/* Dequantises nb blocks of a quantised type. */
static void dequantize_blocks(uint32_t type, const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, dst += NU_QK) {
        switch (type) {
        case NU_TYPE_Q4_0: dequantize_q4_0(src + i * NU_Q4_0_BYTES, dst); break;
        case NU_TYPE_Q4_1: dequantize_q4_1(src + i * NU_Q4_1_BYTES, dst); break;
        case NU_TYPE_Q5_0: dequantize_q5_0(src + i * NU_Q5_0_BYTES, dst); break;
        case NU_TYPE_Q5_1: dequantize_q5_1(src + i * NU_Q5_1_BYTES, dst); break;
        case NU_TYPE_Q8_0: dequantize_q8_0(src + i * NU_Q8_0_BYTES, dst); break;
        default: return;
        }
    }
}

void nu_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    switch (type) {
    case NU_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case NU_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = nu_f16_to_f32(nu_load_u16(s + 2 * i));
        return;
    case NU_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = nu_bf16_to_f32(nu_load_u16(s + 2 * i));
        return;
    default:
        if (nu_type_is_quantized(type)) {
            dequantize_blocks(type, s, dst, n / NU_QK);
            return;
        }
        if (nu_type_is_kquant(type)) {
            nu_dequantize_row_k(type, s, dst, n);
            return;
        }
        if (nu_type_is_iquant(type)) {
            nu_dequantize_row_iq(type, s, dst, n);
            return;
        }
        for (int64_t i = 0; i < n; i++) dst[i] = 0.0f;
    }
}

/* ---- Quantisation ---------------------------------------------------------- */

/* Packs 32 quants of 0..15 (bits above 3 ignored) into 16 nibble bytes. */
static void pack_nibbles(const int *q, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
}

/* Packs bit 4 of 32 quants into the 32-bit high-bit word of a Q5 block. */
static void pack_high_bits(const int *q, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < NU_QK; j++) h |= (uint32_t)((q[j] >> 4) & 1) << j;
    memcpy(qh, &h, sizeof h);
}

/* The element of largest magnitude, with its sign (the first one on ties). */
static float signed_absmax(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < NU_QK; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* Symmetric offset encoding (Q4_0: levels = 8, Q5_0: levels = 16): the
 * extreme value maps to quant 0 (d = extreme / -levels), zero maps to
 * `levels`; q = x/d + levels rounded half up, clamped to 2*levels - 1. */
static float quantize_offset(const float *x, int levels, int *q) {
    float d = signed_absmax(x) / (float)-levels;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < NU_QK; j++) {
        int v = (int)(x[j] * id + ((float)levels + 0.5f));
        q[j] = v < 2 * levels - 1 ? v : 2 * levels - 1;
    }
    return d;
}

/* Min-scale encoding (Q4_1: levels = 15, Q5_1: levels = 31): min maps to
 * quant 0 and max to `levels`; q = (x - min)/d rounded half up. */
static float quantize_min(const float *x, int levels, int *q, float *min_out) {
    float min = x[0], max = x[0];
    for (int j = 1; j < NU_QK; j++) {
        min = x[j] < min ? x[j] : min;
        max = x[j] > max ? x[j] : max;
    }
    float d = (max - min) / (float)levels;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < NU_QK; j++) {
        int v = (int)((x[j] - min) * id + 0.5f);
        q[j] = v < levels ? v : levels;
    }
    *min_out = min;
    return d;
}

/* Q8_0: d = max|x| / 127, q = x/d rounded to nearest (half away from zero). */
static void quantize_q8_0(const float *x, uint8_t *dst) {
    nu_block_q8_0 b;
    float amax = 0.0f;
    for (int j = 0; j < NU_QK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < NU_QK; j++) b.qs[j] = (int8_t)roundf(x[j] * id);
    b.d = nu_f32_to_f16(d);
    memcpy(dst, &b, sizeof b);
}

/* Quantises one block of 32 floats to a quantised type at dst (blocks are
 * built in a local struct and copied: dst need not be aligned). */
static void quantize_block(uint32_t type, const float *x, uint8_t *dst) {
    int q[NU_QK];
    float m;
    switch (type) {
    case NU_TYPE_Q4_0: {
        nu_block_q4_0 b;
        b.d = nu_f32_to_f16(quantize_offset(x, 8, q));
        pack_nibbles(q, b.qs);
        memcpy(dst, &b, sizeof b);
        break;
    }
    case NU_TYPE_Q4_1: {
        nu_block_q4_1 b;
        b.d = nu_f32_to_f16(quantize_min(x, 15, q, &m));
        b.m = nu_f32_to_f16(m);
        pack_nibbles(q, b.qs);
        memcpy(dst, &b, sizeof b);
        break;
    }
    case NU_TYPE_Q5_0: {
        nu_block_q5_0 b;
        b.d = nu_f32_to_f16(quantize_offset(x, 16, q));
        pack_nibbles(q, b.qs);
        pack_high_bits(q, b.qh);
        memcpy(dst, &b, sizeof b);
        break;
    }
    case NU_TYPE_Q5_1: {
        nu_block_q5_1 b;
        b.d = nu_f32_to_f16(quantize_min(x, 31, q, &m));
        b.m = nu_f32_to_f16(m);
        pack_nibbles(q, b.qs);
        pack_high_bits(q, b.qh);
        memcpy(dst, &b, sizeof b);
        break;
    }
    case NU_TYPE_Q8_0: quantize_q8_0(x, dst); break;
    default: break;
    }
}

bool nu_quantize_weighs(uint32_t type) {
    return type == NU_TYPE_IQ4_NL || type == NU_TYPE_IQ4_XS || nu_type_is_kquant(type);
}

void nu_quantize_row_weighted(uint32_t type, const float *src, void *dst, int64_t n,
                              const float *importance) {
    if (type == NU_TYPE_IQ4_NL || type == NU_TYPE_IQ4_XS)
        nu_quantize_row_iq(type, src, dst, n, importance);
    else if (nu_type_is_kquant(type))
        nu_quantize_row_k(type, src, dst, n, importance);
    else
        nu_quantize_row(type, src, dst, n);
}

void nu_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    switch (type) {
    case NU_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case NU_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = nu_f32_to_f16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        return;
    case NU_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = nu_f32_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        return;
    default:
        if (nu_type_is_kquant(type)) {
            nu_quantize_row_k(type, src, dst, n, NULL);
            return;
        }
        if (type == NU_TYPE_IQ4_NL || type == NU_TYPE_IQ4_XS) {
            nu_quantize_row_iq(type, src, dst, n, NULL);
            return;
        }
        if (!nu_type_is_quantized(type)) return;
        uint32_t bytes = nu_type_get(type)->block_bytes;
        for (int64_t i = 0; i < n / NU_QK; i++)
            quantize_block(type, src + i * NU_QK, d + i * bytes);
    }
}
