/*
 * A real PostgreSQL for end-to-end tests: a cluster the test initdb's itself
 * in a temporary directory and runs on a free 127.0.0.1 port (and a Unix
 * socket in that directory), never the system's service or its data. Every
 * wait is bounded.
 *
 * Password authentication (scram-sha-256) is on for TCP and the socket alike,
 * so a wrong password is refused. Two roles: the superuser "postgres", used
 * by pg_int, pg_str and pg_exec, and "sluice", the owner of the database
 * "sluice", which url names. Passwords are random per pg_start.
 *
 * initdb and postgres refuse to run as root: when the test is root they run
 * as the system user "postgres" (which must exist) and the directory is
 * theirs; otherwise they run as the test's user.
 *
 * Zero-initialise the struct (or let pg_start fill it) and do not copy it: the
 * pid is reaped by the copy that stops it. Call pg_start and pg_restart from a
 * thread that outlives the server (the test's own): the server is killed when
 * that thread's process or thread ends, so a crashed or timed-out test leaves
 * no postgres behind (its directory stays in $TMPDIR, or /tmp, as
 * sluice-pg-*).
 */
#ifndef TEST_PG_SERVER_H
#define TEST_PG_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;     /* the postmaster; 0 when not running */
    uint16_t port; /* chosen by pg_start, kept by pg_restart */
    char dir[256]; /* the temporary directory: data/, sock/, postgres.log, initdb.log; "" once removed */
    char url[256]; /* postgres://sluice:PASSWORD@127.0.0.1:PORT/sluice */
    char socket_dir[300];    /* DIR/sock, where postgres puts .s.PGSQL.PORT */
    char password[64];       /* the role sluice's */
    char admin_password[64]; /* the superuser postgres's */
} pg_server_t;

/*
 * Finds PostgreSQL ($PG_BINDIR, else the newest /usr/lib/postgresql/N/bin,
 * else initdb's directory on PATH), runs initdb, starts postgres and waits up
 * to 10 s until it accepts connections, then creates the role and database
 * sluice. False, with the reason on stderr, when it is not installed or did
 * not come up; p is then left stopped and removed (pg_stop is still safe).
 */
bool pg_start(pg_server_t *p);
/*
 * Stops it (fast shutdown: SIGINT; SIGKILL after 5 s) and removes its
 * directory. Safe twice, or after a failed start or pg_kill.
 */
void pg_stop(pg_server_t *p);
/*
 * SIGKILL, reaped: a crash. Returns once its backends are gone too (they
 * notice the postmaster's death on their own; bounded at 5 s), so no
 * connection to it answers any more. Port and directory are kept for
 * pg_restart, which then runs crash recovery.
 */
void pg_kill(pg_server_t *p);
/*
 * Fast shutdown (SIGINT: sessions are ended, a checkpoint written), keeping
 * port and data for pg_restart: "PostgreSQL stopped mid-run". False when it
 * was not running, or did not stop within 5 s and was killed.
 */
bool pg_halt(pg_server_t *p);
/*
 * Starts it again on the same port and data (after a fast shutdown first if it
 * is running) and waits up to 10 s until it accepts connections.
 */
bool pg_restart(pg_server_t *p);

/*
 * The URL of the role sluice over the Unix socket:
 * postgres://sluice:PASSWORD@/sluice?host=SOCKET_DIR&port=PORT. False when it
 * does not fit in size (out is then "").
 */
bool pg_socket_url(const pg_server_t *p, char *out, size_t size);

/*
 * One SQL string (several statements run as one implicit transaction) as the
 * superuser in the database sluice, on a cached connection (2 s connect
 * timeout, 5 s statement_timeout); a connection found closed or failing is
 * dropped and the next call connects afresh. Failures are printed on stderr.
 */
/* The first column of the first row as an integer; -1 on an error, no row, NULL or a non-integer. */
long long pg_int(pg_server_t *p, const char *sql);
/* The first column of the first row as text into out (cut to size - 1); false on error, no row or NULL. */
bool pg_str(pg_server_t *p, const char *sql, char *out, size_t size);
/* True when it ran without an error (with or without rows). */
bool pg_exec(pg_server_t *p, const char *sql);

#endif
