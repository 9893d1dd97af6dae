/* jinja_eval.c - the interpreter: evaluates expressions and runs
 * statements of a parsed template, writing output to a buffer.
 *
 * Scoping follows Jinja2: the template's top level is one scope (where the
 * render variables live and top-level `set` writes), every iteration of a
 * for loop and every macro call gets a child scope, `if` does not. So a
 * `set` inside a loop is gone after the iteration, and namespace() objects
 * are how templates carry state out of loops. Every statement and
 * expression counts a step; nesting is bounded by limits.max_depth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jinja_internal.h"

static bool eval(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out);
static bool exec(nu_jctx *C, nu_jscope *S, const jnode *n);

enum { LOOP_BREAK = 1, LOOP_CONTINUE = 2 };

/* Enters one level of evaluation nesting. */
static bool enter(nu_jctx *C, const jnode *at) {
    if (++C->depth > C->limits.max_depth) {
        C->depth--;
        return nu_jfail_status(C, at, NU_ERR_UNSUPPORTED, "template nests too deeply (limit %d)",
                               C->limits.max_depth);
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Arguments                                                                */
/* ------------------------------------------------------------------------ */

void nu_jargs_release(nu_jctx *C, nu_jargs *a) {
    for (size_t i = 0; i < a->n_pos; i++) nu_jv_unref(C, a->pos[i]);
    for (size_t i = 0; i < a->n_kw; i++) nu_jv_unref(C, a->kw[i]);
    a->n_pos = a->n_kw = 0;
}

/* Evaluates kids[first..] of a call, filter or test into a. */
static bool eval_args(nu_jctx *C, nu_jscope *S, const jnode *n, uint32_t first, nu_jargs *a) {
    a->n_pos = a->n_kw = 0;
    for (uint32_t k = first; k < n->n_kids; k++) {
        const jnode *arg = n->kids[k];
        bool kw = arg->kind == JN_KWARG;
        if ((kw ? a->n_kw : a->n_pos) >= JARGS_MAX) {
            nu_jargs_release(C, a);
            return nu_jfail(C, arg, "too many arguments (at most %d)", JARGS_MAX);
        }
        nu_jv v;
        if (!eval(C, S, kw ? arg->kids[0] : arg, &v)) {
            nu_jargs_release(C, a);
            return false;
        }
        if (kw) {
            a->kw_names[a->n_kw] = arg->name;
            a->kw[a->n_kw++] = v;
        } else {
            a->pos[a->n_pos++] = v;
        }
    }
    return true;
}

bool nu_jargs_bind(nu_jctx *C, const jnode *at, const char *what, const nu_jargs *a,
                   const char *const *names, size_t n_names, nu_jv *out) {
    nu_jv missing = {.type = JV_UNDEF, .owner = 1};
    for (size_t i = 0; i < n_names; i++) out[i] = missing;
    if (a->n_pos > n_names)
        return nu_jfail(C, at, "%s takes at most %zu argument(s) (%zu given)", what, n_names,
                        a->n_pos);
    for (size_t i = 0; i < a->n_pos; i++) out[i] = a->pos[i];
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i = 0;
        while (i < n_names && strcmp(names[i], a->kw_names[k]) != 0) i++;
        if (i == n_names)
            return nu_jfail(C, at, "%s got an unexpected keyword argument '%s'", what,
                            a->kw_names[k]);
        if (jarg_given(out[i]))
            return nu_jfail(C, at, "%s got multiple values for argument '%s'", what, names[i]);
        out[i] = a->kw[k];
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Operators                                                                */
/* ------------------------------------------------------------------------ */

static bool is_intlike(nu_jv v) {
    return v.type == JV_INT || v.type == JV_BOOL;
}

static int64_t int_of(nu_jv v) {
    return v.type == JV_INT ? v.u.i : (int64_t)v.u.b;
}

static double float_of(nu_jv v) {
    return v.type == JV_FLOAT ? v.u.f : (double)int_of(v);
}

static const char *op_text(jop op) {
    static const char *const t[] = {"+",  "-",  "*", "/",  "//", "%",  "**", "~",
                                    "==", "!=", "<", "<=", ">",  ">=", "in", "not in"};
    return op < sizeof t / sizeof *t ? t[op] : "?";
}

static bool unsupported(nu_jctx *C, const jnode *at, jop op, nu_jv a, nu_jv b) {
    if (a.type == JV_UNDEF) return nu_jfail_undefined(C, at, a);
    if (b.type == JV_UNDEF) return nu_jfail_undefined(C, at, b);
    if (op == JOP_ADD && a.type == JV_STR)
        return nu_jfail(C, at, "can only concatenate str (not \"%s\") to str", nu_jv_type_name(b));
    if (op == JOP_ADD && a.type == JV_LIST)
        return nu_jfail(C, at, "can only concatenate %s (not \"%s\") to %s", nu_jv_type_name(a),
                        nu_jv_type_name(b), nu_jv_type_name(a));
    return nu_jfail(C, at, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
                    nu_jv_type_name(a), nu_jv_type_name(b));
}

/* Python's floor division and modulo on ints. */
static bool int_divmod(nu_jctx *C, const jnode *at, int64_t x, int64_t y, int64_t *q, int64_t *r) {
    if (y == 0) return nu_jfail(C, at, "integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) return nu_jfail(C, at, "integer overflow");
    int64_t qq = x / y, rr = x % y;
    if (rr != 0 && ((rr < 0) != (y < 0))) {
        qq--;
        rr += y;
    }
    *q = qq;
    *r = rr;
    return true;
}

/* Integer power by squaring, failing on overflow. */
static bool int_pow(nu_jctx *C, const jnode *at, int64_t base, int64_t exp, nu_jv *out) {
    int64_t result = 1;
    while (exp > 0) {
        if ((exp & 1) && __builtin_mul_overflow(result, base, &result))
            return nu_jfail(C, at, "integer overflow");
        exp >>= 1;
        if (exp > 0 && __builtin_mul_overflow(base, base, &base))
            return nu_jfail(C, at, "integer overflow");
    }
    *out = nu_jv_int(result);
    return true;
}

/* Arithmetic on two numbers (bools count as ints, like Python). */
static bool arith(nu_jctx *C, const jnode *at, jop op, nu_jv a, nu_jv b, nu_jv *out) {
    if (is_intlike(a) && is_intlike(b) && op != JOP_DIV) {
        int64_t x = int_of(a), y = int_of(b), r = 0, q;
        bool overflow = false;
        switch (op) {
        case JOP_ADD: overflow = __builtin_add_overflow(x, y, &r); break;
        case JOP_SUB: overflow = __builtin_sub_overflow(x, y, &r); break;
        case JOP_MUL: overflow = __builtin_mul_overflow(x, y, &r); break;
        case JOP_FLOORDIV:
            if (!int_divmod(C, at, x, y, &r, &q)) return false;
            break;
        case JOP_MOD:
            if (!int_divmod(C, at, x, y, &q, &r)) return false;
            break;
        case JOP_POW:
            if (y >= 0) return int_pow(C, at, x, y, out);
            if (x == 0) return nu_jfail(C, at, "0.0 cannot be raised to a negative power");
            *out = nu_jv_float(pow((double)x, (double)y));
            return true;
        default: break;
        }
        if (overflow) return nu_jfail(C, at, "integer overflow");
        *out = nu_jv_int(r);
        return true;
    }
    double x = float_of(a), y = float_of(b), r;
    switch (op) {
    case JOP_ADD: r = x + y; break;
    case JOP_SUB: r = x - y; break;
    case JOP_MUL: r = x * y; break;
    case JOP_DIV:
        if (y == 0) return nu_jfail(C, at, "division by zero");
        r = x / y;
        break;
    case JOP_FLOORDIV:
    case JOP_MOD: {
        if (y == 0) return nu_jfail(C, at, "float division by zero");
        double mod = fmod(x, y), div = (x - mod) / y, floordiv;
        if (mod != 0) {
            if ((y < 0) != (mod < 0)) {
                mod += y;
                div -= 1.0;
            }
        } else {
            mod = copysign(0.0, y);
        }
        if (div != 0) {
            floordiv = floor(div);
            if (div - floordiv > 0.5) floordiv += 1.0;
        } else {
            floordiv = copysign(0.0, x / y);
        }
        r = op == JOP_MOD ? mod : floordiv;
        break;
    }
    case JOP_POW:
        if (x == 0 && y < 0) return nu_jfail(C, at, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != floor(y)) return nu_jfail(C, at, "negative number to a fractional power");
        r = pow(x, y);
        break;
    default: return unsupported(C, at, op, a, b);
    }
    *out = nu_jv_float(r);
    return true;
}

/* seq * n for strings, lists and tuples. */
static bool repeat(nu_jctx *C, const jnode *at, nu_jv seq, int64_t times, nu_jv *out) {
    if (times < 0) times = 0;
    if (seq.type == JV_STR) {
        nu_jstr *s = nu_jv_str(seq);
        if (s->len && (uint64_t)times > C->limits.max_output / s->len)
            return nu_jfail_status(C, at, NU_ERR_UNSUPPORTED, "string too long");
        nu_buf b = {.limit = C->limits.max_output};
        for (int64_t i = 0; i < times; i++) nu_buf_add(&b, s->data, s->len);
        return nu_jv_new_str_from_buf(C, at, &b, out);
    }
    nu_jlist *l = nu_jv_list(seq);
    if (l->len && (uint64_t)times > (C->limits.max_output / 8) / l->len)
        return nu_jfail_status(C, at, NU_ERR_UNSUPPORTED, "list too long");
    if (!nu_jv_new_list(C, at, l->len * (size_t)times, out)) return false;
    out->u.o->flags |= seq.u.o->flags & JO_TUPLE;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < l->len; k++)
            if (!nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(l->items[k]))) return false;
    return true;
}

/* a + b for strings and for lists / tuples. */
static bool concat_seq(nu_jctx *C, const jnode *at, nu_jv a, nu_jv b, nu_jv *out) {
    if (a.type == JV_STR) return nu_jv_concat_str(C, at, a, b, out);
    nu_jlist *x = nu_jv_list(a), *y = nu_jv_list(b);
    if (!nu_jv_new_list(C, at, x->len + y->len, out)) return false;
    out->u.o->flags |= a.u.o->flags & JO_TUPLE;
    for (size_t k = 0; k < x->len; k++)
        if (!nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(x->items[k]))) return false;
    for (size_t k = 0; k < y->len; k++)
        if (!nu_jlist_push(C, at, nu_jv_list(*out), nu_jv_ref(y->items[k]))) return false;
    return true;
}

/* `item in container`. */
static bool contains(nu_jctx *C, const jnode *at, nu_jv container, nu_jv item, bool *res) {
    *res = false;
    switch (container.type) {
    case JV_UNDEF: return true;
    case JV_STR:
        if (item.type != JV_STR)
            return nu_jfail(C, at, "'in <string>' requires string as left operand, not %s",
                            nu_jv_type_name(item));
        *res = nu_jv_str(item)->len == 0 ||
               memmem(nu_jv_str(container)->data, nu_jv_str(container)->len, nu_jv_str(item)->data,
                      nu_jv_str(item)->len) != NULL;
        return true;
    case JV_LIST: {
        nu_jlist *l = nu_jv_list(container);
        for (size_t i = 0; i < l->len && !*res; i++)
            if (!nu_jv_equal(C, at, l->items[i], item, res)) return false;
        return true;
    }
    case JV_DICT:
        if (nu_jv_is_namespace(container)) break;
        *res = nu_jdict_find(nu_jv_dict(container), item) != NULL;
        return true;
    default: break;
    }
    return nu_jfail(C, at, "argument of type '%s' is not iterable", nu_jv_type_name(container));
}

/* A binary operator on two evaluated operands. */
static bool binop(nu_jctx *C, const jnode *at, jop op, nu_jv a, nu_jv b, nu_jv *out) {
    bool r;
    switch (op) {
    case JOP_CONCAT: {
        if (a.type == JV_STR && b.type == JV_STR) return nu_jv_concat_str(C, at, a, b, out);
        nu_buf buf = {.limit = C->limits.max_output};
        if (!nu_jv_print(C, at, &buf, a) || !nu_jv_print(C, at, &buf, b)) {
            nu_buf_free(&buf);
            return false;
        }
        return nu_jv_new_str_from_buf(C, at, &buf, out);
    }
    case JOP_EQ:
    case JOP_NE:
        if (!nu_jv_equal(C, at, a, b, &r)) return false;
        *out = nu_jv_bool(op == JOP_EQ ? r : !r);
        return true;
    case JOP_LT:
    case JOP_LE:
    case JOP_GT:
    case JOP_GE:
        if (!nu_jv_compare(C, at, op, a, b, &r)) return false;
        *out = nu_jv_bool(r);
        return true;
    case JOP_IN:
    case JOP_NOTIN:
        if (!contains(C, at, b, a, &r)) return false;
        *out = nu_jv_bool(op == JOP_IN ? r : !r);
        return true;
    default: break;
    }
    if (nu_jv_is_number(a) && nu_jv_is_number(b)) return arith(C, at, op, a, b, out);
    bool same_seq =
        (a.type == JV_STR && b.type == JV_STR) ||
        (a.type == JV_LIST && b.type == JV_LIST && nu_jv_is_tuple(a) == nu_jv_is_tuple(b));
    if (op == JOP_ADD && same_seq) return concat_seq(C, at, a, b, out);
    if (op == JOP_MUL && (a.type == JV_STR || a.type == JV_LIST) && is_intlike(b))
        return repeat(C, at, a, int_of(b), out);
    if (op == JOP_MUL && (b.type == JV_STR || b.type == JV_LIST) && is_intlike(a))
        return repeat(C, at, b, int_of(a), out);
    if (op == JOP_MOD && a.type == JV_STR) return nu_jinja_percent_format(C, at, a, b, out);
    return unsupported(C, at, op, a, b);
}

static bool unary(nu_jctx *C, const jnode *at, jop op, nu_jv a, nu_jv *out) {
    if (op == JOP_NOT) {
        *out = nu_jv_bool(!nu_jv_truthy(a));
        return true;
    }
    if (a.type == JV_UNDEF) return nu_jfail_undefined(C, at, a);
    if (is_intlike(a)) {
        int64_t x = int_of(a);
        if (op == JOP_NEG && x == INT64_MIN) return nu_jfail(C, at, "integer overflow");
        *out = nu_jv_int(op == JOP_NEG ? -x : x);
        return true;
    }
    if (a.type == JV_FLOAT) {
        *out = nu_jv_float(op == JOP_NEG ? -a.u.f : a.u.f);
        return true;
    }
    return nu_jfail(C, at, "bad operand type for unary %s: '%s'", op == JOP_NEG ? "-" : "+",
                    nu_jv_type_name(a));
}

/* ------------------------------------------------------------------------ */
/* Expressions                                                              */
/* ------------------------------------------------------------------------ */

/* A variable: the innermost scope that has it, then the globals. */
static bool eval_name(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    nu_jv *v = nu_jscope_lookup(S, n->name);
    if (v) {
        *out = nu_jv_ref(*v);
        return true;
    }
    if (nu_jinja_global(C, n->name, out)) return !C->failed;
    *out = nu_jv_undef();
    out->hint = JU_NAME;
    out->u.name = n->name;
    return true;
}

static bool eval_slice(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv obj, nu_jv *out) {
    nu_jv parts[3] = {nu_jv_none(), nu_jv_none(), nu_jv_none()};
    bool ok = true;
    for (int k = 0; k < 3 && ok; k++)
        if (n->kids[k + 1]) ok = eval(C, S, n->kids[k + 1], &parts[k]);
    if (ok) ok = nu_jinja_slice(C, n, obj, parts[0], parts[1], parts[2], out);
    for (int k = 0; k < 3; k++) nu_jv_unref(C, parts[k]);
    return ok;
}

/* obj.attr, obj[key] and obj[a:b:c]. */
static bool eval_access(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    nu_jv obj, key;
    if (!eval(C, S, n->kids[0], &obj)) return false;
    if (obj.type == JV_UNDEF) return nu_jfail_undefined(C, n->kids[0], obj); /* point at the name */
    bool ok;
    if (n->kind == JN_GETATTR) {
        ok = nu_jv_getattr(C, n, obj, n->name, out);
    } else if (n->kind == JN_SLICE) {
        ok = eval_slice(C, S, n, obj, out);
    } else {
        ok = eval(C, S, n->kids[1], &key);
        if (ok) {
            const jnode *k = n->kids[1];
            const char *name =
                k->kind == JN_CONST && k->value.type == JV_STR ? nu_jv_str(k->value)->data : NULL;
            ok = nu_jv_getitem(C, n, obj, key, name, out);
            nu_jv_unref(C, key);
        }
    }
    nu_jv_unref(C, obj);
    return ok;
}

static bool eval_call(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    nu_jv callee;
    nu_jargs a;
    if (!eval(C, S, n->kids[0], &callee)) return false;
    if (!eval_args(C, S, n, 1, &a)) {
        nu_jv_unref(C, callee);
        return false;
    }
    bool ok = nu_jcall_value(C, n, callee, &a, out);
    nu_jargs_release(C, &a);
    nu_jv_unref(C, callee);
    return ok;
}

/* Runs filter node n on input (borrowed) with n's arguments. */
static bool run_filter(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv input, nu_jv *out) {
    nu_jargs a;
    if (!eval_args(C, S, n, 1, &a)) return false;
    bool ok = n->filter->fn(C, n, input, &a, out);
    nu_jargs_release(C, &a);
    return ok;
}

/* `expr | filter(args)`. */
static bool eval_filter(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    nu_jv input;
    if (!eval(C, S, n->kids[0], &input)) return false;
    bool ok = run_filter(C, S, n, input, out);
    nu_jv_unref(C, input);
    return ok;
}

/* A block's filter chain (`{% filter a | b %}`, `{% set x | a %}`): the
 * innermost filter, whose subject is NULL, gets value. */
static bool apply_block_filters(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv value, nu_jv *out) {
    if (n->kids[0] == NULL) return run_filter(C, S, n, value, out);
    nu_jv inner;
    if (!apply_block_filters(C, S, n->kids[0], value, &inner)) return false;
    bool ok = run_filter(C, S, n, inner, out);
    nu_jv_unref(C, inner);
    return ok;
}

static bool eval_test(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    nu_jv value;
    nu_jargs a;
    if (!eval(C, S, n->kids[0], &value)) return false;
    if (!eval_args(C, S, n, 1, &a)) {
        nu_jv_unref(C, value);
        return false;
    }
    bool r = false;
    bool ok = n->test->fn(C, n, value, &a, &r);
    nu_jargs_release(C, &a);
    nu_jv_unref(C, value);
    if (ok) *out = nu_jv_bool((n->flags & JNF_NEGATED) ? !r : r);
    return ok;
}

/* and / or return one of their operands, like Python. */
static bool eval_logic(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    nu_jv a;
    if (!eval(C, S, n->kids[0], &a)) return false;
    bool t = nu_jv_truthy(a);
    if ((n->kind == JN_AND) != t) {
        *out = a;
        return true;
    }
    nu_jv_unref(C, a);
    return eval(C, S, n->kids[1], out);
}

static bool eval_cond(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    nu_jv c;
    if (!eval(C, S, n->kids[1], &c)) return false;
    bool t = nu_jv_truthy(c);
    nu_jv_unref(C, c);
    if (t) return eval(C, S, n->kids[0], out);
    if (n->kids[2]) return eval(C, S, n->kids[2], out);
    *out = nu_jv_undef();
    return true;
}

static bool eval_list(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    if (!nu_jv_new_list(C, n, n->n_kids, out)) return false;
    if (n->kind == JN_TUPLE) out->u.o->flags |= JO_TUPLE;
    for (uint32_t k = 0; k < n->n_kids; k++) {
        nu_jv item;
        if (!eval(C, S, n->kids[k], &item) || !nu_jlist_push(C, n, nu_jv_list(*out), item)) {
            nu_jv_unref(C, *out);
            return false;
        }
    }
    return true;
}

static bool eval_dict(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    if (!nu_jv_new_dict(C, n, out)) return false;
    for (uint32_t k = 0; k + 1 < n->n_kids; k += 2) {
        nu_jv key, val;
        if (!eval(C, S, n->kids[k], &key)) goto fail;
        if ((key.type == JV_LIST && !nu_jv_is_tuple(key)) || key.type == JV_DICT) {
            nu_jfail(C, n->kids[k], "unhashable type: '%s'", nu_jv_type_name(key));
            nu_jv_unref(C, key);
            goto fail;
        }
        if (!eval(C, S, n->kids[k + 1], &val)) {
            nu_jv_unref(C, key);
            goto fail;
        }
        if (!nu_jdict_set(C, n, nu_jv_dict(*out), key, val)) goto fail;
    }
    return true;
fail:
    nu_jv_unref(C, *out);
    return false;
}

static bool eval_inner(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    switch (n->kind) {
    case JN_CONST: *out = nu_jv_ref(n->value); return true;
    case JN_NAME: return eval_name(C, S, n, out);
    case JN_GETATTR:
    case JN_GETITEM:
    case JN_SLICE: return eval_access(C, S, n, out);
    case JN_CALL: return eval_call(C, S, n, out);
    case JN_FILTER: return eval_filter(C, S, n, out);
    case JN_TEST: return eval_test(C, S, n, out);
    case JN_AND:
    case JN_OR: return eval_logic(C, S, n, out);
    case JN_COND: return eval_cond(C, S, n, out);
    case JN_LIST:
    case JN_TUPLE: return eval_list(C, S, n, out);
    case JN_DICT: return eval_dict(C, S, n, out);
    case JN_UNARY: {
        nu_jv a;
        if (!eval(C, S, n->kids[0], &a)) return false;
        bool ok = unary(C, n, (jop)n->op, a, out);
        nu_jv_unref(C, a);
        return ok;
    }
    case JN_BINARY: {
        nu_jv a, b;
        if (!eval(C, S, n->kids[0], &a)) return false;
        if (!eval(C, S, n->kids[1], &b)) {
            nu_jv_unref(C, a);
            return false;
        }
        bool ok = binop(C, n, (jop)n->op, a, b, out);
        nu_jv_unref(C, a);
        nu_jv_unref(C, b);
        return ok;
    }
    default: return nu_jfail(C, n, "internal error: not an expression");
    }
}

/* Evaluates an expression to a new reference in *out (untouched on error). */
static bool eval(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv *out) {
    if (!nu_jstep(C, n) || !enter(C, n)) return false;
    bool ok = eval_inner(C, S, n, out);
    C->depth--;
    return ok && !C->failed;
}

/* ------------------------------------------------------------------------ */
/* Calls: macros, recursive loops                                           */
/* ------------------------------------------------------------------------ */

/* Runs body with output going to a fresh buffer, returned as a string. */
static bool render_to_string(nu_jctx *C, nu_jscope *S, const jnode *body, const jnode *at,
                             nu_jv *out) {
    nu_buf buf = {.limit = C->limits.max_output};
    nu_buf *saved = C->out;
    C->out = &buf;
    bool ok = exec(C, S, body);
    C->out = saved;
    C->loop_control = 0;
    if (!ok) {
        nu_buf_free(&buf);
        return false;
    }
    return nu_jv_new_str_from_buf(C, at, &buf, out);
}

/* Binds a macro's parameters in its new scope. Missing ones take their
 * default (evaluated in the new scope) or are undefined. */
static bool bind_params(nu_jctx *C, const jnode *at, jmacro *m, nu_jscope *S, const nu_jargs *a) {
    const jnode *node = m->node;
    uint32_t n_params = node->n_kids - 1;
    bool varargs = node->flags & JNF_USES_VARARGS, kwargs = node->flags & JNF_USES_KWARGS;
    if (a->n_pos > n_params && !varargs)
        return nu_jfail(C, at, "macro '%s' takes not more than %u argument(s)", node->name,
                        n_params);
    nu_jv extra_pos, extra_kw;
    if (!nu_jv_new_list(C, at, 0, &extra_pos)) return false;
    extra_pos.u.o->flags |= JO_TUPLE;
    if (!nu_jscope_set(C, at, S, "varargs", extra_pos)) return false;
    if (!nu_jv_new_dict(C, at, &extra_kw)) return false;
    if (!nu_jscope_set(C, at, S, "kwargs", extra_kw)) return false;
    for (size_t i = n_params; i < a->n_pos; i++)
        if (!nu_jlist_push(C, at, nu_jv_list(extra_pos), nu_jv_ref(a->pos[i]))) return false;
    for (uint32_t p = 0; p < n_params; p++) {
        const jnode *param = node->kids[p + 1];
        nu_jv v = nu_jv_undef();
        bool given = false;
        if (p < a->n_pos) {
            v = nu_jv_ref(a->pos[p]);
            given = true;
        }
        for (size_t k = 0; k < a->n_kw && !given; k++) {
            if (strcmp(a->kw_names[k], param->name) != 0) continue;
            v = nu_jv_ref(a->kw[k]);
            given = true;
        }
        if (!given && param->kind == JN_KWARG && !eval(C, S, param->kids[0], &v)) return false;
        if (!given && param->kind != JN_KWARG) {
            v.hint = JU_NAME;
            v.u.name = param->name;
        }
        if (!nu_jscope_set(C, at, S, param->name, v)) return false;
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        const char *name = a->kw_names[k];
        bool known = false;
        for (uint32_t p = 0; p < n_params && !known; p++)
            known = !strcmp(node->kids[p + 1]->name, name);
        if (known) continue;
        if (!strcmp(name, "caller") && (node->flags & JNF_USES_CALLER)) {
            if (!nu_jscope_set(C, at, S, "caller", nu_jv_ref(a->kw[k]))) return false;
            continue;
        }
        if (!kwargs)
            return nu_jfail(C, at, "macro '%s' takes no keyword argument '%s'", node->name, name);
        nu_jv key;
        if (!nu_jv_new_str(C, at, name, strlen(name), &key)) return false;
        if (!nu_jdict_set(C, at, nu_jv_dict(extra_kw), key, nu_jv_ref(a->kw[k]))) return false;
    }
    return true;
}

bool nu_jcall_macro(nu_jctx *C, const jnode *at, jmacro *m, const nu_jargs *a, nu_jv *out) {
    if (!enter(C, at)) return false;
    nu_jscope *S = nu_jscope_new(C, at, m->scope);
    bool ok = S && bind_params(C, at, m, S, a) && render_to_string(C, S, m->node->kids[0], at, out);
    if (S) nu_jobj_unref(C, &S->h);
    C->depth--;
    return ok;
}

static bool run_loop(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv items, int depth0);

/* loop(items) inside a recursive loop: the loop body again, one level deeper,
 * rendered to a string. */
static bool call_loop(nu_jctx *C, const jnode *at, jloop *l, const nu_jargs *a, nu_jv *out) {
    if (!(l->node->flags & JNF_RECURSIVE))
        return nu_jfail(C, at,
                        "tried to call a non-recursive loop (add 'recursive' to the for tag)");
    if (a->n_pos != 1 || a->n_kw) return nu_jfail(C, at, "loop() takes exactly one argument");
    nu_jv items;
    if (!enter(C, at)) return false;
    bool ok = nu_jv_iterate(C, at, a->pos[0], &items);
    if (ok) {
        nu_buf buf = {.limit = C->limits.max_output};
        nu_buf *saved = C->out;
        C->out = &buf;
        ok = run_loop(C, l->scope, l->node, items, l->depth0 + 1);
        C->out = saved;
        nu_jv_unref(C, items);
        if (ok)
            ok = nu_jv_new_str_from_buf(C, at, &buf, out);
        else
            nu_buf_free(&buf);
    }
    C->depth--;
    return ok;
}

bool nu_jcall_value(nu_jctx *C, const jnode *at, nu_jv callee, const nu_jargs *a, nu_jv *out) {
    switch (callee.type) {
    case JV_MACRO: return nu_jcall_macro(C, at, (jmacro *)callee.u.o, a, out);
    case JV_FUNC: return nu_jinja_call_function(C, at, (jfunc *)callee.u.o, a, out);
    case JV_LOOP: return call_loop(C, at, (jloop *)callee.u.o, a, out);
    case JV_UNDEF: return nu_jfail_undefined(C, at, callee);
    default: return nu_jfail(C, at, "'%s' object is not callable", nu_jv_type_name(callee));
    }
}

/* ------------------------------------------------------------------------ */
/* Statements                                                               */
/* ------------------------------------------------------------------------ */

/* Writes bytes to the current output, failing at the output limit. */
static bool emit(nu_jctx *C, const jnode *at, const char *s, size_t n) {
    nu_buf_add(C->out, s, n);
    if (C->out->failed)
        return nu_jfail_status(C, at, NU_ERR_UNSUPPORTED, "output too long (limit %zu bytes)",
                               C->limits.max_output);
    return true;
}

/* Assigns v (taken) to a target: a name, a tuple of names (unpacking), or
 * namespace.attribute. */
static bool assign(nu_jctx *C, nu_jscope *S, nu_jscope *eval_scope, const jnode *target, nu_jv v) {
    if (target->kind == JN_NAME) return nu_jscope_set(C, target, S, target->name, v);
    if (target->kind == JN_GETATTR) {
        nu_jv *ns = nu_jscope_lookup(eval_scope, target->kids[0]->name);
        if (!ns || !nu_jv_is_namespace(*ns)) {
            nu_jv_unref(C, v);
            return nu_jfail(C, target, "cannot assign attribute on non-namespace object");
        }
        nu_jv key;
        if (!nu_jv_new_str(C, target, target->name, strlen(target->name), &key)) {
            nu_jv_unref(C, v);
            return false;
        }
        return nu_jdict_set(C, target, nu_jv_dict(*ns), key, v);
    }
    nu_jv items;
    bool ok = nu_jv_iterate(C, target, v, &items);
    nu_jv_unref(C, v);
    if (!ok) return false;
    nu_jlist *l = nu_jv_list(items);
    if (l->len != target->n_kids) {
        size_t n = l->len;
        nu_jv_unref(C, items);
        return nu_jfail(C, target, "cannot unpack %zu values into %u names", n, target->n_kids);
    }
    for (uint32_t k = 0; k < target->n_kids && ok; k++)
        ok = assign(C, S, eval_scope, target->kids[k], nu_jv_ref(l->items[k]));
    nu_jv_unref(C, items);
    return ok;
}

/* Writes str(v) to the output. */
static bool print_value(nu_jctx *C, const jnode *at, nu_jv v) {
    if (v.type == JV_STR) return emit(C, at, nu_jv_str(v)->data, nu_jv_str(v)->len);
    nu_buf b = {.limit = C->limits.max_output};
    bool ok = nu_jv_print(C, at, &b, v);
    if (ok && b.failed) ok = nu_jfail_status(C, at, NU_ERR_UNSUPPORTED, "output too long");
    ok = ok && emit(C, at, b.data ? b.data : "", b.len);
    nu_buf_free(&b);
    return ok;
}

static bool exec_output(nu_jctx *C, nu_jscope *S, const jnode *n) {
    nu_jv v;
    if (!eval(C, S, n->kids[0], &v)) return false;
    bool ok = print_value(C, n, v);
    nu_jv_unref(C, v);
    return ok;
}

static bool exec_if(nu_jctx *C, nu_jscope *S, const jnode *n) {
    nu_jv c;
    if (!eval(C, S, n->kids[0], &c)) return false;
    bool t = nu_jv_truthy(c);
    nu_jv_unref(C, c);
    if (t) return exec(C, S, n->kids[1]);
    return n->kids[2] ? exec(C, S, n->kids[2]) : true;
}

/* Items of the loop that pass its `if` filter (evaluated without `loop`). */
static bool filter_items(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv items, nu_jv *out) {
    if (!nu_jv_new_list(C, n, 0, out)) return false;
    nu_jlist *l = nu_jv_list(items);
    for (size_t i = 0; i < l->len; i++) {
        nu_jscope *it = nu_jscope_new(C, n, S);
        nu_jv c = nu_jv_undef();
        bool ok = it && assign(C, it, it, n->kids[0], nu_jv_ref(l->items[i])) &&
                  eval(C, it, n->kids[2], &c);
        if (it) nu_jobj_unref(C, &it->h);
        if (ok && nu_jv_truthy(c))
            ok = nu_jlist_push(C, n, nu_jv_list(*out), nu_jv_ref(l->items[i]));
        nu_jv_unref(C, c);
        if (!ok) return false;
    }
    return true;
}

/* One iteration: a fresh scope with the target and `loop`, then the body. */
static bool loop_iteration(nu_jctx *C, nu_jscope *S, const jnode *n, jloop *l) {
    nu_jscope *it = nu_jscope_new(C, n, S);
    if (!it) return false;
    l->h.refs++;
    bool ok = nu_jscope_set(C, n, it, "loop", nu_jv_obj(JV_LOOP, l)) &&
              assign(C, it, it, n->kids[0], nu_jv_ref(nu_jv_list(l->items)->items[l->index0])) &&
              exec(C, it, n->kids[3]);
    nu_jobj_unref(C, &it->h);
    return ok;
}

/* Runs the body of for loop n over items (a list). */
static bool run_loop(nu_jctx *C, nu_jscope *S, const jnode *n, nu_jv items, int depth0) {
    if (nu_jv_list(items)->len == 0) return n->kids[4] ? exec(C, S, n->kids[4]) : true;
    jloop *l = nu_jctx_alloc_obj(C, n, JK_LOOP, sizeof(jloop));
    if (!l) return false;
    l->items = nu_jv_ref(items);
    l->depth0 = depth0;
    l->node = n;
    l->scope = S;
    S->h.refs++;
    bool ok = true;
    for (size_t i = 0; ok && i < nu_jv_list(items)->len; i++) {
        l->index0 = i;
        ok = nu_jstep(C, n) && loop_iteration(C, S, n, l);
        if (C->loop_control == LOOP_BREAK) {
            C->loop_control = 0;
            break;
        }
        C->loop_control = 0;
    }
    nu_jobj_unref(C, &l->h);
    return ok;
}

static bool exec_for(nu_jctx *C, nu_jscope *S, const jnode *n) {
    nu_jv iterable, items;
    if (!eval(C, S, n->kids[1], &iterable)) return false;
    bool ok = nu_jv_iterate(C, n->kids[1], iterable, &items);
    nu_jv_unref(C, iterable);
    if (!ok) return false;
    if (n->kids[2]) {
        nu_jv filtered;
        ok = filter_items(C, S, n, items, &filtered);
        nu_jv_unref(C, items);
        if (!ok) return false;
        items = filtered;
    }
    ok = run_loop(C, S, n, items, 0);
    nu_jv_unref(C, items);
    return ok;
}

static bool exec_set(nu_jctx *C, nu_jscope *S, const jnode *n) {
    nu_jv v;
    if (n->kind == JN_SET) {
        if (!eval(C, S, n->kids[1], &v)) return false;
    } else {
        if (!render_to_string(C, S, n->kids[1], n, &v)) return false;
        if (n->kids[2]) {
            nu_jv filtered;
            bool ok = apply_block_filters(C, S, n->kids[2], v, &filtered);
            nu_jv_unref(C, v);
            if (!ok) return false;
            v = filtered;
        }
    }
    return assign(C, S, S, n->kids[0], v);
}

/* A macro definition binds a macro value (closing over S) to its name. */
static bool exec_macro(nu_jctx *C, nu_jscope *S, const jnode *n) {
    jmacro *m = nu_jctx_alloc_obj(C, n, JK_MACRO, sizeof(jmacro));
    if (!m) return false;
    m->node = n;
    m->scope = S;
    S->h.refs++;
    return nu_jscope_set(C, n, S, n->name, nu_jv_obj(JV_MACRO, m));
}

/* {% call m(args) %}body{% endcall %}: m is called with caller= a macro
 * rendering body. */
static bool exec_call_block(nu_jctx *C, nu_jscope *S, const jnode *n) {
    const jnode *call = n->kids[0];
    jmacro *caller = nu_jctx_alloc_obj(C, n, JK_MACRO, sizeof(jmacro));
    if (!caller) return false;
    caller->node = n->kids[1];
    caller->scope = S;
    S->h.refs++;
    nu_jv callee, result;
    nu_jargs a;
    bool ok = eval(C, S, call->kids[0], &callee);
    if (ok && !eval_args(C, S, call, 1, &a)) {
        nu_jv_unref(C, callee);
        ok = false;
    }
    if (!ok) {
        nu_jobj_unref(C, &caller->h);
        return false;
    }
    if (a.n_kw < JARGS_MAX) {
        a.kw_names[a.n_kw] = "caller";
        a.kw[a.n_kw++] = nu_jv_obj(JV_MACRO, caller);
    } else {
        nu_jobj_unref(C, &caller->h);
    }
    ok = nu_jcall_value(C, n, callee, &a, &result);
    nu_jargs_release(C, &a);
    nu_jv_unref(C, callee);
    if (!ok) return false;
    ok = print_value(C, n, result);
    nu_jv_unref(C, result);
    return ok;
}

static bool exec_filter_block(nu_jctx *C, nu_jscope *S, const jnode *n) {
    nu_jv body, result;
    if (!render_to_string(C, S, n->kids[1], n, &body)) return false;
    bool ok = apply_block_filters(C, S, n->kids[0], body, &result);
    nu_jv_unref(C, body);
    if (!ok) return false;
    ok = print_value(C, n, result);
    nu_jv_unref(C, result);
    return ok;
}

/* {% with a = x %}: the values are computed in the outer scope, the body
 * runs in a new one. */
static bool exec_with(nu_jctx *C, nu_jscope *S, const jnode *n) {
    nu_jscope *inner = nu_jscope_new(C, n, S);
    if (!inner) return false;
    bool ok = true;
    for (uint32_t k = 1; k < n->n_kids && ok; k++) {
        nu_jv v;
        ok = eval(C, S, n->kids[k]->kids[1], &v) && assign(C, inner, S, n->kids[k]->kids[0], v);
    }
    ok = ok && exec(C, inner, n->kids[0]);
    nu_jobj_unref(C, &inner->h);
    return ok;
}

static bool exec_body(nu_jctx *C, nu_jscope *S, const jnode *n) {
    for (uint32_t k = 0; k < n->n_kids; k++) {
        if (!exec(C, S, n->kids[k])) return false;
        if (C->loop_control) return true;
    }
    return true;
}

static bool exec_inner(nu_jctx *C, nu_jscope *S, const jnode *n) {
    switch (n->kind) {
    case JN_BODY: return exec_body(C, S, n);
    case JN_TEXT: return emit(C, n, n->text, n->text_len);
    case JN_OUTPUT: return exec_output(C, S, n);
    case JN_IF: return exec_if(C, S, n);
    case JN_FOR: return exec_for(C, S, n);
    case JN_SET:
    case JN_SET_BLOCK: return exec_set(C, S, n);
    case JN_MACRO: return exec_macro(C, S, n);
    case JN_CALL_BLOCK: return exec_call_block(C, S, n);
    case JN_FILTER_BLOCK: return exec_filter_block(C, S, n);
    case JN_WITH: return exec_with(C, S, n);
    case JN_BREAK: C->loop_control = LOOP_BREAK; return true;
    case JN_CONTINUE: C->loop_control = LOOP_CONTINUE; return true;
    default: return nu_jfail(C, n, "internal error: not a statement");
    }
}

static bool exec(nu_jctx *C, nu_jscope *S, const jnode *n) {
    if (!nu_jstep(C, n) || !enter(C, n)) return false;
    bool ok = exec_inner(C, S, n);
    C->depth--;
    return ok && !C->failed;
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                              */
/* ------------------------------------------------------------------------ */

nu_jinja_limits nu_jinja_default_limits(void) {
    nu_jinja_limits l = {
        .max_steps = 5000000,
        .max_alloc_bytes = (uint64_t)256 << 20,
        .max_output = (size_t)64 << 20,
        .max_depth = 400,
    };
    return l;
}

/* The render variables (members of vars) in the top-level scope. */
static bool bind_vars(nu_jctx *C, nu_jscope *S, const cJSON *vars) {
    if (!vars) return true;
    if (!cJSON_IsObject(vars)) return nu_jfail(C, NULL, "render variables must be a JSON object");
    for (const cJSON *it = vars->child; it; it = it->next) {
        nu_jv v;
        if (!it->string || !nu_jv_from_json(C, NULL, it, &v, 0)) return false;
        if (!nu_jscope_set(C, NULL, S, it->string, v)) return false;
    }
    return true;
}

/* The clock strftime_now reads: SOURCE_DATE_EPOCH when set, else now. */
static time_t render_clock(void) {
    const char *e = getenv("SOURCE_DATE_EPOCH");
    if (e && *e) {
        char *end;
        long long v = strtoll(e, &end, 10);
        if (*end == 0) return (time_t)v;
    }
    return time(NULL);
}

nu_status nu_jinja_render(const nu_jinja_template *t, const cJSON *vars,
                          const nu_jinja_limits *limits, char **out, size_t *out_len,
                          nu_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return nu_fail(err, NU_ERR_INVALID_ARG, "no template");
    nu_jctx C = {.tpl = t, .limits = limits ? *limits : nu_jinja_default_limits()};
    C.live.next = C.live.prev = &C.live;
    C.now = render_clock();
    nu_buf buf = {.limit = C.limits.max_output};
    C.out = &buf;
    nu_jscope *root = nu_jscope_new(&C, NULL, NULL);
    bool ok = root && bind_vars(&C, root, vars) && exec(&C, root, t->root);
    nu_jctx_free_all(&C);
    if (!ok || C.failed) {
        nu_buf_free(&buf);
        return nu_fail(err, C.failed ? C.status : NU_ERR_FORMAT, "chat template %s",
                       C.failed ? C.message : "failed");
    }
    if (!buf.data) {
        buf.data = malloc(1);
        if (!buf.data) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
        buf.data[0] = 0;
    }
    *out = buf.data;
    if (out_len) *out_len = buf.len;
    return NU_OK;
}
