/* utf8.c - decoding and encoding UTF-8 (see utf8.h). */
#include "utf8.h"

size_t nu_utf8_lead_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

/* The allowed range of the second byte after each lead (Unicode Table 3-7):
 * it is what rules out overlong forms, surrogates and values past U+10FFFF. */
static bool second_byte_ok(unsigned char lead, unsigned char b) {
    switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return (b & 0xC0) == 0x80;
    }
}

size_t nu_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    const unsigned char *u = (const unsigned char *)s;
    size_t k = nu_utf8_lead_len(u[0]);
    if (k == 0 || k > n) return 0;
    if (k == 1) {
        if (cp) *cp = u[0];
        return 1;
    }
    if (!second_byte_ok(u[0], u[1])) return 0;
    uint32_t v = u[0] & (0x7Fu >> k);
    for (size_t i = 1; i < k; i++) {
        if ((u[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (u[i] & 0x3Fu);
    }
    if (cp) *cp = v;
    return k;
}

size_t nu_utf8_encode(uint32_t cp, char out[NU_UTF8_MAX]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) return 0;
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool nu_utf8_valid(const char *s, size_t n, size_t *bad) {
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) {
            i++; /* the common case, without a call */
            continue;
        }
        size_t k = nu_utf8_decode(s + i, n - i, NULL);
        if (k == 0) {
            if (bad) *bad = i;
            return false;
        }
        i += k;
    }
    return true;
}

size_t nu_utf8_incomplete_tail(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    /* A character is at most 4 bytes: its lead is within the last 3. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = u[n - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation: look further back */
        size_t k = nu_utf8_lead_len(c);
        if (k <= back) return 0; /* complete (or not a lead at all) */
        if (back >= 2 && !second_byte_ok(c, u[n - back + 1])) return 0;
        return back;
    }
    return 0;
}

uint32_t nu_utf8_next_escaped(const char *s, size_t n, size_t *i) {
    uint32_t cp;
    size_t k = nu_utf8_decode(s + *i, n - *i, &cp);
    if (k == 0) return 0xDC00 + (unsigned char)s[(*i)++];
    *i += k;
    return cp;
}

size_t nu_utf8_put_escaped(uint32_t cp, char out[NU_UTF8_MAX]) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) { /* an undecodable byte, given back */
        out[0] = (char)(cp - 0xDC00);
        return 1;
    }
    return nu_utf8_encode(cp, out);
}
