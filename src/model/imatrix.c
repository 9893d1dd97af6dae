/* imatrix.c - importance matrices as llama.cpp's quantize tool reads them
 * (`llama-quantize --imatrix FILE`): per weight matrix, the mean square of
 * each of its input columns over some text (one vector per expert for the
 * mixture-of-experts matrices). Two file formats exist (facts from
 * llama.cpp's common/imatrix-loader.cpp):
 *
 *   GGUF (llama-imatrix's default): for each matrix NAME two F32 tensors,
 *     NAME.in_sum2 (the sums of squares, n_in per expert) and NAME.counts
 *     (the number of activations summed, one per expert); metadata
 *     imatrix.datasets (string array), imatrix.chunk_count and
 *     imatrix.chunk_size (u32). The importance is in_sum2 / count (1 where
 *     the count is 0).
 *   Legacy (.dat): int32 entries; per entry int32 name length, the name,
 *     int32 ncall, int32 nval, nval floats (already averaged per call, then
 *     multiplied by ncall); then optionally int32 chunk count, int32 length
 *     and a dataset name. The importance is value / ncall (the value itself
 *     when ncall is 0).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gguf.h"
#include "imatrix.h"
#include "tensor_type.h"

struct nu_imatrix {
    int n;
    char **names;
    float **values;
    int64_t *sizes;
};

void nu_imatrix_free(nu_imatrix *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) free(m->names[i]), free(m->values[i]);
    free(m->names), free(m->values), free(m->sizes);
    free(m);
}

/* Adds an entry (the name copied, the values taken over). */
static nu_status add_entry(nu_imatrix *m, const char *name, size_t name_len, float *values,
                           int64_t n, nu_error *err) {
    char **names = realloc(m->names, sizeof *names * (size_t)(m->n + 1));
    if (names) m->names = names;
    float **vals = realloc(m->values, sizeof *vals * (size_t)(m->n + 1));
    if (vals) m->values = vals;
    int64_t *sizes = realloc(m->sizes, sizeof *sizes * (size_t)(m->n + 1));
    if (sizes) m->sizes = sizes;
    char *copy = malloc(name_len + 1);
    if (!names || !vals || !sizes || !copy) {
        free(copy), free(values);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    }
    memcpy(copy, name, name_len);
    copy[name_len] = 0;
    m->names[m->n] = copy, m->values[m->n] = values, m->sizes[m->n] = n;
    m->n++;
    return NU_OK;
}

static bool ends_with(nu_gguf_string s, const char *suffix, size_t *stem) {
    size_t n = strlen(suffix);
    if (s.len < n || memcmp(s.data + s.len - n, suffix, n) != 0) return false;
    *stem = (size_t)s.len - n;
    return true;
}

static nu_status load_gguf(nu_gguf_file *f, const char *path, nu_imatrix *m, nu_error *err) {
    if (!nu_gguf_find(f, "imatrix.chunk_count") || !nu_gguf_find(f, "imatrix.chunk_size") ||
        !nu_gguf_find(f, "imatrix.datasets"))
        return nu_fail(err, NU_ERR_FORMAT,
                       "%s: an importance matrix in GGUF needs imatrix.datasets, "
                       "imatrix.chunk_count and imatrix.chunk_size",
                       path);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const nu_gguf_tensor *sums = &f->tensors[i];
        size_t stem;
        if (!ends_with(sums->name, ".in_sum2", &stem)) continue;
        const nu_gguf_tensor *counts = NULL;
        for (uint64_t j = 0; j < f->n_tensors && !counts; j++) {
            size_t s2;
            const nu_gguf_tensor *t = &f->tensors[j];
            if (ends_with(t->name, ".counts", &s2) && s2 == stem &&
                memcmp(t->name.data, sums->name.data, stem) == 0)
                counts = t;
        }
        if (!counts)
            return nu_fail(err, NU_ERR_FORMAT, "%s: '%.*s' has no .counts tensor", path,
                           (int)sums->name.len, sums->name.data);
        if (sums->type != NU_TYPE_F32 || counts->type != NU_TYPE_F32 || counts->n_elements == 0 ||
            sums->n_elements % counts->n_elements)
            return nu_fail(err, NU_ERR_FORMAT,
                           "%s: '%.*s': sums and counts must be F32, the sums a whole number "
                           "of vectors per count",
                           path, (int)sums->name.len, sums->name.data);
        const int64_t n = (int64_t)sums->n_elements, per = n / (int64_t)counts->n_elements;
        float *v = malloc(sizeof(float) * (size_t)n);
        if (!v) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
        const float *s = sums->data, *c = counts->data;
        for (int64_t k = 0; k < n; k++) {
            float count = c[k / per];
            v[k] = count > 0.0f ? s[k] / count : 1.0f;
        }
        nu_status st = add_entry(m, sums->name.data, stem, v, n, err);
        if (st) return st;
    }
    if (m->n == 0)
        return nu_fail(err, NU_ERR_FORMAT, "%s: no .in_sum2 tensors (not an importance matrix?)",
                       path);
    return NU_OK;
}

/* Reads n bytes at *at of a buffer of size len, or fails. */
static bool take(const uint8_t *buf, size_t len, size_t *at, void *out, size_t n) {
    if (n > len - *at) return false;
    memcpy(out, buf + *at, n);
    *at += n;
    return true;
}

static nu_status load_legacy(const uint8_t *buf, size_t len, const char *path, nu_imatrix *m,
                             nu_error *err) {
    size_t at = 0;
    int32_t entries;
    if (!take(buf, len, &at, &entries, 4) || entries < 1)
        return nu_fail(err, NU_ERR_FORMAT, "%s: not a GGUF file and no legacy imatrix entries",
                       path);
    for (int32_t e = 0; e < entries; e++) {
        int32_t name_len, ncall, nval;
        if (!take(buf, len, &at, &name_len, 4) || name_len < 1 || name_len > 4096 ||
            (size_t)name_len > len - at)
            return nu_fail(err, NU_ERR_FORMAT, "%s: entry %d: bad name length", path, e);
        const char *name = (const char *)buf + at;
        at += (size_t)name_len;
        if (!take(buf, len, &at, &ncall, 4) || !take(buf, len, &at, &nval, 4) || nval < 1 ||
            (size_t)nval > (len - at) / 4)
            return nu_fail(err, NU_ERR_FORMAT, "%s: entry %d ('%.*s'): bad value count", path, e,
                           (int)name_len, name);
        float *v = malloc(sizeof(float) * (size_t)nval);
        if (!v) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
        take(buf, len, &at, v, 4 * (size_t)nval);
        if (ncall > 0)
            for (int32_t k = 0; k < nval; k++) v[k] /= (float)ncall;
        nu_status st = add_entry(m, name, (size_t)name_len, v, nval, err);
        if (st) return st;
    }
    return NU_OK; /* the trailing chunk count and dataset name are not needed */
}

nu_status nu_imatrix_load(const char *path, nu_imatrix **out, nu_error *err) {
    *out = NULL;
    nu_imatrix *m = calloc(1, sizeof *m);
    if (!m) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    nu_gguf_file *f;
    nu_error gguf_err;
    nu_status st;
    if (nu_gguf_open(path, &f, &gguf_err) == NU_OK) {
        st = load_gguf(f, path, m, err);
        nu_gguf_close(f);
    } else {
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            nu_imatrix_free(m);
            return nu_fail(err, NU_ERR_IO, "cannot open %s", path);
        }
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0, got;
        do {
            if (len == cap) {
                uint8_t *b = realloc(buf, cap = cap ? 2 * cap : 1 << 16);
                if (!b) break;
                buf = b;
            }
            got = fread(buf + len, 1, cap - len, fp);
            len += got;
        } while (got > 0);
        fclose(fp);
        st =
            buf ? load_legacy(buf, len, path, m, err) : nu_fail(err, NU_ERR_NOMEM, "out of memory");
        free(buf);
    }
    if (st) {
        nu_imatrix_free(m);
        return st;
    }
    *out = m;
    return NU_OK;
}

const float *nu_imatrix_find(const nu_imatrix *m, const char *name, size_t name_len, int64_t *n) {
    for (int i = 0; m && i < m->n; i++)
        if (strlen(m->names[i]) == name_len && memcmp(m->names[i], name, name_len) == 0) {
            *n = m->sizes[i];
            return m->values[i];
        }
    *n = 0;
    return NULL;
}
