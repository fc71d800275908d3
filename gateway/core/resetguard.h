/*
 * HTTP/2 rapid reset (CVE-2023-44487; stack-notes.md): h2o 2.2.5 has no
 * defence of its own. A client that opens streams and resets them before
 * their answer costs the gateway work per stream and nothing itself; a
 * connection that does it more than SL_RESET_GUARD_MAX_PER_SEC times in a
 * second gets a bare 429 for its next streams, before any gateway work.
 * This is the count, per connection, with time passed in; one table per
 * worker.
 */
#ifndef SL_RESETGUARD_H
#define SL_RESETGUARD_H

#include <stdbool.h>
#include <stdint.h>

#define SL_RESET_GUARD_MAX_PER_SEC 100
/* Connections tracked at once per worker; the least recently reset one makes room. */
#define SL_RESET_GUARD_SLOTS 64

typedef struct {
    uint64_t conn_id; /* 0 = free */
    int64_t window_start_ms;
    uint32_t count;
} sl_reset_slot_t;

/* One worker's table; zero-initialise. */
typedef struct {
    sl_reset_slot_t slots[SL_RESET_GUARD_SLOTS];
} sl_reset_guard_t;

/* A request of connection conn_id ended before any answer went out, at now_ms. */
void sl_reset_guard_note(sl_reset_guard_t *g, uint64_t conn_id, int64_t now_ms);

/* Whether conn_id had more than SL_RESET_GUARD_MAX_PER_SEC such ends in its current one-second window. */
bool sl_reset_guard_exceeded(const sl_reset_guard_t *g, uint64_t conn_id, int64_t now_ms);

#endif
