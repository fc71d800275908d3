/*
 * Usage limits shared by a cluster's instances (cluster.md): Redis keeps
 * one counter per limit of each upstream and client key, in the same slots
 * as core/limits.h, changed only by the claim script (reserving the
 * estimate at admission) and by the settlement script (the real figure
 * after), both in cluster_scripts.h.
 *
 * This module builds a claim's limit arguments, and batches what goes to
 * the counters afterwards: settlements, usage counted while the instance
 * was alone (Redis down or slow), and, when Redis lost its data, the usage
 * this instance still counts. A batch goes once per tick (at most one round
 * trip per SL_CLUSTER_TICK_MS); one that gets no answer is kept for the
 * next.
 *
 * Each limit set also keeps counting this instance's own usage locally
 * (shared_local.c), which is what the instance goes on with alone.
 */
#ifndef SL_CLUSTER_USAGE_H
#define SL_CLUSTER_USAGE_H

#include <stddef.h>

#include "cluster.h"
#include "shared_state.h"

typedef struct sl_cluster_usage sl_cluster_usage_t;

sl_cluster_usage_t *sl_cluster_usage_new(sl_cluster_t *cluster);
void sl_cluster_usage_free(sl_cluster_usage_t *u);

/*
 * The limits of set for a claim of need at wall_ms: one counter key each
 * into keys, five arguments each into args (SL_CLUSTER_CLAIM_LUA's). With
 * the wait lock held. Returns how many limits.
 */
size_t sl_cluster_usage_claim_args(sl_cluster_usage_t *u, sl_limit_set_t *set, const sl_amounts_t *need,
                                   int64_t wall_ms, sl_cluster_args_t *keys, sl_cluster_args_t *args);

/* The charge's settlement (used instead of its estimate), at the time the counters took it, batched. */
void sl_cluster_usage_settle(sl_cluster_usage_t *u, const sl_charge_t *charge, const sl_amounts_t *used);

/*
 * The hop went out later than it was claimed: its charge (was: as claimed)
 * counts from then, in the counters too, like the local counts
 * (sl_shared_hop_sent): the upstream counts a request from its arrival.
 * Returns the charge's new shared time (Redis's clock).
 */
int64_t sl_cluster_usage_move(sl_cluster_usage_t *u, const sl_charge_t *was, int64_t at_ms);

/* A charge this instance took alone (its shared_at_ms: Redis's clock, as estimated): added once joined. */
void sl_cluster_usage_count_alone(sl_cluster_usage_t *u, const sl_charge_t *charge);

/* Sends the batch (the cluster's thread, joined). */
void sl_cluster_usage_flush(sl_cluster_usage_t *u);

/*
 * Each heartbeat, joined: what every limit of sets (n of them, living as
 * long as the process) has used across the cluster, read in one script and
 * kept on each set for the views (cluster_seen).
 */
void sl_cluster_usage_refresh(sl_cluster_usage_t *u, sl_limit_set_t *const *sets, size_t n);

/*
 * Redis lost its data: the batch is dropped (what it held is in the local
 * counts), then call this for every set: its own usage that still counts is
 * added anew.
 */
void sl_cluster_usage_forget_batch(sl_cluster_usage_t *u);
void sl_cluster_usage_readd(sl_cluster_usage_t *u, sl_limit_set_t *set);

/* The Redis-clock time a charge is counted at when taken alone at wall_ms. */
int64_t sl_cluster_usage_shared_time(sl_cluster_usage_t *u, int64_t wall_ms);

#endif
