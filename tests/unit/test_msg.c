/* Messages: rendering, argument lookup, ownership. */
#include <criterion/criterion.h>

#include "core/msg.h"

Test(msg, renders_arguments_into_the_template)
{
    sl_msg_t m = sl_msg_make(SL_CODE_GW_NOT_FOUND, "method", "POST", "path", "/v1/nope", NULL);
    cr_assert_str_eq(m.text, "sluice: no such endpoint: POST /v1/nope");
    cr_assert_str_eq(sl_msg_arg(&m, "path"), "/v1/nope");
    cr_assert_null(sl_msg_arg(&m, "absent"));
    sl_msg_free(&m);
}

Test(msg, missing_argument_leaves_the_placeholder)
{
    sl_msg_t m = sl_msg_make(SL_CODE_GW_NOT_FOUND, "method", "GET", NULL);
    cr_assert_str_eq(m.text, "sluice: no such endpoint: GET {path}");
    sl_msg_free(&m);
}

Test(msg, list_owns_its_messages)
{
    sl_msgs_t list = {0};
    for (int i = 0; i < 20; i++)
        sl_msgs_push(&list, sl_msg_make(SL_CODE_GW_SAFE_MODE, NULL));
    cr_assert_eq(list.len, 20);
    sl_msgs_clear(&list);
    cr_assert_eq(list.len, 0);
    cr_assert_null(list.items);
}
