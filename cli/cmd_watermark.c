/* cmd_watermark.c - `nucleus watermark`: detecting the green-list watermark
 * of `generate --watermark KEY` in a text (`detect`), and timing what the
 * watermark adds to each sampling step (`cost`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_json.h"

typedef struct watermark_opts {
    const char *model, *text, *file, *tokens;
    nu_watermark_params wm;
    double z_threshold;
    long steps;
    bool show, json;
} watermark_opts;

static int run_watermark(int argc, char **argv);
static int run_detect_command(int argc, char **argv);
static int run_cost_command(int argc, char **argv);

/* -m and the green share: what both subcommands take. */
static const cli_option common_options[] = {
    {.name = "--model",
     .short_name = "-m",
     .kind = CLI_STRING,
     .field = CLI_FIELD(watermark_opts, model),
     .placeholder = "REF",
     .help = "model or vocabulary file (or hf:ORG/REPO/FILE.gguf)"},
    {.name = "--watermark-gamma",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(watermark_opts, wm.gamma),
     .fmin = 0,
     .fmax = 1,
     .open_min = true,
     .open_max = true,
     .placeholder = "X",
     .help = "green share of the vocabulary (detect: the one the text was generated with)"},
    {0},
};

static const cli_option detect_options[] = {
    {.name = "--watermark",
     .alias = "--key",
     .kind = CLI_STRING,
     .field = CLI_FIELD(watermark_opts, wm.key),
     .placeholder = "KEY",
     .help = "the key the text was generated with"},
    {.name = "--watermark-context",
     .kind = CLI_INT,
     .field = CLI_FIELD(watermark_opts, wm.context),
     .min = 1,
     .max = NU_WATERMARK_MAX_CONTEXT,
     .placeholder = "N",
     .help = "previous tokens that chose the lists"},
    {.name = "--watermark-delta",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(watermark_opts, wm.delta),
     .fmin = 0,
     .fmax = 100,
     .placeholder = "X",
     .help = "accepted so that generate's options can be reused; unused"},
    {.name = "--prompt",
     .short_name = "-p",
     .alias = "--text",
     .kind = CLI_STRING,
     .field = CLI_FIELD(watermark_opts, text),
     .placeholder = "TEXT",
     .help = "the text"},
    {.name = "--file",
     .short_name = "-f",
     .kind = CLI_STRING,
     .field = CLI_FIELD(watermark_opts, file),
     .placeholder = "FILE",
     .help = "read the text from a file"},
    {.name = "--tokens",
     .kind = CLI_STRING,
     .field = CLI_FIELD(watermark_opts, tokens),
     .placeholder = "IDS",
     .help = "comma-separated token ids instead of text"},
    {.name = "--z-threshold",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(watermark_opts, z_threshold),
     .fmin = -1e6,
     .fmax = 1e6,
     .placeholder = "Z",
     .help = "report the watermark as detected above this z"},
    {.name = "--show",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(watermark_opts, show),
     .help = "every token with its mark: + green, - red, . not scored"},
    {.name = "--json",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(watermark_opts, json),
     .help = "the result as one JSON object"},
    {0},
};

static const cli_option cost_options[] = {
    {.name = "--steps",
     .kind = CLI_INT,
     .field = CLI_FIELD(watermark_opts, steps),
     .min = 1,
     .max = 1000000,
     .placeholder = "N",
     .help = "steps timed per configuration"},
    {0},
};

static const cli_section detect_sections[] = {
    CLI_OWN_SECTION(NULL, common_options),
    CLI_OWN_SECTION(NULL, detect_options),
    {0},
};
static const cli_section cost_sections[] = {
    CLI_OWN_SECTION(NULL, common_options),
    CLI_OWN_SECTION(NULL, cost_options),
    {0},
};

static const cli_command detect_command = {
    .name = "watermark detect",
    .summary = "whether a text carries the watermark of a key (z-score, p-value)",
    .usage = "nucleus watermark detect -m MODEL --watermark KEY (-p TEXT | -f FILE | --tokens "
             "IDS) [options]",
    .about = "Whether a text carries the watermark of KEY. The text is tokenized with the\n"
             "model's tokenizer (a vocab-only GGUF file is enough; no BOS); every token after the\n"
             "first h is scored against the green list of its h predecessors, each distinct\n"
             "(context, token) n-gram once (repeats are ignored), and the green count T gives\n"
             "z = (green - gamma T) / sqrt(T gamma (1 - gamma)) with its one-sided p-value.\n",
    .sections = detect_sections,
    .run = run_detect_command,
};

static const cli_command cost_command = {
    .name = "watermark cost",
    .summary = "the sampler chain's time per step with and without the watermark",
    .usage = "nucleus watermark cost -m MODEL [--steps N] [--watermark-gamma X]",
    .about = "The sampler chain's time per step with and without the watermark, on random\n"
             "logits over the model's vocabulary (greedy, and the default chain).\n",
    .sections = cost_sections,
    .run = run_cost_command,
};

static const cli_command *const watermark_subcommands[] = {&detect_command, &cost_command, NULL};

const cli_command watermark_command = {
    .name = "watermark",
    .summary = "detect the watermark of generate --watermark KEY in a text",
    .usage = "nucleus watermark (detect | cost) [options]   (nucleus watermark detect --help ...)",
    .subcommands = watermark_subcommands,
    .run = run_watermark,
};

/* ---- detect --------------------------------------------------------------- */

/* "1,2,3" into a malloc'd array; NULL (message printed) when malformed. */
static int32_t *parse_ids(const char *s, size_t *n) {
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = malloc(cap * sizeof *ids);
    char *end;
    *n = 0;
    for (const char *p = s; ids; p = end + 1) {
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            cli_error("--tokens expects comma-separated token ids, got '%s'", s);
            free(ids);
            return NULL;
        }
        ids[(*n)++] = (int32_t)v;
        if (!*end) break;
    }
    return ids;
}

/* The text's tokens as generation would have produced them (no BOS, special
 * token text as plain text). */
static int32_t *tokenize_text(const nu_model *m, const char *text, size_t len, size_t *n) {
    size_t cap = len + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    nu_error err;
    nu_status st = ids ? nu_tokenize(m, text, len, 0, ids, cap, n, &err) : NU_ERR_NOMEM;
    if (st == NU_ERR_BUFFER_SMALL) {
        int32_t *bigger = realloc(ids, (*n + 1) * sizeof *ids);
        if (bigger) ids = bigger;
        st = bigger ? nu_tokenize(m, text, len, 0, ids, *n + 1, n, &err) : NU_ERR_NOMEM;
    }
    if (st) {
        cli_error("%s", st == NU_ERR_NOMEM ? "out of memory" : err.message);
        free(ids);
        return NULL;
    }
    return ids;
}

static void print_marks(const nu_model *m, const int32_t *ids, const signed char *marks, size_t n) {
    char piece[256];
    for (size_t i = 0; i < n; i++) {
        size_t k = nu_token_to_bytes(m, ids[i], true, piece, sizeof piece);
        if (k > sizeof piece) k = sizeof piece;
        printf("%c %6d  ", marks[i] > 0 ? '+' : marks[i] == 0 ? '-' : '.', ids[i]);
        json_string(stdout, piece, k);
        putchar('\n');
    }
}

static void print_result(const watermark_opts *o, const nu_watermark_result *r) {
    int32_t h = o->wm.context;
    if (o->json) {
        printf("{\"tokens\":%lld,\"scored\":%lld,\"repeated\":%lld,\"green\":%lld,"
               "\"green_fraction\":",
               (long long)r->n_tokens, (long long)r->scored, (long long)r->repeated,
               (long long)r->green);
        json_number(stdout, r->green_fraction);
        printf(",\"z\":");
        json_number(stdout, r->z);
        printf(",\"p_value\":%.6g,\"detected\":%s,\"z_threshold\":%g,\"gamma\":%g,\"context\":%d,"
               "\"scoring\":\"each distinct (context, token) n-gram once\"}\n",
               r->p_value, r->detected ? "true" : "false", o->z_threshold, o->wm.gamma, h);
        return;
    }
    printf("tokens: %lld (%lld scored: each distinct (context, token) n-gram once; %lld repeats "
           "ignored; the first %d not scored: no full context)\n",
           (long long)r->n_tokens, (long long)r->scored, (long long)r->repeated,
           r->n_tokens < h ? (int)r->n_tokens : h);
    printf("green: %lld of %lld (%.1f%%; %.1f%% expected without the watermark)\n",
           (long long)r->green, (long long)r->scored, 100 * r->green_fraction, 100.0 * o->wm.gamma);
    printf("z = %.3f, p = %.3g (one-sided)\n", r->z, r->p_value);
    if (r->scored == 0)
        printf("too few tokens to test\n");
    else if (r->detected)
        printf("watermark detected (z > %g)\n", o->z_threshold);
    else
        printf("no watermark detected (z <= %g)\n", o->z_threshold);
}

static int run_detect(watermark_opts *o, const nu_model *m) {
    size_t n = 0, len = 0;
    char *file_text = NULL;
    int32_t *ids = NULL;
    if (o->tokens) {
        ids = parse_ids(o->tokens, &n);
    } else {
        const char *text = o->text;
        if (o->file && !(text = file_text = cli_read_file(o->file, &len))) return 1;
        if (!o->file) len = strlen(text);
        ids = tokenize_text(m, text, len, &n);
    }
    free(file_text);
    if (!ids) return 1;
    signed char *marks = malloc(n + 1);
    nu_watermark_result r;
    nu_error err;
    int rc = 0;
    if (!marks) {
        cli_error("out of memory");
        rc = 1;
    } else if (nu_watermark_detect(m, &o->wm, ids, n, o->z_threshold, marks, &r, &err)) {
        cli_error("%s", err.message);
        rc = 1;
    } else {
        if (o->show) print_marks(m, ids, marks, n);
        print_result(o, &r);
    }
    free(marks);
    free(ids);
    return rc;
}

/* ---- cost ----------------------------------------------------------------- */

/* Microseconds per nu_sampler_sample + accept over `steps` random logit
 * vectors (normal-ish: the sum of four uniforms, times 3). */
static double time_chain(const nu_sampler_params *sp, int32_t n_vocab, long steps, float *logits,
                         bool *ok) {
    nu_sampler *s;
    nu_error err;
    if (nu_sampler_new(sp, n_vocab, &s, &err)) {
        cli_error("%s", err.message);
        *ok = false;
        return 0;
    }
    nu_rng rng;
    nu_rng_seed(&rng, 1);
    int32_t first = 1;
    nu_sampler_accept_prompt(s, &first, 1);
    double total = 0;
    for (long k = -1; k < steps; k++) { /* step -1 warms the buffers up, untimed */
        for (int32_t i = 0; i < n_vocab; i++) {
            double u = nu_rng_uniform(&rng) + nu_rng_uniform(&rng) + nu_rng_uniform(&rng) +
                       nu_rng_uniform(&rng);
            logits[i] = (float)(3 * (u - 2));
        }
        double t0 = nu_time_ms();
        nu_sampler_accept(s, nu_sampler_sample(s, logits));
        if (k >= 0) total += nu_time_ms() - t0;
    }
    nu_sampler_free(s);
    return total * 1e3 / (double)steps;
}

static int run_cost(watermark_opts *o, const nu_model *m) {
    int32_t n_vocab = nu_model_n_vocab(m);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits) {
        cli_error("out of memory");
        return 1;
    }
    o->wm.key = "cost";
    printf("vocabulary: %d tokens, %ld steps each, gamma %g\n", n_vocab, o->steps, o->wm.gamma);
    bool ok = true;
    for (int greedy = 1; greedy >= 0 && ok; greedy--) {
        nu_sampler_params sp = nu_sampler_default_params();
        if (greedy) sp.temperature = 0;
        double plain = time_chain(&sp, n_vocab, o->steps, logits, &ok);
        sp.watermark = o->wm;
        double marked = ok ? time_chain(&sp, n_vocab, o->steps, logits, &ok) : 0;
        if (ok)
            printf("%-14s %8.1f us per step without, %8.1f with the watermark (+%.1f us)\n",
                   greedy ? "greedy:" : "default chain:", plain, marked, marked - plain);
    }
    free(logits);
    return ok ? 0 : 1;
}

/* The options of a subcommand with their defaults; false when the command
 * ends (*rc: help or an error). */
static bool parse(const cli_command *cmd, watermark_opts *o, int argc, char **argv, int *rc) {
    *o = (watermark_opts){.wm = nu_watermark_default_params(), .z_threshold = 4, .steps = 2000};
    if (!cli_parse(cmd, argc, argv, o, rc)) return false;
    *rc = CLI_EXIT_USAGE;
    if (!(o->model = cli_model_or_demo(o->model))) return false;
    if (cmd != &detect_command) return true;
    if (!o->wm.key || !o->wm.key[0]) {
        cli_error("detection needs the key: --watermark KEY (non-empty)");
        return false;
    }
    if (!!o->text + !!o->file + !!o->tokens != 1) {
        cli_error("give the text with exactly one of -p TEXT, -f FILE or --tokens IDS");
        return false;
    }
    return true;
}

/* `watermark detect` and `watermark cost`: the same options struct, each its
 * own table; the model only needs its vocabulary. */
static int run_subcommand(const cli_command *cmd, int argc, char **argv) {
    watermark_opts o;
    int rc;
    if (!parse(cmd, &o, argc, argv, &rc)) return rc;
    nu_model *m = cli_load_model(o.model, NU_LOAD_VOCAB_ONLY);
    if (!m) return 1;
    rc = cmd == &detect_command ? run_detect(&o, m) : run_cost(&o, m);
    nu_model_free(m);
    return rc;
}

static int run_detect_command(int argc, char **argv) {
    return run_subcommand(&detect_command, argc, argv);
}

static int run_cost_command(int argc, char **argv) {
    return run_subcommand(&cost_command, argc, argv);
}

static int run_watermark(int argc, char **argv) {
    int rc = cli_dispatch(&watermark_command, argc, argv, NULL);
    if (rc != CLI_NO_SUBCOMMAND) return rc;
    cli_error("watermark needs a subcommand: detect or cost (see nucleus watermark --help)");
    return CLI_EXIT_USAGE;
}
