/* cli_parse.c - one parser and one help printer for every command's option
 * tables (cli_parse.h explains the tables). */
#include "cli_parse.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Help lines are wrapped to this width; the names column is at most
 * NAMES_MAX wide (longer names put their help on the next line). */
enum { HELP_WIDTH = 100, NAMES_MAX = 30, NAMES_INDENT = 2 };

/* Integer ranges within this magnitude are shown in the help; wider ones
 * ([1, 2^30] and such) are sanity bounds rather than advice, and the error
 * for a value outside them names them anyway. */
#define SHOWN_RANGE 1000000

/* ------------------------------------------------------------------------ */
/* Walking the tables                                                       */
/* ------------------------------------------------------------------------ */

/* One row and the offset of its section's struct. */
typedef struct found_option {
    const cli_option *row;
    size_t base;
} found_option;

#define FOR_EACH_SECTION(cmd, s) for (const cli_section *s = (cmd)->sections; s && s->options; s++)
#define FOR_EACH_ROW(s, r) for (const cli_option *r = (s)->options; r->name; r++)

static bool row_has_name(const cli_option *r, const char *name) {
    return !strcmp(r->name, name) || (r->short_name && !strcmp(r->short_name, name)) ||
           (r->alias && !strcmp(r->alias, name));
}

static bool find_option(const cli_command *cmd, const char *name, found_option *out) {
    FOR_EACH_SECTION(cmd, s) {
        FOR_EACH_ROW(s, r) {
            if (row_has_name(r, name)) {
                *out = (found_option){r, s->base};
                return true;
            }
        }
    }
    return false;
}

static bool takes_value(const cli_option *r) {
    return r->placeholder != NULL;
}

/* "generate" or "watermark detect" for messages; "" for nucleus itself. */
static const char *command_path(const cli_command *cmd) {
    return cmd->name ? cmd->name : "";
}

/* The word that selects a subcommand: the last word of its name. */
static const char *command_word(const cli_command *cmd) {
    const char *space = strrchr(cmd->name, ' ');
    return space ? space + 1 : cmd->name;
}

/* "see nucleus generate --help" */
static void see_help(char *buf, size_t cap, const cli_command *cmd) {
    snprintf(buf, cap, "see nucleus %s%s--help", command_path(cmd), cmd->name ? " " : "");
}

/* ------------------------------------------------------------------------ */
/* Field access                                                             */
/* ------------------------------------------------------------------------ */

static void *field_at(void *base, cli_field f) {
    return (char *)base + f.offset;
}

/* The range of values a field of this type holds; false for non-numbers. */
static bool store_limits(cli_store s, long long *lo, long long *hi) {
    switch (s) {
    case CLI_STORE_BOOL: *lo = 0, *hi = 1; return true;
    case CLI_STORE_INT: *lo = INT_MIN, *hi = INT_MAX; return true;
    case CLI_STORE_UINT: *lo = 0, *hi = UINT_MAX; return true;
    case CLI_STORE_LONG: *lo = LONG_MIN, *hi = LONG_MAX; return true;
    case CLI_STORE_LLONG: *lo = LLONG_MIN, *hi = LLONG_MAX; return true;
    case CLI_STORE_ULONG:
    case CLI_STORE_ULLONG: *lo = 0, *hi = LLONG_MAX; return true;
    /* integers are exact in a double up to 2^53, in a float up to 2^24 */
    case CLI_STORE_FLOAT: *lo = -(1LL << 24), *hi = 1LL << 24; return true;
    case CLI_STORE_DOUBLE: *lo = -(1LL << 53), *hi = 1LL << 53; return true;
    default: return false;
    }
}

/* Writes an integer the table check has shown to fit the field's type. */
static void store_integer(void *p, cli_store s, long long v) {
    switch (s) {
    case CLI_STORE_BOOL: *(bool *)p = v != 0; break;
    case CLI_STORE_INT: *(int *)p = (int)v; break;
    case CLI_STORE_UINT: *(unsigned *)p = (unsigned)v; break;
    case CLI_STORE_LONG: *(long *)p = (long)v; break;
    case CLI_STORE_LLONG: *(long long *)p = v; break;
    case CLI_STORE_ULONG: *(unsigned long *)p = (unsigned long)v; break;
    case CLI_STORE_ULLONG: *(unsigned long long *)p = (unsigned long long)v; break;
    case CLI_STORE_FLOAT: *(float *)p = (float)v; break;
    case CLI_STORE_DOUBLE: *(double *)p = (double)v; break;
    default: break;
    }
}

/* The field's value as text (the defaults in the help); false for NULL text. */
static bool format_field(const void *p, cli_store s, char *buf, size_t cap) {
    switch (s) {
    case CLI_STORE_BOOL: snprintf(buf, cap, "%s", *(const bool *)p ? "true" : "false"); break;
    case CLI_STORE_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
    case CLI_STORE_UINT: snprintf(buf, cap, "%u", *(const unsigned *)p); break;
    case CLI_STORE_LONG: snprintf(buf, cap, "%ld", *(const long *)p); break;
    case CLI_STORE_LLONG: snprintf(buf, cap, "%lld", *(const long long *)p); break;
    case CLI_STORE_ULONG: snprintf(buf, cap, "%lu", *(const unsigned long *)p); break;
    case CLI_STORE_ULLONG: snprintf(buf, cap, "%llu", *(const unsigned long long *)p); break;
    case CLI_STORE_FLOAT: snprintf(buf, cap, "%g", (double)*(const float *)p); break;
    case CLI_STORE_DOUBLE: snprintf(buf, cap, "%g", *(const double *)p); break;
    case CLI_STORE_TEXT:
        if (!*(const char *const *)p) return false;
        snprintf(buf, cap, "%s", *(const char *const *)p);
        break;
    default: return false;
    }
    return true;
}

/* The field's value as an integer (to name an enum's default). */
static long long read_integer(const void *p, cli_store s) {
    switch (s) {
    case CLI_STORE_BOOL: return *(const bool *)p;
    case CLI_STORE_INT: return *(const int *)p;
    case CLI_STORE_UINT: return *(const unsigned *)p;
    case CLI_STORE_LONG: return *(const long *)p;
    case CLI_STORE_LLONG: return *(const long long *)p;
    case CLI_STORE_ULONG: return (long long)*(const unsigned long *)p;
    case CLI_STORE_ULLONG: return (long long)*(const unsigned long long *)p;
    default: return 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum number_status { NUMBER_OK, NUMBER_MALFORMED, NUMBER_OUT_OF_RANGE } number_status;

/* A decimal integer: an optional sign, then digits and nothing else. Any
 * value of long long is read exactly, LLONG_MIN included; beyond it is
 * NUMBER_OUT_OF_RANGE (not clamped). */
static number_status read_int(const char *s, long long *out) {
    const char *p = s;
    bool negative = *p == '-';
    if (*p == '-' || *p == '+') p++;
    if (!isdigit((unsigned char)*p)) return NUMBER_MALFORMED;
    unsigned long long magnitude = 0, limit = negative ? (unsigned long long)LLONG_MAX + 1
                                                       : (unsigned long long)LLONG_MAX;
    bool too_big = false;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned digit = (unsigned)(*p - '0');
        if (magnitude > (limit - digit) / 10) too_big = true;
        if (!too_big) magnitude = magnitude * 10 + digit;
    }
    if (*p) return NUMBER_MALFORMED;
    if (too_big) return NUMBER_OUT_OF_RANGE;
    if (negative)
        *out = magnitude == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)magnitude;
    else
        *out = (long long)magnitude;
    return NUMBER_OK;
}

/* A finite decimal number (digits, sign, point, exponent; no spaces, no
 * hexadecimal, no inf or nan) that a double holds. */
static number_status read_float(const char *s, double *out) {
    if (!*s) return NUMBER_MALFORMED;
    for (const char *p = s; *p; p++)
        if (!strchr("0123456789+-.eE", *p)) return NUMBER_MALFORMED;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end) return NUMBER_MALFORMED;
    if (errno == ERANGE || !isfinite(v)) return NUMBER_OUT_OF_RANGE;
    *out = v;
    return NUMBER_OK;
}

/* A space the help printer does not break a line at (it prints a space). */
#define NBSP "\x1f"

/* "[0, 1]", "(0, 1]"; with a non-breaking space for the help. */
static void format_float_range(const cli_option *r, const char *space, char *buf, size_t cap) {
    snprintf(buf, cap, "%c%g,%s%g%c", r->open_min ? '(' : '[', r->fmin, space, r->fmax,
             r->open_max ? ')' : ']');
}

/* ------------------------------------------------------------------------ */
/* Reading one value                                                        */
/* ------------------------------------------------------------------------ */

static bool apply_int(const cli_option *r, void *p, const char *value) {
    long long v = 0;
    number_status st = read_int(value, &v);
    if (st == NUMBER_OK && (v < r->min || v > r->max)) st = NUMBER_OUT_OF_RANGE;
    if (st != NUMBER_OK) {
        cli_error("%s expects an integer in [%lld, %lld]; '%s' is %s", r->name, r->min, r->max,
                  value, st == NUMBER_MALFORMED ? "not an integer" : "out of range");
        return false;
    }
    store_integer(p, r->field.store, v);
    return true;
}

static bool in_float_range(const cli_option *r, double v) {
    return (r->open_min ? v > r->fmin : v >= r->fmin) && (r->open_max ? v < r->fmax : v <= r->fmax);
}

static bool apply_float(const cli_option *r, void *p, const char *value) {
    double v = 0;
    number_status st = read_float(value, &v);
    if (st == NUMBER_OK && !in_float_range(r, v)) st = NUMBER_OUT_OF_RANGE;
    /* the range holds for the value as stored too: a float may round it
     * (1e-50 to 0); the ranges are far inside a float's, so the conversion
     * of an in-range value is defined */
    if (st == NUMBER_OK && r->field.store == CLI_STORE_FLOAT && !in_float_range(r, (float)v))
        st = NUMBER_OUT_OF_RANGE;
    if (st != NUMBER_OK) {
        char range[64];
        format_float_range(r, " ", range, sizeof range);
        cli_error("%s expects a number in %s; '%s' is %s", r->name, range, value,
                  st == NUMBER_MALFORMED ? "not a number" : "out of range");
        return false;
    }
    if (r->field.store == CLI_STORE_FLOAT)
        *(float *)p = (float)v;
    else
        *(double *)p = v;
    return true;
}

static bool apply_enum(const cli_option *r, void *p, const char *value) {
    for (const cli_choice *c = r->choices; c->name; c++) {
        if (!strcmp(c->name, value)) {
            store_integer(p, r->field.store, c->value);
            return true;
        }
    }
    char names[256];
    size_t len = 0;
    names[0] = 0;
    for (const cli_choice *c = r->choices; c->name && len < sizeof names; c++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s",
                                c == r->choices ? "" : ", ", c->name);
    cli_error("%s expects one of %s; got '%s'", r->name, names, value);
    return false;
}

static bool apply_string(const cli_option *r, void *p, const char *value) {
    if (r->nonempty && !value[0]) {
        char what[32];
        size_t i = 0;
        for (; r->placeholder[i] && i + 1 < sizeof what; i++)
            what[i] = (char)tolower((unsigned char)r->placeholder[i]);
        what[i] = 0;
        cli_error("%s needs a non-empty %s", r->name, what);
        return false;
    }
    *(const char **)p = value;
    return true;
}

/* Puts one value (NULL for a flag) where row r says, in the section struct
 * at base. */
static bool apply(const cli_option *r, void *base, const char *value) {
    void *p = field_at(base, r->field);
    if (r->max_count) {
        size_t n = (size_t)read_integer(field_at(base, r->count), r->count.store);
        if (n >= r->max_count) {
            cli_error("at most %zu %s options", r->max_count, r->name);
            return false;
        }
        p = (char *)p + n * r->elem_size;
    }
    bool ok = true;
    switch (r->kind) {
    case CLI_FLAG: store_integer(p, r->field.store, 1); break;
    case CLI_UNSET: store_integer(p, r->field.store, 0); break;
    case CLI_INT: ok = apply_int(r, p, value); break;
    case CLI_FLOAT: ok = apply_float(r, p, value); break;
    case CLI_STRING: ok = apply_string(r, p, value); break;
    case CLI_ENUM: ok = apply_enum(r, p, value); break;
    case CLI_CUSTOM: {
        char why[256] = "invalid value";
        ok = r->parse(p, value, why, sizeof why);
        if (!ok) cli_error("%s: %s", r->name, why);
        break;
    }
    }
    if (!ok) return false;
    if (r->max_count) {
        void *count = field_at(base, r->count);
        store_integer(count, r->count.store, read_integer(count, r->count.store) + 1);
    }
    if (r->given.store == CLI_STORE_BOOL) *(bool *)field_at(base, r->given) = true;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Checking a table                                                         */
/* ------------------------------------------------------------------------ */

static bool table_fail(const cli_command *cmd, const char *name, const char *what) {
    cli_error("internal error: option table of '%s': %s %s", cmd->name ? cmd->name : "nucleus",
              name, what);
    return false;
}

static bool is_long_name(const char *s) {
    return s && s[0] == '-' && s[1] == '-' && s[2] && s[2] != '-' && !strchr(s, '=');
}

static bool is_short_name(const char *s) {
    return s && s[0] == '-' && s[1] && s[1] != '-' && !strchr(s, '=');
}

/* The kind of field each kind of row writes. */
static bool store_fits_kind(const cli_option *r) {
    long long lo, hi;
    cli_store s = r->field.store;
    switch (r->kind) {
    case CLI_FLAG:
    case CLI_UNSET: return store_limits(s, &lo, &hi);
    case CLI_INT:
        return store_limits(s, &lo, &hi) && r->min <= r->max && lo <= r->min && r->max <= hi;
    case CLI_FLOAT:
        return r->fmin < r->fmax &&
               (s == CLI_STORE_DOUBLE ||
                (s == CLI_STORE_FLOAT && fabs(r->fmin) <= FLT_MAX && fabs(r->fmax) <= FLT_MAX));
    case CLI_STRING: return s == CLI_STORE_TEXT;
    case CLI_ENUM:
        if (!store_limits(s, &lo, &hi) || !r->choices || !r->choices[0].name) return false;
        for (const cli_choice *c = r->choices; c->name; c++)
            if (c->value < lo || c->value > hi) return false;
        return true;
    case CLI_CUSTOM: return r->parse != NULL;
    }
    return false;
}

/* True when two rows of the command share a name, or a row uses -h/--help. */
static bool name_taken(const cli_command *cmd, const cli_option *row, const char *name) {
    if (!name) return false;
    if (!strcmp(name, "-h") || !strcmp(name, "--help")) return true;
    FOR_EACH_SECTION(cmd, s) {
        FOR_EACH_ROW(s, r) {
            if (r != row && row_has_name(r, name)) return true;
        }
    }
    return false;
}

/* A table is code: a mistake in one is reported as an internal error before
 * anything is parsed, so that no command runs with a row that has no help,
 * a value without a placeholder, a range its field cannot hold or a name
 * that another row has. */
static bool check_row(const cli_command *cmd, const cli_option *r) {
    bool value_kind = r->kind != CLI_FLAG && r->kind != CLI_UNSET && r->kind != CLI_CUSTOM;
    if (!is_long_name(r->name)) return table_fail(cmd, r->name, "is not a --long-name");
    if (r->short_name && !is_short_name(r->short_name))
        return table_fail(cmd, r->name, "has a short name that is not -x");
    if (r->alias && !is_long_name(r->alias))
        return table_fail(cmd, r->name, "has an alias that is not a --long-name");
    if (name_taken(cmd, r, r->name) || name_taken(cmd, r, r->short_name) ||
        name_taken(cmd, r, r->alias))
        return table_fail(cmd, r->name, "shares a name with another option");
    if (!r->help || !r->help[0]) return table_fail(cmd, r->name, "has no help");
    if (value_kind && !r->placeholder)
        return table_fail(cmd, r->name, "takes a value but has no placeholder");
    if ((r->kind == CLI_FLAG || r->kind == CLI_UNSET) && r->placeholder)
        return table_fail(cmd, r->name, "is a flag with a placeholder");
    if (!store_fits_kind(r))
        return table_fail(cmd, r->name, "writes a field of the wrong type or range");
    long long lo, hi;
    if (r->max_count && (!r->elem_size || !store_limits(r->count.store, &lo, &hi)))
        return table_fail(cmd, r->name, "is a list without an element size or count");
    if (r->given.store != CLI_STORE_NONE && r->given.store != CLI_STORE_BOOL)
        return table_fail(cmd, r->name, "records that it was given in a field that is not bool");
    return true;
}

static bool check_command(const cli_command *cmd) {
    FOR_EACH_SECTION(cmd, s) {
        FOR_EACH_ROW(s, r) {
            if (!check_row(cmd, r)) return false;
        }
    }
    for (const cli_positional *p = cmd->positionals; p && p->name; p++)
        if (p->field.store != CLI_STORE_TEXT || !p->help)
            return table_fail(cmd, p->name, "is a positional argument without text field or help");
    return true;
}

/* ------------------------------------------------------------------------ */
/* Suggestions                                                              */
/* ------------------------------------------------------------------------ */

/* Words longer than this are not compared (no name is near it). */
enum { COMPARED_MAX = 64 };

/* Edit distance with adjacent transpositions (optimal string alignment):
 * a typo of one insertion, deletion, substitution or swap costs 1. */
static size_t edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > COMPARED_MAX || m > COMPARED_MAX) return SIZE_MAX;
    size_t d[COMPARED_MAX + 1][COMPARED_MAX + 1];
    for (size_t i = 0; i <= n; i++) d[i][0] = i;
    for (size_t j = 0; j <= m; j++) d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

const char *cli_closest(const char *word, const char *const *names, size_t n) {
    const char *best = NULL, *prefixed = NULL;
    size_t best_d = SIZE_MAX, n_prefixed = 0, len = strlen(word);
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, names[i]);
        if (d < best_d) best_d = d, best = names[i];
        if (!strncmp(names[i], word, len)) n_prefixed++, prefixed = names[i];
    }
    /* Up to a third of the word past its dashes may be wrong: "--tmep" finds
     * --temp, "--paralel" --parallel; "-x" finds nothing, nor does "--foo"
     * unless a name is that close. A word that begins exactly one name (at
     * least three letters of it) finds that name. */
    size_t dashes = strspn(word, "-"), letters = len - dashes;
    size_t allowed = letters / 3 > 3 ? 3 : letters / 3;
    if (best && best_d <= allowed) return best;
    return n_prefixed == 1 && letters >= 3 ? prefixed : NULL;
}

/* Every name (long, short, alias) of the command's options. */
static size_t option_names(const cli_command *cmd, const char **names, size_t cap) {
    size_t n = 0;
    FOR_EACH_SECTION(cmd, s) {
        FOR_EACH_ROW(s, r) {
            const char *each[] = {r->name, r->short_name, r->alias};
            for (size_t k = 0; k < 3; k++)
                if (each[k] && n < cap) names[n++] = each[k];
        }
    }
    if (n < cap) names[n++] = "--help";
    return n;
}

enum { MAX_NAMES = 512 };

static void unknown_option(const cli_command *cmd, const char *arg, size_t name_len) {
    char word[128], hint[160];
    snprintf(word, sizeof word, "%.*s", (int)(name_len < sizeof word ? name_len : sizeof word - 1),
             arg);
    const char *names[MAX_NAMES];
    const char *close = cli_closest(word, names, option_names(cmd, names, MAX_NAMES));
    if (close)
        snprintf(hint, sizeof hint, "did you mean %s?", close);
    else
        see_help(hint, sizeof hint, cmd);
    cli_error("unknown option '%s' (%s)", word, hint);
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                  */
/* ------------------------------------------------------------------------ */

/* Reads argv[*i], an option, and its value. */
static bool parse_option(const cli_command *cmd, int argc, char **argv, int *i, void *opts) {
    const char *arg = argv[*i], *eq = arg[1] == '-' ? strchr(arg, '=') : NULL;
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    char name[128];
    found_option f = {0};
    if (name_len < sizeof name) {
        memcpy(name, arg, name_len);
        name[name_len] = 0;
    }
    if (name_len >= sizeof name || !find_option(cmd, name, &f)) {
        unknown_option(cmd, arg, name_len);
        return false;
    }
    const char *value = NULL;
    if (takes_value(f.row)) {
        if (eq) {
            value = eq + 1;
        } else if (*i + 1 < argc) {
            value = argv[++*i];
        } else {
            cli_error("%s needs a value: %s %s", name, name, f.row->placeholder);
            return false;
        }
    } else if (eq) {
        cli_error("%s takes no value (got '%s')", name, eq + 1);
        return false;
    }
    return apply(f.row, (char *)opts + f.base, value);
}

static bool is_help(const char *arg) {
    return !strcmp(arg, "-h") || !strcmp(arg, "--help");
}

/* An argument that is an option: "-x...", but not "-" alone. */
static bool is_option(const char *arg) {
    return arg[0] == '-' && arg[1] != 0;
}

/* Parses options from argv[1] on. With stop_at_positional the first
 * positional argument ends the parse (*stop is its index, argc when none);
 * otherwise positionals go to the command's positional fields. Returns true
 * to go on, false with *exit_code set. */
static bool parse_args(const cli_command *cmd, int argc, char **argv, void *opts,
                       bool stop_at_positional, int *stop, int *exit_code) {
    *exit_code = CLI_EXIT_USAGE;
    if (!check_command(cmd)) {
        *exit_code = CLI_EXIT_TABLE;
        return false;
    }
    const cli_positional *next = cmd->positionals;
    bool options_ended = false;
    char hint[160];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_ended && !strcmp(arg, "--")) {
            options_ended = true;
        } else if (!options_ended && is_help(arg)) {
            cli_print_help(cmd, opts, stdout);
            *exit_code = 0;
            return false;
        } else if (!options_ended && is_option(arg)) {
            if (!parse_option(cmd, argc, argv, &i, opts)) return false;
        } else if (stop_at_positional) {
            *stop = i;
            return true;
        } else if (next && next->name) {
            *(const char **)field_at(opts, next->field) = arg;
            next++;
        } else {
            see_help(hint, sizeof hint, cmd);
            cli_error("unexpected argument '%s' (%s)", arg, hint);
            return false;
        }
    }
    if (stop_at_positional) *stop = argc;
    if (next && next->name) {
        cli_error("missing %s (usage: %s)", next->name, cmd->usage);
        return false;
    }
    return true;
}

bool cli_parse(const cli_command *cmd, int argc, char **argv, void *opts, int *exit_code) {
    int stop;
    return parse_args(cmd, argc, argv, opts, false, &stop, exit_code);
}

int cli_dispatch(const cli_command *cmd, int argc, char **argv, void *opts) {
    int at, rc;
    if (!parse_args(cmd, argc, argv, opts, true, &at, &rc)) return rc;
    if (at == argc) return CLI_NO_SUBCOMMAND;
    const char *words[MAX_NAMES];
    size_t n = 0;
    for (const cli_command *const *c = cmd->subcommands; c && *c; c++) {
        if (!strcmp(argv[at], command_word(*c))) return (*c)->run(argc - at, argv + at);
        if (n < MAX_NAMES) words[n++] = command_word(*c);
    }
    char hint[160];
    const char *close = cli_closest(argv[at], words, n);
    if (close)
        snprintf(hint, sizeof hint, "did you mean %s?", close);
    else
        see_help(hint, sizeof hint, cmd);
    cli_error("unknown command '%s' (%s)", argv[at], hint);
    return CLI_EXIT_USAGE;
}

/* ------------------------------------------------------------------------ */
/* Help                                                                     */
/* ------------------------------------------------------------------------ */

/* "-t, --threads N", "    --temp, --temperature X" */
static void row_names(const cli_option *r, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s%s%s%s%s", r->short_name ? r->short_name : "    ",
             r->short_name ? ", " : "", r->name, r->alias ? ", " : "", r->alias ? r->alias : "",
             r->placeholder ? " " : "", r->placeholder ? r->placeholder : "");
}

/* The help text of a row and what the table adds: the default, the range,
 * how often it may be given. */
static void row_text(const cli_option *r, const void *base, char *buf, size_t cap) {
    char def[128] = "", range[96] = "", repeat[64] = "";
    const void *p = (const char *)base + r->field.offset;
    if (r->default_text) {
        snprintf(def, sizeof def, "default: %s", r->default_text);
    } else if (!r->no_default && !r->max_count && r->kind == CLI_ENUM) {
        long long v = read_integer(p, r->field.store);
        for (const cli_choice *c = r->choices; c->name; c++)
            if (c->value == v) snprintf(def, sizeof def, "default %s", c->name);
    } else if (!r->no_default && !r->max_count &&
               (r->kind == CLI_INT || r->kind == CLI_FLOAT || r->kind == CLI_STRING)) {
        char v[96];
        if (format_field(p, r->field.store, v, sizeof v))
            snprintf(def, sizeof def, "default %s", v);
    }
    if (r->kind == CLI_INT && r->min >= -SHOWN_RANGE && r->max <= SHOWN_RANGE)
        snprintf(range, sizeof range, "[%lld," NBSP "%lld]", r->min, r->max);
    if (r->kind == CLI_FLOAT) format_float_range(r, NBSP, range, sizeof range);
    if (r->max_count) snprintf(repeat, sizeof repeat, "repeatable, at most %zu", r->max_count);
    const char *parts[] = {def, range, repeat};
    size_t len = (size_t)snprintf(buf, cap, "%s", r->help);
    bool open = false;
    for (size_t k = 0; k < 3 && len < cap; k++) {
        if (!parts[k][0]) continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", open ? "; " : " (", parts[k]);
        open = true;
    }
    if (open && len < cap) snprintf(buf + len, cap - len, ")");
}

/* Writes text from column `col` (the cursor is there), wrapping at word
 * boundaries to HELP_WIDTH with continuation lines indented to `indent`. */
static void print_wrapped(FILE *out, const char *text, int col, int indent) {
    const char *p = text;
    bool first = true;
    while (*p) {
        const char *end = p;
        while (*end && *end != ' ') end++;
        int word = (int)(end - p);
        if (!first && col + 1 + word > HELP_WIDTH) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        } else if (!first) {
            fputc(' ', out);
            col++;
        }
        for (const char *c = p; c < end; c++) fputc(*c == NBSP[0] ? ' ' : *c, out);
        col += word;
        first = false;
        p = end;
        while (*p == ' ') p++;
    }
    fputc('\n', out);
}

/* Width of the names column: the longest names that fit NAMES_MAX. */
static int names_width(const cli_command *cmd) {
    int width = (int)strlen("-h, --help");
    char names[160];
    FOR_EACH_SECTION(cmd, s) {
        FOR_EACH_ROW(s, r) {
            row_names(r, names, sizeof names);
            int w = (int)strlen(names);
            if (w <= NAMES_MAX && w > width) width = w;
        }
    }
    return width;
}

/* One line per option: names in a column, then the wrapped help. */
static void print_row(FILE *out, const char *names, const char *text, int width) {
    int len = fprintf(out, "%*s%s", NAMES_INDENT, "", names);
    int col = NAMES_INDENT + width + 2;
    if (len > col - 2) {
        fprintf(out, "\n%*s", col, "");
    } else {
        fprintf(out, "%*s", col - len, "");
    }
    print_wrapped(out, text, col, col);
}

void cli_print_help(const cli_command *cmd, const void *opts, FILE *out) {
    int width = names_width(cmd);
    char names[160], text[1024];
    fprintf(out, "usage: %s\n", cmd->usage);
    if (cmd->about) fprintf(out, "\n%s", cmd->about);
    FOR_EACH_SECTION(cmd, s) {
        fputc('\n', out);
        if (s->title) fprintf(out, "%s:\n", s->title);
        FOR_EACH_ROW(s, r) {
            row_names(r, names, sizeof names);
            row_text(r, (const char *)opts + s->base, text, sizeof text);
            print_row(out, names, text, width);
        }
    }
    fputc('\n', out);
    print_row(out, "-h, --help", "this text", width);
    if (cmd->positionals && cmd->positionals->name) {
        fputs("\narguments:\n", out);
        for (const cli_positional *p = cmd->positionals; p->name; p++)
            print_row(out, p->name, p->help, width);
    }
    if (cmd->subcommands) {
        fputs("\ncommands:\n", out);
        for (const cli_command *const *c = cmd->subcommands; *c; c++)
            print_row(out, command_word(*c), (*c)->summary, 10);
    }
    if (cmd->epilog) fprintf(out, "\n%s", cmd->epilog);
}
