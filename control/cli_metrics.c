/*
 * `sluicectl metrics`: the key figures of GET /metrics for a terminal user
 * (observability.md): rescued and lost requests by cause and by route, the
 * share rescued, and each provider's hops by outcome and its breaker. Pure:
 * the Prometheus text comes in, text or JSON goes out.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "metrics.h"

#define MAX_NAMES 64

typedef struct {
    char name[128];
    double values[16];
} row_t;

typedef struct {
    row_t rows[MAX_NAMES];
    size_t n;
} table_t;

/* The label values are the gateway's own (core/rescue.h, metrics.h). */
#define N_CAUSES   SL_TROUBLE_COUNT
#define N_OUTCOMES SL_ATTEMPT_LABEL_COUNT
_Static_assert(N_OUTCOMES <= 16, "row_t has a column per attempt outcome");

/* The row named name, or NULL. */
static const row_t *
find_row(const table_t *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->rows[i].name, name) == 0)
            return &t->rows[i];
    return NULL;
}

/* The row named name, added when missing; NULL past MAX_NAMES. */
static row_t *
row_of(table_t *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->rows[i].name, name) == 0)
            return &t->rows[i];
    if (t->n == MAX_NAMES)
        return NULL;
    row_t *r = &t->rows[t->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

static int
cause_of(const char *s)
{
    for (int i = 0; i < N_CAUSES; i++)
        if (strcmp(sl_trouble_slug((sl_trouble_t)i), s) == 0)
            return i;
    return -1;
}

static int
outcome_of(const char *s)
{
    for (int i = 0; i < N_OUTCOMES; i++)
        if (strcmp(sl_attempt_label_slug((sl_attempt_label_t)i), s) == 0)
            return i;
    return -1;
}

/* The value of label name in a sample's {…} (escapes kept as written: names here never need them). */
static bool
label(const char *labels, size_t len, const char *name, char *out, size_t size)
{
    char key[64];
    snprintf(key, sizeof key, "%s=\"", name);
    size_t klen = strlen(key);
    for (size_t i = 0; i + klen <= len; i++) {
        if ((i == 0 || labels[i - 1] == '{' || labels[i - 1] == ',') && memcmp(labels + i, key, klen) == 0) {
            size_t start = i + klen, end = start;
            while (end < len && labels[end] != '"') {
                if (labels[end] == '\\' && end + 1 < len)
                    end++;
                end++;
            }
            snprintf(out, size, "%.*s", (int)(end - start), labels + start);
            return true;
        }
    }
    return false;
}

typedef struct {
    table_t rescued, lost; /* by route, a column per cause */
    table_t attempts;      /* by provider, a column per outcome */
    table_t health;        /* by provider: values[0] */
    double requests;
} figures_t;

static void
take_sample(figures_t *f, const char *name, size_t name_len, const char *labels, size_t labels_len, double v)
{
    char a[128], b[128];
#define IS(lit) (name_len == sizeof(lit) - 1 && memcmp(name, lit, name_len) == 0)
    if (IS("sluice_requests_total")) {
        f->requests += v;
    } else if (IS("sluice_requests_rescued_total") || IS("sluice_requests_lost_to_trouble_total")) {
        table_t *t = IS("sluice_requests_rescued_total") ? &f->rescued : &f->lost;
        int c;
        row_t *r;
        if (label(labels, labels_len, "route", a, sizeof a) &&
            label(labels, labels_len, "cause", b, sizeof b) && (c = cause_of(b)) >= 0 &&
            (r = row_of(t, a)) != NULL)
            r->values[c] += v;
    } else if (IS("sluice_upstream_attempts_total")) {
        int o;
        row_t *r;
        if (label(labels, labels_len, "provider", a, sizeof a) &&
            label(labels, labels_len, "outcome", b, sizeof b) && (o = outcome_of(b)) >= 0 &&
            (r = row_of(&f->attempts, a)) != NULL)
            r->values[o] += v;
    } else if (IS("sluice_upstream_health")) {
        row_t *r;
        if (label(labels, labels_len, "provider", a, sizeof a) && (r = row_of(&f->health, a)) != NULL)
            r->values[0] = v;
    }
#undef IS
}

static void
parse(const char *text, figures_t *f)
{
    memset(f, 0, sizeof(*f));
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        if (len > 0 && line[0] != '#') {
            size_t name_len = strcspn(line, "{ ");
            const char *labels = line + name_len;
            size_t labels_len = 0;
            if (name_len < len && line[name_len] == '{') {
                const char *close = memchr(labels, '}', len - name_len);
                labels_len = close != NULL ? (size_t)(close - labels) + 1 : 0;
            }
            const char *value = labels + labels_len;
            if ((size_t)(value - line) < len)
                take_sample(f, line, name_len, labels, labels_len, strtod(value, NULL));
        }
        line = end != NULL ? end + 1 : NULL;
    }
}

static double
row_sum(const row_t *r, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += r->values[i];
    return s;
}

static double
column_sum(const table_t *t, size_t c)
{
    double s = 0;
    for (size_t i = 0; i < t->n; i++)
        s += t->rows[i].values[c];
    return s;
}

static double
table_sum(const table_t *t)
{
    double s = 0;
    for (size_t c = 0; c < N_CAUSES; c++)
        s += column_sum(t, c);
    return s;
}

static const char *
health_text(double v)
{
    return v >= 2 ? "open" : v >= 1 ? "half-open" : "ok";
}

/* "12 (retried 4, failed_over 8)": the causes that happened. */
static void
by_cause_text(const table_t *t, const row_t *only, sl_strbuf_t *out)
{
    bool any = false;
    for (size_t c = 0; c < N_CAUSES; c++) {
        double v = only != NULL ? only->values[c] : column_sum(t, c);
        if (v <= 0)
            continue;
        sl_strbuf_appendf(out, "%s%s %.0f", any ? ", " : " (", sl_trouble_slug((sl_trouble_t)c), v);
        any = true;
    }
    if (any)
        sl_strbuf_append(out, ")", 1);
}

static void
share_text(double rescued, double lost, sl_strbuf_t *out)
{
    if (rescued + lost > 0)
        sl_strbuf_appendf(out, "%.1f%% rescued", 100 * rescued / (rescued + lost));
    else
        sl_strbuf_appendf(out, "no trouble met yet");
}

void
sl_cli_metrics_text(const char *metrics, sl_strbuf_t *out)
{
    figures_t f;
    parse(metrics, &f);
    double rescued = table_sum(&f.rescued), lost = table_sum(&f.lost);
    sl_strbuf_appendf(out, "requests answered: %.0f\n", f.requests);
    sl_strbuf_appendf(out, "trouble absorbed:  ");
    share_text(rescued, lost, out);
    sl_strbuf_appendf(out, "\n  rescued: %.0f", rescued);
    by_cause_text(&f.rescued, NULL, out);
    sl_strbuf_appendf(out, "\n  lost:    %.0f", lost);
    by_cause_text(&f.lost, NULL, out);
    sl_strbuf_append(out, "\n", 1);
    if (f.rescued.n > 0)
        sl_strbuf_appendf(out, "\n%-24s %9s %9s  %s\n", "ROUTE", "RESCUED", "LOST", "SHARE");
    for (size_t i = 0; i < f.rescued.n; i++) {
        const row_t *r = &f.rescued.rows[i], *l = find_row(&f.lost, r->name);
        double rs = row_sum(r, N_CAUSES), ls = l != NULL ? row_sum(l, N_CAUSES) : 0;
        sl_strbuf_appendf(out, "%-24s %9.0f %9.0f  ", r->name, rs, ls);
        share_text(rs, ls, out);
        sl_strbuf_append(out, "\n", 1);
    }
    if (f.attempts.n > 0 || f.health.n > 0)
        sl_strbuf_appendf(out, "\n%-24s %-9s %9s %9s %9s %9s\n", "PROVIDER", "BREAKER", "OK", "FAILED", "429",
                          "OTHER");
    for (size_t i = 0; i < f.health.n; i++) {
        static const row_t no_hops;
        const row_t *h = &f.health.rows[i], *a = find_row(&f.attempts, h->name);
        const double *v = a != NULL ? a->values : no_hops.values;
        double ok = v[SL_ATTEMPT_OK], limited = v[SL_ATTEMPT_RATE_LIMITED];
        double failed = v[SL_ATTEMPT_TEMPORARY] + v[SL_ATTEMPT_BROKEN_AFTER_CONTENT] + v[SL_ATTEMPT_TIMEOUT] +
                        v[SL_ATTEMPT_CONNECT];
        double other = row_sum(a != NULL ? a : &no_hops, N_OUTCOMES) - ok - limited - failed;
        sl_strbuf_appendf(out, "%-24s %-9s %9.0f %9.0f %9.0f %9.0f\n", h->name, health_text(h->values[0]), ok,
                          failed, limited, other);
    }
}

static json_t *
causes_json(const table_t *t, const row_t *only)
{
    json_t *o = json_object();
    for (size_t c = 0; c < N_CAUSES; c++)
        json_object_set_new(o, sl_trouble_slug((sl_trouble_t)c),
                            json_integer((json_int_t)(only != NULL ? only->values[c] : column_sum(t, c))));
    return o;
}

void
sl_cli_metrics_json(const char *metrics, sl_strbuf_t *out)
{
    figures_t f;
    parse(metrics, &f);
    double rescued = table_sum(&f.rescued), lost = table_sum(&f.lost);
    json_t *j = json_object();
    json_object_set_new(j, "requests", json_integer((json_int_t)f.requests));
    json_object_set_new(j, "rescued", json_integer((json_int_t)rescued));
    json_object_set_new(j, "lost", json_integer((json_int_t)lost));
    json_object_set_new(j, "share", rescued + lost > 0 ? json_real(rescued / (rescued + lost)) : json_null());
    json_t *by = json_object();
    json_object_set_new(by, "rescued", causes_json(&f.rescued, NULL));
    json_object_set_new(by, "lost", causes_json(&f.lost, NULL));
    json_object_set_new(j, "by_cause", by);
    json_t *routes = json_object();
    for (size_t i = 0; i < f.rescued.n; i++) {
        json_t *r = json_object();
        json_object_set_new(r, "rescued", causes_json(NULL, &f.rescued.rows[i]));
        const row_t *l = find_row(&f.lost, f.rescued.rows[i].name);
        if (l != NULL)
            json_object_set_new(r, "lost", causes_json(NULL, l));
        json_object_set_new(routes, f.rescued.rows[i].name, r);
    }
    json_object_set_new(j, "routes", routes);
    json_t *providers = json_object();
    for (size_t i = 0; i < f.health.n; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "breaker", json_string(health_text(f.health.rows[i].values[0])));
        json_t *a = json_object();
        const row_t *hops = find_row(&f.attempts, f.health.rows[i].name);
        for (int o = 0; hops != NULL && o < N_OUTCOMES; o++)
            if (hops->values[o] > 0)
                json_object_set_new(a, sl_attempt_label_slug((sl_attempt_label_t)o),
                                    json_integer((json_int_t)hops->values[o]));
        json_object_set_new(p, "attempts", a);
        json_object_set_new(providers, f.health.rows[i].name, p);
    }
    json_object_set_new(j, "providers", providers);
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    sl_strbuf_appendf(out, "%s\n", s);
    free(s);
    json_decref(j);
}
