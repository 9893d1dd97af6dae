/* responses.c - OpenAI's Responses API (responses.h): requests mapped onto
 * the chat request the engine runs, answers written as output items, whole
 * or as the API's streaming events, and a bounded in-memory store for
 * previous_response_id and GET / DELETE. */
#include "responses.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "openai_resp.h"
#include "reasoning.h"
#include "request.h"
#include "sse.h"
#include "text_check.h"
#include "tools.h"

#define BAD(err, param, ...) srv_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)
#define OOM(err) srv_fail(err, 500, "server_error", NULL, NULL, "out of memory")

/* ---- the store --------------------------------------------------------------------- */

typedef struct stored {
    char id[48];
    char *response;     /* the response object (JSON text) */
    char *conversation; /* the chat messages it ended with (JSON array text) */
    char *input_items;  /* the items it was made from (JSON array text) */
    size_t bytes;
    struct stored *next;
} stored;

struct srv_responses {
    pthread_mutex_t mu;
    stored *head, *tail; /* oldest first */
    size_t count, bytes, max;
};

srv_responses *srv_responses_new(int32_t max) {
    srv_responses *r = calloc(1, sizeof *r);
    if (r) pthread_mutex_init(&r->mu, NULL);
    if (r) r->max = max > 0 ? (size_t)max : 0;
    return r;
}

static void stored_free(stored *e) {
    free(e->response);
    free(e->conversation);
    free(e->input_items);
    free(e);
}

void srv_responses_free(srv_responses *r) {
    if (!r) return;
    for (stored *e = r->head, *next; e; e = next) {
        next = e->next;
        stored_free(e);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Takes over response, conversation and input items; the oldest entries
 * make room. */
static void store_put(srv_responses *r, const char *id, char *response, char *conversation,
                      char *input_items) {
    stored *e = calloc(1, sizeof *e);
    if (!e || !response || !conversation || !input_items) {
        free(e);
        free(response);
        free(conversation);
        free(input_items);
        return;
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    e->response = response;
    e->conversation = conversation;
    e->input_items = input_items;
    e->bytes = strlen(response) + strlen(conversation) + strlen(input_items) + sizeof *e;
    pthread_mutex_lock(&r->mu);
    while (r->head && (r->count >= r->max || r->bytes + e->bytes > SRV_RESPONSES_MAX_BYTES)) {
        stored *old = r->head;
        r->head = old->next;
        if (!r->head) r->tail = NULL;
        r->count--;
        r->bytes -= old->bytes;
        stored_free(old);
    }
    if (r->max > 0 && e->bytes <= SRV_RESPONSES_MAX_BYTES) {
        if (r->tail)
            r->tail->next = e;
        else
            r->head = e;
        r->tail = e;
        r->count++;
        r->bytes += e->bytes;
    } else {
        stored_free(e);
    }
    pthread_mutex_unlock(&r->mu);
}

/* What store_get copies of a stored response. */
typedef enum { STORED_RESPONSE, STORED_CONVERSATION, STORED_INPUT_ITEMS } stored_part;

/* A copy of a part of a stored response; NULL when there is no such
 * response (or out of memory: *oom). */
static char *store_get(srv_responses *r, const char *id, stored_part part, bool *oom) {
    char *out = NULL;
    *oom = false;
    pthread_mutex_lock(&r->mu);
    for (stored *e = r->head; e; e = e->next)
        if (!strcmp(e->id, id)) {
            out = strdup(part == STORED_RESPONSE       ? e->response
                         : part == STORED_CONVERSATION ? e->conversation
                                                       : e->input_items);
            *oom = !out;
            break;
        }
    pthread_mutex_unlock(&r->mu);
    return out;
}

/* Copies of the three parts of a stored response, taken together (a
 * response dropped meanwhile cannot leave some of them missing); false when
 * there is no such response (or out of memory: *oom). */
static bool store_get_all(srv_responses *r, const char *id, char *out[3], bool *oom) {
    out[0] = out[1] = out[2] = NULL;
    bool found = false;
    *oom = false;
    pthread_mutex_lock(&r->mu);
    for (stored *e = r->head; e && !found; e = e->next)
        if (!strcmp(e->id, id)) {
            found = true;
            out[STORED_RESPONSE] = strdup(e->response);
            out[STORED_CONVERSATION] = strdup(e->conversation);
            out[STORED_INPUT_ITEMS] = strdup(e->input_items);
        }
    pthread_mutex_unlock(&r->mu);
    *oom = found && (!out[0] || !out[1] || !out[2]);
    if (*oom)
        for (int i = 0; i < 3; i++) free(out[i]), out[i] = NULL;
    return found && !*oom;
}

static bool store_delete(srv_responses *r, const char *id) {
    bool found = false;
    pthread_mutex_lock(&r->mu);
    for (stored **p = &r->head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
        stored *e = *p;
        if (strcmp(e->id, id)) continue;
        *p = e->next;
        if (r->tail == e) r->tail = prev;
        r->count--;
        r->bytes -= e->bytes;
        stored_free(e);
        found = true;
        break;
    }
    pthread_mutex_unlock(&r->mu);
    return found;
}

/* prefix and 24 random hex digits. */
static void new_id(const char *prefix, char *out, size_t cap) {
    unsigned char rnd[12] = {0};
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t t = (uint64_t)(nu_time_ms() * 1e3);
        memcpy(rnd, &t, sizeof t);
    }
    int k = snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof rnd && (size_t)k + 3 <= cap; i++)
        k += snprintf(out + k, cap - (size_t)k, "%02x", rnd[i]);
}

/* ---- the request ------------------------------------------------------------------- */

/* A member, NULL when absent or null. */
static const cJSON *member(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The text of a content value: a string, or parts whose type is one of
 * the text types (input_text, output_text, text) joined. */
static char *content_text(const cJSON *v, const char *where, srv_error *err) {
    if (cJSON_IsString(v)) {
        char *s = strdup(v->valuestring);
        if (!s) OOM(err);
        return s;
    }
    if (!cJSON_IsArray(v))
        return BAD(err, "input", "%s must be a string or an array of content parts", where), NULL;
    nu_buf b;
    nu_buf_init(&b);
    int i = 0;
    for (const cJSON *p = v->child; p; p = p->next, i++) {
        const cJSON *type = member(p, "type"), *text = member(p, "text");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text")) {
            nu_buf_free(&b);
            if (!strcmp(t, "input_image") || !strcmp(t, "input_file") || !strcmp(t, "input_audio"))
                return srv_fail(err, 400, "invalid_request_error", "not_supported", "input",
                                "%s[%d]: content of type '%s' is not supported (text only)", where,
                                i, t),
                       NULL;
            return BAD(err, "input",
                       "%s[%d] must be a text part ({\"type\": \"input_text\", "
                       "\"text\": ...})",
                       where, i),
                   NULL;
        }
        if (!cJSON_IsString(text)) {
            nu_buf_free(&b);
            return BAD(err, "input", "%s[%d].text must be a string", where, i), NULL;
        }
        nu_buf_puts(&b, text->valuestring);
    }
    char *s = nu_buf_take(&b);
    if (!s) OOM(err);
    return s;
}

/* The assistant message that reasoning and function_call items join (the
 * last message when it is an assistant's without content yet), or a new one. */
static cJSON *assistant(cJSON *msgs, bool for_content) {
    cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *role = last ? member(last, "role") : NULL;
    if (role && !strcmp(role->valuestring, "assistant") &&
        (!for_content || (!member(last, "content") && !member(last, "tool_calls"))))
        return last;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddItemToArray(msgs, o);
    return o;
}

static bool add_string_member(cJSON *o, const char *name, char *s, srv_error *err) {
    if (!s) return false;
    cJSON *v = cJSON_CreateString(s);
    free(s);
    if (!v) return OOM(err);
    cJSON_DeleteItemFromObjectCaseSensitive(o, name);
    cJSON_AddItemToObject(o, name, v);
    return true;
}

static bool map_message_item(const cJSON *it, int i, cJSON *msgs, srv_error *err) {
    const cJSON *role = member(it, "role");
    char where[48];
    snprintf(where, sizeof where, "input[%d].content", i);
    if (!cJSON_IsString(role) ||
        (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant") &&
         strcmp(role->valuestring, "system") && strcmp(role->valuestring, "developer")))
        return BAD(err, "input", "input[%d].role must be user, assistant, system or developer", i);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
    if (!content) return BAD(err, "input", "input[%d] needs a 'content'", i);
    char *text = content_text(content, where, err);
    if (!strcmp(role->valuestring, "assistant"))
        return add_string_member(assistant(msgs, true), "content", text, err);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(msgs, o);
    cJSON_AddStringToObject(o, "role", role->valuestring);
    return add_string_member(o, "content", text, err);
}

static bool map_call_item(const cJSON *it, int i, cJSON *msgs, srv_error *err) {
    const cJSON *call_id = member(it, "call_id"), *name = member(it, "name"),
                *args = member(it, "arguments");
    if (!cJSON_IsString(call_id) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return BAD(err, "input",
                   "input[%d]: a function_call needs 'call_id', 'name' and 'arguments' (strings)",
                   i);
    cJSON *a = assistant(msgs, false);
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(a, "tool_calls");
    if (!calls) calls = cJSON_AddArrayToObject(a, "tool_calls");
    cJSON *c = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", call_id->valuestring);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddStringToObject(fn, "arguments", args->valuestring);
    cJSON_AddItemToObject(c, "function", fn);
    cJSON_AddItemToArray(calls, c);
    return true;
}

static bool map_output_item(const cJSON *it, int i, cJSON *msgs, srv_error *err) {
    const cJSON *call_id = member(it, "call_id"), *output = member(it, "output");
    char where[48];
    snprintf(where, sizeof where, "input[%d].output", i);
    if (!cJSON_IsString(call_id) || !output)
        return BAD(err, "input", "input[%d]: a function_call_output needs 'call_id' and 'output'",
                   i);
    bool called = false; /* an earlier function_call item made this call */
    for (const cJSON *m = msgs->child; m && !called; m = m->next)
        for (const cJSON *c = member(m, "tool_calls") ? member(m, "tool_calls")->child : NULL; c;
             c = c->next)
            called |= !strcmp(cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring,
                              call_id->valuestring);
    if (!called)
        return BAD(err, "input", "input[%d]: no function_call with call_id '%.60s' comes before it",
                   i, call_id->valuestring);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(msgs, o);
    cJSON_AddStringToObject(o, "role", "tool");
    cJSON_AddStringToObject(o, "tool_call_id", call_id->valuestring);
    return add_string_member(o, "content", content_text(output, where, err), err);
}

/* A reasoning item: its text (content, else summary) as the thinking of
 * the assistant message that follows, for templates that show it. */
static bool map_reasoning_item(const cJSON *it, int i, cJSON *msgs, srv_error *err) {
    const cJSON *parts = member(it, "content");
    if (!parts) parts = member(it, "summary");
    if (parts && !cJSON_IsArray(parts))
        return BAD(err, "input", "input[%d]: a reasoning item's content must be an array", i);
    nu_buf b;
    nu_buf_init(&b);
    for (const cJSON *p = parts ? parts->child : NULL; p; p = p->next) {
        const cJSON *text = member(p, "text");
        if (!cJSON_IsString(text)) {
            nu_buf_free(&b);
            return BAD(err, "input", "input[%d]: reasoning parts need a 'text' string", i);
        }
        nu_buf_puts(&b, text->valuestring);
    }
    char *text = nu_buf_take(&b);
    if (!text) return OOM(err);
    if (!text[0]) return free(text), true;
    return add_string_member(assistant(msgs, false), "reasoning_content", text, err);
}

static bool map_input(const cJSON *input, cJSON *msgs, srv_error *err) {
    if (!input) return BAD(err, "input", "'input' is required (a string or a list of items)");
    if (cJSON_IsString(input)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", "user");
        cJSON_AddStringToObject(o, "content", input->valuestring);
        cJSON_AddItemToArray(msgs, o);
        return true;
    }
    if (!cJSON_IsArray(input)) return BAD(err, "input", "'input' must be a string or an array");
    int i = 0;
    for (const cJSON *it = input->child; it; it = it->next, i++) {
        if (!cJSON_IsObject(it)) return BAD(err, "input", "input[%d] must be an object", i);
        const cJSON *type = member(it, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : type ? "" : "message";
        bool ok;
        if (!strcmp(t, "message"))
            ok = map_message_item(it, i, msgs, err);
        else if (!strcmp(t, "function_call"))
            ok = map_call_item(it, i, msgs, err);
        else if (!strcmp(t, "function_call_output"))
            ok = map_output_item(it, i, msgs, err);
        else if (!strcmp(t, "reasoning"))
            ok = map_reasoning_item(it, i, msgs, err);
        else
            ok = srv_fail(err, 400, "invalid_request_error", "not_supported", "input",
                          "input[%d]: items of type '%.40s' are not supported (message, "
                          "function_call, function_call_output and reasoning are)",
                          i, t);
        if (!ok) return false;
    }
    return true;
}

/* Adds to items an input item as input_items lists it: with an id (its
 * own, or a new one), a status, and a message's text as content parts. */
static void add_input_item(cJSON *items, const cJSON *it) {
    const cJSON *type = member(it, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "message";
    cJSON *o = cJSON_Duplicate(it, true);
    if (!o) return;
    char id[48];
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "id"))) {
        new_id(!strcmp(t, "message")         ? "msg_"
               : !strcmp(t, "function_call") ? "fc_"
               : !strcmp(t, "reasoning")     ? "rs_"
                                             : "fco_",
               id, sizeof id);
        cJSON_DeleteItemFromObjectCaseSensitive(o, "id");
        cJSON_AddStringToObject(o, "id", id);
    }
    if (!type) cJSON_AddStringToObject(o, "type", "message");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!strcmp(t, "message") && cJSON_IsString(content)) {
        const cJSON *role = member(o, "role");
        bool out = cJSON_IsString(role) && !strcmp(role->valuestring, "assistant");
        cJSON *parts = cJSON_CreateArray(), *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", out ? "output_text" : "input_text");
        cJSON_AddStringToObject(part, "text", content->valuestring);
        if (out) cJSON_AddArrayToObject(part, "annotations");
        cJSON_AddItemToArray(parts, part);
        cJSON_ReplaceItemInObjectCaseSensitive(o, "content", parts);
    }
    if (strcmp(t, "reasoning") && !member(o, "status"))
        cJSON_AddStringToObject(o, "status", "completed");
    cJSON_AddItemToArray(items, o);
}

/* The input, already checked by map_input, as items. */
static void add_input_items(cJSON *items, const cJSON *input) {
    if (cJSON_IsString(input)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", "user");
        cJSON_AddStringToObject(o, "content", input->valuestring);
        add_input_item(items, o);
        cJSON_Delete(o);
        return;
    }
    for (const cJSON *it = input->child; it; it = it->next) add_input_item(items, it);
}

/* The items a response made from previous_response_id is made from: the
 * previous response's own input items (text in), then its output (of the
 * response object, text resp). */
static bool previous_items(const char *in, const char *resp, cJSON **items, srv_error *err) {
    cJSON *r = cJSON_Parse(resp);
    cJSON_Delete(*items);
    *items = cJSON_Parse(in);
    const cJSON *output = cJSON_GetObjectItemCaseSensitive(r, "output");
    bool ok = *items && cJSON_IsArray(output);
    for (const cJSON *o = ok ? output->child : NULL; o; o = o->next)
        cJSON_AddItemToArray(*items, cJSON_Duplicate(o, true));
    cJSON_Delete(r);
    return ok || OOM(err); /* (the store holds both whole, so only memory can fail) */
}

/* tools: the Responses API's flat function tools into chat's. */
static bool map_tools(const cJSON *tools, cJSON *out, srv_error *err) {
    if (!tools) return true;
    if (!cJSON_IsArray(tools)) return BAD(err, "tools", "'tools' must be an array");
    cJSON *arr = cJSON_AddArrayToObject(out, "tools");
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *type = member(t, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return srv_fail(err, 400, "invalid_request_error", "not_supported", "tools",
                            "tools[%d]: tools of type '%.40s' are not supported (function tools "
                            "only)",
                            i, cJSON_IsString(type) ? type->valuestring : "?");
        cJSON *o = cJSON_CreateObject(), *fn = cJSON_Duplicate(t, true);
        cJSON_DeleteItemFromObjectCaseSensitive(fn, "type");
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddItemToObject(o, "function", fn);
        cJSON_AddItemToArray(arr, o);
    }
    return true;
}

static bool map_tool_choice(const cJSON *v, cJSON *out, srv_error *err) {
    if (!v) return true;
    if (cJSON_IsString(v)) {
        cJSON_AddStringToObject(out, "tool_choice", v->valuestring);
        return true;
    }
    const cJSON *type = member(v, "type"), *name = member(v, "name");
    if (!cJSON_IsObject(v) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
        !cJSON_IsString(name))
        return BAD(err, "tool_choice",
                   "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                   "\"function\", \"name\": ...}");
    cJSON *o = cJSON_AddObjectToObject(out, "tool_choice"), *fn = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddItemToObject(o, "function", fn);
    return true;
}

/* text.format into response_format. */
static bool map_text(const cJSON *text, cJSON *out, srv_error *err) {
    if (!text) return true;
    const cJSON *format = member(text, "format"), *verbosity = member(text, "verbosity");
    if (!cJSON_IsObject(text)) return BAD(err, "text", "'text' must be an object");
    for (const cJSON *v = text->child; v; v = v->next)
        if (strcmp(v->string, "format") && strcmp(v->string, "verbosity"))
            return BAD(err, "text", "text: unknown field '%.40s'", v->string);
    if (verbosity && (!cJSON_IsString(verbosity) || strcmp(verbosity->valuestring, "medium")))
        return srv_fail(err, 400, "invalid_request_error", "not_supported", "text.verbosity",
                        "text.verbosity: only \"medium\" is supported");
    const cJSON *type = format ? member(format, "type") : NULL;
    if (!format) return true;
    if (!cJSON_IsString(type))
        return BAD(err, "text.format",
                   "text.format needs a 'type' (text, json_object or "
                   "json_schema)");
    if (!strcmp(type->valuestring, "text")) return true;
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    cJSON_AddStringToObject(rf, "type", type->valuestring);
    if (!strcmp(type->valuestring, "json_schema")) {
        cJSON *js = cJSON_Duplicate(format, true);
        cJSON_DeleteItemFromObjectCaseSensitive(js, "type");
        cJSON_AddItemToObject(rf, "json_schema", js);
    }
    return true;
}

static bool map_reasoning(const cJSON *r, cJSON *out, srv_error *err) {
    if (!r) return true;
    if (!cJSON_IsObject(r)) return BAD(err, "reasoning", "'reasoning' must be an object");
    for (const cJSON *v = r->child; v; v = v->next) {
        if (!strcmp(v->string, "effort")) {
            if (!cJSON_IsNull(v))
                cJSON_AddItemToObject(out, "reasoning_effort", cJSON_Duplicate(v, true));
        } else if (strcmp(v->string, "summary") && strcmp(v->string, "generate_summary")) {
            return BAD(err, "reasoning", "reasoning: unknown field '%.40s'", v->string);
        }
    }
    return true;
}

/* Fields nucleus cannot honour, refused unless null or off. */
static bool refuse_extras(const cJSON *root, srv_error *err) {
    const cJSON *v;
    if ((v = member(root, "background")) && !cJSON_IsFalse(v))
        return srv_fail(err, 400, "invalid_request_error", "not_supported", "background",
                        "'background' responses are not supported");
    if ((v = member(root, "truncation")) &&
        !(cJSON_IsString(v) && !strcmp(v->valuestring, "disabled")))
        return srv_fail(err, 400, "invalid_request_error", "not_supported", "truncation",
                        "'truncation': only \"disabled\" is supported (a prompt longer than the "
                        "context is refused)");
    static const char *const unsupported[] = {"conversation", "prompt", "context_management",
                                              "top_logprobs", NULL};
    for (const char *const *f = unsupported; *f; f++)
        if (member(root, *f))
            return srv_fail(err, 400, "invalid_request_error", "not_supported", *f,
                            "'%s' is not supported", *f);
    if ((v = member(root, "include"))) {
        if (!cJSON_IsArray(v)) return BAD(err, "include", "'include' must be an array");
        for (const cJSON *x = v->child; x; x = x->next)
            if (!cJSON_IsString(x) || strcmp(x->valuestring, "reasoning.encrypted_content"))
                return srv_fail(err, 400, "invalid_request_error", "not_supported", "include",
                                "include: only \"reasoning.encrypted_content\" is accepted "
                                "(reasoning items carry their text in content)");
    }
    return true;
}

/* What one response request is, besides the chat request it maps onto. */
typedef struct resp_req {
    srv_responses *store;
    char id[48];
    long long created;
    bool stream, keep;
    cJSON *shell;        /* the response object without output, usage and status */
    cJSON *conversation; /* the messages without instructions */
    cJSON *input_items;  /* the items it is made from, as input_items lists them */
} resp_req;

static void resp_req_free(resp_req *q) {
    cJSON_Delete(q->shell);
    cJSON_Delete(q->conversation);
    cJSON_Delete(q->input_items);
    free(q);
}

static const char *const fields[] = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
    "store", "previous_response_id", "metadata", "tools", "tool_choice", "parallel_tool_calls",
    "text", "reasoning", "user", "include", "truncation", "background", "service_tier",
    "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "stream_options",
    "conversation", "prompt", "context_management", "top_logprobs",
    /* nucleus extensions, as in chat completions */
    "seed", "top_k", "min_p", "max_thinking_tokens", "chat_template_kwargs", "regex", "grammar",
    NULL};

/* The chat request body a Responses request stands for; q gets the rest. */
static cJSON *map_request(const cJSON *root, resp_req *q, srv_error *err) {
    for (const cJSON *v = root->child; v; v = v->next) {
        bool known = false;
        for (const char *const *f = fields; *f && !known; f++) known = !strcmp(*f, v->string);
        if (!known) return BAD(err, v->string, "unknown field '%.60s'", v->string), NULL;
    }
    const cJSON *v;
    if (!refuse_extras(root, err)) return NULL;
    if ((v = member(root, "store")) && !cJSON_IsBool(v))
        return BAD(err, "store", "'store' must be a boolean"), NULL;
    q->keep = !v || cJSON_IsTrue(v);
    if ((v = member(root, "instructions")) && !cJSON_IsString(v))
        return BAD(err, "instructions", "'instructions' must be a string"), NULL;
    if ((v = member(root, "metadata")) && !cJSON_IsObject(v))
        return BAD(err, "metadata", "'metadata' must be an object"), NULL;
    cJSON *out = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(out, "messages");
    q->conversation = cJSON_CreateArray();
    q->input_items = cJSON_CreateArray();
    const cJSON *prev = member(root, "previous_response_id");
    bool ok = out && msgs && q->conversation && q->input_items;
    if (ok && prev) {
        bool oom = false;
        char *parts[3] = {NULL, NULL, NULL};
        bool found =
            cJSON_IsString(prev) && store_get_all(q->store, prev->valuestring, parts, &oom);
        if (!cJSON_IsString(prev))
            ok = BAD(err, "previous_response_id", "'previous_response_id' must be a string");
        else if (!found)
            ok = oom ? OOM(err)
                     : srv_fail(err, 404, "invalid_request_error", "previous_response_not_found",
                                "previous_response_id",
                                "Previous response with id '%.60s' not found.", prev->valuestring);
        if (found) {
            cJSON_Delete(q->conversation);
            ok = (q->conversation = cJSON_Parse(parts[STORED_CONVERSATION])) != NULL || OOM(err);
            ok = ok && previous_items(parts[STORED_INPUT_ITEMS], parts[STORED_RESPONSE],
                                      &q->input_items, err);
        }
        for (int i = 0; i < 3; i++) free(parts[i]);
    }
    ok = ok && map_input(member(root, "input"), q->conversation, err);
    if (ok) add_input_items(q->input_items, member(root, "input"));
    if (ok && (v = member(root, "instructions")) && v->valuestring[0]) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", "system");
        cJSON_AddStringToObject(o, "content", v->valuestring);
        cJSON_AddItemToArray(msgs, o);
    }
    for (const cJSON *m = ok ? q->conversation->child : NULL; m; m = m->next)
        cJSON_AddItemToArray(msgs, cJSON_Duplicate(m, true));
    static const char *const same[] = {"temperature",
                                       "top_p",
                                       "parallel_tool_calls",
                                       "user",
                                       "seed",
                                       "top_k",
                                       "min_p",
                                       "max_thinking_tokens",
                                       "chat_template_kwargs",
                                       "regex",
                                       "grammar",
                                       NULL};
    for (const char *const *f = same; ok && *f; f++)
        if ((v = member(root, *f))) cJSON_AddItemToObject(out, *f, cJSON_Duplicate(v, true));
    if (ok && (v = member(root, "max_output_tokens")))
        cJSON_AddItemToObject(out, "max_tokens", cJSON_Duplicate(v, true));
    if (ok && (v = member(root, "stream")) && !cJSON_IsBool(v))
        ok = BAD(err, "stream", "'stream' must be a boolean");
    q->stream = ok && cJSON_IsTrue(v);
    ok = ok && map_tools(member(root, "tools"), out, err) &&
         map_tool_choice(member(root, "tool_choice"), out, err) &&
         map_text(member(root, "text"), out, err) &&
         map_reasoning(member(root, "reasoning"), out, err);
    if (ok) cJSON_AddBoolToObject(out, "stream", q->stream);
    if (!ok) cJSON_Delete(out);
    return ok ? out : NULL;
}

/* Removes every ".function" from s (chat's tools[i].function.X is the
 * Responses API's tools[i].X). */
static void drop_function(char *s) {
    for (char *at; (at = strstr(s, ".function"));) memmove(at, at + 9, strlen(at + 9) + 1);
}

/* The Responses API's name for a chat request field, in errors. */
static void rename_param(srv_error *err) {
    if (!strncmp(err->param, "tools[", 6)) {
        drop_function(err->param);
        drop_function(err->message);
        return;
    }
    static const char *const names[][2] = {{"max_tokens", "max_output_tokens"},
                                           {"response_format", "text.format"},
                                           {"reasoning_effort", "reasoning.effort"},
                                           {"messages", "input"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(err->param, names[i][0])) {
            char msg[sizeof err->message];
            snprintf(msg, sizeof msg, "%s: %.480s", names[i][1], err->message);
            snprintf(err->message, sizeof err->message, "%s", msg);
            snprintf(err->param, sizeof err->param, "%s", names[i][1]);
            return;
        }
}

/* The response object without its outcome, echoing what the request set. */
static cJSON *make_shell(const cJSON *root, const resp_req *q, const srv_job *job) {
    cJSON *o = cJSON_CreateObject();
    const cJSON *v;
    cJSON_AddStringToObject(o, "id", q->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)q->created);
    cJSON_AddStringToObject(o, "status", "in_progress");
    cJSON_AddNullToObject(o, "error");
    cJSON_AddNullToObject(o, "incomplete_details");
    v = member(root, "instructions");
    cJSON_AddItemToObject(o, "instructions", v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    v = member(root, "max_output_tokens");
    cJSON_AddItemToObject(o, "max_output_tokens",
                          v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    cJSON_AddStringToObject(o, "model", job->model->id);
    cJSON_AddArrayToObject(o, "output");
    cJSON_AddBoolToObject(o, "parallel_tool_calls", job->req.tools.parallel);
    v = member(root, "previous_response_id");
    cJSON_AddItemToObject(o, "previous_response_id",
                          v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    cJSON *r = cJSON_AddObjectToObject(o, "reasoning");
    cJSON_AddItemToObject(r, "effort",
                          job->req.reasoning.effort ? cJSON_CreateString(job->req.reasoning.effort)
                                                    : cJSON_CreateNull());
    cJSON_AddNullToObject(r, "summary");
    cJSON_AddBoolToObject(o, "store", q->keep);
    cJSON_AddNumberToObject(o, "temperature", job->req.gen.sampling.temperature);
    v = member(root, "text");
    if (v && member(v, "format")) {
        cJSON_AddItemToObject(o, "text", cJSON_Duplicate(v, true));
    } else {
        cJSON *t = cJSON_AddObjectToObject(o, "text"), *f = cJSON_AddObjectToObject(t, "format");
        cJSON_AddStringToObject(f, "type", "text");
    }
    v = member(root, "tool_choice");
    cJSON_AddItemToObject(o, "tool_choice",
                          v ? cJSON_Duplicate(v, true) : cJSON_CreateString("auto"));
    v = member(root, "tools");
    cJSON_AddItemToObject(o, "tools", v ? cJSON_Duplicate(v, true) : cJSON_CreateArray());
    cJSON_AddNumberToObject(o, "top_p", job->req.gen.sampling.top_p);
    cJSON_AddStringToObject(o, "truncation", "disabled");
    v = member(root, "user");
    if (v) cJSON_AddItemToObject(o, "user", cJSON_Duplicate(v, true));
    v = member(root, "metadata");
    cJSON_AddItemToObject(o, "metadata", v ? cJSON_Duplicate(v, true) : cJSON_CreateObject());
    return o;
}

/* ---- output items -------------------------------------------------------------------- */

static void add_text(cJSON *o, const char *name, const char *s, size_t n) {
    char *clean = utf8_sanitize(s ? s : "", s ? n : 0);
    cJSON_AddStringToObject(o, name, clean ? clean : "");
    free(clean);
}

static cJSON *message_item(const char *id, const char *text, size_t len, const char *status) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddStringToObject(o, "role", "assistant");
    if (text) {
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "output_text");
        add_text(part, "text", text, len);
        cJSON_AddArrayToObject(part, "annotations");
        cJSON_AddArrayToObject(part, "logprobs");
        cJSON_AddItemToArray(content, part);
    }
    cJSON_AddItemToObject(o, "content", content);
    return o;
}

static cJSON *reasoning_item(const char *id, const char *text, size_t len) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "reasoning");
    cJSON_AddArrayToObject(o, "summary");
    if (text) {
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "reasoning_text");
        add_text(part, "text", text, len);
        cJSON_AddItemToArray(content, part);
    }
    cJSON_AddItemToObject(o, "content", content);
    return o;
}

static cJSON *call_item(const char *id, const char *call_id, const char *name, const char *args,
                        const char *status) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "function_call");
    cJSON_AddStringToObject(o, "status", status);
    add_text(o, "call_id", call_id, strlen(call_id));
    add_text(o, "name", name, strlen(name));
    add_text(o, "arguments", args, strlen(args));
    return o;
}

/* The first text part of an item's content ("" when none). */
static const char *item_text(const cJSON *item) {
    const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(item, "content"), 0);
    const cJSON *t = part ? cJSON_GetObjectItemCaseSensitive(part, "text") : NULL;
    return cJSON_IsString(t) ? t->valuestring : "";
}

/* The chat message the output items make (for previous_response_id). */
static cJSON *assistant_message(const cJSON *output) {
    cJSON *msg = cJSON_CreateObject(), *calls = NULL;
    cJSON_AddStringToObject(msg, "role", "assistant");
    nu_buf content;
    nu_buf_init(&content);
    for (const cJSON *it = output->child; it; it = it->next) {
        const char *type = cJSON_GetObjectItemCaseSensitive(it, "type")->valuestring;
        if (!strcmp(type, "reasoning") && item_text(it)[0]) {
            cJSON_AddStringToObject(msg, "reasoning_content", item_text(it));
        } else if (!strcmp(type, "message")) {
            nu_buf_puts(&content, item_text(it));
        } else if (!strcmp(type, "function_call")) {
            if (!calls) calls = cJSON_AddArrayToObject(msg, "tool_calls");
            cJSON *c = cJSON_CreateObject(), *fn = cJSON_CreateObject();
            cJSON_AddItemToObject(c, "id",
                                  cJSON_Duplicate(cJSON_GetObjectItem(it, "call_id"), true));
            cJSON_AddStringToObject(c, "type", "function");
            cJSON_AddItemToObject(fn, "name",
                                  cJSON_Duplicate(cJSON_GetObjectItem(it, "name"), true));
            cJSON_AddItemToObject(fn, "arguments",
                                  cJSON_Duplicate(cJSON_GetObjectItem(it, "arguments"), true));
            cJSON_AddItemToObject(c, "function", fn);
            cJSON_AddItemToArray(calls, c);
        }
    }
    cJSON_AddStringToObject(msg, "content", content.data ? content.data : "");
    nu_buf_free(&content);
    return msg;
}

/* The tokens of the thinking in output (its text tokenized again: the
 * engine counts generated tokens, not which of them were thinking). */
static int32_t reasoning_tokens(const srv_job *job, const cJSON *output) {
    int32_t total = 0;
    for (const cJSON *it = output->child; it; it = it->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "reasoning")) continue;
        srv_error err;
        int32_t n = 0, *toks = srv_tokenize(job->model->model, item_text(it), 0, "", &n, &err);
        free(toks);
        total += toks ? n : 0;
    }
    return total;
}

/* Fills the shell's outcome (output is taken over) and stores the
 * response; returns its JSON text (malloc'd, NULL when out of memory). */
static char *finish_response(resp_req *q, const srv_job *job, cJSON *output) {
    cJSON *o = q->shell;
    const nu_generate_result *r = &job->results[0];
    bool incomplete = r->finish == NU_FINISH_LENGTH || r->finish == NU_FINISH_CONTEXT;
    cJSON_ReplaceItemInObjectCaseSensitive(
        o, "status", cJSON_CreateString(incomplete ? "incomplete" : "completed"));
    if (incomplete) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
        cJSON_ReplaceItemInObjectCaseSensitive(o, "incomplete_details", d);
    } else {
        cJSON_AddNumberToObject(o, "completed_at", (double)time(NULL));
    }
    cJSON_AddItemToArray(q->conversation, assistant_message(output));
    cJSON_ReplaceItemInObjectCaseSensitive(o, "output", output);
    int64_t prompt, completion;
    srv_job_usage(job, &prompt, &completion);
    cJSON *u = cJSON_AddObjectToObject(o, "usage"), *d;
    cJSON_AddNumberToObject(u, "input_tokens", (double)prompt);
    d = cJSON_AddObjectToObject(u, "input_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)r->n_cached);
    cJSON_AddNumberToObject(u, "output_tokens", (double)completion);
    d = cJSON_AddObjectToObject(u, "output_tokens_details");
    cJSON_AddNumberToObject(d, "reasoning_tokens", (double)reasoning_tokens(job, output));
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
    char *text = cJSON_PrintUnformatted(o);
    if (q->keep && text)
        store_put(q->store, q->id, strdup(text), cJSON_PrintUnformatted(q->conversation),
                  cJSON_PrintUnformatted(q->input_items));
    return text;
}

/* The output items of a whole answer. */
static cJSON *answer_output(const srv_job *job) {
    const nu_generate_result *r = &job->results[0];
    srv_split_answer a = {0};
    bool split =
        srv_splitter_needed(&job->req) && srv_answer_split(&job->req, r->text, r->text_len, &a);
    cJSON *output = cJSON_CreateArray();
    char id[48];
    if (a.reasoning) {
        new_id("rs_", id, sizeof id);
        cJSON_AddItemToArray(output, reasoning_item(id, a.reasoning, a.reasoning_len));
    }
    const char *text = split ? a.result.content : r->text;
    size_t len = split ? a.result.content_len : r->text_len;
    if (len > 0 || a.result.n_calls == 0) {
        new_id("msg_", id, sizeof id);
        cJSON_AddItemToArray(output, message_item(id, text, len, "completed"));
    }
    for (int32_t i = 0; i < a.result.n_calls; i++) {
        new_id("fc_", id, sizeof id);
        const srv_tool_call *c = &a.result.calls[i];
        cJSON_AddItemToArray(output, call_item(id, c->id, c->name, c->arguments, "completed"));
    }
    srv_answer_free(&a);
    return output;
}

static char *answer_body(const srv_job *job, const void *arg) {
    resp_req *q = (resp_req *)arg;
    return finish_response(q, job, answer_output(job));
}

/* ---- streaming ---------------------------------------------------------------------- */

typedef enum open_kind { OPEN_NONE, OPEN_REASONING, OPEN_MESSAGE, OPEN_CALL } open_kind;

typedef struct resp_stream {
    resp_req *q;
    srv_splitter *split;
    int64_t seq;
    bool started;
    cJSON *output; /* items done */
    open_kind open;
    char item_id[48];
    char call_id[SRV_TOOL_ID_MAX], *call_name;
    nu_buf text; /* the open item's text (or arguments) */
    srv_stream_out out;
} resp_stream;

/* Appends one event (o is deleted): its type, sequence_number and data. */
static void put_event(resp_stream *st, cJSON *o, const char *type) {
    cJSON_AddItemToObject(o, "type", cJSON_CreateString(type));
    cJSON_AddNumberToObject(o, "sequence_number", (double)st->seq++);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) st->out.buf.failed = true;
    nu_buf_printf(&st->out.buf, "event: %s\ndata: %s\n\n", type, s ? s : "{}");
    cJSON_free(s);
}

static cJSON *event_for(resp_stream *st, bool content_index) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", st->item_id);
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(st->output));
    if (content_index) cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

static void put_item_event(resp_stream *st, cJSON *item, const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(st->output));
    cJSON_AddItemToObject(o, "item", item);
    put_event(st, o, type);
}

static cJSON *open_part(open_kind k, const char *text, size_t len) {
    cJSON *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", k == OPEN_MESSAGE ? "output_text" : "reasoning_text");
    add_text(part, "text", text, len);
    if (k == OPEN_MESSAGE) cJSON_AddArrayToObject(part, "annotations");
    return part;
}

/* The current item is complete: its .done events, and it joins output. */
static void close_item(resp_stream *st) {
    const char *text = st->text.data ? st->text.data : "";
    size_t len = st->text.len;
    cJSON *o, *item = NULL;
    if (st->open == OPEN_MESSAGE || st->open == OPEN_REASONING) {
        bool msg = st->open == OPEN_MESSAGE;
        o = event_for(st, true);
        add_text(o, "text", text, len);
        if (msg) cJSON_AddArrayToObject(o, "logprobs");
        put_event(st, o, msg ? "response.output_text.done" : "response.reasoning_text.done");
        o = event_for(st, true);
        cJSON_AddItemToObject(o, "part", open_part(st->open, text, len));
        put_event(st, o, "response.content_part.done");
        item = msg ? message_item(st->item_id, text, len, "completed")
                   : reasoning_item(st->item_id, text, len);
    } else if (st->open == OPEN_CALL) {
        o = event_for(st, false);
        add_text(o, "name", st->call_name, strlen(st->call_name));
        add_text(o, "arguments", text, len);
        put_event(st, o, "response.function_call_arguments.done");
        item = call_item(st->item_id, st->call_id, st->call_name, text, "completed");
    }
    if (item) {
        put_item_event(st, cJSON_Duplicate(item, true), "response.output_item.done");
        cJSON_AddItemToArray(st->output, item);
    }
    free(st->call_name);
    st->call_name = NULL;
    nu_buf_clear(&st->text);
    st->open = OPEN_NONE;
}

static void open_item(resp_stream *st, open_kind k, const srv_tool_event *call) {
    close_item(st);
    st->open = k;
    if (k == OPEN_CALL) {
        new_id("fc_", st->item_id, sizeof st->item_id);
        snprintf(st->call_id, sizeof st->call_id, "%s", call->id);
        st->call_name = strdup(call->name ? call->name : "");
        if (!st->call_name) st->out.buf.failed = true;
        put_item_event(
            st,
            call_item(st->item_id, st->call_id, call->name ? call->name : "", "", "in_progress"),
            "response.output_item.added");
        return;
    }
    new_id(k == OPEN_MESSAGE ? "msg_" : "rs_", st->item_id, sizeof st->item_id);
    put_item_event(st,
                   k == OPEN_MESSAGE ? message_item(st->item_id, NULL, 0, "in_progress")
                                     : reasoning_item(st->item_id, NULL, 0),
                   "response.output_item.added");
    cJSON *o = event_for(st, true);
    cJSON_AddItemToObject(o, "part", open_part(k, "", 0));
    put_event(st, o, "response.content_part.added");
}

/* A piece of the open item's text: a delta event. */
static void put_delta(resp_stream *st, const char *text, size_t len) {
    if (len == 0) return;
    nu_buf_add(&st->text, text, len);
    cJSON *o = event_for(st, st->open != OPEN_CALL);
    add_text(o, "delta", text, len);
    if (st->open == OPEN_MESSAGE) cJSON_AddArrayToObject(o, "logprobs");
    put_event(st, o,
              st->open == OPEN_MESSAGE     ? "response.output_text.delta"
              : st->open == OPEN_REASONING ? "response.reasoning_text.delta"
                                           : "response.function_call_arguments.delta");
}

static bool on_event(void *user, const srv_tool_event *ev) {
    resp_stream *st = user;
    switch (ev->kind) {
    case SRV_TOOL_REASONING:
        if (st->open != OPEN_REASONING) open_item(st, OPEN_REASONING, NULL);
        put_delta(st, ev->text, ev->len);
        break;
    case SRV_TOOL_CONTENT:
        if (ev->len == 0) break;
        if (st->open != OPEN_MESSAGE) open_item(st, OPEN_MESSAGE, NULL);
        put_delta(st, ev->text, ev->len);
        break;
    case SRV_TOOL_CALL: open_item(st, OPEN_CALL, ev); break;
    case SRV_TOOL_ARGS:
        if (st->open == OPEN_CALL) put_delta(st, ev->text, ev->len);
        break;
    }
    return !st->out.buf.failed && !st->text.failed;
}

/* response.created and response.in_progress with the shell. */
static void put_start(resp_stream *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", cJSON_Duplicate(st->q->shell, true));
    put_event(st, o, "response.created");
    o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", cJSON_Duplicate(st->q->shell, true));
    put_event(st, o, "response.in_progress");
}

static void put_end(resp_stream *st, srv_job *job) {
    if (job->failed) {
        cJSON *o = cJSON_CreateObject(), *r = cJSON_Duplicate(st->q->shell, true), *e;
        cJSON_ReplaceItemInObjectCaseSensitive(r, "status", cJSON_CreateString("failed"));
        e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "code", "server_error");
        cJSON_AddStringToObject(e, "message", job->fail_message);
        cJSON_ReplaceItemInObjectCaseSensitive(r, "error", e);
        cJSON_AddItemToObject(o, "response", r);
        put_event(st, o, "response.failed");
        return;
    }
    close_item(st);
    bool answered = false; /* a message or a call */
    for (const cJSON *it = st->output->child; it; it = it->next)
        answered |=
            !strcmp(cJSON_GetObjectItemCaseSensitive(it, "type")->valuestring, "function_call") ||
            !strcmp(cJSON_GetObjectItemCaseSensitive(it, "type")->valuestring, "message");
    if (!answered) { /* an empty answer is an empty message, as when not streamed */
        open_item(st, OPEN_MESSAGE, NULL);
        close_item(st);
    }
    cJSON *output = st->output;
    st->output = NULL;
    char *text = finish_response(st->q, job, output);
    cJSON *r = text ? cJSON_Parse(text) : NULL, *o = cJSON_CreateObject();
    cJSON_free(text);
    if (!r) st->out.buf.failed = true;
    const cJSON *status = r ? cJSON_GetObjectItemCaseSensitive(r, "status") : NULL;
    bool incomplete = cJSON_IsString(status) && !strcmp(status->valuestring, "incomplete");
    cJSON_AddItemToObject(o, "response", r ? r : cJSON_CreateObject());
    put_event(st, o, incomplete ? "response.incomplete" : "response.completed");
}

static bool produce(void *cls) {
    resp_stream *st = cls;
    srv_job *job = st->out.job;
    pthread_mutex_lock(&job->mu);
    bool done = job->done;
    size_t before = st->out.buf.len;
    if (!st->started) {
        put_start(st);
        st->started = true;
    }
    if (!(done && job->failed)) {
        srv_choice *c = &job->choices[0];
        const char *text = c->text ? c->text : "";
        if (st->split) {
            if (!srv_splitter_feed(st->split, text, c->len, done, on_event, st))
                st->out.buf.failed = true;
        } else if (c->len > c->sent) {
            srv_tool_event ev = {
                .kind = SRV_TOOL_CONTENT, .text = text + c->sent, .len = c->len - c->sent};
            on_event(st, &ev);
        }
        c->sent = c->len;
    }
    if (done) {
        put_end(st, job);
        srv_stream_out_end(&st->out);
    }
    pthread_mutex_unlock(&job->mu);
    return st->out.buf.len > before;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    resp_stream *st = cls;
    (void)pos;
    return srv_stream_pump(&st->out, produce, st, buf, max);
}

static void stream_free(void *cls) {
    resp_stream *st = cls;
    srv_job *job = st->out.job;
    srv_splitter_free(st->split);
    cJSON_Delete(st->output);
    free(st->call_name);
    nu_buf_free(&st->text);
    nu_buf_free(&st->out.buf);
    resp_req_free(st->q);
    free(st);
    srv_job_drop(job);
}

static enum MHD_Result answer_stream(struct MHD_Connection *c, srv_conn *cs, srv_job *job,
                                     resp_req *q) {
    enum MHD_Result ret;
    if (!srv_await_start(job, c, cs, &ret)) {
        resp_req_free(q);
        return ret;
    }
    resp_stream *st = calloc(1, sizeof *st);
    if (!st) {
        resp_req_free(q);
        srv_job_drop(job);
        return MHD_NO;
    }
    st->out.job = job;
    st->q = q;
    st->out.client_fd = srv_client_fd(c);
    st->out.completion_tokens = &cs->completion_tokens;
    st->output = cJSON_CreateArray();
    if (!st->output ||
        (srv_splitter_needed(&job->req) && !(st->split = srv_splitter_new(&job->req)))) {
        stream_free(st); /* cancels and releases the job */
        return MHD_NO;
    }
    return srv_answer_stream(c, cs, "text/event-stream", stream_read, st, stream_free);
}

/* ---- the routes --------------------------------------------------------------------- */

static enum MHD_Result handle_create(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    srv_error err;
    srv_model *m = srv_acquire_body_model(s, cs, &err);
    if (!m) return srv_answer_error(c, cs, &err);
    cJSON *root = cJSON_ParseWithLength(cs->body, cs->len); /* checked by the acquire */
    resp_req *q = calloc(1, sizeof *q);
    cJSON *body = NULL;
    if (!root || !q)
        OOM(&err);
    else {
        q->store = s->responses;
        q->created = (long long)time(NULL);
        new_id("resp_", q->id, sizeof q->id);
        body = map_request(root, q, &err);
    }
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    if (body && !text) OOM(&err);
    cJSON_Delete(body);
    srv_request req;
    bool ok = text &&
              srv_parse_request(text, strlen(text), SRV_CHAT, &m->limits, &m->defaults, &req, &err);
    cJSON_free(text);
    srv_job *job = NULL;
    if (!ok) {
        srv_model_release(m);
    } else if ((job = srv_submit(s, m, &req, cs, &err)) != NULL) {
        if (!(q->shell = make_shell(root, q, job))) OOM(&err);
    }
    cJSON_Delete(root);
    if (!job || !q->shell) {
        if (q) resp_req_free(q);
        if (job) {
            srv_job_drop(job);
        }
        rename_param(&err);
        return srv_answer_error(c, cs, &err);
    }
    if (q->stream) return answer_stream(c, cs, job, q);
    enum MHD_Result ret = srv_answer_job(c, cs, job, answer_body, q);
    resp_req_free(q);
    return ret;
}

static enum MHD_Result not_found(struct MHD_Connection *c, srv_conn *cs, const char *id) {
    srv_error err;
    srv_fail(&err, 404, "invalid_request_error", NULL, NULL, "Response with id '%.60s' not found.",
             id);
    return srv_answer_error(c, cs, &err);
}

/* GET /v1/responses/{id}/input_items's query: limit, order, after, include. */
typedef struct items_query {
    long limit;
    bool asc;
    const char *after;
    srv_error *err;
    bool bad;
} items_query;

static const char *const includable[] = {"file_search_call.results",
                                         "web_search_call.results",
                                         "web_search_call.action.sources",
                                         "message.input_image.image_url",
                                         "computer_call_output.output.image_url",
                                         "code_interpreter_call.outputs",
                                         "reasoning.encrypted_content",
                                         "message.output_text.logprobs",
                                         NULL};

static enum MHD_Result on_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
    items_query *q = cls;
    (void)kind;
    if (q->bad) return MHD_NO;
    const char *v = value ? value : "";
    if (!strcmp(key, "limit")) {
        char *end;
        q->limit = strtol(v, &end, 10);
        if (!*v || *end || q->limit < 1 || q->limit > 100)
            q->bad =
                !BAD(q->err, "limit", "limit must be an integer from 1 to 100 (got '%.40s')", v);
    } else if (!strcmp(key, "order")) {
        q->asc = !strcmp(v, "asc");
        if (!q->asc && strcmp(v, "desc"))
            q->bad = !BAD(q->err, "order", "order must be 'asc' or 'desc' (got '%.40s')", v);
    } else if (!strcmp(key, "after")) {
        q->after = v;
    } else if (!strcmp(key, "include") || !strcmp(key, "include[]")) {
        bool known = false;
        for (const char *const *f = includable; *f && !known; f++) known = !strcmp(*f, v);
        if (!known) q->bad = !BAD(q->err, "include", "include: unknown value '%.60s'", v);
    } else {
        q->bad = !BAD(q->err, key, "unknown query parameter '%.60s'", key);
    }
    return q->bad ? MHD_NO : MHD_YES;
}

/* The input items of a stored response, a page of them: newest first
 * unless order=asc, limit of them (20 by default), those after the item
 * 'after' names. */
static enum MHD_Result list_input_items(struct MHD_Connection *c, srv_conn *cs, srv_state *s,
                                        const char *url_id, ptrdiff_t id_len) {
    char id[128];
    srv_error err;
    items_query q = {.limit = 20, .err = &err};
    if (id_len >= (ptrdiff_t)sizeof id) return not_found(c, cs, url_id);
    memcpy(id, url_id, (size_t)id_len);
    id[id_len] = 0;
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, on_query, &q);
    if (q.bad) return srv_answer_error(c, cs, &err);
    bool oom;
    char *text = store_get(s->responses, id, STORED_INPUT_ITEMS, &oom);
    cJSON *items = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!items) {
        if (!oom && !text) return not_found(c, cs, id);
        return srv_answer_error(c, cs, (OOM(&err), &err));
    }
    int n = cJSON_GetArraySize(items), start = 0;
    if (q.after) { /* the page starts after that item, in the order asked for */
        start = -1;
        for (int i = 0; i < n && start < 0; i++) {
            const cJSON *it = cJSON_GetArrayItem(items, q.asc ? i : n - 1 - i);
            const cJSON *iid = cJSON_GetObjectItemCaseSensitive(it, "id");
            if (cJSON_IsString(iid) && !strcmp(iid->valuestring, q.after)) start = i + 1;
        }
        if (start < 0) {
            cJSON_Delete(items);
            BAD(&err, "after", "after: no input item '%.60s' in response '%.60s'", q.after, id);
            return srv_answer_error(c, cs, &err);
        }
    }
    cJSON *o = cJSON_CreateObject(), *data = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToObject(o, "data", data);
    int end = start + (int)q.limit < n ? start + (int)q.limit : n;
    for (int i = start; i < end; i++)
        cJSON_AddItemToArray(
            data, cJSON_Duplicate(cJSON_GetArrayItem(items, q.asc ? i : n - 1 - i), true));
    const cJSON *first = cJSON_GetArrayItem(data, 0),
                *last = cJSON_GetArrayItem(data, end - start - 1);
    cJSON *fid = cJSON_GetObjectItemCaseSensitive(first, "id"),
          *lid = cJSON_GetObjectItemCaseSensitive(last, "id");
    cJSON_AddItemToObject(o, "first_id", fid ? cJSON_Duplicate(fid, false) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "last_id", lid ? cJSON_Duplicate(lid, false) : cJSON_CreateNull());
    cJSON_AddBoolToObject(o, "has_more", end < n);
    cJSON_Delete(items);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!body) return srv_answer_error(c, cs, (OOM(&err), &err));
    return srv_answer(c, cs, 200, body, NULL);
}

enum MHD_Result srv_responses_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                     const char *url) {
    if (cs->route->id == ROUTE_RESPONSES) return handle_create(s, c, cs);
    const char *id = url + strlen(cs->route->path);
    if (cs->route->id == ROUTE_RESPONSE_DELETE) {
        if (!store_delete(s->responses, id)) return not_found(c, cs, id);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "object", "response.deleted");
        cJSON_AddBoolToObject(o, "deleted", true);
        char *body = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return srv_answer(c, cs, 200, body, NULL);
    }
    const char *sub = strchr(id, '/');
    if (sub && !strcmp(sub, "/input_items")) return list_input_items(c, cs, s, id, sub - id);
    bool oom;
    char *body = store_get(s->responses, id, STORED_RESPONSE, &oom);
    if (!body && oom) {
        srv_error err;
        OOM(&err);
        return srv_answer_error(c, cs, &err);
    }
    return body ? srv_answer(c, cs, 200, body, NULL) : not_found(c, cs, id);
}
