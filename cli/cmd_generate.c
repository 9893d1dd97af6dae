/* cmd_generate.c - `nucleus generate`: continue a prompt, streaming text to
 * stdout as it is produced, with a summary on stderr. Also n samples,
 * best-of-n, self-consistency, beam search, log-probs and JSON output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_json.h"
#include "cli_options.h"

static const char generate_help[] =
    "usage: nucleus generate [-m MODEL] (-p PROMPT | -f FILE) [options]\n\n"
    "  -p, --prompt TEXT    the prompt\n"
    "  -f, --file FILE      read the prompt from a file\n"
    "      --prompts FILE   a batch: one prompt per line, generated together (at most 64)\n"
    "  -n, --n-predict N    most tokens to generate; -1 runs to EOS or the context end (default 128)\n"
    "      --echo           print the prompt before the continuation\n"
    "      --stop TEXT      stop before TEXT (repeatable; matched across tokens)\n"
    "      --stop-token ID  stop at this token id (repeatable)\n"
    "      --include-stop   keep the matched stop text in the output\n"
    "      --samples N      draw N samples of the prompt, sharing its cache (default 1)\n"
    "      --best-of N      draw N samples and print the one with the highest total log-prob\n"
    "      --self-consistency N  draw N samples and print the majority answer\n"
    "      --answer-regex RE     what an answer is (POSIX ERE; default: the last number)\n"
    "      --beam W         beam search with W beams (deterministic)\n"
    "      --beam-return N  hypotheses to print (default 1)\n"
    "      --length-penalty A    beam score = log-prob / length^A (default 1)\n"
    "      --early-stopping stop beam search once W hypotheses are finished\n"
    "      --logprobs N     record each token's log-prob and N alternatives (0..20)\n"
    "      --logprobs-after-chain  log-probs of the distribution the sampler chain leaves\n"
    "      --json-output    print the result(s) as JSON lines instead of text\n"
    "      --draft MODEL    speculative decoding with this draft model (same vocabulary)\n"
    "      --lookup         speculative decoding with prompt lookup (no draft model)\n"
    "      --draft-max K    most tokens proposed per pass (default 8)\n"
    "      --draft-min K    fewest tokens proposed per pass (default 1)\n"
    "      --draft-fixed    keep the draft length at --draft-max (no adaptation)\n"
    "      --special        special-token text in the prompt (e.g. <s>) becomes its token\n"
    "      --no-bos         do not add the BOS token the model asks for\n"
    "      --no-summary     no summary on stderr\n";

#define MAX_STOP 16

typedef struct generate_opts {
    cli_run_opts run;
    const char *prompt, *prompt_file, *prompts_file, *answer_regex;
    const char *stop[MAX_STOP];
    int32_t stop_tokens[MAX_STOP];
    nu_generate_params gen;
    nu_beam_params beam;
    nu_speculative_params spec;
    const char *draft_model;
    long best_of, consistency;
    bool summary, json, use_beam;
} generate_opts;

static bool write_text(void *user, int32_t index, const char *text, size_t len) {
    (void)user, (void)index;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* Options with a count; returns 1 when argv[*i] was one, -1 on error. */
static int parse_counts(generate_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    long v;
    if (*i + 1 >= argc) return 0;
    if (!strcmp(a, "--samples") || !strcmp(a, "--best-of") || !strcmp(a, "--self-consistency")) {
        if (!cli_parse_int(a, argv[++*i], 1, 64, &v)) return -1;
        o->gen.n = (int32_t)v;
        if (!strcmp(a, "--best-of")) o->best_of = v;
        if (!strcmp(a, "--self-consistency")) o->consistency = v;
    } else if (!strcmp(a, "--beam")) {
        if (!cli_parse_int(a, argv[++*i], 1, 32, &v)) return -1;
        o->beam.width = (int32_t)v;
        o->use_beam = true;
    } else if (!strcmp(a, "--beam-return")) {
        if (!cli_parse_int(a, argv[++*i], 1, 32, &v)) return -1;
        o->beam.n_return = (int32_t)v;
    } else if (!strcmp(a, "--length-penalty")) {
        double x;
        if (!cli_parse_float(a, argv[++*i], -10, 10, &x)) return -1;
        o->beam.length_penalty = (float)x;
    } else if (!strcmp(a, "--draft-max") || !strcmp(a, "--draft-min")) {
        if (!cli_parse_int(a, argv[++*i], 1, 64, &v)) return -1;
        if (!strcmp(a, "--draft-max")) o->spec.draft_max = (int32_t)v;
        else o->spec.draft_min = (int32_t)v;
    } else if (!strcmp(a, "--logprobs")) {
        if (!cli_parse_int(a, argv[++*i], 0, NU_MAX_TOP_LOGPROBS, &v)) return -1;
        o->gen.logprobs = (int32_t)v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
        if (!cli_parse_int(a, argv[++*i], -1, 1L << 30, &v)) return -1;
        o->gen.n_predict = (int32_t)v;
    } else if (!strcmp(a, "--stop-token")) {
        if (o->gen.n_stop_tokens == MAX_STOP) {
            cli_error("at most %d stop tokens", MAX_STOP);
            return -1;
        }
        if (!cli_parse_int(a, argv[++*i], 0, 1L << 30, &v)) return -1;
        o->stop_tokens[o->gen.n_stop_tokens++] = (int32_t)v;
    } else {
        return 0;
    }
    return 1;
}

static int parse_flag(generate_opts *o, const char *a) {
    if (!strcmp(a, "--echo")) o->gen.echo = true;
    else if (!strcmp(a, "--include-stop")) o->gen.include_stop = true;
    else if (!strcmp(a, "--early-stopping")) o->beam.early_stopping = true;
    else if (!strcmp(a, "--logprobs-after-chain")) o->gen.logprobs_after_chain = true;
    else if (!strcmp(a, "--json-output")) o->json = true;
    else if (!strcmp(a, "--lookup")) o->spec.lookup = true;
    else if (!strcmp(a, "--draft-fixed")) o->spec.adaptive = false;
    else if (!strcmp(a, "--special")) o->gen.parse_special = o->beam.parse_special = true;
    else if (!strcmp(a, "--no-bos")) o->gen.add_bos = o->beam.add_bos = false;
    else if (!strcmp(a, "--no-summary")) o->summary = false;
    else return 0;
    return 1;
}

/* Returns 0 to go on, or the exit code (after printing help or an error). */
static int parse(generate_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_run_opt(&o->run, argc, argv, &i);
        if (r == 0) r = cli_grammar_opt(&o->run, argc, argv, &i);
        if (r == 0) r = parse_counts(o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0 || parse_flag(o, a)) continue;
        bool v = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s%s", generate_help, cli_run_opts_help, cli_grammar_help);
            return -1;
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && v) {
            o->prompt = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && v) {
            o->prompt_file = argv[++i];
        } else if (!strcmp(a, "--prompts") && v) {
            o->prompts_file = argv[++i];
        } else if (!strcmp(a, "--draft") && v) {
            o->draft_model = argv[++i];
        } else if (!strcmp(a, "--answer-regex") && v) {
            o->answer_regex = argv[++i];
        } else if (!strcmp(a, "--stop") && v) {
            if (o->gen.n_stop == MAX_STOP) {
                cli_error("at most %d stop strings", MAX_STOP);
                return 2;
            }
            o->stop[o->gen.n_stop++] = argv[++i];
        } else {
            cli_error("unknown or incomplete option '%s' (see nucleus generate --help)", a);
            return 2;
        }
    }
    if (!!o->prompt + !!o->prompt_file + !!o->prompts_file != 1) {
        cli_error("give the prompt with exactly one of -p TEXT, -f FILE or --prompts FILE");
        return 2;
    }
    return 0;
}

static void print_summary(const nu_generate_result *r) {
    double pp = r->prompt_ms > 0 ? r->n_prompt / (r->prompt_ms / 1e3) : 0;
    double tg = r->generate_ms > 0 ? r->n_generated / (r->generate_ms / 1e3) : 0;
    fprintf(stderr,
            "\n\nprompt: %d tokens in %.1f ms (%.2f tok/s) | generated: %d tokens in %.1f ms "
            "(%.2f tok/s) | stop: %s\n",
            r->n_prompt, r->prompt_ms, pp, r->n_generated, r->generate_ms, tg,
            nu_finish_reason_name(r->finish));
}

/* Prints results: streamed text was already printed for a single sample. */
static void print_results(const generate_opts *o, const nu_model *m, nu_generate_result *r,
                          int32_t n, bool streamed) {
    for (int32_t i = 0; i < n; i++) {
        if (o->json) {
            json_result(stdout, m, &r[i]);
            continue;
        }
        if (n > 1)
            printf("%s--- %s %d (%d tokens, log-prob %.3f, score %.3f, %s) ---\n", i ? "\n" : "",
                   o->use_beam ? "hypothesis" : "sample", i, r[i].n_generated, r[i].sum_logprob,
                   r[i].score, nu_finish_reason_name(r[i].finish));
        if (!streamed) fputs(r[i].text ? r[i].text : "", stdout);
        if (o->summary && !o->use_beam) print_summary(&r[i]);
        else putchar('\n');
    }
}

/* best-of and self-consistency: pick one sample of n and say why. */
static int pick_one(const generate_opts *o, const nu_model *m, nu_generate_result *r) {
    int32_t n = o->gen.n, index = nu_best_of(r, n), votes = 0;
    char answer[256] = "";
    if (o->consistency) {
        nu_error err;
        if (nu_majority_answer(r, n, o->answer_regex, answer, sizeof answer, &votes, &index, &err)) {
            cli_error("%s", err.message);
            return 1;
        }
        fprintf(stderr, "self-consistency: answer '%s' with %d of %d votes\n", answer, votes, n);
        if (index < 0) return 1;
    } else {
        fprintf(stderr, "best of %d: sample %d (total log-prob %.3f)\n", n, index,
                r[index].sum_logprob);
    }
    print_results(o, m, &r[index], 1, false);
    return 0;
}

/* Speculative decoding: one sample, with the draft's statistics. */
static int run_speculative(generate_opts *o, nu_context *ctx, const char *prompt) {
    nu_model *dm = NULL;
    nu_context *dctx = NULL;
    nu_error err;
    int rc = 0;
    if (o->draft_model) {
        cli_run_opts d = o->run;
        d.model = o->draft_model;
        if ((rc = cli_open(&d, &dm, &dctx))) return rc;
        o->spec.draft = dctx;
    }
    nu_speculative_stats stats;
    nu_generate_result r;
    o->gen.on_text = o->json ? NULL : write_text;
    if (nu_generate_speculative(ctx, prompt, &o->gen, &o->spec, &r, &stats, &err) != NU_OK) {
        cli_error("%s", err.message);
        rc = 1;
    } else {
        print_results(o, nu_context_model(ctx), &r, 1, !o->json);
        if (o->summary)
            fprintf(stderr, "speculative (%s): %lld proposed, %lld accepted (%.1f%%), %lld target "
                            "passes, %.2f tokens per target pass\n",
                    o->draft_model ? "draft model" : "prompt lookup", (long long)stats.drafted,
                    (long long)stats.accepted,
                    stats.drafted ? 100.0 * (double)stats.accepted / (double)stats.drafted : 0.0,
                    (long long)stats.target_passes,
                    stats.target_passes ? (double)r.n_generated / (double)stats.target_passes : 0.0);
        nu_generate_result_free(&r);
    }
    nu_context_free(dctx);
    nu_model_free(dm);
    return rc;
}

/* Splits text into its non-empty lines (in place). */
static int32_t split_lines(char *text, char **lines, int32_t cap) {
    int32_t n = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (n == cap) return -1;
        lines[n++] = l;
    }
    return n;
}

/* A batch of prompts through one scheduler: all advance together. */
static int run_batch(generate_opts *o, nu_context *ctx, char **prompts, int32_t n) {
    nu_scheduler *s;
    nu_error err;
    static nu_generate_result r[64];
    if (nu_scheduler_new(ctx, &s, &err)) {
        cli_error("%s", err.message);
        return 1;
    }
    o->gen.on_text = NULL;
    nu_status st = NU_OK;
    double t0 = nu_time_ms();
    for (int32_t i = 0; i < n && st == NU_OK; i++)
        st = nu_scheduler_submit(s, prompts[i], NULL, 0, &o->gen, &r[i], NULL, &err);
    if (st == NU_OK) st = nu_scheduler_run(s, &err);
    double ms = nu_time_ms() - t0;
    nu_scheduler_free(s);
    if (st) {
        cli_error("%s", err.message);
        return 1;
    }
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        total += r[i].n_generated;
        if (o->json) json_result(stdout, nu_context_model(ctx), &r[i]);
        else printf("%s--- prompt %d (%d tokens, %s) ---\n%s\n", i ? "\n" : "", i,
                    r[i].n_generated, nu_finish_reason_name(r[i].finish), r[i].text);
        nu_generate_result_free(&r[i]);
    }
    if (o->summary)
        fprintf(stderr, "\n%d prompts, %lld tokens generated in %.1f ms (%.2f tok/s together)\n", n,
                (long long)total, ms, (double)total / (ms / 1e3));
    return 0;
}

static int run(generate_opts *o, nu_context *ctx, const char *prompt) {
    if (o->draft_model || o->spec.lookup) return run_speculative(o, ctx, prompt);
    const nu_model *m = nu_context_model(ctx);
    nu_generate_result r[64];
    nu_error err;
    nu_status st;
    int32_t n = o->use_beam ? o->beam.n_return : o->gen.n;
    bool stream = !o->use_beam && o->gen.n == 1 && !o->json;
    if (o->use_beam) {
        o->beam.n_predict = o->gen.n_predict < 1 ? 64 : o->gen.n_predict;
        st = nu_beam_search(ctx, prompt, &o->beam, r, &err);
    } else {
        o->gen.on_text = stream ? write_text : NULL;
        st = nu_generate(ctx, prompt, &o->gen, r, &err);
    }
    if (st != NU_OK) {
        cli_error("%s", err.message);
        return 1;
    }
    int rc = 0;
    if (o->best_of || o->consistency) rc = pick_one(o, m, r);
    else print_results(o, m, r, n, stream);
    for (int32_t i = 0; i < n; i++) nu_generate_result_free(&r[i]);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    generate_opts o = {.gen = nu_generate_default_params(), .beam = nu_beam_default_params(),
                       .spec = nu_speculative_default_params(), .summary = true};
    cli_run_opts_init(&o.run);
    int rc = parse(&o, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.use_beam && o.run.sampling.watermark.key) {
        /* beam search ranks continuations by the model's own log-probs and
         * draws nothing: there is no sampling step for the watermark */
        cli_error("--watermark cannot be combined with --beam (use sampling or greedy decoding)");
        return 2;
    }
    char *file_text = NULL, *batch[64];
    int32_t n_batch = 0;
    const char *file = o.prompt_file ? o.prompt_file : o.prompts_file;
    if (file && !(file_text = cli_read_file(file, NULL))) return 1;
    if (o.prompts_file && (n_batch = split_lines(file_text, batch, 64)) <= 0) {
        cli_error("%s must hold 1 to 64 non-empty lines", o.prompts_file);
        free(file_text);
        return 2;
    }
    o.gen.sampling = o.run.sampling;
    o.gen.stop = o.stop;
    o.gen.stop_tokens = o.stop_tokens;
    o.run.ctx.n_seq_max = o.use_beam ? 2 * o.beam.width : o.gen.n;
    if (n_batch) o.run.ctx.n_seq_max = n_batch * o.gen.n > 64 ? 64 : n_batch * o.gen.n;
    nu_model *model = NULL;
    nu_context *ctx = NULL;
    nu_grammar *grammar = NULL;
    if ((rc = cli_open(&o.run, &model, &ctx)) == 0 &&
        (rc = cli_make_grammar(&o.run, model, &grammar)) == 0) {
        o.gen.grammar = grammar;
        rc = n_batch ? run_batch(&o, ctx, batch, n_batch) : run(&o, ctx, file_text ? file_text : o.prompt);
    }
    if (model) {
        nu_grammar_free(grammar);
        nu_context_free(ctx);
        nu_model_free(model);
    }
    free(file_text);
    return rc;
}
