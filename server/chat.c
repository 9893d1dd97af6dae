/* chat.c - rendering chat messages with the chat-template API. */
#include "chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a whole file (NUL-terminated, malloc'd) or returns NULL. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    bool ok = !ferror(f) && buf;
    fclose(f);
    if (!ok) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Whether name is one of the built-in templates. */
static bool is_builtin(const char *name) {
    for (const char *const *b = nu_chat_template_builtin_names(); *b; b++)
        if (!strcmp(*b, name)) return true;
    return false;
}

static bool load_template(srv_chat *c, const nu_model *m, const char *override, char *msg,
                          size_t cap) {
    nu_error err;
    nu_status st;
    if (override && is_builtin(override)) {
        st = nu_chat_template_builtin(override, &c->tpl, &err);
        snprintf(c->name, sizeof c->name, "%s", override);
    } else if (override) {
        size_t len;
        char *src = read_file(override, &len);
        if (!src) {
            snprintf(msg, cap,
                     "--chat-template '%s' is neither a built-in template nor a "
                     "readable file",
                     override);
            return false;
        }
        st = nu_chat_template_parse(src, len, &c->tpl, &err);
        free(src);
        snprintf(c->name, sizeof c->name, "file");
    } else {
        st = nu_chat_template_from_model(m, &c->tpl, &err);
        snprintf(c->name, sizeof c->name, "model");
        if (st == NU_ERR_UNSUPPORTED) {
            const char *guess = nu_chat_template_guess_builtin(m);
            st = nu_chat_template_builtin(guess, &c->tpl, &err);
            snprintf(c->name, sizeof c->name, "%s", guess);
        }
    }
    if (st != NU_OK) snprintf(msg, cap, "chat template: %s", err.message);
    return st == NU_OK;
}

/* The single special token spelled by text, or -1. */
static int32_t special_token(const nu_model *m, const char *text) {
    int32_t toks[4];
    size_t n = 0;
    nu_error err;
    if (nu_tokenize(m, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL, toks, 4, &n, &err) != NU_OK ||
        n != 1)
        return -1;
    nu_token_type t = nu_token_get_type(m, toks[0]);
    return t == NU_TOKEN_CONTROL || t == NU_TOKEN_USER_DEFINED ? toks[0] : -1;
}

/* End-of-turn tokens of the common chat formats that the vocabulary has. */
static void find_stop_tokens(srv_chat *c, const nu_model *m) {
    static const char *const ends[] = {
        "<|im_end|>",    "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|END_OF_TURN_TOKEN|>",
        "<|endoftext|>", "</s>",       NULL};
    for (const char *const *e = ends; *e && c->n_stop_tokens < SRV_CHAT_MAX_STOP_TOKENS; e++) {
        int32_t t = special_token(m, *e);
        if (t >= 0) c->stop_tokens[c->n_stop_tokens++] = t;
    }
}

bool srv_chat_init(srv_chat *c, const nu_model *m, const char *override, char *msg, size_t cap) {
    memset(c, 0, sizeof *c);
    if (!load_template(c, m, override, msg, cap)) return false;
    int32_t bos = nu_token_bos(m), eos = nu_token_eos(m);
    c->bos_text = bos >= 0 ? nu_token_text(m, bos) : NULL;
    c->eos_text = eos >= 0 ? nu_token_text(m, eos) : NULL;
    find_stop_tokens(c, m);
    /* the plain format has no end-of-turn token: the next "User:" line ends the turn */
    if (!strcmp(c->name, "plain")) c->stop_string = "\nUser:";
    return true;
}

void srv_chat_free(srv_chat *c) {
    nu_chat_template_free(c->tpl);
    c->tpl = NULL;
}

/* The messages as the JSON array the template reads. */
static char *messages_json(const srv_message *msgs, int32_t n) {
    cJSON *arr = cJSON_CreateArray();
    for (int32_t i = 0; arr && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddStringToObject(o, "role", msgs[i].role) ||
            !cJSON_AddStringToObject(o, "content", msgs[i].content)) {
            cJSON_Delete(o);
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToArray(arr, o);
    }
    char *s = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    return s;
}

char *srv_chat_render(const srv_chat *c, const srv_message *msgs, int32_t n, srv_error *err) {
    char *json = messages_json(msgs, n);
    if (!json) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    nu_chat_render_params p = nu_chat_render_default_params();
    p.messages_json = json;
    p.add_generation_prompt = true;
    p.bos_token = c->bos_text;
    p.eos_token = c->eos_text;
    char *out = NULL;
    nu_error e;
    nu_status st = nu_chat_render(c->tpl, &p, &out, NULL, &e);
    cJSON_free(json);
    if (st == NU_OK) return out;
    if (st == NU_ERR_NOMEM)
        srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    else
        srv_fail(err, 400, "invalid_request_error", NULL, "messages",
                 "the chat template "
                 "cannot render these messages: %s",
                 e.message);
    return NULL;
}
