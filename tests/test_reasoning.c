/* test_reasoning.c - reasoning models in the server (server/reasoning.c and
 * the reasoning fields of server/openai_params.c).
 *
 * What the real templates of shared/chat_templates do with thinking (Qwen3:
 * <think> markers, the enable_thinking switch, reasoning_content in the
 * history; DeepSeek-R1: markers and a switch, earlier thinking cut by the
 * template itself; Qwen2.5: none); the template variables a request sets;
 * whether a rendered prompt leaves the model inside a block. The answer
 * split on the shapes these models write (Qwen3's documented
 * "<think>\n...\n</think>\n\n" answer, R1's answer after a prompt that
 * opened the block), each fed whole and fed as a growing prefix at every
 * byte, which must give the same thinking and content; tool calls after the
 * thinking, and a call inside the thinking that is not one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "nucleus.h"
#include "openai_params.h"
#include "reasoning.h"
#include "test_support.h"
#include "tools.h"

static const srv_limits LIMITS = {
    .n_vocab = 512, .max_n = 8, .max_tokens = 2048, .max_prompts = 8, .max_beam_width = 4};

static bool parse(const char *body, srv_request *r, srv_error *err) {
    srv_defaults d = {.gen = nu_generate_default_params(), .beam = nu_beam_default_params()};
    return srv_parse_request(body, strlen(body), SRV_CHAT, &LIMITS, &d, r, err);
}

static void parse_ok(const char *body, srv_request *r) {
    srv_error err = {0};
    if (!parse(body, r, &err))
        fail_msg("refused (%s): %s\n  body: %s", err.param, err.message, body);
}

/* What srv_think_detect learns from shared/chat_templates/NAME.jinja. */
static srv_think detect(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "chat_templates/%s.jinja", name);
    size_t len;
    char *src = nu_test_read_file(nu_test_shared(rel), &len);
    assert_non_null(src);
    srv_think t;
    srv_think_detect(&t, src, NULL);
    free(src);
    return t;
}

static void test_detect(void **state) {
    (void)state;
    srv_think t = detect("qwen3_0_6b");
    assert_true(t.thinks);
    assert_string_equal(t.open, "<think>");
    assert_string_equal(t.close, "</think>");
    assert_true(t.switch_enable);
    assert_false(t.switch_effort);
    assert_string_equal(t.history_field, "reasoning_content");
    t = detect("deepseek_r1_distill_qwen_32b");
    assert_true(t.thinks && t.switch_enable);
    assert_string_equal(t.history_field, "");
    t = detect("qwen2_5_instruct");
    assert_false(t.thinks);
    assert_false(t.switch_enable);
}

/* The template variables of a request body for template t (NULL: none);
 * refused requests give "400:PARAM". */
static char *vars_of(const srv_think *t, const char *body) {
    srv_request r;
    parse_ok(body, &r);
    srv_error err = {0};
    char *vars = NULL;
    if (!srv_think_template_vars(t, &r, &vars, &err)) {
        vars = malloc(128);
        snprintf(vars, 128, "%d:%s", err.status, err.param);
    }
    srv_request_free(&r);
    return vars;
}

static void expect_vars(const srv_think *t, const char *body, const char *want) {
    char *got = vars_of(t, body);
    if (!want ? got != NULL : !got || strcmp(got, want))
        fail_msg("vars %s, want %s\n  body: %s", got ? got : "(none)", want ? want : "(none)",
                 body);
    free(got);
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static void test_template_vars(void **state) {
    (void)state;
    srv_think qwen3 = detect("qwen3_0_6b"), plain = detect("qwen2_5_instruct");
    srv_think always = qwen3;
    always.switch_enable = false; /* a model that always thinks */
    srv_think effort = qwen3;
    effort.switch_enable = false, effort.switch_effort = true; /* gpt-oss's switch */
    expect_vars(&qwen3, "{" MSG "}", "{\"enable_thinking\":true}");
    expect_vars(&qwen3, "{" MSG ",\"reasoning_effort\":\"none\"}", "{\"enable_thinking\":false}");
    expect_vars(&qwen3, "{" MSG ",\"reasoning_effort\":\"high\"}", "{\"enable_thinking\":true}");
    /* chat_template_kwargs win, and pass anything else through */
    expect_vars(&qwen3,
                "{" MSG ",\"reasoning_effort\":\"high\",\"chat_template_kwargs\":"
                "{\"enable_thinking\":false,\"x\":[1]}}",
                "{\"enable_thinking\":false,\"x\":[1]}");
    expect_vars(&plain, "{" MSG "}", NULL);
    expect_vars(&plain, "{" MSG ",\"reasoning_effort\":\"none\"}", NULL);
    expect_vars(&plain, "{" MSG ",\"chat_template_kwargs\":{\"a\":1}}", "{\"a\":1}");
    expect_vars(&plain, "{" MSG ",\"reasoning_effort\":\"low\"}", "400:reasoning_effort");
    expect_vars(&plain, "{" MSG ",\"max_thinking_tokens\":5}", "400:max_thinking_tokens");
    expect_vars(&always, "{" MSG ",\"reasoning_effort\":\"low\"}", NULL);
    expect_vars(&always, "{" MSG ",\"reasoning_effort\":\"none\"}", "400:reasoning_effort");
    expect_vars(&effort, "{" MSG ",\"reasoning_effort\":\"minimal\"}",
                "{\"reasoning_effort\":\"low\"}");
    expect_vars(&qwen3, "{" MSG ",\"reasoning_effort\":\"none\",\"max_thinking_tokens\":3}",
                "400:max_thinking_tokens");
}

static void test_request_fields(void **state) {
    (void)state;
    srv_request r;
    srv_error err;
    parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
             "\"content\":\"b\",\"reasoning_content\":\"c\"}],\"max_thinking_tokens\":0}",
             &r);
    assert_string_equal(r.messages[1].reasoning, "c");
    assert_null(r.messages[0].reasoning);
    assert_int_equal(r.reasoning.max_tokens, 0);
    srv_request_free(&r);
    static const char *const bad[][2] = {
        {"{" MSG ",\"reasoning_effort\":\"max\"}", "reasoning_effort"},
        {"{" MSG ",\"reasoning_effort\":3}", "reasoning_effort"},
        {"{" MSG ",\"chat_template_kwargs\":[]}", "chat_template_kwargs"},
        {"{" MSG ",\"max_thinking_tokens\":-1}", "max_thinking_tokens"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"reasoning_content\":\"c\"}]}",
         "messages"},
        {"{" MSG ",\"max_thinking_tokens\":4,\"beam_width\":2}", "max_thinking_tokens"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (parse(bad[i][0], &r, &err)) fail_msg("accepted: %s", bad[i][0]);
        assert_int_equal(err.status, 400);
        assert_string_equal(err.param, bad[i][1]);
    }
}

static void test_prompt_inside(void **state) {
    (void)state;
    srv_think t = detect("qwen3_0_6b");
    assert_false(srv_think_prompt_inside(&t, "<|im_start|>assistant\n"));
    assert_true(srv_think_prompt_inside(&t, "<|Assistant|><think>\n"));
    assert_false(srv_think_prompt_inside(&t, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert_false(srv_think_prompt_inside(&t, "user: <think> me\nassistant:"));
    srv_think none = detect("qwen2_5_instruct");
    assert_false(srv_think_prompt_inside(&none, "<think>\n"));
}

/* ---- splitting answers ------------------------------------------------- */

typedef struct split {
    char reasoning[512], content[512];
    char calls[4][128];
    int n_calls;
} split;

static bool collect(void *user, const srv_tool_event *ev) {
    split *s = user;
    switch (ev->kind) {
    case SRV_TOOL_REASONING: strncat(s->reasoning, ev->text, ev->len); break;
    case SRV_TOOL_CONTENT: strncat(s->content, ev->text, ev->len); break;
    case SRV_TOOL_CALL: snprintf(s->calls[s->n_calls++], 128, "%s:", ev->name); break;
    case SRV_TOOL_ARGS: strncat(s->calls[ev->index], ev->text, ev->len); break;
    }
    return true;
}

/* The answer fed whole, and fed as a growing prefix at every byte. */
static void split_both(const srv_request *r, const char *text, split *whole, split *pieces) {
    memset(whole, 0, sizeof *whole);
    memset(pieces, 0, sizeof *pieces);
    srv_splitter *s = srv_splitter_new(r);
    assert_true(srv_splitter_feed(s, text, strlen(text), true, collect, whole));
    srv_splitter_free(s);
    s = srv_splitter_new(r);
    size_t n = strlen(text);
    char *buf = malloc(n + 1);
    for (size_t k = 0; k <= n; k++) {
        memcpy(buf, text, k);
        buf[k] = 0;
        assert_true(srv_splitter_feed(s, buf, k, k == n, collect, pieces));
    }
    free(buf);
    srv_splitter_free(s);
    /* and cut at pseudo-random places (1 to 7 bytes apart): the same as at every byte */
    for (uint32_t seed = 1; seed <= 8; seed++) {
        split chunked;
        memset(&chunked, 0, sizeof chunked);
        s = srv_splitter_new(r);
        for (size_t k = 0, x = seed;;) {
            x = x * 1103515245u + 12345u;
            k += 1 + (x >> 16) % 7;
            if (k > n) k = n;
            assert_true(srv_splitter_feed(s, text, k, k == n, collect, &chunked));
            if (k == n) break;
        }
        srv_splitter_free(s);
        assert_memory_equal(&chunked, pieces, sizeof chunked);
    }
}

/* A chat request whose answers hold thinking in markers open / close. */
static bool harmony_split; /* think_request's answers are gpt-oss's harmony messages */

static void think_request(srv_request *r, const char *extra, bool inside, const char *open,
                          const char *close) {
    char body[4096];
    snprintf(body, sizeof body, "{" MSG "%s}", extra);
    parse_ok(body, r);
    r->reasoning.split.on = true;
    r->reasoning.split.starts_inside = inside;
    r->reasoning.split.harmony = harmony_split;
    snprintf(r->reasoning.split.open, SRV_THINK_MARKER_MAX, "%s", open);
    snprintf(r->reasoning.split.close, SRV_THINK_MARKER_MAX, "%s", close);
}

/* The split of text with the markers open / close: the same whole, as a
 * growing prefix and by srv_answer_split. */
static void expect_split_markers(const char *open, const char *close, bool inside, const char *text,
                                 const char *reasoning, const char *content) {
    srv_request r;
    think_request(&r, "", inside, open, close);
    split whole, pieces;
    split_both(&r, text, &whole, &pieces);
    if (strcmp(whole.reasoning, reasoning) || strcmp(whole.content, content))
        fail_msg("split [%s] [%s], want [%s] [%s]\n  text: %s", whole.reasoning, whole.content,
                 reasoning, content, text);
    assert_string_equal(pieces.reasoning, reasoning);
    assert_string_equal(pieces.content, content);
    /* the whole-answer function agrees */
    srv_split_answer a;
    assert_true(srv_answer_split(&r, text, strlen(text), &a));
    assert_string_equal(a.reasoning ? a.reasoning : "", reasoning);
    assert_true(a.reasoning == NULL || a.reasoning[0]); /* no thinking: none at all */
    assert_string_equal(a.result.content, content);
    srv_answer_free(&a);
    srv_request_free(&r);
}

static void expect_split(bool inside, const char *text, const char *reasoning,
                         const char *content) {
    expect_split_markers("<think>", "</think>", inside, text, reasoning, content);
}

static void test_split(void **state) {
    (void)state;
    /* Qwen3: the model opens the block itself */
    expect_split(false, "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?",
                 "The user greets me.", "Hello! How can I help?");
    /* thinking over several lines keeps its inner blanks */
    expect_split(false, "<think>\nFirst.\n\nSecond.  \n</think>\n\nA", "First.\n\nSecond.", "A");
    /* Qwen3 with thinking switched off writes an empty block or none */
    expect_split(false, "<think>\n\n</think>\n\nJust the answer.", "", "Just the answer.");
    expect_split(false, "Just the answer.", "", "Just the answer.");
    expect_split(false, "  Leading blanks stay.", "", "  Leading blanks stay.");
    /* a marker later in the answer is content */
    expect_split(false, "Answer <think>not</think> here", "", "Answer <think>not</think> here");
    /* something that starts like the marker but is not */
    expect_split(false, "<thin air", "", "<thin air");
    expect_split(false, "<", "", "<");
    /* DeepSeek-R1: the prompt opened the block */
    expect_split(true, "Okay, so 2+2.\n</think>\n\n4", "Okay, so 2+2.", "4");
    expect_split(true, "</think>4", "", "4");
    /* an answer cut inside the block is all thinking */
    expect_split(true, "Still thinking </thi", "Still thinking </thi", "");
    expect_split(false, "<think>\nHmm", "Hmm", "");
    /* multi-byte text passes whole */
    expect_split(false, "<think>\xe6\x80\x9d\xe8\x80\x83</think>\xe7\xad\x94",
                 "\xe6\x80\x9d\xe8\x80\x83", "\xe7\xad\x94");
}

/* Gemma 4: its template switches thinking with enable_thinking (the
 * <|think|> line), keeps reasoning_content before tool calls, and the model
 * writes its thinking as "<|channel>thought\n...<channel|>" (the markers
 * llama.cpp's Gemma 4 parser uses); with thinking off the generation prompt
 * itself ends with an empty block, which leaves the model outside it. */
static void test_gemma4(void **state) {
    (void)state;
    srv_think t = detect("gemma4_31b_it");
    assert_true(t.thinks);
    assert_string_equal(t.open, "<|channel>thought");
    assert_string_equal(t.close, "<channel|>");
    assert_true(t.switch_enable);
    assert_string_equal(t.history_field, "reasoning_content");
    expect_vars(&t, "{" MSG "}", "{\"enable_thinking\":true}");
    expect_vars(&t, "{" MSG ",\"reasoning_effort\":\"none\"}", "{\"enable_thinking\":false}");
    /* the generation prompts of tests/chat/expected (thinking on, then off) */
    assert_false(srv_think_prompt_inside(&t, "<|turn>user\nHello!<turn|>\n<|turn>model\n"));
    assert_false(srv_think_prompt_inside(
        &t, "<|turn>user\nHello!<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"));
    const char *open = t.open, *close = t.close;
    expect_split_markers(open, close, false,
                         "<|channel>thought\nThe user asks 17*23: 17*20 + 17*3 = 391."
                         "<channel|>17 \xc3\x97 23 = 391.",
                         "The user asks 17*23: 17*20 + 17*3 = 391.", "17 \xc3\x97 23 = 391.");
    expect_split_markers(open, close, false, "391.", "", "391.");
    expect_split_markers(open, close, false, "<|channel>thought\nStill going", "Still going", "");
}

/* gpt-oss: its template (harmony) reads reasoning_effort and the history's
 * "thinking" field; the model writes an analysis message, then a final one
 * (the shapes of OpenAI's harmony format guide: a header
 * "<|channel|>NAME<|message|>", "<|end|>" between messages, the assistant's
 * "<|start|>assistant" before each message after the first, as the
 * generation prompt ends with it). Analysis is the thinking; final and
 * commentary are the content; without tools, a tool call
 * (" to=functions.NAME") stays in the content whole (test_gpt_oss_calls
 * parses them). */
static void expect_harmony(bool inside, const char *text, const char *reasoning,
                           const char *content) {
    harmony_split = true;
    expect_split_markers("<|channel|>analysis<|message|>", "<|end|>", inside, text, reasoning,
                         content);
    harmony_split = false;
}

static void test_gpt_oss(void **state) {
    (void)state;
    srv_think t = detect("gpt_oss_120b");
    assert_true(t.thinks && t.harmony);
    assert_string_equal(t.open, "<|channel|>analysis<|message|>");
    assert_string_equal(t.close, "<|end|>");
    assert_true(t.switch_effort);
    assert_false(t.switch_enable);
    assert_string_equal(t.history_field, "thinking");
    expect_vars(&t, "{" MSG "}", NULL);
    expect_vars(&t, "{" MSG ",\"reasoning_effort\":\"high\"}", "{\"reasoning_effort\":\"high\"}");
    expect_vars(&t, "{" MSG ",\"reasoning_effort\":\"none\"}", "400:reasoning_effort");
    /* the template's generation prompt */
    assert_false(
        srv_think_prompt_inside(&t, "<|start|>user<|message|>Hi<|end|><|start|>assistant"));
    assert_true(srv_think_prompt_inside(&t, "<|start|>assistant<|channel|>analysis<|message|>"));
    expect_harmony(false,
                   "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|>"
                   "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.",
                   "User asks 2+2. Simple.", "2 + 2 = 4.");
    /* the end tokens, when the text shows them */
    expect_harmony(false,
                   "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>final"
                   "<|message|>B<|return|>",
                   "A", "B");
    /* no analysis; plain text; blanks between messages */
    expect_harmony(false, "<|channel|>final<|message|>Hi there", "", "Hi there");
    expect_harmony(false, "Just text <|channel|>", "", "Just text <|channel|>");
    expect_harmony(false,
                   "<|channel|>analysis<|message|>x<|end|>\n<|start|>assistant<|channel|>"
                   "final<|message|> y",
                   "x", " y");
    /* two analysis messages and a commentary preamble */
    expect_harmony(false,
                   "<|channel|>analysis<|message|>One. <|end|><|start|>assistant<|channel|>"
                   "analysis<|message|>Two.<|end|><|start|>assistant<|channel|>commentary"
                   "<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|>"
                   "Done.",
                   "One. Two.", "Checking.Done.");
    /* a tool call stays whole in the content when the request has no tools */
    expect_harmony(false,
                   "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
                   "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                   "{\"city\":\"Paris\"}<|call|>",
                   "Need the weather.",
                   "<|start|>assistant<|channel|>commentary to=functions.get_weather "
                   "<|constrain|>json<|message|>{\"city\":\"Paris\"}");
    /* cut inside the analysis, or inside a header */
    expect_harmony(false, "<|channel|>analysis<|message|>Still <|en", "Still <|en", "");
    expect_harmony(false, "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|chan", "A",
                   "");
    /* a prompt that opened the analysis */
    expect_harmony(true, "Thinking.<|end|><|start|>assistant<|channel|>final<|message|>Answer.",
                   "Thinking.", "Answer.");
}

static void test_split_off(void **state) {
    (void)state;
    /* a template that does not think: everything is content */
    srv_request r;
    parse_ok("{" MSG "}", &r);
    srv_split_answer a;
    assert_true(srv_answer_split(&r, "<think>x</think>y", 17, &a));
    assert_null(a.reasoning);
    assert_string_equal(a.result.content, "<think>x</think>y");
    srv_answer_free(&a);
    assert_false(srv_splitter_needed(&r));
    srv_request_free(&r);
}

#define TOOL                                                                                       \
    ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"    \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]"

static void test_split_with_tools(void **state) {
    (void)state;
    srv_request r;
    think_request(&r, TOOL, false, "<think>", "</think>");
    r.tools.format = SRV_TOOL_FORMAT_HERMES;
    split whole, pieces;
    /* Qwen3's call after its thinking */
    const char *text = "<think>\nI should look it up. <tool_call> is how.\n</think>\n\n"
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Paris\"}}\n</tool_call>";
    split_both(&r, text, &whole, &pieces);
    assert_string_equal(whole.reasoning, "I should look it up. <tool_call> is how.");
    assert_string_equal(whole.content, "");
    assert_int_equal(whole.n_calls, 1);
    assert_string_equal(whole.calls[0], "get_weather:{\"city\":\"Paris\"}");
    assert_memory_equal(&whole, &pieces, sizeof whole);
    srv_split_answer a;
    assert_true(srv_answer_split(&r, text, strlen(text), &a));
    assert_string_equal(a.reasoning, "I should look it up. <tool_call> is how.");
    assert_int_equal(a.result.n_calls, 1);
    assert_string_equal(a.result.calls[0].name, "get_weather");
    srv_answer_free(&a);
    srv_request_free(&r);
}

/* gpt-oss's tool calls with the request's tools: harmony messages to
 * functions.NAME (header as the model writes it, "<|channel|>commentary
 * to=functions.NAME <|constrain|>json<|message|>", or as the template
 * renders a call, recipient first: "<|start|>assistant to=functions.NAME
 * <|channel|>commentary json<|message|>") become calls with the body as
 * arguments, whole, as a growing prefix, at random cuts and by
 * srv_answer_split; other recipients, unknown functions and bodies that are
 * not one JSON object stay content. */
static void expect_calls(bool parallel, const char *text, const char *reasoning,
                         const char *content, int n_calls, const char *const *calls) {
    srv_request r;
    harmony_split = true;
    think_request(&r, parallel ? TOOL : TOOL ",\"parallel_tool_calls\":false", false,
                  "<|channel|>analysis<|message|>", "<|end|>");
    harmony_split = false;
    r.tools.format = SRV_TOOL_FORMAT_HARMONY;
    split whole, pieces;
    split_both(&r, text, &whole, &pieces);
    if (strcmp(whole.reasoning, reasoning) || strcmp(whole.content, content) ||
        whole.n_calls != n_calls)
        fail_msg("split [%s] [%s] %d calls, want [%s] [%s] %d\n  text: %s", whole.reasoning,
                 whole.content, whole.n_calls, reasoning, content, n_calls, text);
    for (int i = 0; i < n_calls; i++) assert_string_equal(whole.calls[i], calls[i]);
    assert_memory_equal(&whole, &pieces, sizeof whole);
    srv_split_answer a;
    assert_true(srv_answer_split(&r, text, strlen(text), &a));
    assert_string_equal(a.reasoning ? a.reasoning : "", reasoning);
    assert_string_equal(a.result.content, content);
    assert_int_equal(a.result.n_calls, n_calls);
    for (int i = 0; i < n_calls; i++) {
        char both[256];
        snprintf(both, sizeof both, "%s:%s", a.result.calls[i].name, a.result.calls[i].arguments);
        assert_string_equal(both, calls[i]);
        assert_true(!strncmp(a.result.calls[i].id, "call_", 5) &&
                    strlen(a.result.calls[i].id) == 29);
    }
    srv_answer_free(&a);
    srv_request_free(&r);
}

static void test_gpt_oss_calls(void **state) {
    (void)state;
    static const char *const paris[] = {"get_weather:{\"city\":\"Paris\"}",
                                        "get_weather:{\"city\":\"Oslo\"}"};
    /* gpt-oss's template reads tools and shows calls in harmony */
    size_t len;
    char *src = nu_test_read_file(nu_test_shared("chat_templates/gpt_oss_120b.jinja"), &len);
    assert_non_null(src);
    assert_int_equal(srv_tools_detect_format(src), SRV_TOOL_FORMAT_HARMONY);
    free(src);
    /* the shape: analysis, then the call on the commentary channel */
    expect_calls(true,
                 "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
                 "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                 "{\"city\":\"Paris\"}<|call|>",
                 "Need the weather.", "", 1, paris);
    /* the recipient first (as the template renders calls), blanks in the JSON */
    expect_calls(true,
                 "<|channel|>analysis<|message|>Weather.<|end|><|start|>assistant "
                 "to=functions.get_weather<|channel|>commentary json<|message|>"
                 "{ \"city\" : \"Paris\" }\n<|call|>",
                 "Weather.", "", 1, paris);
    /* right after the generation prompt "<|start|>assistant"; <|call|> as the
     * stop token is not in the text */
    expect_calls(true,
                 " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
                 "{\"city\":\"Paris\"}",
                 "", "", 1, paris);
    /* a preamble on the commentary channel, two calls; the second dropped
     * without parallel_tool_calls */
    const char *two = "<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant"
                      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                      "{\"city\":\"Paris\"}<|call|><|start|>assistant<|channel|>commentary "
                      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}"
                      "<|call|>";
    expect_calls(true, two, "", "Checking both.", 2, paris);
    expect_calls(false, two, "", "Checking both.", 1, paris);
    /* then a final answer after the call's result */
    expect_calls(true,
                 "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                 "{\"city\":\"Paris\"}<|call|><|start|>assistant<|channel|>final<|message|>"
                 "Sunny.",
                 "", "Sunny.", 1, paris);
    /* not calls: an unknown function, another recipient, a body that is not
     * one JSON object, a call cut short */
    expect_calls(true,
                 "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}"
                 "<|call|>",
                 "", "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}",
                 0, NULL);
    expect_calls(true, "<|channel|>analysis to=python<|message|>print(1)<|call|>", "",
                 "<|channel|>analysis to=python<|message|>print(1)", 0, NULL);
    expect_calls(
        true, "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":1} x<|call|>", "",
        "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":1} x", 0, NULL);
    expect_calls(true, "<|channel|>commentary to=functions.get_weather<|message|>[1]<|call|>", "",
                 "<|channel|>commentary to=functions.get_weather<|message|>[1]", 0, NULL);
    expect_calls(true, "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Par",
                 "", "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Par", 0,
                 NULL);
    /* plain text that starts like a recipient */
    expect_calls(true, "tomorrow", "", "tomorrow", 0, NULL);
    /* a generic call written as the whole answer (a forced tool_choice's
     * grammar) is still read */
    expect_calls(true, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}", "", "", 1,
                 paris);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_template_vars),
        cmocka_unit_test(test_request_fields),
        cmocka_unit_test(test_prompt_inside),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_gemma4),
        cmocka_unit_test(test_gpt_oss),
        cmocka_unit_test(test_split_off),
        cmocka_unit_test(test_split_with_tools),
        cmocka_unit_test(test_gpt_oss_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
