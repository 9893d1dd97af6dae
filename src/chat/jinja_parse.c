/* jinja_parse.c - builds the syntax tree of a template.
 *
 * A recursive-descent parser over the whole token list, with Jinja2's
 * operator precedence (lowest first): `x if c else y`, or, and, not,
 * comparisons and `in` (chained), + -, ~, * / // %, **, unary - +, then
 * postfix `.attr`, `[i]`, `[a:b:c]`, calls, and `| filter` / `is test`,
 * which therefore bind tighter than any binary operator. Unknown filters,
 * tests and tags are errors here, as in Jinja2. Nesting is bounded so
 * that hostile input cannot exhaust the stack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jinja_internal.h"

#define MAX_PARSE_DEPTH 200

typedef struct parser {
    jtok *toks;
    size_t n, i;
    nu_jarena *arena;
    int depth;
    int loop_depth;
    uint32_t open_pos; /* the name of the innermost block tag being parsed */
    jnode *macro;      /* the macro whose body is being parsed */
    bool failed;
    uint32_t err_pos;
    char err[300];
} parser;

/* ------------------------------------------------------------------------ */
/* Token helpers                                                            */
/* ------------------------------------------------------------------------ */

static jtok *cur(parser *p) {
    return &p->toks[p->i];
}

static jtok *peek(parser *p, size_t k) {
    return &p->toks[p->i + k < p->n ? p->i + k : p->n - 1];
}

static void advance(parser *p) {
    if (p->i + 1 < p->n) p->i++;
}

static bool tok_is_op(const jtok *t, const char *op) {
    return t->type == JT_OP && t->len == strlen(op) && memcmp(t->text, op, t->len) == 0;
}

static bool tok_is_name(const jtok *t, const char *name) {
    return t->type == JT_NAME && t->len == strlen(name) && memcmp(t->text, name, t->len) == 0;
}

/* A short description of a token for error messages. */
static void describe(const jtok *t, char *buf, size_t cap) {
    switch (t->type) {
    case JT_EOF: snprintf(buf, cap, "end of template"); break;
    case JT_TEXT: snprintf(buf, cap, "template data"); break;
    case JT_VAR_BEGIN: snprintf(buf, cap, "'{{'"); break;
    case JT_VAR_END: snprintf(buf, cap, "end of print statement '}}'"); break;
    case JT_BLOCK_BEGIN: snprintf(buf, cap, "'{%%'"); break;
    case JT_BLOCK_END: snprintf(buf, cap, "end of statement block '%%}'"); break;
    case JT_STRING: snprintf(buf, cap, "string"); break;
    case JT_INT:
    case JT_FLOAT: snprintf(buf, cap, "number"); break;
    default: snprintf(buf, cap, "'%.*s'", (int)(t->len < 40 ? t->len : 40), t->text);
    }
}

/* Records the first error at byte offset pos; returns NULL for chaining. */
static void *perr(parser *p, uint32_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void *perr(parser *p, uint32_t pos, const char *fmt, ...) {
    if (p->failed) return NULL;
    p->failed = true;
    p->err_pos = pos;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    for (char *c = p->err; *c; c++) /* one line, whatever the source held */
        if ((unsigned char)*c < 0x20) *c = ' ';
    return NULL;
}

/* Error "expected X, got Y" at the current token. */
static void *expected(parser *p, const char *what) {
    char got[64];
    describe(cur(p), got, sizeof got);
    return perr(p, cur(p)->pos, "expected %s, got %s", what, got);
}

static bool expect_op(parser *p, const char *op) {
    if (p->failed) return false;
    if (!tok_is_op(cur(p), op)) {
        char what[16];
        snprintf(what, sizeof what, "'%s'", op);
        expected(p, what);
        return false;
    }
    advance(p);
    return true;
}

static bool expect_type(parser *p, jtok_type type, const char *what) {
    if (p->failed) return false;
    if (cur(p)->type != type) {
        expected(p, what);
        return false;
    }
    advance(p);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Nodes                                                                    */
/* ------------------------------------------------------------------------ */

static jnode *new_node(parser *p, jnode_kind kind, uint32_t pos) {
    jnode *n = nu_jarena_alloc(p->arena, sizeof *n);
    if (!n) return perr(p, pos, "out of memory");
    n->kind = (uint8_t)kind;
    n->pos = pos;
    return n;
}

/* Appends a child (the array doubles at powers of two). */
static void add_kid(parser *p, jnode *n, jnode *kid) {
    if (!n || p->failed) return;
    uint32_t k = n->n_kids;
    if (k == 0 || (k & (k - 1)) == 0) {
        jnode **kids = nu_jarena_alloc(p->arena, (k ? 2 * k : 1) * sizeof *kids);
        if (!kids) {
            perr(p, n->pos, "out of memory");
            return;
        }
        if (k) memcpy(kids, n->kids, k * sizeof *kids);
        n->kids = kids;
    }
    n->kids[n->n_kids++] = kid;
}

static const char *copy_name(parser *p, const jtok *t) {
    char *s = nu_jarena_alloc(p->arena, t->len + 1);
    if (!s) return perr(p, t->pos, "out of memory");
    memcpy(s, t->text, t->len);
    s[t->len] = 0;
    return s;
}

static jnode *const_node(parser *p, uint32_t pos, nu_jv v) {
    jnode *n = new_node(p, JN_CONST, pos);
    if (n) n->value = v;
    return n;
}

static jnode *binary(parser *p, jnode_kind kind, jop op, uint32_t pos, jnode *a, jnode *b) {
    if (!a || !b) return NULL;
    jnode *n = new_node(p, kind, pos);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    add_kid(p, n, a);
    add_kid(p, n, b);
    return n;
}

/* ------------------------------------------------------------------------ */
/* Expressions                                                              */
/* ------------------------------------------------------------------------ */

static jnode *parse_expr(parser *p);
static jnode *parse_or(parser *p);
static jnode *parse_unary(parser *p, bool with_filter);
static jnode *parse_primary(parser *p);
static jnode *parse_postfix(parser *p, jnode *n);
static jnode *parse_filter_expr(parser *p, jnode *n);

/* Enters one level of nesting; false (with an error) past the limit. */
static bool enter(parser *p) {
    if (++p->depth > MAX_PARSE_DEPTH) {
        perr(p, cur(p)->pos, "expression nested too deeply");
        return false;
    }
    return true;
}

/* Arguments inside ( ... ) after the opening parenthesis: positional
 * expressions, then name=value keywords, added to n as kids. */
static void parse_call_args(parser *p, jnode *n) {
    uint32_t first = n->n_kids;
    bool keywords = false;
    while (!p->failed && !tok_is_op(cur(p), ")")) {
        if (n->n_kids > first && !expect_op(p, ",")) return;
        if (tok_is_op(cur(p), ")")) break;
        if (tok_is_op(cur(p), "*") || tok_is_op(cur(p), "**")) {
            perr(p, cur(p)->pos, "*args and **kwargs in calls are not supported");
            return;
        }
        if (cur(p)->type == JT_NAME && tok_is_op(peek(p, 1), "=")) {
            jnode *kw = new_node(p, JN_KWARG, cur(p)->pos);
            if (!kw) return;
            kw->name = copy_name(p, cur(p));
            advance(p);
            advance(p);
            add_kid(p, kw, parse_expr(p));
            add_kid(p, n, kw);
            keywords = true;
        } else if (keywords) {
            perr(p, cur(p)->pos, "positional argument after keyword argument");
            return;
        } else {
            add_kid(p, n, parse_expr(p));
        }
    }
    expect_op(p, ")");
}

/* `[` subscript `]` after obj: an index or a slice. */
static jnode *parse_subscript(parser *p, jnode *obj) {
    uint32_t pos = cur(p)->pos;
    advance(p);
    jnode *parts[3] = {NULL, NULL, NULL};
    int n_colons = 0;
    if (!tok_is_op(cur(p), ":")) parts[0] = parse_expr(p);
    while (!p->failed && tok_is_op(cur(p), ":") && n_colons < 2) {
        advance(p);
        n_colons++;
        if (!tok_is_op(cur(p), ":") && !tok_is_op(cur(p), "]")) parts[n_colons] = parse_expr(p);
    }
    if (!expect_op(p, "]")) return NULL;
    jnode *n = new_node(p, n_colons ? JN_SLICE : JN_GETITEM, pos);
    if (!n) return NULL;
    add_kid(p, n, obj);
    add_kid(p, n, parts[0]);
    if (n_colons) {
        add_kid(p, n, parts[1]);
        add_kid(p, n, parts[2]);
    }
    return n;
}

static jnode *parse_postfix(parser *p, jnode *n) {
    while (n && !p->failed) {
        jtok *t = cur(p);
        if (tok_is_op(t, ".")) {
            advance(p);
            jtok *a = cur(p);
            if (a->type == JT_NAME) {
                jnode *g = new_node(p, JN_GETATTR, a->pos);
                if (!g) return NULL;
                g->name = copy_name(p, a);
                add_kid(p, g, n);
                n = g;
            } else if (a->type == JT_INT) {
                jnode *g = new_node(p, JN_GETITEM, a->pos);
                if (!g) return NULL;
                add_kid(p, g, n);
                add_kid(p, g, const_node(p, a->pos, nu_jv_int(a->ival)));
                n = g;
            } else {
                return expected(p, "attribute name");
            }
            advance(p);
        } else if (tok_is_op(t, "[")) {
            n = parse_subscript(p, n);
        } else if (tok_is_op(t, "(")) {
            jnode *c = new_node(p, JN_CALL, n->pos);
            if (!c) return NULL;
            advance(p);
            add_kid(p, c, n);
            parse_call_args(p, c);
            n = c;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

/* `| name(args)`: a filter applied to n (NULL: a block's body). */
static jnode *parse_filter(parser *p, jnode *n) {
    jtok *t = cur(p);
    if (t->type != JT_NAME) return expected(p, "filter name");
    jnode *f = new_node(p, JN_FILTER, t->pos);
    if (!f) return NULL;
    f->name = copy_name(p, t);
    f->filter = f->name ? nu_jinja_find_filter(f->name) : NULL;
    if (!f->filter) return perr(p, t->pos, "no filter named '%s'", f->name ? f->name : "");
    advance(p);
    add_kid(p, f, n);
    if (tok_is_op(cur(p), "(")) {
        advance(p);
        parse_call_args(p, f);
    }
    return p->failed ? NULL : f;
}

/* Whether the current token can start the single argument of a test
 * written without parentheses (`is divisibleby 3`). */
static bool starts_test_arg(parser *p) {
    jtok *t = cur(p);
    if (t->type == JT_NAME)
        return !tok_is_name(t, "else") && !tok_is_name(t, "or") && !tok_is_name(t, "and") &&
               !tok_is_name(t, "if") && !tok_is_name(t, "is") && !tok_is_name(t, "in") &&
               !tok_is_name(t, "recursive") && !tok_is_name(t, "not");
    return t->type == JT_STRING || t->type == JT_INT || t->type == JT_FLOAT || tok_is_op(t, "(") ||
           tok_is_op(t, "[") || tok_is_op(t, "{");
}

/* `is [not] name [args]` after n. */
static jnode *parse_test(parser *p, jnode *n) {
    advance(p); /* is */
    bool negated = false;
    if (tok_is_name(cur(p), "not")) {
        negated = true;
        advance(p);
    }
    jtok *t = cur(p);
    if (t->type != JT_NAME) return expected(p, "test name");
    jnode *x = new_node(p, JN_TEST, t->pos);
    if (!x) return NULL;
    x->name = copy_name(p, t);
    x->test = x->name ? nu_jinja_find_test(x->name) : NULL;
    if (!x->test) return perr(p, t->pos, "no test named '%s'", x->name ? x->name : "");
    if (negated) x->flags |= JNF_NEGATED;
    advance(p);
    add_kid(p, x, n);
    if (tok_is_op(cur(p), "(")) {
        advance(p);
        parse_call_args(p, x);
    } else if (starts_test_arg(p)) {
        add_kid(p, x, parse_postfix(p, parse_primary(p)));
    }
    return p->failed ? NULL : x;
}

static jnode *parse_filter_expr(parser *p, jnode *n) {
    while (n && !p->failed) {
        if (tok_is_op(cur(p), "|")) {
            advance(p);
            n = parse_filter(p, n);
        } else if (tok_is_name(cur(p), "is")) {
            n = parse_test(p, n);
        } else if (tok_is_op(cur(p), "(")) {
            jnode *c = new_node(p, JN_CALL, n->pos);
            if (!c) return NULL;
            advance(p);
            add_kid(p, c, n);
            parse_call_args(p, c);
            n = c;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

/* ( ... ): a parenthesised expression or a tuple. */
static jnode *parse_paren(parser *p) {
    uint32_t pos = cur(p)->pos;
    advance(p);
    if (tok_is_op(cur(p), ")")) {
        advance(p);
        return new_node(p, JN_TUPLE, pos);
    }
    jnode *first = parse_expr(p);
    if (!tok_is_op(cur(p), ",")) return expect_op(p, ")") ? first : NULL;
    jnode *t = new_node(p, JN_TUPLE, pos);
    add_kid(p, t, first);
    while (!p->failed && tok_is_op(cur(p), ",")) {
        advance(p);
        if (tok_is_op(cur(p), ")")) break;
        add_kid(p, t, parse_expr(p));
    }
    return expect_op(p, ")") ? t : NULL;
}

/* [a, b] and {k: v} literals. */
static jnode *parse_list_or_dict(parser *p, bool dict) {
    jnode *n = new_node(p, dict ? JN_DICT : JN_LIST, cur(p)->pos);
    const char *close = dict ? "}" : "]";
    advance(p);
    while (n && !p->failed && !tok_is_op(cur(p), close)) {
        if (n->n_kids > 0 && !expect_op(p, ",")) return NULL;
        if (tok_is_op(cur(p), close)) break;
        add_kid(p, n, parse_expr(p));
        if (dict) {
            if (!expect_op(p, ":")) return NULL;
            add_kid(p, n, parse_expr(p));
        }
    }
    return expect_op(p, close) ? n : NULL;
}

/* One or more adjacent string literals, joined. */
static jnode *parse_strings(parser *p) {
    uint32_t pos = cur(p)->pos;
    size_t total = 0, count = 0;
    while (peek(p, count)->type == JT_STRING) total += peek(p, count++)->str_len;
    char *s = nu_jarena_alloc(p->arena, total + 1);
    if (!s) return perr(p, pos, "out of memory");
    size_t at = 0;
    for (size_t k = 0; k < count; k++) {
        memcpy(s + at, cur(p)->str, cur(p)->str_len);
        at += cur(p)->str_len;
        advance(p);
    }
    nu_jstr *str = nu_jstr_immortal(p->arena, s, total);
    if (!str) return perr(p, pos, "out of memory");
    return const_node(p, pos, nu_jv_obj(JV_STR, str));
}

/* A name: a constant (true, none, ...) or a variable reference. */
static jnode *parse_name(parser *p) {
    jtok *t = cur(p);
    static const char *const consts[] = {"true", "false", "none", "True", "False", "None"};
    for (int k = 0; k < 6; k++) {
        if (!tok_is_name(t, consts[k])) continue;
        advance(p);
        nu_jv v = k % 3 == 2 ? nu_jv_none() : nu_jv_bool(k % 3 == 0);
        return const_node(p, t->pos, v);
    }
    jnode *n = new_node(p, JN_NAME, t->pos);
    if (!n) return NULL;
    n->name = copy_name(p, t);
    if (p->macro && n->name) {
        if (!strcmp(n->name, "caller")) p->macro->flags |= JNF_USES_CALLER;
        if (!strcmp(n->name, "varargs")) p->macro->flags |= JNF_USES_VARARGS;
        if (!strcmp(n->name, "kwargs")) p->macro->flags |= JNF_USES_KWARGS;
    }
    advance(p);
    return n;
}

static jnode *parse_primary(parser *p) {
    if (p->failed) return NULL;
    jtok *t = cur(p);
    switch (t->type) {
    case JT_NAME: return parse_name(p);
    case JT_STRING: return parse_strings(p);
    case JT_INT: advance(p); return const_node(p, t->pos, nu_jv_int(t->ival));
    case JT_FLOAT: advance(p); return const_node(p, t->pos, nu_jv_float(t->fval));
    default: break;
    }
    if (tok_is_op(t, "(")) return parse_paren(p);
    if (tok_is_op(t, "[")) return parse_list_or_dict(p, false);
    if (tok_is_op(t, "{")) return parse_list_or_dict(p, true);
    return expected(p, "an expression");
}

static jnode *parse_unary(parser *p, bool with_filter) {
    if (!enter(p)) return NULL;
    jtok *t = cur(p);
    jnode *n;
    if (tok_is_op(t, "-") || tok_is_op(t, "+")) {
        advance(p);
        n = new_node(p, JN_UNARY, t->pos);
        if (n) {
            n->op = tok_is_op(t, "-") ? JOP_NEG : JOP_POS;
            add_kid(p, n, parse_unary(p, false));
        }
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, p->failed ? NULL : n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return p->failed ? NULL : n;
}

static jnode *parse_pow(parser *p) {
    jnode *n = parse_unary(p, true);
    while (n && tok_is_op(cur(p), "**")) {
        uint32_t pos = cur(p)->pos;
        advance(p);
        n = binary(p, JN_BINARY, JOP_POW, pos, n, parse_unary(p, true));
    }
    return n;
}

static jnode *parse_math2(parser *p) {
    static const char *const ops[] = {"*", "/", "//", "%"};
    static const jop codes[] = {JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD};
    jnode *n = parse_pow(p);
    for (int k = 0; n && k < 4; k++) {
        if (!tok_is_op(cur(p), ops[k])) continue;
        uint32_t pos = cur(p)->pos;
        advance(p);
        n = binary(p, JN_BINARY, codes[k], pos, n, parse_pow(p));
        k = -1;
    }
    return n;
}

static jnode *parse_concat(parser *p) {
    jnode *n = parse_math2(p);
    while (n && tok_is_op(cur(p), "~")) {
        uint32_t pos = cur(p)->pos;
        advance(p);
        n = binary(p, JN_BINARY, JOP_CONCAT, pos, n, parse_math2(p));
    }
    return n;
}

static jnode *parse_math1(parser *p) {
    jnode *n = parse_concat(p);
    while (n && (tok_is_op(cur(p), "+") || tok_is_op(cur(p), "-"))) {
        jop op = tok_is_op(cur(p), "+") ? JOP_ADD : JOP_SUB;
        uint32_t pos = cur(p)->pos;
        advance(p);
        n = binary(p, JN_BINARY, op, pos, n, parse_concat(p));
    }
    return n;
}

/* The comparison operator at the current token (advancing past it), or -1. */
static int compare_op(parser *p) {
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    static const jop codes[] = {JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE};
    for (int k = 0; k < 6; k++) {
        if (tok_is_op(cur(p), ops[k])) {
            advance(p);
            return codes[k];
        }
    }
    if (tok_is_name(cur(p), "in")) {
        advance(p);
        return JOP_IN;
    }
    if (tok_is_name(cur(p), "not") && tok_is_name(peek(p, 1), "in")) {
        advance(p);
        advance(p);
        return JOP_NOTIN;
    }
    return -1;
}

/* a < b < c becomes (a < b) and (b < c), as Python chains comparisons. */
static jnode *parse_compare(parser *p) {
    jnode *left = parse_math1(p);
    jnode *result = NULL;
    while (left && !p->failed) {
        uint32_t pos = cur(p)->pos;
        int op = compare_op(p);
        if (op < 0) break;
        jnode *right = parse_math1(p);
        jnode *cmp = binary(p, JN_BINARY, (jop)op, pos, left, right);
        result = result ? binary(p, JN_AND, 0, pos, result, cmp) : cmp;
        left = right;
    }
    return p->failed ? NULL : result ? result : left;
}

static jnode *parse_not(parser *p) {
    if (tok_is_name(cur(p), "not")) {
        if (!enter(p)) return NULL;
        jnode *n = new_node(p, JN_UNARY, cur(p)->pos);
        advance(p);
        if (n) {
            n->op = JOP_NOT;
            add_kid(p, n, parse_not(p));
        }
        p->depth--;
        return p->failed ? NULL : n;
    }
    return parse_compare(p);
}

static jnode *parse_and(parser *p) {
    jnode *n = parse_not(p);
    while (n && tok_is_name(cur(p), "and")) {
        uint32_t pos = cur(p)->pos;
        advance(p);
        n = binary(p, JN_AND, 0, pos, n, parse_not(p));
    }
    return n;
}

static jnode *parse_or(parser *p) {
    jnode *n = parse_and(p);
    while (n && tok_is_name(cur(p), "or")) {
        uint32_t pos = cur(p)->pos;
        advance(p);
        n = binary(p, JN_OR, 0, pos, n, parse_and(p));
    }
    return n;
}

/* A full expression: `a if cond else b` at the lowest precedence. */
static jnode *parse_expr(parser *p) {
    if (!enter(p)) return NULL;
    jnode *n = parse_or(p);
    while (n && tok_is_name(cur(p), "if")) {
        jnode *c = new_node(p, JN_COND, cur(p)->pos);
        advance(p);
        add_kid(p, c, n);
        add_kid(p, c, parse_or(p));
        if (tok_is_name(cur(p), "else")) {
            advance(p);
            add_kid(p, c, parse_expr(p));
        } else {
            add_kid(p, c, NULL);
        }
        n = p->failed ? NULL : c;
    }
    p->depth--;
    return n;
}

/* Expressions separated by commas (a tuple when there is a comma), as in
 * `{{ a, b }}` and `{% set x = 1, 2 %}`; with_cond false for `for` and
 * `if`, where a bare `if` means something else. */
static jnode *parse_tuple(parser *p, bool with_cond) {
    uint32_t pos = cur(p)->pos;
    jnode *first = with_cond ? parse_expr(p) : parse_or(p);
    if (!first || !tok_is_op(cur(p), ",")) return first;
    jnode *t = new_node(p, JN_TUPLE, pos);
    add_kid(p, t, first);
    while (!p->failed && tok_is_op(cur(p), ",")) {
        advance(p);
        jtok *c = cur(p);
        if (c->type == JT_VAR_END || c->type == JT_BLOCK_END || tok_is_op(c, ")")) break;
        add_kid(p, t, with_cond ? parse_expr(p) : parse_or(p));
    }
    return p->failed ? NULL : t;
}

/* ------------------------------------------------------------------------ */
/* Statements                                                               */
/* ------------------------------------------------------------------------ */

static jnode *parse_body(parser *p, const char *const *ends, size_t n_ends, const char *tag);

/* Where the innermost open block tag started (for "never closed" errors). */

/* The name of the tag at the current `{%` (without consuming), or NULL. */
static bool at_tag(parser *p, const char *name) {
    return cur(p)->type == JT_BLOCK_BEGIN && tok_is_name(peek(p, 1), name);
}

/* Consumes `{% name %}`. */
static bool end_tag(parser *p, const char *name) {
    if (!at_tag(p, name)) {
        char what[40];
        snprintf(what, sizeof what, "'{%% %s %%}'", name);
        expected(p, what);
        return false;
    }
    advance(p);
    advance(p);
    return expect_type(p, JT_BLOCK_END, "'%}'");
}

/* A variable name (for a target). */
static jnode *parse_target_name(parser *p) {
    if (cur(p)->type != JT_NAME) return expected(p, "a variable name");
    jnode *n = new_node(p, JN_NAME, cur(p)->pos);
    if (n) n->name = copy_name(p, cur(p));
    advance(p);
    return n;
}

/* Assignment target of for / set: a name, names separated by commas (in
 * optional parentheses), or (set only) namespace.attribute. */
static jnode *parse_target(parser *p, bool allow_attr) {
    bool paren = tok_is_op(cur(p), "(");
    if (paren) advance(p);
    jnode *first = parse_target_name(p);
    if (!first) return NULL;
    if (allow_attr && !paren && tok_is_op(cur(p), ".")) {
        advance(p);
        jnode *g = new_node(p, JN_GETATTR, cur(p)->pos);
        if (cur(p)->type != JT_NAME) return expected(p, "attribute name");
        if (g) g->name = copy_name(p, cur(p));
        advance(p);
        add_kid(p, g, first);
        return p->failed ? NULL : g;
    }
    jnode *t = first;
    if (tok_is_op(cur(p), ",")) {
        t = new_node(p, JN_TUPLE, first->pos);
        add_kid(p, t, first);
        while (!p->failed && tok_is_op(cur(p), ",")) {
            advance(p);
            if (cur(p)->type != JT_NAME) break;
            add_kid(p, t, parse_target_name(p));
        }
    }
    if (paren && !expect_op(p, ")")) return NULL;
    return p->failed ? NULL : t;
}

static jnode *parse_if(parser *p, uint32_t pos) {
    static const char *const ends[] = {"elif", "else", "endif"};
    jnode *n = new_node(p, JN_IF, pos);
    add_kid(p, n, parse_tuple(p, false));
    if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
    add_kid(p, n, parse_body(p, ends, 3, "if"));
    if (p->failed) return NULL;
    if (at_tag(p, "elif")) {
        uint32_t epos = peek(p, 1)->pos;
        advance(p);
        advance(p);
        add_kid(p, n, parse_if(p, epos)); /* the elif chain closes with the same endif */
        return p->failed ? NULL : n;
    }
    if (at_tag(p, "else")) {
        advance(p);
        advance(p);
        if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
        add_kid(p, n, parse_body(p, ends + 2, 1, "if"));
    } else {
        add_kid(p, n, NULL);
    }
    return end_tag(p, "endif") ? n : NULL;
}

static jnode *parse_for(parser *p, uint32_t pos) {
    static const char *const ends[] = {"else", "endfor"};
    jnode *n = new_node(p, JN_FOR, pos);
    add_kid(p, n, parse_target(p, false));
    if (!p->failed && !tok_is_name(cur(p), "in")) return expected(p, "'in'");
    advance(p);
    add_kid(p, n, parse_tuple(p, false));
    jnode *cond = NULL;
    if (!p->failed && tok_is_name(cur(p), "if")) {
        advance(p);
        cond = parse_expr(p);
    }
    add_kid(p, n, cond);
    if (n && tok_is_name(cur(p), "recursive")) {
        n->flags |= JNF_RECURSIVE;
        advance(p);
    }
    if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
    p->loop_depth++;
    add_kid(p, n, parse_body(p, ends, 2, "for"));
    p->loop_depth--;
    jnode *else_body = NULL;
    if (!p->failed && at_tag(p, "else")) {
        advance(p);
        advance(p);
        if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
        else_body = parse_body(p, ends + 1, 1, "for");
    }
    add_kid(p, n, else_body);
    return end_tag(p, "endfor") ? n : NULL;
}

/* `| f | g` after a block tag's name: filters applied to the body. */
static jnode *parse_block_filters(parser *p, bool need_first) {
    jnode *chain = NULL;
    if (need_first) chain = parse_filter(p, NULL);
    while (!p->failed && tok_is_op(cur(p), "|")) {
        advance(p);
        chain = parse_filter(p, chain);
    }
    return p->failed ? NULL : chain;
}

static jnode *parse_set(parser *p, uint32_t pos) {
    static const char *const ends[] = {"endset"};
    jnode *target = parse_target(p, true);
    if (!target) return NULL;
    if (tok_is_op(cur(p), "=")) {
        advance(p);
        jnode *n = new_node(p, JN_SET, pos);
        add_kid(p, n, target);
        add_kid(p, n, parse_tuple(p, true));
        return expect_type(p, JT_BLOCK_END, "'%}'") ? n : NULL;
    }
    if (target->kind != JN_NAME) return expected(p, "'='");
    jnode *n = new_node(p, JN_SET_BLOCK, pos);
    add_kid(p, n, target);
    jnode *filters = parse_block_filters(p, false);
    if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
    add_kid(p, n, parse_body(p, ends, 1, "set"));
    add_kid(p, n, filters);
    return end_tag(p, "endset") ? n : NULL;
}

/* Macro parameters `(a, b=default)` into n's kids from index 1. */
static void parse_params(parser *p, jnode *n) {
    if (!expect_op(p, "(")) return;
    while (!p->failed && !tok_is_op(cur(p), ")")) {
        if (n->n_kids > 1 && !expect_op(p, ",")) return;
        if (tok_is_op(cur(p), ")")) break;
        jnode *name = parse_target_name(p);
        if (!name) return;
        if (tok_is_op(cur(p), "=")) {
            advance(p);
            name->kind = JN_KWARG;
            add_kid(p, name, parse_expr(p));
        }
        add_kid(p, n, name);
    }
    expect_op(p, ")");
}

/* The body of a macro or call block, with loop controls reset. */
static jnode *parse_macro_body(parser *p, jnode *macro, const char *end, const char *tag) {
    jnode *saved_macro = p->macro;
    int saved_loops = p->loop_depth;
    p->macro = macro;
    p->loop_depth = 0;
    const char *ends[] = {end};
    jnode *body = parse_body(p, ends, 1, tag);
    p->macro = saved_macro;
    p->loop_depth = saved_loops;
    return body;
}

static jnode *parse_macro(parser *p, uint32_t pos) {
    jnode *n = new_node(p, JN_MACRO, pos);
    if (!n) return NULL;
    if (cur(p)->type != JT_NAME) return expected(p, "macro name");
    n->name = copy_name(p, cur(p));
    advance(p);
    add_kid(p, n, NULL); /* the body, set below */
    parse_params(p, n);
    if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
    jnode *body = parse_macro_body(p, n, "endmacro", "macro");
    if (p->failed) return NULL;
    n->kids[0] = body;
    return end_tag(p, "endmacro") ? n : NULL;
}

static jnode *parse_call_block(parser *p, uint32_t pos) {
    jnode *n = new_node(p, JN_CALL_BLOCK, pos);
    jnode *caller = new_node(p, JN_MACRO, pos);
    if (!n || !caller) return NULL;
    caller->name = "caller";
    add_kid(p, caller, NULL);
    if (tok_is_op(cur(p), "(")) parse_params(p, caller);
    jnode *call = parse_expr(p);
    if (!p->failed && (!call || call->kind != JN_CALL)) return perr(p, pos, "expected a call");
    if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
    jnode *body = parse_macro_body(p, caller, "endcall", "call");
    if (p->failed) return NULL;
    caller->kids[0] = body;
    add_kid(p, n, call);
    add_kid(p, n, caller);
    return end_tag(p, "endcall") ? n : NULL;
}

static jnode *parse_filter_block(parser *p, uint32_t pos) {
    static const char *const ends[] = {"endfilter"};
    jnode *n = new_node(p, JN_FILTER_BLOCK, pos);
    add_kid(p, n, parse_block_filters(p, true));
    if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
    add_kid(p, n, parse_body(p, ends, 1, "filter"));
    return end_tag(p, "endfilter") ? n : NULL;
}

static jnode *parse_with(parser *p, uint32_t pos) {
    static const char *const ends[] = {"endwith"};
    jnode *n = new_node(p, JN_WITH, pos);
    add_kid(p, n, NULL); /* the body, set below */
    while (n && !p->failed && cur(p)->type != JT_BLOCK_END) {
        if (n->n_kids > 1 && !expect_op(p, ",")) return NULL;
        jnode *set = new_node(p, JN_SET, cur(p)->pos);
        add_kid(p, set, parse_target(p, false));
        if (!expect_op(p, "=")) return NULL;
        add_kid(p, set, parse_expr(p));
        add_kid(p, n, set);
    }
    if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
    jnode *body = parse_body(p, ends, 1, "with");
    if (p->failed) return NULL;
    n->kids[0] = body;
    return end_tag(p, "endwith") ? n : NULL;
}

static jnode *parse_generation(parser *p) {
    static const char *const ends[] = {"endgeneration"};
    if (!expect_type(p, JT_BLOCK_END, "'%}'")) return NULL;
    jnode *body = parse_body(p, ends, 1, "generation");
    return end_tag(p, "endgeneration") ? body : NULL;
}

/* break / continue, which need an enclosing loop. */
static jnode *parse_loop_control(parser *p, uint32_t pos, bool is_break) {
    if (p->loop_depth == 0)
        return perr(p, pos, "'%s' outside of a loop", is_break ? "break" : "continue");
    jnode *n = new_node(p, is_break ? JN_BREAK : JN_CONTINUE, pos);
    return expect_type(p, JT_BLOCK_END, "'%}'") ? n : NULL;
}

/* One `{% tag ... %}` statement; the `{%` is the current token. */
static jnode *parse_statement(parser *p) {
    advance(p);
    jtok *t = cur(p);
    if (t->type != JT_NAME) return expected(p, "a tag name");
    if (!enter(p)) return NULL;
    uint32_t pos = t->pos, saved_open = p->open_pos;
    p->open_pos = pos;
    advance(p);
    jnode *n;
    if (tok_is_name(t, "if"))
        n = parse_if(p, pos);
    else if (tok_is_name(t, "for"))
        n = parse_for(p, pos);
    else if (tok_is_name(t, "set"))
        n = parse_set(p, pos);
    else if (tok_is_name(t, "macro"))
        n = parse_macro(p, pos);
    else if (tok_is_name(t, "call"))
        n = parse_call_block(p, pos);
    else if (tok_is_name(t, "filter"))
        n = parse_filter_block(p, pos);
    else if (tok_is_name(t, "with"))
        n = parse_with(p, pos);
    else if (tok_is_name(t, "generation"))
        n = parse_generation(p);
    else if (tok_is_name(t, "break"))
        n = parse_loop_control(p, pos, true);
    else if (tok_is_name(t, "continue"))
        n = parse_loop_control(p, pos, false);
    else
        n = perr(p, pos, "unknown tag '%.*s'", (int)(t->len < 40 ? t->len : 40), t->text);
    p->open_pos = saved_open;
    p->depth--;
    return n;
}

/* Statements and text until one of the end tags (not consumed) or the end
 * of the template (an error when an end tag was expected). */
static jnode *parse_body(parser *p, const char *const *ends, size_t n_ends, const char *tag) {
    jnode *body = new_node(p, JN_BODY, cur(p)->pos);
    uint32_t start = p->open_pos;
    while (body && !p->failed) {
        jtok *t = cur(p);
        if (t->type == JT_EOF) {
            if (n_ends == 0) break;
            return perr(p, start,
                        "unexpected end of template: '%s' is never closed (missing '{%% %s %%}')",
                        tag, ends[n_ends - 1]);
        }
        if (t->type == JT_TEXT) {
            jnode *n = new_node(p, JN_TEXT, t->pos);
            if (n) {
                n->text = t->text;
                n->text_len = t->len;
            }
            add_kid(p, body, n);
            advance(p);
        } else if (t->type == JT_VAR_BEGIN) {
            advance(p);
            jnode *n = new_node(p, JN_OUTPUT, t->pos);
            add_kid(p, n, parse_tuple(p, true));
            expect_type(p, JT_VAR_END, "'}}'");
            add_kid(p, body, n);
        } else if (t->type == JT_BLOCK_BEGIN) {
            for (size_t k = 0; k < n_ends; k++)
                if (tok_is_name(peek(p, 1), ends[k])) return body;
            add_kid(p, body, parse_statement(p));
        } else {
            char got[64];
            describe(t, got, sizeof got);
            return perr(p, t->pos, "unexpected %s", got);
        }
    }
    return p->failed ? NULL : body;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */
/* ------------------------------------------------------------------------ */

/* Jinja2's view of the source: every \r\n or \r becomes \n, and one
 * trailing newline is dropped (keep_trailing_newline=False). */
static char *normalise(const char *src, size_t len, size_t *out_len) {
    char *s = malloc(len + 1);
    if (!s) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;
    *out_len = n;
    return s;
}

/* Lexes the whole template into p->toks (empty text tokens dropped). */
static bool lex_all(parser *p, const char *src, size_t len, nu_error *err) {
    jlexer lx;
    nu_jlex_init(&lx, src, len, p->arena);
    size_t cap = 64;
    p->toks = malloc(cap * sizeof *p->toks);
    if (!p->toks) return false;
    for (;;) {
        jtok t = nu_jlex_next(&lx);
        if (lx.failed) {
            int line, col;
            nu_jinja_position(src, len, lx.err_pos, &line, &col);
            nu_fail(err, NU_ERR_FORMAT, "chat template line %d, column %d: %s", line, col, lx.err);
            return false;
        }
        if (t.type == JT_TEXT && t.len == 0) continue;
        if (p->n == cap) {
            jtok *more = realloc(p->toks, 2 * cap * sizeof *more);
            if (!more) return false;
            p->toks = more;
            cap *= 2;
        }
        p->toks[p->n++] = t;
        if (t.type == JT_EOF) return true;
    }
}

nu_status nu_jinja_parse(const char *source, size_t len, nu_jinja_template **out, nu_error *err) {
    *out = NULL;
    if (len > UINT32_MAX - 16)
        return nu_fail(err, NU_ERR_INVALID_ARG, "chat template too large (%zu bytes)", len);
    nu_jinja_template *t = calloc(1, sizeof *t);
    parser p = {0};
    if (t) {
        t->arena = nu_jarena_new();
        t->source = normalise(source ? source : "", source ? len : 0, &t->len);
    }
    if (!t || !t->arena || !t->source) {
        nu_jinja_free(t);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    }
    p.arena = t->arena;
    nu_error lex_err = {0};
    if (!lex_all(&p, t->source, t->len, &lex_err)) {
        free(p.toks);
        nu_jinja_free(t);
        if (lex_err.status) return nu_fail(err, lex_err.status, "%s", lex_err.message);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    }
    t->root = parse_body(&p, NULL, 0, "");
    free(p.toks);
    if (p.failed || !t->root) {
        int line, col;
        nu_jinja_position(t->source, t->len, p.err_pos, &line, &col);
        nu_status st = strstr(p.err, "out of memory") ? NU_ERR_NOMEM : NU_ERR_FORMAT;
        nu_fail(err, st, "chat template line %d, column %d: %s", line, col,
                p.failed ? p.err : "parse error");
        nu_jinja_free(t);
        return st;
    }
    *out = t;
    return NU_OK;
}

void nu_jinja_free(nu_jinja_template *t) {
    if (!t) return;
    nu_jarena_free(t->arena);
    free(t->source);
    free(t);
}

const char *nu_jinja_source(const nu_jinja_template *t) {
    return t ? t->source : NULL;
}

size_t nu_jinja_source_len(const nu_jinja_template *t) {
    return t ? t->len : 0;
}
