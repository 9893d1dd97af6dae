/* models.c - the registry of served models: start-up checks, loading on
 * first use, holders, unloading when idle or to make room (models.h). */
#include "models.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

/* How long a load waits for models in use to become idle when
 * --max-memory needs their room. */
#define ROOM_WAIT_MS 60000.0

struct srv_models {
    const srv_config *cfg;
    srv_metrics *metrics;
    srv_model *list;
    int32_t n;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a model's state or holders changed */
    pthread_cond_t reaper_wake;
    bool loading;  /* a load is running (loads go one at a time) */
    bool draining; /* shutting down: no new holders */
    bool stopping; /* the reaper ends */
    bool reaper_started;
    pthread_t reaper;
};

/* How long models stay loaded unused unless a request says otherwise. */
static double default_keep(const srv_models *r) {
    return r->cfg->idle_unload_s > 0 ? r->cfg->idle_unload_s * 1e3 : -1;
}

/* ---- the models' files ---------------------------------------------------- */

/* The text of a metadata key of a metadata-only model, or "" (buf). */
static const char *meta_text(const nu_model *m, const char *key, char *buf, size_t cap) {
    buf[0] = 0;
    for (int64_t i = 0, n = nu_model_meta_count(m); i < n; i++)
        if (!strcmp(nu_model_meta_key(m, i), key)) {
            nu_model_meta_value(m, i, buf, cap, 1);
            break;
        }
    return buf;
}

/* The weight type that holds most of the file's tensor bytes. */
static void main_type(const nu_model *m, char *out, size_t cap) {
    const char *names[32] = {0};
    uint64_t bytes[32] = {0};
    int n = 0, best = -1;
    for (int64_t i = 0, nt = nu_model_tensor_count(m); i < nt; i++) {
        nu_tensor_info t;
        if (!nu_model_tensor(m, i, &t) || t.n_dims < 2) continue;
        int k = 0;
        while (k < n && strcmp(names[k], t.type_name)) k++;
        if (k == n && n == 32) continue;
        if (k == n) names[n++] = t.type_name;
        bytes[k] += t.n_bytes;
        if (best < 0 || bytes[k] > bytes[best]) best = k;
    }
    snprintf(out, cap, "%s", best >= 0 ? names[best] : "unknown");
}

/* Reads what listings show without loading the weights. */
static bool read_file_facts(srv_model *m, char *msg, size_t cap) {
    struct stat sb;
    if (stat(m->path, &sb) != 0)
        return snprintf(msg, cap, "%s: %s", m->path, strerror(errno)), false;
    m->file_bytes = (uint64_t)sb.st_size;
    m->modified = (long long)sb.st_mtime;
    nu_model_params p = nu_model_default_params();
    p.mode = NU_LOAD_METADATA_ONLY;
    nu_model *meta;
    nu_error err;
    if (nu_model_load(m->path, &p, &meta, &err) != NU_OK)
        return snprintf(msg, cap, "%s", err.message), false;
    snprintf(m->arch, sizeof m->arch, "%s", nu_model_arch(meta));
    m->n_params = nu_model_n_params(meta);
    main_type(meta, m->file_type, sizeof m->file_type);
    char key[160], buf[64];
    snprintf(key, sizeof key, "%s.context_length", m->arch);
    m->n_ctx_train = (int32_t)strtol(meta_text(meta, key, buf, sizeof buf), NULL, 10);
    nu_model_free(meta);
    return true;
}

/* The id a file gets without an alias: its name. */
static void file_id(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    snprintf(out, cap, "%s", slash && slash[1] ? slash + 1 : path);
}

static bool add_model(srv_models *r, const char *id, const char *path, char *msg, size_t cap) {
    srv_model *list = realloc(r->list, ((size_t)r->n + 1) * sizeof *list);
    if (!list) return snprintf(msg, cap, "out of memory"), false;
    r->list = list;
    srv_model *m = &list[r->n];
    memset(m, 0, sizeof *m);
    m->owner = r;
    if (!(m->path = strdup(path))) return snprintf(msg, cap, "out of memory"), false;
    r->n++; /* from here on srv_models_free frees it */
    pthread_mutex_init(&m->embed_mu, NULL);
    if (id)
        snprintf(m->id, sizeof m->id, "%s", id);
    else
        file_id(path, m->id, sizeof m->id);
    m->keep_ms = default_keep(r);
    for (int32_t i = 0; i + 1 < r->n; i++)
        if (!strcmp(r->list[i].id, m->id))
            return snprintf(msg, cap,
                            "two models are named '%s' (%s and %s): give one an alias "
                            "(-m NAME=PATH)",
                            m->id, r->list[i].path, path),
                   false;
    if (!read_file_facts(m, msg, cap)) return false;
    m->bytes = m->file_bytes;
    return true;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.gguf file of dir, in name order. */
static bool add_dir(srv_models *r, const char *dir, char *msg, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return snprintf(msg, cap, "--models-dir %s: %s", dir, strerror(errno)), false;
    char **names = NULL;
    size_t n = 0;
    bool ok = true;
    for (struct dirent *e; ok && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcasecmp(e->d_name + len - 5, ".gguf") || e->d_name[0] == '.') continue;
        char **more = realloc(names, (n + 1) * sizeof *names);
        ok = more && (more[n] = strdup(e->d_name));
        if (more) names = more;
        if (ok) n++;
    }
    closedir(d);
    if (!ok) snprintf(msg, cap, "out of memory");
    if (names) qsort(names, n, sizeof *names, compare_names);
    for (size_t i = 0; ok && i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        ok = add_model(r, NULL, path, msg, cap);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (ok && n == 0) snprintf(msg, cap, "--models-dir %s holds no .gguf file", dir);
    return ok && n > 0;
}

/* ---- loading and unloading -------------------------------------------------- */

/* The keys' (value false) or values' cache type the configuration asks for:
 * --kv-type-k / --kv-type-v, else --kv-type. */
static nu_kv_type kv_of(const srv_config *cfg, bool value) {
    nu_kv_type t = value ? cfg->kv_type_v : cfg->kv_type_k;
    return t == NU_KV_SAME ? cfg->kv_type : t;
}

/* Context sizes and request limits of a model from the configuration. */
static bool plan(srv_model *m, const srv_config *cfg, nu_context_params *cp, char *msg,
                 size_t cap) {
    int32_t train = nu_model_n_ctx_train(m->model);
    m->ctx_per_slot = cfg->ctx_per_slot > 0       ? cfg->ctx_per_slot
                      : train > 0 && train < 4096 ? train
                                                  : 4096;
    if (cfg->parallel < 1 || cfg->parallel > 64)
        return snprintf(msg, cap, "--parallel must be in 1..64"), false;
    if ((int64_t)m->ctx_per_slot * cfg->parallel > (1 << 24) || m->ctx_per_slot < 8)
        return snprintf(msg, cap, "--ctx %d x --parallel %d is out of range", m->ctx_per_slot,
                        cfg->parallel),
               false;
    m->max_prompt_tokens =
        cfg->max_prompt_tokens > 0 ? cfg->max_prompt_tokens : m->ctx_per_slot - 1;
    if (m->max_prompt_tokens >= m->ctx_per_slot)
        return snprintf(msg, cap, "--max-prompt-tokens must be below the slot context (%d)",
                        m->ctx_per_slot),
               false;
    int32_t n_seq = 2 * cfg->parallel < 8 ? 8 : 2 * cfg->parallel;
    if (n_seq > 64) n_seq = 64;
    *cp = nu_context_default_params();
    cp->n_ctx = m->ctx_per_slot * cfg->parallel;
    cp->n_seq_max = n_seq;
    cp->n_threads = cfg->n_threads;
    cp->n_batch = cfg->n_batch;
    cp->kv_type = cfg->kv_type;
    cp->kv_type_k = kv_of(cfg, false);
    cp->kv_type_v = kv_of(cfg, true);
    m->limits = (srv_limits){.n_vocab = nu_model_n_vocab(m->model),
                             .max_n = n_seq,
                             .max_tokens = cfg->max_tokens_limit > 0 ? cfg->max_tokens_limit
                                                                     : m->ctx_per_slot,
                             .max_prompts = 32,
                             .max_beam_width = n_seq / 2 < 32 ? n_seq / 2 : 32,
                             .max_draft = cfg->draft || cfg->spec.lookup ? cfg->spec.draft_max : 0};
    m->defaults.gen = nu_generate_default_params();
    m->defaults.beam = nu_beam_default_params();
    return true;
}

/* Frees whatever of a loaded model exists (the model is nobody's). */
static void unload_parts(srv_model *m) {
    srv_engine_free(m->engine);
    srv_lab_free(m->lab);
    srv_chat_free(&m->chat);
    nu_context_free(m->embed_ctx);
    nu_context_free(m->ctx);
    nu_model_free(m->model);
    m->engine = NULL;
    m->lab = NULL;
    m->embed_ctx = m->ctx = NULL;
    m->model = NULL;
}

/* Step one of a load: the weights, and what serving them will take. */
static bool load_weights(srv_models *r, srv_model *m, nu_context_params *cp, uint64_t *bytes,
                         char *msg, size_t cap) {
    const srv_config *cfg = r->cfg;
    nu_error err;
    if (nu_model_load(m->path, NULL, &m->model, &err) != NU_OK)
        return snprintf(msg, cap, "%s", err.message), false;
    const char *warning = nu_model_warning(m->model);
    if (warning && *warning) fprintf(stderr, "nucleus: warning: %s: %s\n", m->id, warning);
    if (cfg->draft && nu_draft_check(m->model, cfg->draft, &err) != NU_OK)
        return snprintf(msg, cap, "--draft model cannot serve this model: %.400s", err.message),
               false;
    if (!plan(m, cfg, cp, msg, cap)) return false;
    nu_memory_estimate est;
    if (nu_model_memory(m->model, cp->n_ctx, cp->n_batch, cp->n_seq_max, cp->kv_type_k,
                        cp->kv_type_v, &est, &err) != NU_OK)
        return snprintf(msg, cap, "%s", err.message), false;
    *bytes = est.total;
    return true;
}

/* Step two: context, chat template, lab and engine. */
static bool start_serving(srv_models *r, srv_model *m, const nu_context_params *cp, char *msg,
                          size_t cap) {
    const srv_config *cfg = r->cfg;
    nu_error err;
    int32_t train = nu_model_n_ctx_train(m->model);
    if (train > 0 && m->ctx_per_slot > train)
        fprintf(stderr,
                "nucleus: warning: %s: a slot's context of %d tokens is more than the %d the "
                "model was trained on; text past position %d may be poor\n",
                m->id, m->ctx_per_slot, train, train);
    if (nu_context_new(m->model, cp, &m->ctx, &err) != NU_OK)
        return snprintf(msg, cap, "%s", err.message), false;
    if (!srv_chat_init(&m->chat, m->model, cfg->chat_template, msg, cap)) return false;
    m->lab_cfg = (srv_lab_config){.model = m->model,
                                  .draft = cfg->draft,
                                  .n_ctx = m->ctx_per_slot,
                                  .n_batch = cfg->n_batch,
                                  .n_threads = cfg->n_threads,
                                  .kv_type = cfg->kv_type,
                                  .kv_type_k = kv_of(cfg, false),
                                  .kv_type_v = kv_of(cfg, true),
                                  .max_queue = 16};
    return srv_lab_start(&m->lab_cfg, &m->lab, msg, cap) &&
           srv_engine_start(m->ctx, cfg->parallel, cfg->max_queue, cfg->step_delay_ms, cfg->draft,
                            &cfg->spec, r->metrics, &m->engine, msg, cap);
}

static void log_line(const srv_models *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_line(const srv_models *r, const char *fmt, ...) {
    if (r->cfg->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("nucleus: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Unloads m, which is LOADED with no holder (r->mu held on entry and exit,
 * released while it works). */
static void unload_locked(srv_models *r, srv_model *m, const char *why) {
    m->state = SRV_MODEL_UNLOADING;
    pthread_mutex_unlock(&r->mu);
    unload_parts(m);
    log_line(r, "unloaded model %s (%s)", m->id, why);
    pthread_mutex_lock(&r->mu);
    m->state = SRV_MODEL_UNLOADED;
    pthread_cond_broadcast(&r->changed);
}

/* Bytes the other models take or have reserved (r->mu held). */
static uint64_t used_by_others(const srv_models *r, const srv_model *m) {
    uint64_t used = 0;
    for (int32_t i = 0; i < r->n; i++)
        if (&r->list[i] != m && r->list[i].state != SRV_MODEL_UNLOADED) used += r->list[i].bytes;
    return used;
}

/* The least recently used model nobody holds, other than m, or NULL. */
static srv_model *idle_victim(srv_models *r, const srv_model *m) {
    srv_model *best = NULL;
    for (int32_t i = 0; i < r->n; i++) {
        srv_model *o = &r->list[i];
        if (o != m && o->state == SRV_MODEL_LOADED && o->users == 0 &&
            (!best || o->last_used_ms < best->last_used_ms))
            best = o;
    }
    return best;
}

/* Waits on r->changed until the monotonic deadline (ms); false once it passed. */
static bool wait_changed(srv_models *r, double deadline_ms) {
    double left = deadline_ms - nu_time_ms();
    if (left <= 0) return false;
    if (left > 200) left = 200;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)(left * 1e6);
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&r->changed, &r->mu, &ts);
    return true;
}

static double mib(uint64_t bytes) {
    return (double)bytes / (1024.0 * 1024.0);
}

/* Makes room under --max-memory for need bytes of m by unloading idle
 * models, waiting for busy ones to become idle (r->mu held). */
static bool make_room(srv_models *r, srv_model *m, uint64_t need, srv_error *err) {
    uint64_t budget = r->cfg->max_memory;
    if (!budget) return true;
    if (need > budget)
        return srv_fail(err, 500, "server_error", "model_too_large", "model",
                        "the model '%s' needs %.1f MiB, more than --max-memory (%.1f MiB)", m->id,
                        mib(need), mib(budget));
    double deadline = nu_time_ms() + ROOM_WAIT_MS;
    while (used_by_others(r, m) + need > budget) {
        if (r->draining)
            return srv_fail(err, 503, "server_error", "shutting_down", NULL,
                            "the server is shutting down");
        srv_model *victim = idle_victim(r, m);
        if (victim) {
            char why[300];
            snprintf(why, sizeof why, "--max-memory: room for %s", m->id);
            unload_locked(r, victim, why);
            continue;
        }
        if (!wait_changed(r, deadline))
            return srv_fail(err, 503, "server_error", "model_busy", "model",
                            "no room to load '%s' under --max-memory (%.1f MiB): the loaded "
                            "models are in use; retry later",
                            m->id, mib(budget));
    }
    return true;
}

/* Loads m (state LOADING, r->mu held on entry and exit). */
static bool load_locked(srv_models *r, srv_model *m, srv_error *err) {
    if (!make_room(r, m, m->bytes, err)) return false;
    pthread_mutex_unlock(&r->mu);
    double t0 = nu_time_ms();
    char msg[600];
    nu_context_params cp;
    uint64_t bytes = 0;
    bool ok = load_weights(r, m, &cp, &bytes, msg, sizeof msg);
    pthread_mutex_lock(&r->mu);
    if (ok) {
        m->bytes = bytes; /* the estimate replaces the file's size */
        m->measured = true;
        if (!make_room(r, m, bytes, err)) {
            pthread_mutex_unlock(&r->mu);
            unload_parts(m);
            pthread_mutex_lock(&r->mu);
            return false;
        }
    }
    pthread_mutex_unlock(&r->mu);
    ok = ok && start_serving(r, m, &cp, msg, sizeof msg);
    if (!ok) unload_parts(m);
    pthread_mutex_lock(&r->mu);
    if (!ok)
        return srv_fail(err, 500, "server_error", "model_load_failed", "model",
                        "cannot load the model '%.100s': %.380s", m->id, msg);
    m->load_ms = nu_time_ms() - t0;
    m->loads++;
    log_line(r, "loaded model %s (%.1f MiB, %.0f ms)", m->id, mib(m->bytes), m->load_ms);
    return true;
}

bool srv_model_acquire(srv_model *m, srv_error *err) {
    srv_models *r = m->owner;
    pthread_mutex_lock(&r->mu);
    bool ok = true;
    for (;;) {
        if (r->draining) {
            ok = srv_fail(err, 503, "server_error", "shutting_down", NULL,
                          "the server is shutting down");
            break;
        }
        if (m->state == SRV_MODEL_LOADED) {
            m->users++;
            m->keep_ms = default_keep(r);
            break;
        }
        if (m->state != SRV_MODEL_UNLOADED || r->loading) {
            pthread_cond_wait(&r->changed, &r->mu);
            continue;
        }
        r->loading = true;
        m->state = SRV_MODEL_LOADING;
        ok = load_locked(r, m, err);
        m->state = ok ? SRV_MODEL_LOADED : SRV_MODEL_UNLOADED;
        if (ok) m->users++;
        m->keep_ms = default_keep(r);
        r->loading = false;
        pthread_cond_broadcast(&r->changed);
        break;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* Drops a hold; used: it was a request's (the idle time starts again). */
static void release_hold(srv_model *m, bool used) {
    srv_models *r = m->owner;
    pthread_mutex_lock(&r->mu);
    m->users--;
    if (used) m->last_used_ms = nu_time_ms();
    pthread_cond_broadcast(&r->changed);
    if (m->users == 0 && m->keep_ms == 0) pthread_cond_signal(&r->reaper_wake);
    pthread_mutex_unlock(&r->mu);
}

void srv_model_release(srv_model *m) {
    if (m) release_hold(m, true);
}

nu_context *srv_model_embed_context(srv_model *m, srv_error *err) {
    if (m->embed_ctx) return m->embed_ctx;
    const srv_config *cfg = m->owner->cfg;
    nu_context_params p = nu_context_default_params();
    p.n_ctx = m->ctx_per_slot;
    p.n_batch = cfg->n_batch;
    p.n_threads = cfg->n_threads;
    p.kv_type = cfg->kv_type;
    p.kv_type_k = kv_of(cfg, false);
    p.kv_type_v = kv_of(cfg, true);
    p.embeddings = true;
    nu_memory_estimate est;
    nu_error e;
    if (nu_model_memory(m->model, p.n_ctx, p.n_batch, 1, p.kv_type_k, p.kv_type_v, &est, &e) !=
            NU_OK ||
        nu_context_new(m->model, &p, &m->embed_ctx, &e) != NU_OK) {
        srv_fail(err, 500, "server_error", NULL, NULL,
                 "cannot make an embedding context for '%.100s': %.300s", m->id, e.message);
        return NULL;
    }
    pthread_mutex_lock(&m->owner->mu);
    m->bytes += est.kv_cache + est.scratch;
    pthread_mutex_unlock(&m->owner->mu);
    return m->embed_ctx;
}

void srv_model_keep(srv_model *m, double ms) {
    srv_models *r = m->owner;
    pthread_mutex_lock(&r->mu);
    m->keep_ms = ms;
    pthread_cond_signal(&r->reaper_wake);
    pthread_mutex_unlock(&r->mu);
}

bool srv_model_unload(srv_model *m) {
    srv_models *r = m->owner;
    pthread_mutex_lock(&r->mu);
    while (m->state == SRV_MODEL_LOADING || m->state == SRV_MODEL_UNLOADING)
        pthread_cond_wait(&r->changed, &r->mu);
    bool ok = m->users == 0;
    if (ok && m->state == SRV_MODEL_LOADED) unload_locked(r, m, "asked to");
    pthread_mutex_unlock(&r->mu);
    return ok;
}

srv_model *srv_models_find(srv_models *r, const char *name, srv_error *err) {
    if (!name || !*name) return &r->list[0];
    size_t len = strlen(name);
    if (len > 7 && !strcmp(name + len - 7, ":latest")) len -= 7; /* Ollama's default tag */
    for (int32_t i = 0; i < r->n; i++) {
        const char *id = r->list[i].id;
        size_t n = strlen(id);
        if (n == len && !strncmp(id, name, len)) return &r->list[i];
        if (n == len + 5 && !strncmp(id, name, len) && !strcasecmp(id + len, ".gguf"))
            return &r->list[i];
    }
    char known[300] = "";
    for (int32_t i = 0, k = 0; i < r->n && k < 250; i++)
        k += snprintf(known + k, sizeof known - (size_t)k, "%s'%.60s'", i ? ", " : "",
                      r->list[i].id);
    srv_fail(err, 404, "invalid_request_error", "model_not_found", "model",
             "The model '%.200s' does not exist (this server has %s%s)", name, known,
             r->n > 4 ? ", ..." : "");
    return NULL;
}

srv_model *srv_models_acquire(srv_models *r, const char *name, srv_error *err) {
    srv_model *m = srv_models_find(r, name, err);
    return m && srv_model_acquire(m, err) ? m : NULL;
}

/* ---- the reaper -------------------------------------------------------------- */

/* Unloads the models whose keep time has passed since their last use. */
static void *reaper_main(void *arg) {
    srv_models *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        double now = nu_time_ms();
        for (int32_t i = 0; i < r->n && !r->draining; i++) {
            srv_model *m = &r->list[i];
            if (m->state != SRV_MODEL_LOADED || m->users > 0 || m->keep_ms < 0 ||
                now - m->last_used_ms < m->keep_ms)
                continue;
            char why[64];
            snprintf(why, sizeof why, "idle for %.1f s", (now - m->last_used_ms) / 1e3);
            unload_locked(r, m, why);
            now = nu_time_ms();
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 250000000L; /* keep times are checked four times a second */
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&r->reaper_wake, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- the registry -------------------------------------------------------------- */

static void init_conds(srv_models *r) {
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->changed, &attr);
    pthread_cond_init(&r->reaper_wake, &attr);
    pthread_condattr_destroy(&attr);
}

bool srv_models_new(const srv_config *cfg, srv_metrics *metrics, srv_models **out, char *msg,
                    size_t cap) {
    srv_models *r = calloc(1, sizeof *r);
    *out = r;
    if (!r) return snprintf(msg, cap, "out of memory"), false;
    r->cfg = cfg;
    r->metrics = metrics;
    init_conds(r);
    for (int32_t i = 0; i < cfg->n_models; i++)
        if (!add_model(r, cfg->models[i].id, cfg->models[i].path, msg, cap)) return false;
    if (cfg->models_dir && !add_dir(r, cfg->models_dir, msg, cap)) return false;
    if (r->n == 0) return snprintf(msg, cap, "no model to serve"), false;
    if (cfg->draft && r->n > 1)
        return snprintf(msg, cap, "--draft serves a single model; this server has %d", r->n), false;
    if (pthread_create(&r->reaper, NULL, reaper_main, r) != 0)
        return snprintf(msg, cap, "cannot start the model reaper thread"), false;
    r->reaper_started = true;
    if (r->n == 1) { /* a single model is loaded at start, so its errors stop the start */
        srv_error err;
        if (!srv_model_acquire(&r->list[0], &err))
            return snprintf(msg, cap, "%s", err.message), false;
        srv_model_release(&r->list[0]);
    }
    return true;
}

void srv_models_free(srv_models *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stopping = r->draining = true;
    pthread_cond_signal(&r->reaper_wake);
    pthread_mutex_unlock(&r->mu);
    if (r->reaper_started) pthread_join(r->reaper, NULL);
    for (int32_t i = 0; i < r->n; i++) {
        unload_parts(&r->list[i]);
        pthread_mutex_destroy(&r->list[i].embed_mu);
        free(r->list[i].path);
    }
    free(r->list);
    pthread_cond_destroy(&r->changed);
    pthread_cond_destroy(&r->reaper_wake);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int32_t srv_models_count(const srv_models *r) {
    return r->n;
}

srv_model *srv_models_at(srv_models *r, int32_t i) {
    return i >= 0 && i < r->n ? &r->list[i] : NULL;
}

void srv_model_get_info(srv_model *m, srv_model_info *out) {
    srv_models *r = m->owner;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&r->mu);
    out->state = m->state;
    out->bytes = m->bytes;
    out->measured = m->measured;
    out->loads = m->loads;
    out->load_ms = m->load_ms;
    out->expires_in_ms = -1;
    if (m->state == SRV_MODEL_LOADED) {
        if (m->keep_ms >= 0)
            out->expires_in_ms =
                m->users > 0 ? m->keep_ms : m->keep_ms - (nu_time_ms() - m->last_used_ms);
        out->n_vocab = m->limits.n_vocab;
        out->ctx_per_slot = m->ctx_per_slot;
        snprintf(out->chat_template, sizeof out->chat_template, "%s", m->chat.name);
    }
    pthread_mutex_unlock(&r->mu);
}

const char *srv_model_state_name(srv_model_state s) {
    switch (s) {
    case SRV_MODEL_UNLOADED: return "unloaded";
    case SRV_MODEL_LOADING: return "loading";
    case SRV_MODEL_LOADED: return "loaded";
    case SRV_MODEL_UNLOADING: return "unloading";
    }
    return "unknown";
}

/* Holds every loaded model (so none is unloaded meanwhile) into held;
 * returns how many (r->mu not held). */
static int32_t hold_loaded(srv_models *r, srv_model **held) {
    int32_t n = 0;
    pthread_mutex_lock(&r->mu);
    for (int32_t i = 0; i < r->n; i++)
        if (r->list[i].state == SRV_MODEL_LOADED) {
            r->list[i].users++;
            held[n++] = &r->list[i];
        }
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void release_all(srv_model **held, int32_t n) {
    for (int32_t i = 0; i < n; i++) release_hold(held[i], false);
}

void srv_models_stats(srv_models *r, srv_engine_stats *sum, bool *accepting) {
    memset(sum, 0, sizeof *sum);
    *accepting = true;
    srv_model **held = malloc(((size_t)r->n + 1) * sizeof *held);
    if (!held) return;
    int32_t n = hold_loaded(r, held);
    bool any = false;
    for (int32_t i = 0; i < n; i++) {
        srv_engine_stats st;
        srv_engine_get_stats(held[i]->engine, &st);
        any |= srv_engine_stats_accepting(&st);
        sum->queued += st.queued;
        sum->running_jobs += st.running_jobs;
        sum->slots_busy += st.slots_busy;
        sum->slots += st.slots;
        sum->max_queue += st.max_queue;
        sum->kv_used += st.kv_used;
        sum->kv_cells += st.kv_cells;
    }
    if (n > 0) *accepting = any;
    release_all(held, n);
    free(held);
}

void srv_models_drain(srv_models *r, double grace_ms) {
    srv_model **held = malloc(((size_t)r->n + 1) * sizeof *held);
    int32_t n = held ? hold_loaded(r, held) : 0;
    pthread_mutex_lock(&r->mu);
    r->draining = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    double deadline = nu_time_ms() + grace_ms;
    for (int32_t i = 0; i < n; i++) {
        double left = deadline - nu_time_ms();
        srv_engine_drain(held[i]->engine, left > 0 ? left : 0);
    }
    release_all(held, n);
    free(held);
}

void srv_models_stop_labs(srv_models *r) {
    srv_model **held = malloc(((size_t)r->n + 1) * sizeof *held);
    int32_t n = held ? hold_loaded(r, held) : 0;
    for (int32_t i = 0; i < n; i++) srv_lab_stop(held[i]->lab);
    release_all(held, n);
    free(held);
}
