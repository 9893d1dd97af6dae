/* cmd_bench.c - `nucleus bench`: prompt-processing and generation throughput
 * over repetitions, reported as median and spread in a llama-bench-like
 * table. Tokens are drawn at random from the vocabulary (seeded), so the
 * cost is the model's and not the text's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_options.h"

typedef struct bench_opts {
    cli_run_opts run;
    long n_prompt, n_gen, reps, depth;
    bool json, ceiling;
    const char *draft, *text, *text_file; /* speculative: the draft model and the prompt */
    bool lookup;
    long draft_max;
} bench_opts;

static int run_bench(int argc, char **argv);

static const cli_option bench_options[] = {
    {.name = "--n-prompt",
     .short_name = "-p",
     .kind = CLI_INT,
     .field = CLI_FIELD(bench_opts, n_prompt),
     .min = 0,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "prompt tokens per prompt test; 0 skips"},
    {.name = "--n-gen",
     .short_name = "-n",
     .kind = CLI_INT,
     .field = CLI_FIELD(bench_opts, n_gen),
     .min = 0,
     .max = 1 << 20,
     .placeholder = "N",
     .help = "generated tokens per generation test; 0 skips"},
    {.name = "--n-depth",
     .short_name = "-d",
     .kind = CLI_INT,
     .field = CLI_FIELD(bench_opts, depth),
     .min = 0,
     .max = 1 << 24,
     .placeholder = "N",
     .help = "tokens already in the context when each test starts (llama-bench's -d): they are "
             "read once, not timed, and each repetition starts again after them; without -c the "
             "context is what the tests need: -d, then the longer of -p and -n, and one more"},
    {.name = "--reps",
     .short_name = "-r",
     .kind = CLI_INT,
     .field = CLI_FIELD(bench_opts, reps),
     .min = 1,
     .max = 1000,
     .placeholder = "N",
     .help = "repetitions, after one warm-up"},
    {.name = "--json",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(bench_opts, json),
     .help = "one JSON object per test on stdout"},
    {.name = "--ceiling",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(bench_opts, ceiling),
     .help = "after every generated token, time a plain read of the weights a token streams "
             "(same threads): reports that bandwidth and the generation speed as a fraction of "
             "it, token by token"},
    {0},
};

static const cli_option speculative_options[] = {
    {.name = "--draft",
     .kind = CLI_STRING,
     .field = CLI_FIELD(bench_opts, draft),
     .placeholder = "MODEL",
     .help = "with this draft model"},
    {.name = "--lookup",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(bench_opts, lookup),
     .help = "with prompt lookup"},
    {.name = "--draft-max",
     .kind = CLI_INT,
     .field = CLI_FIELD(bench_opts, draft_max),
     .min = 1,
     .max = 64,
     .placeholder = "K",
     .help = "most proposals per pass"},
    {.name = "--text",
     .kind = CLI_STRING,
     .field = CLI_FIELD(bench_opts, text),
     .placeholder = "TEXT",
     .help = "the prompt",
     .default_text = "a copy-heavy built-in text"},
    {.name = "--text-file",
     .kind = CLI_STRING,
     .field = CLI_FIELD(bench_opts, text_file),
     .placeholder = "FILE",
     .help = "the prompt, from a file"},
    {0},
};

static const cli_section bench_sections[] = {
    CLI_OWN_SECTION(NULL, bench_options),
    CLI_OWN_SECTION("speculative decoding against plain decoding (greedy, same prompt, -n tokens)",
                    speculative_options),
    CLI_RUN_SECTIONS(bench_opts, run),
    {0},
};

const cli_command bench_command = {
    .name = "bench",
    .summary = "prompt and generation throughput",
    .usage = "nucleus bench -m MODEL [-p N] [-n N] [-d N] [-r N] [-t N] [--json]",
    .sections = bench_sections,
    .run = run_bench,
};

/* Per-token pairs of --ceiling: the plain read's GB/s and the token's time
 * as a fraction of the read's (the bandwidth ceiling's share it reached). */
typedef struct ceiling_log {
    double *gbps, *frac;
    long n;
    uint64_t bytes;
} ceiling_log;

/* Reads n random tokens at positions from..from+n-1 in batches of 512
 * (logits for the last only). Returns 0, or 1 after printing an error. */
static int read_prompt(nu_context *ctx, long from, long n, nu_rng *rng) {
    const int32_t n_vocab = nu_model_n_vocab(nu_context_model(ctx));
    nu_batch_entry batch[512];
    nu_error err;
    for (long start = 0; start < n; start += 512) {
        int32_t k = (int32_t)(n - start < 512 ? n - start : 512);
        for (int32_t i = 0; i < k; i++)
            batch[i] = (nu_batch_entry){(int32_t)(nu_rng_next(rng) % (uint64_t)n_vocab),
                                        (int32_t)(from + start + i), 0, start + i == n - 1};
        if (nu_decode(ctx, batch, k, &err) != NU_OK) {
            cli_error("%s", err.message);
            return 1;
        }
    }
    return 0;
}

/* One timed run after `depth` tokens already in the cache (positions from
 * depth on are removed first): n_prompt tokens in batches (logits for the
 * last), or n_gen tokens one at a time (logits for each). Returns tokens per
 * second, or a negative value after printing an error. With cl, every step
 * is followed by a timed read of the weights (outside the run's time). */
static double run_once(nu_context *ctx, bool prompt, long n, long depth, nu_rng *rng,
                       ceiling_log *cl) {
    const nu_model *m = nu_context_model(ctx);
    int32_t n_vocab = nu_model_n_vocab(m), n_batch = prompt ? 512 : 1;
    nu_batch_entry batch[512];
    nu_error err;
    if (depth > 0)
        nu_kv_seq_remove(ctx, 0, (int32_t)depth, -1);
    else
        nu_kv_clear(ctx);
    double t0 = nu_time_ms(), reading = 0;
    for (long start = 0; start < n; start += n_batch) {
        double ts = nu_time_ms();
        int32_t k = (int32_t)(n - start < n_batch ? n - start : n_batch);
        for (int32_t i = 0; i < k; i++)
            batch[i] =
                (nu_batch_entry){(int32_t)(nu_rng_next(rng) % (uint64_t)n_vocab),
                                 (int32_t)(depth + start + i), 0, start + i == n - 1 || !prompt};
        if (nu_decode(ctx, batch, k, &err) != NU_OK) {
            cli_error("%s", err.message);
            return -1;
        }
        if (cl) {
            double step = nu_time_ms() - ts;
            double read = nu_context_read_weights(ctx, &cl->bytes);
            cl->gbps[cl->n] = (double)cl->bytes / read / 1e6;
            cl->frac[cl->n++] = read / step;
            reading += nu_time_ms() - ts - step;
        }
    }
    return (double)n / ((nu_time_ms() - t0 - reading) / 1e3);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *x, long n);

static void report(const bench_opts *o, const nu_model *m, const char *test, double *tps, long reps,
                   ceiling_log *cl) {
    qsort(tps, (size_t)reps, sizeof *tps, cmp_double);
    double median = reps % 2 ? tps[reps / 2] : (tps[reps / 2 - 1] + tps[reps / 2]) / 2;
    double mean = 0, var = 0;
    for (long i = 0; i < reps; i++) mean += tps[i] / (double)reps;
    for (long i = 0; i < reps; i++) var += (tps[i] - mean) * (tps[i] - mean) / (double)reps;
    double size_mib = (double)nu_model_weight_bytes(m) / (1024.0 * 1024.0);
    double gbps = cl ? median_of(cl->gbps, cl->n) : 0, frac = cl ? median_of(cl->frac, cl->n) : 0;
    if (o->json) {
        printf("{\"model\": \"%s\", \"size_mib\": %.2f, \"params\": %llu, \"simd\": \"%s\", "
               "\"threads\": %d, \"test\": \"%s\", \"reps\": %ld, \"median_tps\": %.3f, "
               "\"min_tps\": %.3f, \"max_tps\": %.3f, \"stddev_tps\": %.3f",
               nu_model_name(m), size_mib, (unsigned long long)nu_model_n_params(m),
               nu_simd_level(), o->run.ctx.n_threads, test, reps, median, tps[0], tps[reps - 1],
               sqrt(var));
        if (cl)
            printf(", \"read_bytes\": %llu, \"read_gbps\": %.3f, \"ceiling_fraction\": %.4f",
                   (unsigned long long)cl->bytes, gbps, frac);
        printf("}\n");
    } else {
        printf("| %-20.20s | %10.2f MiB | %8.2f M | %-7s | %7d | %14s | %9.2f | %9.2f | %9.2f |\n",
               nu_model_name(m)[0] ? nu_model_name(m) : nu_model_arch(m), size_mib,
               (double)nu_model_n_params(m) / 1e6, nu_simd_level(), o->run.ctx.n_threads, test,
               median, tps[0], tps[reps - 1]);
        if (cl)
            printf("\n%s ceiling: the %.3f GB of weights a token streams, read alone after each "
                   "token, at %.1f GB/s (%.2f tokens/s); generation ran at %.1f%% of it "
                   "(medians of %ld token/read pairs)\n",
                   test, (double)cl->bytes / 1e9, gbps, gbps * 1e9 / (double)cl->bytes, 100 * frac,
                   cl->n);
    }
    fflush(stdout);
}

static int run_test(const bench_opts *o, nu_context *ctx, bool prompt, long n) {
    if (n <= 0) return 0;
    nu_rng rng;
    nu_rng_seed(&rng, 42);
    double tps[1000];
    ceiling_log cl = {0}, *clp = NULL;
    if (o->ceiling && !prompt) {
        cl.gbps = malloc(sizeof(double) * (size_t)(n * o->reps));
        cl.frac = malloc(sizeof(double) * (size_t)(n * o->reps));
        if (!cl.gbps || !cl.frac) {
            free(cl.gbps);
            free(cl.frac);
            cli_error("out of memory");
            return 1;
        }
        clp = &cl;
    }
    nu_kv_clear(ctx);
    int rc = o->depth > 0 ? read_prompt(ctx, 0, o->depth, &rng) : 0;
    if (!rc) rc = run_once(ctx, prompt, n, o->depth, &rng, NULL) < 0; /* warm-up */
    for (long r = 0; r < o->reps && !rc; r++)
        rc = (tps[r] = run_once(ctx, prompt, n, o->depth, &rng, clp)) < 0;
    if (!rc) {
        char name[48];
        if (o->depth > 0)
            snprintf(name, sizeof name, "%s%ld @ d%ld", prompt ? "pp" : "tg", n, o->depth);
        else
            snprintf(name, sizeof name, "%s%ld", prompt ? "pp" : "tg", n);
        report(o, nu_context_model(ctx), name, tps, o->reps, clp);
    }
    free(cl.gbps);
    free(cl.frac);
    return rc;
}

/* A text that repeats itself, as edits and summaries of a document do. */
static const char copy_heavy[] =
    "Rewrite the paragraph below, keeping every sentence.\n\n"
    "The committee met on Tuesday to review the budget for the coming year. Members agreed that "
    "the library needs new shelves, that the community garden needs a fence, and that the "
    "youth football club needs new goals. The treasurer reported that the fund holds enough "
    "money for two of the three projects, and proposed a raffle to pay for the third.\n\n"
    "Rewritten paragraph:\n\n"
    "The committee met on Tuesday to review the budget for the coming year. Members agreed that";

static double median_of(double *x, long n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

/* Plain greedy and speculative greedy on the same prompt, alternating, and
 * their tokens per second (generation after the prompt) side by side. */
static int bench_speculative(bench_opts *o, nu_context *ctx, nu_context *dctx, const char *prompt) {
    nu_generate_params p = nu_generate_default_params();
    p.n_predict = (int32_t)o->n_gen;
    p.sampling.temperature = 0;
    p.sampling.ignore_eos = true;
    nu_speculative_params sp = nu_speculative_default_params();
    sp.draft = dctx;
    sp.lookup = dctx == NULL;
    sp.draft_max = (int32_t)o->draft_max;
    double plain[1000], spec[1000], acc = 0, per_pass = 0;
    nu_error err;
    for (long r = -1; r < o->reps; r++) { /* r = -1 warms up */
        nu_generate_result a, b;
        nu_speculative_stats st;
        if (nu_generate(ctx, prompt, &p, &a, &err) ||
            nu_generate_speculative(ctx, prompt, &p, &sp, &b, &st, &err)) {
            cli_error("%s", err.message);
            return 1;
        }
        if (r >= 0) {
            plain[r] = a.n_generated / (a.generate_ms / 1e3);
            spec[r] = b.n_generated / (b.generate_ms / 1e3);
            acc = st.drafted ? (double)st.accepted / (double)st.drafted : 0;
            per_pass = st.target_passes ? (double)b.n_generated / (double)st.target_passes : 0;
        }
        if (a.n_tokens != b.n_tokens ||
            memcmp(a.tokens, b.tokens, sizeof(int32_t) * (size_t)a.n_tokens))
            fprintf(stderr, "nucleus: warning: speculative tokens differ from plain greedy\n");
        nu_generate_result_free(&a);
        nu_generate_result_free(&b);
    }
    double mp = median_of(plain, o->reps), ms = median_of(spec, o->reps);
    printf("| %-14s | %6ld | %12.2f | %12.2f | %7.2fx | %9.1f%% | %12.2f |\n",
           dctx ? "draft model" : "prompt lookup", o->n_gen, mp, ms, ms / mp, 100 * acc, per_pass);
    return 0;
}

static int run_speculative(bench_opts *o, nu_context *ctx) {
    char *file_text = o->text_file ? cli_read_file(o->text_file, NULL) : NULL;
    if (o->text_file && !file_text) return 1;
    nu_model *dm = NULL;
    nu_context *dctx = NULL;
    int rc = 0;
    if (o->draft) {
        cli_run_opts d = o->run;
        d.model = o->draft;
        rc = cli_open(&d, &dm, &dctx);
    }
    if (!rc) {
        printf("| %-14s | %6s | %12s | %12s | %8s | %10s | %12s |\n|%s|%s|%s|%s|%s|%s|%s|\n",
               "speculation", "tokens", "plain t/s", "spec. t/s", "speedup", "accepted",
               "tokens/pass", "----------------", "-------:", "-------------:", "-------------:",
               "---------:", "-----------:", "-------------:");
        rc = bench_speculative(o, ctx, dctx,
                               file_text ? file_text
                               : o->text ? o->text
                                         : copy_heavy);
    }
    nu_context_free(dctx);
    nu_model_free(dm);
    free(file_text);
    return rc;
}

static int run_bench(int argc, char **argv) {
    bench_opts o = {.n_prompt = 512,
                    .n_gen = 128,
                    .reps = 5,
                    .draft_max = nu_speculative_default_params().draft_max};
    cli_run_opts_init(&o.run);
    int rc;
    if (!cli_parse(&bench_command, argc, argv, &o, &rc)) return rc;
    if (o.n_prompt == 0 && o.n_gen == 0) {
        cli_error("nothing to measure: -p and -n are both 0");
        return 2;
    }
    if (o.ceiling && (o.draft || o.lookup || o.n_gen == 0)) {
        cli_error("--ceiling times plain generation: it needs -n above 0 and no --draft/--lookup");
        return 2;
    }
    if (o.draft || o.lookup) {
        nu_model *m;
        nu_context *ctx;
        if ((rc = cli_open(&o.run, &m, &ctx))) return rc;
        rc = run_speculative(&o, ctx);
        nu_context_free(ctx);
        nu_model_free(m);
        return rc;
    }
    long need = o.depth + (o.n_prompt > o.n_gen ? o.n_prompt : o.n_gen) + 1;
    if (o.run.ctx.n_ctx != 0 && o.run.ctx.n_ctx < need) {
        cli_error("-c %d holds fewer than the %ld tokens a test needs (-d %ld, then the longer of "
                  "-p and -n, and one more); give -c %ld or more, or leave -c out",
                  (int)o.run.ctx.n_ctx, need, (long)o.depth, need);
        return 2;
    }
    if (o.run.ctx.n_ctx == 0) o.run.ctx.n_ctx = (int32_t)need;
    nu_model *m;
    nu_context *ctx;
    if ((rc = cli_open(&o.run, &m, &ctx))) return rc;
    o.run.ctx.n_threads = nu_context_n_threads(ctx);
    if (!o.json)
        printf("| %-20s | %14s | %10s | %-7s | %7s | %14s | %9s | %9s | %9s |\n"
               "|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n",
               "model", "size", "params", "simd", "threads", "test", "t/s med", "t/s min",
               "t/s max", "----------------------",
               "----------------:", "-----------:", "---------",
               "--------:", "---------------:", "----------:", "----------:", "----------:");
    rc = run_test(&o, ctx, true, o.n_prompt);
    if (!rc) rc = run_test(&o, ctx, false, o.n_gen);
    nu_context_free(ctx);
    nu_model_free(m);
    return rc;
}
