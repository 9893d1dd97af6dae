/* fp16.c - IEEE binary16 and bfloat16 <-> binary32 conversions in plain C.
 *
 * binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
 * bfloat16: the top 16 bits of a binary32 (1 sign, 8 exponent, 7 mantissa).
 * Narrowing rounds to nearest, ties to even: the dropped bits are compared
 * with half an ulp of the result and, on a tie, the result's last bit decides.
 */
#include <string.h>

#include "kernels_internal.h"

/* The bits of a float and back (memcpy is the defined way to pun). */
static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Widening is exact. The half's exponent and mantissa bits, moved to the
 * float positions, read as a float of value x * 2^-112 (a normal half lands
 * 112 below its exponent, a subnormal one on the float subnormal of the same
 * mantissa); multiplying by 2^112 rebases both exactly. Only infinities and
 * NaNs (exponent 31) need their exponent set by hand. (This assumes the
 * default floating-point environment: no denormals-are-zero mode.) The
 * code is nu_half_to_float in kernels_internal.h, shared with the loops. */
float nu_f16_to_f32(uint16_t h) {
    return nu_half_to_float(h);
}

/* Rounds value >> shift to nearest, ties to even (shift >= 1). */
static uint32_t shift_round_even(uint32_t value, uint32_t shift) {
    uint32_t kept = value >> shift;
    uint32_t rest = value & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1))) kept++;
    return kept;
}

/* Narrowing. Floats of magnitude >= 65520 (halfway between the largest half,
 * 65504, and 2^16, which ties to the even 2^16) become infinity; below 2^-14
 * the result is a subnormal multiple of 2^-24. A carry out of the mantissa
 * correctly bumps the exponent (and the largest subnormal to the smallest
 * normal). */
uint16_t nu_f32_to_f16(float f) {
    uint32_t x = float_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7FFFFFFFu;
    if (x > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((x >> 13) & 0x3FFu)); /* NaN */
    if (x >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* inf or overflow */
    if (x >= 0x38800000u) { /* normal half: rebias the exponent by 127 - 15 */
        uint32_t rebased = x - (112u << 23);
        return (uint16_t)(sign | shift_round_even(rebased, 13));
    }
    if (x <= 0x33000000u) return sign; /* <= 2^-25: rounds to zero (2^-25 ties to 0) */
    /* Subnormal: value = m * 2^(e - 150) with the implicit bit in m; in units
     * of 2^-24 that is m >> (126 - e), with 126 - e in [14, 24]. */
    uint32_t e = x >> 23;
    uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
    return (uint16_t)(sign | shift_round_even(m, 126 - e));
}

/* bfloat16 is the high half of a float. */
float nu_bf16_to_f32(uint16_t h) {
    return bits_float((uint32_t)h << 16);
}

/* Keeps the high half, rounding on the low half; NaN stays a (quiet) NaN
 * even when its payload sits only in the dropped bits. */
uint16_t nu_f32_to_bf16(float f) {
    uint32_t x = float_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)shift_round_even(x, 16);
}
