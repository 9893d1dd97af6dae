/* draft_support.c - draft models and the chi-square test for the
 * speculative-decoding tests. */
#include "draft_support.h"

#include <math.h>
#include <stdio.h>

#include "gguf.h"
#include "kernels.h"
#include "test_support.h"

int nu_test_scale_output(const char *path, float factor) {
    nu_gguf_file *f;
    if (nu_gguf_open(path, &f, NULL) != NU_OK) return -1;
    const nu_gguf_tensor *t = nu_gguf_find_tensor(f, "output.weight");
    if (!t || t->type != NU_TYPE_Q8_0) {
        nu_gguf_close(f);
        return -1;
    }
    long off = (long)((const uint8_t *)t->data - f->base);
    uint64_t blocks = t->n_bytes / 34; /* a q8_0 block: an f16 scale and 32 bytes */
    nu_gguf_close(f);
    FILE *fp = fopen(path, "r+b");
    if (!fp) return -1;
    for (uint64_t b = 0; b < blocks; b++) {
        unsigned char d[2];
        fseek(fp, off + (long)(b * 34), SEEK_SET);
        if (fread(d, 1, 2, fp) != 2) break;
        uint16_t h = (uint16_t)(d[0] | d[1] << 8);
        h = nu_f32_to_f16(nu_f16_to_f32(h) * factor);
        d[0] = (unsigned char)(h & 0xff), d[1] = (unsigned char)(h >> 8);
        fseek(fp, off + (long)(b * 34), SEEK_SET);
        fwrite(d, 1, 2, fp);
    }
    return fclose(fp);
}

nu_model *nu_test_make_draft(const char *src, const char *name, const char *type, float factor) {
    char path[4096];
    snprintf(path, sizeof path, "%s", nu_test_tmp(name));
    if (nu_quantize_file(src, path, type, NULL) != NU_OK) return NULL;
    if (factor != 1.0f && nu_test_scale_output(path, factor) != 0) return NULL;
    nu_model *m = NULL;
    return nu_model_load(path, NULL, &m, NULL) == NU_OK ? m : NULL;
}

double nu_test_chi_square(const double *observed, const double *expected, int n, int *df) {
    double chi = 0, o_rest = 0, e_rest = 0;
    *df = -1;
    for (int i = 0; i < n; i++) {
        if (expected[i] < 5) {
            o_rest += observed[i];
            e_rest += expected[i];
            continue;
        }
        chi += (observed[i] - expected[i]) * (observed[i] - expected[i]) / expected[i];
        (*df)++;
    }
    if (e_rest >= 5) {
        chi += (o_rest - e_rest) * (o_rest - e_rest) / e_rest;
        (*df)++;
    }
    return chi;
}

double nu_test_chi2_critical(int df) {
    double z = 3.0902, a = 2.0 / (9.0 * df), c = 1 - a + z * sqrt(a);
    return df * c * c * c;
}
