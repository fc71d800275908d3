/*
 * Noticing that an HTTP/1.1 client went away before its response started.
 * h2o 2.2.5 does not notice that by itself (it reads nothing while a request
 * is being handled), yet a request may wait long before answering: held,
 * backing off, queued. One extra epoll set per worker, registered with h2o's
 * loop, watches the client sockets of such requests for EPOLLRDHUP only, so
 * pipelined bytes do not wake it (stack-notes.md).
 */
#ifndef SL_WATCH_H
#define SL_WATCH_H

#include <stdbool.h>

#include <h2o.h>

typedef struct sl_watch sl_watch_t;
typedef void (*sl_watch_cb)(void *data);

/* One watched socket; embed it in its owner and zero-initialise it. */
typedef struct {
    int fd;
    sl_watch_cb cb;
    void *data;
    bool active;
} sl_watch_entry_t;

/* A worker's watcher on its loop. NULL when the epoll set cannot be made (then nothing is watched). */
sl_watch_t *sl_watch_new(h2o_loop_t *loop);

/*
 * Calls cb(data) on the loop once the peer of fd closes or resets; the entry
 * is removed first. Returns false (and watches nothing) when fd cannot be
 * added. The owner removes the entry before it frees it.
 */
bool sl_watch_add(sl_watch_t *watch, sl_watch_entry_t *e, int fd, sl_watch_cb cb, void *data);
void sl_watch_remove(sl_watch_t *watch, sl_watch_entry_t *e);

#endif
