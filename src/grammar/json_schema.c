/* json_schema.c - JSON Schema to GBNF.
 *
 * Every schema becomes one rule (memoised by schema node, so $ref cycles
 * become recursive rules). What is supported, and how:
 *
 *   type            a name or a list; without it the type is inferred from
 *                   the keywords present (any JSON value if none).
 *   enum, const     any JSON values, written compactly; filtered by type.
 *   object          properties (in schema order), required (optional ones
 *                   may be left out), additionalProperties: false or absent
 *                   generates only the declared properties; a schema or an
 *                   explicit true also allows extra keys (made of
 *                   [A-Za-z0-9_-], never equal to a declared name) whose
 *                   values follow that schema (or are any JSON value).
 *                   minProperties / maxProperties only when the declared
 *                   properties already satisfy them.
 *   array           items, prefixItems (and draft-07 tuple items with
 *                   additionalItems), minItems, maxItems. uniqueItems only
 *                   when maxItems <= 1.
 *   string          minLength, maxLength (in code points), pattern (an
 *                   ECMAScript regex, see regex.c; unanchored means
 *                   "contains"), format: date, time, date-time (RFC 3339,
 *                   with a time zone, valid days per month and leap years),
 *                   uuid, email. One of format / pattern / lengths at a time.
 *   integer         minimum, maximum, exclusiveMinimum, exclusiveMaximum
 *                   (draft-4 booleans too): exactly the integers in range.
 *                   Without bounds: up to 15 digits. multipleOf 1 only.
 *   number          the same bounds as decimals without exponent; see
 *                   grammar_json.c for the digit limits.
 *   anyOf           alternatives (sibling keywords merged into each).
 *   oneOf           alternatives, when every branch's output is provably
 *                   rejected by the other branches (different types,
 *                   different const / enum values of a required property,
 *                   a required property the other branch cannot have);
 *                   otherwise an error suggesting anyOf.
 *   allOf           merged into one schema (properties, required, bounds,
 *                   types, enum intersected, ...); conflicting values of
 *                   other keywords are errors.
 *   $ref            local references (#, #/$defs/..., any JSON pointer),
 *                   recursion allowed; siblings are merged as with allOf.
 *   ignored         title, description, $comment, default, examples,
 *                   $schema, $id (root only), $defs, definitions,
 *                   deprecated, readOnly, writeOnly, contentEncoding,
 *                   contentMediaType, and any keyword starting with "x-".
 * Any other keyword is an error naming it and its place in the schema
 * (not, if/then/else, patternProperties, propertyNames, contains, ...).
 *
 * Whitespace: none (compact) or up to N blanks at each place JSON allows
 * it (nu_json_options.max_whitespace), see grammar_json.c. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar_json.h"

#define JS_MAX_DEPTH 64  /* nesting of schemas being converted at once */
#define JS_MAX_PARTS 256 /* schemas one allOf / $ref merge may combine */
#define JS_PATH 512

enum {
    T_NULL = 1,
    T_BOOLEAN = 2,
    T_OBJECT = 4,
    T_ARRAY = 8,
    T_STRING = 16,
    T_NUMBER = 32,
    T_INTEGER = 64,
    T_ALL = 127
};

typedef struct js_memo {
    const cJSON *schema;
    char *rule;
} js_memo;

typedef struct js {
    const cJSON *root;
    int32_t max_ws;
    const char *W; /* whitespace reference: " ws" or "" */
    nu_buf *out;
    nu_error *err;
    nu_status st;
    js_memo *memo;
    uint32_t n_memo, cap_memo;
    char **names;
    uint32_t n_names, cap_names;
    cJSON **owned; /* merged schemas, freed at the end */
    uint32_t n_owned, cap_owned;
    uint32_t prims;
    int depth;
} js;

/* ------------------------------------------------------------------------ */
/* Errors and bookkeeping                                                   */
/* ------------------------------------------------------------------------ */

/* Records the first error: "JSON schema at PATH: message". */
__attribute__((format(printf, 4, 5))) static void js_fail(js *c, const char *path, nu_status st,
                                                          const char *fmt, ...) {
    if (c->st != NU_OK) return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = nu_fail(c->err, st, "JSON schema at %s: %s", path, msg);
    nu_gram_one_line(c->err);
}

static void js_nomem(js *c) {
    if (c->st == NU_OK) c->st = nu_fail(c->err, NU_ERR_NOMEM, "out of memory converting a schema");
}

static bool js_grow(js *c, void **p, uint32_t *cap, uint32_t n, size_t sz) {
    if (n <= *cap) return true;
    uint32_t k = *cap ? *cap * 2 : 16;
    while (k < n) k *= 2;
    void *q = realloc(*p, (size_t)k * sz);
    if (!q) {
        js_nomem(c);
        return false;
    }
    *p = q;
    *cap = k;
    return true;
}

/* Keeps a merged schema alive until the conversion ends. */
static cJSON *js_own(js *c, cJSON *s) {
    if (!s) {
        js_nomem(c);
        return NULL;
    }
    if (!js_grow(c, (void **)&c->owned, &c->cap_owned, c->n_owned + 1, sizeof *c->owned)) {
        cJSON_Delete(s);
        return NULL;
    }
    return c->owned[c->n_owned++] = s;
}

static bool name_used(const js *c, const char *name) {
    for (uint32_t i = 0; i < c->n_names; i++)
        if (strcmp(c->names[i], name) == 0) return true;
    return false;
}

/* A new rule name from a hint: letters, digits and '-' only, made unique
 * with a number. The string lives until the end of the conversion. */
static const char *unique_name(js *c, const char *hint) {
    char base[72], name[96];
    size_t n = 0;
    for (const char *p = hint; *p && n < 60; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (ok)
            base[n++] = ch;
        else if (n > 0 && base[n - 1] != '-')
            base[n++] = '-';
    }
    while (n > 0 && base[n - 1] == '-') n--;
    if (n == 0) base[n++] = 'x';
    base[n] = 0;
    snprintf(name, sizeof name, "%s", base);
    for (int k = 2; name_used(c, name); k++) snprintf(name, sizeof name, "%s-%d", base, k);
    char *copy = strdup(name);
    if (!copy || !js_grow(c, (void **)&c->names, &c->cap_names, c->n_names + 1, sizeof *c->names)) {
        free(copy);
        js_nomem(c);
        return NULL;
    }
    return c->names[c->n_names++] = copy;
}

/* "path/segment" into out (JS_PATH bytes), shortened if it must be. */
static void sub_path(char *out, const char *path, const char *seg) {
    size_t a = strlen(path), b = strlen(seg);
    if (a > JS_PATH - 2) a = JS_PATH - 2;
    if (b > JS_PATH - 2 - a) b = JS_PATH - 2 - a;
    memmove(out, path, a);
    out[a] = '/';
    memcpy(out + a + 1, seg, b);
    out[a + 1 + b] = 0;
}

static void sub_path_i(char *out, const char *path, const char *seg, int i) {
    snprintf(out, JS_PATH, "%s/%s/%d", path, seg, i);
}

/* ------------------------------------------------------------------------ */
/* Keywords                                                                 */
/* ------------------------------------------------------------------------ */

typedef enum kw_class { KW_IGNORE, KW_CORE, KW_OBJ, KW_ARR, KW_STR, KW_NUM, KW_NO } kw_class;

static const struct keyword {
    const char *name;
    kw_class cls;
} keywords[] = {
    {"title", KW_IGNORE},
    {"description", KW_IGNORE},
    {"$comment", KW_IGNORE},
    {"default", KW_IGNORE},
    {"examples", KW_IGNORE},
    {"$schema", KW_IGNORE},
    {"$defs", KW_IGNORE},
    {"definitions", KW_IGNORE},
    {"deprecated", KW_IGNORE},
    {"readOnly", KW_IGNORE},
    {"writeOnly", KW_IGNORE},
    {"contentEncoding", KW_IGNORE},
    {"contentMediaType", KW_IGNORE},
    {"$id", KW_IGNORE},
    {"type", KW_CORE},
    {"enum", KW_CORE},
    {"const", KW_CORE},
    {"$ref", KW_CORE},
    {"allOf", KW_CORE},
    {"anyOf", KW_CORE},
    {"oneOf", KW_CORE},
    {"properties", KW_OBJ},
    {"required", KW_OBJ},
    {"additionalProperties", KW_OBJ},
    {"minProperties", KW_OBJ},
    {"maxProperties", KW_OBJ},
    {"items", KW_ARR},
    {"prefixItems", KW_ARR},
    {"additionalItems", KW_ARR},
    {"minItems", KW_ARR},
    {"maxItems", KW_ARR},
    {"uniqueItems", KW_ARR},
    {"minLength", KW_STR},
    {"maxLength", KW_STR},
    {"pattern", KW_STR},
    {"format", KW_STR},
    {"minimum", KW_NUM},
    {"maximum", KW_NUM},
    {"exclusiveMinimum", KW_NUM},
    {"exclusiveMaximum", KW_NUM},
    {"multipleOf", KW_NUM},
    {"not", KW_NO},
    {"if", KW_NO},
    {"then", KW_NO},
    {"else", KW_NO},
    {"patternProperties", KW_NO},
    {"propertyNames", KW_NO},
    {"dependencies", KW_NO},
    {"dependentRequired", KW_NO},
    {"dependentSchemas", KW_NO},
    {"contains", KW_NO},
    {"minContains", KW_NO},
    {"maxContains", KW_NO},
    {"unevaluatedProperties", KW_NO},
    {"unevaluatedItems", KW_NO},
    {"$anchor", KW_NO},
    {"$dynamicRef", KW_NO},
    {"$dynamicAnchor", KW_NO},
    {"$recursiveRef", KW_NO},
    {"$recursiveAnchor", KW_NO},
    {"$vocabulary", KW_NO},
};

/* The class of a keyword; unknown ones as KW_NO with *known false. */
static kw_class keyword_class(const char *k, bool *known) {
    *known = true;
    if (strncmp(k, "x-", 2) == 0) return KW_IGNORE;
    for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
        if (strcmp(keywords[i].name, k) == 0) return keywords[i].cls;
    *known = false;
    return KW_NO;
}

/* Rejects unsupported and unknown keywords (and $id below the root). */
static bool check_keywords(js *c, const cJSON *s, const char *path) {
    for (const cJSON *k = s->child; k; k = k->next) {
        bool known;
        kw_class cls = keyword_class(k->string, &known);
        if (cls != KW_NO && !(strcmp(k->string, "$id") == 0 && s != c->root)) continue;
        if (!known)
            js_fail(c, path, NU_ERR_UNSUPPORTED, "unknown keyword '%s'", k->string);
        else if (cls == KW_NO)
            js_fail(c, path, NU_ERR_UNSUPPORTED, "the keyword '%s' is not supported", k->string);
        else
            js_fail(c, path, NU_ERR_UNSUPPORTED, "'$id' below the root is not supported");
        return false;
    }
    return true;
}

/* Does the schema have keywords other than annotations and `except`? */
static bool has_constraints(const cJSON *s, const char *except1, const char *except2) {
    for (const cJSON *k = s->child; k; k = k->next) {
        bool known;
        if (keyword_class(k->string, &known) == KW_IGNORE) continue;
        if ((except1 && !strcmp(k->string, except1)) || (except2 && !strcmp(k->string, except2)))
            continue;
        return true;
    }
    return false;
}

/* A copy of s without the keywords named (annotations dropped too). */
static cJSON *without(js *c, const cJSON *s, const char *k1, const char *k2) {
    cJSON *o = js_own(c, cJSON_CreateObject());
    for (const cJSON *k = o ? s->child : NULL; k; k = k->next) {
        bool known;
        if (keyword_class(k->string, &known) == KW_IGNORE || !strcmp(k->string, k1) ||
            (k2 && !strcmp(k->string, k2)))
            continue;
        cJSON_AddItemToObject(o, k->string, cJSON_Duplicate(k, true));
    }
    return o;
}

/* ------------------------------------------------------------------------ */
/* References and types                                                     */
/* ------------------------------------------------------------------------ */

/* Decodes one JSON-pointer segment (~0 ~1 and %XX) of at most n bytes. */
static void pointer_segment(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++) {
        if (s[i] == '~' && i + 1 < n && (s[i + 1] == '0' || s[i + 1] == '1')) {
            out[k++] = s[++i] == '0' ? '~' : '/';
        } else if (s[i] == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) &&
                   isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            out[k++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            out[k++] = s[i];
        }
    }
    out[k] = 0;
}

/* The schema a local reference points at, or NULL (error recorded). */
static const cJSON *resolve_ref(js *c, const char *ref, const char *path) {
    if (ref[0] != '#') {
        js_fail(c, path, NU_ERR_UNSUPPORTED,
                "only local references (\"#...\") are supported, not '%s'", ref);
        return NULL;
    }
    const cJSON *at = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        js_fail(c, path, NU_ERR_UNSUPPORTED, "anchor references like '%s' are not supported", ref);
        return NULL;
    }
    while (at && *p == '/') {
        const char *end = strchr(p + 1, '/');
        size_t n = end ? (size_t)(end - p - 1) : strlen(p + 1);
        char seg[256];
        pointer_segment(p + 1, n, seg, sizeof seg);
        if (cJSON_IsArray(at)) {
            char *stop;
            long i = strtol(seg, &stop, 10);
            at = *seg && !*stop ? cJSON_GetArrayItem(at, (int)i) : NULL;
        } else {
            at = cJSON_IsObject(at) ? cJSON_GetObjectItemCaseSensitive(at, seg) : NULL;
        }
        p += 1 + n;
    }
    if (!at) js_fail(c, path, NU_ERR_FORMAT, "the reference '%s' points at nothing", ref);
    return at;
}

/* Follows a schema that is only a reference (plus annotations). */
static const cJSON *deref(js *c, const cJSON *s) {
    for (int i = 0; i < 16 && cJSON_IsObject(s); i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (!cJSON_IsString(r) || has_constraints(s, "$ref", NULL)) break;
        nu_status before = c->st;
        const cJSON *t = resolve_ref(c, r->valuestring, "#");
        if (!t) {
            c->st = before; /* only a probe: the real conversion reports it */
            break;
        }
        s = t;
    }
    return s;
}

/* The type bit of a type name, 0 if unknown. */
static uint32_t type_bit(const char *name) {
    static const char *names[] = {"null",   "boolean", "object", "array",
                                  "string", "number",  "integer"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(name, names[i])) return 1u << i;
    return 0;
}

/* The types "type" allows (T_ALL without it); 0 after an error. */
static uint32_t declared_types(js *c, const cJSON *s, const char *path) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!t) return T_ALL;
    uint32_t m = 0;
    if (cJSON_IsString(t)) {
        m = type_bit(t->valuestring);
    } else if (cJSON_IsArray(t)) {
        for (const cJSON *e = t->child; e; e = e->next) {
            uint32_t b = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
            if (!b) {
                m = 0;
                break;
            }
            m |= b;
        }
    }
    if (!m) js_fail(c, path, NU_ERR_FORMAT, "'type' must be a type name or a list of them");
    return m;
}

/* The type of a JSON value (integral numbers count as integers). */
static uint32_t value_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOLEAN;
    if (cJSON_IsObject(v)) return T_OBJECT;
    if (cJSON_IsArray(v)) return T_ARRAY;
    if (cJSON_IsString(v)) return T_STRING;
    return floor(v->valuedouble) == v->valuedouble ? T_INTEGER : T_NUMBER;
}

/* Could a value of types a be accepted by types b? */
static bool types_meet(uint32_t a, uint32_t b) {
    return (a & b) || ((a & T_INTEGER) && (b & T_NUMBER)) || ((a & T_NUMBER) && (b & T_INTEGER));
}

/* Types implied by the keywords present; T_ALL if none says. */
static uint32_t inferred_types(const cJSON *s) {
    uint32_t m = 0;
    for (const cJSON *k = s->child; k; k = k->next) {
        bool known;
        switch (keyword_class(k->string, &known)) {
        case KW_OBJ: m |= T_OBJECT; break;
        case KW_ARR: m |= T_ARRAY; break;
        case KW_STR: m |= T_STRING; break;
        case KW_NUM: m |= T_NUMBER; break;
        default: break;
        }
    }
    return m ? m : T_ALL;
}

/* ------------------------------------------------------------------------ */
/* Rules                                                                    */
/* ------------------------------------------------------------------------ */

static const char *js_rule(js *c, const cJSON *s, const char *path, const char *hint);
static void js_body(js *c, const cJSON *s, const char *path, const char *name, nu_buf *b);
static cJSON *js_merge(js *c, const cJSON *const *parts, int n, const char *path);

/* Marks fixed rules as used and returns the name. */
static const char *prim(js *c, uint32_t bit, const char *name) {
    c->prims |= bit;
    return name;
}

/* The rule matching schema s (defining it on first use). */
static const char *js_rule(js *c, const cJSON *s, const char *path, const char *hint) {
    if (c->st) return NULL;
    for (uint32_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].schema == s) return c->memo[i].rule;
    if (cJSON_IsTrue(s)) return prim(c, JP_VALUE, "value");
    if (cJSON_IsFalse(s)) {
        js_fail(c, path, NU_ERR_UNSUPPORTED, "the schema 'false' matches nothing");
        return NULL;
    }
    if (!cJSON_IsObject(s)) {
        js_fail(c, path, NU_ERR_FORMAT, "a schema must be an object or a boolean");
        return NULL;
    }
    if (c->depth >= JS_MAX_DEPTH) {
        js_fail(c, path, NU_ERR_UNSUPPORTED, "schemas nested more than %d deep", JS_MAX_DEPTH);
        return NULL;
    }
    const char *name = unique_name(c, hint);
    if (!name || !js_grow(c, (void **)&c->memo, &c->cap_memo, c->n_memo + 1, sizeof *c->memo))
        return NULL;
    c->memo[c->n_memo++] = (js_memo){s, (char *)name};
    nu_buf body;
    nu_buf_init(&body);
    c->depth++;
    js_body(c, s, path, name, &body);
    c->depth--;
    if (body.failed) js_nomem(c);
    if (c->st == NU_OK) nu_buf_printf(c->out, "%s ::= %s\n", name, body.data ? body.data : "\"\"");
    nu_buf_free(&body);
    return c->st ? NULL : name;
}

/* A child rule: path and name extended by a segment. */
static const char *child_rule(js *c, const cJSON *s, const char *path, const char *seg,
                              const char *name, const char *name_seg) {
    char p[JS_PATH], h[160];
    sub_path(p, path, seg);
    snprintf(h, sizeof h, "%s-%s", name, name_seg);
    return js_rule(c, s, p, h);
}

/* ------------------------------------------------------------------------ */
/* const and enum                                                           */
/* ------------------------------------------------------------------------ */

/* Is value v (of the const k or the enum e) one to generate? */
static bool value_wanted(const cJSON *k, const cJSON *e, const cJSON *v, uint32_t types) {
    if (!types_meet(value_type(v), types)) return false;
    if (!k || !e) return true;
    for (const cJSON *w = e->child; w; w = w->next) /* both: the const must be listed */
        if (cJSON_Compare(w, v, true)) return true;
    return false;
}

/* Rejects keywords other than type next to enum / const. */
static bool values_alone(js *c, const cJSON *s, const char *path) {
    for (const cJSON *x = s->child; x; x = x->next) {
        bool known;
        kw_class cls = keyword_class(x->string, &known);
        if (cls != KW_IGNORE && cls != KW_CORE) {
            js_fail(c, path, NU_ERR_UNSUPPORTED,
                    "'%s' together with enum or const is not supported", x->string);
            return false;
        }
    }
    return true;
}

/* const / enum: their values (of an allowed type) as compact JSON, one of
 * them (common prefixes factored when there are many). */
static void js_values(js *c, const cJSON *s, const char *path, uint32_t types, nu_buf *b) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (!values_alone(c, s, path)) return;
    if (e && (!cJSON_IsArray(e) || !e->child)) {
        js_fail(c, path, NU_ERR_FORMAT, "'enum' must be a non-empty array");
        return;
    }
    size_t n = 0, cap = k ? 1 : (size_t)cJSON_GetArraySize(e);
    char **texts = calloc(cap, sizeof *texts);
    for (const cJSON *v = k ? k : e->child; texts && v; v = k ? NULL : v->next)
        if (value_wanted(k, e, v, types) && !(texts[n++] = cJSON_PrintUnformatted(v))) break;
    if (!texts || (n && !texts[n - 1]))
        js_nomem(c);
    else if (n == 0)
        js_fail(c, path, NU_ERR_UNSUPPORTED, "no value of enum / const is allowed here");
    else
        nu_gram_choices_expr(b, (const char *const *)texts, n);
    for (size_t i = 0; texts && i < n; i++) cJSON_free(texts[i]);
    free(texts);
}

/* ------------------------------------------------------------------------ */
/* Objects                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct js_prop {
    const char *key;
    const char *rule;
    bool required;
} js_prop;

static bool in_string_array(const cJSON *a, const char *s) {
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && !strcmp(e->valuestring, s)) return true;
    return false;
}

#define KEY_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"

/* A trie of the declared keys made only of KEY_CHARS. */
enum { KEY_TRIE_MAX = 1024 /* nodes: characters of all declared keys, plus the root */ };
typedef struct key_trie {
    char ch[KEY_TRIE_MAX];
    int parent[KEY_TRIE_MAX];
    bool word[KEY_TRIE_MAX];
    int n;
} key_trie;

static int trie_child(const key_trie *t, int node, char ch) {
    for (int i = 1; i < t->n; i++)
        if (t->parent[i] == node && t->ch[i] == ch) return i;
    return -1;
}

/* Writes rule `name` for the key strings (without quotes) over KEY_CHARS,
 * one or more characters, that are not in the trie: at each node, stop
 * (unless that spells a declared key), leave the trie with a character no
 * declared key continues with, or follow one that does. */
static void write_key_rules(js *c, const key_trie *t, const char *name) {
    for (int v = 0; v < t->n; v++) {
        nu_buf_printf(c->out, "%s-k%d ::= ", name, v);
        bool any = false;
        if (v > 0 && !t->word[v]) {
            nu_buf_puts(c->out, "\"\"");
            any = true;
        }
        nu_buf_puts(c->out, any ? " | [" : "[");
        size_t before = c->out->len;
        for (const char *p = KEY_CHARS; *p; p++) {
            if (trie_child(t, v, *p) >= 0) continue;
            if (*p == '-')
                nu_buf_puts(c->out, "\\-");
            else
                nu_buf_add(c->out, p, 1);
        }
        nu_buf_printf(c->out, "] [%s]*", KEY_CHARS);
        if (c->out->len - before == 0) c->out->failed = true; /* cannot happen: 64 > children */
        for (int k = 1; k < t->n; k++)
            if (t->parent[k] == v) nu_buf_printf(c->out, " | \"%c\" %s-k%d", t->ch[k], name, k);
        nu_buf_puts(c->out, "\n");
    }
}

/* The rule for extra property keys: quoted strings over KEY_CHARS that
 * are none of the declared keys. */
static const char *extra_key_rule(js *c, const char *obj, const js_prop *props, uint32_t n) {
    char hint[160];
    snprintf(hint, sizeof hint, "%s-key", obj);
    const char *name = unique_name(c, hint);
    key_trie *t = name ? calloc(1, sizeof *t) : NULL;
    if (!t) {
        js_nomem(c);
        return NULL;
    }
    t->n = 1;
    t->parent[0] = -1;
    for (uint32_t i = 0; i < n; i++) {
        const char *k = props[i].key;
        if (!*k || strspn(k, KEY_CHARS) != strlen(k)) continue;
        int node = 0;
        for (const char *p = k; *p && t->n < KEY_TRIE_MAX; p++) {
            int next = trie_child(t, node, *p);
            if (next < 0) {
                next = t->n++;
                t->ch[next] = *p;
                t->parent[next] = node;
                t->word[next] = false;
            }
            node = next;
        }
        t->word[node] = true;
    }
    if (t->n >= KEY_TRIE_MAX)
        js_fail(c, "#", NU_ERR_UNSUPPORTED, "too many declared property names");
    write_key_rules(c, t, name);
    nu_buf_printf(c->out, "%s ::= \"\\\"\" %s-k0 \"\\\"\"\n", name, name);
    free(t);
    return name;
}

/* "key" : value, as GBNF. */
static void write_member(js *c, nu_buf *b, const char *key_expr, const char *rule) {
    nu_buf_printf(b, "%s%s \":\"%s %s%s", key_expr, c->W, c->W, rule, c->W);
}

/* The member text of property i: "key" : value, as GBNF (caller frees). */
static char *member_text(js *c, const js_prop *p) {
    nu_buf key, m;
    nu_buf_init(&key);
    nu_buf_init(&m);
    nu_gram_json_string_literal(&key, p->key);
    write_member(c, &m, key.data ? key.data : "\"\"", p->rule);
    if (key.failed) m.failed = true;
    nu_buf_free(&key);
    return nu_gram_buf_take(&m);
}

/* Names for the chain rules that are used: first-i when nothing may have
 * been written before property i (all properties before it optional),
 * rest-i for i >= 1. */
static bool chain_names(js *c, const char *obj, const js_prop *props, uint32_t n,
                        const char **first, const char **rest) {
    char hint[160];
    for (uint32_t i = 0; i <= n && !c->st; i++) {
        snprintf(hint, sizeof hint, "%s-p%u", obj, i);
        if (i == 0 || (first[i - 1] && !props[i - 1].required)) first[i] = unique_name(c, hint);
        snprintf(hint, sizeof hint, "%s-r%u", obj, i);
        if (i > 0) rest[i] = unique_name(c, hint);
    }
    return c->st == NU_OK;
}

/* Optional (or extra) properties as a chain of rules: first-i holds
 * properties i.. with no comma before the first present one, rest-i the
 * same after something was written (each one preceded by a comma). */
static void write_chain(js *c, const char *obj, const js_prop *props, char **members, uint32_t n,
                        const char *extra, nu_buf *b) {
    const char **first = calloc(n + 1, sizeof *first), **rest = calloc(n + 1, sizeof *rest);
    if (!first || !rest) js_nomem(c);
    if (first && rest && chain_names(c, obj, props, n, first, rest)) {
        for (uint32_t i = 0; i < n; i++) {
            bool opt = !props[i].required;
            if (first[i])
                nu_buf_printf(c->out, "%s ::= %s %s%s%s\n", first[i], members[i], rest[i + 1],
                              opt ? " | " : "", opt ? first[i + 1] : "");
            if (rest[i])
                nu_buf_printf(c->out, "%s ::= \",\"%s %s %s%s%s\n", rest[i], c->W, members[i],
                              rest[i + 1], opt ? " | " : "", opt ? rest[i + 1] : "");
        }
        if (first[n] && extra)
            nu_buf_printf(c->out, "%s ::= (%s (\",\"%s %s)*)?\n", first[n], extra, c->W, extra);
        else if (first[n])
            nu_buf_printf(c->out, "%s ::= \"\"\n", first[n]);
        if (n > 0 && extra)
            nu_buf_printf(c->out, "%s ::= (\",\"%s %s)*\n", rest[n], c->W, extra);
        else if (n > 0)
            nu_buf_printf(c->out, "%s ::= \"\"\n", rest[n]);
        nu_buf_printf(b, "\"{\"%s %s \"}\"", c->W, first[0]);
    }
    free(first);
    free(rest);
}

/* Declared (and extra) properties: all required and no extras written
 * inline, else as a chain of rules. */
static void write_properties(js *c, const char *obj, const js_prop *props, uint32_t n,
                             const char *extra, nu_buf *b) {
    char **members = calloc(n + 1, sizeof *members);
    bool chain = extra != NULL;
    for (uint32_t i = 0; members && i < n; i++) {
        if (!(members[i] = member_text(c, &props[i]))) break;
        chain |= !props[i].required;
    }
    if (!members || (n && !members[n - 1])) {
        js_nomem(c);
    } else if (chain) {
        write_chain(c, obj, props, members, n, extra, b);
    } else {
        nu_buf_printf(b, "\"{\"%s", c->W);
        for (uint32_t i = 0; i < n; i++)
            nu_buf_printf(b, i ? " \",\"%s %s" : "%s %s", i ? c->W : "", members[i]);
        nu_buf_puts(b, " \"}\"");
    }
    for (uint32_t i = 0; members && i < n; i++) free(members[i]);
    free(members);
}

/* Checks minProperties / maxProperties against what the chain produces. */
static void check_property_counts(js *c, const cJSON *s, const char *path, uint32_t n_required,
                                  uint32_t n_declared, bool extras) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minProperties");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxProperties");
    if (mn && (!cJSON_IsNumber(mn) || mn->valuedouble > n_required))
        js_fail(c, path, NU_ERR_UNSUPPORTED,
                "minProperties is only supported when the required properties already satisfy it");
    if (mx && (!cJSON_IsNumber(mx) || extras || mx->valuedouble < n_declared))
        js_fail(c, path, NU_ERR_UNSUPPORTED,
                "maxProperties is only supported when all the "
                "declared properties fit and no others are allowed");
}

/* Fills the property list: declared ones in order, then required ones only
 * named in "required". Returns the count. */
static uint32_t collect_properties(js *c, const cJSON *s, const char *path, const char *name,
                                   const cJSON *addl, js_prop *props) {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    uint32_t n = 0;
    for (const cJSON *p = pr ? pr->child : NULL; p && !c->st; p = p->next) {
        char seg[JS_PATH];
        snprintf(seg, sizeof seg, "properties/%s", p->string);
        props[n] = (js_prop){p->string, child_rule(c, p, path, seg, name, p->string),
                             in_string_array(req, p->string)};
        n++;
    }
    for (const cJSON *r = req ? req->child : NULL; r && !c->st; r = r->next) {
        if (!cJSON_IsString(r)) {
            js_fail(c, path, NU_ERR_FORMAT, "'required' must list strings");
            break;
        }
        if (pr && cJSON_GetObjectItemCaseSensitive(pr, r->valuestring)) continue;
        if (cJSON_IsFalse(addl)) {
            js_fail(c, path, NU_ERR_UNSUPPORTED,
                    "the required property '%s' is not declared and additionalProperties is false",
                    r->valuestring);
            break;
        }
        const char *rule = cJSON_IsObject(addl)
                               ? child_rule(c, addl, path, "additionalProperties", name, "extra")
                               : prim(c, JP_VALUE, "value");
        props[n++] = (js_prop){r->valuestring, rule, true};
    }
    return n;
}

static void js_object(js *c, const cJSON *s, const char *path, const char *name, nu_buf *b) {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if ((pr && !cJSON_IsObject(pr)) || (req && !cJSON_IsArray(req)) ||
        (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))) {
        js_fail(c, path, NU_ERR_FORMAT, "malformed properties, required or additionalProperties");
        return;
    }
    if (!pr && !req && (!addl || cJSON_IsTrue(addl)) &&
        !cJSON_GetObjectItemCaseSensitive(s, "minProperties") &&
        !cJSON_GetObjectItemCaseSensitive(s, "maxProperties")) {
        nu_buf_puts(b, prim(c, JP_OBJECT, "object")); /* nothing declared: any object */
        return;
    }
    uint32_t cap = (uint32_t)cJSON_GetArraySize(pr) + (uint32_t)cJSON_GetArraySize(req) + 1;
    js_prop *props = calloc(cap, sizeof *props);
    if (!props) {
        js_nomem(c);
        return;
    }
    uint32_t n = collect_properties(c, s, path, name, addl, props), n_req = 0;
    for (uint32_t i = 0; i < n; i++) n_req += props[i].required;
    bool extras = cJSON_IsObject(addl) || cJSON_IsTrue(addl);
    check_property_counts(c, s, path, n_req, n, extras);
    nu_buf member;
    nu_buf_init(&member);
    if (extras && !c->st) {
        const char *key = extra_key_rule(c, name, props, n);
        const char *val = cJSON_IsObject(addl)
                              ? child_rule(c, addl, path, "additionalProperties", name, "extra")
                              : prim(c, JP_VALUE, "value");
        if (key && val) write_member(c, &member, key, val);
    }
    if (!c->st) write_properties(c, name, props, n, extras ? member.data : NULL, b);
    nu_buf_free(&member);
    free(props);
}

/* ------------------------------------------------------------------------ */
/* Arrays                                                                   */
/* ------------------------------------------------------------------------ */

/* A non-negative integer keyword; def when absent, -1 after an error. */
static long count_keyword(js *c, const cJSON *s, const char *path, const char *k, long def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    if (!v) return def;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble > 100000) {
        js_fail(c, path, NU_ERR_UNSUPPORTED, "'%s' must be an integer from 0 to 100000", k);
        return -1;
    }
    return (long)v->valuedouble;
}

/* The element layout of an array schema. */
typedef struct array_shape {
    const char **prefix; /* rules of the positional items */
    long n_prefix;
    const char *extra; /* rule of the items after them, NULL: none allowed */
    long min, max;     /* max -1: unbounded */
} array_shape;

/* Reads items / prefixItems / additionalItems / minItems / maxItems. */
static bool array_shape_read(js *c, const cJSON *s, const char *path, const char *name,
                             array_shape *a) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *more = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
    if (cJSON_IsArray(items)) { /* draft-07 tuple form */
        prefix = items;
        items = more;
    }
    if (prefix && !cJSON_IsArray(prefix)) {
        js_fail(c, path, NU_ERR_FORMAT, "'prefixItems' must be an array of schemas");
        return false;
    }
    a->min = count_keyword(c, s, path, "minItems", 0);
    a->max = count_keyword(c, s, path, "maxItems", -1);
    a->n_prefix = cJSON_GetArraySize(prefix);
    a->prefix = calloc((size_t)a->n_prefix + 1, sizeof *a->prefix);
    if (!a->prefix) js_nomem(c);
    long i = 0;
    for (const cJSON *p = prefix ? prefix->child : NULL; p && !c->st; p = p->next, i++) {
        char seg[64], h[160], pp[JS_PATH];
        snprintf(seg, sizeof seg, "%s/%ld", items == more && more ? "items" : "prefixItems", i);
        snprintf(h, sizeof h, "%s-item%ld", name, i);
        sub_path(pp, path, seg);
        a->prefix[i] = js_rule(c, p, pp, h);
    }
    if (cJSON_IsFalse(items))
        a->extra = NULL;
    else if (items)
        a->extra = child_rule(c, items, path, "items", name, "item");
    else
        a->extra = a->n_prefix > 0 && a->min <= a->n_prefix ? NULL : prim(c, JP_VALUE, "value");
    if (!c->st && a->max >= 0 && a->min > a->max)
        js_fail(c, path, NU_ERR_UNSUPPORTED, "minItems is greater than maxItems");
    if (!c->st && !a->extra && a->min > a->n_prefix)
        js_fail(c, path, NU_ERR_UNSUPPORTED, "minItems asks for more items than are allowed");
    return c->st == NU_OK;
}

/* The rule of element i (0-based). */
static const char *element(const array_shape *a, long i) {
    return i < a->n_prefix ? a->prefix[i] : a->extra;
}

/* Elements from i on, each after a comma: required ones up to min, then
 * optional positional ones nested, then the optional extra ones. */
static void write_tail(js *c, nu_buf *b, const array_shape *a, long i) {
    long last = a->extra ? a->max : (a->max >= 0 && a->max < a->n_prefix ? a->max : a->n_prefix);
    for (; i < a->min; i++) nu_buf_printf(b, " \",\"%s %s%s", c->W, element(a, i), c->W);
    long nested = 0;
    for (; i < a->n_prefix && (last < 0 || i < last); i++, nested++)
        nu_buf_printf(b, " (\",\"%s %s%s", c->W, element(a, i), c->W);
    if (a->extra && (last < 0 || i < last)) {
        nu_buf_printf(b, " (\",\"%s %s%s)", c->W, a->extra, c->W);
        if (last < 0)
            nu_buf_puts(b, "*");
        else
            nu_buf_printf(b, "{0,%ld}", last - i);
    }
    for (; nested > 0; nested--) nu_buf_puts(b, ")?");
}

static void js_array(js *c, const cJSON *s, const char *path, const char *name, nu_buf *b) {
    array_shape a = {0};
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    if (array_shape_read(c, s, path, name, &a)) {
        long most = a.extra ? a.max : (a.max >= 0 && a.max < a.n_prefix ? a.max : a.n_prefix);
        if (cJSON_IsTrue(uniq) && (most < 0 || most > 1))
            js_fail(c, path, NU_ERR_UNSUPPORTED, "uniqueItems is only supported with maxItems 1");
        nu_buf_printf(b, "\"[\"%s ", c->W);
        if (most != 0) {
            if (a.min == 0) nu_buf_puts(b, "(");
            nu_buf_printf(b, "%s%s", element(&a, 0), c->W);
            write_tail(c, b, &a, 1);
            if (a.min == 0) nu_buf_puts(b, ")?");
        }
        nu_buf_puts(b, " \"]\"");
    }
    free(a.prefix);
}

/* ------------------------------------------------------------------------ */
/* Strings and numbers                                                      */
/* ------------------------------------------------------------------------ */

/* A string in one of the supported formats. */
static void js_format(js *c, const cJSON *fmt, const char *path, nu_buf *b) {
    static const struct {
        const char *name;
        uint32_t bit;
    } formats[] = {{"date", JP_DATE},
                   {"time", JP_TIME},
                   {"date-time", JP_DATETIME},
                   {"uuid", JP_UUID},
                   {"email", JP_EMAIL}};
    for (size_t i = 0; cJSON_IsString(fmt) && i < sizeof formats / sizeof *formats; i++)
        if (!strcmp(fmt->valuestring, formats[i].name)) {
            nu_buf_printf(b, "\"\\\"\" %s \"\\\"\"", prim(c, formats[i].bit, formats[i].name));
            return;
        }
    js_fail(c, path, NU_ERR_UNSUPPORTED,
            "the format '%s' is not supported (supported: date, time, date-time, uuid, email)",
            cJSON_IsString(fmt) ? fmt->valuestring : "?");
}

/* A string whose contents match a regex (rules "<name>-pattern" and its
 * "-any" helper). */
static void js_pattern(js *c, const cJSON *pat, const char *path, const char *name, nu_buf *b) {
    char hint[160];
    snprintf(hint, sizeof hint, "%s-pattern", name);
    const char *rule = unique_name(c, hint);
    snprintf(hint, sizeof hint, "%s-any", rule ? rule : "x");
    if (!rule || !cJSON_IsString(pat) || !unique_name(c, hint)) {
        if (!c->st) js_fail(c, path, NU_ERR_FORMAT, "'pattern' must be a string");
        return;
    }
    nu_error e = {0};
    nu_status st = nu_gram_regex_rules(c->out, rule, pat->valuestring, GRAM_REGEX_JSON_STRING, &e);
    if (st)
        js_fail(c, path, st, "pattern: %s", e.message);
    else
        nu_buf_printf(b, "\"\\\"\" %s \"\\\"\"", rule);
}

/* A string of minLength..maxLength characters. */
static void js_lengths(js *c, const cJSON *s, const char *path, nu_buf *b) {
    long mn = count_keyword(c, s, path, "minLength", 0);
    long mx = count_keyword(c, s, path, "maxLength", -1);
    if (c->st) return;
    if (mx >= 0 && mn > mx) {
        js_fail(c, path, NU_ERR_UNSUPPORTED, "minLength is greater than maxLength");
        return;
    }
    if (mx < 0)
        nu_buf_printf(b, "\"\\\"\" char{%ld,} \"\\\"\"", mn);
    else
        nu_buf_printf(b, "\"\\\"\" char{%ld,%ld} \"\\\"\"", mn, mx);
    prim(c, JP_CHAR, "char");
}

static void js_string(js *c, const cJSON *s, const char *path, const char *name, nu_buf *b) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    bool lengths = cJSON_GetObjectItemCaseSensitive(s, "minLength") ||
                   cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    if ((fmt && (pat || lengths)) || (pat && lengths))
        js_fail(c, path, NU_ERR_UNSUPPORTED,
                "only one of format, pattern and minLength / maxLength at a time is supported");
    else if (fmt)
        js_format(c, fmt, path, b);
    else if (pat)
        js_pattern(c, pat, path, name, b);
    else if (lengths)
        js_lengths(c, s, path, b);
    else
        nu_buf_puts(b, prim(c, JP_STRING, "string"));
}

/* Reads the numeric bounds (draft-4 boolean exclusives too). */
static bool read_bounds(js *c, const cJSON *s, const char *path, nu_gram_json_bounds *bd) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    const cJSON *emn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    const cJSON *emx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    memset(bd, 0, sizeof *bd);
    if ((mn && !cJSON_IsNumber(mn)) || (mx && !cJSON_IsNumber(mx)) ||
        (emn && !cJSON_IsNumber(emn) && !cJSON_IsBool(emn)) ||
        (emx && !cJSON_IsNumber(emx) && !cJSON_IsBool(emx))) {
        js_fail(c, path, NU_ERR_FORMAT, "numeric bounds must be numbers");
        return false;
    }
    if (mn) bd->has_lo = true, bd->lo = mn->valuedouble, bd->lo_excl = cJSON_IsTrue(emn);
    if (mx) bd->has_hi = true, bd->hi = mx->valuedouble, bd->hi_excl = cJSON_IsTrue(emx);
    if (cJSON_IsNumber(emn) && (!bd->has_lo || emn->valuedouble >= bd->lo))
        bd->has_lo = true, bd->lo = emn->valuedouble, bd->lo_excl = true;
    if (cJSON_IsNumber(emx) && (!bd->has_hi || emx->valuedouble <= bd->hi))
        bd->has_hi = true, bd->hi = emx->valuedouble, bd->hi_excl = true;
    return true;
}

static void js_number(js *c, const cJSON *s, const char *path, bool integer, nu_buf *b) {
    const cJSON *mult = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
    if (mult && !(integer && cJSON_IsNumber(mult) && mult->valuedouble == 1)) {
        js_fail(c, path, NU_ERR_UNSUPPORTED, "multipleOf is only supported as 1 on integers");
        return;
    }
    nu_gram_json_bounds bd;
    if (!read_bounds(c, s, path, &bd)) return;
    if (!bd.has_lo && !bd.has_hi) {
        nu_buf_puts(b, integer ? prim(c, JP_INTEGER, "integer") : prim(c, JP_NUMBER, "number"));
        return;
    }
    nu_error e = {0};
    nu_status st =
        integer ? nu_gram_json_integer_range(b, &bd, &e) : nu_gram_json_number_range(b, &bd, &e);
    if (st) js_fail(c, path, st, "%s", e.message);
}

/* ------------------------------------------------------------------------ */
/* Combinations                                                             */
/* ------------------------------------------------------------------------ */

/* The type mask of a "type" value; 0 if malformed. */
static uint32_t type_mask(const cJSON *t) {
    if (cJSON_IsString(t)) return type_bit(t->valuestring);
    uint32_t m = 0;
    for (const cJSON *e = cJSON_IsArray(t) ? t->child : NULL; e; e = e->next) {
        uint32_t b = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
        if (!b) return 0;
        m |= b;
    }
    return m;
}

/* The type names of a mask, as a JSON array. */
static cJSON *types_json(uint32_t m) {
    static const char *names[] = {"null",   "boolean", "object", "array",
                                  "string", "number",  "integer"};
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < 7; i++)
        if (m & (1u << i)) cJSON_AddItemToArray(a, cJSON_CreateString(names[i]));
    return a;
}

/* Intersection of two type masks (integers are numbers). */
static uint32_t types_and(uint32_t a, uint32_t b) {
    uint32_t m = a & b;
    if (((a & T_INTEGER) && (b & T_NUMBER)) || ((b & T_INTEGER) && (a & T_NUMBER))) m |= T_INTEGER;
    return m;
}

/* {"allOf": [a, b]} (copies). */
static cJSON *both(const cJSON *a, const cJSON *b) {
    cJSON *o = cJSON_CreateObject(), *l = cJSON_AddArrayToObject(o, "allOf");
    cJSON_AddItemToArray(l, cJSON_Duplicate(a, true));
    cJSON_AddItemToArray(l, cJSON_Duplicate(b, true));
    return o;
}

/* A copy of a keyword's value; a const becomes a one-value enum list. */
static cJSON *as_enum(const char *k, const cJSON *v) {
    if (strcmp(k, "const") != 0) return cJSON_Duplicate(v, true);
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_Duplicate(v, true));
    return a;
}

static bool is_one_of(const char *k, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(k, *list)) return true;
    return false;
}

/* Combines a new value v of keyword k with the merged value old; returns
 * the replacement (NULL: keep old; error recorded when they conflict). */
static cJSON *combine(js *c, const char *k, const cJSON *old, const cJSON *v, const char *path) {
    static const char *mins[] = {"minimum",  "exclusiveMinimum", "minLength",
                                 "minItems", "minProperties",    NULL};
    static const char *maxs[] = {"maximum",  "exclusiveMaximum", "maxLength",
                                 "maxItems", "maxProperties",    NULL};
    if (!strcmp(k, "type")) {
        uint32_t m = types_and(type_mask(old), type_mask(v));
        if (!m) js_fail(c, path, NU_ERR_UNSUPPORTED, "allOf: no type satisfies every branch");
        return m ? types_json(m) : NULL;
    }
    if (cJSON_IsNumber(old) && cJSON_IsNumber(v) && (is_one_of(k, mins) || is_one_of(k, maxs))) {
        bool take = is_one_of(k, mins) ? v->valuedouble > old->valuedouble
                                       : v->valuedouble < old->valuedouble;
        return take ? cJSON_Duplicate(v, true) : NULL;
    }
    if (!strcmp(k, "additionalProperties") || !strcmp(k, "items")) {
        if (cJSON_IsFalse(old) || cJSON_IsTrue(v) || cJSON_Compare(old, v, true)) return NULL;
        if (cJSON_IsFalse(v) || cJSON_IsTrue(old)) return cJSON_Duplicate(v, true);
        return both(old, v);
    }
    if (!strcmp(k, "enum")) {
        cJSON *a = cJSON_CreateArray();
        for (const cJSON *x = old->child; a && x; x = x->next)
            for (const cJSON *y = v->child; y; y = y->next)
                if (cJSON_Compare(x, y, true)) {
                    cJSON_AddItemToArray(a, cJSON_Duplicate(x, true));
                    break;
                }
        if (a && !a->child)
            js_fail(c, path, NU_ERR_UNSUPPORTED, "allOf: no enum value is allowed by every branch");
        return a;
    }
    if (!cJSON_Compare(old, v, true))
        js_fail(c, path, NU_ERR_UNSUPPORTED, "allOf: cannot combine different values of '%s'", k);
    return NULL;
}

/* Merges properties (same name twice: allOf of both) and required (union)
 * in place. */
static void merge_lists(cJSON *old, const char *k, const cJSON *v) {
    for (const cJSON *x = v->child; x; x = x->next) {
        if (!strcmp(k, "required")) {
            if (!in_string_array(old, x->valuestring))
                cJSON_AddItemToArray(old, cJSON_Duplicate(x, true));
            continue;
        }
        cJSON *have = cJSON_GetObjectItemCaseSensitive(old, x->string);
        if (!have)
            cJSON_AddItemToObject(old, x->string, cJSON_Duplicate(x, true));
        else if (!cJSON_Compare(have, x, true))
            cJSON_ReplaceItemInObjectCaseSensitive(old, x->string, both(have, x));
    }
}

/* Adds keyword k with value v of one part to the merged schema. */
static void merge_keyword(js *c, cJSON *out, const char *k, const cJSON *v, const char *path) {
    const char *key = !strcmp(k, "const") ? "enum" : k;
    cJSON *old = cJSON_GetObjectItemCaseSensitive(out, key);
    bool lists = !strcmp(k, "properties") || !strcmp(k, "required");
    if (!old) {
        cJSON_AddItemToObject(out, key, as_enum(k, v));
    } else if (lists && cJSON_IsObject(old) == cJSON_IsObject(v) &&
               cJSON_IsArray(old) == cJSON_IsArray(v)) {
        merge_lists(old, k, v);
    } else {
        cJSON *tmp = strcmp(key, k) ? as_enum(k, v) : NULL;
        cJSON *rep = combine(c, key, old, tmp ? tmp : v, path);
        cJSON_Delete(tmp);
        if (rep) cJSON_ReplaceItemInObjectCaseSensitive(out, key, rep);
    }
}

/* Appends the plain schemas part stands for to flat: $ref and allOf
 * expanded depth first, so properties keep the order they are written in.
 * depth counts the allOf / $ref levels above p (a $ref cycle never ends). */
static void flatten_one(js *c, const cJSON *p, const char *path, const cJSON **flat, int *n,
                        int *budget, int depth) {
    if (c->st || cJSON_IsTrue(p)) return;
    if (depth > JS_MAX_DEPTH) {
        js_fail(c, path, NU_ERR_UNSUPPORTED,
                "allOf / $ref nested more than %d deep (or a $ref that refers to itself)",
                JS_MAX_DEPTH);
        return;
    }
    if (--*budget < 0 || *n >= JS_MAX_PARTS) {
        js_fail(c, path, NU_ERR_UNSUPPORTED,
                "allOf / $ref combine more than %d schemas here; at most %d are supported",
                JS_MAX_PARTS, JS_MAX_PARTS);
        return;
    }
    if (!cJSON_IsObject(p)) {
        js_fail(c, path, NU_ERR_UNSUPPORTED, "allOf: a branch is 'false' or not a schema");
        return;
    }
    if (!check_keywords(c, p, path)) return;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(p, "$ref");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(p, "allOf");
    if (!ref && !all) {
        flat[(*n)++] = p;
        return;
    }
    if (ref && !cJSON_IsString(ref)) {
        js_fail(c, path, NU_ERR_FORMAT, "'$ref' must be a string");
        return;
    }
    if (ref)
        flatten_one(c, resolve_ref(c, ref->valuestring, path), path, flat, n, budget, depth + 1);
    for (const cJSON *b = all ? all->child : NULL; b && !c->st; b = b->next)
        flatten_one(c, b, path, flat, n, budget, depth + 1);
    if (has_constraints(p, "$ref", "allOf"))
        flatten_one(c, without(c, p, "$ref", "allOf"), path, flat, n, budget, depth + 1);
}

/* Expands $ref and allOf in the parts into plain schemas (in order). */
static int flatten(js *c, const cJSON *const *parts, int n, const char *path, const cJSON **flat) {
    int n_flat = 0, budget = JS_MAX_PARTS;
    for (int i = 0; i < n && !c->st; i++) flatten_one(c, parts[i], path, flat, &n_flat, &budget, 0);
    return c->st ? -1 : n_flat;
}

/* After merging: a branch with additionalProperties false must declare
 * every property the merged schema may write. */
static void check_closed_parts(js *c, const cJSON *const *flat, int n, const cJSON *m,
                               const char *path) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(m, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(m, "required");
    for (int i = 0; i < n && !c->st; i++) {
        if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(flat[i], "additionalProperties")))
            continue;
        const cJSON *own = cJSON_GetObjectItemCaseSensitive(flat[i], "properties");
        for (int pass = 0; pass < 2; pass++)
            for (const cJSON *x = pass ? (req ? req->child : NULL) : (props ? props->child : NULL);
                 x && !c->st; x = x->next) {
                const char *nm = pass ? x->valuestring : x->string;
                if (nm && !cJSON_GetObjectItemCaseSensitive(own, nm))
                    js_fail(c, path, NU_ERR_UNSUPPORTED,
                            "allOf: a branch forbids additional properties but another has '%s'",
                            nm);
            }
    }
}

/* One schema equivalent to all the parts together. */
static cJSON *js_merge(js *c, const cJSON *const *parts, int n, const char *path) {
    const cJSON *flat[JS_MAX_PARTS];
    int n_flat = flatten(c, parts, n, path, flat);
    cJSON *m = n_flat >= 0 ? js_own(c, cJSON_CreateObject()) : NULL;
    for (int i = 0; m && i < n_flat && !c->st; i++)
        for (const cJSON *k = flat[i]->child; k && !c->st; k = k->next) {
            bool known;
            if (keyword_class(k->string, &known) != KW_IGNORE)
                merge_keyword(c, m, k->string, k, path);
        }
    if (m && !c->st) check_closed_parts(c, flat, n_flat, m, path);
    return c->st ? NULL : m;
}

/* $ref: the target's rule, with sibling keywords merged in. */
static void js_ref(js *c, const cJSON *s, const cJSON *ref, const char *path, const char *name,
                   nu_buf *b) {
    if (!cJSON_IsString(ref)) {
        js_fail(c, path, NU_ERR_FORMAT, "'$ref' must be a string");
        return;
    }
    const char *rule;
    if (has_constraints(s, "$ref", NULL)) {
        cJSON *m = js_merge(c, &s, 1, path);
        char hint[160];
        snprintf(hint, sizeof hint, "%s-all", name);
        rule = m ? js_rule(c, m, path, hint) : NULL;
    } else {
        const cJSON *t = resolve_ref(c, ref->valuestring, path);
        const char *slash = strrchr(ref->valuestring, '/');
        char hint[160];
        snprintf(hint, sizeof hint, "def-%s", slash ? slash + 1 : "root");
        rule = t ? js_rule(c, t, ref->valuestring, hint) : NULL;
    }
    if (rule) nu_buf_puts(b, rule);
}

static void js_all_of(js *c, const cJSON *s, const char *path, const char *name, nu_buf *b) {
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    if (!cJSON_IsArray(all) || !all->child) {
        js_fail(c, path, NU_ERR_FORMAT, "'allOf' must be a non-empty array");
        return;
    }
    cJSON *m = js_merge(c, &s, 1, path);
    char hint[160];
    snprintf(hint, sizeof hint, "%s-all", name);
    const char *rule = m ? js_rule(c, m, path, hint) : NULL;
    if (rule) nu_buf_puts(b, rule);
}

/* Has the schema a const or enum? */
static const cJSON *values_of(const cJSON *s, bool *single) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, "const");
    *single = k != NULL;
    if (k) return k;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    return cJSON_IsArray(e) ? e->child : NULL;
}

/* Types the values generated for s may have (T_ALL when unsure). */
static uint32_t generated_types(const cJSON *s) {
    if (!cJSON_IsObject(s)) return T_ALL;
    bool single;
    const cJSON *v = values_of(s, &single);
    if (v) {
        uint32_t m = 0;
        for (; v; v = single ? NULL : v->next) m |= value_type(v);
        return m;
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "anyOf") ||
        cJSON_GetObjectItemCaseSensitive(s, "oneOf") ||
        cJSON_GetObjectItemCaseSensitive(s, "allOf") || cJSON_GetObjectItemCaseSensitive(s, "$ref"))
        return T_ALL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    uint32_t m = t ? type_mask(t) : inferred_types(s);
    return m ? m : T_ALL;
}

/* A superset of the types s accepts. */
static uint32_t accepted_types(const cJSON *s) {
    if (!cJSON_IsObject(s)) return cJSON_IsFalse(s) ? 0 : T_ALL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    uint32_t m = t && type_mask(t) ? type_mask(t) : T_ALL;
    bool single;
    const cJSON *v = values_of(s, &single);
    if (v) {
        uint32_t vm = 0;
        for (; v; v = single ? NULL : v->next)
            vm |= value_type(v) == T_INTEGER ? T_INTEGER | T_NUMBER : value_type(v);
        m &= vm;
    }
    return m;
}

/* Is no value generated for a among the const / enum values of b? */
static bool values_excluded(const cJSON *a, const cJSON *b) {
    bool sa, sb;
    const cJSON *va = values_of(a, &sa), *vb = values_of(b, &sb);
    if (!va || !vb) return false;
    for (const cJSON *x = va; x; x = sa ? NULL : x->next)
        for (const cJSON *y = vb; y; y = sb ? NULL : y->next)
            if (cJSON_Compare(x, y, true)) return false;
    return true;
}

/* Does b reject every value generated for schema a (a single check)? */
static bool plainly_excludes(const cJSON *a, const cJSON *b) {
    return !types_meet(generated_types(a), accepted_types(b)) ||
           (cJSON_IsObject(a) && cJSON_IsObject(b) && values_excluded(a, b));
}

/* For object schemas: does b reject every object generated for a? */
static bool object_excludes(js *c, const cJSON *a, const cJSON *b) {
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties");
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required");
    const cJSON *xa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(b, "required");
    const cJSON *xb = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    bool extras = cJSON_IsObject(xa) || cJSON_IsTrue(xa);
    for (const cJSON *r = rb ? rb->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && !extras && !cJSON_GetObjectItemCaseSensitive(pa, r->valuestring) &&
            !in_string_array(ra, r->valuestring))
            return true;
    for (const cJSON *r = ra ? ra->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) continue;
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(pa, r->valuestring);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(pb, r->valuestring);
        if (cJSON_IsFalse(xb) && !y) return true;
        if (x && y && plainly_excludes(deref(c, x), deref(c, y))) return true;
    }
    return false;
}

/* Does b reject every value generated for a? (Conservative: false when
 * unsure.) */
static bool excludes(js *c, const cJSON *a, const cJSON *b) {
    a = deref(c, a);
    b = deref(c, b);
    if (plainly_excludes(a, b)) return true;
    return cJSON_IsObject(a) && cJSON_IsObject(b) && generated_types(a) == T_OBJECT &&
           !cJSON_GetObjectItemCaseSensitive(a, "allOf") && object_excludes(c, a, b);
}

/* anyOf / oneOf: one alternative per branch (siblings merged in). */
static void js_any_of(js *c, const cJSON *s, const char *path, const char *name, nu_buf *b) {
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const char *key = one ? "oneOf" : "anyOf";
    const cJSON *list = one ? one : any;
    if (any && one) {
        js_fail(c, path, NU_ERR_UNSUPPORTED, "anyOf together with oneOf is not supported");
        return;
    }
    int n = cJSON_GetArraySize(list);
    if (!cJSON_IsArray(list) || n == 0) {
        js_fail(c, path, NU_ERR_FORMAT, "'%s' must be a non-empty array", key);
        return;
    }
    if (n > JS_MAX_PARTS) {
        js_fail(c, path, NU_ERR_UNSUPPORTED, "'%s' has %d branches; at most %d are supported", key,
                n, JS_MAX_PARTS);
        return;
    }
    const cJSON *branch[JS_MAX_PARTS];
    const cJSON *sib = has_constraints(s, key, NULL) ? without(c, s, key, NULL) : NULL;
    int i = 0;
    for (const cJSON *x = list->child; x && !c->st; x = x->next, i++) {
        const cJSON *parts[2] = {sib, x};
        branch[i] = sib ? js_merge(c, parts, 2, path) : x;
        char p[JS_PATH], h[160];
        sub_path_i(p, path, key, i);
        snprintf(h, sizeof h, "%s-%d", name, i);
        const char *rule = branch[i] ? js_rule(c, branch[i], p, h) : NULL;
        if (rule) nu_buf_printf(b, "%s%s", i ? " | " : "", rule);
    }
    for (int x = 0; one && x < n && !c->st; x++)
        for (int y = 0; y < n && !c->st; y++)
            if (x != y && !excludes(c, branch[x], branch[y]))
                js_fail(c, path, NU_ERR_UNSUPPORTED,
                        "oneOf: a value of branch %d might also match "
                        "branch %d, so exactly one match cannot be "
                        "guaranteed (use anyOf if that is fine)",
                        x, y);
}

/* One alternative per type allowed. */
static void js_typed(js *c, const cJSON *s, const char *path, const char *name, nu_buf *b) {
    uint32_t t = declared_types(c, s, path);
    if (!cJSON_GetObjectItemCaseSensitive(s, "type")) t = inferred_types(s);
    if (!t) return;
    if (t == T_ALL && !has_constraints(s, NULL, NULL)) {
        nu_buf_puts(b, prim(c, JP_VALUE, "value"));
        return;
    }
    bool any = false;
    for (uint32_t bit = 1; bit <= T_INTEGER && !c->st; bit <<= 1) {
        if (!(t & bit) || (bit == T_INTEGER && (t & T_NUMBER))) continue;
        nu_buf_puts(b, any ? " | " : "");
        any = true;
        switch (bit) {
        case T_NULL: nu_buf_puts(b, prim(c, JP_NULL, "null")); break;
        case T_BOOLEAN: nu_buf_puts(b, prim(c, JP_BOOLEAN, "boolean")); break;
        case T_OBJECT: js_object(c, s, path, name, b); break;
        case T_ARRAY: js_array(c, s, path, name, b); break;
        case T_STRING: js_string(c, s, path, name, b); break;
        case T_NUMBER: js_number(c, s, path, false, b); break;
        case T_INTEGER: js_number(c, s, path, true, b); break;
        }
    }
}

static void js_body(js *c, const cJSON *s, const char *path, const char *name, nu_buf *b) {
    if (!check_keywords(c, s, path)) return;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref) {
        js_ref(c, s, ref, path, name, b);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "allOf")) {
        js_all_of(c, s, path, name, b);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "anyOf") ||
               cJSON_GetObjectItemCaseSensitive(s, "oneOf")) {
        js_any_of(c, s, path, name, b);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "const") ||
               cJSON_GetObjectItemCaseSensitive(s, "enum")) {
        uint32_t t = declared_types(c, s, path);
        if (t) js_values(c, s, path, t, b);
    } else {
        js_typed(c, s, path, name, b);
    }
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */
/* ------------------------------------------------------------------------ */

static void js_free(js *c) {
    for (uint32_t i = 0; i < c->n_names; i++) free(c->names[i]);
    free(c->names);
    free(c->memo);
    for (uint32_t i = 0; i < c->n_owned; i++) cJSON_Delete(c->owned[i]);
    free(c->owned);
}

static nu_status check_options(const nu_json_options *opt, nu_error *err) {
    if (opt->max_whitespace < 0 || opt->max_whitespace > 100)
        return nu_fail(err, NU_ERR_INVALID_ARG, "max_whitespace %d is out of range (0..100)",
                       opt->max_whitespace);
    return NU_OK;
}

nu_status nu_gram_json_schema_gbnf(const char *schema, const nu_json_options *opt, nu_buf *out,
                                   nu_error *err) {
    nu_status st = check_options(opt, err);
    if (st) return st;
    size_t bad;
    if (!nu_utf8_valid(schema, strlen(schema), &bad))
        return nu_fail(err, NU_ERR_FORMAT, "the JSON schema is not valid UTF-8 (byte %zu)", bad);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(schema, &end, true);
    if (!root) {
        size_t off = end && end >= schema ? (size_t)(end - schema) : 0;
        return nu_fail(err, NU_ERR_FORMAT, "the JSON schema is not valid JSON (near byte %zu)",
                       off);
    }
    js c = {.root = root,
            .max_ws = opt->max_whitespace,
            .W = nu_gram_json_ws(opt->max_whitespace),
            .out = out,
            .err = err};
    const char *top = js_rule(&c, root, "#", "root");
    if (c.st == NU_OK && top && strcmp(top, "root") != 0)
        nu_buf_printf(out, "root ::= %s\n", top); /* the root schema was `true` */
    if (c.st == NU_OK) nu_gram_json_write_prims(out, c.prims, c.max_ws);
    st = c.st;
    js_free(&c);
    cJSON_Delete(root);
    if (st == NU_OK && out->failed) st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
    return st;
}

nu_status nu_gram_json_any_gbnf(const nu_json_options *opt, nu_buf *out, nu_error *err) {
    nu_status st = check_options(opt, err);
    if (st) return st;
    nu_buf_puts(out, "root ::= object\n");
    nu_gram_json_write_prims(out, JP_OBJECT, opt->max_whitespace);
    return out->failed ? nu_fail(err, NU_ERR_NOMEM, "out of memory") : NU_OK;
}
