/* tools.c - function calling: call formats, the prompt for templates that
 * do not show tools, the grammar of a call, and the parser that turns the
 * generated text back into content and calls. */
#include "tools.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "buf.h"
#include "text_check.h"

static bool is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* ---- formats ------------------------------------------------------------- */

const char *srv_tool_format_name(srv_tool_format f) {
    switch (f) {
    case SRV_TOOL_FORMAT_HERMES: return "hermes";
    case SRV_TOOL_FORMAT_MISTRAL: return "mistral";
    case SRV_TOOL_FORMAT_LLAMA3: return "llama3";
    case SRV_TOOL_FORMAT_HARMONY: return "harmony";
    case SRV_TOOL_FORMAT_GENERIC: break;
    }
    return "generic";
}

srv_tool_format srv_tools_detect_format(const char *src) {
    if (!src) return SRV_TOOL_FORMAT_GENERIC;
    if (strstr(src, "<tool_call>")) return SRV_TOOL_FORMAT_HERMES;
    if (strstr(src, "[TOOL_CALLS]")) return SRV_TOOL_FORMAT_MISTRAL;
    if (strstr(src, "<|call|>") && strstr(src, "<|channel|>")) return SRV_TOOL_FORMAT_HARMONY;
    /* Llama 3.1 names <|python_tag|>; 3.2 only asks for {"name", "parameters"} */
    if (strstr(src, "<|python_tag|>") ||
        (strstr(src, "<|start_header_id|>") && strstr(src, "\"parameters\"")))
        return SRV_TOOL_FORMAT_LLAMA3;
    return SRV_TOOL_FORMAT_GENERIC;
}

bool srv_tools_active(const srv_tools *t) {
    return t && t->n > 0 && t->choice != SRV_TOOLS_NONE;
}

/* The key of a call's arguments in format f. */
static const char *args_key(srv_tool_format f) {
    return f == SRV_TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments";
}

/* The texts that open a call in the generated text (NULL-terminated). */
static const char *const *call_markers(srv_tool_format f) {
    static const char *const hermes[] = {"<tool_call>", NULL};
    static const char *const mistral[] = {"[TOOL_CALLS]", NULL};
    static const char *const llama3[] = {"<|python_tag|>", NULL};
    static const char *const none[] = {NULL};
    switch (f) {
    case SRV_TOOL_FORMAT_HERMES: return hermes;
    case SRV_TOOL_FORMAT_MISTRAL: return mistral;
    case SRV_TOOL_FORMAT_LLAMA3: return llama3;
    case SRV_TOOL_FORMAT_HARMONY: /* headers of control tokens, read by reasoning.c */
    case SRV_TOOL_FORMAT_GENERIC: break;
    }
    return none;
}

#define HERMES_CLOSE "</tool_call>"

/* ---- prompts ------------------------------------------------------------- */

/* What tool_choice asks of the answer, in words. */
static void choice_sentence(nu_buf *b, const srv_tools *t) {
    switch (t->choice) {
    case SRV_TOOLS_REQUIRED:
        nu_buf_puts(b, t->parallel ? "You must call one or more functions.\n"
                                   : "You must call exactly one function.\n");
        break;
    case SRV_TOOLS_NAMED:
        nu_buf_printf(b, "You must call the function \"%s\".\n", t->list[t->named].name);
        break;
    default:
        nu_buf_puts(b, "If no function is needed, answer as usual instead.\n");
        if (!t->parallel) nu_buf_puts(b, "Call at most one function.\n");
        break;
    }
}

char *srv_tools_prompt(const srv_tools *t, srv_tool_format f, bool list_tools, bool *oom) {
    *oom = false;
    if (!srv_tools_active(t) || (f != SRV_TOOL_FORMAT_GENERIC && !list_tools)) return NULL;
    nu_buf b = {0};
    if (list_tools) {
        nu_buf_puts(&b, "# Tools\n\nYou can call these functions (their arguments are described "
                        "by JSON Schema):\n");
        cJSON *arr = cJSON_Parse(t->json);
        for (const cJSON *tool = arr ? arr->child : NULL; tool; tool = tool->next) {
            char *line = cJSON_PrintUnformatted(tool);
            if (!line) b.failed = true;
            nu_buf_puts(&b, line ? line : "");
            nu_buf_puts(&b, "\n");
            cJSON_free(line);
        }
        if (!arr) b.failed = true;
        cJSON_Delete(arr);
        nu_buf_puts(&b, "\n");
    }
    nu_buf_puts(&b, "To call functions, answer with only this JSON object and no other text:\n"
                    "{\"tool_calls\": [{\"name\": \"<function name>\", \"arguments\": {<the "
                    "arguments>}}]}\n");
    choice_sentence(&b, t);
    char *s = nu_buf_take(&b);
    *oom = s == NULL;
    return s;
}

/* A call's arguments as a JSON value: the object the string holds, or the
 * string itself when it holds no JSON. */
static cJSON *arguments_value(const char *args) {
    cJSON *v = args ? cJSON_Parse(args) : NULL;
    return v ? v : cJSON_CreateString(args ? args : "");
}

char *srv_tools_calls_text(const char *tool_calls_json) {
    cJSON *calls = cJSON_Parse(tool_calls_json), *root = cJSON_CreateObject();
    cJSON *out = root ? cJSON_AddArrayToObject(root, "tool_calls") : NULL;
    bool ok = calls && out;
    for (const cJSON *tc = calls ? calls->child : NULL; ok && tc; tc = tc->next) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        cJSON *o = cJSON_CreateObject();
        ok = o &&
             cJSON_AddStringToObject(o, "name", cJSON_IsString(name) ? name->valuestring : "") &&
             cJSON_AddItemToObject(
                 o, "arguments", arguments_value(cJSON_IsString(args) ? args->valuestring : NULL));
        if (ok) ok = cJSON_AddItemToArray(out, o);
        if (!ok) cJSON_Delete(o);
    }
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(calls);
    cJSON_Delete(root);
    return s;
}

/* ---- call ids ------------------------------------------------------------ */

static const char ALNUM[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/* n random letters and digits (n <= 32). */
static void random_alnum(char *out, size_t n) {
    unsigned char rnd[32];
    if (getrandom(rnd, n, 0) != (ssize_t)n) {
        /* no entropy source: a clock and a counter still make ids unique */
        static uint64_t counter;
        uint64_t k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        uint64_t x = (uint64_t)(nu_time_ms() * 1e3) ^ (k * 0x9E3779B97F4A7C15ull);
        for (size_t i = 0; i < n; i++) {
            x ^= x >> 29, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 32;
            rnd[i] = (unsigned char)x;
        }
    }
    for (size_t i = 0; i < n; i++) out[i] = ALNUM[rnd[i] % 62];
    out[n] = 0;
}

void srv_tools_new_id(srv_tool_format f, char out[SRV_TOOL_ID_MAX]) {
    if (f == SRV_TOOL_FORMAT_MISTRAL) {
        random_alnum(out, 9);
        return;
    }
    memcpy(out, "call_", 5);
    random_alnum(out + 5, 24);
}

void srv_tools_mistral_id(const char *id, char out[10]) {
    size_t n = strlen(id);
    bool ok = n == 9;
    for (size_t i = 0; ok && i < n; i++) ok = strchr(ALNUM, id[i]) != NULL && id[i];
    if (ok) {
        memcpy(out, id, 10);
        return;
    }
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *p = id; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    for (int i = 0; i < 9; i++, h /= 62) out[i] = ALNUM[h % 62];
    out[9] = 0;
}

/* ---- grammars ------------------------------------------------------------ */

/* Schema members whose values are data, not schemas (left as they are). */
static bool is_data_keyword(const char *k) {
    return !strcmp(k, "const") || !strcmp(k, "enum") || !strcmp(k, "default") ||
           !strcmp(k, "examples");
}

/* Schema members that map names to schemas. */
static bool is_schema_map(const char *k) {
    return !strcmp(k, "properties") || !strcmp(k, "$defs") || !strcmp(k, "definitions") ||
           !strcmp(k, "patternProperties") || !strcmp(k, "dependentSchemas");
}

/* Moves a schema's local references ("#...") under base ("#/$defs/t0"):
 * the schema becomes part of a bigger one. */
static bool rebase_refs(cJSON *node, const char *base) {
    if (cJSON_IsArray(node)) {
        for (cJSON *c = node->child; c; c = c->next)
            if (!rebase_refs(c, base)) return false;
        return true;
    }
    if (!cJSON_IsObject(node)) return true;
    for (cJSON *m = node->child; m; m = m->next) {
        if (is_data_keyword(m->string)) continue;
        if (!strcmp(m->string, "$ref") && cJSON_IsString(m) && m->valuestring[0] == '#') {
            size_t n = strlen(base) + strlen(m->valuestring) + 1;
            char *ref = malloc(n);
            if (!ref) return false;
            snprintf(ref, n, "%s%s", base, m->valuestring + 1);
            bool ok = cJSON_SetValuestring(m, ref) != NULL;
            free(ref);
            if (!ok) return false;
        } else if (is_schema_map(m->string) && cJSON_IsObject(m)) {
            for (cJSON *c = m->child; c; c = c->next)
                if (!rebase_refs(c, base)) return false;
        } else if (!rebase_refs(m, base)) {
            return false;
        }
    }
    return true;
}

/* Tool i's parameter schema, parsed (an empty object schema when none). */
static cJSON *parameters_schema(const srv_tools *t, int32_t i) {
    const char *p = t->list[i].parameters;
    return p ? cJSON_Parse(p) : cJSON_Parse("{\"type\":\"object\",\"properties\":{}}");
}

/* 400 naming tool i's parameters. */
static bool bad_parameters(const srv_tools *t, int32_t i, srv_error *err, const char *what) {
    char param[64];
    snprintf(param, sizeof param, "tools[%d].function.parameters", (int)i);
    return srv_fail(err, 400, "invalid_request_error", NULL, param, "'%s' (function '%s'): %s",
                    param, t->list[i].name, what);
}

/* Checks tool i's parameter schema on its own: 1 when the grammar compiler
 * takes it, 0 when it does not support it, -1 when it is malformed (err
 * filled: 400, or 500 when out of memory). */
static int check_schema(const srv_tools *t, int32_t i, srv_error *err) {
    cJSON *s = parameters_schema(t, i);
    if (!s) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory"), -1;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    bool object = !type || (cJSON_IsString(type) && !strcmp(type->valuestring, "object"));
    cJSON_Delete(s);
    if (!object) return bad_parameters(t, i, err, "the arguments must be a JSON object"), -1;
    if (!t->list[i].parameters) return 1;
    nu_json_options opt = nu_json_default_options();
    char *gbnf = NULL;
    nu_error e;
    nu_status st = nu_json_schema_to_gbnf(t->list[i].parameters, &opt, &gbnf, &e);
    nu_free(gbnf);
    if (st == NU_OK) return 1;
    if (st == NU_ERR_UNSUPPORTED) {
        bad_parameters(t, i, err, e.message); /* kept in case the caller needs it */
        return 0;
    }
    if (st == NU_ERR_NOMEM)
        return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory"), -1;
    return bad_parameters(t, i, err, e.message), -1;
}

/* {"type": "object", "properties": {"name": {"const": NAME}, KEY: {"$ref":
 * "#/$defs/tI"}}, "required": ["name", KEY], "additionalProperties": false}. */
static cJSON *call_schema(const srv_tools *t, int32_t i, srv_tool_format f) {
    char ref[32];
    snprintf(ref, sizeof ref, "#/$defs/t%d", (int)i);
    cJSON *s = cJSON_CreateObject(), *props = NULL, *name = NULL, *args = NULL, *req = NULL;
    bool ok = s && cJSON_AddStringToObject(s, "type", "object") &&
              (props = cJSON_AddObjectToObject(s, "properties")) &&
              (name = cJSON_AddObjectToObject(props, "name")) &&
              cJSON_AddStringToObject(name, "const", t->list[i].name) &&
              (args = cJSON_AddObjectToObject(props, args_key(f))) &&
              cJSON_AddStringToObject(args, "$ref", ref) &&
              (req = cJSON_AddArrayToObject(s, "required")) &&
              cJSON_AddItemToArray(req, cJSON_CreateString("name")) &&
              cJSON_AddItemToArray(req, cJSON_CreateString(args_key(f))) &&
              cJSON_AddFalseToObject(s, "additionalProperties");
    if (!ok) cJSON_Delete(s);
    return ok ? s : NULL;
}

/* One call of any allowed tool (or of the named one). */
static cJSON *calls_schema(const srv_tools *t, srv_tool_format f) {
    if (t->choice == SRV_TOOLS_NAMED) return call_schema(t, t->named, f);
    if (t->n == 1) return call_schema(t, 0, f);
    cJSON *s = cJSON_CreateObject(), *any = s ? cJSON_AddArrayToObject(s, "anyOf") : NULL;
    bool ok = any != NULL;
    for (int32_t i = 0; ok && i < t->n; i++) ok = cJSON_AddItemToArray(any, call_schema(t, i, f));
    if (!ok) cJSON_Delete(s);
    return ok ? s : NULL;
}

/* An array of one or more calls (at most one without parallel_tool_calls). */
static cJSON *call_array_schema(const srv_tools *t, srv_tool_format f) {
    cJSON *s = cJSON_CreateObject();
    bool ok = s && cJSON_AddStringToObject(s, "type", "array") &&
              cJSON_AddItemToObject(s, "items", calls_schema(t, f)) &&
              cJSON_AddNumberToObject(s, "minItems", 1) &&
              (t->parallel || cJSON_AddNumberToObject(s, "maxItems", 1));
    if (!ok) cJSON_Delete(s);
    return ok ? s : NULL;
}

/* The JSON of a format's calls: one call (Hermes blocks hold one each;
 * Llama 3 makes one), an array (Mistral) or {"tool_calls": [...]}. */
static cJSON *format_schema(const srv_tools *t, srv_tool_format f) {
    if (f == SRV_TOOL_FORMAT_HERMES || f == SRV_TOOL_FORMAT_LLAMA3) return calls_schema(t, f);
    if (f == SRV_TOOL_FORMAT_MISTRAL) return call_array_schema(t, f);
    cJSON *s = cJSON_CreateObject(), *props = NULL, *req = NULL;
    bool ok = s && cJSON_AddStringToObject(s, "type", "object") &&
              (props = cJSON_AddObjectToObject(s, "properties")) &&
              cJSON_AddItemToObject(props, "tool_calls", call_array_schema(t, f)) &&
              (req = cJSON_AddArrayToObject(s, "required")) &&
              cJSON_AddItemToArray(req, cJSON_CreateString("tool_calls")) &&
              cJSON_AddFalseToObject(s, "additionalProperties");
    if (!ok) cJSON_Delete(s);
    return ok ? s : NULL;
}

/* The whole schema as text: the format's calls with every used tool's
 * parameters under $defs (their references moved along). */
static char *tools_schema_text(const srv_tools *t, srv_tool_format f) {
    cJSON *root = format_schema(t, f), *defs = root ? cJSON_AddObjectToObject(root, "$defs") : NULL;
    bool ok = defs != NULL;
    for (int32_t i = 0; ok && i < t->n; i++) {
        if (t->choice == SRV_TOOLS_NAMED && i != t->named) continue;
        char key[16], base[32];
        snprintf(key, sizeof key, "t%d", (int)i);
        snprintf(base, sizeof base, "#/$defs/%s", key);
        cJSON *p = parameters_schema(t, i);
        cJSON_DeleteItemFromObjectCaseSensitive(p, "$schema"); /* root-only keywords */
        cJSON_DeleteItemFromObjectCaseSensitive(p, "$id");
        ok = p && rebase_refs(p, base) && cJSON_AddItemToObject(defs, key, p);
        if (!ok) cJSON_Delete(p);
    }
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

/* One character in a GBNF literal or class, escaped unless plain. */
static void gbnf_char(nu_buf *b, char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
        nu_buf_add(b, &c, 1);
    else
        nu_buf_printf(b, "\\x%02X", (unsigned char)c);
}

/* Rules `tool_free`: any text that does not contain marker m, whose first
 * character occurs only once in it. tool_sJ is the state after the text
 * ended with J characters of m and goes on; tool_eJ lets it end there. */
static void free_text_rules(nu_buf *b, const char *m) {
    size_t k = strlen(m);
    nu_buf_puts(b, "tool_free ::= ([^");
    gbnf_char(b, m[0]);
    nu_buf_puts(b, "] | \"");
    gbnf_char(b, m[0]);
    nu_buf_puts(b, "\" tool_s1)* (\"");
    gbnf_char(b, m[0]);
    nu_buf_puts(b, "\" tool_e1)?\n");
    for (size_t j = 1; j < k; j++) {
        /* another character leaves the marker; m[0] starts it again */
        nu_buf_printf(b, "tool_s%zu ::= [^", j);
        gbnf_char(b, m[0]);
        gbnf_char(b, m[j]);
        nu_buf_puts(b, "] | \"");
        gbnf_char(b, m[0]);
        nu_buf_puts(b, "\" tool_s1");
        if (j + 1 < k) { /* m[j] goes on, unless it would complete the marker */
            nu_buf_puts(b, " | \"");
            gbnf_char(b, m[j]);
            nu_buf_printf(b, "\" tool_s%zu", j + 1);
        }
        nu_buf_printf(b, "\ntool_e%zu ::= (\"", j);
        gbnf_char(b, m[0]);
        nu_buf_puts(b, "\" tool_e1");
        if (j + 1 < k) {
            nu_buf_puts(b, " | \"");
            gbnf_char(b, m[j]);
            nu_buf_printf(b, "\" tool_e%zu", j + 1);
        }
        nu_buf_puts(b, ")?\n");
    }
}

/* The rules around the calls' JSON (rule `root`): Hermes blocks, and for
 * "auto" the free text before them. Returns the start rule. */
static const char *wrap_rules(nu_buf *b, const srv_tools *t, srv_tool_format f, bool lazy) {
    const char *more = t->parallel ? " (\"\\n\" tool_block)*" : "";
    if (f == SRV_TOOL_FORMAT_HERMES) {
        nu_buf_puts(b, "tool_block ::= \"<tool_call>\\n\" root \"\\n</tool_call>\"\n");
        if (lazy) {
            free_text_rules(b, "<tool_call>");
            nu_buf_printf(b, "tool_calls_root ::= tool_free (tool_block%s)?\n", more);
        } else {
            nu_buf_printf(b, "tool_calls_root ::= tool_block%s\n", more);
        }
        return "tool_calls_root";
    }
    if (!lazy) return "root";
    /* Llama 3 and generic: an answer that starts with '{' is a call */
    nu_buf_puts(b, "tool_calls_root ::= [ \\t\\n\\r]* (root | [^{ \\t\\n\\r] .*)?\n");
    return "tool_calls_root";
}

bool srv_tools_gbnf(const srv_tools *t, srv_tool_format f, bool marker_is_text, char **gbnf,
                    const char **root, srv_error *err) {
    *gbnf = NULL;
    *root = NULL;
    if (!srv_tools_active(t)) return true;
    bool forced = t->choice >= SRV_TOOLS_REQUIRED;
    /* Mistral's and harmony's calls begin with control tokens a grammar cannot produce */
    bool lazy = !forced && f != SRV_TOOL_FORMAT_MISTRAL && f != SRV_TOOL_FORMAT_HARMONY &&
                (f != SRV_TOOL_FORMAT_HERMES || marker_is_text);
    for (int32_t i = 0; i < t->n; i++) {
        int ok = check_schema(t, i, err);
        if (ok < 0) return false;
        if (ok == 0 && (t->choice != SRV_TOOLS_NAMED || i == t->named)) {
            if (forced) return false; /* err says what the grammar compiler lacks */
            lazy = false;             /* "auto" goes on without a grammar */
        }
    }
    if (!forced && !lazy) return true;
    char *schema = tools_schema_text(t, f), *json_gbnf = NULL;
    if (!schema) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    nu_json_options opt = nu_json_default_options();
    opt.max_whitespace = 1; /* room for the spacing the model was trained on */
    nu_error e;
    nu_status st = nu_json_schema_to_gbnf(schema, &opt, &json_gbnf, &e);
    cJSON_free(schema);
    if (st == NU_ERR_NOMEM) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != NU_OK)
        return srv_fail(err, 400, "invalid_request_error", NULL, "tools", "%s", e.message);
    nu_buf b = {0};
    nu_buf_puts(&b, json_gbnf);
    nu_free(json_gbnf);
    *root = wrap_rules(&b, t, f, lazy);
    if (!(*gbnf = nu_buf_take(&b)))
        return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    return true;
}

/* Whether text is one control token of the model's vocabulary (a grammar
 * cannot produce those, and they never show in the generated text). */
static bool is_control_token(const nu_model *m, const char *text) {
    int32_t toks[4];
    size_t n = 0;
    nu_error e;
    return m &&
           nu_tokenize(m, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL, toks, 4, &n, &e) ==
               NU_OK &&
           n == 1 && nu_token_get_type(m, toks[0]) == NU_TOKEN_CONTROL;
}

bool srv_tools_grammar(const nu_model *model, const srv_tools *t, srv_tool_format f,
                       nu_grammar **out, srv_error *err) {
    *out = NULL;
    char *gbnf;
    const char *root;
    bool text_marker = !is_control_token(model, "<tool_call>");
    if (!srv_tools_gbnf(t, f, text_marker, &gbnf, &root, err)) return false;
    if (!gbnf) return true;
    nu_error e;
    nu_status st = nu_grammar_from_gbnf(model, gbnf, root, out, &e);
    free(gbnf);
    if (st == NU_ERR_NOMEM) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != NU_OK)
        return srv_fail(err, 400, "invalid_request_error", NULL, "tools",
                        "the tools' grammar cannot be built: %s", e.message);
    return true;
}

/* ---- scanning JSON incrementally ------------------------------------------ */

typedef enum rres { R_OK = 0, R_NEED, R_BAD } rres; /* R_NEED: more text must come */

#define JSCAN_DEPTH 128

/* Follows one JSON value through text that grows: brackets matched,
 * strings and escapes tracked, literals and numbers taken as they are (a
 * JSON parser checks the finished value). */
typedef struct jscan {
    size_t pos, end; /* next byte; after the value once done */
    int depth;
    bool started, in_str, esc, scalar, done;
    char close[JSCAN_DEPTH];
} jscan;

/* Ends a bracketed or string value at s[pos]. */
static rres jscan_end(jscan *j) {
    j->end = ++j->pos;
    j->done = true;
    return R_OK;
}

/* Advances over s[pos..len); out (may be NULL) gets the value without its
 * insignificant blanks. */
static rres jscan_run(jscan *j, const char *s, size_t len, bool done, nu_buf *out) {
    for (; !j->done && j->pos < len; j->pos++) {
        char c = s[j->pos];
        if ((unsigned char)c < 0x20 && !is_blank(c)) return R_BAD; /* JSON has none anywhere */
        if (!j->started) {
            if (is_blank(c)) continue;
            if (c == ']' || c == '}' || c == ',' || c == ':') return R_BAD;
            j->started = true;
            j->scalar = c != '{' && c != '[' && c != '"';
        }
        if (j->in_str) {
            if ((unsigned char)c < 0x20) return R_BAD; /* raw blanks neither */
            if (out) nu_buf_add(out, &c, 1);
            if (j->esc) {
                j->esc = false;
            } else if (c == '\\') {
                j->esc = true;
            } else if (c == '"') {
                j->in_str = false;
                if (j->depth == 0) return jscan_end(j); /* the value was a string */
            }
            continue;
        }
        if (j->scalar && j->depth == 0) {
            if (is_blank(c) || c == ',' || c == '}' || c == ']' || c == ':') {
                j->end = j->pos;
                j->done = true;
                return R_OK;
            }
            if (c == '{' || c == '[' || c == '"') return R_BAD;
        } else if (is_blank(c)) {
            continue;
        }
        /* checked before it is kept: out holds only a valid beginning */
        if ((c == '{' || c == '[') && j->depth == JSCAN_DEPTH) return R_BAD;
        if ((c == '}' || c == ']') && (!j->depth || j->close[j->depth - 1] != c)) return R_BAD;
        if (out) nu_buf_add(out, &c, 1);
        if (c == '"') {
            j->in_str = true;
        } else if (c == '{' || c == '[') {
            j->close[j->depth++] = c == '{' ? '}' : ']';
        } else if ((c == '}' || c == ']') && --j->depth == 0) {
            return jscan_end(j);
        }
    }
    if (j->done) return R_OK;
    if (done && j->scalar && j->depth == 0) { /* a number or literal at the very end */
        j->end = len;
        j->done = true;
        return R_OK;
    }
    return done ? R_BAD : R_NEED;
}

/* A read position in the text of a call region (re-read on every feed;
 * only the arguments are followed incrementally). */
typedef struct cur {
    const char *s;
    size_t len, i;
    bool done;
} cur;

/* The next character that is not blank (not consumed). */
static rres next_char(cur *c, char *ch) {
    while (c->i < c->len && is_blank(c->s[c->i])) c->i++;
    if (c->i == c->len) return c->done ? R_BAD : R_NEED;
    *ch = c->s[c->i];
    return R_OK;
}

static rres expect(cur *c, char want) {
    char ch;
    rres r = next_char(c, &ch);
    if (r) return r;
    if (ch != want) return R_BAD;
    c->i++;
    return R_OK;
}

/* A string; [*from, *to) are the bytes between its quotes. */
static rres read_string(cur *c, size_t *from, size_t *to) {
    rres r = expect(c, '"');
    if (r) return r;
    *from = c->i;
    for (bool esc = false; c->i < c->len; c->i++) {
        char ch = c->s[c->i];
        if ((unsigned char)ch < 0x20) return R_BAD;
        if (esc)
            esc = false;
        else if (ch == '\\')
            esc = true;
        else if (ch == '"') {
            *to = c->i++;
            return R_OK;
        }
    }
    return c->done ? R_BAD : R_NEED;
}

static bool bytes_are(const cur *c, size_t from, size_t to, const char *word) {
    return to - from == strlen(word) && !memcmp(c->s + from, word, to - from);
}

static rres skip_value(cur *c) {
    jscan j = {.pos = c->i};
    rres r = jscan_run(&j, c->s, c->len, c->done, NULL);
    if (r == R_OK) c->i = j.end;
    return r;
}

/* ---- the answer parser ---------------------------------------------------- */

#define MAX_CALLS 128 /* calls per answer */

typedef struct pcall {
    char id[SRV_TOOL_ID_MAX];
    char *name;
    nu_buf args;      /* the arguments without insignificant blanks */
    size_t args_sent; /* bytes of args emitted */
    size_t args_at;   /* where the arguments value starts in the text */
    jscan scan;       /* following the arguments */
    bool args_seen;
    bool sent;    /* SRV_TOOL_CALL went out */
    bool dropped; /* a second call without parallel_tool_calls */
    int32_t index;
} pcall;

struct srv_tool_parser {
    const srv_tools *tools;
    srv_tool_format format;
    const char *const *markers;
    size_t pos;      /* the text before pos is decided */
    size_t held;     /* [held, pos): blanks of the content not yet emitted */
    bool seen_text;  /* content that is not blank went out: no bare call any more */
    bool after_call; /* blanks right after a call are dropped */
    bool poisoned;   /* a call went out and then failed to complete: ignore the rest */
    bool failed;     /* emit refused or memory ran out */
    /* the call region being read */
    bool in_region;
    int marker;    /* which marker opened it, -1: a bare JSON value */
    size_t start;  /* where the region starts */
    size_t value;  /* where its JSON starts looking (after the marker) */
    int32_t first; /* its first call in calls[] */
    pcall *calls;  /* every call read, in order */
    int32_t n_pcalls, cap;
    int32_t n_sent; /* calls emitted */
    srv_tool_emit emit;
    void *user;
};

srv_tool_parser *srv_tool_parser_new(const srv_tools *t) {
    srv_tool_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->tools = t;
    p->format = (srv_tool_format)t->format;
    p->markers = call_markers(p->format);
    return p;
}

static void free_call(pcall *c) {
    free(c->name);
    free(c->args.data);
    memset(c, 0, sizeof *c);
}

void srv_tool_parser_free(srv_tool_parser *p) {
    if (!p) return;
    for (int32_t i = 0; i < p->n_pcalls; i++) free_call(&p->calls[i]);
    free(p->calls);
    free(p);
}

int32_t srv_tool_parser_n_calls(const srv_tool_parser *p) {
    return p->n_sent;
}

static void send(srv_tool_parser *p, const srv_tool_event *ev) {
    if (!p->failed && !p->emit(p->user, ev)) p->failed = true;
}

static void send_content(srv_tool_parser *p, const char *s, size_t from, size_t to) {
    if (to <= from) return;
    srv_tool_event ev = {.kind = SRV_TOOL_CONTENT, .text = s + from, .len = to - from};
    send(p, &ev);
}

/* A call's SRV_TOOL_CALL event (or its drop, past the first call when
 * parallel calls are off). */
static void send_head(srv_tool_parser *p, pcall *c) {
    if (c->sent || c->dropped) return;
    if (!p->tools->parallel && p->n_sent > 0) {
        c->dropped = true;
        return;
    }
    c->sent = true;
    c->index = p->n_sent++;
    srv_tool_event ev = {.kind = SRV_TOOL_CALL, .index = c->index, .id = c->id, .name = c->name};
    send(p, &ev);
}

/* How many bytes of s[0..n) end on a whole UTF-8 character. */
static size_t utf8_whole(const char *s, size_t n) {
    return n - nu_utf8_incomplete_tail(s, n);
}

/* The arguments received since the last piece (all of them when final). */
static void send_args(srv_tool_parser *p, pcall *c, bool final) {
    if (!c->sent) return;
    size_t end = final ? c->args.len : utf8_whole(c->args.data, c->args.len);
    if (end <= c->args_sent) return;
    srv_tool_event ev = {.kind = SRV_TOOL_ARGS,
                         .index = c->index,
                         .text = c->args.data + c->args_sent,
                         .len = end - c->args_sent};
    c->args_sent = end;
    send(p, &ev);
}

/* Whether the region being read is shaped by the tools' grammar: its calls
 * may then go out before they are complete. */
static bool region_trusted(const srv_tool_parser *p) {
    if (!p->tools->constrained) return false;
    return p->format == SRV_TOOL_FORMAT_HERMES ? p->marker >= 0 : p->marker < 0;
}

/* The k-th call of the region, made when first reached. */
static pcall *region_call(srv_tool_parser *p, int32_t k) {
    int32_t i = p->first + k;
    if (i < p->n_pcalls) return &p->calls[i];
    if (i >= MAX_CALLS) return NULL;
    if (p->n_pcalls == p->cap) {
        int32_t cap = p->cap ? 2 * p->cap : 4;
        pcall *c = realloc(p->calls, (size_t)cap * sizeof *c);
        if (!c) {
            p->failed = true;
            return NULL;
        }
        p->calls = c;
        p->cap = cap;
    }
    pcall *c = &p->calls[p->n_pcalls++];
    memset(c, 0, sizeof *c);
    srv_tools_new_id(p->format, c->id);
    return c;
}

static bool known_tool(const srv_tools *t, const char *name) {
    for (int32_t i = 0; name && i < t->n; i++)
        if (!strcmp(t->list[i].name, name)) return true;
    return false;
}

/* The arguments member's value; followed incrementally, and sent as it
 * comes in a trusted region. */
static rres read_args(srv_tool_parser *p, cur *c, pcall *pc) {
    char ch;
    rres r = next_char(c, &ch);
    if (r) return r;
    if (!pc->args_seen) {
        if (ch != '{' && ch != '"') return R_BAD; /* an object, or a string holding one */
        pc->args_seen = true;
        pc->args_at = c->i;
        pc->scan.pos = c->i;
    } else if (c->i != pc->args_at) {
        return R_BAD; /* a second arguments member */
    }
    /* an object the grammar shaped goes out as it comes (a string holding
     * one is unwrapped first, so it waits); the pieces sent never depend on
     * how the text was cut, whatever happens later */
    bool progressive = region_trusted(p) && c->s[pc->args_at] == '{';
    if (progressive && known_tool(p->tools, pc->name)) send_head(p, pc);
    r = jscan_run(&pc->scan, c->s, c->len, c->done, &pc->args);
    if (pc->args.failed) p->failed = true;
    if (progressive) send_args(p, pc, r != R_NEED);
    if (r == R_OK) c->i = pc->scan.end;
    return r;
}

/* {"name": ..., "arguments" (or "parameters"): {...}, other members}. */
static rres parse_call(srv_tool_parser *p, cur *c, int32_t k) {
    pcall *pc = region_call(p, k);
    if (!pc) return R_BAD;
    rres r = expect(c, '{');
    for (char ch; !r;) {
        size_t kf = 0, kt = 0, vf = 0, vt = 0;
        if ((r = read_string(c, &kf, &kt)) || (r = expect(c, ':'))) return r;
        if (bytes_are(c, kf, kt, "name")) {
            if ((r = read_string(c, &vf, &vt))) return r;
            if (!pc->name && vt - vf <= 64 && !(pc->name = strndup(c->s + vf, vt - vf))) {
                p->failed = true;
                return R_BAD;
            }
        } else if (bytes_are(c, kf, kt, "arguments") || bytes_are(c, kf, kt, "parameters")) {
            if ((r = read_args(p, c, pc))) return r;
        } else if ((r = skip_value(c))) {
            return r;
        }
        if ((r = next_char(c, &ch))) return r;
        c->i++;
        if (ch == '}') return pc->name && pc->args_seen ? R_OK : R_BAD;
        if (ch != ',') return R_BAD;
    }
    return r;
}

/* [call, call, ...] */
static rres parse_call_array(srv_tool_parser *p, cur *c) {
    rres r = expect(c, '[');
    for (int32_t k = 0; !r; k++) {
        char ch;
        if ((r = parse_call(p, c, k)) || (r = next_char(c, &ch))) return r;
        c->i++;
        if (ch == ']') return R_OK;
        if (ch != ',') return R_BAD;
    }
    return r;
}

/* The region's JSON: a call, an array of calls or {"tool_calls": [...]}. */
static rres parse_calls_json(srv_tool_parser *p, cur *c) {
    char ch;
    rres r = next_char(c, &ch);
    if (r) return r;
    if (ch == '[') return parse_call_array(p, c);
    if (ch != '{') return R_BAD;
    cur look = *c;
    size_t kf = 0, kt = 0;
    look.i++;
    if ((r = read_string(&look, &kf, &kt))) return r;
    if (!bytes_are(&look, kf, kt, "tool_calls")) return parse_call(p, c, 0);
    if ((r = expect(&look, ':')) || (r = parse_call_array(p, &look)) || (r = expect(&look, '}')))
        return r;
    c->i = look.i;
    return R_OK;
}

/* After a Hermes call: blanks and </tool_call>, which may be missing. */
static rres hermes_close(cur *c, size_t *end) {
    size_t i = c->i, n = strlen(HERMES_CLOSE);
    while (i < c->len && is_blank(c->s[i])) i++;
    size_t have = c->len - i;
    if (have >= n && !memcmp(c->s + i, HERMES_CLOSE, n)) {
        *end = i + n;
        return R_OK;
    }
    if (!c->done && have < n && !memcmp(c->s + i, HERMES_CLOSE, have)) return R_NEED;
    *end = c->i;
    return R_OK;
}

/* A finished call's arguments as the object they must be: a string
 * holding JSON is unwrapped. */
static bool finish_args(pcall *pc) {
    if (!nu_utf8_valid(pc->args.data ? pc->args.data : "", pc->args.len, NULL)) return false;
    cJSON *v = cJSON_ParseWithLength(pc->args.data ? pc->args.data : "", pc->args.len);
    bool ok = cJSON_IsObject(v);
    if (cJSON_IsString(v)) {
        cJSON *inner = cJSON_Parse(v->valuestring);
        if ((ok = cJSON_IsObject(inner))) { /* keep the string's text, blanks removed */
            nu_buf b = {0};
            jscan j = {0};
            ok = jscan_run(&j, v->valuestring, strlen(v->valuestring), true, &b) == R_OK &&
                 !b.failed;
            if (ok) {
                free(pc->args.data);
                pc->args = b;
            } else {
                free(b.data);
            }
        }
        cJSON_Delete(inner);
    }
    cJSON_Delete(v);
    return ok;
}

/* The region's calls are well formed and name known tools. */
static bool region_valid(srv_tool_parser *p) {
    if (p->first == p->n_pcalls) return false;
    for (int32_t i = p->first; i < p->n_pcalls; i++) {
        pcall *c = &p->calls[i];
        if (!c->scan.done || !known_tool(p->tools, c->name) || !finish_args(c)) return false;
    }
    return true;
}

/* Emits the content s[pos..to): blanks after a call are dropped, trailing
 * blanks held until it is known whether a call follows them. */
static void take_content(srv_tool_parser *p, const char *s, size_t to) {
    size_t i = p->pos;
    if (p->after_call) {
        while (i < to && is_blank(s[i])) i++;
        p->held = i;
        if (i < to) p->after_call = false;
    }
    size_t k = to;
    while (k > i && is_blank(s[k - 1])) k--;
    if (k > i) {
        send_content(p, s, p->held, k);
        p->held = k;
        p->seen_text = true;
    }
    if (to > p->pos) p->pos = to;
}

static size_t marker_len(const srv_tool_parser *p) {
    return p->marker >= 0 ? strlen(p->markers[p->marker]) : 0;
}

/* The calls are in: emit what has not gone out; blanks around them go. */
static void accept_region(srv_tool_parser *p, size_t end) {
    for (int32_t i = p->first; i < p->n_pcalls; i++) {
        send_head(p, &p->calls[i]);
        send_args(p, &p->calls[i], true);
    }
    p->pos = p->held = end;
    p->after_call = true;
    p->in_region = false;
}

/* Not a call after all: its first character (or its marker) is content. */
static void reject_region(srv_tool_parser *p, const char *s) {
    p->in_region = false;
    for (int32_t i = p->first; i < p->n_pcalls; i++)
        if (p->calls[i].sent) { /* only a broken grammar gets here; the call stays */
            p->poisoned = true;
            return;
        }
    while (p->n_pcalls > p->first) free_call(&p->calls[--p->n_pcalls]);
    size_t n = marker_len(p);
    take_content(p, s, p->start + (n ? n : 1));
}

/* Reads the region again with the new text. */
static void region_step(srv_tool_parser *p, const char *s, size_t len, bool done) {
    cur c = {.s = s, .len = len, .i = p->value, .done = done};
    rres r = parse_calls_json(p, &c);
    size_t end = c.i;
    if (!r && p->format == SRV_TOOL_FORMAT_HERMES && p->marker >= 0) r = hermes_close(&c, &end);
    if (p->failed || r == R_NEED) return;
    if (!r && region_valid(p))
        accept_region(p, end);
    else
        reject_region(p, s);
}

/* Which marker s[0..n) starts with (-1: none); *partial: s is cut short
 * inside one. */
static int marker_at(const srv_tool_parser *p, const char *s, size_t n, bool *partial) {
    *partial = false;
    for (int m = 0; p->markers[m]; m++) {
        size_t k = strlen(p->markers[m]);
        if (n >= k && !memcmp(s, p->markers[m], k)) return m;
        if (n < k && !memcmp(s, p->markers[m], n)) *partial = true;
    }
    return -1;
}

/* The first whole marker in s[from..len), or len. */
static size_t find_marker(const srv_tool_parser *p, const char *s, size_t from, size_t len,
                          int *which) {
    size_t best = len;
    for (int m = 0; p->markers[m]; m++) {
        const char *hit = memmem(s + from, len - from, p->markers[m], strlen(p->markers[m]));
        if (hit && (size_t)(hit - s) < best) best = (size_t)(hit - s), *which = m;
    }
    return best;
}

/* How many bytes at the end of s[from..len) could begin a marker. */
static size_t partial_marker_tail(const srv_tool_parser *p, const char *s, size_t from,
                                  size_t len) {
    size_t keep = 0;
    for (int m = 0; p->markers[m]; m++) {
        size_t k = strlen(p->markers[m]);
        for (size_t n = k - 1; n > keep; n--)
            if (n <= len - from && !memcmp(s + len - n, p->markers[m], n)) {
                keep = n;
                break;
            }
    }
    return keep;
}

static void begin_region(srv_tool_parser *p, const char *s, size_t at, int marker) {
    take_content(p, s, at); /* blanks before it stay held in case it is no call */
    p->in_region = true;
    p->marker = marker;
    p->start = at;
    p->value = at + marker_len(p);
    p->first = p->n_pcalls;
}

/* Content up to the next call region; true when one begins. */
static bool content_step(srv_tool_parser *p, const char *s, size_t len, bool done) {
    if (!p->seen_text && p->n_sent == 0) {
        /* the answer may be nothing but a call: a marker, '{' or '[' first */
        size_t q = p->pos;
        while (q < len && is_blank(s[q])) q++;
        if (q == len) {
            take_content(p, s, len);
            return false;
        }
        bool partial;
        int m = marker_at(p, s + q, len - q, &partial);
        if (m < 0 && partial && !done) {
            take_content(p, s, q);
            return false;
        }
        if (m >= 0 || s[q] == '{' || s[q] == '[') {
            begin_region(p, s, q, m);
            return true;
        }
    }
    int which = -1;
    size_t at = find_marker(p, s, p->pos, len, &which);
    if (at < len) {
        begin_region(p, s, at, which);
        return true;
    }
    take_content(p, s, done ? len : len - partial_marker_tail(p, s, p->pos, len));
    return false;
}

bool srv_tool_parser_feed(srv_tool_parser *p, const char *s, size_t len, bool done,
                          srv_tool_emit emit, void *user) {
    p->emit = emit;
    p->user = user;
    if (!s) s = "", len = 0;
    while (!p->failed && !p->poisoned) {
        if (p->in_region) {
            region_step(p, s, len, done);
            if (p->in_region) break; /* waits for more text */
        } else if (!content_step(p, s, len, done)) {
            break;
        }
    }
    if (done && !p->failed && !p->poisoned && !p->in_region && !p->after_call) {
        send_content(p, s, p->held, len); /* blanks at the very end are content */
        p->held = p->pos = len;
    }
    return !p->failed;
}

bool srv_tools_check_call(const srv_tools *t, const char *name, const char *args, size_t len,
                          char **out, size_t *out_len, bool *oom) {
    *out = NULL, *out_len = 0, *oom = false;
    if (!known_tool(t, name) || !nu_utf8_valid(args, len, NULL)) return false;
    cJSON *v = cJSON_ParseWithLength(args, len);
    bool object = cJSON_IsObject(v);
    cJSON_Delete(v);
    if (!object) return false;
    nu_buf b = {0};
    jscan j = {0};
    bool whole = jscan_run(&j, args, len, true, &b) == R_OK && !b.failed;
    for (size_t i = j.end; whole && i < len; i++) whole = is_blank(args[i]); /* nothing after */
    if (!whole) {
        *oom = b.failed;
        free(b.data);
        return false;
    }
    *out_len = b.len;
    *out = nu_buf_take(&b);
    *oom = *out == NULL;
    return *out != NULL;
}

/* ---- whole answers ----------------------------------------------------- */

static bool collect_content(void *user, const srv_tool_event *ev) {
    nu_buf *b = user;
    if (ev->kind == SRV_TOOL_CONTENT) nu_buf_add(b, ev->text, ev->len);
    return !b->failed;
}

bool srv_tools_parse(const srv_tools *t, const char *text, size_t len, srv_tool_result *out) {
    memset(out, 0, sizeof *out);
    srv_tool_parser *p = srv_tool_parser_new(t);
    nu_buf content = {0};
    bool ok = p && srv_tool_parser_feed(p, text, len, true, collect_content, &content);
    if (ok && p->n_sent && !(out->calls = calloc((size_t)p->n_sent, sizeof *out->calls)))
        ok = false;
    for (int32_t i = 0; ok && i < p->n_pcalls; i++) {
        pcall *c = &p->calls[i];
        if (!c->sent) continue;
        srv_tool_call *dst = &out->calls[out->n_calls++];
        memcpy(dst->id, c->id, sizeof dst->id);
        dst->name = c->name, c->name = NULL;
        /* what went out: all of it, unless a broken call stopped the parser */
        dst->arguments = strndup(c->args.data ? c->args.data : "", c->args_sent);
        ok = dst->arguments != NULL;
    }
    srv_tool_parser_free(p);
    size_t content_len = content.len;
    out->content = ok ? nu_buf_take(&content) : (free(content.data), NULL);
    out->content_len = out->content ? content_len : 0;
    if (!out->content) ok = false;
    if (!ok) srv_tool_result_free(out);
    return ok;
}

void srv_tool_result_free(srv_tool_result *r) {
    for (int32_t i = 0; i < r->n_calls; i++) free(r->calls[i].name), free(r->calls[i].arguments);
    free(r->calls);
    free(r->content);
    memset(r, 0, sizeof *r);
}
