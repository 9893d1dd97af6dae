/* bleu_tokenize.c - sacreBLEU's tokenizers (13a, intl, zh, char, none),
 * over code points as Python's str holds them.
 *
 * Their rules are regular-expression substitutions applied one after the
 * other, each scanning left to right without overlapping its matches (as
 * re.sub does); every pattern is one character or a pair of characters, so
 * each is a plain loop here:
 *
 *   13a (mteval-v13a.pl as sacreBLEU's Tokenizer13a has it):
 *     remove "<skipped>" and "-\n", "\n" -> " ", unescape &quot; &amp; &lt;
 *     &gt; (in that order), pad the line with a space on both sides, then
 *     the shared rules:
 *       ([{-~[-` -&(-+:-@/])   -> " \1 "    (ASCII punctuation and symbols
 *                                             except ' , - .)
 *       ([^0-9])([.,])          -> "\1 \2 "  (period and comma after a non-digit)
 *       ([.,])([^0-9])          -> " \1 \2"  (period and comma before a non-digit)
 *       ([0-9])(-)              -> "\1 \2 "  (a dash after a digit)
 *     and whitespace collapsed.
 *   intl (mteval-v14.pl's international rules):
 *       (\P{N})(\p{P}) -> "\1 \2 ",  (\p{P})(\P{N}) -> " \1 \2",  (\p{S}) -> " \1 "
 *   zh: the line stripped, every character of the table below spaced out,
 *     then the shared rules above (without 13a's unescaping and padding).
 *   char: every character a token.  none: the text as it is. */
#include <stdbool.h>
#include <string.h>

#include "eval.h"
#include "unicode.h"

/* Characters 13a's first rule spaces out: { | } ~ [ \ ] ^ _ ` space ! " #
 * $ % & ( ) * + : ; < = > ? @ / */
static bool is_13a_punct(uint32_t c) {
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
           (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

static bool is_digit(uint32_t c) {
    return c >= '0' && c <= '9';
}

static bool is_period_comma(uint32_t c) {
    return c == '.' || c == ',';
}

/* sacreBLEU's _UCODE_RANGES for Chinese characters, compared as Python
 * compares one-character strings with its bounds. Two of its bounds are
 * written '\u20000'-'\u2a6d6' and '\u2f800'-'\u2fa1d', which Python reads as
 * two-character strings (U+2000 then '0', ...): a character c lies between
 * them when U+2000 < c <= U+2A6D and U+2F80 < c <= U+2FA1, so these are the
 * ranges sacreBLEU really uses. */
static const uint32_t zh_ranges[][2] = {
    {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FBB}, {0xF900, 0xFA2D}, {0xFA30, 0xFA6A},
    {0xFA70, 0xFAD9}, {0x2001, 0x2A6D}, {0x2F81, 0x2FA1}, {0xFF00, 0xFFEF}, {0x2E80, 0x2EFF},
    {0x3000, 0x303F}, {0x31C0, 0x31EF}, {0x2F00, 0x2FDF}, {0x2FF0, 0x2FFF}, {0x3100, 0x312F},
    {0x31A0, 0x31BF}, {0xFE10, 0xFE1F}, {0xFE30, 0xFE4F}, {0x2600, 0x26FF}, {0x2700, 0x27BF},
    {0x3200, 0x32FF}, {0x3300, 0x33FF},
};

static bool is_zh(uint32_t c) {
    for (size_t i = 0; i < sizeof zh_ranges / sizeof *zh_ranges; i++)
        if (c >= zh_ranges[i][0] && c <= zh_ranges[i][1]) return true;
    return false;
}

static bool not_number(uint32_t c) {
    return !nu_uni_isnumber(c);
}

static bool not_digit(uint32_t c) {
    return !is_digit(c);
}

static bool is_dash(uint32_t c) {
    return c == '-';
}

typedef bool (*char_class)(uint32_t c);

/* A pass's end: c becomes out when the pass went well (ok), else out is
 * dropped. Returns ok. */
static bool replace_with(nu_cps *c, nu_cps *out, bool ok) {
    if (ok) {
        nu_cps_free(c);
        *c = *out;
    } else {
        nu_cps_free(out);
    }
    return ok;
}

/* One pass of re.sub over a pair pattern (a)(b): each match, left to right
 * and not overlapping, becomes its two characters with a space before the
 * first (space_first), between them (always) and after the second
 * (space_after). */
static bool sub_pair(nu_cps *c, char_class a, char_class b, bool space_first, bool space_after) {
    nu_cps out = {0};
    bool ok = true;
    size_t i = 0;
    while (ok && i < c->n) {
        if (i + 1 < c->n && a(c->v[i]) && b(c->v[i + 1])) {
            if (space_first) ok = ok && nu_cps_push(&out, ' ');
            ok = ok && nu_cps_push(&out, c->v[i]) && nu_cps_push(&out, ' ') &&
                 nu_cps_push(&out, c->v[i + 1]);
            if (space_after) ok = ok && nu_cps_push(&out, ' ');
            i += 2;
        } else {
            ok = nu_cps_push(&out, c->v[i++]);
        }
    }
    return replace_with(c, &out, ok);
}

/* One pass of a one-character pattern (a) -> " \1 ". */
static bool sub_one(nu_cps *c, char_class a) {
    nu_cps out = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < c->n; i++)
        ok = a(c->v[i])
                 ? nu_cps_push(&out, ' ') && nu_cps_push(&out, c->v[i]) && nu_cps_push(&out, ' ')
                 : nu_cps_push(&out, c->v[i]);
    return replace_with(c, &out, ok);
}

/* str.replace(from, to) with ASCII from and to. */
static bool replace_all(nu_cps *c, const char *from, const char *to) {
    const size_t nf = strlen(from);
    nu_cps out = {0};
    bool ok = true;
    size_t i = 0;
    while (ok && i < c->n) {
        size_t k = 0;
        while (k < nf && i + k < c->n && c->v[i + k] == (unsigned char)from[k]) k++;
        if (k == nf) {
            for (const char *t = to; ok && *t; t++) ok = nu_cps_push(&out, (unsigned char)*t);
            i += nf;
        } else {
            ok = nu_cps_push(&out, c->v[i++]);
        }
    }
    return replace_with(c, &out, ok);
}

/* The rules 13a and zh share (sacreBLEU's TokenizerRegexp). */
static bool regexp_rules(nu_cps *c) {
    return sub_one(c, is_13a_punct) && sub_pair(c, not_digit, is_period_comma, false, true) &&
           sub_pair(c, is_period_comma, not_digit, true, false) &&
           sub_pair(c, is_digit, is_dash, false, true);
}

static bool tokenize_13a(nu_cps *c) {
    static const char *const repl[][2] = {{"<skipped>", ""}, {"-\n", ""},    {"\n", " "},
                                          {"&quot;", "\""},  {"&amp;", "&"}, {"&lt;", "<"},
                                          {"&gt;", ">"}};
    for (size_t i = 0; i < sizeof repl / sizeof *repl; i++)
        if (!replace_all(c, repl[i][0], repl[i][1])) return false;
    nu_cps padded = {0};
    bool ok = nu_cps_push(&padded, ' ') && nu_cps_append(&padded, c->v, c->n) &&
              nu_cps_push(&padded, ' ');
    return replace_with(c, &padded, ok) && regexp_rules(c);
}

static bool tokenize_zh(nu_cps *c) {
    nu_cps_strip(c);
    return sub_one(c, is_zh) && regexp_rules(c);
}

static bool tokenize_intl(nu_cps *c) {
    return sub_pair(c, not_number, nu_uni_ispunct, false, true) &&
           sub_pair(c, nu_uni_ispunct, not_number, true, false) && sub_one(c, nu_uni_issymbol);
}

bool nu_bleu_tokenize(nu_bleu_tokenizer tok, bool lowercase, const char *text, nu_cps *c) {
    if (!nu_cps_decode(c, text, strlen(text))) return false;
    if (lowercase && !nu_cps_lower(c)) return false;
    nu_cps_rstrip(c);
    switch (tok) {
    case NU_BLEU_TOK_13A: return tokenize_13a(c);
    case NU_BLEU_TOK_INTL: return tokenize_intl(c);
    case NU_BLEU_TOK_ZH: return tokenize_zh(c);
    case NU_BLEU_TOK_CHAR: /* every character a word: spaced out, as " ".join(line) */
    {
        nu_cps out = {0};
        bool ok = true;
        for (size_t i = 0; ok && i < c->n; i++)
            ok = (i == 0 || nu_cps_push(&out, ' ')) && nu_cps_push(&out, c->v[i]);
        return replace_with(c, &out, ok);
    }
    case NU_BLEU_TOK_NONE: return true;
    }
    return true;
}
