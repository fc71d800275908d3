#define _GNU_SOURCE /* pthread_setname_np */
#include "tracer.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "core/dialect.h"
#include "log.h"
#include "tls.h"
#include "version.h"
#include "worker.h"

struct sl_tracer {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    sl_request_span_t *queue[SL_TRACER_QUEUE]; /* a ring: queue[head], … queue[head + len - 1] */
    size_t head, len;
    char *endpoint, *service_name; /* NULL endpoint: not exporting */
    bool started, stopping;
    pthread_t thread;
    atomic_uint_fast64_t exported, dropped;
    /* The exporter thread's own. */
    SSL_CTX *tls;
    bool failing; /* the last export failed: the next success is logged */
};

static uint64_t
spans_of(const sl_request_span_t *s)
{
    return 1 + s->n_attempts;
}

/* ---- one POST ---- */

typedef struct {
    int fd;
    SSL *ssl;
} conn_t;

/* A connected socket to host:port within the timeout, or -1 with a reason. */
static int
connect_to(const char *host, uint16_t port, char *err, size_t err_size)
{
    char service[8];
    snprintf(service, sizeof(service), "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        snprintf(err, err_size, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    snprintf(err, err_size, "cannot connect to %s:%u", host, port);
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0)
            continue;
        int ok = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        if (!ok && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int so_error = 0;
            socklen_t len = sizeof(so_error);
            ok = poll(&p, 1, SL_TRACER_TIMEOUT_MS) == 1 &&
                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 && so_error == 0;
            if (!ok)
                snprintf(err, err_size, "cannot connect to %s:%u: %s", host, port,
                         so_error != 0 ? strerror(so_error) : "timed out");
        }
        if (!ok) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        struct timeval tv = {SL_TRACER_TIMEOUT_MS / 1000, (SL_TRACER_TIMEOUT_MS % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    }
    return fd;
}

static bool
send_all(conn_t *c, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = c->ssl != NULL ? SSL_write(c->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n)
                                   : send(c->fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) {
            if (c->ssl == NULL && w < 0 && errno == EINTR)
                continue;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* The status of the collector's answer (its head read up to 4 KiB), or 0 when none came. */
static int
read_status(conn_t *c)
{
    char buf[4096];
    size_t have = 0;
    while (have < sizeof(buf) - 1) {
        ssize_t r = c->ssl != NULL ? SSL_read(c->ssl, buf + have, (int)(sizeof(buf) - 1 - have))
                                   : recv(c->fd, buf + have, sizeof(buf) - 1 - have, 0);
        if (r <= 0) {
            if (c->ssl == NULL && r < 0 && errno == EINTR)
                continue;
            break;
        }
        have += (size_t)r;
        buf[have] = '\0';
        if (strstr(buf, "\r\n") != NULL)
            break;
    }
    buf[have] = '\0';
    int status = 0;
    return sscanf(buf, "HTTP/1.%*d %d", &status) == 1 ? status : 0;
}

/* POSTs body to endpoint; true on a 2xx answer, else false with a reason. */
static bool
post_traces(sl_tracer_t *t, const char *endpoint, const sl_strbuf_t *body, char *err, size_t err_size)
{
    sl_base_url_t url;
    if (sl_base_url_parse(endpoint, &url) != 0) {
        snprintf(err, err_size, "the endpoint is not an http:// or https:// URL");
        return false;
    }
    char host[256];
    snprintf(host, sizeof(host), "%.*s", (int)url.host_len, url.host);
    if (url.is_tls && t->tls == NULL)
        t->tls = sl_tls_upstream_ctx(err, err_size);
    if (url.is_tls && t->tls == NULL)
        return false;
    conn_t c = {.fd = connect_to(host, url.port, err, err_size)};
    if (c.fd < 0)
        return false;
    bool ok = false;
    if (url.is_tls) {
        c.ssl = SSL_new(t->tls);
        SSL_set_tlsext_host_name(c.ssl, host);
        SSL_set_fd(c.ssl, c.fd);
        if (SSL_connect(c.ssl) != 1) {
            snprintf(err, err_size, "TLS with %s failed (its certificate or the handshake)", host);
            goto done;
        }
    }
    /* OTLP/HTTP's path: a base URL gets /v1/traces, a URL naming it is used as it is. */
    static const char traces[] = "/v1/traces";
    size_t tl = sizeof(traces) - 1;
    bool names_it =
        url.path_prefix_len >= tl && memcmp(url.path_prefix + url.path_prefix_len - tl, traces, tl) == 0;
    char authority[300];
    int n =
        snprintf(authority, sizeof(authority), memchr(host, ':', strlen(host)) != NULL ? "[%s]" : "%s", host);
    if (!url.port_is_default && n > 0 && (size_t)n < sizeof(authority))
        snprintf(authority + n, sizeof(authority) - (size_t)n, ":%u", url.port);
    sl_strbuf_t head = {0};
    sl_strbuf_appendf(
        &head,
        "POST %.*s%s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/x-protobuf\r\n"
        "content-length: %zu\r\nuser-agent: sluice/" SLUICE_VERSION "\r\nconnection: close\r\n\r\n",
        (int)url.path_prefix_len, url.path_prefix, names_it ? "" : traces, authority, body->len);
    if (!send_all(&c, head.data, head.len) || !send_all(&c, body->data, body->len)) {
        snprintf(err, err_size, "sending to %s failed", host);
    } else {
        int status = read_status(&c);
        ok = status >= 200 && status < 300;
        if (!ok && status == 0)
            snprintf(err, err_size, "%s did not answer within %d ms", host, SL_TRACER_TIMEOUT_MS);
        else if (!ok)
            snprintf(err, err_size, "%s answered %d", host, status);
    }
    free(sl_strbuf_finish(&head));
done:
    if (c.ssl != NULL) {
        SSL_shutdown(c.ssl);
        SSL_free(c.ssl);
    }
    close(c.fd);
    return ok;
}

/* ---- the exporter ---- */

static void
export_batch(sl_tracer_t *t, sl_request_span_t **batch, size_t n, const char *endpoint, const char *service)
{
    uint64_t spans = 0;
    for (size_t i = 0; i < n; i++)
        spans += spans_of(batch[i]);
    sl_strbuf_t body = {0};
    sl_otlp_encode((const sl_request_span_t *const *)batch, n, service, SLUICE_VERSION, &body);
    for (size_t i = 0; i < n; i++)
        free(batch[i]);
    char err[512] = "";
    if (post_traces(t, endpoint, &body, err, sizeof(err))) {
        atomic_fetch_add(&t->exported, spans);
        if (t->failing)
            sl_log_info("telemetry: exporting spans to %s again", endpoint);
        t->failing = false;
    } else {
        atomic_fetch_add(&t->dropped, spans);
        /* Once per outage, not once per batch. */
        if (!t->failing)
            sl_log_warn("telemetry: %llu span(s) not exported to %s (%s); dropping spans until it takes them",
                        (unsigned long long)spans, endpoint, err);
        t->failing = true;
    }
    free(sl_strbuf_finish(&body));
}

static void
wait_until(sl_tracer_t *t, int64_t deadline_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t left = deadline_ms - sl_now_ms();
    if (left <= 0)
        return;
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (left % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&t->wake, &t->lock, &ts);
}

static void *
exporter_main(void *arg)
{
    sl_tracer_t *t = arg;
    pthread_setname_np(pthread_self(), "sl-tracer");
    sl_request_span_t **batch = sl_xcalloc(SL_TRACER_BATCH, sizeof(*batch));
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (t->len == 0 && !t->stopping)
            pthread_cond_wait(&t->wake, &t->lock);
        if (t->len == 0)
            break;
        /* A batch fills up or its first record has waited SL_TRACER_DELAY_MS. */
        int64_t deadline = sl_now_ms() + SL_TRACER_DELAY_MS;
        while (t->len < SL_TRACER_BATCH && !t->stopping && sl_now_ms() < deadline)
            wait_until(t, deadline);
        size_t n = t->len < SL_TRACER_BATCH ? t->len : SL_TRACER_BATCH;
        for (size_t i = 0; i < n; i++)
            batch[i] = t->queue[(t->head + i) % SL_TRACER_QUEUE];
        t->head = (t->head + n) % SL_TRACER_QUEUE;
        t->len -= n;
        char *endpoint = t->endpoint != NULL ? sl_xstrdup(t->endpoint) : NULL;
        char *service = sl_xstrdup(t->service_name != NULL ? t->service_name : "sluice");
        bool stopping = t->stopping;
        pthread_mutex_unlock(&t->lock);
        if (endpoint != NULL && !(stopping && t->failing)) {
            export_batch(t, batch, n, endpoint, service);
        } else {
            /* No endpoint any more, or shutting down with the collector failing: no waiting for it. */
            for (size_t i = 0; i < n; i++) {
                atomic_fetch_add(&t->dropped, spans_of(batch[i]));
                free(batch[i]);
            }
        }
        free(endpoint);
        free(service);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    free(batch);
    return NULL;
}

sl_tracer_t *
sl_tracer_new(void)
{
    sl_tracer_t *t = sl_xcalloc(1, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&t->wake, &attr);
    pthread_condattr_destroy(&attr);
    return t;
}

void
sl_tracer_configure(sl_tracer_t *t, const char *otlp_endpoint, const char *service_name)
{
    pthread_mutex_lock(&t->lock);
    bool changed = (t->endpoint == NULL) != (otlp_endpoint == NULL) ||
                   (otlp_endpoint != NULL && strcmp(t->endpoint, otlp_endpoint) != 0);
    if (changed && otlp_endpoint != NULL)
        sl_log_info("telemetry: spans go to %s (OTLP/HTTP, protobuf)", otlp_endpoint);
    else if (changed)
        sl_log_info("telemetry: spans are no longer exported");
    free(t->endpoint);
    free(t->service_name);
    t->endpoint = otlp_endpoint != NULL ? sl_xstrdup(otlp_endpoint) : NULL;
    t->service_name = service_name != NULL ? sl_xstrdup(service_name) : NULL;
    bool start = t->endpoint != NULL && !t->started;
    if (start)
        t->started = pthread_create(&t->thread, NULL, exporter_main, t) == 0;
    pthread_mutex_unlock(&t->lock);
    if (start && !t->started)
        sl_log_warn("telemetry: cannot start the span exporter thread: spans are dropped");
}

bool
sl_tracer_submit(sl_tracer_t *t, sl_request_span_t *span)
{
    pthread_mutex_lock(&t->lock);
    bool taken = t->started && t->endpoint != NULL && !t->stopping && t->len < SL_TRACER_QUEUE;
    if (taken) {
        t->queue[(t->head + t->len) % SL_TRACER_QUEUE] = span;
        t->len++;
        /* The exporter sleeps until a first record (then times its batch) or a full batch. */
        if (t->len == 1 || t->len == SL_TRACER_BATCH)
            pthread_cond_signal(&t->wake);
    }
    pthread_mutex_unlock(&t->lock);
    if (!taken) {
        atomic_fetch_add(&t->dropped, spans_of(span));
        free(span);
    }
    return taken;
}

void
sl_tracer_stats(sl_tracer_t *t, sl_tracer_stats_t *out)
{
    out->exported = atomic_load(&t->exported);
    out->dropped = atomic_load(&t->dropped);
}

void
sl_tracer_free(sl_tracer_t *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    pthread_cond_signal(&t->wake);
    bool started = t->started;
    pthread_mutex_unlock(&t->lock);
    if (started)
        pthread_join(t->thread, NULL);
    for (size_t i = 0; i < t->len; i++)
        free(t->queue[(t->head + i) % SL_TRACER_QUEUE]);
    free(t->endpoint);
    free(t->service_name);
    SSL_CTX_free(t->tls);
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->lock);
    free(t);
}
