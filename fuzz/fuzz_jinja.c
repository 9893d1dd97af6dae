/* fuzz_jinja.c - libFuzzer target for the chat-template engine.
 *
 * The input is template source; it is parsed and, when that succeeds,
 * rendered with a fixed conversation (system, user and assistant messages,
 * one tool, BOS / EOS texts) under small limits so that every input
 * finishes quickly. Whatever the bytes, parsing and rendering must either
 * succeed or fail with a one-line message and a matching status, and never
 * crash, leak or read out of bounds. Broken promises abort, which libFuzzer
 * reports as a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char conversation[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi {{ x }} \\u00e9\\ud83d\\ude00\\r\\n\"},"
    " {\"role\": \"assistant\", \"content\": \"Hello\", \"tool_calls\": [{\"id\": \"abcdefghi\","
    " \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}, {\"role\": \"user\", \"content\": [{\"type\": "
    "\"text\", \"text\": \"part\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\","
    " \"description\": \"n\", \"enum\": [1, 2.5, null, true]}}, \"required\": [\"a\"]}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static cJSON *vars;

/* One-line, non-empty messages with a status that says what failed. */
static void check_error(nu_status st, const nu_error *err) {
    if (err->status != st || err->message[0] == 0) abort();
    if (st != NU_ERR_FORMAT && st != NU_ERR_NOMEM && st != NU_ERR_UNSUPPORTED &&
        st != NU_ERR_INVALID_ARG)
        abort();
    /* raise_exception messages are the template's own and may hold newlines */
    if (st != NU_ERR_INVALID_ARG && strchr(err->message, '\n')) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!vars && !(vars = cJSON_Parse(conversation))) abort();
    nu_jinja_template *t = NULL;
    nu_error err = {0};
    nu_status st = nu_jinja_parse((const char *)data, size, &t, &err);
    if (st != NU_OK) {
        if (t) abort();
        if (st == NU_ERR_INVALID_ARG) abort();
        check_error(st, &err);
        return 0;
    }
    nu_jinja_limits limits = nu_jinja_default_limits();
    limits.max_steps = 20000;
    limits.max_alloc_bytes = 8u << 20;
    limits.max_output = 64u << 10;
    char *out = (char *)1;
    size_t len = 1;
    memset(&err, 0, sizeof err);
    st = nu_jinja_render(t, vars, &limits, &out, &len, &err);
    if (st == NU_OK) {
        if (!out || len > limits.max_output || out[len] != 0) abort();
        free(out);
    } else {
        if (out || len) abort();
        check_error(st, &err);
    }
    nu_jinja_free(t);
    return 0;
}
