/* jinja_internal.h - what the parts of the Jinja engine share: the syntax
 * tree (jinja_parse.c builds it from jinja_lex.c's tokens), values
 * (jinja_value.c), the render context (jinja_eval.c), filters and tests
 * (jinja_filters.c), methods and globals (jinja_methods.c); the Unicode
 * properties of Python's str come from base (unicode.h). Not for use outside
 * src/jinja*.c. */
#ifndef NU_JINJA_INTERNAL_H
#define NU_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "buf.h"
#include "jinja.h"
#include "unicode.h"
#include "utf8.h"

/* ------------------------------------------------------------------------ */
/* Values                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum nu_jv_type {
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
} nu_jv_type;

/* Why a value is undefined, for the error message when it is used. */
typedef enum jundef_hint {
    JU_NONE = 0, /* "undefined value" */
    JU_NAME,     /* "'name' is undefined" */
    JU_ATTR,     /* "'dict object' has no attribute 'name'" */
    JU_UNSAFE,   /* a method the immutable sandbox forbids (list.append, ...) */
    JU_EMPTY,    /* first / last of an empty sequence */
} jundef_hint;

typedef struct nu_jobj nu_jobj;

/* A value: scalars inline, everything else a reference-counted object. */
typedef struct nu_jv {
    uint8_t type;  /* nu_jv_type */
    uint8_t hint;  /* JV_UNDEF: jundef_hint */
    uint8_t owner; /* JV_UNDEF with JU_ATTR / JU_UNSAFE: nu_jv_type of the object */
    union {
        bool b;
        int64_t i;
        double f;
        nu_jobj *o;
        const char *name; /* JV_UNDEF: the name (lives as long as the template) */
    } u;
} nu_jv;

enum {
    JO_IMMORTAL = 1 << 0,  /* owned by the template: reference counts ignored */
    JO_TUPLE = 1 << 1,     /* a JV_LIST that is a Python tuple */
    JO_NAMESPACE = 1 << 2, /* a JV_DICT made by namespace(): attributes assignable */
};

typedef enum nu_jobj_kind {
    JK_STR,
    JK_LIST,
    JK_DICT,
    JK_FUNC,
    JK_MACRO,
    JK_LOOP,
    JK_SCOPE
} nu_jobj_kind;

/* Header of every heap object. Live objects of a render are linked so that
 * whatever a reference cycle keeps alive is still freed when it ends. */
struct nu_jobj {
    uint32_t refs;
    uint8_t kind;  /* nu_jobj_kind */
    uint8_t flags; /* JO_* */
    nu_jobj *prev, *next;
};

/* An immutable UTF-8 string. nchars counts characters: every byte that is
 * not a UTF-8 continuation byte starts one (invalid bytes count alone). */
typedef struct nu_jstr {
    nu_jobj h;
    size_t len;
    size_t nchars;
    char data[]; /* len bytes and a NUL */
} nu_jstr;

typedef struct nu_jlist {
    nu_jobj h;
    size_t len, cap;
    nu_jv *items;
} nu_jlist;

/* Insertion-ordered; keys compared with Python ==. */
typedef struct nu_jdict {
    nu_jobj h;
    size_t len, cap;
    nu_jv *keys;
    nu_jv *vals;
} nu_jdict;

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
    nu_jobj h;
    uint8_t id;         /* jfunc_id */
    const char *method; /* static string naming the method (JF_METHOD) */
    nu_jv self;
} jfunc;

struct jnode;
struct nu_jscope;

/* A macro closes over the scope it was defined in. */
typedef struct jmacro {
    nu_jobj h;
    const struct jnode *node; /* JN_MACRO */
    struct nu_jscope *scope;
} jmacro;

/* State of one for loop, seen by the template as `loop`. */
typedef struct jloop {
    nu_jobj h;
    nu_jv items; /* a JV_LIST */
    size_t index0;
    int depth0;
    const struct jnode *node; /* the JN_FOR, for recursive loops */
    struct nu_jscope *scope;  /* where the loop runs, for recursive loops */
    nu_jv changed_last;       /* loop.changed(): the last arguments (JV_UNDEF: none yet) */
} jloop;

/* Variables of one scope. Names are borrowed: they live as long as the
 * template or the render's input. */
typedef struct nu_jscope {
    nu_jobj h;
    struct nu_jscope *parent;
    size_t len, cap;
    const char **names;
    nu_jv *vals;
} nu_jscope;

static inline nu_jv nu_jv_undef(void) {
    nu_jv v = {.type = JV_UNDEF};
    return v;
}
static inline nu_jv nu_jv_none(void) {
    nu_jv v = {.type = JV_NONE};
    return v;
}
static inline nu_jv nu_jv_bool(bool b) {
    nu_jv v = {.type = JV_BOOL, .u.b = b};
    return v;
}
static inline nu_jv nu_jv_int(int64_t i) {
    nu_jv v = {.type = JV_INT, .u.i = i};
    return v;
}
static inline nu_jv nu_jv_float(double f) {
    nu_jv v = {.type = JV_FLOAT, .u.f = f};
    return v;
}
static inline nu_jv nu_jv_obj(nu_jv_type type, void *o) {
    nu_jv v = {.type = (uint8_t)type, .u.o = o};
    return v;
}
static inline nu_jstr *nu_jv_str(nu_jv v) {
    return (nu_jstr *)v.u.o;
}
static inline nu_jlist *nu_jv_list(nu_jv v) {
    return (nu_jlist *)v.u.o;
}
static inline nu_jdict *nu_jv_dict(nu_jv v) {
    return (nu_jdict *)v.u.o;
}
static inline bool nu_jv_is_obj(nu_jv v) {
    return v.type >= JV_STR;
}
static inline bool nu_jv_is_tuple(nu_jv v) {
    return v.type == JV_LIST && (v.u.o->flags & JO_TUPLE);
}
static inline bool nu_jv_is_namespace(nu_jv v) {
    return v.type == JV_DICT && (v.u.o->flags & JO_NAMESPACE);
}
static inline bool nu_jv_is_number(nu_jv v) {
    return v.type == JV_BOOL || v.type == JV_INT || v.type == JV_FLOAT;
}

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
    nu_jv value; /* JN_CONST (strings are immortal objects) */
    const jfilter_def *filter;
    const jtest_def *test;
} jnode;

/* A parsed template: the normalised source (for error positions), the tree
 * and the memory both live in. */
struct nu_jinja_template {
    char *source;
    size_t len;
    jnode *root; /* JN_BODY */
    struct nu_jarena *arena;
};

/* Bump allocator for the tree; freed all at once. */
typedef struct nu_jarena nu_jarena;
void *nu_jarena_alloc(nu_jarena *a, size_t n);
void nu_jarena_free(nu_jarena *a);
nu_jarena *nu_jarena_new(void);

/* Line and column (1-based, columns in characters) of a byte offset. */
void nu_jinja_position(const char *source, size_t len, size_t pos, int *line, int *column);

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
    nu_jarena *arena;
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

void nu_jlex_init(jlexer *lx, const char *src, size_t len, nu_jarena *arena);
/* The next token; JT_EOF at the end. On error lx->failed is set. */
jtok nu_jlex_next(jlexer *lx);

/* ------------------------------------------------------------------------ */
/* Render context                                                           */
/* ------------------------------------------------------------------------ */

typedef struct nu_jctx {
    const nu_jinja_template *tpl;
    nu_jinja_limits limits;
    uint64_t steps;
    uint64_t alloc_bytes;
    int depth;
    nu_jobj live;     /* sentinel of the list of live objects */
    nu_buf *out;      /* where output goes now */
    int loop_control; /* 1: break, 2: continue pending */
    bool failed;
    nu_status status;
    char message[480];
    time_t now; /* for strftime_now */
} nu_jctx;

/* Records the first error, "line L, column C: message" at node (or at byte
 * offset pos when node is NULL), and returns false. */
bool nu_jfail(nu_jctx *C, const jnode *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool nu_jfail_status(nu_jctx *C, const jnode *at, nu_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Fails for using an undefined value: the message says which. */
bool nu_jfail_undefined(nu_jctx *C, const jnode *at, nu_jv v);
/* Counts one step; fails when the step limit is hit. */
bool nu_jstep(nu_jctx *C, const jnode *at);

/* Reference counting. incref/decref ignore scalars and immortal objects. */
static inline nu_jv nu_jv_ref(nu_jv v) {
    if (nu_jv_is_obj(v) && !(v.u.o->flags & JO_IMMORTAL)) v.u.o->refs++;
    return v;
}
void nu_jv_unref(nu_jctx *C, nu_jv v);
void nu_jobj_unref(nu_jctx *C, nu_jobj *o);

/* Allocation. These fail (NULL, error recorded) at the allocation limit. */
void *nu_jctx_alloc_obj(nu_jctx *C, const jnode *at, nu_jobj_kind kind, size_t size);
bool nu_jctx_charge(nu_jctx *C, const jnode *at, size_t bytes);
void nu_jctx_free_all(nu_jctx *C);

/* Strings. nu_jv_new_str copies n bytes. */
bool nu_jv_new_str(nu_jctx *C, const jnode *at, const char *s, size_t n, nu_jv *out);
bool nu_jv_new_str_from_buf(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv *out); /* frees b */
/* a + b for two strings, copied once. */
bool nu_jv_concat_str(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, nu_jv *out);
nu_jstr *nu_jstr_immortal(nu_jarena *a, const char *s, size_t n);
size_t nu_jinja_count_chars(const char *s, size_t n);
/* Byte offset of character index ci (0..nchars) in s. */
size_t nu_utf8_offset(const char *s, size_t n, size_t ci);
/* Appends cp as UTF-8; 0xDC80.. give their byte back (see above), and other
 * lone surrogates, which UTF-8 cannot hold, become U+FFFD. */
void nu_jinja_put_char(nu_buf *b, uint32_t cp);

/* Lists and dicts. */
bool nu_jv_new_list(nu_jctx *C, const jnode *at, size_t cap, nu_jv *out);
bool nu_jlist_push(nu_jctx *C, const jnode *at, nu_jlist *l, nu_jv v); /* takes v */
bool nu_jv_new_dict(nu_jctx *C, const jnode *at, nu_jv *out);
bool nu_jdict_set(nu_jctx *C, const jnode *at, nu_jdict *d, nu_jv key, nu_jv val); /* takes both */
/* Borrowed value for key, or NULL. */
nu_jv *nu_jdict_find(nu_jdict *d, nu_jv key);
nu_jv *nu_jdict_find_str(nu_jdict *d, const char *key, size_t n);

/* Scopes. */
nu_jscope *nu_jscope_new(nu_jctx *C, const jnode *at, nu_jscope *parent);
bool nu_jscope_set(nu_jctx *C, const jnode *at, nu_jscope *s, const char *name,
                   nu_jv v); /* takes v */
nu_jv *nu_jscope_lookup(nu_jscope *s, const char *name);

/* Python semantics. */
bool nu_jv_truthy(nu_jv v);
const char *nu_jv_type_name(nu_jv v); /* Python's type name: "str", "NoneType", ... */
/* Python ==; fails only past the nesting limit. */
bool nu_jv_equal(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, bool *eq);
/* Python <, <=, >, >= (op is a JOP_*); fails for unorderable types. */
bool nu_jv_compare(nu_jctx *C, const jnode *at, jop op, nu_jv a, nu_jv b, bool *res);
/* Three-way comparison for sorting: -1, 0 or 1. */
bool nu_jv_cmp3(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, bool case_insensitive, int *res);
/* Python str(v) / repr(v) appended to b; fails only past the nesting limit. */
bool nu_jv_print(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v);
bool nu_jv_repr(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v);
/* str(v) as a new string value. Strings are returned as a new reference. */
bool nu_jv_to_str(nu_jctx *C, const jnode *at, nu_jv v, nu_jv *out);
void nu_jfloat_repr(nu_buf *b, double f);
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
bool nu_jv_tojson(nu_jctx *C, const jnode *at, nu_buf *b, nu_jv v, const jjson_opts *o);
/* A JSON document as a value (cJSON NULL: undefined). */
bool nu_jv_from_json(nu_jctx *C, const jnode *at, const cJSON *j, nu_jv *out, int depth);

/* ------------------------------------------------------------------------ */
/* Evaluation, filters, tests, methods                                      */
/* ------------------------------------------------------------------------ */

/* Arguments of a call, filter or test, evaluated. */
#define JARGS_MAX 16
typedef struct nu_jargs {
    size_t n_pos;
    nu_jv pos[JARGS_MAX];
    size_t n_kw;
    const char *kw_names[JARGS_MAX];
    nu_jv kw[JARGS_MAX];
} nu_jargs;

void nu_jargs_release(nu_jctx *C, nu_jargs *a);
/* Binds arguments to parameter names (positional first, then keywords).
 * Missing ones are left as a JV_UNDEF with hint JU_NONE and owner 1 (see
 * jarg_given). Fails on too many or unknown arguments. Values are borrowed. */
bool nu_jargs_bind(nu_jctx *C, const jnode *at, const char *what, const nu_jargs *a,
                   const char *const *names, size_t n_names, nu_jv *out);
static inline bool jarg_given(nu_jv v) {
    return !(v.type == JV_UNDEF && v.owner == 1);
}

typedef bool (*jfilter_fn)(nu_jctx *C, const jnode *at, nu_jv value, const nu_jargs *a, nu_jv *out);
struct jfilter_def {
    const char *name;
    jfilter_fn fn;
};
typedef bool (*jtest_fn)(nu_jctx *C, const jnode *at, nu_jv value, const nu_jargs *a, bool *out);
struct jtest_def {
    const char *name;
    jtest_fn fn;
};
const jfilter_def *nu_jinja_find_filter(const char *name);
const jtest_def *nu_jinja_find_test(const char *name);

/* Calls a callable value with arguments (used by the evaluator, by filters
 * like map, and by methods). */
bool nu_jcall_value(nu_jctx *C, const jnode *at, nu_jv callee, const nu_jargs *a, nu_jv *out);
/* Runs a method of self. Unknown methods give an undefined value. */
bool nu_jcall_method(nu_jctx *C, const jnode *at, nu_jv self, const char *method, const nu_jargs *a,
                     nu_jv *out);
/* Python getattr with the sandbox's rules: methods, dict keys, loop fields. */
bool nu_jv_getattr(nu_jctx *C, const jnode *at, nu_jv obj, const char *name, nu_jv *out);
/* obj[key]: items, characters, then attributes. */
bool nu_jv_getitem(nu_jctx *C, const jnode *at, nu_jv obj, nu_jv key, const char *const_name,
                   nu_jv *out);
/* Calls a macro value. */
bool nu_jcall_macro(nu_jctx *C, const jnode *at, jmacro *m, const nu_jargs *a, nu_jv *out);
/* Items of an iterable as a new list (dict: keys, str: characters). */
bool nu_jv_iterate(nu_jctx *C, const jnode *at, nu_jv v, nu_jv *out);
/* The global function named name, or false. */
bool nu_jinja_global(nu_jctx *C, const char *name, nu_jv *out);

/* Python's len(). */
bool nu_jv_length(nu_jctx *C, const jnode *at, nu_jv v, int64_t *out);

/* Calls a global function, bound method or loop method. */
bool nu_jinja_call_function(nu_jctx *C, const jnode *at, jfunc *f, const nu_jargs *a, nu_jv *out);
/* obj[start:stop:step] for lists, tuples and strings (None bounds: absent);
 * other objects give an undefined value, as a failed subscript does. */
bool nu_jinja_slice(nu_jctx *C, const jnode *at, nu_jv obj, nu_jv start, nu_jv stop, nu_jv step,
                    nu_jv *out);
/* str.strip / lstrip / rstrip (which: 1 left, 2 right, 3 both); chars not
 * given or None: whitespace. */
bool nu_jinja_strip(nu_jctx *C, const jnode *at, nu_jv self, nu_jv chars, int which, nu_jv *out);
/* Case mappings of a string: mode 0 upper, 1 lower, 2 str.title(), 3
 * capitalize, 4 swapcase. */
bool nu_jinja_case(nu_jctx *C, const jnode *at, nu_jv self, int mode, nu_jv *out);
/* str.replace(old, new, count); count < 0: all. */
bool nu_jinja_replace(nu_jctx *C, const jnode *at, nu_jv self, nu_jv old, nu_jv new_, int64_t count,
                      nu_jv *out);
/* fmt % args, printf-style (args a tuple, a mapping or one value). */
bool nu_jinja_percent_format(nu_jctx *C, const jnode *at, nu_jv fmt, nu_jv args, nu_jv *out);
/* fmt.format(*args, **kwargs). */
bool nu_jinja_str_format(nu_jctx *C, const jnode *at, nu_jv fmt, const nu_jargs *a, nu_jv *out);
/* strftime of t (UTC, C locale) appended to b; returns the bytes added. */
size_t nu_jinja_strftime(nu_buf *b, const char *fmt, size_t n, time_t t);

#endif
