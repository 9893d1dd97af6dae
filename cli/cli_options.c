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
    o->sampling.banned_strings = o->banned;
    o->sampling.banned_tokens = o->ban_seqs;
    for (int i = 0; i < CLI_MAX_BANS; i++) o->ban_seqs[i].tokens = o->ban_ids[i];
    /* the library's default breakers stay until --dry-sequence-breaker is given */
    int32_t n = o->sampling.n_dry_sequence_breakers;
    for (int32_t i = 0; i < n && i < CLI_MAX_BREAKERS; i++)
        o->breakers.items[i] = o->sampling.dry_sequence_breakers[i];
    o->sampling.dry_sequence_breakers = o->breakers.items;
    o->breakers.count = &o->sampling.n_dry_sequence_breakers;
}

const cli_choice cli_kv_types[] = {
    {"f16", NU_KV_F16}, {"f32", NU_KV_F32}, {"q8_0", NU_KV_Q8_0}, {"q4_0", NU_KV_Q4_0}, {0},
};

const char *cli_kv_name(nu_kv_type t) {
    for (const cli_choice *c = cli_kv_types; c->name; c++)
        if (c->value == (int)t) return c->name;
    return "?";
}

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
     .help = "KV cache element type: f16, f32 (more exact, twice the memory), q8_0 or q4_0 "
             "(8.5 / 4.5 bits a value; heads of a multiple of 32)"},
    CLI_KV_SPLIT_ROWS(cli_run_opts, ctx.kv_type_k, ctx.kv_type_v),
    {.name = "--checkpoints",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, ctx.n_state_checkpoints),
     .min = 1,
     .max = 4096,
     .placeholder = "N",
     .help = "models with recurrent layers (Qwen 3.5): states kept besides each sequence's, so "
             "that rolling back (speculation, cached prompts) does not read positions again; "
             "each takes the state's memory (nucleus info), at least one per sequence",
     .default_text = "sequences + 8"},
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

/* --dry-sequence-breaker STRING: the first replaces the defaults, "none"
 * clears the list (llama.cpp's rules). */
static bool parse_breaker(void *target, const char *value, char *why, size_t why_cap) {
    cli_breakers *b = target;
    if (!b->given) *b->count = 0;
    b->given = true;
    if (!strcmp(value, "none")) {
        *b->count = 0;
        return true;
    }
    size_t len = strlen(value);
    if (len == 0 || len > NU_DRY_MAX_BREAKER_LEN) {
        snprintf(why, why_cap, "a breaker has 1 to %d bytes; '%s' has %zu", NU_DRY_MAX_BREAKER_LEN,
                 value, len);
        return false;
    }
    if (*b->count >= CLI_MAX_BREAKERS) {
        snprintf(why, why_cap, "at most %d breakers", CLI_MAX_BREAKERS);
        return false;
    }
    b->items[(*b->count)++] = value;
    return true;
}

/* --ban-tokens ID,ID,...: one banned token sequence, into its element
 * (whose tokens point to storage of CLI_MAX_BAN_TOKENS ids). */
static bool parse_ban_tokens(void *target, const char *value, char *why, size_t why_cap) {
    nu_token_seq *seq = target;
    int32_t *ids = (int32_t *)seq->tokens, n = 0;
    const char *p = value;
    for (;;) {
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (errno || end == p || id < 0 || id > INT32_MAX || (*end && *end != ',')) {
            snprintf(why, why_cap, "expected token ids separated by commas, got '%s'", value);
            return false;
        }
        if (n == CLI_MAX_BAN_TOKENS) {
            snprintf(why, why_cap, "at most %d tokens in a sequence", CLI_MAX_BAN_TOKENS);
            return false;
        }
        ids[n++] = (int32_t)id;
        if (!*end) break;
        p = end + 1;
    }
    seq->n = n;
    return true;
}

const cli_option cli_sampling_options[] = {
    {.name = "--temp",
     .alias = "--temperature",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.temperature),
     .fmin = 0,
     .fmax = 100,
     .placeholder = "X",
     .help = "temperature; 0 is greedy (unless --dynatemp-range is set)"},
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
    {.name = "--dry-multiplier",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.dry_multiplier),
     .fmin = 0,
     .fmax = 100,
     .placeholder = "X",
     .help = "DRY: subtract X * base^(L - allowed length) from a token that would extend a "
             "repeat of L tokens; 0 is off"},
    {.name = "--dry-base",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.dry_base),
     .fmin = 1,
     .fmax = 100,
     .placeholder = "X",
     .help = "DRY: the base of the penalty's growth"},
    {.name = "--dry-allowed-length",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.dry_allowed_length),
     .min = 0,
     .max = 1 << 30,
     .placeholder = "N",
     .help = "DRY: repeats up to N tokens go unpunished"},
    {.name = "--dry-penalty-last-n",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.dry_penalty_last_n),
     .min = -1,
     .max = 1 << 30,
     .placeholder = "N",
     .help = "DRY: tokens it looks back on; 0 is off, -1 all"},
    {.name = "--dry-sequence-breaker",
     .kind = CLI_CUSTOM,
     .parse = parse_breaker,
     .field = CLI_AT(cli_run_opts, breakers),
     .placeholder = "S",
     .help = "DRY: a string that ends repeats (repeatable; the first replaces the defaults "
             "'\\n' ':' '\"' '*'; none: no breakers)"},
    {.name = "--xtc-probability",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.xtc_probability),
     .fmin = 0,
     .fmax = 1,
     .placeholder = "X",
     .help = "XTC: how often the tokens above the threshold but the least likely are "
             "removed; 0 is off"},
    {.name = "--xtc-threshold",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.xtc_threshold),
     .fmin = 0,
     .fmax = 1,
     .placeholder = "X",
     .help = "XTC: the probability a token needs to be removed (above 0.5: never)"},
    {.name = "--top-n-sigma",
     .alias = "--top-nsigma",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.top_n_sigma),
     .fmin = -1,
     .fmax = 100,
     .placeholder = "X",
     .help = "keep the tokens within X standard deviations of the top logit; <= 0 is off"},
    {.name = "--dynatemp-range",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.dynatemp_range),
     .fmin = 0,
     .fmax = 100,
     .placeholder = "X",
     .help = "dynamic temperature: between temp - X and temp + X, with the entropy; 0 is off"},
    {.name = "--dynatemp-exp",
     .alias = "--dynatemp-exponent",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.dynatemp_exponent),
     .fmin = 0,
     .fmax = 100,
     .placeholder = "X",
     .help = "dynamic temperature: the exponent of the normalised entropy"},
    {.name = "--mirostat",
     .kind = CLI_INT,
     .field = CLI_FIELD(cli_run_opts, sampling.mirostat),
     .min = 0,
     .max = 2,
     .placeholder = "N",
     .help = "mirostat 1 or 2 replaces the filters and the draw, keeping the surprise near "
             "tau; 0 is off"},
    {.name = "--mirostat-tau",
     .alias = "--mirostat-ent",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.mirostat_tau),
     .fmin = 0,
     .fmax = 100,
     .placeholder = "X",
     .help = "mirostat: the target surprise in bits"},
    {.name = "--mirostat-eta",
     .alias = "--mirostat-lr",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(cli_run_opts, sampling.mirostat_eta),
     .fmin = 0,
     .fmax = 1,
     .placeholder = "X",
     .help = "mirostat: the learning rate"},
    {.name = "--ban",
     .kind = CLI_STRING,
     .nonempty = true,
     CLI_LIST(cli_run_opts, banned, sampling.n_banned_strings),
     .placeholder = "TEXT",
     .help = "the generated text never contains TEXT, whatever tokens would spell it"},
    {.name = "--ban-tokens",
     .kind = CLI_CUSTOM,
     .parse = parse_ban_tokens,
     CLI_LIST_AT(cli_run_opts, ban_seqs, sampling.n_banned_tokens),
     .placeholder = "IDS",
     .help = "never generate this sequence of token ids (comma-separated)"},
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
     .help = "comma-separated stages, or a preset: default (logit_bias, penalties, dry, "
             "no_repeat_ngram, repetition_guard, top_n_sigma, top_k, typical_p, top_p, min_p, "
             "xtc, temperature) or temp_first (... temperature, top_n_sigma, top_k, top_p, "
             "min_p, typical_p, xtc)",
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
    cli_warn_context(*model, nu_context_n_ctx(*ctx));
    return 0;
}

void cli_warn_context(const nu_model *m, int64_t n_ctx) {
    int32_t train = nu_model_n_ctx_train(m);
    if (train > 0 && n_ctx > train)
        fprintf(stderr,
                "nucleus: warning: a context of %lld tokens is more than the %d the model was "
                "trained on; text past position %d may be poor\n",
                (long long)n_ctx, train, train);
}
