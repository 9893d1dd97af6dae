/* gen_output.h - what one sample produces (internal): its text with stop
 * strings, its tokens and log-probs, streamed to the caller as it becomes
 * final. Used by the scheduler. */
#ifndef NU_GEN_OUTPUT_H
#define NU_GEN_OUTPUT_H

#include "nucleus.h"

typedef struct gen_output {
    nu_generate_result *res;
    const nu_generate_params *p;
    const nu_model *model;
    nu_detokenizer detok;
    nu_detokenizer echo_detok; /* the echoed prompt again, for its tokens' text offsets */
    size_t echo_offset;        /* where the next echoed prompt token's text starts */
    size_t text_cap, tokens_cap, logprobs_cap;
    size_t gen_start; /* where the generated text starts (after an echoed prompt) */
    size_t emitted;   /* bytes of text already given to the callback */
    size_t max_stop;  /* longest stop string */
    bool failed;      /* out of memory while growing a buffer */
} gen_output;

/* Starts an empty result for sample `index`. */
void nu_gen_output_init(gen_output *o, nu_generate_result *res, const nu_generate_params *p,
                        const nu_model *m, int32_t index);

/* The echoed prompt: its text, and log-probs when asked (logits[i] holds the
 * distribution after prompt token i, or NULL when not computed). */
void nu_gen_output_echo(gen_output *o, const int32_t *prompt, int32_t n);
void nu_gen_output_prompt_logprob(gen_output *o, int32_t token, const float *logits_before);

/* Records a sampled token: its log-prob from logits (and from the chain's
 * candidates when asked), then its text. Returns NU_FINISH_STOP when a stop
 * string completed, NU_FINISH_CANCELLED when the callback said stop, else
 * NU_FINISH_NONE. */
nu_finish_reason nu_gen_output_token(gen_output *o, int32_t token, const float *logits,
                                     const nu_candidates *after_chain);

/* Sends whatever is still held back (no stop string can complete now). */
void nu_gen_output_finish(gen_output *o, nu_finish_reason why);

/* log-softmax value of one token, and the n most likely tokens. */
float nu_logprob_of(const float *logits, int32_t n_vocab, int32_t token, double *log_z);
int32_t nu_top_logprobs(const float *logits, int32_t n_vocab, double log_z, int32_t n,
                        nu_top_logprob *out);

#endif
