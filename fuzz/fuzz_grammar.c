/* fuzz_grammar.c - libFuzzer target for the grammar front ends (GBNF, JSON
 * Schema, regex) and the byte matcher.
 *
 * Input: one selector byte, the source text up to the first NUL byte, then
 * the text to match (if there is no NUL, the source itself is matched).
 * The selector's low two bits pick GBNF, JSON Schema, regex (whole text) or
 * else, by bit 2, a JSON-string regex or a list of choices (one per line);
 * its high bits the JSON whitespace allowance.
 *
 * What must hold, else abort (a crash for libFuzzer):
 *   - a refusal comes with a non-empty one-line message;
 *   - GBNF made by a converter parses: if it does not compile, the reason is
 *     one a schema or regex can legitimately cause (left recursion, nothing
 *     can match, size limits), never a syntax error or an undefined rule;
 *   - the matcher: a refused byte leaves the state as it was; distance 0
 *     exactly when complete; must-end implies complete; committing changes
 *     neither. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A refusal's message: present and on one line. */
static void check_error(nu_status st, const nu_error *err) {
    if (st == NU_OK) return;
    if (err->status != st || err->message[0] == 0 || strchr(err->message, '\n')) abort();
}

/* Failures a converter's output may legitimately have. */
static bool acceptable_compile_error(const char *msg) {
    return strstr(msg, "left-recursive") || strstr(msg, "cannot match any text") ||
           strstr(msg, "would never end") || strstr(msg, "too large") ||
           strstr(msg, "above the limit") || strstr(msg, "out of memory") ||
           strstr(msg, "nested deeper");
}

/* Checks the invariants of one level. */
static void check_level(const nu_gram_program *p, const nu_gram_arena *a, const nu_gram_level *lv) {
    uint32_t d = nu_gram_distance(p, a, lv);
    bool complete = nu_gram_complete(a, lv);
    if ((d == 0) != complete) abort();
    if (nu_gram_must_end(a, lv) && !complete) abort();
}

/* Feeds the bytes one at a time, committing now and then. */
static void run_matcher(const nu_gram_program *p, const uint8_t *in, size_t n) {
    nu_gram_arena a;
    nu_gram_level lv, next;
    if (nu_gram_arena_init(&a, NULL) != NU_OK) return;
    if (nu_gram_start(p, &a, &lv) && nu_gram_commit(&a, &lv)) {
        check_level(p, &a, &lv);
        for (size_t i = 0; i < n && i < 4096; i++) {
            uint32_t tops = a.n_tops, nodes = a.n_nodes;
            if (!nu_gram_step(p, &a, &lv, in[i], &next)) {
                if (a.n_tops != tops || a.n_nodes != nodes) abort();
                if (a.overflow || a.nomem) break;
                continue; /* a refused byte: try the next one on the same state */
            }
            lv = next;
            check_level(p, &a, &lv);
            if (i % 16 == 15) {
                uint32_t d = nu_gram_distance(p, &a, &lv);
                bool c = nu_gram_complete(&a, &lv);
                if (!nu_gram_commit(&a, &lv)) break;
                if (nu_gram_distance(p, &a, &lv) != d || nu_gram_complete(&a, &lv) != c) abort();
            }
        }
    }
    nu_gram_arena_free(&a);
}

/* Choices, one per line (valid UTF-8 only, as nu_choices_to_gbnf asks). */
static bool choices(char *src, nu_buf *b) {
    if (!nu_utf8_valid(src, strlen(src), NULL)) return false;
    const char *list[256];
    size_t n = 0;
    for (char *p = src; n < 256;) {
        list[n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    nu_gram_choices_gbnf(b, list, n);
    return !b->failed;
}

/* Turns the source into GBNF (kinds 1-3) into b; false when refused. */
static bool convert(int kind, uint8_t sel, char *src, nu_buf *b) {
    nu_error err = {0};
    nu_status st;
    if (kind == 3 && (sel & 4)) return choices(src, b);
    if (kind == 1) {
        nu_json_options o = {.max_whitespace = (sel >> 4) % 3};
        st = nu_gram_json_schema_gbnf(src, &o, b, &err);
    } else {
        st = nu_gram_regex_rules(b, "root", src,
                                 kind == 2 ? GRAM_REGEX_FULL : GRAM_REGEX_JSON_STRING, &err);
    }
    check_error(st, &err);
    return st == NU_OK && !b->failed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t sel = data[0];
    int kind = sel & 3;
    const uint8_t *src = data + 1, *nul = memchr(src, 0, size - 1);
    size_t src_len = nul ? (size_t)(nul - src) : size - 1;
    const uint8_t *in = nul ? nul + 1 : src;
    size_t in_len = nul ? size - 1 - src_len - 1 : src_len;
    char *text = malloc(src_len + 1);
    if (!text) return 0;
    memcpy(text, src, src_len);
    text[src_len] = 0;
    nu_buf b;
    nu_buf_init(&b);
    const char *gbnf = text;
    size_t gbnf_len = src_len;
    if (kind != 0) {
        if (!convert(kind, sel, text, &b)) goto done;
        gbnf = b.data;
        gbnf_len = b.len;
    }
    nu_gram_program *p = NULL;
    nu_error err = {0};
    nu_status st = nu_gram_compile(gbnf, gbnf_len, "root", &p, &err);
    check_error(st, &err);
    if (st != NU_OK && kind != 0 && !acceptable_compile_error(err.message)) abort();
    if (st == NU_OK) run_matcher(p, in, in_len);
    nu_gram_program_free(p);
done:
    nu_buf_free(&b);
    free(text);
    return 0;
}
