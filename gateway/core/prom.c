#include "prom.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[] = {"counter", "gauge", "histogram"};

static void
append_escaped(sl_strbuf_t *out, const char *s, int quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            sl_strbuf_append(out, "\\\\", 2);
        else if (*s == '\n')
            sl_strbuf_append(out, "\\n", 2);
        else if (*s == '"' && quote)
            sl_strbuf_append(out, "\\\"", 2);
        else
            sl_strbuf_append(out, s, 1);
    }
}

void
sl_prom_family(sl_strbuf_t *out, const char *name, sl_prom_type_t type, const char *help)
{
    sl_strbuf_appendf(out, "# HELP %s ", name);
    append_escaped(out, help, 0);
    sl_strbuf_appendf(out, "\n# TYPE %s %s\n", name, type_names[type]);
}

static void
append_labels(sl_strbuf_t *out, const sl_prom_label_t *labels, size_t n)
{
    if (n == 0)
        return;
    sl_strbuf_append(out, "{", 1);
    for (size_t i = 0; i < n; i++) {
        sl_strbuf_appendf(out, "%s%s=\"", i > 0 ? "," : "", labels[i].name);
        append_escaped(out, labels[i].value != NULL ? labels[i].value : "", 1);
        sl_strbuf_append(out, "\"", 1);
    }
    sl_strbuf_append(out, "}", 1);
}

void
sl_prom_sample_u64(sl_strbuf_t *out, const char *name, const sl_prom_label_t *labels, size_t n,
                   uint64_t value)
{
    sl_strbuf_appendf(out, "%s", name);
    append_labels(out, labels, n);
    sl_strbuf_appendf(out, " %llu\n", (unsigned long long)value);
}

/* A float as Prometheus reads it: shortest round-trip digits, +Inf, -Inf, NaN. */
static void
append_f64(sl_strbuf_t *out, double v)
{
    if (isnan(v))
        sl_strbuf_append(out, "NaN", 3);
    else if (isinf(v))
        sl_strbuf_appendf(out, "%sInf", v > 0 ? "+" : "-");
    else {
        char text[32];
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(text, sizeof text, "%.*g", digits, v);
            if (strtod(text, NULL) == v)
                break;
        }
        sl_strbuf_appendf(out, "%s", text);
    }
}

void
sl_prom_sample_f64(sl_strbuf_t *out, const char *name, const sl_prom_label_t *labels, size_t n, double value)
{
    sl_strbuf_appendf(out, "%s", name);
    append_labels(out, labels, n);
    sl_strbuf_append(out, " ", 1);
    append_f64(out, value);
    sl_strbuf_append(out, "\n", 1);
}

void
sl_prom_histogram(sl_strbuf_t *out, const char *name, const sl_prom_label_t *labels, size_t n,
                  const double *bounds, size_t n_bounds, const uint64_t *counts, double sum)
{
    assert(n <= 8);
    sl_prom_label_t with_le[9];
    if (n > 0)
        memcpy(with_le, labels, n * sizeof(*labels));
    char bucket_name[128], le[32];
    snprintf(bucket_name, sizeof bucket_name, "%s_bucket", name);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= n_bounds; i++) {
        cumulative += counts[i];
        if (i < n_bounds)
            snprintf(le, sizeof le, "%g", bounds[i]);
        else
            snprintf(le, sizeof le, "+Inf");
        with_le[n] = (sl_prom_label_t){"le", le};
        sl_prom_sample_u64(out, bucket_name, with_le, n + 1, cumulative);
    }
    char series[128];
    snprintf(series, sizeof series, "%s_sum", name);
    sl_prom_sample_f64(out, series, labels, n, sum);
    snprintf(series, sizeof series, "%s_count", name);
    sl_prom_sample_u64(out, series, labels, n, cumulative);
}

size_t
sl_prom_bucket(const double *bounds, size_t n_bounds, double value)
{
    size_t i = 0;
    while (i < n_bounds && value > bounds[i])
        i++;
    return i;
}

double
sl_prom_quantile(const double *bounds, size_t n_bounds, const uint64_t *counts, double q)
{
    uint64_t total = 0;
    for (size_t i = 0; i <= n_bounds; i++)
        total += counts[i];
    if (total == 0)
        return -1;
    double rank = q * (double)total, below = 0;
    for (size_t i = 0; i < n_bounds; i++) {
        if (counts[i] > 0 && below + (double)counts[i] >= rank) {
            double lower = i == 0 ? 0 : bounds[i - 1];
            return lower + (bounds[i] - lower) * ((rank - below) / (double)counts[i]);
        }
        below += (double)counts[i];
    }
    return n_bounds > 0 ? bounds[n_bounds - 1] : -1;
}
