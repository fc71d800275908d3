#define _GNU_SOURCE /* pipe2, close_range */
#include "pg_server.h"

#include <libpq-fe.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_TIMEOUT_MS  10000
#define INITDB_TIMEOUT_MS 60000 /* ~2 s of CPU alone; 30 s was seen with parallel suites on 2 CPUs */
#define STOP_TIMEOUT_MS   5000
#define CONNECT_TIMEOUT_S "2"
#define STATEMENT_TIMEOUT "-c statement_timeout=5000"
#define START_ATTEMPTS    5
#define RUN_AS            "postgres" /* the system user initdb and postgres run as when the test is root */
#define SUPERUSER         "postgres"
#define ROLE              "sluice"

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

/* ---- connections ---- */

/* A connection as the superuser to dbname over TCP; NULL (reason printed unless quiet) when it fails. */
static PGconn *
connect_admin(const pg_server_t *p, const char *dbname, const char *timeout_s, bool quiet)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", p->port);
    /* sslmode, gssencmode: the server has neither, and trying them first costs a round trip each. */
    const char *keys[] = {"host",    "port",    "user",       "password",         "dbname", "connect_timeout",
                          "sslmode", "options", "gssencmode", "application_name", NULL};
    const char *vals[] = {"127.0.0.1", port,        SUPERUSER, p->admin_password,
                          dbname,      timeout_s,   "disable", STATEMENT_TIMEOUT,
                          "disable",   "pg_server", NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 0);
    if (c != NULL && PQstatus(c) == CONNECTION_OK)
        return c;
    if (!quiet)
        fprintf(stderr, "pg_server: connecting to 127.0.0.1:%u as %s: %s", p->port, SUPERUSER,
                c != NULL ? PQerrorMessage(c) : "out of memory\n");
    PQfinish(c);
    return NULL;
}

/*
 * The struct has no room for a connection, so they live here, one per running
 * server (keyed by its pid, which changes on every restart), behind one lock:
 * tests may query from several threads.
 */
typedef struct {
    pid_t owner; /* getpid() of the process that connected: a fork's copy is not ours to use */
    pid_t server;
    uint16_t port;
    PGconn *c;
} conn_t;

static conn_t conns[8];
static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;

static void
conn_drop(conn_t *k)
{
    PQfinish(k->c);
    memset(k, 0, sizeof(*k));
}

/* Drops the server's connection; before anything that ends or replaces the process. */
static void
conn_forget(const pg_server_t *p)
{
    pthread_mutex_lock(&conns_lock);
    for (size_t i = 0; i < sizeof(conns) / sizeof(conns[0]); i++)
        if (conns[i].c != NULL && conns[i].server == p->pid && conns[i].port == p->port)
            conn_drop(&conns[i]);
    pthread_mutex_unlock(&conns_lock);
}

/*
 * An idle connection that is readable was closed by the server (a backend
 * terminated by the test sends its FATAL, then EOF): not reusable. The
 * superuser listens to nothing, so nothing else arrives unasked.
 */
static bool
conn_alive(PGconn *c)
{
    struct pollfd pfd = {PQsocket(c), POLLIN, 0};
    return PQstatus(c) == CONNECTION_OK && pfd.fd >= 0 && poll(&pfd, 1, 0) == 0;
}

/* The cached connection for p, or a fresh one; NULL (reason printed) when it cannot connect. Lock held. */
static conn_t *
conn_get(const pg_server_t *p)
{
    conn_t *free_slot = NULL;
    for (size_t i = 0; i < sizeof(conns) / sizeof(conns[0]); i++) {
        conn_t *k = &conns[i];
        if (k->c != NULL && k->owner != getpid())
            memset(k, 0, sizeof(*k)); /* the parent's socket: leave it open for the parent */
        if (k->c != NULL && k->server == p->pid && k->port == p->port) {
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
    PGconn *c = connect_admin(p, ROLE, CONNECT_TIMEOUT_S, false);
    if (c == NULL)
        return NULL;
    *free_slot = (conn_t){getpid(), p->pid, p->port, c};
    return free_slot;
}

/* Runs sql; the result when it succeeded (free it), else NULL with the error printed. */
static PGresult *
query(pg_server_t *p, const char *sql)
{
    if (p->port == 0) {
        fprintf(stderr, "pg_server: not started\n");
        return NULL;
    }
    pthread_mutex_lock(&conns_lock);
    PGresult *res = NULL;
    conn_t *k = conn_get(p);
    if (k != NULL) {
        res = PQexec(k->c, sql);
        ExecStatusType st = PQresultStatus(res);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            fprintf(stderr, "pg_server: %s: %s", sql,
                    res != NULL ? PQresultErrorMessage(res) : PQerrorMessage(k->c));
            PQclear(res);
            res = NULL;
            /* Also out of a transaction the statement may have left open: the next call starts clean. */
            conn_drop(k);
        }
    }
    pthread_mutex_unlock(&conns_lock);
    return res;
}

/* The first column of the first row, printed as missing when there is none or it is NULL. */
static const char *
first_value(PGresult *res, const char *sql)
{
    if (PQntuples(res) < 1 || PQnfields(res) < 1) {
        fprintf(stderr, "pg_server: %s: no row\n", sql);
        return NULL;
    }
    if (PQgetisnull(res, 0, 0)) {
        fprintf(stderr, "pg_server: %s: NULL\n", sql);
        return NULL;
    }
    return PQgetvalue(res, 0, 0);
}

long long
pg_int(pg_server_t *p, const char *sql)
{
    PGresult *res = query(p, sql);
    if (res == NULL)
        return -1;
    long long v = -1;
    const char *s = first_value(res, sql);
    if (s != NULL) {
        char *end;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (errno != 0 || end == s || *end != '\0') {
            fprintf(stderr, "pg_server: %s: not an integer: %s\n", sql, s);
            v = -1;
        }
    }
    PQclear(res);
    return v;
}

bool
pg_str(pg_server_t *p, const char *sql, char *out, size_t size)
{
    PGresult *res = query(p, sql);
    if (res == NULL)
        return false;
    const char *s = first_value(res, sql);
    if (s != NULL && size > 0)
        snprintf(out, size, "%s", s);
    PQclear(res);
    return s != NULL;
}

bool
pg_exec(pg_server_t *p, const char *sql)
{
    PGresult *res = query(p, sql);
    PQclear(res);
    return res != NULL;
}

bool
pg_socket_url(const pg_server_t *p, char *out, size_t size)
{
    int n = snprintf(out, size, "postgres://%s:%s@/%s?host=%s&port=%u", ROLE, p->password, ROLE,
                     p->socket_dir, p->port);
    if (n < 0 || (size_t)n >= size) {
        if (size > 0)
            out[0] = '\0';
        return false;
    }
    return true;
}

/* ---- finding and running the binaries ---- */

/* The directory of initdb and postgres; false (printed) when PostgreSQL is not installed. */
static bool
find_bindir(char *out, size_t size)
{
    char path[PATH_MAX];
    const char *env = getenv("PG_BINDIR");
    if (env != NULL && *env != '\0') {
        snprintf(path, sizeof(path), "%s/postgres", env);
        if (access(path, X_OK) == 0) {
            snprintf(out, size, "%s", env);
            return true;
        }
        fprintf(stderr, "pg_server: PG_BINDIR=%s has no executable postgres: %s\n", env, strerror(errno));
        return false;
    }
    /* Debian and Ubuntu: /usr/lib/postgresql/<major>/bin, several majors side by side. */
    long best = -1;
    DIR *d = opendir("/usr/lib/postgresql");
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char *end;
            long v = strtol(e->d_name, &end, 10);
            if (end == e->d_name || *end != '\0' || v <= best)
                continue;
            snprintf(path, sizeof(path), "/usr/lib/postgresql/%s/bin/initdb", e->d_name);
            if (access(path, X_OK) != 0)
                continue;
            snprintf(path, sizeof(path), "/usr/lib/postgresql/%s/bin/postgres", e->d_name);
            if (access(path, X_OK) == 0 &&
                (size_t)snprintf(out, size, "/usr/lib/postgresql/%s/bin", e->d_name) < size)
                best = v;
        }
        closedir(d);
    }
    if (best >= 0)
        return true;
    /* Elsewhere (Fedora, Homebrew): initdb on PATH, postgres beside it. */
    const char *dirs = getenv("PATH");
    if (dirs == NULL || *dirs == '\0')
        dirs = "/usr/local/bin:/usr/bin:/bin";
    for (const char *s = dirs; *s != '\0';) {
        size_t n = strcspn(s, ":");
        if (n > 0 && n < size) {
            snprintf(path, sizeof(path), "%.*s/initdb", (int)n, s);
            bool initdb = access(path, X_OK) == 0;
            snprintf(path, sizeof(path), "%.*s/postgres", (int)n, s);
            if (initdb && access(path, X_OK) == 0) {
                snprintf(out, size, "%.*s", (int)n, s);
                return true;
            }
        }
        s += n;
        if (*s == ':')
            s++;
    }
    fprintf(stderr,
            "pg_server: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin, no initdb on PATH; "
            "set PG_BINDIR)\n");
    return false;
}

/* Who the server runs as: the test's user, or RUN_AS when that is root. */
typedef struct {
    bool drop;
    uid_t uid;
    gid_t gid;
} cred_t;

static bool
get_cred(cred_t *cred)
{
    *cred = (cred_t){false, geteuid(), getegid()};
    if (cred->uid != 0)
        return true;
    char buf[4096];
    struct passwd pw, *found = NULL;
    int e = getpwnam_r(RUN_AS, &pw, buf, sizeof(buf), &found);
    if (found == NULL) {
        fprintf(stderr,
                "pg_server: running as root, and postgres refuses root: no user \"%s\" to run it as%s%s\n",
                RUN_AS, e != 0 ? ": " : "", e != 0 ? strerror(e) : "");
        return false;
    }
    *cred = (cred_t){true, pw.pw_uid, pw.pw_gid};
    return true;
}

/* Hands path to the server's user (when root). */
static bool
give(const char *path, const cred_t *cred)
{
    if (cred->drop && chown(path, cred->uid, cred->gid) != 0) {
        fprintf(stderr, "pg_server: chown %s: %s\n", path, strerror(errno));
        return false;
    }
    return true;
}

/* Why a child did not get to exec: written to the parent through a close-on-exec pipe. */
typedef struct {
    int stage; /* an index into spawn's what[] */
    int err;
} spawn_fail_t;

/*
 * Forks argv[0] as cred, stdin from /dev/null, stdout and stderr appended to
 * log, in dir; its pid, or -1 (printed) when it could not be run. own_group:
 * in a process group of its own, which kill(-pid) ends with its children.
 */
static pid_t
spawn(const char *const *argv, const char *dir, const char *log, const cred_t *cred, bool own_group)
{
    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "pg_server: pipe: %s\n", strerror(errno));
        return -1;
    }
    long max_fd = sysconf(_SC_OPEN_MAX);
    if (max_fd < 0 || max_fd > 65536)
        max_fd = 65536;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "pg_server: fork: %s\n", strerror(errno));
        close(errpipe[0]);
        close(errpipe[1]);
        return -1;
    }
    if (pid == 0) {
        /* Only async-signal-safe calls until exec: the test may have threads. */
        spawn_fail_t fail = {0, 0};
        /* Groups first, while still allowed to; initgroups would read /etc/group, not safe here. */
        if (cred->drop &&
            (setgroups(1, &cred->gid) != 0 || setgid(cred->gid) != 0 || setuid(cred->uid) != 0)) {
            fail = (spawn_fail_t){1, errno};
            goto failed;
        }
        /*
         * After setuid: a change of credentials clears the parent-death
         * signal. A test that crashes or times out takes its PostgreSQL with
         * it (the backends follow the postmaster on their own).
         */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (own_group)
            setpgid(0, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL); /* a mask the test set would keep SIGINT from postgres */
        if (chdir(dir) != 0) {                 /* the test's cwd may be closed to the postgres user */
            fail = (spawn_fail_t){2, errno};
            goto failed;
        }
        int null = open("/dev/null", O_RDONLY);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd < 0) {
            fail = (spawn_fail_t){3, errno};
            goto failed;
        }
        if (null >= 0)
            dup2(null, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        /* The test's sockets must not live on in postgres: a peer would wait for an EOF that never comes. */
        if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) /* before Linux 5.11 */
            for (int i = 3; i < max_fd; i++)
                fcntl(i, F_SETFD, FD_CLOEXEC);
        execv(argv[0], (char *const *)argv);
        fail = (spawn_fail_t){4, errno};
    failed:;
        ssize_t n = write(errpipe[1], &fail, sizeof(fail));
        (void)n;
        _exit(127);
    }
    close(errpipe[1]);
    spawn_fail_t fail;
    ssize_t n;
    while ((n = read(errpipe[0], &fail, sizeof(fail))) < 0 && errno == EINTR)
        ;
    close(errpipe[0]);
    if (n == (ssize_t)sizeof(fail)) {
        static const char *const what[] = {"", "dropping to user " RUN_AS, "chdir", "opening the log",
                                           "exec"};
        fprintf(stderr, "pg_server: %s (%s): %s\n", what[fail.stage], argv[0], strerror(fail.err));
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        return -1;
    }
    return pid;
}

/*
 * Reaps pid within timeout_ms (0: only if it already ended); true when it is
 * gone, its wait status in *status (0 when unknown).
 */
static bool
reap(pid_t pid, long timeout_ms, int *status)
{
    long deadline = now_ms() + timeout_ms;
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD)) { /* ECHILD: SIGCHLD ignored, reaped already */
            if (status != NULL)
                *status = w == pid ? st : 0;
            return true;
        }
        if (w < 0 && errno != EINTR)
            return false;
        if (now_ms() >= deadline)
            return false;
        sleep_ms(5);
    }
}

static void
kill_and_reap(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}

/* The end of a log in dir on stderr: why it did not start. */
static void
print_log_tail(const pg_server_t *p, const char *name)
{
    char path[300], buf[2048];
    snprintf(path, sizeof(path), "%s/%s", p->dir, name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        fseek(f, size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0, SEEK_SET);
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    fprintf(stderr, "pg_server: %s ends:\n%s\n", path, buf);
}

/*
 * After the postmaster is gone (killed), its backends live on until they
 * notice; until then postgres will not start on that data ("pre-existing
 * shared memory block is still in use") and their connections still answer.
 * Every one of them is attached to the System V segment named in
 * postmaster.pid, as postgres itself checks: waits until none is (bounded),
 * then, with remove, deletes the segment, which a crash leaves behind. No
 * postmaster.pid: it shut down cleanly and left nothing.
 */
static void
wait_backends(const pg_server_t *p, bool remove)
{
    char path[300], line[256];
    snprintf(path, sizeof(path), "%s/data/postmaster.pid", p->dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    /* Line 1: the postmaster's pid; line 7: the segment's key and id. */
    long pm = 0;
    unsigned long key = 0, id = 0;
    bool found = false;
    for (int i = 1; fgets(line, sizeof(line), f) != NULL && i <= 7; i++) {
        if (i == 1)
            pm = strtol(line, NULL, 10);
        else if (i == 7)
            found = sscanf(line, "%lu %lu", &key, &id) == 2;
    }
    fclose(f);
    if (!found || pm <= 0)
        return; /* killed before it made the segment */
    long deadline = now_ms() + STOP_TIMEOUT_MS;
    struct shmid_ds ds;
    while (shmctl((int)id, IPC_STAT, &ds) == 0 && ds.shm_cpid == (pid_t)pm) { /* else gone or not its */
        if (ds.shm_nattch == 0) {
            if (remove)
                shmctl((int)id, IPC_RMID, NULL);
            return;
        }
        if (now_ms() >= deadline) {
            fprintf(stderr, "pg_server: backends of postmaster %ld still running after %d ms\n", pm,
                    STOP_TIMEOUT_MS);
            return;
        }
        sleep_ms(5);
    }
}

/* Fast shutdown, SIGKILL after STOP_TIMEOUT_MS; true when it stopped by itself. */
static bool
terminate(pg_server_t *p)
{
    conn_forget(p);
    if (p->pid <= 0)
        return false;
    /* SIGINT: fast shutdown (sessions ended, a checkpoint); SIGTERM would wait for every client to leave. */
    kill(p->pid, SIGINT);
    bool clean = reap(p->pid, STOP_TIMEOUT_MS, NULL);
    if (!clean) {
        fprintf(stderr, "pg_server: postgres on port %u did not stop within %d ms: killed\n", p->port,
                STOP_TIMEOUT_MS);
        kill_and_reap(p->pid);
    }
    p->pid = 0;
    if (!clean)
        wait_backends(p, false);
    return clean;
}

typedef enum { LAUNCH_UP, LAUNCH_EXITED, LAUNCH_FAILED } launch_t;

/*
 * Forks postgres on p->port and p->dir and waits until deadline until it
 * accepts connections. LAUNCH_EXITED: it ended early (most likely the port
 * was taken), worth another try; LAUNCH_FAILED (printed): not.
 */
static launch_t
launch(pg_server_t *p, const char *bindir, const cred_t *cred, long deadline)
{
    char bin[PATH_MAX + 16], data[300], log[300], port[8];
    snprintf(bin, sizeof(bin), "%s/postgres", bindir);
    snprintf(data, sizeof(data), "%s/data", p->dir);
    snprintf(log, sizeof(log), "%s/postgres.log", p->dir);
    snprintf(port, sizeof(port), "%u", p->port);
    /*
     * Durability off: the tests' data dies with the directory, and a kill of
     * the process (not of the machine) loses nothing the page cache holds.
     * But synchronous_commit stays on: off, a commit is acknowledged before
     * its WAL leaves shared memory, so pg_kill (a crash) loses the last
     * ~600 ms of acknowledged commits; with fsync off, on costs one write().
     * logging_collector off: the log goes to stderr, the file given.
     */
    /* clang-format off */
    const char *argv[] = {bin, "-D", data, "-p", port, "-k", p->socket_dir,
        "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
        "-c", "full_page_writes=off", "-c", "logging_collector=off",
        NULL};
    /* clang-format on */
    pid_t pid = spawn(argv, p->dir, log, cred, false);
    if (pid < 0)
        return LAUNCH_FAILED;
    p->pid = pid;
    char keys_port[8];
    snprintf(keys_port, sizeof(keys_port), "%u", p->port);
    /* PQping needs no password: it only asks whether the server would take a connection now. */
    const char *keys[] = {"host", "port", "dbname", "connect_timeout", "sslmode", "gssencmode", NULL};
    const char *vals[] = {"127.0.0.1", keys_port, "postgres", "1", "disable", "disable", NULL};
    while (now_ms() < deadline) {
        if (reap(pid, 0, NULL)) {
            p->pid = 0;
            wait_backends(p, false);
            return LAUNCH_EXITED;
        }
        /* PQPING_REJECT while it starts up or recovers from a crash; OK once it accepts connections. */
        if (PQpingParams(keys, vals, 0) == PQPING_OK)
            return LAUNCH_UP;
        sleep_ms(10);
    }
    fprintf(stderr, "pg_server: postgres on 127.0.0.1:%u not accepting connections within %d ms\n", p->port,
            START_TIMEOUT_MS);
    kill_and_reap(p->pid);
    p->pid = 0;
    wait_backends(p, false);
    return LAUNCH_FAILED;
}

/* A port free on 127.0.0.1 now; 0 on failure. Another process may take it before postgres binds: retried. */
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

/* Brings it up on p->port, trying other ports (when allowed) while it exits early. */
static bool
start_on(pg_server_t *p, const char *bindir, const cred_t *cred, bool new_port)
{
    long deadline = now_ms() + START_TIMEOUT_MS;
    int attempt = 0;
    for (; (!new_port || attempt < START_ATTEMPTS) && now_ms() < deadline; attempt++) {
        if (new_port && (p->port = free_port()) == 0) {
            fprintf(stderr, "pg_server: no free port on 127.0.0.1: %s\n", strerror(errno));
            return false;
        }
        switch (launch(p, bindir, cred, deadline)) {
        case LAUNCH_UP:
            return true;
        case LAUNCH_FAILED:
            if (attempt > 0) /* the deadline met the last of several tries: say why there were several */
                fprintf(stderr, "pg_server: postgres had exited at start %d times before (port %u taken?)\n",
                        attempt, p->port);
            print_log_tail(p, "postgres.log");
            return false;
        case LAUNCH_EXITED:
            if (!new_port)
                sleep_ms(100); /* the same port: wait for whoever holds it to let go */
            break;
        }
    }
    fprintf(stderr, "pg_server: postgres exited at start %d times (last port %u)\n", attempt, p->port);
    print_log_tail(p, "postgres.log");
    return false;
}

/* ---- the cluster ---- */

/* 32 random hex digits: safe unquoted in SQL and in a URL. */
static bool
random_password(char *out, size_t size)
{
    unsigned char raw[16];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "pg_server: getrandom: %s\n", strerror(errno));
            return false;
        }
        if (n > 0)
            got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw) && 2 * i + 2 < size; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return true;
}

/* Writes the superuser's password where initdb, as cred, reads it; false (printed) on failure. */
static bool
write_pwfile(const char *path, const char *password, const cred_t *cred)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "pg_server: %s: %s\n", path, strerror(errno));
        return false;
    }
    size_t len = strlen(password);
    bool ok = write(fd, password, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
    if (!ok)
        fprintf(stderr, "pg_server: writing %s: %s\n", path, strerror(errno));
    close(fd);
    return ok && give(path, cred);
}

/* initdb into DIR/data: superuser SUPERUSER with admin_password, scram for TCP and the socket. */
static bool
run_initdb(pg_server_t *p, const char *bindir, const cred_t *cred)
{
    char bin[PATH_MAX + 16], data[300], pwfile[300], pwarg[320], log[300];
    snprintf(bin, sizeof(bin), "%s/initdb", bindir);
    snprintf(data, sizeof(data), "%s/data", p->dir);
    snprintf(pwfile, sizeof(pwfile), "%s/pwfile", p->dir);
    snprintf(pwarg, sizeof(pwarg), "--pwfile=%s", pwfile);
    snprintf(log, sizeof(log), "%s/initdb.log", p->dir);
    if (!write_pwfile(pwfile, p->admin_password, cred))
        return false;
    /* --no-sync: seconds of fsync for a cluster that lives a few seconds. */
    const char *argv[] = {bin,   "-D", data,   "-U",        SUPERUSER,    "--auth=scram-sha-256",
                          pwarg, "-E", "UTF8", "--no-sync", "--locale=C", NULL};
    /* Its own group: initdb runs postgres --single, which a kill of initdb alone would leave writing. */
    pid_t pid = spawn(argv, p->dir, log, cred, true);
    bool ok = false;
    int status = 0;
    if (pid > 0) {
        if (!reap(pid, INITDB_TIMEOUT_MS, &status)) {
            fprintf(stderr, "pg_server: initdb did not finish within %d ms: killed\n", INITDB_TIMEOUT_MS);
            kill(-pid, SIGKILL);
            kill_and_reap(pid);
            /* postgres --single is not our child: wait (bounded) until the group is gone before rm -rf. */
            long deadline = now_ms() + STOP_TIMEOUT_MS;
            while (kill(-pid, 0) == 0 && now_ms() < deadline)
                sleep_ms(5);
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            ok = true;
        } else {
            fprintf(stderr, "pg_server: initdb failed (wait status %#x)\n", status);
        }
        if (!ok)
            print_log_tail(p, "initdb.log");
    }
    unlink(pwfile);
    return ok;
}

/* One statement as the superuser on c; false (printed) on an error. */
static bool
setup_exec(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "pg_server: %s: %s", sql,
                res != NULL ? PQresultErrorMessage(res) : PQerrorMessage(c));
    PQclear(res);
    return ok;
}

/* The role and database sluice. Separate statements: CREATE DATABASE refuses to share a transaction. */
static bool
create_sluice(pg_server_t *p)
{
    PGconn *c = connect_admin(p, "postgres", CONNECT_TIMEOUT_S, false);
    if (c == NULL)
        return false;
    char sql[256];
    snprintf(sql, sizeof(sql), "CREATE ROLE %s LOGIN PASSWORD '%s'", ROLE, p->password);
    bool ok = setup_exec(c, sql);
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s OWNER %s", ROLE, ROLE);
    ok = ok && setup_exec(c, sql);
    PQfinish(c);
    return ok;
}

/* Makes dir (mode 0700) for the server's user; false (printed) on failure. */
static bool
make_dir(const char *path, const cred_t *cred)
{
    if (mkdir(path, 0700) != 0) {
        fprintf(stderr, "pg_server: mkdir %s: %s\n", path, strerror(errno));
        return false;
    }
    return give(path, cred);
}

static int
remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT)
        fprintf(stderr, "pg_server: removing %s: %s\n", path, strerror(errno));
    return 0; /* on with the rest */
}

/* rm -rf of the directory (as root, whoever owns what inside). */
static void
remove_dir(pg_server_t *p)
{
    if (p->dir[0] == '\0')
        return;
    if (nftw(p->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        fprintf(stderr, "pg_server: walking %s: %s\n", p->dir, strerror(errno));
    p->dir[0] = '\0';
}

bool
pg_start(pg_server_t *p)
{
    memset(p, 0, sizeof(*p));
    char bindir[PATH_MAX];
    cred_t cred;
    if (!find_bindir(bindir, sizeof(bindir)) || !get_cred(&cred))
        return false;
    if (!random_password(p->password, sizeof(p->password)) ||
        !random_password(p->admin_password, sizeof(p->admin_password)))
        return false;
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0')
        tmp = "/tmp";
    /* The socket's path, DIR/sock/.s.PGSQL.PORT, must fit in sun_path, or postgres refuses to start. */
    if ((size_t)snprintf(p->dir, sizeof(p->dir), "%s/sluice-pg-XXXXXX", tmp) >= sizeof(p->dir) ||
        strlen(p->dir) + sizeof("/sock/.s.PGSQL.65535") > sizeof(((struct sockaddr_un *)0)->sun_path)) {
        fprintf(stderr, "pg_server: TMPDIR too long for a Unix socket path: %s\n", tmp);
        p->dir[0] = '\0';
        return false;
    }
    if (mkdtemp(p->dir) == NULL) {
        fprintf(stderr, "pg_server: mkdtemp %s: %s\n", p->dir, strerror(errno));
        p->dir[0] = '\0';
        return false;
    }
    snprintf(p->socket_dir, sizeof(p->socket_dir), "%s/sock", p->dir);
    /* initdb makes data/ itself, 0700 as postgres requires; as the server's user it may, in its own dir. */
    if (give(p->dir, &cred) && make_dir(p->socket_dir, &cred) && run_initdb(p, bindir, &cred) &&
        start_on(p, bindir, &cred, true) && create_sluice(p)) {
        snprintf(p->url, sizeof(p->url), "postgres://%s:%s@127.0.0.1:%u/%s", ROLE, p->password, p->port,
                 ROLE);
        return true;
    }
    pg_stop(p);
    p->port = 0;
    return false;
}

void
pg_stop(pg_server_t *p)
{
    terminate(p);
    if (p->dir[0] != '\0')
        wait_backends(p, true); /* after a pg_kill, or a kill here: its segment */
    remove_dir(p);
    p->url[0] = '\0';
    p->socket_dir[0] = '\0';
}

void
pg_kill(pg_server_t *p)
{
    conn_forget(p);
    if (p->pid <= 0)
        return;
    kill_and_reap(p->pid);
    p->pid = 0;
    wait_backends(p, false);
}

bool
pg_halt(pg_server_t *p)
{
    return terminate(p);
}

bool
pg_restart(pg_server_t *p)
{
    if (p->dir[0] == '\0' || p->port == 0) {
        fprintf(stderr, "pg_server: restart of a server never started or already stopped\n");
        return false;
    }
    char bindir[PATH_MAX];
    cred_t cred;
    if (!find_bindir(bindir, sizeof(bindir)) || !get_cred(&cred))
        return false;
    terminate(p);
    return start_on(p, bindir, &cred, false);
}
