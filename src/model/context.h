/* context.h - per-user state over a shared model (internal): the KV cache,
 * the thread pool and every scratch buffer the forward pass needs, all sized
 * once when the context is made. */
#ifndef NU_CONTEXT_H
#define NU_CONTEXT_H

#include "kv_cache.h"
#include "model.h"
#include "threadpool.h"

/* Query heads that share a key/value head and are attended together, each
 * cached row read and converted once for all of them. */
#define NU_ATTN_HEADS NU_VEC_HEADS

/* The widest row each scratch buffer holds, over every layer of a model:
 * one place that both the allocation and the memory estimate read. */
typedef struct nu_scratch_dims {
    int64_t embd; /* n_embd */
    int64_t q;    /* queries: n_head * head_dim */
    int64_t kv;   /* keys: n_head_kv * head_dim */
    int64_t v;    /* values: n_head_kv * head_dim_v */
    int64_t qkv;  /* a fused Q/K/V product's row (0 when no layer has one) */
    int64_t attn; /* the attention output: n_head * head_dim_v */
    int64_t ff;   /* the FFN's hidden row (dense or one expert) */
    int64_t up;   /* the up product's row: 2 ff when gate and up are fused */
    int64_t rot;  /* rotated dimensions of the widest RoPE */
    int64_t experts, experts_used;
    int64_t pl; /* per-layer embeddings: n_embd_pl (their rows hold pl x layers) */
    int64_t layers;
    int64_t vocab;
    int64_t q2;        /* queries with their gates (Qwen 3.5's attention), else 0 */
    int64_t ssm_ch;    /* a Gated DeltaNet's convolution channels (0: none) */
    int64_t ssm_inner; /* its value heads x head size */
    int64_t ssm_heads; /* its value heads */
} nu_scratch_dims;

void nu_scratch_dims_of(const nu_model *m, nu_scratch_dims *d);

/* Activations for up to n_batch entries. */
typedef struct nu_scratch {
    float *x;      /* [n_batch][embd] residual stream */
    float *xb;     /* [n_batch][max(embd, attn)] normalised input / attention output */
    float *xn;     /* [n_batch][embd] the attention's input norm kept for a parallel FFN */
    float *q;      /* [n_batch][max(embd, q)] queries, then block outputs */
    float *k, *v;  /* [n_batch][kv], [n_batch][v] */
    float *qkv;    /* [n_batch][qkv] a fused Q/K/V product before it is split */
    float *gate;   /* [n_batch][ff], with experts [n_batch * experts_used][ff] */
    float *up;     /* [n_batch][up], likewise */
    float *rope;   /* [n_rope][n_batch][rot] cos, sin pairs */
    float *scores; /* [n_threads][NU_ATTN_HEADS][n_ctx] attention weights */
    void *matmul;  /* activation conversion for nu_matmul */
    /* mixture of experts */
    float *router;       /* [n_batch][experts] router logits */
    int32_t *sel;        /* [n_batch][experts_used] chosen experts */
    float *sel_w;        /* [n_batch][experts_used] their weights */
    int32_t *by_expert;  /* [n_batch * experts_used] (entry, choice) pairs grouped by expert */
    int32_t *pair_row;   /* [n_batch * experts_used] each pair's row in by_expert's order */
    int32_t *expert_end; /* [experts] end of each expert's group in by_expert */
    const float *moe_in; /* the experts' input rows this layer (xb, or xn beside a dense FFN) */
    float *xr;           /* [n_batch][embd] the router's input beside a dense FFN */
    float *yd;           /* [n_batch][embd] the dense branch's output beside experts */
    float *pl;           /* [n_batch][n_embd_pl * n_layer] per-layer embedding inputs */
    float *plt;          /* [n_embd_pl * n_layer] one token's row of the per-layer table */
    float *plg;          /* [n_batch][n_embd_pl] the per-layer gate */
    float *xg;           /* [n_batch * experts_used][embd] the rows each expert sees */
    float *yg;           /* [n_batch * experts_used][embd] their outputs */
    int32_t *cells;      /* [n_batch] cell of each entry */
    int32_t *seq_cells;  /* [n_seq_max][n_ctx] cells of each sequence by position */
    int32_t seq_count[NU_MAX_SEQ];
    int32_t *out_rows; /* [n_batch] entry -> logits row or -1 */
    float *qg;         /* [n_batch][q2] each head's query then its gate (q_gate) */
    /* recurrent layers (recurrent.c) */
    float *ssm_x;             /* [n_batch][ssm_ch] the convolution's input, then its output */
    float *ssm_z;             /* [n_batch][ssm_inner] the output gate */
    float *ssm_o;             /* [n_batch][ssm_inner] the delta rule's output */
    float *ssm_g, *ssm_b;     /* [n_batch][ssm_heads] the decay's log, the write strength */
    int32_t *rs_src, *rs_dst; /* [n_batch] state slot each entry reads (-1: zeros), writes */
    int32_t *rs_order;        /* [n_batch] entries grouped by sequence, batch order in each */
    int32_t rs_groups;        /* sequences in the batch */
    int32_t rs_group_end[NU_MAX_SEQ], rs_group_seq[NU_MAX_SEQ];
    nu_batch_entry *replay; /* [n_batch] positions read again to rebuild a state */
} nu_scratch;

struct nu_context {
    const nu_model *model;
    nu_context_params params;
    nu_kv_cache kv;
    nu_threadpool *pool;
    nu_scratch s;
    nu_scratch_dims dims;
    /* each RoPE's frequency factors for this context (LongRoPE picks the
     * long or the short set by the context size) */
    const float *rope_factors[NU_MAX_ROPES];
    float *logits;      /* [logits_cap][n_vocab], or [logits_cap][n_embd] hidden states with
                         * params.embeddings */
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
uint64_t nu_scratch_bytes(const nu_model *m, int32_t n_ctx, int32_t n_batch, int32_t n_seq,
                          int32_t n_threads);

#endif
