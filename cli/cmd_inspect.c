/* cmd_inspect.c - `nucleus inspect`: what the sampler chain does to the
 * model's real next-token distributions, step by step: the top candidates
 * before and after each stage, the entropy, the effective vocabulary (tokens
 * above 1%), the nucleus size for a given p, and the token chosen. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_json.h"
#include "cli_options.h"

static const char inspect_help[] =
    "usage: nucleus inspect [-m MODEL] -p PROMPT [options] [sampling flags]\n\n"
    "  -p, --prompt TEXT  the prompt\n"
    "  -n, --steps N      tokens to generate and explain (default 8)\n"
    "      --top N        candidates shown per stage (default 5)\n"
    "      --nucleus P    report how many tokens the top-p nucleus of P holds (default: --top-p)\n"
    "      --json         one JSON object per step\n";

#define MAX_SHOWN 50
#define MAX_STAGE_ROWS 24

/* What the observer saw at one stage: its name, how many candidates were
 * left and the most likely of them. */
typedef struct stage_row {
    char name[24];
    size_t kept;
    int32_t n;
    nu_candidate top[MAX_SHOWN];
} stage_row;

typedef struct inspect_state {
    const nu_model *model;
    int32_t n_top;
    stage_row rows[MAX_STAGE_ROWS];
    int32_t n_rows;
    int32_t chosen;
    float chosen_prob;
} inspect_state;

/* The n most likely candidates among those with a finite logit. */
static int32_t top_of(const nu_candidates *c, int32_t n, nu_candidate *out, size_t *kept) {
    int32_t k = 0;
    *kept = 0;
    for (size_t i = 0; i < c->size; i++) {
        if (!isfinite(c->data[i].logit)) continue;
        (*kept)++;
        if (k == n && c->data[i].prob <= out[k - 1].prob) continue;
        int32_t j = k < n ? k++ : n - 1;
        while (j > 0 && out[j - 1].prob < c->data[i].prob) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = c->data[i];
    }
    return k;
}

/* Adds what a stage left; a stage that changed nothing shown (switched
 * off, or no effect here) is left out. */
static void add_row(inspect_state *st, const char *name, const nu_candidates *c) {
    if (st->n_rows == MAX_STAGE_ROWS) return;
    stage_row *r = &st->rows[st->n_rows];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->n = top_of(c, st->n_top, r->top, &r->kept);
    const stage_row *prev = st->n_rows ? r - 1 : NULL;
    if (prev && prev->kept == r->kept && prev->n == r->n &&
        memcmp(prev->top, r->top, (size_t)r->n * sizeof *r->top) == 0)
        return;
    st->n_rows++;
}

static void observe(void *user, const char *stage, const nu_candidates *before,
                    const nu_candidates *after) {
    inspect_state *st = user;
    if (st->n_rows == 0) add_row(st, "raw", before);
    if (!strcmp(stage, "greedy") || !strcmp(stage, "dist")) {
        if (after->selected >= 0) {
            st->chosen = after->data[after->selected].id;
            st->chosen_prob = after->data[after->selected].prob;
        }
        return;
    }
    add_row(st, stage, after);
}

/* Entropy (nats), tokens above 1% and the size of the top-p nucleus of the
 * model's own distribution. */
static void distribution_stats(const float *logits, int32_t n, float p, double *entropy,
                               int32_t *effective, int32_t *nucleus) {
    double max = -INFINITY, z = 0, h = 0;
    for (int32_t i = 0; i < n; i++) max = logits[i] > max ? logits[i] : max;
    for (int32_t i = 0; i < n; i++) z += exp(logits[i] - max);
    float *probs = malloc((size_t)n * sizeof *probs);
    *effective = 0;
    for (int32_t i = 0; i < n; i++) {
        double q = exp(logits[i] - max) / z;
        if (q > 0) h -= q * log(q);
        *effective += q > 0.01;
        if (probs) probs[i] = (float)q;
    }
    *entropy = h;
    *nucleus = 0;
    if (!probs) return;
    /* the nucleus: most likely first until the mass reaches p */
    double mass = 0;
    while (mass < p && *nucleus < n) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (probs[i] > probs[best]) best = i;
        mass += probs[best];
        probs[best] = -1;
        (*nucleus)++;
    }
    free(probs);
}

static void print_piece(const nu_model *m, int32_t token) {
    char buf[256];
    size_t n = nu_token_to_bytes(m, token, true, buf, sizeof buf - 1);
    buf[n < sizeof buf - 1 ? n : sizeof buf - 1] = 0;
    putchar('\'');
    for (char *c = buf; *c; c++) {
        if (*c == '\n') fputs("\\n", stdout);
        else putchar(*c);
    }
    putchar('\'');
}

static void print_text_step(const inspect_state *st, int step, double entropy, int32_t eff,
                            int32_t nucleus, float p) {
    printf("\nstep %d  entropy %.3f nats  effective vocabulary %d (p > 1%%)  "
           "nucleus(%.2f) %d tokens\n", step, entropy, eff, p, nucleus);
    for (int32_t r = 0; r < st->n_rows; r++) {
        const stage_row *row = &st->rows[r];
        printf("  %-17s %6zu left |", row->name, row->kept);
        for (int32_t k = 0; k < row->n; k++) {
            putchar(' ');
            print_piece(st->model, row->top[k].id);
            printf(" %.3f", row->top[k].prob);
        }
        putchar('\n');
    }
    printf("  chosen: ");
    print_piece(st->model, st->chosen);
    printf(" (id %d, p %.3f after the chain)\n", st->chosen, st->chosen_prob);
}

static void print_json_step(const inspect_state *st, int step, double entropy, int32_t eff,
                            int32_t nucleus, float p) {
    printf("{\"step\": %d, \"entropy\": %.6f, \"effective_vocab\": %d, \"nucleus_p\": %.4f, "
           "\"nucleus_size\": %d, \"chosen\": {\"token\": %d, \"text\": ",
           step, entropy, eff, p, nucleus, st->chosen);
    json_token_text(stdout, st->model, st->chosen);
    printf(", \"prob\": %.6f}, \"stages\": [", st->chosen_prob);
    for (int32_t r = 0; r < st->n_rows; r++) {
        const stage_row *row = &st->rows[r];
        printf("%s{\"stage\": \"%s\", \"kept\": %zu, \"top\": [", r ? ", " : "", row->name,
               row->kept);
        for (int32_t k = 0; k < row->n; k++) {
            printf("%s{\"token\": %d, \"text\": ", k ? ", " : "", row->top[k].id);
            json_token_text(stdout, st->model, row->top[k].id);
            printf(", \"prob\": %.6f}", row->top[k].prob);
        }
        printf("]}");
    }
    printf("]}\n");
}

typedef struct inspect_opts {
    cli_run_opts run;
    const char *prompt;
    long steps, top;
    double nucleus;
    bool json;
} inspect_opts;

static int parse(inspect_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_run_opt(&o->run, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        bool v = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s", inspect_help, cli_run_opts_help);
            return -1;
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && v) {
            o->prompt = argv[++i];
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--steps")) && v) {
            if (!cli_parse_int(a, argv[++i], 1, 4096, &o->steps)) return 2;
        } else if (!strcmp(a, "--top") && v) {
            if (!cli_parse_int(a, argv[++i], 1, MAX_SHOWN, &o->top)) return 2;
        } else if (!strcmp(a, "--nucleus") && v) {
            if (!cli_parse_float(a, argv[++i], 0, 1, &o->nucleus)) return 2;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else {
            cli_error("unknown or incomplete option '%s' (see nucleus inspect --help)", a);
            return 2;
        }
    }
    if (!o->prompt) {
        cli_error("no prompt given (-p TEXT)");
        return 2;
    }
    return 0;
}

/* Reads the prompt; the logits of its last token are at entry *last. */
static int read_prompt(nu_context *ctx, nu_sampler *sampler, const char *prompt, int32_t *n_pos,
                       int32_t *last) {
    const nu_model *m = nu_context_model(ctx);
    size_t len = strlen(prompt), n = 0;
    int32_t *toks = malloc((len + 8) * sizeof *toks);
    nu_batch_entry *b = malloc((len + 8) * sizeof *b);
    nu_error err;
    nu_status st = toks && b ? nu_tokenize(m, prompt, len, NU_TOKENIZE_ADD_BOS, toks, len + 8, &n,
                                           &err) : NU_ERR_NOMEM;
    if (st == NU_OK && (n == 0 || n >= (size_t)nu_context_n_ctx(ctx))) {
        snprintf(err.message, sizeof err.message, "the prompt has %zu tokens; it must fit the "
                 "context (%d)", n, nu_context_n_ctx(ctx));
        st = NU_ERR_INVALID_ARG;
    }
    for (size_t i = 0; st == NU_OK && i < n; i++) b[i] = (nu_batch_entry){toks[i], (int32_t)i, 0, i == n - 1};
    int32_t nb = 512;
    for (size_t s = 0; st == NU_OK && s < n; s += (size_t)nb)
        st = nu_decode(ctx, b + s, (int32_t)(n - s < (size_t)nb ? n - s : (size_t)nb), &err);
    if (st) cli_error("%s", st == NU_ERR_NOMEM ? "out of memory" : err.message);
    else nu_sampler_accept_prompt(sampler, toks, (int32_t)n);
    *n_pos = (int32_t)n;
    *last = (int32_t)((n - 1) % (size_t)nb);
    free(toks);
    free(b);
    return st ? 1 : 0;
}

int cmd_inspect(int argc, char **argv) {
    inspect_opts o = {.steps = 8, .top = 5, .nucleus = -1};
    cli_run_opts_init(&o.run);
    int rc = parse(&o, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.nucleus < 0) o.nucleus = o.run.sampling.top_p;
    o.run.ctx.n_batch = 512;
    nu_model *m;
    nu_context *ctx;
    if ((rc = cli_open(&o.run, &m, &ctx))) return rc;
    inspect_state st = {.model = m, .n_top = (int32_t)o.top};
    nu_sampler *s = NULL;
    nu_error err;
    int32_t n_pos = 0, entry = 0;
    if (nu_sampler_new_for_model(&o.run.sampling, m, &s, &err) ||
        nu_sampler_set_observer(s, observe, &st, &err)) {
        cli_error("%s", err.message);
        rc = 1;
    }
    if (!rc) rc = read_prompt(ctx, s, o.prompt, &n_pos, &entry);
    for (long step = 0; !rc && step < o.steps; step++) {
        const float *logits = nu_logits(ctx, entry);
        double entropy;
        int32_t eff, nucleus;
        distribution_stats(logits, nu_model_n_vocab(m), (float)o.nucleus, &entropy, &eff, &nucleus);
        st.n_rows = 0;
        int32_t tok = nu_sampler_sample(s, logits);
        st.chosen = tok;
        nu_sampler_accept(s, tok);
        if (o.json) print_json_step(&st, (int)step, entropy, eff, nucleus, (float)o.nucleus);
        else print_text_step(&st, (int)step, entropy, eff, nucleus, (float)o.nucleus);
        if (nu_token_is_eog(m, tok) || n_pos >= nu_context_n_ctx(ctx)) break;
        nu_batch_entry e = {tok, n_pos++, 0, true};
        entry = 0;
        if (nu_decode(ctx, &e, 1, &err)) {
            cli_error("%s", err.message);
            rc = 1;
        }
    }
    nu_sampler_free(s);
    nu_context_free(ctx);
    nu_model_free(m);
    return rc;
}
