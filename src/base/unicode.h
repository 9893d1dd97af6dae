/* unicode.h - UTF-8 and the Unicode properties Python's str methods use
 * (unicode.c), so text is split, cased and classified as the Python tools
 * whose results nucleus reproduces do it: chat templates rendered for
 * transformers, sacreBLEU's and rouge-score's tokenizers. */
#ifndef NU_UNICODE_H
#define NU_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "utf8.h" /* nu_utf8_next_escaped, nu_utf8_put_escaped */

bool nu_uni_isspace(uint32_t cp);     /* Python str.isspace() */
bool nu_uni_isprintable(uint32_t cp); /* Python str.isprintable() */
/* Python's full case mappings: writes 1..3 code points to out, returns count. */
int nu_uni_upper(uint32_t cp, uint32_t out[3]);
int nu_uni_lower(uint32_t cp, uint32_t out[3]);
int nu_uni_title(uint32_t cp, uint32_t out[3]);
bool nu_uni_isupper(uint32_t cp);
bool nu_uni_islower(uint32_t cp);
bool nu_uni_iscased(uint32_t cp);
bool nu_uni_isalpha(uint32_t cp);
bool nu_uni_isdigit(uint32_t cp);
bool nu_uni_isalnum(uint32_t cp);
/* Unicode general categories P* (punctuation), S* (symbols), N* (numbers),
 * as the `regex` module's \p{P}, \p{S}, \p{N} match them. */
bool nu_uni_ispunct(uint32_t cp);
bool nu_uni_issymbol(uint32_t cp);
bool nu_uni_isnumber(uint32_t cp);

#endif
