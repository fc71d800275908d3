#define _GNU_SOURCE /* memmem */
/*
 * What sluice answers before a request reaches routing (formats.md, "Errors
 * the gateway writes"; refusal.h, accept.h): a body over limits.max_body_bytes
 * by content-length, chunked or over HTTP/2, broken HTTP/1 framing, an
 * unknown Expect, bad HTTP/2 header bytes, a malformed or oversized first
 * head. Each answer is in the client's dialect (or JSON with a gw.* code when
 * the path is unknown), never h2o's plain text, and an HTTP/1 client that
 * keeps sending its body reads the answer instead of a broken pipe.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake_upstream.h"
#include "harness.h"

static proc_t proc;
static fake_upstream_t *up;
static uint16_t port;

#define GATEWAY_KEY "gw-test-key-0001"
#define MAX_BODY    (1024 * 1024)

static void
setup(void)
{
    up = fake_start(NULL, NULL, false);
    fake_set_default(up, (fake_reply_t){.status = 200,
                                        .headers = "content-type: application/json\r\n",
                                        .body = "{\"ok\":true}"});
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
             "providers:\n"
             "  - {name: anth, protocol: anthropic, base_url: \"http://127.0.0.1:%u\", key: k}\n"
             "  - {name: chat, protocol: openai-chat, base_url: \"http://127.0.0.1:%u\", key: k}\n"
             "limits: {max_body_bytes: %d}\n"
             "failover: {wait_secs: 0}\n"
             "store: {path: %s}\n",
             fake_port(up), fake_port(up), MAX_BODY, write_temp_file(1, ""));
    const char *args[] = {"--config", write_temp_file(0, yaml), "--threads", "2", "--log-level", "debug",
                          NULL};
    proc_start(&proc, args);
    port = proc_wait_port(&proc, 5000);
    cr_assert_neq(port, 0, "sluice did not start:\n%s", proc.log);
}

static void
teardown(void)
{
    proc_kill(&proc);
    fake_stop(up);
    remove_temp_files();
}

TestSuite(refusals, .init = setup, .fini = teardown, .timeout = 60);

static int
connect_gateway(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return fd;
}

/* Writes all of it as a client that does not look at answers until it is done; false on EPIPE/reset. */
static bool
send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Reads until the peer closes (or 5 s pass); the bytes, NUL-terminated, in a static buffer. */
static const char *
read_all(int fd)
{
    static char buf[1 << 16];
    size_t len = 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    while (len < sizeof(buf) - 1 && poll(&pfd, 1, 5000) == 1) {
        ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    return buf;
}

/* A valid Anthropic body of exactly size bytes (padded in a string field). */
static char *
body_of_size(size_t size)
{
    static const char head[] = "{\"model\":\"claude-x\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
                               "\"content\":\"hi\"}],\"pad\":\"";
    char *b = malloc(size + 1);
    size_t h = strlen(head);
    memcpy(b, head, h);
    memset(b + h, 'a', size - h - 2);
    memcpy(b + size - 2, "\"}", 2);
    b[size] = '\0';
    return b;
}

/* One request on a fresh connection: the head, then the whole body whatever comes back; the answer. */
static const char *
post_whole(const char *head, const char *body, size_t body_len, bool *sent_all)
{
    int fd = connect_gateway();
    *sent_all = send_all(fd, head, strlen(head)) && send_all(fd, body, body_len);
    const char *answer = read_all(fd);
    close(fd);
    return answer;
}

static bool
starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void
expect_in(const char *answer, const char *needle)
{
    cr_assert(strstr(answer, needle) != NULL, "no '%s' in:\n%.2000s", needle, answer);
}

Test(refusals, a_content_length_over_the_limit_gets_413_in_each_dialect_and_the_client_reads_it)
{
    static const struct {
        const char *path, *key_header, *shape, *type_header;
    } dialects[] = {
        {"/v1/messages", "x-api-key: " GATEWAY_KEY,
         "{\"type\":\"error\",\"error\":{\"type\":\"request_too_large\"", NULL},
        {"/v1/chat/completions", "authorization: Bearer " GATEWAY_KEY,
         "{\"error\":{\"message\":\"sluice: the request body has more than 1048576 bytes; the limit is "
         "1048576\","
         "\"type\":\"invalid_request_error\"",
         NULL},
        {"/v1/responses", "authorization: Bearer " GATEWAY_KEY, "\"type\":\"invalid_request_error\"", NULL},
        {"/v1/models/gemini-x:generateContent", "x-goog-api-key: " GATEWAY_KEY,
         "{\"error\":{\"code\":413,\"message\":\"sluice: the request body has more than 1048576 bytes", NULL},
        {"/model/m/converse", "authorization: Bearer " GATEWAY_KEY, "{\"message\":\"sluice: the request body",
         "x-amzn-errortype: ValidationException"},
    };
    size_t len = 8 * MAX_BODY;
    char *body = body_of_size(len);
    for (size_t i = 0; i < sizeof(dialects) / sizeof(dialects[0]); i++) {
        char head[512];
        snprintf(head, sizeof(head), "POST %s HTTP/1.1\r\nhost: x\r\n%s\r\ncontent-length: %zu\r\n\r\n",
                 dialects[i].path, dialects[i].key_header, len);
        bool sent_all;
        const char *answer = post_whole(head, body, len, &sent_all);
        cr_assert(sent_all, "%s: the client could not send its whole body (the connection was cut)",
                  dialects[i].path);
        cr_assert(starts_with(answer, "HTTP/1.1 413 "), "%s:\n%s", dialects[i].path, answer);
        expect_in(answer, "x-sluice-error: gw.request.too_large\r\n");
        expect_in(answer, "content-type: application/json\r\n");
        expect_in(answer, dialects[i].shape);
        if (dialects[i].type_header != NULL)
            expect_in(answer, dialects[i].type_header);
        cr_assert(strstr(answer, "text/plain") == NULL, "%s", answer);
    }
    free(body);
    cr_assert_eq(fake_count(up), 0);
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
    cr_assert_eq(db_int(temp_file_path(1), "SELECT count(*) FROM requests WHERE status = 413 AND outcome = "
                                           "'failed' AND error_code = 'gw.request.too_large'"),
                 5, "each refusal has its row");
    cr_assert(strstr(proc.log, "event request_failed") != NULL, "%s", proc.log);
}

Test(refusals, a_chunked_body_over_the_limit_gets_413)
{
    int fd = connect_gateway();
    const char *head = "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: " GATEWAY_KEY
                       "\r\ntransfer-encoding: chunked\r\n\r\n";
    bool ok = send_all(fd, head, strlen(head));
    static char chunk[64 * 1024 + 16];
    int n = snprintf(chunk, sizeof(chunk), "%x\r\n", 64 * 1024);
    memset(chunk + n, 'a', 64 * 1024);
    memcpy(chunk + n + 64 * 1024, "\r\n", 2);
    for (int i = 0; i < 4 * MAX_BODY / (64 * 1024) && ok; i++)
        ok = send_all(fd, chunk, (size_t)n + 64 * 1024 + 2);
    ok = ok && send_all(fd, "0\r\n\r\n", 5);
    const char *answer = read_all(fd);
    close(fd);
    cr_assert(ok, "the client could not send its whole chunked body");
    cr_assert(starts_with(answer, "HTTP/1.1 413 "), "%s", answer);
    expect_in(answer, "x-sluice-error: gw.request.too_large\r\n");
    expect_in(answer, "\"type\":\"request_too_large\"");
    cr_assert_eq(fake_count(up), 0);
}

Test(refusals, a_body_of_exactly_the_limit_is_served_and_one_byte_more_is_refused_with_its_size)
{
    char *body = body_of_size(MAX_BODY);
    char head[512];
    snprintf(head, sizeof(head),
             "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: " GATEWAY_KEY
             "\r\nconnection: close\r\ncontent-length: %d\r\n\r\n",
             MAX_BODY);
    bool sent_all;
    const char *answer = post_whole(head, body, MAX_BODY, &sent_all);
    cr_assert(starts_with(answer, "HTTP/1.1 200 "), "%.500s", answer);
    cr_assert_eq(fake_count(up), 1);

    /* The same size chunked. */
    int fd = connect_gateway();
    const char *chead = "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: " GATEWAY_KEY
                        "\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n";
    char size_line[32];
    int n = snprintf(size_line, sizeof(size_line), "%x\r\n", MAX_BODY);
    cr_assert(send_all(fd, chead, strlen(chead)) && send_all(fd, size_line, (size_t)n) &&
              send_all(fd, body, MAX_BODY) && send_all(fd, "\r\n0\r\n\r\n", 7));
    answer = read_all(fd);
    close(fd);
    cr_assert(starts_with(answer, "HTTP/1.1 200 "), "%.500s", answer);
    cr_assert_eq(fake_count(up), 2);
    free(body);

    body = body_of_size(MAX_BODY + 1);
    snprintf(head, sizeof(head),
             "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: " GATEWAY_KEY
             "\r\nconnection: close\r\ncontent-length: %d\r\n\r\n",
             MAX_BODY + 1);
    answer = post_whole(head, body, MAX_BODY + 1, &sent_all);
    free(body);
    cr_assert(starts_with(answer, "HTTP/1.1 413 "), "%.500s", answer);
    expect_in(answer, "the request body has 1048577 bytes; the limit is 1048576");
    cr_assert_eq(fake_count(up), 2);
}

/* Runs curl over HTTP/2 in the clear with a body of size bytes; its output (the answer, then the status). */
static const char *
curl_http2(const char *path, const char *key_header, size_t size)
{
    char *body = body_of_size(size);
    const char *file = write_temp_file(2, body);
    free(body);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 10 --http2-prior-knowledge -o - -w '\\n%%{http_version} %%{http_code} "
             "%%{exitcode}' "
             "-H '%s' --data-binary @%s http://127.0.0.1:%u%s",
             key_header, file, port, path);
    FILE *p = popen(cmd, "r");
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    pclose(p);
    return out;
}

Test(refusals, an_http2_body_over_the_limit_gets_413_in_the_dialect)
{
    const char *out = curl_http2("/v1beta/models/gemini-x:generateContent", "x-goog-api-key: " GATEWAY_KEY,
                                 MAX_BODY + MAX_BODY / 2);
    expect_in(
        out,
        "{\"error\":{\"code\":413,\"message\":\"sluice: the request body has 1572864 bytes; the limit "
        "is 1048576\",\"status\":\"INVALID_ARGUMENT\",\"details\":[{\"reason\":\"gw.request.too_large\"}]}}");
    expect_in(out, "\n2 413 0");
    /* Past twice the limit h2o 2.2.5 resets the stream itself (REFUSED_STREAM): no answer, and curl says so.
     */
    out = curl_http2("/v1/messages", "x-api-key: " GATEWAY_KEY, 3 * MAX_BODY);
    cr_assert(strstr(out, "\n2 413") == NULL && strstr(out, "text/plain") == NULL, "%s", out);
    cr_assert_eq(fake_count(up), 0);
}

/* Sends raw bytes on a fresh connection and reads what comes back until it closes. */
static const char *
exchange(const char *bytes, size_t len)
{
    int fd = connect_gateway();
    cr_assert(send_all(fd, bytes, len));
    const char *answer = read_all(fd);
    close(fd);
    return answer;
}

#define EXCHANGE(lit) exchange(lit, sizeof(lit) - 1)

Test(refusals, broken_http1_framing_is_answered_in_the_dialect_of_the_path)
{
    const char *a = EXCHANGE("POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                             "zz\r\nabc\r\n");
    cr_assert(starts_with(a, "HTTP/1.1 400 Bad Request\r\n"), "%s", a);
    expect_in(a, "x-sluice-error: gw.request.malformed_http\r\n");
    expect_in(
        a, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"sluice: the "
           "request is not valid HTTP: broken chunked-encoding\",\"code\":\"gw.request.malformed_http\"}}");

    a = EXCHANGE("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip\r\n\r\n");
    cr_assert(starts_with(a, "HTTP/1.1 400 "), "%s", a);
    expect_in(a,
              "{\"error\":{\"message\":\"sluice: the request is not valid HTTP: unknown transfer-encoding\"");

    a = EXCHANGE("POST /v1beta/models/g:generateContent HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n");
    cr_assert(starts_with(a, "HTTP/1.1 400 "), "%s", a);
    expect_in(a, "\"status\":\"INVALID_ARGUMENT\",\"details\":[{\"reason\":\"gw.request.malformed_http\"}]");
    expect_in(a, "broken content-length header");

    a = EXCHANGE("POST /model/m/converse HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nexpect: magic\r\n\r\n");
    cr_assert(starts_with(a, "HTTP/1.1 417 Expectation Failed\r\n"), "%s", a);
    expect_in(a, "x-sluice-error: gw.request.bad_expectation\r\n");
    expect_in(a, "x-amzn-errortype: ValidationException\r\n");
    expect_in(a, "{\"message\":\"sluice: the request expects something other than 100-continue");
    cr_assert_eq(fake_count(up), 0);
}

Test(refusals, a_first_head_that_is_not_http_gets_a_json_error_with_a_code)
{
    /* A TLS ClientHello sent to the clear-text port is the usual way to get here. */
    const char *a = EXCHANGE("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 hello\r\n\r\n");
    cr_assert(starts_with(a, "HTTP/1.1 400 Bad Request\r\n"), "%s", a);
    expect_in(a, "x-sluice-error: gw.request.malformed_http\r\n");
    expect_in(a,
              "{\"error\":{\"message\":\"sluice: the request is not valid HTTP: the request line or a header "
              "cannot be parsed\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":"
              "\"gw.request.malformed_http\"}}");
    a = EXCHANGE("HELLO THERE\r\n\r\n");
    expect_in(a, "x-sluice-error: gw.request.malformed_http\r\n");
}

Test(refusals, a_first_head_over_the_limit_gets_431_with_a_code)
{
    /* More headers than h2o takes (100), and then a head longer than its 417 792 bytes. */
    static char head[600 * 1024];
    int n = snprintf(head, sizeof(head), "GET /v1/models HTTP/1.1\r\nhost: x\r\n");
    for (int i = 0; i < 120; i++)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "x-h%d: v\r\n", i);
    n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
    const char *a = exchange(head, (size_t)n);
    cr_assert(starts_with(a, "HTTP/1.1 431 "), "%s", a);
    expect_in(a, "x-sluice-error: gw.request.head_too_large\r\n");

    n = snprintf(head, sizeof(head), "GET /v1/models HTTP/1.1\r\nhost: x\r\nx-long: ");
    memset(head + n, 'v', 500 * 1024);
    n += 500 * 1024;
    n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n\r\n");
    a = exchange(head, (size_t)n);
    cr_assert(starts_with(a, "HTTP/1.1 431 "), "%s", a);
    expect_in(a, "\"code\":\"gw.request.head_too_large\"");
}

/* An HTTP/2 frame: 9-byte header then payload. */
static size_t
h2_frame(char *out, uint8_t type, uint8_t flags, uint32_t stream, const char *payload, size_t len)
{
    out[0] = (char)(len >> 16);
    out[1] = (char)(len >> 8);
    out[2] = (char)len;
    out[3] = (char)type;
    out[4] = (char)flags;
    out[5] = (char)(stream >> 24);
    out[6] = (char)(stream >> 16);
    out[7] = (char)(stream >> 8);
    out[8] = (char)stream;
    memcpy(out + 9, payload, len);
    return 9 + len;
}

Test(refusals, http2_header_bytes_h2o_rejects_are_answered_in_the_dialect)
{
    /* HPACK without Huffman: :method POST, :scheme http (static), :path and :authority literal, and a header
     * whose value holds a control byte (h2o answers those with its own 400). */
    static const char block[] = "\x83\x86"
                                "\x04\x0c/v1/messages"
                                "\x01\x01x"
                                "\x00\x05x-bad\x03\x61\x01\x62";
    char req[512];
    size_t n = 0;
    memcpy(req, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    n += 24;
    n += h2_frame(req + n, 4 /* SETTINGS */, 0, 0, "", 0);
    n += h2_frame(req + n, 1 /* HEADERS */, 0x5 /* END_STREAM | END_HEADERS */, 1, block, sizeof(block) - 1);
    int fd = connect_gateway();
    cr_assert(send_all(fd, req, n));
    /* Read frames until stream 1 ends; collect its DATA. */
    static char in[1 << 16], data[8192];
    size_t have = 0, data_len = 0;
    bool ended = false;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    while (!ended && poll(&pfd, 1, 5000) == 1) {
        ssize_t r = read(fd, in + have, sizeof(in) - have);
        if (r <= 0)
            break;
        have += (size_t)r;
        size_t at = 0;
        while (have - at >= 9) {
            size_t len =
                ((size_t)(uint8_t)in[at] << 16) | ((size_t)(uint8_t)in[at + 1] << 8) | (uint8_t)in[at + 2];
            if (have - at < 9 + len)
                break;
            uint8_t type = (uint8_t)in[at + 3], flags = (uint8_t)in[at + 4];
            uint32_t stream = ((uint32_t)(uint8_t)in[at + 5] << 24 | (uint32_t)(uint8_t)in[at + 6] << 16 |
                               (uint32_t)(uint8_t)in[at + 7] << 8 | (uint8_t)in[at + 8]) &
                              0x7fffffff;
            if (stream == 1 && type == 0 /* DATA */ && data_len + len < sizeof(data)) {
                memcpy(data + data_len, in + at + 9, len);
                data_len += len;
            }
            cr_assert_neq(type, 3 /* RST_STREAM */, "the stream was reset");
            if (stream == 1 && (flags & 0x1))
                ended = true;
            at += 9 + len;
        }
        memmove(in, in + at, have - at);
        have -= at;
    }
    close(fd);
    data[data_len] = '\0';
    cr_assert(ended, "stream 1 never ended");
    expect_in(data,
              "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"sluice: the "
              "request is not valid HTTP: found an invalid character in header value\",\"code\":"
              "\"gw.request.malformed_http\"}}");
}
