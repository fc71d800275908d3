#include <criterion/criterion.h>
#include "cli.h"
Test(cli, placeholder)
{
    cr_assert(1);
}
