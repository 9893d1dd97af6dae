/* routes.c - the endpoints: chat and text completions (through the engine),
 * models, health, metrics, tokenize, detokenize and watermark detection. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "anthropic.h"
#include "embeddings.h"
#include "http.h"
#include "ollama.h"
#include "openai_resp.h"
#include "request.h"
#include "responses.h"
#include "sse.h"
#include "web.h"
#include "text_check.h"

/* ---- generation ---------------------------------------------------------- */

/* The whole answer of a finished job (srv_answer_job). */
static char *response_body(const srv_job *job, const void *rc) {
    return srv_response_json(rc, job);
}

/* Streaming: the body comes from the job as it runs, once the scheduler
 * has taken it. */
static enum MHD_Result answer_stream(struct MHD_Connection *c, srv_conn *cs, srv_job *job,
                                     const srv_resp_ctx *rc) {
    enum MHD_Result ret;
    if (!srv_await_start(job, c, cs, &ret)) return ret;
    srv_engine *engine = job->model->engine;
    srv_stream *st = srv_stream_new(engine, job, rc, srv_client_fd(c), &cs->completion_tokens);
    if (!st) {
        srv_engine_cancel(engine, job);
        srv_job_release(job);
        return MHD_NO;
    }
    return srv_answer_stream(c, cs, "text/event-stream", srv_stream_read, st, srv_stream_free);
}

static enum MHD_Result handle_generate(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                       srv_kind kind) {
    srv_request req;
    srv_error err;
    srv_model *m = srv_acquire_body_model(s, cs, &err);
    if (!m) return srv_answer_error(c, cs, &err);
    if (!srv_parse_request(cs->body, cs->len, kind, &m->limits, &m->defaults, &req, &err)) {
        srv_model_release(m);
        return srv_answer_error(c, cs, &err);
    }
    srv_resp_ctx rc;
    srv_resp_ctx_init(&rc, m->model, m->id, kind);
    srv_job *job = srv_submit(s, m, &req, cs, &err);
    if (!job) return srv_answer_error(c, cs, &err);
    return job->req.stream ? answer_stream(c, cs, job, &rc)
                           : srv_answer_job(c, cs, job, response_body, &rc);
}

/* ---- tokenize / detokenize ----------------------------------------------- */

/* An optional boolean member; false (err filled) when it has another type. */
static bool opt_bool(const cJSON *root, const char *name, bool *out, srv_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v))
        return srv_fail(err, 400, "invalid_request_error", NULL, name, "'%s' must be a boolean",
                        name);
    *out = cJSON_IsTrue(v);
    return true;
}

/* {"tokens": [ids]} or, with pieces, {"tokens": [{"id", "piece"}]}. */
static char *tokens_json(const nu_model *m, const int32_t *toks, int32_t n, bool pieces) {
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    char buf[512];
    for (int32_t i = 0; i < n; i++) {
        if (!pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(toks[i]));
            continue;
        }
        cJSON *o = cJSON_CreateObject();
        size_t len = nu_token_to_bytes(m, toks[i], true, buf, sizeof buf);
        cJSON *piece = srv_text_json(buf, len < sizeof buf ? len : sizeof buf);
        cJSON_AddNumberToObject(o, "id", toks[i]);
        cJSON_AddItemToObject(o, "piece", piece ? piece : cJSON_CreateNull());
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddItemToObject(root, "tokens", arr);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static enum MHD_Result handle_tokenize(srv_model *m, struct MHD_Connection *c, srv_conn *cs) {
    static const char *const allowed[] = {"content",     "add_special", "parse_special",
                                          "with_pieces", "model",       NULL};
    srv_error err;
    cJSON *root = srv_parse_body(cs, allowed, &err);
    if (!root) return srv_answer_error(c, cs, &err);
    bool add = false, special = true, pieces = false;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    int32_t n = 0, *toks = NULL;
    if (!cJSON_IsString(content))
        srv_fail(&err, 400, "invalid_request_error", NULL, "content", "'content' must be a string");
    else if (opt_bool(root, "add_special", &add, &err) &&
             opt_bool(root, "parse_special", &special, &err) &&
             opt_bool(root, "with_pieces", &pieces, &err))
        toks = srv_tokenize(m->model, content->valuestring,
                            (add ? NU_TOKENIZE_ADD_BOS : 0) |
                                (special ? NU_TOKENIZE_PARSE_SPECIAL : 0),
                            "content", &n, &err);
    cJSON_Delete(root);
    if (!toks) return srv_answer_error(c, cs, &err);
    char *body = tokens_json(m->model, toks, n, pieces);
    free(toks);
    return srv_answer(c, cs, 200, body, NULL);
}

/* The text of token ids, as generation would produce it (*n_out bytes,
 * which may include NUL). */
static char *detokenize(const nu_model *m, const cJSON *arr, size_t *n_out, srv_error *err) {
    int32_t n_vocab = nu_model_n_vocab(m);
    size_t cap = 64 + (size_t)cJSON_GetArraySize(arr) * 64, len = 0;
    char *text = malloc(cap), piece[1024];
    if (!text) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    nu_detokenizer d;
    nu_detokenizer_init(&d, m, false, true);
    for (const cJSON *t = arr->child; t; t = t->next) {
        double x = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (!(x >= 0 && x < n_vocab) || floor(x) != x) {
            free(text);
            return srv_fail(err, 400, "invalid_request_error", NULL, "tokens",
                            "'tokens' must hold token ids (0..%d)", n_vocab - 1),
                   NULL;
        }
        size_t k = nu_detokenizer_push(&d, (int32_t)t->valuedouble, piece, sizeof piece);
        if (k > sizeof piece) k = sizeof piece;
        if (len + k + 32 > cap) {
            char *bigger = realloc(text, cap = 2 * cap + k + 32);
            if (!bigger)
                return free(text), srv_fail(err, 500, "server_error", NULL, NULL, "out of memory"),
                       NULL;
            text = bigger;
        }
        memcpy(text + len, piece, k);
        len += k;
    }
    len += nu_detokenizer_flush(&d, text + len, 16);
    *n_out = len;
    return text;
}

static enum MHD_Result handle_detokenize(srv_model *m, struct MHD_Connection *c, srv_conn *cs) {
    static const char *const allowed[] = {"tokens", "model", NULL};
    srv_error err;
    cJSON *root = srv_parse_body(cs, allowed, &err);
    if (!root) return srv_answer_error(c, cs, &err);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    char *text = NULL;
    size_t len = 0;
    if (!cJSON_IsArray(arr))
        srv_fail(&err, 400, "invalid_request_error", NULL, "tokens", "'tokens' must be an array");
    else
        text = detokenize(m->model, arr, &len, &err);
    cJSON_Delete(root);
    if (!text) return srv_answer_error(c, cs, &err);
    cJSON *out = cJSON_CreateObject(), *content = srv_text_json(text, len);
    cJSON_AddItemToObject(out, "content", content ? content : cJSON_CreateNull());
    free(text);
    char *body = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    return srv_answer(c, cs, 200, body, NULL);
}

/* ---- watermark detection ------------------------------------------------- */

/* A member of root, NULL when absent or null. */
static const cJSON *member(const cJSON *root, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The tokens to score: "text" as generation would have produced it (no
 * BOS, special-token text read as text), or "tokens"; exactly one. */
static int32_t *detect_tokens(const nu_model *m, const cJSON *root, int32_t *n, srv_error *err) {
    const cJSON *text = member(root, "text"), *ids = member(root, "tokens");
    if (!text == !ids)
        return srv_fail(err, 400, "invalid_request_error", NULL, "text",
                        "give exactly one of 'text' (a string) and 'tokens' (token ids)"),
               NULL;
    if (ids) return srv_token_ids(m, ids, "tokens", "'tokens'", n, err);
    if (!cJSON_IsString(text))
        return srv_fail(err, 400, "invalid_request_error", NULL, "text", "'text' must be a string"),
               NULL;
    return srv_tokenize(m, text->valuestring, 0, "text", n, err);
}

static char *detection_json(const nu_watermark_result *r, const nu_watermark_params *p,
                            double z_threshold) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "watermark.detection");
    cJSON_AddNumberToObject(o, "tokens", (double)r->n_tokens);
    cJSON_AddNumberToObject(o, "scored", (double)r->scored);
    cJSON_AddNumberToObject(o, "repeated", (double)r->repeated);
    cJSON_AddNumberToObject(o, "green", (double)r->green);
    cJSON_AddNumberToObject(o, "green_fraction", r->green_fraction);
    cJSON_AddNumberToObject(o, "z", r->z);
    cJSON_AddNumberToObject(o, "p_value", r->p_value);
    cJSON_AddBoolToObject(o, "detected", r->detected);
    cJSON_AddNumberToObject(o, "z_threshold", z_threshold);
    cJSON_AddNumberToObject(o, "gamma", p->gamma);
    cJSON_AddNumberToObject(o, "context", p->context);
    cJSON_AddStringToObject(o, "scoring", "each distinct (context, token) n-gram once");
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return body;
}

/* {"text" | "tokens", "key", "gamma", "context", "z_threshold"}: the
 * statistics of nu_watermark_detect. */
static enum MHD_Result handle_watermark_detect(srv_model *m, struct MHD_Connection *c,
                                               srv_conn *cs) {
    static const char *const allowed[] = {"text",    "tokens",      "key",   "gamma",
                                          "context", "z_threshold", "model", NULL};
    srv_error err;
    cJSON *root = srv_parse_body(cs, allowed, &err);
    if (!root) return srv_answer_error(c, cs, &err);
    nu_watermark_params p = nu_watermark_default_params();
    nu_watermark_result r;
    char *key = NULL, *body = NULL;
    int32_t n = 0, *toks = NULL;
    const cJSON *z = member(root, "z_threshold");
    double z_threshold = z && cJSON_IsNumber(z) ? z->valuedouble : 4.0;
    nu_error e;
    if (z && !(cJSON_IsNumber(z) && isfinite(z->valuedouble)))
        srv_fail(&err, 400, "invalid_request_error", NULL, "z_threshold",
                 "'z_threshold' must be a number");
    else if (srv_parse_watermark(root, "", &p, &key, &err) &&
             (toks = detect_tokens(m->model, root, &n, &err)) != NULL) {
        if (nu_watermark_detect(m->model, &p, toks, (size_t)n, z_threshold, NULL, &r, &e) != NU_OK)
            srv_fail(&err, 400, "invalid_request_error", NULL, NULL, "%s", e.message);
        else if (!(body = detection_json(&r, &p, z_threshold)))
            srv_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
    }
    cJSON_Delete(root);
    free(toks);
    free(key);
    return body ? srv_answer(c, cs, 200, body, NULL) : srv_answer_error(c, cs, &err);
}

/* ---- models, health, metrics --------------------------------------------- */

/* A model of /v1/models: OpenAI's members, its state and what nucleus knows. */
static cJSON *model_json(const srv_state *s, srv_model *m) {
    srv_model_info info;
    srv_model_get_info(m, &info);
    cJSON *o = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", m->id);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)s->created);
    cJSON_AddStringToObject(o, "owned_by", "nucleus");
    cJSON_AddStringToObject(o, "state", srv_model_state_name(info.state));
    cJSON_AddStringToObject(meta, "architecture", m->arch);
    cJSON_AddNumberToObject(meta, "n_params", (double)m->n_params);
    cJSON_AddStringToObject(meta, "file_type", m->file_type);
    cJSON_AddNumberToObject(meta, "file_bytes", (double)m->file_bytes);
    cJSON_AddNumberToObject(meta, "n_ctx_train", m->n_ctx_train);
    cJSON_AddNumberToObject(meta, "parallel", s->cfg->parallel);
    if (info.measured) cJSON_AddNumberToObject(meta, "memory_bytes", (double)info.bytes);
    cJSON_AddNumberToObject(meta, "loads", info.loads);
    if (info.state == SRV_MODEL_LOADED) {
        cJSON_AddNumberToObject(meta, "n_vocab", info.n_vocab);
        cJSON_AddNumberToObject(meta, "n_ctx_slot", info.ctx_per_slot);
        cJSON_AddStringToObject(meta, "chat_template", info.chat_template);
        if (info.expires_in_ms >= 0)
            cJSON_AddNumberToObject(meta, "unload_in_s", info.expires_in_ms / 1e3);
    }
    cJSON_AddItemToObject(o, "meta", meta);
    return o;
}

static enum MHD_Result handle_models(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                     const char *url) {
    cJSON *root;
    if (cs->route->id == ROUTE_MODEL) {
        srv_error err;
        srv_model *m = srv_models_find(s->models, url + strlen(cs->route->path), &err);
        if (!m) return srv_answer_error(c, cs, &err);
        root = model_json(s, m);
    } else {
        root = cJSON_CreateObject();
        cJSON *data = cJSON_CreateArray();
        cJSON_AddStringToObject(root, "object", "list");
        for (int32_t i = 0; i < srv_models_count(s->models); i++)
            cJSON_AddItemToArray(data, model_json(s, srv_models_at(s->models, i)));
        cJSON_AddItemToObject(root, "data", data);
    }
    char *body = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return srv_answer(c, cs, 200, body, NULL);
}

/* Ready: not shutting down, and a request sent now would be taken (queued
 * if need be) rather than refused with 503 for a full queue. Liveness is
 * GET /health, which answers 200 as long as the server answers at all. */
static const char *unready_reason(srv_state *s, bool accepting) {
    if (atomic_load(&s->draining)) return "draining";
    if (!accepting) return "queue_full";
    return NULL;
}

static enum MHD_Result handle_ready(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    srv_engine_stats st;
    bool accepting;
    srv_models_stats(s->models, &st, &accepting);
    const char *why = unready_reason(s, accepting);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", why ? why : "ready");
    cJSON_AddNumberToObject(o, "queued", st.queued);
    cJSON_AddNumberToObject(o, "max_queue", st.max_queue);
    cJSON_AddNumberToObject(o, "slots_busy", st.slots_busy);
    cJSON_AddNumberToObject(o, "slots", st.slots);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_answer(c, cs, why ? 503 : 200, body, NULL);
}

static enum MHD_Result handle_metrics(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    srv_engine_stats st;
    bool accepting;
    srv_models_stats(s->models, &st, &accepting);
    return srv_answer(c, cs, 200,
                      srv_metrics_render(s->metrics, &st, !unready_reason(s, accepting)),
                      "text/plain; version=0.0.4; charset=utf-8");
}

/* Runs a handler with the model the body names held. */
static enum MHD_Result with_model(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                  enum MHD_Result (*handler)(srv_model *, struct MHD_Connection *,
                                                             srv_conn *)) {
    srv_error err;
    srv_model *m = srv_acquire_body_model(s, cs, &err);
    if (!m) return srv_answer_error(c, cs, &err);
    enum MHD_Result ret = handler(m, c, cs);
    srv_model_release(m);
    return ret;
}

enum MHD_Result srv_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs, const char *url) {
    switch (cs->route->id) {
    case ROUTE_CHAT: return handle_generate(s, c, cs, SRV_CHAT);
    case ROUTE_COMPLETIONS: return handle_generate(s, c, cs, SRV_COMPLETION);
    case ROUTE_MODELS:
    case ROUTE_MODEL: return handle_models(s, c, cs, url);
    case ROUTE_HEALTH: return srv_answer(c, cs, 200, strdup("{\"status\":\"ok\"}"), NULL);
    case ROUTE_READY: return handle_ready(s, c, cs);
    case ROUTE_METRICS: return handle_metrics(s, c, cs);
    case ROUTE_TOKENIZE: return with_model(s, c, cs, handle_tokenize);
    case ROUTE_DETOKENIZE: return with_model(s, c, cs, handle_detokenize);
    case ROUTE_WATERMARK_DETECT: return with_model(s, c, cs, handle_watermark_detect);
    case ROUTE_INSPECT: return srv_lab_handle(s, c, cs, LAB_INSPECT);
    case ROUTE_INSPECT_BEAM: return srv_lab_handle(s, c, cs, LAB_BEAM);
    case ROUTE_INSPECT_SPECULATIVE: return srv_lab_handle(s, c, cs, LAB_SPECULATIVE);
    case ROUTE_INSPECT_SELF_CONSISTENCY: return srv_lab_handle(s, c, cs, LAB_SELF_CONSISTENCY);
    case ROUTE_EMBEDDINGS: return srv_handle_embeddings(s, c, cs);
    case ROUTE_MESSAGES:
    case ROUTE_MESSAGES_COUNT: return srv_anthropic_handle(s, c, cs);
    case ROUTE_OLLAMA_CHAT:
    case ROUTE_OLLAMA_GENERATE:
    case ROUTE_OLLAMA_EMBED:
    case ROUTE_OLLAMA_EMBEDDINGS:
    case ROUTE_OLLAMA_TAGS:
    case ROUTE_OLLAMA_PS:
    case ROUTE_OLLAMA_SHOW:
    case ROUTE_OLLAMA_VERSION: return srv_ollama_handle(s, c, cs);
    case ROUTE_RESPONSES:
    case ROUTE_RESPONSE_GET:
    case ROUTE_RESPONSE_DELETE: return srv_responses_handle(s, c, cs, url);
    case ROUTE_WEB: return srv_web_answer(c, cs, url);
    }
    return MHD_NO;
}
