/* jinja_lex.c - splits a chat template into tokens.
 *
 * Outside tags the source is template data; `{{ }}`, `{% %}` and `{# #}`
 * open tags. Whitespace control follows Jinja2 with trim_blocks and
 * lstrip_blocks on: `-` next to a delimiter strips all whitespace on that
 * side, `+` turns lstrip / trim off for that tag, a block or comment tag
 * alone on its line loses the indentation before it, and the first newline
 * after a block or comment tag is dropped. Inside tags we produce names,
 * numbers, decoded string literals and operators; `}}` and `%}` close a tag
 * only outside brackets, so `{{ {'a': {'b': 1}} }}` works. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

void nu_jlex_init(jlexer *lx, const char *src, size_t len, nu_jarena *arena) {
    memset(lx, 0, sizeof *lx);
    lx->src = src;
    lx->len = len;
    lx->arena = arena;
}

/* Records the first lexing error at byte offset pos. */
static jtok lex_error(jlexer *lx, size_t pos, const char *msg) {
    if (!lx->failed) {
        lx->failed = true;
        lx->err_pos = (uint32_t)pos;
        snprintf(lx->err, sizeof lx->err, "%s", msg);
    }
    jtok t = {.type = JT_EOF, .pos = (uint32_t)pos};
    return t;
}

/* True when s[i..] starts with the n bytes of lit. */
static bool at(const jlexer *lx, size_t i, const char *lit) {
    size_t n = strlen(lit);
    return i + n <= lx->len && memcmp(lx->src + i, lit, n) == 0;
}

/* Length of the whitespace character at s[i] (Python's str.isspace), or 0. */
static size_t space_len(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return nu_uni_isspace(c) ? 1 : 0;
    size_t j = i;
    uint32_t cp = nu_utf8_next_escaped(s, n, &j);
    return nu_uni_isspace(cp) ? j - i : 0;
}

/* Offset past the whitespace starting at i. */
static size_t skip_space(const char *s, size_t n, size_t i) {
    size_t k;
    while ((k = space_len(s, n, i)) > 0) i += k;
    return i;
}

/* Length of text[0..n) without its trailing whitespace. */
static size_t rstrip_len(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80 && end - start < 4) start--;
        if (space_len(s, end, start) != end - start) break;
        end = start;
    }
    return end;
}

/* lstrip_blocks: drops the whitespace between the last line start in the
 * text and a block or comment tag. line_start says whether the text itself
 * begins a line (it follows a newline or starts the template). */
static size_t lstrip_block(const char *s, size_t n, bool line_start) {
    size_t nl = n;
    while (nl > 0 && s[nl - 1] != '\n') nl--;
    if (nl == 0 && !line_start) return n;
    if (nl == n) return n;
    if (skip_space(s, n, nl) != n) return n;
    return nl;
}

/* Where the next tag opening ({{, {% or {#) is at or after i, or len. */
static size_t find_tag(const jlexer *lx, size_t i) {
    for (; i + 1 < lx->len; i++) {
        if (lx->src[i] != '{') continue;
        char c = lx->src[i + 1];
        if (c == '{' || c == '%' || c == '#') return i;
    }
    return lx->len;
}

/* If a `{% raw %}` tag (with optional -/+ modifiers) starts at i, returns
 * the offset just past it and whether it ended with '-'. */
static size_t match_word_tag(const jlexer *lx, size_t i, const char *word, bool *strip_after,
                             bool *plus_after) {
    size_t j = i + 2;
    if (j < lx->len && (lx->src[j] == '-' || lx->src[j] == '+')) j++;
    j = skip_space(lx->src, lx->len, j);
    size_t wn = strlen(word);
    if (!at(lx, j, word)) return 0;
    j += wn;
    size_t k = skip_space(lx->src, lx->len, j);
    if (k == j && !(at(lx, k, "%}") || at(lx, k, "-%}") || at(lx, k, "+%}"))) return 0;
    j = k;
    *strip_after = at(lx, j, "-%}");
    *plus_after = at(lx, j, "+%}");
    if (*strip_after || *plus_after) return j + 3;
    if (at(lx, j, "%}")) return j + 2;
    return 0;
}

/* Applies the whitespace rules for a tag of kind c ('{', '%' or '#') at
 * offset tag to the data text [start, tag), returning its new length. */
static size_t trim_before_tag(const jlexer *lx, size_t start, size_t tag, char c) {
    const char *text = lx->src + start;
    size_t n = tag - start;
    char mod = tag + 2 < lx->len ? lx->src[tag + 2] : 0;
    if (mod == '-') return rstrip_len(text, n);
    if (mod == '+' || c == '{') return n;
    bool line_start = start == 0 || lx->src[start - 1] == '\n';
    return lstrip_block(text, n, line_start);
}

/* Skips a comment starting at i ({#); returns the offset after it. */
static size_t skip_comment(jlexer *lx, size_t i) {
    for (size_t j = i + 2; j + 1 < lx->len; j++) {
        if (lx->src[j] != '#' || lx->src[j + 1] != '}') continue;
        lx->strip_next = j > i + 2 && lx->src[j - 1] == '-';
        lx->trim_next = !lx->strip_next && !(j > i + 2 && lx->src[j - 1] == '+');
        return j + 2;
    }
    lex_error(lx, i, "missing end of comment tag");
    return lx->len;
}

/* Makes a data token of src[start, start + n), after the whitespace rules
 * left over from the previous tag. */
static jtok data_token(jlexer *lx, size_t start, size_t n) {
    const char *s = lx->src + start;
    if (lx->strip_next) {
        size_t k = skip_space(s, n, 0);
        s += k;
        n -= k;
    } else if (lx->trim_next && n > 0 && s[0] == '\n') {
        s++;
        n--;
    }
    lx->strip_next = lx->trim_next = false;
    jtok t = {.type = JT_TEXT, .pos = (uint32_t)(s - lx->src), .text = s, .len = n};
    return t;
}

/* Handles `{% raw %}...{% endraw %}` starting at i: returns the content as
 * one data token. */
static jtok lex_raw(jlexer *lx, size_t i, size_t body) {
    bool strip = false, plus = false;
    if (lx->strip_next) body = skip_space(lx->src, lx->len, body);
    lx->strip_next = false;
    for (size_t j = find_tag(lx, body); j < lx->len; j = find_tag(lx, j + 1)) {
        if (lx->src[j + 1] != '%') continue;
        size_t end = match_word_tag(lx, j, "endraw", &strip, &plus);
        if (!end) continue;
        size_t n = trim_before_tag(lx, body, j, '%');
        jtok t = {.type = JT_TEXT, .pos = (uint32_t)body, .text = lx->src + body, .len = n};
        lx->pos = end;
        lx->strip_next = strip;
        lx->trim_next = !strip && !plus;
        return t;
    }
    return lex_error(lx, i, "missing {% endraw %} for {% raw %}");
}

/* Lexes template data up to the next tag; comments are skipped, so this may
 * return an empty text token. */
static jtok lex_data(jlexer *lx) {
    size_t start = lx->pos;
    size_t tag = find_tag(lx, start);
    if (tag >= lx->len) {
        lx->pos = lx->len;
        return data_token(lx, start, lx->len - start);
    }
    char c = lx->src[tag + 1];
    size_t n = trim_before_tag(lx, start, tag, c);
    jtok t = data_token(lx, start, n);
    if (c == '#') {
        lx->pos = skip_comment(lx, tag);
        return t;
    }
    bool strip = false, plus = false;
    size_t raw_end = c == '%' ? match_word_tag(lx, tag, "raw", &strip, &plus) : 0;
    if (raw_end) {
        lx->pos = raw_end;
        lx->raw_pending = true;
        lx->raw_tag = tag;
        lx->strip_next = strip;
        return t;
    }
    size_t open = tag + 2;
    if (open < lx->len && (lx->src[open] == '-' || lx->src[open] == '+')) open++;
    lx->pos = open;
    lx->state = c == '{' ? 1 : 2;
    lx->depth = 0;
    lx->open_pending = true;
    lx->open_pos = tag;
    return t;
}

/* Decodes hex digits s[0..n) into *v; false if any is not a hex digit. */
static bool hex_value(const char *s, size_t n, uint32_t *v) {
    uint32_t x = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return false;
        x = x * 16 + (uint32_t)d;
    }
    *v = x;
    return true;
}

/* One backslash escape at s[*i] (just after the backslash), decoded the way
 * Jinja2 does it (Python's unicode-escape codec after non-ASCII characters
 * were written as \x.. / \u.... escapes). Returns false on a bad escape. */
static bool decode_escape(const char *s, size_t n, size_t *i, nu_buf *b) {
    unsigned char c = (unsigned char)s[*i];
    static const char simple_from[] = "\\'\"abfnrtv";
    static const char simple_to[] = "\\'\"\a\b\f\n\r\t\v";
    const char *k = c ? strchr(simple_from, c) : NULL;
    if (k) {
        nu_buf_putc(b, simple_to[k - simple_from]);
        (*i)++;
    } else if (c == '\n') {
        (*i)++;
    } else if (c >= '0' && c <= '7') {
        uint32_t v = 0;
        for (int d = 0; d < 3 && *i < n && s[*i] >= '0' && s[*i] <= '7'; d++)
            v = v * 8 + (uint32_t)(s[(*i)++] - '0');
        nu_jinja_put_char(b, v);
    } else if (c == 'x' || c == 'u' || c == 'U') {
        size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t v;
        if (*i + 1 + digits > n || !hex_value(s + *i + 1, digits, &v) || v > 0x10FFFF) return false;
        nu_jinja_put_char(b, v);
        *i += 1 + digits;
    } else if (c >= 0x80) {
        /* the character was escaped as \xNN / \uNNNN / \UNNNNNNNN first, so
         * this backslash escapes that escape's backslash */
        size_t j = *i;
        uint32_t cp = nu_utf8_next_escaped(s, n, &j);
        nu_buf_putc(b, '\\');
        if (cp < 0x100)
            nu_buf_printf(b, "x%02x", cp);
        else if (cp < 0x10000)
            nu_buf_printf(b, "u%04x", cp);
        else
            nu_buf_printf(b, "U%08x", cp);
        *i = j;
    } else {
        nu_buf_putc(b, '\\'); /* unknown escapes stay as they are */
    }
    return true;
}

/* Lexes a string literal starting at the quote at i. */
static jtok lex_string(jlexer *lx, size_t i) {
    char q = lx->src[i];
    size_t j = i + 1;
    while (j < lx->len && lx->src[j] != q) j += lx->src[j] == '\\' ? 2 : 1;
    if (j >= lx->len) return lex_error(lx, i, "unterminated string literal");
    const char *body = lx->src + i + 1;
    size_t n = j - i - 1;
    nu_buf b = {0};
    for (size_t k = 0; k < n;) {
        if (body[k] != '\\') {
            nu_buf_putc(&b, body[k++]);
            continue;
        }
        k++;
        if (!decode_escape(body, n, &k, &b)) {
            nu_buf_free(&b);
            return lex_error(lx, i + 1 + k - 1, "invalid escape sequence in string literal");
        }
    }
    jtok t = {.type = JT_STRING, .pos = (uint32_t)i, .text = lx->src + i, .len = j + 1 - i};
    t.str = nu_jarena_alloc(lx->arena, b.len + 1);
    if (!t.str || b.failed) {
        nu_buf_free(&b);
        return lex_error(lx, i, "out of memory");
    }
    if (b.len) memcpy(t.str, b.data, b.len);
    t.str[b.len] = 0;
    t.str_len = b.len;
    nu_buf_free(&b);
    lx->pos = j + 1;
    return t;
}

/* Digits with single underscores between them, in the given base; returns
 * the end offset (== i when there is no digit). */
static size_t scan_digits(const jlexer *lx, size_t i, int base) {
    size_t j = i;
    while (j < lx->len) {
        char c = lx->src[j];
        bool dig = base == 16 ? ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
                                 (c >= 'A' && c <= 'F'))
                              : (c >= '0' && c < '0' + base);
        if (dig)
            j++;
        else if (c == '_' && j > i && j + 1 < lx->len && lx->src[j + 1] != '_')
            j++;
        else
            break;
    }
    while (j > i && lx->src[j - 1] == '_') j--;
    return j;
}

/* Copies src[i, j) without underscores into buf (at most cap - 1 bytes). */
static void copy_digits(const jlexer *lx, size_t i, size_t j, char *buf, size_t cap) {
    size_t k = 0;
    for (; i < j && k + 1 < cap; i++)
        if (lx->src[i] != '_') buf[k++] = lx->src[i];
    buf[k] = 0;
}

/* Lexes an integer (decimal, 0b, 0o, 0x) or a float starting at i. */
static jtok lex_number(jlexer *lx, size_t i) {
    jtok t = {.type = JT_INT, .pos = (uint32_t)i, .text = lx->src + i};
    char buf[128];
    int base = 10;
    size_t j = i;
    if (lx->src[i] == '0' && i + 1 < lx->len && strchr("bBoOxX", lx->src[i + 1]) &&
        lx->src[i + 1]) {
        char p = (char)(lx->src[i + 1] | 0x20);
        base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
        size_t k = i + 2 + (i + 2 < lx->len && lx->src[i + 2] == '_');
        j = scan_digits(lx, k, base);
        if (j == k) return lex_error(lx, i, "invalid integer literal");
        copy_digits(lx, k, j, buf, sizeof buf);
    } else {
        j = scan_digits(lx, i, 10);
        bool is_float = false;
        if (j + 1 < lx->len && lx->src[j] == '.' && lx->src[j + 1] >= '0' &&
            lx->src[j + 1] <= '9') {
            j = scan_digits(lx, j + 1, 10);
            is_float = true;
        }
        if (j < lx->len && (lx->src[j] == 'e' || lx->src[j] == 'E')) {
            size_t k = j + 1;
            if (k < lx->len && (lx->src[k] == '+' || lx->src[k] == '-')) k++;
            size_t e = scan_digits(lx, k, 10);
            if (e > k) {
                j = e;
                is_float = true;
            }
        }
        copy_digits(lx, i, j, buf, sizeof buf);
        if (is_float) {
            t.type = JT_FLOAT;
            t.fval = strtod(buf, NULL);
        }
    }
    if (t.type == JT_INT) {
        unsigned long long v = strtoull(buf, NULL, base);
        if (j - i > 100 || v > (unsigned long long)INT64_MAX)
            return lex_error(lx, i, "integer literal too large");
        t.ival = (int64_t)v;
    }
    t.len = j - i;
    lx->pos = j;
    return t;
}

/* Letters, digits and underscores make names. */
static bool is_name_char(unsigned char c) {
    return c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

/* The operators, longest first. */
static const char *const operators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                        "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                        "]",  "{",  "}",  ",",  ".",  ":",  "|", ";"};

/* Lexes one token inside a tag at lx->pos (whitespace already skipped). */
static jtok lex_in_tag(jlexer *lx) {
    size_t i = lx->pos;
    unsigned char c = (unsigned char)lx->src[i];
    if (c == '\'' || c == '"') return lex_string(lx, i);
    if (c >= '0' && c <= '9') return lex_number(lx, i);
    if (is_name_char(c) && !(c >= '0' && c <= '9')) {
        size_t j = i;
        while (j < lx->len && is_name_char((unsigned char)lx->src[j])) j++;
        lx->pos = j;
        jtok t = {.type = JT_NAME, .pos = (uint32_t)i, .text = lx->src + i, .len = j - i};
        return t;
    }
    for (size_t k = 0; k < sizeof operators / sizeof *operators; k++) {
        if (!at(lx, i, operators[k])) continue;
        size_t n = strlen(operators[k]);
        char o = operators[k][0];
        if (n == 1 && (o == '(' || o == '[' || o == '{')) lx->depth++;
        if (n == 1 && (o == ')' || o == ']' || o == '}') && lx->depth > 0) lx->depth--;
        lx->pos = i + n;
        jtok t = {.type = JT_OP, .pos = (uint32_t)i, .text = lx->src + i, .len = n};
        return t;
    }
    return lex_error(lx, i, "unexpected character in tag");
}

/* Inside a tag: the closing delimiter (at bracket depth 0) or a token. */
static jtok lex_tag(jlexer *lx) {
    lx->pos = skip_space(lx->src, lx->len, lx->pos);
    size_t i = lx->pos;
    if (i >= lx->len) return lex_error(lx, i, "unexpected end of template inside a tag");
    const char *close = lx->state == 1 ? "}}" : "%}";
    if (lx->depth == 0) {
        bool minus = at(lx, i, "-") && at(lx, i + 1, close);
        bool plus = lx->state == 2 && at(lx, i, "+") && at(lx, i + 1, close);
        if (minus || plus || at(lx, i, close)) {
            jtok t = {.type = lx->state == 1 ? JT_VAR_END : JT_BLOCK_END, .pos = (uint32_t)i};
            lx->pos = i + 2 + (minus || plus);
            lx->strip_next = minus;
            lx->trim_next = lx->state == 2 && !minus && !plus;
            lx->state = 0;
            return t;
        }
    }
    return lex_in_tag(lx);
}

jtok nu_jlex_next(jlexer *lx) {
    if (lx->failed) return lex_error(lx, lx->pos, "");
    if (lx->open_pending) {
        lx->open_pending = false;
        jtok t = {.type = lx->state == 1 ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, .pos = lx->open_pos};
        return t;
    }
    if (lx->raw_pending) {
        lx->raw_pending = false;
        return lex_raw(lx, lx->raw_tag, lx->pos);
    }
    if (lx->state != 0) return lex_tag(lx);
    if (lx->pos >= lx->len) {
        jtok t = {.type = JT_EOF, .pos = (uint32_t)lx->len};
        return t;
    }
    return lex_data(lx);
}
