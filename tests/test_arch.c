/* test_arch.c - every architecture against llama.cpp: for each reference in
 * tests/arch/refs (tests/arch/README.md says how they were made), the tiny
 * random-weight model is written again by its generator (its sha256 must
 * be the pinned one), read with an f32 KV cache, and at every step of every
 * prompt nucleus's greedy token must be llama.cpp's (where the top two are
 * not a near tie) and its log-probs of llama.cpp's top 5 within 1e-2. The
 * reference's token is fed back after each step, so one step's difference
 * cannot hide the next ones.
 *
 * NU_ARCH_ONLY=name1,name2 runs only those cases (for debugging).
 * NU_ARCH_CACHE=DIR keeps the generated models there (scripts/test.sh shares
 * one folder between its two builds); default: the build's tmp folder.
 * In a sanitizer build (NU_SANITIZE) each case runs its first prompt only:
 * that build is there to find memory errors, and runs ~10x slower. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "kernels.h"
#include "test_support.h"

#define TOLERANCE 1e-2
/* Step functions: the GELU families (gpt2, starcoder2, gemma*), whose
 * reference GELU is a step function at half precision (src/model/blocks.c),
 * and quantised weights, whose activations are rounded to 8 bits (with a
 * scale rounded to half precision for the 32-element types). A value that
 * differs from the reference's in its last float bit can land on the other
 * side of a step, and tiny random models amplify such flips (one flipped
 * int8 moves later log-probs by up to ~0.5 here, and a flip in a cached key
 * or value stays for the rest of the prompt; a mixture's near-equal router
 * logits can pick another expert). These cases are checked against the
 * model's own sensitivity, measured by running nucleus again at the lower
 * SIMD levels (other roundings, same math) and on a copy of the model whose
 * norm weights are scaled by 1 + 2^-20 and one by 1 - 2^-20 (every hidden
 * state moves by about one part in a million, as another engine's roundings
 * move it): the median
 * and 95th percentile of the differences from llama.cpp must be within 3x
 * nucleus's largest differences from itself, and the greedy tokens equal
 * except where nucleus itself picks another token in one of those runs (or
 * where the reference's two best tokens are closer than twice the largest
 * difference nucleus shows from itself). An
 * activation or recipe that is really different moves them 10x and more
 * (the exact tanh GELU instead of the reference's: medians 1e-2 - 1e-1 on
 * gemma4, against ~3e-3 here; the activation scale not rounded to half
 * precision: medians 0.3 - 1.2 on the quantised llama cases, against
 * ~5e-6). */
#define SELF_FACTOR 3.0
#define PERTURBATION 0x1p-20f
/* With quantised weights the median difference of the closest prompt must
 * also stay below this (a flip can make one prompt's steps differ from
 * early on; a real difference shows in every prompt): the activation scale
 * not rounded to half precision gave 0.3 - 1.2 at the first steps. Not in
 * the sanitizer build, which runs one prompt. */
#define ROUNDED_MEDIAN 1e-3
/* The committed llama-quantize files: the one step per case where an 8-bit
 * activation may round the other way (see below) stays within this. */
#define FLIP_TOLERANCE 0.1

/* Whether the file at path has the sha256 `want` (the hex digest). */
static bool has_sha256(const char *path, const char *want, char *sum, size_t sum_size) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "sha256sum '%s' 2>/dev/null", path);
    sum[0] = 0;
    FILE *p = popen(cmd, "r");
    if (p) {
        if (!fgets(sum, (int)sum_size, p)) sum[0] = 0;
        pclose(p);
    }
    return want && strlen(want) == 64 && strncmp(sum, want, 64) == 0;
}

/* Runs the reference's generator into path unless a file with the sha256
 * `want` is already there. Returns 0 when path holds the right file. Files
 * are written beside path and renamed into place: runs sharing
 * NU_ARCH_CACHE may have path mapped, and truncating it would kill them
 * (SIGBUS). */
static int make_model(const cJSON *model, const char *want, const char *path) {
    const char *gen = cJSON_GetStringValue(cJSON_GetObjectItem(model, "generator"));
    char cmd[16384], sum[128] = "", tmp[2100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    for (int attempt = 0; attempt < 2; attempt++) {
        if (has_sha256(path, want, sum, sizeof sum)) return 0;
        if (attempt) break;
        /* the generator: ../shared/tools/synth_gguf.py or tests/arch/tiny_gguf.py */
        size_t at = 0;
        if (strncmp(gen, "../shared/", 10) == 0)
            at += (size_t)snprintf(cmd, sizeof cmd, "python3 '%s'", nu_test_shared(gen + 10));
        else
            at += (size_t)snprintf(cmd, sizeof cmd, "python3 '%s/%s'", NU_SOURCE_DIR, gen);
        const cJSON *arg;
        cJSON_ArrayForEach(arg, cJSON_GetObjectItem(model, "args")) {
            const char *a = cJSON_GetStringValue(arg);
            char buf[2560];
            if (strcmp(a, "{out}") == 0)
                snprintf(buf, sizeof buf, "%s", tmp);
            else if (strncmp(a, "../shared/", 10) == 0)
                snprintf(buf, sizeof buf, "%s", nu_test_shared(a + 10));
            else
                snprintf(buf, sizeof buf, "%s", a);
            at += (size_t)snprintf(cmd + at, sizeof cmd - at, " '%s'", buf);
        }
        snprintf(cmd + at, sizeof cmd - at, " >/dev/null");
        if (system(cmd) != 0 || rename(tmp, path) != 0) {
            print_message("generator failed: %s\n", cmd);
            remove(tmp);
            return -1;
        }
    }
    print_message("%s: sha256 %.16s..., the reference pins %.16s...\n", path, sum, want);
    return -1;
}

/* Copies the committed file rel (a path in the repository: llama-quantize's
 * own output, which the test cannot make) to path (beside it, then renamed);
 * it must have the sha256 `want`. Returns 0 on success. */
static int copy_committed(const char *rel, const char *want, const char *path) {
    char src[2048], sum[128];
    snprintf(src, sizeof src, "%s/%s", NU_SOURCE_DIR, rel);
    if (!has_sha256(src, want, sum, sizeof sum)) {
        print_message("%s: sha256 %.16s..., the reference pins %.16s...\n", src, sum, want);
        return -1;
    }
    size_t len;
    char *bytes = nu_test_read_file(src, &len), tmp[2100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    FILE *o = bytes ? fopen(tmp, "wb") : NULL;
    int ok = o && fwrite(bytes, 1, len, o) == len;
    if (o) ok = fclose(o) == 0 && ok;
    free(bytes);
    ok = ok && rename(tmp, path) == 0;
    if (!ok) remove(tmp);
    return ok ? 0 : -1;
}

/* The reference's model at path: the generator's file, or for a quantised
 * case ("quantized" in the reference) the generator's F32 file (kept in
 * dir, named by its sha256, shared by the cases that start from it) written
 * again by nu_quantize_file_with(pure) in the case's type, which must give
 * the pinned bytes, or with "file" the committed file made by llama-quantize.
 * Returns 0 when path holds the right file. */
static int make_case_model(const cJSON *ref, const char *dir, const char *path) {
    const cJSON *model = cJSON_GetObjectItem(ref, "model");
    const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(model, "sha256"));
    const cJSON *quant = cJSON_GetObjectItem(ref, "quantized");
    if (!quant) return make_model(model, want, path);
    char sum[128], base[2048];
    if (has_sha256(path, want, sum, sizeof sum)) return 0;
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(quant, "file"));
    if (file) return copy_committed(file, want, path);
    const char *base_sha = cJSON_GetStringValue(cJSON_GetObjectItem(quant, "base_sha256"));
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(quant, "type"));
    if (!base_sha || !type) {
        print_message("%s: the reference's \"quantized\" lacks base_sha256 or type\n", path);
        return -1;
    }
    snprintf(base, sizeof base, "%s/base-%.16s.gguf", dir, base_sha);
    if (make_model(model, base_sha, base) != 0) return -1;
    nu_quantize_params qp = nu_quantize_default_params();
    qp.pure = true;
    nu_error err;
    char tmp[2100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    if (nu_quantize_file_with(base, tmp, type, &qp, &err) != NU_OK || rename(tmp, path) != 0) {
        print_message("%s: %s\n", path, err.message);
        remove(tmp);
        return -1;
    }
    if (has_sha256(path, want, sum, sizeof sum)) return 0;
    print_message("%s (quantised to %s): sha256 %.16s..., the reference pins %.16s...\n", path,
                  type, sum, want);
    return -1;
}

enum { MAX_DIFFS = 4096 };

typedef struct case_result {
    double tolerance;
    double max_diff;
    int steps, token_mismatches, logprob_failures;
    double diffs[MAX_DIFFS]; /* every top-5 entry's |difference| */
    double ours[MAX_DIFFS];  /* and nucleus's log-prob of it */
    int n_diffs;
    bool record_only;                   /* a second run at another SIMD level: log-probs only */
    int32_t greedy[MAX_DIFFS / 5];      /* nucleus's greedy token at each step */
    double mismatch_gap[MAX_DIFFS / 5]; /* per token mismatch: the reference's top-2 gap */
} case_result;

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n values (0 for none), without reordering them. */
static double slice_median(const double *v, int n) {
    if (n <= 0) return 0;
    double *c = malloc(sizeof *c * (size_t)n);
    assert_non_null(c);
    memcpy(c, v, sizeof *c * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, by_value);
    double m = c[(n - 1) / 2];
    free(c);
    return m;
}

/* The q-quantile of the differences (sorted in place). */
static double quantile(case_result *r, double q) {
    if (r->n_diffs == 0) return 0;
    qsort(r->diffs, (size_t)r->n_diffs, sizeof *r->diffs, by_value);
    int i = (int)(q * (r->n_diffs - 1) + 0.5);
    return r->diffs[i];
}

/* log softmax of the logits in double, at id. */
static double logprob(const float *logits, int32_t n_vocab, int32_t id, double lse) {
    (void)n_vocab;
    return (double)logits[id] - lse;
}

static double log_sum_exp(const float *logits, int32_t n) {
    float max = logits[0];
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - max);
    return max + log(sum);
}

static bool in_list(const cJSON *list, int32_t v) {
    const cJSON *x;
    cJSON_ArrayForEach(x, list) if ((int32_t)x->valuedouble == v) return true;
    return false;
}

/* Writes a copy of the model at path to out with every F32 tensor whose
 * name ends in "norm.weight" scaled by factor. Returns 0 on success. */
static int write_perturbed(const char *path, const char *out, float factor) {
    size_t len;
    char *bytes = nu_test_read_file(path, &len);
    nu_gguf_file *f;
    nu_error err;
    if (!bytes || nu_gguf_open_memory(bytes, len, &f, &err) != NU_OK) {
        free(bytes);
        return -1;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const nu_gguf_tensor *t = &f->tensors[i];
        const char *suffix = "norm.weight";
        size_t n = strlen(suffix);
        if (t->type != NU_TYPE_F32 || t->name.len < n ||
            memcmp(t->name.data + t->name.len - n, suffix, n) != 0)
            continue;
        float *w = (float *)(void *)(bytes + ((const char *)t->data - (const char *)f->base));
        for (uint64_t j = 0; j < t->n_elements; j++) w[j] *= factor;
    }
    nu_gguf_close(f);
    FILE *o = fopen(out, "wb");
    int ok = o && fwrite(bytes, 1, len, o) == len;
    if (o) ok = fclose(o) == 0 && ok;
    free(bytes);
    return ok ? 0 : -1;
}

/* One prompt: decode it, then each step against the reference. */
#ifdef NU_SANITIZE_BUILD
#define PROMPTS_PER_CASE 1
#define SANITIZE_BUILD true
#else
#define PROMPTS_PER_CASE 1000
#define SANITIZE_BUILD false
#endif

static void run_prompt(nu_context *ctx, const cJSON *prompt, const cJSON *eog, const char *name,
                       case_result *r) {
    const nu_model *m = nu_context_model(ctx);
    const int32_t n_vocab = nu_model_n_vocab(m);
    const cJSON *toks = cJSON_GetObjectItem(prompt, "prompt_tokens");
    const cJSON *near = cJSON_GetObjectItem(prompt, "near_ties");
    int32_t n = cJSON_GetArraySize(toks), pos = 0;
    nu_batch_entry *batch = calloc((size_t)n, sizeof *batch);
    assert_non_null(batch);
    for (int32_t i = 0; i < n; i++) {
        batch[i] = (nu_batch_entry){.token = (int32_t)cJSON_GetArrayItem(toks, i)->valuedouble,
                                    .pos = i,
                                    .seq = 0,
                                    .logits = i == n - 1};
    }
    nu_kv_clear(ctx);
    nu_error err;
    if (nu_decode(ctx, batch, n, &err) != NU_OK) fail_msg("%s: %s", name, err.message);
    int32_t last = n - 1;
    pos = n;
    const cJSON *step;
    int32_t k = 0;
    cJSON_ArrayForEach(step, cJSON_GetObjectItem(prompt, "steps")) {
        const float *logits = nu_logits(ctx, last);
        assert_non_null(logits);
        double lse = log_sum_exp(logits, n_vocab);
        int32_t want = (int32_t)cJSON_GetObjectItem(step, "id")->valuedouble;
        /* greedy over the tokens that do not end generation */
        int32_t best = -1;
        for (int32_t t = 0; t < n_vocab; t++)
            if (!in_list(eog, t) && (best < 0 || logits[t] > logits[best])) best = t;
        bool tie = near && in_list(near, k);
        if (r->steps < MAX_DIFFS / 5) r->greedy[r->steps] = best;
        if (best != want && !tie && !r->record_only) {
            const cJSON *top2 = cJSON_GetObjectItem(step, "top");
            if (r->token_mismatches < MAX_DIFFS / 5)
                r->mismatch_gap[r->token_mismatches] =
                    cJSON_GetArrayItem(cJSON_GetArrayItem(top2, 0), 1)->valuedouble -
                    cJSON_GetArrayItem(cJSON_GetArrayItem(top2, 1), 1)->valuedouble;
            if (r->token_mismatches++ < 3)
                print_message("%s step %d: token %d, llama.cpp %d\n", name, k, best, want);
        }
        const cJSON *top;
        cJSON_ArrayForEach(top, cJSON_GetObjectItem(step, "top")) {
            int32_t id = (int32_t)cJSON_GetArrayItem(top, 0)->valuedouble;
            double ref = cJSON_GetArrayItem(top, 1)->valuedouble;
            double ours = logprob(logits, n_vocab, id, lse), diff = fabs(ours - ref);
            if (r->n_diffs < MAX_DIFFS) r->ours[r->n_diffs] = ours, r->diffs[r->n_diffs++] = diff;
            if (r->record_only) continue;
            if (diff > r->max_diff) r->max_diff = diff;
            if (r->tolerance > 0 && diff > r->tolerance && r->logprob_failures++ < 3)
                print_message("%s step %d: log-prob of %d is %.5f, llama.cpp %.5f\n", name, k, id,
                              logprob(logits, n_vocab, id, lse), ref);
        }
        r->steps++;
        nu_batch_entry e = {.token = want, .pos = pos++, .seq = 0, .logits = true};
        if (nu_decode(ctx, &e, 1, &err) != NU_OK) fail_msg("%s: %s", name, err.message);
        last = 0;
        k++;
    }
    free(batch);
}

static bool wanted(const char *name) {
    const char *only = getenv("NU_ARCH_ONLY");
    if (!only || !*only) return true;
    size_t n = strlen(name);
    for (const char *p = only; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        p += len + (end ? 1 : 0);
    }
    return false;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_architectures(void **state) {
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/arch/refs", NU_SOURCE_DIR);
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *names[256];
    int n_files = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n_files < 256)
        if (strstr(de->d_name, ".json")) names[n_files++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)n_files, sizeof *names, by_name);
    int run = 0, failed = 0;
    const char *cache = getenv("NU_ARCH_CACHE");
    char cache_dir[1024];
    snprintf(cache_dir, sizeof cache_dir, "%s", cache && *cache ? cache : nu_test_tmp("arch"));
    mkdir(cache_dir, 0755);
    for (int f = 0; f < n_files; f++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        char *json = nu_test_read_file(path, NULL);
        cJSON *ref = cJSON_Parse(json);
        assert_non_null(ref);
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(ref, "case"));
        if (!wanted(name)) goto next;
        char model_path[2048];
        snprintf(model_path, sizeof model_path, "%s/%s.gguf", cache_dir, name);
        /* cases whose support is being built (prefixes of case names): their
         * references are here, the test reports them until they run */
        static const char *const pending[] = {NULL};
        bool is_pending = false;
        for (size_t i = 0; pending[i]; i++)
            is_pending |= strncmp(name, pending[i], strlen(pending[i])) == 0;
        if (is_pending) {
            print_message("%-28s not supported yet\n", name);
            goto next;
        }
        if (make_case_model(ref, cache_dir, model_path) != 0) {
            failed++;
            goto next;
        }
        nu_model *m;
        nu_error err;
        if (nu_model_load(model_path, NULL, &m, &err) != NU_OK) {
            print_message("%s: %s\n", name, err.message);
            failed++;
            goto next;
        }
        nu_context_params cp = nu_context_default_params();
        cp.n_ctx = 256;
        cp.kv_type = NU_KV_F32;
        nu_context *ctx;
        if (nu_context_new(m, &cp, &ctx, &err) != NU_OK) fail_msg("%s: %s", name, err.message);
        const char *arch = nu_model_arch(m);
        bool gelu =
            !strcmp(arch, "gpt2") || !strcmp(arch, "starcoder2") || !strncmp(arch, "gemma", 5);
        /* quantised weights: their activations are rounded to 8 bits */
        bool rounded = cJSON_GetObjectItem(ref, "quantized") || strstr(name, "mxfp4");
        bool self_check = gelu || rounded;
        static case_result r, self;
        memset(&r, 0, sizeof r);
        r.tolerance = self_check ? 0 : TOLERANCE;
        /* llama-quantize's own file (committed): held to TOLERANCE per entry */
        const bool pinned_file =
            cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "quantized"), "file") != NULL;
        const cJSON *prompt;
        int n_prompts = 0;
        double best_median = INFINITY; /* the closest prompt's median difference */
        cJSON_ArrayForEach(prompt, cJSON_GetObjectItem(ref, "prompts")) {
            if (n_prompts++ == PROMPTS_PER_CASE) break;
            int first = r.n_diffs;
            run_prompt(ctx, prompt, cJSON_GetObjectItem(ref, "eog_token_ids"), name, &r);
            best_median = fmin(best_median, slice_median(r.diffs + first, r.n_diffs - first));
        }
        bool ok = r.token_mismatches == 0 && r.logprob_failures == 0;
        char extra[224] = "";
        if (self_check) {
            /* the same steps at every lower SIMD level: nucleus against
             * itself (per top-5 entry the largest difference; a flip is a
             * step where some level picks another token) */
            static case_result other;
            memset(&self, 0, sizeof self);
            int flips = 0;
            bool flipped[MAX_DIFFS / 5] = {false};
            for (int level = 0; level < (int)nu_kernels_cpu_level(); level++) {
                memset(&other, 0, sizeof other);
                other.record_only = true;
                nu_kernels_force_level((nu_simd)level);
                n_prompts = 0;
                cJSON_ArrayForEach(prompt, cJSON_GetObjectItem(ref, "prompts")) {
                    if (n_prompts++ == PROMPTS_PER_CASE) break;
                    run_prompt(ctx, prompt, cJSON_GetObjectItem(ref, "eog_token_ids"), name,
                               &other);
                }
                for (int i = 0; i < other.n_diffs && i < r.n_diffs; i++)
                    self.diffs[i] = fmax(self.diffs[i], fabs(other.ours[i] - r.ours[i]));
                self.n_diffs = other.n_diffs < r.n_diffs ? other.n_diffs : r.n_diffs;
                for (int i = 0; i < other.steps && i < r.steps && i < MAX_DIFFS / 5; i++)
                    if (other.greedy[i] != r.greedy[i] && !flipped[i]) flipped[i] = true, flips++;
            }
            nu_kernels_force_level(nu_kernels_cpu_level());
            /* and the perturbed copies at the CPU's level */
            for (int sign = -1; sign <= 1; sign += 2) {
                char perturbed[2100];
                /* named by process: runs sharing NU_ARCH_CACHE must not
                 * rewrite a copy another one has mapped (SIGBUS) */
                snprintf(perturbed, sizeof perturbed, "%s.perturbed-%ld.gguf", model_path,
                         (long)getpid());
                nu_model *pm = NULL;
                nu_context *pc = NULL;
                if (write_perturbed(model_path, perturbed, 1.0f + (float)sign * PERTURBATION) !=
                        0 ||
                    nu_model_load(perturbed, NULL, &pm, &err) != NU_OK ||
                    nu_context_new(pm, &cp, &pc, &err) != NU_OK)
                    fail_msg("%s: cannot run the perturbed copy %s", name, perturbed);
                memset(&other, 0, sizeof other);
                other.record_only = true;
                n_prompts = 0;
                cJSON_ArrayForEach(prompt, cJSON_GetObjectItem(ref, "prompts")) {
                    if (n_prompts++ == PROMPTS_PER_CASE) break;
                    run_prompt(pc, prompt, cJSON_GetObjectItem(ref, "eog_token_ids"), name, &other);
                }
                for (int i = 0; i < other.n_diffs && i < r.n_diffs; i++)
                    self.diffs[i] = fmax(self.diffs[i], fabs(other.ours[i] - r.ours[i]));
                for (int i = 0; i < other.steps && i < r.steps && i < MAX_DIFFS / 5; i++)
                    if (other.greedy[i] != r.greedy[i] && !flipped[i]) flipped[i] = true, flips++;
                nu_context_free(pc);
                nu_model_free(pm);
                remove(perturbed);
            }
            /* a greedy mismatch is explained where the reference's two best
             * tokens are closer than nucleus moves log-probs by itself */
            double self_max = 0;
            for (int i = 0; i < self.n_diffs; i++) self_max = fmax(self_max, self.diffs[i]);
            int unexplained = 0;
            for (int i = 0; i < r.token_mismatches && i < MAX_DIFFS / 5; i++)
                unexplained += r.mismatch_gap[i] > 2 * self_max;
            ok = r.logprob_failures == 0 && (r.token_mismatches <= flips || unexplained == 0);
            /* llama-quantize's own files (the pin): every greedy
             * token llama.cpp's (near ties aside), and at every step the
             * top-5 log-probs within TOLERANCE of llama.cpp's, beyond what
             * nucleus moves by itself there at another SIMD level, except at
             * most one step per case, by at most FLIP_TOLERANCE: there one
             * activation lies within float rounding of an 8-bit rounding
             * boundary, and the two engines' float sums round it to
             * neighbouring integers (seen: a 27.5000019 and a 17.4999847
             * times the block's scale, in the attention output, on the Q4_K
             * and Q5_K files; the other step where one file differs by more
             * than 1e-2, on Q3_K, differs as much from nucleus's scalar
             * level, which is within 2e-6 of llama.cpp there) */
            int beyond = 0, flip_steps = 0;
            if (pinned_file) {
                for (int st = 0; st * 5 < r.n_diffs && st * 5 < self.n_diffs; st++) {
                    double worst = 0;
                    bool explained = true;
                    for (int i = st * 5; i < st * 5 + 5 && i < r.n_diffs; i++) {
                        worst = fmax(worst, r.diffs[i]);
                        explained = explained && r.diffs[i] <= TOLERANCE + self.diffs[i];
                    }
                    if (worst <= TOLERANCE) continue;
                    beyond++;
                    if (explained) continue;
                    if (++flip_steps > 1 || worst > FLIP_TOLERANCE)
                        print_message("%s: step %d (counted over the prompts) differs from "
                                      "llama.cpp by up to %.3g\n",
                                      name, st, worst);
                }
                ok = ok && r.token_mismatches == 0 && flip_steps <= 1 &&
                     r.max_diff <= FLIP_TOLERANCE;
            }
            double s50 = quantile(&self, 0.5), s95 = quantile(&self, 0.95);
            double l50 = quantile(&r, 0.5), l95 = quantile(&r, 0.95);
            bool within =
                l50 <= SELF_FACTOR * fmax(s50, 1e-4) && l95 <= SELF_FACTOR * fmax(s95, 1e-3);
            /* rounded activations: most steps agree as float roundings do */
            if (rounded && !SANITIZE_BUILD) within = within && best_median <= ROUNDED_MEDIAN;
            /* The sanitizer build runs one prompt: where nucleus itself picks
             * another token at another level, a flip early in that prompt
             * moves every later step (a flipped cached key or value stays),
             * and one prompt cannot tell that from a real difference. The
             * release build judges these statistics over all the prompts
             * (seen: llama-wide-q2_k-s1 on an AVX2-only CPU, median 1.4e-1
             * over its first prompt, 2.9e-6 over all three). */
            if (SANITIZE_BUILD && flips > 0) within = true;
            snprintf(extra, sizeof extra, "; nucleus vs itself: p95 %.2e, median %.2e, %d flips%s",
                     s95, s50, flips,
                     pinned_file ? (beyond ? (flip_steps ? "; steps beyond 1e-2: 1, a flip"
                                                         : "; steps beyond 1e-2: within self")
                                           : "; every step within 1e-2")
                                 : "");
            ok = ok && within;
        }
        double p50 = quantile(&r, 0.5), p95 = quantile(&r, 0.95);
        print_message("%-24s %3d steps, vs llama.cpp max %.2e, p95 %.2e, median %.2e%s%s\n", name,
                      r.steps, r.max_diff, p95, p50, extra, ok ? "" : "  FAILED");
        failed += !ok;
        run++;
        nu_context_free(ctx);
        nu_model_free(m);
    next:
        cJSON_Delete(ref);
        free(json);
        free(names[f]);
    }
    print_message("architectures: %d cases run, %d failed\n", run, failed);
    assert_int_equal(failed, 0);
    if (!getenv("NU_ARCH_ONLY")) assert_true(run >= 20);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_architectures)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
