/*
 * sluicectl's pure half: the command line parsed into a plain struct, the
 * request messages built from it, and every reply and event formatted as
 * text lines or JSON lines. No IO and no clock reads: the time is a
 * parameter, text goes into sl_strbuf_t buffers the shell (sluicectl.c)
 * writes out. The only outside state read is the process's time zone, for
 * the local clock times printed.
 *
 * Its files: cli_args.c (the command line), cli_values.c (the value
 * parsers), cli_help.c (help and usage texts), cli_requests.c (the
 * requests), cli_text.c (small texts, event and in-flight lines),
 * cli_replies.c (tables and reply lines), cli_json.c (JSON lines),
 * cli_stream.c (the event stream); what they share is cli_internal.h.
 */
#ifndef SL_CLI_H
#define SL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/xalloc.h"
#include "sl_proto.h"

#ifndef SLUICECTL_VERSION
#define SLUICECTL_VERSION "0.1.0"
#endif

/* What hello says we are. */
#define SL_CLI_CLIENT_NAME "sluicectl " SLUICECTL_VERSION

#define SL_CLI_DEFAULT_URL      "ws://127.0.0.1:8081/control"
#define SL_CLI_DEFAULT_KEY_FILE "sluice.key"
#define SL_CLI_SUBPROTOCOL      "sluice-control"
/* Connect, TLS, upgrade and hello/welcome together. */
#define SL_CLI_CONNECT_TIMEOUT_MS 5000
#define SL_CLI_REPLY_TIMEOUT_MS   30000
#define SL_CLI_HISTORY_LIMIT      50
#define SL_CLI_MAX_LIMITS         16

/* Exit statuses. */
#define SL_CLI_EXIT_OK    0
#define SL_CLI_EXIT_ERROR 1 /* the server answered with an error */
#define SL_CLI_EXIT_USAGE 2 /* also a connection or handshake problem */

typedef enum sl_cli_command {
    SL_CLI_NONE, /* no command: only `--help` */
    SL_CLI_HELP,
    SL_CLI_EVENTS,
    SL_CLI_PROVIDERS,
    SL_CLI_IN_FLIGHT,
    SL_CLI_HISTORY,
    SL_CLI_LIMITS_SET,
    SL_CLI_LIMITS_CLEAR,
    SL_CLI_PAUSE,
    SL_CLI_RESUME,
    SL_CLI_CANCEL,
    SL_CLI_CONFIG_GET,
    SL_CLI_CONFIG_PUT,
    SL_CLI_INSTANCES,
    SL_CLI_METRICS,
    SL_CLI_COMMAND_COUNT
} sl_cli_command_t;

/* Where the control endpoint is, from --url / --port. */
typedef struct sl_cli_endpoint {
    bool tls;            /* wss:// */
    char host[256];      /* without the brackets of an IPv6 literal */
    char authority[300]; /* host[:port] as in the URL, for the Host and Origin headers */
    int port;
    char path[512];
} sl_cli_endpoint_t;

/*
 * A parsed command line. Strings point into argv (or are literals): the
 * struct owns nothing and needs no freeing.
 */
typedef struct sl_cli_args {
    sl_cli_command_t command;
    bool help;                  /* print the help of `command` (general help for SL_CLI_NONE) */
    sl_cli_command_t help_of;   /* for `help COMMAND` */
    sl_cli_endpoint_t endpoint; /* always set: the default unless --url / --port */
    bool insecure;
    const char *cacert;   /* NULL: the system's CA store */
    const char *key;      /* --key, or NULL */
    const char *key_file; /* --key-file, or SL_CLI_DEFAULT_KEY_FILE */
    uint64_t timeout_ms;  /* for each reply */
    bool json;

    /* events */
    bool topic_providers;
    uint64_t count; /* 0: unlimited */

    /* the target of limits / pause / resume; history's filters */
    const char *provider;
    const char *client;
    const char *model;
    bool has_status;
    uint32_t status;

    /* limits set */
    sl_proto_limit_t limits[SL_CLI_MAX_LIMITS];
    size_t limits_len;

    /* pause */
    uint64_t pause_ms; /* 0: until resumed */

    /* history */
    uint64_t since_ms; /* a duration before now; 0: everything */
    uint32_t limit;
    const char *cursor;

    /* cancel */
    uint64_t id;

    /* config */
    const char *config_file; /* "-" is stdin */
    bool has_revision;
    uint64_t revision;
    bool repair; /* config get --repair: print the file to repair (safe mode) */
} sl_cli_args_t;

/*
 * Parses argv[1..argc). Returns 0 with *a filled, or -1 with a one-line
 * reason (no newline) in err[0..errlen) and *a unspecified. `--help`
 * anywhere (or `help`) sets a->help and skips checking everything else but
 * the command word.
 */
int sl_cli_parse(int argc, char *const argv[], sl_cli_args_t *a, char *err, size_t errlen);

/* The help text of a command; SL_CLI_NONE / SL_CLI_HELP: the general one. Static; ends with a newline. */
const char *sl_cli_help(sl_cli_command_t command);
/* The one-line usage of a command ("usage: sluicectl pause PROVIDER [--for DUR]"), static, no newline. */
const char *sl_cli_usage(sl_cli_command_t command);

/* ---- value parsers: each returns 0 with *out set, or -1 with *out untouched ---------------------------- */

/* ws://HOST[:PORT][/PATH] or wss://…; no path means /control. */
int sl_cli_parse_url(const char *url, sl_cli_endpoint_t *out);
/* A decimal integer in [min, max], digits only. */
int sl_cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/*
 * US dollars as a plain decimal ("20", "0.5", "$1.25") into micro-dollars,
 * exactly: at most 6 fractional digits, no sign, no exponent, more than 0.
 */
int sl_cli_parse_usd(const char *s, uint64_t *micros);
/* A duration: seconds ("90"), or number-unit pairs with s, m, h, d, w ("1h30m"); more than 0. */
int sl_cli_parse_duration(const char *s, uint64_t *ms);

/* Removes leading and trailing whitespace in place (for the key file); returns s. */
char *sl_cli_trim(char *s);

/* ---- requests: each fills a zeroed *out (free with sl_proto_message_free) ------------------------------ */

void sl_cli_build_hello(const char *key, sl_proto_message_t *out);
/*
 * The request that starts a.command, tagged req. now_ms is the wall clock
 * (pause --for, history --since). For config put, yaml is the file's text:
 * with --revision the put_config itself, without it the get_config that
 * learns the revision (then sl_cli_build_put_config). Returns 0, or -1 for
 * a command that sends nothing (none, help).
 */
int sl_cli_build_request(const sl_cli_args_t *a, uint32_t req, uint64_t now_ms, const char *yaml,
                         sl_proto_message_t *out);
void sl_cli_build_put_config(uint32_t req, const char *yaml, uint64_t revision, sl_proto_message_t *out);
void sl_cli_build_subscribe(const sl_cli_args_t *a, uint32_t req, sl_proto_message_t *out);

/* ---- formatting: each appends whole lines ---------------------------------------------------------- */

/* HH:MM:SS.mmm in local time; out holds at least 16 bytes. */
void sl_cli_clock(uint64_t ms, char out[16]);
/* 1.234s, 450ms. */
void sl_cli_duration_text(uint64_t ms, char out[32]);
/* $20.00, $0.50, $0.001234. */
void sl_cli_usd_text(uint64_t micros, char out[32]);
/* "10000000 tokens per 5 min", "30 requests per minute", "$20.00 per day". */
void sl_cli_limit_text(const sl_proto_limit_t *limit, char *out, size_t size);

/* One line: the local time, the event's kind slug, its salient fields. */
void sl_cli_event_line(const sl_proto_event_t *ev, sl_strbuf_t *out);
/* One JSON object and a newline: the event as on the wire (schema field names, enums as slugs). */
void sl_cli_event_json(const sl_proto_event_t *ev, sl_strbuf_t *out);

/*
 * The providers table (a header line, then one line per view); now_ms for the throttles' remaining time.
 * In cluster mode in-flight and queued carry the cluster's totals too ("3/64 (cluster 7)").
 */
void sl_cli_providers_table(const sl_proto_provider_view_t *views, size_t n, uint64_t now_ms,
                            sl_strbuf_t *out);
void sl_cli_provider_json(const sl_proto_provider_view_t *view, sl_strbuf_t *out);
/* The history table (a header line, then one line per row). */
void sl_cli_history_table(const sl_proto_history_row_t *rows, size_t n, sl_strbuf_t *out);
void sl_cli_history_json(const sl_proto_history_row_t *row, sl_strbuf_t *out);
/*
 * The cluster as this instance sees it (a line: its name, this instance, its state and the live
 * instances), then a table of the instances (name, in flight, queued, how long since its heartbeat as of
 * now_ms). instances may be NULL when n is 0.
 */
void sl_cli_instances_table(const sl_proto_cluster_view_t *cluster, const sl_proto_instance_view_t *instances,
                            size_t n, uint64_t now_ms, sl_strbuf_t *out);
/* One JSON object and a newline: {"cluster": ClusterView, "instances": [InstanceView...]}, as on the wire. */
void sl_cli_instances_json(const sl_proto_cluster_view_t *cluster, const sl_proto_instance_view_t *instances,
                           size_t n, sl_strbuf_t *out);
/*
 * `sluicectl metrics`, from the text of GET /metrics: requests answered; trouble absorbed (the share
 * rescued; rescued and lost, by cause); a table per route (rescued, lost, share); a table per provider
 * (breaker; hops ok, failed, 429, other). The JSON form: one object and a newline.
 */
void sl_cli_metrics_text(const char *metrics, sl_strbuf_t *out);
void sl_cli_metrics_json(const char *metrics, sl_strbuf_t *out);

/* One line per request: who, what, how old, and its last event. */
void sl_cli_in_flight_lines(const sl_proto_in_flight_t *in_flight, sl_strbuf_t *out);
void sl_cli_in_flight_json(const sl_proto_in_flight_request_t *request, sl_strbuf_t *out);

/* "error: TEXT [code]", then each problem indented on its own line. */
void sl_cli_error_lines(const sl_proto_error_msg_t *e, sl_strbuf_t *out);
/* "refused: TEXT [code]". */
void sl_cli_refused_line(const sl_proto_refused_msg_t *r, sl_strbuf_t *out);

/*
 * The ok answering a.command's request: what goes to stdout (out) and what
 * to stderr (err). now_ms for the tables of providers and instances.
 */
void sl_cli_ok_lines(const sl_cli_args_t *a, const sl_proto_ok_msg_t *ok, uint64_t now_ms, sl_strbuf_t *out,
                     sl_strbuf_t *err);

/* ---- the event stream ------------------------------------------------------------------------------ */

/*
 * What `events` has shown. A resync after events_dropped replays each
 * in-flight request's events; the stream skips those it already printed
 * (a request's printed events are always a prefix of its list: drops only
 * ever take the oldest unsent, and events arriving between events_dropped
 * and the new snapshot are ignored, the snapshot reflects them).
 * Zero-initialise, then set json / topic_providers / max_events.
 */
typedef struct sl_cli_stream_shown {
    uint64_t id;
    size_t events; /* how many of its events were printed */
} sl_cli_stream_shown_t;

typedef struct sl_cli_stream {
    bool json;
    bool topic_providers; /* print the snapshot's providers too */
    uint64_t max_events;  /* 0: unlimited */
    uint64_t printed;
    bool synced; /* a snapshot arrived, and no events_dropped since */
    bool has_seq;
    uint64_t seq; /* the last seq seen */
    sl_cli_stream_shown_t *shown;
    size_t shown_len, shown_cap;
} sl_cli_stream_t;

/* Replays the snapshot's in-flight requests (skipping what was already shown), and its providers if asked. */
void sl_cli_stream_snapshot(sl_cli_stream_t *s, const sl_proto_snapshot_msg_t *snap, sl_strbuf_t *out,
                            sl_strbuf_t *err);
/* Prints one event (or notes a gap in seq on err). */
void sl_cli_stream_event(sl_cli_stream_t *s, const sl_proto_event_msg_t *ev, sl_strbuf_t *out,
                         sl_strbuf_t *err);
/* Notes the drop on err and waits for the next snapshot; the shell sends subscribe again. */
void sl_cli_stream_dropped(sl_cli_stream_t *s, uint64_t count, sl_strbuf_t *err);
/* Whether max_events were printed. */
bool sl_cli_stream_done(const sl_cli_stream_t *s);
void sl_cli_stream_free(sl_cli_stream_t *s);

#endif
