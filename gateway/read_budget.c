/* A budget on the first reads of an upstream answer: see read_budget.h for what and why. */
#define _GNU_SOURCE
#include "read_budget.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * Bytes left per descriptor (0: no budget), mapped at the first budget; NULL until then, and every read
 * passes straight through. A descriptor is read and given its budget by one worker, but its number may
 * pass to another thread once closed: the entries are atomics.
 */
static _Atomic uint32_t *_Atomic budgets;
static pthread_once_t budgets_once = PTHREAD_ONCE_INIT;

static void
map_budgets(void)
{
    /* Untouched pages cost nothing: a worker's descriptors touch a few pages. */
    void *p = mmap(NULL, (size_t)SL_READ_BUDGET_MAX_FD * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED)
        atomic_store_explicit(&budgets, (_Atomic uint32_t *)p, memory_order_release);
}

static _Atomic uint32_t *
budget_of(int fd)
{
    _Atomic uint32_t *table = atomic_load_explicit(&budgets, memory_order_acquire);
    return table != NULL && fd >= 0 && fd < SL_READ_BUDGET_MAX_FD ? &table[fd] : NULL;
}

void
sl_read_budget_set(int fd, uint32_t bytes)
{
    pthread_once(&budgets_once, map_budgets);
    _Atomic uint32_t *b = budget_of(fd);
    if (b != NULL && bytes > 0 && bytes < UINT32_MAX)
        atomic_store_explicit(b, bytes, memory_order_relaxed);
}

void
sl_read_budget_clear(int fd)
{
    _Atomic uint32_t *b = budget_of(fd);
    if (b != NULL)
        atomic_store_explicit(b, 0, memory_order_relaxed);
}

static ssize_t
kernel_read(int fd, void *buf, size_t count)
{
    return (ssize_t)syscall(SYS_read, fd, buf, count);
}

ssize_t
read(int fd, void *buf, size_t count)
{
    _Atomic uint32_t *b = budget_of(fd);
    uint32_t left = b != NULL ? atomic_load_explicit(b, memory_order_relaxed) : 0;
    if (left == 0)
        return kernel_read(fd, buf, count);
    /* UINT32_MAX marks a spent budget: this read is the EAGAIN that ends the reader's loop. */
    if (left == UINT32_MAX) {
        atomic_store_explicit(b, 0, memory_order_relaxed);
        errno = EAGAIN;
        return -1;
    }
    size_t asked = count < left ? count : left;
    ssize_t got = kernel_read(fd, buf, asked);
    uint32_t after;
    if (got <= 0 || ((size_t)got == asked && asked < count))
        after = 0; /* the end, or a read cut short by the budget: the reader's loop stops by itself */
    else if ((uint32_t)got == left)
        after = UINT32_MAX; /* the reader got all it asked for and reads again */
    else
        after = left - (uint32_t)got;
    atomic_store_explicit(b, after, memory_order_relaxed);
    return got;
}
