/* model.h - a loaded model (internal): its architecture's description, the
 * hyperparameters (global and per layer), the weights as matrices into the
 * mapped file, and the vocabulary. Immutable after load. */
#ifndef NU_MODEL_H
#define NU_MODEL_H

#include "gguf.h"
#include "kernels.h"
#include "nucleus.h"
#include "tokenizer.h"

typedef struct nu_arch nu_arch;

/* Ways of rotating positions one model may use (global and sliding-window
 * layers may differ). */
#define NU_MAX_ROPES 2
/* Bounds the loader checks files against (the forward pass sizes stack
 * arrays by them). */
#define NU_MAX_HEAD_DIM 512 /* elements of one attention head */
#define NU_MAX_LAYERS 4096
#define NU_MAX_EXPERTS 1024
#define NU_MAX_EXPERTS_USED 64 /* experts one token uses */
/* A metadata key or tensor name nucleus builds ("<arch>.<suffix>",
 * "blk.N.<name>"); file strings may be longer and are compared as given. */
#define NU_MAX_KEY 160

/* How positions are rotated into queries and keys. */
typedef enum nu_rope_scaling {
    NU_ROPE_SCALING_NONE = 0,
    NU_ROPE_SCALING_LINEAR,   /* positions divided by the factor */
    NU_ROPE_SCALING_YARN,     /* YaRN: per-dimension blend of interpolation and extrapolation */
    NU_ROPE_SCALING_LONGROPE, /* per-pair factors, short or long by context (Phi-3) */
} nu_rope_scaling;

/* One way of rotating positions: a model has one or two (sliding-window
 * layers may use their own base). */
typedef struct nu_rope {
    int32_t n_rot; /* dimensions of each head it rotates */
    float base;
    nu_rope_scaling scaling;
    float factor; /* scaling factor (> 1 stretches the context) */
    int32_t orig_ctx;
    float attn_factor;         /* multiplies cos and sin (YaRN, LongRoPE) */
    const float *freq_factors; /* per-pair divisors (n_rot / 2), or NULL */
} nu_rope;

/* What a layer's mixing step is. */
typedef enum nu_layer_kind {
    NU_LAYER_ATTENTION = 0,
    NU_LAYER_DELTANET, /* Gated DeltaNet: recurrent, its state in the cache's state slots */
} nu_layer_kind;

/* A Gated DeltaNet's sizes (Yang, Kautz, Hatamizadeh, "Gated Delta
 * Networks: Improving Mamba2 with Delta Rule", ICLR 2025): n_k_heads key
 * heads and n_v_heads value heads (a multiple; value head j reads key head
 * j mod n_k_heads) of head_dim each, a causal convolution of d_conv taps
 * over the q, k and v channels. */
typedef struct nu_ssm_hp {
    int32_t d_conv;
    int32_t head_dim;
    int32_t n_k_heads, n_v_heads;
} nu_ssm_hp;

/* The hyperparameters of one layer (most models repeat one set; some vary
 * the window, the RoPE base or the head size by layer). */
typedef struct nu_layer_hp {
    nu_layer_kind kind;
    int32_t n_head, n_head_kv;
    int32_t head_dim;    /* of queries and keys */
    int32_t head_dim_v;  /* of values */
    int32_t n_ff;        /* the dense FFN's width (0 with experts only) */
    int32_t window;      /* 0: full causal attention; else keys at positions > pos - window */
    int32_t rope;        /* index into nu_hparams.rope; -1: no rotation (SmolLM3's NoPE layers) */
    int32_t kv_from;     /* -1: the layer stores its own keys and values; else the layer
                          * whose cache plane it reads (Gemma 4's shared KV) */
    int32_t kv_slot;     /* index of the cache plane this layer stores and reads (-1: none) */
    int32_t state_plane; /* recurrent layers: its plane of the cache's state slots; else -1 */
} nu_layer_hp;

typedef struct nu_hparams {
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head; /* of layer 0, for reports */
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_ff;
    float norm_eps;
    /* experts */
    int32_t n_expert, n_expert_used, n_ff_exp;
    bool expert_weights_norm; /* renormalise the chosen experts' weights */
    /* attention */
    float attn_scale;    /* multiplies q.k (default 1 / sqrt(head_dim)) */
    float attn_softcap;  /* c * tanh(s / c) of the scores, 0 = off */
    float final_softcap; /* the same of the logits */
    float embd_scale;    /* multiplies the token embeddings (1 = off) */
    int32_t n_rope;      /* entries of rope[] in use */
    nu_rope rope[NU_MAX_ROPES];
    int32_t n_kv_slots;     /* cache planes (layers that store their own keys) */
    int32_t n_embd_pl;      /* per-layer embedding width (Gemma 4), 0 = none */
    int32_t pooling;        /* <arch>.pooling_type as the file gives it, -1 when absent */
    nu_ssm_hp ssm;          /* recurrent layers' sizes */
    int32_t n_state_planes; /* recurrent layers */
    int32_t n_ff_shexp;     /* the shared expert's width (0: none) */
    nu_layer_hp *layer;     /* [n_layer] */
} nu_hparams;

/* Experts of a mixture stored as one 3-D tensor: n matrices of the same
 * shape, expert e at data + e * stride (and packed + e * packed_stride). */
typedef struct nu_experts {
    nu_matrix m; /* expert 0 */
    int32_t n;
    size_t stride, packed_stride;
} nu_experts;

/* One block's weights; a NULL vector or a matrix with data == NULL is
 * absent. Which ones a file has is the architecture's manifest (arch.h). */
typedef struct nu_layer {
    /* attention */
    const float *attn_norm, *attn_norm_b;
    nu_matrix wq, wk, wv, wqkv, wo; /* split Q/K/V or one fused matrix */
    const float *bq, *bk, *bv, *bqkv, *bo;
    const float *q_norm, *k_norm; /* per head, head_dim weights */
    const float *q_norm_b, *k_norm_b;
    const float *q_norm_full, *k_norm_full; /* over the whole projection (OLMo 2) */
    const float *post_attn_norm;
    const float *attn_sinks; /* [n_head] */
    /* feed-forward */
    const float *ffn_norm, *ffn_norm_b;
    nu_matrix w_gate, w_up, w_down; /* w_up has 2 n_ff rows when the gate is fused in */
    const float *b_up, *b_down;
    const float *post_ffn_norm;
    const float *out_scale; /* [1] */
    /* mixture of experts */
    nu_matrix router; /* n_expert rows */
    const float *router_b;
    nu_experts gate_exps, up_exps, down_exps;
    /* per-expert biases, expert e's at + e * (its output size) */
    const float *gate_exps_b, *up_exps_b, *down_exps_b;
    const float *down_exps_scale; /* [n_expert] */
    /* experts beside a dense FFN (Gemma 4) */
    const float *post_ffn_norm_1, *pre_ffn_norm_2, *post_ffn_norm_2, *router_scale;
    /* per-layer embeddings (Gemma 4) */
    nu_matrix pl_gate, pl_proj;
    const float *pl_post_norm;
    /* Gated DeltaNet */
    nu_matrix ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_out;
    const float *ssm_conv; /* [conv channels][d_conv] */
    const float *ssm_dt, *ssm_a, *ssm_norm;
    /* a shared expert beside the routed ones, its output scaled by
     * sigmoid(shexp_router . x) when the router is there */
    nu_matrix shexp_gate, shexp_up, shexp_down, shexp_router;
} nu_layer;

/* Floats of a Gated DeltaNet layer's convolution channels (q, k, v), and of
 * its state: the last d_conv - 1 inputs of every channel, then a head_dim x
 * head_dim matrix per value head. */
int64_t nu_ssm_conv_dim(const nu_ssm_hp *s);
int64_t nu_ssm_state_floats(const nu_ssm_hp *s);

struct nu_model {
    nu_gguf_file *file;
    nu_vocab *vocab;
    nu_load_mode mode;
    const char *arch_name; /* general.architecture, "" when absent */
    const char *name;      /* general.name, "" when absent */
    const nu_arch *arch;   /* NULL unless the weights were loaded */
    nu_hparams hp;
    /* weights (NU_LOAD_FULL only) */
    nu_matrix tok_embd; /* n_vocab rows of n_embd */
    nu_matrix pos_embd; /* learned absolute positions (n_ctx_train rows), or absent */
    const float *output_norm, *output_norm_b;
    nu_matrix output;                    /* the LM head; equals tok_embd when tied */
    const float *rope_long, *rope_short; /* LongRoPE factors */
    /* per-layer embeddings (Gemma 4): a token's row of n_embd_pl x n_layer, and
     * a projection of the token embedding to the same */
    nu_matrix pl_tok_embd, pl_model_proj;
    const float *pl_proj_norm;
    nu_layer *layers;
    void *packed; /* the matrices' panel copies (nu_matrix_pack), one mapping */
    size_t packed_bytes;
    /* NUL-terminated names, made at load (one allocation, meta_keys owns it) */
    char **meta_keys;    /* [n_kv] */
    char **meta_types;   /* [n_kv] "u32", "arr[str,32000]", ... */
    char **tensor_names; /* [n_tensors] */
};

/* The vocabulary of a model (NULL for NU_LOAD_METADATA_ONLY). */
const nu_vocab *nu_model_vocab(const nu_model *m);

/* A weight matrix as the forward pass multiplies it: one matrix, or one
 * expert of a 3-D tensor (expert < 0: the whole tensor, for listings). */
typedef struct nu_weight {
    const nu_matrix *m;
    const nu_experts *experts;
} nu_weight;

/* Every matrix the forward pass multiplies with, in the order one step
 * streams them (output last), as listed by the architecture's manifest: the
 * one list that loading, repacking, scratch sizing, the memory estimate and
 * nu_context_read_weights use. Writes at most cap; returns the count. */
int32_t nu_model_weights(const nu_model *m, nu_weight *out, int32_t cap);

/* Bytes one generation step reads from a weight (one token: for experts,
 * n_expert_used of them). */
uint64_t nu_weight_step_bytes(const nu_model *m, const nu_weight *w);

/* The matrix of expert e. */
nu_matrix nu_expert_matrix(const nu_experts *x, int32_t e);

#endif
