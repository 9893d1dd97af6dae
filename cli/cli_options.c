/* cli_options.c - the option groups shared by generate, chat, bench and
 * friends: their rows, and what the commands do with the values. */
#include "cli_options.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

void cli_run_opts_init(cli_run_opts *o) {
    *o =
        (cli_run_opts){.ctx = nu_context_default_params(), .sampling = nu_sampler_default_params()};
    o->sampling.logit_bias = o->bias; /* read up to n_logit_bias, which stays 0 until given */
}

const cli_choice cli_kv_types[] = {
    {"f16", NU_KV_F16},
    {"f32", NU_KV_F32},
    {0},
};

const cli_option cli_model_options[] = {
    {.name = "--model",
     .short_name = "-m",
     .kind = CLI_STRING,
     .field = CLI_FIELD(cli_run_opts, model),
     .placeholder = "REF",
     .help = "model file, or hf:ORG/REPO/FILE.gguf (downloaded once)"},
    {.name = "--threads",
     .short_name = "-t",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, ctx.n_threads),
     .min = 1,
     .max = 256,
     .placeholder = "N",
     .help = "worker threads",
     .default_text = "all cores"},
    {.name = "--ctx",
     .short_name = "-c",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, ctx.n_ctx),
     .min = 1,
     .max = 1 << 24,
     .placeholder = "N",
     .help = "context length in tokens",
     .default_text = "the model's, at most 4096"},
    {.name = "--batch",
     .short_name = "-b",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, ctx.n_batch),
     .min = 1,
     .max = 1 << 16,
     .placeholder = "N",
     .help = "most tokens per forward pass"},
    {.name = "--kv-type",
     .kind = CLI_ENUM,
     .field = CLI_FIELD(cli_run_opts, ctx.kv_type),
     .choices = cli_kv_types,
     .placeholder = "T",
     .help = "KV cache element type: f16, or f32 (more exact, twice the memory)"},
    {0},
};

/* --sampler-order LIST: stage names or a preset, checked by the library. */
static bool parse_sampler_order(void *target, const char *value, char *why, size_t why_cap) {
    nu_sampler_params *sp = target;
    nu_error err;
    if (nu_sampler_order_parse(value, sp->order, &sp->n_stages, &err) == NU_OK) return true;
    snprintf(why, why_cap, "%s", err.message);
    return false;
}

/* --logit-bias ID=BIAS, with BIAS a number or -inf, into one list element. */
static bool parse_logit_bias(void *target, const char *value, char *why, size_t why_cap) {
    nu_logit_bias *out = target;
    char *end;
    errno = 0;
    long id = strtol(value, &end, 10);
    bool ok = !errno && end != value && *end == '=' && id >= 0 && id <= INT32_MAX;
    const char *b = ok ? end + 1 : "";
    if (ok && (!strcasecmp(b, "-inf") || !strcasecmp(b, "-infinity"))) {
        *out = (nu_logit_bias){(int32_t)id, -INFINITY};
        return true;
    }
    double x = ok ? strtod(b, &end) : 0;
    if (ok && !errno && end != b && !*end && isfinite(x)) {
        *out = (nu_logit_bias){(int32_t)id, (float)x};
        return true;
    }
    snprintf(why, why_cap, "expected TOKEN_ID=BIAS (BIAS a number or -inf), got '%s'", value);
    return false;
}

const cli_option cli_sampling_options[] = {
    {.name = "--temp",
     .alias = "--temperature",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.temperature),
     .fmin = 0,
     .fmax = 100,
     .placeholder = "X",
     .help = "temperature; 0 is greedy"},
    {.name = "--top-k",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.top_k),
     .min = 0,
     .max = 1 << 30,
     .placeholder = "N",
     .help = "keep the N most likely tokens; 0 is off"},
    {.name = "--top-p",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.top_p),
     .fmin = 0,
     .fmax = 1,
     .open_min = true,
     .placeholder = "X",
     .help = "keep the most likely tokens up to probability X; 1 is off"},
    {.name = "--min-p",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.min_p),
     .fmin = 0,
     .fmax = 1,
     .placeholder = "X",
     .help = "drop tokens below X times the top probability; 0 is off"},
    {.name = "--typical-p",
     .alias = "--typical",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.typical_p),
     .fmin = 0,
     .fmax = 1,
     .open_min = true,
     .placeholder = "X",
     .help = "locally typical sampling: keep the tokens whose surprise is closest to the "
             "entropy, up to probability X; 1 is off"},
    {.name = "--repeat-penalty",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.repeat_penalty),
     .fmin = 0,
     .fmax = 100,
     .open_min = true,
     .placeholder = "X",
     .help = "divide positive / multiply negative logits of recent tokens by X (CTRL); 1 is "
             "off"},
    {.name = "--repeat-last-n",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.penalty_last_n),
     .min = -1,
     .max = 1 << 30,
     .placeholder = "N",
     .help = "tokens the penalties look back on; 0 is off, -1 all"},
    {.name = "--frequency-penalty",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.frequency_penalty),
     .fmin = -2,
     .fmax = 2,
     .placeholder = "X",
     .help = "subtract X times each recent token's count"},
    {.name = "--presence-penalty",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.presence_penalty),
     .fmin = -2,
     .fmax = 2,
     .placeholder = "X",
     .help = "subtract X from each recent token's logit"},
    {.name = "--penalize-prompt",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(cli_run_opts, sampling.penalize_prompt),
     .help = "the prompt counts as history for penalties and n-gram ban"},
    {.name = "--no-repeat-ngram",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.no_repeat_ngram_size),
     .min = 0,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "ban tokens that would repeat an N-gram; 0 is off"},
    {.name = "--repetition-guard",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(cli_run_opts, sampling.guard_strength),
     .help = "raise the repetition penalty with how repetitive the recent output is (the same "
             "as --guard-strength 1)"},
    {.name = "--guard-strength",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.guard_strength),
     .fmin = 0,
     .fmax = 10,
     .placeholder = "X",
     .help = "penalty 1 + X * severity on recent tokens; 0 is off"},
    {.name = "--guard-window",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.guard_window),
     .min = 2,
     .max = 512,
     .placeholder = "N",
     .help = "generated tokens the guard measures"},
    {.name = "--logit-bias",
     .kind = CLI_CUSTOM,
     .parse = parse_logit_bias,
     CLI_LIST_AT(cli_run_opts, bias, sampling.n_logit_bias),
     .placeholder = "ID=B",
     .help = "add B to token ID's logit (B may be -inf: ban)"},
    {.name = "--min-tokens",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.min_tokens),
     .min = 0,
     .max = 1 << 30,
     .placeholder = "N",
     .help = "no end-of-generation token before N tokens"},
    {.name = "--ignore-eos",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(cli_run_opts, sampling.ignore_eos),
     .help = "never end at an end-of-generation token"},
    {.name = "--sampler-order",
     .kind = CLI_CUSTOM,
     .parse = parse_sampler_order,
     .field = CLI_AT(cli_run_opts, sampling),
     .placeholder = "LIST",
     .help = "comma-separated stages, or a preset: default (logit_bias, penalties, "
             "no_repeat_ngram, repetition_guard, top_k, typical_p, top_p, min_p, temperature) or "
             "temp_first (... temperature, top_k, top_p, min_p, typical_p)",
     .default_text = "default"},
    {.name = "--seed",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.seed),
     .min = 0,
     .max = INT64_MAX,
     .placeholder = "N",
     .help = "random seed"},
    {0},
};

const cli_option cli_watermark_options[] = {
    {.name = "--watermark",
     .kind = CLI_STRING,
     .field = CLI_FIELD(cli_run_opts, sampling.watermark.key),
     .nonempty = true,
     .placeholder = "KEY",
     .help = "add delta to the logits of a green list chosen by KEY and the previous tokens, "
             "before any filter and the temperature"},
    {.name = "--watermark-gamma",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.watermark.gamma),
     .fmin = 0,
     .fmax = 1,
     .open_min = true,
     .open_max = true,
     .given = CLI_FIELD(cli_run_opts, watermark_tuned),
     .placeholder = "X",
     .help = "green share of the vocabulary"},
    {.name = "--watermark-delta",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.watermark.delta),
     .fmin = 0,
     .fmax = 100,
     .given = CLI_FIELD(cli_run_opts, watermark_tuned),
     .placeholder = "X",
     .help = "added to green logits"},
    {.name = "--watermark-context",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.watermark.context),
     .min = 1,
     .max = NU_WATERMARK_MAX_CONTEXT,
     .given = CLI_FIELD(cli_run_opts, watermark_tuned),
     .placeholder = "N",
     .help = "previous tokens that choose the list"},
    {0},
};

const cli_option cli_grammar_options[] = {
    {.name = "--grammar",
     .kind = CLI_STRING,
     .field = CLI_FIELD(cli_run_opts, grammar_file),
     .placeholder = "FILE",
     .help = "a GBNF grammar (start rule root)"},
    {.name = "--json-schema",
     .kind = CLI_STRING,
     .field = CLI_FIELD(cli_run_opts, schema_file),
     .placeholder = "FILE",
     .help = "JSON that validates against a JSON Schema"},
    {.name = "--json",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(cli_run_opts, json_object),
     .help = "any JSON object"},
    {.name = "--regex",
     .kind = CLI_STRING,
     .field = CLI_FIELD(cli_run_opts, regex),
     .placeholder = "RE",
     .help = "text that matches a regular expression as a whole"},
    {.name = "--choice",
     .kind = CLI_STRING,
     .field = CLI_FIELD(cli_run_opts, choices),
     .placeholder = "A,B,C",
     .help = "exactly one of the comma-separated strings"},
    {.name = "--json-whitespace",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, json_whitespace),
     .min = 0,
     .max = 64,
     .placeholder = "N",
     .help = "at most N whitespace characters between JSON tokens"},
    {0},
};

/* Splits "A,B,C" into strings (in place); returns the count. */
static size_t split_choices(char *s, const char **out, size_t cap) {
    size_t n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

int cli_make_grammar(const cli_run_opts *o, const nu_model *m, nu_grammar **out) {
    int given = !!o->grammar_file + !!o->schema_file + !!o->regex + !!o->choices + o->json_object;
    nu_json_options jo = nu_json_default_options();
    jo.max_whitespace = o->json_whitespace;
    nu_error err;
    nu_status st = NU_OK;
    *out = NULL;
    if (given == 0) return 0;
    if (given > 1) {
        cli_error("give at most one of --grammar, --json-schema, --json, --regex, --choice");
        return 2;
    }
    if (o->json_object) st = nu_grammar_json_object(m, &jo, out, &err);
    if (o->regex) st = nu_grammar_from_regex(m, o->regex, out, &err);
    if (o->choices) {
        char *copy = strdup(o->choices);
        const char *items[256];
        size_t n = copy ? split_choices(copy, items, 256) : 0;
        st = nu_grammar_from_choices(m, items, n, out, &err);
        free(copy);
    }
    if (o->grammar_file || o->schema_file) {
        char *text = cli_read_file(o->grammar_file ? o->grammar_file : o->schema_file, NULL);
        if (!text) return 1;
        st = o->grammar_file ? nu_grammar_from_gbnf(m, text, NULL, out, &err)
                             : nu_grammar_from_json_schema(m, text, &jo, out, &err);
        free(text);
    }
    if (st) cli_error("%s", err.message);
    return st != NU_OK;
}

int cli_open(const cli_run_opts *o, nu_model **model, nu_context **ctx) {
    const char *ref = cli_model_or_demo(o->model);
    if (!ref) return 2;
    if (o->watermark_tuned && !o->sampling.watermark.key) {
        cli_error("--watermark-gamma, -delta and -context need --watermark KEY");
        return 2;
    }
    *model = cli_load_model(ref, NU_LOAD_FULL);
    if (!*model) return 1;
    nu_error err;
    if (nu_context_new(*model, &o->ctx, ctx, &err) != NU_OK) {
        cli_error("%s", err.message);
        nu_model_free(*model);
        *model = NULL;
        return 1;
    }
    return 0;
}
