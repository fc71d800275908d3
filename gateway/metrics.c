/* Prometheus metrics kept by the data plane (see metrics.h). */
#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dialect.h"
#include "core/prom.h"

#define SLOTS (SL_METRICS_NAMES + 1) /* the last is "other" */
#define PAIRS (SL_METRICS_MODELS + 1)

/* Histogram bounds, in seconds (observability.md). */
static const double ttft_bounds[] = {0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120};
static const double duration_bounds[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
static const double wait_bounds[] = {0.1, 0.5, 1, 2, 5, 10, 20, 40, 60, 120, 300};
static const double overhead_bounds[] = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025,
                                         0.0005,  0.001,    0.0025,  0.005,  0.01};
#define NB(a)    (sizeof(a) / sizeof((a)[0]))
#define HIST_MAX 13 /* the most bounds of any family, plus +Inf */

typedef atomic_uint_fast64_t counter_t;

typedef struct {
    counter_t counts[HIST_MAX];
    counter_t sum_ns;
} hist_t;

struct sl_metrics_worker {
    counter_t requests[SL_DIALECT_COUNT][SLOTS][SL_STATUS_CLASS_COUNT];
    counter_t rescued[SLOTS][SL_TROUBLE_COUNT], lost[SLOTS][SL_TROUBLE_COUNT];
    counter_t attempts[SLOTS][SL_ATTEMPT_LABEL_COUNT];
    counter_t retry_rounds[SLOTS];
    counter_t hedges[SLOTS][2]; /* by the hedged provider: [0] lost, [1] won */
    hist_t duration[SL_DIALECT_COUNT][SLOTS];
    hist_t ttft[SLOTS];
    hist_t wait[SL_GATE_COUNT];
    hist_t overhead;
    counter_t tokens[PAIRS][4];
    counter_t cost_micros[PAIRS];
    struct sl_metrics_worker *next;
};

/* A name's slot: written once under the lock, then read without it (count published with release). */
typedef struct {
    char names[SL_METRICS_NAMES][128];
    atomic_size_t count;
} names_t;

typedef struct {
    uint16_t provider[SL_METRICS_MODELS];
    char models[SL_METRICS_MODELS][128];
    atomic_size_t count;
} pairs_t;

struct sl_metrics {
    pthread_mutex_t lock; /* slots given and workers added; never held by a reader */
    names_t providers, routes, models;
    pairs_t pairs;
    sl_metrics_worker_t *workers;
};

/* ---- labels ---------------------------------------------------------------------------------------- */

static const char *const attempt_slugs[SL_ATTEMPT_LABEL_COUNT] = {
#define SL_ATTEMPT_LABEL_SLUG(name, slug) [SL_ATTEMPT_##name] = slug,
    SL_ATTEMPT_LABELS(SL_ATTEMPT_LABEL_SLUG)
#undef SL_ATTEMPT_LABEL_SLUG
};
static const char *const status_class_slugs[SL_STATUS_CLASS_COUNT] = {"2xx", "4xx", "5xx", "429", "aborted"};
static const char *const gate_slugs[SL_GATE_COUNT] = {"throttled", "window_full", "slots", "key_window"};

const char *
sl_gate_slug(sl_gate_t gate)
{
    return gate < SL_GATE_COUNT ? gate_slugs[gate] : "other";
}
static const char *const token_types[4] = {"input", "output", "cache_read", "cache_write"};

const char *
sl_attempt_label_slug(sl_attempt_label_t label)
{
    return (unsigned)label < SL_ATTEMPT_LABEL_COUNT ? attempt_slugs[label] : "";
}

sl_status_class_t
sl_status_class(int status, bool aborted)
{
    if (aborted)
        return SL_STATUS_CLASS_ABORTED;
    if (status == 429)
        return SL_STATUS_CLASS_429;
    if (status >= 500)
        return SL_STATUS_CLASS_5XX;
    if (status >= 400)
        return SL_STATUS_CLASS_4XX;
    return SL_STATUS_CLASS_2XX;
}

sl_attempt_label_t
sl_attempt_label_of_failure(sl_failure_class_t cls, sl_failure_source_t source, bool stale)
{
    if (stale)
        return SL_ATTEMPT_STALE_CONNECTION;
    switch (source) {
    case SL_FAILURE_CONNECT_FAILED:
        return SL_ATTEMPT_CONNECT;
    case SL_FAILURE_IDLE_TIMEOUT:
    case SL_FAILURE_TOTAL_TIMEOUT:
        return SL_ATTEMPT_TIMEOUT;
    case SL_FAILURE_BROKEN_AFTER_CONTENT:
        return SL_ATTEMPT_BROKEN_AFTER_CONTENT;
    default:
        break;
    }
    switch (cls) {
    case SL_FAILURE_QUOTA:
    case SL_FAILURE_NO_BALANCE:
        return SL_ATTEMPT_QUOTA;
    case SL_FAILURE_RATE_LIMITED:
        return SL_ATTEMPT_RATE_LIMITED;
    case SL_FAILURE_AUTH:
        return SL_ATTEMPT_AUTH;
    case SL_FAILURE_MISSING_MODEL:
        return SL_ATTEMPT_NOT_FOUND;
    case SL_FAILURE_CONTEXT_LENGTH:
    case SL_FAILURE_REQUEST_ERROR:
        return SL_ATTEMPT_REQUEST_ERROR;
    case SL_FAILURE_TEMPORARY:
        return SL_ATTEMPT_TEMPORARY;
    default:
        return SL_ATTEMPT_OTHER;
    }
}

sl_gate_t
sl_gate_of_skip(sl_skip_t skip)
{
    switch (skip) {
    case SL_SKIP_THROTTLED:
        return SL_GATE_THROTTLED;
    case SL_SKIP_WINDOW_FULL:
        return SL_GATE_WINDOW_FULL;
    case SL_SKIP_BUSY:
        return SL_GATE_SLOTS;
    case SL_SKIP_KEY_WINDOW:
        return SL_GATE_KEY_WINDOW;
    default:
        return SL_GATE_COUNT;
    }
}

/* ---- the registry ---------------------------------------------------------------------------------- */

sl_metrics_t *
sl_metrics_new(void)
{
    sl_metrics_t *m = sl_xcalloc(1, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

void
sl_metrics_free(sl_metrics_t *m)
{
    if (m == NULL)
        return;
    for (sl_metrics_worker_t *w = m->workers, *next; w != NULL; w = next) {
        next = w->next;
        free(w);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

sl_metrics_worker_t *
sl_metrics_add_worker(sl_metrics_t *m)
{
    sl_metrics_worker_t *w = sl_xcalloc(1, sizeof(*w));
    pthread_mutex_lock(&m->lock);
    w->next = m->workers;
    m->workers = w;
    pthread_mutex_unlock(&m->lock);
    return w;
}

static size_t
find_name(const names_t *n, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(n->names[i], name) == 0)
            return i;
    return SIZE_MAX;
}

static uint16_t
name_slot(sl_metrics_t *m, names_t *n, const char *name)
{
    size_t seen = atomic_load_explicit(&n->count, memory_order_acquire);
    size_t i = find_name(n, seen, name);
    if (i != SIZE_MAX)
        return (uint16_t)i;
    /* Full: every later name is "other", without the lock (a request path may ask for each of its own). */
    if (seen == SL_METRICS_NAMES || strlen(name) >= sizeof(n->names[0]))
        return SL_METRICS_NAMES;
    pthread_mutex_lock(&m->lock);
    size_t count = atomic_load_explicit(&n->count, memory_order_relaxed);
    i = find_name(n, count, name);
    if (i == SIZE_MAX && count < SL_METRICS_NAMES && strlen(name) < sizeof(n->names[0])) {
        strcpy(n->names[count], name);
        atomic_store_explicit(&n->count, count + 1, memory_order_release);
        i = count;
    }
    pthread_mutex_unlock(&m->lock);
    return i != SIZE_MAX ? (uint16_t)i : SL_METRICS_NAMES;
}

uint16_t
sl_metrics_provider_slot(sl_metrics_t *m, const char *name)
{
    return name_slot(m, &m->providers, name);
}

uint16_t
sl_metrics_route_slot(sl_metrics_t *m, const char *match)
{
    return name_slot(m, &m->routes, match);
}

uint16_t
sl_metrics_models_route_slot(sl_metrics_t *m)
{
    return name_slot(m, &m->routes, "models");
}

static size_t
find_pair(const pairs_t *p, size_t count, uint16_t provider, const char *model)
{
    for (size_t i = 0; i < count; i++)
        if (p->provider[i] == provider && strcmp(p->models[i], model) == 0)
            return i;
    return SIZE_MAX;
}

uint16_t
sl_metrics_model_slot(sl_metrics_t *m, uint16_t provider, const char *model)
{
    /* The first SL_METRICS_NAMES distinct models keep their own series; later ones count as "other". */
    if (name_slot(m, &m->models, model) == SL_METRICS_NAMES)
        model = "other";
    pairs_t *p = &m->pairs;
    size_t seen = atomic_load_explicit(&p->count, memory_order_acquire);
    size_t i = find_pair(p, seen, provider, model);
    if (i != SIZE_MAX)
        return (uint16_t)i;
    if (seen == SL_METRICS_MODELS)
        return SL_METRICS_MODELS;
    pthread_mutex_lock(&m->lock);
    size_t count = atomic_load_explicit(&p->count, memory_order_relaxed);
    i = find_pair(p, count, provider, model);
    if (i == SIZE_MAX && count < SL_METRICS_MODELS && strlen(model) < sizeof(p->models[0])) {
        p->provider[count] = provider;
        strcpy(p->models[count], model);
        atomic_store_explicit(&p->count, count + 1, memory_order_release);
        i = count;
    }
    pthread_mutex_unlock(&m->lock);
    return i != SIZE_MAX ? (uint16_t)i : SL_METRICS_MODELS;
}

/* ---- counting (one writer per block: a relaxed load and store, no locked instruction) ---------------- */

static inline void
add(counter_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

static void
observe(hist_t *h, const double *bounds, size_t n_bounds, int64_t ns)
{
    if (ns < 0)
        ns = 0;
    add(&h->counts[sl_prom_bucket(bounds, n_bounds, (double)ns / 1e9)], 1);
    add(&h->sum_ns, (uint64_t)ns);
}

static uint16_t
bounded(uint16_t slot)
{
    return slot < SLOTS ? slot : SL_METRICS_NAMES;
}

void
sl_metrics_request(sl_metrics_worker_t *w, const sl_metrics_request_t *r)
{
    uint16_t route = bounded(r->route);
    add(&w->requests[r->dialect][route][sl_status_class(r->status, r->aborted)], 1);
    observe(&w->duration[r->dialect][route], duration_bounds, NB(duration_bounds), r->duration_us * 1000);
    if (r->trouble >= 0 && r->trouble < SL_TROUBLE_COUNT) {
        if (r->verdict == SL_RESCUE_RESCUED)
            add(&w->rescued[route][r->trouble], 1);
        else if (r->verdict == SL_RESCUE_LOST)
            add(&w->lost[route][r->trouble], 1);
    }
}

void
sl_metrics_attempt(sl_metrics_worker_t *w, uint16_t provider, sl_attempt_label_t label)
{
    add(&w->attempts[bounded(provider)][label], 1);
}

void
sl_metrics_hedge(sl_metrics_worker_t *w, uint16_t provider, bool won)
{
    add(&w->hedges[bounded(provider)][won], 1);
}

void
sl_metrics_retry_round(sl_metrics_worker_t *w, uint16_t route)
{
    add(&w->retry_rounds[bounded(route)], 1);
}

void
sl_metrics_ttft(sl_metrics_worker_t *w, uint16_t provider, int64_t ttft_us)
{
    observe(&w->ttft[bounded(provider)], ttft_bounds, NB(ttft_bounds), ttft_us * 1000);
}

void
sl_metrics_waited(sl_metrics_worker_t *w, sl_gate_t gate, int64_t waited_us)
{
    if (gate < SL_GATE_COUNT)
        observe(&w->wait[gate], wait_bounds, NB(wait_bounds), waited_us * 1000);
}

void
sl_metrics_overhead(sl_metrics_worker_t *w, int64_t overhead_ns)
{
    observe(&w->overhead, overhead_bounds, NB(overhead_bounds), overhead_ns);
}

void
sl_metrics_usage(sl_metrics_worker_t *w, uint16_t model_slot, const uint64_t tokens[4], int64_t cost_micros)
{
    uint16_t pair = model_slot < PAIRS ? model_slot : SL_METRICS_MODELS;
    for (int i = 0; i < 4; i++)
        if (tokens[i] > 0)
            add(&w->tokens[pair][i], tokens[i]);
    if (cost_micros > 0)
        add(&w->cost_micros[pair], (uint64_t)cost_micros);
}

/* ---- a scrape -------------------------------------------------------------------------------------- */

static uint64_t
load(const counter_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* The workers' sum of one counter, found at the same offset in every block. */
static uint64_t
sum_at(const sl_metrics_t *m, size_t offset)
{
    uint64_t total = 0;
    for (const sl_metrics_worker_t *w = m->workers; w != NULL; w = w->next)
        total += load((const counter_t *)((const char *)w + offset));
    return total;
}

#define SUM(m, field) sum_at(m, offsetof(sl_metrics_worker_t, field))

static bool
hist_empty(const sl_metrics_t *m, size_t offset, size_t n_bounds)
{
    for (size_t i = 0; i <= n_bounds; i++)
        if (sum_at(m, offset + offsetof(hist_t, counts) + i * sizeof(counter_t)) != 0)
            return false;
    return true;
}

static void
render_hist(const sl_metrics_t *m, sl_strbuf_t *out, const char *name, const sl_prom_label_t *labels,
            size_t n, size_t offset, const double *bounds, size_t n_bounds)
{
    uint64_t counts[HIST_MAX];
    for (size_t i = 0; i <= n_bounds; i++)
        counts[i] = sum_at(m, offset + offsetof(hist_t, counts) + i * sizeof(counter_t));
    double sum = (double)sum_at(m, offset + offsetof(hist_t, sum_ns)) / 1e9;
    sl_prom_histogram(out, name, labels, n, bounds, n_bounds, counts, sum);
}

static const char *
slot_name(const names_t *n, size_t slot)
{
    return slot < atomic_load_explicit(&n->count, memory_order_acquire) ? n->names[slot] : "other";
}

/* The slots to show: those named so far, then "other". Returns how many; slots has room for SLOTS. */
static size_t
visit(const names_t *n, size_t *slots)
{
    size_t count = atomic_load_explicit(&n->count, memory_order_acquire), k = 0;
    for (size_t i = 0; i < count; i++)
        slots[k++] = i;
    slots[k++] = SL_METRICS_NAMES;
    return k;
}

#define EACH_SLOT(n, i)                                                                                      \
    size_t i##_slots[SLOTS], i##_n = visit(n, i##_slots);                                                    \
    for (size_t i##_k = 0, i = i##_slots[0]; i##_k < i##_n; i##_k++, i = i##_k < i##_n ? i##_slots[i##_k] : 0)

const double *
sl_metrics_ttft_bounds(void)
{
    _Static_assert(NB(ttft_bounds) + 1 == SL_METRICS_TTFT_BUCKETS, "the stats' TTFT buckets");
    return ttft_bounds;
}

void
sl_metrics_counts(sl_metrics_t *m, sl_metrics_counts_t *out)
{
    memset(out, 0, sizeof(*out));
    size_t slots[SLOTS];
    out->n_providers = visit(&m->providers, slots);
    for (size_t k = 0; k < out->n_providers; k++) {
        size_t p = slots[k];
        sl_metrics_provider_counts_t *c = &out->providers[k];
        snprintf(c->name, sizeof(c->name), "%s", slot_name(&m->providers, p));
        for (int l = 0; l < SL_ATTEMPT_LABEL_COUNT; l++) {
            uint64_t v = SUM(m, attempts[p][l]);
            c->requests += v;
            if (l == SL_ATTEMPT_TEMPORARY || l == SL_ATTEMPT_TIMEOUT || l == SL_ATTEMPT_CONNECT ||
                l == SL_ATTEMPT_BROKEN_AFTER_CONTENT)
                c->temporary += v;
            else if (l == SL_ATTEMPT_RATE_LIMITED)
                c->rate_limited += v;
        }
        for (size_t b = 0; b < SL_METRICS_TTFT_BUCKETS; b++)
            c->ttft[b] = SUM(m, ttft[p].counts[b]);
    }
    /* Tokens are kept per (provider, model): summed into their provider's slot. */
    size_t pairs = atomic_load_explicit(&m->pairs.count, memory_order_acquire);
    for (size_t i = 0; i <= pairs; i++) {
        size_t pair = i < pairs ? i : SL_METRICS_MODELS;
        size_t provider = i < pairs ? m->pairs.provider[i] : SL_METRICS_NAMES;
        size_t k = provider < out->n_providers - 1 ? provider : out->n_providers - 1;
        out->providers[k].input_tokens += SUM(m, tokens[pair][0]);
        out->providers[k].output_tokens += SUM(m, tokens[pair][1]);
    }
    for (size_t r = 0; r < SLOTS; r++) {
        for (int t = 0; t < SL_TROUBLE_COUNT; t++) {
            out->rescued[t] += SUM(m, rescued[r][t]);
            out->lost[t] += SUM(m, lost[r][t]);
        }
    }
}

/* Whether a route slot has answered any request (its rescued and lost series then show zeros too). */
static bool
route_seen(const sl_metrics_t *m, size_t r)
{
    for (int d = 0; d < SL_DIALECT_COUNT; d++)
        for (int c = 0; c < SL_STATUS_CLASS_COUNT; c++)
            if (SUM(m, requests[d][r][c]) != 0)
                return true;
    return false;
}

static void
render_requests(sl_metrics_t *m, sl_strbuf_t *out)
{
    sl_prom_family(
        out, "sluice_requests_total", SL_PROM_COUNTER,
        "Requests answered, by the client's dialect, the route and the class of what the client got.");
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        EACH_SLOT(&m->routes, r)
        {
            for (int c = 0; c < SL_STATUS_CLASS_COUNT; c++) {
                uint64_t v = SUM(m, requests[d][r][c]);
                if (v == 0)
                    continue;
                sl_prom_label_t l[] = {{"dialect", sl_dialect_slug((sl_dialect_t)d)},
                                       {"route", slot_name(&m->routes, r)},
                                       {"status_class", status_class_slugs[c]}};
                sl_prom_sample_u64(out, "sluice_requests_total", l, 3, v);
            }
        }
    }
    static const struct {
        const char *name, *help;
        size_t offset;
    } troubles[] = {
        {"sluice_requests_rescued_total",
         "Requests answered 2xx although an upstream failed, said 429 or was full on the way, by the first "
         "such "
         "trouble.",
         offsetof(sl_metrics_worker_t, rescued)},
        {"sluice_requests_lost_to_trouble_total",
         "Requests that met upstream trouble and got an upstream's temporary error or a final 429 or 503.",
         offsetof(sl_metrics_worker_t, lost)},
    };
    for (size_t t = 0; t < NB(troubles); t++) {
        sl_prom_family(out, troubles[t].name, SL_PROM_COUNTER, troubles[t].help);
        EACH_SLOT(&m->routes, r)
        {
            for (int c = 0; c < SL_TROUBLE_COUNT; c++) {
                uint64_t v = sum_at(m, troubles[t].offset + (r * SL_TROUBLE_COUNT + c) * sizeof(counter_t));
                /* A route's causes are shown from its first request on: a rate reads 0, not absent. */
                if (v == 0 && !route_seen(m, r))
                    continue;
                sl_prom_label_t l[] = {{"route", slot_name(&m->routes, r)},
                                       {"cause", sl_trouble_slug((sl_trouble_t)c)}};
                sl_prom_sample_u64(out, troubles[t].name, l, 2, v);
            }
        }
    }
}

static void
render_upstreams(sl_metrics_t *m, const sl_metrics_scrape_t *s, sl_strbuf_t *out)
{
    sl_prom_family(out, "sluice_upstream_attempts_total", SL_PROM_COUNTER,
                   "Hops sent to an upstream, by how they ended.");
    EACH_SLOT(&m->providers, p)
    {
        for (int o = 0; o < SL_ATTEMPT_LABEL_COUNT; o++) {
            uint64_t v = SUM(m, attempts[p][o]);
            if (v == 0)
                continue;
            sl_prom_label_t l[] = {{"provider", slot_name(&m->providers, p)}, {"outcome", attempt_slugs[o]}};
            sl_prom_sample_u64(out, "sluice_upstream_attempts_total", l, 2, v);
        }
    }
    sl_prom_family(out, "sluice_hedges_total", SL_PROM_COUNTER,
                   "First-token hedges, by the hedged provider and whether the hedge won.");
    for (int won = 0; won < 2; won++) {
        EACH_SLOT(&m->providers, p)
        {
            uint64_t v = SUM(m, hedges[p][won]);
            if (v == 0)
                continue;
            sl_prom_label_t l[] = {{"provider", slot_name(&m->providers, p)},
                                   {"result", won ? "won" : "lost"}};
            sl_prom_sample_u64(out, "sluice_hedges_total", l, 2, v);
        }
    }
    sl_prom_family(out, "sluice_retry_rounds_total", SL_PROM_COUNTER, "Retry rounds started, by route.");
    EACH_SLOT(&m->routes, r)
    {
        uint64_t v = SUM(m, retry_rounds[r]);
        if (v > 0) {
            sl_prom_label_t l[] = {{"route", slot_name(&m->routes, r)}};
            sl_prom_sample_u64(out, "sluice_retry_rounds_total", l, 1, v);
        }
    }
    sl_prom_family(out, "sluice_waiting_requests", SL_PROM_GAUGE,
                   "Requests waiting now, by the upstream they wait for and what they wait for.");
    for (size_t i = 0; i < s->n_upstreams; i++) {
        const sl_metrics_upstream_t *u = &s->upstreams[i];
        sl_prom_label_t l[] = {{"provider", u->name}, {"gate", gate_slugs[u->queued_gate]}};
        sl_prom_sample_u64(out, "sluice_waiting_requests", l, 2, u->queued);
    }
    if (s->key_queued > 0) {
        sl_prom_label_t l[] = {{"provider", ""}, {"gate", gate_slugs[SL_GATE_KEY_WINDOW]}};
        sl_prom_sample_u64(out, "sluice_waiting_requests", l, 2, s->key_queued);
    }
    sl_prom_family(out, "sluice_upstream_paused", SL_PROM_GAUGE,
                   "1 while an upstream is paused (after a 429, or by an operator), by kind.");
    for (size_t i = 0; i < s->n_upstreams; i++) {
        sl_prom_label_t paused[] = {{"provider", s->upstreams[i].name}, {"kind", "paused"}};
        sl_prom_sample_u64(out, "sluice_upstream_paused", paused, 2, s->upstreams[i].paused);
        sl_prom_label_t manual[] = {{"provider", s->upstreams[i].name}, {"kind", "manual"}};
        sl_prom_sample_u64(out, "sluice_upstream_paused", manual, 2, s->upstreams[i].manual);
    }
    sl_prom_family(out, "sluice_upstream_health", SL_PROM_GAUGE,
                   "An upstream's breaker: 0 ok, 1 half-open, 2 open.");
    for (size_t i = 0; i < s->n_upstreams; i++) {
        sl_prom_label_t l[] = {{"provider", s->upstreams[i].name}};
        sl_prom_sample_u64(out, "sluice_upstream_health", l, 1, (uint64_t)s->upstreams[i].health);
    }
    sl_prom_family(out, "sluice_in_flight_requests", SL_PROM_GAUGE, "Hops out to an upstream now.");
    for (size_t i = 0; i < s->n_upstreams; i++) {
        sl_prom_label_t l[] = {{"provider", s->upstreams[i].name}};
        sl_prom_sample_u64(out, "sluice_in_flight_requests", l, 1, s->upstreams[i].in_flight);
    }
    sl_prom_family(out, "sluice_limit_used_ratio", SL_PROM_GAUGE,
                   "How full a usage limit's window or period is (used / amount).");
    for (size_t i = 0; i < s->n_limits; i++) {
        const sl_metrics_limit_t *lim = &s->limits[i];
        char every[16];
        snprintf(every, sizeof every, "%u", lim->every);
        sl_prom_label_t l[] = {{"target_kind", lim->target_kind},
                               {"target", lim->target},
                               {"per", lim->per},
                               {"every", every},
                               {"measure", lim->measure}};
        sl_prom_sample_f64(out, "sluice_limit_used_ratio", l, 5, lim->used_ratio);
    }
}

static void
render_histograms(sl_metrics_t *m, sl_strbuf_t *out)
{
    sl_prom_family(out, "sluice_wait_seconds", SL_PROM_HISTOGRAM,
                   "Time a served request spent queued, by gate.");
    for (int g = 0; g < SL_GATE_COUNT; g++) {
        size_t off = offsetof(sl_metrics_worker_t, wait) + g * sizeof(hist_t);
        if (hist_empty(m, off, NB(wait_bounds)))
            continue;
        sl_prom_label_t l[] = {{"gate", gate_slugs[g]}};
        render_hist(m, out, "sluice_wait_seconds", l, 1, off, wait_bounds, NB(wait_bounds));
    }
    sl_prom_family(out, "sluice_time_to_first_token_seconds", SL_PROM_HISTOGRAM,
                   "From a request's arrival to its first content byte sent to the client, by provider.");
    EACH_SLOT(&m->providers, p)
    {
        size_t off = offsetof(sl_metrics_worker_t, ttft) + p * sizeof(hist_t);
        if (hist_empty(m, off, NB(ttft_bounds)))
            continue;
        sl_prom_label_t l[] = {{"provider", slot_name(&m->providers, p)}};
        render_hist(m, out, "sluice_time_to_first_token_seconds", l, 1, off, ttft_bounds, NB(ttft_bounds));
    }
    sl_prom_family(out, "sluice_request_duration_seconds", SL_PROM_HISTOGRAM,
                   "From a request's arrival to its end, by dialect and route.");
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        EACH_SLOT(&m->routes, r)
        {
            size_t off = offsetof(sl_metrics_worker_t, duration) + (d * SLOTS + r) * sizeof(hist_t);
            if (hist_empty(m, off, NB(duration_bounds)))
                continue;
            sl_prom_label_t l[] = {{"dialect", sl_dialect_slug((sl_dialect_t)d)},
                                   {"route", slot_name(&m->routes, r)}};
            render_hist(m, out, "sluice_request_duration_seconds", l, 2, off, duration_bounds,
                        NB(duration_bounds));
        }
    }
    sl_prom_family(
        out, "sluice_overhead_seconds", SL_PROM_HISTOGRAM,
        "The time sluice itself adds to a served request that did not wait: arrival to the upstream "
        "send, plus the upstream's first byte to the client's.");
    render_hist(m, out, "sluice_overhead_seconds", NULL, 0, offsetof(sl_metrics_worker_t, overhead),
                overhead_bounds, NB(overhead_bounds));
}

static void
render_usage(sl_metrics_t *m, sl_strbuf_t *out)
{
    const pairs_t *p = &m->pairs;
    size_t count = atomic_load_explicit(&p->count, memory_order_acquire);
    sl_prom_family(out, "sluice_tokens_total", SL_PROM_COUNTER,
                   "Tokens upstreams reported (or sluice estimated), by provider, upstream model and type.");
    for (size_t i = 0; i <= count; i++) {
        size_t pair = i < count ? i : SL_METRICS_MODELS;
        for (int t = 0; t < 4; t++) {
            uint64_t v = SUM(m, tokens[pair][t]);
            if (v == 0)
                continue;
            sl_prom_label_t l[] = {
                {"provider", pair < count ? slot_name(&m->providers, p->provider[pair]) : "other"},
                {"model", pair < count ? p->models[pair] : "other"},
                {"type", token_types[t]}};
            sl_prom_sample_u64(out, "sluice_tokens_total", l, 3, v);
        }
    }
    sl_prom_family(
        out, "sluice_cost_usd_total", SL_PROM_COUNTER,
        "What the served requests cost at the configured pricing, by provider and upstream model.");
    for (size_t i = 0; i <= count; i++) {
        size_t pair = i < count ? i : SL_METRICS_MODELS;
        uint64_t v = SUM(m, cost_micros[pair]);
        if (v == 0)
            continue;
        sl_prom_label_t l[] = {
            {"provider", pair < count ? slot_name(&m->providers, p->provider[pair]) : "other"},
            {"model", pair < count ? p->models[pair] : "other"}};
        sl_prom_sample_f64(out, "sluice_cost_usd_total", l, 2, (double)v / 1e6);
    }
}

void
sl_metrics_render(sl_metrics_t *m, const sl_metrics_scrape_t *s, sl_strbuf_t *out)
{
    pthread_mutex_lock(&m->lock); /* the list of workers; counters are read without it */
    render_requests(m, out);
    render_upstreams(m, s, out);
    render_histograms(m, out);
    render_usage(m, out);
    pthread_mutex_unlock(&m->lock);
    sl_prom_family(out, "sluice_control_subscribers", SL_PROM_GAUGE, "Control connections subscribed now.");
    sl_prom_sample_u64(out, "sluice_control_subscribers", NULL, 0, s->control_subscribers);
    sl_prom_family(out, "sluice_events_dropped_total", SL_PROM_COUNTER,
                   "Events a control subscriber did not get because it read too slowly.");
    sl_prom_sample_u64(out, "sluice_events_dropped_total", NULL, 0, s->events_dropped);
    sl_prom_family(out, "sluice_db_rows_dropped_total", SL_PROM_COUNTER,
                   "Request rows the request DB did not store (counted drops).");
    sl_prom_sample_u64(out, "sluice_db_rows_dropped_total", NULL, 0, s->db_rows_dropped);
    if (s->db_spool) {
        /* Non-zero while PostgreSQL is down or slower than the requests: the rows wait in the spool file. */
        sl_prom_family(
            out, "sluice_db_rows_spooled", SL_PROM_GAUGE,
            "Request rows waiting in the spool file for PostgreSQL (down, or slower than the requests).");
        sl_prom_sample_u64(out, "sluice_db_rows_spooled", NULL, 0, s->db_rows_spooled);
        sl_prom_family(
            out, "sluice_db_spool_bytes", SL_PROM_GAUGE,
            "Bytes of the spool file (rows and usage) waiting for PostgreSQL; rows are dropped past "
            "spool.max_bytes.");
        sl_prom_sample_u64(out, "sluice_db_spool_bytes", NULL, 0, s->db_spool_bytes);
    }
    sl_prom_family(out, "sluice_trace_spans_exported_total", SL_PROM_COUNTER,
                   "Trace spans the OTLP collector accepted (telemetry.otlp_endpoint).");
    sl_prom_sample_u64(out, "sluice_trace_spans_exported_total", NULL, 0, s->spans_exported);
    sl_prom_family(
        out, "sluice_trace_spans_dropped_total", SL_PROM_COUNTER,
        "Trace spans not exported: the exporter's queue was full or the collector did not take them.");
    sl_prom_sample_u64(out, "sluice_trace_spans_dropped_total", NULL, 0, s->spans_dropped);
    if (s->cluster) {
        sl_prom_family(out, "sluice_cluster_state", SL_PROM_GAUGE,
                       "This instance's part in its cluster: 0 alone, 1 joined, 2 degraded.");
        sl_prom_sample_u64(out, "sluice_cluster_state", NULL, 0, (uint64_t)s->cluster_state);
    }
}
