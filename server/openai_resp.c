/* openai_resp.c - building the response JSON with cJSON. */
#include "openai_resp.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "text_check.h"

void srv_resp_ctx_init(srv_resp_ctx *rc, const nu_model *m, const char *model_id, srv_kind kind) {
    rc->model = m;
    rc->model_id = model_id;
    rc->kind = kind;
    rc->created = (long long)time(NULL);
    unsigned char rnd[12] = {0};
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t t = (uint64_t)(nu_time_ms() * 1e3);
        memcpy(rnd, &t, sizeof t);
    }
    int k = snprintf(rc->id, sizeof rc->id, "%s", kind == SRV_CHAT ? "chatcmpl-" : "cmpl-");
    for (size_t i = 0; i < sizeof rnd; i++)
        k += snprintf(rc->id + k, sizeof rc->id - (size_t)k, "%02x", rnd[i]);
}

cJSON *srv_text_json(const char *s, size_t n) {
    char *lit = utf8_json_string(s ? s : "", s ? n : 0);
    cJSON *v = lit ? cJSON_CreateRaw(lit) : NULL;
    free(lit);
    return v;
}

/* Adds a string member: n bytes of s, made valid UTF-8, NUL bytes kept. */
static void add_text(cJSON *obj, const char *name, const char *s, size_t n) {
    cJSON *v = srv_text_json(s, n);
    cJSON_AddItemToObject(obj, name, v ? v : cJSON_CreateNull());
}

/* Prints and deletes a JSON value. */
static char *print_and_free(cJSON *v) {
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    return s;
}

char *srv_error_json(const srv_error *err) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "error", e);
    add_text(e, "message", err->message, strlen(err->message));
    cJSON_AddStringToObject(e, "type", err->type ? err->type : "server_error");
    if (err->param[0])
        cJSON_AddStringToObject(e, "param", err->param);
    else
        cJSON_AddNullToObject(e, "param");
    if (err->code)
        cJSON_AddStringToObject(e, "code", err->code);
    else
        cJSON_AddNullToObject(e, "code");
    return print_and_free(root);
}

const char *srv_finish_name(nu_finish_reason r) {
    switch (r) {
    case NU_FINISH_LENGTH:
    case NU_FINISH_CONTEXT: return "length";
    case NU_FINISH_EOS:
    case NU_FINISH_STOP:
    case NU_FINISH_CANCELLED: return "stop";
    case NU_FINISH_NONE: break;
    }
    return NULL;
}

const char *srv_finish_name_calls(nu_finish_reason r, int32_t n_calls, const srv_tools *t) {
    if (n_calls > 0 && (r == NU_FINISH_EOS || r == NU_FINISH_STOP) && t->choice != SRV_TOOLS_NAMED)
        return "tool_calls";
    return srv_finish_name(r);
}

int32_t srv_pick_results(const srv_job *job, int32_t *picked) {
    int32_t n = job->req.beam ? job->n_per_prompt : job->req.gen.n, k = 0;
    for (int32_t p = 0; p < job->n_prompts; p++) {
        const nu_generate_result *r = job->results + (size_t)p * (size_t)job->n_per_prompt;
        bool used[64] = {false};
        for (int32_t j = 0; j < n; j++) {
            int32_t best = -1;
            for (int32_t i = 0; i < job->n_per_prompt && i < 64; i++)
                if (!used[i] &&
                    (best < 0 || (job->n_per_prompt > n && r[i].sum_logprob > r[best].sum_logprob)))
                    best = i;
            used[best] = true;
            picked[k++] = p * job->n_per_prompt + best;
        }
    }
    return k;
}

void srv_job_usage(const srv_job *job, int64_t *prompt, int64_t *completion) {
    *prompt = *completion = 0;
    for (int32_t p = 0; p < job->n_prompts; p++) *prompt += job->n_prompt_tokens[p];
    for (int32_t i = 0; job->results && i < job->n_results; i++)
        *completion += job->results[i].n_generated;
}

/* Prompt tokens that were not computed again: reused from the cache. */
static int64_t cached_tokens(const srv_job *job) {
    int64_t n = 0;
    for (int32_t p = 0; job->results && p < job->n_prompts && !job->req.beam; p++)
        n += job->results[(size_t)p * (size_t)job->n_per_prompt].n_cached;
    return n;
}

/* usage, with OpenAI's prompt_tokens_details.cached_tokens and, when the
 * request was decoded speculatively, completion_tokens_details'
 * accepted_prediction_tokens / rejected_prediction_tokens (draft tokens the
 * model kept / refused). */
static cJSON *usage_json(const srv_job *job) {
    int64_t prompt, completion, drafted = 0, accepted = 0;
    srv_job_usage(job, &prompt, &completion);
    for (int32_t i = 0; job->results && i < job->n_results; i++) {
        drafted += job->results[i].n_drafted;
        accepted += job->results[i].n_accepted;
    }
    cJSON *u = cJSON_CreateObject(), *details = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
    cJSON_AddNumberToObject(details, "cached_tokens", (double)cached_tokens(job));
    cJSON_AddItemToObject(u, "prompt_tokens_details", details);
    if (drafted > 0) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "accepted_prediction_tokens", (double)accepted);
        cJSON_AddNumberToObject(c, "rejected_prediction_tokens", (double)(drafted - accepted));
        cJSON_AddItemToObject(u, "completion_tokens_details", c);
    }
    return u;
}

int32_t srv_logprobs_in_text(const nu_token_logprob *lps, int32_t n, size_t text_len,
                             nu_finish_reason finish) {
    if (finish == NU_FINISH_STOP)
        while (n > 0 && lps[n - 1].text_offset >= text_len) n--;
    return n;
}

/* ---- log-probs ----------------------------------------------------------- */

/* The bytes of a token as text; returns the byte count (at most cap). */
static size_t token_bytes(const nu_model *m, int32_t token, char *buf, size_t cap) {
    size_t n = nu_token_to_bytes(m, token, false, buf, cap);
    return n < cap ? n : cap;
}

/* {"token", "logprob", "bytes"}: one entry of chat log-probs. */
static cJSON *chat_token_json(const nu_model *m, int32_t token, float logprob) {
    char buf[512];
    size_t n = token_bytes(m, token, buf, sizeof buf);
    cJSON *o = cJSON_CreateObject(), *bytes = cJSON_CreateArray();
    add_text(o, "token", buf, n);
    cJSON_AddNumberToObject(o, "logprob", logprob);
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)buf[i]));
    cJSON_AddItemToObject(o, "bytes", bytes);
    return o;
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...], "refusal": null}. */
static cJSON *chat_logprobs_json(const nu_model *m, const nu_token_logprob *lps, int32_t n) {
    cJSON *root = cJSON_CreateObject(), *content = cJSON_CreateArray();
    for (int32_t i = 0; i < n; i++) {
        cJSON *e = chat_token_json(m, lps[i].token, lps[i].logprob), *top = cJSON_CreateArray();
        for (int32_t k = 0; k < lps[i].n_top; k++)
            cJSON_AddItemToArray(top,
                                 chat_token_json(m, lps[i].top[k].token, lps[i].top[k].logprob));
        cJSON_AddItemToObject(e, "top_logprobs", top);
        cJSON_AddItemToArray(content, e);
    }
    cJSON_AddItemToObject(root, "content", content);
    cJSON_AddNullToObject(root, "refusal");
    return root;
}

/* A completions top_logprobs entry, {"token text": logprob, ...}, written
 * by hand: cJSON keys cannot hold the NUL bytes a token may have. Tokens
 * whose text is the same (after repair) keep the first (likeliest) one. */
static cJSON *top_dict_json(const nu_model *m, const nu_token_logprob *lp) {
    char *keys[NU_MAX_TOP_LOGPROBS] = {0};
    size_t cap = 16, len = 1;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = '{';
    for (int32_t k = 0; k < lp->n_top && k < NU_MAX_TOP_LOGPROBS; k++) {
        char buf[512];
        char *key = utf8_json_string(buf, token_bytes(m, lp->top[k].token, buf, sizeof buf));
        bool seen = !key;
        for (int32_t j = 0; j < k && !seen; j++) seen = keys[j] && !strcmp(keys[j], key);
        keys[k] = key;
        if (seen) continue;
        char num[64];
        cJSON *v = cJSON_CreateNumber(lp->top[k].logprob);
        char *printed = v ? cJSON_PrintUnformatted(v) : NULL;
        cJSON_Delete(v);
        snprintf(num, sizeof num, "%s", printed ? printed : "null");
        cJSON_free(printed);
        size_t need = len + strlen(key) + strlen(num) + 4;
        if (need > cap) {
            while (cap < need) cap *= 2;
            char *bigger = realloc(out, cap);
            if (!bigger) break;
            out = bigger;
        }
        len += (size_t)sprintf(out + len, "%s%s:%s", len > 1 ? "," : "", key, num);
    }
    for (int32_t k = 0; k < NU_MAX_TOP_LOGPROBS; k++) free(keys[k]);
    out[len++] = '}';
    out[len] = 0;
    cJSON *v = cJSON_CreateRaw(out);
    free(out);
    return v;
}

/* Completions: {"tokens", "token_logprobs", "top_logprobs" (dicts), "text_offset"};
 * offsets are bytes from base in the choice's whole text. */
static cJSON *completion_logprobs_json(const nu_model *m, const nu_token_logprob *lps, int32_t n,
                                       size_t base) {
    cJSON *root = cJSON_CreateObject(), *tokens = cJSON_CreateArray(),
          *values = cJSON_CreateArray(), *tops = cJSON_CreateArray(),
          *offsets = cJSON_CreateArray();
    char buf[512];
    for (int32_t i = 0; i < n; i++) {
        size_t len = token_bytes(m, lps[i].token, buf, sizeof buf);
        cJSON *tok = srv_text_json(buf, len);
        cJSON_AddItemToArray(tokens, tok ? tok : cJSON_CreateNull());
        cJSON_AddItemToArray(values, cJSON_CreateNumber(lps[i].logprob)); /* NaN prints null */
        bool first_prompt_token = lps[i].logprob != lps[i].logprob;
        cJSON *dict = first_prompt_token ? cJSON_CreateNull() : top_dict_json(m, &lps[i]);
        cJSON_AddItemToArray(tops, dict ? dict : cJSON_CreateNull());
        double off = lps[i].text_offset >= base ? (double)(lps[i].text_offset - base) : 0;
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber(off));
    }
    cJSON_AddItemToObject(root, "tokens", tokens);
    cJSON_AddItemToObject(root, "token_logprobs", values);
    cJSON_AddItemToObject(root, "top_logprobs", tops);
    cJSON_AddItemToObject(root, "text_offset", offsets);
    return root;
}

/* The log-probs member of a choice (null when none were asked for). */
static void add_logprobs(cJSON *choice, const srv_resp_ctx *rc, const srv_job *job,
                         const nu_token_logprob *lps, int32_t n, size_t base) {
    if (!job->req.logprobs) {
        cJSON_AddNullToObject(choice, "logprobs");
        return;
    }
    cJSON_AddItemToObject(choice, "logprobs",
                          rc->kind == SRV_CHAT ? chat_logprobs_json(rc->model, lps, n)
                                               : completion_logprobs_json(rc->model, lps, n, base));
}

/* ---- responses ----------------------------------------------------------- */

static cJSON *response_head(const srv_resp_ctx *rc, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", rc->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)rc->created);
    cJSON_AddStringToObject(root, "model", rc->model_id);
    if (rc->kind == SRV_CHAT)
        cJSON_AddStringToObject(root, "system_fingerprint", "nucleus-" NU_VERSION_STRING);
    return root;
}

/* [{"id", "type": "function", "function": {"name", "arguments"}}, ...] */
static cJSON *tool_calls_json(const srv_tool_result *tr) {
    cJSON *arr = cJSON_CreateArray();
    for (int32_t i = 0; i < tr->n_calls; i++) {
        cJSON *o = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", tr->calls[i].id);
        cJSON_AddStringToObject(o, "type", "function");
        add_text(fn, "name", tr->calls[i].name, strlen(tr->calls[i].name));
        add_text(fn, "arguments", tr->calls[i].arguments, strlen(tr->calls[i].arguments));
        cJSON_AddItemToObject(o, "function", fn);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* A chat choice's message: the text, or the thinking (reasoning_content)
 * and the content and calls parsed from it (content null when there are
 * calls and nothing else). Returns how many calls it has. */
static int32_t add_message(cJSON *c, const srv_job *job, const nu_generate_result *r) {
    cJSON *msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "role", "assistant");
    srv_split_answer a = {0};
    const srv_tool_result *tr = &a.result;
    bool parsed =
        srv_splitter_needed(&job->req) && srv_answer_split(&job->req, r->text, r->text_len, &a);
    if (parsed && tr->n_calls > 0 && tr->content_len == 0)
        cJSON_AddNullToObject(msg, "content");
    else if (parsed)
        add_text(msg, "content", tr->content, tr->content_len);
    else
        add_text(msg, "content", r->text, r->text_len);
    if (a.reasoning) add_text(msg, "reasoning_content", a.reasoning, a.reasoning_len);
    cJSON_AddNullToObject(msg, "refusal");
    if (tr->n_calls > 0) cJSON_AddItemToObject(msg, "tool_calls", tool_calls_json(tr));
    cJSON_AddItemToObject(c, "message", msg);
    int32_t n_calls = tr->n_calls;
    srv_answer_free(&a);
    return n_calls;
}

/* One choice of a finished job. */
static cJSON *choice_json(const srv_resp_ctx *rc, const srv_job *job, int32_t index,
                          const nu_generate_result *r) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    int32_t n_calls = 0;
    if (rc->kind == SRV_CHAT)
        n_calls = add_message(c, job, r);
    else
        add_text(c, "text", r->text, r->text_len);
    int32_t n = srv_logprobs_in_text(r->logprobs, r->n_logprobs, r->text_len, r->finish);
    add_logprobs(c, rc, job, r->logprobs, n, 0);
    const char *finish = srv_finish_name_calls(r->finish, n_calls, &job->req.tools);
    cJSON_AddStringToObject(c, "finish_reason", finish ? finish : "stop");
    return c;
}

char *srv_response_json(const srv_resp_ctx *rc, const srv_job *job) {
    cJSON *root = response_head(rc, rc->kind == SRV_CHAT ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_CreateArray();
    int32_t *picked = malloc(((size_t)job->n_results + 1) * sizeof *picked);
    if (!picked) {
        cJSON_Delete(root);
        cJSON_Delete(choices);
        return NULL;
    }
    int32_t n = srv_pick_results(job, picked);
    for (int32_t i = 0; i < n; i++)
        cJSON_AddItemToArray(choices, choice_json(rc, job, i, &job->results[picked[i]]));
    free(picked);
    cJSON_AddItemToObject(root, "choices", choices);
    cJSON_AddItemToObject(root, "usage", usage_json(job));
    return print_and_free(root);
}

/* A streamed tool_calls delta, as the OpenAI API sends them: the first one
 * of a call has its index, id, type, name and empty arguments; the next
 * ones the index and a piece of the arguments. */
static cJSON *tool_delta_json(const srv_tool_event *ev) {
    cJSON *arr = cJSON_CreateArray(), *o = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", ev->index);
    if (ev->kind == SRV_TOOL_CALL) {
        cJSON_AddStringToObject(o, "id", ev->id);
        cJSON_AddStringToObject(o, "type", "function");
        add_text(fn, "name", ev->name, strlen(ev->name));
        cJSON_AddStringToObject(fn, "arguments", "");
    } else {
        add_text(fn, "arguments", ev->text, ev->len);
    }
    cJSON_AddItemToObject(o, "function", fn);
    cJSON_AddItemToArray(arr, o);
    return arr;
}

char *srv_chunk_json(const srv_resp_ctx *rc, const srv_job *job, const srv_chunk *ch) {
    cJSON *root =
        response_head(rc, rc->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_CreateArray(), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", ch->index);
    if (rc->kind == SRV_CHAT) {
        cJSON *delta = cJSON_CreateObject();
        if (ch->role) cJSON_AddStringToObject(delta, "role", "assistant");
        if (ch->reasoning) {
            add_text(delta, "reasoning_content", ch->text, ch->len);
        } else if (ch->tool) {
            if (ch->role) cJSON_AddNullToObject(delta, "content");
            cJSON_AddItemToObject(delta, "tool_calls", tool_delta_json(ch->tool));
        } else if (ch->null_content) {
            cJSON_AddNullToObject(delta, "content");
        } else if (ch->role || ch->len || !ch->finish) {
            add_text(delta, "content", ch->text, ch->len);
        }
        cJSON_AddItemToObject(c, "delta", delta);
    } else {
        add_text(c, "text", ch->text, ch->len);
    }
    if (ch->n_lps > 0 || !job->req.logprobs)
        add_logprobs(c, rc, job, ch->lps, ch->n_lps, 0);
    else
        cJSON_AddNullToObject(c, "logprobs");
    if (ch->finish)
        cJSON_AddStringToObject(c, "finish_reason", ch->finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(root, "choices", choices);
    if (job->req.include_usage) cJSON_AddNullToObject(root, "usage");
    return print_and_free(root);
}

char *srv_usage_chunk_json(const srv_resp_ctx *rc, const srv_job *job) {
    cJSON *root =
        response_head(rc, rc->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddItemToObject(root, "choices", cJSON_CreateArray());
    cJSON_AddItemToObject(root, "usage", usage_json(job));
    return print_and_free(root);
}
