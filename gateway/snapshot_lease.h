/*
 * The types of a worker's leases on config snapshots (snapshot.h has the
 * functions), apart so that worker.h can hold a cache without snapshot.h's
 * includes.
 */
#ifndef SL_SNAPSHOT_LEASE_H
#define SL_SNAPSHOT_LEASE_H

#include <stdbool.h>
#include <stddef.h>

struct sl_snapshot;
struct sl_snapshot_holder;

/*
 * A worker's share of the snapshots. Both workers taking a reference on the
 * same snapshot for every request made its count (and the holder's lock) a
 * cache line they passed back and forth; instead a worker holds one
 * reference per snapshot it uses and counts its own requests on it without
 * atomics (a request ends on the thread it began on). The worker's current
 * lease stays until a publish; an older one goes with its last request.
 */
typedef struct {
    struct sl_snapshot *snapshot;
    size_t users; /* this worker's requests (and guards) on it */
    bool retired; /* no longer the worker's current one: freed with its last user */
} sl_snapshot_lease_t;

typedef struct {
    struct sl_snapshot_holder *holder;
    sl_snapshot_lease_t *current; /* NULL until the first request */
    unsigned generation;          /* the holder's, when current was taken */
} sl_snapshot_cache_t;

#endif
