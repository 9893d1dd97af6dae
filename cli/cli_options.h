/* cli_options.h - the option groups several commands share: the model and
 * context (model), the sampler chain (sampling), the watermark, and
 * constrained output (grammar). Each is a table of cli_parse.h rows over
 * cli_run_opts; a command embeds a cli_run_opts and lists the groups it
 * takes with CLI_RUN_SECTIONS / CLI_GRAMMAR_SECTION. */
#ifndef NU_CLI_OPTIONS_H
#define NU_CLI_OPTIONS_H

#include "cli_parse.h"
#include "nucleus.h"

/* Most --logit-bias options one command line may give. */
#define CLI_MAX_LOGIT_BIAS 256
/* Most --dry-sequence-breaker, --ban and --ban-tokens options, and the
 * longest token sequence of one --ban-tokens. */
#define CLI_MAX_BREAKERS 32
#define CLI_MAX_BANS 64
#define CLI_MAX_BAN_TOKENS 32

/* The --dry-sequence-breaker strings: the first one given replaces the
 * library's defaults, "none" leaves none. count points to the sampler
 * params' n_dry_sequence_breakers (set by cli_run_opts_init). */
typedef struct cli_breakers {
    const char *items[CLI_MAX_BREAKERS];
    int32_t *count;
    bool given;
} cli_breakers;

typedef struct cli_run_opts {
    const char *model;
    nu_context_params ctx;
    nu_sampler_params sampling; /* its logit_bias points into bias below */
    nu_logit_bias bias[CLI_MAX_LOGIT_BIAS];
    cli_breakers breakers;               /* sampling.dry_sequence_breakers points into it */
    const char *banned[CLI_MAX_BANS];    /* sampling.banned_strings points here */
    nu_token_seq ban_seqs[CLI_MAX_BANS]; /* sampling.banned_tokens; each into ban_ids */
    int32_t ban_ids[CLI_MAX_BANS][CLI_MAX_BAN_TOKENS];
    /* constrained output: at most one of these */
    const char *grammar_file, *schema_file, *regex, *choices;
    bool json_object;
    int32_t json_whitespace;
    bool watermark_tuned; /* a --watermark-* setting was given (it needs --watermark KEY) */
} cli_run_opts;

/* The defaults: the library's context and sampler defaults, nothing else
 * (the lists the options fill point into o itself: o must not be copied). */
void cli_run_opts_init(cli_run_opts *o);

/* The KV cache types by name, for every --kv-type. */
extern const cli_choice cli_kv_types[];
/* The name of a KV cache type in cli_kv_types ("?" for another value). */
const char *cli_kv_name(nu_kv_type t);
/* The rows of --kv-type-k and --kv-type-v, into the fields `k` and `v` of
 * struct `type` (NU_KV_SAME until given: --kv-type's). */
#define CLI_KV_SPLIT_ROWS(type, k, v)                                                              \
    {.name = "--kv-type-k",                                                                        \
     .kind = CLI_ENUM,                                                                             \
     .field = CLI_FIELD(type, k),                                                                  \
     .choices = cli_kv_types,                                                                      \
     .placeholder = "T",                                                                           \
     .help = "the keys' type only",                                                                \
     .default_text = "--kv-type"},                                                                 \
    {                                                                                              \
        .name = "--kv-type-v", .kind = CLI_ENUM, .field = CLI_FIELD(type, v),                      \
        .choices = cli_kv_types, .placeholder = "T", .help = "the values' type only",              \
        .default_text = "--kv-type"                                                                \
    }

/* The rows of each group (fields in cli_run_opts). */
extern const cli_option cli_model_options[];
extern const cli_option cli_sampling_options[];
extern const cli_option cli_watermark_options[];
extern const cli_option cli_grammar_options[];

/* The model, sampling and watermark sections, for a command whose options
 * struct `type` holds its cli_run_opts as `member`. */
#define CLI_RUN_SECTIONS(type, member)                                                             \
    CLI_SECTION("model", cli_model_options, type, member),                                         \
        CLI_SECTION("sampling (stages run in the order of --sampler-order, then a seeded draw)",   \
                    cli_sampling_options, type, member),                                           \
        CLI_SECTION("watermark (Kirchenbauer et al. 2023; check text with nucleus watermark "      \
                    "detect)",                                                                     \
                    cli_watermark_options, type, member)

/* The constrained-output section, for the commands that generate text. */
#define CLI_GRAMMAR_SECTION(type, member)                                                          \
    CLI_SECTION("constrained output (at most one)", cli_grammar_options, type, member)

/* The grammar the options ask for, or *out NULL when none; prints errors and
 * returns non-zero on failure. */
int cli_make_grammar(const cli_run_opts *o, const nu_model *m, nu_grammar **out);

/* Loads the model and makes a context; prints errors. */
int cli_open(const cli_run_opts *o, nu_model **model, nu_context **ctx);
/* A warning on stderr when n_ctx (a sequence's context) is more than the
 * model's trained context: positions past it run, but were never trained. */
void cli_warn_context(const nu_model *m, int64_t n_ctx);

#endif
