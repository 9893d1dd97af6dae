/* gguf.h - reading GGUF files (versions 2 and 3).
 *
 * The whole file is memory-mapped read-only (or, for fuzzing and tests, read
 * from a caller's buffer). Every header field is validated as it is read:
 * magic, version, counts, string and array lengths against the bytes left,
 * value types, tensor dimensions (overflow), tensor types, alignment, and
 * each tensor's data range inside the file. A file that passes nu_gguf_open can
 * be used without further bounds checks.
 *
 * Strings point into the mapping and are NOT NUL-terminated (use len).
 * Metadata values are parsed into a tree: arrays own an items[] array of
 * values, so nested arrays work the same way as flat ones.
 */
#ifndef NU_GGUF_H
#define NU_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"

typedef enum nu_gguf_value_type {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} nu_gguf_value_type;

typedef struct nu_gguf_string {
    const char *data; /* into the file; not NUL-terminated */
    uint64_t len;
} nu_gguf_string;

typedef struct nu_gguf_value nu_gguf_value;
struct nu_gguf_value {
    nu_gguf_value_type type;
    union {
        uint64_t u;       /* UINT8, UINT16, UINT32, UINT64, BOOL (0 or 1) */
        int64_t i;        /* INT8, INT16, INT32, INT64 */
        double f;         /* FLOAT32, FLOAT64 */
        nu_gguf_string s; /* STRING */
        struct {
            nu_gguf_value_type elem_type;
            uint64_t n;
            nu_gguf_value *items; /* n parsed items (owned by the file) */
            const void *raw;      /* the items' bytes in the file (scalar element types only) */
        } arr;
    } v;
};

typedef struct nu_gguf_kv {
    nu_gguf_string key;
    nu_gguf_value value;
} nu_gguf_kv;

typedef struct nu_gguf_tensor {
    nu_gguf_string name;
    uint32_t n_dims; /* 1..4 */
    int64_t ne[4];   /* ne[0] is the fastest-varying (row length); unused dims are 1 */
    uint32_t type;   /* a nu_type id */
    uint64_t offset; /* relative to the start of the data section */
    uint64_t n_elements;
    uint64_t n_bytes;
    const void *data; /* into the mapping; aligned to the file's alignment */
} nu_gguf_tensor;

typedef struct nu_gguf_file {
    uint32_t version;
    uint64_t n_kv;
    nu_gguf_kv *kv;
    uint64_t n_tensors;
    nu_gguf_tensor *tensors;
    uint64_t alignment;   /* general.alignment, default 32 */
    uint64_t data_offset; /* absolute offset of the data section */
    const uint8_t *base;  /* the mapped (or borrowed) file bytes */
    uint64_t size;
    /* private */
    bool mapped;
    void *arena; /* owner of parsed items and tables */
} nu_gguf_file;

/* Maps and parses a file. On failure *out is NULL and err says what is wrong
 * and where ("tensor 3 'blk.0.attn_q.weight': data ends at byte N, past the
 * end of the file (M bytes)"). */
nu_status nu_gguf_open(const char *path, nu_gguf_file **out, nu_error *err);

/* Parses bytes the caller keeps alive for the file's lifetime (no copy). */
nu_status nu_gguf_open_memory(const void *data, size_t size, nu_gguf_file **out, nu_error *err);

void nu_gguf_close(nu_gguf_file *f);

/* Lookups by key or name (linear or hashed; NULL when absent). The key is a
 * NUL-terminated C string. */
const nu_gguf_value *nu_gguf_find(const nu_gguf_file *f, const char *key);
const nu_gguf_tensor *nu_gguf_find_tensor(const nu_gguf_file *f, const char *name);

/* Typed getters: true when the key exists and holds a value convertible to
 * the requested type without loss (any integer type in range; FLOAT32/64 for
 * floats; BOOL for bool). */
bool nu_gguf_get_u32(const nu_gguf_file *f, const char *key, uint32_t *out);
bool nu_gguf_get_i32(const nu_gguf_file *f, const char *key, int32_t *out);
bool nu_gguf_get_u64(const nu_gguf_file *f, const char *key, uint64_t *out);
bool nu_gguf_get_f32(const nu_gguf_file *f, const char *key, float *out);
bool nu_gguf_get_bool(const nu_gguf_file *f, const char *key, bool *out);
/* Returns the string (not NUL-terminated) or false. */
bool nu_gguf_get_str(const nu_gguf_file *f, const char *key, nu_gguf_string *out);
/* An array with the given element type, or NULL. */
const nu_gguf_value *nu_gguf_get_arr(const nu_gguf_file *f, const char *key,
                                     nu_gguf_value_type elem_type);

/* Compares a nu_gguf_string with a C string. */
bool nu_gguf_str_eq(nu_gguf_string s, const char *c);

/* Short names: "u8", "i32", "f32", "bool", "str", "arr", ... */
const char *nu_gguf_type_name(nu_gguf_value_type t);

#endif
