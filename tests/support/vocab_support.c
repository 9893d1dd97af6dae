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

tv_vocab tv_open(const char *rel) {
    char path[4096];
    snprintf(path, sizeof path, "%s", nu_test_shared(rel));
    tv_vocab tv = {0};
    tv_load(path, &tv.file, &tv.vocab);
    return tv;
}

tv_vocab tv_open_named(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    return tv_open(rel);
}

void tv_close(tv_vocab *tv) {
    nu_vocab_free(tv->vocab);
    nu_gguf_close(tv->file);
    free(tv->image);
    memset(tv, 0, sizeof *tv);
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

tv_texts tv_read_texts(const char *inp_path) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    tv_texts t = {0};
    size_t size;
    t.data = nu_test_read_file(inp_path, &size);
    if (!t.data) fail_msg("cannot read %s", inp_path);
    size_t cap = 1; /* one string per separator, and maybe one after the last */
    for (const char *p = t.data; (p = memmem(p, size - (size_t)(p - t.data), sep, sep_len)); p++)
        cap++;
    t.text = malloc(cap * sizeof *t.text);
    t.len = malloc(cap * sizeof *t.len);
    assert_true(t.text && t.len);
    const char *p = t.data, *end = t.data + size;
    while (p < end) {
        const char *q = memmem(p, (size_t)(end - p), sep, sep_len);
        t.text[t.n] = p;
        t.len[t.n++] = (size_t)((q ? q : end) - p);
        if (!q) break;
        p = q + sep_len;
    }
    return t;
}

void tv_free_texts(tv_texts *t) {
    free(t->data);
    free(t->text);
    free(t->len);
    memset(t, 0, sizeof *t);
}

/* Parses one line of ids; returns the count (at most max). */
static size_t parse_id_line(const char *line, int32_t *ids, size_t max) {
    size_t n = 0;
    for (const char *p = line; *p && *p != '\n' && n < max;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) break;
        ids[n++] = (int32_t)x;
        p = end;
    }
    return n;
}

void tv_check_vectors(const nu_vocab *v, const char *label, const char *inp_path,
                      const char *out_path, size_t n_expected) {
    tv_texts t = tv_read_texts(inp_path);
    char *out = nu_test_read_file(out_path, NULL);
    if (!out) fail_msg("cannot read %s", out_path);
    enum { MAX_IDS = 1 << 16 };
    int32_t *want = malloc(MAX_IDS * sizeof *want);
    char *a = malloc(1 << 14), *b = malloc(1 << 14);
    assert_true(want && a && b);
    size_t passed = 0;
    const char *line = out;
    for (size_t i = 0; i < t.n; i++) {
        if (!line) fail_msg("%s: %s has fewer lines than strings", label, out_path);
        size_t n_want = parse_id_line(line, want, MAX_IDS), n;
        int32_t *got = tv_tokenize(v, t.text[i], t.len[i], 0, &n);
        if (n == n_want && memcmp(got, want, n * sizeof *got) == 0) {
            passed++;
        } else {
            tv_format_ids(a, 1 << 14, want, n_want);
            tv_format_ids(b, 1 << 14, got, n);
            printf("MISMATCH %s #%zu '%.*s'\n  want%s\n  got %s\n", label, i, (int)t.len[i],
                   t.text[i], a, b);
        }
        free(got);
        line = strchr(line, '\n');
        if (line) line++;
    }
    printf("%s: %zu/%zu test vectors\n", label, passed, t.n);
    assert_int_equal(t.n, n_expected);
    assert_int_equal(passed, t.n);
    free(a);
    free(b);
    free(want);
    free(out);
    tv_free_texts(&t);
}

void tv_expect_ids(const nu_vocab *v, const char *text, size_t len, unsigned flags,
                   const int32_t *want, size_t n_want) {
    size_t n;
    int32_t *got = tv_tokenize(v, text, len, flags, &n);
    if (n != n_want || memcmp(got, want, n * sizeof *got) != 0) {
        char a[2048], b[2048];
        tv_format_ids(a, sizeof a, want, n_want);
        tv_format_ids(b, sizeof b, got, n);
        free(got);
        fail_msg("'%.*s': expected [%s ] got [%s ]", (int)len, text, a, b);
    }
    free(got);
}

void tv_expect_str(const nu_vocab *v, const char *text, unsigned flags, const int32_t *want,
                   size_t n_want) {
    tv_expect_ids(v, text, strlen(text), flags, want, n_want);
}

char *tv_detokenize(const nu_vocab *v, const int32_t *ids, size_t n, bool special, bool strip,
                    size_t *len) {
    size_t cap = 64;
    for (size_t i = 0; i < n; i++)
        cap += 16 + 3 * nu_vocab_token_to_bytes(v, ids[i], true, NULL, 0);
    char *text = malloc(cap);
    assert_non_null(text);
    nu_detokenizer d;
    nu_detokenizer_init(&d, NULL, special, strip);
    size_t at = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t k = i < n ? nu_vocab_detokenize_push(v, &d, ids[i], text + at, cap - at)
                         : nu_vocab_detokenize_flush(&d, text + at, cap - at);
        if (!tv_valid_utf8(text + at, k)) fail_msg("chunk %zu of the detokenizer is not UTF-8", i);
        at += k;
    }
    *len = at;
    return text;
}
