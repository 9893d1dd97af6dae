/* vocab_support.h - helpers the tokenizer tests share: loading a vocabulary
 * from a GGUF file, tokenizing into a fresh array, printing ids, checking
 * UTF-8 independently of the library. */
#ifndef NU_VOCAB_SUPPORT_H
#define NU_VOCAB_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "tokenizer.h"

/* Opens path and loads its vocabulary; fails the test on error. */
void tv_load(const char *path, nu_gguf_file **file, nu_vocab **vocab);
/* Tokenizes into a malloc'ed array (*n ids); fails the test on error. */
int32_t *tv_tokenize(const nu_vocab *v, const char *text, size_t len, unsigned flags, size_t *n);
/* Writes the decimal ids to buf, each after a space (for messages). */
void tv_format_ids(char *buf, size_t cap, const int32_t *ids, size_t n);
/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or values
 * past U+10FFFF). */
bool tv_valid_utf8(const char *s, size_t n);
/* The id whose text is exactly s, or -1 (a linear scan). */
int32_t tv_find_token(const nu_vocab *v, const char *s);

#endif
