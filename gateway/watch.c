#include "watch.h"

#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/xalloc.h"

struct sl_watch {
    int epfd;
    h2o_socket_t *sock;
};

static void
on_ready(h2o_socket_t *sock, const char *err)
{
    sl_watch_t *w = sock->data;
    if (err != NULL)
        return;
    struct epoll_event events[64];
    int n = epoll_wait(w->epfd, events, 64, 0);
    for (int i = 0; i < n; i++) {
        sl_watch_entry_t *e = events[i].data.ptr;
        /* An entry may have been removed by an earlier callback of this round. */
        if (!e->active)
            continue;
        sl_watch_remove(w, e);
        e->cb(e->data);
    }
}

sl_watch_t *
sl_watch_new(h2o_loop_t *loop)
{
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        return NULL;
    sl_watch_t *w = sl_xcalloc(1, sizeof(*w));
    w->epfd = epfd;
    w->sock = h2o_evloop_socket_create(loop, epfd, H2O_SOCKET_FLAG_DONT_READ);
    w->sock->data = w;
    h2o_socket_read_start(w->sock, on_ready);
    return w;
}

bool
sl_watch_add(sl_watch_t *w, sl_watch_entry_t *e, int fd, sl_watch_cb cb, void *data)
{
    if (w == NULL || e->active)
        return false;
    struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = e};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return false;
    *e = (sl_watch_entry_t){.fd = fd, .cb = cb, .data = data, .active = true};
    return true;
}

void
sl_watch_remove(sl_watch_t *w, sl_watch_entry_t *e)
{
    if (w == NULL || !e->active)
        return;
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, e->fd, NULL);
    e->active = false;
}
