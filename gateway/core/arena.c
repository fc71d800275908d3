#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

#define BLOCK_SIZE 8192

struct block {
    struct block *next;
    size_t used, size;
    max_align_t data[];
};

struct sl_arena {
    struct block *head;
};

sl_arena_t *
sl_arena_new(void)
{
    return sl_xcalloc(1, sizeof(sl_arena_t));
}

void *
sl_arena_alloc(sl_arena_t *arena, size_t size)
{
    size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    struct block *b = arena->head;
    if (b == NULL || b->size - b->used < size) {
        size_t cap = size > BLOCK_SIZE ? size : BLOCK_SIZE;
        b = sl_xmalloc(sizeof(*b) + cap);
        b->size = cap;
        b->used = 0;
        b->next = arena->head;
        arena->head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

char *
sl_arena_strndup(sl_arena_t *arena, const char *s, size_t n)
{
    char *d = sl_arena_alloc(arena, n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *
sl_arena_strdup(sl_arena_t *arena, const char *s)
{
    return sl_arena_strndup(arena, s, strlen(s));
}

void
sl_arena_free(sl_arena_t *arena)
{
    if (arena == NULL)
        return;
    struct block *b = arena->head;
    while (b != NULL) {
        struct block *next = b->next;
        free(b);
        b = next;
    }
    free(arena);
}
