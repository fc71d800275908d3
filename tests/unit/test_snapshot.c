/* Config snapshots: a reload never frees a config a request still holds. */
#include <criterion/criterion.h>
#include <string.h>

#include "snapshot.h"
#include "test_config_env.h"

static sl_config_t *
config_with_wait(const char *yaml)
{
    sl_config_t *c = test_config_of(yaml);
    cr_assert_not_null(c);
    return c;
}

Test(snapshot, old_config_lives_until_its_last_release)
{
    sl_snapshot_holder_t h;
    sl_snapshot_holder_init(&h, config_with_wait("failover: {wait_secs: 1}"), NULL, (sl_limit_sets_t){0},
                            true);
    sl_snapshot_t *held = sl_snapshot_acquire(&h);
    cr_assert(held->safe_mode);

    sl_snapshot_publish(&h, config_with_wait("failover: {wait_secs: 2}"), NULL, (sl_limit_sets_t){0}, false);
    sl_snapshot_t *fresh = sl_snapshot_acquire(&h);
    cr_assert_eq(fresh->config->failover.wait_secs, 2);
    cr_assert_not(fresh->safe_mode);
    /* The request that started before the reload still sees its own config (ASan checks it is alive). */
    cr_assert_eq(held->config->failover.wait_secs, 1);

    sl_snapshot_release(held);
    sl_snapshot_release(fresh);
    sl_snapshot_holder_dispose(&h);
}

Test(snapshot, a_workers_lease_follows_publishes_and_keeps_an_old_snapshot_for_its_last_request)
{
    sl_snapshot_holder_t h;
    sl_snapshot_holder_init(&h, config_with_wait("failover: {wait_secs: 1}"), NULL, (sl_limit_sets_t){0},
                            false);
    sl_snapshot_cache_t worker = {.holder = &h};

    sl_snapshot_lease_t *first = sl_snapshot_lease(&worker);
    sl_snapshot_lease_t *again = sl_snapshot_lease(&worker);
    cr_assert_eq(first, again, "no publish between them: the same lease");
    cr_assert_eq(first->users, 2);
    sl_snapshot_lease_hold(first); /* the request's own hold, beside its guard's */
    sl_snapshot_lease_drop(again);
    sl_snapshot_lease_drop(again);
    cr_assert_eq(first->users, 1);

    sl_snapshot_publish(&h, config_with_wait("failover: {wait_secs: 2}"), NULL, (sl_limit_sets_t){0}, false);
    /* The request on the old snapshot still reads its config (ASan checks it is alive). */
    cr_assert_eq(first->snapshot->config->failover.wait_secs, 1);
    sl_snapshot_lease_t *next = sl_snapshot_lease(&worker);
    cr_assert_neq(next, first);
    cr_assert_eq(next->snapshot->config->failover.wait_secs, 2);
    cr_assert(first->retired);
    cr_assert_eq(first->snapshot->config->failover.wait_secs, 1, "retired, but its request still holds it");
    sl_snapshot_lease_drop(first); /* its last request ends: the old snapshot goes (ASan: no leak) */

    sl_snapshot_lease_drop(next);
    cr_assert_eq(sl_snapshot_lease(&worker), next, "unused, the current lease stays until a publish");
    sl_snapshot_lease_drop(next);
    sl_snapshot_cache_dispose(&worker);
    sl_snapshot_holder_dispose(&h); /* the last reference: ASan reports a leak if the lease kept one */
}
