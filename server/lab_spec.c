/* lab_spec.c - POST /v1/inspect/speculative: speculative decoding, one
 * verification pass at a time.
 *
 * A guesser proposes up to draft_max tokens: prompt lookup (the tokens that
 * followed the latest earlier occurrence of the text's last n-gram, longest
 * n-gram first), the server's --draft model, or the served model itself in
 * a second context ("self", whose proposals the target always accepts when
 * greedy: it shows the mechanics, not a speedup). The target reads the last
 * token and every proposal in one batch; proposal x_i is accepted with
 * probability min(1, p_i(x_i) / q_i(x_i)) (p the target's distribution after
 * the sampler chain, q the guesser's; q is a point mass for lookup), the
 * first rejection draws a correction from the normalised max(0, p_i - q_i),
 * and when all are accepted one more token is drawn from the target
 * (Leviathan et al. 2023; Chen et al. 2023). Greedy output is token for
 * token plain greedy decoding; sampled output is distributed as plain
 * sampling. The library's nu_generate_speculative applies the same rule
 * but does not show its passes, hence this loop on the public API.
 *
 * Every pass emits the proposals with p and q and whether each was
 * accepted, and the token drawn at its end. The pass count gives the ideal
 * speedup (tokens per target pass); with baseline set, the library's
 * speculative and plain decoding of as many tokens are timed afterwards for
 * the measured one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_internal.h"

typedef struct spec_run {
    lab_env *env;
    lab_job *job;
    const lab_request *r;
    const nu_model *m;
    nu_context *tgt, *dft;
    nu_sampler *ts, *ds;
    nu_rng rng;
    int32_t n_vocab;
    int32_t *seq; /* prompt + generated */
    int32_t n_seq, n_prompt, tgt_cached, dft_cached;
    int32_t *draft;
    float *q, *p; /* [draft_max][n_vocab], [n_vocab] */
    nu_batch_entry *batch;
    int64_t drafted, accepted, target_passes, draft_passes;
} spec_run;

static const char *draft_name(lab_draft_source d) {
    return d == LAB_DRAFT_SELF ? "self" : d == LAB_DRAFT_MODEL ? "model" : "lookup";
}

/* The draft context: of the --draft model or of the model itself. */
static bool ensure_draft(lab_env *env, const nu_model *dm, char *msg, size_t cap) {
    if (env->draft && env->draft_model == dm) return true;
    nu_context_free(env->draft);
    env->draft = NULL;
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = env->cfg->n_ctx;
    cp.n_seq_max = 1;
    cp.n_batch = env->cfg->n_batch;
    cp.n_threads = env->cfg->n_threads;
    cp.kv_type = env->cfg->kv_type;
    cp.kv_type_k = env->cfg->kv_type_k;
    cp.kv_type_v = env->cfg->kv_type_v;
    nu_error e;
    if (nu_context_new(dm, &cp, &env->draft, &e) != NU_OK)
        return snprintf(msg, cap, "the draft context: %.480s", e.message), false;
    env->draft_model = dm;
    return true;
}

/* Decodes seq[from, to) into ctx's sequence 0, logits for the last one at *entry. */
static nu_status catch_up(spec_run *s, nu_context *ctx, int32_t from, int32_t to, int32_t *entry,
                          nu_error *e) {
    int32_t nb = s->env->cfg->n_batch;
    for (int32_t start = from; start < to; start += nb) {
        int32_t k = to - start < nb ? to - start : nb;
        for (int32_t i = 0; i < k; i++)
            s->batch[i] = (nu_batch_entry){s->seq[start + i], start + i, 0, start + i == to - 1};
        nu_status st = nu_decode(ctx, s->batch, k, e);
        if (st) return st;
        *entry = k - 1;
    }
    return NU_OK;
}

/* The latest earlier occurrence of the last n-gram (n from ngram_max down):
 * up to k tokens that followed it. */
static int32_t lookup(const int32_t *t, int32_t n, int32_t k, int32_t g_min, int32_t g_max,
                      int32_t *out) {
    for (int32_t g = g_max; g >= g_min; g--) {
        if (g > n - 1) continue;
        for (int32_t start = n - g - 1; start >= 0; start--) {
            if (memcmp(t + start, t + n - g, (size_t)g * sizeof *t)) continue;
            int32_t m = 0;
            while (m < k && start + g + m < n) out[m] = t[start + g + m], m++;
            if (m > 0) return m;
        }
    }
    return 0;
}

static void dense(const nu_candidates *c, float *out, int32_t n) {
    memset(out, 0, (size_t)n * sizeof *out);
    for (size_t i = 0; i < c->size; i++) out[c->data[i].id] += c->data[i].prob;
}

static int32_t draw(const float *d, int32_t n, nu_rng *rng) {
    double total = 0, cum = 0;
    for (int32_t i = 0; i < n; i++) total += d[i];
    double u = nu_rng_uniform(rng) * total;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (d[i] <= 0) continue;
        cum += d[i];
        last = i;
        if (u < cum) return i;
    }
    return last;
}

/* The draft model proposes k tokens, keeping each distribution in q. */
static nu_status propose_with_model(spec_run *s, int32_t k, nu_error *e) {
    int32_t entry = 0;
    nu_status st = catch_up(s, s->dft, s->dft_cached, s->n_seq, &entry, e);
    if (st) return st;
    s->dft_cached = s->n_seq;
    for (int32_t i = 0; i < k; i++) {
        float *q = s->q + (size_t)i * s->n_vocab;
        dense(nu_sampler_distribution(s->ds, nu_logits(s->dft, entry)), q, s->n_vocab);
        s->draft[i] = draw(q, s->n_vocab, &s->rng);
        nu_sampler_accept(s->ds, s->draft[i]);
        s->draft_passes++;
        if (i + 1 == k) break;
        nu_batch_entry b = {s->draft[i], s->n_seq + i, 0, true};
        if ((st = nu_decode(s->dft, &b, 1, e))) return st;
        s->dft_cached++;
        entry = 0;
    }
    return NU_OK;
}

/* {"token", "text", "p", "q", "accepted"} */
static cJSON *proposal_json(const spec_run *s, int32_t tok, float p, float q, bool accepted) {
    cJSON *o = lab_token_json(s->m, tok);
    lab_add_number(o, "p", p);
    lab_add_number(o, "q", q);
    cJSON_AddBoolToObject(o, "accepted", accepted);
    return o;
}

/* Appends a token; returns whether generation goes on. */
static bool emit_token(spec_run *s, int32_t tok, cJSON *emitted, bool *eos) {
    nu_sampler_accept(s->ts, tok);
    cJSON_AddItemToArray(emitted, lab_token_json(s->m, tok));
    if (nu_token_is_eog(s->m, tok)) {
        *eos = true;
        return false;
    }
    s->seq[s->n_seq++] = tok;
    return s->n_seq - s->n_prompt < s->r->steps;
}

/* Verifies n proposals against the target's logits (entries 0..n of its
 * last batch); returns how many were accepted and fills the event. */
static int32_t verify(spec_run *s, int32_t n, cJSON *ev, bool *eos, bool *more) {
    cJSON *props = cJSON_AddArrayToObject(ev, "proposed");
    cJSON *emitted = cJSON_AddArrayToObject(ev, "emitted");
    int32_t accepted = 0;
    *more = true;
    for (int32_t i = 0; i <= n && *more; i++) {
        const float *logits = nu_logits(s->tgt, i);
        dense(nu_sampler_distribution(s->ts, logits), s->p, s->n_vocab);
        if (i == n) { /* all accepted: one more from the target */
            int32_t t = draw(s->p, s->n_vocab, &s->rng);
            cJSON *d = lab_token_json(s->m, t);
            cJSON_AddStringToObject(d, "kind", n ? "bonus" : "plain");
            lab_add_number(d, "p", s->p[t]);
            cJSON_AddItemToObject(ev, "drawn", d);
            *more = emit_token(s, t, emitted, eos);
            break;
        }
        int32_t x = s->draft[i];
        const float *q = s->ds ? s->q + (size_t)i * s->n_vocab : NULL;
        float px = s->p[x], qx = q ? q[x] : 1.0f;
        if (px >= qx || nu_rng_uniform(&s->rng) < (double)px / qx) {
            accepted++;
            cJSON_AddItemToArray(props, proposal_json(s, x, px, qx, true));
            *more = emit_token(s, x, emitted, eos);
            continue;
        }
        cJSON_AddItemToArray(props, proposal_json(s, x, px, qx, false));
        for (int32_t k = i + 1; k < n; k++) {
            const float *qk = s->ds ? s->q + (size_t)k * s->n_vocab : NULL;
            cJSON_AddItemToArray(
                props, proposal_json(s, s->draft[k], NAN, qk ? qk[s->draft[k]] : 1, false));
        }
        for (int32_t v = 0; v < s->n_vocab; v++) {
            float qv = q ? q[v] : (v == x ? 1.0f : 0.0f);
            s->p[v] = s->p[v] > qv ? s->p[v] - qv : 0.0f;
        }
        int32_t t = draw(s->p, s->n_vocab, &s->rng);
        cJSON *d = lab_token_json(s->m, t);
        cJSON_AddStringToObject(d, "kind", "correction");
        cJSON_AddItemToObject(ev, "drawn", d);
        *more = emit_token(s, t, emitted, eos);
        break;
    }
    return accepted;
}

/* One pass: propose, verify in one target batch, roll back the rejected. */
static nu_status pass(spec_run *s, int32_t index, bool *more, bool *eos, bool *go_on, nu_error *e) {
    const lab_request *r = s->r;
    int32_t left = r->steps - (s->n_seq - s->n_prompt),
            k = r->draft_max < left - 1 ? r->draft_max : left - 1;
    int32_t n = 0;
    nu_status st = NU_OK;
    if (k > 0 && s->dft) {
        st = propose_with_model(s, k, e);
        n = k;
    } else if (k > 0) {
        n = lookup(s->seq, s->n_seq, k, r->ngram_min, r->ngram_max, s->draft);
    }
    int32_t unused = 0, before = s->n_seq, pos = s->n_seq - 1;
    if (st == NU_OK) st = catch_up(s, s->tgt, s->tgt_cached, s->n_seq - 1, &unused, e);
    if (st) return st;
    s->batch[0] = (nu_batch_entry){s->seq[pos], pos, 0, true};
    for (int32_t i = 0; i < n; i++)
        s->batch[1 + i] = (nu_batch_entry){s->draft[i], pos + 1 + i, 0, true};
    if ((st = nu_decode(s->tgt, s->batch, n + 1, e))) return st;
    s->target_passes++;
    s->drafted += n;
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "pass");
    cJSON_AddNumberToObject(ev, "pass", index);
    cJSON_AddNumberToObject(ev, "position", before);
    int32_t acc = verify(s, n, ev, eos, more);
    s->accepted += acc;
    cJSON_AddNumberToObject(ev, "accepted", acc);
    cJSON_AddNumberToObject(ev, "generated", s->n_seq - s->n_prompt);
    *go_on = lab_emit(s->job, ev);
    /* the caches keep the last token and the accepted proposals */
    nu_kv_seq_remove(s->tgt, 0, before + acc, -1);
    s->tgt_cached = before + acc;
    if (s->dft) {
        if (s->dft_cached > before + acc) {
            nu_kv_seq_remove(s->dft, 0, before + acc, -1);
            s->dft_cached = before + acc;
        }
        nu_sampler_reset(s->ds);
        nu_sampler_accept_prompt(s->ds, s->seq, s->n_prompt);
        for (int32_t i = s->n_prompt; i < s->n_seq; i++) nu_sampler_accept(s->ds, s->seq[i]);
    }
    return NU_OK;
}

/* Times the library on the same settings: nu_generate_speculative (fixed
 * draft length, as here) and plain nu_generate, `count` tokens each; the
 * passes above include building their events, so they are not timed. */
static bool timing(spec_run *s, int32_t count, nu_generate_result *spec, nu_generate_result *plain,
                   nu_error *e) {
    const lab_request *r = s->r;
    nu_generate_params gp = r->req.gen;
    gp.n = 1;
    gp.n_predict = count;
    gp.logprobs = -1;
    gp.draft_max = 0;
    gp.on_text = NULL;
    nu_speculative_params sp = nu_speculative_default_params();
    sp.draft = s->dft;
    sp.lookup = r->draft == LAB_DRAFT_LOOKUP;
    sp.draft_max = r->draft_max;
    sp.draft_min = 1;
    sp.adaptive = false;
    sp.lookup_ngram_min = r->ngram_min;
    sp.lookup_ngram_max = r->ngram_max;
    nu_speculative_stats st;
    return nu_generate_speculative(s->tgt, r->prompt_text, &gp, &sp, spec, &st, e) == NU_OK &&
           nu_generate(s->tgt, r->prompt_text, &gp, plain, e) == NU_OK;
}

static void emit_done(spec_run *s, const char *finish, double ms) {
    const lab_request *r = s->r;
    cJSON *ev = cJSON_CreateObject(), *ids = cJSON_CreateArray();
    int32_t n_gen = s->n_seq - s->n_prompt;
    cJSON_AddStringToObject(ev, "type", "done");
    cJSON_AddStringToObject(ev, "finish", finish);
    cJSON_AddStringToObject(ev, "draft", draft_name(r->draft));
    for (int32_t i = s->n_prompt; i < s->n_seq; i++)
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(s->seq[i]));
    cJSON_AddItemToObject(ev, "tokens", ids);
    cJSON_AddNumberToObject(ev, "drafted", (double)s->drafted);
    cJSON_AddNumberToObject(ev, "accepted", (double)s->accepted);
    cJSON_AddNumberToObject(ev, "target_passes", (double)s->target_passes);
    cJSON_AddNumberToObject(ev, "draft_passes", (double)s->draft_passes);
    lab_add_number(ev, "acceptance_rate", s->drafted ? (double)s->accepted / s->drafted : NAN);
    int32_t emitted = n_gen + (strcmp(finish, "eos") == 0);
    lab_add_number(ev, "tokens_per_pass",
                   s->target_passes ? (double)emitted / (double)s->target_passes : NAN);
    lab_add_number(ev, "ms", ms);
    nu_generate_result spec = {0}, plain = {0};
    nu_error e;
    if (r->baseline && r->prompt_text && emitted > 0 && timing(s, emitted, &spec, &plain, &e)) {
        cJSON *t = cJSON_AddObjectToObject(ev, "timing");
        lab_add_number(t, "speculative_ms", spec.generate_ms);
        lab_add_number(t, "plain_ms", plain.generate_ms);
        lab_add_number(t, "speedup",
                       spec.generate_ms > 0 ? plain.generate_ms / spec.generate_ms : NAN);
        cJSON_AddNumberToObject(t, "tokens", plain.n_generated);
        bool same = plain.n_tokens == n_gen;
        for (int32_t i = 0; same && i < n_gen; i++)
            same = plain.tokens[i] == s->seq[s->n_prompt + i];
        if (r->req.gen.sampling.temperature <= 0) cJSON_AddBoolToObject(ev, "same_as_plain", same);
    }
    nu_generate_result_free(&spec);
    nu_generate_result_free(&plain);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->req.gen.sampling.seed);
    cJSON_AddStringToObject(ev, "seed", seed);
    lab_emit(s->job, ev);
}

static bool setup(spec_run *s, char *msg, size_t cap) {
    const lab_request *r = s->r;
    lab_env *env = s->env;
    s->n_vocab = nu_model_n_vocab(s->m);
    s->seq = malloc((size_t)(r->n_prompt + r->steps + 1) * sizeof *s->seq);
    s->draft = malloc((size_t)r->draft_max * sizeof *s->draft);
    s->q = malloc((size_t)r->draft_max * (size_t)s->n_vocab * sizeof *s->q);
    s->p = malloc((size_t)s->n_vocab * sizeof *s->p);
    s->batch = malloc((size_t)env->cfg->n_batch * sizeof *s->batch);
    if (!s->seq || !s->draft || !s->q || !s->p || !s->batch)
        return snprintf(msg, cap, "out of memory"), false;
    memcpy(s->seq, r->prompt, (size_t)r->n_prompt * sizeof *s->seq);
    s->n_seq = s->n_prompt = r->n_prompt;
    nu_error e;
    if (nu_sampler_new_for_model(&r->req.gen.sampling, s->m, &s->ts, &e) != NU_OK)
        return snprintf(msg, cap, "%s", e.message), false;
    nu_sampler_accept_prompt(s->ts, s->seq, s->n_prompt);
    nu_rng_seed(&s->rng, r->req.gen.sampling.seed);
    s->tgt = env->ctx;
    env->n_cached = 0;
    for (int32_t q = 0; q < LAB_N_SEQ; q++) nu_kv_seq_remove(s->tgt, q, 0, -1);
    if (r->draft == LAB_DRAFT_LOOKUP) return true;
    const nu_model *dm = r->draft == LAB_DRAFT_SELF ? s->m : env->cfg->draft;
    if (!ensure_draft(env, dm, msg, cap)) return false;
    s->dft = env->draft;
    nu_kv_seq_remove(s->dft, 0, 0, -1);
    nu_sampler_params dp = r->req.gen.sampling;
    dp.seed ^= 0x5bd1e995u;
    if (nu_sampler_new_for_model(&dp, dm, &s->ds, &e) != NU_OK)
        return snprintf(msg, cap, "%s", e.message), false;
    nu_sampler_accept_prompt(s->ds, s->seq, s->n_prompt);
    return true;
}

bool lab_run_speculative(lab_env *env, lab_job *job, int *status, char *msg, size_t cap) {
    spec_run s = {.env = env, .job = job, .r = &job->r, .m = env->cfg->model};
    *status = 500;
    bool ok = setup(&s, msg, cap), more = true, eos = false, go_on = true;
    nu_error e;
    int32_t unused;
    if (ok && catch_up(&s, s.tgt, 0, s.n_prompt - 1, &unused, &e) != NU_OK)
        ok = (snprintf(msg, cap, "%s", e.message), false);
    s.tgt_cached = s.n_prompt - 1;
    double t0 = nu_time_ms();
    for (int32_t i = 0; ok && more && go_on; i++)
        if (pass(&s, i, &more, &eos, &go_on, &e) != NU_OK)
            ok = (snprintf(msg, cap, "%s", e.message), false);
    double ms = nu_time_ms() - t0; /* passes and their events */
    if (ok && go_on) emit_done(&s, eos ? "eos" : "length", ms);
    if (s.tgt) nu_kv_seq_remove(s.tgt, 0, 0, -1);
    nu_sampler_free(s.ts);
    nu_sampler_free(s.ds);
    free(s.seq);
    free(s.draft);
    free(s.q);
    free(s.p);
    free(s.batch);
    return ok;
}
