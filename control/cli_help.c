/*
 * sluicectl's help: the general help, each command's help text and its
 * one-line usage, as one table indexed by command (sl_cli_help,
 * sl_cli_usage in cli.h).
 */
#include "cli.h"

#define OPTIONS_HELP                                                                                         \
    "Connection options (any command):\n"                                                                    \
    "  --url URL          ws://HOST:PORT/control, or wss://... (default " SL_CLI_DEFAULT_URL ")\n"           \
    "  --port N           same as --url ws://127.0.0.1:N/control\n"                                          \
    "  --key KEY          the control key (default: $SLUICE_CONTROL_KEY, else the key file)\n"               \
    "  --key-file PATH    the file sluice wrote the key to (default ./" SL_CLI_DEFAULT_KEY_FILE ")\n"        \
    "  --cacert FILE      CA certificates to verify a wss:// server with (default: the system's)\n"          \
    "  --insecure         wss://: do not verify the server's certificate\n"                                  \
    "  --timeout SECS     how long to wait for each reply (default 30; connecting: 5)\n"                     \
    "  -h, --help         this text\n"

#define EXIT_HELP                                                                                            \
    "Exit status: 0 done; 1 the server answered with an error; 2 a usage, connection or\n"                   \
    "handshake problem (including a refused key or protocol version).\n"

#define DUR_HELP "DUR is seconds (90), or numbers with units s, m, h, d, w (15m, 1h30m, 2d).\n"

#define LIMITS_HELP                                                                                          \
    "A LIMIT is a group of options. Each --per starts a new limit; the --every and the one\n"                \
    "measure after it belong to that limit:\n"                                                               \
    "  --per minute|hour|day|week|month [--every N] (--requests N | --tokens N | --cost USD)\n"              \
    "--every N: the window is N minutes or hours long (default 1). --cost: US dollars with at\n"             \
    "most 6 decimals, sent as integer micro-dollars (0.5 is 500000). Repeat the group for\n"                 \
    "several limits; `set` replaces all of the target's limits with the ones given.\n"

static const char general_help[] =
    "usage: sluicectl [OPTIONS] COMMAND [ARGS]\n"
    "\n"
    "The command-line client of sluice's control endpoint.\n"
    "\n"
    "Commands:\n"
    "  events [--json] [--providers] [--count N]   stream events live\n"
    "  providers [--json]                          upstreams: health, throttle, load, limits\n"
    "  instances [--json]                          the cluster's live instances and their load\n"
    "  metrics [--json]                            trouble absorbed: rescued / lost / share, per provider\n"
    "  in-flight [--json]                          live requests with their last event\n"
    "  history [--since DUR] [--limit N] [--client NAME] [--provider NAME] [--model NAME]\n"
    "          [--status N] [--cursor C] [--json]   answered requests from the request DB\n"
    "  limits set PROVIDER LIMIT...                replace an upstream's usage limits\n"
    "  limits set --client NAME LIMIT...           replace a client key's usage limits\n"
    "  limits clear (PROVIDER | --client NAME)     remove all of its usage limits\n"
    "  pause PROVIDER [--for DUR]                  hold an upstream back (default: until resumed)\n"
    "  resume PROVIDER                             end a manual pause\n"
    "  cancel ID                                   abort an in-flight or queued request\n"
    "  config get [--repair]                       print the configuration (revision on stderr)\n"
    "  config put FILE [--revision N]              validate and apply a configuration (- = stdin)\n"
    "  help [COMMAND]                              this text, or a command's\n"
    "\n" LIMITS_HELP
    "  e.g. sluicectl limits set anthropic --per minute --every 5 --tokens 10000000 --per day --cost 20\n"
    "\n" DUR_HELP "\n" OPTIONS_HELP "\n" EXIT_HELP;

static const char events_help[] =
    "usage: sluicectl events [--json] [--providers] [--count N]\n"
    "\n"
    "Subscribes to the event stream and prints one line per event: the local time, the\n"
    "event's kind and its salient fields. The events of requests already in flight come\n"
    "first (replayed). Runs until interrupted (SIGINT, SIGTERM) or the server closes.\n"
    "\n"
    "  --json        one JSON object per line, as on the wire (schema field names, enums as slugs)\n"
    "  --providers   also the topic providers: the upstreams' views now, then provider_changed\n"
    "  --count N     exit after N lines (replayed ones count)\n"
    "\n"
    "When the server drops events because this client fell behind, a notice goes to stderr and\n"
    "the stream is resynchronised (replayed events already shown are not repeated).\n"
    "\n" OPTIONS_HELP;

static const char providers_help[] =
    "usage: sluicectl providers [--json]\n"
    "\n"
    "Prints a table of the upstreams: name, protocol, health (ok, open, half_open, disabled),\n"
    "throttle (its kind and the seconds left, or -), in-flight (with max_concurrent), queued,\n"
    "and each usage limit as used/limit. In cluster mode in-flight and queued also show the\n"
    "whole cluster's, e.g. 3/64 (cluster 7). A last line shows the request DB, e.g.\n"
    "request DB: postgres, degraded (connection refused), 120 rows spooled.\n"
    "\n"
    "  --json   one JSON object (ProviderView) per line\n"
    "\n" OPTIONS_HELP;

static const char metrics_help[] =
    "usage: sluicectl metrics [--json]\n"
    "\n"
    "Reads GET /metrics on the control endpoint (with the control key) and prints the\n"
    "trouble sluice absorbed since it started: requests rescued (answered 2xx although an\n"
    "upstream failed, said 429 or was full on the way) and lost to that trouble, the share\n"
    "rescued, both by cause and by route; then per provider its hops by outcome and its\n"
    "breaker. Prometheus reads the same endpoint (observability.md).\n"
    "\n"
    "  --json   one JSON object {\"rescued\", \"lost\", \"share\", \"by_cause\", \"routes\",\n"
    "           \"providers\"}\n"
    "\n" OPTIONS_HELP;

static const char instances_help[] =
    "usage: sluicectl instances [--json]\n"
    "\n"
    "In cluster mode, prints the cluster as this instance sees it: its name, this instance,\n"
    "its state (joined; degraded: Redis lost; alone: not joined yet) and how many instances\n"
    "are live; then a table of the live instances: name ((this) marks the one answering),\n"
    "in-flight, queued, and the seconds since its last heartbeat. Outside cluster mode it\n"
    "says so.\n"
    "\n"
    "  --json   one JSON object {\"cluster\": ClusterView, \"instances\": [InstanceView...]};\n"
    "           nothing outside cluster mode\n"
    "\n" OPTIONS_HELP;

static const char in_flight_help[] =
    "usage: sluicectl in-flight [--json]\n"
    "\n"
    "Prints one line per live request: its id, client, model, age and last event.\n"
    "\n"
    "  --json   one JSON object (InFlightRequest, with all its events) per line\n"
    "\n" OPTIONS_HELP;

static const char history_help[] =
    "usage: sluicectl history [--since DUR] [--limit N] [--client NAME] [--provider NAME]\n"
    "                         [--model NAME] [--status N] [--cursor C] [--json]\n"
    "\n"
    "Prints a table of answered requests from the request DB: time, id, client, model,\n"
    "provider, status, duration, time to first token, tokens (input/output) and cost; and the\n"
    "instance that served it, when the request DB is PostgreSQL shared by several instances.\n"
    "\n"
    "  --since DUR      only requests of the last DUR (default: all)\n"
    "  --limit N        at most N rows (default 50)\n"
    "  --client NAME    only this client key's\n"
    "  --provider NAME  only those served by this upstream\n"
    "  --model NAME     only this model's\n"
    "  --status N       only those answered with this HTTP status\n"
    "  --cursor C       continue where a previous answer stopped (it says so on stderr)\n"
    "  --json           one JSON object (HistoryRow) per line\n"
    "\n" DUR_HELP "\n" OPTIONS_HELP;

static const char limits_help[] =
    "usage: sluicectl limits set (PROVIDER | --client NAME) LIMIT...\n"
    "       sluicectl limits clear (PROVIDER | --client NAME)\n"
    "\n"
    "Replaces the usage limits of an upstream or of a client key, live; sluice writes them\n"
    "to its configuration file. `clear` removes them all.\n"
    "\n" LIMITS_HELP "\n"
    "e.g. sluicectl limits set anthropic --per minute --every 5 --tokens 10000000\n"
    "     sluicectl limits set --client alice --per minute --requests 30 --per day --cost 20\n"
    "\n" OPTIONS_HELP;

static const char pause_help[] = "usage: sluicectl pause PROVIDER [--for DUR]\n"
                                 "\n"
                                 "Holds an upstream back by hand (a manual throttle): requests go to other\n"
                                 "candidates or wait. Without --for it lasts until `sluicectl resume`.\n"
                                 "\n"
                                 "  --for DUR   end the pause by itself after DUR\n"
                                 "\n" DUR_HELP "\n" OPTIONS_HELP;

static const char resume_help[] = "usage: sluicectl resume PROVIDER\n"
                                  "\n"
                                  "Ends a manual pause of an upstream.\n"
                                  "\n" OPTIONS_HELP;

static const char cancel_help[] =
    "usage: sluicectl cancel ID\n"
    "\n"
    "Aborts an in-flight or queued request (ID as in `events` or `in-flight`).\n"
    "\n" OPTIONS_HELP;

static const char config_help[] =
    "usage: sluicectl config get [--repair]\n"
    "       sluicectl config put FILE [--revision N]\n"
    "\n"
    "get prints the configuration file as written (${VAR} references kept, literal secrets\n"
    "as ***) on stdout, and its revision on stderr. In safe mode stderr also lists why the\n"
    "file was not applied, and --repair prints that file instead.\n"
    "\n"
    "put validates FILE (- for stdin) and applies it atomically; every problem is listed\n"
    "when it is rejected. A *** sent back unchanged keeps the current secret.\n"
    "\n"
    "  --revision N   the revision FILE was edited from; a newer one on the server is a\n"
    "                 conflict (default: the server's current revision, fetched first)\n"
    "  --repair       print the file to repair (safe mode) instead of the running one\n"
    "\n" OPTIONS_HELP;

static const struct help_text {
    const char *help;
    const char *usage;
} help_texts[SL_CLI_COMMAND_COUNT] = {
    [SL_CLI_NONE] = {general_help, "usage: sluicectl [OPTIONS] COMMAND [ARGS] (sluicectl --help for more)"},
    [SL_CLI_HELP] = {general_help, "usage: sluicectl help [COMMAND]"},
    [SL_CLI_EVENTS] = {events_help, "usage: sluicectl events [--json] [--providers] [--count N]"},
    [SL_CLI_PROVIDERS] = {providers_help, "usage: sluicectl providers [--json]"},
    [SL_CLI_INSTANCES] = {instances_help, "usage: sluicectl instances [--json]"},
    [SL_CLI_METRICS] = {metrics_help, "usage: sluicectl metrics [--json]"},
    [SL_CLI_IN_FLIGHT] = {in_flight_help, "usage: sluicectl in-flight [--json]"},
    [SL_CLI_HISTORY] = {history_help, "usage: sluicectl history [--since DUR] [--limit N] [--client NAME] "
                                      "[--provider NAME] [--model NAME] [--status N] [--cursor C] [--json]"},
    [SL_CLI_LIMITS_SET] = {limits_help, "usage: sluicectl limits set (PROVIDER | --client NAME) --per PERIOD "
                                        "[--every N] (--requests N | --tokens N | --cost USD) ..."},
    [SL_CLI_LIMITS_CLEAR] = {limits_help, "usage: sluicectl limits clear (PROVIDER | --client NAME)"},
    [SL_CLI_PAUSE] = {pause_help, "usage: sluicectl pause PROVIDER [--for DUR]"},
    [SL_CLI_RESUME] = {resume_help, "usage: sluicectl resume PROVIDER"},
    [SL_CLI_CANCEL] = {cancel_help, "usage: sluicectl cancel ID"},
    [SL_CLI_CONFIG_GET] = {config_help, "usage: sluicectl config get [--repair]"},
    [SL_CLI_CONFIG_PUT] = {config_help, "usage: sluicectl config put FILE [--revision N]"},
};

/* The texts of command; one out of range gets the general ones. */
static const struct help_text *
help_of(sl_cli_command_t command)
{
    return &help_texts[(unsigned)command < SL_CLI_COMMAND_COUNT ? command : SL_CLI_NONE];
}

const char *
sl_cli_help(sl_cli_command_t command)
{
    return help_of(command)->help;
}

const char *
sl_cli_usage(sl_cli_command_t command)
{
    return help_of(command)->usage;
}
