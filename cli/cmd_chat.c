/* cmd_chat.c - `nucleus chat`: a terminal conversation with a model.
 *
 * Each turn renders the whole conversation with the model's chat template
 * and generates the reply; the context keeps the earlier turns' keys and
 * values, so only what is new is read again (nu_generate reuses the cached
 * prefix it shares with the new prompt). Replies stream as they come and end
 * at the model's end-of-turn tokens; Ctrl-C stops a reply without leaving.
 * On a terminal, lines are edited with libedit (history included). */
#include <cjson/cJSON.h>
#include <editline/readline.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_options.h"

static const char chat_help[] =
    "usage: nucleus chat [-m MODEL] [--system TEXT] [--chat-template NAME|FILE] [options]\n\n"
    "  --system TEXT          the system message\n"
    "  --chat-template T      a built-in template name (chatml, llama2, llama3, mistral, phi3,\n"
    "                         gemma, zephyr, plain) or a Jinja file; default: the model's own\n"
    "  -n, --n-predict N      most tokens per reply (default 256)\n"
    "  --quiet                no statistics after each reply\n\n"
    "commands: /reset  /system TEXT  /save FILE  /load FILE  /help  /exit\n\n";

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct chat_state {
    cli_run_opts run;
    const char *template_name, *system;
    long n_predict;
    bool quiet, tty;
    nu_model *model;
    nu_context *ctx;
    nu_chat_template *tpl;
    bool plain;          /* the "plain" template: stop when the model starts the next turn */
    cJSON *messages;     /* the conversation */
} chat_state;

static bool write_reply(void *user, int32_t index, const char *text, size_t len) {
    (void)user, (void)index;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return !interrupted;
}

static void add_message(chat_state *c, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(c->messages, m);
}

/* Starts the conversation over, with the system message if there is one. */
static void reset(chat_state *c) {
    cJSON_Delete(c->messages);
    c->messages = cJSON_CreateArray();
    if (c->system && *c->system) add_message(c, "system", c->system);
}

/* The template: a file, a built-in name, the model's own, or a guess. */
static int load_template(chat_state *c) {
    nu_error err;
    nu_status st;
    const char *name = c->template_name;
    if (name && access(name, R_OK) == 0) {
        size_t len;
        char *src = cli_read_file(name, &len);
        if (!src) return 1;
        st = nu_chat_template_parse(src, len, &c->tpl, &err);
        free(src);
    } else if (name) {
        st = nu_chat_template_builtin(name, &c->tpl, &err);
        c->plain = strcmp(name, "plain") == 0;
    } else if (nu_chat_template_from_model(c->model, &c->tpl, &err) != NU_OK) {
        name = nu_chat_template_guess_builtin(c->model);
        fprintf(stderr, "nucleus: the model has no chat template; using the built-in '%s'\n", name);
        st = nu_chat_template_builtin(name, &c->tpl, &err);
        c->plain = strcmp(name, "plain") == 0;
    } else {
        st = NU_OK;
    }
    if (st != NU_OK) cli_error("%s", err.message);
    return st != NU_OK;
}

static char *render(chat_state *c) {
    char *json = cJSON_PrintUnformatted(c->messages), *out = NULL, bos[256] = "", eos[256] = "";
    int32_t b = nu_token_bos(c->model), e = nu_token_eos(c->model);
    if (b >= 0) bos[nu_token_to_bytes(c->model, b, true, bos, sizeof bos - 1)] = 0;
    if (e >= 0) eos[nu_token_to_bytes(c->model, e, true, eos, sizeof eos - 1)] = 0;
    nu_chat_render_params p = nu_chat_render_default_params();
    p.messages_json = json;
    p.add_generation_prompt = true;
    p.bos_token = b >= 0 ? bos : NULL;
    p.eos_token = e >= 0 ? eos : NULL;
    nu_error err;
    if (nu_chat_render(c->tpl, &p, &out, NULL, &err) != NU_OK) cli_error("%s", err.message);
    free(json);
    return out;
}

/* One reply: renders, generates (streaming), appends it to the conversation. */
static void reply(chat_state *c) {
    char *prompt = render(c);
    if (!prompt) return;
    nu_generate_params p = nu_generate_default_params();
    p.sampling = c->run.sampling;
    p.n_predict = (int32_t)c->n_predict;
    p.parse_special = true;
    /* the template writes the BOS itself when the model wants one */
    char bos[256] = "";
    int32_t b = nu_token_bos(c->model);
    if (b >= 0) bos[nu_token_to_bytes(c->model, b, true, bos, sizeof bos - 1)] = 0;
    p.add_bos = !(bos[0] && strncmp(prompt, bos, strlen(bos)) == 0);
    const char *stops[] = {"\nUser:"};
    if (c->plain) p.stop = stops, p.n_stop = 1;
    p.on_text = write_reply;
    interrupted = 0;
    nu_generate_result r;
    nu_error err;
    if (nu_generate(c->ctx, prompt, &p, &r, &err) != NU_OK) {
        cli_error("%s", err.message);
    } else {
        putchar('\n');
        if (!c->quiet)
            fprintf(stderr, "[%d prompt tokens, %d reused from the cache | %d tokens, %.1f tok/s%s]\n",
                    r.n_prompt, r.n_cached, r.n_generated,
                    r.generate_ms > 0 ? r.n_generated / (r.generate_ms / 1e3) : 0.0,
                    r.finish == NU_FINISH_CANCELLED ? " | stopped" : "");
        add_message(c, "assistant", r.text);
        nu_generate_result_free(&r);
    }
    free(prompt);
}

static void save(chat_state *c, const char *path) {
    char *json = cJSON_Print(c->messages);
    FILE *f = fopen(path, "w");
    if (!f || !json || fputs(json, f) < 0) cli_error("cannot write %s", path);
    else printf("saved %d messages to %s\n", cJSON_GetArraySize(c->messages), path);
    if (f) fclose(f);
    free(json);
}

/* Loads a conversation: a JSON array of {role, content} objects. */
static void load(chat_state *c, const char *path) {
    char *text = cli_read_file(path, NULL);
    if (!text) return;
    cJSON *m = cJSON_Parse(text);
    free(text);
    bool ok = cJSON_IsArray(m);
    const cJSON *it;
    cJSON_ArrayForEach(it, m) ok = ok && cJSON_IsString(cJSON_GetObjectItem(it, "role")) &&
                                   cJSON_IsString(cJSON_GetObjectItem(it, "content"));
    if (!ok) {
        cli_error("%s is not a list of {\"role\", \"content\"} messages", path);
        cJSON_Delete(m);
        return;
    }
    cJSON_Delete(c->messages);
    c->messages = m;
    printf("loaded %d messages from %s\n", cJSON_GetArraySize(m), path);
}

/* Runs a /command; returns false for /exit. */
static bool command(chat_state *c, char *line) {
    char *arg = strchr(line, ' ');
    if (arg) *arg++ = 0;
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) return false;
    if (!strcmp(line, "/reset")) {
        reset(c);
        puts("conversation cleared");
    } else if (!strcmp(line, "/system") && arg) {
        c->system = NULL;
        reset(c);
        add_message(c, "system", arg);
        puts("system message set; conversation cleared");
    } else if (!strcmp(line, "/save") && arg) {
        save(c, arg);
    } else if (!strcmp(line, "/load") && arg) {
        load(c, arg);
    } else {
        fputs("commands: /reset  /system TEXT  /save FILE  /load FILE  /exit\n", stdout);
    }
    return true;
}

/* A line from the terminal (libedit) or from a pipe; NULL at the end. */
static char *read_line(const chat_state *c) {
    if (c->tty) {
        char *l = readline("> ");
        if (l && *l) add_history(l);
        return l;
    }
    char *l = NULL;
    size_t cap = 0;
    ssize_t n = getline(&l, &cap, stdin);
    if (n < 0) {
        free(l);
        return NULL;
    }
    if (n > 0 && l[n - 1] == '\n') l[n - 1] = 0;
    return l;
}

static int parse(chat_state *c, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_run_opt(&c->run, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        bool v = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s", chat_help, cli_run_opts_help);
            return -1;
        } else if (!strcmp(a, "--system") && v) {
            c->system = argv[++i];
        } else if (!strcmp(a, "--chat-template") && v) {
            c->template_name = argv[++i];
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict")) && v) {
            if (!cli_parse_int(a, argv[++i], 1, 1 << 20, &c->n_predict)) return 2;
        } else if (!strcmp(a, "--quiet")) {
            c->quiet = true;
        } else {
            cli_error("unknown or incomplete option '%s' (see nucleus chat --help)", a);
            return 2;
        }
    }
    return 0;
}

int cmd_chat(int argc, char **argv) {
    chat_state c = {.n_predict = 256, .tty = isatty(0) && isatty(1)};
    cli_run_opts_init(&c.run);
    int rc = parse(&c, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = cli_open(&c.run, &c.model, &c.ctx))) return rc;
    if ((rc = load_template(&c)) == 0) {
        struct sigaction sa = {.sa_handler = on_sigint};
        sigaction(SIGINT, &sa, NULL);
        reset(&c);
        if (c.tty) fputs("nucleus chat: /help for commands, Ctrl-C stops a reply, /exit leaves\n", stdout);
        char *line;
        while ((line = read_line(&c))) {
            bool go_on = true;
            if (line[0] == '/') go_on = command(&c, line);
            else if (line[0]) add_message(&c, "user", line), reply(&c);
            free(line);
            if (!go_on) break;
        }
    }
    cJSON_Delete(c.messages);
    nu_chat_template_free(c.tpl);
    nu_context_free(c.ctx);
    nu_model_free(c.model);
    return rc;
}
