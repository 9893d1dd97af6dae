/* pretokenize.h - the pre-tokenizers of byte-level BPE vocabularies.
 *
 * Before BPE merges anything, the text is cut into pieces (roughly words,
 * numbers, runs of punctuation or of spaces) that no merge may cross. Each
 * model family cuts differently; tokenizer.ggml.pre names the family. A
 * pre-tokenizer is a fixed sequence of stages, each cutting every piece the
 * previous stage made (the Hugging Face tokenizers "Sequence" of "Split",
 * "Digits", "Punctuation" and "ByteLevel" pre-tokenizers). Most stages are
 * regular expressions with Unicode classes, run with PCRE2 (JIT compiled).
 *
 * A compiled pre-tokenizer is immutable and may be shared between threads;
 * each call brings its own nu_pretok_scratch.
 */
#ifndef NU_PRETOKENIZE_H
#define NU_PRETOKENIZE_H

#include <stdbool.h>
#include <stddef.h>

#include "nucleus.h"

typedef struct pretokenizer pretokenizer;

/* Compiles the pre-tokenizer for the tokenizer.ggml.pre value name[0..len)
 * (len 0: the key is absent, which means GPT-2's). *known is false when the
 * name is not one we know; GPT-2's pre-tokenizer is returned then. */
nu_status nu_pretokenizer_new(const char *name, size_t len, pretokenizer **out, bool *known,
                              nu_error *err);
void nu_pretokenizer_free(pretokenizer *p);

/* The family's canonical name ("gpt-2", "llama3", "qwen2", ...). */
const char *nu_pretokenizer_family(const pretokenizer *p);
/* Whether a piece that is a whole vocabulary token is output as that token
 * without merging (Hugging Face's BPE "ignore_merges", set by Llama 3). */
bool nu_pretokenizer_ignores_merges(const pretokenizer *p);
/* Whether the family adds BOS when the file does not say (Llama 3). */
bool nu_pretokenizer_adds_bos(const pretokenizer *p);

/* Per-call matching state (PCRE2 match data, a JIT stack when needed). */
typedef struct nu_pretok_scratch nu_pretok_scratch;
nu_status nu_pretok_scratch_new(nu_pretok_scratch **out, nu_error *err);
void nu_pretok_scratch_free(nu_pretok_scratch *s);

/* Receives the pieces in text order; a non-OK status stops the cutting. */
typedef nu_status (*nu_pretok_piece_fn)(void *ctx, const char *s, size_t n, nu_error *err);

/* Cuts text[0..len) into pieces and hands each non-empty piece to fn. The
 * pieces cover the text exactly. Bytes that are not well-formed UTF-8 match
 * nothing in any pattern, so they end up in pieces of their own or with
 * other unmatched text. */
nu_status nu_pretokenize(const pretokenizer *p, nu_pretok_scratch *s, const char *text, size_t len,
                         nu_pretok_piece_fn fn, void *ctx, nu_error *err);

#endif
