/*
 * The SQLite store (store.h): one file, WAL, one writer connection of the
 * recorder's thread, read-only connections for the readers.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/text.h"
#include "core/xalloc.h"

#define MINUTE_MS 60000LL

/* ---- the schema -------------------------------------------------------------- */

/*
 * migrations[v] takes a DB from user_version v to v + 1. `row` is the DB's own
 * key: request ids restart with the process, so they may repeat across runs.
 */
static const char *const migrations[SL_RECORDER_SCHEMA_VERSION] = {
    "CREATE TABLE requests ("
    "  row INTEGER PRIMARY KEY,"
    "  id INTEGER NOT NULL,"
    "  started_at_ms INTEGER NOT NULL,"
    "  client TEXT NOT NULL,"
    "  dialect TEXT NOT NULL,"
    "  model TEXT NOT NULL,"
    "  provider TEXT,"
    "  path TEXT NOT NULL,"
    "  status INTEGER NOT NULL,"
    "  outcome TEXT NOT NULL,"
    "  error_code TEXT, error_text TEXT, error_args TEXT,"
    "  duration_ms INTEGER NOT NULL,"
    "  ttfb_ms INTEGER, ttft_ms INTEGER,"
    "  usage_input INTEGER, usage_output INTEGER, usage_cache_read INTEGER, usage_cache_write INTEGER,"
    "  usage_estimated INTEGER,"
    "  cost_micros INTEGER);"
    "CREATE INDEX requests_by_time ON requests (started_at_ms, row);"
    "CREATE TABLE attempts ("
    "  request_row INTEGER NOT NULL,"
    "  n INTEGER NOT NULL,"
    "  provider TEXT NOT NULL,"
    "  model TEXT,"
    "  outcome TEXT NOT NULL,"
    "  status INTEGER,"
    "  error_code TEXT, error_text TEXT, error_args TEXT,"
    "  ms INTEGER NOT NULL,"
    "  pause_ms INTEGER, retry INTEGER, backoff_ms INTEGER,"
    "  skipped TEXT,"
    "  PRIMARY KEY (request_row, n)) WITHOUT ROWID;"
    "CREATE TABLE usage_buckets ("
    "  kind TEXT NOT NULL,"
    "  name TEXT NOT NULL,"
    "  minute INTEGER NOT NULL,"
    "  requests INTEGER NOT NULL,"
    "  tokens INTEGER NOT NULL,"
    "  cost_micros INTEGER NOT NULL,"
    "  PRIMARY KEY (kind, name, minute)) WITHOUT ROWID;"
    "CREATE INDEX usage_by_minute ON usage_buckets (minute);",
    /* 2: why a request went on as it did after a failed hop (core/next_step.h). */
    "ALTER TABLE attempts ADD COLUMN reason TEXT;",
    /* 3: the hop was a first-token hedge (behaviour.md §4): 1, else NULL. */
    "ALTER TABLE attempts ADD COLUMN hedge INTEGER;",
    /*
     * 4: a request served by its first and only hop keeps that hop in its own
     * row (sl_store_lone_hop): one insert per request instead of two. Readers
     * see every attempt in the view `attempts`, as before.
     */
    "ALTER TABLE attempts RENAME TO attempt_rows;"
    "ALTER TABLE requests ADD COLUMN lone_hop_ms INTEGER;"
    "ALTER TABLE requests ADD COLUMN lone_hop_model TEXT;"
    "ALTER TABLE requests ADD COLUMN lone_hop_pause_ms INTEGER;"
    "CREATE VIEW attempts AS"
    " SELECT request_row, n, provider, model, outcome, status, error_code, error_text, error_args, ms,"
    "  pause_ms, retry, backoff_ms, skipped, reason, hedge FROM attempt_rows"
    " UNION ALL"
    " SELECT row, 0, provider, lone_hop_model, 'served', status, NULL, NULL, NULL, lone_hop_ms,"
    "  lone_hop_pause_ms, NULL, NULL, NULL, NULL, NULL FROM requests WHERE lone_hop_ms IS NOT NULL;",
};

static bool
exec_sql(sqlite3 *db, const char *sql, const char *path, char *err, size_t err_size)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK)
        return true;
    sl_text_reason(err, err_size, "request DB %s: %s", path, msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return false;
}

/* Returns the DB's user_version, or -1 with a reason in err. */
static int
read_user_version(sqlite3 *db, const char *path, char *err, size_t err_size)
{
    sqlite3_stmt *st = NULL;
    int version = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    else
        sl_text_reason(err, err_size, "request DB %s is not readable: %s", path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return version;
}

static bool
refuse_newer(int version, const char *path, char *err, size_t err_size)
{
    if (version <= SL_RECORDER_SCHEMA_VERSION)
        return false;
    sl_text_reason(err, err_size,
                   "request DB %s has schema version %d, newer than the version %d this sluice reads; "
                   "refusing to touch it",
                   path, version, SL_RECORDER_SCHEMA_VERSION);
    return true;
}

/* One transaction: a crash mid-way leaves the old version, never half a schema. */
static bool
migrate(sqlite3 *db, const char *path, char *err, size_t err_size)
{
    if (!exec_sql(db, "BEGIN IMMEDIATE", path, err, err_size))
        return false;
    int version = read_user_version(db, path, err, err_size);
    bool ok = version >= 0 && !refuse_newer(version, path, err, err_size);
    for (int v = version; ok && v < SL_RECORDER_SCHEMA_VERSION; v++)
        ok = exec_sql(db, migrations[v], path, err, err_size);
    if (ok && version < SL_RECORDER_SCHEMA_VERSION) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", SL_RECORDER_SCHEMA_VERSION);
        ok = exec_sql(db, sql, path, err, err_size);
    }
    if (ok)
        return exec_sql(db, "COMMIT", path, err, err_size);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return false;
}

/*
 * SQLite would create the file with the process umask; the DB names clients
 * and models, so it is private from the first byte. The WAL and shm files
 * take the main file's mode; old ones are tightened as well.
 */
static bool
create_private(const char *path, char *err, size_t err_size)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        sl_text_reason(err, err_size, "cannot create request DB %s: %s", path, strerror(errno));
        return false;
    }
    bool ok = fchmod(fd, 0600) == 0;
    if (!ok)
        sl_text_reason(err, err_size, "cannot make request DB %s private: %s", path, strerror(errno));
    close(fd);
    static const char *const sidecars[] = {"-wal", "-shm"};
    for (size_t i = 0; ok && i < sizeof sidecars / sizeof sidecars[0]; i++) {
        char side[4096];
        if (snprintf(side, sizeof side, "%s%s", path, sidecars[i]) < (int)sizeof side &&
            chmod(side, 0600) != 0 && errno != ENOENT) {
            sl_text_reason(err, err_size, "cannot make %s private: %s", side, strerror(errno));
            ok = false;
        }
    }
    return ok;
}

/*
 * A batch's rows go ROWS_PER_INSERT to one INSERT, and their attempts too:
 * every run of a statement has a fixed cost, which 16 rows pay once. The
 * writer's CPU per request fell from 3.1 to 2.7 µs at 30 000 requests a second.
 */
#define ROWS_PER_INSERT 16
#define REQUEST_COLUMNS 25
#define ATTEMPT_COLUMNS 16

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_LAST_ROW,
    ST_INSERT_REQUEST,
    ST_INSERT_REQUESTS, /* ROWS_PER_INSERT rows */
    ST_INSERT_ATTEMPT,
    ST_INSERT_ATTEMPTS, /* ROWS_PER_INSERT rows */
    ST_UPSERT_BUCKET,
    ST_SWEEP_ATTEMPTS,
    ST_SWEEP_REQUESTS,
    ST_SWEEP_BUCKETS,
    ST_COUNT
};

static const char insert_request_head[] =
    "INSERT INTO requests (row, id, started_at_ms, client, dialect, model, provider, path, status,"
    " outcome, error_code, error_text, error_args, duration_ms, ttfb_ms, ttft_ms,"
    " usage_input, usage_output, usage_cache_read, usage_cache_write, usage_estimated,"
    " cost_micros, lone_hop_ms, lone_hop_model, lone_hop_pause_ms) VALUES ";
static const char insert_attempt_head[] =
    "INSERT INTO attempt_rows (request_row, n, provider, model, outcome, status, error_code,"
    " error_text, error_args, ms, pause_ms, retry, backoff_ms, skipped, reason, hedge) VALUES ";

/* NULL for the inserts, whose text insert_sql writes. */
static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    /* The writer numbers a batch's rows itself, so that their attempts can name them before they are in. */
    [ST_LAST_ROW] = "SELECT coalesce(max(row), 0) FROM requests",
    [ST_UPSERT_BUCKET] = "INSERT INTO usage_buckets (kind, name, minute, requests, tokens, cost_micros)"
                         " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (kind, name, minute) DO UPDATE SET"
                         " requests = requests + excluded.requests, tokens = tokens + excluded.tokens,"
                         " cost_micros = cost_micros + excluded.cost_micros",
    /* The same subquery twice in one transaction selects the same chunk for both deletes. */
    [ST_SWEEP_ATTEMPTS] = "DELETE FROM attempt_rows WHERE request_row IN (SELECT row FROM requests"
                          " WHERE started_at_ms < ?1 ORDER BY started_at_ms, row LIMIT ?2)",
    [ST_SWEEP_REQUESTS] = "DELETE FROM requests WHERE row IN (SELECT row FROM requests"
                          " WHERE started_at_ms < ?1 ORDER BY started_at_ms, row LIMIT ?2)",
    [ST_SWEEP_BUCKETS] = "DELETE FROM usage_buckets WHERE (kind, name, minute) IN (SELECT kind, name, minute"
                         " FROM usage_buckets WHERE minute < ?1 LIMIT ?2)",
};

/* The INSERT of statement i: its head, then `rows` groups of `columns` anonymous parameters. */
static char *
insert_sql(int i)
{
    bool requests = i == ST_INSERT_REQUEST || i == ST_INSERT_REQUESTS;
    const char *head = requests ? insert_request_head : insert_attempt_head;
    int columns = requests ? REQUEST_COLUMNS : ATTEMPT_COLUMNS;
    int rows = i == ST_INSERT_REQUESTS || i == ST_INSERT_ATTEMPTS ? ROWS_PER_INSERT : 1;
    size_t size = strlen(head) + (size_t)rows * ((size_t)columns * 2 + 2) + 1;
    char *sql = sl_xmalloc(size);
    char *p = sql + sprintf(sql, "%s", head);
    for (int r = 0; r < rows; r++) {
        *p++ = r > 0 ? ',' : '(';
        if (r > 0)
            *p++ = '(';
        for (int c = 0; c < columns; c++) {
            *p++ = '?';
            *p++ = c + 1 < columns ? ',' : ')';
        }
    }
    *p = '\0';
    return sql;
}

typedef struct {
    sl_store_t base;
    sqlite3 *db; /* the writer thread's alone once it runs */
    sqlite3_stmt *stmts[ST_COUNT];
} sqlite_store_t;

/* Steps a statement to its end and resets it; returns SQLITE_OK or the failure. */
static int
run(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static void
bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s != NULL)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void
bind_opt(sqlite3_stmt *st, int i, int64_t v, int64_t absent)
{
    if (v != absent)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/* Binds code, text and args at i, i+1, i+2; the statement owns (and frees) the args text. */
static void
bind_msg(sqlite3_stmt *st, int i, const sl_row_msg_t *m)
{
    char *args = sl_store_args_json(m);
    bind_text(st, i, m->code);
    bind_text(st, i + 1, m->code != NULL ? m->text : NULL);
    if (args != NULL)
        sqlite3_bind_text(st, i + 2, args, -1, free);
    else
        sqlite3_bind_null(st, i + 2);
}

static const char *
or_empty(const char *s)
{
    return s != NULL ? s : "";
}

/* One attempt of a batch, with the row of its request. */
typedef struct {
    sqlite3_int64 request_row;
    size_t n;
    const sl_attempt_row_t *a;
} attempt_ref_t;

/* Binds attempt ref as the row whose parameters start after `at`. */
static void
bind_attempt(sqlite3_stmt *st, int at, const attempt_ref_t *ref)
{
    const sl_attempt_row_t *a = ref->a;
    sqlite3_bind_int64(st, at + 1, ref->request_row);
    sqlite3_bind_int64(st, at + 2, (sqlite3_int64)ref->n);
    bind_text(st, at + 3, or_empty(a->provider));
    bind_text(st, at + 4, a->model);
    bind_text(st, at + 5, sl_hop_outcome_slug(a->outcome));
    bind_opt(st, at + 6, a->status, 0);
    bind_msg(st, at + 7, &a->error);
    sqlite3_bind_int64(st, at + 10, a->ms);
    bind_opt(st, at + 11, a->pause_ms, SL_ROW_ABSENT);
    bind_opt(st, at + 12, a->retry, 0);
    bind_opt(st, at + 13, a->backoff_ms, SL_ROW_ABSENT);
    bind_text(st, at + 14, a->skipped != SL_SKIP_NONE ? sl_skip_slug(a->skipped) : NULL);
    bind_text(st, at + 15, a->has_reason ? sl_step_reason_slug(a->reason) : NULL);
    bind_opt(st, at + 16, a->hedge ? 1 : 0, 0);
}

/* Binds request r, stored as `row`, as the row whose parameters start after `at`. */
static void
bind_request(sqlite3_stmt *st, int at, sqlite3_int64 row, const sl_request_row_t *r)
{
    sqlite3_bind_int64(st, at + 1, row);
    sqlite3_bind_int64(st, at + 2, (sqlite3_int64)r->id);
    sqlite3_bind_int64(st, at + 3, r->started_at_ms);
    bind_text(st, at + 4, or_empty(r->client));
    bind_text(st, at + 5, sl_store_dialect_name(r->dialect));
    bind_text(st, at + 6, or_empty(r->model));
    bind_text(st, at + 7, r->provider);
    bind_text(st, at + 8, or_empty(r->path));
    sqlite3_bind_int64(st, at + 9, r->status);
    bind_text(st, at + 10, sl_row_outcome_slug(r->outcome));
    bind_msg(st, at + 11, &r->error);
    sqlite3_bind_int64(st, at + 14, r->duration_ms);
    bind_opt(st, at + 15, r->ttfb_ms, SL_ROW_ABSENT);
    bind_opt(st, at + 16, r->ttft_ms, SL_ROW_ABSENT);
    const sl_row_usage_t *u = &r->usage;
    const int64_t usage[] = {(int64_t)u->input, (int64_t)u->output, (int64_t)u->cache_read,
                             (int64_t)u->cache_write, u->estimated};
    for (int k = 0; k < 5; k++) {
        if (r->has_usage)
            sqlite3_bind_int64(st, at + 17 + k, usage[k]);
        else
            sqlite3_bind_null(st, at + 17 + k);
    }
    bind_opt(st, at + 22, r->cost_micros, SL_ROW_ABSENT);
    if (sl_store_lone_hop(r)) {
        const sl_attempt_row_t *a = &r->attempts[0];
        sqlite3_bind_int64(st, at + 23, a->ms);
        bind_text(st, at + 24, a->model);
        bind_opt(st, at + 25, a->pause_ms, SL_ROW_ABSENT);
    } else {
        for (int k = 23; k <= 25; k++)
            sqlite3_bind_null(st, at + k);
    }
}

/* The rows, numbered from first_row on: ROWS_PER_INSERT to a statement, the rest one by one. */
static int
insert_requests(sqlite_store_t *rec, sl_request_row_t *const *rows, size_t n, sqlite3_int64 first_row)
{
    int rc = SQLITE_OK;
    for (size_t i = 0; rc == SQLITE_OK && i < n;) {
        size_t k = n - i >= ROWS_PER_INSERT ? ROWS_PER_INSERT : 1;
        sqlite3_stmt *st = rec->stmts[k > 1 ? ST_INSERT_REQUESTS : ST_INSERT_REQUEST];
        for (size_t j = 0; j < k; j++, i++)
            bind_request(st, (int)j * REQUEST_COLUMNS, first_row + (sqlite3_int64)i, rows[i]);
        rc = run(st);
    }
    return rc;
}

static int
insert_attempt_refs(sqlite_store_t *rec, const attempt_ref_t *refs, size_t n)
{
    sqlite3_stmt *st = rec->stmts[n > 1 ? ST_INSERT_ATTEMPTS : ST_INSERT_ATTEMPT];
    for (size_t j = 0; j < n; j++)
        bind_attempt(st, (int)j * ATTEMPT_COLUMNS, &refs[j]);
    return run(st);
}

/* Every row's attempts, in ROWS_PER_INSERT to a statement as well. */
static int
insert_attempts(sqlite_store_t *rec, sl_request_row_t *const *rows, size_t n, sqlite3_int64 first_row)
{
    attempt_ref_t chunk[ROWS_PER_INSERT];
    size_t held = 0;
    int rc = SQLITE_OK;
    for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
        if (sl_store_lone_hop(rows[i]))
            continue; /* in its request's row */
        for (size_t k = 0; rc == SQLITE_OK && k < rows[i]->n_attempts; k++) {
            chunk[held++] = (attempt_ref_t){first_row + (sqlite3_int64)i, k, &rows[i]->attempts[k]};
            if (held == ROWS_PER_INSERT) {
                rc = insert_attempt_refs(rec, chunk, held);
                held = 0;
            }
        }
    }
    for (size_t j = 0; rc == SQLITE_OK && j < held; j++)
        rc = insert_attempt_refs(rec, &chunk[j], 1);
    return rc;
}

static int
last_row(sqlite_store_t *rec, sqlite3_int64 *row)
{
    sqlite3_stmt *st = rec->stmts[ST_LAST_ROW];
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *row = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* A failed statement may already have rolled the transaction back; only then is ROLLBACK an error. */
static void
rollback(sqlite_store_t *rec)
{
    if (!sqlite3_get_autocommit(rec->db))
        run(rec->stmts[ST_ROLLBACK]);
}

static int
commit_or_rollback(sqlite_store_t *rec, int rc)
{
    if (rc == SQLITE_OK)
        rc = run(rec->stmts[ST_COMMIT]);
    if (rc != SQLITE_OK)
        rollback(rec);
    return rc;
}

/* All rows or none: the caller counts the whole batch as written or as dropped. */
static int
write_batch(sqlite_store_t *rec, sl_request_row_t *const *rows, size_t n)
{
    int rc = run(rec->stmts[ST_BEGIN]);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_int64 last = 0;
    rc = last_row(rec, &last);
    if (rc == SQLITE_OK)
        rc = insert_requests(rec, rows, n, last + 1);
    if (rc == SQLITE_OK)
        rc = insert_attempts(rec, rows, n, last + 1);
    return commit_or_rollback(rec, rc);
}

static int
write_buckets(sqlite_store_t *rec, const sl_usage_delta_t *d, size_t n)
{
    int rc = run(rec->stmts[ST_BEGIN]);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_stmt *st = rec->stmts[ST_UPSERT_BUCKET];
    for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
        bind_text(st, 1, sl_store_bucket_kind_name(d[i].kind));
        bind_text(st, 2, d[i].name);
        sqlite3_bind_int64(st, 3, d[i].minute);
        sqlite3_bind_int64(st, 4, d[i].requests);
        sqlite3_bind_int64(st, 5, d[i].tokens);
        sqlite3_bind_int64(st, 6, d[i].cost_micros);
        rc = run(st);
    }
    return commit_or_rollback(rec, rc);
}

static int
sweep_delete(sqlite_store_t *rec, int stmt, int64_t cutoff, int *changed)
{
    sqlite3_stmt *st = rec->stmts[stmt];
    sqlite3_bind_int64(st, 1, cutoff);
    sqlite3_bind_int(st, 2, SL_RECORDER_SWEEP_CHUNK);
    int rc = run(st);
    *changed = sqlite3_changes(rec->db);
    return rc;
}

static sl_sweep_result_t
sweep_step(sqlite_store_t *rec, int64_t wall_ms, uint32_t retention_days, int *swept, int *rc_out)
{
    int64_t cutoff = sl_retention_cutoff_ms(wall_ms, retention_days);
    int attempts = 0, requests = 0, buckets = 0;
    int rc = run(rec->stmts[ST_BEGIN]);
    if (rc == SQLITE_OK) {
        rc = sweep_delete(rec, ST_SWEEP_ATTEMPTS, cutoff, &attempts);
        if (rc == SQLITE_OK)
            rc = sweep_delete(rec, ST_SWEEP_REQUESTS, cutoff, &requests);
        if (rc == SQLITE_OK)
            rc = sweep_delete(rec, ST_SWEEP_BUCKETS, sl_bucket_cutoff_minute(wall_ms, retention_days),
                              &buckets);
        rc = commit_or_rollback(rec, rc);
    }
    *rc_out = rc;
    *swept = rc == SQLITE_OK ? requests : 0;
    if (rc != SQLITE_OK)
        return SL_SWEEP_FAILED;
    return requests == SL_RECORDER_SWEEP_CHUNK || buckets == SL_RECORDER_SWEEP_CHUNK ? SL_SWEEP_MORE
                                                                                     : SL_SWEEP_DONE;
}

static bool
configure(sqlite3 *db, const char *path, const sl_recorder_options_t *o, char *err, size_t err_size)
{
    sqlite3_stmt *st = NULL;
    bool wal = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL) == SQLITE_OK &&
               sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL &&
               strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0;
    sqlite3_finalize(st);
    if (!wal) {
        sl_text_reason(err, err_size, "request DB %s: cannot switch to WAL journal: %s", path,
                       sqlite3_errmsg(db));
        return false;
    }
    if (!exec_sql(db, "PRAGMA synchronous = NORMAL", path, err, err_size))
        return false;
    if (o->max_db_bytes == 0)
        return true;
    uint64_t page_size = 4096;
    if (sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        page_size = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    /* 0 would only query the limit; SQLite raises a limit below the current size to that size. */
    uint64_t pages = o->max_db_bytes / page_size > 0 ? o->max_db_bytes / page_size : 1;
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %llu", (unsigned long long)pages);
    return exec_sql(db, sql, path, err, err_size);
}

/* ---- the store's operations ------------------------------------------------------------- */

static void
say(char *why, size_t why_size, int rc)
{
    snprintf(why, why_size, "%s", sqlite3_errstr(rc));
}

static bool
sqlite_write_rows(sl_store_t *base, sl_request_row_t *const *rows, size_t n, char *why, size_t why_size)
{
    int rc = write_batch((sqlite_store_t *)base, rows, n);
    if (rc != SQLITE_OK)
        say(why, why_size, rc);
    return rc == SQLITE_OK;
}

static bool
sqlite_write_usage(sl_store_t *base, const sl_usage_delta_t *d, size_t n, uint64_t seq, char *why,
                   size_t why_size)
{
    /* One writer, and a batch is committed or not: a flush is never seen twice here. */
    (void)seq;
    int rc = write_buckets((sqlite_store_t *)base, d, n);
    if (rc != SQLITE_OK)
        say(why, why_size, rc);
    return rc == SQLITE_OK;
}

static sl_sweep_result_t
sqlite_sweep(sl_store_t *base, int64_t wall_ms, uint32_t retention_days, uint64_t *swept, char *why,
             size_t why_size)
{
    int n = 0, rc = SQLITE_OK;
    sl_sweep_result_t result = sweep_step((sqlite_store_t *)base, wall_ms, retention_days, &n, &rc);
    *swept = (uint64_t)n;
    if (rc != SQLITE_OK)
        say(why, why_size, rc);
    return result;
}

static void
sqlite_status(sl_store_t *base, sl_store_status_t *out)
{
    (void)base;
    *out = (sl_store_status_t){.kind = SL_STORE_SQLITE};
}

static void
close_db(sqlite_store_t *rec)
{
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(rec->stmts[i]);
    sqlite3_close(rec->db);
}

static void
sqlite_close(sl_store_t *base)
{
    sqlite_store_t *rec = (sqlite_store_t *)base;
    close_db(rec);
    free(rec);
}

static const sl_store_ops_t sqlite_ops = {
    .write_rows = sqlite_write_rows,
    .write_usage = sqlite_write_usage,
    .sweep = sqlite_sweep,
    .status = sqlite_status,
    .close = sqlite_close,
};

static bool
prepare_all(sqlite_store_t *rec, const char *path, char *err, size_t err_size)
{
    for (int i = 0; i < ST_COUNT; i++) {
        char *built = stmt_sql[i] == NULL ? insert_sql(i) : NULL;
        int rc = sqlite3_prepare_v3(rec->db, built != NULL ? built : stmt_sql[i], -1,
                                    SQLITE_PREPARE_PERSISTENT, &rec->stmts[i], NULL);
        free(built);
        if (rc != SQLITE_OK) {
            sl_text_reason(err, err_size, "request DB %s: %s", path, sqlite3_errmsg(rec->db));
            return false;
        }
    }
    return true;
}

/*
 * SQLite counts every allocation under one global mutex unless told not to
 * (SQLITE_CONFIG_MEMSTATUS); nothing here reads the counts, and the writer
 * allocates for every bound value. Only possible before SQLite initialises:
 * if something opened a database first, it stays on.
 */
static void
no_memory_counts(void)
{
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

sl_store_t *
sl_store_sqlite_open(const char *path, const sl_recorder_options_t *o, char *err, size_t err_size)
{
    static pthread_once_t configured = PTHREAD_ONCE_INIT;
    pthread_once(&configured, no_memory_counts);
    if (path == NULL || *path == '\0') {
        sl_text_reason(err, err_size, "request DB: no path given");
        return NULL;
    }
    if (!create_private(path, err, err_size))
        return NULL;
    sqlite3 *db = NULL;
    /* One thread at a time uses it (opened here, then only the writer): SQLite need not lock per call. */
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sl_text_reason(err, err_size, "cannot open request DB %s: %s", path,
                       db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return NULL;
    }
    /* A newer schema is refused before WAL or any pragma writes to the file. */
    sqlite3_busy_timeout(db, (int)o->busy_timeout_ms);
    int version = read_user_version(db, path, err, err_size);
    if (version < 0 || refuse_newer(version, path, err, err_size) || !configure(db, path, o, err, err_size) ||
        !migrate(db, path, err, err_size)) {
        sqlite3_close(db);
        return NULL;
    }
    sqlite_store_t *rec = sl_xcalloc(1, sizeof *rec);
    rec->base.ops = &sqlite_ops;
    rec->db = db;
    if (!prepare_all(rec, path, err, err_size)) {
        sqlite_close(&rec->base);
        return NULL;
    }
    return &rec->base;
}

/* ---- reading back -------------------------------------------------------------- */

/*
 * A read-only connection of the caller's own. With empty non-NULL, a file that
 * does not exist, or that the recorder has created but not yet migrated
 * (user_version 0), returns NULL with *empty set and no error: nothing was
 * recorded yet.
 */
static sqlite3 *
open_reader(const char *path, bool *empty, char *err, size_t err_size)
{
    if (empty != NULL) {
        struct stat st;
        *empty = stat(path, &st) != 0 && errno == ENOENT;
        if (*empty)
            return NULL;
    }
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sl_text_reason(err, err_size, "cannot open request DB %s: %s", path,
                       db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, SL_RECORDER_DEFAULT_BUSY_MS);
    int version = read_user_version(db, path, err, err_size);
    if (version == 0 && empty != NULL) {
        *empty = true;
        version = -1;
    } else if (version >= 0 && version != SL_RECORDER_SCHEMA_VERSION) {
        sl_text_reason(err, err_size, "request DB %s has schema version %d; this sluice reads version %d",
                       path, version, SL_RECORDER_SCHEMA_VERSION);
        version = -1;
    }
    if (version < 0) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

/* Column i as text, NULL for NULL: integers read back as their decimals. */
static const char *
col(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

/* history_sql's columns: the row key first, then sl_store_row_col_t's. */
#define HC_ROW   0
#define HC_FIRST 1

static const char attempts_sql[] =
    "SELECT provider, model, outcome, status, error_code, error_text, error_args, ms,"
    " pause_ms, retry, backoff_ms, skipped, reason, hedge FROM attempts WHERE request_row = ?1"
    " ORDER BY n";

/* Appends the attempts of request_row to row; returns SQLITE_DONE or the failure. */
static int
read_attempts(sqlite3_stmt *st, sqlite3_int64 request_row, sl_proto_history_row_t *row)
{
    sqlite3_bind_int64(st, 1, request_row);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *c[SL_AC_COUNT];
        for (int i = 0; i < SL_AC_COUNT; i++)
            c[i] = col(st, i);
        sl_store_decode_attempt(c, row);
    }
    sqlite3_reset(st);
    return rc;
}

static bool
read_row(sqlite3_stmt *st, sl_proto_history_row_t *row)
{
    const char *c[SL_RC_COUNT];
    for (int i = 0; i < SL_RC_COUNT; i++)
        c[i] = col(st, HC_FIRST + i);
    return sl_store_decode_row(c, row);
}

static void
bind_filter(sqlite3_stmt *st, int i, const sl_proto_history_filter_t *f)
{
    bind_text(st, i, f != NULL ? f->client : NULL);
    bind_text(st, i + 1, f != NULL ? f->provider : NULL);
    bind_text(st, i + 2, f != NULL ? f->model : NULL);
    if (f != NULL && f->has_status)
        sqlite3_bind_int64(st, i + 3, f->status);
    else
        sqlite3_bind_null(st, i + 3);
}

/*
 * Keyset pagination on requests_by_time: (?2, ?3) is the (started_at_ms, row)
 * of the previous page's last row, the largest values without a cursor. A
 * row value keeps the bound usable by the index, where an OR would scan from
 * the newest row on every page. The filters are checked on the rows the index
 * walk finds, within since_ms.
 */
static const char history_sql[] =
    "SELECT row, id, started_at_ms, client, dialect, model, provider, status, duration_ms, ttft_ms,"
    " usage_input, usage_output, usage_cache_read, usage_cache_write, usage_estimated, cost_micros"
    " FROM requests INDEXED BY requests_by_time"
    " WHERE started_at_ms >= ?1 AND (started_at_ms, row) < (?2, ?3)"
    " AND (?4 IS NULL OR client = ?4) AND (?5 IS NULL OR provider = ?5) AND (?6 IS NULL OR model = ?6)"
    " AND (?7 IS NULL OR status = ?7)"
    " ORDER BY started_at_ms DESC, row DESC LIMIT ?8";

int
sl_store_sqlite_history(const char *db_path, const sl_recorder_history_query_t *q,
                        sl_proto_history_row_t **rows, size_t *n_rows, char **next_cursor, char *err,
                        size_t err_size)
{
    *rows = NULL;
    *n_rows = 0;
    *next_cursor = NULL;
    int64_t cur_at = INT64_MAX, cur_row = INT64_MAX;
    if (q->cursor != NULL && !sl_store_parse_cursor(q->cursor, &cur_at, &cur_row)) {
        sl_text_reason(err, err_size, "bad cursor");
        return -1;
    }
    uint32_t limit = sl_store_history_limit(q);
    bool empty = false;
    sqlite3 *db = open_reader(db_path, &empty, err, err_size);
    if (db == NULL)
        return empty ? 0 : -1;

    sqlite3_stmt *st = NULL, *attempts = NULL;
    int rc = sqlite3_prepare_v2(db, history_sql, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, attempts_sql, -1, &attempts, NULL);
    sl_proto_history_row_t *out = NULL;
    size_t n = 0;
    bool more = false;
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, q->since_ms < INT64_MAX ? (sqlite3_int64)q->since_ms : INT64_MAX);
        sqlite3_bind_int64(st, 2, cur_at);
        sqlite3_bind_int64(st, 3, cur_row);
        bind_filter(st, 4, q->filter);
        /* One row past the page says whether a next page exists. */
        sqlite3_bind_int64(st, 8, (sqlite3_int64)limit + 1);
        out = sl_xcalloc(limit, sizeof *out);
        /*
         * The cursor is the last row looked at, kept or not, so that rows left
         * out for an unknown name are not looked at again on the next page.
         */
        int64_t last_at = 0, last_row = 0;
        uint32_t seen = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (seen == limit) {
                more = true;
                rc = SQLITE_DONE;
                break;
            }
            seen++;
            last_row = sqlite3_column_int64(st, HC_ROW);
            last_at = sqlite3_column_int64(st, HC_FIRST + SL_RC_AT);
            if (!read_row(st, &out[n]))
                continue;
            /* The attempts are read inside the row statement's read transaction: the same snapshot. */
            rc = read_attempts(attempts, last_row, &out[n++]);
            if (rc != SQLITE_DONE)
                break;
        }
        if (more) {
            char cursor[48];
            snprintf(cursor, sizeof cursor, "%lld.%lld", (long long)last_at, (long long)last_row);
            *next_cursor = sl_xstrdup(cursor);
        }
    }
    if (rc != SQLITE_DONE)
        sl_text_reason(err, err_size, "request DB %s: %s", db_path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_finalize(attempts);
    sqlite3_close(db);
    if (rc != SQLITE_DONE) {
        sl_store_free_rows(out, n);
        free(*next_cursor);
        *next_cursor = NULL;
        return -1;
    }
    if (n == 0) {
        free(out);
        out = NULL;
    }
    *rows = out;
    *n_rows = n;
    return 0;
}

int64_t
sl_store_sqlite_load_usage(const char *path, int64_t since_ms, sl_usage_cb cb, void *ctx, char *err,
                           size_t err_size)
{
    sqlite3 *db = open_reader(path, NULL, err, err_size);
    if (db == NULL)
        return -1;
    sqlite3_stmt *st = NULL;
    int64_t count = 0;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT kind, name, minute, requests, tokens, cost_micros FROM usage_buckets"
                                " WHERE minute >= ?1 ORDER BY minute",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, since_ms / MINUTE_MS);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            int kind = sl_store_bucket_kind_parse(col(st, 0));
            if (kind < 0) {
                sl_text_reason(err, err_size, "request DB: unknown kind '%s'",
                               col(st, 0) ? col(st, 0) : "NULL");
                break;
            }
            cb(ctx, (sl_bucket_kind_t)kind, (const char *)sqlite3_column_text(st, 1),
               sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4),
               sqlite3_column_int64(st, 5));
            count++;
        }
    }
    if (rc != SQLITE_DONE) {
        if (rc != SQLITE_ROW)
            sl_text_reason(err, err_size, "request DB %s: %s", path, sqlite3_errmsg(db));
        count = -1;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return count;
}
