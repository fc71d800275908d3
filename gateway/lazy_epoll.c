/* Lazy epoll deregistration for the workers' h2o loops: see lazy_epoll.h for what and why. */
#define _GNU_SOURCE
#include "lazy_epoll.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { SLOT_NONE, SLOT_LIVE, SLOT_DELETED };

/* What the caller of an adopted instance registered for one descriptor. */
typedef struct {
    uint64_t data;   /* the caller's; the kernel holds the descriptor instead */
    uint32_t events; /* as the kernel holds them */
    int epfd;        /* the adopted instance it is registered in (while not SLOT_NONE) */
    _Atomic uint8_t state;
    _Atomic uint8_t adopted; /* this descriptor is an adopted epoll instance */
} slot_t;

/* Flags a lazy DEL keeps the meaning of: plain level-triggered interest. */
#define PLAIN_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLERR | EPOLLHUP)

/* SL_LAZY_EPOLL_MAX_FD of them, mapped at the first adoption; NULL: none yet (every call passes through). */
static slot_t *_Atomic slots;
static pthread_once_t slots_once = PTHREAD_ONCE_INIT;
static _Atomic int max_fd_seen = -1;
static _Atomic uint64_t ctl_calls;
static __thread bool adopt_next;

static void
map_slots(void)
{
    /* Untouched pages cost nothing: a worker's few thousand descriptors touch a few hundred KiB. */
    void *p = mmap(NULL, (size_t)SL_LAZY_EPOLL_MAX_FD * sizeof(slot_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED)
        atomic_store_explicit(&slots, (slot_t *)p, memory_order_release);
}

static slot_t *
slot_of(int fd)
{
    slot_t *table = atomic_load_explicit(&slots, memory_order_acquire);
    return table != NULL && fd >= 0 && fd < SL_LAZY_EPOLL_MAX_FD ? &table[fd] : NULL;
}

static bool
is_adopted(int epfd)
{
    slot_t *s = slot_of(epfd);
    return s != NULL && atomic_load_explicit(&s->adopted, memory_order_relaxed);
}

static uint8_t
state_of(slot_t *s)
{
    return atomic_load_explicit(&s->state, memory_order_relaxed);
}

static void
set_state(slot_t *s, uint8_t state)
{
    atomic_store_explicit(&s->state, state, memory_order_relaxed);
}

static int
kernel_ctl(int epfd, int op, int fd, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)fd};
    atomic_fetch_add_explicit(&ctl_calls, 1, memory_order_relaxed);
    return (int)syscall(SYS_epoll_ctl, epfd, op, fd, op == EPOLL_CTL_DEL ? NULL : &ev);
}

static int
fail(int err)
{
    errno = err;
    return -1;
}

void
sl_lazy_epoll_adopt_next(void)
{
    pthread_once(&slots_once, map_slots);
    adopt_next = atomic_load_explicit(&slots, memory_order_acquire) != NULL;
}

uint64_t
sl_lazy_epoll_ctl_calls(void)
{
    return atomic_load_explicit(&ctl_calls, memory_order_relaxed);
}

int
epoll_create1(int flags)
{
    int epfd = (int)syscall(SYS_epoll_create1, flags);
    if (epfd >= 0 && adopt_next) {
        adopt_next = false;
        slot_t *s = slot_of(epfd);
        if (s != NULL)
            atomic_store_explicit(&s->adopted, 1, memory_order_relaxed);
    }
    return epfd;
}

int
epoll_create(int size)
{
    return size <= 0 ? fail(EINVAL) : epoll_create1(0);
}

static void
note_fd(int fd)
{
    int seen = atomic_load_explicit(&max_fd_seen, memory_order_relaxed);
    while (fd > seen && !atomic_compare_exchange_weak(&max_fd_seen, &seen, fd))
        ;
}

static int
adopted_add(int epfd, int fd, slot_t *s, const struct epoll_event *ev)
{
    uint8_t state = state_of(s);
    if (state == SLOT_LIVE)
        return fail(EEXIST);
    if (state == SLOT_DELETED && s->epfd != epfd) {
        kernel_ctl(s->epfd, EPOLL_CTL_DEL, fd, 0);
        set_state(s, SLOT_NONE);
        state = SLOT_NONE;
    }
    if (state == SLOT_DELETED) {
        /* Still registered: the kernel's data is the descriptor, so only changed events need a call. */
        if (ev->events != s->events && kernel_ctl(epfd, EPOLL_CTL_MOD, fd, ev->events) != 0)
            return -1;
    } else if (kernel_ctl(epfd, EPOLL_CTL_ADD, fd, ev->events) != 0) {
        return -1;
    }
    s->data = ev->data.u64;
    s->events = ev->events;
    s->epfd = epfd;
    set_state(s, SLOT_LIVE);
    note_fd(fd);
    return 0;
}

static int
adopted_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    slot_t *s = slot_of(fd);
    if (s == NULL)
        return fail(fd < 0 ? EBADF : EMFILE);
    bool live_here = state_of(s) == SLOT_LIVE && s->epfd == epfd;
    switch (op) {
    case EPOLL_CTL_ADD:
        return ev == NULL ? fail(EFAULT) : adopted_add(epfd, fd, s, ev);
    case EPOLL_CTL_MOD:
        if (ev == NULL)
            return fail(EFAULT);
        if (!live_here)
            return fail(ENOENT);
        if (ev->events != s->events && kernel_ctl(epfd, EPOLL_CTL_MOD, fd, ev->events) != 0)
            return -1;
        s->data = ev->data.u64;
        s->events = ev->events;
        return 0;
    case EPOLL_CTL_DEL:
        if (!live_here)
            return fail(ENOENT);
        if ((s->events & ~(uint32_t)PLAIN_EVENTS) == 0) {
            set_state(s, SLOT_DELETED);
            return 0;
        }
        set_state(s, SLOT_NONE);
        return kernel_ctl(epfd, EPOLL_CTL_DEL, fd, 0);
    default:
        return fail(EINVAL);
    }
}

int
epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    if (!is_adopted(epfd))
        return (int)syscall(SYS_epoll_ctl, epfd, op, fd, ev);
    return adopted_ctl(epfd, op, fd, ev);
}

/* Hands the caller its own data back, and deletes for real what an event shows was deleted. */
static int
deliver(int epfd, struct epoll_event *events, int n)
{
    int out = 0;
    for (int i = 0; i < n; i++) {
        int fd = (int)events[i].data.u64;
        slot_t *s = slot_of(fd);
        if (s != NULL && state_of(s) == SLOT_LIVE && s->epfd == epfd) {
            events[out].events = events[i].events;
            events[out].data.u64 = s->data;
            out++;
            continue;
        }
        /* Deleted as the caller sees it (or unknown, which cannot be): it never reaches the caller. */
        kernel_ctl(epfd, EPOLL_CTL_DEL, fd, 0);
        if (s != NULL && s->epfd == epfd)
            set_state(s, SLOT_NONE);
    }
    return out;
}

int
epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout, const sigset_t *sigmask)
{
    int n = (int)syscall(SYS_epoll_pwait, epfd, events, maxevents, timeout, sigmask, _NSIG / 8);
    return n > 0 && is_adopted(epfd) ? deliver(epfd, events, n) : n;
}

int
epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    return epoll_pwait(epfd, events, maxevents, timeout, NULL);
}

/* Forgets every registration of an adopted instance being closed: the kernel drops them with it. */
static void
forget_instance(int epfd)
{
    int last = atomic_load_explicit(&max_fd_seen, memory_order_relaxed);
    for (int fd = 0; fd <= last; fd++) {
        slot_t *s = slot_of(fd);
        if (state_of(s) != SLOT_NONE && s->epfd == epfd)
            set_state(s, SLOT_NONE);
    }
}

int
close(int fd)
{
    slot_t *s = slot_of(fd);
    if (s != NULL) {
        /* A registration the caller deleted goes before its descriptor number can be reused. */
        if (state_of(s) == SLOT_DELETED)
            kernel_ctl(s->epfd, EPOLL_CTL_DEL, fd, 0);
        set_state(s, SLOT_NONE);
        if (atomic_load_explicit(&s->adopted, memory_order_relaxed)) {
            atomic_store_explicit(&s->adopted, 0, memory_order_relaxed);
            forget_instance(fd);
        }
    }
    return (int)syscall(SYS_close, fd);
}
