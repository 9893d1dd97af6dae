/* packed.c - the panel layout of kernels_internal.h: repacking a matrix at
 * load time, and the product that runs a level's panel kernel over it.
 *
 * Why panels: a row-at-a-time kernel multiplies one weight row with a few
 * activation rows and must reduce every block's 8 partial lanes and scale
 * them separately. With 16 rows interleaved, one integer dot-product
 * instruction advances 16 outputs by 4 columns each, a block's sum lands in
 * one lane per row without any shuffle, and a single multiply-add applies
 * 16 rows' scales. Every weight vector is then reused for up to 8 activation
 * rows while it is in registers.
 */
#include <stdatomic.h>

#include "kquant.h"

/* Activation bytes one pass over a unit of panels reads: each weight panel
 * is read from memory once per chunk, so chunks are as large as the shared
 * L3 cache comfortably holds (4 MB: F16 pp512 +9..15% over 512 KB, the
 * 8-bit types unchanged). */
#define ACT_CHUNK_BYTES (4096 * 1024)

/* Units of panels per thread, so a late or preempted thread's share is
 * taken over by the others. */
#define UNITS_PER_THREAD 8

size_t nu_matrix_pack_bytes(const nu_matrix *W) {
    const int64_t block = nu_type_is_kquant(W->type) ? NU_QK_K : W->type == NU_TYPE_F16 ? 1 : NU_QK;
    if (!nu_panel_type(W->type) || W->n_out % NU_PANEL_ROWS || W->n_in % block || W->n_in <= 0)
        return 0;
    if (!nu_kernels_current()->panel[W->type]) return 0;
    return (size_t)(W->n_out / NU_PANEL_ROWS) * nu_panel_bytes(W->type, W->n_in);
}

/* One block (index kb) of the 16 rows starting at `rows` into a pair slot:
 * its scales at scales[0..15] and its quants at q, four bytes of a row at a
 * time. Missing blocks (kb past the row's end) get zero scales and quants
 * that stand for zero. */
static void pack_block(const nu_matrix *W, const uint8_t *rows, int64_t kb, uint16_t *scales,
                       uint8_t *q) {
    const int q8 = W->type == NU_TYPE_Q8_0;
    const size_t bytes = q8 ? NU_Q8_0_BYTES : NU_Q4_0_BYTES, nq = bytes - 2;
    /* Q8_0 quants become unsigned: q + 128 flips each byte's top bit */
    const uint32_t flip = q8 ? 0x80808080u : 0, zero = q8 ? 0x80808080u : 0x88888888u;
    const int present = kb < W->n_in / NU_QK;
    for (int r = 0; r < NU_PANEL_ROWS; r++) {
        const uint8_t *blk = rows + (size_t)r * W->row_bytes + (size_t)kb * bytes;
        scales[r] = present ? nu_load_u16(blk) : 0;
        for (size_t j = 0; j < nq; j += 4) {
            uint32_t v = present ? nu_load_u32(blk + 2 + j) ^ flip : zero;
            memcpy(q + j / 4 * 64 + (size_t)r * 4, &v, 4);
        }
    }
}

/* The 256 quants (0..63, the stored q + 32) of a Q6_K block, in element
 * order (kquant.h), four bytes at a time (no bit leaves its byte). */
static void q6_k_quants(const nu_block_q6_k *b, uint8_t q[NU_QK_K]) {
    const uint32_t low4 = 0x0F0F0F0Fu, low2 = 0x03030303u;
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = b->ql + 64 * n, *qh = b->qh + 32 * n;
        uint8_t *o = q + 128 * n;
        for (int l = 0; l < 32; l += 4) {
            const uint32_t a = nu_load_u32(ql + l), c = nu_load_u32(ql + l + 32),
                           h = nu_load_u32(qh + l);
            const uint32_t w[4] = {(a & low4) | (h & low2) << 4, (c & low4) | (h >> 2 & low2) << 4,
                                   (a >> 4 & low4) | (h >> 4 & low2) << 4,
                                   (c >> 4 & low4) | (h >> 6 & low2) << 4};
            for (int k = 0; k < 4; k++) memcpy(o + 32 * k + l, &w[k], 4);
        }
    }
}

/* The 256 quants (0..31) of a Q5_K block, in element order (kquant.h), four
 * bytes at a time. */
static void q5_k_quants(const nu_block_q5_k *b, uint8_t q[NU_QK_K]) {
    const uint32_t low4 = 0x0F0F0F0Fu, low1 = 0x01010101u;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l += 4) {
            const uint32_t a = nu_load_u32(b->qs + 32 * c + l),
                           h = nu_load_u32(b->qh + l) >> (2 * c);
            const uint32_t lo = (a & low4) | (h & low1) << 4, hi = (a >> 4 & low4) | (h >> 1 & low1)
                                                                                         << 4;
            memcpy(q + 64 * c + l, &lo, 4);
            memcpy(q + 64 * c + 32 + l, &hi, 4);
        }
}

/* Super-block sb of the 16 K-quant rows (Q4_K, Q5_K or Q6_K) starting at
 * `rows`, in the layout of kernels_internal.h, four bytes (a row's share of
 * a vector) at a time. */
static void pack_k(const nu_matrix *W, const uint8_t *rows, int64_t sb, uint8_t *out) {
    const size_t bytes = nu_type_get(W->type)->block_bytes;
    const uint32_t low3 = 0x07070707u, low2 = 0x03030303u, low1 = 0x01010101u;
    for (int r = 0; r < NU_PANEL_ROWS; r++) {
        const uint8_t *blk = rows + (size_t)r * W->row_bytes + (size_t)sb * bytes;
        if (W->type == NU_TYPE_Q6_K) {
            const nu_block_q6_k *b = (const nu_block_q6_k *)(const void *)blk;
            uint8_t q[NU_QK_K];
            q6_k_quants(b, q);
            memcpy(out + 2 * r, &b->d, 2);
            for (int g = 0; g < 16; g++) {
                out[32 + 16 * g + r] = (uint8_t)b->scales[g];
                const uint32_t last = nu_load_u32(q + 16 * g + 12);
                for (int u = 0; u < 3; u++) {
                    const uint32_t v = nu_load_u32(q + 16 * g + 4 * u) | (last >> (2 * u) & low2)
                                                                             << 6;
                    memcpy(out + 288 + 192 * g + 64 * u + 4 * r, &v, 4);
                }
            }
            continue;
        }
        /* Q4_K and Q5_K: d, dmin, scales[12] and then (Q5_K: qh[32],) qs[128] */
        const nu_block_q4_k *b = (const nu_block_q4_k *)(const void *)blk;
        uint64_t sc, m;
        nu_q4_k_scales_mins(b->scales, &sc, &m);
        memcpy(out + 2 * r, &b->d, 2);
        memcpy(out + 32 + 2 * r, &b->dmin, 2);
        for (int g = 0; g < 8; g++) {
            out[64 + 16 * g + r] = (uint8_t)(sc >> (8 * g));
            out[192 + 16 * g + r] = (uint8_t)(m >> (8 * g));
        }
        if (W->type == NU_TYPE_Q4_K) {
            for (int c = 0; c < 4; c++)
                for (int j = 0; j < 8; j++)
                    memcpy(out + 320 + 512 * c + 64 * j + 4 * r, b->qs + 32 * c + 4 * j, 4);
            continue;
        }
        uint8_t q[NU_QK_K];
        q5_k_quants((const nu_block_q5_k *)(const void *)blk, q);
        for (int g = 0; g < 8; g++) {
            const uint8_t *e = q + 32 * g;
            const uint32_t f = nu_load_u32(e + 20), gq = nu_load_u32(e + 24),
                           h = nu_load_u32(e + 28);
            /* bits 3u..3u+2 of f | g << 5 | h << 10, each byte's own */
            const uint32_t top[5] = {f & low3, (f >> 3 & low2) | (gq & low1) << 2, gq >> 1 & low3,
                                     (gq >> 4 & low1) | (h & low2) << 1, h >> 2 & low3};
            for (int u = 0; u < 5; u++) {
                const uint32_t v = nu_load_u32(e + 4 * u) | top[u] << 5;
                memcpy(out + 320 + 320 * g + 64 * u + 4 * r, &v, 4);
            }
        }
    }
}

/* Panel p of the F16 matrix W, column by column, into its group (dst is the
 * start of the whole packed matrix). */
static void pack_f16(const nu_matrix *W, int64_t p, uint8_t *dst) {
    const int64_t cols = (W->n_in + 1) / 2 * 2;
    int64_t stride;
    uint8_t *out = (uint8_t *)nu_panel_f16_col0(dst, W->n_in, W->n_out / NU_PANEL_ROWS, p, &stride);
    const uint8_t *rows = (const uint8_t *)W->data + (size_t)p * NU_PANEL_ROWS * W->row_bytes;
    for (int r = 0; r < NU_PANEL_ROWS; r++) {
        const uint16_t *row = (const uint16_t *)(const void *)(rows + (size_t)r * W->row_bytes);
        for (int64_t i = 0; i < cols; i++) {
            uint16_t h = i < W->n_in ? row[i] : 0;
            memcpy(out + (size_t)(stride * i) + 2 * r, &h, 2);
        }
    }
}

void nu_matrix_pack(const nu_matrix *W, void *dst, int64_t panel_begin, int64_t panel_end) {
    if (W->type == NU_TYPE_F16) {
        for (int64_t p = panel_begin; p < panel_end; p++) pack_f16(W, p, dst);
        return;
    }
    if (nu_type_is_kquant(W->type)) {
        const size_t panel_bytes = nu_panel_bytes(W->type, W->n_in);
        const size_t sb_bytes = panel_bytes / (size_t)(W->n_in / NU_QK_K);
        for (int64_t p = panel_begin; p < panel_end; p++)
            for (int64_t sb = 0; sb < W->n_in / NU_QK_K; sb++)
                pack_k(W, (const uint8_t *)W->data + (size_t)p * NU_PANEL_ROWS * W->row_bytes, sb,
                       (uint8_t *)dst + (size_t)p * panel_bytes + (size_t)sb * sb_bytes);
        return;
    }
    const size_t pair = nu_panel_pair_bytes(W->type), qb = nu_panel_quant_bytes(W->type);
    const size_t panel_bytes = nu_panel_bytes(W->type, W->n_in);
    const int64_t pairs = nu_panel_pairs(W->n_in);
    for (int64_t p = panel_begin; p < panel_end; p++) {
        const uint8_t *rows = (const uint8_t *)W->data + (size_t)p * NU_PANEL_ROWS * W->row_bytes;
        uint8_t *out = (uint8_t *)dst + (size_t)p * panel_bytes;
        for (int64_t i = 0; i < pairs; i++) {
            uint8_t *slot = out + (size_t)i * pair;
            uint16_t scales[2 * NU_PANEL_ROWS];
            pack_block(W, rows, 2 * i, scales, slot + 64);
            pack_block(W, rows, 2 * i + 1, scales + NU_PANEL_ROWS, slot + 64 + qb);
            memcpy(slot, scales, sizeof scales);
        }
    }
}

/* Panels per unit of work: whole F16 groups, so a unit's panels can run
 * four at a time. */
static int64_t panels_per_unit(int64_t n_panels, int nth) {
    int64_t u = n_panels / ((int64_t)nth * UNITS_PER_THREAD);
    u = (u + NU_PANEL_F16_GROUP - 1) / NU_PANEL_F16_GROUP * NU_PANEL_F16_GROUP;
    return u > 0 ? u : NU_PANEL_F16_GROUP;
}

/* Activation rows per chunk: a multiple of NU_PANEL_ACT whose quantised
 * rows fit ACT_CHUNK_BYTES (at least one group). */
static int32_t act_rows_per_chunk(const nu_matmul_job *job) {
    const size_t stride = job->act_stride ? job->act_stride : (size_t)job->W->n_in * sizeof(float);
    int64_t rows = (int64_t)(ACT_CHUNK_BYTES / stride) / NU_PANEL_ACT * NU_PANEL_ACT;
    if (rows < NU_PANEL_ACT) rows = NU_PANEL_ACT;
    return rows < job->n_batch ? (int32_t)rows : job->n_batch;
}

/* Work items are (activation chunk, unit of panels) pairs, chunk-major, so
 * both threads work on the same activation rows while they are in cache. */
int64_t nu_panel_items(const nu_matmul_job *job, int nth) {
    const int64_t n_panels = job->W->n_out / NU_PANEL_ROWS, unit = panels_per_unit(n_panels, nth);
    const int32_t chunk = act_rows_per_chunk(job);
    return (job->n_batch + chunk - 1) / chunk * ((n_panels + unit - 1) / unit);
}

void nu_panel_item(const nu_matmul_job *job, int64_t it, int nth) {
    const nu_kernel_set *ks = nu_kernels_current();
    nu_panel_fn fn = ks->panel[job->W->type], fn2 = ks->panel2[job->W->type];
    const int64_t n_panels = job->W->n_out / NU_PANEL_ROWS, unit = panels_per_unit(n_panels, nth);
    const int64_t units = (n_panels + unit - 1) / unit;
    const int32_t chunk = act_rows_per_chunk(job);
    const int32_t a0 = (int32_t)(it / units) * chunk;
    const int32_t a1 = job->n_batch - a0 < chunk ? job->n_batch : a0 + chunk;
    const int64_t p0 = it % units * unit, p1 = p0 + unit < n_panels ? p0 + unit : n_panels;
    nu_panel_fn fn4 = ks->panel4[job->W->type];
    if (a1 - a0 == 1 && fn4) {
        /* one activation row: a group's chains at once (units start on a group) */
        int64_t p = p0;
        for (; p + NU_PANEL_F16_GROUP <= p1; p += NU_PANEL_F16_GROUP) fn4(job, p, a0, 1);
        for (; fn2 && p + 2 <= p1; p += 2) fn2(job, p, a0, 1);
        for (; p < p1; p++) fn(job, p, a0, 1);
        return;
    }
    /* pairs only pay when several activation rows share the broadcasts; a
     * single row streams one panel at a time */
    if (a1 - a0 < 2) fn2 = NULL;
    for (int64_t p = p0; p < p1; p += fn2 && p + 1 < p1 ? 2 : 1)
        for (int32_t b = a0; b < a1; b += NU_PANEL_ACT)
            (fn2 && p + 1 < p1 ? fn2 : fn)(job, p, b,
                                           a1 - b < NU_PANEL_ACT ? a1 - b : NU_PANEL_ACT);
}
