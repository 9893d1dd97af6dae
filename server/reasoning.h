/* reasoning.h - reasoning models: the template's thinking switch, the
 * thinking split from the answer, the thinking budget.
 *
 * Reasoning models write their thinking before the answer, between markers
 * (Qwen3, DeepSeek-R1: <think> ... </think>). What a template does is
 * learned once from its source (srv_think_detect): the markers it shows,
 * whether it has a switch (Qwen3's `enable_thinking`, gpt-oss's
 * `reasoning_effort`) and the message field it reads earlier thinking from
 * (`reasoning_content`). A request's chat_template_kwargs, reasoning_effort
 * (or Anthropic's `thinking`) become template variables
 * (srv_think_template_vars). The answer is split by one incremental parser
 * (srv_think_parser), whose content then goes to the tool-call parser
 * (srv_splitter), for streamed and whole answers alike. The budget is the
 * library's nu_think_budget, with the markers tokenized (srv_think_budget).
 *
 * Depends on include/nucleus.h, cJSON and the request types only. */
#ifndef NU_SRV_REASONING_H
#define NU_SRV_REASONING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"
#include "openai_params.h"
#include "tools.h"

/* What a chat template does with thinking. */
typedef struct srv_think {
    bool thinks;                      /* the model writes thinking blocks */
    char open[SRV_THINK_MARKER_MAX];  /* "<think>" */
    char close[SRV_THINK_MARKER_MAX]; /* "</think>" */
    bool switch_enable;               /* the template reads enable_thinking */
    bool switch_effort;               /* the template reads reasoning_effort (low/medium/high) */
    bool harmony;                     /* gpt-oss's harmony messages (below) */
    char history_field[24];           /* the assistant field it reads thinking from, or "" */
} srv_think;

/* Learns the markers and switches from a template's source; a template
 * that names no markers still thinks when the vocabulary has "<think>" as
 * one token. */
void srv_think_detect(srv_think *t, const char *template_source, const nu_model *m);

/* The template variables for a request (a JSON object as text, malloc'd;
 * NULL when there are none): the switch set from reasoning_effort (or the
 * reasoning.enable the other APIs set), then chat_template_kwargs on top.
 * A template with a switch thinks by default (enable_thinking true). 400
 * when the request asks for thinking the template cannot give or take
 * away (reasoning_effort on a model that does not think, "none" for one
 * that always does, max_thinking_tokens without thinking). */
bool srv_think_template_vars(const srv_think *t, const srv_request *r, char **out, srv_error *err);

/* Whether a rendered prompt leaves the model inside a thinking block (its
 * last open marker is followed by nothing but blanks). */
bool srv_think_prompt_inside(const srv_think *t, const char *prompt);

/* The library's budget for max_tokens thinking tokens: the markers and the
 * forced "\n" close "\n\n" as tokens, in the caller's arrays. */
bool srv_think_budget(const srv_think *t, const nu_model *m, int32_t max_tokens,
                      nu_think_budget *out, int32_t open[NU_THINK_MAX_MARKER],
                      int32_t close[NU_THINK_MAX_MARKER], int32_t force[NU_THINK_MAX_FORCE],
                      srv_error *err);

/* ---- splitting the answer ------------------------------------------------ */

/* (srv_think_split, how to split, is in openai_params.h.)
 *
 * gpt-oss writes harmony messages, each a header and a body:
 *   [<|start|>assistant[ to=RECIPIENT]]<|channel|>NAME[ to=RECIPIENT][ TYPE]<|message|>BODY
 * ended by <|end|> (or <|return|>, <|call|>, the end of the answer). The
 * bodies of "analysis" messages are the thinking, those of "final" and
 * "commentary" messages the content (llama.cpp's gpt-oss parser does the
 * same); a message to a recipient goes to the content whole, header
 * included, unless it is a call parsed for the request's tools (below);
 * text that is not a message is content. */
typedef struct srv_think_parser srv_think_parser;

/* NULL when out of memory. With tools (active ones), harmony messages to
 * functions.NAME become SRV_TOOL_CALL and SRV_TOOL_ARGS events (index 0,
 * 1, ...): once the message ends, when NAME is one of the tools and its
 * body one JSON object (sent without insignificant blanks); else they are
 * content as other calls are. */
srv_think_parser *srv_think_parser_new(const srv_think_split *s, const srv_tools *tools);
void srv_think_parser_free(srv_think_parser *p);

/* Takes the whole answer so far (grown each time; done: final) and emits
 * SRV_TOOL_REASONING and SRV_TOOL_CONTENT events for what became certain.
 * A block opens only at the start of the answer (after blanks) or in the
 * prompt; the markers are dropped, and so are the blanks at both ends of
 * the thinking and before the content that follows it. Text that may be a
 * marker's beginning is held back. An answer that ends inside the block is
 * all thinking. False when emit failed. */
bool srv_think_parser_feed(srv_think_parser *p, const char *text, size_t len, bool done,
                           srv_tool_emit emit, void *user);

/* Thinking and tool calls together: the thinking (and harmony's calls)
 * split off first, then the content parsed for calls when the request's
 * tools are active; the calls of both are numbered together. */
typedef struct srv_splitter srv_splitter;

/* A splitter for one answer of request r (which must outlive it); NULL when
 * out of memory. */
srv_splitter *srv_splitter_new(const srv_request *r);
void srv_splitter_free(srv_splitter *s);
/* As srv_think_parser_feed, with SRV_TOOL_CALL / SRV_TOOL_ARGS events too. */
bool srv_splitter_feed(srv_splitter *s, const char *text, size_t len, bool done, srv_tool_emit emit,
                       void *user);
int32_t srv_splitter_n_calls(const srv_splitter *s);

/* Whether answers of r need the splitter (thinking or active tools). */
bool srv_splitter_needed(const srv_request *r);

/* A whole answer, split. */
typedef struct srv_split_answer {
    char *reasoning; /* NULL when the answer has no thinking */
    size_t reasoning_len;
    srv_tool_result result; /* content and calls */
} srv_split_answer;

/* False when out of memory (out is then empty). */
bool srv_answer_split(const srv_request *r, const char *text, size_t len, srv_split_answer *out);
void srv_answer_free(srv_split_answer *a);

#endif
