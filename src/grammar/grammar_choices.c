/* grammar_choices.c - a choice among fixed strings as GBNF.
 *
 * A few choices are written as they are: root ::= "yes" | "no". Many are
 * written as a radix tree, common prefixes factored out:
 *   root ::= "item-" ("1" ("0" | "2") | "7")
 * so that however many choices share a prefix, the matcher follows one
 * path through it instead of one parse per choice. Branches split at whole
 * UTF-8 characters (the strings must be valid UTF-8), so every literal
 * stays valid text. */
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

#define FLAT_CHOICES 16 /* up to this many: one alternative each */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Bytes of the UTF-8 character starting with byte c (1 for stray bytes). */
static size_t char_len(unsigned char c) {
    size_t k = nu_utf8_lead_len(c);
    return k ? k : 1;
}

/* Does s have the same character as t at byte d? */
static bool same_char(const char *s, const char *t, size_t d) {
    size_t k = char_len((unsigned char)s[d]);
    return strlen(s + d) >= k && strncmp(s + d, t + d, k) == 0;
}

/* The longest prefix (from byte d, in whole characters) shared by the
 * sorted strings s[0..n). */
static size_t common_prefix(const char *const *s, size_t n, size_t d) {
    size_t end = d;
    for (;;) {
        if (!s[0][end]) return end;
        for (size_t i = 1; i < n; i++)
            if (!same_char(s[i], s[0], end)) return end;
        end += char_len((unsigned char)s[0][end]);
    }
}

/* Writes the choices s[0..n) (sorted, all sharing their first d bytes) from
 * byte d on: one alternative per next character, each its shared run as a
 * literal followed by the tree of what differs after it. */
static void write_tree(nu_buf *b, const char *const *s, size_t n, size_t d) {
    size_t i = 0, alts = 0;
    nu_buf_puts(b, "(");
    if (!s[0][d]) {
        nu_buf_puts(b, "\"\"");
        alts++;
        while (i < n && !s[i][d]) i++;
    }
    while (i < n) {
        size_t j = i + 1;
        while (j < n && same_char(s[j], s[i], d)) j++;
        size_t end = common_prefix(s + i, j - i, d);
        nu_buf_puts(b, alts++ ? " | " : "");
        nu_gram_buf_literal(b, s[i] + d, end - d);
        if (j - i > 1) {
            nu_buf_puts(b, " ");
            write_tree(b, s + i, j - i, end);
        }
        i = j;
    }
    nu_buf_puts(b, ")");
}

void nu_gram_choices_expr(nu_buf *b, const char *const *choices, size_t n) {
    if (n <= FLAT_CHOICES) {
        for (size_t i = 0; i < n; i++) {
            nu_buf_puts(b, i ? " | " : "");
            nu_gram_buf_literal(b, choices[i], strlen(choices[i]));
        }
        return;
    }
    const char **sorted = malloc(n * sizeof *sorted);
    if (!sorted) {
        b->failed = true;
        return;
    }
    memcpy(sorted, choices, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_str);
    write_tree(b, sorted, n, 0);
    free(sorted);
}

void nu_gram_choices_gbnf(nu_buf *b, const char *const *choices, size_t n) {
    nu_buf_puts(b, "root ::= ");
    nu_gram_choices_expr(b, choices, n);
    nu_buf_puts(b, "\n");
}
