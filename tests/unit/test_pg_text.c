/* The text handed to PostgreSQL: array literals, UTF-8 made valid, which failures are worth a retry. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "core/pg_text.h"

static void
assert_literal(const char *const *cells, size_t n, size_t stride, const char *want)
{
    char *got = sl_pg_array_literal(cells, n, stride);
    cr_assert_str_eq(got, want);
    free(got);
}

Test(pg_text, an_array_literal_quotes_every_cell_and_escapes_quotes_and_backslashes)
{
    const char *cells[] = {"plain", "with \"quotes\"", "back\\slash", "", "{,} NULL"};
    assert_literal(cells, 5, 1, "{\"plain\",\"with \\\"quotes\\\"\",\"back\\\\slash\",\"\",\"{,} NULL\"}");
}

Test(pg_text, a_null_cell_is_the_bare_null_and_the_string_null_is_quoted)
{
    const char *cells[] = {NULL, "NULL", "12"};
    assert_literal(cells, 3, 1, "{NULL,\"NULL\",\"12\"}");
}

Test(pg_text, a_column_is_every_stride_th_cell_and_no_rows_is_the_empty_array)
{
    /* Two rows of three columns, row-major: the second column is b and e. */
    const char *cells[] = {"a", "b", "c", "d", "e", "f"};
    assert_literal(cells + 1, 2, 3, "{\"b\",\"e\"}");
    assert_literal(cells, 0, 3, "{}");
}

Test(pg_text, invalid_utf8_becomes_the_replacement_character_and_valid_text_is_kept)
{
    char *s = sl_pg_utf8_copy("ok \xc3\xa9 \xff bad \xe2\x82 cut");
    cr_assert_str_eq(s, "ok \xc3\xa9 \xef\xbf\xbd bad \xef\xbf\xbd\xef\xbf\xbd cut");
    free(s);
    s = sl_pg_utf8_copy("\xf0\x9f\x98\x80 emoji, \xed\xa0\x80 surrogate");
    cr_assert_str_eq(s, "\xf0\x9f\x98\x80 emoji, \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd surrogate");
    free(s);
    s = sl_pg_utf8_copy("trailing \xc3");
    cr_assert_str_eq(s, "trailing \xef\xbf\xbd");
    free(s);
    cr_assert_null(sl_pg_utf8_copy(NULL));
}

Test(pg_text, connection_resource_shutdown_and_rollback_failures_are_transient_data_errors_are_not)
{
    static const char *const transient[] = {"08006", "08001", "57P01", "57014", "53100",
                                            "40001", "40P01", "58030", NULL};
    for (size_t i = 0; transient[i] != NULL; i++)
        cr_assert(sl_pg_sqlstate_transient(transient[i]), "%s", transient[i]);
    cr_assert(sl_pg_sqlstate_transient(NULL), "no SQLSTATE: the client lost the server");
    static const char *const fatal[] = {"22021", "23505", "42P01", "42501", "22P02", NULL};
    for (size_t i = 0; fatal[i] != NULL; i++)
        cr_assert_not(sl_pg_sqlstate_transient(fatal[i]), "%s", fatal[i]);
}

Test(pg_text, a_copy_line_separates_cells_by_tabs_escapes_what_copy_reads_specially_and_ends_the_line)
{
    const char *cells[] = {"plain", NULL, "tab\there", "line\nbreak\r", "back\\slash", "", "\\N"};
    sl_strbuf_t out = {0};
    sl_pg_copy_line(&out, cells, 7);
    char *got = sl_strbuf_finish(&out);
    cr_assert_str_eq(got, "plain\t\\N\ttab\\there\tline\\nbreak\\r\tback\\\\slash\t\t\\\\N\n");
    free(got);
}
