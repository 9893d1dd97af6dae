/* jinja_value.c - values of the Jinja engine and their Python semantics.
 *
 * Scalars live inside a nu_jv; strings, lists, dicts, scopes and callables are
 * reference-counted heap objects. Every object of a render is also on the
 * render's live list, so objects kept alive only by a reference cycle (a
 * namespace holding itself) are freed when the render ends. Freeing is
 * iterative, so deeply nested values cannot overflow the stack.
 *
 * Printing follows Python's str() and repr(), equality and ordering follow
 * Python's == and <, and tojson follows json.dumps as transformers calls it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

/* Nesting beyond which printing, comparing or serialising gives up (also
 * what stops reference cycles). */
#define MAX_NESTING 200

/* ------------------------------------------------------------------------ */
/* Arena for the syntax tree                                                */
/* ------------------------------------------------------------------------ */

typedef struct jchunk {
    struct jchunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} jchunk;

struct nu_jarena {
    jchunk *head;
};

nu_jarena *nu_jarena_new(void) {
    return calloc(1, sizeof(nu_jarena));
}

/* Zeroed memory that lives until nu_jarena_free. */
void *nu_jarena_alloc(nu_jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        jchunk *c = calloc(1, sizeof(jchunk) + cap);
        if (!c) return NULL;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

void nu_jarena_free(nu_jarena *a) {
    if (!a) return;
    for (jchunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(a);
}

/* ------------------------------------------------------------------------ */
/* Byte buffers and UTF-8                                                   */
/* ------------------------------------------------------------------------ */

void nu_jinja_put_char(nu_buf *b, uint32_t cp) {
    char u[NU_UTF8_MAX];
    size_t k = nu_utf8_put_escaped(cp, u);
    if (k)
        nu_buf_add(b, u, k);
    else
        nu_buf_puts(b, "\xEF\xBF\xBD"); /* U+FFFD */
}

size_t nu_jinja_count_chars(const char *s, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; count++) {
        if ((unsigned char)s[i] < 0x80)
            i++; /* the common case, without a call */
        else
            nu_utf8_next_escaped(s, n, &i);
    }
    return count;
}

size_t nu_utf8_offset(const char *s, size_t n, size_t ci) {
    size_t i = 0;
    for (size_t c = 0; c < ci && i < n; c++) nu_utf8_next_escaped(s, n, &i);
    return i;
}

void nu_jinja_position(const char *source, size_t len, size_t pos, int *line, int *column) {
    int l = 1;
    size_t line_start = 0;
    if (pos > len) pos = len;
    for (size_t i = 0; i < pos; i++) {
        if (source[i] == '\n') {
            l++;
            line_start = i + 1;
        }
    }
    *line = l;
    *column = (int)nu_jinja_count_chars(source + line_start, pos - line_start) + 1;
}

/* ------------------------------------------------------------------------ */
/* Errors and steps                                                         */
/* ------------------------------------------------------------------------ */

/* Formats "line L, column C: " + message into the context (first error wins). */
static bool vfail(nu_jctx *C, const jnode *at, nu_status status, const char *fmt, va_list ap) {
    if (C->failed) return false;
    C->failed = true;
    C->status = status;
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* one line, except for the template's own raise_exception message */
    for (char *c = msg; *c && status != NU_ERR_INVALID_ARG; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';
    if (at && C->tpl) {
        int line, col;
        nu_jinja_position(C->tpl->source, C->tpl->len, at->pos, &line, &col);
        snprintf(C->message, sizeof C->message, "line %d, column %d: %s", line, col, msg);
    } else {
        snprintf(C->message, sizeof C->message, "%s", msg);
    }
    return false;
}

bool nu_jfail(nu_jctx *C, const jnode *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(C, at, NU_ERR_FORMAT, fmt, ap);
    va_end(ap);
    return false;
}

bool nu_jfail_status(nu_jctx *C, const jnode *at, nu_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(C, at, status, fmt, ap);
    va_end(ap);
    return false;
}

/* Python's type names, as error messages show them. */
static const char *type_name_of(uint8_t type, uint8_t flags) {
    switch (type) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return flags & JO_TUPLE ? "tuple" : "list";
    case JV_DICT: return flags & JO_NAMESPACE ? "Namespace" : "dict";
    case JV_FUNC: return "builtin_function_or_method";
    case JV_MACRO: return "Macro";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

const char *nu_jv_type_name(nu_jv v) {
    return type_name_of(v.type, nu_jv_is_obj(v) ? v.u.o->flags : 0);
}

bool nu_jfail_undefined(nu_jctx *C, const jnode *at, nu_jv v) {
    const char *owner = type_name_of(v.owner, 0);
    switch (v.hint) {
    case JU_NAME: return nu_jfail(C, at, "'%s' is undefined", v.u.name);
    case JU_ATTR: return nu_jfail(C, at, "'%s object' has no attribute '%s'", owner, v.u.name);
    case JU_UNSAFE:
        return nu_jfail(C, at, "access to attribute '%s' of '%s' object is unsafe", v.u.name,
                        owner);
    case JU_EMPTY: return nu_jfail(C, at, "no first or last item: the sequence is empty");
    default: return nu_jfail(C, at, "undefined value");
    }
}

bool nu_jstep(nu_jctx *C, const jnode *at) {
    if (C->failed) return false;
    if (++C->steps > C->limits.max_steps)
        return nu_jfail_status(C, at, NU_ERR_UNSUPPORTED, "template ran too long (step limit %llu)",
                               (unsigned long long)C->limits.max_steps);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Heap objects                                                             */
/* ------------------------------------------------------------------------ */

bool nu_jctx_charge(nu_jctx *C, const jnode *at, size_t bytes) {
    C->alloc_bytes += bytes;
    if (C->alloc_bytes > C->limits.max_alloc_bytes)
        return nu_jfail_status(C, at, NU_ERR_UNSUPPORTED,
                               "template used too much memory (limit %llu bytes)",
                               (unsigned long long)C->limits.max_alloc_bytes);
    return true;
}

void *nu_jctx_alloc_obj(nu_jctx *C, const jnode *at, nu_jobj_kind kind, size_t size) {
    if (C->failed || !nu_jctx_charge(C, at, size)) return NULL;
    nu_jobj *o = calloc(1, size);
    if (!o) {
        nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
        return NULL;
    }
    o->refs = 1;
    o->kind = (uint8_t)kind;
    o->next = C->live.next;
    o->prev = &C->live;
    C->live.next->prev = o;
    C->live.next = o;
    return o;
}

/* Frees an object's own memory (not the objects it refers to). */
static void free_memory(nu_jobj *o) {
    switch (o->kind) {
    case JK_LIST: free(((nu_jlist *)o)->items); break;
    case JK_DICT:
        free(((nu_jdict *)o)->keys);
        free(((nu_jdict *)o)->vals);
        break;
    case JK_SCOPE:
        free(((nu_jscope *)o)->names);
        free(((nu_jscope *)o)->vals);
        break;
    default: break;
    }
    free(o);
}

/* Drops one reference to o; when it was the last, unlinks o and pushes it
 * on the pending list. */
static void release(nu_jobj *o, nu_jobj **pending) {
    if (!o || (o->flags & JO_IMMORTAL)) return;
    if (--o->refs > 0) return;
    o->prev->next = o->next;
    o->next->prev = o->prev;
    o->next = *pending;
    *pending = o;
}

static void release_value(nu_jv v, nu_jobj **pending) {
    if (nu_jv_is_obj(v)) release(v.u.o, pending);
}

/* Releases everything o refers to. */
static void release_children(nu_jobj *o, nu_jobj **pending) {
    switch (o->kind) {
    case JK_LIST: {
        nu_jlist *l = (nu_jlist *)o;
        for (size_t i = 0; i < l->len; i++) release_value(l->items[i], pending);
        break;
    }
    case JK_DICT: {
        nu_jdict *d = (nu_jdict *)o;
        for (size_t i = 0; i < d->len; i++) {
            release_value(d->keys[i], pending);
            release_value(d->vals[i], pending);
        }
        break;
    }
    case JK_FUNC: release_value(((jfunc *)o)->self, pending); break;
    case JK_MACRO: release(&((jmacro *)o)->scope->h, pending); break;
    case JK_LOOP: {
        jloop *l = (jloop *)o;
        release_value(l->items, pending);
        release_value(l->changed_last, pending);
        if (l->scope) release(&l->scope->h, pending);
        break;
    }
    case JK_SCOPE: {
        nu_jscope *s = (nu_jscope *)o;
        for (size_t i = 0; i < s->len; i++) release_value(s->vals[i], pending);
        if (s->parent) release(&s->parent->h, pending);
        break;
    }
    default: break;
    }
}

void nu_jobj_unref(nu_jctx *C, nu_jobj *o) {
    (void)C;
    nu_jobj *pending = NULL;
    release(o, &pending);
    while (pending) {
        nu_jobj *x = pending;
        pending = x->next;
        release_children(x, &pending);
        free_memory(x);
    }
}

void nu_jv_unref(nu_jctx *C, nu_jv v) {
    if (nu_jv_is_obj(v)) nu_jobj_unref(C, v.u.o);
}

void nu_jctx_free_all(nu_jctx *C) {
    nu_jobj *o = C->live.next;
    while (o != &C->live) {
        nu_jobj *next = o->next;
        free_memory(o);
        o = next;
    }
    C->live.next = C->live.prev = &C->live;
}

/* ------------------------------------------------------------------------ */
/* Strings, lists, dicts, scopes                                            */
/* ------------------------------------------------------------------------ */

bool nu_jv_new_str(nu_jctx *C, const jnode *at, const char *s, size_t n, nu_jv *out) {
    if (n > C->limits.max_output)
        return nu_jfail_status(C, at, NU_ERR_UNSUPPORTED, "string too long (limit %zu bytes)",
                               C->limits.max_output);
    nu_jstr *str = nu_jctx_alloc_obj(C, at, JK_STR, sizeof(nu_jstr) + n + 1);
    if (!str) return false;
    if (n) memcpy(str->data, s, n);
    str->data[n] = 0;
    str->len = n;
    str->nchars = nu_jinja_count_chars(s, n);
    *out = nu_jv_obj(JV_STR, str);
    return true;
}

bool nu_jv_concat_str(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, nu_jv *out) {
    nu_jstr *x = nu_jv_str(a), *y = nu_jv_str(b);
    size_t n = x->len + y->len;
    if (n > C->limits.max_output)
        return nu_jfail_status(C, at, NU_ERR_UNSUPPORTED, "string too long (limit %zu bytes)",
                               C->limits.max_output);
    nu_jstr *s = nu_jctx_alloc_obj(C, at, JK_STR, sizeof(nu_jstr) + n + 1);
    if (!s) return false;
    memcpy(s->data, x->data, x->len);
    memcpy(s->data + x->len, y->data, y->len);
    s->data[n] = 0;
    s->len = n;
    /* decoding restarts at an ASCII byte, so no character spans the seam
     * when either side of it is ASCII (or empty) */
    bool seam_ascii = !x->len || !y->len || (unsigned char)x->data[x->len - 1] < 0x80 ||
                      (unsigned char)y->data[0] < 0x80;
    s->nchars = seam_ascii ? x->nchars + y->nchars : nu_jinja_count_chars(s->data, n);
    *out = nu_jv_obj(JV_STR, s);
    return true;
}

bool nu_jv_new_str_from_buf(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv *out) {
    if (b->failed) {
        nu_buf_free(b);
        return nu_jfail_status(C, at, NU_ERR_UNSUPPORTED, "string too long (limit %zu bytes)",
                               C->limits.max_output);
    }
    bool ok = nu_jv_new_str(C, at, b->data ? b->data : "", b->len, out);
    nu_buf_free(b);
    return ok;
}

nu_jstr *nu_jstr_immortal(nu_jarena *a, const char *s, size_t n) {
    nu_jstr *str = nu_jarena_alloc(a, sizeof(nu_jstr) + n + 1);
    if (!str) return NULL;
    str->h.flags = JO_IMMORTAL;
    str->h.kind = JK_STR;
    str->h.refs = 1;
    if (n) memcpy(str->data, s, n);
    str->data[n] = 0;
    str->len = n;
    str->nchars = nu_jinja_count_chars(s, n);
    return str;
}

bool nu_jv_new_list(nu_jctx *C, const jnode *at, size_t cap, nu_jv *out) {
    nu_jlist *l = nu_jctx_alloc_obj(C, at, JK_LIST, sizeof(nu_jlist));
    if (!l) return false;
    *out = nu_jv_obj(JV_LIST, l);
    if (cap == 0) return true;
    if (!nu_jctx_charge(C, at, cap * sizeof(nu_jv))) return false;
    l->items = malloc(cap * sizeof(nu_jv));
    if (!l->items) return nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
    l->cap = cap;
    return true;
}

bool nu_jlist_push(nu_jctx *C, const jnode *at, nu_jlist *l, nu_jv v) {
    if (l->len == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (!nu_jctx_charge(C, at, (cap - l->cap) * sizeof(nu_jv))) {
            nu_jv_unref(C, v);
            return false;
        }
        nu_jv *p = realloc(l->items, cap * sizeof(nu_jv));
        if (!p) {
            nu_jv_unref(C, v);
            return nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
        }
        l->items = p;
        l->cap = cap;
    }
    l->items[l->len++] = v;
    return true;
}

bool nu_jv_new_dict(nu_jctx *C, const jnode *at, nu_jv *out) {
    nu_jdict *d = nu_jctx_alloc_obj(C, at, JK_DICT, sizeof(nu_jdict));
    if (!d) return false;
    *out = nu_jv_obj(JV_DICT, d);
    return true;
}

/* Python equality for dict keys (no nesting limit needed: keys are
 * scalars, strings or tuples of them, compared with nu_jv_equal otherwise). */
nu_jv *nu_jdict_find(nu_jdict *d, nu_jv key) {
    for (size_t i = 0; i < d->len; i++) {
        nu_jv k = d->keys[i];
        if (k.type == JV_STR && key.type == JV_STR) {
            if (nu_jv_str(k)->len == nu_jv_str(key)->len &&
                memcmp(nu_jv_str(k)->data, nu_jv_str(key)->data, nu_jv_str(k)->len) == 0)
                return &d->vals[i];
            continue;
        }
        bool eq = false;
        if (nu_jv_equal(NULL, NULL, k, key, &eq) && eq) return &d->vals[i];
    }
    return NULL;
}

nu_jv *nu_jdict_find_str(nu_jdict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->len; i++) {
        nu_jv k = d->keys[i];
        if (k.type == JV_STR && nu_jv_str(k)->len == n && memcmp(nu_jv_str(k)->data, key, n) == 0)
            return &d->vals[i];
    }
    return NULL;
}

bool nu_jdict_set(nu_jctx *C, const jnode *at, nu_jdict *d, nu_jv key, nu_jv val) {
    nu_jv *slot = nu_jdict_find(d, key);
    if (slot) {
        nu_jv_unref(C, key);
        nu_jv_unref(C, *slot);
        *slot = val;
        return true;
    }
    if (d->len == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        nu_jv *k = NULL, *v = NULL;
        if (nu_jctx_charge(C, at, (cap - d->cap) * 2 * sizeof(nu_jv))) {
            k = realloc(d->keys, cap * sizeof(nu_jv));
            if (k) d->keys = k;
            v = k ? realloc(d->vals, cap * sizeof(nu_jv)) : NULL;
            if (v) d->vals = v;
            if (!k || !v) nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
        }
        if (!k || !v) {
            nu_jv_unref(C, key);
            nu_jv_unref(C, val);
            return false;
        }
        d->cap = cap;
    }
    d->keys[d->len] = key;
    d->vals[d->len] = val;
    d->len++;
    return true;
}

nu_jscope *nu_jscope_new(nu_jctx *C, const jnode *at, nu_jscope *parent) {
    nu_jscope *s = nu_jctx_alloc_obj(C, at, JK_SCOPE, sizeof(nu_jscope));
    if (!s) return NULL;
    s->parent = parent;
    if (parent) parent->h.refs++;
    return s;
}

bool nu_jscope_set(nu_jctx *C, const jnode *at, nu_jscope *s, const char *name, nu_jv v) {
    for (size_t i = 0; i < s->len; i++) {
        if (strcmp(s->names[i], name) == 0) {
            nu_jv_unref(C, s->vals[i]);
            s->vals[i] = v;
            return true;
        }
    }
    if (s->len == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        const char **n = NULL;
        nu_jv *vals = NULL;
        if (nu_jctx_charge(C, at, (cap - s->cap) * (sizeof(nu_jv) + sizeof(char *)))) {
            n = realloc(s->names, cap * sizeof(char *));
            if (n) s->names = n;
            vals = n ? realloc(s->vals, cap * sizeof(nu_jv)) : NULL;
            if (vals) s->vals = vals;
            if (!n || !vals) nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
        }
        if (!n || !vals) {
            nu_jv_unref(C, v);
            return false;
        }
        s->cap = cap;
    }
    s->names[s->len] = name;
    s->vals[s->len] = v;
    s->len++;
    return true;
}

nu_jv *nu_jscope_lookup(nu_jscope *s, const char *name) {
    for (; s; s = s->parent)
        for (size_t i = s->len; i-- > 0;)
            if (strcmp(s->names[i], name) == 0) return &s->vals[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Truth, equality, ordering, length                                        */
/* ------------------------------------------------------------------------ */

bool nu_jv_truthy(nu_jv v) {
    switch (v.type) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return nu_jv_str(v)->len > 0;
    case JV_LIST: return nu_jv_list(v)->len > 0;
    case JV_DICT: return nu_jv_is_namespace(v) || nu_jv_dict(v)->len > 0;
    default: return true;
    }
}

/* The value of a number as a double. */
static double num_f(nu_jv v) {
    return v.type == JV_FLOAT ? v.u.f : v.type == JV_INT ? (double)v.u.i : (double)v.u.b;
}

/* True when v is a bool or an int (Python's int family). */
static bool is_intlike(nu_jv v) {
    return v.type == JV_BOOL || v.type == JV_INT;
}

static int64_t int_of(nu_jv v) {
    return v.type == JV_INT ? v.u.i : (int64_t)v.u.b;
}

/* int == float, exactly as Python compares them. */
static bool int_float_equal(int64_t i, double f) {
    if (f != floor(f) || f < -9223372036854775808.0 || f >= 9223372036854775808.0) return false;
    return (int64_t)f == i;
}

/* Python's == between numbers. */
static bool num_equal(nu_jv a, nu_jv b) {
    if (is_intlike(a) && is_intlike(b)) return int_of(a) == int_of(b);
    if (is_intlike(a)) return int_float_equal(int_of(a), b.u.f);
    if (is_intlike(b)) return int_float_equal(int_of(b), a.u.f);
    return a.u.f == b.u.f;
}

static bool equal_depth(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, bool *eq, int depth);

/* dict == dict: same keys with equal values, in any order. */
static bool dict_equal(nu_jctx *C, const jnode *at, nu_jdict *x, nu_jdict *y, bool *eq, int depth) {
    *eq = false;
    if (x->len != y->len) return true;
    for (size_t i = 0; i < x->len; i++) {
        nu_jv *other = nu_jdict_find(y, x->keys[i]);
        if (!other) return true;
        bool e;
        if (!equal_depth(C, at, x->vals[i], *other, &e, depth + 1)) return false;
        if (!e) return true;
    }
    *eq = true;
    return true;
}

static bool equal_depth(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, bool *eq, int depth) {
    *eq = false;
    if (depth > MAX_NESTING)
        return C ? nu_jfail(C, at, "values nested too deeply to compare") : false;
    if (nu_jv_is_number(a) && nu_jv_is_number(b)) {
        *eq = num_equal(a, b);
        return true;
    }
    if (a.type != b.type) return true;
    switch (a.type) {
    case JV_UNDEF:
    case JV_NONE: *eq = true; return true;
    case JV_STR:
        *eq = nu_jv_str(a)->len == nu_jv_str(b)->len &&
              memcmp(nu_jv_str(a)->data, nu_jv_str(b)->data, nu_jv_str(a)->len) == 0;
        return true;
    case JV_LIST: {
        nu_jlist *x = nu_jv_list(a), *y = nu_jv_list(b);
        if (nu_jv_is_tuple(a) != nu_jv_is_tuple(b) || x->len != y->len) return true;
        for (size_t i = 0; i < x->len; i++) {
            if (!equal_depth(C, at, x->items[i], y->items[i], eq, depth + 1)) return false;
            if (!*eq) return true;
        }
        *eq = true;
        return true;
    }
    case JV_DICT:
        if (nu_jv_is_namespace(a) || nu_jv_is_namespace(b)) {
            *eq = a.u.o == b.u.o;
            return true;
        }
        return dict_equal(C, at, nu_jv_dict(a), nu_jv_dict(b), eq, depth);
    default: *eq = a.u.o == b.u.o; return true;
    }
}

bool nu_jv_equal(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, bool *eq) {
    return equal_depth(C, at, a, b, eq, 0);
}

static const char *op_symbol(jop op) {
    switch (op) {
    case JOP_LT: return "<";
    case JOP_LE: return "<=";
    case JOP_GT: return ">";
    default: return ">=";
    }
}

/* Byte order of UTF-8 is code point order, as Python compares strings. */
static int str_cmp(const nu_jstr *a, const nu_jstr *b) {
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->data, b->data, n);
    if (c) return c < 0 ? -1 : 1;
    return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
}

/* Lowercases a string into a buffer (for case-insensitive sorting). */
static void lower_into(const nu_jstr *s, nu_buf *b) {
    for (size_t i = 0; i < s->len;) {
        uint32_t m[3];
        int k = nu_uni_lower(nu_utf8_next_escaped(s->data, s->len, &i), m);
        for (int j = 0; j < k; j++) nu_jinja_put_char(b, m[j]);
    }
}

static bool cmp3_depth(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, bool ci, int *res, int depth);

/* Lexicographic order of two lists of the same kind. */
static bool list_cmp3(nu_jctx *C, const jnode *at, nu_jlist *x, nu_jlist *y, bool ci, int *res,
                      int depth) {
    for (size_t i = 0; i < x->len && i < y->len; i++) {
        bool eq;
        if (!equal_depth(C, at, x->items[i], y->items[i], &eq, depth + 1)) return false;
        if (!eq) return cmp3_depth(C, at, x->items[i], y->items[i], ci, res, depth + 1);
    }
    *res = x->len < y->len ? -1 : x->len > y->len ? 1 : 0;
    return true;
}

static bool cmp3_depth(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, bool ci, int *res,
                       int depth) {
    if (depth > MAX_NESTING) return nu_jfail(C, at, "values nested too deeply to compare");
    if (a.type == JV_UNDEF) return nu_jfail_undefined(C, at, a);
    if (b.type == JV_UNDEF) return nu_jfail_undefined(C, at, b);
    if (nu_jv_is_number(a) && nu_jv_is_number(b)) {
        if (is_intlike(a) && is_intlike(b)) {
            int64_t x = int_of(a), y = int_of(b);
            *res = x < y ? -1 : x > y;
        } else {
            double x = num_f(a), y = num_f(b);
            *res = x < y ? -1 : x > y ? 1 : 0;
        }
        return true;
    }
    if (a.type == JV_STR && b.type == JV_STR) {
        if (!ci) {
            *res = str_cmp(nu_jv_str(a), nu_jv_str(b));
            return true;
        }
        nu_buf x = {0}, y = {0};
        lower_into(nu_jv_str(a), &x);
        lower_into(nu_jv_str(b), &y);
        size_t n = x.len < y.len ? x.len : y.len;
        int c = n ? memcmp(x.data, y.data, n) : 0;
        c = c ? (c < 0 ? -1 : 1) : (x.len < y.len ? -1 : x.len > y.len ? 1 : 0);
        nu_buf_free(&x);
        nu_buf_free(&y);
        *res = c;
        return true;
    }
    if (a.type == JV_LIST && b.type == JV_LIST && nu_jv_is_tuple(a) == nu_jv_is_tuple(b))
        return list_cmp3(C, at, nu_jv_list(a), nu_jv_list(b), ci, res, depth);
    return nu_jfail(C, at, "'<' not supported between instances of '%s' and '%s'",
                    nu_jv_type_name(a), nu_jv_type_name(b));
}

bool nu_jv_cmp3(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, bool case_insensitive, int *res) {
    return cmp3_depth(C, at, a, b, case_insensitive, res, 0);
}

bool nu_jv_compare(nu_jctx *C, const jnode *at, jop op, nu_jv a, nu_jv b, bool *res) {
    bool orderable =
        (nu_jv_is_number(a) && nu_jv_is_number(b)) || (a.type == JV_STR && b.type == JV_STR) ||
        (a.type == JV_LIST && b.type == JV_LIST && nu_jv_is_tuple(a) == nu_jv_is_tuple(b));
    if (a.type == JV_UNDEF) return nu_jfail_undefined(C, at, a);
    if (b.type == JV_UNDEF) return nu_jfail_undefined(C, at, b);
    if (!orderable)
        return nu_jfail(C, at, "'%s' not supported between instances of '%s' and '%s'",
                        op_symbol(op), nu_jv_type_name(a), nu_jv_type_name(b));
    if (nu_jv_is_number(a) && (num_f(a) != num_f(a) || num_f(b) != num_f(b)) &&
        !(is_intlike(a) && is_intlike(b))) {
        *res = false; /* NaN compares false */
        return true;
    }
    int c;
    if (!nu_jv_cmp3(C, at, a, b, false, &c)) return false;
    *res = op == JOP_LT ? c < 0 : op == JOP_LE ? c <= 0 : op == JOP_GT ? c > 0 : c >= 0;
    return true;
}

bool nu_jv_length(nu_jctx *C, const jnode *at, nu_jv v, int64_t *out) {
    switch (v.type) {
    case JV_UNDEF: *out = 0; return true;
    case JV_STR: *out = (int64_t)nu_jv_str(v)->nchars; return true;
    case JV_LIST: *out = (int64_t)nu_jv_list(v)->len; return true;
    case JV_DICT:
        if (nu_jv_is_namespace(v)) break;
        *out = (int64_t)nu_jv_dict(v)->len;
        return true;
    default: break;
    }
    return nu_jfail(C, at, "object of type '%s' has no len()", nu_jv_type_name(v));
}

/* ------------------------------------------------------------------------ */
/* Printing: Python str() and repr()                                        */
/* ------------------------------------------------------------------------ */

void nu_jfloat_repr(nu_buf *b, double f) {
    if (isnan(f)) return nu_buf_puts(b, "nan");
    if (isinf(f)) return nu_buf_puts(b, f < 0 ? "-inf" : "inf");
    if (f == 0) return nu_buf_puts(b, signbit(f) ? "-0.0" : "0.0");
    char tmp[64];
    for (int prec = 1; prec <= 17; prec++) { /* the shortest digits that read back exactly */
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    char digits[32];
    size_t nd = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int decpt = atoi(p + 1) + 1; /* value = 0.digits * 10^decpt */
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) nu_buf_putc(b, '-');
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            nu_buf_puts(b, "0.");
            for (int i = 0; i < -decpt; i++) nu_buf_putc(b, '0');
            nu_buf_add(b, digits, nd);
        } else if ((size_t)decpt >= nd) {
            nu_buf_add(b, digits, nd);
            for (size_t i = nd; i < (size_t)decpt; i++) nu_buf_putc(b, '0');
            nu_buf_puts(b, ".0");
        } else {
            nu_buf_add(b, digits, (size_t)decpt);
            nu_buf_putc(b, '.');
            nu_buf_add(b, digits + decpt, nd - (size_t)decpt);
        }
        return;
    }
    nu_buf_putc(b, digits[0]);
    if (nd > 1) {
        nu_buf_putc(b, '.');
        nu_buf_add(b, digits + 1, nd - 1);
    }
    int e = decpt - 1;
    nu_buf_printf(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
}

/* Python's repr() of a string: quotes chosen like Python, non-printable
 * characters escaped. */
static void str_repr(nu_buf *b, const nu_jstr *s) {
    bool has_single = memchr(s->data, '\'', s->len) != NULL;
    bool has_double = memchr(s->data, '"', s->len) != NULL;
    char q = has_single && !has_double ? '"' : '\'';
    nu_buf_putc(b, q);
    for (size_t i = 0; i < s->len;) {
        size_t start = i;
        uint32_t c = nu_utf8_next_escaped(s->data, s->len, &i);
        if (c == (uint32_t)q || c == '\\') {
            nu_buf_putc(b, '\\');
            nu_buf_putc(b, (char)c);
        } else if (c == '\n')
            nu_buf_puts(b, "\\n");
        else if (c == '\r')
            nu_buf_puts(b, "\\r");
        else if (c == '\t')
            nu_buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7F)
            nu_buf_printf(b, "\\x%02x", c);
        else if (c < 0x7F)
            nu_buf_putc(b, (char)c);
        else if (nu_uni_isprintable(c))
            nu_buf_add(b, s->data + start, i - start);
        else if (c <= 0xFF)
            nu_buf_printf(b, "\\x%02x", c);
        else if (c <= 0xFFFF)
            nu_buf_printf(b, "\\u%04x", c);
        else
            nu_buf_printf(b, "\\U%08x", c);
    }
    nu_buf_putc(b, q);
}

static bool print_depth(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v, bool repr, int depth);

/* Python's repr of a list, tuple or dict. */
static bool container_repr(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v, int depth) {
    if (v.type == JV_LIST) {
        nu_jlist *l = nu_jv_list(v);
        bool tuple = nu_jv_is_tuple(v);
        nu_buf_putc(b, tuple ? '(' : '[');
        for (size_t i = 0; i < l->len; i++) {
            if (i) nu_buf_puts(b, ", ");
            if (!print_depth(C, at, b, l->items[i], true, depth + 1)) return false;
        }
        if (tuple && l->len == 1) nu_buf_putc(b, ',');
        nu_buf_putc(b, tuple ? ')' : ']');
        return true;
    }
    nu_jdict *d = nu_jv_dict(v);
    if (nu_jv_is_namespace(v)) nu_buf_puts(b, "<Namespace ");
    nu_buf_putc(b, '{');
    for (size_t i = 0; i < d->len; i++) {
        if (i) nu_buf_puts(b, ", ");
        if (!print_depth(C, at, b, d->keys[i], true, depth + 1)) return false;
        nu_buf_puts(b, ": ");
        if (!print_depth(C, at, b, d->vals[i], true, depth + 1)) return false;
    }
    nu_buf_putc(b, '}');
    if (nu_jv_is_namespace(v)) nu_buf_putc(b, '>');
    return true;
}

static bool print_depth(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v, bool repr, int depth) {
    if (depth > MAX_NESTING) return nu_jfail(C, at, "value nested too deeply to print");
    switch (v.type) {
    case JV_UNDEF:
        if (repr) nu_buf_puts(b, "Undefined");
        return true;
    case JV_NONE: nu_buf_puts(b, "None"); return true;
    case JV_BOOL: nu_buf_puts(b, v.u.b ? "True" : "False"); return true;
    case JV_INT: nu_buf_printf(b, "%lld", (long long)v.u.i); return true;
    case JV_FLOAT: nu_jfloat_repr(b, v.u.f); return true;
    case JV_STR:
        if (repr)
            str_repr(b, nu_jv_str(v));
        else
            nu_buf_add(b, nu_jv_str(v)->data, nu_jv_str(v)->len);
        return true;
    case JV_LIST:
    case JV_DICT: return container_repr(C, at, b, v, depth);
    case JV_FUNC: {
        jfunc *f = (jfunc *)v.u.o;
        if (f->id == JF_METHOD)
            nu_buf_printf(b, "<built-in method %s of %s object>", f->method,
                          nu_jv_type_name(f->self));
        else
            nu_buf_puts(b, "<built-in function>");
        return true;
    }
    case JV_MACRO: {
        const char *name = ((jmacro *)v.u.o)->node->name;
        if (name)
            nu_buf_printf(b, "<Macro '%s'>", name);
        else
            nu_buf_puts(b, "<Macro anonymous>");
        return true;
    }
    case JV_LOOP: {
        jloop *l = (jloop *)v.u.o;
        nu_buf_printf(b, "<LoopContext %zu/%zu>", l->index0 + 1, nu_jv_list(l->items)->len);
        return true;
    }
    }
    return true;
}

bool nu_jv_print(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v) {
    return print_depth(C, at, b, v, false, 0);
}

bool nu_jv_repr(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v) {
    return print_depth(C, at, b, v, true, 0);
}

bool nu_jv_to_str(nu_jctx *C, const jnode *at, nu_jv v, nu_jv *out) {
    if (v.type == JV_STR) {
        *out = nu_jv_ref(v);
        return true;
    }
    nu_buf b = {.limit = C->limits.max_output};
    if (!nu_jv_print(C, at, &b, v)) {
        nu_buf_free(&b);
        return false;
    }
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

/* ------------------------------------------------------------------------ */
/* JSON: json.dumps as transformers' tojson calls it, and cJSON input       */
/* ------------------------------------------------------------------------ */

/* A JSON string literal of s. */
static void json_string(nu_buf *b, const char *s, size_t n, bool ascii) {
    nu_buf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t c = nu_utf8_next_escaped(s, n, &i);
        switch (c) {
        case '"': nu_buf_puts(b, "\\\""); break;
        case '\\': nu_buf_puts(b, "\\\\"); break;
        case '\n': nu_buf_puts(b, "\\n"); break;
        case '\r': nu_buf_puts(b, "\\r"); break;
        case '\t': nu_buf_puts(b, "\\t"); break;
        case '\b': nu_buf_puts(b, "\\b"); break;
        case '\f': nu_buf_puts(b, "\\f"); break;
        default:
            if (c < 0x20)
                nu_buf_printf(b, "\\u%04x", c);
            else if (!ascii || c < 0x7F)
                nu_buf_add(b, s + start, i - start);
            else if (c < 0x10000)
                nu_buf_printf(b, "\\u%04x", c);
            else {
                uint32_t v = c - 0x10000;
                nu_buf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            }
        }
    }
    nu_buf_putc(b, '"');
}

static bool json_depth(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v, const jjson_opts *o,
                       int level);

/* Newline and indentation before an item at the given level. */
static void json_newline(nu_buf *b, const jjson_opts *o, int level) {
    nu_buf_putc(b, '\n');
    for (int i = 0; i < level; i++) nu_buf_add(b, o->indent_str, o->indent_len);
}

static void json_item_sep(nu_buf *b, const jjson_opts *o) {
    if (o->item_sep)
        nu_buf_add(b, o->item_sep, o->item_sep_len);
    else
        nu_buf_puts(b, o->indent >= 0 ? "," : ", ");
}

/* A dict key as json.dumps writes it (str, or a scalar turned into one). */
static bool json_key(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv k, const jjson_opts *o) {
    nu_buf tmp = {0};
    switch (k.type) {
    case JV_STR:
        json_string(b, nu_jv_str(k)->data, nu_jv_str(k)->len, o->ensure_ascii);
        return true;
    case JV_NONE: nu_buf_puts(b, "\"null\""); return true;
    case JV_BOOL: nu_buf_puts(b, k.u.b ? "\"true\"" : "\"false\""); return true;
    case JV_INT: nu_buf_printf(b, "\"%lld\"", (long long)k.u.i); return true;
    case JV_FLOAT:
        nu_jfloat_repr(&tmp, k.u.f);
        json_string(b, tmp.data ? tmp.data : "", tmp.len, false);
        nu_buf_free(&tmp);
        return true;
    default:
        return nu_jfail(C, at, "keys must be str, int, float, bool or None, not %s",
                        nu_jv_type_name(k));
    }
}

/* Indices of a dict's items in output order (sorted when asked). */
static bool json_order(nu_jctx *C, const jnode *at, nu_jdict *d, bool sort, size_t *idx) {
    for (size_t i = 0; i < d->len; i++) idx[i] = i;
    if (!sort) return true;
    for (size_t i = 1; i < d->len; i++) { /* insertion sort: stable, and dicts are small */
        size_t x = idx[i], j = i;
        while (j > 0) {
            int c;
            if (!nu_jv_cmp3(C, at, d->keys[idx[j - 1]], d->keys[x], false, &c)) return false;
            if (c <= 0) break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
    return true;
}

static bool json_dict(nu_jctx *C, const jnode *at, nu_buf *b, nu_jdict *d, const jjson_opts *o,
                      int level) {
    if (d->len == 0) return nu_buf_puts(b, "{}"), true;
    size_t *idx = malloc(d->len * sizeof *idx);
    if (!idx) return nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
    bool ok = json_order(C, at, d, o->sort_keys, idx);
    nu_buf_putc(b, '{');
    for (size_t i = 0; ok && i < d->len; i++) {
        if (i) json_item_sep(b, o);
        if (o->indent >= 0) json_newline(b, o, level + 1);
        ok = json_key(C, at, b, d->keys[idx[i]], o);
        if (o->key_sep)
            nu_buf_add(b, o->key_sep, o->key_sep_len);
        else
            nu_buf_puts(b, ": ");
        ok = ok && json_depth(C, at, b, d->vals[idx[i]], o, level + 1);
    }
    if (o->indent >= 0) json_newline(b, o, level);
    nu_buf_putc(b, '}');
    free(idx);
    return ok;
}

static bool json_depth(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v, const jjson_opts *o,
                       int level) {
    if (level > MAX_NESTING) return nu_jfail(C, at, "value nested too deeply for tojson");
    switch (v.type) {
    case JV_NONE: nu_buf_puts(b, "null"); return true;
    case JV_BOOL: nu_buf_puts(b, v.u.b ? "true" : "false"); return true;
    case JV_INT: nu_buf_printf(b, "%lld", (long long)v.u.i); return true;
    case JV_FLOAT:
        if (isnan(v.u.f))
            nu_buf_puts(b, "NaN");
        else if (isinf(v.u.f))
            nu_buf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else
            nu_jfloat_repr(b, v.u.f);
        return true;
    case JV_STR:
        json_string(b, nu_jv_str(v)->data, nu_jv_str(v)->len, o->ensure_ascii);
        return true;
    case JV_LIST: {
        nu_jlist *l = nu_jv_list(v);
        if (l->len == 0) return nu_buf_puts(b, "[]"), true;
        nu_buf_putc(b, '[');
        for (size_t i = 0; i < l->len; i++) {
            if (i) json_item_sep(b, o);
            if (o->indent >= 0) json_newline(b, o, level + 1);
            if (!json_depth(C, at, b, l->items[i], o, level + 1)) return false;
        }
        if (o->indent >= 0) json_newline(b, o, level);
        nu_buf_putc(b, ']');
        return true;
    }
    case JV_DICT:
        if (!nu_jv_is_namespace(v)) return json_dict(C, at, b, nu_jv_dict(v), o, level);
        break;
    default: break;
    }
    return nu_jfail(C, at, "Object of type %s is not JSON serializable", nu_jv_type_name(v));
}

bool nu_jv_tojson(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v, const jjson_opts *o) {
    return json_depth(C, at, b, v, o, 0);
}

/* A cJSON object's members into a new dict. */
static bool dict_from_json(nu_jctx *C, const jnode *at, const cJSON *j, nu_jv *out, int depth) {
    if (!nu_jv_new_dict(C, at, out)) return false;
    for (const cJSON *it = j->child; it; it = it->next) {
        nu_jv k, val;
        const char *name = it->string ? it->string : "";
        if (!nu_jv_new_str(C, at, name, strlen(name), &k)) return false;
        if (!nu_jv_from_json(C, at, it, &val, depth + 1)) {
            nu_jv_unref(C, k);
            return false;
        }
        if (!nu_jdict_set(C, at, nu_jv_dict(*out), k, val)) return false;
    }
    return true;
}

bool nu_jv_from_json(nu_jctx *C, const jnode *at, const cJSON *j, nu_jv *out, int depth) {
    *out = nu_jv_undef();
    if (!j) return true;
    if (depth > MAX_NESTING) return nu_jfail(C, at, "JSON input nested too deeply");
    if (cJSON_IsNull(j))
        *out = nu_jv_none();
    else if (cJSON_IsBool(j))
        *out = nu_jv_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0)
            *out = nu_jv_int((int64_t)d);
        else
            *out = nu_jv_float(d);
    } else if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        return nu_jv_new_str(C, at, s, strlen(s), out);
    } else if (cJSON_IsArray(j)) {
        if (!nu_jv_new_list(C, at, (size_t)cJSON_GetArraySize(j), out)) return false;
        for (const cJSON *it = j->child; it; it = it->next) {
            nu_jv item;
            if (!nu_jv_from_json(C, at, it, &item, depth + 1)) return false;
            if (!nu_jlist_push(C, at, nu_jv_list(*out), item)) return false;
        }
    } else if (cJSON_IsObject(j)) {
        return dict_from_json(C, at, j, out, depth);
    }
    return true;
}
