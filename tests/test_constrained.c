/* test_constrained.c - constrained generation end to end: hundreds of
 * sampled generations from stories260K (a model of children's stories, not
 * of JSON: the grammar does all the work) for a set of JSON Schemas, at
 * temperatures 0.5 to 1.5, each with a token budget.
 *
 * Every output must be complete (the budget steers generation to close its
 * structures in time) and parse as JSON; then all of them are written to a
 * file and validated against their schemas by ajv + ajv-formats
 * (tests/js/validate.js), a validator nucleus did not write. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test_support.h"

#if defined(__SANITIZE_ADDRESS__)
#define PER_SCHEMA 20 /* sanitizers are slow: fewer, still every schema */
#else
#define PER_SCHEMA 40
#endif
#define BUDGET 200 /* tokens per output */

typedef struct schema_case {
    const char *name;
    const char *schema; /* NULL: any JSON object */
    int max_ws;
} schema_case;

static const schema_case cases[] = {
    {"person",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":20},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},\"email\":"
     "{\"type\":\"string\",\"format\":\"email\"},\"address\":{\"type\":\"object\",\"properties\":"
     "{\"street\":{\"type\":\"string\",\"maxLength\":30},\"city\":{\"type\":\"string\","
     "\"maxLength\":20},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":"
     "[\"city\"]}},\"required\":[\"name\",\"age\",\"address\"]}",
     0},
    {"inventory",
     "{\"type\":\"array\",\"minItems\":1,\"maxItems\":4,\"items\":{\"type\":\"object\","
     "\"properties\":{\"sku\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{3}$\"},\"qty\":"
     "{\"type\":\"integer\",\"minimum\":1,\"maximum\":999},\"price\":{\"type\":\"number\","
     "\"exclusiveMinimum\":0,\"maximum\":1000}},\"required\":[\"sku\",\"qty\",\"price\"],"
     "\"additionalProperties\":false}}",
     0},
    {"enums",
     "{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
     "\"size\":{\"enum\":[1,2,3.5,null]},\"flag\":{\"const\":true},\"mixed\":{\"enum\":[\"a\","
     "{\"b\":[1,2]},[],false]}},\"required\":[\"color\",\"size\",\"flag\",\"mixed\"]}",
     0},
    {"numbers",
     "{\"type\":\"object\",\"properties\":{\"temp\":{\"type\":\"number\",\"minimum\":-40.5,"
     "\"maximum\":50.25},\"ratio\":{\"type\":\"number\",\"exclusiveMinimum\":0,"
     "\"exclusiveMaximum\":1},\"count\":{\"type\":\"integer\",\"minimum\":-1000,\"maximum\":-10},"
     "\"big\":{\"type\":\"integer\",\"exclusiveMinimum\":1000000},\"any\":{\"type\":\"number\"},"
     "\"int\":{\"type\":\"integer\"}},\"required\":[\"temp\",\"ratio\",\"count\",\"big\",\"any\","
     "\"int\"]}",
     0},
    {"optional",
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":"
     "\"boolean\"},\"c\":{\"type\":\"null\"},\"d\":{\"type\":[\"integer\",\"string\"]}}}",
     1},
    {"formats",
     "{\"type\":\"object\",\"properties\":{\"date\":{\"type\":\"string\",\"format\":\"date\"},"
     "\"time\":{\"type\":\"string\",\"format\":\"time\"},\"when\":{\"type\":\"string\","
     "\"format\":\"date-time\"},\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"mail\":"
     "{\"type\":\"string\",\"format\":\"email\"}},\"required\":[\"date\",\"time\",\"when\","
     "\"id\",\"mail\"]}",
     0},
    {"ref-tree",
     "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\","
     "\"minimum\":0,\"maximum\":9},\"children\":{\"type\":\"array\",\"items\":{\"$ref\":"
     "\"#/$defs/node\"},\"maxItems\":3}},\"required\":[\"value\"]}},\"$ref\":\"#/$defs/node\"}",
     0},
    {"union",
     "{\"type\":\"object\",\"properties\":{\"shape\":{\"oneOf\":[{\"type\":\"object\","
     "\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\",\"minimum\":0,"
     "\"maximum\":10}},\"required\":[\"kind\",\"r\"],\"additionalProperties\":false},{\"type\":"
     "\"object\",\"properties\":{\"kind\":{\"const\":\"rect\"},\"w\":{\"type\":\"integer\","
     "\"minimum\":1,\"maximum\":5},\"h\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":5}},"
     "\"required\":[\"kind\",\"w\",\"h\"],\"additionalProperties\":false}]},\"label\":{\"anyOf\":"
     "[{\"type\":\"string\",\"maxLength\":8},{\"type\":\"null\"}]}},\"required\":[\"shape\","
     "\"label\"]}",
     0},
    {"tuple-extra",
     "{\"type\":\"object\",\"properties\":{\"point\":{\"type\":\"array\",\"prefixItems\":[{"
     "\"type\":\"number\"},{\"type\":\"number\"},{\"enum\":[\"m\",\"km\"]}],\"items\":false,"
     "\"minItems\":2},\"meta\":{\"type\":\"object\",\"properties\":{\"v\":{\"const\":1}},"
     "\"required\":[\"v\"],\"additionalProperties\":{\"type\":\"integer\",\"minimum\":0,"
     "\"maximum\":99}}},\"required\":[\"point\",\"meta\"]}",
     0},
    {"allof",
     "{\"allOf\":[{\"$ref\":\"#/$defs/base\"},{\"properties\":{\"extra\":{\"type\":\"string\","
     "\"minLength\":2,\"maxLength\":4}},\"required\":[\"extra\"]}],\"$defs\":{\"base\":{\"type\":"
     "\"object\",\"properties\":{\"id\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":100}},"
     "\"required\":[\"id\"]}}}",
     0},
    {"strings-ws",
     "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12},\"maxItems\":5}", 2},
    {"any-object", NULL, 0},
};

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

/* The model and the buffers one generation needs. */
typedef struct gen {
    nu_model *m;
    nu_context *ctx;
    nu_candidate *cand;
    int n_vocab;
} gen;

static void fill(const gen *g, const float *logits, float temp) {
    for (int i = 0; i < g->n_vocab; i++) g->cand[i] = (nu_candidate){i, logits[i] / temp, 0};
}

/* Runs the prompt; returns the position after it. */
static int32_t prefill(const gen *g, const char *prompt) {
    int32_t toks[64];
    size_t n = 0;
    assert_int_equal(
        nu_tokenize(g->m, prompt, strlen(prompt), NU_TOKENIZE_ADD_BOS, toks, 64, &n, NULL), NU_OK);
    nu_batch_entry b[64];
    for (size_t i = 0; i < n; i++) b[i] = (nu_batch_entry){toks[i], (int32_t)i, 0, i + 1 == n};
    nu_kv_clear(g->ctx);
    assert_int_equal(nu_decode(g->ctx, b, (int32_t)n, NULL), NU_OK);
    return (int32_t)n;
}

/* Picks the next token: a plain draw, checked; if the grammar refuses it,
 * a draw from the masked candidates (the same distribution as masking
 * first, at less cost). */
static int32_t next_token(const gen *g, nu_grammar_state *s, const float *logits, float temp,
                          nu_rng *rng) {
    nu_candidates c = {g->cand, (size_t)g->n_vocab, false, -1};
    fill(g, logits, temp);
    int32_t t = c.data[draw(&c, rng)].id;
    if (nu_grammar_allows(s, t)) return t;
    fill(g, logits, temp);
    c = (nu_candidates){g->cand, (size_t)g->n_vocab, false, -1};
    nu_grammar_mask(s, &c);
    assert_true(c.size > 0);
    return c.data[draw(&c, rng)].id;
}

/* One constrained generation into out (NUL-terminated). Stops when the
 * grammar must end, on an end-of-generation token, or when the budget is
 * spent (the grammar is then complete by construction). */
static void generate(const gen *g, const nu_grammar *gr, const char *prompt, float temp,
                     uint64_t seed, char *out, size_t cap) {
    nu_grammar_state *s;
    nu_error err = {0};
    assert_int_equal(nu_grammar_state_new(gr, &s, NULL), NU_OK);
    if (nu_grammar_state_set_budget(s, BUDGET, &err)) fail_msg("%s", err.message);
    nu_rng rng;
    nu_rng_seed(&rng, seed);
    int32_t pos = prefill(g, prompt), row = pos - 1; /* the batch entry holding the logits */
    size_t n = 0;
    for (int i = 0; i < BUDGET && !nu_grammar_must_end(s); i++) {
        int32_t t = next_token(g, s, nu_logits(g->ctx, row), temp, &rng);
        if (nu_token_is_eog(g->m, t)) break;
        if (nu_grammar_accept(s, t, &err)) fail_msg("accept: %s", err.message);
        n += nu_token_to_bytes(g->m, t, false, out + n, cap - n - 1);
        assert_true(n < cap - 1);
        nu_batch_entry e = {t, pos++, 0, true};
        assert_int_equal(nu_decode(g->ctx, &e, 1, NULL), NU_OK);
        row = 0;
    }
    out[n] = 0;
    if (!nu_grammar_is_complete(s)) fail_msg("incomplete output: %s", out);
    nu_grammar_state_free(s);
}

static nu_grammar *case_grammar(const nu_model *m, const schema_case *sc) {
    nu_json_options o = nu_json_default_options();
    o.max_whitespace = sc->max_ws;
    nu_grammar *gr = NULL;
    nu_error err = {0};
    nu_status st = sc->schema ? nu_grammar_from_json_schema(m, sc->schema, &o, &gr, &err)
                              : nu_grammar_json_object(m, &o, &gr, &err);
    if (st) fail_msg("%s: %s", sc->name, err.message);
    return gr;
}

/* Generates PER_SCHEMA outputs for one schema; each must parse. Returns
 * the case as {"name", "schema", "outputs"} for the validator. */
static cJSON *run_case(const gen *g, const schema_case *sc, int index) {
    static const char *prompts[] = {"Once upon a time", "The data:", "{", "Lily said"};
    nu_grammar *gr = case_grammar(g->m, sc);
    cJSON *c = cJSON_CreateObject(), *outs = cJSON_CreateArray();
    cJSON_AddStringToObject(c, "name", sc->name);
    cJSON_AddItemToObject(c, "schema", sc->schema ? cJSON_Parse(sc->schema) : cJSON_CreateNull());
    cJSON_AddItemToObject(c, "outputs", outs);
    char out[8192];
    for (int k = 0; k < PER_SCHEMA; k++) {
        float temp = 0.5f + 0.1f * (float)(k % 11);
        generate(g, gr, prompts[k % 4], temp, 1000u * (uint64_t)index + (uint64_t)k, out,
                 sizeof out);
        cJSON *parsed = cJSON_Parse(out);
        if (!parsed) fail_msg("%s: output %d does not parse: %s", sc->name, k, out);
        if (!sc->schema) assert_true(cJSON_IsObject(parsed));
        cJSON_Delete(parsed);
        cJSON_AddItemToArray(outs, cJSON_CreateString(out));
    }
    print_message("%-12s %d outputs complete and parsing, e.g. %s\n", sc->name, PER_SCHEMA, out);
    nu_grammar_free(gr);
    return c;
}

/* The directory of this source file (tests/), where js/ lives. */
static void tests_dir(char *buf, size_t cap) {
    snprintf(buf, cap, "%s", __FILE__);
    char *slash = strrchr(buf, '/');
    if (slash)
        slash[1] = 0;
    else
        snprintf(buf, cap, "./");
}

/* ajv over the written file; installs the locked npm packages if needed. */
static void validate_with_ajv(const char *file) {
    char dir[1024], cmd[4096];
    tests_dir(dir, sizeof dir);
    if (getenv("NU_SKIP_AJV")) {
        print_message("NU_SKIP_AJV set: outputs in %s not validated by ajv\n", file);
        return;
    }
    snprintf(cmd, sizeof cmd,
             "cd '%sjs' && { [ -d node_modules/ajv-formats ] || npm ci --no-audit --no-fund "
             "--loglevel=error >&2; } && node validate.js '%s'",
             dir, file);
    int rc = system(cmd);
    if (rc != 0) fail_msg("ajv validation failed (exit %d); outputs are in %s", rc, file);
}

static void test_generations_validate(void **state) {
    (void)state;
    gen g = {0};
    nu_model_params mp = nu_model_default_params();
    nu_error err = {0};
    if (nu_model_load(nu_test_shared("models/stories260K.gguf"), &mp, &g.m, &err))
        fail_msg("%s", err.message);
    nu_context_params cp = nu_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 1;
    assert_int_equal(nu_context_new(g.m, &cp, &g.ctx, NULL), NU_OK);
    g.n_vocab = nu_model_n_vocab(g.m);
    g.cand = malloc((size_t)g.n_vocab * sizeof *g.cand);
    cJSON *all = cJSON_CreateArray();
    int n = (int)(sizeof cases / sizeof *cases);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(all, run_case(&g, &cases[i], i));
    char *text = cJSON_Print(all);
    const char *file = nu_test_tmp("constrained_outputs.json");
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    print_message("%d generations (%d schemas), all complete and parsing; written to %s\n",
                  n * PER_SCHEMA, n, file);
    validate_with_ajv(file);
    cJSON_free(text);
    cJSON_Delete(all);
    free(g.cand);
    nu_context_free(g.ctx);
    nu_model_free(g.m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generations_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
