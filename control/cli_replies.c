/*
 * What sluicectl prints for the answer to a command: the providers,
 * instances and history tables (columns aligned), the error and refused
 * lines, and the ok of each command on stdout and stderr, in text or, with
 * --json, as JSON lines (cli_json.c).
 */
#include "cli_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tables -------------------------------------------------------------------------------------- */

/* Rows of owned cells, printed with the columns aligned ('l'eft or 'r'ight per column); the last is not
 * padded. */
typedef struct table {
    size_t ncols;
    const char *align;
    char **cells; /* row-major */
    size_t nrows, cap_rows;
} table_t;

static void
table_add(table_t *t, ...)
{
    va_list ap;
    if (t->nrows == t->cap_rows) {
        t->cap_rows = t->cap_rows ? t->cap_rows * 2 : 16;
        t->cells = sl_xrealloc(t->cells, t->cap_rows * t->ncols * sizeof(char *));
    }
    va_start(ap, t);
    for (size_t c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = va_arg(ap, char *);
    va_end(ap);
    t->nrows++;
}

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *
xprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = sl_xmalloc((size_t)(n > 0 ? n : 0) + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)(n > 0 ? n : 0) + 1, fmt, ap);
    va_end(ap);
    return s;
}

static void
table_finish(table_t *t, sl_strbuf_t *out)
{
    size_t width[16] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < t->ncols; c++) {
            size_t w = strlen(t->cells[r * t->ncols + c]);
            if (w > width[c])
                width[c] = w;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            bool last = c + 1 == t->ncols;
            if (c > 0)
                sl_strbuf_append(out, "  ", 2);
            if (t->align[c] == 'r')
                sl_strbuf_appendf(out, "%*s", (int)width[c], cell);
            else if (last)
                sl_strbuf_appendf(out, "%s", cell);
            else
                sl_strbuf_appendf(out, "%-*s", (int)width[c], cell);
            free(t->cells[r * t->ncols + c]);
        }
        sl_strbuf_append(out, "\n", 1);
    }
    free(t->cells);
    memset(t, 0, sizeof *t);
}

void
sl_cli_providers_table(const sl_proto_provider_view_t *views, size_t n, uint64_t now_ms, sl_strbuf_t *out)
{
    table_t t = {.ncols = 7, .align = "llllrrl"};
    table_add(&t, xprintf("NAME"), xprintf("PROTOCOL"), xprintf("HEALTH"), xprintf("THROTTLE"),
              xprintf("IN-FLIGHT"), xprintf("QUEUED"), xprintf("LIMITS"));
    for (size_t i = 0; i < n; i++) {
        const sl_proto_provider_view_t *v = &views[i];
        char *throttle;
        if (v->throttle == NULL) {
            throttle = xprintf("-");
        } else if (v->throttle->has_until_ms) {
            uint64_t left = v->throttle->until_ms > now_ms ? v->throttle->until_ms - now_ms : 0;
            throttle = xprintf("%s %llus", sl_proto_throttle_kind_slug(v->throttle->kind),
                               (unsigned long long)((left + 999) / 1000));
        } else {
            throttle = xprintf("%s", sl_proto_throttle_kind_slug(v->throttle->kind));
        }
        sl_strbuf_t in_flight = {0}, queued = {0};
        sl_strbuf_appendf(&in_flight, "%u", (unsigned)v->in_flight);
        if (v->has_max_concurrent)
            sl_strbuf_appendf(&in_flight, "/%u", (unsigned)v->max_concurrent);
        if (v->has_cluster_in_flight)
            sl_strbuf_appendf(&in_flight, " (cluster %u)", (unsigned)v->cluster_in_flight);
        sl_strbuf_appendf(&queued, "%u", (unsigned)v->queued);
        if (v->has_cluster_queued)
            sl_strbuf_appendf(&queued, " (cluster %u)", (unsigned)v->cluster_queued);
        sl_strbuf_t limits = {0};
        for (size_t k = 0; k < v->limits_len; k++) {
            char text[160];
            sl__cli_limit_view_text(&v->limits[k], text, sizeof text);
            sl_strbuf_appendf(&limits, "%s%s", k > 0 ? ", " : "", text);
        }
        if (limits.len == 0)
            sl_strbuf_append(&limits, "-", 1);
        table_add(&t, xprintf("%s", v->name), xprintf("%s", sl_proto_dialect_slug(v->protocol)),
                  xprintf("%s", sl__cli_health_text(v)), throttle, sl_strbuf_finish(&in_flight),
                  sl_strbuf_finish(&queued), sl_strbuf_finish(&limits));
    }
    table_finish(&t, out);
}

void
sl_cli_instances_table(const sl_proto_cluster_view_t *cluster, const sl_proto_instance_view_t *instances,
                       size_t n, uint64_t now_ms, sl_strbuf_t *out)
{
    const char *state = sl_proto_cluster_state_slug(cluster->state);
    sl_strbuf_appendf(out, "cluster %s: instance %s, %s, %u live instance%s\n", cluster->name,
                      cluster->instance, state != NULL ? state : "?", (unsigned)cluster->instances,
                      cluster->instances == 1 ? "" : "s");
    table_t t = {.ncols = 4, .align = "lrrr"};
    table_add(&t, xprintf("NAME"), xprintf("IN-FLIGHT"), xprintf("QUEUED"), xprintf("SEEN"));
    for (size_t i = 0; i < n; i++) {
        const sl_proto_instance_view_t *v = &instances[i];
        /* Another instance's clock may run a little ahead: never "-1s ago". */
        uint64_t ago = now_ms > v->seen_ms ? now_ms - v->seen_ms : 0;
        table_add(&t, xprintf("%s%s", v->name, v->self ? " (this)" : ""),
                  xprintf("%u", (unsigned)v->in_flight), xprintf("%u", (unsigned)v->queued),
                  xprintf("%llus ago", (unsigned long long)(ago / 1000)));
    }
    table_finish(&t, out);
}

void
sl_cli_history_table(const sl_proto_history_row_t *rows, size_t n, sl_strbuf_t *out)
{
    /* INSTANCE, last, only when some row has one (a PostgreSQL request DB): SQLite's table is unchanged. */
    bool with_instance = false;
    for (size_t i = 0; i < n && !with_instance; i++)
        with_instance = rows[i].instance != NULL;
    table_t t = {.ncols = with_instance ? 11 : 10, .align = "lrlllrrrrrl"};
    /* table_add reads ncols cells: without INSTANCE the trailing NULL is not read. */
    table_add(&t, xprintf("TIME"), xprintf("ID"), xprintf("CLIENT"), xprintf("MODEL"), xprintf("PROVIDER"),
              xprintf("STATUS"), xprintf("DURATION"), xprintf("TTFT"), xprintf("TOKENS"), xprintf("COST"),
              with_instance ? xprintf("INSTANCE") : NULL);
    for (size_t i = 0; i < n; i++) {
        const sl_proto_history_row_t *r = &rows[i];
        char when[32], duration[32], ttft[32] = "-", cost[32] = "-", tokens[48] = "-";
        sl__cli_date_time(r->at_ms, when);
        sl_cli_duration_text(r->duration_ms, duration);
        if (r->has_ttft_ms)
            sl_cli_duration_text(r->ttft_ms, ttft);
        if (r->has_cost_micros)
            sl_cli_usd_text(r->cost_micros, cost);
        if (r->usage != NULL)
            sl__cli_tokens_text(r->usage, tokens);
        table_add(&t, xprintf("%s", when), xprintf("%llu", (unsigned long long)r->id),
                  xprintf("%s", r->client), xprintf("%s", r->model),
                  xprintf("%s", r->provider != NULL ? r->provider : "-"), xprintf("%u", (unsigned)r->status),
                  xprintf("%s", duration), xprintf("%s", ttft), xprintf("%s", tokens), xprintf("%s", cost),
                  with_instance ? xprintf("%s", r->instance != NULL ? r->instance : "-") : NULL);
    }
    table_finish(&t, out);
}

/* "request DB: postgres, degraded (connection refused), 120 rows spooled (48213 bytes)": get_providers'
 * store. */
static void
store_line(const sl_proto_store_view_t *store, sl_strbuf_t *out)
{
    const char *kind = sl_proto_store_kind_slug(store->kind);
    const char *state = sl_proto_store_state_slug(store->state);
    sl_strbuf_appendf(out, "request DB: %s, %s", kind != NULL ? kind : "?", state != NULL ? state : "?");
    if (store->reason != NULL)
        sl_strbuf_appendf(out, " (%s)", store->reason);
    if (store->has_spooled_rows) {
        sl_strbuf_appendf(out, ", %llu row%s spooled", (unsigned long long)store->spooled_rows,
                          store->spooled_rows == 1 ? "" : "s");
        if (store->has_spool_bytes)
            sl_strbuf_appendf(out, " (%llu bytes)", (unsigned long long)store->spool_bytes);
    }
    sl_strbuf_append(out, "\n", 1);
}

/* ---- replies ------------------------------------------------------------------------------------- */

static void
msg_line(const char *prefix, const sl_proto_msg_t *m, sl_strbuf_t *out)
{
    sl_strbuf_appendf(out, "%s%s [%s]\n", prefix, m->text != NULL ? m->text : "",
                      m->code != NULL ? m->code : "?");
}

/* Each problem indented on its own line. */
static void
problem_lines(const sl_proto_msg_t *problems, size_t n, sl_strbuf_t *out)
{
    for (size_t i = 0; i < n; i++)
        msg_line("  ", &problems[i], out);
}

void
sl_cli_error_lines(const sl_proto_error_msg_t *e, sl_strbuf_t *out)
{
    msg_line("error: ", &e->message, out);
    problem_lines(e->problems, e->problems_len, out);
}

void
sl_cli_refused_line(const sl_proto_refused_msg_t *r, sl_strbuf_t *out)
{
    msg_line("refused: ", &r->message, out);
}

/* "limits of client NAME" or "limits of provider NAME": the target of limits set / clear. */
static void
limits_of(const sl_cli_args_t *a, sl_strbuf_t *out)
{
    if (a->client != NULL)
        sl_strbuf_appendf(out, "limits of client %s", a->client);
    else
        sl_strbuf_appendf(out, "limits of provider %s", a->provider);
}

void
sl_cli_ok_lines(const sl_cli_args_t *a, const sl_proto_ok_msg_t *ok, uint64_t now_ms, sl_strbuf_t *out,
                sl_strbuf_t *err)
{
    switch (a->command) {
    case SL_CLI_PROVIDERS:
        if (a->json) {
            for (size_t i = 0; i < ok->providers_len; i++)
                sl_cli_provider_json(&ok->providers[i], out);
        } else {
            sl_cli_providers_table(ok->providers, ok->providers_len, now_ms, out);
            if (ok->store != NULL)
                store_line(ok->store, out);
        }
        break;
    case SL_CLI_INSTANCES:
        if (ok->cluster == NULL)
            sl_strbuf_appendf(a->json ? err : out, "not in cluster mode\n");
        else if (a->json)
            sl_cli_instances_json(ok->cluster, ok->instances, ok->instances_len, out);
        else
            sl_cli_instances_table(ok->cluster, ok->instances, ok->instances_len, now_ms, out);
        break;
    case SL_CLI_IN_FLIGHT:
        if (ok->in_flight == NULL || ok->in_flight->requests_len == 0) {
            sl_strbuf_appendf(err, "no requests in flight\n");
        } else if (a->json) {
            for (size_t i = 0; i < ok->in_flight->requests_len; i++)
                sl_cli_in_flight_json(&ok->in_flight->requests[i], out);
        } else {
            sl_cli_in_flight_lines(ok->in_flight, out);
        }
        break;
    case SL_CLI_HISTORY:
        if (a->json) {
            for (size_t i = 0; i < ok->rows_len; i++)
                sl_cli_history_json(&ok->rows[i], out);
        } else {
            sl_cli_history_table(ok->rows, ok->rows_len, out);
        }
        if (ok->next_cursor != NULL)
            sl_strbuf_appendf(err, "more rows: add --cursor %s\n", ok->next_cursor);
        break;
    case SL_CLI_LIMITS_SET:
        limits_of(a, out);
        sl_strbuf_appendf(out, " set:%s", a->limits_len > 0 ? " " : "");
        sl__cli_limits_append(out, a->limits, a->limits_len);
        sl_strbuf_append(out, "\n", 1);
        break;
    case SL_CLI_LIMITS_CLEAR:
        limits_of(a, out);
        sl_strbuf_appendf(out, " cleared\n");
        break;
    case SL_CLI_PAUSE:
        if (a->pause_ms == 0) {
            sl_strbuf_appendf(out, "paused %s until resumed\n", a->provider);
        } else {
            char clock[16];
            sl_cli_clock(now_ms + a->pause_ms, clock);
            sl_strbuf_appendf(out, "paused %s until %s\n", a->provider, clock);
        }
        break;
    case SL_CLI_RESUME:
        sl_strbuf_appendf(out, "resumed %s\n", a->provider);
        break;
    case SL_CLI_CANCEL:
        sl_strbuf_appendf(out, "cancelled request %llu\n", (unsigned long long)a->id);
        break;
    case SL_CLI_CONFIG_GET: {
        const char *text = a->repair ? ok->repair_yaml : ok->yaml;
        if (text != NULL) {
            size_t len = strlen(text);
            sl_strbuf_append(out, text, len);
            if (len > 0 && text[len - 1] != '\n')
                sl_strbuf_append(out, "\n", 1);
        } else if (a->repair) {
            sl_strbuf_appendf(err, "not in safe mode: there is no file to repair\n");
        }
        if (ok->has_revision)
            sl_strbuf_appendf(
                err, "revision %llu%s\n", (unsigned long long)ok->revision,
                ok->has_persisted && !ok->persisted ? " (not backed by a file: changes stay in memory)" : "");
        if (ok->problems_len > 0) {
            sl_strbuf_appendf(err, "safe mode: the configuration file was not applied:\n");
            problem_lines(ok->problems, ok->problems_len, err);
            if (ok->repair_yaml != NULL && !a->repair)
                sl_strbuf_appendf(err, "the file to repair: sluicectl config get --repair\n");
        }
        break;
    }
    case SL_CLI_CONFIG_PUT:
        sl_strbuf_appendf(out, "configuration applied\n");
        break;
    default:
        break;
    }
}
