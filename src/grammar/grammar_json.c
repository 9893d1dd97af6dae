/* grammar_json.c - GBNF for the pieces of JSON: any value, strings,
 * numbers, integer and decimal ranges, and the string formats json_schema.c
 * supports.
 *
 * Layout: whitespace goes after '{', '[', ',' and ':' and after every key
 * and value inside a container, nowhere else, so each place JSON allows
 * whitespace has exactly one ws (the rule is empty when compact).
 *
 * Numbers are kept to what a double holds exactly enough for validators to
 * agree with the grammar:
 *   - unbounded numbers: at most 15 integer digits, 15 fraction digits and a
 *     two-digit exponent (always finite);
 *   - integers with bounds: exactly the integers in [min, max], the open
 *     sides capped at +-(10^15 - 1);
 *   - numbers with bounds: plain decimals (no exponent) with at most F
 *     fraction digits (F = 6, or more if a bound has more, up to 15) and
 *     15 - F integer digits; open sides are capped there. Every such
 *     decimal has at most 15 significant digits, so comparing it with the
 *     bound as decimals (the grammar) and as doubles (a validator) agree,
 *     exclusive bounds included. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar_json.h"

/* ------------------------------------------------------------------------ */
/* Fixed rules                                                              */
/* ------------------------------------------------------------------------ */

typedef struct prim_def {
    uint32_t bit;
    uint32_t needs; /* other rules its definition uses */
    const char *text;
} prim_def;

/* The definitions; "%W" stands for the whitespace reference. */
static const prim_def prims[] = {
    {JP_VALUE, JP_OBJECT | JP_ARRAY | JP_STRING | JP_NUMBER,
     "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"},
    {JP_OBJECT, JP_STRING | JP_VALUE,
     "object ::= \"{\"%W (string%W \":\"%W value%W (\",\"%W string%W \":\"%W value%W)*)? "
     "\"}\"\n"},
    {JP_ARRAY, JP_VALUE, "array ::= \"[\"%W (value%W (\",\"%W value%W)*)? \"]\"\n"},
    {JP_STRING, JP_CHAR, "string ::= \"\\\"\" char* \"\\\"\"\n"},
    {JP_CHAR, JP_HEX4, "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" hex4)\n"},
    {JP_HEX4, 0, "hex4 ::= [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"},
    {JP_NUMBER, JP_INTEGER, "number ::= integer (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n"},
    {JP_INTEGER, 0, "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,14})\n"},
    {JP_BOOLEAN, 0, "boolean ::= \"true\" | \"false\"\n"},
    {JP_NULL, 0, "null ::= \"null\"\n"},
    {JP_DATE, 0,
     "date ::= date-year \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" date-d31 | (\"0\" [469] | "
     "\"11\") \"-\" date-d30 | \"02-\" date-d28) | date-leap \"-02-29\"\n"
     "date-year ::= [0-9]{4}\n"
     "date-d31 ::= \"0\" [1-9] | [12] [0-9] | \"3\" [01]\n"
     "date-d30 ::= \"0\" [1-9] | [12] [0-9] | \"30\"\n"
     "date-d28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
     "date-leap ::= [0-9]{2} (\"0\" [48] | [2468] [048] | [13579] [26]) | (\"0\" [048] | "
     "[2468] [048] | [13579] [26]) \"00\"\n"},
    {JP_TIME, 0,
     "time ::= time-hour \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | "
     "[-+] time-hour \":\" [0-5] [0-9])\n"
     "time-hour ::= [01] [0-9] | \"2\" [0-3]\n"},
    {JP_DATETIME, JP_DATE | JP_TIME, "date-time ::= date \"T\" time\n"},
    {JP_UUID, 0,
     "uuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
     "[0-9a-f]{12}\n"},
    {JP_EMAIL, 0,
     "email ::= email-atom (\".\" email-atom)* \"@\" email-label (\".\" email-label)+\n"
     "email-atom ::= [a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+\n"
     "email-label ::= [a-zA-Z0-9] ([a-zA-Z0-9-]* [a-zA-Z0-9])?\n"},
};

uint32_t nu_gram_json_need(uint32_t have, uint32_t what) {
    uint32_t before;
    have |= what;
    do {
        before = have;
        for (size_t i = 0; i < sizeof prims / sizeof *prims; i++)
            if (have & prims[i].bit) have |= prims[i].needs;
    } while (have != before);
    return have;
}

const char *nu_gram_json_ws(int32_t max_ws) {
    return max_ws > 0 ? " ws" : "";
}

/* Writes a definition, replacing %W by the whitespace reference. */
static void write_def(nu_buf *b, const char *text, const char *ws) {
    for (const char *p = text; *p; p++) {
        if (p[0] == '%' && p[1] == 'W') {
            nu_buf_puts(b, ws);
            p++;
        } else {
            nu_buf_add(b, p, 1);
        }
    }
}

void nu_gram_json_write_prims(nu_buf *b, uint32_t set, int32_t max_ws) {
    set = nu_gram_json_need(set, 0);
    for (size_t i = 0; i < sizeof prims / sizeof *prims; i++)
        if (set & prims[i].bit) write_def(b, prims[i].text, nu_gram_json_ws(max_ws));
    if (max_ws > 0) nu_buf_printf(b, "ws ::= [ \\t\\n]{0,%d}\n", max_ws);
}

/* JSON-encodes s as a string ("..." with escapes) into out. */
void nu_gram_json_encode_string(nu_buf *out, const char *s) {
    nu_buf_add(out, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            nu_buf_printf(out, "\\%c", *p);
        else if (*p == '\n')
            nu_buf_puts(out, "\\n");
        else if (*p == '\r')
            nu_buf_puts(out, "\\r");
        else if (*p == '\t')
            nu_buf_puts(out, "\\t");
        else if (*p < 0x20)
            nu_buf_printf(out, "\\u%04x", *p);
        else
            nu_buf_add(out, (const char *)p, 1);
    }
    nu_buf_add(out, "\"", 1);
}

void nu_gram_json_string_literal(nu_buf *b, const char *s) {
    nu_buf enc;
    nu_buf_init(&enc);
    nu_gram_json_encode_string(&enc, s);
    if (enc.failed)
        b->failed = true;
    else
        nu_gram_buf_literal(b, enc.data, enc.len);
    nu_buf_free(&enc);
}

/* ------------------------------------------------------------------------ */
/* Integer ranges                                                           */
/* ------------------------------------------------------------------------ */

/* Digit strings of equal length n from x to y (x <= y): split on the first
 * digit into the lower edge, a free middle and the upper edge. */
static void same_length(nu_buf *b, const char *x, const char *y, size_t n) {
    if (n == 0) {
        nu_buf_puts(b, "\"\"");
        return;
    }
    if (strncmp(x, y, n) == 0) {
        nu_gram_buf_literal(b, x, n);
        return;
    }
    if (x[0] == y[0]) {
        nu_buf_printf(b, "\"%c\" ", x[0]);
        same_length(b, x + 1, y + 1, n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    bool x_low = strspn(x + 1, "0") >= n - 1, y_high = strspn(y + 1, "9") >= n - 1;
    char lo = x_low ? x[0] : (char)(x[0] + 1), hi = y_high ? y[0] : (char)(y[0] - 1);
    bool first = true;
    nu_buf_puts(b, "(");
    if (!x_low) {
        nu_buf_printf(b, "\"%c\" ", x[0]);
        same_length(b, x + 1, nines, n - 1);
        first = false;
    }
    if (lo <= hi) {
        nu_buf_puts(b, first ? "" : " | ");
        if (lo == hi)
            nu_buf_printf(b, "\"%c\"", lo);
        else
            nu_buf_printf(b, "[%c-%c]", lo, hi);
        if (n > 1) nu_buf_printf(b, " [0-9]{%zu}", n - 1);
        first = false;
    }
    if (!y_high) {
        nu_buf_puts(b, first ? "" : " | ");
        nu_buf_printf(b, "\"%c\" ", y[0]);
        same_length(b, zeros, y + 1, n - 1);
    }
    nu_buf_puts(b, ")");
}

static int64_t pow10i(int k) {
    int64_t p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

static int n_digits(int64_t v) {
    int n = 1;
    while (v >= 10) v /= 10, n++;
    return n;
}

/* Non-negative integers a..b in canonical form (no leading zeros). */
static void positive_range(nu_buf *b, int64_t a, int64_t c) {
    nu_buf_puts(b, "(");
    for (int len = n_digits(a); len <= n_digits(c); len++) {
        int64_t lo = len == 1 ? 0 : pow10i(len - 1), hi = pow10i(len) - 1;
        if (lo < a) lo = a;
        if (hi > c) hi = c;
        char x[24], y[24];
        snprintf(x, sizeof x, "%lld", (long long)lo);
        snprintf(y, sizeof y, "%lld", (long long)hi);
        nu_buf_puts(b, len > n_digits(a) ? " | " : "");
        same_length(b, x, y, (size_t)len);
    }
    nu_buf_puts(b, ")");
}

void nu_gram_json_int_range(nu_buf *b, int64_t lo, int64_t hi) {
    if (lo >= 0) {
        positive_range(b, lo, hi);
    } else if (hi < 0) {
        nu_buf_puts(b, "\"-\" ");
        positive_range(b, -hi, -lo);
    } else {
        nu_buf_puts(b, "(\"-\" ");
        positive_range(b, 1, -lo);
        nu_buf_puts(b, " | ");
        positive_range(b, 0, hi);
        nu_buf_puts(b, ")");
    }
}

/* ------------------------------------------------------------------------ */
/* Decimal ranges                                                           */
/* ------------------------------------------------------------------------ */

/* A decimal: sign, integer part, fraction digits without trailing zeros. */
typedef struct dec {
    bool neg;
    int64_t ip;
    char frac[20];
} dec;

static bool dec_is_zero(const dec *d) {
    return d->ip == 0 && d->frac[0] == 0;
}

/* Compares magnitudes. */
static int mag_cmp(const dec *a, const dec *b) {
    if (a->ip != b->ip) return a->ip < b->ip ? -1 : 1;
    int c = strcmp(a->frac, b->frac);
    return (c > 0) - (c < 0);
}

/* Compares signed values (a negative zero equals zero). */
static int dec_cmp(const dec *a, const dec *b) {
    bool an = a->neg && !dec_is_zero(a), bn = b->neg && !dec_is_zero(b);
    if (an != bn) return an ? -1 : 1;
    return an ? -mag_cmp(a, b) : mag_cmp(a, b);
}

/* The shortest decimal that reads back as v; false if it needs more than
 * 15 integer digits or 19 fraction digits. */
static bool dec_from_double(double v, dec *d) {
    char buf[40];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    memset(d, 0, sizeof *d);
    d->neg = buf[0] == '-';
    char digits[20];
    int n = 0;
    const char *s = buf + d->neg;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') digits[n++] = *s;
    int exp = atoi(s + 1); /* value = digits[0].digits[1..] x 10^exp */
    if (exp >= 15 || exp < -19 + n) return false;
    for (int i = 0; i <= exp; i++) d->ip = d->ip * 10 + (i < n ? digits[i] - '0' : 0);
    int f = 0;
    for (int i = exp < 0 ? exp + 1 : 0; i < 0; i++) d->frac[f++] = '0';
    for (int i = exp + 1 > 0 ? exp + 1 : 0; i < n; i++) d->frac[f++] = digits[i];
    while (f > 0 && d->frac[f - 1] == '0') f--;
    d->frac[f] = 0;
    return true;
}

/* Writes the alternatives for non-empty digit strings of length 1..n whose
 * value as 0.D lies between 0.lo and 0.hi (NULL: that side is open; the
 * flags say whether the bound itself is allowed). False, writing nothing,
 * if there are none. */
static bool frac_digits(nu_buf *b, const char *lo, bool li, const char *hi, bool hc, int n);

/* Does zero satisfy the bounds? */
static bool zero_ok(const char *lo, bool li, const char *hi, bool hc) {
    return (!lo || (!lo[0] && li)) && (!hi || hi[0] || hc);
}

/* The continuation after a fixed digit: any digits (0..n) within the rest
 * of the bounds. */
static bool frac_rest(nu_buf *b, const char *lo, bool li, const char *hi, bool hc, int n) {
    if (lo && !lo[0] && li) lo = NULL;
    bool empty = zero_ok(lo, li, hi, hc);
    nu_buf sub;
    nu_buf_init(&sub);
    bool more = n > 0 && frac_digits(&sub, lo, li, hi, hc, n);
    if (more) nu_buf_printf(b, " (%s)%s", sub.data, empty ? "?" : "");
    if (sub.failed) b->failed = true;
    nu_buf_free(&sub);
    return more || empty;
}

static bool frac_digits(nu_buf *b, const char *lo, bool li, const char *hi, bool hc, int n) {
    int l0 = lo ? (lo[0] ? lo[0] - '0' : 0) : -1, h0 = hi ? (hi[0] ? hi[0] - '0' : 0) : 10;
    const char *lr = lo && lo[0] ? lo + 1 : "", *hr = hi && hi[0] ? hi + 1 : "";
    bool any = false;
    if (l0 + 1 <= h0 - 1) { /* free digits: any continuation */
        int a = l0 + 1, z = h0 - 1 > 9 ? 9 : h0 - 1;
        if (a == z)
            nu_buf_printf(b, "\"%d\"", a);
        else
            nu_buf_printf(b, "[%d-%d]", a, z);
        if (n > 1) nu_buf_printf(b, " [0-9]{0,%d}", n - 1);
        any = true;
    }
    for (int d = 0; d <= 9; d++) {
        bool lt = d == l0, ht = d == h0;
        if (!lt && !ht) continue;
        if ((lo && d < l0) || (hi && d > h0)) continue;
        nu_buf alt;
        nu_buf_init(&alt);
        nu_buf_printf(&alt, "\"%d\"", d);
        bool ok = frac_rest(&alt, lt ? lr : NULL, li, ht ? hr : NULL, hc, n - 1);
        if (ok) {
            nu_buf_puts(b, any ? " | " : "");
            nu_buf_add(b, alt.data, alt.len);
            any = true;
        }
        if (alt.failed) b->failed = true;
        nu_buf_free(&alt);
    }
    return any;
}

/* The optional fraction part ("" or "." digits) within the bounds; false if
 * no fraction (not even none) fits. */
static bool fraction(nu_buf *b, const char *lo, bool li, const char *hi, bool hc, int n) {
    if (lo && !lo[0] && li) lo = NULL;
    bool empty = zero_ok(lo, li, hi, hc);
    nu_buf sub;
    nu_buf_init(&sub);
    bool more = n > 0 && frac_digits(&sub, lo, li, hi, hc, n);
    if (more) nu_buf_printf(b, " (\".\" (%s))%s", sub.data, empty ? "?" : "");
    if (sub.failed) b->failed = true;
    nu_buf_free(&sub);
    return more || empty;
}

/* Magnitudes from a to z (a <= z): the integer part of a with a fraction at
 * least a's, the integers strictly between with any fraction, and the
 * integer part of z with a fraction at most z's. */
static bool magnitude_range(nu_buf *b, const dec *a, bool ai, const dec *z, bool zi, int n) {
    nu_buf alts;
    nu_buf_init(&alts);
    bool any = false;
    for (int part = 0; part < 3; part++) {
        nu_buf one;
        nu_buf_init(&one);
        bool ok;
        if (a->ip == z->ip) {
            if (part > 0) break;
            nu_buf_printf(&one, "\"%lld\"", (long long)a->ip);
            ok = fraction(&one, a->frac, ai, z->frac, zi, n);
        } else if (part == 0) {
            nu_buf_printf(&one, "\"%lld\"", (long long)a->ip);
            ok = fraction(&one, a->frac, ai, NULL, false, n);
        } else if (part == 1) {
            ok = a->ip + 1 <= z->ip - 1;
            if (ok) {
                positive_range(&one, a->ip + 1, z->ip - 1);
                fraction(&one, NULL, true, NULL, false, n);
            }
        } else {
            nu_buf_printf(&one, "\"%lld\"", (long long)z->ip);
            ok = fraction(&one, "", true, z->frac, zi, n);
        }
        if (ok) {
            nu_buf_printf(&alts, "%s(%s)", any ? " | " : "", one.data ? one.data : "");
            any = true;
        }
        if (one.failed) alts.failed = true;
        nu_buf_free(&one);
    }
    if (any) nu_buf_printf(b, "(%s)", alts.data);
    if (alts.failed) b->failed = true;
    nu_buf_free(&alts);
    return any;
}

nu_status nu_gram_json_number_range(nu_buf *b, const nu_gram_json_bounds *bd, nu_error *err) {
    dec lo = {0}, hi = {0};
    bool li = !bd->lo_excl, hc = !bd->hi_excl;
    int f = 6;
    if ((bd->has_lo && !dec_from_double(bd->lo, &lo)) ||
        (bd->has_hi && !dec_from_double(bd->hi, &hi)))
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "number bounds beyond 15 integer or fraction digits are not supported");
    if (bd->has_lo && (int)strlen(lo.frac) > f) f = (int)strlen(lo.frac);
    if (bd->has_hi && (int)strlen(hi.frac) > f) f = (int)strlen(hi.frac);
    if (f > 15)
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "number bounds with more than 15 fraction digits are not supported");
    dec cap = {false, pow10i(15 - f) - 1, ""};
    memset(cap.frac, '9', (size_t)f);
    cap.frac[f] = 0;
    dec neg_cap = cap;
    neg_cap.neg = true;
    if ((bd->has_lo && dec_cmp(&lo, &cap) > 0) || (bd->has_hi && dec_cmp(&hi, &neg_cap) < 0))
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "number bounds beyond %d integer digits (with %d "
                       "fraction digits) are not supported",
                       15 - f, f);
    if (!bd->has_lo || dec_cmp(&lo, &neg_cap) < 0) lo = neg_cap, li = true;
    if (!bd->has_hi || dec_cmp(&hi, &cap) > 0) hi = cap, hc = true;
    int c = dec_cmp(&lo, &hi);
    if (c > 0 || (c == 0 && !(li && hc)))
        return nu_fail(err, NU_ERR_INVALID_ARG, "no number satisfies the bounds");
    dec zero = {0};
    bool ok;
    if (dec_cmp(&lo, &zero) >= 0) {
        ok = magnitude_range(b, &lo, li, &hi, hc, f);
    } else if (dec_cmp(&hi, &zero) <= 0) {
        nu_buf_puts(b, "\"-\" ");
        ok = magnitude_range(b, &hi, hc, &lo, li, f);
    } else {
        nu_buf_puts(b, "(\"-\" ");
        ok = magnitude_range(b, &zero, false, &lo, li, f);
        nu_buf_puts(b, " | ");
        ok = magnitude_range(b, &zero, true, &hi, hc, f) && ok;
        nu_buf_puts(b, ")");
    }
    if (!ok) return nu_fail(err, NU_ERR_INVALID_ARG, "no number satisfies the bounds");
    return NU_OK;
}

nu_status nu_gram_json_integer_range(nu_buf *b, const nu_gram_json_bounds *bd, nu_error *err) {
    const double cap = 999999999999999.0; /* 10^15 - 1 */
    double lo = -cap, hi = cap;
    if (bd->has_lo) {
        double v = bd->lo_excl ? floor(bd->lo) + 1 : ceil(bd->lo);
        if (v > lo) lo = v;
    }
    if (bd->has_hi) {
        double v = bd->hi_excl ? ceil(bd->hi) - 1 : floor(bd->hi);
        if (v < hi) hi = v;
    }
    if (lo > cap || hi < -cap)
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "integer bounds beyond 15 digits are not supported");
    if (lo > hi) return nu_fail(err, NU_ERR_INVALID_ARG, "no integer satisfies the bounds");
    nu_gram_json_int_range(b, (int64_t)lo, (int64_t)hi);
    return NU_OK;
}
