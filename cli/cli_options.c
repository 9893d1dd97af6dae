/* cli_options.c - parsing the options shared by generate, bench and friends. */
#include "cli_options.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

const char cli_grammar_help[] =
    "\nconstrained output (one of):\n"
    "      --grammar FILE   a GBNF grammar (start rule root)\n"
    "      --json-schema FILE  JSON that validates against a JSON Schema\n"
    "      --json           any JSON object\n"
    "      --regex RE       text that matches a regular expression as a whole\n"
    "      --choice A,B,C   exactly one of the comma-separated strings\n"
    "      --json-whitespace N  at most N whitespace characters between JSON tokens (default 0)\n";

const char cli_run_opts_help[] =
    "  -m, --model REF      model file, or hf:ORG/REPO/FILE.gguf (downloaded once);\n"
    "                       default: the demo model models/stories260K.gguf\n"
    "  -t, --threads N      worker threads (default: all cores)\n"
    "  -c, --ctx N          context length in tokens (default: the model's, at most 4096)\n"
    "  -b, --batch N        most tokens per forward pass (default 512)\n"
    "      --kv-type T      KV cache element type: f16 (default) or f32 (more exact)\n"
    "sampling (stages run in the order of --sampler-order, then a seeded draw):\n"
    "      --temp X         temperature; 0 is greedy (default 0.8)\n"
    "      --top-k N        keep the N most likely tokens; 0 is off (default 40)\n"
    "      --top-p X        keep the most likely tokens up to probability X; 1 is off (default "
    "0.95)\n"
    "      --min-p X        drop tokens below X times the top probability; 0 is off (default "
    "0.05)\n"
    "      --typical-p X    locally typical sampling: keep the tokens whose surprise is closest\n"
    "                       to the entropy, up to probability X; 1 is off (default 1)\n"
    "      --repeat-penalty X  divide positive / multiply negative logits of recent tokens\n"
    "                       by X (CTRL); 1 is off (default 1)\n"
    "      --repeat-last-n N   tokens the penalties look back on; 0 is off, -1 all (default 64)\n"
    "      --frequency-penalty X  subtract X times each recent token's count, -2..2 (default 0)\n"
    "      --presence-penalty X   subtract X from each recent token's logit, -2..2 (default 0)\n"
    "      --penalize-prompt   the prompt counts as history for penalties and n-gram ban\n"
    "      --no-repeat-ngram N  ban tokens that would repeat an N-gram; 0 is off (default 0)\n"
    "      --repetition-guard  raise the repetition penalty with how repetitive the recent\n"
    "                       output is (same as --guard-strength 1)\n"
    "      --guard-strength X  penalty 1 + X * severity on recent tokens, 0..10 (default 0: off)\n"
    "      --guard-window N    generated tokens the guard measures, 2..512 (default 64)\n"
    "      --logit-bias ID=B   add B to token ID's logit (B may be -inf: ban); repeatable\n"
    "      --min-tokens N   no end-of-generation token before N tokens (default 0)\n"
    "      --ignore-eos     never end at an end-of-generation token\n"
    "      --sampler-order LIST  comma-separated stages, or a preset: default (logit_bias,\n"
    "                       penalties,no_repeat_ngram,repetition_guard,top_k,typical_p,top_p,\n"
    "                       min_p,temperature) or temp_first (... temperature,top_k,top_p,\n"
    "                       min_p,typical_p)\n"
    "      --seed N         random seed (default 12648430)\n"
    "watermark (Kirchenbauer et al. 2023; check text with nucleus watermark detect):\n"
    "      --watermark KEY  add delta to the logits of a green list chosen by KEY and the\n"
    "                       previous tokens, before any filter and the temperature\n"
    "      --watermark-gamma X    green share of the vocabulary, 0 < X < 1 (default 0.25)\n"
    "      --watermark-delta X    added to green logits, 0..100 (default 2)\n"
    "      --watermark-context N  previous tokens that choose the list, 1..8 (default 1)\n";

void cli_run_opts_init(cli_run_opts *o) {
    o->model = NULL;
    o->ctx = nu_context_default_params();
    o->sampling = nu_sampler_default_params();
    o->watermark_tuned = false;
}

/* The value after option argv[*i], or NULL (with a message) when missing. */
static const char *value_of(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error("option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static int int_opt(int argc, char **argv, int *i, long lo, long hi, int32_t *out) {
    const char *opt = argv[*i], *v = value_of(argc, argv, i);
    long x;
    if (!v || !cli_parse_int(opt, v, lo, hi, &x)) return -1;
    *out = (int32_t)x;
    return 1;
}

static int float_opt(int argc, char **argv, int *i, double lo, double hi, float *out) {
    const char *opt = argv[*i], *v = value_of(argc, argv, i);
    double x;
    if (!v || !cli_parse_float(opt, v, lo, hi, &x)) return -1;
    *out = (float)x;
    return 1;
}

/* A float in (0, hi]: the value 0 has no meaning for these options. */
static int positive_float_opt(int argc, char **argv, int *i, double hi, float *out,
                              const char *zero_hint) {
    const char *opt = argv[*i];
    int r = float_opt(argc, argv, i, 0, hi, out);
    if (r == 1 && *out <= 0) {
        cli_error("%s must be greater than 0 (%s)", opt, zero_hint);
        return -1;
    }
    return r;
}

/* The model, context and thread options. */
static int context_opt(cli_run_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        o->model = value_of(argc, argv, i);
        return o->model ? 1 : -1;
    }
    if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        return int_opt(argc, argv, i, 1, 256, &o->ctx.n_threads);
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx"))
        return int_opt(argc, argv, i, 1, 1 << 24, &o->ctx.n_ctx);
    if (!strcmp(a, "-b") || !strcmp(a, "--batch"))
        return int_opt(argc, argv, i, 1, 1 << 16, &o->ctx.n_batch);
    if (!strcmp(a, "--kv-type")) {
        const char *v = value_of(argc, argv, i);
        if (!v) return -1;
        if (!strcmp(v, "f32"))
            o->ctx.kv_type = NU_KV_F32;
        else if (!strcmp(v, "f16"))
            o->ctx.kv_type = NU_KV_F16;
        else {
            cli_error("--kv-type must be f32 or f16, not '%s'", v);
            return -1;
        }
        return 1;
    }
    return 0;
}

/* --sampler-order LIST: stage names or a preset, checked by the library. */
static int order_opt(cli_run_opts *o, int argc, char **argv, int *i) {
    const char *v = value_of(argc, argv, i);
    if (!v) return -1;
    nu_error err;
    if (nu_sampler_order_parse(v, o->sampling.order, &o->sampling.n_stages, &err) != NU_OK) {
        cli_error("--sampler-order: %s", err.message);
        return -1;
    }
    return 1;
}

/* The stages that shape the distribution, the order and the seed. */
static int filter_opt(cli_run_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    nu_sampler_params *sp = &o->sampling;
    if (!strcmp(a, "--temp") || !strcmp(a, "--temperature"))
        return float_opt(argc, argv, i, 0, 100, &sp->temperature);
    if (!strcmp(a, "--top-k")) return int_opt(argc, argv, i, 0, 1L << 30, &sp->top_k);
    if (!strcmp(a, "--top-p"))
        return positive_float_opt(argc, argv, i, 1, &sp->top_p, "1 turns it off");
    if (!strcmp(a, "--min-p")) return float_opt(argc, argv, i, 0, 1, &sp->min_p);
    if (!strcmp(a, "--typical-p") || !strcmp(a, "--typical"))
        return positive_float_opt(argc, argv, i, 1, &sp->typical_p, "1 turns it off");
    if (!strcmp(a, "--sampler-order")) return order_opt(o, argc, argv, i);
    if (!strcmp(a, "--seed")) {
        const char *opt = argv[*i], *v = value_of(argc, argv, i);
        long x;
        if (!v || !cli_parse_int(opt, v, 0, 0x7fffffffffffffffL, &x)) return -1;
        sp->seed = (uint64_t)x;
        return 1;
    }
    return 0;
}

/* "ID=BIAS" with BIAS a number or -inf. */
static bool parse_bias(const char *v, nu_logit_bias *out) {
    char *end;
    errno = 0;
    long id = strtol(v, &end, 10);
    if (errno || end == v || *end != '=' || id < 0 || id > INT32_MAX) return false;
    const char *b = end + 1;
    if (!strcasecmp(b, "-inf") || !strcasecmp(b, "-infinity")) {
        *out = (nu_logit_bias){(int32_t)id, -INFINITY};
        return true;
    }
    double x = strtod(b, &end);
    if (errno || end == b || *end || !isfinite(x)) return false;
    *out = (nu_logit_bias){(int32_t)id, (float)x};
    return true;
}

/* --logit-bias ID=BIAS, repeatable; the list lives in o->bias. */
static int bias_opt(cli_run_opts *o, int argc, char **argv, int *i) {
    const char *v = value_of(argc, argv, i);
    if (!v) return -1;
    nu_sampler_params *sp = &o->sampling;
    if (sp->n_logit_bias >= CLI_MAX_LOGIT_BIAS) {
        cli_error("at most %d --logit-bias options", CLI_MAX_LOGIT_BIAS);
        return -1;
    }
    if (!parse_bias(v, &o->bias[sp->n_logit_bias])) {
        cli_error("--logit-bias expects TOKEN_ID=BIAS (BIAS a number or -inf), got '%s'", v);
        return -1;
    }
    sp->n_logit_bias++;
    sp->logit_bias = o->bias;
    return 1;
}

/* The repetition stages, logit biases and end-of-generation control. */
static int repetition_opt(cli_run_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    nu_sampler_params *sp = &o->sampling;
    if (!strcmp(a, "--repeat-penalty"))
        return positive_float_opt(argc, argv, i, 100, &sp->repeat_penalty, "1 turns it off");
    if (!strcmp(a, "--repeat-last-n"))
        return int_opt(argc, argv, i, -1, 1L << 30, &sp->penalty_last_n);
    if (!strcmp(a, "--frequency-penalty"))
        return float_opt(argc, argv, i, -2, 2, &sp->frequency_penalty);
    if (!strcmp(a, "--presence-penalty"))
        return float_opt(argc, argv, i, -2, 2, &sp->presence_penalty);
    if (!strcmp(a, "--no-repeat-ngram"))
        return int_opt(argc, argv, i, 0, 1L << 20, &sp->no_repeat_ngram_size);
    if (!strcmp(a, "--guard-strength")) return float_opt(argc, argv, i, 0, 10, &sp->guard_strength);
    if (!strcmp(a, "--guard-window")) return int_opt(argc, argv, i, 2, 512, &sp->guard_window);
    if (!strcmp(a, "--min-tokens")) return int_opt(argc, argv, i, 0, 1L << 30, &sp->min_tokens);
    if (!strcmp(a, "--logit-bias")) return bias_opt(o, argc, argv, i);
    bool *flag = !strcmp(a, "--penalize-prompt") ? &sp->penalize_prompt
                 : !strcmp(a, "--ignore-eos")    ? &sp->ignore_eos
                                                 : NULL;
    if (flag) *flag = true;
    if (!strcmp(a, "--repetition-guard")) sp->guard_strength = 1.0f;
    return flag || !strcmp(a, "--repetition-guard");
}

/* --watermark KEY and its settings; the library checks them again. */
static int watermark_opt(cli_run_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    nu_watermark_params *w = &o->sampling.watermark;
    int r = 0;
    if (!strcmp(a, "--watermark")) {
        w->key = value_of(argc, argv, i);
        if (w->key && !w->key[0]) cli_error("--watermark needs a non-empty key");
        return w->key && w->key[0] ? 1 : -1;
    }
    if (!strcmp(a, "--watermark-gamma")) {
        r = float_opt(argc, argv, i, 0, 1, &w->gamma);
        if (r == 1 && (w->gamma <= 0 || w->gamma >= 1)) {
            cli_error("--watermark-gamma must be between 0 and 1, both excluded");
            r = -1;
        }
    } else if (!strcmp(a, "--watermark-delta")) {
        r = float_opt(argc, argv, i, 0, 100, &w->delta);
    } else if (!strcmp(a, "--watermark-context")) {
        r = int_opt(argc, argv, i, 1, NU_WATERMARK_MAX_CONTEXT, &w->context);
    }
    if (r) o->watermark_tuned = true;
    return r;
}

/* --grammar, --json-schema, --json, --regex, --choice, --json-whitespace. */
int cli_grammar_opt(cli_run_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char **slot = !strcmp(a, "--grammar")       ? &o->grammar_file
                        : !strcmp(a, "--json-schema") ? &o->schema_file
                        : !strcmp(a, "--regex")       ? &o->regex
                        : !strcmp(a, "--choice")      ? &o->choices
                                                      : NULL;
    if (!strcmp(a, "--json")) {
        o->json_object = true;
        return 1;
    }
    if (!strcmp(a, "--json-whitespace")) {
        const char *v = value_of(argc, argv, i);
        long x;
        if (!v || !cli_parse_int(a, v, 0, 64, &x)) return -1;
        o->json_whitespace = (int32_t)x;
        return 1;
    }
    if (!slot) return 0;
    *slot = value_of(argc, argv, i);
    return *slot ? 1 : -1;
}

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

int cli_run_opt(cli_run_opts *o, int argc, char **argv, int *i) {
    int r = context_opt(o, argc, argv, i);
    if (!r) r = filter_opt(o, argc, argv, i);
    if (!r) r = repetition_opt(o, argc, argv, i);
    if (!r) r = watermark_opt(o, argc, argv, i);
    return r;
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
