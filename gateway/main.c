/*
 * The sluice daemon: flags, signals, and the order things start and stop in
 * — the config's life (runtime.c), the control endpoint (control/), the data
 * plane's workers (server.c). Everything else lives in the libraries this
 * binary links.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <h2o/version.h>

#include "config.h"
#include "core/demo_script.h"
#include "demo.h"
#include "demoload.h"
#include "endpoint.h"
#include "eventlog.h"
#include "log.h"
#include "request.h"
#include "runtime.h"
#include "server.h"
#include "snapshot.h"
#include "version.h"
#include "worker.h"

typedef struct {
    const char *config_path;
    const char *check_path;
    unsigned threads;
    int port, control_port; /* -1 = as configured */
    bool demo, demo_load;
    const char *demo_trouble; /* NULL = cycle through the trouble modes */
    unsigned demo_clients;
    bool version;
} options_t;

static void
usage(FILE *out)
{
    fputs("usage: sluice [--config FILE] [--check-config FILE] [--threads N] [--port N] [--control-port N]\n"
          "              [--log-level LEVEL] [--version]\n"
          "  --config FILE        run on FILE (default: the embedded default configuration)\n"
          "  --check-config FILE  report every problem in FILE and exit (1 if there are any)\n"
          "  --threads N          data-plane worker threads (default: one per core)\n"
          "  --port N             the gateway's port instead of listen.gateway.port (0 = any free port)\n"
          "  --control-port N     the control endpoint's port instead of listen.control.port (0 = any)\n"
          "  --demo               run on simulated upstreams (every dialect, with trouble), no keys needed\n"
          "  --demo-trouble MODE  pin the demo's trouble: calm, overload, rate-limit, drop, slow (default: "
          "cycle)\n"
          "  --demo-load          send demo traffic through sluice (with --demo)\n"
          "  --demo-clients N     how many demo clients send at once (default 8)\n"
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
        {"port", required_argument, NULL, 'p'},
        {"demo", no_argument, NULL, 'd'},
        {"demo-trouble", required_argument, NULL, 'D'},
        {"demo-load", no_argument, NULL, 'L'},
        {"demo-clients", required_argument, NULL, 'N'},
        {"control-port", required_argument, NULL, 'P'},
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
        case 'p':
        case 'P': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end != '\0' || n < 0 || n > 65535) {
                fprintf(stderr, "sluice: --%s takes a port from 0 to 65535, not '%s'\n",
                        ch == 'p' ? "port" : "control-port", optarg);
                return 2;
            }
            *(ch == 'p' ? &o->port : &o->control_port) = (int)n;
            break;
        }
        case 'd':
            o->demo = true;
            break;
        case 'D':
            if (!sl_demo_trouble_parse(optarg, &(sl_demo_trouble_t){0})) {
                fprintf(stderr,
                        "sluice: --demo-trouble takes calm, overload, rate-limit, drop or slow, not '%s'\n",
                        optarg);
                return 2;
            }
            o->demo_trouble = optarg;
            break;
        case 'L':
            o->demo_load = true;
            break;
        case 'N': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end != '\0' || n < 0 || n > SL_DEMOLOAD_MAX_CLIENTS) {
                fprintf(stderr, "sluice: --demo-clients takes a number from 0 to %d, not '%s'\n",
                        SL_DEMOLOAD_MAX_CLIENTS, optarg);
                return 2;
            }
            o->demo_clients = (unsigned)n;
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
    if (o->demo && o->config_path != NULL) {
        fprintf(stderr, "sluice: --demo runs on its own configuration; it does not take --config\n");
        return 2;
    }
    if ((o->demo_trouble != NULL || o->demo_load) && !o->demo) {
        fprintf(stderr, "sluice: --demo-trouble and --demo-load go with --demo\n");
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
        char *summary = sl_config_summary(res.config, res.config->gateway.port, res.config->control.port);
        printf("%s: OK: %s\n", path, summary);
        free(summary);
    }
    sl_config_result_free(&res);
    return status;
}

/* Kept reachable until exit: the server may still hold requests that reference them. */
static sl_runtime_t *runtime;
static sl_gateway_t gateway;

/* The data plane, for the control endpoint's cancel_request; set once it runs. */
static sl_server_t *_Atomic serving;

static bool
cancel_request(void *ctx, uint64_t id)
{
    (void)ctx;
    sl_server_t *server = atomic_load(&serving);
    if (server == NULL)
        return false;
    sl_server_cancel(server, id);
    return true;
}

/* The control endpoint, started before the data plane so that its in-flight log sees every request. */
static sl_control_t *
start_control(void)
{
    const char *key = sl_runtime_control_key(runtime);
    if (key == NULL)
        return NULL;
    const sl_listen_t *listen = sl_runtime_control_listen(runtime);
    sl_control_options_t o = {
        .listen = listen,
        .key = key,
        .runtime = runtime,
        .bus = gateway.bus,
        .server_name = "sluice " SLUICE_VERSION,
        .cancel = cancel_request,
    };
    char err[256];
    sl_control_t *control = sl_control_start(&o, err, sizeof(err));
    if (control == NULL) {
        sl_log_error("%s; sluice serves without it", err);
        return NULL;
    }
    sl_log_info("control endpoint on %s://%s:%u/control", listen->tls_cert != NULL ? "wss" : "ws",
                listen->bind, sl_control_port(control));
    return control;
}

/* Stop accepting, let requests in flight finish within the grace period; a second signal cuts it short. */
static void
shut_down(sl_server_t *server, const sigset_t *signals, uint32_t grace_secs)
{
    sl_server_stop_accepting(server);
    sl_upstreams_wake_all(sl_runtime_upstreams(runtime));
    sl_log_info("shutting down: %u request(s) in flight, waiting up to %u s", sl_server_in_flight(server),
                grace_secs);
    int64_t deadline = sl_now_ms() + (int64_t)grace_secs * 1000;
    while (sl_server_in_flight(server) > 0 && sl_now_ms() < deadline) {
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
    /* The spans of the last requests go out (the exporter waits for its collector a bounded time). */
    sl_tracer_free(gateway.tracer);
    gateway.tracer = NULL;
    if (gateway.recorder != NULL)
        sl_recorder_close(gateway.recorder);
    gateway.recorder = NULL;
    sl_log_info("stopped");
}

int
main(int argc, char **argv)
{
    options_t opt = {.port = -1, .control_port = -1, .demo_clients = 8};
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

    /* Demo mode: the simulated upstreams first, then sluice on the configuration that points at them. */
    sl_demo_t *demo = NULL;
    char *demo_yaml = NULL;
    if (opt.demo) {
        char err[256];
        demo = sl_demo_start(opt.demo_trouble, err, sizeof(err));
        if (demo == NULL) {
            sl_log_error("demo: %s", err);
            return 1;
        }
        demo_yaml = sl_demo_config_yaml(sl_demo_port(demo));
        sl_log_info("demo: simulated upstreams on 127.0.0.1:%u (%s); clients use the key %s",
                    sl_demo_port(demo), sl_demo_trouble_now(demo), SL_DEMO_CLIENT_KEY);
    }
    runtime = sl_runtime_start(opt.config_path, demo_yaml, &gateway);
    free(demo_yaml);
    sl_runtime_set_ports(runtime, opt.port, opt.control_port);
    sl_runtime_join_cluster(runtime);
    bool safe_mode = sl_runtime_safe_mode(runtime);
    sl_control_t *control = start_control();
    /* Without a control endpoint, the debug log still shows the events. */
    sl_eventlog_t *eventlog =
        control == NULL && sl_log_enabled(SL_LOG_DEBUG) ? sl_eventlog_start(gateway.bus) : NULL;

    unsigned threads = opt.threads;
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (unsigned)cores : 1;
    }
    sl_snapshot_t *first = sl_snapshot_acquire(sl_runtime_holder(runtime));
    uint64_t max_body_bytes = first->config->max_body_bytes;
    const sl_listen_t *listen = sl_runtime_gateway_listen(runtime);
    char err[256];
    sl_server_t *server = sl_server_start(listen, threads, sl_runtime_holder(runtime), &gateway,
                                          max_body_bytes, err, sizeof(err));
    if (server == NULL) {
        sl_log_error("%s", err);
        return 1;
    }
    if (!safe_mode) {
        uint16_t control_port =
            control != NULL ? sl_control_port(control) : sl_runtime_control_listen(runtime)->port;
        char *summary = sl_config_summary(first->config, sl_server_port(server), control_port);
        sl_log_info("config: %s", summary);
        free(summary);
    }
    sl_snapshot_release(first);
    atomic_store(&serving, server);
    sl_demoload_t *demo_load = NULL;
    if (opt.demo_load && opt.demo_clients > 0) {
        demo_load = sl_demoload_start(sl_server_port(server), SL_DEMO_CLIENT_KEY, opt.demo_clients);
        sl_log_info("demo: %u clients send traffic through sluice", opt.demo_clients);
    }
    sl_log_info("sluice %s serving on %s://%s:%u (%u thread%s, config: %s)%s", SLUICE_VERSION,
                listen->tls_cert != NULL ? "https" : "http", listen->bind, sl_server_port(server), threads,
                threads == 1 ? "" : "s",
                opt.config_path != NULL ? opt.config_path
                : opt.demo              ? "demo"
                                        : "embedded default",
                safe_mode ? " in SAFE MODE" : "");

    for (;;) {
        /* A second's sleep between looks at the config file (hot reload). */
        struct timespec tick = {1, 0};
        int sig = sigtimedwait(&signals, NULL, &tick);
        if (sig < 0) {
            sl_runtime_check_file(runtime);
            continue;
        }
        if (sig == SIGHUP) {
            sl_runtime_reload(runtime);
            continue;
        }
        sl_snapshot_t *s = sl_snapshot_acquire(sl_runtime_holder(runtime));
        uint32_t grace = s->config->shutdown_grace_secs;
        sl_snapshot_release(s);
        sl_log_info("%s received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        if (demo_load != NULL)
            sl_demoload_stop(demo_load);
        shut_down(server, &signals, grace);
        if (demo != NULL)
            sl_demo_stop(demo);
        sl_control_stop(control);
        if (eventlog != NULL)
            sl_eventlog_stop(eventlog);
        return 0;
    }
}
