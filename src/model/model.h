/* model.h - a loaded model (internal): hyperparameters, the weights as
 * matrices into the mapped file, and the vocabulary. Immutable after load. */
#ifndef NU_MODEL_H
#define NU_MODEL_H

#include "gguf.h"
#include "kernels.h"
#include "nucleus.h"
#include "tokenizer.h"

/* How positions are rotated into queries and keys. */
typedef enum nu_rope_scaling {
    NU_ROPE_SCALING_NONE = 0,
    NU_ROPE_SCALING_LINEAR, /* positions divided by the factor */
    NU_ROPE_SCALING_YARN,   /* YaRN: per-dimension blend of interpolation and extrapolation */
} nu_rope_scaling;

typedef struct nu_hparams {
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_ff;
    int32_t n_rot; /* dimensions of each head that RoPE rotates */
    float rope_base;
    nu_rope_scaling rope_scaling;
    float rope_factor; /* scaling factor (> 1 stretches the context) */
    int32_t rope_orig_ctx;
    float norm_eps;
} nu_hparams;

/* One transformer block's weights. Biases are optional (NULL). */
typedef struct nu_layer {
    const float *attn_norm;
    nu_matrix wq, wk, wv, wo;
    const float *bq, *bk, *bv, *bo;
    const float *ffn_norm;
    nu_matrix w_gate, w_up, w_down;
} nu_layer;

struct nu_model {
    nu_gguf_file *file;
    nu_vocab *vocab;
    nu_load_mode mode;
    char arch[64];
    char name[128];
    nu_hparams hp;
    /* weights (NU_LOAD_FULL only) */
    nu_matrix tok_embd; /* n_vocab rows of n_embd */
    const float *output_norm;
    nu_matrix output;               /* the LM head; equals tok_embd when tied */
    const float *rope_freq_factors; /* optional per-pair divisors (n_rot / 2) */
    nu_layer *layers;
    void *packed; /* the matrices' panel copies (nu_matrix_pack), one mapping */
    size_t packed_bytes;
    /* NUL-terminated names, made at load (one allocation, meta_keys owns it) */
    char **meta_keys;    /* [n_kv] */
    char **meta_types;   /* [n_kv] "u32", "arr[str,32000]", ... */
    char **tensor_names; /* [n_tensors] */
};

/* The model's matrices (output, then each layer's seven), as the forward
 * pass multiplies with them; out has room for 1 + 7 * n_layer. Returns the
 * count. */
int nu_model_matrices(const nu_model *m, const nu_matrix **out);

/* The vocabulary of a model (NULL for NU_LOAD_METADATA_ONLY). */
const nu_vocab *nu_model_vocab(const nu_model *m);

#endif
