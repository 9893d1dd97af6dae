/* threadpool.h - a persistent pool of worker threads for the forward pass.
 *
 * The caller is thread 0; n_threads - 1 workers wait between tasks. Running
 * a task is one release and one join, without allocation or locks held in
 * the per-token path (workers spin briefly, then poll while yielding their
 * core, then sleep on a futex). */
#ifndef NU_THREADPOOL_H
#define NU_THREADPOOL_H

#include <stdint.h>

typedef struct nu_threadpool nu_threadpool;

/* fn is called once per thread with ith in [0, nth). */
typedef void (*nu_task_fn)(void *arg, int ith, int nth);

/* NULL on failure. n_threads >= 1. */
nu_threadpool *nu_threadpool_new(int n_threads);
void nu_threadpool_free(nu_threadpool *pool);
int nu_threadpool_size(const nu_threadpool *pool);

/* Runs fn on every thread of the pool (the caller included) and returns when
 * all are done. A NULL pool runs fn(arg, 0, 1) in the caller. Only one thread
 * (the pool's owner) calls it at a time, and never from inside a task.
 * Everything written before the call is visible to the tasks, and everything
 * the tasks write is visible to the caller when it returns. */
void nu_threadpool_run(nu_threadpool *pool, nu_task_fn fn, void *arg);

/* Splits [0, n) into nth near-equal parts; part ith is [*begin, *end). */
void nu_split_range(int64_t n, int ith, int nth, int64_t *begin, int64_t *end);

#endif
