/* anthropic.h - Anthropic's Messages API: POST /v1/messages and
 * POST /v1/messages/count_tokens.
 *
 * A request is translated into the chat-completions request it means
 * (system, messages with their text, tool_use, tool_result and thinking
 * blocks, max_tokens, temperature, top_p, top_k, stop_sequences, tools,
 * tool_choice, thinking) and checked by the one request parser
 * (openai_params.c), so both APIs accept and refuse the same things; errors
 * name Anthropic's fields. The answer is the same generation, split by
 * reasoning.h, written as a message with thinking, text and tool_use blocks,
 * or streamed as Anthropic's events (message_start, content_block_start /
 * delta / stop, message_delta, message_stop). Errors have Anthropic's shape
 * {"type": "error", "error": {"type", "message"}}. */
#ifndef NU_SRV_ANTHROPIC_H
#define NU_SRV_ANTHROPIC_H

#include <stdbool.h>
#include <stddef.h>

#include "http.h"
#include "openai_params.h"

/* POST /v1/messages and POST /v1/messages/count_tokens (by cs->route). */
enum MHD_Result srv_anthropic_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs);

/* The chat-completions request body (malloc'd JSON) an Anthropic Messages
 * body means; count_tokens: the body of /v1/messages/count_tokens (no
 * max_tokens, nothing about sampling). NULL with err filled (400) when the
 * body is malformed. */
char *srv_anthropic_translate(const char *body, size_t len, bool count_tokens, srv_error *err);

/* An error from the shared request parser, with Anthropic's field names
 * (stop_sequences for stop, tools[i].input_schema for ...parameters); a
 * prompt longer than the context is a 400, as Anthropic answers it. */
void srv_anthropic_rename_error(srv_error *err);

/* {"type": "error", "error": {"type", "message"}} (malloc'd). */
char *srv_anthropic_error_json(const srv_error *err);

#endif
