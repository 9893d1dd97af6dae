/* fuzz_tools.c - libFuzzer target for the server's tool-call answer parser
 * (srv_tool_parser in server/tools.c): a model's generated text to message
 * content and function calls; and for the thinking split in front of it
 * (srv_splitter in server/reasoning.c).
 *
 * Input: two header bytes, then the answer text. Byte 0: bits 0-1 pick the
 * call format (generic, Hermes, Mistral, Llama 3), bit 2 marks the answer
 * as shaped by the tools' grammar (calls then stream as they are
 * generated), bit 3 turns parallel_tool_calls off, bit 4 splits <think>
 * blocks off first (then bit 5: the prompt opened one, bit 6: no tools, bit
 * 7: gpt-oss's harmony messages instead, with their calls), and the
 * streamed split must agree with srv_answer_split, calls are numbered 0, 1,
 * ... with arguments only for the last one, the thinking never holds the
 * close marker, and thinking and content never hold more than the text. Byte 1 seeds the cuts:
 * the answer is fed to one parser in pieces of 0 to 15 bytes (a piece of 0
 * feeds the same text again, as a stream does when a token adds no bytes).
 *
 * What must hold, else abort (a crash for libFuzzer):
 *   - streaming and parsing the whole text agree: the same content, the
 *     same calls, names and arguments (so the server's streamed and
 *     non-streamed answers are the same);
 *   - the events are well ordered: calls numbered 0, 1, 2, ... as they
 *     begin, arguments only for the call begun last;
 *   - every call names one of the request's tools and has an id of the
 *     format's shape; no more than one call without parallel_tool_calls;
 *   - an answer not shaped by a grammar only yields calls whose arguments
 *     are a JSON object;
 *   - an answer without calls is all content, byte for byte.
 * ASan and UBSan catch the rest; a parser or collector out of memory skips
 * the checks. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "openai_params.h"
#include "reasoning.h"
#include "tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok) {
    if (!ok) abort();
}

/* ---- the request's tools ------------------------------------------------- */

static char name_weather[] = "get_weather", name_search[] = "search", name_f[] = "f";
static char params_weather[] =
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}";

static srv_tool tool_list[] = {
    {.name = name_weather, .parameters = params_weather},
    {.name = name_search, .parameters = NULL},
    {.name = name_f, .parameters = NULL},
};

static bool is_tool_name(const char *name) {
    for (size_t i = 0; i < sizeof tool_list / sizeof tool_list[0]; i++)
        if (!strcmp(tool_list[i].name, name)) return true;
    return false;
}

/* "call_" and 24 letters or digits; 9 of them for Mistral. */
static bool id_well_formed(const char *id, srv_tool_format f) {
    bool mistral = f == SRV_TOOL_FORMAT_MISTRAL;
    const char *rest = mistral ? id : id + 5;
    if (!mistral && strncmp(id, "call_", 5)) return false;
    size_t n = strspn(rest, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789");
    return n == (mistral ? 9 : 24) && rest[n] == 0;
}

/* ---- collecting the streamed events --------------------------------------- */

typedef struct text_buf {
    char *s;
    size_t len;
} text_buf;

typedef struct streamed_call {
    char *name;
    text_buf args;
} streamed_call;

typedef struct collector {
    srv_tool_format format;
    text_buf content;
    streamed_call *calls;
    int32_t n_calls, cap;
} collector;

static bool text_append(text_buf *b, const char *s, size_t n) {
    char *p = realloc(b->s, b->len + n + 1);
    if (!p) return false;
    memcpy(p + b->len, s, n);
    b->s = p;
    b->len += n;
    b->s[b->len] = 0;
    return true;
}

static bool begin_call(collector *c, const srv_tool_event *ev) {
    check(ev->index == c->n_calls && ev->name && is_tool_name(ev->name));
    check(ev->id && id_well_formed(ev->id, c->format));
    if (c->n_calls == c->cap) {
        int32_t cap = c->cap ? 2 * c->cap : 4;
        streamed_call *calls = realloc(c->calls, (size_t)cap * sizeof *calls);
        if (!calls) return false;
        c->calls = calls;
        c->cap = cap;
    }
    streamed_call *call = &c->calls[c->n_calls];
    memset(call, 0, sizeof *call);
    if (!(call->name = strdup(ev->name))) return false;
    c->n_calls++;
    return true;
}

static bool collect(void *user, const srv_tool_event *ev) {
    collector *c = user;
    switch (ev->kind) {
    case SRV_TOOL_CONTENT: return text_append(&c->content, ev->text, ev->len);
    case SRV_TOOL_CALL: return begin_call(c, ev);
    case SRV_TOOL_ARGS:
        check(c->n_calls > 0 && ev->index == c->n_calls - 1); /* the current call's */
        return text_append(&c->calls[ev->index].args, ev->text, ev->len);
    case SRV_TOOL_REASONING: break; /* the tool parser never sends thinking */
    }
    abort(); /* an event of no known kind */
}

static void collector_free(collector *c) {
    for (int32_t i = 0; i < c->n_calls; i++) free(c->calls[i].name), free(c->calls[i].args.s);
    free(c->calls);
    free(c->content.s);
}

/* ---- the properties --------------------------------------------------------- */

/* Feeds text in pieces whose sizes (0..15) come from a small generator. */
static bool feed_in_pieces(srv_tool_parser *p, const char *text, size_t len, uint8_t seed,
                           collector *c) {
    uint32_t state = seed * 2654435761u + 1;
    for (size_t n = 0; n < len;) {
        if (!srv_tool_parser_feed(p, text, n, false, collect, c)) return false;
        state = state * 1664525u + 1013904223u;
        n += (state >> 24) % 16;
    }
    return srv_tool_parser_feed(p, text, len, true, collect, c);
}

static void check_agreement(const srv_tools *t, const collector *c, const srv_tool_result *whole,
                            const char *text, size_t len) {
    check(c->n_calls == whole->n_calls);
    check(t->parallel || whole->n_calls <= 1);
    check(c->content.len == whole->content_len &&
          (!c->content.len || !memcmp(c->content.s, whole->content, c->content.len)));
    check(whole->content[whole->content_len] == 0);
    for (int32_t i = 0; i < whole->n_calls; i++) {
        const srv_tool_call *call = &whole->calls[i];
        check(!strcmp(c->calls[i].name, call->name));
        check(!strcmp(c->calls[i].args.s ? c->calls[i].args.s : "", call->arguments));
        check(id_well_formed(call->id, (srv_tool_format)t->format));
        if (!t->constrained) {
            cJSON *v = cJSON_Parse(call->arguments);
            bool object = cJSON_IsObject(v);
            cJSON_Delete(v);
            check(object);
        }
    }
    if (whole->n_calls == 0) check(whole->content_len == len && !memcmp(whole->content, text, len));
}

/* ---- the thinking split ------------------------------------------------------ */

typedef struct think_collector {
    text_buf reasoning, content;
    int32_t n_calls;
    bool oom;
} think_collector;

static bool collect_split(void *user, const srv_tool_event *ev) {
    think_collector *c = user;
    bool ok = true;
    if (ev->kind == SRV_TOOL_REASONING) ok = text_append(&c->reasoning, ev->text, ev->len);
    if (ev->kind == SRV_TOOL_CONTENT) ok = text_append(&c->content, ev->text, ev->len);
    if (ev->kind == SRV_TOOL_CALL) check(ev->index == c->n_calls++);
    if (ev->kind == SRV_TOOL_ARGS) check(ev->index == c->n_calls - 1);
    if (!ok) c->oom = true;
    return ok;
}

static void check_split(srv_request *r, const char *text, size_t len, uint8_t seed) {
    srv_split_answer whole;
    if (!srv_answer_split(r, text, len, &whole)) return; /* out of memory */
    think_collector c = {0};
    srv_splitter *s = srv_splitter_new(r);
    uint32_t state = seed * 2654435761u + 1;
    bool ok = s != NULL;
    for (size_t n = 0; ok && n < len;) {
        ok = srv_splitter_feed(s, text, n, false, collect_split, &c);
        state = state * 1664525u + 1013904223u;
        n += (state >> 24) % 16;
    }
    if (ok && srv_splitter_feed(s, text, len, true, collect_split, &c) && !c.oom) {
        check(c.reasoning.len == whole.reasoning_len &&
              (!c.reasoning.len || !memcmp(c.reasoning.s, whole.reasoning, c.reasoning.len)));
        check((whole.reasoning != NULL) == (whole.reasoning_len > 0));
        check(c.content.len == whole.result.content_len &&
              (!c.content.len || !memcmp(c.content.s, whole.result.content, c.content.len)));
        check(c.n_calls == whole.result.n_calls);
        check(c.reasoning.len + c.content.len <= len);
        const char *close = r->reasoning.split.close;
        check(!c.reasoning.len || !memmem(c.reasoning.s, c.reasoning.len, close, strlen(close)));
        if (!r->reasoning.split.harmony && !r->reasoning.split.starts_inside &&
            !memmem(text, len, "<think>", 7) && !srv_tools_active(&r->tools))
            check(c.content.len == len && (!len || !memcmp(c.content.s, text, len)));
    }
    srv_splitter_free(s);
    free(c.reasoning.s), free(c.content.s);
    srv_answer_free(&whole);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    srv_tools tools = {
        .list = tool_list,
        .n = (int32_t)(sizeof tool_list / sizeof tool_list[0]),
        .choice = SRV_TOOLS_AUTO,
        .parallel = !(data[0] & 8),
        .format = data[0] & 3,
        .constrained = data[0] & 4,
    };
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    if (data[0] & 16) {
        srv_request r = {.kind = SRV_CHAT, .tools = tools};
        if (data[0] & 64) r.tools.n = 0;
        r.reasoning.split = (srv_think_split){
            .on = true, .starts_inside = data[0] & 32, .open = "<think>", .close = "</think>"};
        if (data[0] & 128) {
            r.tools.format = SRV_TOOL_FORMAT_HARMONY;
            r.reasoning.split = (srv_think_split){.on = true,
                                                  .starts_inside = data[0] & 32,
                                                  .harmony = true,
                                                  .open = "<|channel|>analysis<|message|>",
                                                  .close = "<|end|>"};
        }
        check_split(&r, text, len, data[1]);
        return 0;
    }

    srv_tool_result whole;
    if (!srv_tools_parse(&tools, text, len, &whole)) return 0; /* out of memory */
    collector c = {.format = (srv_tool_format)tools.format};
    srv_tool_parser *p = srv_tool_parser_new(&tools);
    if (p && feed_in_pieces(p, text, len, data[1], &c)) {
        check(srv_tool_parser_n_calls(p) == c.n_calls);
        check_agreement(&tools, &c, &whole, text, len);
    }
    srv_tool_parser_free(p);
    collector_free(&c);
    srv_tool_result_free(&whole);
    return 0;
}
