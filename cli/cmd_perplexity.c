/* cmd_perplexity.c - `nucleus perplexity`: how well a model predicts a text
 * (nu_perplexity), in llama-perplexity's chunks or in windows, and the
 * KL-divergence of a model from a base model's saved log-probs
 * (nu_kl_divergence). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "cli.h"
#include "cli_json.h"
#include "cli_options.h"

typedef struct perplexity_opts {
    cli_run_opts run;
    const char *file;
    long window, score_from;
    bool windows, json;
    const char *kld_base, *kld, *choices;
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
    {.name = "--multiple-choice",
     .kind = CLI_STRING,
     .field = CLI_FIELD(perplexity_opts, choices),
     .nonempty = true,
     .placeholder = "FILE",
     .help = "accuracy on multiple-choice tasks instead: JSON lines {\"context\", \"endings\": "
             "[...], \"label\": i}, scored by log-likelihood (no -f)"},
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
             "       nucleus perplexity -m MODEL --multiple-choice TASKS.jsonl [--json]\n"
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
        "reads the other's file). --multiple-choice scores each task's endings by the\n"
        "log-likelihood of context + \" \" + ending after what they share (read once), as\n"
        "llama-perplexity's --hellaswag: acc (largest sum), acc_norm (sum per character of the\n"
        "ending, lm-evaluation-harness's) and acc_token (mean per scored token, llama.cpp's\n"
        "hellaswag score), each with its standard error.\n",
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

/* ---- multiple choice ------------------------------------------------------ */

typedef struct choice_task {
    char *context;
    char **endings;
    int32_t n_endings, label;
} choice_task;

static void tasks_free(choice_task *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(t[i].context);
        for (int32_t k = 0; k < t[i].n_endings; k++) free(t[i].endings[k]);
        free(t[i].endings);
    }
    free(t);
}

/* One task from a JSON line; false after printing why. */
static bool parse_task(const char *path, size_t line, const char *s, size_t len, choice_task *t) {
    cJSON *root = cJSON_ParseWithLength(s, len);
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "context");
    const cJSON *endings = cJSON_GetObjectItemCaseSensitive(root, "endings");
    const cJSON *label = cJSON_GetObjectItemCaseSensitive(root, "label");
    const char *why = NULL;
    if (!cJSON_IsObject(root))
        why = "is not a JSON object";
    else if (!cJSON_IsString(ctx))
        why = "has no \"context\" string";
    else if (!cJSON_IsArray(endings) || cJSON_GetArraySize(endings) < 2)
        why = "has no \"endings\" array of at least 2 strings";
    else if (!cJSON_IsNumber(label) || label->valuedouble != floor(label->valuedouble) ||
             label->valuedouble < 0 || label->valuedouble >= cJSON_GetArraySize(endings))
        why = "has no \"label\" that is the index of an ending";
    int32_t n = why ? 0 : cJSON_GetArraySize(endings);
    *t = (choice_task){.n_endings = 0, .label = why ? 0 : (int32_t)label->valuedouble};
    if (!why) {
        t->context = strdup(ctx->valuestring);
        t->endings = calloc((size_t)n, sizeof *t->endings);
        if (!t->context || !t->endings) why = "(out of memory)";
    }
    for (int32_t k = 0; !why && k < n; k++) {
        const cJSON *e = cJSON_GetArrayItem(endings, k);
        if (!cJSON_IsString(e)) {
            why = "has an ending that is not a string";
            break;
        }
        if (!(t->endings[k] = strdup(e->valuestring))) why = "(out of memory)";
        t->n_endings = k + 1;
    }
    cJSON_Delete(root);
    if (why) cli_error("%s line %zu %s", path, line, why);
    return !why;
}

/* The tasks of a JSON-lines file (blank lines skipped). */
static choice_task *read_tasks(const char *path, size_t *n_tasks, int32_t *max_endings) {
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) return NULL;
    choice_task *tasks = NULL;
    size_t n = 0, cap = 0, line = 0;
    *max_endings = 0;
    bool ok = true;
    for (char *s = text; ok && s < text + len; line++) {
        char *nl = memchr(s, '\n', (size_t)(text + len - s));
        const size_t l = nl ? (size_t)(nl - s) : (size_t)(text + len - s);
        size_t i = 0;
        while (i < l && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
        if (i < l) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                choice_task *bigger = realloc(tasks, cap * sizeof *tasks);
                if (!bigger) {
                    cli_error("out of memory");
                    ok = false;
                    break;
                }
                tasks = bigger;
            }
            ok = parse_task(path, line + 1, s, l, &tasks[n]);
            if (ok && tasks[n].n_endings > *max_endings) *max_endings = tasks[n].n_endings;
            n++;
        }
        s += l + 1;
    }
    free(text);
    if (ok && n == 0) {
        cli_error("%s holds no task", path);
        ok = false;
    }
    if (!ok) {
        tasks_free(tasks, n);
        return NULL;
    }
    *n_tasks = n;
    return tasks;
}

/* The index of the largest value (the first of equals). */
static int32_t argmax(const double *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* The standard error of a share of n 0/1 values (lm-evaluation-harness's). */
static double share_stderr(double p, size_t n) {
    return n > 1 ? sqrt(p * (1 - p) / (double)(n - 1)) : 0;
}

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int run_choices(perplexity_opts *o, nu_context *ctx, choice_task *tasks, size_t n,
                       int32_t max_endings) {
    double *ll = malloc((size_t)max_endings * 3 * sizeof *ll);
    int32_t *count = malloc((size_t)max_endings * sizeof *count);
    size_t right[3] = {0, 0, 0}; /* acc, acc_norm, acc_token */
    int rc = 0;
    for (size_t i = 0; ll && count && i < n; i++) {
        choice_task *t = &tasks[i];
        nu_error err;
        if (nu_choice_loglik(ctx, t->context, (const char *const *)t->endings, t->n_endings, ll,
                             count, &err) != NU_OK) {
            cli_error("task %zu: %s", i + 1, err.message);
            rc = 1;
            break;
        }
        double *per_char = ll + max_endings, *per_token = ll + 2 * max_endings;
        for (int32_t k = 0; k < t->n_endings; k++) {
            const size_t chars = utf8_chars(t->endings[k]);
            per_char[k] = ll[k] / (double)(chars ? chars : 1);
            per_token[k] = ll[k] / count[k];
        }
        right[0] += argmax(ll, t->n_endings) == t->label;
        right[1] += argmax(per_char, t->n_endings) == t->label;
        right[2] += argmax(per_token, t->n_endings) == t->label;
        if (!o->json)
            fprintf(stderr, "[%zu] acc %.4f acc_norm %.4f acc_token %.4f\n", i + 1,
                    (double)right[0] / (double)(i + 1), (double)right[1] / (double)(i + 1),
                    (double)right[2] / (double)(i + 1));
    }
    if (!ll || !count) {
        cli_error("out of memory");
        rc = 1;
    }
    if (rc == 0) {
        double acc[3];
        for (int k = 0; k < 3; k++) acc[k] = (double)right[k] / (double)n;
        if (o->json)
            printf("{\"tasks\": %zu, \"acc\": %.6f, \"acc_stderr\": %.6f, \"acc_norm\": %.6f, "
                   "\"acc_norm_stderr\": %.6f, \"acc_token\": %.6f, \"acc_token_stderr\": %.6f}\n",
                   n, acc[0], share_stderr(acc[0], n), acc[1], share_stderr(acc[1], n), acc[2],
                   share_stderr(acc[2], n));
        else
            printf("multiple choice, %zu tasks: acc %.4f +/- %.4f, acc_norm %.4f +/- %.4f, "
                   "acc_token %.4f +/- %.4f\n",
                   n, acc[0], share_stderr(acc[0], n), acc[1], share_stderr(acc[1], n), acc[2],
                   share_stderr(acc[2], n));
    }
    free(ll);
    free(count);
    return rc;
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
        p.on_window = show_window; /* progress on stderr, with --json too */
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
    if (o.choices) {
        if (o.file || o.kld || o.kld_base || o.windows || o.score_from || o.window) {
            cli_error("--multiple-choice reads its tasks from its file: no -f, --window, "
                      "--windows, --score-from or KL-divergence");
            return CLI_EXIT_USAGE;
        }
    } else if (o.kld) {
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
    size_t len = 0, n_tasks = 0;
    int32_t max_endings = 0;
    choice_task *tasks = o.choices ? read_tasks(o.choices, &n_tasks, &max_endings) : NULL;
    if (o.choices && !tasks) return 1;
    /* one sequence per ending: the shared context is read once */
    if (max_endings > o.run.ctx.n_seq_max) o.run.ctx.n_seq_max = max_endings;
    char *text = o.file ? cli_read_file(o.file, &len) : NULL;
    if (o.file && !text) return 1;
    nu_model *m;
    nu_context *ctx;
    if ((rc = cli_open(&o.run, &m, &ctx))) {
        free(text);
        tasks_free(tasks, n_tasks);
        return rc;
    }
    rc = o.choices ? run_choices(&o, ctx, tasks, n_tasks, max_endings)
         : o.kld   ? run_kl_divergence(&o, ctx)
                   : run_text(&o, m, ctx, text, len);
    free(text);
    tasks_free(tasks, n_tasks);
    nu_context_free(ctx);
    nu_model_free(m);
    return rc;
}
