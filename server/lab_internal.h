/* lab_internal.h - what the lab's files share: a checked lab request, the
 * job that carries it to the lab thread and its events back, the contexts
 * the lab thread owns, and the runs of each endpoint. */
#ifndef NU_SRV_LAB_INTERNAL_H
#define NU_SRV_LAB_INTERNAL_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "lab.h"

#define LAB_MAX_TOP 100    /* candidates shown per stage */
#define LAB_MAX_CURVE 2048 /* points of a cumulative curve */
#define LAB_MAX_INSPECT_STEPS 256
#define LAB_MAX_BEAM_WIDTH 8 /* the lab context has 2 * 8 sequences */
#define LAB_MAX_BEAM_TOKENS 64
#define LAB_MAX_SPEC_TOKENS 256
#define LAB_MAX_PATHS 8
#define LAB_MAX_PATH_TOKENS 128
#define LAB_N_SEQ 16

typedef enum lab_draft_source {
    LAB_DRAFT_DEFAULT = 0, /* the server's --draft model if it has one, else lookup */
    LAB_DRAFT_LOOKUP,      /* prompt lookup */
    LAB_DRAFT_MODEL,       /* the server's --draft model */
    LAB_DRAFT_SELF,        /* the served model drafting for itself (a second context) */
} lab_draft_source;

/* A lab request, checked: the OpenAI-shaped part (prompt, sampling,
 * constraint, watermark) was read by srv_parse_request; the rest here. */
typedef struct lab_request {
    lab_kind kind;
    srv_request req;
    int32_t *prompt; /* the prompt's tokens (BOS included when added) */
    int32_t n_prompt;
    char *prompt_text; /* the prompt as text (self-consistency needs text), or NULL */
    int32_t *forced;   /* inspect: tokens already chosen after the prompt */
    int32_t n_forced;
    int32_t steps; /* max_tokens: tokens to generate */
    int32_t top_n; /* candidates per stage / alternatives per token */
    int32_t curve; /* most points of a cumulative curve */
    nu_grammar *grammar;
    /* beam search */
    nu_beam_params beam;
    int32_t beam_pruned; /* cut extensions shown per step */
    /* speculative decoding */
    lab_draft_source draft;
    int32_t draft_max;
    int32_t ngram_min, ngram_max;
    bool baseline; /* also time plain decoding of as many tokens */
    /* self-consistency */
    int32_t paths;
    char *answer_pattern; /* POSIX ERE; NULL: the last number */
} lab_request;

void lab_request_free(lab_request *r);

/* Reads a lab request body (400-shaped errors in err). */
bool lab_parse(const char *body, size_t len, lab_kind kind, const nu_model *m,
               const srv_limits *lim, const srv_defaults *defaults, int32_t n_ctx, bool have_draft,
               lab_request *out, srv_error *err);

/* A job: one request on its way through the lab thread. */
typedef struct lab_job {
    lab_request r;
    pthread_mutex_t mu;
    char **events; /* JSON texts, in order */
    int32_t n_events, cap_events;
    bool done, failed, cancel;
    int fail_status;
    char fail_message[512];
    int refs;
    int efd;                 /* the lab writes when there are events or it is done */
    struct srv_model *model; /* the model it runs on, held until the job is freed */
    struct lab_job *next;
} lab_job;

/* What the lab thread owns. */
typedef struct lab_env {
    const srv_lab_config *cfg;
    nu_context *ctx;   /* made on first use */
    nu_context *draft; /* of the draft model or of the model itself, made when asked */
    const nu_model *draft_model;
    int32_t *cached; /* ctx sequence 0 holds these tokens (inspect reuses them) */
    int32_t n_cached, cap_cached;
} lab_env;

/* Adds an event (takes obj); false when the client went away (stop). */
bool lab_emit(lab_job *job, cJSON *obj);
bool lab_cancelled(lab_job *job);

/* {"token", "text"} of a token (text made valid UTF-8, NUL kept as \u0000). */
cJSON *lab_token_json(const nu_model *m, int32_t token);
/* Adds a number rounded to 6 significant digits (-inf as null). */
void lab_add_number(cJSON *o, const char *name, double x);

/* Reads tokens into sequence 0 of ctx, reusing the cached prefix (env->cached)
 * when ctx is env->ctx; *entry gets the batch entry of the last token's logits. */
nu_status lab_feed(lab_env *env, nu_context *ctx, const int32_t *toks, int32_t n, int32_t *entry,
                   nu_error *err);

/* The runs: each emits its events and returns false with status and message
 * when it fails (emitting stops quietly when the client is gone). */
bool lab_run_inspect(lab_env *env, lab_job *job, int *status, char *msg, size_t cap);
bool lab_run_beam(lab_env *env, lab_job *job, int *status, char *msg, size_t cap);
bool lab_run_speculative(lab_env *env, lab_job *job, int *status, char *msg, size_t cap);
bool lab_run_self_consistency(lab_env *env, lab_job *job, int *status, char *msg, size_t cap);

#endif
