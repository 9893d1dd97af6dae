/*
 * nucleus.h - the one public header of nucleus, a text-generation engine for
 * GGUF language models on the CPU.
 *
 * Conventions
 *   - Every object is an opaque handle with a nu_ prefix.
 *   - Functions that can fail return nu_status and, when the caller passes a
 *     nu_error, fill it with a one-line message that names the problem.
 *     The library never prints and never exits.
 *   - A nu_model is immutable once loaded: any number of nu_context objects,
 *     in any number of threads, may share it. Everything that changes while
 *     generating (KV cache, scratch buffers, sampler state, RNG) lives in a
 *     nu_context or a nu_sampler, which belong to one thread at a time.
 *   - Tokens are int32_t ids into the model's vocabulary.
 *   - Memory. Objects (nu_model, nu_context, ...) are released with their
 *     own nu_*_free. Every string or array the library hands over through an
 *     out-parameter (char **out, ...) belongs to the caller, who releases it
 *     with nu_free. A `const char *` return value belongs to the library and
 *     stays valid as its declaration says: "static" (for the life of the
 *     program) or until the object it came from is freed. The library keeps
 *     no per-thread buffers: a returned pointer is never overwritten by a
 *     later call.
 */
#ifndef NUCLEUS_H
#define NUCLEUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NU_VERSION_STRING "0.1.0"

/* Every function of the library is declared with NU_API: the shared library
 * exports these and nothing else (it is built with -fvisibility=hidden). */
#ifndef NU_API
#define NU_API __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum nu_status {
    NU_OK = 0,
    NU_ERR_IO,           /* a file could not be opened, read or mapped */
    NU_ERR_FORMAT,       /* a file or input is malformed */
    NU_ERR_UNSUPPORTED,  /* well-formed, but not something nucleus handles */
    NU_ERR_NOMEM,        /* an allocation failed */
    NU_ERR_INVALID_ARG,  /* a parameter is out of range or inconsistent */
    NU_ERR_CONTEXT_FULL, /* the KV cache has no room for the batch */
    NU_ERR_BUFFER_SMALL, /* an output buffer is too small; the size needed is reported */
    NU_ERR_NETWORK,      /* a download failed */
    NU_ERR_CHECKSUM,     /* downloaded data does not match its size or checksum */
    NU_ERR_CANCELLED,    /* a callback asked to stop */
} nu_status;

typedef struct nu_error {
    nu_status status;
    char message[512];
} nu_error;

/* A short constant name for a status ("format error", ...). */
NU_API const char *nu_status_name(nu_status status); /* static */

/* Releases a string or array the library handed over (see Memory above);
 * NULL is ignored. */
NU_API void nu_free(void *p);

/* ------------------------------------------------------------------------ */
/* Models                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct nu_model nu_model;

typedef enum nu_load_mode {
    NU_LOAD_FULL = 0,      /* metadata, tokenizer and weights */
    NU_LOAD_VOCAB_ONLY,    /* metadata and tokenizer (vocab-only GGUF files) */
    NU_LOAD_METADATA_ONLY, /* metadata and tensor table, any architecture */
} nu_load_mode;

typedef struct nu_model_params {
    nu_load_mode mode;
} nu_model_params;

/* Defaults: NU_LOAD_FULL. */
NU_API nu_model_params nu_model_default_params(void);

/* Memory-maps a GGUF file, validates it and prepares the model. */
NU_API nu_status nu_model_load(const char *path, const nu_model_params *params, nu_model **out,
                               nu_error *err);
NU_API void nu_model_free(nu_model *model);

/* Basic shape. Strings are valid until nu_model_free. */
NU_API const char *nu_model_arch(const nu_model *model); /* general.architecture */
NU_API const char *nu_model_name(const nu_model *model); /* general.name or "" */
NU_API int32_t nu_model_n_vocab(const nu_model *model);
NU_API int32_t nu_model_n_ctx_train(const nu_model *model);
NU_API int32_t nu_model_n_embd(const nu_model *model);
NU_API int32_t nu_model_n_layer(const nu_model *model);
NU_API uint32_t nu_model_gguf_version(const nu_model *model);

/* Metadata, in file order. Keys and type names are valid until
 * nu_model_free (NULL for i out of range). The value is rendered as text
 * into buf (arrays shortened to their first max_items items); returns the
 * length the full rendering needs, like snprintf. */
NU_API int64_t nu_model_meta_count(const nu_model *model);
NU_API const char *nu_model_meta_key(const nu_model *model, int64_t i);
NU_API const char *nu_model_meta_type(const nu_model *model,
                                      int64_t i); /* "u32", "arr[str,32000]", ... */
NU_API size_t nu_model_meta_value(const nu_model *model, int64_t i, char *buf, size_t cap,
                                  int max_items);

/* Tensors, in file order. */
typedef struct nu_tensor_info {
    const char *name;      /* valid until nu_model_free */
    const char *type_name; /* "f32", "q4_0", ...: static */
    uint32_t n_dims;
    int64_t ne[4]; /* ne[0] is the row length */
    uint64_t n_elements;
    uint64_t n_bytes;
    uint64_t file_offset; /* absolute offset of the data in the file */
} nu_tensor_info;

NU_API int64_t nu_model_tensor_count(const nu_model *model);
NU_API bool nu_model_tensor(const nu_model *model, int64_t i, nu_tensor_info *out);

/* How nucleus runs the model, as read from the file with its family's
 * defaults: one "name: value" line per hyperparameter (layers, heads, head
 * size, attention form and scale, sliding windows, norms, RoPE layout and
 * scaling, FFN form or experts, output). A model loaded without its weights
 * gives one line saying so. Written like snprintf: at most cap bytes with
 * the NUL; returns the full length. */
NU_API size_t nu_model_describe(const nu_model *model, char *buf, size_t cap);

/* Total parameters and bytes of tensor data. */
NU_API uint64_t nu_model_n_params(const nu_model *model);
NU_API uint64_t nu_model_weight_bytes(const nu_model *model);

/* What a context with these sizes will need, in bytes. */
typedef struct nu_memory_estimate {
    uint64_t weights;  /* mapped tensor data */
    uint64_t kv_cache; /* keys and values for n_ctx cells, and recurrent layers' states (every
                        * sequence's and the default checkpoints) */
    uint64_t scratch;  /* activations and logits for one batch */
    uint64_t total;
} nu_memory_estimate;

/* How keys and values are kept in the KV cache. The quantised types (the
 * GGUF block formats, 32 elements a block: 8.5 and 4.5 bits an element)
 * need head sizes that are multiples of 32; attention multiplies quantised
 * keys in integers with the query rounded to 8 bits per block, and reads
 * quantised values dequantised. NU_KV_SAME (only in kv_type_k / kv_type_v of
 * nu_context_params): as kv_type. */
typedef enum nu_kv_type {
    NU_KV_SAME = -1,
    NU_KV_F32 = 0,
    NU_KV_F16 = 1,
    NU_KV_Q8_0 = 2,
    NU_KV_Q4_0 = 3,
} nu_kv_type;

/* The memory a context of these sizes would take, with keys and values in
 * kv_type_k and kv_type_v (NU_KV_SAME is not accepted here). Types the
 * model's heads cannot take (a quantised cache needs heads of a multiple of
 * 32 values) get NU_ERR_UNSUPPORTED, as nu_context_new gives them. */
NU_API nu_status nu_model_memory(const nu_model *model, int32_t n_ctx, int32_t n_batch,
                                 int32_t n_seq, nu_kv_type kv_type_k, nu_kv_type kv_type_v,
                                 nu_memory_estimate *out, nu_error *err);

/* Writes the model at in_path to out_path with its weight matrices in
 * another type: "f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1" or
 * "q4_0" (with 4- and 5-bit types the output projection gets q8_0); "q6_k",
 * "q5_k", "q4_k", "q3_k" (output projection q6_k); or one of llama.cpp's
 * K-quant mixes "q5_k_m", "q5_k_s", "q4_k_m", "q4_k_s", "q3_k_l", "q3_k_m",
 * "q3_k_s", "q2_k", or "iq4_xs", "iq4_nl" (output q6_k; attn_v q5_k when
 * four or more heads share a key/value head; ffn_down q5_k in the first
 * eighth of the layers without an importance matrix; attn_output q5_k in
 * 8-expert models) (the same tensor types as llama.cpp's quantize tool).
 * Metadata is copied (general.file_type updated); vectors stay F32. */
NU_API nu_status nu_quantize_file(const char *in_path, const char *out_path, const char *type,
                                  nu_error *err);

/* Options of nu_quantize_file_with. */
typedef struct nu_quantize_params {
    /* Every weight matrix in the type itself, as llama-quantize --pure: no
     * mix, no q8_0 / q6_k output projection, no fallback (a matrix whose
     * rows are not whole blocks of the type is an error). A mix name means
     * its base type ("q4_k_m": q4_k). */
    bool pure;
    /* An importance matrix file as llama.cpp's quantize tool takes it
     * (`--imatrix`: llama-imatrix's GGUF or its legacy .dat), or NULL. Its
     * per-column mean squares of the activations weigh each matrix's
     * rounding error where the encoder can use them (iq4_nl, iq4_xs and the
     * K types q2_k..q6_k; not the 32-element q4_0..q8_0 blocks); with
     * one, iq4_nl / iq4_xs keep ffn_down in their type in the first eighth
     * of the layers (as llama.cpp does). */
    const char *imatrix;
    /* If not NULL, receives the number of matrices written in another type
     * than TYPE gave them because their rows are not whole blocks of it: a
     * 256-element type falls back to a 32-element one (iq4_xs: iq4_nl; q2_k,
     * q3_k: q4_0; q4_k: q5_0; q5_k: q5_1; q6_k: q8_0), a row that is not
     * whole 32-element blocks to f16. */
    int64_t *n_fallback;
    /* With an importance matrix: if not NULL, receive the number of matrices
     * whose rounding it weighed, and the number in a type that would weigh by
     * it (iq4_nl, iq4_xs, K types) that it has no entry for (unweighted, as
     * llama-quantize does). Other types' encoders do not use it. A matrix with
     * an entry for none of the matrices it would weigh is an error. */
    int64_t *n_weighted;
    int64_t *n_unweighted;
} nu_quantize_params;

NU_API nu_quantize_params nu_quantize_default_params(void);

/* nu_quantize_file with options (params NULL: the defaults). */
NU_API nu_status nu_quantize_file_with(const char *in_path, const char *out_path, const char *type,
                                       const nu_quantize_params *params, nu_error *err);

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                */
/* ------------------------------------------------------------------------ */

enum {
    NU_TOKENIZE_ADD_BOS = 1 << 0,       /* add the BOS token if the model asks for one */
    NU_TOKENIZE_PARSE_SPECIAL = 1 << 1, /* special-token text becomes its id */
};

typedef enum nu_token_type {
    NU_TOKEN_UNDEFINED = 0,
    NU_TOKEN_NORMAL = 1,
    NU_TOKEN_UNKNOWN = 2,
    NU_TOKEN_CONTROL = 3,
    NU_TOKEN_USER_DEFINED = 4,
    NU_TOKEN_UNUSED = 5,
    NU_TOKEN_BYTE = 6,
} nu_token_type;

/* Splits text into tokens. Writes at most cap ids to tokens and the number
 * the text needs to *n_tokens; returns NU_ERR_BUFFER_SMALL when cap is too
 * small (nothing else is wrong: call again with a larger buffer). */
NU_API nu_status nu_tokenize(const nu_model *model, const char *text, size_t len, unsigned flags,
                             int32_t *tokens, size_t cap, size_t *n_tokens, nu_error *err);

/* The vocabulary text of a token, as stored ("▁the", "<0x0A>", "<s>"); valid
 * until nu_model_free. */
NU_API const char *nu_token_text(const nu_model *model, int32_t token);
NU_API nu_token_type nu_token_get_type(const nu_model *model, int32_t token);

/* The bytes a token stands for when text is produced. Control tokens give
 * nothing unless special is true. Returns the byte count; writes at most cap. */
NU_API size_t nu_token_to_bytes(const nu_model *model, int32_t token, bool special, char *buf,
                                size_t cap);

NU_API int32_t nu_token_bos(const nu_model *model); /* -1 when the model has none */
NU_API int32_t nu_token_eos(const nu_model *model);
NU_API bool nu_token_is_eog(const nu_model *model, int32_t token); /* ends generation */
NU_API bool nu_model_adds_bos(const nu_model *model);
/* A note about the model's tokenizer worth showing the user, or NULL when
 * there is none: e.g. an unknown tokenizer.ggml.pre, whose text is then split
 * as GPT-2 splits it, so tokens may differ from the model's own tokenizer.
 * Valid until nu_model_free. */
NU_API const char *nu_model_warning(const nu_model *model);

/* Incremental detokenizer for streaming: bytes come out only as whole UTF-8
 * characters, so a character split over several tokens is never emitted
 * half-way. The leading space the tokenizer added is removed from the first
 * piece when strip_leading_space is set. */
typedef struct nu_detokenizer {
    const nu_model *model;
    bool special;             /* render control tokens */
    bool strip_leading_space; /* drop one leading space of the first text piece */
    bool started;
    unsigned char pending[8]; /* bytes of an unfinished UTF-8 character */
    size_t n_pending;
} nu_detokenizer;

NU_API void nu_detokenizer_init(nu_detokenizer *d, const nu_model *model, bool special,
                                bool strip_leading_space);
/* Appends the text of token; returns how many bytes are ready in out (at most
 * cap; 16 + the longest token is always enough). */
NU_API size_t nu_detokenizer_push(nu_detokenizer *d, int32_t token, char *out, size_t cap);
/* Whatever is still pending (an incomplete character, replaced by U+FFFD). */
NU_API size_t nu_detokenizer_flush(nu_detokenizer *d, char *out, size_t cap);

/* ------------------------------------------------------------------------ */
/* Contexts and the batched forward pass                                    */
/* ------------------------------------------------------------------------ */

typedef struct nu_context nu_context;

typedef struct nu_context_params {
    int32_t n_ctx;     /* KV cache cells shared by all sequences (0: the model's training length) */
    int32_t n_batch;   /* most entries one nu_decode call may take */
    int32_t n_seq_max; /* sequences that may live in the cache at once (1..64) */
    int32_t n_threads; /* worker threads for the forward pass (0: all cores) */
    nu_kv_type kv_type;          /* keys and values, unless kv_type_k / kv_type_v say */
    nu_kv_type kv_type_k;        /* the keys' type; NU_KV_SAME: kv_type */
    nu_kv_type kv_type_v;        /* the values' type; NU_KV_SAME: kv_type */
    bool embeddings;             /* entries asking for logits get their final hidden state
                                  * (nu_embedding) instead, and no logits (the LM head is
                                  * skipped): a context for nu_embed */
    int32_t n_state_checkpoints; /* models with recurrent layers (Qwen 3.5): states kept
                                  * besides each sequence's current one, so that removing
                                  * positions (speculative decoding, prefix reuse) goes back
                                  * to one instead of reading the positions again (0: default
                                  * n_seq_max + 8; at least n_seq_max, at most 4096) */
} nu_context_params;

/* Defaults: n_ctx 0 capped at 4096, n_batch 512, n_seq_max 1, n_threads 0, f16 cache
 * (half the memory of f32; attention then multiplies in half precision; kv_type_k and
 * kv_type_v NU_KV_SAME),
 * n_state_checkpoints 0 (n_seq_max + 8). */
NU_API nu_context_params nu_context_default_params(void);

NU_API nu_status nu_context_new(const nu_model *model, const nu_context_params *params,
                                nu_context **out, nu_error *err);
NU_API void nu_context_free(nu_context *ctx);
NU_API const nu_model *nu_context_model(const nu_context *ctx);
NU_API int32_t nu_context_n_ctx(const nu_context *ctx);
NU_API int32_t nu_context_n_batch(const nu_context *ctx);
NU_API int32_t nu_context_n_seq_max(const nu_context *ctx);
NU_API int32_t nu_context_n_threads(const nu_context *ctx);

/* For benchmarks: reads every weight byte a generation step streams (each
 * matrix as the kernels store it; of the token embeddings only what a step
 * reads, one row, unless they are also the output matrix) with the context's
 * threads, as plain loads with nothing else to do, and returns the
 * milliseconds it took; *bytes (if not NULL) gets the count. bytes / time
 * is the memory-bandwidth ceiling of generation on this machine, measured
 * right where the step runs. */
NU_API double nu_context_read_weights(nu_context *ctx, uint64_t *bytes);

/* One entry of a batch: a token at a position in a sequence. */
typedef struct nu_batch_entry {
    int32_t token;
    int32_t pos;
    int32_t seq;
    bool logits; /* compute the next-token logits after this entry */
} nu_batch_entry;

/* Runs the model over the batch: appends every entry's keys and values to
 * the cache of its sequence and computes logits for the entries that ask.
 * An entry attends to its own sequence's cached positions <= its position.
 * The result for an entry does not depend on the thread count or on what
 * else is in the batch. On error the cache is left as it was. */
NU_API nu_status nu_decode(nu_context *ctx, const nu_batch_entry *entries, int32_t n,
                           nu_error *err);

/* Logits (n_vocab floats) of the i-th entry of the last nu_decode, or NULL
 * if that entry did not ask for them. Valid until the next nu_decode. */
NU_API const float *nu_logits(const nu_context *ctx, int32_t i);

/* With params.embeddings: the final hidden state (after the output norm,
 * n_embd floats) of entry i of the last nu_decode, or NULL when that entry
 * did not ask for it or the context does not make embeddings. Valid until
 * the next nu_decode. */
NU_API const float *nu_embedding(const nu_context *ctx, int32_t i);

/* How nu_embed pools a text's hidden states into one vector. */
typedef enum nu_pooling {
    NU_POOLING_MODEL = 0, /* the file's <arch>.pooling_type, else mean */
    NU_POOLING_MEAN,      /* the mean over the tokens */
    NU_POOLING_LAST,      /* the last token's (decoder embedding models: Qwen3-Embedding) */
    NU_POOLING_FIRST,     /* the first token's (CLS) */
} nu_pooling;

/* The embedding of a sequence of tokens: their hidden states pooled, then
 * scaled to unit length when normalize is set. ctx must have been made with
 * params.embeddings; the tokens are read in one sequence (0) from an empty
 * cache, in chunks of n_batch, and at most n_ctx of them. Writes n_embd
 * floats to out. Errors: NU_ERR_INVALID_ARG (no tokens, too many, a token
 * out of the vocabulary, a context without embeddings). */
NU_API nu_status nu_embed(nu_context *ctx, const int32_t *tokens, int32_t n_tokens,
                          nu_pooling pooling, bool normalize, float *out, nu_error *err);

/* KV cache per sequence. Positions are [p0, p1); p1 < 0 means "to the end".
 * With recurrent layers (Qwen 3.5) a sequence's state depends on every
 * position before, so removing a range removes everything from p0 on, and a
 * sequence's positions are read in order: each batch continues it at
 * nu_kv_seq_pos_max + 1. Removing positions returns to a kept state
 * (n_state_checkpoints) where there is one, and otherwise the next
 * nu_decode of the sequence reads the kept tokens again from the nearest
 * earlier one, before its batch (same results, more time). */
NU_API void nu_kv_clear(nu_context *ctx);
NU_API void nu_kv_seq_remove(nu_context *ctx, int32_t seq, int32_t p0, int32_t p1);
/* dst shares src's cells in [p0, p1) without copying them. */
NU_API void nu_kv_seq_copy(nu_context *ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1);
/* The largest position cached for seq, or -1. */
NU_API int32_t nu_kv_seq_pos_max(const nu_context *ctx, int32_t seq);
/* The last position a sequence's recurrent state has read (models with
 * recurrent layers), or -1: after nu_kv_seq_remove went back past the kept
 * states, the positions after it (up to nu_kv_seq_pos_max) are read again by
 * the sequence's next nu_decode. Without recurrent layers: nu_kv_seq_pos_max. */
NU_API int32_t nu_kv_seq_state_pos(const nu_context *ctx, int32_t seq);
/* Cells in use, and in all (n_ctx x n_seq_max unless the parameters said
 * otherwise). */
NU_API int32_t nu_kv_used(const nu_context *ctx);
NU_API int32_t nu_kv_n_cells(const nu_context *ctx);

/* ------------------------------------------------------------------------ */
/* Sampling                                                                 */
/* ------------------------------------------------------------------------ */

/* One candidate next token. */
typedef struct nu_candidate {
    int32_t id;
    float logit;
    float prob;
} nu_candidate;

/* The array the sampler chain works on. Stages may reorder, shrink, change
 * logits or probabilities, or select. A banned token stays in the array with
 * logit -INFINITY (probability 0) until a filtering stage drops it. */
typedef struct nu_candidates {
    nu_candidate *data;
    size_t size;
    bool sorted;      /* by logit, descending */
    int32_t selected; /* index into data of the chosen token, or -1 */
} nu_candidates;

/* The stages of the sampler chain. Each works on the array the previous one
 * left. "History" is the tokens given to nu_sampler_accept (the generated
 * ones), preceded by the prompt's (nu_sampler_accept_prompt) when
 * penalize_prompt is set.
 *   logit_bias        logit += bias for each (token, bias) of logit_bias;
 *                     a bias of -INFINITY bans the token.
 *   penalties         for each token that occurs c > 0 times in the penalty
 *                     window (the last penalty_last_n tokens of the history):
 *                     the repetition penalty of CTRL (Keskar et al. 2019),
 *                       logit > 0 ? logit / repeat_penalty : logit * repeat_penalty,
 *                     then OpenAI's frequency and presence penalties,
 *                       logit -= c * frequency_penalty + presence_penalty.
 *   no_repeat_ngram   bans every token that would complete an n-gram
 *                     (n = no_repeat_ngram_size) already in the history: if
 *                     the last n-1 tokens also occur followed by t, t is
 *                     banned (n = 1 bans every token of the history).
 *   repetition_guard  the CTRL penalty with the factor
 *                       1 + guard_strength * nu_sampler_repetition_severity()
 *                     on every token of the last guard_window generated
 *                     tokens: the more the recent output repeats itself, the
 *                     harder repeating is penalised. With penalties also on,
 *                     a token in both windows is penalised by
 *                     repeat_penalty * factor.
 *   dry               DRY, "Don't Repeat Yourself" (p-e-w; as llama.cpp
 *                     defines it): looks at the last dry_penalty_last_n
 *                     tokens of the history (all with -1). For each earlier
 *                     position where the text so far ends the same way as
 *                     the whole window does, over L >= dry_allowed_length
 *                     tokens, the token that followed there would extend
 *                     the repetition; its logit loses
 *                       dry_multiplier * dry_base^(L - dry_allowed_length)
 *                     (L the longest such match for that token; the
 *                     exponent is capped where the power would overflow a
 *                     float). A sequence breaker (a string, e.g. "\n"; see
 *                     nu_sampler_params) ends every match: no match reaches
 *                     back past the last breaker in the window, and a token
 *                     that is a breaker by itself is never penalised. Does
 *                     nothing until the window holds more than
 *                     dry_allowed_length tokens.
 *   top_n_sigma       top-nσ (Tang et al. 2024): with m the highest finite
 *                     logit and μ, σ the mean and standard deviation of the
 *                     finite logits, bans (logit -INFINITY) every token
 *                     whose logit is below m - top_n_sigma * σ.
 *   top_k             keeps the top_k highest logits.
 *   typical_p         locally typical sampling (Meister et al. 2023): with
 *                     p_i the softmax and H = -sum p_i ln p_i its entropy,
 *                     keeps tokens in ascending order of |-ln p_i - H| until
 *                     their probability adds up to >= typical_p.
 *   top_p             nucleus sampling (Holtzman et al. 2020): keeps the most
 *                     likely tokens until their probability adds up to >= top_p.
 *   min_p             keeps the tokens with p_i >= min_p * max_j p_j.
 *   xtc               "Exclude Top Choices" (p-e-w; as llama.cpp): with
 *                     probability xtc_probability (a draw from the seeded
 *                     RNG each time), when at least two tokens have
 *                     p_i >= xtc_threshold, removes all of them but the
 *                     least likely one. Off when xtc_probability is 0 or
 *                     xtc_threshold > 0.5 (no two tokens can pass it).
 *   temperature       logit /= temperature. With dynatemp_range r > 0, the
 *                     temperature follows the entropy H of the candidates'
 *                     softmax (dynamic temperature, as llama.cpp): over the
 *                     n candidates left (banned ones included),
 *                       T = t0 + (t1 - t0) * (H / ln n)^dynatemp_exponent,
 *                     t0 = max(0, temperature - r), t1 = temperature + r;
 *                     T = 0 keeps only the most likely token.
 * Filtering stages always keep at least one token. The bans (banned_strings,
 * banned_tokens) are, like the end-of-generation suppression, a constraint
 * applied before the chain, not a stage of the order. The watermark (see
 * nu_watermark_params) is not part of the order: when a key is set it runs
 * just before the first filtering stage or temperature of the order (after
 * the logit bias and penalties of the default order), or last if there is
 * none, and greedy decoding runs it too. */
typedef enum nu_stage_kind {
    NU_STAGE_TOP_K,
    NU_STAGE_TOP_P,
    NU_STAGE_MIN_P,
    NU_STAGE_TEMPERATURE,
    NU_STAGE_TYPICAL_P,
    NU_STAGE_LOGIT_BIAS,
    NU_STAGE_PENALTIES,
    NU_STAGE_NO_REPEAT_NGRAM,
    NU_STAGE_REPETITION_GUARD,
    NU_STAGE_DRY,
    NU_STAGE_TOP_N_SIGMA,
    NU_STAGE_XTC,
    NU_STAGE_COUNT_
} nu_stage_kind;

#define NU_MAX_STAGES 16

/* A sequence of token ids (a banned sequence, a DRY sequence breaker). */
typedef struct nu_token_seq {
    const int32_t *tokens;
    int32_t n; /* >= 1 */
} nu_token_seq;

/* The longest DRY sequence breaker, in bytes (llama.cpp's limit). */
#define NU_DRY_MAX_BREAKER_LEN 40

/* An additive bias on one token's logit. */
typedef struct nu_logit_bias {
    int32_t token;
    float bias; /* finite, or -INFINITY to ban the token */
} nu_logit_bias;

/* The green-list watermark of Kirchenbauer et al., "A Watermark for Large
 * Language Models" (ICML 2023). Before each token, a pseudo-random function
 * of a secret key and the previous `context` token ids (h) splits the
 * vocabulary: every token is green with probability gamma, independently of
 * the others, so the green list holds gamma * |V| tokens on average; delta is
 * added to the green tokens' logits (the soft watermark). Text generated so
 * holds more green tokens than the gamma * T that chance gives, which
 * nu_watermark_detect measures with the key and the tokenizer alone. Until
 * h tokens (prompt ones included) precede, nothing is added.
 *
 * The function, exactly, so that every implementation agrees. mix(x) is the
 * splitmix64 finalizer (x ^= x >> 30; x *= 0xBF58476D1CE4E5B9; x ^= x >> 27;
 * x *= 0x94D049BB133111EB; x ^= x >> 31), arithmetic modulo 2^64:
 *   K = mix(FNV-1a 64 of the key's bytes)   (offset 0xCBF29CE484222325,
 *                                             prime 0x100000001B3)
 *   s = K, then for each previous token p, oldest first: s = mix(s ^ (uint32_t)p)
 *   token t is green  <=>  mix(s + (t + 1) * 0x9E3779B97F4A7C15) < gamma * 2^64
 * It depends on nothing else: not on threads, batch or machine. It is not a
 * cryptographic function: the key hides the lists from casual readers, not
 * from someone who studies many watermarked texts. */
#define NU_WATERMARK_MAX_CONTEXT 8

typedef struct nu_watermark_params {
    const char *key; /* NULL: no watermark; else non-empty text (read when a sampler is made) */
    float gamma;     /* 0.25; the green share of the vocabulary, 0 < gamma < 1 */
    float delta;     /* 2; added to green logits, 0..100 */
    int32_t context; /* 1; previous tokens that choose the list (h), 1..NU_WATERMARK_MAX_CONTEXT */
} nu_watermark_params;

/* Everything the sampler does, with defaults (nu_sampler_default_params)
 * close to llama.cpp's. Every stage has a value that turns it off. */
typedef struct nu_sampler_params {
    float temperature; /* 0.8; 0 is greedy; 0..100 */
    int32_t top_k;     /* 40; 0 is off */
    float top_p;       /* 0.95; 1 is off; 0 < top_p <= 1 */
    float min_p;       /* 0.05; 0 is off; 0..1 */
    float typical_p;   /* 1 (off); 0 < typical_p <= 1 */
    /* Repetition. repeat_penalty > 1 discourages repeating, < 1 encourages
     * it. penalty_last_n is the penalty window: 0 turns the penalties off,
     * -1 is the whole history. */
    float repeat_penalty;         /* 1 (off); 0 < repeat_penalty <= 100 */
    float frequency_penalty;      /* 0 (off); -2..2 */
    float presence_penalty;       /* 0 (off); -2..2 */
    int32_t penalty_last_n;       /* 64; >= -1 */
    bool penalize_prompt;         /* false; the prompt counts as history (penalties, n-gram ban) */
    int32_t no_repeat_ngram_size; /* 0 (off) */
    float guard_strength;         /* 0 (off); 0..10; 1 is a good start */
    int32_t guard_window;         /* 64; generated tokens the guard looks at; 2..512 */
    /* DRY (stage dry). Sequence breakers are strings, found in the
     * vocabulary as llama.cpp finds them (each token whose text contains
     * one is a breaker by itself; a token whose text ends with the start of
     * one, followed by the tokens of the rest (at most 20), is one too); they need
     * nu_sampler_new_for_model, or nu_sampler_set_dry_breakers with token
     * sequences. Each is 1..NU_DRY_MAX_BREAKER_LEN bytes; copied when the
     * sampler is made. */
    float dry_multiplier;                     /* 0 (off); 0..100 */
    float dry_base;                           /* 1.75; 1..100 */
    int32_t dry_allowed_length;               /* 2; 0..2^30 */
    int32_t dry_penalty_last_n;               /* 64; 0 is off, -1 the whole history */
    const char *const *dry_sequence_breakers; /* "\n", ":", "\"", "*" */
    int32_t n_dry_sequence_breakers;
    /* XTC (stage xtc) and top-nσ (stage top_n_sigma). */
    float xtc_probability; /* 0 (off); 0..1 */
    float xtc_threshold;   /* 0.1; 0..1 (above 0.5 it never acts) */
    float top_n_sigma;     /* -1 (off; any value <= 0 is off); -1..100 */
    /* Dynamic temperature (stage temperature): the temperature moves within
     * [max(0, temperature - dynatemp_range), temperature + dynatemp_range]
     * with the entropy. With a range, temperature 0 is not greedy. */
    float dynatemp_range;    /* 0 (off); 0..100 */
    float dynatemp_exponent; /* 1; 0..100 */
    /* Mirostat (Basu et al. 2021), as llama.cpp: 1 or 2 replaces the draw.
     * The filtering stages (top_k, typical_p, top_p, min_p, top_n_sigma, xtc)
     * and the dynamic temperature are skipped; the logit-shaping stages (off
     * by default; llama.cpp's mirostat chain has only the logit bias) and the
     * plain temperature run, then
     *   v1: with s the Zipf exponent estimated from the 100 most likely
     *       tokens (least squares on ln(p_i / p_i+1) against ln((i+2)/(i+1)))
     *       and N the vocabulary size, keeps the top
     *         k = ((s - 1) 2^mu / (1 - N^(1-s)))^(1/s)
     *       tokens (at least one);
     *   v2: keeps the most likely tokens while their surprise -log2 p <= mu
     *       (at least one);
     * draws from what is left, and when the token is accepted
     * (nu_sampler_accept), mu -= mirostat_eta * (surprise - mirostat_tau),
     * the surprise -log2 p of the token in the distribution it was drawn
     * from. mu starts at 2 * tau (again after nu_sampler_reset). */
    int32_t mirostat;   /* 0 (off), 1 or 2 */
    float mirostat_tau; /* 5; target surprise in bits; 0..100 */
    float mirostat_eta; /* 0.1; learning rate; 0..1 */
    /* Bans: the generated text never contains one of banned_strings
     * (non-empty byte strings, matched exactly; they need
     * nu_sampler_new_for_model), and the generated tokens never contain one
     * of banned_tokens. Before each token, every candidate that would
     * complete one gets logit -INFINITY: a token whose text (as
     * nu_token_to_bytes gives it, control tokens giving nothing) would make
     * the text generated so far contain a banned string, and the last token
     * of a banned sequence whose other tokens end the generated tokens.
     * Only generated tokens count, not the prompt. Both lists are copied
     * when the sampler is made. */
    const char *const *banned_strings;
    int32_t n_banned_strings;
    const nu_token_seq *banned_tokens;
    int32_t n_banned_tokens;
    /* End of generation: the end-of-generation tokens (nu_sampler_new_for_model
     * or nu_sampler_set_eog) get logit -INFINITY before the chain while fewer
     * than min_tokens tokens were accepted, or always with ignore_eos. This
     * is a constraint, not a shaping step: it is not part of the order. */
    int32_t min_tokens; /* 0 */
    bool ignore_eos;    /* false */
    /* Additive logit biases; nu_sampler_new copies them (a token may appear
     * more than once: the biases add up). */
    const nu_logit_bias *logit_bias;
    int32_t n_logit_bias;
    uint64_t seed;                 /* 0xC0FFEE */
    nu_watermark_params watermark; /* off (key NULL); nu_watermark_default_params otherwise */
    /* Order in which the stages run; a stage left out does not run and none
     * may appear twice. n_stages 0 means the default (the "default" preset of
     * nu_sampler_order_parse): logit_bias, penalties, dry, no_repeat_ngram,
     * repetition_guard, top_n_sigma, top_k, typical_p, top_p, min_p, xtc,
     * temperature.
     * After the chain comes a seeded draw from the softmax of what is left
     * (or mirostat's). With temperature 0 and no dynatemp_range (greedy) the
     * filtering stages and temperature are
     * skipped and the highest remaining logit is taken (lowest id among
     * equals): greedy is the argmax of the biased and penalised logits. If
     * the stages leave no token with a finite logit, the argmax of the raw
     * logits is returned. */
    nu_stage_kind order[NU_MAX_STAGES];
    int32_t n_stages;
} nu_sampler_params;

NU_API nu_sampler_params nu_sampler_default_params(void);

/* Checks every field; out-of-range values are refused (never clamped) with
 * NU_ERR_INVALID_ARG and a message naming the field. Logit-bias tokens are
 * checked against the vocabulary by nu_sampler_new. */
NU_API nu_status nu_sampler_params_check(const nu_sampler_params *params, nu_error *err);

/* The name of a stage ("top_k", "typical_p", "logit_bias", ...), or NULL for
 * a value that is not a stage. Static. */
NU_API const char *nu_stage_name(nu_stage_kind kind);

/* Parses an order: stage names separated by commas (e.g. "penalties,top_k,
 * typical_p,top_p,min_p,temperature"; '-' may stand for '_', blanks around
 * names are ignored) or a preset:
 *   "default"     logit_bias,penalties,dry,no_repeat_ngram,repetition_guard,
 *                 top_n_sigma,top_k,typical_p,top_p,min_p,xtc,temperature
 *                 (llama.cpp's order)
 *   "temp_first"  logit_bias,penalties,dry,no_repeat_ngram,repetition_guard,
 *                 temperature,top_n_sigma,top_k,top_p,min_p,typical_p,xtc
 *                 (the temperature -> top-k -> top-p pipeline of Hugging
 *                 Face transformers)
 * Writes the stages to order (room for NU_MAX_STAGES) and their count to *n.
 * Unknown or repeated names are NU_ERR_INVALID_ARG. */
NU_API nu_status nu_sampler_order_parse(const char *text, nu_stage_kind *order, int32_t *n,
                                        nu_error *err);

/* Writes an order as comma-separated names (n 0: the default order). Returns
 * the length the whole text needs, like snprintf. */
NU_API size_t nu_sampler_order_string(const nu_stage_kind *order, int32_t n, char *buf, size_t cap);

typedef struct nu_sampler nu_sampler;

/* A sampler over a vocabulary of n_vocab tokens. Its buffers are sized
 * here: sampling a token allocates nothing (only the history grows, by
 * doubling, while it fills). It knows no end-of-generation tokens (see
 * nu_sampler_set_eog). */
NU_API nu_status nu_sampler_new(const nu_sampler_params *params, int32_t n_vocab, nu_sampler **out,
                                nu_error *err);
/* A sampler for a model's vocabulary that knows its end-of-generation tokens
 * (for min_tokens and ignore_eos). */
NU_API nu_status nu_sampler_new_for_model(const nu_sampler_params *params, const nu_model *model,
                                          nu_sampler **out, nu_error *err);
NU_API void nu_sampler_free(nu_sampler *s);
/* Sets the end-of-generation tokens (a copy is kept). */
NU_API nu_status nu_sampler_set_eog(nu_sampler *s, const int32_t *tokens, int32_t n, nu_error *err);
/* Replaces DRY's sequence breakers with token sequences (copied): a match
 * of seqs[i] in the window ends repetitions as a breaker string would; a
 * one-token sequence also makes that token exempt from the penalty. For
 * samplers without a model (make them with n_dry_sequence_breakers 0). */
NU_API nu_status nu_sampler_set_dry_breakers(nu_sampler *s, const nu_token_seq *seqs, int32_t n,
                                             nu_error *err);

/* Picks the next token from raw logits (n_vocab floats). Same seed, settings,
 * history and logits give the same token. */
NU_API int32_t nu_sampler_sample(nu_sampler *s, const float *logits);
typedef struct nu_grammar nu_grammar; /* see "Constrained generation" */

/* Constrains the tokens to a grammar (NULL: none). The sampler keeps its own
 * matching state, advanced by nu_sampler_accept; budget >= 0 also makes the
 * grammar finish within that many tokens (nu_grammar_state_set_budget). */
NU_API nu_status nu_sampler_set_grammar(nu_sampler *s, const nu_grammar *g, int32_t budget,
                                        nu_error *err);
/* The grammar allows nothing but the end. */
NU_API bool nu_sampler_grammar_must_end(const nu_sampler *s);

/* A thinking budget for reasoning models, which write their thinking
 * between markers (Qwen3 and DeepSeek-R1: <think> ... </think>) before the
 * answer. A thinking block opens when the tokens accepted (the prompt's
 * included: a prompt that ends with `open` starts inside one) end with the
 * token sequence `open`, and closes when they end with `close`. After
 * max_tokens tokens inside a block, the sampler forces the sequence `force`
 * (e.g. the tokens of "\n</think>\n\n"), one token per sample: every other
 * token gets logit -INFINITY before the chain, so greedy, sampling and
 * speculative verification all take it; the block is closed once the last
 * forced token is accepted. Markers are matched as the token sequences
 * given: a model that spells a marker with other tokens is not seen (real
 * reasoning models have their markers as single tokens). A grammar must
 * allow the forced tokens. */
typedef struct nu_think_budget {
    const int32_t *open; /* 1..8 tokens; NULL (n_open 0): no budget, the rest is ignored */
    int32_t n_open;
    const int32_t *close; /* 1..8 tokens */
    int32_t n_close;
    const int32_t *force; /* 1..16 tokens */
    int32_t n_force;
    int32_t max_tokens; /* >= 0 */
    /* Generation starts inside a block, whatever the prompt's tokens show
     * (for a caller that knows it from the prompt's text, when the marker
     * merged with what follows it into other tokens). */
    bool start_inside;
} nu_think_budget;

#define NU_THINK_MAX_MARKER 8 /* tokens of open and close */
#define NU_THINK_MAX_FORCE 16 /* tokens of force */

/* Checks the lengths and max_tokens (and that token ids are below n_vocab,
 * when n_vocab > 0). A zeroed struct (no budget) is valid. */
NU_API nu_status nu_think_budget_check(const nu_think_budget *b, int32_t n_vocab, nu_error *err);
/* Sets the sampler's thinking budget (copied; NULL or n_open 0: none).
 * Call it before nu_sampler_accept_prompt: the prompt decides whether
 * generation starts inside a block. */
NU_API nu_status nu_sampler_set_think_budget(nu_sampler *s, const nu_think_budget *b,
                                             nu_error *err);
/* The distribution the next token would be drawn from (the chain run on
 * the logits, probabilities normalised; greedy gives a point mass on the
 * argmax), without drawing; speculative decoding compares these. Valid until
 * the next call on s. */
NU_API const nu_candidates *nu_sampler_distribution(nu_sampler *s, const float *logits);
/* Tells the sampler a token was generated (history, min_tokens). */
NU_API void nu_sampler_accept(nu_sampler *s, int32_t token);
/* Tells the sampler the prompt's tokens, after nu_sampler_new or
 * nu_sampler_reset and before the first sample. They become history only
 * when penalize_prompt is set. */
NU_API void nu_sampler_accept_prompt(nu_sampler *s, const int32_t *tokens, int32_t n);
/* Forgets the history and the count of generated tokens (the RNG goes on). */
NU_API void nu_sampler_reset(nu_sampler *s);
/* Restarts the RNG from a seed. */
NU_API void nu_sampler_reseed(nu_sampler *s, uint64_t seed);

/* How much the recent output repeats itself, in [0, 1): over the last
 * n = min(guard_window, generated) generated tokens (0 when n < 2),
 *   r_tokens  = 1 - (distinct tokens) / n
 *   r_bigrams = 1 - (distinct bigrams) / (n - 1)
 *   r_span    = L / n, L the length of the longest suffix of the window that
 *               also occurs, ending earlier, in the window (overlap allowed)
 *   severity  = (r_tokens + r_bigrams + r_span) / 3
 * E.g. the window "a b c a b c a b" gives (5/8 + 4/7 + 5/8) / 3 = 0.607; a
 * window of distinct tokens gives 0; stories260K's sampled stories measure
 * about 0.1. The cost is O(guard_window^2). */
NU_API float nu_sampler_repetition_severity(const nu_sampler *s);

/* The candidates the chain left at the last nu_sampler_sample, probabilities
 * softmax-normalised over them, selected the chosen entry (-1 when the
 * raw-argmax fallback was taken): the distribution the token was drawn from,
 * for log-probs "after the chain". When greedy, the distribution after the
 * logit-shaping stages at temperature 1. NULL before the first sample; valid
 * until the next nu_sampler_sample. */
NU_API const nu_candidates *nu_sampler_last_candidates(const nu_sampler *s);

/* Called during nu_sampler_sample after each stage that runs, with the
 * whole candidate arrays before and after it (probabilities
 * softmax-normalised over each; array order, not necessarily sorted), valid
 * during the call only. stage is the stage's name; the suppression of
 * end-of-generation tokens is reported as "eog", the bans as "banned", the
 * watermark as "watermark", mirostat's truncation as "mirostat" or
 * "mirostat_v2", and the final choice as "greedy" or "dist", whose
 * after->selected is the chosen index. Observing does not change which
 * tokens are drawn. */
typedef void (*nu_stage_observer)(void *user, const char *stage, const nu_candidates *before,
                                  const nu_candidates *after);
/* Sets (fn NULL: removes) the observer; allocates its copy buffer once. */
NU_API nu_status nu_sampler_set_observer(nu_sampler *s, nu_stage_observer fn, void *user,
                                         nu_error *err);

/* The chain's stateless stages over a candidate array, for callers building
 * their own loop and for tests. Stages compute probabilities from the logits
 * as they need them; afterwards prob may be stale: call
 * nu_candidates_softmax to normalise it over what is left. */
NU_API void nu_candidates_softmax(nu_candidates *c);
NU_API void nu_stage_top_k(nu_candidates *c, int32_t k);
NU_API void nu_stage_top_p(nu_candidates *c, float p);
NU_API void nu_stage_min_p(nu_candidates *c, float p);
NU_API void nu_stage_typical_p(nu_candidates *c, float p);
NU_API void nu_stage_temperature(nu_candidates *c, float t);
/* Dynamic temperature (see the stage temperature): returns the temperature
 * it applied. */
NU_API float nu_stage_dynatemp(nu_candidates *c, float t, float range, float exponent);
NU_API void nu_stage_top_n_sigma(nu_candidates *c, float n);

/* A seeded random source (xoshiro256**), the one samplers use. */
typedef struct nu_rng {
    uint64_t s[4];
} nu_rng;
NU_API void nu_rng_seed(nu_rng *rng, uint64_t seed);
NU_API uint64_t nu_rng_next(nu_rng *rng);
NU_API double nu_rng_uniform(nu_rng *rng); /* [0, 1) with 53 random bits */
/* XTC (see the stage xtc); draws its chance from rng. */
NU_API void nu_stage_xtc(nu_candidates *c, float probability, float threshold, nu_rng *rng);

/* ------------------------------------------------------------------------ */
/* Constrained generation                                                   */
/* ------------------------------------------------------------------------ */

/* A grammar restricts generation to the texts it matches: a GBNF grammar (the
 * format llama.cpp uses), a JSON Schema, any JSON object, a regular
 * expression or a choice among fixed strings. Grammars work on bytes and
 * Unicode code points: a token may cover several grammar elements or end in
 * the middle of a multi-byte character.
 *
 * A nu_grammar is compiled once, bound to a model's vocabulary (a trie of the
 * tokens' bytes is built then), and is immutable: any number of states in
 * any number of threads may share it. A nu_grammar_state follows one
 * sequence; it owns scratch memory reused for every token, so the calls that
 * check tokens take a non-const state (one thread at a time per state).
 *
 * Sampling with a grammar, cheaply: draw a token as usual and check it with
 * nu_grammar_allows; only when it is refused, nu_grammar_mask the full
 * candidate array and draw again. With plain temperature sampling this gives
 * exactly the masked distribution p(t) / P(allowed). End-of-generation
 * tokens are allowed exactly when the grammar may end; stop as soon as
 * nu_grammar_must_end says nothing else may follow.
 *
 * Token budgets: after nu_grammar_state_set_budget(s, n), every check also
 * refuses tokens after which the grammar could no longer be completed within
 * the tokens left (it needs at least nu_grammar_distance bytes, and a token
 * carries at least one byte), so generation that stops after n tokens always
 * ends with complete text. This is exact for vocabularies that have a token
 * for every byte (SentencePiece with byte fallback, byte-level BPE). */

typedef struct nu_grammar nu_grammar;
typedef struct nu_grammar_state nu_grammar_state;

/* How JSON is laid out by the JSON grammars. */
typedef struct nu_json_options {
    /* 0: compact, no whitespace at all. N > 0: at most N spaces, tabs or
     * newlines at each place JSON allows whitespace (between tokens), so a
     * model can indent but cannot loop on whitespace. */
    int32_t max_whitespace;
} nu_json_options;

/* Defaults: compact. */
NU_API nu_json_options nu_json_default_options(void);

/* Compiles GBNF text with start rule `root` (NULL: "root"). Errors give the
 * line and column and what was expected; undefined rules and left recursion
 * are reported by rule name. model may be NULL: the grammar then has no
 * vocabulary and only the byte functions below work. */
NU_API nu_status nu_grammar_from_gbnf(const nu_model *model, const char *gbnf, const char *root,
                                      nu_grammar **out, nu_error *err);
/* A JSON Schema (text): type, enum, const, properties, required,
 * additionalProperties, items, prefixItems, min/maxItems, min/maxLength,
 * pattern, format (date, time, date-time, uuid, email), minimum, maximum,
 * exclusive bounds (integers exactly; numbers as decimals of at most 15
 * digits), anyOf, oneOf (when the branches provably exclude each other),
 * allOf (merged), local $ref (recursion allowed). Anything else is an error
 * naming the keyword and its place in the schema; src/json_schema.c has
 * the details. */
NU_API nu_status nu_grammar_from_json_schema(const nu_model *model, const char *schema_json,
                                             const nu_json_options *opt, nu_grammar **out,
                                             nu_error *err);
/* Any JSON object. */
NU_API nu_status nu_grammar_json_object(const nu_model *model, const nu_json_options *opt,
                                        nu_grammar **out, nu_error *err);
/* Texts a regular expression matches as a whole (ECMAScript syntax: classes,
 * \d \w \s, groups, alternation, quantifiers; ^ and $ only at the ends). */
NU_API nu_status nu_grammar_from_regex(const nu_model *model, const char *regex, nu_grammar **out,
                                       nu_error *err);
/* Exactly one of n strings. */
NU_API nu_status nu_grammar_from_choices(const nu_model *model, const char *const *choices,
                                         size_t n, nu_grammar **out, nu_error *err);
NU_API void nu_grammar_free(nu_grammar *g);

/* The GBNF text a schema, JSON object, regex or choice list compiles from
 * (for printing and debugging). *gbnf is set to a string the caller releases
 * with nu_free. */
NU_API nu_status nu_json_schema_to_gbnf(const char *schema_json, const nu_json_options *opt,
                                        char **gbnf, nu_error *err);
NU_API nu_status nu_json_object_to_gbnf(const nu_json_options *opt, char **gbnf, nu_error *err);
NU_API nu_status nu_regex_to_gbnf(const char *regex, char **gbnf, nu_error *err);
NU_API nu_status nu_choices_to_gbnf(const char *const *choices, size_t n, char **gbnf,
                                    nu_error *err);

/* A matching state at the start of the text. */
NU_API nu_status nu_grammar_state_new(const nu_grammar *g, nu_grammar_state **out, nu_error *err);
NU_API void nu_grammar_state_free(nu_grammar_state *s);
/* An independent copy (for beams and parallel samples). */
NU_API nu_status nu_grammar_state_copy(const nu_grammar_state *s, nu_grammar_state **out,
                                       nu_error *err);
/* Allows at most n_tokens more tokens (end-of-generation tokens not counted;
 * -1: no limit) and from now on refuses tokens that would leave too few to
 * finish. Fails (NU_ERR_INVALID_ARG) when n_tokens is below
 * nu_grammar_distance (the budget assumes one byte per token at worst).
 * nu_grammar_accept counts the budget down; nu_grammar_accept_bytes does not. */
NU_API nu_status nu_grammar_state_set_budget(nu_grammar_state *s, int32_t n_tokens, nu_error *err);

/* May token come next? Cheap: walks only that token's bytes. */
NU_API bool nu_grammar_allows(nu_grammar_state *s, int32_t token);
/* Removes the candidates the grammar refuses, keeping the order of the rest
 * (sets selected to -1). Small arrays are checked token by token; large ones
 * with one walk of the vocabulary trie, whose result is cached per grammar
 * state (inside a JSON string, say, the state repeats). An array left empty
 * means the vocabulary cannot spell what the grammar needs: stop with an
 * error. */
NU_API void nu_grammar_mask(nu_grammar_state *s, nu_candidates *c);
/* Appends token: NU_ERR_INVALID_ARG, state unchanged, if it is not allowed
 * (NU_ERR_UNSUPPORTED if the grammar is too ambiguous to follow: more than
 * 16384 parses at once). An end-of-generation token is accepted, changing
 * nothing, only when the grammar may end. */
NU_API nu_status nu_grammar_accept(nu_grammar_state *s, int32_t token, nu_error *err);
/* Appends raw bytes (no vocabulary needed): NU_ERR_INVALID_ARG, state
 * unchanged, naming the offset of the first refused byte. */
NU_API nu_status nu_grammar_accept_bytes(nu_grammar_state *s, const char *bytes, size_t len,
                                         nu_error *err);
/* The grammar may end here: end-of-generation tokens are allowed. */
NU_API bool nu_grammar_is_complete(const nu_grammar_state *s);
/* Nothing but the end is allowed (or the token budget is spent). */
NU_API bool nu_grammar_must_end(const nu_grammar_state *s);
/* Fewest bytes that complete the text (0 when complete). */
NU_API int64_t nu_grammar_distance(const nu_grammar_state *s);

/* ------------------------------------------------------------------------ */
/* Generation                                                               */
/* ------------------------------------------------------------------------ */

typedef enum nu_finish_reason {
    NU_FINISH_NONE = 0,
    NU_FINISH_LENGTH,    /* n_predict tokens */
    NU_FINISH_EOS,       /* an end-of-generation token */
    NU_FINISH_STOP,      /* a stop string or stop token */
    NU_FINISH_CONTEXT,   /* the context is full */
    NU_FINISH_CANCELLED, /* a callback or the caller stopped it */
} nu_finish_reason;

/* "length", "eos", "stop", "context", "cancelled" (or "none"). Static. */
NU_API const char *nu_finish_reason_name(nu_finish_reason r);

#define NU_MAX_TOP_LOGPROBS 20

typedef struct nu_top_logprob {
    int32_t token;
    float logprob;
} nu_top_logprob;

/* The log-probability of one token and the most likely alternatives at its
 * position, from the model's distribution (log-softmax of the logits) or,
 * with logprobs_after_chain, from the distribution the sampler chain left. */
typedef struct nu_token_logprob {
    int32_t token;
    float logprob; /* -INFINITY when the chain had removed the token */
    int32_t n_top;
    nu_top_logprob top[NU_MAX_TOP_LOGPROBS];
    size_t text_offset; /* where the token's text starts in the result text */
} nu_token_logprob;

/* Called with each piece of text of sample `index` as soon as it is final
 * (never part of a stop string). Return false to stop that sample. */
typedef bool (*nu_text_callback)(void *user, int32_t index, const char *text, size_t len);

typedef struct nu_generate_params {
    int32_t n_predict;  /* most tokens to generate (-1: until EOS or context end) */
    bool add_bos;       /* add BOS when the model asks for it */
    bool parse_special; /* special-token text in the prompt becomes its id */
    bool echo;          /* the prompt's text (and log-probs) come first in the result */
    nu_sampler_params sampling;
    int32_t n;               /* samples of this prompt, sharing its cache (1..64) */
    const char *const *stop; /* stop strings: the text ends before the first match */
    int32_t n_stop;
    bool include_stop;          /* keep the matched stop string in the text */
    const int32_t *stop_tokens; /* token ids that end generation (besides EOS) */
    int32_t n_stop_tokens;
    int32_t logprobs; /* -1: none; 0..20: the token's log-prob and this many alternatives */
    bool logprobs_after_chain;
    /* Output constrained to a grammar (NULL: none); it must outlive the
     * generation. The text always completes the grammar within n_predict
     * tokens, and generation ends as soon as nothing but the end may follow
     * (finish "stop"). */
    const nu_grammar *grammar;
    /* Speculative decoding, when the scheduler running the request has it
     * (nu_scheduler_set_speculation) or nu_generate_speculative: 0 drafts as
     * the scheduler / the nu_speculative_params say, -1 never drafts for this
     * request (nu_generate_speculative then generates plainly), K > 0 drafts
     * at most K tokens per step (K no more than their draft_max). */
    int32_t draft_max;
    /* A thinking budget for every sample (nu_think_budget; zeroed: none). */
    nu_think_budget think;
    nu_text_callback on_text;
    void *user;
} nu_generate_params;

/* Defaults: n_predict 128, add_bos, n 1, logprobs -1, sampler defaults. */
NU_API nu_generate_params nu_generate_default_params(void);

/* Checks every field; NU_ERR_INVALID_ARG names the first bad one. */
NU_API nu_status nu_generate_params_check(const nu_generate_params *p, nu_error *err);

/* What one sample produced. The arrays belong to the result: release them
 * with nu_generate_result_free. */
typedef struct nu_generate_result {
    int32_t index;       /* which sample of its prompt */
    int32_t n_prompt;    /* prompt tokens, BOS included */
    int32_t n_cached;    /* of those, how many were reused from the cache */
    int32_t n_generated; /* tokens sampled (an ending EOS not counted) */
    double prompt_ms;    /* prompt processing wall time */
    double generate_ms;  /* generation wall time (after the prompt) */
    nu_finish_reason finish;
    char *text; /* NUL-terminated: the prompt's text first when echo */
    size_t text_len;
    int32_t *tokens; /* generated tokens */
    int32_t n_tokens;
    nu_token_logprob *logprobs; /* prompt tokens (echo) then generated ones, or NULL */
    int32_t n_logprobs;
    int32_t n_prompt_logprobs;
    double sum_logprob; /* total model log-prob of the generated tokens */
    double score;       /* beam search: sum_logprob / n_generated^length_penalty */
    int32_t n_drafted;  /* speculative decoding: tokens proposed for this sample */
    int32_t n_accepted; /* of those, how many the target accepted */
    int32_t stop_index; /* finish NU_FINISH_STOP by a stop string: its index in stop; else -1 */
} nu_generate_result;

NU_API void nu_generate_result_free(nu_generate_result *r);

/* Tokenizes the prompt and generates params->n samples (results must hold
 * that many), sending text to the callback as it is produced. Cached
 * positions of an earlier call that match the prompt's first tokens are
 * reused, not recomputed (the result is the same either way). */
NU_API nu_status nu_generate(nu_context *ctx, const char *prompt, const nu_generate_params *params,
                             nu_generate_result *results, nu_error *err);

/* Best-of-n: the index of the sample with the highest total log-prob. */
NU_API int32_t nu_best_of(const nu_generate_result *results, int32_t n);

/* Self-consistency: the answer most samples agree on. A sample's answer is
 * the last match in its text of `pattern` (a POSIX extended regular
 * expression; NULL means the last number); samples without one do not vote.
 * Ties go to the answer that appeared first. Writes the answer, its votes and
 * the index of the first sample that gave it (-1 and 0 votes when none). */
NU_API nu_status nu_majority_answer(const nu_generate_result *results, int32_t n,
                                    const char *pattern, char *answer, size_t cap, int32_t *votes,
                                    int32_t *index, nu_error *err);

/* Beam search: keeps the `width` best partial continuations by total
 * log-probability, extending each by its best tokens at every step; a
 * continuation that reaches an end-of-generation token becomes a finished
 * hypothesis scored sum_logprob / length^length_penalty (length = generated
 * tokens, the end token not counted; 0 = no normalisation, 1 = mean
 * log-prob). Beams share the prompt's cache and their common prefixes.
 * early_stopping: stop as soon as `width` hypotheses are finished; otherwise
 * stop when no live beam can still beat the worst of them. At n_predict the
 * live beams become hypotheses too (finish "length"). */
typedef struct nu_beam_params {
    int32_t width;        /* beams kept (1..32); the context needs 2 * width sequences */
    int32_t n_return;     /* hypotheses returned, best first (1..width) */
    float length_penalty; /* alpha in score = sum_logprob / length^alpha */
    bool early_stopping;
    int32_t n_predict; /* most tokens per hypothesis (>= 1) */
    bool add_bos;
    bool parse_special;
} nu_beam_params;

/* Defaults: width 4, n_return 1, length_penalty 1, no early stopping, n_predict 64. */
NU_API nu_beam_params nu_beam_default_params(void);

/* Runs beam search on the prompt; results (n_return of them) get the
 * hypotheses, best score first. */
NU_API nu_status nu_beam_search(nu_context *ctx, const char *prompt, const nu_beam_params *params,
                                nu_generate_result *results, nu_error *err);

/* Speculative decoding: a cheap guesser proposes tokens that the target
 * model verifies in one batched pass; a rejection rule keeps exactly the
 * target's distribution (after the sampler chain), so greedy output is
 * token-for-token that of plain greedy decoding and sampled output is
 * distributed like plain sampling. The guesser is a draft model with the same
 * vocabulary (its own context) or prompt lookup: the tokens that followed the
 * latest earlier occurrence of the text's last n-gram. */
typedef struct nu_speculative_params {
    nu_context *draft;        /* a context of the draft model, or NULL */
    bool lookup;              /* without a draft: prompt-lookup proposals */
    int32_t draft_max;        /* most proposals per pass (default 8; 1..64) */
    int32_t draft_min;        /* fewest (default 1) */
    bool adaptive;            /* +1 after a fully accepted pass, -1 below half accepted */
    int32_t lookup_ngram_max; /* longest n-gram looked up (default 4) */
    int32_t lookup_ngram_min; /* shortest (default 1) */
} nu_speculative_params;

typedef struct nu_speculative_stats {
    int64_t drafted;       /* tokens proposed */
    int64_t accepted;      /* proposals accepted */
    int64_t target_passes; /* batched passes of the target model */
    int64_t draft_passes;  /* single-token passes of the draft model */
} nu_speculative_stats;

NU_API nu_speculative_params nu_speculative_default_params(void);

/* Whether draft can serve target: the same tokens with the same ids and the
 * same BOS/EOS; otherwise NU_ERR_INVALID_ARG saying what differs. */
NU_API nu_status nu_draft_check(const nu_model *target, const nu_model *draft, nu_error *err);

/* nu_generate with speculation (one sample; stop strings, log-probs and echo
 * as usual). Sequence 0 of both contexts is used and cleared first. */
NU_API nu_status nu_generate_speculative(nu_context *target, const char *prompt,
                                         const nu_generate_params *params,
                                         const nu_speculative_params *sp,
                                         nu_generate_result *result, nu_speculative_stats *stats,
                                         nu_error *err);

/* A scheduler runs many requests together: every step makes one forward
 * batch from the next token of each generating sample and chunks of the
 * prompts still being read, so a long prompt does not stall the others.
 * Requests wait when the context has no free sequence for them. A sample's
 * tokens do not depend on what else runs beside it. */
typedef struct nu_scheduler nu_scheduler;

NU_API nu_status nu_scheduler_new(nu_context *ctx, nu_scheduler **out, nu_error *err);
NU_API void nu_scheduler_free(nu_scheduler *s);

/* Queues a prompt (text, or tokens when text is NULL). results (params->n of
 * them) are filled as it runs and must stay valid until it is done; params,
 * its stop strings and token arrays are copied. *id names the request. */
NU_API nu_status nu_scheduler_submit(nu_scheduler *s, const char *text, const int32_t *tokens,
                                     size_t n_tokens, const nu_generate_params *params,
                                     nu_generate_result *results, int32_t *id, nu_error *err);

/* Speculative decoding for the samples this scheduler runs. draft is a
 * model with the target's vocabulary (nu_draft_check), or NULL for prompt
 * lookup (sp->lookup set); sp gives the draft lengths and lookup n-grams
 * (sp->draft must be NULL: the scheduler makes and owns a context of the
 * draft model with the target context's cells, sequences, batch and
 * threads). Every step, each generating sample that speculates drafts up to
 * its draft length (adapted per sample as in nu_generate_speculative); the
 * draft model's steps for all samples run as shared batches, and the target
 * then verifies every sample's draft in the step's one forward batch, beside
 * the other samples and prompt chunks. The exact acceptance rule keeps each
 * sample's distribution (greedy output is token for token the same). A
 * request speculates unless its draft_max is -1, it has a grammar, or it
 * asks greedy log-probs after the chain; a seeded sample's tokens depend
 * only on its own drafts unless the batch or the cache lacks room for every
 * sample's full draft. Call it before submitting anything; NULL sp (or
 * neither draft nor lookup) turns speculation off. */
NU_API nu_status nu_scheduler_set_speculation(nu_scheduler *s, const nu_model *draft,
                                              const nu_speculative_params *sp, nu_error *err);

/* Totals since the scheduler was made: tokens drafted and accepted, target
 * batches that carried drafts, draft-model batches. */
NU_API void nu_scheduler_speculative_stats(const nu_scheduler *s, nu_speculative_stats *out);

/* Runs one batch. *active tells whether requests remain. An error that
 * concerns one request finishes that request (NU_FINISH_CANCELLED with its
 * message in the result text) rather than failing the step. */
NU_API nu_status nu_scheduler_step(nu_scheduler *s, bool *active, nu_error *err);

/* Runs steps until every request is done. */
NU_API nu_status nu_scheduler_run(nu_scheduler *s, nu_error *err);

NU_API bool nu_scheduler_is_done(const nu_scheduler *s, int32_t id);
/* Stops a request; its results say NU_FINISH_CANCELLED. */
NU_API void nu_scheduler_cancel(nu_scheduler *s, int32_t id);
/* Requests waiting for a sequence, and samples generating. */
NU_API int32_t nu_scheduler_queued(const nu_scheduler *s);
NU_API int32_t nu_scheduler_running(const nu_scheduler *s);

/* ------------------------------------------------------------------------ */
/* Watermarking                                                             */
/* ------------------------------------------------------------------------ */

/* Defaults: key NULL, gamma 0.25, delta 2, context 1 (see nu_watermark_params;
 * generation watermarks when sampling.watermark.key is set). */
NU_API nu_watermark_params nu_watermark_default_params(void);

/* Checks a watermark with its key: NU_ERR_INVALID_ARG naming the first bad
 * field (no or empty key, gamma outside (0, 1), delta outside 0..100,
 * context outside 1..NU_WATERMARK_MAX_CONTEXT). */
NU_API nu_status nu_watermark_params_check(const nu_watermark_params *p, nu_error *err);

/* Whether token is in the green list chosen by the p->context tokens of prev
 * (oldest first), for the key and gamma of p. Hashes the key at each call:
 * for explaining and checking, not for loops over the vocabulary. */
NU_API bool nu_watermark_is_green(const nu_watermark_params *p, const int32_t *prev, int32_t token);

/* What detection found. Token i (i >= h) is scored with its h predecessors;
 * an (h predecessors, token) n-gram that occurred before in the text is left
 * out, so that repeated phrases count once ("On the Reliability of
 * Watermarks for Large Language Models", Kirchenbauer et al. 2024). With T
 * the n-grams scored and G the green ones among them,
 *   z = (G - gamma T) / sqrt(T gamma (1 - gamma)),  p_value = P(N(0,1) > z),
 * the one-sided test of the paper (z 0 and p_value 1 when T is 0). */
typedef struct nu_watermark_result {
    int64_t n_tokens;      /* tokens read */
    int64_t scored;        /* T: distinct (context, token) n-grams scored */
    int64_t repeated;      /* n-grams left out because they occurred before */
    int64_t green;         /* G: scored tokens that were green */
    double green_fraction; /* G / T (0 when T is 0) */
    double z;
    double p_value;
    bool detected; /* z > z_threshold */
} nu_watermark_result;

/* Detection over token ids (the text's tokens, without BOS). model, when not
 * NULL, checks the ids are in its vocabulary; marks, when not NULL, gets one
 * entry per token: 1 green, 0 red, -1 not scored (no full context, or a
 * repeat). The delta of p plays no part. z_threshold: 4 is the paper's. */
NU_API nu_status nu_watermark_detect(const nu_model *model, const nu_watermark_params *p,
                                     const int32_t *tokens, size_t n, double z_threshold,
                                     signed char *marks, nu_watermark_result *out, nu_error *err);

/* Detection over text: tokenized with the model's tokenizer (no BOS, special
 * token text read as plain text), then nu_watermark_detect. A vocab-only
 * model is enough. Text re-tokenizes into the generated tokens only when the
 * tokenizer's split is the one it would choose (docs/ARCHITECTURE.md). */
NU_API nu_status nu_watermark_detect_text(const nu_model *model, const nu_watermark_params *p,
                                          const char *text, size_t len, double z_threshold,
                                          nu_watermark_result *out, nu_error *err);

/* ------------------------------------------------------------------------ */
/* Chat templates                                                           */
/* ------------------------------------------------------------------------ */

/* A parsed chat template: a model's tokenizer.chat_template (a Jinja
 * template) rendered byte for byte as Hugging Face transformers renders it
 * (Jinja2 with trim_blocks and lstrip_blocks, Python's str() when printing,
 * transformers' tojson, raise_exception and strftime_now). Immutable once
 * parsed: any number of threads may render with one template at once. */
typedef struct nu_chat_template nu_chat_template;

/* Parses Jinja source (UTF-8). Syntax errors, unknown tags, filters and
 * tests are NU_ERR_FORMAT with a message naming the line and column. */
NU_API nu_status nu_chat_template_parse(const char *source, size_t len, nu_chat_template **out,
                                        nu_error *err);

/* The model's tokenizer.chat_template. NU_ERR_UNSUPPORTED when the file has
 * none (then see nu_chat_template_guess_builtin). */
NU_API nu_status nu_chat_template_from_model(const nu_model *model, nu_chat_template **out,
                                             nu_error *err);

/* A built-in template by name, for files without one: "chatml"
 * (<|im_start|>role\ncontent<|im_end|>), "llama2" ([INST] with <<SYS>>),
 * "llama3" (<|start_header_id|>), "mistral" ([INST] ... [/INST]), "phi3"
 * (<|user|> ... <|end|>), "gemma" (<start_of_turn>), "zephyr" (<|user|> ...
 * </s>) and "plain" ("User: ..." / "Assistant: ..." for models without chat
 * tokens). Unknown names are NU_ERR_INVALID_ARG. */
NU_API nu_status nu_chat_template_builtin(const char *name, nu_chat_template **out, nu_error *err);

/* The built-in names, NULL-terminated. Static. */
NU_API const char *const *nu_chat_template_builtin_names(void);

/* The built-in format whose special tokens the model's vocabulary has
 * ("chatml" for <|im_start|>, ...), or "plain". Never NULL. Static. */
NU_API const char *nu_chat_template_guess_builtin(const nu_model *model);

/* The template's source (after Jinja's newline normalisation), valid until
 * nu_chat_template_free. */
NU_API const char *nu_chat_template_source(const nu_chat_template *t, size_t *len);

NU_API void nu_chat_template_free(nu_chat_template *t);

typedef struct nu_chat_render_params {
    const char *messages_json; /* JSON array of message objects ({"role", "content", ...}) */
    const char *tools_json;    /* JSON array of tool definitions, or NULL: `tools` is None */
    const char *extra_json;    /* JSON object of more variables (date_string, ...), or NULL */
    bool add_generation_prompt;
    const char *bos_token; /* NULL: `bos_token` is undefined */
    const char *eos_token; /* NULL: `eos_token` is undefined */
} nu_chat_render_params;

/* All fields zero / NULL / false. */
NU_API nu_chat_render_params nu_chat_render_default_params(void);

/* Renders the conversation. The text is malloc'd and NUL-terminated (*out,
 * *len bytes without the NUL; len may be NULL); release it with nu_free.
 * Errors: NU_ERR_INVALID_ARG for bad JSON input and when the template
 * itself rejects the conversation with raise_exception (its message is
 * kept verbatim), NU_ERR_FORMAT when rendering fails otherwise (an
 * undefined value used, a type error, ...; the message names the line and
 * column), NU_ERR_UNSUPPORTED when the render goes past the engine's
 * limits (5M steps, 256 MiB allocated, 64 MiB of output). */
NU_API nu_status nu_chat_render(const nu_chat_template *t, const nu_chat_render_params *params,
                                char **out, size_t *len, nu_error *err);

/* ------------------------------------------------------------------------ */
/* Models by name                                                           */
/* ------------------------------------------------------------------------ */

/* Progress of a download: bytes done so far of total (0 when unknown). */
typedef void (*nu_progress_callback)(void *user, uint64_t done, uint64_t total);

/* The cache directory for downloaded models: $NUCLEUS_CACHE, else
 * $XDG_CACHE_HOME/nucleus, else $HOME/.cache/nucleus. */
NU_API nu_status nu_cache_dir(char *buf, size_t cap, nu_error *err);

/* True for references nu_resolve_model understands but that are not paths
 * ("hf:ORG/REPO/FILE.gguf"). */
NU_API bool nu_is_model_ref(const char *ref);

/* Turns a model reference into a local path. A path is returned as is; an
 * "hf:ORG/REPO/FILE" reference is looked up in the cache and downloaded
 * there if missing (resuming a partial download), its size and SHA-256
 * checked against what the server announces. The server is
 * https://huggingface.co unless $NUCLEUS_HF_ENDPOINT names another. */
NU_API nu_status nu_resolve_model(const char *ref, bool allow_download,
                                  nu_progress_callback progress, void *user, char *path, size_t cap,
                                  nu_error *err);

/* ------------------------------------------------------------------------ */
/* Evaluation                                                               */
/* ------------------------------------------------------------------------ */

/* Perplexity of a token sequence: the model reads it in windows, each from
 * scratch (sequence 0 of ctx, cleared first), and the tokens of each
 * window's scored part are scored by -ln p(token | the window's earlier
 * tokens), p the softmax of the logits. Perplexity is e^(mean score); its
 * standard error is perplexity * sd(score) / sqrt(n) (the first-order error
 * of e^mean). Two ways to cut the text:
 *   NU_PERPLEXITY_CHUNKS (the default), llama-perplexity's: consecutive
 *     chunks of n_window tokens (the last partial one left out), the first
 *     token of each replaced by BOS when the model adds one, the logits at
 *     positions n/2 .. n-2 scoring the tokens at n/2+1 .. n-1. The same
 *     tokens (the text with BOS added) and n_window as llama-perplexity's -c
 *     give its figure and its "+/-".
 *   NU_PERPLEXITY_WINDOWS: the tokens as they are, consecutive windows of
 *     n_window tokens (the last may be shorter), every token at a window
 *     position >= score_from scored; a last window with no token to score
 *     is left out. */
typedef enum nu_perplexity_mode {
    NU_PERPLEXITY_CHUNKS = 0,
    NU_PERPLEXITY_WINDOWS,
} nu_perplexity_mode;

typedef struct nu_perplexity_result {
    double perplexity;
    double stderr_ppl; /* standard error of the perplexity */
    double nll;        /* sum of the scores (nats) */
    int64_t n_scored;  /* tokens scored */
    int32_t n_windows; /* windows (chunks) read */
} nu_perplexity_result;

typedef struct nu_perplexity_params {
    int32_t n_window;   /* tokens per window or chunk; 0: the context's n_ctx */
    int32_t score_from; /* windows: first scored position (>= 1); 0: n_window / 2.
                           Chunks: must be 0 */
    /* after each window: its index, the running result; return false to stop */
    bool (*on_window)(int32_t window, const nu_perplexity_result *so_far, void *user);
    void *user;
    nu_perplexity_mode mode;
    /* chunks: also write each scored row's log-probs to this file, in the
     * format of llama-perplexity's --kl-divergence-base (the base of
     * nu_kl_divergence; llama.cpp reads it too); NULL: none */
    const char *save_base;
} nu_perplexity_params;

/* Chunks mode, the rest zero. */
NU_API nu_perplexity_params nu_perplexity_default_params(void);

/* NU_ERR_INVALID_ARG for a token outside the vocabulary, n_window above the
 * context's n_ctx or below 2, a text shorter than one chunk (chunks) or than
 * 2 tokens (windows), score_from outside 1..n_window-1 (windows) or set
 * (chunks); NU_ERR_IO when save_base cannot be written; NU_ERR_CANCELLED when
 * on_window stopped it (out then holds the windows read). */
NU_API nu_status nu_perplexity(nu_context *ctx, const int32_t *tokens, int64_t n_tokens,
                               const nu_perplexity_params *params, nu_perplexity_result *out,
                               nu_error *err);

/* KL-divergence of this context's model (Q) from a base model whose
 * log-probs a chunks run wrote to a file (save_base above, or llama.cpp's
 * llama-perplexity --kl-divergence-base): the file's tokens are read again
 * in its chunks, and at every scored row Q's distribution is compared with
 * the base's, as llama-perplexity --kl-divergence does it:
 * KL(base || Q) = sum over the tokens of base log-prob above -16 of
 * p_base (ln p_base - ln q); Δp = q(the correct token) - p_base(it); the top
 * tokens agree when both distributions' most probable tokens (the first of
 * equals) are the same. Means have llama.cpp's uncertainties (0 with 10
 * rows or fewer); percentiles are llama.cpp's (linear between neighbours of
 * the sorted values; the median the middle or the mean of the two middle
 * ones). */
#define NU_KLD_N_PERCENTILES 11
/* The percentiles' fractions, in order: maximum, 99.9%, 99%, 95%, 90%,
 * median, 10%, 5%, 1%, 0.1%, minimum. */
typedef struct nu_kld_result {
    int64_t n_scored;
    int32_t n_chunks;
    double ppl, ppl_stderr;                   /* PPL(Q) */
    double ppl_base, ppl_base_stderr;         /* PPL(base), from the file's log-probs */
    double ln_ppl_correlation;                /* Cor(ln PPL(Q), ln PPL(base)) */
    double ln_ppl_ratio, ln_ppl_ratio_stderr; /* ln(PPL(Q) / PPL(base)) */
    double ppl_ratio, ppl_ratio_stderr;       /* PPL(Q) / PPL(base) */
    double ppl_diff, ppl_diff_stderr;         /* PPL(Q) - PPL(base) */
    double kld_mean, kld_stderr;
    double kld_percentiles[NU_KLD_N_PERCENTILES];
    double dp_mean, dp_stderr; /* Δp as a fraction (llama.cpp prints percent) */
    double dp_percentiles[NU_KLD_N_PERCENTILES];
    double dp_rms, dp_rms_stderr;
    double same_top, same_top_stderr; /* share of rows whose top tokens agree */
} nu_kld_result;

/* params: on_window only (called after each chunk with Q's running
 * perplexity). NU_ERR_IO when the file cannot be opened; NU_ERR_FORMAT when
 * it is not a base file or is cut short or too long; NU_ERR_INVALID_ARG when
 * its vocabulary size differs from the model's, its chunks do not fit the
 * context, or a token is outside the vocabulary. */
NU_API nu_status nu_kl_divergence(nu_context *ctx, const char *base_path,
                                  const nu_perplexity_params *params, nu_kld_result *out,
                                  nu_error *err);

/* Multiple choice by log-likelihood (HellaSwag-style tasks), as
 * llama-perplexity's --hellaswag scores them: each candidate text is
 * context + " " + endings[i], tokenized with BOS; the tokens all candidates
 * share are read once (sequence 0, copied to the others: ctx needs
 * n_seq_max >= n_endings), and loglik[i] is the sum of ln p of candidate i's
 * tokens after that shared prefix, n_scored[i] their count. Pick the
 * largest loglik (lm-evaluation-harness's acc), loglik / n_scored
 * (llama-perplexity's hellaswag score) or loglik / the ending's length
 * (lm-evaluation-harness's acc_norm). The cache of ctx is cleared.
 * NU_ERR_INVALID_ARG for fewer than 2 endings, more than n_seq_max, an
 * ending that adds no token to the shared prefix, or a task longer than the
 * context. */
NU_API nu_status nu_choice_loglik(nu_context *ctx, const char *context, const char *const *endings,
                                  int32_t n_endings, double *loglik, int32_t *n_scored,
                                  nu_error *err);

/* ------------------------------------------------------------------------ */
/* Text metrics: BLEU                                                       */
/* ------------------------------------------------------------------------ */

/* BLEU (Papineni et al., 2002) of hypotheses against references, as two
 * reference tools compute it, so figures can be set beside published ones:
 *
 * sacreBLEU (NU_BLEU_SACREBLEU, its 2.x semantics): each segment is
 * lowercased if asked (Python's str.lower()), right-stripped and tokenized
 * (13a: mteval-v13a's rules, the default; intl: mteval-v14's punctuation and
 * symbol rules over Unicode categories; zh: every CJK character a token,
 * then 13a's rules (its table of ranges, quirks included); char: every
 * character; none: whitespace only). A segment's references that are empty
 * are left out (at least one must remain). n-gram counts are clipped by the
 * most any one reference holds; the reference length is the one closest to
 * the hypothesis's (the shorter on a tie). Corpus BLEU sums the statistics
 * of all segments, then score = BP * exp(mean over n of ln p_n) in 0..100
 * with BP = exp(1 - r/c) when c < r; a zero precision is smoothed by `exp`
 * (mteval's 1/2^k, the default), `floor` (smooth_value, 0.1, in place of the
 * zero count), `add-k` (smooth_value, 1, added to counts and totals from
 * bigrams on) or `none`; no matching unigram at all gives 0.
 * effective_order averages only the orders the hypothesis has n-grams of
 * (what sacreBLEU advises for sentence BLEU).
 *
 * NLTK (NU_BLEU_NLTK, nltk.translate.bleu_score 3.8): tokens are the
 * whitespace-separated words as given (tokenizer `none`); empty references
 * count (length 0); a segment's n-gram total is at least 1; score =
 * BP * exp(sum over n of w_n ln p_n) in 0..1, with the weights given
 * (default 1/4 each) and SmoothingFunction's method0..method7 (epsilon =
 * smooth_value, 0.1; alpha 5 and k 5 as NLTK's defaults). As NLTK's
 * corpus_bleu does, methods 5-7 read the last segment's hypothesis (its
 * length and its 5-gram precision), and method4's length is the corpus's. */

#define NU_BLEU_MAX_ORDER 9 /* the longest n-grams counted */

typedef enum nu_bleu_flavor {
    NU_BLEU_SACREBLEU = 0,
    NU_BLEU_NLTK,
} nu_bleu_flavor;

typedef enum nu_bleu_tokenizer {
    NU_BLEU_TOK_13A = 0,
    NU_BLEU_TOK_INTL,
    NU_BLEU_TOK_ZH,
    NU_BLEU_TOK_CHAR,
    NU_BLEU_TOK_NONE,
} nu_bleu_tokenizer;

typedef enum nu_bleu_smooth {
    NU_BLEU_SMOOTH_EXP = 0, /* sacreBLEU's methods */
    NU_BLEU_SMOOTH_FLOOR,
    NU_BLEU_SMOOTH_ADD_K,
    NU_BLEU_SMOOTH_NONE,
    NU_BLEU_NLTK_METHOD0, /* NLTK's SmoothingFunction().method0 .. method7 */
    NU_BLEU_NLTK_METHOD1,
    NU_BLEU_NLTK_METHOD2,
    NU_BLEU_NLTK_METHOD3,
    NU_BLEU_NLTK_METHOD4,
    NU_BLEU_NLTK_METHOD5,
    NU_BLEU_NLTK_METHOD6,
    NU_BLEU_NLTK_METHOD7,
} nu_bleu_smooth;

typedef struct nu_bleu_params {
    nu_bleu_flavor flavor;
    nu_bleu_tokenizer tokenizer;
    bool lowercase;
    nu_bleu_smooth smooth; /* one of the flavor's methods */
    double smooth_value;   /* floor's / add-k's value, method1's epsilon; < 0: the default */
    int32_t max_order;     /* sacreBLEU: n-gram orders 1..max_order (4) */
    bool effective_order;  /* sacreBLEU */
    /* NLTK: the weights of orders 1..n_weights (their count is the order);
     * n_weights 0: 1/4 for orders 1..4 */
    int32_t n_weights;
    double weights[NU_BLEU_MAX_ORDER];
    bool auto_reweigh; /* NLTK's auto_reweigh: uniform weights over a corpus shorter than 4 */
} nu_bleu_params;

/* The defaults of a flavor (sacreBLEU: 13a, exp, order 4; NLTK: tokens as
 * given, method0, weights 1/4). */
NU_API nu_bleu_params nu_bleu_default_params(nu_bleu_flavor flavor);

/* The sufficient statistics of one segment or, summed, of a corpus. */
typedef struct nu_bleu_stats {
    int64_t hyp_len, ref_len;           /* tokens; ref_len: the closest reference's */
    int64_t correct[NU_BLEU_MAX_ORDER]; /* clipped matches per order */
    int64_t total[NU_BLEU_MAX_ORDER];   /* hypothesis n-grams per order */
    int64_t n_segments;
    int32_t n_refs; /* references per segment (not empty); -1 when it varies */
    /* the last segment's, for NLTK's methods 5-7 */
    int64_t last_hyp_len, last_correct5, last_total5;
} nu_bleu_stats;

typedef struct nu_bleu_result {
    double score;                         /* sacreBLEU: 0..100; NLTK: 0..1 */
    double precisions[NU_BLEU_MAX_ORDER]; /* sacreBLEU: percent, smoothed; NLTK: the smoothed p_n */
    int32_t order;                        /* how many precisions */
    double bp;                            /* brevity penalty */
    double ratio;                         /* hyp_len / ref_len (0 when ref_len is 0) */
    int64_t hyp_len, ref_len;
} nu_bleu_result;

/* The statistics of one hypothesis against its n_refs references (UTF-8,
 * NUL-terminated; NULL references count as empty). NU_ERR_INVALID_ARG for
 * bad params, or (sacreBLEU) when every reference is empty. */
NU_API nu_status nu_bleu_segment(const nu_bleu_params *params, const char *hyp,
                                 const char *const *refs, int32_t n_refs, nu_bleu_stats *out,
                                 nu_error *err);
/* sum += seg (counts added; the last segment's fields taken from seg). */
NU_API void nu_bleu_stats_add(nu_bleu_stats *sum, const nu_bleu_stats *seg);
/* The score of (summed) statistics. NU_ERR_INVALID_ARG for bad params, or
 * for NLTK's method6 when the trigram precision is 0 (NLTK asserts). */
NU_API nu_status nu_bleu_compute(const nu_bleu_params *params, const nu_bleu_stats *stats,
                                 nu_bleu_result *out, nu_error *err);
/* Corpus BLEU: hyps[i] against refs[r][i] for r < n_refs (one array per
 * reference stream, as sacreBLEU takes them). */
NU_API nu_status nu_bleu_corpus(const nu_bleu_params *params, const char *const *hyps, int64_t n,
                                const char *const *const *refs, int32_t n_refs, nu_bleu_result *out,
                                nu_error *err);
/* sacreBLEU's signature of the settings and the reference count of stats
 * ("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:..."; the version
 * is nucleus's), NUL-terminated into buf; NU_ERR_BUFFER_SMALL when cap is
 * too small. */
NU_API nu_status nu_bleu_signature(const nu_bleu_params *params, const nu_bleu_stats *stats,
                                   char *buf, size_t cap, nu_error *err);

/* ------------------------------------------------------------------------ */
/* Text metrics: ROUGE                                                      */
/* ------------------------------------------------------------------------ */

/* ROUGE (Lin, 2004) of a prediction against targets, as Google's
 * rouge-score (rouge_score.rouge_scorer) computes it. Its tokenizer
 * lowercases the text (Python's str.lower()), keeps runs of a-z and 0-9 as
 * tokens (everything else separates them) and, with the stemmer, stems the
 * tokens longer than three letters with NLTK's Porter stemmer
 * (PorterStemmer's default NLTK_EXTENSIONS mode). Types:
 *   1..9 (rouge1..rouge9): clipped n-gram overlap; precision = overlap /
 *     max(prediction n-grams, 1), recall = overlap / max(target n-grams, 1);
 *   NU_ROUGE_L (rougeL): the longest common subsequence of the token lists
 *     over their lengths;
 *   NU_ROUGE_LSUM (rougeLsum): summary-level LCS over the texts' lines (a
 *     newline ends a sentence): for each target sentence the union of its
 *     LCS with every prediction sentence, each union token a hit while both
 *     texts have an unused copy of it; over the texts' token counts.
 * F-measure = 2PR / (P + R) (0 when both are 0). With several targets each
 * type takes the target of highest F-measure (the first of equals), as
 * score_multi does. */
#define NU_ROUGE_L 10
#define NU_ROUGE_LSUM 11

typedef struct nu_rouge_score {
    double precision, recall, fmeasure;
} nu_rouge_score;

/* The type of a name: "rouge1" .. "rouge9", "rougeL", "rougeLsum"
 * (NU_ERR_INVALID_ARG otherwise: rouge-score refuses "rougen", "rouge0"). */
NU_API nu_status nu_rouge_type(const char *name, int32_t *type, nu_error *err);

/* out[i] = the score of types[i] for the prediction against the n_targets
 * targets (UTF-8, NUL-terminated; NULL counts as empty). */
NU_API nu_status nu_rouge(const int32_t *types, int32_t n_types, bool stemmer,
                          const char *const *targets, int32_t n_targets, const char *prediction,
                          nu_rouge_score *out, nu_error *err);

/* Bootstrap confidence intervals of the mean of n scores, as rouge-score's
 * BootstrapAggregator: n_samples resamples (n draws with replacement each,
 * from a generator seeded by seed; rouge-score's default is 1000), and per
 * measure the (1-confidence)/2, 50% and (1+confidence)/2 percentiles of the
 * resample means (numpy's linear percentile). The draws are nucleus's own,
 * so low and high agree with rouge-score's to the bootstrap's noise, not to
 * the digit. */
typedef struct nu_rouge_interval {
    nu_rouge_score low, mid, high;
} nu_rouge_interval;

NU_API nu_status nu_rouge_bootstrap(const nu_rouge_score *scores, int64_t n, double confidence,
                                    int32_t n_samples, uint64_t seed, nu_rouge_interval *out,
                                    nu_error *err);

/* ------------------------------------------------------------------------ */
/* Machine                                                                  */
/* ------------------------------------------------------------------------ */

/* The SIMD level the kernels use on this CPU: "avx512", "avx2" or "scalar"
 * (static). NUCLEUS_SIMD=scalar|avx2|avx512 in the environment lowers it. */
NU_API const char *nu_simd_level(void);
/* Whether the CPU's AMX tile units can be used by this process: "absent ...",
 * "reported by CPUID but the OS does not enable ...", "enabled but ...
 * refused permission" or "available ...". Asking requests the Linux
 * permission the first time. No kernel uses AMX yet: every level runs
 * without it. Static. */
NU_API const char *nu_amx_status(void);
/* Wall-clock milliseconds from a monotonic clock. */
NU_API double nu_time_ms(void);

#ifdef __cplusplus
}
#endif
#endif /* NUCLEUS_H */
