/*
 * End-to-end harness: start the real sluice binary, read its log, talk HTTP
 * to it on 127.0.0.1, and signal it. Every wait is bounded.
 */
#ifndef TEST_HARNESS_H
#define TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int out_fd; /* the child's stdout and stderr */
    char log[1 << 16];
    size_t log_len;
    int exit_status; /* -1 until it exited */
} proc_t;

/* Starts $SLUICE_BIN with the arguments (NULL-terminated). */
void proc_start(proc_t *p, const char *const *args);
/* Starts the program at path (e.g. /usr/bin/prometheus) with the arguments (NULL-terminated). */
void proc_start_program(proc_t *p, const char *path, const char *const *args);
/* Reads output until needle appears; false after timeout_ms or when the process ends without it. */
bool proc_wait_log(proc_t *p, const char *needle, int timeout_ms);
/* The same for text logged after the first from bytes. */
bool proc_wait_log_after(proc_t *p, size_t from, const char *needle, int timeout_ms);
/* Waits for the exit; returns the exit status, or -1 (after SIGKILL) when it did not end in time. */
int proc_wait_exit(proc_t *p, int timeout_ms);
/* Kills a process still running (test teardown). */
void proc_kill(proc_t *p);
/* The port from the "serving on http://127.0.0.1:PORT" line (waits for it). 0 on timeout. */
uint16_t proc_wait_port(proc_t *p, int timeout_ms);
/*
 * Starts sluice on config_path with --log-level and --threads (either NULL:
 * sluice's default) and waits up to 5 s for its port; 0 when it did not come up.
 */
uint16_t sluice_start(proc_t *p, const char *config_path, const char *log_level, const char *threads);

typedef struct {
    int status;
    char headers[8192];
    char *body; /* de-chunked; owned, free with http_response_free */
    size_t body_len;
    bool complete; /* a chunked body ended with its last chunk */
} http_response_t;

/* One HTTP/1.1 request on a fresh connection (Connection: close), reading the whole answer into res
 * (zero-initialise it once; a previous body in it is freed).
 * headers: extra header lines, each ending in \r\n (or NULL). False on a connect or read failure. */
bool http_request_h(uint16_t port, const char *method, const char *path, const char *headers,
                    const char *body, http_response_t *res);
bool http_request(uint16_t port, const char *method, const char *path, const char *body,
                  http_response_t *res);
void http_response_free(http_response_t *res);
/* A response header's value (case-insensitive name); false when absent. */
bool http_header(const http_response_t *res, const char *name, char *buf, size_t size);
/* The value of the sample line of Prometheus text that starts with series (name and labels as written), or
 * -1. */
long long prom_sample(const char *text, const char *series);

/* Writes text to a fresh temporary file; returns its path (static storage per call slot 0..3). */
const char *write_temp_file(int slot, const char *text);

/* The path write_temp_file gave for slot ("" before it was used). */
const char *temp_file_path(int slot);
/* Removes the files write_temp_file made. */
void remove_temp_files(void);

/* The first column of the first row of sql over the SQLite file at path (read-only); -1 on any error. */
int db_int(const char *path, const char *sql);
/* The same as text into out (NUL-terminated, "" for NULL); false on any error. */
bool db_text(const char *path, const char *sql, char *out, size_t size);

/*
 * Posts body to path on 127.0.0.1:port over a raw socket (headers: extra lines, each ending in \r\n) and
 * returns the socket, nothing read yet: for clients that leave, stall or read slowly. rcvbuf > 0 sets the
 * socket's receive buffer first (a small window). -1 when it cannot connect or write it all.
 */
int raw_post(uint16_t port, int rcvbuf, const char *path, const char *headers, const char *body);

/*
 * A loopback port that refuses connections and that no other process can take while the returned socket is
 * open (bound, never listening). A fake merely stopped frees its port for a test running in parallel, whose
 * fake then gets this test's requests. -1 on failure.
 */
int hold_refusing_port(uint16_t *port);

/* The resident memory of process pid in KiB (VmRSS), or -1. */
long proc_rss_kib(pid_t pid);

/* A stream held past 15 s (150 ms scaled) starts with keep-alive comments (behaviour.md §4): what follows
 * them. */
const char *after_keepalives(const char *body);
/* The same for a Gemini stream, whose keep-alives are empty lines. */
const char *after_gemini_keepalives(const char *body);

#endif
