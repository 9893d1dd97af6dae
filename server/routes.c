/* routes.c - the endpoints: chat and text completions (through the engine),
 * models, health, metrics, tokenize, detokenize and watermark detection. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "http.h"
#include "openai_resp.h"
#include "sse.h"
#include "web.h"
#include "text_check.h"

/* ---- generation ---------------------------------------------------------- */

/* The model field, when given, must name the loaded model. */
static bool check_request(const srv_state *s, const srv_request *r, srv_error *err) {
    if (r->model && strcmp(r->model, s->model_id))
        return srv_fail(err, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%.200s' does not exist (this server has '%s')", r->model,
                        s->model_id);
    return true;
}

/* Compiles the request's constraint (response_format, grammar, regex or
 * choice) into a grammar over the model's vocabulary; a bad schema,
 * grammar or pattern is a 400 naming the field. */
static bool compile_constraint(const srv_state *s, srv_job *job, srv_error *err) {
    const srv_request *r = &job->req;
    nu_json_options opt = nu_json_default_options();
    nu_error e;
    nu_status st = NU_OK;
    const char *param = "grammar";
    job->req.tools.format = s->chat.tool_format; /* the call syntax answers are parsed in */
    if (r->format == SRV_FORMAT_JSON_OBJECT) {
        param = "response_format";
        st = nu_grammar_json_object(s->model, &opt, &job->grammar, &e);
    } else if (r->format == SRV_FORMAT_JSON_SCHEMA) {
        param = "response_format";
        st = nu_grammar_from_json_schema(s->model, r->json_schema, &opt, &job->grammar, &e);
    } else if (r->grammar) {
        st = nu_grammar_from_gbnf(s->model, r->grammar, NULL, &job->grammar, &e);
    } else if (r->regex) {
        param = "regex";
        st = nu_grammar_from_regex(s->model, r->regex, &job->grammar, &e);
    } else if (r->n_choices) {
        param = "choice";
        st = nu_grammar_from_choices(s->model, (const char *const *)r->choices,
                                     (size_t)r->n_choices, &job->grammar, &e);
    } else if (srv_tools_active(&r->tools)) {
        /* calls in the template's syntax (tools.h); their arguments stream
         * as made only when no stop string can cut a call short */
        if (!srv_tools_grammar(s->model, &r->tools, s->chat.tool_format, &job->grammar, err))
            return false;
        job->req.tools.constrained = job->grammar && r->gen.n_stop == 0;
    }
    if (st == NU_ERR_NOMEM) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != NU_OK)
        return srv_fail(err, 400, "invalid_request_error", NULL, param, "%s", e.message);
    job->gen.grammar = job->grammar;
    return true;
}

/* Tokenizes text into a malloc'd array; NULL with err filled on failure. */
static int32_t *tokenize(const nu_model *m, const char *text, unsigned flags, int32_t *n_out,
                         srv_error *err) {
    size_t len = strlen(text), n = 0, cap = len + 8;
    int32_t *toks = malloc(cap * sizeof *toks);
    nu_error e;
    nu_status st = toks ? nu_tokenize(m, text, len, flags, toks, cap, &n, &e) : NU_ERR_NOMEM;
    if (st == NU_ERR_BUFFER_SMALL) {
        int32_t *bigger = realloc(toks, (n + 1) * sizeof *toks);
        if (bigger) toks = bigger;
        st = bigger ? nu_tokenize(m, text, len, flags, toks, n + 1, &n, &e) : NU_ERR_NOMEM;
    }
    if (st != NU_OK) {
        free(toks);
        if (st == NU_ERR_NOMEM)
            srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        else
            srv_fail(err, 400, "invalid_request_error", NULL, "prompt", "%s", e.message);
        return NULL;
    }
    *n_out = (int32_t)n;
    return toks;
}

/* Prompt p's text: the rendered chat (with the template variables vars),
 * or the completions prompt (NULL for token ids). *flags gets the
 * tokenizer flags that go with it. */
static char *prompt_text(const srv_state *s, const srv_request *r, int32_t p, const char *vars,
                         unsigned *flags, srv_error *err) {
    *flags = NU_TOKENIZE_ADD_BOS;
    if (r->kind == SRV_CHAT) {
        char *text = srv_chat_render(&s->chat, r->messages, r->n_messages, &r->tools, vars, err);
        const char *bos = s->chat.bos_text;
        *flags |= NU_TOKENIZE_PARSE_SPECIAL;
        if (text && bos && bos[0] && !strncmp(text, bos, strlen(bos)))
            *flags = NU_TOKENIZE_PARSE_SPECIAL;
        return text;
    }
    if (r->gen.parse_special) *flags |= NU_TOKENIZE_PARSE_SPECIAL;
    if (!r->prompts[p].text) return NULL;
    char *text = strdup(r->prompts[p].text);
    if (!text) srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    return text;
}

/* How a chat answer's thinking is split off, and its budget, now that the
 * prompt is known. */
static bool prepare_thinking(const srv_state *s, srv_job *job, const char *prompt, srv_error *err) {
    const srv_think *t = &s->chat.think;
    srv_reasoning *q = &job->req.reasoning;
    if (!t->thinks) return true;
    q->split.on = true;
    q->split.starts_inside = srv_think_prompt_inside(t, prompt);
    snprintf(q->split.open, sizeof q->split.open, "%s", t->open);
    snprintf(q->split.close, sizeof q->split.close, "%s", t->close);
    if (q->max_tokens < 0) return true;
    if (!srv_think_budget(t, s->model, q->max_tokens, &job->gen.think, job->think_open,
                          job->think_close, job->think_force, err))
        return false;
    job->gen.think.start_inside = q->split.starts_inside;
    return true;
}

/* Tokens of prompt p, its length checked, and how many tokens it may get. */
static bool prepare_prompt(const srv_state *s, srv_job *job, int32_t p, const char *vars,
                           srv_error *err) {
    srv_request *r = &job->req;
    unsigned flags;
    char *text = prompt_text(s, r, p, vars, &flags, err);
    if (!text && (r->kind == SRV_CHAT || r->prompts[p].text)) return false;
    if (r->kind == SRV_CHAT && !prepare_thinking(s, job, text, err)) {
        free(text);
        return false;
    }
    int32_t n;
    if (text) {
        job->prompt_tokens[p] = tokenize(s->model, text, flags, &n, err);
    } else {
        n = r->prompts[p].n_tokens;
        job->prompt_tokens[p] = malloc((size_t)n * sizeof(int32_t));
        if (job->prompt_tokens[p])
            memcpy(job->prompt_tokens[p], r->prompts[p].tokens, (size_t)n * sizeof(int32_t));
        else
            srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (r->beam && text) {
        r->beam_params.add_bos = (flags & NU_TOKENIZE_ADD_BOS) != 0;
        r->beam_params.parse_special = (flags & NU_TOKENIZE_PARSE_SPECIAL) != 0;
        job->beam_texts[p] = text;
    } else {
        free(text);
    }
    if (!job->prompt_tokens[p]) return false;
    job->n_prompt_tokens[p] = n;
    if (n > s->max_prompt_tokens)
        return srv_fail(err, 413, "invalid_request_error", "context_length_exceeded",
                        r->kind == SRV_CHAT ? "messages" : "prompt",
                        "the prompt has %d tokens; this server takes at most %d", n,
                        s->max_prompt_tokens);
    int32_t room = s->ctx_per_slot - n, want = r->gen.n_predict;
    if (want < 0) want = r->kind == SRV_COMPLETION ? 16 : s->limits.max_tokens;
    job->n_predict[p] = want < room ? want : room;
    if (r->beam && job->n_predict[p] < 1)
        return srv_fail(err, 400, "invalid_request_error", NULL, "max_tokens",
                        "beam search needs max_tokens >= 1 and room in the context");
    return true;
}

/* Stop strings and tokens: the request's, plus the chat format's end of turn. */
static void set_stops(const srv_state *s, srv_job *job) {
    srv_request *r = &job->req;
    int32_t n = 0;
    for (int32_t i = 0; i < r->gen.n_stop; i++) job->stop_all[n++] = r->stop[i];
    if (r->kind == SRV_CHAT && s->chat.stop_string) job->stop_all[n++] = s->chat.stop_string;
    job->gen.stop = job->stop_all;
    job->gen.n_stop = n;
    n = 0;
    for (int32_t i = 0; r->kind == SRV_CHAT && i < s->chat.n_stop_tokens; i++)
        job->stop_tokens_all[n++] = s->chat.stop_tokens[i];
    job->gen.stop_tokens = job->stop_tokens_all;
    job->gen.n_stop_tokens = n;
}

static uint64_t random_seed(void) {
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        seed = (uint64_t)(nu_time_ms() * 1e3);
    return seed;
}

/* Everything the engine needs: prompts tokenized, limits applied. */
static bool build_job(const srv_state *s, srv_job *job, srv_error *err) {
    srv_request *r = &job->req;
    int32_t n_prompts = r->kind == SRV_CHAT ? 1 : r->n_prompts;
    int32_t per = r->beam ? r->beam_params.n_return : r->best_of;
    if (!srv_job_prepare(job, n_prompts, per) ||
        (r->beam && !(job->beam_texts = calloc((size_t)n_prompts, sizeof(char *)))))
        return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    job->gen = r->gen;
    if (!r->seed_given) job->gen.sampling.seed = random_seed();
    set_stops(s, job);
    if (!compile_constraint(s, job, err)) return false;
    char *vars = NULL;
    if (r->kind == SRV_CHAT && !srv_think_template_vars(&s->chat.think, r, &vars, err))
        return false;
    bool ok = true;
    for (int32_t p = 0; ok && p < n_prompts; p++) ok = prepare_prompt(s, job, p, vars, err);
    cJSON_free(vars);
    if (!ok) return false;
    job->slots = r->beam ? 2 * r->beam_params.width : n_prompts * per;
    return true;
}

/* Non-streaming: waits for the job (or for the client to leave) and answers. */
static enum MHD_Result answer_when_done(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                        srv_job *job, const srv_resp_ctx *rc) {
    int fd = srv_client_fd(c);
    for (;;) {
        pthread_mutex_lock(&job->mu);
        bool done = job->done;
        pthread_mutex_unlock(&job->mu);
        if (done) break;
        if (!srv_job_wait(job, fd)) {
            srv_engine_cancel(s->engine, job);
            srv_job_release(job);
            cs->status = 499; /* client closed the request */
            return MHD_NO;
        }
    }
    int64_t prompt;
    srv_job_usage(job, &prompt, &cs->completion_tokens);
    enum MHD_Result ret;
    if (job->failed) {
        srv_error err = {.status = job->fail_status,
                         .type =
                             job->fail_status >= 500 ? "server_error" : "invalid_request_error"};
        snprintf(err.message, sizeof err.message, "%s", job->fail_message);
        ret = srv_answer_error(c, cs, &err);
    } else {
        ret = srv_answer(c, cs, 200, srv_response_json(rc, job), NULL);
    }
    srv_job_release(job);
    return ret;
}

/* Streaming: the body comes from the job as it runs. */
static enum MHD_Result answer_stream(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                     srv_job *job, const srv_resp_ctx *rc) {
    srv_stream *st = srv_stream_new(s->engine, job, rc, srv_client_fd(c), &cs->completion_tokens);
    struct MHD_Response *resp =
        st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, srv_stream_read, st,
                                               srv_stream_free)
           : NULL;
    if (!resp) {
        if (st)
            srv_stream_free(st);
        else
            srv_engine_cancel(s->engine, job), srv_job_release(job);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    cs->status = 200;
    cs->answered = true;
    return ret;
}

static enum MHD_Result handle_generate(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                       srv_kind kind) {
    srv_request req;
    srv_error err;
    if (!srv_parse_request(cs->body, cs->len, kind, &s->limits, &s->defaults, &req, &err))
        return srv_answer_error(c, cs, &err);
    if (!check_request(s, &req, &err)) {
        srv_request_free(&req);
        return srv_answer_error(c, cs, &err);
    }
    srv_job *job = srv_job_new(&req);
    if (!job) {
        srv_request_free(&req);
        srv_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
        return srv_answer_error(c, cs, &err);
    }
    if (!build_job(s, job, &err) || !srv_engine_submit(s->engine, job, &err)) {
        srv_job_release(job);
        return srv_answer_error(c, cs, &err);
    }
    srv_answer_begin(s, cs);
    for (int32_t p = 0; p < job->n_prompts; p++) cs->prompt_tokens += job->n_prompt_tokens[p];
    srv_resp_ctx rc;
    srv_resp_ctx_init(&rc, s->model, s->model_id, kind);
    return job->req.stream ? answer_stream(s, c, cs, job, &rc)
                           : answer_when_done(s, c, cs, job, &rc);
}

/* ---- tokenize / detokenize ----------------------------------------------- */

/* Parses a small JSON body whose members are all in `allowed`. */
static cJSON *parse_body(const srv_conn *cs, const char *const *allowed, srv_error *err) {
    char msg[160];
    if (!json_body_check(cs->body, cs->len, msg, sizeof msg))
        return srv_fail(err, 400, "invalid_request_error", NULL, NULL, "%s", msg), NULL;
    cJSON *root = cs->len ? cJSON_ParseWithLength(cs->body, cs->len) : NULL;
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return srv_fail(err, 400, "invalid_request_error", NULL, NULL,
                        "the request body must be a JSON object"),
               NULL;
    }
    for (const cJSON *v = root->child; v; v = v->next) {
        bool known = false;
        for (const char *const *a = allowed; *a && !known; a++) known = !strcmp(*a, v->string);
        if (!known) {
            srv_fail(err, 400, "invalid_request_error", NULL, v->string,
                     "Unrecognized request argument supplied: %.60s", v->string);
            cJSON_Delete(root);
            return NULL;
        }
    }
    return root;
}

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
        char *clean = utf8_sanitize(buf, len < sizeof buf ? len : sizeof buf);
        cJSON_AddNumberToObject(o, "id", toks[i]);
        cJSON_AddStringToObject(o, "piece", clean ? clean : "");
        free(clean);
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddItemToObject(root, "tokens", arr);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static enum MHD_Result handle_tokenize(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    static const char *const allowed[] = {"content",     "add_special", "parse_special",
                                          "with_pieces", "model",       NULL};
    srv_error err;
    cJSON *root = parse_body(cs, allowed, &err);
    if (!root) return srv_answer_error(c, cs, &err);
    bool add = false, special = true, pieces = false;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    int32_t n = 0, *toks = NULL;
    if (!cJSON_IsString(content))
        srv_fail(&err, 400, "invalid_request_error", NULL, "content", "'content' must be a string");
    else if (opt_bool(root, "add_special", &add, &err) &&
             opt_bool(root, "parse_special", &special, &err) &&
             opt_bool(root, "with_pieces", &pieces, &err))
        toks = tokenize(s->model, content->valuestring,
                        (add ? NU_TOKENIZE_ADD_BOS : 0) | (special ? NU_TOKENIZE_PARSE_SPECIAL : 0),
                        &n, &err);
    cJSON_Delete(root);
    if (!toks) return srv_answer_error(c, cs, &err);
    char *body = tokens_json(s->model, toks, n, pieces);
    free(toks);
    return srv_answer(c, cs, 200, body, NULL);
}

/* The text of token ids, as generation would produce it. */
static char *detokenize(const nu_model *m, const cJSON *arr, srv_error *err) {
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
    char *clean = utf8_sanitize(text, len);
    free(text);
    if (!clean) srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    return clean;
}

static enum MHD_Result handle_detokenize(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    static const char *const allowed[] = {"tokens", "model", NULL};
    srv_error err;
    cJSON *root = parse_body(cs, allowed, &err);
    if (!root) return srv_answer_error(c, cs, &err);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    char *text = NULL;
    if (!cJSON_IsArray(arr))
        srv_fail(&err, 400, "invalid_request_error", NULL, "tokens", "'tokens' must be an array");
    else
        text = detokenize(s->model, arr, &err);
    cJSON_Delete(root);
    if (!text) return srv_answer_error(c, cs, &err);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "content", text);
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

/* "tokens": token ids of the model's vocabulary, into a malloc'd array. */
static int32_t *token_ids(const nu_model *m, const cJSON *arr, int32_t *n, srv_error *err) {
    int32_t n_vocab = nu_model_n_vocab(m);
    if (!cJSON_IsArray(arr))
        return srv_fail(err, 400, "invalid_request_error", NULL, "tokens",
                        "'tokens' must be an array of token ids"),
               NULL;
    int32_t *ids = malloc(((size_t)cJSON_GetArraySize(arr) + 1) * sizeof *ids);
    if (!ids) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    *n = 0;
    for (const cJSON *t = arr->child; t; t = t->next) {
        double x = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (!(x >= 0 && x < n_vocab) || floor(x) != x) {
            free(ids);
            return srv_fail(err, 400, "invalid_request_error", NULL, "tokens",
                            "'tokens' must hold token ids (0..%d)", n_vocab - 1),
                   NULL;
        }
        ids[(*n)++] = (int32_t)x;
    }
    return ids;
}

/* The tokens to score: "text" as generation would have produced it (no
 * BOS, special-token text read as text), or "tokens"; exactly one. */
static int32_t *detect_tokens(const srv_state *s, const cJSON *root, int32_t *n, srv_error *err) {
    const cJSON *text = member(root, "text"), *ids = member(root, "tokens");
    if (!text == !ids)
        return srv_fail(err, 400, "invalid_request_error", NULL, "text",
                        "give exactly one of 'text' (a string) and 'tokens' (token ids)"),
               NULL;
    if (ids) return token_ids(s->model, ids, n, err);
    if (!cJSON_IsString(text))
        return srv_fail(err, 400, "invalid_request_error", NULL, "text", "'text' must be a string"),
               NULL;
    return tokenize(s->model, text->valuestring, 0, n, err);
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
static enum MHD_Result handle_watermark_detect(srv_state *s, struct MHD_Connection *c,
                                               srv_conn *cs) {
    static const char *const allowed[] = {"text",    "tokens",      "key",   "gamma",
                                          "context", "z_threshold", "model", NULL};
    srv_error err;
    cJSON *root = parse_body(cs, allowed, &err);
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
             (toks = detect_tokens(s, root, &n, &err)) != NULL) {
        if (nu_watermark_detect(s->model, &p, toks, (size_t)n, z_threshold, NULL, &r, &e) != NU_OK)
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

static cJSON *model_json(const srv_state *s) {
    cJSON *o = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", s->model_id);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)s->created);
    cJSON_AddStringToObject(o, "owned_by", "nucleus");
    cJSON_AddStringToObject(meta, "architecture", nu_model_arch(s->model));
    cJSON_AddNumberToObject(meta, "n_params", (double)nu_model_n_params(s->model));
    cJSON_AddNumberToObject(meta, "n_vocab", nu_model_n_vocab(s->model));
    cJSON_AddNumberToObject(meta, "n_ctx_train", nu_model_n_ctx_train(s->model));
    cJSON_AddNumberToObject(meta, "n_ctx_slot", s->ctx_per_slot);
    cJSON_AddNumberToObject(meta, "parallel", s->cfg->parallel);
    cJSON_AddStringToObject(meta, "chat_template", s->chat.name);
    cJSON_AddItemToObject(o, "meta", meta);
    return o;
}

static enum MHD_Result handle_models(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                     const char *url) {
    cJSON *root;
    if (cs->route->id == ROUTE_MODEL) {
        const char *id = url + strlen(cs->route->path);
        if (strcmp(id, s->model_id)) {
            srv_error err;
            srv_fail(&err, 404, "invalid_request_error", "model_not_found", "model",
                     "The model '%.200s' does not exist", id);
            return srv_answer_error(c, cs, &err);
        }
        root = model_json(s);
    } else {
        root = cJSON_CreateObject();
        cJSON *data = cJSON_CreateArray();
        cJSON_AddStringToObject(root, "object", "list");
        cJSON_AddItemToArray(data, model_json(s));
        cJSON_AddItemToObject(root, "data", data);
    }
    char *body = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return srv_answer(c, cs, 200, body, NULL);
}

/* Ready: not shutting down, and a request sent now would be taken (queued
 * if need be) rather than refused with 503 for a full queue. Liveness is
 * GET /health, which answers 200 as long as the server answers at all. */
static const char *unready_reason(srv_state *s, const srv_engine_stats *st) {
    if (atomic_load(&s->draining)) return "draining";
    if (!srv_engine_stats_accepting(st)) return "queue_full";
    return NULL;
}

static enum MHD_Result handle_ready(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    srv_engine_stats st;
    srv_engine_get_stats(s->engine, &st);
    const char *why = unready_reason(s, &st);
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
    srv_engine_get_stats(s->engine, &st);
    return srv_answer(c, cs, 200, srv_metrics_render(s->metrics, &st, !unready_reason(s, &st)),
                      "text/plain; version=0.0.4; charset=utf-8");
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
    case ROUTE_TOKENIZE: return handle_tokenize(s, c, cs);
    case ROUTE_DETOKENIZE: return handle_detokenize(s, c, cs);
    case ROUTE_WATERMARK_DETECT: return handle_watermark_detect(s, c, cs);
    case ROUTE_INSPECT: return srv_lab_handle(s, c, cs, LAB_INSPECT);
    case ROUTE_INSPECT_BEAM: return srv_lab_handle(s, c, cs, LAB_BEAM);
    case ROUTE_INSPECT_SPECULATIVE: return srv_lab_handle(s, c, cs, LAB_SPECULATIVE);
    case ROUTE_INSPECT_SELF_CONSISTENCY: return srv_lab_handle(s, c, cs, LAB_SELF_CONSISTENCY);
    case ROUTE_WEB: return srv_web_answer(c, cs, url);
    }
    return MHD_NO;
}
