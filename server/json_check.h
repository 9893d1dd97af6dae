/* json_check.h - the strict check every JSON request body passes before it
 * is parsed (cJSON is lenient where RFC 8259 is not, and cannot hold what
 * a C string cannot).
 *
 * Refused, each with a message that names the problem and its byte offset:
 * invalid UTF-8; anything outside RFC 8259's grammar (trailing commas,
 * leading zeros, single quotes, comments, NaN, trailing data, ...); raw
 * control characters (U+0000..U+001F) inside strings, which JSON requires
 * to be escaped; the escape \u0000 (a C string would end there); lone UTF-16
 * surrogates (\ud800 without its pair); arrays and objects nested deeper than
 * SRV_JSON_MAX_DEPTH; and a key that appears twice in one object (after
 * unescaping: "a" and "\u0061" are the same key), which RFC 8259 leaves to
 * each parser and so is ambiguous. */
#ifndef NU_SRV_JSON_CHECK_H
#define NU_SRV_JSON_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* Deepest nesting of arrays and objects accepted in a request body (below
 * cJSON's own limit of 1000, so cJSON never refuses what passed here). */
#define SRV_JSON_MAX_DEPTH 256

/* Checks n bytes of body; on failure writes a message to msg (cap bytes)
 * and returns false. An empty body is refused. */
bool json_body_check(const char *body, size_t n, char *msg, size_t cap);

/* The exact text of the scalar value of a top-level member of a body that
 * passes json_body_check: its length, *text pointing into body; 0 when the
 * member is absent or not a scalar. For numbers that a double cannot hold
 * exactly (64-bit seeds). */
size_t json_member_text(const char *body, size_t n, const char *key, const char **text);

#endif
