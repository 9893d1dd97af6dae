/* buf.c - the growable byte buffer (see buf.h). */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

enum { BUF_FIRST_CAP = 64 };

void nu_buf_init(nu_buf *b) {
    memset(b, 0, sizeof *b);
}

void nu_buf_free(nu_buf *b) {
    size_t limit = b->limit;
    free(b->data);
    nu_buf_init(b);
    b->limit = limit;
}

void nu_buf_clear(nu_buf *b) {
    b->len = 0;
    if (b->data) b->data[0] = 0;
}

bool nu_buf_reserve(nu_buf *b, size_t n) {
    if (b->failed) return false;
    if (n > SIZE_MAX / 2 - b->len || (b->limit && b->len + n > b->limit)) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + n + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : BUF_FIRST_CAP;
    while (cap < need) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void nu_buf_add(nu_buf *b, const void *bytes, size_t n) {
    if (!nu_buf_reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = 0;
}

void nu_buf_puts(nu_buf *b, const char *s) {
    nu_buf_add(b, s, strlen(s));
}

void nu_buf_putc(nu_buf *b, char c) {
    nu_buf_add(b, &c, 1);
}

void nu_buf_printf(nu_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if (!nu_buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void nu_buf_put_utf8(nu_buf *b, uint32_t cp) {
    char u[4];
    size_t n = nu_utf8_encode(cp, u);
    if (n == 0)
        b->failed = true;
    else
        nu_buf_add(b, u, n);
}

char *nu_buf_take(nu_buf *b) {
    char *out = b->failed ? NULL : b->data ? b->data : calloc(1, 1);
    if (b->failed) free(b->data);
    size_t limit = b->limit;
    nu_buf_init(b);
    b->limit = limit;
    return out;
}
