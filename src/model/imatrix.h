/* imatrix.h - importance matrices for quantisation (imatrix.c explains the
 * two file formats llama.cpp's tools write). */
#ifndef NU_IMATRIX_H
#define NU_IMATRIX_H

#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"

typedef struct nu_imatrix nu_imatrix;

/* Reads an importance matrix (GGUF or the legacy binary format). */
nu_status nu_imatrix_load(const char *path, nu_imatrix **out, nu_error *err);
void nu_imatrix_free(nu_imatrix *m);

/* The importances of the matrix `name` (not NUL-terminated): *n values,
 * n_in per expert, or NULL when the file has none for it. */
const float *nu_imatrix_find(const nu_imatrix *m, const char *name, size_t name_len, int64_t *n);

#endif
