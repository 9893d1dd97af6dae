/* loader.h - reading a model's architecture, hyperparameters and weights
 * (internal to the model layer). */
#ifndef NU_LOADER_H
#define NU_LOADER_H

#include "model.h"

/* Finds m->arch_name in the table, reads the hyperparameters and every
 * tensor the architecture's manifest lists. */
nu_status nu_load_architecture(nu_model *m, nu_error *err);

/* Copies every matrix the selected kernels have a panel layout for into that
 * layout (NUCLEUS_REPACK=0 in the environment keeps the file layout). */
nu_status nu_repack_weights(nu_model *m, nu_error *err);

/* A named tensor as a matrix of n_out rows of n_in, or an F32 vector of n;
 * absent and not required: a zeroed matrix / NULL. */
nu_status nu_load_matrix(const nu_model *m, const char *name, int64_t n_in, int64_t n_out,
                         bool required, nu_matrix *out, nu_error *err);
nu_status nu_load_vector(const nu_model *m, const char *name, int64_t n, bool required,
                         const float **out, nu_error *err);

/* Gives the sliding-window layers a RoPE of their own with this base (and
 * no scaling), as rope[1]. */
void nu_arch_set_swa_rope(nu_model *m, float base);

#endif
