/* cmd_generate.c - `nucleus generate`: continue a prompt, streaming text to
 * stdout as it is produced, with a summary on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_options.h"

static const char generate_help[] =
    "usage: nucleus generate -m MODEL (-p PROMPT | -f FILE) [options]\n\n"
    "  -p, --prompt TEXT    the prompt\n"
    "  -f, --file FILE      read the prompt from a file\n"
    "  -n, --n-predict N    most tokens to generate; -1 runs to EOS or the context end (default 128)\n"
    "      --echo           print the prompt before the continuation\n"
    "      --stop TEXT      stop before TEXT (repeatable; matched across tokens)\n"
    "      --include-stop   keep the matched stop text in the output\n"
    "      --samples N      draw N samples of the prompt, sharing its cache (default 1)\n"
    "      --special        special-token text in the prompt (e.g. <s>) becomes its token\n"
    "      --no-bos         do not add the BOS token the model asks for\n"
    "      --no-summary     no summary on stderr\n";

#define MAX_STOP 16

typedef struct generate_opts {
    cli_run_opts run;
    const char *prompt, *prompt_file;
    const char *stop[MAX_STOP];
    nu_generate_params gen;
    bool summary;
} generate_opts;

static bool write_text(void *user, int32_t index, const char *text, size_t len) {
    (void)user, (void)index;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* Returns 0 to go on, or the exit code (after printing help or an error). */
static int parse(generate_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_run_opt(&o->run, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s", generate_help, cli_run_opts_help);
            return -1;
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) {
            o->prompt = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) {
            o->prompt_file = argv[++i];
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict")) && i + 1 < argc) {
            long n;
            if (!cli_parse_int(a, argv[++i], -1, 1L << 30, &n)) return 2;
            o->gen.n_predict = (int32_t)n;
        } else if (!strcmp(a, "--stop") && i + 1 < argc) {
            if (o->gen.n_stop == MAX_STOP) {
                cli_error("at most %d stop strings", MAX_STOP);
                return 2;
            }
            o->stop[o->gen.n_stop++] = argv[++i];
        } else if (!strcmp(a, "--include-stop")) {
            o->gen.include_stop = true;
        } else if (!strcmp(a, "--samples") && i + 1 < argc) {
            long n;
            if (!cli_parse_int(a, argv[++i], 1, 64, &n)) return 2;
            o->gen.n = (int32_t)n;
        } else if (!strcmp(a, "--echo")) {
            o->gen.echo = true;
        } else if (!strcmp(a, "--special")) {
            o->gen.parse_special = true;
        } else if (!strcmp(a, "--no-bos")) {
            o->gen.add_bos = false;
        } else if (!strcmp(a, "--no-summary")) {
            o->summary = false;
        } else {
            cli_error("unknown or incomplete option '%s' (see nucleus generate --help)", a);
            return 2;
        }
    }
    if (!o->prompt == !o->prompt_file) {
        cli_error("give the prompt with exactly one of -p TEXT or -f FILE");
        return 2;
    }
    return 0;
}

static void print_summary(const nu_generate_result *r) {
    double pp = r->prompt_ms > 0 ? r->n_prompt / (r->prompt_ms / 1e3) : 0;
    double tg = r->generate_ms > 0 ? r->n_generated / (r->generate_ms / 1e3) : 0;
    fprintf(stderr,
            "\n\nprompt: %d tokens in %.1f ms (%.2f tok/s) | generated: %d tokens in %.1f ms "
            "(%.2f tok/s) | stop: %s\n",
            r->n_prompt, r->prompt_ms, pp, r->n_generated, r->generate_ms, tg,
            nu_finish_reason_name(r->finish));
}

int cmd_generate(int argc, char **argv) {
    generate_opts o = {.gen = nu_generate_default_params(), .summary = true};
    cli_run_opts_init(&o.run);
    int rc = parse(&o, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    char *file_text = NULL;
    if (o.prompt_file && !(file_text = cli_read_file(o.prompt_file, NULL))) return 1;
    nu_model *model;
    nu_context *ctx;
    o.run.ctx.n_seq_max = o.gen.n;
    if ((rc = cli_open(&o.run, &model, &ctx))) {
        free(file_text);
        return rc;
    }
    o.gen.sampling = o.run.sampling;
    o.gen.stop = o.stop;
    o.gen.on_text = o.gen.n == 1 ? write_text : NULL;
    nu_generate_result r[64];
    nu_error err;
    nu_status st = nu_generate(ctx, file_text ? file_text : o.prompt, &o.gen, r, &err);
    if (st != NU_OK) cli_error("%s", err.message);
    for (int32_t i = 0; st == NU_OK && i < o.gen.n; i++) {
        if (o.gen.n > 1)
            printf("%s--- sample %d (%d tokens, log-prob %.3f, %s) ---\n%s", i ? "\n" : "", i,
                   r[i].n_generated, r[i].sum_logprob, nu_finish_reason_name(r[i].finish),
                   r[i].text);
        if (o.summary) print_summary(&r[i]);
        else putchar('\n');
        nu_generate_result_free(&r[i]);
    }
    nu_context_free(ctx);
    nu_model_free(model);
    free(file_text);
    return st == NU_OK ? 0 : 1;
}
