/* sse.h - streaming a job as server-sent events: one `data: {chunk}` event
 * per piece of text, the finish reasons, the usage when asked, then
 * `data: [DONE]`. The body is produced by a libmicrohttpd content reader
 * that runs on the connection's own thread and blocks on the job's eventfd
 * (and the client socket) until there is news: no busy waiting. */
#ifndef NU_SRV_SSE_H
#define NU_SRV_SSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "engine.h"
#include "openai_resp.h"

/* What a job's stream has made and not yet handed to libmicrohttpd (the
 * bytes of buf from off on); shared by the SSE stream here and Ollama's
 * NDJSON one (ollama.c). buf.failed (out of memory) ends the stream with an
 * error. */
typedef struct srv_stream_out {
    nu_buf buf;
    size_t off;
    bool finished;              /* everything is in buf */
    srv_job *job;               /* the job streamed (the stream holds a reference) */
    int client_fd;              /* watched for the client leaving */
    int64_t *completion_tokens; /* gets the tokens made, for the log line, or NULL */
} srv_stream_out;

/* A content reader's loop: hands out what o holds; when it is empty, asks
 * produce(st) for more (false: nothing new) and otherwise waits for news
 * of o->job, or cancels it when the client went away (o->completion_tokens
 * then gets the tokens made before the cancel). */
ssize_t srv_stream_pump(srv_stream_out *o, bool (*produce)(void *), void *st, char *buf,
                        size_t max);

/* The job is done and its last bytes are in o->buf (o->job->mu held):
 * o->completion_tokens gets the tokens made, and the stream ends once buf
 * is handed out. */
void srv_stream_out_end(srv_stream_out *o);

typedef struct srv_stream srv_stream;

/* A stream over a submitted job; it takes over the caller's reference.
 * completion_tokens (may be NULL) gets the generated-token count when the
 * stream ends; it must stay valid while the body is being read. */
srv_stream *srv_stream_new(srv_engine *e, srv_job *job, const srv_resp_ctx *rc, int client_fd,
                           int64_t *completion_tokens);

/* The content reader and its free callback (MHD_create_response_from_callback). */
ssize_t srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max);
void srv_stream_free(void *cls);

#endif
