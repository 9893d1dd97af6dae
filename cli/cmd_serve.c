/* cmd_serve.c - `nucleus serve`: the OpenAI-compatible HTTP server
 * (server/), with its options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_options.h"
#include "server.h"

typedef struct serve_opts {
    srv_config cfg;
    const char *key_file, *draft;
    bool draft_len_given; /* --draft-max or --draft-min */
} serve_opts;

static int run_serve(int argc, char **argv);

static const cli_option model_options[] = {
    {.name = "--model",
     .short_name = "-m",
     .kind = CLI_STRING,
     .field = CLI_FIELD(serve_opts, cfg.model_path),
     .placeholder = "REF",
     .help = "model file, or hf:ORG/REPO/FILE.gguf"},
    {.name = "--alias",
     .kind = CLI_STRING,
     .field = CLI_FIELD(serve_opts, cfg.alias),
     .placeholder = "NAME",
     .help = "the model id clients use",
     .default_text = "the file name"},
    {.name = "--ctx",
     .short_name = "-c",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.ctx_per_slot),
     .min = 8,
     .max = 1 << 22,
     .placeholder = "N",
     .help = "context of each slot in tokens; the cache holds N x parallel",
     .default_text = "the model's, at most 4096"},
    {.name = "--threads",
     .short_name = "-t",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.n_threads),
     .min = 1,
     .max = 256,
     .placeholder = "N",
     .help = "forward-pass threads",
     .default_text = "all cores"},
    {.name = "--batch",
     .short_name = "-b",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.n_batch),
     .min = 1,
     .max = 1 << 16,
     .placeholder = "N",
     .help = "most tokens per forward pass"},
    {.name = "--kv-type",
     .kind = CLI_ENUM,
     .field = CLI_FIELD(serve_opts, cfg.kv_type),
     .choices = cli_kv_types,
     .placeholder = "T",
     .help = "KV cache type: f16 or f32"},
    {.name = "--chat-template",
     .kind = CLI_STRING,
     .field = CLI_FIELD(serve_opts, cfg.chat_template),
     .placeholder = "T",
     .help = "a built-in template name (chatml, llama2, llama3, mistral, phi3, gemma, zephyr, "
             "plain) or a Jinja file",
     .default_text = "the model's"},
    {0},
};

static const cli_option server_options[] = {
    {.name = "--host",
     .kind = CLI_STRING,
     .field = CLI_FIELD(serve_opts, cfg.host),
     .placeholder = "ADDR",
     .help = "address to listen on"},
    {.name = "--port",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.port),
     .min = 0,
     .max = 65535,
     .placeholder = "N",
     .help = "port; 0 picks a free one, printed at start"},
    {.name = "--parallel",
     .short_name = "-np",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.parallel),
     .min = 1,
     .max = 64,
     .placeholder = "N",
     .help = "samples generating at once"},
    {.name = "--api-key",
     .kind = CLI_STRING,
     .field = CLI_FIELD(serve_opts, cfg.api_key),
     .nonempty = true,
     .placeholder = "KEY",
     .help = "require Authorization: Bearer KEY"},
    {.name = "--api-key-file",
     .kind = CLI_STRING,
     .field = CLI_FIELD(serve_opts, key_file),
     .placeholder = "F",
     .help = "the same, with the key on the first line of F"},
    {.name = "--max-body",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.max_body),
     .min = 64,
     .max = 1 << 30,
     .placeholder = "BYTES",
     .help = "largest request body"},
    {.name = "--max-prompt-tokens",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.max_prompt_tokens),
     .min = 1,
     .max = 1 << 24,
     .placeholder = "N",
     .help = "longest prompt",
     .default_text = "the slot's context - 1"},
    {.name = "--max-tokens-limit",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.max_tokens_limit),
     .min = 1,
     .max = 1 << 24,
     .placeholder = "N",
     .help = "largest max_tokens a request may ask for",
     .default_text = "the slot's context"},
    {.name = "--max-queue",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.max_queue),
     .min = 0,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "requests waiting for a slot before 503"},
    {.name = "--max-connections",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.max_connections),
     .min = 1,
     .max = 1 << 16,
     .placeholder = "N",
     .help = "open connections"},
    {.name = "--timeout",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.timeout_s),
     .min = 1,
     .max = 86400,
     .placeholder = "S",
     .help = "idle connection timeout in seconds"},
    {.name = "--shutdown-grace",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.shutdown_grace_s),
     .min = 0,
     .max = 86400,
     .placeholder = "S",
     .help = "on SIGINT/SIGTERM, seconds in-flight requests get to finish"},
    {.name = "--drain-delay",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(serve_opts, cfg.drain_delay_s),
     .fmin = 0,
     .fmax = 3600,
     .placeholder = "S",
     .help = "on SIGINT/SIGTERM, first answer GET /health/ready with 503 and serve on for S "
             "seconds, so a load balancer stops sending requests before the port closes"},
    {.name = "--quiet",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(serve_opts, cfg.quiet),
     .help = "no log line per request"},
    {0},
};

static const cli_option speculative_options[] = {
    {.name = "--draft",
     .kind = CLI_STRING,
     .field = CLI_FIELD(serve_opts, draft),
     .placeholder = "MODEL",
     .help = "speculative decoding with this draft model (same vocabulary): every slot drafts "
             "with it, the model verifies all drafts in its one batch per step (a request may "
             "send \"speculative\": false, or \"draft_max\": K)"},
    {.name = "--lookup",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(serve_opts, cfg.spec.lookup),
     .help = "speculative decoding with prompt lookup (no draft model)"},
    {.name = "--draft-max",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.spec.draft_max),
     .min = 1,
     .max = 64,
     .given = CLI_FIELD(serve_opts, draft_len_given),
     .placeholder = "K",
     .help = "most tokens drafted per step"},
    {.name = "--draft-min",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.spec.draft_min),
     .min = 1,
     .max = 64,
     .given = CLI_FIELD(serve_opts, draft_len_given),
     .placeholder = "K",
     .help = "fewest tokens drafted per step"},
    {0},
};

static const cli_option testing_options[] = {
    {.name = "--test-step-delay-ms",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.step_delay_ms),
     .min = 0,
     .max = 10000,
     .placeholder = "N",
     .help = "sleep N ms after each engine step (a slow model)"},
    {0},
};

static const cli_section serve_sections[] = {
    CLI_OWN_SECTION("model", model_options),
    CLI_OWN_SECTION("server", server_options),
    CLI_OWN_SECTION("speculative decoding", speculative_options),
    CLI_OWN_SECTION("testing", testing_options),
    {0},
};

const cli_command serve_command = {
    .name = "serve",
    .summary = "an OpenAI-compatible HTTP server with continuous batching",
    .usage = "nucleus serve -m MODEL [options]",
    .about = "An OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions, "
             "/tokenize,\n/detokenize; GET /v1/models, /health, /metrics. Requests run together "
             "(continuous batching).\n",
    .sections = serve_sections,
    .run = run_serve,
};

/* Reads the API key from the first line of a file. */
static char *read_key(const char *path) {
    char *text = cli_read_file(path, NULL);
    if (!text) return NULL;
    text[strcspn(text, "\r\n")] = 0;
    char *start = text;
    while (*start == ' ' || *start == '\t') start++;
    size_t n = strlen(start);
    while (n && (start[n - 1] == ' ' || start[n - 1] == '\t')) start[--n] = 0;
    if (n == 0) {
        cli_error("%s: the first line holds no API key", path);
        free(text);
        return NULL;
    }
    memmove(text, start, n + 1);
    return text;
}

/* Checks how the options combine; false after printing what is wrong. */
static bool options_agree(serve_opts *o) {
    const nu_speculative_params *spec = &o->cfg.spec;
    if (!(o->cfg.model_path = cli_model_or_demo(o->cfg.model_path))) return false;
    if (o->draft && spec->lookup)
        cli_error("give --draft or --lookup, not both");
    else if (o->draft_len_given && !o->draft && !spec->lookup)
        cli_error("--draft-max and --draft-min need --draft MODEL or --lookup");
    else if (spec->draft_min > spec->draft_max)
        cli_error("--draft-min %d is above --draft-max %d", spec->draft_min, spec->draft_max);
    else if (o->cfg.api_key && o->key_file)
        cli_error("give --api-key or --api-key-file, not both");
    else
        return true;
    return false;
}

/* Reads the options; false when the command ends (*rc: help or an error). */
static bool parse(serve_opts *o, int argc, char **argv, int *rc) {
    if (!cli_parse(&serve_command, argc, argv, o, rc)) return false;
    if (options_agree(o)) return true;
    *rc = CLI_EXIT_USAGE;
    return false;
}

/* Loads the draft model and checks that it shares the model's vocabulary. */
static nu_model *load_draft(const char *ref, const nu_model *model) {
    nu_model *draft = cli_load_model(ref, NU_LOAD_FULL);
    if (!draft) return NULL;
    nu_error err;
    if (nu_draft_check(model, draft, &err) != NU_OK) {
        cli_error("--draft %s cannot serve this model: %s", ref, err.message);
        nu_model_free(draft);
        return NULL;
    }
    return draft;
}

static int run_serve(int argc, char **argv) {
    serve_opts o = {.cfg = srv_default_config()};
    o.cfg.spec = nu_speculative_default_params();
    int rc;
    if (!parse(&o, argc, argv, &rc)) return rc;
    char *key = NULL;
    if (o.key_file && !(key = read_key(o.key_file))) return 2;
    if (key) o.cfg.api_key = key;
    srv_block_signals(); /* before loading: the model's threads must not take SIGTERM */
    nu_model *model = cli_load_model(o.cfg.model_path, NU_LOAD_FULL), *draft = NULL;
    if (model && o.draft && !(draft = load_draft(o.draft, model))) {
        nu_model_free(model);
        model = NULL;
    }
    if (!model) {
        free(key);
        return 1;
    }
    o.cfg.draft = draft;
    if (!o.cfg.quiet && (draft || o.cfg.spec.lookup))
        fprintf(stderr,
                "nucleus: speculative decoding with %s%s, up to %d tokens drafted per step\n",
                draft ? "the draft model " : "prompt lookup", draft ? o.draft : "",
                o.cfg.spec.draft_max);
    rc = srv_run(model, &o.cfg);
    nu_model_free(draft);
    nu_model_free(model);
    free(key);
    return rc;
}
