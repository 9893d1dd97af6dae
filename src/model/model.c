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

nu_model_params nu_model_default_params(void) {
    nu_model_params p = {.mode = NU_LOAD_FULL};
    return p;
}

const nu_vocab *nu_model_vocab(const nu_model *m) {
    return m->vocab;
}

static nu_status index_names(nu_model *m, nu_error *err);

/* Copies a metadata string into a fixed buffer (truncating); "" when absent. */
static void copy_meta_str(const nu_gguf_file *f, const char *key, char *dst, size_t cap) {
    nu_gguf_string s;
    dst[0] = 0;
    if (!nu_gguf_get_str(f, key, &s)) return;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(dst, s.data, n);
    dst[n] = 0;
}

/* Reads "<arch>.<suffix>" as a positive int32. Missing keys keep *out. */
static nu_status arch_int(const nu_model *m, const char *suffix, bool required, int32_t *out,
                          nu_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    uint32_t v;
    if (!nu_gguf_find(m->file, key)) {
        if (required) return nu_fail(err, NU_ERR_FORMAT, "missing metadata key %s", key);
        return NU_OK;
    }
    if (!nu_gguf_get_u32(m->file, key, &v) || v == 0 || v > (1u << 30))
        return nu_fail(err, NU_ERR_FORMAT, "metadata %s must be an integer in 1..2^30", key);
    *out = (int32_t)v;
    return NU_OK;
}

static nu_status arch_float(const nu_model *m, const char *suffix, float *out, nu_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    if (!nu_gguf_find(m->file, key)) return NU_OK;
    if (!nu_gguf_get_f32(m->file, key, out) || !(*out > 0) || *out > 1e30f)
        return nu_fail(err, NU_ERR_FORMAT, "metadata %s must be a positive number", key);
    return NU_OK;
}

/* RoPE scaling keys: "<arch>.rope.scaling.type" (none | linear | yarn) with
 * ".factor" and ".original_context_length", or the older ".rope.scale_linear". */
static nu_status read_rope_scaling(nu_model *m, nu_error *err) {
    nu_hparams *hp = &m->hp;
    char key[128], type[32];
    hp->rope_scaling = NU_ROPE_SCALING_NONE;
    hp->rope_factor = 1.0f;
    hp->rope_orig_ctx = hp->n_ctx_train;
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch);
    copy_meta_str(m->file, key, type, sizeof type);
    nu_status st = arch_float(m, "rope.scaling.factor", &hp->rope_factor, err);
    if (st == NU_OK) st = arch_float(m, "rope.scale_linear", &hp->rope_factor, err);
    if (st == NU_OK)
        st = arch_int(m, "rope.scaling.original_context_length", false, &hp->rope_orig_ctx, err);
    if (st != NU_OK) return st;
    if (type[0] == 0) {
        snprintf(key, sizeof key, "%s.rope.scale_linear", m->arch);
        if (nu_gguf_find(m->file, key) && hp->rope_factor != 1.0f)
            hp->rope_scaling = NU_ROPE_SCALING_LINEAR;
    } else if (strcmp(type, "linear") == 0) {
        hp->rope_scaling = NU_ROPE_SCALING_LINEAR;
    } else if (strcmp(type, "yarn") == 0) {
        hp->rope_scaling = NU_ROPE_SCALING_YARN;
    } else if (strcmp(type, "none") != 0) {
        return nu_fail(err, NU_ERR_UNSUPPORTED, "rope scaling type '%s' is not supported", type);
    }
    if (hp->rope_scaling == NU_ROPE_SCALING_NONE) hp->rope_factor = 1.0f;
    return NU_OK;
}

/* The llama family's hyperparameters, with the defaults real files rely on. */
static nu_status read_hparams(nu_model *m, nu_error *err) {
    nu_hparams *hp = &m->hp;
    nu_status st;
    if ((st = arch_int(m, "embedding_length", true, &hp->n_embd, err)) ||
        (st = arch_int(m, "block_count", true, &hp->n_layer, err)) ||
        (st = arch_int(m, "attention.head_count", true, &hp->n_head, err)))
        return st;
    hp->n_head_kv = hp->n_head;
    hp->n_ctx_train = 2048;
    hp->n_ff = 4 * hp->n_embd;
    if ((st = arch_int(m, "attention.head_count_kv", false, &hp->n_head_kv, err)) ||
        (st = arch_int(m, "context_length", false, &hp->n_ctx_train, err)) ||
        (st = arch_int(m, "feed_forward_length", true, &hp->n_ff, err)))
        return st;
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = arch_int(m, "attention.key_length", false, &hp->head_dim, err))) return st;
    hp->n_rot = hp->head_dim;
    if ((st = arch_int(m, "rope.dimension_count", false, &hp->n_rot, err))) return st;
    hp->rope_base = 10000.0f;
    hp->norm_eps = 1e-5f;
    if ((st = arch_float(m, "rope.freq_base", &hp->rope_base, err)) ||
        (st = arch_float(m, "attention.layer_norm_rms_epsilon", &hp->norm_eps, err)))
        return st;
    if (hp->n_head % hp->n_head_kv)
        return nu_fail(err, NU_ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d",
                       hp->n_head, hp->n_head_kv);
    if (hp->head_dim > 256 || hp->head_dim * hp->n_head < hp->n_head)
        return nu_fail(err, NU_ERR_UNSUPPORTED, "head dimension %d is larger than 256",
                       hp->head_dim);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return nu_fail(err, NU_ERR_FORMAT, "rope.dimension_count %d must be even and <= %d",
                       hp->n_rot, hp->head_dim);
    return read_rope_scaling(m, err);
}

/* Finds a tensor and checks its type and shape; ne1 = 0 means a vector. */
static nu_status get_tensor(const nu_model *m, const char *name, int64_t ne0, int64_t ne1,
                            bool required, const nu_gguf_tensor **out, nu_error *err) {
    const nu_gguf_tensor *t = nu_gguf_find_tensor(m->file, name);
    *out = NULL;
    if (!t) {
        if (required) return nu_fail(err, NU_ERR_FORMAT, "missing tensor '%s'", name);
        return NU_OK;
    }
    int64_t want1 = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1)
        return nu_fail(err, NU_ERR_FORMAT,
                       "tensor '%s' has shape [%" PRId64 ", %" PRId64 "], expected [%" PRId64
                       ", %" PRId64 "]",
                       name, t->ne[0], t->ne[1], ne0, want1);
    const nu_type_traits *tt = nu_type_get(t->type);
    if (ne1 == 0 && t->type != NU_TYPE_F32)
        return nu_fail(err, NU_ERR_UNSUPPORTED, "tensor '%s' is %s; vectors must be f32", name,
                       tt->name ? tt->name : "unknown");
    if (ne1 != 0 && !tt->computable)
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "tensor '%s' has type %s, which nucleus cannot "
                       "compute with yet",
                       name, tt->name ? tt->name : "unknown");
    *out = t;
    return NU_OK;
}

static nu_status get_matrix(const nu_model *m, const char *name, int64_t n_in, int64_t n_out,
                            nu_matrix *out, nu_error *err) {
    const nu_gguf_tensor *t;
    nu_status st = get_tensor(m, name, n_in, n_out, true, &t, err);
    if (st) return st;
    out->type = t->type;
    out->n_in = n_in;
    out->n_out = n_out;
    out->data = t->data;
    out->row_bytes = (size_t)nu_type_row_bytes(t->type, (uint64_t)n_in);
    return NU_OK;
}

static nu_status get_vector(const nu_model *m, const char *name, int64_t n, bool required,
                            const float **out, nu_error *err) {
    const nu_gguf_tensor *t;
    nu_status st = get_tensor(m, name, n, 0, required, &t, err);
    *out = t ? (const float *)t->data : NULL;
    return st;
}

static nu_status load_layer(nu_model *m, int il, nu_error *err) {
    const nu_hparams *hp = &m->hp;
    nu_layer *l = &m->layers[il];
    int64_t d = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    char name[96];
    nu_status st = NU_OK;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, il), name)
    if ((st = get_vector(m, NAME("attn_norm.weight"), d, true, &l->attn_norm, err)) ||
        (st = get_matrix(m, NAME("attn_q.weight"), d, q_dim, &l->wq, err)) ||
        (st = get_matrix(m, NAME("attn_k.weight"), d, kv_dim, &l->wk, err)) ||
        (st = get_matrix(m, NAME("attn_v.weight"), d, kv_dim, &l->wv, err)) ||
        (st = get_matrix(m, NAME("attn_output.weight"), q_dim, d, &l->wo, err)) ||
        (st = get_vector(m, NAME("attn_q.bias"), q_dim, false, &l->bq, err)) ||
        (st = get_vector(m, NAME("attn_k.bias"), kv_dim, false, &l->bk, err)) ||
        (st = get_vector(m, NAME("attn_v.bias"), kv_dim, false, &l->bv, err)) ||
        (st = get_vector(m, NAME("attn_output.bias"), d, false, &l->bo, err)) ||
        (st = get_vector(m, NAME("ffn_norm.weight"), d, true, &l->ffn_norm, err)) ||
        (st = get_matrix(m, NAME("ffn_gate.weight"), d, hp->n_ff, &l->w_gate, err)) ||
        (st = get_matrix(m, NAME("ffn_up.weight"), d, hp->n_ff, &l->w_up, err)) ||
        (st = get_matrix(m, NAME("ffn_down.weight"), hp->n_ff, d, &l->w_down, err)))
        return st;
#undef NAME
    return NU_OK;
}

/* Weights of the llama architecture; output.weight absent means tied embeddings. */
static nu_status load_weights(nu_model *m, nu_error *err) {
    const nu_hparams *hp = &m->hp;
    nu_status st = get_matrix(m, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd, err);
    if (st) return st;
    if ((st = get_vector(m, "output_norm.weight", hp->n_embd, true, &m->output_norm, err)))
        return st;
    if (nu_gguf_find_tensor(m->file, "output.weight")) {
        st = get_matrix(m, "output.weight", hp->n_embd, hp->n_vocab, &m->output, err);
        if (st) return st;
    } else {
        m->output = m->tok_embd;
    }
    if ((st = get_vector(m, "rope_freqs.weight", hp->n_rot / 2, false, &m->rope_freq_factors, err)))
        return st;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return nu_fail(err, NU_ERR_NOMEM, "out of memory for %d layers", hp->n_layer);
    for (int il = 0; il < hp->n_layer; il++)
        if ((st = load_layer(m, il, err))) return st;
    return NU_OK;
}

/* The matrices a forward pass multiplies with (the embedding table is only
 * read row by row, so it keeps its file layout unless it is also the LM head). */
static int model_matrices(nu_model *m, nu_matrix **out) {
    int n = 0;
    out[n++] = &m->output;
    for (int il = 0; il < m->hp.n_layer; il++) {
        nu_layer *l = &m->layers[il];
        nu_matrix *each[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t i = 0; i < sizeof each / sizeof *each; i++) out[n++] = each[i];
    }
    return n;
}

/* The same list for readers (model_matrices only takes the addresses). */
int nu_model_matrices(const nu_model *m, const nu_matrix **out) {
    return model_matrices((nu_model *)m, (nu_matrix **)out);
}

/* Tells the kernel the file pages of a repacked matrix will not be read
 * again, so they stop counting towards the process's memory (they are
 * clean file pages: touching them again would simply re-read them). */
static void release_pages(const nu_matrix *W) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t begin = ((uintptr_t)W->data + page - 1) / page * page;
    uintptr_t end = ((uintptr_t)W->data + (uintptr_t)W->n_out * W->row_bytes) / page * page;
    if (end > begin) madvise((void *)begin, end - begin, MADV_DONTNEED);
}

/* Copies every matrix the selected kernels have a panel layout for into that
 * layout (NUCLEUS_REPACK=0 in the environment keeps the file layout). The
 * file's pages of a repacked matrix are not read again by the forward pass. */
static nu_status repack_weights(nu_model *m, nu_error *err) {
    const char *env = getenv("NUCLEUS_REPACK");
    if (env && strcmp(env, "0") == 0) return NU_OK;
    nu_matrix **mats = malloc(sizeof *mats * (size_t)(1 + 7 * m->hp.n_layer));
    if (!mats) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    int n = model_matrices(m, mats);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (nu_matrix_pack_bytes(mats[i]) + 63) / 64 * 64;
    if (total == 0) {
        free(mats);
        return NU_OK;
    }
    /* Anonymous memory asked for in huge pages where the system allows: fewer
     * page faults while repacking and fewer TLB misses while streaming. */
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(mats);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for %zu bytes of repacked weights", total);
    }
    m->packed = p;
    m->packed_bytes = total;
    madvise(p, total, MADV_HUGEPAGE);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = nu_matrix_pack_bytes(mats[i]);
        if (!bytes) continue;
        void *dst = (uint8_t *)m->packed + at;
        nu_matrix_pack(mats[i], dst, 0, mats[i]->n_out / 16);
        mats[i]->packed = dst;
        at += (bytes + 63) / 64 * 64;
        if (mats[i]->data != m->tok_embd.data) release_pages(mats[i]);
    }
    free(mats);
    return NU_OK;
}

/* Architectures whose files follow the llama layout (Mistral, TinyLlama and
 * SmolLM files say "llama"). */
static bool arch_is_llama(const char *arch) {
    return strcmp(arch, "llama") == 0 || strcmp(arch, "mistral") == 0;
}

static nu_status load_model_parts(nu_model *m, nu_error *err) {
    nu_status st;
    copy_meta_str(m->file, "general.architecture", m->arch, sizeof m->arch);
    copy_meta_str(m->file, "general.name", m->name, sizeof m->name);
    if (m->mode == NU_LOAD_METADATA_ONLY) return NU_OK;
    if ((st = nu_vocab_load(m->file, &m->vocab, err))) return st;
    m->hp.n_vocab = nu_vocab_n_tokens(m->vocab);
    if (m->mode == NU_LOAD_VOCAB_ONLY) return NU_OK;
    if (m->arch[0] == 0) return nu_fail(err, NU_ERR_FORMAT, "missing general.architecture");
    if (!arch_is_llama(m->arch))
        return nu_fail(err, NU_ERR_UNSUPPORTED,
                       "architecture '%s' is not supported yet "
                       "(supported: llama)",
                       m->arch);
    if ((st = read_hparams(m, err))) return st;
    if ((st = load_weights(m, err))) return st;
    return repack_weights(m, err);
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
    free(m->layers);
    if (m->packed) munmap(m->packed, m->packed_bytes);
    nu_vocab_free(m->vocab);
    nu_gguf_close(m->file);
    free(m);
}

const char *nu_model_arch(const nu_model *m) {
    return m->arch;
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
