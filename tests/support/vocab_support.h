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

/* A vocabulary with the GGUF file (and the image, when built in memory) it
 * came from. */
typedef struct tv_vocab {
    nu_gguf_file *file;
    nu_vocab *vocab;
    uint8_t *image;
} tv_vocab;
/* Loads "<shared>/<rel>". */
tv_vocab tv_open(const char *rel);
/* Loads shared/vocab/ggml-vocab-NAME.gguf. */
tv_vocab tv_open_named(const char *name);
void tv_close(tv_vocab *tv);
/* Checks that tokenizing text[0..len) with flags gives exactly want. */
void tv_expect_ids(const nu_vocab *v, const char *text, size_t len, unsigned flags,
                   const int32_t *want, size_t n_want);
/* The same for a NUL-terminated text. */
void tv_expect_str(const nu_vocab *v, const char *text, unsigned flags, const int32_t *want,
                   size_t n_want);
/* Streams ids through the detokenizer (special: render control tokens;
 * strip: drop a leading space), checking that every chunk it returns is
 * well-formed UTF-8 on its own; returns the whole text (malloc'ed, length in
 * *len). */
char *tv_detokenize(const nu_vocab *v, const int32_t *ids, size_t n, bool special, bool strip,
                    size_t *len);
/* Tokenizes into a malloc'ed array (*n ids); fails the test on error. */
int32_t *tv_tokenize(const nu_vocab *v, const char *text, size_t len, unsigned flags, size_t *n);
/* Writes the decimal ids to buf, each after a space (for messages). */
void tv_format_ids(char *buf, size_t cap, const int32_t *ids, size_t n);
/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or values
 * past U+10FFFF). */
bool tv_valid_utf8(const char *s, size_t n);
/* The id whose text is exactly s, or -1 (a linear scan). */
int32_t tv_find_token(const nu_vocab *v, const char *s);

/* The test strings of a vector file (.inp): each string is followed by
 * "\n__ggml_vocab_test__\n", except that a newer layout leaves the
 * separator off the last one. Strings point into data. */
typedef struct tv_texts {
    char *data;
    const char **text;
    size_t *len;
    size_t n;
} tv_texts;
/* Reads inp_path; fails the test when it cannot. */
tv_texts tv_read_texts(const char *inp_path);
void tv_free_texts(tv_texts *t);

/* Tokenizes every string of inp_path (no BOS, special-token text not
 * parsed) and compares with the matching line of out_path (decimal ids
 * separated by spaces, with or without a leading one); prints every
 * mismatch and a "label: passed/total" line, and fails the test unless all
 * pass and there are n_expected strings. */
void tv_check_vectors(const nu_vocab *v, const char *label, const char *inp_path,
                      const char *out_path, size_t n_expected);

#endif
