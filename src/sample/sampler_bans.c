/* sampler_bans.c - banned strings and token sequences (see bans.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bans.h"
#include "error.h"

static nu_status no_memory(nu_error *err) {
    return nu_fail(err, NU_ERR_NOMEM, "out of memory for the banned strings");
}

/* ---- token sequences ------------------------------------------------------- */

static nu_status copy_sequences(nu_bans *b, const nu_sampler_params *p, nu_error *err) {
    int32_t n = p->n_banned_tokens, total = 0;
    for (int32_t i = 0; i < n; i++) {
        const nu_token_seq *q = &p->banned_tokens[i];
        for (int32_t k = 0; k < q->n; k++)
            if (q->tokens[k] >= b->n_vocab)
                return nu_fail(err, NU_ERR_INVALID_ARG,
                               "banned_tokens[%d]: token %d is outside the vocabulary (%d tokens)",
                               i, q->tokens[k], b->n_vocab);
        total += q->n;
        if (q->n > b->max_seq_len) b->max_seq_len = q->n;
    }
    b->seq_tokens = malloc(((size_t)total + 1) * sizeof *b->seq_tokens);
    b->seq_start = malloc(((size_t)n + 1) * sizeof *b->seq_start);
    b->seq_len = malloc(((size_t)n + 1) * sizeof *b->seq_len);
    if (!b->seq_tokens || !b->seq_start || !b->seq_len)
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for the banned token sequences");
    int32_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        const nu_token_seq *q = &p->banned_tokens[i];
        memcpy(b->seq_tokens + at, q->tokens, (size_t)q->n * sizeof *q->tokens);
        b->seq_start[i] = at;
        b->seq_len[i] = q->n;
        at += q->n;
    }
    b->n_seqs = n;
    return NU_OK;
}

/* ---- the automaton ----------------------------------------------------------- */

/* The child of node u for byte x, or -1. */
static int32_t child_of(const nu_bans *b, int32_t u, unsigned char x) {
    for (int32_t v = b->child[u]; v >= 0; v = b->sibling[v])
        if (b->byte[v] == x) return v;
    return -1;
}

/* The state after reading byte x in state s. */
static int32_t step(const nu_bans *b, int32_t s, unsigned char x) {
    for (;;) {
        int32_t v = child_of(b, s, x);
        if (v >= 0) return v;
        if (s == 0) return 0;
        s = b->fail[s];
    }
}

/* Adds the string to the trie (nodes were allocated for every byte). */
static void insert(nu_bans *b, const char *s) {
    int32_t u = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int32_t v = child_of(b, u, *p);
        if (v < 0) {
            v = b->n_nodes++;
            b->byte[v] = *p;
            b->child[v] = -1;
            b->sibling[v] = b->child[u];
            b->child[u] = v;
        }
        u = v;
    }
    b->out[u] = true;
}

/* The failure links, breadth first: the longest proper suffix of a node's
 * string that is a node too; out spreads along them. */
static void link_failures(nu_bans *b, int32_t *queue) {
    int32_t head = 0, tail = 0;
    for (int32_t v = b->child[0]; v >= 0; v = b->sibling[v]) {
        b->fail[v] = 0;
        queue[tail++] = v;
    }
    while (head < tail) {
        int32_t u = queue[head++];
        for (int32_t v = b->child[u]; v >= 0; v = b->sibling[v]) {
            b->fail[v] = step(b, b->fail[u], b->byte[v]);
            b->out[v] = b->out[v] || b->out[b->fail[v]];
            queue[tail++] = v;
        }
    }
}

static nu_status build_automaton(nu_bans *b, const nu_sampler_params *p, nu_error *err) {
    size_t nodes = 1;
    for (int32_t i = 0; i < p->n_banned_strings; i++) nodes += strlen(p->banned_strings[i]);
    if (nodes > INT32_MAX) return nu_fail(err, NU_ERR_INVALID_ARG, "banned strings too long");
    b->child = malloc(nodes * sizeof *b->child);
    b->sibling = malloc(nodes * sizeof *b->sibling);
    b->fail = calloc(nodes, sizeof *b->fail);
    b->byte = calloc(nodes, 1);
    b->out = calloc(nodes, sizeof *b->out);
    b->lists = calloc(nodes, sizeof *b->lists);
    b->list_len = calloc(nodes, sizeof *b->list_len);
    b->listed = calloc(nodes, sizeof *b->listed);
    int32_t *queue = malloc(nodes * sizeof *queue);
    if (!b->child || !b->sibling || !b->fail || !b->byte || !b->out || !b->lists || !b->list_len ||
        !b->listed || !queue) {
        free(queue);
        return no_memory(err);
    }
    b->n_nodes = 1;
    b->child[0] = -1;
    b->sibling[0] = -1;
    for (int32_t i = 0; i < p->n_banned_strings; i++) insert(b, p->banned_strings[i]);
    link_failures(b, queue);
    free(queue);
    return NU_OK;
}

/* Every token's text, as generated text shows it (control tokens: none). */
static nu_status token_texts(nu_bans *b, const nu_model *m, nu_error *err) {
    size_t cap = 1 << 16, len = 0;
    b->texts = malloc(cap);
    b->text_off = malloc(((size_t)b->n_vocab + 1) * sizeof *b->text_off);
    if (!b->texts || !b->text_off) return no_memory(err);
    for (int32_t t = 0; t < b->n_vocab; t++) {
        b->text_off[t] = len;
        size_t n = nu_token_to_bytes(m, t, false, b->texts + len, cap - len);
        if (len + n > cap) {
            while (len + n > cap) cap *= 2;
            char *bigger = realloc(b->texts, cap);
            if (!bigger) return no_memory(err);
            b->texts = bigger;
            nu_token_to_bytes(m, t, false, b->texts + len, cap - len);
        }
        len += n;
    }
    b->text_off[b->n_vocab] = len;
    return NU_OK;
}

nu_status nu_bans_init(nu_bans *b, const nu_sampler_params *p, const nu_model *model,
                       int32_t n_vocab, nu_error *err) {
    memset(b, 0, sizeof *b);
    b->n_vocab = n_vocab;
    b->epoch = 1;
    nu_status st = NU_OK;
    if (p->n_banned_tokens > 0 && (st = copy_sequences(b, p, err))) return st;
    if (p->n_banned_strings > 0 && !model)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "banned strings need the model's vocabulary (nu_sampler_new_for_model)");
    if (p->n_banned_strings > 0 &&
        ((st = build_automaton(b, p, err)) || (st = token_texts(b, model, err))))
        return st;
    if (!nu_bans_on(b)) return NU_OK;
    b->mark = calloc((size_t)n_vocab, sizeof *b->mark);
    return b->mark ? NU_OK : no_memory(err);
}

bool nu_bans_on(const nu_bans *b) {
    return b->n_seqs > 0 || b->n_nodes > 0;
}

void nu_bans_accept(nu_bans *b, int32_t token) {
    if (b->n_nodes == 0 || token < 0 || token >= b->n_vocab) return;
    for (size_t i = b->text_off[token]; i < b->text_off[token + 1]; i++)
        b->state = step(b, b->state, (unsigned char)b->texts[i]);
}

void nu_bans_reset(nu_bans *b) {
    b->state = 0;
}

void nu_bans_free(nu_bans *b) {
    free(b->seq_tokens);
    free(b->seq_start);
    free(b->seq_len);
    free(b->child);
    free(b->sibling);
    free(b->fail);
    free(b->byte);
    free(b->out);
    free(b->texts);
    free(b->text_off);
    for (int32_t i = 0; b->lists && i < b->n_nodes; i++) free(b->lists[i]);
    free(b->lists);
    free(b->list_len);
    free(b->listed);
    free(b->mark);
    memset(b, 0, sizeof *b);
}

/* ---- banning --------------------------------------------------------------- */

/* Whether reading the token's text from state s reaches a match. */
static bool completes(const nu_bans *b, int32_t s, int32_t token) {
    for (size_t i = b->text_off[token]; i < b->text_off[token + 1]; i++) {
        s = step(b, s, (unsigned char)b->texts[i]);
        if (b->out[s]) return true;
    }
    return false;
}

/* Bans one token: directly in an array indexed by id, else through the set. */
static void ban(nu_bans *b, nu_candidates *c, bool identity, int32_t t) {
    if (identity)
        c->data[t].logit = -INFINITY;
    else
        b->mark[t] = b->epoch;
}

/* The tokens that complete a string from state s, listed the first time;
 * when the list cannot be kept (out of memory) they are banned directly. */
static void ban_strings(nu_bans *b, nu_candidates *c, bool identity) {
    int32_t s = b->state;
    if (!b->listed[s]) {
        int32_t n = 0, cap = 16, *list = malloc((size_t)cap * sizeof *list);
        bool full = !list;
        for (int32_t t = 0; !full && t < b->n_vocab; t++) {
            if (!completes(b, s, t)) continue;
            if (n == cap) {
                int32_t *bigger = realloc(list, 2 * (size_t)cap * sizeof *list);
                if (!(full = !bigger)) list = bigger, cap *= 2;
            }
            if (!full) list[n++] = t;
        }
        if (full) { /* no room: ban without a list */
            free(list);
            for (int32_t t = 0; t < b->n_vocab; t++)
                if (completes(b, s, t)) ban(b, c, identity, t);
            return;
        }
        b->lists[s] = list;
        b->list_len[s] = n;
        b->listed[s] = true;
    }
    for (int32_t i = 0; i < b->list_len[s]; i++) ban(b, c, identity, b->lists[s][i]);
}

void nu_bans_apply(nu_bans *b, const int32_t *gen, size_t n_gen, nu_candidates *c, bool identity) {
    if (!nu_bans_on(b)) return;
    if (!identity && ++b->epoch == 0) {
        memset(b->mark, 0, (size_t)b->n_vocab * sizeof *b->mark);
        b->epoch = 1;
    }
    for (int32_t i = 0; i < b->n_seqs; i++) {
        const int32_t *q = b->seq_tokens + b->seq_start[i];
        size_t before = (size_t)b->seq_len[i] - 1;
        if (before <= n_gen && !memcmp(gen + n_gen - before, q, before * sizeof *q))
            ban(b, c, identity, q[before]);
    }
    if (b->n_nodes > 0) ban_strings(b, c, identity);
    if (!identity)
        for (size_t i = 0; i < c->size; i++)
            if (b->mark[c->data[i].id] == b->epoch) c->data[i].logit = -INFINITY;
    c->sorted = false;
}
