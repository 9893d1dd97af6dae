/* main.c - `nucleus COMMAND ...`: dispatches to one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"generate", cmd_generate, "continue a prompt, streaming the text"},
    {"chat", cmd_chat, "a conversation in the terminal, with the model's chat template"},
    {"compare", cmd_compare, "decoding strategies side by side on one next-token distribution"},
    {"inspect", cmd_inspect, "what each sampling stage does to the next-token distributions"},
    {"info", cmd_info, "metadata, tensors, parameters and memory needs of a model"},
    {"tokenize", cmd_tokenize, "show the tokens of a text"},
    {"watermark", cmd_watermark, "detect the watermark of generate --watermark KEY in a text"},
    {"template", cmd_template, "render a conversation with a chat template"},
    {"grammar", cmd_grammar, "show the GBNF of a JSON Schema, regex or choices; check a text"},
    {"bench", cmd_bench, "prompt and generation throughput"},
    {"perplexity", cmd_perplexity, "how well a model predicts a text (perplexity over windows)"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server with continuous batching"},
    {"quantize", cmd_quantize, "write a copy of a model with its weights in another type"},
    {"pull", cmd_pull, "download a model into the cache (hf:ORG/REPO/FILE.gguf)"},
};

static void usage(FILE *out) {
    fprintf(out, "nucleus %s - text generation for GGUF models on the CPU\n\n"
                 "usage: nucleus COMMAND [options]   (nucleus COMMAND --help for its options)\n\n"
                 "commands:\n", NU_VERSION_STRING);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nWithout -m, commands use the demo model models/stories260K.gguf.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("nucleus %s (%s kernels; AMX: %s)\n", NU_VERSION_STRING, nu_simd_level(),
               nu_amx_status());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    cli_error("unknown command '%s' (try nucleus --help)", argv[1]);
    return 2;
}
