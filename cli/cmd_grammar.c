/* cmd_grammar.c - `nucleus grammar`: shows the GBNF a JSON Schema, regex or
 * choice list turns into, checks a grammar, and tells whether a text
 * matches it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct grammar_opts {
    const char *gbnf_file, *schema_file, *regex, *choices, *root, *check, *check_file;
    bool json, print;
    long ws;
} grammar_opts;

static int run_grammar(int argc, char **argv);

static const cli_option source_options[] = {
    {.name = "--gbnf",
     .kind = CLI_STRING,
     .field = CLI_FIELD(grammar_opts, gbnf_file),
     .placeholder = "FILE",
     .help = "a GBNF grammar ('-': standard input)"},
    {.name = "--json-schema",
     .kind = CLI_STRING,
     .field = CLI_FIELD(grammar_opts, schema_file),
     .placeholder = "FILE",
     .help = "a JSON Schema"},
    {.name = "--json",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(grammar_opts, json),
     .help = "any JSON object"},
    {.name = "--regex",
     .kind = CLI_STRING,
     .field = CLI_FIELD(grammar_opts, regex),
     .placeholder = "RE",
     .help = "a regular expression (matching the whole text)"},
    {.name = "--choice",
     .kind = CLI_STRING,
     .field = CLI_FIELD(grammar_opts, choices),
     .placeholder = "A,B,C",
     .help = "one of these strings (\\, for a comma, \\\\ for a backslash)"},
    {0},
};

static const cli_option grammar_options[] = {
    {.name = "--root",
     .kind = CLI_STRING,
     .field = CLI_FIELD(grammar_opts, root),
     .placeholder = "NAME",
     .help = "start rule of a GBNF grammar",
     .default_text = "root"},
    {.name = "--ws",
     .kind = CLI_INT,
     .field = CLI_FIELD(grammar_opts, ws),
     .min = 0,
     .max = 100,
     .placeholder = "N",
     .help = "JSON: allow up to N blanks where JSON allows whitespace"},
    {.name = "--check",
     .kind = CLI_STRING,
     .field = CLI_FIELD(grammar_opts, check),
     .placeholder = "TEXT",
     .help = "say whether TEXT matches (exit 0 when it does, 1 if not)"},
    {.name = "--check-file",
     .kind = CLI_STRING,
     .field = CLI_FIELD(grammar_opts, check_file),
     .placeholder = "FILE",
     .help = "the same for the contents of FILE"},
    {.name = "--print",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(grammar_opts, print),
     .help = "print the grammar even when checking"},
    {0},
};

static const cli_section grammar_sections[] = {
    CLI_OWN_SECTION("SOURCE, one of", source_options),
    CLI_OWN_SECTION(NULL, grammar_options),
    {0},
};

const cli_command grammar_command = {
    .name = "grammar",
    .summary = "show the GBNF of a JSON Schema, regex or choices; check a text",
    .usage = "nucleus grammar SOURCE [--check TEXT | --check-file FILE] [--print]",
    .sections = grammar_sections,
    .epilog = "Without --check the grammar is compiled and its GBNF printed.\n",
    .run = run_grammar,
};

/* Reads the options; false when the command ends (*rc: help or an error). */
static bool parse(grammar_opts *o, int argc, char **argv, int *rc) {
    if (!cli_parse(&grammar_command, argc, argv, o, rc)) return false;
    *rc = CLI_EXIT_USAGE;
    int sources = !!o->gbnf_file + !!o->schema_file + !!o->regex + !!o->choices + o->json;
    if (sources != 1) {
        cli_error("give exactly one of --gbnf, --json-schema, --json, --regex, --choice");
        return false;
    }
    if (o->check && o->check_file) {
        cli_error("give at most one of --check and --check-file");
        return false;
    }
    return true;
}

/* Splits "A,B,C" at unescaped commas (\, is a comma, \\ a backslash) into
 * a NULL-terminated array whose strings live in one buffer. */
static char **split_choices(const char *s, size_t *n) {
    size_t len = strlen(s), count = 1;
    char **list = malloc((len + 2) * sizeof *list), *buf = malloc(len + 1);
    if (!list || !buf) {
        free(list);
        free(buf);
        return NULL;
    }
    char *w = buf;
    list[0] = buf;
    for (const char *p = s; *p; p++) {
        if (p[0] == '\\' && (p[1] == ',' || p[1] == '\\')) {
            *w++ = *++p;
        } else if (*p == ',') {
            *w++ = 0;
            list[count++] = w;
        } else {
            *w++ = *p;
        }
    }
    *w = 0;
    list[count] = NULL;
    *n = count;
    return list;
}

/* The GBNF text of the source (caller frees with nu_gbnf_free or free). */
static char *source_gbnf(const grammar_opts *o, bool *from_file) {
    nu_json_options jo = nu_json_default_options();
    jo.max_whitespace = (int32_t)o->ws;
    nu_error err;
    nu_status st = NU_OK;
    char *text = NULL;
    *from_file = false;
    if (o->gbnf_file) {
        *from_file = true;
        return cli_read_file(o->gbnf_file, NULL);
    } else if (o->schema_file) {
        char *schema = cli_read_file(o->schema_file, NULL);
        if (!schema) return NULL;
        st = nu_json_schema_to_gbnf(schema, &jo, &text, &err);
        free(schema);
    } else if (o->json) {
        st = nu_json_object_to_gbnf(&jo, &text, &err);
    } else if (o->regex) {
        st = nu_regex_to_gbnf(o->regex, &text, &err);
    } else {
        size_t n = 0;
        char **list = split_choices(o->choices, &n);
        st = list ? nu_choices_to_gbnf((const char *const *)list, n, &text, &err) : NU_ERR_NOMEM;
        if (!list) snprintf(err.message, sizeof err.message, "out of memory");
        if (list) free(list[0]);
        free(list);
    }
    if (st != NU_OK) cli_error("%s", err.message);
    return st == NU_OK ? text : NULL;
}

/* Feeds the text to a fresh state and reports; 0 when it matches whole. */
static int check_text(const nu_grammar *g, const char *text, size_t len) {
    nu_grammar_state *s;
    nu_error err;
    if (nu_grammar_state_new(g, &s, &err) != NU_OK) {
        cli_error("%s", err.message);
        return 1;
    }
    int rc = 1;
    if (nu_grammar_accept_bytes(s, text, len, &err) != NU_OK) {
        printf("no match: %s\n", err.message);
    } else if (!nu_grammar_is_complete(s)) {
        printf("incomplete: the text could continue to a match (at least %lld more bytes)\n",
               (long long)nu_grammar_distance(s));
    } else {
        printf("match\n");
        rc = 0;
    }
    nu_grammar_state_free(s);
    return rc;
}

static int run_grammar(int argc, char **argv) {
    grammar_opts o = {.ws = 0};
    int rc;
    if (!parse(&o, argc, argv, &rc)) return rc;
    bool from_file;
    char *gbnf = source_gbnf(&o, &from_file);
    if (!gbnf) return 1;
    nu_grammar *g = NULL;
    nu_error err;
    if (nu_grammar_from_gbnf(NULL, gbnf, o.root, &g, &err) != NU_OK) {
        cli_error("%s", err.message);
        rc = 1;
    } else if (o.print || (!o.check && !o.check_file)) {
        fputs(gbnf, stdout);
    }
    size_t len = 0;
    char *file_text = NULL;
    if (g && o.check)
        rc = check_text(g, o.check, strlen(o.check));
    else if (g && o.check_file && (file_text = cli_read_file(o.check_file, &len)))
        rc = check_text(g, file_text, len);
    else if (g && o.check_file)
        rc = 1;
    free(file_text);
    nu_grammar_free(g);
    if (from_file)
        free(gbnf);
    else
        nu_free(gbnf);
    return rc;
}
