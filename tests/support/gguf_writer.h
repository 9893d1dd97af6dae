/* gguf_writer.h - a small in-memory GGUF writer for tests.
 *
 * Builds a GGUF file image key by key and tensor by tensor, then emits it to
 * a buffer or a file. It writes exactly what it is told, so it can also make
 * malformed files (any version number, any value type id, tensor infos with
 * arbitrary dims, types and offsets); for everything else, patch the emitted
 * bytes with gw_patch_u32 / gw_patch_u64 at offsets from gw_next_kv_offset.
 *
 *     gw_writer *w = gw_new();
 *     gw_add_str(w, "general.architecture", "llama");
 *     gw_add_u32(w, "llama.block_count", 2);
 *     const char *toks[] = {"<unk>", "<s>", "</s>"};
 *     gw_add_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, toks, 3);
 *     gw_begin_arr(w, "nested", GGUF_ARRAY);      // an array of arrays
 *     gw_begin_arr(w, NULL, GGUF_UINT32);         //   item 0: [7, 8]
 *     gw_add_u32(w, NULL, 7);
 *     gw_add_u32(w, NULL, 8);
 *     gw_end_arr(w);
 *     gw_add_arr(w, NULL, GGUF_INT8, (int8_t[]){-1}, 1);  // item 1: [-1]
 *     gw_end_arr(w);
 *     float weights[64 * 4] = {0};
 *     gw_add_tensor(w, "w", NU_TYPE_F32, 2, (int64_t[]){64, 4}, weights);
 *     uint8_t *bytes; size_t len;
 *     if (gw_emit(w, &bytes, &len)) { ...; free(bytes); }
 *     gw_free(w);
 *
 * Misuse (a NULL key at top level, a key inside an array, an item of the
 * wrong type, unbalanced begin/end) is recorded, and gw_emit then fails;
 * gw_error says what went wrong. Running out of memory aborts (test code).
 */
#ifndef NU_GGUF_WRITER_H
#define NU_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* Fixed offsets in every emitted image. */
#define GW_OFFSET_MAGIC 0
#define GW_OFFSET_VERSION 4
#define GW_OFFSET_N_TENSORS 8
#define GW_OFFSET_N_KV 16
#define GW_OFFSET_FIRST_KV 24

typedef struct gw_writer gw_writer;

/* A new, empty file: version 3, alignment 32, no keys, no tensors. */
gw_writer *gw_new(void);
void gw_free(gw_writer *w);

/* The version written in the header (default 3). Any value is written as
 * is; the layout stays that of versions 2 and 3. */
void gw_set_version(gw_writer *w, uint32_t version);

/* Adds the key general.alignment (u32) here, in key order, and aligns the
 * data section and tensor data to it. To write an invalid alignment key
 * without changing the layout, use gw_add_u32 (or another type) instead. */
void gw_set_alignment(gw_writer *w, uint32_t alignment);

/* Scalar values. With a key, adds a top-level key-value pair; inside an open
 * array (gw_begin_arr), pass key NULL to append an item of the array's
 * element type instead. */
void gw_add_u8(gw_writer *w, const char *key, uint8_t v);
void gw_add_i8(gw_writer *w, const char *key, int8_t v);
void gw_add_u16(gw_writer *w, const char *key, uint16_t v);
void gw_add_i16(gw_writer *w, const char *key, int16_t v);
void gw_add_u32(gw_writer *w, const char *key, uint32_t v);
void gw_add_i32(gw_writer *w, const char *key, int32_t v);
void gw_add_f32(gw_writer *w, const char *key, float v);
void gw_add_bool(gw_writer *w, const char *key, bool v);
void gw_add_u64(gw_writer *w, const char *key, uint64_t v);
void gw_add_i64(gw_writer *w, const char *key, int64_t v);
void gw_add_f64(gw_writer *w, const char *key, double v);
/* A NUL-terminated string, or len bytes (which may contain NULs). */
void gw_add_str(gw_writer *w, const char *key, const char *s);
void gw_add_strn(gw_writer *w, const char *key, const char *s, uint64_t len);

/* A flat array from a C array of n items of the element type's C type:
 * uint8_t, int8_t, ..., float, bool, uint64_t, int64_t, double, or
 * const char * (NUL-terminated) for GGUF_STRING. elem_type GGUF_ARRAY is
 * not allowed here (use gw_begin_arr). key NULL appends it as an item of
 * the open array (an array of arrays). */
void gw_add_arr(gw_writer *w, const char *key, nu_gguf_value_type elem_type, const void *items,
                uint64_t n);

/* Opens an array whose items are then added one by one with key NULL
 * (scalars, strings, gw_add_arr or nested gw_begin_arr); gw_end_arr closes
 * it and fills in its count. Up to 16 levels deep. */
void gw_begin_arr(gw_writer *w, const char *key, nu_gguf_value_type elem_type);
void gw_end_arr(gw_writer *w);

/* A top-level pair with any type id and the given value bytes written as
 * they are (for malformed files: unknown types, bad bools, ...). */
void gw_add_raw(gw_writer *w, const char *key, uint32_t type, const void *bytes, size_t len);

/* A tensor of n_dims dims ne[] (ne[0] is the row length) and a nu_type id.
 * Its nu_type_row_bytes(type, ne[0]) * ne[1] * ... bytes are copied from
 * data (zeros when data is NULL) and placed, aligned, in the data section in
 * the order tensors are added. */
void gw_add_tensor(gw_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const int64_t *ne, const void *data);

/* A tensor info written exactly as given (n_dims may be 0 or > 4, dims may be
 * anything, the offset is relative to the data section), with no data. */
void gw_add_tensor_info(gw_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *ne, uint64_t offset);

/* The byte offset in the emitted image where the next key would start; once
 * every key is added, the offset of the first tensor info. */
uint64_t gw_next_kv_offset(const gw_writer *w);

/* The image in a malloc'ed buffer the caller frees: header, keys, tensor
 * infos, then (if there are tensors) zero padding to the alignment and the
 * tensor data. Returns false after misuse (see gw_error). */
bool gw_emit(gw_writer *w, uint8_t **out, size_t *len);

/* Emits the image into a file; false after misuse or an I/O error. */
bool gw_write_file(gw_writer *w, const char *path);

/* The first misuse recorded, or NULL. */
const char *gw_error(const gw_writer *w);

/* Overwrite a little-endian integer in an emitted image. */
void gw_patch_u32(uint8_t *image, uint64_t offset, uint32_t v);
void gw_patch_u64(uint8_t *image, uint64_t offset, uint64_t v);

#endif
