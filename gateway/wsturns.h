/*
 * The OpenAI Responses WebSocket mode (formats.md, behaviour.md §6): a
 * client upgrades GET /v1/responses and sends `response.create` messages.
 * Each message is a turn, and turns go one at a time per connection (later
 * ones wait their turn). A turn is sent through the gateway's own HTTP path
 * as a POST /v1/responses stream, over the worker's internal socket, so it
 * is authenticated, routed, held, retried, queued and limited exactly like
 * an HTTP request and emits the same events. The answer's SSE events go
 * back as WebSocket text messages (their JSON), keep-alive comments as
 * pings, and an error answer as an `error` event carrying the same JSON.
 */
#ifndef SL_WSTURNS_H
#define SL_WSTURNS_H

#include <h2o.h>

#include "worker.h"

/*
 * Answers a WebSocket handshake on GET /v1/responses: authenticated as
 * POST /v1/responses would be (a refusal is answered in the Responses error
 * shape), then upgraded. client_key is h2o_is_websocket_handshake's.
 * Returns 0, as h2o handlers do.
 */
int sl_wsturns_upgrade(h2o_req_t *req, const char *client_key, sl_worker_io_t *io, const sl_config_t *config,
                       bool peer_is_loopback);

#endif
