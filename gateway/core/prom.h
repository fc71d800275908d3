/*
 * The Prometheus text exposition format, version 0.0.4 (observability.md):
 * a family's # HELP and # TYPE lines, samples with escaped label values,
 * and histograms (cumulative buckets, +Inf, _sum, _count). Pure text
 * building over a strbuf; what the numbers are is the caller's.
 */
#ifndef SL_PROM_H
#define SL_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "xalloc.h"

typedef enum { SL_PROM_COUNTER, SL_PROM_GAUGE, SL_PROM_HISTOGRAM } sl_prom_type_t;

typedef struct {
    const char *name;
    const char *value; /* any bytes but NUL: backslash, quote and newline are escaped */
} sl_prom_label_t;

/* "# HELP name help\n# TYPE name type\n" (help escapes backslash and newline). */
void sl_prom_family(sl_strbuf_t *out, const char *name, sl_prom_type_t type, const char *help);

/* One sample line: name{labels} value. n may be 0 (no braces). */
void sl_prom_sample_u64(sl_strbuf_t *out, const char *name, const sl_prom_label_t *labels, size_t n,
                        uint64_t value);
void sl_prom_sample_f64(sl_strbuf_t *out, const char *name, const sl_prom_label_t *labels, size_t n,
                        double value);

/*
 * A histogram's series for one label set: name_bucket{…,le="b"} for each of
 * the n_bounds upper bounds (ascending) and le="+Inf", then name_sum and
 * name_count. counts[i] is the number of observations in bucket i alone
 * (i < n_bounds: <= bounds[i] and above the bound before; i == n_bounds:
 * above the last), so counts has n_bounds + 1 entries; the buckets written
 * are cumulative. At most 8 labels.
 */
void sl_prom_histogram(sl_strbuf_t *out, const char *name, const sl_prom_label_t *labels, size_t n,
                       const double *bounds, size_t n_bounds, const uint64_t *counts, double sum);

/* The bucket of a histogram an observation falls in: the first i with value <= bounds[i], else n_bounds. */
size_t sl_prom_bucket(const double *bounds, size_t n_bounds, double value);

/*
 * The q-quantile (0..1) of a histogram's observations as Prometheus's
 * histogram_quantile estimates it: the bucket the rank falls in, linearly
 * interpolated between its lower bound (0 for the first) and its upper
 * bound; in the +Inf bucket, the last bound. counts as for sl_prom_histogram
 * (per bucket, n_bounds + 1 entries). Negative when there is no observation.
 */
double sl_prom_quantile(const double *bounds, size_t n_bounds, const uint64_t *counts, double q);

#endif
