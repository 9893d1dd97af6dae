/* lab_beam.c - POST /v1/inspect/beam: beam search with its tree.
 *
 * The search follows nu_beam_search's rule (src/beam.c) so that its
 * hypotheses are the library's: each step, every live beam's next-token
 * log-probabilities are added to its total; the best 2 * width extensions
 * over all beams are taken best first: one that ends with an
 * end-of-generation token becomes a finished hypothesis scored
 *   score = sum_logprob / length^length_penalty   (length without the end)
 * and the others become the next live beams until there are width of them.
 * Without early stopping the search ends when no live beam can beat the
 * worst of width finished hypotheses (with early stopping as soon as there
 * are width); at max_tokens the live beams become hypotheses too. It is
 * written here again, on the public API, because the library's search does
 * not show its steps; the end-to-end tests check both give the same
 * hypotheses.
 *
 * Every step emits the tree's new nodes: the extensions kept ("live" or
 * "finished") and up to `pruned` of the best ones that were cut. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_internal.h"

typedef struct node {
    int32_t parent; /* -1 for the root (the prompt) */
    int32_t token;
    int32_t length; /* generated tokens up to and including this one (end tokens not counted) */
    double logprob, sum;
} node;

typedef struct live_beam {
    int32_t node, seq, entry;
    double sum;
    int32_t n;
} live_beam;

typedef struct extension {
    int32_t parent; /* index into live */
    int32_t token;
    double logprob, sum;
} extension;

typedef struct hyp {
    int32_t node;
    double score;
    const char *finish;
} hyp;

typedef struct beam_run {
    lab_env *env;
    lab_job *job;
    const nu_model *m;
    const nu_beam_params *p;
    int32_t n_vocab, n_prompt;
    node *nodes;
    int32_t n_nodes, cap_nodes;
    live_beam *live, *next;
    int32_t n_live;
    extension *ext, *per_beam;
    hyp *hyps;
    int32_t n_hyps;
    nu_batch_entry *batch;
} beam_run;

static double length_score(double sum, int32_t n, float alpha) {
    return n > 0 && alpha != 0.0f ? sum / pow((double)n, alpha) : sum;
}

static int32_t add_node(beam_run *b, int32_t parent, int32_t token, int32_t length, double lp,
                        double sum) {
    if (b->n_nodes == b->cap_nodes) {
        int32_t cap = b->cap_nodes ? 2 * b->cap_nodes : 64;
        node *p = realloc(b->nodes, (size_t)cap * sizeof *p);
        if (!p) return -1;
        b->nodes = p;
        b->cap_nodes = cap;
    }
    b->nodes[b->n_nodes] = (node){parent, token, length, lp, sum};
    return b->n_nodes++;
}

/* Keeps the best width hypotheses, best score first (ties: the earlier). */
static void add_hypothesis(beam_run *b, int32_t nd, double sum, int32_t n, const char *finish) {
    double score = length_score(sum, n, b->p->length_penalty);
    int32_t cap = b->p->width;
    if (b->n_hyps == cap && score <= b->hyps[cap - 1].score) return;
    int32_t i = b->n_hyps < cap ? b->n_hyps++ : cap - 1;
    while (i > 0 && b->hyps[i - 1].score < score) {
        b->hyps[i] = b->hyps[i - 1];
        i--;
    }
    b->hyps[i] = (hyp){nd, score, finish};
}

/* Inserts x into a list of at most k, best sum first, keeping earlier ones
 * ahead of equal later ones. */
static void insert_best(extension *list, int32_t *n, int32_t k, extension x) {
    if (*n == k && x.sum <= list[k - 1].sum) return;
    int32_t j = *n < k ? (*n)++ : k - 1;
    while (j > 0 && list[j - 1].sum < x.sum) {
        list[j] = list[j - 1];
        j--;
    }
    list[j] = x;
}

/* The best 2 * width extensions over every live beam, best first. */
static int32_t best_extensions(beam_run *b) {
    int32_t k = 2 * b->p->width, n_ext = 0;
    for (int32_t i = 0; i < b->n_live; i++) {
        const float *logits = nu_logits(b->env->ctx, b->live[i].entry);
        double max = -INFINITY, z = 0;
        for (int32_t t = 0; t < b->n_vocab; t++) max = logits[t] > max ? logits[t] : max;
        for (int32_t t = 0; t < b->n_vocab; t++) z += exp((double)logits[t] - max);
        double log_z = max + log(z);
        /* this beam's best k tokens by log-prob, then merged */
        int32_t n_own = 0;
        for (int32_t t = 0; t < b->n_vocab; t++) {
            double lp = (double)logits[t] - log_z;
            insert_best(b->per_beam, &n_own, k, (extension){i, t, lp, lp});
        }
        for (int32_t j = 0; j < n_own; j++) {
            extension x = b->per_beam[j];
            x.sum = b->live[i].sum + x.logprob;
            insert_best(b->ext, &n_ext, k, x);
        }
    }
    return n_ext;
}

static bool search_done(const beam_run *b, int32_t len) {
    if (b->n_live == 0) return true;
    if (b->n_hyps < b->p->width) return false;
    if (b->p->early_stopping) return true;
    double best = b->live[0].sum;
    for (int32_t i = 1; i < b->n_live; i++) best = b->live[i].sum > best ? b->live[i].sum : best;
    return length_score(best, len, b->p->length_penalty) <= b->hyps[b->n_hyps - 1].score;
}

static cJSON *node_json(const beam_run *b, int32_t id, const char *status) {
    const node *n = &b->nodes[id];
    cJSON *o = lab_token_json(b->m, n->token);
    cJSON_AddNumberToObject(o, "id", id);
    cJSON_AddNumberToObject(o, "parent", n->parent);
    cJSON_AddStringToObject(o, "status", status);
    lab_add_number(o, "logprob", n->logprob);
    lab_add_number(o, "sum_logprob", n->sum);
    lab_add_number(o, "score", length_score(n->sum, n->length, b->p->length_penalty));
    cJSON_AddNumberToObject(o, "length", n->length);
    return o;
}

/* One step: extensions into nodes, the event, the next live beams decoded. */
static bool step(beam_run *b, int32_t len, int32_t bank, bool *go_on, nu_error *e) {
    int32_t n_ext = best_extensions(b), n_next = 0, w = b->p->width, shown_cut = 0;
    cJSON *ev = cJSON_CreateObject(), *nodes = cJSON_CreateArray();
    cJSON_AddStringToObject(ev, "type", "beam_step");
    cJSON_AddNumberToObject(ev, "step", len + 1);
    for (int32_t x = 0; x < n_ext; x++) {
        const extension *ex = &b->ext[x];
        const live_beam *parent = &b->live[ex->parent];
        bool eog = nu_token_is_eog(b->m, ex->token), taken = n_next < w;
        if (!taken && shown_cut >= b->job->r.beam_pruned) continue;
        int32_t id =
            add_node(b, parent->node, ex->token, parent->n + (eog ? 0 : 1), ex->logprob, ex->sum);
        if (id < 0) {
            snprintf(e->message, sizeof e->message, "out of memory");
            cJSON_Delete(ev);
            cJSON_Delete(nodes);
            return false;
        }
        if (!taken) {
            shown_cut++;
            cJSON_AddItemToArray(nodes, node_json(b, id, "pruned"));
            continue;
        }
        if (eog) {
            add_hypothesis(b, id, ex->sum, parent->n, "eos");
            cJSON_AddItemToArray(nodes, node_json(b, id, "finished"));
            continue;
        }
        live_beam *nb = &b->next[n_next];
        *nb = (live_beam){id, bank * w + n_next, n_next, ex->sum, parent->n + 1};
        nu_kv_seq_remove(b->env->ctx, nb->seq, 0, -1);
        nu_kv_seq_copy(b->env->ctx, parent->seq, nb->seq, 0, -1);
        b->batch[n_next] = (nu_batch_entry){ex->token, b->n_prompt + len, nb->seq, true};
        cJSON_AddItemToArray(nodes, node_json(b, id, "live"));
        n_next++;
    }
    cJSON_AddItemToObject(ev, "nodes", nodes);
    for (int32_t i = 0; i < b->n_live; i++) nu_kv_seq_remove(b->env->ctx, b->live[i].seq, 0, -1);
    live_beam *t = b->live;
    b->live = b->next;
    b->next = t;
    b->n_live = n_next;
    cJSON *best = cJSON_AddArrayToObject(ev, "finished");
    for (int32_t i = 0; i < b->n_hyps; i++) {
        cJSON *h = cJSON_CreateObject();
        cJSON_AddNumberToObject(h, "id", b->hyps[i].node);
        lab_add_number(h, "score", b->hyps[i].score);
        cJSON_AddItemToArray(best, h);
    }
    *go_on = lab_emit(b->job, ev);
    return n_next == 0 || nu_decode(b->env->ctx, b->batch, n_next, e) == NU_OK;
}

/* The tokens from the root to a node (malloc'd, *n of them; end tokens left out). */
static int32_t *path_of(const beam_run *b, int32_t id, int32_t *n) {
    int32_t depth = 0;
    for (int32_t i = id; i > 0; i = b->nodes[i].parent) depth++;
    int32_t *toks = malloc(((size_t)depth + 1) * sizeof *toks);
    *n = 0;
    if (!toks) return NULL;
    for (int32_t i = id, k = depth; i > 0; i = b->nodes[i].parent) toks[--k] = b->nodes[i].token;
    *n = depth;
    if (depth > 0 && nu_token_is_eog(b->m, toks[depth - 1])) (*n)--;
    return toks;
}

static void emit_done(beam_run *b) {
    cJSON *ev = cJSON_CreateObject(), *hyps = cJSON_CreateArray();
    cJSON_AddStringToObject(ev, "type", "done");
    char piece[512];
    for (int32_t i = 0; i < b->n_hyps; i++) {
        int32_t n;
        int32_t *toks = path_of(b, b->hyps[i].node, &n);
        cJSON *h = cJSON_CreateObject(), *ids = cJSON_CreateArray();
        size_t cap = 64 + (size_t)n * sizeof piece, len = 0;
        char *text = malloc(cap);
        nu_detokenizer d;
        nu_detokenizer_init(&d, b->m, false, false);
        for (int32_t k = 0; toks && k < n; k++) {
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(toks[k]));
            size_t got = nu_detokenizer_push(&d, toks[k], piece, sizeof piece);
            if (text) memcpy(text + len, piece, got < sizeof piece ? got : sizeof piece);
            len += got < sizeof piece ? got : sizeof piece;
        }
        if (text) {
            len += nu_detokenizer_flush(&d, text + len, 16);
            text[len] = 0;
        }
        cJSON_AddNumberToObject(h, "id", b->hyps[i].node);
        cJSON_AddStringToObject(h, "text", text ? text : "");
        cJSON_AddItemToObject(h, "tokens", ids);
        lab_add_number(h, "sum_logprob", b->nodes[b->hyps[i].node].sum);
        lab_add_number(h, "score", b->hyps[i].score);
        cJSON_AddStringToObject(h, "finish", b->hyps[i].finish);
        cJSON_AddItemToArray(hyps, h);
        free(text);
        free(toks);
    }
    cJSON_AddItemToObject(ev, "hypotheses", hyps);
    lab_add_number(ev, "length_penalty", b->p->length_penalty);
    cJSON_AddNumberToObject(ev, "width", b->p->width);
    lab_emit(b->job, ev);
}

static bool alloc_run(beam_run *b) {
    int32_t w = b->p->width;
    b->live = calloc((size_t)w, sizeof *b->live);
    b->next = calloc((size_t)w, sizeof *b->next);
    b->ext = calloc(2 * (size_t)w, sizeof *b->ext);
    b->per_beam = calloc(2 * (size_t)w, sizeof *b->per_beam);
    b->hyps = calloc((size_t)w, sizeof *b->hyps);
    b->batch = calloc((size_t)w, sizeof *b->batch);
    return b->live && b->next && b->ext && b->per_beam && b->hyps && b->batch;
}

bool lab_run_beam(lab_env *env, lab_job *job, int *status, char *msg, size_t cap) {
    const lab_request *r = &job->r;
    beam_run b = {.env = env,
                  .job = job,
                  .m = env->cfg->model,
                  .p = &r->beam,
                  .n_vocab = nu_model_n_vocab(env->cfg->model),
                  .n_prompt = r->n_prompt};
    *status = 500;
    nu_error e;
    bool ok = alloc_run(&b) && add_node(&b, -1, r->prompt[r->n_prompt - 1], 0, 0, 0) == 0;
    if (!ok) snprintf(msg, cap, "out of memory");
    int32_t entry = 0;
    if (ok && lab_feed(env, env->ctx, r->prompt, r->n_prompt, &entry, &e) != NU_OK)
        ok = (snprintf(msg, cap, "%s", e.message), false);
    env->n_cached = 0; /* the beams rewrite sequence 0 */
    b.live[0] = (live_beam){0, 0, entry, 0, 0};
    b.n_live = 1;
    bool go_on = true;
    for (int32_t len = 0, bank = 1; ok && go_on && len < r->steps; len++, bank ^= 1) {
        if (!step(&b, len, bank, &go_on, &e)) ok = (snprintf(msg, cap, "%s", e.message), false);
        if (ok && search_done(&b, len + 1)) break;
    }
    for (int32_t i = 0; ok && i < b.n_live; i++)
        add_hypothesis(&b, b.live[i].node, b.live[i].sum, b.live[i].n, "length");
    if (ok && go_on) emit_done(&b);
    for (int32_t q = 0; q < LAB_N_SEQ; q++) nu_kv_seq_remove(env->ctx, q, 0, -1);
    free(b.nodes);
    free(b.live);
    free(b.next);
    free(b.ext);
    free(b.per_beam);
    free(b.hyps);
    free(b.batch);
    return ok;
}
