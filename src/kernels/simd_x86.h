/* simd_x86.h - small helpers the SIMD kernel files share. Only for files
 * compiled with at least AVX2 + FMA + F16C (the *_avx2.c and *_avx512.c
 * files); each helper is inlined into its caller's ISA. */
#ifndef NU_SIMD_X86_H
#define NU_SIMD_X86_H

#include <immintrin.h>

#include "kernels_internal.h"

/* The sum of 8 floats in a fixed order (halves, then quarters, then pairs). */
static inline __attribute__((always_inline)) float nu_hsum256_ps(__m256 v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* The largest of 8 floats (none NaN: lanes start at -infinity and max
 * keeps them where an element is NaN). */
static inline __attribute__((always_inline)) float nu_hmax256_ps(__m256 v) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* The f16 at p in lane 0 (other lanes 0), and the two f16 at p in lanes 0, 1. */
static inline __attribute__((always_inline)) __m128 nu_half_at(const uint8_t *p) {
    return _mm_cvtph_ps(_mm_cvtsi32_si128(nu_load_u16(p)));
}
static inline __attribute__((always_inline)) __m128 nu_halves_at(const uint8_t *p) {
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)nu_load_u32(p)));
}

#ifdef __AVX512F__
/* The sum of 16 floats in a fixed order (halves, then quarters, ...). */
static inline __attribute__((always_inline)) float nu_hsum512_ps(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return nu_hsum256_ps(h);
}
#endif

#endif
