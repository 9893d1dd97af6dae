/* engine.c - the engine thread: continuous batching of HTTP requests.
 *
 * Jobs wait in a FIFO queue until enough slots are free (the samples running
 * stay within --parallel; a job larger than that runs alone), then each of
 * their prompts goes to the scheduler. Every step makes one forward batch of
 * all running samples plus prompt chunks, so a job joins between steps and
 * a long prompt does not stall the others for long. Text comes back through
 * the scheduler's on_text callback on this thread; after each step the
 * connections whose jobs have news are woken through their eventfd.
 * Beam search is not a scheduler request: a beam job waits until the
 * scheduler is idle and then runs alone. With --draft or --lookup the
 * scheduler speculates (a request may opt out or cap its draft length);
 * its drafted and accepted totals go to the metrics after each step. */
#include "engine.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"
#include "models.h"

/* Where a prompt's samples put their text: choices[base + index]. */
typedef struct text_target {
    srv_job *job;
    int32_t base;
} text_target;

struct srv_engine {
    nu_context *ctx;
    nu_scheduler *sched;
    srv_metrics *metrics;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* work arrived, a cancel, or stop */
    pthread_cond_t idle; /* nothing queued or running (for drain) */
    int32_t parallel, max_queue, step_delay_ms;
    bool speculating; /* the scheduler drafts (its counters go to the metrics) */
    /* under mu */
    srv_job *queue_head, *queue_tail;
    int32_t n_queued, n_running_jobs, slots_busy, kv_used;
    bool draining, cancel_all, stopping;
    /* engine thread only */
    srv_job *running;
    char step_error[512];
};

/* ---- jobs ---------------------------------------------------------------- */

srv_job *srv_job_new(srv_request *req) {
    srv_job *job = calloc(1, sizeof *job);
    if (!job) return NULL;
    job->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (job->efd < 0) {
        free(job);
        return NULL;
    }
    pthread_mutex_init(&job->mu, NULL);
    job->req = *req;
    memset(req, 0, sizeof *req);
    job->refs = 1;
    return job;
}

static void free_job(srv_job *job) {
    for (int32_t i = 0; i < job->n_prompts; i++) {
        if (job->prompt_tokens) free(job->prompt_tokens[i]);
        if (job->beam_texts) free(job->beam_texts[i]);
    }
    free(job->prompt_tokens);
    free(job->n_prompt_tokens);
    free(job->beam_texts);
    free(job->n_predict);
    for (int32_t i = 0; job->results && i < job->n_results; i++)
        nu_generate_result_free(&job->results[i]);
    free(job->results);
    for (int32_t i = 0; job->choices && i < job->n_results; i++) {
        free(job->choices[i].text);
        free(job->choices[i].lps);
    }
    free(job->choices);
    free(job->ids);
    free(job->targets);
    srv_request_free(&job->req);
    nu_grammar_free(job->grammar);
    srv_model_release(job->model);
    close(job->efd);
    pthread_mutex_destroy(&job->mu);
    free(job);
}

void srv_job_release(srv_job *job) {
    if (!job) return;
    pthread_mutex_lock(&job->mu);
    bool last = --job->refs == 0;
    pthread_mutex_unlock(&job->mu);
    if (last) free_job(job);
}

/* Wakes the connection waiting on the job. */
static void notify(srv_job *job) {
    uint64_t one = 1;
    ssize_t w = write(job->efd, &one, sizeof one);
    (void)w; /* a full counter still wakes the reader */
}

bool srv_job_wait(srv_job *job, int client_fd) {
    struct pollfd fds[2] = {{.fd = job->efd, .events = POLLIN},
                            {.fd = client_fd, .events = POLLRDHUP}};
    int n = client_fd >= 0 ? 2 : 1;
    /* the timeout only bounds a wait; news always comes through the eventfd */
    int r = poll(fds, (nfds_t)n, 1000);
    if (r < 0 && errno != EINTR) return false;
    if (n == 2 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) return false;
    if (fds[0].revents & POLLIN) {
        uint64_t v;
        ssize_t rd = read(job->efd, &v, sizeof v);
        (void)rd;
    }
    return true;
}

bool srv_job_wait_done(srv_job *job, double timeout_ms) {
    double until = nu_time_ms() + timeout_ms;
    for (;;) {
        pthread_mutex_lock(&job->mu);
        bool done = job->done;
        pthread_mutex_unlock(&job->mu);
        if (done) return true;
        if (nu_time_ms() >= until) return false;
        srv_job_wait(job, -1);
    }
}

/* Marks a job done with an error (job->mu held). */
static void fail_locked(srv_job *job, int status, const char *msg) {
    if (!job->failed) {
        job->failed = true;
        job->fail_status = status;
        snprintf(job->fail_message, sizeof job->fail_message, "%s", msg);
    }
}

/* The job is finished for the engine: wake its connection, drop our reference. */
static void finish_job(srv_job *job) {
    pthread_mutex_lock(&job->mu);
    job->done = true;
    pthread_mutex_unlock(&job->mu);
    notify(job);
    srv_job_release(job);
}

/* ---- text from the scheduler --------------------------------------------- */

/* Grows a choice's text to hold len more bytes; false when out of memory. */
static bool choice_reserve(srv_choice *c, size_t more) {
    if (c->len + more + 1 <= c->cap) return true;
    size_t cap = c->cap ? c->cap : 256;
    while (cap < c->len + more + 1) cap *= 2;
    char *t = realloc(c->text, cap);
    if (!t) return false;
    c->text = t;
    c->cap = cap;
    return true;
}

/* The scheduler's on_text: a final piece of one sample's text. */
static bool on_text(void *user, int32_t index, const char *text, size_t len) {
    text_target *t = user;
    srv_job *job = t->job;
    pthread_mutex_lock(&job->mu);
    srv_choice *c = &job->choices[t->base + index];
    if (choice_reserve(c, len)) {
        memcpy(c->text + c->len, text, len);
        c->len += len;
        c->text[c->len] = 0;
    } else {
        fail_locked(job, 500, "out of memory for the generated text");
    }
    if (job->t_first_text == 0) job->t_first_text = nu_time_ms();
    bool go_on = !job->cancel && !job->failed;
    pthread_mutex_unlock(&job->mu);
    job->dirty = true;
    return go_on;
}

/* Copies a result's new log-prob entries into its choice (job->mu held). */
static void copy_logprobs(srv_choice *c, const nu_generate_result *r) {
    if (r->n_logprobs <= c->n_lps) return;
    if (r->n_logprobs > c->cap_lps) {
        int32_t cap = c->cap_lps ? c->cap_lps : 64;
        while (cap < r->n_logprobs) cap *= 2;
        nu_token_logprob *p = realloc(c->lps, (size_t)cap * sizeof *p);
        if (!p) return;
        c->lps = p;
        c->cap_lps = cap;
    }
    memcpy(c->lps + c->n_lps, r->logprobs + c->n_lps,
           (size_t)(r->n_logprobs - c->n_lps) * sizeof *c->lps);
    c->n_lps = r->n_logprobs;
}

/* ---- admitting jobs ------------------------------------------------------ */

/* Hands every prompt of a job to the scheduler; on failure the job is
 * marked failed and what was submitted is cancelled. */
static void submit_to_scheduler(srv_engine *e, srv_job *job) {
    for (int32_t p = 0; p < job->n_prompts; p++) {
        nu_generate_params gen = job->gen;
        gen.n = job->n_per_prompt;
        gen.n_predict = job->n_predict[p];
        gen.on_text = on_text;
        gen.user = &job->targets[p];
        if (!job->req.seed_given) gen.sampling.seed += (uint64_t)p * 0x9E3779B97F4A7C15ull;
        nu_error err;
        nu_status st = nu_scheduler_submit(
            e->sched, NULL, job->prompt_tokens[p], (size_t)job->n_prompt_tokens[p], &gen,
            job->results + (size_t)p * (size_t)job->n_per_prompt, &job->ids[p], &err);
        if (st != NU_OK) {
            pthread_mutex_lock(&job->mu);
            fail_locked(job, st == NU_ERR_NOMEM ? 500 : 400, err.message);
            job->cancel = true;
            pthread_mutex_unlock(&job->mu);
            for (int32_t q = 0; q < p; q++) nu_scheduler_cancel(e->sched, job->ids[q]);
            return;
        }
    }
    pthread_mutex_lock(&job->mu);
    job->admitted = true;
    pthread_mutex_unlock(&job->mu);
    notify(job);
}

/* Moves queued jobs to the scheduler while slots allow (e->mu held). A beam
 * job at the head stops admission: it runs alone once the rest is done. */
static void admit(srv_engine *e) {
    while (e->queue_head && !e->queue_head->req.beam) {
        srv_job *job = e->queue_head;
        if (e->slots_busy > 0 && e->slots_busy + job->slots > e->parallel) break;
        e->queue_head = job->next;
        if (!e->queue_head) e->queue_tail = NULL;
        e->n_queued--;
        job->next = e->running;
        e->running = job;
        e->n_running_jobs++;
        e->slots_busy += job->slots;
        submit_to_scheduler(e, job);
    }
}

/* The queue is full when work is running or waiting and max_queue jobs
 * already wait (an idle engine takes a job even with max_queue 0). */
static bool queue_full(int32_t slots_busy, int32_t queued, int32_t max_queue) {
    return (slots_busy > 0 || queued > 0) && queued >= max_queue;
}

bool srv_engine_stats_accepting(const srv_engine_stats *st) {
    return !queue_full(st->slots_busy, st->queued, st->max_queue);
}

bool srv_engine_submit(srv_engine *e, srv_job *job, srv_error *err) {
    pthread_mutex_lock(&e->mu);
    if (e->draining || queue_full(e->slots_busy, e->n_queued, e->max_queue)) {
        bool draining = e->draining;
        pthread_mutex_unlock(&e->mu);
        srv_metrics_rejected(e->metrics);
        return srv_fail(err, 503, draining ? "server_shutting_down" : "server_overloaded",
                        draining ? "shutting_down" : "queue_full", NULL,
                        draining ? "the server is shutting down"
                                 : "the server is busy (the request queue is full); retry later");
    }
    job->refs++; /* the engine's reference (no one else sees the job yet) */
    job->t_submit = nu_time_ms();
    if (e->queue_tail)
        e->queue_tail->next = job;
    else
        e->queue_head = job;
    e->queue_tail = job;
    e->n_queued++;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    return true;
}

/* Takes a job out of the queue if it is there (e->mu held). */
static bool unlink_queued(srv_engine *e, srv_job *job) {
    srv_job *prev = NULL;
    for (srv_job *j = e->queue_head; j; prev = j, j = j->next) {
        if (j != job) continue;
        if (prev)
            prev->next = j->next;
        else
            e->queue_head = j->next;
        if (e->queue_tail == j) e->queue_tail = prev;
        e->n_queued--;
        j->next = NULL;
        return true;
    }
    return false;
}

void srv_engine_cancel(srv_engine *e, srv_job *job) {
    pthread_mutex_lock(&e->mu);
    bool queued = unlink_queued(e, job);
    pthread_mutex_lock(&job->mu);
    bool was_done = job->done;
    job->cancel = true;
    pthread_mutex_unlock(&job->mu);
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    if (queued) finish_job(job); /* the engine's reference */
    if (!was_done) srv_metrics_cancelled(e->metrics);
}

bool srv_job_prepare(srv_job *job, int32_t n_prompts, int32_t n_per_prompt) {
    size_t np = (size_t)n_prompts, nr = np * (size_t)n_per_prompt;
    job->n_prompts = n_prompts;
    job->n_per_prompt = n_per_prompt;
    job->n_results = (int32_t)nr;
    job->prompt_tokens = calloc(np, sizeof *job->prompt_tokens);
    job->n_prompt_tokens = calloc(np, sizeof *job->n_prompt_tokens);
    job->n_predict = calloc(np, sizeof *job->n_predict);
    job->targets = calloc(np, sizeof *job->targets);
    job->ids = malloc(np * sizeof *job->ids);
    job->results = calloc(nr, sizeof *job->results);
    job->choices = calloc(nr, sizeof *job->choices);
    if (!job->prompt_tokens || !job->n_prompt_tokens || !job->n_predict || !job->targets ||
        !job->ids || !job->results || !job->choices)
        return false;
    for (int32_t p = 0; p < n_prompts; p++) {
        job->ids[p] = -1;
        job->targets[p] = (text_target){job, p * n_per_prompt};
    }
    return true;
}

/* ---- the engine loop ------------------------------------------------------ */

/* Tells the scheduler about jobs whose clients went away. */
static void apply_cancels(srv_engine *e) {
    for (srv_job *job = e->running; job; job = job->next) {
        pthread_mutex_lock(&job->mu);
        bool cancel = job->cancel;
        pthread_mutex_unlock(&job->mu);
        if (!cancel) continue;
        for (int32_t p = 0; p < job->n_prompts; p++) {
            if (job->ids[p] >= 0) nu_scheduler_cancel(e->sched, job->ids[p]);
        }
    }
}

static bool scheduler_done(const srv_engine *e, const srv_job *job) {
    for (int32_t p = 0; p < job->n_prompts; p++)
        if (job->ids[p] >= 0 && !nu_scheduler_is_done(e->sched, job->ids[p])) return false;
    return true;
}

/* A finished job's totals go to the metrics; a sample the scheduler stopped
 * without being asked to means the step failed. */
static void account_job(srv_engine *e, srv_job *job) {
    int64_t prompt = 0, generated = 0;
    bool lost = false;
    for (int32_t p = 0; p < job->n_prompts; p++) prompt += job->n_prompt_tokens[p];
    for (int32_t i = 0; i < job->n_results; i++) {
        generated += job->results[i].n_generated;
        lost |= job->results[i].finish == NU_FINISH_CANCELLED;
    }
    pthread_mutex_lock(&job->mu);
    if (lost && !job->cancel)
        fail_locked(job, 500, e->step_error[0] ? e->step_error : "generation failed");
    double ttft = job->t_first_text > 0 ? (job->t_first_text - job->t_submit) / 1e3 : 0;
    pthread_mutex_unlock(&job->mu);
    srv_metrics_job(e->metrics, prompt, generated, ttft, (nu_time_ms() - job->t_submit) / 1e3);
}

/* After a step: log-probs for streams, wake-ups, finished jobs leave. */
static void collect(srv_engine *e) {
    srv_job **pp = &e->running;
    while (*pp) {
        srv_job *job = *pp;
        bool done = scheduler_done(e, job);
        if (job->req.stream && job->gen.logprobs >= 0) {
            pthread_mutex_lock(&job->mu);
            for (int32_t i = 0; i < job->n_results; i++)
                copy_logprobs(&job->choices[i], &job->results[i]);
            pthread_mutex_unlock(&job->mu);
        }
        if (!done) {
            if (job->dirty) notify(job);
            job->dirty = false;
            pp = &job->next;
            continue;
        }
        *pp = job->next;
        account_job(e, job);
        pthread_mutex_lock(&e->mu);
        e->n_running_jobs--;
        e->slots_busy -= job->slots;
        pthread_mutex_unlock(&e->mu);
        finish_job(job);
    }
}

/* One scheduler step with its metrics (e->mu not held). */
static void step(srv_engine *e) {
    int32_t samples = nu_scheduler_running(e->sched);
    double t0 = nu_time_ms();
    bool active;
    nu_error err;
    if (nu_scheduler_step(e->sched, &active, &err) != NU_OK)
        snprintf(e->step_error, sizeof e->step_error, "generation failed: %.480s", err.message);
    srv_metrics_step(e->metrics, samples, (nu_time_ms() - t0) / 1e3);
    if (e->speculating) {
        nu_speculative_stats st;
        nu_scheduler_speculative_stats(e->sched, &st);
        srv_metrics_speculation(e->metrics, &st);
    }
    if (e->step_delay_ms > 0) {
        struct timespec ts = {e->step_delay_ms / 1000, (long)(e->step_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Beam search for every prompt of a job, alone on the context (e->mu not held). */
static void run_beam(srv_engine *e, srv_job *job) {
    for (int32_t p = 0; p < job->n_prompts && !job->failed; p++) {
        nu_beam_params bp = job->req.beam_params;
        bp.n_predict = job->n_predict[p];
        nu_error err;
        nu_generate_result *res = job->results + (size_t)p * (size_t)job->n_per_prompt;
        nu_status st = nu_beam_search(e->ctx, job->beam_texts[p], &bp, res, &err);
        pthread_mutex_lock(&job->mu);
        if (st != NU_OK) fail_locked(job, st == NU_ERR_NOMEM ? 500 : 400, err.message);
        for (int32_t i = 0; st == NU_OK && i < job->n_per_prompt; i++) {
            srv_choice *c = &job->choices[p * job->n_per_prompt + i];
            if (res[i].text && choice_reserve(c, res[i].text_len)) {
                memcpy(c->text, res[i].text, res[i].text_len + 1);
                c->len = res[i].text_len;
            }
        }
        pthread_mutex_unlock(&job->mu);
    }
    pthread_mutex_lock(&job->mu);
    if (job->t_first_text == 0) job->t_first_text = nu_time_ms();
    pthread_mutex_unlock(&job->mu);
    account_job(e, job);
}

/* Pops the beam job at the head of the queue and runs it (e->mu held on
 * entry and exit, released while it runs). */
static void run_head_beam(srv_engine *e) {
    srv_job *job = e->queue_head;
    e->queue_head = job->next;
    if (!e->queue_head) e->queue_tail = NULL;
    e->n_queued--;
    job->next = NULL;
    e->n_running_jobs++;
    e->slots_busy += job->slots;
    pthread_mutex_unlock(&e->mu);
    run_beam(e, job);
    pthread_mutex_lock(&e->mu);
    e->n_running_jobs--;
    e->slots_busy -= job->slots;
    pthread_mutex_unlock(&e->mu);
    finish_job(job);
    pthread_mutex_lock(&e->mu);
}

/* Shutdown past its grace period: every job still here ends with 503 (e->mu held). */
static void cancel_everything(srv_engine *e) {
    while (e->queue_head) {
        srv_job *job = e->queue_head;
        unlink_queued(e, job);
        pthread_mutex_lock(&job->mu);
        fail_locked(job, 503, "the server is shutting down");
        job->cancel = true;
        pthread_mutex_unlock(&job->mu);
        finish_job(job);
    }
    for (srv_job *job = e->running; job; job = job->next) {
        pthread_mutex_lock(&job->mu);
        fail_locked(job, 503, "the server is shutting down");
        job->cancel = true;
        pthread_mutex_unlock(&job->mu);
    }
}

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        if (e->cancel_all) cancel_everything(e);
        admit(e);
        if (!e->running) {
            if (e->queue_head && e->queue_head->req.beam) {
                run_head_beam(e);
                continue;
            }
            if (!e->queue_head) pthread_cond_broadcast(&e->idle);
            if (e->stopping && !e->queue_head) break;
            pthread_cond_wait(&e->wake, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        apply_cancels(e);
        step(e);
        collect(e);
        pthread_mutex_lock(&e->mu);
        e->kv_used = nu_kv_used(e->ctx);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- lifetime ------------------------------------------------------------ */

bool srv_engine_start(nu_context *ctx, int32_t parallel, int32_t max_queue, int step_delay_ms,
                      const nu_model *draft, const nu_speculative_params *spec,
                      srv_metrics *metrics, srv_engine **out, char *msg, size_t cap) {
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) return snprintf(msg, cap, "out of memory"), false;
    nu_error err;
    if (nu_scheduler_new(ctx, &e->sched, &err) != NU_OK) {
        snprintf(msg, cap, "%s", err.message);
        free(e);
        return false;
    }
    if (spec && (draft || spec->lookup)) {
        if (nu_scheduler_set_speculation(e->sched, draft, spec, &err) != NU_OK) {
            snprintf(msg, cap, "speculative decoding: %s", err.message);
            nu_scheduler_free(e->sched);
            free(e);
            return false;
        }
        e->speculating = true;
    }
    e->ctx = ctx;
    e->metrics = metrics;
    e->parallel = parallel;
    e->max_queue = max_queue;
    e->step_delay_ms = step_delay_ms;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&e->idle, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        snprintf(msg, cap, "cannot start the engine thread");
        nu_scheduler_free(e->sched);
        free(e);
        return false;
    }
    *out = e;
    return true;
}

/* Waits on e->idle until the engine has nothing, or the monotonic deadline
 * (ms; < 0: none) passes; e->mu held. Returns whether it is idle. */
static bool wait_idle(srv_engine *e, double deadline_ms) {
    while (e->queue_head || e->n_running_jobs > 0) {
        if (deadline_ms < 0) {
            pthread_cond_wait(&e->idle, &e->mu);
            continue;
        }
        if (nu_time_ms() >= deadline_ms) return false;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double wait = deadline_ms - nu_time_ms();
        if (wait > 100) wait = 100;
        ts.tv_nsec += (long)(wait * 1e6);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&e->idle, &e->mu, &ts);
    }
    return true;
}

void srv_engine_drain(srv_engine *e, double grace_ms) {
    pthread_mutex_lock(&e->mu);
    e->draining = true;
    if (!wait_idle(e, nu_time_ms() + grace_ms)) {
        e->cancel_all = true;
        pthread_cond_signal(&e->wake);
        wait_idle(e, -1);
    }
    pthread_mutex_unlock(&e->mu);
}

void srv_engine_free(srv_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->draining = e->stopping = e->cancel_all = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    nu_scheduler_free(e->sched);
    pthread_cond_destroy(&e->wake);
    pthread_cond_destroy(&e->idle);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

void srv_engine_get_stats(srv_engine *e, srv_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    out->queued = e->n_queued;
    out->running_jobs = e->n_running_jobs;
    out->slots_busy = e->slots_busy;
    out->slots = e->parallel;
    out->max_queue = e->max_queue;
    out->kv_used = e->kv_used;
    out->kv_cells = nu_context_n_ctx(e->ctx);
    pthread_mutex_unlock(&e->mu);
}
