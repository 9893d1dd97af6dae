/* chat.h - chat messages to a prompt: the model's chat template (or a
 * built-in one, or one given with --chat-template) and the tokens that end
 * an assistant turn. */
#ifndef NU_SRV_CHAT_H
#define NU_SRV_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"
#include "openai_params.h"
#include "reasoning.h"
#include "tools.h"

#define SRV_CHAT_MAX_STOP_TOKENS 8

typedef struct srv_chat {
    nu_chat_template *tpl;
    char name[64];        /* "model", a built-in name or "file" (for the start-up line) */
    const char *bos_text; /* the model's BOS / EOS token text, or NULL */
    const char *eos_text;
    int32_t stop_tokens[SRV_CHAT_MAX_STOP_TOKENS]; /* end-of-turn tokens of the format */
    int32_t n_stop_tokens;
    const char *stop_string; /* an extra stop string (the plain format's "\nUser:"), or NULL */
    /* Function calling, found by rendering probe conversations at start-up: */
    bool reads_tools;            /* the template shows `tools` (else a system message does) */
    bool reads_tool_calls;       /* it shows assistant tool_calls and tool results (else they
                                    are written as text: see srv_chat_render) */
    srv_tool_format tool_format; /* the call syntax its model writes */
    srv_think think;             /* what it does with thinking (reasoning.h) */
} srv_chat;

/* Picks the template: override is a built-in NAME or a FILE with Jinja
 * source; NULL means the model's own, else the built-in format its
 * vocabulary suggests. Writes a message and returns false on failure. */
bool srv_chat_init(srv_chat *c, const nu_model *m, const char *override, char *msg, size_t cap);
void srv_chat_free(srv_chat *c);

/* The prompt for messages followed by the assistant's turn (malloc'd), or
 * NULL with err filled (400 when the template refuses the conversation).
 * tools (may be NULL) go to the template as `tools`; for a template that
 * does not show them, a system message describes them (srv_tools_prompt),
 * or the first user message when the template refuses system messages.
 * For a template that cannot show tool_calls, an assistant message's calls
 * become its text in the generic format and tool results become user
 * messages "Result of NAME (call ID):\nCONTENT" (consecutive ones joined).
 * An assistant message's thinking goes to the template in the field it
 * reads (reasoning_content), or nowhere: templates drop earlier thinking
 * themselves. vars (a JSON object as text, or NULL) are more template
 * variables (srv_think_template_vars). */
char *srv_chat_render(const srv_chat *c, const srv_message *msgs, int32_t n, const srv_tools *tools,
                      const char *vars, srv_error *err);

#endif
