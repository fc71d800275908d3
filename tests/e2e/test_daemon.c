/* The sluice binary as a user meets it: flags, --check-config, /healthz, safe mode, SIGHUP, SIGTERM. */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "harness.h"

static proc_t proc;

static void
teardown(void)
{
    proc_kill(&proc);
    remove_temp_files();
}

TestSuite(daemon, .fini = teardown, .timeout = 30);

static const char valid_config[] = "listen:\n"
                                   "  gateway: {bind: 127.0.0.1, port: 0}\n"
                                   "  control: {port: 0}\n"
                                   "providers:\n"
                                   "  - {name: anthropic, protocol: anthropic, key: k}\n"
                                   "shutdown_grace_secs: 5\n";

static uint16_t
start_with(const char *yaml)
{
    const char *path = write_temp_file(0, yaml);
    const char *args[] = {"--config", path, "--threads", "2", NULL};
    proc_start(&proc, args);
    uint16_t port = proc_wait_port(&proc, 5000);
    cr_assert_neq(port, 0, "sluice did not start:\n%s", proc.log);
    return port;
}

static int
count(const char *haystack, const char *needle)
{
    int n = 0;
    for (const char *p = haystack; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

Test(daemon, version_flag)
{
    const char *args[] = {"--version", NULL};
    proc_start(&proc, args);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0);
    cr_assert(strstr(proc.log, "sluice 0.1.0 (h2o 2.2.5)") != NULL, "%s", proc.log);
}

Test(daemon, unknown_flag_exits_2_with_usage)
{
    const char *args[] = {"--frobnicate", NULL};
    proc_start(&proc, args);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 2);
    cr_assert(strstr(proc.log, "usage: sluice") != NULL, "%s", proc.log);
}

Test(daemon, check_config_lists_every_problem_with_lines)
{
    const char *path = write_temp_file(0, "version: 1\n"
                                          "listen:\n"
                                          "  gateway: {port: 99999}\n"
                                          "providers:\n"
                                          "  - name: a\n"
                                          "    protocol: anthropic\n"
                                          "    limts: []\n"
                                          "routes:\n"
                                          "  - {match: x, failover: [ghost]}\n"
                                          "failover: {wait_secs: 601}\n");
    const char *args[] = {"--check-config", path, NULL};
    proc_start(&proc, args);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 1, "%s", proc.log);
    cr_assert_eq(count(proc.log, ": error: "), 4, "%s", proc.log);
    cr_assert(strstr(proc.log,
                     "listen.gateway.port (line 3): 99999 is out of range 0..65535 [config.out_of_range]"));
    cr_assert(strstr(proc.log, "providers[0].limts (line 7): unknown field 'limts'"));
    cr_assert(strstr(proc.log, "routes[0].failover[0] (line 9): no provider is named 'ghost'"));
    cr_assert(strstr(proc.log, "failover.wait_secs (line 10): 601 is out of range 0..600"));
    cr_assert(strstr(proc.log, "4 problems"));
}

Test(daemon, check_config_summarises_a_good_file)
{
    const char *path = write_temp_file(0, valid_config);
    const char *args[] = {"--check-config", path, NULL};
    proc_start(&proc, args);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
    cr_assert(strstr(proc.log, ": OK: 1 provider: anthropic (anthropic)") != NULL, "%s", proc.log);
}

Test(daemon, serves_healthz_and_exits_cleanly_on_sigterm)
{
    uint16_t port = start_with(valid_config);
    http_response_t res = {0};
    cr_assert(http_request(port, "GET", "/healthz", NULL, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body, "{\"status\":\"ok\"}");

    cr_assert(http_request(port, "POST", "/v1/nowhere", "{}", &res));
    cr_assert_eq(res.status, 404);
    cr_assert(strstr(res.headers, "x-sluice-error: gw.not_found") != NULL, "%s", res.headers);
    cr_assert(strstr(res.body, "\"code\":\"gw.not_found\"") != NULL, "%s", res.body);

    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
    cr_assert(strstr(proc.log, "stopped") != NULL, "%s", proc.log);
    cr_assert_not(http_request(port, "GET", "/healthz", NULL, &res), "nothing listens after exit");
    http_response_free(&res);
}

Test(daemon, sigint_also_exits_cleanly_with_an_idle_connection_open)
{
    uint16_t port = start_with(valid_config);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    kill(proc.pid, SIGINT);
    cr_assert_eq(proc_wait_exit(&proc, 3000), 0, "an idle keep-alive connection must not hold the exit:\n%s",
                 proc.log);
    close(fd);
}

Test(daemon, invalid_file_starts_in_safe_mode_and_sighup_repairs_it)
{
    uint16_t port = start_with("listen:\n  gateway: {port: 0}\n  control: {port: 0}\nprovidrs: []\n");
    cr_assert(strstr(proc.log, "SAFE MODE") != NULL, "%s", proc.log);
    cr_assert(strstr(proc.log, "unknown field 'providrs'; did you mean 'providers'?") != NULL, "%s",
              proc.log);
    http_response_t res = {0};
    cr_assert(http_request(port, "GET", "/healthz", NULL, &res));
    cr_assert_eq(res.status, 503);
    cr_assert(http_request(port, "POST", "/v1/messages", "{}", &res));
    cr_assert_eq(res.status, 503);
    cr_assert(strstr(res.body, "gw.safe_mode") != NULL, "%s", res.body);
    cr_assert(strstr(res.body, "sluice: ") != NULL, "%s", res.body);

    write_temp_file(0, valid_config);
    kill(proc.pid, SIGHUP);
    cr_assert(proc_wait_log(&proc, "[config.reloaded]", 5000), "%s", proc.log);
    cr_assert(http_request(port, "GET", "/healthz", NULL, &res));
    cr_assert_eq(res.status, 200, "a valid reload leaves safe mode");
    http_response_free(&res);
}

Test(daemon, invalid_reload_changes_nothing)
{
    uint16_t port = start_with(valid_config);
    write_temp_file(0, "listen:\n  gateway: {port: 0}\n  control: {port: 0}\nfailover: {wait_secs: -1}\n");
    kill(proc.pid, SIGHUP);
    cr_assert(proc_wait_log(&proc, "[config.rejected]", 5000), "%s", proc.log);
    cr_assert(strstr(proc.log, "failover.wait_secs (line 4)") != NULL, "%s", proc.log);
    http_response_t res = {0};
    cr_assert(http_request(port, "GET", "/healthz", NULL, &res));
    cr_assert_eq(res.status, 200, "still serving on the old config");
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0);
    http_response_free(&res);
}

Test(daemon, allow_from_refuses_other_addresses)
{
    uint16_t port =
        start_with("listen:\n  gateway: {port: 0, allow_from: [10.0.0.0/8]}\n  control: {port: 0}\n");
    http_response_t res = {0};
    cr_assert_not(http_request(port, "GET", "/healthz", NULL, &res), "127.0.0.1 is not in 10.0.0.0/8");
    http_response_free(&res);
}
