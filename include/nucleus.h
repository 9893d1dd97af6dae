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

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum nu_status {
    NU_OK = 0,
    NU_ERR_IO,            /* a file could not be opened, read or mapped */
    NU_ERR_FORMAT,        /* a file or input is malformed */
    NU_ERR_UNSUPPORTED,   /* well-formed, but not something nucleus handles */
    NU_ERR_NOMEM,         /* an allocation failed */
    NU_ERR_INVALID_ARG,   /* a parameter is out of range or inconsistent */
    NU_ERR_CONTEXT_FULL,  /* the KV cache has no room for the batch */
    NU_ERR_BUFFER_SMALL,  /* an output buffer is too small; the size needed is reported */
    NU_ERR_NETWORK,       /* a download failed */
    NU_ERR_CHECKSUM,      /* downloaded data does not match its size or checksum */
    NU_ERR_CANCELLED,     /* a callback asked to stop */
} nu_status;

typedef struct nu_error {
    nu_status status;
    char message[512];
} nu_error;

/* A short constant name for a status ("format error", ...). */
const char *nu_status_name(nu_status status);

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
nu_model_params nu_model_default_params(void);

/* Memory-maps a GGUF file, validates it and prepares the model. */
nu_status nu_model_load(const char *path, const nu_model_params *params, nu_model **out,
                        nu_error *err);
void nu_model_free(nu_model *model);

/* Basic shape. */
const char *nu_model_arch(const nu_model *model); /* general.architecture */
const char *nu_model_name(const nu_model *model); /* general.name or "" */
int32_t nu_model_n_vocab(const nu_model *model);
int32_t nu_model_n_ctx_train(const nu_model *model);
int32_t nu_model_n_embd(const nu_model *model);
int32_t nu_model_n_layer(const nu_model *model);
uint32_t nu_model_gguf_version(const nu_model *model);

/* Metadata, in file order. The value is rendered as text (arrays shortened
 * to their first max_items items); returns the length the full rendering
 * needs, like snprintf. */
int64_t nu_model_meta_count(const nu_model *model);
const char *nu_model_meta_key(const nu_model *model, int64_t i);
const char *nu_model_meta_type(const nu_model *model, int64_t i); /* "u32", "arr[str,32000]", ... */
size_t nu_model_meta_value(const nu_model *model, int64_t i, char *buf, size_t cap,
                           int max_items);

/* Tensors, in file order. */
typedef struct nu_tensor_info {
    const char *name;
    const char *type_name; /* "f32", "q4_0", ... */
    uint32_t n_dims;
    int64_t ne[4];         /* ne[0] is the row length */
    uint64_t n_elements;
    uint64_t n_bytes;
    uint64_t file_offset;  /* absolute offset of the data in the file */
} nu_tensor_info;

int64_t nu_model_tensor_count(const nu_model *model);
bool nu_model_tensor(const nu_model *model, int64_t i, nu_tensor_info *out);

/* Total parameters and bytes of tensor data. */
uint64_t nu_model_n_params(const nu_model *model);
uint64_t nu_model_weight_bytes(const nu_model *model);

/* What a context with these sizes will need, in bytes. */
typedef struct nu_memory_estimate {
    uint64_t weights;   /* mapped tensor data */
    uint64_t kv_cache;  /* keys and values for n_ctx cells */
    uint64_t scratch;   /* activations and logits for one batch */
    uint64_t total;
} nu_memory_estimate;

typedef enum nu_kv_type { NU_KV_F32 = 0, NU_KV_F16 = 1 } nu_kv_type;

nu_status nu_model_memory(const nu_model *model, int32_t n_ctx, int32_t n_batch,
                          int32_t n_seq, nu_kv_type kv_type, nu_memory_estimate *out,
                          nu_error *err);

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
nu_status nu_tokenize(const nu_model *model, const char *text, size_t len, unsigned flags,
                      int32_t *tokens, size_t cap, size_t *n_tokens, nu_error *err);

/* The vocabulary text of a token, as stored ("▁the", "<0x0A>", "<s>"). */
const char *nu_token_text(const nu_model *model, int32_t token);
nu_token_type nu_token_get_type(const nu_model *model, int32_t token);

/* The bytes a token stands for when text is produced. Control tokens give
 * nothing unless special is true. Returns the byte count; writes at most cap. */
size_t nu_token_to_bytes(const nu_model *model, int32_t token, bool special, char *buf,
                         size_t cap);

int32_t nu_token_bos(const nu_model *model); /* -1 when the model has none */
int32_t nu_token_eos(const nu_model *model);
bool nu_token_is_eog(const nu_model *model, int32_t token); /* ends generation */
bool nu_model_adds_bos(const nu_model *model);

/* Incremental detokenizer for streaming: bytes come out only as whole UTF-8
 * characters, so a character split over several tokens is never emitted
 * half-way. The leading space the tokenizer added is removed from the first
 * piece when strip_leading_space is set. */
typedef struct nu_detokenizer {
    const nu_model *model;
    bool special;              /* render control tokens */
    bool strip_leading_space;  /* drop one leading space of the first text piece */
    bool started;
    unsigned char pending[8];  /* bytes of an unfinished UTF-8 character */
    size_t n_pending;
} nu_detokenizer;

void nu_detokenizer_init(nu_detokenizer *d, const nu_model *model, bool special,
                         bool strip_leading_space);
/* Appends the text of token; returns how many bytes are ready in out (at most
 * cap; 16 + the longest token is always enough). */
size_t nu_detokenizer_push(nu_detokenizer *d, int32_t token, char *out, size_t cap);
/* Whatever is still pending (an incomplete character, replaced by U+FFFD). */
size_t nu_detokenizer_flush(nu_detokenizer *d, char *out, size_t cap);

/* ------------------------------------------------------------------------ */
/* Contexts and the batched forward pass                                    */
/* ------------------------------------------------------------------------ */

typedef struct nu_context nu_context;

typedef struct nu_context_params {
    int32_t n_ctx;     /* KV cache cells shared by all sequences (0: the model's training length) */
    int32_t n_batch;   /* most entries one nu_decode call may take */
    int32_t n_seq_max; /* sequences that may live in the cache at once (1..64) */
    int32_t n_threads; /* worker threads for the forward pass (0: all cores) */
    nu_kv_type kv_type;
} nu_context_params;

/* Defaults: n_ctx 0 capped at 4096, n_batch 512, n_seq_max 1, n_threads 0, f16 cache
 * (half the memory of f32; attention then multiplies in half precision). */
nu_context_params nu_context_default_params(void);

nu_status nu_context_new(const nu_model *model, const nu_context_params *params,
                         nu_context **out, nu_error *err);
void nu_context_free(nu_context *ctx);
const nu_model *nu_context_model(const nu_context *ctx);
int32_t nu_context_n_ctx(const nu_context *ctx);
int32_t nu_context_n_threads(const nu_context *ctx);

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
nu_status nu_decode(nu_context *ctx, const nu_batch_entry *entries, int32_t n,
                    nu_error *err);

/* Logits (n_vocab floats) of the i-th entry of the last nu_decode, or NULL
 * if that entry did not ask for them. Valid until the next nu_decode. */
const float *nu_logits(const nu_context *ctx, int32_t i);

/* KV cache per sequence. Positions are [p0, p1); p1 < 0 means "to the end". */
void nu_kv_clear(nu_context *ctx);
void nu_kv_seq_remove(nu_context *ctx, int32_t seq, int32_t p0, int32_t p1);
/* dst shares src's cells in [p0, p1) without copying them. */
void nu_kv_seq_copy(nu_context *ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1);
/* The largest position cached for seq, or -1. */
int32_t nu_kv_seq_pos_max(const nu_context *ctx, int32_t seq);
/* Cells in use. */
int32_t nu_kv_used(const nu_context *ctx);

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
 * logits or probabilities, or select. */
typedef struct nu_candidates {
    nu_candidate *data;
    size_t size;
    bool sorted;      /* by logit, descending */
    int32_t selected; /* index into data of the chosen token, or -1 */
} nu_candidates;

typedef enum nu_stage_kind {
    NU_STAGE_TOP_K,
    NU_STAGE_TOP_P,
    NU_STAGE_MIN_P,
    NU_STAGE_TEMPERATURE,
    NU_STAGE_COUNT_
} nu_stage_kind;

#define NU_MAX_STAGES 16

typedef struct nu_sampler_params {
    float temperature; /* 0: greedy (argmax) */
    int32_t top_k;     /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
    uint64_t seed;
    /* Order in which the filtering stages run; the last step is always the
     * draw (or argmax when temperature is 0). n_stages 0 means the default:
     * top_k, top_p, min_p, temperature. */
    nu_stage_kind order[NU_MAX_STAGES];
    int32_t n_stages;
} nu_sampler_params;

/* Defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, seed 0xC0FFEE. */
nu_sampler_params nu_sampler_default_params(void);

/* Checks every field; returns NU_ERR_INVALID_ARG naming the first bad one. */
nu_status nu_sampler_params_check(const nu_sampler_params *params, nu_error *err);

typedef struct nu_sampler nu_sampler;

nu_status nu_sampler_new(const nu_sampler_params *params, int32_t n_vocab, nu_sampler **out,
                         nu_error *err);
void nu_sampler_free(nu_sampler *s);
/* Picks the next token from raw logits (n_vocab floats). */
int32_t nu_sampler_sample(nu_sampler *s, const float *logits);
/* Tells the sampler a token was appended (for stages that track history). */
void nu_sampler_accept(nu_sampler *s, int32_t token);
/* Restarts the RNG from a seed. */
void nu_sampler_reseed(nu_sampler *s, uint64_t seed);

/* The chain's stages over a candidate array, for callers building their own
 * loop and for tests. Probabilities are recomputed with softmax as needed. */
void nu_candidates_softmax(nu_candidates *c);
void nu_stage_top_k(nu_candidates *c, int32_t k);
void nu_stage_top_p(nu_candidates *c, float p);
void nu_stage_min_p(nu_candidates *c, float p);
void nu_stage_temperature(nu_candidates *c, float t);

/* A seeded random source (xoshiro256**), the one samplers use. */
typedef struct nu_rng {
    uint64_t s[4];
} nu_rng;
void nu_rng_seed(nu_rng *rng, uint64_t seed);
uint64_t nu_rng_next(nu_rng *rng);
double nu_rng_uniform(nu_rng *rng); /* [0, 1) with 53 random bits */

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

/* "length", "eos", "stop", "context", "cancelled" (or "none"). */
const char *nu_finish_reason_name(nu_finish_reason r);

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
    float logprob;    /* -INFINITY when the chain had removed the token */
    int32_t n_top;
    nu_top_logprob top[NU_MAX_TOP_LOGPROBS];
    size_t text_offset; /* where the token's text starts in the result text */
} nu_token_logprob;

/* Called with each piece of text of sample `index` as soon as it is final
 * (never part of a stop string). Return false to stop that sample. */
typedef bool (*nu_text_callback)(void *user, int32_t index, const char *text, size_t len);

typedef struct nu_generate_params {
    int32_t n_predict;       /* most tokens to generate (-1: until EOS or context end) */
    bool add_bos;            /* add BOS when the model asks for it */
    bool parse_special;      /* special-token text in the prompt becomes its id */
    bool echo;               /* the prompt's text (and log-probs) come first in the result */
    nu_sampler_params sampling;
    int32_t n;               /* samples of this prompt, sharing its cache (1..64) */
    const char *const *stop; /* stop strings: the text ends before the first match */
    int32_t n_stop;
    bool include_stop;       /* keep the matched stop string in the text */
    const int32_t *stop_tokens; /* token ids that end generation (besides EOS) */
    int32_t n_stop_tokens;
    int32_t logprobs;        /* -1: none; 0..20: the token's log-prob and this many alternatives */
    bool logprobs_after_chain;
    nu_text_callback on_text;
    void *user;
} nu_generate_params;

/* Defaults: n_predict 128, add_bos, n 1, logprobs -1, sampler defaults. */
nu_generate_params nu_generate_default_params(void);

/* Checks every field; NU_ERR_INVALID_ARG names the first bad one. */
nu_status nu_generate_params_check(const nu_generate_params *p, nu_error *err);

/* What one sample produced. The arrays belong to the result: release them
 * with nu_generate_result_free. */
typedef struct nu_generate_result {
    int32_t index;        /* which sample of its prompt */
    int32_t n_prompt;     /* prompt tokens, BOS included */
    int32_t n_generated;  /* tokens sampled (an ending EOS not counted) */
    double prompt_ms;     /* prompt processing wall time */
    double generate_ms;   /* generation wall time (after the prompt) */
    nu_finish_reason finish;
    char *text;           /* NUL-terminated: the prompt's text first when echo */
    size_t text_len;
    int32_t *tokens;      /* generated tokens */
    int32_t n_tokens;
    nu_token_logprob *logprobs; /* prompt tokens (echo) then generated ones, or NULL */
    int32_t n_logprobs;
    int32_t n_prompt_logprobs;
    double sum_logprob;   /* total model log-prob of the generated tokens */
} nu_generate_result;

void nu_generate_result_free(nu_generate_result *r);

/* Tokenizes the prompt and generates params->n samples (results must hold
 * that many), sending text to the callback as it is produced. Cached
 * positions of an earlier call that match the prompt's first tokens are
 * reused, not recomputed (the result is the same either way). */
nu_status nu_generate(nu_context *ctx, const char *prompt, const nu_generate_params *params,
                      nu_generate_result *results, nu_error *err);

/* A scheduler runs many requests together: every step makes one forward
 * batch from the next token of each generating sample and chunks of the
 * prompts still being read, so a long prompt does not stall the others.
 * Requests wait when the context has no free sequence for them. A sample's
 * tokens do not depend on what else runs beside it. */
typedef struct nu_scheduler nu_scheduler;

nu_status nu_scheduler_new(nu_context *ctx, nu_scheduler **out, nu_error *err);
void nu_scheduler_free(nu_scheduler *s);

/* Queues a prompt (text, or tokens when text is NULL). results (params->n of
 * them) are filled as it runs and must stay valid until it is done; params,
 * its stop strings and token arrays are copied. *id names the request. */
nu_status nu_scheduler_submit(nu_scheduler *s, const char *text, const int32_t *tokens,
                              size_t n_tokens, const nu_generate_params *params,
                              nu_generate_result *results, int32_t *id, nu_error *err);

/* Runs one batch. *active tells whether requests remain. An error that
 * concerns one request finishes that request (NU_FINISH_CANCELLED with its
 * message in the result text) rather than failing the step. */
nu_status nu_scheduler_step(nu_scheduler *s, bool *active, nu_error *err);

/* Runs steps until every request is done. */
nu_status nu_scheduler_run(nu_scheduler *s, nu_error *err);

bool nu_scheduler_is_done(const nu_scheduler *s, int32_t id);
/* Stops a request; its results say NU_FINISH_CANCELLED. */
void nu_scheduler_cancel(nu_scheduler *s, int32_t id);
/* Requests waiting for a sequence, and samples generating. */
int32_t nu_scheduler_queued(const nu_scheduler *s);
int32_t nu_scheduler_running(const nu_scheduler *s);

/* ------------------------------------------------------------------------ */
/* Models by name                                                           */
/* ------------------------------------------------------------------------ */

/* Progress of a download: bytes done so far of total (0 when unknown). */
typedef void (*nu_progress_callback)(void *user, uint64_t done, uint64_t total);

/* The cache directory for downloaded models: $NUCLEUS_CACHE, else
 * $XDG_CACHE_HOME/nucleus, else $HOME/.cache/nucleus. */
nu_status nu_cache_dir(char *buf, size_t cap, nu_error *err);

/* True for references nu_resolve_model understands but that are not paths
 * ("hf:ORG/REPO/FILE.gguf"). */
bool nu_is_model_ref(const char *ref);

/* Turns a model reference into a local path. A path is returned as is; an
 * "hf:ORG/REPO/FILE" reference is looked up in the cache and downloaded
 * there if missing (resuming a partial download), its size and SHA-256
 * checked against what the server announces. The server is
 * https://huggingface.co unless $NUCLEUS_HF_ENDPOINT names another. */
nu_status nu_resolve_model(const char *ref, bool allow_download, nu_progress_callback progress,
                           void *user, char *path, size_t cap, nu_error *err);

/* ------------------------------------------------------------------------ */
/* Machine                                                                  */
/* ------------------------------------------------------------------------ */

/* The SIMD level the kernels use on this CPU: "avx512", "avx2" or "scalar".
 * NUCLEUS_SIMD=scalar|avx2|avx512 in the environment lowers it. */
const char *nu_simd_level(void);
/* Wall-clock milliseconds from a monotonic clock. */
double nu_time_ms(void);

#ifdef __cplusplus
}
#endif
#endif /* NUCLEUS_H */
