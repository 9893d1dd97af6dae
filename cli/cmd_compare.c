/* cmd_compare.c - `nucleus compare`: how decoding strategies treat one
 * next-token distribution. Each strategy (greedy, pure sampling, several
 * temperatures, top-k, top-p, min-p, typical-p, top-nσ, XTC, dynamic
 * temperature, mirostat, and the chain the sampling flags describe) draws
 * many tokens from the same distribution: a model's
 * after a prompt, or a synthetic Zipf law. The table shows how much of the
 * distribution each keeps (exactly, from the sampler's filtered
 * distribution) and what the draws look like (empirically), so the effect
 * of each knob can be seen side by side. Entropies and KL divergences are in
 * bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_json.h"
#include "cli_options.h"

/* One row of the table: the stages it uses (the rest stay off; mirostat
 * with tau = mirostat_tau when mirostat is set). */
typedef struct strategy {
    const char *name;
    float temperature;
    int32_t top_k;
    float top_p, min_p, typical_p;
    float top_n_sigma, xtc_probability, xtc_threshold, dynatemp_range;
    int32_t mirostat;
    float mirostat_tau;
} strategy;

/* Off: temperature 1 and no filter. */
#define PURE 1.0f, 0, 1.0f, 0.0f, 1.0f
#define NO_NEWER -1.0f, 0.0f, 0.1f, 0.0f, 0, 5.0f

static const strategy strategies[] = {
    {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f, NO_NEWER},
    {"pure", PURE, NO_NEWER},
    {"temp=0.5", 0.5f, 0, 1.0f, 0.0f, 1.0f, NO_NEWER},
    {"temp=0.8", 0.8f, 0, 1.0f, 0.0f, 1.0f, NO_NEWER},
    {"temp=1.5", 1.5f, 0, 1.0f, 0.0f, 1.0f, NO_NEWER},
    {"top_k=5", 1.0f, 5, 1.0f, 0.0f, 1.0f, NO_NEWER},
    {"top_k=20", 1.0f, 20, 1.0f, 0.0f, 1.0f, NO_NEWER},
    {"top_k=50", 1.0f, 50, 1.0f, 0.0f, 1.0f, NO_NEWER},
    {"top_p=0.5", 1.0f, 0, 0.5f, 0.0f, 1.0f, NO_NEWER},
    {"top_p=0.9", 1.0f, 0, 0.9f, 0.0f, 1.0f, NO_NEWER},
    {"top_p=0.95", 1.0f, 0, 0.95f, 0.0f, 1.0f, NO_NEWER},
    {"min_p=0.05", 1.0f, 0, 1.0f, 0.05f, 1.0f, NO_NEWER},
    {"min_p=0.1", 1.0f, 0, 1.0f, 0.1f, 1.0f, NO_NEWER},
    {"min_p=0.2", 1.0f, 0, 1.0f, 0.2f, 1.0f, NO_NEWER},
    {"typical_p=0.5", 1.0f, 0, 1.0f, 0.0f, 0.5f, NO_NEWER},
    {"typical_p=0.9", 1.0f, 0, 1.0f, 0.0f, 0.9f, NO_NEWER},
    {"top_n_sigma=1", PURE, 1.0f, 0.0f, 0.1f, 0.0f, 0, 5.0f},
    {"top_n_sigma=2", PURE, 2.0f, 0.0f, 0.1f, 0.0f, 0, 5.0f},
    {"xtc=0.05", PURE, -1.0f, 0.5f, 0.05f, 0.0f, 0, 5.0f},
    {"dynatemp=0.5", PURE, -1.0f, 0.0f, 0.1f, 0.5f, 0, 5.0f},
    {"mirostat=3", PURE, -1.0f, 0.0f, 0.1f, 0.0f, 1, 3.0f},
    {"mirostat_v2=3", PURE, -1.0f, 0.0f, 0.1f, 0.0f, 2, 3.0f},
};
#define N_STRATEGIES (sizeof strategies / sizeof *strategies)
#define N_ROWS (N_STRATEGIES + 1) /* and the chain of the flags */

typedef struct compare_opts {
    cli_run_opts run;
    const char *prompt;
    long zipf_n, samples;
    double zipf_s;
    bool json;
} compare_opts;

static int run_compare(int argc, char **argv);

static const cli_option compare_options[] = {
    {.name = "--prompt",
     .short_name = "-p",
     .kind = CLI_STRING,
     .field = CLI_FIELD(compare_opts, prompt),
     .placeholder = "TEXT",
     .help = "use the model's next-token distribution after this prompt"},
    {.name = "--zipf",
     .kind = CLI_INT,
     .field = CLI_FIELD(compare_opts, zipf_n),
     .min = 2,
     .max = 1L << 24,
     .placeholder = "N",
     .help = "use a Zipf distribution over N tokens, p(i) ~ 1/(i+1)^S",
     .no_default = true},
    {.name = "--zipf-s",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(compare_opts, zipf_s),
     .fmin = 0,
     .fmax = 10,
     .placeholder = "S",
     .help = "the Zipf exponent"},
    {.name = "--samples",
     .kind = CLI_INT,
     .field = CLI_FIELD(compare_opts, samples),
     .min = 1,
     .max = 100000000,
     .placeholder = "N",
     .help = "draws per strategy"},
    {.name = "--json",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(compare_opts, json),
     .help = "one JSON object instead of the table"},
    {0},
};

static const cli_section compare_sections[] = {
    CLI_OWN_SECTION(NULL, compare_options),
    CLI_RUN_SECTIONS(compare_opts, run),
    {0},
};

const cli_command compare_command = {
    .name = "compare",
    .summary = "decoding strategies side by side on one next-token distribution",
    .usage = "nucleus compare (-m MODEL -p PROMPT | --zipf N [--zipf-s S]) [options]",
    .about = "Draws tokens from one next-token distribution with each decoding strategy and\n"
             "tabulates: kept (tokens the strategy can draw), unique (distinct tokens drawn),\n"
             "H(q) (entropy of the strategy's exact distribution q), H(draws) (entropy of the\n"
             "drawn frequencies), top (whether and how often the most likely token was drawn),\n"
             "KL(q||p) (exact divergence of q from the original p) and KL(draws||p). Bits.\n"
             "xtc=T removes the likely tokens above T half of the time; dynatemp=R is temperature\n"
             "1 +- R; mirostat=TAU and mirostat_v2=TAU show mirostat's first step (mu = 2 tau).\n"
             "The last row, 'chain', is the sampler the sampling options describe.\n",
    .sections = compare_sections,
    .run = run_compare,
};

/* The distribution compared on: logits and their softmax p. */
typedef struct distribution {
    int32_t n;
    float *logits;
    double *p;
    int32_t top;           /* argmax of p */
    double entropy;        /* bits */
    const nu_model *model; /* for token texts; NULL for Zipf */
} distribution;

/* What one strategy did. */
typedef struct outcome {
    nu_sampler_params params;
    size_t kept;
    int32_t unique;
    double h_exact, h_draws, kl_exact, kl_draws, top_frac;
} outcome;

/* Reads the options; false when the command ends (*rc: help or an error). */
static bool parse(compare_opts *o, int argc, char **argv, int *rc) {
    if (!cli_parse(&compare_command, argc, argv, o, rc)) return false;
    bool from_model = o->run.model || o->prompt;
    if (o->zipf_n ? from_model : !o->prompt) {
        cli_error("give either [-m MODEL] -p PROMPT or --zipf N");
        *rc = CLI_EXIT_USAGE;
        return false;
    }
    if (!o->zipf_n && !(o->run.model = cli_model_or_demo(o->run.model))) {
        *rc = CLI_EXIT_USAGE;
        return false;
    }
    return true;
}

/* p = softmax(logits), its argmax and its entropy in bits. */
static void finish_distribution(distribution *d) {
    double max = -INFINITY, z = 0;
    for (int32_t i = 0; i < d->n; i++) max = fmax(max, d->logits[i]);
    for (int32_t i = 0; i < d->n; i++) z += exp(d->logits[i] - max);
    d->top = 0;
    d->entropy = 0;
    for (int32_t i = 0; i < d->n; i++) {
        d->p[i] = exp(d->logits[i] - max) / z;
        if (d->p[i] > d->p[d->top]) d->top = i;
        if (d->p[i] > 0) d->entropy -= d->p[i] * log2(d->p[i]);
    }
}

/* Room for n logits and probabilities; false after printing an error. */
static bool alloc_distribution(distribution *d, int32_t n) {
    d->n = n;
    d->logits = malloc((size_t)n * sizeof *d->logits);
    d->p = malloc((size_t)n * sizeof *d->p);
    if (d->logits && d->p) return true;
    cli_error("out of memory for a distribution of %d tokens", n);
    return false;
}

/* Zipf's law over n tokens: p(i) proportional to 1/(i+1)^s. */
static bool zipf_distribution(distribution *d, long n, double s) {
    if (!alloc_distribution(d, (int32_t)n)) return false;
    for (long i = 0; i < n; i++) d->logits[i] = (float)(-s * log((double)(i + 1)));
    finish_distribution(d);
    return true;
}

/* Tokenizes the prompt (with BOS when the model wants one) into a new array. */
static int32_t *tokenize_prompt(const nu_model *m, const char *text, size_t *n) {
    size_t len = strlen(text), cap = len + 8;
    int32_t *toks = malloc(cap * sizeof *toks);
    nu_error err;
    nu_status st =
        toks ? nu_tokenize(m, text, len, NU_TOKENIZE_ADD_BOS, toks, cap, n, &err) : NU_ERR_NOMEM;
    if (st == NU_ERR_BUFFER_SMALL) {
        int32_t *bigger = realloc(toks, *n * sizeof *toks);
        st = bigger ? nu_tokenize(m, text, len, NU_TOKENIZE_ADD_BOS, toks = bigger, *n, n, &err)
                    : NU_ERR_NOMEM;
    }
    if (st == NU_OK && *n == 0) {
        st = NU_ERR_INVALID_ARG;
        snprintf(err.message, sizeof err.message, "the prompt is empty");
    }
    if (st) {
        cli_error("%s", st == NU_ERR_NOMEM ? "out of memory for the prompt" : err.message);
        free(toks);
        return NULL;
    }
    return toks;
}

/* Runs the prompt through the model in batches of n_batch and copies the
 * logits after its last token into d. */
static bool prefill(nu_context *ctx, const int32_t *toks, size_t n, int32_t n_batch,
                    distribution *d) {
    nu_batch_entry *b = malloc((size_t)n_batch * sizeof *b);
    nu_error err;
    nu_status st = b ? NU_OK : NU_ERR_NOMEM;
    int32_t last = 0;
    for (size_t start = 0; st == NU_OK && start < n; start += (size_t)n_batch) {
        size_t m = n - start < (size_t)n_batch ? n - start : (size_t)n_batch;
        for (size_t i = 0; i < m; i++)
            b[i] = (nu_batch_entry){toks[start + i], (int32_t)(start + i), 0, start + i == n - 1};
        st = nu_decode(ctx, b, (int32_t)m, &err);
        last = (int32_t)m - 1;
    }
    free(b);
    if (st) {
        cli_error("%s", st == NU_ERR_NOMEM ? "out of memory" : err.message);
        return false;
    }
    memcpy(d->logits, nu_logits(ctx, last), (size_t)d->n * sizeof *d->logits);
    return true;
}

/* The model's next-token distribution after the prompt. */
static bool model_distribution(const compare_opts *o, nu_model *m, nu_context *ctx,
                               distribution *d) {
    size_t n;
    int32_t *toks = tokenize_prompt(m, o->prompt, &n);
    if (!toks) return false;
    bool ok = n < (size_t)nu_context_n_ctx(ctx);
    if (!ok) cli_error("the prompt has %zu tokens; the context holds %d", n, nu_context_n_ctx(ctx));
    ok = ok && alloc_distribution(d, nu_model_n_vocab(m)) &&
         prefill(ctx, toks, n, o->run.ctx.n_batch, d);
    free(toks);
    if (ok) finish_distribution(d);
    d->model = m;
    return ok;
}

/* Entropy and KL(q||p) in bits of one probability, accumulated. (A KL sum
 * may end a hair below 0 by rounding; the callers clamp it.) */
static void add_term(double q, double p, double *h, double *kl) {
    if (q <= 0) return;
    *h -= q * log2(q);
    *kl += q * log2(q / p);
}

/* A sampler for the strategy: with the model's vocabulary when there is a
 * model (for banned strings); NULL after printing the error. */
static nu_sampler *strategy_sampler(const distribution *d, const nu_sampler_params *p) {
    nu_sampler *s;
    nu_error err;
    nu_status st = d->model ? nu_sampler_new_for_model(p, d->model, &s, &err)
                            : nu_sampler_new(p, d->n, &s, &err);
    if (st == NU_OK) return s;
    cli_error("%s", err.message);
    return NULL;
}

/* Adds weight times the distribution the sampler would draw from to q. */
static bool add_distribution(const distribution *d, const nu_sampler_params *p, double weight,
                             double *q) {
    nu_sampler *s = strategy_sampler(d, p);
    if (!s) return false;
    const nu_candidates *c = nu_sampler_distribution(s, d->logits);
    for (size_t i = 0; i < c->size; i++) q[c->data[i].id] += weight * c->data[i].prob;
    nu_sampler_free(s);
    return true;
}

/* The exact distribution q the strategy draws from: the sampler's (a point
 * mass when greedy); XTC's is a mixture, the distribution with the top
 * tokens removed with probability xtc_probability and the full one
 * otherwise. */
static bool exact_stats(const distribution *d, outcome *r, double *q) {
    memset(q, 0, (size_t)d->n * sizeof *q);
    nu_sampler_params p = r->params;
    double xtc = p.xtc_threshold <= 0.5f ? p.xtc_probability : 0.0;
    p.xtc_probability = 1.0f;
    if (xtc > 0 && !add_distribution(d, &p, xtc, q)) return false;
    p.xtc_probability = 0.0f;
    if (xtc < 1 && !add_distribution(d, &p, 1 - xtc, q)) return false;
    r->kept = 0;
    r->h_exact = r->kl_exact = 0;
    for (int32_t i = 0; i < d->n; i++) {
        r->kept += q[i] > 0;
        add_term(q[i], d->p[i], &r->h_exact, &r->kl_exact);
    }
    r->kl_exact = fmax(r->kl_exact, 0.0);
    return true;
}

/* The drawn frequencies: distinct tokens, entropy, KL from p, top token. */
static void draw_stats(const distribution *d, const int64_t *counts, long n, outcome *r) {
    r->unique = 0;
    r->h_draws = r->kl_draws = 0;
    for (int32_t i = 0; i < d->n; i++) {
        r->unique += counts[i] > 0;
        add_term((double)counts[i] / (double)n, d->p[i], &r->h_draws, &r->kl_draws);
    }
    r->kl_draws = fmax(r->kl_draws, 0.0);
    r->top_frac = (double)counts[d->top] / (double)n;
}

/* Draws n tokens with the strategy's sampler (nothing is accepted: every
 * draw is from the same distribution, mirostat's at its first mu) and
 * fills r; q is scratch for the exact distribution. */
static bool run_strategy(const distribution *d, long n, int64_t *counts, double *q, outcome *r) {
    nu_sampler *s = strategy_sampler(d, &r->params);
    if (!s) return false;
    memset(counts, 0, (size_t)d->n * sizeof *counts);
    for (long i = 0; i < n; i++) counts[nu_sampler_sample(s, d->logits)]++;
    nu_sampler_free(s);
    draw_stats(d, counts, n, r);
    return exact_stats(d, r, q);
}

/* A strategy's sampler: the defaults with its filters, the seed of the flags. */
static nu_sampler_params strategy_params(const strategy *st, const nu_sampler_params *flags) {
    nu_sampler_params p = nu_sampler_default_params();
    p.temperature = st->temperature;
    p.top_k = st->top_k;
    p.top_p = st->top_p;
    p.min_p = st->min_p;
    p.typical_p = st->typical_p;
    p.top_n_sigma = st->top_n_sigma;
    p.xtc_probability = st->xtc_probability;
    p.xtc_threshold = st->xtc_threshold;
    p.dynatemp_range = st->dynatemp_range;
    p.mirostat = st->mirostat;
    p.mirostat_tau = st->mirostat_tau;
    p.seed = flags->seed;
    return p;
}

/* Rows past the fixed strategies are the chain of the flags. */
static const char *row_name(size_t i) {
    return i < N_STRATEGIES ? strategies[i].name : "chain";
}

/* A token's text for the table: its bytes with newlines shown as \n, or
 * "#id" for a synthetic distribution. */
static void print_token(const distribution *d, int32_t id) {
    char buf[128];
    if (!d->model) {
        printf("#%d", id);
        return;
    }
    size_t n = nu_token_to_bytes(d->model, id, true, buf, sizeof buf - 1);
    if (n > sizeof buf - 1) n = sizeof buf - 1;
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '\n')
            fputs("\\n", stdout);
        else
            putchar(buf[i]);
    }
    putchar('\'');
}

/* The n most likely tokens of p, best first (n small). */
static int32_t top_tokens(const distribution *d, int32_t *ids, int32_t n) {
    int32_t k = 0;
    for (int32_t i = 0; i < d->n; i++) {
        int32_t j;
        if (k < n)
            j = k++;
        else if (d->p[i] > d->p[ids[n - 1]])
            j = n - 1;
        else
            continue;
        while (j > 0 && d->p[ids[j - 1]] < d->p[i]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    return k;
}

/* The distribution (source, size, entropy, most likely tokens) and the
 * table's column names. */
static void print_header(const compare_opts *o, const distribution *d) {
    if (d->model)
        printf("next-token distribution of %s after \"%s\"", o->run.model, o->prompt);
    else
        printf("Zipf distribution, s = %g", o->zipf_s);
    printf(": %d tokens, entropy %.3f bits\nmost likely:", d->n, d->entropy);
    int32_t ids[5], k = top_tokens(d, ids, 5);
    for (int32_t i = 0; i < k; i++) {
        putchar(' ');
        print_token(d, ids[i]);
        printf(" %.3f", d->p[ids[i]]);
    }
    printf("\n%ld draws per strategy, seed %llu\n\n", o->samples,
           (unsigned long long)o->run.sampling.seed);
    printf("%-14s %6s %7s %7s %9s %10s %9s %13s\n", "strategy", "kept", "unique", "H(q)",
           "H(draws)", "top", "KL(q||p)", "KL(draws||p)");
}

/* One strategy's line of the table. */
static void print_row(size_t i, const outcome *r) {
    char top[32];
    snprintf(top, sizeof top, "%s %5.1f%%", r->top_frac > 0 ? "yes" : "no", 100 * r->top_frac);
    printf("%-14s %6zu %7d %7.3f %9.3f %10s %9.4f %13.4f\n", row_name(i), r->kept, r->unique,
           r->h_exact, r->h_draws, top, r->kl_exact, r->kl_draws);
}

/* The whole result as one JSON object (fields as in the table, in bits). */
static void print_json(const compare_opts *o, const distribution *d, const outcome *rows) {
    printf("{\"distribution\": {\"source\": \"%s\", ", d->model ? "model" : "zipf");
    if (d->model) {
        printf("\"model\": ");
        json_string(stdout, o->run.model, strlen(o->run.model));
        printf(", \"prompt\": ");
        json_string(stdout, o->prompt, strlen(o->prompt));
    } else {
        printf("\"zipf_s\": ");
        json_number(stdout, o->zipf_s);
    }
    printf(", \"n_vocab\": %d, \"entropy_bits\": ", d->n);
    json_number(stdout, d->entropy);
    printf(", \"top_token\": %d, \"top_prob\": ", d->top);
    json_number(stdout, d->p[d->top]);
    printf("}, \"samples\": %ld, \"seed\": %llu, \"strategies\": [", o->samples,
           (unsigned long long)o->run.sampling.seed);
    for (size_t i = 0; i < N_ROWS; i++) {
        const outcome *r = &rows[i];
        const nu_sampler_params *p = &r->params;
        printf("%s\n  {\"name\": \"%s\", \"temperature\": %g, \"top_k\": %d, \"top_p\": %g, "
               "\"min_p\": %g, \"typical_p\": %g, \"top_n_sigma\": %g, \"xtc_probability\": %g, "
               "\"xtc_threshold\": %g, \"dynatemp_range\": %g, \"mirostat\": %d, "
               "\"mirostat_tau\": %g, \"kept\": %zu, \"unique\": %d, "
               "\"top_token_drawn\": %s, \"top_token_frac\": %.6f, \"entropy_bits\": ",
               i ? "," : "", row_name(i), p->temperature, p->top_k, p->top_p, p->min_p,
               p->typical_p, p->top_n_sigma, p->xtc_probability, p->xtc_threshold,
               p->dynatemp_range, p->mirostat, p->mirostat_tau, r->kept, r->unique,
               r->top_frac > 0 ? "true" : "false", r->top_frac);
        json_number(stdout, r->h_exact);
        printf(", \"sample_entropy_bits\": ");
        json_number(stdout, r->h_draws);
        printf(", \"kl_bits\": ");
        json_number(stdout, r->kl_exact);
        printf(", \"sample_kl_bits\": ");
        json_number(stdout, r->kl_draws);
        printf("}");
    }
    printf("\n]}\n");
}

/* Every strategy, then the chain of the flags; prints the result. */
static int compare(const compare_opts *o, const distribution *d) {
    outcome rows[N_ROWS];
    int64_t *counts = malloc((size_t)d->n * sizeof *counts);
    double *q = malloc((size_t)d->n * sizeof *q);
    if (!counts || !q) {
        free(counts);
        free(q);
        cli_error("out of memory");
        return 1;
    }
    bool ok = true;
    for (size_t i = 0; ok && i < N_ROWS; i++) {
        rows[i].params =
            i < N_STRATEGIES ? strategy_params(&strategies[i], &o->run.sampling) : o->run.sampling;
        ok = run_strategy(d, o->samples, counts, q, &rows[i]);
    }
    free(counts);
    free(q);
    if (!ok) return 1;
    if (o->json) {
        print_json(o, d, rows);
        return 0;
    }
    print_header(o, d);
    for (size_t i = 0; i < N_ROWS; i++) print_row(i, &rows[i]);
    return 0;
}

static int run_compare(int argc, char **argv) {
    compare_opts o = {.samples = 10000, .zipf_s = 1.0};
    cli_run_opts_init(&o.run);
    int rc;
    if (!parse(&o, argc, argv, &rc)) return rc;
    if (o.run.sampling.watermark.key || o.run.watermark_tuned) {
        /* compare draws single tokens with no context, which the green list needs */
        cli_error("compare does not take --watermark: the green list depends on the previous "
                  "tokens, and compare samples one position without history");
        return 2;
    }
    if (o.run.sampling.dry_multiplier > 0) {
        cli_error("compare does not take --dry-multiplier: DRY penalises repeats of the "
                  "previous tokens, and compare samples one position without history");
        return 2;
    }
    distribution d = {0};
    nu_model *m = NULL;
    nu_context *ctx = NULL;
    if (o.zipf_n)
        rc = zipf_distribution(&d, o.zipf_n, o.zipf_s) ? 0 : 1;
    else if (!(rc = cli_open(&o.run, &m, &ctx)))
        rc = model_distribution(&o, m, ctx, &d) ? 0 : 1;
    if (!rc) rc = compare(&o, &d);
    free(d.logits);
    free(d.p);
    nu_context_free(ctx);
    nu_model_free(m);
    return rc;
}
