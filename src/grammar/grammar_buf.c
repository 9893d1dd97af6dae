/* grammar_buf.c - the growable text buffer the GBNF writers use, and the
 * escaping rules for writing literals and class members. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

void nu_gram_buf_init(nu_gram_buf *b) {
    memset(b, 0, sizeof *b);
}

void nu_gram_buf_free(nu_gram_buf *b) {
    free(b->data);
    nu_gram_buf_init(b);
}

/* Makes room for n more bytes plus the NUL; false (and `failed`) if not. */
static bool reserve(nu_gram_buf *b, size_t n) {
    if (b->failed) return false;
    if (b->len + n + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void nu_gram_buf_add(nu_gram_buf *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void nu_gram_buf_puts(nu_gram_buf *b, const char *s) {
    nu_gram_buf_add(b, s, strlen(s));
}

void nu_gram_buf_printf(nu_gram_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Quotes, backslashes and control bytes are escaped; other bytes (UTF-8
 * included) are written as they are. */
void nu_gram_buf_literal(nu_gram_buf *b, const char *s, size_t n) {
    nu_gram_buf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            nu_gram_buf_printf(b, "\\%c", c);
        else if (c == '\n')
            nu_gram_buf_puts(b, "\\n");
        else if (c == '\r')
            nu_gram_buf_puts(b, "\\r");
        else if (c == '\t')
            nu_gram_buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7F)
            nu_gram_buf_printf(b, "\\x%02X", c);
        else
            nu_gram_buf_add(b, (const char *)&c, 1);
    }
    nu_gram_buf_add(b, "\"", 1);
}

/* Printable ASCII as itself (the class syntax characters escaped); anything
 * else as \xHH, \uHHHH or \UHHHHHHHH so the text stays plain ASCII. */
void nu_gram_buf_class_char(nu_gram_buf *b, uint32_t cp) {
    if (cp == ']' || cp == '[' || cp == '\\' || cp == '^' || cp == '-' || cp == '"')
        nu_gram_buf_printf(b, "\\%c", (char)cp);
    else if (cp >= 0x20 && cp < 0x7F)
        nu_gram_buf_printf(b, "%c", (char)cp);
    else if (cp < 0x100)
        nu_gram_buf_printf(b, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000)
        nu_gram_buf_printf(b, "\\u%04X", (unsigned)cp);
    else
        nu_gram_buf_printf(b, "\\U%08X", (unsigned)cp);
}

char *nu_gram_buf_take(nu_gram_buf *b) {
    if (b->failed) {
        nu_gram_buf_free(b);
        return NULL;
    }
    if (!b->data) {
        if (!reserve(b, 0)) return NULL;
        b->data[0] = 0;
    }
    char *p = b->data;
    nu_gram_buf_init(b);
    return p;
}

void nu_gram_one_line(nu_error *err) {
    if (!err) return;
    for (char *p = err->message; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7F) *p = '?';
}

size_t nu_gram_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned char b = u[0];
    size_t k = b < 0x80                 ? 1
               : b >= 0xC2 && b <= 0xDF ? 2
               : b >= 0xE0 && b <= 0xEF ? 3
               : b >= 0xF0 && b <= 0xF4 ? 4
                                        : 0;
    if (k == 0 || k > n) return 0;
    uint32_t v = k == 1 ? b : b & (0x7Fu >> k);
    for (size_t i = 1; i < k; i++) {
        if ((u[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (u[i] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_cp[k] || v > GRAM_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return k;
}

bool nu_gram_utf8_valid(const char *s, size_t n, size_t *bad) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = nu_gram_utf8_decode(s + i, n - i, &cp);
        if (k == 0) {
            if (bad) *bad = i;
            return false;
        }
        i += k;
    }
    return true;
}
