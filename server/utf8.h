/* utf8.h - checking and repairing UTF-8 text for the server: request bodies
 * must be valid UTF-8 JSON, and token pieces that end inside a character
 * must not make the responses invalid. */
#ifndef NU_SRV_UTF8_H
#define NU_SRV_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length (1..4) of the valid UTF-8 character at s (n bytes available), or 0
 * when the bytes there are not one: overlong forms, surrogates and values
 * past U+10FFFF are refused. */
size_t utf8_char_len(const unsigned char *s, size_t n);

/* True when all n bytes are valid UTF-8; *bad gets the offset of the first
 * invalid byte otherwise. */
bool utf8_valid(const char *s, size_t n, size_t *bad);

/* A malloc'd NUL-terminated copy of n bytes with each invalid byte replaced
 * by U+FFFD and NUL bytes dropped, or NULL when out of memory. */
char *utf8_sanitize(const char *s, size_t n);

/* Checks a JSON request body before parsing: valid UTF-8 throughout and no
 * \u0000 escape inside a string (it would silently cut the C string the JSON
 * parser produces). On failure writes a message to msg. */
bool json_body_check(const char *body, size_t n, char *msg, size_t cap);

#endif
