/*
 * Lazy epoll deregistration for the workers' h2o loops.
 *
 * h2o 2.2.5's HTTP/1 server stops reading a client socket while it serves a
 * request and starts again after the answer: an epoll_ctl DEL and an ADD per
 * request, each a system call (about 1.9 µs each on the 2-core VM of the
 * benchmarks, more than a tenth of sluice's CPU per request). This module
 * interposes epoll_ctl, epoll_wait, epoll_pwait, epoll_create(1) and close for
 * the whole process, and changes nothing for any epoll instance but those a
 * worker adopts (sl_lazy_epoll_adopt_next). On those:
 *
 *   - a DEL of a plain level-triggered registration only marks it deleted; the
 *     kernel keeps it, so the ADD that follows (same events, same data) is no
 *     system call at all;
 *   - an event for a registration marked deleted is the moment to delete it
 *     for real: it is removed then and never reaches the caller (as it would
 *     not have, deleted);
 *   - close of a descriptor marked deleted deletes it first, so the kernel
 *     never holds a registration for a closed descriptor number.
 *
 * Registrations carry the descriptor as their kernel data, and the caller's
 * data is handed back from a table indexed by descriptor, which is how an
 * event is known to be for a deleted one. A descriptor is registered in one
 * adopted instance at a time (as each h2o socket belongs to one loop); at or
 * above SL_LAZY_EPOLL_MAX_FD it cannot be registered in one (EMFILE).
 */
#ifndef SL_LAZY_EPOLL_H
#define SL_LAZY_EPOLL_H

#include <stdint.h>

#define SL_LAZY_EPOLL_MAX_FD (1 << 20) /* Linux's default nr_open */

/* The next epoll instance this thread creates is adopted (h2o_evloop_create calls epoll_create). */
void sl_lazy_epoll_adopt_next(void);

/* System calls made for adopted instances' epoll_ctl since the start: what the tests count. */
uint64_t sl_lazy_epoll_ctl_calls(void);

#endif
