/* context.h - per-user state over a shared model (internal): the KV cache,
 * the thread pool and every scratch buffer the forward pass needs, all sized
 * once when the context is made. */
#ifndef NU_CONTEXT_H
#define NU_CONTEXT_H

#include "threadpool.h"
#include "kv_cache.h"
#include "model.h"

/* Activations for up to n_batch entries. */
/* Query heads that share a key/value head and are attended together, each
 * cached row read and converted once for all of them. */
#define NU_ATTN_HEADS 4

typedef struct nu_scratch {
    float *x;           /* [n_batch][n_embd] residual stream */
    float *xb;          /* [n_batch][max(n_embd, q_dim)] normalised input / attention output */
    float *q;           /* [n_batch][max(n_embd, q_dim)] queries, then block outputs */
    float *k, *v;       /* [n_batch][kv_dim] */
    float *gate;        /* [n_batch][n_ff] */
    float *up;          /* [n_batch][n_ff] */
    float *rope;        /* [n_batch][n_rot] cos, sin pairs */
    float *scores;      /* [n_threads][NU_ATTN_HEADS][n_ctx] attention weights */
    void *matmul;       /* activation conversion for nu_matmul */
    int32_t *cells;     /* [n_batch] cell of each entry */
    int32_t *seq_cells; /* [n_seq_max][n_ctx] cells of each sequence by position */
    int32_t seq_count[NU_MAX_SEQ];
    int32_t *out_rows; /* [n_batch] entry -> logits row or -1 */
} nu_scratch;

struct nu_context {
    const nu_model *model;
    nu_context_params params;
    nu_kv_cache kv;
    nu_threadpool *pool;
    nu_scratch s;
    float *logits;      /* [logits_cap][n_vocab] */
    int32_t logits_cap; /* rows allocated (grows to the most ever asked for) */
    int32_t n_last;     /* entries of the last decode */
    /* The tokens each sequence holds at positions 0..seq_len-1 (kept by
     * nu_decode and the nu_kv_* calls), so that a new prompt can reuse the
     * cached part it shares with what a sequence already read. */
    int32_t *seq_tokens; /* [n_seq_max][n_ctx] */
    int32_t seq_len[NU_MAX_SEQ];
};

/* Tokens cached contiguously from position 0 for seq, and their count. */
const int32_t *nu_context_seq_tokens(const nu_context *c, int32_t seq, int32_t *n);

/* Bytes of scratch a context of these sizes allocates (for nu_model_memory). */
uint64_t nu_scratch_bytes(const nu_hparams *hp, int32_t n_ctx, int32_t n_batch, int32_t n_seq,
                          int32_t n_threads);

#endif
