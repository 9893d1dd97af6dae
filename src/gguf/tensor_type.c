/* tensor_type.c - the table of tensor element types (sizes from the GGUF
 * specification's block layouts). */
#include "tensor_type.h"

static const nu_type_traits type_table[NU_TYPE_COUNT] = {
    [NU_TYPE_F32] = {"f32", 1, 4, true},
    [NU_TYPE_F16] = {"f16", 1, 2, true},
    [NU_TYPE_Q4_0] = {"q4_0", 32, 18, true},
    [NU_TYPE_Q4_1] = {"q4_1", 32, 20, true},
    [NU_TYPE_Q5_0] = {"q5_0", 32, 22, true},
    [NU_TYPE_Q5_1] = {"q5_1", 32, 24, true},
    [NU_TYPE_Q8_0] = {"q8_0", 32, 34, true},
    [NU_TYPE_Q8_1] = {"q8_1", 32, 36, false},
    [NU_TYPE_Q2_K] = {"q2_k", 256, 84, true},
    [NU_TYPE_Q3_K] = {"q3_k", 256, 110, true},
    [NU_TYPE_Q4_K] = {"q4_k", 256, 144, true},
    [NU_TYPE_Q5_K] = {"q5_k", 256, 176, true},
    [NU_TYPE_Q6_K] = {"q6_k", 256, 210, true},
    [NU_TYPE_Q8_K] = {"q8_k", 256, 292, false}, /* activations only */
    [16] = {"iq2_xxs", 256, 66, false},
    [17] = {"iq2_xs", 256, 74, false},
    [18] = {"iq3_xxs", 256, 98, false},
    [19] = {"iq1_s", 256, 50, false},
    [NU_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, true},
    [21] = {"iq3_s", 256, 110, false},
    [22] = {"iq2_s", 256, 82, false},
    [NU_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, true},
    [NU_TYPE_I8] = {"i8", 1, 1, false},
    [NU_TYPE_I16] = {"i16", 1, 2, false},
    [NU_TYPE_I32] = {"i32", 1, 4, false},
    [NU_TYPE_I64] = {"i64", 1, 8, false},
    [NU_TYPE_F64] = {"f64", 1, 8, false},
    [29] = {"iq1_m", 256, 56, false},
    [NU_TYPE_BF16] = {"bf16", 1, 2, true},
    [34] = {"tq1_0", 256, 54, false},
    [35] = {"tq2_0", 256, 66, false},
    [NU_TYPE_MXFP4] = {"mxfp4", 32, 17, true},
};

static const nu_type_traits unknown_type = {NULL, 0, 0, false};

const nu_type_traits *nu_type_get(uint32_t type) {
    if (type >= NU_TYPE_COUNT || !type_table[type].name) return &unknown_type;
    return &type_table[type];
}

uint64_t nu_type_row_bytes(uint32_t type, uint64_t n) {
    const nu_type_traits *t = nu_type_get(type);
    if (!t->name || n % t->block_size) return 0;
    return n / t->block_size * t->block_bytes;
}
