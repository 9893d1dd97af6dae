/* text_check.h - checking and repairing UTF-8 text for the server: request bodies
 * must be valid UTF-8 JSON, and token pieces that end inside a character
 * must not make the responses invalid. */
#ifndef NU_SRV_TEXT_CHECK_H
#define NU_SRV_TEXT_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "utf8.h"

/* A malloc'd NUL-terminated copy of n bytes with each invalid byte replaced
 * by U+FFFD and NUL bytes dropped, or NULL when out of memory. */
char *utf8_sanitize(const char *s, size_t n);

/* Checks a JSON request body before parsing: valid UTF-8 throughout and no
 * \u0000 escape inside a string (it would silently cut the C string the JSON
 * parser produces). On failure writes a message to msg. */
bool json_body_check(const char *body, size_t n, char *msg, size_t cap);

#endif
