/* cmd_perplexity.c - `nucleus perplexity`: how well a model predicts a text
 * (nu_perplexity), window by window. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_options.h"

static const char perplexity_help[] =
    "usage: nucleus perplexity [-m MODEL] -f FILE [--window N] [--score-from N] [--json]\n\n"
    "  -f, --file FILE     the text (read whole; BOS added if the model asks for one)\n"
    "      --window N      tokens per window, each read from scratch (default: the context)\n"
    "      --score-from N  first scored position of a window (default: half the window, so\n"
    "                      every scored token sees at least that much context)\n"
    "      --json          one JSON object with the result on stdout\n"
    "perplexity = e^(mean of -ln p(token | the window's earlier tokens)) over the scored tokens\n";

typedef struct perplexity_opts {
    cli_run_opts run;
    const char *file;
    long window, score_from;
    bool json;
} perplexity_opts;

static int parse(perplexity_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_run_opt(&o->run, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        bool v = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s", perplexity_help, cli_run_opts_help);
            return -1;
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && v) {
            o->file = argv[++i];
        } else if (!strcmp(a, "--window") && v) {
            if (!cli_parse_int(a, argv[++i], 2, 1 << 20, &o->window)) return 2;
        } else if (!strcmp(a, "--score-from") && v) {
            if (!cli_parse_int(a, argv[++i], 1, 1 << 20, &o->score_from)) return 2;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else {
            cli_error("unknown or incomplete option '%s' (see nucleus perplexity --help)", a);
            return 2;
        }
    }
    if (!o->file) {
        cli_error("no text given (-f FILE)");
        return 2;
    }
    return 0;
}

static bool show_window(int32_t window, const nu_perplexity_result *r, void *user) {
    (void)user;
    fprintf(stderr, "[%d] %.4f\n", window + 1, r->perplexity);
    return true;
}

int cmd_perplexity(int argc, char **argv) {
    perplexity_opts o = {0};
    cli_run_opts_init(&o.run);
    int rc = parse(&o, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.window && (o.run.ctx.n_ctx == 0 || o.run.ctx.n_ctx < o.window))
        o.run.ctx.n_ctx = (int32_t)o.window;
    size_t len = 0;
    char *text = cli_read_file(o.file, &len);
    if (!text) return 1;
    nu_model *m;
    nu_context *ctx;
    if ((rc = cli_open(&o.run, &m, &ctx))) {
        free(text);
        return rc;
    }
    size_t cap = len + 8, n = 0;
    int32_t *toks = malloc(cap * sizeof *toks);
    nu_error err;
    nu_status st = toks ? nu_tokenize(m, text, len, NU_TOKENIZE_ADD_BOS, toks, cap, &n, &err)
                        : NU_ERR_NOMEM;
    nu_perplexity_result r;
    if (st == NU_OK) {
        nu_perplexity_params p = nu_perplexity_default_params();
        p.n_window = (int32_t)o.window;
        p.score_from = (int32_t)o.score_from;
        p.on_window = o.json ? NULL : show_window;
        double t0 = nu_time_ms();
        st = nu_perplexity(ctx, toks, (int64_t)n, &p, &r, &err);
        double secs = (nu_time_ms() - t0) / 1e3;
        if (st == NU_OK && o.json)
            printf("{\"perplexity\": %.6f, \"stderr\": %.6f, \"nll\": %.6f, \"tokens\": %zu, "
                   "\"scored\": %lld, \"windows\": %d, \"seconds\": %.3f}\n",
                   r.perplexity, r.stderr_ppl, r.nll, n, (long long)r.n_scored, r.n_windows,
                   secs);
        else if (st == NU_OK)
            printf("perplexity: %.4f +/- %.4f over %lld scored tokens of %zu (%d windows, "
                   "%.1f s)\n",
                   r.perplexity, r.stderr_ppl, (long long)r.n_scored, n, r.n_windows, secs);
    }
    if (st) cli_error("%s", st == NU_ERR_NOMEM && !toks ? "out of memory" : err.message);
    free(toks);
    free(text);
    nu_context_free(ctx);
    nu_model_free(m);
    return st == NU_OK ? 0 : 1;
}
