/* gen_output.c - turning one sample's tokens into its result: text streamed
 * as whole UTF-8 characters, stop strings matched across token boundaries
 * and never sent out partially, log-probabilities of each token. */
#include "gen_output.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* Grows *buf to hold need elements of size elem; false on failure. */
static bool grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *p = realloc(*buf, n * elem);
    if (!p) return false;
    *buf = p;
    *cap = n;
    return true;
}

static void append_text(gen_output *o, const char *s, size_t n) {
    nu_generate_result *r = o->res;
    if (!grow((void **)&r->text, &o->text_cap, r->text_len + n + 1, 1)) {
        o->failed = true;
        return;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
}

void nu_gen_output_init(gen_output *o, nu_generate_result *res, const nu_generate_params *p,
                        const nu_model *m, int32_t index) {
    memset(o, 0, sizeof *o);
    memset(res, 0, sizeof *res);
    o->res = res;
    o->p = p;
    o->model = m;
    res->index = index;
    res->stop_index = -1;
    for (int32_t i = 0; i < p->n_stop; i++) {
        size_t len = strlen(p->stop[i]);
        if (len > o->max_stop) o->max_stop = len;
    }
    /* the tokenizer's leading space goes away only before an echoed prompt */
    nu_detokenizer_init(&o->detok, m, false,
                        p->echo && nu_vocab_adds_space_prefix(nu_model_vocab(m)));
    o->echo_detok = o->detok;
    append_text(o, "", 0);
}

float nu_logprob_of(const float *logits, int32_t n_vocab, int32_t token, double *log_z) {
    float max = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - max);
    *log_z = max + log(sum);
    return (float)(logits[token] - *log_z);
}

/* The n largest logits by insertion into a short sorted list: n <= 20, and
 * most tokens fail the first comparison. */
int32_t nu_top_logprobs(const float *logits, int32_t n_vocab, double log_z, int32_t n,
                        nu_top_logprob *out) {
    int32_t k = 0;
    for (int32_t i = 0; i < n_vocab && n > 0; i++) {
        if (k == n && logits[i] <= out[k - 1].logprob) continue;
        int32_t j = k < n ? k++ : n - 1;
        while (j > 0 && out[j - 1].logprob < logits[i]) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = (nu_top_logprob){i, logits[i]};
    }
    for (int32_t j = 0; j < k; j++) out[j].logprob = (float)(out[j].logprob - log_z);
    return k;
}

static nu_token_logprob *new_logprob(gen_output *o) {
    nu_generate_result *r = o->res;
    if (!grow((void **)&r->logprobs, &o->logprobs_cap, (size_t)r->n_logprobs + 1,
              sizeof *r->logprobs)) {
        o->failed = true;
        return NULL;
    }
    nu_token_logprob *lp = &r->logprobs[r->n_logprobs++];
    memset(lp, 0, sizeof *lp);
    lp->text_offset = r->text_len;
    return lp;
}

/* The token's log-prob and the n most likely alternatives among the
 * candidates the chain left (they need not be sorted). */
static void chain_logprobs(nu_token_logprob *lp, int32_t token, const nu_candidates *c, int32_t n) {
    int32_t k = 0;
    lp->logprob = -INFINITY;
    for (size_t i = 0; i < c->size; i++) {
        float l = logf(c->data[i].prob);
        if (c->data[i].id == token) lp->logprob = l;
        if (n == 0 || (k == n && l <= lp->top[k - 1].logprob)) continue;
        int32_t j = k < n ? k++ : n - 1;
        while (j > 0 && lp->top[j - 1].logprob < l) {
            lp->top[j] = lp->top[j - 1];
            j--;
        }
        lp->top[j] = (nu_top_logprob){c->data[i].id, l};
    }
    lp->n_top = k;
}

void nu_gen_output_prompt_logprob(gen_output *o, int32_t token, const float *logits_before) {
    nu_token_logprob *lp = new_logprob(o);
    if (!lp) return;
    lp->token = token;
    o->res->n_prompt_logprobs++;
    /* the prompt's text is all there already: the token's own offset in it
     * comes from detokenizing the prompt once more, as far as this token */
    char buf[1024];
    size_t k = nu_detokenizer_push(&o->echo_detok, token, buf, sizeof buf);
    lp->text_offset = o->echo_offset;
    o->echo_offset += k < sizeof buf ? k : sizeof buf;
    if (!logits_before) { /* the first token has nothing before it */
        lp->logprob = NAN;
        return;
    }
    double log_z;
    int32_t n_vocab = nu_model_n_vocab(o->model);
    lp->logprob = nu_logprob_of(logits_before, n_vocab, token, &log_z);
    lp->n_top = nu_top_logprobs(logits_before, n_vocab, log_z, o->p->logprobs, lp->top);
}

/* Sends text [emitted, end) to the callback; false when it asks to stop. */
static bool send(gen_output *o, size_t end) {
    bool go_on = true;
    if (end > o->emitted && o->p->on_text)
        go_on =
            o->p->on_text(o->p->user, o->res->index, o->res->text + o->emitted, end - o->emitted);
    if (end > o->emitted) o->emitted = end;
    return go_on;
}

void nu_gen_output_echo(gen_output *o, const int32_t *prompt, int32_t n) {
    char buf[1024];
    for (int32_t i = 0; i < n; i++) {
        size_t k = nu_detokenizer_push(&o->detok, prompt[i], buf, sizeof buf);
        append_text(o, buf, k < sizeof buf ? k : sizeof buf);
    }
    o->gen_start = o->res->text_len;
}

/* The earliest complete stop string in the generated text that may involve
 * the bytes from `from` on; returns its offset or -1 (*which: its index). */
static long find_stop(const gen_output *o, size_t from, size_t *stop_len, int32_t *which) {
    const char *text = o->res->text;
    long best = -1;
    size_t start = from > o->gen_start + o->max_stop ? from - o->max_stop : o->gen_start;
    for (int32_t i = 0; i < o->p->n_stop; i++) {
        size_t len = strlen(o->p->stop[i]);
        if (len == 0) continue;
        const char *hit = memmem(text + start, o->res->text_len - start, o->p->stop[i], len);
        if (hit && (best < 0 || hit - text < best)) {
            best = hit - text;
            *stop_len = len;
            *which = i;
        }
    }
    return best;
}

/* Bytes at the end of the text that could still grow into a stop string. */
static size_t held_back(const gen_output *o) {
    size_t keep = 0, len = o->res->text_len - o->gen_start;
    const char *end = o->res->text + o->res->text_len;
    for (int32_t i = 0; i < o->p->n_stop; i++) {
        size_t sl = strlen(o->p->stop[i]);
        for (size_t k = sl > len + 1 ? len : sl - 1; k > keep; k--)
            if (memcmp(end - k, o->p->stop[i], k) == 0) {
                keep = k;
                break;
            }
    }
    return keep;
}

static void record_token(gen_output *o, int32_t token, const float *logits,
                         const nu_candidates *after_chain) {
    nu_generate_result *r = o->res;
    if (!grow((void **)&r->tokens, &o->tokens_cap, (size_t)r->n_tokens + 1, sizeof *r->tokens)) {
        o->failed = true;
        return;
    }
    r->tokens[r->n_tokens++] = token;
    double log_z;
    float lp = nu_logprob_of(logits, nu_model_n_vocab(o->model), token, &log_z);
    r->sum_logprob += lp;
    if (o->p->logprobs < 0) return;
    nu_token_logprob *t = new_logprob(o);
    if (!t) return;
    t->token = token;
    if (o->p->logprobs_after_chain && after_chain) {
        chain_logprobs(t, token, after_chain, o->p->logprobs);
    } else {
        t->logprob = lp;
        t->n_top =
            nu_top_logprobs(logits, nu_model_n_vocab(o->model), log_z, o->p->logprobs, t->top);
    }
}

nu_finish_reason nu_gen_output_token(gen_output *o, int32_t token, const float *logits,
                                     const nu_candidates *after_chain) {
    record_token(o, token, logits, after_chain);
    char buf[1024];
    size_t before = o->res->text_len;
    size_t k = nu_detokenizer_push(&o->detok, token, buf, sizeof buf);
    append_text(o, buf, k < sizeof buf ? k : sizeof buf);
    size_t stop_len = 0;
    long hit = o->p->n_stop ? find_stop(o, before, &stop_len, &o->res->stop_index) : -1;
    if (hit >= 0) {
        o->res->text_len = (size_t)hit + (o->p->include_stop ? stop_len : 0);
        o->res->text[o->res->text_len] = 0;
        send(o, o->res->text_len);
        return NU_FINISH_STOP;
    }
    size_t safe = o->res->text_len - (o->p->n_stop ? held_back(o) : 0);
    return send(o, safe) ? NU_FINISH_NONE : NU_FINISH_CANCELLED;
}

void nu_gen_output_finish(gen_output *o, nu_finish_reason why) {
    o->res->finish = why;
    if (why == NU_FINISH_STOP || why == NU_FINISH_CANCELLED) return;
    char buf[16];
    size_t k = nu_detokenizer_flush(&o->detok, buf, sizeof buf);
    append_text(o, buf, k);
    send(o, o->res->text_len);
}
