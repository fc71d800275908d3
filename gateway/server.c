#define _GNU_SOURCE /* pthread_setname_np */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <semaphore.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <h2o/http2.h>
#include <h2o/websocket.h>

#include <h2o.h>

#include "core/msg.h"
#include "core/resetguard.h"
#include "core/xalloc.h"
#include "accept.h"
#include "cluster.h"
#include "cluster_lane.h"
#include "linger.h"
#include "hop.h"
#include "lazy_epoll.h"
#include "log.h"
#include "refusal.h"
#include "request.h"
#include "tls.h"
#include "worker.h"
#include "wsturns.h"

/*
 * h2o reads the body limit from a connection's config, and HTTP/1 and
 * HTTP/2 need different ones: HTTP/1 refuses a body over the limit as soon
 * as its content-length says so (refusal.h answers in the client's dialect),
 * while h2o 2.2.5 ends an HTTP/2 stream over it with a bare RST_STREAM; an
 * HTTP/2 body up to twice the limit is taken so that intake answers the 413.
 * So each worker has one context per protocol, on one loop.
 */
typedef struct {
    h2o_context_t ctx;    /* HTTP/1 connections */
    h2o_context_t ctx_h2; /* HTTP/2 connections */
    sl_worker_io_t io;
    sl_server_t *server;
    pthread_t tid;
    int listen_fd;
    h2o_socket_t *listener;
    h2o_accept_ctx_t accept_ctx, accept_ctx_h2;
    sl_lingers_t *lingers;
    sl_accept_env_t accept_env;
    sl_refusal_env_t refusal_env;
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t wake;
    h2o_multithread_receiver_t cancels; /* cancel_request from the control thread */
    sl_reset_guard_t resets;            /* HTTP/2 streams reset before their answer, per connection */
    unsigned index;
    h2o_socket_t *turns_listener; /* the internal socket WebSocket turns come back in on */
    /* This worker's requests not yet disposed: its own count, so workers never share the cache line. */
    atomic_uint in_flight;
} worker_t;

struct sl_server {
    h2o_globalconf_t globalconf, globalconf_h2;
    sl_snapshot_holder_t *holder;
    sl_gateway_t *gateway;
    SSL_CTX *ssl_ctx;          /* the gateway listener's, when it serves TLS */
    SSL_CTX *upstream_ssl_ctx; /* verifies upstream certificates and host names */
    SSL_CTX *upstream_ssl_ctx_by_address;
    sl_cidr_t *allow_from;
    size_t n_allow_from;
    uint16_t port;
    unsigned n_workers;
    worker_t *workers;
    atomic_bool exiting;
    sem_t parked; /* posted by each worker whose loop has ended */
    sem_t ready;  /* posted by each worker once its loop, queue and listener exist */
};

/* One per request: holds the config snapshot the request started with. */
typedef struct {
    sl_snapshot_lease_t *lease; /* the worker's, on the snapshot */
    sl_snapshot_t *snapshot;
    worker_t *worker;
    h2o_req_t *req;
} request_guard_t;

static void
on_request_disposed(void *p)
{
    request_guard_t *g = p;
    /* An HTTP/2 stream that ends before any answer went out: the client reset it (rapid reset counts these).
     */
    if (g->req->version >= 0x200 && g->req->res.status == 0)
        sl_reset_guard_note(&g->worker->resets, g->req->conn->id, sl_now_ms());
    sl_snapshot_lease_drop(g->lease);
    atomic_fetch_sub_explicit(&g->worker->in_flight, 1, memory_order_release);
}

/*
 * A connection that resets streams faster than a client with a reason would
 * (rapid reset, stack-notes.md) gets a bare 429 for its next streams, made
 * before any routing, event or request row: what it resets costs h2o's parse
 * and nothing of the gateway's. (h2o 2.2.5's GOAWAY is internal: its headers
 * need khash.h, which Debian does not ship.)
 */
static bool
resets_exceeded(worker_t *w, h2o_req_t *req)
{
    return req->version >= 0x200 && sl_reset_guard_exceeded(&w->resets, req->conn->id, sl_now_ms());
}

static void
send_json(h2o_req_t *req, int status, const char *reason, json_t *body, const char *error_code)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    size_t len = strlen(text);
    char *copy = h2o_mem_alloc_pool(&req->pool, len);
    memcpy(copy, text, len);
    free(text);
    req->res.status = status;
    req->res.reason = reason;
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("application/json"));
    if (error_code != NULL)
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-sluice-error"), 0, NULL,
                              error_code, strlen(error_code));
    h2o_send_inline(req, copy, len);
}

static void
send_health(h2o_req_t *req, const sl_snapshot_t *snapshot, const sl_gateway_t *gw)
{
    bool stopping = atomic_load(&gw->stopping);
    if (stopping) {
        send_json(req, 503, "Service Unavailable", json_pack("{s:s}", "status", "shutting_down"),
                  sl_code_slug(SL_CODE_GW_SHUTTING_DOWN));
    } else if (snapshot->safe_mode) {
        send_json(req, 503, "Service Unavailable", json_pack("{s:s}", "status", "safe_mode"),
                  sl_code_slug(SL_CODE_GW_SAFE_MODE));
    } else {
        json_t *body = json_pack("{s:s}", "status", "ok");
        /* Degraded is still serving (cluster.md, "Redis down"): 200, with the cluster's state said. */
        if (gw->cluster != NULL)
            json_object_set_new(body, "cluster",
                                json_string(sl_cluster_state_slug(sl_cluster_state(gw->cluster))));
        /* PostgreSQL down is degraded too: rows wait in the spool (cluster.md). */
        if (gw->recorder != NULL) {
            sl_store_status_t st;
            sl_recorder_status(gw->recorder, &st);
            if (st.kind == SL_STORE_POSTGRES)
                json_object_set_new(body, "store", json_string(st.degraded ? "degraded" : "ok"));
        }
        send_json(req, 200, "OK", body, NULL);
    }
}

/* The worker of the thread running: every connection and request lives on its worker's thread. */
static _Thread_local worker_t *this_worker;

static sl_refusal_env_t *
refusal_env_of(h2o_req_t *req)
{
    (void)req;
    return this_worker != NULL ? &this_worker->refusal_env : NULL;
}

static int
on_req(h2o_handler_t *self, h2o_req_t *req)
{
    (void)self;
    worker_t *w = this_worker;
    sl_server_t *server = w->server;
    request_guard_t *g = h2o_mem_alloc_shared(&req->pool, sizeof(*g), on_request_disposed);
    g->lease = sl_snapshot_lease(&w->io.snapshots);
    g->snapshot = g->lease->snapshot;
    g->worker = w;
    g->req = req;
    atomic_fetch_add_explicit(&w->in_flight, 1, memory_order_relaxed);
    if (resets_exceeded(w, req)) {
        h2o_send_error_generic(req, 429, "Too Many Requests", "too many streams reset on this connection",
                               H2O_SEND_ERROR_KEEP_HEADERS);
        return 0;
    }

    if (h2o_memis(req->path_normalized.base, req->path_normalized.len, H2O_STRLIT("/healthz")) &&
        (h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")) ||
         h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD")))) {
        send_health(req, g->snapshot, server->gateway);
        return 0;
    }
    const char *ws_key = NULL;
    if (h2o_memis(req->path_normalized.base, req->path_normalized.len, H2O_STRLIT("/v1/responses")) &&
        h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")) && !g->snapshot->safe_mode &&
        !atomic_load(&server->gateway->stopping) && h2o_is_websocket_handshake(req, &ws_key) == 0 &&
        ws_key != NULL)
        return sl_wsturns_upgrade(req, ws_key, &w->io, g->snapshot->config, sl_request_peer_is_loopback(req));
    return sl_request_serve(req, &w->io, server->gateway, g->lease);
}

/* The internal socket: only this process's WebSocket turns connect to it, so no allow_from applies. */
static void
on_turns_accept(h2o_socket_t *listener, const char *err)
{
    worker_t *w = listener->data;
    if (err != NULL)
        return;
    h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
    if (sock != NULL)
        h2o_http1_accept(&w->accept_ctx, sock, *h2o_get_timestamp(&w->ctx, NULL, NULL));
}

/*
 * A worker's internal socket for Responses WebSocket turns (wsturns.h): an
 * abstract UNIX socket, named by process and worker, and the peer the turns
 * connect to.
 */
static void
open_turns_socket(worker_t *w)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int n = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "sluice-turns-%ld-%u", (long)getpid(),
                     w->index);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, len) != 0 || listen(fd, 128) != 0) {
        sl_log_error("worker %u: no internal socket for WebSocket turns: %s", w->index, strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    w->turns_listener = h2o_evloop_socket_create(w->ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    w->turns_listener->data = w;
    h2o_socket_read_start(w->turns_listener, on_turns_accept);
    w->io.turns_peer = sl_peer_at((struct sockaddr *)&addr, len);
}

/* Where sl_accept_start hands a connection once its protocol is known. */
static void
on_protocol_known(void *data, h2o_socket_t *sock, bool http2, struct timeval connected_at)
{
    worker_t *w = data;
    if (http2)
        h2o_http2_accept(&w->accept_ctx_h2, sock, connected_at);
    else
        h2o_http1_accept(&w->accept_ctx, sock, connected_at);
}

static void
on_accept(h2o_socket_t *listener, const char *err)
{
    worker_t *w = listener->data;
    if (err != NULL)
        return;
    h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
    if (sock == NULL)
        return;
    if (w->server->n_allow_from > 0) {
        struct sockaddr_storage peer;
        if (h2o_socket_getpeername(sock, (struct sockaddr *)&peer) == 0 ||
            !sl_cidr_allows(w->server->allow_from, w->server->n_allow_from, (struct sockaddr *)&peer)) {
            h2o_socket_close(sock);
            return;
        }
    }
    sl_accept_start(sock, &w->accept_env, *h2o_get_timestamp(&w->ctx, NULL, NULL));
}

/* Runs on the worker's loop when another thread pokes it (shutdown). */
static void
on_wake(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)messages;
    worker_t *w = H2O_STRUCT_FROM_MEMBER(worker_t, wake, receiver);
    if (atomic_load(&w->server->gateway->stopping) && w->listener != NULL) {
        h2o_socket_read_stop(w->listener);
        h2o_socket_close(w->listener);
        w->listener = NULL;
    }
}

/* An operator's cancel_request, sent to every worker: the one that has the request cancels it. */
typedef struct {
    h2o_multithread_message_t super;
    uint64_t id;
} cancel_message_t;

static void
on_cancels(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    worker_t *w = H2O_STRUCT_FROM_MEMBER(worker_t, cancels, receiver);
    while (!h2o_linklist_is_empty(messages)) {
        cancel_message_t *m = H2O_STRUCT_FROM_MEMBER(cancel_message_t, super.link, messages->next);
        h2o_linklist_unlink(&m->super.link);
        sl_request_cancel(&w->io, m->id);
        free(m);
    }
}

static void init_worker_io(sl_worker_io_t *io, h2o_loop_t *loop, h2o_multithread_queue_t *queue,
                           SSL_CTX *upstream_ssl, SSL_CTX *upstream_ssl_by_address);

/*
 * Buffers a worker's sockets and requests read into: h2o keeps 16 freed ones
 * per thread, fewer than a busy worker's connections and requests free
 * between two reads, so the rest went back to malloc, whose large frees and
 * allocations consolidate its bins. 8 KiB each: 2 MiB at most kept per worker.
 */
#define SOCKET_BUFFERS_KEPT 256

/*
 * Everything of h2o a worker uses is made on the worker's own thread: a
 * socket takes the creating thread's buffer prototype (thread-local in h2o
 * 2.2.5), so a queue made on the main thread would have two workers recycle
 * their read buffers through the main thread's free list at once — a race
 * seen as a use-after-free inside h2o's read.
 */
static void
init_worker(worker_t *w)
{
    sl_server_t *s = w->server;
    this_worker = w;
    /* This thread's: h2o's socket buffer prototype is thread-local. */
    h2o_socket_buffer_prototype.allocator.max = SOCKET_BUFFERS_KEPT;
    /* The loop's epoll instance drops h2o's per-request DEL and ADD of client sockets (lazy_epoll.h). */
    sl_lazy_epoll_adopt_next();
    h2o_context_init(&w->ctx, h2o_evloop_create(), &s->globalconf);
    h2o_context_init(&w->ctx_h2, w->ctx.loop, &s->globalconf_h2);
    w->accept_ctx = (h2o_accept_ctx_t){.ctx = &w->ctx, .hosts = s->globalconf.hosts};
    w->accept_ctx_h2 = (h2o_accept_ctx_t){.ctx = &w->ctx_h2, .hosts = s->globalconf_h2.hosts};
    w->queue = h2o_multithread_create_queue(w->ctx.loop);
    h2o_multithread_register_receiver(w->queue, &w->wake, on_wake);
    h2o_multithread_register_receiver(w->queue, &w->cancels, on_cancels);
    init_worker_io(&w->io, w->ctx.loop, w->queue, s->upstream_ssl_ctx, s->upstream_ssl_ctx_by_address);
    w->io.metrics = sl_metrics_add_worker(s->gateway->metrics);
    w->io.snapshots.holder = s->holder;
    w->lingers = sl_lingers_new(w->ctx.loop, &w->io.timers);
    if (s->gateway->cluster != NULL)
        w->io.cluster_lane = sl_cluster_lane_new(w->ctx.loop, &w->io.timers, s->gateway->cluster);
    w->accept_env = (sl_accept_env_t){.loop = w->ctx.loop,
                                      .ssl_ctx = s->ssl_ctx,
                                      .timeout = &w->ctx.handshake_timeout,
                                      .lingers = w->lingers,
                                      .cb = on_protocol_known,
                                      .data = w};
    w->refusal_env = (sl_refusal_env_t){.io = &w->io, .gateway = s->gateway, .lingers = w->lingers};
    w->listener = h2o_evloop_socket_create(w->ctx.loop, w->listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    w->listener->data = w;
    h2o_socket_read_start(w->listener, on_accept);
    open_turns_socket(w);
}

static void *
worker_main(void *arg)
{
    worker_t *w = arg;
    char name[16];
    snprintf(name, sizeof(name), "sl-worker-%u", w->index);
    pthread_setname_np(pthread_self(), name); /* what top -H and the benchmark show */
    init_worker(w);
    sem_post(&w->server->ready);
    size_t fired = 0;
    while (!atomic_load(&w->server->exiting)) {
        /*
         * Work a timer started outside h2o's run (a connect, a write) completes
         * through h2o's pending list, which runs only after its next poll: so
         * after timers fired, poll without sleeping.
         */
        sl_clock_new_turn();
        int64_t wait = fired > 0 ? 0 : sl_timerheap_wait_ms(&w->io.timers, sl_now_ms());
        sl_clock_new_turn();
        /* -1 with EINTR happens when a debugger attaches: not a reason to stop serving. */
        if (h2o_evloop_run(w->ctx.loop, wait < 0 || wait > INT32_MAX ? INT32_MAX : (int32_t)wait) != 0 &&
            errno != EINTR)
            break;
        sl_clock_new_turn();
        fired = sl_timerheap_run(&w->io.timers, sl_now_ms());
        sl_cluster_lane_flush(w->io.cluster_lane);
        if (w->server->gateway->bus != NULL && sl_bus_is_watched(w->server->gateway->bus))
            sl_request_build_held_events(&w->io);
        /* One handoff per loop iteration, whatever happened in it. */
        if (w->io.events.len > 0)
            sl_bus_flush(w->server->gateway->bus, &w->io.events);
    }
    /* One more turn of the loop frees the sockets just closed. */
    sl_keepalive_close_all(&w->io.keepalive);
    h2o_evloop_run(w->ctx.loop, 0);
    sl_snapshot_cache_dispose(&w->io.snapshots);
    /*
     * Park instead of returning: h2o keeps per-thread caches of buffers with no
     * way to free them, so the thread stays (idle, signals blocked) until the
     * process exits.
     */
    sem_post(&w->server->parked);
    for (;;)
        pause();
    return NULL;
}

static int
open_listener(const char *bind_ip, uint16_t port, char *err, size_t err_size)
{
    struct sockaddr_storage ss;
    socklen_t len = sl_ip_sockaddr(bind_ip, port, &ss);
    if (len == 0) {
        snprintf(err, err_size, "'%s' is not an IP address", bind_ip);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int on = 1;
    /*
     * A connection is handed to accept when its first bytes arrive (as h2o's own server and nginx's
     * `deferred` do): a worker wakes once for a new client and its request, not twice. One that sends
     * nothing waits in the kernel, holding no descriptor, until the deferral ends.
     */
    int defer_secs = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_secs, sizeof(defer_secs)) != 0 ||
        bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 1024) != 0 ||
        fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
        snprintf(err, err_size, "cannot listen on %s:%u: %s", bind_ip, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static uint16_t
bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                         : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

static void
init_worker_io(sl_worker_io_t *io, h2o_loop_t *loop, h2o_multithread_queue_t *queue, SSL_CTX *upstream_ssl,
               SSL_CTX *upstream_ssl_by_address)
{
    io->loop = loop;
    h2o_linklist_init_anchor(&io->requests);
    h2o_linklist_init_anchor(&io->held_events);
    h2o_multithread_register_receiver(queue, &io->getaddr_receiver, h2o_hostinfo_getaddr_receiver);
    io->upstream_ssl = upstream_ssl;
    io->upstream_ssl_by_address = upstream_ssl_by_address;
    sl_keepalive_init(&io->keepalive, &io->timers);
    io->watch = sl_watch_new(loop);
    io->inbox = sl_waitq_inbox_new(queue, sl_request_wake);
    io->shared_inbox = sl_shared_inbox_new(queue);
}

static void
free_partial(sl_server_t *s)
{
    if (s->workers != NULL) {
        for (unsigned i = 0; i < s->n_workers; i++) {
            if (s->workers[i].listen_fd >= 0)
                close(s->workers[i].listen_fd);
        }
    }
    free(s->workers);
    free(s->allow_from);
    SSL_CTX_free(s->ssl_ctx);
    SSL_CTX_free(s->upstream_ssl_ctx);
    SSL_CTX_free(s->upstream_ssl_ctx_by_address);
    sem_destroy(&s->parked);
    sem_destroy(&s->ready);
    h2o_config_dispose(&s->globalconf);
    h2o_config_dispose(&s->globalconf_h2);
    free(s);
}

/* One of the two h2o configs: the same handler, refusals in the client's dialect, its own body limit. */
static void
init_globalconf(h2o_globalconf_t *conf, uint64_t body_limit)
{
    h2o_config_init(conf);
    /*
     * No Server header: nothing in an answer depends on it (sluice's own
     * refusals name themselves in x-sluice-error), and h2o writes it with a
     * sprintf per response, 1.6 % of a request's instructions (bench/README.md).
     */
    conf->server_name = h2o_iovec_init(H2O_STRLIT(""));
    conf->max_request_entity_size = body_limit;
    conf->http2.max_concurrent_requests_per_connection = 32;
    h2o_hostconf_t *host = h2o_config_register_host(conf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    h2o_create_handler(path, sizeof(h2o_handler_t))->on_req = on_req;
    sl_refusal_install(host, body_limit - 1, refusal_env_of);
}

sl_server_t *
sl_server_start(const sl_listen_t *listen, unsigned threads, sl_snapshot_holder_t *holder,
                sl_gateway_t *gateway, uint64_t max_body_bytes, char *err, size_t err_size)
{
    sl_server_t *s = sl_xcalloc(1, sizeof(*s));
    s->holder = holder;
    s->gateway = gateway;
    s->n_workers = threads > 0 ? threads : 1;
    sem_init(&s->parked, 0, 0);
    sem_init(&s->ready, 0, 0);
    /*
     * HTTP/1: h2o refuses a content-length over the limit before reading the body, and stops a chunked
     * body at it (the +1 lets a body of exactly the limit reach intake). HTTP/2: see worker_t.
     */
    init_globalconf(&s->globalconf, max_body_bytes + 1);
    init_globalconf(&s->globalconf_h2, 2 * max_body_bytes + 1);

    if (listen->n_allow_from > 0) {
        s->allow_from = sl_xmalloc(listen->n_allow_from * sizeof(sl_cidr_t));
        memcpy(s->allow_from, listen->allow_from, listen->n_allow_from * sizeof(sl_cidr_t));
        s->n_allow_from = listen->n_allow_from;
    }
    if (listen->tls_cert != NULL &&
        (s->ssl_ctx = sl_tls_server_ctx(listen->tls_cert, listen->tls_key, err, err_size)) == NULL) {
        free_partial(s);
        return NULL;
    }
    if ((s->upstream_ssl_ctx = sl_tls_upstream_ctx(err, err_size)) == NULL ||
        (s->upstream_ssl_ctx_by_address = sl_tls_upstream_ctx_for_address(err, err_size)) == NULL) {
        free_partial(s);
        return NULL;
    }

    s->workers = sl_xcalloc(s->n_workers, sizeof(worker_t));
    for (unsigned i = 0; i < s->n_workers; i++)
        s->workers[i].listen_fd = -1;
    /* Bind every listener before starting any thread, so a busy port fails the start cleanly. */
    s->port = listen->port;
    for (unsigned i = 0; i < s->n_workers; i++) {
        if ((s->workers[i].listen_fd = open_listener(listen->bind, s->port, err, err_size)) < 0) {
            free_partial(s);
            return NULL;
        }
        if (s->port == 0)
            s->port = bound_port(s->workers[i].listen_fd);
    }

    for (unsigned i = 0; i < s->n_workers; i++) {
        worker_t *w = &s->workers[i];
        w->server = s;
        w->index = i;
        h2o_multithread_create_thread(&w->tid, NULL, worker_main, w);
    }
    /* Only once every worker can take wake-ups and connections does the server exist for others. */
    for (unsigned i = 0; i < s->n_workers; i++) {
        while (sem_wait(&s->ready) != 0 && errno == EINTR)
            ;
    }
    return s;
}

uint16_t
sl_server_port(const sl_server_t *server)
{
    return server->port;
}

void
sl_server_stop_accepting(sl_server_t *server)
{
    atomic_store(&server->gateway->stopping, true);
    for (unsigned i = 0; i < server->n_workers; i++)
        h2o_multithread_send_message(&server->workers[i].wake, NULL);
}

void
sl_server_cancel(sl_server_t *server, uint64_t id)
{
    for (unsigned i = 0; i < server->n_workers; i++) {
        cancel_message_t *m = sl_xcalloc(1, sizeof(*m));
        m->id = id;
        h2o_multithread_send_message(&server->workers[i].cancels, &m->super);
    }
}

unsigned
sl_server_in_flight(const sl_server_t *server)
{
    unsigned n = 0;
    for (unsigned i = 0; i < server->n_workers; i++)
        n += atomic_load_explicit(&server->workers[i].in_flight, memory_order_acquire);
    return n;
}

void
sl_server_end_workers(sl_server_t *server)
{
    atomic_store(&server->exiting, true);
    for (unsigned i = 0; i < server->n_workers; i++)
        h2o_multithread_send_message(&server->workers[i].wake, NULL);
    for (unsigned i = 0; i < server->n_workers; i++) {
        while (sem_wait(&server->parked) != 0 && errno == EINTR)
            ;
    }
}
