/* ollama.c - Ollama's /api/chat and /api/generate: the request in Ollama's
 * names turned into the OpenAI request the engine runs, and the answer as
 * one JSON object or a stream of NDJSON lines (ollama.h). */
#include "ollama.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "openai_resp.h"
#include "request.h"
#include "sse.h"
#include "reasoning.h"
#include "tools.h"
#include "text_check.h"

#define BAD(err, param, ...) srv_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* ---- shared pieces ---------------------------------------------------------- */

void srv_ollama_time(double unix_seconds, char *out, size_t cap) {
    time_t t = (time_t)unix_seconds;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

cJSON *srv_ollama_head(const char *model_id) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[64], date[32];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when, sizeof when, "%.32s.%06dZ", date, (int)(ts.tv_nsec / 1000 % 1000000));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", model_id);
    cJSON_AddStringToObject(o, "created_at", when);
    return o;
}

/* A Go duration such as "5m", "1h30m", "2.5s", "300ms" (sign first). */
static bool parse_duration(const char *s, double *ms) {
    static const struct {
        const char *unit;
        double ms;
    } units[] = {{"ns", 1e-6}, {"us", 1e-3}, {"\xc2\xb5s", 1e-3}, {"ms", 1},
                 {"s", 1e3},   {"m", 6e4},   {"h", 3.6e6}};
    double sign = *s == '-' ? -1 : 1, total = 0;
    if (*s == '-' || *s == '+') s++;
    if (!*s) return false;
    if (!strcmp(s, "0")) return *ms = 0, true;
    while (*s) {
        char *end;
        double x = strtod(s, &end);
        if (end == s || !isfinite(x) || x < 0) return false;
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
            size_t n = strlen(units[i].unit);
            if (!strncmp(end, units[i].unit, n) && n > best_len) best = i, best_len = n;
        }
        if (!best_len) return false;
        total += x * units[best].ms;
        s = end + best_len;
    }
    *ms = sign * total;
    return true;
}

bool srv_ollama_keep_alive(const cJSON *v, double *ms, srv_error *err) {
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
        *ms = v->valuedouble * 1e3; /* a bare number counts seconds */
        return true;
    }
    char *end = NULL;
    if (cJSON_IsString(v)) {
        double x = strtod(v->valuestring, &end);
        if (end != v->valuestring && !*end && isfinite(x)) return *ms = x * 1e3, true;
        if (parse_duration(v->valuestring, ms)) return true;
    }
    return BAD(err, "keep_alive",
               "keep_alive must be a number of seconds or a duration such as \"5m\" or \"1h\" "
               "(negative: stay loaded)");
}

/* ---- options -------------------------------------------------------------------- */

typedef enum opt_kind {
    OPT_NUMBER,
    OPT_INT,
    OPT_BOOL,
    OPT_STOP,      /* an array of strings */
    OPT_NO_EFFECT, /* a hardware setting the server fixes (type-checked) */
} opt_kind;

/* One of Ollama's options and the request field it becomes. */
typedef struct ollama_option {
    const char *name;
    const char *field; /* NULL: handled by name */
    opt_kind kind;
    double lo, hi;
    opt_kind no_effect_type; /* OPT_NO_EFFECT: what its value must be */
} ollama_option;

static const ollama_option option_table[] = {
    {"temperature", "temperature", OPT_NUMBER, 0, 2, 0},
    {"top_k", "top_k", OPT_INT, 0, INT32_MAX, 0},
    {"top_p", "top_p", OPT_NUMBER, 0, 1, 0},
    {"min_p", "min_p", OPT_NUMBER, 0, 1, 0},
    {"typical_p", "typical_p", OPT_NUMBER, 1e-9, 1, 0},
    {"repeat_penalty", "repetition_penalty", OPT_NUMBER, 1e-6, 100, 0},
    {"repeat_last_n", "penalty_last_n", OPT_INT, -1, INT32_MAX, 0},
    {"presence_penalty", "presence_penalty", OPT_NUMBER, -2, 2, 0},
    {"frequency_penalty", "frequency_penalty", OPT_NUMBER, -2, 2, 0},
    {"seed", "seed", OPT_INT, -1, 9007199254740991.0, 0},
    {"stop", "stop", OPT_STOP, 0, 0, 0},
    {"num_predict", NULL, OPT_INT, -2, INT32_MAX, 0},
    {"num_ctx", NULL, OPT_INT, 1, INT32_MAX, 0},
    {"mirostat", "mirostat", OPT_INT, 0, 2, 0},
    {"mirostat_tau", "mirostat_tau", OPT_NUMBER, 0, 100, 0},
    {"mirostat_eta", "mirostat_eta", OPT_NUMBER, 0, 1, 0},
    {"tfs_z", NULL, OPT_NUMBER, 1, 1, 0},
    {"num_keep", NULL, OPT_NO_EFFECT, -1, INT32_MAX, OPT_INT},
    {"num_batch", NULL, OPT_NO_EFFECT, 1, INT32_MAX, OPT_INT},
    {"num_thread", NULL, OPT_NO_EFFECT, 0, INT32_MAX, OPT_INT},
    {"num_gpu", NULL, OPT_NO_EFFECT, -1, INT32_MAX, OPT_INT},
    {"main_gpu", NULL, OPT_NO_EFFECT, 0, INT32_MAX, OPT_INT},
    {"low_vram", NULL, OPT_NO_EFFECT, 0, 0, OPT_BOOL},
    {"f16_kv", NULL, OPT_NO_EFFECT, 0, 0, OPT_BOOL},
    {"logits_all", NULL, OPT_NO_EFFECT, 0, 0, OPT_BOOL},
    {"vocab_only", NULL, OPT_NO_EFFECT, 0, 0, OPT_BOOL},
    {"use_mmap", NULL, OPT_NO_EFFECT, 0, 0, OPT_BOOL},
    {"use_mlock", NULL, OPT_NO_EFFECT, 0, 0, OPT_BOOL},
    {"numa", NULL, OPT_NO_EFFECT, 0, 0, OPT_BOOL},
    {"penalize_newline", NULL, OPT_NO_EFFECT, 0, 0, OPT_BOOL},
};

/* Ollama's defaults where they differ from the OpenAI endpoints'. */
static const struct {
    const char *field;
    double value;
} ollama_defaults[] = {{"temperature", 0.8},
                       {"top_k", 40},
                       {"top_p", 0.9},
                       {"repetition_penalty", 1.1},
                       {"penalty_last_n", 64}};

/* Checks one option's value against its row. */
static bool check_option(const ollama_option *o, const cJSON *v, srv_error *err) {
    opt_kind kind = o->kind == OPT_NO_EFFECT ? o->no_effect_type : o->kind;
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    switch (kind) {
    case OPT_BOOL:
        if (!cJSON_IsBool(v)) return BAD(err, "options", "options.%s must be a boolean", o->name);
        return true;
    case OPT_STOP:
        for (const cJSON *s = cJSON_IsArray(v) ? v->child : NULL; s; s = s->next)
            if (!cJSON_IsString(s)) return BAD(err, "options", "options.stop must hold strings");
        if (cJSON_IsString(v) || cJSON_IsArray(v)) return true;
        return BAD(err, "options", "options.stop must be an array of strings");
    case OPT_INT:
        if (!(x >= o->lo && x <= o->hi) || floor(x) != x)
            return BAD(err, "options", "options.%s must be an integer in %.0f..%.0f", o->name,
                       o->lo, o->hi);
        return true;
    default:
        if (!(x >= o->lo && x <= o->hi))
            return BAD(err, "options", "options.%s must be a number in %g..%g", o->name, o->lo,
                       o->hi);
        return true;
    }
}

static const ollama_option *find_option(const char *name) {
    for (size_t i = 0; i < sizeof option_table / sizeof *option_table; i++)
        if (!strcmp(option_table[i].name, name)) return &option_table[i];
    return NULL;
}

bool srv_ollama_check_options(const cJSON *opts, srv_error *err) {
    if (!opts || cJSON_IsNull(opts)) return true;
    if (!cJSON_IsObject(opts)) return BAD(err, "options", "'options' must be an object");
    for (const cJSON *v = opts->child; v; v = v->next) {
        const ollama_option *o = find_option(v->string);
        if (!o) return BAD(err, "options", "unknown option '%.60s'", v->string);
        if (!cJSON_IsNull(v) && !check_option(o, v, err)) return false;
    }
    return true;
}

/* What the options decide besides request fields. */
typedef struct ollama_req {
    bool stream;
    bool load_only; /* no messages / no prompt: load (or unload) the model */
    bool keep_given;
    double keep_ms;
    int32_t num_ctx; /* 0: the slot's */
} ollama_req;

/* options -> fields of out (the OpenAI request), after Ollama's defaults. */
static bool map_options(const srv_model *m, const cJSON *opts, cJSON *out, ollama_req *q,
                        srv_error *err) {
    for (size_t i = 0; i < sizeof ollama_defaults / sizeof *ollama_defaults; i++)
        cJSON_AddNumberToObject(out, ollama_defaults[i].field, ollama_defaults[i].value);
    if (!srv_ollama_check_options(opts, err)) return false;
    for (const cJSON *v = opts ? opts->child : NULL; v; v = v->next) {
        const ollama_option *o = find_option(v->string);
        if (cJSON_IsNull(v)) continue;
        if (!strcmp(o->name, "num_ctx")) {
            if (v->valuedouble > m->ctx_per_slot)
                return BAD(err, "options",
                           "options.num_ctx %.0f is more than the %d tokens of context this "
                           "server gives '%s' (nucleus serve --ctx sets it)",
                           v->valuedouble, m->ctx_per_slot, m->id);
            q->num_ctx = (int32_t)v->valuedouble;
        } else if (!strcmp(o->name, "num_predict")) {
            if (v->valuedouble == 0)
                return BAD(err, "options",
                           "options.num_predict must be -1 (no limit), -2 (fill the context) "
                           "or a positive count");
            if (v->valuedouble > m->limits.max_tokens)
                return BAD(err, "options", "options.num_predict is at most %d on this server",
                           m->limits.max_tokens);
            cJSON_DeleteItemFromObjectCaseSensitive(out, "max_tokens");
            if (v->valuedouble > 0) cJSON_AddNumberToObject(out, "max_tokens", v->valuedouble);
        } else if (!strcmp(o->name, "mirostat") && v->valuedouble == 0) {
            continue; /* off */
        } else if (!strcmp(o->name, "seed") && v->valuedouble < 0) {
            continue; /* -1: a random seed */
        } else if (o->field) {
            cJSON_DeleteItemFromObjectCaseSensitive(out, o->field);
            cJSON_AddItemToObject(out, o->field, cJSON_Duplicate(v, true));
        }
    }
    return true;
}

/* ---- messages ------------------------------------------------------------------- */

/* The ids given to the calls of the conversation's assistant messages, so
 * tool messages (which Ollama names by tool_name) can answer them. */
typedef struct call_ids {
    struct {
        char id[32];
        const char *name;
        bool answered;
    } list[256];
    int n;
} call_ids;

/* An assistant message's tool_calls in the OpenAI form (arguments as text). */
static bool map_tool_calls(const cJSON *calls, int msg, cJSON *out, call_ids *ids, srv_error *err) {
    if (!cJSON_IsArray(calls))
        return BAD(err, "messages", "messages[%d].tool_calls must be an array", msg);
    cJSON *arr = cJSON_AddArrayToObject(out, "tool_calls");
    int k = 0;
    for (const cJSON *tc = calls->child; tc; tc = tc->next, k++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(name) || (args && !cJSON_IsObject(args) && !cJSON_IsNull(args)))
            return BAD(err, "messages",
                       "messages[%d].tool_calls[%d] needs a function with a 'name' string and "
                       "'arguments' as an object",
                       msg, k);
        if (ids->n == (int)(sizeof ids->list / sizeof *ids->list))
            return BAD(err, "messages", "too many tool calls in the conversation");
        snprintf(ids->list[ids->n].id, sizeof ids->list[ids->n].id, "call_%d_%d", msg, k);
        ids->list[ids->n].name = name->valuestring;
        ids->list[ids->n].answered = false;
        char *text = args && cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
        cJSON *o = cJSON_CreateObject(), *f = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", ids->list[ids->n].id);
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(f, "name", name->valuestring);
        cJSON_AddStringToObject(f, "arguments", text ? text : "{}");
        cJSON_AddItemToObject(o, "function", f);
        cJSON_AddItemToArray(arr, o);
        cJSON_free(text);
        ids->n++;
    }
    return true;
}

/* The call a tool message answers: the first unanswered one (of that name). */
static const char *answered_call(call_ids *ids, const char *name) {
    for (int i = 0; i < ids->n; i++)
        if (!ids->list[i].answered && (!name || !strcmp(ids->list[i].name, name))) {
            ids->list[i].answered = true;
            return ids->list[i].id;
        }
    return NULL;
}

/* One Ollama message as an OpenAI one. */
static bool map_message(const cJSON *msg, int i, cJSON *out, call_ids *ids, srv_error *err) {
    if (!cJSON_IsObject(msg)) return BAD(err, "messages", "messages[%d] must be an object", i);
    const char *tool_name = NULL;
    for (const cJSON *v = msg->child; v; v = v->next) {
        const char *k = v->string;
        if (!strcmp(k, "role") || !strcmp(k, "content")) {
            cJSON_AddItemToObject(out, k, cJSON_Duplicate(v, true));
        } else if (!strcmp(k, "images")) {
            if (!cJSON_IsNull(v) && !(cJSON_IsArray(v) && !v->child))
                return srv_fail(err, 400, "invalid_request_error", "not_supported", "messages",
                                "messages[%d].images: images are not supported (text models "
                                "only)",
                                i);
        } else if (!strcmp(k, "tool_calls")) {
            if (!cJSON_IsNull(v) && !map_tool_calls(v, i, out, ids, err)) return false;
        } else if (!strcmp(k, "tool_name")) {
            if (!cJSON_IsString(v))
                return BAD(err, "messages", "messages[%d].tool_name must be a string", i);
            tool_name = v->valuestring;
        } else if (!strcmp(k, "thinking")) { /* for templates that show earlier thinking */
            if (!cJSON_IsString(v) && !cJSON_IsNull(v))
                return BAD(err, "messages", "messages[%d].thinking must be a string", i);
            if (cJSON_IsString(v) && v->valuestring[0])
                cJSON_AddStringToObject(out, "reasoning_content", v->valuestring);
        } else {
            return BAD(err, "messages", "messages[%d]: unknown field '%.40s'", i, k);
        }
    }
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "tool")) {
        const char *id = answered_call(ids, tool_name);
        if (!id)
            return BAD(err, "messages",
                       "messages[%d] is a tool result but no earlier assistant message called "
                       "%s%s",
                       i, tool_name ? "the tool " : "a tool", tool_name ? tool_name : "");
        cJSON_AddStringToObject(out, "tool_call_id", id);
    }
    return true;
}

static bool map_messages(const cJSON *msgs, cJSON *out, ollama_req *q, srv_error *err) {
    if (!msgs || cJSON_IsNull(msgs) || (cJSON_IsArray(msgs) && !msgs->child)) {
        q->load_only = true;
        return true;
    }
    if (!cJSON_IsArray(msgs)) return BAD(err, "messages", "'messages' must be an array");
    call_ids *ids = calloc(1, sizeof *ids);
    if (!ids) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    cJSON *arr = cJSON_AddArrayToObject(out, "messages");
    bool ok = true;
    int i = 0;
    for (const cJSON *msg = msgs->child; ok && msg; msg = msg->next, i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        ok = map_message(msg, i, o, ids, err);
    }
    free(ids);
    return ok;
}

/* ---- the request ------------------------------------------------------------------ */

static bool map_format(const cJSON *v, cJSON *out, srv_error *err) {
    if (!v || cJSON_IsNull(v) || (cJSON_IsString(v) && !v->valuestring[0])) return true;
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "json")) {
        cJSON_AddStringToObject(rf, "type", "json_object");
        return true;
    }
    if (!cJSON_IsObject(v))
        return BAD(err, "format", "'format' must be \"json\" or a JSON schema (an object)");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON_AddStringToObject(js, "name", "format");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(v, true));
    return true;
}

/* /api/generate's prompt: through the chat template (a system and a user
 * message), or raw as a completions prompt. *kind says which. */
static bool map_prompt(const cJSON *root, cJSON *out, srv_kind *kind, ollama_req *q,
                       srv_error *err) {
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(root, "system");
    const cJSON *raw = cJSON_GetObjectItemCaseSensitive(root, "raw");
    if (prompt && !cJSON_IsNull(prompt) && !cJSON_IsString(prompt))
        return BAD(err, "prompt", "'prompt' must be a string");
    if (system && !cJSON_IsNull(system) && !cJSON_IsString(system))
        return BAD(err, "system", "'system' must be a string");
    if (raw && !cJSON_IsNull(raw) && !cJSON_IsBool(raw))
        return BAD(err, "raw", "'raw' must be a boolean");
    if (!cJSON_IsString(prompt) || !prompt->valuestring[0]) {
        q->load_only = true;
        return true;
    }
    if (cJSON_IsTrue(raw)) {
        if (cJSON_IsString(system))
            return BAD(err, "system", "'system' has no place in a raw prompt (raw: true)");
        *kind = SRV_COMPLETION;
        cJSON_AddStringToObject(out, "prompt", prompt->valuestring);
        return true;
    }
    cJSON *msgs = cJSON_AddArrayToObject(out, "messages"), *o;
    if (cJSON_IsString(system) && system->valuestring[0]) {
        cJSON_AddItemToArray(msgs, o = cJSON_CreateObject());
        cJSON_AddStringToObject(o, "role", "system");
        cJSON_AddStringToObject(o, "content", system->valuestring);
    }
    cJSON_AddItemToArray(msgs, o = cJSON_CreateObject());
    cJSON_AddStringToObject(o, "role", "user");
    cJSON_AddStringToObject(o, "content", prompt->valuestring);
    return true;
}

/* Fields /api/generate has that nucleus cannot honour, refused unless empty. */
static bool refuse_generate_extras(const cJSON *root, srv_error *err) {
    static const struct {
        const char *name, *why;
    } refused[] = {
        {"images", "images are not supported (text models only)"},
        {"suffix", "'suffix' (fill-in-the-middle) is not supported"},
        {"template", "'template' (a Go template) is not supported; the model's chat template is "
                     "used, or send raw: true"},
        {"context", "'context' (deprecated in Ollama) is not supported; send the conversation "
                    "to /api/chat"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, refused[i].name);
        bool empty = !v || cJSON_IsNull(v) || (cJSON_IsString(v) && !v->valuestring[0]) ||
                     (cJSON_IsArray(v) && !v->child);
        if (!empty)
            return srv_fail(err, 400, "invalid_request_error", "not_supported", refused[i].name,
                            "%s", refused[i].why);
    }
    return true;
}

/* The OpenAI request body an Ollama request stands for. */
static cJSON *map_request(const srv_model *m, const cJSON *root, bool chat, srv_kind *kind,
                          ollama_req *q, srv_error *err) {
    static const char *const chat_fields[] = {"model",  "messages",   "tools", "format", "options",
                                              "stream", "keep_alive", "think", NULL};
    static const char *const generate_fields[] = {
        "model",  "prompt", "suffix",   "images",     "format",  "options", "system",
        "stream", "raw",    "template", "keep_alive", "context", "think",   NULL};
    for (const cJSON *v = root->child; v; v = v->next) {
        bool known = false;
        for (const char *const *f = chat ? chat_fields : generate_fields; *f && !known; f++)
            known = !strcmp(*f, v->string);
        if (!known) return BAD(err, v->string, "unknown field '%.60s'", v->string), NULL;
    }
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(root, "think");
    const cJSON *keep = cJSON_GetObjectItemCaseSensitive(root, "keep_alive");
    q->stream = true; /* Ollama streams unless told not to */
    if (stream && !cJSON_IsNull(stream) && !cJSON_IsBool(stream))
        return BAD(err, "stream", "'stream' must be a boolean"), NULL;
    if (cJSON_IsFalse(stream)) q->stream = false;
    const char *effort = NULL; /* think: false, true or a level, on the template's switch */
    if (cJSON_IsBool(think))
        effort = cJSON_IsTrue(think) ? "medium" : "none";
    else if (cJSON_IsString(think) &&
             (!strcmp(think->valuestring, "low") || !strcmp(think->valuestring, "medium") ||
              !strcmp(think->valuestring, "high")))
        effort = think->valuestring;
    else if (think && !cJSON_IsNull(think))
        return BAD(err, "think", "'think' must be true, false, \"low\", \"medium\" or \"high\""),
               NULL;
    if (keep && !cJSON_IsNull(keep)) {
        if (!srv_ollama_keep_alive(keep, &q->keep_ms, err)) return NULL;
        q->keep_given = true;
    }
    cJSON *out = cJSON_CreateObject();
    *kind = SRV_CHAT;
    bool ok = out &&
              map_options(m, cJSON_GetObjectItemCaseSensitive(root, "options"), out, q, err) &&
              map_format(cJSON_GetObjectItemCaseSensitive(root, "format"), out, err);
    if (ok && chat) {
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
        ok = map_messages(cJSON_GetObjectItemCaseSensitive(root, "messages"), out, q, err);
        if (ok && tools && !cJSON_IsNull(tools))
            cJSON_AddItemToObject(out, "tools", cJSON_Duplicate(tools, true));
    } else if (ok) {
        ok = refuse_generate_extras(root, err) && map_prompt(root, out, kind, q, err);
        /* a raw prompt is a completion, whose own default length is short */
        if (ok && *kind == SRV_COMPLETION && !cJSON_GetObjectItemCaseSensitive(out, "max_tokens"))
            cJSON_AddNumberToObject(out, "max_tokens", m->limits.max_tokens);
    }
    if (ok) cJSON_AddBoolToObject(out, "stream", q->stream);
    if (ok && effort && *kind == SRV_CHAT) cJSON_AddStringToObject(out, "reasoning_effort", effort);
    if (ok && effort && *kind != SRV_CHAT)
        ok = BAD(err, "think", "'think' has no place in a raw prompt (raw: true)");
    if (!ok) cJSON_Delete(out);
    return ok ? out : NULL;
}

/* Ollama's name for a request field, in the errors srv_parse_request gives. */
static void rename_param(srv_error *err) {
    for (size_t i = 0; i < sizeof option_table / sizeof *option_table; i++)
        if (option_table[i].field && !strcmp(option_table[i].field, err->param)) {
            char msg[sizeof err->message];
            snprintf(msg, sizeof msg, "options.%.20s: %.480s", option_table[i].name, err->message);
            snprintf(err->message, sizeof err->message, "%s", msg);
            snprintf(err->param, sizeof err->param, "options");
            return;
        }
    if (!strcmp(err->param, "response_format")) snprintf(err->param, sizeof err->param, "format");
    if (!strcmp(err->param, "reasoning_effort")) { /* what think became */
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "think: %.500s", err->message);
        snprintf(err->message, sizeof err->message, "%s", msg);
        snprintf(err->param, sizeof err->param, "think");
    }
}

/* ---- answers ------------------------------------------------------------------------- */

/* Timing of one request, for Ollama's statistics (nanoseconds). */
typedef struct ollama_timing {
    double t0_ms;   /* when the request arrived */
    double load_ms; /* of which loading the model */
} ollama_timing;

static const char *done_reason(nu_finish_reason f) {
    return f == NU_FINISH_LENGTH || f == NU_FINISH_CONTEXT ? "length" : "stop";
}

/* done, done_reason and the statistics of a finished job. */
static void add_final(cJSON *o, const srv_job *job, const ollama_timing *t) {
    const nu_generate_result *r = &job->results[0];
    cJSON_AddStringToObject(o, "done_reason", done_reason(r->finish));
    cJSON_AddBoolToObject(o, "done", true);
    cJSON_AddNumberToObject(o, "total_duration", round((nu_time_ms() - t->t0_ms) * 1e6));
    cJSON_AddNumberToObject(o, "load_duration", round(t->load_ms * 1e6));
    cJSON_AddNumberToObject(o, "prompt_eval_count", job->n_prompt_tokens[0]);
    cJSON_AddNumberToObject(o, "prompt_eval_duration", round(r->prompt_ms * 1e6));
    cJSON_AddNumberToObject(o, "eval_count", r->n_generated);
    cJSON_AddNumberToObject(o, "eval_duration", round(r->generate_ms * 1e6));
}

/* Adds a string member made valid UTF-8. */
static void add_text(cJSON *o, const char *name, const char *s, size_t n) {
    char *clean = utf8_sanitize(s ? s : "", s ? n : 0);
    cJSON_AddStringToObject(o, name, clean ? clean : "");
    free(clean);
}

/* Ollama's tool_calls: [{"function": {"name", "arguments": {object}}}]. */
static cJSON *tool_calls_json(const srv_tool_call *calls, int32_t n) {
    cJSON *arr = cJSON_CreateArray();
    for (int32_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON *args = cJSON_Parse(calls[i].arguments);
        add_text(fn, "name", calls[i].name, strlen(calls[i].name));
        cJSON_AddItemToObject(fn, "arguments", args ? args : cJSON_CreateObject());
        cJSON_AddItemToObject(o, "function", fn);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* A message or response piece: {"role", "content"} or "response". */
static cJSON *piece_json(const char *model_id, bool generate, const char *text, size_t len) {
    cJSON *o = srv_ollama_head(model_id);
    if (generate) {
        add_text(o, "response", text, len);
    } else {
        cJSON *msg = cJSON_AddObjectToObject(o, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        add_text(msg, "content", text, len);
    }
    return o;
}

static char *print_line(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* The whole answer of a finished job. */
static char *answer_json(const char *model_id, bool generate, const srv_job *job,
                         const ollama_timing *t) {
    const nu_generate_result *r = &job->results[0];
    srv_split_answer a = {0};
    bool split =
        srv_splitter_needed(&job->req) && srv_answer_split(&job->req, r->text, r->text_len, &a);
    cJSON *o = split ? piece_json(model_id, generate, a.result.content, a.result.content_len)
                     : piece_json(model_id, generate, r->text, r->text_len);
    cJSON *msg = generate ? o : cJSON_GetObjectItemCaseSensitive(o, "message");
    if (a.reasoning) add_text(msg, "thinking", a.reasoning, a.reasoning_len);
    if (a.result.n_calls > 0)
        cJSON_AddItemToObject(msg, "tool_calls", tool_calls_json(a.result.calls, a.result.n_calls));
    srv_answer_free(&a);
    add_final(o, job, t);
    return print_line(o);
}

/* ---- streaming -------------------------------------------------------------------------- */

typedef struct ollama_stream {
    const char *model_id; /* the job's model's, valid while the job holds it */
    bool generate;
    ollama_timing timing;
    srv_splitter *split; /* thinking or tools: the answer split */
    struct {
        char *name;
        nu_buf args;
    } calls[16]; /* calls parsed so far (sent at the end) */
    int32_t n_calls;
    nu_buf content;     /* content the splitter released in this round */
    nu_buf thinking;    /* and thinking */
    srv_stream_out out; /* lines not yet handed to MHD */
} ollama_stream;

/* Appends one NDJSON line (o is deleted). */
static void put_line(ollama_stream *st, cJSON *o) {
    char *s = print_line(o);
    if (!s) st->out.buf.failed = true;
    nu_buf_puts(&st->out.buf, s ? s : "");
    nu_buf_putc(&st->out.buf, '\n');
    cJSON_free(s);
}

/* The splitter's events: content and thinking are collected, calls kept. */
static bool on_tool_event(void *user, const srv_tool_event *ev) {
    ollama_stream *st = user;
    nu_buf *to = ev->kind == SRV_TOOL_REASONING ? &st->thinking : &st->content;
    if (ev->kind == SRV_TOOL_CALL) {
        if (st->n_calls == (int32_t)(sizeof st->calls / sizeof *st->calls)) return true;
        if (!(st->calls[st->n_calls].name = strdup(ev->name))) return false;
        st->n_calls++;
        return true;
    }
    if (ev->kind == SRV_TOOL_ARGS) {
        if (st->n_calls == 0) return true;
        to = &st->calls[st->n_calls - 1].args;
    }
    nu_buf_add(to, ev->text, ev->len);
    return !to->failed;
}

/* The calls of the stream as Ollama writes them. */
static cJSON *stream_calls_json(const ollama_stream *st) {
    srv_tool_call calls[sizeof st->calls / sizeof *st->calls];
    for (int32_t i = 0; i < st->n_calls; i++)
        calls[i] =
            (srv_tool_call){.name = st->calls[i].name,
                            .arguments = st->calls[i].args.data ? st->calls[i].args.data : ""};
    return tool_calls_json(calls, st->n_calls);
}

/* Turns what the job has new into lines; whether any was added. */
static bool produce(void *cls) {
    ollama_stream *st = cls;
    srv_job *job = st->out.job;
    pthread_mutex_lock(&job->mu);
    bool done = job->done;
    size_t before = st->out.buf.len;
    if (done && job->failed) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", job->fail_message);
        put_line(st, o);
    } else {
        srv_choice *c = &job->choices[0];
        const char *text = c->text ? c->text : "";
        nu_buf_clear(&st->content);
        nu_buf_clear(&st->thinking);
        if (st->split) {
            if (!srv_splitter_feed(st->split, text, c->len, done, on_tool_event, st))
                st->out.buf.failed = true;
        } else if (c->len > c->sent) {
            nu_buf_add(&st->content, text + c->sent, c->len - c->sent);
        }
        c->sent = c->len;
        if (st->content.len || st->thinking.len) {
            cJSON *o = piece_json(st->model_id, st->generate, st->content.data, st->content.len);
            if (st->thinking.len)
                add_text(st->generate ? o : cJSON_GetObjectItemCaseSensitive(o, "message"),
                         "thinking", st->thinking.data, st->thinking.len);
            cJSON_AddBoolToObject(o, "done", false);
            put_line(st, o);
        }
        if (done) {
            cJSON *o = piece_json(st->model_id, st->generate, "", 0);
            if (st->n_calls > 0)
                cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(o, "message"), "tool_calls",
                                      stream_calls_json(st));
            add_final(o, job, &st->timing);
            put_line(st, o);
        }
        st->out.buf.failed |= st->content.failed || st->thinking.failed;
    }
    if (done) {
        srv_stream_out_end(&st->out);
    }
    pthread_mutex_unlock(&job->mu);
    return st->out.buf.len > before;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    ollama_stream *st = cls;
    (void)pos;
    return srv_stream_pump(&st->out, produce, st, buf, max);
}

static void stream_free(void *cls) {
    ollama_stream *st = cls;
    srv_job *job = st->out.job;
    srv_splitter_free(st->split);
    for (int32_t i = 0; i < st->n_calls; i++)
        free(st->calls[i].name), nu_buf_free(&st->calls[i].args);
    nu_buf_free(&st->content);
    nu_buf_free(&st->thinking);
    nu_buf_free(&st->out.buf);
    free(st);
    srv_job_drop(job);
}

static enum MHD_Result answer_stream(struct MHD_Connection *c, srv_conn *cs, srv_job *job,
                                     bool generate, const ollama_timing *t) {
    enum MHD_Result ret;
    if (!srv_await_start(job, c, cs, &ret)) return ret;
    ollama_stream *st = calloc(1, sizeof *st);
    if (st) {
        st->out.job = job;
        st->model_id = job->model->id;
        st->generate = generate;
        st->timing = *t;
        st->out.client_fd = srv_client_fd(c);
        st->out.completion_tokens = &cs->completion_tokens;
    }
    if (st && srv_splitter_needed(&job->req) && !(st->split = srv_splitter_new(&job->req))) {
        stream_free(st); /* cancels and releases the job */
        return MHD_NO;
    }
    if (!st) {
        srv_job_drop(job);
        return MHD_NO;
    }
    return srv_answer_stream(c, cs, "application/x-ndjson", stream_read, st, stream_free);
}

/* What answer_body needs besides the job. */
typedef struct answer_args {
    bool generate;
    ollama_timing timing;
} answer_args;

static char *answer_body(const srv_job *job, const void *arg) {
    const answer_args *a = arg;
    return answer_json(job->model->id, a->generate, job, &a->timing);
}

/* An empty chat or prompt: Ollama's way to load a model (or, with
 * keep_alive 0, to unload it). */
static enum MHD_Result answer_load(struct MHD_Connection *c, srv_conn *cs, srv_model *m,
                                   bool generate, const ollama_req *q) {
    cJSON *o = piece_json(m->id, generate, "", 0);
    bool unload = q->keep_given && q->keep_ms == 0;
    srv_model_release(m);
    if (unload) srv_model_unload(m); /* unless another request holds it */
    cJSON_AddStringToObject(o, "done_reason", unload ? "unload" : "load");
    cJSON_AddBoolToObject(o, "done", true);
    return srv_answer(c, cs, 200, print_line(o), NULL);
}

enum MHD_Result srv_ollama_generate(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                    bool chat) {
    ollama_timing t = {.t0_ms = nu_time_ms()};
    srv_error err;
    srv_model *m = srv_acquire_body_model(s, cs, &err);
    if (!m) return srv_answer_error(c, cs, &err);
    t.load_ms = nu_time_ms() - t.t0_ms;
    cJSON *root = cJSON_ParseWithLength(cs->body, cs->len); /* checked by the acquire */
    ollama_req q = {0};
    srv_kind kind;
    cJSON *body = root ? map_request(m, root, chat, &kind, &q, &err) : NULL;
    if (!root) srv_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
    cJSON_Delete(root);
    if (body && q.keep_given) srv_model_keep(m, q.keep_ms);
    if (body && q.load_only) {
        cJSON_Delete(body);
        return answer_load(c, cs, m, !chat, &q);
    }
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    srv_request req;
    bool ok =
        text && srv_parse_request(text, strlen(text), kind, &m->limits, &m->defaults, &req, &err);
    if (body && !text) srv_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
    cJSON_free(text);
    if (!ok) {
        rename_param(&err);
        srv_model_release(m);
        return srv_answer_error(c, cs, &err);
    }
    req.n_ctx = q.num_ctx;
    srv_job *job = srv_submit(s, m, &req, cs, &err);
    if (!job) {
        rename_param(&err);
        return srv_answer_error(c, cs, &err);
    }
    if (q.stream) return answer_stream(c, cs, job, !chat, &t);
    answer_args args = {.generate = !chat, .timing = t};
    return srv_answer_job(c, cs, job, answer_body, &args);
}

enum MHD_Result srv_ollama_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    switch (cs->route->id) {
    case ROUTE_OLLAMA_CHAT: return srv_ollama_generate(s, c, cs, true);
    case ROUTE_OLLAMA_GENERATE: return srv_ollama_generate(s, c, cs, false);
    default: return srv_ollama_info(s, c, cs);
    }
}
