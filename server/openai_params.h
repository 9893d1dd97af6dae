/* openai_params.h - an OpenAI request body (JSON) to generation parameters.
 *
 * This is the one place that reads request fields. It checks every field's
 * type and range the way the OpenAI API reference defines them (values out
 * of range are refused, never clamped), refuses fields it does not know,
 * and turns the rest into nucleus parameters. It depends on the types of
 * include/nucleus.h only, not on the library or the HTTP layer, so it can be
 * fuzzed alone (fuzz/fuzz_request.c). */
#ifndef NU_SRV_OPENAI_PARAMS_H
#define NU_SRV_OPENAI_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"

typedef enum srv_kind { SRV_CHAT = 0, SRV_COMPLETION = 1 } srv_kind;

/* One chat message; content is the text (text parts joined). */
typedef struct srv_message {
    char *role; /* "system", "user", "assistant" or "tool" ("developer" becomes "system") */
    char *content;
    char *name;         /* the message's "name", or NULL */
    char *tool_calls;   /* assistant: [{id, type, function: {name, arguments}}] (JSON), or NULL */
    char *tool_call_id; /* tool: the id of the call this message answers, or NULL */
    char *reasoning;    /* assistant: its thinking (reasoning_content), or NULL */
} srv_message;

/* Function calling (chat only): the request's tools, tool_choice and
 * parallel_tool_calls. server/tools.h turns them into prompts, grammars and
 * parsed calls. */
typedef enum srv_tool_choice {
    SRV_TOOLS_NONE = 0, /* no tools, or tool_choice "none": tools are shown, the answer is text */
    SRV_TOOLS_AUTO,     /* the model may call tools (the default when tools are given) */
    SRV_TOOLS_REQUIRED, /* it must call one or more */
    SRV_TOOLS_NAMED,    /* it must call list[named] */
} srv_tool_choice;

typedef struct srv_tool {
    char *name;
    char *parameters; /* the arguments' JSON Schema (JSON text), or NULL: no arguments */
} srv_tool;

typedef struct srv_tools {
    char *json; /* the tools array (JSON text) for the chat template, or NULL */
    srv_tool *list;
    int32_t n;
    srv_tool_choice choice;
    int32_t named; /* SRV_TOOLS_NAMED: the index of the function */
    bool parallel; /* parallel_tool_calls: more than one call per answer */
    /* Set by the server when it accepts the request: */
    int format;       /* the chat template's call syntax (srv_tool_format, tools.h) */
    bool constrained; /* a grammar guarantees well-formed calls (their arguments stream as made) */
} srv_tools;

/* Reasoning (chat only): what the request asks of a reasoning model's
 * thinking. server/reasoning.h maps it onto the chat template. */
#define SRV_THINK_MARKER_MAX 32 /* bytes of a thinking marker with its NUL */

/* How an answer's thinking is split off (set by the server when it accepts
 * the request). */
typedef struct srv_think_split {
    bool on;            /* the answer may hold thinking */
    bool starts_inside; /* the prompt opened the block: the answer starts in it */
    bool harmony;       /* gpt-oss's messages (reasoning.h), not a block in markers */
    char open[SRV_THINK_MARKER_MAX], close[SRV_THINK_MARKER_MAX];
} srv_think_split;

typedef struct srv_reasoning {
    char *kwargs;       /* chat_template_kwargs: a JSON object as text, or NULL */
    char *effort;       /* reasoning_effort: none, minimal, low, medium or high; or NULL */
    int32_t max_tokens; /* max_thinking_tokens (nucleus extension), -1 when not given */
    srv_think_split split;
} srv_reasoning;

/* One completions prompt: text, or token ids when text is NULL. */
typedef struct srv_prompt {
    char *text;
    int32_t *tokens;
    int32_t n_tokens;
} srv_prompt;

typedef enum srv_format {
    SRV_FORMAT_TEXT = 0,
    SRV_FORMAT_JSON_OBJECT,
    SRV_FORMAT_JSON_SCHEMA,
} srv_format;

/* What the server allows; requests beyond these are refused. */
typedef struct srv_limits {
    int32_t n_vocab;        /* token ids must be below this */
    int32_t max_n;          /* most samples per prompt (n, best_of) */
    int32_t max_tokens;     /* largest max_tokens accepted */
    int32_t max_prompts;    /* most prompts in one completions request */
    int32_t max_beam_width; /* widest beam search */
    int32_t max_draft;      /* largest draft_max a request may ask for (0: no speculation) */
} srv_limits;

/* Where generation parameters start before the request changes them. */
typedef struct srv_defaults {
    nu_generate_params gen;
    nu_beam_params beam;
} srv_defaults;

/* An error in the shape of the OpenAI API. */
typedef struct srv_error {
    int status;       /* HTTP status */
    const char *type; /* "invalid_request_error", ... */
    const char *code; /* a machine-readable code, or NULL */
    char param[64];   /* the offending field ("" when none) */
    char message[512];
} srv_error;

/* A request, checked. Strings and arrays are owned (srv_request_free). */
typedef struct srv_request {
    srv_kind kind;
    char *model; /* the model field, or NULL */
    srv_message *messages;
    int32_t n_messages;
    srv_prompt *prompts;
    int32_t n_prompts;
    /* Sampling, n, stop strings, log-probs, echo and parse_special; n_predict
     * is -1 when no max_tokens was given (the server picks the limit). */
    nu_generate_params gen;
    char **stop;               /* gen.stop points here */
    nu_logit_bias *logit_bias; /* gen.sampling.logit_bias points here */
    bool seed_given;
    bool stream, include_usage;
    bool logprobs;              /* log-probs were asked for */
    int32_t best_of;            /* samples drawn per prompt; the best n are returned */
    bool beam;                  /* beam search (beam_width given) */
    nu_beam_params beam_params; /* n_predict left to the server */
    srv_format format;
    char *json_schema;      /* the schema as JSON text (SRV_FORMAT_JSON_SCHEMA) */
    char *grammar, *regex;  /* constraint extensions, or NULL */
    char *watermark_key;    /* gen.sampling.watermark.key points here (NULL: no watermark) */
    char **dry_breakers;    /* gen.sampling.dry_sequence_breakers, when given */
    char **banned;          /* gen.sampling.banned_strings */
    nu_token_seq *ban_seqs; /* gen.sampling.banned_tokens; their ids in ban_ids */
    int32_t *ban_ids;
    char **choices;
    int32_t n_choices;
    srv_tools tools;
    srv_reasoning reasoning;
    int32_t n_ctx; /* a context smaller than the slot's for this request (Ollama's
                      num_ctx), or 0 */
} srv_request;

/* Parses and checks a request body for a chat (SRV_CHAT) or completions
 * endpoint. On failure fills err (status 400) and returns false; out is then
 * empty (nothing to free). */
bool srv_parse_request(const char *body, size_t len, srv_kind kind, const srv_limits *lim,
                       const srv_defaults *defaults, srv_request *out, srv_error *err);

void srv_request_free(srv_request *r);

/* Whether name is one of nucleus's own request fields (top_k, min_p,
 * grammar, the samplers, seed, chat_template_kwargs, max_thinking_tokens):
 * Anthropic's Messages API passes them on as they are. */
bool srv_is_extension_field(const char *name);

/* The watermark fields of obj, a cJSON object: "key" (required; a non-empty
 * string, or an integer that stands for its decimal text), "gamma" (0..1
 * exclusive), "delta" (0..100) and "context" (1..8), into p (whose values
 * stay where a field is absent). *key gets the malloc'd key p->key points to.
 * Errors name the field with prefix before it ("watermark." in requests). */
struct cJSON;
bool srv_parse_watermark(const struct cJSON *obj, const char *prefix, nu_watermark_params *p,
                         char **key, srv_error *err);

/* Fills err; returns false so callers can `return srv_fail(...)`. */
bool srv_fail(srv_error *err, int status, const char *type, const char *code, const char *param,
              const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
