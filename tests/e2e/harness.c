#define _GNU_SOURCE /* pipe2, strcasestr */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
proc_start(proc_t *p, const char *const *args)
{
    const char *bin = getenv("SLUICE_BIN");
    if (bin == NULL) {
        fprintf(stderr, "SLUICE_BIN is not set\n");
        abort();
    }
    proc_start_program(p, bin, args);
}

void
proc_start_program(proc_t *p, const char *bin, const char *const *args)
{
    const char *argv[32] = {bin};
    size_t n = 1;
    for (; args[n - 1] != NULL && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        abort();
    memset(p, 0, sizeof(*p));
    p->exit_status = -1;
    p->pid = fork();
    if (p->pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    p->out_fd = fds[0];
    fcntl(p->out_fd, F_SETFL, O_NONBLOCK);
}

/* Reads what is available within wait_ms; false at EOF. */
static bool
read_some(proc_t *p, int wait_ms)
{
    struct pollfd pfd = {p->out_fd, POLLIN, 0};
    if (poll(&pfd, 1, wait_ms) <= 0)
        return true;
    size_t room = sizeof(p->log) - 1 - p->log_len;
    ssize_t n = read(p->out_fd, p->log + p->log_len, room);
    if (n > 0) {
        p->log_len += (size_t)n;
        p->log[p->log_len] = '\0';
        return true;
    }
    return n < 0 && errno == EAGAIN;
}

bool
proc_wait_log(proc_t *p, const char *needle, int timeout_ms)
{
    return proc_wait_log_after(p, 0, needle, timeout_ms);
}

bool
proc_wait_log_after(proc_t *p, size_t from, const char *needle, int timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    while (strstr(p->log + (from < p->log_len ? from : p->log_len), needle) == NULL) {
        long left = deadline - now_ms();
        if (left <= 0 || !read_some(p, (int)(left < 50 ? left : 50)))
            return strstr(p->log + (from < p->log_len ? from : p->log_len), needle) != NULL;
    }
    return true;
}

int
proc_wait_exit(proc_t *p, int timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    int status;
    while (now_ms() < deadline) {
        read_some(p, 10);
        pid_t r = waitpid(p->pid, &status, WNOHANG);
        if (r == p->pid) {
            while (read_some(p, 0) && p->log_len < sizeof(p->log) - 1) {
                struct pollfd pfd = {p->out_fd, POLLIN, 0};
                if (poll(&pfd, 1, 0) <= 0)
                    break;
            }
            close(p->out_fd);
            p->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            return p->exit_status;
        }
    }
    proc_kill(p);
    return -1;
}

void
proc_kill(proc_t *p)
{
    if (p->pid > 0 && p->exit_status < 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        close(p->out_fd);
        p->exit_status = 137;
    }
}

uint16_t
proc_wait_port(proc_t *p, int timeout_ms)
{
    if (!proc_wait_log(p, "serving on http", timeout_ms))
        return 0;
    const char *at = strstr(p->log, "serving on http");
    const char *colon = strchr(strstr(at, "://") + 3, ':');
    return colon != NULL ? (uint16_t)atoi(colon + 1) : 0;
}

uint16_t
sluice_start(proc_t *p, const char *config_path, const char *log_level, const char *threads)
{
    const char *args[8] = {"--config", config_path};
    size_t n = 2;
    if (log_level != NULL) {
        args[n++] = "--log-level";
        args[n++] = log_level;
    }
    if (threads != NULL) {
        args[n++] = "--threads";
        args[n++] = threads;
    }
    args[n] = NULL;
    proc_start(p, args);
    return proc_wait_port(p, 5000);
}

/* Decodes a chunked body in place; returns its length, or (size_t)-1 when the framing is broken. */
static size_t
dechunk(char *body, size_t len, bool *complete)
{
    size_t r = 0, w = 0;
    *complete = false;
    while (r < len) {
        char *end;
        unsigned long n = strtoul(body + r, &end, 16);
        char *crlf = strstr(body + r, "\r\n");
        if (crlf == NULL || end == body + r)
            return (size_t)-1;
        r = (size_t)(crlf + 2 - body);
        if (n == 0) {
            *complete = true;
            break;
        }
        if (r + n > len)
            n = len - r;
        memmove(body + w, body + r, n);
        w += n;
        r += n + 2;
    }
    body[w] = '\0';
    return w;
}

bool
http_request_h(uint16_t port, const char *method, const char *path, const char *headers, const char *body,
               http_response_t *res)
{
    free(res->body);
    memset(res, 0, sizeof(*res));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return false;
    }
    size_t body_len = body != NULL ? strlen(body) : 0;
    char *req = malloc(body_len + 8192);
    int n = snprintf(req, body_len + 8192,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: %zu\r\n"
                     "Content-Type: application/json\r\n%s\r\n%s",
                     method, path, body_len, headers != NULL ? headers : "", body != NULL ? body : "");
    bool sent = write(fd, req, (size_t)n) == n;
    free(req);
    if (!sent) {
        close(fd);
        return false;
    }
    /* Up to 1 MiB, grown as it comes: a buffer of the most at once costs every small answer its memset under
     * meson's MALLOC_PERTURB_, and the load tests' clients then lag behind what they measure. */
    size_t max = 1 << 20, cap = 64 << 10, len = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;
    while (len < max) {
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        if ((r = read(fd, buf + len, cap - len)) <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    if (len < 12 || end == NULL) {
        free(buf);
        return false;
    }
    res->status = atoi(buf + 9);
    snprintf(res->headers, sizeof(res->headers), "%.*s", (int)(end - buf), buf);
    char *payload = end + 4;
    size_t payload_len = len - (size_t)(payload - buf);
    res->complete = true;
    if (strcasestr(res->headers, "transfer-encoding: chunked") != NULL)
        payload_len = dechunk(payload, payload_len, &res->complete);
    if (payload_len == (size_t)-1) {
        free(buf);
        return false;
    }
    res->body = malloc(payload_len + 1);
    memcpy(res->body, payload, payload_len);
    res->body[payload_len] = '\0';
    res->body_len = payload_len;
    free(buf);
    return true;
}

bool
http_request(uint16_t port, const char *method, const char *path, const char *body, http_response_t *res)
{
    return http_request_h(port, method, path, NULL, body, res);
}

void
http_response_free(http_response_t *res)
{
    free(res->body);
    res->body = NULL;
}

long long
prom_sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p != NULL && *p; p = strchr(p, '\n'), p = p != NULL ? p + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return atoll(p + n + 1);
    }
    return -1;
}

bool
http_header(const http_response_t *res, const char *name, char *buf, size_t size)
{
    size_t n = strlen(name);
    for (const char *line = strstr(res->headers, "\r\n"); line != NULL; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            const char *eol = strstr(v, "\r\n");
            snprintf(buf, size, "%.*s", (int)(eol != NULL ? eol - v : (long)strlen(v)), v);
            return true;
        }
    }
    return false;
}

static char paths[4][64];

const char *
temp_file_path(int slot)
{
    return paths[slot];
}

void
remove_temp_files(void)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (int i = 0; i < 4; i++) {
        for (size_t k = 0; paths[i][0] != '\0' && k < sizeof(suffixes) / sizeof(suffixes[0]); k++) {
            char path[320];
            snprintf(path, sizeof(path), "%s%s", paths[i], suffixes[k]);
            unlink(path);
        }
        paths[i][0] = '\0';
    }
}

const char *
write_temp_file(int slot, const char *text)
{
    if (paths[slot][0] == '\0') {
        snprintf(paths[slot], sizeof(paths[slot]), "/tmp/sluice-e2e-XXXXXX");
        int fd = mkstemp(paths[slot]);
        close(fd);
    }
    /* Replace the file whole, as an editor saving it would. */
    char tmp[80];
    snprintf(tmp, sizeof(tmp), "%s.new", paths[slot]);
    FILE *f = fopen(tmp, "w");
    fputs(text, f);
    fclose(f);
    rename(tmp, paths[slot]);
    return paths[slot];
}

int
db_int(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    int n = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int(st, 0);
    else
        fprintf(stderr, "db_int: %s: %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

bool
db_text(const char *path, const char *sql, char *out, size_t size)
{
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    bool ok = false;
    out[0] = '\0';
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(out, size, "%s", t != NULL ? (const char *)t : "");
        ok = true;
    } else {
        fprintf(stderr, "db_text: %s: %s\n", sql, sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return ok;
}

const char *
after_keepalives(const char *body)
{
    while (body != NULL && strncmp(body, ": keep-alive\n\n", 14) == 0)
        body += 14;
    return body != NULL ? body : "";
}

const char *
after_gemini_keepalives(const char *body)
{
    while (body != NULL && body[0] == '\n')
        body++;
    return body != NULL ? body : "";
}

int
hold_refusing_port(uint16_t *port)
{
    /* No SO_REUSEADDR: a bind of this port by anyone else conflicts. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

long
proc_rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    }
    if (f != NULL)
        fclose(f);
    return kib;
}

int
raw_post(uint16_t port, int rcvbuf, const char *path, const char *headers, const char *body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    size_t cap = strlen(path) + strlen(headers) + strlen(body) + 128;
    char *req = malloc(cap);
    int len = snprintf(req, cap, "POST %s HTTP/1.1\r\nHost: x\r\n%scontent-length: %zu\r\n\r\n%s", path,
                       headers, strlen(body), body);
    ssize_t w = write(fd, req, (size_t)len);
    free(req);
    if (w != len) {
        close(fd);
        return -1;
    }
    return fd;
}
