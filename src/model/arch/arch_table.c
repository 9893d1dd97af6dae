/* arch_table.c - the architectures nucleus runs, one row each (arch.h says
 * what a row means). The tensor names and which are required follow the
 * GGUF files llama.cpp's converters write for each family. */
#include <stdio.h>
#include <string.h>

#include "arch.h"

#define END                                                                                        \
    { NU_T_END, 0 }

/* Attention as llama has it: split Q/K/V, optional biases. */
#define ATTN_SPLIT(bias)                                                                           \
    {NU_T_ATTN_NORM, NU_REQ}, {NU_T_ATTN_Q, NU_REQ}, {NU_T_ATTN_K, NU_REQ}, {NU_T_ATTN_V, NU_REQ}, \
        {NU_T_ATTN_OUT, NU_REQ}, {NU_T_ATTN_Q_B, bias}, {NU_T_ATTN_K_B, bias},                     \
        {NU_T_ATTN_V_B, bias}, {                                                                   \
        NU_T_ATTN_OUT_B, NU_OPT                                                                    \
    }

/* A gated FFN, or experts (with a router) instead. */
#define FFN_GATED_OR_EXPERTS                                                                       \
    {NU_T_FFN_NORM, NU_REQ}, {NU_T_FFN_GATE, NU_REQ | NU_IF_DENSE},                                \
        {NU_T_FFN_UP, NU_REQ | NU_IF_DENSE}, {NU_T_FFN_DOWN, NU_REQ | NU_IF_DENSE},                \
        {NU_T_FFN_ROUTER, NU_REQ | NU_IF_MOE}, {NU_T_FFN_GATE_EXPS, NU_REQ | NU_IF_MOE},           \
        {NU_T_FFN_UP_EXPS, NU_REQ | NU_IF_MOE}, {                                                  \
        NU_T_FFN_DOWN_EXPS, NU_REQ | NU_IF_MOE                                                     \
    }

static const nu_tensor_use llama_tensors[] = {ATTN_SPLIT(NU_OPT), FFN_GATED_OR_EXPERTS, END};

static const nu_tensor_use qwen2_tensors[] = {ATTN_SPLIT(NU_REQ), FFN_GATED_OR_EXPERTS, END};

static const nu_tensor_use qwen3_tensors[] = {ATTN_SPLIT(NU_OPT),
                                              {NU_T_ATTN_Q_NORM, NU_REQ},
                                              {NU_T_ATTN_K_NORM, NU_REQ},
                                              FFN_GATED_OR_EXPERTS,
                                              END};

static const nu_tensor_use phi3_tensors[] = {{NU_T_ATTN_NORM, NU_REQ}, {NU_T_ATTN_QKV, NU_OPT},
                                             {NU_T_ATTN_Q, NU_OPT},    {NU_T_ATTN_K, NU_OPT},
                                             {NU_T_ATTN_V, NU_OPT},    {NU_T_ATTN_OUT, NU_REQ},
                                             {NU_T_FFN_NORM, NU_REQ},  {NU_T_FFN_UP_GATED, NU_REQ},
                                             {NU_T_FFN_DOWN, NU_REQ},  END};

static const nu_tensor_use gpt2_tensors[] = {{NU_T_ATTN_NORM, NU_REQ},
                                             {NU_T_ATTN_NORM_B, NU_REQ},
                                             {NU_T_ATTN_QKV, NU_REQ},
                                             {NU_T_ATTN_QKV_B, NU_REQ},
                                             {NU_T_ATTN_OUT, NU_REQ},
                                             {NU_T_ATTN_OUT_B, NU_REQ},
                                             {NU_T_FFN_NORM, NU_REQ},
                                             {NU_T_FFN_NORM_B, NU_REQ},
                                             {NU_T_FFN_UP, NU_REQ},
                                             {NU_T_FFN_UP_B, NU_REQ},
                                             {NU_T_FFN_DOWN, NU_REQ},
                                             {NU_T_FFN_DOWN_B, NU_REQ},
                                             END};

static const nu_tensor_use gemma_tensors[] = {ATTN_SPLIT(NU_OPT), FFN_GATED_OR_EXPERTS, END};

static const nu_tensor_use gemma2_tensors[] = {ATTN_SPLIT(NU_OPT),
                                               {NU_T_ATTN_POST_NORM, NU_REQ},
                                               FFN_GATED_OR_EXPERTS,
                                               {NU_T_FFN_POST_NORM, NU_REQ},
                                               END};

static const nu_tensor_use gemma3_tensors[] = {ATTN_SPLIT(NU_OPT),
                                               {NU_T_ATTN_Q_NORM, NU_REQ},
                                               {NU_T_ATTN_K_NORM, NU_REQ},
                                               {NU_T_ATTN_POST_NORM, NU_REQ},
                                               FFN_GATED_OR_EXPERTS,
                                               {NU_T_FFN_POST_NORM, NU_REQ},
                                               END};

static const nu_tensor_use starcoder2_tensors[] = {
    {NU_T_ATTN_NORM_B, NU_REQ}, ATTN_SPLIT(NU_OPT),        {NU_T_FFN_NORM, NU_REQ},
    {NU_T_FFN_NORM_B, NU_REQ},  {NU_T_FFN_UP, NU_REQ},     {NU_T_FFN_UP_B, NU_OPT},
    {NU_T_FFN_DOWN, NU_REQ},    {NU_T_FFN_DOWN_B, NU_OPT}, END};

static const nu_tensor_use stablelm_tensors[] = {
    {NU_T_ATTN_NORM_B, NU_REQ}, ATTN_SPLIT(NU_OPT),
    {NU_T_ATTN_Q_NORM, NU_OPT}, {NU_T_ATTN_K_NORM, NU_OPT},
    {NU_T_FFN_NORM, NU_OPT},    {NU_T_FFN_NORM_B, NU_OPT},
    {NU_T_FFN_GATE, NU_REQ},    {NU_T_FFN_UP, NU_REQ},
    {NU_T_FFN_DOWN, NU_REQ},    END};

static const nu_tensor_use gpt_oss_tensors[] = {
    ATTN_SPLIT(NU_REQ),           {NU_T_ATTN_SINKS, NU_REQ},      {NU_T_FFN_NORM_POST_NAME, NU_REQ},
    {NU_T_FFN_ROUTER, NU_REQ},    {NU_T_FFN_ROUTER_B, NU_REQ},    {NU_T_FFN_GATE_EXPS, NU_REQ},
    {NU_T_FFN_UP_EXPS, NU_REQ},   {NU_T_FFN_DOWN_EXPS, NU_REQ},   {NU_T_FFN_GATE_EXPS_B, NU_REQ},
    {NU_T_FFN_UP_EXPS_B, NU_REQ}, {NU_T_FFN_DOWN_EXPS_B, NU_REQ}, END};

static const nu_tensor_use gemma4_tensors[] = {{NU_T_ATTN_NORM, NU_REQ},
                                               {NU_T_ATTN_Q, NU_REQ},
                                               {NU_T_ATTN_K, NU_OPT},
                                               {NU_T_ATTN_V, NU_OPT},
                                               {NU_T_ATTN_OUT, NU_REQ},
                                               {NU_T_ATTN_Q_NORM, NU_REQ},
                                               {NU_T_ATTN_K_NORM, NU_OPT},
                                               {NU_T_ATTN_POST_NORM, NU_REQ},
                                               {NU_T_FFN_NORM, NU_REQ},
                                               {NU_T_FFN_GATE, NU_REQ},
                                               {NU_T_FFN_UP, NU_REQ},
                                               {NU_T_FFN_DOWN, NU_REQ},
                                               {NU_T_FFN_POST_NORM, NU_REQ},
                                               {NU_T_FFN_ROUTER, NU_REQ | NU_IF_MOE},
                                               {NU_T_FFN_ROUTER_SCALE, NU_REQ | NU_IF_MOE},
                                               {NU_T_FFN_PRE_NORM_2, NU_REQ | NU_IF_MOE},
                                               {NU_T_FFN_POST_NORM_1, NU_REQ | NU_IF_MOE},
                                               {NU_T_FFN_POST_NORM_2, NU_REQ | NU_IF_MOE},
                                               {NU_T_FFN_GATE_EXPS, NU_REQ | NU_IF_MOE},
                                               {NU_T_FFN_UP_EXPS, NU_REQ | NU_IF_MOE},
                                               {NU_T_FFN_DOWN_EXPS, NU_REQ | NU_IF_MOE},
                                               {NU_T_FFN_DOWN_EXPS_SCALE, NU_REQ | NU_IF_MOE},
                                               {NU_T_LAYER_OUT_SCALE, NU_OPT},
                                               {NU_T_PL_GATE, NU_OPT},
                                               {NU_T_PL_PROJ, NU_OPT},
                                               {NU_T_PL_POST_NORM, NU_OPT},
                                               END};

static const nu_tensor_use olmo2_tensors[] = {
    {NU_T_ATTN_Q, NU_REQ},         {NU_T_ATTN_K, NU_REQ},           {NU_T_ATTN_V, NU_REQ},
    {NU_T_ATTN_OUT, NU_REQ},       {NU_T_ATTN_Q_NORM_FULL, NU_REQ}, {NU_T_ATTN_K_NORM_FULL, NU_REQ},
    {NU_T_ATTN_POST_NORM, NU_REQ}, {NU_T_FFN_GATE, NU_REQ},         {NU_T_FFN_UP, NU_REQ},
    {NU_T_FFN_DOWN, NU_REQ},       {NU_T_FFN_POST_NORM, NU_REQ},    END};

/* Qwen 3.5: every layer normed before its mixer and before its FFN (the
 * latter's weight named post_attention_norm); the mixer is a Gated DeltaNet
 * or gated full attention (arch_hparams.c says which layers). */
#define QWEN35_MIXERS                                                                              \
    {NU_T_ATTN_NORM, NU_REQ}, {NU_T_SSM_QKV, NU_REQ | NU_IF_RECURRENT},                            \
        {NU_T_SSM_Z, NU_REQ | NU_IF_RECURRENT}, {NU_T_SSM_BETA, NU_REQ | NU_IF_RECURRENT},         \
        {NU_T_SSM_ALPHA, NU_REQ | NU_IF_RECURRENT}, {NU_T_SSM_CONV, NU_REQ | NU_IF_RECURRENT},     \
        {NU_T_SSM_DT, NU_REQ | NU_IF_RECURRENT}, {NU_T_SSM_A, NU_REQ | NU_IF_RECURRENT},           \
        {NU_T_SSM_NORM, NU_REQ | NU_IF_RECURRENT}, {NU_T_SSM_OUT, NU_REQ | NU_IF_RECURRENT},       \
        {NU_T_ATTN_Q_GATED, NU_REQ | NU_IF_ATTENTION}, {NU_T_ATTN_K, NU_REQ | NU_IF_ATTENTION},    \
        {NU_T_ATTN_V, NU_REQ | NU_IF_ATTENTION}, {NU_T_ATTN_OUT, NU_REQ | NU_IF_ATTENTION},        \
        {NU_T_ATTN_Q_NORM, NU_REQ | NU_IF_ATTENTION},                                              \
        {NU_T_ATTN_K_NORM, NU_REQ | NU_IF_ATTENTION}, {                                            \
        NU_T_FFN_NORM_POST_NAME, NU_REQ                                                            \
    }

static const nu_tensor_use qwen35_tensors[] = {
    QWEN35_MIXERS, {NU_T_FFN_GATE, NU_REQ}, {NU_T_FFN_UP, NU_REQ}, {NU_T_FFN_DOWN, NU_REQ}, END};

static const nu_tensor_use qwen35moe_tensors[] = {QWEN35_MIXERS,
                                                  {NU_T_FFN_ROUTER, NU_REQ},
                                                  {NU_T_FFN_GATE_EXPS, NU_REQ},
                                                  {NU_T_FFN_UP_EXPS, NU_REQ},
                                                  {NU_T_FFN_DOWN_EXPS, NU_REQ},
                                                  {NU_T_FFN_SHEXP_ROUTER, NU_REQ},
                                                  {NU_T_FFN_GATE_SHEXP, NU_REQ},
                                                  {NU_T_FFN_UP_SHEXP, NU_REQ},
                                                  {NU_T_FFN_DOWN_SHEXP, NU_REQ},
                                                  END};

static const nu_arch archs[] = {
    {.name = "llama", .manifest = llama_tensors, .rope = NU_ROPE_PAIRS},
    {.name = "mistral", .manifest = llama_tensors, .rope = NU_ROPE_PAIRS},
    {.name = "qwen2", .manifest = qwen2_tensors, .rope = NU_ROPE_HALVES},
    {.name = "qwen3", .manifest = qwen3_tensors, .rope = NU_ROPE_HALVES},
    {.name = "qwen3moe", .manifest = qwen3_tensors, .rope = NU_ROPE_HALVES},
    /* Phi-3 files carry attention.sliding_window, which is not applied:
     * converted files give a window the reference runs do not use (llama.cpp,
     * whose outputs nucleus is checked against, ignores it the same way). */
    {.name = "phi3", .manifest = phi3_tensors, .rope = NU_ROPE_HALVES, .prescale_q = true},
    {.name = "gpt2",
     .manifest = gpt2_tensors,
     .norm = NU_NORM_LAYER,
     .rope = NU_ROPE_NONE,
     .act = NU_ACT_GELU_TANH,
     .learned_positions = true,
     .output_norm_bias = true},
    {.name = "gemma",
     .manifest = gemma_tensors,
     .rope = NU_ROPE_HALVES,
     .act = NU_ACT_GELU_TANH,
     .embd_scale_sqrt = true,
     .prescale_q = true},
    {.name = "gemma2",
     .manifest = gemma2_tensors,
     .rope = NU_ROPE_HALVES,
     .act = NU_ACT_GELU_TANH,
     .embd_scale_sqrt = true,
     .prescale_q = true,
     .hparams = nu_arch_gemma2_hparams},
    {.name = "gemma3",
     .manifest = gemma3_tensors,
     .rope = NU_ROPE_HALVES,
     .act = NU_ACT_GELU_TANH,
     .embd_scale_sqrt = true,
     .prescale_q = true,
     .hparams = nu_arch_gemma3_hparams},
    {.name = "starcoder2",
     .manifest = starcoder2_tensors,
     .norm = NU_NORM_LAYER,
     .rope = NU_ROPE_HALVES,
     .act = NU_ACT_GELU_TANH,
     .output_norm_bias = true},
    {.name = "gemma4",
     .manifest = gemma4_tensors,
     .rope = NU_ROPE_HALVES,
     .act = NU_ACT_GELU_TANH,
     .embd_scale_sqrt = true,
     .v_norm = true,
     .hparams = nu_arch_gemma4_hparams},
    {.name = "gpt-oss",
     .manifest = gpt_oss_tensors,
     .rope = NU_ROPE_HALVES,
     .act = NU_ACT_SWIGLU_CLAMPED,
     .router = NU_ROUTER_TOPK_SOFTMAX,
     .hparams = nu_arch_gpt_oss_hparams},
    {.name = "smollm3",
     .manifest = llama_tensors,
     .rope = NU_ROPE_PAIRS,
     .hparams = nu_arch_smollm3_hparams},
    {.name = "olmo2", .manifest = olmo2_tensors, .rope = NU_ROPE_HALVES},
    {.name = "qwen35",
     .manifest = qwen35_tensors,
     .rope = NU_ROPE_HALVES,
     .q_gate = true,
     .hparams = nu_arch_qwen35_hparams},
    {.name = "qwen35moe",
     .manifest = qwen35moe_tensors,
     .rope = NU_ROPE_HALVES,
     .q_gate = true,
     .hparams = nu_arch_qwen35_hparams},
    {.name = "stablelm",
     .manifest = stablelm_tensors,
     .norm = NU_NORM_LAYER,
     .qk_norm = NU_NORM_LAYER,
     .rope = NU_ROPE_HALVES,
     .parallel_ffn = true,
     .output_norm_bias = true},
};

const nu_arch *nu_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
        if (strcmp(archs[i].name, name) == 0) return &archs[i];
    return NULL;
}

size_t nu_arch_list(char *buf, size_t cap) {
    size_t len = 0;
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
        const char *sep = i ? ", " : "";
        int n = snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0, "%s%s", sep,
                         archs[i].name);
        if (n > 0) len += (size_t)n;
    }
    return len;
}
