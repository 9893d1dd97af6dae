/* openai_resp.h - the JSON the server answers with, in the shapes of the
 * OpenAI API: errors, chat completions, text completions, their streamed
 * chunks and usage. Every string is made valid UTF-8 on the way out. */
#ifndef NU_SRV_OPENAI_RESP_H
#define NU_SRV_OPENAI_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "nucleus.h"
#include "openai_params.h"
#include "reasoning.h"
#include "tools.h"

/* What every response of one request shares. */
typedef struct srv_resp_ctx {
    const nu_model *model;
    const char *model_id;
    srv_kind kind;
    char id[48];       /* "chatcmpl-..." or "cmpl-..." */
    long long created; /* Unix seconds */
} srv_resp_ctx;

void srv_resp_ctx_init(srv_resp_ctx *rc, const nu_model *m, const char *model_id, srv_kind kind);

/* A cJSON string item holding n bytes of s as they are, made valid UTF-8
 * (NUL bytes kept as \u0000, which a cJSON string cannot hold), or NULL
 * when out of memory. */
struct cJSON;
struct cJSON *srv_text_json(const char *s, size_t n);

/* {"error": {"message", "type", "param", "code"}} (malloc'd; NULL when out of memory). */
char *srv_error_json(const srv_error *err);

/* OpenAI's finish_reason for a finished sample ("stop", "length"). */
const char *srv_finish_name(nu_finish_reason r);
/* The same for an answer that made n_calls tool calls under the request's
 * tools t: "tool_calls" when it ended by itself with calls, except for a
 * named tool_choice, where OpenAI answers "stop" (streamed or not). */
const char *srv_finish_name_calls(nu_finish_reason r, int32_t n_calls, const srv_tools *t);

/* The results shown, in order: per prompt, the n best of best_of samples
 * by total log-prob (or all of them). Writes job->n_prompts * n indices. */
int32_t srv_pick_results(const srv_job *job, int32_t *picked);

/* Prompt and generated token totals of a finished job. */
void srv_job_usage(const srv_job *job, int64_t *prompt, int64_t *completion);

/* The whole response of a finished job (non-streaming). */
char *srv_response_json(const srv_resp_ctx *rc, const srv_job *job);

/* One streamed chunk for choice `index`: a text piece with its log-prob
 * entries, and/or a finish reason; role adds the chat delta's role. */
typedef struct srv_chunk {
    int32_t index;
    const char *text;
    size_t len;
    const nu_token_logprob *lps;
    int32_t n_lps;
    const char *finish; /* NULL while generating */
    bool role;
    const srv_tool_event *tool; /* a tool_calls delta instead of text, or NULL */
    bool null_content;          /* "content": null (the first delta of an answer with tools) */
    bool reasoning;             /* text is thinking: a reasoning_content delta */
} srv_chunk;

char *srv_chunk_json(const srv_resp_ctx *rc, const srv_job *job, const srv_chunk *chunk);
/* The last chunk when stream_options.include_usage is set: no choices, usage. */
char *srv_usage_chunk_json(const srv_resp_ctx *rc, const srv_job *job);

/* How many of a result's log-prob entries belong to its text: entries of a
 * stop string that was cut away are dropped. */
int32_t srv_logprobs_in_text(const nu_token_logprob *lps, int32_t n, size_t text_len,
                             nu_finish_reason finish);

#endif
