/*
 * Tickets (cluster.md, "queue order"): every request waiting in an
 * upstream's line on this instance has a ticket in tickets:UPSTREAM, a
 * sorted set scored by the request's arrival at sluice on Redis's clock.
 * The claim script reads it to tell whether an older waiter waits on
 * another live instance, whose turn the probe after a pause then is
 * (core/probe_turn.h).
 *
 * A ticket is added when its request joins the line (ZADD NX: a request
 * that re-enters after a 429 keeps its place) and removed when it leaves
 * every line; all of them are added again when the instance (re)joins
 * (Redis lost them, or they were made while it was alone). A ticket whose
 * removal was lost stays until its instance's heartbeat ends (the script
 * drops tickets of dead instances) or the set expires.
 */
#ifndef SL_CLUSTER_TICKETS_H
#define SL_CLUSTER_TICKETS_H

#include "cluster.h"
#include "upstream.h"
#include "waitq.h"

typedef struct sl_cluster_tickets sl_cluster_tickets_t;

/* Tickets of one instance (made before its cluster starts: joining reads them). */
sl_cluster_tickets_t *sl_cluster_tickets_new(void);
void sl_cluster_tickets_free(sl_cluster_tickets_t *t);

/* The waiter joined up's line: its ticket is kept here and, joined, in Redis. Any thread. */
void sl_cluster_tickets_join(sl_cluster_tickets_t *t, sl_cluster_t *cluster, const sl_waiter_t *w,
                             sl_upstream_t *up);

/* The waiter leaves every line: its tickets are removed. Call before the waiter is released. */
void sl_cluster_tickets_leave(sl_cluster_tickets_t *t, sl_cluster_t *cluster, const sl_waiter_t *w);

/* The instance (re)joined: every ticket held here goes to Redis again. */
void sl_cluster_tickets_readd(sl_cluster_tickets_t *t, sl_cluster_t *cluster);

/* Tickets outlive no wait: a set nobody touched for this long is gone (ms). */
#define SL_CLUSTER_TICKETS_TTL_MS (3600 * 1000)

#endif
