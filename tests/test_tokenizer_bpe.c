/* test_tokenizer_bpe.c - byte-level BPE ("gpt2") vocabularies.
 *
 * Golden tests: every test vector of the byte-level vocabularies in
 * shared/vocab (ids from the Hugging Face tokenizers, add-special and
 * parse-special off) and the pieces each pre-tokenizer family cuts a text
 * into (as Hugging Face's pre-tokenizers cut it). Then round trips on every
 * BPE vocabulary, special and user-defined tokens, BOS rules, streaming
 * detokenizing of characters split over byte tokens, malformed and long
 * input, and merge-table details on small vocabularies built here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "pretokenize.h"
#include "test_support.h"
#include "vocab_support.h"
#include "tokenizer.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static const char *const nu_bpe_vocabs[] = {"gpt-2", "deepseek-coder", "falcon", "starcoder",
                                            "gpt-neox"};
#define N_BPE_VOCABS (sizeof nu_bpe_vocabs / sizeof nu_bpe_vocabs[0])

/* The concatenated token_to_bytes of ids (malloc'ed, length in *len). */
static char *join_bytes(const nu_vocab *v, const int32_t *ids, size_t n, bool special,
                        size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += nu_vocab_token_to_bytes(v, ids[i], special, NULL, 0);
    char *out = malloc(total + 1);
    assert_non_null(out);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        at += nu_vocab_token_to_bytes(v, ids[i], special, out + at, total - at);
    }
    assert_int_equal(at, total);
    *len = at;
    return out;
}

/* ------------------------------------------------------------------------ */
/* Golden test vectors                                                      */
/* ------------------------------------------------------------------------ */

/* Runs every test vector of shared/vocab/ggml-vocab-NAME.gguf.{inp,out}. */
static void run_vectors(const char *name) {
    tv_vocab lv = tv_open_named(name);
    char rel[256], inp[4096], outp[4096];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    snprintf(inp, sizeof inp, "%s", nu_test_shared(rel));
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    snprintf(outp, sizeof outp, "%s", nu_test_shared(rel));
    tv_check_vectors(lv.vocab, name, inp, outp, 46);
    tv_close(&lv);
}

static void test_vectors_gpt2(void **state) {
    (void)state;
    run_vectors("gpt-2");
}

static void test_vectors_deepseek_coder(void **state) {
    (void)state;
    run_vectors("deepseek-coder");
}

static void test_vectors_falcon(void **state) {
    (void)state;
    run_vectors("falcon");
}

static void test_vectors_starcoder(void **state) {
    (void)state;
    run_vectors("starcoder");
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenizer families                                                   */
/* ------------------------------------------------------------------------ */

/* Collects pieces as "|"-joined text. */
typedef struct piece_log {
    char buf[1024];
    size_t n;
} piece_log;

static nu_status log_piece(void *ctx, const char *s, size_t n, nu_error *err) {
    (void)err;
    piece_log *log = ctx;
    if (log->n + n + 2 >= sizeof log->buf) return NU_ERR_BUFFER_SMALL;
    if (log->n) log->buf[log->n++] = '|';
    memcpy(log->buf + log->n, s, n);
    log->n += n;
    log->buf[log->n] = 0;
    return NU_OK;
}

/* Checks the pieces a family cuts text into (joined with '|'). */
static void expect_pieces(const char *family, const char *text, const char *want) {
    pretokenizer *p;
    nu_pretok_scratch *s;
    bool known;
    nu_error err = {0};
    assert_int_equal(nu_pretokenizer_new(family, strlen(family), &p, &known, &err), NU_OK);
    assert_true(known);
    assert_int_equal(nu_pretok_scratch_new(&s, &err), NU_OK);
    piece_log log = {{0}, 0};
    assert_int_equal(nu_pretokenize(p, s, text, strlen(text), log_piece, &log, &err), NU_OK);
    if (strcmp(log.buf, want) != 0) fail_msg("%s:\n got  %s\n want %s", family, log.buf, want);
    nu_pretok_scratch_free(s);
    nu_pretokenizer_free(p);
}

/* The pieces of two texts for each family, as Hugging Face's pre-tokenizers
 * (Split, Digits, Punctuation, ByteLevel) cut them. Note DeepSeek LLM: its
 * punctuation class "[!-/:-~...]" spans the ASCII letters, so it cuts " café"
 * into " caf" and "é"; and the CJK range U+0800..U+4E00 of the DeepSeek
 * patterns holds the em dash. Falcon splits "½" (bytes C2 BD) because it
 * looks for digits after the byte-level mapping, where 0xBD is "½". */
static void test_pretokenizer_families(void **state) {
    (void)state;
    const char *s1 = "Hello WORLD's 12345 don't  x\n\\n 3.5\xC2\xBD caf\xC3\xA9\xE2\x80\x94!!";
    expect_pieces("gpt-2", s1,
                  "Hello| WORLD|'s| 12345| don|'t| | x|\n|\\|n| 3|.|5\xC2\xBD| caf\xC3\xA9|"
                  "\xE2\x80\x94!!");
    expect_pieces("llama3", s1,
                  "Hello| WORLD|'s| |123|45| don|'t| | x|\n|\\n| |3|.|5\xC2\xBD| caf\xC3\xA9|"
                  "\xE2\x80\x94!!");
    expect_pieces("qwen2", s1,
                  "Hello| WORLD|'s| |1|2|3|4|5| don|'t| | x|\n|\\n| |3|.|5|\xC2\xBD| caf\xC3\xA9|"
                  "\xE2\x80\x94!!");
    expect_pieces("deepseek-coder", s1,
                  "Hello| WORLD|'|s| |1|2|3|4|5| don|'|t| | x|\n|\\|n| |3|.|5|\xC2\xBD|"
                  " caf\xC3\xA9|\xE2\x80\x94|!!");
    expect_pieces("deepseek-llm", s1,
                  "Hello| WORLD|'|s| |1|2|3|4|5| don|'|t| | x|\n|\\|n| |3|.|5|\xC2\xBD| caf|"
                  "\xC3\xA9|\xE2\x80\x94|!!");
    expect_pieces("falcon", s1,
                  "Hello| WORLD|'|s| |123|45| don|'|t| | x|\n|\\|n| |3|.|5|\xC2|\xBD|"
                  " caf\xC3\xA9|\xE2\x80\x94!!");
    expect_pieces("starcoder", s1,
                  "Hello| WORLD|'s| |1|2|3|4|5| don|'t| | x|\n|\\|n| |3|.|5|\xC2\xBD|"
                  " caf\xC3\xA9|\xE2\x80\x94!!");
    const char *s2 = "I'M here!\n  \n\t\xE6\x88\x91\xE6\x83\xB3"
                     "apple1314151 \xEA\xB0\x80";
    expect_pieces("gpt-2", s2,
                  "I|'|M| here|!|\n  \n|\t|\xE6\x88\x91\xE6\x83\xB3"
                  "apple|1314151| \xEA\xB0\x80");
    expect_pieces("llama3", s2,
                  "I|'M| here|!\n|  \n|\t\xE6\x88\x91\xE6\x83\xB3"
                  "apple|131|415|1| \xEA\xB0\x80");
    expect_pieces("qwen2", s2,
                  "I|'M| here|!\n|  \n|\t\xE6\x88\x91\xE6\x83\xB3"
                  "apple|1|3|1|4|1|5|1| \xEA\xB0\x80");
    expect_pieces("deepseek-coder", s2,
                  "I|'|M| here|!|\n|  |\n|\t|\xE6\x88\x91\xE6\x83\xB3|apple|1|3|1|4|1|5|1| |"
                  "\xEA\xB0\x80");
    /* the aliases resolve to their families */
    expect_pieces("llama-bpe", "123456", "123|456");
    expect_pieces("command-r", "x12", "x|1|2");
    expect_pieces("smollm", "x12", "x|1|2");
    expect_pieces("refact", "x12", "x|1|2");
    expect_pieces("mpt", " 12's", " 12|'s");
    expect_pieces("olmo", " 12's", " 12|'s");
    expect_pieces("phi-2", " 12's", " 12|'s");
    expect_pieces("default", " 12's", " 12|'s");
}

/* An unknown name gives GPT-2's pre-tokenizer and says so; so does an
 * absent one (len 0), but as a known default. */
static void test_pretokenizer_unknown(void **state) {
    (void)state;
    pretokenizer *p;
    bool known = true;
    nu_error err = {0};
    assert_int_equal(nu_pretokenizer_new("made-up", 7, &p, &known, &err), NU_OK);
    assert_false(known);
    assert_string_equal(nu_pretokenizer_family(p), "gpt-2");
    nu_pretokenizer_free(p);
    assert_int_equal(nu_pretokenizer_new("", 0, &p, &known, &err), NU_OK);
    assert_true(known);
    assert_string_equal(nu_pretokenizer_family(p), "gpt-2");
    assert_false(nu_pretokenizer_ignores_merges(p));
    nu_pretokenizer_free(p);
    assert_int_equal(nu_pretokenizer_new("llama3", 6, &p, &known, &err), NU_OK);
    assert_true(nu_pretokenizer_ignores_merges(p));
    assert_true(nu_pretokenizer_adds_bos(p));
    nu_pretokenizer_free(p);
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                              */
/* ------------------------------------------------------------------------ */

/* Extra texts beyond the .inp files: code, CJK, emoji with joiners, control
 * characters, long whitespace. */
static const char *const extra_texts[] = {
    "int main(void) {\n\treturn 0; // done\n}\n",
    "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8 apple \xE5\xB7\xA5\xE4\xBD\x9C 1314151 \xE5\xA4\xA9",
    "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7 \xE2\x9D\xA4\xEF\xB8\x8F",
    "tab\tnew\nline\r\nform\f  \t\t   end   ",
    "<|endoftext|> <fim_prefix> >>TITLE<< <pad> [PAD50300]",
    "\xC2\xA0\xE3\x80\x80\xE2\x80\x8B\xC2\x85\xE2\x80\xA8 mixed spaces",
};

/* detokenize(tv_tokenize(x)) == x for one text, by token_to_bytes and by the
 * streaming detokenizer. */
static void check_round_trip(const nu_vocab *v, const char *name, const char *text, size_t len) {
    size_t n, out_len, stream_len;
    int32_t *ids = tv_tokenize(v, text, len, 0, &n);
    char *out = join_bytes(v, ids, n, false, &out_len);
    if (out_len != len || memcmp(out, text, len) != 0) {
        fail_msg("%s: round trip of '%.*s' gave '%.*s'", name, (int)len, text, (int)out_len, out);
    }
    char *streamed = tv_detokenize(v, ids, n, false, false, &stream_len);
    assert_int_equal(stream_len, len);
    assert_memory_equal(streamed, text, len);
    free(streamed);
    free(out);
    free(ids);
}

static void test_round_trip(void **state) {
    (void)state;
    for (size_t k = 0; k < N_BPE_VOCABS; k++) {
        tv_vocab lv = tv_open_named(nu_bpe_vocabs[k]);
        tv_texts t = tv_read_texts(nu_test_shared("vocab/ggml-vocab-gpt-2.gguf.inp"));
        for (size_t i = 0; i < t.n; i++)
            check_round_trip(lv.vocab, nu_bpe_vocabs[k], t.text[i], t.len[i]);
        for (size_t i = 0; i < sizeof extra_texts / sizeof extra_texts[0]; i++) {
            check_round_trip(lv.vocab, nu_bpe_vocabs[k], extra_texts[i], strlen(extra_texts[i]));
        }
        tv_free_texts(&t);
        tv_close(&lv);
    }
}

/* GPT-NeoX has no tokenizer.ggml.pre (GPT-2's split, no warning) and
 * user-defined tokens of 2..24 spaces, which are matched in the text first,
 * as Hugging Face matches added tokens. */
static void test_gpt_neox(void **state) {
    (void)state;
    tv_vocab lv = tv_open_named("gpt-neox");
    const nu_vocab *v = lv.vocab;
    assert_string_equal(nu_vocab_model_name(v), "gpt2");
    assert_int_equal(nu_vocab_n_tokens(v), 50432);
    assert_null(nu_vocab_warning(v));
    assert_false(nu_vocab_adds_bos(v));
    int32_t four = tv_find_token(v, "    ");
    assert_true(four >= 0);
    assert_int_equal(nu_vocab_token_type(v, four), NU_TOKEN_USER_DEFINED);
    int32_t hello = tv_find_token(v, "Hello");
    assert_true(hello >= 0);
    int32_t want[] = {four, hello};
    tv_expect_str(v, "    Hello", 0, want, 2);
    tv_close(&lv);
}

/* ------------------------------------------------------------------------ */
/* Special tokens and BOS                                                   */
/* ------------------------------------------------------------------------ */

/* Control tokens become their id only with NU_TOKENIZE_PARSE_SPECIAL;
 * otherwise their text is tokenized like any other. */
static void test_special_tokens_gpt2(void **state) {
    (void)state;
    tv_vocab lv = tv_open_named("gpt-2");
    const nu_vocab *v = lv.vocab;
    const char *text = "Hi<|endoftext|> there";
    size_t n;
    int32_t *ids = tv_tokenize(v, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL, &n);
    int32_t hi = tv_find_token(v, "Hi"), there = tv_find_token(v, "\xC4\xA0there");
    int32_t want[] = {hi, 50256, there};
    assert_int_equal(n, 3);
    assert_memory_equal(ids, want, sizeof want);
    /* rendered only when asked */
    size_t len;
    char *out = join_bytes(v, ids, n, false, &len);
    assert_int_equal(len, 8);
    assert_memory_equal(out, "Hi there", 8);
    free(out);
    out = join_bytes(v, ids, n, true, &len);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(out, text, len);
    free(out);
    free(ids);
    /* without the flag: plain text, no 50256, and it round-trips */
    ids = tv_tokenize(v, text, strlen(text), 0, &n);
    assert_true(n > 3);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 50256);
    free(ids);
    check_round_trip(v, "gpt-2", text, strlen(text));
    tv_close(&lv);
}

/* DeepSeek Coder: user-defined tokens (<|User|>, and "ü", "õ", ... for the
 * bytes its BPE vocabulary lacks) are always matched; its BOS is a control
 * token, and the file asks for BOS. */
static void test_special_tokens_deepseek(void **state) {
    (void)state;
    tv_vocab lv = tv_open_named("deepseek-coder");
    const nu_vocab *v = lv.vocab;
    assert_true(nu_vocab_adds_bos(v));
    assert_int_equal(nu_vocab_bos(v), 32013);
    int32_t user = tv_find_token(v, "<|User|>");
    assert_int_equal(user, 32019);
    size_t n;
    int32_t *ids = tv_tokenize(v, "<|User|>hi", 10, 0, &n);
    assert_true(n >= 2);
    assert_int_equal(ids[0], user);
    free(ids);
    const char *bos_text = "<\xEF\xBD\x9C"
                           "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
    ids = tv_tokenize(v, bos_text, strlen(bos_text), NU_TOKENIZE_PARSE_SPECIAL, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 32013);
    free(ids);
    ids = tv_tokenize(v, bos_text, strlen(bos_text), 0, &n);
    assert_true(n > 1);
    free(ids);
    /* BOS only with the flag */
    ids = tv_tokenize(v, "x", 1, NU_TOKENIZE_ADD_BOS, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 32013);
    free(ids);
    ids = tv_tokenize(v, "x", 1, 0, &n);
    assert_int_equal(n, 1);
    free(ids);
    tv_close(&lv);
}

/* StarCoder's FIM tokens; GPT-2, Falcon, StarCoder and NeoX files say
 * nothing about BOS, and byte-level vocabularies then add none. */
static void test_special_tokens_starcoder(void **state) {
    (void)state;
    tv_vocab lv = tv_open_named("starcoder");
    const nu_vocab *v = lv.vocab;
    const char *text = "<fim_prefix>def f():<fim_suffix>\n<fim_middle>";
    size_t n;
    int32_t *ids = tv_tokenize(v, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL, &n);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[n - 1], 2);
    free(ids);
    check_round_trip(v, "starcoder", text, strlen(text));
    tv_close(&lv);
    static const char *const no_bos[] = {"gpt-2", "falcon", "starcoder", "gpt-neox"};
    for (size_t i = 0; i < 4; i++) {
        lv = tv_open_named(no_bos[i]);
        assert_false(nu_vocab_adds_bos(lv.vocab));
        assert_false(nu_vocab_adds_space_prefix(lv.vocab));
        ids = tv_tokenize(lv.vocab, "Hello", 5, NU_TOKENIZE_ADD_BOS, &n);
        assert_int_equal(n, 1);
        free(ids);
        tv_close(&lv);
    }
}

/* ------------------------------------------------------------------------ */
/* Streaming and malformed input                                            */
/* ------------------------------------------------------------------------ */

/* Characters that GPT-2 spells as several byte tokens come out of the
 * streaming detokenizer whole: each chunk is well-formed UTF-8. */
static void test_streaming_split_characters(void **state) {
    (void)state;
    tv_vocab lv = tv_open_named("gpt-2");
    const nu_vocab *v = lv.vocab;
    const char *text = "\xF0\x9F\xA6\x99 F\xC3\xBChrer \xE6\x88\x91\xE6\x83\xB3 "
                       "\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F \xE1\x9E\x80";
    size_t n, len;
    int32_t *ids = tv_tokenize(v, text, strlen(text), 0, &n);
    /* the test means something only if some token is part of a character */
    size_t partial = 0;
    for (size_t i = 0; i < n; i++) {
        char buf[64];
        size_t k = nu_vocab_token_to_bytes(v, ids[i], false, buf, sizeof buf);
        partial += !tv_valid_utf8(buf, k);
    }
    assert_true(partial >= 4);
    char *out = tv_detokenize(v, ids, n, false, false, &len);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(out, text, len);
    free(out);
    /* a stream cut in the middle of a character: nothing half-way, then
     * U+FFFD at the flush (the first token holds the llama's first bytes) */
    char buf[16];
    size_t first = nu_vocab_token_to_bytes(v, ids[0], false, buf, sizeof buf);
    assert_true(first >= 1 && first < 4 && (unsigned char)buf[0] == 0xF0);
    nu_detokenizer d;
    nu_detokenizer_init(&d, NULL, false, false);
    assert_int_equal(nu_vocab_detokenize_push(v, &d, ids[0], buf, sizeof buf), 0);
    assert_int_equal(nu_vocab_detokenize_flush(&d, buf, sizeof buf), 3);
    assert_memory_equal(buf, "\xEF\xBF\xBD", 3);
    free(ids);
    tv_close(&lv);
}

/* A small fixed generator for the random inputs. */
static uint32_t next_random(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Malformed UTF-8 never crashes and gives valid ids; GPT-2 has a token for
 * every byte, so its round trip is exact even then. */
static void test_invalid_utf8(void **state) {
    (void)state;
    static const char *const cases[] = {
        "\xFF",
        "\xC0\x80",
        "a\200b",
        "\xED\xA0\x80",
        "\xF0\x9F\xA6",
        "\xE2\x96",
        "x\xE2\x96",
        "\xF4\x90\x80\x80",
        "\xC3",
        " \xFE\xFF ",
        "Hello \xC3(world",
        "12\xB2\xBD"
        "3",
    };
    uint32_t seed = 12345;
    for (size_t k = 0; k < N_BPE_VOCABS; k++) {
        tv_vocab lv = tv_open_named(nu_bpe_vocabs[k]);
        const nu_vocab *v = lv.vocab;
        bool exact = strcmp(nu_bpe_vocabs[k], "gpt-2") == 0;
        for (size_t c = 0; c < 300; c++) {
            char rnd[64];
            const char *text = c < 12 ? cases[c] : rnd;
            size_t len = c < 12 ? strlen(cases[c]) : 1 + next_random(&seed) % sizeof rnd;
            for (size_t i = 0; c >= 12 && i < len; i++) rnd[i] = (char)next_random(&seed);
            for (unsigned flags = 0; flags <= NU_TOKENIZE_PARSE_SPECIAL;
                 flags += NU_TOKENIZE_PARSE_SPECIAL) {
                size_t n, out_len, stream_len;
                int32_t *ids = tv_tokenize(v, text, len, flags, &n);
                for (size_t i = 0; i < n; i++) {
                    assert_true(ids[i] >= 0 && ids[i] < nu_vocab_n_tokens(v));
                }
                char *out = join_bytes(v, ids, n, true, &out_len);
                if (exact) {
                    assert_int_equal(out_len, len);
                    assert_memory_equal(out, text, len);
                }
                free(tv_detokenize(v, ids, n, true, false, &stream_len));
                free(out);
                free(ids);
            }
        }
        tv_close(&lv);
    }
}

/* Long inputs that make one huge piece (letters, digits, CJK without
 * spaces) or many: they finish, and round-trip. */
static void test_long_input(void **state) {
    (void)state;
    const size_t size = 1 << 20;
    char *text = malloc(size + 1);
    assert_non_null(text);
    static const char *const names[] = {"gpt-2", "deepseek-coder"};
    for (size_t k = 0; k < 2; k++) {
        tv_vocab lv = tv_open_named(names[k]);
        static const char *const units[] = {
            "a", " ", "3", "\n", "\xE4\xB8\xAD", "ab ", "\xF0\x9F\xA6\x99"};
        for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
            size_t ul = strlen(units[u]), len = size / ul * ul;
            for (size_t i = 0; i < len; i += ul) memcpy(text + i, units[u], ul);
            clock_t t0 = clock();
            size_t n, out_len;
            int32_t *ids = tv_tokenize(lv.vocab, text, len, 0, &n);
            double ms = 1000.0 * (double)(clock() - t0) / CLOCKS_PER_SEC;
            printf("%s, 1 MB of '%s': %zu tokens in %.1f ms\n", names[k], units[u], n, ms);
            char *out = join_bytes(lv.vocab, ids, n, false, &out_len);
            assert_int_equal(out_len, len);
            assert_memory_equal(out, text, len);
            free(out);
            free(ids);
        }
        tv_close(&lv);
    }
    free(text);
}

/* ------------------------------------------------------------------------ */
/* Small vocabularies built here                                            */
/* ------------------------------------------------------------------------ */

/* Every byte's GPT-2 character (256 tokens, in byte order), then extra. */
static size_t byte_tokens(char storage[256][3], const char **tokens) {
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = b;
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) {
            cp = 0x100 + (b <= 0x20 ? b : b <= 0xA0 ? 33 + b - 0x7F : 67);
        }
        if (cp < 0x80) {
            storage[b][0] = (char)cp;
            storage[b][1] = 0;
        } else {
            storage[b][0] = (char)(0xC0 | (cp >> 6));
            storage[b][1] = (char)(0x80 | (cp & 0x3F));
            storage[b][2] = 0;
        }
        tokens[b] = storage[b];
    }
    return 256;
}

/* Builds a gpt2 vocabulary: the 256 byte tokens (ids 0..255), then extra
 * tokens, the merges, and tokenizer.ggml.pre (NULL: absent). Loads it with
 * the given expected status. */
static nu_status build_vocab(const char *const *extra, size_t n_extra, const char *const *merges,
                             size_t n_merges, const char *pre, int add_bos, tv_vocab *lv,
                             nu_error *err) {
    static char storage[256][3];
    const char *tokens[300];
    size_t n = byte_tokens(storage, tokens);
    for (size_t i = 0; i < n_extra; i++) tokens[n++] = extra[i];
    gw_writer *w = gw_new();
    gw_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) gw_add_str(w, "tokenizer.ggml.pre", pre);
    gw_add_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, tokens, n);
    if (merges) gw_add_arr(w, "tokenizer.ggml.merges", GGUF_STRING, merges, n_merges);
    if (add_bos >= 0) gw_add_bool(w, "tokenizer.ggml.add_bos_token", add_bos != 0);
    gw_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    size_t size;
    memset(lv, 0, sizeof *lv);
    assert_true(gw_emit(w, &lv->image, &size));
    gw_free(w);
    assert_int_equal(nu_gguf_open_memory(lv->image, size, &lv->file, err), NU_OK);
    nu_status st = nu_vocab_load(lv->file, &lv->vocab, err);
    if (st) {
        nu_gguf_close(lv->file);
        free(lv->image);
    }
    return st;
}

/* Merge ranks decide; ignore_merges (Llama 3) outputs a whole piece that is
 * a token even when merges cannot reach it; a pair listed twice keeps its
 * later rank, as in Hugging Face's merge map. */
static void test_merge_rules(void **state) {
    (void)state;
    static const char *const extra[] = {"ab", "bc", "abc", "aa", "aaaa"};
    static const char *const merges[] = {"b c", "a b", "a a", "aa aa"};
    tv_vocab lv;
    nu_error err = {0};
    assert_int_equal(build_vocab(extra, 5, merges, 4, "gpt-2", -1, &lv, &err), NU_OK);
    int32_t a = 'a', c = 'c', ab = 256, bc = 257, aa = 259, aaaa = 260;
    tv_expect_str(lv.vocab, "abc", 0, (int32_t[]){a, bc}, 2);
    tv_expect_str(lv.vocab, "ab", 0, (int32_t[]){ab}, 1);
    tv_expect_str(lv.vocab, "aaaaa", 0, (int32_t[]){aaaa, a}, 2);
    tv_expect_str(lv.vocab, "aaa", 0, (int32_t[]){aa, a}, 2);
    assert_false(nu_vocab_adds_bos(lv.vocab));
    tv_close(&lv);
    /* the same with Llama 3's pre-tokenizer: "abc" is a token, so it is kept */
    assert_int_equal(build_vocab(extra, 5, merges, 4, "llama3", -1, &lv, &err), NU_OK);
    tv_expect_str(lv.vocab, "abc", 0, (int32_t[]){258}, 1);
    tv_expect_str(lv.vocab, "abcc", 0, (int32_t[]){a, bc, c}, 3);
    assert_true(nu_vocab_adds_bos(lv.vocab)); /* the family's default */
    tv_close(&lv);
    assert_int_equal(build_vocab(extra, 5, merges, 4, "llama-bpe", 0, &lv, &err), NU_OK);
    assert_false(nu_vocab_adds_bos(lv.vocab)); /* the file says no */
    tv_close(&lv);
    /* "b c" listed again after "a b": "a b" now ranks first */
    static const char *const dup[] = {"b c", "a b", "b c"};
    assert_int_equal(build_vocab(extra, 5, dup, 3, NULL, -1, &lv, &err), NU_OK);
    tv_expect_str(lv.vocab, "abc", 0, (int32_t[]){ab, c}, 2);
    tv_close(&lv);
}

/* An unknown pre-tokenizer loads with a warning and GPT-2's split; the
 * public nu_model_warning reports it. Missing or malformed merges fail. */
static void test_unknown_pre_and_errors(void **state) {
    (void)state;
    static const char *const extra[] = {"ab"};
    static const char *const merges[] = {"a b"};
    tv_vocab lv;
    nu_error err = {0};
    assert_int_equal(build_vocab(extra, 1, merges, 1, "zeta-9000", -1, &lv, &err), NU_OK);
    const char *warning = nu_vocab_warning(lv.vocab);
    assert_non_null(warning);
    assert_non_null(strstr(warning, "zeta-9000"));
    tv_expect_str(lv.vocab, "ab ab", 0, (int32_t[]){256, ' ', 256}, 3);
    tv_close(&lv);
    assert_int_equal(build_vocab(extra, 1, NULL, 0, "gpt-2", -1, &lv, &err), NU_ERR_FORMAT);
    assert_non_null(strstr(err.message, "tokenizer.ggml.merges"));
    static const char *const bad[] = {"ab"};
    assert_int_equal(build_vocab(extra, 1, bad, 1, "gpt-2", -1, &lv, &err), NU_ERR_FORMAT);
    assert_non_null(strstr(err.message, "merges[0]"));
    /* merges naming tokens that do not exist are skipped */
    static const char *const ghost[] = {"x y", "a b"};
    assert_int_equal(build_vocab(extra, 1, ghost, 2, "gpt-2", -1, &lv, &err), NU_OK);
    tv_expect_str(lv.vocab, "ab", 0, (int32_t[]){256}, 1);
    tv_close(&lv);
    /* the public API on a file with an unknown pre-tokenizer */
    gw_writer *w = gw_new();
    char storage[256][3];
    const char *tokens[256];
    byte_tokens(storage, tokens);
    gw_add_str(w, "general.architecture", "gpt2");
    gw_add_str(w, "tokenizer.ggml.model", "gpt2");
    gw_add_str(w, "tokenizer.ggml.pre", "zeta-9000");
    gw_add_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, tokens, 256);
    gw_add_arr(w, "tokenizer.ggml.merges", GGUF_STRING, (const char *[]){"a b"}, 0);
    const char *path = nu_test_tmp("bpe_unknown_pre.gguf");
    assert_true(gw_write_file(w, path));
    gw_free(w);
    nu_model_params params = nu_model_default_params();
    params.mode = NU_LOAD_VOCAB_ONLY;
    nu_model *m = NULL;
    if (nu_model_load(path, &params, &m, &err)) fail_msg("nu_model_load: %s", err.message);
    assert_non_null(nu_model_warning(m));
    assert_non_null(strstr(nu_model_warning(m), "zeta-9000"));
    nu_model_free(m);
    assert_null(nu_model_warning(NULL));
}

int main(void) {
    // clang-format off
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_gpt2),
        cmocka_unit_test(test_vectors_deepseek_coder),
        cmocka_unit_test(test_vectors_falcon),
        cmocka_unit_test(test_vectors_starcoder),
        cmocka_unit_test(test_pretokenizer_families),
        cmocka_unit_test(test_pretokenizer_unknown),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_gpt_neox),
        cmocka_unit_test(test_special_tokens_gpt2),
        cmocka_unit_test(test_special_tokens_deepseek),
        cmocka_unit_test(test_special_tokens_starcoder),
        cmocka_unit_test(test_streaming_split_characters),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_long_input),
        cmocka_unit_test(test_merge_rules),
        cmocka_unit_test(test_unknown_pre_and_errors),
    };
    // clang-format on
    return cmocka_run_group_tests(tests, NULL, NULL);
}
