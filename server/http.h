/* http.h - what the HTTP layer (http.c) and the endpoint handlers
 * (routes.c) share: the server's state and one request's state. */
#ifndef NU_SRV_HTTP_H
#define NU_SRV_HTTP_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "engine.h"
#include "lab.h"
#include "metrics.h"
#include "openai_params.h"
#include "server.h"

typedef struct srv_state {
    const srv_config *cfg;
    nu_model *model;
    nu_context *ctx;
    char model_id[256];
    long long created; /* when the server started (for /v1/models) */
    srv_engine *engine;
    srv_lab *lab; /* the decoding lab (lab.h) */
    srv_lab_config lab_cfg;
    srv_metrics *metrics;
    srv_chat chat;
    srv_limits limits;
    srv_defaults defaults;
    int32_t ctx_per_slot; /* context of one slot, in tokens */
    int32_t max_prompt_tokens;
    /* Generation answers still being sent: shutdown waits for them. */
    pthread_mutex_t answers_mu;
    pthread_cond_t answers_done;
    int32_t answers_in_flight;
    /* Set on SIGTERM / SIGINT: /health/ready answers 503 from then on. */
    atomic_bool draining;
} srv_state;

/* One HTTP request while it is being received and answered. */
typedef struct srv_conn {
    const struct srv_route *route;
    char *body;
    size_t len, cap, discarded;
    bool too_large, answered;
    bool in_flight; /* counted in srv_state.answers_in_flight */
    double t0;      /* nu_time_ms() at the first call */
    int status;     /* the status answered (for the log line and metrics) */
    int64_t prompt_tokens, completion_tokens;
    char method[8];
    char url[128];
} srv_conn;

typedef enum srv_route_id {
    ROUTE_CHAT,
    ROUTE_COMPLETIONS,
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_HEALTH,
    ROUTE_READY,
    ROUTE_METRICS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_WATERMARK_DETECT,
    ROUTE_INSPECT,
    ROUTE_INSPECT_BEAM,
    ROUTE_INSPECT_SPECULATIVE,
    ROUTE_INSPECT_SELF_CONSISTENCY,
    ROUTE_WEB, /* the embedded web page (web.h) */
} srv_route_id;

typedef struct srv_route {
    const char *method;
    const char *path; /* exact, or a prefix ending in '/' when prefix is set */
    bool prefix;
    srv_route_id id;
    const char *name; /* for metrics */
    bool needs_key;
} srv_route;

/* Queues a response with a malloc'd body (taken over); content_type NULL
 * means JSON. Retry-After is added to 503 and 429 answers. */
enum MHD_Result srv_answer(struct MHD_Connection *c, srv_conn *cs, int status, char *body,
                           const char *content_type);
/* Queues an OpenAI-shaped error. */
enum MHD_Result srv_answer_error(struct MHD_Connection *c, srv_conn *cs, const srv_error *err);
/* The connection's socket, or -1. */
int srv_client_fd(struct MHD_Connection *c);

/* A generation answer starts / has been sent (for shutdown). */
void srv_answer_begin(srv_state *s, srv_conn *cs);
void srv_answer_end(srv_state *s, srv_conn *cs);

/* Answers a request whose body (if any) is complete (routes.c). */
enum MHD_Result srv_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs, const char *url);

#endif
