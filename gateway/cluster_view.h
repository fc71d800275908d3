/*
 * What the control plane shows of the cluster (cluster.md; protocol
 * ClusterView, InstanceView, ProviderView's cluster totals), and what this
 * instance's heartbeat tells the others for it: its in-flight and queued
 * counts per upstream, as JSON `{"pid":N,"at_ms":T,"up":{"NAME":[IN_FLIGHT,QUEUED],...}}`.
 * The others' counts are those of their last heartbeat (at most a second
 * old), read from the copy the cluster's thread keeps (sl_cluster_roster).
 */
#ifndef SL_CLUSTER_VIEW_H
#define SL_CLUSTER_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "sl_proto.h"

#include "cluster.h"

/* One upstream's counts on this instance. */
typedef struct {
    const char *name;
    uint32_t in_flight, queued;
} sl_cluster_count_t;

/* This instance's heartbeat (NUL-terminated in out; the upstreams that do not fit are left out). */
void sl_cluster_describe(const sl_cluster_count_t *counts, size_t n, int64_t wall_ms, char *out, size_t size);

/* The others' counts (this instance's heartbeat left out), summed into each of counts (by its name). */
void sl_cluster_others_counts(const sl_cluster_member_t *roster, size_t n, const char *self,
                              sl_cluster_count_t *counts, size_t n_counts);

/*
 * The live instances (roster) as InstanceViews, this one's with its own
 * counts of now rather than of its last heartbeat. *out is the caller's
 * (sl_proto_instance_view_free each, then free).
 */
size_t sl_cluster_instance_views(const sl_cluster_member_t *roster, size_t n, const char *self,
                                 uint32_t own_in_flight, uint32_t own_queued, int64_t wall_ms,
                                 sl_proto_instance_view_t **out);

#endif
