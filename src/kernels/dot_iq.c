/* dot_iq.c - the portable tile kernels of IQ4_NL, MXFP4 (against the
 * 32-element activation blocks) and IQ4_XS (against Q8_K): the codes are
 * looked up in their table, the integer sums are exact, and the float steps
 * are those iquant.h states, block after block. */
#include "iquant.h"

/* Exact integer dot of 32 table values (codes in 16 bytes) with 32 int8. */
static int32_t dot_codes(const uint8_t *qs, const int8_t *table, const int8_t *a) {
    int32_t sum = 0;
    for (int j = 0; j < 16; j++) sum += table[qs[j] & 15] * a[j] + table[qs[j] >> 4] * a[j + 16];
    return sum;
}

/* IQ4_NL (f16 scale) or MXFP4 (E8M0 scale) against 32-element blocks. */
static void tile_32(const nu_matmul_job *job, int64_t row, int32_t b0, int k, uint32_t type) {
    const int mx = type == NU_TYPE_MXFP4;
    const size_t bytes = mx ? NU_MXFP4_BYTES : NU_IQ4_NL_BYTES;
    const int8_t *table = mx ? nu_fp4x2_values : nu_iq4nl_values;
    const uint8_t *w = nu_job_row(job, row);
    const int64_t nb = job->W->n_in / NU_QK, n_pad = job->act_n_pad;
    const uint8_t *act[NU_TILE_MAX];
    float acc[NU_TILE_MAX];
    for (int v = 0; v < k; v++) act[v] = nu_job_act(job, b0 + v), acc[v] = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = w + (size_t)i * bytes;
        const float d = mx ? nu_e8m0_half(blk[0]) : nu_half_to_float(nu_load_u16(blk));
        const uint8_t *qs = blk + (mx ? 1 : 2);
        for (int v = 0; v < k; v++) {
            const int32_t isum = dot_codes(qs, table, nu_act_q(act[v]) + i * NU_QK);
            const float da = nu_act_d(act[v], n_pad)[i];
            acc[v] += (mx ? da * d : d * da) * (float)isum;
        }
    }
    for (int v = 0; v < k; v++) job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = acc[v];
}

void nu_tile_iq4_nl_scalar(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_32(j, r, b, k, NU_TYPE_IQ4_NL);
}
void nu_tile_mxfp4_scalar(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_32(j, r, b, k, NU_TYPE_MXFP4);
}

/* IQ4_XS against Q8_K: per super-block the exact sum over sub-blocks of
 * (ls - 32) * isum, then one float step. |sumi| < 8 * 32 * 32 * 127 * 127. */
void nu_tile_iq4_xs_scalar(const nu_matmul_job *job, int64_t row, int32_t b0, int k) {
    const uint8_t *w = nu_job_row(job, row);
    const int64_t n_in = job->W->n_in, nsb = n_in / NU_QK_K;
    const uint8_t *act[NU_TILE_MAX];
    float acc[NU_TILE_MAX];
    for (int v = 0; v < k; v++) act[v] = nu_job_act(job, b0 + v), acc[v] = 0.0f;
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *blk = w + (size_t)i * NU_IQ4_XS_BYTES;
        const float d = nu_half_to_float(nu_load_u16(blk));
        for (int v = 0; v < k; v++) {
            const int8_t *qa = nu_actk_q(act[v]) + i * NU_QK_K;
            int32_t sumi = 0;
            for (int b = 0; b < 8; b++)
                sumi += (nu_iq4_xs_scale(blk, b) - 32) *
                        dot_codes(blk + 8 + 16 * b, nu_iq4nl_values, qa + 32 * b);
            acc[v] += d * nu_actk_d(act[v], n_in)[i] * (float)sumi;
        }
    }
    for (int v = 0; v < k; v++) job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = acc[v];
}
