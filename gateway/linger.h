/*
 * The lingering close of an HTTP/1 connection whose answer went out before
 * the client had sent its whole body (a 413 for a body over the limit, a
 * 400 for a broken chunked body). h2o 2.2.5 closes such a connection as soon
 * as its answer is written; a client still sending then gets EPIPE or a reset
 * instead of the answer. Like nginx's lingering close, sluice keeps the
 * connection (through its own descriptor of the socket) and reads and
 * discards what still comes, for a bounded time and size, so the client
 * reads the answer before the connection goes.
 */
#ifndef SL_LINGER_H
#define SL_LINGER_H

#include <stdbool.h>
#include <stdint.h>

#include <h2o.h>

#include "core/timerheap.h"

/* nginx's lingering_time and lingering_timeout, and a cap on what is read and thrown away. */
#define SL_LINGER_TOTAL_MS  30000
#define SL_LINGER_IDLE_MS   5000
#define SL_LINGER_MAX_BYTES (256u * 1024 * 1024)
/* Connections lingering at once on one worker; past it, a connection closes as h2o closes it. */
#define SL_LINGER_MAX_CONNS 1024

/* What one lingering connection has done; the rule below reads it. */
typedef struct {
    int64_t started_ms, last_read_ms;
    uint64_t discarded;
} sl_linger_state_t;

/* When the connection must close (its time, its idle gap or its byte budget is spent); pure. */
int64_t sl_linger_close_at_ms(const sl_linger_state_t *s);

typedef struct sl_lingers sl_lingers_t;

/* A worker's lingering connections, on its loop and its timers. */
sl_lingers_t *sl_lingers_new(h2o_loop_t *loop, sl_timerheap_t *timers);

/*
 * Starts lingering on req's HTTP/1 connection: from now on what the client
 * sends is read and discarded, and once h2o has written the answer and let
 * the connection go, its write side is shut so the client sees the end.
 * Does nothing on HTTP/2 (the stream ends alone), on a connection without a
 * socket, or when the worker already lingers on SL_LINGER_MAX_CONNS.
 */
void sl_linger_start(sl_lingers_t *lingers, h2o_req_t *req);

/*
 * Takes sock, a connection whose last answer is fully written and that
 * sluice ends: shuts its write side, reads and discards what still comes as
 * above, then closes it (at once when the worker lingers on enough).
 */
void sl_linger_socket(sl_lingers_t *lingers, h2o_socket_t *sock);

/* Connections lingering now (tests and logs). */
unsigned sl_lingers_count(const sl_lingers_t *lingers);

#endif
