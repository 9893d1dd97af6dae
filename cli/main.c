/* main.c - `nucleus COMMAND ...`: dispatches to one file per subcommand
 * (each a cli_command: cli_parse.h). */
#include <stdio.h>

#include "cli.h"

typedef struct main_opts {
    bool version;
} main_opts;

static const cli_command *const commands[] = {
    &generate_command,
    &chat_command,
    &compare_command,
    &inspect_command,
    &info_command,
    &tokenize_command,
    &watermark_command,
    &template_command,
    &grammar_command,
    &bench_command,
    &perplexity_command,
    &score_command,
    &embed_command,
    &serve_command,
    &quantize_command,
    &pull_command,
    NULL,
};

static const cli_option main_options[] = {
    {.name = "--version",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(main_opts, version),
     .help = "the version, the kernels this CPU runs and whether AMX is used"},
    {0},
};

static const cli_section main_sections[] = {
    CLI_OWN_SECTION(NULL, main_options),
    {0},
};

static const cli_command nucleus_command = {
    .name = NULL,
    .usage = "nucleus COMMAND [options]   (nucleus COMMAND --help for its options)",
    .about = "nucleus " NU_VERSION_STRING " - text generation for GGUF models on the CPU\n",
    .sections = main_sections,
    .subcommands = commands,
};

int main(int argc, char **argv) {
    main_opts o = {0};
    int rc = argc < 2 ? CLI_NO_SUBCOMMAND : cli_dispatch(&nucleus_command, argc, argv, &o);
    if (rc != CLI_NO_SUBCOMMAND) return rc;
    if (o.version) {
        printf("nucleus %s (%s kernels; AMX: %s)\n", NU_VERSION_STRING, nu_simd_level(),
               nu_amx_status());
        return 0;
    }
    cli_print_help(&nucleus_command, &o, stderr);
    return CLI_EXIT_USAGE;
}
