/* vocab_support.c - helpers the tokenizer tests share. */
#include "vocab_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

void tv_load(const char *path, nu_gguf_file **file, nu_vocab **vocab) {
    nu_error err = {0};
    if (nu_gguf_open(path, file, &err) != NU_OK) fail_msg("%s: %s", path, err.message);
    if (nu_vocab_load(*file, vocab, &err) != NU_OK) fail_msg("%s: %s", path, err.message);
}

int32_t *tv_tokenize(const nu_vocab *v, const char *text, size_t len, unsigned flags, size_t *n) {
    nu_error err = {0};
    size_t need = 0;
    nu_status st = nu_vocab_tokenize(v, text, len, flags, NULL, 0, &need, &err);
    if (st != NU_OK && st != NU_ERR_BUFFER_SMALL) fail_msg("tokenize: %s", err.message);
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    assert_non_null(ids);
    st = nu_vocab_tokenize(v, text, len, flags, ids, need, n, &err);
    if (st != NU_OK) fail_msg("tokenize: %s", err.message);
    assert_int_equal(*n, need);
    return ids;
}

void tv_format_ids(char *buf, size_t cap, const int32_t *ids, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && at + 16 < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, " %d", ids[i]);
}

bool tv_valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (k == 0 || i + k > n) return false;
        uint32_t cp = k == 1 ? c : c & (0x7F >> k);
        for (size_t j = 1; j < k; j++) {
            if ((u[i + j] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (u[i + j] & 0x3F);
        }
        if (cp < min_cp[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += k;
    }
    return true;
}

int32_t tv_find_token(const nu_vocab *v, const char *s) {
    for (int32_t i = 0; i < nu_vocab_n_tokens(v); i++)
        if (strcmp(nu_vocab_token_text(v, i), s) == 0) return i;
    return -1;
}
