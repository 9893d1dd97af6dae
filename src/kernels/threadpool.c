/* threadpool.c - a persistent pool of worker threads.
 *
 * Protocol. The owner (thread 0) publishes the task, sets `pending` to the
 * number of workers and bumps `generation`. Each worker waits for the
 * generation to change, runs its part, and decrements `pending`; the owner
 * runs part 0 and then waits for `pending` to reach zero. Nothing is
 * allocated and no lock is taken per run.
 *
 * Waiting. Workers spin (with the CPU's pause hint) for a short while, as the
 * next task of a forward pass usually follows within microseconds, then keep
 * polling while yielding the core (so a thread that shares the core and has
 * work can run), and after a longer idle time sleep on a futex keyed on
 * `generation`. The owner makes the wake-up system
 * call only when some worker announced itself in `sleepers`. Because both the
 * owner (bump generation, then read sleepers) and a worker (raise sleepers,
 * then re-read generation) use sequentially consistent operations, at least
 * one of them sees the other's write: a worker never sleeps through a run.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "threadpool.h"

/* A waiting thread first polls SPIN_CHECKS times with the pause hint (tens
 * of microseconds: the next task of a forward pass usually comes sooner),
 * then polls while yielding its core; a worker idle for WORKER_YIELD_NS
 * sleeps on the futex. */
#define SPIN_CHECKS 512
#define WORKER_YIELD_NS 2000000

typedef struct worker {
    struct nu_threadpool *pool;
    int ith;
} worker;

struct nu_threadpool {
    int n_threads;
    pthread_t *threads; /* n_threads - 1 workers */
    worker *workers;
    /* The current task, written by the owner before bumping generation. */
    nu_task_fn fn;
    void *arg;
    /* Each counter on its own cache line: workers poll one and write another. */
    alignas(64) _Atomic uint32_t generation;
    alignas(64) _Atomic int pending;
    alignas(64) _Atomic int sleepers;
    _Atomic int stop;
};

/* A hint to the CPU that this is a spin-wait loop. */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleeps while *addr == val (returns at once if it already differs). */
static void wait_on(_Atomic uint32_t *addr, uint32_t val) {
#if defined(__linux__)
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    (void)addr, (void)val;
    sched_yield();
#endif
}

/* Wakes every thread sleeping in wait_on(addr). */
static void wake_all(_Atomic uint32_t *addr) {
#if defined(__linux__)
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

/* Waits until the generation differs from seen and returns the new one:
 * spinning first, then yielding the core at each check (so that, when there
 * are more runnable threads than cores, the thread with work gets it), and
 * after a longer idle time sleeping on the futex. */
static uint32_t wait_generation(nu_threadpool *pool, uint32_t seen) {
    int64_t start = 0;
    for (unsigned spins = 0;; spins++) {
        uint32_t g = atomic_load_explicit(&pool->generation, memory_order_acquire);
        if (g != seen) return g;
        if (spins < SPIN_CHECKS) {
            cpu_relax();
            continue;
        }
        int64_t t = now_ns();
        if (!start) start = t;
        if (t - start < WORKER_YIELD_NS) {
            sched_yield();
            continue;
        }
        atomic_fetch_add(&pool->sleepers, 1);
        if (atomic_load(&pool->generation) == seen) wait_on(&pool->generation, seen);
        atomic_fetch_sub(&pool->sleepers, 1);
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    nu_threadpool *pool = w->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_generation(pool, seen);
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        pool->fn(pool->arg, w->ith, pool->n_threads);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
    }
    return NULL;
}

/* Bumps the generation (publishing everything written before) and wakes the
 * workers that went to sleep. */
static void release_workers(nu_threadpool *pool) {
    atomic_fetch_add(&pool->generation, 1);
    if (atomic_load(&pool->sleepers) > 0) wake_all(&pool->generation);
}

/* Stops and joins the first n workers, then frees the pool. */
static void destroy(nu_threadpool *pool, int n_started) {
    atomic_store_explicit(&pool->stop, 1, memory_order_release);
    release_workers(pool);
    for (int i = 0; i < n_started; i++) pthread_join(pool->threads[i], NULL);
    free(pool->threads);
    free(pool->workers);
    free(pool);
}

nu_threadpool *nu_threadpool_new(int n_threads) {
    if (n_threads < 1) return NULL;
    nu_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
    pool->workers = calloc((size_t)n_threads, sizeof *pool->workers);
    if (!pool->threads || !pool->workers) {
        destroy(pool, 0);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        pool->workers[i - 1] = (worker){pool, i};
        if (pthread_create(&pool->threads[i - 1], NULL, worker_main, &pool->workers[i - 1])) {
            destroy(pool, i - 1);
            return NULL;
        }
    }
    return pool;
}

void nu_threadpool_free(nu_threadpool *pool) {
    if (pool) destroy(pool, pool->n_threads - 1);
}

int nu_threadpool_size(const nu_threadpool *pool) {
    return pool ? pool->n_threads : 1;
}

/* Waits for the workers to finish: spinning first, then yielding the core
 * in case a worker waits for it (more threads than cores). */
static void join_workers(nu_threadpool *pool) {
    for (unsigned spins = 0;; spins++) {
        if (atomic_load_explicit(&pool->pending, memory_order_acquire) == 0) return;
        if (spins < SPIN_CHECKS)
            cpu_relax();
        else
            sched_yield();
    }
}

void nu_threadpool_run(nu_threadpool *pool, nu_task_fn fn, void *arg) {
    if (!pool || pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->pending, pool->n_threads - 1, memory_order_relaxed);
    release_workers(pool);
    fn(arg, 0, pool->n_threads);
    join_workers(pool);
}

void nu_split_range(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    int64_t base = n / nth, extra = n % nth;
    *begin = ith * base + (ith < extra ? ith : extra);
    *end = *begin + base + (ith < extra ? 1 : 0);
}
