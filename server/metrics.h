/* metrics.h - counters for GET /metrics, in the Prometheus text format:
 * requests by endpoint and status, tokens, latencies, queue depth, batch
 * sizes. Every function may be called from any thread. */
#ifndef NU_SRV_METRICS_H
#define NU_SRV_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);

/* One HTTP request answered (endpoint is a short name such as "chat"). */
void srv_metrics_request(srv_metrics *m, const char *endpoint, int status, double seconds);
/* A generation job finished: its tokens, and its time to the first text. */
void srv_metrics_job(srv_metrics *m, int64_t prompt_tokens, int64_t generated_tokens,
                     double ttft_seconds, double total_seconds);
/* One engine step: samples generating in it and how long it took. */
void srv_metrics_step(srv_metrics *m, int32_t batch_samples, double seconds);
/* The scheduler's speculative-decoding totals so far (they replace the last ones). */
void srv_metrics_speculation(srv_metrics *m, const nu_speculative_stats *totals);
void srv_metrics_rejected(srv_metrics *m);
void srv_metrics_cancelled(srv_metrics *m);

/* The whole exposition text (malloc'd), with the engine's gauges and
 * whether the server is ready (GET /health/ready). Every counter and gauge
 * is this replica's own, so a fleet's figures are sums over replicas. */
char *srv_metrics_render(srv_metrics *m, const srv_engine_stats *st, bool ready);

#endif
