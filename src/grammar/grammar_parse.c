/* grammar_parse.c - GBNF text to a compiled nu_gram_program.
 *
 * The syntax (as llama.cpp users write it):
 *
 *   rule-name ::= alternative | alternative ...    # a comment
 *
 * An alternative is a sequence of: "string literals", [character classes]
 * ([a-z], [^"\\]), '.' (any character), rule names and ( groups ), each
 * optionally followed by *, +, ?, {m}, {m,} or {m,n}. Escapes in literals and
 * classes: \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH. A rule may
 * span lines: it ends where the next "name ::=" begins.
 *
 * The parser builds rules of alternatives of items (class or rule
 * reference); groups and repetitions become generated rules: x* is
 * R ::= x R | (empty), x? is R ::= x | (empty), x{m,n} is m copies of x and a
 * chain of n - m nested optional rules. Then it checks the grammar as a whole
 * (undefined rules, the start rule, left recursion), finds each rule's
 * fewest bytes with Knuth's generalisation of Dijkstra's algorithm, drops the
 * alternatives that can never finish, and lays everything out flat. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar.h"

#define GP_MAX_REPEAT 100000u   /* largest m or n in {m,n} */
#define GP_MAX_ITEMS (1u << 23) /* items after expanding repetitions */
#define GP_MAX_DEPTH 512u       /* nesting of ( groups ) */

typedef struct gp_item {
    uint32_t kind, arg; /* GRAM_CLASS or GRAM_REF */
} gp_item;

typedef struct gp_alt {
    gp_item *items;
    uint32_t n, cap;
} gp_alt;

/* What made a rule: the user's text, or the parser rewriting a construct. */
enum { GP_USER, GP_GROUP, GP_STAR, GP_OPT, GP_WRAP };

typedef struct gp_rule {
    const char *name; /* user rules: into the source text */
    uint32_t name_len;
    uint32_t kind;
    uint32_t origin; /* the user rule whose definition made it */
    size_t site;     /* offset: definition, creation or (undefined) first use */
    bool defined;
    gp_alt *alts;
    uint32_t n_alts, cap_alts;
} gp_rule;

typedef struct gp {
    const char *src;
    size_t len, pos;
    gp_rule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t *name_slots; /* open addressing: user rule names -> rule */
    uint32_t name_cap, n_users;
    nu_gram_range *ranges;
    uint32_t n_ranges, cap_ranges;
    nu_gram_class *classes;
    uint32_t n_classes, cap_classes;
    uint32_t *class_slots; /* open addressing: class contents -> class */
    uint32_t class_cap;
    nu_gram_range *tmp; /* the class being parsed */
    uint32_t n_tmp, cap_tmp;
    uint32_t cur; /* the user rule being parsed */
    size_t n_items;
    uint32_t depth;
    nu_error *err;
    nu_status st;
} gp;

/* ------------------------------------------------------------------------ */
/* Errors and small helpers                                                 */
/* ------------------------------------------------------------------------ */

/* Line and column (1-based, columns in characters) of a source offset. */
static void line_col(const gp *g, size_t off, unsigned *line, unsigned *col) {
    unsigned l = 1, c = 1;
    for (size_t i = 0; i < off && i < g->len; i++) {
        unsigned char b = (unsigned char)g->src[i];
        if (b == '\n') {
            l++;
            c = 1;
        } else if ((b & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

/* Records the first error: "line L, column C: message". */
__attribute__((format(printf, 3, 4))) static void gp_fail(gp *g, size_t off, const char *fmt, ...) {
    if (g->st != NU_OK) return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned line, col;
    line_col(g, off, &line, &col);
    g->st = nu_fail(g->err, NU_ERR_FORMAT, "line %u, column %u: %s", line, col, msg);
}

static void gp_nomem(gp *g) {
    if (g->st == NU_OK) g->st = nu_fail(g->err, NU_ERR_NOMEM, "out of memory compiling a grammar");
}

/* Grows *p (of *cap elements of size sz) to hold n; false on failure. */
static bool grow(gp *g, void **p, uint32_t *cap, uint32_t n, size_t sz) {
    if (n <= *cap) return true;
    uint32_t c = *cap ? *cap : 8;
    while (c < n) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) {
        gp_nomem(g);
        return false;
    }
    *p = q;
    *cap = c;
    return true;
}

static bool at_end(const gp *g) {
    return g->pos >= g->len;
}

static char peek(const gp *g) {
    return at_end(g) ? 0 : g->src[g->pos];
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* A character for messages: printable ASCII as is, else its byte value. */
static const char *show_char(char c, char buf[8]) {
    if (c >= 0x21 && c < 0x7F)
        snprintf(buf, 8, "'%c'", c);
    else if (c == ' ')
        snprintf(buf, 8, "a space");
    else
        snprintf(buf, 8, "0x%02X", (unsigned char)c);
    return buf;
}

/* Skips spaces, tabs, line breaks and # comments. */
static void skip_space(gp *g) {
    while (!at_end(g)) {
        char c = peek(g);
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            g->pos++;
        } else if (c == '#') {
            while (!at_end(g) && peek(g) != '\n') g->pos++;
        } else {
            break;
        }
    }
}

/* Does "name ::=" start at the current position? */
static bool at_rule_head(const gp *g) {
    size_t q = g->pos;
    if (q >= g->len || !is_name_char(g->src[q])) return false;
    while (q < g->len && is_name_char(g->src[q])) q++;
    while (q < g->len && (g->src[q] == ' ' || g->src[q] == '\t')) q++;
    return q + 3 <= g->len && memcmp(g->src + q, "::=", 3) == 0;
}

/* Decodes one UTF-8 character at the current position; 0 bytes if invalid. */
static size_t decode_utf8(const gp *g, uint32_t *cp) {
    return nu_utf8_decode(g->src + g->pos, g->len - g->pos, cp);
}

/* ------------------------------------------------------------------------ */
/* Rules, alternatives, items                                               */
/* ------------------------------------------------------------------------ */

static uint32_t hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* A new rule with no alternatives; GRAM_NIL when out of memory. */
static uint32_t new_rule(gp *g, uint32_t kind, size_t site) {
    if (g->st || !grow(g, (void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules))
        return GRAM_NIL;
    gp_rule *r = &g->rules[g->n_rules];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->origin = kind == GP_USER ? g->n_rules : g->cur;
    r->site = site;
    return g->n_rules++;
}

/* Re-inserts every user rule into a name table of twice the size. */
static bool rehash_names(gp *g) {
    uint32_t cap = g->name_cap ? g->name_cap * 2 : 64;
    uint32_t *slots = malloc((size_t)cap * sizeof *slots);
    if (!slots) {
        gp_nomem(g);
        return false;
    }
    memset(slots, 0xFF, (size_t)cap * sizeof *slots);
    for (uint32_t i = 0; i < g->n_rules; i++) {
        if (g->rules[i].kind != GP_USER) continue;
        uint32_t h = hash_bytes(g->rules[i].name, g->rules[i].name_len) & (cap - 1);
        while (slots[h] != GRAM_NIL) h = (h + 1) & (cap - 1);
        slots[h] = i;
    }
    free(g->name_slots);
    g->name_slots = slots;
    g->name_cap = cap;
    return true;
}

/* The user rule called name, or GRAM_NIL. */
static uint32_t find_rule(const gp *g, const char *name, size_t n) {
    if (!g->name_cap) return GRAM_NIL;
    uint32_t h = hash_bytes(name, n) & (g->name_cap - 1);
    for (; g->name_slots[h] != GRAM_NIL; h = (h + 1) & (g->name_cap - 1)) {
        const gp_rule *r = &g->rules[g->name_slots[h]];
        if (r->name_len == n && memcmp(r->name, name, n) == 0) return g->name_slots[h];
    }
    return GRAM_NIL;
}

/* The user rule called name, made (undefined, first used at site) if new. */
static uint32_t rule_by_name(gp *g, const char *name, size_t n, size_t site) {
    uint32_t r = find_rule(g, name, n);
    if (r != GRAM_NIL) return r;
    if ((g->n_users + 1) * 2 > g->name_cap && !rehash_names(g)) return GRAM_NIL;
    r = new_rule(g, GP_USER, site);
    if (r == GRAM_NIL) return r;
    g->rules[r].name = name;
    g->rules[r].name_len = (uint32_t)n;
    g->n_users++;
    uint32_t h = hash_bytes(name, n) & (g->name_cap - 1);
    while (g->name_slots[h] != GRAM_NIL) h = (h + 1) & (g->name_cap - 1);
    g->name_slots[h] = r;
    return r;
}

/* Appends an empty alternative to rule r; its index, or GRAM_NIL. */
static uint32_t new_alt(gp *g, uint32_t r) {
    gp_rule *rule = &g->rules[r];
    if (g->st ||
        !grow(g, (void **)&rule->alts, &rule->cap_alts, rule->n_alts + 1, sizeof *rule->alts))
        return GRAM_NIL;
    memset(&rule->alts[rule->n_alts], 0, sizeof *rule->alts);
    return rule->n_alts++;
}

static bool push_item(gp *g, uint32_t r, uint32_t a, uint32_t kind, uint32_t arg) {
    if (g->st) return false;
    if (++g->n_items > GP_MAX_ITEMS) {
        gp_fail(g, g->pos,
                "the grammar is too large (over %u elements once repetitions are expanded)",
                GP_MAX_ITEMS);
        return false;
    }
    gp_alt *alt = &g->rules[r].alts[a];
    if (!grow(g, (void **)&alt->items, &alt->cap, alt->n + 1, sizeof *alt->items)) return false;
    alt->items[alt->n++] = (gp_item){kind, arg};
    return true;
}

/* ------------------------------------------------------------------------ */
/* Character classes                                                        */
/* ------------------------------------------------------------------------ */

static int cmp_range(const void *a, const void *b) {
    const nu_gram_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges the ranges in g->tmp; complements them if negate. */
static void normalise_tmp(gp *g, bool negate) {
    qsort(g->tmp, g->n_tmp, sizeof *g->tmp, cmp_range);
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->n_tmp; i++) {
        if (n > 0 && g->tmp[i].lo <= g->tmp[n - 1].hi + 1) {
            if (g->tmp[i].hi > g->tmp[n - 1].hi) g->tmp[n - 1].hi = g->tmp[i].hi;
        } else {
            g->tmp[n++] = g->tmp[i];
        }
    }
    g->n_tmp = n;
    if (!negate) return;
    /* The complement has at most one range more; build it in place from the end. */
    if (!grow(g, (void **)&g->tmp, &g->cap_tmp, n + 1, sizeof *g->tmp)) return;
    uint32_t next = 0, m = 0;
    nu_gram_range *out = malloc((size_t)(n + 1) * sizeof *out);
    if (!out) {
        gp_nomem(g);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (g->tmp[i].lo > next) out[m++] = (nu_gram_range){next, g->tmp[i].lo - 1};
        next = g->tmp[i].hi + 1;
    }
    if (next <= GRAM_MAX_CP) out[m++] = (nu_gram_range){next, GRAM_MAX_CP};
    memcpy(g->tmp, out, (size_t)m * sizeof *out);
    g->n_tmp = m;
    free(out);
}

/* Bytes of cp's UTF-8 form (surrogates counted as 3, like their neighbours). */
static uint32_t utf8_len_of(uint32_t cp) {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

static bool same_class(const gp *g, uint32_t c) {
    const nu_gram_class *k = &g->classes[c];
    return k->count == g->n_tmp &&
           (g->n_tmp == 0 ||
            memcmp(g->ranges + k->first, g->tmp, (size_t)g->n_tmp * sizeof *g->tmp) == 0);
}

static bool rehash_classes(gp *g) {
    uint32_t cap = g->class_cap ? g->class_cap * 2 : 64;
    uint32_t *slots = malloc((size_t)cap * sizeof *slots);
    if (!slots) {
        gp_nomem(g);
        return false;
    }
    memset(slots, 0xFF, (size_t)cap * sizeof *slots);
    for (uint32_t i = 0; i < g->n_classes; i++) {
        const nu_gram_class *k = &g->classes[i];
        uint32_t h = hash_bytes(g->ranges + k->first, k->count * sizeof(nu_gram_range)) & (cap - 1);
        while (slots[h] != GRAM_NIL) h = (h + 1) & (cap - 1);
        slots[h] = i;
    }
    free(g->class_slots);
    g->class_slots = slots;
    g->class_cap = cap;
    return true;
}

/* The class holding exactly the (normalised) ranges in g->tmp, shared with
 * any earlier identical class; GRAM_NIL on failure. */
static uint32_t intern_tmp(gp *g) {
    if (g->st) return GRAM_NIL;
    if ((g->n_classes + 1) * 2 > g->class_cap && !rehash_classes(g)) return GRAM_NIL;
    uint32_t h = hash_bytes(g->tmp, g->n_tmp * sizeof *g->tmp) & (g->class_cap - 1);
    for (; g->class_slots[h] != GRAM_NIL; h = (h + 1) & (g->class_cap - 1))
        if (same_class(g, g->class_slots[h])) return g->class_slots[h];
    if (!grow(g, (void **)&g->ranges, &g->cap_ranges, g->n_ranges + g->n_tmp, sizeof *g->ranges) ||
        !grow(g, (void **)&g->classes, &g->cap_classes, g->n_classes + 1, sizeof *g->classes))
        return GRAM_NIL;
    nu_gram_class *k = &g->classes[g->n_classes];
    memset(k, 0, sizeof *k);
    k->first = g->n_ranges;
    k->count = g->n_tmp;
    k->min_bytes = g->n_tmp ? utf8_len_of(g->tmp[0].lo) : GRAM_INF;
    for (uint32_t i = 0; i < g->n_tmp; i++) {
        g->ranges[g->n_ranges++] = g->tmp[i];
        for (uint32_t cp = g->tmp[i].lo; cp <= g->tmp[i].hi && cp < 128; cp++)
            k->ascii[cp >> 6] |= 1ull << (cp & 63);
    }
    g->class_slots[h] = g->n_classes;
    return g->n_classes++;
}

static bool tmp_add(gp *g, uint32_t lo, uint32_t hi) {
    if (!grow(g, (void **)&g->tmp, &g->cap_tmp, g->n_tmp + 1, sizeof *g->tmp)) return false;
    g->tmp[g->n_tmp++] = (nu_gram_range){lo, hi};
    return true;
}

/* The class of one code point. */
static uint32_t char_class(gp *g, uint32_t cp) {
    g->n_tmp = 0;
    if (!tmp_add(g, cp, cp)) return GRAM_NIL;
    return intern_tmp(g);
}

/* ------------------------------------------------------------------------ */
/* Lexical pieces                                                           */
/* ------------------------------------------------------------------------ */

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads exactly n hex digits after an escape letter. */
static bool parse_hex(gp *g, size_t at, int n, char letter, uint32_t *cp) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        int d = g->pos < g->len ? hex_value(g->src[g->pos]) : -1;
        if (d < 0) {
            gp_fail(g, at, "expected %d hex digits after '\\%c'", n, letter);
            return false;
        }
        v = v * 16 + (uint32_t)d;
        g->pos++;
    }
    if (v > GRAM_MAX_CP) {
        gp_fail(g, at, "\\%c%0*X is beyond the last code point U+10FFFF", letter, n, v);
        return false;
    }
    *cp = v;
    return true;
}

/* An escape sequence; the position is at the backslash. */
static bool parse_escape(gp *g, uint32_t *cp) {
    size_t at = g->pos;
    g->pos++;
    if (at_end(g)) {
        gp_fail(g, at, "a backslash at the end of the text");
        return false;
    }
    char c = g->src[g->pos++];
    switch (c) {
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/': *cp = (uint32_t)c; return true;
    case 'x': return parse_hex(g, at, 2, 'x', cp);
    case 'u': return parse_hex(g, at, 4, 'u', cp);
    case 'U': return parse_hex(g, at, 8, 'U', cp);
    default: {
        char buf[8];
        gp_fail(g, at,
                "unknown escape '\\' followed by %s (known: \\n \\r \\t \\\\ \\\" \\' "
                "\\[ \\] \\- \\^ \\/ \\xHH \\uHHHH \\UHHHHHHHH)",
                show_char(c, buf));
        return false;
    }
    }
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static bool parse_char(gp *g, uint32_t *cp) {
    if (peek(g) == '\\') return parse_escape(g, cp);
    size_t k = decode_utf8(g, cp);
    if (k == 0) {
        gp_fail(g, g->pos, "invalid UTF-8");
        return false;
    }
    g->pos += k;
    return true;
}

/* "..." : one class item per character. */
static bool parse_string(gp *g, uint32_t r, uint32_t a) {
    size_t start = g->pos++;
    for (;;) {
        if (at_end(g) || peek(g) == '\n') {
            gp_fail(g, start, "unterminated string literal (no closing '\"' on this line)");
            return false;
        }
        if (peek(g) == '"') {
            g->pos++;
            return true;
        }
        uint32_t cp;
        if (!parse_char(g, &cp)) return false;
        uint32_t k = char_class(g, cp);
        if (k == GRAM_NIL || !push_item(g, r, a, GRAM_CLASS, k)) return false;
    }
}

/* [...] : ranges and single characters, ^ first to negate. */
static bool parse_class(gp *g, uint32_t r, uint32_t a) {
    size_t start = g->pos++;
    bool negate = peek(g) == '^';
    if (negate) g->pos++;
    g->n_tmp = 0;
    for (bool first = true;; first = false) {
        if (at_end(g) || peek(g) == '\n') {
            gp_fail(g, start, "unterminated character class (no closing ']' on this line)");
            return false;
        }
        if (peek(g) == ']') {
            if (first && !negate) {
                gp_fail(g, start, "empty character class '[]'");
                return false;
            }
            g->pos++;
            break;
        }
        size_t item = g->pos;
        uint32_t lo, hi;
        if (!parse_char(g, &lo)) return false;
        hi = lo;
        if (peek(g) == '-' && g->pos + 1 < g->len && g->src[g->pos + 1] != ']' &&
            g->src[g->pos + 1] != '\n') {
            g->pos++;
            if (!parse_char(g, &hi)) return false;
            if (hi < lo) {
                gp_fail(g, item, "character range is reversed (U+%04X after U+%04X)", hi, lo);
                return false;
            }
        }
        if (!tmp_add(g, lo, hi)) return false;
    }
    normalise_tmp(g, negate);
    uint32_t k = intern_tmp(g);
    return k != GRAM_NIL && push_item(g, r, a, GRAM_CLASS, k);
}

/* A decimal count inside {...}. */
static bool parse_count(gp *g, uint32_t *out) {
    size_t at = g->pos;
    if (!(peek(g) >= '0' && peek(g) <= '9')) {
        char buf[8];
        if (at_end(g))
            gp_fail(g, at, "expected a number in the repetition {...}");
        else
            gp_fail(g, at, "expected a number in the repetition {...}, found %s",
                    show_char(peek(g), buf));
        return false;
    }
    uint64_t v = 0;
    while (peek(g) >= '0' && peek(g) <= '9') {
        v = v * 10 + (uint64_t)(peek(g) - '0');
        if (v > GP_MAX_REPEAT) {
            gp_fail(g, at, "repetition count is above the limit of %u", GP_MAX_REPEAT);
            return false;
        }
        g->pos++;
    }
    *out = (uint32_t)v;
    return true;
}

static void skip_blanks(gp *g) {
    while (peek(g) == ' ' || peek(g) == '\t') g->pos++;
}

/* {m}, {m,} or {m,n}; the position is at '{'. max GRAM_INF: no upper bound. */
static bool parse_bounds(gp *g, uint32_t *min, uint32_t *max) {
    size_t at = g->pos++;
    skip_blanks(g);
    if (!parse_count(g, min)) return false;
    skip_blanks(g);
    *max = *min;
    if (peek(g) == ',') {
        g->pos++;
        skip_blanks(g);
        *max = GRAM_INF;
        if (peek(g) >= '0' && peek(g) <= '9' && !parse_count(g, max)) return false;
        skip_blanks(g);
    }
    if (peek(g) != '}') {
        char buf[8];
        if (at_end(g))
            gp_fail(g, g->pos, "expected '}' to close the repetition");
        else
            gp_fail(g, g->pos, "expected '}' to close the repetition, found %s",
                    show_char(peek(g), buf));
        return false;
    }
    g->pos++;
    if (*max < *min) {
        gp_fail(g, at, "repetition {%u,%u}: the maximum is less than the minimum", *min, *max);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Sequences, alternatives, repetition                                      */
/* ------------------------------------------------------------------------ */

static bool parse_alternatives(gp *g, uint32_t r);

/* R ::= item R | (empty) */
static uint32_t star_rule(gp *g, gp_item item, size_t site) {
    uint32_t s = new_rule(g, GP_STAR, site);
    uint32_t a = s == GRAM_NIL ? GRAM_NIL : new_alt(g, s);
    if (a == GRAM_NIL || !push_item(g, s, a, item.kind, item.arg) ||
        !push_item(g, s, a, GRAM_REF, s) || new_alt(g, s) == GRAM_NIL)
        return GRAM_NIL;
    return s;
}

/* A chain of k nested optional rules: O1 ::= item O2 | (empty), ..., Ok ::=
 * item | (empty). Returns O1. */
static uint32_t optional_chain(gp *g, gp_item item, uint32_t k, size_t site) {
    uint32_t next = GRAM_NIL;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t o = new_rule(g, GP_OPT, site);
        uint32_t a = o == GRAM_NIL ? GRAM_NIL : new_alt(g, o);
        if (a == GRAM_NIL || !push_item(g, o, a, item.kind, item.arg)) return GRAM_NIL;
        if (next != GRAM_NIL && !push_item(g, o, a, GRAM_REF, next)) return GRAM_NIL;
        if (new_alt(g, o) == GRAM_NIL) return GRAM_NIL;
        next = o;
    }
    return next;
}

/* Replaces the unit items[start..] of alternative (r, a) by one item: itself
 * if it is one item already, else a reference to a new rule holding it. */
static bool unit_item(gp *g, uint32_t r, uint32_t a, uint32_t start, size_t site, gp_item *out) {
    gp_alt *alt = &g->rules[r].alts[a];
    if (alt->n - start == 1) {
        *out = alt->items[start];
        alt->n = start;
        return true;
    }
    uint32_t w = new_rule(g, GP_WRAP, site);
    uint32_t wa = w == GRAM_NIL ? GRAM_NIL : new_alt(g, w);
    if (wa == GRAM_NIL) return false;
    alt = &g->rules[r].alts[a]; /* rules may have moved */
    for (uint32_t i = start; i < alt->n; i++)
        if (!push_item(g, w, wa, alt->items[i].kind, alt->items[i].arg)) return false;
    g->rules[r].alts[a].n = start;
    *out = (gp_item){GRAM_REF, w};
    return true;
}

/* Applies one postfix operator to the unit starting at item `start`. */
static bool apply_postfix(gp *g, uint32_t r, uint32_t a, uint32_t start) {
    size_t site = g->pos;
    char op = peek(g);
    uint32_t min = 0, max = GRAM_INF;
    if (op == '{') {
        if (!parse_bounds(g, &min, &max)) return false;
    } else {
        g->pos++;
        if (op == '+') min = 1;
        if (op == '?') max = 1;
    }
    if (g->rules[r].alts[a].n == start) return true; /* "" repeated is still "" */
    gp_item item;
    if (!unit_item(g, r, a, start, site, &item)) return false;
    for (uint32_t i = 0; i < min; i++)
        if (!push_item(g, r, a, item.kind, item.arg)) return false;
    uint32_t tail = GRAM_NIL;
    if (max == GRAM_INF)
        tail = star_rule(g, item, site);
    else if (max > min)
        tail = optional_chain(g, item, max - min, site);
    else
        return true;
    return tail != GRAM_NIL && push_item(g, r, a, GRAM_REF, tail);
}

/* ( alternatives ) as a reference to a new rule. */
static bool parse_group(gp *g, uint32_t r, uint32_t a) {
    size_t open = g->pos++;
    if (++g->depth > GP_MAX_DEPTH) {
        gp_fail(g, open, "groups nested deeper than %u", GP_MAX_DEPTH);
        return false;
    }
    uint32_t grp = new_rule(g, GP_GROUP, open);
    if (grp == GRAM_NIL || !parse_alternatives(g, grp)) return false;
    skip_space(g);
    if (peek(g) != ')') {
        unsigned line, col;
        line_col(g, open, &line, &col);
        char buf[8];
        if (at_end(g))
            gp_fail(g, g->pos, "expected ')' to close the group opened at line %u, column %u", line,
                    col);
        else
            gp_fail(g, g->pos,
                    "expected ')' to close the group opened at line %u, column %u, found %s", line,
                    col, show_char(peek(g), buf));
        return false;
    }
    g->pos++;
    g->depth--;
    return push_item(g, r, a, GRAM_REF, grp);
}

/* One element: literal, class, '.', group or rule name. */
static bool parse_element(gp *g, uint32_t r, uint32_t a) {
    char c = peek(g);
    if (c == '"') return parse_string(g, r, a);
    if (c == '[') return parse_class(g, r, a);
    if (c == '(') return parse_group(g, r, a);
    if (c == '.') {
        g->pos++;
        g->n_tmp = 0;
        uint32_t k = tmp_add(g, 0, GRAM_MAX_CP) ? intern_tmp(g) : GRAM_NIL;
        return k != GRAM_NIL && push_item(g, r, a, GRAM_CLASS, k);
    }
    if (is_name_char(c)) {
        size_t start = g->pos;
        while (is_name_char(peek(g))) g->pos++;
        uint32_t ref = rule_by_name(g, g->src + start, g->pos - start, start);
        return ref != GRAM_NIL && push_item(g, r, a, GRAM_REF, ref);
    }
    char buf[8];
    if (c == '*' || c == '+' || c == '?' || c == '{')
        gp_fail(g, g->pos, "'%c' must follow something to repeat", c);
    else
        gp_fail(g, g->pos,
                "expected a string, a character class, '.', '(' or a rule name, found %s",
                show_char(c, buf));
    return false;
}

/* Elements until '|', ')', the next rule or the end. */
static bool parse_sequence(gp *g, uint32_t r, uint32_t a) {
    for (;;) {
        skip_space(g);
        char c = peek(g);
        if (at_end(g) || c == '|' || c == ')' || at_rule_head(g)) return true;
        uint32_t start = g->rules[r].alts[a].n;
        if (!parse_element(g, r, a)) return false;
        for (;;) {
            skip_blanks(g);
            c = peek(g);
            if (c != '*' && c != '+' && c != '?' && c != '{') break;
            if (!apply_postfix(g, r, a, start)) return false;
        }
    }
}

/* sequence ('|' sequence)* into rule r. */
static bool parse_alternatives(gp *g, uint32_t r) {
    for (;;) {
        uint32_t a = new_alt(g, r);
        if (a == GRAM_NIL || !parse_sequence(g, r, a)) return false;
        if (peek(g) != '|') return true;
        g->pos++;
    }
}

/* name ::= alternatives */
static bool parse_rule(gp *g) {
    size_t start = g->pos;
    if (!is_name_char(peek(g))) {
        char buf[8];
        if (peek(g) == ')')
            gp_fail(g, start, "unmatched ')'");
        else
            gp_fail(g, start, "expected a rule name, found %s", show_char(peek(g), buf));
        return false;
    }
    while (is_name_char(peek(g))) g->pos++;
    size_t name_len = g->pos - start;
    skip_blanks(g);
    if (g->len - g->pos < 3 || memcmp(g->src + g->pos, "::=", 3) != 0) {
        gp_fail(g, g->pos, "expected '::=' after the rule name '%.*s'", (int)name_len,
                g->src + start);
        return false;
    }
    g->pos += 3;
    uint32_t r = rule_by_name(g, g->src + start, name_len, start);
    if (r == GRAM_NIL) return false;
    if (g->rules[r].defined) {
        unsigned line, col;
        line_col(g, g->rules[r].site, &line, &col);
        gp_fail(g, start, "rule '%.*s' is defined twice (first on line %u)", (int)name_len,
                g->src + start, line);
        return false;
    }
    g->rules[r].defined = true;
    g->rules[r].site = start;
    g->cur = r;
    if (!parse_alternatives(g, r)) return false;
    skip_space(g);
    if (!at_end(g) && !at_rule_head(g)) return parse_rule(g); /* reports what is wrong */
    return true;
}

static bool parse_grammar(gp *g) {
    skip_space(g);
    if (at_end(g)) {
        gp_fail(g, g->pos, "the grammar is empty (expected a rule such as: root ::= \"yes\")");
        return false;
    }
    while (!at_end(g))
        if (!parse_rule(g)) return false;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Whole-grammar checks                                                     */
/* ------------------------------------------------------------------------ */

/* The earliest use of an undefined rule, reported. */
static bool check_defined(gp *g) {
    uint32_t worst = GRAM_NIL;
    for (uint32_t i = 0; i < g->n_rules; i++)
        if (g->rules[i].kind == GP_USER && !g->rules[i].defined &&
            (worst == GRAM_NIL || g->rules[i].site < g->rules[worst].site))
            worst = i;
    if (worst == GRAM_NIL) return true;
    gp_fail(g, g->rules[worst].site, "undefined rule '%.*s'", (int)g->rules[worst].name_len,
            g->rules[worst].name);
    return false;
}

/* Min-heap of (length, rule) for Knuth's algorithm. */
typedef struct heap_entry {
    uint32_t len, rule;
} heap_entry;

static void heap_push(heap_entry *h, uint32_t *n, heap_entry e) {
    uint32_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2].len > e.len) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static heap_entry heap_pop(heap_entry *h, uint32_t *n) {
    heap_entry top = h[0], last = h[--*n];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].len < h[c].len) c++;
        if (h[c].len >= last.len) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static uint32_t sat_add(uint32_t a, uint32_t b) {
    return a + b >= GRAM_INF ? GRAM_INF : a + b;
}

/* Bookkeeping for the fewest-bytes computation: every alternative gets a
 * global id; occ lists, per rule, the alternatives that reference it (once
 * per reference). */
typedef struct minlen_work {
    uint32_t n_alts;
    uint32_t *alt_rule, *pending, *sum;
    uint32_t *occ_first, *occ;
    heap_entry *heap;
} minlen_work;

static void minlen_free(minlen_work *w) {
    free(w->alt_rule);
    free(w->pending);
    free(w->sum);
    free(w->occ_first);
    free(w->occ);
    free(w->heap);
}

/* Numbers the alternatives and fills the reference lists. */
static bool minlen_prepare(gp *g, minlen_work *w) {
    uint32_t n_alts = 0, n_refs = 0;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        n_alts += g->rules[r].n_alts;
        for (uint32_t a = 0; a < g->rules[r].n_alts; a++)
            for (uint32_t i = 0; i < g->rules[r].alts[a].n; i++)
                n_refs += g->rules[r].alts[a].items[i].kind == GRAM_REF;
    }
    w->n_alts = n_alts;
    w->alt_rule = malloc((n_alts + 1) * sizeof(uint32_t));
    w->pending = calloc(n_alts + 1, sizeof(uint32_t));
    w->sum = calloc(n_alts + 1, sizeof(uint32_t));
    w->occ_first = calloc(g->n_rules + 2, sizeof(uint32_t));
    w->occ = malloc((n_refs + 1) * sizeof(uint32_t));
    w->heap = malloc((n_alts + 1) * sizeof(heap_entry));
    if (!w->alt_rule || !w->pending || !w->sum || !w->occ_first || !w->occ || !w->heap) {
        gp_nomem(g);
        return false;
    }
    for (uint32_t r = 0, id = 0; r < g->n_rules; r++)
        for (uint32_t a = 0; a < g->rules[r].n_alts; a++, id++)
            for (uint32_t i = 0; i < g->rules[r].alts[a].n; i++) {
                gp_item it = g->rules[r].alts[a].items[i];
                if (it.kind == GRAM_REF) w->occ_first[it.arg + 2]++;
            }
    for (uint32_t r = 0; r < g->n_rules; r++) w->occ_first[r + 2] += w->occ_first[r + 1];
    for (uint32_t r = 0, id = 0; r < g->n_rules; r++)
        for (uint32_t a = 0; a < g->rules[r].n_alts; a++, id++) {
            w->alt_rule[id] = r;
            for (uint32_t i = 0; i < g->rules[r].alts[a].n; i++) {
                gp_item it = g->rules[r].alts[a].items[i];
                if (it.kind == GRAM_REF) {
                    w->occ[w->occ_first[it.arg + 1]++] = id;
                    w->pending[id]++;
                } else {
                    w->sum[id] = sat_add(w->sum[id], g->classes[it.arg].min_bytes);
                }
            }
        }
    return true; /* occ_first[r] .. occ_first[r + 1] now delimit rule r's list */
}

/* Fewest bytes each rule can match (GRAM_INF: it can never finish), by
 * Knuth's generalisation of Dijkstra's algorithm: a rule's length is final
 * when it is the smallest pending, and an alternative's length is known once
 * every rule it references is final. */
static uint32_t *rule_min_lengths(gp *g) {
    minlen_work w = {0};
    uint32_t *len = malloc((g->n_rules + 1) * sizeof *len);
    if (!len || !minlen_prepare(g, &w)) {
        if (len) gp_nomem(g);
        free(len);
        minlen_free(&w);
        return NULL;
    }
    for (uint32_t r = 0; r < g->n_rules; r++) len[r] = GRAM_INF;
    uint32_t n_heap = 0;
    for (uint32_t id = 0; id < w.n_alts; id++)
        if (w.pending[id] == 0 && w.sum[id] < GRAM_INF)
            heap_push(w.heap, &n_heap, (heap_entry){w.sum[id], w.alt_rule[id]});
    while (n_heap > 0) {
        heap_entry e = heap_pop(w.heap, &n_heap);
        if (len[e.rule] != GRAM_INF) continue;
        len[e.rule] = e.len;
        for (uint32_t k = w.occ_first[e.rule]; k < w.occ_first[e.rule + 1]; k++) {
            uint32_t id = w.occ[k];
            w.sum[id] = sat_add(w.sum[id], e.len);
            if (--w.pending[id] == 0 && w.sum[id] < GRAM_INF)
                heap_push(w.heap, &n_heap, (heap_entry){w.sum[id], w.alt_rule[id]});
        }
    }
    minlen_free(&w);
    return len;
}

/* Calls visit(r, s) for every rule s that rule r can start with: references
 * preceded only by items that can match nothing. Returns the edge count. */
static uint32_t scan_left_edges(const gp *g, const uint32_t *len, uint32_t *first,
                                uint32_t *edges) {
    uint32_t n = 0;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        if (first) first[r] = n;
        for (uint32_t a = 0; a < g->rules[r].n_alts; a++) {
            const gp_alt *alt = &g->rules[r].alts[a];
            for (uint32_t i = 0; i < alt->n && alt->items[i].kind == GRAM_REF; i++) {
                if (edges) edges[n] = alt->items[i].arg;
                n++;
                if (len[alt->items[i].arg] != 0) break;
            }
        }
    }
    if (first) first[g->n_rules] = n;
    return n;
}

/* The left edges as CSR arrays: edges[first[r] .. first[r + 1]). */
static bool left_edges(gp *g, const uint32_t *len, uint32_t **first, uint32_t **edges) {
    uint32_t n = scan_left_edges(g, len, NULL, NULL);
    *first = malloc((size_t)(g->n_rules + 1) * sizeof **first);
    *edges = malloc((size_t)(n + 1) * sizeof **edges);
    if (!*first || !*edges) {
        gp_nomem(g);
        return false;
    }
    scan_left_edges(g, len, *first, *edges);
    return true;
}

/* The name of a rule for messages: its own, or that of the rule it is in. */
static void rule_display(const gp *g, uint32_t r, const char **name, int *len) {
    const gp_rule *u = &g->rules[g->rules[r].origin];
    *name = u->name;
    *len = (int)u->name_len;
}

/* Reports the cycle path[0..n) (path[n - 1] references path[0]). */
static void report_cycle(gp *g, const uint32_t *path, uint32_t n) {
    bool only_repeats = true;
    for (uint32_t i = 0; i < n; i++)
        if (g->rules[path[i]].kind == GP_USER) only_repeats = false;
    const char *name;
    int len;
    rule_display(g, path[0], &name, &len);
    if (only_repeats) {
        gp_fail(g, g->rules[path[0]].site,
                "in rule '%.*s': a repetition of something that can "
                "match the empty string would never end",
                len, name);
        return;
    }
    char chain[256] = "";
    size_t used = 0;
    uint32_t start = 0;
    while (g->rules[path[start]].kind != GP_USER) start++;
    for (uint32_t k = 0; k <= n && used < sizeof chain - 1; k++) {
        uint32_t r = path[(start + k) % n];
        if (g->rules[r].kind != GP_USER && k != n) continue;
        int w = snprintf(chain + used, sizeof chain - used, "%s%.*s", used ? " -> " : "",
                         (int)g->rules[r].name_len, g->rules[r].name);
        used += w > 0 ? (size_t)w : 0;
    }
    uint32_t head = path[start];
    gp_fail(g, g->rules[head].site,
            "rule '%.*s' is left-recursive (%s): it can reach itself without matching any text",
            (int)g->rules[head].name_len, g->rules[head].name, chain);
}

/* Depth-first search for a cycle of left edges; reports the first. */
static bool check_left_recursion(gp *g, const uint32_t *len) {
    uint32_t *first = NULL, *edges = NULL;
    if (!left_edges(g, len, &first, &edges)) {
        free(first);
        free(edges);
        return false;
    }
    uint8_t *color = calloc(g->n_rules, 1);
    uint32_t *stack = malloc((size_t)(g->n_rules + 1) * sizeof *stack);
    uint32_t *next = malloc((size_t)(g->n_rules + 1) * sizeof *next);
    bool ok = color && stack && next;
    if (!ok) gp_nomem(g);
    for (uint32_t s = 0; ok && s < g->n_rules; s++) {
        if (color[s]) continue;
        uint32_t depth = 0;
        stack[depth++] = s;
        next[s] = first[s];
        color[s] = 1;
        while (ok && depth > 0) {
            uint32_t r = stack[depth - 1];
            if (next[r] == first[r + 1]) {
                color[r] = 2;
                depth--;
                continue;
            }
            uint32_t t = edges[next[r]++];
            if (color[t] == 1) {
                uint32_t k = depth - 1;
                while (stack[k] != t) k--;
                report_cycle(g, stack + k, depth - k);
                ok = false;
            } else if (color[t] == 0) {
                color[t] = 1;
                next[t] = first[t];
                stack[depth++] = t;
            }
        }
    }
    free(first);
    free(edges);
    free(color);
    free(stack);
    free(next);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Layout                                                                   */
/* ------------------------------------------------------------------------ */

/* Fewest bytes of one item. */
static uint32_t item_length(const gp *g, gp_item it, const uint32_t *len) {
    return it.kind == GRAM_REF ? len[it.arg] : g->classes[it.arg].min_bytes;
}

/* Length of an alternative (GRAM_INF: it can never finish). */
static uint32_t alt_length(const gp *g, const gp_alt *alt, const uint32_t *len) {
    uint32_t s = 0;
    for (uint32_t i = 0; i < alt->n; i++) s = sat_add(s, item_length(g, alt->items[i], len));
    return s;
}

/* Writes one alternative at element e: its items, the end, and for each
 * position the fewest bytes that finish the alternative from there. */
static uint32_t lay_out_alt(const gp *g, const gp_alt *alt, const uint32_t *len, nu_gram_program *p,
                            uint32_t e) {
    for (uint32_t i = 0; i < alt->n; i++)
        p->elems[e + i] = (nu_gram_elem){alt->items[i].kind, alt->items[i].arg};
    p->elems[e + alt->n] = (nu_gram_elem){GRAM_END, 0};
    p->dist[e + alt->n] = 0;
    for (uint32_t i = alt->n; i-- > 0;)
        p->dist[e + i] = sat_add(p->dist[e + i + 1], item_length(g, alt->items[i], len));
    return e + alt->n + 1;
}

/* A program with room for the finishable alternatives. */
static nu_gram_program *program_alloc(gp *g, const uint32_t *len) {
    uint32_t n_elems = 0, n_alts = 0;
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t a = 0; a < g->rules[r].n_alts; a++)
            if (alt_length(g, &g->rules[r].alts[a], len) < GRAM_INF) {
                n_elems += g->rules[r].alts[a].n + 1;
                n_alts++;
            }
    nu_gram_program *p = calloc(1, sizeof *p);
    if (p) {
        p->elems = malloc((n_elems + 1) * sizeof *p->elems);
        p->dist = malloc((n_elems + 1) * sizeof *p->dist);
        p->alts = malloc((n_alts + 1) * sizeof *p->alts);
        p->rule_first = malloc((g->n_rules + 1) * sizeof *p->rule_first);
    }
    if (!p || !p->elems || !p->dist || !p->alts || !p->rule_first) {
        nu_gram_program_free(p);
        gp_nomem(g);
        return NULL;
    }
    return p;
}

/* Lays the finishable alternatives out flat and moves the class tables. */
static nu_gram_program *build_program(gp *g, const uint32_t *len, uint32_t root) {
    nu_gram_program *p = program_alloc(g, len);
    if (!p) return NULL;
    uint32_t e = 0, k = 0;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        p->rule_first[r] = k;
        for (uint32_t a = 0; a < g->rules[r].n_alts; a++) {
            const gp_alt *alt = &g->rules[r].alts[a];
            if (alt_length(g, alt, len) >= GRAM_INF) continue;
            p->alts[k++] = e;
            e = lay_out_alt(g, alt, len, p, e);
        }
    }
    p->rule_first[g->n_rules] = k;
    p->n_elems = e;
    p->n_rules = g->n_rules;
    p->root = root;
    p->classes = g->classes;
    p->n_classes = g->n_classes;
    p->ranges = g->ranges;
    p->n_ranges = g->n_ranges;
    g->classes = NULL;
    g->ranges = NULL;
    return p;
}

static void gp_free(gp *g) {
    for (uint32_t r = 0; r < g->n_rules; r++) {
        for (uint32_t a = 0; a < g->rules[r].n_alts; a++) free(g->rules[r].alts[a].items);
        free(g->rules[r].alts);
    }
    free(g->rules);
    free(g->name_slots);
    free(g->ranges);
    free(g->classes);
    free(g->class_slots);
    free(g->tmp);
}

/* Checks the parsed grammar and lays it out. */
static nu_gram_program *finish(gp *g, const char *root) {
    if (!check_defined(g)) return NULL;
    uint32_t r = find_rule(g, root, strlen(root));
    if (r == GRAM_NIL) {
        g->st =
            nu_fail(g->err, NU_ERR_FORMAT, "the grammar has no rule '%s' (the start rule)", root);
        return NULL;
    }
    uint32_t *len = rule_min_lengths(g);
    if (!len) return NULL;
    nu_gram_program *p = NULL;
    if (check_left_recursion(g, len)) {
        if (len[r] >= GRAM_INF)
            gp_fail(g, g->rules[r].site,
                    "rule '%s' cannot match any text: every alternative "
                    "recurses forever or uses an empty character class",
                    root);
        else
            p = build_program(g, len, r);
    }
    free(len);
    return p;
}

nu_status nu_gram_compile(const char *gbnf, size_t len, const char *root, nu_gram_program **out,
                          nu_error *err) {
    *out = NULL;
    gp g = {.src = gbnf, .len = len, .err = err};
    if (!root) root = "root";
    nu_gram_program *p = NULL;
    /* ranges and tmp are never NULL, so offsets into them are always defined */
    if (grow(&g, (void **)&g.ranges, &g.cap_ranges, 8, sizeof *g.ranges) &&
        grow(&g, (void **)&g.tmp, &g.cap_tmp, 8, sizeof *g.tmp) && parse_grammar(&g))
        p = finish(&g, root);
    nu_status st = g.st;
    gp_free(&g);
    if (st != NU_OK) {
        nu_gram_program_free(p);
        return st;
    }
    *out = p;
    return NU_OK;
}

void nu_gram_program_free(nu_gram_program *p) {
    if (!p) return;
    free(p->elems);
    free(p->dist);
    free(p->alts);
    free(p->rule_first);
    free(p->classes);
    free(p->ranges);
    free(p);
}

/* Binary search for the first range ending at or after lo. */
bool nu_gram_class_meets(const nu_gram_program *p, const nu_gram_class *c, uint32_t lo,
                         uint32_t hi) {
    if (lo > hi) return false;
    const nu_gram_range *r = p->ranges + c->first;
    uint32_t a = 0, b = c->count;
    while (a < b) {
        uint32_t mid = (a + b) / 2;
        if (r[mid].hi < lo)
            a = mid + 1;
        else
            b = mid;
    }
    return a < c->count && r[a].lo <= hi;
}
