/* dot_scalar.c - the portable kernels: plain C, no intrinsics. They are the
 * fallback on CPUs without AVX2 and the baseline the SIMD levels are tested
 * against (they share the quantised activations, so only the float
 * summation order differs). The compiler may still vectorise the integer
 * loops with the baseline SSE2.
 */
#include <math.h>

#include "iquant.h"

/* ---- Activation quantisation ---------------------------------------------- */

/* One 32-element block as llama.cpp's Q8_0 / Q8_1 (kernels_internal.h):
 * q = nu_round_even(x * (127 / amax)) clamped to +-127 (the clamp also maps
 * NaN to -127, as SIMD max/min do), d = f16(amax / 127), s = d * sum q,
 * m = f16(amax / 127 * sum q). Blocks whose max is below NU_ACT_TINY (or
 * all NaN) become zeros. */
static void quantize_act_block(const float *x, int8_t *q, float *d, float *s, float *m) {
    float amax = 0.0f;
    for (int j = 0; j < NU_QK; j++) {
        float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    if (!(amax >= NU_ACT_TINY)) {
        memset(q, 0, NU_QK);
        *d = *s = *m = 0.0f;
        return;
    }
    float scale = amax / 127.0f;
    float inv = 127.0f / amax;
    int sum = 0;
    for (int j = 0; j < NU_QK; j++) {
        float v = x[j] * inv;
        v = v > -127.0f ? v : -127.0f; /* NaN fails the test and becomes -127 */
        v = v < 127.0f ? v : 127.0f;
        int qi = (int)nu_round_even(v);
        q[j] = (int8_t)qi;
        sum += qi;
    }
    *d = nu_round_half(scale);
    *s = *d * (float)sum;
    *m = nu_round_half(scale * (float)sum);
}

void nu_quantize_act_scalar(const float *x, int64_t n_in, uint8_t *dst) {
    int64_t n_pad = nu_act_n_pad(n_in), nb = n_in / NU_QK, nblk = n_pad / NU_QK;
    int8_t *q = (int8_t *)dst;
    float *d = (float *)(void *)(dst + n_pad);
    float *s = d + nblk, *m = s + nblk;
    for (int64_t b = 0; b < nb; b++)
        quantize_act_block(x + b * NU_QK, q + b * NU_QK, d + b, s + b, m + b);
    memset(q + nb * NU_QK, 0, (size_t)(n_pad - nb * NU_QK));
    for (int64_t b = nb; b < nblk; b++) d[b] = s[b] = m[b] = 0.0f;
}

/* ---- Quantised weights ------------------------------------------------------ */

/* Byte i of the result is 16 if bit i of the byte b is set, else 0: the
 * multiply copies b into every byte, the mask keeps bit i in byte i, and
 * adding 0x7F per byte carries any set bit into the byte's top bit. */
static uint64_t spread_byte(uint32_t b) {
    uint64_t x = ((uint64_t)(b & 0xFF) * 0x0101010101010101ull) & 0x8040201008040201ull;
    return ((x + 0x7F7F7F7F7F7F7F7Full) & 0x8080808080808080ull) >> 3;
}

/* The Q5 high-bit word as 32 bytes holding 16 where the element's bit 4 is
 * set. */
static void spread_high_bits(uint32_t qh, uint8_t *high) {
    for (int i = 0; i < 4; i++) {
        uint64_t v = spread_byte(qh >> (8 * i));
        memcpy(high + 8 * i, &v, 8);
    }
}

/* The quants of one weight block as signed integers, with the offset of the
 * _0 types already removed, so the block's dot with an activation block is
 * d_w * d_a * sum(q_w * q_a) (+ m_w * s_a for the _1 types, whose quants are
 * unsigned and carry the minimum separately). */
static void decode_block(uint32_t type, const uint8_t *blk, int8_t *q, float *d, float *m) {
    const uint8_t *qs;
    uint32_t qh = 0;
    int offset = 0;
    *d = nu_half_to_float(nu_load_u16(blk));
    *m = 0.0f;
    switch (type) {
    case NU_TYPE_Q8_0: memcpy(q, blk + 2, NU_QK); return;
    case NU_TYPE_Q4_0: qs = blk + 2, offset = 8; break;
    case NU_TYPE_Q4_1: qs = blk + 4, *m = nu_half_to_float(nu_load_u16(blk + 2)); break;
    case NU_TYPE_Q5_0: qs = blk + 6, qh = nu_load_u32(blk + 2), offset = 16; break;
    default: /* Q5_1 */
        qs = blk + 8, qh = nu_load_u32(blk + 4), *m = nu_half_to_float(nu_load_u16(blk + 2));
        break;
    }
    uint8_t high[NU_QK];
    spread_high_bits(qh, high);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0x0F) | high[j]) - offset);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | high[j + 16]) - offset);
    }
}

/* Exact integer dot of two 32-element int8 blocks. */
static int32_t dot_block_i8(const int8_t *a, const int8_t *b) {
    int32_t sum = 0;
    for (int j = 0; j < NU_QK; j++) sum += (int32_t)a[j] * b[j];
    return sum;
}

/* One weight row against k quantised activation rows. Each block adds
 * (d_w * d_a) * isum (+ m_w * s_a) to a per-row float sum, in block order. */
static void tile_quant(const nu_matmul_job *job, int64_t row, int32_t b0, int k, uint32_t type) {
    const uint8_t *w = nu_job_row(job, row);
    const size_t bytes = nu_type_get(type)->block_bytes;
    const int64_t nb = job->W->n_in / NU_QK, n_pad = job->act_n_pad;
    const uint8_t *act[NU_TILE_MAX];
    float acc[NU_TILE_MAX];
    for (int v = 0; v < k; v++) act[v] = nu_job_act(job, b0 + v), acc[v] = 0.0f;
    const int with_min = type == NU_TYPE_Q4_1 || type == NU_TYPE_Q5_1;
    for (int64_t i = 0; i < nb; i++) {
        int8_t q[NU_QK];
        float d, m;
        decode_block(type, w + (size_t)i * bytes, q, &d, &m);
        for (int v = 0; v < k; v++) {
            int32_t isum = dot_block_i8(q, nu_act_q(act[v]) + i * NU_QK);
            acc[v] += d * nu_act_d(act[v], n_pad)[i] * (float)isum;
            if (with_min) acc[v] += m * nu_act_m(act[v], n_pad)[i];
        }
    }
    for (int v = 0; v < k; v++) job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = acc[v];
}

static void tile_q4_0(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_quant(j, r, b, k, NU_TYPE_Q4_0);
}
static void tile_q4_1(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_quant(j, r, b, k, NU_TYPE_Q4_1);
}
static void tile_q5_0(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_quant(j, r, b, k, NU_TYPE_Q5_0);
}
static void tile_q5_1(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_quant(j, r, b, k, NU_TYPE_Q5_1);
}
static void tile_q8_0(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_quant(j, r, b, k, NU_TYPE_Q8_0);
}

/* ---- Float weights ----------------------------------------------------------- */

#define LANES 8 /* independent partial sums: element i goes to lane i % 8 */

/* Weights i .. i+count-1 of a float-type row as floats (count <= LANES;
 * the type test sits outside the element loops). */
static void load_weights(uint32_t type, const uint8_t *w, int64_t i, int count, float *out) {
    if (type == NU_TYPE_F32) {
        memcpy(out, w + 4 * i, (size_t)count * 4);
    } else if (type == NU_TYPE_F16) {
        for (int j = 0; j < count; j++) out[j] = nu_half_to_float(nu_load_u16(w + 2 * (i + j)));
    } else {
        for (int j = 0; j < count; j++) {
            uint32_t bits = (uint32_t)nu_load_u16(w + 2 * (i + j)) << 16;
            memcpy(&out[j], &bits, 4);
        }
    }
}

/* The 8 lane sums added pairwise, in a fixed tree. */
static float sum_lanes(const float *l) {
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* Dots of one float-type row w (n elements) with k float vectors x[v]:
 * whole steps of LANES elements (fixed trip counts the compiler can
 * vectorise), then the tail into the same lanes. */
static void dot_float_rows(uint32_t type, const uint8_t *w, const float *const *x, int k, int64_t n,
                           float *out) {
    float acc[NU_TILE_MAX][LANES] = {{0}};
    float wf[LANES];
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        load_weights(type, w, i, LANES, wf);
        for (int v = 0; v < k; v++)
            for (int j = 0; j < LANES; j++) acc[v][j] += wf[j] * x[v][i + j];
    }
    if (i < n) {
        int count = (int)(n - i);
        load_weights(type, w, i, count, wf);
        for (int v = 0; v < k; v++)
            for (int j = 0; j < count; j++) acc[v][j] += wf[j] * x[v][i + j];
    }
    for (int v = 0; v < k; v++) out[v] = sum_lanes(acc[v]);
}

/* Float-weight tile: activation rows are read straight from x. */
static void tile_float(const nu_matmul_job *job, int64_t row, int32_t b0, int k, uint32_t type) {
    const float *x[NU_TILE_MAX] = {0};
    float out[NU_TILE_MAX];
    const int64_t n = job->W->n_in;
    for (int v = 0; v < k; v++) x[v] = job->x + (size_t)(b0 + v) * (size_t)n;
    dot_float_rows(type, nu_job_row(job, row), x, k, n, out);
    for (int v = 0; v < k; v++) job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = out[v];
}

static void tile_f32(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_float(j, r, b, k, NU_TYPE_F32);
}
static void tile_f16(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_float(j, r, b, k, NU_TYPE_F16);
}
static void tile_bf16(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_float(j, r, b, k, NU_TYPE_BF16);
}

/* ---- Vector helpers --------------------------------------------------------- */

static float dot_f32(const float *a, const float *b, int64_t n) {
    float out;
    dot_float_rows(NU_TYPE_F32, (const uint8_t *)a, &b, 1, n, &out);
    return out;
}

static float dot_f16(const uint16_t *a, const float *b, int64_t n) {
    float out;
    dot_float_rows(NU_TYPE_F16, (const uint8_t *)a, &b, 1, n, &out);
    return out;
}

static void mad_f32(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void mad_f16(float *y, const uint16_t *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * nu_half_to_float(x[i]);
}

static void dots(uint32_t type, const void *row, const float *const *q, int k, int64_t n,
                 float *out) {
    for (int v = 0; v < k; v++)
        out[v] = type == NU_TYPE_F16 ? dot_f16(row, q[v], n) : dot_f32(row, q[v], n);
}

static void mads(uint32_t type, float *const *y, const float *a, int k, const void *x, int64_t n) {
    for (int v = 0; v < k; v++) {
        if (type == NU_TYPE_F16)
            mad_f16(y[v], x, a[v], n);
        else
            mad_f32(y[v], x, a[v], n);
    }
}

static void mads_rows(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                      const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                      int64_t n) {
    for (int64_t j = 0; j < n_rows; j++) {
        float w[4];
        for (int v = 0; v < k; v++) w[v] = a[(size_t)v * a_stride + (size_t)j];
        mads(type, y, w, k, (const char *)base + (size_t)cells[j] * stride, n);
    }
}

static void round_f16(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = nu_half_to_float(nu_f32_to_f16(x[i]));
}

static float scale_max(float *x, int64_t n, float scale) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] *= scale;
        if (x[i] > max) max = x[i];
    }
    return max;
}

static void softmax(float *x, int64_t n, float max, int round16) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += (x[i] = expf(x[i] - max));
    for (int64_t i = 0; i < n; i++) x[i] /= sum;
    if (round16) round_f16(x, n);
}

static void swiglu(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static void to_f16(uint16_t *dst, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = nu_f32_to_f16(x[i]);
}

static void delta_rule(float *m_out, const float *m_in, const float *q, const float *k,
                       const float *v, float a, float beta, float scale, int64_t dk, int64_t dv,
                       float *o) {
    for (int64_t j = 0; j < dv; j++) {
        float *row = m_out + j * dk;
        const float *in = m_in ? m_in + j * dk : NULL;
        float u = 0.0f;
        for (int64_t i = 0; in && i < dk; i++) u += in[i] * k[i];
        const float d = beta * (v[j] - a * u);
        float s = 0.0f;
        for (int64_t i = 0; i < dk; i++) {
            row[i] = (in ? a * in[i] : 0.0f) + d * k[i];
            s += row[i] * q[i];
        }
        o[j] = scale * s;
    }
}

static uint64_t read_words(const void *p, size_t n) {
    const uint64_t *w = p;
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i < n / 8; i += 2) {
        a += w[i];
        b += w[i + 1];
    }
    return a + b;
}

const nu_kernel_set nu_kernels_scalar_set = {
    .name = "scalar",
    .tile =
        {
            [NU_TYPE_F32] = tile_f32,
            [NU_TYPE_F16] = tile_f16,
            [NU_TYPE_BF16] = tile_bf16,
            [NU_TYPE_Q4_0] = tile_q4_0,
            [NU_TYPE_Q4_1] = tile_q4_1,
            [NU_TYPE_Q5_0] = tile_q5_0,
            [NU_TYPE_Q5_1] = tile_q5_1,
            [NU_TYPE_Q8_0] = tile_q8_0,
            [NU_TYPE_Q2_K] = nu_tile_q2_k_scalar,
            [NU_TYPE_Q3_K] = nu_tile_q3_k_scalar,
            [NU_TYPE_Q4_K] = nu_tile_q4_k_scalar,
            [NU_TYPE_Q5_K] = nu_tile_q5_k_scalar,
            [NU_TYPE_Q6_K] = nu_tile_q6_k_scalar,
            [NU_TYPE_IQ4_NL] = nu_tile_iq4_nl_scalar,
            [NU_TYPE_IQ4_XS] = nu_tile_iq4_xs_scalar,
            [NU_TYPE_MXFP4] = nu_tile_mxfp4_scalar,
        },
    .quantize_act = nu_quantize_act_scalar,
    .quantize_act_k = nu_quantize_act_k_scalar,
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .mad_f32 = mad_f32,
    .mad_f16 = mad_f16,
    .dots = dots,
    .mads = mads,
    .mads_rows = mads_rows,
    .quant_dots_rows = nu_quant_dots_rows,
    .quant_mads_rows = nu_quant_mads_rows,
    .round_f16 = round_f16,
    .attn_heads = 4,
    .softmax = softmax,
    .scale_max = scale_max,
    .read = read_words,
    .swiglu = swiglu,
    .to_f16 = to_f16,
    .delta_rule = delta_rule,
};
