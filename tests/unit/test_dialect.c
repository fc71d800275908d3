/*
 * The dialects' wire helpers: client keys, base URLs, upstream heads, the
 * errors and keep-alives the gateway writes (formats.md, config.md,
 * behaviour.md §4 and §9).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dialect.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define H(n, v)                                                                                              \
    {                                                                                                        \
        n, sizeof(n) - 1, v, sizeof(v) - 1                                                                   \
    }
#define MAX_HEADERS 24

static const char *const dialect_names[SL_DIALECT_COUNT] = {"anthropic", "openai-chat", "openai-responses",
                                                            "gemini", "bedrock"};

/* ---- the table itself -------------------------------------------------------------------------- */

Test(dialect_table, every_dialect_fills_every_row)
{
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        const sl_dialect_def_t *def = sl_dialect_def((sl_dialect_t)d);
        cr_assert_eq(def->id, (sl_dialect_t)d, "%s", dialect_names[d]);
        cr_assert_gt(def->n_key_places, 0);
        cr_assert_leq(def->n_key_places, SL_DIALECT_MAX_KEY_PLACES);
        cr_assert_not_null(def->credential_header);
        cr_assert_not_null(def->credential_scheme);
        cr_assert_not_null(def->stream_content_type);
        cr_assert_not_null(def->keep_alive);
        cr_assert_not_null(def->do_render_error);
        cr_assert((def->do_render_stream_error != NULL) != (def->stream_error_prefix != NULL),
                  "%s: an in-stream error is either the whole error behind a prefix or its own shape",
                  dialect_names[d]);
        cr_assert_not_null(def->key_hint);
        cr_assert_not_null(def->estimate_format);
        cr_assert(strstr(def->estimate_format, "%lld") != NULL, "%s", dialect_names[d]);
        /* SSE dialects classify events; Bedrock alone frames eventstream (its stream row is NULL). */
        cr_assert_eq(def->stream == NULL, d == SL_DIALECT_BEDROCK, "%s", dialect_names[d]);
        for (int k = 0; k < SL_ERROR_KIND_COUNT; k++)
            cr_assert_not_null(def->error_types[k], "%s kind %d", dialect_names[d], k);
    }
}

/* ---- the client's key -------------------------------------------------------------------------- */

typedef struct {
    const char *rule;
    sl_dialect_t dialect;
    sl_header_t headers[4];
    size_t n_headers;
    const char *query;
    sl_key_status_t status;
    const char *key;
} key_case_t;

static const key_case_t key_cases[] = {
    {"anthropic x-api-key", SL_DIALECT_ANTHROPIC, {H("x-api-key", "gw-1")}, 1, NULL, SL_KEY_FOUND, "gw-1"},
    {"anthropic bearer (SDK 1.x)",
     SL_DIALECT_ANTHROPIC,
     {H("authorization", "Bearer gw-2")},
     1,
     NULL,
     SL_KEY_FOUND,
     "gw-2"},
    {"anthropic x-api-key wins over bearer",
     SL_DIALECT_ANTHROPIC,
     {H("Authorization", "Bearer gw-b"), H("X-Api-Key", "gw-x")},
     2,
     NULL,
     SL_KEY_FOUND,
     "gw-x"},
    {"anthropic empty x-api-key falls through to bearer",
     SL_DIALECT_ANTHROPIC,
     {H("x-api-key", "  "), H("authorization", "Bearer gw-b")},
     2,
     NULL,
     SL_KEY_FOUND,
     "gw-b"},
    {"bearer scheme is case-insensitive, spaces trimmed",
     SL_DIALECT_ANTHROPIC,
     {H("authorization", " bEaReR \t gw-3  ")},
     1,
     NULL,
     SL_KEY_FOUND,
     "gw-3"},
    {"anthropic without key",
     SL_DIALECT_ANTHROPIC,
     {H("anthropic-version", "2023-06-01")},
     1,
     NULL,
     SL_KEY_ABSENT,
     NULL},
    {"basic auth is not a key",
     SL_DIALECT_ANTHROPIC,
     {H("authorization", "Basic Z3c6eA==")},
     1,
     NULL,
     SL_KEY_MALFORMED,
     NULL},
    {"bearer without token",
     SL_DIALECT_ANTHROPIC,
     {H("authorization", "Bearer")},
     1,
     NULL,
     SL_KEY_MALFORMED,
     NULL},
    {"bearer glued to token",
     SL_DIALECT_ANTHROPIC,
     {H("authorization", "Bearergw-4")},
     1,
     NULL,
     SL_KEY_MALFORMED,
     NULL},
    {"key with a space inside",
     SL_DIALECT_OPENAI_CHAT,
     {H("authorization", "Bearer gw 5")},
     1,
     NULL,
     SL_KEY_MALFORMED,
     NULL},
    {"openai bearer",
     SL_DIALECT_OPENAI_CHAT,
     {H("authorization", "Bearer sk-gw")},
     1,
     NULL,
     SL_KEY_FOUND,
     "sk-gw"},
    {"openai ignores x-api-key",
     SL_DIALECT_OPENAI_CHAT,
     {H("x-api-key", "gw-1")},
     1,
     NULL,
     SL_KEY_ABSENT,
     NULL},
    {"responses bearer",
     SL_DIALECT_OPENAI_RESPONSES,
     {H("authorization", "Bearer r-1")},
     1,
     NULL,
     SL_KEY_FOUND,
     "r-1"},
    {"gemini header",
     SL_DIALECT_GEMINI,
     {H("x-goog-api-key", "AIza-gw")},
     1,
     "alt=sse",
     SL_KEY_FOUND,
     "AIza-gw"},
    {"gemini query", SL_DIALECT_GEMINI, {H("accept", "*/*")}, 1, "alt=sse&key=q-1", SL_KEY_FOUND, "q-1"},
    {"gemini header wins over query",
     SL_DIALECT_GEMINI,
     {H("x-goog-api-key", "h-1")},
     1,
     "key=q-1",
     SL_KEY_FOUND,
     "h-1"},
    {"gemini query key is %-decoded", SL_DIALECT_GEMINI, {{0}}, 0, "%6Bey=a%2Bb%2fc", SL_KEY_FOUND, "a+b/c"},
    {"gemini broken escape", SL_DIALECT_GEMINI, {{0}}, 0, "key=ab%2", SL_KEY_MALFORMED, NULL},
    {"gemini escaped control byte", SL_DIALECT_GEMINI, {{0}}, 0, "key=a%0Ab", SL_KEY_MALFORMED, NULL},
    {"gemini empty key then a real one", SL_DIALECT_GEMINI, {{0}}, 0, "key=&key=q-2", SL_KEY_FOUND, "q-2"},
    {"gemini other parameters are not keys",
     SL_DIALECT_GEMINI,
     {{0}},
     0,
     "apikey=x&keys=y&alt=sse",
     SL_KEY_ABSENT,
     NULL},
    {"gemini ignores bearer",
     SL_DIALECT_GEMINI,
     {H("authorization", "Bearer b-1")},
     1,
     NULL,
     SL_KEY_ABSENT,
     NULL},
    {"bedrock bearer",
     SL_DIALECT_BEDROCK,
     {H("authorization", "Bearer br-1")},
     1,
     NULL,
     SL_KEY_FOUND,
     "br-1"},
    {"bedrock ignores the query", SL_DIALECT_BEDROCK, {{0}}, 0, "key=q", SL_KEY_ABSENT, NULL},
};

Test(client_key, each_dialect_reads_its_own_places_in_order)
{
    for (size_t i = 0; i < N(key_cases); i++) {
        const key_case_t *c = &key_cases[i];
        sl_header_array_t arr = {c->headers, c->n_headers};
        sl_headers_t hs = sl_headers_of_array(&arr);
        char out[SL_CLIENT_KEY_MAX];
        size_t out_len = 12345;
        memset(out, 'Z', sizeof(out));
        sl_key_status_t st =
            sl_dialect_client_key(c->dialect, &hs, c->query, c->query ? strlen(c->query) : 0, out, &out_len);
        cr_assert_eq(st, c->status, "%s: status %d", c->rule, st);
        if (st == SL_KEY_FOUND) {
            cr_assert_str_eq(out, c->key, "%s", c->rule);
            cr_assert_eq(out_len, strlen(c->key), "%s", c->rule);
        } else {
            cr_assert_eq(out_len, 12345, "%s: length untouched", c->rule);
            cr_assert_eq(out[0], 'Z', "%s: key untouched", c->rule);
        }
    }
}

Test(client_key, longer_than_the_bound_is_malformed)
{
    static char value[SL_CLIENT_KEY_MAX + 16];
    memcpy(value, "Bearer ", 7);
    memset(value + 7, 'k', SL_CLIENT_KEY_MAX);
    sl_header_t h = {"authorization", 13, value, 7 + SL_CLIENT_KEY_MAX};
    sl_header_array_t arr = {&h, 1};
    sl_headers_t hs = sl_headers_of_array(&arr);
    char out[SL_CLIENT_KEY_MAX];
    size_t len;
    cr_assert_eq(sl_dialect_client_key(SL_DIALECT_BEDROCK, &hs, NULL, 0, out, &len), SL_KEY_MALFORMED);
    h.value_len = 7 + SL_CLIENT_KEY_MAX - 1;
    cr_assert_eq(sl_dialect_client_key(SL_DIALECT_BEDROCK, &hs, NULL, 0, out, &len), SL_KEY_FOUND);
    cr_assert_eq(len, SL_CLIENT_KEY_MAX - 1);
}

Test(client_key, the_query_length_bounds_the_scan)
{
    static const char query[] = "key=ab%2F";
    sl_header_array_t arr = {NULL, 0};
    sl_headers_t hs = sl_headers_of_array(&arr);
    char out[SL_CLIENT_KEY_MAX];
    size_t len;
    cr_assert_eq(sl_dialect_client_key(SL_DIALECT_GEMINI, &hs, query, sizeof(query) - 2, out, &len),
                 SL_KEY_MALFORMED, "a %-escape cut by the length is broken");
    cr_assert_eq(sl_dialect_client_key(SL_DIALECT_GEMINI, &hs, query, sizeof(query) - 1, out, &len),
                 SL_KEY_FOUND);
    cr_assert_str_eq(out, "ab/");
}

Test(headers, find_is_case_insensitive_and_takes_the_first)
{
    sl_header_t items[] = {H("Accept", "a"), H("x-api-keyX", "no"), H("X-API-KEY", "one"),
                           H("x-api-key", "two")};
    sl_header_array_t arr = {items, N(items)};
    sl_headers_t hs = sl_headers_of_array(&arr);
    const char *v = NULL;
    size_t n = 0;
    cr_assert(sl_headers_find(&hs, "x-api-key", &v, &n));
    cr_assert_eq(n, 3);
    cr_assert_eq(memcmp(v, "one", 3), 0);
    v = "untouched";
    cr_assert_not(sl_headers_find(&hs, "x-api", &v, &n));
    cr_assert_str_eq(v, "untouched");
}

/* ---- paths without keys ------------------------------------------------------------------------ */

Test(strip_key, key_parameters_never_reach_logs)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"/v1beta/models/m:streamGenerateContent?alt=sse&key=AIzaSECRET",
         "/v1beta/models/m:streamGenerateContent?alt=sse"},
        {"/v1beta/models/m:generateContent?key=AIzaSECRET", "/v1beta/models/m:generateContent"},
        {"/p?key=S&alt=sse", "/p?alt=sse"},
        {"/p?%6Bey=S&%6b%65%79=T", "/p"},
        {"/p?keys=1&apikey=2&key", "/p?keys=1&apikey=2"},
        {"/p?a=1&&key=2&b=3", "/p?a=1&b=3"},
        {"/p?", "/p"},
        {"/v1/messages", "/v1/messages"},
        {"/v1/messages?beta=true", "/v1/messages?beta=true"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_strbuf_t b = {0};
        sl_path_strip_key(cases[i].in, strlen(cases[i].in), &b);
        char *s = sl_strbuf_finish(&b);
        cr_assert_str_eq(s, cases[i].out, "%s", cases[i].in);
        free(s);
        /* A path the stripping leaves as it is needs none: only one with a query may change. */
        if (!sl_path_has_query(cases[i].in, strlen(cases[i].in)))
            cr_assert_str_eq(cases[i].in, cases[i].out, "%s", cases[i].in);
    }
    cr_assert(sl_path_has_query("/p?", 3));
    cr_assert_not(sl_path_has_query("/p?", 2), "only the first len bytes count");
}

/* ---- base URLs --------------------------------------------------------------------------------- */

typedef struct {
    const char *url;
    bool is_tls;
    const char *host;
    uint16_t port;
    bool port_is_default;
    const char *prefix;
} url_case_t;

Test(base_url, parses_scheme_host_port_and_prefix)
{
    static const url_case_t good[] = {
        {"https://api.anthropic.com", true, "api.anthropic.com", 443, true, ""},
        {"https://api.openai.com/v1", true, "api.openai.com", 443, true, "/v1"},
        {"http://127.0.0.1:8080/relay/", false, "127.0.0.1", 8080, false, "/relay"},
        {"https://relay.example:443/a/b//", true, "relay.example", 443, true, "/a/b"},
        {"https://relay.example:80/", true, "relay.example", 80, false, ""},
        {"http://relay.example:443", false, "relay.example", 443, false, ""},
        {"http://[::1]:9000", false, "::1", 9000, false, ""},
        {"https://[2001:db8::1]/v1", true, "2001:db8::1", 443, true, "/v1"},
        {"HTTPS://Example.COM", true, "Example.COM", 443, true, ""},
        {"http://h:", false, "h", 80, true, ""},
        {"http://h:65535", false, "h", 65535, false, ""},
    };
    for (size_t i = 0; i < N(good); i++) {
        sl_base_url_t u;
        cr_assert_eq(sl_base_url_parse(good[i].url, &u), 0, "%s", good[i].url);
        cr_assert_eq(u.is_tls, good[i].is_tls, "%s", good[i].url);
        cr_assert_eq(u.host_len, strlen(good[i].host), "%s", good[i].url);
        cr_assert_eq(memcmp(u.host, good[i].host, u.host_len), 0, "%s", good[i].url);
        cr_assert_eq(u.port, good[i].port, "%s", good[i].url);
        cr_assert_eq(u.port_is_default, good[i].port_is_default, "%s", good[i].url);
        cr_assert_eq(u.path_prefix_len, strlen(good[i].prefix), "%s", good[i].url);
        cr_assert_eq(memcmp(u.path_prefix, good[i].prefix, u.path_prefix_len), 0, "%s", good[i].url);
    }
}

Test(base_url, refuses_what_cannot_be_a_base_and_leaves_out_alone)
{
    static const char *const bad[] = {
        "api.anthropic.com",
        "ftp://h",
        "https://",
        "https:///v1",
        "https://:80",
        "https://u:p@h",
        "https://h?x=1",
        "https://h/v1?x=1",
        "https://h/v1#f",
        "https://[::1",
        "https://[]/",
        "https://[::1]x",
        "https://[example.com]/",
        "https://h:0",
        "https://h:65536",
        "https://h:8o",
        "https://h:99999999999",
        "https://h x",
        "https://h/a b",
        "https://h/a\x01",
        "https://h%41",
        "https://h/\x7f",
        "",
    };
    for (size_t i = 0; i < N(bad); i++) {
        sl_base_url_t u, before;
        memset(&u, 0xa5, sizeof(u));
        memcpy(&before, &u, sizeof(u));
        cr_assert_eq(sl_base_url_parse(bad[i], &u), -1, "%s", bad[i]);
        cr_assert_eq(memcmp(&u, &before, sizeof(u)), 0, "%s: out untouched", bad[i]);
    }
}

/* ---- upstream heads ---------------------------------------------------------------------------- */

/* What a client sends besides what may pass: hop-by-hop, credentials, its own encodings. */
static const sl_header_t noisy_client[] = {
    H("host", "localhost:8080"),
    H("x-api-key", "client-gw-key"),
    H("Authorization", "Bearer client-gw-key"),
    H("x-goog-api-key", "client-gw-key"),
    H("connection", "keep-alive"),
    H("keep-alive", "timeout=5"),
    H("te", "trailers"),
    H("trailer", "x-foo"),
    H("transfer-encoding", "chunked"),
    H("upgrade", "h2c"),
    H("proxy-authorization", "Basic eA=="),
    H("proxy-connection", "keep-alive"),
    H("content-length", "999"),
    H("accept-encoding", "zstd, gzip"),
    H("x-claude-code-session-id", "sess-1"),
    H("cookie", "a=b"),
    H("content", "prefix-of-an-allowed-name"),
    H("user-agent-x", "extends-an-allowed-name"),
};

typedef struct {
    const char *rule;
    sl_dialect_t protocol;
    const char *base_url;
    const char *key;
    sl_pair_t provider_headers[4];
    size_t n_provider_headers;
    const char *method, *target, *model;
    sl_header_t client[8]; /* followed by noisy_client */
    size_t n_client;
    uint64_t body_len;
    const char *head;
    sl_upstream_auth_t auth;
    const char *upstream_target;
} head_case_t;

static const head_case_t head_cases[] = {
    {
        "anthropic keeps ?beta=true and passes its allowlist in order",
        SL_DIALECT_ANTHROPIC,
        "https://api.anthropic.com",
        "sk-ant-UP",
        {{0}},
        0,
        "POST",
        "/v1/messages?beta=true",
        "claude-sonnet-4-20250514",
        {H("anthropic-version", "2023-06-01"), H("anthropic-beta", "a-1"),
         H("Content-Type", "application/json"), H("anthropic-beta", "b-2"), H("user-agent", "claude-cli/2.1"),
         H("accept", "application/json")},
        6,
        42,
        "POST /v1/messages?beta=true HTTP/1.1\r\n"
        "host: api.anthropic.com\r\n"
        "content-length: 42\r\n"
        "x-api-key: sk-ant-UP\r\n"
        "accept-encoding: identity\r\n"
        "anthropic-version: 2023-06-01\r\n"
        "anthropic-beta: a-1\r\n"
        "content-type: application/json\r\n"
        "anthropic-beta: b-2\r\n"
        "user-agent: claude-cli/2.1\r\n"
        "accept: application/json\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/v1/messages?beta=true",
    },
    {
        "a relay keeps its path prefix and non-default port; provider headers come last and replace",
        SL_DIALECT_ANTHROPIC,
        "http://relay.example:8443/anthropic/",
        "relay-key",
        {{"x-relay-team", "infra"}, {"User-Agent", "sluice-relay"}},
        2,
        "POST",
        "/v1/messages/count_tokens",
        NULL,
        {H("user-agent", "claude-cli/2.1"), H("anthropic-version", "2023-06-01")},
        2,
        7,
        "POST /anthropic/v1/messages/count_tokens HTTP/1.1\r\n"
        "host: relay.example:8443\r\n"
        "content-length: 7\r\n"
        "x-api-key: relay-key\r\n"
        "accept-encoding: identity\r\n"
        "anthropic-version: 2023-06-01\r\n"
        "x-relay-team: infra\r\n"
        "User-Agent: sluice-relay\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/anthropic/v1/messages/count_tokens",
    },
    {
        "anthropic GET without key: no content-length, no credential",
        SL_DIALECT_ANTHROPIC,
        "https://api.anthropic.com",
        NULL,
        {{0}},
        0,
        "GET",
        "/v1/models",
        NULL,
        {H("anthropic-version", "2023-06-01")},
        1,
        0,
        "GET /v1/models HTTP/1.1\r\n"
        "host: api.anthropic.com\r\n"
        "accept-encoding: identity\r\n"
        "anthropic-version: 2023-06-01\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_NONE,
        "/v1/models",
    },
    {
        "openai chat: the base URL carries /v1",
        SL_DIALECT_OPENAI_CHAT,
        "https://api.openai.com/v1",
        "sk-proj-UP",
        {{0}},
        0,
        "POST",
        "/v1/chat/completions",
        "gpt-x",
        {H("content-type", "application/json"), H("user-agent", "OpenAI/JS 7.59")},
        2,
        1234,
        "POST /v1/chat/completions HTTP/1.1\r\n"
        "host: api.openai.com\r\n"
        "content-length: 1234\r\n"
        "authorization: Bearer sk-proj-UP\r\n"
        "accept-encoding: identity\r\n"
        "content-type: application/json\r\n"
        "user-agent: OpenAI/JS 7.59\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/v1/chat/completions",
    },
    {
        "openai responses through a relay whose own auth header replaces the key",
        SL_DIALECT_OPENAI_RESPONSES,
        "https://relay.example/openai/v1/",
        "sk-unused",
        {{"Authorization", "Bearer relay-token"}},
        1,
        "POST",
        "/v1/responses",
        "gpt-x",
        {H("openai-beta", "responses=v1"), H("accept", "text/event-stream")},
        2,
        10,
        "POST /openai/v1/responses HTTP/1.1\r\n"
        "host: relay.example\r\n"
        "content-length: 10\r\n"
        "accept-encoding: identity\r\n"
        "openai-beta: responses=v1\r\n"
        "accept: text/event-stream\r\n"
        "Authorization: Bearer relay-token\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/openai/v1/responses",
    },
    {
        "gemini puts the upstream model in the path, keeps alt=sse, drops the client's key",
        SL_DIALECT_GEMINI,
        "https://generativelanguage.googleapis.com",
        "AIza-UP",
        {{0}},
        0,
        "POST",
        "/v1beta/models/gemini-flash:streamGenerateContent?key=AIza-CLIENT&alt=sse&%6Bey=x",
        "gemini-2.5-flash",
        {H("x-goog-api-client", "google-genai-sdk/1.30.0 gl-node/v22"),
         H("content-type", "application/json")},
        2,
        99,
        "POST /v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse HTTP/1.1\r\n"
        "host: generativelanguage.googleapis.com\r\n"
        "content-length: 99\r\n"
        "x-goog-api-key: AIza-UP\r\n"
        "accept-encoding: identity\r\n"
        "x-goog-api-client: google-genai-sdk/1.30.0 gl-node/v22\r\n"
        "content-type: application/json\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    },
    {
        "gemini v1 (@google/genai 3.x) keeps the client's version behind a relay's path prefix",
        SL_DIALECT_GEMINI,
        "https://relay.example/google",
        "AIza-UP",
        {{0}},
        0,
        "POST",
        "/v1/models/gemini-flash:streamGenerateContent?alt=sse",
        "gemini-2.5-flash",
        {{0}},
        0,
        2,
        "POST /google/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse HTTP/1.1\r\n"
        "host: relay.example\r\n"
        "content-length: 2\r\n"
        "x-goog-api-key: AIza-UP\r\n"
        "accept-encoding: identity\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/google/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    },
    {
        "gemini v1alpha keeps its version",
        SL_DIALECT_GEMINI,
        "https://generativelanguage.googleapis.com",
        "AIza-UP",
        {{0}},
        0,
        "POST",
        "/v1alpha/models/gemini-pro:generateContent",
        NULL,
        {{0}},
        0,
        2,
        "POST /v1alpha/models/gemini-pro:generateContent HTTP/1.1\r\n"
        "host: generativelanguage.googleapis.com\r\n"
        "content-length: 2\r\n"
        "x-goog-api-key: AIza-UP\r\n"
        "accept-encoding: identity\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/v1alpha/models/gemini-pro:generateContent",
    },
    {
        "gemini without a model rewrite keeps the client's",
        SL_DIALECT_GEMINI,
        "https://generativelanguage.googleapis.com/",
        "AIza-UP",
        {{0}},
        0,
        "POST",
        "/v1beta/models/gemini-pro:countTokens",
        NULL,
        {{0}},
        0,
        2,
        "POST /v1beta/models/gemini-pro:countTokens HTTP/1.1\r\n"
        "host: generativelanguage.googleapis.com\r\n"
        "content-length: 2\r\n"
        "x-goog-api-key: AIza-UP\r\n"
        "accept-encoding: identity\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/v1beta/models/gemini-pro:countTokens",
    },
    {
        "bedrock with an API key: bearer, model id encoded as one segment",
        SL_DIALECT_BEDROCK,
        "https://bedrock-runtime.us-east-1.amazonaws.com",
        "ABSK-UP",
        {{0}},
        0,
        "POST",
        "/model/claude%3A0/converse-stream",
        "us.anthropic.claude-3-7-sonnet-20250219-v1:0",
        {H("content-type", "application/json")},
        1,
        5,
        "POST /model/us.anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse-stream HTTP/1.1\r\n"
        "host: bedrock-runtime.us-east-1.amazonaws.com\r\n"
        "content-length: 5\r\n"
        "authorization: Bearer ABSK-UP\r\n"
        "accept-encoding: identity\r\n"
        "content-type: application/json\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/model/us.anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse-stream",
    },
    {
        "bedrock without a key leaves the head for SigV4",
        SL_DIALECT_BEDROCK,
        "http://[::1]:9000/br",
        NULL,
        {{0}},
        0,
        "POST",
        "/model/m/converse",
        "arn:aws:bedrock:us-east-1:1:inference-profile/x y",
        {{0}},
        0,
        3,
        "POST /br/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx%20y/converse HTTP/1.1\r\n"
        "host: [::1]:9000\r\n"
        "content-length: 3\r\n"
        "accept-encoding: identity\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_SIGV4_PENDING,
        "/br/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx%20y/converse",
    },
    {
        "provider headers cannot replace framing or accept-encoding",
        SL_DIALECT_OPENAI_CHAT,
        "https://api.openai.com/v1",
        "sk-UP",
        {{"Host", "evil"}, {"content-length", "1"}, {"Accept-Encoding", "gzip"}, {"Proxy-Foo", "x"}},
        4,
        "POST",
        "/v1/chat/completions",
        NULL,
        {H("accept", "a\r\nx-injected: 1"), H("user-agent", "ok\ttab")},
        2,
        1,
        "POST /v1/chat/completions HTTP/1.1\r\n"
        "host: api.openai.com\r\n"
        "content-length: 1\r\n"
        "authorization: Bearer sk-UP\r\n"
        "accept-encoding: identity\r\n"
        "user-agent: ok\ttab\r\n"
        "\r\n",
        SL_UPSTREAM_AUTH_HEADER,
        "/v1/chat/completions",
    },
};

static sl_provider_t
make_provider(sl_dialect_t protocol, const char *base_url, const char *key, const sl_pair_t *headers,
              size_t n)
{
    return (sl_provider_t){.name = "p",
                           .protocol = protocol,
                           .base_url = (char *)base_url,
                           .key = (char *)key,
                           .headers = (sl_pair_t *)headers,
                           .n_headers = n};
}

Test(upstream_head, exact_bytes_per_dialect)
{
    for (size_t i = 0; i < N(head_cases); i++) {
        const head_case_t *c = &head_cases[i];
        sl_header_t all[MAX_HEADERS];
        size_t n = 0;
        for (size_t k = 0; k < c->n_client; k++)
            all[n++] = c->client[k];
        for (size_t k = 0; k < N(noisy_client); k++)
            all[n++] = noisy_client[k];
        sl_header_array_t arr = {all, n};
        sl_headers_t hs = sl_headers_of_array(&arr);
        sl_provider_t p =
            make_provider(c->protocol, c->base_url, c->key, c->provider_headers, c->n_provider_headers);
        sl_upstream_request_t req = {.method = c->method,
                                     .target = c->target,
                                     .target_len = strlen(c->target),
                                     .model = c->model,
                                     .headers = &hs,
                                     .body_len = c->body_len};
        sl_provider_head_t fixed;
        cr_assert_eq(sl_dialect_provider_head(&p, &fixed), SL_HEAD_OK, "%s", c->rule);
        sl_strbuf_t b = {0};
        sl_strbuf_append(&b, "kept|", 5);
        sl_upstream_head_t info;
        cr_assert_eq(sl_dialect_upstream_head(&fixed, &req, &b, &info), SL_HEAD_OK, "%s", c->rule);
        cr_assert_str_eq(b.data + 5, c->head, "%s", c->rule);
        cr_assert_eq(memcmp(b.data, "kept|", 5), 0, "%s: appends", c->rule);
        cr_assert_eq(info.auth, c->auth, "%s", c->rule);
        cr_assert_eq(info.target_len, strlen(c->upstream_target), "%s", c->rule);
        cr_assert_eq(memcmp(b.data + info.target_off, c->upstream_target, info.target_len), 0, "%s", c->rule);
        /* The provider's lines are built once: a second request gets the same head. */
        size_t first_len = b.len;
        cr_assert_eq(sl_dialect_upstream_head(&fixed, &req, &b, &info), SL_HEAD_OK, "%s", c->rule);
        cr_assert_eq(b.len, first_len + strlen(c->head), "%s", c->rule);
        cr_assert_str_eq(b.data + first_len, c->head, "%s: again", c->rule);
        free(sl_strbuf_finish(&b));
        sl_provider_head_free(&fixed);
    }
}

Test(upstream_head, never_passes_client_credentials_or_hop_by_hop_headers)
{
    static const char *const forbidden[] = {"client-gw-key", "localhost", "keep-alive", "trailers",
                                            "chunked",       "h2c",       "Basic",      "999",
                                            "zstd",          "sess-1",    "cookie",     "x-injected"};
    for (size_t i = 0; i < N(head_cases); i++) {
        const head_case_t *c = &head_cases[i];
        for (size_t k = 0; k < N(forbidden); k++)
            cr_assert_null(strstr(c->head, forbidden[k]), "%s: %s", c->rule, forbidden[k]);
    }
    /* The table's exact heads are what the builder produced above; here it runs on the noise alone. */
    sl_header_array_t arr = {noisy_client, N(noisy_client)};
    sl_headers_t hs = sl_headers_of_array(&arr);
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        static const char *const targets[SL_DIALECT_COUNT] = {
            "/v1/messages", "/v1/chat/completions", "/v1/responses", "/v1beta/models/m:generateContent",
            "/model/m/converse"};
        sl_provider_t p = make_provider((sl_dialect_t)d, "https://up.example", "UPKEY", NULL, 0);
        sl_upstream_request_t req = {"POST", targets[d], strlen(targets[d]), "m", &hs, 1};
        sl_provider_head_t fixed;
        sl_dialect_provider_head(&p, &fixed);
        sl_strbuf_t b = {0};
        sl_upstream_head_t info;
        cr_assert_eq(sl_dialect_upstream_head(&fixed, &req, &b, &info), SL_HEAD_OK);
        for (size_t k = 0; k < N(forbidden); k++)
            cr_assert_null(strstr(b.data, forbidden[k]), "%s: %s", dialect_names[d], forbidden[k]);
        cr_assert_not_null(strstr(b.data, "UPKEY\r\n"), "%s", dialect_names[d]);
        cr_assert_not_null(strstr(b.data, "\r\naccept-encoding: identity\r\n"), "%s", dialect_names[d]);
        free(sl_strbuf_finish(&b));
        sl_provider_head_free(&fixed);
    }
}

Test(upstream_head, refusals_leave_the_buffer_and_info_untouched)
{
    static const struct {
        const char *rule;
        sl_dialect_t protocol;
        const char *base_url, *key, *method, *target, *model;
        sl_head_status_t status;
    } bad[] = {
        {"bad base url", SL_DIALECT_ANTHROPIC, "https://h?x", "k", "POST", "/v1/messages", NULL,
         SL_HEAD_BAD_BASE_URL},
        {"space in target", SL_DIALECT_ANTHROPIC, "https://h", "k", "POST", "/v1/messages x", NULL,
         SL_HEAD_BAD_TARGET},
        {"CRLF in target", SL_DIALECT_ANTHROPIC, "https://h", "k", "POST", "/v1\r\nx: y", NULL,
         SL_HEAD_BAD_TARGET},
        {"target not a path", SL_DIALECT_ANTHROPIC, "https://h", "k", "POST", "v1/messages", NULL,
         SL_HEAD_BAD_TARGET},
        {"method not a token", SL_DIALECT_ANTHROPIC, "https://h", "k", "PO ST", "/v1/messages", NULL,
         SL_HEAD_BAD_TARGET},
        {"gemini path without a model", SL_DIALECT_GEMINI, "https://h/pre", "k", "POST",
         "/v1beta/tunedModels", "m", SL_HEAD_BAD_TARGET},
        {"bedrock path without a model", SL_DIALECT_BEDROCK, "https://h", "k", "POST", "/converse", "m",
         SL_HEAD_BAD_TARGET},
        {"key with a newline", SL_DIALECT_OPENAI_CHAT, "https://h", "sk\r\nx: y", "POST",
         "/v1/chat/completions", NULL, SL_HEAD_BAD_KEY},
    };
    sl_header_array_t arr = {noisy_client, N(noisy_client)};
    sl_headers_t hs = sl_headers_of_array(&arr);
    for (size_t i = 0; i < N(bad); i++) {
        sl_provider_t p = make_provider(bad[i].protocol, bad[i].base_url, bad[i].key, NULL, 0);
        sl_upstream_request_t req = {bad[i].method, bad[i].target, strlen(bad[i].target),
                                     bad[i].model,  &hs,           1};
        sl_strbuf_t b = {0};
        sl_strbuf_append(&b, "before", 6);
        sl_upstream_head_t info = {
            .auth = SL_UPSTREAM_AUTH_SIGV4_PENDING, .target_off = 77, .target_len = 88};
        sl_provider_head_t fixed;
        sl_head_status_t fixed_status = sl_dialect_provider_head(&p, &fixed);
        cr_assert_eq(fixed.status, fixed_status, "%s", bad[i].rule);
        cr_assert_eq(sl_dialect_upstream_head(&fixed, &req, &b, &info), bad[i].status, "%s", bad[i].rule);
        sl_provider_head_free(&fixed);
        cr_assert_str_eq(b.data, "before", "%s", bad[i].rule);
        cr_assert_eq(b.len, 6, "%s", bad[i].rule);
        cr_assert_eq(info.target_off, 77, "%s", bad[i].rule);
        cr_assert_eq(info.target_len, 88, "%s", bad[i].rule);
        free(sl_strbuf_finish(&b));
    }
}

/* ---- errors the gateway writes ----------------------------------------------------------------- */

/* formats.md's status -> type table, one column per dialect (Bedrock camelCase and PascalCase). */
static const struct {
    int status;
    const char *anthropic, *openai, *gemini, *bedrock, *bedrock_header;
} status_table[] = {
    {400, "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", "validationException",
     "ValidationException"},
    {401, "authentication_error", "authentication_error", "UNAUTHENTICATED", "accessDeniedException",
     "AccessDeniedException"},
    {403, "permission_error", "permission_error", "PERMISSION_DENIED", "accessDeniedException",
     "AccessDeniedException"},
    {404, "not_found_error", "not_found_error", "NOT_FOUND", "resourceNotFoundException",
     "ResourceNotFoundException"},
    {413, "request_too_large", "invalid_request_error", "INVALID_ARGUMENT", "validationException",
     "ValidationException"},
    {429, "rate_limit_error", "rate_limit_error", "RESOURCE_EXHAUSTED", "throttlingException",
     "ThrottlingException"},
    {500, "api_error", "server_error", "INTERNAL", "internalServerException", "InternalServerException"},
    {502, "api_error", "server_error", "UNAVAILABLE", "serviceUnavailableException",
     "ServiceUnavailableException"},
    {503, "api_error", "server_error", "UNAVAILABLE", "serviceUnavailableException",
     "ServiceUnavailableException"},
    {504, "api_error", "server_error", "UNAVAILABLE", "serviceUnavailableException",
     "ServiceUnavailableException"},
    /* Statuses outside the table: another 4xx is a bad request, anything else an internal error. */
    {422, "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", "validationException",
     "ValidationException"},
    {408, "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", "validationException",
     "ValidationException"},
    {501, "api_error", "server_error", "INTERNAL", "internalServerException", "InternalServerException"},
    {529, "api_error", "server_error", "INTERNAL", "internalServerException", "InternalServerException"},
    {200, "api_error", "server_error", "INTERNAL", "internalServerException", "InternalServerException"},
};

static char *
render(sl_dialect_t d, int status, const char *code, const char *message, sl_error_head_t *head)
{
    sl_strbuf_t b = {0};
    sl_dialect_render_error(d, status, code, message, &b, head);
    return sl_strbuf_finish(&b);
}

static char *
render_stream(sl_dialect_t d, int status, const char *code, const char *message, sl_stream_error_t *r)
{
    sl_strbuf_t b = {0};
    *r = sl_dialect_render_stream_error(d, status, code, message, &b);
    return sl_strbuf_finish(&b);
}

static json_t *
parse_json(const char *s)
{
    json_error_t err;
    json_t *j = json_loads(s, 0, &err);
    cr_assert_not_null(j, "not JSON (%s): %s", err.text, s);
    return j;
}

Test(gateway_error, body_shape_per_dialect_and_status)
{
    char want[512];
    for (size_t i = 0; i < N(status_table); i++) {
        int st = status_table[i].status;
        const char *code = "gw.test.code", *msg = "sluice: something";
        sl_error_head_t head;
        char *got;

        got = render(SL_DIALECT_ANTHROPIC, st, code, msg, &head);
        snprintf(want, sizeof(want),
                 "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"sluice: something\","
                 "\"code\":\"gw.test.code\"}}",
                 status_table[i].anthropic);
        cr_assert_str_eq(got, want, "anthropic %d", st);
        cr_assert_null(head.type_header);
        json_decref(parse_json(got));
        free(got);

        for (int d = SL_DIALECT_OPENAI_CHAT; d <= SL_DIALECT_OPENAI_RESPONSES; d++) {
            got = render((sl_dialect_t)d, st, code, msg, &head);
            snprintf(want, sizeof(want),
                     "{\"error\":{\"message\":\"sluice: something\",\"type\":\"%s\",\"param\":null,"
                     "\"code\":\"gw.test.code\"}}",
                     status_table[i].openai);
            cr_assert_str_eq(got, want, "%s %d", dialect_names[d], st);
            cr_assert_null(head.type_header);
            json_decref(parse_json(got));
            free(got);
        }

        got = render(SL_DIALECT_GEMINI, st, code, msg, &head);
        snprintf(want, sizeof(want),
                 "{\"error\":{\"code\":%d,\"message\":\"sluice: something\",\"status\":\"%s\","
                 "\"details\":[{\"reason\":\"gw.test.code\"}]}}",
                 st, status_table[i].gemini);
        cr_assert_str_eq(got, want, "gemini %d", st);
        cr_assert_null(head.type_header);
        json_decref(parse_json(got));
        free(got);

        got = render(SL_DIALECT_BEDROCK, st, code, msg, &head);
        cr_assert_str_eq(got, "{\"message\":\"sluice: something\"}", "bedrock %d", st);
        cr_assert_str_eq(head.type_header, "x-amzn-errortype");
        cr_assert_str_eq(head.type_value, status_table[i].bedrock_header, "bedrock %d", st);
        json_decref(parse_json(got));
        free(got);

        sl_stream_error_t r;
        got = render_stream(SL_DIALECT_BEDROCK, st, code, msg, &r);
        cr_assert_eq(r.form, SL_STREAM_ERROR_NEEDS_EXCEPTION_FRAME);
        cr_assert_str_eq(r.exception_type, status_table[i].bedrock, "bedrock stream %d", st);
        cr_assert_str_eq(got, "{\"message\":\"sluice: something\"}");
        free(got);
    }
}

Test(gateway_error, formats_md_examples_byte_for_byte)
{
    static const struct {
        sl_dialect_t d;
        const char *body;
    } cases[] = {
        {SL_DIALECT_ANTHROPIC,
         "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"sluice: "
         "wait\",\"code\":\"gw.wait.rate_limited\"}}"},
        {SL_DIALECT_OPENAI_CHAT,
         "{\"error\":{\"message\":\"sluice: wait\",\"type\":\"rate_limit_error\",\"param\":"
         "null,\"code\":\"gw.wait.rate_limited\"}}"},
        {SL_DIALECT_OPENAI_RESPONSES,
         "{\"error\":{\"message\":\"sluice: wait\",\"type\":\"rate_limit_error\","
         "\"param\":null,\"code\":\"gw.wait.rate_limited\"}}"},
        {SL_DIALECT_GEMINI,
         "{\"error\":{\"code\":429,\"message\":\"sluice: wait\",\"status\":\"RESOURCE_EXHAUSTED\","
         "\"details\":[{\"reason\":\"gw.wait.rate_limited\"}]}}"},
        {SL_DIALECT_BEDROCK, "{\"message\":\"sluice: wait\"}"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_error_head_t head;
        char *got = render(cases[i].d, 429, "gw.wait.rate_limited", "wait", &head);
        cr_assert_str_eq(got, cases[i].body, "%s", dialect_names[cases[i].d]);
        cr_assert_str_eq(head.content_type, "application/json");
        free(got);
    }
    sl_error_head_t head;
    free(render(SL_DIALECT_BEDROCK, 429, "gw.wait.rate_limited", "wait", &head));
    cr_assert_str_eq(head.type_value, "ThrottlingException");
}

Test(gateway_error, message_prefix_is_added_once)
{
    sl_error_head_t head;
    char *a = render(SL_DIALECT_BEDROCK, 503, "gw.safe_mode", "in safe mode", &head);
    char *b = render(SL_DIALECT_BEDROCK, 503, "gw.safe_mode", "sluice: in safe mode", &head);
    char *c = render(SL_DIALECT_BEDROCK, 503, "gw.safe_mode", "sluice:no space", &head);
    cr_assert_str_eq(a, "{\"message\":\"sluice: in safe mode\"}");
    cr_assert_str_eq(b, a);
    cr_assert_str_eq(c, "{\"message\":\"sluice: sluice:no space\"}");
    free(a);
    free(b);
    free(c);
}

/* Messages carry client-supplied text (paths, model names): every byte must stay inside the string. */
static const struct {
    const char *message, *escaped, *decoded;
} escape_cases[] = {
    {"say \"hi\"", "say \\\"hi\\\"", "say \"hi\""},
    {"back\\slash /path", "back\\\\slash /path", "back\\slash /path"},
    {"line1\nline2\r\ttab", "line1\\nline2\\r\\ttab", "line1\nline2\r\ttab"},
    {"\b\f\x01\x1f\x7f", "\\b\\f\\u0001\\u001f\x7f", "\b\f\x01\x1f\x7f"},
    {"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80",
     "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80"},
    {"bad \xff byte", "bad \\ufffd byte", "bad \xef\xbf\xbd byte"},
    {"overlong \xc0\xaf", "overlong \\ufffd\\ufffd", "overlong \xef\xbf\xbd\xef\xbf\xbd"},
    {"surrogate \xed\xa0\x80", "surrogate \\ufffd\\ufffd\\ufffd",
     "surrogate \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
    {"past max \xf4\x90\x80\x80", "past max \\ufffd\\ufffd\\ufffd\\ufffd",
     "past max \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
    {"cut \xe2\x82", "cut \\ufffd\\ufffd", "cut \xef\xbf\xbd\xef\xbf\xbd"},
    {"</script>\xe2\x80\xa8", "</script>\xe2\x80\xa8", "</script>\xe2\x80\xa8"},
};

/* The message as a dialect's parsed error carries it. */
static const char *
message_of(sl_dialect_t d, json_t *j)
{
    json_t *m = d == SL_DIALECT_BEDROCK ? json_object_get(j, "message")
                                        : json_object_get(json_object_get(j, "error"), "message");
    cr_assert(json_is_string(m));
    return json_string_value(m);
}

Test(gateway_error, messages_are_json_escaped_in_every_dialect)
{
    char want[256], decoded[256];
    for (size_t i = 0; i < N(escape_cases); i++) {
        sl_error_head_t head;
        char *got = render(SL_DIALECT_BEDROCK, 400, "gw.x", escape_cases[i].message, &head);
        snprintf(want, sizeof(want), "{\"message\":\"sluice: %s\"}", escape_cases[i].escaped);
        cr_assert_str_eq(got, want, "case %zu", i);
        free(got);
        snprintf(decoded, sizeof(decoded), "sluice: %s", escape_cases[i].decoded);
        for (int d = 0; d < SL_DIALECT_COUNT; d++) {
            got = render((sl_dialect_t)d, 400, "gw.x", escape_cases[i].message, &head);
            json_t *j = parse_json(got);
            cr_assert_str_eq(message_of((sl_dialect_t)d, j), decoded, "%s case %zu", dialect_names[d], i);
            json_decref(j);
            free(got);
        }
    }
}

/* ---- in-stream errors and keep-alives ---------------------------------------------------------- */

Test(stream_error, exact_bytes_per_sse_dialect)
{
    static const struct {
        sl_dialect_t d;
        const char *bytes;
    } cases[] = {
        {SL_DIALECT_ANTHROPIC,
         "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"sluice: "
         "cut "
         "\\\"short\\\"\",\"code\":\"gw.upstream.broken_after_content\"}}\n\n"},
        {SL_DIALECT_OPENAI_RESPONSES,
         "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\","
         "\"error\":{\"code\":\"gw.upstream.broken_after_content\",\"message\":\"sluice: cut "
         "\\\"short\\\"\"}}}"
         "\n\n"},
        {SL_DIALECT_OPENAI_CHAT, "data: {\"error\":{\"message\":\"sluice: cut "
                                 "\\\"short\\\"\",\"type\":\"server_error\",\"param\":null,"
                                 "\"code\":\"gw.upstream.broken_after_content\"}}\n\n"},
        {SL_DIALECT_GEMINI, "data: {\"error\":{\"code\":502,\"message\":\"sluice: cut "
                            "\\\"short\\\"\",\"status\":\"UNAVAILABLE\","
                            "\"details\":[{\"reason\":\"gw.upstream.broken_after_content\"}]}}\n\n"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_stream_error_t r;
        char *got = render_stream(cases[i].d, 502, "gw.upstream.broken_after_content", "cut \"short\"", &r);
        cr_assert_eq(r.form, SL_STREAM_ERROR_READY, "%s", dialect_names[cases[i].d]);
        cr_assert_null(r.exception_type);
        cr_assert_str_eq(got, cases[i].bytes, "%s", dialect_names[cases[i].d]);
        const char *data = strstr(got, "data: ");
        cr_assert_not_null(data);
        char *json = strndup(data + 6, strlen(data + 6) - 2);
        json_decref(parse_json(json));
        free(json);
        free(got);
    }
}

Test(stream_error, bedrock_needs_an_exception_frame)
{
    sl_stream_error_t r;
    char *got = render_stream(SL_DIALECT_BEDROCK, 429, "gw.wait.rate_limited", "wait", &r);
    cr_assert_eq(r.form, SL_STREAM_ERROR_NEEDS_EXCEPTION_FRAME);
    cr_assert_str_eq(r.exception_type, "throttlingException", "camelCase in the frame");
    cr_assert_str_eq(got, "{\"message\":\"sluice: wait\"}");
    free(got);
}

static char *
read_fixture(const char *name)
{
    const char *dir = getenv("SLUICE_FIXTURES");
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir != NULL ? dir : "/work/shared/fixtures/streams", name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* The last event of an SSE text: its event name (or "") and its data line. */
static void
last_event(char *sse, char **event, char **data)
{
    size_t n = strlen(sse);
    while (n > 0 && (sse[n - 1] == '\n' || sse[n - 1] == '\r'))
        sse[--n] = '\0';
    char *start = sse;
    for (char *p = sse; (p = strstr(p, "\n\n")) != NULL; p += 2)
        start = p + 2;
    *event = "";
    *data = NULL;
    for (char *line = strtok(start, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strncmp(line, "event: ", 7) == 0)
            *event = line + 7;
        else if (strncmp(line, "data: ", 6) == 0)
            *data = line + 6;
    }
    cr_assert_not_null(*data);
}

/* Every key of want's objects is in got (values may differ): our error reads like the provider's. */
static void
assert_keys_within(json_t *want, json_t *got, const char *where)
{
    const char *key;
    json_t *value;
    json_object_foreach(want, key, value)
    {
        json_t *other = json_object_get(got, key);
        cr_assert_not_null(other, "%s: key %s missing", where, key);
        if (json_is_object(value))
            assert_keys_within(value, other, where);
    }
}

Test(stream_error, reads_like_the_providers_own_in_stream_error)
{
    static const struct {
        sl_dialect_t d;
        const char *fixture;
        const char *subtree; /* where the error lives in the provider's event */
    } cases[] = {
        {SL_DIALECT_ANTHROPIC, "anthropic-overloaded-before-content.sse", NULL},
        {SL_DIALECT_OPENAI_CHAT, "chat-server-error-before-content.sse", NULL},
        {SL_DIALECT_OPENAI_RESPONSES, "responses-failed-overloaded.sse", "response"},
        {SL_DIALECT_GEMINI, "gemini-unavailable.sse", NULL},
    };
    for (size_t i = 0; i < N(cases); i++) {
        char *want_event, *want_data, *got_event, *got_data;
        last_event(read_fixture(cases[i].fixture), &want_event, &want_data);
        sl_stream_error_t r;
        char *got = render_stream(cases[i].d, 503, "gw.upstream.failed", "no upstream", &r);
        last_event(got, &got_event, &got_data);
        cr_assert_str_eq(got_event, want_event, "%s", cases[i].fixture);
        json_t *w = parse_json(want_data), *g = parse_json(got_data);
        if (cases[i].subtree != NULL) {
            cr_assert_str_eq(json_string_value(json_object_get(w, "type")),
                             json_string_value(json_object_get(g, "type")));
            json_t *ws = json_object_get(w, cases[i].subtree), *gs = json_object_get(g, cases[i].subtree);
            cr_assert_str_eq(json_string_value(json_object_get(ws, "status")),
                             json_string_value(json_object_get(gs, "status")));
            assert_keys_within(json_object_get(ws, "error"), json_object_get(gs, "error"), cases[i].fixture);
        } else {
            assert_keys_within(w, g, cases[i].fixture);
        }
        json_decref(w);
        json_decref(g);
        free(got);
    }
}

Test(keep_alive, bytes_and_stream_content_type_per_dialect)
{
    static const struct {
        const char *bytes, *content_type;
    } want[SL_DIALECT_COUNT] = {
        [SL_DIALECT_ANTHROPIC] = {": keep-alive\n\n", "text/event-stream"},
        [SL_DIALECT_OPENAI_CHAT] = {": keep-alive\n\n", "text/event-stream"},
        [SL_DIALECT_OPENAI_RESPONSES] = {": keep-alive\n\n", "text/event-stream"},
        [SL_DIALECT_GEMINI] = {"\n", "text/event-stream"},
        [SL_DIALECT_BEDROCK] = {"", "application/vnd.amazon.eventstream"},
    };
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        size_t len = 99;
        const char *k = sl_dialect_keep_alive((sl_dialect_t)d, &len);
        cr_assert_eq(len, strlen(want[d].bytes), "%s", dialect_names[d]);
        cr_assert_eq(memcmp(k, want[d].bytes, len), 0, "%s", dialect_names[d]);
        cr_assert_str_eq(sl_dialect_stream_content_type((sl_dialect_t)d), want[d].content_type);
    }
}
