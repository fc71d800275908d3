/*
 * Retry hints (behaviour.md §5, §6; formats.md): retry-after-ms,
 * Retry-After in seconds and in the three HTTP-date forms, the body's
 * Gemini retryDelay and "try again in" wording, and which source wins.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hints.h"
#include "test_fixture.h"

#define N(a)                 (sizeof(a) / sizeof((a)[0]))
#define DATE(text, now, out) sl_http_date_parse(text, strlen(text), now, out)

#define SEC 1000
/* The Date of the fixtures' heads: Sun, 29 Nov 2026 16:23:59 GMT. */
#define T0 ((int64_t)1795969439000)

typedef struct {
    const char *in;
    int64_t want;
} case_t;

/* ---- retry-after-ms ----------------------------------------------------------------------------- */

Test(hints, retry_after_ms_values_fractions_and_garbage)
{
    static const case_t cases[] = {
        {"1500", 1500},
        {"1", 1},
        {"1500.5", 1501},         /* a fraction rounds up: the pause never ends before the upstream asked */
        {"1500.0", 1500},         /* an all-zero fraction is not rounded */
        {"1.0001", 2},            /* any fraction rounds up */
        {"1500.000000001", 1501}, /* digits past the sixth still round up */
        {"1500.0000000", 1500},
        {" 1500\t", 1500}, /* optional whitespace around the value */
        {"0.5", -1},       /* under 1 ms counts as missing */
        {"0.999999999", -1},
        {"0", -1},
        {"000", -1},
        {"", -1},
        {"   ", -1},
        {"abc", -1},
        {"-5", -1},
        {"+5", -1},
        {"1500ms", -1},
        {"1500.", -1},
        {".5", -1},
        {"1 500", -1},
        {"0x10", -1},
        {"1e3", -1},
        {"31535999999", SL_HINT_MAX_MS - 1},
        {"31536000000", SL_HINT_MAX_MS},
        {"31536000001", SL_HINT_MAX_MS},
        {"99999999999999999999", SL_HINT_MAX_MS}, /* capped, not overflowed */
        {"99999999999999999999999999999999999999.99", SL_HINT_MAX_MS},
    };
    for (size_t i = 0; i < N(cases); i++) {
        cr_expect_eq(sl_hint_parse_retry_after_ms(cases[i].in, strlen(cases[i].in)), cases[i].want,
                     "retry-after-ms %s", cases[i].in);
    }
}

Test(hints, retry_after_ms_reads_only_its_length)
{
    cr_expect_eq(sl_hint_parse_retry_after_ms("1500garbage", 4), 1500);
    cr_expect_eq(sl_hint_parse_retry_after_ms(NULL, 0), -1);
}

/* ---- Retry-After: delta-seconds ----------------------------------------------------------------- */

Test(hints, retry_after_seconds_values_fractions_and_garbage)
{
    static const case_t cases[] = {
        {"20", 20 * SEC},
        {"1", 1 * SEC},
        {"1.5", 1500},
        {"1.0004", 1001}, /* rounded up to the next ms */
        {" 2 ", 2 * SEC},
        {"0.999", -1}, /* under 1 s counts as missing */
        {"0.5", -1},
        {"0", -1},
        {"", -1},
        {"-1", -1},
        {"1e3", -1},
        {"20 s", -1},
        {"20s", -1},
        {"99999999999999999999", SL_HINT_MAX_MS},
        {"31536000", SL_HINT_MAX_MS},
        {"31535999", SL_HINT_MAX_MS - SEC},
    };
    for (size_t i = 0; i < N(cases); i++) {
        cr_expect_eq(sl_hint_parse_retry_after(cases[i].in, strlen(cases[i].in), T0), cases[i].want,
                     "Retry-After %s", cases[i].in);
    }
}

/* ---- Retry-After: HTTP-date --------------------------------------------------------------------- */

Test(hints, http_date_parses_the_three_forms_of_rfc_9110)
{
    /* RFC 9110 §5.6.7's own example, in each of its forms. */
    static const char *const forms[] = {
        "Sun, 06 Nov 1994 08:49:37 GMT",     "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
        "  Sun, 06 Nov 1994 08:49:37 GMT\t", "sun, 06 nov 1994 08:49:37 gmt", /* names in any case */
    };
    for (size_t i = 0; i < N(forms); i++) {
        int64_t at = -7;
        cr_expect(sl_http_date_parse(forms[i], strlen(forms[i]), T0, &at), "%s", forms[i]);
        cr_expect_eq(at, (int64_t)784111777 * 1000, "%s", forms[i]);
    }
}

Test(hints, http_date_rfc850_two_digit_year_is_at_most_50_years_ahead)
{
    int64_t at;
    cr_assert(DATE("Wednesday, 01-Jan-76 00:00:00 GMT", T0, &at));
    cr_expect_eq(at, (int64_t)3345062400 * 1000, "2026 + 50 = 2076 is still read as the future");
    cr_assert(DATE("Saturday, 01-Jan-77 00:00:00 GMT", T0, &at));
    cr_expect_eq(at, (int64_t)220924800 * 1000, "2077 would be 51 years ahead: 1977");
    cr_assert(DATE("Sunday, 29-Nov-26 16:24:29 GMT", T0, &at));
    cr_expect_eq(at, T0 + 30 * SEC);
    /* Against an absurd now the year leaves the int64 range of ms: refused, never wrapped. */
    at = 42;
    cr_expect_not(DATE("Sunday, 29-Nov-99 16:24:29 GMT", INT64_MAX, &at));
    cr_expect_not(DATE("Sunday, 29-Nov-00 16:24:29 GMT", INT64_MIN, &at));
    cr_expect_eq(at, 42);
}

Test(hints, http_date_checks_calendar_and_clock_ranges)
{
    int64_t at;
    cr_expect(DATE("Tue, 29 Feb 2028 12:00:00 GMT", T0, &at), "2028 is a leap year");
    cr_expect_eq(at, (int64_t)1835438400 * 1000);
    cr_expect(DATE("Tue Dec  1 00:00:00 2026", T0, &at), "asctime pads a one-digit day");
    cr_expect_eq(at, (int64_t)1796083200 * 1000);
    cr_expect(DATE("Sun, 29 Nov 2026 23:59:60 GMT", T0, &at), "a leap second");
}

Test(hints, http_date_garbage_is_refused_and_leaves_the_output)
{
    static const char *const bad[] = {
        "",
        "GMT",
        "Sun, 29 Nov 2026 16:24:29",       /* no zone */
        "Sun, 29 Nov 2026 16:24:29 UTC",   /* only GMT */
        "Sun, 29 Nov 2026 16:24:29 GMT x", /* trailing junk */
        "Sun 29 Nov 2026 16:24:29 GMT",    /* no comma */
        "Sun,29 Nov 2026 16:24:29 GMT",
        "Fun, 29 Nov 2026 16:24:29 GMT", /* no such day */
        "Sun, 29 Nox 2026 16:24:29 GMT", /* no such month */
        "Sun, 31 Nov 2026 16:24:29 GMT", /* November has 30 days */
        "Mon, 29 Feb 2027 16:24:29 GMT", /* not a leap year */
        "Sun, 00 Nov 2026 16:24:29 GMT",
        "Sun, 29 Nov 2026 24:00:00 GMT",
        "Sun, 29 Nov 2026 16:60:00 GMT",
        "Sun, 29 Nov 2026 16:24:61 GMT",
        "Sun, 9 Nov 2026 16:24:29 GMT", /* IMF-fixdate days are two digits */
        "Sun, 29 Nov 26 16:24:29 GMT",  /* a two-digit year needs the RFC 850 dashes */
        "Sunday, 29-Nov-2026 16:24:29 GMT",
        "Sun, 29-Nov 2026 16:24:29 GMT", /* mixed separators */
        "Sun, 29 Nov 2026 16:24 GMT",
        "Sun, 29 Nov 2026 1:24:29 GMT",
        "Sun Nov 29 16:24:29 26",
        "Sun Nov 6 08:49:37 1994", /* asctime pads the day with a space */
        "Sun Nov  6 08:49:37 1994 GMT",
        "Sun, 29 Nov 2026 16:24:29 GMT\r\n",
    };
    for (size_t i = 0; i < N(bad); i++) {
        int64_t at = 42;
        cr_expect_not(sl_http_date_parse(bad[i], strlen(bad[i]), T0, &at), "%s", bad[i]);
        cr_expect_eq(at, 42, "untouched after %s", bad[i]);
    }
}

Test(hints, retry_after_date_is_relative_to_now_and_missing_when_past)
{
    static const struct {
        const char *in;
        int64_t now, want;
    } cases[] = {
        {"Sun, 29 Nov 2026 16:24:29 GMT", T0, 30 * SEC},
        {"Sunday, 29-Nov-26 16:24:29 GMT", T0, 30 * SEC},
        {"Sun Nov 29 16:24:29 2026", T0, 30 * SEC},
        {"Sun, 29 Nov 2026 16:24:00 GMT", T0, 1 * SEC}, /* exactly 1 s ahead */
        {"Sun, 29 Nov 2026 16:24:00 GMT", T0 + 1, -1},  /* 999 ms ahead: under 1 s */
        {"Sun, 29 Nov 2026 16:24:01 GMT", T0 + 500, 1500},
        {"Sun, 29 Nov 2026 16:23:59 GMT", T0, -1}, /* now */
        {"Sun, 29 Nov 2026 16:23:58 GMT", T0, -1}, /* the past */
        {"Sun, 06 Nov 1994 08:49:37 GMT", T0, -1},
        {"Fri, 31 Dec 9999 23:59:59 GMT", T0, SL_HINT_MAX_MS},        /* capped */
        {"Sun, 29 Nov 2026 16:24:29 GMT", INT64_MIN, SL_HINT_MAX_MS}, /* no overflow */
        {"Sun, 29 Nov 2026 16:24:29 GMT", INT64_MAX, -1},
        {"Sun, 29 Nov 2026 16:24:29 XYZ", T0, -1},
    };
    for (size_t i = 0; i < N(cases); i++) {
        cr_expect_eq(sl_hint_parse_retry_after(cases[i].in, strlen(cases[i].in), cases[i].now), cases[i].want,
                     "Retry-After %s at %lld", cases[i].in, (long long)(cases[i].now - T0));
    }
}

/* ---- bodies ------------------------------------------------------------------------------------- */

/* A Gemini 429 as the API sends it: the structured delay and, in the message, a more precise one. */
static const char gemini_429[] =
    "{\"error\":{\"code\":429,\"message\":\"You exceeded your current quota. Please retry in "
    "33.168150417s.\",\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":\"type.googleapis.com/"
    "google.rpc.QuotaFailure\",\"violations\":[{\"quotaMetric\":\"generativelanguage.googleapis.com/"
    "generate_content_free_tier_requests\"}]},{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\","
    "\"retryDelay\":\"33s\"}]}}";

static const char openai_429[] =
    "{\"error\":{\"message\":\"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): "
    "Limit 30000, Used 29000, Requested 2000. Please try again in 11.054s. Visit "
    "https://platform.openai.com/account/rate-limits to learn more.\",\"type\":\"tokens\",\"param\":null,"
    "\"code\":\"rate_limit_exceeded\"}}";

Test(hints, body_gemini_retry_delay_and_try_again_wording)
{
    static const case_t cases[] = {
        {gemini_429, 33 * SEC}, /* retryDelay wins over the message */
        {"{\"error\":{\"details\":[{\"retryDelay\":\"1.5s\"}]}}", 1500},
        {"{\"retryDelay\" :\n \"2s\"}", 2 * SEC},
        {"{\"retryDelay\":\"0.0005s\"}", 1},                              /* above zero: at least 1 ms */
        {"{\"retryDelay\":\"0s\",\"message\":\"retry in 2s\"}", 2 * SEC}, /* zero is missing: scan on */
        {"{\"retryDelay\":\"33\"}", -1},                                  /* Duration JSON always has the s */
        {"{\"retryDelay\":33}", -1},
        {"{\"retryDelay\":\"33ms\"}", -1},
        {"{\"retryDelay\":\"-3s\"}", -1},
        {"{\"retryDelayX\":\"5s\"}", -1},
        {"{\"xretryDelay\":\"5s\"}", -1},
        {"{\"x\\\"retryDelay\":\"5s\"}", -1}, /* the name ends in retryDelay after an escaped quote */
        {"{\"message\":\"field \\\"retryDelay\\\": \\\"5s\\\"\"}", -1}, /* quoted inside another string */
        {"{\"retryDelay\":\"99999999999999999999s\"}", SL_HINT_MAX_MS},
        {openai_429, 11054},
        {"Please try again in 250ms.", 250},
        {"try again in 20s", 20 * SEC},
        {"try again in 1m30s", 90 * SEC},
        {"try again in 6m0s.", 360 * SEC},
        {"try again in 1h2m3.5s", 3723500},
        {"try again in 0.5s", 500},
        {"try again in 5sec", 5 * SEC},
        {"try again in 5 s", 5 * SEC},
        {"Try Again In 3 Seconds", 3 * SEC},
        {"Please retry after 20 seconds.", 20 * SEC}, /* Azure OpenAI */
        {"<html>please retry after 1 second</html>", 1 * SEC},
        {"retry in 2 minutes", 120 * SEC},
        {"retry after 1 hour", 3600 * SEC},
        {"retry after 1.5 mins", 90 * SEC},
        {"retry in 750 milliseconds", 750},
        {"Please try again later.", -1},
        {"try again in a moment", -1},
        {"retry after 20.", -1}, /* a number without a unit */
        {"retry after 20", -1},
        {"try again in -5s", -1},
        {"try again in 5 days", -1},
        {"try again in 5sx", -1},
        {"try again in 1m30", -1},
        {"try again in5s", -1},
        {"autoretry in 5s", -1}, /* the phrase must start a word */
        {"retry-after 5s", -1},
        {"try again in 0s", -1},
        {"try again in 0s, or retry in 3s", 3 * SEC},
        {"try again in 99999999999999999999s", SL_HINT_MAX_MS},
        {"try again in 99999999999h99999999999h", SL_HINT_MAX_MS},
        {"try again in 8759h59m59.999s", SL_HINT_MAX_MS - 1}, /* a year less 1 ms */
        {"", -1},
        {"{\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}", -1},
    };
    for (size_t i = 0; i < N(cases); i++)
        cr_expect_eq(sl_hint_from_body(cases[i].in, strlen(cases[i].in)), cases[i].want, "body %s",
                     cases[i].in);
    cr_expect_eq(sl_hint_from_body(NULL, 0), -1);
}

Test(hints, body_reads_only_its_length_and_at_most_64_kib)
{
    static const char hint[] = "try again in 7s";
    cr_expect_eq(sl_hint_from_body(hint, strlen(hint) - 1), -1, "the unit is past len");

    size_t len = SL_HINT_MAX_BODY + 100;
    char *body = malloc(len);
    cr_assert_not_null(body);
    memset(body, '.', len);
    memcpy(body + SL_HINT_MAX_BODY - sizeof(hint) + 1, hint, sizeof(hint) - 1);
    cr_expect_eq(sl_hint_from_body(body, len), 7 * SEC, "ends exactly at the cap");
    memset(body, '.', len);
    memcpy(body + SL_HINT_MAX_BODY - sizeof(hint) + 2, hint, sizeof(hint) - 1);
    cr_expect_eq(sl_hint_from_body(body, len), -1, "crosses the cap");
    free(body);
}

/* ---- fixtures ----------------------------------------------------------------------------------- */

#define MAX_HEADERS 32

/* The header lines of a fixture's .head (status line skipped), as views into text. */
static size_t
parse_head(char *text, sl_header_t *out)
{
    size_t n = 0;
    char *line = strchr(text, '\n');
    while (line != NULL && n < MAX_HEADERS) {
        line++;
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > 0 && line[len - 1] == '\r')
            len--;
        char *colon = memchr(line, ':', len);
        if (colon != NULL) {
            const char *v = colon + 1;
            while (*v == ' ')
                v++;
            out[n++] = (sl_header_t){line, (size_t)(colon - line), v, (size_t)(line + len - v)};
        }
        line = end;
    }
    return n;
}

Test(hints, fixture_anthropic_429_hint_is_its_retry_after_ms)
{
    size_t head_len, body_len;
    char *head = fixture_read("anthropic-429.json.head", &head_len);
    char *body = fixture_read("anthropic-429.json", &body_len);
    sl_header_t items[MAX_HEADERS];
    sl_header_array_t array = {items, parse_head(head, items)};
    sl_headers_t headers = sl_headers_of_array(&array);

    cr_expect_eq(sl_hint_from_headers(&headers, T0), 1500);
    cr_expect_eq(sl_hint_from_body(body, body_len), -1, "the body carries no delay");
    sl_hint_t h = sl_hint_find(&headers, body, body_len, T0);
    cr_expect_eq(h.ms, 1500);
    cr_expect_eq(h.source, SL_HINT_RETRY_AFTER_MS);
    cr_expect_str_eq(sl_hint_source_name(h.source), "retry-after-ms");
    free(head);
    free(body);
}

Test(hints, fixtures_without_a_delay_give_no_hint)
{
    static const char *const names[] = {
        "chat-429-insufficient-quota.json",     "anthropic-overloaded-before-content.sse",
        "chat-server-error-before-content.sse", "gemini-unavailable.sse", /* "Please try again later." */
        "responses-error-event-slow-down.sse",  "responses-failed-overloaded.sse",
    };
    for (size_t i = 0; i < N(names); i++) {
        char head_name[256];
        snprintf(head_name, sizeof(head_name), "%s.head", names[i]);
        size_t head_len, body_len;
        char *head = fixture_read(head_name, &head_len);
        char *body = fixture_read(names[i], &body_len);
        sl_header_t items[MAX_HEADERS];
        sl_header_array_t array = {items, parse_head(head, items)};
        sl_headers_t headers = sl_headers_of_array(&array);
        sl_hint_t h = sl_hint_find(&headers, body, body_len, T0);
        cr_expect_eq(h.ms, -1, "%s", names[i]);
        cr_expect_eq(h.source, SL_HINT_NONE, "%s", names[i]);
        free(head);
        free(body);
    }
}

/* ---- which source wins -------------------------------------------------------------------------- */

#define H(name, value)                                                                                       \
    {                                                                                                        \
        name, sizeof(name) - 1, value, sizeof(value) - 1                                                     \
    }

Test(hints, first_present_source_wins_retry_after_ms_then_retry_after_then_body)
{
    static const sl_header_t ms_and_seconds[] = {H("Retry-After", "2"), H("retry-after-ms", "1500")};
    static const sl_header_t ms_too_small[] = {H("retry-after-ms", "0.5"), H("retry-after", "3")};
    static const sl_header_t ms_garbage[] = {H("retry-after-ms", "soon"), H("Retry-After", "4")};
    static const sl_header_t seconds_too_small[] = {H("Retry-After", "0.5")};
    static const sl_header_t date[] = {H("retry-after", "Sun, 29 Nov 2026 16:24:09 GMT")};
    static const sl_header_t names_in_any_case[] = {H("RETRY-AFTER-MS", "250")};
    static const sl_header_t unrelated[] = {H("content-type", "application/json"),
                                            H("x-ratelimit-reset", "5s")};
    static const sl_header_t first_of_a_name[] = {H("retry-after-ms", "100"), H("retry-after-ms", "900")};
    static const char body_30s[] = "{\"error\":{\"message\":\"Please try again in 30s.\"}}";
    static const struct {
        const char *what;
        const sl_header_t *items;
        size_t n;
        const char *body;
        int64_t ms;
        sl_hint_source_t source;
    } cases[] = {
        {"retry-after-ms is exact; Retry-After only rounds it up", ms_and_seconds, 2, body_30s, 1500,
         SL_HINT_RETRY_AFTER_MS},
        {"retry-after-ms under 1 ms is missing", ms_too_small, 2, body_30s, 3000, SL_HINT_RETRY_AFTER},
        {"garbage retry-after-ms is missing", ms_garbage, 2, NULL, 4000, SL_HINT_RETRY_AFTER},
        {"Retry-After under 1 s is missing: the body", seconds_too_small, 1, body_30s, 30000, SL_HINT_BODY},
        {"a date", date, 1, body_30s, 10000, SL_HINT_RETRY_AFTER},
        {"names in any case", names_in_any_case, 1, NULL, 250, SL_HINT_RETRY_AFTER_MS},
        {"no hint header: the body", unrelated, 2, body_30s, 30000, SL_HINT_BODY},
        {"no hint anywhere", unrelated, 2, "{}", -1, SL_HINT_NONE},
        {"the first header of a name", first_of_a_name, 2, NULL, 100, SL_HINT_RETRY_AFTER_MS},
        {"no headers at all", NULL, 0, body_30s, 30000, SL_HINT_BODY},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_header_array_t array = {cases[i].items, cases[i].n};
        sl_headers_t headers = sl_headers_of_array(&array);
        const char *body = cases[i].body;
        sl_hint_t h = sl_hint_find(&headers, body, body ? strlen(body) : 0, T0);
        cr_expect_eq(h.ms, cases[i].ms, "%s", cases[i].what);
        cr_expect_eq(h.source, cases[i].source, "%s", cases[i].what);
        int64_t from_headers = sl_hint_from_headers(&headers, T0);
        cr_expect_eq(from_headers, h.source == SL_HINT_BODY || h.source == SL_HINT_NONE ? -1 : h.ms, "%s",
                     cases[i].what);
    }
}

Test(hints, null_headers_read_the_body_only)
{
    sl_hint_t h = sl_hint_find(NULL, openai_429, strlen(openai_429), T0);
    cr_expect_eq(h.ms, 11054);
    cr_expect_eq(h.source, SL_HINT_BODY);
    h = sl_hint_find(NULL, NULL, 0, T0);
    cr_expect_eq(h.ms, -1);
    cr_expect_eq(h.source, SL_HINT_NONE);
}

Test(hints, source_names)
{
    cr_expect_str_eq(sl_hint_source_name(SL_HINT_NONE), "");
    cr_expect_str_eq(sl_hint_source_name(SL_HINT_RETRY_AFTER_MS), "retry-after-ms");
    cr_expect_str_eq(sl_hint_source_name(SL_HINT_RETRY_AFTER), "retry-after");
    cr_expect_str_eq(sl_hint_source_name(SL_HINT_BODY), "body");
    cr_expect_str_eq(sl_hint_source_name(SL_HINT_SOURCE_COUNT), "");
}
