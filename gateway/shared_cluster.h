/*
 * The shared state of a cluster's instance, inside (shared_state.h has its
 * constructor): shared_cluster.c keeps pauses and probes in step and holds
 * the interface together; cluster_claims.c makes the claims that ask Redis
 * (the probe's lease, a max_concurrent slot, room in usage limits) and the
 * settlements after them.
 *
 * Every decision starts as this process's own (local, shared_local.c,
 * answering at once); Redis has the last word where the cluster shares the
 * state. Not joined (Redis down or slow), the instance goes on alone, with
 * its share of each limit and slot count.
 */
#ifndef SL_SHARED_CLUSTER_H
#define SL_SHARED_CLUSTER_H

#include "cluster.h"
#include "cluster_tickets.h"
#include "cluster_usage.h"
#include "shared_state.h"

/* Upstreams whose lines are woken at a heartbeat, at most. */
#define SL_CONTENDED_MAX 64

typedef struct {
    sl_shared_state_t base;
    sl_shared_state_t *local;
    sl_cluster_t *cluster;
    sl_cluster_usage_t *usage;
    sl_cluster_tickets_t *tickets;
    sl_shared_cluster_hooks_t hooks;
    bool closed_when_alone;          /* when_redis_down: closed */
    bool joined_before;              /* on the cluster's thread: a join after the first */
    atomic_uint_fast64_t next_token; /* names a claim: its probe's lease, its slot */
    pthread_mutex_t slots_lock;      /* guards what follows */
    struct held_slot *held;          /* the slots this instance holds */
    size_t n_held, cap_held;
    sl_upstream_t *contended[SL_CONTENDED_MAX]; /* lines that found every slot taken since the last beat */
    size_t n_contended;
} sl_cluster_shared_t;

/* Of pauses (shared_cluster.c): a probe that went away without an answer is news for the others. */
void sl__cluster_publish_abandoned(sl_cluster_shared_t *s, sl_upstream_t *up);

/* ---- cluster_claims.c ----------------------------------------------------------------------------- */

void sl__cluster_claim_upstream(sl_cluster_shared_t *s, const sl_upstream_claim_t *c, sl_shared_call_t *call,
                                sl_upstream_claim_cb done, void *ctx);
void sl__cluster_claim_key(sl_cluster_shared_t *s, const sl_key_claim_t *c, sl_shared_call_t *call,
                           sl_key_claim_cb done, void *ctx);
void sl__cluster_cancel(sl_cluster_shared_t *s, sl_shared_call_t *call);
/* What a hop took is given back: its slot to the cluster, its charge settled there too. */
void sl__cluster_release_upstream(sl_cluster_shared_t *s, const sl_upstream_release_t *rel);
void sl__cluster_settle(sl_cluster_shared_t *s, sl_charge_t *charge, const sl_amounts_t *used, bool wake_line,
                        int64_t wall_ms);
/* Each heartbeat: the slots held here are renewed; lines that found them all taken look again. */
void sl__cluster_on_heartbeat(sl_cluster_shared_t *s);
/* Redis lost its data: this instance's usage that still counts goes to the counters anew. */
void sl__cluster_readd_usage(sl_cluster_shared_t *s);

#endif
