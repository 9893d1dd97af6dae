/* test_base.c - base's growable buffer and UTF-8 decoder/encoder.
 *
 * The UTF-8 cases are the well-formed and ill-formed byte sequences of
 * Unicode's Table 3-7 ("Well-Formed UTF-8 Byte Sequences", Unicode 15.0,
 * section 3.9) and RFC 3629 section 4: boundary values of each length,
 * overlong forms, surrogates, values past U+10FFFF, stray continuation bytes
 * and sequences cut short. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "utf8.h"

typedef struct utf8_case {
    const char *bytes;
    size_t n;
    size_t len;  /* expected length of the first character (0: ill-formed) */
    uint32_t cp; /* its code point */
} utf8_case;

#define CASE(s, len, cp)                                                                           \
    { s, sizeof s - 1, len, cp }

static const utf8_case cases[] = {
    CASE("A", 1, 0x41),
    CASE("\x7F", 1, 0x7F),
    CASE("\xC2\x80", 2, 0x80),             /* the first two-byte value */
    CASE("\xDF\xBF", 2, 0x7FF),            /* the last */
    CASE("\xE0\xA0\x80", 3, 0x800),        /* the first three-byte value */
    CASE("\xED\x9F\xBF", 3, 0xD7FF),       /* just below the surrogates */
    CASE("\xEE\x80\x80", 3, 0xE000),       /* just above them */
    CASE("\xEF\xBF\xBF", 3, 0xFFFF),       /* the last three-byte value */
    CASE("\xF0\x90\x80\x80", 4, 0x10000),  /* the first four-byte value */
    CASE("\xF4\x8F\xBF\xBF", 4, 0x10FFFF), /* the last code point */
    CASE("\xE2\x82\xAC", 3, 0x20AC),       /* EURO SIGN */
    CASE("\xF0\x9F\x98\x80", 4, 0x1F600),  /* GRINNING FACE */
    CASE("\x80", 0, 0),                    /* a lone continuation byte */
    CASE("\xBF", 0, 0),
    CASE("\xC0\x80", 0, 0),         /* overlong NUL */
    CASE("\xC1\xBF", 0, 0),         /* overlong U+007F */
    CASE("\xE0\x9F\xBF", 0, 0),     /* overlong U+07FF */
    CASE("\xF0\x8F\xBF\xBF", 0, 0), /* overlong U+FFFF */
    CASE("\xED\xA0\x80", 0, 0),     /* U+D800, a surrogate */
    CASE("\xED\xBF\xBF", 0, 0),     /* U+DFFF */
    CASE("\xF4\x90\x80\x80", 0, 0), /* U+110000 */
    CASE("\xF5\x80\x80\x80", 0, 0), /* a lead byte that never occurs */
    CASE("\xFF", 0, 0),             /* another */
    CASE("\xC3", 0, 0),             /* cut short */
    CASE("\xE2\x82", 0, 0),         /* cut short */
    CASE("\xF0\x9F\x98", 0, 0),     /* cut short */
    CASE("\xE2\x28\xA1", 0, 0),     /* second byte not a continuation */
    CASE("\xF0\x9F\x28\x80", 0, 0), /* third byte not a continuation */
    CASE("\xC3\xA9xyz", 2, 0xE9),   /* only the first character counts */
};

static void test_utf8_decode_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t cp = 0xDEADBEEF;
        size_t len = nu_utf8_decode(cases[i].bytes, cases[i].n, &cp);
        if (len != cases[i].len)
            fail_msg("case %zu: length %zu, expected %zu", i, len, cases[i].len);
        if (len) assert_int_equal(cp, cases[i].cp);
        if (!len) assert_int_equal(cp, 0xDEADBEEF); /* untouched when ill-formed */
        assert_int_equal(nu_utf8_decode(cases[i].bytes, cases[i].n, NULL), len);
        size_t bad = 99;
        bool valid = nu_utf8_valid(cases[i].bytes, cases[i].n, &bad);
        assert_int_equal(valid,
                         len == cases[i].n ||
                             (len && nu_utf8_valid(cases[i].bytes + len, cases[i].n - len, NULL)));
        if (!len) assert_int_equal(bad, 0);
    }
    assert_int_equal(nu_utf8_decode("", 0, NULL), 0);
}

/* Every Unicode scalar value encodes and decodes back, with the length the
 * ranges of Table 3-7 give; surrogates and values past U+10FFFF do not encode. */
static void test_utf8_round_trip(void **state) {
    (void)state;
    for (uint32_t cp = 0; cp <= 0x110001; cp++) {
        char u[NU_UTF8_MAX];
        size_t n = nu_utf8_encode(cp, u);
        if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
            assert_int_equal(n, 0);
            continue;
        }
        size_t want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        assert_int_equal(n, want);
        assert_int_equal(nu_utf8_lead_len((unsigned char)u[0]), want);
        uint32_t back = 0;
        assert_int_equal(nu_utf8_decode(u, n, &back), n);
        assert_int_equal(back, cp);
        if (n > 1) assert_int_equal(nu_utf8_decode(u, n - 1, NULL), 0); /* cut short */
    }
}

static void test_utf8_valid_offset(void **state) {
    (void)state;
    const char *s = "ab\xC3\xA9"
                    "cd\xED\xA0\x80"
                    "e";
    size_t bad = 0;
    assert_false(nu_utf8_valid(s, strlen(s), &bad));
    assert_int_equal(bad, 6);
    assert_true(nu_utf8_valid(s, 6, NULL));
}

static void test_utf8_incomplete_tail(void **state) {
    (void)state;
    assert_int_equal(nu_utf8_incomplete_tail("abc", 3), 0);
    assert_int_equal(nu_utf8_incomplete_tail("ab\xC3", 3), 1);
    assert_int_equal(nu_utf8_incomplete_tail("ab\xC3\xA9", 4), 0);
    assert_int_equal(nu_utf8_incomplete_tail("\xF0\x9F\x98", 3), 3);
    assert_int_equal(nu_utf8_incomplete_tail("\xF0\x9F", 2), 2);
    assert_int_equal(nu_utf8_incomplete_tail("\xF0\x9F\x98\x80", 4), 0);
    assert_int_equal(nu_utf8_incomplete_tail("\xE2\x82", 2), 2);
    /* bytes that can never complete are not held back */
    assert_int_equal(nu_utf8_incomplete_tail("a\xC0", 2), 0);
    assert_int_equal(nu_utf8_incomplete_tail("a\xED\xA0", 3), 0);
    assert_int_equal(nu_utf8_incomplete_tail("a\x80", 2), 0);
    assert_int_equal(nu_utf8_incomplete_tail("", 0), 0);
}

static void test_buf_append(void **state) {
    (void)state;
    nu_buf b = {0};
    assert_null(b.data);
    nu_buf_puts(&b, "one");
    nu_buf_putc(&b, ' ');
    nu_buf_add(&b, "two three", 3);
    nu_buf_printf(&b, " %d-%s", 3, "x");
    assert_false(b.failed);
    assert_string_equal(b.data, "one two 3-x");
    assert_int_equal(b.len, strlen("one two 3-x"));
    nu_buf_clear(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    /* printf output longer than any fixed scratch: nothing cut */
    char big[5000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = 0;
    nu_buf_printf(&b, "<%s>", big);
    assert_int_equal(b.len, sizeof big + 1);
    assert_int_equal(b.data[0], '<');
    assert_int_equal(b.data[b.len - 1], '>');
    assert_int_equal(b.data[b.len], 0);
    /* embedded NUL bytes are kept */
    nu_buf_clear(&b);
    nu_buf_add(&b, "a\0b", 3);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data, "a\0b", 3);
    nu_buf_put_utf8(&b, 0x20AC);
    assert_memory_equal(b.data + 3, "\xE2\x82\xAC", 3);
    assert_false(b.failed);
    nu_buf_put_utf8(&b, 0xD800);
    assert_true(b.failed);
    nu_buf_free(&b);
    assert_null(b.data);
}

static void test_buf_limit_and_take(void **state) {
    (void)state;
    nu_buf b = {.limit = 8};
    nu_buf_puts(&b, "12345678");
    assert_false(b.failed);
    nu_buf_putc(&b, '9'); /* one past the limit */
    assert_true(b.failed);
    nu_buf_puts(&b, "more"); /* no-op after a failure */
    assert_int_equal(b.len, 8);
    assert_null(nu_buf_take(&b)); /* a failed buffer gives nothing (and frees) */
    assert_null(b.data);
    assert_int_equal(b.limit, 8);
    assert_false(b.failed);

    nu_buf e = {0};
    char *empty = nu_buf_take(&e);
    assert_non_null(empty);
    assert_string_equal(empty, "");
    free(empty);

    nu_buf t = {0};
    nu_buf_puts(&t, "kept");
    char *s = nu_buf_take(&t);
    assert_string_equal(s, "kept");
    assert_null(t.data);
    assert_int_equal(t.len, 0);
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_decode_table), cmocka_unit_test(test_utf8_round_trip),
        cmocka_unit_test(test_utf8_valid_offset), cmocka_unit_test(test_utf8_incomplete_tail),
        cmocka_unit_test(test_buf_append),        cmocka_unit_test(test_buf_limit_and_take),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
