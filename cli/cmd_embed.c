/* cmd_embed.c - `nucleus embed`: the embedding of each line of a text (or of
 * one text), as the pooled, normalised hidden states of the model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_options.h"

typedef struct embed_opts {
    cli_run_opts run;
    const char *text, *file;
    nu_pooling pooling;
    bool raw, json, whole;
} embed_opts;

static int run_embed(int argc, char **argv);

static const cli_choice poolings[] = {
    {"model", NU_POOLING_MODEL},
    {"mean", NU_POOLING_MEAN},
    {"last", NU_POOLING_LAST},
    {"first", NU_POOLING_FIRST},
    {0},
};

static const cli_option embed_options[] = {
    {.name = "--prompt",
     .short_name = "-p",
     .kind = CLI_STRING,
     .field = CLI_FIELD(embed_opts, text),
     .placeholder = "TEXT",
     .help = "the text"},
    {.name = "--file",
     .short_name = "-f",
     .kind = CLI_STRING,
     .field = CLI_FIELD(embed_opts, file),
     .placeholder = "FILE",
     .help = "one text per line (or the whole file with --whole-file)"},
    {.name = "--whole-file",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(embed_opts, whole),
     .help = "embed the file as one text"},
    {.name = "--pooling",
     .kind = CLI_ENUM,
     .field = CLI_FIELD(embed_opts, pooling),
     .choices = poolings,
     .placeholder = "P",
     .help = "model (the file's pooling type, else mean), mean, last or first token"},
    {.name = "--no-normalize",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(embed_opts, raw),
     .help = "keep the pooled vector's length (default: unit length)"},
    {.name = "--json",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(embed_opts, json),
     .help = "a JSON array of the vectors instead of one line of numbers each"},
    {0},
};

static const cli_section embed_sections[] = {
    CLI_OWN_SECTION(NULL, embed_options),
    CLI_SECTION("model", cli_model_options, embed_opts, run),
    {0},
};

const cli_command embed_command = {
    .name = "embed",
    .summary = "embeddings of texts: the model's pooled hidden states",
    .usage = "nucleus embed [-m MODEL] (-p TEXT | -f FILE) [--pooling P] [--no-normalize] [--json]",
    .sections = embed_sections,
    .run = run_embed,
};

/* Embeds one text into out (n_embd floats); false after printing why. */
static bool embed_text(nu_context *ctx, const char *text, size_t len, const embed_opts *o,
                       float *out) {
    const nu_model *m = nu_context_model(ctx);
    size_t cap = len + 8, n = 0;
    int32_t *toks = malloc(cap * sizeof *toks);
    nu_error err;
    nu_status st =
        toks ? nu_tokenize(m, text, len, NU_TOKENIZE_ADD_BOS, toks, cap, &n, &err) : NU_ERR_NOMEM;
    if (st == NU_ERR_NOMEM && !toks) snprintf(err.message, sizeof err.message, "out of memory");
    if (st == NU_OK && n == 0) {
        snprintf(err.message, sizeof err.message, "an empty text has no embedding");
        st = NU_ERR_INVALID_ARG;
    }
    if (st == NU_OK) st = nu_embed(ctx, toks, (int32_t)n, o->pooling, !o->raw, out, &err);
    free(toks);
    if (st) cli_error("%s", err.message);
    return st == NU_OK;
}

static void print_vector(const float *v, int32_t d, bool json, bool first) {
    if (json) fputs(first ? "[[" : ",\n [", stdout);
    for (int32_t i = 0; i < d; i++) printf("%s%.9g", i ? (json ? "," : " ") : "", v[i]);
    fputs(json ? "]" : "\n", stdout);
}

static int run_embed(int argc, char **argv) {
    embed_opts o = {.pooling = NU_POOLING_MODEL};
    cli_run_opts_init(&o.run);
    int rc;
    if (!cli_parse(&embed_command, argc, argv, &o, &rc)) return rc;
    if (!o.text == !o.file) {
        cli_error("give the text with exactly one of -p TEXT or -f FILE");
        return CLI_EXIT_USAGE;
    }
    size_t len = 0;
    char *file_text = NULL;
    if (o.file && !(file_text = cli_read_file(o.file, &len))) return 1;
    o.run.ctx.embeddings = true;
    nu_model *m;
    nu_context *ctx;
    if ((rc = cli_open(&o.run, &m, &ctx))) {
        free(file_text);
        return rc;
    }
    const int32_t d = nu_model_n_embd(m);
    float *v = malloc((size_t)d * sizeof *v);
    rc = v ? 0 : 1;
    int count = 0;
    if (o.text) {
        if (!(rc = embed_text(ctx, o.text, strlen(o.text), &o, v) ? 0 : 1))
            print_vector(v, d, o.json, count++ == 0);
    } else if (o.whole) {
        if (!(rc = embed_text(ctx, file_text, len, &o, v) ? 0 : 1))
            print_vector(v, d, o.json, count++ == 0);
    } else {
        for (char *line = file_text, *next; rc == 0 && line && line < file_text + len;
             line = next) {
            char *nl = memchr(line, '\n', (size_t)(file_text + len - line));
            next = nl ? nl + 1 : NULL;
            size_t n = nl ? (size_t)(nl - line) : (size_t)(file_text + len - line);
            if (!(rc = embed_text(ctx, line, n, &o, v) ? 0 : 1))
                print_vector(v, d, o.json, count++ == 0);
        }
    }
    if (o.json && count) puts("]");
    free(v);
    free(file_text);
    nu_context_free(ctx);
    nu_model_free(m);
    return rc;
}
