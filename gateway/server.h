/*
 * The data plane's shell: N worker threads, each with its own h2o event loop
 * and its own SO_REUSEPORT listener on the gateway address. Today it serves
 * GET /healthz; the dialect endpoints plug into the same handler.
 */
#ifndef SL_SERVER_H
#define SL_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "request.h"
#include "snapshot.h"

typedef struct sl_server sl_server_t;

/*
 * Binds the listeners (port 0 picks one ephemeral port shared by all
 * workers) and starts the workers. The listen settings are taken from
 * `listen` once: changing them needs a restart. Requests read the running
 * config from holder, which the caller keeps alive, as it does gateway.
 * max_body_bytes sizes h2o's own buffering limit (intake checks the real one).
 * Returns NULL and writes a reason into err on failure (nothing is left
 * running).
 */
sl_server_t *sl_server_start(const sl_listen_t *listen, unsigned threads, sl_snapshot_holder_t *holder,
                             sl_gateway_t *gateway, uint64_t max_body_bytes, char *err, size_t err_size);

/* The port the listeners are bound to. */
uint16_t sl_server_port(const sl_server_t *server);

/* Stops accepting connections; requests in flight go on. /healthz answers 503 from now on. */
void sl_server_stop_accepting(sl_server_t *server);

/* Asks every worker to cancel request id (cancel_request); the one that has it does. Any thread. */
void sl_server_cancel(sl_server_t *server, uint64_t id);

/* Requests that have started and not yet ended. */
unsigned sl_server_in_flight(const sl_server_t *server);

/*
 * Ends the workers' loops and waits until every worker has stopped serving;
 * connections they still hold are dropped. The threads stay parked (and the
 * server's memory allocated) until the process exits: h2o 2.2.5 can neither
 * close its live connections nor free its per-thread caches.
 */
void sl_server_end_workers(sl_server_t *server);

#endif
