/* cli_json.h - writing JSON to a stream (strings escaped, UTF-8 kept). */
#ifndef NU_CLI_JSON_H
#define NU_CLI_JSON_H

#include <stdio.h>

#include "nucleus.h"

/* A JSON string literal of n bytes (control characters and quotes escaped;
 * invalid UTF-8 bytes become U+FFFD). */
void json_string(FILE *f, const char *s, size_t n);
/* A number; NaN and infinities (not JSON) become null. */
void json_number(FILE *f, double x);
/* The token's text as a JSON string. */
void json_token_text(FILE *f, const nu_model *m, int32_t token);
/* One result: text, finish reason, counts, tokens, log-probs. */
void json_result(FILE *f, const nu_model *m, const nu_generate_result *r);

#endif
