/*
 * The sluice daemon: flags, config, the data plane's workers, and signals.
 * Everything else lives in the library this binary links.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <h2o/version.h>

#include "config.h"
#include "eventlog.h"
#include "core/xalloc.h"
#include "limiter.h"
#include "recorder.h"
#include "request.h"
#include "upstream.h"
#include "log.h"
#include "server.h"
#include "snapshot.h"

#define SLUICE_VERSION "0.1.0"

typedef struct {
    const char *config_path;
    const char *check_path;
    unsigned threads;
    bool version;
} options_t;

static void
usage(FILE *out)
{
    fputs(
        "usage: sluice [--config FILE] [--check-config FILE] [--threads N] [--log-level LEVEL] [--version]\n"
        "  --config FILE        run on FILE (default: the embedded default configuration)\n"
        "  --check-config FILE  report every problem in FILE and exit (1 if there are any)\n"
        "  --threads N          data-plane worker threads (default: one per core)\n"
        "  --log-level LEVEL    error, warn, info (default) or debug\n"
        "  --version            print the version and exit\n",
        out);
}

/* Returns 0 when the flags were read, else the exit status to leave with. */
static int
parse_options(int argc, char **argv, options_t *o)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", required_argument, NULL, 'C'},
        {"threads", required_argument, NULL, 't'},
        {"log-level", required_argument, NULL, 'l'},
        {"version", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            o->config_path = optarg;
            break;
        case 'C':
            o->check_path = optarg;
            break;
        case 't': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end != '\0' || n < 1 || n > 256) {
                fprintf(stderr, "sluice: --threads takes a number from 1 to 256, not '%s'\n", optarg);
                return 2;
            }
            o->threads = (unsigned)n;
            break;
        }
        case 'l': {
            sl_log_level_t level;
            if (sl_log_level_parse(optarg, &level) != 0) {
                fprintf(stderr, "sluice: --log-level takes error, warn, info or debug, not '%s'\n", optarg);
                return 2;
            }
            sl_log_set_level(level);
            break;
        }
        case 'v':
            o->version = true;
            break;
        case 'h':
            usage(stdout);
            return -1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sluice: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    return 0;
}

static void
print_problems(FILE *out, const char *source, const char *kind, const sl_msgs_t *msgs)
{
    for (size_t i = 0; i < msgs->len; i++)
        fprintf(out, "%s: %s: %s [%s]\n", source, kind, msgs->items[i].text,
                sl_code_slug(msgs->items[i].code));
}

static int
check_config(const char *path)
{
    sl_config_result_t res = sl_config_load_file(path, sl_config_env_system());
    print_problems(stdout, path, "error", &res.errors);
    print_problems(stdout, path, "warning", &res.warnings);
    int status = 0;
    if (res.errors.len > 0) {
        printf("%s: %zu problem%s\n", path, res.errors.len, res.errors.len == 1 ? "" : "s");
        status = 1;
    } else {
        char *summary = sl_config_summary(res.config);
        printf("%s: OK: %s\n", path, summary);
        free(summary);
    }
    sl_config_result_free(&res);
    return status;
}

static sl_config_result_t
load_config(const char *path)
{
    if (path != NULL)
        return sl_config_load_file(path, sl_config_env_system());
    char *yaml = sl_config_default_yaml(sl_config_env_system());
    sl_config_result_t res = sl_config_parse(yaml, strlen(yaml), NULL, sl_config_env_system());
    free(yaml);
    return res;
}

static void
log_problems(const sl_config_result_t *res)
{
    for (size_t i = 0; i < res->errors.len; i++)
        sl_log_error("%s [%s]", res->errors.items[i].text, sl_code_slug(res->errors.items[i].code));
    for (size_t i = 0; i < res->warnings.len; i++)
        sl_log_warn("%s [%s]", res->warnings.items[i].text, sl_code_slug(res->warnings.items[i].code));
}

/* Kept reachable until exit: the server may still hold requests that reference them. */
static sl_snapshot_holder_t running;
static sl_upstreams_t *upstreams;
static sl_limiter_t *limiter;
static sl_gateway_t gateway;
static const char *usage_db_path; /* the request DB opened at start, where usage buckets persist */

static int64_t
wall_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Past usage for limits that start counting (limiter.h), from the request DB's buckets. */
static void
read_usage_history(void *ctx, int64_t since_ms, sl_usage_cb add, void *add_ctx)
{
    (void)ctx;
    if (usage_db_path == NULL)
        return;
    /* What the recorder still holds in memory counts too. */
    if (gateway.recorder != NULL)
        sl_recorder_flush(gateway.recorder);
    char err[256];
    if (sl_recorder_load_usage(usage_db_path, since_ms, add, add_ctx, err, sizeof(err)) < 0)
        sl_log_warn("usage limits: the stored usage could not be read (%s); windows start empty", err);
}

/* LimitsChanged, from the thread that binds a config (this one). */
static void
announce_limits_changed(void *ctx, const sl_limit_set_t *set, const sl_limit_t *limits, size_t n)
{
    (void)ctx;
    sl_log_info("usage limits of %s %s replaced (%zu limit%s)",
                set->kind == SL_BUCKET_CLIENT ? "key" : "upstream", set->name, n, n == 1 ? "" : "s");
    if (!sl_bus_is_active(gateway.bus))
        return;
    static sl_bus_batch_t batch;
    sl_proto_event_t ev;
    sl_bus_emit(&batch, sl_bus_limits_changed(&ev, wall_now_ms(),
                                              set->kind == SL_BUCKET_CLIENT ? SL_PROTO_LIMIT_TARGET_CLIENT
                                                                            : SL_PROTO_LIMIT_TARGET_PROVIDER,
                                              set->name, limits, n));
    sl_bus_flush(gateway.bus, &batch);
}

/* Calendar periods of limits are in the configured zone (config.md `timezone`). */
static void
apply_timezone(const sl_config_t *config)
{
    const char *want = config->timezone;
    const char *have = getenv("TZ");
    if (want == NULL || (have != NULL && strcmp(have, want) == 0))
        return;
    setenv("TZ", want, 1);
    tzset();
}

/* The snapshot's shared parts for config: upstream state and usage limits, carried over by name. */
static void
publish(sl_snapshot_holder_t *holder, sl_config_t *config, bool safe_mode, bool first)
{
    apply_timezone(config);
    sl_upstream_t **ups = sl_upstreams_bind(upstreams, config);
    sl_limit_sets_t sets = sl_limiter_bind(limiter, config, wall_now_ms());
    if (first)
        sl_snapshot_holder_init(holder, config, ups, sets, safe_mode);
    else
        sl_snapshot_publish(holder, config, ups, sets, safe_mode);
}

static void
log_auth_hold_cleared(const sl_upstream_t *up)
{
    sl_log_info("upstream %s: the config changed, its rejected credentials are tried again", up->name);
}

/* SIGHUP: a valid file replaces the running config; an invalid one changes nothing. */
static void
reload(const char *path, sl_snapshot_holder_t *holder, const sl_listen_t *running_listen)
{
    if (path == NULL) {
        sl_log_info("SIGHUP: running on the embedded default, no file to reload");
        return;
    }
    sl_config_result_t res = sl_config_load_file(path, sl_config_env_system());
    log_problems(&res);
    if (res.errors.len > 0) {
        char count[24];
        snprintf(count, sizeof(count), "%zu", res.errors.len);
        sl_msg_t m = sl_msg_make(SL_CODE_CONFIG_REJECTED, "path", path, "count", count, NULL);
        sl_log_error("%s [%s]", m.text, sl_code_slug(m.code));
        sl_msg_free(&m);
        sl_config_result_free(&res);
        return;
    }
    if (strcmp(res.config->gateway.bind, running_listen->bind) != 0 ||
        (res.config->gateway.port != running_listen->port && running_listen->port != 0))
        sl_log_warn("listen.gateway changed: it takes effect at the next restart");
    sl_config_t *config = res.config;
    res.config = NULL;
    sl_config_result_free(&res);
    publish(holder, config, false, false);
    sl_upstreams_clear_auth_holds(upstreams, log_auth_hold_cleared);
    /* Changed limits take effect now: whoever waits decides again. */
    sl_upstreams_wake_all(upstreams);
    sl_msg_t m = sl_msg_make(SL_CODE_CONFIG_RELOADED, "path", path, NULL);
    sl_log_info("%s [%s]", m.text, sl_code_slug(m.code));
    sl_msg_free(&m);
}

/* The request DB; without one sluice still serves, and counts every row as dropped. */
static sl_recorder_t *
open_recorder(const sl_config_t *config)
{
    sl_recorder_options_t opts = {
        .queue_capacity = SL_RECORDER_DEFAULT_QUEUE,
        .batch_max = SL_RECORDER_DEFAULT_BATCH,
        .busy_timeout_ms = SL_RECORDER_DEFAULT_BUSY_MS,
        .retention_days = config->retention_days,
    };
    char err[512];
    sl_recorder_t *rec = sl_recorder_open(config->store_path, &opts, err, sizeof(err));
    if (rec == NULL)
        sl_log_error("request DB: %s; requests are served but not recorded", err);
    return rec;
}

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Stop accepting, let requests in flight finish within the grace period; a second signal cuts it short. */
static void
shut_down(sl_server_t *server, const sigset_t *signals, uint32_t grace_secs)
{
    sl_server_stop_accepting(server);
    sl_upstreams_wake_all(upstreams);
    sl_log_info("shutting down: %u request(s) in flight, waiting up to %u s", sl_server_in_flight(server),
                grace_secs);
    uint64_t deadline = now_ms() + (uint64_t)grace_secs * 1000;
    while (sl_server_in_flight(server) > 0 && now_ms() < deadline) {
        struct timespec tick = {0, 20 * 1000 * 1000};
        int sig = sigtimedwait(signals, NULL, &tick);
        if (sig == SIGTERM || sig == SIGINT) {
            sl_log_warn("second signal: not waiting for the remaining requests");
            break;
        }
    }
    unsigned dropped = sl_server_in_flight(server);
    if (dropped > 0) {
        /* Every request has one row or one counted drop: these get the drop. */
        atomic_fetch_add(&gateway.rows_dropped, dropped);
        sl_log_warn("grace period over: dropping %u request(s); their rows are counted as dropped", dropped);
    }
    sl_server_end_workers(server);
    if (gateway.recorder != NULL)
        sl_recorder_close(gateway.recorder);
    gateway.recorder = NULL;
    sl_log_info("stopped");
}

int
main(int argc, char **argv)
{
    options_t opt = {0};
    int rc = parse_options(argc, argv, &opt);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (opt.version) {
        printf("sluice %s (h2o %s)\n", SLUICE_VERSION, H2O_VERSION);
        return 0;
    }
    if (opt.check_path != NULL)
        return check_config(opt.check_path);

    /* Signals are taken by this thread with sigwait; workers inherit the mask. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    sl_config_result_t res = load_config(opt.config_path);
    log_problems(&res);
    bool safe_mode = res.errors.len > 0;
    sl_listen_t listen = res.config->gateway;
    if (safe_mode) {
        sl_log_error("%s has %zu problem(s): starting in safe mode (every request answers 503 gw.safe_mode)",
                     opt.config_path != NULL ? opt.config_path : "the embedded default", res.errors.len);
        if (sl_config_errors_under(&res.errors, "listen.gateway"))
            listen = (sl_listen_t){.bind = "127.0.0.1", .port = 8080};
    }
    sl_config_t *config = res.config;
    res.config = NULL;
    sl_config_result_free(&res);
    upstreams = sl_upstreams_new();
    sl_gateway_init(&gateway, open_recorder(config));
    if (gateway.recorder != NULL)
        usage_db_path = sl_xstrdup(config->store_path);
    limiter = sl_limiter_new(&gateway.retry_params, read_usage_history, announce_limits_changed, NULL);
    publish(&running, config, safe_mode, true);
    /* Until the control endpoint consumes events, the debug log shows them. */
    sl_eventlog_t *eventlog = sl_log_enabled(SL_LOG_DEBUG) ? sl_eventlog_start(gateway.bus) : NULL;

    unsigned threads = opt.threads;
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (unsigned)cores : 1;
    }
    char err[256];
    sl_server_t *server =
        sl_server_start(&listen, threads, &running, &gateway, config->max_body_bytes, err, sizeof(err));
    if (server == NULL) {
        sl_log_error("%s", err);
        return 1;
    }
    listen.port = sl_server_port(server);
    if (!safe_mode) {
        char *summary = sl_config_summary(config);
        sl_log_info("config: %s", summary);
        free(summary);
    }
    sl_log_info("sluice %s serving on %s://%s:%u (%u thread%s, config: %s)%s", SLUICE_VERSION,
                listen.tls_cert != NULL ? "https" : "http", listen.bind, listen.port, threads,
                threads == 1 ? "" : "s", opt.config_path != NULL ? opt.config_path : "embedded default",
                safe_mode ? " in SAFE MODE" : "");

    for (;;) {
        int sig;
        if (sigwait(&signals, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            reload(opt.config_path, &running, &listen);
            continue;
        }
        sl_snapshot_t *s = sl_snapshot_acquire(&running);
        uint32_t grace = s->config->shutdown_grace_secs;
        sl_snapshot_release(s);
        sl_log_info("%s received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        shut_down(server, &signals, grace);
        if (eventlog != NULL)
            sl_eventlog_stop(eventlog);
        return 0;
    }
}
