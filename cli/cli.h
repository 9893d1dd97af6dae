/* cli.h - the nucleus command-line tool: one file per subcommand, each a
 * client of include/nucleus.h only. */
#ifndef NU_CLI_H
#define NU_CLI_H

#include "cli_parse.h"
#include "nucleus.h"

/* The commands (cli_parse.h): their option tables, help and how they run.
 * main.c lists them. */
extern const cli_command generate_command, chat_command, compare_command, inspect_command,
    info_command, tokenize_command, watermark_command, template_command, grammar_command,
    bench_command, perplexity_command, serve_command, quantize_command, pull_command, embed_command,
    score_command;

/* Shared helpers (cli_common.c). */

/* Reads a whole file into a NUL-terminated buffer (caller frees); NULL and a
 * message on stderr on failure. */
char *cli_read_file(const char *path, size_t *len);
/* The model to use: ref itself, or when ref is NULL (no -m) the demo model
 * models/stories260K.gguf found next to the executable (build tree or
 * installed share/nucleus/models), with a note on stderr; NULL after printing
 * an error naming the places looked in (cli_demo_model.c). */
const char *cli_model_or_demo(const char *ref);
/* Resolves -m (a path or hf: reference, downloading with a progress bar)
 * into a file path; prints the error and returns false on failure. */
bool cli_resolve_model(const char *ref, char *path, size_t cap);
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
