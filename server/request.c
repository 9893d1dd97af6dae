/* request.c - from a request body to a job on its model's engine (request.h). */
#include "request.h"

#include "openai_resp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "text_check.h"

/* ---- bodies and models ---------------------------------------------------- */

/* Parses a body as one JSON value; NULL with a 400 naming what is wrong. */
static cJSON *parse_json(const char *body, size_t len, srv_error *err) {
    char msg[160];
    if (!json_body_check(body, len, msg, sizeof msg))
        return srv_fail(err, 400, "invalid_request_error", NULL, NULL, "%s", msg), NULL;
    cJSON *root = len ? cJSON_ParseWithLength(body, len) : NULL;
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return srv_fail(err, 400, "invalid_request_error", NULL, NULL,
                        "the request body must be a JSON object"),
               NULL;
    }
    return root;
}

bool srv_body_model(const char *body, size_t len, char **model, srv_error *err) {
    *model = NULL;
    cJSON *root = parse_json(body, len, err);
    if (!root) return false;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "model");
    bool ok = true;
    if (cJSON_IsString(v)) {
        if (!(*model = strdup(v->valuestring)))
            ok = srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    } else if (v && !cJSON_IsNull(v)) {
        ok = srv_fail(err, 400, "invalid_request_error", NULL, "model", "'model' must be a string");
    }
    cJSON_Delete(root);
    return ok;
}

srv_model *srv_acquire_body_model(srv_state *s, const srv_conn *cs, srv_error *err) {
    char *name;
    if (!srv_body_model(cs->body, cs->len, &name, err)) return NULL;
    srv_model *m = srv_models_acquire(s->models, name, err);
    free(name);
    return m;
}

cJSON *srv_parse_body(const srv_conn *cs, const char *const *allowed, srv_error *err) {
    cJSON *root = parse_json(cs->body, cs->len, err);
    for (const cJSON *v = root ? root->child : NULL; v; v = v->next) {
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

int32_t *srv_tokenize(const nu_model *m, const char *text, unsigned flags, const char *param,
                      int32_t *n_out, srv_error *err) {
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
            srv_fail(err, 400, "invalid_request_error", NULL, param, "%s", e.message);
        return NULL;
    }
    *n_out = (int32_t)n;
    return toks;
}

int32_t *srv_token_ids(const nu_model *m, const cJSON *arr, const char *param, const char *where,
                       int32_t *n, srv_error *err) {
    int32_t n_vocab = nu_model_n_vocab(m);
    if (!cJSON_IsArray(arr))
        return srv_fail(err, 400, "invalid_request_error", NULL, param,
                        "%s must be an array of token ids", where),
               NULL;
    int32_t *ids = malloc(((size_t)cJSON_GetArraySize(arr) + 1) * sizeof *ids);
    if (!ids) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    *n = 0;
    for (const cJSON *t = arr->child; t; t = t->next) {
        double x = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (!(x >= 0 && x < n_vocab) || floor(x) != x) {
            free(ids);
            return srv_fail(err, 400, "invalid_request_error", NULL, param,
                            "%s must hold token ids (0..%d)", where, n_vocab - 1),
                   NULL;
        }
        ids[(*n)++] = (int32_t)x;
    }
    return ids;
}

uint64_t srv_random_seed(void) {
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        seed = (uint64_t)(nu_time_ms() * 1e3);
    return seed;
}

/* ---- a generation job ------------------------------------------------------ */

bool srv_compile_constraint(const nu_model *m, const srv_request *r, nu_grammar **out,
                            srv_error *err) {
    nu_json_options opt = nu_json_default_options();
    nu_error e;
    nu_status st = NU_OK;
    const char *param = "grammar";
    *out = NULL;
    if (r->format == SRV_FORMAT_JSON_OBJECT) {
        param = "response_format";
        st = nu_grammar_json_object(m, &opt, out, &e);
    } else if (r->format == SRV_FORMAT_JSON_SCHEMA) {
        param = "response_format";
        st = nu_grammar_from_json_schema(m, r->json_schema, &opt, out, &e);
    } else if (r->grammar) {
        st = nu_grammar_from_gbnf(m, r->grammar, NULL, out, &e);
    } else if (r->regex) {
        param = "regex";
        st = nu_grammar_from_regex(m, r->regex, out, &e);
    } else if (r->n_choices) {
        param = "choice";
        st = nu_grammar_from_choices(m, (const char *const *)r->choices, (size_t)r->n_choices, out,
                                     &e);
    }
    if (st == NU_ERR_NOMEM) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != NU_OK)
        return srv_fail(err, 400, "invalid_request_error", NULL, param, "%s", e.message);
    return true;
}

/* The job's grammar: the request's constraint, or with tools the grammar
 * of calls in the template's syntax (tools.h), whose arguments then stream
 * as made unless a stop string could cut a call short. */
static bool compile_constraint(const srv_model *m, srv_job *job, srv_error *err) {
    const srv_request *r = &job->req;
    job->req.tools.format = m->chat.tool_format; /* the call syntax answers are parsed in */
    if (!srv_compile_constraint(m->model, r, &job->grammar, err)) return false;
    if (!job->grammar && srv_tools_active(&r->tools)) {
        if (!srv_tools_grammar(m->model, &r->tools, m->chat.tool_format, &job->grammar, err))
            return false;
        job->req.tools.constrained = job->grammar && r->gen.n_stop == 0;
    }
    job->gen.grammar = job->grammar;
    return true;
}

/* Prompt p's text: the rendered chat (with the template variables vars),
 * or the completions prompt (NULL for token ids). *flags gets the
 * tokenizer flags that go with it. */
static char *prompt_text(const srv_model *m, const srv_request *r, int32_t p, const char *vars,
                         unsigned *flags, srv_error *err) {
    *flags = NU_TOKENIZE_ADD_BOS;
    if (r->kind == SRV_CHAT) {
        char *text = srv_chat_render(&m->chat, r->messages, r->n_messages, &r->tools, vars, err);
        const char *bos = m->chat.bos_text;
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
static bool prepare_thinking(const srv_model *m, srv_job *job, const char *prompt, srv_error *err) {
    const srv_think *t = &m->chat.think;
    srv_reasoning *q = &job->req.reasoning;
    if (!t->thinks) return true;
    q->split.on = true;
    q->split.starts_inside = srv_think_prompt_inside(t, prompt);
    q->split.harmony = t->harmony;
    snprintf(q->split.open, sizeof q->split.open, "%s", t->open);
    snprintf(q->split.close, sizeof q->split.close, "%s", t->close);
    if (q->max_tokens < 0) return true;
    if (!srv_think_budget(t, m->model, q->max_tokens, &job->gen.think, job->think_open,
                          job->think_close, job->think_force, err))
        return false;
    job->gen.think.start_inside = q->split.starts_inside;
    return true;
}

/* Tokens of prompt p, its length checked, and how many tokens it may get. */
static bool prepare_prompt(const srv_model *m, srv_job *job, int32_t p, const char *vars,
                           srv_error *err) {
    srv_request *r = &job->req;
    unsigned flags;
    char *text = prompt_text(m, r, p, vars, &flags, err);
    if (!text && (r->kind == SRV_CHAT || r->prompts[p].text)) return false;
    if (r->kind == SRV_CHAT && !prepare_thinking(m, job, text, err)) {
        free(text);
        return false;
    }
    int32_t n;
    if (text) {
        job->prompt_tokens[p] = srv_tokenize(m->model, text, flags, "prompt", &n, err);
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
    int32_t ctx = r->n_ctx > 0 && r->n_ctx < m->ctx_per_slot ? r->n_ctx : m->ctx_per_slot;
    int32_t most = m->max_prompt_tokens < ctx ? m->max_prompt_tokens : ctx - 1;
    if (n > most)
        return srv_fail(err, 413, "invalid_request_error", "context_length_exceeded",
                        r->kind == SRV_CHAT ? "messages" : "prompt",
                        "the prompt has %d tokens; this %s takes at most %d", n,
                        ctx < m->ctx_per_slot ? "request's context" : "server", most);
    int32_t room = ctx - n, want = r->gen.n_predict;
    if (want > room) /* asked for: refused rather than cut short */
        return srv_fail(err, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                        "the prompt has %d tokens and max_tokens is %d: %lld tokens, more than "
                        "a request's context of %d (%s); ask for at most %d",
                        n, want, (long long)n + want, ctx,
                        ctx < m->ctx_per_slot ? "num_ctx" : "--ctx", room);
    /* left out: 16 for completions, the rest of the context for chat, within the room left */
    if (want < 0) want = r->kind == SRV_COMPLETION ? 16 : m->limits.max_tokens;
    job->n_predict[p] = want < room ? want : room;
    if (r->beam && job->n_predict[p] < 1)
        return srv_fail(err, 400, "invalid_request_error", NULL, "max_tokens",
                        "beam search needs max_tokens >= 1 and room in the context");
    return true;
}

/* Stop strings and tokens: the request's, plus the chat format's end of turn. */
static void set_stops(const srv_model *m, srv_job *job) {
    srv_request *r = &job->req;
    int32_t n = 0;
    for (int32_t i = 0; i < r->gen.n_stop; i++) job->stop_all[n++] = r->stop[i];
    if (r->kind == SRV_CHAT && m->chat.stop_string) job->stop_all[n++] = m->chat.stop_string;
    job->gen.stop = job->stop_all;
    job->gen.n_stop = n;
    n = 0;
    for (int32_t i = 0; r->kind == SRV_CHAT && i < m->chat.n_stop_tokens; i++)
        job->stop_tokens_all[n++] = m->chat.stop_tokens[i];
    job->gen.stop_tokens = job->stop_tokens_all;
    job->gen.n_stop_tokens = n;
}

/* The KV cache cells a job may fill: each prompt once (its samples share
 * its cells), and every sample's tokens. Jobs within --parallel samples
 * always fit beside each other (each sample's prompt and max_tokens fit a
 * slot's context); a wider job runs alone, so it only has to fit the whole
 * cache. When it does not, max_tokens left out shrinks to what fits; given,
 * the request is refused: its choices would otherwise end early with
 * finish_reason "length" when the cache ran out. */
static bool fit_cache(const srv_model *m, srv_job *job, srv_error *err) {
    const srv_request *r = &job->req;
    int64_t cells = nu_context_n_ctx(m->ctx), prompts = 0, need = 0;
    int64_t samples = (int64_t)job->n_prompts * job->n_per_prompt;
    if (r->beam) return true; /* beam search runs alone within its own limits */
    for (int32_t p = 0; p < job->n_prompts; p++) {
        prompts += job->n_prompt_tokens[p];
        need += job->n_prompt_tokens[p] + (int64_t)job->n_per_prompt * job->n_predict[p];
    }
    if (need <= cells) return true;
    int64_t each = (cells - prompts) / samples;
    if (r->gen.n_predict < 0 && each >= 1) {
        for (int32_t p = 0; p < job->n_prompts; p++)
            if (job->n_predict[p] > each) job->n_predict[p] = (int32_t)each;
        return true;
    }
    int32_t most = 0;
    for (int32_t p = 0; p < job->n_prompts; p++)
        if (job->n_predict[p] > most) most = job->n_predict[p];
    return srv_fail(err, 400, "invalid_request_error", "context_length_exceeded",
                    samples > 1 ? "n" : "max_tokens",
                    "%lld samples (n, best_of and prompts) of up to %d tokens after %lld prompt "
                    "tokens need %lld KV cache cells; the cache holds %lld (--ctx %d x --parallel "
                    "%lld): ask for fewer samples or tokens (at most %lld each)",
                    (long long)samples, most, (long long)prompts, (long long)need, (long long)cells,
                    m->ctx_per_slot, (long long)(cells / m->ctx_per_slot),
                    (long long)(each > 0 ? each : 0));
}

/* The field a request's constraint came from (for errors). */
static const char *constraint_param(const srv_request *r) {
    if (r->format != SRV_FORMAT_TEXT) return "response_format";
    if (r->grammar) return "grammar";
    if (r->regex) return "regex";
    if (r->n_choices) return "choice";
    return "tools";
}

/* What the scheduler checks when the engine hands it the job, checked here
 * first: a stream must not start with 200 and then end in an error event,
 * and a request that can never run should not wait in the queue first. */
static bool check_as_scheduler(srv_job *job, srv_error *err) {
    nu_error e;
    for (int32_t p = 0; p < job->n_prompts && !job->req.beam; p++) {
        nu_generate_params gen = job->gen;
        gen.n = job->n_per_prompt;
        gen.n_predict = job->n_predict[p];
        if (nu_generate_params_check(&gen, &e) != NU_OK)
            return srv_fail(err, 400, "invalid_request_error", NULL, NULL, "%s", e.message);
        if (!job->grammar) continue;
        nu_grammar_state *st = NULL;
        nu_status rc = nu_grammar_state_new(job->grammar, &st, &e);
        if (rc == NU_OK) rc = nu_grammar_state_set_budget(st, job->n_predict[p], &e);
        nu_grammar_state_free(st);
        if (rc == NU_ERR_NOMEM)
            return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        if (rc != NU_OK)
            return srv_fail(err, 400, "invalid_request_error", NULL, constraint_param(&job->req),
                            "%s", e.message);
    }
    return true;
}

/* Everything the engine needs: prompts tokenized, limits applied. */
static bool build_job(const srv_model *m, srv_job *job, srv_error *err) {
    srv_request *r = &job->req;
    int32_t n_prompts = r->kind == SRV_CHAT ? 1 : r->n_prompts;
    int32_t per = r->beam ? r->beam_params.n_return : r->best_of;
    if (!srv_job_prepare(job, n_prompts, per) ||
        (r->beam && !(job->beam_texts = calloc((size_t)n_prompts, sizeof(char *)))))
        return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    job->gen = r->gen;
    if (!r->seed_given) job->gen.sampling.seed = srv_random_seed();
    set_stops(m, job);
    if (!compile_constraint(m, job, err)) return false;
    char *vars = NULL;
    if (r->kind == SRV_CHAT && !srv_think_template_vars(&m->chat.think, r, &vars, err))
        return false;
    bool ok = true;
    for (int32_t p = 0; ok && p < n_prompts; p++) ok = prepare_prompt(m, job, p, vars, err);
    cJSON_free(vars);
    if (!ok) return false;
    job->slots = r->beam ? 2 * r->beam_params.width : n_prompts * per;
    return fit_cache(m, job, err) && check_as_scheduler(job, err);
}

srv_job *srv_submit(srv_state *s, srv_model *m, srv_request *req, srv_conn *cs, srv_error *err) {
    srv_job *job = srv_job_new(req);
    if (!job) {
        srv_request_free(req);
        srv_model_release(m);
        srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    job->model = m; /* released with the job */
    if (!build_job(m, job, err) || !srv_engine_submit(m->engine, job, err)) {
        srv_job_release(job);
        return NULL;
    }
    srv_answer_begin(s, cs);
    for (int32_t p = 0; p < job->n_prompts; p++) cs->prompt_tokens += job->n_prompt_tokens[p];
    return job;
}

void srv_job_drop(srv_job *job) {
    srv_engine_cancel(job->model->engine, job);
    srv_job_release(job);
}

bool srv_count_prompt_tokens(const srv_model *m, srv_request *req, int32_t *n, srv_error *err) {
    srv_job *job = srv_job_new(req);
    if (!job) {
        srv_request_free(req);
        return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    bool ok = build_job(m, job, err);
    if (ok) *n = job->n_prompt_tokens[0];
    srv_job_release(job); /* job->model is NULL: no hold to give back */
    return ok;
}

/* Waits until the job is done (or, with started, until the scheduler has
 * taken it); false when the client went away first (the job is cancelled
 * and released then). */
static bool wait_job(srv_job *job, struct MHD_Connection *c, srv_conn *cs, bool started) {
    int fd = srv_client_fd(c);
    for (;;) {
        pthread_mutex_lock(&job->mu);
        bool ready = job->done || (started && job->admitted);
        pthread_mutex_unlock(&job->mu);
        if (ready) return true;
        if (!srv_job_wait(job, fd)) {
            srv_engine_cancel(job->model->engine, job);
            int64_t prompt; /* the log line counts what was made before the cancel */
            if (srv_job_wait_done(job, 5000)) srv_job_usage(job, &prompt, &cs->completion_tokens);
            srv_job_release(job);
            cs->status = 499; /* client closed the request */
            srv_client_gone();
            return false;
        }
    }
}

bool srv_await(srv_job *job, struct MHD_Connection *c, srv_conn *cs) {
    return wait_job(job, c, cs, false);
}

/* The error a failed job ended with, answered (and the job released). */
static enum MHD_Result answer_failure(struct MHD_Connection *c, srv_conn *cs, srv_job *job) {
    srv_error err;
    srv_job_error(job, &err);
    srv_job_release(job);
    return srv_answer_error(c, cs, &err);
}

bool srv_await_start(srv_job *job, struct MHD_Connection *c, srv_conn *cs, enum MHD_Result *ret) {
    *ret = MHD_NO;
    if (!wait_job(job, c, cs, true)) return false;
    pthread_mutex_lock(&job->mu);
    bool failed = job->failed && !job->admitted;
    pthread_mutex_unlock(&job->mu);
    if (!failed) return true;
    *ret = answer_failure(c, cs, job);
    return false;
}

enum MHD_Result srv_answer_job(struct MHD_Connection *c, srv_conn *cs, srv_job *job,
                               char *(*body)(const srv_job *job, const void *arg),
                               const void *arg) {
    if (!srv_await(job, c, cs)) return MHD_NO;
    int64_t prompt;
    srv_job_usage(job, &prompt, &cs->completion_tokens);
    if (job->failed) return answer_failure(c, cs, job);
    enum MHD_Result ret = srv_answer(c, cs, 200, body(job, arg), NULL);
    srv_job_release(job);
    return ret;
}

void srv_job_error(const srv_job *job, srv_error *err) {
    *err = (srv_error){.status = job->fail_status,
                       .type = job->fail_status >= 500 ? "server_error" : "invalid_request_error"};
    snprintf(err->message, sizeof err->message, "%s", job->fail_message);
}
