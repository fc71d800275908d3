/*
 * A worker's idle upstream connections, kept for its next request to the
 * same peer. They never leave the worker's loop, so taking one back costs no
 * system call: h2o's shared socket pool exported and re-imported a socket
 * around every request (epoll_ctl and fcntl twice, a recv MSG_PEEK).
 * An idle connection is watched: the upstream closing it (or sending
 * anything) closes it here. It is closed after SL_KEEPALIVE_IDLE_MS unused,
 * and the oldest goes when the worker already keeps SL_KEEPALIVE_MAX_IDLE.
 * Everything here runs on the worker's own thread.
 */
#ifndef SL_KEEPALIVE_H
#define SL_KEEPALIVE_H

#include <stdbool.h>
#include <stdint.h>

#include <h2o.h>

#include "core/timerheap.h"

struct sl_peer;
struct sl_hop;
struct sl_keepalive;

/* One upstream connection, in use by a hop or idle in a worker's store. */
typedef struct sl_upconn {
    h2o_socket_t *sock;         /* sock->data is this connection */
    const struct sl_peer *peer; /* where it goes: what it is kept under (compared by address) */
    struct sl_hop *hop;         /* the hop using it; NULL while idle or about to be */
    struct sl_keepalive *store; /* the worker's store, which it goes back to */
    h2o_linklist_t link;        /* in the store's list while idle */
    int64_t idle_since_ms;
    bool rcvbuf_capped; /* its receive buffer was fixed (hop.c, cap_receive_buffer) */
} sl_upconn_t;

typedef struct sl_keepalive {
    sl_timerheap_t *timers;
    h2o_linklist_t idle; /* the most recently idle first */
    size_t n_idle;
    sl_timer_t expiry; /* due when the oldest idle connection has been idle SL_KEEPALIVE_IDLE_MS */
} sl_keepalive_t;

/* Idle connections are closed after this long unused. */
#define SL_KEEPALIVE_IDLE_MS 20000

/* At most this many idle connections per worker, all peers together. */
#define SL_KEEPALIVE_MAX_IDLE 512

void sl_keepalive_init(sl_keepalive_t *ka, sl_timerheap_t *timers);

/* A connection for a socket just connected to peer; the caller owns it (sl_upconn_close or _put). */
sl_upconn_t *sl_upconn_new(h2o_socket_t *sock, const struct sl_peer *peer, sl_keepalive_t *store);

/* Closes the connection's socket and frees it. It must not be idle in a store. */
void sl_upconn_close(sl_upconn_t *c);

/* The most recently idle connection to peer, now the caller's; NULL when none is kept. */
sl_upconn_t *sl_keepalive_take(sl_keepalive_t *ka, const struct sl_peer *peer);

/*
 * Keeps a connection that has read a whole response and has nothing
 * pending (its input empty, no write in flight) in its store, for a later
 * request. The store owns it from here.
 */
void sl_keepalive_put(sl_upconn_t *c, int64_t now_ms);

/* Closes every idle connection (a worker that stops). */
void sl_keepalive_close_all(sl_keepalive_t *ka);

#endif
