/* ollama_info.c - Ollama's model listings (/api/tags, /api/ps), /api/show,
 * /api/version and the embeddings (/api/embed, /api/embeddings) (ollama.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embeddings.h"
#include "ollama.h"
#include "request.h"

#define BAD(err, param, ...) srv_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* The Ollama API level the endpoints follow (its docs/api.md of that release). */
#define OLLAMA_API_VERSION "0.5.0"

/* ---- listings -------------------------------------------------------------------- */

/* An id for the file's version, in the shape of Ollama's digests: FNV-1a
 * over its path, size and modification time (not a hash of the contents,
 * which would mean reading every file at start). */
static void file_digest(const srv_model *m, char out[65]) {
    char key[4200];
    int n = snprintf(key, sizeof key, "%s|%" PRIu64 "|%lld", m->path, m->file_bytes, m->modified);
    for (int part = 0; part < 4; part++) {
        uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)part * 0x9E3779B97F4A7C15ull;
        for (int i = 0; i < n && i < (int)sizeof key; i++)
            h = (h ^ (unsigned char)key[i]) * 0x100000001b3ull;
        snprintf(out + 16 * part, 17, "%016" PRIx64, h);
    }
}

/* "7.2B", "292.8K": a parameter count as Ollama shows it. */
static void parameter_size(uint64_t n, char *out, size_t cap) {
    if (n >= 1000000000ull)
        snprintf(out, cap, "%.1fB", (double)n / 1e9);
    else if (n >= 1000000ull)
        snprintf(out, cap, "%.1fM", (double)n / 1e6);
    else if (n >= 1000ull)
        snprintf(out, cap, "%.1fK", (double)n / 1e3);
    else
        snprintf(out, cap, "%" PRIu64, n);
}

static cJSON *details_json(const srv_model *m) {
    cJSON *d = cJSON_CreateObject(), *families = cJSON_CreateArray();
    char size[32], level[16];
    parameter_size(m->n_params, size, sizeof size);
    size_t i = 0;
    for (; m->file_type[i] && i + 1 < sizeof level; i++)
        level[i] = (char)(m->file_type[i] >= 'a' && m->file_type[i] <= 'z' ? m->file_type[i] - 32
                                                                           : m->file_type[i]);
    level[i] = 0;
    cJSON_AddStringToObject(d, "parent_model", "");
    cJSON_AddStringToObject(d, "format", "gguf");
    cJSON_AddStringToObject(d, "family", m->arch);
    cJSON_AddItemToArray(families, cJSON_CreateString(m->arch));
    cJSON_AddItemToObject(d, "families", families);
    cJSON_AddStringToObject(d, "parameter_size", size);
    cJSON_AddStringToObject(d, "quantization_level", level);
    return d;
}

/* One model of /api/tags or /api/ps. */
static cJSON *listed_json(srv_model *m, bool running) {
    cJSON *o = cJSON_CreateObject();
    char when[48], digest[65];
    srv_model_info info;
    srv_model_get_info(m, &info);
    file_digest(m, digest);
    cJSON_AddStringToObject(o, "name", m->id);
    cJSON_AddStringToObject(o, "model", m->id);
    if (!running) {
        srv_ollama_time((double)m->modified, when, sizeof when);
        cJSON_AddStringToObject(o, "modified_at", when);
    }
    cJSON_AddNumberToObject(o, "size", (double)(running ? info.bytes : m->file_bytes));
    cJSON_AddStringToObject(o, "digest", digest);
    cJSON_AddItemToObject(o, "details", details_json(m));
    if (running) {
        if (info.expires_in_ms >= 0)
            srv_ollama_time((double)time(NULL) + info.expires_in_ms / 1e3, when, sizeof when);
        else
            snprintf(when, sizeof when, "9999-12-31T23:59:59Z"); /* stays loaded */
        cJSON_AddStringToObject(o, "expires_at", when);
        cJSON_AddNumberToObject(o, "size_vram", 0);
        cJSON_AddNumberToObject(o, "context_length", info.ctx_per_slot);
    }
    return o;
}

/* /api/tags: every model; /api/ps: the loaded ones. */
static char *models_json(srv_state *s, bool running) {
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "models");
    for (int32_t i = 0; i < srv_models_count(s->models); i++) {
        srv_model *m = srv_models_at(s->models, i);
        srv_model_info info;
        srv_model_get_info(m, &info);
        if (!running || info.state == SRV_MODEL_LOADED)
            cJSON_AddItemToArray(arr, listed_json(m, running));
    }
    char *body = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return body;
}

/* ---- /api/show --------------------------------------------------------------------- */

/* A value as nu_model_meta_value renders it (numbers, true/false, strings
 * quoted with \", \\, \n and \xNN escapes, [lists]) back to JSON. */
static cJSON *rendered_value(const char **p) {
    const char *s = *p;
    if (*s == '"') {
        size_t cap = strlen(s) + 1, n = 0;
        char *text = malloc(cap);
        if (!text) return NULL;
        for (s++; *s && *s != '"'; s++) {
            char c = *s;
            if (c == '\\' && s[1] == 'n')
                c = '\n', s++;
            else if (c == '\\' && s[1] == 'x' && s[2] && s[3]) {
                char hex[3] = {s[2], s[3], 0};
                c = (char)strtol(hex, NULL, 16), s += 3;
            } else if (c == '\\' && s[1])
                c = *++s;
            text[n++] = c;
        }
        text[n] = 0;
        *p = *s ? s + 1 : s;
        cJSON *v = cJSON_CreateString(text);
        free(text);
        return v;
    }
    if (*s == '[') {
        cJSON *arr = cJSON_CreateArray();
        for (s++; *s && *s != ']';) {
            if (*s == ',' || *s == ' ') {
                s++;
                continue;
            }
            if (*s == '.') break; /* "... N more": a shortened list */
            cJSON *item = rendered_value(&s);
            if (!item) break;
            cJSON_AddItemToArray(arr, item);
        }
        while (*s && *s != ']') s++;
        *p = *s ? s + 1 : s;
        return arr;
    }
    if (!strncmp(s, "true", 4) || !strncmp(s, "false", 5)) {
        *p = s + (*s == 't' ? 4 : 5);
        return cJSON_CreateBool(*s == 't');
    }
    char *end;
    double x = strtod(s, &end);
    if (end == s) return NULL;
    *p = end;
    return cJSON_CreateNumber(x);
}

/* model_info: every metadata key; lists empty unless verbose, as Ollama does. */
static cJSON *model_info_json(const nu_model *meta, bool verbose, char **chat_template) {
    cJSON *info = cJSON_CreateObject();
    size_t cap = 4096;
    char *buf = malloc(cap);
    for (int64_t i = 0, n = nu_model_meta_count(meta); buf && i < n; i++) {
        const char *key = nu_model_meta_key(meta, i);
        bool list = !strncmp(nu_model_meta_type(meta, i), "arr", 3);
        int items = list && verbose ? INT32_MAX : 0;
        size_t need = nu_model_meta_value(meta, i, buf, cap, items) + 1;
        if (need > cap) {
            char *bigger = realloc(buf, need);
            if (!bigger) break;
            buf = bigger, cap = need;
            nu_model_meta_value(meta, i, buf, cap, items);
        }
        const char *p = buf;
        cJSON *v = list && !verbose ? cJSON_CreateArray() : rendered_value(&p);
        if (!strcmp(key, "tokenizer.chat_template") && cJSON_IsString(v))
            *chat_template = strdup(v->valuestring);
        cJSON_AddItemToObject(info, key, v ? v : cJSON_CreateNull());
    }
    free(buf);
    return info;
}

static enum MHD_Result handle_show(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    static const char *const allowed[] = {"model",    "name",    "verbose", "system",
                                          "template", "options", NULL};
    srv_error err;
    cJSON *root = srv_parse_body(cs, allowed, &err);
    if (!root) return srv_answer_error(c, cs, &err);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsString(name)) name = cJSON_GetObjectItemCaseSensitive(root, "name");
    const cJSON *verbose = cJSON_GetObjectItemCaseSensitive(root, "verbose");
    srv_model *m = NULL;
    if (!cJSON_IsString(name))
        BAD(&err, "model", "'model' must name a model");
    else if (verbose && !cJSON_IsNull(verbose) && !cJSON_IsBool(verbose))
        BAD(&err, "verbose", "'verbose' must be a boolean");
    else
        m = srv_models_find(s->models, name->valuestring, &err);
    bool verbose_on = cJSON_IsTrue(verbose);
    cJSON_Delete(root);
    if (!m) return srv_answer_error(c, cs, &err);
    nu_model_params p = nu_model_default_params();
    p.mode = NU_LOAD_METADATA_ONLY;
    nu_model *meta;
    nu_error e;
    if (nu_model_load(m->path, &p, &meta, &e) != NU_OK) {
        srv_fail(&err, 500, "server_error", NULL, NULL, "%s: %s", m->id, e.message);
        return srv_answer_error(c, cs, &err);
    }
    char *tpl = NULL, modelfile[4400], when[48];
    cJSON *o = cJSON_CreateObject(), *caps = cJSON_CreateArray();
    cJSON *info = model_info_json(meta, verbose_on, &tpl);
    nu_model_free(meta);
    snprintf(modelfile, sizeof modelfile, "# served by nucleus %s\nFROM %s\n", NU_VERSION_STRING,
             m->path);
    srv_ollama_time((double)m->modified, when, sizeof when);
    cJSON_AddStringToObject(o, "modelfile", modelfile);
    cJSON_AddStringToObject(o, "parameters", "");
    cJSON_AddStringToObject(o, "template", tpl ? tpl : "");
    cJSON_AddItemToObject(o, "details", details_json(m));
    cJSON_AddItemToObject(o, "model_info", info);
    cJSON_AddItemToArray(caps, cJSON_CreateString("completion"));
    if (tpl && strstr(tpl, "tools")) cJSON_AddItemToArray(caps, cJSON_CreateString("tools"));
    cJSON_AddItemToObject(o, "capabilities", caps);
    cJSON_AddStringToObject(o, "modified_at", when);
    free(tpl);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_answer(c, cs, 200, body, NULL);
}

/* ---- embeddings ---------------------------------------------------------------------- */

/* /api/embed {model, input, truncate, dimensions, options, keep_alive}:
 * {"model", "embeddings": [[...]], durations, "prompt_eval_count"};
 * /api/embeddings {model, prompt, options, keep_alive}: {"embedding": [...]}
 * (not normalised, as Ollama's older endpoint). */
static enum MHD_Result handle_embed(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                    bool legacy) {
    static const char *const allowed[] = {"model",   "input",      "truncate", "dimensions",
                                          "options", "keep_alive", NULL};
    static const char *const allowed_legacy[] = {"model", "prompt", "options", "keep_alive", NULL};
    double t0 = nu_time_ms(), keep_ms = 0;
    srv_error err;
    srv_model *m = srv_acquire_body_model(s, cs, &err);
    if (!m) return srv_answer_error(c, cs, &err);
    double load_ms = nu_time_ms() - t0;
    cJSON *root = srv_parse_body(cs, legacy ? allowed_legacy : allowed, &err);
    const cJSON *truncate = root ? cJSON_GetObjectItemCaseSensitive(root, "truncate") : NULL;
    const cJSON *dims = root ? cJSON_GetObjectItemCaseSensitive(root, "dimensions") : NULL;
    const cJSON *opts = root ? cJSON_GetObjectItemCaseSensitive(root, "options") : NULL;
    const cJSON *keep = root ? cJSON_GetObjectItemCaseSensitive(root, "keep_alive") : NULL;
    srv_embed_batch b = {0};
    bool ok = root != NULL;
    if (ok && truncate && !cJSON_IsNull(truncate) && !cJSON_IsBool(truncate))
        ok = BAD(&err, "truncate", "'truncate' must be a boolean");
    if (ok && dims && !cJSON_IsNull(dims) &&
        !(cJSON_IsNumber(dims) && dims->valuedouble == nu_model_n_embd(m->model)))
        ok = BAD(&err, "dimensions",
                 "'%s' makes embeddings of %d dimensions and cannot shorten them: leave "
                 "'dimensions' out, or give %d",
                 m->id, nu_model_n_embd(m->model), nu_model_n_embd(m->model));
    if (ok) ok = srv_ollama_check_options(opts, &err);
    if (ok && keep && !cJSON_IsNull(keep) && (ok = srv_ollama_keep_alive(keep, &keep_ms, &err)))
        srv_model_keep(m, keep_ms);
    const char *field = legacy ? "prompt" : "input";
    ok = ok &&
         srv_embed_read(m, cJSON_GetObjectItemCaseSensitive(root, field), field, false,
                        cJSON_IsTrue(truncate), &b, &err) &&
         srv_embed_run(m, NU_POOLING_MODEL, !legacy, &b, &err);
    cJSON_Delete(root);
    char *body = NULL;
    if (ok) {
        cJSON *o = legacy ? cJSON_CreateObject() : srv_ollama_head(m->id);
        cJSON *list = legacy ? NULL : cJSON_AddArrayToObject(o, "embeddings");
        for (int32_t i = 0; i < b.n; i++) {
            cJSON *v = cJSON_CreateArray();
            for (int32_t j = 0; j < b.n_embd; j++)
                cJSON_AddItemToArray(v, cJSON_CreateNumber(b.vectors[(size_t)i * b.n_embd + j]));
            if (legacy)
                cJSON_AddItemToObject(o, "embedding", v);
            else
                cJSON_AddItemToArray(list, v);
        }
        if (!legacy) {
            cJSON_DeleteItemFromObjectCaseSensitive(o, "created_at");
            cJSON_AddNumberToObject(o, "total_duration", round((nu_time_ms() - t0) * 1e6));
            cJSON_AddNumberToObject(o, "load_duration", round(load_ms * 1e6));
            cJSON_AddNumberToObject(o, "prompt_eval_count", (double)b.total);
        }
        body = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    cs->prompt_tokens = b.total;
    srv_embed_batch_free(&b);
    srv_model_release(m);
    return ok ? srv_answer(c, cs, 200, body, NULL) : srv_answer_error(c, cs, &err);
}

enum MHD_Result srv_ollama_info(srv_state *s, struct MHD_Connection *c, srv_conn *cs) {
    switch (cs->route->id) {
    case ROUTE_OLLAMA_TAGS: return srv_answer(c, cs, 200, models_json(s, false), NULL);
    case ROUTE_OLLAMA_PS: return srv_answer(c, cs, 200, models_json(s, true), NULL);
    case ROUTE_OLLAMA_SHOW: return handle_show(s, c, cs);
    case ROUTE_OLLAMA_EMBED: return handle_embed(s, c, cs, false);
    case ROUTE_OLLAMA_EMBEDDINGS: return handle_embed(s, c, cs, true);
    case ROUTE_OLLAMA_VERSION:
        return srv_answer(c, cs, 200, strdup("{\"version\":\"" OLLAMA_API_VERSION "\"}"), NULL);
    default: break;
    }
    return MHD_NO;
}
