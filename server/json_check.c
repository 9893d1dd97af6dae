/* json_check.c - the strict RFC 8259 check of request bodies (json_check.h).
 *
 * One pass over the bytes with an explicit stack (no recursion, so nesting
 * costs no C stack). Object keys are unescaped into one arena as they are
 * read; when an object closes, its keys are sorted and neighbours compared,
 * so a body of k keys costs O(k log k) whatever its shape. The arena and the
 * key list are stacks: a closed object's keys are dropped, and its parent's
 * keys lie below them. */
#include "json_check.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

typedef struct json_key {
    size_t off, len;  /* the unescaped key in the arena */
    size_t at;        /* byte offset of its opening quote in the body */
    const char *text; /* set while its object's keys are sorted */
} json_key;

typedef struct json_scan {
    const char *s;
    size_t n, i;
    char *msg;
    size_t cap;
    int depth;
    bool object[SRV_JSON_MAX_DEPTH];       /* per open level: object (true) or array */
    size_t first_key[SRV_JSON_MAX_DEPTH];  /* per open object: its first key in keys */
    size_t first_byte[SRV_JSON_MAX_DEPTH]; /* and where its keys start in the arena */
    json_key *keys;
    size_t n_keys, cap_keys;
    char *arena;
    size_t arena_len, arena_cap;
    const char *want; /* json_member_text: the top-level key looked for */
    bool capture;     /* its value comes next */
    size_t found, found_len;
} json_scan;

static bool failf(json_scan *sc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool failf(json_scan *sc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sc->msg, sc->cap, fmt, ap);
    va_end(ap);
    return false;
}

/* "not valid JSON: WHAT at byte N" for the byte at i. */
static bool syntax(json_scan *sc, const char *what) {
    if (sc->i >= sc->n)
        return failf(sc, "the request body is not valid JSON: %s at its end (byte %zu)", what,
                     sc->i);
    return failf(sc, "the request body is not valid JSON: %s at byte %zu", what, sc->i);
}

static void skip_ws(json_scan *sc) {
    while (sc->i < sc->n) {
        char c = sc->s[sc->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        sc->i++;
    }
}

static bool arena_put(json_scan *sc, const char *p, size_t n) {
    if (sc->arena_len + n > sc->arena_cap) {
        size_t cap = sc->arena_cap ? sc->arena_cap : 256;
        while (cap < sc->arena_len + n) cap *= 2;
        char *a = realloc(sc->arena, cap);
        if (!a) return failf(sc, "out of memory checking the request body");
        sc->arena = a;
        sc->arena_cap = cap;
    }
    memcpy(sc->arena + sc->arena_len, p, n);
    sc->arena_len += n;
    return true;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The four hex digits after "\u" at i (i at the 'u'); -1 when malformed. */
static long hex4(const json_scan *sc, size_t i) {
    if (i + 5 > sc->n) return -1;
    long v = 0;
    for (size_t k = 1; k <= 4; k++) {
        int h = hex_value(sc->s[i + k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Appends code point cp as UTF-8. */
static bool put_code_point(json_scan *sc, uint32_t cp) {
    char b[NU_UTF8_MAX];
    return arena_put(sc, b, nu_utf8_encode(cp, b));
}

/* A \u escape at i (the 'u'), with its low surrogate when it is a high one;
 * the code point is appended when keep is set. */
static bool unicode_escape(json_scan *sc, bool keep) {
    long v = hex4(sc, sc->i);
    if (v < 0) return syntax(sc, "a \\u escape without four hex digits");
    if (v == 0)
        return failf(sc, "NUL characters (\\u0000) are not allowed in strings (byte %zu)",
                     sc->i - 1);
    uint32_t cp = (uint32_t)v;
    if (v >= 0xDC00 && v <= 0xDFFF)
        return failf(sc, "a lone UTF-16 surrogate (\\u%04lx) at byte %zu", v, sc->i - 1);
    if (v >= 0xD800 && v <= 0xDBFF) {
        long lo = sc->i + 6 < sc->n && sc->s[sc->i + 4 + 1] == '\\' && sc->s[sc->i + 6] == 'u'
                      ? hex4(sc, sc->i + 6)
                      : -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return failf(sc, "a lone UTF-16 surrogate (\\u%04lx) at byte %zu", v, sc->i - 1);
        cp = 0x10000 + (((uint32_t)v - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
        sc->i += 6;
    }
    sc->i += 5;
    return !keep || put_code_point(sc, cp);
}

/* A string at i (its opening quote); unescaped into the arena when keep. */
static bool string(json_scan *sc, bool keep) {
    sc->i++;
    for (;;) {
        if (sc->i >= sc->n) return syntax(sc, "an unterminated string");
        unsigned char c = (unsigned char)sc->s[sc->i];
        if (c == '"') {
            sc->i++;
            return true;
        }
        if (c == 0)
            return failf(sc,
                         "the request body has a raw NUL byte inside a string at byte %zu "
                         "(JSON strings cannot hold NUL)",
                         sc->i);
        if (c < 0x20)
            return failf(sc,
                         "the request body has a raw control character (U+%04X) inside a string "
                         "at byte %zu; JSON requires it escaped (\\u%04x)",
                         c, sc->i, c);
        if (c != '\\') {
            size_t len = nu_utf8_decode(sc->s + sc->i, sc->n - sc->i, NULL);
            if (len == 0) return syntax(sc, "invalid UTF-8");
            if (keep && !arena_put(sc, sc->s + sc->i, len)) return false;
            sc->i += len;
            continue;
        }
        sc->i++;
        char e = sc->i < sc->n ? sc->s[sc->i] : 0, out;
        switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u':
            if (!unicode_escape(sc, keep)) return false;
            continue;
        default: return syntax(sc, "an invalid escape in a string");
        }
        if (keep && !arena_put(sc, &out, 1)) return false;
        sc->i++;
    }
}

static bool digits(json_scan *sc) {
    size_t start = sc->i;
    while (sc->i < sc->n && sc->s[sc->i] >= '0' && sc->s[sc->i] <= '9') sc->i++;
    return sc->i > start;
}

/* -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)? */
static bool number(json_scan *sc) {
    if (sc->s[sc->i] == '-') sc->i++;
    if (sc->i < sc->n && sc->s[sc->i] == '0') {
        sc->i++;
        if (sc->i < sc->n && sc->s[sc->i] >= '0' && sc->s[sc->i] <= '9')
            return syntax(sc, "a number with a leading zero");
    } else if (!digits(sc)) {
        return syntax(sc, "a malformed number");
    }
    if (sc->i < sc->n && sc->s[sc->i] == '.') {
        sc->i++;
        if (!digits(sc)) return syntax(sc, "a number without digits after its '.'");
    }
    if (sc->i < sc->n && (sc->s[sc->i] == 'e' || sc->s[sc->i] == 'E')) {
        sc->i++;
        if (sc->i < sc->n && (sc->s[sc->i] == '+' || sc->s[sc->i] == '-')) sc->i++;
        if (!digits(sc)) return syntax(sc, "a number without digits in its exponent");
    }
    return true;
}

static bool literal(json_scan *sc, const char *word) {
    size_t len = strlen(word);
    if (sc->n - sc->i < len || memcmp(sc->s + sc->i, word, len))
        return syntax(sc, "expected a value");
    sc->i += len;
    return true;
}

/* A key at i: its string unescaped into the arena and listed. */
static bool key(json_scan *sc) {
    if (sc->i >= sc->n || sc->s[sc->i] != '"') return syntax(sc, "expected a key (a string)");
    if (sc->n_keys == sc->cap_keys) {
        size_t cap = sc->cap_keys ? 2 * sc->cap_keys : 32;
        json_key *k = realloc(sc->keys, cap * sizeof *k);
        if (!k) return failf(sc, "out of memory checking the request body");
        sc->keys = k;
        sc->cap_keys = cap;
    }
    json_key *k = &sc->keys[sc->n_keys];
    k->off = sc->arena_len;
    k->at = sc->i;
    if (!string(sc, true)) return false;
    k->len = sc->arena_len - k->off;
    sc->n_keys++;
    sc->capture = sc->want && sc->depth == 1 && k->len == strlen(sc->want) &&
                  !memcmp(sc->arena + k->off, sc->want, k->len);
    skip_ws(sc);
    if (sc->i >= sc->n || sc->s[sc->i] != ':') return syntax(sc, "expected ':' after a key");
    sc->i++;
    return true;
}

static int key_order(const void *a, const void *b) {
    const json_key *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    int c = memcmp(x->text, y->text, x->len);
    if (c) return c;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* The keys of the object that closes: none twice. Then they are dropped. */
static bool unique_keys(json_scan *sc) {
    size_t first = sc->first_key[sc->depth - 1], n = sc->n_keys - first;
    json_key *k = sc->keys + first;
    /* the arena is still NULL when every key so far was empty ("") */
    for (size_t j = 0; j < n; j++) k[j].text = sc->arena ? sc->arena + k[j].off : "";
    qsort(k, n, sizeof *k, key_order);
    for (size_t j = 1; j < n; j++) {
        if (k[j].len != k[j - 1].len || memcmp(k[j].text, k[j - 1].text, k[j].len)) continue;
        char shown[64];
        size_t m = k[j].len < sizeof shown - 1 ? k[j].len : sizeof shown - 1;
        for (size_t b = 0; b < m; b++) {
            unsigned char c = (unsigned char)k[j].text[b];
            shown[b] = c >= 0x20 && c < 0x7F ? (char)c : '?';
        }
        shown[m] = 0;
        return failf(sc,
                     "the request body has the key \"%s\"%s twice in one object (at bytes %zu "
                     "and %zu); each key may appear once",
                     shown, m < k[j].len ? "..." : "", k[j - 1].at, k[j].at);
    }
    sc->arena_len = sc->first_byte[sc->depth - 1];
    sc->n_keys = first;
    return true;
}

/* Opens an array or object at i. */
static bool open_level(json_scan *sc, bool object) {
    if (sc->depth == SRV_JSON_MAX_DEPTH)
        return failf(sc,
                     "the request body nests arrays and objects more than %d deep (at byte %zu)",
                     SRV_JSON_MAX_DEPTH, sc->i);
    sc->object[sc->depth] = object;
    sc->first_key[sc->depth] = sc->n_keys;
    sc->first_byte[sc->depth] = sc->arena_len;
    sc->depth++;
    sc->i++;
    return true;
}

/* A value at i; containers are opened (and their first key read). *open
 * tells whether the value is still open (a non-empty container). */
static bool value(json_scan *sc, bool *open) {
    *open = false;
    if (sc->i >= sc->n) return syntax(sc, "expected a value");
    char c = sc->s[sc->i];
    if (c == '{' || c == '[') {
        sc->capture = false;
        if (!open_level(sc, c == '{')) return false;
        skip_ws(sc);
        if (sc->i < sc->n && sc->s[sc->i] == (c == '{' ? '}' : ']')) {
            sc->i++;
            sc->depth--;
            return true;
        }
        *open = true;
        return c == '[' || key(sc);
    }
    size_t start = sc->i;
    bool ok = c == '"'                             ? string(sc, false)
              : c == '-' || (c >= '0' && c <= '9') ? number(sc)
              : c == 't'                           ? literal(sc, "true")
              : c == 'f'                           ? literal(sc, "false")
              : c == 'n'                           ? literal(sc, "null")
                                                   : syntax(sc, "expected a value");
    if (ok && sc->capture) sc->found = start, sc->found_len = sc->i - start;
    sc->capture = false;
    return ok;
}

/* After a complete value inside a container: ',' and the next member, or
 * the container's end. *more tells whether a value follows. */
static bool after_value(json_scan *sc, bool *more) {
    bool object = sc->object[sc->depth - 1];
    char close = object ? '}' : ']';
    if (sc->i < sc->n && sc->s[sc->i] == ',') {
        sc->i++;
        skip_ws(sc);
        *more = true;
        return !object || key(sc);
    }
    if (sc->i < sc->n && sc->s[sc->i] == close) {
        if (object && !unique_keys(sc)) return false;
        sc->i++;
        sc->depth--;
        *more = false;
        return true;
    }
    return syntax(sc, object ? "expected ',' or '}'" : "expected ',' or ']'");
}

static bool scan_body(json_scan *sc) {
    bool expect_value = true;
    for (;;) {
        skip_ws(sc);
        if (expect_value) {
            bool open;
            if (!value(sc, &open)) return false;
            expect_value = open;
            continue;
        }
        if (sc->depth == 0) break;
        if (!after_value(sc, &expect_value)) return false;
    }
    if (sc->i < sc->n) return syntax(sc, "data after the JSON value");
    return true;
}

/* Checks the body; with want, *found / *found_len get the text of that
 * top-level member's scalar value (found_len 0: none). */
static bool check(const char *body, size_t n, const char *want, size_t *found, size_t *found_len,
                  char *msg, size_t cap) {
    size_t bad;
    if (!nu_utf8_valid(body, n, &bad)) {
        snprintf(msg, cap, "the request body is not valid UTF-8 (byte %zu)", bad);
        return false;
    }
    json_scan *sc = calloc(1, sizeof *sc);
    if (!sc) {
        snprintf(msg, cap, "out of memory checking the request body");
        return false;
    }
    sc->s = body;
    sc->n = n;
    sc->msg = msg;
    sc->cap = cap;
    sc->want = want;
    bool ok =
        n > 0 ? scan_body(sc) : failf(sc, "the request body is empty (a JSON object is needed)");
    if (found) *found = sc->found, *found_len = sc->found_len;
    free(sc->keys);
    free(sc->arena);
    free(sc);
    return ok;
}

bool json_body_check(const char *body, size_t n, char *msg, size_t cap) {
    return check(body, n, NULL, NULL, NULL, msg, cap);
}

size_t json_member_text(const char *body, size_t n, const char *key, const char **text) {
    char msg[160];
    size_t at = 0, len = 0;
    if (!check(body, n, key, &at, &len, msg, sizeof msg)) return 0;
    *text = body + at;
    return len;
}
