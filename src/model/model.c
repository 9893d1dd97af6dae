/* model.c - loading a model: hyperparameters from the metadata, weights as
 * matrices pointing into the mapped file, the vocabulary; and the queries
 * nucleus.h offers about a model (metadata, tensors, memory needs). */
#include "model.h"

#include <inttypes.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "loader.h"

nu_model_params nu_model_default_params(void) {
    nu_model_params p = {.mode = NU_LOAD_FULL};
    return p;
}

const nu_vocab *nu_model_vocab(const nu_model *m) {
    return m->vocab;
}

static nu_status index_names(nu_model *m, nu_error *err);

/* A metadata string as a new NUL-terminated copy ("" when absent). */
static char *meta_str(const nu_gguf_file *f, const char *key) {
    nu_gguf_string v = {"", 0};
    nu_gguf_get_str(f, key, &v);
    char *out = malloc(v.len + 1);
    if (out) {
        memcpy(out, v.data, v.len);
        out[v.len] = 0;
    }
    return out;
}

static nu_status load_model_parts(nu_model *m, nu_error *err) {
    nu_status st;
    m->arch_name = meta_str(m->file, "general.architecture");
    m->name = meta_str(m->file, "general.name");
    if (!m->arch_name || !m->name) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    if (strlen(m->arch_name) >= NU_MAX_KEY / 2)
        return nu_fail(err, NU_ERR_FORMAT, "general.architecture is %zu bytes long",
                       strlen(m->arch_name));
    if (m->mode == NU_LOAD_METADATA_ONLY) return NU_OK;
    if ((st = nu_vocab_load(m->file, &m->vocab, err))) return st;
    m->hp.n_vocab = nu_vocab_n_tokens(m->vocab);
    if (m->mode == NU_LOAD_VOCAB_ONLY) return NU_OK;
    if (m->arch_name[0] == 0) return nu_fail(err, NU_ERR_FORMAT, "missing general.architecture");
    if ((st = nu_load_architecture(m, err))) return st;
    return nu_repack_weights(m, err);
}

nu_status nu_model_load(const char *path, const nu_model_params *params, nu_model **out,
                        nu_error *err) {
    nu_model_params defaults = nu_model_default_params();
    if (!params) params = &defaults;
    *out = NULL;
    if (params->mode > NU_LOAD_METADATA_ONLY)
        return nu_fail(err, NU_ERR_INVALID_ARG, "unknown load mode %d", (int)params->mode);
    nu_model *m = calloc(1, sizeof *m);
    if (!m) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    m->mode = params->mode;
    nu_kernels_init();
    nu_status st = nu_gguf_open(path, &m->file, err);
    if (st == NU_OK) st = index_names(m, err);
    if (st == NU_OK) st = load_model_parts(m, err);
    if (st != NU_OK) {
        nu_model_free(m);
        return st;
    }
    *out = m;
    return NU_OK;
}

void nu_model_free(nu_model *m) {
    if (!m) return;
    free(m->meta_keys); /* one allocation with the types and tensor names */
    free((char *)m->arch_name);
    free((char *)m->name);
    free(m->hp.layer);
    free(m->layers);
    if (m->packed) munmap(m->packed, m->packed_bytes);
    nu_vocab_free(m->vocab);
    nu_gguf_close(m->file);
    free(m);
}

const char *nu_model_arch(const nu_model *m) {
    return m->arch_name;
}
const char *nu_model_name(const nu_model *m) {
    return m->name;
}
int32_t nu_model_n_vocab(const nu_model *m) {
    return m->hp.n_vocab;
}
int32_t nu_model_n_ctx_train(const nu_model *m) {
    return m->hp.n_ctx_train;
}
int32_t nu_model_n_embd(const nu_model *m) {
    return m->hp.n_embd;
}
int32_t nu_model_n_layer(const nu_model *m) {
    return m->hp.n_layer;
}
uint32_t nu_model_gguf_version(const nu_model *m) {
    return m->file->version;
}

/* ---- metadata and tensor table ------------------------------------------ */

int64_t nu_model_meta_count(const nu_model *m) {
    return (int64_t)m->file->n_kv;
}

/* NUL-terminated copies of the names in the file (metadata keys and type
 * names, tensor names), made once at load in one allocation, so that the
 * queries below read a shared model without writing to it. */
static nu_status index_names(nu_model *m, nu_error *err) {
    const nu_gguf_file *f = m->file;
    size_t bytes = 0;
    char type[48];
    for (uint64_t i = 0; i < f->n_kv; i++) bytes += f->kv[i].key.len + 1 + sizeof type;
    for (uint64_t i = 0; i < f->n_tensors; i++) bytes += f->tensors[i].name.len + 1;
    size_t n_ptrs = 2 * f->n_kv + f->n_tensors;
    char **ptrs = malloc(n_ptrs * sizeof *ptrs + bytes + 1);
    if (!ptrs) return nu_fail(err, NU_ERR_NOMEM, "out of memory indexing the file's names");
    char *at = (char *)(ptrs + n_ptrs);
    m->meta_keys = ptrs;
    m->meta_types = ptrs + f->n_kv;
    m->tensor_names = ptrs + 2 * f->n_kv;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        nu_gguf_string k = f->kv[i].key;
        const nu_gguf_value *v = &f->kv[i].value;
        m->meta_keys[i] = at;
        memcpy(at, k.data, k.len);
        at += k.len;
        *at++ = 0;
        if (v->type == GGUF_ARRAY)
            snprintf(type, sizeof type, "arr[%s,%" PRIu64 "]",
                     nu_gguf_type_name(v->v.arr.elem_type), v->v.arr.n);
        else
            snprintf(type, sizeof type, "%s", nu_gguf_type_name(v->type));
        m->meta_types[i] = at;
        size_t n = strlen(type) + 1;
        memcpy(at, type, n);
        at += n;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        nu_gguf_string name = f->tensors[i].name;
        m->tensor_names[i] = at;
        memcpy(at, name.data, name.len);
        at += name.len;
        *at++ = 0;
    }
    return NU_OK;
}

const char *nu_model_meta_key(const nu_model *m, int64_t i) {
    if (i < 0 || (uint64_t)i >= m->file->n_kv) return NULL;
    return m->meta_keys[i];
}

const char *nu_model_meta_type(const nu_model *m, int64_t i) {
    if (i < 0 || (uint64_t)i >= m->file->n_kv) return NULL;
    return m->meta_types[i];
}

/* A growing output buffer that counts what it could not hold. */
typedef struct text_out {
    char *buf;
    size_t cap, len;
} text_out;

static void out_bytes(text_out *o, const char *s, size_t n) {
    for (size_t k = 0; k < n; k++, o->len++)
        if (o->len + 1 < o->cap) o->buf[o->len] = s[k];
}

static void out_str(text_out *o, const char *s) {
    out_bytes(o, s, strlen(s));
}

/* Strings are shown quoted with control characters escaped. */
static void out_quoted(text_out *o, nu_gguf_string s) {
    char esc[8];
    out_str(o, "\"");
    for (uint64_t k = 0; k < s.len; k++) {
        unsigned char c = (unsigned char)s.data[k];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            out_bytes(o, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, c == '\n' ? "\\n" : "\\x%02x", c);
            out_str(o, esc);
        } else {
            out_bytes(o, (const char *)&c, 1);
        }
    }
    out_str(o, "\"");
}

static void out_value(text_out *o, const nu_gguf_value *v, int max_items) {
    char num[64];
    switch (v->type) {
    case GGUF_UINT8:
    case GGUF_UINT16:
    case GGUF_UINT32:
    case GGUF_UINT64:
        snprintf(num, sizeof num, "%" PRIu64, v->v.u);
        out_str(o, num);
        break;
    case GGUF_INT8:
    case GGUF_INT16:
    case GGUF_INT32:
    case GGUF_INT64:
        snprintf(num, sizeof num, "%" PRId64, v->v.i);
        out_str(o, num);
        break;
    case GGUF_FLOAT32:
    case GGUF_FLOAT64:
        snprintf(num, sizeof num, "%.9g", v->v.f);
        out_str(o, num);
        break;
    case GGUF_BOOL: out_str(o, v->v.u ? "true" : "false"); break;
    case GGUF_STRING: out_quoted(o, v->v.s); break;
    case GGUF_ARRAY: {
        out_str(o, "[");
        uint64_t n = v->v.arr.n, shown = n < (uint64_t)max_items ? n : (uint64_t)max_items;
        for (uint64_t k = 0; k < shown; k++) {
            if (k) out_str(o, ", ");
            out_value(o, &v->v.arr.items[k], max_items);
        }
        if (shown < n) {
            snprintf(num, sizeof num, "%s... %" PRIu64 " more", shown ? ", " : "", n - shown);
            out_str(o, num);
        }
        out_str(o, "]");
        break;
    }
    default: out_str(o, "?"); break;
    }
}

size_t nu_model_meta_value(const nu_model *m, int64_t i, char *buf, size_t cap, int max_items) {
    text_out o = {buf, cap, 0};
    if (i >= 0 && (uint64_t)i < m->file->n_kv)
        out_value(&o, &m->file->kv[i].value, max_items < 0 ? 0 : max_items);
    if (cap) buf[o.len < cap ? o.len : cap - 1] = 0;
    return o.len;
}

int64_t nu_model_tensor_count(const nu_model *m) {
    return (int64_t)m->file->n_tensors;
}

bool nu_model_tensor(const nu_model *m, int64_t i, nu_tensor_info *out) {
    if (i < 0 || (uint64_t)i >= m->file->n_tensors) return false;
    const nu_gguf_tensor *t = &m->file->tensors[i];
    out->name = m->tensor_names[i];
    out->type_name = nu_type_get(t->type)->name;
    out->n_dims = t->n_dims;
    memcpy(out->ne, t->ne, sizeof out->ne);
    out->n_elements = t->n_elements;
    out->n_bytes = t->n_bytes;
    out->file_offset = m->file->data_offset + t->offset;
    return true;
}

uint64_t nu_model_n_params(const nu_model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) n += m->file->tensors[i].n_elements;
    return n;
}

uint64_t nu_model_weight_bytes(const nu_model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) n += m->file->tensors[i].n_bytes;
    return n;
}
