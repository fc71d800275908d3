/* The stats topic's intervals (see stats.h). */
#include "stats.h"

#include <stdlib.h>
#include <string.h>

#include "core/prom.h"
#include "core/xalloc.h"

/* How long one upstream has been paused: since when (negative: not paused) and so far in the interval. */
typedef struct {
    char *name;
    int64_t since_ms;
    int64_t paused_ms;
} pause_clock_t;

struct sl_stats {
    int64_t since_ms;         /* the process's start */
    int64_t start_ms;         /* the current interval's */
    int64_t due_ms;           /* its end */
    sl_metrics_counts_t last; /* the counts at the last close (zero at first: counted since start) */
    sl_proto_stats_interval_t kept[SL_STATS_KEPT];
    size_t first, n_kept; /* kept[first] is the oldest */
    pause_clock_t *pauses;
    size_t n_pauses;
};

static int64_t
boundary_after(int64_t ms)
{
    return (ms / SL_STATS_INTERVAL_MS + 1) * SL_STATS_INTERVAL_MS;
}

sl_stats_t *
sl_stats_new(int64_t start_ms)
{
    sl_stats_t *st = sl_xcalloc(1, sizeof(*st));
    st->since_ms = st->start_ms = start_ms;
    st->due_ms = boundary_after(start_ms);
    return st;
}

void
sl_stats_free(sl_stats_t *st)
{
    if (st == NULL)
        return;
    for (size_t i = 0; i < SL_STATS_KEPT; i++)
        sl_proto_stats_interval_free(&st->kept[i]);
    for (size_t i = 0; i < st->n_pauses; i++)
        free(st->pauses[i].name);
    free(st->pauses);
    free(st);
}

int64_t
sl_stats_due_ms(const sl_stats_t *st)
{
    return st->due_ms;
}

static pause_clock_t *
pause_clock(sl_stats_t *st, const char *name)
{
    for (size_t i = 0; i < st->n_pauses; i++)
        if (strcmp(st->pauses[i].name, name) == 0)
            return &st->pauses[i];
    st->pauses = sl_xrealloc(st->pauses, (st->n_pauses + 1) * sizeof(*st->pauses));
    pause_clock_t *p = &st->pauses[st->n_pauses++];
    *p = (pause_clock_t){.name = sl_xstrdup(name), .since_ms = -1};
    return p;
}

void
sl_stats_note_throttle(sl_stats_t *st, const char *provider, bool paused, int64_t at_ms)
{
    pause_clock_t *p = pause_clock(st, provider);
    if (at_ms < st->start_ms)
        at_ms = st->start_ms;
    if (paused && p->since_ms < 0) {
        p->since_ms = at_ms;
    } else if (!paused && p->since_ms >= 0) {
        if (at_ms > p->since_ms)
            p->paused_ms += at_ms - p->since_ms;
        p->since_ms = -1;
    }
}

/* The time provider was paused in the interval ending at end_ms; its clock restarts there. */
static uint32_t
take_paused_ms(sl_stats_t *st, const char *name, int64_t end_ms, int64_t interval_ms)
{
    for (size_t i = 0; i < st->n_pauses; i++) {
        pause_clock_t *p = &st->pauses[i];
        if (strcmp(p->name, name) != 0)
            continue;
        int64_t ms = p->paused_ms;
        if (p->since_ms >= 0) {
            ms += end_ms > p->since_ms ? end_ms - p->since_ms : 0;
            p->since_ms = end_ms;
        }
        p->paused_ms = 0;
        return (uint32_t)(ms < interval_ms ? ms : interval_ms);
    }
    return 0;
}

static uint64_t
minus(uint64_t now, uint64_t before)
{
    return now > before ? now - before : 0;
}

/* The counts of cur's k-th slot at the last close: the same slot, "other" for "other", zero for a new one. */
static const sl_metrics_provider_counts_t *
last_of(const sl_stats_t *st, const sl_metrics_counts_t *cur, size_t k)
{
    static const sl_metrics_provider_counts_t zero;
    const sl_metrics_counts_t *last = &st->last;
    if (last->n_providers == 0)
        return &zero;
    if (k == cur->n_providers - 1)
        return &last->providers[last->n_providers - 1];
    return k < last->n_providers - 1 ? &last->providers[k] : &zero;
}

static uint32_t
quantile_ms(const uint64_t *ttft, double q)
{
    double s = sl_prom_quantile(sl_metrics_ttft_bounds(), SL_METRICS_TTFT_BUCKETS - 1, ttft, q);
    return (uint32_t)(s * 1000 + 0.5);
}

static sl_proto_trouble_cause_t
cause_of(sl_trouble_t t)
{
    sl_proto_trouble_cause_t c = SL_PROTO_TROUBLE_CAUSE_RETRIED;
    sl_proto_trouble_cause_parse(sl_trouble_slug(t), &c);
    return c;
}

/* The non-zero causes of by[] as TroubleCounts (*out the caller's). */
static size_t
trouble_counts(const uint64_t by[SL_TROUBLE_COUNT], sl_proto_trouble_count_t **out)
{
    _Static_assert(SL_TROUBLE_COUNT == SL_PROTO_TROUBLE_CAUSE_COUNT, "every trouble cause is on the wire");
    size_t n = 0;
    *out = NULL;
    for (int t = 0; t < SL_TROUBLE_COUNT; t++) {
        if (by[t] == 0)
            continue;
        if (*out == NULL)
            *out = sl_xcalloc(SL_TROUBLE_COUNT, sizeof(**out));
        (*out)[n++] = (sl_proto_trouble_count_t){.cause = cause_of((sl_trouble_t)t), .count = by[t]};
    }
    return n;
}

const sl_proto_stats_interval_t *
sl_stats_close(sl_stats_t *st, const sl_metrics_counts_t *counts, int64_t now_ms)
{
    if (now_ms < st->due_ms)
        return NULL;
    int64_t end = now_ms - st->due_ms >= SL_STATS_INTERVAL_MS
                      ? now_ms / SL_STATS_INTERVAL_MS * SL_STATS_INTERVAL_MS
                      : st->due_ms;
    int64_t ms = end - st->start_ms;

    size_t slot = (st->first + st->n_kept) % SL_STATS_KEPT;
    if (st->n_kept == SL_STATS_KEPT) {
        slot = st->first;
        st->first = (st->first + 1) % SL_STATS_KEPT;
    } else {
        st->n_kept++;
    }
    sl_proto_stats_interval_t *iv = &st->kept[slot];
    sl_proto_stats_interval_free(iv);
    iv->start_ms = (uint64_t)st->start_ms;
    iv->ms = (uint32_t)ms;

    iv->providers = sl_xcalloc(counts->n_providers + 1, sizeof(*iv->providers));
    for (size_t k = 0; k < counts->n_providers; k++) {
        const sl_metrics_provider_counts_t *c = &counts->providers[k], *was = last_of(st, counts, k);
        sl_proto_provider_stats_t p = {
            .requests = minus(c->requests, was->requests),
            .temporary = minus(c->temporary, was->temporary),
            .rate_limited = minus(c->rate_limited, was->rate_limited),
            .input_tokens = minus(c->input_tokens, was->input_tokens),
            .output_tokens = minus(c->output_tokens, was->output_tokens),
            .paused_ms = take_paused_ms(st, c->name, end, ms),
        };
        uint64_t ttft[SL_METRICS_TTFT_BUCKETS];
        for (size_t b = 0; b < SL_METRICS_TTFT_BUCKETS; b++) {
            ttft[b] = minus(c->ttft[b], was->ttft[b]);
            p.first_tokens += ttft[b];
        }
        if (p.first_tokens > 0) {
            p.has_ttft_p50_ms = p.has_ttft_p95_ms = true;
            p.ttft_p50_ms = quantile_ms(ttft, 0.5);
            p.ttft_p95_ms = quantile_ms(ttft, 0.95);
        }
        /* "other" (names past the cap) only when something counted under it. */
        bool other = k == counts->n_providers - 1;
        if (other && p.requests == 0 && p.first_tokens == 0 && p.input_tokens == 0 && p.output_tokens == 0)
            continue;
        p.name = sl_xstrdup(c->name);
        iv->providers[iv->providers_len++] = p;
    }
    uint64_t rescued[SL_TROUBLE_COUNT], lost[SL_TROUBLE_COUNT];
    for (int t = 0; t < SL_TROUBLE_COUNT; t++) {
        rescued[t] = minus(counts->rescued[t], st->last.rescued[t]);
        lost[t] = minus(counts->lost[t], st->last.lost[t]);
    }
    iv->rescued_len = trouble_counts(rescued, &iv->rescued);
    iv->lost_len = trouble_counts(lost, &iv->lost);

    st->last = *counts;
    st->start_ms = end;
    st->due_ms = end + SL_STATS_INTERVAL_MS;
    return iv;
}

size_t
sl_stats_history(const sl_stats_t *st, sl_proto_stats_interval_t **out)
{
    *out = NULL;
    if (st->n_kept == 0)
        return 0;
    *out = sl_xcalloc(st->n_kept, sizeof(**out));
    for (size_t i = 0; i < st->n_kept; i++)
        (*out)[i] = st->kept[(st->first + i) % SL_STATS_KEPT];
    return st->n_kept;
}

void
sl_stats_totals(const sl_stats_t *st, sl_proto_stats_totals_t *out)
{
    memset(out, 0, sizeof(*out));
    out->since_ms = (uint64_t)st->since_ms;
    out->rescued_len = trouble_counts(st->last.rescued, &out->rescued);
    out->lost_len = trouble_counts(st->last.lost, &out->lost);
}
