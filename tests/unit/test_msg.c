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

Test(msg, a_template_names_its_placeholders_exactly)
{
    const char *t = sl_code_template(SL_CODE_GW_UPSTREAM_STATUS); /* "sluice: {provider} answered {status}" */
    cr_assert(sl_msg_template_names(t, "provider"));
    cr_assert(sl_msg_template_names(t, "status"));
    cr_assert_not(sl_msg_template_names(t, "stat"));
    cr_assert_not(sl_msg_template_names(t, "reason"));
}

Test(msg, the_other_placeholder_is_the_first_besides_the_one_excepted)
{
    char name[16];
    cr_assert(sl_msg_template_other("sluice: {provider} answered {status}", "provider", name, sizeof(name)));
    cr_assert_str_eq(name, "status");
    cr_assert(sl_msg_template_other("{secs} s from {provider}", "provider", name, sizeof(name)));
    cr_assert_str_eq(name, "secs");
    cr_assert_not(sl_msg_template_other("{provider} is healthy again", "provider", name, sizeof(name)));
    cr_assert_not(sl_msg_template_other("no placeholder", "provider", name, sizeof(name)));
    cr_assert_not(sl_msg_template_other("{a_name_too_long_for_it}", "provider", name, sizeof(name)));
}
