/* bench_kernels.c - weight-streaming speed of nu_matmul.
 *
 * For each weight type, SIMD level and thread count it times a matrix-vector
 * product (n_batch = 1, the token-generation case) of a matrix with n_in =
 * 2048 and n_out = 5632 (TinyLlama's FFN gate/up shape) and reports GB/s of
 * weight bytes read, the median of the repetitions:
 *   cold: many copies of the matrix (over 256 MB, more than any cache) are
 *         used in turn, so weights stream from DRAM as in real generation;
 *   hot:  the same matrix each time (in L3 when it fits).
 * Types the level has a panel kernel for are measured twice: in the file's
 * row layout ("rows") and repacked into panels ("panel", what a loaded model
 * uses; in huge pages as the loader asks for).
 * Batched products (n_batch = 64 unless --batch lists others, prompt
 * processing) are reported in GOP/s (2 * n_in * n_out * n_batch / time), hot.
 *
 * Usage: bench_kernels [--quick] [--type NAME] [--level NAME] [--threads N] [--idle PCT]
 *                      [--shape NINxNOUT] [--batch N[,N...]]
 * --shape picks another matrix (TinyLlama: 2048x2048 attention, 2048x256
 * k/v, 5632x2048 FFN down; n_in a multiple of 256 for the K-quant types).
 * --idle PCT waits (up to a minute) before each configuration until the
 * CPUs were at least PCT% idle for half a second: on a shared machine, other
 * programs' load otherwise decides the figures. A '*' marks a configuration
 * measured while the machine stayed busier than that.
 * Compare with the memory-bandwidth ceiling of ../shared/tools/membw.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels.h"
#include "threadpool.h"
#include "nucleus.h"

#include "bench_util.h"

#define COLD_BYTES (256u << 20)
#define MAX_BATCHES 8

/* The matrix shape (--shape) and the batched sizes timed (--batch). */
static int N_IN = 2048, N_OUT = 5632;
static int batches[MAX_BATCHES] = {64}, n_batches = 1, max_batch = 64;

typedef struct options {
    int quick;
    const char *type;  /* NULL: all */
    const char *level; /* NULL: all */
    int threads;       /* 0: 1 and 2 */
    int idle;          /* 0: do not wait for an idle machine */
} options;

/* Idle and total jiffies of all CPUs so far (Linux /proc/stat). */
static int cpu_times(unsigned long long *idle, unsigned long long *total) {
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4) return 0;
    *idle = v[3];
    *total = 0;
    for (int i = 0; i < 8; i++) *total += v[i];
    return 1;
}

/* Waits up to a minute for the CPUs to be pct% idle over half a second;
 * returns 0 if they never were. */
static int wait_idle(int pct) {
    for (int tries = 0; tries < 120; tries++) {
        unsigned long long i0, t0, i1, t1;
        if (!cpu_times(&i0, &t0)) return 1;
        struct timespec half = {0, 500000000};
        nanosleep(&half, NULL);
        if (!cpu_times(&i1, &t1)) return 1;
        if (t1 > t0 && 100 * (i1 - i0) >= (unsigned long long)pct * (t1 - t0)) return 1;
    }
    return 0;
}

/* Random weights of one type: one quantised matrix copied n_copies times. */
static uint8_t *make_weights(uint32_t type, size_t matrix_bytes, int n_copies) {
    uint8_t *w = aligned_alloc(64, matrix_bytes * (size_t)n_copies);
    float *row = malloc(sizeof(float) * N_IN);
    if (!w || !row) return NULL;
    unsigned seed = 1;
    for (int o = 0; o < N_OUT; o++) {
        for (int i = 0; i < N_IN; i++) {
            seed = seed * 1103515245u + 12345u;
            row[i] = (float)((int)(seed >> 16 & 0x7FFF) - 16384) / 16384.0f * 0.05f;
        }
        nu_quantize_row(type, row, w + (size_t)o * (matrix_bytes / N_OUT), N_IN);
    }
    for (int c = 1; c < n_copies; c++) memcpy(w + (size_t)c * matrix_bytes, w, matrix_bytes);
    free(row);
    return w;
}

/* The copies of w in the panel layout of the selected level, in huge pages
 * where the system allows (as the model loader does); NULL when the level has
 * no panel kernel for the type. *pack_bytes gets one copy's size. */
static uint8_t *make_packed(uint32_t type, const uint8_t *w, size_t bytes, int n_copies,
                            size_t *pack_bytes) {
    nu_matrix m = {type, N_IN, N_OUT, w, bytes / N_OUT, NULL};
    *pack_bytes = nu_matrix_pack_bytes(&m);
    if (!*pack_bytes) return NULL;
    size_t total = *pack_bytes * (size_t)n_copies;
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, total, MADV_HUGEPAGE);
    nu_matrix_pack(&m, p, 0, N_OUT / 16);
    for (int c = 1; c < n_copies; c++)
        memcpy((uint8_t *)p + (size_t)c * *pack_bytes, p, *pack_bytes);
    return p;
}

/* A plain read (nu_vec_read) of n lines split among the pool's threads: what
 * the memory system delivers to loads with nothing else to do, the ceiling a
 * weight-streaming kernel is set against. */
typedef struct read_pass {
    const uint64_t *p;
    size_t n; /* 64-byte lines */
    uint64_t sum[2];
} read_pass;

static void read_task(void *arg, int ith, int nth) {
    read_pass *rp = arg;
    int64_t b, e;
    nu_split_range((int64_t)rp->n, ith, nth, &b, &e);
    uint64_t s = e > b ? nu_vec_read(rp->p + 8 * b, 64 * (size_t)(e - b)) : 0;
    if (ith < 2) rp->sum[ith] = s;
}

/* Per-pair ratio of kernel to plain-read speed of the last cold timing, and
 * the read speed (GB/s), both medians: the pairs are interleaved, so slow
 * drifts of the machine's bandwidth cancel out of the ratio. */
static double last_ratio, last_ceiling;

/* Median seconds of one nu_matmul over reps calls, cycling through copies
 * (of the panel layout when packed is not NULL, pack_bytes apart). With
 * several copies, each call is preceded by a timed plain read of the copy
 * farthest from it (see last_ratio). */
static double time_matmul(nu_threadpool *pool, uint32_t type, const uint8_t *w, size_t bytes,
                          const uint8_t *packed, size_t pack_bytes, int n_copies, const float *x,
                          int32_t n_batch, float *y, void *scratch, int reps) {
    double *t = malloc(sizeof(double) * (size_t)reps * 3);
    double *ratio = t + reps, *ceil_bw = t + 2 * reps;
    nu_matrix m = {type, N_IN, N_OUT, w, bytes / N_OUT, packed};
    const uint8_t *base = packed ? packed : w;
    const size_t stride = packed ? pack_bytes : bytes;
    nu_matmul(pool, &m, x, n_batch, y, scratch); /* warm-up */
    for (int r = 0; r < reps; r++) {
        if (n_copies > 2) {
            read_pass rp = {
                (const uint64_t *)(const void *)(base +
                                                 (size_t)((r + n_copies / 2) % n_copies) * stride),
                stride / 64,
                {0, 0}};
            double t0 = now_s();
            nu_threadpool_run(pool, read_task, &rp);
            ceil_bw[r] = (double)(rp.n * 64) / (now_s() - t0) / 1e9;
            if (rp.sum[0] + rp.sum[1] == 42) printf(" ");
        }
        m.data = w + (size_t)(r % n_copies) * bytes;
        if (packed) m.packed = packed + (size_t)(r % n_copies) * pack_bytes;
        double t0 = now_s();
        nu_matmul(pool, &m, x, n_batch, y, scratch);
        t[r] = now_s() - t0;
        if (n_copies > 2) ratio[r] = (double)stride / t[r] / 1e9 / ceil_bw[r];
    }
    if (n_copies > 2) {
        last_ratio = median(ratio, reps);
        last_ceiling = median(ceil_bw, reps);
    }
    double med = median(t, reps);
    free(t);
    return med;
}

/* "32,512": the batched sizes to time; 0 if the list is malformed. */
static int parse_batches(const char *list) {
    n_batches = 0;
    max_batch = 1;
    for (const char *p = list; *p; p++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096 || n_batches == MAX_BATCHES || (*end && *end != ','))
            return 0;
        batches[n_batches++] = (int)v;
        max_batch = (int)v > max_batch ? (int)v : max_batch;
        p = end;
        if (!*p) break;
    }
    return n_batches > 0;
}

static void bench_type(uint32_t type, const options *o, const float *x, float *y, void *scratch) {
    const char *name = nu_type_get(type)->name;
    if (o->type && strcmp(o->type, name) != 0) return;
    if (N_IN % (int)nu_type_get(type)->block_size) return; /* the shape does not fit the type */
    size_t bytes = nu_type_row_bytes(type, N_IN) * N_OUT;
    int copies = (int)(COLD_BYTES / bytes) + 1;
    if (o->quick) copies = copies > 4 ? 4 : copies;
    uint8_t *w = make_weights(type, bytes, copies);
    if (!w) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int level = 0; level <= (int)nu_kernels_cpu_level(); level++) {
        nu_kernels_force_level((nu_simd)level);
        if (o->level && strcmp(o->level, nu_kernels_level()) != 0) continue;
        size_t pack_bytes = 0;
        uint8_t *packed = make_packed(type, w, bytes, copies, &pack_bytes);
        for (int layout = 0; layout < (packed ? 2 : 1); layout++) {
            const uint8_t *pk = layout ? packed : NULL;
            for (int threads = 1; threads <= 2; threads++) {
                if (o->threads && threads != o->threads) continue;
                int calm = o->idle ? wait_idle(o->idle) : 1;
                nu_threadpool *pool = nu_threadpool_new(threads);
                int reps = o->quick ? 9 : (copies * 3 > 31 ? copies * 3 : 31);
                double cold = time_matmul(pool, type, w, bytes, pk, pack_bytes, copies, x, 1, y,
                                          scratch, reps);
                double hot =
                    time_matmul(pool, type, w, bytes, pk, pack_bytes, 1, x, 1, y, scratch, reps);
                printf("%-5s %-7s %-5s %d thr  cold %6.1f GB/s (%3.0f%% of reads at %5.1f)  hot "
                       "%6.1f GB/s  %7.1f us",
                       name, nu_kernels_level(), layout ? "panel" : "rows", threads,
                       (double)bytes / cold / 1e9, 100 * last_ratio, last_ceiling,
                       (double)bytes / hot / 1e9, cold * 1e6);
                for (int b = 0; b < n_batches; b++) {
                    int breps = level == 0 ? 3 : o->quick ? 3 : 9;
                    double batch = time_matmul(pool, type, w, bytes, pk, pack_bytes, 1, x,
                                               batches[b], y, scratch, breps);
                    printf("  batch%d %7.1f GOP/s", batches[b],
                           2.0 * N_IN * N_OUT * batches[b] / batch / 1e9);
                }
                printf("%s\n", calm ? "" : " *");
                fflush(stdout);
                nu_threadpool_free(pool);
            }
        }
        if (packed) munmap(packed, pack_bytes * (size_t)copies);
    }
    free(w);
}

int main(int argc, char **argv) {
    options o = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            o.quick = 1;
        else if (!strcmp(argv[i], "--type") && i + 1 < argc)
            o.type = argv[++i];
        else if (!strcmp(argv[i], "--level") && i + 1 < argc)
            o.level = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            o.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--idle") && i + 1 < argc)
            o.idle = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc &&
                 sscanf(argv[++i], "%dx%d", &N_IN, &N_OUT) == 2 && N_IN > 0 && N_OUT > 0)
            continue;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc && parse_batches(argv[++i]))
            continue;
        else {
            fprintf(stderr,
                    "usage: %s [--quick] [--type NAME] [--level NAME] [--threads N] [--idle PCT] "
                    "[--shape NINxNOUT] [--batch N[,N...]]\n",
                    argv[0]);
            return 2;
        }
    }
    nu_kernels_init();
    printf("matmul n_in %d x n_out %d, n_batch 1 (cold: >256 MB of copies; hot: one copy); "
           "CPU level %s\n",
           N_IN, N_OUT, nu_kernels_level());
    float *x = malloc(sizeof(float) * (size_t)N_IN * (size_t)max_batch);
    float *y = malloc(sizeof(float) * (size_t)N_OUT * (size_t)max_batch);
    size_t scratch_bytes = nu_matmul_scratch_bytes(NU_TYPE_Q8_0, N_IN, max_batch);
    if (nu_matmul_scratch_bytes(NU_TYPE_Q4_K, N_IN, max_batch) > scratch_bytes)
        scratch_bytes = nu_matmul_scratch_bytes(NU_TYPE_Q4_K, N_IN, max_batch);
    void *scratch = malloc(scratch_bytes);
    for (size_t i = 0; i < (size_t)N_IN * (size_t)max_batch; i++)
        x[i] = (float)((int)(i * 7919 % 2001) - 1000) / 1000.0f;
    const uint32_t types[] = {NU_TYPE_Q4_0, NU_TYPE_Q8_0, NU_TYPE_Q4_1, NU_TYPE_Q5_0, NU_TYPE_Q5_1,
                              NU_TYPE_Q2_K, NU_TYPE_Q3_K, NU_TYPE_Q4_K, NU_TYPE_Q5_K, NU_TYPE_Q6_K,
                              NU_TYPE_F16,  NU_TYPE_BF16, NU_TYPE_F32};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        bench_type(types[t], &o, x, y, scratch);
    free(x);
    free(y);
    free(scratch);
    return 0;
}
