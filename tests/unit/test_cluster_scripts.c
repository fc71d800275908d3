/*
 * The scripts' SHA-1s as EVALSHA names them (cluster_scripts.h): hashed
 * once per text, a constant found again by its address, a copy by its
 * bytes, and the same name either way.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_scripts.h"

static const char one[] = "return 1", two[] = "return 2";

Test(cluster_scripts, a_script_is_named_by_the_sha1_of_its_text)
{
    sl_script_shas_t shas = {0};
    cr_expect_str_eq(sl_script_sha(&shas, one, strlen(one), true),
                     "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    cr_expect_str_eq(sl_script_sha(&shas, two, strlen(two), false),
                     "7f923f79fe76194c868d7e1d0820de36700eb649");
    cr_expect_eq(shas.n, 2);
    sl_script_shas_dispose(&shas);
}

Test(cluster_scripts, a_copy_of_a_constant_and_the_constant_share_one_name)
{
    sl_script_shas_t shas = {0};
    char *copy = strdup(one);
    const char *by_copy = sl_script_sha(&shas, copy, strlen(copy), false);
    const char *by_address = sl_script_sha(&shas, one, strlen(one), true);
    cr_expect_eq(by_copy, by_address, "hashed once");
    cr_expect_eq(sl_script_sha(&shas, one, strlen(one), true), by_address);
    cr_expect_eq(shas.n, 1);
    /* A copy freed and another text at the same address is not taken for it: copies are compared. */
    free(copy);
    char *other = strdup(two);
    cr_expect_str_eq(sl_script_sha(&shas, other, strlen(other), false),
                     "7f923f79fe76194c868d7e1d0820de36700eb649");
    free(other);
    sl_script_shas_dispose(&shas);
}
