/* kernels_internal.h - what the kernel files share and nothing outside
 * src/kernels/ (and the kernel tests) should need: the GGUF block layouts,
 * the layout of quantised activations, the matmul job and the table of
 * kernels one SIMD level provides.
 *
 * How a matmul runs
 *   1. The activations are converted once: for F32 weights they stay F32
 *      (the caller's x is used as is); for F16 (BF16) weights they are
 *      rounded to the nearest f16 (bf16) value, kept as floats, and the
 *      products accumulate in f32 as before; for the quantised types every
 *      32-element block of an activation row becomes 32 int8 values q with a
 *      float scale d = max|x| / 127 (x ~ q * d) and the float d * sum(q),
 *      which the offset (_0) and min (_1) terms of the weight formats need.
 *   2. Rows are split into units that threads claim from a shared counter
 *      (a preempted thread's share is taken over by the others). Each unit is
 *      walked in chunks that stay in cache and, for every group of up to
 *      NU_TILE_MAX activation rows, the level's tile kernel computes the dot
 *      products of one weight row with 1..NU_TILE_MAX activation rows while
 *      reading the weight row once.
 *   A tile kernel keeps separate accumulators per activation row and performs
 *   exactly the same operations for each of them as it does for a tile of one,
 *   so a result never depends on how activation rows were grouped.
 */
#ifndef NU_KERNELS_INTERNAL_H
#define NU_KERNELS_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* ---- GGUF block layouts (32 elements per block, little-endian) ---------- */

#define NU_QK 32 /* elements per block of every quantised type here */

typedef struct nu_block_q4_0 {
    uint16_t d;     /* f16 scale: x = (q - 8) * d */
    uint8_t qs[16]; /* element j in the low nibble of byte j, j + 16 in the high nibble */
} nu_block_q4_0;

typedef struct nu_block_q4_1 {
    uint16_t d;     /* f16 scale */
    uint16_t m;     /* f16 minimum: x = q * d + m */
    uint8_t qs[16]; /* nibbles as in Q4_0 */
} nu_block_q4_1;

typedef struct nu_block_q5_0 {
    uint16_t d;     /* f16 scale: x = (q - 16) * d */
    uint8_t qh[4];  /* bit j (little-endian 32-bit word) is bit 4 of element j */
    uint8_t qs[16]; /* low 4 bits, nibbles as in Q4_0 */
} nu_block_q5_0;

typedef struct nu_block_q5_1 {
    uint16_t d;     /* f16 scale */
    uint16_t m;     /* f16 minimum: x = q * d + m */
    uint8_t qh[4];  /* high bits as in Q5_0 */
    uint8_t qs[16]; /* low 4 bits as in Q4_0 */
} nu_block_q5_1;

typedef struct nu_block_q8_0 {
    uint16_t d; /* f16 scale: x = q * d */
    int8_t qs[32];
} nu_block_q8_0;

_Static_assert(sizeof(nu_block_q4_0) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(nu_block_q4_1) == 20, "q4_1 block is 20 bytes");
_Static_assert(sizeof(nu_block_q5_0) == 22, "q5_0 block is 22 bytes");
_Static_assert(sizeof(nu_block_q5_1) == 24, "q5_1 block is 24 bytes");
_Static_assert(sizeof(nu_block_q8_0) == 34, "q8_0 block is 34 bytes");

/* Byte offsets inside a block, for kernels that read blocks as raw bytes. */
#define NU_Q4_0_BYTES 18
#define NU_Q4_1_BYTES 20
#define NU_Q5_0_BYTES 22
#define NU_Q5_1_BYTES 24
#define NU_Q8_0_BYTES 34

/* The activation layout a weight type multiplies with: 0 the float rows
 * themselves, 1 the 32-element blocks below, 2 Q8_K (kquant.h), 3 (4) the
 * float rows rounded to f16 (bf16) values, as llama.cpp's CPU backend
 * rounds the activations it multiplies with F16 (BF16) weights. */
static inline int nu_act_format(uint32_t type) {
    switch (type) {
    case NU_TYPE_Q4_0:
    case NU_TYPE_Q4_1:
    case NU_TYPE_Q5_0:
    case NU_TYPE_Q5_1:
    case NU_TYPE_Q8_0:
    case NU_TYPE_IQ4_NL:
    case NU_TYPE_MXFP4: return 1;
    case NU_TYPE_Q2_K:
    case NU_TYPE_Q3_K:
    case NU_TYPE_Q4_K:
    case NU_TYPE_Q5_K:
    case NU_TYPE_Q6_K:
    case NU_TYPE_IQ4_XS: return 2;
    case NU_TYPE_F16: return 3;
    case NU_TYPE_BF16: return 4;
    default: return 0;
    }
}

/* True for the block types whose activations are quantised to 8 bits. */
static inline int nu_type_is_quantized(uint32_t type) {
    return type == NU_TYPE_Q4_0 || type == NU_TYPE_Q4_1 || type == NU_TYPE_Q5_0 ||
           type == NU_TYPE_Q5_1 || type == NU_TYPE_Q8_0;
}

/* ---- Quantised activations ---------------------------------------------- */

/* A quantised activation row is padded with zero blocks to a multiple of
 * NU_ACT_PAD elements (16 blocks: one 16-lane vector of scales), so SIMD
 * kernels never need a partial group on the activation side. Layout of one
 * row, every part 64-byte aligned when the row is:
 *   int8  q[n_pad]          the quants, in element order
 *   float d[n_pad / 32]     per-block scale (0 for padding blocks)
 *   float s[n_pad / 32]     per-block d * sum(q) (exact: d has 11 bits)
 *   float m[n_pad / 32]     per-block sum term of the _1 types (below)
 * The quantisation is the one llama.cpp's CPU backend applies to the
 * activations of these weight types (its Q8_0 and Q8_1 blocks), so that
 * products on files made for it come out as it computes them: with
 * amax = max|x|, q = RNE(x * (127 / amax)) and the scale rounded to half
 * precision, d = f16(amax / 127). Q4_1 and Q5_1 multiply their minimum
 * with Q8_1's block sum, which is f16(amax / 127 * sum(q)) (the unrounded
 * scale times the sum, then rounded): that is m. */
#define NU_ACT_PAD 512

/* Padded element count of a quantised activation row of n_in elements. */
static inline int64_t nu_act_n_pad(int64_t n_in) {
    return (n_in + NU_ACT_PAD - 1) / NU_ACT_PAD * NU_ACT_PAD;
}

/* Bytes of one quantised activation row. */
static inline size_t nu_act_row_bytes(int64_t n_in) {
    int64_t n_pad = nu_act_n_pad(n_in);
    return (size_t)n_pad + (size_t)(n_pad / NU_QK) * 3 * sizeof(float);
}

/* The three parts of a quantised activation row starting at row. */
static inline const int8_t *nu_act_q(const uint8_t *row) {
    return (const int8_t *)row;
}
static inline const float *nu_act_d(const uint8_t *row, int64_t n_pad) {
    return (const float *)(const void *)(row + n_pad);
}
static inline const float *nu_act_s(const uint8_t *row, int64_t n_pad) {
    return (const float *)(const void *)(row + n_pad) + n_pad / NU_QK;
}
static inline const float *nu_act_m(const uint8_t *row, int64_t n_pad) {
    return (const float *)(const void *)(row + n_pad) + 2 * (n_pad / NU_QK);
}

/* Activations whose block maximum is below this are treated as zero: the
 * scale's reciprocal would overflow. */
#define NU_ACT_TINY 1e-30f

/* ---- The matmul job ------------------------------------------------------ */

#define NU_TILE_MAX 4 /* activation rows one tile kernel call handles */

typedef struct nu_matmul_job {
    const nu_matrix *W;
    const float *x; /* F32 activations, n_batch rows of W->n_in */
    uint8_t *act;   /* quantised activations (quantised types), rows act_stride apart */
    size_t act_stride;
    int64_t act_n_pad; /* nu_act_n_pad(W->n_in); W->n_in for K-quant weights */
    int32_t n_batch;
    float *y;                  /* n_batch rows of W->n_out */
    _Atomic int64_t next_unit; /* the next unit of rows no thread has claimed */
} nu_matmul_job;

/* Computes y[(b0 + v) * n_out + row] for v < k (1 <= k <= NU_TILE_MAX). */
typedef void (*nu_tile_fn)(const nu_matmul_job *job, int64_t row, int32_t b0, int k);

/* Quantises one activation row of n_in floats into the layout above. Every
 * level produces bit-identical output (same float operations, RNE rounding). */
typedef void (*nu_act_quant_fn)(const float *x, int64_t n_in, uint8_t *dst);

typedef float (*nu_dot_f32_fn)(const float *a, const float *b, int64_t n);
typedef float (*nu_dot_f16_fn)(const uint16_t *a, const float *b, int64_t n);
typedef void (*nu_mad_f32_fn)(float *y, const float *x, float a, int64_t n);
typedef void (*nu_mad_f16_fn)(float *y, const uint16_t *x, float a, int64_t n);
typedef void (*nu_dots_fn)(uint32_t type, const void *row, const float *const *q, int k, int64_t n,
                           float *out);
typedef void (*nu_mads_fn)(uint32_t type, float *const *y, const float *a, int k, const void *x,
                           int64_t n);
typedef void (*nu_mads_rows_fn)(uint32_t type, float *const *y, const float *a, size_t a_stride,
                                int k, const void *base, size_t stride, const int32_t *cells,
                                int64_t n_rows, int64_t n);
typedef void (*nu_dots_rows_fn)(uint32_t type, const float *const *q, int k, const void *base,
                                size_t stride, const int32_t *cells, int64_t n_rows, int64_t n,
                                float *out, size_t out_stride);
typedef void (*nu_round_f16_fn)(float *x, int64_t n);
typedef void (*nu_softmax_fn)(float *x, int64_t n, float max, int round_f16);
typedef float (*nu_scale_max_fn)(float *x, int64_t n, float scale);
typedef uint64_t (*nu_read_fn)(const void *p, size_t n);
typedef void (*nu_swiglu_fn)(float *gate, const float *up, int64_t n);
typedef void (*nu_to_f16_fn)(uint16_t *dst, const float *x, int64_t n);
typedef void (*nu_delta_rule_fn)(float *m_out, const float *m_in, const float *q, const float *k,
                                 const float *v, float a, float beta, float scale, int64_t dk,
                                 int64_t dv, float *o);

/* ---- Panel layout (nu_matrix_pack) ----------------------------------------
 * Rows are taken 16 at a time (a panel) and blocks two at a time (a pair).
 * A pair of Q4_0 or Q8_0 blocks of one panel is stored as
 *   64 bytes   the 16 f16 scales of the first block, then of the second
 *   2 x Q      each block's quants: Q/64 vectors of 64 bytes, vector j holding
 *              bytes 4j..4j+3 of the block's quants for rows 0..15 in turn
 * with Q = 256 (Q4_0: the 16 nibble bytes, as stored) or 512 (Q8_0: the
 * quants plus 128, as unsigned bytes, which integer dot-product instructions
 * need). A Q4_0 vector's low nibbles are elements 4j..4j+3 and its high
 * nibbles elements 16+4j..16+4j+3; a Q8_0 vector holds elements 4j..4j+3.
 * An odd last block is paired with a zero block.
 *
 * A Q4_K super-block (256 elements) of one panel is stored as
 *   32 + 32    the 16 rows' f16 d, then their f16 dmin
 *   128 + 128  the six-bit group scales as bytes, [group][row], then the mins
 *   4 x 512    per 64 elements c (groups 2c and 2c+1): 8 vectors, vector j
 *              holding bytes 4j..4j+3 of the row's 32 quant bytes of c for
 *              rows 0..15; low nibbles are group 2c, high nibbles group 2c+1.
 * A Q5_K super-block is stored as Q4_K's first 320 bytes and then
 *   8 x 320    per group g: 5 vectors, byte 4r + b of vector u holding in its
 *              low five bits the quant of element 32g + 4u + b and in its top
 *              three bits bits 3u..3u+2 of F | G << 5 | H << 10, the quants of
 *              elements 32g + 20 + b, 32g + 24 + b and 32g + 28 + b.
 * A Q6_K super-block (quants q + 32 in 0..63) of one panel is stored as
 *   32         the 16 rows' f16 d
 *   256        the int8 group scales (groups of 16), [group][row]
 *   16 x 192   per group g: 3 vectors, byte 4r + b of vector u holding in its
 *              low six bits the quant of element 16g + 4u + b and in its top
 *              two bits bits 2u, 2u + 1 of that of element 16g + 12 + b.
 * Both have the bytes of the blocks they hold: 16 x 176 and 16 x 210.
 */
#define NU_PANEL_ROWS 16
#define NU_PANEL_Q4_K_BYTES 2368 /* one Q4_K super-block of a panel */
#define NU_PANEL_Q5_K_BYTES 2880 /* one Q5_K super-block of a panel */
#define NU_PANEL_Q6_K_BYTES 3360 /* one Q6_K super-block of a panel */
/* F16 panels are column after column, and four consecutive panels (a group;
 * the last group of a matrix may hold fewer) are interleaved column by
 * column, so one activation row can run four panels' chains over a single
 * sequential stream: column i of panel p of a group of g panels starting at
 * panel p0 holds the 16 rows' halves at bytes 32 * (g * i + p - p0) from
 * the group's start (n_in rounded up to even with a zero column). */
#define NU_PANEL_F16_GROUP 4
static inline const uint8_t *nu_panel_f16_col0(const void *packed, int64_t n_in, int64_t n_panels,
                                               int64_t panel, int64_t *col_stride) {
    const int64_t p0 = panel / NU_PANEL_F16_GROUP * NU_PANEL_F16_GROUP;
    const int64_t g = n_panels - p0 < NU_PANEL_F16_GROUP ? n_panels - p0 : NU_PANEL_F16_GROUP;
    *col_stride = 32 * g;
    return (const uint8_t *)packed + (size_t)p0 * (size_t)((n_in + 1) / 2 * 64) +
           32 * (size_t)(panel - p0);
}
#define NU_PANEL_ACT 8 /* activation rows one panel kernel call handles */

static inline int nu_panel_type(uint32_t type) {
    return type == NU_TYPE_Q4_0 || type == NU_TYPE_Q8_0 || type == NU_TYPE_Q4_K ||
           type == NU_TYPE_Q5_K || type == NU_TYPE_Q6_K || type == NU_TYPE_F16;
}
static inline size_t nu_panel_quant_bytes(uint32_t type) {
    return type == NU_TYPE_Q4_0 ? 256 : 512;
}
static inline size_t nu_panel_pair_bytes(uint32_t type) {
    return 64 + 2 * nu_panel_quant_bytes(type);
}
static inline int64_t nu_panel_pairs(int64_t n_in) {
    return (n_in / NU_QK + 1) / 2;
}
static inline size_t nu_panel_bytes(uint32_t type, int64_t n_in) {
    if (type == NU_TYPE_Q4_K) return (size_t)(n_in / 256) * NU_PANEL_Q4_K_BYTES;
    if (type == NU_TYPE_Q5_K) return (size_t)(n_in / 256) * NU_PANEL_Q5_K_BYTES;
    if (type == NU_TYPE_Q6_K) return (size_t)(n_in / 256) * NU_PANEL_Q6_K_BYTES;
    if (type == NU_TYPE_F16) return (size_t)(n_in + 1) / 2 * 64;
    return (size_t)nu_panel_pairs(n_in) * nu_panel_pair_bytes(type);
}

/* Computes y[(b0 + v) * n_out + 16 * panel + i] for i < 16, v < k
 * (1 <= k <= NU_PANEL_ACT) from W->packed. */
typedef void (*nu_panel_fn)(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);

/* Everything one SIMD level provides. tile[type] is NULL for types the
 * kernels cannot multiply. */
typedef struct nu_kernel_set {
    const char *name;
    nu_tile_fn tile[NU_TYPE_COUNT];
    nu_panel_fn panel[NU_TYPE_COUNT];  /* NULL: no panel kernel, W->packed unused */
    nu_panel_fn panel2[NU_TYPE_COUNT]; /* optional: panels p and p+1 in one call, each
                                          output exactly as panel[] computes it */
    nu_panel_fn panel4[NU_TYPE_COUNT]; /* optional, one activation row (k = 1) only:
                                          panels p..p+3, four independent chains where one
                                          panel's chain is latency-bound; outputs as panel[] */
    nu_act_quant_fn quantize_act;      /* the 32-element block layout above */
    nu_act_quant_fn quantize_act_k;    /* the Q8_K layout of kquant.h */
    nu_dot_f32_fn dot_f32;
    nu_dot_f16_fn dot_f16;
    nu_mad_f32_fn mad_f32;
    nu_mad_f16_fn mad_f16;
    nu_dots_fn dots;                 /* nu_vec_dots */
    nu_mads_fn mads;                 /* nu_vec_mads */
    nu_mads_rows_fn mads_rows;       /* nu_vec_mads_rows */
    nu_dots_rows_fn dots_rows;       /* nu_vec_dots_rows; NULL: dots row by row */
    nu_dots_rows_fn quant_dots_rows; /* nu_vec_dots_rows on Q8_0 / Q4_0 rows (attn_quant.c) */
    nu_mads_rows_fn quant_mads_rows; /* nu_vec_mads_rows on Q8_0 / Q4_0 rows */
    int attn_heads;              /* most heads one call of dots, mads, dots_rows or mads_rows takes
                                    (1..NU_VEC_HEADS); quant_dots_rows / quant_mads_rows take 4 */
    nu_round_f16_fn round_f16;   /* nu_vec_round_f16 */
    nu_softmax_fn softmax;       /* nu_vec_softmax */
    nu_scale_max_fn scale_max;   /* nu_vec_scale_max */
    nu_read_fn read;             /* nu_vec_read */
    nu_swiglu_fn swiglu;         /* nu_vec_swiglu */
    nu_to_f16_fn to_f16;         /* nu_vec_to_f16 */
    nu_delta_rule_fn delta_rule; /* nu_vec_delta_rule */
} nu_kernel_set;

extern const nu_kernel_set nu_kernels_scalar_set;
extern const nu_kernel_set nu_kernels_avx2_set;
extern const nu_kernel_set nu_kernels_avx512_set;

/* The set of the selected level (initialises on first use). */
const nu_kernel_set *nu_kernels_current(void);

/* nu_vec_read with 256-bit loads (dot_avx2.c; the AVX-512 level uses it too:
 * two such loads per cycle outrun any memory). */
uint64_t nu_read_avx2(const void *p, size_t n);
/* nu_vec_scale_max in 256-bit vectors (the AVX-512 level's too). */
float nu_scale_max_avx2(float *x, int64_t n, float scale);

/* The AVX2 level's panel kernels (panel_avx2.c). */
void nu_panel_q4_0_avx2(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);
void nu_panel_q4_k_avx2(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);
void nu_panel_q5_k_avx2(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);
void nu_panel_q6_k_avx2(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);
/* The AVX-512 level's panel kernels (panel_avx512.c). */
void nu_panel_q4_0_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);
void nu_panel_q8_0_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);
void nu_panel_q4_k_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);
void nu_panel_f16_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);
void nu_panel2_f16_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);
void nu_panel4_f16_avx512(const nu_matmul_job *job, int64_t panel, int32_t b0, int k);

/* Defines a nu_tile_fn `fn` (with linkage `qual`: static or nothing) that
 * calls the inline kernel impl(TYPE, job, row, b0, k) with the type and the
 * tile width 1..NU_TILE_MAX as compile-time constants. */
#define NU_DEFINE_TILE(qual, fn, impl, TYPE)                                                       \
    qual void fn(const nu_matmul_job *job, int64_t row, int32_t b0, int k) {                       \
        switch (k) {                                                                               \
        case 1: impl(TYPE, job, row, b0, 1); break;                                                \
        case 2: impl(TYPE, job, row, b0, 2); break;                                                \
        case 3: impl(TYPE, job, row, b0, 3); break;                                                \
        default: impl(TYPE, job, row, b0, 4); break;                                               \
        }                                                                                          \
    }

/* Runs CALL(K) with the head count k (1..4) as the compile-time constant K. */
#define NU_SWITCH_HEADS(k, CALL)                                                                   \
    switch (k) {                                                                                   \
    case 1: CALL(1); break;                                                                        \
    case 2: CALL(2); break;                                                                        \
    case 3: CALL(3); break;                                                                        \
    default: CALL(4); break;                                                                       \
    }

/* Runs CALL(T, K) with the float row type (NU_TYPE_F32 or NU_TYPE_F16) and
 * the head count k (1..4) as the compile-time constants T and K. */
#define NU_SWITCH_FLOAT_HEADS(type, k, CALL)                                                       \
    switch ((k) + 4 * ((type) == NU_TYPE_F16)) {                                                   \
    case 1: CALL(NU_TYPE_F32, 1); break;                                                           \
    case 2: CALL(NU_TYPE_F32, 2); break;                                                           \
    case 3: CALL(NU_TYPE_F32, 3); break;                                                           \
    case 4: CALL(NU_TYPE_F32, 4); break;                                                           \
    case 5: CALL(NU_TYPE_F16, 1); break;                                                           \
    case 6: CALL(NU_TYPE_F16, 2); break;                                                           \
    case 7: CALL(NU_TYPE_F16, 3); break;                                                           \
    default: CALL(NU_TYPE_F16, 4); break;                                                          \
    }

/* Attention's row kernels take rows in groups of R: the addresses of rows
 * j0 .. j0+R-1 of a table indexed by cell, and in `ahead` those of the R
 * after them (to prefetch); returns whether those are all there (else ahead
 * is not filled). */
static inline int nu_rows_at(const uint8_t *base, size_t stride, const int32_t *cells, int64_t j0,
                             int R, int64_t n_rows, const uint8_t **rows, const uint8_t **ahead) {
    const int more = j0 + 2 * R <= n_rows;
    for (int r = 0; r < R; r++) {
        rows[r] = base + (size_t)cells[j0 + r] * stride;
        if (more) ahead[r] = base + (size_t)cells[j0 + R + r] * stride;
    }
    return more;
}

/* Defines `static void name(type, row, q, k, n, out)` (a nu_dots_fn) from the
 * level file's inline float_dots(type, row, q, k, n, out), with the type and
 * the vector count 1..4 as compile-time constants. */
#define NU_DOTS_CALL_(T, K) float_dots(T, row, q, K, n, out)
#define NU_DEFINE_DOTS(name)                                                                       \
    static void name(uint32_t type, const void *row, const float *const *q, int k, int64_t n,      \
                     float *out) {                                                                 \
        NU_SWITCH_FLOAT_HEADS(type, k, NU_DOTS_CALL_)                                              \
    }

/* The panel product (activations already in job->act) as units of work:
 * how many for nth threads, and computing unit `it`. */
int64_t nu_panel_items(const nu_matmul_job *job, int nth);
void nu_panel_item(const nu_matmul_job *job, int64_t it, int nth);

/* Attention over Q8_0 / Q4_0 cache rows (attn_quant.c, the scalar level's
 * quant_dots_rows / quant_mads_rows): nu_vec_dots_rows and nu_vec_mads_rows
 * for those types, n (a head's size) a multiple of 32 and at most
 * NU_ATTN_QUANT_MAX, k at most 4. */
#define NU_ATTN_QUANT_MAX 512
void nu_quant_dots_rows(uint32_t type, const float *const *q, int k, const void *base,
                        size_t stride, const int32_t *cells, int64_t n_rows, int64_t n, float *out,
                        size_t out_stride);
void nu_quant_mads_rows(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                        const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                        int64_t n);
/* The same at the SIMD levels (attn_quant_avx2.c, attn_quant_avx512.c), bit
 * for bit. */
void nu_quant_dots_rows_avx2(uint32_t type, const float *const *q, int k, const void *base,
                             size_t stride, const int32_t *cells, int64_t n_rows, int64_t n,
                             float *out, size_t out_stride);
void nu_quant_mads_rows_avx2(uint32_t type, float *const *y, const float *a, size_t a_stride, int k,
                             const void *base, size_t stride, const int32_t *cells, int64_t n_rows,
                             int64_t n);
void nu_quant_dots_rows_avx512(uint32_t type, const float *const *q, int k, const void *base,
                               size_t stride, const int32_t *cells, int64_t n_rows, int64_t n,
                               float *out, size_t out_stride);
void nu_quant_mads_rows_avx512(uint32_t type, float *const *y, const float *a, size_t a_stride,
                               int k, const void *base, size_t stride, const int32_t *cells,
                               int64_t n_rows, int64_t n);

/* The scalar activation quantisers; the SIMD ones must match them bit for
 * bit. */
void nu_quantize_act_scalar(const float *x, int64_t n_in, uint8_t *dst);
void nu_quantize_act_k_scalar(const float *x, int64_t n_in, uint8_t *dst);

/* Activation row b of a job. */
static inline const uint8_t *nu_job_act(const nu_matmul_job *job, int32_t b) {
    return job->act + (size_t)b * job->act_stride;
}

/* Weight row r of a job. */
static inline const uint8_t *nu_job_row(const nu_matmul_job *job, int64_t r) {
    return (const uint8_t *)job->W->data + (size_t)r * job->W->row_bytes;
}

/* nu_f16_to_f32 for inlining in loops (see fp16.c for why it is exact):
 * the half's exponent and mantissa bits at the float positions read as the
 * value times 2^-112, normals and subnormals alike; infinities and NaNs get
 * their exponent set by hand. Assumes no denormals-are-zero mode. */
static inline float nu_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, body = (uint32_t)(h & 0x7FFFu) << 13, out;
    float f;
    if ((h & 0x7C00u) == 0x7C00u) {
        out = sign | 0x7F800000u | body;
    } else {
        memcpy(&f, &body, 4);
        f *= 0x1p112f;
        memcpy(&out, &f, 4);
        out |= sign;
    }
    memcpy(&f, &out, 4);
    return f;
}

/* x rounded to half precision and back (nearest, ties to even). */
static inline float nu_round_half(float x) {
    return nu_half_to_float(nu_f32_to_f16(x));
}

/* Rounds |v| <= 2^22 to the nearest integer, ties to even: adding 1.5 * 2^23
 * leaves no fraction bits, so the addition itself rounds (in the default
 * rounding mode), exactly as the SIMD cvtps2dq does. */
static inline float nu_round_even(float v) {
    const float magic = 12582912.0f;
    return (v + magic) - magic;
}

/* Reads an unaligned little-endian 32-bit word (x86 is little-endian). */
static inline uint32_t nu_load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Reads an unaligned 16-bit word. */
static inline uint16_t nu_load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ---- Block layout facts shared by the SIMD kernels ------------------------ */

/* Bytes of one block of a quantised type (IQ4_NL: 18, MXFP4: 17; iquant.h). */
static inline __attribute__((always_inline)) int block_bytes(uint32_t type) {
    switch (type) {
    case NU_TYPE_IQ4_NL: return 18;
    case NU_TYPE_MXFP4: return 17;
    case NU_TYPE_Q4_0: return NU_Q4_0_BYTES;
    case NU_TYPE_Q4_1: return NU_Q4_1_BYTES;
    case NU_TYPE_Q5_0: return NU_Q5_0_BYTES;
    case NU_TYPE_Q5_1: return NU_Q5_1_BYTES;
    default: return NU_Q8_0_BYTES;
    }
}

/* Offset of the nibbles inside a block. */
static inline __attribute__((always_inline)) int nibble_offset(uint32_t type) {
    switch (type) {
    case NU_TYPE_MXFP4: return 1;
    case NU_TYPE_IQ4_NL:
    case NU_TYPE_Q4_0: return 2;
    case NU_TYPE_Q4_1: return 4;
    case NU_TYPE_Q5_0: return 6;
    default: return 8; /* Q5_1 */
    }
}

/* The value stored quants exceed the signed ones by (_0 types), else 0. */
static inline __attribute__((always_inline)) int quant_offset(uint32_t type) {
    return type == NU_TYPE_Q4_0 ? 8 : type == NU_TYPE_Q5_0 ? 16 : 0;
}

static inline __attribute__((always_inline)) int has_min(uint32_t type) {
    return type == NU_TYPE_Q4_1 || type == NU_TYPE_Q5_1;
}

static inline __attribute__((always_inline)) int has_high_bits(uint32_t type) {
    return type == NU_TYPE_Q5_0 || type == NU_TYPE_Q5_1;
}

/* Types whose 4-bit codes index a table of signed values (iquant.h). */
static inline __attribute__((always_inline)) int is_table(uint32_t type) {
    return type == NU_TYPE_IQ4_NL || type == NU_TYPE_MXFP4;
}

/* Types whose weights are signed bytes once decoded: their magnitudes meet
 * activations carrying the weights' signs in the unsigned x signed products. */
static inline __attribute__((always_inline)) int signed_weights(uint32_t type) {
    return type == NU_TYPE_Q8_0 || is_table(type);
}

/* The per-block sums an activation row offers a weight type's offset or
 * minimum term: s for the _0 types, m for the _1 types. */
static inline __attribute__((always_inline)) const float *
act_sums(uint32_t type, const uint8_t *row, int64_t n_pad) {
    return has_min(type) ? nu_act_m(row, n_pad) : nu_act_s(row, n_pad);
}

#endif
