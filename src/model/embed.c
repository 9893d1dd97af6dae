/* embed.c - nu_embed: a text's hidden states pooled into one vector (mean,
 * last token, first token, or what the file says), optionally scaled to unit
 * length: what embedding endpoints return. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "error.h"

/* The file's <arch>.pooling_type (0 none, 1 mean, 2 cls, 3 last, 4 rank, as
 * GGUF files number them) as a pooling, or an error naming what it cannot do. */
static nu_status model_pooling(const nu_model *m, nu_pooling *out, nu_error *err) {
    *out = NU_POOLING_MEAN;
    if (m->hp.pooling < 0) return NU_OK; /* not given: mean */
    switch (m->hp.pooling) {
    case 0:
    case 1: *out = NU_POOLING_MEAN; return NU_OK;
    case 2: *out = NU_POOLING_FIRST; return NU_OK;
    case 3: *out = NU_POOLING_LAST; return NU_OK;
    }
    return nu_fail(err, NU_ERR_UNSUPPORTED,
                   "the model's pooling type %d (%s) is not supported; give mean, last or first",
                   m->hp.pooling, m->hp.pooling == 4 ? "rank" : "unknown");
}

nu_status nu_embed(nu_context *c, const int32_t *tokens, int32_t n, nu_pooling pooling,
                   bool normalize, float *out, nu_error *err) {
    const nu_model *m = c->model;
    const int32_t d = m->hp.n_embd, nb = c->params.n_batch;
    if (!c->params.embeddings)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the context was not made for embeddings");
    if (n < 1 || n > c->params.n_ctx)
        return nu_fail(err, NU_ERR_INVALID_ARG, "%d tokens to embed (must be 1..%d, the context)",
                       n, c->params.n_ctx);
    if (pooling > NU_POOLING_FIRST)
        return nu_fail(err, NU_ERR_INVALID_ARG, "unknown pooling %d", (int)pooling);
    nu_status st;
    if (pooling == NU_POOLING_MODEL && (st = model_pooling(m, &pooling, err))) return st;
    nu_kv_seq_remove(c, 0, 0, -1);
    double *sum = calloc((size_t)d, sizeof *sum);
    nu_batch_entry *batch = malloc((size_t)(n < nb ? n : nb) * sizeof *batch);
    if (!sum || !batch) {
        free(sum), free(batch);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    }
    for (int32_t at = 0; at < n; at += nb) {
        int32_t k = n - at < nb ? n - at : nb;
        for (int32_t i = 0; i < k; i++) {
            int32_t pos = at + i;
            /* every row for the mean, else only the row that is the result */
            bool want = pooling == NU_POOLING_MEAN ||
                        (pooling == NU_POOLING_LAST && pos == n - 1) ||
                        (pooling == NU_POOLING_FIRST && pos == 0);
            batch[i] = (nu_batch_entry){.token = tokens[pos], .pos = pos, .seq = 0, .logits = want};
        }
        if ((st = nu_decode(c, batch, k, err))) break;
        for (int32_t i = 0; i < k; i++) {
            const float *h = nu_embedding(c, i);
            if (!h) continue;
            for (int32_t j = 0; j < d; j++) sum[j] += h[j];
        }
    }
    nu_kv_seq_remove(c, 0, 0, -1);
    if (st == NU_OK) {
        double scale = pooling == NU_POOLING_MEAN ? 1.0 / n : 1.0, norm = 0;
        for (int32_t j = 0; j < d; j++) norm += sum[j] * scale * sum[j] * scale;
        norm = normalize && norm > 0 ? 1.0 / sqrt(norm) : 1.0;
        for (int32_t j = 0; j < d; j++) out[j] = (float)(sum[j] * scale * norm);
    }
    free(sum);
    free(batch);
    return st;
}
