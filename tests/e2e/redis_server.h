/*
 * A real Redis for end-to-end tests: a redis-server the test starts itself on
 * a free 127.0.0.1 port with a temporary directory, no config file and
 * nothing persisted unless asked. Every wait is bounded.
 *
 * Zero-initialise the struct (or let redis_start fill it) and do not copy it:
 * the pid is reaped by the copy that stops it. Call redis_start and
 * redis_restart from a thread that outlives the server (the test's own): the
 * server is killed when that thread's process or thread ends, so a crashed or
 * timed-out test leaves no redis-server behind.
 */
#ifndef TEST_REDIS_SERVER_H
#define TEST_REDIS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t pid; /* 0 when not running */
    uint16_t port;
    char dir[256]; /* the temporary directory: redis.log, dump.rdb; "" once removed */
    char url[128]; /* redis://127.0.0.1:PORT/0 */
} redis_server_t;

/*
 * Starts redis-server ($REDIS_SERVER, else found on PATH) and waits up to 5 s
 * for PING. False, with the reason on stderr, when it is not installed or did
 * not come up; r is then left stopped (redis_stop is still safe).
 */
bool redis_start(redis_server_t *r);
/* Stops it (SIGTERM, SIGKILL after 3 s) and removes its directory. Safe twice, or after a failed start. */
void redis_stop(redis_server_t *r);
/* SIGKILL, reaped; the port and directory are kept for redis_restart. */
void redis_kill(redis_server_t *r);
/*
 * Stops it and starts it again on the same port and directory, waiting up to
 * 5 s for PING. keep_data: SAVE first and load that RDB again (after
 * redis_kill, the last SAVE's, if any); else it comes back empty. Command
 * statistics start from zero either way.
 */
bool redis_restart(redis_server_t *r, bool keep_data);
/* SIGSTOP, returning once it is stopped: connections still open, nothing answers. */
void redis_freeze(redis_server_t *r);
/* SIGCONT. A command that timed out while frozen may still run now: it was in the socket. */
void redis_thaw(redis_server_t *r);

/*
 * One command (redisCommand's format: %s, %b, so no printf checking) on a
 * cached blocking connection with a 2 s timeout; a connection found closed or
 * failing is dropped and the next command connects afresh. Failures are
 * printed on stderr.
 */
/* Its integer reply, or a string reply parsed as one; -1 on an error, nil or anything else. */
long long redis_int(redis_server_t *r, const char *fmt, ...);
/* Its string, status or integer reply into out (truncated to size - 1); false on an error or nil. */
bool redis_str(redis_server_t *r, char *out, size_t size, const char *fmt, ...);
/*
 * The sum of INFO commandstats calls of every command but those named in
 * except (NULL-terminated, or NULL itself), lowercase as INFO shows them; a
 * name without '|' also covers its subcommands ("config" covers "config|get").
 * This function's own INFO counts in the next call's "info". -1 on error.
 */
long long redis_calls(redis_server_t *r, const char *const *except);

#endif
