/* cmd_info.c - `nucleus info`: what a model file holds and what running it
 * will cost in memory (the calculation users otherwise do by hand). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_options.h"

typedef struct info_opts {
    const char *model;
    long n_ctx, n_batch, n_seq, items;
    nu_kv_type kv, kv_k, kv_v;
    bool tensors;
} info_opts;

static int run_info(int argc, char **argv);

static const cli_option info_options[] = {
    {.name = "--model",
     .short_name = "-m",
     .kind = CLI_STRING,
     .field = CLI_FIELD(info_opts, model),
     .placeholder = "REF",
     .help = "model file (or hf:ORG/REPO/FILE.gguf)"},
    {.name = "--ctx",
     .short_name = "-c",
     .kind = CLI_INT,
     .field = CLI_FIELD(info_opts, n_ctx),
     .min = 1,
     .max = 1 << 24,
     .placeholder = "N",
     .help = "context length for the memory estimate",
     .default_text = "the model's"},
    {.name = "--batch",
     .short_name = "-b",
     .kind = CLI_INT,
     .field = CLI_FIELD(info_opts, n_batch),
     .min = 1,
     .max = 1 << 16,
     .placeholder = "N",
     .help = "batch size for the memory estimate"},
    {.name = "--parallel",
     .kind = CLI_INT,
     .field = CLI_FIELD(info_opts, n_seq),
     .min = 1,
     .max = 64,
     .placeholder = "N",
     .help = "sequences, each with its own context in the cache (the server's --parallel)"},
    {.name = "--kv-type",
     .kind = CLI_ENUM,
     .field = CLI_FIELD(info_opts, kv),
     .choices = cli_kv_types,
     .placeholder = "T",
     .help = "KV cache type: f16, f32, q8_0 or q4_0"},
    CLI_KV_SPLIT_ROWS(info_opts, kv_k, kv_v),
    {.name = "--items",
     .kind = CLI_INT,
     .field = CLI_FIELD(info_opts, items),
     .min = 0,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "array items shown per metadata value"},
    {.name = "--no-tensors",
     .kind = CLI_UNSET,
     .field = CLI_FIELD(info_opts, tensors),
     .help = "leave out the tensor table"},
    {0},
};

static const cli_section info_sections[] = {
    CLI_OWN_SECTION(NULL, info_options),
    {0},
};

const cli_command info_command = {
    .name = "info",
    .summary = "metadata, tensors, parameters and memory needs of a model",
    .usage = "nucleus info -m MODEL [options]",
    .sections = info_sections,
    .run = run_info,
};

static void print_size(const char *label, uint64_t bytes) {
    printf("  %-10s %12.2f MiB\n", label, (double)bytes / (1024.0 * 1024.0));
}

static void print_metadata(const nu_model *m, int items) {
    int64_t n = nu_model_meta_count(m);
    printf("metadata: %lld keys (GGUF v%u)\n", (long long)n, nu_model_gguf_version(m));
    for (int64_t i = 0; i < n; i++) {
        size_t need = nu_model_meta_value(m, i, NULL, 0, items);
        char *buf = malloc(need + 1);
        if (!buf) continue;
        nu_model_meta_value(m, i, buf, need + 1, items);
        printf("  %-44s %-16s %s\n", nu_model_meta_key(m, i), nu_model_meta_type(m, i), buf);
        free(buf);
    }
}

static void print_tensors(const nu_model *m) {
    int64_t n = nu_model_tensor_count(m);
    printf("\ntensors: %lld\n  %-36s %-6s %-24s %12s %14s\n", (long long)n, "name", "type", "shape",
           "bytes", "offset");
    for (int64_t i = 0; i < n; i++) {
        nu_tensor_info t;
        if (!nu_model_tensor(m, i, &t)) continue;
        char shape[64];
        int len = snprintf(shape, sizeof shape, "[%lld", (long long)t.ne[0]);
        for (uint32_t d = 1; d < t.n_dims && len < (int)sizeof shape; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, ", %lld", (long long)t.ne[d]);
        if (len < (int)sizeof shape) snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("  %-36s %-6s %-24s %12llu %14llu\n", t.name, t.type_name, shape,
               (unsigned long long)t.n_bytes, (unsigned long long)t.file_offset);
    }
}

/* Parameters and the memory a context of the requested size needs. */
static void print_memory(const char *path, const info_opts *o, uint64_t n_params) {
    printf("\nparameters: %llu (%.2f M)\n", (unsigned long long)n_params, (double)n_params / 1e6);
    nu_model_params mp = nu_model_default_params();
    nu_model *full;
    nu_error err;
    if (nu_model_load(path, &mp, &full, &err) != NU_OK) {
        printf("memory: not available (%s)\n", err.message);
        return;
    }
    size_t len = nu_model_describe(full, NULL, 0);
    char *text = malloc(len + 1);
    if (text) {
        nu_model_describe(full, text, len + 1);
        printf("\nhyperparameters as nucleus runs them:\n");
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
            printf("  %s\n", line);
        free(text);
    }
    /* the server's cache holds a context per sequence (--parallel) */
    int32_t n_ctx = o->n_ctx ? (int32_t)o->n_ctx : nu_model_n_ctx_train(full);
    int64_t cells = (int64_t)n_ctx * o->n_seq;
    nu_memory_estimate est;
    const nu_kv_type kv_k = o->kv_k == NU_KV_SAME ? o->kv : o->kv_k;
    const nu_kv_type kv_v = o->kv_v == NU_KV_SAME ? o->kv : o->kv_v;
    if (cells > (1 << 24)) {
        printf("memory: not available (%lld cells: a context of %d for %ld sequences is more "
               "than 16777216)\n",
               (long long)cells, n_ctx, o->n_seq);
    } else if (nu_model_memory(full, (int32_t)cells, (int32_t)o->n_batch, (int32_t)o->n_seq, kv_k,
                               kv_v, &est, &err)) {
        printf("memory: not available (%s)\n", err.message);
    } else {
        printf("\nmemory at context %d per sequence x %ld sequence(s) (%lld cells), batch %ld, "
               "%s keys and %s values in the KV cache:\n",
               n_ctx, o->n_seq, (long long)cells, o->n_batch, cli_kv_name(kv_k), cli_kv_name(kv_v));
        print_size("weights", est.weights);
        print_size("kv cache", est.kv_cache);
        print_size("scratch", est.scratch);
        print_size("total", est.total);
    }
    nu_model_free(full);
}

static int run_info(int argc, char **argv) {
    info_opts o = {.n_batch = 512,
                   .n_seq = 1,
                   .items = 8,
                   .kv = NU_KV_F16,
                   .kv_k = NU_KV_SAME,
                   .kv_v = NU_KV_SAME,
                   .tensors = true};
    int rc;
    if (!cli_parse(&info_command, argc, argv, &o, &rc)) return rc;
    if (!(o.model = cli_model_or_demo(o.model))) return CLI_EXIT_USAGE;
    nu_model *m = cli_load_model(o.model, NU_LOAD_METADATA_ONLY);
    if (!m) return 1;
    printf("model: %s\narchitecture: %s\nname: %s\n", o.model, nu_model_arch(m), nu_model_name(m));
    print_metadata(m, (int)o.items);
    if (o.tensors) print_tensors(m);
    printf("\ntensor data: %.2f MiB\n", (double)nu_model_weight_bytes(m) / (1024.0 * 1024.0));
    char path[4096];
    nu_error err;
    if (nu_resolve_model(o.model, false, NULL, NULL, path, sizeof path, &err) == NU_OK)
        print_memory(path, &o, nu_model_n_params(m));
    nu_model_free(m);
    return 0;
}
