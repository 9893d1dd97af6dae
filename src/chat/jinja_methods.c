/* jinja_methods.c - attribute access, subscripts, slices, iteration, the
 * methods of strings, dicts and lists, and the global functions.
 *
 * Attribute access follows jinja2's ImmutableSandboxedEnvironment: `x.name`
 * looks for a Python attribute (a method) first and a dict key second;
 * `x[key]` the other way round. Methods that would modify a list or dict
 * (append, pop, update, ...) are refused, as the immutable sandbox does:
 * they give an undefined value whose use reports the sandbox's error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

typedef bool (*jmethod_fn)(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out);

typedef struct jmethod {
    uint8_t type; /* nu_jv_type of self */
    const char *name;
    jmethod_fn fn; /* NULL: refused by the sandbox */
} jmethod;

static const jmethod *find_method(uint8_t type, const char *name);

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

/* An undefined value that remembers why (for its error message). */
static nu_jv undef_with(jundef_hint hint, uint8_t owner, const char *name) {
    nu_jv v = nu_jv_undef();
    if (!name) return v;
    v.hint = (uint8_t)hint;
    v.owner = owner;
    v.u.name = name;
    return v;
}

/* Makes a bound method value. */
static bool bound_method(nu_jctx *C, const jnode *at, nu_jv self, const jmethod *m, nu_jv *out) {
    jfunc *f = nu_jctx_alloc_obj(C, at, JK_FUNC, sizeof(jfunc));
    if (!f) return false;
    f->id = JF_METHOD;
    f->method = m->name;
    f->self = nu_jv_ref(self);
    *out = nu_jv_obj(JV_FUNC, f);
    return true;
}

/* Requires an argument to be a string. */
static bool need_str(nu_jctx *C, const jnode *at, nu_jv v, const char *what) {
    if (v.type == JV_STR) return true;
    if (v.type == JV_UNDEF) return nu_jfail_undefined(C, at, v);
    return nu_jfail(C, at, "%s must be str, not %s", what, nu_jv_type_name(v));
}

/* An int argument (bools count), or the default when not given / None. */
static bool int_arg(nu_jctx *C, const jnode *at, nu_jv v, int64_t dflt, int64_t *out) {
    if (!jarg_given(v) || v.type == JV_NONE)
        *out = dflt;
    else if (v.type == JV_INT)
        *out = v.u.i;
    else if (v.type == JV_BOOL)
        *out = v.u.b;
    else if (v.type == JV_UNDEF)
        return nu_jfail_undefined(C, at, v);
    else
        return nu_jfail(C, at, "'%s' object cannot be interpreted as an integer",
                        nu_jv_type_name(v));
    return true;
}

/* Decodes a string into code points (malloc'd; *n of them). */
static uint32_t *decode_all(nu_jctx *C, const jnode *at, const nu_jstr *s, size_t *n) {
    uint32_t *cps = malloc((s->len + 1) * sizeof *cps);
    if (!cps) {
        nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < s->len;) cps[k++] = nu_utf8_next_escaped(s->data, s->len, &i);
    *n = k;
    return cps;
}

/* ------------------------------------------------------------------------ */
/* Subscripts, slices, iteration                                            */
/* ------------------------------------------------------------------------ */

/* Python's slice index adjustment (PySlice_AdjustIndices). */
static int64_t slice_len(int64_t len, int64_t *start, int64_t *stop, int64_t step, bool has_start,
                         bool has_stop) {
    if (!has_start)
        *start = step < 0 ? len - 1 : 0;
    else if (*start < 0) {
        *start += len;
        if (*start < 0) *start = step < 0 ? -1 : 0;
    } else if (*start >= len)
        *start = step < 0 ? len - 1 : len;
    if (!has_stop)
        *stop = step < 0 ? -1 : len;
    else if (*stop < 0) {
        *stop += len;
        if (*stop < 0) *stop = step < 0 ? -1 : 0;
    } else if (*stop >= len)
        *stop = step < 0 ? len - 1 : len;
    if (step < 0) return *stop < *start ? (*start - *stop - 1) / (-step) + 1 : 0;
    return *start < *stop ? (*stop - *start - 1) / step + 1 : 0;
}

/* A slice bound: an int, None (absent), or an error. */
static bool slice_bound(nu_jctx *C, const jnode *at, nu_jv v, int64_t *out, bool *present) {
    *present = v.type != JV_NONE;
    if (!*present) return true;
    if (v.type == JV_INT || v.type == JV_BOOL) {
        *out = v.type == JV_INT ? v.u.i : v.u.b;
        return true;
    }
    if (v.type == JV_UNDEF) return nu_jfail_undefined(C, at, v);
    return nu_jfail(C, at, "slice indices must be integers or None, not %s", nu_jv_type_name(v));
}

bool nu_jinja_slice(nu_jctx *C, const jnode *at, nu_jv obj, nu_jv start, nu_jv stop, nu_jv step,
                    nu_jv *out) {
    int64_t b = 0, e = 0, s = 1;
    bool hb, he, hs;
    if (obj.type == JV_UNDEF) return nu_jfail_undefined(C, at, obj);
    if (!slice_bound(C, at, start, &b, &hb) || !slice_bound(C, at, stop, &e, &he) ||
        !slice_bound(C, at, step, &s, &hs))
        return false;
    if (!hs) s = 1;
    if (s == 0) return nu_jfail(C, at, "slice step cannot be zero");
    if (s == INT64_MIN) s = -INT64_MAX;
    if (obj.type == JV_LIST) {
        nu_jlist *l = nu_jv_list(obj);
        int64_t n = slice_len((int64_t)l->len, &b, &e, s, hb, he);
        if (!nu_jv_new_list(C, at, (size_t)n, out)) return false;
        out->u.o->flags |= obj.u.o->flags & JO_TUPLE;
        for (int64_t i = 0, k = b; i < n; i++, k += s)
            if (!nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(l->items[k]))) return false;
        return true;
    }
    if (obj.type != JV_STR) {
        *out = nu_jv_undef(); /* like Jinja2: a failed subscript is undefined */
        return true;
    }
    nu_jstr *str = nu_jv_str(obj);
    nu_buf buf = {.limit = C->limits.max_output};
    if (str->nchars == str->len) { /* ASCII: characters are bytes */
        int64_t n = slice_len((int64_t)str->len, &b, &e, s, hb, he);
        if (s == 1) return nu_jv_new_str(C, at, str->data + b, (size_t)n, out);
        for (int64_t i = 0, k = b; i < n; i++, k += s) nu_buf_putc(&buf, str->data[k]);
        return nu_jv_new_str_from_buf(C, at, &buf, out);
    }
    size_t count;
    uint32_t *cps = decode_all(C, at, str, &count);
    if (!cps) return false;
    int64_t n = slice_len((int64_t)count, &b, &e, s, hb, he);
    for (int64_t i = 0, k = b; i < n; i++, k += s) nu_jinja_put_char(&buf, cps[k]);
    free(cps);
    return nu_jv_new_str_from_buf(C, at, &buf, out);
}

/* list[i] / str[i] with Python's negative indices; undefined when out of
 * range. */
static bool index_seq(nu_jctx *C, const jnode *at, nu_jv obj, int64_t i, nu_jv *out) {
    int64_t len =
        obj.type == JV_LIST ? (int64_t)nu_jv_list(obj)->len : (int64_t)nu_jv_str(obj)->nchars;
    if (i < 0) i += len;
    if (i < 0 || i >= len) {
        *out = nu_jv_undef();
        return true;
    }
    if (obj.type == JV_LIST) {
        *out = nu_jv_ref(nu_jv_list(obj)->items[i]);
        return true;
    }
    nu_jstr *s = nu_jv_str(obj);
    size_t from = s->nchars == s->len ? (size_t)i : nu_utf8_offset(s->data, s->len, (size_t)i);
    size_t to = from;
    if (from < s->len) nu_utf8_next_escaped(s->data, s->len, &to);
    return nu_jv_new_str(C, at, s->data + from, to - from, out);
}

static bool getattr_impl(nu_jctx *C, const jnode *at, nu_jv obj, const char *name, const char *hint,
                         bool items_first, nu_jv *out);

bool nu_jv_getitem(nu_jctx *C, const jnode *at, nu_jv obj, nu_jv key, const char *const_name,
                   nu_jv *out) {
    if (obj.type == JV_UNDEF) return nu_jfail_undefined(C, at, obj);
    if ((obj.type == JV_LIST || obj.type == JV_STR) && (key.type == JV_INT || key.type == JV_BOOL))
        return index_seq(C, at, obj, key.type == JV_INT ? key.u.i : key.u.b, out);
    if (obj.type == JV_DICT && !nu_jv_is_namespace(obj)) {
        nu_jv *v = nu_jdict_find(nu_jv_dict(obj), key);
        if (v) {
            *out = nu_jv_ref(*v);
            return true;
        }
    }
    if (key.type == JV_STR)
        return getattr_impl(C, at, obj, nu_jv_str(key)->data, const_name, false, out);
    *out = nu_jv_undef();
    return true;
}

/* The fields of a loop variable. */
static bool loop_attr(nu_jctx *C, const jnode *at, nu_jv obj, const char *name, nu_jv *out) {
    jloop *l = (jloop *)obj.u.o;
    int64_t len = (int64_t)nu_jv_list(l->items)->len, i = (int64_t)l->index0;
    nu_jlist *items = nu_jv_list(l->items);
    if (!strcmp(name, "index"))
        *out = nu_jv_int(i + 1);
    else if (!strcmp(name, "index0"))
        *out = nu_jv_int(i);
    else if (!strcmp(name, "revindex"))
        *out = nu_jv_int(len - i);
    else if (!strcmp(name, "revindex0"))
        *out = nu_jv_int(len - i - 1);
    else if (!strcmp(name, "first"))
        *out = nu_jv_bool(i == 0);
    else if (!strcmp(name, "last"))
        *out = nu_jv_bool(i == len - 1);
    else if (!strcmp(name, "length"))
        *out = nu_jv_int(len);
    else if (!strcmp(name, "depth"))
        *out = nu_jv_int(l->depth0 + 1);
    else if (!strcmp(name, "depth0"))
        *out = nu_jv_int(l->depth0);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? nu_jv_ref(items->items[i - 1]) : nu_jv_undef();
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < len ? nu_jv_ref(items->items[i + 1]) : nu_jv_undef();
    else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        jfunc *f = nu_jctx_alloc_obj(C, at, JK_FUNC, sizeof(jfunc));
        if (!f) return false;
        f->id = name[1] == 'y' ? JF_LOOP_CYCLE : JF_LOOP_CHANGED;
        f->self = nu_jv_ref(obj);
        *out = nu_jv_obj(JV_FUNC, f);
    } else
        *out = undef_with(JU_ATTR, JV_LOOP, NULL);
    return true;
}

/* getattr with the sandbox's rules. hint is a name that outlives the
 * render (for the undefined value's message) or NULL. items_first: dict
 * keys before methods (subscript) rather than after (attribute). */
static bool getattr_impl(nu_jctx *C, const jnode *at, nu_jv obj, const char *name, const char *hint,
                         bool items_first, nu_jv *out) {
    if (obj.type == JV_UNDEF) return nu_jfail_undefined(C, at, obj);
    if (obj.type == JV_LOOP) return loop_attr(C, at, obj, name, out);
    if (obj.type == JV_DICT) {
        nu_jv *v = nu_jdict_find_str(nu_jv_dict(obj), name, strlen(name));
        bool ns = nu_jv_is_namespace(obj);
        if (v && (ns || items_first)) {
            *out = nu_jv_ref(*v);
            return true;
        }
        const jmethod *m = ns ? NULL : find_method(JV_DICT, name);
        if (m && m->fn) return bound_method(C, at, obj, m, out);
        if (m) {
            *out = undef_with(JU_UNSAFE, JV_DICT, hint);
            return true;
        }
        if (v) {
            *out = nu_jv_ref(*v);
            return true;
        }
        *out = undef_with(JU_ATTR, JV_DICT, hint);
        return true;
    }
    const jmethod *m = find_method(obj.type, name);
    if (m && m->fn) return bound_method(C, at, obj, m, out);
    *out = undef_with(m ? JU_UNSAFE : JU_ATTR, obj.type, hint);
    return true;
}

bool nu_jv_getattr(nu_jctx *C, const jnode *at, nu_jv obj, const char *name, nu_jv *out) {
    return getattr_impl(C, at, obj, name, name, false, out);
}

bool nu_jv_iterate(nu_jctx *C, const jnode *at, nu_jv v, nu_jv *out) {
    switch (v.type) {
    case JV_UNDEF: return nu_jv_new_list(C, at, 0, out);
    case JV_LIST: *out = nu_jv_ref(v); return true;
    case JV_DICT: {
        if (nu_jv_is_namespace(v)) break;
        nu_jdict *d = nu_jv_dict(v);
        if (!nu_jv_new_list(C, at, d->len, out)) return false;
        for (size_t i = 0; i < d->len; i++)
            if (!nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(d->keys[i]))) return false;
        return true;
    }
    case JV_STR: {
        nu_jstr *s = nu_jv_str(v);
        if (!nu_jv_new_list(C, at, s->nchars, out)) return false;
        for (size_t i = 0; i < s->len;) {
            size_t from = i;
            nu_utf8_next_escaped(s->data, s->len, &i);
            nu_jv ch;
            if (!nu_jv_new_str(C, at, s->data + from, i - from, &ch)) return false;
            if (!nu_jlist_push(C, at, nu_jv_list(*out), ch)) return false;
        }
        return true;
    }
    default: break;
    }
    return nu_jfail(C, at, "'%s' object is not iterable", nu_jv_type_name(v));
}

/* ------------------------------------------------------------------------ */
/* String methods                                                           */
/* ------------------------------------------------------------------------ */

/* Whether cp is in the set of characters chars (a string), or whitespace
 * when chars is NULL. */
static bool in_strip_set(const uint32_t *chars, size_t n_chars, bool use_chars, uint32_t cp) {
    if (!use_chars) return nu_uni_isspace(cp);
    for (size_t i = 0; i < n_chars; i++)
        if (chars[i] == cp) return true;
    return false;
}

/* strip / lstrip / rstrip with Python's rules; which: 1 left, 2 right, 3 both. */
bool nu_jinja_strip(nu_jctx *C, const jnode *at, nu_jv self, nu_jv chars, int which, nu_jv *out) {
    bool use_chars = jarg_given(chars) && chars.type != JV_NONE;
    if (use_chars && !need_str(C, at, chars, "strip arg")) return false;
    uint32_t *set = NULL;
    size_t n_set = 0;
    if (use_chars && !(set = decode_all(C, at, nu_jv_str(chars), &n_set))) return false;
    nu_jstr *s = nu_jv_str(self);
    size_t n;
    uint32_t *cps = decode_all(C, at, s, &n);
    if (!cps) {
        free(set);
        return false;
    }
    size_t b = 0, e = n;
    if (which & 1)
        while (b < e && in_strip_set(set, n_set, use_chars, cps[b])) b++;
    if (which & 2)
        while (e > b && in_strip_set(set, n_set, use_chars, cps[e - 1])) e--;
    free(cps);
    size_t from = nu_utf8_offset(s->data, s->len, b);
    size_t to = from + nu_utf8_offset(s->data + from, s->len - from, e - b);
    free(set);
    if (from == 0 && to == s->len) {
        *out = nu_jv_ref(self);
        return true;
    }
    return nu_jv_new_str(C, at, s->data + from, to - from, out);
}

static bool m_strip_any(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out,
                        int which) {
    static const char *const names[] = {"chars"};
    nu_jv chars;
    if (!nu_jargs_bind(C, at, "strip()", a, names, 1, &chars)) return false;
    return nu_jinja_strip(C, at, self, chars, which, out);
}

static bool m_strip(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_strip_any(C, at, self, a, out, 3);
}
static bool m_lstrip(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_strip_any(C, at, self, a, out, 1);
}
static bool m_rstrip(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_strip_any(C, at, self, a, out, 2);
}

/* Case mappings: mode 0 upper, 1 lower, 2 title (Python str.title), 3
 * capitalize, 4 swapcase. */
bool nu_jinja_case(nu_jctx *C, const jnode *at, nu_jv self, int mode, nu_jv *out) {
    nu_jstr *s = nu_jv_str(self);
    nu_buf b = {.limit = C->limits.max_output};
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp = nu_utf8_next_escaped(s->data, s->len, &i), m[3];
        int k;
        if (mode == 0)
            k = nu_uni_upper(cp, m);
        else if (mode == 1)
            k = nu_uni_lower(cp, m);
        else if (mode == 2)
            k = prev_cased ? nu_uni_lower(cp, m) : nu_uni_title(cp, m);
        else if (mode == 3)
            k = first ? nu_uni_title(cp, m) : nu_uni_lower(cp, m);
        else
            k = nu_uni_isupper(cp)   ? nu_uni_lower(cp, m)
                : nu_uni_islower(cp) ? nu_uni_upper(cp, m)
                                     : (m[0] = cp, 1);
        for (int j = 0; j < k; j++) nu_jinja_put_char(&b, m[j]);
        prev_cased = nu_uni_iscased(cp);
        first = false;
    }
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

static bool m_upper(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return nu_jargs_bind(C, at, "upper()", a, NULL, 0, NULL) && nu_jinja_case(C, at, self, 0, out);
}
static bool m_lower(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return nu_jargs_bind(C, at, "lower()", a, NULL, 0, NULL) && nu_jinja_case(C, at, self, 1, out);
}
static bool m_title(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return nu_jargs_bind(C, at, "title()", a, NULL, 0, NULL) && nu_jinja_case(C, at, self, 2, out);
}
static bool m_capitalize(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return nu_jargs_bind(C, at, "capitalize()", a, NULL, 0, NULL) &&
           nu_jinja_case(C, at, self, 3, out);
}
static bool m_swapcase(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return nu_jargs_bind(C, at, "swapcase()", a, NULL, 0, NULL) &&
           nu_jinja_case(C, at, self, 4, out);
}

/* startswith / endswith with a string or a tuple of strings. */
static bool m_affix(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out,
                    bool start) {
    static const char *const names[] = {"prefix"};
    nu_jv p;
    if (!nu_jargs_bind(C, at, start ? "startswith()" : "endswith()", a, names, 1, &p)) return false;
    nu_jstr *s = nu_jv_str(self);
    size_t n = p.type == JV_LIST && nu_jv_is_tuple(p) ? nu_jv_list(p)->len : 1;
    for (size_t i = 0; i < n; i++) {
        nu_jv x = p.type == JV_LIST && nu_jv_is_tuple(p) ? nu_jv_list(p)->items[i] : p;
        if (!need_str(C, at, x, start ? "startswith arg" : "endswith arg")) return false;
        nu_jstr *t = nu_jv_str(x);
        if (t->len <= s->len &&
            memcmp(s->data + (start ? 0 : s->len - t->len), t->data, t->len) == 0) {
            *out = nu_jv_bool(true);
            return true;
        }
    }
    *out = nu_jv_bool(false);
    return true;
}

static bool m_startswith(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_affix(C, at, self, a, out, true);
}
static bool m_endswith(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_affix(C, at, self, a, out, false);
}

/* Splits on runs of whitespace (sep None), Python's str.split() / rsplit(). */
static bool split_whitespace(nu_jctx *C, const jnode *at, nu_jstr *s, int64_t maxsplit, bool right,
                             nu_jv *out) {
    size_t n;
    uint32_t *cps = decode_all(C, at, s, &n);
    if (!cps) return false;
    /* collect [start, end) character ranges of words */
    size_t *ranges = malloc((n + 1) * 2 * sizeof *ranges), nr = 0;
    bool ok = ranges != NULL;
    size_t i = 0;
    while (ok && i < n) {
        while (i < n && nu_uni_isspace(cps[i])) i++;
        if (i == n) break;
        size_t w = i;
        while (i < n && !nu_uni_isspace(cps[i])) i++;
        ranges[2 * nr] = w;
        ranges[2 * nr + 1] = i;
        nr++;
    }
    if (ok && maxsplit >= 0 && (size_t)maxsplit + 1 < nr) {
        /* merge the words beyond maxsplit into one (keeping inner spacing) */
        size_t keep = (size_t)maxsplit;
        if (!right) {
            ranges[2 * keep + 1] = n; /* the rest keeps its trailing whitespace */
            nr = keep + 1;
        } else {
            size_t first = nr - keep - 1;
            ranges[2 * first] = 0; /* the rest keeps its leading whitespace */
            memmove(ranges, ranges + 2 * first, (nr - first) * 2 * sizeof *ranges);
            nr = nr - first;
        }
    }
    ok = ok && nu_jv_new_list(C, at, nr, out);
    for (size_t r = 0; ok && r < nr; r++) {
        size_t from = nu_utf8_offset(s->data, s->len, ranges[2 * r]);
        size_t to = nu_utf8_offset(s->data, s->len, ranges[2 * r + 1]);
        nu_jv w;
        ok = nu_jv_new_str(C, at, s->data + from, to - from, &w) &&
             nu_jlist_push(C, at, nu_jv_list(*out), w);
    }
    if (!ranges) nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
    free(ranges);
    free(cps);
    return ok;
}

/* Splits on a separator string. */
static bool split_sep(nu_jctx *C, const jnode *at, nu_jstr *s, nu_jstr *sep, int64_t maxsplit,
                      bool right, nu_jv *out) {
    if (sep->len == 0) return nu_jfail(C, at, "empty separator");
    if (!nu_jv_new_list(C, at, 0, out)) return false;
    nu_jlist *parts = nu_jv_list(*out);
    if (!right) {
        size_t pos = 0;
        for (int64_t count = 0; maxsplit < 0 || count < maxsplit; count++) {
            const char *hit = memmem(s->data + pos, s->len - pos, sep->data, sep->len);
            if (!hit) break;
            nu_jv w;
            size_t end = (size_t)(hit - s->data);
            if (!nu_jv_new_str(C, at, s->data + pos, end - pos, &w) ||
                !nu_jlist_push(C, at, parts, w))
                return false;
            pos = end + sep->len;
        }
        nu_jv w;
        return nu_jv_new_str(C, at, s->data + pos, s->len - pos, &w) &&
               nu_jlist_push(C, at, parts, w);
    }
    size_t end = s->len;
    for (int64_t count = 0; maxsplit < 0 || count < maxsplit; count++) {
        size_t k = end;
        bool found = false;
        while (k >= sep->len) {
            if (memcmp(s->data + k - sep->len, sep->data, sep->len) == 0) {
                found = true;
                break;
            }
            k--;
        }
        if (!found) break;
        nu_jv w;
        if (!nu_jv_new_str(C, at, s->data + k, end - k, &w) || !nu_jlist_push(C, at, parts, w))
            return false;
        end = k - sep->len;
    }
    nu_jv w;
    if (!nu_jv_new_str(C, at, s->data, end, &w) || !nu_jlist_push(C, at, parts, w)) return false;
    for (size_t i = 0, j = parts->len - 1; i < j; i++, j--) { /* collected right to left */
        nu_jv t = parts->items[i];
        parts->items[i] = parts->items[j];
        parts->items[j] = t;
    }
    return true;
}

static bool m_split_any(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out,
                        bool right) {
    static const char *const names[] = {"sep", "maxsplit"};
    nu_jv p[2];
    int64_t maxsplit = -1;
    if (!nu_jargs_bind(C, at, right ? "rsplit()" : "split()", a, names, 2, p)) return false;
    if (!int_arg(C, at, p[1], -1, &maxsplit)) return false;
    if (!jarg_given(p[0]) || p[0].type == JV_NONE)
        return split_whitespace(C, at, nu_jv_str(self), maxsplit, right, out);
    if (!need_str(C, at, p[0], "separator")) return false;
    return split_sep(C, at, nu_jv_str(self), nu_jv_str(p[0]), maxsplit, right, out);
}

static bool m_split(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_split_any(C, at, self, a, out, false);
}
static bool m_rsplit(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_split_any(C, at, self, a, out, true);
}

/* Python's line boundaries for splitlines(). */
static bool is_line_break(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
           c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
}

static bool m_splitlines(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    static const char *const names[] = {"keepends"};
    nu_jv keep;
    if (!nu_jargs_bind(C, at, "splitlines()", a, names, 1, &keep)) return false;
    bool keepends = jarg_given(keep) && nu_jv_truthy(keep);
    nu_jstr *s = nu_jv_str(self);
    if (!nu_jv_new_list(C, at, 0, out)) return false;
    size_t start = 0, i = 0;
    while (i < s->len) {
        size_t at_break = i;
        uint32_t c = nu_utf8_next_escaped(s->data, s->len, &i);
        if (!is_line_break(c)) continue;
        if (c == '\r' && i < s->len && s->data[i] == '\n') i++;
        nu_jv line;
        size_t end = keepends ? i : at_break;
        if (!nu_jv_new_str(C, at, s->data + start, end - start, &line) ||
            !nu_jlist_push(C, at, nu_jv_list(*out), line))
            return false;
        start = i;
    }
    if (start < s->len) {
        nu_jv line;
        if (!nu_jv_new_str(C, at, s->data + start, s->len - start, &line) ||
            !nu_jlist_push(C, at, nu_jv_list(*out), line))
            return false;
    }
    return true;
}

/* str.replace(old, new[, count]); an empty old inserts new around every
 * character, like Python. */
bool nu_jinja_replace(nu_jctx *C, const jnode *at, nu_jv self, nu_jv old, nu_jv new_, int64_t count,
                      nu_jv *out) {
    if (!need_str(C, at, old, "replace() argument 1") ||
        !need_str(C, at, new_, "replace() argument 2"))
        return false;
    nu_jstr *s = nu_jv_str(self), *o = nu_jv_str(old), *n = nu_jv_str(new_);
    nu_buf b = {.limit = C->limits.max_output};
    size_t pos = 0;
    int64_t done = 0;
    if (o->len == 0) {
        for (size_t i = 0; i <= s->len; done++) {
            if (count >= 0 && done >= count) {
                nu_buf_add(&b, s->data + i, s->len - i);
                break;
            }
            nu_buf_add(&b, n->data, n->len);
            if (i == s->len) break;
            size_t from = i;
            nu_utf8_next_escaped(s->data, s->len, &i);
            nu_buf_add(&b, s->data + from, i - from);
            if (b.failed) break;
        }
        return nu_jv_new_str_from_buf(C, at, &b, out);
    }
    while (count < 0 || done < count) {
        const char *hit = memmem(s->data + pos, s->len - pos, o->data, o->len);
        if (!hit || b.failed) break;
        nu_buf_add(&b, s->data + pos, (size_t)(hit - s->data) - pos);
        nu_buf_add(&b, n->data, n->len);
        pos = (size_t)(hit - s->data) + o->len;
        done++;
    }
    nu_buf_add(&b, s->data + pos, s->len - pos);
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

static bool m_replace(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    static const char *const names[] = {"old", "new", "count"};
    nu_jv p[3];
    int64_t count = 0;
    if (!nu_jargs_bind(C, at, "replace()", a, names, 3, p)) return false;
    if (!jarg_given(p[0]) || !jarg_given(p[1]))
        return nu_jfail(C, at, "replace() takes at least 2 arguments");
    return int_arg(C, at, p[2], -1, &count) &&
           nu_jinja_replace(C, at, self, p[0], p[1], count, out);
}

/* find / rfind / count of a substring (character indices). */
static bool m_search(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out,
                     int mode) {
    static const char *const names[] = {"sub"};
    nu_jv sub;
    if (!nu_jargs_bind(C, at, "find()", a, names, 1, &sub) || !need_str(C, at, sub, "argument"))
        return false;
    nu_jstr *s = nu_jv_str(self), *t = nu_jv_str(sub);
    if (mode == 2) { /* count */
        if (t->len == 0) return *out = nu_jv_int((int64_t)s->nchars + 1), true;
        int64_t n = 0;
        for (const char *p = s->data;
             (p = memmem(p, s->len - (size_t)(p - s->data), t->data, t->len)); p += t->len)
            n++;
        *out = nu_jv_int(n);
        return true;
    }
    const char *hit = NULL;
    if (mode == 0)
        hit = memmem(s->data, s->len, t->data, t->len);
    else
        for (size_t k = s->len + 1; k-- > 0 && !hit;)
            if (k + t->len <= s->len && memcmp(s->data + k, t->data, t->len) == 0)
                hit = s->data + k;
    *out = nu_jv_int(hit ? (int64_t)nu_jinja_count_chars(s->data, (size_t)(hit - s->data)) : -1);
    return true;
}

static bool m_find(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_search(C, at, self, a, out, 0);
}
static bool m_rfind(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_search(C, at, self, a, out, 1);
}
static bool m_str_count(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_search(C, at, self, a, out, 2);
}

/* sep.join(iterable): every item must be a string. */
static bool m_join(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    static const char *const names[] = {"iterable"};
    nu_jv it, items;
    if (!nu_jargs_bind(C, at, "join()", a, names, 1, &it) || !nu_jv_iterate(C, at, it, &items))
        return false;
    nu_jlist *l = nu_jv_list(items);
    nu_buf b = {.limit = C->limits.max_output};
    bool ok = true;
    for (size_t i = 0; i < l->len && ok; i++) {
        if (l->items[i].type != JV_STR) {
            ok = nu_jfail(C, at, "sequence item %zu: expected str instance, %s found", i,
                          nu_jv_type_name(l->items[i]));
            break;
        }
        if (i) nu_buf_add(&b, nu_jv_str(self)->data, nu_jv_str(self)->len);
        nu_buf_add(&b, nu_jv_str(l->items[i])->data, nu_jv_str(l->items[i])->len);
    }
    nu_jv_unref(C, items);
    if (!ok) {
        nu_buf_free(&b);
        return false;
    }
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

/* isdigit / isalpha / ... : true for a non-empty string all of whose
 * characters pass. */
static bool m_is(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out,
                 bool (*pred)(uint32_t)) {
    if (!nu_jargs_bind(C, at, "method", a, NULL, 0, NULL)) return false;
    nu_jstr *s = nu_jv_str(self);
    bool r = s->len > 0;
    for (size_t i = 0; i < s->len && r;) r = pred(nu_utf8_next_escaped(s->data, s->len, &i));
    *out = nu_jv_bool(r);
    return true;
}

static bool m_isdigit(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_is(C, at, self, a, out, nu_uni_isdigit);
}
static bool m_isalpha(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_is(C, at, self, a, out, nu_uni_isalpha);
}
static bool m_isalnum(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_is(C, at, self, a, out, nu_uni_isalnum);
}
static bool m_isspace(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_is(C, at, self, a, out, nu_uni_isspace);
}

/* islower / isupper: some cased character and none of the other case. */
static bool m_iscase(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out,
                     bool upper) {
    if (!nu_jargs_bind(C, at, "method", a, NULL, 0, NULL)) return false;
    nu_jstr *s = nu_jv_str(self);
    bool cased = false, ok = true;
    for (size_t i = 0; i < s->len && ok;) {
        uint32_t c = nu_utf8_next_escaped(s->data, s->len, &i);
        if (upper ? nu_uni_islower(c) : nu_uni_isupper(c)) ok = false;
        if (upper ? nu_uni_isupper(c) : nu_uni_islower(c)) cased = true;
    }
    *out = nu_jv_bool(ok && cased);
    return true;
}

static bool m_islower(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_iscase(C, at, self, a, out, false);
}
static bool m_isupper(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_iscase(C, at, self, a, out, true);
}

static bool m_format(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return nu_jinja_str_format(C, at, self, a, out);
}

/* ------------------------------------------------------------------------ */
/* Dict and list methods                                                    */
/* ------------------------------------------------------------------------ */

/* items() / keys() / values() as lists (of 2-tuples for items). */
static bool m_dict_view(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out,
                        int which) {
    if (!nu_jargs_bind(C, at, "method", a, NULL, 0, NULL)) return false;
    nu_jdict *d = nu_jv_dict(self);
    if (!nu_jv_new_list(C, at, d->len, out)) return false;
    for (size_t i = 0; i < d->len; i++) {
        nu_jv item;
        if (which == 0) {
            if (!nu_jv_new_list(C, at, 2, &item)) return false;
            item.u.o->flags |= JO_TUPLE;
            nu_jlist_push(C, at, nu_jv_list(item), nu_jv_ref(d->keys[i]));
            nu_jlist_push(C, at, nu_jv_list(item), nu_jv_ref(d->vals[i]));
        } else {
            item = nu_jv_ref(which == 1 ? d->keys[i] : d->vals[i]);
        }
        if (!nu_jlist_push(C, at, nu_jv_list(*out), item)) return false;
    }
    return true;
}

static bool m_items(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_dict_view(C, at, self, a, out, 0);
}
static bool m_keys(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_dict_view(C, at, self, a, out, 1);
}
static bool m_values(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_dict_view(C, at, self, a, out, 2);
}

static bool m_get(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    static const char *const names[] = {"key", "default"};
    nu_jv p[2];
    if (!nu_jargs_bind(C, at, "get()", a, names, 2, p)) return false;
    if (!jarg_given(p[0])) return nu_jfail(C, at, "get expected at least 1 argument, got 0");
    nu_jv *v = nu_jdict_find(nu_jv_dict(self), p[0]);
    *out = v ? nu_jv_ref(*v) : jarg_given(p[1]) ? nu_jv_ref(p[1]) : nu_jv_none();
    return true;
}

static bool m_copy(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    if (!nu_jargs_bind(C, at, "copy()", a, NULL, 0, NULL)) return false;
    if (self.type == JV_LIST) {
        nu_jlist *l = nu_jv_list(self);
        if (!nu_jv_new_list(C, at, l->len, out)) return false;
        for (size_t i = 0; i < l->len; i++)
            if (!nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(l->items[i]))) return false;
        return true;
    }
    nu_jdict *d = nu_jv_dict(self);
    if (!nu_jv_new_dict(C, at, out)) return false;
    for (size_t i = 0; i < d->len; i++)
        if (!nu_jdict_set(C, at, nu_jv_dict(*out), nu_jv_ref(d->keys[i]), nu_jv_ref(d->vals[i])))
            return false;
    return true;
}

/* list.count(x) and list.index(x). */
static bool m_list_find(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out,
                        bool index) {
    static const char *const names[] = {"value"};
    nu_jv x;
    if (!nu_jargs_bind(C, at, index ? "index()" : "count()", a, names, 1, &x)) return false;
    nu_jlist *l = nu_jv_list(self);
    int64_t n = 0;
    for (size_t i = 0; i < l->len; i++) {
        bool eq;
        if (!nu_jv_equal(C, at, l->items[i], x, &eq)) return false;
        if (eq && index) return *out = nu_jv_int((int64_t)i), true;
        n += eq;
    }
    if (index) return nu_jfail(C, at, "value is not in list");
    *out = nu_jv_int(n);
    return true;
}

static bool m_list_count(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_list_find(C, at, self, a, out, false);
}
static bool m_list_index(nu_jctx *C, const jnode *at, nu_jv self, const nu_jargs *a, nu_jv *out) {
    return m_list_find(C, at, self, a, out, true);
}

static const jmethod methods[] = {
    {JV_STR, "strip", m_strip},       {JV_STR, "lstrip", m_lstrip},
    {JV_STR, "rstrip", m_rstrip},     {JV_STR, "upper", m_upper},
    {JV_STR, "lower", m_lower},       {JV_STR, "casefold", m_lower},
    {JV_STR, "title", m_title},       {JV_STR, "capitalize", m_capitalize},
    {JV_STR, "swapcase", m_swapcase}, {JV_STR, "startswith", m_startswith},
    {JV_STR, "endswith", m_endswith}, {JV_STR, "split", m_split},
    {JV_STR, "rsplit", m_rsplit},     {JV_STR, "splitlines", m_splitlines},
    {JV_STR, "replace", m_replace},   {JV_STR, "find", m_find},
    {JV_STR, "rfind", m_rfind},       {JV_STR, "count", m_str_count},
    {JV_STR, "join", m_join},         {JV_STR, "format", m_format},
    {JV_STR, "isdigit", m_isdigit},   {JV_STR, "isalpha", m_isalpha},
    {JV_STR, "isalnum", m_isalnum},   {JV_STR, "isspace", m_isspace},
    {JV_STR, "islower", m_islower},   {JV_STR, "isupper", m_isupper},
    {JV_DICT, "items", m_items},      {JV_DICT, "keys", m_keys},
    {JV_DICT, "values", m_values},    {JV_DICT, "get", m_get},
    {JV_DICT, "copy", m_copy},        {JV_DICT, "pop", NULL},
    {JV_DICT, "popitem", NULL},       {JV_DICT, "setdefault", NULL},
    {JV_DICT, "update", NULL},        {JV_DICT, "clear", NULL},
    {JV_LIST, "count", m_list_count}, {JV_LIST, "index", m_list_index},
    {JV_LIST, "copy", m_copy},        {JV_LIST, "append", NULL},
    {JV_LIST, "extend", NULL},        {JV_LIST, "insert", NULL},
    {JV_LIST, "pop", NULL},           {JV_LIST, "remove", NULL},
    {JV_LIST, "reverse", NULL},       {JV_LIST, "sort", NULL},
    {JV_LIST, "clear", NULL},
};

static const jmethod *find_method(uint8_t type, const char *name) {
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (methods[i].type == type && !strcmp(methods[i].name, name)) return &methods[i];
    return NULL;
}

bool nu_jcall_method(nu_jctx *C, const jnode *at, nu_jv self, const char *method, const nu_jargs *a,
                     nu_jv *out) {
    const jmethod *m = find_method(self.type, method);
    if (!m || !m->fn)
        return nu_jfail(C, at, "'%s' object has no method '%s'", nu_jv_type_name(self), method);
    return m->fn(C, at, self, a, out);
}

/* ------------------------------------------------------------------------ */
/* Global functions                                                         */
/* ------------------------------------------------------------------------ */

/* range(stop), range(start, stop[, step]) as a list; the sandbox refuses
 * more than 100000 items. */
static bool g_range(nu_jctx *C, const jnode *at, const nu_jargs *a, nu_jv *out) {
    int64_t v[3] = {0, 0, 1};
    if (a->n_kw) return nu_jfail(C, at, "range() takes no keyword arguments");
    if (a->n_pos < 1 || a->n_pos > 3)
        return nu_jfail(C, at, "range expected 1 to 3 arguments, got %zu", a->n_pos);
    for (size_t i = 0; i < a->n_pos; i++)
        if (!int_arg(C, at, a->pos[i], 0, &v[a->n_pos == 1 ? 1 : i])) return false;
    if (a->n_pos == 1) v[0] = 0;
    if (v[2] == 0) return nu_jfail(C, at, "range() arg 3 must not be zero");
    int64_t start = v[0], stop = v[1], step = v[2];
    double count = step > 0 ? ceil(((double)stop - (double)start) / (double)step)
                            : ceil(((double)start - (double)stop) / -(double)step);
    if (count < 0) count = 0;
    if (count > 100000)
        return nu_jfail(C, at,
                        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    if (!nu_jv_new_list(C, at, (size_t)count, out)) return false;
    for (int64_t i = 0, x = start; i < (int64_t)count; i++, x += step)
        if (!nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_int(x))) return false;
    return true;
}

/* dict(...) and namespace(...): a mapping or pairs, then keywords. */
static bool g_dict(nu_jctx *C, const jnode *at, const nu_jargs *a, nu_jv *out, bool ns) {
    if (a->n_pos > 1) return nu_jfail(C, at, "dict expected at most 1 argument, got %zu", a->n_pos);
    if (!nu_jv_new_dict(C, at, out)) return false;
    if (ns) out->u.o->flags |= JO_NAMESPACE;
    if (a->n_pos == 1) {
        nu_jv src = a->pos[0];
        if (src.type == JV_DICT && !nu_jv_is_namespace(src)) {
            nu_jdict *d = nu_jv_dict(src);
            for (size_t i = 0; i < d->len; i++)
                if (!nu_jdict_set(C, at, nu_jv_dict(*out), nu_jv_ref(d->keys[i]),
                                  nu_jv_ref(d->vals[i])))
                    return false;
        } else {
            nu_jv items;
            if (!nu_jv_iterate(C, at, src, &items)) return false;
            nu_jlist *l = nu_jv_list(items);
            for (size_t i = 0; i < l->len; i++) {
                nu_jv pair = l->items[i];
                if (pair.type != JV_LIST || nu_jv_list(pair)->len != 2) {
                    nu_jv_unref(C, items);
                    return nu_jfail(C, at,
                                    "dictionary update sequence element #%zu has wrong length", i);
                }
                if (!nu_jdict_set(C, at, nu_jv_dict(*out), nu_jv_ref(nu_jv_list(pair)->items[0]),
                                  nu_jv_ref(nu_jv_list(pair)->items[1]))) {
                    nu_jv_unref(C, items);
                    return false;
                }
            }
            nu_jv_unref(C, items);
        }
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        nu_jv key;
        if (!nu_jv_new_str(C, at, a->kw_names[k], strlen(a->kw_names[k]), &key)) return false;
        if (!nu_jdict_set(C, at, nu_jv_dict(*out), key, nu_jv_ref(a->kw[k]))) return false;
    }
    return true;
}

/* raise_exception(message): the template refuses the input. */
static bool g_raise(nu_jctx *C, const jnode *at, const nu_jargs *a) {
    nu_buf b = {.limit = 4096};
    if (a->n_pos >= 1) nu_jv_print(C, at, &b, a->pos[0]);
    bool r = nu_jfail_status(C, at, NU_ERR_INVALID_ARG, "%s", b.data ? b.data : "");
    nu_buf_free(&b);
    return r;
}

static bool g_strftime(nu_jctx *C, const jnode *at, const nu_jargs *a, nu_jv *out) {
    static const char *const names[] = {"format"};
    nu_jv f;
    if (!nu_jargs_bind(C, at, "strftime_now()", a, names, 1, &f)) return false;
    if (!need_str(C, at, f, "strftime_now() argument")) return false;
    nu_buf b = {.limit = C->limits.max_output};
    nu_jinja_strftime(&b, nu_jv_str(f)->data, nu_jv_str(f)->len, C->now);
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

/* loop.cycle(a, b, ...) and loop.changed(x, ...). */
static bool loop_method(nu_jctx *C, const jnode *at, jfunc *f, const nu_jargs *a, nu_jv *out) {
    jloop *l = (jloop *)f->self.u.o;
    if (f->id == JF_LOOP_CYCLE) {
        if (a->n_pos == 0) return nu_jfail(C, at, "no items for cycling given");
        *out = nu_jv_ref(a->pos[l->index0 % a->n_pos]);
        return true;
    }
    nu_jv now;
    if (!nu_jv_new_list(C, at, a->n_pos, &now)) return false;
    for (size_t i = 0; i < a->n_pos; i++)
        nu_jlist_push(C, at, nu_jv_list(now), nu_jv_ref(a->pos[i]));
    bool same = false;
    if (l->changed_last.type != JV_UNDEF && !nu_jv_equal(C, at, l->changed_last, now, &same)) {
        nu_jv_unref(C, now);
        return false;
    }
    nu_jv_unref(C, l->changed_last);
    l->changed_last = now;
    *out = nu_jv_bool(!same);
    return true;
}

bool nu_jinja_call_function(nu_jctx *C, const jnode *at, jfunc *f, const nu_jargs *a, nu_jv *out) {
    switch (f->id) {
    case JF_RANGE: return g_range(C, at, a, out);
    case JF_NAMESPACE: return g_dict(C, at, a, out, true);
    case JF_DICT: return g_dict(C, at, a, out, false);
    case JF_RAISE_EXCEPTION: return g_raise(C, at, a);
    case JF_STRFTIME_NOW: return g_strftime(C, at, a, out);
    case JF_LOOP_CYCLE:
    case JF_LOOP_CHANGED: return loop_method(C, at, f, a, out);
    default: return nu_jcall_method(C, at, f->self, f->method, a, out);
    }
}

bool nu_jinja_global(nu_jctx *C, const char *name, nu_jv *out) {
    static const struct {
        const char *name;
        jfunc_id id;
    } globals[] = {{"range", JF_RANGE},
                   {"namespace", JF_NAMESPACE},
                   {"dict", JF_DICT},
                   {"raise_exception", JF_RAISE_EXCEPTION},
                   {"strftime_now", JF_STRFTIME_NOW}};
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++) {
        if (strcmp(globals[i].name, name) != 0) continue;
        jfunc *f = nu_jctx_alloc_obj(C, NULL, JK_FUNC, sizeof(jfunc));
        if (!f) return true; /* the error is recorded */
        f->id = (uint8_t)globals[i].id;
        *out = nu_jv_obj(JV_FUNC, f);
        return true;
    }
    return false;
}
