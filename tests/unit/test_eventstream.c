/*
 * AWS eventstream: the Bedrock fixtures decode to the same frames however the
 * bytes are split; each broken part of a frame is named by its own status and
 * leaves the output alone; what the encoder writes decodes back, and the
 * gateway's exception frame is byte for byte the one Bedrock sends.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/eventstream.h"

#define MAX_FRAMES 16

typedef struct {
    char *data;
    size_t len;
} file_t;

static file_t
fixture(const char *name)
{
    const char *dir = getenv("SLUICE_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "/work/shared/fixtures/streams", name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    file_t out = {.data = malloc(1 << 16)};
    out.len = fread(out.data, 1, 1 << 16, f);
    fclose(f);
    cr_assert_gt(out.len, 0);
    return out;
}

/* What a decoded frame said, copied out of the buffer. */
typedef struct {
    char message_type[32], event_type[32], exception_type[64], content_type[64];
    char payload[512];
    size_t len;
    uint32_t header_count;
} rec_t;

typedef struct {
    rec_t frame[MAX_FRAMES];
    size_t n;
    size_t left; /* bytes never consumed */
    sl_es_status_t last;
} run_t;

static void
copy_header(const sl_es_message_t *m, const char *name, char *dst, size_t cap)
{
    const char *v;
    size_t n;
    dst[0] = '\0';
    if (!sl_es_header_string(m, name, &v, &n))
        return;
    cr_assert_lt(n, cap);
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static void
record(rec_t *r, const sl_es_message_t *m)
{
    memset(r, 0, sizeof *r);
    copy_header(m, ":message-type", r->message_type, sizeof r->message_type);
    copy_header(m, ":event-type", r->event_type, sizeof r->event_type);
    copy_header(m, ":exception-type", r->exception_type, sizeof r->exception_type);
    copy_header(m, ":content-type", r->content_type, sizeof r->content_type);
    cr_assert_lt(m->payload_len, sizeof r->payload);
    memcpy(r->payload, m->payload, m->payload_len);
    r->len = m->len;
    r->header_count = m->header_count;
}

/*
 * Feeds in[0..len) as reads ending at the given cut offsets (ascending), the
 * way the gateway does: append each read to one buffer, take every whole
 * frame, drop its bytes.
 */
static void
feed_cuts(const char *in, size_t len, const size_t *cuts, size_t ncuts, run_t *run)
{
    memset(run, 0, sizeof *run);
    char *buf = malloc(len + 1);
    size_t have = 0, from = 0;
    for (size_t c = 0; c <= ncuts; c++) {
        size_t to = c < ncuts ? cuts[c] : len;
        memcpy(buf + have, in + from, to - from);
        have += to - from;
        from = to;
        for (;;) {
            sl_es_message_t m;
            run->last = sl_es_next(buf, have, SL_ES_MAX_MESSAGE_DEFAULT, &m);
            if (run->last != SL_ES_MESSAGE)
                break;
            cr_assert_leq(m.len, have);
            cr_assert_lt(run->n, MAX_FRAMES);
            record(&run->frame[run->n++], &m);
            memmove(buf, buf + m.len, have - m.len);
            have -= m.len;
        }
        cr_assert_eq(run->last, SL_ES_NEED_MORE);
    }
    run->left = have;
    free(buf);
}

static void
feed_whole(const char *in, size_t len, run_t *run)
{
    feed_cuts(in, len, NULL, 0, run);
}

static void
assert_same_run(const run_t *a, const run_t *b)
{
    cr_assert_eq(a->n, b->n);
    cr_assert_eq(a->left, b->left);
    for (size_t i = 0; i < a->n; i++)
        cr_assert_eq(memcmp(&a->frame[i], &b->frame[i], sizeof a->frame[i]), 0, "frame %zu differs", i);
}

static const struct {
    const char *event_type, *payload;
} ok_frames[] = {
    {"messageStart", "{\"role\":\"assistant\"}"},
    {"contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"Hello\"}}"},
    {"contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\" from\"}}"},
    {"contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\" the\"}}"},
    {"contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\" fake\"}}"},
    {"contentBlockStop", "{\"contentBlockIndex\":0}"},
    {"messageStop", "{\"stopReason\":\"end_turn\"}"},
    {"metadata", "{\"usage\":{\"inputTokens\":10,\"outputTokens\":4,\"totalTokens\":14},\"metrics\":{"
                 "\"latencyMs\":1}}"},
};
#define N_OK (sizeof ok_frames / sizeof ok_frames[0])

static const char unavailable_payload[] = "{\"message\":\"fake serviceUnavailableException\"}";

Test(eventstream_crc, is_the_ieee_crc32_and_continues_across_calls)
{
    cr_assert_eq(sl_es_crc32(0, "123456789", 9), 0xcbf43926u);
    cr_assert_eq(sl_es_crc32(0, "", 0), 0u);
    cr_assert_eq(sl_es_crc32(sl_es_crc32(0, "1234", 4), "56789", 5), 0xcbf43926u);
}

Test(eventstream_fixtures, bedrock_ok_decodes_frame_by_frame)
{
    file_t f = fixture("bedrock-ok.eventstream");
    run_t run;
    feed_whole(f.data, f.len, &run);
    cr_assert_eq(run.n, N_OK);
    cr_assert_eq(run.left, 0);
    for (size_t i = 0; i < N_OK; i++) {
        cr_assert_str_eq(run.frame[i].message_type, "event");
        cr_assert_str_eq(run.frame[i].event_type, ok_frames[i].event_type);
        cr_assert_str_eq(run.frame[i].content_type, "application/json");
        cr_assert_str_eq(run.frame[i].exception_type, "");
        cr_assert_str_eq(run.frame[i].payload, ok_frames[i].payload);
        cr_assert_eq(run.frame[i].header_count, 3);
    }
    free(f.data);
}

Test(eventstream_fixtures, service_unavailable_is_one_exception_frame)
{
    file_t f = fixture("bedrock-service-unavailable.eventstream");
    sl_es_message_t m;
    cr_assert_eq(sl_es_next(f.data, f.len, SL_ES_MAX_MESSAGE_DEFAULT, &m), SL_ES_MESSAGE);
    cr_assert_eq(m.len, f.len);
    cr_assert_eq(sl_es_message_kind(&m), SL_ES_KIND_EXCEPTION);
    cr_assert(sl_es_header_is(&m, ":exception-type", "serviceUnavailableException"));
    cr_assert(sl_es_header_is(&m, ":content-type", "application/json"));
    cr_assert_eq(m.payload_len, strlen(unavailable_payload));
    cr_assert_eq(memcmp(m.payload, unavailable_payload, m.payload_len), 0);
    free(f.data);
}

Test(eventstream_split, every_split_point_gives_the_same_frames)
{
    const char *names[] = {"bedrock-ok.eventstream", "bedrock-service-unavailable.eventstream"};
    for (size_t k = 0; k < 2; k++) {
        file_t f = fixture(names[k]);
        run_t whole, split;
        feed_whole(f.data, f.len, &whole);
        for (size_t cut = 0; cut <= f.len; cut++) {
            feed_cuts(f.data, f.len, &cut, 1, &split);
            assert_same_run(&whole, &split);
        }
        free(f.data);
    }
}

Test(eventstream_split, one_byte_reads_give_the_same_frames)
{
    file_t f = fixture("bedrock-ok.eventstream");
    size_t *cuts = malloc(f.len * sizeof *cuts);
    for (size_t i = 0; i < f.len; i++)
        cuts[i] = i + 1;
    run_t whole, bytes;
    feed_whole(f.data, f.len, &whole);
    feed_cuts(f.data, f.len, cuts, f.len, &bytes);
    assert_same_run(&whole, &bytes);
    free(cuts);
    free(f.data);
}

Test(eventstream_split, a_cut_frame_asks_for_more_and_names_its_length_once_the_prelude_is_in)
{
    file_t f = fixture("bedrock-ok.eventstream");
    size_t first = 0x76; /* the first frame's total_len */
    for (size_t have = 0; have < first; have++) {
        sl_es_message_t m;
        memset(&m, 0xa5, sizeof m);
        cr_assert_eq(sl_es_next(f.data, have, SL_ES_MAX_MESSAGE_DEFAULT, &m), SL_ES_NEED_MORE);
        cr_assert_eq(m.len, have < SL_ES_PRELUDE_LEN ? 0 : first, "at %zu bytes", have);
        cr_assert_eq(m.header_count, 0xa5a5a5a5u, "fields other than len are left alone");
    }
    free(f.data);
}

/* A frame with the given header block and payload, both CRCs right. */
static size_t
build(unsigned char *out, const unsigned char *headers, size_t hlen, const char *payload)
{
    size_t plen = strlen(payload), total = SL_ES_OVERHEAD + hlen + plen;
    out[0] = (unsigned char)(total >> 24);
    out[1] = (unsigned char)(total >> 16);
    out[2] = (unsigned char)(total >> 8);
    out[3] = (unsigned char)total;
    out[4] = (unsigned char)(hlen >> 24);
    out[5] = (unsigned char)(hlen >> 16);
    out[6] = (unsigned char)(hlen >> 8);
    out[7] = (unsigned char)hlen;
    memcpy(out + 12, headers, hlen);
    memcpy(out + 12 + hlen, payload, plen);
    return total;
}

/* Recomputes both CRCs of the frame at p as its prelude describes it (total_len capped at cap). */
static void
fix_crcs(unsigned char *p, size_t cap)
{
    uint32_t c = sl_es_crc32(0, p, 8);
    p[8] = (unsigned char)(c >> 24), p[9] = (unsigned char)(c >> 16), p[10] = (unsigned char)(c >> 8),
    p[11] = (unsigned char)c;
    size_t total = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
    if (total < SL_ES_OVERHEAD || total > cap)
        return;
    c = sl_es_crc32(0, p, total - 4);
    unsigned char *q = p + total - 4;
    q[0] = (unsigned char)(c >> 24), q[1] = (unsigned char)(c >> 16), q[2] = (unsigned char)(c >> 8),
    q[3] = (unsigned char)c;
}

/* A string header ":a" = "bc" */
static const unsigned char one_header[] = {2, ':', 'a', SL_ES_STRING, 0, 2, 'b', 'c'};

typedef struct {
    const char *name;
    size_t at;           /* byte to change */
    unsigned char value; /* its new value */
    bool refresh_crcs;   /* make both CRCs match the change */
    sl_es_status_t want;
} damage_t;

static const damage_t damages[] = {
    {"total_len changed under the prelude CRC", 3, 0x40, false, SL_ES_BAD_PRELUDE_CRC},
    {"headers_len changed under the prelude CRC", 7, 0x09, false, SL_ES_BAD_PRELUDE_CRC},
    {"prelude CRC itself", 9, 0x00, false, SL_ES_BAD_PRELUDE_CRC},
    {"a header byte under the message CRC", 13, 'b', false, SL_ES_BAD_MESSAGE_CRC},
    {"a payload byte under the message CRC", 20, 'Y', false, SL_ES_BAD_MESSAGE_CRC},
    {"the message CRC itself", 22, 0x00, false, SL_ES_BAD_MESSAGE_CRC},
    {"total_len below the 16-byte overhead", 3, 15, true, SL_ES_BAD_LENGTHS},
    {"headers_len past the frame", 7, 11, true, SL_ES_BAD_LENGTHS},
    {"total_len above the cap", 0, 0x02, true, SL_ES_TOO_LARGE},
    {"header name length past the block", 12, 9, true, SL_ES_BAD_HEADERS},
    {"unknown header value type 10", 15, 10, true, SL_ES_BAD_HEADERS},
    {"string length past the block", 17, 3, true, SL_ES_BAD_HEADERS},
    {"string length short of the block", 17, 1, true, SL_ES_BAD_HEADERS},
};

Test(eventstream_damage, each_broken_part_has_its_status_and_leaves_the_message_alone)
{
    for (size_t i = 0; i < sizeof damages / sizeof damages[0]; i++) {
        unsigned char frame[64] = {0};
        size_t len = build(frame, one_header, sizeof one_header, "XY");
        fix_crcs(frame, sizeof frame);
        cr_assert_eq(len, 26);
        sl_es_message_t m;
        cr_assert_eq(sl_es_next((const char *)frame, len, 1024, &m), SL_ES_MESSAGE, "%s: intact",
                     damages[i].name);
        cr_assert_neq(frame[damages[i].at], damages[i].value, "%s: no change", damages[i].name);
        frame[damages[i].at] = damages[i].value;
        if (damages[i].refresh_crcs)
            fix_crcs(frame, len);
        memset(&m, 0x5a, sizeof m);
        sl_es_message_t before = m;
        sl_es_status_t got = sl_es_next((const char *)frame, len, 1024, &m);
        cr_assert_eq(got, damages[i].want, "%s: got %d", damages[i].name, got);
        cr_assert_eq(memcmp(&m, &before, sizeof m), 0, "%s: message touched", damages[i].name);
    }
}

Test(eventstream_damage, an_empty_header_name_is_refused_even_when_the_rest_parses)
{
    static const unsigned char block[] = {0, SL_ES_STRING, 0, 1, 'x'};
    unsigned char frame[64];
    size_t len = build(frame, block, sizeof block, "{}");
    fix_crcs(frame, sizeof frame);
    sl_es_message_t m;
    cr_assert_eq(sl_es_next((const char *)frame, len, 1024, &m), SL_ES_BAD_HEADERS);
}

Test(eventstream_damage, a_too_large_frame_is_refused_from_its_prelude_alone)
{
    unsigned char prelude[SL_ES_PRELUDE_LEN] = {0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0};
    fix_crcs(prelude, 0);
    sl_es_message_t m;
    cr_assert_eq(sl_es_next((const char *)prelude, sizeof prelude, SL_ES_MAX_MESSAGE_DEFAULT, &m),
                 SL_ES_TOO_LARGE);
    prelude[3] = 0x00; /* exactly the cap: allowed, so it waits for the rest */
    fix_crcs(prelude, 0);
    cr_assert_eq(sl_es_next((const char *)prelude, sizeof prelude, SL_ES_MAX_MESSAGE_DEFAULT, &m),
                 SL_ES_NEED_MORE);
    cr_assert_eq(m.len, SL_ES_MAX_MESSAGE_DEFAULT);
}

Test(eventstream_damage, truncated_fixtures_never_yield_a_message_past_their_end)
{
    file_t f = fixture("bedrock-service-unavailable.eventstream");
    for (size_t have = 0; have < f.len; have++) {
        sl_es_message_t m;
        cr_assert_eq(sl_es_next(f.data, have, SL_ES_MAX_MESSAGE_DEFAULT, &m), SL_ES_NEED_MORE);
    }
    free(f.data);
}

Test(eventstream_damage, every_single_bit_flip_in_a_fixture_frame_is_caught)
{
    file_t f = fixture("bedrock-service-unavailable.eventstream");
    for (size_t i = 0; i < f.len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            f.data[i] ^= (char)(1 << bit);
            sl_es_message_t m;
            sl_es_status_t st = sl_es_next(f.data, f.len, SL_ES_MAX_MESSAGE_DEFAULT, &m);
            cr_assert(st != SL_ES_MESSAGE, "flip of bit %d at %zu accepted", bit, i);
            f.data[i] ^= (char)(1 << bit);
        }
    }
    free(f.data);
}

Test(eventstream_headers, every_value_type_is_walked_with_its_size)
{
    /* clang-format off */
    static const unsigned char block[] = {
        1, 't', SL_ES_TRUE,
        1, 'f', SL_ES_FALSE,
        1, 'b', SL_ES_BYTE, 0x7f,
        1, 's', SL_ES_SHORT, 0x01, 0x02,
        1, 'i', SL_ES_INT, 0, 0, 0, 42,
        1, 'l', SL_ES_LONG, 0, 0, 0, 0, 0, 0, 0, 7,
        1, 'y', SL_ES_BYTES, 0, 3, 0, 1, 2,
        1, 'S', SL_ES_STRING, 0, 2, 'h', 'i',
        1, 'T', SL_ES_TIMESTAMP, 0, 0, 1, 0x8a, 0, 0, 0, 0,
        1, 'u', SL_ES_UUID, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
    };
    /* clang-format on */
    static const struct {
        char name;
        sl_es_type_t type;
        size_t value_len;
    } want[] = {
        {'t', SL_ES_TRUE, 0},      {'f', SL_ES_FALSE, 0}, {'b', SL_ES_BYTE, 1},  {'s', SL_ES_SHORT, 2},
        {'i', SL_ES_INT, 4},       {'l', SL_ES_LONG, 8},  {'y', SL_ES_BYTES, 3}, {'S', SL_ES_STRING, 2},
        {'T', SL_ES_TIMESTAMP, 8}, {'u', SL_ES_UUID, 16},
    };
    unsigned char frame[256];
    size_t len = build(frame, block, sizeof block, "{}");
    fix_crcs(frame, sizeof frame);
    sl_es_message_t m;
    cr_assert_eq(sl_es_next((const char *)frame, len, 1024, &m), SL_ES_MESSAGE);
    cr_assert_eq(m.header_count, 10);
    size_t pos = 0, n = 0;
    sl_es_header_t h;
    while (sl_es_header_next(&m, &pos, &h)) {
        cr_assert_lt(n, 10);
        cr_assert_eq(h.name_len, 1);
        cr_assert_eq(h.name[0], want[n].name);
        cr_assert_eq(h.type, want[n].type);
        cr_assert_eq(h.value_len, want[n].value_len, "header %c", want[n].name);
        n++;
    }
    cr_assert_eq(n, 10);
    cr_assert_eq(pos, sizeof block);
    const char *v;
    size_t vn;
    cr_assert(sl_es_header_string(&m, "S", &v, &vn));
    cr_assert_eq(vn, 2);
    cr_assert_eq(memcmp(v, "hi", 2), 0);
    v = NULL;
    cr_assert_not(sl_es_header_string(&m, "y", &v, &vn), "bytes are not a string");
    cr_assert_not(sl_es_header_string(&m, "x", &v, &vn), "absent");
    cr_assert_null(v, "outputs untouched");
    cr_assert_eq(m.payload_len, 2);
}

Test(eventstream_headers, message_kind_follows_the_message_type_string)
{
    static const struct {
        const char *value; /* NULL = no :message-type header */
        sl_es_kind_t want;
    } cases[] = {
        {"event", SL_ES_KIND_EVENT},   {"exception", SL_ES_KIND_EXCEPTION}, {"error", SL_ES_KIND_ERROR},
        {"Event", SL_ES_KIND_UNKNOWN}, {"events", SL_ES_KIND_UNKNOWN},      {"", SL_ES_KIND_UNKNOWN},
        {NULL, SL_ES_KIND_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_strbuf_t b = {0};
        sl_es_string_header_t h[] = {{":content-type", "application/json"},
                                     {":message-type", cases[i].value}};
        cr_assert(sl_es_encode(&b, h, cases[i].value ? 2 : 1, "{}", 2));
        sl_es_message_t m;
        cr_assert_eq(sl_es_next(b.data, b.len, 1024, &m), SL_ES_MESSAGE);
        cr_assert_eq(sl_es_message_kind(&m), cases[i].want, "case %zu", i);
        free(b.data);
    }
    /* A non-string :message-type says nothing. */
    static const unsigned char typed[] = {13,  ':', 'm', 'e',         's', 's', 'a', 'g', 'e', '-', 't',
                                          'y', 'p', 'e', SL_ES_BYTES, 0,   5,   'e', 'v', 'e', 'n', 't'};
    unsigned char frame[64];
    size_t len = build(frame, typed, sizeof typed, "");
    fix_crcs(frame, sizeof frame);
    sl_es_message_t m;
    cr_assert_eq(sl_es_next((const char *)frame, len, 1024, &m), SL_ES_MESSAGE);
    cr_assert_eq(sl_es_message_kind(&m), SL_ES_KIND_UNKNOWN);
}

Test(eventstream_encode, round_trips_headers_and_payload)
{
    static const struct {
        sl_es_string_header_t h[3];
        size_t n;
        const char *payload;
    } cases[] = {
        {{{":event-type", "contentBlockDelta"},
          {":content-type", "application/json"},
          {":message-type", "event"}},
         3,
         "{\"delta\":{\"text\":\"hi\"}}"},
        {{{":message-type", "error"}, {":error-code", "InternalFailure"}, {":error-message", ""}}, 3, ""},
        {{{0}}, 0, "payload only"},
        {{{0}}, 0, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_strbuf_t b = {0};
        size_t plen = strlen(cases[i].payload);
        cr_assert(sl_es_encode(&b, cases[i].h, cases[i].n, cases[i].payload, plen));
        sl_es_message_t m;
        cr_assert_eq(sl_es_next(b.data, b.len, 1024, &m), SL_ES_MESSAGE, "case %zu", i);
        cr_assert_eq(m.len, b.len);
        cr_assert_eq(m.header_count, cases[i].n);
        size_t pos = 0, k = 0;
        sl_es_header_t h;
        while (sl_es_header_next(&m, &pos, &h)) {
            cr_assert_eq(h.type, SL_ES_STRING);
            cr_assert_eq(h.name_len, strlen(cases[i].h[k].name));
            cr_assert_eq(memcmp(h.name, cases[i].h[k].name, h.name_len), 0);
            cr_assert_eq(h.value_len, strlen(cases[i].h[k].value));
            cr_assert_eq(memcmp(h.value, cases[i].h[k].value, h.value_len), 0);
            k++;
        }
        cr_assert_eq(k, cases[i].n);
        cr_assert_eq(m.payload_len, plen);
        cr_assert_eq(memcmp(m.payload, cases[i].payload, plen), 0);
        free(b.data);
    }
}

Test(eventstream_encode, appends_after_what_the_buffer_holds)
{
    sl_strbuf_t b = {0};
    sl_strbuf_append(&b, "xyz", 3);
    sl_es_string_header_t h[] = {{":message-type", "event"}};
    cr_assert(sl_es_encode(&b, h, 1, "{}", 2));
    cr_assert(sl_es_encode(&b, h, 1, "[]", 2));
    cr_assert_eq(memcmp(b.data, "xyz", 3), 0);
    sl_es_message_t m1, m2;
    cr_assert_eq(sl_es_next(b.data + 3, b.len - 3, 1024, &m1), SL_ES_MESSAGE);
    cr_assert_eq(sl_es_next(b.data + 3 + m1.len, b.len - 3 - m1.len, 1024, &m2), SL_ES_MESSAGE);
    cr_assert_eq(3 + m1.len + m2.len, b.len);
    cr_assert_eq(memcmp(m2.payload, "[]", 2), 0);
    free(b.data);
}

Test(eventstream_encode, exception_frame_is_the_one_bedrock_sends)
{
    file_t f = fixture("bedrock-service-unavailable.eventstream");
    sl_strbuf_t b = {0};
    cr_assert(sl_es_encode_exception(&b, "serviceUnavailableException", unavailable_payload,
                                     strlen(unavailable_payload)));
    cr_assert_eq(b.len, f.len);
    cr_assert_eq(memcmp(b.data, f.data, f.len), 0);
    free(b.data);
    free(f.data);
}

Test(eventstream_encode, reencoding_the_ok_fixture_gives_its_bytes)
{
    file_t f = fixture("bedrock-ok.eventstream");
    size_t at = 0;
    for (size_t i = 0; i < N_OK; i++) {
        sl_es_message_t m;
        cr_assert_eq(sl_es_next(f.data + at, f.len - at, SL_ES_MAX_MESSAGE_DEFAULT, &m), SL_ES_MESSAGE);
        char names[3][32], values[3][64];
        sl_es_string_header_t h[3];
        size_t pos = 0, n = 0;
        sl_es_header_t hd;
        while (sl_es_header_next(&m, &pos, &hd)) {
            cr_assert_lt(n, 3);
            snprintf(names[n], sizeof names[n], "%.*s", (int)hd.name_len, hd.name);
            snprintf(values[n], sizeof values[n], "%.*s", (int)hd.value_len, hd.value);
            h[n] = (sl_es_string_header_t){names[n], values[n]};
            n++;
        }
        sl_strbuf_t b = {0};
        cr_assert(sl_es_encode(&b, h, n, m.payload, m.payload_len));
        cr_assert_eq(b.len, m.len);
        cr_assert_eq(memcmp(b.data, f.data + at, m.len), 0, "frame %zu", i);
        free(b.data);
        at += m.len;
    }
    cr_assert_eq(at, f.len);
    free(f.data);
}

Test(eventstream_encode, refuses_names_and_values_the_sdk_would_not_take_and_appends_nothing)
{
    static char long_name[SL_ES_MAX_NAME_LEN + 2], long_value[SL_ES_MAX_VALUE_LEN + 2];
    memset(long_name, 'n', SL_ES_MAX_NAME_LEN + 1);
    memset(long_value, 'v', SL_ES_MAX_VALUE_LEN + 1);
    const sl_es_string_header_t bad[][2] = {
        {{":message-type", "event"}, {"", "empty name"}},
        {{":message-type", "event"}, {long_name, "x"}},
        {{":message-type", "event"}, {"x", long_value}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_strbuf_t b = {0};
        sl_strbuf_append(&b, "keep", 4);
        char *data = b.data;
        cr_assert_not(sl_es_encode(&b, bad[i], 2, "{}", 2), "case %zu", i);
        cr_assert_eq(b.len, 4);
        cr_assert_eq(b.data, data);
        cr_assert_eq(memcmp(b.data, "keep", 4), 0);
        free(b.data);
    }
    /* The limits themselves are fine. */
    long_name[SL_ES_MAX_NAME_LEN] = '\0';
    long_value[SL_ES_MAX_VALUE_LEN] = '\0';
    sl_es_string_header_t edge[] = {{long_name, long_value}};
    sl_strbuf_t b = {0};
    cr_assert(sl_es_encode(&b, edge, 1, "", 0));
    sl_es_message_t m;
    cr_assert_eq(sl_es_next(b.data, b.len, SL_ES_MAX_MESSAGE_DEFAULT, &m), SL_ES_MESSAGE);
    const char *v;
    size_t vn;
    cr_assert(sl_es_header_string(&m, long_name, &v, &vn));
    cr_assert_eq(vn, SL_ES_MAX_VALUE_LEN);
    free(b.data);
}
