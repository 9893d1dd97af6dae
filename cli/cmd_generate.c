/* cmd_generate.c - `nucleus generate`: continue a prompt, streaming text to
 * stdout as it is produced, with a summary on stderr. Also n samples,
 * best-of-n, self-consistency, beam search, log-probs and JSON output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_json.h"
#include "cli_options.h"

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
    bool best_of, consistency; /* --best-of / --self-consistency given */
    bool summary, json, use_beam;
} generate_opts;

static int run_generate(int argc, char **argv);

static const cli_option prompt_options[] = {
    {.name = "--prompt",
     .short_name = "-p",
     .kind = CLI_STRING,
     .field = CLI_FIELD(generate_opts, prompt),
     .placeholder = "TEXT",
     .help = "the prompt"},
    {.name = "--file",
     .short_name = "-f",
     .kind = CLI_STRING,
     .field = CLI_FIELD(generate_opts, prompt_file),
     .placeholder = "FILE",
     .help = "read the prompt from a file"},
    {.name = "--prompts",
     .kind = CLI_STRING,
     .field = CLI_FIELD(generate_opts, prompts_file),
     .placeholder = "FILE",
     .help = "a batch: one prompt per line, generated together (at most 64)"},
    {.name = "--special",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(generate_opts, gen.parse_special),
     .help = "special-token text in the prompt (e.g. <s>) becomes its token"},
    {.name = "--no-bos",
     .kind = CLI_UNSET,
     .field = CLI_FIELD(generate_opts, gen.add_bos),
     .help = "do not add the BOS token the model asks for"},
    {0},
};

static const cli_option output_options[] = {
    {.name = "--n-predict",
     .short_name = "-n",
     .kind = CLI_INT,
     .field = CLI_FIELD(generate_opts, gen.n_predict),
     .min = -1,
     .max = 1 << 30,
     .placeholder = "N",
     .help = "most tokens to generate; -1 runs to EOS or the context end"},
    {.name = "--echo",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(generate_opts, gen.echo),
     .help = "print the prompt before the continuation"},
    {.name = "--stop",
     .kind = CLI_STRING,
     CLI_LIST(generate_opts, stop, gen.n_stop),
     .placeholder = "TEXT",
     .help = "stop before TEXT (matched across tokens)"},
    {.name = "--stop-token",
     .kind = CLI_INT,
     CLI_LIST(generate_opts, stop_tokens, gen.n_stop_tokens),
     .min = 0,
     .max = 1 << 30,
     .placeholder = "ID",
     .help = "stop at this token id"},
    {.name = "--include-stop",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(generate_opts, gen.include_stop),
     .help = "keep the matched stop text in the output"},
    {.name = "--logprobs",
     .kind = CLI_INT,
     .field = CLI_FIELD(generate_opts, gen.logprobs),
     .min = 0,
     .max = NU_MAX_TOP_LOGPROBS,
     .placeholder = "N",
     .help = "record each token's log-prob and N alternatives",
     .default_text = "none"},
    {.name = "--logprobs-after-chain",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(generate_opts, gen.logprobs_after_chain),
     .help = "log-probs of the distribution the sampler chain leaves"},
    {.name = "--json-output",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(generate_opts, json),
     .help = "print the result(s) as JSON lines instead of text"},
    {.name = "--no-summary",
     .kind = CLI_UNSET,
     .field = CLI_FIELD(generate_opts, summary),
     .help = "no summary on stderr"},
    {0},
};

static const cli_option samples_options[] = {
    {.name = "--samples",
     .kind = CLI_INT,
     .field = CLI_FIELD(generate_opts, gen.n),
     .min = 1,
     .max = 64,
     .placeholder = "N",
     .help = "draw N samples of the prompt, sharing its cache"},
    {.name = "--best-of",
     .kind = CLI_INT,
     .field = CLI_FIELD(generate_opts, gen.n),
     .min = 1,
     .max = 64,
     .given = CLI_FIELD(generate_opts, best_of),
     .placeholder = "N",
     .help = "draw N samples and print the one with the highest total log-prob",
     .no_default = true},
    {.name = "--self-consistency",
     .kind = CLI_INT,
     .field = CLI_FIELD(generate_opts, gen.n),
     .min = 1,
     .max = 64,
     .given = CLI_FIELD(generate_opts, consistency),
     .placeholder = "N",
     .help = "draw N samples and print the majority answer",
     .no_default = true},
    {.name = "--answer-regex",
     .kind = CLI_STRING,
     .field = CLI_FIELD(generate_opts, answer_regex),
     .placeholder = "RE",
     .help = "what an answer is (POSIX ERE)",
     .default_text = "the last number"},
    {.name = "--beam",
     .kind = CLI_INT,
     .field = CLI_FIELD(generate_opts, beam.width),
     .min = 1,
     .max = 32,
     .given = CLI_FIELD(generate_opts, use_beam),
     .placeholder = "W",
     .help = "beam search with W beams (deterministic)",
     .no_default = true},
    {.name = "--beam-return",
     .kind = CLI_INT,
     .field = CLI_FIELD(generate_opts, beam.n_return),
     .min = 1,
     .max = 32,
     .placeholder = "N",
     .help = "hypotheses to print"},
    {.name = "--length-penalty",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(generate_opts, beam.length_penalty),
     .fmin = -10,
     .fmax = 10,
     .placeholder = "A",
     .help = "beam score = log-prob / length^A"},
    {.name = "--early-stopping",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(generate_opts, beam.early_stopping),
     .help = "stop beam search once W hypotheses are finished"},
    {0},
};

static const cli_option speculative_options[] = {
    {.name = "--draft",
     .kind = CLI_STRING,
     .field = CLI_FIELD(generate_opts, draft_model),
     .placeholder = "MODEL",
     .help = "speculative decoding with this draft model (same vocabulary)"},
    {.name = "--lookup",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(generate_opts, spec.lookup),
     .help = "speculative decoding with prompt lookup (no draft model)"},
    {.name = "--draft-max",
     .kind = CLI_INT,
     .field = CLI_FIELD(generate_opts, spec.draft_max),
     .min = 1,
     .max = 64,
     .placeholder = "K",
     .help = "most tokens proposed per pass"},
    {.name = "--draft-min",
     .kind = CLI_INT,
     .field = CLI_FIELD(generate_opts, spec.draft_min),
     .min = 1,
     .max = 64,
     .placeholder = "K",
     .help = "fewest tokens proposed per pass"},
    {.name = "--draft-fixed",
     .kind = CLI_UNSET,
     .field = CLI_FIELD(generate_opts, spec.adaptive),
     .help = "keep the draft length at --draft-max (no adaptation)"},
    {0},
};

static const cli_section generate_sections[] = {
    CLI_OWN_SECTION(NULL, prompt_options),
    CLI_OWN_SECTION("output", output_options),
    CLI_OWN_SECTION("several samples, best-of, self-consistency, beam search", samples_options),
    CLI_OWN_SECTION("speculative decoding", speculative_options),
    CLI_RUN_SECTIONS(generate_opts, run),
    CLI_GRAMMAR_SECTION(generate_opts, run),
    {0},
};

const cli_command generate_command = {
    .name = "generate",
    .summary = "continue a prompt, streaming the text",
    .usage = "nucleus generate -m MODEL (-p PROMPT | -f FILE | --prompts FILE) [options]",
    .sections = generate_sections,
    .run = run_generate,
};

static bool write_text(void *user, int32_t index, const char *text, size_t len) {
    (void)user, (void)index;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* Reads the options; false when the command ends (*rc: help or an error). */
static bool parse(generate_opts *o, int argc, char **argv, int *rc) {
    if (!cli_parse(&generate_command, argc, argv, o, rc)) return false;
    if (!!o->prompt + !!o->prompt_file + !!o->prompts_file != 1) {
        cli_error("give the prompt with exactly one of -p TEXT, -f FILE or --prompts FILE");
        *rc = CLI_EXIT_USAGE;
        return false;
    }
    o->beam.parse_special = o->gen.parse_special;
    o->beam.add_bos = o->gen.add_bos;
    return true;
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
        if (o->summary && !o->use_beam)
            print_summary(&r[i]);
        else
            putchar('\n');
    }
}

/* best-of and self-consistency: pick one sample of n and say why. */
static int pick_one(const generate_opts *o, const nu_model *m, nu_generate_result *r) {
    int32_t n = o->gen.n, index = nu_best_of(r, n), votes = 0;
    char answer[256] = "";
    if (o->consistency) {
        nu_error err;
        if (nu_majority_answer(r, n, o->answer_regex, answer, sizeof answer, &votes, &index,
                               &err)) {
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
            fprintf(stderr,
                    "speculative (%s): %lld proposed, %lld accepted (%.1f%%), %lld target "
                    "passes, %.2f tokens per target pass\n",
                    o->draft_model ? "draft model" : "prompt lookup", (long long)stats.drafted,
                    (long long)stats.accepted,
                    stats.drafted ? 100.0 * (double)stats.accepted / (double)stats.drafted : 0.0,
                    (long long)stats.target_passes,
                    stats.target_passes ? (double)r.n_generated / (double)stats.target_passes
                                        : 0.0);
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
        if (o->json)
            json_result(stdout, nu_context_model(ctx), &r[i]);
        else
            printf("%s--- prompt %d (%d tokens, %s) ---\n%s\n", i ? "\n" : "", i, r[i].n_generated,
                   nu_finish_reason_name(r[i].finish), r[i].text);
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
    if (o->best_of || o->consistency)
        rc = pick_one(o, m, r);
    else
        print_results(o, m, r, n, stream);
    for (int32_t i = 0; i < n; i++) nu_generate_result_free(&r[i]);
    return rc;
}

static int run_generate(int argc, char **argv) {
    generate_opts o = {.gen = nu_generate_default_params(),
                       .beam = nu_beam_default_params(),
                       .spec = nu_speculative_default_params(),
                       .summary = true};
    cli_run_opts_init(&o.run);
    int rc;
    if (!parse(&o, argc, argv, &rc)) return rc;
    if (o.use_beam && o.run.sampling.watermark.key) {
        /* beam search ranks continuations by the model's own log-probs and
         * draws nothing: there is no sampling step for the watermark */
        cli_error("--watermark cannot be combined with --beam (use sampling or greedy decoding)");
        return 2;
    }
    if (o.use_beam && (o.run.sampling.n_banned_strings || o.run.sampling.n_banned_tokens)) {
        cli_error("--ban and --ban-tokens cannot be combined with --beam, which draws nothing "
                  "(use sampling or greedy decoding)");
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
        rc = n_batch ? run_batch(&o, ctx, batch, n_batch)
                     : run(&o, ctx, file_text ? file_text : o.prompt);
    }
    if (model) {
        nu_grammar_free(grammar);
        nu_context_free(ctx);
        nu_model_free(model);
    }
    free(file_text);
    return rc;
}
