/*
 * The `stats` topic (observability.md "In the web app", protocol.md): every
 * SL_STATS_INTERVAL_MS the control thread hands over the metrics' counters
 * (cumulative, metrics.h) and this module turns them into a StatsInterval,
 * the difference from the counts of the last close: per upstream its hops,
 * temporary failures, 429s, first tokens with p50 / p95 from the TTFT
 * histogram's buckets, tokens, and how long it was paused (from the
 * ThrottleChanged events it is told of); for the whole gateway the requests
 * rescued and lost by cause. It keeps the last hour of intervals (in memory
 * only) and the rescued and lost since start. Pure over its inputs: the
 * times are passed in, nothing here reads a clock or takes a lock (the
 * control thread owns it).
 */
#ifndef SL_STATS_H
#define SL_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sl_proto.h"

#include "metrics.h"

#define SL_STATS_INTERVAL_MS 10000
#define SL_STATS_KEPT        360 /* one hour of intervals */

typedef struct sl_stats sl_stats_t;

/* Counting from start_ms (wall clock, ms): the first interval ends at the next multiple of the interval. */
sl_stats_t *sl_stats_new(int64_t start_ms);
void sl_stats_free(sl_stats_t *st);

/* When the current interval ends: a multiple of SL_STATS_INTERVAL_MS since the Unix epoch. */
int64_t sl_stats_due_ms(const sl_stats_t *st);

/*
 * A ThrottleChanged for provider at at_ms: paused (after a 429, probing, or
 * by hand) or not (recovered, or only held by a usage limit). A time before
 * the current interval counts from its start.
 */
void sl_stats_note_throttle(sl_stats_t *st, const char *provider, bool paused, int64_t at_ms);

/*
 * Closes the current interval with the counts as they are at now_ms, when
 * now_ms has reached its end (else NULL and nothing changes). A close late by
 * more than an interval makes one longer interval up to the last boundary
 * before now_ms. The interval returned is st's, valid until the next close.
 */
const sl_proto_stats_interval_t *sl_stats_close(sl_stats_t *st, const sl_metrics_counts_t *counts,
                                                int64_t now_ms);

/*
 * The kept intervals, oldest first, as a shallow array (*out, the caller
 * frees the array only: the intervals stay st's) for a snapshot. Returns how
 * many; *out is NULL for none.
 */
size_t sl_stats_history(const sl_stats_t *st, sl_proto_stats_interval_t **out);

/* Rescued and lost since start over every closed interval, into *out (the caller's:
 * sl_proto_stats_totals_free).
 */
void sl_stats_totals(const sl_stats_t *st, sl_proto_stats_totals_t *out);

#endif
