/*
 * The generated C codec against the generated samples: every message kind with
 * every optional field present and absent, bad inputs of every kind, and every
 * truncation of every sample.
 */
#include "sl_proto_samples.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static void
encode_sample(size_t i, msgpack_sbuffer *sb)
{
    sl_proto_message_t m;
    sl_proto_sample_build(i, &m);
    msgpack_sbuffer_init(sb);
    cr_assert_eq(sl_proto_encode(&m, sb), 0, "%s does not encode", sl_proto_sample_name(i));
    sl_proto_message_free(&m);
}

static size_t
sample_index(const char *name)
{
    for (size_t i = 0; i < sl_proto_sample_count(); i++)
        if (strcmp(sl_proto_sample_name(i), name) == 0)
            return i;
    cr_assert_fail("no sample %s", name);
    return 0;
}

static bool
all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return false;
    return true;
}

/* Decodes a private copy of buf[0..len) (so ASan sees any read past it) expecting failure. */
static sl_proto_error_t
decode_fails(const char *buf, size_t len)
{
    char *copy = malloc(len > 0 ? len : 1);
    memcpy(copy, buf, len);
    sl_proto_message_t m;
    sl_proto_error_t err;
    size_t consumed = 12345;
    cr_assert_eq(sl_proto_decode(copy, len, &m, &consumed, &err), -1);
    cr_assert(all_zero(&m, sizeof m), "a failed decode left the message half-set");
    cr_assert_eq(consumed, 12345, "a failed decode set consumed");
    cr_assert_neq(err.kind, SL_PROTO_ERR_NONE);
    free(copy);
    return err;
}

Test(roundtrip, every_sample_decodes_and_reencodes_to_the_same_bytes)
{
    for (size_t i = 0; i < sl_proto_sample_count(); i++) {
        msgpack_sbuffer first, again;
        sl_proto_message_t m;
        sl_proto_error_t err;
        size_t used;
        encode_sample(i, &first);
        cr_assert_eq(sl_proto_decode(first.data, first.size, &m, &used, &err), 0, "%s: %s: %s",
                     sl_proto_sample_name(i), err.path, err.detail);
        cr_assert_eq(used, first.size);
        msgpack_sbuffer_init(&again);
        cr_assert_eq(sl_proto_encode(&m, &again), 0);
        cr_assert_eq(again.size, first.size, "%s", sl_proto_sample_name(i));
        cr_assert_eq(memcmp(again.data, first.data, first.size), 0, "%s", sl_proto_sample_name(i));
        sl_proto_message_free(&m);
        cr_assert(all_zero(&m, sizeof m));
        msgpack_sbuffer_destroy(&first);
        msgpack_sbuffer_destroy(&again);
    }
}

Test(roundtrip, optional_fields_are_present_in_full_and_absent_in_min)
{
    sl_proto_message_t full, min;
    sl_proto_sample_build(sample_index("ok.full"), &full);
    sl_proto_sample_build(sample_index("ok.min"), &min);
    cr_assert(full.ok.in_flight != NULL && full.ok.has_providers && full.ok.yaml != NULL &&
              full.ok.has_revision);
    cr_assert(full.ok.has_persisted && full.ok.has_problems && full.ok.repair_yaml != NULL &&
              full.ok.has_rows);
    cr_assert(full.ok.next_cursor != NULL);
    cr_assert(min.ok.in_flight == NULL && !min.ok.has_providers && min.ok.yaml == NULL &&
              !min.ok.has_revision);
    cr_assert(!min.ok.has_persisted && !min.ok.has_problems && min.ok.repair_yaml == NULL &&
              !min.ok.has_rows);
    cr_assert(min.ok.next_cursor == NULL);
    sl_proto_message_free(&full);
    sl_proto_message_free(&min);
}

Test(roundtrip, messages_back_to_back_decode_one_after_another)
{
    msgpack_sbuffer all;
    msgpack_sbuffer_init(&all);
    for (size_t i = 0; i < sl_proto_sample_count(); i++) {
        sl_proto_message_t m;
        sl_proto_sample_build(i, &m);
        cr_assert_eq(sl_proto_encode(&m, &all), 0);
        sl_proto_message_free(&m);
    }
    size_t at = 0, count = 0;
    while (at < all.size) {
        sl_proto_message_t m, expected;
        sl_proto_error_t err;
        size_t used;
        cr_assert_eq(sl_proto_decode(all.data + at, all.size - at, &m, &used, &err), 0, "%s", err.detail);
        sl_proto_sample_build(count, &expected);
        cr_assert_eq(m.kind, expected.kind, "message %zu", count);
        sl_proto_message_free(&m);
        sl_proto_message_free(&expected);
        at += used;
        count++;
    }
    cr_assert_eq(count, sl_proto_sample_count());
    msgpack_sbuffer_destroy(&all);
}

Test(roundtrip, values_of_an_event_survive)
{
    sl_proto_message_t m, back;
    sl_proto_error_t err;
    msgpack_sbuffer sb;
    sl_proto_message_init(&m, SL_PROTO_MESSAGE_EVENT);
    m.event.seq = 42;
    sl_proto_event_init(&m.event.event, SL_PROTO_EVENT_REQUEST_RETRYING);
    sl_proto_request_retrying_t *r = &m.event.event.request_retrying;
    r->at_ms = 1764000000123;
    r->id = 17;
    r->attempt = 2;
    r->cause = SL_PROTO_RETRY_CAUSE_HINT;
    r->last_error.code = strdup("gw.upstream.overloaded");
    r->last_error.text = strdup("overloaded");
    msgpack_sbuffer_init(&sb);
    cr_assert_eq(sl_proto_encode(&m, &sb), 0);
    cr_assert_eq(sl_proto_decode(sb.data, sb.size, &back, NULL, &err), 0, "%s: %s", err.path, err.detail);
    cr_assert_eq(back.kind, SL_PROTO_MESSAGE_EVENT);
    cr_assert_eq(back.event.seq, 42);
    cr_assert_eq(back.event.event.kind, SL_PROTO_EVENT_REQUEST_RETRYING);
    cr_assert_eq(back.event.event.request_retrying.at_ms, 1764000000123);
    cr_assert_eq(back.event.event.request_retrying.cause, SL_PROTO_RETRY_CAUSE_HINT);
    cr_assert_str_eq(back.event.event.request_retrying.last_error.code, "gw.upstream.overloaded");
    cr_assert_eq(back.event.event.request_retrying.upstreams_len, 0);
    sl_proto_message_free(&m);
    sl_proto_message_free(&back);
    msgpack_sbuffer_destroy(&sb);
}

Test(encode, refuses_what_cannot_be_sent_and_leaves_the_buffer_unchanged)
{
    sl_proto_message_t m;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_write(&sb, "x", 1);
    sl_proto_message_init(&m, SL_PROTO_MESSAGE_HELLO); /* key and client are NULL */
    cr_assert_eq(sl_proto_encode(&m, &sb), -1);
    cr_assert_eq(sb.size, 1);
    sl_proto_message_init(&m, SL_PROTO_MESSAGE_SUBSCRIBE);
    sl_proto_topic_t bad = (sl_proto_topic_t)7;
    m.subscribe.topics = &bad;
    m.subscribe.topics_len = 1;
    cr_assert_eq(sl_proto_encode(&m, &sb), -1);
    cr_assert_eq(sb.size, 1);
    msgpack_sbuffer_destroy(&sb);
}

/* The encoder writes msgpack itself: each form must be the one msgpack-c's packer picks. */
static void
assert_same_bytes(const msgpack_sbuffer *ours, const msgpack_sbuffer *theirs, const char *what, uint64_t n)
{
    cr_assert_eq(ours->size, theirs->size, "%s %llu: %zu bytes, msgpack-c %zu", what, (unsigned long long)n,
                 ours->size, theirs->size);
    cr_assert(memcmp(ours->data, theirs->data, ours->size) == 0, "%s %llu differs from msgpack-c", what,
              (unsigned long long)n);
}

Test(encode, the_direct_writer_picks_msgpack_cs_form_at_every_boundary)
{
    static const uint64_t ints[] = {0,     1,     127,        128,        255,        256,
                                    65535, 65536, UINT32_MAX, 1ull << 32, 1ull << 53, UINT64_MAX};
    static const uint32_t sizes[] = {0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536, 70000};
    msgpack_sbuffer ours, theirs;
    msgpack_packer pk;
    msgpack_sbuffer_init(&ours);
    msgpack_sbuffer_init(&theirs);
    msgpack_packer_init(&pk, &theirs, msgpack_sbuffer_write);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        msgpack_sbuffer_clear(&ours);
        msgpack_sbuffer_clear(&theirs);
        cr_assert_eq(sl__proto_put_uint(&ours, ints[i]), 0);
        msgpack_pack_uint64(&pk, ints[i]);
        assert_same_bytes(&ours, &theirs, "uint", ints[i]);
    }
    char *text = malloc(70001);
    cr_assert_not_null(text);
    memset(text, 'a', 70000);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint32_t n = sizes[i];
        msgpack_sbuffer_clear(&ours);
        msgpack_sbuffer_clear(&theirs);
        cr_assert_eq(sl__proto_put_map_head(&ours, n), 0);
        cr_assert_eq(sl__proto_put_array_head(&ours, n), 0);
        text[n] = '\0';
        cr_assert_eq(sl__proto_put_str(&ours, text), 0);
        text[n] = 'a';
        msgpack_pack_map(&pk, n);
        msgpack_pack_array(&pk, n);
        msgpack_pack_str(&pk, n);
        msgpack_pack_str_body(&pk, text, n);
        assert_same_bytes(&ours, &theirs, "map, array and str of", n);
    }
    msgpack_sbuffer_clear(&ours);
    msgpack_sbuffer_clear(&theirs);
    cr_assert_eq(sl__proto_put_bool(&ours, true), 0);
    cr_assert_eq(sl__proto_put_bool(&ours, false), 0);
    msgpack_pack_true(&pk);
    msgpack_pack_false(&pk);
    assert_same_bytes(&ours, &theirs, "bools", 2);
    free(text);
    msgpack_sbuffer_destroy(&ours);
    msgpack_sbuffer_destroy(&theirs);
}

Test(decode, every_truncation_of_every_sample_is_an_error)
{
    for (size_t i = 0; i < sl_proto_sample_count(); i++) {
        msgpack_sbuffer sb;
        encode_sample(i, &sb);
        for (size_t len = 0; len < sb.size; len++) {
            sl_proto_error_t err = decode_fails(sb.data, len);
            cr_assert_eq(err.kind, SL_PROTO_ERR_TRUNCATED, "%s cut at %zu: %s", sl_proto_sample_name(i), len,
                         err.detail);
        }
        msgpack_sbuffer_destroy(&sb);
    }
}

/* --- bad inputs: a sample unpacked, one value replaced or one key renamed, packed again --- */

typedef enum { SET, DROP } op_t;

typedef struct bad_case {
    const char *sample;
    const char *target; /* dotted; a number indexes an array */
    op_t op;
    msgpack_object value; /* for SET */
    sl_proto_error_kind_t kind;
    const char *path;
} bad_case_t;

#define STR(s)                                                                                               \
    {                                                                                                        \
        .type = MSGPACK_OBJECT_STR, .via.str = {.size = sizeof(s) - 1, .ptr = (s) }                          \
    }
#define BIN(s)                                                                                               \
    {                                                                                                        \
        .type = MSGPACK_OBJECT_BIN, .via.bin = {.size = sizeof(s) - 1, .ptr = (s) }                          \
    }
#define UINT(n)                                                                                              \
    {                                                                                                        \
        .type = MSGPACK_OBJECT_POSITIVE_INTEGER, .via.u64 = (n)                                              \
    }
#define NEG(n)                                                                                               \
    {                                                                                                        \
        .type = MSGPACK_OBJECT_NEGATIVE_INTEGER, .via.i64 = (n)                                              \
    }
#define NIL                                                                                                  \
    {                                                                                                        \
        .type = MSGPACK_OBJECT_NIL                                                                           \
    }
#define FLOAT                                                                                                \
    {                                                                                                        \
        .type = MSGPACK_OBJECT_FLOAT64, .via.f64 = 1.0                                                       \
    }

static msgpack_object_kv digit_key[] = {{.key = STR("1"), .val = STR("x")}};
static msgpack_object_kv dup_keys[] = {{.key = STR("a"), .val = STR("x")},
                                       {.key = STR("a"), .val = STR("y")}};
#define MAP(kvs)                                                                                             \
    {                                                                                                        \
        .type = MSGPACK_OBJECT_MAP, .via.map = {.size = sizeof kvs / sizeof kvs[0], .ptr = kvs }             \
    }

static const bad_case_t bad_cases[] = {
    {"event.attempt.full", "event.view.outcome", SET, STR("exploded"), SL_PROTO_ERR_ENUM,
     "event.view.outcome"},
    {"event.attempt.full", "event.view.provider", DROP, NIL, SL_PROTO_ERR_MISSING, "event.view.provider"},
    {"event.attempt.full", "event.view.error", SET, NIL, SL_PROTO_ERR_TYPE, "event.view.error"},
    {"event.attempt.full", "event.view.error.code", SET, UINT(3), SL_PROTO_ERR_TYPE, "event.view.error.code"},
    {"event.attempt.full", "event.kind", SET, STR("nope"), SL_PROTO_ERR_ENUM, "event.kind"},
    {"event.attempt.full", "event.kind", DROP, NIL, SL_PROTO_ERR_MISSING, "event.kind"},
    {"event.attempt.full", "event.at_ms", DROP, NIL, SL_PROTO_ERR_MISSING, "event.at_ms"},
    {"event.attempt.full", "seq", SET, STR("1"), SL_PROTO_ERR_TYPE, "seq"},
    {"event.attempt.full", "kind", SET, STR("nope"), SL_PROTO_ERR_ENUM, "kind"},
    {"event.attempt.full", "kind", DROP, NIL, SL_PROTO_ERR_MISSING, "kind"},
    {"subscribe.full", "topics.1", SET, STR("weather"), SL_PROTO_ERR_ENUM, "topics[1]"},
    {"subscribe.full", "topics", SET, UINT(1), SL_PROTO_ERR_TYPE, "topics"},
    {"hello.full", "protocol", SET, UINT(UINT64_C(4294967296)), SL_PROTO_ERR_RANGE, "protocol"},
    {"hello.full", "protocol", SET, NEG(-1), SL_PROTO_ERR_RANGE, "protocol"},
    {"hello.full", "protocol", SET, FLOAT, SL_PROTO_ERR_MALFORMED, ""},
    {"hello.full", "client", SET, BIN("abc"), SL_PROTO_ERR_TYPE, "client"},
    {"hello.full", "key", SET, STR("a\xff"), SL_PROTO_ERR_MALFORMED, ""},
    {"hello.full", "key", SET, STR("a\0b"), SL_PROTO_ERR_MALFORMED, ""},
    {"hello.full", "key", SET, STR("\xed\xa0\x80"), SL_PROTO_ERR_MALFORMED, ""},
    {"welcome.full", "now_ms", SET, UINT(UINT64_C(1) << 53), SL_PROTO_ERR_RANGE, "now_ms"},
    {"refused.full", "message.args", SET, MAP(digit_key), SL_PROTO_ERR_MALFORMED, "message.args.1"},
    {"refused.full", "message.args", SET, MAP(dup_keys), SL_PROTO_ERR_MALFORMED, "message.args.a"},
    {"refused.full", "message.args.0", SET, UINT(2), SL_PROTO_ERR_TYPE, "message.args.ours"},
    {"snapshot.full", "in_flight.0.events.1.kind", SET, STR("x"), SL_PROTO_ERR_ENUM,
     "in_flight[0].events[1].kind"},
    {"snapshot.full", "providers.0.limits.1.per", SET, STR("year"), SL_PROTO_ERR_ENUM,
     "providers[0].limits[1].per"},
    {"snapshot.full", "providers.1.throttle.reason", DROP, NIL, SL_PROTO_ERR_MISSING,
     "providers[1].throttle.reason"},
    {"ok.full", "persisted", SET, STR("yes"), SL_PROTO_ERR_TYPE, "persisted"},
    {"history.min", "filter", SET, NIL, SL_PROTO_ERR_TYPE, "filter"},
};

/* The value at a dotted path; with key_of set, the key object holding it instead. */
static msgpack_object *
find_path(msgpack_object *o, const char *path, bool key_of)
{
    char seg[64];
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    memcpy(seg, path, n);
    seg[n] = '\0';
    msgpack_object *next = NULL;
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        next = &o->via.array.ptr[atoi(seg)];
        cr_assert(!key_of || dot, "cannot rename an array item");
    } else if (o->type == MSGPACK_OBJECT_MAP) {
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            msgpack_object_kv *kv = &o->via.map.ptr[i];
            bool by_index = seg[0] >= '0' && seg[0] <= '9' && (uint32_t)atoi(seg) == i;
            if (by_index || (kv->key.via.str.size == n && memcmp(kv->key.via.str.ptr, seg, n) == 0)) {
                next = dot == NULL && key_of ? &kv->key : &kv->val;
                break;
            }
        }
    }
    cr_assert_not_null(next, "no %s in the sample", seg);
    return dot ? find_path(next, dot + 1, key_of) : next;
}

static void
pack_mutated(const bad_case_t *c, msgpack_sbuffer *out)
{
    msgpack_sbuffer sb;
    msgpack_unpacked u;
    encode_sample(sample_index(c->sample), &sb);
    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    msgpack_object *target = find_path(&u.data, c->target, c->op == DROP);
    if (c->op == DROP)
        *target = (msgpack_object)STR("zz_renamed");
    else
        *target = c->value;
    msgpack_packer pk;
    msgpack_sbuffer_init(out);
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    cr_assert_eq(msgpack_pack_object(&pk, u.data), 0);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

Test(decode, each_bad_input_is_refused_with_its_kind_and_path)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case_t *c = &bad_cases[i];
        msgpack_sbuffer sb;
        pack_mutated(c, &sb);
        sl_proto_error_t err = decode_fails(sb.data, sb.size);
        cr_assert_eq(err.kind, c->kind, "%s %s: got %s (%s: %s)", c->sample, c->target,
                     sl_proto_error_kind_slug(err.kind), err.path, err.detail);
        cr_assert_str_eq(err.path, c->path, "%s %s (%s)", c->sample, c->target, err.detail);
        msgpack_sbuffer_destroy(&sb);
    }
}

Test(decode, raw_inputs_that_are_not_messages)
{
    static const struct {
        const char *bytes;
        size_t len;
        sl_proto_error_kind_t kind;
    } raw[] = {
        {"", 0, SL_PROTO_ERR_TRUNCATED},
        {"\xc1", 1, SL_PROTO_ERR_MALFORMED},
        {"\x91\x01", 2, SL_PROTO_ERR_TYPE}, /* an array, not a map */
        {"\xa3"
         "abc",
         4, SL_PROTO_ERR_TYPE},                              /* a string */
        {"\xdd\xff\xff\xff\xff", 5, SL_PROTO_ERR_TRUNCATED}, /* 4G items announced: nothing allocated */
        {"\xdf\x7f\xff\xff\xff\x01", 6, SL_PROTO_ERR_TRUNCATED},
        {"\xd4\x01\x00", 3, SL_PROTO_ERR_MALFORMED}, /* ext */
        {"\x80", 1, SL_PROTO_ERR_MISSING},           /* {} has no kind */
        {"\x81\xa4kind\x01", 7, SL_PROTO_ERR_TYPE},
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        sl_proto_error_t err = decode_fails(raw[i].bytes, raw[i].len);
        cr_assert_eq(err.kind, raw[i].kind, "case %zu: got %s (%s)", i, sl_proto_error_kind_slug(err.kind),
                     err.detail);
    }
}

Test(decode, nesting_is_bounded)
{
    char buf[64];
    size_t n = 0;
    buf[n++] = (char)0x82; /* {kind: "hello", x: [[[[…]]]]} */
    memcpy(buf + n, "\xa4kind\xa5hello\xa1x", 13);
    n += 13;
    for (int i = 0; i < 30; i++)
        buf[n++] = (char)0x91;
    buf[n++] = 0x01;
    sl_proto_error_t err = decode_fails(buf, n);
    cr_assert_eq(err.kind, SL_PROTO_ERR_MALFORMED, "%s", err.detail);
}

Test(decode, unknown_fields_are_ignored)
{
    /* {"kind": "events_dropped", "later": {"a": [1, nil, b"x"]}, "count": 3} */
    static const char buf[] = "\x83\xa4kind\xae"
                              "events_dropped\xa5later\x81\xa1"
                              "a\x93\x01\xc0\xc4\x01x\xa5"
                              "count\x03";
    sl_proto_message_t m;
    sl_proto_error_t err;
    size_t used;
    cr_assert_eq(sl_proto_decode(buf, sizeof buf - 1, &m, &used, &err), 0, "%s: %s", err.path, err.detail);
    cr_assert_eq(used, sizeof buf - 1);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_EVENTS_DROPPED);
    cr_assert_eq(m.events_dropped.count, 3);
    sl_proto_message_free(&m);
}

Test(enums, slugs_and_parse_agree)
{
    for (int i = 0; i < SL_PROTO_SERVE_SKIP_COUNT; i++) {
        sl_proto_serve_skip_t back;
        cr_assert_eq(sl_proto_serve_skip_parse(sl_proto_serve_skip_slug((sl_proto_serve_skip_t)i), &back), 0);
        cr_assert_eq((int)back, i);
    }
    sl_proto_serve_skip_t out;
    cr_assert_eq(sl_proto_serve_skip_parse("sleepy", &out), -1);
    cr_assert_null(sl_proto_serve_skip_slug((sl_proto_serve_skip_t)99));
    cr_assert_str_eq(sl_proto_event_kind_slug(SL_PROTO_EVENT_REQUEST_QUEUED), "request_queued");
    cr_assert_str_eq(sl_proto_message_kind_slug(SL_PROTO_MESSAGE_EVENTS_DROPPED), "events_dropped");
}
