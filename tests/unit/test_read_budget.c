#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "read_budget.h"

/* A connected pair whose reading end does not block, as h2o's sockets. */
typedef struct {
    int rd, wr;
} pair_t;

static pair_t
nonblocking_pair(void)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    cr_assert_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    return (pair_t){.rd = sv[0], .wr = sv[1]};
}

static void
send_bytes(int fd, size_t n)
{
    static char bytes[64 * 1024];
    cr_assert_leq(n, sizeof(bytes));
    memset(bytes, 'x', n);
    cr_assert_eq(write(fd, bytes, n), (ssize_t)n);
}

/*
 * One turn of h2o 2.2.5's read loop (on_read_core): reads while a read fills what it asked for, and stops at
 * a short read or EAGAIN. Returns the bytes the turn read.
 */
static size_t
read_turn(int fd)
{
    static char buf[256 * 1024];
    size_t got = 0, ask = 8192;
    for (;;) {
        ssize_t n = read(fd, buf + got, ask);
        if (n < 0) {
            cr_assert_eq(errno, EAGAIN);
            return got;
        }
        got += (size_t)n;
        if ((size_t)n != ask || n == 0)
            return got;
        ask = ask * 2 <= sizeof(buf) - got ? ask * 2 : sizeof(buf) - got;
    }
}

Test(read_budget, a_burst_is_read_in_two_turns_the_budget_first_then_the_rest)
{
    pair_t p = nonblocking_pair();
    send_bytes(p.wr, 40000);
    sl_read_budget_set(p.rd, 4096);
    cr_assert_eq(read_turn(p.rd), 4096, "the first turn ends at the budget, the rest still waiting");
    cr_assert_eq(read_turn(p.rd), 40000 - 4096, "the next turn reads as h2o always did");
    close(p.rd);
    close(p.wr);
}

Test(read_budget, a_budget_that_fills_a_read_exactly_ends_the_turn_with_eagain)
{
    pair_t p = nonblocking_pair();
    send_bytes(p.wr, 20000);
    sl_read_budget_set(p.rd, 8192);
    char buf[8192];
    cr_assert_eq(read(p.rd, buf, sizeof(buf)), 8192);
    errno = 0;
    cr_assert_eq(read(p.rd, buf, sizeof(buf)), -1, "the spent budget ends the loop");
    cr_assert_eq(errno, EAGAIN);
    cr_assert_eq(read(p.rd, buf, sizeof(buf)), 8192, "and only once");
    close(p.rd);
    close(p.wr);
}

Test(read_budget, a_head_that_comes_alone_leaves_the_rest_of_the_budget_for_the_events_after_it)
{
    pair_t p = nonblocking_pair();
    sl_read_budget_set(p.rd, 4096);
    send_bytes(p.wr, 300);
    cr_assert_eq(read_turn(p.rd), 300);
    send_bytes(p.wr, 30000);
    cr_assert_eq(read_turn(p.rd), 4096 - 300, "the burst after the head still comes in a turn of its own");
    cr_assert_eq(read_turn(p.rd), 30000 - (4096 - 300));
    close(p.rd);
    close(p.wr);
}

Test(read_budget, a_cleared_budget_and_a_descriptor_without_one_read_as_usual)
{
    pair_t p = nonblocking_pair();
    send_bytes(p.wr, 30000);
    cr_assert_eq(read_turn(p.rd), 30000);
    sl_read_budget_set(p.rd, 4096);
    sl_read_budget_clear(p.rd);
    send_bytes(p.wr, 30000);
    cr_assert_eq(read_turn(p.rd), 30000);
    close(p.rd);
    close(p.wr);
}

Test(read_budget, the_end_of_the_stream_ends_the_budget)
{
    pair_t p = nonblocking_pair();
    sl_read_budget_set(p.rd, 4096);
    send_bytes(p.wr, 100);
    close(p.wr);
    char buf[8192];
    cr_assert_eq(read(p.rd, buf, sizeof(buf)), 100);
    cr_assert_eq(read(p.rd, buf, sizeof(buf)), 0);
    cr_assert_eq(read(p.rd, buf, sizeof(buf)), 0, "no EAGAIN is made up after the end");
    close(p.rd);
}
