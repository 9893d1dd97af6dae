/* tokenizer.h - vocabularies and tokenizers (internal).
 *
 * A nu_vocab is built from a GGUF file's tokenizer.ggml.* metadata and is
 * immutable afterwards (shared by every context of a model). The public
 * nu_tokenize / nu_token_* / nu_detokenizer_* functions in nucleus.h are thin
 * wrappers over the nu_vocab_* functions here. */
#ifndef NU_TOKENIZER_H
#define NU_TOKENIZER_H

#include "gguf.h"
#include "nucleus.h"

typedef struct nu_vocab nu_vocab;

/* Reads tokenizer.ggml.model, tokens, scores, token_type, the special token
 * ids and the add-BOS / add-EOS / add-space-prefix flags; for byte-level BPE
 * ("gpt2") also tokenizer.ggml.merges and tokenizer.ggml.pre. */
nu_status nu_vocab_load(const nu_gguf_file *f, nu_vocab **out, nu_error *err);
void nu_vocab_free(nu_vocab *v);

int32_t nu_vocab_n_tokens(const nu_vocab *v);
const char *nu_vocab_model_name(const nu_vocab *v); /* "llama", "gpt2", ... */

nu_status nu_vocab_tokenize(const nu_vocab *v, const char *text, size_t len, unsigned flags,
                            int32_t *tokens, size_t cap, size_t *n_tokens, nu_error *err);
const char *nu_vocab_token_text(const nu_vocab *v, int32_t token);
nu_token_type nu_vocab_token_type(const nu_vocab *v, int32_t token);
size_t nu_vocab_token_to_bytes(const nu_vocab *v, int32_t token, bool special, char *buf,
                               size_t cap);
int32_t nu_vocab_bos(const nu_vocab *v);
int32_t nu_vocab_eos(const nu_vocab *v);
bool nu_vocab_is_eog(const nu_vocab *v, int32_t token);
bool nu_vocab_adds_bos(const nu_vocab *v);
bool nu_vocab_adds_space_prefix(const nu_vocab *v);
/* A note about the file the caller may want to show (e.g. an unknown
 * tokenizer.ggml.pre, tokenized with GPT-2's pre-tokenizer instead), or NULL. */
const char *nu_vocab_warning(const nu_vocab *v);

/* The streaming detokenizer of nucleus.h on a vocabulary (d->model is not
 * used): nu_detokenizer_push / nu_detokenizer_flush call these. */
size_t nu_vocab_detokenize_push(const nu_vocab *v, nu_detokenizer *d, int32_t token, char *out,
                                size_t cap);
size_t nu_vocab_detokenize_flush(nu_detokenizer *d, char *out, size_t cap);

#endif
