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
