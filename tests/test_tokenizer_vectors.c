/* test_tokenizer_vectors.c - the newer vocabularies against their references.
 *
 * 1. The test vectors of shared/vocab for Llama 3, Qwen2, Command-R, Qwen 3.5
 *    and Gemma 4 (ids from the Hugging Face tokenizers).
 * 2. Our own strings (tests/vocab/llamacpp.inp: code, numbers, CJK, emoji,
 *    whitespace runs, mixed scripts, combining marks, special-token-looking
 *    text) against llama.cpp's llama-tokenize on the same vocabularies,
 *    pinned in tests/vocab/llamacpp-NAME.out by tests/vocab/make_refs.mjs.
 * 3. Round trips of all those strings through the detokenizer.
 * 4. Gemma 4's tokenizer ("gemma4": BPE over characters, spaces as U+2581,
 *    byte fallback): its special tokens, BOS and end-of-generation rules, and
 *    the merge rules on a small vocabulary built here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "test_support.h"
#include "tokenizer.h"
#include "vocab_support.h"

/* ------------------------------------------------------------------------ */
/* Reference ids                                                            */
/* ------------------------------------------------------------------------ */

/* shared/vocab/ggml-vocab-NAME.gguf.{inp,out}: n strings, all must match. */
static void shared_vectors(const char *name, size_t n) {
    tv_vocab lv = tv_open_named(name);
    char rel[256], inp[4096], out[4096];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    snprintf(inp, sizeof inp, "%s", nu_test_shared(rel));
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    snprintf(out, sizeof out, "%s", nu_test_shared(rel));
    tv_check_vectors(lv.vocab, name, inp, out, n);
    tv_close(&lv);
}

static void test_shared_vectors(void **state) {
    (void)state;
    shared_vectors("llama-bpe", 46);
    shared_vectors("qwen2", 46);
    shared_vectors("command-r", 46);
    shared_vectors("qwen35", 50);
    shared_vectors("gemma-4", 46);
}

/* The vocabularies make_refs.mjs pinned llama.cpp's ids for. */
static const char *const llamacpp_vocabs[] = {"qwen35",    "gemma-4", "qwen2",    "llama-bpe",
                                              "llama-spm", "gpt-2",   "command-r"};
#define N_LLAMACPP_VOCABS (sizeof llamacpp_vocabs / sizeof llamacpp_vocabs[0])
#define N_OWN_STRINGS 45

static void test_llamacpp_strings(void **state) {
    (void)state;
    char inp[4096], out[4096], label[128];
    snprintf(inp, sizeof inp, "%s/tests/vocab/llamacpp.inp", NU_SOURCE_DIR);
    for (size_t k = 0; k < N_LLAMACPP_VOCABS; k++) {
        tv_vocab lv = tv_open_named(llamacpp_vocabs[k]);
        snprintf(out, sizeof out, "%s/tests/vocab/llamacpp-%s.out", NU_SOURCE_DIR,
                 llamacpp_vocabs[k]);
        snprintf(label, sizeof label, "llama.cpp on %s", llamacpp_vocabs[k]);
        tv_check_vectors(lv.vocab, label, inp, out, N_OWN_STRINGS);
        tv_close(&lv);
    }
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                              */
/* ------------------------------------------------------------------------ */

/* Every string of inp_path comes back exactly from the streaming
 * detokenizer. */
static void round_trips(const nu_vocab *v, const char *name, const char *inp_path) {
    tv_texts t = tv_read_texts(inp_path);
    for (size_t i = 0; i < t.n; i++) {
        size_t n, len;
        int32_t *ids = tv_tokenize(v, t.text[i], t.len[i], 0, &n);
        char *back = tv_detokenize(v, ids, n, false, false, &len);
        if (len != t.len[i] || memcmp(back, t.text[i], len) != 0) {
            fail_msg("%s: '%.*s' came back as '%.*s'", name, (int)t.len[i], t.text[i], (int)len,
                     back);
        }
        free(back);
        free(ids);
    }
    tv_free_texts(&t);
}

static void test_round_trips(void **state) {
    (void)state;
    char own[4096];
    snprintf(own, sizeof own, "%s/tests/vocab/llamacpp.inp", NU_SOURCE_DIR);
    static const char *const names[] = {"qwen35", "gemma-4"};
    for (size_t k = 0; k < 2; k++) {
        tv_vocab lv = tv_open_named(names[k]);
        char rel[256];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", names[k]);
        round_trips(lv.vocab, names[k], nu_test_shared(rel));
        round_trips(lv.vocab, names[k], own);
        tv_close(&lv);
    }
}

/* ------------------------------------------------------------------------ */
/* Gemma 4                                                                  */
/* ------------------------------------------------------------------------ */

/* The real vocabulary: the file's special ids and flags, the control and
 * user-defined tokens, what ends generation (as llama.cpp: <eos>, <turn|>
 * and <|tool_response>, the last typed user-defined in the file but treated
 * as a control token), and byte fallback for characters it lacks. */
static void test_gemma4_vocab(void **state) {
    (void)state;
    tv_vocab lv = tv_open_named("gemma-4");
    const nu_vocab *v = lv.vocab;
    assert_string_equal(nu_vocab_model_name(v), "gemma4");
    assert_int_equal(nu_vocab_n_tokens(v), 262144);
    assert_null(nu_vocab_warning(v));
    assert_true(nu_vocab_adds_bos(v));
    assert_false(nu_vocab_adds_space_prefix(v));
    assert_int_equal(nu_vocab_bos(v), 2);
    assert_int_equal(nu_vocab_eos(v), 1);
    int32_t turn_open = tv_find_token(v, "<|turn>"), turn_close = tv_find_token(v, "<turn|>");
    int32_t tool_response = tv_find_token(v, "<|tool_response>");
    int32_t tool_call = tv_find_token(v, "<|tool_call>");
    assert_int_equal(turn_open, 105);
    assert_int_equal(turn_close, 106);
    assert_true(nu_vocab_is_eog(v, 1));
    assert_true(nu_vocab_is_eog(v, turn_close));
    assert_true(nu_vocab_is_eog(v, tool_response));
    assert_false(nu_vocab_is_eog(v, turn_open));
    assert_false(nu_vocab_is_eog(v, tool_call));
    assert_int_equal(nu_vocab_token_type(v, tool_response), NU_TOKEN_CONTROL);
    assert_int_equal(nu_vocab_token_type(v, tool_call), NU_TOKEN_USER_DEFINED);

    /* BOS only when asked; control tokens only when parsing special text;
     * user-defined ones always */
    int32_t nl = tv_find_token(v, "\n");
    int32_t user = tv_find_token(v, "user");
    assert_true(nl >= 0 && user >= 0);
    tv_expect_str(v, "<|turn>user\n", NU_TOKENIZE_ADD_BOS | NU_TOKENIZE_PARSE_SPECIAL,
                  (int32_t[]){2, turn_open, user, nl}, 4);
    size_t n;
    int32_t *ids = tv_tokenize(v, "<|turn>", 7, 0, &n);
    assert_true(n > 1);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], turn_open);
    free(ids);
    ids = tv_tokenize(v, "<|tool_response>", 16, 0, &n);
    assert_true(n > 1);
    free(ids);
    tv_expect_str(v, "<|tool_call>", 0, (int32_t[]){tool_call}, 1);

    /* U+10348 (Gothic letter hwair) is not a token: its four bytes are */
    static const char hwair[] = "\xF0\x90\x8D\x88";
    int32_t hwair_ids[4];
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned char)hwair[i]);
        hwair_ids[i] = tv_find_token(v, name);
        assert_true(hwair_ids[i] >= 0);
    }
    tv_expect_str(v, hwair, 0, hwair_ids, 4);
    /* and the streaming detokenizer puts the character back together */
    size_t len;
    char *back = tv_detokenize(v, hwair_ids, 4, false, false, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(back, hwair, 4);
    free(back);
    /* a space is written U+2581 in the vocabulary and comes back a space */
    char piece[16];
    int32_t space_a = tv_find_token(v, "\xE2\x96\x81"
                                       "a");
    assert_true(space_a >= 0);
    assert_int_equal(nu_vocab_token_to_bytes(v, space_a, false, piece, sizeof piece), 2);
    assert_memory_equal(piece, " a", 2);
    tv_close(&lv);
}

/* Malformed UTF-8 gives byte tokens and comes back exactly (the vocabulary
 * has a token for every byte). */
static void test_gemma4_malformed(void **state) {
    (void)state;
    tv_vocab lv = tv_open_named("gemma-4");
    static const char *const cases[] = {"\xFF",         "\xC0\x80",   "a\200b", "\xED\xA0\x80",
                                        "\xF0\x9F\xA6", "x \xE2\x96", "\xC3",   " \xFE\xFF \n"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n, len = strlen(cases[c]), at = 0;
        int32_t *ids = tv_tokenize(lv.vocab, cases[c], len, 0, &n);
        char buf[64];
        for (size_t i = 0; i < n; i++) {
            at += nu_vocab_token_to_bytes(lv.vocab, ids[i], false, buf + at, sizeof buf - at);
        }
        assert_int_equal(at, len);
        assert_memory_equal(buf, cases[c], len);
        free(ids);
    }
    tv_close(&lv);
}

/* A "gemma4" vocabulary: <pad> <eos> <bos> <unk>, the 256 byte tokens
 * (ids 4..259), then extra (ids 260..), with the given merges. */
static void build_gemma4(const char *const *extra, size_t n_extra, const char *const *merges,
                         size_t n_merges, tv_vocab *lv) {
    static char bytes[256][7];
    const char *tokens[300];
    int32_t types[300];
    size_t n = 0;
    static const char *const specials[] = {"<pad>", "<eos>", "<bos>", "<unk>"};
    for (size_t i = 0; i < 4; i++) {
        types[n] = NU_TOKEN_CONTROL;
        tokens[n++] = specials[i];
    }
    for (unsigned b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        types[n] = NU_TOKEN_BYTE;
        tokens[n++] = bytes[b];
    }
    for (size_t i = 0; i < n_extra; i++) {
        types[n] = NU_TOKEN_NORMAL;
        tokens[n++] = extra[i];
    }
    gw_writer *w = gw_new();
    gw_add_str(w, "tokenizer.ggml.model", "gemma4");
    gw_add_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, tokens, n);
    gw_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, n);
    gw_add_arr(w, "tokenizer.ggml.merges", GGUF_STRING, merges, n_merges);
    gw_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
    gw_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
    gw_add_u32(w, "tokenizer.ggml.unknown_token_id", 3);
    gw_add_bool(w, "tokenizer.ggml.add_bos_token", false);
    size_t size;
    memset(lv, 0, sizeof *lv);
    assert_true(gw_emit(w, &lv->image, &size));
    gw_free(w);
    nu_error err = {0};
    assert_int_equal(nu_gguf_open_memory(lv->image, size, &lv->file, &err), NU_OK);
    if (nu_vocab_load(lv->file, &lv->vocab, &err)) fail_msg("%s", err.message);
}

#define SP "\xE2\x96\x81" /* U+2581, a space in the vocabulary */

/* Merges go by rank (not by the score of the result), leftmost first on a
 * tie; spaces are U+2581 characters that merge like any other (no cut at
 * spaces); a run of line breaks that is a token is taken whole, a longer run
 * is merged; characters outside the vocabulary become byte tokens and merge
 * with nothing; BOS is added whatever the file says. */
static void test_gemma4_merge_rules(void **state) {
    (void)state;
    static const char *const extra[] = {"a",    "b",  "c",   "ab",   "bc",    SP,
                                        SP "a", "\n", "abc", "\n\n", SP "ab", "\xC3\xA9"};
    enum { A = 260, B, C, AB, BC, SPACE, SPACE_A, NL, ABC, NL2, SPACE_AB, E_ACUTE };
    static const char *const merges[] = {"b c", "a b", SP " a", SP "a b", "\n \n", "a bc"};
    tv_vocab lv;
    build_gemma4(extra, sizeof extra / sizeof *extra, merges, sizeof merges / sizeof *merges, &lv);
    const nu_vocab *v = lv.vocab;
    /* "b c" ranks before "a b": a + bc, then "a bc" joins them */
    tv_expect_str(v, "abc", 0, (int32_t[]){ABC}, 1);
    tv_expect_str(v, "ab", 0, (int32_t[]){AB}, 1);
    /* "a b" (rank 1) goes before "▁ a" (rank 2), and "▁ ab" is no merge, so
     * "▁a b" (rank 3) never gets its chance */
    tv_expect_str(v, " ab", 0, (int32_t[]){SPACE, AB}, 2);
    tv_expect_str(v, " a a", 0, (int32_t[]){SPACE_A, SPACE_A}, 2);
    tv_expect_str(v, "a  b", 0, (int32_t[]){A, SPACE, SPACE, B}, 4);
    /* line breaks: "\n\n" is a token; "\n\n\n" merges into \n\n + \n */
    tv_expect_str(v, "a\n\nb", 0, (int32_t[]){A, NL2, B}, 3);
    tv_expect_str(v, "\n\n\n", 0, (int32_t[]){NL2, NL}, 2);
    /* bytes: 'x' and 'ü' are not tokens; é is */
    tv_expect_str(v, "axb\xC3\xBC\xC3\xA9", 0,
                  (int32_t[]){A, 4 + 'x', B, 4 + 0xC3, 4 + 0xBC, E_ACUTE}, 6);
    /* BOS although the file says add_bos_token = false (as llama.cpp) */
    assert_true(nu_vocab_adds_bos(v));
    tv_expect_str(v, "c", NU_TOKENIZE_ADD_BOS, (int32_t[]){2, C}, 2);
    assert_int_equal(tv_find_token(v, SP "ab"), SPACE_AB);
    tv_close(&lv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_vectors),   cmocka_unit_test(test_llamacpp_strings),
        cmocka_unit_test(test_round_trips),      cmocka_unit_test(test_gemma4_vocab),
        cmocka_unit_test(test_gemma4_malformed), cmocka_unit_test(test_gemma4_merge_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
