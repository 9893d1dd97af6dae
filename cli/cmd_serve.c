/* cmd_serve.c - `nucleus serve`: the OpenAI-compatible HTTP server
 * (server/), with its options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_options.h"
#include "server.h"

#define MAX_MODELS 64 /* -m given at most this often */

typedef struct serve_opts {
    srv_config cfg;
    const char *key_file, *draft, *alias;
    bool draft_len_given;               /* --draft-max or --draft-min */
    const char *model_refs[MAX_MODELS]; /* -m as given: REF or NAME=REF */
    int32_t n_model_refs;
    srv_model_spec specs[MAX_MODELS];
    char paths[MAX_MODELS][4096]; /* the references resolved to files */
} serve_opts;

static int run_serve(int argc, char **argv);

/* "2G", "512M", "1.5GiB", "4096" (bytes; K, M, G, T are powers of 1024). */
static bool parse_size(void *target, const char *value, char *why, size_t cap) {
    char *end;
    double x = strtod(value, &end);
    double unit = 1;
    const char *units = "KMGT";
    const char *u = *end ? strchr(units, *end & ~0x20) : NULL;
    if (u && *end) {
        for (const char *p = units; p <= u; p++) unit *= 1024;
        end++;
        if ((*end & ~0x20) == 'I') end++;
        if ((*end & ~0x20) == 'B') end++;
    } else if ((*end & ~0x20) == 'B') {
        end++;
    }
    if (end == value || *end || !(x > 0) || x * unit > 1e18) {
        snprintf(why, cap, "expects a size such as 4G, 512M or 1073741824; got '%s'", value);
        return false;
    }
    *(uint64_t *)target = (uint64_t)(x * unit);
    return true;
}

static const cli_option model_options[] = {
    {.name = "--model",
     .short_name = "-m",
     .kind = CLI_STRING,
     CLI_LIST(serve_opts, model_refs, n_model_refs),
     .placeholder = "REF",
     .help = "model file, or hf:ORG/REPO/FILE.gguf; NAME=REF gives it the id NAME. Give -m "
             "several times to serve several models: requests choose one with their model "
             "field (the first when they name none); each is loaded when first asked for"},
    {.name = "--alias",
     .kind = CLI_STRING,
     .field = CLI_FIELD(serve_opts, alias),
     .placeholder = "NAME",
     .help = "the model id clients use (with one -m)",
     .default_text = "the file name"},
    {.name = "--models-dir",
     .kind = CLI_STRING,
     .field = CLI_FIELD(serve_opts, cfg.models_dir),
     .placeholder = "DIR",
     .help = "also serve every .gguf file of DIR, with its file name as id (the name without "
             ".gguf, or with Ollama's :latest, names it too)"},
    {.name = "--idle-unload",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(serve_opts, cfg.idle_unload_s),
     .fmin = 0,
     .fmax = 1e7,
     .placeholder = "S",
     .help = "unload a model nobody has used for S seconds (0: never); it is loaded again "
             "when next asked for"},
    {.name = "--max-memory",
     .kind = CLI_CUSTOM,
     .parse = parse_size,
     .field = CLI_AT(serve_opts, cfg.max_memory),
     .placeholder = "SIZE",
     .help = "memory the loaded models may take together (weights, KV cache, scratch; e.g. "
             "8G): to load another, the least recently used idle ones are unloaded",
     .default_text = "no limit"},
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
     .help = "KV cache type: f16, f32, q8_0 or q4_0"},
    CLI_KV_SPLIT_ROWS(serve_opts, cfg.kv_type_k, cfg.kv_type_v),
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
    {.name = "--max-responses",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.max_responses),
     .min = 0,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "Responses API answers kept in memory for previous_response_id and GET "
             "/v1/responses/{id} (at most 64 MiB; the oldest go first; 0: none)"},
    {.name = "--max-connections",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.max_connections),
     .min = 1,
     .max = 1 << 16,
     .placeholder = "N",
     .help = "open connections"},
    {.name = "--max-connections-per-address",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.max_connections_per_address),
     .min = 1,
     .max = 1 << 16,
     .placeholder = "N",
     .help = "open connections from one client address (behind a proxy, every connection comes "
             "from the proxy's: raise it to --max-connections)"},
    {.name = "--timeout",
     .kind = CLI_INT,
     .field = CLI_FIELD(serve_opts, cfg.timeout_s),
     .min = 1,
     .max = 86400,
     .placeholder = "S",
     .help = "idle connection timeout in seconds; also the most a request may take to arrive "
             "whole (headers and body), however slowly its bytes trickle in"},
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
    .usage = "nucleus serve -m MODEL [-m MODEL ...] [--models-dir DIR] [options]",
    .about = "An OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions, "
             "/v1/embeddings,\n/tokenize, /detokenize; GET /v1/models, /health, /metrics; and "
             "Ollama's /api/chat, /api/generate,\n/api/embed, /api/tags, /api/show. Requests "
             "run together (continuous batching). Several models:\neach is loaded on first use, "
             "unloaded when idle (--idle-unload) or for room (--max-memory).\n",
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

/* Splits -m NAME=REF (NAME without '/', and REF not a file named so as a whole). */
static const char *split_alias(const char *arg, char *name, size_t cap) {
    const char *eq = strchr(arg, '=');
    name[0] = 0;
    if (!eq || eq == arg || memchr(arg, '/', (size_t)(eq - arg)) || access(arg, F_OK) == 0)
        return arg;
    snprintf(name, cap, "%.*s", (int)(eq - arg), arg);
    return eq + 1;
}

/* Resolves every -m (downloading hf: references) into o->specs. */
static bool resolve_models(serve_opts *o) {
    static char names[MAX_MODELS][256];
    for (int32_t i = 0; i < o->n_model_refs; i++) {
        const char *ref = split_alias(o->model_refs[i], names[i], sizeof names[i]);
        if (!cli_resolve_model(ref, o->paths[i], sizeof o->paths[i])) return false;
        o->specs[i] = (srv_model_spec){.id = names[i][0] ? names[i] : NULL, .path = o->paths[i]};
    }
    if (o->alias) o->specs[0].id = o->alias;
    o->cfg.models = o->specs;
    o->cfg.n_models = o->n_model_refs;
    return true;
}

/* Checks how the options combine; false after printing what is wrong. */
static bool options_agree(serve_opts *o) {
    const nu_speculative_params *spec = &o->cfg.spec;
    if (o->n_model_refs == 0 && !o->cfg.models_dir) { /* no model: the demo one */
        if (!(o->model_refs[0] = cli_model_or_demo(NULL))) return false;
        o->n_model_refs = 1;
    }
    if (o->alias && (o->n_model_refs != 1 || o->cfg.models_dir))
        cli_error("--alias names the one model of -m; with several, give -m NAME=REF");
    else if (o->draft && (o->n_model_refs > 1 || o->cfg.models_dir))
        cli_error("--draft serves a single model (one -m, no --models-dir)");
    else if (o->draft && spec->lookup)
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

static int run_serve(int argc, char **argv) {
    static serve_opts o; /* large (resolved paths): not on the stack */
    memset(&o, 0, sizeof o);
    o.cfg = srv_default_config();
    o.cfg.spec = nu_speculative_default_params();
    int rc;
    if (!parse(&o, argc, argv, &rc)) return rc;
    char *key = NULL;
    if (o.key_file && !(key = read_key(o.key_file))) return 2;
    if (key) o.cfg.api_key = key;
    srv_block_signals(); /* before loading: the model's threads must not take SIGTERM */
    nu_model *draft = NULL;
    if (!resolve_models(&o) || (o.draft && !(draft = cli_load_model(o.draft, NU_LOAD_FULL)))) {
        free(key);
        return 1;
    }
    o.cfg.draft = draft;
    if (!o.cfg.quiet && (draft || o.cfg.spec.lookup))
        fprintf(stderr,
                "nucleus: speculative decoding with %s%s, up to %d tokens drafted per step\n",
                draft ? "the draft model " : "prompt lookup", draft ? o.draft : "",
                o.cfg.spec.draft_max);
    rc = srv_run(&o.cfg);
    nu_model_free(draft);
    free(key);
    return rc;
}
