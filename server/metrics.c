/* metrics.c - Prometheus counters, histograms and gauges for GET /metrics. */
#include "metrics.h"

#include "buf.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERIES 64 /* distinct (endpoint, status) pairs kept */
#define N_LATENCY_BUCKETS 12
#define N_BATCH_BUCKETS 8

static const double latency_bounds[N_LATENCY_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                         0.5,   1,    2.5,   5,    10,  30};
static const double batch_bounds[N_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128};

typedef struct histogram {
    uint64_t counts[N_LATENCY_BUCKETS + 1]; /* the last is +Inf */
    double sum;
    uint64_t count;
} histogram;

typedef struct request_series {
    char endpoint[24];
    int status;
    uint64_t count;
} request_series;

struct srv_metrics {
    pthread_mutex_t mu;
    request_series series[MAX_SERIES];
    int n_series;
    uint64_t prompt_tokens, generated_tokens, jobs, rejected, cancelled, steps;
    nu_speculative_stats spec; /* totals of the engine's scheduler */
    histogram request_seconds, ttft_seconds, job_seconds, step_seconds, batch_samples;
};

srv_metrics *srv_metrics_new(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void observe(histogram *h, const double *bounds, int n_bounds, double x) {
    int i = 0;
    while (i < n_bounds && x > bounds[i]) i++;
    h->counts[i]++;
    h->sum += x;
    h->count++;
}

void srv_metrics_request(srv_metrics *m, const char *endpoint, int status, double seconds) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_series &&
           (m->series[i].status != status || strcmp(m->series[i].endpoint, endpoint)))
        i++;
    if (i == m->n_series && i < MAX_SERIES) {
        snprintf(m->series[i].endpoint, sizeof m->series[i].endpoint, "%s", endpoint);
        m->series[i].status = status;
        m->n_series++;
    }
    if (i < m->n_series) m->series[i].count++;
    observe(&m->request_seconds, latency_bounds, N_LATENCY_BUCKETS, seconds);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_job(srv_metrics *m, int64_t prompt_tokens, int64_t generated_tokens,
                     double ttft_seconds, double total_seconds) {
    pthread_mutex_lock(&m->mu);
    m->jobs++;
    m->prompt_tokens += (uint64_t)prompt_tokens;
    m->generated_tokens += (uint64_t)generated_tokens;
    if (ttft_seconds > 0)
        observe(&m->ttft_seconds, latency_bounds, N_LATENCY_BUCKETS, ttft_seconds);
    observe(&m->job_seconds, latency_bounds, N_LATENCY_BUCKETS, total_seconds);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_step(srv_metrics *m, int32_t batch_samples, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->steps++;
    observe(&m->step_seconds, latency_bounds, N_LATENCY_BUCKETS, seconds);
    observe(&m->batch_samples, batch_bounds, N_BATCH_BUCKETS, batch_samples);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_speculation(srv_metrics *m, const nu_speculative_stats *totals) {
    pthread_mutex_lock(&m->mu);
    m->spec = *totals;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_rejected(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->rejected++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_cancelled(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

static void put_histogram(nu_buf *b, const char *name, const char *help, const histogram *h,
                          const double *bounds, int n_bounds) {
    nu_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < n_bounds; i++) {
        cum += h->counts[i];
        nu_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    nu_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                  (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

static void put_counter(nu_buf *b, const char *name, const char *help, uint64_t v) {
    nu_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                  (unsigned long long)v);
}

static void put_gauge(nu_buf *b, const char *name, const char *help, int64_t v) {
    nu_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name,
                  (long long)v);
}

char *srv_metrics_render(srv_metrics *m, const srv_engine_stats *st, bool ready) {
    nu_buf b = {0};
    pthread_mutex_lock(&m->mu);
    nu_buf_printf(&b,
                  "# HELP nucleus_requests_total HTTP requests answered, by endpoint and status.\n"
                  "# TYPE nucleus_requests_total counter\n");
    for (int i = 0; i < m->n_series; i++)
        nu_buf_printf(&b, "nucleus_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                      m->series[i].endpoint, m->series[i].status,
                      (unsigned long long)m->series[i].count);
    put_counter(&b, "nucleus_generation_requests_total", "Generation jobs finished.", m->jobs);
    put_counter(&b, "nucleus_prompt_tokens_total", "Prompt tokens processed.", m->prompt_tokens);
    put_counter(&b, "nucleus_generated_tokens_total", "Tokens generated.", m->generated_tokens);
    put_counter(&b, "nucleus_requests_rejected_total",
                "Requests refused: queue full or shutting down.", m->rejected);
    put_counter(&b, "nucleus_requests_cancelled_total", "Requests whose client went away.",
                m->cancelled);
    put_counter(&b, "nucleus_steps_total", "Engine steps (forward batches).", m->steps);
    put_counter(&b, "nucleus_draft_tokens_total",
                "Speculative decoding: tokens proposed for verification.",
                (uint64_t)m->spec.drafted);
    put_counter(&b, "nucleus_draft_tokens_accepted_total",
                "Speculative decoding: proposed tokens the target accepted.",
                (uint64_t)m->spec.accepted);
    put_counter(&b, "nucleus_draft_model_batches_total",
                "Speculative decoding: forward batches of the draft model.",
                (uint64_t)m->spec.draft_passes);
    put_histogram(&b, "nucleus_request_duration_seconds", "HTTP request latency.",
                  &m->request_seconds, latency_bounds, N_LATENCY_BUCKETS);
    put_histogram(&b, "nucleus_generation_duration_seconds", "Generation job latency.",
                  &m->job_seconds, latency_bounds, N_LATENCY_BUCKETS);
    put_histogram(&b, "nucleus_time_to_first_token_seconds", "Time to the first text of a job.",
                  &m->ttft_seconds, latency_bounds, N_LATENCY_BUCKETS);
    put_histogram(&b, "nucleus_step_duration_seconds", "Engine step duration.", &m->step_seconds,
                  latency_bounds, N_LATENCY_BUCKETS);
    put_histogram(&b, "nucleus_batch_samples", "Samples generating together in a step.",
                  &m->batch_samples, batch_bounds, N_BATCH_BUCKETS);
    pthread_mutex_unlock(&m->mu);
    put_gauge(&b, "nucleus_queue_depth", "Requests waiting for a slot.", st->queued);
    put_gauge(&b, "nucleus_running_requests", "Requests generating.", st->running_jobs);
    put_gauge(&b, "nucleus_slots_busy", "Samples generating (slots in use).", st->slots_busy);
    put_gauge(&b, "nucleus_slots", "Samples that may generate at once (--parallel).", st->slots);
    put_gauge(&b, "nucleus_ready", "1 when GET /health/ready answers 200, else 0.", ready);
    put_gauge(&b, "nucleus_kv_cells_used", "KV cache cells in use.", st->kv_used);
    put_gauge(&b, "nucleus_kv_cells", "KV cache cells in all.", st->kv_cells);
    return nu_buf_take(&b); /* NULL when memory ran out */
}
