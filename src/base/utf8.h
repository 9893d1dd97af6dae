/* utf8.h - the one UTF-8 decoder and encoder of nucleus.
 *
 * Well-formed means what RFC 3629 and Unicode's Table 3-7 allow: no overlong
 * forms, no surrogates (U+D800..U+DFFF), nothing past U+10FFFF, and no
 * sequence cut short. Callers that must accept anything (tokenizers, the
 * Jinja engine) decide themselves what an ill-formed byte becomes. */
#ifndef NU_UTF8_H
#define NU_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { NU_UTF8_MAX = 4 /* bytes of the longest character */ };

/* Length (1..4) of the well-formed character at s (n bytes available), with
 * its code point in *cp (cp may be NULL); 0 when n is 0 or the bytes there
 * are not a well-formed character. */
size_t nu_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Writes code point cp as UTF-8 into out (room for NU_UTF8_MAX bytes):
 * its length, or 0 when cp is a surrogate or past U+10FFFF. */
size_t nu_utf8_encode(uint32_t cp, char out[NU_UTF8_MAX]);

/* The length a lead byte announces (1..4), or 0 for a continuation byte or
 * a byte that never starts a well-formed character (0xC0, 0xC1, 0xF5..). */
size_t nu_utf8_lead_len(unsigned char lead);

/* True when the n bytes are well-formed UTF-8; otherwise *bad (if not NULL)
 * gets the offset of the first byte that does not start a well-formed
 * character. */
bool nu_utf8_valid(const char *s, size_t n, size_t *bad);

/* The number of bytes at the end of s[0..n) that begin a character whose
 * remaining bytes have not arrived yet (0 when the text ends on a boundary
 * or with bytes that could never complete). Streaming writers hold these
 * back until the next piece. */
size_t nu_utf8_incomplete_tail(const char *s, size_t n);

/* Python's "surrogateescape" view of bytes, for code that must reproduce
 * Python's str on any input (chat templates, text metrics): decodes the
 * character at s[*i] and advances *i past it; a byte that does not start a
 * well-formed character decodes to 0xDC00 + byte and advances by one. */
uint32_t nu_utf8_next_escaped(const char *s, size_t n, size_t *i);

/* Encodes cp as nu_utf8_encode does, except that 0xDC80..0xDCFF give back
 * the byte they stand for (length 1); 0 for other surrogates and past
 * U+10FFFF. */
size_t nu_utf8_put_escaped(uint32_t cp, char out[NU_UTF8_MAX]);

#endif
