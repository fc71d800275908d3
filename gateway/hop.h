/*
 * One upstream attempt over HTTP/1.1 on the worker's own loop: take an idle
 * connection to the peer from the worker's keep-alive store (keepalive.h)
 * or connect (resolve, TCP, TLS), send the request, read the response head
 * (picohttpparser) and its body (Content-Length, chunked, or until close),
 * report them, and keep the connection for the next request when the
 * response allows it. Owns its timers: connect, idle (no byte for idle_ms,
 * the first byte included) and total. Knows nothing of dialects or
 * failover: request.c decides what each outcome means.
 */
#ifndef SL_HOP_H
#define SL_HOP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <h2o.h>

#include "core/next_step.h"
#include "worker.h"

/* Where hops connect to: made once per upstream origin, compared by address by the keep-alive store. */
typedef struct sl_peer {
    char *host;   /* the name to resolve, or the address as text: the TLS server name either way */
    char serv[8]; /* the port as text, for the resolver */
    bool is_tls;
    bool by_address; /* addr is where to connect (no resolver) and TLS uses the TLS 1.3-only context */
    struct sockaddr_storage addr;
    socklen_t addr_len;
} sl_peer_t;

/* A peer named by host (resolved on every new connection) or by an IP address literal (bracketless). */
sl_peer_t *sl_peer_new(const char *host, uint16_t port, bool is_tls);

/* A peer at a socket address (an internal UNIX socket, say), never TLS. */
sl_peer_t *sl_peer_at(const struct sockaddr *addr, socklen_t len);

void sl_peer_free(sl_peer_t *peer);

typedef enum {
    SL_HOP_END_EOS,                /* the answer ended cleanly */
    SL_HOP_END_CONNECT_FAILED,     /* TCP or TLS could not be set up (includes the connect timeout) */
    SL_HOP_END_BROKEN_BEFORE_HEAD, /* the connection failed after the request went out, before a head */
    SL_HOP_END_BROKEN,             /* the connection failed after the head */
    SL_HOP_END_IDLE_TIMEOUT,       /* no byte from the upstream for idle_ms */
    SL_HOP_END_TOTAL_TIMEOUT,      /* the whole hop took longer than total_ms */
} sl_hop_end_t;

typedef struct sl_hop sl_hop_t;

typedef struct {
    /* Optional: connected, and the request's bytes are being written now. */
    void (*on_sent)(void *data);
    /* The head arrived. headers are valid during the call only. */
    void (*on_head)(void *data, int status, const h2o_header_t *headers, size_t n_headers);
    /*
     * Body bytes are in *input (de-chunked): the connection's own buffer, so take them all
     * (h2o_buffer_consume); the hop drops what is left when the callback returns.
     * end_follows: these are the last bytes and on_end (SL_HOP_END_EOS) comes right after.
     */
    void (*on_body)(void *data, h2o_buffer_t **input, bool end_follows);
    /* The hop is over (after any last on_body); the hop is freed after this returns. */
    void (*on_end)(void *data, sl_hop_end_t how, const char *detail);
} sl_hop_callbacks_t;

typedef struct {
    const sl_peer_t *peer; /* must outlive the hop and every connection kept to it */
    bool fresh;            /* connect anew, never taking an idle connection */
    h2o_iovec_t head;      /* request line and headers; must stay valid until on_end or sl_hop_cancel */
    h2o_iovec_t body;
    uint32_t connect_ms, idle_ms, total_ms;
} sl_hop_params_t;

/*
 * Starts a hop. Only on_sent may be called from inside this function (a kept
 * connection is written at once); a connect failure is reported on a later
 * loop turn.
 */
sl_hop_t *sl_hop_start(sl_worker_io_t *io, const sl_hop_params_t *params, const sl_hop_callbacks_t *cb,
                       void *data);

/*
 * How the hop's connection was used, for the stale keep-alive rule
 * (core/next_step.h): whether it was kept alive from an earlier request, how long after the
 * request's bytes went out it broke, and whether any answer byte came back.
 * Valid inside the hop's callbacks.
 */
void sl_hop_connection_facts(const sl_hop_t *hop, sl_connection_facts_t *out);

/* The hop's callbacks and their data from now on (a first-token hedge's two hops change hands). */
void sl_hop_rebind(sl_hop_t *hop, const sl_hop_callbacks_t *cb, void *data);

/* Aborts a hop: the connection is closed and no callback follows. May be called from inside a callback. */
void sl_hop_cancel(sl_hop_t *hop);

/*
 * Backpressure: stop reading from the upstream while the client is slow, and
 * go on later. The idle timer does not run while reading is paused.
 */
void sl_hop_pause_reading(sl_hop_t *hop);
void sl_hop_resume_reading(sl_hop_t *hop);

/* The receive buffer of upstream sockets (the kernel doubles it): what one read can bring in. */
#define SL_HOP_RCVBUF_BYTES (1 << 20)

/* The longest upstream response head read; a longer one ends the hop as SL_HOP_END_BROKEN_BEFORE_HEAD. */
#define SL_HOP_MAX_HEAD_BYTES (64u << 10)

/* Short English name of an end, for logs. */
const char *sl_hop_end_name(sl_hop_end_t how);

#endif
