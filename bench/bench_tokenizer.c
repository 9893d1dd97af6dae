/* bench_tokenizer.c - tokenizing throughput per vocabulary.
 *
 * Tokenizes one text in a single nu_tokenize call (no BOS, special tokens
 * not parsed) and reports MB/s (10^6 bytes of input per second), the median
 * of the repetitions, for each vocabulary file given. The text is read from
 * --text files (concatenated) or, by default, generated deterministically:
 * about 4 MB mixing English prose, C-like code, numbers and dates, accented
 * Latin and Cyrillic words, Chinese, Japanese and Korean, and emoji.
 *
 * Usage: bench_tokenizer [--text FILE]... [--mb N] [--reps N]
 *                        [--write-text FILE] VOCAB.gguf...
 *   --write-text saves the text used, so that another tokenizer (e.g.
 *   llama.cpp through bench/tokenizer_peer.mjs) can be timed on the same bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "nucleus.h"

#define MAX_REPS 101

typedef struct options {
    const char *texts[16];
    int n_texts;
    const char *write_text;
    double mb;
    int reps;
} options;

/* ------------------------------------------------------------------------ */
/* The generated text                                                       */
/* ------------------------------------------------------------------------ */

/* A growing byte buffer. */
typedef struct text_buf {
    char *data;
    size_t len, cap;
} text_buf;

static void put(text_buf *t, const char *s) {
    size_t n = strlen(s);
    if (t->len + n + 1 > t->cap) {
        t->cap = 2 * (t->len + n + 1);
        t->data = realloc(t->data, t->cap);
        if (!t->data) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    memcpy(t->data + t->len, s, n + 1);
    t->len += n;
}

/* A fixed linear congruential generator: the same text on every machine. */
static unsigned next_random(unsigned *state) {
    *state = *state * 1103515245u + 12345u;
    return (*state >> 16) & 0x7FFF;
}

#define PICK(list, st) list[next_random(st) % (sizeof list / sizeof list[0])]

static const char *const english[] = {
    "the",     "of",       "and",          "to",          "in",           "is",         "was",
    "that",    "for",      "it",           "with",        "as",           "his",        "on",
    "be",      "at",       "by",           "had",         "not",          "are",        "but",
    "from",    "or",       "have",         "an",          "they",         "which",      "one",
    "you",     "were",     "her",          "all",         "she",          "there",      "would",
    "their",   "we",       "him",          "been",        "has",          "when",       "who",
    "will",    "more",     "no",           "if",          "out",          "so",         "said",
    "what",    "up",       "its",          "about",       "into",         "than",       "them",
    "can",     "only",     "other",        "new",         "some",         "could",      "time",
    "these",   "two",      "may",          "then",        "do",           "first",      "any",
    "my",      "now",      "such",         "like",        "our",          "over",       "man",
    "me",      "even",     "most",         "made",        "after",        "also",       "did",
    "many",    "before",   "must",         "through",     "back",         "years",      "where",
    "much",    "your",     "way",          "well",        "down",         "should",     "because",
    "each",    "just",     "those",        "people",      "how",          "too",        "little",
    "state",   "good",     "very",         "make",        "world",        "still",      "own",
    "see",     "men",      "work",         "long",        "get",          "here",       "between",
    "both",    "life",     "being",        "under",       "never",        "day",        "same",
    "another", "know",     "while",        "last",        "might",        "us",         "great",
    "old",     "year",     "off",          "come",        "since",        "against",    "go",
    "came",    "right",    "used",         "take",        "three",        "tokenizer",  "language",
    "models",  "generate", "sampling",     "probability", "distribution", "vocabulary", "sentence",
    "merges",  "quickly",  "unbelievable", "don't",       "we're",        "it's",       "they'll",
    "I'd",     "you've",
};

static const char *const punctuation[] = {".",   ",",  ";", ":", "!", "?", " -", " (see above)",
                                          "...", "\"", "'"};

static const char *const code_lines[] = {
    "for (int i = 0; i < n; i++) {",
    "    total += values[i] * weights[i];",
    "}",
    "if (ptr == NULL) return NU_ERR_NOMEM;",
    "static const char *names[] = {\"alpha\", \"beta\", \"gamma\"};",
    "def tokenize(self, text: str) -> list[int]:",
    "    return [self.vocab[w] for w in text.split()]",
    "const result = await fetch(`${base}/v1/completions`, { method: 'POST' });",
    "#include <stdio.h>",
    "    x = (a + b) / 2.0f; // midpoint",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "\tmemcpy(dst + offset, src, len * sizeof(uint32_t));",
    "while ((c = getchar()) != EOF) counts[c]++;",
    "    }",
    "        raise ValueError(f\"bad value: {value!r}\")",
};

static const char *const numbers[] = {
    "3.14159", "2024-01-15", "1,234,567", "42",      "0x7fff",  "1e-9", "99.5%",
    "12:30",   "$19.99",     "100000",    "2.71828", "-273.15", "7",    "365",
};

static const char *const foreign[] = {
    "Führer",    "café",   "naïve", "résumé", "Straße", "Cửa Việt",  "нещо",         "на",
    "Български", "привет", "мир",   "Ελλάδα", "λόγος",  "árvíztűrő", "tükörfúrógép", "jalapeño",
};

static const char *const cjk[] = {
    "我想在apple工作",
    "天气",
    "你好",
    "世界",
    "的",
    "是",
    "在",
    "中文",
    "模型",
    "语言",
    "こんにちは",
    "ありがとう",
    "東京",
    "日本語",
    "カタカナ",
    "안녕하세요",
    "한국어",
    "～",
    "。",
    "、",
};

static const char *const emoji[] = {
    "🦙", "🚀", "😁", "✅", "😶‍🌫️", "👍🏽", "🇫🇷", "❤️", "🎉", "🤖",
};

/* One sentence of prose with the occasional number, foreign word, CJK or emoji. */
static void put_sentence(text_buf *t, unsigned *st) {
    int n = 5 + (int)(next_random(st) % 15);
    for (int i = 0; i < n; i++) {
        unsigned r = next_random(st) % 100;
        if (i > 0) put(t, " ");
        const char *w = r < 80   ? PICK(english, st)
                        : r < 86 ? PICK(numbers, st)
                        : r < 92 ? PICK(foreign, st)
                        : r < 97 ? PICK(cjk, st)
                                 : PICK(emoji, st);
        if (i == 0 && w[0] >= 'a' && w[0] <= 'z') {
            char cap[64];
            snprintf(cap, sizeof cap, "%c%s", w[0] - 'a' + 'A', w + 1);
            put(t, cap);
        } else {
            put(t, w);
        }
        if (next_random(st) % 12 == 0) put(t, PICK(punctuation, st));
    }
    put(t, ".");
}

/* About mb * 10^6 bytes of mixed text: prose paragraphs, code blocks,
 * and paragraphs of Chinese, Japanese and Korean. */
static text_buf generate_text(double mb) {
    text_buf t = {0};
    unsigned st = 12345;
    while ((double)t.len < mb * 1e6) {
        unsigned kind = next_random(&st) % 10;
        if (kind < 6) {
            int n = 2 + (int)(next_random(&st) % 6);
            for (int i = 0; i < n; i++) {
                if (i) put(&t, " ");
                put_sentence(&t, &st);
            }
        } else if (kind < 9) {
            int n = 3 + (int)(next_random(&st) % 12);
            for (int i = 0; i < n; i++) {
                put(&t, PICK(code_lines, &st));
                put(&t, "\n");
            }
        } else {
            int n = 10 + (int)(next_random(&st) % 30);
            for (int i = 0; i < n; i++) put(&t, PICK(cjk, &st));
        }
        put(&t, "\n\n");
    }
    return t;
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                   */
/* ------------------------------------------------------------------------ */

static bool read_file(const char *path, text_buf *t) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk - 1, f)) > 0) {
        chunk[n] = 0;
        if (memchr(chunk, 0, n)) {
            fprintf(stderr, "%s: NUL bytes are not supported here\n", path);
            fclose(f);
            return false;
        }
        put(t, chunk);
    }
    fclose(f);
    return true;
}

/* Times the tokenizing of text with one vocabulary; prints a line. */
static int bench_vocab(const char *path, const text_buf *text, int reps) {
    nu_model_params params = nu_model_default_params();
    params.mode = NU_LOAD_VOCAB_ONLY;
    nu_model *m = NULL;
    nu_error err;
    if (nu_model_load(path, &params, &m, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.message);
        return 1;
    }
    size_t cap = text->len + 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    double mbs[MAX_REPS];
    int status = ids ? 0 : 1;
    for (int r = 0; !status && r < reps; r++) {
        double t0 = now_s();
        if (nu_tokenize(m, text->data, text->len, 0, ids, cap, &n, &err)) {
            fprintf(stderr, "%s: %s\n", path, err.message);
            status = 1;
        }
        mbs[r] = (double)text->len / 1e6 / (now_s() - t0);
    }
    if (!status) {
        const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        double med = median(mbs, reps);
        printf("%-34s %8.2f MB/s  (median of %d; %zu bytes -> %zu tokens, %.2f bytes/token)\n",
               name, med, reps, text->len, n, (double)text->len / (double)n);
    }
    const char *warning = nu_model_warning(m);
    if (warning) fprintf(stderr, "%s: warning: %s\n", path, warning);
    free(ids);
    nu_model_free(m);
    return status;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_tokenizer [--text FILE]... [--mb N] [--reps N] "
                    "[--write-text FILE] VOCAB.gguf...\n");
    return 2;
}

int main(int argc, char **argv) {
    options o = {.mb = 4, .reps = 5};
    int first_vocab = argc;
    for (int i = 1; i < argc; i++) {
        bool more = i + 1 < argc;
        if (!strcmp(argv[i], "--text") && more && o.n_texts < 16)
            o.texts[o.n_texts++] = argv[++i];
        else if (!strcmp(argv[i], "--mb") && more)
            o.mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && more)
            o.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--write-text") && more)
            o.write_text = argv[++i];
        else if (argv[i][0] == '-')
            return usage();
        else {
            first_vocab = i;
            break;
        }
    }
    if (o.reps < 1 || o.reps > MAX_REPS || o.mb <= 0) return usage();
    text_buf text = {0};
    for (int i = 0; i < o.n_texts; i++) {
        if (!read_file(o.texts[i], &text)) {
            fprintf(stderr, "cannot read %s\n", o.texts[i]);
            return 1;
        }
    }
    if (o.n_texts == 0) text = generate_text(o.mb);
    if (o.write_text) {
        FILE *f = fopen(o.write_text, "wb");
        if (!f || fwrite(text.data, 1, text.len, f) != text.len || fclose(f)) {
            fprintf(stderr, "cannot write %s\n", o.write_text);
            return 1;
        }
    }
    int status = 0;
    for (int i = first_vocab; i < argc; i++) status |= bench_vocab(argv[i], &text, o.reps);
    free(text.data);
    return status;
}
