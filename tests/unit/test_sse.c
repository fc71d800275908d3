/*
 * SSE framing: the fixtures give the same events however the bytes are split
 * across reads and whatever the line endings; fields, comments, BOM and the
 * size cap follow the event-stream rules; a long event is searched once.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sse.h"
#include "test_fixture.h"

#define MAX_EVENTS 64
#define SCRATCH    4096

typedef struct {
    char name[64];
    bool has_name;
    char data[8192];
    bool has_data;
    uint32_t data_lines;
    bool comment_only;
} rec_t;

typedef struct {
    rec_t ev[MAX_EVENTS];
    size_t n;
    size_t consumed;
    size_t left; /* bytes never consumed */
    sl_sse_status_t last;
} run_t;

static void
record(rec_t *r, const sl_sse_event_t *ev)
{
    memset(r, 0, sizeof *r);
    cr_assert_lt(ev->name_len, sizeof r->name);
    cr_assert_lt(ev->data_len, sizeof r->data);
    r->has_name = ev->name != NULL;
    if (ev->name)
        memcpy(r->name, ev->name, ev->name_len);
    r->has_data = ev->data != NULL;
    if (ev->data)
        memcpy(r->data, ev->data, ev->data_len);
    r->data_lines = ev->data_lines;
    r->comment_only = ev->comment_only;
}

/*
 * Feeds in[0..len) as reads ending at the given cut offsets (ascending), the
 * way the gateway does: append each read to one buffer, take every complete
 * event, drop its bytes.
 */
static void
feed_cuts(const char *in, size_t len, const size_t *cuts, size_t ncuts, size_t max_event, run_t *run)
{
    static char scratch[SCRATCH];
    sl_sse_scanner_t s;
    sl_sse_init(&s, max_event, scratch, sizeof scratch);
    memset(run, 0, sizeof *run);
    char *buf = malloc(len + 1);
    size_t have = 0, from = 0;
    for (size_t c = 0; c <= ncuts; c++) {
        size_t to = c < ncuts ? cuts[c] : len;
        memcpy(buf + have, in + from, to - from);
        have += to - from;
        from = to;
        for (;;) {
            sl_sse_event_t ev;
            run->last = sl_sse_next(&s, buf, have, &ev);
            if (run->last != SL_SSE_EVENT)
                break;
            cr_assert_gt(ev.len, 0);
            cr_assert_leq(ev.len, have);
            cr_assert_lt(run->n, MAX_EVENTS);
            record(&run->ev[run->n++], &ev);
            memmove(buf, buf + ev.len, have - ev.len);
            have -= ev.len;
            run->consumed += ev.len;
        }
        if (run->last == SL_SSE_TOO_LARGE)
            break;
    }
    run->left = have;
    free(buf);
}

static void
feed_whole(const char *in, size_t len, run_t *run)
{
    feed_cuts(in, len, NULL, 0, SL_SSE_MAX_EVENT_DEFAULT, run);
}

static void
assert_same_events(const run_t *a, const run_t *b, const char *what)
{
    cr_assert_eq(a->n, b->n, "%s: %zu events, expected %zu", what, a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        cr_assert_eq(a->ev[i].has_name, b->ev[i].has_name, "%s: event %zu", what, i);
        cr_assert_str_eq(a->ev[i].name, b->ev[i].name, "%s: event %zu", what, i);
        cr_assert_eq(a->ev[i].has_data, b->ev[i].has_data, "%s: event %zu", what, i);
        cr_assert_str_eq(a->ev[i].data, b->ev[i].data, "%s: event %zu", what, i);
        cr_assert_eq(a->ev[i].data_lines, b->ev[i].data_lines, "%s: event %zu", what, i);
        cr_assert_eq(a->ev[i].comment_only, b->ev[i].comment_only, "%s: event %zu", what, i);
    }
}

/* The fixture with every "\n" replaced by eol. Caller frees. */
static char *
with_line_ends(const char *in, size_t len, const char *eol, size_t *out_len)
{
    char *out = malloc(len * 2 + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (in[i] == '\n') {
            memcpy(out + o, eol, strlen(eol));
            o += strlen(eol);
        } else {
            out[o++] = in[i];
        }
    }
    *out_len = o;
    return out;
}

static const struct {
    const char *file;
    size_t events;
    const char *first_name; /* NULL: unnamed */
} fixtures[] = {
    {"anthropic-ok.sse", 11, "message_start"},
    {"anthropic-overloaded-before-content.sse", 3, "message_start"},
    {"anthropic-error-after-content.sse", 6, "message_start"},
    {"anthropic-opening-only.sse", 2, "message_start"},
    {"chat-ok.sse", 9, NULL},
    {"chat-server-error-before-content.sse", 2, NULL},
    {"responses-ok.sse", 13, "response.created"},
    {"responses-failed-overloaded.sse", 3, "response.created"},
    {"responses-error-event-slow-down.sse", 1, "error"},
    {"responses-failed-invalid-encrypted-content.sse", 3, "response.created"},
    {"gemini-ok.sse", 5, NULL},
    {"gemini-unavailable.sse", 1, NULL},
};
#define NFIXTURES (sizeof fixtures / sizeof fixtures[0])

Test(sse_fixtures, whole_fixture_gives_every_event_and_consumes_every_byte)
{
    for (size_t f = 0; f < NFIXTURES; f++) {
        size_t len;
        char *text = fixture_read(fixtures[f].file, &len);
        run_t run;
        feed_whole(text, len, &run);
        cr_assert_eq(run.n, fixtures[f].events, "%s: %zu events", fixtures[f].file, run.n);
        cr_assert_eq(run.consumed, len, "%s", fixtures[f].file);
        cr_assert_eq(run.last, SL_SSE_MORE);
        for (size_t i = 0; i < run.n; i++) {
            cr_assert(run.ev[i].has_data, "%s: event %zu has data", fixtures[f].file, i);
            cr_assert_eq(run.ev[i].data_lines, 1);
            cr_assert_not(run.ev[i].comment_only);
            cr_assert_neq(run.ev[i].data[0], ' ', "the space after the colon is not data");
        }
        if (fixtures[f].first_name)
            cr_assert_str_eq(run.ev[0].name, fixtures[f].first_name, "%s", fixtures[f].file);
        else
            cr_assert_not(run.ev[0].has_name, "%s", fixtures[f].file);
        free(text);
    }
}

/* Every fixture, with \n, \r\n and \r line ends, split in two at every byte offset. */
Test(sse_fixtures, a_split_at_any_byte_gives_the_same_events)
{
    static const char *eols[] = {"\n", "\r\n", "\r"};
    run_t *whole = malloc(sizeof *whole), *split = malloc(sizeof *split), *orig = malloc(sizeof *orig);
    for (size_t f = 0; f < NFIXTURES; f++) {
        size_t raw_len;
        char *raw = fixture_read(fixtures[f].file, &raw_len);
        feed_whole(raw, raw_len, orig);
        for (size_t e = 0; e < sizeof eols / sizeof eols[0]; e++) {
            size_t len;
            char *text = with_line_ends(raw, raw_len, eols[e], &len);
            feed_whole(text, len, whole);
            assert_same_events(whole, orig, fixtures[f].file);
            cr_assert_eq(whole->left, 0, "%s: a CRLF that has arrived stays with its event",
                         fixtures[f].file);
            for (size_t cut = 0; cut <= len; cut++) {
                feed_cuts(text, len, &cut, 1, SL_SSE_MAX_EVENT_DEFAULT, split);
                assert_same_events(split, whole, fixtures[f].file);
                cr_assert_eq(split->consumed + split->left, len);
                cr_assert_lt(split->left, 2, "at most a CRLF's LF is left over");
            }
            free(text);
        }
        free(raw);
    }
    free(whole);
    free(split);
    free(orig);
}

Test(sse_fixtures, one_byte_per_read_gives_the_same_events)
{
    run_t *whole = malloc(sizeof *whole), *split = malloc(sizeof *split);
    for (size_t f = 0; f < NFIXTURES; f++) {
        size_t len;
        char *text = fixture_read(fixtures[f].file, &len);
        size_t *cuts = malloc(len * sizeof *cuts);
        for (size_t i = 0; i < len; i++)
            cuts[i] = i;
        feed_whole(text, len, whole);
        feed_cuts(text, len, cuts, len, SL_SSE_MAX_EVENT_DEFAULT, split);
        assert_same_events(split, whole, fixtures[f].file);
        cr_assert_eq(split->consumed, len);
        free(cuts);
        free(text);
    }
    free(whole);
    free(split);
}

/* ---- field rules ---- */

static const struct {
    const char *rule;
    const char *in;
    const char *name; /* NULL: none */
    const char *data; /* NULL: no data line */
    uint32_t data_lines;
    bool comment_only;
} fields[] = {
    {"one data line", "data: x\n\n", NULL, "x", 1, false},
    {"no space after the colon", "data:x\n\n", NULL, "x", 1, false},
    {"only one leading space is dropped", "data:  x\n\n", NULL, " x", 1, false},
    {"a colon inside the value stays", "data: {\"a\":1}\n\n", NULL, "{\"a\":1}", 1, false},
    {"a field without colon has an empty value", "data\n\n", NULL, "", 1, false},
    {"several data lines are joined with LF", "data: a\ndata: b\ndata:\n\n", NULL, "a\nb\n", 3, false},
    {"named event", "event: message_start\ndata: {}\n\n", "message_start", "{}", 1, false},
    {"the last event name wins", "event: a\nevent: b\ndata: d\n\n", "b", "d", 1, false},
    {"an event without data keeps its name", "event: ping\n\n", "ping", NULL, 0, false},
    {"an empty event name is none", "event:\ndata: d\n\n", NULL, "d", 1, false},
    {"event without colon is an empty name", "event\ndata: d\n\n", NULL, "d", 1, false},
    {"a comment is a keep-alive", ": keep-alive\n\n", NULL, NULL, 0, true},
    {"comments between fields are skipped", "data: a\n: note\ndata: b\n\n", NULL, "a\nb", 2, false},
    {"id and retry are ignored", "id: 7\nretry: 100\n\n", NULL, NULL, 0, true},
    {"id beside data is ignored", "id: 7\ndata: x\n\n", NULL, "x", 1, false},
    {"unknown fields are ignored", "foo: bar\ndata: x\n\n", NULL, "x", 1, false},
    {"field names are case-sensitive", "Data: x\n\n", NULL, NULL, 0, true},
    {"CRLF line ends", "event: e\r\ndata: x\r\n\r\n", "e", "x", 1, false},
    {"CR line ends", "event: e\rdata: x\r\r", "e", "x", 1, false},
    {"mixed line ends", "event: e\rdata: a\r\ndata: b\n\n", "e", "a\nb", 2, false},
    {"a UTF-8 BOM starts the stream",
     "\xEF\xBB\xBF"
     "data: x\n\n",
     NULL, "x", 1, false},
    {"blank lines before an event belong to it", "\n\r\n\rdata: x\n\n", NULL, "x", 1, false},
    {"a CR inside a value ends the line", "data: a\rb\n\n", NULL, "a", 1, false},
};

Test(sse_fields, table)
{
    static char scratch[SCRATCH];
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        sl_sse_scanner_t s;
        sl_sse_init(&s, 1024, scratch, sizeof scratch);
        sl_sse_event_t ev;
        size_t len = strlen(fields[i].in);
        cr_assert_eq(sl_sse_next(&s, fields[i].in, len, &ev), SL_SSE_EVENT, "%s", fields[i].rule);
        cr_assert_eq(ev.len, len, "%s: the whole input is the event", fields[i].rule);
        if (fields[i].name) {
            cr_assert_not_null(ev.name, "%s", fields[i].rule);
            cr_assert_eq(ev.name_len, strlen(fields[i].name), "%s", fields[i].rule);
            cr_assert_eq(memcmp(ev.name, fields[i].name, ev.name_len), 0, "%s", fields[i].rule);
        } else {
            cr_assert_null(ev.name, "%s", fields[i].rule);
        }
        if (fields[i].data) {
            cr_assert_not_null(ev.data, "%s", fields[i].rule);
            cr_assert_eq(ev.data_len, strlen(fields[i].data), "%s", fields[i].rule);
            cr_assert_eq(memcmp(ev.data, fields[i].data, ev.data_len), 0, "%s", fields[i].rule);
        } else {
            cr_assert_null(ev.data, "%s", fields[i].rule);
        }
        cr_assert_eq(ev.data_lines, fields[i].data_lines, "%s", fields[i].rule);
        cr_assert_eq(ev.comment_only, fields[i].comment_only, "%s", fields[i].rule);
    }
}

Test(sse_fields, a_single_data_line_points_into_the_callers_buffer)
{
    static char scratch[SCRATCH];
    const char *in = "event: e\ndata: hello\n\n";
    sl_sse_scanner_t s;
    sl_sse_init(&s, 1024, scratch, sizeof scratch);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, in, strlen(in), &ev), SL_SSE_EVENT);
    cr_assert_eq(ev.name, in + 7);
    cr_assert_eq(ev.data, in + 15);
}

Test(sse_fields, joined_data_goes_to_the_scratch)
{
    static char scratch[SCRATCH];
    const char *in = "data: a\ndata: b\n\n";
    sl_sse_scanner_t s;
    sl_sse_init(&s, 1024, scratch, sizeof scratch);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, in, strlen(in), &ev), SL_SSE_EVENT);
    cr_assert_eq(ev.data, scratch);
}

Test(sse_fields, the_bom_is_skipped_only_at_the_start_of_the_stream)
{
    const char *in = "data: 1\n\n\xEF\xBB\xBF"
                     "data: 2\n\n";
    run_t run;
    feed_whole(in, strlen(in), &run);
    cr_assert_eq(run.n, 2);
    cr_assert_str_eq(run.ev[0].data, "1");
    cr_assert(run.ev[1].comment_only, "later, BOM+data is an unknown field name");
}

Test(sse_fields, a_bom_split_across_reads_is_still_skipped)
{
    const char *in = "\xEF\xBB\xBF"
                     "data: x\n\n";
    for (size_t cut = 0; cut <= 3; cut++) {
        run_t run;
        feed_cuts(in, strlen(in), &cut, 1, 1024, &run);
        cr_assert_eq(run.n, 1, "cut at %zu", cut);
        cr_assert_str_eq(run.ev[0].data, "x", "cut at %zu", cut);
        cr_assert_eq(run.consumed, strlen(in));
    }
}

Test(sse_fields, an_event_that_has_not_ended_waits_and_leaves_the_event_untouched)
{
    static const char *partial[] = {"",       "data: x", "data: x\n", "data: x\r", "data: x\r\n",
                                    "\n\n\n", ": c\n"};
    for (size_t i = 0; i < sizeof partial / sizeof partial[0]; i++) {
        sl_sse_scanner_t s;
        sl_sse_init(&s, 1024, NULL, 0);
        sl_sse_event_t ev;
        memset(&ev, 0xA5, sizeof ev);
        sl_sse_event_t before = ev;
        cr_assert_eq(sl_sse_next(&s, partial[i], strlen(partial[i]), &ev), SL_SSE_MORE, "[%zu]", i);
        cr_assert_eq(memcmp(&ev, &before, sizeof ev), 0, "[%zu]", i);
    }
}

Test(sse_fields, events_in_one_buffer_come_one_at_a_time)
{
    const char *in = "event: a\ndata: 1\n\n: ka\n\nevent: b\ndata: 2\n\n";
    sl_sse_scanner_t s;
    sl_sse_init(&s, 1024, NULL, 0);
    sl_sse_event_t ev;
    size_t off = 0;
    cr_assert_eq(sl_sse_next(&s, in + off, strlen(in + off), &ev), SL_SSE_EVENT);
    cr_assert_eq(ev.len, 18);
    off += ev.len;
    cr_assert_eq(sl_sse_next(&s, in + off, strlen(in + off), &ev), SL_SSE_EVENT);
    cr_assert(ev.comment_only);
    cr_assert_eq(ev.len, 6);
    off += ev.len;
    cr_assert_eq(sl_sse_next(&s, in + off, strlen(in + off), &ev), SL_SSE_EVENT);
    cr_assert(sl_sse_event_is(&ev, "b"));
    cr_assert_not(sl_sse_event_is(&ev, "bb"));
    cr_assert_not(sl_sse_event_is(&ev, ""));
    off += ev.len;
    cr_assert_eq(off, strlen(in));
    cr_assert_eq(sl_sse_next(&s, in + off, 0, &ev), SL_SSE_MORE);
}

Test(sse_fields, a_crlf_split_after_its_cr_leaves_the_lf_to_the_next_event)
{
    const char *in = "data: 1\r\n\r\ndata: 2\r\n\r\n";
    size_t cut = 10; /* after the CR of the blank line */
    run_t run;
    feed_cuts(in, strlen(in), &cut, 1, 1024, &run);
    cr_assert_eq(run.n, 2);
    cr_assert_str_eq(run.ev[0].data, "1");
    cr_assert_str_eq(run.ev[1].data, "2");
    cr_assert_eq(run.consumed, strlen(in));
}

/* ---- the cap ---- */

Test(sse_cap, an_event_longer_than_the_cap_is_too_large)
{
    char in[200];
    memset(in, 'a', sizeof in);
    memcpy(in, "data: ", 6);
    sl_sse_scanner_t s;
    sl_sse_init(&s, 64, NULL, 0);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, in, 63, &ev), SL_SSE_MORE);
    cr_assert_eq(sl_sse_next(&s, in, 64, &ev), SL_SSE_TOO_LARGE);
    in[198] = '\n';
    in[199] = '\n';
    sl_sse_init(&s, 64, NULL, 0);
    cr_assert_eq(sl_sse_next(&s, in, sizeof in, &ev), SL_SSE_TOO_LARGE, "even when its end has arrived");
}

Test(sse_cap, an_event_of_exactly_the_cap_passes)
{
    char in[64];
    memset(in, 'a', sizeof in);
    memcpy(in, "data: ", 6);
    in[62] = '\n';
    in[63] = '\n';
    sl_sse_scanner_t s;
    sl_sse_init(&s, 64, NULL, 0);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, in, sizeof in, &ev), SL_SSE_EVENT);
    cr_assert_eq(ev.len, 64);
    cr_assert_eq(ev.data_len, 56);
}

Test(sse_cap, endless_blank_lines_count_against_the_cap)
{
    char in[100];
    memset(in, '\n', sizeof in);
    sl_sse_scanner_t s;
    sl_sse_init(&s, 64, NULL, 0);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, in, sizeof in, &ev), SL_SSE_TOO_LARGE);
}

Test(sse_cap, a_join_larger_than_the_scratch_is_too_large_and_leaves_the_event_untouched)
{
    char scratch[8];
    const char *in = "data: 1234\ndata: 5678\n\n";
    sl_sse_scanner_t s;
    sl_sse_init(&s, 1024, scratch, sizeof scratch);
    sl_sse_event_t ev = {.len = 77};
    cr_assert_eq(sl_sse_next(&s, in, strlen(in), &ev), SL_SSE_TOO_LARGE);
    cr_assert_eq(ev.len, 77);
    sl_sse_init(&s, 1024, NULL, 0);
    cr_assert_eq(sl_sse_next(&s, in, strlen(in), &ev), SL_SSE_TOO_LARGE, "no scratch: no join");
    cr_assert_eq(sl_sse_next(&s, "data: x\n\n", 9, &ev), SL_SSE_EVENT, "one line needs none");
}

/* ---- the cost ---- */

Test(sse_cost, a_long_event_arriving_in_many_reads_is_searched_once)
{
    enum { BIG = 200000 };
    char *in = malloc(BIG);
    memset(in, 'x', BIG);
    memcpy(in, "data: ", 6);
    in[BIG - 2] = '\n';
    in[BIG - 1] = '\n';
    sl_sse_scanner_t s;
    sl_sse_init(&s, SL_SSE_MAX_EVENT_DEFAULT, NULL, 0);
    sl_sse_event_t ev;
    for (size_t have = 1; have < BIG; have += 7) {
        cr_assert_eq(sl_sse_next(&s, in, have, &ev), SL_SSE_MORE);
        cr_assert_eq(s.scanned, have, "the search resumes where it stopped");
    }
    cr_assert_eq(sl_sse_next(&s, in, BIG, &ev), SL_SSE_EVENT);
    cr_assert_eq(ev.len, BIG);
    cr_assert_eq(s.scanned, 0, "the next event starts a fresh search");
    free(in);
}

/* Lines are found a window at a time: long lines, and lines ended by CR alone or CRLF across the
 * window's edge, give the same fields as short LF lines. */
Test(sse_fields, long_lines_and_every_line_ending_across_scan_windows)
{
    static char scratch[8192];
    static const char *const endings[] = {"\n", "\r", "\r\n"};
    for (size_t e = 0; e < 3; e++) {
        for (size_t value_len = 500; value_len < 530; value_len++) {
            char in[4096];
            size_t n = 0;
            n += (size_t)snprintf(in + n, sizeof in - n, "event: e%s", endings[e]);
            n += (size_t)snprintf(in + n, sizeof in - n, "data: ");
            memset(in + n, 'v', value_len);
            n += value_len;
            n += (size_t)snprintf(in + n, sizeof in - n, "%sdata: b%s%s", endings[e], endings[e], endings[e]);
            sl_sse_scanner_t s;
            sl_sse_init(&s, SL_SSE_MAX_EVENT_DEFAULT, scratch, sizeof scratch);
            sl_sse_event_t ev;
            cr_assert_eq(sl_sse_next(&s, in, n, &ev), SL_SSE_EVENT, "ending %zu, value %zu", e, value_len);
            cr_assert_eq(ev.len, n, "ending %zu, value %zu", e, value_len);
            cr_assert_eq(ev.name_len, 1);
            cr_assert_eq(ev.data_lines, 2);
            cr_assert_eq(ev.data_len, value_len + 2, "ending %zu, value %zu", e, value_len);
            cr_assert_eq(ev.data[value_len], '\n');
            cr_assert_eq(ev.data[value_len + 1], 'b');
        }
    }
}

/* Searching each line for an LF to the buffer's end would be quadratic here (minutes, not milliseconds). */
Test(sse_cost, lines_ended_by_cr_alone_do_not_rescan_the_buffer, .timeout = 20)
{
    enum { LINES = 100000 };
    char *in = malloc(LINES * 3 + 1);
    for (size_t i = 0; i < LINES; i++)
        memcpy(in + i * 3, ":c\r", 3); /* comment lines, then one blank line */
    in[LINES * 3] = '\r';
    sl_sse_scanner_t s;
    sl_sse_init(&s, 1u << 20, NULL, 0);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, in, LINES * 3 + 1, &ev), SL_SSE_EVENT);
    cr_assert(ev.comment_only);
    free(in);
}
