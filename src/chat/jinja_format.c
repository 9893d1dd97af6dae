/* jinja_format.c - Python's string formatting as templates reach it:
 * `'%s' % x` and the format filter (printf-style), str.format() with the
 * common format specs, and strftime for strftime_now (C locale, our own
 * implementation so the process locale never matters). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

#define MAX_WIDTH 4096

/* Appends s padded to width characters: left-aligned when left, else
 * right-aligned with fill. */
static void pad_put(nu_buf *b, const char *s, size_t n, int64_t width, bool left, char fill) {
    int64_t chars = (int64_t)nu_jinja_count_chars(s, n);
    if (!left)
        for (int64_t i = chars; i < width; i++) nu_buf_putc(b, fill);
    nu_buf_add(b, s, n);
    if (left)
        for (int64_t i = chars; i < width; i++) nu_buf_putc(b, ' ');
}

/* The first `chars` characters of s (precision of %s / {:.N}). */
static size_t prefix_bytes(const char *s, size_t n, int64_t chars) {
    if (chars < 0) return n;
    return nu_utf8_offset(s, n, (size_t)chars);
}

/* A number as an int64 for %d / %x (floats truncate; others fail). */
static bool as_int(nu_jctx *C, const jnode *at, nu_jv v, char conv, bool allow_float,
                   int64_t *out) {
    if (v.type == JV_INT)
        *out = v.u.i;
    else if (v.type == JV_BOOL)
        *out = v.u.b;
    else if (v.type == JV_FLOAT && allow_float && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18)
        *out = (int64_t)v.u.f;
    else if (v.type == JV_UNDEF)
        return nu_jfail_undefined(C, at, v);
    else
        return nu_jfail(C, at, "%%%c format: %s is required, not %s", conv,
                        allow_float ? "a real number" : "an integer", nu_jv_type_name(v));
    return true;
}

static bool as_float(nu_jctx *C, const jnode *at, nu_jv v, char conv, double *out) {
    if (v.type == JV_FLOAT)
        *out = v.u.f;
    else if (v.type == JV_INT)
        *out = (double)v.u.i;
    else if (v.type == JV_BOOL)
        *out = v.u.b;
    else if (v.type == JV_UNDEF)
        return nu_jfail_undefined(C, at, v);
    else
        return nu_jfail(C, at, "%%%c format: a real number is required, not %s", conv,
                        nu_jv_type_name(v));
    return true;
}

/* One printf-style conversion of v. flags holds the '-', '+', ' ', '#',
 * '0' characters seen. */
static bool percent_one(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v, const char *flags,
                        int64_t width, int64_t prec, char conv) {
    bool left = strchr(flags, '-') != NULL;
    char tmp[MAX_WIDTH + 400];
    if (conv == 's' || conv == 'r' || conv == 'a') {
        nu_buf s = {.limit = C->limits.max_output};
        bool ok = conv == 's' ? nu_jv_print(C, at, &s, v) : nu_jv_repr(C, at, &s, v);
        if (ok)
            pad_put(b, s.data ? s.data : "", prefix_bytes(s.data ? s.data : "", s.len, prec), width,
                    left, ' ');
        nu_buf_free(&s);
        return ok;
    }
    if (conv == 'c') {
        nu_buf s = {0};
        int64_t cp = 0;
        if (v.type == JV_STR && nu_jv_str(v)->nchars == 1)
            nu_buf_add(&s, nu_jv_str(v)->data, nu_jv_str(v)->len);
        else if (as_int(C, at, v, 'c', false, &cp) && cp >= 0 && cp <= 0x10FFFF)
            nu_jinja_put_char(&s, (uint32_t)cp);
        else
            return C->failed ? false : nu_jfail(C, at, "%%c arg not in range(0x110000)");
        pad_put(b, s.data ? s.data : "", s.len, width, left, ' ');
        nu_buf_free(&s);
        return true;
    }
    char spec[32];
    int k = 0;
    spec[k++] = '%';
    for (const char *f = flags; *f && k < 8; f++) spec[k++] = *f;
    spec[k++] = '*';
    if (prec >= 0) spec[k++] = '.', spec[k++] = '*';
    if (strchr("diuxXo", conv)) {
        int64_t i = 0;
        if (!as_int(C, at, v, conv, strchr("diu", conv) != NULL, &i)) return false;
        spec[k++] = 'l', spec[k++] = 'l';
        spec[k++] = conv == 'i' || conv == 'u' ? 'd' : conv;
        spec[k] = 0;
        if (prec >= 0)
            snprintf(tmp, sizeof tmp, spec, (int)width, (int)prec, (long long)i);
        else
            snprintf(tmp, sizeof tmp, spec, (int)width, (long long)i);
        nu_buf_puts(b, tmp);
        return true;
    }
    if (strchr("eEfFgG", conv)) {
        double d = 0;
        if (!as_float(C, at, v, conv, &d)) return false;
        spec[k++] = conv;
        spec[k] = 0;
        if (prec > 300) prec = 300;
        if (prec >= 0)
            snprintf(tmp, sizeof tmp, spec, (int)width, (int)prec, d);
        else
            snprintf(tmp, sizeof tmp, spec, (int)width, d);
        nu_buf_puts(b, tmp);
        return true;
    }
    return nu_jfail(C, at, "unsupported format character '%c'", conv);
}

/* Reads a width or precision: digits, or '*' taking the next argument. */
static bool read_number(nu_jctx *C, const jnode *at, const char *s, size_t n, size_t *i,
                        nu_jlist *args, size_t *next, int64_t *out) {
    if (*i < n && s[*i] == '*') {
        (*i)++;
        if (!args || *next >= args->len)
            return nu_jfail(C, at, "not enough arguments for format string");
        nu_jv v = args->items[(*next)++];
        if (v.type != JV_INT) return nu_jfail(C, at, "* wants int");
        *out = v.u.i;
        return true;
    }
    int64_t x = 0;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        x = x * 10 + (s[*i] - '0');
        if (x > MAX_WIDTH) return nu_jfail(C, at, "format width or precision too large");
        (*i)++;
    }
    *out = x;
    return true;
}

/* The next value for a conversion: by %(key)s from a mapping, else the
 * next positional argument. */
static bool next_arg(nu_jctx *C, const jnode *at, const char *s, size_t n, size_t *i, nu_jv args,
                     nu_jlist *list, size_t *next, nu_jv *out) {
    if (*i < n && s[*i] == '(') {
        size_t start = ++*i;
        int depth = 1;
        while (*i < n && depth > 0) {
            if (s[*i] == '(') depth++;
            if (s[*i] == ')') depth--;
            (*i)++;
        }
        if (depth) return nu_jfail(C, at, "incomplete format key");
        if (args.type != JV_DICT) return nu_jfail(C, at, "format requires a mapping");
        nu_jv *v = nu_jdict_find_str(nu_jv_dict(args), s + start, *i - 1 - start);
        if (!v)
            return nu_jfail(C, at, "format key '%.*s' not found", (int)(*i - 1 - start), s + start);
        *out = *v;
        return true;
    }
    if (list) {
        if (*next >= list->len) return nu_jfail(C, at, "not enough arguments for format string");
        *out = list->items[(*next)++];
        return true;
    }
    if (*next >= 1) return nu_jfail(C, at, "not enough arguments for format string");
    (*next)++;
    *out = args;
    return true;
}

bool nu_jinja_percent_format(nu_jctx *C, const jnode *at, nu_jv fmt, nu_jv args, nu_jv *out) {
    const char *s = nu_jv_str(fmt)->data;
    size_t n = nu_jv_str(fmt)->len, next = 0;
    nu_jlist *list = nu_jv_is_tuple(args) ? nu_jv_list(args) : NULL;
    nu_buf b = {.limit = C->limits.max_output};
    bool ok = true, used_mapping = false;
    for (size_t i = 0; i < n && ok;) {
        if (s[i] != '%') {
            nu_buf_putc(&b, s[i++]);
            continue;
        }
        if (++i >= n) {
            ok = nu_jfail(C, at, "incomplete format");
            break;
        }
        if (s[i] == '%') {
            nu_buf_putc(&b, s[i++]);
            continue;
        }
        nu_jv v;
        used_mapping = used_mapping || s[i] == '(';
        char flags[8] = {0};
        int nf = 0;
        int64_t width = 0, prec = -1;
        ok = next_arg(C, at, s, n, &i, args, list, &next, &v);
        while (ok && i < n && strchr("-+ #0", s[i]) && nf < 7) flags[nf++] = s[i++];
        ok = ok && read_number(C, at, s, n, &i, list, &next, &width);
        if (ok && i < n && s[i] == '.') {
            i++;
            ok = read_number(C, at, s, n, &i, list, &next, &prec);
        }
        while (ok && i < n && strchr("hlL", s[i])) i++;
        if (ok && i >= n) ok = nu_jfail(C, at, "incomplete format");
        if (ok) ok = percent_one(C, at, &b, v, flags, width, prec, s[i++]);
    }
    if (ok && !used_mapping && (list ? next < list->len : next == 0) && args.type != JV_DICT)
        ok = nu_jfail(C, at, "not all arguments converted during string formatting");
    if (!ok) {
        nu_buf_free(&b);
        return false;
    }
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

/* ------------------------------------------------------------------------ */
/* str.format                                                               */
/* ------------------------------------------------------------------------ */

typedef struct fmt_spec {
    uint32_t fill;
    char align; /* '<', '>', '^', '=' or 0 */
    char sign;  /* '+', '-', ' ' or 0 */
    bool alt;
    int64_t width, prec;
    char type;
} fmt_spec;

/* Parses [[fill]align][sign][#][0][width][.precision][type]. */
static bool parse_spec(nu_jctx *C, const jnode *at, const char *s, size_t n, fmt_spec *f) {
    memset(f, 0, sizeof *f);
    f->fill = ' ';
    f->prec = -1;
    size_t i = 0, j = 0;
    uint32_t first = n ? nu_utf8_next_escaped(s, n, &j) : 0;
    if (n > j && strchr("<>^=", s[j])) {
        f->fill = first;
        f->align = s[j];
        i = j + 1;
    } else if (n > 0 && strchr("<>^=", s[0])) {
        f->align = s[0];
        i = 1;
    }
    if (i < n && strchr("+- ", s[i])) f->sign = s[i++];
    if (i < n && s[i] == '#') f->alt = true, i++;
    if (i < n && s[i] == '0') {
        if (!f->align) f->fill = '0', f->align = '=';
        i++;
    }
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        f->width = f->width * 10 + (s[i++] - '0');
        if (f->width > MAX_WIDTH) return nu_jfail(C, at, "format width too large");
    }
    if (i < n && s[i] == '.') {
        f->prec = 0;
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            f->prec = f->prec * 10 + (s[i] - '0');
            if (f->prec > MAX_WIDTH) return nu_jfail(C, at, "format precision too large");
        }
    }
    if (i < n) f->type = s[i++];
    if (i != n) return nu_jfail(C, at, "invalid or unsupported format specifier '%.*s'", (int)n, s);
    return true;
}

/* Pads body (after an optional sign / prefix) to the spec's width. */
static void nu_spec_pad(nu_buf *b, const fmt_spec *f, const char *sign, const char *body, size_t n,
                        char dflt_align) {
    int64_t len = (int64_t)(strlen(sign) + nu_jinja_count_chars(body, n));
    int64_t padding = f->width > len ? f->width - len : 0;
    char align = f->align ? f->align : dflt_align;
    int64_t left = align == '>' || align == '=' ? padding : align == '^' ? padding / 2 : 0;
    int64_t right = padding - left;
    if (align == '=') nu_buf_puts(b, sign);
    for (int64_t i = 0; i < left; i++) nu_jinja_put_char(b, f->fill);
    if (align != '=') nu_buf_puts(b, sign);
    nu_buf_add(b, body, n);
    for (int64_t i = 0; i < right; i++) nu_jinja_put_char(b, f->fill);
}

/* The sign to print before a number's digits. */
static const char *nu_spec_sign(const fmt_spec *f, bool negative) {
    return negative ? "-" : f->sign == '+' ? "+" : f->sign == ' ' ? " " : "";
}

/* An int with type d, x, X, o or b (and '#' for the 0x / 0o / 0b prefix). */
static void format_int(nu_buf *b, const fmt_spec *f, int64_t i) {
    uint64_t mag = i < 0 ? 0 - (uint64_t)i : (uint64_t)i;
    int base = f->type == 'x' || f->type == 'X' ? 16 : f->type == 'o' ? 8 : f->type == 'b' ? 2 : 10;
    char digits[80], body[100];
    int k = 0;
    do {
        digits[k++] = "0123456789abcdef"[mag % (uint64_t)base];
        mag /= (uint64_t)base;
    } while (mag);
    size_t m = 0;
    if (f->alt && base != 10) {
        body[m++] = '0';
        body[m++] = base == 16 ? f->type : base == 8 ? 'o' : 'b';
    }
    while (k > 0) {
        char c = digits[--k];
        body[m++] = f->type == 'X' && c >= 'a' ? (char)(c - 32) : c;
    }
    nu_spec_pad(b, f, nu_spec_sign(f, i < 0), body, m, '>');
}

/* A number with type e, E, f, F, g, G or %, or none (repr without a
 * precision, like Python's format(x, '')). */
static void format_float(nu_buf *b, const fmt_spec *f, double d) {
    char tmp[800]; /* 309 integer digits and 300 decimals at most */
    nu_buf body = {0};
    if (f->type == 0 && f->prec < 0) {
        nu_jfloat_repr(&body, fabs(d));
    } else {
        char spec[8] = "%.*g";
        spec[3] = f->type == 0 ? 'g' : f->type == '%' ? 'f' : f->type;
        int prec = (int)(f->prec < 0 ? 6 : f->prec > 300 ? 300 : f->prec);
        snprintf(tmp, sizeof tmp, spec, prec, f->type == '%' ? fabs(d) * 100 : fabs(d));
        nu_buf_puts(&body, tmp);
        if (f->type == '%') nu_buf_putc(&body, '%');
    }
    nu_spec_pad(b, f, nu_spec_sign(f, signbit(d) && !isnan(d)), body.data ? body.data : "",
                body.len, '>');
    nu_buf_free(&body);
}

/* format(v, spec) for strings, ints, floats and (empty spec only) others. */
static bool format_value(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v, const char *s, size_t n) {
    if (n == 0) return nu_jv_print(C, at, b, v);
    fmt_spec f;
    if (!parse_spec(C, at, s, n, &f)) return false;
    if (v.type == JV_STR && (f.type == 0 || f.type == 's')) {
        nu_jstr *str = nu_jv_str(v);
        nu_spec_pad(b, &f, "", str->data, prefix_bytes(str->data, str->len, f.prec), '<');
        return true;
    }
    bool is_int = v.type == JV_INT || v.type == JV_BOOL;
    int64_t i = v.type == JV_INT ? v.u.i : v.type == JV_BOOL ? v.u.b : 0;
    if (is_int && (f.type == 0 || strchr("dxXob", f.type))) {
        format_int(b, &f, i);
        return true;
    }
    if ((is_int || v.type == JV_FLOAT) && (f.type == 0 || strchr("eEfFgG%", f.type))) {
        format_float(b, &f, v.type == JV_FLOAT ? v.u.f : (double)i);
        return true;
    }
    return nu_jfail(C, at, "unsupported format string passed to %s.__format__", nu_jv_type_name(v));
}

/* Looks up a replacement field's value: an index or name, then .attr and
 * [key] parts. */
static bool field_value(nu_jctx *C, const jnode *at, const char *s, size_t n, const nu_jargs *a,
                        size_t *auto_index, int *numbering, nu_jv *out) {
    size_t i = 0;
    while (i < n && s[i] != '.' && s[i] != '[') i++;
    nu_jv cur;
    if (i == 0 || (s[0] >= '0' && s[0] <= '9')) {
        int mode = i == 0 ? 1 : 2;
        if (*numbering && *numbering != mode)
            return nu_jfail(C, at, "cannot switch between automatic and manual field numbering");
        *numbering = mode;
        size_t idx = i == 0 ? (*auto_index)++ : (size_t)strtoul(s, NULL, 10);
        if (idx >= a->n_pos) return nu_jfail(C, at, "Replacement index %zu out of range", idx);
        cur = nu_jv_ref(a->pos[idx]);
    } else {
        size_t k = 0;
        while (k < a->n_kw && !(strlen(a->kw_names[k]) == i && !memcmp(a->kw_names[k], s, i))) k++;
        if (k == a->n_kw) return nu_jfail(C, at, "format key '%.*s' not found", (int)i, s);
        cur = nu_jv_ref(a->kw[k]);
    }
    while (i < n) {
        bool dot = s[i] == '.';
        size_t start = ++i;
        while (i < n && (dot ? (s[i] != '.' && s[i] != '[') : s[i] != ']')) i++;
        nu_jv key, next;
        bool digits = !dot && i > start;
        for (size_t k = start; k < i; k++) digits = digits && s[k] >= '0' && s[k] <= '9';
        bool ok = digits && i - start < 18 ? (key = nu_jv_int(strtoll(s + start, NULL, 10)), true)
                                           : nu_jv_new_str(C, at, s + start, i - start, &key);
        if (!dot) i++;
        ok = ok && nu_jv_getitem(C, at, cur, key, NULL, &next);
        nu_jv_unref(C, key);
        nu_jv_unref(C, cur);
        if (!ok) return false;
        cur = next;
    }
    *out = cur;
    return true;
}

/* One {field!conv:spec} replacement. */
static bool format_field(nu_jctx *C, const jnode *at, nu_buf *b, const char *s, size_t n,
                         const nu_jargs *a, size_t *auto_index, int *numbering) {
    size_t name_end = 0;
    while (name_end < n && s[name_end] != '!' && s[name_end] != ':') name_end++;
    size_t nu_spec_at = name_end;
    char conv = 0;
    if (nu_spec_at < n && s[nu_spec_at] == '!') {
        if (nu_spec_at + 1 >= n)
            return nu_jfail(C, at, "end of string while looking for conversion specifier");
        conv = s[nu_spec_at + 1];
        nu_spec_at += 2;
    }
    if (nu_spec_at < n && s[nu_spec_at] != ':')
        return nu_jfail(C, at, "expected ':' after conversion specifier");
    const char *spec = nu_spec_at < n ? s + nu_spec_at + 1 : "";
    size_t nu_spec_len = nu_spec_at < n ? n - nu_spec_at - 1 : 0;
    nu_jv v;
    if (!field_value(C, at, s, name_end, a, auto_index, numbering, &v)) return false;
    bool ok = true;
    if (conv == 'r' || conv == 'a' || conv == 's') {
        nu_buf t = {.limit = C->limits.max_output};
        ok = conv == 's' ? nu_jv_print(C, at, &t, v) : nu_jv_repr(C, at, &t, v);
        nu_jv str = nu_jv_undef();
        ok = ok && nu_jv_new_str_from_buf(C, at, &t, &str);
        if (!ok) nu_buf_free(&t);
        nu_jv_unref(C, v);
        v = str;
    } else if (conv) {
        ok = nu_jfail(C, at, "Unknown conversion specifier %c", conv);
    }
    ok = ok && format_value(C, at, b, v, spec, nu_spec_len);
    nu_jv_unref(C, v);
    return ok;
}

bool nu_jinja_str_format(nu_jctx *C, const jnode *at, nu_jv fmt, const nu_jargs *a, nu_jv *out) {
    const char *s = nu_jv_str(fmt)->data;
    size_t n = nu_jv_str(fmt)->len, auto_index = 0;
    int numbering = 0;
    nu_buf b = {.limit = C->limits.max_output};
    bool ok = true;
    for (size_t i = 0; i < n && ok;) {
        char c = s[i];
        if ((c == '{' || c == '}') && i + 1 < n && s[i + 1] == c) {
            nu_buf_putc(&b, c);
            i += 2;
        } else if (c == '}') {
            ok = nu_jfail(C, at, "Single '}' encountered in format string");
        } else if (c == '{') {
            size_t end = i + 1;
            while (end < n && s[end] != '}' && s[end] != '{') end++;
            if (end >= n || s[end] != '}')
                ok = nu_jfail(C, at,
                              end >= n ? "Single '{' encountered in format string"
                                       : "nested replacement fields are not supported");
            else
                ok = format_field(C, at, &b, s + i + 1, end - i - 1, a, &auto_index, &numbering);
            i = end + 1;
        } else {
            nu_buf_putc(&b, c);
            i++;
        }
    }
    if (!ok) {
        nu_buf_free(&b);
        return false;
    }
    return nu_jv_new_str_from_buf(C, at, &b, out);
}

/* ------------------------------------------------------------------------ */
/* strftime (C locale, UTC)                                                 */
/* ------------------------------------------------------------------------ */

static const char *const day_names[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                        "Thursday", "Friday", "Saturday"};
static const char *const month_names[] = {"January",   "February", "March",    "April",
                                          "May",       "June",     "July",     "August",
                                          "September", "October",  "November", "December"};

/* A number with glibc's padding flags: '-' none, '_' spaces, '0' zeros. */
static void put_num(nu_buf *b, long v, int width, char flag, char dflt_pad) {
    char pad = flag == '-' ? 0 : flag == '_' ? ' ' : flag == '0' ? '0' : dflt_pad;
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%ld", v < 0 ? -v : v);
    if (v < 0) nu_buf_putc(b, '-');
    for (int i = n; pad && i < width; i++) nu_buf_putc(b, pad);
    nu_buf_add(b, tmp, (size_t)n);
}

/* ISO 8601 week-based year and week number of tm. */
static void iso_week(const struct tm *tm, int *year, int *week) {
    int wday = (tm->tm_wday + 6) % 7; /* Monday = 0 */
    int y = tm->tm_year + 1900;
    int yday = tm->tm_yday;
    int w = (yday - wday + 10) / 7;
    if (w < 1) {
        y--;
        int prev_days = (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 366 : 365;
        w = (yday + prev_days - wday + 10) / 7;
    } else {
        int days = (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 366 : 365;
        if (yday - wday + 3 >= days) {
            w = 1;
            y++;
        }
    }
    *year = y;
    *week = w;
}

/* One conversion %c with flag; returns false for unknown ones. */
static bool strftime_one(nu_buf *b, const struct tm *tm, char c, char flag, time_t t) {
    int iy, iw;
    switch (c) {
    case 'a': nu_buf_add(b, day_names[tm->tm_wday], 3); return true;
    case 'A': nu_buf_puts(b, day_names[tm->tm_wday]); return true;
    case 'b':
    case 'h': nu_buf_add(b, month_names[tm->tm_mon], 3); return true;
    case 'B': nu_buf_puts(b, month_names[tm->tm_mon]); return true;
    case 'C': put_num(b, (tm->tm_year + 1900) / 100, 2, flag, '0'); return true;
    case 'd': put_num(b, tm->tm_mday, 2, flag, '0'); return true;
    case 'e': put_num(b, tm->tm_mday, 2, flag, ' '); return true;
    case 'H': put_num(b, tm->tm_hour, 2, flag, '0'); return true;
    case 'I': put_num(b, tm->tm_hour % 12 ? tm->tm_hour % 12 : 12, 2, flag, '0'); return true;
    case 'j': put_num(b, tm->tm_yday + 1, 3, flag, '0'); return true;
    case 'm': put_num(b, tm->tm_mon + 1, 2, flag, '0'); return true;
    case 'M': put_num(b, tm->tm_min, 2, flag, '0'); return true;
    case 'n': nu_buf_putc(b, '\n'); return true;
    case 't': nu_buf_putc(b, '\t'); return true;
    case 'p': nu_buf_puts(b, tm->tm_hour < 12 ? "AM" : "PM"); return true;
    case 'S': put_num(b, tm->tm_sec, 2, flag, '0'); return true;
    case 's': put_num(b, (long)t, 1, flag, '0'); return true;
    case 'u': put_num(b, tm->tm_wday ? tm->tm_wday : 7, 1, flag, '0'); return true;
    case 'w': put_num(b, tm->tm_wday, 1, flag, '0'); return true;
    case 'y': put_num(b, (tm->tm_year + 1900) % 100, 2, flag, '0'); return true;
    case 'Y': put_num(b, tm->tm_year + 1900, 1, flag, '0'); return true;
    case 'G':
        iso_week(tm, &iy, &iw);
        put_num(b, iy, 1, flag, '0');
        return true;
    case 'g':
        iso_week(tm, &iy, &iw);
        put_num(b, iy % 100, 2, flag, '0');
        return true;
    case 'V':
        iso_week(tm, &iy, &iw);
        put_num(b, iw, 2, flag, '0');
        return true;
    case 'U': put_num(b, (tm->tm_yday + 7 - tm->tm_wday) / 7, 2, flag, '0'); return true;
    case 'W': put_num(b, (tm->tm_yday + 7 - (tm->tm_wday + 6) % 7) / 7, 2, flag, '0'); return true;
    case 'Z': nu_buf_puts(b, "UTC"); return true;
    case 'z': nu_buf_puts(b, "+0000"); return true;
    case '%': nu_buf_putc(b, '%'); return true;
    case 'D': nu_jinja_strftime(b, "%m/%d/%y", 8, t); return true;
    case 'F': nu_jinja_strftime(b, "%Y-%m-%d", 8, t); return true;
    case 'T': nu_jinja_strftime(b, "%H:%M:%S", 8, t); return true;
    case 'R': nu_jinja_strftime(b, "%H:%M", 5, t); return true;
    case 'r': nu_jinja_strftime(b, "%I:%M:%S %p", 11, t); return true;
    case 'c': nu_jinja_strftime(b, "%a %b %e %H:%M:%S %Y", 20, t); return true;
    case 'x': nu_jinja_strftime(b, "%m/%d/%y", 8, t); return true;
    case 'X': nu_jinja_strftime(b, "%H:%M:%S", 8, t); return true;
    default: return false;
    }
}

size_t nu_jinja_strftime(nu_buf *b, const char *fmt, size_t n, time_t t) {
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t before = b->len;
    for (size_t i = 0; i < n; i++) {
        if (fmt[i] != '%' || i + 1 >= n) {
            nu_buf_putc(b, fmt[i]);
            continue;
        }
        size_t j = i + 1;
        char flag = 0;
        if (strchr("-_0^#", fmt[j]) && j + 1 < n) flag = fmt[j++];
        if (!strftime_one(b, &tm, fmt[j], flag, t)) nu_buf_add(b, fmt + i, j + 1 - i);
        i = j;
    }
    return b->len - before;
}
