/* lab_params.c - a lab request body to a checked lab_request.
 *
 * The fields a lab request shares with /v1/completions (prompt, max_tokens,
 * the sampling fields, seed, logit_bias, stream, and for /v1/inspect the
 * constraint and watermark fields) are read by srv_parse_request, so they
 * mean and allow exactly what they do there. The lab's own fields are read
 * here and taken out first; a field neither knows is refused (400 with the
 * OpenAI error shape), as are completions fields that make no sense in the
 * lab (n, best_of, echo, stop, logprobs, ...). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "lab_internal.h"
#include "request.h"
#include "text_check.h"

#define BAD(err, param, ...) srv_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* Fields passed on to srv_parse_request, per endpoint. */
static const char *const shared_fields[] = {"prompt",
                                            "model",
                                            "max_tokens",
                                            "stream",
                                            "parse_special",
                                            "seed",
                                            "temperature",
                                            "top_p",
                                            "top_k",
                                            "min_p",
                                            "typical_p",
                                            "repetition_penalty",
                                            "presence_penalty",
                                            "frequency_penalty",
                                            "penalty_last_n",
                                            "no_repeat_ngram_size",
                                            "min_tokens",
                                            "ignore_eos",
                                            "logit_bias",
                                            NULL};
static const char *const inspect_shared_fields[] = {"grammar",         "regex",     "choice",
                                                    "response_format", "watermark", NULL};
/* The lab's own fields, per endpoint (sampling extras where sampling happens). */
static const char *const sampling_extras[] = {"repetition_guard", "guard_window", "sampler_order",
                                              "penalize_prompt", NULL};
static const char *const inspect_fields[] = {"tokens", "top_n", "curve_points", NULL};
static const char *const beam_fields[] = {"beam_width", "length_penalty", "early_stopping",
                                          "pruned", NULL};
static const char *const spec_fields[] = {"draft",    "draft_max", "ngram_min", "ngram_max",
                                          "baseline", "top_n",     NULL};
static const char *const vote_fields[] = {"paths", "answer_pattern", NULL};

static bool in_list(const char *const *list, const char *name) {
    for (; list && *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

static bool is_own_field(lab_kind k, const char *name) {
    switch (k) {
    case LAB_INSPECT: return in_list(inspect_fields, name) || in_list(sampling_extras, name);
    case LAB_BEAM: return in_list(beam_fields, name);
    case LAB_SPECULATIVE: return in_list(spec_fields, name) || in_list(sampling_extras, name);
    case LAB_SELF_CONSISTENCY: return in_list(vote_fields, name) || in_list(sampling_extras, name);
    }
    return false;
}

static bool is_shared_field(lab_kind k, const char *name) {
    if (k == LAB_BEAM) /* beam search reads the model's own distribution: no sampling */
        return !strcmp(name, "prompt") || !strcmp(name, "model") || !strcmp(name, "max_tokens") ||
               !strcmp(name, "stream") || !strcmp(name, "parse_special");
    return in_list(shared_fields, name) ||
           (k == LAB_INSPECT && in_list(inspect_shared_fields, name));
}

/* ---- typed lab fields ------------------------------------------------------ */

static const cJSON *member(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* 1 present and valid, 0 absent, -1 bad (err filled). */
static int get_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int32_t *out,
                   srv_error *err) {
    const cJSON *v = member(o, name);
    if (!v) return 0;
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(x) || floor(x) != x) return BAD(err, name, "'%s' must be an integer", name), -1;
    if (x < (double)lo || x > (double)hi)
        return BAD(err, name, "'%s' is %.15g; it must be in %lld..%lld", name, x, (long long)lo,
                   (long long)hi),
               -1;
    *out = (int32_t)x;
    return 1;
}

static int get_float(const cJSON *o, const char *name, double lo, double hi, float *out,
                     srv_error *err) {
    const cJSON *v = member(o, name);
    if (!v) return 0;
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(x)) return BAD(err, name, "'%s' must be a finite number", name), -1;
    if (x < lo || x > hi)
        return BAD(err, name, "'%s' is %g; it must be in %g..%g", name, x, lo, hi), -1;
    *out = (float)x;
    return 1;
}

static int get_bool(const cJSON *o, const char *name, bool *out, srv_error *err) {
    const cJSON *v = member(o, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return BAD(err, name, "'%s' must be a boolean", name), -1;
    *out = cJSON_IsTrue(v);
    return 1;
}

static int get_string(const cJSON *o, const char *name, const char **out, srv_error *err) {
    const cJSON *v = member(o, name);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return BAD(err, name, "'%s' must be a string", name), -1;
    *out = v->valuestring;
    return 1;
}

/* ---- parts ------------------------------------------------------------------ */

/* Splits the body: shared fields stay in root, own fields move to own. */
static bool split_fields(cJSON *root, cJSON *own, lab_kind kind, srv_error *err) {
    cJSON *v = root->child;
    while (v) {
        cJSON *next = v->next;
        if (is_own_field(kind, v->string)) {
            cJSON_AddItemToObject(own, v->string, cJSON_DetachItemViaPointer(root, v));
        } else if (!is_shared_field(kind, v->string)) {
            return BAD(err, v->string, "Unrecognized request argument supplied: %.60s", v->string);
        }
        v = next;
    }
    return true;
}

/* repetition_guard, guard_window, sampler_order, penalize_prompt. */
static bool parse_sampling_extras(const cJSON *o, nu_sampler_params *s, srv_error *err) {
    const char *order = NULL;
    if (get_float(o, "repetition_guard", 0, 10, &s->guard_strength, err) < 0 ||
        get_int(o, "guard_window", 2, 512, &s->guard_window, err) < 0 ||
        get_bool(o, "penalize_prompt", &s->penalize_prompt, err) < 0 ||
        get_string(o, "sampler_order", &order, err) < 0)
        return false;
    nu_error e;
    if (order && nu_sampler_order_parse(order, s->order, &s->n_stages, &e) != NU_OK)
        return BAD(err, "sampler_order", "%s", e.message);
    if (nu_sampler_params_check(s, &e) != NU_OK) return BAD(err, NULL, "%s", e.message);
    return true;
}

/* tokens: ids already chosen after the prompt (inspect). */
static bool parse_forced(const cJSON *o, const nu_model *m, lab_request *r, srv_error *err) {
    const cJSON *v = member(o, "tokens");
    if (!v) return true;
    if (!cJSON_IsArray(v)) return BAD(err, "tokens", "'tokens' must be an array of token ids");
    int n = cJSON_GetArraySize(v), n_vocab = nu_model_n_vocab(m);
    r->forced = malloc(((size_t)n + 1) * sizeof *r->forced);
    if (!r->forced) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (const cJSON *t = v->child; t; t = t->next) {
        double x = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (!(x >= 0 && x < n_vocab) || floor(x) != x)
            return BAD(err, "tokens", "'tokens' must hold token ids (0..%d)", n_vocab - 1);
        r->forced[r->n_forced++] = (int32_t)x;
    }
    return true;
}

static bool parse_own(const cJSON *o, const nu_model *m, bool have_draft, lab_request *r,
                      srv_error *err) {
    r->top_n = 10;
    r->curve = 256;
    if (get_int(o, "top_n", 1, LAB_MAX_TOP, &r->top_n, err) < 0 ||
        get_int(o, "curve_points", 0, LAB_MAX_CURVE, &r->curve, err) < 0)
        return false;
    switch (r->kind) {
    case LAB_INSPECT: return parse_forced(o, m, r, err);
    case LAB_BEAM:
        r->beam = nu_beam_default_params();
        r->beam.width = 3;
        r->beam_pruned = 4;
        return get_int(o, "beam_width", 1, LAB_MAX_BEAM_WIDTH, &r->beam.width, err) >= 0 &&
               get_float(o, "length_penalty", -10, 10, &r->beam.length_penalty, err) >= 0 &&
               get_bool(o, "early_stopping", &r->beam.early_stopping, err) >= 0 &&
               get_int(o, "pruned", 0, 2 * LAB_MAX_BEAM_WIDTH, &r->beam_pruned, err) >= 0;
    case LAB_SPECULATIVE: {
        const char *d = NULL;
        r->draft_max = 4;
        r->ngram_min = 1;
        r->ngram_max = 3;
        r->baseline = true;
        if (get_string(o, "draft", &d, err) < 0 ||
            get_int(o, "draft_max", 1, 16, &r->draft_max, err) < 0 ||
            get_int(o, "ngram_min", 1, 8, &r->ngram_min, err) < 0 ||
            get_int(o, "ngram_max", 1, 8, &r->ngram_max, err) < 0 ||
            get_bool(o, "baseline", &r->baseline, err) < 0)
            return false;
        if (r->ngram_max < r->ngram_min)
            return BAD(err, "ngram_max", "'ngram_max' must be at least 'ngram_min'");
        if (!d)
            r->draft = have_draft ? LAB_DRAFT_MODEL : LAB_DRAFT_LOOKUP;
        else if (!strcmp(d, "lookup"))
            r->draft = LAB_DRAFT_LOOKUP;
        else if (!strcmp(d, "self"))
            r->draft = LAB_DRAFT_SELF;
        else if (!strcmp(d, "model") && have_draft)
            r->draft = LAB_DRAFT_MODEL;
        else if (!strcmp(d, "model"))
            return BAD(err, "draft",
                       "this server has no draft model (start it with --draft MODEL); "
                       "use 'lookup' or 'self'");
        else
            return BAD(err, "draft", "'draft' must be \"lookup\", \"self\" or \"model\"");
        return true;
    }
    case LAB_SELF_CONSISTENCY: {
        const char *pat = NULL;
        r->paths = 5;
        if (get_int(o, "paths", 2, LAB_MAX_PATHS, &r->paths, err) < 0 ||
            get_string(o, "answer_pattern", &pat, err) < 0)
            return false;
        if (pat && !(r->answer_pattern = strdup(pat)))
            return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        /* the pattern is checked by running it on an empty text */
        char answer[8];
        int32_t votes, index;
        nu_error e;
        nu_generate_result none = {0};
        if (nu_majority_answer(&none, 0, pat, answer, sizeof answer, &votes, &index, &e) != NU_OK)
            return BAD(err, "answer_pattern", "%s", e.message);
        return true;
    }
    }
    return true;
}

/* The prompt's tokens (text tokenized with BOS), its length checked. */
static bool prompt_tokens(const nu_model *m, lab_request *r, srv_error *err) {
    const srv_prompt *p = &r->req.prompts[0];
    if (!p->text) {
        r->prompt = malloc((size_t)p->n_tokens * sizeof *r->prompt);
        if (!r->prompt) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(r->prompt, p->tokens, (size_t)p->n_tokens * sizeof *r->prompt);
        r->n_prompt = p->n_tokens;
        return true;
    }
    if (!(r->prompt_text = strdup(p->text)))
        return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    unsigned flags =
        NU_TOKENIZE_ADD_BOS | (r->req.gen.parse_special ? NU_TOKENIZE_PARSE_SPECIAL : 0);
    size_t len = strlen(p->text), n = 0, cap = len + 8;
    nu_error e;
    r->prompt = malloc(cap * sizeof *r->prompt);
    nu_status st =
        r->prompt ? nu_tokenize(m, p->text, len, flags, r->prompt, cap, &n, &e) : NU_ERR_NOMEM;
    if (st == NU_ERR_NOMEM) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != NU_OK) return BAD(err, "prompt", "%s", e.message);
    if (n == 0) return BAD(err, "prompt", "the prompt is empty");
    r->n_prompt = (int32_t)n;
    return true;
}

/* The tokens the run will hold at most must fit the lab's context. */
static bool check_room(const lab_request *r, int32_t n_ctx, srv_error *err) {
    int64_t need = r->n_prompt + r->n_forced;
    switch (r->kind) {
    case LAB_INSPECT: need += r->steps; break;
    case LAB_BEAM: need += (int64_t)r->beam.width * r->steps; break;
    case LAB_SPECULATIVE: need += r->steps + r->draft_max + 1; break;
    case LAB_SELF_CONSISTENCY: need += (int64_t)r->paths * r->steps; break;
    }
    if (need > n_ctx)
        return srv_fail(err, 413, "invalid_request_error", "context_length_exceeded", "max_tokens",
                        "this request needs %lld positions of the lab's context; it has %d",
                        (long long)need, n_ctx);
    return true;
}

static bool parse_all(cJSON *root, lab_kind kind, const nu_model *m, const srv_limits *lim,
                      const srv_defaults *defaults, int32_t n_ctx, bool have_draft, lab_request *r,
                      srv_error *err) {
    static const int32_t max_steps[] = {LAB_MAX_INSPECT_STEPS, LAB_MAX_BEAM_TOKENS,
                                        LAB_MAX_SPEC_TOKENS, LAB_MAX_PATH_TOKENS};
    static const int32_t default_steps[] = {16, 12, 64, 24};
    cJSON *own = cJSON_CreateObject();
    if (!own) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    bool ok = split_fields(root, own, kind, err);
    char *shared = ok ? cJSON_PrintUnformatted(root) : NULL;
    if (ok && !shared) ok = srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (ok) {
        ok = srv_parse_request(shared, strlen(shared), SRV_COMPLETION, lim, defaults, &r->req, err);
        r->req.kind = SRV_COMPLETION;
    }
    cJSON_free(shared);
    if (ok && r->req.n_prompts != 1)
        ok = BAD(err, "prompt", "the lab takes one prompt (a string or an array of token ids)");
    if (ok) ok = parse_own(own, m, have_draft, r, err);
    if (ok && kind != LAB_BEAM) ok = parse_sampling_extras(own, &r->req.gen.sampling, err);
    cJSON_Delete(own);
    if (!ok) return false;
    r->steps = r->req.gen.n_predict < 0 ? default_steps[kind] : r->req.gen.n_predict;
    if (r->steps < 1 || r->steps > max_steps[kind])
        return BAD(err, "max_tokens", "'max_tokens' must be in 1..%d here", max_steps[kind]);
    r->beam.n_predict = r->steps;
    r->beam.n_return = r->beam.width;
    if (!r->req.seed_given) {
        uint64_t seed;
        if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
            seed = (uint64_t)(nu_time_ms() * 1e3);
        r->req.gen.sampling.seed = seed;
    }
    if (kind == LAB_SELF_CONSISTENCY && !r->req.prompts[0].text)
        return BAD(err, "prompt", "self-consistency needs a text prompt");
    return srv_compile_constraint(m, &r->req, &r->grammar, err) && prompt_tokens(m, r, err) &&
           check_room(r, n_ctx, err);
}

bool lab_parse(const char *body, size_t len, lab_kind kind, const nu_model *m,
               const srv_limits *lim, const srv_defaults *defaults, int32_t n_ctx, bool have_draft,
               lab_request *out, srv_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    char msg[160];
    if (!json_body_check(body, len, msg, sizeof msg)) return BAD(err, NULL, "%s", msg);
    cJSON *root = len ? cJSON_ParseWithLength(body, len) : NULL;
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return BAD(err, NULL, "the request body must be a JSON object");
    }
    bool ok = parse_all(root, kind, m, lim, defaults, n_ctx, have_draft, out, err);
    cJSON_Delete(root);
    if (!ok) lab_request_free(out);
    return ok;
}

void lab_request_free(lab_request *r) {
    srv_request_free(&r->req);
    free(r->prompt);
    free(r->prompt_text);
    free(r->forced);
    free(r->answer_pattern);
    nu_grammar_free(r->grammar);
    lab_kind kind = r->kind;
    memset(r, 0, sizeof *r);
    r->kind = kind;
}
