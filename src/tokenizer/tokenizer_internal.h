/* tokenizer_internal.h - what the tokenizer's source files share.
 *
 * tokenizer.c loads vocabularies, matches special tokens, runs the
 * SentencePiece tokenizer and detokenizes; tokenizer_bpe.c adds byte-level
 * BPE, with pre-tokenizers from pretokenize.c. They share the vocabulary
 * struct, a few UTF-8 helpers and the token sink declared here. Nothing
 * outside the tokenizer includes this header. */
#ifndef NU_TOKENIZER_INTERNAL_H
#define NU_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer.h"
#include "utf8.h"

/* The byte-level BPE part of a vocabulary (tokenizer_bpe.c). */
typedef struct nu_bpe_vocab nu_bpe_vocab;

typedef enum vocab_kind {
    VOCAB_SPM,      /* SentencePiece BPE with scores ("llama") */
    VOCAB_BPE,      /* byte-level BPE with merge ranks ("gpt2"), see tokenizer_bpe.c */
    VOCAB_CHAR_BPE, /* BPE with merge ranks over UTF-8 characters, spaces written
                     * "\u2581", <0xXX> byte fallback ("gemma4"), see tokenizer_bpe.c */
} vocab_kind;

/* Whether the vocabulary is one of the two merge-ranked BPE kinds. */
#define VOCAB_IS_BPE(v) ((v)->kind == VOCAB_BPE || (v)->kind == VOCAB_CHAR_BPE)

/* Per-token flags, derived from the type and the special ids at load. */
enum {
    TOKEN_MERGEABLE = 1 << 0, /* BPE may produce it (normal, user-defined, unused) */
    TOKEN_EOG = 1 << 1,       /* ends generation */
};

/* A node of the trie of special-token texts. Children form a sibling list,
 * except the root's, which are indexed by byte in nu_vocab.trie_root. */
typedef struct trie_node {
    int32_t first_child;
    int32_t next_sibling;
    int32_t always_token;  /* a user-defined token with this text, or -1 */
    int32_t special_token; /* a control / unknown token with this text, or -1 */
    uint8_t byte;
} trie_node;

struct nu_vocab {
    vocab_kind kind;
    char model_name[32];
    int32_t n_tokens;

    /* token id -> text (NUL-terminated inside pool), length, score, type, flags */
    char *pool;
    size_t *offset;
    uint32_t *length;
    float *score;
    uint8_t *type;
    uint8_t *flags;
    size_t max_token_len;

    /* text -> id: open addressing, linear probing; slots hold id + 1 (0 = empty) */
    uint32_t *slots;
    uint32_t slot_mask;

    /* every pair of adjacent characters inside a token BPE may produce, each
     * character packed into 32 bits; a text is cut where a pair is absent */
    uint64_t *bigrams; /* open addressing; 0 = empty */
    uint64_t bigram_mask;
    size_t n_bigrams;

    int32_t byte_token[256]; /* <0xXX> token of each byte, or -1 */
    bool has_byte_tokens;

    int32_t bos, eos, unk, pad, sep, eot, eom; /* -1 when the vocab has none */
    bool add_bos, add_eos, add_space_prefix;

    /* special tokens (control, user-defined, unknown) by text */
    trie_node *trie;
    int32_t n_trie;
    int32_t trie_root[256];

    /* byte-level BPE: merges, byte tokens and the pre-tokenizer (NULL for SPM) */
    nu_bpe_vocab *bpe;

    /* something the caller should know about the file (empty when all is well) */
    char warning[192];
};

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                    */
/* ------------------------------------------------------------------------ */

/* The decoder is base's (utf8.h). */

/* True when s[0..n) is well-formed UTF-8 without NUL bytes. */
static inline bool nu_utf8_valid_text(const char *s, size_t n) {
    return memchr(s, 0, n) == NULL && nu_utf8_valid(s, n, NULL);
}

/* ------------------------------------------------------------------------ */
/* Shared by the tokenizer kinds                                            */
/* ------------------------------------------------------------------------ */

/* The id of the token whose text is s[0..n), or -1 (tokenizer.c). When
 * several tokens share a text, the first one BPE may produce wins. */
int32_t nu_vocab_find(const nu_vocab *v, const char *s, size_t n);

/* Where token ids go: all are counted, the first cap are stored. */
typedef struct token_sink {
    int32_t *ids;
    size_t cap;
    size_t n;
    bool after_unknown; /* the last id stands for unknown characters */
} token_sink;

static inline void sink_push(token_sink *s, int32_t id) {
    if (s->n < s->cap) s->ids[s->n] = id;
    s->n++;
    s->after_unknown = false;
}

/* ------------------------------------------------------------------------ */
/* Byte-level BPE (tokenizer_bpe.c)                                         */
/* ------------------------------------------------------------------------ */

/* Reads tokenizer.ggml.pre and picks the pre-tokenizer (an unknown name
 * falls back to GPT-2's and leaves a note in v->warning); character BPE has
 * a fixed one. Runs before the special-token flags are read, since some
 * families add BOS by default. */
nu_status nu_bpe_load_pre(const nu_gguf_file *f, nu_vocab *v, nu_error *err);
/* Whether the pre-tokenizer family adds BOS unless the file says otherwise. */
bool nu_bpe_default_add_bos(const nu_vocab *v);
/* Reads tokenizer.ggml.merges and, for byte-level BPE, finds the token of
 * every byte's character; needs the text -> id table. */
nu_status nu_bpe_load_merges(const nu_gguf_file *f, nu_vocab *v, nu_error *err);
void nu_bpe_vocab_free(nu_bpe_vocab *b);

/* Scratch memory for one tokenize call on up to len bytes. */
typedef struct nu_bpe_work nu_bpe_work;
nu_status nu_bpe_work_new(const nu_vocab *v, size_t len, nu_bpe_work **out, nu_error *err);
void nu_bpe_work_free(nu_bpe_work *w);
/* Tokenizes one fragment of plain text (no special tokens in it). */
nu_status nu_bpe_encode(const nu_vocab *v, nu_bpe_work *w, const char *s, size_t n, token_sink *out,
                        nu_error *err);

/* The byte a GPT-2 byte-level character stands for, or -1. */
int nu_bpe_byte_of_char(uint32_t cp);

#endif
