/* http.c - the HTTP side of `nucleus serve` on libmicrohttpd: routing,
 * API keys, request bodies within limits, answers, the log line of each
 * request, and the server's start and graceful shutdown.
 *
 * libmicrohttpd runs one thread per connection, so a connection may block
 * while it waits for its job (non-streaming) or for the next piece of text
 * (streaming, in the content reader) without holding up anyone else; a slow
 * or stuck client only ever holds its own thread, until the idle timeout. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "anthropic.h"
#include "deadlines.h"
#include "http.h"
#include "openai_resp.h"
#include "responses.h"
#include "web.h"

static const srv_route routes[] = {
    {"POST", "/v1/chat/completions", false, ROUTE_CHAT, "chat", true},
    {"POST", "/v1/completions", false, ROUTE_COMPLETIONS, "completions", true},
    {"POST", "/v1/embeddings", false, ROUTE_EMBEDDINGS, "embeddings", true},
    {"POST", "/v1/responses", false, ROUTE_RESPONSES, "responses", true},
    {"GET", "/v1/responses/", true, ROUTE_RESPONSE_GET, "responses_get", true},
    {"DELETE", "/v1/responses/", true, ROUTE_RESPONSE_DELETE, "responses_delete", true},
    {"POST", "/v1/messages", false, ROUTE_MESSAGES, "messages", true},
    {"POST", "/v1/messages/count_tokens", false, ROUTE_MESSAGES_COUNT, "messages_count_tokens",
     true},
    {"POST", "/api/chat", false, ROUTE_OLLAMA_CHAT, "ollama_chat", true},
    {"POST", "/api/generate", false, ROUTE_OLLAMA_GENERATE, "ollama_generate", true},
    {"POST", "/api/embed", false, ROUTE_OLLAMA_EMBED, "ollama_embed", true},
    {"POST", "/api/embeddings", false, ROUTE_OLLAMA_EMBEDDINGS, "ollama_embeddings", true},
    {"GET", "/api/tags", false, ROUTE_OLLAMA_TAGS, "ollama_tags", true},
    {"GET", "/api/ps", false, ROUTE_OLLAMA_PS, "ollama_ps", true},
    {"POST", "/api/show", false, ROUTE_OLLAMA_SHOW, "ollama_show", true},
    {"GET", "/api/version", false, ROUTE_OLLAMA_VERSION, "ollama_version", false},
    {"GET", "/v1/models", false, ROUTE_MODELS, "models", true},
    {"GET", "/v1/models/", true, ROUTE_MODEL, "models", true},
    {"GET", "/health", false, ROUTE_HEALTH, "health", false},
    {"GET", "/health/ready", false, ROUTE_READY, "ready", false},
    {"GET", "/metrics", false, ROUTE_METRICS, "metrics", true},
    {"POST", "/tokenize", false, ROUTE_TOKENIZE, "tokenize", true},
    {"POST", "/detokenize", false, ROUTE_DETOKENIZE, "detokenize", true},
    {"POST", "/v1/watermark/detect", false, ROUTE_WATERMARK_DETECT, "watermark_detect", true},
    {"POST", "/v1/inspect", false, ROUTE_INSPECT, "inspect", true},
    {"POST", "/v1/inspect/beam", false, ROUTE_INSPECT_BEAM, "inspect_beam", true},
    {"POST", "/v1/inspect/speculative", false, ROUTE_INSPECT_SPECULATIVE, "inspect_speculative",
     true},
    {"POST", "/v1/inspect/self_consistency", false, ROUTE_INSPECT_SELF_CONSISTENCY,
     "inspect_self_consistency", true},
};
/* Any file of the embedded page (the page itself needs no key; its API calls do). */
static const srv_route web_route = {"GET", "/", false, ROUTE_WEB, "web", false};

srv_config srv_default_config(void) {
    srv_config c = {.host = "127.0.0.1",
                    .port = 8080,
                    .parallel = 4,
                    .n_batch = 512,
                    .kv_type = NU_KV_F16,
                    .kv_type_k = NU_KV_SAME,
                    .kv_type_v = NU_KV_SAME,
                    .max_body = 1 << 20,
                    .max_queue = 64,
                    .max_responses = 1024,
                    .max_connections = 256,
                    .max_connections_per_address = 64,
                    .timeout_s = 60,
                    .shutdown_grace_s = 10};
    return c;
}

/* ---- answers ------------------------------------------------------------- */

/* Set on a connection's thread once its client has gone: libmicrohttpd's
 * "internal error" messages that follow are about that, not a fault, and
 * the request's log line already says the connection closed early. */
static _Thread_local bool client_gone;

void srv_client_gone(void) {
    client_gone = true;
}

int srv_client_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

enum MHD_Result srv_answer(struct MHD_Connection *c, srv_conn *cs, int status, char *body,
                           const char *content_type) {
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                              "\"param\":null,\"code\":null}}";
    struct MHD_Response *resp;
    if (body) {
        resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    } else {
        status = 500;
        content_type = NULL;
        resp = MHD_create_response_from_buffer(strlen(oom), (void *)oom, MHD_RESPMEM_PERSISTENT);
    }
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", content_type ? content_type : "application/json");
    if (status == 503 || status == 429) MHD_add_response_header(resp, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (status == 405 && cs->route)
        MHD_add_response_header(resp, "Allow",
                                strcmp(cs->route->method, "GET") ? cs->route->method : "GET, HEAD");
    if (cs->close) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    cs->status = status;
    cs->answered = true;
    return ret;
}

enum MHD_Result srv_answer_stream(struct MHD_Connection *c, srv_conn *cs, const char *content_type,
                                  MHD_ContentReaderCallback read, void *cls,
                                  MHD_ContentReaderFreeCallback free_cls) {
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, read, cls, free_cls);
    if (!resp) {
        free_cls(cls);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    cs->status = 200;
    cs->answered = true;
    return ret;
}

/* {"error": "message"}: Ollama's errors. */
static char *ollama_error_json(const srv_error *err) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", err->message);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return body;
}

enum MHD_Result srv_answer_error(struct MHD_Connection *c, srv_conn *cs, const srv_error *err) {
    bool ollama = !strncmp(cs->url, "/api/", 5), anthropic = !strncmp(cs->url, "/v1/messages", 12);
    return srv_answer(c, cs, err->status,
                      ollama      ? ollama_error_json(err)
                      : anthropic ? srv_anthropic_error_json(err)
                                  : srv_error_json(err),
                      NULL);
}

/* ---- routing and checks -------------------------------------------------- */

/* Whether a request's method fits a route's: HEAD goes wherever GET does
 * (RFC 9110 section 9.3.2; libmicrohttpd leaves the body out). */
static bool method_fits(const char *method, const char *route_method) {
    return !strcmp(method, route_method) ||
           (!strcmp(route_method, "GET") && !strcmp(method, "HEAD"));
}

/* The route for url; *other_method is set when only the method is wrong. */
static const srv_route *find_route(const char *method, const char *url, bool *other_method) {
    *other_method = false;
    if (srv_web_find(url)) {
        *other_method = !method_fits(method, "GET");
        return &web_route;
    }
    const srv_route *found = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const srv_route *r = &routes[i];
        bool match = r->prefix ? !strncmp(url, r->path, strlen(r->path)) && url[strlen(r->path)]
                               : !strcmp(url, r->path);
        if (!match) continue;
        if (method_fits(method, r->method)) return r;
        found = r;
    }
    *other_method = found != NULL;
    return found;
}

/* Compares without stopping at the first difference (no timing hints). */
static bool same_secret(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = la != lb;
    for (size_t i = 0; i < lb; i++)
        diff |= (unsigned char)(i < la ? a[i] : 0) ^ (unsigned char)b[i];
    return diff == 0;
}

static bool authorized(const srv_state *s, struct MHD_Connection *c) {
    if (!s->cfg->api_key) return true;
    /* Anthropic's clients send the key in x-api-key */
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (x && same_secret(x, s->cfg->api_key)) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    return same_secret(h, s->cfg->api_key);
}

/* Copies text for the log line, printable ASCII only. */
static void copy_printable(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++) dst[i] = src[i] > 32 && src[i] < 127 ? src[i] : '?';
    dst[i] = 0;
}

/* Answers with an invalid_request_error of the given status and code. */
static enum MHD_Result refuse(struct MHD_Connection *c, srv_conn *cs, int status, const char *code,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result refuse(struct MHD_Connection *c, srv_conn *cs, int status, const char *code,
                              const char *fmt, ...) {
    srv_error err = {.status = status, .type = "invalid_request_error", .code = code};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, ap);
    va_end(ap);
    return srv_answer_error(c, cs, &err);
}

/* What the headers say about the body's framing. */
typedef struct body_framing {
    int n_length;        /* Content-Length values seen (a list counts each) */
    bool lengths_differ; /* two of them differ, or one is not a number */
    unsigned long long length;
    bool transfer_encoding;
} body_framing;

/* Reads one Content-Length value, a comma-separated list of equal lengths
 * at most (RFC 9110 section 8.6). */
static void read_length(body_framing *f, const char *v) {
    for (;;) {
        while (*v == ' ' || *v == '\t') v++;
        if (*v < '0' || *v > '9') {
            f->lengths_differ = true;
            return;
        }
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        if (f->n_length++ > 0 && n != f->length) f->lengths_differ = true;
        f->length = n;
        v = end;
        while (*v == ' ' || *v == '\t') v++;
        if (*v == 0) return;
        if (*v++ != ',') {
            f->lengths_differ = true;
            return;
        }
    }
}

static enum MHD_Result on_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value) {
    body_framing *f = cls;
    (void)kind;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) read_length(f, value ? value : "");
    if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) f->transfer_encoding = true;
    return MHD_YES;
}

/* RFC 9112 section 6.3: a body with both Content-Length and
 * Transfer-Encoding, or with Content-Length values that disagree, has no
 * trustworthy end; such a request is refused and the connection closed,
 * since what follows on it cannot be read as the next request. */
static bool framing_ok(struct MHD_Connection *c, srv_conn *cs, const char **why) {
    body_framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, on_header, &f);
    *why = f.transfer_encoding && f.n_length > 0
               ? "the request has both Content-Length and Transfer-Encoding (RFC 9112 section 6.3)"
           : f.lengths_differ ? "the request's Content-Length headers disagree or are not numbers"
                              : NULL;
    if (*why) cs->close = true;
    return *why == NULL;
}

/* The first call for a request: framing, route, key and declared size are
 * checked before any body is read, so refused uploads are never buffered. */
static enum MHD_Result on_headers(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                  const char *url, const char *method) {
    const char *why;
    if (!framing_ok(c, cs, &why)) return refuse(c, cs, 400, "bad_framing", "%s", why);
    bool other_method;
    cs->route = find_route(method, url, &other_method);
    if (!cs->route)
        return refuse(c, cs, 404, "unknown_url", "Invalid URL (%s %.100s)", cs->method, cs->url);
    if (other_method)
        return refuse(c, cs, 405, "method_not_allowed", "%s is not allowed on %s (use %s)",
                      cs->method, cs->route->path, cs->route->method);
    if (cs->route->needs_key && !authorized(s, c))
        return refuse(c, cs, 401, "invalid_api_key",
                      "Incorrect or missing API key (send Authorization: Bearer KEY)");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->cfg->max_body)
        return refuse(c, cs, 413, "body_too_large", "the request body is larger than %zu bytes",
                      s->cfg->max_body);
    if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) {
        srv_deadlines_received(c);
        return srv_handle(s, c, cs, url);
    }
    return MHD_YES;
}

/* Stores a piece of the body, or counts it when the body is too large. */
static bool take_body(srv_state *s, srv_conn *cs, const char *data, size_t n) {
    if (cs->too_large || cs->len + n > s->cfg->max_body) {
        cs->too_large = true;
        cs->discarded += n;
        return cs->discarded <= 16 * s->cfg->max_body; /* past that, just hang up */
    }
    if (cs->len + n + 1 > cs->cap) {
        size_t cap = cs->cap ? cs->cap : 4096;
        while (cap < cs->len + n + 1) cap *= 2;
        char *b = realloc(cs->body, cap);
        if (!b) return false;
        cs->body = b;
        cs->cap = cap;
    }
    memcpy(cs->body + cs->len, data, n);
    cs->len += n;
    cs->body[cs->len] = 0;
    return true;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls) {
    srv_state *s = cls;
    srv_conn *cs = *con_cls;
    (void)version;
    if (!cs) {
        client_gone = false;
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        cs->t0 = nu_time_ms();
        copy_printable(cs->method, sizeof cs->method, method);
        copy_printable(cs->url, sizeof cs->url, url);
        return on_headers(s, c, cs, url, method);
    }
    if (cs->answered) {
        if (*upload_size == 0) srv_deadlines_received(c);
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        bool ok = take_body(s, cs, upload, *upload_size);
        *upload_size = 0;
        return ok ? MHD_YES : MHD_NO;
    }
    if (cs->too_large)
        return refuse(c, cs, 413, "body_too_large", "the request body is larger than %zu bytes",
                      s->cfg->max_body);
    srv_deadlines_received(c);
    if (!cs->body && !(cs->body = calloc(1, 1))) return MHD_NO;
    return srv_handle(s, c, cs, url);
}

void srv_answer_begin(srv_state *s, srv_conn *cs) {
    pthread_mutex_lock(&s->answers_mu);
    s->answers_in_flight++;
    cs->in_flight = true;
    pthread_mutex_unlock(&s->answers_mu);
}

void srv_answer_end(srv_state *s, srv_conn *cs) {
    if (!cs->in_flight) return;
    pthread_mutex_lock(&s->answers_mu);
    s->answers_in_flight--;
    cs->in_flight = false;
    pthread_cond_broadcast(&s->answers_done);
    pthread_mutex_unlock(&s->answers_mu);
}

/* Shutdown: waits (at most timeout_ms) until every generation answer has
 * been sent, so finished streams are not cut before their last events. */
static void wait_answers(srv_state *s, double timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(timeout_ms / 1e3);
    pthread_mutex_lock(&s->answers_mu);
    while (s->answers_in_flight > 0)
        if (pthread_cond_timedwait(&s->answers_done, &s->answers_mu, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&s->answers_mu);
}

/* The end of a request: metrics and the log line. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    srv_state *s = cls;
    srv_conn *cs = *con_cls;
    (void)c;
    if (!cs) return;
    double ms = nu_time_ms() - cs->t0;
    int status = cs->status ? cs->status : 499;
    bool aborted = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
    srv_answer_end(s, cs);
    if (!aborted) srv_deadlines_next(c); /* a kept-alive connection waits for its next request */
    srv_metrics_request(s->metrics, cs->route ? cs->route->name : "unknown", status, ms / 1e3);
    if (!s->cfg->quiet)
        fprintf(stderr, "nucleus: %s %s %d %.1f ms prompt=%lld completion=%lld%s\n", cs->method,
                cs->url, status, ms, (long long)cs->prompt_tokens, (long long)cs->completion_tokens,
                aborted ? " (connection closed early)" : "");
    free(cs->body);
    free(cs);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const srv_state *s = cls;
    if (s->cfg->quiet || client_gone) return;
    fputs("nucleus: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* ---- start and stop ------------------------------------------------------ */

static struct MHD_Daemon *start_http(srv_state *s, char *msg, size_t cap) {
    char port[16];
    snprintf(port, sizeof port, "%d", s->cfg->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *ai = NULL;
    int rc = getaddrinfo(s->cfg->host, port, &hints, &ai);
    if (rc != 0) return snprintf(msg, cap, "--host %s: %s", s->cfg->host, gai_strerror(rc)), NULL;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    /* the port is only for libmicrohttpd's messages: the address says where to listen */
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)s->cfg->port, NULL, NULL, on_access, s, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)s->cfg->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)s->cfg->max_connections_per_address, MHD_OPTION_NOTIFY_CONNECTION,
        srv_deadlines_notify, s->deadlines, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d)
        snprintf(msg, cap, "cannot listen on %s:%d (%s)", s->cfg->host, s->cfg->port,
                 strerror(errno));
    return d;
}

static void stop_all(srv_state *s, struct MHD_Daemon *d) {
    if (d) {
        MHD_socket ls = MHD_quiesce_daemon(d); /* no new connections from here on */
        if (ls != MHD_INVALID_SOCKET) close(ls);
    }
    if (s->models) srv_models_drain(s->models, s->cfg->shutdown_grace_s * 1e3);
    wait_answers(s, 5000); /* the last events of finished jobs still go out */
    /* lab runs end with a 503 event */
    if (s->models) srv_models_stop_labs(s->models);
    if (d) MHD_stop_daemon(d);
    srv_models_free(s->models);
    srv_deadlines_stop(s->deadlines);
    srv_metrics_free(s->metrics);
    srv_responses_free(s->responses);
}

/* The signals that stop the server. */
static sigset_t stop_signals(void) {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    return sigs;
}

void srv_block_signals(void) {
    sigset_t sigs = stop_signals();
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Waits for one of sigs for at most seconds (a second signal cuts the
 * drain delay short). */
static void wait_signal(const sigset_t *sigs, double seconds) {
    double deadline = nu_time_ms() + seconds * 1e3;
    for (;;) {
        double left_ms = deadline - nu_time_ms();
        if (left_ms <= 0) return;
        struct timespec ts = {.tv_sec = (time_t)(left_ms / 1e3),
                              .tv_nsec = (long)(fmod(left_ms, 1e3) * 1e6)};
        if (sigtimedwait(sigs, NULL, &ts) >= 0 || errno != EINTR) return;
    }
}

/* The start-up line: where it listens and what it serves (one write, so a
 * reader sees it whole). */
static void print_start(srv_state *s, struct MHD_Daemon *d) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned port = info ? info->port : 0;
    int32_t n = srv_models_count(s->models);
    srv_model *m = srv_models_at(s->models, 0);
    char line[2048];
    int k;
    if (n == 1) {
        k = snprintf(line, sizeof line,
                     "nucleus: listening on http://%s:%u (model %s, %d slots of %d tokens, chat "
                     "template %s)",
                     s->cfg->host, port, m->id, s->cfg->parallel, m->ctx_per_slot, m->chat.name);
    } else {
        k = snprintf(line, sizeof line,
                     "nucleus: listening on http://%s:%u (%d models, each loaded on first use: ",
                     s->cfg->host, port, n);
        for (int32_t i = 0; i < n && k > 0 && (size_t)k < sizeof line; i++)
            k += snprintf(line + k, sizeof line - (size_t)k, "%s%s", i ? ", " : "",
                          srv_models_at(s->models, i)->id);
        if (k > 0 && (size_t)k < sizeof line) snprintf(line + k, sizeof line - (size_t)k, ")");
    }
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

int srv_run(const srv_config *cfg) {
    srv_block_signals(); /* taken by sigwait below; threads started from here inherit the mask */
    sigset_t sigs = stop_signals();
    srv_state s = {.cfg = cfg,
                   .created = (long long)time(NULL),
                   .answers_mu = PTHREAD_MUTEX_INITIALIZER,
                   .answers_done = PTHREAD_COND_INITIALIZER};
    char msg[800] = "";
    struct MHD_Daemon *d = NULL;
    if (!(s.metrics = srv_metrics_new()) || !(s.responses = srv_responses_new(cfg->max_responses)))
        snprintf(msg, sizeof msg, "out of memory");
    else if (srv_models_new(cfg, s.metrics, &s.models, msg, sizeof msg) &&
             (s.deadlines = srv_deadlines_start(cfg->timeout_s, cfg->quiet, msg, sizeof msg)))
        d = start_http(&s, msg, sizeof msg);
    if (!d) {
        fprintf(stderr, "nucleus: %s\n", msg);
        stop_all(&s, d);
        return 1;
    }
    print_start(&s, d);
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {
    }
    atomic_store(&s.draining, true);
    if (cfg->drain_delay_s > 0) {
        if (!cfg->quiet)
            fprintf(stderr, "nucleus: %s: not ready; serving for %g s more before shutting down\n",
                    strsignal(sig), cfg->drain_delay_s);
        wait_signal(&sigs, cfg->drain_delay_s);
    }
    if (!cfg->quiet) fprintf(stderr, "nucleus: %s: shutting down\n", strsignal(sig));
    stop_all(&s, d);
    return 0;
}
