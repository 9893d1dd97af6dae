/* cli_demo_model.c - the model commands use when -m is not given: the small
 * demo model the repository carries (models/stories260K.gguf, MIT licence),
 * so that a first command works on a machine without network.
 *
 * It is looked for next to the executable, in this order:
 *   <dir of nucleus>/../models/            a build tree (build/nucleus)
 *   <dir of nucleus>/../share/nucleus/models/   an installed tree, wherever it was moved
 *   NU_INSTALL_MODELS_DIR                  the install prefix chosen at configure time */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#define DEMO_MODEL_FILE "stories260K.gguf"
#ifndef NU_INSTALL_MODELS_DIR
#define NU_INSTALL_MODELS_DIR "/usr/local/share/nucleus/models"
#endif

enum { DEMO_PATH_MAX = 4096, N_DEMO_PLACES = 3 };

/* The directory holding the running executable, or "" when unknown. */
static void executable_dir(char *dir, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
    dir[n > 0 ? n : 0] = 0;
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        dir[0] = 0;
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

const char *cli_model_or_demo(const char *ref) {
    static char found[DEMO_PATH_MAX];
    if (ref) return ref;
    static char places[N_DEMO_PLACES][DEMO_PATH_MAX];
    char exe_dir[DEMO_PATH_MAX / 2];
    executable_dir(exe_dir, sizeof exe_dir);
    int n = 0;
    if (exe_dir[0]) {
        snprintf(places[n++], DEMO_PATH_MAX, "%s/../models/" DEMO_MODEL_FILE, exe_dir);
        snprintf(places[n++], DEMO_PATH_MAX, "%s/../share/nucleus/models/" DEMO_MODEL_FILE,
                 exe_dir);
    }
    snprintf(places[n++], DEMO_PATH_MAX, "%s", NU_INSTALL_MODELS_DIR "/" DEMO_MODEL_FILE);
    for (int i = 0; i < n; i++) {
        if (!is_file(places[i])) continue;
        /* a plain path (no "..") for messages and the server's model id */
        const char *path = realpath(places[i], found) ? found : places[i];
        fprintf(stderr, "nucleus: no -m given: using the demo model %s\n", path);
        return path;
    }
    cli_error("no model given (-m FILE or -m hf:ORG/REPO/FILE.gguf), and the demo model is not "
              "at %s%s%s%s%s",
              places[0], n > 1 ? ", " : "", n > 1 ? places[1] : "", n > 2 ? " or " : "",
              n > 2 ? places[2] : "");
    return NULL;
}
