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

#define SRV_CHAT_MAX_STOP_TOKENS 8

typedef struct srv_chat {
    nu_chat_template *tpl;
    char name[64];        /* "model", a built-in name or "file" (for the start-up line) */
    const char *bos_text; /* the model's BOS / EOS token text, or NULL */
    const char *eos_text;
    int32_t stop_tokens[SRV_CHAT_MAX_STOP_TOKENS]; /* end-of-turn tokens of the format */
    int32_t n_stop_tokens;
    const char *stop_string; /* an extra stop string (the plain format's "\nUser:"), or NULL */
} srv_chat;

/* Picks the template: override is a built-in NAME or a FILE with Jinja
 * source; NULL means the model's own, else the built-in format its
 * vocabulary suggests. Writes a message and returns false on failure. */
bool srv_chat_init(srv_chat *c, const nu_model *m, const char *override, char *msg, size_t cap);
void srv_chat_free(srv_chat *c);

/* The prompt for messages followed by the assistant's turn (malloc'd), or
 * NULL with err filled (400 when the template refuses the conversation). */
char *srv_chat_render(const srv_chat *c, const srv_message *msgs, int32_t n, srv_error *err);

#endif
