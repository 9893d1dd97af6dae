/* responses.h - OpenAI's Responses API (the API of Codex and of newer
 * OpenAI SDK code):
 *
 *   POST   /v1/responses        a response, whole or streamed as events
 *   GET    /v1/responses/{id}   a stored response
 *   DELETE /v1/responses/{id}   forgets it
 *
 * `input` is a text or a list of items (messages, function_call,
 * function_call_output, reasoning); `instructions` become the system
 * message. The request is turned into the chat request /v1/chat/completions
 * runs, so sampling, tools, constraints (text.format) and thinking
 * (reasoning.effort) mean the same. The answer's output is a list of items:
 * the model's thinking as a reasoning item (its text in content, as
 * reasoning_text), the message (output_text) and the function calls. A
 * streamed answer is the API's events: response.created,
 * response.in_progress, response.output_item.added, content_part.added,
 * output_text.delta / reasoning_text.delta / function_call_arguments.delta,
 * their .done events, response.output_item.done and response.completed (or
 * response.incomplete, response.failed), each with its sequence_number.
 *
 * Responses are kept in memory unless store is false: the most recent
 * --max-responses of them and at most SRV_RESPONSES_MAX_BYTES in all (the
 * oldest are forgotten first). previous_response_id continues the
 * conversation a stored response ended (its input and output, without its
 * instructions, as the API defines). */
#ifndef NU_SRV_RESPONSES_H
#define NU_SRV_RESPONSES_H

#include <microhttpd.h>

#include "http.h"

#define SRV_RESPONSES_MAX_BYTES (64u << 20)

typedef struct srv_responses srv_responses;

/* A store of at most max responses (0: none is kept); NULL when out of memory. */
srv_responses *srv_responses_new(int32_t max);
void srv_responses_free(srv_responses *r);

/* Answers a request to one of the routes above. */
enum MHD_Result srv_responses_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                     const char *url);

#endif
