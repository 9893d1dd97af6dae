/* cmd_quantize.c - `nucleus quantize IN OUT TYPE`: a copy of a model with its
 * weights in another type (e.g. a q4_0 copy to serve as a draft model). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char quantize_help[] =
    "usage: nucleus quantize IN.gguf OUT.gguf TYPE\n\n"
    "TYPE: f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0. Weight matrices are converted;\n"
    "norms and biases stay f32; with 4- and 5-bit types output.weight becomes q8_0.\n";

int cmd_quantize(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(quantize_help, stdout);
        return 0;
    }
    if (argc != 4) {
        cli_error("quantize takes IN OUT TYPE (see nucleus quantize --help)");
        return 2;
    }
    nu_error err;
    double t0 = nu_time_ms();
    if (nu_quantize_file(argv[1], argv[2], argv[3], &err) != NU_OK) {
        cli_error("%s", err.message);
        return 1;
    }
    fprintf(stderr, "wrote %s (%s) in %.1f s\n", argv[2], argv[3], (nu_time_ms() - t0) / 1e3);
    return 0;
}
