/* regex.c - regular expressions to GBNF.
 *
 * The syntax is ECMAScript's (what JSON Schema "pattern" means): literals,
 * escapes (\n \r \t \f \v \0 \xHH \uHHHH \u{H..} \cX and escaped
 * punctuation), classes [a-z] [^...] with \d \w \s \D \W \S inside or out,
 * '.' (anything but a line break), alternation, groups ( ), (?: ) and
 * (?<name> ), quantifiers * + ? {m} {m,} {m,n} (lazy forms too: they match
 * the same texts), and the anchors ^ and $ at the start and end of the
 * pattern or of its top-level alternatives. Backreferences, lookaround, word
 * boundaries and Unicode property escapes are errors.
 *
 * The regex is parsed to a tree and written out as GBNF: classes become
 * [...] (or, inside a JSON string, the raw characters JSON allows plus the
 * escape sequences for the others), repetition stays {m,n}. A repetition of
 * something that can match the empty string would be left-recursive in
 * GBNF, so x{m,n} with x nullable is rewritten as x'{0,n}, x' being the
 * non-empty texts of x (computed on the tree). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar.h"

#define RX_MAX_DEPTH 256
#define RX_MAX_NODES 100000u
#define RX_NONE UINT32_MAX

typedef enum rx_kind { RX_EMPTY, RX_CLASS, RX_CONCAT, RX_ALT, RX_REPEAT } rx_kind;

typedef struct rx_node {
    rx_kind kind;
    uint32_t min, max;     /* RX_REPEAT; max GRAM_INF: unbounded */
    uint32_t first, count; /* RX_CLASS: ranges[first .. first + count) */
    uint32_t *kids;        /* RX_CONCAT, RX_ALT; RX_REPEAT: kids[0] */
    uint32_t n_kids, cap_kids;
} rx_node;

typedef struct rx {
    const char *src;
    size_t len, pos;
    rx_node *nodes;
    uint32_t n_nodes, cap_nodes;
    nu_gram_range *ranges;
    uint32_t n_ranges, cap_ranges;
    int depth;
    nu_gram_regex_mode mode;
    nu_error *err;
    nu_status st;
} rx;

/* ------------------------------------------------------------------------ */
/* Errors, memory, nodes                                                    */
/* ------------------------------------------------------------------------ */

/* Records the first error, at a character position of the pattern. */
__attribute__((format(printf, 3, 4))) static void rx_fail(rx *r, size_t at, const char *fmt, ...) {
    if (r->st != NU_OK) return;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t col = 1;
    for (size_t i = 0; i < at && i < r->len; i++) col += ((unsigned char)r->src[i] & 0xC0) != 0x80;
    r->st = nu_fail(r->err, NU_ERR_FORMAT, "regex /%.60s%s/ at character %zu: %s", r->src,
                    r->len > 60 ? "..." : "", col, msg);
    nu_gram_one_line(r->err);
}

static void rx_nomem(rx *r) {
    if (r->st == NU_OK) r->st = nu_fail(r->err, NU_ERR_NOMEM, "out of memory parsing a regex");
}

static bool rx_grow(rx *r, void **p, uint32_t *cap, uint32_t n, size_t sz) {
    if (n <= *cap) return true;
    uint32_t c = *cap ? *cap : 8;
    while (c < n) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) {
        rx_nomem(r);
        return false;
    }
    *p = q;
    *cap = c;
    return true;
}

static uint32_t rx_node_new(rx *r, rx_kind kind) {
    if (r->st) return RX_NONE;
    if (r->n_nodes >= RX_MAX_NODES) {
        rx_fail(r, r->pos, "the regex is too large");
        return RX_NONE;
    }
    if (!rx_grow(r, (void **)&r->nodes, &r->cap_nodes, r->n_nodes + 1, sizeof *r->nodes))
        return RX_NONE;
    rx_node *n = &r->nodes[r->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    return r->n_nodes++;
}

static bool rx_add_kid(rx *r, uint32_t parent, uint32_t kid) {
    if (kid == RX_NONE || r->st) return false;
    rx_node *n = &r->nodes[parent];
    if (!rx_grow(r, (void **)&n->kids, &n->cap_kids, n->n_kids + 1, sizeof *n->kids)) return false;
    n->kids[n->n_kids++] = kid;
    return true;
}

static void rx_free(rx *r) {
    for (uint32_t i = 0; i < r->n_nodes; i++) free(r->nodes[i].kids);
    free(r->nodes);
    free(r->ranges);
}

/* ------------------------------------------------------------------------ */
/* Classes                                                                  */
/* ------------------------------------------------------------------------ */

/* A growable list of ranges being collected for one class. */
typedef struct rx_set {
    nu_gram_range *r;
    uint32_t n, cap;
} rx_set;

static bool set_add(rx *r, rx_set *s, uint32_t lo, uint32_t hi) {
    if (!rx_grow(r, (void **)&s->r, &s->cap, s->n + 1, sizeof *s->r)) return false;
    s->r[s->n++] = (nu_gram_range){lo, hi};
    return true;
}

static int cmp_range(const void *a, const void *b) {
    const nu_gram_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges; complements within [0, GRAM_MAX_CP] if negate. */
static bool set_normalise(rx *r, rx_set *s, bool negate) {
    if (s->n) qsort(s->r, s->n, sizeof *s->r, cmp_range);
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (n > 0 && s->r[i].lo <= s->r[n - 1].hi + 1) {
            if (s->r[i].hi > s->r[n - 1].hi) s->r[n - 1].hi = s->r[i].hi;
        } else {
            s->r[n++] = s->r[i];
        }
    }
    s->n = n;
    if (!negate) return true;
    rx_set c = {0};
    uint32_t next = 0;
    bool ok = true;
    for (uint32_t i = 0; ok && i < n; i++) {
        if (s->r[i].lo > next) ok = set_add(r, &c, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (ok && next <= GRAM_MAX_CP) ok = set_add(r, &c, next, GRAM_MAX_CP);
    free(s->r);
    *s = c;
    return ok;
}

/* A class node holding the set (which it consumes). */
static uint32_t class_node(rx *r, rx_set *s) {
    uint32_t id = rx_node_new(r, RX_CLASS);
    if (id == RX_NONE ||
        !rx_grow(r, (void **)&r->ranges, &r->cap_ranges, r->n_ranges + s->n, sizeof *r->ranges)) {
        free(s->r);
        return RX_NONE;
    }
    r->nodes[id].first = r->n_ranges;
    r->nodes[id].count = s->n;
    if (s->n) memcpy(r->ranges + r->n_ranges, s->r, (size_t)s->n * sizeof *s->r);
    r->n_ranges += s->n;
    free(s->r);
    return id;
}

/* Adds the members of \d \w \s (or their complements) to s. */
static bool add_shorthand(rx *r, rx_set *s, char c) {
    static const nu_gram_range digit[] = {{'0', '9'}};
    static const nu_gram_range word[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const nu_gram_range space[] = {
        {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    const nu_gram_range *src = c == 'd' || c == 'D' ? digit : c == 'w' || c == 'W' ? word : space;
    uint32_t n = c == 'd' || c == 'D' ? 1 : c == 'w' || c == 'W' ? 4 : 10;
    rx_set t = {0};
    bool ok = true;
    for (uint32_t i = 0; ok && i < n; i++) ok = set_add(r, &t, src[i].lo, src[i].hi);
    if (ok && c >= 'A' && c <= 'Z') ok = set_normalise(r, &t, true);
    for (uint32_t i = 0; ok && i < t.n; i++) ok = set_add(r, s, t.r[i].lo, t.r[i].hi);
    free(t.r);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Lexical pieces                                                           */
/* ------------------------------------------------------------------------ */

static bool rx_end(const rx *r) {
    return r->pos >= r->len;
}

static char rx_peek(const rx *r) {
    return rx_end(r) ? 0 : r->src[r->pos];
}

/* One UTF-8 character of the pattern. */
static bool rx_utf8(rx *r, uint32_t *cp) {
    size_t k = nu_utf8_decode(r->src + r->pos, r->len - r->pos, cp);
    if (k == 0) {
        rx_fail(r, r->pos, "invalid UTF-8");
        return false;
    }
    r->pos += k;
    return true;
}

static int rx_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* n hex digits (n 0: \u{...}, one to six digits in braces). */
static bool rx_hex_digits(rx *r, size_t at, int n, uint32_t *cp) {
    bool braces = n == 0 && rx_peek(r) == '{';
    if (braces) r->pos++;
    uint32_t v = 0;
    int k = 0;
    for (; braces ? k < 7 : k < n; k++) {
        int d = rx_hex(rx_peek(r));
        if (d < 0) break;
        v = v * 16 + (uint32_t)d;
        r->pos++;
    }
    if ((braces && (k == 0 || rx_peek(r) != '}' || v > GRAM_MAX_CP)) || (!braces && k < n)) {
        rx_fail(r, at, "malformed hexadecimal escape");
        return false;
    }
    if (braces) r->pos++;
    *cp = v;
    return true;
}

/* Escapes of features the converter does not support, and unknown
 * letters: reports them. False when c is none of these (an escaped
 * punctuation character, standing for itself). */
static bool rx_escape_refused(rx *r, size_t at, char c) {
    if (c == 'b' || c == 'B')
        rx_fail(r, at, "word boundaries (\\%c) are not supported", c);
    else if (c == 'k')
        rx_fail(r, at, "backreferences (\\k<name>) are not supported");
    else if (c >= '1' && c <= '9')
        rx_fail(r, at, "backreferences (\\%c) are not supported", c);
    else if (c == 'p' || c == 'P')
        rx_fail(r, at, "Unicode property escapes (\\%c{...}) are not supported", c);
    else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             (unsigned char)c >= 0x80)
        rx_fail(r, at, "unknown escape \\%c", c);
    else
        return false;
    return true;
}

/* An escape outside or inside a class; the position is after the backslash.
 * Sets *shorthand to the letter of \d \w \s (and capitals) instead of *cp. */
static bool rx_escape(rx *r, bool in_class, uint32_t *cp, char *shorthand) {
    size_t at = r->pos - 1;
    *shorthand = 0;
    if (rx_end(r)) {
        rx_fail(r, at, "a backslash at the end of the pattern");
        return false;
    }
    char c = r->src[r->pos++];
    static const char simple[] = "nrtfv0", value[] = "\n\r\t\f\v";
    const char *k = c ? strchr(simple, c) : NULL;
    if (c && strchr("dDwWsS", c)) {
        *shorthand = c;
    } else if (k) {
        *cp = (uint32_t)(unsigned char)value[k - simple]; /* \0 picks the NUL at the end */
    } else if (c == 'x' || c == 'u') {
        return rx_hex_digits(r, at, c == 'x' ? 2 : rx_peek(r) == '{' ? 0 : 4, cp);
    } else if (c == 'c') {
        bool letter = (rx_peek(r) | 0x20) >= 'a' && (rx_peek(r) | 0x20) <= 'z';
        if (!letter)
            rx_fail(r, at, "\\c must be followed by a letter");
        else
            *cp = (uint32_t)(r->src[r->pos++] & 31);
        return letter;
    } else if (c == 'b' && in_class) {
        *cp = 8; /* backspace */
    } else if (rx_escape_refused(r, at, c)) {
        return false;
    } else {
        *cp = (uint32_t)(unsigned char)c;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Parser                                                                   */
/* ------------------------------------------------------------------------ */

static uint32_t parse_alt(rx *r, bool top);

/* One member of a class: a character or escape; shorthand as in rx_escape. */
static bool class_atom(rx *r, uint32_t *cp, char *shorthand) {
    *shorthand = 0;
    if (rx_peek(r) == '\\') {
        r->pos++;
        return rx_escape(r, true, cp, shorthand);
    }
    return rx_utf8(r, cp);
}

/* [...]; the position is after '['. */
static uint32_t parse_class(rx *r) {
    size_t open = r->pos - 1;
    bool negate = rx_peek(r) == '^';
    if (negate) r->pos++;
    rx_set s = {0};
    while (r->st == NU_OK && rx_peek(r) != ']') {
        if (rx_end(r)) {
            rx_fail(r, open, "unterminated character class");
            break;
        }
        size_t at = r->pos;
        uint32_t lo, hi;
        char sh, sh2 = 0;
        if (!class_atom(r, &lo, &sh)) break;
        if (sh) {
            add_shorthand(r, &s, sh);
            continue;
        }
        hi = lo;
        if (rx_peek(r) == '-' && r->pos + 1 < r->len && r->src[r->pos + 1] != ']') {
            r->pos++;
            if (!class_atom(r, &hi, &sh2)) break;
            if (sh2) {
                rx_fail(r, at, "a range cannot end in a class escape like \\%c", sh2);
                break;
            }
            if (hi < lo) {
                rx_fail(r, at, "character range out of order");
                break;
            }
        }
        set_add(r, &s, lo, hi);
    }
    if (r->st != NU_OK) {
        free(s.r);
        return RX_NONE;
    }
    r->pos++;
    if (!set_normalise(r, &s, negate)) {
        free(s.r);
        return RX_NONE;
    }
    return class_node(r, &s);
}

/* A class of one code point, or of a shorthand. */
static uint32_t single_class(rx *r, uint32_t cp, char shorthand) {
    rx_set s = {0};
    bool ok = shorthand ? add_shorthand(r, &s, shorthand) : set_add(r, &s, cp, cp);
    if (!ok || !set_normalise(r, &s, false)) {
        free(s.r);
        return RX_NONE;
    }
    return class_node(r, &s);
}

/* ( ... ) in its forms; the position is after '('. */
static uint32_t parse_group(rx *r) {
    size_t open = r->pos - 1;
    if (rx_peek(r) == '?') {
        const char *rest = r->src + r->pos + 1;
        size_t left = r->len - r->pos - 1;
        if (left >= 1 && rest[0] == ':') {
            r->pos += 2;
        } else if (left >= 2 && rest[0] == '<' && rest[1] != '=' && rest[1] != '!') {
            const char *close = memchr(rest, '>', left);
            if (!close) {
                rx_fail(r, open, "unterminated group name");
                return RX_NONE;
            }
            r->pos += 1 + (size_t)(close - rest) + 1;
        } else {
            rx_fail(r, open, "lookaround and other (?...) groups are not supported");
            return RX_NONE;
        }
    }
    if (++r->depth > RX_MAX_DEPTH) {
        rx_fail(r, open, "groups nested too deeply");
        return RX_NONE;
    }
    uint32_t inner = parse_alt(r, false);
    r->depth--;
    if (inner == RX_NONE) return RX_NONE;
    if (rx_peek(r) != ')') {
        rx_fail(r, open, "unterminated group (missing ')')");
        return RX_NONE;
    }
    r->pos++;
    return inner;
}

/* A quantifier {m}, {m,}, {m,n} at the position; false (position kept) if
 * the brace does not start one, which makes it a literal '{'. */
static bool parse_braces(rx *r, uint32_t *min, uint32_t *max) {
    size_t p = r->pos + 1;
    uint64_t a = 0, b;
    size_t digits = 0;
    for (; p < r->len && r->src[p] >= '0' && r->src[p] <= '9' && a <= GRAM_INF; p++, digits++)
        a = a * 10 + (uint64_t)(r->src[p] - '0');
    if (digits == 0) return false;
    b = a;
    if (p < r->len && r->src[p] == ',') {
        p++;
        b = GRAM_INF;
        if (p < r->len && r->src[p] >= '0' && r->src[p] <= '9')
            for (b = 0; p < r->len && r->src[p] >= '0' && r->src[p] <= '9' && b <= GRAM_INF; p++)
                b = b * 10 + (uint64_t)(r->src[p] - '0');
    }
    if (p >= r->len || r->src[p] != '}') return false;
    if (a > 100000 || (b != GRAM_INF && b > 100000)) {
        rx_fail(r, r->pos, "repetition counts above 100000 are not supported");
        return false;
    }
    if (b < a) {
        rx_fail(r, r->pos, "numbers out of order in {} quantifier");
        return false;
    }
    r->pos = p + 1;
    *min = (uint32_t)a;
    *max = (uint32_t)b;
    return true;
}

/* Wraps item in the quantifiers that follow it. */
static uint32_t parse_quantifiers(rx *r, uint32_t item) {
    for (;;) {
        char c = rx_peek(r);
        uint32_t min, max;
        size_t at = r->pos;
        if (c == '*')
            min = 0, max = GRAM_INF, r->pos++;
        else if (c == '+')
            min = 1, max = GRAM_INF, r->pos++;
        else if (c == '?')
            min = 0, max = 1, r->pos++;
        else if (c == '{' && parse_braces(r, &min, &max))
            (void)0;
        else
            return r->st ? RX_NONE : item;
        if (rx_peek(r) == '?') r->pos++; /* lazy: the same texts */
        if (rx_peek(r) == '*' || rx_peek(r) == '+' || rx_peek(r) == '?') {
            rx_fail(r, at, "nothing to repeat");
            return RX_NONE;
        }
        uint32_t rep = rx_node_new(r, RX_REPEAT);
        if (rep == RX_NONE) return RX_NONE;
        r->nodes[rep].min = min;
        r->nodes[rep].max = max;
        if (!rx_add_kid(r, rep, item)) return RX_NONE;
        item = rep;
    }
}

/* One atom: group, class, '.', escape or literal character. */
static uint32_t parse_atom(rx *r) {
    size_t at = r->pos;
    char c = rx_peek(r);
    uint32_t cp;
    char sh;
    switch (c) {
    case '(': r->pos++; return parse_group(r);
    case '[': r->pos++; return parse_class(r);
    case '.': {
        r->pos++;
        rx_set s = {0};
        if (!set_add(r, &s, '\n', '\n') || !set_add(r, &s, '\r', '\r') ||
            !set_add(r, &s, 0x2028, 0x2029) || !set_normalise(r, &s, true)) {
            free(s.r);
            return RX_NONE;
        }
        return class_node(r, &s);
    }
    case '\\':
        r->pos++;
        if (!rx_escape(r, false, &cp, &sh)) return RX_NONE;
        return single_class(r, cp, sh);
    case '*':
    case '+':
    case '?': rx_fail(r, at, "nothing to repeat"); return RX_NONE;
    case '^':
    case '$':
        rx_fail(r, at,
                "the anchor '%c' is only supported at the start (^) or end ($) of the pattern", c);
        return RX_NONE;
    default:
        if (!rx_utf8(r, &cp)) return RX_NONE;
        return single_class(r, cp, 0);
    }
}

/* Atoms until '|', ')' or the end. At the top level a leading ^ and a
 * trailing $ mark the branch anchored (kept in the concat's min / max). */
static uint32_t parse_seq(rx *r, bool top) {
    uint32_t seq = rx_node_new(r, RX_CONCAT);
    if (seq == RX_NONE) return RX_NONE;
    if (top && rx_peek(r) == '^') {
        r->pos++;
        r->nodes[seq].min = 1;
    }
    while (r->st == NU_OK && !rx_end(r) && rx_peek(r) != '|' && rx_peek(r) != ')') {
        if (top && rx_peek(r) == '$' && (r->pos + 1 == r->len || r->src[r->pos + 1] == '|')) {
            r->pos++;
            r->nodes[seq].max = 1;
            break;
        }
        uint32_t atom = parse_atom(r);
        if (atom == RX_NONE) return RX_NONE;
        if (!rx_add_kid(r, seq, parse_quantifiers(r, atom))) return RX_NONE;
    }
    return r->st ? RX_NONE : seq;
}

/* seq ('|' seq)* */
static uint32_t parse_alt(rx *r, bool top) {
    uint32_t alt = rx_node_new(r, RX_ALT);
    if (alt == RX_NONE) return RX_NONE;
    for (;;) {
        if (!rx_add_kid(r, alt, parse_seq(r, top))) return RX_NONE;
        if (rx_peek(r) != '|') break;
        r->pos++;
    }
    if (top && !rx_end(r)) {
        rx_fail(r, r->pos, "unmatched ')'");
        return RX_NONE;
    }
    return alt;
}

/* ------------------------------------------------------------------------ */
/* Nullable and non-empty                                                   */
/* ------------------------------------------------------------------------ */

static bool nullable(const rx *r, uint32_t id) {
    const rx_node *n = &r->nodes[id];
    switch (n->kind) {
    case RX_EMPTY: return true;
    case RX_CLASS: return false;
    case RX_REPEAT: return n->min == 0 || nullable(r, n->kids[0]);
    case RX_CONCAT:
        for (uint32_t i = 0; i < n->n_kids; i++)
            if (!nullable(r, n->kids[i])) return false;
        return true;
    case RX_ALT:
        for (uint32_t i = 0; i < n->n_kids; i++)
            if (nullable(r, n->kids[i])) return true;
        return false;
    }
    return false;
}

/* An empty class: matches nothing. */
static uint32_t nothing(rx *r) {
    return rx_node_new(r, RX_CLASS);
}

static uint32_t nonempty(rx *r, uint32_t id);

/* Non-empty texts of kids[from..] of a concat (a the first of them, rest
 * the others): a rest when a is never empty, else nonempty(a) rest |
 * nonempty(rest). */
static uint32_t nonempty_concat(rx *r, uint32_t id, uint32_t from) {
    uint32_t n_kids = r->nodes[id].n_kids;
    if (from == n_kids) return nothing(r);
    uint32_t head = r->nodes[id].kids[from];
    bool head_nullable = nullable(r, head);
    uint32_t first = rx_node_new(r, RX_CONCAT);
    if (first == RX_NONE || !rx_add_kid(r, first, head_nullable ? nonempty(r, head) : head))
        return RX_NONE;
    for (uint32_t i = from + 1; i < n_kids; i++)
        if (!rx_add_kid(r, first, r->nodes[id].kids[i])) return RX_NONE;
    if (!head_nullable) return first;
    uint32_t alt = rx_node_new(r, RX_ALT);
    if (alt == RX_NONE || !rx_add_kid(r, alt, first) ||
        !rx_add_kid(r, alt, nonempty_concat(r, id, from + 1)))
        return RX_NONE;
    return alt;
}

/* A node matching exactly the non-empty texts node id matches. */
static uint32_t nonempty(rx *r, uint32_t id) {
    if (r->st) return RX_NONE;
    rx_node n = r->nodes[id];
    switch (n.kind) {
    case RX_EMPTY: return nothing(r);
    case RX_CLASS: return id;
    case RX_CONCAT: return nonempty_concat(r, id, 0);
    case RX_ALT: {
        uint32_t alt = rx_node_new(r, RX_ALT);
        for (uint32_t i = 0; alt != RX_NONE && i < n.n_kids; i++)
            if (!rx_add_kid(r, alt, nonempty(r, r->nodes[id].kids[i]))) return RX_NONE;
        return alt;
    }
    case RX_REPEAT: {
        if (!nullable(r, id)) return id;
        if (n.max == 0) return nothing(r);
        uint32_t seq = rx_node_new(r, RX_CONCAT), rest = rx_node_new(r, RX_REPEAT);
        if (seq == RX_NONE || rest == RX_NONE) return RX_NONE;
        r->nodes[rest].min = 0;
        r->nodes[rest].max = n.max == GRAM_INF ? GRAM_INF : n.max - 1;
        if (!rx_add_kid(r, rest, n.kids[0]) || !rx_add_kid(r, seq, nonempty(r, n.kids[0])) ||
            !rx_add_kid(r, seq, rest))
            return RX_NONE;
        return seq;
    }
    }
    return RX_NONE;
}

/* ------------------------------------------------------------------------ */
/* Writing GBNF                                                             */
/* ------------------------------------------------------------------------ */

/* Writes ranges as the members of a GBNF class. */
static void emit_members(nu_buf *b, const nu_gram_range *rg, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        nu_gram_buf_class_char(b, rg[i].lo);
        if (rg[i].hi == rg[i].lo) continue;
        nu_buf_puts(b, "-");
        nu_gram_buf_class_char(b, rg[i].hi);
    }
}

/* A single character (never a surrogate: the caller checks) as a GBNF literal. */
static void emit_char(nu_buf *b, uint32_t cp) {
    char u[NU_UTF8_MAX];
    nu_gram_buf_literal(b, u, nu_utf8_encode(cp, u));
}

/* Writes ranges as a GBNF class (negated when the complement is shorter),
 * or a literal for a single character. */
static void emit_ranges(rx *r, nu_buf *b, const nu_gram_range *rg, uint32_t n) {
    if (n == 0) {
        nu_buf_puts(b, "[^\\x00-\\U0010FFFF]");
        return;
    }
    if (n == 1 && rg[0].lo == rg[0].hi && !(rg[0].lo >= 0xD800 && rg[0].lo <= 0xDFFF)) {
        emit_char(b, rg[0].lo);
        return;
    }
    rx_set c = {0};
    uint32_t next = 0;
    bool ok = true;
    for (uint32_t i = 0; ok && i < n; i++) {
        if (rg[i].lo > next) ok = set_add(r, &c, next, rg[i].lo - 1);
        next = rg[i].hi + 1;
    }
    if (ok && next <= GRAM_MAX_CP) ok = set_add(r, &c, next, GRAM_MAX_CP);
    bool neg = ok && c.n > 0 && c.n < n;
    nu_buf_puts(b, neg ? "[^" : "[");
    if (neg)
        emit_members(b, c.r, c.n);
    else
        emit_members(b, rg, n);
    nu_buf_puts(b, "]");
    free(c.r);
}

/* The escape JSON writes for a character that cannot appear raw. */
static void json_escape_literal(nu_buf *b, uint32_t cp) {
    char esc[8];
    switch (cp) {
    case '"': strcpy(esc, "\\\""); break;
    case '\\': strcpy(esc, "\\\\"); break;
    case '\n': strcpy(esc, "\\n"); break;
    case '\r': strcpy(esc, "\\r"); break;
    case '\t': strcpy(esc, "\\t"); break;
    case '\b': strcpy(esc, "\\b"); break;
    case '\f': strcpy(esc, "\\f"); break;
    default: snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp); break;
    }
    nu_gram_buf_literal(b, esc, strlen(esc));
}

/* A class inside a JSON string: the raw members JSON allows, and one
 * escape sequence for each member that must be escaped. */
static void emit_json_class(rx *r, nu_buf *b, const nu_gram_range *rg, uint32_t n) {
    rx_set raw = {0};
    nu_buf_puts(b, "(");
    bool any = false;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t cp = rg[i].lo; cp <= rg[i].hi && cp < 0x20; cp++) {
            nu_buf_puts(b, any ? " | " : "");
            json_escape_literal(b, cp);
            any = true;
        }
        uint32_t lo = rg[i].lo < 0x20 ? 0x20 : rg[i].lo;
        for (uint32_t cp = lo; cp <= rg[i].hi; cp++) {
            if (cp == '"' || cp == '\\') {
                nu_buf_puts(b, any ? " | " : "");
                json_escape_literal(b, cp);
                any = true;
            } else {
                uint32_t end = rg[i].hi;
                if (cp < '"' && end >= '"')
                    end = '"' - 1;
                else if (cp < '\\' && end >= '\\')
                    end = '\\' - 1;
                set_add(r, &raw, cp, end);
                cp = end;
            }
        }
    }
    if (raw.n || !any) {
        nu_buf_puts(b, any ? " | " : "");
        emit_ranges(r, b, raw.r, raw.n);
    }
    nu_buf_puts(b, ")");
    free(raw.r);
}

static void emit_node(rx *r, nu_buf *b, uint32_t id);

static void emit_class(rx *r, nu_buf *b, const rx_node *n) {
    if (r->mode == GRAM_REGEX_JSON_STRING)
        emit_json_class(r, b, r->ranges + n->first, n->count);
    else
        emit_ranges(r, b, r->ranges + n->first, n->count);
}

static void emit_repeat(rx *r, nu_buf *b, uint32_t id) {
    rx_node n = r->nodes[id];
    uint32_t kid = n.kids[0];
    if (n.max == 0) {
        nu_buf_puts(b, "\"\"");
        return;
    }
    if (nullable(r, kid)) {
        kid = nonempty(r, kid);
        n.min = 0;
        if (kid == RX_NONE) return;
    }
    nu_buf_puts(b, "(");
    emit_node(r, b, kid);
    nu_buf_puts(b, ")");
    if (n.min == 0 && n.max == GRAM_INF)
        nu_buf_puts(b, "*");
    else if (n.min == 1 && n.max == GRAM_INF)
        nu_buf_puts(b, "+");
    else if (n.min == 0 && n.max == 1)
        nu_buf_puts(b, "?");
    else if (n.max == GRAM_INF)
        nu_buf_printf(b, "{%u,}", n.min);
    else if (n.min == n.max)
        nu_buf_printf(b, "{%u}", n.min);
    else
        nu_buf_printf(b, "{%u,%u}", n.min, n.max);
}

/* Writes a node as a GBNF expression (parenthesised where it matters). */
static void emit_node(rx *r, nu_buf *b, uint32_t id) {
    if (r->st) return;
    const rx_node n = r->nodes[id];
    switch (n.kind) {
    case RX_EMPTY: nu_buf_puts(b, "\"\""); return;
    case RX_CLASS: emit_class(r, b, &r->nodes[id]); return;
    case RX_REPEAT: emit_repeat(r, b, id); return;
    case RX_CONCAT:
        if (n.n_kids == 0) nu_buf_puts(b, "\"\"");
        for (uint32_t i = 0; i < n.n_kids; i++) {
            nu_buf_puts(b, i ? " " : "");
            emit_node(r, b, r->nodes[id].kids[i]);
        }
        return;
    case RX_ALT:
        nu_buf_puts(b, "(");
        for (uint32_t i = 0; i < n.n_kids; i++) {
            nu_buf_puts(b, i ? " | " : "");
            emit_node(r, b, r->nodes[id].kids[i]);
        }
        nu_buf_puts(b, ")");
        return;
    }
}

/* The top level: alternatives, padded with "any characters" on the sides
 * that are not anchored when the regex searches a JSON string. */
static void emit_top(rx *r, nu_buf *b, const char *name, uint32_t top) {
    bool search = r->mode == GRAM_REGEX_JSON_STRING;
    nu_buf_printf(b, "%s ::= ", name);
    for (uint32_t i = 0; i < r->nodes[top].n_kids; i++) {
        uint32_t seq = r->nodes[top].kids[i];
        nu_buf_puts(b, i ? "\n    | " : "");
        if (search && !r->nodes[seq].min) nu_buf_printf(b, "%s-any ", name);
        nu_buf_puts(b, "(");
        emit_node(r, b, seq);
        nu_buf_puts(b, ")");
        if (search && !r->nodes[seq].max) nu_buf_printf(b, " %s-any", name);
    }
    nu_buf_puts(b, "\n");
    if (search)
        nu_buf_printf(b,
                      "%s-any ::= ([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
                      "([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))*\n",
                      name);
}

nu_status nu_gram_regex_rules(nu_buf *b, const char *name, const char *regex,
                              nu_gram_regex_mode mode, nu_error *err) {
    rx r = {.src = regex, .len = strlen(regex), .mode = mode, .err = err};
    /* ranges is never NULL, so offsets into it are always defined */
    uint32_t top = rx_grow(&r, (void **)&r.ranges, &r.cap_ranges, 8, sizeof *r.ranges)
                       ? parse_alt(&r, true)
                       : RX_NONE;
    if (top != RX_NONE && r.st == NU_OK) emit_top(&r, b, name, top);
    nu_status st = r.st;
    rx_free(&r);
    if (st == NU_OK && b->failed)
        st = nu_fail(err, NU_ERR_NOMEM, "out of memory writing a grammar");
    return st;
}
