/* grammar_match.c - the byte-level matcher: a set of stacks of grammar
 * positions, advanced one byte at a time.
 *
 * A stack is a chain of nu_gram_nodes. The top node's position is a character
 * class: the next character must be in it. Each node below is where to
 * continue once the rule above it ends. Stepping a character pops the top,
 * moves to the next element and expands it: a reference pushes each of the
 * rule's alternatives (a fork), the end of an alternative pops. Positions
 * followed directly by an alternative's end are never pushed (a tail call),
 * so x* = R ::= x R | () does not grow the stack.
 *
 * Characters are code points, but input comes in bytes: a multi-byte UTF-8
 * character in progress is kept in the level's `partial`, and while it is
 * unfinished a stack survives when its class holds any code point that
 * starts with the bytes seen so far (those form one interval). All stacks
 * have consumed the same characters, so one partial serves them all.
 *
 * Nodes are never changed once made, so stacks share their lower parts and
 * levels form a stack in the arena: stepping appends, rolling back drops.
 * Stacks equal in content are merged at each step (hash, then a walk down
 * the two chains until they meet). nu_gram_commit copies the live nodes to the
 * front between tokens, so memory stays proportional to the live state. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar.h"

#define DEDUP_MIN 64u             /* first dedup table size; it doubles to stay at most half full */
#define MAX_EXPANSIONS (1u << 20) /* expansion steps per byte */

/* ------------------------------------------------------------------------ */
/* Arena memory                                                             */
/* ------------------------------------------------------------------------ */

/* Grows an array of elements of size sz to at least n; false on failure. */
static bool grow_array(void **p, uint32_t *cap, uint32_t n, size_t sz) {
    if (n <= *cap) return true;
    uint32_t c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* Grows the node arrays (nodes, their commit copy and the remap tables) to
 * hold n nodes. Past GRAM_MAX_NODES: overflow. */
static bool grow_nodes(nu_gram_arena *a, uint32_t n) {
    if (n <= a->cap_nodes) return true;
    if (n > GRAM_MAX_NODES) {
        a->overflow = true;
        return false;
    }
    uint32_t c = a->cap_nodes ? a->cap_nodes : 1024;
    while (c < n) c *= 2;
    nu_gram_node *nodes = realloc(a->nodes, (size_t)c * sizeof *nodes);
    if (nodes) a->nodes = nodes;
    nu_gram_node *spare = nodes ? realloc(a->spare, (size_t)c * sizeof *spare) : NULL;
    if (spare) a->spare = spare;
    uint32_t *remap = spare ? realloc(a->remap, (size_t)c * sizeof *remap) : NULL;
    if (remap) a->remap = remap;
    uint32_t *stamp = remap ? realloc(a->remap_stamp, (size_t)c * sizeof *stamp) : NULL;
    if (!stamp) {
        a->nomem = true;
        return false;
    }
    a->remap_stamp = stamp;
    memset(stamp + a->cap_nodes, 0, (size_t)(c - a->cap_nodes) * sizeof *stamp);
    a->cap_nodes = c;
    return true;
}

nu_status nu_gram_arena_init(nu_gram_arena *a, nu_error *err) {
    memset(a, 0, sizeof *a);
    a->dedup_cap = DEDUP_MIN;
    a->dedup_slot = malloc(DEDUP_MIN * sizeof *a->dedup_slot);
    a->dedup_stamp = calloc(DEDUP_MIN, sizeof *a->dedup_stamp);
    if (!a->dedup_slot || !a->dedup_stamp || !grow_nodes(a, 1024) ||
        !grow_array((void **)&a->tops, &a->cap_tops, 256, sizeof *a->tops) ||
        !grow_array((void **)&a->work, &a->cap_work, 256, sizeof *a->work)) {
        nu_gram_arena_free(a);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for a grammar state");
    }
    return NU_OK;
}

void nu_gram_arena_free(nu_gram_arena *a) {
    free(a->nodes);
    free(a->spare);
    free(a->tops);
    free(a->work);
    free(a->remap);
    free(a->remap_stamp);
    free(a->dedup_slot);
    free(a->dedup_stamp);
    memset(a, 0, sizeof *a);
}

nu_status nu_gram_arena_clone(nu_gram_arena *dst, const nu_gram_arena *src, const nu_gram_level *lv,
                              nu_error *err) {
    if (!grow_nodes(dst, lv->nodes_mark > 0 ? lv->nodes_mark : 1) ||
        !grow_array((void **)&dst->tops, &dst->cap_tops, lv->end, sizeof *dst->tops))
        return nu_fail(err, NU_ERR_NOMEM, "out of memory copying a grammar state");
    memcpy(dst->nodes, src->nodes, (size_t)lv->nodes_mark * sizeof *dst->nodes);
    memcpy(dst->tops, src->tops, (size_t)lv->end * sizeof *dst->tops);
    dst->n_nodes = lv->nodes_mark;
    dst->n_tops = lv->end;
    return NU_OK;
}

/* ------------------------------------------------------------------------ */
/* Stacks                                                                   */
/* ------------------------------------------------------------------------ */

/* Mixes a position into the hash of the chain below it. */
static uint32_t mix_hash(uint32_t pos, uint32_t below) {
    uint32_t h = (pos + 0x9E3779B9u) ^ (below * 0x85EBCA6Bu);
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    return h ^ (h >> 16);
}

/* A new node (pos on top of parent); GRAM_NIL when a limit is hit. */
static uint32_t new_node(const nu_gram_program *p, nu_gram_arena *a, uint32_t pos,
                         uint32_t parent) {
    if (a->n_nodes == a->cap_nodes && !grow_nodes(a, a->n_nodes + 1)) return GRAM_NIL;
    nu_gram_node *n = &a->nodes[a->n_nodes];
    uint32_t below_cost = parent == GRAM_NIL ? 0 : a->nodes[parent].cost;
    uint32_t below_hash = parent == GRAM_NIL ? 0x2545F491u : a->nodes[parent].hash;
    n->pos = pos;
    n->parent = parent;
    n->cost = p->dist[pos] + below_cost >= GRAM_INF ? GRAM_INF : p->dist[pos] + below_cost;
    n->hash = mix_hash(pos, below_hash);
    return a->n_nodes++;
}

/* Do two stacks hold the same positions? Walks down until the chains meet. */
static bool same_stack(const nu_gram_arena *a, uint32_t x, uint32_t y) {
    while (x != y) {
        if (x == GRAM_NIL || y == GRAM_NIL) return false;
        const nu_gram_node *nx = &a->nodes[x], *ny = &a->nodes[y];
        if (nx->hash != ny->hash || nx->pos != ny->pos) return false;
        x = nx->parent;
        y = ny->parent;
    }
    return true;
}

/* Starts a new dedup generation (the table is never cleared otherwise). */
static void next_stamp(nu_gram_arena *a) {
    if (++a->stamp == 0) {
        memset(a->dedup_stamp, 0, (size_t)a->dedup_cap * sizeof *a->dedup_stamp);
        a->stamp = 1;
    }
}

/* The slot of stack top in the dedup table: where it or an equal stack
 * sits, or the empty slot to put it in. */
static uint32_t dedup_find(const nu_gram_arena *a, uint32_t top) {
    uint32_t mask = a->dedup_cap - 1, h = top == GRAM_NIL ? 0 : a->nodes[top].hash;
    for (uint32_t i = h & mask;; i = (i + 1) & mask)
        if (a->dedup_stamp[i] != a->stamp || same_stack(a, a->tops[a->dedup_slot[i]], top))
            return i;
}

/* Doubles the dedup table, re-entering the level being built (tops from
 * start on). */
static bool dedup_grow(nu_gram_arena *a, uint32_t start) {
    uint32_t cap = a->dedup_cap * 2;
    uint32_t *slot = malloc((size_t)cap * sizeof *slot);
    uint32_t *stamp = calloc(cap, sizeof *stamp);
    if (!slot || !stamp) {
        free(slot);
        free(stamp);
        a->nomem = true;
        return false;
    }
    free(a->dedup_slot);
    free(a->dedup_stamp);
    a->dedup_slot = slot;
    a->dedup_stamp = stamp;
    a->dedup_cap = cap;
    for (uint32_t k = start; k < a->n_tops; k++) {
        uint32_t i = dedup_find(a, a->tops[k]);
        a->dedup_stamp[i] = a->stamp;
        a->dedup_slot[i] = k;
    }
    return true;
}

/* Adds a stack top to the level being built (tops from `start` on) unless
 * an equal stack is there already. */
static bool emit(nu_gram_arena *a, uint32_t top, uint32_t start) {
    uint32_t i = dedup_find(a, top);
    if (a->dedup_stamp[i] == a->stamp) return true; /* a duplicate */
    uint32_t n = a->n_tops - start + 1;
    if (n > GRAM_MAX_STACKS) {
        a->overflow = true;
        return false;
    }
    if (2 * n > a->dedup_cap) {
        if (!dedup_grow(a, start)) return false;
        i = dedup_find(a, top);
    }
    if (!grow_array((void **)&a->tops, &a->cap_tops, a->n_tops + 1, sizeof *a->tops)) {
        a->nomem = true;
        return false;
    }
    a->dedup_stamp[i] = a->stamp;
    a->dedup_slot[i] = a->n_tops;
    a->tops[a->n_tops++] = top;
    return true;
}

/* Pushes a (position, rest-of-stack) pair on the expansion work list. */
static bool push_work(nu_gram_arena *a, uint32_t *n, uint32_t pos, uint32_t rest) {
    if (!grow_array((void **)&a->work, &a->cap_work, *n + 2, sizeof *a->work)) {
        a->nomem = true;
        return false;
    }
    a->work[(*n)++] = pos;
    a->work[(*n)++] = rest;
    return true;
}

/* Emits the stacks that continue at `pos` with `rest` below: references are
 * expanded into their alternatives and ends of alternatives popped until
 * every top is a class (or the stack is empty). */
static bool expand(const nu_gram_program *p, nu_gram_arena *a, uint32_t pos, uint32_t rest,
                   uint32_t start) {
    uint32_t n_work = 0, steps = 0;
    if (!push_work(a, &n_work, pos, rest)) return false;
    while (n_work > 0) {
        rest = a->work[--n_work];
        pos = a->work[--n_work];
        for (;;) {
            if (++steps > MAX_EXPANSIONS) {
                a->overflow = true;
                return false;
            }
            nu_gram_elem e = p->elems[pos];
            if (e.kind == GRAM_END) {
                if (rest == GRAM_NIL) {
                    if (!emit(a, GRAM_NIL, start)) return false;
                    break;
                }
                const nu_gram_node *n = &a->nodes[rest];
                if (p->elems[n->pos].kind == GRAM_CLASS) {
                    if (!emit(a, rest, start)) return false;
                    break;
                }
                pos = n->pos;
                rest = n->parent;
                continue;
            }
            if (e.kind == GRAM_CLASS) {
                uint32_t t = new_node(p, a, pos, rest);
                if (t == GRAM_NIL || !emit(a, t, start)) return false;
                break;
            }
            uint32_t below = rest;
            if (p->elems[pos + 1].kind != GRAM_END) {
                below = new_node(p, a, pos + 1, rest);
                if (below == GRAM_NIL) return false;
            }
            for (uint32_t k = p->rule_first[e.arg + 1]; k-- > p->rule_first[e.arg];)
                if (!push_work(a, &n_work, p->alts[k], below)) return false;
            break;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                    */
/* ------------------------------------------------------------------------ */

/* Feeds a byte to the character in progress. Sets *cp and *whole when it
 * completes a valid character; false for bytes no valid UTF-8 allows. */
static bool nu_utf8_feed(nu_gram_utf8 *u, uint8_t b, uint32_t *cp, bool *whole) {
    *whole = false;
    if (u->need == 0) {
        if (b < 0x80) {
            *cp = b;
            *whole = true;
        } else if (b >= 0xC2 && b <= 0xDF) {
            *u = (nu_gram_utf8){b & 0x1Fu, 0x80, 1};
        } else if (b >= 0xE0 && b <= 0xEF) {
            *u = (nu_gram_utf8){b & 0x0Fu, 0x800, 2};
        } else if (b >= 0xF0 && b <= 0xF4) {
            *u = (nu_gram_utf8){b & 0x07u, 0x10000, 3};
        } else {
            return false;
        }
        return true;
    }
    if ((b & 0xC0) != 0x80) return false;
    u->value = (u->value << 6) | (b & 0x3Fu);
    if (--u->need > 0) return true;
    uint32_t v = u->value;
    if (v < u->min_cp || v > GRAM_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return false;
    *cp = v;
    *whole = true;
    *u = (nu_gram_utf8){0, 0, 0};
    return true;
}

/* The code points that can still complete the partial character. */
static void nu_utf8_interval(const nu_gram_utf8 *u, uint32_t *lo, uint32_t *hi) {
    uint32_t shift = 6 * u->need;
    uint32_t max = u->min_cp == 0x80 ? 0x7FF : u->min_cp == 0x800 ? 0xFFFF : GRAM_MAX_CP;
    *lo = u->value << shift;
    *hi = *lo | ((1u << shift) - 1);
    if (*lo < u->min_cp) *lo = u->min_cp;
    if (*hi > max) *hi = max;
}

/* May the class still match the partial character (surrogates excluded)? */
static bool class_meets_partial(const nu_gram_program *p, const nu_gram_class *c, uint32_t lo,
                                uint32_t hi) {
    return nu_gram_class_meets(p, c, lo, hi < 0xD7FF ? hi : 0xD7FF) ||
           nu_gram_class_meets(p, c, lo > 0xE000 ? lo : 0xE000, hi);
}

/* ------------------------------------------------------------------------ */
/* Levels                                                                   */
/* ------------------------------------------------------------------------ */

bool nu_gram_start(const nu_gram_program *p, nu_gram_arena *a, nu_gram_level *out) {
    next_stamp(a);
    a->overflow = false;
    out->start = a->n_tops;
    out->partial = (nu_gram_utf8){0, 0, 0};
    uint32_t r = p->root;
    bool ok = true;
    for (uint32_t k = p->rule_first[r]; ok && k < p->rule_first[r + 1]; k++)
        ok = expand(p, a, p->alts[k], GRAM_NIL, out->start);
    out->end = a->n_tops;
    out->nodes_mark = a->n_nodes;
    return ok && out->end > out->start;
}

/* Advances every stack whose class holds cp. */
static bool step_char(const nu_gram_program *p, nu_gram_arena *a, const nu_gram_level *in,
                      uint32_t cp, uint32_t start) {
    for (uint32_t i = in->start; i < in->end; i++) {
        uint32_t t = a->tops[i];
        if (t == GRAM_NIL) continue;
        uint32_t pos = a->nodes[t].pos, parent = a->nodes[t].parent;
        if (nu_gram_class_has(p, &p->classes[p->elems[pos].arg], cp) &&
            !expand(p, a, pos + 1, parent, start))
            return false;
    }
    return true;
}

/* Keeps the stacks whose class may still match the partial character. */
static bool step_partial(const nu_gram_program *p, nu_gram_arena *a, const nu_gram_level *in,
                         const nu_gram_utf8 *u, uint32_t start) {
    uint32_t lo, hi;
    nu_utf8_interval(u, &lo, &hi);
    if (lo > hi) return true; /* an overlong or out-of-range sequence: nothing survives */
    for (uint32_t i = in->start; i < in->end; i++) {
        uint32_t t = a->tops[i];
        if (t == GRAM_NIL) continue;
        const nu_gram_class *c = &p->classes[p->elems[a->nodes[t].pos].arg];
        if (class_meets_partial(p, c, lo, hi) && !emit(a, t, start)) return false;
    }
    return true;
}

bool nu_gram_step(const nu_gram_program *p, nu_gram_arena *a, const nu_gram_level *in, uint8_t byte,
                  nu_gram_level *out) {
    nu_gram_utf8 u = in->partial;
    uint32_t cp = 0, nodes_before = a->n_nodes, tops_before = a->n_tops;
    bool whole;
    if (a->overflow || !nu_utf8_feed(&u, byte, &cp, &whole)) return false;
    next_stamp(a);
    out->start = a->n_tops;
    out->partial = u;
    bool ok = whole ? step_char(p, a, in, cp, out->start) : step_partial(p, a, in, &u, out->start);
    out->end = a->n_tops;
    out->nodes_mark = a->n_nodes;
    if (ok && out->end > out->start) return true;
    a->n_nodes = nodes_before;
    a->n_tops = tops_before;
    return false;
}

uint32_t nu_gram_distance(const nu_gram_program *p, const nu_gram_arena *a,
                          const nu_gram_level *lv) {
    uint32_t best = GRAM_INF;
    for (uint32_t i = lv->start; i < lv->end; i++) {
        uint32_t t = a->tops[i];
        if (t == GRAM_NIL) return 0;
        uint32_t d = a->nodes[t].cost;
        if (lv->partial.need > 0)
            d = d - p->classes[p->elems[a->nodes[t].pos].arg].min_bytes + lv->partial.need;
        if (d < best) best = d;
    }
    return best;
}

bool nu_gram_complete(const nu_gram_arena *a, const nu_gram_level *lv) {
    if (lv->partial.need > 0) return false;
    for (uint32_t i = lv->start; i < lv->end; i++)
        if (a->tops[i] == GRAM_NIL) return true;
    return false;
}

bool nu_gram_must_end(const nu_gram_arena *a, const nu_gram_level *lv) {
    if (lv->partial.need > 0) return false;
    for (uint32_t i = lv->start; i < lv->end; i++)
        if (a->tops[i] != GRAM_NIL) return false;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Commit                                                                   */
/* ------------------------------------------------------------------------ */

/* Copies the chain under top into spare (sharing what was copied before in
 * this commit); returns the copy of top. */
static uint32_t copy_chain(nu_gram_arena *a, uint32_t top, uint32_t *n_new) {
    uint32_t depth = 0, t = top;
    while (t != GRAM_NIL && a->remap_stamp[t] != a->remap_gen) {
        if (!grow_array((void **)&a->work, &a->cap_work, depth + 1, sizeof *a->work)) {
            a->nomem = true;
            return GRAM_NIL;
        }
        a->work[depth++] = t;
        t = a->nodes[t].parent;
    }
    uint32_t below = t == GRAM_NIL ? GRAM_NIL : a->remap[t];
    while (depth > 0) {
        uint32_t old = a->work[--depth];
        a->spare[*n_new] = a->nodes[old];
        a->spare[*n_new].parent = below;
        a->remap[old] = *n_new;
        a->remap_stamp[old] = a->remap_gen;
        below = (*n_new)++;
    }
    return below;
}

bool nu_gram_commit(nu_gram_arena *a, nu_gram_level *lv) {
    if (++a->remap_gen == 0) {
        memset(a->remap_stamp, 0, (size_t)a->cap_nodes * sizeof *a->remap_stamp);
        a->remap_gen = 1;
    }
    uint32_t n = lv->end - lv->start, n_new = 0;
    memmove(a->tops, a->tops + lv->start, (size_t)n * sizeof *a->tops);
    for (uint32_t i = 0; i < n; i++) {
        if (a->tops[i] == GRAM_NIL) continue;
        a->tops[i] = copy_chain(a, a->tops[i], &n_new);
        if (a->nomem) return false;
    }
    nu_gram_node *t = a->nodes;
    a->nodes = a->spare;
    a->spare = t;
    a->n_nodes = n_new;
    a->n_tops = n;
    *lv = (nu_gram_level){0, n, n_new, lv->partial};
    return true;
}

/* ------------------------------------------------------------------------ */
/* State identity (for the mask cache)                                      */
/* ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    return x ^ (x >> 33);
}

uint64_t nu_gram_state_hash(const nu_gram_arena *a, const nu_gram_level *lv) {
    uint64_t h = mix64(((uint64_t)lv->partial.value << 40) ^ ((uint64_t)lv->partial.need << 32) ^
                       lv->partial.min_cp);
    for (uint32_t i = lv->start; i < lv->end; i++) {
        uint32_t t = a->tops[i];
        h += mix64(t == GRAM_NIL ? 1 : ((uint64_t)a->nodes[t].hash << 1) | 3);
    }
    return h;
}

/* Orders stacks by hash, then by positions from the top down. */
static int cmp_stacks(const nu_gram_arena *a, uint32_t x, uint32_t y) {
    while (x != y) {
        if (x == GRAM_NIL) return -1;
        if (y == GRAM_NIL) return 1;
        const nu_gram_node *nx = &a->nodes[x], *ny = &a->nodes[y];
        if (nx->hash != ny->hash) return nx->hash < ny->hash ? -1 : 1;
        if (nx->pos != ny->pos) return nx->pos < ny->pos ? -1 : 1;
        x = nx->parent;
        y = ny->parent;
    }
    return 0;
}

/* Appends v to the key, growing it. */
static bool key_put(uint32_t **key, uint32_t *len, uint32_t *cap, uint32_t v) {
    if (!grow_array((void **)key, cap, *len + 1, sizeof **key)) return false;
    (*key)[(*len)++] = v;
    return true;
}

/* Sifts t[i] down a max-heap of n stacks ordered by cmp_stacks. */
static void sift_down(const nu_gram_arena *a, uint32_t *t, uint32_t n, uint32_t i) {
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, big = i;
        if (l < n && cmp_stacks(a, t[l], t[big]) > 0) big = l;
        if (r < n && cmp_stacks(a, t[r], t[big]) > 0) big = r;
        if (big == i) return;
        uint32_t x = t[i];
        t[i] = t[big];
        t[big] = x;
        i = big;
    }
}

/* Sorts stack tops into the canonical order: insertion sort for the usual
 * handful, heapsort when a level is large (a long enum, say). */
static void sort_stacks(const nu_gram_arena *a, uint32_t *t, uint32_t n) {
    if (n <= 16) {
        for (uint32_t i = 1; i < n; i++) {
            uint32_t x = t[i], j = i;
            for (; j > 0 && cmp_stacks(a, t[j - 1], x) > 0; j--) t[j] = t[j - 1];
            t[j] = x;
        }
        return;
    }
    for (uint32_t i = n / 2; i-- > 0;) sift_down(a, t, n, i);
    for (uint32_t end = n; end-- > 1;) {
        uint32_t x = t[0];
        t[0] = t[end];
        t[end] = x;
        sift_down(a, t, end, 0);
    }
}

bool nu_gram_state_key(const nu_gram_arena *a, const nu_gram_level *lv, uint32_t **key,
                       uint32_t *len, uint32_t *cap) {
    uint32_t n = lv->end - lv->start;
    *len = 0;
    bool ok = key_put(key, len, cap, lv->partial.value) &&
              key_put(key, len, cap, lv->partial.need) &&
              key_put(key, len, cap, lv->partial.min_cp) && key_put(key, len, cap, n);
    /* The sorted tops go first in the key. */
    for (uint32_t i = 0; ok && i < n; i++) ok = key_put(key, len, cap, a->tops[lv->start + i]);
    if (ok) sort_stacks(a, *key + 4, n);
    /* Then each stack's positions from the top down, ended by GRAM_NIL. */
    for (uint32_t i = 0; ok && i < n; i++) {
        for (uint32_t t = (*key)[4 + i]; ok && t != GRAM_NIL; t = a->nodes[t].parent)
            ok = key_put(key, len, cap, a->nodes[t].pos);
        ok = ok && key_put(key, len, cap, GRAM_NIL);
    }
    /* Node indices are not part of the identity: blank them out. */
    for (uint32_t i = 0; ok && i < n; i++) (*key)[4 + i] = 0;
    return ok;
}
