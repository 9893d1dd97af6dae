/* chat.c - rendering chat messages with the chat-template API. */
#include "chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a whole file (NUL-terminated, malloc'd) or returns NULL. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    bool ok = !ferror(f) && buf;
    fclose(f);
    if (!ok) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Whether name is one of the built-in templates. */
static bool is_builtin(const char *name) {
    for (const char *const *b = nu_chat_template_builtin_names(); *b; b++)
        if (!strcmp(*b, name)) return true;
    return false;
}

static bool load_template(srv_chat *c, const nu_model *m, const char *override, char *msg,
                          size_t cap) {
    nu_error err;
    nu_status st;
    if (override && is_builtin(override)) {
        st = nu_chat_template_builtin(override, &c->tpl, &err);
        snprintf(c->name, sizeof c->name, "%s", override);
    } else if (override) {
        size_t len;
        char *src = read_file(override, &len);
        if (!src) {
            snprintf(msg, cap,
                     "--chat-template '%s' is neither a built-in template nor a "
                     "readable file",
                     override);
            return false;
        }
        st = nu_chat_template_parse(src, len, &c->tpl, &err);
        free(src);
        snprintf(c->name, sizeof c->name, "file");
    } else {
        st = nu_chat_template_from_model(m, &c->tpl, &err);
        snprintf(c->name, sizeof c->name, "model");
        if (st == NU_ERR_UNSUPPORTED) {
            const char *guess = nu_chat_template_guess_builtin(m);
            st = nu_chat_template_builtin(guess, &c->tpl, &err);
            snprintf(c->name, sizeof c->name, "%s", guess);
        }
    }
    if (st != NU_OK) snprintf(msg, cap, "chat template: %s", err.message);
    return st == NU_OK;
}

/* The single special token spelled by text, or -1. */
static int32_t special_token(const nu_model *m, const char *text) {
    int32_t toks[4];
    size_t n = 0;
    nu_error err;
    if (nu_tokenize(m, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL, toks, 4, &n, &err) != NU_OK ||
        n != 1)
        return -1;
    nu_token_type t = nu_token_get_type(m, toks[0]);
    return t == NU_TOKEN_CONTROL || t == NU_TOKEN_USER_DEFINED ? toks[0] : -1;
}

/* End-of-turn tokens of the common chat formats that the vocabulary has. */
static void find_stop_tokens(srv_chat *c, const nu_model *m) {
    static const char *const ends[] = {
        "<|im_end|>",    "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|END_OF_TURN_TOKEN|>",
        "<|endoftext|>", "</s>",       NULL};
    /* gpt-oss (harmony): <|end|> ends one message of an answer, <|return|> the answer */
    bool harmony = special_token(m, "<|return|>") >= 0;
    for (const char *const *e = ends; *e && c->n_stop_tokens < SRV_CHAT_MAX_STOP_TOKENS; e++) {
        if (harmony && !strcmp(*e, "<|end|>")) continue;
        int32_t t = special_token(m, *e);
        if (t >= 0) c->stop_tokens[c->n_stop_tokens++] = t;
    }
}

/* ---- probing what the template does with tools -------------------------- */

static const char PROBE_TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"nucleus_probe_fn\",\"description\":\"d\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
    "\"description\":\"x\"}},\"required\":[\"a\"]}}}]";
static const char PROBE_ASK[] = "[{\"role\":\"user\",\"content\":\"hi\"}]";
/* a call and its result (ids of 9 letters, which every template accepts) */
static const char PROBE_CALL[] =
    "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"\","
    "\"tool_calls\":[{\"id\":\"abcdefghi\",\"type\":\"function\",\"function\":{\"name\":"
    "\"nucleus_probe_fn\",\"arguments\":{\"a\":\"zq\"}}}]},{\"role\":\"tool\","
    "\"tool_call_id\":\"abcdefghi\",\"name\":\"nucleus_probe_fn\",\"content\":"
    "\"nucleus_probe_result\"}]";

/* Renders a probe; whether it worked and shows both needles. */
static bool probe(const srv_chat *c, const char *messages, const char *tools, const char *needle1,
                  const char *needle2) {
    nu_chat_render_params p = nu_chat_render_default_params();
    p.messages_json = messages;
    p.tools_json = tools;
    p.add_generation_prompt = true;
    p.bos_token = c->bos_text;
    p.eos_token = c->eos_text;
    char *out = NULL;
    nu_error e;
    bool ok = nu_chat_render(c->tpl, &p, &out, NULL, &e) == NU_OK && strstr(out, needle1) &&
              strstr(out, needle2);
    nu_free(out);
    return ok;
}

/* What the template does with tools, and so the call syntax to expect. */
static void probe_tools(srv_chat *c) {
    c->reads_tools = probe(c, PROBE_ASK, PROBE_TOOLS, "nucleus_probe_fn", "nucleus_probe_fn");
    c->reads_tool_calls = probe(c, PROBE_CALL, c->reads_tools ? PROBE_TOOLS : NULL,
                                "nucleus_probe_fn", "nucleus_probe_result");
    c->tool_format = c->reads_tools ? srv_tools_detect_format(nu_chat_template_source(c->tpl, NULL))
                                    : SRV_TOOL_FORMAT_GENERIC;
}

bool srv_chat_init(srv_chat *c, const nu_model *m, const char *override, char *msg, size_t cap) {
    memset(c, 0, sizeof *c);
    if (!load_template(c, m, override, msg, cap)) return false;
    int32_t bos = nu_token_bos(m), eos = nu_token_eos(m);
    c->bos_text = bos >= 0 ? nu_token_text(m, bos) : NULL;
    c->eos_text = eos >= 0 ? nu_token_text(m, eos) : NULL;
    find_stop_tokens(c, m);
    /* the plain format has no end-of-turn token: the next "User:" line ends the turn */
    if (!strcmp(c->name, "plain")) c->stop_string = "\nUser:";
    probe_tools(c);
    srv_think_detect(&c->think, nu_chat_template_source(c->tpl, NULL), m);
    return true;
}

void srv_chat_free(srv_chat *c) {
    nu_chat_template_free(c->tpl);
    c->tpl = NULL;
}

/* ---- messages as the template reads them ---------------------------------- */

/* An id as the template takes it: Mistral's insists on 9 letters or digits. */
static const char *template_id(const srv_chat *c, const char *id, char buf[10]) {
    if (c->tool_format != SRV_TOOL_FORMAT_MISTRAL) return id;
    srv_tools_mistral_id(id, buf);
    return buf;
}

/* tool_calls as templates read them: arguments as the object they hold
 * (templates print them with tojson), ids as the template takes them. */
static cJSON *template_tool_calls(const srv_chat *c, const char *json) {
    cJSON *calls = cJSON_Parse(json);
    for (cJSON *tc = calls ? calls->child : NULL; tc; tc = tc->next) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        cJSON *obj = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
        if (!cJSON_IsObject(obj) || !cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj))
            cJSON_Delete(obj);
        cJSON *id = cJSON_GetObjectItemCaseSensitive(tc, "id");
        char buf[10];
        if (cJSON_IsString(id)) cJSON_SetValuestring(id, template_id(c, id->valuestring, buf));
    }
    return calls;
}

/* The name of the function an earlier call with this id called, into buf
 * (names are at most 64 bytes); NULL when there is none. */
static const char *called_name(const srv_message *msgs, int32_t upto, const char *id, char *buf,
                               size_t cap) {
    bool found = false;
    for (int32_t i = upto - 1; i >= 0 && !found; i--) {
        cJSON *calls = msgs[i].tool_calls ? cJSON_Parse(msgs[i].tool_calls) : NULL;
        for (const cJSON *tc = calls ? calls->child : NULL; tc && !found; tc = tc->next) {
            const cJSON *tid = cJSON_GetObjectItemCaseSensitive(tc, "id");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            if (cJSON_IsString(tid) && cJSON_IsString(name) && !strcmp(tid->valuestring, id)) {
                snprintf(buf, cap, "%s", name->valuestring);
                found = true;
            }
        }
        cJSON_Delete(calls);
    }
    return found ? buf : NULL;
}

/* Adds a string member; false when out of memory. */
static bool add_str(cJSON *o, const char *name, const char *value) {
    return cJSON_AddStringToObject(o, name, value) != NULL;
}

/* Message i for a template that shows tool calls: they, the tool_call_id
 * and the function name of a tool result go along. */
static cJSON *message_with_tools(const srv_chat *c, const srv_message *msgs, int32_t i) {
    const srv_message *m = &msgs[i];
    cJSON *o = cJSON_CreateObject();
    bool ok = o && add_str(o, "role", m->role) && add_str(o, "content", m->content);
    if (ok && m->tool_calls) {
        cJSON *calls = template_tool_calls(c, m->tool_calls);
        ok = calls && cJSON_AddItemToObject(o, "tool_calls", calls);
        if (!ok) cJSON_Delete(calls);
    }
    if (ok && m->tool_call_id) {
        char buf[10], name_buf[72];
        const char *name =
            m->name ? m->name : called_name(msgs, i, m->tool_call_id, name_buf, sizeof name_buf);
        ok = add_str(o, "tool_call_id", template_id(c, m->tool_call_id, buf)) &&
             (!name || add_str(o, "name", name));
    }
    if (!ok) cJSON_Delete(o);
    return ok ? o : NULL;
}

/* Appends text to a malloc'd string (NULL: out of memory, s freed). */
static char *concat(char *s, const char *a, const char *b) {
    size_t n = strlen(s), na = strlen(a), nb = strlen(b);
    char *t = realloc(s, n + na + nb + 1);
    if (!t) {
        free(s);
        return NULL;
    }
    memcpy(t + n, a, na);
    memcpy(t + n + na, b, nb + 1);
    return t;
}

/* Message i as text, for a template that cannot show tool calls: calls in
 * the generic format after the content, a tool result as a user message
 * (joined to the one before when that was a tool result too). */
static bool message_as_text(const srv_message *msgs, int32_t i, cJSON *arr) {
    const srv_message *m = &msgs[i];
    bool tool = m->tool_call_id != NULL;
    char *text = strdup(tool ? "" : m->content);
    if (text && m->tool_calls) {
        char *calls = srv_tools_calls_text(m->tool_calls);
        text = calls ? concat(text, text[0] ? "\n" : "", calls) : (free(text), NULL);
        cJSON_free(calls);
    }
    if (text && tool) {
        char name_buf[72], head[200];
        const char *name =
            m->name ? m->name : called_name(msgs, i, m->tool_call_id, name_buf, sizeof name_buf);
        snprintf(head, sizeof head, "Result of %s (call %.100s):\n", name ? name : "a function",
                 m->tool_call_id);
        text = concat(text, head, m->content);
    }
    if (!text) return false;
    cJSON *last = cJSON_GetArrayItem(arr, cJSON_GetArraySize(arr) - 1);
    bool join = tool && i > 0 && msgs[i - 1].tool_call_id && last;
    bool ok;
    if (join) {
        const cJSON *prev = cJSON_GetObjectItemCaseSensitive(last, "content");
        char *both = concat(strdup(prev->valuestring), "\n\n", text);
        ok = both && cJSON_SetValuestring(cJSON_GetObjectItemCaseSensitive(last, "content"), both);
        free(both);
    } else {
        cJSON *o = cJSON_CreateObject();
        ok = o && add_str(o, "role", tool ? "user" : m->role) && add_str(o, "content", text) &&
             cJSON_AddItemToArray(arr, o);
        if (!ok) cJSON_Delete(o);
    }
    free(text);
    return ok;
}

/* Where the description of the tools goes, for a template that does not
 * show them. */
typedef enum tools_place { PLACE_SYSTEM, PLACE_FIRST_USER } tools_place;

/* Puts the tools' description into the messages: appended to the system
 * message, in a new one first, or before the first user message. */
static bool add_tools_text(cJSON *arr, const char *text, tools_place place) {
    const char *role = place == PLACE_SYSTEM ? "system" : "user";
    for (cJSON *m = arr->child; m; m = m->next) {
        cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role"), *content;
        if (!cJSON_IsString(r) || strcmp(r->valuestring, role)) {
            if (place == PLACE_SYSTEM) break; /* only a leading system message counts */
            continue;
        }
        content = cJSON_GetObjectItemCaseSensitive(m, "content");
        char *joined = place == PLACE_SYSTEM ? concat(strdup(content->valuestring), "\n\n", text)
                                             : concat(strdup(text), "\n\n", content->valuestring);
        bool ok = joined && cJSON_SetValuestring(content, joined);
        free(joined);
        return ok;
    }
    if (place == PLACE_FIRST_USER) return true; /* no user message: nothing to add to */
    cJSON *o = cJSON_CreateObject();
    bool ok = o && add_str(o, "role", "system") && add_str(o, "content", text);
    if (ok) ok = cJSON_InsertItemInArray(arr, 0, o);
    if (!ok) cJSON_Delete(o);
    return ok;
}

/* The messages as the JSON array the template reads (NULL: out of memory). */
static char *messages_json(const srv_chat *c, const srv_message *msgs, int32_t n,
                           const char *tools_text, tools_place place) {
    cJSON *arr = cJSON_CreateArray();
    bool ok = arr != NULL;
    for (int32_t i = 0; ok && i < n; i++) {
        bool plain = !msgs[i].tool_calls && !msgs[i].tool_call_id;
        if (c->reads_tool_calls || plain) {
            cJSON *o = plain ? cJSON_CreateObject() : message_with_tools(c, msgs, i);
            ok = o &&
                 (!plain ||
                  (add_str(o, "role", msgs[i].role) && add_str(o, "content", msgs[i].content))) &&
                 (!msgs[i].reasoning || !c->think.history_field[0] ||
                  add_str(o, c->think.history_field, msgs[i].reasoning)) &&
                 cJSON_AddItemToArray(arr, o);
            if (!ok) cJSON_Delete(o);
        } else {
            ok = message_as_text(msgs, i, arr);
        }
    }
    if (ok && tools_text) ok = add_tools_text(arr, tools_text, place);
    char *s = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    return s;
}

/* Renders; NU_OK, or the status with e filled. */
static nu_status render(const srv_chat *c, const char *messages, const srv_tools *tools,
                        const char *vars, char **out, nu_error *e) {
    nu_chat_render_params p = nu_chat_render_default_params();
    p.messages_json = messages;
    p.extra_json = vars;
    p.tools_json = tools && tools->n > 0 ? tools->json : NULL;
    p.add_generation_prompt = true;
    p.bos_token = c->bos_text;
    p.eos_token = c->eos_text;
    return nu_chat_render(c->tpl, &p, out, NULL, e);
}

char *srv_chat_render(const srv_chat *c, const srv_message *msgs, int32_t n, const srv_tools *tools,
                      const char *vars, srv_error *err) {
    bool oom = false;
    char *tools_text =
        tools ? srv_tools_prompt(tools, c->tool_format, !c->reads_tools, &oom) : NULL;
    char *out = NULL;
    nu_error e;
    nu_status st = NU_ERR_NOMEM;
    for (int place = PLACE_SYSTEM; !oom && place <= PLACE_FIRST_USER; place++) {
        char *json = messages_json(c, msgs, n, tools_text, (tools_place)place);
        st = json ? render(c, json, tools, vars, &out, &e) : NU_ERR_NOMEM;
        cJSON_free(json);
        /* a template that refuses system messages gets the tools with the question */
        if (st == NU_OK || st == NU_ERR_NOMEM || !tools_text) break;
    }
    free(tools_text);
    if (st == NU_OK) return out;
    if (st == NU_ERR_NOMEM)
        srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    else
        srv_fail(err, 400, "invalid_request_error", NULL, "messages",
                 "the chat template "
                 "cannot render these messages: %s",
                 e.message);
    return NULL;
}
