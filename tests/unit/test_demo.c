#define _GNU_SOURCE /* memmem, strcasestr */
/*
 * The demo upstream (demo.c, over core/demo_script.c): its config loads
 * clean and routes every dialect to a then b; its server answers in every
 * dialect (read back by the gateway's own parsers), keeps connections
 * alive, and answers garbage with a 400 without falling over.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "core/answer_usage.h"
#include "core/demo_script.h"
#include "core/route.h"
#include "demo.h"
#include "test_config_env.h"
#include "test_demo_read.h"

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the config ----------------------------------------------------------------------------------- */

Test(demo_config, the_demo_yaml_loads_clean_and_routes_every_dialect_to_a_then_b)
{
    char *yaml = sl_demo_config_yaml(41234);
    sl_config_result_t res = sl_config_parse(yaml, strlen(yaml), "demo.yaml", &test_env);
    for (size_t i = 0; i < res.errors.len; i++)
        cr_log_error("error: %s", res.errors.items[i].text);
    for (size_t i = 0; i < res.warnings.len; i++)
        cr_log_error("warning: %s", res.warnings.items[i].text);
    cr_assert_eq(res.errors.len, 0);
    cr_assert_eq(res.warnings.len, 0);
    const sl_config_t *c = res.config;
    cr_assert_eq(c->gateway.port, 8080);
    cr_assert_eq(c->control.port, 8081);
    cr_assert_null(c->control.key, "sluice generates the control key");
    cr_assert_eq(c->n_clients, 1);
    cr_assert_str_eq(c->clients[0].key, SL_DEMO_CLIENT_KEY);
    cr_assert_eq(c->n_providers, 10);
    cr_assert_eq(c->failover.wait_secs, 60);
    cr_assert_eq(c->failover.pause_secs, 10);
    cr_assert_eq(c->failover.max_pause_secs, 30);
    bool limited = false, busy = false;
    for (size_t i = 0; i < c->n_providers; i++) {
        const sl_provider_t *p = &c->providers[i];
        cr_assert_str_eq(p->key, SL_DEMO_UPSTREAM_KEY);
        cr_assert_not_null(strstr(p->base_url, "http://127.0.0.1:41234/"), "%s", p->base_url);
        limited = limited || (p->n_limits > 0 && p->limits[0].amount == 20);
        busy = busy || p->max_concurrent == 4;
        if (p->protocol == SL_DIALECT_BEDROCK)
            cr_assert_str_eq(p->region, "us-east-1");
    }
    cr_assert(limited && busy);
    static const struct {
        sl_dialect_t dialect;
        const char *model, *first, *second;
    } rows[] = {
        {SL_DIALECT_ANTHROPIC, "claude-sonnet-4-5", "demo-anthropic-a", "demo-anthropic-b"},
        {SL_DIALECT_OPENAI_CHAT, "gpt-4o-mini", "demo-openai-chat-a", "demo-openai-chat-b"},
        {SL_DIALECT_OPENAI_RESPONSES, "gpt-5-codex", "demo-openai-responses-a", "demo-openai-responses-b"},
        {SL_DIALECT_GEMINI, "gemini-2.5-flash", "demo-gemini-a", "demo-gemini-b"},
        {SL_DIALECT_BEDROCK, "anthropic.claude-3-5-haiku-20241022-v1:0", "demo-bedrock-a", "demo-bedrock-b"},
        {SL_DIALECT_BEDROCK, "us.anthropic.claude-sonnet-4-20250514-v1:0", "demo-bedrock-a",
         "demo-bedrock-b"},
    };
    for (size_t i = 0; i < NELEMS(rows); i++) {
        sl_candidate_t cand[16];
        size_t n = 0, route = 0;
        cr_assert(sl_route_select(c, rows[i].dialect, rows[i].model, 0, cand, &n, &route), "%s",
                  rows[i].model);
        cr_assert_eq(n, 2, "%s", rows[i].model);
        cr_assert_eq(cand[0].skip, SL_SKIP_NONE, "%s", rows[i].model);
        cr_assert_eq(cand[1].skip, SL_SKIP_NONE, "%s", rows[i].model);
        cr_assert_str_eq(c->providers[cand[0].provider].name, rows[i].first);
        cr_assert_str_eq(c->providers[cand[1].provider].name, rows[i].second);
        /* The base URL plus the dialect's path is a path the demo upstream serves. */
        cr_assert_not_null(strstr(c->providers[cand[0].provider].base_url, "/a"));
        cr_assert_not_null(strstr(c->providers[cand[1].provider].base_url, "/b"));
    }
    /* One upstream each (every trouble cause of the stats then happens): the troubled one, the limited one.
     */
    static const struct {
        sl_dialect_t dialect;
        const char *model, *only;
    } single[] = {
        {SL_DIALECT_ANTHROPIC, "claude-haiku-4-5", "demo-anthropic-a"},
        {SL_DIALECT_OPENAI_CHAT, "gpt-4.1", "demo-openai-chat-a"},
    };
    for (size_t i = 0; i < NELEMS(single); i++) {
        sl_candidate_t cand[16];
        size_t n = 0, route = 0;
        cr_assert(sl_route_select(c, single[i].dialect, single[i].model, 0, cand, &n, &route));
        cr_assert_eq(n, 1, "%s", single[i].model);
        cr_assert_str_eq(c->providers[cand[0].provider].name, single[i].only);
    }
    sl_config_result_free(&res);
    free(yaml);
}

/* ---- the server ----------------------------------------------------------------------------------- */

static sl_demo_t *demo;

static void
stop_demo(void)
{
    sl_demo_stop(demo);
    demo = NULL;
}

static int
dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct timeval tv = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(sl_demo_port(demo)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static void
send_all(int fd, const char *s, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, s + off, len - off, MSG_NOSIGNAL);
        cr_assert_gt(n, 0);
        off += (size_t)n;
    }
}

typedef struct {
    int status;
    char head[4096];
    sl_strbuf_t body; /* de-chunked */
    bool closed;      /* the server closed the connection after the answer */
    bool whole;       /* the framing completed (content-length reached, or the last chunk) */
} reply_t;

/* Reads bytes into *buf until it holds at least need (false: the connection ended first). */
static bool
fill(int fd, sl_strbuf_t *buf, size_t need)
{
    while (buf->len < need) {
        char tmp[8192];
        ssize_t n = recv(fd, tmp, sizeof tmp, 0);
        if (n <= 0)
            return false;
        sl_strbuf_append(buf, tmp, (size_t)n);
    }
    return true;
}

/* Reads one answer; any bytes after it stay in *buf. */
static void
read_reply(int fd, sl_strbuf_t *buf, reply_t *r)
{
    memset(r, 0, sizeof *r);
    char *end = NULL;
    while ((end = buf->data ? memmem(buf->data, buf->len, "\r\n\r\n", 4) : NULL) == NULL) {
        if (!fill(fd, buf, buf->len + 1)) {
            r->closed = true;
            return;
        }
    }
    size_t head_len = (size_t)(end - buf->data) + 4;
    snprintf(r->head, sizeof r->head, "%.*s", (int)head_len, buf->data);
    cr_assert_eq(sscanf(r->head, "HTTP/1.1 %d", &r->status), 1, "%s", r->head);
    memmove(buf->data, buf->data + head_len, buf->len - head_len);
    buf->len -= head_len;
    const char *cl = strcasestr(r->head, "content-length:");
    if (cl != NULL) {
        size_t n = strtoul(cl + 15, NULL, 10);
        r->whole = fill(fd, buf, n);
        n = n < buf->len ? n : buf->len;
        sl_strbuf_append(&r->body, buf->data ? buf->data : "", n);
        memmove(buf->data, buf->data + n, buf->len - n);
        buf->len -= n;
    } else {
        for (;;) {
            char *eol;
            while ((eol = buf->data ? memmem(buf->data, buf->len, "\r\n", 2) : NULL) == NULL) {
                if (!fill(fd, buf, buf->len + 1))
                    goto out;
            }
            size_t size = strtoul(buf->data, NULL, 16);
            size_t line = (size_t)(eol - buf->data) + 2;
            if (!fill(fd, buf, line + size + 2))
                goto out;
            sl_strbuf_append(&r->body, buf->data + line, size);
            memmove(buf->data, buf->data + line + size + 2, buf->len - line - size - 2);
            buf->len -= line + size + 2;
            if (size == 0) {
                r->whole = true;
                break;
            }
        }
    }
out:
    if (strcasestr(r->head, "connection: close") != NULL || !r->whole) {
        char c;
        r->closed = buf->len == 0 && recv(fd, &c, 1, 0) <= 0;
    }
}

static void
request_text(sl_strbuf_t *out, const char *target, const char *key_header, const char *body,
             const char *extra)
{
    sl_strbuf_appendf(out,
                      "POST %s HTTP/1.1\r\nhost: x\r\n%s\r\ncontent-type: "
                      "application/json\r\n%scontent-length: %zu\r\n\r\n%s",
                      target, key_header, extra, strlen(body), body);
}

Test(demo_shell, a_stream_in_every_dialect_then_a_whole_answer_on_one_connection, .fini = stop_demo)
{
    char err[256] = "";
    demo = sl_demo_start("calm", err, sizeof err);
    cr_assert_not_null(demo, "%s", err);
    cr_assert_gt(sl_demo_port(demo), 0);
    static const struct {
        sl_dialect_t dialect;
        const char *target, *key_header, *body;
    } rows[] = {
        {SL_DIALECT_ANTHROPIC, "/b/v1/messages", "x-api-key: " SL_DEMO_UPSTREAM_KEY,
         "{\"model\":\"claude-x\",\"stream\":true,\"max_tokens\":10}"},
        {SL_DIALECT_OPENAI_CHAT, "/b/v1/chat/completions", "authorization: Bearer " SL_DEMO_UPSTREAM_KEY,
         "{\"model\":\"gpt-4o\",\"stream\":true}"},
        {SL_DIALECT_OPENAI_RESPONSES, "/b/v1/responses", "authorization: Bearer " SL_DEMO_UPSTREAM_KEY,
         "{\"model\":\"gpt-5\",\"stream\":true}"},
        {SL_DIALECT_GEMINI, "/b/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
         "x-goog-api-key: " SL_DEMO_UPSTREAM_KEY, "{\"contents\":[]}"},
        {SL_DIALECT_BEDROCK, "/b/model/anthropic.claude-x/converse-stream",
         "authorization: Bearer " SL_DEMO_UPSTREAM_KEY, "{\"messages\":[]}"},
    };
    int fd = dial();
    sl_strbuf_t buf = {0};
    for (size_t i = 0; i < NELEMS(rows); i++) {
        sl_strbuf_t req = {0};
        request_text(&req, rows[i].target, rows[i].key_header, rows[i].body, "");
        send_all(fd, req.data, req.len);
        free(req.data);
        reply_t r;
        read_reply(fd, &buf, &r);
        cr_assert_eq(r.status, 200, "%s: %s", rows[i].target, r.head);
        cr_assert(r.whole, "%s", rows[i].target);
        cr_assert_not(r.closed, "kept alive");
        cr_assert_not_null(strcasestr(r.head, "transfer-encoding: chunked"));
        seen_t o;
        feed(rows[i].dialect, r.body.data, r.body.len, &o);
        cr_assert(sl_stream_complete(&o.st), "%s: %s", rows[i].target, o.kinds);
        cr_assert_eq(o.st.phase, SL_STREAM_FLOWING);
        seen_free(&o);
        free(r.body.data);
    }
    /* A whole answer, pipelined with a token count, on the same connection. */
    sl_strbuf_t req = {0};
    request_text(&req, "/b/v1/chat/completions", "authorization: Bearer " SL_DEMO_UPSTREAM_KEY,
                 "{\"model\":\"gpt-4o\"}", "");
    request_text(&req, "/b/v1/messages/count_tokens", "x-api-key: " SL_DEMO_UPSTREAM_KEY, "{\"model\":\"c\"}",
                 "connection: close\r\n");
    send_all(fd, req.data, req.len);
    free(req.data);
    reply_t r;
    read_reply(fd, &buf, &r);
    cr_assert_eq(r.status, 200);
    cr_assert(r.whole);
    sl_usage_t u = {0};
    cr_assert(sl_answer_usage(SL_DIALECT_OPENAI_CHAT, r.body.data, r.body.len, &u));
    cr_assert_gt(u.output, 0);
    free(r.body.data);
    read_reply(fd, &buf, &r);
    cr_assert_eq(r.status, 200);
    cr_assert_not_null(strstr(r.body.data, "input_tokens"));
    cr_assert(r.closed, "connection: close is honoured");
    free(r.body.data);
    free(buf.data);
    close(fd);
}

Test(demo_shell, a_wrong_key_is_401_and_an_unknown_path_404_in_keep_alive, .fini = stop_demo)
{
    demo = sl_demo_start(NULL, NULL, 0);
    cr_assert_not_null(demo);
    int fd = dial();
    sl_strbuf_t buf = {0}, req = {0};
    request_text(&req, "/a/v1/messages", "x-api-key: sk-wrong", "{\"model\":\"claude-x\"}", "");
    request_text(&req, "/a/v1/nothing", "x-api-key: " SL_DEMO_UPSTREAM_KEY, "{}", "");
    request_text(&req, "/b/model/m/converse", "authorization: Bearer " SL_DEMO_UPSTREAM_KEY, "not json", "");
    send_all(fd, req.data, req.len);
    free(req.data);
    reply_t r;
    read_reply(fd, &buf, &r);
    cr_assert_eq(r.status, 401, "%s", r.head);
    cr_assert_not_null(strstr(r.body.data, "authentication_error"));
    free(r.body.data);
    read_reply(fd, &buf, &r);
    cr_assert_eq(r.status, 404, "%s", r.head);
    free(r.body.data);
    read_reply(fd, &buf, &r);
    cr_assert_eq(r.status, 400, "%s", r.head);
    cr_assert_not_null(strcasestr(r.head, "x-amzn-errortype: ValidationException"));
    cr_assert_not(r.closed);
    free(r.body.data);
    free(buf.data);
    close(fd);
}

Test(demo_shell, garbage_gets_a_400_and_the_server_goes_on, .fini = stop_demo)
{
    demo = sl_demo_start("calm", NULL, 0);
    cr_assert_not_null(demo);
    static const char *const garbage[] = {
        "hello\r\n\r\n",
        "GET\r\n\r\n",
        "GET / HTTP/1.1\r\nno colon here\r\n\r\n",
        "POST /b/v1/messages HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "POST /b/v1/messages HTTP/1.1\r\ncontent-length: 12x\r\n\r\n",
        "POST /b/v1/messages HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
        "POST /b/v1/messages HTTP/9.9\r\n\r\n",
        "POST  /b HTTP/1.1\r\n\r\n",
        "\x01\x02\x03\xff\xfe\r\n\r\n",
        "POST /b/v1/messages HTTP/1.1\r\ncontent-length: 999999999\r\n\r\n",
    };
    for (size_t i = 0; i < NELEMS(garbage); i++) {
        int fd = dial();
        send_all(fd, garbage[i], strlen(garbage[i]));
        sl_strbuf_t buf = {0};
        reply_t r;
        read_reply(fd, &buf, &r);
        cr_assert(r.status == 400 || r.status == 413, "garbage %zu: %d", i, r.status);
        cr_assert(r.closed, "garbage %zu: closed after the answer", i);
        free(r.body.data);
        free(buf.data);
        close(fd);
    }
    /* A head that never ends is refused once it passes the bound. */
    int fd = dial();
    sl_strbuf_t big = {0};
    sl_strbuf_appendf(&big, "POST /b/v1/messages HTTP/1.1\r\n");
    while (big.len < 70000)
        sl_strbuf_appendf(&big, "x-filler: %s\r\n", "0123456789012345678901234567890123456789");
    send_all(fd, big.data, big.len);
    free(big.data);
    sl_strbuf_t buf = {0};
    reply_t r;
    read_reply(fd, &buf, &r);
    cr_assert_eq(r.status, 413);
    free(r.body.data);
    free(buf.data);
    close(fd);
    /* A client that leaves mid-request or mid-answer costs nothing. */
    fd = dial();
    send_all(fd, "POST /b/v1/messages HTTP/1.1\r\ncontent-length: 50\r\n\r\n{", 53);
    close(fd);
    fd = dial();
    sl_strbuf_t req = {0};
    request_text(&req, "/b/v1/messages", "x-api-key: " SL_DEMO_UPSTREAM_KEY, "{\"stream\":true}", "");
    send_all(fd, req.data, req.len);
    free(req.data);
    close(fd);
    /* And the server still answers. */
    fd = dial();
    req = (sl_strbuf_t){0};
    request_text(&req, "/b/v1/messages/count_tokens", "x-api-key: " SL_DEMO_UPSTREAM_KEY, "{}", "");
    send_all(fd, req.data, req.len);
    free(req.data);
    buf = (sl_strbuf_t){0};
    read_reply(fd, &buf, &r);
    cr_assert_eq(r.status, 200);
    free(r.body.data);
    free(buf.data);
    close(fd);
}

Test(demo_shell, the_storm_pinned_at_run_time_answers_429_with_retry_after, .fini = stop_demo)
{
    demo = sl_demo_start("calm", NULL, 0);
    cr_assert_not_null(demo);
    cr_assert_str_eq(sl_demo_trouble_now(demo), sl_demo_trouble_describe(SL_DEMO_CALM));
    cr_assert_not(sl_demo_pin(demo, "hurricane"));
    cr_assert_str_eq(sl_demo_trouble_now(demo), sl_demo_trouble_describe(SL_DEMO_CALM));
    cr_assert(sl_demo_pin(demo, "rate-limit"));
    cr_assert_str_eq(sl_demo_trouble_now(demo), "429 storm on the 'a' upstreams");
    int fd = dial();
    sl_strbuf_t buf = {0};
    int got429 = 0;
    for (int i = 0; i < 12 && got429 == 0; i++) {
        sl_strbuf_t req = {0};
        request_text(&req, "/a/v1/messages", "x-api-key: " SL_DEMO_UPSTREAM_KEY, "{\"model\":\"claude-x\"}",
                     "");
        send_all(fd, req.data, req.len);
        free(req.data);
        reply_t r;
        read_reply(fd, &buf, &r);
        if (r.status == 429) {
            got429++;
            cr_assert_not_null(strcasestr(r.head, "retry-after: "), "%s", r.head);
            cr_assert_not_null(strstr(r.body.data, "rate_limit_error"));
        } else {
            cr_assert_eq(r.status, 200);
        }
        free(r.body.data);
    }
    cr_assert_eq(got429, 1);
    free(buf.data);
    close(fd);
    cr_assert(sl_demo_pin(demo, "cycle"));
    cr_assert_str_eq(sl_demo_trouble_now(demo), sl_demo_trouble_describe(SL_DEMO_CALM));
}

Test(demo_shell, an_unknown_mode_is_refused_with_a_message)
{
    char err[256] = "";
    cr_assert_null(sl_demo_start("hurricane", err, sizeof err));
    cr_assert_not_null(strstr(err, "hurricane"), "%s", err);
    cr_assert_not_null(strstr(err, "rate-limit"), "%s", err);
    sl_demo_stop(NULL);
}
