/* cmd_score.c - `nucleus score bleu | rouge`: text metrics of hypotheses
 * against references, one segment per line, as the reference tools compute
 * them (nu_bleu_*, nu_rouge*). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_json.h"

#define SCORE_MAX_REFS 16
#define SCORE_MAX_TYPES 16

typedef struct score_opts {
    const char *hyp;
    const char *refs[SCORE_MAX_REFS];
    int n_refs;
    bool json, sentence;
    long width;
    /* bleu */
    unsigned flavor;
    int tokenizer; /* -1: the flavor's default */
    int smooth;    /* -1: the flavor's default */
    double smooth_value;
    long max_order;
    bool lowercase, effective_order, auto_reweigh;
    double weights[NU_BLEU_MAX_ORDER];
    int n_weights;
    /* rouge */
    const char *types;
    bool stemmer, whole_file;
    long bootstrap;
    double confidence;
    long long seed;
} score_opts;

static int run_score(int argc, char **argv);
static int run_bleu(int argc, char **argv);
static int run_rouge(int argc, char **argv);

static const cli_option io_options[] = {
    {.name = "--hyp",
     .short_name = "-i",
     .kind = CLI_STRING,
     .field = CLI_FIELD(score_opts, hyp),
     .placeholder = "FILE",
     .help = "the hypotheses, one segment per line (- reads standard input)"},
    {.name = "--ref",
     .short_name = "-r",
     .kind = CLI_STRING,
     CLI_LIST(score_opts, refs, n_refs),
     .placeholder = "FILE",
     .help = "a reference stream, one segment per line (repeat for several references)"},
    {.name = "--sentence",
     .alias = "--sentence-level",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(score_opts, sentence),
     .help = "one score per line instead of the corpus score"},
    {.name = "--json",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(score_opts, json),
     .help = "JSON on stdout (one object; one per line with --sentence)"},
    {.name = "--width",
     .short_name = "-w",
     .kind = CLI_INT,
     .field = CLI_FIELD(score_opts, width),
     .min = 0,
     .max = 17,
     .placeholder = "N",
     .help = "decimals of the scores printed",
     .default_text = "bleu: 2 for sacreBLEU's 0-100 scale, 4 for NLTK's 0-1; rouge: 5"},
    {0},
};

static const cli_choice flavor_choices[] = {
    {"sacrebleu", NU_BLEU_SACREBLEU}, {"nltk", NU_BLEU_NLTK}, {NULL, 0}};
static const cli_choice tokenizer_choices[] = {
    {"13a", NU_BLEU_TOK_13A},   {"intl", NU_BLEU_TOK_INTL}, {"zh", NU_BLEU_TOK_ZH},
    {"char", NU_BLEU_TOK_CHAR}, {"none", NU_BLEU_TOK_NONE}, {NULL, 0}};
static const cli_choice smooth_choices[] = {{"exp", NU_BLEU_SMOOTH_EXP},
                                            {"floor", NU_BLEU_SMOOTH_FLOOR},
                                            {"add-k", NU_BLEU_SMOOTH_ADD_K},
                                            {"none", NU_BLEU_SMOOTH_NONE},
                                            {"method0", NU_BLEU_NLTK_METHOD0},
                                            {"method1", NU_BLEU_NLTK_METHOD1},
                                            {"method2", NU_BLEU_NLTK_METHOD2},
                                            {"method3", NU_BLEU_NLTK_METHOD3},
                                            {"method4", NU_BLEU_NLTK_METHOD4},
                                            {"method5", NU_BLEU_NLTK_METHOD5},
                                            {"method6", NU_BLEU_NLTK_METHOD6},
                                            {"method7", NU_BLEU_NLTK_METHOD7},
                                            {NULL, 0}};

/* One weight of a comma-separated list: "0.25,0.25" fills weights. */
static bool parse_weights(void *target, const char *value, char *why, size_t cap) {
    score_opts *o = (score_opts *)((char *)target - offsetof(score_opts, weights));
    o->n_weights = 0;
    const char *s = value;
    while (*s) {
        if (o->n_weights == NU_BLEU_MAX_ORDER) {
            snprintf(why, cap, "takes at most %d weights", NU_BLEU_MAX_ORDER);
            return false;
        }
        char *end;
        errno = 0;
        double w = strtod(s, &end);
        if (end == s || errno || !isfinite(w) || (*end && *end != ',')) {
            snprintf(why, cap, "wants comma-separated numbers, not '%s'", value);
            return false;
        }
        o->weights[o->n_weights++] = w;
        s = *end ? end + 1 : end;
        if (*end && !*s) {
            snprintf(why, cap, "ends with a comma");
            return false;
        }
    }
    if (o->n_weights == 0) {
        snprintf(why, cap, "wants at least one weight");
        return false;
    }
    return true;
}

static const cli_option bleu_options[] = {
    {.name = "--flavor",
     .kind = CLI_ENUM,
     .field = CLI_FIELD(score_opts, flavor),
     .choices = flavor_choices,
     .placeholder = "NAME",
     .help = "whose BLEU: sacrebleu (sacreBLEU 2.x) or nltk (nltk.translate.bleu_score)"},
    {.name = "--tokenize",
     .short_name = "-tok",
     .kind = CLI_ENUM,
     .field = CLI_FIELD(score_opts, tokenizer),
     .choices = tokenizer_choices,
     .placeholder = "NAME",
     .help = "sacreBLEU's tokenizer: 13a, intl, zh, char or none (whitespace only)",
     .default_text = "13a; none (tokens as given) for nltk"},
    {.name = "--lowercase",
     .short_name = "-lc",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(score_opts, lowercase),
     .help = "lowercase hypotheses and references first"},
    {.name = "--smooth-method",
     .short_name = "-s",
     .alias = "--smooth",
     .kind = CLI_ENUM,
     .field = CLI_FIELD(score_opts, smooth),
     .choices = smooth_choices,
     .placeholder = "NAME",
     .help = "sacreBLEU: exp, floor, add-k or none; nltk: method0 .. method7 "
             "(SmoothingFunction's)",
     .default_text = "exp; method0 for nltk"},
    {.name = "--smooth-value",
     .short_name = "-sv",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(score_opts, smooth_value),
     .fmin = 0,
     .fmax = 1e9,
     .placeholder = "X",
     .help = "floor's value, add-k's k, NLTK method1's epsilon",
     .default_text = "0.1 (floor), 1 (add-k), 0.1 (method1)"},
    {.name = "--max-order",
     .alias = "--max-ngram-order",
     .kind = CLI_INT,
     .field = CLI_FIELD(score_opts, max_order),
     .min = 1,
     .max = NU_BLEU_MAX_ORDER,
     .placeholder = "N",
     .help = "longest n-grams (sacreBLEU)",
     .default_text = "4"},
    {.name = "--effective-order",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(score_opts, effective_order),
     .help = "average only the orders the hypothesis has n-grams of (sacreBLEU; advised with "
             "--sentence)"},
    {.name = "--weights",
     .kind = CLI_CUSTOM,
     .parse = parse_weights,
     .field = CLI_AT(score_opts, weights),
     .placeholder = "LIST",
     .help = "NLTK's weights of orders 1, 2, ..., comma-separated (their count is the order)",
     .default_text = "0.25,0.25,0.25,0.25"},
    {.name = "--auto-reweigh",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(score_opts, auto_reweigh),
     .help = "NLTK's auto_reweigh: uniform weights when the hypotheses have fewer than 4 tokens"},
    {0},
};

static const cli_section bleu_sections[] = {
    CLI_OWN_SECTION(NULL, io_options),
    CLI_OWN_SECTION("BLEU", bleu_options),
    {0},
};

static const cli_command bleu_command = {
    .name = "score bleu",
    .summary = "BLEU of hypotheses against references, as sacreBLEU or NLTK computes it",
    .usage = "nucleus score bleu --hyp FILE --ref FILE [--ref FILE ...] [options]",
    .about =
        "Corpus BLEU (or one score per line with --sentence) of the hypotheses against one or\n"
        "more reference streams, line i of each file being segment i.\n"
        "\n"
        "sacrebleu (the default) follows sacreBLEU 2.x: its tokenizers, smoothing methods and\n"
        "signature; the score is 0-100 and prints as sacreBLEU's text format:\n"
        "  BLEU|SIGNATURE = SCORE P1/P2/P3/P4 (BP = .. ratio = .. hyp_len = .. ref_len = ..)\n"
        "(the signature's version names nucleus). nltk follows nltk.translate.bleu_score's\n"
        "corpus_bleu / sentence_bleu on whitespace tokens: 0-1, --weights, method0..method7.\n",
    .sections = bleu_sections,
    .run = run_bleu,
};

static const cli_option rouge_options[] = {
    {.name = "--types",
     .kind = CLI_STRING,
     .field = CLI_FIELD(score_opts, types),
     .nonempty = true,
     .placeholder = "LIST",
     .help = "comma-separated: rouge1 .. rouge9, rougeL, rougeLsum",
     .default_text = "rouge1,rouge2,rougeL,rougeLsum"},
    {.name = "--stemmer",
     .alias = "--use-stemmer",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(score_opts, stemmer),
     .help = "stem tokens longer than 3 letters with NLTK's Porter stemmer, as rouge-score's "
             "use_stemmer"},
    {.name = "--whole-file",
     .kind = CLI_FLAG,
     .field = CLI_FIELD(score_opts, whole_file),
     .help = "score each file as one text (its lines are rougeLsum's sentences) instead of line "
             "by line"},
    {.name = "--bootstrap",
     .kind = CLI_INT,
     .field = CLI_FIELD(score_opts, bootstrap),
     .min = 1,
     .max = 1000000,
     .placeholder = "N",
     .help = "resamples of the confidence intervals (rouge-score's BootstrapAggregator)"},
    {.name = "--confidence",
     .kind = CLI_FLOAT,
     .field = CLI_FIELD(score_opts, confidence),
     .fmin = 0,
     .fmax = 1,
     .placeholder = "X",
     .help = "the intervals' confidence"},
    {.name = "--seed",
     .kind = CLI_INT,
     .field = CLI_FIELD(score_opts, seed),
     .min = 0,
     .max = INT64_MAX,
     .placeholder = "N",
     .help = "seed of the resampling"},
    {0},
};

static const cli_section rouge_sections[] = {
    CLI_OWN_SECTION(NULL, io_options),
    CLI_OWN_SECTION("ROUGE", rouge_options),
    {0},
};

static const cli_command rouge_command = {
    .name = "score rouge",
    .summary = "ROUGE of hypotheses against references, as Google's rouge-score computes it",
    .usage = "nucleus score rouge --hyp FILE --ref FILE [--ref FILE ...] [options]",
    .about =
        "Precision, recall and F-measure of each ROUGE type, as rouge-score's RougeScorer\n"
        "computes them: its tokenizer (lowercase, runs of a-z0-9), --stemmer (NLTK's Porter),\n"
        "the best reference per hypothesis by F-measure. Line i of each file is segment i; the\n"
        "figures printed are the means over the segments with rouge-score's bootstrap\n"
        "confidence intervals (low - high), or with --sentence each line's scores. With\n"
        "--whole-file each file is one text whose lines are rougeLsum's sentences.\n",
    .sections = rouge_sections,
    .run = run_rouge,
};

static const cli_command *const score_subcommands[] = {&bleu_command, &rouge_command, NULL};

const cli_command score_command = {
    .name = "score",
    .summary = "text metrics of hypotheses against references (BLEU, ROUGE)",
    .usage = "nucleus score (bleu | rouge) [options]   (nucleus score bleu --help ...)",
    .subcommands = score_subcommands,
    .run = run_score,
};

static int run_score(int argc, char **argv) {
    int rc = cli_dispatch(&score_command, argc, argv, NULL);
    if (rc != CLI_NO_SUBCOMMAND) return rc;
    cli_error("score needs a metric: bleu or rouge (see nucleus score --help)");
    return CLI_EXIT_USAGE;
}

/* ---- reading the streams -------------------------------------------------- */

/* A file's lines, NUL-terminated in place ('\n' ends a line; a last line
 * without one counts). */
typedef struct lines {
    char *text;
    char **line;
    size_t n;
} lines;

static void lines_free(lines *l) {
    free(l->text);
    free(l->line);
    *l = (lines){0};
}

static bool lines_read(const char *path, lines *l) {
    size_t len = 0;
    *l = (lines){0};
    if (!(l->text = cli_read_file(path, &len))) return false;
    if (memchr(l->text, 0, len)) {
        cli_error("%s holds a NUL byte: not a text of lines", path);
        lines_free(l);
        return false;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += l->text[i] == '\n';
    if (len && l->text[len - 1] != '\n') n++;
    l->line = malloc((n + 1) * sizeof *l->line);
    if (!l->line) {
        cli_error("out of memory");
        lines_free(l);
        return false;
    }
    char *s = l->text;
    for (size_t k = 0; k < n; k++) {
        char *nl = strchr(s, '\n');
        if (nl) *nl = 0;
        l->line[k] = s;
        s = nl ? nl + 1 : s + strlen(s);
    }
    l->n = n;
    return true;
}

/* The hypotheses and every reference stream, all of one length. */
static bool streams_read(const score_opts *o, lines *hyp, lines *refs) {
    if (!lines_read(o->hyp, hyp)) return false;
    for (int r = 0; r < o->n_refs; r++) {
        if (!lines_read(o->refs[r], &refs[r])) return false;
        if (refs[r].n != hyp->n) {
            cli_error("%s has %zu lines but the hypotheses (%s) have %zu", o->refs[r], refs[r].n,
                      o->hyp, hyp->n);
            return false;
        }
    }
    return true;
}

/* ---- bleu ----------------------------------------------------------------- */

static void print_bleu_text(const score_opts *o, const nu_bleu_params *p, const nu_bleu_result *r,
                            const char *signature) {
    const int w = (int)o->width;
    if (p->flavor == NU_BLEU_NLTK) {
        printf("BLEU (nltk) = %.*f p = ", w, r->score);
        for (int i = 0; i < r->order; i++) printf("%s%.4f", i ? "/" : "", r->precisions[i]);
    } else {
        printf(signature ? "BLEU|%s = %.*f " : "BLEU%s = %.*f ", signature ? signature : "", w,
               r->score);
        for (int i = 0; i < r->order; i++) printf("%s%.1f", i ? "/" : "", r->precisions[i]);
    }
    printf(" (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)\n", r->bp, r->ratio,
           (long long)r->hyp_len, (long long)r->ref_len);
}

static void print_bleu_json(const nu_bleu_params *p, const nu_bleu_result *r,
                            const nu_bleu_stats *s, const char *signature) {
    printf("{\"name\": \"BLEU\", \"flavor\": \"%s\", \"score\": ",
           p->flavor == NU_BLEU_NLTK ? "nltk" : "sacrebleu");
    json_number(stdout, r->score);
    if (signature) {
        printf(", \"signature\": ");
        json_string(stdout, signature, strlen(signature));
    }
    printf(", \"precisions\": [");
    for (int i = 0; i < r->order; i++) {
        printf(i ? ", " : "");
        json_number(stdout, r->precisions[i]);
    }
    printf("], \"counts\": [");
    for (int i = 0; i < r->order; i++) printf("%s%lld", i ? ", " : "", (long long)s->correct[i]);
    printf("], \"totals\": [");
    for (int i = 0; i < r->order; i++) printf("%s%lld", i ? ", " : "", (long long)s->total[i]);
    printf("], \"bp\": ");
    json_number(stdout, r->bp);
    printf(", \"ratio\": ");
    json_number(stdout, r->ratio);
    printf(", \"hyp_len\": %lld, \"ref_len\": %lld}\n", (long long)r->hyp_len,
           (long long)r->ref_len);
}

/* The library's parameters from the options; false after an error. */
static bool bleu_params(const score_opts *o, nu_bleu_params *p) {
    *p = nu_bleu_default_params((nu_bleu_flavor)o->flavor);
    if (o->tokenizer >= 0) p->tokenizer = (nu_bleu_tokenizer)o->tokenizer;
    if (o->smooth >= 0) p->smooth = (nu_bleu_smooth)o->smooth;
    const bool nltk_method = p->smooth >= NU_BLEU_NLTK_METHOD0;
    if (nltk_method != (p->flavor == NU_BLEU_NLTK)) {
        cli_error("--smooth-method %s", p->flavor == NU_BLEU_NLTK
                                            ? "for --flavor nltk is one of method0 .. method7"
                                            : "method0 .. method7 needs --flavor nltk");
        return false;
    }
    if (p->flavor == NU_BLEU_NLTK && (o->max_order || o->effective_order)) {
        cli_error("--max-order and --effective-order are sacreBLEU's (nltk: --weights)");
        return false;
    }
    if (p->flavor == NU_BLEU_SACREBLEU && (o->n_weights || o->auto_reweigh)) {
        cli_error("--weights and --auto-reweigh are NLTK's (--flavor nltk)");
        return false;
    }
    p->lowercase = o->lowercase;
    p->smooth_value = o->smooth_value;
    if (o->max_order) p->max_order = (int32_t)o->max_order;
    p->effective_order = o->effective_order;
    p->n_weights = o->n_weights;
    memcpy(p->weights, o->weights, sizeof p->weights);
    p->auto_reweigh = o->auto_reweigh;
    return true;
}

static int run_bleu(int argc, char **argv) {
    score_opts o = {.width = -1, .tokenizer = -1, .smooth = -1, .smooth_value = -1};
    int rc;
    if (!cli_parse(&bleu_command, argc, argv, &o, &rc)) return rc;
    nu_bleu_params p;
    if (!bleu_params(&o, &p)) return CLI_EXIT_USAGE;
    if (!o.hyp || o.n_refs == 0) {
        cli_error("give the hypotheses (--hyp FILE) and at least one --ref FILE");
        return CLI_EXIT_USAGE;
    }
    if (o.width < 0) o.width = p.flavor == NU_BLEU_NLTK ? 4 : 2;
    lines hyp = {0}, refs[SCORE_MAX_REFS] = {{0}};
    rc = 1;
    const char **seg_refs = malloc(SCORE_MAX_REFS * sizeof *seg_refs);
    nu_bleu_stats sum = {0}, seg;
    nu_bleu_result r;
    nu_error err;
    nu_status st = NU_OK;
    if (!seg_refs || !streams_read(&o, &hyp, refs)) goto done;
    for (size_t i = 0; i < hyp.n && st == NU_OK; i++) {
        for (int k = 0; k < o.n_refs; k++) seg_refs[k] = refs[k].line[i];
        st = nu_bleu_segment(&p, hyp.line[i], seg_refs, o.n_refs, &seg, &err);
        if (st == NU_OK && o.sentence) st = nu_bleu_compute(&p, &seg, &r, &err);
        if (st) {
            cli_error("line %zu: %s", i + 1, err.message);
            goto done;
        }
        if (o.sentence && o.json)
            print_bleu_json(&p, &r, &seg, NULL);
        else if (o.sentence)
            print_bleu_text(&o, &p, &r, NULL);
        nu_bleu_stats_add(&sum, &seg);
    }
    char signature[256];
    if (p.flavor == NU_BLEU_SACREBLEU &&
        (st = nu_bleu_signature(&p, &sum, signature, sizeof signature, &err)) != NU_OK) {
        cli_error("%s", err.message);
        goto done;
    }
    const char *sig = p.flavor == NU_BLEU_SACREBLEU ? signature : NULL;
    if (o.sentence) {
        if (sig && !o.json) printf("signature: %s\n", sig);
    } else if ((st = nu_bleu_compute(&p, &sum, &r, &err)) != NU_OK) {
        cli_error("%s", err.message);
        goto done;
    } else if (o.json) {
        print_bleu_json(&p, &r, &sum, sig);
    } else {
        print_bleu_text(&o, &p, &r, sig);
    }
    rc = 0;
done:
    free(seg_refs);
    lines_free(&hyp);
    for (int k = 0; k < SCORE_MAX_REFS; k++) lines_free(&refs[k]);
    return rc;
}

/* ---- rouge ---------------------------------------------------------------- */

static const char *rouge_name(int32_t type, char buf[16]) {
    if (type == NU_ROUGE_L) return "rougeL";
    if (type == NU_ROUGE_LSUM) return "rougeLsum";
    snprintf(buf, 16, "rouge%d", type);
    return buf;
}

/* The --types list; false after an error. */
static bool rouge_types(const char *list, int32_t *types, int32_t *n) {
    char name[32];
    *n = 0;
    for (const char *s = list; *s;) {
        const size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof name) {
            cli_error("--types: '%s' is not a comma-separated list of types", list);
            return false;
        }
        memcpy(name, s, len);
        name[len] = 0;
        nu_error err;
        if (*n == SCORE_MAX_TYPES) {
            cli_error("--types: at most %d types", SCORE_MAX_TYPES);
            return false;
        }
        if (nu_rouge_type(name, &types[*n], &err) != NU_OK) {
            cli_error("--types: %s", err.message);
            return false;
        }
        (*n)++;
        s += len;
        if (*s == ',' && !*++s) {
            cli_error("--types: '%s' ends with a comma", list);
            return false;
        }
    }
    return true;
}

static void print_rouge_score_json(const nu_rouge_score *s) {
    printf("{\"precision\": ");
    json_number(stdout, s->precision);
    printf(", \"recall\": ");
    json_number(stdout, s->recall);
    printf(", \"fmeasure\": ");
    json_number(stdout, s->fmeasure);
    printf("}");
}

/* One line of scores (no intervals), text or JSON. */
static void print_rouge_line(const score_opts *o, const int32_t *types, int32_t n_types,
                             const nu_rouge_score *s) {
    char buf[16];
    const int w = (int)o->width;
    for (int32_t t = 0; t < n_types; t++) {
        const char *name = rouge_name(types[t], buf);
        if (o->json) {
            printf(t ? ", \"%s\": " : "{\"%s\": ", name);
            print_rouge_score_json(&s[t]);
        } else {
            printf("%s%s P %.*f R %.*f F %.*f", t ? "  " : "", name, w, s[t].precision, w,
                   s[t].recall, w, s[t].fmeasure);
        }
    }
    printf(o->json ? "}\n" : "\n");
}

static void print_rouge_intervals(const score_opts *o, const int32_t *types, int32_t n_types,
                                  const nu_rouge_interval *iv, size_t n_segments) {
    char buf[16];
    const int w = (int)o->width;
    if (o->json) printf("{");
    for (int32_t t = 0; t < n_types; t++) {
        const char *name = rouge_name(types[t], buf);
        const nu_rouge_interval *v = &iv[t];
        if (o->json) {
            printf("\"%s\": {\"precision\": ", name);
            json_number(stdout, v->mid.precision);
            printf(", \"recall\": ");
            json_number(stdout, v->mid.recall);
            printf(", \"fmeasure\": ");
            json_number(stdout, v->mid.fmeasure);
            printf(", \"low\": ");
            print_rouge_score_json(&v->low);
            printf(", \"high\": ");
            print_rouge_score_json(&v->high);
            printf("}, ");
        } else {
            printf("%-9s P %.*f (%.*f - %.*f)  R %.*f (%.*f - %.*f)  F %.*f (%.*f - %.*f)\n", name,
                   w, v->mid.precision, w, v->low.precision, w, v->high.precision, w, v->mid.recall,
                   w, v->low.recall, w, v->high.recall, w, v->mid.fmeasure, w, v->low.fmeasure, w,
                   v->high.fmeasure);
        }
    }
    if (o->json)
        printf("\"segments\": %zu, \"bootstrap\": {\"samples\": %ld, \"confidence\": %g, "
               "\"seed\": %lld}}\n",
               n_segments, o->bootstrap, o->confidence, o->seed);
    else
        printf("(%zu segments; mid: the median of %ld bootstrap means, %g%% interval, seed %lld)\n",
               n_segments, o->bootstrap, 100 * o->confidence, o->seed);
}

/* The whole files as one prediction against each reference file. */
static int rouge_whole_files(const score_opts *o, const int32_t *types, int32_t n_types) {
    size_t len;
    char *hyp = cli_read_file(o->hyp, &len);
    char *refs[SCORE_MAX_REFS] = {0};
    int rc = 1;
    if (!hyp) return 1;
    for (int k = 0; k < o->n_refs; k++)
        if (!(refs[k] = cli_read_file(o->refs[k], &len))) goto done;
    nu_rouge_score s[SCORE_MAX_TYPES];
    nu_error err;
    if (nu_rouge(types, n_types, o->stemmer, (const char *const *)refs, o->n_refs, hyp, s, &err) !=
        NU_OK) {
        cli_error("%s", err.message);
        goto done;
    }
    print_rouge_line(o, types, n_types, s);
    rc = 0;
done:
    free(hyp);
    for (int k = 0; k < o->n_refs; k++) free(refs[k]);
    return rc;
}

static int run_rouge(int argc, char **argv) {
    score_opts o = {.width = -1, .bootstrap = 1000, .confidence = 0.95};
    int rc;
    if (!cli_parse(&rouge_command, argc, argv, &o, &rc)) return rc;
    if (o.width < 0) o.width = 5;
    int32_t types[SCORE_MAX_TYPES], n_types;
    if (!rouge_types(o.types ? o.types : "rouge1,rouge2,rougeL,rougeLsum", types, &n_types))
        return CLI_EXIT_USAGE;
    if (!o.hyp || o.n_refs == 0) {
        cli_error("give the hypotheses (--hyp FILE) and at least one --ref FILE");
        return CLI_EXIT_USAGE;
    }
    if (o.whole_file) return rouge_whole_files(&o, types, n_types);
    lines hyp = {0}, refs[SCORE_MAX_REFS] = {{0}};
    nu_rouge_score *scores = NULL, *column = NULL;
    nu_rouge_interval iv[SCORE_MAX_TYPES];
    const char *seg_refs[SCORE_MAX_REFS];
    nu_error err;
    rc = 1;
    if (!streams_read(&o, &hyp, refs)) goto done;
    if (hyp.n == 0) {
        cli_error("%s has no lines to score", o.hyp);
        goto done;
    }
    scores = malloc(hyp.n * (size_t)n_types * sizeof *scores);
    column = malloc(hyp.n * sizeof *column);
    if (!scores || !column) {
        cli_error("out of memory");
        goto done;
    }
    for (size_t i = 0; i < hyp.n; i++) {
        for (int k = 0; k < o.n_refs; k++) seg_refs[k] = refs[k].line[i];
        nu_rouge_score *s = scores + i * (size_t)n_types;
        if (nu_rouge(types, n_types, o.stemmer, seg_refs, o.n_refs, hyp.line[i], s, &err)) {
            cli_error("line %zu: %s", i + 1, err.message);
            goto done;
        }
        if (o.sentence) print_rouge_line(&o, types, n_types, s);
    }
    if (!o.sentence) {
        for (int32_t t = 0; t < n_types; t++) {
            for (size_t i = 0; i < hyp.n; i++) column[i] = scores[i * (size_t)n_types + t];
            if (nu_rouge_bootstrap(column, (int64_t)hyp.n, o.confidence, (int32_t)o.bootstrap,
                                   (uint64_t)o.seed, &iv[t], &err)) {
                cli_error("%s", err.message);
                goto done;
            }
        }
        print_rouge_intervals(&o, types, n_types, iv, hyp.n);
    }
    rc = 0;
done:
    free(scores);
    free(column);
    lines_free(&hyp);
    for (int k = 0; k < SCORE_MAX_REFS; k++) lines_free(&refs[k]);
    return rc;
}
