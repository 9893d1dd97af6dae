/* cmd_serve.c - `nucleus serve`: the OpenAI-compatible HTTP server
 * (server/), with its options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "server.h"

static const char serve_help[] =
    "usage: nucleus serve [-m MODEL] [options]\n\n"
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions, /tokenize,\n"
    "/detokenize; GET /v1/models, /health (alive), /health/ready (503 when shutting down or the\n"
    "queue is full), /metrics. Requests run together (continuous batching).\n\n"
    "  -m, --model REF          model file, or hf:ORG/REPO/FILE.gguf (default: the demo model\n"
    "                           models/stories260K.gguf)\n"
    "      --alias NAME         the model id clients use (default: the file name)\n"
    "      --host ADDR          address to listen on (default 127.0.0.1)\n"
    "      --port N             port (default 8080; 0 picks a free one, printed at start)\n"
    "  -np, --parallel N        samples generating at once (default 4)\n"
    "  -c, --ctx N              context of each slot in tokens; the cache holds N x parallel\n"
    "                           (default: the model's, at most 4096)\n"
    "  -t, --threads N          forward-pass threads (default: all cores)\n"
    "  -b, --batch N            most tokens per forward pass (default 512)\n"
    "      --kv-type T          KV cache type: f16 (default) or f32\n"
    "      --chat-template T    a built-in template name (chatml, llama2, llama3, mistral, phi3,\n"
    "                           gemma, zephyr, plain) or a Jinja file (default: the model's)\n"
    "      --api-key KEY        require Authorization: Bearer KEY\n"
    "      --api-key-file F     the same, with the key on the first line of F\n"
    "      --max-body BYTES     largest request body (default 1048576)\n"
    "      --max-prompt-tokens N  longest prompt (default: the slot's context - 1)\n"
    "      --max-tokens-limit N largest max_tokens a request may ask for (default: the slot's "
    "context)\n"
    "      --max-queue N        requests waiting for a slot before 503 (default 64)\n"
    "      --max-connections N  open connections (default 256)\n"
    "      --timeout S          idle connection timeout in seconds (default 60)\n"
    "      --shutdown-grace S   on SIGINT/SIGTERM, time in-flight requests get to finish (default "
    "10)\n"
    "      --drain-delay S      on SIGINT/SIGTERM, first answer GET /health/ready with 503 and\n"
    "                           go on serving for S seconds, so that a load balancer stops\n"
    "                           sending requests before the port closes (default 0)\n"
    "      --draft MODEL        speculative decoding with this draft model (same vocabulary):\n"
    "                           every slot drafts with it, the model verifies all drafts in\n"
    "                           its one batch per step (a request may send \"speculative\":\n"
    "                           false, or \"draft_max\": K)\n"
    "      --lookup             speculative decoding with prompt lookup (no draft model)\n"
    "      --draft-max K        most tokens drafted per step (default 8; 1..64)\n"
    "      --draft-min K        fewest (default 1)\n"
    "      --quiet              no log line per request\n"
    "      --test-step-delay-ms N  sleep N ms after each engine step (tests: a slow model)\n";

typedef struct serve_opts {
    srv_config cfg;
    const char *key_file, *draft, *kv_type;
    bool draft_len_given; /* --draft-max or --draft-min */
} serve_opts;

/* Options with an integer value; 1 when argv[*i] was one, -1 on error, 0 if not one. */
static int int_option(serve_opts *o, int argc, char **argv, int *i) {
    static const struct {
        const char *name, *alt;
        long lo, hi;
    } opts[] = {{"--port", NULL, 0, 65535},
                {"--parallel", "-np", 1, 64},
                {"--ctx", "-c", 8, 1 << 22},
                {"--threads", "-t", 1, 256},
                {"--batch", "-b", 1, 1 << 16},
                {"--max-body", NULL, 64, 1L << 30},
                {"--max-prompt-tokens", NULL, 1, 1 << 24},
                {"--max-tokens-limit", NULL, 1, 1 << 24},
                {"--max-queue", NULL, 0, 1 << 20},
                {"--max-connections", NULL, 1, 1 << 16},
                {"--timeout", NULL, 1, 86400},
                {"--shutdown-grace", NULL, 0, 86400},
                {"--test-step-delay-ms", NULL, 0, 10000},
                {"--draft-max", NULL, 1, 64},
                {"--draft-min", NULL, 1, 64}};
    const char *a = argv[*i];
    for (size_t k = 0; k < sizeof opts / sizeof *opts; k++) {
        if (strcmp(a, opts[k].name) && (!opts[k].alt || strcmp(a, opts[k].alt))) continue;
        long v;
        if (*i + 1 >= argc) return cli_error("option %s needs a value", a), -1;
        if (!cli_parse_int(a, argv[++*i], opts[k].lo, opts[k].hi, &v)) return -1;
        srv_config *c = &o->cfg;
        int32_t *ints[] = {NULL,
                           &c->parallel,
                           &c->ctx_per_slot,
                           &c->n_threads,
                           &c->n_batch,
                           NULL,
                           &c->max_prompt_tokens,
                           &c->max_tokens_limit,
                           &c->max_queue,
                           &c->max_connections,
                           NULL,
                           NULL,
                           NULL,
                           &c->spec.draft_max,
                           &c->spec.draft_min};
        o->draft_len_given |= k >= 13;
        if (ints[k])
            *ints[k] = (int32_t)v;
        else if (k == 0)
            c->port = (int)v;
        else if (k == 5)
            c->max_body = (size_t)v;
        else if (k == 10)
            c->timeout_s = (int)v;
        else if (k == 11)
            c->shutdown_grace_s = (double)v;
        else
            c->step_delay_ms = (int)v;
        return 1;
    }
    return 0;
}

/* --drain-delay S (seconds, fractions allowed). */
static int drain_option(serve_opts *o, int argc, char **argv, int *i) {
    if (strcmp(argv[*i], "--drain-delay")) return 0;
    if (*i + 1 >= argc) return cli_error("option %s needs a value", argv[*i]), -1;
    return cli_parse_float("--drain-delay", argv[++*i], 0, 3600, &o->cfg.drain_delay_s) ? 1 : -1;
}

/* Options with a text value or none. */
static int text_option(serve_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char **slot = !strcmp(a, "-m") || !strcmp(a, "--model") ? &o->cfg.model_path
                        : !strcmp(a, "--alias")                   ? &o->cfg.alias
                        : !strcmp(a, "--host")                    ? &o->cfg.host
                        : !strcmp(a, "--chat-template")           ? &o->cfg.chat_template
                        : !strcmp(a, "--api-key")                 ? &o->cfg.api_key
                        : !strcmp(a, "--api-key-file")            ? &o->key_file
                        : !strcmp(a, "--draft")                   ? &o->draft
                        : !strcmp(a, "--kv-type")                 ? &o->kv_type
                                                                  : NULL;
    if (!strcmp(a, "--quiet")) return o->cfg.quiet = true, 1;
    if (!strcmp(a, "--lookup")) return o->cfg.spec.lookup = true, 1;
    if (!slot) return 0;
    if (*i + 1 >= argc) return cli_error("option %s needs a value", a), -1;
    *slot = argv[++*i];
    if (slot != &o->kv_type) return 1;
    if (!strcmp(o->kv_type, "f16"))
        o->cfg.kv_type = NU_KV_F16;
    else if (!strcmp(o->kv_type, "f32"))
        o->cfg.kv_type = NU_KV_F32;
    else
        return cli_error("--kv-type must be f16 or f32, not '%s'", o->kv_type), -1;
    return 1;
}

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

/* Returns 0 to go on, -1 after --help, or an exit code. */
static int parse(serve_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(serve_help, stdout);
            return -1;
        }
        int r = int_option(o, argc, argv, &i);
        if (r == 0) r = text_option(o, argc, argv, &i);
        if (r == 0) r = drain_option(o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) return cli_error("unknown option '%s' (see nucleus serve --help)", a), 2;
    }
    if (!o->cfg.model_path && !(o->cfg.model_path = cli_model_or_demo(NULL))) return 2;
    if (o->draft && o->cfg.spec.lookup) return cli_error("give --draft or --lookup, not both"), 2;
    if (o->draft_len_given && !o->draft && !o->cfg.spec.lookup)
        return cli_error("--draft-max and --draft-min need --draft MODEL or --lookup"), 2;
    if (o->cfg.spec.draft_min > o->cfg.spec.draft_max)
        return cli_error("--draft-min %d is above --draft-max %d", o->cfg.spec.draft_min,
                         o->cfg.spec.draft_max),
               2;
    if (o->cfg.api_key && o->key_file)
        return cli_error("give --api-key or --api-key-file, not both"), 2;
    if (o->cfg.api_key && !o->cfg.api_key[0]) return cli_error("--api-key is empty"), 2;
    return 0;
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

int cmd_serve(int argc, char **argv) {
    serve_opts o = {.cfg = srv_default_config()};
    o.cfg.spec = nu_speculative_default_params();
    int rc = parse(&o, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
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
