/* lab.c - the lab thread and the lab endpoints' HTTP side.
 *
 * A connection thread checks the request (lab_params.c), queues a job and
 * then either streams the job's events as server-sent events or waits for
 * the whole run and answers one JSON object holding them. The lab thread
 * takes jobs one at a time, makes its context on first use and runs the
 * endpoint's code (lab_inspect.c, lab_beam.c, lab_spec.c, lab_vote.c),
 * which hands each event over with lab_emit. Between events a run checks
 * whether its client went away and stops if so. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "http.h"
#include "lab_internal.h"
#include "openai_resp.h"
#include "request.h"
#include "text_check.h"

struct srv_lab {
    srv_lab_config cfg;
    lab_env env;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    lab_job *head, *tail; /* queued, under mu */
    int32_t n_queued;
    lab_job *running; /* under mu */
    bool stopping, joined;
};

/* ---- jobs ---------------------------------------------------------------- */

static lab_job *job_new(lab_request *r) {
    lab_job *job = calloc(1, sizeof *job);
    if (!job) return NULL;
    job->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (job->efd < 0) {
        free(job);
        return NULL;
    }
    pthread_mutex_init(&job->mu, NULL);
    job->r = *r;
    memset(r, 0, sizeof *r);
    job->refs = 1;
    return job;
}

static void job_release(lab_job *job) {
    if (!job) return;
    pthread_mutex_lock(&job->mu);
    bool last = --job->refs == 0;
    pthread_mutex_unlock(&job->mu);
    if (!last) return;
    for (int32_t i = 0; i < job->n_events; i++) free(job->events[i]);
    free(job->events);
    lab_request_free(&job->r);
    srv_model_release(job->model);
    close(job->efd);
    pthread_mutex_destroy(&job->mu);
    free(job);
}

static void job_notify(lab_job *job) {
    uint64_t one = 1;
    ssize_t w = write(job->efd, &one, sizeof one);
    (void)w; /* a full counter still wakes the reader */
}

/* Waits for news or for the client to hang up; false when it did. */
static bool job_wait(lab_job *job, int client_fd) {
    struct pollfd fds[2] = {{.fd = job->efd, .events = POLLIN},
                            {.fd = client_fd, .events = POLLRDHUP}};
    int n = client_fd >= 0 ? 2 : 1;
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

static void job_cancel(lab_job *job) {
    pthread_mutex_lock(&job->mu);
    job->cancel = true;
    pthread_mutex_unlock(&job->mu);
}

bool lab_cancelled(lab_job *job) {
    pthread_mutex_lock(&job->mu);
    bool c = job->cancel;
    pthread_mutex_unlock(&job->mu);
    return c;
}

bool lab_emit(lab_job *job, cJSON *obj) {
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    pthread_mutex_lock(&job->mu);
    bool ok = text != NULL && !job->cancel;
    if (ok && job->n_events == job->cap_events) {
        int32_t cap = job->cap_events ? 2 * job->cap_events : 32;
        char **p = realloc(job->events, (size_t)cap * sizeof *p);
        if (p) job->events = p, job->cap_events = cap;
        ok = p != NULL;
    }
    if (ok) {
        job->events[job->n_events++] = text;
        text = NULL;
    } else if (!job->cancel && !job->failed) {
        job->failed = true;
        job->fail_status = 500;
        snprintf(job->fail_message, sizeof job->fail_message, "out of memory");
    }
    bool go_on = ok;
    pthread_mutex_unlock(&job->mu);
    free(text);
    job_notify(job);
    return go_on;
}

/* ---- small JSON helpers the runs share ----------------------------------- */

cJSON *lab_token_json(const nu_model *m, int32_t token) {
    cJSON *o = cJSON_CreateObject();
    char buf[512];
    size_t n = nu_token_to_bytes(m, token, true, buf, sizeof buf);
    cJSON *text = srv_text_json(buf, n < sizeof buf ? n : sizeof buf);
    cJSON_AddNumberToObject(o, "token", token);
    cJSON_AddItemToObject(o, "text", text ? text : cJSON_CreateNull());
    return o;
}

void lab_add_number(cJSON *o, const char *name, double x) {
    if (!isfinite(x)) {
        cJSON_AddNullToObject(o, name);
        return;
    }
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", x);
    cJSON_AddNumberToObject(o, name, strtod(buf, NULL));
}

/* ---- the lab's context ---------------------------------------------------- */

static bool ensure_context(lab_env *env, char *msg, size_t cap) {
    if (env->ctx) return true;
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = env->cfg->n_ctx;
    cp.n_seq_max = LAB_N_SEQ;
    cp.n_batch = env->cfg->n_batch;
    cp.n_threads = env->cfg->n_threads;
    cp.kv_type = env->cfg->kv_type;
    cp.kv_type_k = env->cfg->kv_type_k;
    cp.kv_type_v = env->cfg->kv_type_v;
    nu_error err;
    if (nu_context_new(env->cfg->model, &cp, &env->ctx, &err) != NU_OK) {
        snprintf(msg, cap, "the lab's context: %.480s", err.message);
        return false;
    }
    return true;
}

nu_status lab_feed(lab_env *env, nu_context *ctx, const int32_t *toks, int32_t n, int32_t *entry,
                   nu_error *err) {
    bool main_ctx = ctx == env->ctx;
    int32_t keep = 0;
    if (main_ctx) {
        /* the common prefix with what sequence 0 holds, less one token so
         * that the last one is decoded again and its logits come out */
        while (keep < env->n_cached && keep < n - 1 && env->cached[keep] == toks[keep]) keep++;
        if (env->n_cached == 0 || nu_kv_seq_pos_max(ctx, 0) != env->n_cached - 1) keep = 0;
        env->n_cached = 0;
    }
    nu_kv_seq_remove(ctx, 0, keep, -1);
    for (int32_t q = 1; q < LAB_N_SEQ; q++) nu_kv_seq_remove(ctx, q, 0, -1);
    int32_t nb = env->cfg->n_batch;
    nu_batch_entry *b = malloc((size_t)nb * sizeof *b);
    if (!b) return NU_ERR_NOMEM;
    nu_status st = NU_OK;
    for (int32_t s = keep; st == NU_OK && s < n; s += nb) {
        int32_t k = n - s < nb ? n - s : nb;
        for (int32_t i = 0; i < k; i++)
            b[i] = (nu_batch_entry){toks[s + i], s + i, 0, s + i == n - 1};
        st = nu_decode(ctx, b, k, err);
        *entry = k - 1;
    }
    free(b);
    if (st != NU_OK) {
        nu_kv_seq_remove(ctx, 0, 0, -1);
        return st;
    }
    if (main_ctx && n <= env->cap_cached) {
        memcpy(env->cached, toks, (size_t)n * sizeof *toks);
        env->n_cached = n;
    }
    return NU_OK;
}

/* ---- the lab thread ------------------------------------------------------- */

static void run_job(srv_lab *lab, lab_job *job) {
    int status = 500;
    char msg[512] = "";
    bool ok = ensure_context(&lab->env, msg, sizeof msg);
    if (ok) {
        switch (job->r.kind) {
        case LAB_INSPECT: ok = lab_run_inspect(&lab->env, job, &status, msg, sizeof msg); break;
        case LAB_BEAM: ok = lab_run_beam(&lab->env, job, &status, msg, sizeof msg); break;
        case LAB_SPECULATIVE:
            ok = lab_run_speculative(&lab->env, job, &status, msg, sizeof msg);
            break;
        case LAB_SELF_CONSISTENCY:
            ok = lab_run_self_consistency(&lab->env, job, &status, msg, sizeof msg);
            break;
        }
    }
    /* what a failed run left in the cache is unknown; the other runs use
     * sequence 0 as they please */
    if (!ok || job->r.kind != LAB_INSPECT) lab->env.n_cached = 0;
    pthread_mutex_lock(&lab->mu);
    bool stopping = lab->stopping;
    pthread_mutex_unlock(&lab->mu);
    pthread_mutex_lock(&job->mu);
    if (stopping && !job->failed) {
        ok = false;
        status = 503;
        snprintf(msg, sizeof msg, "the server is shutting down");
        job->cancel = false; /* so that the error is shown */
    }
    if (!ok && !job->failed && !job->cancel) {
        job->failed = true;
        job->fail_status = status;
        snprintf(job->fail_message, sizeof job->fail_message, "%s", msg);
    }
    job->done = true;
    pthread_mutex_unlock(&job->mu);
    job_notify(job);
}

static void *lab_main(void *arg) {
    srv_lab *lab = arg;
    pthread_mutex_lock(&lab->mu);
    for (;;) {
        while (!lab->head && !lab->stopping) pthread_cond_wait(&lab->wake, &lab->mu);
        if (!lab->head) break;
        lab_job *job = lab->head;
        lab->head = job->next;
        if (!lab->head) lab->tail = NULL;
        lab->n_queued--;
        lab->running = job;
        if (lab->stopping) job_cancel(job);
        pthread_mutex_unlock(&lab->mu);
        run_job(lab, job);
        pthread_mutex_lock(&lab->mu);
        lab->running = NULL;
        pthread_mutex_unlock(&lab->mu);
        job_release(job); /* the lab's reference */
        pthread_mutex_lock(&lab->mu);
    }
    pthread_mutex_unlock(&lab->mu);
    return NULL;
}

bool srv_lab_start(const srv_lab_config *cfg, srv_lab **out, char *msg, size_t cap) {
    srv_lab *lab = calloc(1, sizeof *lab);
    if (!lab) return snprintf(msg, cap, "out of memory"), false;
    lab->cfg = *cfg;
    lab->env.cfg = &lab->cfg;
    lab->env.cap_cached = cfg->n_ctx;
    lab->env.cached = malloc((size_t)cfg->n_ctx * sizeof *lab->env.cached);
    if (!lab->env.cached) {
        free(lab);
        return snprintf(msg, cap, "out of memory"), false;
    }
    pthread_mutex_init(&lab->mu, NULL);
    pthread_cond_init(&lab->wake, NULL);
    if (pthread_create(&lab->thread, NULL, lab_main, lab) != 0) {
        pthread_cond_destroy(&lab->wake);
        pthread_mutex_destroy(&lab->mu);
        free(lab->env.cached);
        free(lab);
        return snprintf(msg, cap, "cannot start the lab thread"), false;
    }
    *out = lab;
    return true;
}

void srv_lab_stop(srv_lab *lab) {
    pthread_mutex_lock(&lab->mu);
    bool joined = lab->joined;
    lab->stopping = lab->joined = true;
    for (lab_job *j = lab->head; j; j = j->next) job_cancel(j);
    if (lab->running) job_cancel(lab->running);
    pthread_cond_signal(&lab->wake);
    pthread_mutex_unlock(&lab->mu);
    if (!joined) pthread_join(lab->thread, NULL);
}

void srv_lab_free(srv_lab *lab) {
    if (!lab) return;
    srv_lab_stop(lab);
    nu_context_free(lab->env.ctx);
    nu_context_free(lab->env.draft);
    free(lab->env.cached);
    pthread_cond_destroy(&lab->wake);
    pthread_mutex_destroy(&lab->mu);
    free(lab);
}

/* Queues a job (the lab takes a reference); false with a 503 when full. */
static bool submit(srv_lab *lab, lab_job *job, srv_error *err) {
    pthread_mutex_lock(&lab->mu);
    bool refuse = lab->stopping || lab->n_queued >= lab->cfg.max_queue;
    if (!refuse) {
        job->refs++;
        if (lab->tail)
            lab->tail->next = job;
        else
            lab->head = job;
        lab->tail = job;
        lab->n_queued++;
        pthread_cond_signal(&lab->wake);
    }
    bool stopping = lab->stopping;
    pthread_mutex_unlock(&lab->mu);
    if (refuse)
        return srv_fail(err, 503, "server_error", stopping ? "shutting_down" : "queue_full", NULL,
                        stopping ? "the server is shutting down"
                                 : "the lab is busy (its queue is full); retry later");
    return true;
}

/* ---- answers -------------------------------------------------------------- */

static const char *object_name(lab_kind k) {
    switch (k) {
    case LAB_INSPECT: return "nucleus.inspect";
    case LAB_BEAM: return "nucleus.inspect.beam";
    case LAB_SPECULATIVE: return "nucleus.inspect.speculative";
    case LAB_SELF_CONSISTENCY: return "nucleus.inspect.self_consistency";
    }
    return "nucleus.inspect";
}

static char *error_json_of(const lab_job *job) {
    srv_error err = {.status = job->fail_status,
                     .type = job->fail_status >= 500 ? "server_error" : "invalid_request_error"};
    snprintf(err.message, sizeof err.message, "%s", job->fail_message);
    return srv_error_json(&err);
}

/* {"object", "events": [...]} of a finished job (job->mu held). */
static char *whole_json(const lab_job *job) {
    size_t need = 64;
    for (int32_t i = 0; i < job->n_events; i++) need += strlen(job->events[i]) + 1;
    char *out = malloc(need);
    if (!out) return NULL;
    size_t n =
        (size_t)snprintf(out, need, "{\"object\":\"%s\",\"events\":[", object_name(job->r.kind));
    for (int32_t i = 0; i < job->n_events; i++) {
        if (i) out[n++] = ',';
        size_t k = strlen(job->events[i]);
        memcpy(out + n, job->events[i], k);
        n += k;
    }
    memcpy(out + n, "]}", 3);
    return out;
}

static enum MHD_Result answer_when_done(struct MHD_Connection *c, srv_conn *cs, lab_job *job) {
    int fd = srv_client_fd(c);
    for (;;) {
        pthread_mutex_lock(&job->mu);
        bool done = job->done;
        pthread_mutex_unlock(&job->mu);
        if (done) break;
        if (!job_wait(job, fd)) {
            job_cancel(job);
            job_release(job);
            cs->status = 499;
            return MHD_NO;
        }
    }
    pthread_mutex_lock(&job->mu);
    int status = job->failed ? job->fail_status : 200;
    char *body = job->failed ? error_json_of(job) : whole_json(job);
    pthread_mutex_unlock(&job->mu);
    job_release(job);
    return srv_answer(c, cs, status, body, NULL);
}

/* A stream: the events as `data: {...}` then `data: [DONE]`. */
typedef struct lab_stream {
    lab_job *job;
    int client_fd;
    int32_t sent; /* events handed out */
    char *out;
    size_t len, off;
    bool finished;
} lab_stream;

/* Moves the job's new events into st->out; whether anything was added. */
static bool stream_produce(lab_stream *st) {
    lab_job *job = st->job;
    pthread_mutex_lock(&job->mu);
    size_t need = 32;
    for (int32_t i = st->sent; i < job->n_events; i++) need += strlen(job->events[i]) + 8;
    bool done = job->done, added = false;
    char *err = done && job->failed ? error_json_of(job) : NULL;
    if (err) need += strlen(err) + 8;
    char *out = malloc(need);
    size_t n = 0;
    for (int32_t i = st->sent; out && i < job->n_events; i++) {
        n += (size_t)sprintf(out + n, "data: %s\n\n", job->events[i]);
        added = true;
    }
    if (out) st->sent = job->n_events;
    if (out && done) {
        if (err) n += (size_t)sprintf(out + n, "data: %s\n\n", err);
        n += (size_t)sprintf(out + n, "data: [DONE]\n\n");
        st->finished = added = true;
    }
    pthread_mutex_unlock(&job->mu);
    free(err);
    free(st->out);
    st->out = out;
    st->len = out ? n : 0;
    st->off = 0;
    if (!out) st->finished = true;
    return added;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    lab_stream *st = cls;
    (void)pos;
    while (st->off == st->len) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (stream_produce(st)) continue;
        if (!job_wait(st->job, st->client_fd)) {
            job_cancel(st->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = st->len - st->off < max ? st->len - st->off : max;
    memcpy(buf, st->out + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    lab_stream *st = cls;
    job_cancel(st->job); /* a no-op when it is done */
    job_release(st->job);
    free(st->out);
    free(st);
}

static enum MHD_Result answer_stream(struct MHD_Connection *c, srv_conn *cs, lab_job *job) {
    lab_stream *st = calloc(1, sizeof *st);
    if (!st) {
        job_cancel(job);
        job_release(job);
        return MHD_NO;
    }
    st->job = job;
    st->client_fd = srv_client_fd(c);
    return srv_answer_stream(c, cs, "text/event-stream", stream_read, st, stream_free);
}

enum MHD_Result srv_lab_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                               lab_kind kind) {
    lab_request r;
    srv_error err;
    srv_model *m = srv_acquire_body_model(s, cs, &err);
    if (!m) return srv_answer_error(c, cs, &err);
    if (!lab_parse(cs->body, cs->len, kind, m->model, &m->limits, &m->defaults, m->lab_cfg.n_ctx,
                   s->cfg->draft != NULL, &r, &err)) {
        srv_model_release(m);
        return srv_answer_error(c, cs, &err);
    }
    cs->prompt_tokens = r.n_prompt;
    bool stream = r.req.stream;
    lab_job *job = job_new(&r);
    if (!job) {
        lab_request_free(&r);
        srv_model_release(m);
        srv_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
        return srv_answer_error(c, cs, &err);
    }
    job->model = m; /* released with the job */
    if (!submit(m->lab, job, &err)) {
        job_release(job);
        return srv_answer_error(c, cs, &err);
    }
    return stream ? answer_stream(c, cs, job) : answer_when_done(c, cs, job);
}
