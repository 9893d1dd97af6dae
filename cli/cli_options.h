/* cli_options.h - options shared by the commands that run a model: the
 * model reference, context sizes, threads and the sampler settings. */
#ifndef NU_CLI_OPTIONS_H
#define NU_CLI_OPTIONS_H

#include "nucleus.h"

/* Most --logit-bias options one command line may give. */
#define CLI_MAX_LOGIT_BIAS 256

typedef struct cli_run_opts {
    const char *model;
    nu_context_params ctx;
    nu_sampler_params sampling; /* its logit_bias points into bias below */
    nu_logit_bias bias[CLI_MAX_LOGIT_BIAS];
    /* constrained output: at most one of these */
    const char *grammar_file, *schema_file, *regex, *choices;
    bool json_object;
    int32_t json_whitespace;
    bool watermark_tuned; /* a --watermark-* setting was given (it needs --watermark KEY) */
} cli_run_opts;

void cli_run_opts_init(cli_run_opts *o);

/* Tries argv[*i] as a shared option, consuming its value. Returns 1 when it
 * was one, 0 when it is not a shared option, -1 after printing an error. */
int cli_run_opt(cli_run_opts *o, int argc, char **argv, int *i);

/* Help text for the shared options. */
extern const char cli_run_opts_help[];

/* The constrained-output options (--grammar, --json-schema, --json, --regex,
 * --choice, --json-whitespace), for the commands that generate text; same
 * returns as cli_run_opt. */
int cli_grammar_opt(cli_run_opts *o, int argc, char **argv, int *i);
extern const char cli_grammar_help[];

/* The grammar the options ask for, or *out NULL when none; prints errors and
 * returns non-zero on failure. */
int cli_make_grammar(const cli_run_opts *o, const nu_model *m, nu_grammar **out);

/* Loads the model and makes a context; prints errors. */
int cli_open(const cli_run_opts *o, nu_model **model, nu_context **ctx);

#endif
