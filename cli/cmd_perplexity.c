/* cmd_perplexity.c - `nucleus perplexity`: how well a model predicts a text
 * (nu_perplexity), in llama-perplexity's chunks or in windows, and the
 * KL-divergence of a model from a base model's saved log-probs
 * (nu_kl_divergence). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_json.h"
#include "cli_options.h"

typedef struct perplexity_opts {
    cli_run_opts run;
    const char *file;
    long window, score_from;
    bool windows, json;
    const char *kld_base, *kld;
} perplexity_opts;

static int run_perplexity(int argc, char **argv);

static const cli_option perplexity_options[] = {
    {.name = "--file",
     .short_name = "-f",
     .kind = CLI_STRING,
     .field = CLI_FIELD(perplexity_opts, file),
     .placeholder = "FILE",
     .help = "the text (read whole; BOS added if the model asks for one)"},
    {.name = "--window",
     .kind = CLI_INT,
     .field = CLI_FIELD(perplexity_opts, window),
     .min = 2,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "tokens per chunk (or window), each read from scratch",
     .default_text = "the context (-c)"},
    {.name = "--windows",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(perplexity_opts, windows),
     .help = "windows instead of llama-perplexity's chunks: the tokens as they are (no BOS "
             "per window), scored from --score-from, a last shorter window included"},
    {.name = "--score-from",
     .kind = CLI_INT,
     .field = CLI_FIELD(perplexity_opts, score_from),
     .min = 1,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "first scored position of a window (implies --windows)",
     .default_text = "half the window, so every scored token sees at least that much context"},
    {.name = "--kl-divergence-base",
     .kind = CLI_STRING,
     .field = CLI_FIELD(perplexity_opts, kld_base),
     .nonempty = true,
     .placeholder = "FILE",
     .help = "also save the scored rows' log-probs to FILE (llama-perplexity's format), the base "
             "of a later --kl-divergence"},
    {.name = "--kl-divergence",
     .kind = CLI_STRING,
     .field = CLI_FIELD(perplexity_opts, kld),
     .nonempty = true,
     .placeholder = "FILE",
     .help = "KL-divergence of this model from the base whose log-probs FILE holds (its tokens, "
             "no -f)"},
    {.name = "--json",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(perplexity_opts, json),
     .help = "one JSON object with the result on stdout"},
    {0},
};

static const cli_section perplexity_sections[] = {
    CLI_OWN_SECTION(NULL, perplexity_options),
    CLI_RUN_SECTIONS(perplexity_opts, run),
    {0},
};

const cli_command perplexity_command = {
    .name = "perplexity",
    .summary = "how well a model predicts a text (perplexity; KL-divergence from a base model)",
    .usage = "nucleus perplexity -m MODEL -f FILE [-c N] [--kl-divergence-base OUT] [--json]\n"
             "       nucleus perplexity -m MODEL --kl-divergence BASE [--json]\n"
             "       nucleus perplexity -m MODEL -f FILE --windows [--window N] [--score-from N]",
    .about =
        "perplexity = e^(mean of -ln p(token | the chunk's earlier tokens)) over the scored\n"
        "tokens. By default the text (BOS added) is cut as llama-perplexity cuts it: chunks of\n"
        "-c tokens (--window), the last partial one left out, each starting with BOS in place of\n"
        "its first token and scoring its second half; the same file and -c give\n"
        "llama-perplexity's figure and its +/-. --kl-divergence-base saves the scored rows'\n"
        "log-probs, and --kl-divergence compares another model with them: mean KL-divergence,\n"
        "its percentiles, top-token agreement, the change of the correct token's probability\n"
        "and both perplexities (llama-perplexity --kl-divergence's statistics; either program\n"
        "reads the other's file).\n",
    .sections = perplexity_sections,
    .run = run_perplexity,
};

static bool show_window(int32_t window, const nu_perplexity_result *r, void *user) {
    (void)user;
    fprintf(stderr, "[%d] %.4f\n", window + 1, r->perplexity);
    return true;
}

static const char *const percentile_names[NU_KLD_N_PERCENTILES] = {
    "Maximum", "99.9%", "99.0%", "95.0%", "90.0%",  "Median",
    "10.0%",   " 5.0%", " 1.0%", " 0.1%", "Minimum"};

static void print_kld_text(const nu_kld_result *r) {
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", r->ppl, r->ppl_stderr);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", r->ppl_base, r->ppl_base_stderr);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * r->ln_ppl_correlation);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r->ln_ppl_ratio,
           r->ln_ppl_ratio_stderr);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", r->ppl_ratio, r->ppl_ratio_stderr);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n\n", r->ppl_diff, r->ppl_diff_stderr);
    printf("====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", r->kld_mean, r->kld_stderr);
    for (int i = 0; i < NU_KLD_N_PERCENTILES; i++)
        printf("%-7s KLD: %10.6f\n", percentile_names[i], r->kld_percentiles[i]);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * r->dp_mean, 100 * r->dp_stderr);
    for (int i = 0; i < NU_KLD_N_PERCENTILES; i++)
        printf("%-7s Δp: %6.3f%%\n", percentile_names[i], 100 * r->dp_percentiles[i]);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * r->dp_rms, 100 * r->dp_rms_stderr);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * r->same_top, 100 * r->same_top_stderr);
    printf("(%lld rows in %d chunks)\n", (long long)r->n_scored, r->n_chunks);
}

static void json_field(const char *name, double x) {
    printf(", \"%s\": ", name);
    json_number(stdout, x);
}

static void print_kld_json(const nu_kld_result *r) {
    static const char *const keys[NU_KLD_N_PERCENTILES] = {
        "max", "p99_9", "p99", "p95", "p90", "median", "p10", "p5", "p1", "p0_1", "min"};
    printf("{\"rows\": %lld, \"chunks\": %d", (long long)r->n_scored, r->n_chunks);
    json_field("ppl", r->ppl);
    json_field("ppl_stderr", r->ppl_stderr);
    json_field("ppl_base", r->ppl_base);
    json_field("ppl_base_stderr", r->ppl_base_stderr);
    json_field("ln_ppl_correlation", r->ln_ppl_correlation);
    json_field("ln_ppl_ratio", r->ln_ppl_ratio);
    json_field("ln_ppl_ratio_stderr", r->ln_ppl_ratio_stderr);
    json_field("ppl_ratio", r->ppl_ratio);
    json_field("ppl_ratio_stderr", r->ppl_ratio_stderr);
    json_field("ppl_diff", r->ppl_diff);
    json_field("ppl_diff_stderr", r->ppl_diff_stderr);
    json_field("kld_mean", r->kld_mean);
    json_field("kld_stderr", r->kld_stderr);
    char name[32];
    for (int i = 0; i < NU_KLD_N_PERCENTILES; i++) {
        snprintf(name, sizeof name, "kld_%s", keys[i]);
        json_field(name, r->kld_percentiles[i]);
    }
    json_field("dp_mean", r->dp_mean);
    json_field("dp_stderr", r->dp_stderr);
    for (int i = 0; i < NU_KLD_N_PERCENTILES; i++) {
        snprintf(name, sizeof name, "dp_%s", keys[i]);
        json_field(name, r->dp_percentiles[i]);
    }
    json_field("dp_rms", r->dp_rms);
    json_field("dp_rms_stderr", r->dp_rms_stderr);
    json_field("same_top", r->same_top);
    json_field("same_top_stderr", r->same_top_stderr);
    printf("}\n");
}

static int run_kl_divergence(perplexity_opts *o, nu_context *ctx) {
    nu_perplexity_params p = nu_perplexity_default_params();
    p.on_window = o->json ? NULL : show_window;
    nu_kld_result r;
    nu_error err;
    if (nu_kl_divergence(ctx, o->kld, &p, &r, &err) != NU_OK) {
        cli_error("%s", err.message);
        return 1;
    }
    if (o->json)
        print_kld_json(&r);
    else
        print_kld_text(&r);
    return 0;
}

static int run_text(perplexity_opts *o, nu_model *m, nu_context *ctx, const char *text,
                    size_t len) {
    size_t cap = len + 8, n = 0;
    int32_t *toks = malloc(cap * sizeof *toks);
    nu_error err;
    nu_status st =
        toks ? nu_tokenize(m, text, len, NU_TOKENIZE_ADD_BOS, toks, cap, &n, &err) : NU_ERR_NOMEM;
    nu_perplexity_result r;
    const bool windows = o->windows || o->score_from;
    if (st == NU_OK) {
        nu_perplexity_params p = nu_perplexity_default_params();
        p.mode = windows ? NU_PERPLEXITY_WINDOWS : NU_PERPLEXITY_CHUNKS;
        p.n_window = (int32_t)o->window;
        p.score_from = (int32_t)o->score_from;
        p.save_base = o->kld_base;
        p.on_window = o->json ? NULL : show_window;
        double t0 = nu_time_ms();
        st = nu_perplexity(ctx, toks, (int64_t)n, &p, &r, &err);
        double secs = (nu_time_ms() - t0) / 1e3;
        const char *unit = windows ? "windows" : "chunks";
        if (st == NU_OK && o->json)
            printf("{\"perplexity\": %.6f, \"stderr\": %.6f, \"nll\": %.6f, \"tokens\": %zu, "
                   "\"scored\": %lld, \"windows\": %d, \"mode\": \"%s\", \"seconds\": %.3f}\n",
                   r.perplexity, r.stderr_ppl, r.nll, n, (long long)r.n_scored, r.n_windows, unit,
                   secs);
        else if (st == NU_OK)
            printf("perplexity: %.4f +/- %.4f over %lld scored tokens of %zu (%d %s, %.1f s)\n",
                   r.perplexity, r.stderr_ppl, (long long)r.n_scored, n, r.n_windows, unit, secs);
    }
    if (st) cli_error("%s", st == NU_ERR_NOMEM && !toks ? "out of memory" : err.message);
    free(toks);
    return st == NU_OK ? 0 : 1;
}

static int run_perplexity(int argc, char **argv) {
    perplexity_opts o = {0};
    cli_run_opts_init(&o.run);
    int rc;
    if (!cli_parse(&perplexity_command, argc, argv, &o, &rc)) return rc;
    if (o.kld) {
        if (o.file || o.kld_base || o.windows || o.score_from || o.window) {
            cli_error("--kl-divergence reads its tokens and chunks from the base file: no -f, "
                      "--window, --windows, --score-from or --kl-divergence-base");
            return CLI_EXIT_USAGE;
        }
    } else if (!o.file) {
        cli_error("no text given (-f FILE)");
        return CLI_EXIT_USAGE;
    } else if (o.kld_base && (o.windows || o.score_from)) {
        cli_error("--kl-divergence-base is written in chunks mode (no --windows, --score-from)");
        return CLI_EXIT_USAGE;
    }
    if (o.window && (o.run.ctx.n_ctx == 0 || o.run.ctx.n_ctx < o.window))
        o.run.ctx.n_ctx = (int32_t)o.window;
    size_t len = 0;
    char *text = o.file ? cli_read_file(o.file, &len) : NULL;
    if (o.file && !text) return 1;
    nu_model *m;
    nu_context *ctx;
    if ((rc = cli_open(&o.run, &m, &ctx))) {
        free(text);
        return rc;
    }
    rc = o.kld ? run_kl_divergence(&o, ctx) : run_text(&o, m, ctx, text, len);
    free(text);
    nu_context_free(ctx);
    nu_model_free(m);
    return rc;
}
