/*
 * The answers h2o writes by itself, before a request reaches sluice's
 * handler: a body over h2o's limit (413), a broken chunked body or
 * content-length, an unknown transfer-encoding, invalid HTTP/2 header bytes
 * (400), an Expect other than 100-continue (417). h2o 2.2.5 answers them in
 * plain text; sluice rewrites each into the client's dialect (known from the
 * path; an unknown path gets the OpenAI shape) with its x-sluice-error code,
 * records the request like any other it refused, and on HTTP/1 lingers on
 * the connection so a client still sending its body reads the answer.
 *
 * What h2o ends without an answer stays so: a request line or head it cannot
 * parse (it writes a fixed "400 Bad Request" straight to the socket, past any
 * filter), a request that does not arrive within its timeout (closed), and
 * HTTP/2 protocol errors (RST_STREAM / GOAWAY).
 */
#ifndef SL_REFUSAL_H
#define SL_REFUSAL_H

#include <stddef.h>
#include <stdint.h>

#include <h2o.h>

#include "core/codes.h"
#include "linger.h"
#include "request.h"
#include "snapshot.h"

/* The gateway's words for one answer h2o made. */
typedef struct {
    sl_code_t code;
    int status;
    /* The message's arguments: detail (h2o's reason), size and max (for a body too large). */
    char detail[96], size[48], max[24];
} sl_refusal_t;

/*
 * Pure: the code, status and message arguments for h2o's own answer of
 * status with body text (h2o's one-line reason, not NUL-terminated), where
 * h2o refused bodies over body_limit bytes.
 */
sl_refusal_t sl_refusal_of(int status, const char *text, size_t text_len, uint64_t body_limit);

/* What the rewrite needs of the worker the request runs on. */
typedef struct {
    sl_worker_io_t *io;
    sl_gateway_t *gateway;
    sl_lingers_t *lingers;
} sl_refusal_env_t;

/*
 * Installs the rewrite on a host's fallback path, where h2o binds requests
 * it answers before routing them. body_limit is the limit h2o enforces in
 * that host's config (the message names it); env_of finds the worker's env
 * for a request (on its loop's thread).
 */
void sl_refusal_install(h2o_hostconf_t *host, uint64_t body_limit,
                        sl_refusal_env_t *(*env_of)(h2o_req_t *req));

#endif
