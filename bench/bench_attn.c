/* bench_attn.c - speed of attention's two row kernels over a KV cache.
 *
 * For each cache type (f16, q8_0, q4_0) and SIMD level it times, on one
 * thread, what one group of query heads sharing a KV head costs at depth:
 *   dots: nu_vec_dots_rows, the scores of k query heads against n_rows rows;
 *   mads: nu_vec_mads_rows, those rows' values added with k weights each;
 * and prints nanoseconds per cached row (both kernels, k heads) and the
 * cache bytes read per second, the median of the repetitions. The rows are
 * taken in a scattered order from a cache larger than L2, as a paged cache
 * holds them. The scalar level of q8_0 / q4_0 is the portable reference
 * loop (attn_quant.c) that every level matched before it had SIMD kernels.
 *
 * Usage: bench_attn [--head N] [--heads K] [--rows N] [--reps N]
 * (defaults: TinyLlama's head of 64, k = 4, 4096 rows, 15 repetitions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nucleus.h"

#include "bench_util.h"

int main(int argc, char **argv) {
    int64_t n = 64, n_rows = 4096;
    int k = 4, reps = 15;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--head"))
            n = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--heads"))
            k = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows"))
            n_rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_attn: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (n < 32 || n > 512 || n % 32 || k < 1 || k > NU_VEC_HEADS || n_rows < 1 || reps < 1 ||
        reps > 1000) {
        fprintf(stderr,
                "bench_attn: head a multiple of 32 in [32, 512], heads 1..%d, rows >= 1, "
                "reps 1..1000\n",
                NU_VEC_HEADS);
        return 2;
    }
    const uint32_t types[3] = {NU_TYPE_F16, NU_TYPE_Q8_0, NU_TYPE_Q4_0};
    const int64_t n_cells = n_rows * 2; /* every other cell used, in a shuffled order */
    int32_t *cells = malloc(sizeof(int32_t) * (size_t)n_rows);
    float *q = malloc(sizeof(float) * NU_VEC_HEADS * (size_t)n),
          *y = malloc(sizeof(float) * NU_VEC_HEADS * (size_t)n);
    float *scores = malloc(sizeof(float) * NU_VEC_HEADS * (size_t)n_rows),
          *x = malloc(sizeof(float) * (size_t)n);
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!cells || !q || !y || !scores || !x || !t) return 1;
    uint32_t seed = 1;
#define RND() (seed = seed * 1664525u + 1013904223u, (float)(seed >> 8) / 8388608.0f - 1.0f)
    for (int64_t j = 0; j < n_rows; j++) cells[j] = (int32_t)(2 * j);
    for (int64_t j = n_rows - 1; j > 0; j--) {
        seed = seed * 1664525u + 1013904223u;
        int64_t o = (int64_t)(seed % (uint32_t)(j + 1));
        int32_t c = cells[j];
        cells[j] = cells[o];
        cells[o] = c;
    }
    for (int64_t i = 0; i < NU_VEC_HEADS * n; i++) q[i] = RND();
    const float *qp[NU_VEC_HEADS];
    float *yp[NU_VEC_HEADS];
    for (int v = 0; v < NU_VEC_HEADS; v++) qp[v] = q + v * n, yp[v] = y + v * n;
    printf("head %lld, %d query heads per KV head, %lld rows (ns per row: dots + mads)\n",
           (long long)n, k, (long long)n_rows);
    printf("%-6s %-8s %10s %10s %10s %10s\n", "cache", "level", "dots ns", "mads ns", "total ns",
           "GB/s");
    for (int ti = 0; ti < 3; ti++) {
        const uint32_t type = types[ti];
        const size_t stride = (size_t)nu_type_row_bytes(type, (uint64_t)n);
        uint8_t *cache = malloc(stride * (size_t)n_cells);
        if (!cache) return 1;
        for (int64_t c = 0; c < n_cells; c++) {
            for (int64_t i = 0; i < n; i++) x[i] = RND();
            if (type == NU_TYPE_F16)
                nu_vec_to_f16((uint16_t *)(cache + (size_t)c * stride), x, n);
            else
                nu_quantize_row(type, x, cache + (size_t)c * stride, n);
        }
        for (int l = 0; l <= (int)nu_kernels_cpu_level(); l++) {
            nu_kernels_force_level((nu_simd)l);
            double med[2] = {0, 0};
            for (int part = 0; part < 2; part++) {
                for (int r = -1; r < reps; r++) {
                    double t0 = now_s();
                    if (part == 0)
                        nu_vec_dots_rows(type, qp, k, cache, stride, cells, n_rows, n, scores,
                                         (size_t)n_rows);
                    else
                        nu_vec_mads_rows(type, yp, scores, (size_t)n_rows, k, cache, stride, cells,
                                         n_rows, n);
                    if (r >= 0) t[r] = now_s() - t0;
                }
                med[part] = median(t, reps) * 1e9 / (double)n_rows;
            }
            const double total = med[0] + med[1];
            printf("%-6s %-8s %10.2f %10.2f %10.2f %10.2f\n", nu_type_get(type)->name,
                   l == 0   ? "scalar"
                   : l == 1 ? "avx2"
                            : "avx512",
                   med[0], med[1], total, 2.0 * (double)stride / total);
        }
        free(cache);
    }
    nu_kernels_force_level(nu_kernels_cpu_level());
    free(cells), free(q), free(y), free(scores), free(x), free(t);
    return 0;
}
