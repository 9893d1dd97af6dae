/* kernels.h - numeric kernels: half-precision conversion, block formats,
 * dot products and the matrix-times-activations product of the forward pass.
 *
 * Every SIMD variant has a plain C reference it is tested against; the best
 * variant for the CPU is chosen once at run time (nu_kernels_init), so one
 * binary runs on scalar, AVX2 and AVX-512 machines.
 *
 * Reproducibility: the value computed for one (weight row, activation row)
 * pair never depends on the batch size, the thread count or which thread
 * computes it. Kernels that process several rows or vectors at once must
 * keep each pair's reduction order identical to the single-pair path.
 */
#ifndef NU_KERNELS_H
#define NU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../tensor_type.h"
#include "threadpool.h"

/* IEEE half and bfloat16 <-> float (exact, round-to-nearest-even). */
float nu_f16_to_f32(uint16_t h);
uint16_t nu_f32_to_f16(float f);
float nu_bf16_to_f32(uint16_t h);
uint16_t nu_f32_to_bf16(float f);

/* Reference dequantisation of n elements (a whole number of blocks) of a
 * computable type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0). */
void nu_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Reference quantisation of n floats (a whole number of blocks) to the same
 * types, rounding as the format's usual encoder does. */
void nu_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* A weight matrix of n_out rows, each n_in elements of `type`. */
typedef struct nu_matrix {
    uint32_t type;
    int64_t n_in;
    int64_t n_out;
    const void *data;
    size_t row_bytes;
} nu_matrix;

/* Scratch bytes nu_matmul needs for n_batch activation rows of n_in. */
size_t nu_matmul_scratch_bytes(uint32_t type, int64_t n_in, int32_t n_batch);

/* y[b * W->n_out + r] = sum_i W[r][i] * x[b * W->n_in + i], for b < n_batch.
 * Activations are converted once (e.g. quantised to 8 bits for quantised
 * weights) into scratch, then the rows are split among the pool's threads. */
void nu_matmul(nu_threadpool *pool, const nu_matrix *W, const float *x, int32_t n_batch,
               float *y, void *scratch);

/* The same product computed with the plain C reference, single-threaded. */
void nu_matmul_ref(const nu_matrix *W, const float *x, int32_t n_batch, float *y);

/* Picks kernels for this CPU (idempotent, thread-safe). NUCLEUS_SIMD in the
 * environment may lower the level: scalar, avx2, avx512. */
void nu_kernels_init(void);

/* Selected level: "scalar", "avx2", "avx512". */
const char *nu_kernels_level(void);

#endif
