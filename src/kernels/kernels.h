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

#include "tensor_type.h"
#include "threadpool.h"

/* IEEE half and bfloat16 <-> float. Widening is exact; narrowing rounds to
 * nearest, ties to even, overflows to infinity, keeps subnormals, and turns
 * NaN into a quiet NaN of the same sign (keeping the top payload bits). */
float nu_f16_to_f32(uint16_t h);
uint16_t nu_f32_to_f16(float f);
float nu_bf16_to_f32(uint16_t h);
uint16_t nu_f32_to_bf16(float f);

/* Reference dequantisation of n elements (a whole number of blocks) of a
 * computable type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4). For any other type dst is
 * filled with zeros. */
void nu_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Reference quantisation of n floats (a whole number of blocks) to the same
 * types. The K types (Q2_K..Q6_K) fit each group's scale and min by least
 * squares (see quant_k.c); the others round as the format's usual encoder
 * does:
 *   Q8_0  d = max|x| / 127,            q = round(x / d)
 *   Q4_0  d = (x of largest |x|) / -8,  q = min(15, trunc(x / d + 8.5))
 *   Q5_0  d = (x of largest |x|) / -16, q = min(31, trunc(x / d + 16.5))
 *   Q4_1  d = (max - min) / 15, m = min, q = min(15, trunc((x - m) / d + 0.5))
 *   Q5_1  d = (max - min) / 31, m = min, q = min(31, trunc((x - m) / d + 0.5))
 * (the division is a multiplication by 1/d, 0 when d is 0; scales are
 * stored as f16). IQ4_NL and IQ4_XS: the least-squares search of iquant.h.
 * Other types (MXFP4 among them): dst is left untouched. */
void nu_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* nu_quantize_row with per-element importances (n values, e.g. a row of an
 * importance matrix: the mean square of each input's activations), for the
 * encoders that weigh their error (IQ4_NL, IQ4_XS: iquant.h; the K types:
 * kquant.h); the other types ignore them. importance may be NULL. */
void nu_quantize_row_weighted(uint32_t type, const float *src, void *dst, int64_t n,
                              const float *importance);
/* Whether nu_quantize_row_weighted weighs type's rounding by importances. */
bool nu_quantize_weighs(uint32_t type);

/* A weight matrix of n_out rows, each n_in elements of `type`. */
typedef struct nu_matrix {
    uint32_t type;
    int64_t n_in;
    int64_t n_out;
    const void *data;
    size_t row_bytes;
    /* Optional copy of data in the panel layout (nu_matrix_pack), used by
     * the levels that have panel kernels for the type; NULL if none. */
    const void *packed;
} nu_matrix;

/* Panel layout: groups of 16 rows interleaved so one vector holds the same
 * four columns of all 16 rows, which lets a kernel compute 16 outputs at a
 * time and reuse every weight vector for up to 8 activation rows. Bytes the
 * packed copy of W takes at the selected level, or 0 when that level has no
 * panel kernel for W (its type, or n_out not a multiple of 16). */
size_t nu_matrix_pack_bytes(const nu_matrix *W);

/* Writes the panel copy of W (nu_matrix_pack_bytes of it) to dst, which must
 * be 64-byte aligned. Rows [panel_begin, panel_end) of 16 each; callers may
 * split the panels among threads. */
void nu_matrix_pack(const nu_matrix *W, void *dst, int64_t panel_begin, int64_t panel_end);

/* Scratch bytes nu_matmul needs for n_batch activation rows of n_in (0 for
 * F32 weights, whose kernels read x directly). Any alignment of
 * the scratch pointer is fine: the size includes room to align it. */
size_t nu_matmul_scratch_bytes(uint32_t type, int64_t n_in, int32_t n_batch);

/* y[b * W->n_out + r] = sum_i W[r][i] * x[b * W->n_in + i], for b < n_batch.
 * Activations are converted once (e.g. quantised to 8 bits for quantised
 * weights) into scratch, then the rows are split among the pool's threads
 * (pool may be NULL: single-threaded). Each y value is a function of its
 * weight row, its activation row and the SIMD level only: bit-identical for
 * any n_batch, thread count or row split. Nothing is allocated.
 * For F16 (BF16) weights, each activation is rounded to f16 (bf16) first
 * (to nearest, ties to even), as llama.cpp's CPU backend does; so is it in
 * nu_matmul_ref.
 * For quantised weights, each 32-element activation block (256 for the K
 * types) is rounded to int8 with scale max|x|/127 first, so y differs from
 * nu_matmul_ref by at most sum over blocks of (max|x_block| / 254) *
 * sum|w_block| plus float rounding.
 * W->n_in must be a whole number of blocks; weights of a type the kernels
 * cannot multiply (not `computable` in tensor_type.h) leave y untouched. */
void nu_matmul(nu_threadpool *pool, const nu_matrix *W, const float *x, int32_t n_batch, float *y,
               void *scratch);

/* y[i] = W[i] * x for i < n: products that share their input (a layer's Q,
 * K and V; gate and up) converted once and run in one pass of the pool.
 * Each result is bit-identical to nu_matmul's. The scratch must hold the
 * conversion of x for the largest of the matrices' layouts (every layout
 * when they differ). */
void nu_matmul_multi(nu_threadpool *pool, const nu_matrix *const *W, float *const *y, int n,
                     const float *x, int32_t n_batch, void *scratch);

/* One product of a batch of products: y = W x for n_batch rows of x. */
typedef struct nu_matmul_task {
    const nu_matrix *W;
    const float *x;
    int32_t n_batch;
    float *y;
} nu_matmul_task;

/* Most products one nu_matmul_tasks call runs. */
#define NU_MATMUL_MAX_TASKS 256

/* Runs n products (n <= NU_MATMUL_MAX_TASKS) in one pass of the pool: the
 * inputs are converted first (products with the same x, n_batch, n_in and
 * activation layout share one conversion), then every product's units are
 * claimed by the threads as for one product. Each result is bit-identical
 * to nu_matmul's. scratch must hold nu_matmul_tasks_scratch_bytes(t, n). */
void nu_matmul_tasks(nu_threadpool *pool, const nu_matmul_task *t, int n, void *scratch);
size_t nu_matmul_tasks_scratch_bytes(const nu_matmul_task *t, int n);

/* The same product computed with the plain C reference, single-threaded:
 * each row is dequantised with nu_dequantize_row and multiplied with the
 * float activations in double precision. Slow; for tests. Like nu_matmul,
 * it leaves y untouched for types the kernels cannot multiply. */
void nu_matmul_ref(const nu_matrix *W, const float *x, int32_t n_batch, float *y);

/* Picks kernels for this CPU (idempotent, thread-safe). NUCLEUS_SIMD in the
 * environment may lower the level: scalar, avx2, avx512. nu_matmul and the
 * vector helpers call it themselves on first use. */
void nu_kernels_init(void);

/* Selected level: "scalar", "avx2", "avx512". */
const char *nu_kernels_level(void);

/* SIMD levels, in increasing order of capability.
 *   NU_SIMD_AVX2:   AVX2 + FMA + F16C (int8 products with vpmaddubsw)
 *   NU_SIMD_AVX512: AVX-512 F/BW/VL/DQ + VNNI (int8 products with vpdpbusd) */
typedef enum nu_simd {
    NU_SIMD_SCALAR = 0,
    NU_SIMD_AVX2 = 1,
    NU_SIMD_AVX512 = 2,
} nu_simd;

/* The best level this CPU (and OS) supports. */
nu_simd nu_kernels_cpu_level(void);

/* The level a request names ("scalar", "avx2", "avx512", as in NUCLEUS_SIMD),
 * never above cpu_max; NULL, "" or an unknown name give cpu_max. */
nu_simd nu_kernels_pick_level(const char *request, nu_simd cpu_max);

/* For tests and benchmarks: switches every kernel to `level`. Returns 0 and
 * changes nothing if the CPU lacks it. Not to be called while another thread
 * is inside a kernel. */
int nu_kernels_force_level(nu_simd level);

/* Small vector helpers for the forward pass (attention over an F32 or F16 KV
 * cache), with the selected level's SIMD. A dot product's summation order
 * depends only on n (and the level), never on the caller. */
float nu_vec_dot_f32(const float *a, const float *b, int64_t n);
/* a holds IEEE halves. */
float nu_vec_dot_f16(const uint16_t *a, const float *b, int64_t n);
/* y[i] += a * x[i]. */
void nu_vec_mad_f32(float *y, const float *x, float a, int64_t n);
void nu_vec_mad_f16(float *y, const uint16_t *x, float a, int64_t n);

/* Most vectors (query heads) the calls below take at once. */
#define NU_VEC_HEADS 8

/* The same for several vectors sharing one row (attention heads that share
 * a key or value row): row is NU_TYPE_F32 or NU_TYPE_F16 (`type`), k is
 * 1..NU_VEC_HEADS, and each result is bit-identical to the single-vector call, so a
 * head's value does not depend on which heads were grouped with it.
 *   nu_vec_dots: out[v] = nu_vec_dot_*(row, q[v], n)
 *   nu_vec_mads: nu_vec_mad_*(y[v], row, a[v], n) for each v */
void nu_vec_dots(uint32_t type, const void *row, const float *const *q, int k, int64_t n,
                 float *out);
void nu_vec_mads(uint32_t type, float *const *y, const float *a, int k, const void *row, int64_t n);

/* nu_vec_dots for n_rows rows, row j at base + cells[j] * stride bytes:
 * out[v * out_stride + j] = nu_vec_dots(type, row j, q, k, n)[v], bit-identical.
 * Rows may also be NU_TYPE_Q8_0 or NU_TYPE_Q4_0 (a quantised KV cache; n a
 * multiple of 32, at most 512): each q[v] is then rounded to 8 bits in
 * blocks of 32 as a matrix product's activations are, and multiplied with
 * the rows' blocks in integers; nu_vec_mads_rows dequantises each row. */
void nu_vec_dots_rows(uint32_t type, const float *const *q, int k, const void *base, size_t stride,
                      const int32_t *cells, int64_t n_rows, int64_t n, float *out,
                      size_t out_stride);

/* nu_vec_mads over n_rows rows in turn, row j at base + cells[j] * stride
 * bytes with weights a[v * a_stride + j]: for j = 0, 1, ...: y[v] +=
 * a[v][j] * row j. Bit-identical to one nu_vec_mads call per row (the same
 * multiply-adds in the same order), with y kept in registers meanwhile. */
void nu_vec_mads_rows(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                      const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                      int64_t n);

/* Rounds each x[i] to the nearest half-precision value (as nu_f32_to_f16
 * then nu_f16_to_f32 would). */
void nu_vec_round_f16(float *x, int64_t n);

/* x[i] *= scale for every i; returns the largest x[i] after it (NaNs are
 * passed over; -infinity for n = 0). */
float nu_vec_scale_max(float *x, int64_t n, float scale);

/* Attention weights in place: x[i] = e^(x[i] - max) / sum_j e^(x[j] - max),
 * with max >= every x[i]; then rounded to half precision if round_f16.
 * The SIMD levels compute e^ with a polynomial (within 2 ulp of expf) and
 * sum in vector lanes; the result depends only on x, n and the level. */
void nu_vec_softmax(float *x, int64_t n, float max, int round_f16);

/* SwiGLU in place: gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g).
 * The SIMD levels compute it as g * s * up with s = 1 / (1 + t) for g >= 0
 * and t / (1 + t) below, t = e^-|g| by the softmax's polynomial (no
 * overflow for any g); the result depends only on the inputs, n and the
 * level. */
void nu_vec_swiglu(float *gate, const float *up, int64_t n);

/* dst[i] = nu_f32_to_f16(x[i]) (round to nearest even, as the CPU's
 * conversion instructions do). */
void nu_vec_to_f16(uint16_t *dst, const float *x, int64_t n);

/* One token of the gated delta rule for one head (Gated DeltaNet, see
 * model/recurrent.c): the state M is dv rows of dk; for every row j,
 *   M_j = a M_j' + beta (v_j - a (M_j' . k)) k,   o_j = scale (M_j . q)
 * where M_j' is row j of m_in (NULL: zeros). m_out may be m_in. Each row
 * is read once and written once; the result depends only on the inputs,
 * dk, dv and the level. */
void nu_vec_delta_rule(float *m_out, const float *m_in, const float *q, const float *k,
                       const float *v, float a, float beta, float scale, int64_t dk, int64_t dv,
                       float *o);

/* A plain read of n bytes at p (64-byte aligned, n a multiple of 64): a sum
 * of their 64-bit words, with the widest loads of the level and nothing else
 * to do. Benchmarks set weight-streaming kernels against it. */
uint64_t nu_vec_read(const void *p, size_t n);

#endif
