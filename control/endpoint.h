/*
 * The control endpoint (protocol.md): one libwebsockets context on its own
 * thread (stack-notes.md: lws cannot share h2o's loop), subprotocol
 * `sluice-control`. It consumes the event bus: each drained event is
 * encoded once, queued for every subscriber of its topic and kept in the
 * in-flight log for late subscribers; it answers requests through
 * commands.c and streams ProviderChanged (coalesced) to the providers topic.
 */
#ifndef SL_CONTROL_ENDPOINT_H
#define SL_CONTROL_ENDPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "bus.h"
#include "commands.h"
#include "config.h"
#include "runtime.h"

typedef struct sl_control sl_control_t;

typedef struct {
    const sl_listen_t *listen; /* bind, port (0 = ephemeral), tls, allow_from; read at start */
    const char *key;           /* the control key (copied) */
    sl_runtime_t *runtime;
    sl_bus_t *bus; /* consumed from now on: made active, woken by flushes */
    sl_control_cancel_fn cancel;
    void *cancel_ctx;
    const char *server_name; /* welcome's `server`, e.g. "sluice 0.1.0" */
} sl_control_options_t;

/* A message larger than this is refused with control.too_large. */
#define SL_CONTROL_MAX_MESSAGE (1u << 20)
/* The client's hello must come within this many seconds. */
#define SL_CONTROL_HELLO_SECS 5
/* The kernel's send buffer of a control connection. */
#define SL_CONTROL_SOCKET_BUFFER (256 * 1024)
/* ProviderChanged per provider at most once in this many ms. */
#define SL_CONTROL_PROVIDER_MS 250
/*
 * While anyone watches, events go out this often: one drain of the bus and one
 * frame per subscriber per tick, however many events came in between. Waking
 * on every worker's flush instead cost a send per subscriber per flush (7 000
 * sends/s for 10 subscribers at 3 400 req/s). Each send to a local reader
 * costs about 14 µs of this thread (the kernel runs the reader's receive and
 * wake-up in it), so 50 ms, not 20: 10 subscribers' cost fell from 5.0 to 3.7
 * µs per request at 3 400 req/s (100 ms gave 3.3), still 20 updates a second.
 */
#define SL_CONTROL_DELIVERY_MS 50

/*
 * Binds and starts the thread. Returns NULL with a reason in err when the
 * address cannot be bound, or is not a loopback address and TLS is not
 * configured.
 */
sl_control_t *sl_control_start(const sl_control_options_t *o, char *err, size_t err_size);

/* The port the endpoint listens on. */
uint16_t sl_control_port(const sl_control_t *c);

/* Stops the thread, closes every connection, and lets the bus go inactive. */
void sl_control_stop(sl_control_t *c);

#endif
