/*
 * The PostgreSQL store (store.h, cluster.md "PostgreSQL request DB").
 *
 * The writer holds one connection, made and used on the recorder's thread
 * with libpq's asynchronous calls and a deadline on every wait, so a server
 * that stops answering costs a timeout, never a hung writer. A batch is one
 * statement (arrays of its column values, unnested into a multi-row insert),
 * one round trip, whatever its size. A row's key is (instance, boot_id, id):
 * request ids restart with the process, boot_id is drawn at each start. Rows
 * that cannot be written now (the server unreachable, a transient failure),
 * or that come faster than the server stores them (the recorder's queue
 * behind: set_aside), go to the spool (spool.h) and are written, oldest
 * first, once it can take them (store_batch); a batch whose commit was never
 * confirmed can be sent again without doubling (send_batch). Usage buckets
 * are keyed by instance and boot too and carry the seq of the last flush
 * applied to them, so a replayed flush adds nothing.
 *
 * The schema is created and migrated when the writer connects, in one
 * transaction under an advisory lock: instances starting together take
 * turns.
 *
 * The readers (history, load_usage) connect for each call, with the same
 * deadlines.
 */
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/mask.h"
#include "core/pg_text.h"
#include "core/text.h"
#include "core/xalloc.h"
#include "log.h"
#include "spool.h"

#define CONNECT_TIMEOUT_MS 3000
#define QUERY_TIMEOUT_MS   5000
#define RETRY_FIRST_MS     250
#define RETRY_MAX_MS       5000
/* Any constant: the instances of one database serialise their migrations on it. */
#define SCHEMA_LOCK_KEY "7310418624535430913"

/* ---- the schema ------------------------------------------------------------------------------- */

/*
 * migrations[v] takes the schema from version v to v + 1. Its versions are
 * PostgreSQL's own (the SQLite store has its user_version). Version 1 kept
 * attempts in a table of their own; version 2 keeps them in their request's
 * row, as a JSON array: one row and one index entry less per attempt, which
 * is most of what a request costs the server.
 */
static const char *const migrations[SL_PG_SCHEMA_VERSION] = {
    "CREATE TABLE requests ("
    "  seq bigserial NOT NULL,"
    "  instance text NOT NULL, boot_id text NOT NULL, id bigint NOT NULL,"
    "  started_at_ms bigint NOT NULL,"
    "  client text NOT NULL, dialect text NOT NULL, model text NOT NULL, provider text, path text NOT NULL,"
    "  status integer NOT NULL, outcome text NOT NULL,"
    "  error_code text, error_text text, error_args text,"
    "  duration_ms bigint NOT NULL, ttfb_ms bigint, ttft_ms bigint,"
    "  usage_input bigint, usage_output bigint, usage_cache_read bigint, usage_cache_write bigint,"
    "  usage_estimated boolean, cost_micros bigint,"
    "  PRIMARY KEY (instance, boot_id, id));"
    "CREATE INDEX requests_by_time ON requests (started_at_ms, seq);"
    "CREATE TABLE attempts ("
    "  instance text NOT NULL, boot_id text NOT NULL, request_id bigint NOT NULL, n integer NOT NULL,"
    "  provider text NOT NULL, model text, outcome text NOT NULL, status integer,"
    "  error_code text, error_text text, error_args text,"
    "  ms bigint NOT NULL, pause_ms bigint, retry integer, backoff_ms bigint, skipped text, reason text,"
    "  PRIMARY KEY (instance, boot_id, request_id, n));"
    "CREATE TABLE usage_buckets ("
    "  instance text NOT NULL, boot_id text NOT NULL, kind text NOT NULL, name text NOT NULL,"
    "  minute bigint NOT NULL, requests bigint NOT NULL, tokens bigint NOT NULL, cost_micros bigint NOT NULL,"
    "  seq bigint NOT NULL,"
    "  PRIMARY KEY (instance, boot_id, kind, name, minute));"
    "CREATE INDEX usage_by_minute ON usage_buckets (minute);",
    /* 2: attempts move into their request's row; the objects have the old columns' names. */
    "ALTER TABLE requests ADD COLUMN attempts json NOT NULL DEFAULT '[]';"
    "UPDATE requests r SET attempts = a.list FROM (SELECT instance, boot_id, request_id,"
    "  json_agg(json_strip_nulls(json_build_object('provider', provider, 'model', model, 'outcome', outcome,"
    "  'status', status, 'error_code', error_code, 'error_text', error_text, 'error_args', error_args::json,"
    "  'ms', ms, 'pause_ms', pause_ms, 'retry', retry, 'backoff_ms', backoff_ms, 'skipped', skipped,"
    "  'reason', reason)) ORDER BY n) AS list FROM attempts GROUP BY instance, boot_id, request_id) a"
    "  WHERE r.instance = a.instance AND r.boot_id = a.boot_id AND r.id = a.request_id;"
    "DROP TABLE attempts;",
};

/* The columns a batch carries, with the element type of the array each is sent as. */
typedef struct {
    const char *name, *type;
} column_t;

static const column_t request_cols[] = {
    {"instance", "text"},
    {"boot_id", "text"},
    {"id", "bigint"},
    {"started_at_ms", "bigint"},
    {"client", "text"},
    {"dialect", "text"},
    {"model", "text"},
    {"provider", "text"},
    {"path", "text"},
    {"status", "integer"},
    {"outcome", "text"},
    {"error_code", "text"},
    {"error_text", "text"},
    {"error_args", "text"},
    {"duration_ms", "bigint"},
    {"ttfb_ms", "bigint"},
    {"ttft_ms", "bigint"},
    {"usage_input", "bigint"},
    {"usage_output", "bigint"},
    {"usage_cache_read", "bigint"},
    {"usage_cache_write", "bigint"},
    {"usage_estimated", "boolean"},
    {"cost_micros", "bigint"},
    {"attempts", "json"},
};
#define N_REQUEST_COLS (sizeof request_cols / sizeof request_cols[0])

static const column_t usage_cols[] = {
    {"instance", "text"},   {"boot_id", "text"},  {"seq", "bigint"},
    {"kind", "text"},       {"name", "text"},     {"minute", "bigint"},
    {"requests", "bigint"}, {"tokens", "bigint"}, {"cost_micros", "bigint"},
};
#define N_USAGE_COLS (sizeof usage_cols / sizeof usage_cols[0])

/* INSERT INTO table (cols) SELECT * FROM unnest($first::type[], ...) */
static void
append_unnest_insert(sl_strbuf_t *b, const char *table, const column_t *cols, size_t n, int first)
{
    sl_strbuf_appendf(b, "INSERT INTO %s AS t (", table);
    for (size_t i = 0; i < n; i++)
        sl_strbuf_appendf(b, "%s%s", i ? ", " : "", cols[i].name);
    sl_strbuf_append_str(b, ") SELECT * FROM unnest(");
    for (size_t i = 0; i < n; i++)
        sl_strbuf_appendf(b, "%s$%d::%s[]", i ? ", " : "", first + (int)i, cols[i].type);
    sl_strbuf_append_str(b, ")");
}

static char *
rows_sql(void)
{
    sl_strbuf_t b = {0};
    append_unnest_insert(&b, "requests", request_cols, N_REQUEST_COLS, 1);
    sl_strbuf_append_str(&b, " ON CONFLICT DO NOTHING");
    return sl_strbuf_finish(&b);
}

/* The live path's: COPY has no ON CONFLICT, but a batch sent for the first time cannot meet its own rows. */
static char *
copy_sql(void)
{
    sl_strbuf_t b = {0};
    sl_strbuf_append_str(&b, "COPY requests (");
    for (size_t i = 0; i < N_REQUEST_COLS; i++)
        sl_strbuf_appendf(&b, "%s%s", i ? ", " : "", request_cols[i].name);
    sl_strbuf_append_str(&b, ") FROM STDIN");
    return sl_strbuf_finish(&b);
}

static char *
usage_sql(void)
{
    sl_strbuf_t b = {0};
    append_unnest_insert(&b, "usage_buckets", usage_cols, N_USAGE_COLS, 1);
    sl_strbuf_append_str(&b,
                         " ON CONFLICT (instance, boot_id, kind, name, minute) DO UPDATE SET"
                         " requests = t.requests + excluded.requests, tokens = t.tokens + excluded.tokens,"
                         " cost_micros = t.cost_micros + excluded.cost_micros, seq = excluded.seq"
                         " WHERE t.seq < excluded.seq");
    return sl_strbuf_finish(&b);
}

/* One chunk of old rows (their attempts with them) and of old buckets; answers (requests, buckets) deleted.
 */
static const char sweep_sql[] =
    "WITH old AS (DELETE FROM requests WHERE (instance, boot_id, id) IN (SELECT instance, boot_id, id"
    "  FROM requests WHERE started_at_ms < $1 ORDER BY started_at_ms LIMIT $3) RETURNING 1),"
    " buckets AS (DELETE FROM usage_buckets WHERE ctid IN (SELECT ctid FROM usage_buckets WHERE minute < $2"
    "  LIMIT $3) RETURNING 1)"
    " SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM buckets)";

/* ---- one connection, every wait bounded ------------------------------------------------------- */

static int64_t
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* libpq's message on one line, masked: it may quote the URL. */
static void
pq_reason(char *why, size_t why_size, const char *what, const char *msg)
{
    char clean[512];
    snprintf(clean, sizeof clean, "%s", msg != NULL && *msg ? msg : "no answer");
    /* Its lines and indents (and the server's "FATAL:  ") as single spaces. */
    char *to = clean;
    for (const char *p = clean; *p; p++) {
        bool blank = *p == '\n' || *p == '\r' || *p == '\t' || *p == ' ';
        if (!blank)
            *to++ = *p;
        else if (to > clean && to[-1] != ' ')
            *to++ = ' ';
    }
    *to = '\0';
    size_t n = sl_scrub_secrets(clean, strlen(clean));
    while (n > 0 && clean[n - 1] == ' ')
        clean[--n] = '\0';
    snprintf(why, why_size, "%s%s%s", what, *what ? ": " : "", clean);
}

/*
 * The writer's store.h while_waiting, set on the writer's thread by each of
 * its calls: the waits of the readers, on threads of their own, never call it.
 */
static _Thread_local sl_store_t *waiting_writer;

/*
 * Waits until the connection's socket is ready for events or the deadline
 * passes; on the writer's thread, in slices with its while_waiting between.
 */
static bool
wait_socket(PGconn *c, short events, int64_t deadline_ms)
{
    struct pollfd p = {.fd = PQsocket(c), .events = events};
    for (;;) {
        int64_t left = deadline_ms - mono_ms();
        if (left <= 0)
            return false;
        sl_store_t *w = waiting_writer;
        bool sliced = w != NULL && w->while_waiting != NULL && left > SL_STORE_WAIT_SLICE_MS;
        int rc = poll(&p, 1, sliced ? SL_STORE_WAIT_SLICE_MS : (int)left);
        if (rc > 0)
            return true;
        if (rc < 0 && errno != EINTR)
            return false;
        if (rc == 0 && sliced)
            w->while_waiting(w->while_waiting_ctx);
    }
}

typedef enum { PG_OK, PG_DATA, PG_DOWN } pg_result_t;

/* Everything queued reaches the socket within the deadline. */
static pg_result_t
flush_all(PGconn *c, int64_t deadline, char *why, size_t why_size)
{
    int flushed;
    while ((flushed = PQflush(c)) == 1) {
        if (!wait_socket(c, POLLOUT | POLLIN, deadline) || !PQconsumeInput(c)) {
            pq_reason(why, why_size, "sending", PQerrorMessage(c));
            return PG_DOWN;
        }
    }
    if (flushed < 0) {
        pq_reason(why, why_size, "sending", PQerrorMessage(c));
        return PG_DOWN;
    }
    return PG_OK;
}

/*
 * The results of what was sent, up to the last or to a COPY's start,
 * within the deadline. PG_DOWN is for the connection or the server's state,
 * worth another try later; PG_DATA for the statement itself, which would
 * fail the same way (state, if asked for, gets its SQLSTATE). On PG_OK,
 * *res (if asked for) gets the last result, the caller's to PQclear.
 */
static pg_result_t
collect(PGconn *c, int64_t deadline, PGresult **res, char state[6], char *why, size_t why_size)
{
    pg_result_t outcome = PG_OK;
    PGresult *last = NULL;
    for (;;) {
        while (PQisBusy(c)) {
            if (!wait_socket(c, POLLIN, deadline)) {
                snprintf(why, why_size, "no answer within %d ms", QUERY_TIMEOUT_MS);
                PQclear(last);
                return PG_DOWN;
            }
            if (!PQconsumeInput(c)) {
                pq_reason(why, why_size, "", PQerrorMessage(c));
                PQclear(last);
                return PG_DOWN;
            }
        }
        PGresult *r = PQgetResult(c);
        if (r == NULL)
            break;
        ExecStatusType st = PQresultStatus(r);
        if (outcome == PG_OK && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_COPY_IN) {
            const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            outcome = sl_pg_sqlstate_transient(code) || PQstatus(c) != CONNECTION_OK ? PG_DOWN : PG_DATA;
            if (state != NULL)
                snprintf(state, 6, "%s", code != NULL ? code : "");
            pq_reason(why, why_size, "", PQresultErrorMessage(r));
        }
        PQclear(last);
        last = r;
        /* A COPY waits for its data: there is nothing more to read until it is sent. */
        if (st == PGRES_COPY_IN)
            break;
    }
    if (outcome == PG_OK && PQstatus(c) != CONNECTION_OK) {
        pq_reason(why, why_size, "", PQerrorMessage(c));
        outcome = PG_DOWN;
    }
    if (outcome == PG_OK && res != NULL)
        *res = last;
    else
        PQclear(last);
    return outcome;
}

/*
 * One statement, sent and answered within QUERY_TIMEOUT_MS: params < 0
 * sends sql as it is (it may hold several statements, none with
 * parameters). collect's outcomes.
 */
static pg_result_t
pg_run(PGconn *c, const char *sql, int params, const char *const *values, PGresult **res, char *why,
       size_t why_size)
{
    if (res != NULL)
        *res = NULL;
    int64_t deadline = mono_ms() + QUERY_TIMEOUT_MS;
    int sent =
        params < 0 ? PQsendQuery(c, sql) : PQsendQueryParams(c, sql, params, NULL, values, NULL, NULL, 0);
    if (!sent) {
        pq_reason(why, why_size, "", PQerrorMessage(c));
        return PG_DOWN;
    }
    pg_result_t rc = flush_all(c, deadline, why, why_size);
    return rc == PG_OK ? collect(c, deadline, res, NULL, why, why_size) : rc;
}

/* Queues one COPY call's worth (put: PQputCopyData or PQputCopyEnd) in nonblocking mode, within the deadline.
 */
static bool
copy_put(PGconn *c, int64_t deadline, const char *data, size_t len, bool end)
{
    for (;;) {
        int put = end ? PQputCopyEnd(c, NULL) : PQputCopyData(c, data, (int)len);
        if (put != 0)
            return put > 0;
        /* Its buffer is full: let the socket take some first. */
        if (!wait_socket(c, POLLOUT, deadline) || PQflush(c) < 0)
            return false;
    }
}

/* COPY ... FROM STDIN with data (text format lines), within QUERY_TIMEOUT_MS; collect's outcomes. */
static pg_result_t
pg_copy(PGconn *c, const char *sql, const char *data, size_t len, char state[6], char *why, size_t why_size)
{
    int64_t deadline = mono_ms() + QUERY_TIMEOUT_MS;
    if (!PQsendQuery(c, sql)) {
        pq_reason(why, why_size, "", PQerrorMessage(c));
        return PG_DOWN;
    }
    PGresult *r = NULL;
    pg_result_t rc = flush_all(c, deadline, why, why_size);
    if (rc == PG_OK)
        rc = collect(c, deadline, &r, state, why, why_size);
    bool copying = rc == PG_OK && r != NULL && PQresultStatus(r) == PGRES_COPY_IN;
    PQclear(r);
    if (rc != PG_OK)
        return rc;
    if (!copying) {
        snprintf(why, why_size, "the server did not start the COPY");
        return PG_DOWN;
    }
    if (!copy_put(c, deadline, data, len, false) || !copy_put(c, deadline, NULL, 0, true)) {
        pq_reason(why, why_size, "sending", PQerrorMessage(c));
        return PG_DOWN;
    }
    rc = flush_all(c, deadline, why, why_size);
    return rc == PG_OK ? collect(c, deadline, NULL, state, why, why_size) : rc;
}

/* The server's NOTICEs ("relation already exists, skipping") are not the operator's business. */
static void
ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/*
 * A connection to url, made within CONNECT_TIMEOUT_MS; NULL with a reason.
 * Made step by step (PQconnectPoll) so that its waits are wait_socket's: a
 * server that takes the connection but does not answer is waited for in
 * slices, the writer's rows set aside meanwhile, as for a statement.
 */
static PGconn *
pg_connect(const char *url, char *why, size_t why_size)
{
    const char *const keys[] = {"dbname", "application_name", NULL};
    const char *const values[] = {url, "sluice", NULL};
    int64_t deadline = mono_ms() + CONNECT_TIMEOUT_MS;
    PGconn *c = PQconnectStartParams(keys, values, 1);
    PostgresPollingStatusType st =
        c == NULL || PQstatus(c) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
    while (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING) {
        if (!wait_socket(c, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline)) {
            snprintf(why, why_size, "cannot connect: no answer within %d ms", CONNECT_TIMEOUT_MS);
            PQfinish(c);
            return NULL;
        }
        st = PQconnectPoll(c);
    }
    if (st != PGRES_POLLING_OK) {
        pq_reason(why, why_size, "cannot connect", c != NULL ? PQerrorMessage(c) : "out of memory");
        PQfinish(c);
        return NULL;
    }
    PQsetNoticeProcessor(c, ignore_notice, NULL);
    if (PQsetnonblocking(c, 1) != 0) {
        pq_reason(why, why_size, "", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* The version in sluice_schema (0 for a database sluice has not set up), or -1 with a reason. */
static int
schema_version(PGconn *c, char *why, size_t why_size, bool *missing)
{
    PGresult *r;
    *missing = false;
    char state_why[512];
    pg_result_t rc = pg_run(c, "SELECT version FROM sluice_schema", 0, NULL, &r, state_why, sizeof state_why);
    if (rc == PG_DATA && strstr(state_why, "does not exist") != NULL) {
        *missing = true;
        return 0;
    }
    if (rc != PG_OK) {
        snprintf(why, why_size, "%s", state_why);
        return -1;
    }
    int v = PQntuples(r) > 0 ? atoi(PQgetvalue(r, 0, 0)) : 0;
    PQclear(r);
    return v;
}

/*
 * Creates or migrates the schema in one transaction under the advisory lock.
 * PG_DATA for a schema this code must not touch (newer) or may not (no
 * privilege): trying again soon would not help, but a later try might.
 */
static pg_result_t
migrate(PGconn *c, char *why, size_t why_size)
{
    pg_result_t rc = pg_run(c,
                            "BEGIN; SELECT pg_advisory_xact_lock(" SCHEMA_LOCK_KEY ");"
                            " CREATE TABLE IF NOT EXISTS sluice_schema (version integer NOT NULL)",
                            -1, NULL, NULL, why, why_size);
    PGresult *r = NULL;
    if (rc == PG_OK)
        rc = pg_run(c, "SELECT version FROM sluice_schema", 0, NULL, &r, why, why_size);
    int version = 0;
    bool fresh = true;
    if (rc == PG_OK) {
        fresh = PQntuples(r) == 0;
        version = fresh ? 0 : atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
        if (version > SL_PG_SCHEMA_VERSION) {
            snprintf(why, why_size,
                     "the database has schema version %d, newer than the version %d this sluice writes; "
                     "refusing to touch it",
                     version, SL_PG_SCHEMA_VERSION);
            rc = PG_DATA;
        }
    }
    for (int v = version; rc == PG_OK && v < SL_PG_SCHEMA_VERSION; v++)
        rc = pg_run(c, migrations[v], -1, NULL, NULL, why, why_size);
    if (rc == PG_OK && version < SL_PG_SCHEMA_VERSION) {
        char sql[96];
        snprintf(sql, sizeof sql,
                 fresh ? "INSERT INTO sluice_schema (version) VALUES (%d)"
                       : "UPDATE sluice_schema SET version = %d",
                 SL_PG_SCHEMA_VERSION);
        rc = pg_run(c, sql, -1, NULL, NULL, why, why_size);
    }
    if (rc == PG_OK)
        rc = pg_run(c, "COMMIT", -1, NULL, NULL, why, why_size);
    if (rc != PG_OK && PQstatus(c) == CONNECTION_OK) {
        char ignored[64];
        pg_run(c, "ROLLBACK", -1, NULL, NULL, ignored, sizeof ignored);
    }
    return rc;
}

/* ---- batches as cells ----------------------------------------------------------------------------- */

static char *
num(int64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%" PRId64, v);
    return sl_xstrdup(s);
}

static char *
opt(int64_t v, int64_t absent)
{
    return v != absent ? num(v) : NULL;
}

/* code, text, args of m at cells[0..2]. */
static void
msg_cells(char **cells, const sl_row_msg_t *m)
{
    if (m->code == NULL)
        return;
    cells[0] = sl_xstrdup(m->code);
    cells[1] = sl_pg_utf8_copy(m->text != NULL ? m->text : "");
    cells[2] = sl_store_args_json(m);
}

/* name: s, made valid UTF-8; absent for NULL. */
static void
set_text(json_t *obj, const char *name, const char *s)
{
    if (s == NULL)
        return;
    char *clean = sl_pg_utf8_copy(s);
    json_object_set_new(obj, name, json_string(clean));
    free(clean);
}

static void
set_opt(json_t *obj, const char *name, int64_t v, int64_t absent)
{
    if (v != absent)
        json_object_set_new(obj, name, json_integer(v));
}

/* A request's attempts as the JSON array of its `attempts` column: objects named as the SQLite columns. */
static char *
attempts_json(const sl_request_row_t *r)
{
    json_t *list = json_array();
    for (size_t k = 0; k < r->n_attempts; k++) {
        const sl_attempt_row_t *t = &r->attempts[k];
        json_t *a = json_object();
        set_text(a, "provider", t->provider != NULL ? t->provider : "");
        set_text(a, "model", t->model);
        set_text(a, "outcome", sl_hop_outcome_slug(t->outcome));
        set_opt(a, "status", t->status, 0);
        if (t->error.code != NULL) {
            set_text(a, "error_code", t->error.code);
            set_text(a, "error_text", t->error.text != NULL ? t->error.text : "");
            char *args = sl_store_args_json(&t->error);
            json_t *parsed = args != NULL ? json_loads(args, 0, NULL) : NULL;
            if (parsed != NULL)
                json_object_set_new(a, "error_args", parsed);
            free(args);
        }
        json_object_set_new(a, "ms", json_integer(t->ms));
        set_opt(a, "pause_ms", t->pause_ms, SL_ROW_ABSENT);
        set_opt(a, "retry", t->retry, 0);
        set_opt(a, "backoff_ms", t->backoff_ms, SL_ROW_ABSENT);
        if (t->skipped != SL_SKIP_NONE)
            set_text(a, "skipped", sl_skip_slug(t->skipped));
        if (t->has_reason)
            set_text(a, "reason", sl_step_reason_slug(t->reason));
        set_opt(a, "hedge", t->hedge ? 1 : 0, 0);
        json_array_append_new(list, a);
    }
    char *s = json_dumps(list, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(list);
    return s;
}

static void
rows_to_cells(const char *instance, const char *boot_id, sl_request_row_t *const *rows, size_t n,
              sl_cell_batch_t *b)
{
    *b = (sl_cell_batch_t){.kind = SL_BATCH_ROWS};
    sl_cell_table_init(b, 0, N_REQUEST_COLS, n);
    for (size_t i = 0; i < n; i++) {
        const sl_request_row_t *r = rows[i];
        char **c = b->tables[0].cells + i * N_REQUEST_COLS;
        c[0] = sl_xstrdup(instance);
        c[1] = sl_xstrdup(boot_id);
        c[2] = num((int64_t)r->id);
        c[3] = num(r->started_at_ms);
        c[4] = sl_pg_utf8_copy(r->client != NULL ? r->client : "");
        c[5] = sl_xstrdup(sl_store_dialect_name(r->dialect));
        c[6] = sl_pg_utf8_copy(r->model != NULL ? r->model : "");
        c[7] = sl_pg_utf8_copy(r->provider);
        c[8] = sl_pg_utf8_copy(r->path != NULL ? r->path : "");
        c[9] = num(r->status);
        c[10] = sl_xstrdup(sl_row_outcome_slug(r->outcome));
        msg_cells(c + 11, &r->error);
        c[14] = num(r->duration_ms);
        c[15] = opt(r->ttfb_ms, SL_ROW_ABSENT);
        c[16] = opt(r->ttft_ms, SL_ROW_ABSENT);
        if (r->has_usage) {
            c[17] = num((int64_t)r->usage.input);
            c[18] = num((int64_t)r->usage.output);
            c[19] = num((int64_t)r->usage.cache_read);
            c[20] = num((int64_t)r->usage.cache_write);
            c[21] = sl_xstrdup(r->usage.estimated ? "t" : "f");
        }
        c[22] = opt(r->cost_micros, SL_ROW_ABSENT);
        c[23] = attempts_json(r);
    }
}

static void
usage_to_cells(const char *instance, const char *boot_id, const sl_usage_delta_t *d, size_t n, uint64_t seq,
               sl_cell_batch_t *b)
{
    *b = (sl_cell_batch_t){.kind = SL_BATCH_USAGE};
    sl_cell_table_init(b, 0, N_USAGE_COLS, n);
    for (size_t i = 0; i < n; i++) {
        char **c = b->tables[0].cells + i * N_USAGE_COLS;
        c[0] = sl_xstrdup(instance);
        c[1] = sl_xstrdup(boot_id);
        c[2] = num((int64_t)seq);
        c[3] = sl_xstrdup(sl_store_bucket_kind_name(d[i].kind));
        c[4] = sl_pg_utf8_copy(d[i].name);
        c[5] = num(d[i].minute);
        c[6] = num(d[i].requests);
        c[7] = num(d[i].tokens);
        c[8] = num(d[i].cost_micros);
    }
}

/* ---- the writer ------------------------------------------------------------------------------------ */

typedef struct {
    sl_store_t base;
    char *url, *instance;
    char boot_id[33];
    char *rows_sql, *copy_sql, *usage_sql;
    PGconn *conn; /* the writer's; NULL = not connected */
    int64_t retry_at_ms, retry_ms;
    sl_spool_t *spool;
    bool spilling; /* rows were spooled for a server slower than the requests, and still wait */
    void (*on_dropped)(void *ctx, uint64_t rows, const char *reason);
    void *on_dropped_ctx;

    pthread_mutex_t lock; /* guards status: other threads read it */
    sl_store_status_t status;
} pg_store_t;

static void
publish(pg_store_t *s, bool degraded, const char *reason)
{
    pthread_mutex_lock(&s->lock);
    bool was = s->status.degraded;
    s->status.degraded = degraded;
    snprintf(s->status.reason, sizeof s->status.reason, "%s", degraded ? reason : "");
    s->status.spooled_rows = sl_spool_rows(s->spool);
    s->status.spool_bytes = sl_spool_bytes(s->spool);
    pthread_mutex_unlock(&s->lock);
    if (degraded && !was)
        sl_log_warn("request DB: PostgreSQL cannot take rows now (%s): they wait in the spool", reason);
    else if (!degraded && was)
        sl_log_info("request DB: PostgreSQL is back; the spool is written");
}

/* The spool's rows and bytes, for status readers. */
static void
publish_spool(pg_store_t *s)
{
    pthread_mutex_lock(&s->lock);
    s->status.spooled_rows = sl_spool_rows(s->spool);
    s->status.spool_bytes = sl_spool_bytes(s->spool);
    pthread_mutex_unlock(&s->lock);
}

static void
disconnect(pg_store_t *s, const char *why)
{
    PQfinish(s->conn);
    s->conn = NULL;
    s->retry_at_ms = mono_ms() + s->retry_ms;
    s->retry_ms = s->retry_ms * 2 < RETRY_MAX_MS ? s->retry_ms * 2 : RETRY_MAX_MS;
    publish(s, true, why);
}

/* A batch as the one INSERT ... ON CONFLICT of its kind: what a batch that may have been stored already
 * takes. */
static pg_result_t
insert_batch(pg_store_t *s, const sl_cell_batch_t *b, char *why, size_t why_size)
{
    size_t n_params = 0;
    for (size_t t = 0; t < b->n_tables; t++)
        n_params += b->tables[t].cols;
    char **params = sl_xcalloc(n_params, sizeof *params);
    size_t k = 0;
    for (size_t t = 0; t < b->n_tables; t++) {
        const sl_cell_table_t *tb = &b->tables[t];
        for (size_t col = 0; col < tb->cols; col++)
            params[k++] = sl_pg_array_literal((const char *const *)tb->cells + col, tb->rows, tb->cols);
    }
    const char *sql = b->kind == SL_BATCH_ROWS ? s->rows_sql : s->usage_sql;
    pg_result_t rc = pg_run(s->conn, sql, (int)n_params, (const char *const *)params, NULL, why, why_size);
    for (size_t i = 0; i < n_params; i++)
        free(params[i]);
    free(params);
    return rc;
}

/*
 * Stores a batch. Request rows go by COPY, which costs the server less than
 * half of what the INSERT does per row. COPY has no ON CONFLICT: a batch that
 * meets a row already there (a spooled batch whose commit happened
 * unconfirmed, or one a killed run had replayed) goes again by the INSERT,
 * which skips those rows.
 */
static pg_result_t
send_batch(pg_store_t *s, const sl_cell_batch_t *b, char *why, size_t why_size)
{
    if (b->kind != SL_BATCH_ROWS)
        return insert_batch(s, b, why, why_size);
    const sl_cell_table_t *tb = &b->tables[0];
    sl_strbuf_t data = {0};
    for (size_t r = 0; r < tb->rows; r++)
        sl_pg_copy_line(&data, (const char *const *)tb->cells + r * tb->cols, tb->cols);
    char state[6] = "";
    pg_result_t rc =
        pg_copy(s->conn, s->copy_sql, data.data != NULL ? data.data : "", data.len, state, why, why_size);
    free(data.data);
    if (rc == PG_DATA && strcmp(state, "23505") == 0)
        return insert_batch(s, b, why, why_size);
    return rc;
}

/* Connects (and migrates) when due; true when connected. */
static bool
ensure_connected(pg_store_t *s, int64_t now_ms)
{
    if (s->conn != NULL)
        return true;
    if (now_ms < s->retry_at_ms)
        return false;
    char why[512];
    s->conn = pg_connect(s->url, why, sizeof why);
    if (s->conn != NULL && migrate(s->conn, why, sizeof why) != PG_OK)
        disconnect(s, why);
    else if (s->conn == NULL)
        disconnect(s, why);
    return s->conn != NULL;
}

/*
 * Writes the oldest batch the spool holds, if any; true once it is empty.
 * One batch a call: the writer goes back to its queue between batches, and
 * calls again while tend_at says so.
 */
static bool
replay_spooled_batch(pg_store_t *s)
{
    sl_cell_batch_t b;
    if (s->conn != NULL && sl_spool_peek(s->spool, &b)) {
        char why[512];
        pg_result_t rc = send_batch(s, &b, why, sizeof why);
        uint64_t rows = b.kind == SL_BATCH_ROWS ? b.tables[0].rows : 0;
        sl_cell_batch_free(&b);
        if (rc == PG_DOWN) {
            disconnect(s, why);
            return false;
        }
        /* A batch the database refuses would refuse again: it is lost, and said so, not retried forever. */
        if (rc == PG_DATA && s->on_dropped != NULL)
            s->on_dropped(s->on_dropped_ctx, rows, why);
        sl_spool_take(s->spool);
        publish_spool(s);
    }
    if (s->conn == NULL || !sl_spool_empty(s->spool))
        return false;
    if (s->spilling) {
        s->spilling = false;
        sl_log_info("request DB: PostgreSQL caught up; the rows the spool held are written");
    }
    return true;
}

static void
pg_tend(sl_store_t *base, int64_t now_ms)
{
    pg_store_t *s = (pg_store_t *)base;
    waiting_writer = base;
    if (ensure_connected(s, now_ms) && replay_spooled_batch(s)) {
        s->retry_ms = RETRY_FIRST_MS;
        publish(s, false, "");
    }
}

/* Not connected, or the spool not yet written: at the next try's time (in the past once connected). */
static int64_t
pg_tend_at(sl_store_t *base)
{
    pg_store_t *s = (pg_store_t *)base;
    return s->conn != NULL && sl_spool_empty(s->spool) ? INT64_MAX : s->retry_at_ms;
}

/*
 * To PostgreSQL if it can take it now, after one batch of the spool; else
 * to the spool. Request rows need no order among themselves (each has its
 * key), so they do not wait for the spool to drain: it is written a batch
 * per write and between writes (tend), and a spool that is never empty for
 * long does not grow towards its cap. A usage flush follows the ones before
 * it (a bucket applies each flush's seq once, in order): it waits behind
 * whatever the spool holds.
 */
static bool
store_batch(pg_store_t *s, const sl_cell_batch_t *b, char *why, size_t why_size)
{
    if (s->conn == NULL || !sl_spool_empty(s->spool))
        pg_tend(&s->base, mono_ms());
    char down[512] = "";
    bool in_order = b->kind != SL_BATCH_ROWS;
    if (s->conn != NULL && (!in_order || sl_spool_empty(s->spool))) {
        pg_result_t rc = send_batch(s, b, why, why_size);
        if (rc == PG_OK)
            return true;
        if (rc == PG_DATA)
            return false;
        snprintf(down, sizeof down, "%s", why);
        disconnect(s, down);
    }
    char full[512];
    if (!sl_spool_append(s->spool, b, full, sizeof full)) {
        snprintf(why, why_size, "PostgreSQL cannot take the rows (%s) and %s", s->status.reason, full);
        return false;
    }
    publish_spool(s);
    return true;
}

static bool
pg_write_rows(sl_store_t *base, sl_request_row_t *const *rows, size_t n, char *why, size_t why_size)
{
    pg_store_t *s = (pg_store_t *)base;
    waiting_writer = base;
    sl_cell_batch_t b;
    rows_to_cells(s->instance, s->boot_id, rows, n, &b);
    bool ok = store_batch(s, &b, why, why_size);
    sl_cell_batch_free(&b);
    return ok;
}

/*
 * To the spool without a round trip: a file append costs far less, so a
 * server slower than the requests, or one that stalls, delays their rows
 * instead of making the recorder's queue refuse them (cluster.md: rows are
 * dropped only past the spool's cap). They are written after what the spool
 * already holds, one batch per write or tend.
 */
static bool
pg_set_aside_rows(sl_store_t *base, sl_request_row_t *const *rows, size_t n, char *why, size_t why_size)
{
    pg_store_t *s = (pg_store_t *)base;
    sl_cell_batch_t b;
    rows_to_cells(s->instance, s->boot_id, rows, n, &b);
    bool ok = sl_spool_append(s->spool, &b, why, why_size);
    sl_cell_batch_free(&b);
    if (!ok)
        return false;
    if (!s->spilling) {
        s->spilling = true;
        sl_log_warn("request DB: PostgreSQL takes rows slower than they come: they wait in the spool "
                    "and are written as it catches up");
    }
    publish_spool(s);
    return true;
}

static bool
pg_write_usage(sl_store_t *base, const sl_usage_delta_t *d, size_t n, uint64_t seq, char *why,
               size_t why_size)
{
    pg_store_t *s = (pg_store_t *)base;
    sl_cell_batch_t b;
    waiting_writer = base;
    usage_to_cells(s->instance, s->boot_id, d, n, seq, &b);
    bool ok = store_batch(s, &b, why, why_size);
    sl_cell_batch_free(&b);
    return ok;
}

static sl_sweep_result_t
pg_sweep(sl_store_t *base, int64_t wall_ms, uint32_t retention_days, uint64_t *swept, char *why,
         size_t why_size)
{
    pg_store_t *s = (pg_store_t *)base;
    waiting_writer = base;
    *swept = 0;
    /* Retention comes due at start, before any write: it connects (and writes the spool) as a write would. */
    if (s->conn == NULL || !sl_spool_empty(s->spool))
        pg_tend(base, mono_ms());
    if (s->conn == NULL || !sl_spool_empty(s->spool)) {
        snprintf(why, why_size, "retention waits until PostgreSQL is back");
        return SL_SWEEP_FAILED;
    }
    char cutoff[24], bucket_cutoff[24], chunk[16];
    snprintf(cutoff, sizeof cutoff, "%" PRId64, sl_retention_cutoff_ms(wall_ms, retention_days));
    snprintf(bucket_cutoff, sizeof bucket_cutoff, "%" PRId64,
             sl_bucket_cutoff_minute(wall_ms, retention_days));
    snprintf(chunk, sizeof chunk, "%d", SL_RECORDER_SWEEP_CHUNK);
    const char *const values[] = {cutoff, bucket_cutoff, chunk};
    PGresult *r;
    pg_result_t rc = pg_run(s->conn, sweep_sql, 3, values, &r, why, why_size);
    if (rc == PG_DOWN)
        disconnect(s, why);
    if (rc != PG_OK)
        return SL_SWEEP_FAILED;
    long long requests = atoll(PQgetvalue(r, 0, 0)), buckets = atoll(PQgetvalue(r, 0, 1));
    PQclear(r);
    *swept = (uint64_t)requests;
    return requests == SL_RECORDER_SWEEP_CHUNK || buckets == SL_RECORDER_SWEEP_CHUNK ? SL_SWEEP_MORE
                                                                                     : SL_SWEEP_DONE;
}

static void
pg_status(sl_store_t *base, sl_store_status_t *out)
{
    pg_store_t *s = (pg_store_t *)base;
    pthread_mutex_lock(&s->lock);
    *out = s->status;
    pthread_mutex_unlock(&s->lock);
}

static void
pg_close(sl_store_t *base)
{
    pg_store_t *s = (pg_store_t *)base;
    PQfinish(s->conn);
    sl_spool_close(s->spool);
    pthread_mutex_destroy(&s->lock);
    free(s->url);
    free(s->instance);
    free(s->rows_sql);
    free(s->copy_sql);
    free(s->usage_sql);
    free(s);
}

static const sl_store_ops_t pg_ops = {
    .write_rows = pg_write_rows,
    .set_aside_rows = pg_set_aside_rows,
    .write_usage = pg_write_usage,
    .sweep = pg_sweep,
    .tend = pg_tend,
    .tend_at = pg_tend_at,
    .status = pg_status,
    .close = pg_close,
};

/* 128 random bits as hex: a run's rows never share a key with another run's. */
static void
new_boot_id(char out[33])
{
    unsigned char raw[16];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (n < 0 && errno != EINTR)
            break;
    }
    /* getrandom cannot fail on Linux ≥ 3.17 short of a bad pointer; a clock-derived id is the fallback. */
    if (got < sizeof raw) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t v[2] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32};
        memcpy(raw, v, sizeof raw);
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

sl_store_t *
sl_store_pg_open(const sl_store_where_t *where, const sl_recorder_options_t *o, char *err, size_t err_size)
{
    if (where->instance == NULL || where->spool_path == NULL) {
        sl_text_reason(err, err_size, "request DB: PostgreSQL needs an instance name and a spool path");
        return NULL;
    }
    uint64_t cut = 0;
    sl_spool_t *spool = sl_spool_open(
        where->spool_path, where->spool_max_bytes > 0 ? where->spool_max_bytes : SL_SPOOL_DEFAULT_MAX_BYTES,
        &cut, err, err_size);
    if (spool == NULL)
        return NULL;
    if (cut > 0)
        sl_log_warn("request DB: the spool %s ended in %llu damaged byte(s), cut off", where->spool_path,
                    (unsigned long long)cut);
    if (!sl_spool_empty(spool))
        sl_log_info("request DB: %llu row(s) a previous run spooled in %s are written first",
                    (unsigned long long)sl_spool_rows(spool), where->spool_path);
    pg_store_t *s = sl_xcalloc(1, sizeof *s);
    s->base.ops = &pg_ops;
    s->url = sl_xstrdup(where->url);
    s->instance = sl_xstrdup(where->instance);
    new_boot_id(s->boot_id);
    s->rows_sql = rows_sql();
    s->copy_sql = copy_sql();
    s->usage_sql = usage_sql();
    s->spool = spool;
    s->retry_ms = RETRY_FIRST_MS;
    s->on_dropped = o->on_dropped;
    s->on_dropped_ctx = o->on_dropped_ctx;
    pthread_mutex_init(&s->lock, NULL);
    s->status = (sl_store_status_t){.kind = SL_STORE_POSTGRES,
                                    .spooled_rows = sl_spool_rows(spool),
                                    .spool_bytes = sl_spool_bytes(spool)};
    return &s->base;
}

/* ---- reading back --------------------------------------------------------------------------------- */

/* A reader's connection, or NULL with a reason; *empty when the database has no sluice schema yet. */
static PGconn *
open_reader(const sl_store_where_t *where, bool *empty, char *err, size_t err_size)
{
    *empty = false;
    char why[512];
    PGconn *c = pg_connect(where->url, why, sizeof why);
    if (c == NULL) {
        sl_text_reason(err, err_size, "request DB (PostgreSQL): %s", why);
        return NULL;
    }
    bool missing;
    int version = schema_version(c, why, sizeof why, &missing);
    if (version < 0 || (!missing && version != SL_PG_SCHEMA_VERSION)) {
        if (version >= 0)
            snprintf(why, sizeof why, "schema version %d; this sluice reads version %d", version,
                     SL_PG_SCHEMA_VERSION);
        sl_text_reason(err, err_size, "request DB (PostgreSQL): %s", why);
        PQfinish(c);
        return NULL;
    }
    if (missing) {
        *empty = true;
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* Keyset pagination on requests_by_time, as the SQLite store's; a page is one round trip. */
static const char history_sql[] =
    "SELECT r.seq, r.id, r.started_at_ms, r.client, r.dialect, r.model, r.provider, r.status, r.duration_ms,"
    " r.ttft_ms, r.usage_input, r.usage_output, r.usage_cache_read, r.usage_cache_write, r.usage_estimated,"
    " r.cost_micros, r.instance,"
    " r.attempts FROM requests r"
    " WHERE r.started_at_ms >= $1 AND (r.started_at_ms, r.seq) < ($2, $3)"
    " AND ($4::text IS NULL OR r.client = $4) AND ($5::text IS NULL OR r.provider = $5)"
    " AND ($6::text IS NULL OR r.model = $6) AND ($7::integer IS NULL OR r.status = $7)"
    " ORDER BY r.started_at_ms DESC, r.seq DESC LIMIT $8";

/* history_sql's columns: the row key, sl_store_row_col_t's, the instance, the attempts. */
#define HC_ROW      0
#define HC_FIRST    1
#define HC_INSTANCE (HC_FIRST + SL_RC_COUNT)
#define HC_ATTEMPTS (HC_INSTANCE + 1)

static const char *
cell(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

/* The attempts column's keys, in sl_store_attempt_col_t's order. */
static const char *const attempt_keys[SL_AC_COUNT] = {
    [SL_AC_PROVIDER] = "provider",     [SL_AC_MODEL] = "model",
    [SL_AC_OUTCOME] = "outcome",       [SL_AC_STATUS] = "status",
    [SL_AC_ERROR_CODE] = "error_code", [SL_AC_ERROR_TEXT] = "error_text",
    [SL_AC_ERROR_ARGS] = "error_args", [SL_AC_MS] = "ms",
    [SL_AC_PAUSE] = "pause_ms",        [SL_AC_RETRY] = "retry",
    [SL_AC_BACKOFF] = "backoff_ms",    [SL_AC_SKIPPED] = "skipped",
    [SL_AC_REASON] = "reason",         [SL_AC_HEDGE] = "hedge",
};

/* The attempts column (a JSON array of objects) appended to row. */
static void
read_attempts(const char *json, sl_proto_history_row_t *row)
{
    json_t *list = json != NULL ? json_loads(json, 0, NULL) : NULL;
    size_t i;
    json_t *a;
    json_array_foreach(list, i, a)
    {
        if (!json_is_object(a))
            continue;
        char nums[SL_AC_COUNT][24];
        char *args = NULL;
        const char *c[SL_AC_COUNT];
        for (size_t k = 0; k < SL_AC_COUNT; k++) {
            json_t *v = json_object_get(a, attempt_keys[k]);
            c[k] = NULL;
            if (json_is_string(v)) {
                c[k] = json_string_value(v);
            } else if (json_is_integer(v)) {
                snprintf(nums[k], sizeof nums[k], "%" JSON_INTEGER_FORMAT, json_integer_value(v));
                c[k] = nums[k];
            } else if (k == SL_AC_ERROR_ARGS && v != NULL) {
                c[k] = args = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
            }
        }
        sl_store_decode_attempt(c, row);
        free(args);
    }
    json_decref(list);
}

int
sl_store_pg_history(const sl_store_where_t *where, const sl_recorder_history_query_t *q,
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
    bool empty;
    PGconn *c = open_reader(where, &empty, err, err_size);
    if (c == NULL)
        return empty ? 0 : -1;
    char since[24], at[24], seq[24], status[16], lim[16];
    snprintf(since, sizeof since, "%" PRIu64,
             q->since_ms < (uint64_t)INT64_MAX ? q->since_ms : (uint64_t)INT64_MAX);
    snprintf(at, sizeof at, "%" PRId64, cur_at);
    snprintf(seq, sizeof seq, "%" PRId64, cur_row);
    const sl_proto_history_filter_t *f = q->filter;
    if (f != NULL && f->has_status)
        snprintf(status, sizeof status, "%u", f->status);
    /* One row past the page says whether a next page exists. */
    snprintf(lim, sizeof lim, "%u", limit + 1);
    const char *const values[] = {since,
                                  at,
                                  seq,
                                  f != NULL ? f->client : NULL,
                                  f != NULL ? f->provider : NULL,
                                  f != NULL ? f->model : NULL,
                                  f != NULL && f->has_status ? status : NULL,
                                  lim};
    PGresult *r;
    char why[512];
    if (pg_run(c, history_sql, 8, values, &r, why, sizeof why) != PG_OK) {
        sl_text_reason(err, err_size, "request DB (PostgreSQL): %s", why);
        PQfinish(c);
        return -1;
    }
    int total = PQntuples(r);
    sl_proto_history_row_t *out = sl_xcalloc(limit, sizeof *out);
    size_t n = 0;
    /* The cursor is the last row looked at, kept or not (the SQLite store's rule). */
    int seen = total > (int)limit ? (int)limit : total;
    for (int i = 0; i < seen; i++) {
        const char *cols[SL_RC_COUNT];
        for (int k = 0; k < SL_RC_COUNT; k++)
            cols[k] = cell(r, i, HC_FIRST + k);
        if (!sl_store_decode_row(cols, &out[n]))
            continue;
        out[n].instance = sl_xstrdup(cell(r, i, HC_INSTANCE));
        read_attempts(cell(r, i, HC_ATTEMPTS), &out[n]);
        n++;
    }
    if (total > (int)limit) {
        char cursor[48];
        snprintf(cursor, sizeof cursor, "%s.%s", PQgetvalue(r, seen - 1, HC_FIRST + SL_RC_AT),
                 PQgetvalue(r, seen - 1, HC_ROW));
        *next_cursor = sl_xstrdup(cursor);
    }
    PQclear(r);
    PQfinish(c);
    if (n == 0) {
        free(out);
        out = NULL;
    }
    *rows = out;
    *n_rows = n;
    return 0;
}

int64_t
sl_store_pg_load_usage(const sl_store_where_t *where, int64_t since_ms, sl_usage_cb cb, void *ctx, char *err,
                       size_t err_size)
{
    bool empty;
    PGconn *c = open_reader(where, &empty, err, err_size);
    if (c == NULL)
        return empty ? 0 : -1;
    char minute[24];
    snprintf(minute, sizeof minute, "%" PRId64, since_ms / 60000);
    const char *const values[] = {where->instance, minute};
    PGresult *r;
    char why[512];
    /* This instance's buckets, every run of it summed: its own limits were counted by it alone. */
    pg_result_t rc = pg_run(c,
                            "SELECT kind, name, minute, sum(requests), sum(tokens), sum(cost_micros)"
                            " FROM usage_buckets WHERE instance = $1 AND minute >= $2"
                            " GROUP BY kind, name, minute ORDER BY minute",
                            2, values, &r, why, sizeof why);
    if (rc != PG_OK) {
        sl_text_reason(err, err_size, "request DB (PostgreSQL): %s", why);
        PQfinish(c);
        return -1;
    }
    int64_t count = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        int kind = sl_store_bucket_kind_parse(PQgetvalue(r, i, 0));
        if (kind < 0)
            continue; /* a kind a newer sluice counts */
        cb(ctx, (sl_bucket_kind_t)kind, PQgetvalue(r, i, 1), atoll(PQgetvalue(r, i, 2)),
           atoll(PQgetvalue(r, i, 3)), atoll(PQgetvalue(r, i, 4)), atoll(PQgetvalue(r, i, 5)));
        count++;
    }
    PQclear(r);
    PQfinish(c);
    return count;
}
