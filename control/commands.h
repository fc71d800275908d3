/*
 * The control protocol's requests that act on the gateway (protocol.md
 * "Requests and replies"): each decoded request becomes one call into the
 * runtime, the request DB or the data plane, and one reply, `ok` with its
 * result fields or `error` with a message code. Sessions, subscriptions
 * and the handshake are the endpoint's (endpoint.c).
 */
#ifndef SL_CONTROL_COMMANDS_H
#define SL_CONTROL_COMMANDS_H

#include <stdbool.h>
#include <stdint.h>

#include "sl_proto.h"

#include "bus.h"
#include "runtime.h"

/* Asks the data plane to cancel live request id; false when it cannot be asked (no data plane yet). */
typedef bool (*sl_control_cancel_fn)(void *ctx, uint64_t id);

typedef struct {
    sl_runtime_t *runtime;
    const sl_inflight_t *inflight; /* the endpoint's log of live requests */
    sl_control_cancel_fn cancel;   /* NULL = cancelling is not offered */
    void *cancel_ctx;
} sl_control_ctx_t;

/*
 * Answers one request message (any kind a client sends but hello,
 * subscribe and unsubscribe) into *reply (initialised here; the caller
 * frees it with sl_control_reply_free). A kind only the server sends gets
 * `error` control.not_a_request.
 */
void sl_control_handle(const sl_control_ctx_t *ctx, const sl_proto_message_t *req, sl_proto_message_t *reply);

/*
 * Frees a reply of sl_control_handle. get_in_flight's events are the
 * in-flight log's, borrowed: encode the reply before the log changes.
 */
void sl_control_reply_free(sl_proto_message_t *reply);

/* An `error` reply to req with message (copied). */
void sl_control_error(sl_proto_message_t *reply, uint32_t req, const sl_msg_t *message);

/*
 * Reads a protocol Limit into a config limit: exactly one measure, every
 * at least 1. Returns false with *why (static text) otherwise.
 */
bool sl_control_limit_from(const sl_proto_limit_t *in, sl_limit_t *out, const char **why);

#endif
