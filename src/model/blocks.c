/* blocks.c - norms, rotary position embeddings, activations, soft-capping:
 * the row operations of a layer. */
#include "blocks.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels.h"

/* ---- norms ------------------------------------------------------------------ */

void nu_rms_norm(float *out, const float *x, const float *w, int32_t n, float eps) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    if (w)
        for (int32_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    else
        for (int32_t i = 0; i < n; i++) out[i] = x[i] * scale;
}

void nu_layer_norm(float *out, const float *x, const float *w, const float *b, int32_t n,
                   float eps) {
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += x[i];
    double mean = sum / n, var = 0;
    for (int32_t i = 0; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    float scale = (float)(1.0 / sqrt(var / n + eps)), m = (float)mean;
    for (int32_t i = 0; i < n; i++) {
        float y = (x[i] - m) * scale;
        if (w) y *= w[i];
        if (b) y += b[i];
        out[i] = y;
    }
}

void nu_norm(nu_norm_kind kind, float *out, const float *x, const float *w, const float *b,
             int32_t n, float eps) {
    if (kind == NU_NORM_LAYER)
        nu_layer_norm(out, x, w, b, n, eps);
    else
        nu_rms_norm(out, x, w, n, eps);
}

void nu_norm_heads(nu_norm_kind kind, float *x, const float *w, const float *b, int32_t n_heads,
                   int32_t head_dim, float eps) {
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        nu_norm(kind, v, v, w, b, head_dim, eps);
    }
}

/* ---- rotary position embeddings ------------------------------------------- */

/* The pair index below which YaRN keeps frequencies as trained: the pair
 * whose wavelength fits `rotations` times in the original context,
 * n_rot * ln(orig_ctx / (rotations * 2 pi)) / (2 ln base). */
static float yarn_pair(int32_t n_rot, int32_t orig_ctx, float rotations, float base) {
    return (float)n_rot * logf((float)orig_ctx / (rotations * 2 * (float)M_PI)) / (2 * logf(base));
}

/* The table is computed in float, with the angle of each pair taken from
 * the previous pair's by one multiplication, the arithmetic order of the
 * GGML CPU backend that the architecture tests compare with: on their
 * random-weight models it brought the largest log-prob differences of the
 * SiLU families from ~1.5e-4 (a double-precision table) to ~1e-4. Both are
 * within float rounding of the exact angles. */
void nu_rope_table(const nu_rope *r, const float *freq_factors, int32_t pos, float *cs) {
    const int32_t pairs = r->n_rot / 2;
    const float theta_scale = powf(r->base, -2.0f / (float)r->n_rot);
    float freq_scale = 1.0f, mscale = r->attn_factor, low = 0, high = 0;
    bool yarn = false;
    if (r->scaling == NU_ROPE_SCALING_LINEAR || r->scaling == NU_ROPE_SCALING_LONGROPE ||
        r->scaling == NU_ROPE_SCALING_YARN)
        freq_scale = 1.0f / r->factor;
    if (r->scaling == NU_ROPE_SCALING_YARN && freq_scale != 1.0f) {
        /* YaRN (Peng et al. 2023) as its reference implementation ramps it:
         * pairs below `low` (many rotations in the original context: beta
         * 32) keep their frequency, pairs above `high` (beta 1) are
         * interpolated, linearly in between; attention grows by
         * 0.1 ln(factor) + 1. */
        yarn = true;
        low = floorf(yarn_pair(r->n_rot, r->orig_ctx, 32.0f, r->base));
        high = ceilf(yarn_pair(r->n_rot, r->orig_ctx, 1.0f, r->base));
        if (low < 0) low = 0;
        if (high > (float)(r->n_rot - 1)) high = (float)(r->n_rot - 1);
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    }
    float theta = (float)pos;
    for (int32_t i = 0; i < pairs; i++) {
        float extrap = freq_factors ? theta / freq_factors[i] : theta;
        float angle = freq_scale * extrap;
        if (yarn) {
            float t = ((float)i - low) / (high - low > 0.001f ? high - low : 0.001f);
            float keep = 1.0f - (t < 0 ? 0 : t > 1 ? 1 : t);
            angle = angle * (1 - keep) + extrap * keep;
        }
        cs[2 * i] = cosf(angle) * mscale;
        cs[2 * i + 1] = sinf(angle) * mscale;
        theta *= theta_scale;
    }
}

void nu_rope_apply(nu_rope_layout layout, float *x, int32_t n_heads, int32_t head_dim,
                   int32_t n_rot, const float *cs) {
    const int32_t half = n_rot / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        if (layout == NU_ROPE_PAIRS) {
            for (int32_t i = 0; i < half; i++) {
                float c = cs[2 * i], s = cs[2 * i + 1], x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = x0 * c - x1 * s;
                v[2 * i + 1] = x0 * s + x1 * c;
            }
        } else if (layout == NU_ROPE_HALVES) {
            for (int32_t i = 0; i < half; i++) {
                float c = cs[2 * i], s = cs[2 * i + 1], x0 = v[i], x1 = v[i + half];
                v[i] = x0 * c - x1 * s;
                v[i + half] = x0 * s + x1 * c;
            }
        }
    }
}

/* ---- activations ------------------------------------------------------------- */

static float gelu_tanh(float x) {
    const float k = 0.79788456080286535588f; /* sqrt(2 / pi) */
    return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}

/* GELU at half precision: the tanh form evaluated at x rounded to f16, the
 * result rounded to f16; 0 below -10 and x above 10. This is the GELU of
 * the GGML CPU backend, whose outputs the GELU families are checked against
 * (its rounding moves their log-probs by up to ~0.05 on small random models,
 * more than the tolerance); it differs from the exact tanh form by less
 * than f16 rounding. One table of the 65536 halves, made once. */
static float gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void) {
    for (uint32_t h = 0; h < (1u << 16); h++)
        gelu_table[h] = nu_f16_to_f32(nu_f32_to_f16(gelu_tanh(nu_f16_to_f32((uint16_t)h))));
}

static float gelu_half(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return gelu_table[nu_f32_to_f16(x)];
}

static float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
}

void nu_act_gated(nu_act act, float *gate, const float *up, int64_t n) {
    switch (act) {
    case NU_ACT_SILU: nu_vec_swiglu(gate, up, n); break;
    case NU_ACT_GELU_TANH:
        pthread_once(&gelu_once, gelu_table_init);
        for (int64_t i = 0; i < n; i++) gate[i] = gelu_half(gate[i]) * up[i];
        break;
    case NU_ACT_GELU_ERF:
        for (int64_t i = 0; i < n; i++) gate[i] = gelu_erf(gate[i]) * up[i];
        break;
    case NU_ACT_SWIGLU_CLAMPED:
        for (int64_t i = 0; i < n; i++) {
            float g = gate[i] < 7.0f ? gate[i] : 7.0f;
            float u = up[i] < -7.0f ? -7.0f : up[i] > 7.0f ? 7.0f : up[i];
            gate[i] = g / (1.0f + expf(-1.702f * g)) * (u + 1.0f);
        }
        break;
    }
}

void nu_act_plain(nu_act act, float *x, int64_t n) {
    switch (act) {
    case NU_ACT_SILU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i]));
        break;
    case NU_ACT_GELU_TANH:
        pthread_once(&gelu_once, gelu_table_init);
        for (int64_t i = 0; i < n; i++) x[i] = gelu_half(x[i]);
        break;
    case NU_ACT_GELU_ERF:
        for (int64_t i = 0; i < n; i++) x[i] = gelu_erf(x[i]);
        break;
    case NU_ACT_SWIGLU_CLAMPED: break; /* gated only: the loader refuses a plain FFN with it */
    }
}

void nu_softcap(float *x, int64_t n, float c) {
    const float inv = 1.0f / c;
    for (int64_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] * inv);
}

/* ---- routing ------------------------------------------------------------------ */

void nu_route(nu_router_kind kind, bool renormalise, const float *z, int32_t n_expert, int32_t k,
              int32_t *sel, float *w) {
    /* the k largest logits, largest first (ties: the lower id) */
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n_expert; e++) {
            bool taken = false;
            for (int32_t i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || z[e] > z[best])) best = e;
        }
        sel[j] = best;
    }
    const double max = z[sel[0]];
    double total = 0, chosen = 0;
    if (kind == NU_ROUTER_SOFTMAX_TOPK)
        for (int32_t e = 0; e < n_expert; e++) total += exp((double)z[e] - max);
    double p[NU_MAX_EXPERTS_USED];
    for (int32_t j = 0; j < k; j++) chosen += p[j] = exp((double)z[sel[j]] - max);
    /* a softmax over all experts (then optionally renormalised over the
     * chosen ones), or a softmax over the chosen logits alone */
    double denom = kind == NU_ROUTER_TOPK_SOFTMAX || renormalise ? chosen : total;
    for (int32_t j = 0; j < k; j++) w[j] = (float)(p[j] / denom);
}

/* ---- recurrent layers --------------------------------------------------------- */

float nu_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

float nu_softplus(float x) {
    return x > 20.0f ? x : logf(1.0f + expf(x));
}

void nu_l2_norm_heads(float *x, int32_t n_heads, int32_t head_dim, float eps) {
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        double ss = 0;
        for (int32_t i = 0; i < head_dim; i++) ss += (double)v[i] * v[i];
        float scale = (float)(1.0 / sqrt(ss + eps));
        for (int32_t i = 0; i < head_dim; i++) v[i] *= scale;
    }
}

void nu_conv_step(const float *w, const float *win, float *win_out, const float *x, float *out,
                  int32_t d_conv, int64_t n_ch, int64_t c0, int64_t c1) {
    const int32_t taps = d_conv - 1;
    for (int64_t c = c0; c < c1; c++) {
        const float *wc = w + c * d_conv, xc = x[c];
        float sum = 0;
        for (int32_t k = 0; k < taps && win; k++) sum += win[k * n_ch + c] * wc[k];
        sum += xc * wc[taps];
        /* the window moves on: oldest first, this input last */
        for (int32_t k = 0; k + 1 < taps; k++)
            win_out[k * n_ch + c] = win ? win[(k + 1) * n_ch + c] : 0;
        if (taps > 0) win_out[(taps - 1) * n_ch + c] = xc;
        out[c] = sum;
    }
}

void nu_delta_step(float *m_out, const float *m_in, const float *q, const float *k, const float *v,
                   float g, float beta, float scale, int32_t dk, int32_t dv, float *o) {
    nu_vec_delta_rule(m_out, m_in, q, k, v, expf(g), beta, scale, dk, dv, o);
}
