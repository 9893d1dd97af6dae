/* cmd_chat.c - `nucleus chat`: a terminal conversation with a model.
 *
 * Each turn renders the whole conversation with the model's chat template
 * and generates the reply; the context keeps the earlier turns' keys and
 * values, so only what is new is read again (nu_generate reuses the cached
 * prefix it shares with the new prompt). Replies stream as they come and end
 * at the model's end-of-turn tokens; Ctrl-C stops a reply without leaving.
 * On a terminal, lines are edited with libedit (history included).
 *
 * Reasoning models (a template with thinking markers, server/reasoning.h):
 * the thinking is shown dimmed before the answer, and kept out of the
 * conversation's content (as reasoning_content, for templates that read it);
 * --no-think flips the template's switch, --think-budget closes the
 * thinking after N tokens. */
#include <cjson/cJSON.h>
#include <editline/readline.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "buf.h"
#include "cli_options.h"
#include "reasoning.h"

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
    bool plain;      /* the "plain" template: stop when the model starts the next turn */
    cJSON *messages; /* the conversation */
    srv_think think; /* what the template does with thinking */
    bool no_think;
    long think_budget; /* -1: none */
    bool color;        /* dim the thinking (a terminal, or CLICOLOR_FORCE) */
} chat_state;

/* One reply as it streams: the text so far, split into thinking and answer. */
typedef struct reply_state {
    const chat_state *c;
    nu_buf text; /* the reply so far */
    srv_think_parser *split;
    nu_buf reasoning, answer; /* what was shown so far */
    bool in_thinking;         /* the dim style is on */
} reply_state;

static int run_chat(int argc, char **argv);

static const cli_option chat_options[] = {
    {.name = "--system",
     .kind = CLI_STRING,
     .field = CLI_FIELD(chat_state, system),
     .placeholder = "TEXT",
     .help = "the system message"},
    {.name = "--chat-template",
     .kind = CLI_STRING,
     .field = CLI_FIELD(chat_state, template_name),
     .placeholder = "T",
     .help = "a built-in template name (chatml, llama2, llama3, mistral, phi3, gemma, zephyr, "
             "plain) or a Jinja file",
     .default_text = "the model's own"},
    {.name = "--n-predict",
     .short_name = "-n",
     .kind = CLI_INT,
     .field = CLI_FIELD(chat_state, n_predict),
     .min = 1,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "most tokens per reply"},
    {.name = "--quiet",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(chat_state, quiet),
     .help = "no statistics after each reply"},
    {.name = "--no-think",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(chat_state, no_think),
     .help = "reasoning models: turn thinking off (the template's enable_thinking)"},
    {.name = "--think-budget",
     .kind = CLI_INT,
     .field = CLI_FIELD(chat_state, think_budget),
     .min = 0,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "reasoning models: after N thinking tokens the model is made to close its thinking",
     .default_text = "none"},
    {0},
};

static const cli_section chat_sections[] = {
    CLI_OWN_SECTION(NULL, chat_options),
    CLI_RUN_SECTIONS(chat_state, run),
    {0},
};

const cli_command chat_command = {
    .name = "chat",
    .summary = "a conversation in the terminal, with the model's chat template",
    .usage = "nucleus chat -m MODEL [--system TEXT] [--chat-template NAME|FILE] [options]",
    .sections = chat_sections,
    .epilog = "commands in the conversation: /reset  /system TEXT  /save FILE  /load FILE  /help  "
              "/exit\n",
    .run = run_chat,
};

#define DIM "\033[2m"
#define UNDIM "\033[0m"

/* Thinking goes out dimmed, the answer after it in the normal style. */
static bool show(void *user, const srv_tool_event *ev) {
    reply_state *r = user;
    bool thinking = ev->kind == SRV_TOOL_REASONING;
    nu_buf_add(thinking ? &r->reasoning : &r->answer, ev->text, ev->len);
    if (thinking && !r->in_thinking && r->c->color) fputs(DIM, stdout);
    if (!thinking && r->in_thinking) fputs(r->c->color ? UNDIM "\n\n" : "\n\n", stdout);
    r->in_thinking = thinking;
    fwrite(ev->text, 1, ev->len, stdout);
    return true;
}

static bool write_reply(void *user, int32_t index, const char *text, size_t len) {
    reply_state *r = user;
    (void)index;
    nu_buf_add(&r->text, text, len);
    bool ok = !r->text.failed &&
              srv_think_parser_feed(r->split, r->text.data, r->text.len, false, show, r);
    fflush(stdout);
    return ok && !interrupted;
}

/* The end of a reply: what the parser held back, the style reset. */
static void finish_reply(reply_state *r) {
    srv_think_parser_feed(r->split, r->text.data, r->text.len, true, show, r);
    if (r->in_thinking && r->c->color) fputs(UNDIM, stdout);
    fflush(stdout);
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
    if (st == NU_OK) srv_think_detect(&c->think, nu_chat_template_source(c->tpl, NULL), c->model);
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
    if (c->think.switch_enable)
        p.extra_json = c->no_think ? "{\"enable_thinking\":false}" : "{\"enable_thinking\":true}";
    nu_error err;
    if (nu_chat_render(c->tpl, &p, &out, NULL, &err) != NU_OK) cli_error("%s", err.message);
    free(json);
    return out;
}

/* How the reply's thinking is split off, and its budget. */
static bool set_thinking(const chat_state *c, const char *prompt, srv_think_split *split,
                         nu_generate_params *p, int32_t *open, int32_t *close, int32_t *force) {
    if (!c->think.thinks) return true;
    split->on = true;
    split->starts_inside = srv_think_prompt_inside(&c->think, prompt);
    split->harmony = c->think.harmony;
    snprintf(split->open, sizeof split->open, "%s", c->think.open);
    snprintf(split->close, sizeof split->close, "%s", c->think.close);
    if (c->think_budget < 0) return true;
    srv_error err;
    if (!srv_think_budget(&c->think, c->model, (int32_t)c->think_budget, &p->think, open, close,
                          force, &err))
        return cli_error("%s", err.message), false;
    p->think.start_inside = split->starts_inside;
    return true;
}

/* The reply joins the conversation: its answer as the content, its
 * thinking as reasoning_content (the template decides what to show). */
static void add_answer(chat_state *c, const reply_state *rs, const char *text) {
    if (!c->think.thinks) {
        add_message(c, "assistant", text);
        return;
    }
    add_message(c, "assistant", rs->answer.data ? rs->answer.data : "");
    cJSON *m = cJSON_GetArrayItem(c->messages, cJSON_GetArraySize(c->messages) - 1);
    if (rs->reasoning.data) cJSON_AddStringToObject(m, "reasoning_content", rs->reasoning.data);
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
    srv_think_split split = {0};
    int32_t open[NU_THINK_MAX_MARKER], close[NU_THINK_MAX_MARKER], force[NU_THINK_MAX_FORCE];
    reply_state rs = {.c = c};
    if (!set_thinking(c, prompt, &split, &p, open, close, force) ||
        !(rs.split = srv_think_parser_new(&split, NULL))) {
        free(prompt);
        return;
    }
    p.on_text = write_reply;
    p.user = &rs;
    interrupted = 0;
    nu_generate_result r;
    nu_error err;
    if (nu_generate(c->ctx, prompt, &p, &r, &err) != NU_OK) {
        cli_error("%s", err.message);
    } else {
        finish_reply(&rs);
        putchar('\n');
        if (!c->quiet)
            fprintf(stderr,
                    "[%d prompt tokens, %d reused from the cache | %d tokens, %.1f tok/s%s]\n",
                    r.n_prompt, r.n_cached, r.n_generated,
                    r.generate_ms > 0 ? r.n_generated / (r.generate_ms / 1e3) : 0.0,
                    r.finish == NU_FINISH_CANCELLED ? " | stopped" : "");
        add_answer(c, &rs, r.text);
        nu_generate_result_free(&r);
    }
    srv_think_parser_free(rs.split);
    nu_buf_free(&rs.text);
    nu_buf_free(&rs.reasoning);
    nu_buf_free(&rs.answer);
    free(prompt);
}

static void save(chat_state *c, const char *path) {
    char *json = cJSON_Print(c->messages);
    FILE *f = fopen(path, "w");
    if (!f || !json || fputs(json, f) < 0)
        cli_error("cannot write %s", path);
    else
        printf("saved %d messages to %s\n", cJSON_GetArraySize(c->messages), path);
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

static int run_chat(int argc, char **argv) {
    chat_state c = {.n_predict = 256, .tty = isatty(0) && isatty(1), .think_budget = -1};
    const char *force = getenv("CLICOLOR_FORCE");
    c.color = !getenv("NO_COLOR") && (isatty(1) || (force && strcmp(force, "0")));
    cli_run_opts_init(&c.run);
    int rc;
    if (!cli_parse(&chat_command, argc, argv, &c, &rc)) return rc;
    if ((rc = cli_open(&c.run, &c.model, &c.ctx))) return rc;
    if ((rc = load_template(&c)) == 0) {
        struct sigaction sa = {.sa_handler = on_sigint};
        sigaction(SIGINT, &sa, NULL);
        reset(&c);
        if (c.tty)
            fputs("nucleus chat: /help for commands, Ctrl-C stops a reply, /exit leaves\n", stdout);
        char *line;
        while ((line = read_line(&c))) {
            bool go_on = true;
            if (line[0] == '/')
                go_on = command(&c, line);
            else if (line[0])
                add_message(&c, "user", line), reply(&c);
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
