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
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels_internal.h"
#include "nucleus.h"

static const nu_kernel_set *const level_sets[] = {
    [NU_SIMD_SCALAR] = &nu_kernels_scalar_set,
    [NU_SIMD_AVX2] = &nu_kernels_avx2_set,
    [NU_SIMD_AVX512] = &nu_kernels_avx512_set,
};

/* The chosen level, -1 until nu_kernels_init has run. */
static _Atomic int selected_level = -1;

#if defined(__x86_64__)
/* F16C (CPUID leaf 1, ECX bit 29) read directly: not every compiler's
 * __builtin_cpu_supports knows its name. AVX2 implies the OS saves the YMM
 * state F16C needs. */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (int)((c >> 29) & 1u);
}
#endif

/* CPUID check for each level's instruction sets (the ones its files are
 * compiled with and actually use). */
nu_simd nu_kernels_cpu_level(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
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

/* Whether attention rows of this type are a quantised cache's (the
 * quant_dots_rows / quant_mads_rows kernels). */
static bool quant_rows(uint32_t type) {
    return type == NU_TYPE_Q8_0 || type == NU_TYPE_Q4_0;
}

/* How many heads one call of the level's attention kernels takes: groups of
 * more run in further calls (each head's result does not depend on which
 * heads share its call). */
static int heads_per_call(const nu_kernel_set *ks, uint32_t type) {
    return quant_rows(type) ? 4 : ks->attn_heads;
}

void nu_vec_dots(uint32_t type, const void *row, const float *const *q, int k, int64_t n,
                 float *out) {
    const nu_kernel_set *ks = nu_kernels_current();
    for (int h = 0, m = heads_per_call(ks, type); h < k; h += m)
        ks->dots(type, row, q + h, k - h < m ? k - h : m, n, out + h);
}

void nu_vec_mads(uint32_t type, float *const *y, const float *a, int k, const void *row,
                 int64_t n) {
    const nu_kernel_set *ks = nu_kernels_current();
    for (int h = 0, m = heads_per_call(ks, type); h < k; h += m)
        ks->mads(type, y + h, a + h, k - h < m ? k - h : m, row, n);
}

void nu_vec_round_f16(float *x, int64_t n) {
    nu_kernels_current()->round_f16(x, n);
}

float nu_vec_scale_max(float *x, int64_t n, float scale) {
    return nu_kernels_current()->scale_max(x, n, scale);
}

void nu_vec_softmax(float *x, int64_t n, float max, int round_f16) {
    nu_kernels_current()->softmax(x, n, max, round_f16);
}

/* One call of nu_vec_dots_rows with k <= heads_per_call. */
static void dots_rows_call(const nu_kernel_set *ks, uint32_t type, const float *const *q, int k,
                           const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                           int64_t n, float *out, size_t out_stride) {
    if (quant_rows(type)) {
        ks->quant_dots_rows(type, q, k, base, stride, cells, n_rows, n, out, out_stride);
        return;
    }
    if (ks->dots_rows) {
        ks->dots_rows(type, q, k, base, stride, cells, n_rows, n, out, out_stride);
        return;
    }
    const size_t bytes = (size_t)n * (type == NU_TYPE_F16 ? 2 : 4);
    for (int64_t j = 0; j < n_rows; j++) {
        if (j + 8 < n_rows) /* rows are scattered: ask for a later one early */
            for (size_t off = 0; off < bytes; off += 64)
                __builtin_prefetch((const char *)base + (size_t)cells[j + 8] * stride + off);
        float o[NU_VEC_HEADS];
        ks->dots(type, (const char *)base + (size_t)cells[j] * stride, q, k, n, o);
        for (int v = 0; v < k; v++) out[(size_t)v * out_stride + (size_t)j] = o[v];
    }
}

void nu_vec_dots_rows(uint32_t type, const float *const *q, int k, const void *base, size_t stride,
                      const int32_t *cells, int64_t n_rows, int64_t n, float *out,
                      size_t out_stride) {
    const nu_kernel_set *ks = nu_kernels_current();
    for (int h = 0, m = heads_per_call(ks, type); h < k; h += m)
        dots_rows_call(ks, type, q + h, k - h < m ? k - h : m, base, stride, cells, n_rows, n,
                       out + (size_t)h * out_stride, out_stride);
}

void nu_vec_mads_rows(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                      const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                      int64_t n) {
    const nu_kernel_set *ks = nu_kernels_current();
    const bool quant = quant_rows(type);
    for (int h = 0, m = heads_per_call(ks, type); h < k; h += m)
        (quant ? ks->quant_mads_rows : ks->mads_rows)(type, y + h, a + (size_t)h * a_stride,
                                                      a_stride, k - h < m ? k - h : m, base, stride,
                                                      cells, n_rows, n);
}

void nu_vec_swiglu(float *gate, const float *up, int64_t n) {
    nu_kernels_current()->swiglu(gate, up, n);
}

void nu_vec_to_f16(uint16_t *dst, const float *x, int64_t n) {
    nu_kernels_current()->to_f16(dst, x, n);
}

void nu_vec_delta_rule(float *m_out, const float *m_in, const float *q, const float *k,
                       const float *v, float a, float beta, float scale, int64_t dk, int64_t dv,
                       float *o) {
    nu_kernels_current()->delta_rule(m_out, m_in, q, k, v, a, beta, scale, dk, dv, o);
}

uint64_t nu_vec_read(const void *p, size_t n) {
    return nu_kernels_current()->read(p, n);
}

/* AMX tile units. Three things must hold before a tile instruction may run:
 * CPUID reports AMX-TILE and AMX-INT8 (leaf 7, EDX bits 24 and 25), the OS
 * saves the tile state (XCR0 bits 17 and 18, read with xgetbv once CPUID
 * says OSXSAVE), and Linux has granted this process the tile data state
 * (arch_prctl ARCH_REQ_XCOMP_PERM for feature 18); without the grant the
 * first tile instruction kills the process. The answer is computed once. */
static _Atomic int amx_state = -1;

static int detect_amx(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 1;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return 1;
    const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0) return 2;
    return 3;
#else
    return 0;
#endif
}

const char *nu_amx_status(void) {
    static const char *const names[] = {
        "absent (not reported by CPUID)",
        "reported by CPUID but the OS does not enable the tile state",
        "enabled but this process was refused permission",
        "available (nucleus has no AMX kernel yet)",
    };
    int s = atomic_load(&amx_state);
    if (s < 0) {
        s = detect_amx();
        atomic_store(&amx_state, s);
    }
    return names[s];
}
