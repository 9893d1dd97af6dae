/* cli_options.c - parsing the options shared by generate, bench and friends. */
#include "cli_options.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

const char cli_run_opts_help[] =
    "  -m, --model REF      model file, or hf:ORG/REPO/FILE.gguf (downloaded once)\n"
    "  -t, --threads N      worker threads (default: all cores)\n"
    "  -c, --ctx N          context length in tokens (default: the model's, at most 4096)\n"
    "  -b, --batch N        most tokens per forward pass (default 512)\n"
    "      --kv-type T      KV cache element type: f16 (default) or f32 (more exact)\n"
    "      --temp X         temperature; 0 is greedy (default 0.8)\n"
    "      --top-k N        keep the N most likely tokens; 0 is off (default 40)\n"
    "      --top-p X        keep the most likely tokens up to probability X; 1 is off (default 0.95)\n"
    "      --min-p X        drop tokens below X times the top probability; 0 is off (default 0.05)\n"
    "      --seed N         random seed (default 12648430)\n";

void cli_run_opts_init(cli_run_opts *o) {
    o->model = NULL;
    o->ctx = nu_context_default_params();
    o->sampling = nu_sampler_default_params();
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

int cli_run_opt(cli_run_opts *o, int argc, char **argv, int *i) {
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
        if (!strcmp(v, "f32")) o->ctx.kv_type = NU_KV_F32;
        else if (!strcmp(v, "f16")) o->ctx.kv_type = NU_KV_F16;
        else {
            cli_error("--kv-type must be f32 or f16, not '%s'", v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--temp") || !strcmp(a, "--temperature"))
        return float_opt(argc, argv, i, 0, 100, &o->sampling.temperature);
    if (!strcmp(a, "--top-k")) return int_opt(argc, argv, i, 0, 1L << 30, &o->sampling.top_k);
    if (!strcmp(a, "--top-p")) {
        int r = float_opt(argc, argv, i, 0, 1, &o->sampling.top_p);
        if (r == 1 && o->sampling.top_p <= 0) {
            cli_error("--top-p must be greater than 0 (1 turns it off)");
            return -1;
        }
        return r;
    }
    if (!strcmp(a, "--min-p")) return float_opt(argc, argv, i, 0, 1, &o->sampling.min_p);
    if (!strcmp(a, "--seed")) {
        const char *opt = argv[*i], *v = value_of(argc, argv, i);
        long x;
        if (!v || !cli_parse_int(opt, v, 0, 0x7fffffffffffffffL, &x)) return -1;
        o->sampling.seed = (uint64_t)x;
        return 1;
    }
    return 0;
}

int cli_open(const cli_run_opts *o, nu_model **model, nu_context **ctx) {
    if (!o->model) {
        cli_error("no model given (-m FILE or -m hf:ORG/REPO/FILE.gguf)");
        return 2;
    }
    *model = cli_load_model(o->model, NU_LOAD_FULL);
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
