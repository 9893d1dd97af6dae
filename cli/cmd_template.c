/* cmd_template.c - `nucleus template`: renders a conversation with a chat
 * template (a model's own, a Jinja file or a built-in one) and prints the
 * prompt exactly, byte for byte, as the model would see it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"

static const char template_help[] =
    "usage: nucleus template (-m MODEL | --template FILE | --chat-template NAME)\n"
    "                        --messages FILE [--add-generation-prompt]\n"
    "                        [--bos-token S] [--eos-token S]\n\n"
    "  -m, --model REF          use the model's tokenizer.chat_template, and its BOS / EOS\n"
    "                           token texts unless given (with --template or --chat-template:\n"
    "                           only the token texts)\n"
    "      --template FILE      a Jinja chat template file\n"
    "      --chat-template NAME a built-in template: chatml, llama2, llama3, mistral, phi3,\n"
    "                           gemma, zephyr, plain\n"
    "      --messages FILE      JSON: a list of messages, or an object with \"messages\", an\n"
    "                           optional \"tools\" list and any other template variables\n"
    "      --add-generation-prompt  end with the start of the assistant's turn\n"
    "      --bos-token S        the bos_token variable (default: undefined, or the model's)\n"
    "      --eos-token S        the eos_token variable (default: undefined, or the model's)\n"
    "      --list               list the built-in templates\n";

typedef struct template_opts {
    const char *model, *file, *builtin, *messages, *bos, *eos;
    bool generation_prompt, list;
} template_opts;

static int parse(template_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(template_help, stdout);
            return -1;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_value) {
            o->model = argv[++i];
        } else if (!strcmp(a, "--template") && has_value) {
            o->file = argv[++i];
        } else if (!strcmp(a, "--chat-template") && has_value) {
            o->builtin = argv[++i];
        } else if (!strcmp(a, "--messages") && has_value) {
            o->messages = argv[++i];
        } else if (!strcmp(a, "--bos-token") && has_value) {
            o->bos = argv[++i];
        } else if (!strcmp(a, "--eos-token") && has_value) {
            o->eos = argv[++i];
        } else if (!strcmp(a, "--add-generation-prompt")) {
            o->generation_prompt = true;
        } else if (!strcmp(a, "--list")) {
            o->list = true;
        } else {
            cli_error("unknown or incomplete option '%s' (see nucleus template --help)", a);
            return 2;
        }
    }
    if (o->list) return 0;
    if (!o->model && !o->file && !o->builtin) {
        cli_error("give a template with -m MODEL, --template FILE or --chat-template NAME");
        return 2;
    }
    if (o->file && o->builtin) {
        cli_error("--template and --chat-template cannot be used together");
        return 2;
    }
    if (!o->messages) {
        cli_error("no conversation given (--messages FILE)");
        return 2;
    }
    return 0;
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

int cmd_template(int argc, char **argv) {
    template_opts o = {0};
    int rc = parse(&o, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
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
