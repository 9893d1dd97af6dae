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

/* Bytes of one converted activation row in layout `format` (nu_act_format;
 * 0 for the float rows used as they are). */
static size_t act_row_bytes(int format, int64_t n_in) {
    switch (format) {
    case 1: return nu_act_row_bytes(n_in);
    case 2: return nu_actk_row_bytes(n_in);
    case 3:
    case 4: return (size_t)n_in * sizeof(float);
    default: return 0;
    }
}

size_t nu_matmul_scratch_bytes(uint32_t type, int64_t n_in, int32_t n_batch) {
    if (n_batch <= 0 || nu_act_format(type) == 0) return 0;
    return (size_t)n_batch * act_row_bytes(nu_act_format(type), n_in) + 64;
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

/* Units of work of one product: row ranges for the row kernels; (activation
 * chunk, panel range) items for the panel kernels (packed.c). */
static int use_panels(const nu_matmul_job *job) {
    return job->W->packed && nu_kernels_current()->panel[job->W->type];
}

static int64_t job_units(const nu_matmul_job *job, int nth) {
    if (use_panels(job)) return nu_panel_items(job, nth);
    const int64_t unit = rows_per_unit(job->W->n_out, nth);
    return (job->W->n_out + unit - 1) / unit;
}

static void job_unit(const nu_matmul_job *job, int64_t u, int nth) {
    if (use_panels(job)) {
        nu_panel_item(job, u, nth);
        return;
    }
    const int64_t n_out = job->W->n_out, unit = rows_per_unit(n_out, nth);
    int64_t r0 = u * unit, r1 = r0 + unit < n_out ? r0 + unit : n_out;
    matmul_rows(job, nu_kernels_current()->tile[job->W->type], r0, r1);
}

/* Products run as one set of units (one wake-up of the pool for all of
 * them). */
#define CLAIM_THREADS 64 /* pools up to this size claim per thread (below) */
typedef struct multi_job {
    nu_matmul_job *jobs;
    int64_t *first; /* [n] index of each job's first unit */
    int n;
    _Atomic int64_t next; /* larger pools: the next unclaimed unit */
    struct {
        _Alignas(64) _Atomic int64_t v; /* units of part t claimed so far */
    } claim[CLAIM_THREADS];
} multi_job;

static void run_unit(const multi_job *m, int64_t u, int nth) {
    int lo = 0, hi = m->n - 1; /* the last job whose first unit is <= u */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (m->first[mid] <= u)
            lo = mid;
        else
            hi = mid - 1;
    }
    job_unit(&m->jobs[lo], u - m->first[lo], nth);
}

/* The units are split into one contiguous part per thread, and each thread
 * claims the units of its own part in order, then those left in the other
 * parts: a thread streams its weights front to back (the memory system's
 * prefetchers keep up across unit boundaries; with units dealt in turn a
 * thread's stream jumps at every unit: Q4_0 generation 2-5% slower), and
 * one that starts late (woken late, or sharing its core) finds its part
 * taken over. Which thread computes a unit never changes its values. */
static void multi_task(void *arg, int ith, int nth) {
    multi_job *m = arg;
    const int64_t total = m->first[m->n];
    if (nth > CLAIM_THREADS) {
        for (int64_t u = atomic_fetch_add(&m->next, 1); u < total;
             u = atomic_fetch_add(&m->next, 1))
            run_unit(m, u, nth);
        return;
    }
    for (int d = 0; d < nth; d++) {
        const int t = (ith + d) % nth;
        int64_t b, e;
        nu_split_range(total, t, nth, &b, &e);
        for (int64_t u = b + atomic_fetch_add(&m->claim[t].v, 1); u < e;
             u = b + atomic_fetch_add(&m->claim[t].v, 1))
            run_unit(m, u, nth);
    }
}

/* Bytes of one job's converted activations (0 for F32 weights). */
static size_t act_bytes(const nu_matrix *W, int32_t n_batch) {
    return (size_t)n_batch * act_row_bytes(nu_act_format(W->type), W->n_in);
}

/* Sets up job for W; for quantised types its activations go at *scratch
 * (64-byte aligned; advanced past them) unless `act` already holds the same
 * input in the same layout. */
static void prepare_job(nu_matmul_job *job, const nu_matrix *W, const float *x, int32_t n_batch,
                        float *y, uint8_t **scratch, const nu_matmul_job *act) {
    *job = (nu_matmul_job){.W = W, .x = x, .n_batch = n_batch, .y = y};
    atomic_init(&job->next_unit, 0);
    const int format = nu_act_format(W->type);
    if (format == 0) return;
    job->act_stride = act_row_bytes(format, W->n_in);
    job->act_n_pad = format == 2 ? W->n_in : nu_act_n_pad(W->n_in);
    if (act) {
        job->act = act->act;
        return;
    }
    uintptr_t p = ((uintptr_t)*scratch + 63) & ~(uintptr_t)63;
    job->act = (uint8_t *)p;
    *scratch = job->act + act_bytes(W, n_batch);
}

/* Rounds one activation row to f16 (format 3) or bf16 (format 4) values,
 * to nearest, ties to even (llama.cpp converts the activations of F16 and
 * BF16 weight products to those types; the kernels then read the rounded
 * floats as they would read x). */
static void round_row(const nu_kernel_set *ks, int format, const float *x, int64_t n, float *dst) {
    if (format == 3) {
        memcpy(dst, x, (size_t)n * sizeof(float));
        ks->round_f16(dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = nu_bf16_to_f32(nu_f32_to_bf16(x[i]));
}

/* Converts the activation rows of the jobs that own their conversion: one
 * (job, row) pair after another, split among the threads. */
typedef struct convert_task {
    nu_matmul_job *jobs;
    const bool *owns;
    int n;
    int64_t rows;
} convert_task;

static void convert_worker(void *arg, int ith, int nth) {
    const convert_task *t = arg;
    const nu_kernel_set *ks = nu_kernels_current();
    int64_t r0, r1, skipped = 0;
    nu_split_range(t->rows, ith, nth, &r0, &r1);
    for (int i = 0; i < t->n && r0 < r1; i++) {
        const nu_matmul_job *job = &t->jobs[i];
        if (!t->owns[i]) continue;
        int64_t b0 = r0 - skipped, b1 = r1 - skipped;
        skipped += job->n_batch;
        if (b1 <= 0) continue;
        if (b0 < 0) b0 = 0;
        if (b0 >= job->n_batch) continue;
        if (b1 > job->n_batch) b1 = job->n_batch;
        const int format = nu_act_format(job->W->type);
        if (format >= 3) {
            for (int64_t b = b0; b < b1; b++)
                round_row(ks, format, job->x + b * job->W->n_in, job->W->n_in,
                          (float *)(job->act + (size_t)b * job->act_stride));
            continue;
        }
        nu_act_quant_fn quantize = format == 2 ? ks->quantize_act_k : ks->quantize_act;
        for (int64_t b = b0; b < b1; b++)
            quantize(job->x + b * job->W->n_in, job->W->n_in,
                     job->act + (size_t)b * job->act_stride);
    }
}

static int can_multiply(const nu_matrix *W) {
    return W->n_out > 0 && W->type < NU_TYPE_COUNT && nu_kernels_current()->tile[W->type];
}

size_t nu_matmul_tasks_scratch_bytes(const nu_matmul_task *t, int n) {
    size_t total = 64;
    for (int i = 0; i < n; i++) total += act_bytes(t[i].W, t[i].n_batch) + 64;
    return total;
}

void nu_matmul_tasks(nu_threadpool *pool, const nu_matmul_task *t, int n, void *scratch) {
    nu_matmul_job jobs[NU_MATMUL_MAX_TASKS];
    int64_t first[NU_MATMUL_MAX_TASKS + 1];
    bool owns[NU_MATMUL_MAX_TASKS];
    multi_job m = {.jobs = jobs, .first = first, .n = 0};
    uint8_t *at = scratch;
    int64_t convert_rows = 0;
    const int nth = nu_threadpool_size(pool);
    for (int i = 0; i < n && m.n < NU_MATMUL_MAX_TASKS; i++) {
        if (t[i].n_batch <= 0 || !can_multiply(t[i].W)) continue;
        /* an input already converted for an earlier job of the same layout */
        const nu_matmul_job *same = NULL;
        for (int j = 0; j < m.n && !same; j++)
            if (jobs[j].x == t[i].x && jobs[j].n_batch == t[i].n_batch &&
                jobs[j].W->n_in == t[i].W->n_in &&
                nu_act_format(jobs[j].W->type) == nu_act_format(t[i].W->type))
                same = &jobs[j];
        prepare_job(&jobs[m.n], t[i].W, t[i].x, t[i].n_batch, t[i].y, &at, same);
        owns[m.n] = !same && jobs[m.n].act;
        if (owns[m.n]) convert_rows += t[i].n_batch;
        m.n++;
    }
    if (m.n == 0) return;
    convert_task conv = {jobs, owns, m.n, convert_rows};
    if (convert_rows > PARALLEL_QUANT_ROWS)
        nu_threadpool_run(pool, convert_worker, &conv);
    else if (convert_rows > 0)
        convert_worker(&conv, 0, 1);
    /* the float-row kernels read the rounded rows in place of x */
    for (int i = 0; i < m.n; i++)
        if (nu_act_format(jobs[i].W->type) >= 3) jobs[i].x = (const float *)jobs[i].act;
    int64_t total = 0;
    for (int i = 0; i < m.n; i++) {
        first[i] = total;
        total += job_units(&jobs[i], nth);
    }
    first[m.n] = total;
    atomic_init(&m.next, 0);
    for (int th = 0; th < nth && th < CLAIM_THREADS; th++) atomic_init(&m.claim[th].v, 0);
    nu_threadpool_run(pool, multi_task, &m);
}

void nu_matmul(nu_threadpool *pool, const nu_matrix *W, const float *x, int32_t n_batch, float *y,
               void *scratch) {
    nu_matmul_task t = {W, x, n_batch, y};
    nu_matmul_tasks(pool, &t, 1, scratch);
}

void nu_matmul_multi(nu_threadpool *pool, const nu_matrix *const *W, float *const *y, int n,
                     const float *x, int32_t n_batch, void *scratch) {
    /* one shared input conversion needs the same length and layout; else
     * one product after another, each with the whole scratch */
    bool shared = true;
    for (int i = 1; i < n && shared; i++)
        shared = W[i]->n_in == W[0]->n_in && nu_act_format(W[i]->type) == nu_act_format(W[0]->type);
    if (!shared) {
        for (int i = 0; i < n; i++) nu_matmul(pool, W[i], x, n_batch, y[i], scratch);
        return;
    }
    nu_matmul_task t[NU_MATMUL_MAX_TASKS];
    for (int i = 0; i < n && i < NU_MATMUL_MAX_TASKS; i++)
        t[i] = (nu_matmul_task){W[i], x, n_batch, y[i]};
    nu_matmul_tasks(pool, t, n < NU_MATMUL_MAX_TASKS ? n : NU_MATMUL_MAX_TASKS, scratch);
}

/* The activation value an F16 (BF16) weight is multiplied with: x rounded to
 * half (bfloat16) precision; other types take x as it is. */
static double ref_act(uint32_t type, float x) {
    if (type == NU_TYPE_F16) return nu_f16_to_f32(nu_f32_to_f16(x));
    if (type == NU_TYPE_BF16) return nu_bf16_to_f32(nu_f32_to_bf16(x));
    return x;
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
        for (int64_t j = 0; j < count; j++) sum += (double)buf[j] * ref_act(type, x[i + j]);
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
