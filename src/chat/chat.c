/* chat.c - chat templates: the public nu_chat_* API over the Jinja engine
 * (jinja.h), the model's embedded template, and built-in templates for
 * files that have none.
 *
 * A render turns the caller's JSON (messages, tools, extra variables) into
 * the variables transformers passes to apply_chat_template: messages,
 * tools (None unless given), add_generation_prompt, bos_token and
 * eos_token (undefined unless given), plus any extra ones. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gguf.h"
#include "jinja.h"
#include "model.h"
#include "nucleus.h"

struct nu_chat_template {
    nu_jinja_template *tpl;
};

/* ------------------------------------------------------------------------ */
/* Built-in templates                                                       */
/* ------------------------------------------------------------------------ */

/* Every built-in starts with a macro that turns a message's content into
 * text: a string as is, or the "text" parts of a list of content parts
 * (the OpenAI multimodal form). */
#define CONTENT_MACRO                                                                              \
    "{%- macro text(c) %}{%- if c is string %}{{- c }}{%- elif c is iterable %}"                   \
    "{%- for p in c %}{%- if p is mapping and p.type == 'text' %}{{- p.text }}"                    \
    "{%- elif p is string %}{{- p }}{%- endif %}{%- endfor %}{%- endif %}{%- endmacro %}\n"

/* Splits off a leading system message (system / loop_messages). */
#define SPLIT_SYSTEM                                                                               \
    "{%- if messages and messages[0]['role'] == 'system' %}"                                       \
    "{%- set system = text(messages[0]['content']) %}{%- set loop_messages = messages[1:] %}"      \
    "{%- else %}{%- set system = none %}{%- set loop_messages = messages %}{%- endif %}\n"

static const char tpl_chatml[] = CONTENT_MACRO
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + text(message['content']) + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

static const char tpl_llama2[] = CONTENT_MACRO SPLIT_SYSTEM
    "{%- for message in loop_messages %}"
    "{%- set content = text(message['content']) %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if loop.first and system is not none %}"
    "{%- set content = '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + content %}{%- endif %}"
    "{{- (bos_token or '') + '[INST] ' + content | trim + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- ' ' + content | trim + ' ' + (eos_token or '') }}"
    "{%- endif %}"
    "{%- endfor %}";

static const char tpl_llama3[] = CONTENT_MACRO
    "{{- bos_token or '' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "text(message['content']) | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}";

static const char tpl_mistral[] = CONTENT_MACRO SPLIT_SYSTEM
    "{{- bos_token or '' }}"
    "{%- for message in loop_messages %}"
    "{%- set content = text(message['content']) %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if loop.first and system is not none %}{%- set content = system + '\\n\\n' + content %}"
    "{%- endif %}"
    "{{- '[INST] ' + content + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- ' ' + content + (eos_token or '') }}"
    "{%- endif %}"
    "{%- endfor %}";

static const char tpl_phi3[] = CONTENT_MACRO
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>\\n' + text(message['content']) + '<|end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}";

static const char tpl_gemma[] = CONTENT_MACRO SPLIT_SYSTEM
    "{{- bos_token or '' }}"
    "{%- for message in loop_messages %}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{%- set content = text(message['content']) | trim %}"
    "{%- if loop.first and system is not none %}{%- set content = system + '\\n\\n' + content %}"
    "{%- endif %}"
    "{{- '<start_of_turn>' + role + '\\n' + content + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}";

static const char tpl_zephyr[] = CONTENT_MACRO
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>\\n' + text(message['content']) + (eos_token or '') + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}";

static const char tpl_plain[] = CONTENT_MACRO
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}{{- text(message['content']) + '\\n\\n' }}"
    "{%- elif message['role'] == 'user' %}{{- 'User: ' + text(message['content']) + '\\n' }}"
    "{%- else %}{{- 'Assistant: ' + text(message['content']) + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %}";

static const struct {
    const char *name;
    const char *source;
} builtins[] = {
    {"chatml", tpl_chatml},   {"llama2", tpl_llama2}, {"llama3", tpl_llama3},
    {"mistral", tpl_mistral}, {"phi3", tpl_phi3},     {"gemma", tpl_gemma},
    {"zephyr", tpl_zephyr},   {"plain", tpl_plain},
};

#define N_BUILTINS (sizeof builtins / sizeof *builtins)

const char *const *nu_chat_template_builtin_names(void) {
    static const char *names[N_BUILTINS + 1];
    for (size_t i = 0; i < N_BUILTINS; i++) names[i] = builtins[i].name;
    names[N_BUILTINS] = NULL;
    return names;
}

nu_status nu_chat_template_builtin(const char *name, nu_chat_template **out, nu_error *err) {
    *out = NULL;
    for (size_t i = 0; name && i < N_BUILTINS; i++)
        if (!strcmp(builtins[i].name, name))
            return nu_chat_template_parse(builtins[i].source, strlen(builtins[i].source), out, err);
    return nu_fail(err, NU_ERR_INVALID_ARG,
                   "unknown chat template '%s' (built-in: chatml, llama2, llama3, mistral, phi3, "
                   "gemma, zephyr, plain)",
                   name ? name : "(null)");
}

/* ------------------------------------------------------------------------ */
/* Templates                                                                */
/* ------------------------------------------------------------------------ */

nu_status nu_chat_template_parse(const char *source, size_t len, nu_chat_template **out,
                                 nu_error *err) {
    *out = NULL;
    if (!source && len) return nu_fail(err, NU_ERR_INVALID_ARG, "no template source");
    nu_chat_template *t = calloc(1, sizeof *t);
    if (!t) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    nu_status st = nu_jinja_parse(source, len, &t->tpl, err);
    if (st != NU_OK) {
        free(t);
        return st;
    }
    *out = t;
    return NU_OK;
}

nu_status nu_chat_template_from_model(const nu_model *model, nu_chat_template **out,
                                      nu_error *err) {
    *out = NULL;
    nu_gguf_string s;
    if (!model || !model->file || !nu_gguf_get_str(model->file, "tokenizer.chat_template", &s))
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "the model has no chat template "
                       "(tokenizer.chat_template); choose a built-in one");
    return nu_chat_template_parse(s.data, (size_t)s.len, out, err);
}

/* Whether some token of the vocabulary is exactly this text. */
static bool has_token(const nu_model *model, const char *text) {
    int32_t n = nu_model_n_vocab(model);
    for (int32_t i = 0; i < n; i++) {
        const char *t = nu_token_text(model, i);
        if (t && !strcmp(t, text)) return true;
    }
    return false;
}

const char *nu_chat_template_guess_builtin(const nu_model *model) {
    if (!model || !nu_model_vocab(model)) return "plain";
    if (has_token(model, "<|im_start|>")) return "chatml";
    if (has_token(model, "<|start_header_id|>")) return "llama3";
    if (has_token(model, "<start_of_turn>")) return "gemma";
    if (has_token(model, "<|user|>")) return has_token(model, "<|end|>") ? "phi3" : "zephyr";
    if (has_token(model, "[INST]")) return "mistral";
    return "plain";
}

const char *nu_chat_template_source(const nu_chat_template *t, size_t *len) {
    if (len) *len = t ? nu_jinja_source_len(t->tpl) : 0;
    return t ? nu_jinja_source(t->tpl) : NULL;
}

void nu_chat_template_free(nu_chat_template *t) {
    if (!t) return;
    nu_jinja_free(t->tpl);
    free(t);
}

/* ------------------------------------------------------------------------ */
/* Rendering                                                                */
/* ------------------------------------------------------------------------ */

nu_chat_render_params nu_chat_render_default_params(void) {
    nu_chat_render_params p = {0};
    return p;
}

/* Parses a JSON text that must be of the given kind (cJSON_Array or
 * cJSON_Object); what names it in errors. */
static nu_status parse_json(const char *text, int kind, const char *what, cJSON **out,
                            nu_error *err) {
    *out = cJSON_ParseWithLength(text, strlen(text));
    if (!*out) return nu_fail(err, NU_ERR_INVALID_ARG, "%s is not valid JSON", what);
    if (((*out)->type & 0xFF) != kind) {
        cJSON_Delete(*out);
        *out = NULL;
        return nu_fail(err, NU_ERR_INVALID_ARG, "%s must be a JSON %s", what,
                       kind == cJSON_Array ? "array" : "object");
    }
    return NU_OK;
}

/* Adds (or replaces) a member of obj. */
static bool put(cJSON *obj, const char *name, cJSON *value) {
    if (!value) return false;
    if (cJSON_GetObjectItemCaseSensitive(obj, name))
        return cJSON_ReplaceItemInObjectCaseSensitive(obj, name, value);
    return cJSON_AddItemToObject(obj, name, value);
}

/* The render variables as one JSON object: extra ones first, then the
 * standard ones (which win). */
static nu_status build_vars(const nu_chat_render_params *p, cJSON **out, nu_error *err) {
    cJSON *vars = NULL, *messages = NULL, *tools = NULL;
    nu_status st = NU_OK;
    if (p->extra_json)
        st = parse_json(p->extra_json, cJSON_Object, "extra variables", &vars, err);
    else if (!(vars = cJSON_CreateObject()))
        st = nu_fail(err, NU_ERR_NOMEM, "out of memory");
    if (st == NU_OK) st = parse_json(p->messages_json, cJSON_Array, "messages", &messages, err);
    if (st == NU_OK && p->tools_json)
        st = parse_json(p->tools_json, cJSON_Array, "tools", &tools, err);
    if (st != NU_OK) {
        cJSON_Delete(vars);
        cJSON_Delete(messages);
        return st;
    }
    bool ok = put(vars, "messages", messages);
    if (!ok) cJSON_Delete(messages);
    ok = ok && put(vars, "tools", tools ? tools : cJSON_CreateNull());
    ok = ok && put(vars, "add_generation_prompt", cJSON_CreateBool(p->add_generation_prompt));
    if (ok && p->bos_token) ok = put(vars, "bos_token", cJSON_CreateString(p->bos_token));
    if (ok && p->eos_token) ok = put(vars, "eos_token", cJSON_CreateString(p->eos_token));
    if (!ok) {
        cJSON_Delete(vars);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    }
    *out = vars;
    return NU_OK;
}

nu_status nu_chat_render(const nu_chat_template *t, const nu_chat_render_params *params, char **out,
                         size_t *len, nu_error *err) {
    *out = NULL;
    if (len) *len = 0;
    if (!t || !params || !params->messages_json)
        return nu_fail(err, NU_ERR_INVALID_ARG, "chat render needs a template and messages");
    cJSON *vars = NULL;
    nu_status st = build_vars(params, &vars, err);
    if (st != NU_OK) return st;
    nu_jinja_limits limits = nu_jinja_default_limits();
    st = nu_jinja_render(t->tpl, vars, &limits, out, len, err);
    cJSON_Delete(vars);
    return st;
}
