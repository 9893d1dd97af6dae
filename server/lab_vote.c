/* lab_vote.c - POST /v1/inspect/self_consistency: several sampled paths
 * from one prompt and the answer most of them agree on (Wang et al. 2023).
 *
 * The paths are nu_generate's samples of the prompt (n = paths, sharing the
 * prompt's cache); their text streams as it is made, one "path_text" event
 * per piece. Each path's answer is the last match of answer_pattern (a POSIX
 * extended regular expression; default the last number) in its text, and
 * the vote is nu_majority_answer's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_internal.h"
#include "text_check.h"

static bool on_text(void *user, int32_t index, const char *text, size_t len) {
    lab_job *job = user;
    char *clean = utf8_sanitize(text, len);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "path_text");
    cJSON_AddNumberToObject(ev, "index", index);
    cJSON_AddStringToObject(ev, "text", clean ? clean : "");
    free(clean);
    return lab_emit(job, ev);
}

static cJSON *path_json(const nu_generate_result *res, const char *pattern) {
    char answer[256];
    int32_t votes, index;
    cJSON *o = cJSON_CreateObject();
    char *text = utf8_sanitize(res->text ? res->text : "", res->text_len);
    cJSON_AddNumberToObject(o, "index", res->index);
    cJSON_AddStringToObject(o, "text", text ? text : "");
    free(text);
    if (nu_majority_answer(res, 1, pattern, answer, sizeof answer, &votes, &index, NULL) == NU_OK &&
        votes > 0) {
        char *a = utf8_sanitize(answer, strlen(answer));
        cJSON_AddStringToObject(o, "answer", a ? a : "");
        free(a);
    } else {
        cJSON_AddNullToObject(o, "answer");
    }
    lab_add_number(o, "sum_logprob", res->sum_logprob);
    cJSON_AddNumberToObject(o, "tokens", res->n_generated);
    cJSON_AddStringToObject(o, "finish", nu_finish_reason_name(res->finish));
    return o;
}

bool lab_run_self_consistency(lab_env *env, lab_job *job, int *status, char *msg, size_t cap) {
    const lab_request *r = &job->r;
    nu_generate_params gp = r->req.gen;
    gp.n = r->paths;
    gp.n_predict = r->steps;
    gp.add_bos = true;
    gp.logprobs = -1;
    gp.on_text = on_text;
    gp.user = job;
    gp.stop = NULL;
    gp.n_stop = 0;
    nu_generate_result *res = calloc((size_t)r->paths, sizeof *res);
    *status = 500;
    if (!res) return snprintf(msg, cap, "out of memory"), false;
    env->n_cached = 0;
    nu_error e;
    nu_status st = nu_generate(env->ctx, r->prompt_text, &gp, res, &e);
    bool ok = st == NU_OK;
    if (!ok) {
        *status = st == NU_ERR_INVALID_ARG ? 400 : 500;
        snprintf(msg, cap, "%s", e.message);
    }
    if (ok && !lab_cancelled(job)) {
        cJSON *ev = cJSON_CreateObject(), *paths = cJSON_CreateArray();
        cJSON_AddStringToObject(ev, "type", "done");
        for (int32_t i = 0; i < r->paths; i++)
            cJSON_AddItemToArray(paths, path_json(&res[i], r->answer_pattern));
        cJSON_AddItemToObject(ev, "paths", paths);
        char answer[256];
        int32_t votes = 0, index = -1;
        if (nu_majority_answer(res, r->paths, r->answer_pattern, answer, sizeof answer, &votes,
                               &index, &e) == NU_OK &&
            index >= 0) {
            char *a = utf8_sanitize(answer, strlen(answer));
            cJSON_AddStringToObject(ev, "answer", a ? a : "");
            free(a);
        } else {
            cJSON_AddNullToObject(ev, "answer");
        }
        cJSON_AddNumberToObject(ev, "votes", votes);
        cJSON_AddNumberToObject(ev, "index", index);
        if (r->answer_pattern)
            cJSON_AddStringToObject(ev, "pattern", r->answer_pattern);
        else
            cJSON_AddNullToObject(ev, "pattern"); /* the last number */
        lab_emit(job, ev);
    }
    for (int32_t i = 0; i < r->paths; i++) nu_generate_result_free(&res[i]);
    free(res);
    for (int32_t q = 0; q < LAB_N_SEQ; q++) nu_kv_seq_remove(env->ctx, q, 0, -1);
    return ok;
}
