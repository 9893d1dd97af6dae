/* test_tokenizer.c - the SentencePiece-style tokenizer and the detokenizer.
 *
 * Golden tests: every test vector of the real vocabularies in shared/vocab
 * (ids from the Hugging Face tokenizers, add-special and parse-special off)
 * and the prompt tokens of shared/refs/stories260K_greedy.json. Then round
 * trips, byte fallback, streaming detokenizing, special tokens, long and
 * malformed input, and metadata errors on small GGUF files built here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
#include "test_support.h"
#include "vocab_support.h"
#include "tokenizer.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Test vectors                                                             */
/* ------------------------------------------------------------------------ */

/* Reproduces every vector of vocab/NAME.gguf.{inp,out}. */
static void check_vectors(const char *name) {
    char rel[256], inp[4096], out[4096];
    snprintf(rel, sizeof rel, "vocab/%s.gguf", name);
    tv_vocab lv = tv_open(rel);
    snprintf(inp, sizeof inp, "%s.inp", nu_test_shared(rel));
    snprintf(out, sizeof out, "%s.out", nu_test_shared(rel));
    tv_check_vectors(lv.vocab, name, inp, out, 46);
    tv_close(&lv);
}

static void test_vectors_llama_spm(void **state) {
    (void)state;
    check_vectors("ggml-vocab-llama-spm");
}

static void test_vectors_phi3(void **state) {
    (void)state;
    check_vectors("ggml-vocab-phi-3");
}

/* ------------------------------------------------------------------------ */
/* stories260K prompts                                                      */
/* ------------------------------------------------------------------------ */

/* Reads the JSON string starting after its opening quote into dst (the
 * simple escapes only: enough for the prompts). Returns the length. */
static size_t read_json_string(const char *p, char *dst, size_t cap) {
    size_t n = 0;
    for (; *p && *p != '"' && n + 1 < cap; p++) {
        char c = *p;
        if (c == '\\') {
            c = *++p;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        }
        dst[n++] = c;
    }
    dst[n] = 0;
    return n;
}

static void test_stories260k_prompts(void **state) {
    (void)state;
    tv_vocab lv = tv_open("models/stories260K.gguf");
    char *json = nu_test_read_file(nu_test_shared("refs/stories260K_greedy.json"), NULL);
    assert_non_null(json);
    int n_prompts = 0;
    for (const char *p = json; (p = strstr(p, "\"prompt\": \"")) != NULL; n_prompts++) {
        char prompt[1024];
        p += strlen("\"prompt\": \"");
        size_t len = read_json_string(p, prompt, sizeof prompt);
        const char *arr = strstr(p, "\"prompt_tokens\": [");
        assert_non_null(arr);
        int32_t want[256];
        size_t n_want = 0;
        for (const char *q = arr + strlen("\"prompt_tokens\": ["); *q != ']';) {
            char *end;
            want[n_want++] = (int32_t)strtol(q, &end, 10);
            q = end;
            while (*q == ',' || *q == ' ' || *q == '\n') q++;
        }
        tv_expect_ids(lv.vocab, prompt, len, NU_TOKENIZE_ADD_BOS, want, n_want);
    }
    assert_true(n_prompts >= 2);
    static const int32_t once[] = {1, 403, 407, 261, 378};
    tv_expect_ids(lv.vocab, "Once upon a time", 16, NU_TOKENIZE_ADD_BOS, once, 5);
    assert_true(nu_vocab_adds_bos(lv.vocab));
    assert_int_equal(nu_vocab_bos(lv.vocab), 1);
    assert_int_equal(nu_vocab_eos(lv.vocab), 2);
    assert_true(nu_vocab_is_eog(lv.vocab, 2));
    assert_false(nu_vocab_is_eog(lv.vocab, 1));
    free(json);
    tv_close(&lv);
}

/* ------------------------------------------------------------------------ */
/* Round trips and the detokenizer                                          */
/* ------------------------------------------------------------------------ */

/* Tokenizes every test text of the llama-spm .inp file with vocab rel and
 * streams the ids back: the text comes back exactly (the tokenizer's space
 * prefix removed), and token_to_bytes agrees with the stream. */
static void round_trip_all(const char *rel) {
    tv_vocab lv = tv_open(rel);
    tv_texts t = tv_read_texts(nu_test_shared("vocab/ggml-vocab-llama-spm.gguf.inp"));
    const char *const *texts = t.text;
    const size_t *lens = t.len, n_tests = t.n;
    bool strip = nu_vocab_adds_space_prefix(lv.vocab);
    for (size_t i_text = 0; i_text < n_tests; i_text++) {
        const char *text = texts[i_text];
        size_t text_len = lens[i_text], n, len;
        int32_t *ids = tv_tokenize(lv.vocab, text, text_len, 0, &n);
        char *back = tv_detokenize(lv.vocab, ids, n, false, strip, &len);
        if (len != text_len || memcmp(back, text, len) != 0) {
            fail_msg("%s: '%.*s' came back as '%.*s'", rel, (int)text_len, text, (int)len, back);
        }
        /* token_to_bytes: the same bytes, with the prefix space */
        char piece[256];
        size_t at = 0;
        bool first = true;
        for (size_t i = 0; i < n; i++) {
            size_t k = nu_vocab_token_to_bytes(lv.vocab, ids[i], false, piece, sizeof piece);
            assert_true(k <= sizeof piece);
            if (first && strip && k > 0) {
                assert_int_equal(piece[0], ' ');
                assert_memory_equal(piece + 1, text, k - 1);
                at = k - 1;
                first = false;
            } else {
                assert_memory_equal(piece, text + at, k);
                at += k;
            }
        }
        assert_int_equal(at, text_len);
        free(back);
        free(ids);
    }
    tv_free_texts(&t);
    tv_close(&lv);
}

static void test_round_trip_llama_spm(void **state) {
    (void)state;
    round_trip_all("vocab/ggml-vocab-llama-spm.gguf");
}

static void test_round_trip_phi3(void **state) {
    (void)state;
    round_trip_all("vocab/ggml-vocab-phi-3.gguf");
}

static void test_round_trip_baichuan(void **state) {
    (void)state;
    round_trip_all("vocab/ggml-vocab-baichuan.gguf");
    tv_vocab lv = tv_open("vocab/ggml-vocab-baichuan.gguf");
    assert_int_equal(nu_vocab_n_tokens(lv.vocab), 64000);
    assert_string_equal(nu_vocab_model_name(lv.vocab), "llama");
    /* no add_bos key: the SentencePiece default (add BOS) applies */
    assert_true(nu_vocab_adds_bos(lv.vocab));
    assert_true(nu_vocab_adds_space_prefix(lv.vocab));
    size_t n;
    int32_t *ids = tv_tokenize(lv.vocab, "Hello world", 11, NU_TOKENIZE_ADD_BOS, &n);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 1);
    for (size_t i = 1; i < n; i++) assert_int_equal(nu_vocab_token_type(lv.vocab, ids[i]), 1);
    free(ids);
    tv_close(&lv);
}

static void test_round_trip_stories(void **state) {
    (void)state;
    round_trip_all("models/stories260K.gguf");
}

/* Characters not in the vocabulary become their UTF-8 bytes as <0xXX>, and
 * the streaming detokenizer holds them until the character is whole. */
static void test_byte_fallback(void **state) {
    (void)state;
    tv_vocab lv = tv_open("vocab/ggml-vocab-llama-spm.gguf");
    const nu_vocab *v = lv.vocab;
    /* U+1F999 llama: F0 9F A6 99 -> <0xF0> <0x9F> <0xA6> <0x99> = 3 + byte */
    static const int32_t llama[] = {29871, 243, 162, 169, 156};
    tv_expect_ids(v, "\xF0\x9F\xA6\x99", 4, 0, llama, 5);
    for (size_t i = 1; i < 5; i++) assert_int_equal(nu_vocab_token_type(v, llama[i]), 6);
    char b[8];
    assert_int_equal(nu_vocab_token_to_bytes(v, 243, false, b, sizeof b), 1);
    assert_int_equal((unsigned char)b[0], 0xF0);

    nu_detokenizer d;
    nu_detokenizer_init(&d, NULL, false, true);
    char out[64];
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 29871, out, sizeof out), 0); /* stripped */
    for (int i = 1; i < 4; i++)
        assert_int_equal(nu_vocab_detokenize_push(v, &d, llama[i], out, 64), 0);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, llama[4], out, sizeof out), 4);
    assert_memory_equal(out, "\xF0\x9F\xA6\x99", 4);

    /* CJK characters: some are tokens, rarer ones fall back to bytes */
    const char *cjk = "我想在apple工作 齉龘";
    size_t n, len;
    int32_t *ids = tv_tokenize(v, cjk, strlen(cjk), 0, &n);
    bool saw_byte = false;
    for (size_t i = 0; i < n; i++) saw_byte |= nu_vocab_token_type(v, ids[i]) == 6;
    assert_true(saw_byte);
    char *back = tv_detokenize(v, ids, n, false, true, &len);
    assert_int_equal(len, strlen(cjk));
    assert_memory_equal(back, cjk, len);
    free(back);
    free(ids);
    tv_close(&lv);
}

/* The detokenizer on broken byte sequences: U+FFFD for what cannot become a
 * character, the unfinished tail only at flush; one leading space dropped. */
static void test_detokenizer_invalid(void **state) {
    (void)state;
    tv_vocab lv = tv_open("vocab/ggml-vocab-llama-spm.gguf");
    const nu_vocab *v = lv.vocab;
    int32_t hello = tv_find_token(v, "▁Hello");
    assert_true(hello >= 0);
    nu_detokenizer d;
    char out[64];
    size_t k;
    /* E2 then 'H': the lead byte cannot finish -> FFFD, then " Hello"
     * (the space is not stripped: the first text was the FFFD) */
    nu_detokenizer_init(&d, NULL, false, true);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 3 + 0xE2, out, sizeof out), 0);
    k = nu_vocab_detokenize_push(v, &d, hello, out, sizeof out);
    assert_int_equal(k, 9);
    assert_memory_equal(out, "\xEF\xBF\xBD Hello", 9);
    /* a lone continuation byte and an invalid lead byte */
    nu_detokenizer_init(&d, NULL, false, false);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 3 + 0x80, out, sizeof out), 3);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 3 + 0xFF, out, sizeof out), 3);
    assert_memory_equal(out, "\xEF\xBF\xBD", 3);
    /* an unfinished character at the end: held, then FFFD at flush */
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 3 + 0xF0, out, sizeof out), 0);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 3 + 0x9F, out, sizeof out), 0);
    assert_int_equal(nu_vocab_detokenize_flush(&d, out, sizeof out), 3);
    assert_memory_equal(out, "\xEF\xBF\xBD", 3);
    assert_int_equal(nu_vocab_detokenize_flush(&d, out, sizeof out), 0);
    /* surrogate half ED A0: not a valid second byte after ED */
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 3 + 0xED, out, sizeof out), 0);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 3 + 0xA0, out, sizeof out), 6);
    /* strip: only one space, only at the very start */
    int32_t sp = tv_find_token(v, "▁▁");
    assert_true(sp >= 0);
    nu_detokenizer_init(&d, NULL, false, true);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, sp, out, sizeof out), 1);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, hello, out, sizeof out), 6);
    assert_memory_equal(out, " Hello", 6);
    /* control tokens: nothing unless special */
    nu_detokenizer_init(&d, NULL, false, true);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 1, out, sizeof out), 0);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, hello, out, sizeof out), 5);
    nu_detokenizer_init(&d, NULL, true, true);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, 1, out, sizeof out), 3);
    assert_memory_equal(out, "<s>", 3);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, hello, out, sizeof out), 6);
    /* token_to_bytes: unknown token gives its text; control only if special */
    assert_int_equal(nu_vocab_token_to_bytes(v, 0, false, out, sizeof out), 5);
    assert_memory_equal(out, "<unk>", 5);
    assert_int_equal(nu_vocab_token_to_bytes(v, 2, false, out, sizeof out), 0);
    assert_int_equal(nu_vocab_token_to_bytes(v, 2, true, out, sizeof out), 4);
    assert_int_equal(nu_vocab_token_to_bytes(v, -1, true, out, sizeof out), 0);
    assert_int_equal(nu_vocab_token_to_bytes(v, 32000, true, out, sizeof out), 0);
    assert_int_equal(nu_vocab_token_to_bytes(v, hello, false, out, 2), 6); /* truncated */
    assert_memory_equal(out, " H", 2);
    tv_close(&lv);
}

/* ------------------------------------------------------------------------ */
/* Special tokens                                                           */
/* ------------------------------------------------------------------------ */

static void test_special_tokens_llama(void **state) {
    (void)state;
    tv_vocab lv = tv_open("vocab/ggml-vocab-llama-spm.gguf");
    const nu_vocab *v = lv.vocab;
    int32_t hello = tv_find_token(v, "Hello"), hello_sp = tv_find_token(v, "▁Hello");
    assert_true(hello >= 0 && hello_sp >= 0);
    /* parsed: "<s>" and "</s>" become ids; "Hello" follows a special token,
     * so it gets no space prefix */
    const char *text = "<s>Hello</s>";
    int32_t want[] = {1, hello, 2};
    tv_expect_ids(v, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL, want, 3);
    /* with ADD_BOS as well: BOS, then the parsed "<s>" */
    int32_t want_bos[] = {1, 1, hello, 2};
    tv_expect_ids(v, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL | NU_TOKENIZE_ADD_BOS, want_bos,
                  4);
    /* text first: it gets the prefix; "<unk>" parses too */
    int32_t want_text[] = {hello_sp, 0, 2};
    tv_expect_ids(v, "Hello<unk></s>", 14, NU_TOKENIZE_PARSE_SPECIAL, want_text, 3);
    /* not parsed: plain text, no control ids, and it round-trips */
    size_t n, len;
    int32_t *ids = tv_tokenize(v, text, strlen(text), 0, &n);
    for (size_t i = 0; i < n; i++) assert_int_equal(nu_vocab_token_type(v, ids[i]), 1);
    char *back = tv_detokenize(v, ids, n, false, true, &len);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(back, text, len);
    free(back);
    free(ids);
    /* parsed and rendered with special = true: the text again */
    ids = tv_tokenize(v, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL, &n);
    back = tv_detokenize(v, ids, n, true, false, &len);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(back, text, len);
    free(back);
    free(ids);
    tv_close(&lv);
}

static void test_special_tokens_phi3(void **state) {
    (void)state;
    tv_vocab lv = tv_open("vocab/ggml-vocab-phi-3.gguf");
    const nu_vocab *v = lv.vocab;
    int32_t hi = tv_find_token(v, "▁Hi"), nl = tv_find_token(v, "<0x0A>");
    assert_true(hi >= 0 && nl >= 0);
    /* "</s>" is user-defined in Phi-3: matched even without parse-special */
    assert_int_equal(nu_vocab_token_type(v, 2), NU_TOKEN_USER_DEFINED);
    int32_t want[] = {hi, 2};
    tv_expect_ids(v, "Hi</s>", 6, 0, want, 2);
    /* longest match: <|endoftext|> (32000), not <|end|> (32007) + "oftext|>" */
    int32_t want_eot[] = {32000, 32007};
    tv_expect_ids(v, "<|endoftext|><|end|>", 20, NU_TOKENIZE_PARSE_SPECIAL, want_eot, 2);
    /* a chat turn */
    const char *chat = "<|user|>\nHi<|end|>\n<|assistant|>\n";
    int32_t want_chat[] = {32010, nl, tv_find_token(v, "Hi"), 32007, nl, 32001, nl};
    tv_expect_ids(v, chat, strlen(chat), NU_TOKENIZE_PARSE_SPECIAL, want_chat, 7);
    /* not parsed: control text is plain text */
    size_t n;
    int32_t *ids = tv_tokenize(v, chat, strlen(chat), 0, &n);
    for (size_t i = 0; i < n; i++) assert_true(ids[i] < 32000);
    free(ids);
    /* end-of-generation: eos and the end-of-turn token */
    assert_int_equal(nu_vocab_eos(v), 32000);
    assert_true(nu_vocab_is_eog(v, 32000));
    assert_true(nu_vocab_is_eog(v, 32007));
    assert_false(nu_vocab_is_eog(v, 32010));
    assert_false(nu_vocab_is_eog(v, hi));
    tv_close(&lv);
}

/* ------------------------------------------------------------------------ */
/* Long and malformed input, buffers                                        */
/* ------------------------------------------------------------------------ */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Tokenizes len bytes in one call (a buffer of one id per byte is always
 * enough here) and prints how long it took. */
static int32_t *tokenize_timed(const nu_vocab *v, const char *what, const char *text, size_t len,
                               size_t *n) {
    int32_t *ids = malloc((len + 2) * sizeof *ids);
    assert_non_null(ids);
    nu_error err = {0};
    double t0 = now_ms();
    nu_status st = nu_vocab_tokenize(v, text, len, 0, ids, len + 2, n, &err);
    double ms = now_ms() - t0;
    if (st) fail_msg("tokenize: %s", err.message);
    print_message("1 MB of %s: %zu tokens in %.1f ms\n", what, *n, ms);
    return ids;
}

/* 1 MB of mixed text (the test texts repeated), of one repeated letter and
 * of spaces: tokenized (and the mixed text round-tripped); times printed. */
static void test_long_input(void **state) {
    (void)state;
    tv_vocab lv = tv_open("vocab/ggml-vocab-llama-spm.gguf");
    size_t inp_len, len = 1 << 20;
    char *inp = nu_test_read_file(nu_test_shared("vocab/ggml-vocab-llama-spm.gguf.inp"), &inp_len);
    assert_non_null(inp);
    char *big = malloc(len);
    assert_non_null(big);
    for (size_t i = 0; i < len; i++) big[i] = inp[i % inp_len];
    while (len > 0 && ((unsigned char)big[len - 1] & 0xC0) == 0x80) len--;
    if (len > 0 && (unsigned char)big[len - 1] >= 0xC0) len--; /* no cut character */
    size_t n, back_len;
    int32_t *ids = tokenize_timed(lv.vocab, "mixed text", big, len, &n);
    char *back = tv_detokenize(lv.vocab, ids, n, false, true, &back_len);
    assert_int_equal(back_len, len);
    assert_memory_equal(back, big, len);
    free(back);
    free(ids);

    static const char fill[] = {'a', ' ', '3', '\n'};
    static const char *const names[] = {"'a'", "spaces", "'3'", "newlines"};
    for (size_t f = 0; f < sizeof fill; f++) {
        memset(big, fill[f], 1 << 20);
        ids = tokenize_timed(lv.vocab, names[f], big, 1 << 20, &n);
        assert_true(n > 0);
        free(ids);
    }
    free(big);
    free(inp);
    tv_close(&lv);
}

/* Malformed UTF-8 does not crash; bytes come back exactly through byte
 * fallback; the detokenizer emits only valid UTF-8. */
static void test_invalid_utf8(void **state) {
    (void)state;
    tv_vocab lv = tv_open("vocab/ggml-vocab-llama-spm.gguf");
    const nu_vocab *v = lv.vocab;
    static const char *const cases[] = {
        "\xFF",      "\xC0\x80",         "a\200b", "\xED\xA0\x80", "\xF0\x9F\xA6",     "\xE2\x96",
        "x\xE2\x96", "\xF4\x90\x80\x80", "\xC3",   " \xFE\xFF ",   "Hello \xC3(world",
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n, len, in_len = strlen(cases[c]);
        int32_t *ids = tv_tokenize(v, cases[c], in_len, 0, &n);
        /* token_to_bytes reproduces the bytes (after the prefix space) */
        char buf[256];
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            at += nu_vocab_token_to_bytes(v, ids[i], false, buf + at, sizeof buf - at);
        }
        assert_int_equal(at, in_len + 1);
        assert_memory_equal(buf + 1, cases[c], in_len);
        char *back = tv_detokenize(v, ids, n, false, true, &len);
        assert_true(tv_valid_utf8(back, len));
        free(back);
        free(ids);
    }
    /* random bytes, including NULs */
    uint32_t seed = 12345;
    char *rnd = malloc(100000);
    assert_non_null(rnd);
    for (size_t i = 0; i < 100000; i++) {
        seed = seed * 1664525u + 1013904223u;
        rnd[i] = (char)(seed >> 24);
    }
    size_t n, len;
    int32_t *ids = tv_tokenize(v, rnd, 100000, NU_TOKENIZE_PARSE_SPECIAL, &n);
    char *back = tv_detokenize(v, ids, n, false, true, &len);
    assert_true(tv_valid_utf8(back, len));
    free(back);
    free(ids);
    free(rnd);
    tv_close(&lv);
}

static void test_buffer_and_args(void **state) {
    (void)state;
    tv_vocab lv = tv_open("models/stories260K.gguf");
    int32_t ids[8];
    size_t n = 99;
    nu_error err = {0};
    nu_status st =
        nu_vocab_tokenize(lv.vocab, "Once upon a time", 16, NU_TOKENIZE_ADD_BOS, ids, 3, &n, &err);
    assert_int_equal(st, NU_ERR_BUFFER_SMALL);
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[2], 407);
    st = nu_vocab_tokenize(lv.vocab, "", 0, NU_TOKENIZE_ADD_BOS, ids, 8, &n, &err);
    assert_int_equal(st, NU_OK);
    assert_int_equal(n, 1);
    st = nu_vocab_tokenize(lv.vocab, "", 0, 0, NULL, 0, &n, &err);
    assert_int_equal(st, NU_OK);
    assert_int_equal(n, 0);
    st = nu_vocab_tokenize(lv.vocab, NULL, 3, 0, ids, 8, &n, &err);
    assert_int_equal(st, NU_ERR_INVALID_ARG);
    assert_null(nu_vocab_token_text(lv.vocab, 512));
    assert_null(nu_vocab_token_text(lv.vocab, -1));
    assert_string_equal(nu_vocab_token_text(lv.vocab, 403), "▁Once");
    assert_int_equal(nu_vocab_token_type(lv.vocab, 9999), NU_TOKEN_UNDEFINED);
    assert_int_equal(nu_vocab_token_type(lv.vocab, 0), NU_TOKEN_UNKNOWN);
    tv_close(&lv);
}

/* ------------------------------------------------------------------------ */
/* Synthetic vocabularies: metadata errors and corner cases                 */
/* ------------------------------------------------------------------------ */

/* A growing GGUF v3 image with no tensors. */
typedef struct nu_gguf_builder {
    unsigned char *buf;
    size_t n, cap;
    uint64_t n_kv;
} nu_gguf_builder;

static void gb_bytes(nu_gguf_builder *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->buf = realloc(b->buf, b->cap);
        assert_non_null(b->buf);
    }
    memcpy(b->buf + b->n, p, n);
    b->n += n;
}

static void gb_u32(nu_gguf_builder *b, uint32_t x) {
    gb_bytes(b, &x, 4);
}
static void gb_u64(nu_gguf_builder *b, uint64_t x) {
    gb_bytes(b, &x, 8);
}

static void gb_str(nu_gguf_builder *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}

static void gb_key(nu_gguf_builder *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
    b->n_kv++;
}

static void gb_kv_str(nu_gguf_builder *b, const char *key, const char *val) {
    gb_key(b, key, GGUF_STRING);
    gb_str(b, val);
}

static void gb_kv_u32(nu_gguf_builder *b, const char *key, uint32_t val) {
    gb_key(b, key, GGUF_UINT32);
    gb_u32(b, val);
}

static void gb_kv_bool(nu_gguf_builder *b, const char *key, bool val) {
    gb_key(b, key, GGUF_BOOL);
    unsigned char c = val;
    gb_bytes(b, &c, 1);
}

static void gb_kv_strs(nu_gguf_builder *b, const char *key, const char *const *s, size_t n) {
    gb_key(b, key, GGUF_ARRAY);
    gb_u32(b, GGUF_STRING);
    gb_u64(b, n);
    for (size_t i = 0; i < n; i++) gb_str(b, s[i]);
}

static void gb_kv_f32s(nu_gguf_builder *b, const char *key, const float *x, size_t n) {
    gb_key(b, key, GGUF_ARRAY);
    gb_u32(b, GGUF_FLOAT32);
    gb_u64(b, n);
    gb_bytes(b, x, 4 * n);
}

static void gb_kv_i32s(nu_gguf_builder *b, const char *key, const int32_t *x, size_t n) {
    gb_key(b, key, GGUF_ARRAY);
    gb_u32(b, GGUF_INT32);
    gb_u64(b, n);
    gb_bytes(b, x, 4 * n);
}

/* The final image: header, then the key-value pairs written so far. */
static unsigned char *gb_finish(nu_gguf_builder *b, size_t *size) {
    nu_gguf_builder out = {0};
    gb_bytes(&out, "GGUF", 4);
    gb_u32(&out, 3);
    gb_u64(&out, 0);
    gb_u64(&out, b->n_kv);
    gb_bytes(&out, b->buf, b->n);
    free(b->buf);
    *size = out.n;
    return out.buf;
}

/* Loads a vocabulary from a built image; returns the status (and the vocab
 * and file in *lv on success, the message in err). */
static nu_status gb_load(nu_gguf_builder *b, tv_vocab *lv, unsigned char **image, nu_error *err) {
    size_t size;
    *image = gb_finish(b, &size);
    memset(lv, 0, sizeof *lv);
    nu_status st = nu_gguf_open_memory(*image, size, &lv->file, err);
    if (st) fail_msg("nu_gguf_open_memory: %s", err->message);
    st = nu_vocab_load(lv->file, &lv->vocab, err);
    if (st) nu_gguf_close(lv->file);
    return st;
}

/* A small "llama" vocabulary: <unk> <s> </s> ▁ a b c ab abc(unused) aa x y. */
static const char *const tiny_tokens[] = {"<unk>", "<s>", "</s>", "▁",  "a",  "b",
                                          "c",     "ab",  "abc",  "aa", "xy", "<me>"};
static const float tiny_scores[] = {0, 0, 0, -1, -2, -2, -2, -1, 0, -3, -1, 0};
static const int32_t tiny_types[] = {2, 3, 3, 1, 1, 1, 1, 1, 5, 1, 1, 4};
#define TINY_N (sizeof tiny_tokens / sizeof tiny_tokens[0])

static void tiny_vocab(nu_gguf_builder *b) {
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(b, "tokenizer.ggml.tokens", tiny_tokens, TINY_N);
    gb_kv_f32s(b, "tokenizer.ggml.scores", tiny_scores, TINY_N);
    gb_kv_i32s(b, "tokenizer.ggml.token_type", tiny_types, TINY_N);
}

static void test_synthetic_merges(void **state) {
    (void)state;
    nu_gguf_builder b = {0};
    tiny_vocab(&b);
    gb_kv_bool(&b, "tokenizer.ggml.add_space_prefix", false);
    gb_kv_bool(&b, "tokenizer.ggml.add_eos_token", true);
    gb_kv_u32(&b, "tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
    tv_vocab lv;
    unsigned char *image;
    nu_error err = {0};
    assert_int_equal(gb_load(&b, &lv, &image, &err), NU_OK);
    const nu_vocab *v = lv.vocab;
    assert_false(nu_vocab_adds_space_prefix(v));
    /* "abc" (unused) is merged, then split back into ab + c */
    int32_t want_abc[] = {7, 6};
    tv_expect_ids(v, "abc", 3, 0, want_abc, 2);
    /* equal scores: the leftmost pair merges first */
    int32_t want_aaa[] = {9, 4};
    tv_expect_ids(v, "aaa", 3, 0, want_aaa, 2);
    /* no byte tokens: an unknown character is <unk>, and so is a run of
     * them (as SentencePiece); spaces are ▁ */
    int32_t want_unk[] = {4, 3, 0, 5};
    tv_expect_ids(v, "a \303\251b", 5, 0, want_unk, 4);
    const char *run = "aéé中b";
    int32_t want_run[] = {4, 0, 5};
    tv_expect_ids(v, run, strlen(run), 0, want_run, 3);
    /* add BOS and EOS */
    int32_t want_bos[] = {1, 7, 2};
    tv_expect_ids(v, "ab", 2, NU_TOKENIZE_ADD_BOS, want_bos, 3);
    /* a user-defined token is always matched */
    int32_t want_me[] = {4, 11, 5};
    tv_expect_ids(v, "a<me>b", 6, 0, want_me, 3);
    /* the unused token still renders as text */
    char out[8];
    assert_int_equal(nu_vocab_token_to_bytes(v, 8, false, out, sizeof out), 3);
    nu_vocab_free(lv.vocab);
    nu_gguf_close(lv.file);
    free(image);
}

/* Builds the tiny vocabulary with one change made by edit, expecting status. */
static void expect_load_error(void (*edit)(nu_gguf_builder *), nu_status want, const char *needle) {
    nu_gguf_builder b = {0};
    edit(&b);
    tv_vocab lv;
    unsigned char *image;
    nu_error err = {0};
    nu_status st = gb_load(&b, &lv, &image, &err);
    if (st != want) fail_msg("expected status %d, got %d (%s)", want, st, err.message);
    if (!strstr(err.message, needle)) fail_msg("message '%s' lacks '%s'", err.message, needle);
    assert_null(strchr(err.message, '\n'));
    free(image);
}

static void edit_bert(nu_gguf_builder *b) {
    gb_kv_str(b, "tokenizer.ggml.model", "bert");
    gb_kv_strs(b, "tokenizer.ggml.tokens", tiny_tokens, TINY_N);
}

static void edit_no_tokens(nu_gguf_builder *b) {
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
}

static void edit_no_model(nu_gguf_builder *b) {
    gb_kv_strs(b, "tokenizer.ggml.tokens", tiny_tokens, TINY_N);
}

static void edit_short_scores(nu_gguf_builder *b) {
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(b, "tokenizer.ggml.tokens", tiny_tokens, TINY_N);
    gb_kv_f32s(b, "tokenizer.ggml.scores", tiny_scores, TINY_N - 1);
}

static void edit_bad_type(nu_gguf_builder *b) {
    int32_t types[TINY_N];
    memcpy(types, tiny_types, sizeof types);
    types[4] = 9;
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(b, "tokenizer.ggml.tokens", tiny_tokens, TINY_N);
    gb_kv_i32s(b, "tokenizer.ggml.token_type", types, TINY_N);
}

static void edit_bad_utf8(nu_gguf_builder *b) {
    const char *tokens[] = {"<unk>", "ok", "bad\xC3"};
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(b, "tokenizer.ggml.tokens", tokens, 3);
}

static void edit_bad_byte_token(nu_gguf_builder *b) {
    int32_t types[TINY_N];
    memcpy(types, tiny_types, sizeof types);
    types[10] = 6; /* "xy" as a byte token */
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(b, "tokenizer.ggml.tokens", tiny_tokens, TINY_N);
    gb_kv_i32s(b, "tokenizer.ggml.token_type", types, TINY_N);
}

static void edit_bos_string(nu_gguf_builder *b) {
    tiny_vocab(b);
    gb_kv_str(b, "tokenizer.ggml.bos_token_id", "1");
}

static void edit_flag_int(nu_gguf_builder *b) {
    tiny_vocab(b);
    gb_kv_u32(b, "tokenizer.ggml.add_bos_token", 1);
}

static void edit_scores_strings(nu_gguf_builder *b) {
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(b, "tokenizer.ggml.tokens", tiny_tokens, TINY_N);
    gb_kv_strs(b, "tokenizer.ggml.scores", tiny_tokens, TINY_N);
}

static void test_metadata_errors(void **state) {
    (void)state;
    expect_load_error(edit_bert, NU_ERR_UNSUPPORTED, "bert");
    expect_load_error(edit_no_tokens, NU_ERR_FORMAT, "tokenizer.ggml.tokens");
    expect_load_error(edit_no_model, NU_ERR_FORMAT, "tokenizer.ggml.model");
    expect_load_error(edit_short_scores, NU_ERR_FORMAT, "tokenizer.ggml.scores");
    expect_load_error(edit_bad_type, NU_ERR_FORMAT, "token 4");
    expect_load_error(edit_bad_utf8, NU_ERR_FORMAT, "token 2");
    expect_load_error(edit_bad_byte_token, NU_ERR_FORMAT, "token 10");
    expect_load_error(edit_bos_string, NU_ERR_FORMAT, "bos_token_id");
    expect_load_error(edit_flag_int, NU_ERR_FORMAT, "add_bos_token");
    expect_load_error(edit_scores_strings, NU_ERR_FORMAT, "tokenizer.ggml.scores");
}

/* Out-of-range special ids mean "none"; minimal metadata gets defaults. */
static void test_metadata_defaults(void **state) {
    (void)state;
    nu_gguf_builder b = {0};
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", tiny_tokens, TINY_N);
    gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 500);
    tv_vocab lv;
    unsigned char *image;
    nu_error err = {0};
    assert_int_equal(gb_load(&b, &lv, &image, &err), NU_OK);
    assert_int_equal(nu_vocab_bos(lv.vocab), 1);
    assert_int_equal(nu_vocab_eos(lv.vocab), -1);
    assert_true(nu_vocab_adds_bos(lv.vocab));
    assert_true(nu_vocab_adds_space_prefix(lv.vocab));
    assert_int_equal(nu_vocab_token_type(lv.vocab, 4), NU_TOKEN_NORMAL);
    nu_vocab_free(lv.vocab);
    nu_gguf_close(lv.file);
    free(image);
}

/* gpt-oss's harmony markers (o200k_harmony stores them all as control
 * tokens, <|return|> the EOS): as llama.cpp's vocabulary loader treats them,
 * <|return|> and <|call|> end generation, <|end|> then does not (it ends one
 * message of an answer) and is shown, as are <|channel|>, <|message|>,
 * <|start|> and <|constrain|>; without <|return|> and <|call|> (Phi-3),
 * <|end|> still ends generation. */
static void harmony_vocab(nu_gguf_builder *b, bool with_call) {
    static const char *const tokens[] = {"<unk>",   "<s>",        "</s>",          "\xe2\x96\x81",
                                         "a",       "<|start|>",  "<|channel|>",   "<|message|>",
                                         "<|end|>", "<|return|>", "<|constrain|>", "<|call|>"};
    static const float scores[12] = {0};
    static const int32_t types[] = {2, 3, 3, 1, 1, 3, 3, 3, 3, 3, 3, 3};
    size_t n = with_call ? 12 : 11;
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(b, "tokenizer.ggml.tokens", tokens, n);
    gb_kv_f32s(b, "tokenizer.ggml.scores", scores, n);
    gb_kv_i32s(b, "tokenizer.ggml.token_type", types, n);
    gb_kv_u32(b, "tokenizer.ggml.eos_token_id", 9);
}

static void test_harmony_tokens(void **state) {
    (void)state;
    for (int with_call = 1; with_call >= 0; with_call--) {
        nu_gguf_builder b = {0};
        harmony_vocab(&b, with_call);
        tv_vocab lv;
        unsigned char *image;
        nu_error err = {0};
        assert_int_equal(gb_load(&b, &lv, &image, &err), NU_OK);
        const nu_vocab *v = lv.vocab;
        assert_true(nu_vocab_is_eog(v, 9)); /* <|return|> */
        assert_int_equal(nu_vocab_is_eog(v, 11), with_call == 1);
        assert_int_equal(nu_vocab_is_eog(v, 8), with_call == 0); /* <|end|> */
        assert_int_equal(nu_vocab_token_type(v, 8),
                         with_call ? NU_TOKEN_USER_DEFINED : NU_TOKEN_CONTROL);
        for (int32_t id = 5; id <= 10; id++) {
            if (id == 8 || id == 9) continue;
            assert_int_equal(nu_vocab_token_type(v, id), NU_TOKEN_USER_DEFINED);
        }
        assert_int_equal(nu_vocab_token_type(v, 9), NU_TOKEN_CONTROL);
        /* shown in generated text without asking for special tokens */
        char out[32];
        assert_int_equal(nu_vocab_token_to_bytes(v, 6, false, out, sizeof out), 11);
        assert_memory_equal(out, "<|channel|>", 11);
        assert_int_equal(nu_vocab_token_to_bytes(v, 9, false, out, sizeof out), 0);
        nu_vocab_free(lv.vocab);
        nu_gguf_close(lv.file);
        free(image);
    }
}

/* A byte-level BPE vocabulary loads (texts, types, ids, detokenizing) and
 * tokenizes (test_tokenizer_bpe.c tests that in depth). */
static void test_gpt2_vocab(void **state) {
    (void)state;
    tv_vocab lv = tv_open("vocab/ggml-vocab-gpt-2.gguf");
    const nu_vocab *v = lv.vocab;
    assert_string_equal(nu_vocab_model_name(v), "gpt2");
    assert_int_equal(nu_vocab_n_tokens(v), 50257);
    assert_int_equal(nu_vocab_eos(v), 50256);
    assert_true(nu_vocab_is_eog(v, 50256));
    assert_false(nu_vocab_adds_space_prefix(v));
    int32_t the = tv_find_token(v, "\xC4\xA0the"); /* "Ġthe" */
    assert_true(the >= 0);
    char out[64];
    assert_int_equal(nu_vocab_token_to_bytes(v, the, false, out, sizeof out), 4);
    assert_memory_equal(out, " the", 4);
    int32_t nl = tv_find_token(v, "\xC4\x8A"); /* "Ċ" = newline */
    assert_true(nl >= 0);
    assert_int_equal(nu_vocab_token_to_bytes(v, nl, false, out, sizeof out), 1);
    assert_int_equal(out[0], '\n');
    int32_t ids[4];
    size_t n;
    nu_error err = {0};
    assert_int_equal(nu_vocab_tokenize(v, "hi", 2, 0, ids, 4, &n, &err), NU_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], tv_find_token(v, "hi"));
    tv_close(&lv);
}

/* The public functions of nucleus.h on a model loaded for its vocabulary. */
static void test_public_api(void **state) {
    (void)state;
    nu_model_params params = nu_model_default_params();
    params.mode = NU_LOAD_VOCAB_ONLY;
    nu_model *m = NULL;
    nu_error err = {0};
    if (nu_model_load(nu_test_shared("models/stories260K.gguf"), &params, &m, &err)) {
        fail_msg("nu_model_load: %s", err.message);
    }
    int32_t ids[16];
    size_t n = 0;
    assert_int_equal(nu_tokenize(m, "Once upon a time", 16, NU_TOKENIZE_ADD_BOS, ids, 16, &n, &err),
                     NU_OK);
    static const int32_t want[] = {1, 403, 407, 261, 378};
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    assert_string_equal(nu_token_text(m, 403), "▁Once");
    assert_null(nu_token_text(m, 512));
    assert_int_equal(nu_token_get_type(m, 13), NU_TOKEN_BYTE);
    char buf[64];
    assert_int_equal(nu_token_to_bytes(m, 13, false, buf, sizeof buf), 1);
    assert_int_equal(buf[0], '\n');
    assert_int_equal(nu_token_bos(m), 1);
    assert_int_equal(nu_token_eos(m), 2);
    assert_true(nu_token_is_eog(m, 2));
    assert_true(nu_model_adds_bos(m));
    nu_detokenizer d;
    nu_detokenizer_init(&d, m, false, true);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) at += nu_detokenizer_push(&d, ids[i], buf + at, sizeof buf - at);
    at += nu_detokenizer_flush(&d, buf + at, sizeof buf - at);
    assert_int_equal(at, 16);
    assert_memory_equal(buf, "Once upon a time", 16);
    nu_model_free(m);
    /* no model: errors and neutral answers, never a crash */
    assert_int_equal(nu_tokenize(NULL, "x", 1, 0, ids, 16, &n, &err), NU_ERR_INVALID_ARG);
    assert_int_equal(n, 0);
    assert_null(nu_token_text(NULL, 1));
    assert_int_equal(nu_token_bos(NULL), -1);
    assert_false(nu_token_is_eog(NULL, 2));
}

int main(void) {
    // clang-format off
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_llama_spm),
        cmocka_unit_test(test_vectors_phi3),
        cmocka_unit_test(test_stories260k_prompts),
        cmocka_unit_test(test_round_trip_llama_spm),
        cmocka_unit_test(test_round_trip_phi3),
        cmocka_unit_test(test_round_trip_baichuan),
        cmocka_unit_test(test_round_trip_stories),
        cmocka_unit_test(test_byte_fallback),
        cmocka_unit_test(test_detokenizer_invalid),
        cmocka_unit_test(test_special_tokens_llama),
        cmocka_unit_test(test_special_tokens_phi3),
        cmocka_unit_test(test_long_input),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_buffer_and_args),
        cmocka_unit_test(test_synthetic_merges),
        cmocka_unit_test(test_metadata_errors),
        cmocka_unit_test(test_metadata_defaults),
        cmocka_unit_test(test_harmony_tokens),
        cmocka_unit_test(test_gpt2_vocab),
        cmocka_unit_test(test_public_api),
    };
    // clang-format on
    return cmocka_run_group_tests(tests, NULL, NULL);
}
