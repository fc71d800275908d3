#include <criterion/criterion.h>
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lazy_epoll.h"

typedef struct {
    int epfd, sv[2];
} fixture_t;

static fixture_t
adopted(void)
{
    fixture_t f;
    sl_lazy_epoll_adopt_next();
    f.epfd = epoll_create1(EPOLL_CLOEXEC);
    cr_assert_geq(f.epfd, 0);
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, f.sv), 0);
    return f;
}

static int
ctl(int epfd, int op, int fd, uint32_t events, uint64_t data)
{
    struct epoll_event ev = {.events = events, .data.u64 = data};
    return epoll_ctl(epfd, op, fd, &ev);
}

static int
wait_one(int epfd, struct epoll_event *ev)
{
    return epoll_wait(epfd, ev, 1, 0);
}

Test(lazy_epoll, a_deleted_registration_comes_back_without_a_system_call_and_with_the_new_data)
{
    fixture_t f = adopted();
    uint64_t before = sl_lazy_epoll_ctl_calls();
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, f.sv[0], EPOLLIN, 111), 0);
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before + 1);
    cr_assert_eq(epoll_ctl(f.epfd, EPOLL_CTL_DEL, f.sv[0], NULL), 0);
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, f.sv[0], EPOLLIN, 222), 0);
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before + 1, "the DEL and the ADD made no system call");
    cr_assert_eq(write(f.sv[1], "x", 1), 1);
    struct epoll_event ev;
    cr_assert_eq(wait_one(f.epfd, &ev), 1);
    cr_assert_eq(ev.data.u64, 222);
    cr_assert(ev.events & EPOLLIN);
}

Test(lazy_epoll, an_event_for_a_deleted_registration_never_reaches_the_caller_and_deletes_it)
{
    fixture_t f = adopted();
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, f.sv[0], EPOLLIN, 1), 0);
    cr_assert_eq(epoll_ctl(f.epfd, EPOLL_CTL_DEL, f.sv[0], NULL), 0);
    cr_assert_eq(write(f.sv[1], "x", 1), 1);
    uint64_t before = sl_lazy_epoll_ctl_calls();
    struct epoll_event ev;
    cr_assert_eq(wait_one(f.epfd, &ev), 0, "deleted, as the caller sees it");
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before + 1, "deleted for real then");
    cr_assert_eq(wait_one(f.epfd, &ev), 0);
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before + 1, "and only once: the kernel holds it no more");
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, f.sv[0], EPOLLIN, 7), 0);
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before + 2);
    cr_assert_eq(wait_one(f.epfd, &ev), 1, "the byte still waits, so it is reported once added again");
    cr_assert_eq(ev.data.u64, 7);
}

Test(lazy_epoll, a_closed_descriptor_leaves_nothing_behind_for_the_next_one_on_its_number)
{
    fixture_t f = adopted();
    int old = f.sv[0];
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, old, EPOLLIN, 1), 0);
    cr_assert_eq(epoll_ctl(f.epfd, EPOLL_CTL_DEL, old, NULL), 0);
    uint64_t before = sl_lazy_epoll_ctl_calls();
    cr_assert_eq(close(old), 0);
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before + 1, "the registration went before the descriptor");
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    cr_assert_eq(sv[0], old, "the lowest free number comes back");
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, sv[0], EPOLLIN, 99), 0);
    cr_assert_eq(write(sv[1], "x", 1), 1);
    struct epoll_event ev;
    cr_assert_eq(wait_one(f.epfd, &ev), 1);
    cr_assert_eq(ev.data.u64, 99);
}

Test(lazy_epoll, a_deleted_registration_is_gone_to_mod_and_del_and_a_live_one_cannot_be_added_twice)
{
    fixture_t f = adopted();
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, f.sv[0], EPOLLIN, 1), 0);
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, f.sv[0], EPOLLIN, 1), -1);
    cr_assert_eq(errno, EEXIST);
    cr_assert_eq(epoll_ctl(f.epfd, EPOLL_CTL_DEL, f.sv[0], NULL), 0);
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_MOD, f.sv[0], EPOLLIN, 1), -1);
    cr_assert_eq(errno, ENOENT);
    cr_assert_eq(epoll_ctl(f.epfd, EPOLL_CTL_DEL, f.sv[0], NULL), -1);
    cr_assert_eq(errno, ENOENT);
}

Test(lazy_epoll, other_events_on_the_way_back_are_given_to_the_kernel)
{
    fixture_t f = adopted();
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, f.sv[0], EPOLLIN, 1), 0);
    cr_assert_eq(epoll_ctl(f.epfd, EPOLL_CTL_DEL, f.sv[0], NULL), 0);
    uint64_t before = sl_lazy_epoll_ctl_calls();
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, f.sv[0], EPOLLOUT, 2), 0);
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before + 1);
    struct epoll_event ev;
    cr_assert_eq(wait_one(f.epfd, &ev), 1, "an empty socket is writable");
    cr_assert_eq(ev.data.u64, 2);
    cr_assert(ev.events & EPOLLOUT);
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_MOD, f.sv[0], EPOLLOUT, 3), 0);
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before + 1, "new data alone needs no call");
    cr_assert_eq(wait_one(f.epfd, &ev), 1);
    cr_assert_eq(ev.data.u64, 3);
}

Test(lazy_epoll, an_edge_triggered_registration_is_deleted_at_once)
{
    fixture_t f = adopted();
    cr_assert_eq(ctl(f.epfd, EPOLL_CTL_ADD, f.sv[0], EPOLLIN | EPOLLET, 1), 0);
    uint64_t before = sl_lazy_epoll_ctl_calls();
    cr_assert_eq(epoll_ctl(f.epfd, EPOLL_CTL_DEL, f.sv[0], NULL), 0);
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before + 1);
}

Test(lazy_epoll, an_instance_not_adopted_keeps_the_kernels_own_behaviour)
{
    fixture_t f = adopted();
    int plain = epoll_create1(0);
    uint64_t before = sl_lazy_epoll_ctl_calls();
    cr_assert_eq(ctl(plain, EPOLL_CTL_ADD, f.sv[0], EPOLLIN, 0xfeedULL << 32), 0);
    cr_assert_eq(write(f.sv[1], "x", 1), 1);
    struct epoll_event ev;
    cr_assert_eq(wait_one(plain, &ev), 1);
    cr_assert_eq(ev.data.u64, 0xfeedULL << 32, "the caller's data, as the kernel holds it");
    cr_assert_eq(epoll_ctl(plain, EPOLL_CTL_DEL, f.sv[0], NULL), 0);
    cr_assert_eq(wait_one(plain, &ev), 0, "deleted at once");
    cr_assert_eq(ctl(plain, EPOLL_CTL_MOD, f.sv[0], EPOLLIN, 0), -1);
    cr_assert_eq(errno, ENOENT, "the kernel's own answer");
    cr_assert_eq(sl_lazy_epoll_ctl_calls(), before, "none of it counted as an adopted instance's");
}
