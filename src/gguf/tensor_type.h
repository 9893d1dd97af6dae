/* tensor_type.h - the tensor element types GGUF files use: ids, block sizes
 * and names. Values are the ones the GGUF specification assigns. */
#ifndef NU_TENSOR_TYPE_H
#define NU_TENSOR_TYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum nu_type {
    NU_TYPE_F32 = 0,
    NU_TYPE_F16 = 1,
    NU_TYPE_Q4_0 = 2,
    NU_TYPE_Q4_1 = 3,
    NU_TYPE_Q5_0 = 6,
    NU_TYPE_Q5_1 = 7,
    NU_TYPE_Q8_0 = 8,
    NU_TYPE_Q8_1 = 9,
    NU_TYPE_Q2_K = 10,
    NU_TYPE_Q3_K = 11,
    NU_TYPE_Q4_K = 12,
    NU_TYPE_Q5_K = 13,
    NU_TYPE_Q6_K = 14,
    NU_TYPE_Q8_K = 15,
    NU_TYPE_IQ4_NL = 20,
    NU_TYPE_IQ4_XS = 23,
    NU_TYPE_I8 = 24,
    NU_TYPE_I16 = 25,
    NU_TYPE_I32 = 26,
    NU_TYPE_I64 = 27,
    NU_TYPE_F64 = 28,
    NU_TYPE_BF16 = 30,
    NU_TYPE_MXFP4 = 39,
    NU_TYPE_COUNT = 40, /* ids at or above this are unknown */
} nu_type;

typedef struct nu_type_traits {
    const char *name;     /* NULL for ids nucleus does not know */
    uint32_t block_size;  /* elements per block */
    uint32_t block_bytes; /* bytes per block */
    bool computable;      /* the kernels can multiply with it */
} nu_type_traits;

/* Traits of a type id; name is NULL for unknown ids (any uint32 is safe). */
const nu_type_traits *nu_type_get(uint32_t type);

/* Bytes of a row of n elements, or 0 if n is not a whole number of blocks. */
uint64_t nu_type_row_bytes(uint32_t type, uint64_t n);

#endif
