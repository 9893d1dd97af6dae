/* jinja_filters.c - Jinja2's built-in filters and tests, as chat templates
 * use them, plus transformers' tojson.
 *
 * Each filter gets its input and evaluated arguments (borrowed) and makes a
 * new value. String filters first turn their input into a string with
 * Python's str() (so `none | upper` is "NONE" and an undefined value is
 * ""), as Jinja2's soft_str does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

#define BIND(what, ...)                                                                            \
    static const char *const names[] = {__VA_ARGS__};                                              \
    nu_jv p[sizeof names / sizeof *names];                                                         \
    if (!nu_jargs_bind(C, at, what, a, names, sizeof names / sizeof *names, p)) return false

#define NO_ARGS(what)                                                                              \
    if (!nu_jargs_bind(C, at, what, a, NULL, 0, NULL)) return false

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* Applies fn to str(v) (a new string reference on success). */
static bool with_str(nu_jctx *C, const jnode *at, nu_jv v, nu_jv *s) {
    return nu_jv_to_str(C, at, v, s);
}

static bool opt_bool(nu_jv v, bool dflt) {
    return jarg_given(v) ? nu_jv_truthy(v) : dflt;
}

/* An int argument, the default when not given. */
static bool opt_int(nu_jctx *C, const jnode *at, nu_jv v, int64_t dflt, int64_t *out) {
    if (!jarg_given(v) || v.type == JV_NONE)
        *out = dflt;
    else if (v.type == JV_INT)
        *out = v.u.i;
    else if (v.type == JV_BOOL)
        *out = v.u.b;
    else if (v.type == JV_FLOAT)
        *out = (int64_t)v.u.f;
    else
        return nu_jfail(C, at, "expected an integer argument, got %s", nu_jv_type_name(v));
    return true;
}

/* item.a.b.0: each dotted part looked up like a subscript (keys first,
 * digits as indices). */
static bool attr_path(nu_jctx *C, const jnode *at, nu_jv item, nu_jv path, nu_jv *out) {
    if (path.type == JV_INT) return nu_jv_getitem(C, at, item, path, NULL, out);
    if (path.type != JV_STR) return nu_jfail(C, at, "attribute must be a string");
    nu_jv cur = nu_jv_ref(item);
    const char *s = nu_jv_str(path)->data;
    size_t n = nu_jv_str(path)->len, i = 0;
    do {
        size_t j = i;
        while (j < n && s[j] != '.') j++;
        nu_jv key;
        bool digits = j > i;
        for (size_t k = i; k < j; k++) digits = digits && s[k] >= '0' && s[k] <= '9';
        bool ok = digits && j - i < 18 ? (key = nu_jv_int(strtoll(s + i, NULL, 10)), true)
                                       : nu_jv_new_str(C, at, s + i, j - i, &key);
        nu_jv next;
        ok = ok && nu_jv_getitem(C, at, cur, key, NULL, &next);
        nu_jv_unref(C, key);
        nu_jv_unref(C, cur);
        if (!ok) return false;
        cur = next;
        i = j + 1;
    } while (i <= n);
    *out = cur;
    return true;
}

/* Key of an item for sort / unique / min / max: the attribute (or item
 * itself), lowercased unless case-sensitive. */
static bool sort_key(nu_jctx *C, const jnode *at, nu_jv item, nu_jv attribute, bool case_sensitive,
                     nu_jv *out) {
    nu_jv k;
    if (jarg_given(attribute) && attribute.type != JV_NONE) {
        if (!attr_path(C, at, item, attribute, &k)) return false;
    } else {
        k = nu_jv_ref(item);
    }
    if (case_sensitive || k.type != JV_STR) {
        *out = k;
        return true;
    }
    bool ok = nu_jinja_case(C, at, k, 1, out);
    nu_jv_unref(C, k);
    return ok;
}

/* Stable merge sort of idx[0..n) by keys. */
static bool merge_sort(nu_jctx *C, const jnode *at, const nu_jv *keys, size_t *idx, size_t *tmp,
                       size_t n, bool reverse) {
    if (n < 2) return true;
    size_t h = n / 2;
    if (!merge_sort(C, at, keys, idx, tmp, h, reverse) ||
        !merge_sort(C, at, keys, idx + h, tmp, n - h, reverse))
        return false;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c;
        if (!nu_jv_cmp3(C, at, keys[idx[j]], keys[idx[i]], false, &c)) return false;
        bool take_right = reverse ? c > 0 : c < 0;
        tmp[k++] = take_right ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return true;
}

/* The items of a list sorted by their keys (a new list). */
static bool sorted_by(nu_jctx *C, const jnode *at, nu_jlist *l, nu_jv *keys, bool reverse,
                      nu_jv *out) {
    size_t n = l->len;
    size_t *idx = malloc((n + 1) * sizeof *idx), *tmp = malloc((n + 1) * sizeof *tmp);
    bool ok = idx && tmp;
    if (!ok) nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
    for (size_t i = 0; ok && i < n; i++) idx[i] = i;
    ok = ok && merge_sort(C, at, keys, idx, tmp, n, reverse) && nu_jv_new_list(C, at, n, out);
    for (size_t i = 0; ok && i < n; i++)
        ok = nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(l->items[idx[i]]));
    free(idx);
    free(tmp);
    return ok;
}

/* Keys of every item of a list (a malloc'd array of new references). */
static nu_jv *keys_of(nu_jctx *C, const jnode *at, nu_jlist *l, nu_jv attribute, bool cs) {
    nu_jv *keys = calloc(l->len + 1, sizeof *keys);
    if (!keys) {
        nu_jfail_status(C, at, NU_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < l->len; i++) {
        if (!sort_key(C, at, l->items[i], attribute, cs, &keys[i])) {
            for (size_t k = 0; k < i; k++) nu_jv_unref(C, keys[k]);
            free(keys);
            return NULL;
        }
    }
    return keys;
}

static void free_keys(nu_jctx *C, nu_jv *keys, size_t n) {
    for (size_t i = 0; i < n; i++) nu_jv_unref(C, keys[i]);
    free(keys);
}

/* ------------------------------------------------------------------------ */
/* String filters                                                           */
/* ------------------------------------------------------------------------ */

static bool f_trim(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("trim", "chars");
    nu_jv s;
    if (!with_str(C, at, v, &s)) return false;
    bool ok = nu_jinja_strip(C, at, s, p[0], 3, out);
    nu_jv_unref(C, s);
    return ok;
}

/* upper, lower, capitalize: str() then the case mapping. */
static bool case_filter(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out,
                        int mode) {
    NO_ARGS("filter");
    nu_jv s;
    if (!with_str(C, at, v, &s)) return false;
    bool ok = nu_jinja_case(C, at, s, mode, out);
    nu_jv_unref(C, s);
    return ok;
}

static bool f_upper(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return case_filter(C, at, v, a, out, 0);
}
static bool f_lower(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return case_filter(C, at, v, a, out, 1);
}
static bool f_capitalize(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return case_filter(C, at, v, a, out, 3);
}

/* Jinja's title: the first character after a run of whitespace, '-', '(',
 * '{', '[' or '<' (or at the start) uppercased, every other lowercased. */
static bool f_title(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("title");
    nu_jv sv;
    if (!with_str(C, at, v, &sv)) return false;
    nu_jstr *s = nu_jv_str(sv);
    nu_buf b = {.limit = C->limits.max_output};
    bool word_start = true;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp = nu_utf8_next_escaped(s->data, s->len, &i), m[3];
        bool delim =
            nu_uni_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        int k = delim ? (m[0] = cp, 1) : word_start ? nu_uni_upper(cp, m) : nu_uni_lower(cp, m);
        for (int j = 0; j < k; j++) nu_jinja_put_char(&b, m[j]);
        word_start = delim;
    }
    nu_jv_unref(C, sv);
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

static bool f_replace(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("replace", "old", "new", "count");
    if (!jarg_given(p[0]) || !jarg_given(p[1])) return nu_jfail(C, at, "replace needs old and new");
    nu_jv s = nu_jv_undef(), o = nu_jv_undef(), n = nu_jv_undef();
    int64_t count = 0;
    bool ok = opt_int(C, at, p[2], -1, &count) && with_str(C, at, v, &s) &&
              with_str(C, at, p[0], &o) && with_str(C, at, p[1], &n) &&
              nu_jinja_replace(C, at, s, o, n, count, out);
    nu_jv_unref(C, s);
    nu_jv_unref(C, o);
    nu_jv_unref(C, n);
    return ok;
}

static bool f_string(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("string");
    return nu_jv_to_str(C, at, v, out);
}

static bool f_safe(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("safe");
    *out = nu_jv_ref(v);
    return true;
}

/* HTML escaping, which Jinja2's escape filter applies even with
 * autoescape off. */
static bool f_escape(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("escape");
    nu_jv sv;
    if (!with_str(C, at, v, &sv)) return false;
    nu_jstr *s = nu_jv_str(sv);
    nu_buf b = {.limit = C->limits.max_output};
    for (size_t i = 0; i < s->len; i++) {
        switch (s->data[i]) {
        case '&': nu_buf_puts(&b, "&amp;"); break;
        case '<': nu_buf_puts(&b, "&lt;"); break;
        case '>': nu_buf_puts(&b, "&gt;"); break;
        case '"': nu_buf_puts(&b, "&#34;"); break;
        case '\'': nu_buf_puts(&b, "&#39;"); break;
        default: nu_buf_putc(&b, s->data[i]);
        }
    }
    nu_jv_unref(C, sv);
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

/* indent(width=4, first=False, blank=False), Jinja 3's rules: a newline
 * is appended, the text split with str.splitlines() and joined again with
 * the indentation after each newline (blank lines only when blank). */
static bool f_indent(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("indent", "width", "first", "blank");
    nu_buf pad = {0}, b = {.limit = C->limits.max_output};
    if (jarg_given(p[0]) && p[0].type == JV_STR) {
        nu_buf_add(&pad, nu_jv_str(p[0])->data, nu_jv_str(p[0])->len);
    } else {
        int64_t w = 0;
        if (!opt_int(C, at, p[0], 4, &w)) return false;
        for (int64_t i = 0; i < w && i < 4096; i++) nu_buf_putc(&pad, ' ');
    }
    nu_jv sv, text = nu_jv_undef(), lines = nu_jv_undef();
    nu_jargs none = {0};
    bool ok = with_str(C, at, v, &sv);
    if (ok) {
        nu_buf t = {.limit = C->limits.max_output};
        nu_buf_add(&t, nu_jv_str(sv)->data, nu_jv_str(sv)->len);
        nu_buf_putc(&t, '\n');
        nu_jv_unref(C, sv);
        ok = nu_jv_new_str_from_buf(C, at, &t, &text) &&
             nu_jcall_method(C, at, text, "splitlines", &none, &lines);
    }
    if (ok) {
        nu_jlist *l = nu_jv_list(lines);
        bool blank = opt_bool(p[2], false);
        if (opt_bool(p[1], false)) nu_buf_add(&b, pad.data, pad.len);
        for (size_t i = 0; i < l->len; i++) {
            nu_jstr *line = nu_jv_str(l->items[i]);
            if (i > 0) {
                nu_buf_putc(&b, '\n');
                if (blank || line->len > 0) nu_buf_add(&b, pad.data, pad.len);
            }
            nu_buf_add(&b, line->data, line->len);
        }
    }
    nu_jv_unref(C, lines);
    nu_jv_unref(C, text);
    nu_buf_free(&pad);
    if (!ok) {
        nu_buf_free(&b);
        return false;
    }
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

static bool f_center(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("center", "width");
    int64_t w = 0;
    nu_jv sv;
    if (!opt_int(C, at, p[0], 80, &w) || !with_str(C, at, v, &sv)) return false;
    nu_jstr *s = nu_jv_str(sv);
    int64_t n = (int64_t)s->nchars, padding = w > n ? w - n : 0;
    if (padding > (int64_t)C->limits.max_output) padding = 0;
    int64_t left = padding / 2 + (padding & w & 1);
    nu_buf b = {.limit = C->limits.max_output};
    for (int64_t i = 0; i < left; i++) nu_buf_putc(&b, ' ');
    nu_buf_add(&b, s->data, s->len);
    for (int64_t i = left; i < padding; i++) nu_buf_putc(&b, ' ');
    nu_jv_unref(C, sv);
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

static bool f_wordcount(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("wordcount");
    nu_jv sv;
    if (!with_str(C, at, v, &sv)) return false;
    nu_jstr *s = nu_jv_str(sv);
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp = nu_utf8_next_escaped(s->data, s->len, &i);
        bool w = cp == '_' || nu_uni_isalnum(cp);
        if (w && !in_word) n++;
        in_word = w;
    }
    nu_jv_unref(C, sv);
    *out = nu_jv_int(n);
    return true;
}

static bool f_format(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    nu_jv sv, args = nu_jv_undef();
    if (a->n_pos && a->n_kw)
        return nu_jfail(C, at, "can't handle positional and keyword arguments at the same time");
    if (!with_str(C, at, v, &sv)) return false;
    bool ok;
    if (a->n_kw) {
        ok = nu_jv_new_dict(C, at, &args);
        for (size_t k = 0; ok && k < a->n_kw; k++) {
            nu_jv key;
            ok = nu_jv_new_str(C, at, a->kw_names[k], strlen(a->kw_names[k]), &key) &&
                 nu_jdict_set(C, at, nu_jv_dict(args), key, nu_jv_ref(a->kw[k]));
        }
    } else {
        ok = nu_jv_new_list(C, at, a->n_pos, &args);
        if (ok) args.u.o->flags |= JO_TUPLE;
        for (size_t k = 0; ok && k < a->n_pos; k++)
            ok = nu_jlist_push(C, at, nu_jv_list(args), nu_jv_ref(a->pos[k]));
    }
    ok = ok && nu_jinja_percent_format(C, at, sv, args, out);
    nu_jv_unref(C, sv);
    nu_jv_unref(C, args);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Sequence filters                                                         */
/* ------------------------------------------------------------------------ */

static bool f_length(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("length");
    int64_t n;
    if (!nu_jv_length(C, at, v, &n)) return false;
    *out = nu_jv_int(n);
    return true;
}

static bool f_list(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("list");
    nu_jv items;
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    if (items.u.o != v.u.o || !nu_jv_is_tuple(v)) {
        *out = items;
        return true;
    }
    nu_jlist *l = nu_jv_list(items); /* a tuple becomes a list */
    bool ok = nu_jv_new_list(C, at, l->len, out);
    for (size_t i = 0; ok && i < l->len; i++)
        ok = nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(l->items[i]));
    nu_jv_unref(C, items);
    return ok;
}

/* first / last item (undefined for an empty sequence). */
static bool first_last(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out,
                       bool last) {
    NO_ARGS(last ? "last" : "first");
    nu_jv items;
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    nu_jlist *l = nu_jv_list(items);
    if (l->len == 0) {
        *out = nu_jv_undef();
        out->hint = JU_EMPTY;
    } else {
        *out = nu_jv_ref(l->items[last ? l->len - 1 : 0]);
    }
    nu_jv_unref(C, items);
    return true;
}

static bool f_first(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return first_last(C, at, v, a, out, false);
}
static bool f_last(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return first_last(C, at, v, a, out, true);
}

static bool f_join(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("join", "d", "attribute");
    nu_jv items, sep = nu_jv_undef();
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    bool ok = jarg_given(p[0]) ? with_str(C, at, p[0], &sep) : nu_jv_new_str(C, at, "", 0, &sep);
    nu_buf b = {.limit = C->limits.max_output};
    nu_jlist *l = nu_jv_list(items);
    for (size_t i = 0; ok && i < l->len; i++) {
        if (i) nu_buf_add(&b, nu_jv_str(sep)->data, nu_jv_str(sep)->len);
        nu_jv item = l->items[i], got = nu_jv_undef();
        if (jarg_given(p[1]) && p[1].type != JV_NONE) {
            ok = attr_path(C, at, item, p[1], &got);
            item = got;
        }
        ok = ok && nu_jv_print(C, at, &b, item);
        nu_jv_unref(C, got);
    }
    nu_jv_unref(C, items);
    nu_jv_unref(C, sep);
    if (!ok) {
        nu_buf_free(&b);
        return false;
    }
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

static bool f_default(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("default", "default_value", "boolean");
    bool use = v.type == JV_UNDEF || (opt_bool(p[1], false) && !nu_jv_truthy(v));
    if (!use)
        *out = nu_jv_ref(v);
    else if (jarg_given(p[0]))
        *out = nu_jv_ref(p[0]);
    else
        return nu_jv_new_str(C, at, "", 0, out);
    return true;
}

/* dict | items: (key, value) tuples; undefined gives nothing. */
static bool f_items(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("items");
    if (v.type == JV_UNDEF) return nu_jv_new_list(C, at, 0, out);
    if (v.type != JV_DICT || nu_jv_is_namespace(v))
        return nu_jfail(C, at, "Can only get item pairs from a mapping.");
    nu_jargs none = {0};
    return nu_jcall_method(C, at, v, "items", &none, out);
}

static bool f_dictsort(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("dictsort", "case_sensitive", "by", "reverse");
    if (v.type != JV_DICT || nu_jv_is_namespace(v))
        return nu_jfail(C, at, "dictsort needs a mapping");
    int pos = 0;
    if (jarg_given(p[1])) {
        if (p[1].type == JV_STR && !strcmp(nu_jv_str(p[1])->data, "value"))
            pos = 1;
        else if (!(p[1].type == JV_STR && !strcmp(nu_jv_str(p[1])->data, "key")))
            return nu_jfail(C, at, "You can only sort by either \"key\" or \"value\"");
    }
    nu_jv items;
    nu_jargs none = {0};
    if (!nu_jcall_method(C, at, v, "items", &none, &items)) return false;
    nu_jv idx = nu_jv_int(pos);
    nu_jv *keys = keys_of(C, at, nu_jv_list(items), idx, opt_bool(p[0], false));
    bool ok = keys && sorted_by(C, at, nu_jv_list(items), keys, opt_bool(p[2], false), out);
    if (keys) free_keys(C, keys, nu_jv_list(items)->len);
    nu_jv_unref(C, items);
    return ok;
}

static bool f_sort(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("sort", "reverse", "case_sensitive", "attribute");
    nu_jv items;
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    nu_jv *keys = keys_of(C, at, nu_jv_list(items), p[2], opt_bool(p[1], false));
    bool ok = keys && sorted_by(C, at, nu_jv_list(items), keys, opt_bool(p[0], false), out);
    if (keys) free_keys(C, keys, nu_jv_list(items)->len);
    nu_jv_unref(C, items);
    return ok;
}

static bool f_unique(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("unique", "case_sensitive", "attribute");
    nu_jv items;
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    nu_jlist *l = nu_jv_list(items);
    nu_jv *keys = keys_of(C, at, l, p[1], opt_bool(p[0], false));
    bool ok = keys && nu_jv_new_list(C, at, 0, out);
    for (size_t i = 0; ok && i < l->len; i++) {
        bool seen = false;
        for (size_t j = 0; ok && j < i && !seen; j++)
            ok = nu_jv_equal(C, at, keys[j], keys[i], &seen);
        if (ok && !seen) ok = nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(l->items[i]));
    }
    if (keys) free_keys(C, keys, l->len);
    nu_jv_unref(C, items);
    return ok;
}

/* min / max (undefined for an empty sequence). */
static bool min_max(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out, bool max) {
    BIND(max ? "max" : "min", "case_sensitive", "attribute");
    nu_jv items;
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    nu_jlist *l = nu_jv_list(items);
    nu_jv *keys = keys_of(C, at, l, p[1], opt_bool(p[0], false));
    bool ok = keys != NULL;
    size_t best = 0;
    for (size_t i = 1; ok && i < l->len; i++) {
        int c;
        ok = nu_jv_cmp3(C, at, keys[i], keys[best], false, &c);
        if (ok && (max ? c > 0 : c < 0)) best = i;
    }
    if (ok) *out = l->len ? nu_jv_ref(l->items[best]) : nu_jv_undef();
    if (keys) free_keys(C, keys, l->len);
    nu_jv_unref(C, items);
    return ok;
}

static bool f_min(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return min_max(C, at, v, a, out, false);
}
static bool f_max(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return min_max(C, at, v, a, out, true);
}

static bool f_reverse(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("reverse");
    if (v.type == JV_STR)
        return nu_jinja_slice(C, at, v, nu_jv_none(), nu_jv_none(), nu_jv_int(-1), out);
    nu_jv items;
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    nu_jlist *l = nu_jv_list(items);
    bool ok = nu_jv_new_list(C, at, l->len, out);
    for (size_t i = l->len; ok && i-- > 0;)
        ok = nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(l->items[i]));
    nu_jv_unref(C, items);
    return ok;
}

static bool f_batch(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("batch", "linecount", "fill_with");
    int64_t n = 0;
    if (!opt_int(C, at, p[0], 0, &n)) return false;
    if (n <= 0) return nu_jfail(C, at, "batch size must be positive");
    nu_jv items, row = nu_jv_undef();
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    nu_jlist *l = nu_jv_list(items);
    bool ok = nu_jv_new_list(C, at, 0, out);
    for (size_t i = 0; ok && i < l->len; i++) {
        if (row.type == JV_UNDEF) ok = nu_jv_new_list(C, at, (size_t)n, &row);
        ok = ok && nu_jlist_push(C, at, nu_jv_list(row), nu_jv_ref(l->items[i]));
        if (ok && (int64_t)nu_jv_list(row)->len == n) {
            ok = nu_jlist_push(C, at, nu_jv_list(*out), row);
            row = nu_jv_undef();
        }
    }
    if (ok && row.type != JV_UNDEF) {
        while (ok && jarg_given(p[1]) && (int64_t)nu_jv_list(row)->len < n)
            ok = nu_jlist_push(C, at, nu_jv_list(row), nu_jv_ref(p[1]));
        ok = ok && nu_jlist_push(C, at, nu_jv_list(*out), row);
    }
    nu_jv_unref(C, items);
    return ok;
}

static bool f_sum(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("sum", "attribute", "start");
    nu_jv items, total = jarg_given(p[1]) ? nu_jv_ref(p[1]) : nu_jv_int(0);
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    nu_jlist *l = nu_jv_list(items);
    bool ok = true;
    for (size_t i = 0; ok && i < l->len; i++) {
        nu_jv x = l->items[i], got = nu_jv_undef();
        if (jarg_given(p[0]) && p[0].type != JV_NONE) {
            ok = attr_path(C, at, x, p[0], &got);
            x = got;
        }
        if (ok && !(nu_jv_is_number(x) && nu_jv_is_number(total)))
            ok = nu_jfail(C, at, "unsupported operand type(s) for +: '%s' and '%s'",
                          nu_jv_type_name(total), nu_jv_type_name(x));
        if (ok) {
            if (total.type != JV_FLOAT && x.type != JV_FLOAT) {
                int64_t t = total.type == JV_INT ? total.u.i : total.u.b;
                int64_t y = x.type == JV_INT ? x.u.i : x.u.b;
                if (__builtin_add_overflow(t, y, &t)) ok = nu_jfail(C, at, "integer overflow");
                total = nu_jv_int(t);
            } else {
                double t = total.type == JV_FLOAT
                               ? total.u.f
                               : (double)(total.type == JV_INT ? total.u.i : total.u.b);
                double y = x.type == JV_FLOAT ? x.u.f : (double)(x.type == JV_INT ? x.u.i : x.u.b);
                total = nu_jv_float(t + y);
            }
        }
        nu_jv_unref(C, got);
    }
    nu_jv_unref(C, items);
    if (ok) *out = total;
    return ok;
}

/* map(attribute=...) or map('filter', args...). */
static bool f_map(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    nu_jv items;
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    nu_jlist *l = nu_jv_list(items);
    nu_jv attribute = nu_jv_undef(), dflt = nu_jv_undef();
    bool has_attr = false, has_default = false;
    for (size_t k = 0; k < a->n_kw; k++) {
        if (!strcmp(a->kw_names[k], "attribute"))
            attribute = a->kw[k], has_attr = true;
        else if (!strcmp(a->kw_names[k], "default"))
            dflt = a->kw[k], has_default = true;
    }
    const jfilter_def *f = NULL;
    nu_jargs rest = {0};
    bool ok = true;
    if (!has_attr) {
        if (a->n_pos == 0 || a->pos[0].type != JV_STR)
            ok = nu_jfail(C, at, "map needs a filter name or attribute=");
        else if (!(f = nu_jinja_find_filter(nu_jv_str(a->pos[0])->data)))
            ok = nu_jfail(C, at, "no filter named '%s'", nu_jv_str(a->pos[0])->data);
        rest.n_pos = a->n_pos ? a->n_pos - 1 : 0;
        for (size_t k = 0; k < rest.n_pos; k++) rest.pos[k] = a->pos[k + 1];
        rest.n_kw = a->n_kw;
        for (size_t k = 0; k < a->n_kw; k++)
            rest.kw_names[k] = a->kw_names[k], rest.kw[k] = a->kw[k];
    }
    ok = ok && nu_jv_new_list(C, at, l->len, out);
    for (size_t i = 0; ok && i < l->len; i++) {
        nu_jv r;
        if (has_attr) {
            ok = attr_path(C, at, l->items[i], attribute, &r);
            if (ok && r.type == JV_UNDEF && has_default) r = nu_jv_ref(dflt);
        } else {
            ok = f->fn(C, at, l->items[i], &rest, &r);
        }
        ok = ok && nu_jlist_push(C, at, nu_jv_list(*out), r);
    }
    nu_jv_unref(C, items);
    return ok;
}

/* select / reject / selectattr / rejectattr. */
static bool select_impl(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out,
                        bool attr, bool keep) {
    nu_jv items;
    size_t skip = attr ? 1 : 0;
    if (attr && a->n_pos < 1) return nu_jfail(C, at, "selectattr needs an attribute name");
    const jtest_def *t = NULL;
    if (a->n_pos > skip) {
        if (a->pos[skip].type != JV_STR) return nu_jfail(C, at, "test name must be a string");
        t = nu_jinja_find_test(nu_jv_str(a->pos[skip])->data);
        if (!t) return nu_jfail(C, at, "no test named '%s'", nu_jv_str(a->pos[skip])->data);
    }
    nu_jargs rest = {0};
    for (size_t k = skip + 1; k < a->n_pos; k++) rest.pos[rest.n_pos++] = a->pos[k];
    for (size_t k = 0; k < a->n_kw; k++) rest.kw_names[k] = a->kw_names[k], rest.kw[k] = a->kw[k];
    rest.n_kw = a->n_kw;
    if (!nu_jv_iterate(C, at, v, &items)) return false;
    nu_jlist *l = nu_jv_list(items);
    bool ok = nu_jv_new_list(C, at, 0, out);
    for (size_t i = 0; ok && i < l->len; i++) {
        nu_jv x = l->items[i], got = nu_jv_undef();
        if (attr) {
            ok = attr_path(C, at, x, a->pos[0], &got);
            x = got;
        }
        bool r = false;
        if (ok) {
            if (t)
                ok = t->fn(C, at, x, &rest, &r);
            else
                r = nu_jv_truthy(x);
        }
        if (ok && r == keep) ok = nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(l->items[i]));
        nu_jv_unref(C, got);
    }
    nu_jv_unref(C, items);
    return ok;
}

static bool f_select(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return select_impl(C, at, v, a, out, false, true);
}
static bool f_reject(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return select_impl(C, at, v, a, out, false, false);
}
static bool f_selectattr(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return select_impl(C, at, v, a, out, true, true);
}
static bool f_rejectattr(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    return select_impl(C, at, v, a, out, true, false);
}

static bool f_attr(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("attr", "name");
    if (!jarg_given(p[0]) || p[0].type != JV_STR) return nu_jfail(C, at, "attr needs a name");
    return nu_jv_getitem(C, at, v, p[0], NULL, out);
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                  */
/* ------------------------------------------------------------------------ */

static bool f_abs(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    NO_ARGS("abs");
    if (v.type == JV_INT) {
        if (v.u.i == INT64_MIN) return nu_jfail(C, at, "integer overflow");
        *out = nu_jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    } else if (v.type == JV_BOOL)
        *out = nu_jv_int(v.u.b);
    else if (v.type == JV_FLOAT)
        *out = nu_jv_float(fabs(v.u.f));
    else if (v.type == JV_UNDEF)
        return nu_jfail_undefined(C, at, v);
    else
        return nu_jfail(C, at, "bad operand type for abs(): '%s'", nu_jv_type_name(v));
    return true;
}

/* ASCII whitespace (the bytes of other whitespace are not ASCII). */
static bool ascii_space(char c) {
    return (unsigned char)c < 0x80 && nu_uni_isspace((unsigned char)c);
}

/* Python's float(): optional whitespace, sign, digits with underscores,
 * inf / nan. */
static bool parse_py_float(const char *s, size_t n, double *out) {
    char buf[128];
    size_t k = 0, i = 0;
    while (i < n && ascii_space(s[i])) i++;
    while (n > i && ascii_space(s[n - 1])) n--;
    if (i == n || n - i >= sizeof buf) return false;
    for (; i < n; i++) {
        if (s[i] == '_') {
            if (k == 0 || !(s[i - 1] >= '0' && s[i - 1] <= '9') || i + 1 >= n ||
                !(s[i + 1] >= '0' && s[i + 1] <= '9'))
                return false;
            continue;
        }
        buf[k++] = s[i];
    }
    buf[k] = 0;
    const char *b = buf + (buf[0] == '+' || buf[0] == '-');
    if (strncasecmp(b, "0x", 2) == 0) return false; /* strtod would accept hex */
    char *end;
    *out = strtod(buf, &end);
    return *end == 0 && end != buf;
}

/* Python's int(str, base): whitespace, sign, underscores, base prefix. */
static bool parse_py_int(const char *s, size_t n, int base, int64_t *out) {
    size_t i = 0;
    while (i < n && ascii_space(s[i])) i++;
    while (n > i && ascii_space(s[n - 1])) n--;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i + 1 < n && s[i] == '0') {
        char p = (char)(s[i + 1] | 0x20);
        int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            i += 2;
            if (i < n && s[i] == '_') i++;
        }
    }
    if (base == 0) base = 10;
    if (i == n || base < 2 || base > 36) return false;
    uint64_t v = 0;
    for (size_t k = i; k < n; k++) {
        char c = s[k];
        if (c == '_' && k > i && k + 1 < n && s[k + 1] != '_') continue;
        int d = c >= '0' && c <= '9'                     ? c - '0'
                : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10
                                                         : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (v > (uint64_t)INT64_MAX + neg) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool f_int(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("int", "default", "base");
    int64_t base = 0, i;
    double d;
    if (!opt_int(C, at, p[1], 10, &base)) return false;
    nu_jv dflt = jarg_given(p[0]) ? p[0] : nu_jv_int(0);
    if (v.type == JV_INT || v.type == JV_BOOL)
        *out = nu_jv_int(v.type == JV_INT ? v.u.i : v.u.b);
    else if (v.type == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18)
        *out = nu_jv_int((int64_t)v.u.f);
    else if (v.type == JV_STR && parse_py_int(nu_jv_str(v)->data, nu_jv_str(v)->len, (int)base, &i))
        *out = nu_jv_int(i);
    else if (v.type == JV_STR && parse_py_float(nu_jv_str(v)->data, nu_jv_str(v)->len, &d) &&
             isfinite(d) && fabs(d) < 9.2e18)
        *out = nu_jv_int((int64_t)d);
    else
        *out = nu_jv_ref(dflt);
    return true;
}

static bool f_float(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("float", "default");
    double d;
    if (nu_jv_is_number(v))
        *out = nu_jv_float(v.type == JV_FLOAT ? v.u.f : v.type == JV_INT ? (double)v.u.i : v.u.b);
    else if (v.type == JV_STR && parse_py_float(nu_jv_str(v)->data, nu_jv_str(v)->len, &d))
        *out = nu_jv_float(d);
    else
        *out = jarg_given(p[0]) ? nu_jv_ref(p[0]) : nu_jv_float(0.0);
    return true;
}

/* Python's round(x, n) for floats: correctly rounded, ties to even. */
static double py_round(double x, int64_t n) {
    if (!isfinite(x)) return x;
    if (n > 300) return x;
    if (n >= 0) {
        char buf[512];
        snprintf(buf, sizeof buf, "%.*f", (int)n, x);
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-n);
    if (!isfinite(p)) return 0.0 * x;
    double y = x / p, r = nearbyint(y);
    return r * p;
}

static bool f_round(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("round", "precision", "method");
    int64_t prec = 0;
    if (!opt_int(C, at, p[0], 0, &prec)) return false;
    const char *method = jarg_given(p[1]) && p[1].type == JV_STR ? nu_jv_str(p[1])->data : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return nu_jfail(C, at, "method must be common, ceil or floor");
    if (!nu_jv_is_number(v)) {
        if (v.type == JV_UNDEF) return nu_jfail_undefined(C, at, v);
        return nu_jfail(C, at, "type %s doesn't define __round__ method", nu_jv_type_name(v));
    }
    double x = v.type == JV_FLOAT ? v.u.f : v.type == JV_INT ? (double)v.u.i : v.u.b;
    if (!strcmp(method, "common")) {
        if (v.type != JV_FLOAT && prec >= 0)
            *out = nu_jv_int(v.type == JV_INT ? v.u.i : v.u.b);
        else if (v.type != JV_FLOAT)
            *out = nu_jv_int((int64_t)py_round(x, prec));
        else
            *out = nu_jv_float(py_round(x, prec));
        return true;
    }
    double scale = pow(10.0, (double)prec);
    double r = (!strcmp(method, "ceil") ? ceil(x * scale) : floor(x * scale)) / scale;
    *out = nu_jv_float(r);
    return true;
}

/* ------------------------------------------------------------------------ */
/* tojson, as transformers defines it                                       */
/* ------------------------------------------------------------------------ */

/* json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False). */
static bool f_tojson(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, nu_jv *out) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    jjson_opts o = {
        .ensure_ascii = opt_bool(p[0], false), .indent = -1, .sort_keys = opt_bool(p[3], false)};
    char spaces[256];
    if (jarg_given(p[1]) && p[1].type == JV_STR) {
        o.indent = 0;
        o.indent_str = nu_jv_str(p[1])->data;
        o.indent_len = nu_jv_str(p[1])->len;
    } else if (jarg_given(p[1]) && p[1].type != JV_NONE) {
        int64_t n = 0;
        if (!opt_int(C, at, p[1], 0, &n)) return false;
        if (n > 255) n = 255;
        if (n < 0) n = 0;
        memset(spaces, ' ', (size_t)n);
        o.indent = (int)n;
        o.indent_str = spaces;
        o.indent_len = (size_t)n;
    }
    if (jarg_given(p[2]) && p[2].type != JV_NONE) {
        nu_jv s = p[2];
        if (s.type != JV_LIST || nu_jv_list(s)->len != 2 ||
            nu_jv_list(s)->items[0].type != JV_STR || nu_jv_list(s)->items[1].type != JV_STR)
            return nu_jfail(C, at, "separators must be a pair of strings");
        o.item_sep = nu_jv_str(nu_jv_list(s)->items[0])->data;
        o.item_sep_len = nu_jv_str(nu_jv_list(s)->items[0])->len;
        o.key_sep = nu_jv_str(nu_jv_list(s)->items[1])->data;
        o.key_sep_len = nu_jv_str(nu_jv_list(s)->items[1])->len;
    }
    nu_buf b = {.limit = C->limits.max_output};
    if (!nu_jv_tojson(C, at, &b, v, &o)) {
        nu_buf_free(&b);
        return false;
    }
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

static const jfilter_def filters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

const jfilter_def *nu_jinja_find_filter(const char *name) {
    for (size_t i = 0; i < sizeof filters / sizeof *filters; i++)
        if (!strcmp(filters[i].name, name)) return &filters[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static bool t_defined(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("defined");
    *r = v.type != JV_UNDEF;
    return true;
}
static bool t_undefined(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("undefined");
    *r = v.type == JV_UNDEF;
    return true;
}
static bool t_none(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("none");
    *r = v.type == JV_NONE;
    return true;
}
static bool t_boolean(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("boolean");
    *r = v.type == JV_BOOL;
    return true;
}
static bool t_true(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("true");
    *r = v.type == JV_BOOL && v.u.b;
    return true;
}
static bool t_false(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("false");
    *r = v.type == JV_BOOL && !v.u.b;
    return true;
}
static bool t_integer(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("integer");
    *r = v.type == JV_INT;
    return true;
}
static bool t_float(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("float");
    *r = v.type == JV_FLOAT;
    return true;
}
static bool t_number(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("number");
    *r = nu_jv_is_number(v);
    return true;
}
static bool t_string(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("string");
    *r = v.type == JV_STR;
    return true;
}
static bool t_mapping(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("mapping");
    *r = v.type == JV_DICT && !nu_jv_is_namespace(v);
    return true;
}
static bool t_sequence(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("sequence");
    *r = v.type == JV_UNDEF || v.type == JV_STR || v.type == JV_LIST ||
         (v.type == JV_DICT && !nu_jv_is_namespace(v));
    return true;
}
static bool t_iterable(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("iterable");
    *r = v.type == JV_UNDEF || v.type == JV_STR || v.type == JV_LIST || v.type == JV_LOOP ||
         (v.type == JV_DICT && !nu_jv_is_namespace(v));
    return true;
}
static bool t_callable(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("callable");
    *r = v.type == JV_FUNC || v.type == JV_MACRO || v.type == JV_LOOP;
    return true;
}
static bool t_escaped(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("escaped");
    *r = false;
    return true;
}

/* lower / upper: str(value).islower() / isupper(). */
static bool t_case(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r, bool upper) {
    NO_ARGS(upper ? "upper" : "lower");
    nu_jv s, res;
    nu_jargs none = {0};
    if (!nu_jv_to_str(C, at, v, &s)) return false;
    bool ok = nu_jcall_method(C, at, s, upper ? "isupper" : "islower", &none, &res);
    nu_jv_unref(C, s);
    if (ok) *r = res.u.b;
    return ok;
}
static bool t_lower(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    return t_case(C, at, v, a, r, false);
}
static bool t_upper(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    return t_case(C, at, v, a, r, true);
}

/* odd / even / divisibleby: value % n == 0 with Python semantics. */
static bool modulo_test(nu_jctx *C, const jnode *at, nu_jv v, nu_jv n, int64_t want, bool *r) {
    if (v.type == JV_UNDEF) return nu_jfail_undefined(C, at, v);
    if (!nu_jv_is_number(v) || !nu_jv_is_number(n))
        return nu_jfail(C, at, "unsupported operand type(s) for %%: '%s' and '%s'",
                        nu_jv_type_name(v), nu_jv_type_name(n));
    double x = v.type == JV_FLOAT ? v.u.f : v.type == JV_INT ? (double)v.u.i : v.u.b;
    double y = n.type == JV_FLOAT ? n.u.f : n.type == JV_INT ? (double)n.u.i : n.u.b;
    if (y == 0) return nu_jfail(C, at, "integer division or modulo by zero");
    if (v.type != JV_FLOAT && n.type != JV_FLOAT) {
        int64_t xi = v.type == JV_INT ? v.u.i : v.u.b, yi = n.type == JV_INT ? n.u.i : n.u.b;
        int64_t m = yi == -1 ? 0 : xi % yi;
        if (m != 0 && ((m < 0) != (yi < 0))) m += yi;
        *r = m == want;
        return true;
    }
    double m = fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    *r = m == (double)want;
    return true;
}
static bool t_odd(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("odd");
    return modulo_test(C, at, v, nu_jv_int(2), 1, r);
}
static bool t_even(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("even");
    return modulo_test(C, at, v, nu_jv_int(2), 0, r);
}
static bool t_divisibleby(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    BIND("divisibleby", "num");
    if (!jarg_given(p[0])) return nu_jfail(C, at, "divisibleby needs a number");
    return modulo_test(C, at, v, p[0], 0, r);
}

/* Comparison tests: eq / ne / lt / le / gt / ge and their aliases. */
static bool compare_test(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r, jop op) {
    BIND("comparison", "other");
    if (!jarg_given(p[0])) return nu_jfail(C, at, "comparison test needs a value");
    if (op == JOP_EQ || op == JOP_NE) {
        if (!nu_jv_equal(C, at, v, p[0], r)) return false;
        if (op == JOP_NE) *r = !*r;
        return true;
    }
    return nu_jv_compare(C, at, op, v, p[0], r);
}
static bool t_eq(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    return compare_test(C, at, v, a, r, JOP_EQ);
}
static bool t_ne(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    return compare_test(C, at, v, a, r, JOP_NE);
}
static bool t_lt(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    return compare_test(C, at, v, a, r, JOP_LT);
}
static bool t_le(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    return compare_test(C, at, v, a, r, JOP_LE);
}
static bool t_gt(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    return compare_test(C, at, v, a, r, JOP_GT);
}
static bool t_ge(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    return compare_test(C, at, v, a, r, JOP_GE);
}

/* sameas: Python's `is` (scalars by value and type, objects by identity). */
static bool t_sameas(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    BIND("sameas", "other");
    nu_jv o = p[0];
    if (!jarg_given(o)) return nu_jfail(C, at, "sameas needs a value");
    if (v.type != o.type)
        *r = false;
    else if (nu_jv_is_obj(v))
        *r = v.u.o == o.u.o;
    else if (v.type == JV_BOOL)
        *r = v.u.b == o.u.b;
    else if (v.type == JV_INT)
        *r = v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256;
    else if (v.type == JV_FLOAT)
        *r = false;
    else
        *r = v.type == JV_NONE;
    return true;
}

static bool t_in(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    BIND("in", "seq");
    if (!jarg_given(p[0])) return nu_jfail(C, at, "in needs a sequence");
    nu_jv container = p[0];
    if (container.type == JV_UNDEF) return *r = false, true;
    if (container.type == JV_STR) {
        if (v.type != JV_STR)
            return nu_jfail(C, at, "'in <string>' requires string as left operand, not %s",
                            nu_jv_type_name(v));
        *r = nu_jv_str(v)->len == 0 || memmem(nu_jv_str(container)->data, nu_jv_str(container)->len,
                                              nu_jv_str(v)->data, nu_jv_str(v)->len);
        return true;
    }
    if (container.type == JV_DICT && !nu_jv_is_namespace(container)) {
        *r = nu_jdict_find(nu_jv_dict(container), v) != NULL;
        return true;
    }
    if (container.type != JV_LIST)
        return nu_jfail(C, at, "argument of type '%s' is not iterable", nu_jv_type_name(container));
    *r = false;
    for (size_t i = 0; i < nu_jv_list(container)->len && !*r; i++)
        if (!nu_jv_equal(C, at, nu_jv_list(container)->items[i], v, r)) return false;
    return true;
}

/* filter / test: whether a filter or test of that name exists. */
static bool t_filter(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("filter");
    *r = v.type == JV_STR && nu_jinja_find_filter(nu_jv_str(v)->data) != NULL;
    return true;
}
static bool t_test(nu_jctx *C, const jnode *at, nu_jv v, const nu_jargs *a, bool *r) {
    NO_ARGS("test");
    *r = v.type == JV_STR && nu_jinja_find_test(nu_jv_str(v)->data) != NULL;
    return true;
}

static const jtest_def tests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

const jtest_def *nu_jinja_find_test(const char *name) {
    for (size_t i = 0; i < sizeof tests / sizeof *tests; i++)
        if (!strcmp(tests[i].name, name)) return &tests[i];
    return NULL;
}
