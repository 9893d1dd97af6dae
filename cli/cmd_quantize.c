/* cmd_quantize.c - `nucleus quantize IN OUT TYPE`: a copy of a model with its
 * weights in another type or K-quant mix (e.g. q4_k_m, or a q4_0 copy to
 * serve as a draft model). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct quantize_opts {
    const char *in, *out, *type, *imatrix;
    bool pure;
} quantize_opts;

static int run_quantize(int argc, char **argv);

static const cli_positional quantize_arguments[] = {
    {"IN", CLI_FIELD(quantize_opts, in), "the model to convert (a GGUF file)"},
    {"OUT", CLI_FIELD(quantize_opts, out), "the file to write"},
    {"TYPE", CLI_FIELD(quantize_opts, type), "the weight type or mix (below)"},
    {0},
};

static const cli_option quantize_options[] = {
    {.name = "--pure",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(quantize_opts, pure),
     .help = "every matrix in TYPE itself (llama-quantize --pure): no mix, no q8_0/q6_k output, "
             "no fallback"},
    {.name = "--imatrix",
     .kind = CLI_STRING,
     .field = CLI_FIELD(quantize_opts, imatrix),
     .placeholder = "FILE",
     .help = "importance matrix (llama-imatrix's GGUF or .dat, as llama-quantize --imatrix): "
             "weighs the rounding of iq4_nl, iq4_xs and K-type (q2_k..q6_k) matrices by each "
             "column's activations (q4_0..q8_0 do not use it)"},
    {0},
};

static const cli_section quantize_sections[] = {
    CLI_OWN_SECTION(NULL, quantize_options),
    {0},
};

const cli_command quantize_command = {
    .name = "quantize",
    .summary = "write a copy of a model with its weights in another type",
    .usage = "nucleus quantize [--pure] [--imatrix FILE] IN.gguf OUT.gguf TYPE",
    .about = "Weight matrices are converted; norms and biases stay f32.\n",
    .positionals = quantize_arguments,
    .sections = quantize_sections,
    .epilog = "TYPE, one type for every matrix:\n"
              "  f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0   (4/5-bit: output.weight q8_0)\n"
              "  q6_k, q5_k, q4_k, q3_k                          (output.weight q6_k)\n"
              "TYPE, llama.cpp's K-quant mixes (same tensor types and general.file_type):\n"
              "  q5_k_m, q5_k_s, q4_k_m, q4_k_s, q3_k_l, q3_k_m, q3_k_s, q2_k\n"
              "  e.g. q4_k_m: q4_k, with attn_v and ffn_down q6_k in about half the layers\n"
              "  and output.weight q6_k. (llama.cpp's \"Q4_K\" means q4_k_m; here q4_k is\n"
              "  q4_k throughout.)\n"
              "TYPE, non-linear 4-bit (llama.cpp's recipes; better with --imatrix):\n"
              "  iq4_xs (4.25 bits), iq4_nl (4.5 bits)\n"
              "Matrices whose rows are not a multiple of 256 fall back to q4_0 (for q2_k,\n"
              "q3_k), q5_0 (q4_k), q5_1 (q5_k), q8_0 (q6_k) or iq4_nl (iq4_xs); rows that\n"
              "are not whole blocks of 32 to f16. The count of such matrices is printed.\n",
    .run = run_quantize,
};

static int run_quantize(int argc, char **argv) {
    quantize_opts o = {0};
    int rc;
    if (!cli_parse(&quantize_command, argc, argv, &o, &rc)) return rc;
    nu_error err;
    double t0 = nu_time_ms();
    nu_quantize_params qp = nu_quantize_default_params();
    qp.pure = o.pure;
    qp.imatrix = o.imatrix;
    int64_t n_fallback = 0, n_weighted = 0, n_unweighted = 0;
    qp.n_fallback = &n_fallback;
    qp.n_weighted = &n_weighted;
    qp.n_unweighted = &n_unweighted;
    if (nu_quantize_file_with(o.in, o.out, o.type, &qp, &err) != NU_OK) {
        cli_error("%s", err.message);
        return 1;
    }
    fprintf(stderr, "wrote %s (%s) in %.1f s\n", o.out, o.type, (nu_time_ms() - t0) / 1e3);
    if (n_fallback)
        fprintf(stderr,
                "note: %lld matri%s not in the type %s gives %s: %s rows are not whole blocks "
                "of it (the fallbacks: --help)\n",
                (long long)n_fallback, n_fallback == 1 ? "x is" : "ces are", o.type,
                n_fallback == 1 ? "it" : "them", n_fallback == 1 ? "its" : "their");
    if (o.imatrix && n_unweighted)
        fprintf(stderr,
                "note: the importance matrix weighed %lld matri%s; it has no entry for %lld "
                "more, quantised without it\n",
                (long long)n_weighted, n_weighted == 1 ? "x" : "ces", (long long)n_unweighted);
    else if (o.imatrix && !n_weighted)
        fprintf(stderr,
                "note: the importance matrix weighed no matrix: only iq4_nl, iq4_xs and the K "
                "types use one, and %s gives none of them\n",
                o.type);
    return 0;
}
