/* grammar.h - constrained generation (internal).
 *
 * The pieces, bottom to top:
 *   nu_buf (base/buf.h) the growable text buffer the converters write GBNF with.
 *   nu_gram_program  a GBNF grammar compiled to flat arrays: every rule is a list
 *                 of alternatives, every alternative a sequence of elements
 *                 (a character class over code points, or a reference to a
 *                 rule) ended by GRAM_END. Repetitions and groups of the
 *                 source are rewritten into extra rules by the parser.
 *   nu_gram_arena    the matcher: a pushdown automaton over bytes. A matcher
 *                 state is a set of stacks of positions in the program (the
 *                 top is the class the next character must belong to, the
 *                 rest are where to continue after the current rule ends)
 *                 plus the bytes of an unfinished UTF-8 character. Stacks are
 *                 linked nodes shared between states (a step pops one node
 *                 and pushes a few), so stepping one byte costs a few node
 *                 allocations per stack, never a copy of whole stacks.
 *
 * The public nu_grammar / nu_grammar_state of nucleus.h (grammar_vocab.c)
 * bind a program to a vocabulary: a trie of token byte strings, walked once
 * per full mask. json_schema.c and regex.c turn schemas and regexes into
 * GBNF text that the same parser compiles. */
#ifndef NU_GRAMMAR_H
#define NU_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "nucleus.h"
#include "utf8.h"

/* ------------------------------------------------------------------------ */
/* Text buffer                                                              */
/* ------------------------------------------------------------------------ */

/* Appends s as a GBNF string literal ("..." with escapes); s is UTF-8. */
void nu_gram_buf_literal(nu_buf *b, const char *s, size_t n);
/* Appends one code point as it must be written inside a GBNF [...] class. */
void nu_gram_buf_class_char(nu_buf *b, uint32_t cp);
/* Replaces control characters in an error message (which may quote
 * schema keys or regex text) so that it stays on one line. */
void nu_gram_one_line(nu_error *err);
/* Hands the text to the caller (free() it); NULL if an append failed. */
char *nu_gram_buf_take(nu_buf *b);

/* ------------------------------------------------------------------------ */
/* Compiled grammar                                                         */
/* ------------------------------------------------------------------------ */

enum { GRAM_END = 0, GRAM_CLASS = 1, GRAM_REF = 2 };

/* Distances saturate here; a rule that cannot end has this minimum length. */
#define GRAM_INF 0x3FFFFFFFu
/* Largest code point. */
#define GRAM_MAX_CP 0x10FFFFu

typedef struct nu_gram_elem {
    uint32_t kind; /* GRAM_END, GRAM_CLASS (arg: class) or GRAM_REF (arg: rule) */
    uint32_t arg;
} nu_gram_elem;

typedef struct nu_gram_range {
    uint32_t lo, hi; /* inclusive code points */
} nu_gram_range;

/* A set of code points: sorted, disjoint, non-adjacent ranges, plus a bitmap
 * of the ASCII members for the common case. */
typedef struct nu_gram_class {
    uint64_t ascii[2];
    uint32_t first, count; /* ranges[first .. first + count) */
    uint32_t min_bytes;    /* UTF-8 length of the smallest member */
} nu_gram_class;

typedef struct nu_gram_program {
    nu_gram_elem *elems;
    uint32_t *dist; /* per element: fewest bytes that finish its alternative from there */
    uint32_t n_elems;
    uint32_t *alts;       /* first element of each alternative */
    uint32_t *rule_first; /* rule r's alternatives: alts[rule_first[r] .. rule_first[r + 1]) */
    uint32_t n_rules;
    uint32_t root;
    nu_gram_class *classes;
    uint32_t n_classes;
    nu_gram_range *ranges;
    uint32_t n_ranges;
} nu_gram_program;

/* Parses GBNF text (len bytes, need not be NUL-terminated) and compiles it with
 * `root` (NULL: "root") as the start rule. Errors name the line and column
 * and what was expected; undefined rules and left recursion are reported by
 * name. Alternatives that can never finish are dropped. */
nu_status nu_gram_compile(const char *gbnf, size_t len, const char *root, nu_gram_program **out,
                          nu_error *err);
void nu_gram_program_free(nu_gram_program *p);

/* Is code point cp in the class? */
static inline bool nu_gram_class_has(const nu_gram_program *p, const nu_gram_class *c,
                                     uint32_t cp) {
    if (cp < 128) return (c->ascii[cp >> 6] >> (cp & 63)) & 1;
    const nu_gram_range *r = p->ranges + c->first;
    uint32_t lo = 0, hi = c->count;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (r[mid].hi < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->count && r[lo].lo <= cp;
}

/* Does the class hold any code point in [lo, hi]? */
bool nu_gram_class_meets(const nu_gram_program *p, const nu_gram_class *c, uint32_t lo,
                         uint32_t hi);

/* ------------------------------------------------------------------------ */
/* Matcher                                                                  */
/* ------------------------------------------------------------------------ */

#define GRAM_NIL UINT32_MAX

/* Most stacks one state may hold, and most stack nodes alive at once: past
 * these the grammar is too ambiguous (or too deep) and matching fails with
 * `overflow` set instead of running away. */
#define GRAM_MAX_STACKS 16384u
#define GRAM_MAX_NODES (1u << 24)

/* One stack entry: a position and the entry below it. `cost` is the fewest
 * bytes that finish this entry and everything below it; `hash` covers the
 * positions of the whole chain (equal stacks have equal hashes). */
typedef struct nu_gram_node {
    uint32_t pos, parent, cost, hash;
} nu_gram_node;

/* An unfinished UTF-8 character: `need` continuation bytes still to come,
 * the bits so far in `value`, and the smallest code point of its length. */
typedef struct nu_gram_utf8 {
    uint32_t value, min_cp, need;
} nu_gram_utf8;

/* A matcher state: stack tops in arena->tops[start, end) (GRAM_NIL is the
 * empty stack: the grammar may end here), the partial character, and the
 * arena's node count when the level was made (for rolling back). */
typedef struct nu_gram_level {
    uint32_t start, end;
    uint32_t nodes_mark;
    nu_gram_utf8 partial;
} nu_gram_level;

/* Memory for stacks; grows on demand and is reused, so a warm matcher does
 * not allocate. Levels live in it like a stack: a step appends a level and
 * rolling back to a level frees everything made after it. */
typedef struct nu_gram_arena {
    nu_gram_node *nodes, *spare; /* spare: the copy target of nu_gram_commit */
    uint32_t n_nodes, cap_nodes;
    uint32_t *tops;
    uint32_t n_tops, cap_tops;
    uint32_t *work; /* expansion work list and commit scratch */
    uint32_t cap_work;
    uint32_t *remap, *remap_stamp;      /* commit: old node -> new node */
    uint32_t *dedup_slot, *dedup_stamp; /* open addressing over the level being built */
    uint32_t dedup_cap, stamp, remap_gen;
    bool overflow; /* a limit was hit: results are incomplete */
    bool nomem;    /* an allocation failed */
} nu_gram_arena;

nu_status nu_gram_arena_init(nu_gram_arena *a, nu_error *err);
void nu_gram_arena_free(nu_gram_arena *a);
/* Copies src's committed level (the arena's first nodes and tops) into dst. */
nu_status nu_gram_arena_clone(nu_gram_arena *dst, const nu_gram_arena *src, const nu_gram_level *lv,
                              nu_error *err);

/* Drops every node and top made after level lv. */
static inline void nu_gram_rollback(nu_gram_arena *a, const nu_gram_level *lv) {
    a->n_nodes = lv->nodes_mark;
    a->n_tops = lv->end;
}

/* The state before any input: the expanded root rule. False on overflow. */
bool nu_gram_start(const nu_gram_program *p, nu_gram_arena *a, nu_gram_level *out);
/* Feeds one byte to level `in`, appending the next level to the arena. False
 * when no stack survives (the byte is not allowed) or a limit was hit. */
bool nu_gram_step(const nu_gram_program *p, nu_gram_arena *a, const nu_gram_level *in, uint8_t byte,
                  nu_gram_level *out);
/* Fewest bytes that complete the grammar from this level (0: may end now). */
uint32_t nu_gram_distance(const nu_gram_program *p, const nu_gram_arena *a,
                          const nu_gram_level *lv);
/* The grammar may end here (no partial character, an empty stack). */
bool nu_gram_complete(const nu_gram_arena *a, const nu_gram_level *lv);
/* Only the empty stack is left: nothing but the end may follow. */
bool nu_gram_must_end(const nu_gram_arena *a, const nu_gram_level *lv);
/* Makes lv the arena's only level, copying its reachable nodes to the front
 * (garbage collection between tokens). False if memory ran out. */
bool nu_gram_commit(nu_gram_arena *a, nu_gram_level *lv);
/* A hash of the state's stacks and partial character, independent of the
 * order of the tops, and its exact form (positions of every stack, in a
 * canonical order) written to key (grown as needed). */
uint64_t nu_gram_state_hash(const nu_gram_arena *a, const nu_gram_level *lv);
bool nu_gram_state_key(const nu_gram_arena *a, const nu_gram_level *lv, uint32_t **key,
                       uint32_t *len, uint32_t *cap);

/* Turns the mask cache of a state on (the default) or off: for benchmarks
 * and tests that compare masks with and without it. */
void nu_grammar_state_set_cache(nu_grammar_state *s, bool on);

/* ------------------------------------------------------------------------ */
/* Converters to GBNF                                                       */
/* ------------------------------------------------------------------------ */

/* How a regex is used: matched against the whole text, or as a JSON Schema
 * "pattern": the decoded contents of a JSON string must contain a match
 * (unless anchored with ^ and $) and characters are written JSON-escaped. */
typedef enum nu_gram_regex_mode { GRAM_REGEX_FULL, GRAM_REGEX_JSON_STRING } nu_gram_regex_mode;

/* Appends GBNF rules to b defining rule `name` (and helpers named
 * "<name>-..."): for FULL, exactly the texts the regex matches; for
 * JSON_STRING, the inside of a JSON string (without the quotes). */
nu_status nu_gram_regex_rules(nu_buf *b, const char *name, const char *regex,
                              nu_gram_regex_mode mode, nu_error *err);

/* An expression for one of the n strings (valid UTF-8), prefixes factored
 * out when there are many; and the whole grammar "root ::= ..." of them
 * (grammar_choices.c). */
void nu_gram_choices_expr(nu_buf *b, const char *const *choices, size_t n);
void nu_gram_choices_gbnf(nu_buf *b, const char *const *choices, size_t n);

/* The whole GBNF grammar for a JSON Schema (root rule "root"). */
nu_status nu_gram_json_schema_gbnf(const char *schema, const nu_json_options *opt, nu_buf *out,
                                   nu_error *err);
/* The grammar of any JSON object ("root"). */
nu_status nu_gram_json_any_gbnf(const nu_json_options *opt, nu_buf *out, nu_error *err);

#endif
