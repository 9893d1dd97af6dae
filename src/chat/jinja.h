/* jinja.h - a Jinja template engine for chat templates (internal).
 *
 * Renders the subset of Jinja2 that model chat templates use, with the
 * settings Hugging Face transformers uses: trim_blocks and lstrip_blocks on,
 * autoescape off, the loopcontrols extension and the {% generation %} tag,
 * the sandbox's read-only lists and dicts, Python's str() when printing,
 * transformers' tojson, raise_exception and strftime_now. chat.c builds the
 * public nu_chat_* API on top of it.
 *
 * Errors name the line and column (1-based, columns counted in characters)
 * of the construct that failed. Every render is bounded by the limits below:
 * a template that loops forever or builds huge strings fails cleanly. */
#ifndef NU_JINJA_H
#define NU_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "nucleus.h"

typedef struct nu_jinja_template nu_jinja_template;

/* Parses template source (UTF-8; any bytes are accepted and never read past
 * len). Syntax errors, unknown tags, filters and tests fail here with
 * NU_ERR_FORMAT and "line L, column C: ...". */
nu_status nu_jinja_parse(const char *source, size_t len, nu_jinja_template **out, nu_error *err);
void nu_jinja_free(nu_jinja_template *t);

/* The normalised source the template was parsed from, and its length. */
const char *nu_jinja_source(const nu_jinja_template *t);
size_t nu_jinja_source_len(const nu_jinja_template *t);

/* Bounds on one render; a render that goes past one fails. */
typedef struct nu_jinja_limits {
    uint64_t max_steps;       /* statements and expressions evaluated */
    uint64_t max_alloc_bytes; /* bytes of strings and lists created, in total */
    size_t max_output;        /* bytes of output (and of any one string) */
    int max_depth;            /* nesting of evaluation (macro recursion, ...) */
} nu_jinja_limits;

/* Generous defaults for real conversations (a render takes a second or two
 * at worst): 5M steps, 256 MiB allocated in total, 64 MiB of output, depth
 * 400. */
nu_jinja_limits nu_jinja_default_limits(void);

/* Renders with the members of vars (a JSON object, or NULL) as variables:
 * JSON null is None; a number is an int when its value is a whole number
 * of magnitude below 2^53 (cJSON does not keep the text, so 1.0 is an int). Names not in vars are
 * undefined. The output is malloc'd and NUL-terminated. Errors: NU_ERR_INVALID_ARG when the
 * template itself rejects the input with raise_exception(message) (the message is kept verbatim
 * after the position), NU_ERR_FORMAT for any other failure (undefined values used, type errors,
 * ...), NU_ERR_UNSUPPORTED when a limit is exceeded, NU_ERR_NOMEM. */
nu_status nu_jinja_render(const nu_jinja_template *t, const cJSON *vars,
                          const nu_jinja_limits *limits, char **out, size_t *out_len,
                          nu_error *err);

#endif
