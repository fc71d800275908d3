#define _GNU_SOURCE /* pipe2, close_range */
#include "redis_server.h"

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_TIMEOUT_MS 5000
#define STOP_TIMEOUT_MS  3000
#define CMD_TIMEOUT_MS   2000
#define START_ATTEMPTS   5
#define DB_FILE          "dump.rdb"

static long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static struct timeval
tv_ms(long ms)
{
    return (struct timeval){ms / 1000, (ms % 1000) * 1000};
}

/* ---- the connection cache ---- */

/*
 * The struct has no room for a connection, so they live here, one per running
 * server (keyed by its pid, which changes on every restart), behind one lock:
 * tests may query from several threads.
 */
typedef struct {
    pid_t owner; /* getpid() of the process that connected: a fork's copy is not ours to use */
    pid_t server;
    uint16_t port;
    redisContext *c;
} conn_t;

static conn_t conns[8];
static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;

static void
conn_drop(conn_t *k)
{
    if (k->c != NULL)
        redisFree(k->c);
    memset(k, 0, sizeof(*k));
}

/* Drops the server's connection; before anything that ends or replaces the process. */
static void
conn_forget(const redis_server_t *r)
{
    pthread_mutex_lock(&conns_lock);
    for (size_t i = 0; i < sizeof(conns) / sizeof(conns[0]); i++)
        if (conns[i].c != NULL && conns[i].server == r->pid && conns[i].port == r->port)
            conn_drop(&conns[i]);
    pthread_mutex_unlock(&conns_lock);
}

/* An idle connection that is readable was closed by the server (or holds garbage): not reusable. */
static bool
conn_alive(redisContext *c)
{
    struct pollfd pfd = {c->fd, POLLIN, 0};
    return c->err == 0 && poll(&pfd, 1, 0) == 0;
}

/* The cached connection for r, or a fresh one; NULL (reason printed) when it cannot connect. Lock held. */
static conn_t *
conn_get(const redis_server_t *r)
{
    conn_t *free_slot = NULL;
    for (size_t i = 0; i < sizeof(conns) / sizeof(conns[0]); i++) {
        conn_t *k = &conns[i];
        if (k->c != NULL && k->owner != getpid())
            memset(k, 0, sizeof(*k)); /* the parent's socket: leave it open for the parent */
        if (k->c != NULL && k->server == r->pid && k->port == r->port) {
            if (conn_alive(k->c))
                return k;
            conn_drop(k);
        }
        if (k->c == NULL && free_slot == NULL)
            free_slot = k;
    }
    if (free_slot == NULL) { /* more servers than slots: evict one, it reconnects when used */
        free_slot = &conns[0];
        conn_drop(free_slot);
    }
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv_ms(CMD_TIMEOUT_MS));
    if (c == NULL || c->err != 0 || redisSetTimeout(c, tv_ms(CMD_TIMEOUT_MS)) != REDIS_OK) {
        fprintf(stderr, "redis_server: connecting to 127.0.0.1:%u: %s\n", r->port,
                c != NULL ? c->errstr : "out of memory");
        if (c != NULL)
            redisFree(c);
        return NULL;
    }
    *free_slot = (conn_t){getpid(), r->pid, r->port, c};
    return free_slot;
}

/* Runs one command; the reply (free it) or NULL, printed. An error reply is returned, not printed. */
static redisReply *
command(redis_server_t *r, const char *fmt, va_list ap)
{
    if (r->port == 0) {
        fprintf(stderr, "redis_server: not started\n");
        return NULL;
    }
    pthread_mutex_lock(&conns_lock);
    redisReply *reply = NULL;
    conn_t *k = conn_get(r);
    if (k != NULL) {
        reply = redisvCommand(k->c, fmt, ap);
        if (reply == NULL) {
            /* A timeout or a dropped connection leaves the protocol state unknown: never reuse it. */
            fprintf(stderr, "redis_server: 127.0.0.1:%u: %s\n", r->port,
                    k->c->err != 0 ? k->c->errstr : "no reply");
            conn_drop(k);
        }
    }
    pthread_mutex_unlock(&conns_lock);
    return reply;
}

static bool
parse_ll(const char *s, size_t len, long long *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    *out = strtoll(buf, &end, 10);
    return errno == 0 && *end == '\0';
}

static long long
reply_int(redisReply *reply)
{
    long long v = -1;
    if (reply == NULL)
        return -1;
    if (reply->type == REDIS_REPLY_INTEGER)
        v = reply->integer;
    else if ((reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS) &&
             !parse_ll(reply->str, reply->len, &v))
        v = -1;
    else if (reply->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "redis_server: %s\n", reply->str);
    freeReplyObject(reply);
    return v;
}

long long
redis_int(redis_server_t *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *reply = command(r, fmt, ap);
    va_end(ap);
    return reply_int(reply);
}

static bool
reply_str(redisReply *reply, char *out, size_t size)
{
    bool ok = false;
    if (reply == NULL)
        return false;
    if (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS) {
        if (size > 0) {
            size_t n = reply->len < size - 1 ? reply->len : size - 1;
            memcpy(out, reply->str, n);
            out[n] = '\0';
        }
        ok = true;
    } else if (reply->type == REDIS_REPLY_INTEGER) {
        if (size > 0)
            snprintf(out, size, "%lld", reply->integer);
        ok = true;
    } else if (reply->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "redis_server: %s\n", reply->str);
    }
    freeReplyObject(reply);
    return ok;
}

bool
redis_str(redis_server_t *r, char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *reply = command(r, fmt, ap);
    va_end(ap);
    return reply_str(reply, out, size);
}

/* Runs a command given as a fixed string (no format arguments). */
static redisReply *
command0(redis_server_t *r, const char *cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    redisReply *reply = command(r, cmd, ap);
    va_end(ap);
    return reply;
}

static bool
excepted(const char *name, size_t len, const char *const *except)
{
    /* "config" also covers "config|get": Redis 7 counts subcommands apart. */
    const char *bar = memchr(name, '|', len);
    size_t base = bar != NULL ? (size_t)(bar - name) : len;
    for (; except != NULL && *except != NULL; except++) {
        size_t n = strlen(*except);
        if ((n == len || n == base) && strncasecmp(*except, name, n) == 0)
            return true;
    }
    return false;
}

long long
redis_calls(redis_server_t *r, const char *const *except)
{
    redisReply *reply = command0(r, "INFO commandstats");
    if (reply == NULL)
        return -1;
    if (reply->type != REDIS_REPLY_STRING) {
        if (reply->type == REDIS_REPLY_ERROR)
            fprintf(stderr, "redis_server: %s\n", reply->str);
        freeReplyObject(reply);
        return -1;
    }
    /* Lines of "cmdstat_<name>:calls=<n>,usec=...". */
    long long sum = 0;
    for (const char *line = reply->str; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        if (strncmp(line, "cmdstat_", 8) == 0) {
            const char *name = line + 8;
            const char *colon = strchr(name, ':');
            if (colon == NULL || (eol != NULL && colon > eol) || strncmp(colon, ":calls=", 7) != 0) {
                sum = -1;
                break;
            }
            if (!excepted(name, (size_t)(colon - name), except))
                sum += strtoll(colon + 7, NULL, 10);
        }
        line = eol != NULL ? eol + 1 : NULL;
    }
    freeReplyObject(reply);
    return sum;
}

/* ---- the process ---- */

/* A port free on 127.0.0.1 now; 0 on failure. Another process may take it before redis binds: retried. */
static uint16_t
free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    uint16_t port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* The redis-server to run: $REDIS_SERVER, else the first on PATH; false (printed) when there is none. */
static bool
find_binary(char *out, size_t size)
{
    const char *env = getenv("REDIS_SERVER");
    if (env != NULL && *env != '\0') {
        if (access(env, X_OK) == 0) {
            snprintf(out, size, "%s", env);
            return true;
        }
        fprintf(stderr, "redis_server: REDIS_SERVER=%s is not executable: %s\n", env, strerror(errno));
        return false;
    }
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p != '\0';) {
        size_t n = strcspn(p, ":");
        if (n > 0 && (size_t)snprintf(out, size, "%.*s/redis-server", (int)n, p) < size &&
            access(out, X_OK) == 0)
            return true;
        p += n;
        if (*p == ':')
            p++;
    }
    fprintf(stderr, "redis_server: redis-server is not installed (not on PATH; set REDIS_SERVER)\n");
    return false;
}

/* Reaps pid within timeout_ms (0: only if it already ended); true when it is gone. */
static bool
reap(pid_t pid, long timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    for (;;) {
        pid_t w = waitpid(pid, NULL, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD)) /* ECHILD: SIGCHLD ignored, reaped already */
            return true;
        if (w < 0 && errno != EINTR)
            return false;
        if (now_ms() >= deadline)
            return false;
        sleep_ms(5);
    }
}

static void
kill_and_reap(redis_server_t *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    r->pid = 0;
}

/* SIGTERM (it saves nothing: no save points), SIGKILL after STOP_TIMEOUT_MS. */
static void
terminate(redis_server_t *r)
{
    conn_forget(r);
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGTERM);
    kill(r->pid, SIGCONT); /* a frozen server handles SIGTERM only once running */
    if (reap(r->pid, STOP_TIMEOUT_MS))
        r->pid = 0;
    else
        kill_and_reap(r);
}

typedef enum { LAUNCH_UP, LAUNCH_EXITED, LAUNCH_FAILED } launch_t;

/*
 * Forks redis-server on r->port and r->dir and waits until deadline for PING.
 * LAUNCH_EXITED: it ended early (most likely the port was taken), worth
 * another try; LAUNCH_FAILED (printed): not.
 */
static launch_t
launch(redis_server_t *r, const char *bin, long deadline)
{
    char port[8], log[300], out[300];
    snprintf(port, sizeof(port), "%u", r->port);
    snprintf(log, sizeof(log), "%s/redis.log", r->dir);
    snprintf(out, sizeof(out), "%s/redis.out", r->dir);
    /* --save "": no snapshot but the explicit SAVE of redis_restart; --dbfilename: the one it loads. */
    /* clang-format off */
    const char *argv[] = {bin,
        "--bind", "127.0.0.1", "--port", port, "--dir", r->dir, "--dbfilename", DB_FILE,
        "--save", "", "--appendonly", "no", "--protected-mode", "no", "--logfile", log, "--daemonize", "no",
        NULL};
    /* clang-format on */
    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "redis_server: pipe: %s\n", strerror(errno));
        return LAUNCH_FAILED;
    }
    long max_fd = sysconf(_SC_OPEN_MAX);
    if (max_fd < 0 || max_fd > 65536)
        max_fd = 65536;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "redis_server: fork: %s\n", strerror(errno));
        close(errpipe[0]);
        close(errpipe[1]);
        return LAUNCH_FAILED;
    }
    if (pid == 0) {
        /* Only async-signal-safe calls until exec: the test may have threads. */
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test that crashes or times out takes its Redis with it */
        if (getppid() != parent)
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL); /* a mask the test set would keep SIGTERM from redis */
        int null = open("/dev/null", O_RDONLY);
        int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0600); /* what it says before its log is open */
        if (null >= 0)
            dup2(null, 0);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* The test's sockets must not live on in redis: a peer would wait for an EOF that never comes. */
        if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) /* before Linux 5.11 */
            for (int i = 3; i < max_fd; i++)
                fcntl(i, F_SETFD, FD_CLOEXEC);
        execv(bin, (char *const *)argv);
        int e = errno;
        ssize_t n = write(errpipe[1], &e, sizeof(e));
        (void)n;
        _exit(127);
    }
    close(errpipe[1]);
    int e = 0;
    ssize_t n;
    while ((n = read(errpipe[0], &e, sizeof(e))) < 0 && errno == EINTR)
        ;
    close(errpipe[0]);
    r->pid = pid;
    if (n == (ssize_t)sizeof(e)) {
        fprintf(stderr, "redis_server: exec %s: %s\n", bin, strerror(e));
        kill_and_reap(r);
        return LAUNCH_FAILED;
    }
    while (now_ms() < deadline) {
        if (reap(pid, 0)) {
            r->pid = 0;
            return LAUNCH_EXITED;
        }
        redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv_ms(200));
        if (c != NULL && c->err == 0 && redisSetTimeout(c, tv_ms(500)) == REDIS_OK) {
            redisReply *reply = redisCommand(c, "PING");
            bool up = reply != NULL && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0;
            if (reply != NULL)
                freeReplyObject(reply);
            if (up) {
                redisFree(c);
                return LAUNCH_UP;
            }
        }
        if (c != NULL)
            redisFree(c);
        sleep_ms(10);
    }
    fprintf(stderr, "redis_server: no PING answer on 127.0.0.1:%u within %d ms\n", r->port, START_TIMEOUT_MS);
    kill_and_reap(r);
    return LAUNCH_FAILED;
}

/* The end of its log on stderr: why it did not start. */
static void
print_log_tail(const redis_server_t *r)
{
    char path[300], buf[2048];
    snprintf(path, sizeof(path), "%s/redis.log", r->dir);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(path, sizeof(path), "%s/redis.out", r->dir);
        f = fopen(path, "r");
    }
    if (f == NULL)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        fseek(f, size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0, SEEK_SET);
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    fprintf(stderr, "redis_server: %s ends:\n%s\n", path, buf);
}

/* Brings it up on r->port, trying other ports (when allowed) while it exits early. */
static bool
start_on(redis_server_t *r, bool new_port)
{
    char bin[PATH_MAX];
    if (!find_binary(bin, sizeof(bin)))
        return false;
    long deadline = now_ms() + START_TIMEOUT_MS;
    for (int attempt = 0; attempt < START_ATTEMPTS && now_ms() < deadline; attempt++) {
        if (new_port && (r->port = free_port()) == 0) {
            fprintf(stderr, "redis_server: no free port on 127.0.0.1: %s\n", strerror(errno));
            return false;
        }
        switch (launch(r, bin, deadline)) {
        case LAUNCH_UP:
            snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%u/0", r->port);
            return true;
        case LAUNCH_FAILED:
            print_log_tail(r);
            return false;
        case LAUNCH_EXITED:
            if (!new_port)
                sleep_ms(100); /* the same port: wait for whoever holds it to let go */
            break;
        }
    }
    fprintf(stderr, "redis_server: redis-server exited at start %d times (last port %u)\n", START_ATTEMPTS,
            r->port);
    print_log_tail(r);
    return false;
}

/* Empties and removes the directory (flat: redis writes no subdirectories). */
static void
remove_dir(redis_server_t *r)
{
    if (r->dir[0] == '\0')
        return;
    DIR *d = opendir(r->dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    if (rmdir(r->dir) != 0)
        fprintf(stderr, "redis_server: rmdir %s: %s\n", r->dir, strerror(errno));
    r->dir[0] = '\0';
}

bool
redis_start(redis_server_t *r)
{
    memset(r, 0, sizeof(*r));
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0')
        tmp = "/tmp";
    if ((size_t)snprintf(r->dir, sizeof(r->dir), "%s/sluice-redis-XXXXXX", tmp) >= sizeof(r->dir)) {
        fprintf(stderr, "redis_server: TMPDIR too long: %s\n", tmp);
        r->dir[0] = '\0';
        return false;
    }
    if (mkdtemp(r->dir) == NULL) {
        fprintf(stderr, "redis_server: mkdtemp %s: %s\n", r->dir, strerror(errno));
        r->dir[0] = '\0';
        return false;
    }
    if (start_on(r, true))
        return true;
    redis_stop(r);
    r->port = 0;
    return false;
}

void
redis_stop(redis_server_t *r)
{
    terminate(r);
    remove_dir(r);
    r->url[0] = '\0';
}

void
redis_kill(redis_server_t *r)
{
    conn_forget(r);
    kill_and_reap(r);
}

bool
redis_restart(redis_server_t *r, bool keep_data)
{
    if (r->dir[0] == '\0' || r->port == 0) {
        fprintf(stderr, "redis_server: restart of a server never started or already stopped\n");
        return false;
    }
    if (r->pid > 0 && keep_data) {
        kill(r->pid, SIGCONT); /* SAVE from a frozen server would only time out */
        char ok[8];
        if (!redis_str(r, ok, sizeof(ok), "SAVE") || strcmp(ok, "OK") != 0) {
            fprintf(stderr, "redis_server: SAVE before the restart failed\n");
            return false;
        }
    }
    terminate(r);
    if (!keep_data) {
        /* An RDB of an earlier keep_data restart would be loaded again. */
        char path[300];
        snprintf(path, sizeof(path), "%s/%s", r->dir, DB_FILE);
        if (unlink(path) != 0 && errno != ENOENT) {
            fprintf(stderr, "redis_server: unlink %s: %s\n", path, strerror(errno));
            return false;
        }
    }
    return start_on(r, false);
}

void
redis_freeze(redis_server_t *r)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGSTOP);
    /* Stopped on return, so a test's next command surely meets a frozen server. */
    long deadline = now_ms() + 1000;
    int status;
    while (now_ms() < deadline) {
        pid_t w = waitpid(r->pid, &status, WNOHANG | WUNTRACED);
        if (w == r->pid && WIFSTOPPED(status))
            return;
        if (w == r->pid) { /* it ended meanwhile: reaped */
            conn_forget(r);
            r->pid = 0;
            return;
        }
        if (w < 0 && errno != EINTR)
            return;
        sleep_ms(1);
    }
}

void
redis_thaw(redis_server_t *r)
{
    if (r->pid > 0)
        kill(r->pid, SIGCONT);
}
