/* porter.c - the Porter stemmer (Porter 1980, "An algorithm for suffix
 * stripping") as NLTK's PorterStemmer applies it in its default
 * NLTK_EXTENSIONS mode, which rouge-score uses for --stemmer:
 *
 *   - a few irregular forms map directly (skies/sky -> sky, dying -> die,
 *     lying -> lie, tying -> tie, news, innings/inning -> inning,
 *     outings/outing -> outing, cannings/canning -> canning, howe, proceed,
 *     exceed, succeed);
 *   - words of one or two letters are left alone;
 *   - step 1a: "ies" of a four-letter word -> "ie"; then sses -> ss, ies -> i,
 *     ss -> ss, s -> "";
 *   - step 1b: "ied" -> "ie" (four letters) or "i"; (m>0) eed -> ee; (*v*) ed,
 *     (*v*) ing removed, then at -> ate, bl -> ble, iz -> ize, a double
 *     consonant but l/s/z -> single, (m=1 and *o) -> +e;
 *   - step 1c: y -> i after a consonant that is not the word's first letter;
 *   - step 2 (m>0): alli -> al (and step 2 again), then the paper's list with
 *     bli -> ble (not abli -> able), fulli -> ful, and logi -> log when the
 *     word less "ogi" has m>0;
 *   - step 3 (m>0), step 4 (m>1; ion after s or t), step 5a (m>1, or m=1 and
 *     not *o: e removed), step 5b (ll -> l when the word less one l has m>1).
 *
 * As in NLTK, each step's list of rules is tried in order and the first rule
 * whose suffix the word ends with decides: if its condition fails the step
 * leaves the word as it is. *o also holds for a two-letter word
 * vowel-consonant. The measure m of a stem counts its "vc" pairs, y being a
 * consonant at the start or after a vowel. The words are lowercase ASCII
 * letters and digits (rouge-score's tokens), a digit counting as a
 * consonant. */
#include <stdbool.h>
#include <string.h>

#include "eval.h"

/* A word being stemmed, edited in place. */
typedef struct word {
    char *s;
    size_t n;
} word;

static bool is_consonant(const char *s, size_t i) {
    switch (s[i]) {
    case 'a':
    case 'e':
    case 'i':
    case 'o':
    case 'u': return false;
    case 'y': return i == 0 || !is_consonant(s, i - 1);
    default: return true;
    }
}

/* m: the number of vowel-consonant pairs in s[0..n). */
static int measure(const char *s, size_t n) {
    int m = 0;
    for (size_t i = 1; i < n; i++)
        if (!is_consonant(s, i - 1) && is_consonant(s, i)) m++;
    return m;
}

static bool has_vowel(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_consonant(s, i)) return true;
    return false;
}

static bool ends_double_consonant(const char *s, size_t n) {
    return n >= 2 && s[n - 1] == s[n - 2] && is_consonant(s, n - 1);
}

/* *o: consonant-vowel-consonant at the end, the last not w, x or y; or a
 * two-letter word vowel-consonant (NLTK's extension). */
static bool ends_cvc(const char *s, size_t n) {
    if (n >= 3 && is_consonant(s, n - 3) && !is_consonant(s, n - 2) && is_consonant(s, n - 1) &&
        s[n - 1] != 'w' && s[n - 1] != 'x' && s[n - 1] != 'y')
        return true;
    return n == 2 && !is_consonant(s, 0) && is_consonant(s, 1);
}

static bool ends_with(const word *w, const char *suffix) {
    const size_t k = strlen(suffix);
    return w->n >= k && memcmp(w->s + w->n - k, suffix, k) == 0;
}

/* The word less `cut` letters, then `add` appended. */
static void replace_end(word *w, size_t cut, const char *add) {
    w->n -= cut;
    const size_t k = strlen(add);
    memcpy(w->s + w->n, add, k);
    w->n += k;
}

/* The conditions of the rules, on the stem (the word less the suffix). */
typedef enum cond { ANY, M_GT0, M_GT1, M_GT1_ST } cond;

typedef struct rule {
    const char *suffix, *replacement;
    cond condition;
} rule;

static bool holds(cond c, const char *s, size_t n) {
    switch (c) {
    case ANY: return true;
    case M_GT0: return measure(s, n) > 0;
    case M_GT1: return measure(s, n) > 1;
    case M_GT1_ST: return measure(s, n) > 1 && n > 0 && (s[n - 1] == 's' || s[n - 1] == 't');
    }
    return false;
}

/* The first rule whose suffix ends the word decides; true when one did
 * (whether or not its condition held). */
static bool apply_rules(word *w, const rule *rules, size_t count) {
    for (size_t i = 0; i < count; i++) {
        if (!ends_with(w, rules[i].suffix)) continue;
        const size_t k = strlen(rules[i].suffix);
        if (holds(rules[i].condition, w->s, w->n - k)) replace_end(w, k, rules[i].replacement);
        return true;
    }
    return false;
}

#define RULES(w, list) apply_rules(w, list, sizeof list / sizeof *list)

static void step1a(word *w) {
    static const rule rules[] = {
        {"sses", "ss", ANY}, {"ies", "i", ANY}, {"ss", "ss", ANY}, {"s", "", ANY}};
    if (w->n == 4 && ends_with(w, "ies")) {
        replace_end(w, 3, "ie");
        return;
    }
    RULES(w, rules);
}

static void step1b(word *w) {
    if (ends_with(w, "ied")) {
        replace_end(w, 3, w->n == 4 ? "ie" : "i");
        return;
    }
    if (ends_with(w, "eed")) {
        if (measure(w->s, w->n - 3) > 0) replace_end(w, 3, "ee");
        return;
    }
    size_t cut = 0;
    if (ends_with(w, "ed") && has_vowel(w->s, w->n - 2))
        cut = 2;
    else if (ends_with(w, "ing") && has_vowel(w->s, w->n - 3))
        cut = 3;
    if (!cut) return;
    w->n -= cut;
    static const rule rules[] = {{"at", "ate", ANY}, {"bl", "ble", ANY}, {"iz", "ize", ANY}};
    if (RULES(w, rules)) return;
    if (ends_double_consonant(w->s, w->n)) {
        const char last = w->s[w->n - 1];
        if (last != 'l' && last != 's' && last != 'z') w->n--;
        return;
    }
    if (measure(w->s, w->n) == 1 && ends_cvc(w->s, w->n)) replace_end(w, 0, "e");
}

static void step1c(word *w) {
    if (ends_with(w, "y") && w->n - 1 > 1 && is_consonant(w->s, w->n - 2)) w->s[w->n - 1] = 'i';
}

static void step2(word *w) {
    if (ends_with(w, "alli") && measure(w->s, w->n - 4) > 0) {
        replace_end(w, 4, "al");
        step2(w);
        return;
    }
    static const rule rules[] = {
        {"ational", "ate", M_GT0}, {"tional", "tion", M_GT0}, {"enci", "ence", M_GT0},
        {"anci", "ance", M_GT0},   {"izer", "ize", M_GT0},    {"bli", "ble", M_GT0},
        {"alli", "al", M_GT0},     {"entli", "ent", M_GT0},   {"eli", "e", M_GT0},
        {"ousli", "ous", M_GT0},   {"ization", "ize", M_GT0}, {"ation", "ate", M_GT0},
        {"ator", "ate", M_GT0},    {"alism", "al", M_GT0},    {"iveness", "ive", M_GT0},
        {"fulness", "ful", M_GT0}, {"ousness", "ous", M_GT0}, {"aliti", "al", M_GT0},
        {"iviti", "ive", M_GT0},   {"biliti", "ble", M_GT0},  {"fulli", "ful", M_GT0},
    };
    if (RULES(w, rules)) return;
    /* logi -> log when the word less "ogi" (not less "logi") has m > 0 */
    if (ends_with(w, "logi") && measure(w->s, w->n - 3) > 0) replace_end(w, 4, "log");
}

static void step3(word *w) {
    static const rule rules[] = {{"icate", "ic", M_GT0}, {"ative", "", M_GT0},
                                 {"alize", "al", M_GT0}, {"iciti", "ic", M_GT0},
                                 {"ical", "ic", M_GT0},  {"ful", "", M_GT0},
                                 {"ness", "", M_GT0}};
    RULES(w, rules);
}

static void step4(word *w) {
    static const rule rules[] = {
        {"al", "", M_GT1},    {"ance", "", M_GT1}, {"ence", "", M_GT1}, {"er", "", M_GT1},
        {"ic", "", M_GT1},    {"able", "", M_GT1}, {"ible", "", M_GT1}, {"ant", "", M_GT1},
        {"ement", "", M_GT1}, {"ment", "", M_GT1}, {"ent", "", M_GT1},  {"ion", "", M_GT1_ST},
        {"ou", "", M_GT1},    {"ism", "", M_GT1},  {"ate", "", M_GT1},  {"iti", "", M_GT1},
        {"ous", "", M_GT1},   {"ive", "", M_GT1},  {"ize", "", M_GT1},
    };
    RULES(w, rules);
}

static void step5(word *w) {
    if (ends_with(w, "e")) {
        const int m = measure(w->s, w->n - 1);
        if (m > 1 || (m == 1 && !ends_cvc(w->s, w->n - 1))) w->n--;
    }
    if (ends_with(w, "ll") && measure(w->s, w->n - 1) > 1) w->n--;
}

size_t nu_porter_stem(char *s, size_t n) {
    static const char *const irregular[][2] = {
        {"skies", "sky"},       {"sky", "sky"},          {"dying", "die"},
        {"lying", "lie"},       {"tying", "tie"},        {"news", "news"},
        {"innings", "inning"},  {"inning", "inning"},    {"outings", "outing"},
        {"outing", "outing"},   {"cannings", "canning"}, {"canning", "canning"},
        {"howe", "howe"},       {"proceed", "proceed"},  {"exceed", "exceed"},
        {"succeed", "succeed"},
    };
    for (size_t i = 0; i < sizeof irregular / sizeof *irregular; i++)
        if (strlen(irregular[i][0]) == n && memcmp(s, irregular[i][0], n) == 0) {
            const size_t k = strlen(irregular[i][1]);
            memcpy(s, irregular[i][1], k);
            return k;
        }
    if (n <= 2) return n;
    word w = {s, n};
    step1a(&w);
    step1b(&w);
    step1c(&w);
    step2(&w);
    step3(&w);
    step4(&w);
    step5(&w);
    return w.n;
}
