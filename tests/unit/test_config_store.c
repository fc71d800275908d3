/*
 * The loader's `store:` section (config.md, cluster.md "PostgreSQL request
 * DB"): SQLite's path by default; url for PostgreSQL, ${VAR} expanded and
 * checked by libpq's own parser, with TCP, unix-socket and sslmode forms;
 * the spool's path (beside the config file) and cap; every problem with its
 * code, path and line, and the password in none of them.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "test_config_env.h"

static const char *const store_vars[][2] = {
    {"PGPASSWORD", "s3cret-pg-pass"},
    {NULL, NULL},
};

static const sl_config_env_t store_env = {fake_getenv, fake_read_zone, fake_file_readable,
                                          (void *)store_vars};

static sl_config_result_t res;

static void
teardown(void)
{
    sl_config_result_free(&res);
}

TestSuite(config_store, .fini = teardown);

static const sl_config_t *
parse(const char *yaml)
{
    res = sl_config_parse(yaml, strlen(yaml), "/etc/sluice/sluice.yaml", &store_env);
    return res.config;
}

static void
assert_no_errors(void)
{
    for (size_t i = 0; i < res.errors.len; i++)
        cr_log_error("unexpected: %s", res.errors.items[i].text);
    cr_assert_eq(res.errors.len, 0);
}

static const sl_msg_t *
assert_single_error(sl_code_t code, const char *path, const char *line)
{
    cr_assert_eq(res.errors.len, 1, "expected 1 error, got %zu", res.errors.len);
    const sl_msg_t *m = &res.errors.items[0];
    cr_assert_eq(m->code, code, "code %s, expected %s (%s)", sl_code_slug(m->code), sl_code_slug(code),
                 m->text);
    cr_assert_str_eq(sl_msg_arg(m, "path"), path, "%s", m->text);
    cr_assert_str_eq(sl_msg_arg(m, "line"), line, "%s", m->text);
    cr_assert_null(strstr(m->text, "s3cret-pg-pass"), "the password in a message: %s", m->text);
    return m;
}

Test(config_store, the_default_is_sqlite_beside_nothing_and_a_spool_beside_the_config_file)
{
    const sl_config_t *c = parse("version: 1\n");
    assert_no_errors();
    cr_assert_str_eq(c->store_path, "sluice.db");
    cr_assert_null(c->store_url);
    cr_assert_str_eq(c->spool_path, "/etc/sluice/sluice.spool");
    cr_assert_eq(c->spool_max_bytes, 256ULL << 20);
}

Test(config_store, a_postgres_url_takes_its_password_from_a_variable)
{
    const sl_config_t *c =
        parse("store:\n  url: \"postgres://sluice:${PGPASSWORD}@db.internal:6543/sluice\"\n");
    assert_no_errors();
    cr_assert_str_eq(c->store_url, "postgres://sluice:s3cret-pg-pass@db.internal:6543/sluice");
}

Test(config_store, every_url_form_libpq_takes_loads)
{
    static const char *const urls[] = {
        "postgresql://sluice@localhost/sluice",
        "postgres://sluice:pw@127.0.0.1/sluice?sslmode=require",
        "postgres://sluice:pw@[::1]:5432/sluice?sslmode=verify-full&connect_timeout=5",
        "postgres://sluice:pw@/sluice?host=/var/run/postgresql",
        "postgres:///sluice?host=%2Ftmp%2Fpg&port=5433",
    };
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        char yaml[512];
        snprintf(yaml, sizeof yaml, "store: {url: \"%s\"}\n", urls[i]);
        const sl_config_t *c = parse(yaml);
        assert_no_errors();
        cr_assert_str_eq(c->store_url, urls[i]);
        sl_config_result_free(&res);
    }
}

Test(config_store, a_url_of_another_scheme_is_refused_with_its_path_and_line)
{
    parse("version: 1\nstore:\n  url: \"mysql://root:${PGPASSWORD}@db/sluice\"\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_STORE_BAD_URL, "store.url", "3");
    cr_assert(strstr(m->text, "postgres://") != NULL, "%s", m->text);
}

Test(config_store, a_url_libpq_cannot_parse_is_refused_with_libpqs_reason_masked)
{
    parse("store:\n  url: \"postgres://sluice:${PGPASSWORD}@db/sluice?sslmode=sometimes&bogus=1\"\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_STORE_BAD_URL, "store.url", "2");
    cr_assert(strstr(m->text, "bogus") != NULL || strstr(m->text, "sslmode") != NULL, "%s", m->text);
}

Test(config_store, an_unset_variable_in_the_url_is_named)
{
    parse("store:\n  url: \"postgres://sluice:${NO_SUCH_VAR}@db/sluice\"\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_UNSET_VARIABLE, "store.url", "2");
    cr_assert_str_eq(sl_msg_arg(m, "variable"), "NO_SUCH_VAR");
}

Test(config_store, path_and_url_together_are_refused_at_the_url)
{
    parse("store:\n  path: sluice.db\n  url: \"postgres://sluice@db/sluice\"\n");
    assert_single_error(SL_CODE_CONFIG_STORE_PATH_AND_URL, "store.url", "3");
}

Test(config_store, the_spool_takes_a_path_and_a_cap_within_its_range)
{
    const sl_config_t *c =
        parse("store:\n  url: \"postgres://sluice@db/sluice\"\n  spool: {path: /var/spool/sluice.spool, "
              "max_bytes: 1048576}\n");
    assert_no_errors();
    cr_assert_str_eq(c->spool_path, "/var/spool/sluice.spool");
    cr_assert_eq(c->spool_max_bytes, 1048576);
    sl_config_result_free(&res);
    parse("store:\n  url: \"postgres://sluice@db/sluice\"\n  spool: {max_bytes: 1000}\n");
    cr_assert_eq(res.errors.len, 1);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[0], "path"), "store.spool.max_bytes");
    sl_config_result_free(&res);
    parse("store:\n  spool: {pth: x}\n");
    assert_single_error(SL_CODE_CONFIG_UNKNOWN_FIELD, "store.spool.pth", "2");
}
