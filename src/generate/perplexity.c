/* perplexity.c - nu_perplexity: windows read from scratch, the tokens from a
 * window position on scored by their log-probability in double precision. */
#include <math.h>
#include <stdlib.h>

#include "nucleus.h"
#include "error.h"

nu_perplexity_params nu_perplexity_default_params(void) {
    nu_perplexity_params p = {.n_window = 0, .score_from = 0, .on_window = NULL, .user = NULL};
    return p;
}

/* -ln softmax(logits)[token], the log-sum-exp taken in double. */
static double token_nll(const float *logits, int32_t n_vocab, int32_t token) {
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - (double)max);
    return log(sum) - ((double)logits[token] - (double)max);
}

static void finish(nu_perplexity_result *r, double sum_sq) {
    if (r->n_scored == 0) return;
    const double n = (double)r->n_scored, mean = r->nll / n;
    const double var = n > 1 ? (sum_sq / n - mean * mean) * n / (n - 1) : 0;
    r->perplexity = exp(mean);
    r->stderr_ppl = r->perplexity * sqrt(var > 0 ? var : 0) / sqrt(n);
}

nu_status nu_perplexity(nu_context *ctx, const int32_t *tokens, int64_t n_tokens,
                        const nu_perplexity_params *params, nu_perplexity_result *out,
                        nu_error *err) {
    nu_perplexity_params p = params ? *params : nu_perplexity_default_params();
    const int32_t n_ctx = nu_context_n_ctx(ctx), n_vocab = nu_model_n_vocab(nu_context_model(ctx));
    const int32_t n_batch = nu_context_n_batch(ctx);
    *out = (nu_perplexity_result){0};
    if (p.n_window == 0) p.n_window = n_ctx;
    if (p.n_window < 2 || p.n_window > n_ctx)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_window %d must be 2..%d (the context)",
                       p.n_window, n_ctx);
    if (p.score_from == 0) p.score_from = p.n_window / 2;
    if (p.score_from < 1 || p.score_from >= p.n_window)
        return nu_fail(err, NU_ERR_INVALID_ARG, "score_from %d must be 1..%d", p.score_from,
                       p.n_window - 1);
    if (n_tokens < 2)
        return nu_fail(err, NU_ERR_INVALID_ARG, "perplexity needs at least 2 tokens, got %lld",
                       (long long)n_tokens);
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "token %lld is %d, not in the vocabulary (0..%d)", (long long)i,
                           tokens[i], n_vocab - 1);
    nu_batch_entry *batch = malloc(sizeof *batch * (size_t)n_batch);
    if (!batch) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    nu_status st = NU_OK;
    double sum_sq = 0;
    for (int64_t w0 = 0; w0 < n_tokens && st == NU_OK; w0 += p.n_window) {
        const int32_t len = (int32_t)(n_tokens - w0 < p.n_window ? n_tokens - w0 : p.n_window);
        if (len <= p.score_from) break; /* nothing to score in this window */
        nu_kv_seq_remove(ctx, 0, 0, -1);
        for (int32_t b0 = 0; b0 < len && st == NU_OK; b0 += n_batch) {
            const int32_t k = len - b0 < n_batch ? len - b0 : n_batch;
            for (int32_t i = 0; i < k; i++) {
                const int32_t pos = b0 + i;
                /* the logits after pos predict the token at pos + 1 */
                batch[i] = (nu_batch_entry){tokens[w0 + pos], pos, 0,
                                            pos + 1 >= p.score_from && pos + 1 < len};
            }
            if ((st = nu_decode(ctx, batch, k, err)) != NU_OK) break;
            for (int32_t i = 0; i < k; i++) {
                if (!batch[i].logits) continue;
                const double s = token_nll(nu_logits(ctx, i), n_vocab, tokens[w0 + b0 + i + 1]);
                out->nll += s;
                sum_sq += s * s;
                out->n_scored++;
            }
        }
        if (st) break;
        out->n_windows++;
        finish(out, sum_sq);
        if (p.on_window && !p.on_window(out->n_windows - 1, out, p.user))
            st = nu_fail(err, NU_ERR_CANCELLED, "stopped after %d windows", out->n_windows);
    }
    nu_kv_seq_remove(ctx, 0, 0, -1);
    free(batch);
    return st;
}
