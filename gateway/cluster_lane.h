/*
 * A worker's own connection to its cluster's Redis, on the worker's h2o
 * loop: the claims its requests wait for go out and come back without
 * leaving the worker's thread (two thread handoffs less per claim than
 * through the cluster's thread; quality.md bar 7). h2o 2.2.5 has no
 * hiredis adapter: hiredis's asynchronous API is attached to the loop
 * through an h2o socket made from the connection's descriptor, told of
 * readiness only (hiredis reads and writes the descriptor itself).
 *
 * Only for commands whose answer a worker waits for: the cluster's thread
 * (cluster.h) keeps the subscription, the heartbeat, the joined/degraded
 * state and the batched writes. Not connected (yet, or since it broke, when
 * it reconnects with backoff), a lane sends nothing and says so: the caller
 * sends through the cluster's thread.
 */
#ifndef SL_CLUSTER_LANE_H
#define SL_CLUSTER_LANE_H

#include <stdbool.h>

#include <h2o.h>

#include "cluster.h"
#include "core/timerheap.h"

typedef struct sl_cluster_lane sl_cluster_lane_t;

/* On the worker's thread; connects in the background. Lives as long as the worker (the process). */
sl_cluster_lane_t *sl_cluster_lane_new(h2o_loop_t *loop, sl_timerheap_t *timers, const sl_cluster_t *cluster);

/*
 * Sends a command (an EVAL goes as EVALSHA once Redis knows the script) and
 * takes a's arguments (a is empty again); done runs on this worker exactly
 * once, with NULL when the connection broke first. false: not connected,
 * nothing sent, a untouched and done never called.
 */
bool sl_cluster_lane_send(sl_cluster_lane_t *lane, sl_cluster_args_t *a, sl_cluster_reply_cb done, void *ctx);

/* Writes the commands sent since the last flush, in one write: once per loop iteration (NULL: nothing). */
void sl_cluster_lane_flush(sl_cluster_lane_t *lane);

#endif
