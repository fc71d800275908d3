/*
 * The two tables of the request path (req.h): where a request's phase may
 * move (request.c) and where what its client has been sent may move
 * (hold.c). Each is walked whole: the allowed moves are exactly these, every
 * phase is reachable from the first and can reach the end, and the ends
 * are final. tests/check_moves.py checks that nothing else moves them.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "req.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* The moves behaviour.md §1-6 makes, written out: "from -> to". */
static const char *const phase_moves[] = {
    "routing -> routing",
    "routing -> waiting_head",
    "routing -> queued",
    "routing -> done",
    "backoff -> routing",
    "backoff -> done",
    "queued -> routing",
    "queued -> queued",
    "queued -> done",
    "waiting_head -> held",
    "waiting_head -> reading_error",
    "waiting_head -> streaming",
    "waiting_head -> routing",
    "waiting_head -> backoff",
    "waiting_head -> done",
    "held -> streaming",
    "held -> routing",
    "held -> backoff",
    "held -> done",
    "reading_error -> streaming",
    "reading_error -> routing",
    "reading_error -> backoff",
    "reading_error -> done",
    "streaming -> done",
};

static const char *const out_moves[] = {
    "none -> keepalive",   "none -> answer",  "none -> closed",   "keepalive -> answer", "keepalive -> final",
    "keepalive -> closed", "answer -> final", "answer -> closed", "final -> closed",     "closed -> closed",
};

static bool
listed(const char *const *moves, size_t n, const char *from, const char *to)
{
    char move[64];
    snprintf(move, sizeof(move), "%s -> %s", from, to);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(moves[i], move) == 0)
            return true;
    }
    return false;
}

Test(moves, the_phase_table_is_exactly_the_moves_of_the_request_path)
{
    for (int from = 0; from < PHASE_COUNT; from++) {
        for (int to = 0; to < PHASE_COUNT; to++) {
            const char *f = sl__state_name(&sl__phase_moves, from), *t = sl__state_name(&sl__phase_moves, to);
            cr_assert_eq(sl__may_move(&sl__phase_moves, from, to), listed(phase_moves, N(phase_moves), f, t),
                         "%s -> %s", f, t);
        }
    }
    cr_assert_not(sl__may_move(&sl__phase_moves, PHASE_COUNT, PHASE_DONE), "out of range");
}

/* Every phase reachable from `from` along the table. */
static unsigned
reachable_phases(req_phase_t from)
{
    unsigned seen = 1u << from, grew;
    do {
        grew = 0;
        for (int a = 0; a < PHASE_COUNT; a++) {
            for (int b = 0; b < PHASE_COUNT; b++) {
                if ((seen & (1u << a)) && !(seen & (1u << b)) && sl__may_move(&sl__phase_moves, a, b)) {
                    seen |= 1u << b;
                    grew = 1;
                }
            }
        }
    } while (grew);
    return seen;
}

Test(moves, every_phase_is_reached_from_routing_and_reaches_done_which_is_final)
{
    cr_assert_eq(reachable_phases(PHASE_ROUTING), (1u << PHASE_COUNT) - 1, "every phase is reachable");
    for (int p = 0; p < PHASE_COUNT; p++)
        cr_assert(reachable_phases((req_phase_t)p) & (1u << PHASE_DONE), "%s can end",
                  sl__state_name(&sl__phase_moves, p));
    for (int p = 0; p < PHASE_COUNT; p++)
        cr_assert_not(sl__may_move(&sl__phase_moves, PHASE_DONE, p), "done -> %s",
                      sl__state_name(&sl__phase_moves, p));
}

Test(moves, the_client_output_table_is_exactly_its_moves_and_only_goes_forward)
{
    for (int from = 0; from < OUT_COUNT; from++) {
        for (int to = 0; to < OUT_COUNT; to++) {
            const char *f = sl__state_name(&sl__client_out_moves, from),
                       *t = sl__state_name(&sl__client_out_moves, to);
            bool may = sl__may_move(&sl__client_out_moves, from, to);
            cr_assert_eq(may, listed(out_moves, N(out_moves), f, t), "%s -> %s", f, t);
            /* What went to a client cannot be taken back. */
            if (may)
                cr_assert(to > from || to == OUT_CLOSED, "%s -> %s goes back", f, t);
        }
    }
    for (int s = 0; s < OUT_COUNT; s++)
        cr_assert(sl__may_move(&sl__client_out_moves, s, OUT_CLOSED), "a client can always go away (%s)",
                  sl__state_name(&sl__client_out_moves, s));
}
