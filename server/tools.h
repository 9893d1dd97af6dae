/* tools.h - function calling in /v1/chat/completions.
 *
 * The request's tools (parsed by openai_params.c) reach the model in one of
 * two ways: a chat template that reads `tools` renders them itself, and for
 * one that does not, a system message describes them and the answer format
 * (srv_tools_prompt). The template's source also decides the syntax the
 * model writes its calls in (srv_tool_format). A forced call (tool_choice
 * "required" or a named function) is generated under a grammar built from
 * the tools' parameter schemas, so it always parses and its arguments
 * validate; with "auto" the same grammar only takes over once the model
 * starts a call (srv_tools_grammar). The generated text is parsed back into
 * content and calls by one incremental parser, whether the answer is
 * streamed or not (srv_tool_parser), so both give the same calls.
 *
 * Depends on include/nucleus.h, cJSON and the request types only. */
#ifndef NU_SRV_TOOLS_H
#define NU_SRV_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"
#include "openai_params.h"

/* How a model writes tool calls. Every format also accepts an answer that
 * is nothing but the call JSON (an object {"name", "arguments"}, an array
 * of them or {"tool_calls": [...]}): markers that are control tokens never
 * appear in the generated text. */
typedef enum srv_tool_format {
    /* {"tool_calls": [{"name": ..., "arguments": {...}}]} as the whole
     * answer: templates without a call syntax of their own. */
    SRV_TOOL_FORMAT_GENERIC = 0,
    /* <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one
     * block per call (Hermes 2 Pro, Qwen 2.5). */
    SRV_TOOL_FORMAT_HERMES,
    /* [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...] (Mistral v0.3, Nemo). */
    SRV_TOOL_FORMAT_MISTRAL,
    /* {"name": ..., "parameters": {...}}, possibly after <|python_tag|>
     * (Llama 3.1, 3.2). */
    SRV_TOOL_FORMAT_LLAMA3,
    /* gpt-oss's harmony messages to a recipient:
     * <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>
     * {...}<|call|> (the recipient may also come before the channel). The
     * thinking parser reads them (reasoning.h); this parser only sees the
     * answer's plain text. */
    SRV_TOOL_FORMAT_HARMONY,
} srv_tool_format;

#define SRV_TOOL_ID_MAX 32 /* bytes of a call id with its NUL */

/* "generic", "hermes", "mistral", "llama3" or "harmony". */
const char *srv_tool_format_name(srv_tool_format f);

/* The call syntax a template's source shows its model ("<tool_call>",
 * "[TOOL_CALLS]", "<|python_tag|>", Llama's "parameters" JSON or harmony's
 * <|call|>), else generic. Only meaningful for templates that read `tools`. */
srv_tool_format srv_tools_detect_format(const char *template_source);

/* Whether the request asks for calls to be parsed: tools given and
 * tool_choice other than "none". */
bool srv_tools_active(const srv_tools *t);

/* The system-message text added for templates that do not show tools:
 * the tools (when list_tools) and the generic answer format with what
 * tool_choice asks. NULL when nothing is to be added (no tools, "none") or
 * out of memory (*oom set). README "Function calling" quotes it. */
char *srv_tools_prompt(const srv_tools *t, srv_tool_format f, bool list_tools, bool *oom);

/* An assistant message's tool_calls (srv_message.tool_calls) written as the
 * generic format, for templates that cannot render tool_calls; NULL when
 * out of memory. */
char *srv_tools_calls_text(const char *tool_calls_json);

/* A new call id: "call_" and 24 random letters and digits, or 9 of them
 * for the Mistral format (whose template refuses any other id). */
void srv_tools_new_id(srv_tool_format f, char out[SRV_TOOL_ID_MAX]);

/* The 9-letter-or-digit id the Mistral template accepts for any id: the
 * id itself when it already is one, else a hash of it (so a call and the
 * tool message answering it still agree). */
void srv_tools_mistral_id(const char *id, char out[10]);

/* The grammar tool_choice asks for, bound to model (NULL: bytes only):
 * "required" / named: the format's calls with arguments that follow the
 * schemas; "auto": free text that, once the model writes the format's call
 * marker (Hermes) or starts its answer with '{' (Llama 3, generic), must
 * go on as well-formed calls. *out is NULL when no grammar applies ("none";
 * "auto" with the Mistral format, whose marker is a control token a grammar
 * cannot produce, or with a schema the grammar compiler does not support).
 * A malformed schema, or an unsupported one that a forced call needs, is a
 * 400 naming tools[i].function.parameters. */
bool srv_tools_grammar(const nu_model *model, const srv_tools *t, srv_tool_format f,
                       nu_grammar **out, srv_error *err);

/* The GBNF behind srv_tools_grammar and its start rule (*root is static);
 * *gbnf is NULL when no grammar applies; release with nu_gbnf_free.
 * marker_is_text: the Hermes marker can be written as text (not one
 * control token of the vocabulary), so "auto" may use a grammar. */
bool srv_tools_gbnf(const srv_tools *t, srv_tool_format f, bool marker_is_text, char **gbnf,
                    const char **root, srv_error *err);

/* ---- parsing the answer -------------------------------------------------- */

typedef enum srv_tool_event_kind {
    SRV_TOOL_CONTENT,   /* text for the message content */
    SRV_TOOL_CALL,      /* a call begins: id and name */
    SRV_TOOL_ARGS,      /* a piece of the current call's arguments */
    SRV_TOOL_REASONING, /* thinking, split off before the content (reasoning.h) */
} srv_tool_event_kind;

typedef struct srv_tool_event {
    srv_tool_event_kind kind;
    int32_t index;    /* SRV_TOOL_CALL / ARGS: the call's place in the answer */
    const char *text; /* CONTENT / ARGS */
    size_t len;
    const char *id, *name; /* CALL */
} srv_tool_event;

/* Receives the parser's events; false stops it (out of memory). */
typedef bool (*srv_tool_emit)(void *user, const srv_tool_event *ev);

typedef struct srv_tool_parser srv_tool_parser;

/* A parser for one answer in t->format. When t->constrained, a call's
 * name and arguments are sent as soon as they are generated; otherwise a
 * call is sent once it is complete and checked (a malformed one stays
 * content). NULL when out of memory. t must outlive the parser. */
srv_tool_parser *srv_tool_parser_new(const srv_tools *t);
void srv_tool_parser_free(srv_tool_parser *p);

/* Takes the whole answer so far (each call passes the same text, grown;
 * done: it is final) and emits what became certain since the last call.
 * Content is the text outside calls, verbatim except that blanks next to a
 * call are dropped; text that may be the start of a call is held back.
 * Arguments are the call's JSON object without insignificant whitespace.
 * With parallel_tool_calls false, calls after the first are dropped.
 * False when emit failed or memory ran out. */
bool srv_tool_parser_feed(srv_tool_parser *p, const char *text, size_t len, bool done,
                          srv_tool_emit emit, void *user);

/* Calls emitted so far. */
int32_t srv_tool_parser_n_calls(const srv_tool_parser *p);

/* Checks a call read by another parser (harmony's): name is one of the
 * tools and args[0..len) one JSON object (blanks around it allowed), which
 * goes to *out without insignificant blanks (malloc'd, *out_len bytes).
 * False when it is no such call (*out NULL) or out of memory (*oom). */
bool srv_tools_check_call(const srv_tools *t, const char *name, const char *args, size_t len,
                          char **out, size_t *out_len, bool *oom);

/* A whole answer, parsed. */
typedef struct srv_tool_call {
    char id[SRV_TOOL_ID_MAX];
    char *name;
    char *arguments; /* a JSON object, as text */
} srv_tool_call;

typedef struct srv_tool_result {
    char *content; /* NUL-terminated, "" when there is none */
    size_t content_len;
    srv_tool_call *calls;
    int32_t n_calls;
} srv_tool_result;

/* Parses a finished answer; false when out of memory (out is then empty). */
bool srv_tools_parse(const srv_tools *t, const char *text, size_t len, srv_tool_result *out);
void srv_tool_result_free(srv_tool_result *r);

#endif
