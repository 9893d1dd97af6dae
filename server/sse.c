/* sse.c - a job's output as server-sent events. */
#include "sse.h"

#include "buf.h"
#include "models.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

struct srv_stream {
    srv_engine *engine;
    srv_resp_ctx rc;
    srv_stream_out out;   /* events produced, not yet handed to MHD */
    bool *role_sent;      /* chat: the first delta (with the role) went out */
    srv_splitter **split; /* chat with thinking or tools: per choice, its text split */
};

/* Frees what the stream allocated (not the job). */
static void free_stream_parts(srv_stream *st) {
    for (int32_t i = 0; st->split && i < st->out.job->n_results; i++)
        srv_splitter_free(st->split[i]);
    free(st->split);
    nu_buf_free(&st->out.buf);
    free(st->role_sent);
    free(st);
}

srv_stream *srv_stream_new(srv_engine *e, srv_job *job, const srv_resp_ctx *rc, int client_fd,
                           int64_t *completion_tokens) {
    srv_stream *st = calloc(1, sizeof *st);
    if (st) st->role_sent = calloc((size_t)job->n_results + 1, sizeof *st->role_sent);
    if (!st || !st->role_sent) {
        free(st);
        return NULL;
    }
    if (rc->kind == SRV_CHAT && srv_splitter_needed(&job->req)) {
        bool ok = (st->split = calloc((size_t)job->n_results + 1, sizeof *st->split)) != NULL;
        for (int32_t i = 0; ok && i < job->n_results; i++)
            ok = (st->split[i] = srv_splitter_new(&job->req)) != NULL;
        if (!ok) {
            st->out.job = job;
            free_stream_parts(st);
            return NULL;
        }
    }
    st->engine = e;
    st->out.job = job;
    st->rc = *rc;
    st->out.client_fd = client_fd;
    st->out.completion_tokens = completion_tokens;
    return st;
}

/* Appends "data: <json>\n\n" (json is freed). */
static void put_event(srv_stream *st, char *json) {
    const char *text = json ? json : "{}";
    nu_buf_puts(&st->out.buf, "data: ");
    nu_buf_puts(&st->out.buf, text);
    nu_buf_puts(&st->out.buf, "\n\n");
    free(json);
}

/* The new text and log-probs of choice i as one chunk, if there are any
 * (job->mu held). Returns whether a chunk was added. */
static bool put_progress(srv_stream *st, int32_t i, bool done) {
    srv_job *job = st->out.job;
    srv_choice *c = &job->choices[i];
    int32_t n_lps = c->n_lps;
    if (done)
        n_lps = srv_logprobs_in_text(c->lps, c->n_lps, c->len, job->results[i].finish);
    else
        while (n_lps > c->lps_sent && c->lps[n_lps - 1].text_offset >= c->len) n_lps--;
    bool role = st->rc.kind == SRV_CHAT && !st->role_sent[i];
    if (c->len == c->sent && n_lps <= c->lps_sent && !role) return false;
    srv_chunk ch = {.index = i,
                    .text = c->text + c->sent,
                    .len = c->len - c->sent,
                    .lps = c->lps + c->lps_sent,
                    .n_lps = n_lps > c->lps_sent ? n_lps - c->lps_sent : 0,
                    .role = role};
    if (!c->text) ch.text = "";
    put_event(st, srv_chunk_json(&st->rc, job, &ch));
    c->sent = c->len;
    if (n_lps > c->lps_sent) c->lps_sent = n_lps;
    st->role_sent[i] = true;
    return true;
}

/* Where a choice's tool parser sends its events: one chunk each; the
 * log-prob entries that are ready ride on the first one. */
typedef struct tool_sink {
    srv_stream *st;
    int32_t index;
    const nu_token_logprob *lps;
    int32_t n_lps;
    bool lps_taken, added;
} tool_sink;

static bool put_tool_event(void *user, const srv_tool_event *ev) {
    tool_sink *k = user;
    srv_stream *st = k->st;
    srv_chunk ch = {.index = k->index, .text = "", .role = !st->role_sent[k->index]};
    if (ev->kind == SRV_TOOL_CONTENT || ev->kind == SRV_TOOL_REASONING)
        ch.text = ev->text, ch.len = ev->len, ch.reasoning = ev->kind == SRV_TOOL_REASONING;
    else
        ch.tool = ev;
    if (!k->lps_taken) {
        ch.lps = k->lps, ch.n_lps = k->n_lps;
        k->lps_taken = true;
    }
    put_event(st, srv_chunk_json(&st->rc, st->out.job, &ch));
    st->role_sent[k->index] = true;
    k->added = true;
    return !st->out.buf.failed;
}

/* put_progress for an answer with thinking or tools: the splitter decides
 * what is thinking, content and calls (job->mu held). */
static bool put_tool_progress(srv_stream *st, int32_t i, bool done) {
    srv_job *job = st->out.job;
    srv_choice *c = &job->choices[i];
    int32_t n_lps = c->n_lps;
    if (done)
        n_lps = srv_logprobs_in_text(c->lps, c->n_lps, c->len, job->results[i].finish);
    else
        while (n_lps > c->lps_sent && c->lps[n_lps - 1].text_offset >= c->len) n_lps--;
    tool_sink k = {.st = st,
                   .index = i,
                   .lps = c->lps + c->lps_sent,
                   .n_lps = n_lps > c->lps_sent ? n_lps - c->lps_sent : 0};
    if (!srv_splitter_feed(st->split[i], c->text, c->len, done, put_tool_event, &k))
        st->out.buf.failed = true;
    c->sent = c->len;
    bool role = !st->role_sent[i];
    if (!k.lps_taken && (role || (done && k.n_lps > 0))) {
        /* the first delta has the role even before any content is certain */
        srv_chunk ch = {.index = i,
                        .text = "",
                        .role = role,
                        .null_content = role,
                        .lps = k.lps,
                        .n_lps = k.n_lps};
        put_event(st, srv_chunk_json(&st->rc, job, &ch));
        st->role_sent[i] = true;
        k.lps_taken = k.added = true;
    }
    if (k.lps_taken && n_lps > c->lps_sent) c->lps_sent = n_lps;
    return k.added;
}

/* The end of the stream: finish reasons, usage, [DONE] (job->mu held, job done). */
static void put_end(srv_stream *st) {
    srv_job *job = st->out.job;
    if (job->failed) {
        srv_error err = {.status = job->fail_status,
                         .type =
                             job->fail_status >= 500 ? "server_error" : "invalid_request_error"};
        snprintf(err.message, sizeof err.message, "%s", job->fail_message);
        put_event(st, srv_error_json(&err));
    } else {
        for (int32_t i = 0; i < job->n_results; i++) {
            int32_t n_calls = st->split ? srv_splitter_n_calls(st->split[i]) : 0;
            const char *finish =
                srv_finish_name_calls(job->results[i].finish, n_calls, &job->req.tools);
            srv_chunk ch = {.index = i, .text = "", .finish = finish ? finish : "stop"};
            put_event(st, srv_chunk_json(&st->rc, job, &ch));
        }
        if (job->req.include_usage) put_event(st, srv_usage_chunk_json(&st->rc, job));
    }
    nu_buf_puts(&st->out.buf, "data: [DONE]\n\n");
    srv_stream_out_end(&st->out);
}

/* Turns whatever the job has new into events; whether anything was added. */
static bool produce(void *cls) {
    srv_stream *st = cls;
    srv_job *job = st->out.job;
    pthread_mutex_lock(&job->mu);
    bool done = job->done, added = false;
    for (int32_t i = 0; i < job->n_results && !(done && job->failed); i++)
        added |= st->split ? put_tool_progress(st, i, done) : put_progress(st, i, done);
    if (done) {
        put_end(st);
        added = true;
    }
    pthread_mutex_unlock(&job->mu);
    return added;
}

void srv_stream_out_end(srv_stream_out *o) {
    int64_t prompt;
    if (o->completion_tokens) srv_job_usage(o->job, &prompt, o->completion_tokens);
    o->finished = true;
}

ssize_t srv_stream_pump(srv_stream_out *o, bool (*produce_more)(void *), void *st, char *buf,
                        size_t max) {
    srv_job *job = o->job;
    while (o->off == o->buf.len) {
        o->off = 0;
        nu_buf_clear(&o->buf);
        if (o->buf.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (o->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (produce_more(st)) continue;
        if (!srv_job_wait(job, o->client_fd)) {
            srv_engine_cancel(job->model->engine, job); /* the client went away */
            int64_t prompt; /* the log line counts what was made before the cancel */
            if (o->completion_tokens && srv_job_wait_done(job, 5000))
                srv_job_usage(job, &prompt, o->completion_tokens);
            srv_client_gone();
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = o->buf.len - o->off < max ? o->buf.len - o->off : max;
    memcpy(buf, o->buf.data + o->off, n);
    o->off += n;
    return (ssize_t)n;
}

ssize_t srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_stream *st = cls;
    (void)pos;
    return srv_stream_pump(&st->out, produce, st, buf, max);
}

void srv_stream_free(void *cls) {
    srv_stream *st = cls;
    if (!st) return;
    pthread_mutex_lock(&st->out.job->mu);
    bool done = st->out.job->done;
    pthread_mutex_unlock(&st->out.job->mu);
    if (!done) srv_engine_cancel(st->engine, st->out.job);
    srv_job *job = st->out.job;
    free_stream_parts(st);
    srv_job_release(job);
}
