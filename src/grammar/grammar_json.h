/* grammar_json.h - GBNF for the pieces of JSON (internal; grammar_json.c),
 * used by json_schema.c. */
#ifndef NU_GRAMMAR_JSON_H
#define NU_GRAMMAR_JSON_H

#include "grammar.h"

/* Fixed rules, by name: value, object, array, string, char, hex4, number,
 * integer, boolean, null, date, time, date-time, uuid, email. */
enum {
    JP_VALUE = 1u << 0,
    JP_OBJECT = 1u << 1,
    JP_ARRAY = 1u << 2,
    JP_STRING = 1u << 3,
    JP_CHAR = 1u << 4,
    JP_HEX4 = 1u << 5,
    JP_NUMBER = 1u << 6,
    JP_INTEGER = 1u << 7,
    JP_BOOLEAN = 1u << 8,
    JP_NULL = 1u << 9,
    JP_DATE = 1u << 10,
    JP_TIME = 1u << 11,
    JP_DATETIME = 1u << 12,
    JP_UUID = 1u << 13,
    JP_EMAIL = 1u << 14,
};

/* have plus what plus everything their definitions use. */
uint32_t nu_gram_json_need(uint32_t have, uint32_t what);
/* Writes the definitions of the rules in set (and of ws when max_ws > 0). */
void nu_gram_json_write_prims(nu_buf *b, uint32_t set, int32_t max_ws);
/* " ws" when whitespace is allowed, else "": appended after each place
 * JSON allows whitespace. */
const char *nu_gram_json_ws(int32_t max_ws);

/* JSON-encodes s ("..." with escapes) into b. */
void nu_gram_json_encode_string(nu_buf *b, const char *s);
/* A GBNF literal matching the JSON encoding of the string s. */
void nu_gram_json_string_literal(nu_buf *b, const char *s);

/* Numeric bounds of a schema. */
typedef struct nu_gram_json_bounds {
    bool has_lo, has_hi;
    double lo, hi;
    bool lo_excl, hi_excl;
} nu_gram_json_bounds;

/* A GBNF expression for the integers lo..hi (lo <= hi). */
void nu_gram_json_int_range(nu_buf *b, int64_t lo, int64_t hi);
/* Expressions for the integers / decimal numbers within bounds (see
 * grammar_json.c for the digit limits); errors when nothing fits. */
nu_status nu_gram_json_integer_range(nu_buf *b, const nu_gram_json_bounds *bd, nu_error *err);
nu_status nu_gram_json_number_range(nu_buf *b, const nu_gram_json_bounds *bd, nu_error *err);

#endif
