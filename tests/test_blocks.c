/* test_blocks.c - the row operations layers are built from (src/model/blocks.c),
 * each against a plain double-precision reference written here from the
 * published formula: RMSNorm, LayerNorm, per-head norms, RoPE tables (plain,
 * linear, YaRN, frequency factors) and rotations in both layouts with
 * partial rotary dimensions, the activations, soft-capping, expert
 * routing, and Gated DeltaNet's steps (the causal convolution against the
 * whole-sequence convolution, the delta rule against the paper's matrix
 * recurrence). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "test_rng.h"
#include "test_support.h"

static void fill(float *x, int n, rng *r, double scale) {
    for (int i = 0; i < n; i++) x[i] = (float)(rng_sym(r) * scale);
}

static void assert_close(double got, double want, double tol) {
    if (fabs(got - want) > tol * (1 + fabs(want)))
        fail_msg("got %.9g, want %.9g (tolerance %g)", got, want, tol);
}

static void test_rms_norm(void **state) {
    (void)state;
    rng r = {1};
    float x[96], w[96], out[96];
    fill(x, 96, &r, 3);
    fill(w, 96, &r, 2);
    nu_rms_norm(out, x, w, 96, 1e-5f);
    double ss = 0;
    for (int i = 0; i < 96; i++) ss += (double)x[i] * x[i];
    double scale = 1 / sqrt(ss / 96 + 1e-5);
    for (int i = 0; i < 96; i++) assert_close(out[i], x[i] * scale * w[i], 1e-6);
    nu_rms_norm(out, x, NULL, 96, 1e-5f); /* no weight */
    for (int i = 0; i < 96; i++) assert_close(out[i], x[i] * scale, 1e-6);
}

static void test_layer_norm(void **state) {
    (void)state;
    rng r = {2};
    float x[80], w[80], b[80], out[80];
    fill(x, 80, &r, 4);
    for (int i = 0; i < 80; i++) x[i] += 10; /* a mean far from 0 */
    fill(w, 80, &r, 2);
    fill(b, 80, &r, 1);
    nu_layer_norm(out, x, w, b, 80, 1e-5f);
    double mean = 0, var = 0;
    for (int i = 0; i < 80; i++) mean += x[i];
    mean /= 80;
    for (int i = 0; i < 80; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= 80;
    for (int i = 0; i < 80; i++)
        assert_close(out[i], (x[i] - mean) / sqrt(var + 1e-5) * w[i] + b[i], 1e-5);
    /* per head: each head normalised on its own, one weight shared */
    float h[3 * 16], hw[16];
    fill(h, 48, &r, 2);
    fill(hw, 16, &r, 1);
    float copy[48];
    memcpy(copy, h, sizeof h);
    nu_norm_heads(NU_NORM_RMS, h, hw, NULL, 3, 16, 1e-6f);
    for (int head = 0; head < 3; head++) {
        float want[16];
        nu_rms_norm(want, copy + head * 16, hw, 16, 1e-6f);
        assert_memory_equal(h + head * 16, want, sizeof want);
    }
}

/* The exact angle of pair i at pos: pos * base^(-2i/n_rot) / factor_i,
 * linear: / s; YaRN: the ramp between interpolated and kept frequencies
 * over the pair index (Peng et al. 2023, as its reference code ramps it). */
static double ref_angle(const nu_rope *r, const float *ff, int pos, int i) {
    double theta = pow(r->base, -2.0 * i / r->n_rot) / (ff ? ff[i] : 1.0);
    if (r->scaling == NU_ROPE_SCALING_LINEAR) theta /= r->factor;
    if (r->scaling == NU_ROPE_SCALING_YARN) {
        double lo = floor(r->n_rot * log(r->orig_ctx / (32 * 2 * M_PI)) / (2 * log(r->base)));
        double hi = ceil(r->n_rot * log(r->orig_ctx / (1 * 2 * M_PI)) / (2 * log(r->base)));
        if (lo < 0) lo = 0;
        if (hi > r->n_rot - 1) hi = r->n_rot - 1;
        double t = (i - lo) / fmax(hi - lo, 0.001), keep = 1 - fmin(1, fmax(0, t));
        theta = theta / r->factor * (1 - keep) + theta * keep;
    }
    return pos * theta;
}

static void check_table(const nu_rope *r, const float *ff, double mscale) {
    float cs[128];
    const int positions[] = {0, 1, 7, 100, 999};
    for (size_t p = 0; p < sizeof positions / sizeof *positions; p++) {
        nu_rope_table(r, ff, positions[p], cs);
        for (int i = 0; i < r->n_rot / 2; i++) {
            double a = ref_angle(r, ff, positions[p], i);
            /* float angles: error grows with the angle */
            double tol = 2e-6 * (1 + fabs(a)) * mscale;
            if (fabs(cs[2 * i] - cos(a) * mscale) > tol ||
                fabs(cs[2 * i + 1] - sin(a) * mscale) > tol)
                fail_msg("pos %d pair %d: (%g, %g), want (%g, %g)", positions[p], i, cs[2 * i],
                         cs[2 * i + 1], cos(a) * mscale, sin(a) * mscale);
        }
    }
}

static void test_rope_table(void **state) {
    (void)state;
    nu_rope r = {.n_rot = 64, .base = 10000, .factor = 1, .orig_ctx = 4096, .attn_factor = 1};
    check_table(&r, NULL, 1);
    r.scaling = NU_ROPE_SCALING_LINEAR;
    r.factor = 4;
    check_table(&r, NULL, 1);
    r.scaling = NU_ROPE_SCALING_YARN;
    r.factor = 8;
    r.base = 500000;
    check_table(&r, NULL, 1 + 0.1 * log(8.0));
    /* a ramp whose upper end passes the last pair (clamped at n_rot - 1) */
    nu_rope y = {.n_rot = 16,
                 .base = 10000,
                 .scaling = NU_ROPE_SCALING_YARN,
                 .factor = 4,
                 .orig_ctx = 32768,
                 .attn_factor = 1};
    check_table(&y, NULL, 1 + 0.1 * log(4.0));
    float ff[32];
    for (int i = 0; i < 32; i++) ff[i] = 1.0f + (float)i / 4;
    r.scaling = NU_ROPE_SCALING_NONE;
    r.factor = 1;
    check_table(&r, ff, 1);
    r.attn_factor = 1.25f; /* LongRoPE's attention factor scales cos and sin */
    check_table(&r, ff, 1.25);
}

static void test_rope_apply(void **state) {
    (void)state;
    rng seed = {5};
    const int heads = 3, hd = 32, n_rot = 16; /* partial: half of each head */
    nu_rope r = {.n_rot = n_rot, .base = 10000, .factor = 1, .orig_ctx = 2048, .attn_factor = 1};
    float cs[16], x[96], y[96];
    fill(x, heads * hd, &seed, 1);
    nu_rope_table(&r, NULL, 37, cs);
    for (int layout = 0; layout < 2; layout++) {
        memcpy(y, x, sizeof x);
        nu_rope_apply(layout ? NU_ROPE_HALVES : NU_ROPE_PAIRS, y, heads, hd, n_rot, cs);
        for (int h = 0; h < heads; h++) {
            const float *a = x + h * hd, *b = y + h * hd;
            for (int i = 0; i < n_rot / 2; i++) {
                int i0 = layout ? i : 2 * i, i1 = layout ? i + n_rot / 2 : 2 * i + 1;
                double c = cs[2 * i], s = cs[2 * i + 1];
                assert_close(b[i0], a[i0] * c - a[i1] * s, 1e-6);
                assert_close(b[i1], a[i0] * s + a[i1] * c, 1e-6);
            }
            for (int i = n_rot; i < hd; i++) assert_true(b[i] == a[i]); /* untouched */
        }
    }
}

static double gelu_tanh_ref(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_activations(void **state) {
    (void)state;
    rng seed = {9};
    enum { N = 257 };
    float g[N], u[N], y[N];
    fill(g, N, &seed, 12);
    fill(u, N, &seed, 2);
    g[0] = -200, g[1] = 200, g[2] = 0, g[3] = -10.5f, g[4] = 10.5f;
    memcpy(y, g, sizeof g);
    nu_act_gated(NU_ACT_SILU, y, u, N);
    for (int i = 0; i < N; i++) assert_close(y[i], g[i] / (1 + exp(-(double)g[i])) * u[i], 1e-5);
    memcpy(y, g, sizeof g);
    nu_act_gated(NU_ACT_GELU_ERF, y, u, N);
    for (int i = 0; i < N; i++)
        assert_close(y[i], 0.5 * g[i] * (1 + erf(g[i] / sqrt(2.0))) * u[i], 1e-5);
    /* the half-precision tanh form: within f16 rounding of input and output */
    memcpy(y, g, sizeof g);
    nu_act_plain(NU_ACT_GELU_TANH, y, N);
    for (int i = 0; i < N; i++) {
        double want = gelu_tanh_ref(g[i]);
        double tol = 2e-3 * fabs(g[i]) + 1e-4; /* one f16 step of x, one of the result */
        if (fabs(y[i] - want) > tol) fail_msg("gelu(%g) = %g, want %g", g[i], y[i], want);
    }
    assert_true(y[0] == 0.0f && y[1] == 200.0f); /* the tails: 0 and x */
}

static void test_softcap(void **state) {
    (void)state;
    float x[] = {-1000, -30, -1, 0, 0.5f, 29, 1000};
    float y[7];
    memcpy(y, x, sizeof x);
    nu_softcap(y, 7, 30);
    for (int i = 0; i < 7; i++) assert_close(y[i], 30 * tanh(x[i] / 30.0), 1e-6);
}

static void test_route(void **state) {
    (void)state;
    const float z[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f};
    int32_t sel[3];
    float w[3];
    /* softmax over all six, the top three (ties: lower id first) */
    nu_route(NU_ROUTER_SOFTMAX_TOPK, false, z, 6, 3, sel, w);
    assert_int_equal(sel[0], 1);
    assert_int_equal(sel[1], 3);
    assert_int_equal(sel[2], 4);
    double all = 0;
    for (int e = 0; e < 6; e++) all += exp(z[e]);
    for (int j = 0; j < 3; j++) assert_close(w[j], exp(z[sel[j]]) / all, 1e-6);
    /* renormalised over the chosen, and softmax over the chosen: the same */
    float w2[3];
    nu_route(NU_ROUTER_SOFTMAX_TOPK, true, z, 6, 3, sel, w);
    nu_route(NU_ROUTER_TOPK_SOFTMAX, false, z, 6, 3, sel, w2);
    double chosen = exp(2.0) * 2 + exp(1.0);
    for (int j = 0; j < 3; j++) {
        assert_close(w[j], exp(z[sel[j]]) / chosen, 1e-6);
        assert_close(w2[j], w[j], 1e-7);
    }
}

/* The convolution stepped token by token with its window equals the causal
 * convolution of the whole sequence (inputs before the start are 0). */
static void test_conv_step(void **state) {
    (void)state;
    rng r = {7};
    enum { D = 4, CH = 37, T = 9 };
    float w[CH * D], x[T][CH], out[T][CH], win[(D - 1) * CH], win2[(D - 1) * CH];
    fill(w, CH * D, &r, 1);
    fill(&x[0][0], T * CH, &r, 2);
    for (int t = 0; t < T; t++) {
        /* two parts of the channels; the window moved in place, or into another buffer */
        float *next = t % 2 ? win2 : win;
        nu_conv_step(w, t ? win : NULL, next, x[t], out[t], D, CH, 0, 20);
        nu_conv_step(w, t ? win : NULL, next, x[t], out[t], D, CH, 20, CH);
        if (next != win) memcpy(win, next, sizeof win);
    }
    for (int t = 0; t < T; t++)
        for (int c = 0; c < CH; c++) {
            double want = 0;
            for (int k = 0; k < D; k++) {
                int src = t - (D - 1) + k;
                if (src >= 0) want += (double)x[src][c] * w[c * D + k];
            }
            assert_close(out[t][c], want, 1e-5);
        }
}

/* Gated DeltaNet (Yang et al. 2025), eq. 10: S_t = S_{t-1} a_t (I - b_t
 * k_t k_t^T) + b_t v_t k_t^T with S of dv x dk, output S_t q_t; in double
 * with whole matrices, against nu_delta_step token by token (from a zero
 * state, in place and into another buffer). */
static void test_delta_rule(void **state) {
    (void)state;
    rng r = {8};
    enum { DK = 24, DV = 20, T = 7 };
    static float q[T][DK], k[T][DK], v[T][DV], g[T], b[T], m[2][DV * DK], o[DV];
    static double S[DV][DK], next[DV][DK];
    fill(&q[0][0], T * DK, &r, 1);
    fill(&k[0][0], T * DK, &r, 1);
    fill(&v[0][0], T * DV, &r, 2);
    for (int t = 0; t < T; t++) {
        g[t] = (float)(-0.05 - 0.5 * (rng_sym(&r) + 1));
        b[t] = (float)(0.5 + 0.5 * rng_sym(&r));
        nu_l2_norm_heads(k[t], 1, DK, 1e-6f);
    }
    memset(S, 0, sizeof S);
    const float scale = 0.25f;
    for (int t = 0; t < T; t++) {
        double a = exp(g[t]);
        for (int j = 0; j < DV; j++)
            for (int i = 0; i < DK; i++) {
                double sum = 0; /* (S (I - b k k^T))_ji */
                for (int l = 0; l < DK; l++)
                    sum += S[j][l] * ((l == i ? 1.0 : 0.0) - (double)b[t] * k[t][l] * k[t][i]);
                next[j][i] = a * sum + (double)b[t] * v[t][j] * k[t][i];
            }
        memcpy(S, next, sizeof S);
        const float *in = t == 0 ? NULL : m[(t - 1) % 2];
        float *out = t == 4 ? (float *)in : m[t % 2];
        nu_delta_step(out, in, q[t], k[t], v[t], g[t], b[t], scale, DK, DV, o);
        if (out != m[t % 2]) memcpy(m[t % 2], out, sizeof m[0]);
        for (int j = 0; j < DV; j++) {
            double want = 0;
            for (int i = 0; i < DK; i++) {
                want += S[j][i] * q[t][i];
                assert_close(m[t % 2][j * DK + i], S[j][i], 1e-5);
            }
            assert_close(o[j], scale * want, 1e-5);
        }
    }
}

static void test_recurrent_helpers(void **state) {
    (void)state;
    const float x[] = {-30, -3, -0.5f, 0, 0.25f, 4, 19, 21, 60};
    for (int i = 0; i < 9; i++) {
        assert_close(nu_sigmoid(x[i]), 1 / (1 + exp(-x[i])), 1e-6);
        assert_close(nu_softplus(x[i]), log1p(exp(x[i])), 1e-6);
    }
    float h[2 * 8];
    rng r = {9};
    fill(h, 16, &r, 3);
    float copy[16];
    memcpy(copy, h, sizeof h);
    nu_l2_norm_heads(h, 2, 8, 1e-6f);
    for (int hd = 0; hd < 2; hd++) {
        double ss = 0;
        for (int i = 0; i < 8; i++) ss += (double)copy[hd * 8 + i] * copy[hd * 8 + i];
        for (int i = 0; i < 8; i++)
            assert_close(h[hd * 8 + i], copy[hd * 8 + i] / sqrt(ss + 1e-6), 1e-6);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm),    cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_rope_table),  cmocka_unit_test(test_rope_apply),
        cmocka_unit_test(test_activations), cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_route),       cmocka_unit_test(test_conv_step),
        cmocka_unit_test(test_delta_rule),  cmocka_unit_test(test_recurrent_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
