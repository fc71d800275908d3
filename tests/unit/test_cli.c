/*
 * sluicectl's pure half (control/cli.h): the command line of every command
 * and its errors, dollars and durations, the limit groups becoming
 * sl_proto limits, the requests built, and events, providers (with the
 * cluster's totals and the request DB's line), the cluster's instances,
 * history (with the instance, from a PostgreSQL request DB) and errors
 * formatted as lines and as JSON. Times are shown in UTC here.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* 2026-09-21T14:13:20Z */
#define T0 UINT64_C(1790000000000)

static void
utc(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
}

TestSuite(cli, .init = utc);

/* ---- helpers ------------------------------------------------------------------------------------- */

/* Parses a command line given as a NULL-terminated list (argv[0] added); returns sl_cli_parse's result. */
static int
parse_v(sl_cli_args_t *a, char *err, const char *const *words)
{
    char *argv[64] = {"sluicectl"};
    int argc = 1;
    for (; words[argc - 1] != NULL; argc++)
        argv[argc] = (char *)words[argc - 1];
    argv[argc] = NULL;
    return sl_cli_parse(argc, argv, a, err, 256);
}

#define PARSE(a, err, ...) parse_v((a), (err), (const char *const[]){__VA_ARGS__, NULL})

/* Parsing must fail, with a reason that mentions `needle`. */
#define PARSE_FAILS(needle, ...)                                                                             \
    do {                                                                                                     \
        sl_cli_args_t a_;                                                                                    \
        char err_[256];                                                                                      \
        cr_assert_eq(PARSE(&a_, err_, __VA_ARGS__), -1, "parsed, expected an error about %s", needle);       \
        cr_assert(strstr(err_, needle) != NULL, "error \"%s\" does not mention \"%s\"", err_, needle);       \
    } while (0)

static char *
text(sl_strbuf_t *b)
{
    return sl_strbuf_finish(b);
}

static size_t
count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void
set_msg(sl_proto_msg_t *m, const char *code, const char *txt)
{
    m->code = sl_xstrdup(code);
    m->text = sl_xstrdup(txt);
}

static char **
strs(size_t n, ...)
{
    va_list ap;
    char **v = sl_xcalloc(n, sizeof(char *));
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        v[i] = sl_xstrdup(va_arg(ap, const char *));
    va_end(ap);
    return v;
}

static void
retrying_event(sl_proto_event_t *ev)
{
    sl_proto_event_init(ev, SL_PROTO_EVENT_REQUEST_RETRYING);
    sl_proto_request_retrying_t *r = &ev->request_retrying;
    r->at_ms = T0 + 121;
    r->id = 17;
    r->upstreams = strs(2, "anthropic", "relay");
    r->upstreams_len = 2;
    r->attempt = 2;
    r->retry_at_ms = T0 + 1621;
    r->until_ms = T0 + 120121;
    r->cause = SL_PROTO_RETRY_CAUSE_HINT;
    set_msg(&r->last_error, "gw.upstream.overloaded", "anthropic is overloaded (529)");
}

static void
queued_event(sl_proto_event_t *ev)
{
    sl_proto_event_init(ev, SL_PROTO_EVENT_REQUEST_QUEUED);
    sl_proto_request_queued_t *q = &ev->request_queued;
    q->at_ms = T0 + 200;
    q->id = 18;
    q->upstreams = strs(2, "anthropic", "relay");
    q->upstreams_len = 2;
    q->gates = sl_xcalloc(2, sizeof *q->gates);
    q->gates_len = 2;
    q->gates[0].upstream = sl_xstrdup("anthropic");
    q->gates[0].skip = SL_PROTO_SERVE_SKIP_THROTTLED;
    q->gates[0].has_until_ms = true;
    q->gates[0].until_ms = T0 + 30200;
    q->gates[1].upstream = sl_xstrdup("relay");
    q->gates[1].skip = SL_PROTO_SERVE_SKIP_WINDOW_FULL;
    q->until_ms = T0 + 60200;
}

static void
started_event(sl_proto_event_t *ev, uint64_t id, uint64_t at)
{
    sl_proto_event_init(ev, SL_PROTO_EVENT_REQUEST_STARTED);
    ev->request_started.at_ms = at;
    ev->request_started.id = id;
    ev->request_started.client = sl_xstrdup("alice");
    ev->request_started.model = sl_xstrdup("claude-sonnet-4");
    ev->request_started.path = sl_xstrdup("/v1/messages");
    ev->request_started.stream = true;
}

static void
headers_event(sl_proto_event_t *ev, uint64_t id, uint64_t at)
{
    sl_proto_event_init(ev, SL_PROTO_EVENT_REQUEST_HEADERS);
    ev->request_headers.at_ms = at;
    ev->request_headers.id = id;
    ev->request_headers.status = 200;
    ev->request_headers.ttfb_ms = 300;
}

static char *
event_line(const sl_proto_event_t *ev)
{
    sl_strbuf_t b = {0};
    sl_cli_event_line(ev, &b);
    return text(&b);
}

static char *
event_json(const sl_proto_event_t *ev)
{
    sl_strbuf_t b = {0};
    sl_cli_event_json(ev, &b);
    return text(&b);
}

/* ---- the command line ---------------------------------------------------------------------------- */

Test(cli, events_options_and_defaults)
{
    sl_cli_args_t a;
    char err[256];
    cr_assert_eq(PARSE(&a, err, "events", "--json", "--count", "3", "--providers"), 0, "%s", err);
    cr_assert_eq(a.command, SL_CLI_EVENTS);
    cr_assert(a.json);
    cr_assert(a.topic_providers);
    cr_assert_eq(a.count, 3);
    cr_assert(!a.help);
    cr_assert_str_eq(a.endpoint.host, "127.0.0.1");
    cr_assert_eq(a.endpoint.port, 8081);
    cr_assert_str_eq(a.endpoint.path, "/control");
    cr_assert(!a.endpoint.tls);
    cr_assert_str_eq(a.key_file, "sluice.key");
    cr_assert_null(a.key);
    cr_assert_eq(a.timeout_ms, 30000);
}

Test(cli, connection_options_anywhere)
{
    sl_cli_args_t a;
    char err[256];
    cr_assert_eq(PARSE(&a, err, "--url", "wss://gw.example:9443/ctl", "providers", "--key=k1", "--insecure",
                       "--key-file", "/etc/sluice.key", "--timeout", "3"),
                 0, "%s", err);
    cr_assert_eq(a.command, SL_CLI_PROVIDERS);
    cr_assert(a.endpoint.tls);
    cr_assert_str_eq(a.endpoint.host, "gw.example");
    cr_assert_eq(a.endpoint.port, 9443);
    cr_assert_str_eq(a.endpoint.path, "/ctl");
    cr_assert_str_eq(a.key, "k1");
    cr_assert(a.insecure);
    cr_assert_str_eq(a.key_file, "/etc/sluice.key");
    cr_assert_eq(a.timeout_ms, 3000);

    cr_assert_eq(PARSE(&a, err, "providers", "--port", "9000"), 0, "%s", err);
    cr_assert_str_eq(a.endpoint.host, "127.0.0.1");
    cr_assert_eq(a.endpoint.port, 9000);
    cr_assert_str_eq(a.endpoint.authority, "127.0.0.1:9000");
    PARSE_FAILS("--url and --port", "providers", "--port", "9000", "--url", "ws://h:1/control");
    PARSE_FAILS("--url and --port", "providers", "--url", "ws://h:1/control", "--port", "9000");
    PARSE_FAILS("--port", "providers", "--port", "70000");
}

Test(cli, usage_errors)
{
    PARSE_FAILS("no command", "--json");
    PARSE_FAILS("unknown command \"frobnicate\"", "frobnicate");
    PARSE_FAILS("unknown option --nope", "providers", "--nope");
    PARSE_FAILS("unknown option -x", "providers", "-x");
    PARSE_FAILS("--count needs a value", "events", "--count");
    PARSE_FAILS("--json takes no value", "providers", "--json=1");
    /* an option of another command */
    PARSE_FAILS("resume: unknown option --for", "resume", "anthropic", "--for", "5");
    PARSE_FAILS("providers: unknown option --count", "providers", "--count", "2");
    PARSE_FAILS("limits: expected `limits set` or `limits clear`", "limits", "show");
    PARSE_FAILS("config: expected `config get` or `config put`", "config");
    PARSE_FAILS("unexpected argument \"extra\"", "providers", "extra");
    PARSE_FAILS("--count", "events", "--count", "-1");
    PARSE_FAILS("--count", "events", "--count", "0");
}

Test(cli, help_for_each_command)
{
    sl_cli_args_t a;
    char err[256];
    cr_assert_eq(PARSE(&a, err, "--help"), 0, "%s", err);
    cr_assert(a.help);
    cr_assert_eq(a.command, SL_CLI_NONE);
    cr_assert(strstr(sl_cli_help(a.command), "limits set PROVIDER LIMIT...") != NULL);

    /* --help wins over what is missing or wrong in the rest */
    cr_assert_eq(PARSE(&a, err, "pause", "--help"), 0, "%s", err);
    cr_assert(a.help);
    cr_assert_eq(a.command, SL_CLI_PAUSE);
    cr_assert(strstr(sl_cli_help(a.command), "usage: sluicectl pause PROVIDER [--for DUR]") != NULL);

    cr_assert_eq(PARSE(&a, err, "help", "limits"), 0, "%s", err);
    cr_assert(a.help);
    cr_assert_eq(a.command, SL_CLI_LIMITS_SET);
    cr_assert(strstr(sl_cli_help(a.command), "--per minute|hour|day|week|month") != NULL);

    cr_assert_eq(PARSE(&a, err, "-h", "config"), 0, "%s", err);
    cr_assert_eq(a.command, SL_CLI_CONFIG_GET);
    PARSE_FAILS("unknown command", "help", "nope");
    for (int c = 0; c < SL_CLI_COMMAND_COUNT; c++) {
        cr_assert_not_null(sl_cli_help((sl_cli_command_t)c));
        cr_assert(strncmp(sl_cli_usage((sl_cli_command_t)c), "usage: sluicectl", 16) == 0);
    }
}

Test(cli, limits_need_a_target)
{
    PARSE_FAILS("name the provider", "limits", "set", "--per", "minute", "--tokens", "5");
    PARSE_FAILS("name the provider", "limits", "clear");
    PARSE_FAILS("name the provider", "pause");
    PARSE_FAILS("name the provider", "resume");
    PARSE_FAILS("not both", "limits", "set", "anthropic", "--client", "alice", "--per", "minute", "--tokens",
                "5");
    PARSE_FAILS("at least one limit", "limits", "set", "anthropic");
}

Test(cli, limit_group_errors)
{
    PARSE_FAILS("one measure per limit", "limits", "set", "anthropic", "--per", "minute", "--tokens", "5",
                "--requests", "3");
    PARSE_FAILS("limit 2 (--per day): one measure per limit", "limits", "set", "anthropic", "--per", "minute",
                "--tokens", "5", "--per", "day", "--cost", "1", "--cost", "2");
    PARSE_FAILS("limit 1 (--per hour): give its measure", "limits", "set", "anthropic", "--per", "hour");
    PARSE_FAILS("limit 2 (--per day): give its measure", "limits", "set", "anthropic", "--per", "minute",
                "--requests", "1", "--per", "day");
    PARSE_FAILS("start it with --per", "limits", "set", "anthropic", "--tokens", "5", "--per", "minute");
    PARSE_FAILS("start it with --per", "limits", "set", "anthropic", "--every", "5");
    PARSE_FAILS("--per: expected minute, hour", "limits", "set", "anthropic", "--per", "fortnight",
                "--tokens", "1");
    PARSE_FAILS("--tokens: expected a whole number", "limits", "set", "anthropic", "--per", "minute",
                "--tokens", "12k");
    PARSE_FAILS("--tokens: expected a whole number", "limits", "set", "anthropic", "--per", "minute",
                "--tokens", "0");
    PARSE_FAILS("--every", "limits", "set", "anthropic", "--per", "minute", "--every", "0", "--tokens", "1");
    PARSE_FAILS("--cost: expected US dollars", "limits", "set", "anthropic", "--per", "day", "--cost",
                "1.0000001");
    /* limit options belong to `limits set` only */
    PARSE_FAILS("limits clear: unknown option --per", "limits", "clear", "anthropic", "--per", "minute");
}

Test(cli, dollars_to_micro_dollars_exactly)
{
    static const struct {
        const char *in;
        uint64_t micros;
    } good[] = {
        {"0.5", 500000},    {"20", 20000000},         {"$1.25", 1250000}, {".5", 500000},
        {"0.000001", 1},    {"3.", 3000000},          {"0.1", 100000},    {"1.999999", 1999999},
        {"000.75", 750000}, {"100000", 100000000000},
    };
    static const char *const bad[] = {
        "1.0000001", "0",  "0.0", "-1", "1e3", "",   ".",         "1.2.3",
        "abc",       " 1", "1 ",  "$",  "$-1", "+1", "0.0000001", "9007199254.740992"};
    for (size_t i = 0; i < N(good); i++) {
        uint64_t v = 7;
        cr_assert_eq(sl_cli_parse_usd(good[i].in, &v), 0, "\"%s\" refused", good[i].in);
        cr_assert_eq(v, good[i].micros, "\"%s\" -> %llu", good[i].in, (unsigned long long)v);
    }
    for (size_t i = 0; i < N(bad); i++) {
        uint64_t v = 7;
        cr_assert_eq(sl_cli_parse_usd(bad[i], &v), -1, "\"%s\" accepted", bad[i]);
        cr_assert_eq(v, 7, "\"%s\": a refused value was written", bad[i]);
    }
}

Test(cli, durations_and_numbers)
{
    static const struct {
        const char *in;
        uint64_t ms;
    } good[] = {{"90", 90000},      {"90s", 90000},    {"15m", 900000},
                {"1h30m", 5400000}, {"2d", 172800000}, {"1w", 604800000}};
    static const char *const bad[] = {"", "0", "0s", "h", "1x", "1.5h", "-5", "1h 30m", "m5"};
    for (size_t i = 0; i < N(good); i++) {
        uint64_t v = 7;
        cr_assert_eq(sl_cli_parse_duration(good[i].in, &v), 0, "\"%s\" refused", good[i].in);
        cr_assert_eq(v, good[i].ms, "\"%s\"", good[i].in);
    }
    for (size_t i = 0; i < N(bad); i++) {
        uint64_t v = 7;
        cr_assert_eq(sl_cli_parse_duration(bad[i], &v), -1, "\"%s\" accepted", bad[i]);
        cr_assert_eq(v, 7);
    }
    uint64_t v = 7;
    cr_assert_eq(sl_cli_parse_uint("18446744073709551616", 0, UINT64_MAX, &v), -1, "overflow accepted");
    cr_assert_eq(sl_cli_parse_uint("12a", 0, 100, &v), -1);
    cr_assert_eq(sl_cli_parse_uint("101", 0, 100, &v), -1);
    cr_assert_eq(v, 7);
    cr_assert_eq(sl_cli_parse_uint("100", 0, 100, &v), 0);
    cr_assert_eq(v, 100);
}

Test(cli, urls)
{
    sl_cli_endpoint_t e;
    cr_assert_eq(sl_cli_parse_url("ws://10.0.0.2:8081/control", &e), 0);
    cr_assert_str_eq(e.host, "10.0.0.2");
    cr_assert_eq(e.port, 8081);
    cr_assert(!e.tls);
    cr_assert_eq(sl_cli_parse_url("wss://gw.example", &e), 0);
    cr_assert(e.tls);
    cr_assert_eq(e.port, 443);
    cr_assert_str_eq(e.path, "/control", "no path means the control endpoint");
    cr_assert_str_eq(e.authority, "gw.example");
    cr_assert_eq(sl_cli_parse_url("ws://[::1]:8081/control", &e), 0);
    cr_assert_str_eq(e.host, "::1");
    cr_assert_str_eq(e.authority, "[::1]:8081");
    static const char *const bad[] = {
        "http://h:1/control", "ws://",     "ws://:80/x", "ws://h:0/", "ws://h:99999/",
        "ws://h:x/",          "ws://u@h/", "ws://[::1/", "h:8081",    "ws://h:/"};
    for (size_t i = 0; i < N(bad); i++) {
        e.port = -7;
        cr_assert_eq(sl_cli_parse_url(bad[i], &e), -1, "\"%s\" accepted", bad[i]);
        cr_assert_eq(e.port, -7, "\"%s\": written on failure", bad[i]);
    }
}

Test(cli, trim_key)
{
    char k1[] = "  s3cret\r\n\n";
    char k2[] = "\t\n ";
    char k3[] = "a b";
    cr_assert_str_eq(sl_cli_trim(k1), "s3cret");
    cr_assert_str_eq(sl_cli_trim(k2), "");
    cr_assert_str_eq(sl_cli_trim(k3), "a b");
}

/* ---- requests ------------------------------------------------------------------------------------ */

/* The message must survive the codec: what the shell sends is what the server decodes. */
static void
assert_roundtrips(const sl_proto_message_t *m)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    cr_assert_eq(sl_proto_encode(m, &sb), 0, "the request does not encode");
    sl_proto_message_t back;
    sl_proto_error_t err;
    size_t used;
    cr_assert_eq(sl_proto_decode(sb.data, sb.size, &back, &used, &err), 0, "%s: %s", err.path, err.detail);
    cr_assert_eq(back.kind, m->kind);
    cr_assert_eq(used, sb.size);
    sl_proto_message_free(&back);
    msgpack_sbuffer_destroy(&sb);
}

Test(cli, limit_groups_become_protocol_limits)
{
    sl_cli_args_t a;
    char err[256];
    cr_assert_eq(PARSE(&a, err, "limits", "set", "anthropic", "--per", "minute", "--every", "5", "--tokens",
                       "10000000", "--per", "day", "--cost", "0.5", "--per", "hour", "--requests", "100"),
                 0, "%s", err);
    cr_assert_eq(a.command, SL_CLI_LIMITS_SET);
    sl_proto_message_t m;
    cr_assert_eq(sl_cli_build_request(&a, 4, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_SET_PROVIDER_LIMITS);
    const sl_proto_set_provider_limits_msg_t *s = &m.set_provider_limits;
    cr_assert_eq(s->req, 4);
    cr_assert_str_eq(s->provider, "anthropic");
    cr_assert_eq(s->limits_len, 3);
    const sl_proto_limit_t *l = s->limits;
    cr_assert_eq(l[0].per, SL_PROTO_PERIOD_MINUTE);
    cr_assert_eq(l[0].every, 5);
    cr_assert(l[0].has_tokens && !l[0].has_requests && !l[0].has_cost_micros);
    cr_assert_eq(l[0].tokens, 10000000);
    cr_assert_eq(l[1].per, SL_PROTO_PERIOD_DAY);
    cr_assert_eq(l[1].every, 1, "--every defaults to 1");
    cr_assert(l[1].has_cost_micros && !l[1].has_tokens && !l[1].has_requests);
    cr_assert_eq(l[1].cost_micros, 500000);
    cr_assert_eq(l[2].per, SL_PROTO_PERIOD_HOUR);
    cr_assert(l[2].has_requests && !l[2].has_tokens && !l[2].has_cost_micros);
    cr_assert_eq(l[2].requests, 100);
    assert_roundtrips(&m);
    sl_proto_message_free(&m);
}

Test(cli, key_limits_and_clear)
{
    sl_cli_args_t a;
    char err[256];
    sl_proto_message_t m;
    cr_assert_eq(PARSE(&a, err, "limits", "set", "--client", "alice", "--per", "day", "--cost", "20"), 0,
                 "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 1, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_SET_KEY_LIMITS);
    cr_assert_str_eq(m.set_key_limits.client, "alice");
    cr_assert_eq(m.set_key_limits.limits_len, 1);
    cr_assert_eq(m.set_key_limits.limits[0].cost_micros, 20000000);
    assert_roundtrips(&m);
    sl_proto_message_free(&m);

    cr_assert_eq(PARSE(&a, err, "limits", "clear", "anthropic"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 2, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_SET_PROVIDER_LIMITS);
    cr_assert_str_eq(m.set_provider_limits.provider, "anthropic");
    cr_assert_eq(m.set_provider_limits.limits_len, 0, "clear sends an empty list");
    assert_roundtrips(&m);
    sl_proto_message_free(&m);

    cr_assert_eq(PARSE(&a, err, "limits", "clear", "--client", "bob"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 3, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_SET_KEY_LIMITS);
    cr_assert_eq(m.set_key_limits.limits_len, 0);
    sl_proto_message_free(&m);
}

Test(cli, pause_resume_cancel)
{
    sl_cli_args_t a;
    char err[256];
    sl_proto_message_t m;
    cr_assert_eq(PARSE(&a, err, "pause", "relay", "--for", "90"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 9, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_PAUSE_PROVIDER);
    cr_assert_str_eq(m.pause_provider.provider, "relay");
    cr_assert_eq(m.pause_provider.until_ms, T0 + 90000);
    sl_proto_message_free(&m);

    cr_assert_eq(PARSE(&a, err, "pause", "relay"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 9, T0, NULL, &m), 0);
    cr_assert_eq(m.pause_provider.until_ms, 0, "no --for: until resumed");
    sl_proto_message_free(&m);
    PARSE_FAILS("--for: expected a duration", "pause", "relay", "--for", "0");
    PARSE_FAILS("--for: expected a duration", "pause", "relay", "--for", "soon");

    cr_assert_eq(PARSE(&a, err, "resume", "relay"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 2, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_RESUME_PROVIDER);
    cr_assert_str_eq(m.resume_provider.provider, "relay");
    sl_proto_message_free(&m);

    cr_assert_eq(PARSE(&a, err, "cancel", "4711"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 3, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_CANCEL_REQUEST);
    cr_assert_eq(m.cancel_request.id, 4711);
    cr_assert_eq(m.cancel_request.req, 3);
    sl_proto_message_free(&m);
    PARSE_FAILS("request ID", "cancel", "x17");
    PARSE_FAILS("give the request's ID", "cancel");
}

Test(cli, history_filters)
{
    sl_cli_args_t a;
    char err[256];
    sl_proto_message_t m;
    cr_assert_eq(PARSE(&a, err, "history", "--since", "1h", "--limit", "10", "--client", "alice",
                       "--provider", "relay", "--status", "429", "--model", "gpt-5", "--json"),
                 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 5, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_HISTORY);
    const sl_proto_history_msg_t *h = &m.history;
    cr_assert_eq(h->since_ms, T0 - 3600000);
    cr_assert_eq(h->limit, 10);
    cr_assert_str_eq(h->filter.client, "alice");
    cr_assert_str_eq(h->filter.provider, "relay");
    cr_assert_str_eq(h->filter.model, "gpt-5");
    cr_assert(h->filter.has_status);
    cr_assert_eq(h->filter.status, 429);
    cr_assert_null(h->cursor);
    assert_roundtrips(&m);
    sl_proto_message_free(&m);

    cr_assert_eq(PARSE(&a, err, "history"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 5, T0, NULL, &m), 0);
    cr_assert_eq(m.history.since_ms, 0, "no --since: everything");
    cr_assert_eq(m.history.limit, 50);
    cr_assert_null(m.history.filter.client);
    cr_assert(!m.history.filter.has_status);
    sl_proto_message_free(&m);
    PARSE_FAILS("--status", "history", "--status", "abc");
    PARSE_FAILS("--limit", "history", "--limit", "0");
}

Test(cli, config_put_learns_the_revision_first)
{
    sl_cli_args_t a;
    char err[256];
    sl_proto_message_t m;
    cr_assert_eq(PARSE(&a, err, "config", "put", "sluice.yaml"), 0, "%s", err);
    cr_assert_eq(a.command, SL_CLI_CONFIG_PUT);
    cr_assert_str_eq(a.config_file, "sluice.yaml");
    cr_assert_eq(sl_cli_build_request(&a, 1, T0, "version: 1\n", &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_GET_CONFIG, "without --revision the revision is fetched");
    sl_proto_message_free(&m);
    sl_cli_build_put_config(2, "version: 1\n", 41, &m);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_PUT_CONFIG);
    cr_assert_str_eq(m.put_config.yaml, "version: 1\n");
    cr_assert_eq(m.put_config.expect_revision, 41);
    sl_proto_message_free(&m);

    cr_assert_eq(PARSE(&a, err, "config", "put", "-", "--revision", "7"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 1, T0, "version: 1\n", &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_PUT_CONFIG);
    cr_assert_eq(m.put_config.expect_revision, 7);
    assert_roundtrips(&m);
    sl_proto_message_free(&m);
    PARSE_FAILS("give the FILE", "config", "put");
    PARSE_FAILS("config put: unknown option --repair", "config", "put", "f", "--repair");
}

Test(cli, hello_and_subscribe)
{
    sl_cli_args_t a;
    char err[256];
    sl_proto_message_t m;
    sl_cli_build_hello("k", &m);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_HELLO);
    cr_assert_eq(m.hello.protocol, SL_PROTO_VERSION);
    cr_assert_str_eq(m.hello.key, "k");
    cr_assert_str_eq(m.hello.client, "sluicectl 0.1.0");
    sl_proto_message_free(&m);

    cr_assert_eq(PARSE(&a, err, "events", "--providers"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 1, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_SUBSCRIBE);
    cr_assert_eq(m.subscribe.topics_len, 2);
    cr_assert_eq(m.subscribe.topics[0], SL_PROTO_TOPIC_EVENTS);
    cr_assert_eq(m.subscribe.topics[1], SL_PROTO_TOPIC_PROVIDERS);
    sl_proto_message_free(&m);
    cr_assert_eq(PARSE(&a, err, "events"), 0, "%s", err);
    cr_assert_eq(sl_cli_build_request(&a, 1, T0, NULL, &m), 0);
    cr_assert_eq(m.subscribe.topics_len, 1);
    sl_proto_message_free(&m);
}

Test(cli, instances_command)
{
    sl_cli_args_t a;
    char err[256];
    sl_proto_message_t m;
    cr_assert_eq(PARSE(&a, err, "instances"), 0, "%s", err);
    cr_assert_eq(a.command, SL_CLI_INSTANCES);
    cr_assert(!a.json);
    cr_assert_eq(sl_cli_build_request(&a, 6, T0, NULL, &m), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_GET_INSTANCES);
    cr_assert_eq(m.get_instances.req, 6);
    assert_roundtrips(&m);
    sl_proto_message_free(&m);

    cr_assert_eq(PARSE(&a, err, "instances", "--json"), 0, "%s", err);
    cr_assert(a.json);
    cr_assert_eq(PARSE(&a, err, "help", "instances"), 0, "%s", err);
    cr_assert_eq(a.command, SL_CLI_INSTANCES);
    cr_assert(strstr(sl_cli_help(a.command), "usage: sluicectl instances [--json]") != NULL);
    cr_assert(strstr(sl_cli_help(SL_CLI_NONE), "instances [--json]") != NULL, "listed in the general help");
    PARSE_FAILS("instances: unknown option --count", "instances", "--count", "2");
    PARSE_FAILS("instances: unexpected argument \"gw-a\"", "instances", "gw-a");
}

/* ---- formatting ---------------------------------------------------------------------------------- */

Test(cli, small_texts)
{
    char s[32];
    sl_cli_usd_text(20000000, s);
    cr_assert_str_eq(s, "$20.00");
    sl_cli_usd_text(500000, s);
    cr_assert_str_eq(s, "$0.50");
    sl_cli_usd_text(1234, s);
    cr_assert_str_eq(s, "$0.001234");
    sl_cli_duration_text(450, s);
    cr_assert_str_eq(s, "450ms");
    sl_cli_duration_text(2345, s);
    cr_assert_str_eq(s, "2.345s");
    char c[16];
    sl_cli_clock(T0 + 7, c);
    cr_assert_str_eq(c, "14:13:20.007");
    char l[128];
    sl_cli_limit_text(
        &(sl_proto_limit_t){
            .per = SL_PROTO_PERIOD_MINUTE, .every = 5, .has_tokens = true, .tokens = 10000000},
        l, sizeof l);
    cr_assert_str_eq(l, "10000000 tokens per 5 min");
    sl_cli_limit_text(
        &(sl_proto_limit_t){
            .per = SL_PROTO_PERIOD_DAY, .every = 1, .has_cost_micros = true, .cost_micros = 20000000},
        l, sizeof l);
    cr_assert_str_eq(l, "$20.00 per day");
}

Test(cli, retrying_line_and_json)
{
    sl_proto_event_t ev;
    retrying_event(&ev);
    char *line = event_line(&ev);
    cr_assert_str_eq(
        line, "14:13:20.121 request_retrying id=17 attempt=2 upstreams=anthropic,relay "
              "retry_at=14:13:21.621 until=14:15:20.121 cause=hint last_error=gw.upstream.overloaded\n");
    char *json = event_json(&ev);
    cr_assert_str_eq(json,
                     "{\"kind\":\"request_retrying\",\"at_ms\":1790000000121,\"id\":17,"
                     "\"upstreams\":[\"anthropic\",\"relay\"],\"attempt\":2,\"retry_at_ms\":1790000001621,"
                     "\"until_ms\":1790000120121,\"cause\":\"hint\",\"last_error\":{\"code\":"
                     "\"gw.upstream.overloaded\",\"args\":{},\"text\":\"anthropic is overloaded (529)\"}}\n");
    free(line);
    free(json);
    sl_proto_event_free(&ev);
}

Test(cli, attempt_line_says_why_the_request_went_on)
{
    sl_proto_event_t ev;
    sl_proto_event_init(&ev, SL_PROTO_EVENT_ATTEMPT);
    ev.attempt.at_ms = T0 + 5;
    ev.attempt.id = 21;
    ev.attempt.view.provider = sl_xstrdup("primary");
    ev.attempt.view.outcome = SL_PROTO_OUTCOME_SERVED;
    ev.attempt.view.has_status = true;
    ev.attempt.view.status = 200;
    ev.attempt.view.ms = 2;
    ev.attempt.view.has_reason = true;
    ev.attempt.view.reason = SL_PROTO_STEP_REASON_BACK_TO_EARLIER;
    char *line = event_line(&ev);
    cr_assert_str_eq(
        line, "14:13:20.005 attempt id=21 provider=primary outcome=served status=200 reason=back_to_earlier "
              "took=2ms\n");
    free(line);
    sl_proto_event_free(&ev);
}

Test(cli, attempt_line_marks_a_first_token_hedge)
{
    sl_proto_event_t ev;
    sl_proto_event_init(&ev, SL_PROTO_EVENT_ATTEMPT);
    ev.attempt.at_ms = T0 + 5;
    ev.attempt.id = 22;
    ev.attempt.view.provider = sl_xstrdup("fast");
    ev.attempt.view.outcome = SL_PROTO_OUTCOME_SERVED;
    ev.attempt.view.has_hedge = true;
    ev.attempt.view.hedge = true;
    ev.attempt.view.ms = 2;
    char *line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.005 attempt id=22 provider=fast outcome=served hedge=yes took=2ms\n");
    free(line);
    sl_proto_event_free(&ev);
}

Test(cli, queued_line_shows_the_gates)
{
    sl_proto_event_t ev;
    queued_event(&ev);
    char *line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.200 request_queued id=18 upstreams=anthropic,relay "
                           "gates=anthropic:throttled@14:13:50.200,relay:window_full until=14:14:20.200\n");
    char *json = event_json(&ev);
    cr_assert_str_eq(json, "{\"kind\":\"request_queued\",\"at_ms\":1790000000200,\"id\":18,"
                           "\"upstreams\":[\"anthropic\",\"relay\"],\"gates\":[{\"upstream\":\"anthropic\","
                           "\"skip\":\"throttled\",\"until_ms\":1790000030200},{\"upstream\":\"relay\","
                           "\"skip\":\"window_full\"}],\"until_ms\":1790000060200}\n");
    free(line);
    free(json);
    sl_proto_event_free(&ev);
}

Test(cli, throttle_changed_line)
{
    sl_proto_event_t ev;
    sl_proto_event_init(&ev, SL_PROTO_EVENT_THROTTLE_CHANGED);
    ev.throttle_changed.at_ms = T0 + 122;
    ev.throttle_changed.provider = sl_xstrdup("anthropic");
    ev.throttle_changed.throttle = sl_xcalloc(1, sizeof(sl_proto_throttle_t));
    ev.throttle_changed.throttle->kind = SL_PROTO_THROTTLE_KIND_PAUSED;
    ev.throttle_changed.throttle->has_until_ms = true;
    ev.throttle_changed.throttle->until_ms = T0 + 60122;
    ev.throttle_changed.throttle->consecutive = 2;
    set_msg(&ev.throttle_changed.throttle->reason, "gw.upstream.rate_limited", "429 from anthropic");
    char *line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.122 throttle_changed provider=anthropic kind=paused until=14:14:20.122 "
                           "consecutive=2 reason=gw.upstream.rate_limited\n");
    free(line);
    char *json = event_json(&ev);
    cr_assert(
        strstr(json, "\"throttle\":{\"kind\":\"paused\",\"until_ms\":1790000060122,\"consecutive\":2,") !=
            NULL,
        "%s", json);
    free(json);

    sl_proto_throttle_free(ev.throttle_changed.throttle);
    free(ev.throttle_changed.throttle);
    ev.throttle_changed.throttle = NULL; /* absent: recovered */
    line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.122 throttle_changed provider=anthropic recovered\n");
    free(line);
    json = event_json(&ev);
    cr_assert_str_eq(json,
                     "{\"kind\":\"throttle_changed\",\"at_ms\":1790000000122,\"provider\":\"anthropic\"}\n");
    free(json);
    sl_proto_event_free(&ev);
}

Test(cli, request_failed_line_quotes_the_text)
{
    sl_proto_event_t ev;
    sl_proto_event_init(&ev, SL_PROTO_EVENT_REQUEST_FAILED);
    ev.request_failed.at_ms = T0 + 120000;
    ev.request_failed.id = 17;
    ev.request_failed.source = SL_PROTO_FAILURE_SOURCE_RATE_LIMITED;
    set_msg(&ev.request_failed.message, "gw.queue.deadline", "no upstream could take it within \"120 s\"");
    ev.request_failed.duration_ms = 120000;
    char *line = event_line(&ev);
    cr_assert_str_eq(line, "14:15:20.000 request_failed id=17 source=rate_limited code=gw.queue.deadline "
                           "duration=120.000s text=\"no upstream could take it within \\\"120 s\\\"\"\n");
    free(line);
    char *json = event_json(&ev);
    cr_assert_str_eq(json,
                     "{\"kind\":\"request_failed\",\"at_ms\":1790000120000,\"id\":17,\"source\":"
                     "\"rate_limited\",\"message\":{\"code\":\"gw.queue.deadline\",\"args\":{},\"text\":"
                     "\"no upstream could take it within \\\"120 s\\\"\"},\"duration_ms\":120000}\n");
    free(json);
    sl_proto_event_free(&ev);
}

Test(cli, finished_and_limits_changed_lines)
{
    sl_proto_event_t ev;
    sl_proto_event_init(&ev, SL_PROTO_EVENT_REQUEST_FINISHED);
    ev.request_finished.at_ms = T0;
    ev.request_finished.id = 5;
    ev.request_finished.status = 200;
    ev.request_finished.bytes = 512;
    ev.request_finished.duration_ms = 1500;
    ev.request_finished.usage = sl_xcalloc(1, sizeof(sl_proto_usage_t));
    ev.request_finished.usage->input = 1200;
    ev.request_finished.usage->output = 340;
    ev.request_finished.usage->estimated = true;
    ev.request_finished.has_cost_micros = true;
    ev.request_finished.cost_micros = 8700;
    char *line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.000 request_finished id=5 status=200 duration=1.500s bytes=512 "
                           "tokens=~1200/340 cost=$0.0087\n");
    free(line);
    sl_proto_event_free(&ev);

    sl_proto_event_init(&ev, SL_PROTO_EVENT_LIMITS_CHANGED);
    ev.limits_changed.at_ms = T0;
    ev.limits_changed.target = SL_PROTO_LIMIT_TARGET_CLIENT;
    ev.limits_changed.name = sl_xstrdup("alice");
    ev.limits_changed.limits = sl_xcalloc(2, sizeof(sl_proto_limit_t));
    ev.limits_changed.limits_len = 2;
    ev.limits_changed.limits[0] =
        (sl_proto_limit_t){.per = SL_PROTO_PERIOD_MINUTE, .every = 1, .has_requests = true, .requests = 30};
    ev.limits_changed.limits[1] = (sl_proto_limit_t){
        .per = SL_PROTO_PERIOD_HOUR, .every = 2, .has_cost_micros = true, .cost_micros = 1500000};
    line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.000 limits_changed target=client name=alice "
                           "limits=[30 requests per minute, $1.50 per 2 h]\n");
    free(line);
    sl_proto_event_free(&ev);
}

Test(cli, cluster_changed_line_and_json)
{
    sl_proto_event_t ev;
    sl_proto_event_init(&ev, SL_PROTO_EVENT_CLUSTER_CHANGED);
    ev.cluster_changed.at_ms = T0 + 300;
    ev.cluster_changed.state = SL_PROTO_CLUSTER_STATE_DEGRADED;
    ev.cluster_changed.instances = 2;
    ev.cluster_changed.reason = sl_xcalloc(1, sizeof(sl_proto_msg_t));
    set_msg(ev.cluster_changed.reason, "gw.cluster.lost", "Redis at 127.0.0.1:6379 does not answer");
    char *line = event_line(&ev);
    cr_assert_str_eq(line,
                     "14:13:20.300 cluster_changed state=degraded instances=2 reason=gw.cluster.lost\n");
    free(line);
    char *json = event_json(&ev);
    cr_assert_str_eq(json, "{\"kind\":\"cluster_changed\",\"at_ms\":1790000000300,\"state\":\"degraded\","
                           "\"instances\":2,\"reason\":{\"code\":\"gw.cluster.lost\",\"args\":{},\"text\":"
                           "\"Redis at 127.0.0.1:6379 does not answer\"}}\n");
    free(json);
    sl_proto_event_free(&ev);

    /* joined again: no reason */
    sl_proto_event_init(&ev, SL_PROTO_EVENT_CLUSTER_CHANGED);
    ev.cluster_changed.at_ms = T0 + 400;
    ev.cluster_changed.state = SL_PROTO_CLUSTER_STATE_JOINED;
    ev.cluster_changed.instances = 3;
    line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.400 cluster_changed state=joined instances=3\n");
    free(line);
    json = event_json(&ev);
    cr_assert_str_eq(json, "{\"kind\":\"cluster_changed\",\"at_ms\":1790000000400,\"state\":\"joined\","
                           "\"instances\":3}\n");
    free(json);
    sl_proto_event_free(&ev);
}

Test(cli, store_changed_line_and_json)
{
    sl_proto_event_t ev;
    sl_proto_event_init(&ev, SL_PROTO_EVENT_STORE_CHANGED);
    ev.store_changed.at_ms = T0 + 500;
    ev.store_changed.state = SL_PROTO_STORE_STATE_DEGRADED;
    ev.store_changed.store_kind = SL_PROTO_STORE_KIND_POSTGRES;
    ev.store_changed.reason = sl_xstrdup("connection refused");
    ev.store_changed.has_spooled_rows = true;
    ev.store_changed.spooled_rows = 120;
    char *line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.500 store_changed state=degraded store=postgres "
                           "reason=\"connection refused\" spooled_rows=120\n");
    free(line);
    char *json = event_json(&ev);
    cr_assert_str_eq(json,
                     "{\"kind\":\"store_changed\",\"at_ms\":1790000000500,\"state\":\"degraded\","
                     "\"store_kind\":\"postgres\",\"reason\":\"connection refused\",\"spooled_rows\":120}\n");
    free(json);
    sl_proto_event_free(&ev);

    /* back to ok: no reason, nothing spooled said */
    sl_proto_event_init(&ev, SL_PROTO_EVENT_STORE_CHANGED);
    ev.store_changed.at_ms = T0 + 600;
    ev.store_changed.state = SL_PROTO_STORE_STATE_OK;
    ev.store_changed.store_kind = SL_PROTO_STORE_KIND_POSTGRES;
    line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.600 store_changed state=ok store=postgres\n");
    free(line);
    sl_proto_event_free(&ev);
}

Test(cli, request_started_shows_the_instance_in_cluster_mode)
{
    sl_proto_event_t ev;
    started_event(&ev, 9, T0);
    char *line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.000 request_started id=9 client=alice dialect=anthropic "
                           "model=claude-sonnet-4 stream=yes path=/v1/messages\n");
    free(line);
    ev.request_started.session = sl_xstrdup("s1");
    ev.request_started.instance = sl_xstrdup("gw-b");
    line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.000 request_started id=9 client=alice dialect=anthropic "
                           "model=claude-sonnet-4 stream=yes path=/v1/messages session=s1 instance=gw-b\n");
    free(line);
    char *json = event_json(&ev);
    cr_assert(strstr(json, "\"session\":\"s1\",\"instance\":\"gw-b\"}\n") != NULL, "%s", json);
    free(json);
    sl_proto_event_free(&ev);
}

static void
provider_view(sl_proto_provider_view_t *v)
{
    memset(v, 0, sizeof *v);
    v->name = sl_xstrdup("anthropic");
    v->protocol = SL_PROTO_DIALECT_ANTHROPIC;
    v->base_url = sl_xstrdup("https://api.anthropic.com");
    v->health = SL_PROTO_HEALTH_STATE_HALF_OPEN;
    v->throttle = sl_xcalloc(1, sizeof(sl_proto_throttle_t));
    v->throttle->kind = SL_PROTO_THROTTLE_KIND_PAUSED;
    v->throttle->has_until_ms = true;
    v->throttle->until_ms = T0 + 41500; /* 41.5 s left: shown rounded up */
    v->throttle->consecutive = 1;
    set_msg(&v->throttle->reason, "gw.upstream.rate_limited", "429");
    v->limits = sl_xcalloc(2, sizeof(sl_proto_limit_view_t));
    v->limits_len = 2;
    v->limits[0] = (sl_proto_limit_view_t){
        .per = SL_PROTO_PERIOD_MINUTE, .every = 5, .has_tokens = true, .tokens = 10000000, .used = 1200};
    v->limits[1] = (sl_proto_limit_view_t){.per = SL_PROTO_PERIOD_DAY,
                                           .every = 1,
                                           .has_cost_micros = true,
                                           .cost_micros = 20000000,
                                           .used = 1200000};
    v->in_flight = 3;
    v->has_max_concurrent = true;
    v->max_concurrent = 64;
    v->queued = 12;
}

Test(cli, providers_table_row)
{
    sl_proto_provider_view_t v[2];
    provider_view(&v[0]);
    memset(&v[1], 0, sizeof v[1]);
    v[1].name = sl_xstrdup("relay");
    v[1].protocol = SL_PROTO_DIALECT_OPENAI_CHAT;
    v[1].base_url = sl_xstrdup("https://relay");
    v[1].disabled = true;
    v[1].in_flight = 0;
    sl_strbuf_t b = {0};
    sl_cli_providers_table(v, 2, T0, &b);
    char *t = text(&b);
    cr_assert_str_eq(t, "NAME       PROTOCOL     HEALTH     THROTTLE    IN-FLIGHT  QUEUED  LIMITS\n"
                        "anthropic  anthropic    half_open  paused 42s       3/64      12  "
                        "1200/10000000 tokens per 5 min, $1.20/$20.00 per day\n"
                        "relay      openai_chat  disabled   -                   0       0  -\n");
    free(t);

    sl_cli_provider_json(&v[0], &b);
    t = text(&b);
    cr_assert_str_eq(t,
                     "{\"name\":\"anthropic\",\"protocol\":\"anthropic\",\"base_url\":"
                     "\"https://api.anthropic.com\",\"disabled\":false,\"health\":\"half_open\",\"throttle\":"
                     "{\"kind\":\"paused\",\"until_ms\":1790000041500,\"consecutive\":1,\"reason\":{\"code\":"
                     "\"gw.upstream.rate_limited\",\"args\":{},\"text\":\"429\"}},\"limits\":[{\"per\":"
                     "\"minute\",\"every\":5,\"tokens\":10000000,\"used\":1200,\"resets_at_ms\":0},{\"per\":"
                     "\"day\",\"every\":1,\"cost_micros\":20000000,\"used\":1200000,\"resets_at_ms\":0}],"
                     "\"in_flight\":3,\"max_concurrent\":64,\"queued\":12}\n");
    free(t);
    sl_proto_provider_view_free(&v[0]);
    sl_proto_provider_view_free(&v[1]);
}

Test(cli, providers_show_the_cluster_totals)
{
    sl_proto_provider_view_t v[2];
    provider_view(&v[0]);
    v[0].has_cluster_in_flight = true;
    v[0].cluster_in_flight = 7;
    v[0].has_cluster_queued = true;
    v[0].cluster_queued = 20;
    memset(&v[1], 0, sizeof v[1]);
    v[1].name = sl_xstrdup("relay");
    v[1].protocol = SL_PROTO_DIALECT_OPENAI_CHAT;
    v[1].base_url = sl_xstrdup("https://relay");
    v[1].in_flight = 1;
    v[1].has_cluster_in_flight = true;
    v[1].cluster_in_flight = 1;
    v[1].has_cluster_queued = true;
    v[1].cluster_queued = 0;
    sl_strbuf_t b = {0};
    sl_cli_providers_table(v, 2, T0, &b);
    char *t = text(&b);
    cr_assert_str_eq(
        t, "NAME       PROTOCOL     HEALTH     THROTTLE           IN-FLIGHT           QUEUED  LIMITS\n"
           "anthropic  anthropic    half_open  paused 42s  3/64 (cluster 7)  12 (cluster 20)  "
           "1200/10000000 tokens per 5 min, $1.20/$20.00 per day\n"
           "relay      openai_chat  ok         -              1 (cluster 1)    0 (cluster 0)  -\n");
    free(t);

    sl_cli_provider_json(&v[0], &b);
    t = text(&b);
    cr_assert(strstr(t, "\"in_flight\":3,\"max_concurrent\":64,\"queued\":12,\"cluster_in_flight\":7,"
                        "\"cluster_queued\":20}\n") != NULL,
              "%s", t);
    free(t);

    /* provider_changed carries the same view */
    sl_proto_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = SL_PROTO_EVENT_PROVIDER_CHANGED;
    ev.provider_changed.at_ms = T0;
    ev.provider_changed.view = v[1]; /* borrowed */
    char *line = event_line(&ev);
    cr_assert_str_eq(line, "14:13:20.000 provider_changed provider=relay health=ok in_flight=1 queued=0 "
                           "cluster_in_flight=1 cluster_queued=0\n");
    free(line);
    sl_proto_provider_view_free(&v[0]);
    sl_proto_provider_view_free(&v[1]);
}

static void
cluster_view(sl_proto_cluster_view_t *c, sl_proto_cluster_state_t state)
{
    memset(c, 0, sizeof *c);
    c->name = sl_xstrdup("prod");
    c->instance = sl_xstrdup("gw-a");
    c->state = state;
    c->instances = 2;
}

static sl_proto_instance_view_t *
instance_views(void)
{
    sl_proto_instance_view_t *v = sl_xcalloc(2, sizeof *v);
    v[0] = (sl_proto_instance_view_t){.self = true, .seen_ms = T0 - 400, .in_flight = 3, .queued = 0};
    v[0].name = sl_xstrdup("gw-a");
    v[1] = (sl_proto_instance_view_t){.seen_ms = T0 - 2900, .in_flight = 12, .queued = 4};
    v[1].name = sl_xstrdup("gw-bravo");
    return v;
}

Test(cli, instances_table_and_json)
{
    sl_proto_cluster_view_t c;
    cluster_view(&c, SL_PROTO_CLUSTER_STATE_JOINED);
    sl_proto_instance_view_t *v = instance_views();
    sl_strbuf_t b = {0};
    sl_cli_instances_table(&c, v, 2, T0, &b);
    char *t = text(&b);
    cr_assert_str_eq(t, "cluster prod: instance gw-a, joined, 2 live instances\n"
                        "NAME         IN-FLIGHT  QUEUED    SEEN\n"
                        "gw-a (this)          3       0  0s ago\n"
                        "gw-bravo            12       4  2s ago\n");
    free(t);

    /* a heartbeat from a clock a little ahead is "0s ago" */
    v[1].seen_ms = T0 + 300;
    c.state = SL_PROTO_CLUSTER_STATE_DEGRADED;
    c.instances = 1;
    sl_cli_instances_table(&c, v, 2, T0, &b);
    t = text(&b);
    cr_assert(strncmp(t, "cluster prod: instance gw-a, degraded, 1 live instance\n", 55) == 0, "%s", t);
    cr_assert(strstr(t, "gw-bravo            12       4  0s ago\n") != NULL, "%s", t);
    free(t);

    sl_cli_instances_json(&c, v, 2, &b);
    t = text(&b);
    cr_assert_str_eq(t, "{\"cluster\":{\"name\":\"prod\",\"instance\":\"gw-a\",\"state\":\"degraded\","
                        "\"instances\":1},\"instances\":[{\"name\":\"gw-a\",\"self\":true,\"seen_ms\":"
                        "1789999999600,\"in_flight\":3,\"queued\":0},{\"name\":\"gw-bravo\",\"self\":false,"
                        "\"seen_ms\":1790000000300,\"in_flight\":12,\"queued\":4}]}\n");
    free(t);

    /* no instances heard of yet (alone) */
    c.state = SL_PROTO_CLUSTER_STATE_ALONE;
    c.instances = 0;
    sl_cli_instances_json(&c, NULL, 0, &b);
    t = text(&b);
    cr_assert_str_eq(t, "{\"cluster\":{\"name\":\"prod\",\"instance\":\"gw-a\",\"state\":\"alone\","
                        "\"instances\":0},\"instances\":[]}\n");
    free(t);
    sl_cli_instances_table(&c, NULL, 0, T0, &b);
    t = text(&b);
    cr_assert_str_eq(t, "cluster prod: instance gw-a, alone, 0 live instances\n"
                        "NAME  IN-FLIGHT  QUEUED  SEEN\n");
    free(t);

    for (size_t i = 0; i < 2; i++)
        sl_proto_instance_view_free(&v[i]);
    free(v);
    sl_proto_cluster_view_free(&c);
}

Test(cli, ok_lines_of_instances)
{
    sl_cli_args_t a;
    char err[256];
    sl_proto_ok_msg_t ok;
    sl_strbuf_t out = {0}, errb = {0};
    char *o, *e;

    /* outside cluster mode: neither field */
    memset(&ok, 0, sizeof ok);
    cr_assert_eq(PARSE(&a, err, "instances"), 0, "%s", err);
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert_str_eq(o, "not in cluster mode\n");
    cr_assert_str_eq(e, "");
    free(o);
    free(e);
    cr_assert_eq(PARSE(&a, err, "instances", "--json"), 0, "%s", err);
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert_str_eq(o, "", "stdout stays empty: no JSON to read");
    cr_assert_str_eq(e, "not in cluster mode\n");
    free(o);
    free(e);

    ok.cluster = sl_xcalloc(1, sizeof *ok.cluster);
    cluster_view(ok.cluster, SL_PROTO_CLUSTER_STATE_JOINED);
    ok.has_instances = true;
    ok.instances = instance_views();
    ok.instances_len = 2;
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert(strncmp(o, "{\"cluster\":{\"name\":\"prod\",", 26) == 0, "%s", o);
    cr_assert_eq(count_lines(o), 1, "one JSON object: %s", o);
    cr_assert_str_eq(e, "");
    free(o);
    free(e);
    cr_assert_eq(PARSE(&a, err, "instances"), 0, "%s", err);
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert(strncmp(o, "cluster prod: instance gw-a, joined, 2 live instances\nNAME ", 58) == 0, "%s", o);
    cr_assert_eq(count_lines(o), 4, "%s", o);
    free(o);
    free(e);
    sl_proto_ok_msg_free(&ok);
}

Test(cli, ok_lines_of_providers_show_the_store)
{
    sl_cli_args_t a;
    char err[256];
    sl_proto_ok_msg_t ok;
    sl_strbuf_t out = {0}, errb = {0};
    char *o, *e;

    memset(&ok, 0, sizeof ok);
    ok.has_providers = true;
    ok.providers = sl_xcalloc(1, sizeof *ok.providers);
    ok.providers_len = 1;
    provider_view(&ok.providers[0]);
    cr_assert_eq(PARSE(&a, err, "providers"), 0, "%s", err);

    /* no store (an older gateway): the table alone */
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert_eq(count_lines(o), 2, "%s", o);
    cr_assert_null(strstr(o, "request DB"), "%s", o);
    free(o);
    free(e);

    ok.store = sl_xcalloc(1, sizeof *ok.store);
    ok.store->kind = SL_PROTO_STORE_KIND_SQLITE;
    ok.store->state = SL_PROTO_STORE_STATE_OK;
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert_eq(count_lines(o), 3, "%s", o);
    cr_assert(strstr(o, "\nrequest DB: sqlite, ok\n") != NULL, "%s", o);
    cr_assert_str_eq(e, "");
    free(o);
    free(e);

    ok.store->kind = SL_PROTO_STORE_KIND_POSTGRES;
    ok.store->state = SL_PROTO_STORE_STATE_DEGRADED;
    ok.store->reason = sl_xstrdup("connection refused");
    ok.store->has_spooled_rows = true;
    ok.store->spooled_rows = 120;
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert(strstr(o, "\nrequest DB: postgres, degraded (connection refused), 120 rows spooled\n") != NULL,
              "%s", o);
    free(o);
    free(e);

    ok.store->spooled_rows = 1;
    ok.store->has_spool_bytes = true;
    ok.store->spool_bytes = 812;
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert(
        strstr(o, "\nrequest DB: postgres, degraded (connection refused), 1 row spooled (812 bytes)\n") !=
            NULL,
        "%s", o);
    free(o);
    free(e);

    /* --json: the provider views alone, as before */
    cr_assert_eq(PARSE(&a, err, "providers", "--json"), 0, "%s", err);
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert_eq(count_lines(o), 1, "%s", o);
    cr_assert_null(strstr(o, "request DB"), "%s", o);
    free(o);
    free(e);
    sl_proto_ok_msg_free(&ok);
}

Test(cli, history_table)
{
    sl_proto_history_row_t r[2];
    memset(r, 0, sizeof r);
    r[0] = (sl_proto_history_row_t){.id = 100,
                                    .at_ms = T0,
                                    .status = 200,
                                    .duration_ms = 1234,
                                    .has_ttft_ms = true,
                                    .ttft_ms = 450,
                                    .has_cost_micros = true,
                                    .cost_micros = 8700};
    r[0].client = sl_xstrdup("alice");
    r[0].model = sl_xstrdup("claude-sonnet-4");
    r[0].provider = sl_xstrdup("anthropic");
    r[0].usage = sl_xcalloc(1, sizeof(sl_proto_usage_t));
    r[0].usage->input = 1200;
    r[0].usage->output = 340;
    r[1] = (sl_proto_history_row_t){.id = 101, .at_ms = T0 + 1000, .status = 429, .duration_ms = 80};
    r[1].client = sl_xstrdup("bob");
    r[1].model = sl_xstrdup("gpt-5");
    sl_strbuf_t b = {0};
    sl_cli_history_table(r, 2, &b);
    char *t = text(&b);
    cr_assert_str_eq(
        t, "TIME                  ID  CLIENT  MODEL            PROVIDER   STATUS  DURATION   TTFT    "
           "TOKENS     COST\n"
           "2026-09-21 14:13:20  100  alice   claude-sonnet-4  anthropic     200    1.234s  450ms  "
           "1200/340  $0.0087\n"
           "2026-09-21 14:13:21  101  bob     gpt-5            -             429      80ms      -  "
           "       -        -\n");
    free(t);

    /* a PostgreSQL request DB: an INSTANCE column, last, once some row has one ("-" for a row without) */
    r[0].instance = sl_xstrdup("gw-a");
    sl_cli_history_table(r, 2, &b);
    t = text(&b);
    cr_assert_str_eq(
        t, "TIME                  ID  CLIENT  MODEL            PROVIDER   STATUS  DURATION   TTFT    "
           "TOKENS     COST  INSTANCE\n"
           "2026-09-21 14:13:20  100  alice   claude-sonnet-4  anthropic     200    1.234s  450ms  "
           "1200/340  $0.0087  gw-a\n"
           "2026-09-21 14:13:21  101  bob     gpt-5            -             429      80ms      -  "
           "       -        -  -\n");
    free(t);
    sl_cli_history_json(&r[0], &b);
    t = text(&b);
    cr_assert(strstr(t, "\"attempts\":[],\"instance\":\"gw-a\"}\n") != NULL, "%s", t);
    free(t);
    sl_proto_history_row_free(&r[0]);
    sl_proto_history_row_free(&r[1]);
}

Test(cli, in_flight_line_shows_the_last_event)
{
    sl_proto_in_flight_request_t req = {.id = 17};
    req.events = sl_xcalloc(2, sizeof(sl_proto_event_t));
    req.events_len = 2;
    started_event(&req.events[0], 17, T0);
    retrying_event(&req.events[1]);
    sl_proto_in_flight_t f = {.now_ms = T0 + 3200, .requests = &req, .requests_len = 1};
    sl_strbuf_t b = {0};
    sl_cli_in_flight_lines(&f, &b);
    char *t = text(&b);
    cr_assert_str_eq(
        t, "id=17 client=alice model=claude-sonnet-4 age=3.200s last=14:13:20.121 request_retrying "
           "attempt=2 upstreams=anthropic,relay retry_at=14:13:21.621 until=14:15:20.121 cause=hint "
           "last_error=gw.upstream.overloaded\n");
    free(t);
    sl_proto_in_flight_request_free(&req);
}

Test(cli, error_reply_lists_every_problem)
{
    sl_proto_error_msg_t e;
    memset(&e, 0, sizeof e);
    e.req = 3;
    set_msg(&e.message, "config.rejected", "the configuration was rejected (2 problems)");
    e.has_problems = true;
    e.problems = sl_xcalloc(2, sizeof(sl_proto_msg_t));
    e.problems_len = 2;
    set_msg(&e.problems[0], "config.limit.measure", "providers[0].limits[0]: exactly one measure (line 12)");
    set_msg(&e.problems[1], "config.out_of_range", "failover.wait_secs: 900 is above 600 (line 30)");
    sl_strbuf_t b = {0};
    sl_cli_error_lines(&e, &b);
    char *t = text(&b);
    cr_assert_str_eq(t, "error: the configuration was rejected (2 problems) [config.rejected]\n"
                        "  providers[0].limits[0]: exactly one measure (line 12) [config.limit.measure]\n"
                        "  failover.wait_secs: 900 is above 600 (line 30) [config.out_of_range]\n");
    free(t);
    sl_proto_error_msg_free(&e);

    sl_proto_refused_msg_t r;
    memset(&r, 0, sizeof r);
    set_msg(&r.message, "control.protocol.mismatch", "the server speaks control protocol 2, the client 1");
    sl_cli_refused_line(&r, &b);
    t = text(&b);
    cr_assert_str_eq(
        t, "refused: the server speaks control protocol 2, the client 1 [control.protocol.mismatch]\n");
    free(t);
    sl_proto_refused_msg_free(&r);
}

Test(cli, ok_lines_of_config_get_and_limits)
{
    sl_cli_args_t a;
    char err[256];
    sl_proto_ok_msg_t ok;
    memset(&ok, 0, sizeof ok);
    ok.yaml = sl_xstrdup("version: 1");
    ok.has_revision = true;
    ok.revision = 12;
    ok.has_persisted = true;
    ok.persisted = true;
    cr_assert_eq(PARSE(&a, err, "config", "get"), 0, "%s", err);
    sl_strbuf_t out = {0}, errb = {0};
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    char *o = text(&out), *e = text(&errb);
    cr_assert_str_eq(o, "version: 1\n", "the yaml on stdout, with its last newline");
    cr_assert_str_eq(e, "revision 12\n", "the revision on stderr");
    free(o);
    free(e);
    sl_proto_ok_msg_free(&ok);

    memset(&ok, 0, sizeof ok);
    cr_assert_eq(PARSE(&a, err, "limits", "set", "--client", "alice", "--per", "minute", "--requests", "30",
                       "--per", "day", "--cost", "20"),
                 0, "%s", err);
    sl_cli_ok_lines(&a, &ok, T0, &out, &errb);
    o = text(&out);
    e = text(&errb);
    cr_assert_str_eq(o, "limits of client alice set: 30 requests per minute, $20.00 per day\n");
    cr_assert_str_eq(e, "");
    free(o);
    free(e);
}

/* ---- the event stream ---------------------------------------------------------------------------- */

static sl_proto_snapshot_msg_t
snapshot(uint64_t seq, size_t nevents)
{
    sl_proto_snapshot_msg_t s;
    memset(&s, 0, sizeof s);
    s.now_ms = T0 + 5000;
    s.seq = seq;
    s.in_flight = sl_xcalloc(1, sizeof(sl_proto_in_flight_request_t));
    s.in_flight_len = 1;
    s.in_flight[0].id = 17;
    s.in_flight[0].events = sl_xcalloc(nevents, sizeof(sl_proto_event_t));
    s.in_flight[0].events_len = nevents;
    for (size_t i = 0; i < nevents; i++)
        headers_event(&s.in_flight[0].events[i], 17, T0 + i); /* at_ms tells them apart */
    started_event(&s.in_flight[0].events[0], 17, T0);
    return s;
}

Test(cli, stream_replays_then_resyncs_without_repeating)
{
    sl_cli_stream_t st = {0};
    sl_strbuf_t out = {0}, err = {0};

    /* an event before the first snapshot is ignored: the snapshot reflects it */
    sl_proto_event_msg_t early = {.seq = 1};
    headers_event(&early.event, 17, T0);
    sl_cli_stream_event(&st, &early, &out, &err);
    cr_assert_eq(out.len, 0);
    sl_proto_event_msg_free(&early);

    sl_proto_snapshot_msg_t s1 = snapshot(5, 2);
    sl_cli_stream_snapshot(&st, &s1, &out, &err);
    char *o = text(&out);
    cr_assert_eq(count_lines(o), 2, "the in-flight request's 2 events are replayed:\n%s", o);
    cr_assert(strstr(o, "request_started id=17") != NULL);
    free(o);

    sl_proto_event_msg_t ev = {.seq = 6};
    headers_event(&ev.event, 17, T0 + 2);
    sl_cli_stream_event(&st, &ev, &out, &err);
    sl_proto_event_msg_free(&ev);
    o = text(&out);
    cr_assert_str_eq(o, "14:13:20.002 request_headers id=17 status=200 ttfb=300ms\n");
    free(o);
    cr_assert_eq(err.len, 0);

    sl_cli_stream_dropped(&st, 4, &err);
    char *e = text(&err);
    cr_assert(strstr(e, "dropped 4 events") != NULL, "%s", e);
    free(e);
    /* between the drop and the new snapshot: ignored */
    ev = (sl_proto_event_msg_t){.seq = 11};
    headers_event(&ev.event, 17, T0 + 3);
    sl_cli_stream_event(&st, &ev, &out, &err);
    sl_proto_event_msg_free(&ev);
    cr_assert_eq(out.len, 0);

    /* the new snapshot holds 5 events of request 17, 3 of them shown already */
    sl_proto_snapshot_msg_t s2 = snapshot(20, 5);
    sl_cli_stream_snapshot(&st, &s2, &out, &err);
    o = text(&out);
    cr_assert_str_eq(o, "14:13:20.003 request_headers id=17 status=200 ttfb=300ms\n"
                        "14:13:20.004 request_headers id=17 status=200 ttfb=300ms\n");
    free(o);

    /* a gap in seq is noted */
    ev = (sl_proto_event_msg_t){.seq = 23};
    headers_event(&ev.event, 17, T0 + 5);
    sl_cli_stream_event(&st, &ev, &out, &err);
    sl_proto_event_msg_free(&ev);
    e = text(&err);
    cr_assert_str_eq(e, "sluicectl: events 21 to 22 are missing from the stream\n");
    free(e);
    free(text(&out));
    cr_assert_eq(st.printed, 6);

    sl_proto_snapshot_msg_free(&s1);
    sl_proto_snapshot_msg_free(&s2);
    sl_cli_stream_free(&st);
}

Test(cli, stream_stops_after_count_and_prints_json)
{
    sl_cli_stream_t st = {.json = true, .max_events = 3};
    sl_strbuf_t out = {0}, err = {0};
    sl_proto_snapshot_msg_t s = snapshot(0, 2);
    sl_cli_stream_snapshot(&st, &s, &out, &err);
    cr_assert(!sl_cli_stream_done(&st));
    for (uint64_t i = 1; i <= 3; i++) {
        sl_proto_event_msg_t ev = {.seq = i};
        headers_event(&ev.event, 17, T0 + 10 + i);
        sl_cli_stream_event(&st, &ev, &out, &err);
        sl_proto_event_msg_free(&ev);
    }
    cr_assert(sl_cli_stream_done(&st));
    char *o = text(&out);
    cr_assert_eq(count_lines(o), 3, "%s", o);
    cr_assert(strncmp(o, "{\"kind\":\"request_started\",\"at_ms\":1790000000000,\"id\":17,", 56) == 0, "%s",
              o);
    cr_assert(strstr(o, "{\"kind\":\"request_headers\",\"at_ms\":1790000000011,\"id\":17,\"status\":200,"
                        "\"ttfb_ms\":300}\n") != NULL,
              "%s", o);
    cr_assert(strstr(o, "1790000000012") == NULL, "an event past --count was printed");
    free(o);
    free(text(&err));
    sl_proto_snapshot_msg_free(&s);
    sl_cli_stream_free(&st);
}

static const char sample_metrics[] =
    "# HELP sluice_requests_total x\n# TYPE sluice_requests_total counter\n"
    "sluice_requests_total{dialect=\"openai-chat\",route=\"gpt-*\",status_class=\"2xx\"} 9\n"
    "sluice_requests_total{dialect=\"openai-chat\",route=\"gpt-*\",status_class=\"429\"} 1\n"
    "sluice_requests_rescued_total{route=\"gpt-*\",cause=\"failed_over\"} 3\n"
    "sluice_requests_rescued_total{route=\"gpt-*\",cause=\"queued_429\"} 1\n"
    "sluice_requests_lost_to_trouble_total{route=\"gpt-*\",cause=\"queued_429\"} 1\n"
    "sluice_upstream_attempts_total{provider=\"primary\",outcome=\"ok\"} 6\n"
    "sluice_upstream_attempts_total{provider=\"primary\",outcome=\"temporary\"} 3\n"
    "sluice_upstream_attempts_total{provider=\"primary\",outcome=\"rate_limited\"} 2\n"
    "sluice_upstream_health{provider=\"primary\"} 2\n"
    "sluice_upstream_health{provider=\"fallback\"} 0\n";

Test(cli, metrics_summary_text)
{
    sl_strbuf_t b = {0};
    sl_cli_metrics_text(sample_metrics, &b);
    char *t = sl_strbuf_finish(&b);
    cr_assert_str_eq(t, "requests answered: 10\n"
                        "trouble absorbed:  80.0% rescued\n"
                        "  rescued: 4 (failed_over 3, queued_429 1)\n"
                        "  lost:    1 (queued_429 1)\n"
                        "\n"
                        "ROUTE                      RESCUED      LOST  SHARE\n"
                        "gpt-*                            4         1  80.0% rescued\n"
                        "\n"
                        "PROVIDER                 BREAKER          OK    FAILED       429     OTHER\n"
                        "primary                  open              6         3         2         0\n"
                        "fallback                 ok                0         0         0         0\n");
    free(t);
}

Test(cli, metrics_summary_json_and_no_trouble)
{
    sl_strbuf_t b = {0};
    sl_cli_metrics_json(sample_metrics, &b);
    char *t = sl_strbuf_finish(&b);
    cr_assert_not_null(strstr(t, "{\"requests\":10,\"rescued\":4,\"lost\":1,\"share\":0.8"), "%s", t);
    cr_assert_not_null(strstr(t, "\"primary\":{\"breaker\":\"open\",\"attempts\":{\"ok\":6,\"temporary\":3,"
                                 "\"rate_limited\":2}}"),
                       "%s", t);
    free(t);
    sl_strbuf_t e = {0};
    sl_cli_metrics_text("# nothing yet\n", &e);
    t = sl_strbuf_finish(&e);
    cr_assert_str_eq(
        t, "requests answered: 0\ntrouble absorbed:  no trouble met yet\n  rescued: 0\n  lost:    0\n");
    free(t);
}
