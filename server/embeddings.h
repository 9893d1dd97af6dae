/* embeddings.h - POST /v1/embeddings, and the embedding work Ollama's
 * /api/embed shares: texts (or token ids) to the model's pooled hidden
 * states (nu_embed: mean, last or first token, or the file's pooling),
 * normalised to unit length unless asked otherwise.
 *
 * Each loaded model makes one embedding context (params.embeddings) when
 * first asked, holding as many tokens as one of its slots; requests take
 * turns on it (one at a time per model), each input read in batches of
 * --batch tokens. The request's inputs are checked whole (types, empty
 * texts, token ids, lengths) before any is computed. */
#ifndef NU_SRV_EMBEDDINGS_H
#define NU_SRV_EMBEDDINGS_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "http.h"

/* The most inputs one request may embed. */
#define SRV_EMBED_MAX_INPUTS 2048

/* A request's inputs as tokens, then their vectors. */
typedef struct srv_embed_batch {
    int32_t **tokens; /* per input */
    int32_t *n_tokens;
    int32_t n;
    int32_t n_embd;
    float *vectors;    /* n x n_embd, after srv_embed_run */
    int64_t total;     /* tokens in all the inputs */
    int32_t truncated; /* inputs cut to the context (only when asked to) */
} srv_embed_batch;

/* Reads `input` (named param in errors): a string, an array of strings or,
 * with allow_tokens, an array of token ids or of arrays of them. Texts get
 * the model's BOS. An input longer than the model's context is an error
 * (413), or with truncate is cut to it. Empty inputs are refused. */
bool srv_embed_read(const srv_model *m, const cJSON *input, const char *param, bool allow_tokens,
                    bool truncate, srv_embed_batch *b, srv_error *err);

/* Embeds every input on m (held) with the given pooling. */
bool srv_embed_run(srv_model *m, nu_pooling pooling, bool normalize, srv_embed_batch *b,
                   srv_error *err);

void srv_embed_batch_free(srv_embed_batch *b);

/* Reads a "pooling" member ("model", "mean", "last", "first"). */
bool srv_embed_pooling(const cJSON *v, nu_pooling *out, srv_error *err);

/* POST /v1/embeddings. */
enum MHD_Result srv_handle_embeddings(srv_state *s, struct MHD_Connection *c, srv_conn *cs);

#endif
