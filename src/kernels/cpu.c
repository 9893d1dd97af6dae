/* cpu.c - choosing the SIMD level at run time and the public entry points
 * that just forward to the chosen level's kernels.
 *
 * The level is detected once from CPUID (via the compiler's
 * __builtin_cpu_supports, which also checks that the OS saves the vector
 * state) and may be lowered, never raised, by NUCLEUS_SIMD.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_internal.h"
#include "nucleus.h"

static const nu_kernel_set *const level_sets[] = {
    [NU_SIMD_SCALAR] = &nu_kernels_scalar_set,
    [NU_SIMD_AVX2] = &nu_kernels_avx2_set,
    [NU_SIMD_AVX512] = &nu_kernels_avx512_set,
};

/* The chosen level, -1 until nu_kernels_init has run. */
static _Atomic int selected_level = -1;

/* CPUID check for each level's instruction sets (the ones its files are
 * compiled with and actually use). */
nu_simd nu_kernels_cpu_level(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512vnni");
    if (avx512) return NU_SIMD_AVX512;
    if (avx2) return NU_SIMD_AVX2;
#endif
    return NU_SIMD_SCALAR;
}

nu_simd nu_kernels_pick_level(const char *request, nu_simd cpu_max) {
    nu_simd want = cpu_max;
    if (!request) return cpu_max;
    if (strcmp(request, "scalar") == 0)
        want = NU_SIMD_SCALAR;
    else if (strcmp(request, "avx2") == 0)
        want = NU_SIMD_AVX2;
    else if (strcmp(request, "avx512") == 0)
        want = NU_SIMD_AVX512;
    return want < cpu_max ? want : cpu_max;
}

/* Racing first calls all compute the same level, so the first store wins
 * harmlessly. */
void nu_kernels_init(void) {
    if (atomic_load_explicit(&selected_level, memory_order_acquire) >= 0) return;
    int level = (int)nu_kernels_pick_level(getenv("NUCLEUS_SIMD"), nu_kernels_cpu_level());
    int expected = -1;
    atomic_compare_exchange_strong(&selected_level, &expected, level);
}

int nu_kernels_force_level(nu_simd level) {
    if (level < NU_SIMD_SCALAR || level > nu_kernels_cpu_level()) return 0;
    atomic_store(&selected_level, (int)level);
    return 1;
}

const nu_kernel_set *nu_kernels_current(void) {
    int level = atomic_load_explicit(&selected_level, memory_order_acquire);
    if (level < 0) {
        nu_kernels_init();
        level = atomic_load(&selected_level);
    }
    return level_sets[level];
}

const char *nu_kernels_level(void) {
    return nu_kernels_current()->name;
}

const char *nu_simd_level(void) {
    return nu_kernels_level();
}

float nu_vec_dot_f32(const float *a, const float *b, int64_t n) {
    return nu_kernels_current()->dot_f32(a, b, n);
}

float nu_vec_dot_f16(const uint16_t *a, const float *b, int64_t n) {
    return nu_kernels_current()->dot_f16(a, b, n);
}

void nu_vec_mad_f32(float *y, const float *x, float a, int64_t n) {
    nu_kernels_current()->mad_f32(y, x, a, n);
}

void nu_vec_mad_f16(float *y, const uint16_t *x, float a, int64_t n) {
    nu_kernels_current()->mad_f16(y, x, a, n);
}

void nu_vec_dots(uint32_t type, const void *row, const float *const *q, int k, int64_t n,
                 float *out) {
    nu_kernels_current()->dots(type, row, q, k, n, out);
}

void nu_vec_mads(uint32_t type, float *const *y, const float *a, int k, const void *row, int64_t n) {
    nu_kernels_current()->mads(type, y, a, k, row, n);
}

void nu_vec_round_f16(float *x, int64_t n) {
    nu_kernels_current()->round_f16(x, n);
}
