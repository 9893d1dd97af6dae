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

/* Whether the 4 bytes at p are the hex digits of zero ("0000"). */
static bool is_hex_zero(const char *p, size_t left) {
    return left >= 4 && p[0] == '0' && p[1] == '0' && p[2] == '0' && p[3] == '0';
}

bool json_body_check(const char *body, size_t n, char *msg, size_t cap) {
    size_t bad;
    if (!nu_utf8_valid(body, n, &bad)) {
        snprintf(msg, cap, "the request body is not valid UTF-8 (byte %zu)", bad);
        return false;
    }
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        char c = body[i];
        if (!in_string) {
            in_string = c == '"';
        } else if (c == '"') {
            in_string = false;
        } else if (c == '\\' && i + 1 < n) {
            if (body[i + 1] == 'u' && is_hex_zero(body + i + 2, n - i - 2)) {
                snprintf(msg, cap, "NUL characters (\\u0000) are not allowed in strings");
                return false;
            }
            i++; /* skip the escaped character */
        }
    }
    return true;
}
