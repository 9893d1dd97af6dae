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

/* n bytes as a JSON string literal, quotes included (malloc'd; NULL when out
 * of memory): invalid bytes become U+FFFD, control characters are escaped and
 * NUL bytes kept as \u0000, so generated text reaches the client whole. */
char *utf8_json_string(const char *s, size_t n);

/* The strict check of JSON request bodies lives in json_check.h. */
#include "json_check.h"

#endif
