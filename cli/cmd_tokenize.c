/* cmd_tokenize.c - `nucleus tokenize`: the ids and pieces of a text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char tokenize_help[] =
    "usage: nucleus tokenize [-m MODEL] (-p TEXT | -f FILE) [--ids] [--no-bos] [--special]\n\n"
    "  -m, --model REF   model or vocabulary file (or hf:ORG/REPO/FILE.gguf)\n"
    "  -p, --prompt TEXT the text\n"
    "  -f, --file FILE   read the text from a file\n"
    "      --ids         print only the ids, space-separated on one line\n"
    "      --no-bos      do not add the BOS token the model asks for\n"
    "      --special     special-token text (e.g. <s>) becomes its token\n";

typedef struct tokenize_opts {
    const char *model, *text, *file;
    bool ids_only, bos, special;
} tokenize_opts;

static int parse(tokenize_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tokenize_help, stdout);
            return -1;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_value) {
            o->model = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_value) {
            o->text = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_value) {
            o->file = argv[++i];
        } else if (!strcmp(a, "--ids")) {
            o->ids_only = true;
        } else if (!strcmp(a, "--no-bos")) {
            o->bos = false;
        } else if (!strcmp(a, "--special")) {
            o->special = true;
        } else {
            cli_error("unknown or incomplete option '%s' (see nucleus tokenize --help)", a);
            return 2;
        }
    }
    if (!o->model && !(o->model = cli_model_or_demo(NULL))) return 2;
    if (!o->text == !o->file) {
        cli_error("give the text with exactly one of -p TEXT or -f FILE");
        return 2;
    }
    return 0;
}

/* Prints a piece quoted, with control bytes escaped so each token is one line. */
static void print_piece(const char *s, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\'' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
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

int cmd_tokenize(int argc, char **argv) {
    tokenize_opts o = {.bos = true};
    int rc = parse(&o, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
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
    unsigned flags = (o.bos ? NU_TOKENIZE_ADD_BOS : 0) | (o.special ? NU_TOKENIZE_PARSE_SPECIAL : 0);
    size_t cap = len + 8, n = 0;
    int32_t *toks = malloc(cap * sizeof *toks);
    nu_error err;
    nu_status st = toks ? nu_tokenize(m, text, len, flags, toks, cap, &n, &err) : NU_ERR_NOMEM;
    if (st == NU_OK) print_tokens(m, toks, n, o.ids_only);
    else cli_error("%s", st == NU_ERR_NOMEM ? "out of memory" : err.message);
    free(toks);
    free(file_text);
    nu_model_free(m);
    return st == NU_OK ? 0 : 1;
}
