/*
 * The request DB: every request is one row or one counted drop, a locked or
 * full DB never blocks a submit, nothing stored carries a credential, usage
 * buckets add up and outlive request retention; and the pure rules that
 * schedule the writer.
 *
 * Built twice: against SQLite, and with STORE_PG against a real PostgreSQL
 * the run starts for itself (tests/e2e/pg_server.c), each test in a schema
 * of its own. The tests of the recorder's behaviour run against both; the
 * few about one store's files or schema are marked for it.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <sqlite3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "core/dialect.h"
#include "core/xalloc.h"
#include "recorder.h"
#include "store.h"
#ifdef STORE_PG
#include <libpq-fe.h>

#include "pg_server.h"
#else
#define ATTEMPTS_COUNT "SELECT count(*) FROM attempts"
#endif

#define DAY_MS 86400000LL

static char dir[64];
static char db_path[128];
static sl_store_where_t where;
#ifdef STORE_PG
/* PostgreSQL keeps a request's attempts in its row, a JSON array. */
#define ATTEMPTS_COUNT "SELECT coalesce(sum(json_array_length(attempts)), 0) FROM requests"
static char spool_path[128];
static char pg_url[512];
static PGconn *test_conn;

/* One PostgreSQL for the whole run, started by the runner before any test and stopped after the last. */
static pg_server_t server;

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    if (!pg_start(&server)) {
        fprintf(stderr, "test_recorder_pg: PostgreSQL did not start\n");
        exit(1);
    }
    setenv("SLUICE_TEST_PG_URL", server.url, 1);
    char port[8];
    snprintf(port, sizeof port, "%u", server.port);
    setenv("SLUICE_TEST_PG_PORT", port, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    pg_stop(&server);
}

/* Statements as the store's owner, in the test's own schema. */
static PGresult *
pg_query(const char *sql)
{
    PGresult *r = PQexec(test_conn, sql);
    ExecStatusType st = PQresultStatus(r);
    cr_assert(st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK, "%s: %s", sql, PQresultErrorMessage(r));
    return r;
}
#endif
static char err[512];
/* Rows start after this, so that no retention pass deletes them behind a test's back. */
static int64_t base_ms;

static int64_t
wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
setup(void)
{
    strcpy(dir, "/tmp/sluice-recorder-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(db_path, sizeof db_path, "%s/sluice.db", dir);
    where = (sl_store_where_t){.path = db_path};
    base_ms = wall_ms() - DAY_MS;
#ifdef STORE_PG
    /* A schema per test: tests run in parallel, and each starts from an empty database. */
    const char *base = getenv("SLUICE_TEST_PG_URL");
    cr_assert_not_null(base, "the runner's hook sets the server's URL");
    char schema[64];
    snprintf(schema, sizeof schema, "t_%ld", (long)getpid());
    snprintf(pg_url, sizeof pg_url, "%s?options=-csearch_path%%3D%s", base, schema);
    snprintf(spool_path, sizeof spool_path, "%s/sluice.spool", dir);
    where = (sl_store_where_t){.url = pg_url, .instance = "test-instance", .spool_path = spool_path};
    test_conn = PQconnectdb(pg_url);
    cr_assert_eq(PQstatus(test_conn), CONNECTION_OK, "%s", PQerrorMessage(test_conn));
    char sql[256];
    snprintf(sql, sizeof sql,
             "SET client_min_messages = warning; DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s", schema,
             schema);
    PQclear(pg_query(sql));
#endif
}

static void
teardown(void)
{
#ifdef STORE_PG
    PQfinish(test_conn);
    unlink(spool_path);
#endif
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    char p[160];
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        snprintf(p, sizeof p, "%s%s", db_path, suffixes[i]);
        unlink(p);
    }
    rmdir(dir);
}

TestSuite(recorder, .init = setup, .fini = teardown);

static sl_recorder_t *
open_with(const sl_recorder_options_t *opts)
{
    sl_recorder_t *rec = sl_recorder_open(&where, opts, err, sizeof err);
    cr_assert_not_null(rec, "open failed: %s", err);
    return rec;
}

/* A row that started at base_ms + at_ms, served by its last attempt after 529s. */
static sl_request_row_t *
make_row(uint64_t id, int64_t at_ms, size_t n_attempts)
{
    sl_request_row_t *r = sl_request_row_new(n_attempts);
    r->id = id;
    r->started_at_ms = base_ms + at_ms;
    r->client = sl_xstrdup("team-a");
    r->dialect = SL_DIALECT_ANTHROPIC;
    r->model = sl_xstrdup("claude-sonnet-4");
    r->provider = sl_xstrdup("anthropic-main");
    r->path = sl_xstrdup("/v1/messages");
    r->status = 200;
    r->outcome = SL_ROW_SERVED;
    r->duration_ms = 1234;
    for (size_t i = 0; i < n_attempts; i++) {
        r->attempts[i].provider = sl_xstrdup(i + 1 < n_attempts ? "anthropic-backup" : "anthropic-main");
        r->attempts[i].outcome = i + 1 < n_attempts ? SL_HOP_STATUS : SL_HOP_SERVED;
        r->attempts[i].status = i + 1 < n_attempts ? 529 : 200;
        r->attempts[i].ms = 100 + (int64_t)i;
    }
    return r;
}

/* One integer from the DB through a connection of the test's own. */
static int64_t
query_int(const char *sql)
{
#ifdef STORE_PG
    PGresult *r = pg_query(sql);
    cr_assert_eq(PQntuples(r), 1, "%s", sql);
    int64_t v = PQgetisnull(r, 0, 0) ? 0 : atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
#else
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
#endif
}

static sl_recorder_stats_t
stats_of(sl_recorder_t *rec)
{
    sl_recorder_stats_t s;
    sl_recorder_stats(rec, &s);
    return s;
}

/* ---- rows read back ------------------------------------------------------- */

/* One page of sl_recorder_history, which must succeed. */
typedef struct {
    sl_proto_history_row_t *rows;
    size_t n;
    char *next_cursor;
} page_t;

static page_t
history_ok(const sl_recorder_history_query_t *q)
{
    page_t p = {0};
    err[0] = '\0';
    int rc = sl_recorder_history(&where, q, &p.rows, &p.n, &p.next_cursor, err, sizeof err);
    cr_assert_eq(rc, 0, "history failed: %s", err);
    cr_assert_eq(p.rows == NULL, p.n == 0, "rows are NULL exactly when there are none");
    return p;
}

static void
page_free(page_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        sl_proto_history_row_free(&p->rows[i]);
    free(p->rows);
    free(p->next_cursor);
    *p = (page_t){0};
}

/* One text cell through a connection of the test's own; NULL for NULL. The caller frees. */
static char *
query_text(const char *sql)
{
#ifdef STORE_PG
    PGresult *r = pg_query(sql);
    cr_assert_eq(PQntuples(r), 1, "%s", sql);
    char *copy = PQgetisnull(r, 0, 0) ? NULL : sl_xstrdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return copy;
#else
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    const char *v = (const char *)sqlite3_column_text(st, 0);
    char *copy = v != NULL ? sl_xstrdup(v) : NULL;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return copy;
#endif
}

static void
assert_cell(const char *sql, const char *want)
{
    char *got = query_text(sql);
    if (want == NULL)
        cr_assert_null(got, "%s: '%s'", sql, got);
    else
        cr_assert(got != NULL && strcmp(got, want) == 0, "%s: '%s', want '%s'", sql, got ? got : "NULL",
                  want);
    free(got);
}

/* Statements on the DB behind the recorder's back, as an older or newer sluice would have written it. */
static void
exec_on_db(const char *sql)
{
#ifdef STORE_PG
    PQclear(pg_query(sql));
#else
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql, msg);
    sqlite3_close(db);
#endif
}

/* Calls check on every cell of table as text (NULL for NULL); returns how many there were. */
static size_t
each_cell(const char *table, void (*check)(const char *table, const char *column, const char *value))
{
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT * FROM %s", table);
    size_t cells = 0;
#ifdef STORE_PG
    PGresult *r = pg_query(sql);
    for (int row = 0; row < PQntuples(r); row++) {
        for (int c = 0; c < PQnfields(r); c++, cells++)
            check(table, PQfname(r, c), PQgetisnull(r, row, c) ? NULL : PQgetvalue(r, row, c));
    }
    PQclear(r);
#else
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(st); c++, cells++)
            check(table, sqlite3_column_name(st, c), (const char *)sqlite3_column_text(st, c));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
#endif
    return cells;
}

Test(recorder, history_rows_carry_every_field_and_their_attempts_in_order)
{
    sl_recorder_t *rec = open_with(NULL);
    sl_request_row_t *r = sl_request_row_new(3);
    r->id = 42;
    r->started_at_ms = base_ms + 123;
    r->client = sl_xstrdup("team-a");
    r->dialect = SL_DIALECT_OPENAI_CHAT;
    r->model = sl_xstrdup("gpt-4o");
    r->provider = sl_xstrdup("openai-2");
    r->path = sl_xstrdup("/v1/chat/completions");
    r->status = 200;
    r->outcome = SL_ROW_SERVED;
    r->duration_ms = 2500;
    r->ttfb_ms = 300;
    r->ttft_ms = 450;
    r->has_usage = true;
    r->usage =
        (sl_row_usage_t){.input = 1000, .output = 200, .cache_read = 30, .cache_write = 4, .estimated = true};
    r->cost_micros = 5678;
    sl_attempt_row_t *a = r->attempts;
    a[0] = (sl_attempt_row_t){.provider = sl_xstrdup("openai-1"),
                              .outcome = SL_HOP_SKIPPED,
                              .pause_ms = SL_ROW_ABSENT,
                              .backoff_ms = SL_ROW_ABSENT,
                              .skipped = SL_SKIP_PERIOD_USED_UP};
    a[1] = (sl_attempt_row_t){.provider = sl_xstrdup("openai-3"),
                              .model = sl_xstrdup("gpt-4o-2024"),
                              .outcome = SL_HOP_ERROR,
                              .status = 200,
                              .ms = 800,
                              .pause_ms = 120,
                              .backoff_ms = SL_ROW_ABSENT};
    sl_msg_t m =
        sl_msg_make(SL_CODE_CONFIG_FILE_UNREADABLE, "path", "/etc/x", "reason", "stream broke", NULL);
    a[1].error = sl_row_msg_from(&m);
    sl_msg_free(&m);
    a[2] = (sl_attempt_row_t){.provider = sl_xstrdup("openai-2"),
                              .model = sl_xstrdup("gpt-4o"),
                              .outcome = SL_HOP_SERVED,
                              .status = 200,
                              .ms = 900,
                              .pause_ms = SL_ROW_ABSENT,
                              .retry = 1,
                              .backoff_ms = 250};
    cr_assert(sl_recorder_submit(rec, r));
    sl_recorder_flush(rec);
    cr_assert_eq(stats_of(rec).written, 1);

    /* Read while the writer still holds the DB open, as the control thread does. */
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 1);
    cr_assert_null(p.next_cursor);
    const sl_proto_history_row_t *g = &p.rows[0];
    cr_assert_eq(g->id, 42);
    cr_assert_eq(g->at_ms, (uint64_t)(base_ms + 123));
    cr_assert_str_eq(g->client, "team-a");
    cr_assert_eq(g->dialect, SL_PROTO_DIALECT_OPENAI_CHAT);
    cr_assert_str_eq(g->model, "gpt-4o");
    cr_assert_str_eq(g->provider, "openai-2");
    cr_assert_eq(g->status, 200);
    cr_assert_eq(g->duration_ms, 2500);
    cr_assert(g->has_ttft_ms);
    cr_assert_eq(g->ttft_ms, 450);
    cr_assert_not_null(g->usage);
    cr_assert_eq(g->usage->input, 1000);
    cr_assert_eq(g->usage->output, 200);
    cr_assert_eq(g->usage->cache_read, 30);
    cr_assert_eq(g->usage->cache_write, 4);
    cr_assert(g->usage->estimated);
    cr_assert(g->has_cost_micros);
    cr_assert_eq(g->cost_micros, 5678);
    cr_assert_eq(g->attempts_len, 3);

    const sl_proto_attempt_view_t *ga = g->attempts;
    cr_assert_str_eq(ga[0].provider, "openai-1");
    cr_assert_null(ga[0].model);
    cr_assert_eq(ga[0].outcome, SL_PROTO_OUTCOME_SKIPPED);
    cr_assert(ga[0].has_skipped);
    cr_assert_eq(ga[0].skipped, SL_PROTO_SERVE_SKIP_PERIOD_USED_UP);
    cr_assert_not(ga[0].has_status);
    cr_assert_null(ga[0].error);
    cr_assert_eq(ga[0].ms, 0);
    cr_assert_not(ga[0].has_pause_ms);
    cr_assert_not(ga[0].has_retry);
    cr_assert_not(ga[0].has_backoff_ms);

    cr_assert_str_eq(ga[1].provider, "openai-3");
    cr_assert_str_eq(ga[1].model, "gpt-4o-2024");
    cr_assert_eq(ga[1].outcome, SL_PROTO_OUTCOME_ERROR);
    cr_assert_not(ga[1].has_skipped);
    cr_assert(ga[1].has_status);
    cr_assert_eq(ga[1].status, 200);
    cr_assert_eq(ga[1].ms, 800);
    cr_assert(ga[1].has_pause_ms);
    cr_assert_eq(ga[1].pause_ms, 120);
    cr_assert_not_null(ga[1].error);
    cr_assert_str_eq(ga[1].error->code, "config.file_unreadable");
    cr_assert_str_eq(ga[1].error->text, "cannot read /etc/x: stream broke");
    cr_assert_eq(ga[1].error->args_len, 2);
    cr_assert_str_eq(ga[1].error->args[0].key, "path");
    cr_assert_str_eq(ga[1].error->args[0].value, "/etc/x");
    cr_assert_str_eq(ga[1].error->args[1].key, "reason");
    cr_assert_str_eq(ga[1].error->args[1].value, "stream broke");
    cr_assert_not(ga[1].has_retry);
    cr_assert_not(ga[1].has_backoff_ms);

    cr_assert_str_eq(ga[2].provider, "openai-2");
    cr_assert_eq(ga[2].outcome, SL_PROTO_OUTCOME_SERVED);
    cr_assert(ga[2].has_retry);
    cr_assert_eq(ga[2].retry, 1);
    cr_assert(ga[2].has_backoff_ms);
    cr_assert_eq(ga[2].backoff_ms, 250);
    cr_assert_eq(ga[2].ms, 900);
    cr_assert_not(ga[2].has_pause_ms);
    cr_assert_null(ga[2].error);
    page_free(&p);
    sl_recorder_close(rec);

    /* What a HistoryRow does not carry is still stored for the operator. */
    assert_cell("SELECT path FROM requests", "/v1/chat/completions");
    assert_cell("SELECT outcome FROM requests", "served");
    assert_cell("SELECT error_code FROM requests", NULL);
    cr_assert_eq(query_int("SELECT ttfb_ms FROM requests"), 300);
}

Test(recorder, history_reads_back_every_outcome_and_every_skip_reason)
{
    /* The stored names are written from the recorder's tables and read back by the protocol's parsers. */
    sl_recorder_t *rec = open_with(NULL);
    sl_request_row_t *r = make_row(1, 1000, SL_HOP_OUTCOME_COUNT + SL_SKIP_COUNT - 1);
    for (size_t i = 0; i < SL_HOP_OUTCOME_COUNT; i++)
        r->attempts[i].outcome = (sl_hop_outcome_t)i;
    for (size_t k = 1; k < SL_SKIP_COUNT; k++) {
        sl_attempt_row_t *a = &r->attempts[SL_HOP_OUTCOME_COUNT + k - 1];
        a->outcome = SL_HOP_SKIPPED;
        a->skipped = (sl_skip_t)k;
    }
    cr_assert(sl_recorder_submit(rec, r));
    sl_recorder_close(rec);

    /* Value by value, by name: the protocol's value of each of outcome.h's. */
    static const sl_proto_outcome_t outcomes[SL_HOP_OUTCOME_COUNT] = {
#define PROTO_OF(name, slug) [SL_HOP_##name] = SL_PROTO_OUTCOME_##name,
        SL_HOP_OUTCOMES(PROTO_OF)
#undef PROTO_OF
    };
    static const sl_proto_serve_skip_t skips[SL_SKIP_COUNT] = {
#define PROTO_OF(name, slug) [SL_SKIP_##name] = SL_PROTO_SERVE_SKIP_##name,
        SL_SKIP_REASONS(PROTO_OF)
#undef PROTO_OF
    };
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 1);
    const sl_proto_attempt_view_t *a = p.rows[0].attempts;
    cr_assert_eq(p.rows[0].attempts_len, SL_HOP_OUTCOME_COUNT + SL_SKIP_COUNT - 1);
    for (size_t i = 0; i < SL_HOP_OUTCOME_COUNT; i++) {
        cr_assert_eq(a[i].outcome, outcomes[i], "attempt %zu: outcome %d", i, a[i].outcome);
        cr_assert_not(a[i].has_skipped, "attempt %zu", i);
    }
    for (size_t k = 1; k < SL_SKIP_COUNT; k++) {
        const sl_proto_attempt_view_t *s = &a[SL_HOP_OUTCOME_COUNT + k - 1];
        cr_assert_eq(s->outcome, SL_PROTO_OUTCOME_SKIPPED);
        cr_assert(s->has_skipped, "skip %zu", k);
        cr_assert_eq(s->skipped, skips[k], "skip %zu read back as %d", k, s->skipped);
    }
    page_free(&p);
}

Test(recorder, history_reads_back_every_dialect)
{
    sl_recorder_t *rec = open_with(NULL);
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        sl_request_row_t *r = make_row((uint64_t)d, 1000 - d, 0);
        r->dialect = (sl_dialect_t)d;
        cr_assert(sl_recorder_submit(rec, r));
    }
    sl_recorder_close(rec);
    static const sl_proto_dialect_t want[SL_DIALECT_COUNT] = {
        [SL_DIALECT_ANTHROPIC] = SL_PROTO_DIALECT_ANTHROPIC,
        [SL_DIALECT_OPENAI_CHAT] = SL_PROTO_DIALECT_OPENAI_CHAT,
        [SL_DIALECT_OPENAI_RESPONSES] = SL_PROTO_DIALECT_OPENAI_RESPONSES,
        [SL_DIALECT_GEMINI] = SL_PROTO_DIALECT_GEMINI,
        [SL_DIALECT_BEDROCK] = SL_PROTO_DIALECT_BEDROCK,
    };
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, SL_DIALECT_COUNT);
    for (size_t i = 0; i < p.n; i++)
        cr_assert_eq(p.rows[i].dialect, want[p.rows[i].id], "row %llu read back as %d",
                     (unsigned long long)p.rows[i].id, p.rows[i].dialect);
    page_free(&p);
}

Test(recorder, absent_optionals_stay_absent)
{
    sl_recorder_t *rec = open_with(NULL);
    sl_request_row_t *r = make_row(7, 1000, 0);
    free(r->provider);
    r->provider = NULL;
    r->outcome = SL_ROW_FAILED;
    r->status = 502;
    sl_msg_t m = sl_msg_make(SL_CODE_GW_SAFE_MODE, NULL);
    r->error = sl_row_msg_from(&m);
    sl_msg_free(&m);
    cr_assert(sl_recorder_submit(rec, r));
    sl_recorder_close(rec);

    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 1);
    const sl_proto_history_row_t *g = &p.rows[0];
    cr_assert_null(g->provider);
    cr_assert_eq(g->status, 502);
    cr_assert_not(g->has_ttft_ms);
    cr_assert_null(g->usage);
    cr_assert_not(g->has_cost_micros);
    cr_assert_eq(g->attempts_len, 0);
    cr_assert_null(g->attempts);
    page_free(&p);
    assert_cell("SELECT outcome FROM requests", "failed");
    assert_cell("SELECT error_code FROM requests", "gw.safe_mode");
    assert_cell("SELECT error_args FROM requests", NULL);
    assert_cell("SELECT ttfb_ms FROM requests", NULL);
}

Test(recorder, history_is_newest_first_with_ties_newest_written_first)
{
    sl_recorder_t *rec = open_with(NULL);
    static const int64_t at[] = {3000, 1000, 5000, 1000, 2000};
    for (size_t i = 0; i < 5; i++)
        cr_assert(sl_recorder_submit(rec, make_row(i + 1, at[i], 1)));
    sl_recorder_close(rec);
    static const uint64_t want[] = {3, 1, 5, 4, 2};
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 5);
    for (size_t i = 0; i < 5; i++)
        cr_assert_eq(p.rows[i].id, want[i], "position %zu holds row %llu", i,
                     (unsigned long long)p.rows[i].id);
    cr_assert_null(p.next_cursor);
    page_free(&p);
}

Test(recorder, history_pages_through_every_row_exactly_once)
{
    sl_recorder_t *rec = open_with(NULL);
    /* Pairs share a start time, so the cursor must break ties by insertion. */
    for (uint64_t id = 1; id <= 25; id++)
        cr_assert(sl_recorder_submit(rec, make_row(id, 1000 + (int64_t)(id / 2), 2)));
    sl_recorder_flush(rec);

    bool seen[27] = {false};
    char *cursor = NULL;
    size_t pages = 0, total = 0;
    uint64_t prev_at = UINT64_MAX, prev_id = UINT64_MAX;
    do {
        page_t p = history_ok(&(sl_recorder_history_query_t){.limit = 10, .cursor = cursor});
        free(cursor);
        cursor = p.next_cursor;
        p.next_cursor = NULL;
        for (size_t i = 0; i < p.n; i++) {
            const sl_proto_history_row_t *r = &p.rows[i];
            cr_assert(r->at_ms < prev_at || (r->at_ms == prev_at && r->id < prev_id), "newest first");
            prev_at = r->at_ms;
            prev_id = r->id;
            cr_assert_not(seen[r->id], "row %llu twice", (unsigned long long)r->id);
            seen[r->id] = true;
            cr_assert_eq(r->attempts_len, 2);
            cr_assert_eq(r->attempts[1].outcome, SL_PROTO_OUTCOME_SERVED);
        }
        total += p.n;
        pages++;
        cr_assert_eq(p.n, pages < 3 ? 10 : 5, "page %zu: %zu rows", pages, p.n);
        cr_assert_eq(cursor != NULL, pages < 3, "page %zu: next_cursor only while older rows remain", pages);
        page_free(&p);
        /* A row written between pages is newer than the cursor: later pages neither repeat nor skip a row. */
        if (pages == 1) {
            cr_assert(sl_recorder_submit(rec, make_row(26, 5000, 1)));
            sl_recorder_flush(rec);
        }
    } while (cursor != NULL);
    sl_recorder_close(rec);
    cr_assert_eq(pages, 3);
    cr_assert_eq(total, 25);
    cr_assert_not(seen[26]);
}

/* Row id's attempts: id % 4 of them, each with its own duration, so that one written to another row shows. */
static sl_request_row_t *
make_row_with_own_attempts(uint64_t id)
{
    sl_request_row_t *r = make_row(id, (int64_t)id, id % 4);
    for (size_t i = 0; i < r->n_attempts; i++)
        r->attempts[i].ms = (int64_t)(id * 10 + i);
    return r;
}

Test(recorder, rows_of_large_batches_keep_their_own_attempts_across_a_restart)
{
    /* 41 and then 17 rows in one batch each: whole groups of rows to a statement and the rest one by one. */
    for (int run = 0; run < 2; run++) {
        sl_recorder_t *rec = open_with(NULL);
        for (uint64_t id = run == 0 ? 1 : 42; id <= (run == 0 ? 41u : 58u); id++)
            cr_assert(sl_recorder_submit(rec, make_row_with_own_attempts(id)));
        sl_recorder_close(rec);
    }
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 58);
    int64_t attempts = 0;
    for (uint64_t id = 1; id <= 58; id++)
        attempts += (int64_t)(id % 4);
    cr_assert_eq(query_int(ATTEMPTS_COUNT), attempts);

    page_t p = history_ok(&(sl_recorder_history_query_t){.limit = 100});
    cr_assert_eq(p.n, 58);
    bool seen[59] = {false};
    for (size_t i = 0; i < p.n; i++) {
        const sl_proto_history_row_t *r = &p.rows[i];
        cr_assert(r->id >= 1 && r->id <= 58 && !seen[r->id], "row %llu", (unsigned long long)r->id);
        seen[r->id] = true;
        cr_assert_eq(r->attempts_len, r->id % 4, "row %llu", (unsigned long long)r->id);
        for (size_t k = 0; k < r->attempts_len; k++)
            cr_assert_eq(r->attempts[k].ms, r->id * 10 + k, "row %llu attempt %zu", (unsigned long long)r->id,
                         k);
    }
    page_free(&p);
}

Test(recorder, history_limit_is_clamped_and_a_full_last_page_has_no_cursor)
{
    sl_recorder_t *rec = open_with(NULL);
    for (uint64_t id = 1; id <= SL_HISTORY_MAX_LIMIT + 20; id++)
        cr_assert(sl_recorder_submit(rec, make_row(id, (int64_t)id, 0)));
    sl_recorder_close(rec);
    static const struct {
        uint32_t limit;
        size_t n;
    } cases[] = {
        {0, SL_HISTORY_DEFAULT_LIMIT},
        {1, 1},
        {SL_HISTORY_MAX_LIMIT - 1, SL_HISTORY_MAX_LIMIT - 1},
        {SL_HISTORY_MAX_LIMIT, SL_HISTORY_MAX_LIMIT},
        {SL_HISTORY_MAX_LIMIT + 1, SL_HISTORY_MAX_LIMIT},
        {SL_HISTORY_MAX_LIMIT + 20, SL_HISTORY_MAX_LIMIT},
        {UINT32_MAX, SL_HISTORY_MAX_LIMIT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        page_t p = history_ok(&(sl_recorder_history_query_t){.limit = cases[i].limit});
        cr_assert_eq(p.n, cases[i].n, "limit %u: %zu rows", cases[i].limit, p.n);
        cr_assert_not_null(p.next_cursor, "limit %u", cases[i].limit);
        cr_assert_eq(p.rows[0].id, SL_HISTORY_MAX_LIMIT + 20);
        page_free(&p);
    }

    /* Exactly limit rows match: no row past the page, so no cursor. */
    const uint64_t since = (uint64_t)base_ms + SL_HISTORY_MAX_LIMIT + 1;
    page_t p = history_ok(&(sl_recorder_history_query_t){.since_ms = since, .limit = 20});
    cr_assert_eq(p.n, 20);
    cr_assert_null(p.next_cursor);
    page_free(&p);
    p = history_ok(&(sl_recorder_history_query_t){.since_ms = since, .limit = 19});
    cr_assert_eq(p.n, 19);
    cr_assert_not_null(p.next_cursor);
    page_t rest =
        history_ok(&(sl_recorder_history_query_t){.since_ms = since, .limit = 19, .cursor = p.next_cursor});
    cr_assert_eq(rest.n, 1);
    cr_assert_eq(rest.rows[0].id, SL_HISTORY_MAX_LIMIT + 1);
    cr_assert_null(rest.next_cursor);
    page_free(&rest);
    page_free(&p);
}

Test(recorder, history_filters_by_since_client_provider_model_status)
{
    sl_recorder_t *rec = open_with(NULL);
    for (uint64_t id = 1; id <= 8; id++) {
        /* Two attempts: the first on anthropic-backup, which serves none of them. */
        sl_request_row_t *r = make_row(id, (int64_t)id * 1000, 2);
        if (id % 2 == 0) {
            free(r->client);
            r->client = sl_xstrdup("team-b");
        }
        if (id % 4 == 0) {
            r->status = 429;
            free(r->model);
            r->model = sl_xstrdup("claude-haiku");
            free(r->provider);
            r->provider = sl_xstrdup("relay");
        }
        if (id == 3) {
            r->status = 0;
            r->outcome = SL_ROW_CANCELLED;
            free(r->provider);
            r->provider = NULL;
        }
        cr_assert(sl_recorder_submit(rec, r));
    }
    sl_recorder_close(rec);

    typedef sl_proto_history_filter_t filter_t;
    static const struct {
        uint64_t since_ms; /* relative to base_ms, like make_row's times */
        filter_t f;
        size_t n;
        uint64_t newest, oldest;
    } cases[] = {
        {0, {0}, 8, 8, 1},
        {6000, {0}, 3, 8, 6},
        {6001, {0}, 2, 8, 7},
        {9000, {0}, 0, 0, 0},
        {0, {.client = "team-a"}, 4, 7, 1},
        {0, {.client = "team-c"}, 0, 0, 0},
        {0, {.client = "team-b", .has_status = true, .status = 429}, 2, 8, 4},
        {0, {.provider = "relay"}, 2, 8, 4},
        {0, {.provider = "anthropic-backup"}, 0, 0, 0},
        {0, {.provider = "anthropic-main"}, 5, 7, 1},
        {3000, {.model = "claude-sonnet-4"}, 4, 7, 3},
        {0, {.model = "claude"}, 0, 0, 0},
        {0, {.has_status = true, .status = 503}, 0, 0, 0},
        {0, {.has_status = true, .status = 0}, 1, 3, 3},
        {0, {.has_status = true, .status = 200}, 5, 7, 1},
        {0,
         {.client = "team-a",
          .provider = "anthropic-main",
          .model = "claude-sonnet-4",
          .has_status = true,
          .status = 200},
         3,
         7,
         1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_recorder_history_query_t q = {.since_ms = (uint64_t)base_ms + cases[i].since_ms,
                                         .filter = &cases[i].f};
        page_t p = history_ok(&q);
        cr_assert_eq(p.n, cases[i].n, "case %zu: %zu rows", i, p.n);
        if (p.n > 0) {
            cr_assert_eq(p.rows[0].id, cases[i].newest, "case %zu", i);
            cr_assert_eq(p.rows[p.n - 1].id, cases[i].oldest, "case %zu", i);
        }
        for (size_t k = 0; k < p.n; k++) {
            const sl_proto_history_row_t *r = &p.rows[k];
            const filter_t *f = &cases[i].f;
            cr_assert_geq(r->at_ms, q.since_ms, "case %zu", i);
            cr_assert(f->client == NULL || strcmp(r->client, f->client) == 0, "case %zu", i);
            cr_assert(f->provider == NULL || (r->provider && strcmp(r->provider, f->provider) == 0),
                      "case %zu", i);
            cr_assert(f->model == NULL || strcmp(r->model, f->model) == 0, "case %zu", i);
            cr_assert(!f->has_status || r->status == f->status, "case %zu", i);
        }
        page_free(&p);
    }
}

Test(recorder, history_refuses_a_malformed_cursor_and_sets_nothing)
{
    sl_recorder_t *rec = open_with(NULL);
    cr_assert(sl_recorder_submit(rec, make_row(1, 1000, 1)));
    sl_recorder_close(rec);
    static const char *const bad[] = {
        "",
        "abc",
        "12",
        "12.",
        ".5",
        "-5.3",
        "5.-3",
        "12.x",
        "12.3.4",
        "12..3",
        "+1.2",
        " 1.2",
        "1.2 ",
        "1-2",
        "0x10.1",
        "1,2",
        "99999999999999999999.1",
        "1.99999999999999999999",
        "9223372036854775808.0",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_proto_history_row_t junk;
        sl_proto_history_row_t *rows = &junk;
        size_t n = 7;
        char *cursor = (char *)"junk";
        err[0] = '\0';
        int rc = sl_recorder_history(&where, &(sl_recorder_history_query_t){.cursor = bad[i]}, &rows, &n,
                                     &cursor, err, sizeof err);
        cr_assert_eq(rc, -1, "cursor '%s' accepted", bad[i]);
        cr_assert_null(rows, "cursor '%s'", bad[i]);
        cr_assert_eq(n, 0, "cursor '%s'", bad[i]);
        cr_assert_null(cursor, "cursor '%s'", bad[i]);
        cr_assert_str_eq(err, "bad cursor", "cursor '%s'", bad[i]);
    }
    /* Well-formed cursors this code never handed out are only positions. */
    static const struct {
        const char *cursor;
        size_t n;
    } good[] = {
        {"0.0", 0},
        {"9223372036854775807.9223372036854775807", 1},
        {"00000000000000000000000000000001.1", 0},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        page_t p = history_ok(&(sl_recorder_history_query_t){.cursor = good[i].cursor});
        cr_assert_eq(p.n, good[i].n, "cursor '%s'", good[i].cursor);
        page_free(&p);
    }
}

#ifndef STORE_PG
Test(recorder, history_of_a_db_not_yet_written_is_empty)
{
    /* No file: a fresh gateway has no history; a cursor does not change that. */
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 0);
    cr_assert_null(p.next_cursor);
    p = history_ok(&(sl_recorder_history_query_t){.cursor = "5.5", .limit = 3});
    cr_assert_eq(p.n, 0);
    char path[160];
    snprintf(path, sizeof path, "%s/no/such/dir/sluice.db", dir);
    sl_proto_history_row_t *rows = NULL;
    size_t n = 9;
    char *cursor = NULL;
    cr_assert_eq(sl_recorder_history(&(sl_store_where_t){.path = path}, &(sl_recorder_history_query_t){0},
                                     &rows, &n, &cursor, err, sizeof err),
                 0, "%s", err);
    cr_assert_eq(n, 0);
    cr_assert_null(rows);

    /* A file the recorder created but has not migrated yet. */
    FILE *f = fopen(db_path, "w");
    cr_assert_not_null(f);
    fclose(f);
    p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 0);
    cr_assert_null(p.next_cursor);

    /* An empty DB with the schema. */
    sl_recorder_close(open_with(NULL));
    p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 0);
    cr_assert_null(p.next_cursor);
}

Test(recorder, history_of_a_file_that_is_not_a_db_is_an_error)
{
    FILE *f = fopen(db_path, "w");
    cr_assert_not_null(f);
    fputs("this is not an SQLite database, only some text that is long enough to have a header", f);
    fclose(f);
    sl_proto_history_row_t *rows = NULL;
    size_t n = 0;
    char *cursor = NULL;
    err[0] = '\0';
    cr_assert_eq(
        sl_recorder_history(&where, &(sl_recorder_history_query_t){0}, &rows, &n, &cursor, err, sizeof err),
        -1);
    cr_assert_not_null(strstr(err, db_path), "%s", err);
    cr_assert_null(rows);
    cr_assert_null(cursor);
}

#else
Test(recorder, history_of_a_database_without_the_schema_is_empty)
{
    /* A database sluice has not set up yet: no history, a cursor does not change that. */
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 0);
    cr_assert_null(p.next_cursor);
    p = history_ok(&(sl_recorder_history_query_t){.cursor = "5.5", .limit = 3});
    cr_assert_eq(p.n, 0);

    /* An empty database with the schema. */
    sl_recorder_t *rec = open_with(NULL);
    sl_recorder_flush(rec);
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT version FROM sluice_schema"), SL_PG_SCHEMA_VERSION);
    p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 0);
    cr_assert_null(p.next_cursor);
}

#endif

Test(recorder, history_skips_names_it_does_not_know)
{
    sl_recorder_t *rec = open_with(NULL);
    for (uint64_t id = 1; id <= 3; id++) {
        sl_request_row_t *r = make_row(id, (int64_t)id * 1000, 3);
        r->attempts[0].outcome = SL_HOP_SKIPPED;
        r->attempts[0].skipped = SL_SKIP_BUSY;
        r->attempts[1].error.code = sl_xstrdup("gw.hop.error");
        r->attempts[1].error.text = sl_xstrdup("broke");
        r->attempts[1].error.nargs = 1;
        r->attempts[1].error.args = sl_xcalloc(1, sizeof(sl_row_arg_t));
        r->attempts[1].error.args[0].name = sl_xstrdup("after_ms");
        r->attempts[1].error.args[0].value = sl_xstrdup("20");
        cr_assert(sl_recorder_submit(rec, r));
    }
    sl_recorder_close(rec);
    /* As a newer sluice with more names, or a damaged file, could have left them. */
#ifdef STORE_PG
    exec_on_db(
        "UPDATE requests SET dialect = 'klingon' WHERE id = 2;"
        "UPDATE requests SET attempts = jsonb_set(jsonb_set(attempts::jsonb, '{0,skipped}', "
        "'\"solar_flare\"'),"
        " '{1,outcome}', '\"teleported\"')::json WHERE id = 3;"
        "UPDATE requests SET attempts = jsonb_set(attempts::jsonb, '{1,error_args}', '\"not json\"')::json"
        " WHERE id = 1;");
#else
    exec_on_db("UPDATE requests SET dialect = 'klingon' WHERE id = 2;"
               "UPDATE attempt_rows SET skipped = 'solar_flare' WHERE n = 0 AND request_row ="
               " (SELECT row FROM requests WHERE id = 3);"
               "UPDATE attempt_rows SET outcome = 'teleported' WHERE n = 1 AND request_row ="
               " (SELECT row FROM requests WHERE id = 3);"
               "UPDATE attempt_rows SET error_args = 'not json' WHERE n = 1 AND request_row ="
               " (SELECT row FROM requests WHERE id = 1);");
#endif

    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 2);
    const sl_proto_history_row_t *r3 = &p.rows[0], *r1 = &p.rows[1];
    cr_assert_eq(r3->id, 3);
    cr_assert_eq(r1->id, 1);
    cr_assert_eq(r3->attempts_len, 2, "the attempt with an unknown outcome is left out");
    cr_assert_eq(r3->attempts[0].outcome, SL_PROTO_OUTCOME_SKIPPED);
    cr_assert_not(r3->attempts[0].has_skipped, "an unknown skip reason is absent");
    cr_assert_eq(r3->attempts[1].outcome, SL_PROTO_OUTCOME_SERVED);
    cr_assert_eq(r1->attempts_len, 3);
    cr_assert(r1->attempts[0].has_skipped);
    cr_assert_eq(r1->attempts[0].skipped, SL_PROTO_SERVE_SKIP_BUSY);
    cr_assert_not_null(r1->attempts[1].error);
    cr_assert_str_eq(r1->attempts[1].error->code, "gw.hop.error");
    cr_assert_str_eq(r1->attempts[1].error->text, "broke");
    cr_assert_eq(r1->attempts[1].error->args_len, 0, "args that are not JSON are left out");
    page_free(&p);

    /* Page by page, the left-out row still moves the cursor on. */
    p = history_ok(&(sl_recorder_history_query_t){.limit = 1});
    cr_assert_eq(p.n, 1);
    cr_assert_eq(p.rows[0].id, 3);
    page_t p2 = history_ok(&(sl_recorder_history_query_t){.limit = 1, .cursor = p.next_cursor});
    cr_assert_eq(p2.n, 0);
    cr_assert_not_null(p2.next_cursor, "row 1 is still to come");
    page_t p3 = history_ok(&(sl_recorder_history_query_t){.limit = 1, .cursor = p2.next_cursor});
    cr_assert_eq(p3.n, 1);
    cr_assert_eq(p3.rows[0].id, 1);
    cr_assert_null(p3.next_cursor);
    page_free(&p3);
    page_free(&p2);
    page_free(&p);
}

/* ---- one row or one counted drop -------------------------------------------- */

Test(recorder, every_submit_is_one_row_or_one_counted_drop)
{
    sl_recorder_t *rec = open_with(&(sl_recorder_options_t){.queue_capacity = 100, .batch_max = 64});
    uint64_t refused = 0;
    for (uint64_t id = 0; id < 20000; id++) {
        if (!sl_recorder_submit(rec, make_row(id, 1000, 1)))
            refused++;
    }
    sl_recorder_flush(rec);
    sl_recorder_stats_t s = stats_of(rec);
    sl_recorder_close(rec);
    cr_assert_eq(s.written + s.dropped, 20000, "written %llu + dropped %llu", (unsigned long long)s.written,
                 (unsigned long long)s.dropped);
    cr_assert_eq(s.dropped, refused, "a healthy DB only drops what the full queue refused");
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), (int64_t)s.written);
    cr_assert_eq(query_int(ATTEMPTS_COUNT), (int64_t)s.written);
}

Test(recorder, row_with_an_enum_out_of_range_is_a_counted_drop)
{
    sl_recorder_t *rec = open_with(NULL);
    sl_request_row_t *bad_outcome = make_row(1, 1000, 1);
    bad_outcome->outcome = SL_ROW_OUTCOME_COUNT;
    sl_request_row_t *bad_skip = make_row(2, 1000, 1);
    bad_skip->attempts[0].skipped = SL_SKIP_COUNT;
    cr_assert_not(sl_recorder_submit(rec, bad_outcome));
    cr_assert_not(sl_recorder_submit(rec, bad_skip));
    cr_assert(sl_recorder_submit(rec, make_row(3, 1000, 1)));
    sl_recorder_flush(rec);
    sl_recorder_stats_t s = stats_of(rec);
    cr_assert_eq(s.dropped, 2);
    cr_assert_eq(s.written, 1);
    sl_recorder_close(rec);
}

Test(recorder, close_writes_every_queued_row)
{
    /* A large batch and no flush: only close can have written these. */
    sl_recorder_t *rec = open_with(&(sl_recorder_options_t){.batch_max = 4096});
    for (uint64_t id = 0; id < 300; id++)
        cr_assert(sl_recorder_submit(rec, make_row(id, 1000, 1)));
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 300);
}

#ifndef STORE_PG
/* ---- the file ------------------------------------------------------------------ */

static mode_t
mode_of(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s missing", path);
    return st.st_mode & 0777;
}

Test(recorder, db_file_and_wal_are_private)
{
    umask(022);
    sl_recorder_t *rec = open_with(NULL);
    cr_assert(sl_recorder_submit(rec, make_row(1, 1000, 0)));
    sl_recorder_flush(rec);
    char wal[160];
    snprintf(wal, sizeof wal, "%s-wal", db_path);
    cr_assert_eq(mode_of(db_path), 0600, "db mode %o", mode_of(db_path));
    cr_assert_eq(mode_of(wal), 0600, "wal mode %o", mode_of(wal));
    sl_recorder_close(rec);
}

Test(recorder, existing_world_readable_file_is_tightened)
{
    FILE *f = fopen(db_path, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(chmod(db_path, 0644), 0);
    sl_recorder_close(open_with(NULL));
    cr_assert_eq(mode_of(db_path), 0600);
}

Test(recorder, fresh_db_gets_the_schema_version_and_reopens)
{
    sl_recorder_t *rec = open_with(NULL);
    cr_assert(sl_recorder_submit(rec, make_row(1, 1000, 0)));
    sl_recorder_close(rec);
    cr_assert_eq(query_int("PRAGMA user_version"), SL_RECORDER_SCHEMA_VERSION);
    rec = open_with(NULL);
    cr_assert(sl_recorder_submit(rec, make_row(2, 2000, 0)));
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 2);
}

Test(recorder, a_version_1_db_is_migrated_and_keeps_its_rows)
{
    sl_recorder_t *rec = open_with(NULL);
    cr_assert(sl_recorder_submit(rec, make_row(1, 1000, 1)));
    sl_recorder_close(rec);
    /*
     * Version 1 kept every attempt in the table `attempts` (version 4 keeps a
     * lone served hop in its request's row), and had no attempts.reason (nor
     * version 2's hedge).
     */
    exec_on_db(
        "CREATE TABLE old_attempts AS SELECT * FROM attempts;"
        "DROP VIEW attempts; DROP TABLE attempt_rows;"
        "ALTER TABLE old_attempts RENAME TO attempts;"
        "ALTER TABLE attempts DROP COLUMN reason; ALTER TABLE attempts DROP COLUMN hedge;"
        "ALTER TABLE requests DROP COLUMN lone_hop_ms; ALTER TABLE requests DROP COLUMN lone_hop_model;"
        "ALTER TABLE requests DROP COLUMN lone_hop_pause_ms;"
        "PRAGMA user_version = 1");
    cr_assert_eq(query_int("SELECT count(*) FROM attempts"), 1);

    rec = open_with(NULL);
    sl_request_row_t *r = make_row(2, 2000, 1);
    r->attempts[0].has_reason = true;
    r->attempts[0].reason = SL_STEP_REASON_RETRY_ROUND;
    r->attempts[0].hedge = true;
    cr_assert(sl_recorder_submit(rec, r));
    cr_assert(sl_recorder_submit(rec, make_row(3, 3000, 1)));
    sl_recorder_close(rec);
    cr_assert_eq(query_int("PRAGMA user_version"), SL_RECORDER_SCHEMA_VERSION);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 3, "the old row stays");
    assert_cell("SELECT reason FROM attempts WHERE request_row = 2", "retry_round");
    cr_assert_eq(query_int("SELECT count(*) FROM attempt_rows"), 2, "the old hop and the hedge's");
    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE lone_hop_ms IS NOT NULL"), 1,
                 "the new lone hop is in its row");
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 3);
    cr_assert_eq(p.rows[0].attempts_len, 1);
    cr_assert_eq(p.rows[0].attempts[0].ms, 100);
    cr_assert(p.rows[1].attempts[0].has_reason);
    cr_assert_eq(p.rows[1].attempts[0].reason, SL_PROTO_STEP_REASON_RETRY_ROUND);
    cr_assert(p.rows[1].attempts[0].has_hedge && p.rows[1].attempts[0].hedge, "a hedge's hop says so");
    cr_assert_eq(p.rows[2].attempts_len, 1);
    cr_assert_not(p.rows[2].attempts[0].has_reason, "a version-1 attempt has none");
    cr_assert_not(p.rows[2].attempts[0].has_hedge, "nor a hedge");
    page_free(&p);
}

/* The attempt as history reads it back, every field, as text. */
static void
attempt_text(const sl_proto_attempt_view_t *a, char *out, size_t size)
{
    snprintf(out, size, "%s|%s|%d|%d:%u|%s:%s:%zu|%llu|%d:%llu|%d:%u|%d:%llu|%d:%d|%d:%d|%d:%d", a->provider,
             a->model ? a->model : "-", (int)a->outcome, a->has_status, a->status,
             a->error ? a->error->code : "-", a->error ? a->error->text : "-",
             a->error ? a->error->args_len : 0, (unsigned long long)a->ms, a->has_pause_ms,
             (unsigned long long)a->pause_ms, a->has_retry, a->retry, a->has_backoff_ms,
             (unsigned long long)a->backoff_ms, a->has_skipped, (int)a->skipped, a->has_reason,
             (int)a->reason, a->has_hedge, a->hedge);
}

Test(recorder, a_lone_served_hop_is_kept_in_its_row_and_reads_back_as_any_attempt)
{
    /* Each case changes one thing of a lone served hop; only those that say no more than the row stay in it.
     */
    enum {
        PLAIN,
        NO_MODEL,
        PAUSED,
        OTHER_PROVIDER,
        OTHER_STATUS,
        RETRIED,
        BACKED_OFF,
        REASON,
        HEDGE,
        ERROR,
        COUNT
    };
    const bool in_row[COUNT] = {[PLAIN] = true, [NO_MODEL] = true, [PAUSED] = true};
    sl_recorder_t *rec = open_with(NULL);
    for (int c = 0; c < COUNT; c++) {
        sl_request_row_t *r = make_row((uint64_t)c + 1, c, 1);
        sl_attempt_row_t *a = &r->attempts[0];
        a->model = c == NO_MODEL ? NULL : sl_xstrdup("claude-sonnet-4-20250514");
        a->ms = 100 + c;
        if (c == PAUSED)
            a->pause_ms = 40;
        if (c == OTHER_PROVIDER) {
            free(a->provider);
            a->provider = sl_xstrdup("anthropic-backup");
        }
        if (c == OTHER_STATUS)
            a->status = 201;
        if (c == RETRIED)
            a->retry = 1;
        if (c == BACKED_OFF)
            a->backoff_ms = 250;
        if (c == REASON) {
            a->has_reason = true;
            a->reason = SL_STEP_REASON_RETRY_ROUND;
        }
        if (c == HEDGE)
            a->hedge = true;
        if (c == ERROR) {
            sl_msg_t m = sl_msg_make(SL_CODE_CONFIG_FILE_UNREADABLE, "path", "/x", "reason", "gone", NULL);
            a->error = sl_row_msg_from(&m);
            sl_msg_free(&m);
        }
        cr_assert_eq(sl_store_lone_hop(r), in_row[c], "case %d", c);
        cr_assert(sl_recorder_submit(rec, r));
    }
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE lone_hop_ms IS NOT NULL"), 3);
    cr_assert_eq(query_int("SELECT count(*) FROM attempt_rows"), COUNT - 3);
    cr_assert_eq(query_int("SELECT count(*) FROM attempts"), COUNT);

    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, COUNT);
    const char *want[COUNT] = {
        [PLAIN] = "anthropic-main|claude-sonnet-4-20250514|0|1:200|-:-:0|100|0:0|0:0|0:0|0:0|0:0|0:0",
        [NO_MODEL] = "anthropic-main|-|0|1:200|-:-:0|101|0:0|0:0|0:0|0:0|0:0|0:0",
        [PAUSED] = "anthropic-main|claude-sonnet-4-20250514|0|1:200|-:-:0|102|1:40|0:0|0:0|0:0|0:0|0:0",
        /* The rest are in attempt_rows: the one thing each changed comes back with it. */
        [OTHER_PROVIDER] =
            "anthropic-backup|claude-sonnet-4-20250514|0|1:200|-:-:0|103|0:0|0:0|0:0|0:0|0:0|0:0",
        [OTHER_STATUS] = "anthropic-main|claude-sonnet-4-20250514|0|1:201|-:-:0|104|0:0|0:0|0:0|0:0|0:0|0:0",
        [RETRIED] = "anthropic-main|claude-sonnet-4-20250514|0|1:200|-:-:0|105|0:0|1:1|0:0|0:0|0:0|0:0",
        [BACKED_OFF] = "anthropic-main|claude-sonnet-4-20250514|0|1:200|-:-:0|106|0:0|0:0|1:250|0:0|0:0|0:0",
        [REASON] = "anthropic-main|claude-sonnet-4-20250514|0|1:200|-:-:0|107|0:0|0:0|0:0|0:0|1:4|0:0",
        [HEDGE] = "anthropic-main|claude-sonnet-4-20250514|0|1:200|-:-:0|108|0:0|0:0|0:0|0:0|0:0|1:1",
        [ERROR] = "anthropic-main|claude-sonnet-4-20250514|0|1:200|config.file_unreadable:cannot read /x: "
                  "gone:2|109|"
                  "0:0|0:0|0:0|0:0|0:0|0:0",
    };
    _Static_assert(SL_PROTO_STEP_REASON_RETRY_ROUND == 4, "REASON's text names retry_round as 4");
    for (int c = 0; c < COUNT; c++) {
        /* Newest first: case c is row COUNT - 1 - c. */
        const sl_proto_history_row_t *g = &p.rows[COUNT - 1 - c];
        cr_assert_eq(g->attempts_len, 1, "case %d", c);
        char got[512];
        attempt_text(&g->attempts[0], got, sizeof got);
        cr_assert_str_eq(got, want[c], "case %d", c);
    }
    page_free(&p);
}

Test(recorder, newer_schema_is_refused_untouched)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    char sql[96];
    snprintf(sql, sizeof sql, "CREATE TABLE future (x); PRAGMA user_version = %d",
             SL_RECORDER_SCHEMA_VERSION + 1);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    err[0] = '\0';
    cr_assert_null(sl_recorder_open(&where, NULL, err, sizeof err));
    char want[48];
    snprintf(want, sizeof want, "schema version %d", SL_RECORDER_SCHEMA_VERSION + 1);
    cr_assert_not_null(strstr(err, want), "%s", err);
    cr_assert_not_null(strstr(err, "newer"), "%s", err);
    cr_assert_eq(query_int("PRAGMA user_version"), SL_RECORDER_SCHEMA_VERSION + 1);
    cr_assert_eq(query_int("SELECT count(*) FROM sqlite_master WHERE name = 'requests'"), 0);
    cr_assert_eq(query_int("SELECT count(*) FROM pragma_journal_mode WHERE journal_mode = 'wal'"), 0,
                 "the journal mode was changed");

    sl_proto_history_row_t *rows = NULL;
    size_t n = 0;
    char *cursor = NULL;
    err[0] = '\0';
    cr_assert_eq(
        sl_recorder_history(&where, &(sl_recorder_history_query_t){0}, &rows, &n, &cursor, err, sizeof err),
        -1);
    cr_assert_not_null(strstr(err, want), "%s", err);
    cr_assert_null(rows);
}

Test(recorder, a_file_that_is_not_a_db_is_refused)
{
    FILE *f = fopen(db_path, "w");
    cr_assert_not_null(f);
    fputs("this is not an SQLite database, only some text that is long enough to have a header", f);
    fclose(f);
    err[0] = '\0';
    cr_assert_null(sl_recorder_open(&where, NULL, err, sizeof err));
    cr_assert_not_null(strstr(err, db_path), "%s", err);
}

Test(recorder, missing_directory_is_a_clear_error)
{
    char path[160];
    snprintf(path, sizeof path, "%s/no/such/dir/sluice.db", dir);
    err[0] = '\0';
    cr_assert_null(sl_recorder_open(&(sl_store_where_t){.path = path}, NULL, err, sizeof err));
    cr_assert_not_null(strstr(err, "cannot create"), "%s", err);
}

/* ---- faults ------------------------------------------------------------------- */

Test(recorder, locked_db_drops_rows_and_never_blocks_submit)
{
    sl_recorder_t *rec =
        open_with(&(sl_recorder_options_t){.queue_capacity = 100, .batch_max = 16, .busy_timeout_ms = 20});
    sl_recorder_flush(rec);

    sqlite3 *locker;
    cr_assert_eq(sqlite3_open(db_path, &locker), SQLITE_OK);
    sqlite3_busy_timeout(locker, 5000);
    cr_assert_eq(sqlite3_exec(locker, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);

    /*
     * This thread holds the lock, so a submit that waited for the DB would
     * never return: returning at all is the proof that submit does no IO.
     */
    uint64_t refused = 0;
    for (uint64_t id = 0; id < 500; id++) {
        if (!sl_recorder_submit(rec, make_row(id, 1000, 1)))
            refused++;
    }
    sl_recorder_flush(rec);
    sl_recorder_stats_t s = stats_of(rec);
    cr_assert_eq(s.written, 0);
    cr_assert_eq(s.dropped, 500, "every row is a counted drop while locked: %llu",
                 (unsigned long long)s.dropped);
    cr_assert(strstr(s.last_error, "locked") != NULL, "%s", s.last_error);
    cr_assert_lt(refused, 500, "some rows reached the writer and failed there");

    cr_assert_eq(sqlite3_exec(locker, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(locker);

    for (uint64_t id = 1000; id < 1010; id++)
        cr_assert(sl_recorder_submit(rec, make_row(id, 2000, 1)));
    sl_recorder_flush(rec);
    s = stats_of(rec);
    cr_assert_eq(s.written, 10);
    cr_assert_eq(s.dropped, 500);
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 10);
    cr_assert_eq(query_int("SELECT min(id) FROM requests"), 1000);
}

static uint64_t refused_told;

static void
on_refused(void *ctx, uint64_t rows, const char *reason)
{
    (void)ctx;
    (void)reason;
    refused_told += rows;
}

/* behaviour.md §10: a row the full queue refused is a counted drop, and an event says so. */
Test(recorder, rows_a_full_queue_refuses_are_told_as_dropped)
{
    refused_told = 0;
    sl_recorder_t *rec = open_with(&(sl_recorder_options_t){
        .queue_capacity = 100, .batch_max = 16, .busy_timeout_ms = 20, .on_dropped = on_refused});
    sl_recorder_flush(rec);
    sqlite3 *locker;
    cr_assert_eq(sqlite3_open(db_path, &locker), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(locker, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    uint64_t refused = 0;
    for (uint64_t id = 0; id < 500; id++) {
        if (!sl_recorder_submit(rec, make_row(id, 1000, 1)))
            refused++;
    }
    cr_assert_gt(refused, 0, "the writer, held by the lock, fell behind");
    cr_assert_eq(sqlite3_exec(locker, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(locker);
    sl_recorder_flush(rec);
    sl_recorder_stats_t s = stats_of(rec);
    sl_recorder_close(rec);
    cr_assert_eq(s.written + s.dropped, 500);
    cr_assert_eq(refused_told, s.dropped, "every drop is told: refused %llu, dropped %llu, told %llu",
                 (unsigned long long)refused, (unsigned long long)s.dropped,
                 (unsigned long long)refused_told);
    cr_assert_geq(refused_told, refused);
}

Test(recorder, full_disk_drops_rows_counted_without_crash)
{
    sl_recorder_t *rec = open_with(&(sl_recorder_options_t){.batch_max = 4, .max_db_bytes = 64 * 1024});
    sl_strbuf_t text = {0};
    for (int i = 0; i < 150; i++)
        sl_strbuf_append(&text, "upstream overloaded, ", 21);
    char *long_text = sl_strbuf_finish(&text);
    for (uint64_t id = 0; id < 200; id++) {
        sl_request_row_t *r = make_row(id, 1000, 1);
        r->error.code = sl_xstrdup("gw.upstream.overloaded");
        r->error.text = sl_xstrdup(long_text);
        cr_assert(sl_recorder_submit(rec, r));
    }
    free(long_text);
    sl_recorder_flush(rec);
    sl_recorder_stats_t s = stats_of(rec);
    cr_assert_eq(s.written + s.dropped, 200);
    cr_assert_gt(s.dropped, 0);
    cr_assert(strstr(s.last_error, "full") != NULL, "%s", s.last_error);
    /* The recorder lives on: usage that does not fit either is counted, not fatal. */
    sl_recorder_add_usage(rec, SL_BUCKET_CLIENT, "team-a", 1, 1, 1, 1);
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), (int64_t)s.written);
}

#endif

/* ---- usage buckets -------------------------------------------------------------- */

typedef struct {
    size_t n;
    struct {
        sl_bucket_kind_t kind;
        char name[32];
        int64_t minute, requests, tokens, cost;
    } b[16];
} buckets_seen_t;

static void
on_bucket(void *ctx, sl_bucket_kind_t kind, const char *name, int64_t minute, int64_t requests,
          int64_t tokens, int64_t cost_micros)
{
    buckets_seen_t *seen = ctx;
    cr_assert_lt(seen->n, 16);
    seen->b[seen->n].kind = kind;
    snprintf(seen->b[seen->n].name, sizeof seen->b[seen->n].name, "%s", name);
    seen->b[seen->n].minute = minute;
    seen->b[seen->n].requests = requests;
    seen->b[seen->n].tokens = tokens;
    seen->b[seen->n].cost = cost_micros;
    seen->n++;
}

Test(recorder, usage_buckets_add_up_across_flushes_and_restarts)
{
    const int64_t m = wall_ms() / 60000;
    sl_recorder_t *rec = open_with(NULL);
    cr_assert(sl_recorder_add_usage(rec, SL_BUCKET_PROVIDER, "p1", m, 1, 100, 5));
    cr_assert(sl_recorder_add_usage(rec, SL_BUCKET_PROVIDER, "p1", m, 1, 50, 5));
    cr_assert(sl_recorder_add_usage(rec, SL_BUCKET_CLIENT, "p1", m, 1, 10, 1));
    sl_recorder_flush(rec);
    cr_assert(sl_recorder_add_usage(rec, SL_BUCKET_PROVIDER, "p1", m, 1, 1, 1));
    cr_assert(sl_recorder_add_usage(rec, SL_BUCKET_PROVIDER, "p1", m + 1, 1, 7, 0));
    cr_assert_not(sl_recorder_add_usage(rec, SL_BUCKET_KIND_COUNT, "p1", m, 1, 1, 1));
    sl_recorder_close(rec);
    rec = open_with(NULL);
    cr_assert(sl_recorder_add_usage(rec, SL_BUCKET_CLIENT, "p1", m, 2, 20, 2));
    sl_recorder_close(rec);

    buckets_seen_t seen = {0};
    cr_assert_eq(sl_recorder_load_usage(&where, m * 60000, on_bucket, &seen, err, sizeof err), 3, "%s", err);
    int64_t provider_m = -1, client_m = -1, provider_next = -1;
    for (size_t i = 0; i < seen.n; i++) {
        cr_assert_str_eq(seen.b[i].name, "p1");
        if (seen.b[i].kind == SL_BUCKET_PROVIDER && seen.b[i].minute == m) {
            provider_m = seen.b[i].tokens;
            cr_assert_eq(seen.b[i].requests, 3);
            cr_assert_eq(seen.b[i].cost, 11);
        } else if (seen.b[i].kind == SL_BUCKET_CLIENT) {
            client_m = seen.b[i].tokens;
            cr_assert_eq(seen.b[i].requests, 3);
        } else {
            provider_next = seen.b[i].tokens;
        }
    }
    cr_assert_eq(provider_m, 151);
    cr_assert_eq(client_m, 30);
    cr_assert_eq(provider_next, 7);
    cr_assert_leq(seen.b[0].minute, seen.b[seen.n - 1].minute, "oldest first");

    /* A since inside minute m + 1 still gets that minute's bucket. */
    seen = (buckets_seen_t){0};
    cr_assert_eq(sl_recorder_load_usage(&where, (m + 1) * 60000 + 30000, on_bucket, &seen, err, sizeof err),
                 1);
    cr_assert_eq(seen.b[0].minute, m + 1);
}

#ifndef STORE_PG
Test(recorder, load_usage_of_a_missing_db_is_an_error)
{
    buckets_seen_t seen = {0};
    err[0] = '\0';
    cr_assert_eq(sl_recorder_load_usage(&where, 0, on_bucket, &seen, err, sizeof err), -1);
    cr_assert_neq(err[0], '\0');
    cr_assert_eq(seen.n, 0);
}

#endif

/* ---- retention ------------------------------------------------------------------- */

Test(recorder, retention_deletes_old_rows_in_chunks_but_keeps_buckets_40_days)
{
    const int64_t now = wall_ms();
    /* Retention long enough that the first run's own sweep deletes nothing. */
    sl_recorder_t *rec = open_with(&(sl_recorder_options_t){.retention_days = 36500});
    const uint64_t old_rows = SL_RECORDER_SWEEP_CHUNK * 2 + 37;
    for (uint64_t id = 0; id < old_rows; id++)
        cr_assert(sl_recorder_submit(rec, make_row(id, now - base_ms - 2 * DAY_MS - (int64_t)id, 2)));
    cr_assert(sl_recorder_submit(rec, make_row(99999, now - base_ms - 3600000, 2)));
    static const int64_t bucket_age_days[] = {45, 35, 0};
    for (size_t i = 0; i < 3; i++)
        cr_assert(sl_recorder_add_usage(rec, SL_BUCKET_PROVIDER, "p1",
                                        (now - bucket_age_days[i] * DAY_MS) / 60000, 1, 1, 1));
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), (int64_t)old_rows + 1);
    cr_assert_eq(query_int("SELECT count(*) FROM usage_buckets"), 3);

    /* One day of request retention; buckets still keep 40 days. */
    rec = open_with(&(sl_recorder_options_t){.retention_days = 1});
    sl_recorder_flush(rec);
    sl_recorder_stats_t s = stats_of(rec);
    sl_recorder_close(rec);
    cr_assert_eq(s.swept, old_rows);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 1);
    cr_assert_eq(query_int("SELECT id FROM requests"), 99999);
    cr_assert_eq(query_int(ATTEMPTS_COUNT), 2, "the old rows' attempts went with them");
    cr_assert_eq(query_int("SELECT count(*) FROM usage_buckets"), 2);
    cr_assert_eq(query_int("SELECT min(minute) FROM usage_buckets"), (now - 35 * DAY_MS) / 60000);
}

/* ---- credentials ------------------------------------------------------------------- */

static const char *const secrets[] = {
    "AIzaSyA-0123456789abcdefghijklmnopq",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123",
    "abcdefghijklmnopqrstuvwxyzABCDEF",
    "sk-proj-0123456789abcdefWXYZ9876",
};

static void
assert_no_secret(const char *table, const char *column, const char *value)
{
    for (size_t k = 0; value != NULL && k < sizeof secrets / sizeof secrets[0]; k++)
        cr_assert_null(strstr(value, secrets[k]), "%s.%s holds a credential: %s", table, column, value);
}

Test(recorder, credentials_never_reach_the_db)
{
    sl_recorder_t *rec = open_with(NULL);
    sl_request_row_t *r = make_row(1, 1000, 1);
    free(r->path);
    r->path = sl_xstrdup("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse&key="
                         "AIzaSyA-0123456789abcdefghijklmnopq");
    r->dialect = SL_DIALECT_GEMINI;
    r->outcome = SL_ROW_FAILED;
    r->error.code = sl_xstrdup("gw.upstream.status");
    r->error.text =
        sl_xstrdup("upstream said: invalid x-api-key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123");
    r->attempts[0].error.code = sl_xstrdup("gw.hop.error");
    r->attempts[0].error.text = sl_xstrdup("401 for Bearer abcdefghijklmnopqrstuvwxyzABCDEF");
    r->attempts[0].error.nargs = 1;
    r->attempts[0].error.args = sl_xcalloc(1, sizeof(sl_row_arg_t));
    r->attempts[0].error.args[0].name = sl_xstrdup("body");
    r->attempts[0].error.args[0].value =
        sl_xstrdup("{\"error\": \"bad key sk-proj-0123456789abcdefWXYZ9876\"}");
    cr_assert(sl_recorder_submit(rec, r));
    sl_recorder_close(rec);

    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE path = "
                           "'/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse'"),
                 1);
    /* Every text cell of every table. */
#ifdef STORE_PG
    size_t cells = each_cell("requests", assert_no_secret);
#else
    size_t cells = each_cell("requests", assert_no_secret) + each_cell("attempts", assert_no_secret);
#endif
    cr_assert_gt(cells, 20);

    char *text = query_text("SELECT error_text FROM requests");
    cr_assert_not_null(strstr(text, "sk-ant-…0123"), "%s", text);
    free(text);
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 1);
    const sl_proto_msg_t *e = p.rows[0].attempts[0].error;
    cr_assert_not_null(e);
    cr_assert_null(strstr(e->text, secrets[2]), "%s", e->text);
    cr_assert_not_null(strstr(e->args[0].value, "sk-proj-…9876"), "%s", e->args[0].value);
    page_free(&p);
}

/* A packed row (one allocation, as the gateway makes them) stores as any row; the path redaction replaces. */
Test(recorder, a_packed_row_stores_every_string_and_its_redacted_path)
{
    static const char path[] =
        "/v1beta/models/gemini-2.0-flash:generateContent?key=AIzaSyA-0123456789abcdefghijklmnopq";
    static const char *const strings[] = {"team-p",   "gemini-2.0-flash", "google-b", path,
                                          "google-a", "gemini-1.5",       "google-b", ""};
    size_t text = 0;
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
        text += strlen(strings[i]) + 1;
    sl_recorder_t *rec = open_with(NULL);
    sl_request_row_t *r = sl_request_row_new_packed(2, text);
    r->id = 7;
    r->started_at_ms = base_ms + 500;
    r->client = sl_request_row_text(r, strings[0], strlen(strings[0]));
    r->model = sl_request_row_text(r, strings[1], strlen(strings[1]));
    r->provider = sl_request_row_text(r, strings[2], strlen(strings[2]));
    r->path = sl_request_row_text(r, path, sizeof(path) - 1);
    r->dialect = SL_DIALECT_GEMINI;
    r->status = 200;
    r->outcome = SL_ROW_SERVED;
    r->duration_ms = 40;
    cr_assert_eq(r->ttfb_ms, SL_ROW_ABSENT);
    cr_assert_eq(r->attempts[1].pause_ms, SL_ROW_ABSENT);
    for (size_t i = 0; i < 2; i++) {
        r->attempts[i].provider = sl_request_row_text(r, strings[4 + 2 * i], strlen(strings[4 + 2 * i]));
        r->attempts[i].model = sl_request_row_text(r, strings[5 + 2 * i], strlen(strings[5 + 2 * i]));
        r->attempts[i].outcome = i == 0 ? SL_HOP_STATUS : SL_HOP_SERVED;
        r->attempts[i].status = i == 0 ? 503 : 200;
    }
    cr_assert_eq(r->text_next, r->block_end, "the text was sized exactly");
    /* A string set the usual way in a packed row is owned on its own. */
    r->attempts[0].error.code = sl_xstrdup("gw.upstream.status");
    r->attempts[0].error.text = sl_xstrdup("503 from google-a");
    cr_assert(sl_recorder_submit(rec, r));
    sl_recorder_close(rec);

    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 1);
    const sl_proto_history_row_t *h = &p.rows[0];
    cr_assert_str_eq(h->client, "team-p");
    cr_assert_str_eq(h->model, "gemini-2.0-flash");
    cr_assert_str_eq(h->provider, "google-b");
    cr_assert_eq(h->attempts_len, 2);
    cr_assert_str_eq(h->attempts[0].provider, "google-a");
    cr_assert_str_eq(h->attempts[0].model, "gemini-1.5");
    cr_assert_str_eq(h->attempts[0].error->text, "503 from google-a");
    cr_assert_str_eq(h->attempts[1].provider, "google-b");
    page_free(&p);
    char *stored = query_text("SELECT path FROM requests");
    cr_assert_str_eq(stored, "/v1beta/models/gemini-2.0-flash:generateContent");
    free(stored);
}

#ifdef STORE_PG
/* ---- PostgreSQL: the schema, several instances, the spool ------------------------------------ */

static void
status_of(sl_recorder_t *rec, sl_store_status_t *st)
{
    sl_recorder_status(rec, st);
    cr_assert_eq(st->kind, SL_STORE_POSTGRES);
}

/* where, but at a URL of the caller's (a closed port, a wrong password): the same schema and spool. */
static sl_recorder_t *
open_at(const char *url)
{
    sl_store_where_t w = where;
    w.url = url;
    sl_recorder_t *rec = sl_recorder_open(&w, NULL, err, sizeof err);
    cr_assert_not_null(rec, "open failed: %s", err);
    return rec;
}

Test(recorder, fresh_database_gets_the_schema_version_and_reopens)
{
    sl_recorder_t *rec = open_with(NULL);
    cr_assert(sl_recorder_submit(rec, make_row(1, 1000, 1)));
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT version FROM sluice_schema"), SL_PG_SCHEMA_VERSION);
    cr_assert_eq(query_int("SELECT count(*) FROM sluice_schema"), 1);
    rec = open_with(NULL);
    cr_assert(sl_recorder_submit(rec, make_row(1, 2000, 1)));
    sl_recorder_close(rec);
    /* Request ids restart with the process: the second run's id 1 is a row of its own. */
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 2);
    cr_assert_eq(query_int("SELECT count(DISTINCT boot_id) FROM requests"), 2);
    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE instance = 'test-instance'"), 2);
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 2);
    cr_assert_str_eq(p.rows[0].instance, "test-instance");
    page_free(&p);
}

Test(recorder, a_version_1_schema_is_migrated_and_keeps_its_rows)
{
    /* Version 1, as an older sluice left it: attempts in a table of their own. */
    exec_on_db(
        "CREATE TABLE sluice_schema (version integer NOT NULL); INSERT INTO sluice_schema VALUES (1);"
        "CREATE TABLE requests (seq bigserial NOT NULL, instance text NOT NULL, boot_id text NOT NULL,"
        " id bigint NOT NULL, started_at_ms bigint NOT NULL, client text NOT NULL, dialect text NOT NULL,"
        " model text NOT NULL, provider text, path text NOT NULL, status integer NOT NULL,"
        " outcome text NOT NULL, error_code text, error_text text, error_args text,"
        " duration_ms bigint NOT NULL, ttfb_ms bigint, ttft_ms bigint, usage_input bigint,"
        " usage_output bigint, usage_cache_read bigint, usage_cache_write bigint, usage_estimated boolean,"
        " cost_micros bigint, PRIMARY KEY (instance, boot_id, id));"
        "CREATE INDEX requests_by_time ON requests (started_at_ms, seq);"
        "CREATE TABLE attempts (instance text NOT NULL, boot_id text NOT NULL, request_id bigint NOT NULL,"
        " n integer NOT NULL, provider text NOT NULL, model text, outcome text NOT NULL, status integer,"
        " error_code text, error_text text, error_args text, ms bigint NOT NULL, pause_ms bigint,"
        " retry integer, backoff_ms bigint, skipped text, reason text,"
        " PRIMARY KEY (instance, boot_id, request_id, n));"
        "CREATE TABLE usage_buckets (instance text NOT NULL, boot_id text NOT NULL, kind text NOT NULL,"
        " name text NOT NULL, minute bigint NOT NULL, requests bigint NOT NULL, tokens bigint NOT NULL,"
        " cost_micros bigint NOT NULL, seq bigint NOT NULL,"
        " PRIMARY KEY (instance, boot_id, kind, name, minute));"
        "CREATE INDEX usage_by_minute ON usage_buckets (minute);");
    char sql[2048];
    snprintf(
        sql, sizeof sql,
        "INSERT INTO requests (instance, boot_id, id, started_at_ms, client, dialect, model, provider, path,"
        " status, outcome, duration_ms) VALUES ('old', 'b0', 1, %lld, 'team-a', 'anthropic', 'claude-x',"
        " 'two', '/v1/messages', 200, 'served', 900);"
        "INSERT INTO attempts (instance, boot_id, request_id, n, provider, outcome, status, error_code,"
        " error_text, error_args, ms, retry) VALUES"
        " ('old', 'b0', 1, 0, 'one', 'status', 529, 'gw.upstream.status', 'overloaded',"
        " '{\"status\":\"529\"}', 120, NULL),"
        " ('old', 'b0', 1, 1, 'two', 'served', 200, NULL, NULL, NULL, 700, 1);",
        (long long)(base_ms + 1000));
    exec_on_db(sql);

    sl_recorder_t *rec = open_with(NULL);
    sl_request_row_t *r = make_row(2, 2000, 1);
    r->attempts[0].has_reason = true;
    r->attempts[0].reason = SL_STEP_REASON_RETRY_ROUND;
    r->attempts[0].hedge = true;
    cr_assert(sl_recorder_submit(rec, r));
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT version FROM sluice_schema"), SL_PG_SCHEMA_VERSION);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 2, "the old row stays");
    cr_assert_eq(query_int("SELECT count(*) FROM pg_tables WHERE tablename = 'attempts' AND schemaname = "
                           "current_schema()"),
                 0, "its attempts moved into it");
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 2);
    cr_assert(p.rows[0].attempts[0].has_reason);
    cr_assert_eq(p.rows[0].attempts[0].reason, SL_PROTO_STEP_REASON_RETRY_ROUND);
    cr_assert(p.rows[0].attempts[0].has_hedge && p.rows[0].attempts[0].hedge, "a hedge's hop says so");
    const sl_proto_history_row_t *old = &p.rows[1];
    cr_assert_str_eq(old->instance, "old");
    cr_assert_eq(old->attempts_len, 2);
    cr_assert_str_eq(old->attempts[0].provider, "one");
    cr_assert_eq(old->attempts[0].status, 529);
    cr_assert_not_null(old->attempts[0].error);
    cr_assert_str_eq(old->attempts[0].error->code, "gw.upstream.status");
    cr_assert_eq(old->attempts[0].error->args_len, 1);
    cr_assert_str_eq(old->attempts[0].error->args[0].value, "529");
    cr_assert_eq(old->attempts[0].ms, 120);
    cr_assert_not(old->attempts[0].has_retry);
    cr_assert_eq(old->attempts[1].outcome, SL_PROTO_OUTCOME_SERVED);
    cr_assert_eq(old->attempts[1].retry, 1);
    page_free(&p);
}

Test(recorder, newer_schema_is_refused_untouched_and_rows_wait_in_the_spool)
{
    exec_on_db(
        "CREATE TABLE sluice_schema (version integer NOT NULL); INSERT INTO sluice_schema VALUES (99)");
    sl_recorder_t *rec = open_with(NULL);
    cr_assert(sl_recorder_submit(rec, make_row(1, 1000, 1)));
    sl_recorder_flush(rec);
    sl_store_status_t st;
    status_of(rec, &st);
    cr_assert(st.degraded);
    cr_assert(strstr(st.reason, "newer") != NULL, "%s", st.reason);
    cr_assert_eq(st.spooled_rows, 1);
    cr_assert_eq(stats_of(rec).written, 1, "kept, in the spool");
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT version FROM sluice_schema"), 99);
    cr_assert_eq(
        query_int(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'requests' AND schemaname = current_schema()"),
        0);
}

typedef struct {
    const char *instance;
    char spool[160];
    uint64_t first_id;
} instance_run_t;

/* One instance's life: open (racing the other for the schema), 50 rows, close. */
static void *
run_instance(void *arg)
{
    instance_run_t *run = arg;
    sl_store_where_t w = where;
    w.instance = run->instance;
    w.spool_path = run->spool;
    char why[512];
    sl_recorder_t *rec = sl_recorder_open(&w, NULL, why, sizeof why);
    if (rec == NULL)
        return NULL;
    for (uint64_t i = 0; i < 50; i++)
        sl_recorder_submit(rec, make_row(run->first_id + i, 1000 + (int64_t)i, 2));
    sl_recorder_close(rec);
    return run;
}

Test(recorder, two_instances_starting_at_once_set_up_one_schema_and_share_one_history)
{
    instance_run_t runs[2] = {{.instance = "east", .first_id = 1}, {.instance = "west", .first_id = 1}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        snprintf(runs[i].spool, sizeof runs[i].spool, "%s/%s.spool", dir, runs[i].instance);
        cr_assert_eq(pthread_create(&threads[i], NULL, run_instance, &runs[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        void *done;
        pthread_join(threads[i], &done);
        cr_assert_not_null(done, "instance %s opened", runs[i].instance);
        unlink(runs[i].spool);
    }
    cr_assert_eq(query_int("SELECT count(*) FROM sluice_schema"), 1);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 100, "the same ids, two instances: 100 rows");
    cr_assert_eq(query_int(ATTEMPTS_COUNT), 200);
    page_t p = history_ok(&(sl_recorder_history_query_t){.limit = 500});
    cr_assert_eq(p.n, 100);
    size_t east = 0, west = 0;
    for (size_t i = 0; i < p.n; i++) {
        cr_assert_not_null(p.rows[i].instance);
        east += strcmp(p.rows[i].instance, "east") == 0;
        west += strcmp(p.rows[i].instance, "west") == 0;
    }
    cr_assert_eq(east, 50);
    cr_assert_eq(west, 50);
    page_free(&p);
}

static void
copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    cr_assert(in != NULL && out != NULL);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

Test(recorder, rows_spooled_while_postgres_is_unreachable_arrive_once_at_the_next_start)
{
    /* Nothing listens on port 1: every connection is refused at once. */
    sl_recorder_t *rec = open_at("postgres://sluice:hunter2-secret@127.0.0.1:1/sluice");
    const int64_t m = wall_ms() / 60000;
    for (uint64_t id = 1; id <= 5; id++)
        cr_assert(sl_recorder_submit(rec, make_row(id, (int64_t)id * 1000, 2)));
    cr_assert(sl_recorder_add_usage(rec, SL_BUCKET_PROVIDER, "p1", m, 5, 500, 50));
    sl_recorder_flush(rec);
    sl_store_status_t st;
    status_of(rec, &st);
    cr_assert(st.degraded);
    cr_assert_eq(st.spooled_rows, 5);
    cr_assert_gt(st.spool_bytes, 0);
    cr_assert(strstr(st.reason, "cannot connect") != NULL, "%s", st.reason);
    cr_assert_null(strstr(st.reason, "hunter2"), "%s", st.reason);
    sl_recorder_stats_t s = stats_of(rec);
    cr_assert_eq(s.written, 5);
    cr_assert_eq(s.dropped, 0);
    sl_recorder_close(rec);
    cr_assert_eq(
        query_int(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'requests' AND schemaname = current_schema()"),
        0);

    /* A copy of the spool as it was: as if the next run died after writing it, before emptying it. */
    char copy[160];
    snprintf(copy, sizeof copy, "%s/copy.spool", dir);
    copy_file(spool_path, copy);

    rec = open_with(NULL);
    sl_recorder_flush(rec);
    status_of(rec, &st);
    cr_assert_not(st.degraded, "%s", st.reason);
    cr_assert_eq(st.spooled_rows, 0);
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 5);
    cr_assert_eq(query_int(ATTEMPTS_COUNT), 10);
    cr_assert_eq(query_int("SELECT sum(tokens) FROM usage_buckets"), 500);
    struct stat fst;
    cr_assert_eq(stat(spool_path, &fst), 0);
    cr_assert_eq(fst.st_size, 0, "written, so emptied");

    rename(copy, spool_path);
    rec = open_with(NULL);
    sl_recorder_flush(rec);
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 5, "a replayed batch doubles nothing");
    cr_assert_eq(query_int(ATTEMPTS_COUNT), 10);
    cr_assert_eq(query_int("SELECT sum(tokens) FROM usage_buckets"), 500, "nor does a replayed usage flush");
    page_t p = history_ok(&(sl_recorder_history_query_t){0});
    cr_assert_eq(p.n, 5);
    page_free(&p);
}

static uint64_t dropped_told;
static char dropped_why[256];

static void
on_dropped(void *ctx, uint64_t rows, const char *reason)
{
    (void)ctx;
    dropped_told += rows;
    snprintf(dropped_why, sizeof dropped_why, "%s", reason);
}

Test(recorder, past_the_spools_cap_rows_are_dropped_counted_and_told)
{
    sl_store_where_t w = where;
    w.url = "postgres://sluice@127.0.0.1:1/sluice";
    w.spool_max_bytes = 3000;
    sl_recorder_t *rec =
        sl_recorder_open(&w, &(sl_recorder_options_t){.on_dropped = on_dropped}, err, sizeof err);
    cr_assert_not_null(rec, "%s", err);
    for (uint64_t id = 1; id <= 40; id++) {
        cr_assert(sl_recorder_submit(rec, make_row(id, (int64_t)id, 1)));
        sl_recorder_flush(rec); /* one batch each */
    }
    sl_recorder_stats_t s = stats_of(rec);
    sl_store_status_t st;
    status_of(rec, &st);
    sl_recorder_close(rec);
    cr_assert_gt(st.spooled_rows, 0);
    cr_assert_leq(st.spool_bytes, 3000);
    cr_assert_eq(s.written, st.spooled_rows, "what is not dropped waits in the spool");
    cr_assert_eq(s.written + s.dropped, 40, "one row or one counted drop each");
    cr_assert_gt(s.dropped, 0);
    cr_assert_eq(dropped_told, s.dropped, "each drop told (RowsDropped)");
    cr_assert(strstr(dropped_why, "spool") != NULL && strstr(dropped_why, "full") != NULL, "%s", dropped_why);
}

Test(recorder, a_row_key_stored_already_is_not_stored_twice)
{
    /* A live batch goes by COPY, which has no ON CONFLICT: one that meets a stored key is sent again as the
     * INSERT. */
    sl_recorder_t *rec = open_with(NULL);
    cr_assert(sl_recorder_submit(rec, make_row(7, 1000, 1)));
    sl_recorder_flush(rec);
    cr_assert(sl_recorder_submit(rec, make_row(7, 2000, 1)));
    cr_assert(sl_recorder_submit(rec, make_row(8, 3000, 1)));
    sl_recorder_flush(rec);
    sl_recorder_stats_t s = stats_of(rec);
    sl_store_status_t st;
    status_of(rec, &st);
    sl_recorder_close(rec);
    cr_assert_eq(s.dropped, 0);
    cr_assert_not(st.degraded, "%s", st.reason);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 2);
    cr_assert_eq(query_int("SELECT started_at_ms FROM requests WHERE id = 7"), base_ms + 1000,
                 "the first one kept");
    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE id = 8"), 1, "its batch-mate stored");
}

Test(recorder, refused_credentials_degrade_with_a_masked_reason_and_nothing_is_lost)
{
    char url[512];
    snprintf(url, sizeof url, "postgres://sluice:wrong-password-42@127.0.0.1:%s/sluice",
             getenv("SLUICE_TEST_PG_PORT"));
    sl_recorder_t *rec = open_at(url);
    cr_assert(sl_recorder_submit(rec, make_row(1, 1000, 1)));
    sl_recorder_flush(rec);
    sl_store_status_t st;
    status_of(rec, &st);
    cr_assert(st.degraded);
    cr_assert(strstr(st.reason, "password authentication failed") != NULL, "%s", st.reason);
    cr_assert_null(strstr(st.reason, "wrong-password-42"), "%s", st.reason);
    cr_assert_eq(st.spooled_rows, 1);
    sl_recorder_close(rec);
    /* The right credentials at the next start: the row arrives. */
    rec = open_with(NULL);
    sl_recorder_flush(rec);
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 1);
}

/* The PostgreSQL store driven as the writer drives it, one call at a time: set aside when behind. */
static bool
store_write(sl_store_t *st, uint64_t id, bool behind)
{
    sl_request_row_t *row = make_row(id, 1000 + (int64_t)id, 1);
    char why[256] = "";
    bool ok = behind ? st->ops->set_aside_rows(st, &row, 1, why, sizeof why)
                     : st->ops->write_rows(st, &row, 1, why, sizeof why);
    cr_assert(ok, "row %llu: %s", (unsigned long long)id, why);
    sl_request_row_free(row);
    return ok;
}

static sl_store_status_t
store_status(sl_store_t *st)
{
    sl_store_status_t out;
    st->ops->status(st, &out);
    return out;
}

/*
 * cluster.md: a database slower than the requests delays their rows instead of dropping them. A batch
 * the writer has no time for (its queue behind) goes to the spool without a round trip; the spool is
 * written one batch per write or tend, oldest first, while the store is up and not degraded. Rows do not
 * wait behind the spool (each has its key); a usage flush does (each applies once, in order).
 */
Test(recorder, a_batch_set_aside_waits_in_the_spool_and_is_written_a_batch_per_write_or_tend)
{
    sl_store_t *st = sl_store_pg_open(&where, &(sl_recorder_options_t){0}, err, sizeof err);
    cr_assert_not_null(st, "%s", err);
    store_write(st, 1, false);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 1);
    cr_assert_eq(st->ops->tend_at(st), INT64_MAX, "nothing waits");

    store_write(st, 2, true);
    store_write(st, 3, true);
    store_write(st, 4, true);
    sl_store_status_t s = store_status(st);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 1, "spooled, not sent");
    cr_assert_eq(s.spooled_rows, 3);
    cr_assert_not(s.degraded, "a slow database is not a degraded one");
    cr_assert_lt(st->ops->tend_at(st), INT64_MAX, "the store wants time to write its spool");

    /* A batch the writer has time for: the oldest spooled batch, then it, straight to the database. */
    store_write(st, 5, false);
    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE id = 2"), 1, "the oldest spooled batch");
    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE id IN (3, 4)"), 0, "one batch a write");
    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE id = 5"), 1, "rows do not wait behind it");
    cr_assert_eq(store_status(st).spooled_rows, 2);

    /* A usage flush waits behind what the spool holds, and is written in its turn. */
    sl_usage_delta_t d = {.kind = SL_BUCKET_CLIENT, .name = "team-a", .minute = 1, .requests = 1};
    char why[256] = "";
    cr_assert(st->ops->write_usage(st, &d, 1, 1, why, sizeof why), "%s", why);
    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE id = 3"), 1);
    cr_assert_eq(query_int("SELECT count(*) FROM usage_buckets"), 0, "behind row 4's batch");

    st->ops->tend(st, INT64_MAX / 2);
    cr_assert_eq(query_int("SELECT count(*) FROM requests WHERE id = 4"), 1);
    cr_assert_eq(query_int("SELECT count(*) FROM usage_buckets"), 0, "one batch a tend");
    st->ops->tend(st, INT64_MAX / 2);
    cr_assert_eq(query_int("SELECT requests FROM usage_buckets"), 1);
    s = store_status(st);
    cr_assert_eq(s.spooled_rows, 0);
    cr_assert_eq(s.spool_bytes, 0);
    cr_assert_eq(st->ops->tend_at(st), INT64_MAX, "all written");
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 5);
    st->ops->close(st);
}

/* Submits rows first .. first + n - 1, one a millisecond: a steady load. Returns how many the queue refused.
 */
static uint64_t
submit_one_a_ms(sl_recorder_t *rec, uint64_t first, uint64_t n)
{
    uint64_t refused = 0;
    for (uint64_t id = first; id < first + n; id++) {
        if (!sl_recorder_submit(rec, make_row(id, 1000, 1)))
            refused++;
        usleep(1000);
    }
    return refused;
}

/*
 * cluster.md: the data plane never waits on the DB, and rows are dropped only past the spool's cap. A
 * write stuck behind a lock is a stalled server: while it waits, the rows that keep coming are set aside
 * in the spool instead of filling the queue, and all arrive once the server moves again.
 */
Test(recorder, rows_that_come_while_a_write_waits_on_a_stalled_server_are_spooled_not_refused)
{
    sl_recorder_t *rec = open_with(&(sl_recorder_options_t){.queue_capacity = 100, .batch_max = 16});
    cr_assert(sl_recorder_submit(rec, make_row(0, 1000, 1)));
    sl_recorder_flush(rec);
    PQclear(pg_query("BEGIN"));
    PQclear(pg_query("LOCK TABLE requests IN ACCESS EXCLUSIVE MODE"));
    uint64_t refused = submit_one_a_ms(rec, 1, 300);
    sl_store_status_t st;
    status_of(rec, &st);
    PQclear(pg_query("ROLLBACK"));
    sl_recorder_flush(rec);
    sl_recorder_stats_t s = stats_of(rec);
    sl_recorder_close(rec);
    cr_assert_eq(refused, 0, "the queue refused %llu rows", (unsigned long long)refused);
    cr_assert_gt(st.spooled_rows, 100, "more rows came than the queue holds: %llu spooled",
                 (unsigned long long)st.spooled_rows);
    cr_assert_not(st.degraded, "a stalled server is not yet a lost one: %s", st.reason);
    cr_assert_eq(s.dropped, 0);
    cr_assert_eq(s.written, 301);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), 301);
}

/*
 * The same rule while the writer connects: a PostgreSQL of its own, stopped (SIGSTOP), takes the
 * connection in the kernel's backlog and does not answer it. Once it runs again, every row arrives.
 */
Test(recorder, rows_that_come_while_the_writer_connects_to_a_stopped_server_are_spooled_not_refused)
{
    static pg_server_t stopped;
    cr_assert(pg_start(&stopped), "a second PostgreSQL did not start");
    cr_assert_eq(kill(stopped.pid, SIGSTOP), 0);
    sl_store_where_t w = where;
    w.url = stopped.url;
    sl_recorder_t *rec = sl_recorder_open(
        &w, &(sl_recorder_options_t){.queue_capacity = 100, .batch_max = 16}, err, sizeof err);
    uint64_t refused = rec != NULL ? submit_one_a_ms(rec, 1, 300) : 0;
    sl_store_status_t st = {0};
    if (rec != NULL)
        sl_recorder_status(rec, &st);
    /* Running again, and stopped for good, before any assertion: a failed one leaves no server behind. */
    kill(stopped.pid, SIGCONT);
    sl_recorder_stats_t s = {0};
    sl_store_status_t after = {0};
    long long stored = -1;
    if (rec != NULL) {
        sl_recorder_flush(rec);
        s = stats_of(rec);
        sl_recorder_status(rec, &after);
        sl_recorder_close(rec);
        stored = pg_int(&stopped, "SELECT count(*) FROM requests");
    }
    pg_stop(&stopped);
    cr_assert_not_null(rec, "%s", err);
    cr_assert_eq(st.kind, SL_STORE_POSTGRES);
    cr_assert_eq(refused, 0, "the queue refused %llu rows", (unsigned long long)refused);
    cr_assert_gt(st.spooled_rows, 100, "more rows came than the queue holds: %llu spooled",
                 (unsigned long long)st.spooled_rows);
    cr_assert_not(st.degraded, "a server that does not answer yet is not yet a lost one: %s", st.reason);
    cr_assert_eq(s.dropped, 0);
    cr_assert_eq(after.spooled_rows, 0, "the spool is written once the server runs");
    cr_assert_eq(stored, 300);
}

Test(recorder, history_of_an_unreachable_database_is_a_clear_error)
{
    sl_store_where_t w = where;
    w.url = "postgres://sluice:hunter2-secret@127.0.0.1:1/sluice";
    sl_proto_history_row_t *rows = NULL;
    size_t n = 0;
    char *cursor = NULL;
    err[0] = '\0';
    cr_assert_eq(
        sl_recorder_history(&w, &(sl_recorder_history_query_t){0}, &rows, &n, &cursor, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot connect") != NULL, "%s", err);
    cr_assert_null(strstr(err, "hunter2"), "%s", err);
    cr_assert_null(rows);
    buckets_seen_t seen = {0};
    cr_assert_eq(sl_recorder_load_usage(&w, 0, on_bucket, &seen, err, sizeof err), -1);
    cr_assert_eq(seen.n, 0);
}

#else

/* ---- the rules, pure ------------------------------------------------------------------ */

Test(rules, path_strip_key_removes_only_the_key_parameter)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"/v1beta/models/g:generateContent?key=AIzaX", "/v1beta/models/g:generateContent"},
        {"/m?alt=sse&key=abc", "/m?alt=sse"},
        {"/m?key=abc&alt=sse", "/m?alt=sse"},
        {"/m?a=1&key=abc&b=2", "/m?a=1&b=2"},
        {"/m?key", "/m"},
        {"/m?key=a&key=b", "/m"},
        {"/m?keys=1&monkey=2&key_id=3", "/m?keys=1&monkey=2&key_id=3"},
        {"/m?a=1&&b=2", "/m?a=1&b=2"},
        {"/m?", "/m"},
        {"/v1/messages", "/v1/messages"},
        {"?key=x", ""},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_strbuf_t out = {0};
        sl_path_strip_key(cases[i].in, strlen(cases[i].in), &out);
        char *buf = sl_strbuf_finish(&out);
        cr_assert_str_eq(buf, cases[i].out, "'%s' -> '%s'", cases[i].in, buf);
        free(buf);
    }
}

Test(rules, plan_batches_rows_flushes_usage_and_sweeps_when_due_and_says_when_it_is_behind)
{
    const int64_t NEVER = INT64_MAX;
    const struct {
        const char *name;
        sl_recorder_state_t s;
        int64_t now;
        sl_recorder_plan_t want;
    } cases[] = {
        {"idle: sleep until the sweep", {.tend_at_ms = NEVER, .sweep_at_ms = 5000}, 1000, {.wake_ms = 5000}},
        {"a young row waits for its batch",
         {.tend_at_ms = NEVER, .queued = 3, .capacity = 100, .oldest_ms = 1000, .sweep_at_ms = 9000},
         1020,
         {.wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"a row that waited the delay is written",
         {.tend_at_ms = NEVER, .queued = 3, .capacity = 100, .oldest_ms = 1000, .sweep_at_ms = 9000},
         1000 + SL_RECORDER_BATCH_DELAY_MS,
         {.write_rows = 3, .wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"a full batch is written at once, one batch at a time",
         {.tend_at_ms = NEVER, .queued = 600, .capacity = 2000, .oldest_ms = 1000, .sweep_at_ms = 9000},
         1000,
         {.write_rows = 512, .wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"a queue half full: not yet behind",
         {.tend_at_ms = NEVER, .queued = 1000, .capacity = 2000, .oldest_ms = 1000, .sweep_at_ms = 9000},
         1000,
         {.write_rows = 512, .wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"a queue more than half full: behind",
         {.tend_at_ms = NEVER, .queued = 1001, .capacity = 2000, .oldest_ms = 1000, .sweep_at_ms = 9000},
         1000,
         {.write_rows = 512, .behind = true, .wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"closing: the last rows go to the store, never behind",
         {.tend_at_ms = NEVER,
          .queued = 2000,
          .capacity = 2000,
          .oldest_ms = 1000,
          .sweep_at_ms = 9000,
          .closing = true,
          .flush_wanted = true},
         1000,
         {.write_rows = 512, .wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"a flush writes young rows and usage now",
         {.tend_at_ms = NEVER,
          .queued = 2,
          .capacity = 100,
          .oldest_ms = 1000,
          .usage_pending = true,
          .usage_flushed_ms = 900,
          .sweep_at_ms = 9000,
          .flush_wanted = true},
         1001,
         {.write_rows = 2, .flush_usage = true, .wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"usage waits for its second",
         {.tend_at_ms = NEVER, .usage_pending = true, .usage_flushed_ms = 1000, .sweep_at_ms = 9000},
         1999,
         {.wake_ms = 1000 + SL_RECORDER_USAGE_FLUSH_MS}},
        {"usage flushed after its second",
         {.tend_at_ms = NEVER, .usage_pending = true, .usage_flushed_ms = 1000, .sweep_at_ms = 9000},
         2000,
         {.flush_usage = true, .wake_ms = 2000}},
        {"no usage, no flush however old",
         {.tend_at_ms = NEVER, .usage_flushed_ms = 0, .sweep_at_ms = 90000},
         50000,
         {.wake_ms = 90000}},
        {"sweep when due",
         {.tend_at_ms = NEVER, .sweep_at_ms = 5000},
         5000,
         {.sweep = true, .wake_ms = 5000}},
        {"the store's own work when it asks for it",
         {.tend_at_ms = 3000, .sweep_at_ms = 9000},
         3000,
         {.tend = true, .wake_ms = 3000}},
        {"the store's own work waits for its time",
         {.tend_at_ms = 3000, .sweep_at_ms = 9000},
         2000,
         {.wake_ms = 3000}},
        {"no sweep while closing",
         {.tend_at_ms = NEVER, .sweep_at_ms = 5000, .closing = true, .flush_wanted = true},
         6000,
         {.wake_ms = INT64_MAX}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_recorder_plan_t got = sl_recorder_plan(&cases[i].s, cases[i].now, 512);
        cr_assert_eq(got.write_rows, cases[i].want.write_rows, "%s: write %zu", cases[i].name,
                     got.write_rows);
        cr_assert_eq(got.behind, cases[i].want.behind, "%s: behind", cases[i].name);
        cr_assert_eq(got.flush_usage, cases[i].want.flush_usage, "%s: usage", cases[i].name);
        cr_assert_eq(got.sweep, cases[i].want.sweep, "%s: sweep", cases[i].name);
        cr_assert_eq(got.tend, cases[i].want.tend, "%s: tend", cases[i].name);
        cr_assert_eq(got.wake_ms, cases[i].want.wake_ms, "%s: wake %lld", cases[i].name,
                     (long long)got.wake_ms);
    }
}

Test(rules, the_writer_is_behind_once_its_queue_is_more_than_half_full)
{
    cr_assert_not(sl_recorder_behind(0, 100));
    cr_assert_not(sl_recorder_behind(50, 100));
    cr_assert(sl_recorder_behind(51, 100));
    cr_assert(sl_recorder_behind(100, 100));
    cr_assert_not(sl_recorder_behind(16384, 32768));
    cr_assert(sl_recorder_behind(16385, 32768));
}

Test(rules, sweep_runs_hourly_goes_on_after_a_full_chunk_and_retries_a_failure_soon)
{
    cr_assert_eq(sl_recorder_sweep_next(1000, SL_SWEEP_DONE), 1000 + 3600000);
    cr_assert_eq(sl_recorder_sweep_next(1000, SL_SWEEP_MORE), 1000);
    cr_assert_eq(sl_recorder_sweep_next(1000, SL_SWEEP_FAILED), 1000 + 60000);
}

Test(rules, retention_cutoffs_keep_buckets_at_least_40_days)
{
    const int64_t now = 1800000000000;
    cr_assert_eq(sl_retention_cutoff_ms(now, 30), now - 30 * DAY_MS);
    cr_assert_eq(sl_retention_cutoff_ms(now, 1), now - DAY_MS);
    cr_assert_eq(sl_bucket_cutoff_minute(now, 1), (now - 40 * DAY_MS) / 60000);
    cr_assert_eq(sl_bucket_cutoff_minute(now, 30), (now - 40 * DAY_MS) / 60000);
    cr_assert_eq(sl_bucket_cutoff_minute(now, 90), (now - 90 * DAY_MS) / 60000);
}

Test(rules, row_msg_copies_code_args_and_text)
{
    sl_msg_t m = sl_msg_make(SL_CODE_CONFIG_FILE_UNREADABLE, "path", "a.yaml", "reason", "gone", NULL);
    sl_row_msg_t r = sl_row_msg_from(&m);
    sl_msg_free(&m);
    cr_assert_str_eq(r.code, "config.file_unreadable");
    cr_assert_str_eq(r.text, "cannot read a.yaml: gone");
    cr_assert_eq(r.nargs, 2);
    cr_assert_str_eq(r.args[0].name, "path");
    cr_assert_str_eq(r.args[0].value, "a.yaml");
    sl_row_msg_clear(&r);
    cr_assert_null(r.code);
    cr_assert_eq(r.nargs, 0);
}

#endif
