/* lab_inspect.c - POST /v1/inspect: generation one step at a time, with
 * everything the sampler chain did at each step.
 *
 * The sampler's observer (nu_sampler_set_observer) shows every stage's
 * whole candidate array before and after it; for each stage one "stages"
 * entry records what is left: the kept count, the entropy, the top_n most
 * likely candidates, the cumulative curve of the sorted probabilities
 * (the nucleus boundary of top-p is where it crosses p), the top_n
 * candidates of its input that it cut, and for the stages that shift
 * logits (bias, penalties, n-gram ban, repetition guard, watermark, the
 * end-of-generation ban) the tokens whose logits moved most.
 *
 * Stepping: the client sends the prompt and the tokens chosen so far
 * ("tokens"); they are read (reusing what the lab's cache already holds)
 * and become the sampler's history, then max_tokens steps are generated.
 * Step i (counting from the prompt's end, the sent tokens included) draws
 * with the seed mixed with i, so going one step at a time gives the same
 * tokens as one longer run, and "back" is the same request with one token
 * less. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_internal.h"

/* What the observer gathers during one nu_sampler_sample. */
typedef struct inspect_obs {
    const nu_model *model;
    const lab_request *r;
    float *dense;      /* n_vocab: logits of the stage's input, by id (NAN: absent) */
    float *sorted;     /* n_vocab: scratch for curves */
    nu_candidate *top; /* LAB_MAX_TOP */
    cJSON *stages;
    bool picked; /* the chain has picked (a later stage is the grammar's second run) */
    bool rerun;
    int32_t chosen;
    float chosen_prob;             /* in the distribution drawn from */
    const nu_watermark_params *wm; /* NULL: no watermark */
    const int32_t *wm_prev;        /* the wm->context tokens before this step */
} inspect_obs;

/* The n most likely finite candidates, best first; *kept counts the finite ones. */
static int32_t top_of(const nu_candidates *c, int32_t n, nu_candidate *out, int32_t *kept) {
    int32_t k = 0;
    *kept = 0;
    for (size_t i = 0; i < c->size; i++) {
        const nu_candidate *x = &c->data[i];
        if (!(x->logit > -INFINITY)) continue;
        (*kept)++;
        if (k == n && x->prob <= out[k - 1].prob) continue;
        int32_t j = k < n ? k++ : n - 1;
        while (j > 0 && out[j - 1].prob < x->prob) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = *x;
    }
    return k;
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* {"token", "text", "logit", "prob"[, "green"]} */
static cJSON *candidate_json(const inspect_obs *o, const nu_candidate *c) {
    cJSON *e = lab_token_json(o->model, c->id);
    lab_add_number(e, "logit", c->logit);
    lab_add_number(e, "prob", c->prob);
    if (o->wm) cJSON_AddBoolToObject(e, "green", nu_watermark_is_green(o->wm, o->wm_prev, c->id));
    return e;
}

/* Entropy (nats) and the cumulative curve of the sorted probabilities. */
static double entropy_and_curve(inspect_obs *o, const nu_candidates *c, cJSON *stage) {
    int32_t n = 0;
    double h = 0;
    for (size_t i = 0; i < c->size; i++) {
        float p = c->data[i].prob;
        if (!(c->data[i].logit > -INFINITY) || p <= 0) continue;
        h -= p * log(p);
        o->sorted[n++] = p;
    }
    if (o->r->curve > 0) {
        qsort(o->sorted, (size_t)n, sizeof *o->sorted, cmp_desc);
        cJSON *curve = cJSON_AddArrayToObject(stage, "curve");
        double cum = 0;
        for (int32_t i = 0; i < n && i < o->r->curve; i++) {
            cum += o->sorted[i];
            char buf[24];
            snprintf(buf, sizeof buf, "%.5f", cum > 1 ? 1.0 : cum);
            cJSON_AddItemToArray(curve, cJSON_CreateNumber(strtod(buf, NULL)));
            if (cum >= 0.99995) break;
        }
    }
    return h;
}

static bool shifts_logits(const char *stage) {
    return !strcmp(stage, "logit_bias") || !strcmp(stage, "penalties") ||
           !strcmp(stage, "no_repeat_ngram") || !strcmp(stage, "repetition_guard") ||
           !strcmp(stage, "watermark") || !strcmp(stage, "eog");
}

/* The input's top candidates that the stage removed, and (for shifting
 * stages) the candidates whose logits moved most, before -> after. */
static void add_changes(inspect_obs *o, const char *name, const nu_candidates *before,
                        const nu_candidates *after, cJSON *stage) {
    int32_t n_vocab = nu_model_n_vocab(o->model), kept;
    for (int32_t i = 0; i < n_vocab; i++) o->dense[i] = NAN;
    for (size_t i = 0; i < after->size; i++) o->dense[after->data[i].id] = after->data[i].logit;
    int32_t k = top_of(before, o->r->top_n, o->top, &kept);
    cJSON *cut = cJSON_AddArrayToObject(stage, "cut");
    for (int32_t i = 0; i < k; i++) {
        float a = o->dense[o->top[i].id];
        if (isnan(a) || a == -INFINITY) cJSON_AddItemToArray(cut, cJSON_CreateNumber(o->top[i].id));
    }
    if (!shifts_logits(name)) return;
    /* the largest |after - before| among candidates still there */
    int32_t m = 0;
    float *delta = o->sorted; /* reused: absolute changes of the o->top entries */
    for (size_t i = 0; i < before->size; i++) {
        const nu_candidate *b = &before->data[i];
        float a = o->dense[b->id];
        if (isnan(a) || !(b->logit > -INFINITY) || a == b->logit) continue;
        float d = a == -INFINITY ? INFINITY : fabsf(a - b->logit);
        if (m == o->r->top_n && d <= delta[m - 1]) continue;
        int32_t j = m < o->r->top_n ? m++ : o->r->top_n - 1;
        while (j > 0 && delta[j - 1] < d) {
            delta[j] = delta[j - 1];
            o->top[j] = o->top[j - 1];
            j--;
        }
        delta[j] = d;
        o->top[j] = *b;
    }
    cJSON *changed = cJSON_AddArrayToObject(stage, "changed");
    for (int32_t i = 0; i < m; i++) {
        cJSON *e = lab_token_json(o->model, o->top[i].id);
        lab_add_number(e, "before", o->top[i].logit);
        lab_add_number(e, "after", o->dense[o->top[i].id]);
        cJSON_AddItemToArray(changed, e);
    }
}

/* Whether a stage left every candidate as it was (switched off, or no
 * effect at this step). */
static bool unchanged(inspect_obs *o, const nu_candidates *before, const nu_candidates *after) {
    int32_t n_vocab = nu_model_n_vocab(o->model), finite_before = 0, finite_after = 0;
    for (int32_t i = 0; i < n_vocab; i++) o->dense[i] = -INFINITY;
    for (size_t i = 0; i < before->size; i++) {
        o->dense[before->data[i].id] = before->data[i].logit;
        finite_before += before->data[i].logit > -INFINITY;
    }
    for (size_t i = 0; i < after->size; i++) {
        const nu_candidate *a = &after->data[i];
        if (!(a->logit > -INFINITY)) continue;
        finite_after++;
        if (o->dense[a->id] != a->logit) return false;
    }
    return finite_before == finite_after;
}

/* One "stages" entry: what the candidates look like after `name` (none
 * when the stage changed nothing). */
static void add_stage(inspect_obs *o, const char *name, const nu_candidates *before,
                      const nu_candidates *after) {
    if (before && unchanged(o, before, after)) return;
    cJSON *stage = cJSON_CreateObject();
    cJSON_AddStringToObject(stage, "stage", name);
    int32_t kept, k = top_of(after, o->r->top_n, o->top, &kept);
    cJSON_AddNumberToObject(stage, "kept", kept);
    cJSON *top = cJSON_AddArrayToObject(stage, "top");
    for (int32_t i = 0; i < k; i++) cJSON_AddItemToArray(top, candidate_json(o, &o->top[i]));
    lab_add_number(stage, "entropy", entropy_and_curve(o, after, stage));
    if (before) add_changes(o, name, before, after, stage);
    cJSON_AddItemToArray(o->stages, stage);
}

static void observe(void *user, const char *stage, const nu_candidates *before,
                    const nu_candidates *after) {
    inspect_obs *o = user;
    bool pick = !strcmp(stage, "greedy") || !strcmp(stage, "dist");
    if (pick) {
        o->picked = true;
        if (after->selected >= 0) {
            o->chosen = after->data[after->selected].id;
            o->chosen_prob = after->data[after->selected].prob;
        }
        return;
    }
    if (o->picked) {
        /* the grammar refused the first pick: the chain runs again on the
         * tokens it allows; show that run */
        cJSON_Delete(o->stages);
        o->stages = cJSON_CreateArray();
        o->picked = false;
        o->rerun = true;
    }
    if (cJSON_GetArraySize(o->stages) == 0)
        add_stage(o, o->rerun ? "allowed" : "raw", NULL, before);
    add_stage(o, stage, before, after);
}

/* Statistics of the model's own distribution: entropy (nats), tokens above
 * 1%, and log Z for log-probs. */
typedef struct raw_stats {
    double entropy, log_z;
    int32_t effective;
    int32_t argmax;
} raw_stats;

static void raw_statistics(const float *logits, int32_t n, raw_stats *s) {
    double max = -INFINITY, z = 0, h = 0;
    s->argmax = 0;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > max) max = logits[i], s->argmax = i;
    for (int32_t i = 0; i < n; i++) z += exp(logits[i] - max);
    s->log_z = max + log(z);
    s->effective = 0;
    for (int32_t i = 0; i < n; i++) {
        double p = exp(logits[i] - s->log_z);
        if (p > 0) h -= p * log(p);
        s->effective += p > 0.01;
    }
    s->entropy = h;
}

/* The grammar's mask at this step: how many tokens it allows, and the
 * most likely ones (by the model) it refuses. */
static cJSON *mask_json(const nu_model *m, nu_grammar_state *gs, const float *logits,
                        const raw_stats *rs, nu_candidate *all, int32_t top_n) {
    int32_t n = nu_model_n_vocab(m);
    for (int32_t i = 0; i < n; i++)
        all[i] = (nu_candidate){i, logits[i], (float)exp(logits[i] - rs->log_z)};
    nu_candidates c = {all, (size_t)n, false, -1};
    nu_grammar_mask(gs, &c);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "allowed", (double)c.size);
    cJSON_AddNumberToObject(o, "refused", (double)(n - (int32_t)c.size));
    double mass = 0;
    for (size_t i = 0; i < c.size; i++) mass += c.data[i].prob;
    lab_add_number(o, "allowed_mass", mass);
    cJSON_AddBoolToObject(o, "complete", nu_grammar_is_complete(gs));
    /* 0 refused, 1 allowed, 2 shown: the most likely of each kind */
    unsigned char *kind = calloc((size_t)n, 1);
    cJSON *refused = cJSON_AddArrayToObject(o, "refused_top");
    cJSON *allowed = cJSON_AddArrayToObject(o, "allowed_top");
    if (!kind) return o;
    for (size_t i = 0; i < c.size; i++) kind[all[i].id] = 1;
    for (unsigned char want = 0; want < 2; want++) {
        for (int32_t shown = 0; shown < top_n; shown++) {
            int32_t best = -1;
            for (int32_t i = 0; i < n; i++)
                if (kind[i] == want && (best < 0 || logits[i] > logits[best])) best = i;
            if (best < 0) break;
            cJSON *e = lab_token_json(m, best);
            lab_add_number(e, "prob", exp(logits[best] - rs->log_z));
            cJSON_AddItemToArray(want ? allowed : refused, e);
            kind[best] = 2;
        }
    }
    free(kind);
    return o;
}

/* Running watermark detection over the generated tokens. */
static cJSON *watermark_json(const nu_model *m, const nu_watermark_params *wm, const int32_t *gen,
                             int32_t n, bool green) {
    nu_watermark_result res;
    nu_error e;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "green", green);
    if (nu_watermark_detect(m, wm, gen, (size_t)n, 4.0, NULL, &res, &e) == NU_OK) {
        cJSON_AddNumberToObject(o, "scored", (double)res.scored);
        cJSON_AddNumberToObject(o, "green_count", (double)res.green);
        lab_add_number(o, "z", res.z);
        lab_add_number(o, "p_value", res.p_value);
    }
    lab_add_number(o, "gamma", wm->gamma);
    return o;
}

/* Everything one inspect run owns. */
typedef struct inspect_run {
    lab_env *env;
    lab_job *job;
    const nu_model *m;
    nu_sampler *s, *greedy;
    nu_grammar_state *gs;
    inspect_obs obs;
    nu_candidate *all; /* n_vocab, for the mask */
    int32_t *seq;      /* prompt, sent tokens, new tokens */
    int32_t n_seq, n_prompt;
} inspect_run;

static uint64_t step_seed(uint64_t seed, int32_t i) {
    uint64_t x = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static bool setup(inspect_run *ir, char *msg, size_t cap, int *status) {
    const lab_request *r = &ir->job->r;
    int32_t n_vocab = nu_model_n_vocab(ir->m);
    nu_error e;
    nu_sampler_params gp = r->req.gen.sampling;
    gp.temperature = 0;
    ir->seq = malloc((size_t)(r->n_prompt + r->n_forced + r->steps + 1) * sizeof *ir->seq);
    ir->all = malloc((size_t)n_vocab * sizeof *ir->all);
    ir->obs.dense = malloc((size_t)n_vocab * sizeof(float));
    ir->obs.sorted = malloc((size_t)n_vocab * sizeof(float));
    ir->obs.top = malloc(LAB_MAX_TOP * sizeof *ir->obs.top);
    if (!ir->seq || !ir->all || !ir->obs.dense || !ir->obs.sorted || !ir->obs.top)
        return snprintf(msg, cap, "out of memory"), false;
    *status = 400;
    if (nu_sampler_new_for_model(&r->req.gen.sampling, ir->m, &ir->s, &e) ||
        nu_sampler_new_for_model(&gp, ir->m, &ir->greedy, &e) ||
        nu_sampler_set_observer(ir->s, observe, &ir->obs, &e) ||
        (r->grammar && (nu_sampler_set_grammar(ir->s, r->grammar, -1, &e) ||
                        nu_sampler_set_grammar(ir->greedy, r->grammar, -1, &e) ||
                        nu_grammar_state_new(r->grammar, &ir->gs, &e))))
        return snprintf(msg, cap, "%s", e.message), false;
    memcpy(ir->seq, r->prompt, (size_t)r->n_prompt * sizeof *ir->seq);
    ir->n_seq = ir->n_prompt = r->n_prompt;
    nu_sampler_accept_prompt(ir->s, r->prompt, r->n_prompt);
    nu_sampler_accept_prompt(ir->greedy, r->prompt, r->n_prompt);
    for (int32_t i = 0; i < r->n_forced; i++) {
        int32_t t = r->forced[i];
        if (ir->gs && nu_grammar_accept(ir->gs, t, &e) != NU_OK)
            return snprintf(msg, cap, "tokens[%d] (id %d) is not allowed by the grammar: %.400s", i,
                            t, e.message),
                   false;
        nu_sampler_accept(ir->s, t);
        nu_sampler_accept(ir->greedy, t);
        ir->seq[ir->n_seq++] = t;
    }
    *status = 500;
    return true;
}

static void teardown(inspect_run *ir) {
    nu_sampler_free(ir->s);
    nu_sampler_free(ir->greedy);
    nu_grammar_state_free(ir->gs);
    cJSON_Delete(ir->obs.stages);
    free(ir->all);
    free(ir->seq);
    free(ir->obs.dense);
    free(ir->obs.sorted);
    free(ir->obs.top);
}

/* One step: sample with the observer on, emit what it saw. Returns the token. */
static int32_t one_step(inspect_run *ir, const float *logits, int32_t index, bool *go_on) {
    const lab_request *r = &ir->job->r;
    const nu_model *m = ir->m;
    raw_stats rs;
    raw_statistics(logits, nu_model_n_vocab(m), &rs);
    const nu_watermark_params *wm =
        r->req.gen.sampling.watermark.key ? &r->req.gen.sampling.watermark : NULL;
    int32_t h = wm ? wm->context : 0;
    ir->obs.wm = wm && ir->n_seq >= h ? wm : NULL;
    ir->obs.wm_prev = ir->seq + ir->n_seq - h;
    cJSON *mask = ir->gs ? mask_json(m, ir->gs, logits, &rs, ir->all, r->top_n) : NULL;
    ir->obs.stages = cJSON_CreateArray();
    ir->obs.picked = ir->obs.rerun = false;
    ir->obs.chosen = -1;
    nu_sampler_reseed(ir->s, step_seed(r->req.gen.sampling.seed, index));
    int32_t tok = nu_sampler_sample(ir->s, logits);
    int32_t greedy = nu_sampler_distribution(ir->greedy, logits)->data[0].id;
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "step");
    cJSON_AddNumberToObject(ev, "index", index);
    cJSON_AddNumberToObject(ev, "position", ir->n_seq);
    lab_add_number(ev, "entropy", rs.entropy);
    cJSON_AddNumberToObject(ev, "effective_vocab", rs.effective);
    cJSON *ch = lab_token_json(m, tok);
    lab_add_number(ch, "prob", tok == ir->obs.chosen ? ir->obs.chosen_prob : NAN);
    lab_add_number(ch, "model_prob", exp(logits[tok] - rs.log_z));
    lab_add_number(ch, "logprob", logits[tok] - rs.log_z);
    cJSON_AddItemToObject(ev, "chosen", ch);
    cJSON *gr = lab_token_json(m, greedy);
    lab_add_number(gr, "model_prob", exp(logits[greedy] - rs.log_z));
    cJSON_AddItemToObject(ev, "greedy", gr);
    cJSON_AddBoolToObject(ev, "grammar_rerun", ir->obs.rerun);
    cJSON_AddItemToObject(ev, "stages", ir->obs.stages);
    ir->obs.stages = NULL;
    if (r->req.gen.sampling.guard_strength > 0)
        lab_add_number(ev, "repetition_severity", nu_sampler_repetition_severity(ir->s));
    if (mask) cJSON_AddItemToObject(ev, "mask", mask);
    if (wm) {
        bool green = ir->n_seq >= h && nu_watermark_is_green(wm, ir->seq + ir->n_seq - h, tok);
        ir->seq[ir->n_seq] = tok;
        cJSON_AddItemToObject(
            ev, "watermark",
            watermark_json(m, wm, ir->seq + ir->n_prompt, ir->n_seq + 1 - ir->n_prompt, green));
    }
    *go_on = lab_emit(ir->job, ev);
    return tok;
}

/* Decodes the new token; the lab's cache record follows. */
static nu_status advance(inspect_run *ir, int32_t tok, int32_t *entry, nu_error *e) {
    lab_env *env = ir->env;
    nu_batch_entry b = {tok, ir->n_seq - 1, 0, true};
    bool tracked = env->n_cached == ir->n_seq - 1;
    env->n_cached = 0;
    nu_status st = nu_decode(env->ctx, &b, 1, e);
    *entry = 0;
    if (st == NU_OK && tracked && ir->n_seq <= env->cap_cached) {
        memcpy(env->cached, ir->seq, (size_t)ir->n_seq * sizeof *ir->seq);
        env->n_cached = ir->n_seq;
    }
    return st;
}

static void emit_done(inspect_run *ir, const char *finish) {
    const lab_request *r = &ir->job->r;
    cJSON *ev = cJSON_CreateObject(), *toks = cJSON_CreateArray();
    cJSON_AddStringToObject(ev, "type", "done");
    cJSON_AddStringToObject(ev, "finish", finish);
    for (int32_t i = ir->n_prompt; i < ir->n_seq; i++)
        cJSON_AddItemToArray(toks, cJSON_CreateNumber(ir->seq[i]));
    cJSON_AddItemToObject(ev, "tokens", toks);
    cJSON *prompt = cJSON_CreateArray();
    for (int32_t i = 0; i < ir->n_prompt; i++)
        cJSON_AddItemToArray(prompt, lab_token_json(ir->m, ir->seq[i]));
    cJSON_AddItemToObject(ev, "prompt_tokens", prompt);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->req.gen.sampling.seed);
    cJSON_AddStringToObject(ev, "seed", seed);
    lab_emit(ir->job, ev);
}

bool lab_run_inspect(lab_env *env, lab_job *job, int *status, char *msg, size_t cap) {
    inspect_run ir = {.env = env, .job = job, .m = env->cfg->model};
    ir.obs.model = ir.m;
    ir.obs.r = &job->r;
    bool ok = setup(&ir, msg, cap, status);
    int32_t entry = 0;
    nu_error e;
    if (ok && lab_feed(env, env->ctx, ir.seq, ir.n_seq, &entry, &e) != NU_OK)
        ok = (snprintf(msg, cap, "%s", e.message), false);
    const char *finish = "length";
    bool go_on = true;
    for (int32_t i = 0; ok && go_on && i < job->r.steps; i++) {
        int32_t tok = one_step(&ir, nu_logits(env->ctx, entry), job->r.n_forced + i, &go_on);
        if (nu_token_is_eog(ir.m, tok)) {
            finish = "eos";
            break;
        }
        nu_sampler_accept(ir.s, tok);
        nu_sampler_accept(ir.greedy, tok);
        if (ir.gs) nu_grammar_accept(ir.gs, tok, NULL);
        ir.seq[ir.n_seq++] = tok;
        if (ir.gs && nu_grammar_must_end(ir.gs)) {
            finish = "stop";
            break;
        }
        if (i + 1 < job->r.steps && advance(&ir, tok, &entry, &e) != NU_OK)
            ok = (snprintf(msg, cap, "%s", e.message), false);
    }
    if (ok && go_on) emit_done(&ir, finish);
    teardown(&ir);
    return ok;
}
