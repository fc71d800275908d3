/*
 * The running configuration's life (config.md): loaded at start (safe mode
 * when the file is invalid), published to the workers as snapshots,
 * reloaded on SIGHUP and when the file changes, replaced by pushes over the
 * control protocol and written back to the file with minimal edits. Every
 * change goes through one function (apply_text) under one lock, bumps the
 * revision and emits ConfigReloaded, or changes nothing and emits
 * ConfigRejected. Readers never take the lock: they use the snapshot.
 */
#ifndef SL_RUNTIME_H
#define SL_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "core/msg.h"
#include "limiter.h"
#include "metrics.h"
#include "request.h"
#include "snapshot.h"
#include "upstream.h"

typedef struct sl_runtime sl_runtime_t;

/*
 * Loads config_path, or with none the YAML text builtin (demo mode), or
 * with neither the embedded default; opens the request DB and publishes
 * the first snapshot; an invalid file starts safe mode. Initialises *gw
 * (which the caller keeps alive). Never NULL.
 */
sl_runtime_t *sl_runtime_start(const char *config_path, const char *builtin, sl_gateway_t *gw);

sl_snapshot_holder_t *sl_runtime_holder(sl_runtime_t *rt);
sl_upstreams_t *sl_runtime_upstreams(sl_runtime_t *rt);
bool sl_runtime_safe_mode(sl_runtime_t *rt);

/* The listen sections sluice started with (a change to them needs a restart); owned by rt. */
const sl_listen_t *sl_runtime_gateway_listen(const sl_runtime_t *rt);
const sl_listen_t *sl_runtime_control_listen(const sl_runtime_t *rt);

/* Overrides the configured ports (the --port flags); a negative port keeps the configured one. */
void sl_runtime_set_ports(sl_runtime_t *rt, int gateway_port, int control_port);

/*
 * The control key: the config's, else the one in `sluice.key` beside the
 * request DB, generated (mode 0600) at first start. Owned by rt. NULL
 * when none could be read or written (the control endpoint stays off).
 */
const char *sl_runtime_control_key(sl_runtime_t *rt);

/* SIGHUP: reload the file. */
void sl_runtime_reload(sl_runtime_t *rt);

/* Called about once a second: reloads the file when it changed, unless the change was sluice's own write. */
void sl_runtime_check_file(sl_runtime_t *rt);

/* ---- the control protocol's operations (any thread) ---------------------------------------- */

/* get_config's answer; free with sl_runtime_config_view_free. */
typedef struct {
    char *yaml; /* as written, literal secrets replaced by `***` */
    uint64_t revision;
    bool persisted;     /* backed by a file */
    sl_msgs_t problems; /* safe mode: why the file was not applied */
    char *repair_yaml;  /* safe mode: the file without its unknown keys, when that loads; else NULL */
} sl_runtime_config_view_t;

void sl_runtime_get_config(sl_runtime_t *rt, sl_runtime_config_view_t *out);
void sl_runtime_config_view_free(sl_runtime_config_view_t *v);

/*
 * put_config: validates yaml (a `***` secret keeps the current one) and
 * applies it atomically, then writes it to the file. Returns 0; or -1
 * with *err set (and every problem in *problems): a stale
 * expect_revision (control.config.conflict), an invalid file
 * (control.config.rejected), a failed write (control.config.write_failed,
 * the change stays applied).
 */
int sl_runtime_put_config(sl_runtime_t *rt, const char *yaml, size_t len, uint64_t expect_revision,
                          sl_msg_t *err, sl_msgs_t *problems);

/*
 * set_provider_limits / set_key_limits: replaces the limits of the
 * provider (kind PROVIDER) or client key named name, live and in the file.
 * Counts carry over for limits that stay. Returns 0, or -1 with *err.
 */
int sl_runtime_set_limits(sl_runtime_t *rt, sl_bucket_kind_t kind, const char *name, const sl_limit_t *limits,
                          size_t n, sl_msg_t *err);

/* pause_provider (until_wall_ms 0 = until resumed) / resume_provider. Returns 0, or -1 with *err. */
int sl_runtime_pause(sl_runtime_t *rt, const char *name, int64_t until_wall_ms, sl_msg_t *err);
int sl_runtime_resume(sl_runtime_t *rt, const char *name, sl_msg_t *err);

/*
 * Every upstream of the running config as a ProviderView, in config order.
 * Returns the count; *out is the caller's (sl_runtime_provider_views_free).
 */
size_t sl_runtime_provider_views(sl_runtime_t *rt, sl_proto_provider_view_t **out);
void sl_runtime_provider_views_free(sl_proto_provider_view_t *views, size_t n);

/*
 * In cluster mode: the cluster as this instance sees it and its live
 * instances (the caller's: sl_proto_cluster_view_free /
 * sl_proto_instance_view_free, then free). false outside cluster mode.
 */
bool sl_runtime_cluster_view(sl_runtime_t *rt, sl_proto_cluster_view_t **cluster,
                             sl_proto_instance_view_t **instances, size_t *n_instances);

/*
 * The /metrics text (observability.md): the data plane's counters, every upstream's state and limits, and the
 * control plane's figures given here.
 */
void sl_runtime_metrics(sl_runtime_t *rt, uint32_t control_subscribers, uint64_t events_dropped,
                        sl_strbuf_t *out);

/* The data plane's counters summed, for the stats topic (stats.h). */
void sl_runtime_stats_counts(sl_runtime_t *rt, sl_metrics_counts_t *out);

/* The request DB's state for get_providers (the caller frees it), or NULL without one. */
sl_proto_store_view_t *sl_runtime_store_view(sl_runtime_t *rt);

/* Where the request DB is (for history), or NULL when there is none. Owned by rt. */
const sl_store_where_t *sl_runtime_store(const sl_runtime_t *rt);

/*
 * With a cluster: section (and not in safe mode), this instance joins its
 * cluster (cluster.md): the gateway's shared state becomes the cluster's.
 * Call once, after the ports are set and before the server starts.
 */
void sl_runtime_join_cluster(sl_runtime_t *rt);

#endif
