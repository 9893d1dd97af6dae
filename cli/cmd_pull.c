/* cmd_pull.c - `nucleus pull REF`: download a model into the cache (or find
 * it there) and print its local path, so scripts can do
 * `model=$(nucleus pull hf:...)`. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct pull_opts {
    const char *ref;
    bool quiet;
} pull_opts;

static int run_pull(int argc, char **argv);

static const cli_option pull_options[] = {
    {.name = "--quiet",
     .short_name = "-q",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(pull_opts, quiet),
     .help = "no progress bar"},
    {0},
};

static const cli_section pull_sections[] = {
    CLI_OWN_SECTION(NULL, pull_options),
    {0},
};

static const cli_positional pull_arguments[] = {
    {"REF", CLI_FIELD(pull_opts, ref), "hf:ORG/REPO[@REVISION]/PATH/TO/FILE.gguf"},
    {0},
};

const cli_command pull_command = {
    .name = "pull",
    .summary = "download a model into the cache (hf:ORG/REPO/FILE.gguf)",
    .usage = "nucleus pull [options] REF",
    .about = "Downloads a model into the cache, unless it is already there, and prints its\n"
             "local path. REF is hf:ORG/REPO[@REVISION]/PATH/TO/FILE.gguf, for example\n"
             "  nucleus pull hf:ggml-org/models/tinyllamas/stories260K.gguf\n"
             "The file's size and SHA-256 are checked against what the server announces; an\n"
             "interrupted download resumes where it stopped. Any command's -m accepts REF too.\n",
    .sections = pull_sections,
    .positionals = pull_arguments,
    .epilog = "environment:\n"
              "  NUCLEUS_CACHE         cache directory (default $XDG_CACHE_HOME/nucleus,\n"
              "                        else ~/.cache/nucleus)\n"
              "  NUCLEUS_HF_ENDPOINT   server (default https://huggingface.co)\n"
              "  HF_TOKEN              access token for gated or private repositories\n",
    .run = run_pull,
};

static int run_pull(int argc, char **argv) {
    pull_opts o = {0};
    int rc;
    if (!cli_parse(&pull_command, argc, argv, &o, &rc)) return rc;
    if (!nu_is_model_ref(o.ref)) {
        cli_error("'%s' is not a model reference (expected hf:ORG/REPO/FILE.gguf)", o.ref);
        return CLI_EXIT_USAGE;
    }
    char path[4096];
    nu_error err;
    /* First look in the cache only, to say so when nothing is downloaded. */
    nu_status st = nu_resolve_model(o.ref, false, NULL, NULL, path, sizeof path, &err);
    if (st == NU_OK) {
        if (!o.quiet) fprintf(stderr, "nucleus: %s is already in the cache\n", o.ref);
    } else if (st != NU_ERR_INVALID_ARG && st != NU_ERR_BUFFER_SMALL) {
        st = nu_resolve_model(o.ref, true, o.quiet ? NULL : cli_progress, (void *)o.ref, path,
                              sizeof path, &err);
        cli_progress_end();
    }
    if (st != NU_OK) {
        cli_error("%s", err.message);
        return st == NU_ERR_INVALID_ARG ? 2 : 1;
    }
    printf("%s\n", path);
    return 0;
}
