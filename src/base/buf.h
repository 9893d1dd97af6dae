/* buf.h - the one growable byte buffer of nucleus.
 *
 * A nu_buf holds bytes that are always NUL-terminated once anything was
 * appended (data stays NULL until then). An allocation failure, or an append
 * that would pass `limit` (0: no limit), sets `failed` and makes every later
 * append a no-op, so a writer appends freely and checks once at the end.
 * Start from a zeroed struct (`nu_buf b = {0};`) or nu_buf_init. */
#ifndef NU_BUF_H
#define NU_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct nu_buf {
    char *data;   /* malloc'd, NUL-terminated; NULL before the first append */
    size_t len;   /* bytes held, not counting the NUL */
    size_t cap;   /* bytes allocated */
    size_t limit; /* most bytes it may hold (0: no limit) */
    bool failed;  /* an allocation failed or the limit was reached */
} nu_buf;

void nu_buf_init(nu_buf *b);
/* Frees the bytes and zeroes the buffer (the limit is kept). */
void nu_buf_free(nu_buf *b);
/* Empties the buffer, keeping its memory, its limit and its failed flag. */
void nu_buf_clear(nu_buf *b);
/* Makes room for n more bytes (and the NUL); false, with `failed`, if not. */
bool nu_buf_reserve(nu_buf *b, size_t n);
void nu_buf_add(nu_buf *b, const void *bytes, size_t n);
void nu_buf_puts(nu_buf *b, const char *s);
void nu_buf_putc(nu_buf *b, char c);
/* Appends printf-style text of any length. */
void nu_buf_printf(nu_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends the UTF-8 form of code point cp; a value that is not a Unicode
 * scalar value (a surrogate, past U+10FFFF) sets `failed`. */
void nu_buf_put_utf8(nu_buf *b, uint32_t cp);
/* Hands the bytes over to the caller (free() them): "" when nothing was
 * appended, NULL (and the bytes freed) when the buffer failed. The buffer is
 * left empty either way. */
char *nu_buf_take(nu_buf *b);

#endif
