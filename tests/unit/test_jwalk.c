/*
 * jwalk: members and elements of objects and arrays, nested values skipped
 * whole, strings with escapes and brackets inside, bytes that stop the walk
 * (cut or not JSON), and token counts.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/jwalk.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* An exact-size heap copy, so that ASan sees any read past the end. The caller frees it. */
static char *
copy_of(const char *text, size_t len)
{
    char *copy = malloc(len ? len : 1);
    cr_assert_not_null(copy);
    memcpy(copy, text, len);
    return copy;
}

static bool
span_eq(sl_jval_t v, const char *want)
{
    return sl_jval_is(v, want);
}

#define MAX_ITEMS 8

typedef struct {
    const char *text;
    char open;
    size_t n;
    const char *keys[MAX_ITEMS]; /* raw bytes; unused for arrays */
    const char *values[MAX_ITEMS];
} walk_case_t;

static const walk_case_t good[] = {
    {"{\"a\":1,\"b\" : \"x\" ,\n\t\"c\":null}", '{', 3, {"a", "b", "c"}, {"1", "\"x\"", "null"}},
    {"{}", '{', 0, {0}, {0}},
    {" \r\n{ }", '{', 0, {0}, {0}},
    {"{\"a\":{\"b\":[1,{\"c\":2}],\"d\":{}},\"e\":3}",
     '{',
     2,
     {"a", "e"},
     {"{\"b\":[1,{\"c\":2}],\"d\":{}}", "3"}},
    /* escapes and brackets inside strings, in keys and values */
    {"{\"k\\\"}\":\"v\\\\\\\"{[\",\"n\":\"}]\",\"u\":\"\\u0022\"}",
     '{',
     3,
     {"k\\\"}", "n", "u"},
     {"\"v\\\\\\\"{[\"", "\"}]\"", "\"\\u0022\""}},
    {"{\"s\":{\"t\":\"}}}\\\"{\"},\"z\":true}", '{', 2, {"s", "z"}, {"{\"t\":\"}}}\\\"{\"}", "true"}},
    {"[1, \"two\" ,[3,[]], {\"four\":4},null,-2.5e3]",
     '[',
     6,
     {0},
     {"1", "\"two\"", "[3,[]]", "{\"four\":4}", "null", "-2.5e3"}},
    {"[]", '[', 0, {0}, {0}},
    {"[ [ ] ]", '[', 1, {0}, {"[ ]"}},
};

Test(jwalk, members_and_elements)
{
    for (size_t i = 0; i < N(good); i++) {
        const walk_case_t *c = &good[i];
        size_t len = strlen(c->text);
        char *text = copy_of(c->text, len);
        sl_jwalk_t w;
        sl_jval_t key, value;
        cr_assert(sl_jwalk_open((sl_jval_t){text, text + len}, c->open, &w), "%s: open", c->text);
        size_t n = 0;
        while (sl_jwalk_next(&w, c->open == '{' ? &key : NULL, &value)) {
            cr_assert_lt(n, c->n, "%s: more than %zu items", c->text, c->n);
            if (c->open == '{')
                cr_assert(span_eq(key, c->keys[n]), "%s: key %zu is %.*s", c->text, n, (int)(key.end - key.p),
                          key.p);
            cr_assert(span_eq(value, c->values[n]), "%s: value %zu is %.*s", c->text, n,
                      (int)(value.end - value.p), value.p);
            n++;
        }
        cr_assert_not(w.bad, "%s: bad", c->text);
        cr_assert_eq(n, c->n, "%s: %zu items", c->text, n);
        cr_assert_eq(w.p, text + len, "%s: the walk ends past the closing byte", c->text);
        free(text);
    }
}

/* Walks a whole container and returns whether the walk went bad. */
static bool
walk_all_bad(const char *text, size_t len, char open)
{
    char *copy = copy_of(text, len);
    sl_jwalk_t w;
    sl_jval_t key, value;
    cr_assert(sl_jwalk_open((sl_jval_t){copy, copy + len}, open, &w), "%.*s: open", (int)len, text);
    while (sl_jwalk_next(&w, open == '{' ? &key : NULL, &value))
        ;
    free(copy);
    return w.bad;
}

/* The walk sees the bytes up to the end it is given: every proper prefix of a container is cut. */
Test(jwalk, cut_input_is_bad)
{
    for (size_t i = 0; i < N(good); i++) {
        const char *text = good[i].text;
        size_t len = strlen(text);
        size_t start = (size_t)(strchr(text, good[i].open) - text);
        for (size_t n = start + 1; n < len; n++)
            cr_assert(walk_all_bad(text, n, good[i].open), "%s cut at %zu", text, n);
    }
}

Test(jwalk, bytes_that_are_not_json_are_bad)
{
    static const char *const objects[] = {
        "{\"a\":1 \"b\":2}", /* no comma */
        "{\"a\" 1}",         /* no colon */
        "{a:1}",             /* not a string key */
        "{\"a\":1,}",        /* trailing comma */
        "{,}",
        "{\"a\":}",
        "{\"a\":1]",
        "{\"a\":\"x}", /* the string runs to the end */
        "{\"a\":\"x\\\"}",
        "{\"a\":{\"b\":1}",
        "{\"a\":1,\"b\":{]",
    };
    for (size_t i = 0; i < N(objects); i++)
        cr_assert(walk_all_bad(objects[i], strlen(objects[i]), '{'), "%s", objects[i]);
    static const char *const arrays[] = {"[1 2]", "[1,]", "[,]", "[1}", "[\"a\":1]"};
    for (size_t i = 0; i < N(arrays); i++)
        cr_assert(walk_all_bad(arrays[i], strlen(arrays[i]), '['), "%s", arrays[i]);
}

Test(jwalk, open_needs_the_opening_byte)
{
    static const char *const texts[] = {"", "  ", "[]", "\"{\"", "null", "x{}"};
    for (size_t i = 0; i < N(texts); i++) {
        size_t len = strlen(texts[i]);
        char *text = copy_of(texts[i], len);
        sl_jwalk_t w = {.p = NULL, .bad = true};
        cr_assert_not(sl_jwalk_open((sl_jval_t){text, text + len}, '{', &w), "%s", texts[i]);
        cr_assert(w.p == NULL && w.bad, "%s: the walk is left untouched", texts[i]);
        free(text);
    }
}

Test(jwalk, skip_space_and_value)
{
    static const struct {
        const char *text;
        long end; /* where the value ends, -1 for none */
    } values[] = {
        {"true,", 4},    {"-12.5e+3}", 8},  {"\"a\\\"b\" ", 6},
        {"\"a\\\"", -1}, {"\"\\", -1},      {"{\"a\":\"}\"} x", 9},
        {"[[],{}]]", 7}, {"{\"a\":[}", -1}, {"", -1},
        {",", -1},       {" 1", -1}, /* no whitespace is skipped */
    };
    for (size_t i = 0; i < N(values); i++) {
        size_t len = strlen(values[i].text);
        char *text = copy_of(values[i].text, len);
        const char *end = sl_jval_skip_value(text, text + len);
        if (values[i].end < 0)
            cr_assert_null(end, "%s", values[i].text);
        else
            cr_assert_eq(end, text + values[i].end, "%s", values[i].text);
        free(text);
    }
    static const char spaced[] = " \t\r\n x ";
    cr_assert_eq(sl_jval_skip_space(spaced, spaced + 7), spaced + 5);
    cr_assert_eq(sl_jval_skip_space(spaced, spaced + 3), spaced + 3);
}

Test(jwalk, is_compares_raw_bytes)
{
    static const char text[] = "null nul \\u006eull";
    cr_assert(sl_jval_is((sl_jval_t){text, text + 4}, "null"));
    cr_assert_not(sl_jval_is((sl_jval_t){text + 5, text + 8}, "null"));
    cr_assert_not(sl_jval_is((sl_jval_t){text, text + 5}, "null"));
    cr_assert_not(sl_jval_is((sl_jval_t){text + 9, text + 18}, "null"), "escapes are not decoded");
    cr_assert(sl_jval_is((sl_jval_t){text, text}, ""));
}

Test(jwalk, counts_are_plain_digits_that_fit)
{
    static const struct {
        const char *text;
        int64_t want;
    } counts[] = {
        {"0", 0},
        {"42", 42},
        {"007", 7}, /* not JSON, but the walk is no validation */
        {"999999999999999999", 999999999999999999},
        {"1000000000000000000", -1}, /* 19 digits */
        {"99999999999999999999999", -1},
        {"-1", -1},
        {"-0", -1},
        {"+1", -1},
        {"1.0", -1},
        {"1e3", -1},
        {"\"7\"", -1},
        {"null", -1},
        {"true", -1},
        {"{}", -1},
        {"", -1},
    };
    for (size_t i = 0; i < N(counts); i++) {
        size_t len = strlen(counts[i].text);
        char *text = copy_of(counts[i].text, len);
        cr_assert_eq(sl_jval_count((sl_jval_t){text, text + len}), counts[i].want, "%s", counts[i].text);
        free(text);
    }
}
