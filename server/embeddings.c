/* embeddings.c - POST /v1/embeddings and the embedding work behind it
 * (embeddings.h). */
#include "embeddings.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai_resp.h"
#include "request.h"

#define BAD(err, param, ...) srv_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

void srv_embed_batch_free(srv_embed_batch *b) {
    for (int32_t i = 0; b->tokens && i < b->n; i++) free(b->tokens[i]);
    free(b->tokens);
    free(b->n_tokens);
    free(b->vectors);
    memset(b, 0, sizeof *b);
}

/* Reads input i (a string or a token array) into b. */
static bool read_one(const srv_model *m, const cJSON *v, const char *where, bool allow_tokens,
                     bool truncate, srv_embed_batch *b, srv_error *err) {
    int32_t n = 0, *toks = NULL;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) return BAD(err, "input", "%s is an empty string", where);
        toks = srv_tokenize(m->model, v->valuestring, NU_TOKENIZE_ADD_BOS, "input", &n, err);
    } else if (allow_tokens && cJSON_IsArray(v)) {
        if (!v->child) return BAD(err, "input", "%s is an empty list of tokens", where);
        toks = srv_token_ids(m->model, v, "input", where, &n, err);
    } else {
        return BAD(err, "input", "%s must be a string%s", where,
                   allow_tokens ? " or an array of token ids" : "");
    }
    if (!toks) return false;
    int32_t most = m->ctx_per_slot;
    if (n > most && !truncate) {
        free(toks);
        return srv_fail(err, 413, "invalid_request_error", "context_length_exceeded", "input",
                        "%s has %d tokens; this model embeds at most %d", where, n, most);
    }
    if (n > most) n = most, b->truncated++;
    b->tokens[b->n] = toks;
    b->n_tokens[b->n++] = n;
    b->total += n;
    return true;
}

bool srv_embed_read(const srv_model *m, const cJSON *input, const char *param, bool allow_tokens,
                    bool truncate, srv_embed_batch *b, srv_error *err) {
    memset(b, 0, sizeof *b);
    if (!input || cJSON_IsNull(input)) return BAD(err, param, "'%s' is required", param);
    /* one input: a string, or (tokens) an array of ids; else a list of inputs */
    bool single = cJSON_IsString(input) ||
                  (allow_tokens && cJSON_IsArray(input) && cJSON_IsNumber(input->child));
    if (!single && !cJSON_IsArray(input))
        return BAD(err, param, "'%s' must be a string or an array%s", param,
                   allow_tokens ? " (of strings, token ids or arrays of token ids)"
                                : " of strings");
    int32_t count = single ? 1 : cJSON_GetArraySize(input);
    if (count < 1) return BAD(err, param, "'%s' is an empty array", param);
    if (count > SRV_EMBED_MAX_INPUTS)
        return BAD(err, param, "'%s' has %d inputs; at most %d are taken", param, count,
                   SRV_EMBED_MAX_INPUTS);
    b->tokens = calloc((size_t)count, sizeof *b->tokens);
    b->n_tokens = calloc((size_t)count, sizeof *b->n_tokens);
    if (!b->tokens || !b->n_tokens) {
        srv_embed_batch_free(b);
        return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    char where[64];
    bool ok = true;
    if (single) {
        snprintf(where, sizeof where, "'%s'", param);
        ok = read_one(m, input, where, allow_tokens, truncate, b, err);
    }
    int32_t i = 0;
    for (const cJSON *v = single ? NULL : input->child; ok && v; v = v->next, i++) {
        snprintf(where, sizeof where, "'%s[%d]'", param, i);
        if (cJSON_IsArray(v) && v->child && !cJSON_IsNumber(v->child) && allow_tokens)
            ok = BAD(err, param, "%s must be a string or an array of token ids", where);
        else
            ok = read_one(m, v, where, allow_tokens, truncate, b, err);
    }
    if (!ok) srv_embed_batch_free(b);
    return ok;
}

bool srv_embed_run(srv_model *m, nu_pooling pooling, bool normalize, srv_embed_batch *b,
                   srv_error *err) {
    b->n_embd = nu_model_n_embd(m->model);
    b->vectors = malloc((size_t)b->n * (size_t)b->n_embd * sizeof *b->vectors);
    if (!b->vectors) return srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    pthread_mutex_lock(&m->embed_mu);
    nu_context *ctx = srv_model_embed_context(m, err);
    bool ok = ctx != NULL;
    for (int32_t i = 0; ok && i < b->n; i++) {
        nu_error e;
        nu_status st = nu_embed(ctx, b->tokens[i], b->n_tokens[i], pooling, normalize,
                                b->vectors + (size_t)i * (size_t)b->n_embd, &e);
        if (st != NU_OK)
            ok = srv_fail(err, st == NU_ERR_UNSUPPORTED || st == NU_ERR_INVALID_ARG ? 400 : 500,
                          st == NU_ERR_NOMEM ? "server_error" : "invalid_request_error", NULL,
                          "input", "input %d: %s", i, e.message);
    }
    pthread_mutex_unlock(&m->embed_mu);
    return ok;
}

bool srv_embed_pooling(const cJSON *v, nu_pooling *out, srv_error *err) {
    static const struct {
        const char *name;
        nu_pooling pooling;
    } names[] = {{"model", NU_POOLING_MODEL},
                 {"mean", NU_POOLING_MEAN},
                 {"last", NU_POOLING_LAST},
                 {"first", NU_POOLING_FIRST}};
    *out = NU_POOLING_MODEL;
    if (!v || cJSON_IsNull(v)) return true;
    for (size_t i = 0; cJSON_IsString(v) && i < sizeof names / sizeof *names; i++)
        if (!strcmp(v->valuestring, names[i].name)) {
            *out = names[i].pooling;
            return true;
        }
    return BAD(err, "pooling",
               "'pooling' must be \"model\" (the file's pooling type, else mean), \"mean\", "
               "\"last\" or \"first\"");
}

/* ---- /v1/embeddings ---------------------------------------------------------- */

/* The bytes of n floats (little-endian, as x86 stores them) in base64. */
static char *base64_floats(const float *v, int32_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)v;
    size_t len = (size_t)n * sizeof *v, k = 0;
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16;
        if (i + 1 < len) w |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len) w |= p[i + 2];
        out[k++] = digits[(w >> 18) & 63];
        out[k++] = digits[(w >> 12) & 63];
        out[k++] = i + 1 < len ? digits[(w >> 6) & 63] : '=';
        out[k++] = i + 2 < len ? digits[w & 63] : '=';
    }
    out[k] = 0;
    return out;
}

/* The request's options besides input. */
typedef struct embed_options {
    nu_pooling pooling;
    bool normalize;
    bool base64;
} embed_options;

static bool read_options(const srv_model *m, const cJSON *root, embed_options *o, srv_error *err) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalize");
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(root, "user");
    int32_t n_embd = nu_model_n_embd(m->model);
    o->normalize = true;
    o->base64 = false;
    if (fmt && !cJSON_IsNull(fmt)) {
        if (!cJSON_IsString(fmt) ||
            (strcmp(fmt->valuestring, "float") && strcmp(fmt->valuestring, "base64")))
            return BAD(err, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        o->base64 = !strcmp(fmt->valuestring, "base64");
    }
    if (dims && !cJSON_IsNull(dims)) {
        if (!cJSON_IsNumber(dims) || floor(dims->valuedouble) != dims->valuedouble ||
            dims->valuedouble < 1)
            return BAD(err, "dimensions", "'dimensions' must be a positive integer");
        if (dims->valuedouble != n_embd)
            return BAD(err, "dimensions",
                       "'%s' makes embeddings of %d dimensions and cannot shorten them "
                       "('dimensions' %.0f): leave 'dimensions' out, or give %d",
                       m->id, n_embd, dims->valuedouble, n_embd);
    }
    if (norm && !cJSON_IsNull(norm)) {
        if (!cJSON_IsBool(norm)) return BAD(err, "normalize", "'normalize' must be a boolean");
        o->normalize = cJSON_IsTrue(norm);
    }
    if (user && !cJSON_IsNull(user) && !cJSON_IsString(user))
        return BAD(err, "user", "'user' must be a string");
    return srv_embed_pooling(cJSON_GetObjectItemCaseSensitive(root, "pooling"), &o->pooling, err);
}

/* {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"} */
static char *embeddings_json(const srv_model *m, const srv_embed_batch *b, bool base64) {
    cJSON *root = cJSON_CreateObject(), *data = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToObject(root, "data", data);
    bool ok = true;
    for (int32_t i = 0; ok && i < b->n; i++) {
        const float *v = b->vectors + (size_t)i * (size_t)b->n_embd;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        if (base64) {
            char *text = base64_floats(v, b->n_embd);
            ok = text != NULL;
            cJSON_AddItemToObject(e, "embedding",
                                  ok ? cJSON_CreateString(text) : cJSON_CreateNull());
            free(text);
        } else {
            cJSON *arr = cJSON_CreateArray();
            for (int32_t j = 0; j < b->n_embd; j++)
                cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[j]));
            cJSON_AddItemToObject(e, "embedding", arr);
        }
        cJSON_AddItemToArray(data, e);
    }
    cJSON_AddStringToObject(root, "model", m->id);
    cJSON *usage = cJSON_CreateObject();
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)b->total);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)b->total);
    cJSON_AddItemToObject(root, "usage", usage);
    char *body = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return body;
}

enum MHD_Result srv_handle_embeddings(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    static const char *const allowed[] = {"input", "model",   "encoding_format", "dimensions",
                                          "user",  "pooling", "normalize",       NULL};
    srv_error err;
    srv_model *m = srv_acquire_body_model(s, cs, &err);
    if (!m) return srv_answer_error(c, cs, &err);
    cJSON *root = srv_parse_body(cs, allowed, &err);
    embed_options o;
    srv_embed_batch b = {0};
    char *body = NULL;
    if (root && read_options(m, root, &o, &err) &&
        srv_embed_read(m, cJSON_GetObjectItemCaseSensitive(root, "input"), "input", true, false, &b,
                       &err) &&
        srv_embed_run(m, o.pooling, o.normalize, &b, &err) &&
        !(body = embeddings_json(m, &b, o.base64)))
        srv_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
    cs->prompt_tokens = b.total;
    srv_embed_batch_free(&b);
    cJSON_Delete(root);
    srv_model_release(m);
    return body ? srv_answer(c, cs, 200, body, NULL) : srv_answer_error(c, cs, &err);
}
