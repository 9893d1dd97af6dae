/* test_grammar.c - grammars: GBNF parse errors (line, column, what was
 * expected), the byte matcher (literals, classes, repetition bounds,
 * partial UTF-8, completion and distance), regexes (tables and a random
 * differential test against PCRE2), choices, JSON Schema conversion (errors
 * naming keyword and path; integer and decimal ranges checked exhaustively;
 * formats), and token masks compared with a brute-force reference that feeds
 * every token's bytes to a copy of the state. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test_support.h"

enum { REJECT = 0, PREFIX = 1, COMPLETE = 2 };

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* Compiles GBNF without a vocabulary; fails the test on error. */
static nu_grammar *compile(const char *gbnf) {
    nu_grammar *g = NULL;
    nu_error err = {0};
    nu_status st = nu_grammar_from_gbnf(NULL, gbnf, NULL, &g, &err);
    if (st != NU_OK) fail_msg("grammar does not compile: %s\n%s", err.message, gbnf);
    return g;
}

/* Feeds text to a fresh state: REJECT, PREFIX (may continue) or COMPLETE. */
static int match_len(const nu_grammar *g, const char *text, size_t len) {
    nu_grammar_state *s;
    assert_int_equal(nu_grammar_state_new(g, &s, NULL), NU_OK);
    int r = REJECT;
    if (nu_grammar_accept_bytes(s, text, len, NULL) == NU_OK)
        r = nu_grammar_is_complete(s) ? COMPLETE : PREFIX;
    nu_grammar_state_free(s);
    return r;
}

static int match(const nu_grammar *g, const char *text) {
    return match_len(g, text, strlen(text));
}

/* Compiles and matches once. */
static int gbnf_match(const char *gbnf, const char *text) {
    nu_grammar *g = compile(gbnf);
    int r = match(g, text);
    nu_grammar_free(g);
    return r;
}

/* The error message of a grammar that must not compile. */
static const char *gbnf_error(const char *gbnf, nu_error *err) {
    nu_grammar *g = NULL;
    nu_status st = nu_grammar_from_gbnf(NULL, gbnf, NULL, &g, err);
    if (st == NU_OK) fail_msg("grammar compiled but should not:\n%s", gbnf);
    assert_null(g);
    assert_int_equal(err->status, st);
    return err->message;
}

static void assert_contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle)) fail_msg("expected \"%s\" in \"%s\"", needle, hay);
}

/* ------------------------------------------------------------------------ */
/* GBNF parsing                                                             */
/* ------------------------------------------------------------------------ */

typedef struct error_case {
    const char *gbnf;
    const char *want; /* a substring of the message */
} error_case;

static const error_case parse_errors[] = {
    {"", "line 1, column 1: the grammar is empty"},
    {"# nothing but a comment\n\n", "line 3, column 1: the grammar is empty"},
    {"root ::= \"abc", "line 1, column 10: unterminated string literal"},
    {"root ::= \"ab\nc\"", "line 1, column 10: unterminated string literal"},
    {"root ::= [a-z", "line 1, column 10: unterminated character class"},
    {"root ::= []", "line 1, column 10: empty character class"},
    {"root ::= [z-a]", "line 1, column 11: character range is reversed"},
    {"root ::= \"\\q\"", "line 1, column 11: unknown escape"},
    {"root ::= \"\\x4\"", "line 1, column 11: expected 2 hex digits after '\\x'"},
    {"root ::= \"\\u12G4\"", "line 1, column 11: expected 4 hex digits after '\\u'"},
    {"root ::= \"\\U00110000\"", "line 1, column 11: \\U00110000 is beyond"},
    {"root := \"a\"", "line 1, column 6: expected '::=' after the rule name 'root'"},
    {"root ::= \"a\"\nfoo ::= bar", "line 2, column 9: undefined rule 'bar'"},
    {"root ::= x y\nx ::= \"a\"", "line 1, column 12: undefined rule 'y'"},
    {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
    {"root ::= *", "line 1, column 10: '*' must follow something to repeat"},
    {"root ::= \"a\" | +", "line 1, column 16: '+' must follow something to repeat"},
    {"root ::= \"a\"{3,2}", "line 1, column 13: repetition {3,2}: the maximum is less"},
    {"root ::= \"a\"{x}", "line 1, column 14: expected a number in the repetition"},
    {"root ::= \"a\"{1,2", "line 1, column 17: expected '}' to close the repetition"},
    {"root ::= \"a\"{1000000}", "line 1, column 14: repetition count is above the limit"},
    {"root ::= (\"a\" | \"b\"", "line 1, column 20: expected ')' to close the group opened at "
                                "line 1, column 10"},
    {"root ::= \"a\")", "line 1, column 13: unmatched ')'"},
    {"root ::= \"a\" @", "line 1, column 14: expected a string, a character class, '.', '(' or "
                         "a rule name, found '@'"},
    {"root ::=\n  \"a\"\n  | \"b\" %\n", "line 3, column 9: expected a string"},
    {"root ::= \"\xff\"", "line 1, column 11: invalid UTF-8"},
    {"foo ::= \"x\"", "the grammar has no rule 'root'"},
    {"expr ::= expr \"+\" term | term\nterm ::= [0-9]\nroot ::= expr",
     "line 1, column 1: rule 'expr' is left-recursive (expr -> expr)"},
    {"root ::= a\na ::= b \"x\"\nb ::= \"\"? a", "is left-recursive (a -> b -> a)"},
    {"root ::= (\"a\"?)*", "line 1, column 16: in rule 'root': a repetition of something that "
                           "can match the empty string"},
    {"root ::= \"a\" root", "line 1, column 1: rule 'root' cannot match any text"},
    {"root ::= ((((\"a\"", "line 1, column 17: expected ')'"},
};

static void test_parse_errors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof parse_errors / sizeof *parse_errors; i++) {
        nu_error err = {0};
        const char *msg = gbnf_error(parse_errors[i].gbnf, &err);
        if (!strstr(msg, parse_errors[i].want))
            fail_msg("grammar %zu:\n%s\nwant \"%s\"\ngot  \"%s\"", i, parse_errors[i].gbnf,
                     parse_errors[i].want, msg);
        assert_null(strchr(msg, '\n'));
    }
}

/* Grammars that must compile: comments, multi-line rules, every escape. */
static void test_parse_ok(void **state) {
    (void)state;
    const char *g = "# a comment\n"
                    "root ::= greeting (\" \" name)? # trailing comment\n"
                    "greeting ::=\n"
                    "    \"hello\"\n"
                    "  | \"hi\"   # more\n"
                    "  | (\"hey\"\n"
                    "     | \"yo\")\n"
                    "name ::= [A-Z] [a-z_0-9-]*\n";
    nu_grammar *gr = compile(g);
    assert_int_equal(match(gr, "hello"), COMPLETE);
    assert_int_equal(match(gr, "yo Bob"), COMPLETE);
    assert_int_equal(match(gr, "hey "), PREFIX);
    assert_int_equal(match(gr, "hey bob"), REJECT);
    nu_grammar_free(gr);
    gr = compile("root ::= \"\\n\\r\\t\\\\\\\"\\'\\[\\]\\-\\^\\/\\x41\\u00e9\\U0001F600\"");
    assert_int_equal(match(gr, "\n\r\t\\\"'[]-^/A\xc3\xa9\xf0\x9f\x98\x80"), COMPLETE);
    nu_grammar_free(gr);
    /* a custom start rule */
    nu_grammar *g2 = NULL;
    assert_int_equal(nu_grammar_from_gbnf(NULL, "a ::= \"x\"\nb ::= \"y\"", "b", &g2, NULL), NU_OK);
    assert_int_equal(match(g2, "y"), COMPLETE);
    assert_int_equal(match(g2, "x"), REJECT);
    nu_grammar_free(g2);
}

/* ------------------------------------------------------------------------ */
/* Byte matcher                                                             */
/* ------------------------------------------------------------------------ */

typedef struct match_case {
    const char *gbnf, *text;
    int want;
} match_case;

static const match_case match_cases[] = {
    {"root ::= \"abc\"", "abc", COMPLETE},
    {"root ::= \"abc\"", "ab", PREFIX},
    {"root ::= \"abc\"", "abd", REJECT},
    {"root ::= \"abc\"", "abcd", REJECT},
    {"root ::= \"\"", "", COMPLETE},
    {"root ::= \"a\" | \"ab\" | \"abc\"", "ab", COMPLETE},
    {"root ::= [a-c]+", "cab", COMPLETE},
    {"root ::= [a-c]+", "", PREFIX},
    {"root ::= [^a-c]", "d", COMPLETE},
    {"root ::= [^a-c]", "b", REJECT},
    {"root ::= [^\"\\\\]*", "it's \xe2\x82\xac 5", COMPLETE},
    {"root ::= .", "\xf0\x9f\x98\x80", COMPLETE},
    {"root ::= .", "\n", COMPLETE},
    {"root ::= . .", "\xf0\x9f\x98\x80", PREFIX},
    {"root ::= \"x\"?", "", COMPLETE},
    {"root ::= \"x\"?", "x", COMPLETE},
    {"root ::= \"x\"?", "xx", REJECT},
    {"root ::= \"ab\"*", "abab", COMPLETE},
    {"root ::= \"ab\"*", "aba", PREFIX},
    {"root ::= \"ab\"+", "", PREFIX},
    {"root ::= (\"a\" | \"b\") \"c\"", "bc", COMPLETE},
    {"root ::= p\np ::= \"(\" p \")\" | \"\"", "((()))", COMPLETE},
    {"root ::= p\np ::= \"(\" p \")\" | \"\"", "(()", PREFIX},
    {"root ::= p\np ::= \"(\" p \")\" | \"\"", "())", REJECT},
    {"root ::= [\\u00e0-\\u00ff]", "\xc3\xa9", COMPLETE},
    {"root ::= [\\u00e0-\\u00ff]", "\xc3", PREFIX},
    {"root ::= [\\u00e0-\\u00ff]", "\xc2", REJECT}, /* U+0080..U+00BF: none in range */
    {"root ::= [\\u0100-\\u0200]", "\xc3", REJECT},
    {"root ::= [\\u4e00-\\u9fff]", "\xe4\xb8", PREFIX},
    {"root ::= [\\u4e00-\\u9fff]", "\xe3", REJECT},
    {"root ::= .", "\xc0\x80", REJECT},     /* overlong */
    {"root ::= .", "\xe0\x80", REJECT},     /* overlong, found early */
    {"root ::= .", "\xed\xa0\x80", REJECT}, /* a surrogate */
    {"root ::= .", "\xf4\x90", REJECT},     /* beyond U+10FFFF */
    {"root ::= .", "\x80", REJECT},         /* a lone continuation byte */
    {"root ::= .", "\xff", REJECT},
    {"root ::= [\\x00-\\x7f]*", "plain ascii", COMPLETE},
    {"root ::= [\\x00-\\x7f]*", "caf\xc3\xa9", REJECT},
    {"root ::= \"\\xe9\"", "\xc3\xa9", COMPLETE}, /* \xHH is the code point */
};

static void test_match_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof match_cases / sizeof *match_cases; i++) {
        int got = gbnf_match(match_cases[i].gbnf, match_cases[i].text);
        if (got != match_cases[i].want)
            fail_msg("case %zu: %s on \"%s\": want %d, got %d", i, match_cases[i].gbnf,
                     match_cases[i].text, match_cases[i].want, got);
    }
}

/* x{m,n} accepts exactly m..n copies, for every kind of bound. */
static void test_repetition_bounds(void **state) {
    (void)state;
    static const struct {
        const char *op;
        int min, max; /* max -1: unbounded */
    } ops[] = {{"{3}", 3, 3}, {"{2,5}", 2, 5}, {"{0,2}", 0, 2}, {"{4,}", 4, -1},
               {"*", 0, -1},  {"+", 1, -1},    {"?", 0, 1},     {"{0,0}", 0, 0}};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        char g[64], text[32];
        snprintf(g, sizeof g, "root ::= \"ab\"%s \"!\"", ops[i].op);
        nu_grammar *gr = compile(g);
        for (int n = 0; n <= 8; n++) {
            text[0] = 0;
            for (int k = 0; k < n; k++) strcat(text, "ab");
            strcat(text, "!");
            bool ok = n >= ops[i].min && (ops[i].max < 0 || n <= ops[i].max);
            if ((match(gr, text) == COMPLETE) != ok) fail_msg("%s with %d copies", g, n);
        }
        nu_grammar_free(gr);
    }
}

/* A character split byte by byte stays a prefix until it is whole. */
static void test_partial_utf8(void **state) {
    (void)state;
    nu_grammar *g = compile("root ::= [\\U0001F600-\\U0001F64F] \"!\"");
    nu_grammar_state *s;
    assert_int_equal(nu_grammar_state_new(g, &s, NULL), NU_OK);
    const char *smile = "\xf0\x9f\x98\x80!";
    for (int i = 0; i < 5; i++) {
        assert_false(nu_grammar_is_complete(s));
        assert_int_equal(nu_grammar_accept_bytes(s, smile + i, 1, NULL), NU_OK);
        assert_int_equal(nu_grammar_distance(s), i < 4 ? 4 - i : 0);
    }
    assert_true(nu_grammar_is_complete(s));
    assert_true(nu_grammar_must_end(s));
    nu_grammar_state_free(s);
    /* F0 9F 99 stays in range (U+1F640..U+1F67F overlaps); F0 9F 9A does not */
    assert_int_equal(match(g, "\xf0\x9f\x99"), PREFIX);
    assert_int_equal(match(g, "\xf0\x9f\x9a"), REJECT);
    nu_grammar_free(g);
}

/* Completion, the forced end and the distance to completion. */
static void test_complete_and_distance(void **state) {
    (void)state;
    nu_grammar *g = compile("root ::= \"abc\" | \"de\" | \"x\" \"y\"?");
    nu_grammar_state *s, *copy;
    nu_error err;
    assert_int_equal(nu_grammar_state_new(g, &s, NULL), NU_OK);
    assert_int_equal(nu_grammar_distance(s), 1);
    assert_false(nu_grammar_is_complete(s));
    assert_int_equal(nu_grammar_state_copy(s, &copy, NULL), NU_OK);
    assert_int_equal(nu_grammar_accept_bytes(s, "x", 1, NULL), NU_OK);
    assert_true(nu_grammar_is_complete(s));
    assert_false(nu_grammar_must_end(s));
    assert_int_equal(nu_grammar_accept_bytes(s, "y", 1, NULL), NU_OK);
    assert_true(nu_grammar_must_end(s));
    /* the copy did not move */
    assert_int_equal(nu_grammar_accept_bytes(copy, "ab", 2, NULL), NU_OK);
    assert_int_equal(nu_grammar_distance(copy), 1);
    assert_int_equal(nu_grammar_accept_bytes(copy, "x", 1, &err), NU_ERR_INVALID_ARG);
    assert_contains(err.message, "byte 0 (0x78) is not allowed");
    assert_int_equal(nu_grammar_distance(copy), 1); /* unchanged by the refusal */
    assert_int_equal(nu_grammar_state_set_budget(copy, 0, &err), NU_ERR_INVALID_ARG);
    assert_contains(err.message, "needs at least 1 more bytes");
    assert_int_equal(nu_grammar_state_set_budget(copy, 1, NULL), NU_OK);
    nu_grammar_state_free(s);
    nu_grammar_state_free(copy);
    nu_grammar_free(g);
}

/* Long input commits on the way; a refusal late in it leaves the state as
 * it was. */
static void test_long_input(void **state) {
    (void)state;
    nu_grammar *g = compile("root ::= ([a-z] | \" \")* \".\"");
    size_t n = 20000;
    char *text = malloc(n + 2);
    for (size_t i = 0; i < n; i++) text[i] = i % 7 == 6 ? ' ' : (char)('a' + i % 26);
    nu_grammar_state *s;
    assert_int_equal(nu_grammar_state_new(g, &s, NULL), NU_OK);
    assert_int_equal(nu_grammar_accept_bytes(s, text, n, NULL), NU_OK);
    text[n - 3] = '!';
    nu_error err;
    assert_int_equal(nu_grammar_accept_bytes(s, text, n, &err), NU_ERR_INVALID_ARG);
    assert_contains(err.message, "byte 19997");
    assert_int_equal(nu_grammar_accept_bytes(s, ".", 1, NULL), NU_OK);
    assert_true(nu_grammar_must_end(s));
    nu_grammar_state_free(s);
    free(text);
    nu_grammar_free(g);
}

/* An ambiguous grammar whose parses double with every byte fails with an
 * error instead of running away. */
static void test_runaway(void **state) {
    (void)state;
    nu_grammar *g = compile("root ::= s\ns ::= \"(\" s \")\" | \"(\" s \"]\" | \"\"");
    nu_grammar_state *s;
    nu_error err;
    assert_int_equal(nu_grammar_state_new(g, &s, NULL), NU_OK);
    char open[40];
    memset(open, '(', sizeof open);
    assert_int_equal(nu_grammar_accept_bytes(s, open, sizeof open, &err), NU_ERR_UNSUPPORTED);
    assert_contains(err.message, "too ambiguous");
    assert_int_equal(nu_grammar_accept_bytes(s, "()", 2, NULL), NU_OK); /* still usable */
    nu_grammar_state_free(s);
    nu_grammar_free(g);
}

/* ------------------------------------------------------------------------ */
/* Regexes and choices                                                      */
/* ------------------------------------------------------------------------ */

static int regex_match(const char *re, const char *text) {
    nu_grammar *g = NULL;
    nu_error err = {0};
    if (nu_grammar_from_regex(NULL, re, &g, &err) != NU_OK)
        fail_msg("regex /%s/ does not compile: %s", re, err.message);
    int r = match(g, text);
    nu_grammar_free(g);
    return r;
}

static const match_case regex_cases[] = {
    {"\\d{3}-\\d{4}", "555-1234", COMPLETE},
    {"\\d{3}-\\d{4}", "55-1234", REJECT},
    {"^colou?r$", "color", COMPLETE},
    {"^colou?r$", "colour", COMPLETE},
    {"(ab|cd)*e", "abcdabe", COMPLETE},
    {"(?:a|b){2,3}", "aba", COMPLETE},
    {"(?:a|b){2,3}", "abab", REJECT},
    {"(?<word>[a-z]+)!", "hey!", COMPLETE},
    {"[^a-c]+", "xyz", COMPLETE},
    {"[^a-c]+", "xaz", REJECT},
    {"a.c",
     "a\xc3\xa9"
     "c",
     COMPLETE},
    {"a.c", "a\nc", REJECT},
    {"[\\s\\S]", "\n", COMPLETE},
    {"\\w+@\\w+\\.com", "me@x.com", COMPLETE},
    {"\\w+@\\w+\\.com", "me@x.org", REJECT},
    {"\\S+", "a b", REJECT},
    {"\\D\\W", "a!", COMPLETE},
    {"\\D\\W", "1!", REJECT},
    {"(a*)*b", "aab", COMPLETE},
    {"(a|)+b", "b", COMPLETE},
    {"(a?b?)*c", "abbac", COMPLETE},
    {"(a*b*){2,3}c", "c", COMPLETE},
    {"a{2,}", "aaaaa", COMPLETE},
    {"a{2,}", "a", PREFIX},
    {"\\u00e9+|\\x41", "\xc3\xa9\xc3\xa9", COMPLETE},
    {"\\u{1F600}", "\xf0\x9f\x98\x80", COMPLETE},
    {"\\.\\*\\(\\)\\[\\]\\{\\}\\|\\?\\+\\^\\$\\\\\\/", ".*()[]{}|?+^$\\/", COMPLETE},
    {"[\\]\\-a]+", "]-a", COMPLETE},
    {"[a-]", "-", COMPLETE},
    {"x{,3}", "x{,3}", COMPLETE}, /* not a quantifier: literal braces */
    {"a+?b*?c??", "aac", COMPLETE},
    {"^(yes|no)$|^maybe$", "maybe", COMPLETE},
    {"[^]", "\n", COMPLETE},
    {"\\t\\n\\r\\f\\v\\0\\cJ", "\t\n\r\f\v\0\n", PREFIX}, /* \0 ends the C string */
};

static void test_regex_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof regex_cases / sizeof *regex_cases; i++) {
        int got = regex_match(regex_cases[i].gbnf, regex_cases[i].text);
        if (got != regex_cases[i].want)
            fail_msg("regex /%s/ on \"%s\": want %d, got %d", regex_cases[i].gbnf,
                     regex_cases[i].text, regex_cases[i].want, got);
    }
}

static const error_case regex_errors[] = {
    {"(a", "at character 1: unterminated group"},
    {"a)", "at character 2: unmatched ')'"},
    {"(a)\\1", "at character 4: backreferences (\\1) are not supported"},
    {"(?=a)b", "at character 1: lookaround"},
    {"(?<!a)b", "lookaround"},
    {"\\bfoo", "word boundaries"},
    {"a**", "at character 2: nothing to repeat"},
    {"*a", "at character 1: nothing to repeat"},
    {"a^b", "at character 2: the anchor '^'"},
    {"a$b", "the anchor '$'"},
    {"\\p{L}", "Unicode property escapes"},
    {"[z-a]", "at character 2: character range out of order"},
    {"[a-z", "unterminated character class"},
    {"a{3,1}", "numbers out of order"},
    {"\\q", "unknown escape \\q"},
    {"\\k<x>", "backreferences"},
    {"\\x4", "malformed hexadecimal escape"},
    {"[]a]", "cannot match any text"}, /* [] matches nothing */
};

static void test_regex_errors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof regex_errors / sizeof *regex_errors; i++) {
        nu_grammar *g = NULL;
        nu_error err = {0};
        assert_int_not_equal(nu_grammar_from_regex(NULL, regex_errors[i].gbnf, &g, &err), NU_OK);
        assert_null(g);
        if (!strstr(err.message, regex_errors[i].want))
            fail_msg("regex /%s/: want \"%s\", got \"%s\"", regex_errors[i].gbnf,
                     regex_errors[i].want, err.message);
    }
}

/* A random regex over a, b, c: atoms, classes, groups, alternation and
 * quantifiers (including repetitions of things that can be empty). */
static void random_regex(nu_rng *r, char *out, size_t cap, int depth) {
    static const char *atoms[] = {"a", "b", "c", ".", "[ab]", "[^a]", "[a-c]", "\\n", "(?:)"};
    static const char *quants[] = {"", "", "", "*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}"};
    int n_alts = 1 + (int)(nu_rng_next(r) % (depth > 1 ? 1 : 2));
    for (int a = 0; a < n_alts; a++) {
        if (a) strncat(out, "|", cap - strlen(out) - 1);
        int n = 1 + (int)(nu_rng_next(r) % 3);
        for (int i = 0; i < n; i++) {
            if (depth < 2 && nu_rng_next(r) % 4 == 0) {
                strncat(out, "(", cap - strlen(out) - 1);
                random_regex(r, out, cap, depth + 1);
                strncat(out, ")", cap - strlen(out) - 1);
            } else {
                strncat(out, atoms[nu_rng_next(r) % 9], cap - strlen(out) - 1);
            }
            strncat(out, quants[nu_rng_next(r) % 10], cap - strlen(out) - 1);
        }
    }
}

/* PCRE2's answer: does the regex match the whole text? */
static bool pcre2_full_match(pcre2_code *re, const char *text, size_t len) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc =
        pcre2_match(re, (PCRE2_SPTR)text, len, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* Random regexes against every string over {a, b, c, \n} up to length 4,
 * compared with PCRE2 (whose syntax and semantics agree on this subset). */
static void test_regex_vs_pcre2(void **state) {
    (void)state;
    nu_rng r;
    nu_rng_seed(&r, 42);
    for (int k = 0; k < 80; k++) {
        char re[256] = "";
        random_regex(&r, re, sizeof re, 0);
        int errcode;
        PCRE2_SIZE erroff;
        pcre2_code *pc = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &errcode,
                                       &erroff, NULL);
        assert_non_null(pc);
        nu_grammar *g = NULL;
        nu_error err = {0};
        if (nu_grammar_from_regex(NULL, re, &g, &err) != NU_OK)
            fail_msg("regex /%s/: %s", re, err.message);
        char text[8];
        for (int len = 0; len <= 4; len++) {
            int total = 1;
            for (int i = 0; i < len; i++) total *= 4;
            for (int code = 0; code < total; code++) {
                for (int i = 0, c = code; i < len; i++, c /= 4) text[i] = "abc\n"[c % 4];
                bool want = pcre2_full_match(pc, text, (size_t)len);
                if ((match_len(g, text, (size_t)len) == COMPLETE) != want)
                    fail_msg("regex /%s/ on \"%.*s\": PCRE2 says %d", re, len, text, want);
            }
        }
        nu_grammar_free(g);
        pcre2_code_free(pc);
    }
}

static void test_choices(void **state) {
    (void)state;
    const char *choices[] = {"yes", "no", "maybe so", "a\"b\\c\nd", "caf\xc3\xa9"};
    nu_grammar *g = NULL;
    assert_int_equal(nu_grammar_from_choices(NULL, choices, 5, &g, NULL), NU_OK);
    for (int i = 0; i < 5; i++) assert_int_equal(match(g, choices[i]), COMPLETE);
    assert_int_equal(match(g, "ye"), PREFIX);
    assert_int_equal(match(g, "yesno"), REJECT);
    assert_int_equal(match(g, "maybe"), PREFIX);
    nu_grammar_free(g);
    nu_error err;
    assert_int_equal(nu_grammar_from_choices(NULL, choices, 0, &g, &err), NU_ERR_INVALID_ARG);
    char *text = NULL;
    assert_int_equal(nu_choices_to_gbnf(choices, 2, &text, NULL), NU_OK);
    assert_string_equal(text, "root ::= \"yes\" | \"no\"\n");
    nu_free(text);
}

/* Many choices (written as a radix tree): prefixes of each other, the empty
 * string, characters sharing a UTF-8 lead byte, duplicates. */
static void test_many_choices(void **state) {
    (void)state;
    char buf[400][16];
    const char *list[400];
    const char *fixed[] = {"",
                           "a",
                           "ab",
                           "abc",
                           "\xc3\xa9",
                           "\xc3\xa8",
                           "\xc3\xa9\x61", /* "éa" */
                           "\xe6\x97\xa5\xe6\x9c\xac",
                           "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
                           "ab"};
    size_t n = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) list[n++] = fixed[i];
    for (int i = 0; i < 300; i++) {
        snprintf(buf[i], sizeof buf[i], "w%d", i * 37 % 1000);
        list[n++] = buf[i];
    }
    nu_grammar *g = NULL;
    assert_int_equal(nu_grammar_from_choices(NULL, list, n, &g, NULL), NU_OK);
    for (size_t i = 0; i < n; i++) assert_int_equal(match(g, list[i]), COMPLETE);
    assert_int_equal(match(g, "w"), PREFIX);
    for (int v = 0; v < 1000; v++) { /* members, prefixes of members, neither */
        char t[16];
        snprintf(t, sizeof t, "w%d", v);
        int want = REJECT;
        for (size_t i = 0; i < n && want != COMPLETE; i++)
            if (!strcmp(list[i], t))
                want = COMPLETE;
            else if (!strncmp(list[i], t, strlen(t)))
                want = PREFIX;
        if (match(g, t) != want) fail_msg("%s: want %d", t, want);
    }
    assert_int_equal(match(g, "abcd"), REJECT);
    assert_int_equal(match(g, "\xc3\xaa"), REJECT);
    assert_int_equal(match(g, "\xe6\x97\xa5"), PREFIX);
    nu_grammar_free(g);
    const char *bad[] = {"ok", "\xff"};
    nu_error err;
    assert_int_equal(nu_grammar_from_choices(NULL, bad, 2, &g, &err), NU_ERR_INVALID_ARG);
    assert_contains(err.message, "choice 1 is not valid UTF-8");
}

/* ------------------------------------------------------------------------ */
/* JSON Schema                                                              */
/* ------------------------------------------------------------------------ */

static nu_grammar *schema_grammar(const char *schema, int ws) {
    nu_json_options o = nu_json_default_options();
    o.max_whitespace = ws;
    nu_grammar *g = NULL;
    nu_error err = {0};
    if (nu_grammar_from_json_schema(NULL, schema, &o, &g, &err) != NU_OK)
        fail_msg("schema does not convert: %s\n%s", err.message, schema);
    return g;
}

static const error_case schema_errors[] = {
    {"{\"type\":\"object\",\"not\":{}}", "JSON schema at #: the keyword 'not' is not supported"},
    {"{\"properties\":{\"a\":{\"type\":\"string\",\"foo\":1}}}",
     "JSON schema at #/properties/a: unknown keyword 'foo'"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"object\","
     "\"properties\":{\"b\":{\"type\":\"string\",\"format\":\"hostname\"}}}}}}",
     "at #/properties/a/items/properties/b: the format 'hostname' is not supported"},
    {"{\"$ref\":\"http://example.com/s.json\"}", "only local references"},
    {"{\"$ref\":\"#/$defs/missing\"}", "the reference '#/$defs/missing' points at nothing"},
    {"{\"type\":\"array\",\"items\":{},\"uniqueItems\":true}", "uniqueItems is only supported"},
    {"{\"type\":\"number\",\"multipleOf\":2}", "multipleOf is only supported"},
    {"{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}",
     "oneOf: a value of branch 0 might also match branch 1"},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":3}", "no integer satisfies the bounds"},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":3,\"exclusiveMaximum\":4}",
     "no integer satisfies"},
    {"{\"type\":\"number\",\"exclusiveMinimum\":1.5,\"maximum\":1.5}", "no number satisfies"},
    {"{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties' is not supported"},
    {"{\"if\":{},\"then\":{}}", "'if' is not supported"},
    {"{\"type\":\"string\",\"pattern\":\"(a\"}", "unterminated group"},
    {"{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "only one of format, pattern"},
    {"{\"type\":", "not valid JSON"},
    {"{\"type\":\"foo\"}", "'type' must be a type name"},
    {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
     "allOf: no type satisfies every branch"},
    {"{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}",
     "allOf: cannot combine different values of 'pattern'"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"],"
     "\"additionalProperties\":false}",
     "the required property 'b' is not declared and additionalProperties is false"},
    {"{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},"
     "{\"properties\":{\"b\":{}}}]}",
     "a branch forbids additional properties but another has 'b'"},
    {"false", "JSON schema at #: the schema 'false' matches nothing"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems is greater than maxItems"},
    {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}",
     "minItems asks for more items"},
    {"{\"$defs\":{\"a\":{\"allOf\":[{\"$ref\":\"#/$defs/a\"}]}},\"$ref\":\"#/$defs/a\"}",
     "nested more than 64 deep (or a $ref that refers to itself)"},
    {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "left-recursive"},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#\"}},\"required\":[\"n\"]}",
     "cannot match any text"},
    {"{\"enum\":[1,2],\"minimum\":1}", "'minimum' together with enum or const"},
    {"{\"type\":\"string\",\"enum\":[1,2]}", "no value of enum / const is allowed here"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"minProperties\":1}",
     "minProperties is only supported"},
    {"{\"type\":\"number\",\"minimum\":1e20}", "number bounds beyond"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"$id\":\"x\"}}}", "'$id' below the root"},
};

static void test_schema_errors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof schema_errors / sizeof *schema_errors; i++) {
        nu_grammar *g = NULL;
        nu_error err = {0};
        assert_int_not_equal(
            nu_grammar_from_json_schema(NULL, schema_errors[i].gbnf, NULL, &g, &err), NU_OK);
        assert_null(g);
        if (!strstr(err.message, schema_errors[i].want))
            fail_msg("schema %s:\nwant \"%s\"\ngot  \"%s\"", schema_errors[i].gbnf,
                     schema_errors[i].want, err.message);
    }
}

static const match_case schema_cases[] = {
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"string\"}},\"required\":[\"b\"]}",
     "{\"a\":1,\"b\":\"x\"}", COMPLETE},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"string\"}},\"required\":[\"b\"]}",
     "{\"b\":\"x\"}", COMPLETE},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"string\"}},\"required\":[\"b\"]}",
     "{\"a\":1}", REJECT},
    {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}}}", "{}", COMPLETE},
    {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}}}", "{\"b\":[1,{\"x\":null}]}",
     COMPLETE},
    {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}}}", "{\"b\":1,\"a\":2}", REJECT},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":"
     "\"integer\"}}",
     "{\"a\":true,\"ab\":1,\"x\":2}", COMPLETE},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":"
     "\"integer\"}}",
     "{\"a\":true,\"a\":1}", REJECT},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}],"
     "\"items\":{\"type\":\"null\"},\"maxItems\":3}",
     "[\"s\",true,null]", COMPLETE},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}],"
     "\"items\":{\"type\":\"null\"},\"maxItems\":3}",
     "[\"s\",true,null,null]", REJECT},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1",
     PREFIX},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1]",
     REJECT},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
     "[1,2,3]", COMPLETE},
    {"{\"type\":[\"string\",\"null\"]}", "null", COMPLETE},
    {"{\"enum\":[\"a\",1,null,[1,2],{\"k\":\"v\"}]}", "{\"k\":\"v\"}", COMPLETE},
    {"{\"const\":\"quote\\\"d\"}", "\"quote\\\"d\"", COMPLETE},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\\u00e9\\n\"", COMPLETE},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\"", REJECT},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", "\"abc\"", COMPLETE},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", "\"abC\"", REJECT},
    {"{\"type\":\"string\",\"pattern\":\"b+c\"}", "\"a\\u0041bbcx\"", COMPLETE},
    {"{\"type\":\"string\",\"pattern\":\"^a\\\"b$\"}", "\"a\\\"b\"", COMPLETE},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"",
     COMPLETE},
    {"{\"type\":\"string\",\"format\":\"email\"}", "\"first.last@mail.example.org\"", COMPLETE},
    {"{\"type\":\"string\",\"format\":\"email\"}", "\"first..last@example.org\"", REJECT},
    {"{\"type\":\"string\",\"format\":\"email\"}", "\"me@localhost\"", REJECT},
    {"{\"type\":\"string\",\"format\":\"time\"}", "\"23:59:59.5+05:30\"", COMPLETE},
    {"{\"type\":\"string\",\"format\":\"time\"}", "\"24:00:00Z\"", REJECT},
    {"{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-02-29T12:00:00Z\"", COMPLETE},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", "\"x\"",
     COMPLETE},
    {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"}},"
     "\"required\":[\"kind\"]},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},"
     "\"n\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"n\"]}]}",
     "{\"kind\":\"b\",\"n\":3}", COMPLETE},
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
     "\"required\":[\"a\"]},{\"properties\":{\"b\":{\"const\":true}},\"required\":[\"b\"]}]}",
     "{\"a\":7,\"b\":true}", COMPLETE},
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
     "\"$ref\":\"#/$defs/node\"}",
     "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}", COMPLETE},
    {"true", "[1,\"a\",{}]", COMPLETE},
    {"{\"type\":\"number\"}", "-0.5e+10", COMPLETE},
    {"{\"type\":\"number\"}", "01", REJECT},
    {"{\"type\":\"integer\"}", "1234567890123456", REJECT},
    {"{\"type\":\"boolean\"}", "false", COMPLETE},
    {"{\"type\":\"object\"}", "{\"any key\":[1,{}]}", COMPLETE},
    {"{\"type\":\"object\",\"additionalProperties\":false}", "{\"a\":1}", REJECT},
    {"{\"type\":\"array\"}", "[1,\"x\",null]", COMPLETE},
};

static void test_schema_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof schema_cases / sizeof *schema_cases; i++) {
        nu_grammar *g = schema_grammar(schema_cases[i].gbnf, 0);
        int got = match(g, schema_cases[i].text);
        if (got != schema_cases[i].want)
            fail_msg("schema %s on %s: want %d, got %d", schema_cases[i].gbnf, schema_cases[i].text,
                     schema_cases[i].want, got);
        nu_grammar_free(g);
    }
}

/* Every integer in [-1200, 1200] matches exactly when it is in range. */
static void test_integer_ranges(void **state) {
    (void)state;
    static const struct {
        const char *bounds;
        double lo, hi; /* inclusive */
    } cases[] = {
        {"\"minimum\":0,\"maximum\":150", 0, 150},
        {"\"minimum\":-37,\"maximum\":1089", -37, 1089},
        {"\"minimum\":-1000,\"maximum\":-7", -1000, -7},
        {"\"exclusiveMinimum\":-1,\"exclusiveMaximum\":100", 0, 99},
        {"\"minimum\":999,\"maximum\":1000", 999, 1000},
        {"\"minimum\":5.5,\"maximum\":9.9", 6, 9},
        {"\"minimum\":17", 17, 1e300},
        {"\"maximum\":-3", -1e300, -3},
        {"\"minimum\":10,\"maximum\":10", 10, 10},
        {"\"minimum\":3,\"exclusiveMinimum\":5", 6, 1e300},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char schema[128], text[16];
        snprintf(schema, sizeof schema, "{\"type\":\"integer\",%s}", cases[i].bounds);
        nu_grammar *g = schema_grammar(schema, 0);
        for (int v = -1200; v <= 1200; v++) {
            snprintf(text, sizeof text, "%d", v);
            bool want = v >= cases[i].lo && v <= cases[i].hi;
            if ((match(g, text) == COMPLETE) != want) fail_msg("%s on %d", schema, v);
        }
        assert_int_equal(match(g, "-0"), REJECT);
        assert_int_equal(match(g, "007"), REJECT);
        nu_grammar_free(g);
    }
}

/* Decimals with up to 3 fraction digits over [-12, 12], every one, checked
 * against the bounds compared as doubles (what a validator does). */
static void test_number_ranges(void **state) {
    (void)state;
    static const struct {
        const char *bounds;
        double lo, hi;
        bool lo_x, hi_x;
    } cases[] = {
        {"\"minimum\":-2.5,\"maximum\":7.25", -2.5, 7.25, false, false},
        {"\"exclusiveMinimum\":0,\"exclusiveMaximum\":1", 0, 1, true, true},
        {"\"minimum\":0.125,\"exclusiveMaximum\":0.5", 0.125, 0.5, false, true},
        {"\"exclusiveMinimum\":-10.01,\"maximum\":-9.9", -10.01, -9.9, true, false},
        {"\"minimum\":3", 3, 1e300, false, false},
        {"\"exclusiveMaximum\":-0.75", -1e300, -0.75, false, true},
        {"\"minimum\":-1,\"maximum\":1", -1, 1, false, false},
        {"\"minimum\":0.1,\"maximum\":0.1", 0.1, 0.1, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char schema[128], text[32];
        snprintf(schema, sizeof schema, "{\"type\":\"number\",%s}", cases[i].bounds);
        nu_grammar *g = schema_grammar(schema, 0);
        for (int v = -12000; v <= 12000; v++) {
            for (int style = 0; style < 2; style++) {
                int ip = abs(v) / 1000, fp = abs(v) % 1000;
                if (style == 0)
                    snprintf(text, sizeof text, "%s%d.%03d", v < 0 ? "-" : "", ip, fp);
                else if (fp == 0)
                    snprintf(text, sizeof text, "%s%d", v < 0 ? "-" : "", ip);
                else
                    continue;
                double x = strtod(text, NULL);
                bool want = (cases[i].lo_x ? x > cases[i].lo : x >= cases[i].lo) &&
                            (cases[i].hi_x ? x < cases[i].hi : x <= cases[i].hi);
                if ((match(g, text) == COMPLETE) != want && !(v == 0 && text[0] == '-'))
                    fail_msg("%s on %s: want %d", schema, text, want);
            }
        }
        nu_grammar_free(g);
    }
}

/* Every day of 1899..1901 and 1999..2001 and 2023..2025: valid dates match. */
static void test_dates(void **state) {
    (void)state;
    nu_grammar *g = schema_grammar("{\"type\":\"string\",\"format\":\"date\"}", 0);
    static const int years[] = {1899, 1900, 1901, 1999, 2000, 2001, 2023, 2024, 2025, 0};
    for (size_t i = 0; i < sizeof years / sizeof *years; i++) {
        int y = years[i];
        bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        for (int m = 0; m <= 13; m++)
            for (int d = 0; d <= 32; d++) {
                static const int days[] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
                bool ok = m >= 1 && m <= 12 && d >= 1 && d <= days[m] + (m == 2 && leap);
                char text[32];
                snprintf(text, sizeof text, "\"%04d-%02d-%02d\"", y, m, d);
                if ((match(g, text) == COMPLETE) != ok) fail_msg("date %s: want %d", text, ok);
            }
    }
    nu_grammar_free(g);
}

/* Whitespace: none when compact, at most N per place otherwise. */
static void test_whitespace(void **state) {
    (void)state;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\","
                         "\"items\":{\"type\":\"integer\"}}},\"required\":[\"a\"]}";
    nu_grammar *compact = schema_grammar(schema, 0), *loose = schema_grammar(schema, 2);
    assert_int_equal(match(compact, "{\"a\":[1,2]}"), COMPLETE);
    assert_int_equal(match(compact, "{ \"a\":[1,2]}"), REJECT);
    assert_int_equal(match(loose, "{ \"a\" :\n [ 1 ,\t2 ]\n\n}"), COMPLETE);
    assert_int_equal(match(loose, "{   \"a\":[1]}"), REJECT);
    assert_int_equal(match(loose, " {\"a\":[1]}"), REJECT);
    nu_grammar_free(compact);
    nu_grammar_free(loose);
    nu_json_options o = {.max_whitespace = -1};
    nu_grammar *g = NULL;
    nu_error err;
    assert_int_equal(nu_grammar_json_object(NULL, &o, &g, &err), NU_ERR_INVALID_ARG);
    o.max_whitespace = 1;
    assert_int_equal(nu_grammar_json_object(NULL, &o, &g, NULL), NU_OK);
    assert_int_equal(match(g, "{\"k\": [true, {\"z\": -1.5e3}], \"s\": \"\\u0041\"}"), COMPLETE);
    assert_int_equal(match(g, "[1]"), REJECT);
    nu_grammar_free(g);
}

/* ------------------------------------------------------------------------ */
/* Token masks against brute force                                          */
/* ------------------------------------------------------------------------ */

/* A grammar bound to the vocabulary and the same grammar without one (the
 * reference, fed raw bytes). */
typedef struct pair {
    const nu_model *m;
    nu_grammar *bound, *bytes;
    char **tok; /* each token's bytes */
    size_t *tok_len;
    bool *usable; /* text tokens (not control, not unknown) */
    int n_vocab;
} pair;

static void pair_init(pair *p, const nu_model *m, const char *gbnf) {
    p->m = m;
    nu_error err = {0};
    if (nu_grammar_from_gbnf(m, gbnf, NULL, &p->bound, &err) ||
        nu_grammar_from_gbnf(NULL, gbnf, NULL, &p->bytes, &err))
        fail_msg("%s", err.message);
    p->n_vocab = nu_model_n_vocab(m);
    p->tok = calloc((size_t)p->n_vocab, sizeof *p->tok);
    p->tok_len = calloc((size_t)p->n_vocab, sizeof *p->tok_len);
    p->usable = calloc((size_t)p->n_vocab, sizeof *p->usable);
    for (int t = 0; t < p->n_vocab; t++) {
        size_t n = nu_token_to_bytes(m, t, false, NULL, 0);
        p->tok[t] = malloc(n + 1);
        p->tok_len[t] = nu_token_to_bytes(m, t, false, p->tok[t], n);
        p->usable[t] =
            n > 0 && nu_token_get_type(m, t) != NU_TOKEN_UNKNOWN && !nu_token_is_eog(m, t);
    }
}

static void pair_free(pair *p) {
    for (int t = 0; t < p->n_vocab; t++) free(p->tok[t]);
    free(p->tok);
    free(p->tok_len);
    free(p->usable);
    nu_grammar_free(p->bound);
    nu_grammar_free(p->bytes);
}

/* The reference answer: feed the token's bytes to a copy of the byte state. */
static bool reference_allows(const pair *p, const nu_grammar_state *ref, int t, int budget) {
    if (nu_token_is_eog(p->m, t)) return nu_grammar_is_complete(ref);
    if (!p->usable[t] || budget == 0) return false;
    nu_grammar_state *c;
    assert_int_equal(nu_grammar_state_copy(ref, &c, NULL), NU_OK);
    bool ok = nu_grammar_accept_bytes(c, p->tok[t], p->tok_len[t], NULL) == NU_OK &&
              (budget < 0 || nu_grammar_distance(c) <= budget - 1);
    nu_grammar_state_free(c);
    return ok;
}

/* Compares the full mask, a small-array mask and single checks with the
 * reference on `stride`-spaced tokens (every token with stride 1). */
static void compare_masks(const pair *p, nu_grammar_state *s, const nu_grammar_state *ref,
                          int budget, int stride, nu_candidate *cand, bool *allowed) {
    nu_candidates c = {cand, (size_t)p->n_vocab, false, -1};
    for (int t = 0; t < p->n_vocab; t++) cand[t] = (nu_candidate){t, 0, 0};
    nu_grammar_mask(s, &c);
    memset(allowed, 0, (size_t)p->n_vocab);
    for (size_t i = 0; i < c.size; i++) allowed[c.data[i].id] = true;
    for (int t = 0; t < p->n_vocab; t += stride) {
        bool want = reference_allows(p, ref, t, budget);
        if (allowed[t] != want) fail_msg("token %d (%s): mask says %d", t, p->tok[t], allowed[t]);
        if (nu_grammar_allows(s, t) != want) fail_msg("token %d: allows disagrees", t);
    }
    /* a small candidate array takes the token-by-token path */
    c = (nu_candidates){cand, 0, false, -1};
    for (int t = 0; t < p->n_vocab && c.size < 20; t += 1 + p->n_vocab / 20)
        cand[c.size++] = (nu_candidate){t, 0, 0};
    size_t before = c.size;
    int32_t ids[20];
    for (size_t i = 0; i < before; i++) ids[i] = cand[i].id;
    nu_grammar_mask(s, &c);
    size_t k = 0;
    for (size_t i = 0; i < before; i++)
        if (allowed[ids[i]]) assert_int_equal(c.data[k++].id, ids[i]);
    assert_int_equal(k, c.size);
}

/* Random walks: at each state compare masks, then take a random allowed
 * token on both sides. With a budget, the walk must end complete. */
static void random_walks(const pair *p, int walks, int steps, int budget, int stride,
                         uint64_t seed) {
    nu_candidate *cand = malloc((size_t)p->n_vocab * sizeof *cand);
    bool *allowed = malloc((size_t)p->n_vocab);
    nu_rng r;
    nu_rng_seed(&r, seed);
    for (int w = 0; w < walks; w++) {
        nu_grammar_state *s, *ref;
        assert_int_equal(nu_grammar_state_new(p->bound, &s, NULL), NU_OK);
        assert_int_equal(nu_grammar_state_new(p->bytes, &ref, NULL), NU_OK);
        int left = budget;
        if (budget >= 0) assert_int_equal(nu_grammar_state_set_budget(s, budget, NULL), NU_OK);
        for (int i = 0; i < steps && !nu_grammar_must_end(s); i++) {
            compare_masks(p, s, ref, left, stride, cand, allowed);
            int n = 0, pick = -1;
            for (int t = 0; t < p->n_vocab; t++)
                if (allowed[t] && !nu_token_is_eog(p->m, t) && nu_rng_next(&r) % (uint64_t)++n == 0)
                    pick = t;
            if (pick < 0) break;
            assert_int_equal(nu_grammar_accept(s, pick, NULL), NU_OK);
            assert_int_equal(nu_grammar_accept_bytes(ref, p->tok[pick], p->tok_len[pick], NULL),
                             NU_OK);
            if (left > 0) left--;
        }
        if (budget >= 0) assert_true(nu_grammar_is_complete(s));
        nu_grammar_state_free(s);
        nu_grammar_state_free(ref);
    }
    free(cand);
    free(allowed);
}

static nu_model *load(const char *rel, nu_load_mode mode) {
    nu_model_params mp = nu_model_default_params();
    mp.mode = mode;
    nu_model *m = NULL;
    nu_error err = {0};
    if (nu_model_load(nu_test_shared(rel), &mp, &m, &err) != NU_OK) fail_msg("%s", err.message);
    return m;
}

/* GBNF text for a schema (fails the test on error). */
static char *schema_text(const char *schema, int ws) {
    nu_json_options o = {.max_whitespace = ws};
    char *text = NULL;
    nu_error err = {0};
    if (nu_json_schema_to_gbnf(schema, &o, &text, &err)) fail_msg("%s", err.message);
    return text;
}

static const char *mask_schema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"n\":{\"type\":\"integer\",\"minimum\":-50,\"maximum\":300},\"x\":{\"type\":\"number\","
    "\"minimum\":0,\"maximum\":1},\"kind\":{\"enum\":[\"cat\",\"dog\",null]},\"when\":{\"type\":"
    "\"string\",\"format\":\"date\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}"
    ","
    "\"required\":[\"name\",\"n\"]}";

static const char *unicode_gbnf =
    "root ::= (word | \" \" | [\\u4e00-\\u9fff]+ | [\\u00c0-\\u00ff] | \"\\U0001F600\")* \".\"\n"
    "word ::= [a-zA-Z]+ | \"the\" | \"once upon\"\n";

static void test_masks_stories(void **state) {
    (void)state;
    nu_model *m = load("models/stories260K.gguf", NU_LOAD_VOCAB_ONLY);
    char *json = schema_text(mask_schema, 0), *loose = schema_text(mask_schema, 2);
    const char *grammars[] = {json, loose, unicode_gbnf,
                              "root ::= [a-z ]{3,12} (\" \" [0-9]+)? \"\\n\""};
    for (size_t i = 0; i < sizeof grammars / sizeof *grammars; i++) {
        pair p;
        pair_init(&p, m, grammars[i]);
        random_walks(&p, 6, 40, -1, 1, 100 + i);
        random_walks(&p, 6, 200, 30, 1, 200 + i);
        pair_free(&p);
    }
    nu_free(json);
    nu_free(loose);
    nu_model_free(m);
}

/* The same on a 32000-token vocabulary, every 7th token checked. */
static void test_masks_llama(void **state) {
    (void)state;
    nu_model *m = load("vocab/ggml-vocab-llama-spm.gguf", NU_LOAD_VOCAB_ONLY);
    char *json = schema_text(mask_schema, 0);
    const char *grammars[] = {json, unicode_gbnf};
    for (size_t i = 0; i < sizeof grammars / sizeof *grammars; i++) {
        pair p;
        pair_init(&p, m, grammars[i]);
        random_walks(&p, 1, 12, -1, 7, 300 + i);
        random_walks(&p, 1, 40, 24, 13, 400 + i);
        pair_free(&p);
    }
    nu_free(json);
    nu_model_free(m);
}

/* Token API edge cases: EOG only when complete, control tokens never,
 * out-of-range ids refused, a grammar without vocabulary masks all. */
static void test_token_edges(void **state) {
    (void)state;
    nu_model *m = load("models/stories260K.gguf", NU_LOAD_VOCAB_ONLY);
    nu_grammar *g = NULL;
    nu_grammar_state *s;
    nu_error err;
    assert_int_equal(nu_grammar_from_gbnf(m, "root ::= \"ab\"?", NULL, &g, NULL), NU_OK);
    assert_int_equal(nu_grammar_state_new(g, &s, NULL), NU_OK);
    int32_t eos = nu_token_eos(m), bos = nu_token_bos(m);
    assert_true(nu_grammar_allows(s, eos));
    assert_false(nu_grammar_allows(s, bos));
    assert_false(nu_grammar_allows(s, -1));
    assert_false(nu_grammar_allows(s, nu_model_n_vocab(m)));
    assert_int_equal(nu_grammar_accept(s, bos, &err), NU_ERR_INVALID_ARG);
    assert_contains(err.message, "has no text");
    int32_t toks[8];
    size_t n;
    assert_int_equal(nu_tokenize(m, "a", 1, 0, toks, 8, &n, NULL), NU_OK);
    /* SentencePiece adds a space: " a" is not allowed, the byte token for "a" is */
    assert_false(nu_grammar_allows(s, toks[n - 1]));
    int32_t byte_a = -1;
    for (int t = 0; t < nu_model_n_vocab(m); t++) {
        char b[8];
        if (nu_token_to_bytes(m, t, false, b, sizeof b) == 1 && b[0] == 'a') byte_a = t;
    }
    assert_true(byte_a >= 0);
    assert_int_equal(nu_grammar_accept(s, byte_a, NULL), NU_OK);
    assert_false(nu_grammar_allows(s, eos));
    assert_int_equal(nu_grammar_accept(s, eos, &err), NU_ERR_INVALID_ARG);
    assert_contains(err.message, "the end is not allowed yet");
    nu_grammar_state_free(s);
    nu_grammar_free(g);
    /* no vocabulary: token calls refuse everything */
    assert_int_equal(nu_grammar_from_gbnf(NULL, "root ::= \"a\"", NULL, &g, NULL), NU_OK);
    assert_int_equal(nu_grammar_state_new(g, &s, NULL), NU_OK);
    nu_candidate one = {0, 0, 0};
    nu_candidates c = {&one, 1, false, 0};
    nu_grammar_mask(s, &c);
    assert_int_equal(c.size, 0);
    assert_int_equal(nu_grammar_accept(s, 0, &err), NU_ERR_INVALID_ARG);
    nu_grammar_state_free(s);
    nu_grammar_free(g);
    nu_model_free(m);
}

int main(void) {
    // clang-format off
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_ok),
        cmocka_unit_test(test_match_table),
        cmocka_unit_test(test_repetition_bounds),
        cmocka_unit_test(test_partial_utf8),
        cmocka_unit_test(test_complete_and_distance),
        cmocka_unit_test(test_long_input),
        cmocka_unit_test(test_runaway),
        cmocka_unit_test(test_regex_table),
        cmocka_unit_test(test_regex_errors),
        cmocka_unit_test(test_regex_vs_pcre2),
        cmocka_unit_test(test_choices),
        cmocka_unit_test(test_many_choices),
        cmocka_unit_test(test_schema_errors),
        cmocka_unit_test(test_schema_table),
        cmocka_unit_test(test_integer_ranges),
        cmocka_unit_test(test_number_ranges),
        cmocka_unit_test(test_dates),
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_masks_stories),
        cmocka_unit_test(test_masks_llama),
        cmocka_unit_test(test_token_edges),
    };
    // clang-format on
    return cmocka_run_group_tests(tests, NULL, NULL);
}
