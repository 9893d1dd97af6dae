/* test_support.h - helpers shared by the tests: paths to shared assets,
 * reading whole files, a scratch directory, loading a shared model. */
#ifndef NU_TEST_SUPPORT_H
#define NU_TEST_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "nucleus.h"

/* "<shared>/<rel>" in a static buffer (one per call site is enough: copy it). */
const char *nu_test_shared(const char *rel);
/* "<build>/tests/tmp/<name>" in a static buffer. */
const char *nu_test_tmp(const char *name);
/* Reads a whole file (NUL-terminated; *len without the NUL); NULL on failure. */
char *nu_test_read_file(const char *path, size_t *len);
/* True when the file exists. */
int nu_test_exists(const char *path);
/* Loads the model "<shared>/<rel>" into *model: 0, or -1 after printing why
 * (what a cmocka group setup returns). */
int nu_test_load_model(const char *rel, nu_model **model);
/* The demo model (models/stories260K.gguf) for a whole test group:
 * cmocka_run_group_tests(tests, nu_test_demo_setup, nu_test_demo_teardown)
 * loads it into nu_test_demo before the first test and frees it after the last. */
extern nu_model *nu_test_demo;
/* Calls fn for every matrix (2-D tensor) of tests/arch/quantized/llama-k1-<name>.gguf
 * (a file llama-quantize --pure wrote, every matrix in one type), checking each is of
 * type, with its name for messages ("<name> <tensor>: "); returns how many. */
struct nu_gguf_tensor;
typedef void (*nu_test_matrix_fn)(const struct nu_gguf_tensor *g, const char *what, void *ctx);
int nu_test_each_quantized_matrix(const char *name, uint32_t type, nu_test_matrix_fn fn, void *ctx);
int nu_test_demo_setup(void **state);
int nu_test_demo_teardown(void **state);

#endif
