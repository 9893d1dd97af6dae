/* dot_k_scalar.c - the portable tile kernels of the K-quant weight formats
 * (Q2_K..Q6_K) against Q8_K activations (kquant.h).
 *
 * Per 256-element super-block, with the weight block in the integer form of
 * nu_kq_unpack (element e = (d * sc[g]) * q[e] - dmin * m[g]) and the
 * activation block as da * qa[e]:
 *   sumi = sum over groups g of sc[g] * sum_{e in g} q[e] * qa[e]   (exact)
 *   summ = sum over groups g of m[g] * sum_{e in g} qa[e]            (exact,
 *          from the activation's bsums; 0 for Q3_K/Q6_K)
 *   acc += da * (d * sumi - dmin * summ)                             (float)
 * in super-block order, so a result depends on its two rows only. Integer
 * ranges: |sumi| < 2^27 for every type (largest for Q6_K: 256 * 32 * 127 *
 * 128), |summ| < 2^21 (Q4_K/Q5_K: 8 * 63 * 32 * 127).
 */
#include "kquant.h"

/* One weight row against k activation rows. */
static void tile_k(const nu_matmul_job *job, int64_t row, int32_t b0, int k, uint32_t type) {
    const uint8_t *w = nu_job_row(job, row);
    const size_t bytes = nu_type_get(type)->block_bytes;
    const int64_t n_in = job->W->n_in, nb = n_in / NU_QK_K;
    const uint8_t *act[NU_TILE_MAX];
    float acc[NU_TILE_MAX];
    for (int v = 0; v < k; v++) act[v] = nu_job_act(job, b0 + v), acc[v] = 0.0f;
    nu_kq_block b;
    for (int64_t i = 0; i < nb; i++) {
        nu_kq_unpack(type, w + (size_t)i * bytes, &b);
        const int ng = NU_QK_K / b.group, sums_per_group = b.group / 16;
        for (int v = 0; v < k; v++) {
            const int8_t *qa = nu_actk_q(act[v]) + i * NU_QK_K;
            const int16_t *bsums = nu_actk_bsums(act[v], n_in) + i * 16;
            int32_t sumi = 0, summ = 0;
            for (int g = 0; g < ng; g++) {
                int32_t isum = 0, asum = 0;
                for (int e = g * b.group; e < (g + 1) * b.group; e++) isum += b.q[e] * qa[e];
                for (int s = 0; s < sums_per_group; s++) asum += bsums[g * sums_per_group + s];
                sumi += b.sc[g] * isum;
                summ += b.m[g] * asum;
            }
            const float da = nu_actk_d(act[v], n_in)[i];
            acc[v] += da * (b.d * (float)sumi - b.dmin * (float)summ);
        }
    }
    for (int v = 0; v < k; v++) job->y[(size_t)(b0 + v) * (size_t)job->W->n_out + row] = acc[v];
}

void nu_tile_q2_k_scalar(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_k(j, r, b, k, NU_TYPE_Q2_K);
}
void nu_tile_q3_k_scalar(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_k(j, r, b, k, NU_TYPE_Q3_K);
}
void nu_tile_q4_k_scalar(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_k(j, r, b, k, NU_TYPE_Q4_K);
}
void nu_tile_q5_k_scalar(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_k(j, r, b, k, NU_TYPE_Q5_K);
}
void nu_tile_q6_k_scalar(const nu_matmul_job *j, int64_t r, int32_t b, int k) {
    tile_k(j, r, b, k, NU_TYPE_Q6_K);
}
