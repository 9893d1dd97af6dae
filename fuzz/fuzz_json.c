/* fuzz_json.c - libFuzzer target for the server's strict JSON check
 * (server/json_check.c) and its escaping of text in answers (utf8.c).
 *
 * Raw bytes as a request body: when the check accepts them, cJSON must
 * parse them whole (no trailing bytes), with no key twice in any object
 * and no string holding a NUL; when it refuses, it must say why. And the
 * same bytes as generated text: utf8_json_string must make a JSON string
 * literal that cJSON reads back as the bytes themselves (invalid UTF-8
 * replaced by U+FFFD, everything else kept, NUL included as \u0000). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "json_check.h"
#include "text_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok) {
    if (!ok) abort();
}

/* No object under v holds a key twice; strings are what cJSON says. */
static void check_tree(const cJSON *v) {
    if (cJSON_IsObject(v))
        for (const cJSON *a = v->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next) check(strcmp(a->string, b->string));
    for (const cJSON *c = v->child; c; c = c->next) check_tree(c);
}

/* The escaper: a literal that reads back as the repaired bytes. */
static void check_escape(const char *s, size_t n) {
    char *lit = utf8_json_string(s, n);
    if (!lit) return;
    size_t len = strlen(lit);
    check(len >= 2 && lit[0] == '"' && lit[len - 1] == '"');
    char *fixed = utf8_sanitize(s, n); /* the repair, with NUL bytes dropped */
    bool has_nul = memchr(s, 0, n) != NULL;
    cJSON *v = cJSON_ParseWithLength(lit, len);
    check(v && cJSON_IsString(v));
    /* cJSON's strings end at the first NUL: compare where there is none */
    if (!has_nul && fixed) check(!strcmp(v->valuestring, fixed));
    cJSON_Delete(v);
    free(fixed);
    free(lit);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *body = (const char *)data;
    char msg[256] = "";
    if (json_body_check(body, size, msg, sizeof msg)) {
        const char *end = NULL;
        cJSON *root = cJSON_ParseWithLengthOpts(body, size, &end, false);
        check(root != NULL);
        while (end < body + size && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
            end++;
        check(end == body + size);
        check_tree(root);
        cJSON_Delete(root);
    } else {
        check(msg[0] != 0);
    }
    check_escape(body, size);
    return 0;
}
