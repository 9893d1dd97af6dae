/* pretokenize.c - the pre-tokenizers of byte-level BPE vocabularies.
 *
 * Each family is the sequence of stages its Hugging Face tokenizer.json
 * describes. A "Split" stage with a regex (behaviour "Isolated") makes every
 * match a piece and every stretch between matches a piece too; the regex
 * sees only the piece it cuts, so lookaheads and "$" stop at its end.
 * "ByteLevel" with use_regex is a split with GPT-2's pattern; "Digits" is a
 * split with \p{N} (one digit a piece) or \p{N}+; "Punctuation" a split with
 * runs of \p{P} and ASCII punctuation.
 *
 * Falcon runs its last two stages after ByteLevel has turned every byte into
 * a printable character, so they look at bytes: a "digit" there is a byte
 * whose character is numeric ('0'..'9', and 0xB2 0xB3 0xB9 0xBC..0xBE, which
 * GPT-2's mapping spells as ² ³ ¹ ¼ ½ ¾). Two small scanners do those.
 *
 * Patterns are compiled with PCRE2_UTF | PCRE2_UCP (Unicode classes for
 * \s, \p{L}, ...) and PCRE2_MATCH_INVALID_UTF (malformed bytes never match,
 * instead of failing the whole match), then JIT compiled.
 */
#include "pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "utf8.h"

/* ------------------------------------------------------------------------ */
/* The families                                                             */
/* ------------------------------------------------------------------------ */

/* GPT-2's pattern (also Hugging Face's ByteLevel pre-tokenizer's). */
#define PAT_GPT2                                                                                   \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Llama 3's (OpenAI's cl100k): case-insensitive contractions, letters with
 * one leading non-letter, numbers of up to three digits, line breaks kept
 * with the punctuation or whitespace before them. */
#define PAT_LLAMA3                                                                                 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"                       \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Qwen2's: Llama 3's with single digits. */
#define PAT_QWEN2                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"                            \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Qwen 3.5's: Qwen2's, with combining marks (\p{M}) taken into letter runs
 * and kept out of punctuation runs. */
#define PAT_QWEN35                                                                                 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"                    \
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Hugging Face's Punctuation pre-tokenizer: \p{P} or ASCII punctuation. */
#define PAT_PUNCTUATION "[\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]+"

/* DeepSeek's CJK ideographs and Hangul (the ranges as published). */
#define PAT_DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

/* DeepSeek LLM's letters: an explicit list of cased-letter ranges (Latin,
 * Greek, Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic, ...),
 * not \p{L}: scripts outside it fall between matches. */
#define PAT_DEEPSEEK_LLM_LETTERS                                                                   \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"            \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"         \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}" \
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}"  \
    "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"                 \
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"                 \
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"         \
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"        \
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"                 \
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}"         \
    "\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"                   \
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}"         \
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"                  \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}"                 \
    "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"                 \
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"           \
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"

/* DeepSeek LLM's punctuation: ASCII punctuation and symbols, their
 * fullwidth forms, curly quotes and the CJK space, comma and full stop. */
#define PAT_DEEPSEEK_LLM_PUNCT                                                                     \
    "\\s?[\\x21-\\x2F\\x3A-\\x7E\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}"         \
    "\\x{3000}-\\x{3002}]+"

typedef enum stage_kind {
    STAGE_REGEX,         /* isolate the matches of a pattern */
    STAGE_NUMERIC_BYTES, /* isolate runs of bytes whose GPT-2 character is numeric */
    STAGE_DIGIT_TRIPLES, /* isolate each "[0-9][0-9][0-9]", leftmost first */
} stage_kind;

typedef struct stage_def {
    stage_kind kind;
    const char *pattern; /* STAGE_REGEX only */
} stage_def;

#define MAX_STAGES 6
#define MAX_NAMES 6

/* A family: the tokenizer.ggml.pre values that name it and its stages. */
typedef struct family_def {
    const char *names[MAX_NAMES]; /* names[0] is the canonical one; NULL after the last */
    bool ignore_merges;
    bool adds_bos;
    int n_stages;
    stage_def stages[MAX_STAGES];
} family_def;

#define REGEX(p)                                                                                   \
    { STAGE_REGEX, p }
#define NUMERIC_BYTES                                                                              \
    { STAGE_NUMERIC_BYTES, NULL }
#define DIGIT_TRIPLES                                                                              \
    { STAGE_DIGIT_TRIPLES, NULL }

/* The first family is the default (absent or unknown tokenizer.ggml.pre).
 * MPT, OLMo and Phi-2 use GPT-NeoX / CodeGen tokenizers, whose only
 * pre-tokenizer is ByteLevel with GPT-2's pattern. StarCoder, Refact,
 * Command-R and SmolLM isolate every digit, then split as GPT-2. */
// clang-format off
static const family_def families[] = {
    {.names = {"gpt-2", "default", "phi-2", "mpt", "olmo"},
     .n_stages = 1, .stages = {REGEX(PAT_GPT2)}},
    {.names = {"llama3", "llama-bpe", "llama-v3"}, .ignore_merges = true, .adds_bos = true,
     .n_stages = 1, .stages = {REGEX(PAT_LLAMA3)}},
    {.names = {"qwen2"},
     .n_stages = 1, .stages = {REGEX(PAT_QWEN2)}},
    {.names = {"qwen35"},
     .n_stages = 1, .stages = {REGEX(PAT_QWEN35)}},
    {.names = {"deepseek-llm"},
     .n_stages = 6, .stages = {REGEX("[\\r\\n]"), REGEX(PAT_DEEPSEEK_LLM_LETTERS),
                               REGEX(PAT_DEEPSEEK_LLM_PUNCT), REGEX("\\s+$"),
                               REGEX(PAT_DEEPSEEK_CJK), REGEX("\\p{N}")}},
    {.names = {"deepseek-coder"},
     .n_stages = 5, .stages = {REGEX("[\\r\\n]"), REGEX("\\s?\\p{L}+"), REGEX("\\s?\\p{P}+"),
                               REGEX(PAT_DEEPSEEK_CJK), REGEX("\\p{N}")}},
    {.names = {"falcon"},
     .n_stages = 4, .stages = {REGEX(PAT_PUNCTUATION), REGEX(PAT_GPT2), NUMERIC_BYTES,
                               DIGIT_TRIPLES}},
    {.names = {"starcoder", "refact", "command-r", "smollm"},
     .n_stages = 2, .stages = {REGEX("\\p{N}"), REGEX(PAT_GPT2)}},
};
// clang-format on

#define N_FAMILIES (sizeof families / sizeof families[0])

/* The family named name[0..len), or NULL. */
static const family_def *find_family(const char *name, size_t len) {
    for (size_t i = 0; i < N_FAMILIES; i++) {
        for (const char *const *n = families[i].names; n < families[i].names + MAX_NAMES && *n;
             n++) {
            if (strlen(*n) == len && memcmp(*n, name, len) == 0) return &families[i];
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Compiling                                                                */
/* ------------------------------------------------------------------------ */

typedef struct nu_pretok_stage {
    stage_kind kind;
    pcre2_code *code; /* STAGE_REGEX */
    bool jit;         /* JIT-compiled: matched with pcre2_jit_match directly */
} nu_pretok_stage;

struct pretokenizer {
    const family_def *def;
    int n_stages;
    nu_pretok_stage stages[MAX_STAGES];
};

/* Compiles one pattern and JIT-compiles it when the platform can (without
 * JIT, pcre2_match interprets it: slower, same results). */
static nu_status compile_pattern(const char *pattern, pcre2_code **out, bool *jit, nu_error *err) {
    int code;
    PCRE2_SIZE at;
    uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    *out = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, options, &code, &at, NULL);
    if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return nu_fail(err, NU_ERR_UNSUPPORTED, "pre-tokenizer pattern does not compile at %zu: %s",
                       (size_t)at, (const char *)msg);
    }
    *jit = pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE) == 0;
    return NU_OK;
}

nu_status nu_pretokenizer_new(const char *name, size_t len, pretokenizer **out, bool *known,
                              nu_error *err) {
    *out = NULL;
    const family_def *def = len == 0 ? &families[0] : find_family(name, len);
    *known = def != NULL;
    if (!def) def = &families[0];
    pretokenizer *p = calloc(1, sizeof *p);
    if (!p) return nu_fail(err, NU_ERR_NOMEM, "out of memory for the pre-tokenizer");
    p->def = def;
    nu_status st = NU_OK;
    for (int i = 0; !st && i < def->n_stages; i++) {
        p->stages[i].kind = def->stages[i].kind;
        p->n_stages = i + 1;
        if (def->stages[i].kind == STAGE_REGEX) {
            st =
                compile_pattern(def->stages[i].pattern, &p->stages[i].code, &p->stages[i].jit, err);
        }
    }
    if (st) {
        nu_pretokenizer_free(p);
        return st;
    }
    *out = p;
    return NU_OK;
}

void nu_pretokenizer_free(pretokenizer *p) {
    if (!p) return;
    for (int i = 0; i < p->n_stages; i++) pcre2_code_free(p->stages[i].code);
    free(p);
}

const char *nu_pretokenizer_family(const pretokenizer *p) {
    return p->def->names[0];
}

bool nu_pretokenizer_ignores_merges(const pretokenizer *p) {
    return p->def->ignore_merges;
}

bool nu_pretokenizer_adds_bos(const pretokenizer *p) {
    return p->def->adds_bos;
}

/* ------------------------------------------------------------------------ */
/* Matching                                                                 */
/* ------------------------------------------------------------------------ */

/* The JIT stack grows to this before a match is given up (the default 32 KiB
 * machine stack suffices for every pattern here on ordinary text). */
#define JIT_STACK_MAX (64u << 20)

struct nu_pretok_scratch {
    pcre2_match_data *match;
    pcre2_match_context *context; /* with a large JIT stack; made on first need */
    pcre2_jit_stack *jit_stack;
};

nu_status nu_pretok_scratch_new(nu_pretok_scratch **out, nu_error *err) {
    nu_pretok_scratch *s = calloc(1, sizeof *s);
    if (s) s->match = pcre2_match_data_create(1, NULL);
    if (!s || !s->match) {
        free(s);
        *out = NULL;
        return nu_fail(err, NU_ERR_NOMEM, "out of memory for the pre-tokenizer");
    }
    *out = s;
    return NU_OK;
}

void nu_pretok_scratch_free(nu_pretok_scratch *s) {
    if (!s) return;
    pcre2_match_data_free(s->match);
    pcre2_match_context_free(s->context);
    pcre2_jit_stack_free(s->jit_stack);
    free(s);
}

/* Gives the scratch a large JIT stack, for matches the default one cannot
 * hold. False when that cannot be allocated. */
static bool grow_jit_stack(nu_pretok_scratch *s) {
    if (s->context) return false; /* already large: the match is too deep */
    s->context = pcre2_match_context_create(NULL);
    s->jit_stack = pcre2_jit_stack_create(32u << 10, JIT_STACK_MAX, NULL);
    if (!s->context || !s->jit_stack) return false;
    pcre2_jit_stack_assign(s->context, NULL, s->jit_stack);
    return true;
}

/* Finds the leftmost match of stage g in text[0..len) at or after from:
 * true with its bounds, false when there is none. A matching failure other
 * than "no match" sets *st. The JIT entry point skips pcre2_match's checks
 * (the options are fixed, and malformed UTF-8 is allowed by the pattern). */
static bool find_match(nu_pretok_scratch *s, const nu_pretok_stage *g, const char *text, size_t len,
                       size_t from, size_t *start, size_t *end, nu_status *st, nu_error *err) {
    for (;;) {
        PCRE2_SPTR subject = (PCRE2_SPTR)text;
        int rc = g->jit ? pcre2_jit_match(g->code, subject, len, from, 0, s->match, s->context)
                        : pcre2_match(g->code, subject, len, from, 0, s->match, s->context);
        if (rc >= 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->match);
            *start = ov[0];
            *end = ov[1];
            return true;
        }
        if (rc == PCRE2_ERROR_NOMATCH) return false;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && grow_jit_stack(s)) continue;
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        *st = nu_fail(err, NU_ERR_UNSUPPORTED, "pre-tokenizer: matching failed: %s",
                      (const char *)msg);
        return false;
    }
}

/* ------------------------------------------------------------------------ */
/* Cutting                                                                  */
/* ------------------------------------------------------------------------ */

/* What a run of stages needs besides the piece. */
typedef struct cut_ctx {
    const pretokenizer *p;
    nu_pretok_scratch *s;
    nu_pretok_piece_fn fn;
    void *fn_ctx;
    nu_error *err;
} cut_ctx;

static nu_status run_stage(const cut_ctx *c, int k, const char *text, size_t len);

/* Length of the character at s: a well-formed UTF-8 sequence, or one byte. */
static size_t char_len_at(const unsigned char *s, size_t n) {
    size_t k = nu_utf8_decode((const char *)s, n, NULL);
    return k ? k : 1;
}

/* Stage k as a regex split: matches and the stretches between them go on
 * to stage k + 1 in order. An empty match (none of our patterns has one)
 * cuts nothing. A piece of one character cannot be cut, so it is passed on
 * without matching (a malformed sequence is all bytes no pattern matches). */
static nu_status split_regex(const cut_ctx *c, int k, const char *text, size_t len) {
    if (char_len_at((const unsigned char *)text, len) == len) return run_stage(c, k + 1, text, len);
    const nu_pretok_stage *g = &c->p->stages[k];
    size_t gap = 0, from = 0, start, end;
    nu_status st = NU_OK;
    while (!st && from < len && find_match(c->s, g, text, len, from, &start, &end, &st, c->err)) {
        if (end == start) {
            from = start + char_len_at((const unsigned char *)text + start, len - start);
            continue;
        }
        st = run_stage(c, k + 1, text + gap, start - gap);
        if (!st) st = run_stage(c, k + 1, text + start, end - start);
        gap = from = end;
    }
    if (!st) st = run_stage(c, k + 1, text + gap, len - gap);
    return st;
}

/* Whether GPT-2's character for byte b is numeric (Unicode Nd, Nl or No). */
static bool numeric_byte(unsigned char b) {
    return (b >= '0' && b <= '9') || b == 0xB2 || b == 0xB3 || b == 0xB9 ||
           (b >= 0xBC && b <= 0xBE);
}

/* Stage k as Digits(individual_digits = false) on byte-level text: runs of
 * numeric bytes and runs of other bytes alternate as pieces. */
static nu_status split_numeric_bytes(const cut_ctx *c, int k, const char *text, size_t len) {
    const unsigned char *u = (const unsigned char *)text;
    nu_status st = NU_OK;
    for (size_t start = 0, i = 1; !st && start < len; i++) {
        if (i < len && numeric_byte(u[i]) == numeric_byte(u[start])) continue;
        st = run_stage(c, k + 1, text + start, i - start);
        start = i;
    }
    return st;
}

/* Stage k as a split isolating "[0-9][0-9][0-9]" matches, leftmost first
 * (so "12345" gives "123" and "45"). */
static nu_status split_digit_triples(const cut_ctx *c, int k, const char *text, size_t len) {
    size_t gap = 0, run = 0; /* run: ASCII digits seen since the last cut or non-digit */
    nu_status st = NU_OK;
    for (size_t i = 0; !st && i < len; i++) {
        run = text[i] >= '0' && text[i] <= '9' ? run + 1 : 0;
        if (run < 3) continue;
        st = run_stage(c, k + 1, text + gap, i - 2 - gap);
        if (!st) st = run_stage(c, k + 1, text + i - 2, 3);
        gap = i + 1;
        run = 0;
    }
    if (!st) st = run_stage(c, k + 1, text + gap, len - gap);
    return st;
}

/* Runs stages k.. on one piece; past the last stage the piece is done. A
 * single byte cannot be cut, so it skips the remaining stages. */
static nu_status run_stage(const cut_ctx *c, int k, const char *text, size_t len) {
    if (len == 0) return NU_OK;
    if (k == c->p->n_stages || len == 1) return c->fn(c->fn_ctx, text, len, c->err);
    switch (c->p->stages[k].kind) {
    case STAGE_REGEX: return split_regex(c, k, text, len);
    case STAGE_NUMERIC_BYTES: return split_numeric_bytes(c, k, text, len);
    case STAGE_DIGIT_TRIPLES: return split_digit_triples(c, k, text, len);
    }
    return NU_OK;
}

nu_status nu_pretokenize(const pretokenizer *p, nu_pretok_scratch *s, const char *text, size_t len,
                         nu_pretok_piece_fn fn, void *ctx, nu_error *err) {
    cut_ctx c = {p, s, fn, ctx, err};
    return run_stage(&c, 0, text, len);
}
