#define _GNU_SOURCE /* strcasestr, pipe2 */
#include "fake_upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS    2048 /* every connection of a test, counted from the start */
#define MAX_REQUESTS 1024
#define MAX_QUEUE    256

typedef struct {
    fake_upstream_t *fake;
    int fd;
    SSL *ssl;
    pthread_t tid;
} conn_t;

struct fake_upstream {
    int listen_fd;
    uint16_t port;
    int stop_pipe[2];
    SSL_CTX *ssl_ctx;
    pthread_t accept_tid;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool stopping;
    conn_t *conns[MAX_CONNS];
    size_t n_conns;
    fake_reply_t queue[MAX_QUEUE];
    size_t queue_head, queue_len;
    fake_reply_t default_reply;
    fake_request_t requests[MAX_REQUESTS];
    size_t n_requests;
    _Atomic size_t bytes_sent;
};

static void
fail(const char *what)
{
    fprintf(stderr, "fake upstream: %s: %s\n", what, strerror(errno));
    abort();
}

static ssize_t
conn_read(conn_t *c, char *buf, size_t n)
{
    if (c->ssl != NULL) {
        int r = SSL_read(c->ssl, buf, (int)n);
        return r > 0 ? r : -1;
    }
    ssize_t r;
    while ((r = read(c->fd, buf, n)) < 0 && errno == EINTR)
        ;
    return r;
}

static bool
conn_write(conn_t *c, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = c->ssl != NULL ? SSL_write(c->ssl, buf, (int)n) : send(c->fd, buf, n, MSG_NOSIGNAL);
        if (w <= 0) {
            if (c->ssl == NULL && w < 0 && errno == EINTR)
                continue;
            return false;
        }
        buf += w;
        n -= (size_t)w;
        c->fake->bytes_sent += (size_t)w;
    }
    return true;
}

/* Sleeps, but wakes at once when the fake stops; returns false when stopping. */
static bool
pause_ms(fake_upstream_t *f, int ms)
{
    struct pollfd pfd = {f->stop_pipe[0], POLLIN, 0};
    return ms <= 0 || poll(&pfd, 1, ms) == 0;
}

static fake_reply_t
next_reply(fake_upstream_t *f)
{
    pthread_mutex_lock(&f->lock);
    fake_reply_t r = f->default_reply;
    if (f->queue_len > 0) {
        r = f->queue[f->queue_head];
        f->queue_head = (f->queue_head + 1) % MAX_QUEUE;
        f->queue_len--;
    }
    pthread_mutex_unlock(&f->lock);
    return r;
}

static void
record(fake_upstream_t *f, const char *head, size_t head_len, const char *body, size_t body_len)
{
    pthread_mutex_lock(&f->lock);
    if (f->n_requests < MAX_REQUESTS) {
        fake_request_t *r = &f->requests[f->n_requests];
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r->at_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        sscanf(head, "%15s %511s", r->method, r->path);
        const char *lines = strstr(head, "\r\n");
        snprintf(r->headers, sizeof(r->headers), "%.*s",
                 lines ? (int)(head_len - (size_t)(lines + 2 - head)) : 0, lines ? lines + 2 : "");
        r->body = malloc(body_len + 1);
        memcpy(r->body, body, body_len);
        r->body[body_len] = '\0';
        r->body_len = body_len;
        f->n_requests++;
        pthread_cond_broadcast(&f->changed);
    }
    pthread_mutex_unlock(&f->lock);
}

/* Sends the body: whole, or chunked one SSE event per chunk; stops early at cut_after. Without end, a chunked
 * body's last chunk is left out (the stream stays open). */
static bool
send_body(fake_upstream_t *f, conn_t *c, const fake_reply_t *r, const char *body, size_t len, bool end)
{
    size_t limit = r->cut_after > 0 && r->cut_after < len ? r->cut_after : len;
    if (!r->chunked)
        return conn_write(c, body, limit) && limit == len;
    size_t off = 0;
    while (off < limit) {
        /* memmem, not strstr: the search stays within the body (and cheap under ASan). */
        const char *end = memmem(body + off, len - off, "\n\n", 2);
        size_t n = end != NULL ? (size_t)(end + 2 - (body + off)) : len - off;
        size_t announced = n;
        if (off + n > limit)
            n = limit - off;
        char size_line[32];
        snprintf(size_line, sizeof(size_line), "%zx\r\n", r->cut_mid_chunk ? announced : n);
        if (!conn_write(c, size_line, strlen(size_line)) || !conn_write(c, body + off, n) ||
            (n < announced && r->cut_mid_chunk) || !conn_write(c, "\r\n", 2))
            return false;
        off += n;
        if (off < limit && !pause_ms(f, r->delay_ms))
            return false;
    }
    if (limit < len)
        return false;
    return !end || conn_write(c, "0\r\n\r\n", 5);
}

/*
 * Resets the connection: with SO_LINGER 0 the socket's last close sends an RST. The descriptor is
 * replaced by /dev/null rather than closed, so c->fd stays valid for fake_stop (and is not reused).
 */
static void
reset_conn(conn_t *c)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0 || dup2(devnull, c->fd) < 0)
        fail("reset");
    close(devnull);
}

/* A head whose last header line never ends: 'a's as fast as the peer takes them (at most 16 GiB). */
static void
send_endless_head(conn_t *c)
{
    static const char start[] = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-endless: ";
    enum { BLOCK = 64 << 10 };
    char *block = malloc(BLOCK);
    memset(block, 'a', BLOCK);
    if (conn_write(c, start, sizeof(start) - 1)) {
        for (uint64_t sent = 0; sent < (16ull << 30) && conn_write(c, block, BLOCK); sent += BLOCK)
            ;
    }
    free(block);
}

/* Writes one chunk of chunked transfer coding. */
static bool
write_chunk(conn_t *c, const char *data, size_t n)
{
    char size_line[32];
    snprintf(size_line, sizeof(size_line), "%zx\r\n", n);
    return conn_write(c, size_line, strlen(size_line)) && conn_write(c, data, n) && conn_write(c, "\r\n", 2);
}

/*
 * A whole Anthropic stream of about total bytes: its opening, ~64 KiB chunks of 1 KiB text deltas (one
 * block built once and sent again and again, so nothing of the size of the stream is ever held), its end.
 */
static bool
send_huge_stream(conn_t *c, uint64_t total)
{
    static const char head[] = "HTTP/1.1 200 Fake\r\ncontent-type: text/event-stream\r\n"
                               "transfer-encoding: chunked\r\n\r\n";
    static const char opening[] =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_huge\","
        "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-x\","
        "\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
        "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
    static const char ending[] =
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
        "\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\n"
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    char delta[1100];
    int n = snprintf(delta, sizeof(delta),
                     "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
                     "\"delta\":{\"type\":\"text_delta\",\"text\":\"%0960d\"}}\n\n",
                     7);
    size_t per_block = (64u << 10) / (size_t)n, block_len = per_block * (size_t)n;
    char *block = malloc(block_len);
    for (size_t i = 0; i < per_block; i++)
        memcpy(block + i * (size_t)n, delta, (size_t)n);
    bool ok = conn_write(c, head, sizeof(head) - 1) && write_chunk(c, opening, sizeof(opening) - 1);
    for (uint64_t sent = sizeof(opening) - 1; ok && sent < total; sent += block_len)
        ok = write_chunk(c, block, block_len);
    free(block);
    return ok && write_chunk(c, ending, sizeof(ending) - 1) && conn_write(c, "0\r\n\r\n", 5);
}

static bool
answer(fake_upstream_t *f, conn_t *c, const fake_reply_t *r)
{
    switch (r->action) {
    case FAKE_CLOSE_BEFORE_HEAD:
        pause_ms(f, r->delay_ms);
        return false;
    case FAKE_HANG:
        pause_ms(f, 60000);
        return false;
    case FAKE_RESET_BEFORE_HEAD:
        if (c->ssl == NULL)
            reset_conn(c);
        return false;
    case FAKE_RESET_MID_HEAD: {
        static const char half[] = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-le";
        /* The half head goes out on its own, so sluice reads it before the reset. */
        if (conn_write(c, half, sizeof(half) - 1) && pause_ms(f, 50) && c->ssl == NULL)
            reset_conn(c);
        return false;
    }
    case FAKE_GARBAGE:
        conn_write(c, r->body != NULL ? r->body : "",
                   r->body_len > 0 ? r->body_len : strlen(r->body ? r->body : ""));
        pause_ms(f, 50);
        return false;
    case FAKE_ENDLESS_HEAD:
        send_endless_head(c);
        return false;
    case FAKE_HUGE_STREAM:
        return send_huge_stream(c, r->huge_bytes);
    default:
        break;
    }
    if (!pause_ms(f, r->delay_ms))
        return false;
    const char *body = r->body != NULL ? r->body : "";
    size_t len = r->body_len > 0 ? r->body_len : strlen(body);
    char head[4096];
    int n = snprintf(head, sizeof(head), "HTTP/1.1 %d Fake\r\n%s", r->status ? r->status : 200,
                     r->headers != NULL ? r->headers : "");
    if (r->chunked)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "transfer-encoding: chunked\r\n\r\n");
    else if (r->until_close)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
    else
        n += snprintf(head + n, sizeof(head) - (size_t)n, "content-length: %zu\r\n\r\n", len);
    if (r->action == FAKE_SILENT_AFTER_HEAD) {
        /* Everything but the end: the stream stays open and says nothing more. */
        if (conn_write(c, head, (size_t)n))
            send_body(f, c, r, body, len, false);
        pause_ms(f, 60000);
        return false;
    }
    return conn_write(c, head, (size_t)n) && send_body(f, c, r, body, len, true) && !r->until_close &&
           !r->close_after;
}

static size_t
content_length(const char *head)
{
    const char *p = strcasestr(head, "\r\ncontent-length:");
    return p != NULL ? (size_t)strtoul(p + 17, NULL, 10) : 0;
}

/* buf grown to at least need bytes (doubling, at most 4 MiB); *cap is its size now. */
static char *
grow(char *buf, size_t *cap, size_t need)
{
    size_t to = *cap;
    while (to < need)
        to *= 2;
    if (to > (4 << 20))
        to = 4 << 20;
    *cap = to;
    return realloc(buf, to);
}

static void *
conn_main(void *arg)
{
    conn_t *c = arg;
    fake_upstream_t *f = c->fake;
    /*
     * Up to 4 MiB (the largest request bodies the tests send are a little
     * over 1 MiB), grown as needed: a buffer of the most at once costs each
     * connection its memset under meson's MALLOC_PERTURB_, enough to make the
     * fake lag behind the arrivals it times.
     */
    enum { BUF_SIZE = 4 << 20 };
    size_t cap = 64 << 10;
    char *buf = malloc(cap);
    if (c->ssl != NULL && SSL_accept(c->ssl) != 1)
        goto done;
    size_t have = 0;
    for (;;) {
        char *end;
        while ((end = memmem(buf, have, "\r\n\r\n", 4)) == NULL) {
            if (have == BUF_SIZE - 1)
                goto done;
            if (have == cap - 1)
                buf = grow(buf, &cap, cap * 2);
            ssize_t r = conn_read(c, buf + have, cap - 1 - have);
            if (r <= 0)
                goto done;
            have += (size_t)r;
        }
        size_t head_len = (size_t)(end + 4 - buf);
        buf[head_len - 1] = '\0';
        size_t body_len = content_length(buf);
        if (head_len + body_len > BUF_SIZE - 1)
            goto done;
        if (head_len + body_len > cap - 1)
            buf = grow(buf, &cap, head_len + body_len + 1);
        while (have < head_len + body_len) {
            ssize_t r = conn_read(c, buf + have, cap - 1 - have);
            if (r <= 0)
                goto done;
            have += (size_t)r;
        }
        record(f, buf, head_len - 4, buf + head_len, body_len);
        fake_reply_t reply = next_reply(f);
        if (!answer(f, c, &reply))
            goto done;
        memmove(buf, buf + head_len + body_len, have - head_len - body_len);
        have -= head_len + body_len;
    }
done:
    free(buf);
    if (c->ssl != NULL) {
        SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    shutdown(c->fd, SHUT_RDWR);
    return NULL;
}

static void *
accept_main(void *arg)
{
    fake_upstream_t *f = arg;
    for (;;) {
        struct pollfd pfds[2] = {{f->listen_fd, POLLIN, 0}, {f->stop_pipe[0], POLLIN, 0}};
        if (poll(pfds, 2, -1) < 0 && errno != EINTR)
            fail("poll");
        if (pfds[1].revents)
            return NULL;
        if (!(pfds[0].revents & POLLIN))
            continue;
        int fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conn_t *c = calloc(1, sizeof(*c));
        c->fake = f;
        c->fd = fd;
        if (f->ssl_ctx != NULL) {
            c->ssl = SSL_new(f->ssl_ctx);
            SSL_set_fd(c->ssl, fd);
        }
        pthread_mutex_lock(&f->lock);
        if (f->stopping || f->n_conns == MAX_CONNS) {
            pthread_mutex_unlock(&f->lock);
            if (c->ssl != NULL)
                SSL_free(c->ssl);
            close(fd);
            free(c);
            continue;
        }
        f->conns[f->n_conns++] = c;
        pthread_create(&c->tid, NULL, conn_main, c);
        pthread_mutex_unlock(&f->lock);
    }
}

static fake_upstream_t *
start_fake(const char *cert_file, const char *key_file, bool tls13_only, uint16_t port,
           const fake_reply_t *first)
{
    fake_upstream_t *f = calloc(1, sizeof(*f));
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->changed, NULL);
    f->default_reply = (fake_reply_t){.status = 200};
    if (pipe2(f->stop_pipe, O_CLOEXEC) != 0)
        fail("pipe");
    if (cert_file != NULL) {
        /* SSL_write and SSL_shutdown on a connection the peer closed must not kill the test. */
        signal(SIGPIPE, SIG_IGN);
        f->ssl_ctx = SSL_CTX_new(TLS_server_method());
        if (tls13_only)
            SSL_CTX_set_min_proto_version(f->ssl_ctx, TLS1_3_VERSION);
        if (SSL_CTX_use_certificate_chain_file(f->ssl_ctx, cert_file) != 1 ||
            SSL_CTX_use_PrivateKey_file(f->ssl_ctx, key_file, SSL_FILETYPE_PEM) != 1)
            fail("certificate");
    }
    f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    socklen_t len = sizeof(sin);
    int one = 1;
    setsockopt(f->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(f->listen_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(f->listen_fd, 512) != 0 ||
        getsockname(f->listen_fd, (struct sockaddr *)&sin, &len) != 0) {
        if (port != 0) {
            close(f->listen_fd);
            close(f->stop_pipe[0]);
            close(f->stop_pipe[1]);
            SSL_CTX_free(f->ssl_ctx);
            free(f);
            return NULL;
        }
        fail("listen");
    }
    f->port = ntohs(sin.sin_port);
    if (first != NULL)
        fake_push(f, *first); /* before the first accept: a client already waiting gets it, not the default */
    pthread_create(&f->accept_tid, NULL, accept_main, f);
    return f;
}

fake_upstream_t *
fake_start(const char *cert_file, const char *key_file, bool tls13_only)
{
    return start_fake(cert_file, key_file, tls13_only, 0, NULL);
}

fake_upstream_t *
fake_start_on_port(uint16_t port, fake_reply_t first)
{
    return start_fake(NULL, NULL, false, port, &first);
}

uint16_t
fake_port(const fake_upstream_t *f)
{
    return f->port;
}

void
fake_push(fake_upstream_t *f, fake_reply_t reply)
{
    pthread_mutex_lock(&f->lock);
    if (f->queue_len < MAX_QUEUE) {
        f->queue[(f->queue_head + f->queue_len) % MAX_QUEUE] = reply;
        f->queue_len++;
    }
    pthread_mutex_unlock(&f->lock);
}

void
fake_set_default(fake_upstream_t *f, fake_reply_t reply)
{
    pthread_mutex_lock(&f->lock);
    f->default_reply = reply;
    pthread_mutex_unlock(&f->lock);
}

size_t
fake_bytes_sent(fake_upstream_t *f)
{
    return f->bytes_sent;
}

size_t
fake_connections(fake_upstream_t *f)
{
    pthread_mutex_lock(&f->lock);
    size_t n = f->n_conns;
    pthread_mutex_unlock(&f->lock);
    return n;
}

size_t
fake_count(fake_upstream_t *f)
{
    pthread_mutex_lock(&f->lock);
    size_t n = f->n_requests;
    pthread_mutex_unlock(&f->lock);
    return n;
}

bool
fake_request(fake_upstream_t *f, size_t i, fake_request_t *out)
{
    pthread_mutex_lock(&f->lock);
    bool ok = i < f->n_requests;
    if (ok)
        *out = f->requests[i];
    pthread_mutex_unlock(&f->lock);
    return ok;
}

bool
fake_header(fake_upstream_t *f, size_t i, const char *name, char *buf, size_t size)
{
    fake_request_t r;
    if (!fake_request(f, i, &r))
        return false;
    size_t n = strlen(name);
    for (const char *line = r.headers; *line;) {
        const char *eol = strstr(line, "\r\n");
        size_t line_len = eol != NULL ? (size_t)(eol - line) : strlen(line);
        if (line_len > n && strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            snprintf(buf, size, "%.*s", (int)(line + line_len - v), v);
            return true;
        }
        if (eol == NULL)
            break;
        line = eol + 2;
    }
    return false;
}

bool
fake_wait_count(fake_upstream_t *f, size_t count, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&f->lock);
    int rc = 0;
    while (f->n_requests < count && rc == 0)
        rc = pthread_cond_timedwait(&f->changed, &f->lock, &deadline);
    bool ok = f->n_requests >= count;
    pthread_mutex_unlock(&f->lock);
    return ok;
}

void
fake_stop(fake_upstream_t *f)
{
    pthread_mutex_lock(&f->lock);
    f->stopping = true;
    pthread_mutex_unlock(&f->lock);
    if (write(f->stop_pipe[1], "x", 1) != 1)
        fail("stop");
    pthread_join(f->accept_tid, NULL);
    for (size_t i = 0; i < f->n_conns; i++) {
        shutdown(f->conns[i]->fd, SHUT_RDWR);
        pthread_join(f->conns[i]->tid, NULL);
        close(f->conns[i]->fd);
        free(f->conns[i]);
    }
    for (size_t i = 0; i < f->n_requests; i++)
        free(f->requests[i].body);
    close(f->listen_fd);
    close(f->stop_pipe[0]);
    close(f->stop_pipe[1]);
    SSL_CTX_free(f->ssl_ctx);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->changed);
    free(f);
}

/* Fixture texts stay reachable until exit. */
char *fixture_texts[64];
size_t n_fixture_texts;

const char *
fixture(const char *name, size_t *len)
{
    const char *dir = getenv("SLUICE_FIXTURES");
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir != NULL ? dir : "../shared/fixtures/streams", name);
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        fail(path);
    char *text = malloc(1 << 20);
    size_t n = fread(text, 1, (1 << 20) - 1, file);
    fclose(file);
    text[n] = '\0';
    if (n_fixture_texts < 64)
        fixture_texts[n_fixture_texts++] = text;
    if (len != NULL)
        *len = n;
    return text;
}
