/* server.h - `nucleus serve`: an OpenAI-compatible HTTP server.
 *
 * The server is a client of include/nucleus.h like the command line. HTTP
 * requests are read by libmicrohttpd on one thread per connection; per
 * loaded model, one engine thread owns the nu_context and a nu_scheduler and
 * advances every active request together in shared forward batches
 * (continuous batching).
 * Connections hand requests to the engine through a locked queue and wait
 * for their results (or stream them) on a per-request eventfd. */
#ifndef NU_SERVER_H
#define NU_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"

/* One model to serve. */
typedef struct srv_model_spec {
    const char *id;   /* the model id clients use (NULL: the file's name) */
    const char *path; /* a GGUF file */
} srv_model_spec;

typedef struct srv_config {
    const srv_model_spec *models; /* the models, first the default one */
    int32_t n_models;
    const char *models_dir; /* also every *.gguf file of this folder, or NULL */
    double idle_unload_s;   /* unload a model unused this long (0: never) */
    uint64_t max_memory;    /* bytes the loaded models may take (0: no limit) */
    const char *host;       /* address to listen on (default 127.0.0.1) */
    int port;               /* 0: any free port (printed at start) */
    int32_t parallel;       /* samples generating at once */
    int32_t ctx_per_slot;   /* context length of one slot (0: the model's, at most 4096) */
    int32_t n_threads;      /* forward-pass threads (0: all cores) */
    int32_t n_batch;        /* most tokens per forward pass */
    nu_kv_type kv_type;
    nu_kv_type kv_type_k, kv_type_v; /* NU_KV_SAME: kv_type */
    const char *api_key;             /* required Bearer token, or NULL */
    size_t max_body;                 /* bytes */
    int32_t max_prompt_tokens;       /* 0: the slot's context - 1 */
    int32_t max_tokens_limit;        /* 0: the slot's context */
    int32_t max_queue;               /* requests waiting for a slot */
    int32_t max_responses;           /* Responses API answers kept in memory (0: none) */
    int32_t max_connections;
    int32_t max_connections_per_address;
    int timeout_s; /* idle connection timeout, and the most a request may take to arrive */
    double shutdown_grace_s;    /* how long in-flight work may finish on shutdown */
    double drain_delay_s;       /* on SIGTERM, how long to report not ready and serve on first */
    const char *chat_template;  /* NAME or FILE, or NULL for the model's */
    int step_delay_ms;          /* testing: sleep between steps (simulates a slow model) */
    const nu_model *draft;      /* speculative decoding with this draft model, or NULL */
    nu_speculative_params spec; /* draft lengths; spec.lookup: prompt lookup (no draft) */
    bool quiet;                 /* no per-request log lines */
} srv_config;

/* Defaults: 127.0.0.1:8080, parallel 4, 1 MiB bodies, queue 64, ... */
srv_config srv_default_config(void);

/* Blocks SIGINT and SIGTERM in the calling thread and in every thread it
 * starts afterwards: srv_run takes them with sigwait. Call it before
 * anything starts threads (loading a model may). */
void srv_block_signals(void);

/* Serves the models until SIGINT or SIGTERM; returns the exit code (0
 * after a clean shutdown). Prints the address it listens on and errors to
 * stderr. A single model is loaded before it listens; with several, each
 * is loaded when a request first names it (server/models.h). */
int srv_run(const srv_config *cfg);

#endif
