/* anthropic.c - Anthropic's Messages API on top of the chat-completions
 * machinery: the request translated, the answer written as Anthropic's
 * message or stream of events. */
#include "anthropic.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "http.h"
#include "models.h"
#include "reasoning.h"
#include "request.h"
#include "sse.h"
#include "text_check.h"
#include "tools.h"

/* ---- reading JSON -------------------------------------------------------- */

/* The member name of obj, or NULL when it is absent or null (the API makes
 * most fields nullable). */
static const cJSON *member(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool in_list(const char *const *list, const char *name) {
    for (; *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

/* Copies src's member name (when present and not null) into dst as
 * new_name; false when out of memory. */
static bool copy_member(cJSON *dst, const cJSON *src, const char *name, const char *new_name) {
    const cJSON *v = member(src, name);
    if (!v) return true;
    cJSON *copy = cJSON_Duplicate(v, true);
    if (!copy || !cJSON_AddItemToObject(dst, new_name, copy)) return cJSON_Delete(copy), false;
    return true;
}

/* A 400 naming the field. */
#define BAD(err, param, ...) srv_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

static bool out_of_memory(srv_error *err) {
    return srv_fail(err, 500, "api_error", NULL, NULL, "out of memory");
}

/* Refuses members of obj that are not allowed (Anthropic's wording). */
static bool only_members(const cJSON *obj, const char *const *allowed, const char *where,
                         srv_error *err) {
    const cJSON *v = obj->child;
    while (v && in_list(allowed, v->string)) v = v->next;
    return !v || BAD(err, v->string, "%s%s%.60s: Extra inputs are not permitted", where,
                     where[0] ? "." : "", v->string);
}

/* ---- content blocks ------------------------------------------------------ */

/* Appends a text block's text (blocks are joined by a blank line). */
static bool add_text_block(const cJSON *block, nu_buf *text, const char *where, srv_error *err) {
    static const char *const allowed[] = {"type", "text", "cache_control", "citations", NULL};
    const cJSON *t = member(block, "text");
    if (!only_members(block, allowed, where, err)) return false;
    if (!cJSON_IsString(t)) return BAD(err, "messages", "%s.text: a string is required", where);
    if (text->len) nu_buf_puts(text, "\n\n");
    nu_buf_puts(text, t->valuestring);
    return true;
}

/* The text of content: a string or text blocks (only those). */
static bool text_of(const cJSON *content, nu_buf *text, const char *where, srv_error *err) {
    if (cJSON_IsString(content)) {
        nu_buf_puts(text, content->valuestring);
        return true;
    }
    if (!cJSON_IsArray(content))
        return BAD(err, "messages", "%s: a string or a list of content blocks is required", where);
    for (const cJSON *b = content->child; b; b = b->next) {
        const cJSON *type = member(b, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text"))
            return BAD(err, "messages", "%s: only text blocks are allowed here", where);
        if (!add_text_block(b, text, where, err)) return false;
    }
    return true;
}

/* A block type nucleus cannot read (images, documents, server tools). */
static bool unsupported_block(const char *type, srv_error *err) {
    return srv_fail(err, 400, "invalid_request_error", "not_supported", "messages",
                    "content blocks of type '%.40s' are not supported (text, tool_use, "
                    "tool_result and thinking only)",
                    type);
}

/* {"role", "content"} appended to out. */
static bool add_message(cJSON *out, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    bool ok = m && cJSON_AddStringToObject(m, "role", role) &&
              cJSON_AddStringToObject(m, "content", content) && cJSON_AddItemToArray(out, m);
    if (!ok) cJSON_Delete(m);
    return ok;
}

/* A tool_result block: a message with role "tool". */
static bool add_tool_result(const cJSON *b, cJSON *out, const char *where, srv_error *err) {
    static const char *const allowed[] = {"type",     "tool_use_id",   "content",
                                          "is_error", "cache_control", NULL};
    if (!only_members(b, allowed, where, err)) return false;
    const cJSON *id = member(b, "tool_use_id"), *content = member(b, "content");
    const cJSON *is_error = member(b, "is_error");
    if (!cJSON_IsString(id))
        return BAD(err, "messages", "%s.tool_use_id: a string is required", where);
    if (is_error && !cJSON_IsBool(is_error))
        return BAD(err, "messages", "%s.is_error: a boolean is required", where);
    nu_buf text = {0};
    if (cJSON_IsTrue(is_error)) nu_buf_puts(&text, "Error: ");
    bool ok = !content || text_of(content, &text, where, err);
    cJSON *m = ok ? cJSON_CreateObject() : NULL;
    if (ok)
        ok = (m && cJSON_AddStringToObject(m, "role", "tool") &&
              cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) &&
              cJSON_AddStringToObject(m, "content", text.data ? text.data : "") &&
              cJSON_AddItemToArray(out, m)) ||
             (cJSON_Delete(m), out_of_memory(err));
    nu_buf_free(&text);
    return ok;
}

/* A user message: tool results become tool messages, in order, and the
 * text a user message after them. */
static bool user_message(const cJSON *content, cJSON *out, const char *where, srv_error *err) {
    nu_buf text = {0};
    bool ok = true;
    if (cJSON_IsString(content) || !cJSON_IsArray(content)) {
        ok = text_of(content, &text, where, err);
    } else {
        int i = 0;
        for (const cJSON *b = content->child; ok && b; b = b->next, i++) {
            char at[96];
            snprintf(at, sizeof at, "%s.content.%d", where, i);
            const cJSON *type = member(b, "type");
            if (!cJSON_IsObject(b) || !cJSON_IsString(type))
                ok = BAD(err, "messages", "%s: a content block with a 'type' is required", at);
            else if (!strcmp(type->valuestring, "text"))
                ok = add_text_block(b, &text, at, err);
            else if (!strcmp(type->valuestring, "tool_result"))
                ok = add_tool_result(b, out, at, err);
            else
                ok = unsupported_block(type->valuestring, err);
        }
    }
    if (ok && (text.len || !cJSON_IsArray(content) || !content->child))
        ok = add_message(out, "user", text.data ? text.data : "") || out_of_memory(err);
    if (text.failed) ok = out_of_memory(err);
    nu_buf_free(&text);
    return ok;
}

/* A tool_use block as an OpenAI tool call. */
static bool add_tool_use(const cJSON *b, cJSON *calls, const char *where, srv_error *err) {
    static const char *const allowed[] = {"type", "id", "name", "input", "cache_control", NULL};
    if (!only_members(b, allowed, where, err)) return false;
    const cJSON *id = member(b, "id"), *name = member(b, "name"), *input = member(b, "input");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input))
        return BAD(err, "messages",
                   "%s: 'id' and 'name' strings and an 'input' object are required", where);
    char *args = cJSON_PrintUnformatted(input);
    cJSON *c = cJSON_CreateObject(), *fn = NULL;
    bool ok = args && c && cJSON_AddStringToObject(c, "id", id->valuestring) &&
              cJSON_AddStringToObject(c, "type", "function") &&
              (fn = cJSON_AddObjectToObject(c, "function")) &&
              cJSON_AddStringToObject(fn, "name", name->valuestring) &&
              cJSON_AddStringToObject(fn, "arguments", args) && cJSON_AddItemToArray(calls, c);
    if (!ok) cJSON_Delete(c);
    cJSON_free(args);
    return ok || out_of_memory(err);
}

/* An assistant message: text, tool_use blocks as tool_calls, thinking as
 * reasoning_content (redacted thinking cannot be read and is left out). */
static bool assistant_message(const cJSON *content, cJSON *out, const char *where, srv_error *err) {
    nu_buf text = {0}, thinking = {0};
    cJSON *calls = cJSON_CreateArray();
    bool ok = calls != NULL;
    if (ok && !cJSON_IsArray(content)) ok = text_of(content, &text, where, err);
    int i = 0;
    for (const cJSON *b = cJSON_IsArray(content) ? content->child : NULL; ok && b;
         b = b->next, i++) {
        char at[96];
        snprintf(at, sizeof at, "%s.content.%d", where, i);
        const cJSON *type = member(b, "type");
        static const char *const thinking_members[] = {"type", "thinking", "signature", NULL};
        if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
            ok = BAD(err, "messages", "%s: a content block with a 'type' is required", at);
        } else if (!strcmp(type->valuestring, "text")) {
            ok = add_text_block(b, &text, at, err);
        } else if (!strcmp(type->valuestring, "tool_use")) {
            ok = add_tool_use(b, calls, at, err);
        } else if (!strcmp(type->valuestring, "thinking")) {
            const cJSON *t = member(b, "thinking");
            ok = only_members(b, thinking_members, at, err) &&
                 (cJSON_IsString(t) ||
                  BAD(err, "messages", "%s.thinking: a string is required", at));
            if (ok) nu_buf_puts(&thinking, t->valuestring);
        } else if (strcmp(type->valuestring, "redacted_thinking")) {
            ok = unsupported_block(type->valuestring, err);
        }
    }
    cJSON *m = ok ? cJSON_CreateObject() : NULL;
    if (ok)
        ok = (m && cJSON_AddStringToObject(m, "role", "assistant") &&
              cJSON_AddStringToObject(m, "content", text.data ? text.data : "") &&
              (!thinking.data || cJSON_AddStringToObject(m, "reasoning_content", thinking.data)) &&
              (!calls->child || cJSON_AddItemToObject(m, "tool_calls", calls)) &&
              cJSON_AddItemToArray(out, m)) ||
             (cJSON_Delete(m), out_of_memory(err));
    if (!ok || !calls->child || !m) cJSON_Delete(calls);
    if (text.failed || thinking.failed) ok = out_of_memory(err);
    nu_buf_free(&text), nu_buf_free(&thinking);
    return ok;
}

/* system (a string or text blocks) and messages, into OpenAI messages. */
static bool translate_messages(const cJSON *root, cJSON *req, srv_error *err) {
    const cJSON *msgs = member(root, "messages"), *system = member(root, "system");
    cJSON *out = cJSON_AddArrayToObject(req, "messages");
    if (!out) return out_of_memory(err);
    if (system) {
        nu_buf text = {0};
        bool ok = text_of(system, &text, "system", err);
        if (ok) ok = add_message(out, "system", text.data ? text.data : "") || out_of_memory(err);
        nu_buf_free(&text);
        if (!ok) return false;
    }
    if (!cJSON_IsArray(msgs) || !msgs->child)
        return BAD(err, "messages", "messages: a non-empty list of messages is required");
    int i = 0;
    const cJSON *last = NULL;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        static const char *const allowed[] = {"role", "content", NULL};
        char where[48];
        snprintf(where, sizeof where, "messages.%d", i);
        const cJSON *role = member(m, "role"), *content = member(m, "content");
        if (!cJSON_IsObject(m) || !only_members(m, allowed, where, err)) {
            if (!cJSON_IsObject(m)) BAD(err, "messages", "%s: an object is required", where);
            return false;
        }
        if (!content) return BAD(err, "messages", "%s.content: Field required", where);
        bool user = cJSON_IsString(role) && !strcmp(role->valuestring, "user");
        bool assistant = cJSON_IsString(role) && !strcmp(role->valuestring, "assistant");
        if (!user && !assistant)
            return BAD(err, "messages", "%s.role: Input should be 'user' or 'assistant'", where);
        if (!(user ? user_message(content, out, where, err)
                   : assistant_message(content, out, where, err)))
            return false;
        last = role;
    }
    if (!strcmp(last->valuestring, "assistant"))
        return srv_fail(err, 400, "invalid_request_error", "not_supported", "messages",
                        "a final assistant message (a prefill to continue) is not supported: the "
                        "last message must be the user's");
    return true;
}

/* ---- tools --------------------------------------------------------------- */

static bool translate_tools(const cJSON *root, cJSON *req, srv_error *err) {
    const cJSON *tools = member(root, "tools");
    if (!tools) return true;
    if (!cJSON_IsArray(tools)) return BAD(err, "tools", "tools: a list is required");
    cJSON *out = cJSON_AddArrayToObject(req, "tools");
    if (!out) return out_of_memory(err);
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        static const char *const allowed[] = {"type",         "name",          "description",
                                              "input_schema", "cache_control", NULL};
        char where[32];
        snprintf(where, sizeof where, "tools.%d", i);
        const cJSON *type = member(t, "type"), *schema = member(t, "input_schema");
        if (!cJSON_IsObject(t)) return BAD(err, "tools", "%s: an object is required", where);
        if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom")))
            return srv_fail(err, 400, "invalid_request_error", "not_supported", "tools",
                            "%s: tools of type '%.40s' are not supported (custom tools only)",
                            where, cJSON_IsString(type) ? type->valuestring : "?");
        if (!only_members(t, allowed, where, err)) return false;
        if (!schema) return BAD(err, "tools", "%s.input_schema: Field required", where);
        cJSON *o = cJSON_CreateObject(), *fn = NULL;
        bool ok = o && cJSON_AddStringToObject(o, "type", "function") &&
                  (fn = cJSON_AddObjectToObject(o, "function")) &&
                  copy_member(fn, t, "name", "name") &&
                  copy_member(fn, t, "description", "description") &&
                  copy_member(fn, t, "input_schema", "parameters") && cJSON_AddItemToArray(out, o);
        if (!ok) return cJSON_Delete(o), out_of_memory(err);
    }
    return true;
}

/* tool_choice: {"type": "auto" | "any" | "tool" | "none", "name",
 * "disable_parallel_tool_use"}. */
static bool translate_tool_choice(const cJSON *root, cJSON *req, srv_error *err) {
    static const char *const allowed[] = {"type", "name", "disable_parallel_tool_use", NULL};
    const cJSON *tc = member(root, "tool_choice");
    if (!tc) return true;
    const cJSON *type = member(tc, "type"), *name = member(tc, "name");
    const cJSON *serial = member(tc, "disable_parallel_tool_use");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(type))
        return BAD(err, "tool_choice", "tool_choice: an object with a 'type' is required");
    if (!only_members(tc, allowed, "tool_choice", err)) return false;
    if (serial && !cJSON_IsBool(serial))
        return BAD(err, "tool_choice",
                   "tool_choice.disable_parallel_tool_use: a boolean is required");
    const char *t = type->valuestring;
    bool ok;
    if (!strcmp(t, "auto") || !strcmp(t, "none")) {
        ok = cJSON_AddStringToObject(req, "tool_choice", t) != NULL;
    } else if (!strcmp(t, "any")) {
        ok = cJSON_AddStringToObject(req, "tool_choice", "required") != NULL;
    } else if (!strcmp(t, "tool")) {
        if (!cJSON_IsString(name))
            return BAD(err, "tool_choice", "tool_choice.name: Field required");
        cJSON *o = cJSON_AddObjectToObject(req, "tool_choice"), *fn = NULL;
        ok = o && cJSON_AddStringToObject(o, "type", "function") &&
             (fn = cJSON_AddObjectToObject(o, "function")) &&
             cJSON_AddStringToObject(fn, "name", name->valuestring);
    } else {
        return BAD(err, "tool_choice",
                   "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'");
    }
    if (ok && cJSON_IsTrue(serial)) ok = cJSON_AddFalseToObject(req, "parallel_tool_calls") != NULL;
    return ok || out_of_memory(err);
}

/* ---- the rest ------------------------------------------------------------ */

/* thinking: {"type": "enabled", "budget_tokens"} is the thinking budget,
 * {"type": "disabled"} the template's switch turned off. */
static bool translate_thinking(const cJSON *root, cJSON *req, srv_error *err) {
    static const char *const allowed[] = {"type", "budget_tokens", NULL};
    const cJSON *th = member(root, "thinking");
    if (!th) return true;
    const cJSON *type = member(th, "type"), *budget = member(th, "budget_tokens");
    if (!cJSON_IsObject(th) || !cJSON_IsString(type))
        return BAD(err, "thinking", "thinking: an object with a 'type' is required");
    if (!only_members(th, allowed, "thinking", err)) return false;
    if (!strcmp(type->valuestring, "disabled"))
        return cJSON_AddStringToObject(req, "reasoning_effort", "none") || out_of_memory(err);
    if (strcmp(type->valuestring, "enabled"))
        return BAD(err, "thinking", "thinking.type: Input should be 'enabled' or 'disabled'");
    if (!cJSON_IsNumber(budget) || budget->valuedouble < 1 ||
        budget->valuedouble != (double)(int32_t)budget->valuedouble)
        return BAD(err, "thinking.budget_tokens",
                   "thinking.budget_tokens: a whole number of at least 1 is required");
    const cJSON *max = member(root, "max_tokens");
    if (cJSON_IsNumber(max) && budget->valuedouble >= max->valuedouble)
        return BAD(err, "thinking.budget_tokens",
                   "thinking.budget_tokens (%.0f) must be less than max_tokens (%.0f)",
                   budget->valuedouble, max->valuedouble);
    return cJSON_AddNumberToObject(req, "max_thinking_tokens", budget->valuedouble) ||
           out_of_memory(err);
}

/* metadata: {"user_id"} is the OpenAI user. */
static bool translate_metadata(const cJSON *root, cJSON *req, srv_error *err) {
    static const char *const allowed[] = {"user_id", NULL};
    const cJSON *meta = member(root, "metadata");
    if (!meta) return true;
    if (!cJSON_IsObject(meta)) return BAD(err, "metadata", "metadata: an object is required");
    if (!only_members(meta, allowed, "metadata", err)) return false;
    return copy_member(req, meta, "user_id", "user") || out_of_memory(err);
}

/* The fields of a Messages body (count_tokens takes the ones that shape the
 * prompt); nucleus's extensions (min_p, grammar, seed, ...) pass as they are. */
static const char *const message_fields[] = {
    "model",       "messages", "system",   "max_tokens",     "temperature",
    "top_p",       "top_k",    "stream",   "stop_sequences", "tools",
    "tool_choice", "thinking", "metadata", "service_tier",   NULL};
static const char *const count_fields[] = {"model",       "messages", "system", "tools",
                                           "tool_choice", "thinking", NULL};

static bool check_fields(const cJSON *root, bool count, srv_error *err) {
    for (const cJSON *v = root->child; v; v = v->next) {
        const char *name = v->string;
        if (in_list(count ? count_fields : message_fields, name)) continue;
        if (!count && srv_is_extension_field(name)) continue;
        return BAD(err, name, "%.60s: Extra inputs are not permitted", name);
    }
    return true;
}

/* The sampling fields, with Anthropic's ranges. */
static bool translate_sampling(const cJSON *root, cJSON *req, srv_error *err) {
    const cJSON *max = member(root, "max_tokens"), *temp = member(root, "temperature");
    const cJSON *tier = member(root, "service_tier");
    if (!max) return BAD(err, "max_tokens", "max_tokens: Field required");
    if (!cJSON_IsNumber(max) || max->valuedouble < 1)
        return BAD(err, "max_tokens", "max_tokens: a whole number of at least 1 is required");
    const cJSON *stops = member(root, "stop_sequences");
    if (stops && !cJSON_IsArray(stops))
        return BAD(err, "stop_sequences", "stop_sequences: a list of strings is required");
    if (temp && (!cJSON_IsNumber(temp) || temp->valuedouble < 0 || temp->valuedouble > 1))
        return BAD(err, "temperature", "temperature: a number from 0 to 1 is required");
    if (tier && (!cJSON_IsString(tier) ||
                 (strcmp(tier->valuestring, "auto") && strcmp(tier->valuestring, "standard_only"))))
        return BAD(err, "service_tier", "service_tier: Input should be 'auto' or 'standard_only'");
    /* extensions, then the fields that keep their names or change them */
    for (const cJSON *v = root->child; v; v = v->next)
        if (srv_is_extension_field(v->string) && !copy_member(req, root, v->string, v->string))
            return out_of_memory(err);
    return (copy_member(req, root, "max_tokens", "max_tokens") &&
            copy_member(req, root, "temperature", "temperature") &&
            copy_member(req, root, "top_p", "top_p") &&
            copy_member(req, root, "stream", "stream") &&
            copy_member(req, root, "stop_sequences", "stop")) ||
           out_of_memory(err);
}

char *srv_anthropic_translate(const char *body, size_t len, bool count, srv_error *err) {
    cJSON *root = len ? cJSON_ParseWithLength(body, len) : NULL;
    cJSON *req = cJSON_CreateObject();
    bool ok = req != NULL || out_of_memory(err);
    if (ok && !cJSON_IsObject(root)) ok = BAD(err, NULL, "the request body must be a JSON object");
    const cJSON *model = ok ? member(root, "model") : NULL;
    if (ok) ok = check_fields(root, count, err);
    if (ok && !cJSON_IsString(model)) ok = BAD(err, "model", "model: Field required (a string)");
    if (ok) ok = copy_member(req, root, "model", "model") || out_of_memory(err);
    if (ok && !count) ok = translate_sampling(root, req, err) && translate_metadata(root, req, err);
    if (ok)
        ok = translate_messages(root, req, err) && translate_tools(root, req, err) &&
             translate_tool_choice(root, req, err) && translate_thinking(root, req, err);
    char *out = ok ? cJSON_PrintUnformatted(req) : NULL;
    if (ok && !out) out_of_memory(err);
    cJSON_Delete(root);
    cJSON_Delete(req);
    return out;
}

/* ---- errors -------------------------------------------------------------- */

void srv_anthropic_rename_error(srv_error *err) {
    static const char *const renames[][2] = {
        {"stop", "stop_sequences"},
        {"user", "metadata.user_id"},
        {"max_thinking_tokens", "thinking.budget_tokens"},
        {"reasoning_effort", "thinking"},
        {"parallel_tool_calls", "tool_choice"},
    };
    /* a prompt over the context is Anthropic's 400 ("prompt is too long"),
     * its 413 being for bodies over the size limit */
    if (err->code && !strcmp(err->code, "context_length_exceeded")) err->status = 400;
    char msg[sizeof err->message];
    for (size_t i = 0; i < sizeof renames / sizeof *renames; i++) {
        if (strcmp(err->param, renames[i][0])) continue;
        snprintf(err->param, sizeof err->param, "%s", renames[i][1]);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", renames[i][0]);
        char *at = strstr(err->message, quoted);
        if (at) {
            snprintf(msg, sizeof msg, "%.*s'%s'%s", (int)(at - err->message), err->message,
                     renames[i][1], at + strlen(quoted));
            memcpy(err->message, msg, sizeof msg);
        }
        return;
    }
    /* tools[i].function.parameters -> tools[i].input_schema */
    char *fn = strstr(err->param, ".function.parameters");
    if (!strncmp(err->param, "tools[", 6) && fn) strcpy(fn, ".input_schema");
}

/* Anthropic's error type for an HTTP status. */
static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *srv_anthropic_error_json(const srv_error *err) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "type", "error");
    cJSON_AddItemToObject(root, "error", e);
    cJSON_AddStringToObject(e, "type", error_type(err->status));
    char *clean = utf8_sanitize(err->message, strlen(err->message));
    cJSON_AddStringToObject(e, "message", clean ? clean : "");
    free(clean);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ---- the answer ------------------------------------------------------------- */

/* Anthropic's id for one of ours: "msg_..." or "toolu_..." for "call_...". */
static void api_id(const char *prefix, const char *call_id, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", prefix, strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
}

/* stop_reason of the answer, and the stop sequence that ended it (or NULL). */
static const char *stop_reason(const srv_job *job, int32_t n_calls, const char **sequence) {
    const nu_generate_result *r = &job->results[0];
    *sequence = NULL;
    if (r->finish == NU_FINISH_LENGTH || r->finish == NU_FINISH_CONTEXT) return "max_tokens";
    if (n_calls > 0) return "tool_use";
    /* the request's stop strings come first in the job's (then the template's end of turn) */
    if (r->finish == NU_FINISH_STOP && r->stop_index >= 0 && r->stop_index < job->req.gen.n_stop) {
        *sequence = job->req.stop[r->stop_index];
        return "stop_sequence";
    }
    return "end_turn";
}

/* usage: the prompt tokens read (input_tokens) and those reused from the
 * cache (cache_read_input_tokens) make up the prompt. */
static cJSON *usage_json(const srv_job *job) {
    int64_t prompt, completion;
    srv_job_usage(job, &prompt, &completion);
    int64_t cached = job->results ? job->results[0].n_cached : 0;
    if (cached > prompt) cached = prompt;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", (double)(prompt - cached));
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", (double)cached);
    cJSON_AddNumberToObject(u, "output_tokens", (double)completion);
    return u;
}

/* Adds a string member made valid UTF-8 (n bytes of s). */
static void add_clean(cJSON *o, const char *name, const char *s, size_t n) {
    char *clean = utf8_sanitize(s ? s : "", s ? n : 0);
    cJSON_AddStringToObject(o, name, clean ? clean : "");
    free(clean);
}

static void add_stop(cJSON *o, const srv_job *job, int32_t n_calls) {
    const char *seq, *why = stop_reason(job, n_calls, &seq);
    cJSON_AddStringToObject(o, "stop_reason", why);
    if (seq)
        add_clean(o, "stop_sequence", seq, strlen(seq));
    else
        cJSON_AddNullToObject(o, "stop_sequence");
}

/* {"id", "type": "message", "role", "model"}. */
static cJSON *message_head(const char *id, const srv_job *job) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", job->model->id);
    return m;
}

/* A tool_use block (input: the arguments' JSON, or {} while streaming). */
static cJSON *tool_use_json(const char *call_id, const char *name, const char *args) {
    char id[SRV_TOOL_ID_MAX + 8];
    api_id("toolu_", call_id, id, sizeof id);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    add_clean(b, "name", name, strlen(name));
    cJSON *input = args ? cJSON_Parse(args) : NULL;
    if (!cJSON_IsObject(input)) cJSON_Delete(input), input = cJSON_CreateObject();
    cJSON_AddItemToObject(b, "input", input);
    return b;
}

/* A text or thinking block (thinking has a signature, which nucleus leaves empty). */
static cJSON *text_block(bool thinking, const char *s, size_t n) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", thinking ? "thinking" : "text");
    add_clean(b, thinking ? "thinking" : "text", s, n);
    if (thinking) cJSON_AddStringToObject(b, "signature", "");
    return b;
}

/* The whole message: thinking, text and tool_use blocks. */
static char *message_json(const srv_job *job, const void *arg) {
    const nu_generate_result *r = &job->results[0];
    srv_split_answer a;
    if (!srv_answer_split(&job->req, r->text, r->text_len, &a)) return NULL;
    cJSON *m = message_head(arg, job), *content = cJSON_AddArrayToObject(m, "content");
    if (a.reasoning) cJSON_AddItemToArray(content, text_block(true, a.reasoning, a.reasoning_len));
    if (a.result.content_len || (!a.reasoning && !a.result.n_calls))
        cJSON_AddItemToArray(content, text_block(false, a.result.content, a.result.content_len));
    for (int32_t i = 0; i < a.result.n_calls; i++)
        cJSON_AddItemToArray(content, tool_use_json(a.result.calls[i].id, a.result.calls[i].name,
                                                    a.result.calls[i].arguments));
    add_stop(m, job, a.result.n_calls);
    cJSON_AddItemToObject(m, "usage", usage_json(job));
    srv_answer_free(&a);
    char *s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return s;
}

/* ---- streaming --------------------------------------------------------------- */

/* A streamed message: Anthropic's server-sent events, made from the job's
 * text as the splitter releases it (reasoning.h). */
typedef struct msg_stream {
    char id[48];
    srv_splitter *split;
    bool began;
    int32_t block;      /* the open block's index (-1 before the first) */
    int kind;           /* its kind: SRV_TOOL_REASONING / CONTENT / CALL, -1 when closed */
    srv_stream_out out; /* events not yet handed to MHD */
} msg_stream;

/* An event's object, its "type" first. */
static cJSON *event(const char *type) {
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddStringToObject(o, "type", type)) cJSON_Delete(o), o = NULL;
    return o;
}

/* Appends "event: TYPE\ndata: {...}\n\n" (o is deleted). */
static void put(msg_stream *st, cJSON *o) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    char *json = o ? cJSON_PrintUnformatted(o) : NULL;
    if (!json) st->out.buf.failed = true;
    nu_buf_printf(&st->out.buf, "event: %s\ndata: %s\n\n",
                  cJSON_IsString(type) ? type->valuestring : "error", json ? json : "{}");
    cJSON_Delete(o);
    cJSON_free(json);
}

static void close_block(msg_stream *st) {
    if (st->kind < 0) return;
    cJSON *o = event("content_block_stop");
    cJSON_AddNumberToObject(o, "index", st->block);
    put(st, o);
    st->kind = -1;
}

/* content_block_start of the next block (block is taken over). */
static void open_block(msg_stream *st, int kind, cJSON *block) {
    close_block(st);
    cJSON *o = event("content_block_start");
    cJSON_AddNumberToObject(o, "index", ++st->block);
    cJSON_AddItemToObject(o, "content_block", block);
    put(st, o);
    st->kind = kind;
}

/* message_start (an empty message, usage so far) and a ping. */
static void put_start(msg_stream *st) {
    cJSON *m = message_head(st->id, st->out.job), *o = event("message_start");
    cJSON_AddItemToObject(m, "content", cJSON_CreateArray());
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", st->out.job->n_prompt_tokens[0]);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", 0);
    cJSON_AddNumberToObject(u, "output_tokens", 0);
    cJSON_AddItemToObject(m, "usage", u);
    cJSON_AddItemToObject(o, "message", m);
    put(st, o);
    put(st, event("ping"));
    st->block = -1, st->kind = -1;
}

/* The splitter's events: a block opens when the kind changes (or a call
 * begins), its pieces go out as deltas. */
static bool on_event(void *user, const srv_tool_event *ev) {
    msg_stream *st = user;
    int kind = ev->kind == SRV_TOOL_ARGS ? SRV_TOOL_CALL : (int)ev->kind;
    if (ev->kind == SRV_TOOL_CALL) {
        open_block(st, kind, tool_use_json(ev->id, ev->name, NULL));
        return !st->out.buf.failed;
    }
    if (ev->len == 0) return true;
    if (kind != st->kind) open_block(st, kind, text_block(kind == SRV_TOOL_REASONING, "", 0));
    cJSON *o = event("content_block_delta"), *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", st->block);
    bool thinking = kind == SRV_TOOL_REASONING, text = kind == SRV_TOOL_CONTENT;
    cJSON_AddStringToObject(d, "type",
                            thinking ? "thinking_delta"
                            : text   ? "text_delta"
                                     : "input_json_delta");
    add_clean(d, thinking ? "thinking" : text ? "text" : "partial_json", ev->text, ev->len);
    cJSON_AddItemToObject(o, "delta", d);
    put(st, o);
    return !st->out.buf.failed;
}

/* The end: the last block closed, message_delta (stop_reason, the final
 * usage) and message_stop; or an error event when the job failed. */
static void put_end(msg_stream *st) {
    srv_job *job = st->out.job;
    if (job->failed) {
        srv_error err;
        srv_job_error(job, &err);
        char *json = srv_anthropic_error_json(&err);
        if (!json) st->out.buf.failed = true;
        nu_buf_printf(&st->out.buf, "event: error\ndata: %s\n\n", json ? json : "{}");
        free(json);
        return;
    }
    /* an empty answer still has its (empty) text block, as create's has */
    if (st->block < 0) open_block(st, SRV_TOOL_CONTENT, text_block(false, "", 0));
    close_block(st);
    cJSON *o = event("message_delta"), *d = cJSON_CreateObject();
    add_stop(d, job, srv_splitter_n_calls(st->split));
    cJSON_AddItemToObject(o, "delta", d);
    cJSON_AddItemToObject(o, "usage", usage_json(job));
    put(st, o);
    put(st, event("message_stop"));
}

/* Turns what the job has new into events; whether any was added. */
static bool produce(void *cls) {
    msg_stream *st = cls;
    srv_job *job = st->out.job;
    pthread_mutex_lock(&job->mu);
    size_t before = st->out.buf.len;
    bool done = job->done;
    if (!st->began) put_start(st), st->began = true;
    if (!(done && job->failed)) {
        srv_choice *c = &job->choices[0];
        if (!srv_splitter_feed(st->split, c->text ? c->text : "", c->len, done, on_event, st))
            st->out.buf.failed = true;
        c->sent = c->len;
    }
    if (done) {
        put_end(st);
        srv_stream_out_end(&st->out);
    }
    pthread_mutex_unlock(&job->mu);
    return st->out.buf.len > before;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    msg_stream *st = cls;
    (void)pos;
    return srv_stream_pump(&st->out, produce, st, buf, max);
}

static void stream_free(void *cls) {
    msg_stream *st = cls;
    srv_job *job = st->out.job;
    srv_splitter_free(st->split);
    nu_buf_free(&st->out.buf);
    free(st);
    srv_job_drop(job);
}

static enum MHD_Result answer_stream(struct MHD_Connection *c, srv_conn *cs, srv_job *job,
                                     const char *id) {
    enum MHD_Result ret;
    if (!srv_await_start(job, c, cs, &ret)) return ret; /* a refusal is still a plain status */
    msg_stream *st = calloc(1, sizeof *st);
    if (st) {
        st->out.job = job;
        snprintf(st->id, sizeof st->id, "%s", id);
        st->out.client_fd = srv_client_fd(c);
        st->out.completion_tokens = &cs->completion_tokens;
        st->split = srv_splitter_new(&job->req);
    }
    if (!st || !st->split) {
        free(st);
        srv_job_drop(job);
        return MHD_NO;
    }
    return srv_answer_stream(c, cs, "text/event-stream", stream_read, st, stream_free);
}

/* ---- the endpoints ------------------------------------------------------------- */

/* The body translated and parsed on the model it names (held in *m); false
 * with err filled (and nothing held). */
static bool parse(srv_state *s, const srv_conn *cs, bool count, srv_model **m, srv_request *req,
                  srv_error *err) {
    char msg[160];
    *m = NULL;
    if (!json_body_check(cs->body, cs->len, msg, sizeof msg))
        return srv_fail(err, 400, "invalid_request_error", NULL, NULL, "%s", msg);
    char *body = srv_anthropic_translate(cs->body, cs->len, count, err);
    if (!body) return false;
    bool ok =
        (*m = srv_acquire_body_model(s, cs, err)) != NULL &&
        srv_parse_request(body, strlen(body), SRV_CHAT, &(*m)->limits, &(*m)->defaults, req, err);
    cJSON_free(body);
    if (!ok) {
        srv_anthropic_rename_error(err);
        if (*m) srv_model_release(*m), *m = NULL;
    }
    return ok;
}

static enum MHD_Result messages(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    srv_error err;
    srv_request req;
    srv_model *m;
    if (!parse(s, cs, false, &m, &req, &err)) return srv_answer_error(c, cs, &err);
    bool stream = req.stream;
    srv_job *job = srv_submit(s, m, &req, cs, &err);
    if (!job) {
        srv_anthropic_rename_error(&err);
        return srv_answer_error(c, cs, &err);
    }
    char call_id[SRV_TOOL_ID_MAX], id[48];
    srv_tools_new_id(SRV_TOOL_FORMAT_GENERIC, call_id);
    api_id("msg_", call_id, id, sizeof id);
    if (stream) return answer_stream(c, cs, job, id);
    return srv_answer_job(c, cs, job, message_json, id);
}

static enum MHD_Result count_tokens(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    srv_error err;
    srv_request req;
    srv_model *m;
    int32_t n;
    if (!parse(s, cs, true, &m, &req, &err)) return srv_answer_error(c, cs, &err);
    bool ok = srv_count_prompt_tokens(m, &req, &n, &err);
    srv_model_release(m);
    if (!ok) {
        srv_anthropic_rename_error(&err);
        return srv_answer_error(c, cs, &err);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", n);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_answer(c, cs, 200, body, NULL);
}

enum MHD_Result srv_anthropic_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    return cs->route->id == ROUTE_MESSAGES_COUNT ? count_tokens(s, c, cs) : messages(s, c, cs);
}
