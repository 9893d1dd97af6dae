/* fuzz_tokenizer.c - libFuzzer target for the tokenizers.
 *
 * Real vocabularies are loaded once: GPT-2's under every pre-tokenizer
 * family (tokenizer.ggml.pre is replaced in the parsed file before loading),
 * DeepSeek Coder, Falcon, StarCoder and Qwen 3.5 as they are, Llama's
 * SentencePiece vocabulary and Gemma 4's character BPE. The first input byte picks a vocabulary and
 * whether special tokens are parsed; the rest is the text, arbitrary bytes. Each input is tokenized
 * and detokenized, and aborts (a crash to libFuzzer) unless:
 *   - every id is a token of the vocabulary;
 *   - the streaming detokenizer only ever returns well-formed UTF-8;
 *   - with GPT-2's vocabulary, which has a token for every byte, the tokens
 *     give back exactly the input bytes (special tokens rendered).
 *
 * The vocabularies come from $NU_FUZZ_VOCAB_DIR, else from the shared/vocab
 * folder the build was configured with.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef NU_FUZZ_VOCAB_DIR
#define NU_FUZZ_VOCAB_DIR "../shared/vocab"
#endif

/* GPT-2's vocabulary under each family; then files as they are. */
static const char *const gpt2_families[] = {
    "gpt-2",          "llama3", "qwen2",     "qwen35",         "deepseek-llm",
    "deepseek-coder", "falcon", "starcoder", "unknown-family",
};
#define N_FAMILIES (sizeof gpt2_families / sizeof gpt2_families[0])
static const char *const other_files[] = {"deepseek-coder", "falcon",    "starcoder",
                                          "qwen35",         "llama-spm", "gemma-4"};
#define N_OTHER (sizeof other_files / sizeof other_files[0])
#define N_VOCABS (N_FAMILIES + N_OTHER)

static nu_vocab *vocabs[N_VOCABS];
static bool exact_round_trip[N_VOCABS];

/* Opens ggml-vocab-NAME.gguf from the vocabulary folder; exits on failure
 * (the fuzzer cannot run without it). */
static nu_gguf_file *open_vocab_file(const char *name) {
    const char *dir = getenv("NU_FUZZ_VOCAB_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir ? dir : NU_FUZZ_VOCAB_DIR, name);
    nu_gguf_file *f;
    nu_error err;
    if (nu_gguf_open(path, &f, &err)) {
        fprintf(stderr, "fuzz_tokenizer: %s (set NU_FUZZ_VOCAB_DIR)\n", err.message);
        exit(1);
    }
    return f;
}

/* Loads a vocabulary, with tokenizer.ggml.pre replaced when pre is given. */
static nu_vocab *load(const char *name, const char *pre) {
    nu_gguf_file *f = open_vocab_file(name);
    for (uint64_t i = 0; pre && i < f->n_kv; i++) {
        if (nu_gguf_str_eq(f->kv[i].key, "tokenizer.ggml.pre")) {
            f->kv[i].value.v.s = (nu_gguf_string){pre, strlen(pre)};
        }
    }
    nu_vocab *v;
    nu_error err;
    if (nu_vocab_load(f, &v, &err)) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", name, err.message);
        exit(1);
    }
    nu_gguf_close(f);
    return v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < N_FAMILIES; i++) {
        vocabs[i] = load("gpt-2", gpt2_families[i]);
        exact_round_trip[i] = true;
    }
    for (size_t i = 0; i < N_OTHER; i++) vocabs[N_FAMILIES + i] = load(other_files[i], NULL);
    return 0;
}

/* True when s[0..n) is well-formed UTF-8 (checked here, independently). */
static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (k == 0 || i + k > n) return false;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
        }
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) ||
            (c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F)) {
            return false;
        }
        i += k;
    }
    return true;
}

/* Detokenizes ids both ways and checks the promises above. */
static void check_detokenize(const nu_vocab *v, const int32_t *ids, size_t n, const uint8_t *text,
                             size_t len, bool exact) {
    size_t cap = 64 + 8 * len, at = 0;
    char *out = malloc(cap);
    if (!out) abort();
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= nu_vocab_n_tokens(v)) abort();
        at += nu_vocab_token_to_bytes(v, ids[i], true, out + at, cap - at);
        if (at > cap) abort();
    }
    if (exact && (at != len || memcmp(out, text, len) != 0)) abort();
    nu_detokenizer d = {.special = true}; /* as nu_detokenizer_init (tokenizer_api.c) sets it */
    for (size_t i = 0; i <= n; i++) {
        size_t k = i < n ? nu_vocab_detokenize_push(v, &d, ids[i], out, cap)
                         : nu_vocab_detokenize_flush(&d, out, cap);
        if (k > cap || !valid_utf8((const unsigned char *)out, k)) abort();
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    size_t which = data[0] % N_VOCABS;
    unsigned flags = data[0] & 0x80 ? NU_TOKENIZE_PARSE_SPECIAL : 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const nu_vocab *v = vocabs[which];
    size_t n = 0, cap = 2 * len + 8; /* a token per byte at most, and a space prefix */
    nu_error err;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) abort();
    if (nu_vocab_tokenize(v, text, len, flags, ids, cap, &n, &err) != NU_OK) abort();
    check_detokenize(v, ids, n, (const uint8_t *)text, len, exact_round_trip[which]);
    free(ids);
    return 0;
}
