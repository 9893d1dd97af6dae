/* cmd_pull.c - `nucleus pull REF`: download a model into the cache (or find
 * it there) and print its local path, so scripts can do
 * `model=$(nucleus pull hf:...)`. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char pull_help[] =
    "usage: nucleus pull [options] REF\n\n"
    "Downloads a model into the cache, unless it is already there, and prints its\n"
    "local path. REF is hf:ORG/REPO[@REVISION]/PATH/TO/FILE.gguf, for example\n"
    "  nucleus pull hf:ggml-org/models/tinyllamas/stories260K.gguf\n"
    "The file's size and SHA-256 are checked against what the server announces; an\n"
    "interrupted download resumes where it stopped. Any command's -m accepts REF too.\n\n"
    "  -q, --quiet   no progress bar\n"
    "  -h, --help    this text\n\n"
    "environment:\n"
    "  NUCLEUS_CACHE         cache directory (default $XDG_CACHE_HOME/nucleus,\n"
    "                        else ~/.cache/nucleus)\n"
    "  NUCLEUS_HF_ENDPOINT   server (default https://huggingface.co)\n"
    "  HF_TOKEN              access token for gated or private repositories\n";

typedef struct pull_opts {
    const char *ref;
    bool quiet;
} pull_opts;

/* Returns 0 to go on, or the exit code after printing help or an error. */
static int parse(pull_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(pull_help, stdout);
            return -1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o->quiet = true;
        } else if (a[0] == '-' && a[1]) {
            cli_error("unknown option '%s' (see nucleus pull --help)", a);
            return 2;
        } else if (o->ref) {
            cli_error("one model at a time: '%s' and '%s'", o->ref, a);
            return 2;
        } else {
            o->ref = a;
        }
    }
    if (!o->ref) {
        cli_error("no model given (nucleus pull hf:ORG/REPO/FILE.gguf)");
        return 2;
    }
    if (!nu_is_model_ref(o->ref)) {
        cli_error("'%s' is not a model reference (expected hf:ORG/REPO/FILE.gguf)", o->ref);
        return 2;
    }
    return 0;
}

int cmd_pull(int argc, char **argv) {
    pull_opts o = {0};
    int rc = parse(&o, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
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
