/*
 * Demo mode's script (core/demo_script.c): the trouble schedule and its
 * pinning; the plan per mode (fractions over many draws); every dialect's
 * answers read back by the gateway's own SSE / eventstream parsers and
 * classifiers (content is content, the overload and 429 errors land in
 * their classes with their hints, a cut stream is incomplete) and compared
 * with the shape of the recorded fixtures. The demo upstream's config and
 * server are test_demo.c's.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/answer_usage.h"
#include "core/classify.h"
#include "core/demo_script.h"
#include "core/dialect.h"
#include "core/hints.h"
#include "test_demo_read.h"
#include "test_fixture.h"

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

static const sl_dialect_t dialects[] = {SL_DIALECT_ANTHROPIC, SL_DIALECT_OPENAI_CHAT,
                                        SL_DIALECT_OPENAI_RESPONSES, SL_DIALECT_GEMINI, SL_DIALECT_BEDROCK};

static sl_demo_request_t
request(sl_dialect_t d, char upstream, bool stream)
{
    sl_demo_request_t r = {.dialect = d,
                           .op = SL_DEMO_OP_GENERATE,
                           .upstream = upstream,
                           .stream = stream,
                           .input_tokens = 42,
                           .unix_secs = 1795969439,
                           .serial = 7};
    strcpy(r.model, "demo-x");
    return r;
}

/* ---- the schedule --------------------------------------------------------------------------------- */

Test(demo_schedule, the_cycle_runs_calm_storm_drops_slow_overload_then_again)
{
    static const struct {
        int64_t at;
        sl_demo_trouble_t mode;
        int64_t start, end;
        uint64_t number;
    } rows[] = {
        {-5, SL_DEMO_CALM, 0, 20000, 0},
        {0, SL_DEMO_CALM, 0, 20000, 0},
        {19999, SL_DEMO_CALM, 0, 20000, 0},
        {20000, SL_DEMO_RATE_LIMIT, 20000, 40000, 1},
        {39999, SL_DEMO_RATE_LIMIT, 20000, 40000, 1},
        {40000, SL_DEMO_DROP, 40000, 55000, 2},
        {55000, SL_DEMO_SLOW, 55000, 70000, 3},
        {70000, SL_DEMO_OVERLOAD, 70000, 85000, 4},
        {84999, SL_DEMO_OVERLOAD, 70000, 85000, 4},
        {85000, SL_DEMO_CALM, 85000, 105000, 5},
        {85000 * 3 + 25000, SL_DEMO_RATE_LIMIT, 85000 * 3 + 20000, 85000 * 3 + 40000, 16},
    };
    for (size_t i = 0; i < NELEMS(rows); i++) {
        sl_demo_phase_t p = sl_demo_phase_at(rows[i].at, false, SL_DEMO_CALM);
        cr_assert_eq(p.mode, rows[i].mode, "at %lld: %s", (long long)rows[i].at,
                     sl_demo_trouble_name(p.mode));
        cr_assert_eq(p.start_ms, rows[i].start, "at %lld", (long long)rows[i].at);
        cr_assert_eq(p.end_ms, rows[i].end, "at %lld", (long long)rows[i].at);
        cr_assert_eq(p.number, rows[i].number, "at %lld", (long long)rows[i].at);
    }
}

Test(demo_schedule, a_pinned_mode_holds_for_good)
{
    for (int m = 0; m < SL_DEMO_TROUBLE_COUNT; m++) {
        for (int64_t at = 0; at < 400000; at += 7000) {
            sl_demo_phase_t p = sl_demo_phase_at(at, true, (sl_demo_trouble_t)m);
            cr_assert_eq(p.mode, (sl_demo_trouble_t)m);
            cr_assert_eq(p.end_ms, INT64_MAX);
            cr_assert_eq(p.number, 0);
        }
    }
}

Test(demo_schedule, mode_names_parse_and_unknown_ones_do_not)
{
    for (int m = 0; m < SL_DEMO_TROUBLE_COUNT; m++) {
        sl_demo_trouble_t out = SL_DEMO_TROUBLE_COUNT;
        cr_assert(sl_demo_trouble_parse(sl_demo_trouble_name((sl_demo_trouble_t)m), &out));
        cr_assert_eq(out, (sl_demo_trouble_t)m);
    }
    static const char *const storm[] = {"429", "ratelimit", "rate_limit", "RATE-LIMIT"};
    for (size_t i = 0; i < NELEMS(storm); i++) {
        sl_demo_trouble_t out = SL_DEMO_CALM;
        cr_assert(sl_demo_trouble_parse(storm[i], &out), "%s", storm[i]);
        cr_assert_eq(out, SL_DEMO_RATE_LIMIT);
    }
    static const char *const bad[] = {"", "cycle", "storm", "calm ", "overloaded"};
    for (size_t i = 0; i < NELEMS(bad); i++) {
        sl_demo_trouble_t out = SL_DEMO_SLOW;
        cr_assert_not(sl_demo_trouble_parse(bad[i], &out), "%s", bad[i]);
        cr_assert_eq(out, SL_DEMO_SLOW, "left untouched");
    }
    cr_assert_not(sl_demo_trouble_parse(NULL, NULL));
    cr_assert_str_eq(sl_demo_trouble_describe(SL_DEMO_RATE_LIMIT), "429 storm on the 'a' upstreams");
}

/* ---- request parsing ------------------------------------------------------------------------------ */

Test(demo_parse, every_dialect_path_on_a_and_b)
{
    static const struct {
        const char *method, *target, *body;
        sl_dialect_t dialect;
        sl_demo_op_t op;
        char upstream;
        bool stream;
        const char *model;
    } rows[] = {
        {"POST", "/a/v1/messages", "{\"model\":\"claude-x\",\"stream\":true}", SL_DIALECT_ANTHROPIC,
         SL_DEMO_OP_GENERATE, 'a', true, "claude-x"},
        {"POST", "/b/v1/messages?beta=true", "{\"model\":\"claude-x\"}", SL_DIALECT_ANTHROPIC,
         SL_DEMO_OP_GENERATE, 'b', false, "claude-x"},
        {"POST", "/a/v1/messages/count_tokens", "{\"model\":\"claude-x\",\"stream\":true}",
         SL_DIALECT_ANTHROPIC, SL_DEMO_OP_COUNT_TOKENS, 'a', false, "claude-x"},
        {"POST", "/b/v1/chat/completions", "{\"model\":\"gpt-4o\",\"stream\":true}", SL_DIALECT_OPENAI_CHAT,
         SL_DEMO_OP_GENERATE, 'b', true, "gpt-4o"},
        {"POST", "/a/v1/responses", "{\"model\":\"gpt-5\",\"stream\":false}", SL_DIALECT_OPENAI_RESPONSES,
         SL_DEMO_OP_GENERATE, 'a', false, "gpt-5"},
        {"POST", "/a/v1/responses/input_tokens", "{\"model\":\"gpt-5\"}", SL_DIALECT_OPENAI_RESPONSES,
         SL_DEMO_OP_COUNT_TOKENS, 'a', false, "gpt-5"},
        {"POST", "/a/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", "{}", SL_DIALECT_GEMINI,
         SL_DEMO_OP_GENERATE, 'a', true, "gemini-2.5-flash"},
        {"POST", "/b/v1beta/models/gemini-2.5-pro:generateContent", "{\"stream\":true}", SL_DIALECT_GEMINI,
         SL_DEMO_OP_GENERATE, 'b', false, "gemini-2.5-pro"},
        {"POST", "/b/model/m/converse", "{\"stream\":true}", SL_DIALECT_BEDROCK, SL_DEMO_OP_GENERATE, 'b',
         false, "m"},
        {"POST", "/b/v1beta/models/gemini-2.5-pro:countTokens", "{}", SL_DIALECT_GEMINI,
         SL_DEMO_OP_COUNT_TOKENS, 'b', false, "gemini-2.5-pro"},
        {"POST", "/a/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream", "{}",
         SL_DIALECT_BEDROCK, SL_DEMO_OP_GENERATE, 'a', true, "anthropic.claude-3-5-haiku-20241022-v1:0"},
        {"POST", "/b/model/amazon.nova-lite-v1:0/converse", "{}", SL_DIALECT_BEDROCK, SL_DEMO_OP_GENERATE,
         'b', false, "amazon.nova-lite-v1:0"},
        {"POST", "/a/v1/messages", "{\"model\":\"ev\\\"il\\n<x>\"}", SL_DIALECT_ANTHROPIC,
         SL_DEMO_OP_GENERATE, 'a', false, "ev_il__x_"},
        {"POST", "/a/v1/messages", "{\"model\":7}", SL_DIALECT_ANTHROPIC, SL_DEMO_OP_GENERATE, 'a', false,
         "demo-model"},
    };
    for (size_t i = 0; i < NELEMS(rows); i++) {
        sl_demo_request_t r;
        memset(&r, 0xAB, sizeof r);
        sl_demo_parse_t st = sl_demo_request_parse(rows[i].method, rows[i].target, strlen(rows[i].target),
                                                   rows[i].body, strlen(rows[i].body), &r);
        cr_assert_eq(st, SL_DEMO_PARSE_OK, "%s", rows[i].target);
        cr_assert_eq(r.dialect, rows[i].dialect, "%s", rows[i].target);
        cr_assert_eq(r.op, rows[i].op, "%s", rows[i].target);
        cr_assert_eq(r.upstream, rows[i].upstream, "%s", rows[i].target);
        cr_assert_eq(r.stream, rows[i].stream, "%s", rows[i].target);
        cr_assert_str_eq(r.model, rows[i].model, "%s", rows[i].target);
        cr_assert_geq(r.input_tokens, 1);
        cr_assert_eq(r.serial, 0);
    }
}

Test(demo_parse, other_paths_are_not_found_and_bad_bodies_are_bad)
{
    static const struct {
        const char *method, *target;
    } missing[] = {
        {"POST", "/c/v1/messages"},
        {"POST", "/v1/messages"},
        {"POST", "/a"},
        {"POST", "/a/"},
        {"POST", "/a/v2/messages"},
        {"GET", "/a/v1/models"},
        {"GET", "/a/v1/messages"},
        {"POST", "/ab/v1/messages"},
        {"POST", "/a/v1beta/models/:generateContent"},
    };
    for (size_t i = 0; i < NELEMS(missing); i++) {
        sl_demo_request_t r;
        cr_assert_eq(sl_demo_request_parse(missing[i].method, missing[i].target, strlen(missing[i].target),
                                           "{}", 2, &r),
                     SL_DEMO_PARSE_NOT_FOUND, "%s %s", missing[i].method, missing[i].target);
    }
    static const char *const bodies[] = {"", "not json", "[1,2]", "\"x\"", "{\"model\":", "null"};
    for (size_t i = 0; i < NELEMS(bodies); i++) {
        sl_demo_request_t r;
        cr_assert_eq(
            sl_demo_request_parse("POST", "/b/v1/chat/completions", 22, bodies[i], strlen(bodies[i]), &r),
            SL_DEMO_PARSE_BAD_BODY, "%s", bodies[i]);
        cr_assert_eq(r.dialect, SL_DIALECT_OPENAI_CHAT);
    }
}

/* ---- the plan ------------------------------------------------------------------------------------- */

#define DRAWS 20000

typedef struct {
    unsigned outcome[SL_DEMO_OUTCOME_COUNT];
    unsigned slow;        /* answers whose first token comes after 3 s */
    unsigned bad_status;  /* a status that does not go with its outcome */
    unsigned bad_hint;    /* a 429 without a 2-6 s hint, or a hint elsewhere */
    unsigned bad_timings; /* out of the documented ranges */
} tally_t;

static tally_t
tally(sl_dialect_t d, char upstream, bool stream, sl_demo_trouble_t mode)
{
    tally_t t = {0};
    sl_demo_request_t r = request(d, upstream, stream);
    for (uint64_t i = 0; i < DRAWS; i++) {
        sl_demo_plan_t p = sl_demo_decide(&r, mode, i);
        t.outcome[p.outcome]++;
        if (p.outcome == SL_DEMO_ANSWER && p.first_token_ms >= 3000)
            t.slow++;
        int want = p.outcome == SL_DEMO_OVERLOADED          ? (d == SL_DIALECT_ANTHROPIC ? 529 : 503)
                   : p.outcome == SL_DEMO_RATE_LIMITED      ? 429
                   : p.outcome == SL_DEMO_CLOSE_BEFORE_HEAD ? 0
                                                            : 200;
        t.bad_status += p.status != want;
        bool hint_ok = p.outcome == SL_DEMO_RATE_LIMITED ? p.retry_after_secs >= 2 && p.retry_after_secs <= 6
                                                         : p.retry_after_secs == 0;
        t.bad_hint += !hint_ok;
        t.bad_timings += p.words < 12 || p.words > 60 || p.token_delay_ms < 20 || p.token_delay_ms > 70 ||
                         p.first_token_ms < 100 || p.first_token_ms > 10000 || p.stream != stream;
    }
    return t;
}

/* Asserts count/DRAWS is pct within 1.5 points. */
#define assert_pct(count, pct, what)                                                                         \
    do {                                                                                                     \
        double got_ = 100.0 * (count) / DRAWS;                                                               \
        cr_assert(got_ > (pct)-1.5 && got_ < (pct) + 1.5, "%s: %.2f %%, expected %d %%", what, got_,         \
                  (int)(pct));                                                                               \
    } while (0)

Test(demo_decide, calm_is_calm_but_for_a_rare_overload_on_a)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        tally_t a = tally(dialects[i], 'a', true, SL_DEMO_CALM);
        assert_pct(a.outcome[SL_DEMO_OVERLOADED] + a.outcome[SL_DEMO_STREAM_OVERLOADED], 3,
                   "calm a overload");
        assert_pct(a.outcome[SL_DEMO_ANSWER], 97, "calm a answers");
        tally_t b = tally(dialects[i], 'b', true, SL_DEMO_CALM);
        cr_assert_eq(b.outcome[SL_DEMO_ANSWER], DRAWS);
        cr_assert_eq(a.bad_status + b.bad_status + a.bad_hint + b.bad_hint + a.bad_timings + b.bad_timings,
                     0);
        cr_assert_eq(a.slow + b.slow, 0);
    }
}

Test(demo_decide, overload_hits_a_sixty_percent_half_of_streams_inside_the_stream)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        tally_t s = tally(dialects[i], 'a', true, SL_DEMO_OVERLOAD);
        assert_pct(s.outcome[SL_DEMO_OVERLOADED], 30, "overload a stream status");
        assert_pct(s.outcome[SL_DEMO_STREAM_OVERLOADED], 30, "overload a in-stream");
        tally_t w = tally(dialects[i], 'a', false, SL_DEMO_OVERLOAD);
        assert_pct(w.outcome[SL_DEMO_OVERLOADED], 60, "overload a whole");
        cr_assert_eq(w.outcome[SL_DEMO_STREAM_OVERLOADED], 0);
        tally_t b = tally(dialects[i], 'b', true, SL_DEMO_OVERLOAD);
        assert_pct(b.outcome[SL_DEMO_OVERLOADED] + b.outcome[SL_DEMO_STREAM_OVERLOADED], 10, "overload b");
        cr_assert_eq(s.bad_status + w.bad_status + b.bad_status + s.bad_hint + w.bad_hint + b.bad_hint, 0);
        cr_assert_eq(s.bad_timings + w.bad_timings + b.bad_timings, 0);
    }
}

Test(demo_decide, the_storm_answers_429_with_a_hint_on_a_mostly)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        for (int stream = 0; stream < 2; stream++) {
            tally_t a = tally(dialects[i], 'a', stream, SL_DEMO_RATE_LIMIT);
            assert_pct(a.outcome[SL_DEMO_RATE_LIMITED], 85, "storm a");
            tally_t b = tally(dialects[i], 'b', stream, SL_DEMO_RATE_LIMIT);
            assert_pct(b.outcome[SL_DEMO_RATE_LIMITED], 25, "storm b");
            cr_assert_eq(b.outcome[SL_DEMO_ANSWER], DRAWS - b.outcome[SL_DEMO_RATE_LIMITED]);
            cr_assert_eq(a.bad_status + b.bad_status + a.bad_hint + b.bad_hint, 0);
        }
    }
}

Test(demo_decide, drops_cut_half_the_streams_on_a_before_or_after_content)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        tally_t s = tally(dialects[i], 'a', true, SL_DEMO_DROP);
        assert_pct(s.outcome[SL_DEMO_CUT_BEFORE_CONTENT], 25, "drop a before content");
        assert_pct(s.outcome[SL_DEMO_CUT_AFTER_CONTENT], 25, "drop a after content");
        cr_assert_eq(s.outcome[SL_DEMO_CLOSE_BEFORE_HEAD], 0);
        tally_t w = tally(dialects[i], 'a', false, SL_DEMO_DROP);
        assert_pct(w.outcome[SL_DEMO_CLOSE_BEFORE_HEAD], 30, "drop a whole");
        cr_assert_eq(w.outcome[SL_DEMO_CUT_BEFORE_CONTENT] + w.outcome[SL_DEMO_CUT_AFTER_CONTENT], 0);
        tally_t b = tally(dialects[i], 'b', true, SL_DEMO_DROP);
        assert_pct(b.outcome[SL_DEMO_CUT_BEFORE_CONTENT] + b.outcome[SL_DEMO_CUT_AFTER_CONTENT], 5, "drop b");
        cr_assert_eq(s.bad_status + w.bad_status + b.bad_status, 0);
    }
}

Test(demo_decide, slow_delays_the_first_token_on_a_by_three_to_ten_seconds)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        tally_t a = tally(dialects[i], 'a', true, SL_DEMO_SLOW);
        cr_assert_eq(a.outcome[SL_DEMO_ANSWER], DRAWS);
        assert_pct(a.slow, 85, "slow a");
        tally_t b = tally(dialects[i], 'b', true, SL_DEMO_SLOW);
        cr_assert_eq(b.slow, 0);
        cr_assert_eq(a.bad_timings + b.bad_timings, 0);
    }
    /* A whole answer is sent once "generated": its head waits for the slow first token too. */
    sl_demo_request_t r = request(SL_DIALECT_OPENAI_CHAT, 'a', false);
    unsigned late = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        sl_demo_plan_t p = sl_demo_decide(&r, SL_DEMO_SLOW, i);
        cr_assert_geq(p.head_delay_ms, p.first_token_ms + p.words * p.token_delay_ms);
        late += p.head_delay_ms >= 3000;
    }
    cr_assert_gt(late, 800);
}

Test(demo_decide, the_plan_depends_on_the_number_alone_and_token_counts_are_never_troubled)
{
    sl_demo_request_t r = request(SL_DIALECT_GEMINI, 'a', true);
    for (uint64_t i = 0; i < 1000; i++) {
        sl_demo_plan_t p1 = sl_demo_decide(&r, SL_DEMO_DROP, i * 7919);
        sl_demo_plan_t p2 = sl_demo_decide(&r, SL_DEMO_DROP, i * 7919);
        cr_assert(p1.outcome == p2.outcome && p1.status == p2.status &&
                  p1.retry_after_secs == p2.retry_after_secs && p1.stream == p2.stream &&
                  p1.words == p2.words && p1.head_delay_ms == p2.head_delay_ms &&
                  p1.first_token_ms == p2.first_token_ms && p1.token_delay_ms == p2.token_delay_ms &&
                  p1.cut_after_events == p2.cut_after_events && p1.text_seed == p2.text_seed);
    }
    r.op = SL_DEMO_OP_COUNT_TOKENS;
    for (int m = 0; m < SL_DEMO_TROUBLE_COUNT; m++) {
        for (uint64_t i = 0; i < 2000; i++) {
            sl_demo_plan_t p = sl_demo_decide(&r, (sl_demo_trouble_t)m, i);
            cr_assert_eq(p.outcome, SL_DEMO_ANSWER);
            cr_assert_eq(p.status, 200);
            cr_assert_not(p.stream);
        }
    }
}

/* The pieces must tile the body in order: the bytes a client gets are the body itself. */
static void
assert_pieces_tile(const sl_demo_answer_t *a)
{
    size_t at = 0;
    for (size_t i = 0; i < a->n_pieces; i++) {
        cr_assert_eq(a->pieces[i].off, at, "piece %zu", i);
        at += a->pieces[i].len;
    }
    cr_assert_eq(at, a->body.len);
}

/* Runs of the same kind collapsed: "OOCCCCE" -> "OCE". */
static void
collapse(const char *kinds, char *out)
{
    size_t n = 0;
    for (const char *k = kinds; *k; k++) {
        if (n == 0 || out[n - 1] != *k)
            out[n++] = *k;
    }
    out[n] = '\0';
}

static sl_demo_plan_t
plan_of(sl_demo_outcome_t outcome, bool stream, uint64_t seed)
{
    sl_demo_plan_t p = {.outcome = outcome,
                        .status = 200,
                        .stream = stream,
                        .words = 23,
                        .head_delay_ms = 50,
                        .first_token_ms = 300,
                        .token_delay_ms = 40,
                        .cut_after_events = 3,
                        .text_seed = seed};
    if (outcome == SL_DEMO_OVERLOADED)
        p.status = 503;
    if (outcome == SL_DEMO_RATE_LIMITED) {
        p.status = 429;
        p.retry_after_secs = 4;
    }
    return p;
}

Test(demo_answers, every_dialect_streams_content_whole_with_its_usage_and_text)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        for (uint64_t seed = 0; seed < 40; seed++) {
            sl_demo_request_t r = request(dialects[i], 'b', true);
            sl_demo_plan_t p = plan_of(SL_DEMO_ANSWER, true, seed * 1000003);
            p.words = 12 + (uint32_t)seed;
            sl_demo_answer_t a;
            sl_demo_answer_build(&r, &p, &a);
            cr_assert_eq(a.status, 200);
            cr_assert(a.chunked);
            cr_assert_eq(a.end, SL_DEMO_END_FINISH);
            cr_assert_gt(a.n_pieces, 3);
            cr_assert_eq(a.pieces[1].delay_ms, p.first_token_ms,
                         "the first content after the first-token delay");
            cr_assert_eq(a.pieces[2].delay_ms, p.token_delay_ms);
            assert_pieces_tile(&a);
            seen_t o;
            feed(dialects[i], a.body.data, a.body.len, &o);
            const char *slug = sl_dialect_slug(dialects[i]);
            cr_assert(sl_stream_complete(&o.st), "%s: whole (%s)", slug, o.kinds);
            cr_assert_eq(o.st.phase, SL_STREAM_FLOWING, "%s: content seen", slug);
            cr_assert_not(o.has_error, "%s: %s", slug, o.kinds);
            cr_assert_eq(o.leftover, 0, "%s", slug);
            sl_strbuf_t want = {0};
            uint32_t words = sl_demo_text(p.text_seed, p.words, &want);
            cr_assert_eq(o.st.usage.output, words, "%s: output tokens", slug);
            cr_assert_eq(o.st.usage.input, r.input_tokens, "%s: input tokens", slug);
            cr_assert_str_eq(o.text.data ? o.text.data : "", want.data, "%s: the streamed text", slug);
            free(want.data);
            seen_free(&o);
            sl_demo_answer_free(&a);
        }
    }
}

Test(demo_answers, streams_have_the_shape_of_the_recorded_fixtures)
{
    static const struct {
        sl_dialect_t dialect;
        const char *fixture;
    } rows[] = {
        {SL_DIALECT_ANTHROPIC, "anthropic-ok.sse"},        {SL_DIALECT_OPENAI_CHAT, "chat-ok.sse"},
        {SL_DIALECT_OPENAI_RESPONSES, "responses-ok.sse"}, {SL_DIALECT_GEMINI, "gemini-ok.sse"},
        {SL_DIALECT_BEDROCK, "bedrock-ok.eventstream"},
    };
    for (size_t i = 0; i < NELEMS(rows); i++) {
        size_t len;
        char *fx = fixture_read(rows[i].fixture, &len);
        seen_t want, got;
        feed(rows[i].dialect, fx, len, &want);
        sl_demo_request_t r = request(rows[i].dialect, 'a', true);
        sl_demo_plan_t p = plan_of(SL_DEMO_ANSWER, true, 99);
        sl_demo_answer_t a;
        sl_demo_answer_build(&r, &p, &a);
        feed(rows[i].dialect, a.body.data, a.body.len, &got);
        char cw[64], cg[64];
        collapse(want.kinds, cw);
        collapse(got.kinds, cg);
        cr_assert_str_eq(cg, cw, "%s: %s vs the fixture's %s", rows[i].fixture, got.kinds, want.kinds);
        /* Every event name the demo sends is one the provider sends too, and the reverse. */
        cr_assert_eq(got.n_names, want.n_names, "%s", rows[i].fixture);
        for (size_t g = 0; g < got.n_names; g++) {
            bool found = false;
            for (size_t w = 0; w < want.n_names; w++)
                found = found || strcmp(got.names[g], want.names[w]) == 0;
            cr_assert(found, "%s: event %s is not in the fixture", rows[i].fixture, got.names[g]);
        }
        seen_free(&want);
        seen_free(&got);
        sl_demo_answer_free(&a);
        free(fx);
    }
}

Test(demo_answers, an_overload_inside_the_stream_is_a_temporary_error_before_content)
{
    static const char *const fixtures[] = {"anthropic-overloaded-before-content.sse",
                                           "chat-server-error-before-content.sse",
                                           "responses-failed-overloaded.sse", "gemini-unavailable.sse",
                                           "bedrock-service-unavailable.eventstream"};
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        sl_demo_request_t r = request(dialects[i], 'a', true);
        sl_demo_plan_t p = plan_of(SL_DEMO_STREAM_OVERLOADED, true, 5);
        sl_demo_answer_t a;
        sl_demo_answer_build(&r, &p, &a);
        cr_assert_eq(a.status, 200);
        cr_assert_eq(a.end, SL_DEMO_END_FINISH);
        cr_assert_eq(a.pieces[a.n_pieces - 1].delay_ms, p.first_token_ms);
        assert_pieces_tile(&a);
        seen_t o;
        feed(dialects[i], a.body.data, a.body.len, &o);
        const char *slug = sl_dialect_slug(dialects[i]);
        cr_assert(o.has_error, "%s: %s", slug, o.kinds);
        cr_assert_eq(o.kinds[o.n - 1], 'X', "%s: ends with the error (%s)", slug, o.kinds);
        cr_assert_eq(o.st.phase, SL_STREAM_HELD, "%s: before any content", slug);
        cr_assert_not(sl_stream_complete(&o.st), "%s", slug);
        sl_failure_t f = {.source = SL_FAILURE_STREAM_ERROR,
                          .dialect = dialects[i],
                          .status = o.error.status,
                          .body = o.error_data,
                          .body_len = strlen(o.error_data),
                          .code = o.error.code[0] ? o.error.code : NULL};
        cr_assert_eq(sl_classify_failure(&f), SL_FAILURE_TEMPORARY, "%s: %s", slug, o.error_data);
        /* The same kinds as the provider's own overloaded stream. */
        size_t len;
        char *fx = fixture_read(fixtures[i], &len);
        seen_t want;
        feed(dialects[i], fx, len, &want);
        cr_assert_str_eq(o.kinds, want.kinds, "%s: %s vs %s", fixtures[i], o.kinds, want.kinds);
        cr_assert_str_eq(o.error.code, want.error.code, "%s", fixtures[i]);
        seen_free(&want);
        free(fx);
        seen_free(&o);
        sl_demo_answer_free(&a);
    }
}

Test(demo_answers, a_cut_stream_is_incomplete_before_or_after_content)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        const char *slug = sl_dialect_slug(dialects[i]);
        sl_demo_request_t r = request(dialects[i], 'a', true);
        sl_demo_plan_t before = plan_of(SL_DEMO_CUT_BEFORE_CONTENT, true, 11);
        sl_demo_answer_t a;
        sl_demo_answer_build(&r, &before, &a);
        cr_assert_eq(a.end, SL_DEMO_END_CUT);
        assert_pieces_tile(&a);
        seen_t o;
        feed(dialects[i], a.body.data, a.body.len, &o);
        cr_assert_eq(o.st.phase, SL_STREAM_HELD, "%s: no content (%s)", slug, o.kinds);
        cr_assert_not(o.has_error, "%s", slug);
        cr_assert_not(sl_stream_complete(&o.st), "%s", slug);
        seen_free(&o);
        sl_demo_answer_free(&a);

        for (uint32_t cut = 1; cut < 30; cut++) {
            sl_demo_plan_t after = plan_of(SL_DEMO_CUT_AFTER_CONTENT, true, 11 + cut);
            after.cut_after_events = cut;
            sl_demo_answer_build(&r, &after, &a);
            cr_assert_eq(a.end, SL_DEMO_END_CUT);
            assert_pieces_tile(&a);
            feed(dialects[i], a.body.data, a.body.len, &o);
            cr_assert_eq(o.st.phase, SL_STREAM_FLOWING, "%s: content seen (%s)", slug, o.kinds);
            cr_assert_not(o.has_error, "%s", slug);
            cr_assert_not(sl_stream_complete(&o.st), "%s: cut after %u events (%s)", slug, cut, o.kinds);
            cr_assert_gt(o.leftover, 0, "%s: cut in the middle of an event", slug);
            seen_free(&o);
            sl_demo_answer_free(&a);
        }
    }
}

/* The value of header name in an answer's header lines, copied into out; false when absent. */
static bool
answer_header(const sl_demo_answer_t *a, const char *name, char *out, size_t size)
{
    const char *p = a->headers.data ? a->headers.data : "";
    size_t n = strlen(name);
    for (const char *line = p; *line; line = strstr(line, "\r\n") + 2) {
        const char *eol = strstr(line, "\r\n");
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            snprintf(out, size, "%.*s", (int)(eol - v), v);
            return true;
        }
    }
    return false;
}

static bool
header_at(const void *ctx, size_t i, sl_header_t *out)
{
    const sl_demo_answer_t *a = ctx;
    const char *line = a->headers.data ? a->headers.data : "";
    for (size_t k = 0; k < i && *line; k++)
        line = strstr(line, "\r\n") + 2;
    if (*line == '\0')
        return false;
    const char *colon = strchr(line, ':'), *eol = strstr(line, "\r\n");
    const char *v = colon + 1;
    while (*v == ' ')
        v++;
    *out = (sl_header_t){line, (size_t)(colon - line), v, (size_t)(eol - v)};
    return true;
}

/* The answer's failure as the gateway's classifier sees a status answer. */
static sl_failure_class_t
classify_status(sl_dialect_t d, const sl_demo_answer_t *a)
{
    char type[128];
    bool has_type = answer_header(a, "x-amzn-errortype", type, sizeof type);
    sl_failure_t f = {.source = SL_FAILURE_STATUS,
                      .dialect = d,
                      .status = a->status,
                      .body = a->body.data,
                      .body_len = a->body.len,
                      .code = has_type ? type : NULL};
    return sl_classify_failure(&f);
}

Test(demo_answers, overload_and_429_answers_are_classified_as_such_with_their_hint)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        const char *slug = sl_dialect_slug(dialects[i]);
        for (int stream = 0; stream < 2; stream++) {
            sl_demo_request_t r = request(dialects[i], 'a', stream);
            sl_demo_plan_t over = plan_of(SL_DEMO_OVERLOADED, stream, 3);
            sl_demo_answer_t a;
            sl_demo_answer_build(&r, &over, &a);
            cr_assert_eq(a.status, dialects[i] == SL_DIALECT_ANTHROPIC ? 529 : 503, "%s", slug);
            cr_assert_not(a.chunked);
            cr_assert_str_eq(a.content_type, "application/json");
            cr_assert_eq(a.n_pieces, 1);
            assert_pieces_tile(&a);
            cr_assert_eq(classify_status(dialects[i], &a), SL_FAILURE_TEMPORARY, "%s: %s", slug, a.body.data);
            json_t *j = json_loadb(a.body.data, a.body.len, 0, NULL);
            cr_assert(json_is_object(j), "%s: JSON", slug);
            json_decref(j);
            sl_demo_answer_free(&a);

            sl_demo_plan_t storm = plan_of(SL_DEMO_RATE_LIMITED, stream, 3);
            storm.retry_after_secs = 5;
            sl_demo_answer_build(&r, &storm, &a);
            cr_assert_eq(a.status, 429, "%s", slug);
            cr_assert_str_eq(a.reason, "Too Many Requests");
            cr_assert_eq(classify_status(dialects[i], &a), SL_FAILURE_RATE_LIMITED, "%s: %s", slug,
                         a.body.data);
            sl_headers_t h = {header_at, &a};
            sl_hint_t hint = sl_hint_find(&h, a.body.data, a.body.len, 1795969439000);
            cr_assert_eq(hint.ms, 5000, "%s: the hint", slug);
            cr_assert_eq(hint.source, dialects[i] == SL_DIALECT_GEMINI ? SL_HINT_BODY : SL_HINT_RETRY_AFTER,
                         "%s", slug);
            char type[128];
            if (dialects[i] == SL_DIALECT_BEDROCK) {
                cr_assert(answer_header(&a, "x-amzn-errortype", type, sizeof type));
                cr_assert_eq(strncmp(type, "ThrottlingException", 19), 0, "PascalCase, as the SDK wants it");
            }
            sl_demo_answer_free(&a);
        }
    }
}

Test(demo_answers, whole_answers_are_json_with_the_text_and_usage)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        const char *slug = sl_dialect_slug(dialects[i]);
        sl_demo_request_t r = request(dialects[i], 'b', false);
        sl_demo_plan_t p = plan_of(SL_DEMO_ANSWER, false, 77);
        sl_demo_answer_t a;
        sl_demo_answer_build(&r, &p, &a);
        cr_assert_eq(a.status, 200);
        cr_assert_not(a.chunked);
        cr_assert_eq(a.n_pieces, 1);
        cr_assert_eq(a.head_delay_ms, p.head_delay_ms);
        json_error_t e;
        json_t *j = json_loadb(a.body.data, a.body.len, 0, &e);
        cr_assert(json_is_object(j), "%s: %s", slug, e.text);
        sl_strbuf_t want = {0};
        uint32_t words = sl_demo_text(p.text_seed, p.words, &want);
        cr_assert_not_null(strstr(a.body.data, want.data), "%s: the text", slug);
        free(want.data);
        sl_usage_t u = {0};
        cr_assert(sl_answer_usage(dialects[i], a.body.data, a.body.len, &u), "%s: usage", slug);
        cr_assert_eq(u.output, words, "%s", slug);
        cr_assert_eq(u.input, r.input_tokens, "%s", slug);
        json_decref(j);
        sl_demo_answer_free(&a);
    }
}

Test(demo_answers, own_errors_land_in_auth_missing_model_and_request_error)
{
    static const struct {
        int status;
        sl_failure_class_t cls;
    } rows[] = {{401, SL_FAILURE_AUTH}, {404, SL_FAILURE_MISSING_MODEL}, {400, SL_FAILURE_REQUEST_ERROR}};
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        for (size_t k = 0; k < NELEMS(rows); k++) {
            sl_demo_answer_t a;
            sl_demo_answer_error(dialects[i], rows[k].status, NULL, &a);
            cr_assert_eq(a.status, rows[k].status);
            assert_pieces_tile(&a);
            cr_assert_eq(classify_status(dialects[i], &a), rows[k].cls, "%s %d: %s",
                         sl_dialect_slug(dialects[i]), rows[k].status, a.body.data);
            sl_demo_answer_free(&a);
        }
    }
}

Test(demo_answers, token_counts_and_closes_before_the_head)
{
    for (size_t i = 0; i < NELEMS(dialects); i++) {
        sl_demo_request_t r = request(dialects[i], 'a', false);
        r.op = SL_DEMO_OP_COUNT_TOKENS;
        sl_demo_plan_t p = sl_demo_decide(&r, SL_DEMO_OVERLOAD, 1);
        sl_demo_answer_t a;
        sl_demo_answer_build(&r, &p, &a);
        cr_assert_eq(a.status, 200);
        char want[64];
        snprintf(want, sizeof want, "%lld", (long long)r.input_tokens);
        cr_assert_not_null(strstr(a.body.data, want));
        sl_demo_answer_free(&a);

        sl_demo_plan_t gone = plan_of(SL_DEMO_CLOSE_BEFORE_HEAD, false, 1);
        gone.status = 0;
        sl_demo_answer_build(&r, &gone, &a);
        cr_assert_eq(a.end, SL_DEMO_END_CLOSE_BEFORE_HEAD);
        cr_assert_eq(a.n_pieces, 0);
        cr_assert_eq(a.body.len, 0);
        sl_demo_answer_free(&a);
    }
}

Test(demo_answers, the_text_is_whole_sentences_of_at_least_the_words_asked)
{
    for (uint64_t seed = 0; seed < 200; seed++) {
        for (uint32_t words = 1; words < 90; words += 11) {
            sl_strbuf_t t = {0};
            uint32_t got = sl_demo_text(seed * 0x9E3779B97F4A7C15ULL, words, &t);
            uint32_t n = 1;
            for (size_t k = 0; k < t.len; k++) {
                cr_assert(t.data[k] >= 0x20 && t.data[k] < 0x7f && t.data[k] != '"' && t.data[k] != '\\');
                n += t.data[k] == ' ';
                cr_assert(!(t.data[k] == ' ' && (k == 0 || t.data[k - 1] == ' ')), "no double spaces");
            }
            cr_assert_eq(n, got, "the count returned is the words written");
            cr_assert_geq(got, words);
            cr_assert_lt(got, words + 20, "no more than the rest of one sentence");
            cr_assert_eq(t.data[t.len - 1], '.', "ends with a sentence: %s", t.data);
            free(t.data);
        }
    }
    sl_strbuf_t none = {0};
    cr_assert_eq(sl_demo_text(5, 0, &none), 0);
    cr_assert_eq(none.len, 0);
}
