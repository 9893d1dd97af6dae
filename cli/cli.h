/* cli.h - the nucleus command-line tool: one file per subcommand, each a
 * client of include/nucleus.h only. */
#ifndef NU_CLI_H
#define NU_CLI_H

#include "nucleus.h"

int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_watermark(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_grammar(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* Shared helpers (cli_common.c). */

/* Parses an integer / float option value; prints an error naming the option
 * and returns false when it is not a number in [lo, hi]. */
bool cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out);
bool cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out);
/* Reads a whole file into a NUL-terminated buffer (caller frees); NULL and a
 * message on stderr on failure. */
char *cli_read_file(const char *path, size_t *len);
/* The model to use: ref itself, or when ref is NULL (no -m) the demo model
 * models/stories260K.gguf found next to the executable (build tree or
 * installed share/nucleus/models), with a note on stderr; NULL after printing
 * an error naming the places looked in (cli_demo_model.c). */
const char *cli_model_or_demo(const char *ref);
/* Resolves -m (a path or hf: reference, downloading with a progress bar) and
 * loads the model; prints the error and returns NULL on failure. */
nu_model *cli_load_model(const char *ref, nu_load_mode mode);
/* A download progress bar on stderr (a nu_progress_callback; user is the
 * reference being fetched), and the call that ends its line. */
void cli_progress(void *user, uint64_t done, uint64_t total);
void cli_progress_end(void);
/* Prints "nucleus: <message>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
