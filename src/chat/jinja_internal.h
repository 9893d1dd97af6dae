/* jinja_internal.h - what the parts of the Jinja engine share: the syntax
 * tree (jinja_parse.c builds it from jinja_lex.c's tokens), values
 * (jinja_value.c), the render context (jinja_eval.c), filters and tests
 * (jinja_filters.c), methods and globals (jinja_methods.c) and Unicode
 * tables (jinja_unicode.c). Not for use outside src/jinja*.c. */
#ifndef NU_JINJA_INTERNAL_H
#define NU_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "jinja.h"

/* ------------------------------------------------------------------------ */
/* Values                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum jv_type {
    JV_UNDEF = 0, /* jinja2.Undefined: prints empty, falsy, fails on most uses */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* also tuples (JO_TUPLE) */
    JV_DICT,  /* also namespaces (JO_NAMESPACE) */
    JV_FUNC,  /* a global function or a bound method */
    JV_MACRO, /* a macro, or the caller of a call block */
    JV_LOOP,  /* the loop variable of a for loop */
} jv_type;

/* Why a value is undefined, for the error message when it is used. */
typedef enum jundef_hint {
    JU_NONE = 0, /* "undefined value" */
    JU_NAME,     /* "'name' is undefined" */
    JU_ATTR,     /* "'dict object' has no attribute 'name'" */
    JU_UNSAFE,   /* a method the immutable sandbox forbids (list.append, ...) */
    JU_EMPTY,    /* first / last of an empty sequence */
} jundef_hint;

typedef struct jobj jobj;

/* A value: scalars inline, everything else a reference-counted object. */
typedef struct jv {
    uint8_t type;  /* jv_type */
    uint8_t hint;  /* JV_UNDEF: jundef_hint */
    uint8_t owner; /* JV_UNDEF with JU_ATTR / JU_UNSAFE: jv_type of the object */
    union {
        bool b;
        int64_t i;
        double f;
        jobj *o;
        const char *name; /* JV_UNDEF: the name (lives as long as the template) */
    } u;
} jv;

enum {
    JO_IMMORTAL = 1 << 0,  /* owned by the template: reference counts ignored */
    JO_TUPLE = 1 << 1,     /* a JV_LIST that is a Python tuple */
    JO_NAMESPACE = 1 << 2, /* a JV_DICT made by namespace(): attributes assignable */
};

typedef enum jobj_kind { JK_STR, JK_LIST, JK_DICT, JK_FUNC, JK_MACRO, JK_LOOP, JK_SCOPE } jobj_kind;

/* Header of every heap object. Live objects of a render are linked so that
 * whatever a reference cycle keeps alive is still freed when it ends. */
struct jobj {
    uint32_t refs;
    uint8_t kind;  /* jobj_kind */
    uint8_t flags; /* JO_* */
    jobj *prev, *next;
};

/* An immutable UTF-8 string. nchars counts characters: every byte that is
 * not a UTF-8 continuation byte starts one (invalid bytes count alone). */
typedef struct jstr {
    jobj h;
    size_t len;
    size_t nchars;
    char data[]; /* len bytes and a NUL */
} jstr;

typedef struct jlist {
    jobj h;
    size_t len, cap;
    jv *items;
} jlist;

/* Insertion-ordered; keys compared with Python ==. */
typedef struct jdict {
    jobj h;
    size_t len, cap;
    jv *keys;
    jv *vals;
} jdict;

/* Built-in functions: globals, and methods bound to self. */
typedef enum jfunc_id {
    JF_RANGE,
    JF_NAMESPACE,
    JF_DICT,
    JF_RAISE_EXCEPTION,
    JF_STRFTIME_NOW,
    JF_LOOP_CYCLE,
    JF_LOOP_CHANGED,
    JF_METHOD, /* a method of self, named by method */
} jfunc_id;

typedef struct jfunc {
    jobj h;
    uint8_t id;         /* jfunc_id */
    const char *method; /* static string naming the method (JF_METHOD) */
    jv self;
} jfunc;

struct jnode;
struct jscope;

/* A macro closes over the scope it was defined in. */
typedef struct jmacro {
    jobj h;
    const struct jnode *node; /* JN_MACRO */
    struct jscope *scope;
} jmacro;

/* State of one for loop, seen by the template as `loop`. */
typedef struct jloop {
    jobj h;
    jv items; /* a JV_LIST */
    size_t index0;
    int depth0;
    const struct jnode *node; /* the JN_FOR, for recursive loops */
    struct jscope *scope;     /* where the loop runs, for recursive loops */
    jv changed_last;          /* loop.changed(): the last arguments (JV_UNDEF: none yet) */
} jloop;

/* Variables of one scope. Names are borrowed: they live as long as the
 * template or the render's input. */
typedef struct jscope {
    jobj h;
    struct jscope *parent;
    size_t len, cap;
    const char **names;
    jv *vals;
} jscope;

static inline jv jv_undef(void) {
    jv v = {.type = JV_UNDEF};
    return v;
}
static inline jv jv_none(void) {
    jv v = {.type = JV_NONE};
    return v;
}
static inline jv jv_bool(bool b) {
    jv v = {.type = JV_BOOL, .u.b = b};
    return v;
}
static inline jv jv_int(int64_t i) {
    jv v = {.type = JV_INT, .u.i = i};
    return v;
}
static inline jv jv_float(double f) {
    jv v = {.type = JV_FLOAT, .u.f = f};
    return v;
}
static inline jv jv_obj(jv_type type, void *o) {
    jv v = {.type = (uint8_t)type, .u.o = o};
    return v;
}
static inline jstr *jv_str(jv v) {
    return (jstr *)v.u.o;
}
static inline jlist *jv_list(jv v) {
    return (jlist *)v.u.o;
}
static inline jdict *jv_dict(jv v) {
    return (jdict *)v.u.o;
}
static inline bool jv_is_obj(jv v) {
    return v.type >= JV_STR;
}
static inline bool jv_is_tuple(jv v) {
    return v.type == JV_LIST && (v.u.o->flags & JO_TUPLE);
}
static inline bool jv_is_namespace(jv v) {
    return v.type == JV_DICT && (v.u.o->flags & JO_NAMESPACE);
}
static inline bool jv_is_number(jv v) {
    return v.type == JV_BOOL || v.type == JV_INT || v.type == JV_FLOAT;
}

/* ------------------------------------------------------------------------ */
/* Growable byte buffer                                                     */
/* ------------------------------------------------------------------------ */

typedef struct jbuf {
    char *data;
    size_t len, cap;
    bool failed; /* an allocation failed or the limit was hit */
    size_t limit;
} jbuf;

void jbuf_put(jbuf *b, const char *s, size_t n);
void jbuf_puts(jbuf *b, const char *s);
void jbuf_putc(jbuf *b, char c);
void jbuf_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jbuf_free(jbuf *b);

/* ------------------------------------------------------------------------ */
/* Syntax tree                                                              */
/* ------------------------------------------------------------------------ */

typedef enum jnode_kind {
    /* expressions */
    JN_CONST,   /* value */
    JN_NAME,    /* name */
    JN_GETATTR, /* kids[0].name */
    JN_GETITEM, /* kids[0][kids[1]] */
    JN_SLICE,   /* kids[0][kids[1]:kids[2]:kids[3]] (NULL parts omitted) */
    JN_CALL,    /* kids[0](kids[1..]) */
    JN_KWARG,   /* name=kids[0] inside a call's, filter's or test's arguments */
    JN_FILTER,  /* kids[0] | filter(kids[1..]); kids[0] NULL: the block's body */
    JN_TEST,    /* kids[0] is [not] test(kids[1..]) */
    JN_UNARY,   /* op kids[0] */
    JN_BINARY,  /* kids[0] op kids[1] */
    JN_AND,     /* kids[0] and kids[1] */
    JN_OR,      /* kids[0] or kids[1] */
    JN_COND,    /* kids[0] if kids[1] else kids[2] (kids[2] may be NULL) */
    JN_LIST,    /* [kids] */
    JN_TUPLE,   /* (kids) */
    JN_DICT,    /* {kids[0]: kids[1], ...} */
    /* statements */
    JN_BODY,         /* kids, in order */
    JN_TEXT,         /* text, len */
    JN_OUTPUT,       /* {{ kids[0] }} */
    JN_IF,           /* if kids[0]: kids[1] else kids[2] (a JN_BODY, a JN_IF for elif, or NULL) */
    JN_FOR,          /* for kids[0] in kids[1] if kids[2]: kids[3] else kids[4] */
    JN_SET,          /* kids[0] = kids[1] */
    JN_SET_BLOCK,    /* kids[0] = render(kids[1]) | kids[2] */
    JN_MACRO,        /* macro name(kids[1..]): kids[0] */
    JN_CALL_BLOCK,   /* kids[0] (a JN_CALL) with caller = kids[1] (a JN_MACRO) */
    JN_FILTER_BLOCK, /* render(kids[1]) | kids[0] */
    JN_WITH,         /* with kids[1..] (JN_SET): kids[0] */
    JN_BREAK,
    JN_CONTINUE,
} jnode_kind;

typedef enum jop {
    JOP_ADD,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN,
    JOP_NOT,
    JOP_NEG,
    JOP_POS,
} jop;

enum {
    JNF_NEGATED = 1 << 0,     /* JN_TEST: is not */
    JNF_RECURSIVE = 1 << 1,   /* JN_FOR: recursive loop */
    JNF_USES_CALLER = 1 << 2, /* JN_MACRO: the body reads caller / varargs / kwargs */
    JNF_USES_VARARGS = 1 << 3,
    JNF_USES_KWARGS = 1 << 4,
};

typedef struct jfilter_def jfilter_def;
typedef struct jtest_def jtest_def;

typedef struct jnode {
    uint8_t kind;   /* jnode_kind */
    uint8_t op;     /* jop */
    uint16_t flags; /* JNF_* */
    uint32_t pos;   /* byte offset in the (newline-normalised) source */
    uint32_t n_kids;
    struct jnode **kids;
    const char *name; /* NUL-terminated: names, attributes, keyword arguments */
    const char *text; /* JN_TEXT */
    size_t text_len;
    jv value; /* JN_CONST (strings are immortal objects) */
    const jfilter_def *filter;
    const jtest_def *test;
} jnode;

/* A parsed template: the normalised source (for error positions), the tree
 * and the memory both live in. */
struct jinja_template {
    char *source;
    size_t len;
    jnode *root; /* JN_BODY */
    struct jarena *arena;
};

/* Bump allocator for the tree; freed all at once. */
typedef struct jarena jarena;
void *jarena_alloc(jarena *a, size_t n);
void jarena_free(jarena *a);
jarena *jarena_new(void);

/* Line and column (1-based, columns in characters) of a byte offset. */
void jinja_position(const char *source, size_t len, size_t pos, int *line, int *column);

/* ------------------------------------------------------------------------ */
/* Lexer                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum jtok_type {
    JT_EOF = 0,
    JT_TEXT,        /* template data between tags */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,
    JT_STRING, /* decoded into the token's value */
    JT_INT,
    JT_FLOAT,
    JT_OP, /* punctuation: text holds it */
} jtok_type;

typedef struct jtok {
    uint8_t type;
    uint32_t pos;
    const char *text; /* into the source (JT_TEXT: after whitespace control) */
    size_t len;
    char *str; /* JT_STRING: decoded, arena-allocated, NUL-terminated */
    size_t str_len;
    int64_t ival;
    double fval;
} jtok;

/* Token stream over a normalised source. Whitespace control, trim_blocks and
 * lstrip_blocks are applied to JT_TEXT tokens; comments and raw blocks are
 * handled inside. */
typedef struct jlexer {
    const char *src;
    size_t len;
    size_t pos;
    jarena *arena;
    int state;         /* 0: data, 1: inside {{ }}, 2: inside {% %} */
    int depth;         /* open brackets inside a tag */
    bool strip_next;   /* the last tag ended with '-': strip leading whitespace of the data */
    bool trim_next;    /* the last tag was a block or comment: drop one newline */
    bool open_pending; /* the data token was returned; the tag opening comes next */
    bool raw_pending;  /* a {% raw %} tag was read; its content comes next */
    uint32_t open_pos, raw_tag;
    char err[256];
    uint32_t err_pos;
    bool failed;
} jlexer;

void jlex_init(jlexer *lx, const char *src, size_t len, jarena *arena);
/* The next token; JT_EOF at the end. On error lx->failed is set. */
jtok jlex_next(jlexer *lx);

/* ------------------------------------------------------------------------ */
/* Render context                                                           */
/* ------------------------------------------------------------------------ */

typedef struct jctx {
    const jinja_template *tpl;
    jinja_limits limits;
    uint64_t steps;
    uint64_t alloc_bytes;
    int depth;
    jobj live;        /* sentinel of the list of live objects */
    jbuf *out;        /* where output goes now */
    int loop_control; /* 1: break, 2: continue pending */
    bool failed;
    nu_status status;
    char message[480];
    time_t now; /* for strftime_now */
} jctx;

/* Records the first error, "line L, column C: message" at node (or at byte
 * offset pos when node is NULL), and returns false. */
bool jfail(jctx *C, const jnode *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool jfail_status(jctx *C, const jnode *at, nu_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Fails for using an undefined value: the message says which. */
bool jfail_undefined(jctx *C, const jnode *at, jv v);
/* Counts one step; fails when the step limit is hit. */
bool jstep(jctx *C, const jnode *at);

/* Reference counting. incref/decref ignore scalars and immortal objects. */
static inline jv jv_ref(jv v) {
    if (jv_is_obj(v) && !(v.u.o->flags & JO_IMMORTAL)) v.u.o->refs++;
    return v;
}
void jv_unref(jctx *C, jv v);
void jobj_unref(jctx *C, jobj *o);

/* Allocation. These fail (NULL, error recorded) at the allocation limit. */
void *jctx_alloc_obj(jctx *C, const jnode *at, jobj_kind kind, size_t size);
bool jctx_charge(jctx *C, const jnode *at, size_t bytes);
void jctx_free_all(jctx *C);

/* Strings. jv_new_str copies n bytes. */
bool jv_new_str(jctx *C, const jnode *at, const char *s, size_t n, jv *out);
bool jv_new_str_from_buf(jctx *C, const jnode *at, jbuf *b, jv *out); /* frees b */
/* a + b for two strings, copied once. */
bool jv_concat_str(jctx *C, const jnode *at, jv a, jv b, jv *out);
jstr *jstr_immortal(jarena *a, const char *s, size_t n);
size_t utf8_count_chars(const char *s, size_t n);
/* Byte offset of character index ci (0..nchars) in s. */
size_t utf8_offset(const char *s, size_t n, size_t ci);
/* Decodes one character at s[*i] (advancing *i); invalid bytes decode to
 * themselves as code points 0xDC80.. like Python's surrogateescape. */
uint32_t utf8_decode(const char *s, size_t n, size_t *i);
void utf8_encode(jbuf *b, uint32_t cp);

/* Lists and dicts. */
bool jv_new_list(jctx *C, const jnode *at, size_t cap, jv *out);
bool jlist_push(jctx *C, const jnode *at, jlist *l, jv v); /* takes v */
bool jv_new_dict(jctx *C, const jnode *at, jv *out);
bool jdict_set(jctx *C, const jnode *at, jdict *d, jv key, jv val); /* takes both */
/* Borrowed value for key, or NULL. */
jv *jdict_find(jdict *d, jv key);
jv *jdict_find_str(jdict *d, const char *key, size_t n);

/* Scopes. */
jscope *jscope_new(jctx *C, const jnode *at, jscope *parent);
bool jscope_set(jctx *C, const jnode *at, jscope *s, const char *name, jv v); /* takes v */
jv *jscope_lookup(jscope *s, const char *name);

/* Python semantics. */
bool jv_truthy(jv v);
const char *jv_type_name(jv v); /* Python's type name: "str", "NoneType", ... */
/* Python ==; fails only past the nesting limit. */
bool jv_equal(jctx *C, const jnode *at, jv a, jv b, bool *eq);
/* Python <, <=, >, >= (op is a JOP_*); fails for unorderable types. */
bool jv_compare(jctx *C, const jnode *at, jop op, jv a, jv b, bool *res);
/* Three-way comparison for sorting: -1, 0 or 1. */
bool jv_cmp3(jctx *C, const jnode *at, jv a, jv b, bool case_insensitive, int *res);
/* Python str(v) / repr(v) appended to b; fails only past the nesting limit. */
bool jv_print(jctx *C, const jnode *at, jbuf *b, jv v);
bool jv_repr(jctx *C, const jnode *at, jbuf *b, jv v);
/* str(v) as a new string value. Strings are returned as a new reference. */
bool jv_to_str(jctx *C, const jnode *at, jv v, jv *out);
void jfloat_repr(jbuf *b, double f);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent < 0: none;
 * item_sep / key_sep NULL: the defaults. */
typedef struct jjson_opts {
    bool ensure_ascii;
    int indent;
    const char *indent_str;
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
    bool sort_keys;
} jjson_opts;
bool jv_tojson(jctx *C, const jnode *at, jbuf *b, jv v, const jjson_opts *o);
/* A JSON document as a value (cJSON NULL: undefined). */
bool jv_from_json(jctx *C, const jnode *at, const cJSON *j, jv *out, int depth);

/* ------------------------------------------------------------------------ */
/* Evaluation, filters, tests, methods                                      */
/* ------------------------------------------------------------------------ */

/* Arguments of a call, filter or test, evaluated. */
#define JARGS_MAX 16
typedef struct jargs {
    size_t n_pos;
    jv pos[JARGS_MAX];
    size_t n_kw;
    const char *kw_names[JARGS_MAX];
    jv kw[JARGS_MAX];
} jargs;

void jargs_release(jctx *C, jargs *a);
/* Binds arguments to parameter names (positional first, then keywords).
 * Missing ones are left as a JV_UNDEF with hint JU_NONE and owner 1 (see
 * jarg_given). Fails on too many or unknown arguments. Values are borrowed. */
bool jargs_bind(jctx *C, const jnode *at, const char *what, const jargs *a,
                const char *const *names, size_t n_names, jv *out);
static inline bool jarg_given(jv v) {
    return !(v.type == JV_UNDEF && v.owner == 1);
}

typedef bool (*jfilter_fn)(jctx *C, const jnode *at, jv value, const jargs *a, jv *out);
struct jfilter_def {
    const char *name;
    jfilter_fn fn;
};
typedef bool (*jtest_fn)(jctx *C, const jnode *at, jv value, const jargs *a, bool *out);
struct jtest_def {
    const char *name;
    jtest_fn fn;
};
const jfilter_def *jinja_find_filter(const char *name);
const jtest_def *jinja_find_test(const char *name);

/* Calls a callable value with arguments (used by the evaluator, by filters
 * like map, and by methods). */
bool jcall_value(jctx *C, const jnode *at, jv callee, const jargs *a, jv *out);
/* Runs a method of self. Unknown methods give an undefined value. */
bool jcall_method(jctx *C, const jnode *at, jv self, const char *method, const jargs *a, jv *out);
/* Python getattr with the sandbox's rules: methods, dict keys, loop fields. */
bool jv_getattr(jctx *C, const jnode *at, jv obj, const char *name, jv *out);
/* obj[key]: items, characters, then attributes. */
bool jv_getitem(jctx *C, const jnode *at, jv obj, jv key, const char *const_name, jv *out);
/* Calls a macro value. */
bool jcall_macro(jctx *C, const jnode *at, jmacro *m, const jargs *a, jv *out);
/* Items of an iterable as a new list (dict: keys, str: characters). */
bool jv_iterate(jctx *C, const jnode *at, jv v, jv *out);
/* The global function named name, or false. */
bool jinja_global(jctx *C, const char *name, jv *out);

/* Python's len(). */
bool jv_length(jctx *C, const jnode *at, jv v, int64_t *out);

/* Calls a global function, bound method or loop method. */
bool jinja_call_function(jctx *C, const jnode *at, jfunc *f, const jargs *a, jv *out);
/* obj[start:stop:step] for lists, tuples and strings (None bounds: absent);
 * other objects give an undefined value, as a failed subscript does. */
bool jinja_slice(jctx *C, const jnode *at, jv obj, jv start, jv stop, jv step, jv *out);
/* str.strip / lstrip / rstrip (which: 1 left, 2 right, 3 both); chars not
 * given or None: whitespace. */
bool jinja_strip(jctx *C, const jnode *at, jv self, jv chars, int which, jv *out);
/* Case mappings of a string: mode 0 upper, 1 lower, 2 str.title(), 3
 * capitalize, 4 swapcase. */
bool jinja_case(jctx *C, const jnode *at, jv self, int mode, jv *out);
/* str.replace(old, new, count); count < 0: all. */
bool jinja_replace(jctx *C, const jnode *at, jv self, jv old, jv new_, int64_t count, jv *out);
/* fmt % args, printf-style (args a tuple, a mapping or one value). */
bool jinja_percent_format(jctx *C, const jnode *at, jv fmt, jv args, jv *out);
/* fmt.format(*args, **kwargs). */
bool jinja_str_format(jctx *C, const jnode *at, jv fmt, const jargs *a, jv *out);
/* strftime of t (UTC, C locale) appended to b; returns the bytes added. */
size_t jinja_strftime(jbuf *b, const char *fmt, size_t n, time_t t);

/* ------------------------------------------------------------------------ */
/* Unicode                                                                  */
/* ------------------------------------------------------------------------ */

bool uni_isspace(uint32_t cp);     /* Python str.isspace() */
bool uni_isprintable(uint32_t cp); /* Python str.isprintable() */
/* Python's full case mappings: writes 1..3 code points to out, returns count. */
int uni_upper(uint32_t cp, uint32_t out[3]);
int uni_lower(uint32_t cp, uint32_t out[3]);
int uni_title(uint32_t cp, uint32_t out[3]);
bool uni_isupper(uint32_t cp);
bool uni_islower(uint32_t cp);
bool uni_iscased(uint32_t cp);
bool uni_isalpha(uint32_t cp);
bool uni_isdigit(uint32_t cp);
bool uni_isalnum(uint32_t cp);

#endif
