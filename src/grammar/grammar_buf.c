/* grammar_buf.c - the growable text buffer the GBNF writers use, and the
 * escaping rules for writing literals and class members. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

/* Quotes, backslashes and control bytes are escaped; other bytes (UTF-8
 * included) are written as they are. */
void nu_gram_buf_literal(nu_buf *b, const char *s, size_t n) {
    nu_buf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            nu_buf_printf(b, "\\%c", c);
        else if (c == '\n')
            nu_buf_puts(b, "\\n");
        else if (c == '\r')
            nu_buf_puts(b, "\\r");
        else if (c == '\t')
            nu_buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7F)
            nu_buf_printf(b, "\\x%02X", c);
        else
            nu_buf_add(b, (const char *)&c, 1);
    }
    nu_buf_add(b, "\"", 1);
}

/* Printable ASCII as itself (the class syntax characters escaped); anything
 * else as \xHH, \uHHHH or \UHHHHHHHH so the text stays plain ASCII. */
void nu_gram_buf_class_char(nu_buf *b, uint32_t cp) {
    if (cp == ']' || cp == '[' || cp == '\\' || cp == '^' || cp == '-' || cp == '"')
        nu_buf_printf(b, "\\%c", (char)cp);
    else if (cp >= 0x20 && cp < 0x7F)
        nu_buf_printf(b, "%c", (char)cp);
    else if (cp < 0x100)
        nu_buf_printf(b, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000)
        nu_buf_printf(b, "\\u%04X", (unsigned)cp);
    else
        nu_buf_printf(b, "\\U%08X", (unsigned)cp);
}

char *nu_gram_buf_take(nu_buf *b) {
    if (b->failed) {
        nu_buf_free(b);
        return NULL;
    }
    if (!b->data) {
        if (!nu_buf_reserve(b, 0)) return NULL;
        b->data[0] = 0;
    }
    char *p = b->data;
    nu_buf_init(b);
    return p;
}

void nu_gram_one_line(nu_error *err) {
    if (!err) return;
    for (char *p = err->message; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7F) *p = '?';
}
