/*
 * A region allocator: many small allocations, one free. The config snapshot
 * keeps all its strings and arrays in one arena so it is freed in one call.
 */
#ifndef SL_ARENA_H
#define SL_ARENA_H

#include <stddef.h>

typedef struct sl_arena sl_arena_t;

sl_arena_t *sl_arena_new(void);
/* Zeroed memory that lives until sl_arena_free. Never NULL. */
void *sl_arena_alloc(sl_arena_t *arena, size_t size);
char *sl_arena_strndup(sl_arena_t *arena, const char *s, size_t n);
char *sl_arena_strdup(sl_arena_t *arena, const char *s);
void sl_arena_free(sl_arena_t *arena);

#endif
