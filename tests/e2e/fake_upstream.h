/*
 * A scriptable fake upstream for end-to-end tests: an HTTP/1.1 server on
 * 127.0.0.1 (plaintext, or TLS with a given certificate) running in its own
 * thread. Each request takes the next scripted reply (or the default one)
 * and is recorded for assertions.
 */
#ifndef TEST_FAKE_UPSTREAM_H
#define TEST_FAKE_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    FAKE_RESPOND,           /* send the reply */
    FAKE_CLOSE_BEFORE_HEAD, /* read the request, then (after delay_ms) close without answering */
    FAKE_HANG,              /* read the request, then say nothing until the fake stops */
    /* The faults of the fault matrix (test_faults.c). */
    FAKE_RESET_BEFORE_HEAD, /* read the request, then reset the connection (SO_LINGER 0) */
    FAKE_RESET_MID_HEAD,    /* send the first half of a head, then reset the connection */
    FAKE_GARBAGE,           /* send body (raw bytes, not HTTP), then close */
    FAKE_ENDLESS_HEAD,      /* a head whose last header line never ends, sent as fast as the peer takes it */
    FAKE_HUGE_STREAM,       /* a 200 Anthropic SSE stream of huge_bytes, generated on the fly */
    FAKE_SILENT_AFTER_HEAD, /* the head and body (chunked, as FAKE_RESPOND), then silence until the fake stops
                             */
} fake_action_t;

typedef struct {
    fake_action_t action;
    int status;          /* default 200 */
    const char *headers; /* extra header lines, each ending in \r\n */
    const char *body;    /* NULL = empty */
    size_t body_len;     /* 0 = strlen(body) */
    bool chunked;        /* Transfer-Encoding: chunked, one chunk per SSE event (split at blank lines) */
    int delay_ms;        /* before the head, and between chunks */
    size_t cut_after;    /* close the connection after this many body bytes (0 = send all) */
    uint64_t huge_bytes; /* FAKE_HUGE_STREAM: the stream's length (about: whole events) */
    bool cut_mid_chunk;  /* chunked: the cut falls inside a chunk (its size line announces the whole event) */
    bool until_close;    /* neither content-length nor chunked: the body ends when the fake closes */
    bool close_after;    /* close the connection once the reply is sent, without saying so beforehand */
} fake_reply_t;

typedef struct {
    int64_t at_ms; /* monotonic arrival time */
    char method[16];
    char path[512];
    char headers[8192]; /* raw header lines */
    char *body;         /* owned by the fake */
    size_t body_len;
} fake_request_t;

typedef struct fake_upstream fake_upstream_t;

/* Starts a fake on 127.0.0.1 with an ephemeral port. With cert/key (PEM files) it speaks TLS only;
 * tls13_only forces TLS 1.3. Aborts the test process on failure. */
fake_upstream_t *fake_start(const char *cert_file, const char *key_file, bool tls13_only);
/* A plaintext fake on a given port (e.g. one a test closed earlier) whose first reply is queued before it
 * accepts, so a client retrying against the port meanwhile cannot get the default; NULL when it cannot bind.
 */
fake_upstream_t *fake_start_on_port(uint16_t port, fake_reply_t first);
uint16_t fake_port(const fake_upstream_t *f);
/* Queues a reply for the next request without one. The strings must outlive the fake. */
void fake_push(fake_upstream_t *f, fake_reply_t reply);
/* The reply used once the queue is empty (by default 200 with an empty body). */
void fake_set_default(fake_upstream_t *f, fake_reply_t reply);
/* Bytes written to clients so far (heads and bodies). */
size_t fake_bytes_sent(fake_upstream_t *f);
/* How many connections the fake accepted so far. */
size_t fake_connections(fake_upstream_t *f);
/* How many requests arrived so far. */
size_t fake_count(fake_upstream_t *f);
/* Copies request i (0-based) into out; false when there is none. out->body stays owned by the fake. */
bool fake_request(fake_upstream_t *f, size_t i, fake_request_t *out);
/* The value of a header of request i, copied into buf (case-insensitive name); false when absent. */
bool fake_header(fake_upstream_t *f, size_t i, const char *name, char *buf, size_t size);
/* Waits until count requests arrived (bounded by timeout_ms). */
bool fake_wait_count(fake_upstream_t *f, size_t count, int timeout_ms);
/* Stops the fake, closes every connection, frees everything. */
void fake_stop(fake_upstream_t *f);

/* Reads a fixture file from $SLUICE_FIXTURES (or the shared folder); the text lives until exit. */
const char *fixture(const char *name, size_t *len);

#endif
