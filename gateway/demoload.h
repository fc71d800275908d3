/*
 * Demo mode's load generator (`sluice --demo-load [N]`): N virtual clients
 * that call the gateway like real SDKs would, so the live board, the
 * timelines and the provider throttles have traffic to show. Each client
 * loops: pick a dialect and a model at random (mostly streaming), send the
 * request in that dialect's shape with the demo key in the dialect's own
 * header, read the whole answer, wait 0.3-3 s, again. One thread per
 * client, each with one blocking socket at a time (Connection: close), and
 * one more that logs a line per minute: requests sent and statuses seen.
 */
#ifndef SL_DEMOLOAD_H
#define SL_DEMOLOAD_H

#include <stdint.h>

/* The most virtual clients sl_demoload_start runs; more are clamped to it. */
#define SL_DEMOLOAD_MAX_CLIENTS 64

typedef struct sl_demoload sl_demoload_t;

/*
 * Starts `clients` virtual clients (0 is read as 1, more than
 * SL_DEMOLOAD_MAX_CLIENTS as that many) against the gateway on
 * 127.0.0.1:gateway_port, authenticating with key (copied; the gateway key
 * of a configured client, e.g. SL_DEMO_CLIENT_KEY). Returns NULL when a
 * thread cannot be started (nothing is left running).
 */
sl_demoload_t *sl_demoload_start(uint16_t gateway_port, const char *key, unsigned clients);

/*
 * Stops every client (a request in flight is abandoned: its socket is shut
 * down), logs the totals, and frees l. NULL is fine.
 */
void sl_demoload_stop(sl_demoload_t *l);

/* Requests answered so far (any status, a transport failure included). Any thread. */
uint64_t sl_demoload_count(sl_demoload_t *l);

#endif
