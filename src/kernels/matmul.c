/* matmul.c - the matrix-times-activations product of the forward pass: the
 * once-per-call activation conversion, the split of rows among threads, the
 * cache blocking of batched products, and the plain reference product.
 */
#include <stdatomic.h>

#include "kquant.h"

/* Weight bytes a thread keeps hot while it runs every group of activation
 * rows over them (fits the L2 caches of current x86 cores with room for the
 * activations). */
#define CHUNK_BYTES (128 * 1024)

/* Activation rows above which their quantisation is shared among threads. */
#define PARALLEL_QUANT_ROWS 4

/* Work units per thread, and the fewest rows a unit has. */
#define UNITS_PER_THREAD 8
#define MIN_UNIT_ROWS 16

size_t nu_matmul_scratch_bytes(uint32_t type, int64_t n_in, int32_t n_batch) {
    if (n_batch <= 0) return 0;
    if (nu_type_is_kquant(type)) return (size_t)n_batch * nu_actk_row_bytes(n_in) + 64;
    if (!nu_type_is_quantized(type)) return 0;
    return (size_t)n_batch * nu_act_row_bytes(n_in) + 64;
}

/* Quantises this thread's share of the activation rows. */
static void quantize_task(void *arg, int ith, int nth) {
    const nu_matmul_job *job = arg;
    const nu_kernel_set *ks = nu_kernels_current();
    int64_t b0, b1;
    nu_act_quant_fn quantize =
        nu_type_is_kquant(job->W->type) ? ks->quantize_act_k : ks->quantize_act;
    nu_split_range(job->n_batch, ith, nth, &b0, &b1);
    for (int64_t b = b0; b < b1; b++)
        quantize(job->x + b * job->W->n_in, job->W->n_in, job->act + (size_t)b * job->act_stride);
}

/* Rows per cache chunk: enough that CHUNK_BYTES of weights are reused by all
 * activation groups before moving on (1 row when there is one group). */
static int64_t rows_per_chunk(const nu_matmul_job *job) {
    if (job->n_batch <= NU_TILE_MAX) return INT64_MAX;
    int64_t rows = (int64_t)(CHUNK_BYTES / (job->W->row_bytes ? job->W->row_bytes : 1));
    return rows > 0 ? rows : 1;
}

/* Rows of one unit of work: about UNITS_PER_THREAD units per thread, so a
 * thread that was preempted (or is slower) leaves its unclaimed units to the
 * others; a row is always computed whole by one thread, so who computes it
 * does not change its value. */
static int64_t rows_per_unit(int64_t n_out, int nth) {
    int64_t rows = n_out / ((int64_t)nth * UNITS_PER_THREAD);
    return rows > MIN_UNIT_ROWS ? rows : MIN_UNIT_ROWS;
}

/* Rows [r0, r1): chunk by chunk, every group of up to NU_TILE_MAX activation
 * rows against every row of the chunk. */
static void matmul_rows(const nu_matmul_job *job, nu_tile_fn tile, int64_t r0, int64_t r1) {
    const int64_t chunk = rows_per_chunk(job);
    for (int64_t c0 = r0, c1; c0 < r1; c0 = c1) {
        c1 = r1 - c0 > chunk ? c0 + chunk : r1;
        for (int32_t b = 0; b < job->n_batch; b += NU_TILE_MAX) {
            int k = job->n_batch - b < NU_TILE_MAX ? job->n_batch - b : NU_TILE_MAX;
            for (int64_t r = c0; r < c1; r++) tile(job, r, b, k);
        }
    }
}

/* Each thread claims units until none is left: a thread that starts late
 * (woken late, or sharing its core) finds the work already done. */
static void matmul_task(void *arg, int ith, int nth) {
    nu_matmul_job *job = arg;
    nu_tile_fn tile = nu_kernels_current()->tile[job->W->type];
    const int64_t n_out = job->W->n_out, unit = rows_per_unit(n_out, nth);
    const int64_t n_units = (n_out + unit - 1) / unit;
    (void)ith;
    for (int64_t u = atomic_fetch_add(&job->next_unit, 1); u < n_units;
         u = atomic_fetch_add(&job->next_unit, 1)) {
        int64_t r0 = u * unit, r1 = r0 + unit < n_out ? r0 + unit : n_out;
        matmul_rows(job, tile, r0, r1);
    }
}

void nu_matmul(nu_threadpool *pool, const nu_matrix *W, const float *x, int32_t n_batch, float *y,
               void *scratch) {
    const nu_kernel_set *ks = nu_kernels_current();
    if (n_batch <= 0 || W->n_out <= 0 || W->type >= NU_TYPE_COUNT || !ks->tile[W->type]) return;
    nu_matmul_job job = {.W = W, .x = x, .n_batch = n_batch, .y = y};
    atomic_init(&job.next_unit, 0);
    const int kquant = nu_type_is_kquant(W->type);
    if (kquant || nu_type_is_quantized(W->type)) {
        uintptr_t p = ((uintptr_t)scratch + 63) & ~(uintptr_t)63;
        job.act = (uint8_t *)p;
        job.act_stride = kquant ? nu_actk_row_bytes(W->n_in) : nu_act_row_bytes(W->n_in);
        job.act_n_pad = kquant ? W->n_in : nu_act_n_pad(W->n_in);
        if (n_batch > PARALLEL_QUANT_ROWS)
            nu_threadpool_run(pool, quantize_task, &job);
        else
            quantize_task(&job, 0, 1);
    }
    nu_threadpool_run(pool, matmul_task, &job);
}

/* Dot of one weight row with one activation row: the row is dequantised a
 * few blocks at a time and multiplied in double precision. */
static float ref_dot(uint32_t type, const uint8_t *w, const float *x, int64_t n) {
    const nu_type_traits *t = nu_type_get(type);
    const int64_t step = 256; /* a whole number of blocks of every type here */
    float buf[256];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i += step) {
        int64_t count = n - i < step ? n - i : step;
        nu_dequantize_row(type, w + (size_t)(i / t->block_size) * t->block_bytes, buf, count);
        for (int64_t j = 0; j < count; j++) sum += (double)buf[j] * (double)x[i + j];
    }
    return (float)sum;
}

void nu_matmul_ref(const nu_matrix *W, const float *x, int32_t n_batch, float *y) {
    if (!nu_type_get(W->type)->computable) return;
    for (int32_t b = 0; b < n_batch; b++)
        for (int64_t r = 0; r < W->n_out; r++)
            y[(size_t)b * (size_t)W->n_out + r] =
                ref_dot(W->type, (const uint8_t *)W->data + (size_t)r * W->row_bytes,
                        x + (size_t)b * (size_t)W->n_in, W->n_in);
}
