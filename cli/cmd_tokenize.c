/* cmd_tokenize.c - `nucleus tokenize`: the ids and pieces of a text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct tokenize_opts {
    const char *model, *text, *file;
    bool ids_only, bos, special;
} tokenize_opts;

static int run_tokenize(int argc, char **argv);

static const cli_option tokenize_options[] = {
    {.name = "--model",
     .short_name = "-m",
     .kind = CLI_STRING,
     .field = CLI_FIELD(tokenize_opts, model),
     .placeholder = "REF",
     .help = "model or vocabulary file (or hf:ORG/REPO/FILE.gguf)"},
    {.name = "--prompt",
     .short_name = "-p",
     .kind = CLI_STRING,
     .field = CLI_FIELD(tokenize_opts, text),
     .placeholder = "TEXT",
     .help = "the text"},
    {.name = "--file",
     .short_name = "-f",
     .kind = CLI_STRING,
     .field = CLI_FIELD(tokenize_opts, file),
     .placeholder = "FILE",
     .help = "read the text from a file"},
    {.name = "--ids",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(tokenize_opts, ids_only),
     .help = "print only the ids, space-separated on one line"},
    {.name = "--no-bos",
     .kind = CLI_UNSET,
     .field = CLI_FIELD(tokenize_opts, bos),
     .help = "do not add the BOS token the model asks for"},
    {.name = "--special",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(tokenize_opts, special),
     .help = "special-token text (e.g. <s>) becomes its token"},
    {0},
};

static const cli_section tokenize_sections[] = {
    CLI_OWN_SECTION(NULL, tokenize_options),
    {0},
};

const cli_command tokenize_command = {
    .name = "tokenize",
    .summary = "show the tokens of a text",
    .usage = "nucleus tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos] [--special]",
    .sections = tokenize_sections,
    .run = run_tokenize,
};

/* Reads the options; false when the command ends (*rc: help or an error). */
static bool parse(tokenize_opts *o, int argc, char **argv, int *rc) {
    if (!cli_parse(&tokenize_command, argc, argv, o, rc)) return false;
    *rc = CLI_EXIT_USAGE;
    if (!(o->model = cli_model_or_demo(o->model))) return false;
    if (!o->text == !o->file) {
        cli_error("give the text with exactly one of -p TEXT or -f FILE");
        return false;
    }
    return true;
}

/* Prints a piece quoted, with control bytes escaped so each token is one line. */
static void print_piece(const char *s, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\'' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('\'');
}

static void print_tokens(const nu_model *m, const int32_t *toks, size_t n, bool ids_only) {
    char buf[1024];
    for (size_t i = 0; i < n; i++) {
        if (ids_only) {
            printf(i ? " %d" : "%d", toks[i]);
            continue;
        }
        size_t len = nu_token_to_bytes(m, toks[i], true, buf, sizeof buf);
        printf("%6d -> ", toks[i]);
        print_piece(buf, len < sizeof buf ? len : sizeof buf);
        putchar('\n');
    }
    if (ids_only) putchar('\n');
}

static int run_tokenize(int argc, char **argv) {
    tokenize_opts o = {.bos = true};
    int rc;
    if (!parse(&o, argc, argv, &rc)) return rc;
    size_t len = 0;
    char *file_text = NULL;
    if (o.file && !(file_text = cli_read_file(o.file, &len))) return 1;
    const char *text = file_text ? file_text : o.text;
    if (!file_text) len = strlen(text);
    nu_model *m = cli_load_model(o.model, NU_LOAD_VOCAB_ONLY);
    if (!m) {
        free(file_text);
        return 1;
    }
    unsigned flags =
        (o.bos ? NU_TOKENIZE_ADD_BOS : 0) | (o.special ? NU_TOKENIZE_PARSE_SPECIAL : 0);
    size_t cap = len + 8, n = 0;
    int32_t *toks = malloc(cap * sizeof *toks);
    nu_error err;
    nu_status st = toks ? nu_tokenize(m, text, len, flags, toks, cap, &n, &err) : NU_ERR_NOMEM;
    if (st == NU_OK)
        print_tokens(m, toks, n, o.ids_only);
    else
        cli_error("%s", st == NU_ERR_NOMEM ? "out of memory" : err.message);
    free(toks);
    free(file_text);
    nu_model_free(m);
    return st == NU_OK ? 0 : 1;
}
