/* kv_cache.h - the keys and values of past positions, shared by sequences.
 *
 * The cache is a pool of cells. A cell holds one position's key and value
 * for every layer that keeps them (a plane per such layer, each with its own
 * row sizes) and belongs to a set of sequences (a bit mask), so several
 * sequences can share a prompt's cells without copying them (n samples of
 * one prompt, beams, a conversation's reused prefix). A query of sequence s
 * at position p attends to the cells of s whose position is <= p, visited in
 * position order so that the sum does not depend on where cells live.
 *
 * Recurrent state. Layers that carry a state from one token to the next
 * (Gated DeltaNet: a convolution window and a matrix per head; any other
 * recurrent mixer likewise) keep it in state slots beside the cells, one
 * plane per such layer. A slot holds every recurrent layer's state after one
 * position of a history and, like a cell, the bit mask of the sequences
 * whose history it is. A slot is written by the decode that reads its
 * position and never changed afterwards: the next position's state goes to
 * another slot, so the older one stays as a checkpoint a sequence can roll
 * back to (speculative decoding, prefix reuse), and sequences that share a
 * history share its slots without copying (n samples, beams). A decode keeps
 * the states after the positions whose logits it reads and after its
 * second-to-last position, then, with the slots left, after every 64th
 * position (recurrent.c), so that a prompt read in one batch can be rolled
 * back to near any of its positions.
 *
 * A sequence's state is its slot of the highest position. Removing
 * positions from p0 drops its slots at p0 and later; when none is left at
 * exactly p0 - 1 the state is behind the cells, and the next decode of the
 * sequence reads the positions in between again first (nu_decode). Slots
 * are large and few: when a decode needs more than are free, the
 * checkpoints that are cheapest to lose go first (those closest to the next
 * older checkpoint of their sequences), never a sequence's current state nor
 * one the decode uses. */
#ifndef NU_KV_CACHE_H
#define NU_KV_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"

#define NU_MAX_SEQ 64

_Static_assert(NU_MAX_SEQ <= 64, "a cell's sequences are the bits of a uint64_t");

/* One layer's keys and values, head by head: for each of the `heads`
 * key/value heads, n_cells rows of k_dim / heads (v_dim / heads) elements
 * of the cache's key (value) type, k_head (v_head) bytes each, cell i's at
 * i * k_head. Attention reads one head's rows for all its query heads, so
 * they are contiguous in memory (and stream from it); k_row / v_row are a
 * cell's bytes over all heads. */
typedef struct nu_kv_plane {
    int32_t k_dim, v_dim; /* n_head_kv * head_dim, n_head_kv * head_dim_v */
    int32_t heads;
    size_t k_row, v_row;
    size_t k_head, v_head;
    void *k, *v;
} nu_kv_plane;

/* Head g's key (value) rows of a plane of a cache of n_cells cells. */
static inline void *nu_kv_plane_keys(const nu_kv_plane *p, int32_t n_cells, int32_t g) {
    return (char *)p->k + (size_t)g * (size_t)n_cells * p->k_head;
}
static inline void *nu_kv_plane_values(const nu_kv_plane *p, int32_t n_cells, int32_t g) {
    return (char *)p->v + (size_t)g * (size_t)n_cells * p->v_head;
}

/* One recurrent layer's part of a state slot: floats [offset, offset + floats). */
typedef struct nu_state_plane {
    size_t offset, floats;
} nu_state_plane;

typedef struct nu_kv_cache {
    int32_t n_cells;
    int32_t n_planes;
    nu_kv_plane *planes;
    void *area; /* every plane's rows, one mapping of area_bytes */
    size_t area_bytes;
    uint32_t type_k, type_v; /* tensor types of the rows: F32, F16, Q8_0 or Q4_0 */
    int32_t *pos;            /* per cell; -1 when free */
    uint64_t *seqs;          /* per cell: bit s set when sequence s uses it */
    int32_t used;
    /* recurrent state (n_slots 0 when no layer has one) */
    int32_t n_slots;
    int32_t n_state_planes;
    nu_state_plane *state_planes;
    size_t slot_floats; /* one slot: every plane */
    float *state;       /* [n_slots][slot_floats] */
    int32_t *slot_pos;  /* per slot: the position whose state it holds; -1 when free */
    uint64_t *slot_seqs;
    uint8_t *slot_busy; /* in use by the decode being planned: never dropped */
} nu_kv_cache;

/* The tensor type rows of a cache type are stored in (NU_TYPE_F32, F16,
 * Q8_0, Q4_0), or NU_TYPE_COUNT for an unknown one. */
uint32_t nu_kv_tensor_type(nu_kv_type type);

/* A cache of n_cells cells with n_planes planes, plane i holding keys of
 * k_dim[i] and values of v_dim[i] elements in heads[i] heads (each head's
 * part whole blocks of a quantised type). */
nu_status nu_kv_cache_init(nu_kv_cache *c, int32_t n_cells, int32_t n_planes, const int32_t *k_dim,
                           const int32_t *v_dim, const int32_t *heads, nu_kv_type type_k,
                           nu_kv_type type_v, nu_error *err);
void nu_kv_cache_free(nu_kv_cache *c);

/* Bytes of keys and values for n_cells cells of those planes. */
uint64_t nu_kv_cache_bytes(int32_t n_cells, int32_t n_planes, const int32_t *k_dim,
                           const int32_t *v_dim, const int32_t *heads, nu_kv_type type_k,
                           nu_kv_type type_v);

/* Claims n free cells for (seq, pos) pairs; returns false (claiming nothing)
 * when fewer than n are free. */
bool nu_kv_cache_claim(nu_kv_cache *c, int32_t n, const int32_t *seq, const int32_t *pos,
                       int32_t *cells);
/* Gives back cells claimed by nu_kv_cache_claim (on a failed decode). */
void nu_kv_cache_release(nu_kv_cache *c, int32_t n, const int32_t *cells);

/* Writes one position's key or value row into a plane (converting to the
 * cache's type). */
void nu_kv_cache_store(nu_kv_cache *c, bool value, int32_t plane, int32_t cell, const float *row);

/* The cells of seq sorted by position; returns their count (at most cap). */
int32_t nu_kv_cache_seq_cells(const nu_kv_cache *c, int32_t seq, int32_t *cells, int32_t cap);

/* Adds n_slots state slots of n_planes planes (plane i: floats[i] floats)
 * to an initialised cache. */
nu_status nu_kv_cache_init_state(nu_kv_cache *c, int32_t n_slots, int32_t n_planes,
                                 const int64_t *floats, nu_error *err);

/* Bytes of n_slots slots of those planes. */
uint64_t nu_kv_state_bytes(int32_t n_slots, int32_t n_planes, const int64_t *floats);

/* One plane of a slot. */
float *nu_kv_state(const nu_kv_cache *c, int32_t slot, int32_t plane);

/* The slot holding seq's current state (its highest position), or -1. */
int32_t nu_kv_state_current(const nu_kv_cache *c, int32_t seq);

/* Claims a slot for the state of seq after pos: a free one, else (when
 * evict is set) the checkpoint cheapest to lose among those not busy and not
 * any sequence's current state. The slot is marked busy. Returns -1 when
 * there is none. */
int32_t nu_kv_state_claim(nu_kv_cache *c, int32_t seq, int32_t pos, bool evict);

void nu_kv_cache_clear(nu_kv_cache *c);
void nu_kv_cache_seq_remove(nu_kv_cache *c, int32_t seq, int32_t p0, int32_t p1);
void nu_kv_cache_seq_copy(nu_kv_cache *c, int32_t src, int32_t dst, int32_t p0, int32_t p1);
int32_t nu_kv_cache_seq_pos_max(const nu_kv_cache *c, int32_t seq);

#endif
