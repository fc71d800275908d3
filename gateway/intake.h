/*
 * Intake (behaviour.md §1): turns a client's HTTP request into the plain
 * facts the rest of the gateway works on — endpoint and dialect, the client
 * (by gateway key), the body and the few fields read from it — or into the
 * error the client gets, in its own dialect. Below this module nothing sees
 * how the request arrived.
 */
#ifndef SL_INTAKE_H
#define SL_INTAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "core/codes.h"
#include "core/msg.h"
#include "core/dialect.h"
#include "core/jscan.h"
#include "core/route.h"

/* What a request is, once accepted. Spans point into the caller's body and path. */
typedef struct {
    sl_endpoint_t endpoint;
    const sl_client_t *client; /* NULL when no clients are configured (local-only access) */
    const char *body;
    size_t body_len;
    sl_jscan_t fields;
    char model[SL_ENDPOINT_MODEL_MAX]; /* from the path, else the body */
    bool stream;                       /* the client asked for a stream */
} sl_intake_t;

/* Why a request is refused: the status and the message (its code, named arguments and text). */
typedef struct {
    int status;
    sl_msg_t msg; /* owned: free with sl_msg_free */
} sl_intake_refusal_t;

/* The request as received, without h2o types. */
typedef struct {
    const char *method;
    size_t method_len;
    const char *path; /* path and query as sent */
    size_t path_len;
    const sl_headers_t *headers;
    const char *body;
    size_t body_len;
    bool peer_is_loopback;
    bool websocket; /* a WebSocket handshake (GET with Upgrade: websocket and its key) */
} sl_intake_input_t;

/*
 * Decides whether the request is served. Returns true and fills *out, or
 * false and fills *refusal (and out->endpoint, when the path was known, so
 * the refusal can be written in the client's dialect); the caller frees
 * refusal->msg. Pure: config is read only.
 */
bool sl_intake(const sl_config_t *config, const sl_intake_input_t *in, sl_intake_t *out,
               sl_intake_refusal_t *refusal);

#endif
