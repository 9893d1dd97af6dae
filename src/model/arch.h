/* arch.h - model architectures as descriptions over shared blocks.
 *
 * An architecture is a row of one table (arch/arch_table.c): its name in
 * general.architecture, a hyperparameter hook for the keys only it has, a
 * manifest of the tensors each layer may hold (which of the catalogue below,
 * required or optional), and the recipe: which norm, RoPE layout, FFN
 * activation, router. The loader reads every layer's tensors through the
 * manifest (checking each shape against the layer's hyperparameters), and
 * the forward pass runs one layer recipe whose steps are switched by what
 * the recipe says and which tensors the layer has (a fused QKV matrix, Q/K
 * norms, post norms, experts). Adding an architecture is a new row (and a
 * hook if it has keys of its own); a new kind of step is a new block in
 * forward.c.
 *
 * Tensor names follow the GGUF files written by llama.cpp's converters:
 * per-layer tensors are "blk.N.<name>". */
#ifndef NU_ARCH_H
#define NU_ARCH_H

#include "model.h"

/* The per-layer tensors nucleus knows. */
typedef enum nu_tensor_id {
    NU_T_END = 0, /* ends a manifest */
    NU_T_ATTN_NORM,
    NU_T_ATTN_NORM_B,
    NU_T_ATTN_Q,
    NU_T_ATTN_K,
    NU_T_ATTN_V,
    NU_T_ATTN_QKV,
    NU_T_ATTN_OUT,
    NU_T_ATTN_Q_B,
    NU_T_ATTN_K_B,
    NU_T_ATTN_V_B,
    NU_T_ATTN_QKV_B,
    NU_T_ATTN_OUT_B,
    NU_T_ATTN_Q_NORM,
    NU_T_ATTN_K_NORM,
    NU_T_ATTN_POST_NORM,
    NU_T_FFN_NORM,
    NU_T_FFN_NORM_B,
    NU_T_FFN_GATE,
    NU_T_FFN_UP,
    NU_T_FFN_UP_GATED, /* ffn_up holding the gate rows, then the up rows (Phi-3) */
    NU_T_FFN_DOWN,
    NU_T_FFN_UP_B,
    NU_T_FFN_DOWN_B,
    NU_T_FFN_POST_NORM,
    NU_T_FFN_ROUTER,
    NU_T_FFN_GATE_EXPS,
    NU_T_FFN_UP_EXPS,
    NU_T_FFN_DOWN_EXPS,
    NU_T_ATTN_SINKS,         /* one extra score per query head in the softmax (gpt-oss) */
    NU_T_FFN_NORM_POST_NAME, /* the FFN's input norm, named post_attention_norm (gpt-oss) */
    NU_T_FFN_ROUTER_B,
    NU_T_FFN_GATE_EXPS_B,
    NU_T_FFN_UP_EXPS_B,
    NU_T_FFN_DOWN_EXPS_B,
    NU_T_LAYER_OUT_SCALE,     /* one number the layer's output is multiplied by (Gemma 4) */
    NU_T_FFN_POST_NORM_1,     /* the dense branch's output norm beside experts (Gemma 4) */
    NU_T_FFN_PRE_NORM_2,      /* the experts' input norm (Gemma 4) */
    NU_T_FFN_POST_NORM_2,     /* the experts' output norm (Gemma 4) */
    NU_T_FFN_ROUTER_SCALE,    /* the router's input scale per channel (Gemma 4) */
    NU_T_FFN_DOWN_EXPS_SCALE, /* one scale per expert's output (Gemma 4) */
    NU_T_PL_GATE,             /* per-layer embeddings: the gate from the hidden state */
    NU_T_PL_PROJ,             /* per-layer embeddings: back to the hidden state */
    NU_T_PL_POST_NORM,        /* per-layer embeddings: the output norm */
    NU_T_ATTN_Q_NORM_FULL,    /* Q normed over the whole projection, not per head (OLMo 2) */
    NU_T_ATTN_K_NORM_FULL,    /* K likewise */
    NU_T_ATTN_Q_GATED,        /* attn_q giving each head's query and then its output gate */
    NU_T_SSM_QKV,             /* Gated DeltaNet: the convolved channels (q, k, v) */
    NU_T_SSM_Z,               /* Gated DeltaNet: the output gate z (attn_gate) */
    NU_T_SSM_CONV,            /* Gated DeltaNet: the causal convolution, d_conv per channel */
    NU_T_SSM_DT,              /* Gated DeltaNet: the decay's bias per value head */
    NU_T_SSM_A,               /* Gated DeltaNet: -exp(A_log) per value head */
    NU_T_SSM_BETA,            /* Gated DeltaNet: the write strength's projection */
    NU_T_SSM_ALPHA,           /* Gated DeltaNet: the decay's projection */
    NU_T_SSM_NORM,            /* Gated DeltaNet: the gated norm's weight (one head) */
    NU_T_SSM_OUT,             /* Gated DeltaNet: back to the hidden state */
    NU_T_FFN_SHEXP_ROUTER,    /* the shared expert's gate: one logit per token */
    NU_T_FFN_GATE_SHEXP,
    NU_T_FFN_UP_SHEXP,
    NU_T_FFN_DOWN_SHEXP,
    NU_T_COUNT
} nu_tensor_id;

/* How a manifest uses a tensor. */
enum {
    NU_REQ = 1,           /* the layer must have it */
    NU_OPT = 2,           /* it may have it */
    NU_IF_MOE = 4,        /* with NU_REQ: required when the model has experts */
    NU_IF_DENSE = 8,      /* with NU_REQ: required when it does not */
    NU_IF_RECURRENT = 16, /* only in recurrent layers (a hybrid's Gated DeltaNet layers) */
    NU_IF_ATTENTION = 32, /* only in attention layers (of a hybrid) */
};

typedef struct nu_tensor_use {
    uint8_t id;    /* nu_tensor_id */
    uint8_t flags; /* NU_REQ or NU_OPT, and the conditions */
} nu_tensor_use;

typedef enum nu_norm_kind {
    NU_NORM_RMS = 0, /* x / sqrt(mean(x^2) + eps) * w */
    NU_NORM_LAYER,   /* (x - mean) / sqrt(var + eps) * w + b */
} nu_norm_kind;

typedef enum nu_rope_layout {
    NU_ROPE_PAIRS = 0, /* rotates (x0, x1), (x2, x3), ... (llama's converted Q/K) */
    NU_ROPE_HALVES,    /* rotates (x_i, x_{i + n_rot/2}) (GPT-NeoX style) */
    NU_ROPE_NONE,      /* no rotation: learned absolute positions */
} nu_rope_layout;

typedef enum nu_act {
    NU_ACT_SILU = 0,       /* g / (1 + e^-g) */
    NU_ACT_GELU_TANH,      /* 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), at half
                            * precision (blocks.c says why) */
    NU_ACT_GELU_ERF,       /* 0.5 g (1 + erf(g / sqrt(2))) */
    NU_ACT_SWIGLU_CLAMPED, /* gated only: min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1)
                            * (gpt-oss) */
} nu_act;

typedef enum nu_router_kind {
    NU_ROUTER_SOFTMAX_TOPK = 0, /* softmax over all experts, keep the top k */
    NU_ROUTER_TOPK_SOFTMAX,     /* keep the top k logits, softmax over them */
} nu_router_kind;

struct nu_arch {
    const char *name; /* general.architecture */
    const nu_tensor_use *manifest;
    nu_norm_kind norm;
    nu_norm_kind qk_norm; /* of the per-head Q/K norms, when present */
    nu_rope_layout rope;
    nu_act act; /* of the FFN (the gate's, when gated) */
    nu_router_kind router;
    bool parallel_ffn;      /* without ffn_norm, the FFN reads the attention's input norm */
    bool embd_scale_sqrt;   /* token embeddings times sqrt(n_embd) (Gemma) */
    bool learned_positions; /* position_embd.weight (GPT-2) */
    bool prescale_q;        /* queries times the attention scale before q.k, not the scores */
    bool v_norm;            /* values RMS-normed per head, without a weight (Gemma 4) */
    bool output_norm_bias;  /* output_norm.bias too */
    bool q_gate;            /* attn_q gives a gate per head too: the attention output is
                             * multiplied by sigmoid(gate) before Wo (Qwen 3.5) */
    /* Keys only this architecture reads, after the common ones; may also
     * set per-layer values (windows, RoPE per layer). NULL: none. */
    nu_status (*hparams)(nu_model *m, nu_error *err);
};

/* The architecture named name, or NULL. */
const nu_arch *nu_arch_find(const char *name);

/* The names nucleus runs, comma-separated (for messages), written like
 * snprintf: at most cap bytes with the NUL; returns the full length. */
size_t nu_arch_list(char *buf, size_t cap);

/* ---- helpers for hyperparameter hooks ----------------------------------- */

/* "<arch>.<suffix>" as a positive int32 / positive float / bool; a missing
 * key keeps *out (or fails when required). */
nu_status nu_arch_int(const nu_model *m, const char *suffix, bool required, int32_t *out,
                      nu_error *err);
nu_status nu_arch_float(const nu_model *m, const char *suffix, bool required, float *out,
                        nu_error *err);
nu_status nu_arch_bool(const nu_model *m, const char *suffix, bool *out, nu_error *err);

/* Sliding windows: "<arch>.attention.sliding_window" (its size; absent:
 * default_window, 0 = none) and "<arch>.attention.sliding_window_pattern"
 * (an array of one bool per layer, or N: layers with il % N < N - 1 use the
 * window; absent: default_pattern, where 1 means every layer). Layers with
 * a window use rope[1] when the file gives "<arch>.rope.freq_base_swa". */
nu_status nu_arch_windows(nu_model *m, int32_t default_window, int32_t default_pattern,
                          nu_error *err);

/* The hooks the table uses (arch/ files). */
nu_status nu_arch_gemma2_hparams(nu_model *m, nu_error *err);
nu_status nu_arch_gemma3_hparams(nu_model *m, nu_error *err);
nu_status nu_arch_gpt_oss_hparams(nu_model *m, nu_error *err);
nu_status nu_arch_gemma4_hparams(nu_model *m, nu_error *err);
nu_status nu_arch_smollm3_hparams(nu_model *m, nu_error *err);
nu_status nu_arch_qwen35_hparams(nu_model *m, nu_error *err);

#endif
