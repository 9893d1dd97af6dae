/* utf8.c - UTF-8 validation and repair for request bodies and token text. */
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t utf8_char_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len = c >= 0xC2 && c <= 0xDF   ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    /* the second byte's range rules out overlong forms, surrogates and > U+10FFFF */
    if (c == 0xE0 && s[1] < 0xA0) return 0;
    if (c == 0xED && s[1] > 0x9F) return 0;
    if (c == 0xF0 && s[1] < 0x90) return 0;
    if (c == 0xF4 && s[1] > 0x8F) return 0;
    return len;
}

bool utf8_valid(const char *s, size_t n, size_t *bad) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_char_len(u + i, n - i);
        if (len == 0) {
            if (bad) *bad = i;
            return false;
        }
        i += len;
    }
    return true;
}

char *utf8_sanitize(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    char *out = malloc(3 * n + 1); /* each byte grows to at most 3 (U+FFFD) */
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_char_len(u + i, n - i);
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
    if (!utf8_valid(body, n, &bad)) {
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
