/*
 * The request DB: every request is one row or one counted drop, a locked or
 * full DB never blocks a submit, nothing stored carries a credential, usage
 * buckets add up and outlive request retention; and the pure rules that
 * schedule the writer.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "core/dialect.h"
#include "core/xalloc.h"
#include "recorder.h"

#define DAY_MS 86400000LL

static char dir[64];
static char db_path[128];
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
    base_ms = wall_ms() - DAY_MS;
}

static void
teardown(void)
{
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
    sl_recorder_t *rec = sl_recorder_open(db_path, opts, err, sizeof err);
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
        r->attempts[i].outcome = i + 1 < n_attempts ? SL_ROW_HOP_STATUS : SL_ROW_HOP_SERVED;
        r->attempts[i].status = i + 1 < n_attempts ? 529 : 200;
        r->attempts[i].ms = 100 + (int64_t)i;
    }
    return r;
}

/* One integer from the DB through a connection of the test's own. */
static int64_t
query_int(const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static sl_recorder_stats_t
stats_of(sl_recorder_t *rec)
{
    sl_recorder_stats_t s;
    sl_recorder_stats(rec, &s);
    return s;
}

/* ---- rows read back ------------------------------------------------------- */

Test(recorder, rows_and_attempts_read_back_with_every_field)
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
                              .outcome = SL_ROW_HOP_SKIPPED,
                              .pause_ms = SL_ROW_ABSENT,
                              .backoff_ms = SL_ROW_ABSENT,
                              .skipped = SL_ROW_SKIP_PERIOD_USED_UP};
    a[1] = (sl_attempt_row_t){.provider = sl_xstrdup("openai-3"),
                              .model = sl_xstrdup("gpt-4o-2024"),
                              .outcome = SL_ROW_HOP_ERROR,
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
                              .outcome = SL_ROW_HOP_SERVED,
                              .status = 200,
                              .ms = 900,
                              .pause_ms = SL_ROW_ABSENT,
                              .retry = 1,
                              .backoff_ms = 250};
    cr_assert(sl_recorder_submit(rec, r));
    sl_recorder_flush(rec);
    cr_assert_eq(stats_of(rec).written, 1);

    sl_history_page_t page;
    sl_history_query_t q = {0};
    cr_assert(sl_recorder_history(db_path, &q, &page, err, sizeof err), "%s", err);
    cr_assert_eq(page.n, 1);
    cr_assert_null(page.next_cursor);
    const sl_request_row_t *g = page.rows[0];
    cr_assert_eq(g->id, 42);
    cr_assert_eq(g->started_at_ms, base_ms + 123);
    cr_assert_str_eq(g->client, "team-a");
    cr_assert_eq(g->dialect, SL_DIALECT_OPENAI_CHAT);
    cr_assert_str_eq(g->model, "gpt-4o");
    cr_assert_str_eq(g->provider, "openai-2");
    cr_assert_str_eq(g->path, "/v1/chat/completions");
    cr_assert_eq(g->status, 200);
    cr_assert_eq(g->outcome, SL_ROW_SERVED);
    cr_assert_null(g->error.code);
    cr_assert_eq(g->duration_ms, 2500);
    cr_assert_eq(g->ttfb_ms, 300);
    cr_assert_eq(g->ttft_ms, 450);
    cr_assert(g->has_usage);
    cr_assert_eq(g->usage.input, 1000);
    cr_assert_eq(g->usage.output, 200);
    cr_assert_eq(g->usage.cache_read, 30);
    cr_assert_eq(g->usage.cache_write, 4);
    cr_assert(g->usage.estimated);
    cr_assert_eq(g->cost_micros, 5678);
    cr_assert_eq(g->n_attempts, 3);

    const sl_attempt_row_t *ga = g->attempts;
    cr_assert_str_eq(ga[0].provider, "openai-1");
    cr_assert_null(ga[0].model);
    cr_assert_eq(ga[0].outcome, SL_ROW_HOP_SKIPPED);
    cr_assert_eq(ga[0].skipped, SL_ROW_SKIP_PERIOD_USED_UP);
    cr_assert_eq(ga[0].status, 0);
    cr_assert_eq(ga[0].pause_ms, SL_ROW_ABSENT);

    cr_assert_eq(ga[1].outcome, SL_ROW_HOP_ERROR);
    cr_assert_eq(ga[1].skipped, SL_ROW_SKIP_NONE);
    cr_assert_str_eq(ga[1].model, "gpt-4o-2024");
    cr_assert_eq(ga[1].pause_ms, 120);
    cr_assert_str_eq(ga[1].error.code, "config.file_unreadable");
    cr_assert_str_eq(ga[1].error.text, "cannot read /etc/x: stream broke");
    cr_assert_eq(ga[1].error.nargs, 2);
    cr_assert_str_eq(ga[1].error.args[0].name, "path");
    cr_assert_str_eq(ga[1].error.args[1].value, "stream broke");
    cr_assert_eq(ga[1].retry, 0);
    cr_assert_eq(ga[1].backoff_ms, SL_ROW_ABSENT);

    cr_assert_eq(ga[2].outcome, SL_ROW_HOP_SERVED);
    cr_assert_eq(ga[2].retry, 1);
    cr_assert_eq(ga[2].backoff_ms, 250);
    cr_assert_eq(ga[2].ms, 900);
    cr_assert_null(ga[2].error.code);
    sl_history_page_free(&page);
    sl_recorder_close(rec);
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

    sl_history_page_t page;
    cr_assert(sl_recorder_history(db_path, &(sl_history_query_t){0}, &page, err, sizeof err), "%s", err);
    cr_assert_eq(page.n, 1);
    const sl_request_row_t *g = page.rows[0];
    cr_assert_null(g->provider);
    cr_assert_eq(g->outcome, SL_ROW_FAILED);
    cr_assert_str_eq(g->error.code, "gw.safe_mode");
    cr_assert_eq(g->error.nargs, 0);
    cr_assert_eq(g->ttfb_ms, SL_ROW_ABSENT);
    cr_assert_eq(g->ttft_ms, SL_ROW_ABSENT);
    cr_assert_not(g->has_usage);
    cr_assert_eq(g->cost_micros, SL_ROW_ABSENT);
    cr_assert_eq(g->n_attempts, 0);
    sl_history_page_free(&page);
}

Test(recorder, history_pages_newest_first_through_the_cursor)
{
    sl_recorder_t *rec = open_with(NULL);
    /* Pairs share a start time, so the cursor must break ties by insertion. */
    for (uint64_t id = 1; id <= 25; id++)
        cr_assert(sl_recorder_submit(rec, make_row(id, 1000 + (int64_t)(id / 2), 2)));
    sl_recorder_close(rec);

    bool seen[26] = {false};
    char *cursor = NULL;
    size_t pages = 0, total = 0;
    int64_t prev_at = INT64_MAX;
    uint64_t prev_id = UINT64_MAX;
    do {
        sl_history_page_t page;
        sl_history_query_t q = {.limit = 10, .cursor = cursor};
        cr_assert(sl_recorder_history(db_path, &q, &page, err, sizeof err), "%s", err);
        free(cursor);
        cursor = page.next_cursor ? sl_xstrdup(page.next_cursor) : NULL;
        for (size_t i = 0; i < page.n; i++) {
            const sl_request_row_t *r = page.rows[i];
            cr_assert(r->started_at_ms < prev_at || (r->started_at_ms == prev_at && r->id < prev_id),
                      "newest first");
            prev_at = r->started_at_ms;
            prev_id = r->id;
            cr_assert_not(seen[r->id], "row %llu twice", (unsigned long long)r->id);
            seen[r->id] = true;
            cr_assert_eq(r->n_attempts, 2);
            cr_assert_eq(r->attempts[1].outcome, SL_ROW_HOP_SERVED);
        }
        total += page.n;
        pages++;
        cr_assert_eq(page.n, pages < 3 ? 10 : 5);
        sl_history_page_free(&page);
    } while (cursor != NULL);
    cr_assert_eq(pages, 3);
    cr_assert_eq(total, 25);
}

Test(recorder, history_filters_by_since_client_provider_model_status)
{
    sl_recorder_t *rec = open_with(NULL);
    for (uint64_t id = 1; id <= 8; id++) {
        sl_request_row_t *r = make_row(id, (int64_t)id * 1000, 1);
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
        cr_assert(sl_recorder_submit(rec, r));
    }
    sl_recorder_close(rec);

    static const struct {
        sl_history_query_t q;
        size_t n;
        uint64_t newest;
    } cases[] = {
        {{.since_ms = 0}, 8, 8},       {{.since_ms = 6000}, 3, 8},
        {{.client = "team-a"}, 4, 7},  {{.client = "team-b", .status = 429}, 2, 8},
        {{.provider = "relay"}, 2, 8}, {{.model = "claude-sonnet-4", .since_ms = 3000}, 4, 7},
        {{.status = 503}, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_history_page_t page;
        sl_history_query_t q = cases[i].q;
        q.since_ms += base_ms; /* the table's since_ms is relative to it, like make_row's times */
        cr_assert(sl_recorder_history(db_path, &q, &page, err, sizeof err), "%s", err);
        cr_assert_eq(page.n, cases[i].n, "case %zu: %zu rows", i, page.n);
        if (page.n > 0)
            cr_assert_eq(page.rows[0]->id, cases[i].newest, "case %zu", i);
        sl_history_page_free(&page);
    }
}

Test(recorder, history_refuses_a_malformed_cursor)
{
    sl_recorder_close(open_with(NULL));
    static const char *const bad[] = {"", "abc", "12", "12-", "-5-3", "12-x", "12-3-4", "12--3", "+1-2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_history_page_t page;
        err[0] = '\0';
        cr_assert_not(
            sl_recorder_history(db_path, &(sl_history_query_t){.cursor = bad[i]}, &page, err, sizeof err),
            "cursor '%s' accepted", bad[i]);
        cr_assert_eq(page.n, 0);
        cr_assert_null(page.rows);
        cr_assert_not_null(strstr(err, "cursor"), "%s", err);
    }
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
    cr_assert_eq(query_int("SELECT count(*) FROM attempts"), (int64_t)s.written);
}

Test(recorder, row_with_an_enum_out_of_range_is_a_counted_drop)
{
    sl_recorder_t *rec = open_with(NULL);
    sl_request_row_t *bad_outcome = make_row(1, 1000, 1);
    bad_outcome->outcome = SL_ROW_OUTCOME_COUNT;
    sl_request_row_t *bad_skip = make_row(2, 1000, 1);
    bad_skip->attempts[0].skipped = SL_ROW_SKIP_COUNT;
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

Test(recorder, newer_schema_is_refused_untouched)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "CREATE TABLE future (x); PRAGMA user_version = 2", NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);

    err[0] = '\0';
    cr_assert_null(sl_recorder_open(db_path, NULL, err, sizeof err));
    cr_assert_not_null(strstr(err, "schema version 2"), "%s", err);
    cr_assert_not_null(strstr(err, "newer"), "%s", err);
    cr_assert_eq(query_int("PRAGMA user_version"), 2);
    cr_assert_eq(query_int("SELECT count(*) FROM sqlite_master WHERE name = 'requests'"), 0);
    cr_assert_eq(query_int("SELECT count(*) FROM pragma_journal_mode WHERE journal_mode = 'wal'"), 0,
                 "the journal mode was changed");

    sl_history_page_t page;
    cr_assert_not(sl_recorder_history(db_path, &(sl_history_query_t){0}, &page, err, sizeof err));
}

Test(recorder, a_file_that_is_not_a_db_is_refused)
{
    FILE *f = fopen(db_path, "w");
    cr_assert_not_null(f);
    fputs("this is not an SQLite database, only some text that is long enough to have a header", f);
    fclose(f);
    err[0] = '\0';
    cr_assert_null(sl_recorder_open(db_path, NULL, err, sizeof err));
    cr_assert_not_null(strstr(err, db_path), "%s", err);
}

Test(recorder, missing_directory_is_a_clear_error)
{
    char path[160];
    snprintf(path, sizeof path, "%s/no/such/dir/sluice.db", dir);
    err[0] = '\0';
    cr_assert_null(sl_recorder_open(path, NULL, err, sizeof err));
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
    cr_assert_eq(s.last_error, SQLITE_BUSY);
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
    cr_assert_eq(s.last_error, SQLITE_FULL);
    /* The recorder lives on: usage that does not fit either is counted, not fatal. */
    sl_recorder_add_usage(rec, SL_BUCKET_CLIENT, "team-a", 1, 1, 1, 1);
    sl_recorder_close(rec);
    cr_assert_eq(query_int("SELECT count(*) FROM requests"), (int64_t)s.written);
}

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
    cr_assert_eq(sl_recorder_load_usage(db_path, m * 60000, on_bucket, &seen, err, sizeof err), 3, "%s", err);
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
    cr_assert_eq(sl_recorder_load_usage(db_path, (m + 1) * 60000 + 30000, on_bucket, &seen, err, sizeof err),
                 1);
    cr_assert_eq(seen.b[0].minute, m + 1);
}

Test(recorder, load_usage_of_a_missing_db_is_an_error)
{
    buckets_seen_t seen = {0};
    err[0] = '\0';
    cr_assert_eq(sl_recorder_load_usage(db_path, 0, on_bucket, &seen, err, sizeof err), -1);
    cr_assert_neq(err[0], '\0');
    cr_assert_eq(seen.n, 0);
}

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
    cr_assert_eq(query_int("SELECT count(*) FROM attempts"), 2, "the old rows' attempts went with them");
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
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    static const char *const tables[] = {"requests", "attempts"};
    size_t cells = 0;
    for (size_t t = 0; t < 2; t++) {
        char sql[64];
        snprintf(sql, sizeof sql, "SELECT * FROM %s", tables[t]);
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
        while (sqlite3_step(st) == SQLITE_ROW) {
            for (int c = 0; c < sqlite3_column_count(st); c++) {
                const char *v = (const char *)sqlite3_column_text(st, c);
                for (size_t k = 0; v != NULL && k < sizeof secrets / sizeof secrets[0]; k++)
                    cr_assert_null(strstr(v, secrets[k]), "%s.%s holds a credential: %s", tables[t],
                                   sqlite3_column_name(st, c), v);
                cells++;
            }
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    cr_assert_gt(cells, 20);

    sl_history_page_t page;
    cr_assert(sl_recorder_history(db_path, &(sl_history_query_t){0}, &page, err, sizeof err), "%s", err);
    cr_assert_not_null(strstr(page.rows[0]->error.text, "sk-ant-…0123"), "%s", page.rows[0]->error.text);
    cr_assert_not_null(strstr(page.rows[0]->attempts[0].error.args[0].value, "sk-proj-…9876"));
    sl_history_page_free(&page);
}

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

Test(rules, plan_batches_rows_flushes_usage_and_sweeps_when_due)
{
    static const struct {
        const char *name;
        sl_recorder_state_t s;
        int64_t now;
        sl_recorder_plan_t want;
    } cases[] = {
        {"idle: sleep until the sweep", {.sweep_at_ms = 5000}, 1000, {.wake_ms = 5000}},
        {"a young row waits for its batch",
         {.queued = 3, .oldest_ms = 1000, .sweep_at_ms = 9000},
         1020,
         {.wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"a row that waited the delay is written",
         {.queued = 3, .oldest_ms = 1000, .sweep_at_ms = 9000},
         1000 + SL_RECORDER_BATCH_DELAY_MS,
         {.write_rows = 3, .wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"a full batch is written at once, one batch at a time",
         {.queued = 600, .oldest_ms = 1000, .sweep_at_ms = 9000},
         1000,
         {.write_rows = 512, .wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"a flush writes young rows and usage now",
         {.queued = 2,
          .oldest_ms = 1000,
          .usage_pending = true,
          .usage_flushed_ms = 900,
          .sweep_at_ms = 9000,
          .flush_wanted = true},
         1001,
         {.write_rows = 2, .flush_usage = true, .wake_ms = 1000 + SL_RECORDER_BATCH_DELAY_MS}},
        {"usage waits for its second",
         {.usage_pending = true, .usage_flushed_ms = 1000, .sweep_at_ms = 9000},
         1999,
         {.wake_ms = 1000 + SL_RECORDER_USAGE_FLUSH_MS}},
        {"usage flushed after its second",
         {.usage_pending = true, .usage_flushed_ms = 1000, .sweep_at_ms = 9000},
         2000,
         {.flush_usage = true, .wake_ms = 2000}},
        {"no usage, no flush however old",
         {.usage_flushed_ms = 0, .sweep_at_ms = 90000},
         50000,
         {.wake_ms = 90000}},
        {"sweep when due", {.sweep_at_ms = 5000}, 5000, {.sweep = true, .wake_ms = 5000}},
        {"no sweep while closing",
         {.sweep_at_ms = 5000, .closing = true, .flush_wanted = true},
         6000,
         {.wake_ms = INT64_MAX}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_recorder_plan_t got = sl_recorder_plan(&cases[i].s, cases[i].now, 512);
        cr_assert_eq(got.write_rows, cases[i].want.write_rows, "%s: write %zu", cases[i].name,
                     got.write_rows);
        cr_assert_eq(got.flush_usage, cases[i].want.flush_usage, "%s: usage", cases[i].name);
        cr_assert_eq(got.sweep, cases[i].want.sweep, "%s: sweep", cases[i].name);
        cr_assert_eq(got.wake_ms, cases[i].want.wake_ms, "%s: wake %lld", cases[i].name,
                     (long long)got.wake_ms);
    }
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
