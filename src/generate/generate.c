/* generate.c - generation parameters and results, and nu_generate: one
 * prompt (with its n samples) run to the end through a scheduler. */
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nucleus.h"
#include "error.h"

const char *nu_finish_reason_name(nu_finish_reason r) {
    switch (r) {
    case NU_FINISH_NONE: return "none";
    case NU_FINISH_LENGTH: return "length";
    case NU_FINISH_EOS: return "eos";
    case NU_FINISH_STOP: return "stop";
    case NU_FINISH_CONTEXT: return "context";
    case NU_FINISH_CANCELLED: return "cancelled";
    }
    return "unknown";
}

nu_generate_params nu_generate_default_params(void) {
    nu_generate_params p = {.n_predict = 128,
                            .add_bos = true,
                            .n = 1,
                            .logprobs = -1,
                            .sampling = nu_sampler_default_params()};
    return p;
}

nu_status nu_generate_params_check(const nu_generate_params *p, nu_error *err) {
    if (p->n_predict < -1)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n_predict %d must be >= -1", p->n_predict);
    if (p->draft_max < -1 || p->draft_max > 64)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "draft_max %d must be -1 (off), 0 (as set up) or 1..64", p->draft_max);
    if (p->n < 1 || p->n > 64)
        return nu_fail(err, NU_ERR_INVALID_ARG, "n = %d samples is out of range (1..64)", p->n);
    if (p->logprobs < -1 || p->logprobs > NU_MAX_TOP_LOGPROBS)
        return nu_fail(err, NU_ERR_INVALID_ARG, "logprobs %d is out of range (-1..%d)", p->logprobs,
                       NU_MAX_TOP_LOGPROBS);
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop) || p->n_stop_tokens < 0 ||
        (p->n_stop_tokens > 0 && !p->stop_tokens))
        return nu_fail(err, NU_ERR_INVALID_ARG, "stop strings or stop tokens are inconsistent");
    for (int32_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return nu_fail(err, NU_ERR_INVALID_ARG, "stop string %d is empty", i);
    nu_status st = nu_think_budget_check(&p->think, 0, err);
    return st ? st : nu_sampler_params_check(&p->sampling, err);
}

void nu_generate_result_free(nu_generate_result *r) {
    if (!r) return;
    free(r->text);
    free(r->tokens);
    free(r->logprobs);
    r->text = NULL;
    r->tokens = NULL;
    r->logprobs = NULL;
    r->text_len = 0;
    r->n_tokens = r->n_logprobs = 0;
}

nu_status nu_generate(nu_context *ctx, const char *prompt, const nu_generate_params *params,
                      nu_generate_result *results, nu_error *err) {
    nu_generate_params defaults = nu_generate_default_params();
    if (!params) params = &defaults;
    nu_scheduler *s;
    nu_status st = nu_scheduler_new(ctx, &s, err);
    if (st) return st;
    st = nu_scheduler_submit(s, prompt, NULL, 0, params, results, NULL, err);
    if (st == NU_OK) st = nu_scheduler_run(s, err);
    nu_scheduler_free(s);
    return st;
}

int32_t nu_best_of(const nu_generate_result *r, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (r[i].sum_logprob > r[best].sum_logprob) best = i;
    return best;
}

/* The last match of re in text as [*start, *end); false when none. */
static bool last_match(const regex_t *re, const char *text, size_t *start, size_t *end) {
    regmatch_t m;
    size_t off = 0;
    bool found = false;
    while (off <= strlen(text) && regexec(re, text + off, 1, &m, off ? REG_NOTBOL : 0) == 0) {
        *start = off + (size_t)m.rm_so;
        *end = off + (size_t)m.rm_eo;
        found = true;
        off = *end > *start ? *end : *end + 1; /* step past empty matches */
    }
    return found;
}

nu_status nu_majority_answer(const nu_generate_result *r, int32_t n, const char *pattern,
                             char *answer, size_t cap, int32_t *votes, int32_t *index,
                             nu_error *err) {
    regex_t re;
    int rc = regcomp(&re, pattern ? pattern : "-?[0-9]+([.,][0-9]+)*", REG_EXTENDED);
    if (rc) {
        char msg[200];
        regerror(rc, &re, msg, sizeof msg);
        return nu_fail(err, NU_ERR_INVALID_ARG, "answer pattern: %s", msg);
    }
    size_t *st = calloc((size_t)n + 1, sizeof *st), *en = calloc((size_t)n + 1, sizeof *en);
    bool *has = calloc((size_t)n + 1, sizeof *has);
    if (!st || !en || !has) {
        free(st), free(en), free(has);
        regfree(&re);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < n; i++)
        has[i] = r[i].text && last_match(&re, r[i].text, &st[i], &en[i]);
    *votes = 0;
    *index = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!has[i]) continue;
        int32_t v = 0;
        for (int32_t j = 0; j < n; j++)
            v += has[j] && en[j] - st[j] == en[i] - st[i] &&
                 memcmp(r[j].text + st[j], r[i].text + st[i], en[i] - st[i]) == 0;
        if (v > *votes) *votes = v, *index = i;
    }
    if (cap) answer[0] = 0;
    if (*index >= 0 && cap) {
        size_t len = en[*index] - st[*index] < cap - 1 ? en[*index] - st[*index] : cap - 1;
        memcpy(answer, r[*index].text + st[*index], len);
        answer[len] = 0;
    }
    free(st), free(en), free(has);
    regfree(&re);
    return NU_OK;
}
