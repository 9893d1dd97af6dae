/* cmd_template.c - `nucleus template`: renders a conversation with a chat
 * template (a model's own, a Jinja file or a built-in one) and prints the
 * prompt exactly, byte for byte, as the model would see it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"

typedef struct template_opts {
    const char *model, *file, *builtin, *messages, *bos, *eos;
    bool generation_prompt, list;
} template_opts;

static int run_template(int argc, char **argv);

static const cli_option template_options[] = {
    {.name = "--model",
     .short_name = "-m",
     .kind = CLI_STRING,
     .field = CLI_FIELD(template_opts, model),
     .placeholder = "REF",
     .help = "use the model's tokenizer.chat_template, and its BOS / EOS token texts unless given "
             "(with --template or --chat-template: only the token texts)"},
    {.name = "--template",
     .kind = CLI_STRING,
     .field = CLI_FIELD(template_opts, file),
     .placeholder = "FILE",
     .help = "a Jinja chat template file"},
    {.name = "--chat-template",
     .kind = CLI_STRING,
     .field = CLI_FIELD(template_opts, builtin),
     .placeholder = "NAME",
     .help = "a built-in template: chatml, llama2, llama3, mistral, phi3, gemma, zephyr, plain"},
    {.name = "--messages",
     .kind = CLI_STRING,
     .field = CLI_FIELD(template_opts, messages),
     .placeholder = "FILE",
     .help = "JSON: a list of messages, or an object with \"messages\", an optional \"tools\" "
             "list and any other template variables"},
    {.name = "--add-generation-prompt",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(template_opts, generation_prompt),
     .help = "end with the start of the assistant's turn"},
    {.name = "--bos-token",
     .kind = CLI_STRING,
     .field = CLI_FIELD(template_opts, bos),
     .placeholder = "S",
     .help = "the bos_token variable",
     .default_text = "undefined, or the model's"},
    {.name = "--eos-token",
     .kind = CLI_STRING,
     .field = CLI_FIELD(template_opts, eos),
     .placeholder = "S",
     .help = "the eos_token variable",
     .default_text = "undefined, or the model's"},
    {.name = "--list",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(template_opts, list),
     .help = "list the built-in templates"},
    {0},
};

static const cli_section template_sections[] = {
    CLI_OWN_SECTION(NULL, template_options),
    {0},
};

const cli_command template_command = {
    .name = "template",
    .summary = "render a conversation with a chat template",
    .usage = "nucleus template (-m MODEL | --template FILE | --chat-template NAME)\n"
             "                        --messages FILE [--add-generation-prompt]\n"
             "                        [--bos-token S] [--eos-token S]",
    .sections = template_sections,
    .run = run_template,
};

/* Reads the options; false when the command ends (*rc: help or an error). */
static bool parse(template_opts *o, int argc, char **argv, int *rc) {
    if (!cli_parse(&template_command, argc, argv, o, rc)) return false;
    *rc = CLI_EXIT_USAGE;
    if (o->list) return true;
    if (!o->model && !o->file && !o->builtin) {
        cli_error("give a template with -m MODEL, --template FILE or --chat-template NAME");
        return false;
    }
    if (o->file && o->builtin) {
        cli_error("--template and --chat-template cannot be used together");
        return false;
    }
    if (!o->messages) {
        cli_error("no conversation given (--messages FILE)");
        return false;
    }
    return true;
}

/* The conversation file's parts as JSON texts: messages, tools (NULL when
 * absent) and any other members as extra variables (NULL when none). */
typedef struct conversation {
    char *messages, *tools, *extra;
    bool generation_prompt;
} conversation;

static void conversation_free(conversation *c) {
    free(c->messages);
    free(c->tools);
    free(c->extra);
}

static bool read_conversation(const char *path, conversation *c) {
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) return false;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root || !(cJSON_IsArray(root) || cJSON_IsObject(root))) {
        cli_error("%s: not a JSON list of messages or an object with \"messages\"", path);
        cJSON_Delete(root);
        return false;
    }
    if (cJSON_IsArray(root)) {
        c->messages = cJSON_PrintUnformatted(root);
    } else {
        cJSON *messages = cJSON_DetachItemFromObjectCaseSensitive(root, "messages");
        cJSON *tools = cJSON_DetachItemFromObjectCaseSensitive(root, "tools");
        cJSON *gen = cJSON_DetachItemFromObjectCaseSensitive(root, "add_generation_prompt");
        c->generation_prompt = cJSON_IsTrue(gen);
        if (messages) c->messages = cJSON_PrintUnformatted(messages);
        if (tools && !cJSON_IsNull(tools)) c->tools = cJSON_PrintUnformatted(tools);
        if (root->child) c->extra = cJSON_PrintUnformatted(root);
        cJSON_Delete(messages);
        cJSON_Delete(tools);
        cJSON_Delete(gen);
    }
    cJSON_Delete(root);
    if (!c->messages) {
        cli_error("%s: no \"messages\" list", path);
        conversation_free(c);
        return false;
    }
    return true;
}

/* Loads the template the options name (the model's when only -m). */
static nu_chat_template *load_template(const template_opts *o, const nu_model *m) {
    nu_chat_template *t = NULL;
    nu_error err;
    nu_status st;
    if (o->file) {
        size_t len;
        char *src = cli_read_file(o->file, &len);
        if (!src) return NULL;
        st = nu_chat_template_parse(src, len, &t, &err);
        free(src);
    } else if (o->builtin) {
        st = nu_chat_template_builtin(o->builtin, &t, &err);
    } else {
        st = nu_chat_template_from_model(m, &t, &err);
        if (st == NU_ERR_UNSUPPORTED)
            cli_error("%s has no chat template; choose one with --chat-template (this vocabulary "
                      "suggests '%s')",
                      o->model, nu_chat_template_guess_builtin(m));
        if (st == NU_ERR_UNSUPPORTED) return NULL;
    }
    if (st != NU_OK) cli_error("%s", err.message);
    return t;
}

/* The text of a special token of the model, or NULL. */
static const char *token_text(const nu_model *m, int32_t id) {
    return m && id >= 0 ? nu_token_text(m, id) : NULL;
}

static void list_builtins(void) {
    for (const char *const *n = nu_chat_template_builtin_names(); *n; n++) printf("%s\n", *n);
}

static int run_template(int argc, char **argv) {
    template_opts o = {0};
    int rc;
    if (!parse(&o, argc, argv, &rc)) return rc;
    if (o.list) {
        list_builtins();
        return 0;
    }
    conversation c = {0};
    if (!read_conversation(o.messages, &c)) return 1;
    nu_model *m = o.model ? cli_load_model(o.model, NU_LOAD_VOCAB_ONLY) : NULL;
    nu_chat_template *t = (!o.model || m) ? load_template(&o, m) : NULL;
    rc = 1;
    if (t) {
        nu_chat_render_params p = nu_chat_render_default_params();
        p.messages_json = c.messages;
        p.tools_json = c.tools;
        p.extra_json = c.extra;
        p.add_generation_prompt = o.generation_prompt || c.generation_prompt;
        p.bos_token = o.bos ? o.bos : token_text(m, m ? nu_token_bos(m) : -1);
        p.eos_token = o.eos ? o.eos : token_text(m, m ? nu_token_eos(m) : -1);
        char *out;
        size_t len;
        nu_error err;
        if (nu_chat_render(t, &p, &out, &len, &err) == NU_OK) {
            rc = fwrite(out, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : 1;
            if (rc) cli_error("could not write the output");
            nu_free(out);
        } else {
            cli_error("%s", err.message);
        }
    }
    nu_chat_template_free(t);
    nu_model_free(m);
    conversation_free(&c);
    return rc;
}
