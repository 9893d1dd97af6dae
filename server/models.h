/* models.h - the models one server serves, each loaded when first asked for.
 *
 * Every model the server knows (-m, --models-dir) has an entry with its id
 * (an alias or the file's name), fixed for the server's life. A loaded
 * entry owns everything that serves it: the nu_model, the engine's context
 * and thread, the lab, the chat template and the request limits made from
 * its own context length. A request acquires the entry named by its
 * `model` field (loading it first if need be) and releases it when its
 * answer is gone; a generation job holds the entry until it is freed, so
 * a model is never unloaded under a request that still reads it.
 *
 * Unloading happens to models nobody holds: after --idle-unload seconds
 * unused (a reaper thread checks once a second; Ollama's keep_alive sets
 * the time per request), or when loading another needs room under
 * --max-memory (the least recently used go first). A model's memory is
 * nu_model_memory's estimate for its serving context once it has been
 * loaded; before its first load, the size of its file stands for it.
 *
 * Loading and unloading run on the thread that asks (a request's, or the
 * reaper) without the registry's lock held; entries in between are in
 * state LOADING / UNLOADING, and whoever wants them waits on a condition
 * variable. The engine thread may release an entry (the last reference to
 * a job) but never loads or unloads one. */
#ifndef NU_SRV_MODELS_H
#define NU_SRV_MODELS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "chat.h"
#include "engine.h"
#include "lab.h"
#include "metrics.h"
#include "openai_params.h"
#include "server.h"

typedef enum srv_model_state {
    SRV_MODEL_UNLOADED = 0,
    SRV_MODEL_LOADING,
    SRV_MODEL_LOADED,
    SRV_MODEL_UNLOADING,
} srv_model_state;

typedef struct srv_models srv_models;

typedef struct srv_model {
    /* Fixed from start to end. */
    char id[256];
    char *path;
    srv_models *owner;
    char arch[64];       /* general.architecture (read at start) */
    char file_type[16];  /* the most common weight type ("q4_0", "f32", ...) */
    uint64_t n_params;   /* from the tensor table */
    uint64_t file_bytes; /* the file's size */
    long long modified;  /* the file's mtime (Unix seconds) */
    int32_t n_ctx_train; /* 0 when the file does not say */
    /* Valid while loaded; a holder may read them without a lock. */
    nu_model *model;
    nu_context *ctx;
    srv_engine *engine;
    srv_lab *lab;
    srv_lab_config lab_cfg;
    srv_chat chat;
    srv_limits limits;
    srv_defaults defaults;
    int32_t ctx_per_slot; /* context of one slot, in tokens */
    int32_t max_prompt_tokens;
    /* Embeddings: a context made on first use, one request at a time. */
    pthread_mutex_t embed_mu;
    nu_context *embed_ctx;
    /* Under the registry's lock. */
    srv_model_state state;
    int32_t users;       /* holders: requests and jobs */
    double last_used_ms; /* nu_time_ms() of the last release */
    double keep_ms;      /* unloaded this long after its last use (< 0: never) */
    uint64_t bytes;      /* memory when loaded (the file's size before the first load) */
    bool measured;       /* bytes is nu_model_memory's estimate */
    int32_t loads;       /* times loaded */
    double load_ms;      /* how long the last load took */
} srv_model;

/* Reads every model's metadata (arch, parameters, file size), checks the
 * ids are distinct and, with a single model, loads it. False with msg. */
bool srv_models_new(const srv_config *cfg, srv_metrics *metrics, srv_models **out, char *msg,
                    size_t cap);
/* Unloads every model and frees the registry (after srv_models_drain and
 * once no connection is left). */
void srv_models_free(srv_models *r);

int32_t srv_models_count(const srv_models *r);
srv_model *srv_models_at(srv_models *r, int32_t i);

/* The entry a request's model field names (NULL: the first model): its id,
 * an alias, the id without ".gguf" or with Ollama's ":latest" tag. NULL
 * with a 404 in err when there is none. */
srv_model *srv_models_find(srv_models *r, const char *name, srv_error *err);

/* Holds a model, loading it if it is not loaded (after unloading idle
 * ones when --max-memory needs room). False with err filled: 503 while
 * shutting down or when no room can be made in time, 500 when loading
 * fails. */
bool srv_model_acquire(srv_model *m, srv_error *err);
/* srv_models_find then srv_model_acquire. */
srv_model *srv_models_acquire(srv_models *r, const char *name, srv_error *err);
/* Lets go of a model (NULL: nothing); it may be unloaded from now on. */
void srv_model_release(srv_model *m);

/* The model's embedding context (params.embeddings, one slot's length),
 * made on first use; its memory is added to the model's. Call with
 * m->embed_mu held, on a held model. NULL with err filled on failure. */
nu_context *srv_model_embed_context(srv_model *m, srv_error *err);

/* How long a model stays loaded after its last use: ms < 0 never
 * unloads it, 0 unloads it as soon as nobody holds it (Ollama's
 * keep_alive). Each acquire sets it back to --idle-unload's, so it holds
 * until the next request. */
void srv_model_keep(srv_model *m, double ms);
/* Unloads a model now unless someone holds it; false when it is in use. */
bool srv_model_unload(srv_model *m);

/* What listings show of a model, read under the lock (without holding it,
 * so a listing does not count as a use). */
typedef struct srv_model_info {
    srv_model_state state;
    uint64_t bytes;       /* its memory (the file's size until measured) */
    bool measured;        /* bytes is nu_model_memory's estimate */
    double expires_in_ms; /* loaded: unloaded in this long if unused (< 0: never) */
    int32_t loads;        /* times loaded */
    double load_ms;       /* the last load's time */
    /* while loaded (else 0 and ""): */
    int32_t n_vocab, ctx_per_slot;
    char chat_template[64];
} srv_model_info;

void srv_model_get_info(srv_model *m, srv_model_info *out);
const char *srv_model_state_name(srv_model_state s);

/* The engines' gauges summed over the loaded models; *accepting: some
 * loaded model would queue a request now (or none is loaded). */
void srv_models_stats(srv_models *r, srv_engine_stats *sum, bool *accepting);

/* Shutdown: refuses new holders, lets every engine finish for up to
 * grace_ms, then cancels the rest. */
void srv_models_drain(srv_models *r, double grace_ms);
/* Shutdown: ends the labs' runs (their clients get a 503 event). */
void srv_models_stop_labs(srv_models *r);

#endif
