/* jscan: validation verdicts, error offsets, field extraction, sealed-history flags, text of a message. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jscan.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Scans from an exact-size heap copy so that ASan sees any read past the end. */
static bool
scan(const char *body, size_t len, sl_jscan_t *out)
{
    char *copy = malloc(len ? len : 1);
    memcpy(copy, body, len);
    bool ok = sl_jscan(copy, len, out);
    free(copy);
    return ok;
}

static bool
scan_str(const char *body, sl_jscan_t *out)
{
    return scan(body, strlen(body), out);
}

/* The decoded text of a string span, or "<absent>". */
static const char *
text_of(const char *body, sl_jspan_t span, char buf[256])
{
    size_t n;
    if (span.len == 0)
        return "<absent>";
    cr_assert(sl_jscan_string(body, span, buf, 256, &n), "span is not a decodable string");
    return buf;
}

static void
assert_all_zero(const sl_jscan_t *r)
{
    sl_jscan_t zero = {.err = r->err, .err_off = r->err_off};
    cr_assert(memcmp(r, &zero, sizeof zero) == 0, "a failed scan left fields set");
}

/* ---- verdicts ------------------------------------------------------------ */

static const char *const valid_bodies[] = {
    "{}",
    " \t\r\n{ } \n",
    "{\"a\":1}",
    "{\"a\":[]}",
    "{\"a\":{}}",
    "{\"a\":[1,2,3],\"b\":{\"c\":[true,false,null]}}",
    "{\"\":\"\"}",
    "{\"a\" : \"b\" , \"c\" : [ 1 , { } ] }",
    "{\"n\":0}",
    "{\"n\":-0}",
    "{\"n\":1e5}",
    "{\"n\":1E+5}",
    "{\"n\":-1.5e-3}",
    "{\"n\":12.25}",
    "{\"n\":123456789012345678901234567890}",
    "{\"s\":\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"}",
    "{\"s\":\"\\u00e9\\u00E9\\ud83d\\ude00\"}",
    "{\"s\":\"caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x82\xac \xf4\x8f\xbf\xbf\"}",
    "{\"s\":\"\\u0000\"}",
    "{\"s\":\"\x7f\"}",
};

Test(jscan, accepts_well_formed_objects)
{
    for (size_t i = 0; i < N(valid_bodies); i++) {
        sl_jscan_t r;
        bool ok = scan_str(valid_bodies[i], &r);
        cr_assert(ok, "rejected %s: %s at %zu", valid_bodies[i], sl_jscan_reason(r.err), r.err_off);
        cr_assert_eq(r.err, SL_JSCAN_OK);
    }
}

static const struct {
    const char *body;
    sl_jscan_err_t err;
    size_t off;
} invalid_bodies[] = {
    {"", SL_JSCAN_E_NOT_OBJECT, 0},
    {"   ", SL_JSCAN_E_NOT_OBJECT, 3},
    {"[]", SL_JSCAN_E_NOT_OBJECT, 0},
    {"\"x\"", SL_JSCAN_E_NOT_OBJECT, 0},
    {"1", SL_JSCAN_E_NOT_OBJECT, 0},
    {"null", SL_JSCAN_E_NOT_OBJECT, 0},
    {"\xef\xbb\xbf{}", SL_JSCAN_E_NOT_OBJECT, 0},
    {"{} x", SL_JSCAN_E_TRAILING, 3},
    {"{}{}", SL_JSCAN_E_TRAILING, 2},
    {"{,}", SL_JSCAN_E_UNEXPECTED, 1},
    {"{\"a\":1,}", SL_JSCAN_E_UNEXPECTED, 7},
    {"{\"a\":[1,]}", SL_JSCAN_E_UNEXPECTED, 8},
    {"{\"a\" 1}", SL_JSCAN_E_UNEXPECTED, 5},
    {"{a:1}", SL_JSCAN_E_UNEXPECTED, 1},
    {"{'a':1}", SL_JSCAN_E_UNEXPECTED, 1},
    {"{\"a\":1 \"b\":2}", SL_JSCAN_E_UNEXPECTED, 7},
    {"{\"a\":[1 2]}", SL_JSCAN_E_UNEXPECTED, 8},
    {"{\"a\":tru}", SL_JSCAN_E_UNEXPECTED, 5},
    {"{\"a\":nul1}", SL_JSCAN_E_UNEXPECTED, 5},
    {"{\"a\":truex}", SL_JSCAN_E_UNEXPECTED, 9},
    {"{\"a\":True}", SL_JSCAN_E_UNEXPECTED, 5},
    {"{\"a\":NaN}", SL_JSCAN_E_UNEXPECTED, 5},
    {"{\"a\":Infinity}", SL_JSCAN_E_UNEXPECTED, 5},
    {"{\"a\":1]", SL_JSCAN_E_UNEXPECTED, 6},
    {"{\"a\":[1}", SL_JSCAN_E_UNEXPECTED, 7},
    {"{\"n\":01}", SL_JSCAN_E_BAD_NUMBER, 6},
    {"{\"n\":-01}", SL_JSCAN_E_BAD_NUMBER, 7},
    {"{\"n\":00}", SL_JSCAN_E_BAD_NUMBER, 6},
    {"{\"n\":1.}", SL_JSCAN_E_BAD_NUMBER, 7},
    {"{\"n\":.5}", SL_JSCAN_E_UNEXPECTED, 5},
    {"{\"n\":+1}", SL_JSCAN_E_UNEXPECTED, 5},
    {"{\"n\":-}", SL_JSCAN_E_BAD_NUMBER, 6},
    {"{\"n\":-a}", SL_JSCAN_E_BAD_NUMBER, 6},
    {"{\"n\":1e}", SL_JSCAN_E_BAD_NUMBER, 7},
    {"{\"n\":1e+}", SL_JSCAN_E_BAD_NUMBER, 8},
    {"{\"n\":0x10}", SL_JSCAN_E_UNEXPECTED, 6},
    {"{\"n\":1.5.2}", SL_JSCAN_E_UNEXPECTED, 8},
    {"{\"s\":\"\\x\"}", SL_JSCAN_E_BAD_ESCAPE, 6},
    {"{\"s\":\"\\u12G4\"}", SL_JSCAN_E_BAD_ESCAPE, 6},
    {"{\"s\":\"\\U00e9\"}", SL_JSCAN_E_BAD_ESCAPE, 6},
    {"{\"s\":\"\\'\"}", SL_JSCAN_E_BAD_ESCAPE, 6},
    {"{\"s\":\"a\x01\"}", SL_JSCAN_E_CONTROL_CHAR, 7},
    {"{\"s\":\"a\nb\"}", SL_JSCAN_E_CONTROL_CHAR, 7},
    {"{\"s\":\"\t\"}", SL_JSCAN_E_CONTROL_CHAR, 6},
    {"{\"k\x01\":1}", SL_JSCAN_E_CONTROL_CHAR, 3},
    {"{\"s\":\"\xc0\x80\"}", SL_JSCAN_E_BAD_UTF8, 6},         /* overlong NUL */
    {"{\"s\":\"\xe0\x80\xaf\"}", SL_JSCAN_E_BAD_UTF8, 6},     /* overlong '/' */
    {"{\"s\":\"\xed\xa0\x80\"}", SL_JSCAN_E_BAD_UTF8, 6},     /* an encoded surrogate */
    {"{\"s\":\"\xf4\x90\x80\x80\"}", SL_JSCAN_E_BAD_UTF8, 6}, /* above U+10FFFF */
    {"{\"s\":\"\xff\"}", SL_JSCAN_E_BAD_UTF8, 6},
    {"{\"s\":\"\x80\"}", SL_JSCAN_E_BAD_UTF8, 6},
    {"{\"s\":\"\xc3(\"}", SL_JSCAN_E_BAD_UTF8, 6},
    {"{\"s\":1,\"\xc3\xa9\":\xc3\xa9}", SL_JSCAN_E_UNEXPECTED, 12},
};

static size_t
body_len(size_t i)
{
    return strlen(invalid_bodies[i].body);
}

Test(jscan, rejects_malformed_bodies_with_offset_and_reason)
{
    for (size_t i = 0; i < N(invalid_bodies); i++) {
        sl_jscan_t r;
        bool ok = scan(invalid_bodies[i].body, body_len(i), &r);
        cr_assert_not(ok, "accepted case %zu: %s", i, invalid_bodies[i].body);
        cr_assert_eq(r.err, invalid_bodies[i].err, "case %zu %s: got '%s', expected '%s'", i,
                     invalid_bodies[i].body, sl_jscan_reason(r.err), sl_jscan_reason(invalid_bodies[i].err));
        cr_assert_eq(r.err_off, invalid_bodies[i].off, "case %zu %s: offset %zu, expected %zu", i,
                     invalid_bodies[i].body, r.err_off, invalid_bodies[i].off);
        assert_all_zero(&r);
    }
}

Test(jscan, a_nul_byte_after_the_object_is_trailing_data)
{
    sl_jscan_t r;
    cr_assert_not(scan("{}\0", 3, &r));
    cr_assert_eq(r.err, SL_JSCAN_E_TRAILING);
    cr_assert_eq(r.err_off, 2);
    cr_assert(scan("{}\0", 2, &r), "the length, not the NUL, ends the body");
}

Test(jscan, every_reason_is_short_english)
{
    for (int e = 0; e < SL_JSCAN_E_COUNT; e++) {
        const char *s = sl_jscan_reason((sl_jscan_err_t)e);
        cr_assert(s != NULL && strlen(s) > 3 && strlen(s) < 60, "reason %d", e);
    }
    cr_assert_str_eq(sl_jscan_reason(SL_JSCAN_E_TOO_DEEP), "nested deeper than 128 levels");
}

static const char full_body[] =
    "{\"model\":\"claude\",\"stream\":true,\"n\":[1,-2.5e3,null,false,{\"x\":\"\\u00e9\\n\"}],"
    "\"s\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

Test(jscan, every_truncated_prefix_is_reported_at_its_end)
{
    size_t len = strlen(full_body);
    sl_jscan_t r;
    cr_assert(scan(full_body, len, &r));
    for (size_t cut = 1; cut < len; cut++) {
        cr_assert_not(scan(full_body, cut, &r), "prefix of %zu bytes accepted", cut);
        cr_assert_eq(r.err, SL_JSCAN_E_TRUNCATED, "prefix %zu: %s at %zu", cut, sl_jscan_reason(r.err),
                     r.err_off);
        cr_assert_eq(r.err_off, cut);
        assert_all_zero(&r);
    }
}

static char *
nested(size_t depth, char open, char close)
{
    /* {"a": then depth-1 more containers, so the body's own object makes `depth` levels. */
    char *b = malloc(depth * 2 + 16);
    size_t n = 0;
    n += (size_t)sprintf(b, "{\"a\":");
    for (size_t i = 1; i < depth; i++)
        b[n++] = open;
    for (size_t i = 1; i < depth; i++)
        b[n++] = close;
    b[n++] = '}';
    b[n] = '\0';
    return b;
}

Test(jscan, nesting_is_capped_at_128_levels)
{
    sl_jscan_t r;
    char *ok = nested(SL_JSCAN_MAX_DEPTH, '[', ']');
    cr_assert(scan_str(ok, &r), "%s at %zu", sl_jscan_reason(r.err), r.err_off);
    free(ok);
    char *objects = malloc(SL_JSCAN_MAX_DEPTH * 6 + 8);
    size_t n = 0;
    for (size_t i = 0; i < SL_JSCAN_MAX_DEPTH; i++)
        n += (size_t)sprintf(objects + n, "{\"a\":");
    n += (size_t)sprintf(objects + n, "1");
    for (size_t i = 0; i < SL_JSCAN_MAX_DEPTH; i++)
        objects[n++] = '}';
    objects[n] = '\0';
    cr_assert(scan_str(objects, &r), "%s at %zu", sl_jscan_reason(r.err), r.err_off);
    free(objects);

    char *deep = nested(SL_JSCAN_MAX_DEPTH + 1, '[', ']');
    cr_assert_not(scan_str(deep, &r));
    cr_assert_eq(r.err, SL_JSCAN_E_TOO_DEEP);
    cr_assert_eq(r.err_off, 5 + SL_JSCAN_MAX_DEPTH - 1, "offset %zu", r.err_off);
    free(deep);
}

Test(jscan, a_million_open_brackets_is_an_error_not_a_crash)
{
    size_t len = 1000000;
    char *b = malloc(len);
    b[0] = '{';
    b[1] = '"';
    b[2] = 'a';
    b[3] = '"';
    b[4] = ':';
    memset(b + 5, '[', len - 5);
    sl_jscan_t r;
    cr_assert_not(scan(b, len, &r));
    cr_assert_eq(r.err, SL_JSCAN_E_TOO_DEEP);
    free(b);
}

/* ---- agreement with jansson --------------------------------------------- */

static bool
jansson_accepts_object(const char *b, size_t len, json_error_t *e)
{
    json_t *j = json_loadb(b, len, JSON_ALLOW_NUL, e);
    bool ok = j != NULL && json_is_object(j);
    json_decref(j);
    return ok;
}

/* jansson refuses lone surrogate escapes and numbers beyond double/int64; RFC 8259's grammar does not. */
static bool
jansson_stricter_than_rfc(const json_error_t *e)
{
    return strstr(e->text, "surrogate") != NULL || strstr(e->text, "overflow") != NULL ||
           strstr(e->text, "too big") != NULL || strstr(e->text, "nvalid Unicode") != NULL;
}

static uint64_t
xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(jscan, verdicts_match_jansson_on_the_tables_and_on_mutated_bodies)
{
    json_error_t e;
    for (size_t i = 0; i < N(valid_bodies); i++) {
        bool theirs = jansson_accepts_object(valid_bodies[i], strlen(valid_bodies[i]), &e);
        cr_assert(theirs || jansson_stricter_than_rfc(&e), "%s: %s", valid_bodies[i], e.text);
    }
    for (size_t i = 0; i < N(invalid_bodies); i++) {
        const char *b = invalid_bodies[i].body;
        cr_assert_not(jansson_accepts_object(b, body_len(i), &e), "%s", b);
    }
    static const char alphabet[] = "{}[]\":,\\u0123456789abcdefEe+-. \ttruefalsenull\x01\xc3\xa9\xff";
    uint64_t seed = 0x9E3779B97F4A7C15u;
    size_t len = strlen(full_body), compared = 0;
    char buf[512];
    for (int round = 0; round < 30000; round++) {
        memcpy(buf, full_body, len);
        size_t n = len;
        int edits = 1 + (int)(xorshift(&seed) % 3);
        for (int k = 0; k < edits; k++) {
            size_t at = xorshift(&seed) % n;
            char c = alphabet[xorshift(&seed) % (sizeof(alphabet) - 1)];
            switch (xorshift(&seed) % 3) {
            case 0:
                buf[at] = c;
                break;
            case 1:
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = c;
                n++;
                break;
            default:
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
                break;
            }
        }
        sl_jscan_t r;
        bool ours = scan(buf, n, &r);
        bool theirs = jansson_accepts_object(buf, n, &e);
        if (!theirs && jansson_stricter_than_rfc(&e))
            continue;
        /* Field types are checked by us only: a mutation may make "stream" a number. */
        if (!ours && r.err >= SL_JSCAN_E_MODEL_TYPE)
            continue;
        compared++;
        cr_assert_eq(ours, theirs, "disagree on %.*s: ours %s (%s at %zu), jansson %s (%s)", (int)n, buf,
                     ours ? "ok" : "bad", sl_jscan_reason(r.err), r.err_off, theirs ? "ok" : "bad", e.text);
    }
    cr_assert_gt(compared, 25000);
}

/* Every JSON payload in the recorded upstream streams is a valid object. */
Test(jscan, accepts_every_json_payload_of_the_fixture_streams)
{
    const char *dir = getenv("SLUICE_FIXTURES");
    if (dir == NULL)
        dir = "/work/shared/fixtures/streams";
    DIR *d = opendir(dir);
    cr_assert(d != NULL, "cannot open %s", dir);
    size_t payloads = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        size_t nl = strlen(ent->d_name);
        bool sse = nl > 4 && strcmp(ent->d_name + nl - 4, ".sse") == 0;
        bool json = nl > 5 && strcmp(ent->d_name + nl - 5, ".json") == 0;
        if (!sse && !json)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        FILE *f = fopen(path, "rb");
        cr_assert(f != NULL);
        static char text[1 << 20];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        if (json) {
            sl_jscan_t r;
            cr_assert(scan(text, n, &r), "%s: %s at %zu", ent->d_name, sl_jscan_reason(r.err), r.err_off);
            payloads++;
            continue;
        }
        for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
            if (strncmp(line, "data: {", 7) != 0)
                continue;
            sl_jscan_t r;
            cr_assert(scan_str(line + 6, &r), "%s: %s at %zu in %s", ent->d_name, sl_jscan_reason(r.err),
                      r.err_off, line);
            payloads++;
        }
    }
    closedir(d);
    cr_assert_gt(payloads, 50, "only %zu payloads found", payloads);
}

/* ---- fields -------------------------------------------------------------- */

Test(jscan, extracts_model_stream_and_previous_response_id)
{
    static const char b[] =
        "{\"model\":\"gpt-5\",\"stream\":true,\"previous_response_id\":\"resp_1\",\"x\":{}}";
    sl_jscan_t r;
    char buf[256];
    cr_assert(scan_str(b, &r));
    cr_assert_str_eq(text_of(b, r.model, buf), "gpt-5");
    cr_assert_eq(r.model.off, 9);
    cr_assert_eq(r.model.len, 7);
    cr_assert(r.has_stream && r.stream);
    cr_assert_str_eq(text_of(b, r.previous_response_id, buf), "resp_1");
    cr_assert_not(r.has_max_tokens);
}

Test(jscan, null_fields_count_as_absent)
{
    static const char b[] =
        "{\"model\":null,\"stream\":null,\"previous_response_id\":null,\"max_tokens\":null}";
    sl_jscan_t r;
    cr_assert(scan_str(b, &r));
    cr_assert_eq(r.model.len, 0);
    cr_assert_not(r.has_stream);
    cr_assert_not(r.stream);
    cr_assert_eq(r.previous_response_id.len, 0);
    cr_assert_not(r.has_max_tokens);
}

Test(jscan, wrongly_typed_fields_fail_where_the_value_starts)
{
    static const struct {
        const char *body;
        sl_jscan_err_t err;
        size_t off;
    } cases[] = {
        {"{\"stream\":\"true\"}", SL_JSCAN_E_STREAM_TYPE, 10},
        {"{\"stream\":1}", SL_JSCAN_E_STREAM_TYPE, 10},
        {"{\"stream\":[true]}", SL_JSCAN_E_STREAM_TYPE, 10},
        {"{\"stream\":{}}", SL_JSCAN_E_STREAM_TYPE, 10},
        {"{\"model\":5}", SL_JSCAN_E_MODEL_TYPE, 9},
        {"{\"model\":true}", SL_JSCAN_E_MODEL_TYPE, 9},
        {"{\"model\":[\"a\"]}", SL_JSCAN_E_MODEL_TYPE, 9},
        {"{\"model\":\"a\",\"model\":{\"x\":1}}", SL_JSCAN_E_MODEL_TYPE, 21},
        {"{\"previous_response_id\":7}", SL_JSCAN_E_PREVIOUS_TYPE, 24},
        {"{\"previous_response_id\":{}}", SL_JSCAN_E_PREVIOUS_TYPE, 24},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_jscan_t r;
        cr_assert_not(scan_str(cases[i].body, &r), "%s", cases[i].body);
        cr_assert_eq(r.err, cases[i].err, "%s: %s", cases[i].body, sl_jscan_reason(r.err));
        cr_assert_eq(r.err_off, cases[i].off, "%s: offset %zu", cases[i].body, r.err_off);
        assert_all_zero(&r);
    }
}

Test(jscan, a_failure_after_good_fields_leaves_nothing_half_set)
{
    static const char b[] = "{\"model\":\"m\",\"stream\":true,\"max_tokens\":5,\"input\":\"hi\",\"x\":01}";
    sl_jscan_t r;
    cr_assert_not(scan_str(b, &r));
    cr_assert_eq(r.err, SL_JSCAN_E_BAD_NUMBER);
    assert_all_zero(&r);
}

Test(jscan, duplicate_members_last_one_wins)
{
    static const char b[] =
        "{\"model\":\"first\",\"stream\":true,\"max_tokens\":10,\"model\":\"last\",\"stream\":false,"
        "\"max_tokens\":20,\"previous_response_id\":\"a\",\"previous_response_id\":null}";
    sl_jscan_t r;
    char buf[256];
    cr_assert(scan_str(b, &r));
    cr_assert_str_eq(text_of(b, r.model, buf), "last");
    cr_assert(r.has_stream);
    cr_assert_not(r.stream);
    cr_assert_eq(r.max_tokens, 20);
    cr_assert_eq(r.previous_response_id.len, 0);
}

Test(jscan, only_top_level_members_count)
{
    static const char b[] =
        "{\"metadata\":{\"model\":\"inner\",\"stream\":\"not checked\"},\"tools\":[{\"model\":1}],"
        "\"model\":\"outer\"}";
    sl_jscan_t r;
    char buf[256];
    cr_assert(scan_str(b, &r), "%s", sl_jscan_reason(r.err));
    cr_assert_str_eq(text_of(b, r.model, buf), "outer");
    cr_assert_not(r.has_stream);
}

Test(jscan, member_names_are_compared_decoded)
{
    static const char b[] = "{\"mod\\u0065l\":\"escaped-name\",\"str\\u0065am\":true}";
    sl_jscan_t r;
    char buf[256];
    cr_assert(scan_str(b, &r));
    cr_assert_str_eq(text_of(b, r.model, buf), "escaped-name");
    cr_assert(r.has_stream && r.stream);
}

Test(jscan, max_tokens_takes_only_plain_non_negative_integers)
{
    static const struct {
        const char *body;
        bool has;
        int64_t value;
    } cases[] = {
        {"{\"max_tokens\":1024}", true, 1024},
        {"{\"max_tokens\":0}", true, 0},
        {"{\"max_completion_tokens\":300}", true, 300},
        {"{\"max_output_tokens\":50}", true, 50},
        {"{\"max_tokens\":9223372036854775807}", true, INT64_MAX},
        {"{\"max_tokens\":9223372036854775808}", false, 0},
        {"{\"max_tokens\":99999999999999999999}", false, 0},
        {"{\"max_tokens\":-1}", false, 0},
        {"{\"max_tokens\":1e3}", false, 0},
        {"{\"max_tokens\":10.0}", false, 0},
        {"{\"max_tokens\":\"5\"}", false, 0},
        {"{\"max_tokens\":[5]}", false, 0},
        {"{\"max_tokens\":5,\"max_output_tokens\":7}", true, 7},
        {"{\"max_tokens\":5,\"max_tokens\":true}", false, 0},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_jscan_t r;
        cr_assert(scan_str(cases[i].body, &r), "%s", cases[i].body);
        cr_assert_eq(r.has_max_tokens, cases[i].has, "%s", cases[i].body);
        cr_assert_eq(r.max_tokens, cases[i].value, "%s: %lld", cases[i].body, (long long)r.max_tokens);
    }
}

/* ---- sealed history ------------------------------------------------------- */

Test(jscan, flags_history_bound_to_an_upstream_account)
{
    static const struct {
        const char *body;
        bool encrypted, signature;
    } cases[] = {
        {"{\"input\":[{\"type\":\"reasoning\",\"summary\":[],\"encrypted_content\":\"gAAAA\"}]}", true,
         false},
        {"{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":\"\"}]}", false, false},
        {"{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":null}]}", false, false},
        {"{\"a\":{\"b\":[{\"c\":{\"encrypted_content\":\"x\"}}]}}", true, false},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\","
         "\"signature\":\"EqQBCgIYAh\"}]}]}",
         false, true},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"signature\":\"Eq\",\"thinking\":\"hm\","
         "\"type\":\"thinking\"}]}]}",
         false, true},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\"}]}]"
         "}",
         false, false},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"redacted_thinking\",\"data\":\"x\"}"
         "]}]}",
         false, false},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"name\":\"sign\","
         "\"input\":{\"signature\":\"John\"}}]}]}",
         false, false},
        {"{\"tools\":[{\"input_schema\":{\"properties\":{\"signature\":{\"type\":\"string\"}}}}]}", false,
         false},
        {"{\"x\":{\"type\":\"thinking\",\"signature\":\"\"}}", false, false},
        {"{\"x\":{\"type\":\"thinking\",\"type\":\"text\",\"signature\":\"s\"}}", false, false},
        {"{\"x\":{\"type\":\"thinking\",\"y\":{\"signature\":\"s\"}}}", false, false},
        {"{\"x\":{\"type\":\"th\\u0069nking\",\"signature\":\"s\"}}", false, true},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_jscan_t r;
        cr_assert(scan_str(cases[i].body, &r), "%s", cases[i].body);
        cr_assert_eq(r.encrypted_content, cases[i].encrypted, "%s", cases[i].body);
        cr_assert_eq(r.thinking_signature, cases[i].signature, "%s", cases[i].body);
    }
}

/* ---- first user message -------------------------------------------------- */

Test(jscan, finds_the_first_user_message_in_each_dialect)
{
    static const struct {
        const char *body, *span; /* the expected span's bytes, NULL = absent */
    } cases[] = {
        /* Anthropic: string and block content; assistant-first history */
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"},{\"role\":\"user\",\"content\":\"later\"}]"
         "}",
         "\"hello\""},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"},{\"content\":[{\"type\":\"text\","
         "\"text\":\"q\"}],"
         "\"role\":\"user\"}]}",
         "[{\"type\":\"text\",\"text\":\"q\"}]"},
        /* Chat: a system message first */
        {"{\"model\":\"gpt\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "\"hi\""},
        /* Responses: a plain string, and items with a developer message first */
        {"{\"input\":\"just text\"}", "\"just text\""},
        {"{\"input\":[{\"type\":\"message\",\"role\":\"developer\",\"content\":\"d\"},{\"type\":\"message\","
         "\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"u\"}]}]}",
         "[{\"type\":\"input_text\",\"text\":\"u\"}]"},
        /* Gemini: a missing role is user; a model turn is not */
        {"{\"contents\":[{\"parts\":[{\"text\":\"g\"}]}]}", "[{\"text\":\"g\"}]"},
        {"{\"contents\":[{\"role\":\"model\",\"parts\":[{\"text\":\"m\"}]},{\"role\":\"user\",\"parts\":[]}]"
         "}",
         "[]"},
        /* Bedrock */
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"b\"}]}],\"inferenceConfig\":{}}",
         "[{\"text\":\"b\"}]"},
        /* no user message, no content, or roles missing outside Gemini */
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"}]}", NULL},
        {"{\"messages\":[{\"role\":\"user\"}]}", NULL},
        {"{\"messages\":[{\"content\":\"no role\"}]}", NULL},
        {"{\"messages\":[]}", NULL},
        {"{\"messages\":\"x\",\"model\":\"m\"}", "\"x\""},
        {"{\"messages\":[[{\"role\":\"user\",\"content\":\"nested\"}],\"x\"]}", NULL},
        {"{\"system\":[{\"role\":\"user\",\"content\":\"not a message\"}]}", NULL},
        /* the last conversation member wins, like every member */
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"one\"}],\"messages\":[{\"role\":\"user\","
         "\"content\":\"two\"}]}",
         "\"two\""},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"one\"}],\"messages\":null}", NULL},
        /* role "user" spelled with an escape */
        {"{\"messages\":[{\"role\":\"\\u0075ser\",\"content\":\"esc\"}]}", "\"esc\""},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_jscan_t r;
        const char *b = cases[i].body;
        cr_assert(scan_str(b, &r), "%s: %s", b, sl_jscan_reason(r.err));
        if (cases[i].span == NULL) {
            cr_assert_eq(r.first_user.len, 0, "%s: found %.*s", b, (int)r.first_user.len,
                         b + r.first_user.off);
            continue;
        }
        cr_assert_eq(r.first_user.len, strlen(cases[i].span), "%s: found %.*s", b, (int)r.first_user.len,
                     b + r.first_user.off);
        cr_assert(memcmp(b + r.first_user.off, cases[i].span, r.first_user.len) == 0, "%s", b);
    }
}

/* Collects the decoded text pieces of a span, separated by '|'. */
static void
texts(const char *b, sl_jspan_t span, char *out, size_t cap)
{
    size_t cursor = 0, at = 0;
    sl_jspan_t t;
    out[0] = '\0';
    while (sl_jscan_next_text(b, span, &cursor, &t)) {
        size_t n;
        cr_assert(sl_jscan_string(b, t, out + at, cap - at, &n));
        at += n;
        out[at++] = '|';
        out[at] = '\0';
    }
    cr_assert_not(sl_jscan_next_text(b, span, &cursor, &t), "the iterator restarted");
}

Test(jscan, text_pieces_skip_images_and_cache_markers)
{
    static const struct {
        const char *body, *texts;
    } cases[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"plain \\\"quoted\\\"\"}]}", "plain \"quoted\"|"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"one\",\"cache_"
         "control\":{"
         "\"type\":\"ephemeral\"}},{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"data\":\"iVBOR\"}},"
         "{\"text\" : \"two\",\"type\":\"text\"}]}]}",
         "one|two|"},
        {"{\"contents\":[{\"parts\":[{\"inlineData\":{\"data\":\"xx\"}},{\"text\":\"g\"}]}]}", "g|"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":{\"odd\":\"text\"}}]}]}",
         ""},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}", ""},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"t\\u0065xt\":\"esc\",\"note\":\"text\"}]}]}",
         "esc|"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"tool\":[\"text\",\"text\"],\"text\":\"after\"}]}]"
         "}",
         "after|"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_jscan_t r;
        char out[256];
        cr_assert(scan_str(cases[i].body, &r));
        cr_assert(r.first_user.len > 0);
        texts(cases[i].body, r.first_user, out, sizeof out);
        cr_assert_str_eq(out, cases[i].texts, "%s", cases[i].body);
    }
    sl_jspan_t t;
    size_t cursor = 0;
    cr_assert_not(sl_jscan_next_text("{}", (sl_jspan_t){0}, &cursor, &t));
}

/* ---- decoding ------------------------------------------------------------ */

Test(jscan, decodes_escapes_to_utf8)
{
    static const struct {
        const char *token, *decoded;
        size_t len;
    } cases[] = {
        {"\"plain\"", "plain", 5},
        {"\"\"", "", 0},
        {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8},
        {"\"\\u0041\\u00e9\\u20AC\"", "A\xc3\xa9\xe2\x82\xac", 6},
        {"\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80", 4},
        {"\"\\ud800x\"", "\xef\xbf\xbdx", 4},
        {"\"\\udc00\"", "\xef\xbf\xbd", 3},
        {"\"\\ud800\\u0041\"",
         "\xef\xbf\xbd"
         "A",
         4},
        {"\"a\\u0000b\"", "a\0b", 3},
        {"\"caf\xc3\xa9\"", "caf\xc3\xa9", 5},
    };
    for (size_t i = 0; i < N(cases); i++) {
        const char *t = cases[i].token;
        sl_jspan_t span = {0, strlen(t)};
        char out[64];
        size_t n = 99;
        cr_assert(sl_jscan_string(t, span, out, sizeof out, &n), "%s", t);
        cr_assert_eq(n, cases[i].len, "%s: %zu", t, n);
        cr_assert(memcmp(out, cases[i].decoded, n) == 0, "%s", t);
        cr_assert_eq(out[n], '\0');
        cr_assert(sl_jscan_string_equals(t, span, cases[i].decoded, cases[i].len), "%s", t);
        cr_assert_not(sl_jscan_string_equals(t, span, "zz", 2), "%s", t);
    }
}

Test(jscan, decoding_into_a_short_buffer_leaves_it_untouched)
{
    static const char t[] = "\"\\u00e9t\\u00e9\"";
    sl_jspan_t span = {0, strlen(t)};
    char out[8];
    size_t n = 77;
    memset(out, 'Z', sizeof out);
    cr_assert_not(sl_jscan_string(t, span, out, 5, &n)); /* needs 5 + NUL */
    for (size_t i = 0; i < sizeof out; i++)
        cr_assert_eq(out[i], 'Z');
    cr_assert_eq(n, 77);
    cr_assert(sl_jscan_string(t, span, out, 6, &n));
    cr_assert_eq(n, 5);
    cr_assert_not(sl_jscan_string(t, (sl_jspan_t){0}, out, 6, &n), "an absent span decodes");
    cr_assert_not(sl_jscan_string("123", (sl_jspan_t){0, 3}, out, 6, &n), "a number decodes");
    cr_assert_not(sl_jscan_string_equals("123", (sl_jspan_t){0, 3}, "123", 3));
}

/* ---- size ---------------------------------------------------------------- */

Test(jscan, scans_a_large_agent_body_to_the_last_member)
{
    /* ~8 MiB of history with the model at the end, as a long coding session sends. */
    const char *msg =
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Lorem ipsum dolor sit amet, "
        "\\u00e9\\n consectetur \xc3\xa9 adipiscing\"}]},";
    size_t ml = strlen(msg), count = (8u << 20) / ml;
    size_t cap = count * ml + 256;
    char *b = malloc(cap);
    size_t n = (size_t)sprintf(b, "{\"messages\":[{\"role\":\"user\",\"content\":\"first\"},");
    for (size_t i = 0; i < count; i++) {
        memcpy(b + n, msg, ml);
        n += ml;
    }
    n--; /* the last comma */
    n += (size_t)sprintf(b + n, "],\"stream\":true,\"model\":\"claude-opus-4\"}");
    sl_jscan_t r;
    char buf[256];
    cr_assert(scan(b, n, &r), "%s at %zu", sl_jscan_reason(r.err), r.err_off);
    cr_assert_str_eq(text_of(b, r.model, buf), "claude-opus-4");
    cr_assert_str_eq(text_of(b, r.first_user, buf), "first");
    cr_assert(r.stream);
    free(b);
}

Test(jscan, gemini_and_bedrock_output_caps_are_read_where_their_apis_put_them)
{
    static const struct {
        const char *body;
        bool has;
        int64_t max;
    } cases[] = {
        {"{\"contents\":[],\"generationConfig\":{\"temperature\":0.5,\"maxOutputTokens\":256}}", true, 256},
        {"{\"messages\":[],\"inferenceConfig\":{\"maxTokens\":1024}}", true, 1024},
        /* Only inside those objects: a tool schema's property of that name is not the cap. */
        {"{\"tools\":[{\"maxOutputTokens\":9}],\"maxTokens\":7}", false, 0},
        {"{\"generationConfig\":{\"nested\":{\"maxOutputTokens\":5}}}", false, 0},
        {"{\"generationConfig\":{\"maxOutputTokens\":\"many\"}}", false, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_jscan_t f;
        cr_assert(sl_jscan(cases[i].body, strlen(cases[i].body), &f), "%s", cases[i].body);
        cr_expect_eq(f.has_max_tokens, cases[i].has, "%s", cases[i].body);
        cr_expect_eq(f.max_tokens, cases[i].max, "%s", cases[i].body);
    }
}
