/*
 * A client connection from accept until h2o takes it: its TLS handshake,
 * which protocol it speaks (ALPN, or HTTP/2's preface in the clear), and a
 * look at its first request head. h2o 2.2.5 answers a head it cannot parse,
 * or one over its size limit, with a fixed plain-text "400 Bad Request"
 * written straight to the socket; for a connection's first request sluice
 * answers those itself, as a JSON error with a gw.* code (the dialect is not
 * known yet), then lingers so the client reads it. A later request on a
 * kept-alive connection that goes bad still gets h2o's text.
 */
#ifndef SL_ACCEPT_H
#define SL_ACCEPT_H

#include <stdbool.h>
#include <stddef.h>

#include <h2o.h>
#include <openssl/ssl.h>

#include "linger.h"

/* What a connection's first bytes say. */
typedef enum {
    SL_FIRST_WAIT,           /* not enough yet */
    SL_FIRST_HTTP2,          /* HTTP/2's connection preface */
    SL_FIRST_HTTP1,          /* a whole, well-formed HTTP/1 head (its body may follow) */
    SL_FIRST_MALFORMED,      /* not HTTP: a request line or header that cannot be parsed */
    SL_FIRST_HEAD_TOO_LARGE, /* no end of head within h2o's limit (or more headers than it takes) */
} sl_first_bytes_t;

/* Pure: classifies the first len bytes a connection sent (clear text, or after TLS). */
sl_first_bytes_t sl_first_bytes_classify(const char *bytes, size_t len);

/* Where a connection goes once its protocol is known. */
typedef void (*sl_accept_cb)(void *data, h2o_socket_t *sock, bool http2, struct timeval connected_at);

typedef struct {
    h2o_loop_t *loop;
    SSL_CTX *ssl_ctx;       /* NULL: the listener is clear text */
    h2o_timeout_t *timeout; /* bounds the handshake and the first head (h2o's handshake timeout) */
    sl_lingers_t *lingers;  /* where a refused connection lingers */
    sl_accept_cb cb;
    void *data;
} sl_accept_env_t;

/*
 * Takes a socket just accepted: once it is known to speak HTTP/1 or HTTP/2,
 * calls env->cb with it and whatever it has read still in its input; closes
 * it on a failed handshake or a timeout; answers a malformed first head
 * itself. env must outlive the socket's pending time.
 */
void sl_accept_start(h2o_socket_t *sock, const sl_accept_env_t *env, struct timeval connected_at);

#endif
