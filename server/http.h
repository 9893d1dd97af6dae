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
#include "models.h"
#include "openai_params.h"
#include "server.h"

typedef struct srv_state {
    const srv_config *cfg;
    srv_models *models; /* the models served (models.h) */
    long long created;  /* when the server started (for /v1/models) */
    srv_metrics *metrics;
    struct srv_responses *responses; /* stored responses (responses.h) */
    /* Generation answers still being sent: shutdown waits for them. */
    pthread_mutex_t answers_mu;
    pthread_cond_t answers_done;
    int32_t answers_in_flight;
    /* Set on SIGTERM / SIGINT: /health/ready answers 503 from then on. */
    atomic_bool draining;
    struct srv_deadlines *deadlines; /* connections still receiving a request (http.c) */
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
    bool close; /* answer with Connection: close (the request's framing is broken) */
    char method[64];
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
    ROUTE_EMBEDDINGS,
    ROUTE_MESSAGES, /* Anthropic's Messages API (anthropic.h) */
    ROUTE_MESSAGES_COUNT,
    ROUTE_OLLAMA_CHAT, /* Ollama's API (ollama.h) */
    ROUTE_OLLAMA_GENERATE,
    ROUTE_OLLAMA_EMBED,
    ROUTE_OLLAMA_EMBEDDINGS,
    ROUTE_OLLAMA_TAGS,
    ROUTE_OLLAMA_PS,
    ROUTE_OLLAMA_SHOW,
    ROUTE_OLLAMA_VERSION,
    ROUTE_RESPONSES, /* OpenAI's Responses API (responses.h) */
    ROUTE_RESPONSE_GET,
    ROUTE_RESPONSE_DELETE,
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
/* Queues an error in the shape of the API the URL belongs to: Ollama's
 * {"error": "..."} under /api/, Anthropic's under /v1/messages, else
 * OpenAI's. */
enum MHD_Result srv_answer_error(struct MHD_Connection *c, srv_conn *cs, const srv_error *err);
/* Queues a 200 answer whose body comes from read over cls as it is made
 * (a stream), with headers that keep proxies from buffering it; free_cls
 * runs when it ends, or at once when the response cannot be made. */
enum MHD_Result srv_answer_stream(struct MHD_Connection *c, srv_conn *cs, const char *content_type,
                                  MHD_ContentReaderCallback read, void *cls,
                                  MHD_ContentReaderFreeCallback free_cls);
/* The client of the connection this thread serves has gone away (quiets
 * libmicrohttpd's messages about the aborted answer). */
void srv_client_gone(void);
/* The connection's socket, or -1. */
int srv_client_fd(struct MHD_Connection *c);

/* A generation answer starts / has been sent (for shutdown). */
void srv_answer_begin(srv_state *s, srv_conn *cs);
void srv_answer_end(srv_state *s, srv_conn *cs);

/* Answers a request whose body (if any) is complete (routes.c). */
enum MHD_Result srv_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs, const char *url);

#endif
