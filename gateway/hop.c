#include "hop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "core/cidr.h"
#include "core/http1.h"
#include "core/xalloc.h"
#include "keepalive.h"
#include "read_budget.h"

/* libh2o exports picohttpparser, whose header Debian does not ship; its phr_header is sl_http1_field_t. */
int phr_parse_response(const char *buf, size_t len, int *minor_version, int *status, const char **msg,
                       size_t *msg_len, sl_http1_field_t *headers, size_t *num_headers, size_t last_len);

/* Header fields read from one response head, as h2o's server takes from a request. */
#define MAX_FIELDS 100

/*
 * An answer's first bytes are read in a turn of their own (read_budget.h): its head and first events reach
 * the client before h2o reads the rest of a burst. A page, as nginx's proxy_buffer_size; a larger opening
 * (a Responses echo of long instructions) is read on in the next turn, as before. bench/README.md: 4 KiB
 * took 85-95 µs off a 184 kB stream's first byte leaving sluice, 16 KiB 50-75.
 */
#define FIRST_READ_BYTES (4 * 1024)

/* What the connection reads next; a hop starts (all zero) resolving or connecting. */
typedef enum { HOP_CONNECTING, HOP_WAITING_HEAD, HOP_READING_BODY } hop_state_t;

struct sl_hop {
    sl_worker_io_t *io;
    sl_upconn_t *conn; /* the connection in use; NULL before it is made and once the hop let go of it */
    h2o_hostinfo_getaddr_req_t *resolving;
    sl_hop_params_t params;
    sl_hop_callbacks_t cb;
    void *data;
    h2o_iovec_t reqbufs[2];
    hop_state_t state;
    sl_timer_t connect_timer, idle_timer, total_timer;
    sl_timer_t deferred_end; /* reports an end that happened inside sl_hop_start */
    sl_hop_end_t pending_how;
    const char *pending_detail;
    sl_http1_framing_t framing;
    sl_chunked_t chunked;
    uint64_t body_left; /* SL_HTTP1_LENGTH: bytes still to come */
    bool starting, in_callback, cancelled, paused;
    bool writing;       /* the request's bytes are not all written yet */
    bool reusable;      /* the connection can carry the next request once the answer is read */
    bool reused;        /* the connection was kept alive from an earlier request */
    bool any_byte;      /* something of an answer arrived */
    int64_t written_ms; /* when the request's bytes were handed to the connection; 0 = not yet */
    int64_t ended_ms;
};

const char *
sl_hop_end_name(sl_hop_end_t how)
{
    static const char *const names[] = {
        [SL_HOP_END_EOS] = "end of stream",
        [SL_HOP_END_CONNECT_FAILED] = "connect failed",
        [SL_HOP_END_BROKEN_BEFORE_HEAD] = "connection broke before the response head",
        [SL_HOP_END_BROKEN] = "connection broke",
        [SL_HOP_END_IDLE_TIMEOUT] = "idle timeout",
        [SL_HOP_END_TOTAL_TIMEOUT] = "total timeout",
    };
    return how <= SL_HOP_END_TOTAL_TIMEOUT ? names[how] : "unknown";
}

/* ---- peers ---------------------------------------------------------------------------------- */

sl_peer_t *
sl_peer_new(const char *host, uint16_t port, bool is_tls)
{
    sl_peer_t *p = sl_xcalloc(1, sizeof(*p));
    p->host = sl_xstrdup(host);
    snprintf(p->serv, sizeof(p->serv), "%u", port);
    p->is_tls = is_tls;
    /* An address literal needs no resolver thread; a name is resolved for every new connection. */
    p->addr_len = sl_ip_sockaddr(host, port, &p->addr);
    p->by_address = p->addr_len > 0;
    return p;
}

sl_peer_t *
sl_peer_at(const struct sockaddr *addr, socklen_t len)
{
    sl_peer_t *p = sl_xcalloc(1, sizeof(*p));
    p->host = sl_xstrdup("");
    p->by_address = true;
    memcpy(&p->addr, addr, len);
    p->addr_len = len;
    return p;
}

void
sl_peer_free(sl_peer_t *peer)
{
    if (peer == NULL)
        return;
    free(peer->host);
    free(peer);
}

/* ---- the hop's end ----------------------------------------------------------------------------- */

static void
stop_timers(sl_hop_t *hop)
{
    sl_timer_cancel(&hop->io->timers, &hop->connect_timer);
    sl_timer_cancel(&hop->io->timers, &hop->idle_timer);
    sl_timer_cancel(&hop->io->timers, &hop->total_timer);
    sl_timer_cancel(&hop->io->timers, &hop->deferred_end);
}

/*
 * The hop is done with its connection: kept for the next request when the
 * answer was read to its end on a connection that allows it, with nothing
 * pending on it; closed otherwise.
 */
static void
let_go_of_connection(sl_hop_t *hop, bool keep)
{
    if (hop->resolving != NULL) {
        h2o_hostinfo_getaddr_cancel(hop->resolving);
        hop->resolving = NULL;
    }
    sl_upconn_t *c = hop->conn;
    if (c == NULL)
        return;
    hop->conn = NULL;
    c->hop = NULL;
    if (!keep || !hop->reusable || c->sock->input->size > 0)
        sl_upconn_close(c);
    else if (!hop->writing)
        sl_keepalive_put(c, hop->ended_ms);
    /* Else h2o reports the write done after its next poll, often after the answer: on_written keeps it. */
}

static void
free_hop(sl_hop_t *hop)
{
    stop_timers(hop);
    let_go_of_connection(hop, false);
    free(hop);
}

static void
on_deferred_end(sl_timer_t *t)
{
    sl_hop_t *hop = H2O_STRUCT_FROM_MEMBER(sl_hop_t, deferred_end, t);
    hop->in_callback = true;
    hop->cb.on_end(hop->data, hop->pending_how, hop->pending_detail);
    free_hop(hop);
}

/* The hop is over: its connection is let go of first, then the end is reported (unless cancelled). */
static void
finish(sl_hop_t *hop, sl_hop_end_t how, const char *detail)
{
    hop->ended_ms = sl_now_ms();
    stop_timers(hop);
    let_go_of_connection(hop, how == SL_HOP_END_EOS);
    if (hop->cancelled) {
        free_hop(hop);
        return;
    }
    if (hop->starting) {
        hop->pending_how = how;
        hop->pending_detail = detail;
        sl_timer_arm(&hop->io->timers, &hop->deferred_end, hop->ended_ms, on_deferred_end);
        return;
    }
    hop->in_callback = true;
    hop->cb.on_end(hop->data, how, detail);
    free_hop(hop);
}

static void
on_connect_timeout(sl_timer_t *t)
{
    finish(H2O_STRUCT_FROM_MEMBER(sl_hop_t, connect_timer, t), SL_HOP_END_CONNECT_FAILED, "connect timeout");
}

static void
on_idle_timeout(sl_timer_t *t)
{
    finish(H2O_STRUCT_FROM_MEMBER(sl_hop_t, idle_timer, t), SL_HOP_END_IDLE_TIMEOUT, "idle timeout");
}

static void
on_total_timeout(sl_timer_t *t)
{
    finish(H2O_STRUCT_FROM_MEMBER(sl_hop_t, total_timer, t), SL_HOP_END_TOTAL_TIMEOUT, "total timeout");
}

static void
touch_idle(sl_hop_t *hop, int64_t now_ms)
{
    if (!hop->paused)
        sl_timer_arm(&hop->io->timers, &hop->idle_timer, now_ms + hop->params.idle_ms, on_idle_timeout);
}

/* ---- reading the answer ---------------------------------------------------------------------------- */

/*
 * h2o reads a socket until a read comes back short, into one buffer grown as
 * it goes: with the kernel's receive buffer autotuned (tcp_rmem, up to 32 MiB
 * on the test machine) a fast upstream put 32 MiB and more into one read, and
 * request.c copies it. A fixed receive buffer bounds each read: measured on a
 * 2 GiB stream to a fast client, sluice's RSS peaked at 118 MiB before, 25 MiB
 * after. Set once a read brought more than it, not on every connection: a
 * setsockopt per request showed in the benchmark, and small answers never need it.
 */
static void
cap_receive_buffer(sl_upconn_t *c)
{
    int rcvbuf = SL_HOP_RCVBUF_BYTES;
    setsockopt(h2o_socket_get_fd(c->sock), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    c->rcvbuf_capped = true;
}

/* The body bytes in the connection's buffer, unframed: how far the body got, and whether it ended. */
static sl_chunked_status_t
unframe_body(sl_hop_t *hop, h2o_buffer_t *in, bool closed)
{
    switch (hop->framing.body) {
    case SL_HTTP1_LENGTH:
        if ((uint64_t)in->size >= hop->body_left) {
            /* Bytes past the body are no answer to anything: dropped, and the connection is not kept. */
            hop->reusable = hop->reusable && (uint64_t)in->size == hop->body_left;
            in->size = (size_t)hop->body_left;
            hop->body_left = 0;
            return SL_CHUNKED_END;
        }
        hop->body_left -= in->size;
        return SL_CHUNKED_MORE;
    case SL_HTTP1_CHUNKED: {
        size_t len = in->size, after = 0;
        sl_chunked_status_t st = sl_chunked_decode(&hop->chunked, in->bytes, &len, &after);
        in->size = len;
        if (st == SL_CHUNKED_END && after > 0)
            hop->reusable = false;
        return st;
    }
    case SL_HTTP1_UNTIL_CLOSE:
        return closed ? SL_CHUNKED_END : SL_CHUNKED_MORE;
    case SL_HTTP1_NO_BODY:
        break;
    }
    return SL_CHUNKED_END;
}

/* Body bytes (or the connection's end) arrived; err as h2o reports it, after the bytes it read. */
static void
read_body(sl_hop_t *hop, const char *err)
{
    h2o_buffer_t **in = &hop->conn->sock->input;
    sl_chunked_status_t st = unframe_body(hop, *in, err == h2o_socket_error_closed);
    if ((*in)->size > 0) {
        if (!hop->conn->rcvbuf_capped && (*in)->size > SL_HOP_RCVBUF_BYTES)
            cap_receive_buffer(hop->conn);
        hop->in_callback = true;
        hop->cb.on_body(hop->data, in, st == SL_CHUNKED_END);
        hop->in_callback = false;
        if (hop->cancelled) {
            free_hop(hop);
            return;
        }
        /* A chunked body is unframed in place: bytes left here would be unframed twice. */
        if (hop->conn != NULL && (*in)->size > 0)
            h2o_buffer_consume(in, (*in)->size);
    }
    if (st == SL_CHUNKED_END)
        finish(hop, SL_HOP_END_EOS, "end of stream");
    else if (st == SL_CHUNKED_BAD)
        finish(hop, SL_HOP_END_BROKEN, "the upstream's chunked body is malformed");
    else if (err != NULL)
        finish(hop, SL_HOP_END_BROKEN,
               err == h2o_socket_error_closed ? "the upstream closed the connection before the body's end"
                                              : err);
    else
        touch_idle(hop, sl_now_ms());
}

/* A head the hop cannot use: the connection broke before a head, in the stale rule's terms too. */
static void
bad_head(sl_hop_t *hop, const char *detail)
{
    finish(hop, SL_HOP_END_BROKEN_BEFORE_HEAD, detail);
}

static void
read_head(sl_hop_t *hop, const char *err)
{
    h2o_buffer_t **in = &hop->conn->sock->input;
    sl_http1_field_t fields[MAX_FIELDS];
    size_t n_fields;
    int minor, status, head_len;
    for (;;) {
        if ((*in)->size == 0) {
            if (err != NULL)
                bad_head(hop, err == h2o_socket_error_closed ? "the upstream closed the connection" : err);
            else
                touch_idle(hop, sl_now_ms());
            return;
        }
        hop->any_byte = true;
        const char *msg;
        size_t msg_len;
        n_fields = MAX_FIELDS;
        head_len = phr_parse_response((*in)->bytes, (*in)->size, &minor, &status, &msg, &msg_len, fields,
                                      &n_fields, 0);
        if (head_len == -1) {
            bad_head(hop, "the response head is not HTTP/1.x (or has more than 100 fields)");
            return;
        }
        /* Without this bound an upstream whose head never ends would take all memory until the idle timeout.
         */
        if ((head_len == -2 ? (*in)->size : (size_t)head_len) > SL_HOP_MAX_HEAD_BYTES) {
            bad_head(hop, "the response head is larger than 64 KiB");
            return;
        }
        if (head_len == -2) {
            if (err != NULL)
                bad_head(hop, "the upstream closed the connection inside the response head");
            else
                touch_idle(hop, sl_now_ms());
            return;
        }
        /* An interim answer (100 Continue, 103 Early Hints) is not the answer. */
        if (status < 100 || status > 199 || status == 101)
            break;
        h2o_buffer_consume(in, (size_t)head_len);
    }
    h2o_header_t headers[MAX_FIELDS];
    h2o_iovec_t names[MAX_FIELDS];
    for (size_t i = 0; i < n_fields; i++) {
        if (fields[i].name == NULL) {
            bad_head(hop, "the response head folds a field over several lines");
            return;
        }
        /* Lowercased in the connection's buffer, as every reader of the head compares them. */
        h2o_strtolower((char *)fields[i].name, fields[i].name_len);
        names[i] = h2o_iovec_init(fields[i].name, fields[i].name_len);
        headers[i] =
            (h2o_header_t){.name = &names[i], .value = h2o_iovec_init(fields[i].value, fields[i].value_len)};
    }
    if (!sl_http1_framing(minor, status, fields, n_fields, &hop->framing)) {
        bad_head(hop, "the response head's Content-Length is malformed or conflicting");
        return;
    }
    hop->state = HOP_READING_BODY;
    hop->reusable = hop->framing.keep_alive;
    hop->body_left = hop->framing.content_length;
    hop->in_callback = true;
    hop->cb.on_head(hop->data, status, headers, n_fields);
    hop->in_callback = false;
    if (hop->cancelled) {
        free_hop(hop);
        return;
    }
    h2o_buffer_consume(in, (size_t)head_len);
    if (hop->framing.body == SL_HTTP1_NO_BODY ||
        (hop->framing.body == SL_HTTP1_LENGTH && hop->framing.content_length == 0)) {
        finish(hop, SL_HOP_END_EOS, "end of stream");
        return;
    }
    if ((*in)->size > 0 || err != NULL)
        read_body(hop, err);
    else
        touch_idle(hop, sl_now_ms());
}

static void
on_readable(h2o_socket_t *sock, const char *err)
{
    sl_upconn_t *c = sock->data;
    sl_hop_t *hop = c->hop;
    if (hop == NULL) {
        /* Bytes no request asked for while the connection waits for its write to be reported. */
        sl_upconn_close(c);
        return;
    }
    if (hop->state == HOP_WAITING_HEAD)
        read_head(hop, err);
    else
        read_body(hop, err);
}

/* ---- sending the request ------------------------------------------------------------------------ */

static void
on_written(h2o_socket_t *sock, const char *err)
{
    sl_upconn_t *c = sock->data;
    sl_hop_t *hop = c->hop;
    if (hop == NULL) {
        /* The answer was read to its end before the write was reported (let_go_of_connection). */
        if (err == NULL)
            sl_keepalive_put(c, sl_now_ms());
        else
            sl_upconn_close(c);
        return;
    }
    hop->writing = false;
    if (err == NULL)
        return;
    /* After a head the reading side tells how the answer ends; the connection is not kept. */
    hop->reusable = false;
    if (hop->state == HOP_WAITING_HEAD)
        bad_head(hop, err);
}

/*
 * A plaintext request goes out in one sendmsg of our own when the socket
 * takes it all, as it does but for large bodies: h2o's write reports its
 * end only after the loop's next poll, with the socket polled for writing
 * meanwhile (two epoll_ctl and a poll per request, measured), since hops
 * start from a timer, outside h2o's pending work. What the socket does not
 * take, and every TLS request, goes through h2o_socket_write.
 */
static void
write_request(sl_hop_t *hop)
{
    h2o_iovec_t *bufs = hop->reqbufs;
    size_t n = hop->params.body.len > 0 ? 2 : 1;
    h2o_socket_t *sock = hop->conn->sock;
    if (sock->ssl == NULL) {
        struct iovec iov[2];
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            iov[i] = (struct iovec){.iov_base = bufs[i].base, .iov_len = bufs[i].len};
            total += bufs[i].len;
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = n};
        ssize_t sent;
        while ((sent = sendmsg(h2o_socket_get_fd(sock), &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
            ;
        if (sent == (ssize_t)total)
            return;
        /* The rest (or, on an error, all of it: h2o meets the same error and reports it) goes through h2o. */
        for (size_t done = sent > 0 ? (size_t)sent : 0; done > 0 && n > 0;) {
            size_t step = done < bufs->len ? done : bufs->len;
            bufs->base += step;
            bufs->len -= step;
            done -= step;
            if (bufs->len == 0) {
                bufs++;
                n--;
            }
        }
    }
    hop->writing = true;
    h2o_socket_write(sock, bufs, n, on_written);
}

/* Writes the request and reads at once: a kept connection the upstream closed shows as soon as possible. */
static void
send_request(sl_hop_t *hop, int64_t now_ms)
{
    sl_timer_cancel(&hop->io->timers, &hop->connect_timer);
    hop->state = HOP_WAITING_HEAD;
    hop->written_ms = now_ms;
    hop->reqbufs[0] = hop->params.head;
    hop->reqbufs[1] = hop->params.body;
    write_request(hop);
    sl_read_budget_set(h2o_socket_get_fd(hop->conn->sock), FIRST_READ_BYTES);
    h2o_socket_read_start(hop->conn->sock, on_readable);
    touch_idle(hop, now_ms);
    if (hop->cb.on_sent != NULL) {
        hop->in_callback = true;
        hop->cb.on_sent(hop->data);
        hop->in_callback = false;
        /* Inside sl_hop_start nobody holds the hop yet to cancel it; sl_hop_start frees it all the same. */
        if (hop->cancelled && !hop->starting)
            free_hop(hop);
    }
}

/* ---- connecting ------------------------------------------------------------------------------------- */

static void
on_handshake(h2o_socket_t *sock, const char *err)
{
    sl_upconn_t *c = sock->data;
    if (err != NULL)
        finish(c->hop, SL_HOP_END_CONNECT_FAILED, err);
    else
        send_request(c->hop, sl_now_ms());
}

static void
on_connected(h2o_socket_t *sock, const char *err)
{
    sl_upconn_t *c = sock->data;
    sl_hop_t *hop = c->hop;
    if (err != NULL) {
        finish(hop, SL_HOP_END_CONNECT_FAILED, err);
        return;
    }
    const sl_peer_t *p = hop->params.peer;
    if (p->addr.ss_family != AF_UNIX) {
        /* TCP (a named peer's address is not kept): a kept connection's next request must not wait for an
         * ACK. */
        int on = 1;
        setsockopt(h2o_socket_get_fd(sock), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    }
    if (p->is_tls) {
        /* The server name is checked against the certificate by the context's verify callback (tls.h). */
        SSL_CTX *ctx = p->by_address ? hop->io->upstream_ssl_by_address : hop->io->upstream_ssl;
        h2o_socket_ssl_handshake(sock, ctx, p->host, on_handshake);
        return;
    }
    send_request(hop, sl_now_ms());
}

static void
connect_to(sl_hop_t *hop, struct sockaddr *addr, socklen_t len)
{
    h2o_socket_t *sock = h2o_socket_connect(hop->io->loop, addr, len, on_connected);
    if (sock == NULL) {
        finish(hop, SL_HOP_END_CONNECT_FAILED, h2o_socket_error_conn_fail);
        return;
    }
    hop->conn = sl_upconn_new(sock, hop->params.peer, &hop->io->keepalive);
    hop->conn->hop = hop;
}

static void
on_resolved(h2o_hostinfo_getaddr_req_t *req, const char *errstr, struct addrinfo *res, void *data)
{
    (void)req;
    sl_hop_t *hop = data;
    hop->resolving = NULL;
    if (errstr != NULL) {
        finish(hop, SL_HOP_END_CONNECT_FAILED, errstr);
        return;
    }
    struct addrinfo *ai = h2o_hostinfo_select_one(res);
    connect_to(hop, ai->ai_addr, ai->ai_addrlen);
}

static void
start_connect(sl_hop_t *hop)
{
    const sl_peer_t *p = hop->params.peer;
    if (p->by_address) {
        connect_to(hop, (struct sockaddr *)&p->addr, p->addr_len);
        return;
    }
    hop->resolving =
        h2o_hostinfo_getaddr(&hop->io->getaddr_receiver, h2o_iovec_init(p->host, strlen(p->host)),
                             h2o_iovec_init(p->serv, strlen(p->serv)), AF_UNSPEC, SOCK_STREAM, IPPROTO_TCP,
                             AI_ADDRCONFIG | AI_NUMERICSERV, on_resolved, hop);
}

/* ---- the hop's API -------------------------------------------------------------------------------- */

void
sl_hop_rebind(sl_hop_t *hop, const sl_hop_callbacks_t *cb, void *data)
{
    hop->cb = *cb;
    hop->data = data;
}

sl_hop_t *
sl_hop_start(sl_worker_io_t *io, const sl_hop_params_t *params, const sl_hop_callbacks_t *cb, void *data)
{
    sl_hop_t *hop = sl_xcalloc(1, sizeof(*hop));
    hop->io = io;
    hop->params = *params;
    hop->cb = *cb;
    hop->data = data;
    hop->starting = true;
    int64_t now = sl_now_ms();
    sl_timer_arm(&io->timers, &hop->total_timer, now + params->total_ms, on_total_timeout);
    hop->conn = params->fresh ? NULL : sl_keepalive_take(&io->keepalive, params->peer);
    if (hop->conn != NULL) {
        hop->conn->hop = hop;
        hop->reused = true;
        send_request(hop, now);
    } else {
        sl_timer_arm(&io->timers, &hop->connect_timer, now + params->connect_ms, on_connect_timeout);
        start_connect(hop);
    }
    /* A connect error may already have ended it: then finish() deferred the report. */
    hop->starting = false;
    if (hop->cancelled) {
        free_hop(hop);
        return NULL;
    }
    return hop;
}

void
sl_hop_connection_facts(const sl_hop_t *hop, sl_connection_facts_t *out)
{
    int64_t at = hop->ended_ms > 0 ? hop->ended_ms : sl_now_ms();
    *out = (sl_connection_facts_t){.reused = hop->reused,
                                   .any_byte = hop->any_byte,
                                   .ms_after_write = hop->written_ms > 0 ? at - hop->written_ms : -1};
}

void
sl_hop_cancel(sl_hop_t *hop)
{
    hop->cancelled = true;
    /* Inside a callback, its caller closes the connection (or is ending anyway) and frees the hop. */
    if (!hop->in_callback)
        free_hop(hop);
}

void
sl_hop_pause_reading(sl_hop_t *hop)
{
    if (hop->paused || hop->conn == NULL || hop->state != HOP_READING_BODY)
        return;
    hop->paused = true;
    h2o_socket_read_stop(hop->conn->sock);
    sl_timer_cancel(&hop->io->timers, &hop->idle_timer);
}

void
sl_hop_resume_reading(sl_hop_t *hop)
{
    if (!hop->paused)
        return;
    hop->paused = false;
    if (hop->conn != NULL)
        h2o_socket_read_start(hop->conn->sock, on_readable);
    touch_idle(hop, sl_now_ms());
}
