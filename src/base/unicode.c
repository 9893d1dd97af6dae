/* unicode.c - UTF-8, and the Unicode properties Python's str methods use,
 * for strip(), isspace(), upper(), lower(), title(), capitalize(), repr() and
 * friends to behave exactly as in the Python that renders chat templates
 * for transformers, and for the tokenizers of sacreBLEU and rouge-score.
 *
 * The tables (unicode_tables.h) are data from Python 3.11's unicodedata
 * (Unicode 14.0.0), written by scripts/gen_unicode_tables.py:
 *   ranges(pred): maximal [first, last] code point runs where pred holds,
 *     with pred = not isprintable(), isspace(), isupper(), islower(),
 *     isupper() or islower() or istitle(), isalpha(), isdigit(), isalnum(),
 *     and the general categories P*, S*, N*;
 *   case runs: code points whose str.upper() / str.lower() is one other
 *     code point, merged into {first, last, delta, stride} runs;
 *   specials: code points whose upper() / lower() is several code points,
 *     and those whose title() differs from upper().
 * Final-sigma handling of str.lower() is not reproduced. */
#include "unicode.h"

typedef struct case_run {
    uint32_t first, last;
    int32_t delta;
    uint32_t stride;
} case_run;

typedef struct case_special {
    uint32_t cp;
    uint32_t map[3];
} case_special;

#include "unicode_tables.h"

#define COUNT(a) (sizeof(a) / sizeof *(a))

/* Whether cp lies in one of n sorted, disjoint ranges. */
static bool in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* The special (multi-character or title) mapping of cp, or NULL. */
static const case_special *find_special(const case_special *s, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < s[mid].cp)
            hi = mid;
        else if (cp > s[mid].cp)
            lo = mid + 1;
        else
            return &s[mid];
    }
    return NULL;
}

/* cp mapped through simple case runs (itself when unmapped). */
static uint32_t map_runs(const case_run *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].first)
            hi = mid;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return (cp - r[mid].first) % r[mid].stride == 0 ? (uint32_t)((int32_t)cp + r[mid].delta)
                                                            : cp;
    }
    return cp;
}

/* Writes a special mapping's code points; returns how many. */
static int copy_special(const case_special *s, uint32_t out[3]) {
    int n = 0;
    for (int i = 0; i < 3 && s->map[i]; i++) out[n++] = s->map[i];
    return n;
}

bool nu_uni_isspace(uint32_t cp) {
    return in_ranges(space, COUNT(space), cp);
}

bool nu_uni_isprintable(uint32_t cp) {
    return !in_ranges(nonprintable, COUNT(nonprintable), cp);
}

bool nu_uni_isupper(uint32_t cp) {
    return in_ranges(upper_set, COUNT(upper_set), cp);
}

bool nu_uni_islower(uint32_t cp) {
    return in_ranges(lower_set, COUNT(lower_set), cp);
}

bool nu_uni_iscased(uint32_t cp) {
    return in_ranges(cased_set, COUNT(cased_set), cp);
}

bool nu_uni_isalpha(uint32_t cp) {
    return in_ranges(alpha_set, COUNT(alpha_set), cp);
}

bool nu_uni_isdigit(uint32_t cp) {
    return in_ranges(digit_set, COUNT(digit_set), cp);
}

bool nu_uni_isalnum(uint32_t cp) {
    return in_ranges(alnum_set, COUNT(alnum_set), cp);
}

bool nu_uni_ispunct(uint32_t cp) {
    return in_ranges(punct_set, COUNT(punct_set), cp);
}

bool nu_uni_issymbol(uint32_t cp) {
    return in_ranges(symbol_set, COUNT(symbol_set), cp);
}

bool nu_uni_isnumber(uint32_t cp) {
    return in_ranges(number_set, COUNT(number_set), cp);
}

int nu_uni_upper(uint32_t cp, uint32_t out[3]) {
    if (cp < 0x80) {
        out[0] = cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
        return 1;
    }
    const case_special *s = find_special(upper_special, COUNT(upper_special), cp);
    if (s) return copy_special(s, out);
    out[0] = map_runs(upper_runs, COUNT(upper_runs), cp);
    return 1;
}

int nu_uni_lower(uint32_t cp, uint32_t out[3]) {
    if (cp < 0x80) {
        out[0] = cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
        return 1;
    }
    const case_special *s = find_special(lower_special, COUNT(lower_special), cp);
    if (s) return copy_special(s, out);
    out[0] = map_runs(lower_runs, COUNT(lower_runs), cp);
    return 1;
}

int nu_uni_title(uint32_t cp, uint32_t out[3]) {
    const case_special *s =
        cp < 0x80 ? NULL : find_special(title_special, COUNT(title_special), cp);
    if (s) return copy_special(s, out);
    return nu_uni_upper(cp, out);
}
