/* http.c - the HTTP side of `nucleus serve` on libmicrohttpd: routing,
 * API keys, request bodies within limits, answers, the log line of each
 * request, and the server's start and graceful shutdown.
 *
 * libmicrohttpd runs one thread per connection, so a connection may block
 * while it waits for its job (non-streaming) or for the next piece of text
 * (streaming, in the content reader) without holding up anyone else; a slow
 * or stuck client only ever holds its own thread, until the idle timeout. */
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

#include "http.h"
#include "openai_resp.h"
#include "web.h"

static const srv_route routes[] = {
    {"POST", "/v1/chat/completions", false, ROUTE_CHAT, "chat", true},
    {"POST", "/v1/completions", false, ROUTE_COMPLETIONS, "completions", true},
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
                    .max_body = 1 << 20,
                    .max_queue = 64,
                    .max_connections = 256,
                    .timeout_s = 60,
                    .shutdown_grace_s = 10};
    return c;
}

/* ---- answers ------------------------------------------------------------- */

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
    if (status == 405 && cs->route) MHD_add_response_header(resp, "Allow", cs->route->method);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    cs->status = status;
    cs->answered = true;
    return ret;
}

enum MHD_Result srv_answer_error(struct MHD_Connection *c, srv_conn *cs, const srv_error *err) {
    return srv_answer(c, cs, err->status, srv_error_json(err), NULL);
}

/* ---- routing and checks -------------------------------------------------- */

/* The route for url; *other_method is set when only the method is wrong. */
static const srv_route *find_route(const char *method, const char *url, bool *other_method) {
    *other_method = false;
    if (srv_web_find(url)) {
        *other_method = strcmp(method, "GET") && strcmp(method, "HEAD");
        return &web_route;
    }
    const srv_route *found = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const srv_route *r = &routes[i];
        bool match = r->prefix ? !strncmp(url, r->path, strlen(r->path)) && url[strlen(r->path)]
                               : !strcmp(url, r->path);
        if (!match) continue;
        if (!strcmp(method, r->method)) return r;
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

/* The first call for a request: route, key and declared size are checked
 * before any body is read, so refused uploads are never buffered. */
static enum MHD_Result on_headers(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                  const char *url, const char *method) {
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
    if (!strcmp(method, "GET")) return srv_handle(s, c, cs, url);
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
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        cs->t0 = nu_time_ms();
        copy_printable(cs->method, sizeof cs->method, method);
        copy_printable(cs->url, sizeof cs->url, url);
        return on_headers(s, c, cs, url, method);
    }
    if (cs->answered) {
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
    if (s->cfg->quiet) return;
    fputs("nucleus: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* ---- start and stop ------------------------------------------------------ */

/* Context sizes and request limits from the configuration. */
static bool plan(srv_state *s, nu_context_params *cp, char *msg, size_t cap) {
    const srv_config *cfg = s->cfg;
    int32_t train = nu_model_n_ctx_train(s->model);
    s->ctx_per_slot = cfg->ctx_per_slot > 0       ? cfg->ctx_per_slot
                      : train > 0 && train < 4096 ? train
                                                  : 4096;
    if (cfg->parallel < 1 || cfg->parallel > 64)
        return snprintf(msg, cap, "--parallel must be in 1..64"), false;
    if ((int64_t)s->ctx_per_slot * cfg->parallel > (1 << 24) || s->ctx_per_slot < 8)
        return snprintf(msg, cap, "--ctx %d x --parallel %d is out of range", s->ctx_per_slot,
                        cfg->parallel),
               false;
    s->max_prompt_tokens =
        cfg->max_prompt_tokens > 0 ? cfg->max_prompt_tokens : s->ctx_per_slot - 1;
    if (s->max_prompt_tokens >= s->ctx_per_slot)
        return snprintf(msg, cap, "--max-prompt-tokens must be below the slot context (%d)",
                        s->ctx_per_slot),
               false;
    int32_t n_seq = 2 * cfg->parallel < 8 ? 8 : 2 * cfg->parallel;
    if (n_seq > 64) n_seq = 64;
    *cp = nu_context_default_params();
    cp->n_ctx = s->ctx_per_slot * cfg->parallel;
    cp->n_seq_max = n_seq;
    cp->n_threads = cfg->n_threads;
    cp->n_batch = cfg->n_batch;
    cp->kv_type = cfg->kv_type;
    s->limits = (srv_limits){.n_vocab = nu_model_n_vocab(s->model),
                             .max_n = n_seq,
                             .max_tokens = cfg->max_tokens_limit > 0 ? cfg->max_tokens_limit
                                                                     : s->ctx_per_slot,
                             .max_prompts = 32,
                             .max_beam_width = n_seq / 2 < 32 ? n_seq / 2 : 32,
                             .max_draft = cfg->draft || cfg->spec.lookup ? cfg->spec.draft_max : 0};
    s->defaults.gen = nu_generate_default_params();
    s->defaults.beam = nu_beam_default_params();
    return true;
}

/* Context, metrics, chat template and engine. */
static bool start_engine(srv_state *s, char *msg, size_t cap) {
    nu_context_params cp;
    if (!plan(s, &cp, msg, cap)) return false;
    nu_error err;
    if (nu_context_new(s->model, &cp, &s->ctx, &err) != NU_OK)
        return snprintf(msg, cap, "%s", err.message), false;
    if (!(s->metrics = srv_metrics_new())) return snprintf(msg, cap, "out of memory"), false;
    if (!srv_chat_init(&s->chat, s->model, s->cfg->chat_template, msg, cap)) return false;
    s->lab_cfg = (srv_lab_config){.model = s->model,
                                  .draft = s->cfg->draft,
                                  .n_ctx = s->ctx_per_slot,
                                  .n_batch = s->cfg->n_batch,
                                  .n_threads = s->cfg->n_threads,
                                  .kv_type = s->cfg->kv_type,
                                  .max_queue = 16};
    return srv_lab_start(&s->lab_cfg, &s->lab, msg, cap) &&
           srv_engine_start(s->ctx, s->cfg->parallel, s->cfg->max_queue, s->cfg->step_delay_ms,
                            s->cfg->draft, &s->cfg->spec, s->metrics, &s->engine, msg, cap);
}

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
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_access, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)s->cfg->max_connections, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d)
        snprintf(msg, cap, "cannot listen on %s:%d (%s)", s->cfg->host, s->cfg->port,
                 strerror(errno));
    return d;
}

/* The model's id: the alias, else the file's name. */
static void set_model_id(srv_state *s) {
    const char *path = s->cfg->model_path ? s->cfg->model_path : "model";
    const char *slash = strrchr(path, '/');
    snprintf(s->model_id, sizeof s->model_id, "%s",
             s->cfg->alias ? s->cfg->alias
             : slash       ? slash + 1
                           : path);
}

static void stop_all(srv_state *s, struct MHD_Daemon *d) {
    if (d) {
        MHD_socket ls = MHD_quiesce_daemon(d); /* no new connections from here on */
        if (ls != MHD_INVALID_SOCKET) close(ls);
    }
    if (s->engine) srv_engine_drain(s->engine, s->cfg->shutdown_grace_s * 1e3);
    wait_answers(s, 5000); /* the last events of finished jobs still go out */
    /* lab runs end with a 503 event */
    if (s->lab) srv_lab_stop(s->lab);
    if (d) MHD_stop_daemon(d);
    srv_lab_free(s->lab);
    srv_engine_free(s->engine);
    srv_chat_free(&s->chat);
    srv_metrics_free(s->metrics);
    nu_context_free(s->ctx);
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

int srv_run(nu_model *model, const srv_config *cfg) {
    srv_block_signals(); /* taken by sigwait below; threads started from here inherit the mask */
    sigset_t sigs = stop_signals();
    srv_state s = {.cfg = cfg,
                   .model = model,
                   .created = (long long)time(NULL),
                   .answers_mu = PTHREAD_MUTEX_INITIALIZER,
                   .answers_done = PTHREAD_COND_INITIALIZER};
    set_model_id(&s);
    char msg[600] = "";
    struct MHD_Daemon *d = NULL;
    if (!start_engine(&s, msg, sizeof msg) || !(d = start_http(&s, msg, sizeof msg))) {
        fprintf(stderr, "nucleus: %s\n", msg);
        stop_all(&s, d);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr,
            "nucleus: listening on http://%s:%u (model %s, %d slots of %d tokens, chat "
            "template %s)\n",
            cfg->host, info ? info->port : 0, s.model_id, cfg->parallel, s.ctx_per_slot,
            s.chat.name);
    fflush(stderr);
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
