/* fuzz_request.c - libFuzzer target for the server's request parser
 * (server/openai_params.c): OpenAI request JSON to generation parameters;
 * and for the translator of Anthropic's Messages bodies (anthropic.c) into
 * chat requests.
 *
 * The first byte picks the endpoint (bits 0-1: chat, completions, Anthropic
 * messages; with bit 2 set, Anthropic's count_tokens); the rest is the body.
 * A translated body must be JSON the chat parser then takes or refuses like
 * any other. A refused body must come back with a 4xx/5xx status, an error
 * type and a message; an accepted one must keep every promise the parser
 * makes to the server: values inside the limits and the OpenAI ranges, token
 * ids inside the vocabulary, the stop and logit-bias arrays where gen points,
 * and strings NUL-terminated. Broken promises abort (a crash for libFuzzer);
 * ASan and UBSan catch the rest. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "anthropic.h"
#include "openai_params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink; /* keeps the string reads from being optimised away */

static void check(bool ok) {
    if (!ok) abort();
}

/* Reads a whole string (ASan flags a missing NUL). */
static void touch(const char *s) {
    if (s) sink += strlen(s);
}

static const srv_limits limits = {.n_vocab = 512,
                                  .max_n = 8,
                                  .max_tokens = 2048,
                                  .max_prompts = 32,
                                  .max_beam_width = 4,
                                  .max_draft = 8};

/* What the server starts from: nucleus's defaults, written out here so the
 * fuzzer needs no library code. */
static srv_defaults make_defaults(void) {
    srv_defaults d;
    memset(&d, 0, sizeof d);
    d.gen.n_predict = 128;
    d.gen.add_bos = true;
    d.gen.n = 1;
    d.gen.logprobs = -1;
    d.gen.sampling.temperature = 0.8f;
    d.gen.sampling.top_k = 40;
    d.gen.sampling.top_p = 0.95f;
    d.gen.sampling.min_p = 0.05f;
    d.gen.sampling.typical_p = 1;
    d.gen.sampling.repeat_penalty = 1;
    d.gen.sampling.penalty_last_n = 64;
    d.gen.sampling.guard_window = 64;
    d.gen.sampling.seed = 0xC0FFEE;
    d.gen.sampling.dry_base = 1.75f;
    d.gen.sampling.dry_allowed_length = 2;
    d.gen.sampling.dry_penalty_last_n = 64;
    d.gen.sampling.xtc_threshold = 0.1f;
    d.gen.sampling.top_n_sigma = -1.0f;
    d.gen.sampling.dynatemp_exponent = 1.0f;
    d.gen.sampling.mirostat_tau = 5.0f;
    d.gen.sampling.mirostat_eta = 0.1f;
    d.beam.width = 4;
    d.beam.n_return = 1;
    d.beam.length_penalty = 1;
    d.beam.n_predict = 64;
    d.beam.add_bos = true;
    return d;
}

static void check_sampling(const nu_sampler_params *s) {
    check(s->temperature >= 0 && s->temperature <= 2);
    check(s->top_p > 0 && s->top_p <= 1);
    check(s->min_p >= 0 && s->min_p <= 1);
    check(s->typical_p > 0 && s->typical_p <= 1);
    check(s->repeat_penalty > 0 && s->repeat_penalty <= 100);
    check(s->presence_penalty >= -2 && s->presence_penalty <= 2);
    check(s->frequency_penalty >= -2 && s->frequency_penalty <= 2);
    check(s->penalty_last_n >= -1 && s->top_k >= 0 && s->min_tokens >= 0);
    check(s->no_repeat_ngram_size >= 0 && s->min_tokens <= limits.max_tokens);
    check(s->dry_multiplier >= 0 && s->dry_multiplier <= 100 && s->dry_base >= 1 &&
          s->dry_base <= 100 && s->dry_allowed_length >= 0 && s->dry_penalty_last_n >= -1);
    check(s->xtc_probability >= 0 && s->xtc_probability <= 1 && s->xtc_threshold >= 0 &&
          s->xtc_threshold <= 1 && s->top_n_sigma >= -1 && s->top_n_sigma <= 100);
    check(s->dynatemp_range >= 0 && s->dynatemp_range <= 100 && s->dynatemp_exponent >= 0 &&
          s->dynatemp_exponent <= 100);
    check(s->mirostat >= 0 && s->mirostat <= 2 && s->mirostat_tau >= 0 && s->mirostat_eta <= 1);
    for (int32_t i = 0; i < s->n_dry_sequence_breakers; i++)
        check(strlen(s->dry_sequence_breakers[i]) >= 1 &&
              strlen(s->dry_sequence_breakers[i]) <= NU_DRY_MAX_BREAKER_LEN);
    for (int32_t i = 0; i < s->n_banned_strings; i++) check(s->banned_strings[i][0] != 0);
    for (int32_t i = 0; i < s->n_banned_tokens; i++) {
        check(s->banned_tokens[i].n >= 1);
        for (int32_t k = 0; k < s->banned_tokens[i].n; k++)
            check(s->banned_tokens[i].tokens[k] >= 0 &&
                  s->banned_tokens[i].tokens[k] < limits.n_vocab);
    }
    check(s->n_logit_bias >= 0 && (s->n_logit_bias == 0 || s->logit_bias));
    for (int32_t i = 0; i < s->n_logit_bias; i++) {
        check(s->logit_bias[i].token >= 0 && s->logit_bias[i].token < limits.n_vocab);
        check(isfinite(s->logit_bias[i].bias) && fabsf(s->logit_bias[i].bias) <= 100);
    }
}

static void check_prompts(const srv_request *r) {
    if (r->kind == SRV_CHAT) {
        check(r->n_messages >= 1 && r->n_prompts == 0);
        for (int32_t i = 0; i < r->n_messages; i++) {
            const srv_message *m = &r->messages[i];
            bool tool = !strcmp(m->role, "tool");
            check(tool || !strcmp(m->role, "system") || !strcmp(m->role, "user") ||
                  !strcmp(m->role, "assistant"));
            check(tool == (m->tool_call_id != NULL)); /* a tool result answers a call */
            check(!m->tool_calls || !strcmp(m->role, "assistant"));
            touch(m->content), touch(m->name), touch(m->tool_calls), touch(m->tool_call_id);
        }
        /* tools: names set, a named choice inside the list */
        check((r->tools.n > 0) == (r->tools.json != NULL));
        for (int32_t i = 0; i < r->tools.n; i++)
            touch(r->tools.list[i].name), touch(r->tools.list[i].parameters);
        check(r->tools.choice != SRV_TOOLS_NAMED ||
              (r->tools.named >= 0 && r->tools.named < r->tools.n));
        return;
    }
    check(r->n_prompts >= 1 && r->n_prompts <= limits.max_prompts && r->n_messages == 0);
    for (int32_t i = 0; i < r->n_prompts; i++) {
        const srv_prompt *p = &r->prompts[i];
        touch(p->text);
        check(p->text || p->n_tokens > 0);
        for (int32_t k = 0; !p->text && k < p->n_tokens; k++)
            check(p->tokens[k] >= 0 && p->tokens[k] < limits.n_vocab);
    }
}

/* Every promise of an accepted request. */
static void check_request(const srv_request *r) {
    const nu_generate_params *g = &r->gen;
    check(g->n >= 1 && g->n <= limits.max_n);
    check(g->n_predict >= -1 && g->n_predict <= limits.max_tokens);
    check(g->logprobs >= -1 && g->logprobs <= NU_MAX_TOP_LOGPROBS);
    check(g->logprobs >= 0 ? r->logprobs : !r->logprobs);
    check(g->n_stop >= 0 && g->n_stop <= 16 &&
          (g->n_stop == 0 || g->stop == (const char *const *)r->stop));
    for (int32_t i = 0; i < g->n_stop; i++)
        check(g->stop[i] && g->stop[i][0] && strlen(g->stop[i]) <= 1024);
    check(r->best_of >= g->n && r->best_of <= limits.max_n);
    check(!r->include_usage || r->stream);
    if (r->beam) {
        check(r->beam_params.width >= 1 && r->beam_params.width <= limits.max_beam_width);
        check(r->beam_params.n_return == g->n && g->n <= r->beam_params.width);
    }
    check(r->format != SRV_FORMAT_JSON_SCHEMA || r->json_schema);
    touch(r->model), touch(r->json_schema), touch(r->grammar), touch(r->regex);
    for (int32_t i = 0; i < r->n_choices; i++) touch(r->choices[i]);
    check_sampling(&g->sampling);
    check_prompts(r);
}

/* The body as a chat request: Anthropic's translated (NULL when refused,
 * err checked), else the body itself (*len: its bytes, NULs included). */
static char *translated(const uint8_t *data, size_t size, size_t *len) {
    const char *body = (const char *)data + 1;
    if ((data[0] & 3) != 2) {
        char *out = malloc(size);
        if (out) memcpy(out, body, size - 1), out[size - 1] = 0;
        *len = size - 1;
        return out;
    }
    srv_error err;
    memset(&err, 0, sizeof err);
    char *out = srv_anthropic_translate(body, size - 1, data[0] & 4, &err);
    if (!out) {
        check(err.status >= 400 && err.status < 600 && err.message[0]);
        return NULL;
    }
    *len = strlen(out);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    srv_kind kind = (data[0] & 3) == 1 ? SRV_COMPLETION : SRV_CHAT;
    srv_defaults d = make_defaults();
    srv_request r;
    srv_error err;
    memset(&err, 0, sizeof err);
    size_t len = 0;
    char *body = translated(data, size, &len);
    if (!body) return 0;
    bool ok = srv_parse_request(body, len, kind, &limits, &d, &r, &err);
    free(body);
    if (ok) {
        check_request(&r);
        srv_request_free(&r);
    } else {
        check(err.status >= 400 && err.status < 600 && err.type && err.message[0]);
        touch(err.message), touch(err.param);
        check(r.n_messages == 0 && r.n_prompts == 0 && !r.stop && !r.logit_bias);
    }
    return 0;
}
