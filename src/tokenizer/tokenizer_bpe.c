/* tokenizer_bpe.c - byte-level BPE, as GPT-2 and most later models use it.
 *
 * A "gpt2" vocabulary spells every byte as a printable character (GPT-2's
 * byte-to-unicode mapping, below), so its tokens are strings over 256
 * characters, and tokenizer.ggml.merges lists the pairs of tokens to join,
 * most important first. Tokenizing a fragment of text (special tokens were
 * already cut out by tokenizer.c) goes:
 *
 *   1. the family's pre-tokenizer cuts it into pieces (pretokenize.c);
 *   2. each piece starts as one symbol per byte (the token of its character);
 *   3. the adjacent pair with the best (lowest) merge rank is joined, the
 *      leftmost on ties, until no adjacent pair has a merge.
 *
 * This is what Hugging Face's tokenizers library does (its BPE model with a
 * ByteLevel pre-tokenizer and no dropout). Merges are found in a hash table
 * keyed by the pair of token ids, so merging never compares strings; the
 * pairs of a piece wait in a priority queue ordered by (rank, position). A
 * per-call cache of pieces already seen saves most of the merging on longer
 * texts, where the same words come back again and again.
 *
 * Gemma 4's "gemma4" vocabularies run the same merge loop over characters
 * instead of bytes: its tokens are UTF-8 text with every space written
 * "\u2581" (as SentencePiece writes it) and its merges join such texts.
 * Its Hugging Face tokenizer replaces spaces by "\u2581" and does not cut
 * words apart; the text is cut only into runs of line breaks and runs of
 * everything else (llama.cpp: "[^\n]+|[\n]+"), and a run of line breaks
 * that is a token is that token. A character the vocabulary lacks is
 * written as the <0xXX> tokens of its bytes ("byte fallback").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "pretokenize.h"
#include "tokenizer_internal.h"

/* One merge: the pair (left << 32 | right) joins into token at this rank. */
typedef struct merge_slot {
    uint64_t key;
    uint32_t rank;
    int32_t token;
} merge_slot;

#define EMPTY_KEY UINT64_MAX /* token ids are below 2^26: no pair has this key */

struct nu_bpe_vocab {
    merge_slot *merges; /* open addressing, linear probing */
    uint64_t merge_mask;
    size_t n_merges;
    int32_t byte_token[256]; /* token of each byte's character, or -1 */
    pretokenizer *pre;       /* NULL for character BPE, which cuts only at line breaks */
    bool ignore_merges;
    bool chars; /* character BPE ("gemma4"), not byte-level */
};

/* ------------------------------------------------------------------------ */
/* GPT-2's byte <-> character mapping                                       */
/* ------------------------------------------------------------------------ */

/* Bytes that are printable Latin-1 ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand
 * for themselves; the other 68 (controls, space, 0x7F..0xA0, the soft hyphen
 * 0xAD) become U+0100.. in increasing byte order. */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The code point GPT-2's mapping gives byte b. */
static uint32_t nu_bpe_char_of_byte(unsigned b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 0x100 + b;             /* 33 bytes: U+0100..U+0120 */
    if (b <= 0xA0) return 0x100 + 33 + b - 0x7F; /* 34 bytes: U+0121..U+0142 */
    return 0x143;                                /* 0xAD */
}

int nu_bpe_byte_of_char(uint32_t cp) {
    if (cp <= 0xFF) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp > 0x143) return -1;
    uint32_t k = cp - 0x100;
    if (k < 33) return (int)k;
    if (k < 67) return (int)(0x7F + k - 33);
    return 0xAD;
}

/* Writes the UTF-8 of byte b's character (1 or 2 bytes) to out. */
static size_t put_byte_char(unsigned b, char *out) {
    char u[NU_UTF8_MAX];
    size_t n = nu_utf8_encode(nu_bpe_char_of_byte(b), u); /* below U+0144: 1 or 2 bytes */
    memcpy(out, u, n);
    return n;
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                  */
/* ------------------------------------------------------------------------ */

nu_status nu_bpe_load_pre(const nu_gguf_file *f, nu_vocab *v, nu_error *err) {
    nu_gguf_string name = {"", 0};
    const nu_gguf_value *x = nu_gguf_find(f, "tokenizer.ggml.pre");
    if (x && x->type != GGUF_STRING) {
        return nu_fail(err, NU_ERR_FORMAT, "tokenizer.ggml.pre should be a string, found %s",
                       nu_gguf_type_name(x->type));
    }
    if (x) name = x->v.s;
    v->bpe = calloc(1, sizeof *v->bpe);
    if (!v->bpe) return nu_fail(err, NU_ERR_NOMEM, "out of memory for the vocabulary");
    if (v->kind == VOCAB_CHAR_BPE) {
        v->bpe->chars = true;
        return NU_OK;
    }
    bool known;
    nu_status st = nu_pretokenizer_new(name.data, name.len, &v->bpe->pre, &known, err);
    if (st) return st;
    v->bpe->ignore_merges = nu_pretokenizer_ignores_merges(v->bpe->pre);
    if (!known) {
        int n = name.len > 64 ? 64 : (int)name.len;
        snprintf(v->warning, sizeof v->warning,
                 "unknown pre-tokenizer '%.*s' (tokenizer.ggml.pre): text is split as GPT-2 "
                 "splits it, so tokens may differ from the model's own tokenizer",
                 n, name.data);
    }
    return NU_OK;
}

bool nu_bpe_default_add_bos(const nu_vocab *v) {
    return v->bpe && v->bpe->pre && nu_pretokenizer_adds_bos(v->bpe->pre);
}

void nu_bpe_vocab_free(nu_bpe_vocab *b) {
    if (!b) return;
    free(b->merges);
    nu_pretokenizer_free(b->pre);
    free(b);
}

static uint64_t pair_key(int32_t left, int32_t right) {
    return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

/* Fibonacci hashing: the key times 2^64 / phi, high bits down to the mask. */
static uint64_t merge_home(uint64_t key, uint64_t mask) {
    return (key * 0x9E3779B97F4A7C15ull >> 24) & mask;
}

/* The merge of the pair (left, right), or NULL. */
static const merge_slot *find_merge(const nu_bpe_vocab *b, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return NULL;
    uint64_t key = pair_key(left, right);
    for (uint64_t i = merge_home(key, b->merge_mask);; i = (i + 1) & b->merge_mask) {
        const merge_slot *m = &b->merges[i];
        if (m->key == key) return m;
        if (m->key == EMPTY_KEY) return NULL;
    }
}

/* Adds a merge; a pair listed twice keeps its later rank, as in Hugging
 * Face's tokenizers (whose merge map is built by inserting in order). */
static void add_merge(nu_bpe_vocab *b, int32_t left, int32_t right, uint32_t rank, int32_t token) {
    uint64_t key = pair_key(left, right);
    uint64_t i = merge_home(key, b->merge_mask);
    while (b->merges[i].key != EMPTY_KEY && b->merges[i].key != key) i = (i + 1) & b->merge_mask;
    if (b->merges[i].key == EMPTY_KEY) b->n_merges++;
    b->merges[i] = (merge_slot){key, rank, token};
}

/* Splits a merge "A B" at the first space after its first byte (a token
 * never starts a merge line with a space, but may in principle hold one
 * later), looks up A, B and AB, and adds the merge when all three are
 * tokens. join is a buffer of at least s.len bytes. */
static nu_status parse_merge(nu_vocab *v, nu_gguf_string s, uint32_t rank, char *join,
                             nu_error *err) {
    const char *sp = s.len > 1 ? memchr(s.data + 1, ' ', s.len - 1) : NULL;
    if (!sp) {
        int n = s.len > 40 ? 40 : (int)s.len;
        return nu_fail(err, NU_ERR_FORMAT,
                       "tokenizer.ggml.merges[%u] ('%.*s') is not two tokens separated by a space",
                       rank, n, s.data);
    }
    size_t a = (size_t)(sp - s.data), bl = s.len - a - 1;
    int32_t left = nu_vocab_find(v, s.data, a);
    int32_t right = nu_vocab_find(v, sp + 1, bl);
    memcpy(join, s.data, a);
    memcpy(join + a, sp + 1, bl);
    int32_t token = nu_vocab_find(v, join, a + bl);
    /* Hugging Face refuses such a file; we skip the merge instead */
    if (left >= 0 && right >= 0 && token >= 0) add_merge(v->bpe, left, right, rank, token);
    return NU_OK;
}

/* Finds the token of every byte's character. */
static void find_byte_chars(nu_vocab *v) {
    for (unsigned b = 0; b < 256; b++) {
        char c[2];
        size_t n = put_byte_char(b, c);
        v->bpe->byte_token[b] = nu_vocab_find(v, c, n);
    }
}

nu_status nu_bpe_load_merges(const nu_gguf_file *f, nu_vocab *v, nu_error *err) {
    nu_bpe_vocab *b = v->bpe;
    if (!b->chars) find_byte_chars(v);
    const nu_gguf_value *a = nu_gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_STRING);
    if (!a) {
        return nu_fail(err, NU_ERR_FORMAT,
                       nu_gguf_find(f, "tokenizer.ggml.merges")
                           ? "tokenizer.ggml.merges is not an array of strings"
                           : "tokenizer.ggml.merges is missing (a 'gpt2' vocabulary needs it)");
    }
    uint64_t n = a->v.arr.n, cap = 16, longest = 1;
    if (n > (1u << 26)) return nu_fail(err, NU_ERR_FORMAT, "tokenizer.ggml.merges is too long");
    while (cap < 2 * n) cap *= 2;
    for (uint64_t i = 0; i < n; i++) {
        if (a->v.arr.items[i].v.s.len > longest) longest = a->v.arr.items[i].v.s.len;
    }
    b->merges = malloc(cap * sizeof *b->merges);
    char *join = malloc(longest);
    if (!b->merges || !join) {
        free(join);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for %llu merges", (unsigned long long)n);
    }
    for (uint64_t i = 0; i < cap; i++) b->merges[i].key = EMPTY_KEY;
    b->merge_mask = cap - 1;
    nu_status st = NU_OK;
    for (uint64_t i = 0; !st && i < n; i++) {
        st = parse_merge(v, a->v.arr.items[i].v.s, (uint32_t)i, join, err);
    }
    free(join);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Scratch memory                                                           */
/* ------------------------------------------------------------------------ */

/* A symbol of a piece: a token (or -1, merged away or no token), in a doubly
 * linked list of the symbols still alive. Character BPE keeps where a
 * character without a token lies in the piece, to write its bytes. */
typedef struct nu_bpe_symbol {
    int32_t token;
    int32_t prev, next;
    uint32_t start, len;
} nu_bpe_symbol;

/* A queued pair: the symbol at pos (holding left) and its neighbour
 * (holding right) join into token. Still valid while both hold the same
 * tokens: a symbol's token changes only by growing, so equal ids mean the
 * very same pair. */
typedef struct nu_bpe_pair {
    uint32_t rank;
    int32_t pos;
    int32_t left, right, token;
} nu_bpe_pair;

/* A cached piece: its bytes (in the text being tokenized, alive for the
 * whole call) and its tokens. Only short pieces are cached: they are the
 * words that repeat. */
#define CACHE_MAX_BYTES 32
#define CACHE_MAX_TOKENS 7

typedef struct cache_entry {
    const char *text; /* NULL: empty slot */
    uint32_t len;
    uint32_t n_tokens;
    int32_t tokens[CACHE_MAX_TOKENS];
} cache_entry;

/* Inputs shorter than this are not worth a cache. */
#define CACHE_MIN_INPUT 512

struct nu_bpe_work {
    const nu_vocab *v;
    token_sink *out;
    nu_pretok_scratch *pre;
    nu_bpe_symbol *symbols;
    size_t symbols_cap;
    nu_bpe_pair *heap;
    size_t n_heap, heap_cap;
    char *mapped; /* a piece in GPT-2 characters (ignore_merges lookups) */
    size_t mapped_cap;
    int32_t *tokens; /* the tokens of the last piece */
    size_t tokens_cap;
    cache_entry *cache; /* direct-mapped: a new piece replaces the slot's old one */
    size_t cache_mask;
    /* character BPE: the fragments of this call with spaces written "\u2581",
     * one after another (cached pieces point into it, so it is never reused) */
    char *escaped;
    size_t escaped_used;
};

/* A cache with about one slot per 16 input bytes (256 to 16384 slots), or
 * none for short inputs. */
static bool cache_init(nu_bpe_work *w, size_t len) {
    if (len < CACHE_MIN_INPUT) return true;
    size_t n = 256;
    while (n < 16384 && n < len / 16) n *= 2;
    w->cache = calloc(n, sizeof *w->cache);
    w->cache_mask = n - 1;
    return w->cache != NULL;
}

nu_status nu_bpe_work_new(const nu_vocab *v, size_t len, nu_bpe_work **out, nu_error *err) {
    nu_bpe_work *w = calloc(1, sizeof *w);
    *out = w;
    if (!w || !cache_init(w, len)) return nu_fail(err, NU_ERR_NOMEM, "out of memory tokenizing");
    w->v = v;
    if (v->bpe->chars) {
        if (len > (SIZE_MAX - 1) / 3 || !(w->escaped = malloc(3 * len + 1))) {
            return nu_fail(err, NU_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
        }
        return NU_OK;
    }
    return nu_pretok_scratch_new(&w->pre, err);
}

void nu_bpe_work_free(nu_bpe_work *w) {
    if (!w) return;
    nu_pretok_scratch_free(w->pre);
    free(w->symbols);
    free(w->heap);
    free(w->mapped);
    free(w->tokens);
    free(w->cache);
    free(w->escaped);
    free(w);
}

/* A quick hash of a short piece, 8 bytes at a time. */
static uint64_t piece_hash(const char *s, size_t n) {
    uint64_t h = n * 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t chunk = 0;
        memcpy(&chunk, s + i, n - i < 8 ? n - i : 8);
        h = (h ^ chunk) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return h;
}

/* The cache slot a piece belongs in, or NULL when it is not cacheable. */
static cache_entry *cache_slot(const nu_bpe_work *w, const char *s, size_t n) {
    if (!w->cache || n > CACHE_MAX_BYTES) return NULL;
    return &w->cache[piece_hash(s, n) & w->cache_mask];
}

/* Writes the cached tokens of a piece; false when the slot holds another. */
static bool cache_emit(nu_bpe_work *w, const cache_entry *e, const char *s, size_t n) {
    if (!e->text || e->len != n || memcmp(e->text, s, n) != 0) return false;
    for (uint32_t i = 0; i < e->n_tokens; i++) sink_push(w->out, e->tokens[i]);
    return true;
}

/* Remembers the tokens of a piece (when they are few enough). */
static void cache_store(cache_entry *e, const char *s, size_t n, const int32_t *tokens, size_t k) {
    if (!e || k > CACHE_MAX_TOKENS) return;
    e->text = s;
    e->len = (uint32_t)n;
    e->n_tokens = (uint32_t)k;
    memcpy(e->tokens, tokens, k * sizeof *tokens);
}

/* Room for n elements of size elem in buf, which holds *cap: returns buf or
 * its reallocated copy (*cap updated), or NULL when memory runs out (buf is
 * then unchanged and still owned by the caller). */
static void *reserve(void *buf, size_t *cap, size_t n, size_t elem) {
    if (n <= *cap) return buf;
    size_t c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    void *p = realloc(buf, c * elem);
    if (p) *cap = c;
    return p;
}

/* Sizes the scratch arrays for a piece of n bytes: a symbol, a token and
 * two mapped bytes per byte, and three queued pairs (the initial pairs and
 * two per merge). */
static bool reserve_piece(nu_bpe_work *w, size_t n) {
    void *p;
    if (n > INT32_MAX / 4) return false;
    if (!(p = reserve(w->symbols, &w->symbols_cap, n, sizeof *w->symbols))) return false;
    w->symbols = p;
    if (!(p = reserve(w->heap, &w->heap_cap, 3 * n, sizeof *w->heap))) return false;
    w->heap = p;
    if (!(p = reserve(w->tokens, &w->tokens_cap, n, sizeof *w->tokens))) return false;
    w->tokens = p;
    if (!(p = reserve(w->mapped, &w->mapped_cap, 2 * n, 1))) return false;
    w->mapped = p;
    return true;
}

/* ------------------------------------------------------------------------ */
/* The merge loop                                                           */
/* ------------------------------------------------------------------------ */

/* Heap order: lower rank first, then the leftmost pair. */
static bool pair_before(const nu_bpe_pair *a, const nu_bpe_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

/* Pushes onto the binary heap (room was reserved for every pair a piece
 * can queue). */
static void heap_push(nu_bpe_work *w, nu_bpe_pair p) {
    size_t i = w->n_heap++;
    while (i > 0 && pair_before(&p, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = p;
}

static nu_bpe_pair heap_pop(nu_bpe_work *w) {
    nu_bpe_pair top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!pair_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

/* Queues the symbol at pos with its right neighbour if they have a merge. */
static void queue_pair(nu_bpe_work *w, int32_t pos) {
    if (pos < 0) return;
    const nu_bpe_symbol *a = &w->symbols[pos];
    if (a->next < 0) return;
    int32_t right = w->symbols[a->next].token;
    const merge_slot *m = find_merge(w->v->bpe, a->token, right);
    if (m) heap_push(w, (nu_bpe_pair){m->rank, pos, a->token, right, m->token});
}

/* Joins the best queued pair, unless it went stale. */
static void merge_best(nu_bpe_work *w) {
    nu_bpe_pair p = heap_pop(w);
    nu_bpe_symbol *a = &w->symbols[p.pos];
    if (a->token != p.left || a->next < 0) return;
    nu_bpe_symbol *b = &w->symbols[a->next];
    if (b->token != p.right) return;
    a->token = p.token;
    b->token = -1;
    a->next = b->next;
    if (a->next >= 0) w->symbols[a->next].prev = p.pos;
    queue_pair(w, a->prev);
    queue_pair(w, p.pos);
}

/* The token whose text is the whole piece in GPT-2 characters, or -1 (for
 * pre-tokenizers with ignore_merges). */
static int32_t whole_piece_token(nu_bpe_work *w, const unsigned char *s, size_t n) {
    if (n > w->v->max_token_len) return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += put_byte_char(s[i], w->mapped + k);
    int32_t id = nu_vocab_find(w->v, w->mapped, k);
    return id >= 0 && (w->v->flags[id] & TOKEN_MERGEABLE) ? id : -1;
}

/* Makes one symbol per byte of the piece. A byte whose character is not in
 * the vocabulary is left out, so its neighbours may merge across it: Hugging
 * Face's BPE drops such characters (these vocabularies have no unknown token
 * at the BPE level). Returns the symbol count. */
static int32_t init_symbols(nu_bpe_work *w, const unsigned char *s, size_t n) {
    const int32_t *byte_token = w->v->bpe->byte_token;
    int32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (byte_token[s[i]] < 0) continue;
        w->symbols[k] = (nu_bpe_symbol){byte_token[s[i]], k - 1, k + 1, (uint32_t)i, 1};
        k++;
    }
    if (k > 0) w->symbols[k - 1].next = -1;
    return k;
}

/* Character BPE: makes one symbol per character of the piece (a byte that
 * does not start a well-formed character is one of its own), holding the
 * character's token or -1. Returns the symbol count. */
static int32_t init_char_symbols(nu_bpe_work *w, const unsigned char *s, size_t n) {
    const nu_vocab *v = w->v;
    int32_t k = 0;
    for (size_t i = 0; i < n; k++) {
        size_t len = nu_utf8_decode((const char *)s + i, n - i, NULL);
        if (len == 0) len = 1;
        int32_t id = nu_vocab_find(v, (const char *)s + i, len);
        if (id >= 0 && !(v->flags[id] & TOKEN_MERGEABLE)) id = -1;
        w->symbols[k] = (nu_bpe_symbol){id, k - 1, k + 1, (uint32_t)i, (uint32_t)len};
        i += len;
    }
    if (k > 0) w->symbols[k - 1].next = -1;
    return k;
}

/* Writes a symbol's token, or for a character without one the <0xXX>
 * tokens of its bytes (the unknown token for a byte the vocabulary lacks).
 * Returns how many tokens it wrote to tokens[]. */
static size_t emit_symbol(nu_bpe_work *w, const nu_bpe_symbol *sym, const unsigned char *s,
                          int32_t *tokens) {
    if (sym->token >= 0) {
        sink_push(w->out, sym->token);
        tokens[0] = sym->token;
        return 1;
    }
    size_t k = 0;
    for (uint32_t i = 0; i < sym->len; i++) {
        int32_t id = w->v->byte_token[s[sym->start + i]];
        if (id < 0) id = w->v->unk;
        if (id < 0) continue;
        sink_push(w->out, id);
        tokens[k++] = id;
    }
    return k;
}

/* Merges the symbols of a piece (n >= 2 bytes) by rank, then writes the
 * tokens to the sink and to tokens[] (room for n). Returns the token count. */
static size_t merge_piece(nu_bpe_work *w, const unsigned char *s, size_t n, int32_t *tokens) {
    size_t k = 0;
    if (w->v->bpe->ignore_merges && (tokens[0] = whole_piece_token(w, s, n)) >= 0) {
        sink_push(w->out, tokens[0]);
        return 1;
    }
    int32_t n_sym = w->v->bpe->chars ? init_char_symbols(w, s, n) : init_symbols(w, s, n);
    if (n_sym == 0) return 0;
    w->n_heap = 0;
    for (int32_t i = 0; i + 1 < n_sym; i++) queue_pair(w, i);
    while (w->n_heap > 0) merge_best(w);
    for (int32_t i = 0; i >= 0; i = w->symbols[i].next) {
        k += emit_symbol(w, &w->symbols[i], s, tokens + k);
    }
    return k;
}

/* Tokenizes one piece: a single byte is its token; a piece seen before in
 * this call comes from the cache; others are merged (and cached). */
static nu_status encode_piece(void *ctx, const char *text, size_t n, nu_error *err) {
    nu_bpe_work *w = ctx;
    if (n == 1 && !w->v->bpe->chars) {
        int32_t t = w->v->bpe->byte_token[(unsigned char)text[0]];
        if (t >= 0) sink_push(w->out, t);
        return NU_OK;
    }
    cache_entry *e = cache_slot(w, text, n);
    if (e && cache_emit(w, e, text, n)) return NU_OK;
    if (!reserve_piece(w, n)) {
        return nu_fail(err, NU_ERR_NOMEM, "out of memory tokenizing a piece of %zu bytes", n);
    }
    size_t k = merge_piece(w, (const unsigned char *)text, n, w->tokens);
    cache_store(e, text, n, w->tokens, k);
    return NU_OK;
}

/* Character BPE: a run of line breaks that is a token is that token (as
 * llama.cpp does for Gemma 4, llama.cpp PR 21343); other pieces are merged. */
static nu_status encode_char_piece(nu_bpe_work *w, const char *text, size_t n, nu_error *err) {
    if (text[0] == '\n') {
        int32_t id = nu_vocab_find(w->v, text, n);
        if (id >= 0 && (w->v->flags[id] & TOKEN_MERGEABLE)) {
            sink_push(w->out, id);
            return NU_OK;
        }
    }
    return encode_piece(w, text, n, err);
}

/* Character BPE: writes the fragment with spaces as "\u2581" after the
 * fragments before it, then encodes its runs of line breaks and its runs
 * of other characters. */
static nu_status char_bpe_encode(nu_bpe_work *w, const char *s, size_t n, nu_error *err) {
    char *e = w->escaped + w->escaped_used;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(e + len, "\xE2\x96\x81", 3);
            len += 3;
        } else {
            e[len++] = s[i];
        }
    }
    w->escaped_used += len;
    nu_status st = NU_OK;
    for (size_t start = 0, i = 1; !st && start < len; i++) {
        if (i < len && (e[i] == '\n') == (e[start] == '\n')) continue;
        st = encode_char_piece(w, e + start, i - start, err);
        start = i;
    }
    return st;
}

nu_status nu_bpe_encode(const nu_vocab *v, nu_bpe_work *w, const char *s, size_t n, token_sink *out,
                        nu_error *err) {
    w->out = out;
    if (v->bpe->chars) return char_bpe_encode(w, s, n, err);
    return nu_pretokenize(v->bpe->pre, w->pre, s, n, encode_piece, w, err);
}
