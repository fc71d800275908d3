/*
 * The loader's `cluster:` section (cluster.md "Config"): defaults, every
 * form of the Redis URL into its parts, every problem with its code, path
 * and line (several at once), ${VAR} in redis and instance, and the
 * password kept out of the summary and of every message.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "test_config_env.h"

static const char *const cluster_vars[][2] = {
    {"REDIS_PASSWORD", "pa:ss@w/rd"},
    {"HOSTNAME", "gw-7.example"},
    {"REDIS_HOST", "redis.internal"},
    {NULL, NULL},
};

static const sl_config_env_t cluster_env = {fake_getenv, fake_read_zone, fake_file_readable,
                                            (void *)cluster_vars};

static sl_config_result_t res;

static void
teardown(void)
{
    sl_config_result_free(&res);
}

TestSuite(config_cluster, .fini = teardown);

static sl_config_result_t
parse(const char *yaml)
{
    return sl_config_parse(yaml, strlen(yaml), "test.yaml", &cluster_env);
}

static void
log_errors(void)
{
    for (size_t i = 0; i < res.errors.len; i++)
        cr_log_info("error: %s [%s]", res.errors.items[i].text, sl_code_slug(res.errors.items[i].code));
}

static void
assert_no_errors(void)
{
    for (size_t i = 0; i < res.errors.len; i++)
        cr_log_error("unexpected: %s", res.errors.items[i].text);
    cr_assert_eq(res.errors.len, 0);
}

/* Asserts errors[i] has this code, path and line. */
static const sl_msg_t *
assert_error(size_t i, sl_code_t code, const char *path, const char *line)
{
    cr_assert_gt(res.errors.len, i, "expected an error #%zu, got %zu", i, res.errors.len);
    const sl_msg_t *m = &res.errors.items[i];
    cr_assert_eq(m->code, code, "#%zu: code %s, expected %s (%s)", i, sl_code_slug(m->code),
                 sl_code_slug(code), m->text);
    cr_assert_str_eq(sl_msg_arg(m, "path"), path, "#%zu: %s", i, m->text);
    cr_assert_str_eq(sl_msg_arg(m, "line"), line, "#%zu: %s", i, m->text);
    return m;
}

static const sl_msg_t *
assert_single_error(sl_code_t code, const char *path, const char *line)
{
    log_errors();
    cr_assert_eq(res.errors.len, 1, "expected 1 error, got %zu", res.errors.len);
    return assert_error(0, code, path, line);
}

/* A config with only `cluster: {redis: URL}`; its errors are in res. */
static const sl_cluster_config_t *
with_url(const char *url)
{
    char yaml[512];
    snprintf(yaml, sizeof(yaml), "cluster:\n  redis: \"%s\"\n", url);
    sl_config_result_free(&res);
    res = parse(yaml);
    return &res.config->cluster;
}

static void
assert_str_or_null(const char *got, const char *want, const char *what)
{
    if (want == NULL)
        cr_assert_null(got, "%s: '%s', expected none", what, got);
    else
        cr_assert(got != NULL && strcmp(got, want) == 0, "%s: '%s', expected '%s'", what,
                  got ? got : "(null)", want);
}

/* ---- defaults ------------------------------------------------------------ */

Test(config_cluster, without_the_section_cluster_mode_is_off_with_the_defaults)
{
    res = parse("");
    assert_no_errors();
    const sl_cluster_config_t *c = &res.config->cluster;
    cr_assert_not(c->enabled);
    cr_assert_null(c->redis_host);
    cr_assert_null(c->redis_unix_path);
    cr_assert_eq(c->redis_port, 6379);
    cr_assert_str_eq(c->name, "sluice");
    cr_assert_null(c->instance);
    cr_assert_eq(c->timeout_ms, 50);
    cr_assert_eq(c->when_redis_down, SL_REDIS_DOWN_LOCAL);
}

Test(config_cluster, only_redis_given_takes_the_defaults_for_the_rest)
{
    res = parse("cluster:\n  redis: redis://127.0.0.1\n");
    assert_no_errors();
    const sl_cluster_config_t *c = &res.config->cluster;
    cr_assert(c->enabled);
    cr_assert_str_eq(c->redis_host, "127.0.0.1");
    cr_assert_eq(c->redis_port, 6379);
    cr_assert_eq(c->redis_db, 0);
    cr_assert_null(c->redis_user);
    cr_assert_null(c->redis_password);
    cr_assert_null(c->redis_unix_path);
    cr_assert_str_eq(c->name, "sluice");
    cr_assert_null(c->instance, "the caller derives hostname:port at start");
    cr_assert_eq(c->timeout_ms, 50);
    cr_assert_eq(c->when_redis_down, SL_REDIS_DOWN_LOCAL);
}

Test(config_cluster, every_field_of_the_spec_example)
{
    res = parse("cluster:\n"
                "  redis: \"redis://:${REDIS_PASSWORD}@127.0.0.1:6379/0\"\n"
                "  name: prod\n"
                "  instance: \"${HOSTNAME}:8080\"\n"
                "  timeout_ms: 250\n"
                "  when_redis_down: closed\n");
    assert_no_errors();
    const sl_cluster_config_t *c = &res.config->cluster;
    cr_assert(c->enabled);
    cr_assert_str_eq(c->redis_host, "127.0.0.1");
    cr_assert_eq(c->redis_port, 6379);
    cr_assert_null(c->redis_user);
    cr_assert_str_eq(c->redis_password, "pa:ss@w/rd", "expanded, any character, as written");
    cr_assert_str_eq(c->name, "prod");
    cr_assert_str_eq(c->instance, "gw-7.example:8080");
    cr_assert_eq(c->timeout_ms, 250);
    cr_assert_eq(c->when_redis_down, SL_REDIS_DOWN_CLOSED);
}

/* ---- the URL's forms ----------------------------------------------------- */

typedef struct {
    const char *url;
    const char *host, *unix_path, *user, *password;
    uint16_t port;
    uint32_t db;
} url_case_t;

Test(config_cluster, each_url_form_is_parsed_into_its_parts)
{
    static const url_case_t cases[] = {
        {"redis://127.0.0.1:6379/0", "127.0.0.1", NULL, NULL, NULL, 6379, 0},
        {"redis://localhost", "localhost", NULL, NULL, NULL, 6379, 0},
        {"redis://redis.internal:7000", "redis.internal", NULL, NULL, NULL, 7000, 0},
        {"redis://h/", "h", NULL, NULL, NULL, 6379, 0},
        {"redis://h/15", "h", NULL, NULL, NULL, 6379, 15},
        {"redis://:s3cret@10.0.0.5:6380/2", "10.0.0.5", NULL, NULL, "s3cret", 6380, 2},
        {"redis://alice:s3cret@10.0.0.5", "10.0.0.5", NULL, "alice", "s3cret", 6379, 0},
        {"redis://:p@ss:w/rd@h:1", "h", NULL, NULL, "p@ss:w/rd", 1, 0},
        {"redis://:@h", "h", NULL, NULL, NULL, 6379, 0},
        {"REDIS://H:65535/3", "H", NULL, NULL, NULL, 65535, 3},
        {"redis://[::1]", "::1", NULL, NULL, NULL, 6379, 0},
        {"redis://[2001:db8::7]:6390/4", "2001:db8::7", NULL, NULL, NULL, 6390, 4},
        {"redis://:pw@[::1]:6379", "::1", NULL, NULL, "pw", 6379, 0},
        {"unix:///run/redis.sock", NULL, "/run/redis.sock", NULL, NULL, 6379, 0},
        {"unix:///run/redis.sock?db=3", NULL, "/run/redis.sock", NULL, NULL, 6379, 3},
        {"unix://:pw@/run/redis/redis.sock?db=1", NULL, "/run/redis/redis.sock", NULL, "pw", 6379, 1},
        {"unix://bob:pw@/tmp/r.sock", NULL, "/tmp/r.sock", "bob", "pw", 6379, 0},
        {"unix:///tmp/a@b.sock", NULL, "/tmp/a@b.sock", NULL, NULL, 6379, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const url_case_t *k = &cases[i];
        const sl_cluster_config_t *c = with_url(k->url);
        log_errors();
        cr_assert_eq(res.errors.len, 0, "%s: %zu errors", k->url, res.errors.len);
        cr_assert(c->enabled, "%s", k->url);
        assert_str_or_null(c->redis_host, k->host, k->url);
        assert_str_or_null(c->redis_unix_path, k->unix_path, k->url);
        assert_str_or_null(c->redis_user, k->user, k->url);
        assert_str_or_null(c->redis_password, k->password, k->url);
        cr_assert_eq(c->redis_port, k->port, "%s: port %u", k->url, c->redis_port);
        cr_assert_eq(c->redis_db, k->db, "%s: db %u", k->url, c->redis_db);
    }
}

Test(config_cluster, rediss_is_refused_with_its_own_code_path_and_line)
{
    res = parse("version: 1\ncluster:\n  name: prod\n  redis: \"rediss://:pw@redis.example:6380/0\"\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_CLUSTER_TLS_UNSUPPORTED, "cluster.redis", "4");
    cr_assert_str_eq(sl_code_slug(m->code), "config.cluster.tls_unsupported");
    cr_assert(strstr(m->text, "hiredis") != NULL && strstr(m->text, "stunnel") != NULL &&
                  strstr(m->text, "unix") != NULL,
              "%s", m->text);
    cr_assert_null(strstr(m->text, "pw@"), "no password in the message");
    cr_assert_not(res.config->cluster.enabled, "nothing half-set");
    cr_assert_null(res.config->cluster.redis_host);
    with_url("RedisS://h");
    assert_single_error(SL_CODE_CONFIG_CLUSTER_TLS_UNSUPPORTED, "cluster.redis", "2");
}

typedef struct {
    const char *url;
    const char *reason; /* a part of the message's reason */
} bad_url_t;

Test(config_cluster, malformed_urls_say_what_is_wrong_and_never_show_the_password)
{
    static const bad_url_t cases[] = {
        {"127.0.0.1:6379", "does not start with redis:// or unix://"},
        {"http://h", "the scheme 'http' is neither redis nor unix"},
        {"redis://", "there is no host"},
        {"redis://:hunter2@", "there is no host"},
        {"redis://:hunter2@h:0", "the port 0 is out of range 1..65535"},
        {"redis://:hunter2@h:65536", "the port 65536 is out of range 1..65535"},
        {"redis://h:99999999999999999999", "out of range 1..65535"},
        {"redis://h:", "the port after ':' is missing"},
        {"redis://h:63x9", "the port '63x9' is not a number"},
        {"redis://h/16", "the database 16 is out of range 0..15"},
        {"redis://h/x", "the database 'x' is not a number 0..15"},
        {"redis://h:6379/0?timeout=1", "the database '0?timeout=1' is not a number"},
        {"redis://hunter2@h", "has no ':'"},
        {"redis://alice:@h", "a user name needs a password"},
        {"redis://bad host", "'bad host' is not a host name"},
        {"redis://[::1", "no closing ']'"},
        {"redis://[10.0.0.1]", "'10.0.0.1' is not an IPv6 address"},
        {"redis://[::1]x", "']' is not followed by"},
        {"unix://run/redis.sock", "must be absolute"},
        {"unix://:hunter2@run.sock", "must be absolute"},
        {"unix://", "must be absolute"},
        {"unix:///r.sock?password=hunter2", "unknown parameter 'password'"},
        {"unix:///r.sock?db=1&x=2", "db=N is the only parameter"},
        {"unix:///r.sock?db=99", "the database 99 is out of range 0..15"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        with_url(cases[i].url);
        log_errors();
        cr_assert_eq(res.errors.len, 1, "%s: %zu errors", cases[i].url, res.errors.len);
        const sl_msg_t *m = assert_error(0, SL_CODE_CONFIG_CLUSTER_BAD_REDIS_URL, "cluster.redis", "2");
        cr_assert(strstr(m->text, cases[i].reason) != NULL, "%s: '%s' lacks '%s'", cases[i].url, m->text,
                  cases[i].reason);
        cr_assert_null(strstr(m->text, "hunter2"), "%s: the password shows in '%s'", cases[i].url, m->text);
        cr_assert(strstr(m->text, "redis://[[user]:password@]host[:port][/db]") != NULL, "%s", m->text);
        cr_assert_not(res.config->cluster.enabled, "%s: nothing half-set", cases[i].url);
        cr_assert_null(res.config->cluster.redis_host, "%s", cases[i].url);
        cr_assert_null(res.config->cluster.redis_password, "%s", cases[i].url);
    }
}

/* ---- the other fields ---------------------------------------------------- */

Test(config_cluster, every_problem_in_the_section_is_reported_at_once_in_file_order)
{
    res = parse("cluster:\n"                     /* 1 */
                "  redis: \"redis://h:70000\"\n" /* 2 */
                "  name: \"prod/eu\"\n"          /* 3 */
                "  instance: \"gw 1\"\n"         /* 4 */
                "  timeout_ms: 0\n"              /* 5 */
                "  when_redis_down: open\n"      /* 6 */
                "  retries: 3\n");               /* 7 */
    log_errors();
    cr_assert_eq(res.errors.len, 6);
    const sl_msg_t *m = assert_error(0, SL_CODE_CONFIG_CLUSTER_BAD_REDIS_URL, "cluster.redis", "2");
    cr_assert(strstr(m->text, "70000 is out of range 1..65535") != NULL, "%s", m->text);
    m = assert_error(1, SL_CODE_CONFIG_CLUSTER_BAD_NAME, "cluster.name", "3");
    cr_assert_str_eq(sl_msg_arg(m, "value"), "prod/eu");
    cr_assert(strstr(m->text, "1 to 64") != NULL, "%s", m->text);
    m = assert_error(2, SL_CODE_CONFIG_CLUSTER_BAD_INSTANCE, "cluster.instance", "4");
    cr_assert_str_eq(sl_msg_arg(m, "value"), "gw 1");
    cr_assert(strstr(m->text, "1 to 128") != NULL, "%s", m->text);
    m = assert_error(3, SL_CODE_CONFIG_OUT_OF_RANGE, "cluster.timeout_ms", "5");
    cr_assert_str_eq(sl_msg_arg(m, "min"), "1");
    cr_assert_str_eq(sl_msg_arg(m, "max"), "10000");
    m = assert_error(4, SL_CODE_CONFIG_UNKNOWN_VALUE, "cluster.when_redis_down", "6");
    cr_assert_str_eq(sl_msg_arg(m, "allowed"), "local, closed");
    m = assert_error(5, SL_CODE_CONFIG_UNKNOWN_FIELD, "cluster.retries", "7");
    cr_assert_str_eq(sl_msg_arg(m, "field"), "retries");
    cr_assert_not(res.config->cluster.enabled, "a section with problems is not taken");
    cr_assert_str_eq(res.config->cluster.name, "sluice");
}

Test(config_cluster, a_bad_db_is_reported_beside_other_sections_problems)
{
    res = parse("failover:\n  wait_secs: 601\n"
                "cluster:\n  redis: redis://h/16\n  timeout_ms: 10001\n"
                "store:\n  retention_days: 0\n");
    log_errors();
    cr_assert_eq(res.errors.len, 4);
    assert_error(0, SL_CODE_CONFIG_OUT_OF_RANGE, "failover.wait_secs", "2");
    const sl_msg_t *m = assert_error(1, SL_CODE_CONFIG_CLUSTER_BAD_REDIS_URL, "cluster.redis", "4");
    cr_assert(strstr(m->text, "the database 16 is out of range 0..15") != NULL, "%s", m->text);
    assert_error(2, SL_CODE_CONFIG_OUT_OF_RANGE, "cluster.timeout_ms", "5");
    assert_error(3, SL_CODE_CONFIG_OUT_OF_RANGE, "store.retention_days", "7");
}

Test(config_cluster, name_and_instance_bounds)
{
    char yaml[512];
    char name64[65], name65[66], inst128[129], inst129[130];
    memset(name64, 'n', 64), name64[64] = '\0';
    memset(name65, 'n', 65), name65[65] = '\0';
    memset(inst128, 'i', 128), inst128[128] = '\0';
    memset(inst129, 'i', 129), inst129[129] = '\0';

    snprintf(yaml, sizeof(yaml), "cluster: {redis: \"redis://h\", name: %s, instance: \"%s\"}\n", name64,
             inst128);
    res = parse(yaml);
    assert_no_errors();
    cr_assert_str_eq(res.config->cluster.name, name64);
    cr_assert_str_eq(res.config->cluster.instance, inst128);
    sl_config_result_free(&res);

    snprintf(yaml, sizeof(yaml), "cluster: {redis: \"redis://h\", name: %s, instance: \"%s\"}\n", name65,
             inst129);
    res = parse(yaml);
    log_errors();
    cr_assert_eq(res.errors.len, 2);
    assert_error(0, SL_CODE_CONFIG_CLUSTER_BAD_NAME, "cluster.name", "1");
    assert_error(1, SL_CODE_CONFIG_CLUSTER_BAD_INSTANCE, "cluster.instance", "1");
    sl_config_result_free(&res);

    res = parse("cluster:\n  redis: redis://h\n  name: \"\"\n  instance: \"\"\n");
    log_errors();
    cr_assert_eq(res.errors.len, 2);
    assert_error(0, SL_CODE_CONFIG_CLUSTER_BAD_NAME, "cluster.name", "3");
    assert_error(1, SL_CODE_CONFIG_CLUSTER_BAD_INSTANCE, "cluster.instance", "4");
    sl_config_result_free(&res);

    /* ':' is for instances (host:port), not for names. */
    res = parse("cluster:\n  redis: redis://h\n  name: \"a:b\"\n  instance: \"A-z_0.9:8080\"\n");
    assert_single_error(SL_CODE_CONFIG_CLUSTER_BAD_NAME, "cluster.name", "3");
    sl_config_result_free(&res);
    res = parse("cluster:\n  redis: redis://h\n  name: A-z_0.9\n  instance: \"A-z_0.9:8080\"\n");
    assert_no_errors();
    cr_assert_str_eq(res.config->cluster.instance, "A-z_0.9:8080");
}

Test(config_cluster, timeout_bounds_and_when_redis_down_values)
{
    res = parse("cluster: {redis: \"redis://h\", timeout_ms: 1, when_redis_down: local}\n");
    assert_no_errors();
    cr_assert_eq(res.config->cluster.timeout_ms, 1);
    cr_assert_eq(res.config->cluster.when_redis_down, SL_REDIS_DOWN_LOCAL);
    sl_config_result_free(&res);
    res = parse("cluster: {redis: \"redis://h\", timeout_ms: 10000, when_redis_down: closed}\n");
    assert_no_errors();
    cr_assert_eq(res.config->cluster.timeout_ms, 10000);
    cr_assert_eq(res.config->cluster.when_redis_down, SL_REDIS_DOWN_CLOSED);
    sl_config_result_free(&res);
    res = parse("cluster: {redis: \"redis://h\", timeout_ms: \"50\"}\n");
    assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "cluster.timeout_ms", "1");
}

Test(config_cluster, redis_is_required_and_the_section_is_a_mapping)
{
    res = parse("cluster:\n  name: prod\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_MISSING_FIELD, "cluster", "2");
    cr_assert_str_eq(sl_msg_arg(m, "field"), "redis");
    sl_config_result_free(&res);
    res = parse("cluster: {}\n");
    assert_single_error(SL_CODE_CONFIG_MISSING_FIELD, "cluster", "1");
    sl_config_result_free(&res);
    res = parse("cluster:\n");
    assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "cluster", "1");
    sl_config_result_free(&res);
    res = parse("cluster: redis://h\n");
    assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "cluster", "1");
    sl_config_result_free(&res);
    res = parse("cluster:\n  redis: [redis://h]\n");
    assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "cluster.redis", "2");
}

Test(config_cluster, unknown_field_under_cluster_suggests_the_near_name)
{
    res = parse("cluster:\n  redis: redis://h\n  timout_ms: 50\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_UNKNOWN_FIELD, "cluster.timout_ms", "3");
    cr_assert(strstr(m->text, "did you mean 'timeout_ms'?") != NULL, "%s", m->text);
    sl_config_result_free(&res);
    res = parse("cluster:\n  redis: redis://h\n  redis: redis://g\n");
    assert_single_error(SL_CODE_CONFIG_DUPLICATE_KEY, "cluster.redis", "3");
}

/* ---- ${VAR} -------------------------------------------------------------- */

Test(config_cluster, variables_expand_in_redis_and_instance)
{
    res = parse("cluster:\n"
                "  redis: \"redis://app:${REDIS_PASSWORD}@${REDIS_HOST}:6380/1\"\n"
                "  instance: \"${HOSTNAME}\"\n");
    assert_no_errors();
    const sl_cluster_config_t *c = &res.config->cluster;
    cr_assert_str_eq(c->redis_user, "app");
    cr_assert_str_eq(c->redis_password, "pa:ss@w/rd");
    cr_assert_str_eq(c->redis_host, "redis.internal");
    cr_assert_eq(c->redis_port, 6380);
    cr_assert_eq(c->redis_db, 1);
    cr_assert_str_eq(c->instance, "gw-7.example");
}

Test(config_cluster, an_unset_variable_is_an_error_naming_it)
{
    res = parse("cluster:\n"
                "  redis: \"redis://:${NO_SUCH_PASSWORD}@h\"\n"
                "  instance: \"${NO_SUCH_HOST}\"\n");
    log_errors();
    cr_assert_eq(res.errors.len, 2);
    const sl_msg_t *m = assert_error(0, SL_CODE_CONFIG_UNSET_VARIABLE, "cluster.redis", "2");
    cr_assert_str_eq(sl_msg_arg(m, "variable"), "NO_SUCH_PASSWORD");
    m = assert_error(1, SL_CODE_CONFIG_UNSET_VARIABLE, "cluster.instance", "3");
    cr_assert_str_eq(sl_msg_arg(m, "variable"), "NO_SUCH_HOST");
    cr_assert_not(res.config->cluster.enabled);
    sl_config_result_free(&res);
    res = parse("cluster:\n  redis: \"redis://:${@h\"\n");
    assert_single_error(SL_CODE_CONFIG_BAD_VARIABLE, "cluster.redis", "2");
}

Test(config_cluster, name_is_not_expanded)
{
    res = parse("cluster:\n  redis: redis://h\n  name: \"${TEAM}\"\n");
    assert_single_error(SL_CODE_CONFIG_CLUSTER_BAD_NAME, "cluster.name", "3");
}

/* ---- the summary ----------------------------------------------------------- */

Test(config_cluster, the_summary_names_the_cluster_and_where_redis_is_without_the_password)
{
    res = parse("cluster:\n  redis: \"redis://admin:${REDIS_PASSWORD}@127.0.0.1:6379/0\"\n  name: prod\n");
    assert_no_errors();
    char *s = sl_config_summary(res.config, 8080, 8081);
    cr_assert(strstr(s, "; cluster prod on 127.0.0.1:6379") != NULL, "%s", s);
    cr_assert_null(strstr(s, "pa:ss"), "%s", s);
    cr_assert_null(strstr(s, "admin"), "%s", s);
    free(s);
    sl_config_result_free(&res);

    res = parse("cluster: {redis: \"redis://:x@[::1]:7000/3\"}\n");
    assert_no_errors();
    s = sl_config_summary(res.config, 8080, 8081);
    cr_assert(strstr(s, "; cluster sluice on [::1]:7000 db 3") != NULL, "%s", s);
    free(s);
    sl_config_result_free(&res);

    res = parse("cluster: {redis: \"unix://:x@/run/redis.sock\", name: eu}\n");
    assert_no_errors();
    s = sl_config_summary(res.config, 8080, 8081);
    cr_assert(strstr(s, "; cluster eu on unix:/run/redis.sock") != NULL, "%s", s);
    free(s);
    sl_config_result_free(&res);

    res = parse("");
    s = sl_config_summary(res.config, 8080, 8081);
    cr_assert_null(strstr(s, "cluster"), "%s", s);
    free(s);
}
