/* grammar_vocab.c - grammars bound to a vocabulary: the public nu_grammar
 * and nu_grammar_state of nucleus.h.
 *
 * Binding a grammar to a model copies every token's bytes and builds a trie
 * of them in preorder (node i's subtree is i+1 .. end[i]). A full mask walks
 * the trie once: each node steps its parent's matcher level by one byte, a
 * dead level skips the whole subtree, so shared prefixes are matched once and
 * most of the vocabulary is never looked at in constrained positions.
 *
 * Masks are cached per state: the key is the exact set of stacks (positions
 * from top to bottom) and the partial character, so a repeated state (the
 * inside of a JSON string, digits of a number) costs a lookup, not a walk.
 * Each cached mask remembers the largest completion distance among its
 * tokens, which tells whether a token budget can change it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar.h"
#include "model.h"
#include "tokenizer.h"

#define MASK_CACHE 16       /* cached masks per state */
#define SMALL_CANDIDATES 48 /* below this, candidates are checked one by one */

enum { TOK_NONE = 0, TOK_TEXT = 1, TOK_EOG = 2 };

struct nu_grammar {
    nu_gram_program *prog;
    bool has_vocab;
    int32_t n_vocab;
    uint8_t *tok_kind; /* TOK_* per token */
    uint32_t *tok_off; /* token t's bytes: bytes[tok_off[t] .. tok_off[t + 1]) */
    uint8_t *bytes;
    /* the trie, in preorder; node 0 is the root (the empty string) */
    uint32_t n_trie, max_depth;
    uint8_t *trie_byte;
    uint32_t *trie_depth, *trie_end;
    uint32_t *trie_tok_first, *trie_tok_count; /* into trie_toks */
    int32_t *trie_toks;
};

typedef struct mask_entry {
    bool valid;
    uint64_t hash, used;
    uint32_t *key;
    uint32_t key_len, key_cap;
    uint64_t *bits;
    uint32_t max_dist; /* largest distance after any allowed token */
} mask_entry;

struct nu_grammar_state {
    const nu_grammar *g;
    nu_gram_arena a;
    nu_gram_level cur;     /* the committed state: tops and nodes at the front of the arena */
    nu_gram_level *levels; /* trie walk, one per depth */
    int64_t budget;        /* tokens left, -1: no limit */
    uint64_t *bits;        /* last walk: allowed text tokens */
    uint32_t *dist;        /* last walk: distance after each allowed token */
    uint32_t walk_max;
    mask_entry cache[MASK_CACHE];
    uint64_t clock;
    uint32_t *key;
    uint32_t key_len, key_cap;
    bool no_cache;
};

/* ------------------------------------------------------------------------ */
/* Binding a program to a vocabulary                                        */
/* ------------------------------------------------------------------------ */

/* What a token stands for: text bytes, the end, or nothing usable (control
 * and unknown tokens never come from a grammar). */
static uint8_t token_kind(const nu_vocab *v, int32_t t, size_t n_bytes) {
    if (nu_vocab_is_eog(v, t)) return TOK_EOG;
    if (n_bytes == 0 || nu_vocab_token_type(v, t) == NU_TOKEN_UNKNOWN) return TOK_NONE;
    return TOK_TEXT;
}

/* Copies every token's bytes. */
static bool load_tokens(nu_grammar *g, const nu_vocab *v) {
    int32_t n = nu_vocab_n_tokens(v);
    g->n_vocab = n;
    g->tok_kind = malloc((size_t)n + 1);
    g->tok_off = malloc(((size_t)n + 1) * sizeof *g->tok_off);
    if (!g->tok_kind || !g->tok_off) return false;
    size_t total = 0;
    for (int32_t t = 0; t < n; t++) total += nu_vocab_token_to_bytes(v, t, false, NULL, 0);
    g->bytes = malloc(total + 1);
    if (!g->bytes) return false;
    uint32_t off = 0;
    for (int32_t t = 0; t < n; t++) {
        size_t k = nu_vocab_token_to_bytes(v, t, false, (char *)g->bytes + off, total - off);
        g->tok_off[t] = off;
        g->tok_kind[t] = token_kind(v, t, k);
        if (g->tok_kind[t] == TOK_TEXT) off += (uint32_t)k;
    }
    g->tok_off[n] = off;
    return true;
}

typedef struct sort_tok {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} sort_tok;

static int cmp_tok(const void *x, const void *y) {
    const sort_tok *a = x, *b = y;
    uint32_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->p, b->p, n);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Allocates the trie arrays for up to n nodes. */
static bool trie_alloc(nu_grammar *g, size_t n) {
    g->trie_byte = malloc(n);
    g->trie_depth = malloc(n * sizeof *g->trie_depth);
    g->trie_end = malloc(n * sizeof *g->trie_end);
    g->trie_tok_first = calloc(n, sizeof *g->trie_tok_first);
    g->trie_tok_count = calloc(n, sizeof *g->trie_tok_count);
    return g->trie_byte && g->trie_depth && g->trie_end && g->trie_tok_first && g->trie_tok_count;
}

/* Builds the preorder trie from the tokens sorted by bytes: each token
 * shares the path of its common prefix with the one before it. */
static bool build_trie(nu_grammar *g, sort_tok *toks, uint32_t n, uint32_t max_len) {
    size_t bound = 1;
    for (uint32_t i = 0; i < n; i++) bound += toks[i].len;
    uint32_t *path = malloc(((size_t)max_len + 1) * sizeof *path);
    if (!path || !trie_alloc(g, bound)) {
        free(path);
        return false;
    }
    g->trie_byte[0] = 0;
    g->trie_depth[0] = 0;
    path[0] = 0;
    uint32_t n_nodes = 1, depth = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t common = 0;
        if (i > 0)
            while (common < depth && common < toks[i].len &&
                   toks[i - 1].p[common] == toks[i].p[common])
                common++;
        while (depth > common) g->trie_end[path[depth--]] = n_nodes;
        for (; depth < toks[i].len; depth++) {
            g->trie_byte[n_nodes] = toks[i].p[depth];
            g->trie_depth[n_nodes] = depth + 1;
            path[depth + 1] = n_nodes++;
        }
        uint32_t node = path[toks[i].len];
        if (g->trie_tok_count[node]++ == 0) g->trie_tok_first[node] = i;
        g->trie_toks[i] = toks[i].id;
    }
    while (depth > 0) g->trie_end[path[depth--]] = n_nodes;
    g->trie_end[0] = n_nodes;
    g->n_trie = n_nodes;
    g->max_depth = max_len;
    free(path);
    return true;
}

/* The trie of all text tokens. */
static bool index_tokens(nu_grammar *g) {
    uint32_t n = 0, max_len = 0;
    for (int32_t t = 0; t < g->n_vocab; t++) n += g->tok_kind[t] == TOK_TEXT;
    sort_tok *toks = malloc(((size_t)n + 1) * sizeof *toks);
    g->trie_toks = malloc(((size_t)n + 1) * sizeof *g->trie_toks);
    if (!toks || !g->trie_toks) {
        free(toks);
        return false;
    }
    n = 0;
    for (int32_t t = 0; t < g->n_vocab; t++) {
        if (g->tok_kind[t] != TOK_TEXT) continue;
        uint32_t len = g->tok_off[t + 1] - g->tok_off[t];
        toks[n++] = (sort_tok){g->bytes + g->tok_off[t], len, t};
        if (len > max_len) max_len = len;
    }
    qsort(toks, n, sizeof *toks, cmp_tok);
    bool ok = build_trie(g, toks, n, max_len);
    free(toks);
    return ok;
}

void nu_grammar_free(nu_grammar *g) {
    if (!g) return;
    nu_gram_program_free(g->prog);
    free(g->tok_kind);
    free(g->tok_off);
    free(g->bytes);
    free(g->trie_byte);
    free(g->trie_depth);
    free(g->trie_end);
    free(g->trie_tok_first);
    free(g->trie_tok_count);
    free(g->trie_toks);
    free(g);
}

/* Compiles GBNF text and binds it to the model's vocabulary (if any). */
static nu_status grammar_new(const nu_model *m, const char *gbnf, size_t len, const char *root,
                             nu_grammar **out, nu_error *err) {
    *out = NULL;
    const nu_vocab *v = m ? nu_model_vocab(m) : NULL;
    if (m && !v)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the model was loaded without a vocabulary");
    nu_grammar *g = calloc(1, sizeof *g);
    if (!g) return nu_fail(err, NU_ERR_NOMEM, "out of memory for a grammar");
    nu_status st = nu_gram_compile(gbnf, len, root, &g->prog, err);
    if (st == NU_OK && v) {
        g->has_vocab = true;
        if (!load_tokens(g, v) || !index_tokens(g))
            st = nu_fail(err, NU_ERR_NOMEM, "out of memory indexing the vocabulary");
    }
    if (st != NU_OK) {
        nu_grammar_free(g);
        return st;
    }
    *out = g;
    return NU_OK;
}

nu_status nu_grammar_from_gbnf(const nu_model *m, const char *gbnf, const char *root,
                               nu_grammar **out, nu_error *err) {
    if (!out) return nu_fail(err, NU_ERR_INVALID_ARG, "nu_grammar_from_gbnf: no output");
    *out = NULL;
    if (!gbnf) return nu_fail(err, NU_ERR_INVALID_ARG, "nu_grammar_from_gbnf: no grammar text");
    return grammar_new(m, gbnf, strlen(gbnf), root, out, err);
}

/* Compiles converter output, freeing it; errors say what it was made from. */
static nu_status grammar_from_text(const nu_model *m, nu_status st, char *gbnf, const char *what,
                                   nu_grammar **out, nu_error *err) {
    if (st == NU_OK) {
        nu_error e = {0};
        st = grammar_new(m, gbnf, strlen(gbnf), "root", out, &e);
        if (st) nu_fail(err, st, "the grammar made from the %s: %s", what, e.message);
    }
    free(gbnf);
    return st;
}

nu_status nu_grammar_from_json_schema(const nu_model *m, const char *schema,
                                      const nu_json_options *opt, nu_grammar **out, nu_error *err) {
    *out = NULL;
    char *gbnf = NULL;
    nu_status st = nu_json_schema_to_gbnf(schema, opt, &gbnf, err);
    return grammar_from_text(m, st, gbnf, "JSON schema", out, err);
}

nu_status nu_grammar_json_object(const nu_model *m, const nu_json_options *opt, nu_grammar **out,
                                 nu_error *err) {
    *out = NULL;
    char *gbnf = NULL;
    nu_status st = nu_json_object_to_gbnf(opt, &gbnf, err);
    return grammar_from_text(m, st, gbnf, "JSON object", out, err);
}

nu_status nu_grammar_from_regex(const nu_model *m, const char *regex, nu_grammar **out,
                                nu_error *err) {
    *out = NULL;
    char *gbnf = NULL;
    nu_status st = nu_regex_to_gbnf(regex, &gbnf, err);
    return grammar_from_text(m, st, gbnf, "regex", out, err);
}

nu_status nu_grammar_from_choices(const nu_model *m, const char *const *choices, size_t n,
                                  nu_grammar **out, nu_error *err) {
    *out = NULL;
    char *gbnf = NULL;
    nu_status st = nu_choices_to_gbnf(choices, n, &gbnf, err);
    return grammar_from_text(m, st, gbnf, "choices", out, err);
}

/* ------------------------------------------------------------------------ */
/* GBNF text of the converters                                              */
/* ------------------------------------------------------------------------ */

nu_json_options nu_json_default_options(void) {
    nu_json_options o = {.max_whitespace = 0};
    return o;
}

/* Moves a finished buffer to *gbnf. */
static nu_status take_text(nu_status st, nu_buf *b, char **gbnf, nu_error *err) {
    if (st == NU_OK) {
        *gbnf = nu_gram_buf_take(b);
        if (!*gbnf) st = nu_fail(err, NU_ERR_NOMEM, "out of memory writing a grammar");
    }
    nu_buf_free(b);
    return st;
}

nu_status nu_json_schema_to_gbnf(const char *schema, const nu_json_options *opt, char **gbnf,
                                 nu_error *err) {
    *gbnf = NULL;
    if (!schema) return nu_fail(err, NU_ERR_INVALID_ARG, "no JSON schema given");
    nu_json_options o = opt ? *opt : nu_json_default_options();
    nu_buf b;
    nu_buf_init(&b);
    return take_text(nu_gram_json_schema_gbnf(schema, &o, &b, err), &b, gbnf, err);
}

nu_status nu_json_object_to_gbnf(const nu_json_options *opt, char **gbnf, nu_error *err) {
    *gbnf = NULL;
    nu_json_options o = opt ? *opt : nu_json_default_options();
    nu_buf b;
    nu_buf_init(&b);
    return take_text(nu_gram_json_any_gbnf(&o, &b, err), &b, gbnf, err);
}

nu_status nu_regex_to_gbnf(const char *regex, char **gbnf, nu_error *err) {
    *gbnf = NULL;
    if (!regex) return nu_fail(err, NU_ERR_INVALID_ARG, "no regular expression given");
    nu_buf b;
    nu_buf_init(&b);
    return take_text(nu_gram_regex_rules(&b, "root", regex, GRAM_REGEX_FULL, err), &b, gbnf, err);
}

nu_status nu_choices_to_gbnf(const char *const *choices, size_t n, char **gbnf, nu_error *err) {
    *gbnf = NULL;
    if (n == 0) return nu_fail(err, NU_ERR_INVALID_ARG, "no choices given");
    for (size_t i = 0; i < n; i++) {
        if (!choices[i]) return nu_fail(err, NU_ERR_INVALID_ARG, "choice %zu is NULL", i);
        if (!nu_utf8_valid(choices[i], strlen(choices[i]), NULL))
            return nu_fail(err, NU_ERR_INVALID_ARG, "choice %zu is not valid UTF-8", i);
    }
    nu_buf b;
    nu_buf_init(&b);
    nu_gram_choices_gbnf(&b, choices, n);
    return take_text(NU_OK, &b, gbnf, err);
}

/* ------------------------------------------------------------------------ */
/* States                                                                   */
/* ------------------------------------------------------------------------ */

void nu_grammar_state_free(nu_grammar_state *s) {
    if (!s) return;
    nu_gram_arena_free(&s->a);
    free(s->levels);
    free(s->bits);
    free(s->dist);
    free(s->key);
    for (int i = 0; i < MASK_CACHE; i++) {
        free(s->cache[i].key);
        free(s->cache[i].bits);
    }
    free(s);
}

/* A state with its buffers but no stacks yet. */
static nu_status state_alloc(const nu_grammar *g, nu_grammar_state **out, nu_error *err) {
    *out = NULL;
    nu_grammar_state *s = calloc(1, sizeof *s);
    if (!s) return nu_fail(err, NU_ERR_NOMEM, "out of memory for a grammar state");
    s->g = g;
    s->budget = -1;
    nu_status st = nu_gram_arena_init(&s->a, err);
    if (st == NU_OK && g->has_vocab) {
        size_t words = ((size_t)g->n_vocab + 63) / 64;
        s->levels = malloc(((size_t)g->max_depth + 1) * sizeof *s->levels);
        s->bits = calloc(words, sizeof *s->bits);
        s->dist = calloc((size_t)g->n_vocab + 1, sizeof *s->dist);
        for (int i = 0; i < MASK_CACHE && s->levels; i++)
            if (!(s->cache[i].bits = malloc(words * sizeof *s->bits))) st = NU_ERR_NOMEM;
        if (st || !s->levels || !s->bits || !s->dist)
            st = nu_fail(err, NU_ERR_NOMEM, "out of memory for a grammar state");
    }
    if (st) {
        nu_grammar_state_free(s);
        return st;
    }
    *out = s;
    return NU_OK;
}

nu_status nu_grammar_state_new(const nu_grammar *g, nu_grammar_state **out, nu_error *err) {
    nu_status st = state_alloc(g, out, err);
    if (st) return st;
    nu_grammar_state *s = *out;
    bool ok = nu_gram_start(g->prog, &s->a, &s->cur) && nu_gram_commit(&s->a, &s->cur);
    if (!ok) {
        st = s->a.overflow ? nu_fail(err, NU_ERR_UNSUPPORTED,
                                     "the grammar's start rule expands into too many alternatives")
                           : nu_fail(err, NU_ERR_NOMEM, "out of memory for a grammar state");
        nu_grammar_state_free(s);
        *out = NULL;
    }
    return st;
}

nu_status nu_grammar_state_copy(const nu_grammar_state *src, nu_grammar_state **out,
                                nu_error *err) {
    nu_status st = state_alloc(src->g, out, err);
    if (st) return st;
    nu_grammar_state *s = *out;
    st = nu_gram_arena_clone(&s->a, &src->a, &src->cur, err);
    if (st) {
        nu_grammar_state_free(s);
        *out = NULL;
        return st;
    }
    s->cur = src->cur;
    s->budget = src->budget;
    return NU_OK;
}

nu_status nu_grammar_state_set_budget(nu_grammar_state *s, int32_t n_tokens, nu_error *err) {
    if (n_tokens < -1) return nu_fail(err, NU_ERR_INVALID_ARG, "token budget %d", n_tokens);
    uint32_t d = nu_gram_distance(s->g->prog, &s->a, &s->cur);
    if (n_tokens >= 0 && d > (uint32_t)n_tokens)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "a budget of %d tokens cannot finish this "
                       "grammar: it needs at least %u more bytes",
                       n_tokens, d);
    s->budget = n_tokens;
    return NU_OK;
}

void nu_grammar_state_set_cache(nu_grammar_state *s, bool on) {
    s->no_cache = !on;
}

bool nu_grammar_is_complete(const nu_grammar_state *s) {
    return nu_gram_complete(&s->a, &s->cur);
}

bool nu_grammar_must_end(const nu_grammar_state *s) {
    return nu_gram_must_end(&s->a, &s->cur) || s->budget == 0;
}

int64_t nu_grammar_distance(const nu_grammar_state *s) {
    return nu_gram_distance(s->g->prog, &s->a, &s->cur);
}

/* ------------------------------------------------------------------------ */
/* Checking tokens                                                          */
/* ------------------------------------------------------------------------ */

/* Does a distance fit the budget left after one more token? */
static bool fits_budget(const nu_grammar_state *s, uint32_t dist) {
    return s->budget < 0 || (int64_t)dist <= s->budget - 1;
}

/* Steps the committed state through bytes; leaves the result level in *out
 * (the caller rolls back or commits). */
static bool walk_bytes(nu_grammar_state *s, const uint8_t *b, size_t n, nu_gram_level *out) {
    nu_gram_level lv = s->cur, next;
    s->a.overflow = false;
    for (size_t i = 0; i < n; i++) {
        if (!nu_gram_step(s->g->prog, &s->a, &lv, b[i], &next)) return false;
        lv = next;
    }
    *out = lv;
    return true;
}

static bool token_in_range(const nu_grammar_state *s, int32_t t) {
    return s->g->has_vocab && t >= 0 && t < s->g->n_vocab;
}

bool nu_grammar_allows(nu_grammar_state *s, int32_t t) {
    if (!token_in_range(s, t)) return false;
    const nu_grammar *g = s->g;
    if (g->tok_kind[t] == TOK_EOG) return nu_grammar_is_complete(s);
    if (g->tok_kind[t] != TOK_TEXT || s->budget == 0) return false;
    nu_gram_level lv;
    bool ok = walk_bytes(s, g->bytes + g->tok_off[t], g->tok_off[t + 1] - g->tok_off[t], &lv) &&
              fits_budget(s, nu_gram_distance(g->prog, &s->a, &lv));
    nu_gram_rollback(&s->a, &s->cur);
    return ok;
}

/* Walks the vocabulary trie from the committed state: s->bits gets every
 * text token that may come next, s->dist the distance after it. */
static void walk_trie(nu_grammar_state *s) {
    const nu_grammar *g = s->g;
    nu_gram_arena *a = &s->a;
    memset(s->bits, 0, (((size_t)g->n_vocab + 63) / 64) * sizeof *s->bits);
    s->walk_max = 0;
    s->levels[0] = s->cur;
    a->overflow = false;
    for (uint32_t i = 1; i < g->n_trie;) {
        uint32_t d = g->trie_depth[i];
        nu_gram_rollback(a, &s->levels[d - 1]);
        if (!nu_gram_step(g->prog, a, &s->levels[d - 1], g->trie_byte[i], &s->levels[d])) {
            a->overflow = false; /* a refused subtree; the next one starts afresh */
            i = g->trie_end[i];
            continue;
        }
        if (g->trie_tok_count[i]) {
            uint32_t dist = nu_gram_distance(g->prog, a, &s->levels[d]);
            if (dist > s->walk_max) s->walk_max = dist;
            for (uint32_t k = 0; k < g->trie_tok_count[i]; k++) {
                int32_t t = g->trie_toks[g->trie_tok_first[i] + k];
                s->bits[t >> 6] |= 1ull << (t & 63);
                s->dist[t] = dist;
            }
        }
        i++;
    }
    nu_gram_rollback(a, &s->cur);
}

/* The cached mask of the committed state, or NULL. Leaves the state's key
 * in s->key for cache_store. */
static mask_entry *cache_find(nu_grammar_state *s, uint64_t hash) {
    if (!nu_gram_state_key(&s->a, &s->cur, &s->key, &s->key_len, &s->key_cap)) return NULL;
    for (int i = 0; i < MASK_CACHE; i++) {
        mask_entry *e = &s->cache[i];
        if (e->valid && e->hash == hash && e->key_len == s->key_len &&
            memcmp(e->key, s->key, (size_t)s->key_len * sizeof *s->key) == 0) {
            e->used = ++s->clock;
            return e;
        }
    }
    return NULL;
}

/* Stores the last walk under the current key, replacing the least recently
 * used entry. */
static void cache_store(nu_grammar_state *s, uint64_t hash) {
    mask_entry *e = &s->cache[0];
    for (int i = 1; i < MASK_CACHE; i++)
        if (!s->cache[i].valid || (e->valid && s->cache[i].used < e->used)) e = &s->cache[i];
    if (e->key_cap < s->key_len) {
        uint32_t *k = realloc(e->key, (size_t)s->key_len * sizeof *k);
        if (!k) {
            e->valid = false;
            return;
        }
        e->key = k;
        e->key_cap = s->key_len;
    }
    memcpy(e->key, s->key, (size_t)s->key_len * sizeof *s->key);
    memcpy(e->bits, s->bits, (((size_t)s->g->n_vocab + 63) / 64) * sizeof *s->bits);
    e->key_len = s->key_len;
    e->hash = hash;
    e->max_dist = s->walk_max;
    e->used = ++s->clock;
    e->valid = true;
}

/* The allowed text tokens of the committed state. *per_token is set when
 * the budget is tight enough that s->dist must be checked token by token. */
static const uint64_t *full_mask(nu_grammar_state *s, bool *per_token) {
    if (s->no_cache) {
        walk_trie(s);
        *per_token = !fits_budget(s, s->walk_max);
        return s->bits;
    }
    uint64_t hash = nu_gram_state_hash(&s->a, &s->cur);
    mask_entry *e = cache_find(s, hash);
    if (e && fits_budget(s, e->max_dist)) {
        *per_token = false;
        return e->bits;
    }
    walk_trie(s);
    if (!e) cache_store(s, hash);
    *per_token = !fits_budget(s, s->walk_max);
    return s->bits;
}

/* Filters c with a full mask. */
static void mask_with_bits(nu_grammar_state *s, nu_candidates *c) {
    bool per_token;
    const uint64_t *bits = full_mask(s, &per_token);
    bool complete = nu_grammar_is_complete(s);
    size_t n = 0;
    for (size_t i = 0; i < c->size; i++) {
        int32_t t = c->data[i].id;
        bool ok = false;
        if (token_in_range(s, t)) {
            uint8_t k = s->g->tok_kind[t];
            if (k == TOK_EOG)
                ok = complete;
            else if (k == TOK_TEXT && s->budget != 0)
                ok = ((bits[t >> 6] >> (t & 63)) & 1) && (!per_token || fits_budget(s, s->dist[t]));
        }
        if (ok) c->data[n++] = c->data[i];
    }
    c->size = n;
}

void nu_grammar_mask(nu_grammar_state *s, nu_candidates *c) {
    c->selected = -1;
    if (!s->g->has_vocab) {
        c->size = 0;
        return;
    }
    if (c->size > SMALL_CANDIDATES) {
        mask_with_bits(s, c);
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < c->size; i++)
        if (nu_grammar_allows(s, c->data[i].id)) c->data[n++] = c->data[i];
    c->size = n;
}

/* ------------------------------------------------------------------------ */
/* Accepting input                                                          */
/* ------------------------------------------------------------------------ */

/* Describes why stepping failed. */
static nu_status refuse(nu_grammar_state *s, nu_error *err, const char *what) {
    if (s->a.overflow)
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "%s: the grammar is too ambiguous here (more than %u parallel parses)", what,
                       GRAM_MAX_STACKS);
    if (s->a.nomem) return nu_fail(err, NU_ERR_NOMEM, "%s: out of memory", what);
    return nu_fail(err, NU_ERR_INVALID_ARG, "%s is not allowed by the grammar here", what);
}

/* Makes lv the committed state. */
static nu_status commit(nu_grammar_state *s, nu_gram_level *lv, nu_error *err) {
    if (!nu_gram_commit(&s->a, lv)) {
        nu_gram_rollback(&s->a, &s->cur);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory in a grammar state");
    }
    s->cur = *lv;
    return NU_OK;
}

nu_status nu_grammar_accept(nu_grammar_state *s, int32_t t, nu_error *err) {
    if (!token_in_range(s, t))
        return nu_fail(err, NU_ERR_INVALID_ARG, "token %d is not in the grammar's vocabulary", t);
    const nu_grammar *g = s->g;
    if (g->tok_kind[t] == TOK_EOG) {
        if (nu_grammar_is_complete(s)) return NU_OK;
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "the end is not allowed yet: the text needs at least %u more bytes",
                       nu_gram_distance(g->prog, &s->a, &s->cur));
    }
    if (g->tok_kind[t] != TOK_TEXT)
        return nu_fail(err, NU_ERR_INVALID_ARG, "token %d has no text and is never allowed", t);
    char what[64];
    snprintf(what, sizeof what, "token %d", t);
    if (s->budget == 0)
        return nu_fail(err, NU_ERR_INVALID_ARG, "token %d: the token budget is spent", t);
    nu_gram_level lv;
    if (!walk_bytes(s, g->bytes + g->tok_off[t], g->tok_off[t + 1] - g->tok_off[t], &lv)) {
        nu_status st = refuse(s, err, what);
        nu_gram_rollback(&s->a, &s->cur);
        return st;
    }
    if (!fits_budget(s, nu_gram_distance(g->prog, &s->a, &lv))) {
        nu_gram_rollback(&s->a, &s->cur);
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "token %d would leave too few tokens of the budget to finish", t);
    }
    nu_status st = commit(s, &lv, err);
    if (st == NU_OK && s->budget > 0) s->budget--;
    return st;
}

/* Steps bytes [from, to) on from level *lv, committing every `chunk` bytes
 * so memory stays bounded; reports the first refused byte. */
static nu_status accept_run(nu_grammar_state *s, const uint8_t *b, size_t len, nu_error *err) {
    nu_gram_level lv = s->cur, next;
    s->a.overflow = false;
    for (size_t i = 0; i < len; i++) {
        if (!nu_gram_step(s->g->prog, &s->a, &lv, b[i], &next)) {
            char what[64];
            snprintf(what, sizeof what, "byte %zu (0x%02X)", i, b[i]);
            nu_status st = refuse(s, err, what);
            nu_gram_rollback(&s->a, &s->cur);
            return st;
        }
        lv = next;
        if ((i + 1) % 1024 == 0 && !nu_gram_commit(&s->a, &lv))
            return nu_fail(err, NU_ERR_NOMEM, "out of memory in a grammar state");
    }
    return commit(s, &lv, err);
}

nu_status nu_grammar_accept_bytes(nu_grammar_state *s, const char *bytes, size_t len,
                                  nu_error *err) {
    if (len <= 1024) return accept_run(s, (const uint8_t *)bytes, len, err);
    /* Long input commits on the way: work on a copy so a refusal changes nothing. */
    nu_grammar_state *copy;
    nu_status st = nu_grammar_state_copy(s, &copy, err);
    if (st) return st;
    st = accept_run(copy, (const uint8_t *)bytes, len, err);
    if (st == NU_OK) {
        nu_gram_arena t = s->a;
        s->a = copy->a;
        copy->a = t;
        s->cur = copy->cur;
    }
    nu_grammar_state_free(copy);
    return st;
}
