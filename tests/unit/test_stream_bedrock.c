/*
 * Bedrock ConverseStream classification (formats.md, Bedrock;
 * stream_bedrock.c): the fixtures message by message, the event and
 * exception tables, usage from metadata, the stream state, and the classes
 * the exceptions land in. The frames are read by a minimal walker here
 * (lengths and string headers only, no CRC): decoding is eventstream.c's job
 * and its own tests'.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/classify.h"
#include "core/stream_bedrock.h"
#include "test_fixture.h"

static char
letter(sl_stream_kind_t k)
{
    static const char letters[] = {
        [SL_STREAM_IGNORE] = 'I', [SL_STREAM_OPENING] = 'O', [SL_STREAM_CONTENT] = 'C',
        [SL_STREAM_ERROR] = 'X',  [SL_STREAM_END] = 'E',
    };
    return letters[k];
}

static uint32_t
be(const unsigned char *p, size_t n)
{
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* The first frame of buf[0..len) as a message; returns its length, 0 when none is whole. */
static size_t
next_frame(const char *buf, size_t len, sl_bedrock_message_t *m)
{
    const unsigned char *p = (const unsigned char *)buf;
    if (len < 16)
        return 0;
    size_t total = be(p, 4), hlen = be(p + 4, 4);
    cr_assert(total <= len && hlen + 16 <= total, "fixture frame lengths");
    *m = (sl_bedrock_message_t){.payload = buf + 12 + hlen, .payload_len = total - hlen - 16};
    static const struct {
        const char *name;
        size_t ptr, len;
    } fields[] = {
        {":message-type", offsetof(sl_bedrock_message_t, message_type),
         offsetof(sl_bedrock_message_t, message_type_len)},
        {":event-type", offsetof(sl_bedrock_message_t, event_type),
         offsetof(sl_bedrock_message_t, event_type_len)},
        {":exception-type", offsetof(sl_bedrock_message_t, exception_type),
         offsetof(sl_bedrock_message_t, exception_type_len)},
        {":error-code", offsetof(sl_bedrock_message_t, error_code),
         offsetof(sl_bedrock_message_t, error_code_len)},
        {":error-message", offsetof(sl_bedrock_message_t, error_message),
         offsetof(sl_bedrock_message_t, error_message_len)},
    };
    for (size_t i = 12; i < 12 + hlen;) {
        size_t nlen = p[i];
        const char *name = buf + i + 1;
        cr_assert_eq(p[i + 1 + nlen], 7, "fixture headers are strings");
        size_t vlen = be(p + i + 2 + nlen, 2);
        const char *value = buf + i + 4 + nlen;
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            if (strlen(fields[f].name) == nlen && memcmp(fields[f].name, name, nlen) == 0) {
                *(const char **)((char *)m + fields[f].ptr) = value;
                *(size_t *)((char *)m + fields[f].len) = vlen;
            }
        }
        i += 4 + nlen + vlen;
    }
    return total;
}

static void
assert_usage(const sl_usage_t *got, const sl_usage_t *want, const char *what)
{
    cr_assert_eq(got->input, want->input, "%s: input %ld", what, (long)got->input);
    cr_assert_eq(got->output, want->output, "%s: output %ld", what, (long)got->output);
    cr_assert_eq(got->cache_read, want->cache_read, "%s: cache_read %ld", what, (long)got->cache_read);
    cr_assert_eq(got->cache_write, want->cache_write, "%s: cache_write %ld", what, (long)got->cache_write);
}

static const struct {
    const char *file;
    const char *kinds; /* O opening, C content, X error, E end */
    const char *code;
    int status;
    const char *message;
    sl_usage_t usage;
    bool complete;
    sl_stream_phase_t phase;
    const char *finish_reason;
} fixtures[] = {
    {"bedrock-ok.eventstream", "OCCCCCEO", "", 0, "", {10, 4, 0, 0}, true, SL_STREAM_FLOWING, "end_turn"},
    {"bedrock-service-unavailable.eventstream",
     "X",
     "serviceUnavailableException",
     503,
     "fake serviceUnavailableException",
     {0, 0, 0, 0},
     false,
     SL_STREAM_HELD,
     ""},
};

Test(bedrock_fixtures, each_message_is_classified_as_formats_md_says)
{
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
        size_t len;
        char *bytes = fixture_read(fixtures[f].file, &len);
        sl_stream_t st;
        sl_bedrock_stream_init(&st);
        char kinds[32] = "";
        size_t n = 0, off = 0, flen;
        sl_bedrock_message_t m;
        sl_stream_verdict_t last_error = {0};
        while ((flen = next_frame(bytes + off, len - off, &m)) > 0) {
            sl_stream_verdict_t v;
            memset(&v, 0x5A, sizeof v);
            sl_bedrock_stream_feed(&st, &m, &v);
            cr_assert_lt(n, sizeof kinds - 1);
            kinds[n++] = letter(v.kind);
            if (v.kind == SL_STREAM_ERROR)
                last_error = v;
            off += flen;
        }
        cr_assert_eq(off, len, "%s: whole frames only", fixtures[f].file);
        cr_assert_str_eq(kinds, fixtures[f].kinds, "%s", fixtures[f].file);
        cr_assert_str_eq(last_error.code, fixtures[f].code, "%s", fixtures[f].file);
        cr_assert_eq(last_error.status, fixtures[f].status, "%s", fixtures[f].file);
        cr_assert_str_eq(last_error.message, fixtures[f].message, "%s", fixtures[f].file);
        assert_usage(&st.usage, &fixtures[f].usage, fixtures[f].file);
        cr_assert_eq(sl_stream_complete(&st), fixtures[f].complete, "%s", fixtures[f].file);
        cr_assert_eq(st.phase, fixtures[f].phase, "%s", fixtures[f].file);
        cr_assert_str_eq(st.finish_reason, fixtures[f].finish_reason, "%s", fixtures[f].file);
        free(bytes);
    }
}

/* ---- rule tables ---- */

#define S(lit) lit, sizeof(lit) - 1
/* Initialisers of an event and an exception message; EVENT and EXCEPTION as values. */
#define EVENT_INIT(name_, json_)                                                                             \
    {                                                                                                        \
        .message_type = S("event"), .event_type = S(name_), .payload = S(json_)                              \
    }
#define EXCEPTION_INIT(name_, json_)                                                                         \
    {                                                                                                        \
        .message_type = S("exception"), .exception_type = S(name_), .payload = S(json_)                      \
    }
#define EVENT(name_, json_)     ((sl_bedrock_message_t)EVENT_INIT(name_, json_))
#define EXCEPTION(name_, json_) ((sl_bedrock_message_t)EXCEPTION_INIT(name_, json_))

typedef struct {
    const char *rule;
    sl_bedrock_message_t m;
    sl_stream_kind_t kind;
    bool finished;
    const char *code;
    int status;
    const char *message;
} row_t;

static const row_t rows[] = {
    {.rule = "messageStart opens",
     .m = EVENT_INIT("messageStart", "{\"role\":\"assistant\"}"),
     .kind = SL_STREAM_OPENING},
    {.rule = "contentBlockStart is content",
     .m = EVENT_INIT("contentBlockStart", "{\"start\":{\"toolUse\":{\"toolUseId\":\"t\",\"name\":\"f\"}},"
                                          "\"contentBlockIndex\":0}"),
     .kind = SL_STREAM_CONTENT},
    {.rule = "contentBlockDelta is content",
     .m = EVENT_INIT("contentBlockDelta", "{\"delta\":{\"text\":\"Hi\"}}"),
     .kind = SL_STREAM_CONTENT},
    {.rule = "contentBlockStop is content",
     .m = EVENT_INIT("contentBlockStop", "{\"contentBlockIndex\":0}"),
     .kind = SL_STREAM_CONTENT},
    {.rule = "messageStop is the end",
     .m = EVENT_INIT("messageStop", "{\"stopReason\":\"end_turn\"}"),
     .kind = SL_STREAM_END,
     .finished = true},
    {.rule = "metadata carries no answer",
     .m = EVENT_INIT("metadata", "{\"usage\":{\"inputTokens\":1,\"outputTokens\":2}}"),
     .kind = SL_STREAM_OPENING},
    {.rule = "an unknown event is content",
     .m = EVENT_INIT("citationsDelta", "{}"),
     .kind = SL_STREAM_CONTENT},
    {.rule = "event names are exact", .m = EVENT_INIT("MessageStart", "{}"), .kind = SL_STREAM_CONTENT},
    {.rule = "an event without :event-type is content",
     .m = {.message_type = S("event")},
     .kind = SL_STREAM_CONTENT},
    {.rule = "error words in a delta are text",
     .m = EVENT_INIT("contentBlockDelta", "{\"delta\":{\"text\":\"throttlingException\"}}"),
     .kind = SL_STREAM_CONTENT},
    {.rule = "throttlingException is 429",
     .m = EXCEPTION_INIT("throttlingException", "{\"message\":\"Too many requests\"}"),
     .kind = SL_STREAM_ERROR,
     .code = "throttlingException",
     .status = 429,
     .message = "Too many requests"},
    {.rule = "serviceUnavailableException is 503",
     .m = EXCEPTION_INIT("serviceUnavailableException", "{\"message\":\"m\"}"),
     .kind = SL_STREAM_ERROR,
     .code = "serviceUnavailableException",
     .status = 503,
     .message = "m"},
    {.rule = "internalServerException is 500",
     .m = EXCEPTION_INIT("internalServerException", "{\"message\":\"m\"}"),
     .kind = SL_STREAM_ERROR,
     .code = "internalServerException",
     .status = 500,
     .message = "m"},
    {.rule = "modelStreamErrorException is 424",
     .m = EXCEPTION_INIT("modelStreamErrorException",
                         "{\"message\":\"m\",\"originalStatusCode\":500,\"originalMessage\":\"o\"}"),
     .kind = SL_STREAM_ERROR,
     .code = "modelStreamErrorException",
     .status = 424,
     .message = "m"},
    {.rule = "validationException is 400",
     .m = EXCEPTION_INIT("validationException", "{\"message\":\"m\"}"),
     .kind = SL_STREAM_ERROR,
     .code = "validationException",
     .status = 400,
     .message = "m"},
    {.rule = "PascalCase names the same exception",
     .m = EXCEPTION_INIT("ThrottlingException", "{\"Message\":\"M\"}"),
     .kind = SL_STREAM_ERROR,
     .code = "ThrottlingException",
     .status = 429,
     .message = "M"},
    {.rule = "an unknown exception has no status",
     .m = EXCEPTION_INIT("modelTimeoutException", "{\"message\":\"slow\"}"),
     .kind = SL_STREAM_ERROR,
     .code = "modelTimeoutException",
     .message = "slow"},
    {.rule = "a prefix of a known name is not it",
     .m = EXCEPTION_INIT("throttling", "{}"),
     .kind = SL_STREAM_ERROR,
     .code = "throttling"},
    {.rule = "an exception without a payload",
     .m = EXCEPTION_INIT("internalServerException", ""),
     .kind = SL_STREAM_ERROR,
     .code = "internalServerException",
     .status = 500},
    {.rule = "an exception whose payload is not JSON",
     .m = EXCEPTION_INIT("validationException", "oops"),
     .kind = SL_STREAM_ERROR,
     .code = "validationException",
     .status = 400},
    {.rule = "an error message",
     .m = {.message_type = S("error"),
           .error_code = S("InternalFailure"),
           .error_message = S("An internal error occurred")},
     .kind = SL_STREAM_ERROR,
     .code = "InternalFailure",
     .message = "An internal error occurred"},
    {.rule = "an error message naming a known exception",
     .m = {.message_type = S("error"), .error_code = S("ServiceUnavailableException")},
     .kind = SL_STREAM_ERROR,
     .code = "ServiceUnavailableException",
     .status = 503},
    {.rule = "an unknown message type is an error (the SDK raises)",
     .m = {.message_type = S("gossip"), .event_type = S("messageStart")},
     .kind = SL_STREAM_ERROR},
    {.rule = "no message type is an error",
     .m = {.event_type = S("contentBlockDelta")},
     .kind = SL_STREAM_ERROR},
};

Test(bedrock_rules, each_message_is_opening_content_end_or_error_in_both_phases)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        for (int phase = SL_STREAM_HELD; phase <= SL_STREAM_FLOWING; phase++) {
            sl_stream_verdict_t v;
            memset(&v, 0x5A, sizeof v); /* every field must be set */
            sl_usage_t u = {0};
            sl_bedrock_classify((sl_stream_phase_t)phase, &rows[i].m, &v, &u);
            cr_assert_eq(v.kind, rows[i].kind, "%s: kind %c", rows[i].rule, letter(v.kind));
            cr_assert_eq(v.finished, rows[i].finished, "%s", rows[i].rule);
            cr_assert_str_eq(v.code, rows[i].code ? rows[i].code : "", "%s", rows[i].rule);
            cr_assert_eq(v.status, rows[i].status, "%s: status %d", rows[i].rule, v.status);
            cr_assert_str_eq(v.message, rows[i].message ? rows[i].message : "", "%s", rows[i].rule);
        }
    }
}

/* ---- what the exceptions mean to the classifier (formats.md, Bedrock) ---- */

static const struct {
    const char *exception;
    sl_failure_class_t before_content, after_content;
} classes[] = {
    {"throttlingException", SL_FAILURE_RATE_LIMITED, SL_FAILURE_RATE_LIMITED},
    {"serviceUnavailableException", SL_FAILURE_TEMPORARY, SL_FAILURE_OTHER},
    {"internalServerException", SL_FAILURE_TEMPORARY, SL_FAILURE_OTHER},
    {"modelStreamErrorException", SL_FAILURE_OTHER, SL_FAILURE_OTHER},
    /* an in-stream request error is not handed back as the client's fault: it fails over, unretried */
    {"validationException", SL_FAILURE_OTHER, SL_FAILURE_OTHER},
};

Test(bedrock_class, each_exception_lands_in_its_class)
{
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        static const char payload[] = "{\"message\":\"m\"}";
        sl_bedrock_message_t m = {.message_type = S("exception"),
                                  .exception_type = classes[i].exception,
                                  .exception_type_len = strlen(classes[i].exception),
                                  .payload = S(payload)};
        sl_stream_verdict_t v;
        sl_usage_t u = {0};
        sl_bedrock_classify(SL_STREAM_HELD, &m, &v, &u);
        for (int after = 0; after < 2; after++) {
            sl_failure_t f = {.source = SL_FAILURE_STREAM_ERROR,
                              .dialect = SL_DIALECT_BEDROCK,
                              .status = v.status,
                              .code = v.code,
                              .body = payload,
                              .body_len = sizeof payload - 1,
                              .after_content = after};
            sl_failure_class_t want = after ? classes[i].after_content : classes[i].before_content;
            cr_assert_eq(sl_classify_failure(&f), want, "%s after content %d: %s", classes[i].exception,
                         after, sl_failure_class_info(sl_classify_failure(&f))->name);
        }
    }
}

/* ---- usage ---- */

Test(bedrock_usage, metadata_reports_the_four_counts)
{
    sl_usage_t u = {0};
    sl_stream_verdict_t v;
    sl_bedrock_message_t m =
        EVENT("metadata", "{\"usage\":{\"inputTokens\":4,\"outputTokens\":264,\"totalTokens\":"
                          "5396,\"cacheReadInputTokens\":0,\"cacheWriteInputTokens\":5128},"
                          "\"metrics\":{\"latencyMs\":886}}");
    sl_bedrock_classify(SL_STREAM_FLOWING, &m, &v, &u);
    assert_usage(&u, &(sl_usage_t){4, 264, 0, 5128}, "input already excludes the cache");
}

Test(bedrock_usage, counts_it_does_not_report_are_left_alone)
{
    static const sl_bedrock_message_t ms[] = {
        EVENT_INIT("metadata", "{\"metrics\":{\"latencyMs\":1}}"),
        EVENT_INIT("metadata", "{\"usage\":null}"),
        EVENT_INIT("metadata",
                   "{\"usage\":{\"inputTokens\":-1,\"outputTokens\":\"2\",\"cacheReadInputTokens\":1.5}}"),
        EVENT_INIT("metadata", "not json"),
        EVENT_INIT("contentBlockDelta", "{\"usage\":{\"inputTokens\":99}}"),
        EXCEPTION_INIT("throttlingException", "{\"usage\":{\"inputTokens\":99}}"),
    };
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        sl_usage_t u = {1, 2, 3, 4};
        sl_stream_verdict_t v;
        sl_bedrock_classify(SL_STREAM_FLOWING, &ms[i], &v, &u);
        assert_usage(&u, &(sl_usage_t){1, 2, 3, 4}, "untouched");
    }
    sl_usage_t u = {1, 2, 3, 4};
    sl_stream_verdict_t v;
    sl_bedrock_message_t m = EVENT("metadata", "{\"usage\":{\"outputTokens\":7}}");
    sl_bedrock_classify(SL_STREAM_FLOWING, &m, &v, &u);
    assert_usage(&u, &(sl_usage_t){1, 7, 3, 4}, "only output replaced");
}

/* ---- the stream state ---- */

static sl_stream_t
feed_all(const sl_bedrock_message_t *ms, size_t n, char *kinds)
{
    sl_stream_t st;
    sl_bedrock_stream_init(&st);
    for (size_t i = 0; i < n; i++) {
        sl_stream_verdict_t v;
        sl_bedrock_stream_feed(&st, &ms[i], &v);
        kinds[i] = letter(v.kind);
    }
    kinds[n] = '\0';
    return st;
}

Test(bedrock_stream, init_starts_held_with_nothing_seen)
{
    sl_stream_t st;
    memset(&st, 0x5A, sizeof st);
    sl_bedrock_stream_init(&st);
    cr_assert_null(st.vt);
    cr_assert_eq(st.phase, SL_STREAM_HELD);
    cr_assert_not(st.finished);
    assert_usage(&st.usage, &(sl_usage_t){0, 0, 0, 0}, "init");
}

Test(bedrock_stream, the_first_delta_releases_and_message_stop_completes)
{
    const sl_bedrock_message_t ms[] = {
        EVENT_INIT("messageStart", "{}"),
        EVENT_INIT("contentBlockDelta", "{}"),
        EVENT_INIT("contentBlockStop", "{}"),
    };
    char kinds[8];
    sl_stream_t st = feed_all(ms, 1, kinds);
    cr_assert_eq(st.phase, SL_STREAM_HELD, "messageStart holds");
    st = feed_all(ms, 3, kinds);
    cr_assert_str_eq(kinds, "OCC");
    cr_assert_eq(st.phase, SL_STREAM_FLOWING);
    cr_assert_not(sl_stream_complete(&st), "no messageStop: cut short");
}

Test(bedrock_stream, message_stop_right_after_start_is_content_and_whole)
{
    const sl_bedrock_message_t ms[] = {
        EVENT_INIT("messageStart", "{}"),
        EVENT_INIT("messageStop", "{\"stopReason\":\"end_turn\"}"),
        EVENT_INIT("metadata", "{\"usage\":{\"inputTokens\":3,\"outputTokens\":0}}"),
    };
    char kinds[8];
    sl_stream_t st = feed_all(ms, 3, kinds);
    cr_assert_str_eq(kinds, "OEO");
    cr_assert(sl_stream_complete(&st));
    cr_assert_eq(st.phase, SL_STREAM_FLOWING, "the end is content: an empty answer is still an answer");
    assert_usage(&st.usage, &(sl_usage_t){3, 0, 0, 0}, "metadata after the end");
}

Test(bedrock_stream, start_and_metadata_only_is_a_stream_that_ended_early)
{
    const sl_bedrock_message_t ms[] = {
        EVENT_INIT("messageStart", "{}"),
        EVENT_INIT("metadata", "{\"usage\":{\"inputTokens\":3,\"outputTokens\":0}}"),
    };
    char kinds[8];
    sl_stream_t st = feed_all(ms, 2, kinds);
    cr_assert_str_eq(kinds, "OO");
    cr_assert_eq(st.phase, SL_STREAM_HELD, "nothing to release: retry");
    cr_assert_not(sl_stream_complete(&st));
}

Test(bedrock_stream, an_exception_neither_releases_nor_completes)
{
    const sl_bedrock_message_t ms[] = {
        EVENT_INIT("messageStart", "{}"),
        EXCEPTION_INIT("serviceUnavailableException", "{\"message\":\"m\"}"),
    };
    char kinds[8];
    sl_stream_t st = feed_all(ms, 2, kinds);
    cr_assert_str_eq(kinds, "OX");
    cr_assert_eq(st.phase, SL_STREAM_HELD);
    cr_assert_not(sl_stream_complete(&st));
}

/* ---- the verdict's texts ---- */

Test(bedrock_verdict, long_header_values_are_cut_at_a_character_boundary)
{
    char code[101], message[600];
    memset(code, 'c', 100);
    for (size_t i = 0; i < 300; i++)
        memcpy(message + 2 * i, "\xC3\xA9", 2); /* é */
    sl_bedrock_message_t m = {.message_type = S("error"),
                              .error_code = code,
                              .error_code_len = 100,
                              .error_message = message,
                              .error_message_len = sizeof message};
    sl_stream_verdict_t v;
    sl_usage_t u = {0};
    sl_bedrock_classify(SL_STREAM_HELD, &m, &v, &u);
    cr_assert_eq(strlen(v.code), SL_STREAM_CODE_MAX - 1);
    cr_assert_eq(strlen(v.message), 254, "127 whole characters, not 127 and a half");
    cr_assert_eq(memcmp(v.message, message, 254), 0);
}

Test(bedrock_verdict, credentials_in_an_exception_message_are_masked)
{
    sl_bedrock_message_t m = EXCEPTION(
        "validationException", "{\"message\":\"The security token AKIAIOSFODNN7EXAMPLE is invalid\"}");
    sl_stream_verdict_t v;
    sl_usage_t u = {0};
    sl_bedrock_classify(SL_STREAM_HELD, &m, &v, &u);
    cr_assert_null(strstr(v.message, "AKIAIOSFODNN7EXAMPLE"), "%s", v.message);
    cr_assert_str_eq(v.code, "validationException");
}
