/* test_server_json.c - the server's strict check of JSON request bodies
 * (server/json_check.c) and the escaping of text in its answers.
 *
 * The cases come from RFC 8259's grammar (section 2: whitespace and
 * structure; 6: numbers; 7: strings, "All Unicode characters may be placed
 * within the quotation marks, except for the characters that MUST be
 * escaped: quotation mark, reverse solidus, and the control characters
 * (U+0000 through U+001F)"; 4: "The names within an object SHOULD be
 * unique"), in the manner of the JSONTestSuite's y_ / n_ files. Every body
 * the check accepts must also parse with cJSON into the same shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "json_check.h"
#include "test_support.h"

/* Accepted by the check and by cJSON (with nothing left over). */
static void accepted(const char *body, size_t n) {
    char msg[256] = "";
    if (!json_body_check(body, n, msg, sizeof msg)) fail_msg("refused %.*s: %s", (int)n, body, msg);
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(body, n, &end, false);
    if (!v) fail_msg("cJSON refuses what the check accepted: %.*s", (int)n, body);
    cJSON_Delete(v);
}

/* Refused, with a message holding `want`. */
static void refused(const char *body, size_t n, const char *want) {
    char msg[256] = "";
    if (json_body_check(body, n, msg, sizeof msg)) fail_msg("accepted: %.*s", (int)n, body);
    if (!strstr(msg, want)) fail_msg("%.*s: message '%s' lacks '%s'", (int)n, body, msg, want);
}

#define OK(s) accepted(s, sizeof(s) - 1)
#define BAD(s, want) refused(s, sizeof(s) - 1, want)

static void test_grammar(void **state) {
    (void)state;
    OK("{}");
    OK(" \t\r\n{ \"a\" : [ 1 , -0.5e+3 , 0 , 1E2 , 2.5e-1 , true , false , null , \"\" ] } \n");
    OK("[]");
    OK("\"x\"");
    OK("-0");
    OK("{\"a\":{\"b\":{\"c\":[[[]]]}}}");
    OK("[1e999]"); /* grammatical; the field checks refuse its value */
    BAD("", "empty");
    BAD(" ", "expected a value");
    BAD("{", "expected a key");
    BAD("{\"a\"}", "expected ':'");
    BAD("{\"a\":1,}", "expected a key");
    BAD("[1,]", "expected a value");
    BAD("[1 2]", "expected ',' or ']'");
    BAD("{\"a\":1 \"b\":2}", "expected ',' or '}'");
    BAD("{'a':1}", "expected a key");
    BAD("{a:1}", "expected a key");
    BAD("[01]", "leading zero");
    BAD("[-01]", "leading zero");
    BAD("[1.]", "after its '.'");
    BAD("[.5]", "expected a value");
    BAD("[1e]", "exponent");
    BAD("[+1]", "expected a value");
    BAD("[-]", "malformed number");
    BAD("[NaN]", "expected a value");
    BAD("[Infinity]", "expected a value");
    BAD("[tru]", "expected a value");
    BAD("[True]", "expected a value");
    BAD("{} {}", "data after the JSON value");
    BAD("{}x", "data after the JSON value");
    BAD("[1] /* c */", "data after the JSON value");
    BAD("[\"abc", "unterminated string");
    BAD("[\"\\x41\"]", "invalid escape");
    BAD("[\"\\u12\"]", "four hex digits");
    BAD("[\"\\'\"]", "invalid escape");
    BAD("\xef\xbb\xbf{}", "expected a value"); /* RFC 8259 section 8.1: no byte order mark */
}

static void test_strings(void **state) {
    (void)state;
    OK("[\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00 \xc3\xa9 \xf0\x9f\x98\x80\"]");
    OK("[\"\x7f\"]"); /* DEL is not a control character in JSON's sense */
    /* raw control characters, NUL first: each must be escaped */
    BAD("[\"a\x00"
        "b\"]",
        "raw NUL byte");
    BAD("{\"a\x00\":1}", "raw NUL byte");
    BAD("[\"a\x01\"]", "U+0001");
    BAD("[\"a\tb\"]", "U+0009");
    BAD("[\"a\nb\"]", "U+000A");
    BAD("[\"\x1f\"]", "U+001F");
    /* escaped NUL: a C string cannot hold it */
    BAD("[\"a\\u0000b\"]", "NUL characters (\\u0000)");
    /* lone surrogates */
    BAD("[\"\\ud800\"]", "lone UTF-16 surrogate (\\ud800)");
    BAD("[\"\\ud800x\"]", "lone UTF-16 surrogate");
    BAD("[\"\\ud800\\u0041\"]", "lone UTF-16 surrogate");
    BAD("[\"\\udc00\\ud800\"]", "lone UTF-16 surrogate (\\udc00)");
    /* invalid UTF-8: overlong, surrogate, past U+10FFFF, cut short */
    BAD("[\"\xc0\xaf\"]", "not valid UTF-8");
    BAD("[\"\xed\xa0\x80\"]", "not valid UTF-8");
    BAD("[\"\xf4\x90\x80\x80\"]", "not valid UTF-8");
    BAD("[\"\xe2\x82\"]", "not valid UTF-8");
}

static void test_duplicate_keys(void **state) {
    (void)state;
    OK("{\"a\":1,\"b\":2,\"A\":3,\"a \":4}");
    OK("[{\"a\":1},{\"a\":2}]"); /* the same key in two objects */
    OK("{\"a\":{\"a\":{\"a\":1}}}");
    BAD("{\"a\":1,\"a\":1}", "the key \"a\" twice in one object (at bytes 1 and 7)");
    BAD("{\"max_tokens\":1,\"b\":{\"c\":2},\"max_tokens\":5}", "\"max_tokens\" twice");
    BAD("{\"x\":[{\"k\":1,\"j\":0,\"k\":2}]}", "\"k\" twice");
    /* the same key once unescaped */
    BAD("{\"a\":1,\"\\u0061\":2}", "\"a\" twice");
    BAD("{\"\\u00e9\":1,\"\xc3\xa9\":2}", "twice");
    BAD("{\"\\/\":1,\"/\":2}", "\"/\" twice");
    /* empty keys only (no key text stored yet: a fuzzer's find) */
    OK("{\"\":[8]}");
    BAD("{\"\":1,\"\":2}", "the key \"\" twice");
    /* a key after a closed nested object is compared with its own object's keys only */
    OK("{\"a\":{\"b\":1},\"b\":2}");
    /* many keys: every one distinct, then one repeated at the end */
    size_t cap = 20000 * 16, n = 0;
    char *body = malloc(cap);
    assert_non_null(body);
    body[n++] = '{';
    for (int i = 0; i < 20000; i++)
        n += (size_t)sprintf(body + n, "%s\"k%d\":%d", i ? "," : "", i, i);
    body[n++] = '}';
    accepted(body, n);
    n--;
    n += (size_t)sprintf(body + n, ",\"k123\":0}");
    refused(body, n, "\"k123\" twice");
    free(body);
}

static void test_depth(void **state) {
    (void)state;
    char body[6000];
    for (int depth = SRV_JSON_MAX_DEPTH; depth <= SRV_JSON_MAX_DEPTH + 1; depth++) {
        for (int i = 0; i < depth; i++) body[i] = '[', body[depth + i] = ']';
        if (depth == SRV_JSON_MAX_DEPTH)
            accepted(body, 2 * (size_t)depth);
        else
            refused(body, 2 * (size_t)depth, "nests arrays and objects more than 256 deep");
    }
    /* deeper than cJSON's own limit (1000): still the depth named, not "invalid JSON" */
    size_t n = 0;
    for (int i = 0; i < 1100; i++) n += (size_t)sprintf(body + n, "{\"a\":");
    refused(body, n, "more than 256 deep");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_depth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
