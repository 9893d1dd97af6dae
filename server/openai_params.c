/* openai_params.c - request JSON to checked generation parameters.
 *
 * Every field is looked up by name, its type checked, its value checked
 * against the range the OpenAI API reference gives (or, for nucleus's own
 * extensions, the range the library accepts), and then stored. JSON null
 * counts as absent, as the reference makes most fields nullable. Fields
 * nobody knows are refused like the OpenAI API refuses them, so a typo
 * ("temprature") is an error rather than a silently ignored setting. */
#include "openai_params.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text_check.h"

#define MAX_STOP 16         /* stop strings per request */
#define MAX_STOP_LEN 1024   /* bytes per stop string */
#define MAX_LOGIT_BIAS 1024 /* logit_bias entries */
#define MAX_CHOICES 1024    /* strings of the "choice" extension */
#define MAX_BREAKERS 32     /* dry_sequence_breakers */
#define MAX_BANS 64         /* banned_strings, and banned_tokens entries */
#define MAX_BAN_LEN 256     /* bytes per banned string */
#define MAX_BAN_TOKENS 64   /* tokens per banned sequence */
#define MAX_TOP_LOGPROBS_COMPLETIONS 5

bool srv_fail(srv_error *err, int status, const char *type, const char *code, const char *param,
              const char *fmt, ...) {
    err->status = status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

/* A 400 invalid_request_error naming the field. */
#define BAD(err, param, ...) srv_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* ---- typed fields -------------------------------------------------------- */

/* The member `name` of obj, or NULL when it is absent or null. */
static const cJSON *field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* x in the fewest digits that read back as x (2.0000001 stays 2.0000001,
 * never "2"), so a refusal shows the value that was sent. */
static const char *shortest(double x, char buf[32]) {
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, 32, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    return buf;
}

/* The field helpers return 1 when the field is present and valid, 0 when it
 * is absent, -1 (err filled) when it has the wrong type or value. */
static int get_number(const cJSON *obj, const char *name, double lo, double hi, double *out,
                      srv_error *err) {
    const cJSON *v = field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return BAD(err, name, "'%s' must be a number", name), -1;
    double x = v->valuedouble;
    char a[32], b[32];
    if (!isfinite(x)) return BAD(err, name, "'%s' must be a finite number", name), -1;
    if (x < lo)
        return BAD(err, name, "'%s' is %s, less than the minimum of %s", name, shortest(x, a),
                   shortest(lo, b)),
               -1;
    if (x > hi)
        return BAD(err, name, "'%s' is %s, greater than the maximum of %s", name, shortest(x, a),
                   shortest(hi, b)),
               -1;
    *out = x;
    return 1;
}

/* Whether x is a whole number (of any size). */
static bool is_integer(double x) {
    return isfinite(x) && floor(x) == x;
}

/* Integers: whole numbers within [lo, hi] (and within what int64_t holds). */
static int get_int(const cJSON *obj, const char *name, int64_t lo, int64_t hi, int64_t *out,
                   srv_error *err) {
    const cJSON *v = field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !is_integer(v->valuedouble)) {
        BAD(err, name, "'%s' must be an integer", name);
        return -1;
    }
    double x = v->valuedouble;
    char a[32];
    if (x < (double)lo || x < -9.2e18) {
        BAD(err, name, "'%s' is %s, less than the minimum of %lld", name, shortest(x, a),
            (long long)lo);
        return -1;
    }
    if (x > (double)hi || x > 9.2e18) {
        BAD(err, name, "'%s' is %s, greater than the maximum of %lld", name, shortest(x, a),
            (long long)hi);
        return -1;
    }
    *out = (int64_t)x;
    return 1;
}

/* An int field stored into an int32_t. */
static int get_int32(const cJSON *obj, const char *name, int64_t lo, int64_t hi, int32_t *out,
                     srv_error *err) {
    int64_t x;
    int r = get_int(obj, name, lo, hi, &x, err);
    if (r == 1) *out = (int32_t)x;
    return r;
}

static int get_float(const cJSON *obj, const char *name, double lo, double hi, float *out,
                     srv_error *err) {
    double x;
    int r = get_number(obj, name, lo, hi, &x, err);
    if (r == 1) *out = (float)x;
    return r;
}

static int get_bool(const cJSON *obj, const char *name, bool *out, srv_error *err) {
    const cJSON *v = field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return BAD(err, name, "'%s' must be a boolean", name), -1;
    *out = cJSON_IsTrue(v);
    return 1;
}

static int get_string(const cJSON *obj, const char *name, const char **out, srv_error *err) {
    const cJSON *v = field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return BAD(err, name, "'%s' must be a string", name), -1;
    *out = v->valuestring;
    return 1;
}

static int get_object(const cJSON *obj, const char *name, const cJSON **out, srv_error *err) {
    const cJSON *v = field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsObject(v)) return BAD(err, name, "'%s' must be an object", name), -1;
    *out = v;
    return 1;
}

/* strdup that reports failure as a 500 error. */
static char *dup_or_fail(const char *s, srv_error *err) {
    char *d = strdup(s);
    if (!d) srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    return d;
}

static bool out_of_memory(srv_error *err) {
    return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* ---- which fields exist -------------------------------------------------- */

static const char *const common_fields[] = {
    /* OpenAI's */
    "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "seed", "user",
    "response_format",
    /* (nucleus's own fields are extension_fields) */
    NULL};
/* nucleus's own fields (Anthropic's Messages takes them too: srv_is_extension_field) */
static const char *const extension_fields[] = {
    "top_k", "min_p", "typical_p", "repetition_penalty", "penalty_last_n", "no_repeat_ngram_size",
    "min_tokens", "ignore_eos", "grammar", "regex", "choice", "beam_width", "length_penalty",
    "early_stopping", "watermark", "speculative", "draft_max",
    /* llama.cpp's server names */
    "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
    "dry_sequence_breakers", "xtc_probability", "xtc_threshold", "top_n_sigma", "dynatemp_range",
    "dynatemp_exponent", "mirostat", "mirostat_tau", "mirostat_eta",
    /* bans (the names of text-generation-webui and TabbyAPI) */
    "banned_strings", "banned_tokens", NULL};
static const char *const chat_fields[] = {
    "messages", "max_completion_tokens", "top_logprobs", "store", "metadata", "service_tier",
    "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort", "chat_template_kwargs",
    /* nucleus extension */
    "max_thinking_tokens", NULL};
static const char *const completion_fields[] = {"prompt", "echo",          "best_of",
                                                "suffix", "parse_special", NULL};
/* Fields of the OpenAI API that nucleus does not implement. */
static const char *const unsupported_fields[] = {
    "functions", "function_call", "audio", "modalities", "prediction", "web_search_options", NULL};

static bool in_list(const char *const *list, const char *name) {
    for (; *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

/* Refuses unknown fields, and known ones nucleus does not implement. */
static bool check_field_names(const cJSON *root, srv_kind kind, srv_error *err) {
    for (const cJSON *v = root->child; v; v = v->next) {
        const char *name = v->string;
        if (in_list(common_fields, name) || in_list(extension_fields, name)) continue;
        if (in_list(kind == SRV_CHAT ? chat_fields : completion_fields, name)) continue;
        if (in_list(unsupported_fields, name)) {
            if (cJSON_IsNull(v) || (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0)) continue;
            return BAD(err, name, "'%s' is not supported by this server", name);
        }
        return BAD(err, name, "Unrecognized request argument supplied: %s", name);
    }
    return true;
}

bool srv_is_extension_field(const char *name) {
    return in_list(extension_fields, name) || !strcmp(name, "seed") ||
           !strcmp(name, "chat_template_kwargs") || !strcmp(name, "max_thinking_tokens");
}

/* ---- sampling ------------------------------------------------------------ */

/* The OpenAI fields that shape sampling. */
static bool parse_openai_sampling(const cJSON *root, srv_request *r, srv_error *err) {
    nu_sampler_params *s = &r->gen.sampling;
    if (get_float(root, "temperature", 0, 2, &s->temperature, err) < 0) return false;
    int got = get_float(root, "top_p", 0, 1, &s->top_p, err);
    if (got < 0) return false;
    if (got && s->top_p == 0) s->top_p = 1e-9f; /* keep only the most likely token */
    if (get_float(root, "presence_penalty", -2, 2, &s->presence_penalty, err) < 0) return false;
    if (get_float(root, "frequency_penalty", -2, 2, &s->frequency_penalty, err) < 0) return false;
    /* the seed's value as a double first (its type and rough range); exact_seed
     * reads the digits themselves, which a double rounds past 2^53 */
    double seed;
    if ((got = get_number(root, "seed", -HUGE_VAL, HUGE_VAL, &seed, err)) < 0) return false;
    if (got && !is_integer(seed)) return BAD(err, "seed", "'seed' must be an integer");
    if (got) s->seed = fabs(seed) < 0x1p53 ? (uint64_t)(int64_t)seed : 0; /* exact_seed decides */
    r->seed_given = got == 1;
    return true;
}

/* The seed as written: any int64_t, exactly (-9223372036854775808 ..
 * 9223372036854775807). A seed written with a fraction or an exponent is
 * taken as its double only while that is exact (below 2^53). */
static bool exact_seed(const char *body, size_t len, srv_request *r, srv_error *err) {
    const char *text = NULL;
    size_t n = json_member_text(body, len, "seed", &text);
    char buf[64];
    bool plain = n > 0 && n < sizeof buf;
    for (size_t i = 0; plain && i < n; i++)
        plain = (text[i] >= '0' && text[i] <= '9') || (i == 0 && text[i] == '-');
    if (!plain) {
        const cJSON *v = cJSON_ParseWithLength(text, n);
        double x = v && cJSON_IsNumber(v) ? v->valuedouble : 0;
        cJSON_Delete((cJSON *)v);
        if (fabs(x) >= 0x1p53)
            return BAD(err, "seed",
                       "'seed' must be written as digits (no fraction or exponent) when it is "
                       "2^53 or more in size, so that it is read exactly");
        return true;
    }
    memcpy(buf, text, n);
    buf[n] = 0;
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE)
        return BAD(err, "seed", "'seed' is %s, %s", buf,
                   v < 0 ? "less than the minimum of -9223372036854775808"
                         : "greater than the maximum of 9223372036854775807");
    r->gen.sampling.seed = (uint64_t)v;
    return true;
}

/* The sampling extensions: the rest of what the sampler chain can do. */
static bool parse_extra_sampling(const cJSON *root, srv_request *r, const srv_limits *lim,
                                 srv_error *err) {
    nu_sampler_params *s = &r->gen.sampling;
    return get_int32(root, "top_k", 0, INT32_MAX, &s->top_k, err) >= 0 &&
           get_float(root, "min_p", 0, 1, &s->min_p, err) >= 0 &&
           get_float(root, "typical_p", 1e-9, 1, &s->typical_p, err) >= 0 &&
           get_float(root, "repetition_penalty", 1e-6, 100, &s->repeat_penalty, err) >= 0 &&
           get_int32(root, "penalty_last_n", -1, INT32_MAX, &s->penalty_last_n, err) >= 0 &&
           get_int32(root, "no_repeat_ngram_size", 0, 1024, &s->no_repeat_ngram_size, err) >= 0 &&
           get_int32(root, "min_tokens", 0, lim->max_tokens, &s->min_tokens, err) >= 0 &&
           get_bool(root, "ignore_eos", &s->ignore_eos, err) >= 0;
}

/* llama.cpp's samplers, with its server's field names and nucleus's ranges. */
static bool parse_llama_sampling(const cJSON *root, srv_request *r, srv_error *err) {
    nu_sampler_params *s = &r->gen.sampling;
    return get_float(root, "dry_multiplier", 0, 100, &s->dry_multiplier, err) >= 0 &&
           get_float(root, "dry_base", 1, 100, &s->dry_base, err) >= 0 &&
           get_int32(root, "dry_allowed_length", 0, 1 << 30, &s->dry_allowed_length, err) >= 0 &&
           get_int32(root, "dry_penalty_last_n", -1, INT32_MAX, &s->dry_penalty_last_n, err) >= 0 &&
           get_float(root, "xtc_probability", 0, 1, &s->xtc_probability, err) >= 0 &&
           get_float(root, "xtc_threshold", 0, 1, &s->xtc_threshold, err) >= 0 &&
           get_float(root, "top_n_sigma", -1, 100, &s->top_n_sigma, err) >= 0 &&
           get_float(root, "dynatemp_range", 0, 100, &s->dynatemp_range, err) >= 0 &&
           get_float(root, "dynatemp_exponent", 0, 100, &s->dynatemp_exponent, err) >= 0 &&
           get_int32(root, "mirostat", 0, 2, &s->mirostat, err) >= 0 &&
           get_float(root, "mirostat_tau", 0, 100, &s->mirostat_tau, err) >= 0 &&
           get_float(root, "mirostat_eta", 0, 1, &s->mirostat_eta, err) >= 0;
}

/* An array of at most max non-empty strings of at most max_len bytes into
 * a new array *out (count *n); 1 given, 0 absent, -1 err filled. */
static int get_string_list(const cJSON *root, const char *name, int max, size_t max_len,
                           char ***out, int32_t *n, srv_error *err) {
    const cJSON *v = field(root, name);
    if (!v) return 0;
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (count < 0 || count > max)
        return BAD(err, name, "'%s' must be an array of at most %d strings", name, max), -1;
    if (!(*out = calloc((size_t)count + 1, sizeof **out))) return out_of_memory(err), -1;
    for (const cJSON *s = v->child; s; s = s->next) {
        size_t len = cJSON_IsString(s) ? strlen(s->valuestring) : 0;
        if (len == 0 || len > max_len)
            return BAD(err, name, "'%s' must hold strings of 1 to %zu bytes", name, max_len), -1;
        if (!((*out)[(*n)++] = dup_or_fail(s->valuestring, err))) return -1;
    }
    return 1;
}

/* dry_sequence_breakers: strings of 1..40 bytes ([] for none). */
static bool parse_breakers(const cJSON *root, srv_request *r, srv_error *err) {
    int32_t n = 0;
    int got = get_string_list(root, "dry_sequence_breakers", MAX_BREAKERS, NU_DRY_MAX_BREAKER_LEN,
                              &r->dry_breakers, &n, err);
    if (got == 1) {
        r->gen.sampling.dry_sequence_breakers = (const char *const *)r->dry_breakers;
        r->gen.sampling.n_dry_sequence_breakers = n;
    }
    return got >= 0;
}

/* One entry of banned_tokens: a token id, or an array of them (a sequence). */
static bool add_ban_seq(srv_request *r, const cJSON *v, int32_t i, const srv_limits *lim,
                        srv_error *err) {
    const char *msg = "'banned_tokens' entries must be token ids or arrays of 1 to %d token ids "
                      "(0..%d)";
    int32_t *ids = r->ban_ids + (size_t)i * MAX_BAN_TOKENS, n = 0;
    int len = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    if (len < 1 || len > MAX_BAN_TOKENS)
        return BAD(err, "banned_tokens", msg, MAX_BAN_TOKENS, lim->n_vocab - 1);
    for (const cJSON *t = cJSON_IsArray(v) ? v->child : v; t;
         t = cJSON_IsArray(v) ? t->next : NULL) {
        if (!cJSON_IsNumber(t) || !is_integer(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= lim->n_vocab)
            return BAD(err, "banned_tokens", msg, MAX_BAN_TOKENS, lim->n_vocab - 1);
        ids[n++] = (int32_t)t->valuedouble;
    }
    r->ban_seqs[i] = (nu_token_seq){ids, n};
    return true;
}

/* banned_strings (texts the output never contains) and banned_tokens. */
static bool parse_bans(const cJSON *root, srv_request *r, const srv_limits *lim, srv_error *err) {
    nu_sampler_params *s = &r->gen.sampling;
    int32_t n = 0;
    int got = get_string_list(root, "banned_strings", MAX_BANS, MAX_BAN_LEN, &r->banned, &n, err);
    if (got < 0) return false;
    s->banned_strings = (const char *const *)r->banned;
    s->n_banned_strings = n;
    const cJSON *v = field(root, "banned_tokens");
    if (!v) return true;
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (count < 0 || count > MAX_BANS)
        return BAD(err, "banned_tokens",
                   "'banned_tokens' must be an array of at most %d token ids or id arrays",
                   MAX_BANS);
    r->ban_seqs = calloc((size_t)count + 1, sizeof *r->ban_seqs);
    r->ban_ids = malloc(((size_t)count + 1) * MAX_BAN_TOKENS * sizeof *r->ban_ids);
    if (!r->ban_seqs || !r->ban_ids) return out_of_memory(err);
    int32_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++)
        if (!add_ban_seq(r, e, i, lim, err)) return false;
    s->banned_tokens = r->ban_seqs;
    s->n_banned_tokens = count;
    return true;
}

/* Whether text is a token id in decimal (what logit_bias keys are). */
static bool parse_token_key(const char *key, int32_t n_vocab, int32_t *token) {
    size_t len = strlen(key);
    if (len == 0 || len > 10) return false;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (key[i] < '0' || key[i] > '9') return false;
        v = v * 10 + (key[i] - '0');
    }
    if (v >= n_vocab) return false;
    *token = (int32_t)v;
    return true;
}

/* logit_bias: {"token id": bias in -100..100}. */
static bool parse_logit_bias(const cJSON *root, srv_request *r, const srv_limits *lim,
                             srv_error *err) {
    const cJSON *obj;
    int got = get_object(root, "logit_bias", &obj, err);
    if (got <= 0) return got == 0;
    int n = cJSON_GetArraySize(obj);
    if (n > MAX_LOGIT_BIAS)
        return BAD(err, "logit_bias", "'logit_bias' has %d entries; at most %d", n, MAX_LOGIT_BIAS);
    if (n == 0) return true;
    if (!(r->logit_bias = calloc((size_t)n, sizeof *r->logit_bias))) return out_of_memory(err);
    int i = 0;
    for (const cJSON *v = obj->child; v; v = v->next, i++) {
        nu_logit_bias *b = &r->logit_bias[i];
        if (!parse_token_key(v->string, lim->n_vocab, &b->token))
            return BAD(err, "logit_bias", "'logit_bias' key '%.40s' is not a token id (0..%d)",
                       v->string, lim->n_vocab - 1);
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < -100 ||
            v->valuedouble > 100)
            return BAD(err, "logit_bias", "'logit_bias' values must be numbers in -100..100");
        b->bias = (float)v->valuedouble;
    }
    r->gen.sampling.logit_bias = r->logit_bias;
    r->gen.sampling.n_logit_bias = n;
    return true;
}

/* ---- stop strings, streaming, log-probs ---------------------------------- */

static bool add_stop(srv_request *r, const cJSON *v, srv_error *err) {
    if (!cJSON_IsString(v))
        return BAD(err, "stop", "'stop' must be a string or an array of strings");
    size_t len = strlen(v->valuestring);
    if (len == 0) return BAD(err, "stop", "'stop' strings must not be empty");
    if (len > MAX_STOP_LEN)
        return BAD(err, "stop", "'stop' strings may have at most %d bytes", MAX_STOP_LEN);
    if (r->gen.n_stop == MAX_STOP)
        return BAD(err, "stop", "'stop' may have at most %d strings", MAX_STOP);
    if (!(r->stop[r->gen.n_stop] = dup_or_fail(v->valuestring, err))) return false;
    r->gen.n_stop++;
    return true;
}

static bool parse_stop(const cJSON *root, srv_request *r, srv_error *err) {
    const cJSON *v = field(root, "stop");
    if (!v) return true;
    if (!(r->stop = calloc(MAX_STOP, sizeof *r->stop))) return out_of_memory(err);
    r->gen.stop = (const char *const *)r->stop;
    if (!cJSON_IsArray(v)) return add_stop(r, v, err);
    for (const cJSON *s = v->child; s; s = s->next)
        if (!add_stop(r, s, err)) return false;
    return true;
}

static bool parse_stream(const cJSON *root, srv_request *r, srv_error *err) {
    if (get_bool(root, "stream", &r->stream, err) < 0) return false;
    const cJSON *opt;
    int got = get_object(root, "stream_options", &opt, err);
    if (got <= 0) return got == 0;
    if (!r->stream)
        return BAD(err, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    for (const cJSON *v = opt->child; v; v = v->next)
        if (strcmp(v->string, "include_usage") && strcmp(v->string, "include_obfuscation"))
            return BAD(err, "stream_options", "Unrecognized stream option: %.60s", v->string);
    bool ignored;
    return get_bool(opt, "include_usage", &r->include_usage, err) >= 0 &&
           get_bool(opt, "include_obfuscation", &ignored, err) >= 0;
}

/* Chat: logprobs (bool) and top_logprobs (0..20, needs logprobs).
 * Completions: logprobs (0..5 alternatives). */
static bool parse_logprobs(const cJSON *root, srv_request *r, srv_error *err) {
    if (r->kind == SRV_COMPLETION) {
        int32_t k;
        int got = get_int32(root, "logprobs", 0, MAX_TOP_LOGPROBS_COMPLETIONS, &k, err);
        if (got == 1) r->logprobs = true, r->gen.logprobs = k;
        return got >= 0;
    }
    int32_t top = 0;
    int got_top = get_int32(root, "top_logprobs", 0, NU_MAX_TOP_LOGPROBS, &top, err);
    if (got_top < 0 || get_bool(root, "logprobs", &r->logprobs, err) < 0) return false;
    if (got_top && !r->logprobs)
        return BAD(err, "top_logprobs", "'logprobs' must be true when 'top_logprobs' is used");
    if (r->logprobs) r->gen.logprobs = top;
    return true;
}

/* max_tokens (and chat's max_completion_tokens); -1 when neither is given. */
static bool parse_max_tokens(const cJSON *root, srv_request *r, const srv_limits *lim,
                             srv_error *err) {
    int64_t lo = r->kind == SRV_CHAT ? 1 : 0;
    int32_t a = -1, b = -1;
    if (get_int32(root, "max_tokens", lo, lim->max_tokens, &a, err) < 0) return false;
    if (r->kind == SRV_CHAT &&
        get_int32(root, "max_completion_tokens", lo, lim->max_tokens, &b, err) < 0)
        return false;
    if (a >= 0 && b >= 0 && a != b)
        return BAD(err, "max_tokens", "'max_tokens' and 'max_completion_tokens' disagree");
    r->gen.n_predict = b >= 0 ? b : a;
    return true;
}

/* ---- constrained output -------------------------------------------------- */

static bool parse_response_format(const cJSON *root, srv_request *r, srv_error *err) {
    const cJSON *rf, *js;
    const char *type;
    int got = get_object(root, "response_format", &rf, err);
    if (got <= 0) return got == 0;
    if (get_string(rf, "type", &type, err) <= 0)
        return BAD(err, "response_format", "'response_format.type' must be a string");
    if (!strcmp(type, "text")) return true;
    if (!strcmp(type, "json_object")) {
        r->format = SRV_FORMAT_JSON_OBJECT;
        return true;
    }
    if (strcmp(type, "json_schema"))
        return BAD(err, "response_format",
                   "'response_format.type' must be text, json_object or json_schema");
    if (get_object(rf, "json_schema", &js, err) <= 0)
        return BAD(err, "response_format", "'response_format.json_schema' must be an object");
    const char *name;
    bool strict;
    const cJSON *schema;
    if (get_string(js, "name", &name, err) < 0 || get_bool(js, "strict", &strict, err) < 0)
        return false;
    if (get_object(js, "schema", &schema, err) <= 0)
        return BAD(err, "response_format",
                   "'response_format.json_schema.schema' must be an object");
    r->format = SRV_FORMAT_JSON_SCHEMA;
    if (!(r->json_schema = cJSON_PrintUnformatted(schema))) return out_of_memory(err);
    return true;
}

static bool parse_choice_list(const cJSON *root, srv_request *r, srv_error *err) {
    const cJSON *v = field(root, "choice");
    if (!v) return true;
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 1 || n > MAX_CHOICES)
        return BAD(err, "choice", "'choice' must be an array of 1 to %d strings", MAX_CHOICES);
    if (!(r->choices = calloc((size_t)n, sizeof *r->choices))) return out_of_memory(err);
    for (const cJSON *s = v->child; s; s = s->next) {
        if (!cJSON_IsString(s)) return BAD(err, "choice", "'choice' must be an array of strings");
        if (!(r->choices[r->n_choices++] = dup_or_fail(s->valuestring, err))) return false;
    }
    return true;
}

/* grammar, regex, choice and response_format: at most one constraint. */
static bool parse_constraints(const cJSON *root, srv_request *r, srv_error *err) {
    const char *g = NULL, *re = NULL;
    if (get_string(root, "grammar", &g, err) < 0 || get_string(root, "regex", &re, err) < 0 ||
        !parse_choice_list(root, r, err) || !parse_response_format(root, r, err))
        return false;
    int n = (g != NULL) + (re != NULL) + (r->n_choices > 0) + (r->format != SRV_FORMAT_TEXT);
    if (n > 1)
        return BAD(err, "grammar",
                   "use at most one of 'grammar', 'regex', 'choice' and a JSON 'response_format'");
    if (g && !(r->grammar = dup_or_fail(g, err))) return false;
    if (re && !(r->regex = dup_or_fail(re, err))) return false;
    return true;
}

/* ---- watermark ----------------------------------------------------------- */

/* A key given as text or as an integer (written in decimal, so that 42 and
 * "42" are the same key); NULL with err filled otherwise. */
static char *watermark_key(const cJSON *v, const char *param, srv_error *err) {
    char digits[32];
    const char *text = NULL;
    if (cJSON_IsString(v) && v->valuestring[0]) {
        text = v->valuestring;
    } else if (cJSON_IsNumber(v) && is_integer(v->valuedouble) && fabs(v->valuedouble) < 9e18) {
        snprintf(digits, sizeof digits, "%lld", (long long)v->valuedouble);
        text = digits;
    }
    if (!text) {
        BAD(err, param, "'%s' must be a non-empty string or an integer", param);
        return NULL;
    }
    return dup_or_fail(text, err);
}

/* A number member of the watermark fields, in [lo, hi] (exclusive bounds
 * when open): 1 found, 0 absent, -1 err filled. */
static int watermark_number(const cJSON *obj, const char *prefix, const char *name, double lo,
                            double hi, bool open, double *out, srv_error *err) {
    char param[48];
    snprintf(param, sizeof param, "%s%s", prefix, name);
    const cJSON *v = field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(err, param, "'%s' must be a number", param), -1;
    double x = v->valuedouble;
    if (open ? !(x > lo && x < hi) : !(x >= lo && x <= hi))
        return BAD(err, param, "'%s' is %g; it must be %s %g and %s %g", param, x,
                   open ? "above" : "at least", lo, open ? "below" : "at most", hi),
               -1;
    *out = x;
    return 1;
}

bool srv_parse_watermark(const cJSON *obj, const char *prefix, nu_watermark_params *p, char **key,
                         srv_error *err) {
    char param[48];
    snprintf(param, sizeof param, "%skey", prefix);
    const cJSON *k = field(obj, "key");
    if (!k) return BAD(err, param, "'%s' is required (a string or an integer)", param);
    if (!(*key = watermark_key(k, param, err))) return false;
    double gamma = p->gamma, delta = p->delta, context = p->context;
    if (watermark_number(obj, prefix, "gamma", 0, 1, true, &gamma, err) < 0 ||
        watermark_number(obj, prefix, "delta", 0, 100, false, &delta, err) < 0 ||
        watermark_number(obj, prefix, "context", 1, NU_WATERMARK_MAX_CONTEXT, false, &context,
                         err) < 0)
        return false;
    snprintf(param, sizeof param, "%scontext", prefix);
    if (!is_integer(context)) return BAD(err, param, "'%s' must be an integer", param);
    /* a gamma just inside (0, 1) may round to 0 or 1 as a float */
    snprintf(param, sizeof param, "%sgamma", prefix);
    if (!((float)gamma > 0.0f && (float)gamma < 1.0f))
        return BAD(err, param, "'%s' %g is too close to 0 or 1", param, gamma);
    p->key = *key, p->gamma = (float)gamma, p->delta = (float)delta, p->context = (int32_t)context;
    return true;
}

/* watermark (nucleus extension): {"key", "gamma", "delta", "context"}; false
 * or null is no watermark. */
static bool parse_watermark(const cJSON *root, srv_request *r, srv_error *err) {
    const cJSON *w = field(root, "watermark");
    if (!w || cJSON_IsFalse(w)) return true;
    if (!cJSON_IsObject(w))
        return BAD(err, "watermark",
                   "'watermark' must be an object {\"key\", \"gamma\", "
                   "\"delta\", \"context\"}");
    for (const cJSON *v = w->child; v; v = v->next)
        if (strcmp(v->string, "key") && strcmp(v->string, "gamma") && strcmp(v->string, "delta") &&
            strcmp(v->string, "context"))
            return BAD(err, "watermark", "Unrecognized watermark field: %.60s", v->string);
    return srv_parse_watermark(w, "watermark.", &r->gen.sampling.watermark, &r->watermark_key, err);
}

/* ---- beam search --------------------------------------------------------- */

/* What beam search cannot do alongside. */
static bool check_beam_compatible(const srv_request *r, srv_error *err) {
    const char *what = r->gen.n_stop                                           ? "stop"
                       : r->logprobs                                           ? "logprobs"
                       : r->gen.echo                                           ? "echo"
                       : r->best_of > r->gen.n                                 ? "best_of"
                       : (r->grammar || r->regex || r->n_choices || r->format) ? "grammar"
                       : r->watermark_key                                      ? "watermark"
                       : r->gen.sampling.n_banned_strings                      ? "banned_strings"
                       : r->gen.sampling.n_banned_tokens                       ? "banned_tokens"
                       : r->tools.choice != SRV_TOOLS_NONE                     ? "tools"
                       : r->reasoning.max_tokens >= 0 ? "max_thinking_tokens"
                                                      : NULL;
    if (what)
        return BAD(err, what, "'%s' cannot be combined with beam search ('beam_width')", what);
    for (int32_t i = 0; i < r->n_prompts; i++)
        if (!r->prompts[i].text)
            return BAD(err, "prompt", "beam search needs a text prompt, not token ids");
    return true;
}

static bool parse_beam(const cJSON *root, srv_request *r, const srv_limits *lim, srv_error *err) {
    nu_beam_params *b = &r->beam_params;
    int got = get_int32(root, "beam_width", 1, lim->max_beam_width, &b->width, err);
    if (got < 0 || get_float(root, "length_penalty", -10, 10, &b->length_penalty, err) < 0 ||
        get_bool(root, "early_stopping", &b->early_stopping, err) < 0)
        return false;
    if (!got) {
        if (field(root, "length_penalty") || field(root, "early_stopping"))
            return BAD(err, "beam_width",
                       "'length_penalty' and 'early_stopping' need 'beam_width' (beam search)");
        return true;
    }
    r->beam = true;
    if (r->gen.n > b->width)
        return BAD(err, "n", "'n' (%d) may not exceed 'beam_width' (%d)", r->gen.n, b->width);
    b->n_return = r->gen.n;
    b->parse_special = r->gen.parse_special;
    return check_beam_compatible(r, err);
}

/* ---- tools (function calling) ------------------------------------------- */

#define MAX_TOOLS 128 /* what the OpenAI API allows */

/* A function name as the OpenAI API allows it: 1 to 64 of [A-Za-z0-9_-]. */
static bool valid_function_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return false;
    return true;
}

/* Refuses members of obj other than the allowed ones (param names obj). */
static bool only_members(const cJSON *obj, const char *const *allowed, const char *param,
                         srv_error *err) {
    for (const cJSON *v = obj->child; v; v = v->next)
        if (!in_list(allowed, v->string))
            return BAD(err, param, "'%s' has an unknown member '%.40s'", param, v->string);
    return true;
}

/* tools[i].function: {"name", "description", "parameters", "strict"}. */
static bool parse_function(const cJSON *fn, const char *param, srv_tool *t, srv_error *err) {
    static const char *const members[] = {"name", "description", "parameters", "strict", NULL};
    char p[128];
    const char *name = NULL, *desc;
    const cJSON *params = NULL;
    bool strict;
    if (!only_members(fn, members, param, err)) return false;
    snprintf(p, sizeof p, "%s.name", param);
    if (get_string(fn, "name", &name, err) <= 0 || !valid_function_name(name))
        return BAD(err, p, "'%s' must be a function name of 1 to 64 letters, digits, '_' or '-'",
                   p);
    snprintf(p, sizeof p, "%s.description", param);
    if (get_string(fn, "description", &desc, err) < 0)
        return BAD(err, p, "'%s' must be a string", p);
    snprintf(p, sizeof p, "%s.strict", param);
    if (get_bool(fn, "strict", &strict, err) < 0) return BAD(err, p, "'%s' must be a boolean", p);
    snprintf(p, sizeof p, "%s.parameters", param);
    if (get_object(fn, "parameters", &params, err) < 0)
        return BAD(err, p, "'%s' must be a JSON Schema object", p);
    if (!(t->name = dup_or_fail(name, err))) return false;
    /* no parameters (NULL): a function without arguments */
    return !params || (t->parameters = cJSON_PrintUnformatted(params)) || out_of_memory(err);
}

/* tools[i]: {"type": "function", "function": {...}}; names must be unique. */
static bool parse_tool(const cJSON *v, int32_t i, srv_tools *tools, srv_error *err) {
    static const char *const members[] = {"type", "function", NULL};
    char param[40], p[64];
    snprintf(param, sizeof param, "tools[%d]", (int)i);
    const char *type = NULL;
    const cJSON *fn = NULL;
    if (!cJSON_IsObject(v)) return BAD(err, param, "'%s' must be an object", param);
    if (!only_members(v, members, param, err)) return false;
    snprintf(p, sizeof p, "%s.type", param);
    if (get_string(v, "type", &type, err) <= 0 || strcmp(type, "function"))
        return BAD(err, p, "'%s' must be \"function\" (the only kind of tool supported)", p);
    snprintf(p, sizeof p, "%s.function", param);
    if (get_object(v, "function", &fn, err) <= 0)
        return BAD(err, p, "'%s' must be an object with the function's name", p);
    srv_tool *t = &tools->list[tools->n++];
    if (!parse_function(fn, p, t, err)) return false;
    for (int32_t k = 0; k < i; k++)
        if (!strcmp(tools->list[k].name, t->name))
            return BAD(err, param, "two tools are named '%s'", t->name);
    return true;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}. */
static bool parse_tool_choice(const cJSON *root, srv_tools *t, srv_error *err) {
    const cJSON *v = field(root, "tool_choice"), *fn = NULL;
    t->choice = t->n ? SRV_TOOLS_AUTO : SRV_TOOLS_NONE;
    if (!v) return true;
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "none")) {
        t->choice = SRV_TOOLS_NONE;
        return true;
    }
    if (!t->n) return BAD(err, "tool_choice", "'tool_choice' needs 'tools'");
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "auto")) return true;
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "required")) {
        t->choice = SRV_TOOLS_REQUIRED;
        return true;
    }
    const char *type = NULL, *name = NULL;
    if (!cJSON_IsObject(v) || get_string(v, "type", &type, err) <= 0 || strcmp(type, "function") ||
        get_object(v, "function", &fn, err) <= 0 || get_string(fn, "name", &name, err) <= 0)
        return BAD(err, "tool_choice",
                   "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                   "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    for (int32_t i = 0; i < t->n; i++)
        if (!strcmp(t->list[i].name, name)) {
            t->choice = SRV_TOOLS_NAMED;
            t->named = i;
            return true;
        }
    return BAD(err, "tool_choice",
               "'tool_choice' names the function '%.64s', which is not in 'tools'", name);
}

/* tools, tool_choice and parallel_tool_calls. */
static bool parse_tools(const cJSON *root, srv_request *r, srv_error *err) {
    srv_tools *t = &r->tools;
    const cJSON *v = field(root, "tools");
    t->parallel = true;
    if (get_bool(root, "parallel_tool_calls", &t->parallel, err) < 0) return false;
    int n = v ? (cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1) : 0;
    if (n < 0 || n > MAX_TOOLS)
        return BAD(err, "tools", "'tools' must be an array of at most %d tools", MAX_TOOLS);
    if (n > 0) {
        if (!(t->list = calloc((size_t)n, sizeof *t->list))) return out_of_memory(err);
        int32_t i = 0;
        for (const cJSON *tool = v->child; tool; tool = tool->next, i++)
            if (!parse_tool(tool, i, t, err)) return false;
        if (!(t->json = cJSON_PrintUnformatted(v))) return out_of_memory(err);
    }
    return parse_tool_choice(root, t, err);
}

/* A forced call needs the tools' grammar, which cannot be combined with another. */
static bool check_tools_compatible(const srv_request *r, srv_error *err) {
    if (r->tools.choice < SRV_TOOLS_REQUIRED) return true;
    if (r->grammar || r->regex || r->n_choices || r->format != SRV_FORMAT_TEXT)
        return BAD(err, "tool_choice",
                   "a required tool call cannot be combined with 'response_format', 'grammar', "
                   "'regex' or 'choice'");
    return true;
}

/* ---- chat messages ------------------------------------------------------- */

/* Appends text to *dst (a malloc'd string, may be NULL). */
static bool append(char **dst, const char *text, srv_error *err) {
    size_t a = *dst ? strlen(*dst) : 0, b = strlen(text);
    char *s = realloc(*dst, a + b + 1);
    if (!s) return out_of_memory(err);
    memcpy(s + a, text, b + 1);
    *dst = s;
    return true;
}

/* content: a string, an array of text parts, or null. */
static bool parse_content(const cJSON *msg, srv_message *m, srv_error *err) {
    const cJSON *c = field(msg, "content");
    if (!c) return append(&m->content, "", err);
    if (cJSON_IsString(c)) return append(&m->content, c->valuestring, err);
    if (!cJSON_IsArray(c))
        return BAD(err, "messages", "message 'content' must be a string or an array of parts");
    if (!append(&m->content, "", err)) return false;
    for (const cJSON *part = c->child; part; part = part->next) {
        const char *type, *text;
        if (!cJSON_IsObject(part) || get_string(part, "type", &type, err) <= 0)
            return BAD(err, "messages", "each content part must be an object with a 'type'");
        if (strcmp(type, "text"))
            return srv_fail(err, 400, "invalid_request_error", "not_supported", "messages",
                            "content parts of type '%.40s' are not supported (text only)", type);
        if (get_string(part, "text", &text, err) <= 0)
            return BAD(err, "messages", "a text part needs a 'text' string");
        if (!append(&m->content, text, err)) return false;
    }
    return true;
}

static bool parse_role(const cJSON *msg, srv_message *m, srv_error *err) {
    const char *role;
    if (get_string(msg, "role", &role, err) <= 0)
        return BAD(err, "messages", "each message needs a 'role' string");
    if (!strcmp(role, "developer")) role = "system";
    if (!strcmp(role, "function"))
        return srv_fail(err, 400, "invalid_request_error", "not_supported", "messages",
                        "messages with role 'function' (deprecated function calling) are not "
                        "supported; use 'tools' and messages with role 'tool'");
    if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
        strcmp(role, "tool"))
        return BAD(err, "messages", "unknown message role '%.40s'", role);
    return (m->role = dup_or_fail(role, err)) != NULL;
}

/* One entry of an assistant message's tool_calls, checked and appended to
 * out as {id, type, function: {name, arguments}}. */
static bool parse_tool_call(const cJSON *tc, cJSON *out, srv_error *err) {
    const cJSON *fn = NULL;
    const char *id = NULL, *type = "function", *name = NULL, *args = NULL;
    if (!cJSON_IsObject(tc) || get_string(tc, "id", &id, err) <= 0 ||
        get_string(tc, "type", &type, err) < 0 || get_object(tc, "function", &fn, err) <= 0 ||
        get_string(fn, "name", &name, err) <= 0 || get_string(fn, "arguments", &args, err) <= 0)
        return BAD(err, "messages",
                   "each entry of 'tool_calls' needs an 'id' string and a 'function' with "
                   "'name' and 'arguments' strings");
    if (strcmp(type, "function"))
        return BAD(err, "messages", "tool calls of type '%.40s' are not supported", type);
    cJSON *o = cJSON_CreateObject(), *f = NULL;
    bool ok = o && cJSON_AddStringToObject(o, "id", id) &&
              cJSON_AddStringToObject(o, "type", "function") &&
              (f = cJSON_AddObjectToObject(o, "function")) &&
              cJSON_AddStringToObject(f, "name", name) &&
              cJSON_AddStringToObject(f, "arguments", args) && cJSON_AddItemToArray(out, o);
    if (!ok) cJSON_Delete(o);
    return ok || out_of_memory(err);
}

/* tool_calls of an assistant message: stored as JSON text (none when empty). */
static bool parse_tool_calls(const cJSON *msg, srv_message *m, srv_error *err) {
    const cJSON *v = field(msg, "tool_calls");
    if (!v) return true;
    if (strcmp(m->role, "assistant"))
        return BAD(err, "messages", "only assistant messages may have 'tool_calls'");
    if (!cJSON_IsArray(v)) return BAD(err, "messages", "'tool_calls' must be an array");
    if (!v->child) return true;
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return out_of_memory(err);
    bool ok = true;
    for (const cJSON *tc = v->child; tc && ok; tc = tc->next) ok = parse_tool_call(tc, arr, err);
    if (ok && !(m->tool_calls = cJSON_PrintUnformatted(arr))) ok = out_of_memory(err);
    cJSON_Delete(arr);
    return ok;
}

/* name (any message) and tool_call_id (required on tool messages, only there). */
static bool parse_message_ids(const cJSON *msg, srv_message *m, srv_error *err) {
    const char *name = NULL, *id = NULL;
    if (get_string(msg, "name", &name, err) < 0) return false;
    if (get_string(msg, "tool_call_id", &id, err) < 0)
        return BAD(err, "messages", "'tool_call_id' must be a string");
    if (name && !(m->name = dup_or_fail(name, err))) return false;
    bool tool = !strcmp(m->role, "tool");
    if (tool && !id)
        return BAD(err, "messages", "a message with role 'tool' needs a 'tool_call_id'");
    if (!tool && id)
        return BAD(err, "messages", "only messages with role 'tool' may have a 'tool_call_id'");
    return !id || (m->tool_call_id = dup_or_fail(id, err)) != NULL;
}

/* reasoning_content: an assistant message's thinking, given back. */
static bool parse_message_reasoning(const cJSON *msg, srv_message *m, srv_error *err) {
    const char *text = NULL;
    if (get_string(msg, "reasoning_content", &text, err) < 0)
        return BAD(err, "messages", "'reasoning_content' must be a string");
    if (!text) return true;
    if (strcmp(m->role, "assistant"))
        return BAD(err, "messages", "only assistant messages may have 'reasoning_content'");
    return (m->reasoning = dup_or_fail(text, err)) != NULL;
}

static bool parse_message(const cJSON *msg, srv_message *m, srv_error *err) {
    if (!cJSON_IsObject(msg)) return BAD(err, "messages", "each message must be an object");
    for (const cJSON *v = msg->child; v; v = v->next) {
        const char *k = v->string;
        if (!strcmp(k, "role") || !strcmp(k, "content") || !strcmp(k, "name") ||
            !strcmp(k, "tool_calls") || !strcmp(k, "tool_call_id") ||
            !strcmp(k, "reasoning_content"))
            continue;
        if ((!strcmp(k, "refusal") || !strcmp(k, "function_call") || !strcmp(k, "audio")) &&
            cJSON_IsNull(v))
            continue;
        return BAD(err, "messages", "unsupported message field '%.40s'", k);
    }
    return parse_role(msg, m, err) && parse_content(msg, m, err) && parse_tool_calls(msg, m, err) &&
           parse_message_ids(msg, m, err) && parse_message_reasoning(msg, m, err);
}

/* Whether an assistant message before `upto` made a tool call with this id. */
static bool call_id_seen(const cJSON *msgs, const cJSON *upto, const char *id) {
    for (const cJSON *m = msgs->child; m && m != upto; m = m->next) {
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        for (const cJSON *tc = cJSON_IsArray(calls) ? calls->child : NULL; tc; tc = tc->next) {
            const cJSON *tid = cJSON_GetObjectItemCaseSensitive(tc, "id");
            if (cJSON_IsString(tid) && !strcmp(tid->valuestring, id)) return true;
        }
    }
    return false;
}

static bool parse_messages(const cJSON *root, srv_request *r, srv_error *err) {
    const cJSON *v = field(root, "messages");
    if (!v) return BAD(err, "messages", "'messages' is required");
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 1) return BAD(err, "messages", "'messages' must be a non-empty array");
    if (!(r->messages = calloc((size_t)n, sizeof *r->messages))) return out_of_memory(err);
    for (const cJSON *m = v->child; m; m = m->next) {
        srv_message *msg = &r->messages[r->n_messages++];
        if (!parse_message(m, msg, err)) return false;
        /* as the OpenAI API requires: a tool result answers a call made earlier */
        if (msg->tool_call_id && !call_id_seen(v, m, msg->tool_call_id))
            return BAD(err, "messages",
                       "the tool message's tool_call_id '%.60s' answers no earlier assistant "
                       "tool call",
                       msg->tool_call_id);
    }
    return true;
}

/* ---- reasoning ----------------------------------------------------------- */

/* reasoning_effort, chat_template_kwargs and max_thinking_tokens; whether
 * the model can do what they ask is checked against its template later
 * (reasoning.h). */
static bool parse_reasoning(const cJSON *root, srv_request *r, srv_error *err) {
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", NULL};
    srv_reasoning *t = &r->reasoning;
    const char *effort = NULL;
    const cJSON *kwargs = NULL;
    if (get_string(root, "reasoning_effort", &effort, err) < 0 ||
        get_object(root, "chat_template_kwargs", &kwargs, err) < 0 ||
        get_int32(root, "max_thinking_tokens", 0, INT32_MAX, &t->max_tokens, err) < 0)
        return false;
    if (effort && !in_list(efforts, effort))
        return BAD(err, "reasoning_effort",
                   "'reasoning_effort' must be none, minimal, low, medium or high (not '%.40s')",
                   effort);
    if (effort && !(t->effort = dup_or_fail(effort, err))) return false;
    if (kwargs && !(t->kwargs = cJSON_PrintUnformatted(kwargs))) return out_of_memory(err);
    return true;
}

/* ---- completions prompts ------------------------------------------------- */

/* An array of token ids into p. */
static bool parse_token_array(const cJSON *arr, srv_prompt *p, const srv_limits *lim,
                              srv_error *err) {
    int n = cJSON_GetArraySize(arr);
    if (n < 1) return BAD(err, "prompt", "a token-id prompt must not be empty");
    if (!(p->tokens = malloc((size_t)n * sizeof *p->tokens))) return out_of_memory(err);
    for (const cJSON *t = arr->child; t; t = t->next) {
        if (!cJSON_IsNumber(t) || !is_integer(t->valuedouble))
            return BAD(err, "prompt", "'prompt' arrays must hold only strings or only token ids");
        if (t->valuedouble < 0 || t->valuedouble >= lim->n_vocab)
            return BAD(err, "prompt", "token id %.15g is not in the vocabulary (0..%d)",
                       t->valuedouble, lim->n_vocab - 1);
        p->tokens[p->n_tokens++] = (int32_t)t->valuedouble;
    }
    return true;
}

static bool add_prompt(srv_request *r, const cJSON *v, const srv_limits *lim, srv_error *err) {
    if (r->n_prompts >= lim->max_prompts)
        return BAD(err, "prompt", "at most %d prompts per request", lim->max_prompts);
    srv_prompt *p = &r->prompts[r->n_prompts++];
    if (cJSON_IsString(v)) return (p->text = dup_or_fail(v->valuestring, err)) != NULL;
    if (cJSON_IsArray(v)) return parse_token_array(v, p, lim, err);
    return BAD(err, "prompt",
               "'prompt' must be a string, an array of strings, an array of token "
               "ids or an array of token-id arrays");
}

/* prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...]. */
static bool parse_prompts(const cJSON *root, srv_request *r, const srv_limits *lim,
                          srv_error *err) {
    const cJSON *v = field(root, "prompt");
    if (!v) return BAD(err, "prompt", "'prompt' is required");
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    if (n < 1) return BAD(err, "prompt", "'prompt' must not be an empty array");
    bool one_token_list = cJSON_IsArray(v) && cJSON_IsNumber(v->child);
    if (!(r->prompts = calloc(one_token_list ? 1 : (size_t)n, sizeof *r->prompts)))
        return out_of_memory(err);
    if (!cJSON_IsArray(v) || one_token_list) return add_prompt(r, v, lim, err);
    for (const cJSON *p = v->child; p; p = p->next) {
        if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 && !cJSON_IsNumber(p->child))
            return BAD(err, "prompt", "token-id arrays must hold integers");
        if (!add_prompt(r, p, lim, err)) return false;
    }
    return true;
}

/* echo, best_of, suffix, parse_special. */
static bool parse_completion_extras(const cJSON *root, srv_request *r, const srv_limits *lim,
                                    srv_error *err) {
    const char *suffix = NULL;
    if (get_bool(root, "echo", &r->gen.echo, err) < 0 ||
        get_bool(root, "parse_special", &r->gen.parse_special, err) < 0 ||
        get_string(root, "suffix", &suffix, err) < 0)
        return false;
    if (suffix && suffix[0])
        return srv_fail(err, 400, "invalid_request_error", "not_supported", "suffix",
                        "'suffix' (insertion) is not supported");
    int got = get_int32(root, "best_of", 1, lim->max_n, &r->best_of, err);
    if (got < 0) return false;
    if (!got) r->best_of = r->gen.n;
    if (r->best_of < r->gen.n)
        return BAD(err, "best_of", "'best_of' (%d) must be at least 'n' (%d)", r->best_of,
                   r->gen.n);
    if (r->best_of > r->gen.n && r->stream)
        return BAD(err, "best_of", "'best_of' cannot be used with 'stream'");
    return true;
}

/* ---- speculative decoding ------------------------------------------------ */

/* "speculative": false opts out of the server's speculation; "draft_max": K
 * caps the draft length (1 .. the server's --draft-max). Asking for
 * speculation from a server that has none is an error, not a no-op. */
static bool parse_speculation(const cJSON *root, srv_request *r, const srv_limits *lim,
                              srv_error *err) {
    bool on = true;
    int got_on = get_bool(root, "speculative", &on, err);
    if (got_on < 0) return false;
    bool got_k = field(root, "draft_max") != NULL;
    if (got_on && !on) {
        if (got_k)
            return BAD(err, "draft_max",
                       "'draft_max' cannot be combined with 'speculative': false");
        r->gen.draft_max = -1;
        return true;
    }
    if ((got_on || got_k) && lim->max_draft < 1)
        return BAD(err, got_k ? "draft_max" : "speculative",
                   "this server does not do speculative decoding (start it with --draft MODEL or "
                   "--lookup)");
    return get_int32(root, "draft_max", 1, lim->max_draft, &r->gen.draft_max, err) >= 0;
}

/* ---- the request --------------------------------------------------------- */

/* Starts from the server's defaults with OpenAI's sampling defaults:
 * temperature 1, top_p 1, no other filter, penalties over the whole output. */
static void init_request(srv_request *r, srv_kind kind, const srv_defaults *d) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->gen = d->gen;
    r->gen.n = 1;
    r->gen.n_predict = -1;
    r->gen.logprobs = -1;
    r->gen.echo = false;
    r->gen.add_bos = true;
    r->gen.parse_special = true;
    r->gen.stop = NULL, r->gen.n_stop = 0;
    r->gen.stop_tokens = NULL, r->gen.n_stop_tokens = 0;
    r->gen.on_text = NULL, r->gen.user = NULL;
    nu_sampler_params *s = &r->gen.sampling;
    s->temperature = 1, s->top_p = 1, s->top_k = 0, s->min_p = 0, s->typical_p = 1;
    s->repeat_penalty = 1, s->presence_penalty = 0, s->frequency_penalty = 0;
    s->penalty_last_n = -1, s->no_repeat_ngram_size = 0, s->min_tokens = 0;
    s->ignore_eos = false, s->logit_bias = NULL, s->n_logit_bias = 0;
    s->banned_strings = NULL, s->n_banned_strings = 0, s->banned_tokens = NULL,
    s->n_banned_tokens = 0;
    r->beam_params = d->beam;
    r->reasoning.max_tokens = -1;
}

static bool parse_fields(const cJSON *root, srv_request *r, const srv_limits *lim, srv_error *err) {
    const char *model = NULL, *user;
    if (!check_field_names(root, r->kind, err) || get_string(root, "model", &model, err) < 0 ||
        get_string(root, "user", &user, err) < 0)
        return false;
    if (model && !(r->model = dup_or_fail(model, err))) return false;
    if (get_int32(root, "n", 1, lim->max_n, &r->gen.n, err) < 0) return false;
    if (!parse_speculation(root, r, lim, err)) return false;
    if (!parse_max_tokens(root, r, lim, err) || !parse_openai_sampling(root, r, err) ||
        !parse_extra_sampling(root, r, lim, err) || !parse_llama_sampling(root, r, err) ||
        !parse_breakers(root, r, err) || !parse_bans(root, r, lim, err) ||
        !parse_logit_bias(root, r, lim, err) || !parse_stop(root, r, err) ||
        !parse_stream(root, r, err) || !parse_logprobs(root, r, err))
        return false;
    if (r->kind == SRV_CHAT) {
        r->best_of = r->gen.n;
        bool b;
        const char *tier;
        const cJSON *meta;
        if (!parse_messages(root, r, err) || get_bool(root, "store", &b, err) < 0 ||
            !parse_tools(root, r, err) || !parse_reasoning(root, r, err) ||
            get_string(root, "service_tier", &tier, err) < 0 ||
            get_object(root, "metadata", &meta, err) < 0)
            return false;
    } else if (!parse_prompts(root, r, lim, err) || !parse_completion_extras(root, r, lim, err)) {
        return false;
    }
    return parse_constraints(root, r, err) && parse_watermark(root, r, err) &&
           check_tools_compatible(r, err) && parse_beam(root, r, lim, err);
}

/* True when only JSON whitespace is left in [p, end). */
static bool only_whitespace(const char *p, const char *end) {
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return false;
    return true;
}

bool srv_parse_request(const char *body, size_t len, srv_kind kind, const srv_limits *lim,
                       const srv_defaults *defaults, srv_request *out, srv_error *err) {
    init_request(out, kind, defaults);
    char msg[160];
    if (!json_body_check(body, len, msg, sizeof msg)) return BAD(err, NULL, "%s", msg);
    const char *end = NULL;
    cJSON *root = len ? cJSON_ParseWithLengthOpts(body, len, &end, false) : NULL;
    if (!root || !only_whitespace(end, body + len)) {
        size_t at = root ? (size_t)(end - body) : end ? (size_t)(end - body) : 0;
        cJSON_Delete(root);
        return BAD(err, NULL, "the request body is not valid JSON (at byte %zu)", at);
    }
    bool ok = cJSON_IsObject(root) ? parse_fields(root, out, lim, err)
                                   : BAD(err, NULL, "the request body must be a JSON object");
    if (ok && out->seed_given) ok = exact_seed(body, len, out, err);
    cJSON_Delete(root);
    if (!ok) srv_request_free(out);
    return ok;
}

void srv_request_free(srv_request *r) {
    free(r->model);
    for (int32_t i = 0; i < r->n_messages; i++) {
        srv_message *m = &r->messages[i];
        free(m->role), free(m->content), free(m->name), free(m->tool_call_id), free(m->reasoning);
        cJSON_free(m->tool_calls);
    }
    free(r->messages);
    for (int32_t i = 0; i < r->tools.n; i++)
        free(r->tools.list[i].name), cJSON_free(r->tools.list[i].parameters);
    free(r->tools.list);
    cJSON_free(r->tools.json);
    for (int32_t i = 0; i < r->n_prompts; i++) free(r->prompts[i].text), free(r->prompts[i].tokens);
    free(r->prompts);
    for (int32_t i = 0; r->stop && i < MAX_STOP; i++) free(r->stop[i]);
    free(r->stop);
    free(r->logit_bias);
    cJSON_free(r->json_schema);
    free(r->grammar);
    free(r->regex);
    free(r->watermark_key);
    for (int32_t i = 0; r->dry_breakers && r->dry_breakers[i]; i++) free(r->dry_breakers[i]);
    free(r->dry_breakers);
    for (int32_t i = 0; r->banned && r->banned[i]; i++) free(r->banned[i]);
    free(r->banned);
    free(r->ban_seqs);
    free(r->ban_ids);
    for (int32_t i = 0; i < r->n_choices; i++) free(r->choices[i]);
    free(r->choices);
    free(r->reasoning.effort);
    cJSON_free(r->reasoning.kwargs);
    srv_kind kind = r->kind;
    memset(r, 0, sizeof *r);
    r->kind = kind;
}
