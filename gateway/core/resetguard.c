#include "resetguard.h"

#include <stddef.h>

static sl_reset_slot_t *
find(sl_reset_guard_t *g, uint64_t conn_id)
{
    for (size_t i = 0; i < SL_RESET_GUARD_SLOTS; i++)
        if (g->slots[i].conn_id == conn_id)
            return &g->slots[i];
    return NULL;
}

void
sl_reset_guard_note(sl_reset_guard_t *g, uint64_t conn_id, int64_t now_ms)
{
    if (conn_id == 0)
        return;
    sl_reset_slot_t *s = find(g, conn_id);
    if (s == NULL) {
        /* A free slot, else the one whose window started longest ago. */
        s = &g->slots[0];
        for (size_t i = 0; i < SL_RESET_GUARD_SLOTS && s->conn_id != 0; i++)
            if (g->slots[i].conn_id == 0 || g->slots[i].window_start_ms < s->window_start_ms)
                s = &g->slots[i];
        *s = (sl_reset_slot_t){.conn_id = conn_id, .window_start_ms = now_ms};
    }
    if (now_ms - s->window_start_ms >= 1000) {
        s->window_start_ms = now_ms;
        s->count = 0;
    }
    s->count++;
}

bool
sl_reset_guard_exceeded(const sl_reset_guard_t *g, uint64_t conn_id, int64_t now_ms)
{
    for (size_t i = 0; i < SL_RESET_GUARD_SLOTS; i++) {
        const sl_reset_slot_t *s = &g->slots[i];
        if (s->conn_id == conn_id && conn_id != 0)
            return now_ms - s->window_start_ms < 1000 && s->count > SL_RESET_GUARD_MAX_PER_SEC;
    }
    return false;
}
