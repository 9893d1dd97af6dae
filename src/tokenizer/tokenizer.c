/* tokenizer.c - vocabularies and the SentencePiece-style tokenizer.
 *
 * A vocabulary comes from the tokenizer.ggml.* keys of a GGUF file: token
 * texts, scores and types, special token ids and a few flags. Two kinds exist:
 *
 *   "llama"  SentencePiece BPE with scores (Llama 1/2, Mistral, Phi-3, ...):
 *            spaces become U+2581 "▁", the text is split into characters, and
 *            the adjacent pair whose concatenation is the highest-scoring
 *            vocabulary token is merged until no pair is in the vocabulary.
 *            Characters left over are written as byte tokens <0xXX>.
 *            Merges cannot cross a point between two characters that no
 *            token holds side by side, so the text is cut there first and
 *            each piece (about a word) gets its own small queue.
 *   "gpt2"   byte-level BPE with merge ranks (GPT-2, Llama 3, Qwen2, Falcon,
 *            StarCoder, DeepSeek, ...): see tokenizer_bpe.c.
 *   "gemma4" BPE with merge ranks over UTF-8 characters, spaces written
 *            "▁" as SentencePiece writes them, characters outside the
 *            vocabulary as <0xXX> byte tokens (Gemma 4): tokenizer_bpe.c.
 *
 * Tokenizing first cuts the input at special tokens (user-defined tokens
 * always, control tokens on request; longest match first, found with a trie),
 * then runs the kind's fragment encoder on each piece of plain text.
 *
 * The vocabulary is immutable after loading and safe to share between
 * threads; tokenizing allocates its own scratch memory per call.
 */
#include "tokenizer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* ------------------------------------------------------------------------ */
/* Text -> id hash table                                                    */
/* ------------------------------------------------------------------------ */

/* FNV-1a: simple, and good enough for short token texts. */
static uint32_t text_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

int32_t nu_vocab_find(const nu_vocab *v, const char *s, size_t n) {
    for (uint32_t i = text_hash(s, n) & v->slot_mask;; i = (i + 1) & v->slot_mask) {
        uint32_t slot = v->slots[i];
        if (slot == 0) return -1;
        int32_t id = (int32_t)(slot - 1);
        if (v->length[id] == n && memcmp(v->pool + v->offset[id], s, n) == 0) return id;
    }
}

/* Builds the hash table. When several tokens share a text, the first one BPE
 * may produce wins, else the first one. */
static nu_status build_hash(nu_vocab *v, nu_error *err) {
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)v->n_tokens) cap *= 2;
    v->slots = calloc(cap, sizeof *v->slots);
    if (!v->slots) return nu_fail(err, NU_ERR_NOMEM, "out of memory for the token hash table");
    v->slot_mask = cap - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *s = v->pool + v->offset[id];
        uint32_t i = text_hash(s, v->length[id]) & v->slot_mask;
        for (; v->slots[i]; i = (i + 1) & v->slot_mask) {
            int32_t other = (int32_t)(v->slots[i] - 1);
            if (v->length[other] == v->length[id] &&
                memcmp(v->pool + v->offset[other], s, v->length[id]) == 0) {
                break;
            }
        }
        bool replace = v->slots[i] && !(v->flags[v->slots[i] - 1] & TOKEN_MERGEABLE) &&
                       (v->flags[id] & TOKEN_MERGEABLE);
        if (v->slots[i] == 0 || replace) v->slots[i] = (uint32_t)id + 1;
    }
    return NU_OK;
}

/* ------------------------------------------------------------------------ */
/* Character pairs inside tokens                                            */
/* ------------------------------------------------------------------------ */

/* The bytes of one character (1..4) packed into 32 bits. */
static uint32_t char_key(const unsigned char *s, size_t len) {
    uint32_t k = 0;
    for (size_t i = 0; i < len; i++) k |= (uint32_t)s[i] << (8 * i);
    return k;
}

static uint64_t bigram_key(uint32_t first, uint32_t second) {
    return (uint64_t)first | (uint64_t)second << 32;
}

/* Fibonacci hashing: the high bits of the key times 2^64 / phi. */
static uint64_t bigram_slot(uint64_t key, uint64_t mask) {
    return (key * 0x9E3779B97F4A7C15ull >> 20) & mask;
}

/* True when the pair key occurs inside some token. Key 0 (two NUL
 * characters) is never stored: token texts have no NUL. */
static bool bigram_known(const nu_vocab *v, uint64_t key) {
    for (uint64_t i = bigram_slot(key, v->bigram_mask);; i = (i + 1) & v->bigram_mask) {
        if (v->bigrams[i] == key) return key != 0;
        if (v->bigrams[i] == 0) return false;
    }
}

/* Adds a pair, doubling the table when it gets half full. */
static bool bigram_add(nu_vocab *v, uint64_t key) {
    if (2 * (v->n_bigrams + 1) > v->bigram_mask + 1) {
        uint64_t cap = 2 * (v->bigram_mask + 1);
        uint64_t *t = calloc(cap, sizeof *t);
        if (!t) return false;
        for (uint64_t i = 0; i <= v->bigram_mask; i++) {
            uint64_t k = v->bigrams[i], j = bigram_slot(k, cap - 1);
            if (k == 0) continue;
            while (t[j]) j = (j + 1) & (cap - 1);
            t[j] = k;
        }
        free(v->bigrams);
        v->bigrams = t;
        v->bigram_mask = cap - 1;
    }
    uint64_t i = bigram_slot(key, v->bigram_mask);
    for (; v->bigrams[i]; i = (i + 1) & v->bigram_mask) {
        if (v->bigrams[i] == key) return true;
    }
    v->bigrams[i] = key;
    v->n_bigrams++;
    return true;
}

/* Records the adjacent character pairs of every token BPE may produce. */
static nu_status build_bigrams(nu_vocab *v, nu_error *err) {
    v->bigram_mask = 4095;
    v->bigrams = calloc(v->bigram_mask + 1, sizeof *v->bigrams);
    if (!v->bigrams) return nu_fail(err, NU_ERR_NOMEM, "out of memory for the vocabulary");
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (!(v->flags[id] & TOKEN_MERGEABLE)) continue;
        const unsigned char *s = (const unsigned char *)v->pool + v->offset[id];
        size_t n = v->length[id], k0 = 0;
        for (size_t i = 0; i < n; i += k0) {
            k0 = nu_utf8_decode((const char *)s + i, n - i, NULL);
            size_t k1 = i + k0 < n ? nu_utf8_decode((const char *)s + i + k0, n - i - k0, NULL) : 0;
            if (k1 == 0) break;
            uint64_t key = bigram_key(char_key(s + i, k0), char_key(s + i + k0, k1));
            if (!bigram_add(v, key)) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
        }
    }
    return NU_OK;
}

/* ------------------------------------------------------------------------ */
/* Loading: metadata helpers                                                */
/* ------------------------------------------------------------------------ */

static bool is_integer_type(nu_gguf_value_type t) {
    return t <= GGUF_INT32 || t == GGUF_UINT64 || t == GGUF_INT64;
}

static bool is_signed_type(nu_gguf_value_type t) {
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

/* An integer value as int64 (UINT64 above INT64_MAX saturates). */
static int64_t int_value(const nu_gguf_value *x) {
    if (is_signed_type(x->type)) return x->v.i;
    return x->v.u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)x->v.u;
}

/* An optional array key: *out is NULL when absent. Present, it must be an
 * array of n elements accepted by elem_ok. */
static nu_status find_array(const nu_gguf_file *f, const char *key,
                            bool (*elem_ok)(nu_gguf_value_type), uint64_t n,
                            const nu_gguf_value **out, nu_error *err) {
    const nu_gguf_value *a = nu_gguf_find(f, key);
    *out = NULL;
    if (!a) return NU_OK;
    if (a->type != GGUF_ARRAY || !elem_ok(a->v.arr.elem_type)) {
        const char *t = a->type == GGUF_ARRAY ? nu_gguf_type_name(a->v.arr.elem_type) : "";
        return nu_fail(err, NU_ERR_FORMAT, "%s has the wrong type (%s%s%s)", key,
                       nu_gguf_type_name(a->type), a->type == GGUF_ARRAY ? " of " : "", t);
    }
    if (a->v.arr.n != n) {
        return nu_fail(err, NU_ERR_FORMAT, "%s has %llu entries but tokenizer.ggml.tokens has %llu",
                       key, (unsigned long long)a->v.arr.n, (unsigned long long)n);
    }
    *out = a;
    return NU_OK;
}

static bool is_float_type(nu_gguf_value_type t) {
    return t == GGUF_FLOAT32 || t == GGUF_FLOAT64;
}

/* A token id key: absent keeps *id; 0xFFFFFFFF, negative or out-of-range
 * values mean "none" (-1), as converters write them; a non-integer is an error. */
static nu_status read_token_id(const nu_gguf_file *f, const char *key, int32_t n_tokens,
                               int32_t *id, nu_error *err) {
    const nu_gguf_value *x = nu_gguf_find(f, key);
    if (!x) return NU_OK;
    if (!is_integer_type(x->type)) {
        return nu_fail(err, NU_ERR_FORMAT, "%s should be an integer token id, found %s", key,
                       nu_gguf_type_name(x->type));
    }
    int64_t val = int_value(x);
    *id = val >= 0 && val < n_tokens ? (int32_t)val : -1;
    return NU_OK;
}

/* A flag key: absent keeps *flag; anything but a bool is an error. */
static nu_status read_flag(const nu_gguf_file *f, const char *key, bool *flag, nu_error *err) {
    const nu_gguf_value *x = nu_gguf_find(f, key);
    if (!x) return NU_OK;
    if (x->type != GGUF_BOOL) {
        return nu_fail(err, NU_ERR_FORMAT, "%s should be a bool, found %s", key,
                       nu_gguf_type_name(x->type));
    }
    *flag = x->v.u != 0;
    return NU_OK;
}

/* ------------------------------------------------------------------------ */
/* Loading: the parts of a vocabulary                                       */
/* ------------------------------------------------------------------------ */

/* tokenizer.ggml.model decides the kind; unknown kinds are unsupported. */
static nu_status load_kind(const nu_gguf_file *f, nu_vocab *v, nu_error *err) {
    const nu_gguf_value *x = nu_gguf_find(f, "tokenizer.ggml.model");
    if (!x) return nu_fail(err, NU_ERR_FORMAT, "tokenizer.ggml.model is missing");
    if (x->type != GGUF_STRING) {
        return nu_fail(err, NU_ERR_FORMAT, "tokenizer.ggml.model should be a string, found %s",
                       nu_gguf_type_name(x->type));
    }
    if (nu_gguf_str_eq(x->v.s, "llama")) {
        v->kind = VOCAB_SPM;
    } else if (nu_gguf_str_eq(x->v.s, "gpt2")) {
        v->kind = VOCAB_BPE;
    } else if (nu_gguf_str_eq(x->v.s, "gemma4")) {
        v->kind = VOCAB_CHAR_BPE;
    } else {
        int n = x->v.s.len > 64 ? 64 : (int)x->v.s.len;
        return nu_fail(
            err, NU_ERR_UNSUPPORTED,
            "tokenizer model '%.*s' is not supported (only 'llama', 'gpt2' and 'gemma4')", n,
            x->v.s.data);
    }
    static const char *const names[] = {
        [VOCAB_SPM] = "llama", [VOCAB_BPE] = "gpt2", [VOCAB_CHAR_BPE] = "gemma4"};
    strcpy(v->model_name, names[v->kind]);
    return NU_OK;
}

/* More tokens than any real vocabulary; keeps table sizes far from overflow. */
#define MAX_TOKENS (1 << 26)

/* Copies the token texts into one NUL-terminated pool, checking that each is
 * well-formed UTF-8 without NUL bytes. */
static nu_status load_texts(const nu_gguf_file *f, nu_vocab *v, nu_error *err) {
    const nu_gguf_value *a = nu_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    if (!a) {
        return nu_fail(err, NU_ERR_FORMAT,
                       nu_gguf_find(f, "tokenizer.ggml.tokens")
                           ? "tokenizer.ggml.tokens is not an array of strings"
                           : "tokenizer.ggml.tokens is missing");
    }
    if (a->v.arr.n == 0 || a->v.arr.n > MAX_TOKENS) {
        return nu_fail(err, NU_ERR_FORMAT, "tokenizer.ggml.tokens has %llu entries",
                       (unsigned long long)a->v.arr.n);
    }
    v->n_tokens = (int32_t)a->v.arr.n;
    size_t total = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        nu_gguf_string s = a->v.arr.items[i].v.s;
        if (s.len >= UINT32_MAX || !nu_utf8_valid_text(s.data, s.len)) {
            return nu_fail(err, NU_ERR_FORMAT, "token %d: text is not valid UTF-8 (or has NUL)", i);
        }
        total += s.len + 1;
    }
    v->pool = malloc(total);
    v->offset = malloc((size_t)v->n_tokens * sizeof *v->offset);
    v->length = malloc((size_t)v->n_tokens * sizeof *v->length);
    if (!v->pool || !v->offset || !v->length) {
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for %d token texts", v->n_tokens);
    }
    size_t at = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        nu_gguf_string s = a->v.arr.items[i].v.s;
        memcpy(v->pool + at, s.data, s.len);
        v->pool[at + s.len] = 0;
        v->offset[i] = at;
        v->length[i] = (uint32_t)s.len;
        if (s.len > v->max_token_len) v->max_token_len = s.len;
        at += s.len + 1;
    }
    return NU_OK;
}

/* Scores (optional, 0 when absent) and types (optional, normal when absent). */
static nu_status load_scores_types(const nu_gguf_file *f, nu_vocab *v, nu_error *err) {
    size_t n = (size_t)v->n_tokens;
    v->score = calloc(n, sizeof *v->score);
    v->type = malloc(n);
    v->flags = calloc(n, 1);
    if (!v->score || !v->type || !v->flags) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    memset(v->type, NU_TOKEN_NORMAL, n);
    const nu_gguf_value *scores, *types;
    nu_status st = find_array(f, "tokenizer.ggml.scores", is_float_type, n, &scores, err);
    if (st) return st;
    st = find_array(f, "tokenizer.ggml.token_type", is_integer_type, n, &types, err);
    if (st) return st;
    for (size_t i = 0; scores && i < n; i++) {
        double s = scores->v.arr.items[i].v.f;
        if (isnan(s)) return nu_fail(err, NU_ERR_FORMAT, "token %zu: score is NaN", i);
        v->score[i] = (float)s;
    }
    for (size_t i = 0; types && i < n; i++) {
        int64_t t = int_value(&types->v.arr.items[i]);
        if (t < NU_TOKEN_UNDEFINED || t > NU_TOKEN_BYTE) {
            return nu_fail(err, NU_ERR_FORMAT, "token %zu: unknown token type %lld", i,
                           (long long)t);
        }
        v->type[i] = (uint8_t)t;
    }
    return NU_OK;
}

/* Special token ids and the add-BOS / add-EOS / space-prefix flags, with the
 * SentencePiece defaults for "llama" vocabularies (<unk> 0, <s> 1, </s> 2,
 * add BOS, no EOS, space prefix). Byte-level BPE vocabularies have no default
 * ids and add BOS only when the file (or, as Llama 3's, the pre-tokenizer
 * family) says so; they never add a space prefix, which their pre-tokenizers
 * do not know (llama.cpp ignores the flag for them too). */
static nu_status load_specials(const nu_gguf_file *f, nu_vocab *v, nu_error *err) {
    bool spm = v->kind == VOCAB_SPM;
    int32_t n = v->n_tokens;
    v->unk = spm && n > 0 ? 0 : -1;
    v->bos = spm && n > 1 ? 1 : -1;
    v->eos = spm && n > 2 ? 2 : -1;
    v->pad = v->sep = v->eot = v->eom = -1;
    v->add_bos = spm || (VOCAB_IS_BPE(v) && nu_bpe_default_add_bos(v));
    v->add_eos = false;
    v->add_space_prefix = spm;
    static const char *const keys[] = {
        "tokenizer.ggml.bos_token_id",       "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",   "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.separator_token_id",
        "tokenizer.ggml.eot_token_id",       "tokenizer.ggml.eom_token_id",
    };
    int32_t *ids[] = {&v->bos, &v->eos, &v->unk, &v->pad, &v->sep, &v->sep, &v->eot, &v->eom};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        nu_status st = read_token_id(f, keys[i], n, ids[i], err);
        if (st) return st;
    }
    nu_status st = read_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos, err);
    if (!st) st = read_flag(f, "tokenizer.ggml.add_eos_token", &v->add_eos, err);
    if (!st) st = read_flag(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err);
    if (!spm) v->add_space_prefix = false;
    /* Gemma 4 is trained with BOS; llama.cpp adds it even when a converted
     * file says add_bos_token = false (llama.cpp PR 21500) */
    if (v->kind == VOCAB_CHAR_BPE) v->add_bos = true;
    return st;
}

/* The byte value of a "<0xXX>" text, or -1. */
static int byte_token_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int val = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0) return -1;
        val = val * 16 + d;
    }
    return val;
}

/* Fills byte_token[]. Tokens typed BYTE must read <0xXX>. A vocabulary
 * without any BYTE-typed token (no token_type array) gets its <0xXX> tokens
 * recognised by text and retyped as BYTE. */
static nu_status find_byte_tokens(nu_vocab *v, nu_error *err) {
    for (int i = 0; i < 256; i++) v->byte_token[i] = -1;
    bool typed = false;
    for (int32_t id = 0; id < v->n_tokens; id++) typed |= v->type[id] == NU_TOKEN_BYTE;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (typed && v->type[id] != NU_TOKEN_BYTE) continue;
        int b = byte_token_value(v->pool + v->offset[id], v->length[id]);
        if (b < 0) {
            if (!typed) continue;
            return nu_fail(err, NU_ERR_FORMAT, "token %d is a byte token but reads '%s'", id,
                           v->pool + v->offset[id]);
        }
        v->type[id] = NU_TOKEN_BYTE;
        if (v->byte_token[b] < 0) v->byte_token[b] = id;
        v->has_byte_tokens = true;
    }
    return NU_OK;
}

/* Texts of end-of-turn tokens that chat models use without always naming
 * them in the metadata; a control or user-defined token with one of these
 * texts ends generation. */
static bool is_end_of_turn_text(const char *s) {
    static const char *const texts[] = {
        "<|eot_id|>",
        "<|eom_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<EOT>",
        "<|END_OF_TURN_TOKEN|>",
        "<|end_of_text|>",
        "<turn|>",
        "<|tool_response>",
        "<|return|>", /* gpt-oss (harmony): the end of a final answer */
        "<|call|>",   /* gpt-oss: the end of a tool call */
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        if (strcmp(s, texts[i]) == 0) return true;
    }
    return false;
}

/* The harmony format of gpt-oss (o200k_harmony) writes its messages as
 * <|start|>assistant<|channel|>analysis<|message|>...<|end|>: the markers
 * inside an answer are shown in generated text (user-defined, as llama.cpp
 * retypes them), and where the vocabulary ends answers with <|return|> and
 * tool calls with <|call|>, <|end|> only ends one message of the answer and
 * does not end generation (llama.cpp's rule). */
static void set_harmony_flags(nu_vocab *v) {
    static const char *const shown[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    int32_t end = -1;
    bool has_return = false, has_call = false;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *s = v->pool + v->offset[id];
        if (s[0] != '<' || s[1] != '|') continue;
        for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++)
            if (!strcmp(s, shown[i])) v->type[id] = NU_TOKEN_USER_DEFINED;
        if (!(v->flags[id] & TOKEN_EOG)) continue;
        if (!strcmp(s, "<|end|>")) end = id;
        has_return |= !strcmp(s, "<|return|>");
        has_call |= !strcmp(s, "<|call|>");
    }
    if (end >= 0 && has_return && has_call) {
        v->flags[end] &= (uint8_t)~TOKEN_EOG;
        v->type[end] = NU_TOKEN_USER_DEFINED;
    }
}

/* Per-token flags: which tokens BPE may produce (as SentencePiece: normal,
 * user-defined and unused pieces; never control, unknown or byte tokens), and
 * which end generation. */
static void set_flags(nu_vocab *v) {
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint8_t fl = 0;
        /* a token that ends a turn is a control token, matched in text only
         * when special tokens are parsed (llama.cpp retypes it so; Gemma 4
         * files type <|tool_response> user-defined) */
        if ((v->type[id] == NU_TOKEN_CONTROL || v->type[id] == NU_TOKEN_USER_DEFINED) &&
            is_end_of_turn_text(v->pool + v->offset[id])) {
            fl |= TOKEN_EOG;
            v->type[id] = NU_TOKEN_CONTROL;
        }
        uint8_t t = v->type[id];
        if (t == NU_TOKEN_NORMAL || t == NU_TOKEN_USER_DEFINED || t == NU_TOKEN_UNUSED ||
            t == NU_TOKEN_UNDEFINED) {
            fl |= TOKEN_MERGEABLE;
        }
        v->flags[id] = fl;
    }
    int32_t eog[] = {v->eos, v->eot, v->eom};
    for (size_t i = 0; i < 3; i++) {
        if (eog[i] >= 0) v->flags[eog[i]] |= TOKEN_EOG;
    }
    set_harmony_flags(v);
}

/* ------------------------------------------------------------------------ */
/* Special tokens: a trie of their texts                                    */
/* ------------------------------------------------------------------------ */

static bool is_special_type(uint8_t t) {
    return t == NU_TOKEN_CONTROL || t == NU_TOKEN_USER_DEFINED || t == NU_TOKEN_UNKNOWN;
}

/* The child of node (-1: the root) with the given byte, or -1. */
static int32_t trie_find(const nu_vocab *v, int32_t node, uint8_t byte) {
    int32_t c = node < 0 ? v->trie_root[byte] : v->trie[node].first_child;
    while (c >= 0 && v->trie[c].byte != byte) c = v->trie[c].next_sibling;
    return c;
}

/* The child of node with the given byte, created when absent (the trie array
 * is preallocated large enough). */
static int32_t trie_child(nu_vocab *v, int32_t node, uint8_t byte) {
    int32_t c = trie_find(v, node, byte);
    if (c >= 0) return c;
    int32_t *link = node < 0 ? &v->trie_root[byte] : &v->trie[node].first_child;
    c = v->n_trie++;
    v->trie[c] = (trie_node){-1, node < 0 ? -1 : *link, -1, -1, byte};
    *link = c;
    return c;
}

/* Inserts every control, user-defined and unknown token with a non-empty
 * text. The first id of each kind wins when texts repeat. */
static nu_status build_trie(nu_vocab *v, nu_error *err) {
    for (int i = 0; i < 256; i++) v->trie_root[i] = -1;
    size_t total = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (is_special_type(v->type[id])) total += v->length[id];
    }
    if (total >= INT32_MAX) return nu_fail(err, NU_ERR_FORMAT, "special tokens are too long");
    v->trie = malloc((total + 1) * sizeof *v->trie);
    if (!v->trie) return nu_fail(err, NU_ERR_NOMEM, "out of memory for special tokens");
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (!is_special_type(v->type[id]) || v->length[id] == 0) continue;
        const char *s = v->pool + v->offset[id];
        int32_t node = -1;
        for (uint32_t k = 0; k < v->length[id]; k++) node = trie_child(v, node, (uint8_t)s[k]);
        int32_t *slot = v->type[id] == NU_TOKEN_USER_DEFINED ? &v->trie[node].always_token
                                                             : &v->trie[node].special_token;
        if (*slot < 0) *slot = id;
    }
    return NU_OK;
}

/* The longest special token at the start of s[0..n) that may be matched
 * (user-defined always, control / unknown only with parse_special); its id,
 * with its length in *match_len, or -1. */
static int32_t match_special(const nu_vocab *v, const char *s, size_t n, bool parse_special,
                             size_t *match_len) {
    int32_t best = -1;
    int32_t node = v->trie_root[(uint8_t)s[0]];
    for (size_t k = 1; node >= 0; k++) {
        const trie_node *t = &v->trie[node];
        int32_t id = t->always_token >= 0 ? t->always_token : parse_special ? t->special_token : -1;
        if (id >= 0) {
            best = id;
            *match_len = k;
        }
        if (k == n) break;
        node = trie_find(v, node, (uint8_t)s[k]);
    }
    return best;
}

/* ------------------------------------------------------------------------ */
/* Loading: entry points                                                    */
/* ------------------------------------------------------------------------ */

nu_status nu_vocab_load(const nu_gguf_file *f, nu_vocab **out, nu_error *err) {
    *out = NULL;
    nu_vocab *v = calloc(1, sizeof *v);
    if (!v) return nu_fail(err, NU_ERR_NOMEM, "out of memory for the vocabulary");
    nu_status st = load_kind(f, v, err);
    if (!st) st = load_texts(f, v, err);
    if (!st) st = load_scores_types(f, v, err);
    if (!st && VOCAB_IS_BPE(v)) st = nu_bpe_load_pre(f, v, err);
    if (!st) st = load_specials(f, v, err);
    if (!st && v->kind != VOCAB_BPE) st = find_byte_tokens(v, err);
    if (!st) {
        set_flags(v);
        st = build_hash(v, err);
    }
    if (!st) st = build_trie(v, err);
    if (!st && v->kind == VOCAB_SPM) st = build_bigrams(v, err);
    if (!st && VOCAB_IS_BPE(v)) st = nu_bpe_load_merges(f, v, err);
    if (st) {
        nu_vocab_free(v);
        return st;
    }
    *out = v;
    return NU_OK;
}

void nu_vocab_free(nu_vocab *v) {
    if (!v) return;
    free(v->pool);
    free(v->offset);
    free(v->length);
    free(v->score);
    free(v->type);
    free(v->flags);
    free(v->slots);
    free(v->trie);
    free(v->bigrams);
    nu_bpe_vocab_free(v->bpe);
    free(v);
}

int32_t nu_vocab_n_tokens(const nu_vocab *v) {
    return v->n_tokens;
}
const char *nu_vocab_model_name(const nu_vocab *v) {
    return v->model_name;
}
int32_t nu_vocab_bos(const nu_vocab *v) {
    return v->bos;
}
int32_t nu_vocab_eos(const nu_vocab *v) {
    return v->eos;
}
bool nu_vocab_adds_bos(const nu_vocab *v) {
    return v->add_bos && v->bos >= 0;
}
bool nu_vocab_adds_space_prefix(const nu_vocab *v) {
    return v->add_space_prefix;
}
const char *nu_vocab_warning(const nu_vocab *v) {
    return v && v->warning[0] ? v->warning : NULL;
}

static bool valid_id(const nu_vocab *v, int32_t token) {
    return token >= 0 && token < v->n_tokens;
}

const char *nu_vocab_token_text(const nu_vocab *v, int32_t token) {
    return valid_id(v, token) ? v->pool + v->offset[token] : NULL;
}

nu_token_type nu_vocab_token_type(const nu_vocab *v, int32_t token) {
    return valid_id(v, token) ? (nu_token_type)v->type[token] : NU_TOKEN_UNDEFINED;
}

bool nu_vocab_is_eog(const nu_vocab *v, int32_t token) {
    return valid_id(v, token) && (v->flags[token] & TOKEN_EOG);
}

/* ------------------------------------------------------------------------ */
/* Tokenizing: output and scratch                                           */
/* ------------------------------------------------------------------------ */

/* A symbol of the SentencePiece merge loop: a run of the escaped text, in a
 * doubly linked list of the symbols still alive (len 0 = merged away). */
typedef struct spm_symbol {
    uint32_t start, len;
    uint32_t char_len; /* length of the character the symbol started as */
    int32_t prev, next;
    int32_t node; /* >= 0: merge node; < 0: ~index of the original character */
} spm_symbol;

/* A merge, remembered so an "unused" token can be split back into its parts
 * as SentencePiece does. */
typedef struct spm_merge {
    int32_t left, right; /* child node references, as spm_symbol.node */
    int32_t token;
} spm_merge;

/* A candidate pair: the symbol at left with its right neighbour, valid while
 * their combined length is still len (lengths only grow). */
typedef struct spm_pair {
    float score;
    int32_t left;
    uint32_t len;
    int32_t token;
} spm_pair;

/* Scratch memory for one tokenize call, sized for the whole input. */
typedef struct spm_work {
    char *text; /* the escaped fragment */
    spm_symbol *symbols;
    spm_merge *merges;
    int32_t n_merges;
    spm_pair *heap;
    size_t n_heap, heap_cap;
} spm_work;

static void spm_work_free(spm_work *w) {
    free(w->text);
    free(w->symbols);
    free(w->merges);
    free(w->heap);
}

/* Allocates scratch for fragments of up to len input bytes: the escaped text
 * (3 bytes per space, plus the prefix) and one symbol per byte at most. On
 * failure nothing is left allocated. */
static nu_status spm_work_init(spm_work *w, size_t len, nu_error *err) {
    memset(w, 0, sizeof *w);
    size_t n = len + 1;
    w->heap_cap = 256; /* grows: pieces are usually short */
    w->text = malloc(3 * n);
    w->symbols = malloc(n * sizeof *w->symbols);
    w->merges = malloc(n * sizeof *w->merges);
    w->heap = malloc(w->heap_cap * sizeof *w->heap);
    if (!w->text || !w->symbols || !w->merges || !w->heap) {
        spm_work_free(w);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
    }
    return NU_OK;
}

/* ------------------------------------------------------------------------ */
/* Tokenizing: the SentencePiece merge loop                                 */
/* ------------------------------------------------------------------------ */

/* The queue is a 4-ary heap: half the depth of a binary one, and the
 * children of a node (4 x 16 bytes) share about one cache line. */
#define HEAP_ARITY 4

/* Heap order: higher score first; on equal scores the leftmost pair. */
static bool pair_before(const spm_pair *a, const spm_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static nu_status heap_push(spm_work *w, spm_pair p, nu_error *err) {
    if (w->n_heap == w->heap_cap) {
        size_t cap = w->heap_cap * 2;
        spm_pair *h = realloc(w->heap, cap * sizeof *h);
        if (!h) return nu_fail(err, NU_ERR_NOMEM, "out of memory tokenizing");
        w->heap = h;
        w->heap_cap = cap;
    }
    size_t i = w->n_heap++;
    while (i > 0 && pair_before(&p, &w->heap[(i - 1) / HEAP_ARITY])) {
        w->heap[i] = w->heap[(i - 1) / HEAP_ARITY];
        i = (i - 1) / HEAP_ARITY;
    }
    w->heap[i] = p;
    return NU_OK;
}

static spm_pair heap_pop(spm_work *w) {
    spm_pair top = w->heap[0];
    spm_pair last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t first = HEAP_ARITY * i + 1, c = first;
        if (first >= n) break;
        for (size_t j = first + 1; j < first + HEAP_ARITY && j < n; j++) {
            if (pair_before(&w->heap[j], &w->heap[c])) c = j;
        }
        if (!pair_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

/* Queues the symbol at left with its right neighbour if their concatenation
 * is a token BPE may produce. */
static nu_status try_pair(const nu_vocab *v, spm_work *w, int32_t left, nu_error *err) {
    if (left < 0) return NU_OK;
    const spm_symbol *a = &w->symbols[left];
    if (a->next < 0) return NU_OK;
    uint32_t len = a->len + w->symbols[a->next].len;
    if (len > v->max_token_len) return NU_OK;
    int32_t id = nu_vocab_find(v, w->text + a->start, len);
    if (id < 0 || !(v->flags[id] & TOKEN_MERGEABLE)) return NU_OK;
    return heap_push(w, (spm_pair){v->score[id], left, len, id}, err);
}

/* Merges the pair at the top of the queue, unless it went stale. */
static nu_status merge_best(const nu_vocab *v, spm_work *w, nu_error *err) {
    spm_pair p = heap_pop(w);
    spm_symbol *a = &w->symbols[p.left];
    if (a->len == 0 || a->next < 0) return NU_OK;
    spm_symbol *b = &w->symbols[a->next];
    if (a->len + b->len != p.len) return NU_OK;
    w->merges[w->n_merges] = (spm_merge){a->node, b->node, p.token};
    a->node = w->n_merges++;
    a->len = p.len;
    b->len = 0;
    a->next = b->next;
    if (a->next >= 0) w->symbols[a->next].prev = p.left;
    nu_status st = try_pair(v, w, a->prev, err);
    if (!st) st = try_pair(v, w, p.left, err);
    return st;
}

/* Writes one character that is not itself a token: its bytes as <0xXX>
 * tokens or, when the vocabulary has no byte tokens, the unknown token (one
 * for a whole run of unknown characters, as SentencePiece does). */
static void emit_fallback(const nu_vocab *v, const char *s, size_t n, token_sink *out) {
    if (!v->has_byte_tokens) {
        if (v->unk >= 0 && !out->after_unknown) sink_push(out, v->unk);
        out->after_unknown = true;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->byte_token[(unsigned char)s[i]];
        if (id < 0) id = v->unk;
        if (id >= 0) sink_push(out, id);
    }
}

/* Writes the tokens of a symbol's merge tree. An "unused" token is split back
 * into its two parts (SentencePiece never outputs them from merges); a
 * leftover single character is looked up, or falls back to bytes. */
static void emit_node(const nu_vocab *v, const spm_work *w, int32_t node, token_sink *out) {
    if (node >= 0) {
        const spm_merge *m = &w->merges[node];
        if (v->type[m->token] != NU_TOKEN_UNUSED) {
            sink_push(out, m->token);
            return;
        }
        emit_node(v, w, m->left, out);
        emit_node(v, w, m->right, out);
        return;
    }
    const spm_symbol *c = &w->symbols[~node];
    const char *s = w->text + c->start;
    size_t n = c->char_len;
    int32_t id = nu_vocab_find(v, s, n);
    if (id >= 0 && (v->flags[id] & TOKEN_MERGEABLE)) {
        sink_push(out, id);
    } else {
        emit_fallback(v, s, n, out);
    }
}

/* Escapes a fragment into w->text: the optional "▁" prefix, then the text
 * with every space replaced by "▁". Returns the escaped length. */
static size_t spm_escape(spm_work *w, const char *s, size_t n, bool prefix) {
    static const char space_mark[3] = {'\xE2', '\x96', '\x81'};
    size_t k = 0;
    if (prefix) {
        memcpy(w->text, space_mark, 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(w->text + k, space_mark, 3);
            k += 3;
        } else {
            w->text[k++] = s[i];
        }
    }
    return k;
}

/* Splits the escaped text into characters (a byte that does not start a
 * well-formed character is a character of its own) and returns their count. */
static int32_t spm_split(spm_work *w, size_t len) {
    int32_t n = 0;
    for (size_t i = 0; i < len; n++) {
        size_t k = nu_utf8_decode(w->text + i, len - i, NULL);
        if (k == 0) k = 1;
        w->symbols[n] = (spm_symbol){(uint32_t)i, (uint32_t)k, (uint32_t)k, n - 1, n + 1, ~n};
        i += k;
    }
    if (n > 0) w->symbols[n - 1].next = -1;
    return n;
}

/* Runs the merge loop on the characters first..last (a piece no merge can
 * leave) and writes the tokens. */
static nu_status spm_merge_piece(const nu_vocab *v, spm_work *w, int32_t first, int32_t last,
                                 token_sink *out, nu_error *err) {
    w->symbols[first].prev = -1;
    w->symbols[last].next = -1;
    w->n_heap = 0;
    w->n_merges = 0;
    nu_status st = NU_OK;
    for (int32_t i = first; !st && i < last; i++) st = try_pair(v, w, i, err);
    while (!st && w->n_heap > 0) st = merge_best(v, w, err);
    if (st) return st;
    for (int32_t i = first; i >= 0; i = w->symbols[i].next) {
        emit_node(v, w, w->symbols[i].node, out);
    }
    return NU_OK;
}

/* Whether some token holds characters i and i + 1 side by side (if none
 * does, no merge can ever join them). */
static bool spm_joinable(const nu_vocab *v, const spm_work *w, int32_t i) {
    const unsigned char *t = (const unsigned char *)w->text;
    const spm_symbol *a = &w->symbols[i], *b = &w->symbols[i + 1];
    return bigram_known(
        v, bigram_key(char_key(t + a->start, a->char_len), char_key(t + b->start, b->char_len)));
}

/* Tokenizes one fragment of plain text with SentencePiece BPE, piece by
 * piece between the points no merge can cross. */
static nu_status spm_encode(const nu_vocab *v, spm_work *w, const char *s, size_t n, bool prefix,
                            token_sink *out, nu_error *err) {
    int32_t n_sym = spm_split(w, spm_escape(w, s, n, prefix));
    nu_status st = NU_OK;
    for (int32_t i = 0, first = 0; !st && i < n_sym; i++) {
        if (i + 1 < n_sym && spm_joinable(v, w, i)) continue;
        st = spm_merge_piece(v, w, first, i, out, err);
        first = i + 1;
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* Tokenizing: special tokens and the entry point                           */
/* ------------------------------------------------------------------------ */

/* The first special token that may be matched in text[from..len): returns
 * its position (len when there is none), with its id and length. Every
 * tokenizer kind cuts its input with this before encoding plain text. */
static size_t next_special(const nu_vocab *v, const char *text, size_t from, size_t len,
                           bool parse_special, int32_t *id, size_t *match_len) {
    for (size_t i = from; i < len; i++) {
        *id = match_special(v, text + i, len - i, parse_special, match_len);
        if (*id >= 0) return i;
    }
    return len;
}

/* The encoder of plain-text fragments for one tokenize call: the vocabulary
 * kind's scratch memory, sized for the whole input. */
typedef struct fragment_encoder {
    spm_work spm;
    nu_bpe_work *bpe;
} fragment_encoder;

static nu_status encoder_init(const nu_vocab *v, fragment_encoder *e, size_t len, nu_error *err) {
    memset(e, 0, sizeof *e);
    if (VOCAB_IS_BPE(v)) return nu_bpe_work_new(v, len, &e->bpe, err);
    return spm_work_init(&e->spm, len, err);
}

static void encoder_free(fragment_encoder *e) {
    spm_work_free(&e->spm);
    nu_bpe_work_free(e->bpe);
}

/* Encodes one fragment of plain text. SentencePiece's space prefix goes only
 * on a fragment that starts the text. */
static nu_status encode_fragment(const nu_vocab *v, fragment_encoder *e, const char *s, size_t n,
                                 bool at_start, token_sink *out, nu_error *err) {
    if (VOCAB_IS_BPE(v)) return nu_bpe_encode(v, e->bpe, s, n, out, err);
    return spm_encode(v, &e->spm, s, n, at_start && v->add_space_prefix, out, err);
}

/* Cuts the text at special tokens and encodes the plain fragments in
 * between with the vocabulary kind's encoder. */
static nu_status tokenize_text(const nu_vocab *v, const char *text, size_t len, bool parse_special,
                               token_sink *out, nu_error *err) {
    fragment_encoder e;
    nu_status st = encoder_init(v, &e, len, err);
    if (st) return st;
    for (size_t start = 0;;) {
        int32_t id = -1;
        size_t match_len = 0;
        size_t at = next_special(v, text, start, len, parse_special, &id, &match_len);
        if (at > start) st = encode_fragment(v, &e, text + start, at - start, start == 0, out, err);
        if (st || at == len) break;
        sink_push(out, id);
        start = at + match_len;
    }
    encoder_free(&e);
    return st;
}

nu_status nu_vocab_tokenize(const nu_vocab *v, const char *text, size_t len, unsigned flags,
                            int32_t *tokens, size_t cap, size_t *n_tokens, nu_error *err) {
    if (!v || (!text && len) || (!tokens && cap) || !n_tokens) {
        return nu_fail(err, NU_ERR_INVALID_ARG, "nu_tokenize: NULL argument");
    }
    *n_tokens = 0;
    if (len > (UINT32_MAX / 3) - 2) {
        return nu_fail(err, NU_ERR_INVALID_ARG, "text of %zu bytes is too long to tokenize", len);
    }
    token_sink out = {tokens, cap, 0, false};
    bool add = (flags & NU_TOKENIZE_ADD_BOS) != 0;
    if (add && v->add_bos && v->bos >= 0) sink_push(&out, v->bos);
    nu_status st = tokenize_text(v, text, len, (flags & NU_TOKENIZE_PARSE_SPECIAL) != 0, &out, err);
    if (st) return st;
    if (add && v->add_eos && v->eos >= 0) sink_push(&out, v->eos);
    *n_tokens = out.n;
    if (out.n > cap) {
        return nu_fail(err, NU_ERR_BUFFER_SMALL, "the text needs %zu tokens, the buffer holds %zu",
                       out.n, cap);
    }
    return NU_OK;
}

/* ------------------------------------------------------------------------ */
/* Detokenizing                                                             */
/* ------------------------------------------------------------------------ */

/* Receives the bytes of a token one at a time. */
typedef void (*byte_fn)(void *ctx, unsigned char b);

/* Sends a normal token's text: SentencePiece's (and Gemma 4's) "▁" becomes a
 * space; GPT-2 characters become the bytes they stand for. */
static void send_normal_text(const nu_vocab *v, const char *s, size_t n, byte_fn fn, void *ctx) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp = u[i];
        size_t k = nu_utf8_decode(s + i, n - i, &cp);
        if (k == 0) k = 1;
        if (v->kind != VOCAB_BPE && k == 3 && memcmp(u + i, "\xE2\x96\x81", 3) == 0) {
            fn(ctx, ' ');
        } else if (v->kind == VOCAB_BPE && nu_bpe_byte_of_char(cp) >= 0) {
            fn(ctx, (unsigned char)nu_bpe_byte_of_char(cp));
        } else {
            for (size_t j = 0; j < k; j++) fn(ctx, u[i + j]);
        }
        i += k;
    }
}

/* Sends the bytes a token stands for in generated text. */
static void send_token(const nu_vocab *v, int32_t token, bool special, byte_fn fn, void *ctx) {
    if (!valid_id(v, token)) return;
    const char *s = v->pool + v->offset[token];
    size_t n = v->length[token];
    switch (v->type[token]) {
    case NU_TOKEN_BYTE: {
        int b = byte_token_value(s, n);
        if (b >= 0) fn(ctx, (unsigned char)b);
        return;
    }
    case NU_TOKEN_CONTROL:
        if (!special) return;
        break;
    case NU_TOKEN_UNKNOWN:
    case NU_TOKEN_USER_DEFINED: break;
    default: send_normal_text(v, s, n, fn, ctx); return;
    }
    for (size_t i = 0; i < n; i++) fn(ctx, (unsigned char)s[i]);
}

/* A byte sink over a caller's buffer: counts everything, stores what fits. */
typedef struct byte_sink {
    char *buf;
    size_t cap, n;
} byte_sink;

static void byte_sink_put(void *ctx, unsigned char b) {
    byte_sink *s = ctx;
    if (s->n < s->cap) s->buf[s->n] = (char)b;
    s->n++;
}

size_t nu_vocab_token_to_bytes(const nu_vocab *v, int32_t token, bool special, char *buf,
                               size_t cap) {
    byte_sink s = {buf, buf ? cap : 0, 0};
    send_token(v, token, special, byte_sink_put, &s);
    return s.n;
}

/* Streaming state: the detokenizer and the caller's output buffer. */
typedef struct detok_out {
    nu_detokenizer *d;
    char *buf;
    size_t cap, n;
} detok_out;

/* Writes one byte of finished text, dropping the first one if it is a space
 * and the caller asked for that. Bytes past cap are lost. */
static void detok_write(detok_out *o, unsigned char b) {
    if (!o->d->started) {
        o->d->started = true;
        if (b == ' ' && o->d->strip_leading_space) return;
    }
    if (o->n < o->cap) o->buf[o->n++] = (char)b;
}

static void detok_write_replacement(detok_out *o) {
    detok_write(o, 0xEF);
    detok_write(o, 0xBF);
    detok_write(o, 0xBD);
}

/* Whether b can follow the pending bytes p[0..n) of a character. */
static bool detok_can_continue(const unsigned char *p, size_t n, unsigned char b) {
    if ((b & 0xC0) != 0x80) return false;
    if (n != 1) return true;
    if (p[0] == 0xE0) return b >= 0xA0;
    if (p[0] == 0xED) return b <= 0x9F;
    if (p[0] == 0xF0) return b >= 0x90;
    if (p[0] == 0xF4) return b <= 0x8F;
    return true;
}

/* Feeds one byte through the UTF-8 assembler: complete characters are
 * written, an unfinished one waits in pending, and a sequence that cannot be
 * completed becomes U+FFFD (after which the byte is looked at afresh). */
static void detok_feed(void *ctx, unsigned char b) {
    detok_out *o = ctx;
    nu_detokenizer *d = o->d;
    if (d->n_pending > 0) {
        if (detok_can_continue(d->pending, d->n_pending, b)) {
            d->pending[d->n_pending++] = b;
            if (d->n_pending == nu_utf8_lead_len(d->pending[0])) {
                for (size_t i = 0; i < d->n_pending; i++) detok_write(o, d->pending[i]);
                d->n_pending = 0;
            }
            return;
        }
        detok_write_replacement(o);
        d->n_pending = 0;
    }
    if (b < 0x80) {
        detok_write(o, b);
    } else if (nu_utf8_lead_len(b)) {
        d->pending[d->n_pending++] = b;
    } else {
        detok_write_replacement(o);
    }
}

size_t nu_vocab_detokenize_push(const nu_vocab *v, nu_detokenizer *d, int32_t token, char *out,
                                size_t cap) {
    detok_out o = {d, out, out ? cap : 0, 0};
    send_token(v, token, d->special, detok_feed, &o);
    return o.n;
}

size_t nu_vocab_detokenize_flush(nu_detokenizer *d, char *out, size_t cap) {
    detok_out o = {d, out, out ? cap : 0, 0};
    if (d->n_pending > 0) {
        detok_write_replacement(&o);
        d->n_pending = 0;
    }
    return o.n;
}
