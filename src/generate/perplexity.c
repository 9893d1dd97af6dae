/* perplexity.c - nu_perplexity and nu_kl_divergence: a text read in
 * windows from scratch, the tokens from a window position on scored by
 * their log-probability.
 *
 * Two ways to cut the text (nu_perplexity_mode):
 *   chunks (llama-perplexity's): consecutive chunks of n tokens, the last
 *     partial one left out; each chunk's first token replaced by BOS when the
 *     model adds one; the logits at positions n/2 .. n-2 score the tokens at
 *     n/2+1 .. n-1. With the same file and -c this is llama-perplexity's
 *     figure.
 *   windows: the tokens as they are, every window scoring from score_from;
 *     a last shorter window counts.
 *
 * KL-divergence follows llama-perplexity's --kl-divergence-base /
 * --kl-divergence: the base run writes every scored row's log-probs to a
 * file in llama.cpp's format (so the files of either program serve the
 * other), and the second run compares its own distribution with the file's
 * at each of those rows:
 *   file   "_logits_", uint32 n_ctx, int32 n_vocab, int32 n_chunk, the
 *          n_chunk * n_ctx tokens (int32), then per chunk n_ctx - 1 - n_ctx/2
 *          rows of nv = 2 ceil(n_vocab/2) + 4 uint16: the floats scale and
 *          min (the row's smallest log-prob kept, at most 16 below the top),
 *          then per token round((logit - min_logit) / scale), 0 below
 *          min_logit, scale = (max_logit - min_logit) / 65535;
 *   row    KL = sum over the tokens whose base log-prob exceeds -16 of
 *          p_base (ln p_base - ln q); Δp = q(correct) - p_base(correct);
 *          the top tokens agree when both argmaxes (the first of equals)
 *          are the same. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gen_output.h"
#include "nucleus.h"

#define KLD_MAGIC "_logits_"
/* base log-probs below this are left out of the KL sum (llama.cpp's cut) */
#define KLD_LOG_PROB_FLOOR (-16.0f)

nu_perplexity_params nu_perplexity_default_params(void) {
    nu_perplexity_params p = {.mode = NU_PERPLEXITY_CHUNKS};
    return p;
}

/* -ln softmax(logits)[token], the log-sum-exp taken in double. */
static double token_nll(const float *logits, int32_t n_vocab, int32_t token) {
    double log_z;
    nu_logprob_of(logits, n_vocab, token, &log_z);
    return log_z - (double)logits[token];
}

/* The running figures of scores with sum `nll` and sum of squares sum_sq:
 * e^mean and its first-order standard error perplexity * sd / sqrt(n). */
static void finish(nu_perplexity_result *r, double sum_sq) {
    if (r->n_scored == 0) return;
    const double n = (double)r->n_scored, mean = r->nll / n;
    const double var = n > 1 ? (sum_sq / n - mean * mean) * n / (n - 1) : 0;
    r->perplexity = exp(mean);
    r->stderr_ppl = r->perplexity * sqrt(var > 0 ? var : 0) / sqrt(n);
}

/* ---- reading windows ------------------------------------------------------ */

/* Called for every scored row: the logits at a window position and the
 * token that follows. */
typedef nu_status (*row_fn)(void *state, const float *logits, int32_t next, nu_error *err);

/* How the text is cut: windows of `window` tokens starting every `window`,
 * rows scored from position score_from - 1 on, the first token of each
 * replaced by `bos` (>= 0), only full windows when full_only. */
typedef struct cut {
    int32_t window, score_from, bos;
    bool full_only;
} cut;

/* Reads one window (sequence 0 of ctx, cleared first) and hands every
 * scored row to fn. */
static nu_status read_window(nu_context *ctx, const int32_t *tokens, int32_t len, const cut *c,
                             nu_batch_entry *batch, row_fn fn, void *state, nu_error *err) {
    const int32_t n_batch = nu_context_n_batch(ctx);
    nu_kv_seq_remove(ctx, 0, 0, -1);
    for (int32_t b0 = 0; b0 < len; b0 += n_batch) {
        const int32_t k = len - b0 < n_batch ? len - b0 : n_batch;
        for (int32_t i = 0; i < k; i++) {
            const int32_t pos = b0 + i;
            /* the logits after pos predict the token at pos + 1 */
            batch[i] = (nu_batch_entry){pos == 0 && c->bos >= 0 ? c->bos : tokens[pos], pos, 0,
                                        pos + 1 >= c->score_from && pos + 1 < len};
        }
        nu_status st = nu_decode(ctx, batch, k, err);
        if (st) return st;
        for (int32_t i = 0; i < k && st == NU_OK; i++)
            if (batch[i].logits) st = fn(state, nu_logits(ctx, i), tokens[b0 + i + 1], err);
        if (st) return st;
    }
    return NU_OK;
}

/* The common checks of a run. */
static nu_status check_tokens(const nu_model *m, const int32_t *tokens, int64_t n, nu_error *err) {
    const int32_t n_vocab = nu_model_n_vocab(m);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "token %lld is %d, not in the vocabulary (0..%d)", (long long)i,
                           tokens[i], n_vocab - 1);
    return NU_OK;
}

/* The cut params ask for on a text of n tokens. */
static nu_status make_cut(nu_context *ctx, const nu_perplexity_params *p, int64_t n, cut *c,
                          nu_error *err) {
    const int32_t n_ctx = nu_context_n_ctx(ctx);
    *c = (cut){.window = p->n_window ? p->n_window : n_ctx, .bos = -1};
    if (c->window < 2 || c->window > n_ctx)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_window %d must be 2..%d (the context)",
                       c->window, n_ctx);
    if (p->mode == NU_PERPLEXITY_CHUNKS) {
        if (p->score_from)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "score_from is for windows; chunks score their second half");
        c->score_from = c->window / 2 + 1;
        c->full_only = true;
        const nu_model *m = nu_context_model(ctx);
        if (nu_model_adds_bos(m)) c->bos = nu_token_bos(m);
        if (n < c->window)
            return nu_fail(err, NU_ERR_INVALID_ARG,
                           "perplexity over chunks of %d tokens needs at least %d tokens, the "
                           "text has %lld (a smaller window, or windows mode)",
                           c->window, c->window, (long long)n);
        return NU_OK;
    }
    if (p->mode != NU_PERPLEXITY_WINDOWS)
        return nu_fail(err, NU_ERR_INVALID_ARG, "unknown perplexity mode %d", (int)p->mode);
    c->score_from = p->score_from ? p->score_from : c->window / 2;
    if (c->score_from < 1 || c->score_from >= c->window)
        return nu_fail(err, NU_ERR_INVALID_ARG, "score_from %d must be 1..%d", c->score_from,
                       c->window - 1);
    if (n < 2)
        return nu_fail(err, NU_ERR_INVALID_ARG, "perplexity needs at least 2 tokens, got %lld",
                       (long long)n);
    if (n <= c->score_from)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "the text has %lld tokens, and a window scores from position %d on "
                       "(score_from): nothing would be scored; give a longer text or a smaller "
                       "score_from",
                       (long long)n, c->score_from);
    return NU_OK;
}

/* ---- perplexity, and the base file of KL-divergence ----------------------- */

typedef struct ppl_state {
    nu_perplexity_result *out;
    double sum_sq;
    int32_t n_vocab;
    FILE *base;       /* the base file being written, or NULL */
    uint16_t *row;    /* one quantized row of the base file */
    size_t row_words; /* nv */
} ppl_state;

/* llama.cpp's quantized row of log-probs (see the top of the file). */
static void quantize_row(const float *logits, int32_t n_vocab, uint16_t *row) {
    float max = logits[0], min = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) {
        if (logits[i] > max) max = logits[i];
        if (logits[i] < min) min = logits[i];
    }
    if (min < max - 16) min = max - 16;
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += expf(logits[i] - max);
    const float log_sum = (float)log(sum);
    const float min_log_prob = min - max - log_sum;
    const float scale = (max - min) / 65535.f;
    memcpy(row, &scale, sizeof scale);
    memcpy(row + 2, &min_log_prob, sizeof min_log_prob);
    uint16_t *q = row + 4;
    if (scale == 0) {
        memset(q, 0, (size_t)n_vocab * sizeof *q);
        return;
    }
    const float inv = 1 / scale;
    for (int32_t i = 0; i < n_vocab; i++)
        q[i] = logits[i] > min ? (uint16_t)lrintf(inv * (logits[i] - min)) : 0;
}

static nu_status score_row(void *state, const float *logits, int32_t next, nu_error *err) {
    ppl_state *s = state;
    const double v = token_nll(logits, s->n_vocab, next);
    s->out->nll += v;
    s->sum_sq += v * v;
    s->out->n_scored++;
    if (s->base) {
        quantize_row(logits, s->n_vocab, s->row);
        if (fwrite(s->row, sizeof *s->row, s->row_words, s->base) != s->row_words)
            return nu_fail(err, NU_ERR_IO, "cannot write the base log-probs");
    }
    return NU_OK;
}

static size_t row_words(int32_t n_vocab) {
    return 2 * (((size_t)n_vocab + 1) / 2) + 4;
}

/* The header and tokens of a base file of n_chunk chunks of c->window. */
static nu_status write_base_header(FILE *f, const cut *c, int32_t n_vocab, int32_t n_chunk,
                                   const int32_t *tokens, nu_error *err) {
    const uint32_t n_ctx = (uint32_t)c->window;
    if (fwrite(KLD_MAGIC, 1, 8, f) != 8 || fwrite(&n_ctx, sizeof n_ctx, 1, f) != 1 ||
        fwrite(&n_vocab, sizeof n_vocab, 1, f) != 1 ||
        fwrite(&n_chunk, sizeof n_chunk, 1, f) != 1 ||
        fwrite(tokens, sizeof *tokens, (size_t)n_chunk * n_ctx, f) != (size_t)n_chunk * n_ctx)
        return nu_fail(err, NU_ERR_IO, "cannot write the base log-probs");
    return NU_OK;
}

nu_status nu_perplexity(nu_context *ctx, const int32_t *tokens, int64_t n_tokens,
                        const nu_perplexity_params *params, nu_perplexity_result *out,
                        nu_error *err) {
    nu_perplexity_params p = params ? *params : nu_perplexity_default_params();
    const nu_model *m = nu_context_model(ctx);
    *out = (nu_perplexity_result){0};
    cut c;
    nu_status st = make_cut(ctx, &p, n_tokens, &c, err);
    if (st == NU_OK) st = check_tokens(m, tokens, n_tokens, err);
    if (st) return st;
    if (p.save_base && p.mode != NU_PERPLEXITY_CHUNKS)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the KL-divergence base is written in chunks mode");
    const int32_t n_vocab = nu_model_n_vocab(m);
    ppl_state s = {.out = out, .n_vocab = n_vocab, .row_words = row_words(n_vocab)};
    nu_batch_entry *batch = malloc(sizeof *batch * (size_t)nu_context_n_batch(ctx));
    if (!batch) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    const int64_t n_full = n_tokens / c.window;
    if (p.save_base) {
        s.base = fopen(p.save_base, "wb");
        s.row = calloc(s.row_words, sizeof *s.row);
        if (!s.base)
            st = nu_fail(err, NU_ERR_IO, "cannot create %s", p.save_base);
        else if (!s.row)
            st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
        else if (n_full > INT32_MAX)
            st = nu_fail(err, NU_ERR_INVALID_ARG, "too many chunks for a base file");
        else
            st = write_base_header(s.base, &c, n_vocab, (int32_t)n_full, tokens, err);
    }
    for (int64_t w0 = 0; w0 < n_tokens && st == NU_OK; w0 += c.window) {
        const int32_t len = (int32_t)(n_tokens - w0 < c.window ? n_tokens - w0 : c.window);
        if (len <= c.score_from || (c.full_only && len < c.window)) break;
        st = read_window(ctx, tokens + w0, len, &c, batch, score_row, &s, err);
        if (st) break;
        out->n_windows++;
        finish(out, s.sum_sq);
        if (p.on_window && !p.on_window(out->n_windows - 1, out, p.user))
            st = nu_fail(err, NU_ERR_CANCELLED, "stopped after %d windows", out->n_windows);
    }
    nu_kv_seq_remove(ctx, 0, 0, -1);
    if (s.base && fclose(s.base) != 0 && st == NU_OK)
        st = nu_fail(err, NU_ERR_IO, "cannot write %s", p.save_base);
    free(s.row);
    free(batch);
    return st;
}

/* ---- KL-divergence against a base file ------------------------------------ */

typedef struct kld_state {
    int32_t n_vocab;
    const uint16_t *base; /* the chunk's rows; advanced row by row */
    size_t row_words;
    double sum_nll, sum_nll2, sum_base, sum_base2, sum_nll_base;
    double sum_kld, sum_kld2, sum_dp, sum_dp2, sum_dp4;
    int64_t count, same_top;
    float *kld, *dp; /* every row's KL and Δp, for the percentiles */
} kld_state;

/* One row against the base's (llama.cpp's statistics, in its precision). */
static nu_status compare_row(void *state, const float *logits, int32_t next, nu_error *err) {
    (void)err;
    kld_state *s = state;
    const uint16_t *row = s->base;
    s->base += s->row_words;
    float scale, min_log_prob;
    memcpy(&scale, row, sizeof scale);
    memcpy(&min_log_prob, row + 2, sizeof min_log_prob);
    const uint16_t *q = row + 4;
    float max = logits[0];
    int32_t top = 0;
    for (int32_t i = 1; i < s->n_vocab; i++)
        if (logits[i] > max) {
            max = logits[i];
            top = i;
        }
    double sum_exp = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) sum_exp += expf(logits[i] - max);
    const float log_sum = (float)log(sum_exp);
    const float nll = max + log_sum - logits[next];
    const float nll_base = -(scale * q[next] + min_log_prob);
    s->sum_nll += nll;
    s->sum_nll2 += nll * nll; /* products in float, as llama.cpp has them */
    s->sum_base += nll_base;
    s->sum_base2 += nll_base * nll_base;
    s->sum_nll_base += nll * nll_base;
    const float log_z = max + log_sum;
    double kld = 0;
    int32_t top_base = 0;
    float best = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        const float lp = scale * q[i] + min_log_prob;
        if (i == 0 || lp > best) {
            best = lp;
            top_base = i;
        }
        if (lp > KLD_LOG_PROB_FLOOR) kld += expf(lp) * (lp - logits[i] + log_z);
    }
    s->sum_kld += kld;
    s->sum_kld2 += kld * kld;
    s->same_top += top == top_base;
    const float dp = expf(-nll) - expf(-nll_base);
    const double dp2 = dp * dp;
    s->sum_dp += dp;
    s->sum_dp2 += dp2;
    s->sum_dp4 += dp2 * dp2;
    s->kld[s->count] = (float)kld;
    s->dp[s->count] = dp;
    s->count++;
    return NU_OK;
}

/* Mean and its standard error, llama.cpp's way (0 with 10 values or fewer). */
static void mean_unc(double sum, double sum2, int64_t n, double *mean, double *unc) {
    *mean = n ? sum / (double)n : 0;
    double var = n ? sum2 / (double)n - *mean * *mean : 0;
    *unc = var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0;
}

static int compare_floats(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* llama.cpp's percentile of sorted values: linear between the two values
 * around fraction * (n - 1), in float. */
static double percentile(const float *v, int64_t n, float fraction) {
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    float p = fraction * (float)(n - 1);
    const int64_t ip = (int64_t)p;
    p -= (float)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

static double median(const float *v, int64_t n) {
    return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

static void kld_statistics(kld_state *s, nu_kld_result *r) {
    const int64_t n = s->count;
    double mean, unc, mean_b, unc_b;
    r->n_scored = n;
    mean_unc(s->sum_nll, s->sum_nll2, n, &mean, &unc);
    mean_unc(s->sum_base, s->sum_base2, n, &mean_b, &unc_b);
    r->ppl = exp(mean);
    r->ppl_stderr = r->ppl * unc;
    r->ppl_base = exp(mean_b);
    r->ppl_base_stderr = r->ppl_base * unc_b;
    const double cov =
        n < 10 ? 0 : (s->sum_nll_base / n - (s->sum_nll / n) * (s->sum_base / n)) / (double)(n - 1);
    r->ln_ppl_correlation = unc > 0 && unc_b > 0 ? cov / (unc * unc_b) : 0;
    r->ln_ppl_ratio = mean - mean_b;
    const double ratio_var = unc * unc + unc_b * unc_b - 2 * cov;
    r->ln_ppl_ratio_stderr = sqrt(ratio_var > 0 ? ratio_var : 0);
    r->ppl_ratio = exp(r->ln_ppl_ratio);
    r->ppl_ratio_stderr = r->ppl_ratio * r->ln_ppl_ratio_stderr;
    r->ppl_diff = r->ppl - r->ppl_base;
    const double diff_var = r->ppl_stderr * r->ppl_stderr +
                            r->ppl_base_stderr * r->ppl_base_stderr -
                            2 * r->ppl * r->ppl_base * cov;
    r->ppl_diff_stderr = sqrt(diff_var > 0 ? diff_var : 0);
    mean_unc(s->sum_kld, s->sum_kld2, n, &r->kld_mean, &r->kld_stderr);
    mean_unc(s->sum_dp, s->sum_dp2, n, &r->dp_mean, &r->dp_stderr);
    double mse, mse_unc;
    mean_unc(s->sum_dp2, s->sum_dp4, n, &mse, &mse_unc);
    r->dp_rms = sqrt(mse);
    r->dp_rms_stderr = r->dp_rms > 0 ? 0.5 / r->dp_rms * mse_unc : 0;
    r->same_top = n ? (double)s->same_top / (double)n : 0;
    r->same_top_stderr = n > 1 ? sqrt(r->same_top * (1 - r->same_top) / (double)(n - 1)) : 0;
    if (n == 0) return;
    qsort(s->kld, (size_t)n, sizeof *s->kld, compare_floats);
    qsort(s->dp, (size_t)n, sizeof *s->dp, compare_floats);
    static const float kld_fractions[NU_KLD_N_PERCENTILES] = {
        1.0f, 0.999f, 0.990f, 0.950f, 0.900f, 0.5f, 0.100f, 0.050f, 0.010f, 0.001f, 0.0f};
    for (int i = 0; i < NU_KLD_N_PERCENTILES; i++) {
        r->kld_percentiles[i] =
            kld_fractions[i] == 0.5f ? median(s->kld, n) : percentile(s->kld, n, kld_fractions[i]);
        r->dp_percentiles[i] =
            kld_fractions[i] == 0.5f ? median(s->dp, n) : percentile(s->dp, n, kld_fractions[i]);
    }
}

/* Reads exactly n bytes or fails with a message naming what was read. */
static nu_status read_exact(FILE *f, void *buf, size_t n, const char *path, const char *what,
                            nu_error *err) {
    if (fread(buf, 1, n, f) != n)
        return nu_fail(err, NU_ERR_FORMAT, "%s: truncated in %s", path, what);
    return NU_OK;
}

nu_status nu_kl_divergence(nu_context *ctx, const char *base_path,
                           const nu_perplexity_params *params, nu_kld_result *out, nu_error *err) {
    nu_perplexity_params p = params ? *params : nu_perplexity_default_params();
    const nu_model *m = nu_context_model(ctx);
    const int32_t n_vocab = nu_model_n_vocab(m);
    *out = (nu_kld_result){0};
    FILE *f = base_path ? fopen(base_path, "rb") : NULL;
    if (!f) return nu_fail(err, NU_ERR_IO, "cannot open %s", base_path ? base_path : "(null)");
    char magic[8];
    uint32_t n_ctx = 0;
    int32_t file_vocab = 0, n_chunk = 0;
    nu_status st = read_exact(f, magic, 8, base_path, "its header", err);
    if (st == NU_OK && memcmp(magic, KLD_MAGIC, 8) != 0)
        st = nu_fail(err, NU_ERR_FORMAT, "%s is not a file of base log-probs (no \"%s\")",
                     base_path, KLD_MAGIC);
    if (st == NU_OK) st = read_exact(f, &n_ctx, sizeof n_ctx, base_path, "its header", err);
    if (st == NU_OK)
        st = read_exact(f, &file_vocab, sizeof file_vocab, base_path, "its header", err);
    if (st == NU_OK) st = read_exact(f, &n_chunk, sizeof n_chunk, base_path, "its header", err);
    if (st == NU_OK && file_vocab != n_vocab)
        st = nu_fail(err, NU_ERR_INVALID_ARG, "%s has a vocabulary of %d tokens, the model %d",
                     base_path, file_vocab, n_vocab);
    if (st == NU_OK && (n_ctx < 4 || n_ctx > (uint32_t)nu_context_n_ctx(ctx) || n_chunk < 1))
        st = nu_fail(err, NU_ERR_INVALID_ARG,
                     "%s: chunks of %u tokens (%d of them) do not fit a context of %d", base_path,
                     n_ctx, n_chunk, nu_context_n_ctx(ctx));
    const int32_t rows = st == NU_OK ? (int32_t)n_ctx - 1 - (int32_t)n_ctx / 2 : 0;
    const size_t words = row_words(n_vocab);
    const size_t n_tokens = (size_t)n_chunk * n_ctx;
    int32_t *tokens = st == NU_OK ? malloc(n_tokens * sizeof *tokens) : NULL;
    uint16_t *base = st == NU_OK ? malloc((size_t)rows * words * sizeof *base) : NULL;
    nu_batch_entry *batch = malloc(sizeof *batch * (size_t)nu_context_n_batch(ctx));
    kld_state s = {.n_vocab = n_vocab, .row_words = words};
    s.kld = st == NU_OK ? malloc((size_t)rows * (size_t)n_chunk * sizeof *s.kld) : NULL;
    s.dp = st == NU_OK ? malloc((size_t)rows * (size_t)n_chunk * sizeof *s.dp) : NULL;
    if (st == NU_OK && (!tokens || !base || !batch || !s.kld || !s.dp))
        st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
    if (st == NU_OK)
        st = read_exact(f, tokens, n_tokens * sizeof *tokens, base_path, "its tokens", err);
    if (st == NU_OK) st = check_tokens(m, tokens, (int64_t)n_tokens, err);
    cut c = {.window = (int32_t)n_ctx, .score_from = (int32_t)n_ctx / 2 + 1, .bos = -1};
    if (nu_model_adds_bos(m)) c.bos = nu_token_bos(m);
    nu_perplexity_result running = {0};
    for (int32_t k = 0; st == NU_OK && k < n_chunk; k++) {
        st = read_exact(f, base, (size_t)rows * words * sizeof *base, base_path, "its log-probs",
                        err);
        if (st) break;
        s.base = base;
        st = read_window(ctx, tokens + (size_t)k * n_ctx, (int32_t)n_ctx, &c, batch, compare_row,
                         &s, err);
        if (st) break;
        out->n_chunks++;
        running = (nu_perplexity_result){
            .nll = s.sum_nll, .n_scored = s.count, .n_windows = out->n_chunks};
        finish(&running, s.sum_nll2);
        if (p.on_window && !p.on_window(k, &running, p.user))
            st = nu_fail(err, NU_ERR_CANCELLED, "stopped after %d chunks", out->n_chunks);
    }
    if (st == NU_OK && fgetc(f) != EOF)
        st = nu_fail(err, NU_ERR_FORMAT, "%s goes on after its %d chunks", base_path, n_chunk);
    nu_kv_seq_remove(ctx, 0, 0, -1);
    if (st == NU_OK || st == NU_ERR_CANCELLED) kld_statistics(&s, out);
    fclose(f);
    free(tokens);
    free(base);
    free(batch);
    free(s.kld);
    free(s.dp);
    return st;
}
