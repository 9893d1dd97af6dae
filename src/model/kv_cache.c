/* kv_cache.c - cells of keys and values shared by sequences. */
#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "error.h"
#include "kernels.h"

uint32_t nu_kv_tensor_type(nu_kv_type type) {
    switch (type) {
    case NU_KV_F32: return NU_TYPE_F32;
    case NU_KV_F16: return NU_TYPE_F16;
    case NU_KV_Q8_0: return NU_TYPE_Q8_0;
    case NU_KV_Q4_0: return NU_TYPE_Q4_0;
    default: return NU_TYPE_COUNT;
    }
}

/* Bytes of a row of n elements of a cache type. */
static size_t row_bytes(nu_kv_type type, int32_t n) {
    return (size_t)nu_type_row_bytes(nu_kv_tensor_type(type), (uint64_t)n);
}

/* Plane starts are kept on cache lines. */
static size_t line_up(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* A plane's bytes: keys, then values, each from a cache line. */
static size_t plane_bytes(int32_t n_cells, int32_t k_dim, int32_t v_dim, int32_t heads,
                          nu_kv_type type_k, nu_kv_type type_v) {
    return line_up((size_t)n_cells * row_bytes(type_k, k_dim / heads) * (size_t)heads) +
           line_up((size_t)n_cells * row_bytes(type_v, v_dim / heads) * (size_t)heads);
}

uint64_t nu_kv_cache_bytes(int32_t n_cells, int32_t n_planes, const int32_t *k_dim,
                           const int32_t *v_dim, const int32_t *heads, nu_kv_type type_k,
                           nu_kv_type type_v) {
    uint64_t total = 0;
    for (int32_t i = 0; i < n_planes; i++)
        total += plane_bytes(n_cells, k_dim[i], v_dim[i], heads[i], type_k, type_v);
    return total;
}

nu_status nu_kv_cache_init(nu_kv_cache *c, int32_t n_cells, int32_t n_planes, const int32_t *k_dim,
                           const int32_t *v_dim, const int32_t *heads, nu_kv_type type_k,
                           nu_kv_type type_v, nu_error *err) {
    memset(c, 0, sizeof *c);
    c->n_cells = n_cells;
    c->type_k = nu_kv_tensor_type(type_k);
    c->type_v = nu_kv_tensor_type(type_v);
    c->pos = malloc((size_t)n_cells * sizeof *c->pos);
    c->seqs = calloc((size_t)n_cells, sizeof *c->seqs);
    c->planes = calloc((size_t)(n_planes > 0 ? n_planes : 1), sizeof *c->planes);
    bool ok = c->pos && c->seqs && c->planes;
    size_t total = 0;
    for (int32_t i = 0; ok && i < n_planes; i++) {
        nu_kv_plane *p = &c->planes[i];
        p->k_dim = k_dim[i];
        p->v_dim = v_dim[i];
        p->heads = heads[i];
        p->k_head = row_bytes(type_k, k_dim[i] / heads[i]);
        p->v_head = row_bytes(type_v, v_dim[i] / heads[i]);
        p->k_row = p->k_head * (size_t)heads[i];
        p->v_row = p->v_head * (size_t)heads[i];
        total += plane_bytes(n_cells, k_dim[i], v_dim[i], heads[i], type_k, type_v);
    }
    c->n_planes = ok ? n_planes : 0;
    if (ok && total > 0) {
        /* anonymous memory, in huge pages where the system allows them: the
         * rows are streamed at every token, fewer TLB misses */
        void *area = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ok = area != MAP_FAILED;
        if (ok) {
            c->area = area;
            c->area_bytes = total;
            madvise(area, total, MADV_HUGEPAGE);
            size_t at = 0;
            for (int32_t i = 0; i < n_planes; i++) {
                nu_kv_plane *p = &c->planes[i];
                p->k = (char *)area + at;
                at += line_up((size_t)n_cells * p->k_row);
                p->v = (char *)area + at;
                at += line_up((size_t)n_cells * p->v_row);
            }
        }
    }
    if (!ok) {
        nu_kv_cache_free(c);
        return nu_fail(
            err, NU_ERR_NOMEM, "out of memory for a KV cache of %d cells (%.1f MiB)", n_cells,
            (double)nu_kv_cache_bytes(n_cells, n_planes, k_dim, v_dim, heads, type_k, type_v) /
                (1 << 20));
    }
    nu_kv_cache_clear(c);
    return NU_OK;
}

uint64_t nu_kv_state_bytes(int32_t n_slots, int32_t n_planes, const int64_t *floats) {
    uint64_t slot = 0;
    for (int32_t i = 0; i < n_planes; i++) slot += (uint64_t)floats[i];
    return (uint64_t)n_slots * slot * sizeof(float);
}

nu_status nu_kv_cache_init_state(nu_kv_cache *c, int32_t n_slots, int32_t n_planes,
                                 const int64_t *floats, nu_error *err) {
    size_t total = 0;
    c->state_planes = calloc((size_t)(n_planes > 0 ? n_planes : 1), sizeof *c->state_planes);
    for (int32_t i = 0; c->state_planes && i < n_planes; i++) {
        c->state_planes[i] = (nu_state_plane){total, (size_t)floats[i]};
        total += (size_t)floats[i];
    }
    c->n_state_planes = n_planes;
    c->slot_floats = total;
    c->state = malloc((size_t)n_slots * total * sizeof(float) + 1);
    c->slot_pos = malloc((size_t)n_slots * sizeof *c->slot_pos + 1);
    c->slot_seqs = calloc((size_t)n_slots + 1, sizeof *c->slot_seqs);
    c->slot_busy = calloc((size_t)n_slots + 1, 1);
    if (!c->state_planes || !c->state || !c->slot_pos || !c->slot_seqs || !c->slot_busy)
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for %d recurrent state slots (%.1f MiB)",
                       n_slots, (double)nu_kv_state_bytes(n_slots, n_planes, floats) / (1 << 20));
    c->n_slots = n_slots;
    for (int32_t i = 0; i < n_slots; i++) c->slot_pos[i] = -1;
    return NU_OK;
}

float *nu_kv_state(const nu_kv_cache *c, int32_t slot, int32_t plane) {
    return c->state + (size_t)slot * c->slot_floats + c->state_planes[plane].offset;
}

int32_t nu_kv_state_current(const nu_kv_cache *c, int32_t seq) {
    uint64_t bit = 1ull << seq;
    int32_t best = -1;
    for (int32_t i = 0; i < c->n_slots; i++)
        if ((c->slot_seqs[i] & bit) && (best < 0 || c->slot_pos[i] > c->slot_pos[best])) best = i;
    return best;
}

/* Whether slot i is the current state of one of its sequences: one of them
 * has no slot of a higher position. */
static bool slot_is_current(const nu_kv_cache *c, int32_t i) {
    uint64_t later = 0;
    for (int32_t k = 0; k < c->n_slots; k++)
        if (c->slot_pos[k] > c->slot_pos[i]) later |= c->slot_seqs[k];
    return (c->slot_seqs[i] & ~later) != 0;
}

/* What losing checkpoint i costs: the positions its sequences would read
 * again to rebuild it, from the next older slot they share (or from 0). */
static int32_t slot_cost(const nu_kv_cache *c, int32_t i) {
    int32_t below = -1;
    for (int32_t j = 0; j < c->n_slots; j++)
        if (j != i && (c->slot_seqs[j] & c->slot_seqs[i]) && c->slot_pos[j] < c->slot_pos[i] &&
            c->slot_pos[j] > below)
            below = c->slot_pos[j];
    return c->slot_pos[i] - below;
}

int32_t nu_kv_state_claim(nu_kv_cache *c, int32_t seq, int32_t pos, bool evict) {
    int32_t slot = -1;
    for (int32_t i = 0; i < c->n_slots && slot < 0; i++)
        if (c->slot_pos[i] < 0) slot = i;
    int32_t best_cost = 0;
    bool free_slot = slot >= 0; /* (else every candidate is weighed, not the first taken) */
    for (int32_t i = 0; !free_slot && evict && i < c->n_slots; i++) {
        if (c->slot_busy[i] || slot_is_current(c, i)) continue;
        int32_t cost = slot_cost(c, i);
        if (slot < 0 || cost < best_cost) slot = i, best_cost = cost;
    }
    if (slot < 0) return -1;
    c->slot_pos[slot] = pos;
    c->slot_seqs[slot] = 1ull << seq;
    c->slot_busy[slot] = 1;
    return slot;
}

void nu_kv_cache_free(nu_kv_cache *c) {
    free(c->state_planes);
    free(c->state);
    free(c->slot_pos);
    free(c->slot_seqs);
    free(c->slot_busy);
    free(c->pos);
    free(c->seqs);
    if (c->area) munmap(c->area, c->area_bytes);
    free(c->planes);
    memset(c, 0, sizeof *c);
}

bool nu_kv_cache_claim(nu_kv_cache *c, int32_t n, const int32_t *seq, const int32_t *pos,
                       int32_t *cells) {
    if (n > c->n_cells - c->used) return false;
    int32_t found = 0;
    for (int32_t i = 0; i < c->n_cells && found < n; i++) {
        if (c->pos[i] >= 0) continue;
        c->pos[i] = pos[found];
        c->seqs[i] = 1ull << seq[found];
        cells[found++] = i;
    }
    c->used += found;
    return true;
}

static void free_cell(nu_kv_cache *c, int32_t i) {
    c->pos[i] = -1;
    c->seqs[i] = 0;
    c->used--;
}

void nu_kv_cache_release(nu_kv_cache *c, int32_t n, const int32_t *cells) {
    for (int32_t i = 0; i < n; i++) free_cell(c, cells[i]);
}

void nu_kv_cache_store(nu_kv_cache *c, bool value, int32_t plane, int32_t cell, const float *row) {
    const nu_kv_plane *p = &c->planes[plane];
    const int32_t dim = (value ? p->v_dim : p->k_dim) / p->heads;
    const uint32_t type = value ? c->type_v : c->type_k;
    for (int32_t g = 0; g < p->heads; g++, row += dim) {
        uint8_t *dst = (uint8_t *)(value ? nu_kv_plane_values(p, c->n_cells, g)
                                         : nu_kv_plane_keys(p, c->n_cells, g)) +
                       (size_t)cell * (value ? p->v_head : p->k_head);
        if (type == NU_TYPE_F32)
            memcpy(dst, row, (size_t)dim * sizeof(float));
        else if (type == NU_TYPE_F16)
            nu_vec_to_f16((uint16_t *)(void *)dst, row, dim);
        else
            nu_quantize_row(type, row, dst, dim);
    }
}

/* Insertion into a list kept sorted by position: sequences are filled in
 * position order, so each insertion is usually at the end. */
int32_t nu_kv_cache_seq_cells(const nu_kv_cache *c, int32_t seq, int32_t *cells, int32_t cap) {
    uint64_t bit = 1ull << seq;
    int32_t n = 0;
    for (int32_t i = 0; i < c->n_cells && n < cap; i++) {
        if (!(c->seqs[i] & bit)) continue;
        int32_t j = n++;
        while (j > 0 && c->pos[cells[j - 1]] > c->pos[i]) {
            cells[j] = cells[j - 1];
            j--;
        }
        cells[j] = i;
    }
    return n;
}

void nu_kv_cache_clear(nu_kv_cache *c) {
    for (int32_t i = 0; i < c->n_cells; i++) c->pos[i] = -1;
    memset(c->seqs, 0, (size_t)c->n_cells * sizeof *c->seqs);
    c->used = 0;
    for (int32_t i = 0; i < c->n_slots; i++) c->slot_pos[i] = -1, c->slot_seqs[i] = 0;
}

static bool in_range(int32_t pos, int32_t p0, int32_t p1) {
    return pos >= p0 && (p1 < 0 || pos < p1);
}

void nu_kv_cache_seq_remove(nu_kv_cache *c, int32_t seq, int32_t p0, int32_t p1) {
    uint64_t bit = seq < 0 ? ~0ull : 1ull << seq;
    for (int32_t i = 0; i < c->n_cells; i++) {
        if (!(c->seqs[i] & bit) || !in_range(c->pos[i], p0, p1)) continue;
        c->seqs[i] &= ~bit;
        if (!c->seqs[i]) free_cell(c, i);
    }
    for (int32_t i = 0; i < c->n_slots; i++) {
        if (!(c->slot_seqs[i] & bit) || !in_range(c->slot_pos[i], p0, p1)) continue;
        c->slot_seqs[i] &= ~bit;
        if (!c->slot_seqs[i]) c->slot_pos[i] = -1;
    }
}

void nu_kv_cache_seq_copy(nu_kv_cache *c, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    if (src == dst) return;
    uint64_t sbit = 1ull << src, dbit = 1ull << dst;
    for (int32_t i = 0; i < c->n_cells; i++)
        if ((c->seqs[i] & sbit) && in_range(c->pos[i], p0, p1)) c->seqs[i] |= dbit;
    for (int32_t i = 0; i < c->n_slots; i++)
        if ((c->slot_seqs[i] & sbit) && in_range(c->slot_pos[i], p0, p1)) c->slot_seqs[i] |= dbit;
}

int32_t nu_kv_cache_seq_pos_max(const nu_kv_cache *c, int32_t seq) {
    uint64_t bit = 1ull << seq;
    int32_t best = -1;
    for (int32_t i = 0; i < c->n_cells; i++)
        if ((c->seqs[i] & bit) && c->pos[i] > best) best = c->pos[i];
    return best;
}
