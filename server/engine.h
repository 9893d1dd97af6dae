/* engine.h - the engine thread: it owns the nu_context and the scheduler and
 * advances every active job together, one forward batch per step.
 *
 * A job is one HTTP request's generation work: one or more prompts, each
 * with its samples. The connection thread builds it (prompts tokenized,
 * parameters checked), submits it and then waits on the job's eventfd. The
 * engine appends text as the scheduler produces it (on_text, engine thread)
 * and marks the job done; both sides hold a reference and the last one to
 * let go frees it. */
#ifndef NU_SRV_ENGINE_H
#define NU_SRV_ENGINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"
#include "openai_params.h"

struct srv_metrics;
struct srv_model;

/* What one choice (one sample) has produced so far, for streaming. */
typedef struct srv_choice {
    char *text; /* text received (NUL-terminated) */
    size_t len, cap;
    nu_token_logprob *lps; /* log-prob entries copied from the result */
    int32_t n_lps, cap_lps;
    size_t sent;      /* streaming: text bytes already sent */
    int32_t lps_sent; /* streaming: log-prob entries already sent */
} srv_choice;

typedef struct srv_job {
    /* Set by the connection thread before submitting, then read-only. */
    srv_request req;
    int32_t n_prompts;
    int32_t **prompt_tokens; /* per prompt */
    int32_t *n_prompt_tokens;
    char **beam_texts;           /* beam search: the prompt texts */
    int32_t n_per_prompt;        /* samples drawn per prompt (best_of, n or beam hypotheses) */
    int32_t n_results;           /* n_prompts * n_per_prompt */
    int32_t slots;               /* sequences it occupies while running */
    int32_t *n_predict;          /* per prompt: most tokens (the slot's context caps it) */
    nu_generate_params gen;      /* what is submitted (n_predict decided) */
    const char *stop_all[24];    /* gen.stop: the request's stop strings and the chat format's */
    int32_t stop_tokens_all[16]; /* gen.stop_tokens */
    nu_grammar *grammar;         /* gen.grammar: the request's constraint, or NULL */
    int32_t think_open[NU_THINK_MAX_MARKER]; /* gen.think's token arrays */
    int32_t think_close[NU_THINK_MAX_MARKER];
    int32_t think_force[NU_THINK_MAX_FORCE];
    struct srv_model *model; /* the model it runs on, held until the job is freed */

    /* Shared, under mu. Results are the engine's until done. */
    pthread_mutex_t mu;
    nu_generate_result *results;
    srv_choice *choices;
    bool done;
    bool failed; /* done with an error instead of results */
    int fail_status;
    char fail_message[512];
    bool admitted; /* the scheduler took every prompt (a stream may start) */
    bool cancel;   /* the client went away or the server stops */
    int refs;
    int efd;                       /* eventfd: the engine writes when there is news */
    double t_submit, t_first_text; /* nu_time_ms() */

    /* Engine-private. */
    struct text_target *targets; /* per prompt: where on_text puts its samples' text */
    int32_t *ids;                /* scheduler request per prompt (-1: none) */
    bool dirty;                  /* news since the last wake-up */
    struct srv_job *next;
} srv_job;

typedef struct srv_engine srv_engine;

typedef struct srv_engine_stats {
    int32_t queued; /* jobs waiting for a slot */
    int32_t running_jobs;
    int32_t slots_busy; /* samples running */
    int32_t slots;      /* samples that may run at once (--parallel) */
    int32_t max_queue;  /* jobs that may wait before new ones are refused */
    int32_t kv_used;    /* KV cache cells in use */
    int32_t kv_cells;
} srv_engine_stats;

/* Starts the engine thread on ctx (which it then owns until free). With a
 * draft model, or spec->lookup, its scheduler speculates (spec gives the
 * draft lengths; NULL spec: no speculation). */
bool srv_engine_start(nu_context *ctx, int32_t parallel, int32_t max_queue, int step_delay_ms,
                      const nu_model *draft, const nu_speculative_params *spec,
                      struct srv_metrics *metrics, srv_engine **out, char *msg, size_t cap);
/* Stops and joins the thread (cancelling what is left) and frees it. */
void srv_engine_free(srv_engine *e);

/* A new job with its request moved in (req is left empty), one reference
 * held by the caller; NULL when out of memory. */
srv_job *srv_job_new(srv_request *req);
/* Sizes the job's per-prompt and per-choice arrays (false: out of memory);
 * the caller then fills prompt_tokens, n_prompt_tokens and n_predict. */
bool srv_job_prepare(srv_job *job, int32_t n_prompts, int32_t n_per_prompt);
/* Drops a reference; the last one frees the job. */
void srv_job_release(srv_job *job);

/* Queues a job. Refused (false, err filled: 503 with Retry-After) when the
 * queue is full or the server is shutting down. */
bool srv_engine_submit(srv_engine *e, srv_job *job, srv_error *err);
/* Stops a job whose client went away; its slot is freed at the next step. */
void srv_engine_cancel(srv_engine *e, srv_job *job);

/* Shutdown: refuses new jobs, lets running ones finish for up to grace_ms,
 * then cancels the rest and waits until nothing is left. */
void srv_engine_drain(srv_engine *e, double grace_ms);

void srv_engine_get_stats(srv_engine *e, srv_engine_stats *out);

/* Whether a job submitted now would be queued rather than refused as
 * "queue full" (the rule srv_engine_submit applies). */
bool srv_engine_stats_accepting(const srv_engine_stats *st);

/* After srv_engine_cancel: waits (at most timeout_ms) until the engine has
 * let go of the job, so that its results (how many tokens it made) can be
 * read; false when it has not by then. */
bool srv_job_wait_done(srv_job *job, double timeout_ms);

/* Waits until the job has news (the eventfd) or the client socket closes;
 * false when the client is gone. client_fd < 0: do not watch a socket. */
bool srv_job_wait(srv_job *job, int client_fd);

#endif
