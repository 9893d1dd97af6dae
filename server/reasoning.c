/* reasoning.c - the thinking of reasoning models: what a template does with
 * it, the template variables a request sets, the budget's tokens, and the
 * parser that splits an answer into thinking and content. */
#include "reasoning.h"

#include "buf.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- what the template does ------------------------------------------------ */

/* The marker pairs models are known to write (DeepSeek-R1, Qwen3, QwQ and
 * most others: <think>; Command R7B; Magistral; Seed-OSS; Kimi; Gemma 4,
 * whose thinking is a "thought" channel). */
static const char *const marker_pairs[][2] = {
    {"<|channel>thought", "<channel|>"},
    {"<seed:think>", "</seed:think>"},
    {"<think>", "</think>"},
    {"<|START_THINKING|>", "<|END_THINKING|>"},
    {"[THINK]", "[/THINK]"},
    {"\xe2\x97\x81think\xe2\x96\xb7", "\xe2\x97\x81/think\xe2\x96\xb7"}, /* ◁think▷ ◁/think▷ */
};

/* Whether text is one token of the vocabulary (read as special text). */
static bool one_token(const nu_model *m, const char *text) {
    int32_t toks[4];
    size_t n = 0;
    return m &&
           nu_tokenize(m, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL, toks, 4, &n, NULL) ==
               NU_OK &&
           n == 1;
}

/* The harmony markers (gpt-oss). */
#define HARMONY_ANALYSIS "<|channel|>analysis<|message|>"
#define HARMONY_FINAL "<|end|><|start|>assistant<|channel|>final<|message|>"

void srv_think_detect(srv_think *t, const char *src, const nu_model *m) {
    memset(t, 0, sizeof *t);
    if (!src) src = "";
    if (strstr(src, HARMONY_ANALYSIS)) { /* gpt-oss: the "thinking" field in the history */
        t->thinks = t->harmony = true;
        snprintf(t->open, sizeof t->open, "%s", HARMONY_ANALYSIS);
        snprintf(t->close, sizeof t->close, "<|end|>");
        t->switch_effort = strstr(src, "reasoning_effort") != NULL;
        if (strstr(src, "message.thinking"))
            snprintf(t->history_field, sizeof t->history_field, "thinking");
        return;
    }
    size_t n_pairs = sizeof marker_pairs / sizeof *marker_pairs;
    for (size_t i = 0; i < n_pairs && !t->thinks; i++)
        if (strstr(src, marker_pairs[i][1])) {
            snprintf(t->open, sizeof t->open, "%s", marker_pairs[i][0]);
            snprintf(t->close, sizeof t->close, "%s", marker_pairs[i][1]);
            t->thinks = true;
        }
    if (!t->thinks && one_token(m, "<think>") && one_token(m, "</think>")) {
        snprintf(t->open, sizeof t->open, "<think>");
        snprintf(t->close, sizeof t->close, "</think>");
        t->thinks = true;
    }
    t->switch_enable = t->thinks && strstr(src, "enable_thinking") != NULL;
    t->switch_effort = t->thinks && strstr(src, "reasoning_effort") != NULL;
    if (t->thinks && strstr(src, "reasoning_content"))
        snprintf(t->history_field, sizeof t->history_field, "reasoning_content");
}

/* ---- template variables ----------------------------------------------------- */

/* A 400 about reasoning, naming param. */
static bool refuse(srv_error *err, const char *param, const char *what) {
    return srv_fail(err, 400, "invalid_request_error", NULL, param, "%s", what);
}

/* The reasoning_effort template variable: gpt-oss takes low, medium, high. */
static const char *effort_value(const char *effort) {
    return !strcmp(effort, "minimal") ? "low" : effort;
}

/* Sets the switch the effort asks for; false (err) when the template
 * cannot do it. */
static bool add_switch(const srv_think *t, const char *effort, cJSON *vars, srv_error *err) {
    bool off = effort && !strcmp(effort, "none");
    if (!t->thinks && effort && !off)
        return refuse(err, "reasoning_effort",
                      "this model's chat template does not think: 'reasoning_effort' can only "
                      "be 'none'");
    if (t->switch_enable && !cJSON_AddBoolToObject(vars, "enable_thinking", !off)) return false;
    if (!off || !t->thinks || t->switch_enable) {
        if (t->switch_effort && effort && !off &&
            !cJSON_AddStringToObject(vars, "reasoning_effort", effort_value(effort)))
            return false;
        return true;
    }
    return refuse(err, "reasoning_effort",
                  "this model's chat template always thinks: it has no switch to turn "
                  "thinking off ('reasoning_effort': 'none')");
}

bool srv_think_template_vars(const srv_think *t, const srv_request *r, char **out, srv_error *err) {
    *out = NULL;
    const srv_reasoning *q = &r->reasoning;
    if (q->max_tokens >= 0 && !t->thinks)
        return refuse(err, "max_thinking_tokens",
                      "this model's chat template does not think: 'max_thinking_tokens' does "
                      "not apply");
    if (q->max_tokens >= 0 && q->effort && !strcmp(q->effort, "none"))
        return refuse(err, "max_thinking_tokens",
                      "'max_thinking_tokens' cannot be combined with 'reasoning_effort': 'none'");
    cJSON *vars = cJSON_CreateObject();
    srv_error oom;
    srv_fail(&oom, 500, "server_error", NULL, NULL, "out of memory");
    if (!vars) return *err = oom, false;
    bool ok = add_switch(t, q->effort, vars, err);
    cJSON *kw = ok && q->kwargs ? cJSON_Parse(q->kwargs) : NULL;
    if (ok && q->kwargs && !kw) ok = (*err = oom, false);
    /* chat_template_kwargs come last: they win over the switch */
    for (cJSON *v = kw ? kw->child : NULL; ok && v; v = v->next) {
        cJSON *copy = cJSON_Duplicate(v, true);
        cJSON_DeleteItemFromObjectCaseSensitive(vars, v->string);
        if (!copy || !cJSON_AddItemToObject(vars, v->string, copy))
            cJSON_Delete(copy), ok = (*err = oom, false);
    }
    cJSON_Delete(kw);
    if (ok && vars->child && !(*out = cJSON_PrintUnformatted(vars))) ok = (*err = oom, false);
    cJSON_Delete(vars);
    return ok;
}

static bool is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The last occurrence of needle in hay, or NULL. */
static const char *last_of(const char *hay, const char *needle) {
    const char *last = NULL;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) last = p;
    return last;
}

bool srv_think_prompt_inside(const srv_think *t, const char *prompt) {
    if (!t->thinks) return false;
    const char *open = last_of(prompt, t->open);
    if (!open) return false;
    for (const char *p = open + strlen(t->open); *p; p++)
        if (!is_blank(*p)) return false;
    return true;
}

/* text as tokens (special text read as its token), into toks (at most cap). */
static bool marker_tokens(const nu_model *m, const char *text, int32_t *toks, int32_t cap,
                          int32_t *n, srv_error *err) {
    size_t got = 0;
    nu_error e;
    nu_status st =
        nu_tokenize(m, text, strlen(text), NU_TOKENIZE_PARSE_SPECIAL, toks, (size_t)cap, &got, &e);
    if (st != NU_OK || got == 0)
        return srv_fail(err, 500, "server_error", NULL, NULL,
                        "the thinking marker '%s' does not tokenize into 1..%d tokens", text, cap);
    *n = (int32_t)got;
    return true;
}

bool srv_think_budget(const srv_think *t, const nu_model *m, int32_t max_tokens,
                      nu_think_budget *out, int32_t open[NU_THINK_MAX_MARKER],
                      int32_t close[NU_THINK_MAX_MARKER], int32_t force[NU_THINK_MAX_FORCE],
                      srv_error *err) {
    char forced[3 * SRV_THINK_MARKER_MAX];
    /* harmony: the analysis ends and a final message starts */
    if (t->harmony)
        snprintf(forced, sizeof forced, "%s", HARMONY_FINAL);
    else
        snprintf(forced, sizeof forced, "\n%s\n\n", t->close);
    memset(out, 0, sizeof *out);
    out->max_tokens = max_tokens;
    out->open = open, out->close = close, out->force = force;
    return marker_tokens(m, t->open, open, NU_THINK_MAX_MARKER, &out->n_open, err) &&
           marker_tokens(m, t->close, close, NU_THINK_MAX_MARKER, &out->n_close, err) &&
           marker_tokens(m, forced, force, NU_THINK_MAX_FORCE, &out->n_force, err);
}

/* ---- the thinking parser ----------------------------------------------------- */

typedef enum think_state {
    AT_START,    /* blanks so far: a block may still open */
    THINK_LEAD,  /* just inside: blanks dropped */
    THINKING,    /* inside */
    AFTER_THINK, /* after the close marker: blanks dropped */
    CONTENT,     /* the rest is content */
    H_HEAD,      /* harmony: before a message's header (or plain text) */
    H_BODY,      /* harmony: in a message's body */
    H_CALL,      /* harmony: in the body of a message to functions.NAME */
} think_state;

#define CALL_NAME_MAX 128 /* bytes of a called function's name with its NUL */

struct srv_think_parser {
    srv_think_split s;
    const srv_tools *tools; /* harmony calls are parsed for these (NULL: shown as text) */
    think_state state;
    size_t pos;               /* bytes of the text consumed */
    srv_tool_event_kind body; /* H_BODY: where the body goes */
    size_t head_at;           /* H_CALL: where the message's header starts */
    char call_name[CALL_NAME_MAX];
    int32_t n_calls; /* SRV_TOOL_CALL events sent */
    srv_tool_emit emit;
    void *user;
    bool failed;
};

srv_think_parser *srv_think_parser_new(const srv_think_split *s, const srv_tools *tools) {
    srv_think_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->s = *s;
    p->tools = srv_tools_active(tools) ? tools : NULL;
    p->state = !s->on             ? CONTENT
               : s->harmony       ? (s->starts_inside ? H_BODY : H_HEAD)
               : s->starts_inside ? THINK_LEAD
                                  : AT_START;
    p->body = SRV_TOOL_REASONING;
    return p;
}

void srv_think_parser_free(srv_think_parser *p) {
    free(p);
}

static void send(srv_think_parser *p, srv_tool_event_kind kind, const char *text, size_t len) {
    if (len == 0 || p->failed) return;
    srv_tool_event ev = {.kind = kind, .text = text, .len = len};
    if (!p->emit(p->user, &ev)) p->failed = true;
}

/* Where the blanks from `from` end (len when all of it is blank). */
static size_t skip_blanks(const char *s, size_t from, size_t len) {
    while (from < len && is_blank(s[from])) from++;
    return from;
}

/* How long a proper prefix of marker the text [from, len) ends with. */
static size_t partial_marker(const char *s, size_t from, size_t len, const char *marker) {
    size_t m = strlen(marker);
    for (size_t k = m - 1; k > 0; k--)
        if (len - from >= k && !memcmp(s + len - k, marker, k)) return k;
    return 0;
}

/* The first occurrence of marker in [from, len), or NULL. */
static const char *find(const char *s, size_t from, size_t len, const char *marker) {
    size_t m = strlen(marker);
    for (size_t i = from; i + m <= len; i++)
        if (s[i] == marker[0] && !memcmp(s + i, marker, m)) return s + i;
    return NULL;
}

/* Whether [from, len) is a proper beginning of marker (and not empty). */
static bool begins(const char *s, size_t from, size_t len, const char *marker) {
    size_t n = len - from;
    return n > 0 && n < strlen(marker) && !memcmp(s + from, marker, n);
}

/* What a harmony header starts with: a new message, its channel, or its
 * recipient (a prompt that ends in "<|start|>assistant" leaves the model to
 * write " to=functions.NAME<|channel|>commentary ..."). */
static const char *const harmony_heads[] = {"<|start|>", "<|channel|>", "to="};

/* The recipient of the header [at, end) (to=NAME, first in the header or
 * after a blank): its name, *len bytes; NULL when there is none. */
static const char *recipient(const char *s, size_t at, size_t end, size_t *len) {
    for (const char *to = find(s, at, end, "to="); to;
         to = find(s, (size_t)(to - s) + 1, end, "to=")) {
        if ((size_t)(to - s) != at && to[-1] != ' ') continue;
        const char *name = to + 3;
        size_t n = 0;
        while (name + n < s + end && name[n] != ' ' && name[n] != '<') n++;
        *len = n;
        return name;
    }
    return NULL;
}

/* At a harmony message's header (or plain text): one step, as think_step. */
static bool harmony_head(srv_think_parser *p, const char *s, size_t len, bool done) {
    size_t at = skip_blanks(s, p->pos, len), n_heads = sizeof harmony_heads / sizeof *harmony_heads;
    bool header = false, partial = at == len;
    for (size_t i = 0; i < n_heads; i++) {
        size_t k = strlen(harmony_heads[i]);
        header = header || (len - at >= k && !memcmp(s + at, harmony_heads[i], k));
        partial = partial || begins(s, at, len, harmony_heads[i]);
    }
    if (!header && !done && partial) return false; /* blanks, or a header's beginning */
    if (!header) {
        p->state = CONTENT;
        return true;
    }
    const char *msg = find(s, at, len, "<|message|>");
    if (!msg) {
        if (done) p->pos = len; /* a header cut short: no message */
        return false;
    }
    size_t head_end = (size_t)(msg - s) + strlen("<|message|>"), to_len = 0;
    const char *channel = find(s, at, (size_t)(msg - s), "<|channel|>");
    const char *name = channel ? channel + strlen("<|channel|>") : msg;
    size_t name_len = 0;
    while (name + name_len < msg && name[name_len] != ' ' && name[name_len] != '<') name_len++;
    const char *to = recipient(s, at, (size_t)(msg - s), &to_len);
    bool analysis = name_len == 8 && !memcmp(name, "analysis", 8);
    p->pos = head_end;
    p->state = H_BODY;
    p->body = analysis && !to ? SRV_TOOL_REASONING : SRV_TOOL_CONTENT;
    if (to && p->tools && to_len > 10 && to_len - 10 < CALL_NAME_MAX &&
        !memcmp(to, "functions.", 10)) { /* a function call: read whole, then checked */
        memcpy(p->call_name, to + 10, to_len - 10);
        p->call_name[to_len - 10] = 0;
        p->head_at = at;
        p->state = H_CALL;
    } else if (to) {
        send(p, SRV_TOOL_CONTENT, s + at, head_end - at); /* not parsed: shown whole */
    }
    return true;
}

/* Where the message body from `from` ends: *end (len when not yet) and the
 * end marker's length (0: none yet); *hold: bytes at the end that may
 * begin one. */
static void harmony_end(const char *s, size_t from, size_t len, size_t *end, size_t *end_len,
                        size_t *hold) {
    static const char *const ends[] = {"<|end|>", "<|return|>", "<|call|>"};
    *end = len, *end_len = 0, *hold = 0;
    for (size_t i = 0; i < 3; i++) {
        const char *hit = find(s, from, len, ends[i]);
        if (hit && (size_t)(hit - s) < *end) *end = (size_t)(hit - s), *end_len = strlen(ends[i]);
        size_t part = partial_marker(s, from, len, ends[i]);
        if (part > *hold) *hold = part;
    }
}

/* In a harmony message's body: one step, as think_step. */
static bool harmony_body(srv_think_parser *p, const char *s, size_t len, bool done) {
    size_t end, end_len, hold;
    harmony_end(s, p->pos, len, &end, &end_len, &hold);
    size_t keep = end_len || done ? end : len - hold;
    send(p, p->body, s + p->pos, keep - p->pos);
    p->pos = keep;
    if (!end_len) return false;
    p->pos = end + end_len;
    p->state = H_HEAD;
    return true;
}

/* In a function call's body: once it ends (<|call|>, or any end), the call
 * and its arguments go out, or the message as text when the function is
 * not one of the tools or the body not one JSON object. */
static bool harmony_call(srv_think_parser *p, const char *s, size_t len, bool done) {
    size_t end, end_len, hold;
    harmony_end(s, p->pos, len, &end, &end_len, &hold);
    if (!end_len && !done) return false;
    char *args, id[SRV_TOOL_ID_MAX];
    size_t n;
    bool oom;
    if (srv_tools_check_call(p->tools, p->call_name, s + p->pos, end - p->pos, &args, &n, &oom)) {
        srv_tools_new_id(SRV_TOOL_FORMAT_HARMONY, id);
        srv_tool_event call = {
            .kind = SRV_TOOL_CALL, .index = p->n_calls, .id = id, .name = p->call_name};
        srv_tool_event piece = {
            .kind = SRV_TOOL_ARGS, .index = p->n_calls++, .text = args, .len = n};
        if (!p->emit(p->user, &call) || !p->emit(p->user, &piece)) p->failed = true;
        free(args);
    } else if (oom) {
        p->failed = true;
    } else {
        send(p, SRV_TOOL_CONTENT, s + p->head_at, end - p->head_at);
    }
    p->pos = end + end_len;
    p->state = H_HEAD;
    return true;
}

/* One step; false when it must wait for more text. */
static bool think_step(srv_think_parser *p, const char *s, size_t len, bool done) {
    size_t at, open_len = strlen(p->s.open);
    const char *hit;
    switch (p->state) {
    case AT_START:
        at = skip_blanks(s, p->pos, len);
        if (len - at >= open_len && !memcmp(s + at, p->s.open, open_len)) {
            p->pos = at + open_len;
            p->state = THINK_LEAD;
        } else if (!done && len - at < open_len && !memcmp(s + at, p->s.open, len - at)) {
            return false; /* blanks, or the marker's beginning */
        } else {
            p->state = CONTENT;
        }
        return true;
    case THINK_LEAD:
    case AFTER_THINK:
        at = skip_blanks(s, p->pos, len);
        if (at == len && !done) return false;
        p->pos = at;
        p->state = p->state == THINK_LEAD ? THINKING : CONTENT;
        return true;
    case THINKING: {
        hit = find(s, p->pos, len, p->s.close);
        size_t end = hit ? (size_t)(hit - s) : len;
        size_t keep = end;
        if (!hit && !done) keep -= partial_marker(s, p->pos, len, p->s.close);
        size_t text_end = keep;
        while (text_end > p->pos && is_blank(s[text_end - 1])) text_end--; /* held or dropped */
        send(p, SRV_TOOL_REASONING, s + p->pos, text_end - p->pos);
        p->pos = text_end;
        if (!hit) return false;
        p->pos = end + strlen(p->s.close);
        p->state = AFTER_THINK;
        return true;
    }
    case CONTENT:
        send(p, SRV_TOOL_CONTENT, s + p->pos, len - p->pos);
        p->pos = len;
        return false;
    case H_HEAD: return harmony_head(p, s, len, done);
    case H_BODY: return harmony_body(p, s, len, done);
    case H_CALL: return harmony_call(p, s, len, done);
    }
    return false;
}

bool srv_think_parser_feed(srv_think_parser *p, const char *text, size_t len, bool done,
                           srv_tool_emit emit, void *user) {
    p->emit = emit;
    p->user = user;
    if (!text) text = "", len = 0;
    while (!p->failed && think_step(p, text, len, done)) {
    }
    return !p->failed;
}

/* ---- thinking and tool calls -------------------------------------------------- */

struct srv_splitter {
    srv_think_parser *think;
    srv_tool_parser *tools; /* NULL without active tools */
    nu_buf content;         /* the content so far, which the tool parser reads whole */
    bool parallel;          /* parallel_tool_calls */
    int32_t n_calls;        /* calls emitted, from both parsers */
    int32_t current[2];     /* each parser's current call as emitted (-1: dropped) */
    srv_tool_emit emit;
    void *user;
    bool failed;
};

bool srv_splitter_needed(const srv_request *r) {
    return r->reasoning.split.on || srv_tools_active(&r->tools);
}

srv_splitter *srv_splitter_new(const srv_request *r) {
    srv_splitter *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->think = srv_think_parser_new(&r->reasoning.split, &r->tools);
    s->parallel = r->tools.parallel;
    bool ok = s->think != NULL;
    if (ok && srv_tools_active(&r->tools)) ok = (s->tools = srv_tool_parser_new(&r->tools)) != NULL;
    if (!ok) {
        srv_splitter_free(s);
        return NULL;
    }
    return s;
}

void srv_splitter_free(srv_splitter *s) {
    if (!s) return;
    srv_think_parser_free(s->think);
    srv_tool_parser_free(s->tools);
    nu_buf_free(&s->content);
    free(s);
}

/* A call event of parser `from` (0: harmony's, 1: the content's), numbered
 * among the calls of both; without parallel_tool_calls only the first
 * call of the answer goes out. */
static bool relay_call(srv_splitter *s, int from, const srv_tool_event *ev) {
    if (ev->kind == SRV_TOOL_CALL)
        s->current[from] = !s->parallel && s->n_calls > 0 ? -1 : s->n_calls++;
    if (s->current[from] < 0) return true;
    srv_tool_event out = *ev;
    out.index = s->current[from];
    return s->emit(s->user, &out);
}

static bool from_tools(void *user, const srv_tool_event *ev) {
    srv_splitter *s = user;
    if (ev->kind == SRV_TOOL_CALL || ev->kind == SRV_TOOL_ARGS) return relay_call(s, 1, ev);
    return s->emit(s->user, ev);
}

/* Thinking and harmony's calls go out; content goes out too, or into the
 * buffer the tool parser reads. */
static bool from_think(void *user, const srv_tool_event *ev) {
    srv_splitter *s = user;
    if (ev->kind == SRV_TOOL_CALL || ev->kind == SRV_TOOL_ARGS) return relay_call(s, 0, ev);
    if (ev->kind == SRV_TOOL_REASONING || !s->tools) return s->emit(s->user, ev);
    nu_buf_add(&s->content, ev->text, ev->len);
    return !s->content.failed;
}

bool srv_splitter_feed(srv_splitter *s, const char *text, size_t len, bool done, srv_tool_emit emit,
                       void *user) {
    s->emit = emit;
    s->user = user;
    if (!srv_think_parser_feed(s->think, text, len, done, from_think, s)) return false;
    if (s->tools &&
        !srv_tool_parser_feed(s->tools, s->content.data, s->content.len, done, from_tools, s))
        return false;
    return true;
}

int32_t srv_splitter_n_calls(const srv_splitter *s) {
    return s->n_calls;
}

/* ---- whole answers ------------------------------------------------------------ */

typedef struct collected {
    nu_buf reasoning, content;
    srv_tool_result *res;
    nu_buf *args; /* each call's arguments */
    bool failed;
} collected;

static bool collect(void *user, const srv_tool_event *ev) {
    collected *c = user;
    srv_tool_result *res = c->res;
    if (ev->kind == SRV_TOOL_REASONING || ev->kind == SRV_TOOL_CONTENT) {
        nu_buf_add(ev->kind == SRV_TOOL_REASONING ? &c->reasoning : &c->content, ev->text, ev->len);
    } else if (ev->kind == SRV_TOOL_CALL) { /* calls come numbered 0, 1, ... */
        srv_tool_call *calls = realloc(res->calls, (size_t)(res->n_calls + 1) * sizeof *calls);
        nu_buf *args = calls ? realloc(c->args, (size_t)(res->n_calls + 1) * sizeof *args) : NULL;
        if (calls) res->calls = calls;
        if (args) c->args = args;
        if (!args) return !(c->failed = true);
        srv_tool_call *call = &calls[res->n_calls];
        memset(call, 0, sizeof *call);
        memset(&args[res->n_calls++], 0, sizeof *args);
        snprintf(call->id, sizeof call->id, "%s", ev->id);
        if (!(call->name = strdup(ev->name))) c->failed = true;
    } else if (ev->index >= 0 && ev->index < res->n_calls) {
        nu_buf_add(&c->args[ev->index], ev->text, ev->len);
    }
    return !c->failed && !c->reasoning.failed && !c->content.failed;
}

bool srv_answer_split(const srv_request *r, const char *text, size_t len, srv_split_answer *out) {
    memset(out, 0, sizeof *out);
    srv_tool_result *res = &out->result;
    collected c = {.res = res};
    srv_splitter *s = srv_splitter_new(r);
    bool ok = s && srv_splitter_feed(s, text, len, true, collect, &c);
    srv_splitter_free(s);
    for (int32_t i = 0; i < res->n_calls; i++) {
        size_t n = c.args[i].len;
        char *a = ok ? nu_buf_take(&c.args[i]) : NULL;
        res->calls[i].arguments = a ? a : (n == 0 && ok ? strdup("") : NULL);
        if (!res->calls[i].arguments) ok = false;
        nu_buf_free(&c.args[i]);
    }
    free(c.args);
    res->content_len = c.content.len;
    res->content = ok ? (c.content.len ? nu_buf_take(&c.content) : strdup("")) : NULL;
    if (!res->content) ok = false;
    nu_buf_free(&c.content);
    /* no thinking (or an empty block): no reasoning, as a stream sends none */
    out->reasoning_len = c.reasoning.len;
    out->reasoning = out->reasoning_len ? nu_buf_take(&c.reasoning) : NULL;
    nu_buf_free(&c.reasoning);
    if (out->reasoning_len && !out->reasoning) ok = false;
    if (!ok) srv_answer_free(out);
    return ok;
}

void srv_answer_free(srv_split_answer *a) {
    free(a->reasoning);
    srv_tool_result_free(&a->result);
    memset(a, 0, sizeof *a);
}
