#define _GNU_SOURCE /* memmem */
#include "hop.h"

#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>

#include <h2o/http1client.h>

#include "core/xalloc.h"

typedef enum { HOP_CONNECTING, HOP_WAITING_HEAD, HOP_READING_BODY, HOP_ENDED } hop_state_t;

struct sl_hop {
    sl_worker_io_t *io;
    h2o_http1client_t *client; /* NULL once h2o has freed it or we cancelled it */
    sl_hop_params_t params;
    sl_hop_callbacks_t cb;
    void *data;
    h2o_iovec_t reqbufs[2];
    hop_state_t state;
    sl_timer_t connect_timer, idle_timer, total_timer;
    sl_timer_t deferred_end; /* reports an end that happened inside sl_hop_start */
    sl_timer_t head_guard;   /* wraps h2o's head reader once it reads (see guard_head_read) */
    h2o_socket_cb head_reader;
    bool head_too_large;
    sl_hop_end_t pending_how;
    const char *pending_detail;
    bool starting, in_callback, cancelled, paused;
    bool reused;        /* the connection came from the pool (h2o hands a pooled one over at once) */
    bool any_byte;      /* something of an answer arrived */
    int64_t written_ms; /* when the request's bytes were handed to the connection; 0 = not yet */
    int64_t ended_ms;
    bool rcvbuf_capped;
    h2o_socket_cb saved_reader;
};

int64_t
sl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
sl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t
sl_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

static void
stop_timers(sl_hop_t *hop)
{
    sl_timer_cancel(&hop->io->timers, &hop->connect_timer);
    sl_timer_cancel(&hop->io->timers, &hop->idle_timer);
    sl_timer_cancel(&hop->io->timers, &hop->total_timer);
    sl_timer_cancel(&hop->io->timers, &hop->deferred_end);
    sl_timer_cancel(&hop->io->timers, &hop->head_guard);
}

static void
free_hop(sl_hop_t *hop)
{
    stop_timers(hop);
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

/* The hop is over; h2o's client is already gone. Reports it unless the owner cancelled. */
static void
finish(sl_hop_t *hop, sl_hop_end_t how, const char *detail)
{
    hop->ended_ms = sl_now_ms();
    hop->client = NULL;
    hop->state = HOP_ENDED;
    stop_timers(hop);
    if (hop->cancelled) {
        free_hop(hop);
        return;
    }
    if (hop->starting) {
        hop->pending_how = how;
        hop->pending_detail = detail;
        sl_timer_arm(&hop->io->timers, &hop->deferred_end, sl_now_ms(), on_deferred_end);
        return;
    }
    hop->in_callback = true;
    hop->cb.on_end(hop->data, how, detail);
    free_hop(hop);
}

static void
on_timer(sl_hop_t *hop, sl_hop_end_t how, const char *detail)
{
    if (hop->client != NULL)
        h2o_http1client_cancel(hop->client);
    finish(hop, how, detail);
}

static void
on_connect_timeout(sl_timer_t *t)
{
    on_timer(H2O_STRUCT_FROM_MEMBER(sl_hop_t, connect_timer, t), SL_HOP_END_CONNECT_FAILED,
             "connect timeout");
}

static void
on_idle_timeout(sl_timer_t *t)
{
    on_timer(H2O_STRUCT_FROM_MEMBER(sl_hop_t, idle_timer, t), SL_HOP_END_IDLE_TIMEOUT, "idle timeout");
}

static void
on_total_timeout(sl_timer_t *t)
{
    on_timer(H2O_STRUCT_FROM_MEMBER(sl_hop_t, total_timer, t), SL_HOP_END_TOTAL_TIMEOUT, "total timeout");
}

static void
touch_idle(sl_hop_t *hop)
{
    if (!hop->paused)
        sl_timer_arm(&hop->io->timers, &hop->idle_timer, sl_now_ms() + hop->params.idle_ms, on_idle_timeout);
}

/*
 * h2o reads a socket until a read comes back short, into one buffer grown as
 * it goes: with the kernel's receive buffer autotuned (tcp_rmem, up to 32 MiB
 * on the test machine) a fast upstream put 32 MiB and more into one read, and
 * request.c copies it. A fixed receive buffer bounds each read: measured on a
 * 2 GiB stream to a fast client, sluice's RSS peaked at 118 MiB before, 25 MiB
 * after. Set once a read brought more than it, not on every hop: a setsockopt
 * per request showed in the benchmark, and small answers never need it.
 */
static void
cap_receive_buffer(sl_hop_t *hop, h2o_socket_t *sock)
{
    int rcvbuf = SL_HOP_RCVBUF_BYTES;
    setsockopt(h2o_socket_get_fd(sock), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    hop->rcvbuf_capped = true;
}

static int
on_body(h2o_http1client_t *client, const char *errstr)
{
    sl_hop_t *hop = client->data;
    /* The data comes first: the last bytes arrive together with the end. */
    if (client->sock != NULL && client->sock->input->size > 0 && !hop->cancelled) {
        if (!hop->rcvbuf_capped && client->sock->input->size > SL_HOP_RCVBUF_BYTES)
            cap_receive_buffer(hop, client->sock);
        hop->in_callback = true;
        hop->cb.on_body(hop->data, &client->sock->input, errstr == h2o_http1client_error_is_eos);
        hop->in_callback = false;
    }
    if (hop->cancelled) {
        /* With errstr set, h2o frees the client itself; else -1 asks it to close. */
        free_hop(hop);
        return errstr != NULL ? 0 : -1;
    }
    if (errstr != NULL) {
        finish(hop, errstr == h2o_http1client_error_is_eos ? SL_HOP_END_EOS : SL_HOP_END_BROKEN, errstr);
        return 0;
    }
    touch_idle(hop);
    return 0;
}

/*
 * h2o's client reads a response head into one buffer with no bound, parsing
 * it again after every read: an upstream whose head never ends would take all
 * memory until the idle timeout (measured: 600 MB in 10 s on loopback). Its
 * head reader is wrapped by this guard, which ends the hop as a connection
 * broken before the head once SL_HOP_MAX_HEAD_BYTES arrived without a blank
 * line. Once the head is parsed h2o installs its body reader in the guard's
 * place.
 */
static void
guard_head_read(h2o_socket_t *sock, const char *err)
{
    h2o_http1client_t *client = sock->data;
    sl_hop_t *hop = client->data;
    if (err == NULL && sock->input->size > SL_HOP_MAX_HEAD_BYTES &&
        memmem(sock->input->bytes, SL_HOP_MAX_HEAD_BYTES, "\r\n\r\n", 4) == NULL) {
        hop->head_too_large = true;
        /* h2o's own path for a read error before the head: it reports it (on_head) and closes. */
        err = h2o_socket_error_closed;
    }
    hop->head_reader(sock, err);
}

/* h2o starts reading the head only once the request is written: the guard goes in when it does. */
static void
on_head_guard(sl_timer_t *t)
{
    sl_hop_t *hop = H2O_STRUCT_FROM_MEMBER(sl_hop_t, head_guard, t);
    if (hop->state != HOP_WAITING_HEAD || hop->client == NULL || hop->client->sock == NULL)
        return;
    h2o_socket_t *sock = hop->client->sock;
    if (sock->_cb.read == NULL) {
        sl_timer_arm(&hop->io->timers, &hop->head_guard, sl_now_ms() + 1, on_head_guard);
    } else if (sock->_cb.read != guard_head_read) {
        hop->head_reader = sock->_cb.read;
        sock->_cb.read = guard_head_read;
    }
}

static h2o_http1client_body_cb
on_head(h2o_http1client_t *client, const char *errstr, int minor_version, int status, h2o_iovec_t msg,
        h2o_header_t *headers, size_t num_headers, int rlen)
{
    (void)minor_version;
    (void)msg;
    (void)rlen;
    sl_hop_t *hop = client->data;
    if (errstr != NULL && errstr != h2o_http1client_error_is_eos) {
        hop->any_byte = hop->any_byte || (client->sock != NULL && client->sock->input->size > 0);
        finish(hop, SL_HOP_END_BROKEN_BEFORE_HEAD,
               hop->head_too_large ? "the response head is larger than 64 KiB" : errstr);
        return NULL;
    }
    hop->state = HOP_READING_BODY;
    hop->any_byte = true;
    hop->in_callback = true;
    hop->cb.on_head(hop->data, status, headers, num_headers);
    hop->in_callback = false;
    if (hop->cancelled) {
        free_hop(hop);
        return NULL;
    }
    if (errstr == h2o_http1client_error_is_eos) {
        /* A head without a body (204, 304). */
        finish(hop, SL_HOP_END_EOS, errstr);
        return NULL;
    }
    touch_idle(hop);
    return on_body;
}

static h2o_http1client_head_cb
on_connect(h2o_http1client_t *client, const char *errstr, h2o_iovec_t **reqbufs, size_t *reqbufcnt,
           int *method_is_head)
{
    sl_hop_t *hop = client->data;
    if (errstr != NULL) {
        finish(hop, SL_HOP_END_CONNECT_FAILED, errstr);
        return NULL;
    }
    sl_timer_cancel(&hop->io->timers, &hop->connect_timer);
    /* h2o's pool hands an idle connection over inside the connect call; a new one comes later. */
    hop->reused = hop->starting;
    hop->written_ms = sl_now_ms();
    hop->state = HOP_WAITING_HEAD;
    hop->reqbufs[0] = hop->params.head;
    hop->reqbufs[1] = hop->params.body;
    *reqbufs = hop->reqbufs;
    *reqbufcnt = hop->params.body.len > 0 ? 2 : 1;
    *method_is_head = 0;
    touch_idle(hop);
    sl_timer_arm(&hop->io->timers, &hop->head_guard, sl_now_ms(), on_head_guard);
    if (hop->cb.on_sent != NULL) {
        hop->in_callback = true;
        hop->cb.on_sent(hop->data);
        hop->in_callback = false;
        if (hop->cancelled) {
            free_hop(hop);
            return NULL;
        }
    }
    return on_head;
}

/* A connection of its own to the pool's peer (h2o's client then closes it after the answer). */
static void
connect_fresh(sl_hop_t *hop, h2o_http1client_ctx_t *ctx)
{
    const h2o_socketpool_t *pool = hop->params.pool;
    uint16_t port = 0;
    if (pool->type == H2O_SOCKETPOOL_TYPE_NAMED) {
        port = (uint16_t)strtoul(pool->peer.named_serv.base, NULL, 10);
    } else {
        const struct sockaddr *sa = (const struct sockaddr *)&pool->peer.sockaddr.bytes;
        if (sa->sa_family == AF_INET)
            port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
        else if (sa->sa_family == AF_INET6)
            port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    }
    h2o_http1client_connect(&hop->client, hop, ctx, pool->peer.host, port, pool->is_ssl, on_connect);
}

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
    hop->state = HOP_CONNECTING;
    hop->starting = true;
    int64_t now = sl_now_ms();
    sl_timer_arm(&io->timers, &hop->connect_timer, now + params->connect_ms, on_connect_timeout);
    sl_timer_arm(&io->timers, &hop->total_timer, now + params->total_ms, on_total_timeout);
    h2o_http1client_ctx_t *ctx = params->by_address ? &io->client_ctx_by_address : &io->client_ctx;
    if (params->fresh)
        connect_fresh(hop, ctx);
    else
        h2o_http1client_connect_with_pool(&hop->client, hop, ctx, params->pool, on_connect);
    /* A connect error may already have ended it: then finish() deferred the report. */
    hop->starting = false;
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
    if (hop->in_callback) {
        /* The callback's caller closes the connection (or is ending anyway) and frees the hop. */
        hop->cancelled = true;
        return;
    }
    hop->cancelled = true;
    if (hop->client != NULL)
        h2o_http1client_cancel(hop->client);
    free_hop(hop);
}

void
sl_hop_pause_reading(sl_hop_t *hop)
{
    if (hop->paused || hop->client == NULL || hop->client->sock == NULL || hop->state != HOP_READING_BODY)
        return;
    hop->paused = true;
    /* h2o 2.2.5 has no pause for its client; its reader is kept and restored. */
    hop->saved_reader = hop->client->sock->_cb.read;
    h2o_socket_read_stop(hop->client->sock);
    sl_timer_cancel(&hop->io->timers, &hop->idle_timer);
}

void
sl_hop_resume_reading(sl_hop_t *hop)
{
    if (!hop->paused)
        return;
    hop->paused = false;
    if (hop->client != NULL && hop->client->sock != NULL && hop->saved_reader != NULL)
        h2o_socket_read_start(hop->client->sock, hop->saved_reader);
    touch_idle(hop);
}
