/* text_check.c - UTF-8 repair for request bodies and token text (the decoder is
 * base's utf8.h). */
#include "text_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *utf8_sanitize(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    char *out = malloc(3 * n + 1); /* each byte grows to at most 3 (U+FFFD) */
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t len = nu_utf8_decode(s + i, n - i, NULL);
        if (len == 0) {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        } else {
            if (!(len == 1 && u[i] == 0)) memcpy(out + k, s + i, len), k += len;
            i += len;
        }
    }
    out[k] = 0;
    return out;
}

char *utf8_json_string(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    char *out = malloc(6 * n + 3); /* each byte grows to at most 6 (\u001f) */
    if (!out) return NULL;
    size_t k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n;) {
        size_t len = nu_utf8_decode(s + i, n - i, NULL);
        unsigned char c = u[i];
        const char *esc = NULL;
        if (len == 0) {
            memcpy(out + k, "\xEF\xBF\xBD", 3); /* U+FFFD for a byte that is not UTF-8 */
            k += 3;
            i++;
            continue;
        }
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default: break;
        }
        if (esc) {
            memcpy(out + k, esc, 2);
            k += 2;
        } else if (c < 0x20) {
            k += (size_t)sprintf(out + k, "\\u%04x", c); /* NUL included: \u0000 */
        } else {
            memcpy(out + k, s + i, len);
            k += len;
        }
        i += len;
    }
    out[k++] = '"';
    out[k] = 0;
    return out;
}
