/*
 * Upstream TLS end to end: sluice must verify the upstream's certificate
 * chain and its name before it sends a request. The trap (stack-notes.md):
 * on TLS 1.3 h2o 2.2.5 skips its own host-name check, so the wrong-name
 * cases run against upstreams forced to TLS 1.3. Upstreams named by address
 * use fake_upstream.c; upstreams named "localhost" and the TLS 1.2 cases use
 * a small server of this file pinned to one version. Certificates are made
 * at test time (certs.c); the gateway trusts the test CA through
 * SSL_CERT_FILE, which it inherits from this process.
 */
#define _GNU_SOURCE /* strcasestr, pipe2 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "certs.h"
#include "fake_upstream.h"
#include "harness.h"

#define GATEWAY_KEY       "gw-test-key-0001"
#define ANTHROPIC_HEADERS "x-api-key: " GATEWAY_KEY "\r\nanthropic-version: 2023-06-01\r\n"
#define UNVERIFIED        "the request went over an unverified connection"

static const char request_body[] = "{\"model\":\"claude-x\",\"max_tokens\":5,\"messages\":"
                                   "[{\"role\":\"user\",\"content\":\"hi\"}]}";
static const char answer[] =
    "{\"id\":\"msg_tls\",\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"over tls\"}]}";

/*
 * A TLS server pinned to one protocol version, on 127.0.0.1 and, where the
 * host has it, ::1 on the same port (a "localhost" upstream resolves to
 * either). fake_upstream.c cannot be capped at TLS 1.2 and listens on
 * 127.0.0.1 only. One connection at a time; every request gets `answer`.
 */
typedef struct {
    int fds[2];
    size_t n_fds;
    int stop_pipe[2];
    uint16_t port;
    SSL_CTX *ctx;
    pthread_t tid;
    pthread_mutex_t lock;
    int version;  /* of the last completed handshake, 0 before one */
    int requests; /* complete requests read */
    bool running; /* its thread started: teardown stops it */
} tls_server_t;

static test_ca_t *trusted_ca, *other_ca;
static pem_pair_t good_leaf;  /* IP 127.0.0.1 and DNS localhost, signed by trusted_ca */
static pem_pair_t wrong_leaf; /* only DNS wrong.example, signed by trusted_ca */
static proc_t proc;
static fake_upstream_t *tls_up, *plain_up;
static tls_server_t server;
static http_response_t res;
static uint16_t port;
static char store_path[64]; /* the gateway's request DB, whose SQLite side files outlive it */

static void server_stop(void);

static void
setup(void)
{
    /* Closing a TLS connection the gateway already dropped writes a close_notify through OpenSSL's
     * socket BIO (no MSG_NOSIGNAL there), which would kill the test process. sluice ignores SIGPIPE
     * itself, so the disposition it inherits changes nothing for it. */
    signal(SIGPIPE, SIG_IGN);
    trusted_ca = ca_create("sluice test CA");
    other_ca = ca_create("sluice other test CA");
    good_leaf = ca_issue(trusted_ca, "IP:127.0.0.1,DNS:localhost");
    wrong_leaf = ca_issue(trusted_ca, "DNS:wrong.example");
    /* SSL_CTX_set_default_verify_paths in the gateway reads it; proc_start's execv passes environ on. */
    setenv("SSL_CERT_FILE", ca_cert_file(trusted_ca), 1);
}

static void
teardown(void)
{
    proc_kill(&proc);
    if (tls_up != NULL)
        fake_stop(tls_up);
    if (plain_up != NULL)
        fake_stop(plain_up);
    if (server.running)
        server_stop();
    http_response_free(&res);
    /* remove_temp_files unlinks the DB itself but not the -wal and -shm a killed sluice leaves. */
    for (size_t i = 0; store_path[0] != '\0' && i < 2; i++) {
        char side[80];
        snprintf(side, sizeof(side), "%s%s", store_path, i == 0 ? "-wal" : "-shm");
        unlink(side);
    }
    remove_temp_files();
    pem_pair_remove(&good_leaf);
    pem_pair_remove(&wrong_leaf);
    ca_free(trusted_ca);
    ca_free(other_ca);
}

TestSuite(tls, .init = setup, .fini = teardown, .timeout = 60);

/* Reads one request (head and Content-Length body); false when the peer went away first. */
static bool
read_request(SSL *ssl)
{
    char buf[65536];
    size_t have = 0;
    for (;;) {
        buf[have] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end != NULL) {
            const char *cl = strcasestr(buf, "\r\ncontent-length:");
            size_t need = (size_t)(end + 4 - buf) + (cl != NULL ? strtoul(cl + 17, NULL, 10) : 0);
            if (have >= need)
                return true;
        }
        if (have == sizeof(buf) - 1)
            return false;
        int n = SSL_read(ssl, buf + have, (int)(sizeof(buf) - 1 - have));
        if (n <= 0)
            return false;
        have += (size_t)n;
    }
}

static void
serve_connection(tls_server_t *s, int fd)
{
    /* Bounds a gateway that connects and then says nothing. */
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    SSL *ssl = SSL_new(s->ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
        pthread_mutex_lock(&s->lock);
        s->version = SSL_version(ssl);
        pthread_mutex_unlock(&s->lock);
        if (read_request(ssl)) {
            pthread_mutex_lock(&s->lock);
            s->requests++;
            pthread_mutex_unlock(&s->lock);
            char head[256];
            int n = snprintf(head, sizeof(head),
                             "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             "content-length: %zu\r\nconnection: close\r\n\r\n",
                             strlen(answer));
            SSL_write(ssl, head, n);
            SSL_write(ssl, answer, (int)strlen(answer));
        }
        SSL_shutdown(ssl);
    }
    SSL_free(ssl);
    close(fd);
}

static void *
server_main(void *arg)
{
    tls_server_t *s = arg;
    for (;;) {
        struct pollfd pfds[3] = {{s->stop_pipe[0], POLLIN, 0}, {s->fds[0], POLLIN, 0}, {-1, POLLIN, 0}};
        if (s->n_fds == 2)
            pfds[2].fd = s->fds[1];
        if (poll(pfds, 3, -1) < 0 && errno != EINTR)
            return NULL;
        if (pfds[0].revents)
            return NULL;
        for (size_t i = 1; i < 3; i++) {
            int fd = pfds[i].revents & POLLIN ? accept4(pfds[i].fd, NULL, NULL, SOCK_CLOEXEC) : -1;
            if (fd >= 0)
                serve_connection(s, fd);
        }
    }
}

/* Listens on family's loopback at port (0: any); returns the socket, or -1 when the host lacks it. */
static int
listen_loopback(int family, uint16_t *port_io)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        *sin = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(*port_io)};
        inet_pton(AF_INET, "127.0.0.1", &sin->sin_addr);
        len = sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        *sin6 = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_port = htons(*port_io)};
        sin6->sin6_addr = in6addr_loopback;
        len = sizeof(*sin6);
    }
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port_io = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                       : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return fd;
}

static void
server_start(const pem_pair_t *leaf, int version)
{
    tls_server_t *s = &server;
    pthread_mutex_init(&s->lock, NULL);
    s->ctx = SSL_CTX_new(TLS_server_method());
    cr_assert_not_null(s->ctx);
    SSL_CTX_set_min_proto_version(s->ctx, version);
    SSL_CTX_set_max_proto_version(s->ctx, version);
    cr_assert_eq(SSL_CTX_use_certificate_chain_file(s->ctx, leaf->cert_file), 1);
    cr_assert_eq(SSL_CTX_use_PrivateKey_file(s->ctx, leaf->key_file, SSL_FILETYPE_PEM), 1);
    s->fds[0] = listen_loopback(AF_INET, &s->port);
    cr_assert_geq(s->fds[0], 0, "listen: %s", strerror(errno));
    s->n_fds = 1;
    int v6 = listen_loopback(AF_INET6, &s->port);
    if (v6 >= 0)
        s->fds[s->n_fds++] = v6;
    cr_assert_eq(pipe2(s->stop_pipe, O_CLOEXEC), 0);
    cr_assert_eq(pthread_create(&s->tid, NULL, server_main, s), 0);
    s->running = true;
}

static int
server_read(const int *field)
{
    pthread_mutex_lock(&server.lock);
    int v = *field;
    pthread_mutex_unlock(&server.lock);
    return v;
}

static void
server_stop(void)
{
    tls_server_t *s = &server;
    if (write(s->stop_pipe[1], "x", 1) != 1)
        abort();
    pthread_join(s->tid, NULL);
    for (size_t i = 0; i < s->n_fds; i++)
        close(s->fds[i]);
    close(s->stop_pipe[0]);
    close(s->stop_pipe[1]);
    SSL_CTX_free(s->ctx);
    pthread_mutex_destroy(&s->lock);
    memset(s, 0, sizeof(*s));
}

/* Starts sluice with https upstream up1 at host:tls_port and, when plain_port is not 0, a plaintext
 * up2 on 127.0.0.1 tried after it. Debug logging names the reason of every failed hop. */
static void
start_gateway(const char *host, uint16_t tls_port, uint16_t plain_port)
{
    char up2[256] = "";
    if (plain_port != 0)
        snprintf(up2, sizeof(up2),
                 "  - {name: up2, protocol: anthropic, base_url: \"http://127.0.0.1:%u\", key: k2}\n",
                 plain_port);
    snprintf(store_path, sizeof(store_path), "%s", write_temp_file(1, ""));
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
             "providers:\n"
             "  - {name: up1, protocol: anthropic, base_url: \"https://%s:%u\", key: k1}\n"
             "%s"
             "failover: {wait_secs: 0}\n"
             "store: {path: %s}\n",
             host, tls_port, up2, store_path);
    port = sluice_start(&proc, write_temp_file(0, yaml), "debug", NULL);
    cr_assert_neq(port, 0, "sluice did not start:\n%s", proc.log);
}

static void
push_answer(fake_upstream_t *f)
{
    fake_push(f,
              (fake_reply_t){.status = 200, .headers = "content-type: application/json\r\n", .body = answer});
}

static void
request(void)
{
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, request_body, &res),
              "no answer from sluice:\n%s", proc.log);
}

static void
assert_served(void)
{
    cr_assert_eq(res.status, 200, "%s\n%s\nsluice log:\n%s", res.headers, res.body, proc.log);
    cr_assert_str_eq(res.body, answer);
}

/* The single upstream was refused: the client gets the gateway's connect failure. */
static void
assert_refused_as_connect_failure(void)
{
    cr_assert_eq(res.status, 502, "%s\n%s\nsluice log:\n%s", res.headers, res.body, proc.log);
    char code[128];
    cr_assert(http_header(&res, "x-sluice-error", code, sizeof(code)), "%s", res.headers);
    cr_assert_str_eq(code, "gw.upstream.connect_failed");
}

/* The failed hop is logged with OpenSSL's verify reason, which tells our check apart from h2o's own
 * ("certificate name mismatch") and from a handshake that failed for another reason. */
static void
assert_logged(const char *reason)
{
    cr_assert(proc_wait_log(&proc, reason, 2000), "no \"%s\" in the sluice log:\n%s", reason, proc.log);
}

Test(tls, tls13_upstream_with_a_valid_certificate_is_served)
{
    tls_up = fake_start(good_leaf.cert_file, good_leaf.key_file, true);
    push_answer(tls_up);
    start_gateway("127.0.0.1", fake_port(tls_up), 0);
    request();
    assert_served();
    fake_request_t r;
    cr_assert(fake_request(tls_up, 0, &r));
    cr_assert_str_eq(r.body, request_body);
}

Test(tls, tls13_wrong_name_certificate_is_refused_before_the_request_is_sent)
{
    tls_up = fake_start(wrong_leaf.cert_file, wrong_leaf.key_file, true);
    push_answer(tls_up);
    start_gateway("127.0.0.1", fake_port(tls_up), 0);
    request();
    assert_refused_as_connect_failure();
    cr_assert_not(fake_wait_count(tls_up, 1, 300), UNVERIFIED);
    assert_logged("hostname mismatch");
}

Test(tls, tls13_wrong_name_certificate_fails_over_to_the_next_upstream)
{
    tls_up = fake_start(wrong_leaf.cert_file, wrong_leaf.key_file, true);
    plain_up = fake_start(NULL, NULL, false);
    push_answer(tls_up);
    push_answer(plain_up);
    start_gateway("127.0.0.1", fake_port(tls_up), fake_port(plain_up));
    request();
    assert_served();
    cr_assert_eq(fake_count(plain_up), 1);
    cr_assert_eq(fake_count(tls_up), 0, UNVERIFIED);
    assert_logged("hostname mismatch");
}

Test(tls, tls13_address_named_only_in_a_dns_san_is_refused)
{
    /* An address must match an iPAddress entry (RFC 6125); a DNS entry spelling it does not count. */
    pem_pair_t dns_spelled = ca_issue(trusted_ca, "DNS:127.0.0.1");
    tls_up = fake_start(dns_spelled.cert_file, dns_spelled.key_file, true);
    pem_pair_remove(&dns_spelled);
    push_answer(tls_up);
    start_gateway("127.0.0.1", fake_port(tls_up), 0);
    request();
    assert_refused_as_connect_failure();
    cr_assert_not(fake_wait_count(tls_up, 1, 300), UNVERIFIED);
    assert_logged("hostname mismatch");
}

Test(tls, tls13_certificate_from_an_untrusted_ca_is_refused)
{
    setenv("SSL_CERT_FILE", ca_cert_file(other_ca), 1);
    tls_up = fake_start(good_leaf.cert_file, good_leaf.key_file, true);
    push_answer(tls_up);
    start_gateway("127.0.0.1", fake_port(tls_up), 0);
    request();
    assert_refused_as_connect_failure();
    cr_assert_not(fake_wait_count(tls_up, 1, 300), UNVERIFIED);
    assert_logged("unable to get local issuer certificate");
}

Test(tls, tls13_certificate_with_the_right_name_from_an_untrusted_ca_fails_over)
{
    pem_pair_t foreign = ca_issue(other_ca, "IP:127.0.0.1,DNS:localhost");
    tls_up = fake_start(foreign.cert_file, foreign.key_file, true);
    pem_pair_remove(&foreign);
    plain_up = fake_start(NULL, NULL, false);
    push_answer(tls_up);
    push_answer(plain_up);
    start_gateway("127.0.0.1", fake_port(tls_up), fake_port(plain_up));
    request();
    assert_served();
    cr_assert_eq(fake_count(plain_up), 1);
    cr_assert_eq(fake_count(tls_up), 0, UNVERIFIED);
    assert_logged("unable to get local issuer certificate");
}

/* Real providers are named by DNS: the same trap through X509_check_host. */
Test(tls, tls13_upstream_named_by_dns_with_a_valid_certificate_is_served)
{
    server_start(&good_leaf, TLS1_3_VERSION);
    start_gateway("localhost", server.port, 0);
    request();
    assert_served();
    cr_assert_eq(server_read(&server.requests), 1);
    cr_assert_eq(server_read(&server.version), TLS1_3_VERSION);
}

Test(tls, tls13_upstream_named_by_dns_with_a_wrong_name_certificate_is_refused)
{
    server_start(&wrong_leaf, TLS1_3_VERSION);
    start_gateway("localhost", server.port, 0);
    request();
    assert_refused_as_connect_failure();
    usleep(300 * 1000);
    cr_assert_eq(server_read(&server.requests), 0, UNVERIFIED);
    assert_logged("hostname mismatch");
}

/* The control for the 1.2 cases: the pinned server and the gateway do complete a 1.2 handshake. */
Test(tls, tls12_upstream_named_by_dns_with_a_valid_certificate_is_served)
{
    server_start(&good_leaf, TLS1_2_VERSION);
    start_gateway("localhost", server.port, 0);
    request();
    assert_served();
    cr_assert_eq(server_read(&server.requests), 1);
    cr_assert_eq(server_read(&server.version), TLS1_2_VERSION);
}

Test(tls, tls12_upstream_named_by_dns_with_a_wrong_name_certificate_is_refused)
{
    server_start(&wrong_leaf, TLS1_2_VERSION);
    start_gateway("localhost", server.port, 0);
    request();
    assert_refused_as_connect_failure();
    usleep(300 * 1000);
    cr_assert_eq(server_read(&server.requests), 0, UNVERIFIED);
    assert_logged("hostname mismatch");
}

Test(tls, tls12_upstream_named_by_address_is_refused_because_address_names_need_tls13)
{
    /* h2o's own TLS 1.2 name check knows only DNS names; sluice asks address-named upstreams for TLS 1.3. */
    server_start(&good_leaf, TLS1_2_VERSION);
    start_gateway("127.0.0.1", server.port, 0);
    request();
    assert_refused_as_connect_failure();
}

Test(tls, the_gateway_listener_serves_https_and_http2)
{
    char yaml[1024];
    snprintf(store_path, sizeof(store_path), "%s", write_temp_file(1, ""));
    snprintf(yaml, sizeof(yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0, tls: {cert: \"%s\", key: \"%s\"}}, control: "
             "{port: 0}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
             "store: {path: %s}\n",
             good_leaf.cert_file, good_leaf.key_file, store_path);
    const char *args[] = {"--config", write_temp_file(0, yaml), NULL};
    proc_start(&proc, args);
    cr_assert(proc_wait_log(&proc, "serving on https://127.0.0.1:", 5000), "%s", proc.log);
    const char *at = strstr(proc.log, "https://127.0.0.1:") + strlen("https://127.0.0.1:");
    port = (uint16_t)atoi(at);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 10 --http2 --cacert '%s' -o - -w ' %%{http_version}' "
             "https://127.0.0.1:%u/healthz",
             ca_cert_file(trusted_ca), port);
    FILE *p = popen(cmd, "r");
    char out[256] = "";
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    pclose(p);
    cr_assert_str_eq(out, "{\"status\":\"ok\"} 2", "ALPN picks HTTP/2 over TLS");
}
