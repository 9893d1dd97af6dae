/* bench_grammar.c - what constrained sampling costs per token.
 *
 * On a real 32000-token vocabulary (LLaMA's SentencePiece vocabulary, loaded
 * without weights) and a JSON Schema with nested objects, arrays, enums,
 * bounded numbers and formatted strings, it times per generated token:
 *   unconstrained  softmax and a draw over the full vocabulary (the work any
 *                  sampler does anyway);
 *   ignoring       a "model" whose logits are random, so its first choice
 *                  is almost always refused: check it, mask the whole
 *                  vocabulary, draw again, accept (the worst case), with the
 *                  mask cache on and off;
 *   following      a "model" that puts the most weight on a token the
 *                  grammar allows (what a model that knows JSON does):
 *                  draw, one cheap check, accept;
 * and compares them with a TinyLlama-1.1B forward pass (35-50 ms/token on
 * this class of CPU), so the overhead reads as a percentage.
 *
 * Usage: bench_grammar [VOCAB.gguf] [--tokens N]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "nucleus.h"

static const char schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},"
    "\"created\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
    "\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
    "\"required\":[\"street\",\"city\"]},"
    "\"notes\":{\"type\":\"string\"}},"
    "\"required\":[\"id\",\"name\",\"age\",\"role\",\"tags\",\"address\",\"notes\"]}";

typedef struct run_stats {
    long tokens, checks, refused, masks;
    double ms, check_ms, mask_ms, accept_ms; /* all, and the grammar calls alone */
} run_stats;

/* Inverse-CDF draw over the candidates' probabilities. */
static size_t draw(nu_candidates *c, nu_rng *rng) {
    nu_candidates_softmax(c);
    double u = nu_rng_uniform(rng), cum = 0;
    for (size_t i = 0; i < c->size; i++) {
        cum += c->data[i].prob;
        if (u < cum) return i;
    }
    return c->size - 1;
}

/* Random logits: roughly the spread a language model's have. */
static void random_logits(float *lg, int n, nu_rng *rng) {
    for (int i = 0; i < n; i++) {
        double u1 = nu_rng_uniform(rng) + 1e-12, u2 = nu_rng_uniform(rng);
        lg[i] = (float)(2.5 * sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
    }
}

static void fill(nu_candidates *c, nu_candidate *cand, const float *lg, int n) {
    for (int i = 0; i < n; i++) cand[i] = (nu_candidate){i, lg[i], 0};
    *c = (nu_candidates){cand, (size_t)n, false, -1};
}

/* Baseline: softmax and a draw over the whole vocabulary. */
static double bench_unconstrained(int n_vocab, int n_tokens, float *lg, nu_candidate *cand) {
    nu_rng rng;
    nu_rng_seed(&rng, 1);
    double total = 0;
    for (int t = 0; t < n_tokens; t++) {
        random_logits(lg, n_vocab, &rng);
        double t0 = nu_time_ms();
        nu_candidates c;
        fill(&c, cand, lg, n_vocab);
        (void)draw(&c, &rng);
        total += nu_time_ms() - t0;
    }
    return total / n_tokens;
}

/* One constrained generation of at most n_tokens. With `follow`, the token
 * the script says comes next gets a high logit (a model that knows the
 * format); else logits are random. Records the tokens in script. */
static run_stats generate(const nu_model *m, const nu_grammar *g, int n_tokens, bool follow,
                          bool cache, int32_t *script, int *n_script, uint64_t seed) {
    int n_vocab = nu_model_n_vocab(m);
    float *lg = malloc((size_t)n_vocab * sizeof *lg);
    nu_candidate *cand = malloc((size_t)n_vocab * sizeof *cand);
    nu_grammar_state *s;
    nu_error err;
    run_stats st = {0};
    if (!lg || !cand || nu_grammar_state_new(g, &s, &err)) {
        fprintf(stderr, "bench_grammar: setup failed\n");
        exit(1);
    }
    nu_grammar_state_set_cache(s, cache);
    nu_grammar_state_set_budget(s, n_tokens, NULL);
    nu_rng rng;
    nu_rng_seed(&rng, seed);
    for (int t = 0; t < n_tokens && !nu_grammar_must_end(s); t++) {
        random_logits(lg, n_vocab, &rng);
        if (follow && t < *n_script) lg[script[t]] += 25.0f;
        double t0 = nu_time_ms();
        nu_candidates c;
        fill(&c, cand, lg, n_vocab);
        int32_t tok = c.data[draw(&c, &rng)].id;
        st.checks++;
        double t1 = nu_time_ms();
        bool ok = nu_grammar_allows(s, tok);
        st.check_ms += nu_time_ms() - t1;
        if (!ok) {
            st.refused++;
            st.masks++;
            fill(&c, cand, lg, n_vocab);
            t1 = nu_time_ms();
            nu_grammar_mask(s, &c);
            st.mask_ms += nu_time_ms() - t1;
            tok = c.data[draw(&c, &rng)].id;
        }
        if (nu_token_is_eog(m, tok)) break;
        t1 = nu_time_ms();
        if (nu_grammar_accept(s, tok, &err)) {
            fprintf(stderr, "bench_grammar: %s\n", err.message);
            exit(1);
        }
        st.accept_ms += nu_time_ms() - t1;
        st.ms += nu_time_ms() - t0;
        if (!follow) script[(*n_script)++] = tok;
        st.tokens++;
    }
    nu_grammar_state_free(s);
    free(lg);
    free(cand);
    return st;
}

/* Per token: all the sampling work, and the grammar's own share. */
static void report(const char *what, run_stats s, double base_us) {
    double n = (double)s.tokens, grammar = 1000.0 * (s.check_ms + s.mask_ms + s.accept_ms) / n;
    printf("%s (%.0f%% of first draws refused)\n", what,
           100.0 * (double)s.refused / (double)s.checks);
    printf("  sampling in all    %8.1f us/token (unconstrained: %.1f)\n", 1000.0 * s.ms / n,
           base_us);
    printf("  grammar calls      %8.1f us/token = check %.1f + mask %.1f + accept %.1f\n", grammar,
           1000.0 * s.check_ms / n, 1000.0 * s.mask_ms / n, 1000.0 * s.accept_ms / n);
    if (s.masks)
        printf("  one full mask      %8.1f us on average\n", 1000.0 * s.mask_ms / (double)s.masks);
    printf("  overhead vs forward pass: %.2f%% (50 ms) to %.2f%% (35 ms), grammar calls "
           "plus the extra draw: %.2f%% to %.2f%%\n",
           grammar / 500.0, grammar / 350.0, (1000.0 * s.ms / n - base_us) / 500.0,
           (1000.0 * s.ms / n - base_us) / 350.0);
}

int main(int argc, char **argv) {
    const char *path = NU_SHARED_DIR "/vocab/ggml-vocab-llama-spm.gguf";
    int n_tokens = 400;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            n_tokens = atoi(argv[++i]);
        else
            path = argv[i];
    }
    nu_model_params mp = nu_model_default_params();
    mp.mode = NU_LOAD_VOCAB_ONLY;
    nu_model *m;
    nu_grammar *g;
    nu_error err;
    if (nu_model_load(path, &mp, &m, &err)) {
        fprintf(stderr, "bench_grammar: %s\n", err.message);
        return 1;
    }
    double t0 = nu_time_ms();
    if (nu_grammar_from_json_schema(m, schema, NULL, &g, &err)) {
        fprintf(stderr, "bench_grammar: %s\n", err.message);
        return 1;
    }
    int n_vocab = nu_model_n_vocab(m);
    printf("vocabulary %s: %d tokens; schema compiled and bound in %.1f ms\n", path, n_vocab,
           nu_time_ms() - t0);
    float *lg = malloc((size_t)n_vocab * sizeof *lg);
    nu_candidate *cand = malloc((size_t)n_vocab * sizeof *cand);
    int32_t *script = malloc((size_t)n_tokens * sizeof *script);
    int32_t *again = malloc((size_t)n_tokens * sizeof *again);
    int n_script = 0, unused = 0;
    double base = 1000.0 * bench_unconstrained(n_vocab, n_tokens, lg, cand);
    printf("%-34s %8.1f us/token\n", "unconstrained (softmax + draw)", base);
    run_stats ign = generate(m, g, n_tokens, false, true, script, &n_script, 7);
    run_stats nocache = generate(m, g, n_tokens, false, false, again, &unused, 7);
    run_stats fol = generate(m, g, n_tokens, true, true, script, &n_script, 9);
    report("model ignores grammar, cache on", ign, base);
    report("model ignores grammar, cache off", nocache, base);
    report("model follows grammar", fol, base);
    printf("(%ld, %ld and %ld tokens generated)\n", ign.tokens, nocache.tokens, fol.tokens);
    free(lg);
    free(cand);
    free(script);
    free(again);
    nu_grammar_free(g);
    nu_model_free(m);
    return 0;
}
