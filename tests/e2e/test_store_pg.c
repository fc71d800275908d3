/*
 * The request DB on PostgreSQL end to end (cluster.md "PostgreSQL request
 * DB"): the real sluice with store.url on a real PostgreSQL the test starts
 * itself (tests/e2e/pg_server.c), in front of fake upstreams. The rows are
 * the SQLite store's for the same traffic; PostgreSQL stopped mid-run, or
 * down while sluice is SIGKILLed, loses and doubles no row; refused
 * credentials are said, masked, and sluice serves on; two instances on one
 * database each show both in history.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake_upstream.h"
#include "harness.h"
#include "pg_server.h"

#define GATEWAY_KEY       "gw-test-key-0001"
#define ANTHROPIC_HEADERS "x-api-key: " GATEWAY_KEY "\r\nanthropic-version: 2023-06-01\r\n"
#define JSON_HEADER       "content-type: application/json\r\n"
#define BODY                                                                                                 \
    "{\"model\":\"claude-x\",\"max_tokens\":8,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":" \
    "\"hi\"}]}"
#define OVERLOADED "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"
#define RATE_LIMITED                                                                                         \
    "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow down\"}}"
#define BAD_REQUEST                                                                                          \
    "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"max_tokens: too "       \
    "big\"}}"

#define MAX_INSTANCES 2

static pg_server_t pg;
static fake_upstream_t *ups[MAX_INSTANCES];
static proc_t procs[MAX_INSTANCES];
static uint16_t ports[MAX_INSTANCES], control_ports[MAX_INSTANCES];
static char dir[64];

static int64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
setup(void)
{
    /* Backoffs and hinted pauses a tenth as long: the traffic below retries and waits. */
    setenv("SLUICE_TEST_TIME_SCALE", "0.1", 1);
    cr_assert(pg_start(&pg), "PostgreSQL must be installed (scripts/setup)");
    for (int i = 0; i < MAX_INSTANCES; i++)
        ups[i] = fake_start(NULL, NULL, false);
    snprintf(dir, sizeof(dir), "/tmp/sluice-pg-e2e-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void
teardown(void)
{
    for (int i = 0; i < MAX_INSTANCES; i++) {
        proc_kill(&procs[i]);
        fake_stop(ups[i]);
    }
    pg_stop(&pg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(store_pg, .init = setup, .fini = teardown, .timeout = 90);

static fake_reply_t
ok_stream(int delay_ms)
{
    return (fake_reply_t){.status = 200,
                          .headers = "content-type: text/event-stream\r\n",
                          .body = fixture("anthropic-ok.sse", NULL),
                          .chunked = true,
                          .delay_ms = delay_ms};
}

static fake_reply_t
status(int code, const char *headers, const char *body)
{
    return (fake_reply_t){.status = code, .headers = headers, .body = body};
}

/*
 * Starts instance i with store (a YAML mapping's fields: "url: ..." or
 * "path: ..."), two providers on its own fake (one, then two as the
 * fallback), and waits for its ports.
 */
static void
start_instance(int i, const char *store)
{
    char yaml[2048], path[160], sub[96];
    snprintf(sub, sizeof(sub), "%s/%c", dir, 'a' + i);
    cr_assert(mkdir(sub, 0700) == 0 || access(sub, F_OK) == 0);
    snprintf(yaml, sizeof(yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
             "providers:\n"
             "  - {name: one, protocol: anthropic, base_url: \"http://127.0.0.1:%u\", key: k1}\n"
             "  - {name: two, protocol: anthropic, base_url: \"http://127.0.0.1:%u\", key: k2}\n"
             "routes: [{match: \"claude-*\", failover: [one, two]}]\n"
             "failover: {wait_secs: 60}\n"
             "store: {%s}\n",
             fake_port(ups[i]), fake_port(ups[i]), store);
    snprintf(path, sizeof(path), "%s/sluice.yaml", sub);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(yaml, f);
    fclose(f);
    ports[i] = sluice_start(&procs[i], path, "info", "2");
    cr_assert_neq(ports[i], 0, "%s", procs[i].log);
    const char *at = strstr(procs[i].log, "control endpoint on ws://127.0.0.1:");
    cr_assert_not_null(at, "%s", procs[i].log);
    control_ports[i] = (uint16_t)atoi(at + strlen("control endpoint on ws://127.0.0.1:"));
}

static void
start_on_pg(int i, const char *url)
{
    char store[600];
    snprintf(store, sizeof(store), "url: \"%s\"", url);
    start_instance(i, store);
}

/* sluicectl's output (stdout) against instance i, in out; false when it failed. */
static bool
sluicectl_output(int i, const char *args, char *out, size_t size)
{
    const char *bin = getenv("SLUICECTL");
    cr_assert_not_null(bin, "SLUICECTL is not set");
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --port %u --key-file %s/%c/sluice.key --timeout 5 %s 2>&1", bin,
             control_ports[i], dir, 'a' + i, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    return pclose(p) == 0;
}

/* The value of an unlabelled sample on instance i's /metrics (with its generated control key), or -1. */
static long long
metric(int i, const char *name)
{
    char key_path[160], key[128] = "", headers[200];
    snprintf(key_path, sizeof(key_path), "%s/%c/sluice.key", dir, 'a' + i);
    FILE *f = fopen(key_path, "r");
    cr_assert_not_null(f, "%s", key_path);
    cr_assert_not_null(fgets(key, sizeof(key), f));
    fclose(f);
    key[strcspn(key, "\r\n")] = '\0';
    snprintf(headers, sizeof(headers), "authorization: Bearer %s\r\n", key);
    http_response_t res = {0};
    cr_assert(http_request_h(control_ports[i], "GET", "/metrics", headers, NULL, &res));
    cr_assert_eq(res.status, 200, "%.*s", (int)res.body_len, res.body);
    long long value = prom_sample(res.body, name);
    http_response_free(&res);
    return value;
}

static int
call(int i, const char *body)
{
    http_response_t res = {0};
    bool sent = http_request_h(ports[i], "POST", "/v1/messages", ANTHROPIC_HEADERS, body ? body : BODY, &res);
    int st = sent ? res.status : -1;
    http_response_free(&res);
    return st;
}

static long long
rows_in_pg(void)
{
    return pg_int(&pg, "SELECT count(*) FROM requests");
}

/* Waits until PostgreSQL holds want request rows; the count it last saw. */
static long long
wait_rows(long long want, int timeout_ms)
{
    long long n = -1;
    for (int64_t until = now_ms() + timeout_ms; now_ms() < until; usleep(50 * 1000)) {
        n = rows_in_pg();
        if (n == want)
            break;
    }
    return n;
}

/* Whether /healthz says the store is state within timeout_ms. */
static bool
store_health(int i, const char *state, int timeout_ms)
{
    char want[64];
    snprintf(want, sizeof(want), "\"store\":\"%s\"", state);
    for (int64_t until = now_ms() + timeout_ms; now_ms() < until; usleep(50 * 1000)) {
        http_response_t res = {0};
        bool got = http_request(ports[i], "GET", "/healthz", NULL, &res) && res.status == 200 &&
                   res.body != NULL && strstr(res.body, want) != NULL;
        http_response_free(&res);
        if (got)
            return true;
    }
    return false;
}

/* ---- the same rows as SQLite's ---------------------------------------------------------------- */

/*
 * The traffic both stores see: served; retried after a 529; failed over
 * after a 503; queued behind a 429; a request error handed back; a client
 * that leaves before the answer. Sequential, so each fake's script is
 * consumed in this order.
 */
static void
mixed_traffic(int i)
{
    fake_upstream_t *up = ups[i];
    fake_push(up, ok_stream(0));
    cr_assert_eq(call(i, NULL), 200);
    fake_push(up, status(529, JSON_HEADER, OVERLOADED));
    fake_push(up, status(529, JSON_HEADER, OVERLOADED));
    fake_push(up, ok_stream(0));
    cr_assert_eq(call(i, NULL), 200);
    fake_push(up, status(503, JSON_HEADER, OVERLOADED));
    fake_push(up, ok_stream(0));
    cr_assert_eq(call(i, NULL), 200);
    fake_push(up, status(429, JSON_HEADER "retry-after-ms: 3000\r\n", RATE_LIMITED));
    fake_push(up, ok_stream(0));
    cr_assert_eq(call(i, NULL), 200);
    fake_push(up, status(400, JSON_HEADER, BAD_REQUEST));
    cr_assert_eq(call(i, NULL), 400);
    /* The client leaves while the upstream takes its time. */
    fake_push(up, ok_stream(400));
    int fd = raw_post(ports[i], 0, "/v1/messages", ANTHROPIC_HEADERS, BODY);
    cr_assert_geq(fd, 0);
    cr_assert(fake_wait_count(up, 9, 5000));
    close(fd);
}

/* What a HistoryRow says of a request that does not depend on timing, one line per row, oldest first. */
static void
canonical_history(int i, char *out, size_t size)
{
    static char text[1 << 16];
    cr_assert(sluicectl_output(i, "history --json", text, sizeof(text)), "%s", text);
    /* Newest first in the output: collected, then written oldest first. */
    char *lines[32];
    size_t n = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line != NULL && n < 32;
         line = strtok_r(NULL, "\n", &save))
        lines[n++] = line;
    out[0] = '\0';
    size_t len = 0;
    for (size_t k = n; k-- > 0;) {
        json_t *row = json_loads(lines[k], 0, NULL);
        cr_assert_not_null(row, "%s", lines[k]);
        len += (size_t)snprintf(out + len, size - len, "id=%lld status=%lld provider=%s model=%s client=%s",
                                json_integer_value(json_object_get(row, "id")),
                                json_integer_value(json_object_get(row, "status")),
                                json_string_value(json_object_get(row, "provider")),
                                json_string_value(json_object_get(row, "model")),
                                json_string_value(json_object_get(row, "client")));
        size_t j;
        json_t *a;
        json_array_foreach(json_object_get(row, "attempts"), j, a)
        {
            json_t *err = json_object_get(a, "error");
            len += (size_t)snprintf(out + len, size - len, " [%s %s %lld %s r%lld %s]",
                                    json_string_value(json_object_get(a, "provider")),
                                    json_string_value(json_object_get(a, "outcome")),
                                    json_integer_value(json_object_get(a, "status")),
                                    err != NULL ? json_string_value(json_object_get(err, "code")) : "-",
                                    json_integer_value(json_object_get(a, "retry")),
                                    json_is_string(json_object_get(a, "reason"))
                                        ? json_string_value(json_object_get(a, "reason"))
                                        : "-");
        }
        len += (size_t)snprintf(out + len, size - len, "\n");
        json_decref(row);
    }
}

Test(store_pg, rows_are_the_same_as_the_sqlite_stores_for_the_same_traffic)
{
    char sqlite_path[128], sqlite_store[160];
    snprintf(sqlite_path, sizeof(sqlite_path), "%s/a/sluice.db", dir);
    snprintf(sqlite_store, sizeof(sqlite_store), "path: %s", sqlite_path);
    start_instance(0, sqlite_store);
    start_on_pg(1, pg.url);
    mixed_traffic(0);
    mixed_traffic(1);
    cr_assert_eq(wait_rows(6, 10000), 6, "%s", procs[1].log);
    for (int64_t until = now_ms() + 5000; db_int(sqlite_path, "SELECT count(*) FROM requests") != 6;) {
        cr_assert_lt(now_ms(), until, "the SQLite store has every row");
        usleep(50 * 1000);
    }

    static char from_sqlite[16384], from_pg[16384];
    canonical_history(0, from_sqlite, sizeof(from_sqlite));
    canonical_history(1, from_pg, sizeof(from_pg));
    cr_assert_str_eq(from_pg, from_sqlite, "PostgreSQL:\n%s\nSQLite:\n%s", from_pg, from_sqlite);
    cr_assert_not_null(strstr(from_pg, "served 200 - r2"), "the request retried twice is there: %s", from_pg);
    cr_assert_not_null(strstr(from_pg, "client_left"), "and the one whose client left: %s", from_pg);

    /* What the HistoryRow leaves out is stored alike too: outcome, path, error code. */
    for (int id = 1; id <= 6; id++) {
        static const char *const cols[] = {"outcome", "path", "coalesce(error_code, '-')"};
        for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++) {
            char sql[128], in_sqlite[256], in_pg[256];
            snprintf(sql, sizeof(sql), "SELECT %s FROM requests WHERE id = %d", cols[c], id);
            cr_assert(db_text(sqlite_path, sql, in_sqlite, sizeof(in_sqlite)), "%s", sql);
            cr_assert(pg_str(&pg, sql, in_pg, sizeof(in_pg)), "%s", sql);
            cr_assert_str_eq(in_pg, in_sqlite, "%s", sql);
        }
    }
}

/* ---- PostgreSQL down ------------------------------------------------------------------------- */

Test(store_pg, postgresql_stopped_mid_run_then_started_every_row_arrives_once)
{
    start_on_pg(0, pg.url);
    fake_set_default(ups[0], ok_stream(0));
    for (int k = 0; k < 20; k++)
        cr_assert_eq(call(0, NULL), 200);
    cr_assert_eq(wait_rows(20, 5000), 20);
    cr_assert(store_health(0, "ok", 1000));

    cr_assert(pg_halt(&pg));
    for (int k = 0; k < 20; k++)
        cr_assert_eq(call(0, NULL), 200, "sluice serves while its DB is down");
    cr_assert(store_health(0, "degraded", 5000), "%s", procs[0].log);
    /* Degraded at the first failed write; the writer spools the rest as it reaches them. */
    char out[4096];
    for (int64_t until = now_ms() + 5000; now_ms() < until; usleep(50 * 1000)) {
        cr_assert(sluicectl_output(0, "providers", out, sizeof(out)), "%s", out);
        if (strstr(out, "20 rows spooled") != NULL)
            break;
    }
    cr_assert_not_null(strstr(out, "request DB: postgres, degraded"), "%s", out);
    cr_assert_not_null(strstr(out, "20 rows spooled"), "%s", out);
    cr_assert_eq(metric(0, "sluice_db_rows_spooled"), 20);
    cr_assert_gt(metric(0, "sluice_db_spool_bytes"), 0);

    cr_assert(pg_restart(&pg));
    cr_assert_eq(wait_rows(40, 15000), 40, "%s", procs[0].log);
    cr_assert(store_health(0, "ok", 5000));
    cr_assert_eq(pg_int(&pg, "SELECT count(DISTINCT id) FROM requests"), 40, "none twice");
    cr_assert_eq(pg_int(&pg, "SELECT sum(json_array_length(attempts)) FROM requests"), 40);
    cr_assert(proc_wait_log(&procs[0], "PostgreSQL is back", 1000), "%s", procs[0].log);
    cr_assert(sluicectl_output(0, "providers", out, sizeof(out)), "%s", out);
    cr_assert_not_null(strstr(out, "request DB: postgres, ok"), "%s", out);
    cr_assert_eq(metric(0, "sluice_db_rows_spooled"), 0);
    cr_assert_eq(metric(0, "sluice_db_spool_bytes"), 0);
}

Test(store_pg, sluice_killed_while_postgresql_is_down_every_row_arrives_after_both_restart)
{
    start_on_pg(0, pg.url);
    fake_set_default(ups[0], ok_stream(0));
    for (int k = 0; k < 5; k++)
        cr_assert_eq(call(0, NULL), 200);
    cr_assert_eq(wait_rows(5, 5000), 5);
    cr_assert(pg_halt(&pg));
    for (int k = 0; k < 10; k++)
        cr_assert_eq(call(0, NULL), 200);
    /* The rows reach the spool within a batch's delay; then sluice dies without a word. */
    char out[4096] = "";
    for (int64_t until = now_ms() + 5000; now_ms() < until; usleep(50 * 1000)) {
        if (sluicectl_output(0, "providers", out, sizeof(out)) && strstr(out, "10 rows spooled") != NULL)
            break;
    }
    cr_assert_not_null(strstr(out, "10 rows spooled"), "%s", out);
    kill(procs[0].pid, SIGKILL);
    proc_wait_exit(&procs[0], 5000);

    cr_assert(pg_restart(&pg));
    char path[160];
    snprintf(path, sizeof(path), "%s/a/sluice.yaml", dir);
    ports[0] = sluice_start(&procs[0], path, "info", "2");
    cr_assert_neq(ports[0], 0, "%s", procs[0].log);
    cr_assert(proc_wait_log(&procs[0], "10 row(s) a previous run spooled", 1000), "%s", procs[0].log);
    cr_assert_eq(wait_rows(15, 10000), 15, "%s", procs[0].log);
    cr_assert_eq(pg_int(&pg, "SELECT count(DISTINCT boot_id) FROM requests"), 1,
                 "all of the first run's: the second served nothing yet");
    cr_assert_eq(call(0, NULL), 200);
    cr_assert_eq(wait_rows(16, 5000), 16);
}

Test(store_pg, refused_credentials_are_a_clear_masked_error_and_sluice_still_serves)
{
    char url[256];
    snprintf(url, sizeof(url), "postgres://sluice:not-the-password-77@127.0.0.1:%u/sluice", pg.port);
    start_on_pg(0, url);
    fake_set_default(ups[0], ok_stream(0));
    cr_assert_eq(call(0, NULL), 200);
    cr_assert(proc_wait_log(&procs[0], "password authentication failed", 5000), "%s", procs[0].log);
    cr_assert(store_health(0, "degraded", 2000));
    cr_assert_null(strstr(procs[0].log, "not-the-password-77"), "the password is never logged: %s",
                   procs[0].log);
    cr_assert_not_null(strstr(procs[0].log, "postgres://sluice:…@127.0.0.1"), "%s", procs[0].log);
    char out[4096];
    cr_assert(sluicectl_output(0, "providers --json", out, sizeof(out)), "%s", out);
    cr_assert_null(strstr(out, "not-the-password-77"), "%s", out);
    cr_assert(sluicectl_output(0, "config get", out, sizeof(out)), "%s", out);
    cr_assert_null(strstr(out, "not-the-password-77"), "get_config masks it: %s", out);
    cr_assert_eq(rows_in_pg(), -1, "no table: nothing could be created");
}

/* ---- several instances --------------------------------------------------------------------- */

Test(store_pg, two_instances_on_one_database_each_show_both_in_history)
{
    /* One over TCP, one over the unix socket. */
    char socket_url[512];
    cr_assert(pg_socket_url(&pg, socket_url, sizeof(socket_url)));
    start_on_pg(0, pg.url);
    start_on_pg(1, socket_url);
    for (int i = 0; i < 2; i++)
        fake_set_default(ups[i], ok_stream(0));
    for (int k = 0; k < 3; k++)
        cr_assert_eq(call(0, NULL), 200);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(call(1, NULL), 200);
    cr_assert_eq(wait_rows(5, 5000), 5);
    cr_assert_eq(pg_int(&pg, "SELECT count(DISTINCT instance) FROM requests"), 2);
    for (int i = 0; i < 2; i++) {
        static char out[16384];
        cr_assert(sluicectl_output(i, "history --json", out, sizeof(out)), "%s", out);
        size_t rows = 0;
        char first_instance[128] = "";
        bool two = false;
        for (char *save = NULL, *line = strtok_r(out, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            json_t *row = json_loads(line, 0, NULL);
            cr_assert_not_null(row, "%s", line);
            const char *inst = json_string_value(json_object_get(row, "instance"));
            cr_assert_not_null(inst, "%s", line);
            if (first_instance[0] == '\0')
                snprintf(first_instance, sizeof(first_instance), "%s", inst);
            else if (strcmp(first_instance, inst) != 0)
                two = true;
            rows++;
            json_decref(row);
        }
        cr_assert_eq(rows, 5, "instance %d sees every instance's rows", i);
        cr_assert(two, "rows of both instances");
        char text[8192];
        cr_assert(sluicectl_output(i, "history", text, sizeof(text)), "%s", text);
        cr_assert_not_null(strstr(text, "INSTANCE"), "%s", text);
    }
}
