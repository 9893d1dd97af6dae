/* tokenizer_api.c - the public tokenizer functions of nucleus.h: thin
 * wrappers that find the model's vocabulary and call tokenizer.h. A model
 * loaded without a vocabulary (metadata only) tokenizes nothing. */
#include <string.h>

#include "error.h"
#include "model.h"
#include "tokenizer.h"

/* The model's vocabulary, or NULL (no model, or loaded without one). */
static const nu_vocab *vocab_of(const nu_model *model) {
    return model ? nu_model_vocab(model) : NULL;
}

nu_status nu_tokenize(const nu_model *model, const char *text, size_t len, unsigned flags,
                      int32_t *tokens, size_t cap, size_t *n_tokens, nu_error *err) {
    const nu_vocab *v = vocab_of(model);
    if (n_tokens) *n_tokens = 0;
    if (!v) return nu_fail(err, NU_ERR_INVALID_ARG, "nu_tokenize: the model has no vocabulary");
    return nu_vocab_tokenize(v, text, len, flags, tokens, cap, n_tokens, err);
}

const char *nu_token_text(const nu_model *model, int32_t token) {
    const nu_vocab *v = vocab_of(model);
    return v ? nu_vocab_token_text(v, token) : NULL;
}

nu_token_type nu_token_get_type(const nu_model *model, int32_t token) {
    const nu_vocab *v = vocab_of(model);
    return v ? nu_vocab_token_type(v, token) : NU_TOKEN_UNDEFINED;
}

size_t nu_token_to_bytes(const nu_model *model, int32_t token, bool special, char *buf,
                         size_t cap) {
    const nu_vocab *v = vocab_of(model);
    return v ? nu_vocab_token_to_bytes(v, token, special, buf, cap) : 0;
}

int32_t nu_token_bos(const nu_model *model) {
    const nu_vocab *v = vocab_of(model);
    return v ? nu_vocab_bos(v) : -1;
}

int32_t nu_token_eos(const nu_model *model) {
    const nu_vocab *v = vocab_of(model);
    return v ? nu_vocab_eos(v) : -1;
}

bool nu_token_is_eog(const nu_model *model, int32_t token) {
    const nu_vocab *v = vocab_of(model);
    return v && nu_vocab_is_eog(v, token);
}

bool nu_model_adds_bos(const nu_model *model) {
    const nu_vocab *v = vocab_of(model);
    return v && nu_vocab_adds_bos(v);
}

void nu_detokenizer_init(nu_detokenizer *d, const nu_model *model, bool special,
                         bool strip_leading_space) {
    memset(d, 0, sizeof *d);
    d->model = model;
    d->special = special;
    d->strip_leading_space = strip_leading_space;
}

size_t nu_detokenizer_push(nu_detokenizer *d, int32_t token, char *out, size_t cap) {
    const nu_vocab *v = vocab_of(d->model);
    return v ? nu_vocab_detokenize_push(v, d, token, out, cap) : 0;
}

size_t nu_detokenizer_flush(nu_detokenizer *d, char *out, size_t cap) {
    return nu_vocab_detokenize_flush(d, out, cap);
}

const char *nu_model_warning(const nu_model *model) {
    const nu_vocab *v = vocab_of(model);
    return v ? nu_vocab_warning(v) : NULL;
}
