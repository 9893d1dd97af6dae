/* test_tools.c - function calling in the server (server/tools.c, the tools
 * part of server/openai_params.c and server/chat.c).
 *
 * The answer parser on each call syntax (Hermes / Qwen blocks, Mistral
 * arrays, Llama 3 objects, the generic {"tool_calls": [...]}), several
 * calls, content around them, nested arguments, malformed output kept as
 * content; streaming: the same text fed in pieces of every size gives the
 * same content and calls as the whole text. The grammars, checked byte by
 * byte with the grammar engine: forced calls accept exactly the calls the
 * schemas allow, the "auto" grammar accepts any text without the call
 * marker (compared with strstr on generated texts). Request checking of
 * tools, tool_choice and tool messages. Rendering through the real
 * templates of shared/chat_templates: the tools case against the renderings
 * Python's Jinja2 made (expected/NAME.f_tools.txt), and a conversation with a
 * call and its result through every template that reads tools. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat.h"
#include "nucleus.h"
#include "openai_params.h"
#include "reasoning.h"
#include "test_support.h"
#include "tools.h"

/* Two tools: one flat, one with nested arguments. */
#define TOOLS                                                                                      \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","  \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\","           \
    "\"description\":\"City\"},\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\","               \
    "\"fahrenheit\"],\"description\":\"Unit\"}},\"required\":[\"city\"]}}},"                       \
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"description\":\"Search\","         \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\","          \
    "\"description\":\"Q\"},\"filters\":{\"type\":\"object\",\"description\":\"F\","               \
    "\"properties\":"                                                                              \
    "{\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}},\"required\":[\"query\"]}}" \
    "}]"

#define ASK "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]"

static const srv_limits LIMITS = {
    .n_vocab = 512, .max_n = 8, .max_tokens = 2048, .max_prompts = 8, .max_beam_width = 4};

static srv_defaults defaults(void) {
    srv_defaults d = {.gen = nu_generate_default_params(), .beam = nu_beam_default_params()};
    return d;
}

/* Parses a chat request body that must be accepted. */
static void parse_ok(const char *body, srv_request *r) {
    srv_defaults d = defaults();
    srv_error err = {0};
    if (!srv_parse_request(body, strlen(body), SRV_CHAT, &LIMITS, &d, r, &err))
        fail_msg("refused (%s): %s\n  body: %s", err.param, err.message, body);
}

/* A request whose body must be refused with 400 naming param. */
static void parse_bad(const char *body, const char *param) {
    srv_defaults d = defaults();
    srv_request r;
    srv_error err = {0};
    if (srv_parse_request(body, strlen(body), SRV_CHAT, &LIMITS, &d, &r, &err)) {
        srv_request_free(&r);
        fail_msg("accepted: %s", body);
    }
    assert_int_equal(err.status, 400);
    if (strcmp(err.param, param))
        fail_msg("param '%s' (%s), want '%s'\n  body: %s", err.param, err.message, param, body);
}

/* A request with TOOLS, tool_choice given as JSON (NULL: none given). */
static void tools_request(srv_request *r, const char *choice, bool parallel, srv_tool_format f,
                          bool constrained) {
    char body[4096];
    snprintf(body, sizeof body, "{" ASK ",\"tools\":" TOOLS "%s%s%s}",
             choice ? ",\"tool_choice\":" : "", choice ? choice : "",
             parallel ? "" : ",\"parallel_tool_calls\":false");
    parse_ok(body, r);
    r->tools.format = f;
    r->tools.constrained = constrained;
}

/* ------------------------------------------------------------------------ */
/* Parsing answers                                                          */
/* ------------------------------------------------------------------------ */

/* Parses text and checks content and the calls (names[i], args[i]). */
static void expect_parse(const srv_tools *t, const char *text, const char *content, int n,
                         const char *const *names, const char *const *args) {
    srv_tool_result r;
    assert_true(srv_tools_parse(t, text, strlen(text), &r));
    if (strcmp(r.content, content) || r.n_calls != n)
        fail_msg("text: %s\n  content '%s' (want '%s'), %d calls (want %d)", text, r.content,
                 content, r.n_calls, n);
    assert_int_equal(r.content_len, strlen(content));
    for (int i = 0; i < n; i++) {
        assert_string_equal(r.calls[i].name, names[i]);
        if (strcmp(r.calls[i].arguments, args[i]))
            fail_msg("call %d arguments %s, want %s", i, r.calls[i].arguments, args[i]);
        if (t->format == SRV_TOOL_FORMAT_MISTRAL)
            assert_int_equal(strlen(r.calls[i].id), 9);
        else
            assert_true(!strncmp(r.calls[i].id, "call_", 5) && strlen(r.calls[i].id) == 29);
        for (int j = 0; j < i; j++) assert_string_not_equal(r.calls[i].id, r.calls[j].id);
    }
    srv_tool_result_free(&r);
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

static void test_parse_hermes(void **state) {
    (void)state;
    srv_request r;
    tools_request(&r, NULL, true, SRV_TOOL_FORMAT_HERMES, false);
    const srv_tools *t = &r.tools;
    assert_int_equal(t->choice, SRV_TOOLS_AUTO);
    expect_parse(t,
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                 "\"Paris\"}}\n</tool_call>",
                 "", 1, NAMES("get_weather"), NAMES("{\"city\":\"Paris\"}"));
    /* content before, two calls, nested arguments with brackets in strings */
    expect_parse(t,
                 "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                 "{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n"
                 "{\"name\": \"search\", \"arguments\": {\"query\": \"a \\\"}]\\\" b\", "
                 "\"filters\": {\"tags\": [\"x\", \"{y}\"]}}}\n</tool_call>",
                 "Let me look.", 2, NAMES("get_weather", "search"),
                 NAMES("{\"city\":\"Paris\",\"unit\":\"celsius\"}",
                       "{\"query\":\"a \\\"}]\\\" b\",\"filters\":{\"tags\":[\"x\",\"{y}\"]}}"));
    /* the closing tag may be missing at the end; text after a call stays */
    expect_parse(t, "<tool_call>{\"name\":\"search\",\"arguments\":{\"query\":\"q\"}}  \n", "", 1,
                 NAMES("search"), NAMES("{\"query\":\"q\"}"));
    expect_parse(
        t, "<tool_call>{\"name\":\"search\",\"arguments\":{\"query\":\"q\"}}</tool_call> Done.",
        "Done.", 1, NAMES("search"), NAMES("{\"query\":\"q\"}"));
    /* arguments as a string that holds the object; "parameters" also names them */
    expect_parse(
        t,
        "<tool_call>{\"name\":\"search\",\"arguments\":\"{\\\"query\\\": \\\"q\\\"}\"}</tool_call>",
        "", 1, NAMES("search"), NAMES("{\"query\":\"q\"}"));
    expect_parse(
        t, "<tool_call>{\"parameters\":{\"query\":\"q\"},\"name\":\"search\",\"id\":7}</tool_call>",
        "", 1, NAMES("search"), NAMES("{\"query\":\"q\"}"));
    /* the marker is a control token some vocabularies hide: the bare JSON counts */
    expect_parse(t, "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n", "", 1,
                 NAMES("get_weather"), NAMES("{\"city\":\"Rome\"}"));
    srv_request_free(&r);
}

static void test_parse_other_formats(void **state) {
    (void)state;
    srv_request r;
    tools_request(&r, NULL, true, SRV_TOOL_FORMAT_MISTRAL, false);
    expect_parse(&r.tools,
                 "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
                 "{\"name\": \"search\", \"arguments\": {\"query\": \"fjords\"}}]",
                 "", 2, NAMES("get_weather", "search"),
                 NAMES("{\"city\":\"Oslo\"}", "{\"query\":\"fjords\"}"));
    /* [TOOL_CALLS] is a control token: the text often starts with the array */
    expect_parse(&r.tools, " [{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}]", "", 1,
                 NAMES("search"), NAMES("{\"query\":\"x\"}"));
    expect_parse(&r.tools, "[1] is a footnote.", "[1] is a footnote.", 0, NULL, NULL);
    srv_request_free(&r);

    tools_request(&r, NULL, true, SRV_TOOL_FORMAT_LLAMA3, false);
    expect_parse(&r.tools, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}", "",
                 1, NAMES("get_weather"), NAMES("{\"city\":\"Lima\"}"));
    expect_parse(&r.tools,
                 "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"x\"}}", "", 1,
                 NAMES("search"), NAMES("{\"query\":\"x\"}"));
    expect_parse(&r.tools, "It is sunny {mostly}.", "It is sunny {mostly}.", 0, NULL, NULL);
    srv_request_free(&r);

    tools_request(&r, NULL, true, SRV_TOOL_FORMAT_GENERIC, false);
    expect_parse(
        &r.tools,
        "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Kyiv\", "
        "\"unit\": \"celsius\"}}]}",
        "", 1, NAMES("get_weather"), NAMES("{\"city\":\"Kyiv\",\"unit\":\"celsius\"}"));
    /* a generic answer's markers are not Hermes': that text is content */
    expect_parse(&r.tools, "Hi <tool_call>", "Hi <tool_call>", 0, NULL, NULL);
    srv_request_free(&r);
}

/* Malformed calls, unknown functions and lookalikes stay content, verbatim. */
static void test_parse_malformed(void **state) {
    (void)state;
    srv_request r;
    tools_request(&r, NULL, true, SRV_TOOL_FORMAT_HERMES, false);
    const char *kept[] = {
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": Paris}}\n</tool_call>",
        "<tool_call>{\"name\": \"launch_rockets\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"search\"}</tool_call>",
        "<tool_call>{\"name\": \"search\", \"arguments\": [1]}</tool_call>",
        "The tag <tool_call> opens a call.",
        "{\"answer\": 42}",
        "  leading and trailing blanks  \n",
        "a <tool_ca",
        "",
    };
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        expect_parse(&r.tools, kept[i], kept[i], 0, NULL, NULL);
    /* a complete call ends the block even when the closing tag does not follow */
    expect_parse(&r.tools,
                 "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"q\"}} trailing",
                 "trailing", 1, NAMES("search"), NAMES("{\"query\":\"q\"}"));
    /* a good call after a broken one is still found */
    expect_parse(&r.tools,
                 "<tool_call>oops</tool_call> "
                 "<tool_call>{\"name\":\"search\",\"arguments\":{\"query\":\"q\"}}</tool_call>",
                 "<tool_call>oops</tool_call>", 1, NAMES("search"), NAMES("{\"query\":\"q\"}"));
    srv_request_free(&r);

    /* tool_choice "none": nothing is parsed */
    tools_request(&r, "\"none\"", true, SRV_TOOL_FORMAT_HERMES, false);
    assert_false(srv_tools_active(&r.tools));
    srv_request_free(&r);
}

/* Without parallel_tool_calls, calls after the first are dropped. */
static void test_parse_not_parallel(void **state) {
    (void)state;
    srv_request r;
    tools_request(&r, NULL, false, SRV_TOOL_FORMAT_MISTRAL, false);
    expect_parse(
        &r.tools,
        "[{\"name\": \"search\", \"arguments\": {\"query\": \"1\"}}, {\"name\": \"search\", "
        "\"arguments\": {\"query\": \"2\"}}]",
        "", 1, NAMES("search"), NAMES("{\"query\":\"1\"}"));
    srv_request_free(&r);
}

/* ---- streaming ----------------------------------------------------------- */

typedef struct collected {
    char content[4096];
    char names[8][72];
    char args[8][1024];
    int n_calls;
    int n_events;
    bool call_seen_before_args;
} collected;

static bool collect(void *user, const srv_tool_event *ev) {
    collected *c = user;
    c->n_events++;
    switch (ev->kind) {
    case SRV_TOOL_CONTENT: strncat(c->content, ev->text, ev->len); break;
    case SRV_TOOL_CALL:
        assert_int_equal(ev->index, c->n_calls); /* calls are numbered in order */
        assert_true(ev->id && ev->name);
        snprintf(c->names[c->n_calls++], 72, "%s", ev->name);
        break;
    case SRV_TOOL_ARGS:
        assert_true(ev->index < c->n_calls); /* the call came first */
        strncat(c->args[ev->index], ev->text, ev->len);
        break;
    case SRV_TOOL_REASONING: fail_msg("the tool parser sent thinking"); break;
    }
    return true;
}

/* Feeds text in pieces of `step` bytes (then done) and compares with the
 * whole-text parse. */
static void check_stream(const srv_tools *t, const char *text, size_t step) {
    srv_tool_result whole;
    assert_true(srv_tools_parse(t, text, strlen(text), &whole));
    collected got = {0};
    srv_tool_parser *p = srv_tool_parser_new(t);
    assert_non_null(p);
    size_t len = strlen(text);
    for (size_t n = 0; n < len; n += step)
        assert_true(srv_tool_parser_feed(p, text, n, false, collect, &got));
    assert_true(srv_tool_parser_feed(p, text, len, true, collect, &got));
    assert_int_equal(srv_tool_parser_n_calls(p), whole.n_calls);
    srv_tool_parser_free(p);
    if (strcmp(got.content, whole.content) || got.n_calls != whole.n_calls)
        fail_msg("step %zu: content '%s' vs '%s', %d vs %d calls\n  text: %s", step, got.content,
                 whole.content, got.n_calls, whole.n_calls, text);
    for (int i = 0; i < got.n_calls; i++) {
        assert_string_equal(got.names[i], whole.calls[i].name);
        assert_string_equal(got.args[i], whole.calls[i].arguments);
    }
    srv_tool_result_free(&whole);
}

static void test_stream_equals_whole(void **state) {
    (void)state;
    static const struct {
        srv_tool_format f;
        const char *text;
    } cases[] = {
        {SRV_TOOL_FORMAT_HERMES,
         "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\\u00fcrich "
         "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
         "\"search\", "
         "\"arguments\": {\"query\": \"}{\", \"filters\": {\"tags\": []}}}\n</tool_call>\n"},
        {SRV_TOOL_FORMAT_HERMES, "a < b <tool_cal <tool_call> broken"},
        {SRV_TOOL_FORMAT_HERMES, "   \n"},
        {SRV_TOOL_FORMAT_HERMES,
         "<tool_call>{\"name\":\"search\",\"arguments\":{\"query\":\"q\"}}"},
        {SRV_TOOL_FORMAT_MISTRAL,
         "[TOOL_CALLS] [{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}, {\"name\": "
         "\"get_weather\", \"arguments\": {\"city\": \"y\"}}]"},
        {SRV_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS"},
        {SRV_TOOL_FORMAT_LLAMA3, "  {\"name\": \"search\", \"parameters\": {\"query\": \"x\"}} ok"},
        {SRV_TOOL_FORMAT_GENERIC,
         "{\"tool_calls\": [{\"name\": \"search\", \"arguments\": {\"query\": \"1\"}}]}"},
        {SRV_TOOL_FORMAT_GENERIC,
         "{\"tool_calls\": [{\"name\": \"nope\", \"arguments\": {}}]} text"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int trusted = 0; trusted < 2; trusted++) {
            srv_request r;
            tools_request(&r, NULL, true, cases[i].f, trusted);
            for (size_t step = 1; step <= 9; step++) check_stream(&r.tools, cases[i].text, step);
            srv_request_free(&r);
        }
}

/* Under a grammar the call goes out while it is generated; without one it
 * waits until it is complete and checked, and marker text never shows. */
static void test_stream_progressive(void **state) {
    (void)state;
    const char *partial =
        "Hm. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
    for (int trusted = 0; trusted < 2; trusted++) {
        srv_request r;
        tools_request(&r, NULL, true, SRV_TOOL_FORMAT_HERMES, trusted);
        srv_tool_parser *p = srv_tool_parser_new(&r.tools);
        collected got = {0};
        assert_true(srv_tool_parser_feed(p, partial, strlen(partial), false, collect, &got));
        assert_string_equal(got.content, "Hm.");
        assert_int_equal(got.n_calls, trusted ? 1 : 0);
        if (trusted) {
            assert_string_equal(got.names[0], "get_weather");
            assert_string_equal(got.args[0], "{\"city\":\"Par");
        }
        srv_tool_parser_free(p);
        srv_request_free(&r);
    }
    /* a partial marker is held back, then released when it is not one */
    srv_request r;
    tools_request(&r, NULL, true, SRV_TOOL_FORMAT_HERMES, false);
    srv_tool_parser *p = srv_tool_parser_new(&r.tools);
    collected got = {0};
    assert_true(srv_tool_parser_feed(p, "x <tool_c", 9, false, collect, &got));
    assert_string_equal(got.content, "x");
    assert_true(srv_tool_parser_feed(p, "x <tool_c!", 10, false, collect, &got));
    assert_string_equal(got.content, "x <tool_c!");
    srv_tool_parser_free(p);
    srv_request_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Grammars                                                                 */
/* ------------------------------------------------------------------------ */

/* The grammar of a request (NULL when none applies). */
static nu_grammar *grammar_for(const srv_tools *t, srv_tool_format f, bool text_marker) {
    char *gbnf;
    const char *root;
    srv_error err = {0};
    if (!srv_tools_gbnf(t, f, text_marker, &gbnf, &root, &err))
        fail_msg("no grammar: %s (%s)", err.message, err.param);
    if (!gbnf) return NULL;
    nu_grammar *g = NULL;
    nu_error e;
    if (nu_grammar_from_gbnf(NULL, gbnf, root, &g, &e) != NU_OK)
        fail_msg("bad GBNF: %s\n%s", e.message, gbnf);
    free(gbnf);
    return g;
}

/* Whether the grammar takes text as a whole. */
static bool takes(const nu_grammar *g, const char *text) {
    nu_grammar_state *s;
    nu_error e;
    assert_int_equal(nu_grammar_state_new(g, &s, &e), NU_OK);
    bool ok =
        nu_grammar_accept_bytes(s, text, strlen(text), &e) == NU_OK && nu_grammar_is_complete(s);
    nu_grammar_state_free(s);
    return ok;
}

static void expect_takes(const nu_grammar *g, const char *text, bool want) {
    if (takes(g, text) != want) fail_msg("the grammar %s: %s", want ? "refuses" : "takes", text);
}

#define W1 "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
#define S1                                                                                         \
    "{\"name\":\"search\",\"arguments\":{\"query\":\"x\",\"filters\":{\"tags\":[\"a\",\"b\"]}}}"
#define BLOCK(c) "<tool_call>\n" c "\n</tool_call>"

static void test_grammar_forced(void **state) {
    (void)state;
    srv_request r;
    tools_request(&r, "\"required\"", true, SRV_TOOL_FORMAT_HERMES, false);
    nu_grammar *g = grammar_for(&r.tools, SRV_TOOL_FORMAT_HERMES, true);
    assert_non_null(g);
    expect_takes(g, BLOCK(W1), true);
    expect_takes(g, BLOCK(S1), true);
    expect_takes(g, BLOCK(W1) "\n" BLOCK(S1), true);
    expect_takes(
        g,
        BLOCK(
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"celsius\"}}"),
        true);
    expect_takes(
        g,
        BLOCK(
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"kelvin\"}}"),
        false);
    expect_takes(g, BLOCK("{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\"}}"),
                 false);
    expect_takes(
        g, BLOCK("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"x\": 1}}"), false);
    expect_takes(g, BLOCK("{\"name\": \"get_time\", \"arguments\": {}}"), false);
    expect_takes(g, BLOCK("{\"name\": \"search\", \"arguments\": {\"query\": 5}}"), false);
    expect_takes(g, W1, false);
    expect_takes(g, "Sure. " BLOCK(W1), false);
    expect_takes(g, BLOCK(W1) " bye", false);
    expect_takes(g, "", false);
    nu_grammar_free(g);
    srv_request_free(&r);

    /* a named function, one call only */
    tools_request(&r, "{\"type\":\"function\",\"function\":{\"name\":\"search\"}}", false,
                  SRV_TOOL_FORMAT_HERMES, false);
    assert_int_equal(r.tools.choice, SRV_TOOLS_NAMED);
    g = grammar_for(&r.tools, SRV_TOOL_FORMAT_HERMES, true);
    expect_takes(g, BLOCK(S1), true);
    expect_takes(g, BLOCK(W1), false);
    expect_takes(g, BLOCK(S1) "\n" BLOCK(S1), false);
    nu_grammar_free(g);
    srv_request_free(&r);

    /* the other formats' shapes */
    tools_request(&r, "\"required\"", true, SRV_TOOL_FORMAT_MISTRAL, false);
    g = grammar_for(&r.tools, SRV_TOOL_FORMAT_MISTRAL, true);
    expect_takes(g, "[" W1 "]", true);
    expect_takes(g, "[" W1 ", " S1 "]", true);
    expect_takes(g, "[]", false);
    expect_takes(g, W1, false);
    nu_grammar_free(g);
    srv_request_free(&r);

    tools_request(&r, "\"required\"", true, SRV_TOOL_FORMAT_LLAMA3, false);
    g = grammar_for(&r.tools, SRV_TOOL_FORMAT_LLAMA3, true);
    expect_takes(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", true);
    expect_takes(g, W1, false); /* Llama 3 calls them parameters */
    nu_grammar_free(g);
    srv_request_free(&r);

    tools_request(&r, "\"required\"", false, SRV_TOOL_FORMAT_GENERIC, false);
    g = grammar_for(&r.tools, SRV_TOOL_FORMAT_GENERIC, true);
    expect_takes(g, "{\"tool_calls\": [" W1 "]}", true);
    expect_takes(g, "{\"tool_calls\": [" W1 ", " S1 "]}", false); /* not parallel */
    expect_takes(g, "{\"tool_calls\": []}", false);
    nu_grammar_free(g);
    srv_request_free(&r);
}

/* A small random text made of pieces of the marker. */
static void random_text(char *out, size_t cap, unsigned *seed) {
    static const char *const pieces[] = {"<",  "<tool_call>", "<tool", "_call>", "t",  "x",
                                         "<t", "ool_call>",   "<<",    ">",      "\n", "\xc3\xa9"};
    out[0] = 0;
    int n = (int)(rand_r(seed) % 6);
    for (int i = 0; i < n; i++) {
        const char *p = pieces[rand_r(seed) % (sizeof pieces / sizeof *pieces)];
        if (strlen(out) + strlen(p) < cap) strcat(out, p);
    }
}

static void test_grammar_auto(void **state) {
    (void)state;
    srv_request r;
    tools_request(&r, NULL, true, SRV_TOOL_FORMAT_HERMES, false);
    nu_grammar *g = grammar_for(&r.tools, SRV_TOOL_FORMAT_HERMES, true);
    assert_non_null(g);
    expect_takes(g, "", true);
    expect_takes(g, "It is sunny <b>today</b>, <tool", true);
    expect_takes(g, "Let me check.\n" BLOCK(W1), true);
    expect_takes(g, "<<" BLOCK(W1) "\n" BLOCK(S1), true);
    expect_takes(g, "x <tool_call> hello", false);
    expect_takes(g, BLOCK(W1) " and more text", false);
    /* the free text is exactly the texts without the marker */
    char *gbnf;
    const char *root;
    srv_error err;
    assert_true(srv_tools_gbnf(&r.tools, SRV_TOOL_FORMAT_HERMES, true, &gbnf, &root, &err));
    nu_grammar *free_text;
    nu_error e;
    assert_int_equal(nu_grammar_from_gbnf(NULL, gbnf, "tool_free", &free_text, &e), NU_OK);
    free(gbnf);
    unsigned seed = 7;
    int with_marker = 0;
    for (int i = 0; i < 3000; i++) {
        char text[80];
        random_text(text, sizeof text, &seed);
        bool has = strstr(text, "<tool_call>") != NULL;
        with_marker += has;
        if (takes(free_text, text) == has) fail_msg("free text: %s", text);
    }
    assert_true(with_marker > 300); /* both kinds were tried */
    nu_grammar_free(free_text);
    nu_grammar_free(g);

    /* a marker that is one control token: no grammar for "auto" */
    assert_null(grammar_for(&r.tools, SRV_TOOL_FORMAT_HERMES, false));
    /* nor for Mistral, whose [TOOL_CALLS] always is one */
    assert_null(grammar_for(&r.tools, SRV_TOOL_FORMAT_MISTRAL, true));

    /* Llama 3 and generic: an answer that starts with '{' is a call */
    g = grammar_for(&r.tools, SRV_TOOL_FORMAT_LLAMA3, true);
    expect_takes(g, "The weather is {fine}.", true);
    expect_takes(g, " \n{\"name\": \"search\", \"parameters\": {\"query\": \"q\"}}", true);
    expect_takes(g, "{\"answer\": 42}", false);
    expect_takes(g, "", true);
    nu_grammar_free(g);
    srv_request_free(&r);

    /* tool_choice "none": no grammar */
    tools_request(&r, "\"none\"", true, SRV_TOOL_FORMAT_HERMES, false);
    assert_null(grammar_for(&r.tools, SRV_TOOL_FORMAT_HERMES, true));
    srv_request_free(&r);
}

/* Schemas: references move with the schema; unsupported ones only matter
 * to a forced call; malformed ones are refused. */
static void test_grammar_schemas(void **state) {
    (void)state;
    const char *with_refs =
        "{" ASK ",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":{"
        "\"name\":\"tree\",\"parameters\":{\"$schema\":\"https://json-schema.org/draft/2020-12/"
        "schema\","
        "\"type\":\"object\",\"properties\":{\"root\":{\"$ref\":\"#/$defs/node\"}},\"required\":"
        "[\"root\"],\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
        "\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
        "\"required\":[\"v\"]}}}}}]}";
    srv_request r;
    parse_ok(with_refs, &r);
    nu_grammar *g = grammar_for(&r.tools, SRV_TOOL_FORMAT_HERMES, true);
    expect_takes(
        g,
        BLOCK(
            "{\"name\": \"tree\", \"arguments\": {\"root\": {\"v\": 1, \"kids\": [{\"v\": 2}]}}}"),
        true);
    expect_takes(g, BLOCK("{\"name\": \"tree\", \"arguments\": {\"root\": {\"kids\": []}}}"),
                 false);
    nu_grammar_free(g);
    srv_request_free(&r);

    /* a function without parameters takes {} */
    parse_ok("{" ASK ",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":"
             "{\"name\":\"now\"}}]}",
             &r);
    g = grammar_for(&r.tools, SRV_TOOL_FORMAT_GENERIC, true);
    expect_takes(g, "{\"tool_calls\": [{\"name\": \"now\", \"arguments\": {}}]}", true);
    nu_grammar_free(g);
    srv_request_free(&r);

    static const struct {
        const char *params;
        bool malformed;
    } schemas[] = {
        {"{\"type\":\"object\",\"not\":{\"required\":[\"a\"]}}", false},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/nowhere\"}}}", true},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"strin\"}}}", true},
        {"{\"type\":\"string\"}", true},
    };
    for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++)
        for (int forced = 0; forced < 2; forced++) {
            char body[1024];
            snprintf(body, sizeof body,
                     "{" ASK
                     ",\"tool_choice\":\"%s\",\"tools\":[{\"type\":\"function\",\"function\":"
                     "{\"name\":\"ok\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\","
                     "\"parameters\":%s}}]}",
                     forced ? "required" : "auto", schemas[i].params);
            parse_ok(body, &r);
            char *gbnf = NULL;
            const char *root;
            srv_error err = {0};
            bool ok = srv_tools_gbnf(&r.tools, SRV_TOOL_FORMAT_HERMES, true, &gbnf, &root, &err);
            if (forced || schemas[i].malformed) {
                if (ok) fail_msg("accepted: %s", schemas[i].params);
                assert_int_equal(err.status, 400);
                assert_string_equal(err.param, "tools[1].function.parameters");
            } else {
                assert_true(ok); /* "auto" without a grammar */
                assert_null(gbnf);
            }
            free(gbnf);
            srv_request_free(&r);
        }
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

static void test_request_tools(void **state) {
    (void)state;
    srv_request r;
    tools_request(&r, NULL, false, SRV_TOOL_FORMAT_GENERIC, false);
    assert_int_equal(r.tools.n, 2);
    assert_string_equal(r.tools.list[1].name, "search");
    assert_false(r.tools.parallel);
    assert_int_equal(r.tools.choice, SRV_TOOLS_AUTO);
    cJSON *j = cJSON_Parse(r.tools.json), *want = cJSON_Parse(TOOLS);
    assert_true(cJSON_Compare(j, want, true)); /* the template gets the tools as given */
    cJSON_Delete(j), cJSON_Delete(want);
    srv_request_free(&r);

#define FN(x) "{\"type\":\"function\",\"function\":" x "}"
    const struct {
        const char *extra, *param;
    } bad[] = {
        {",\"tools\":[" FN("{\"description\":\"no name\"}") "]", "tools[0].function.name"},
        {",\"tools\":[" FN("{\"name\":\"has space\"}") "]", "tools[0].function.name"},
        {",\"tools\":[" FN("{\"name\":\"a\"}") "," FN("{\"name\":\"a\"}") "]", "tools[1]"},
        {",\"tools\":[{\"type\":\"custom\",\"function\":{\"name\":\"a\"}}]", "tools[0].type"},
        {",\"tools\":[{\"type\":\"function\"}]", "tools[0].function"},
        {",\"tools\":[" FN("{\"name\":\"a\",\"colour\":1}") "]", "tools[0].function"},
        {",\"tools\":[" FN("{\"name\":\"a\",\"parameters\":[]}") "]",
         "tools[0].function.parameters"},
        {",\"tools\":[" FN("{\"name\":\"a\",\"strict\":\"yes\"}") "]", "tools[0].function.strict"},
        {",\"tools\":{}", "tools"},
        {",\"tools\":[" FN("{\"name\":\"a\"}") "],\"tool_choice\":\"sometimes\"", "tool_choice"},
        {",\"tools\":[" FN("{\"name\":\"a\"}") "],\"tool_choice\":{\"type\":\"function\","
                                               "\"function\":{\"name\":\"b\"}}",
         "tool_choice"},
        {",\"tool_choice\":\"required\"", "tool_choice"},
        {",\"tools\":[" FN("{\"name\":\"a\"}") "],\"parallel_tool_calls\":1",
         "parallel_tool_calls"},
        {",\"tools\":[" FN("{\"name\":\"a\"}") "],\"tool_choice\":\"required\","
                                               "\"response_format\":{\"type\":\"json_object\"}",
         "tool_choice"},
        {",\"tools\":[" FN("{\"name\":\"a\"}") "],\"beam_width\":2", "tools"},
        {",\"functions\":[{\"name\":\"a\"}]", "functions"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{" ASK "%s}", bad[i].extra);
        parse_bad(body, bad[i].param);
    }
    /* "none" needs no tools; a named choice is found by name */
    parse_ok("{" ASK ",\"tool_choice\":\"none\"}", &r);
    srv_request_free(&r);
    tools_request(&r, "{\"type\":\"function\",\"function\":{\"name\":\"search\"}}", true,
                  SRV_TOOL_FORMAT_GENERIC, false);
    assert_int_equal(r.tools.named, 1);
    srv_request_free(&r);
}

#define CALL_MSG(id)                                                                               \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"" id "\",\"type\":"        \
    "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "          \
    "\\\"Paris\\\"}\"}}]}"
#define RESULT_MSG(id) "{\"role\":\"tool\",\"tool_call_id\":\"" id "\",\"content\":\"22 degrees\"}"

static void test_request_messages(void **state) {
    (void)state;
    srv_request r;
    parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}," CALL_MSG(
                 "call_1") "," RESULT_MSG("call_1") "],\"tools\":" TOOLS "}",
             &r);
    assert_int_equal(r.n_messages, 3);
    assert_string_equal(r.messages[1].content, "");
    cJSON *calls = cJSON_Parse(r.messages[1].tool_calls);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "id")->valuestring,
                        "call_1");
    cJSON_Delete(calls);
    assert_string_equal(r.messages[2].role, "tool");
    assert_string_equal(r.messages[2].tool_call_id, "call_1");
    srv_request_free(&r);

    const char *bad[] = {
        "{\"messages\":[" RESULT_MSG("call_9") "]}",
        "{\"messages\":[" CALL_MSG("call_1") "," RESULT_MSG("call_2") "]}",
        "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_call_id\":\"a\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\"}]}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}",
        "{\"messages\":[{\"role\":\"function\",\"name\":\"f\",\"content\":\"x\"}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) parse_bad(bad[i], "messages");
}

/* ------------------------------------------------------------------------ */
/* Rendering through real templates                                         */
/* ------------------------------------------------------------------------ */

static nu_model *model;

static int load_model(void **state) {
    (void)state;
    nu_model_params mp = nu_model_default_params();
    nu_error e;
    return nu_model_load(nu_test_shared("models/stories260K.gguf"), &mp, &model, &e) == NU_OK ? 0
                                                                                              : -1;
}

static int free_model(void **state) {
    (void)state;
    nu_model_free(model);
    return 0;
}

/* A template from shared/chat_templates (or a built-in name). */
static void chat_for(srv_chat *c, const char *name) {
    char path[512], msg[256];
    snprintf(path, sizeof path, "%s", nu_test_shared("chat_templates/"));
    strncat(path, name, sizeof path - strlen(path) - 8);
    strcat(path, ".jinja");
    if (!srv_chat_init(c, model, nu_test_exists(path) ? path : name, msg, sizeof msg))
        fail_msg("%s: %s", name, msg);
}

static void test_template_probes(void **state) {
    (void)state;
    static const struct {
        const char *name;
        bool tools, calls;
        srv_tool_format f;
    } want[] = {
        {"hermes_2_pro_tool_use", true, true, SRV_TOOL_FORMAT_HERMES},
        {"qwen2_5_instruct", true, true, SRV_TOOL_FORMAT_HERMES},
        {"llama3_1_instruct", true, true, SRV_TOOL_FORMAT_LLAMA3},
        {"llama3_2_instruct", true, true, SRV_TOOL_FORMAT_LLAMA3},
        {"mistral_instruct_v0_3", true, true, SRV_TOOL_FORMAT_MISTRAL},
        {"mistral_nemo_instruct_2407", true, true, SRV_TOOL_FORMAT_MISTRAL},
        {"gpt_oss_120b", true, true, SRV_TOOL_FORMAT_HARMONY},
        {"granite_3_0_instruct", true, false, SRV_TOOL_FORMAT_GENERIC},
        {"llama3_instruct", false, false, SRV_TOOL_FORMAT_GENERIC},
        {"qwen2_instruct", false, false, SRV_TOOL_FORMAT_GENERIC},
        {"chatml", false, false, SRV_TOOL_FORMAT_GENERIC},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        srv_chat c;
        chat_for(&c, want[i].name);
        if (c.reads_tools != want[i].tools || c.reads_tool_calls != want[i].calls ||
            c.tool_format != want[i].f)
            fail_msg("%s: tools %d calls %d format %s", want[i].name, c.reads_tools,
                     c.reads_tool_calls, srv_tool_format_name(c.tool_format));
        srv_chat_free(&c);
    }
}

/* The f_tools case of cases.json as a request body with tool_choice. */
static char *f_tools_body(const char *choice) {
    size_t len;
    char *cases = nu_test_read_file(nu_test_shared("chat_templates/cases.json"), &len);
    assert_non_null(cases);
    cJSON *all = cJSON_Parse(cases), *f = cJSON_GetObjectItem(all, "f_tools");
    cJSON *body = cJSON_CreateObject();
    cJSON_AddItemToObject(body, "messages", cJSON_Duplicate(cJSON_GetObjectItem(f, "messages"), 1));
    cJSON_AddItemToObject(body, "tools", cJSON_Duplicate(cJSON_GetObjectItem(f, "tools"), 1));
    cJSON_AddStringToObject(body, "tool_choice", choice);
    char *s = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    cJSON_Delete(all);
    free(cases);
    return s;
}

/* The tools case renders as Jinja2 rendered it (bos / eos as the template's model has them). */
static void test_render_golden(void **state) {
    (void)state;
    size_t len;
    setenv("SOURCE_DATE_EPOCH", "1795219200", 1); /* the expected files' clock: 2026-11-21 */
    char *meta_text = nu_test_read_file(nu_test_shared("chat_templates/templates.json"), &len);
    cJSON *meta = cJSON_Parse(meta_text);
    const char *names[] = {"hermes_2_pro_tool_use", "qwen2_5_instruct",
                           "llama3_1_instruct",     "llama3_2_instruct",
                           "mistral_instruct_v0_3", "mistral_nemo_instruct_2407",
                           "gpt_oss_120b",          "granite_3_0_instruct"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        for (int with_auto = 0; with_auto < 2; with_auto++) {
            /* granite has no call syntax of its own: "auto" adds the generic instructions */
            bool granite = !strcmp(names[i], "granite_3_0_instruct");
            if (with_auto && granite) continue;
            srv_chat c;
            chat_for(&c, names[i]);
            const cJSON *m = cJSON_GetObjectItem(meta, names[i]);
            const cJSON *bos = cJSON_GetObjectItem(m, "bos_token"),
                        *eos = cJSON_GetObjectItem(m, "eos_token");
            c.bos_text = cJSON_IsString(bos) ? bos->valuestring : NULL;
            c.eos_text = cJSON_IsString(eos) ? eos->valuestring : NULL;
            char *body = f_tools_body(with_auto ? "auto" : "none");
            srv_request r;
            parse_ok(body, &r);
            free(body);
            srv_error err = {0};
            char *got = srv_chat_render(&c, r.messages, r.n_messages, &r.tools, NULL, &err);
            if (!got) fail_msg("%s: %s", names[i], err.message);
            char path[256];
            snprintf(path, sizeof path, "chat_templates/expected/%s.f_tools.txt", names[i]);
            char *want = nu_test_read_file(nu_test_shared(path), &len);
            assert_non_null(want);
            if (strcmp(got, want)) {
                fprintf(stderr, "--- got\n%s\n--- want\n%s\n", got, want);
                fail_msg("%s (tool_choice %s) renders differently", names[i],
                         with_auto ? "auto" : "none");
            }
            free(want);
            free(got);
            srv_request_free(&r);
            srv_chat_free(&c);
        }
    cJSON_Delete(meta);
    free(meta_text);
}

/* A call and its result go back through each template that reads tools:
 * the template gets the arguments as an object and the function's name. */
static void test_render_round_trip(void **state) {
    (void)state;
    const char *names[] = {"hermes_2_pro_tool_use", "qwen2_5_instruct",
                           "llama3_1_instruct",     "llama3_2_instruct",
                           "mistral_instruct_v0_3", "mistral_nemo_instruct_2407"};
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}," CALL_MSG(
            "call_abc123") "," RESULT_MSG("call_abc123") "],\"tools\":" TOOLS "}";
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        srv_chat c;
        chat_for(&c, names[i]);
        srv_request r;
        parse_ok(body, &r);
        srv_error err = {0};
        char *got = srv_chat_render(&c, r.messages, r.n_messages, &r.tools, NULL, &err);
        if (!got) fail_msg("%s: %s", names[i], err.message);
        if (!strstr(got, "\"city\": \"Paris\"") || !strstr(got, "22 degrees") ||
            strstr(got, "\\\"city")) {
            fprintf(stderr, "%s\n", got);
            fail_msg("%s: the call or its result is missing", names[i]);
        }
        if (c.tool_format == SRV_TOOL_FORMAT_MISTRAL) { /* the id its template accepts, twice */
            char id[10];
            srv_tools_mistral_id("call_abc123", id);
            const char *a = strstr(got, id);
            assert_true(a && strstr(a + 1, id));
        }
        free(got);
        srv_request_free(&r);
        srv_chat_free(&c);
    }
}

/* gpt-oss's history of calls as a client sends it (arguments as a JSON
 * string, the thinking as reasoning_content, tool results without a name,
 * reasoning_effort): rendered through the server's path, it is what Jinja2
 * renders for the same conversation (tests/chat/expected: the
 * m_tool_thinking and n_tool_thinking_done cases, whose messages hold the
 * arguments as objects and the thinking in the template's 'thinking'). */
static void test_render_harmony_calls(void **state) {
    (void)state;
    setenv("SOURCE_DATE_EPOCH", "1795219200", 1); /* the expected files' clock: 2026-11-21 */
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/chat/cases.json", NU_SOURCE_DIR);
    char *text = nu_test_read_file(path, NULL);
    cJSON *cases = cJSON_Parse(text);
    assert_non_null(cases);
    static const char *const ids[] = {"m_tool_thinking", "n_tool_thinking_done"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *kase = cJSON_GetObjectItem(cases, ids[i]);
        cJSON *body = cJSON_CreateObject();
        cJSON *msgs = cJSON_Duplicate(cJSON_GetObjectItem(kase, "messages"), 1);
        for (cJSON *m = msgs->child; m; m = m->next) {
            cJSON *thinking = cJSON_DetachItemFromObject(m, "thinking");
            if (thinking) cJSON_AddItemToObject(m, "reasoning_content", thinking);
            cJSON_DeleteItemFromObject(m, "name");
            cJSON *calls = cJSON_GetObjectItem(m, "tool_calls");
            for (cJSON *tc = calls ? calls->child : NULL; tc; tc = tc->next) {
                cJSON *fn = cJSON_GetObjectItem(tc, "function");
                char *args = cJSON_PrintUnformatted(cJSON_GetObjectItem(fn, "arguments"));
                cJSON_ReplaceItemInObject(fn, "arguments", cJSON_CreateString(args));
                cJSON_free(args);
            }
        }
        cJSON_AddItemToObject(body, "messages", msgs);
        cJSON_AddItemToObject(body, "tools",
                              cJSON_Duplicate(cJSON_GetObjectItem(kase, "tools"), 1));
        const cJSON *vars = cJSON_GetObjectItem(kase, "vars");
        cJSON_AddStringToObject(body, "reasoning_effort",
                                cJSON_GetObjectItem(vars, "reasoning_effort")->valuestring);
        char *json = cJSON_PrintUnformatted(body);
        cJSON_Delete(body);
        srv_request r;
        parse_ok(json, &r);
        cJSON_free(json);
        srv_chat c;
        chat_for(&c, "gpt_oss_120b");
        assert_string_equal(c.think.history_field, "thinking");
        srv_error err = {0};
        char *tvars = NULL;
        assert_true(srv_think_template_vars(&c.think, &r, &tvars, &err));
        char *got = srv_chat_render(&c, r.messages, r.n_messages, &r.tools, tvars, &err);
        if (!got) fail_msg("%s: %s", ids[i], err.message);
        snprintf(path, sizeof path, "%s/tests/chat/expected/gpt_oss_120b.%s.txt", NU_SOURCE_DIR,
                 ids[i]);
        char *want = nu_test_read_file(path, NULL);
        assert_non_null(want);
        if (strcmp(got, want)) {
            fprintf(stderr, "--- got\n%s\n--- want\n%s\n", got, want);
            fail_msg("%s renders differently", ids[i]);
        }
        free(want);
        free(got);
        free(tvars);
        srv_request_free(&r);
        srv_chat_free(&c);
    }
    cJSON_Delete(cases);
    free(text);
}

/* Templates without tools: a system message describes them, calls become
 * text and results user messages. */
static void test_render_without_tools(void **state) {
    (void)state;
    srv_chat c;
    chat_for(&c, "chatml");
    srv_request r;
    parse_ok("{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
             "\"content\":\"Weather in Paris?\"}," CALL_MSG("call_1") "," RESULT_MSG(
                 "call_1") ","
                           "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}],"
                           "\"tools\":" TOOLS ",\"tool_choice\":\"required\"}",
             &r);
    srv_error err;
    char *got = srv_chat_render(&c, r.messages, r.n_messages, &r.tools, NULL, &err);
    assert_non_null(got);
    const char *expect[] = {
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou can call these functions",
        "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"",
        "You must call one or more functions.\n<|im_end|>",
        "<|im_start|>assistant\n{\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":{\"city\":"
        "\"Paris\"}}]}<|im_end|>",
        "<|im_start|>user\nResult of get_weather (call call_1):\n22 degrees\n\nResult of "
        "get_weather (call call_1):\nsunny<|im_end|>",
    };
    for (size_t i = 0; i < sizeof expect / sizeof *expect; i++)
        if (!strstr(got, expect[i])) fail_msg("missing: %s\nin:\n%s", expect[i], got);
    free(got);
    srv_request_free(&r);
    srv_chat_free(&c);

    /* a template that refuses system messages gets the tools with the question */
    chat_for(&c, "gemma2_it");
    parse_ok("{" ASK ",\"tools\":" TOOLS "}", &r);
    got = srv_chat_render(&c, r.messages, r.n_messages, &r.tools, NULL, &err);
    if (!got) fail_msg("gemma2: %s", err.message);
    assert_non_null(strstr(got, "<start_of_turn>user\n# Tools"));
    assert_non_null(strstr(got, "as usual instead.\n\n\nWeather in Paris?"));
    free(got);
    srv_request_free(&r);
    srv_chat_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_hermes),         cmocka_unit_test(test_parse_other_formats),
        cmocka_unit_test(test_parse_malformed),      cmocka_unit_test(test_parse_not_parallel),
        cmocka_unit_test(test_stream_equals_whole),  cmocka_unit_test(test_stream_progressive),
        cmocka_unit_test(test_grammar_forced),       cmocka_unit_test(test_grammar_auto),
        cmocka_unit_test(test_grammar_schemas),      cmocka_unit_test(test_request_tools),
        cmocka_unit_test(test_request_messages),     cmocka_unit_test(test_template_probes),
        cmocka_unit_test(test_render_golden),        cmocka_unit_test(test_render_round_trip),
        cmocka_unit_test(test_render_without_tools), cmocka_unit_test(test_render_harmony_calls),
    };
    return cmocka_run_group_tests(tests, load_model, free_model);
}
