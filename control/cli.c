#include "cli.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/text.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* The wire's integers stop at 2^53 - 1 (protocol.md). */
#define WIRE_MAX ((UINT64_C(1) << 53) - 1)

/* ---- help ---------------------------------------------------------------------------------------- */

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
    "and each usage limit as used/limit.\n"
    "\n"
    "  --json   one JSON object (ProviderView) per line\n"
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
    "provider, status, duration, time to first token, tokens (input/output) and cost.\n"
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

static const struct {
    const char *help;
    const char *usage;
} help_texts[SL_CLI_COMMAND_COUNT] = {
    [SL_CLI_NONE] = {general_help, "usage: sluicectl [OPTIONS] COMMAND [ARGS] (sluicectl --help for more)"},
    [SL_CLI_HELP] = {general_help, "usage: sluicectl help [COMMAND]"},
    [SL_CLI_EVENTS] = {events_help, "usage: sluicectl events [--json] [--providers] [--count N]"},
    [SL_CLI_PROVIDERS] = {providers_help, "usage: sluicectl providers [--json]"},
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

const char *
sl_cli_help(sl_cli_command_t command)
{
    if ((unsigned)command >= SL_CLI_COMMAND_COUNT)
        command = SL_CLI_NONE;
    return help_texts[command].help;
}

const char *
sl_cli_usage(sl_cli_command_t command)
{
    if ((unsigned)command >= SL_CLI_COMMAND_COUNT)
        command = SL_CLI_NONE;
    return help_texts[command].usage;
}

/* ---- value parsers ------------------------------------------------------------------------------- */

int
sl_cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int
sl_cli_parse_usd(const char *s, uint64_t *micros)
{
    if (s == NULL)
        return -1;
    if (*s == '$')
        s++;
    int64_t v;
    if (sl_decimal_millionths(s, (int64_t)WIRE_MAX, &v) != 0 || v == 0)
        return -1;
    *micros = (uint64_t)v;
    return 0;
}

int
sl_cli_parse_duration(const char *s, uint64_t *ms)
{
    static const struct {
        char unit;
        uint64_t ms;
    } units[] = {{'s', 1000}, {'m', 60000}, {'h', 3600000}, {'d', 86400000}, {'w', 604800000}};
    if (s == NULL || *s == '\0')
        return -1;
    uint64_t total = 0;
    while (*s) {
        if (*s < '0' || *s > '9')
            return -1;
        uint64_t n = 0;
        for (; *s >= '0' && *s <= '9'; s++) {
            n = n * 10 + (uint64_t)(*s - '0');
            if (n > WIRE_MAX / 1000)
                return -1;
        }
        uint64_t unit_ms = 0;
        if (*s == '\0') {
            unit_ms = 1000; /* a bare number is seconds */
        } else {
            for (size_t i = 0; i < N(units); i++)
                if (units[i].unit == *s)
                    unit_ms = units[i].ms;
            if (unit_ms == 0)
                return -1;
            s++;
        }
        if (n > (WIRE_MAX - total) / unit_ms)
            return -1;
        total += n * unit_ms;
    }
    if (total == 0)
        return -1;
    *ms = total;
    return 0;
}

int
sl_cli_parse_url(const char *url, sl_cli_endpoint_t *out)
{
    sl_cli_endpoint_t e;
    memset(&e, 0, sizeof e);
    const char *rest;
    if (strncmp(url, "ws://", 5) == 0) {
        rest = url + 5;
    } else if (strncmp(url, "wss://", 6) == 0) {
        rest = url + 6;
        e.tls = true;
    } else {
        return -1;
    }
    size_t auth_len = strcspn(rest, "/?#");
    if (auth_len == 0 || auth_len >= sizeof e.authority || strchr(rest, '@') != NULL)
        return -1;
    memcpy(e.authority, rest, auth_len);
    const char *host = rest, *port = NULL;
    size_t host_len;
    if (*rest == '[') {
        const char *close = memchr(rest, ']', auth_len);
        if (close == NULL)
            return -1;
        host = rest + 1;
        host_len = (size_t)(close - host);
        if (close + 1 < rest + auth_len) {
            if (close[1] != ':')
                return -1;
            port = close + 2;
        }
    } else {
        const char *colon = memchr(rest, ':', auth_len);
        host_len = colon != NULL ? (size_t)(colon - rest) : auth_len;
        if (colon != NULL)
            port = colon + 1;
    }
    if (host_len == 0 || host_len >= sizeof e.host)
        return -1;
    memcpy(e.host, host, host_len);
    e.port = e.tls ? 443 : 80;
    if (port != NULL) {
        char digits[8];
        size_t n = (size_t)(rest + auth_len - port);
        uint64_t p;
        if (n == 0 || n >= sizeof digits)
            return -1;
        memcpy(digits, port, n);
        digits[n] = '\0';
        if (sl_cli_parse_uint(digits, 1, 65535, &p) != 0)
            return -1;
        e.port = (int)p;
    }
    const char *path = rest + auth_len;
    if (*path == '\0')
        path = "/control";
    if (*path != '/' || strlen(path) >= sizeof e.path)
        return -1;
    strcpy(e.path, path);
    *out = e;
    return 0;
}

char *
sl_cli_trim(char *s)
{
    static const char space[] = " \t\r\n\v\f";
    size_t lead = strspn(s, space);
    size_t len = strlen(s + lead);
    memmove(s, s + lead, len + 1);
    while (len > 0 && strchr(space, s[len - 1]) != NULL)
        s[--len] = '\0';
    return s;
}

/* ---- argument parsing ---------------------------------------------------------------------------- */

typedef struct parser {
    sl_cli_args_t *a;
    char *err;
    size_t errlen;
    bool url_given, port_given;
    bool measured[SL_CLI_MAX_LIMITS]; /* limits[i] has its measure */
} parser_t;

__attribute__((format(printf, 2, 3))) static int
fail(parser_t *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int
uint_value(parser_t *p, const char *name, const char *value, uint64_t min, uint64_t max, uint64_t *out)
{
    if (sl_cli_parse_uint(value, min, max, out) != 0)
        return fail(p, "--%s: expected a whole number from %llu to %llu, got \"%s\"", name,
                    (unsigned long long)min, (unsigned long long)max, value);
    return 0;
}

static int
duration_value(parser_t *p, const char *name, const char *value, uint64_t *out)
{
    if (sl_cli_parse_duration(value, out) != 0)
        return fail(p, "--%s: expected a duration such as 90, 15m or 1h30m, got \"%s\"", name, value);
    return 0;
}

static int
on_url(parser_t *p, const char *v)
{
    if (p->port_given)
        return fail(p, "--url and --port: give one of them");
    if (sl_cli_parse_url(v, &p->a->endpoint) != 0)
        return fail(p, "--url: expected ws://HOST:PORT/control or wss://..., got \"%s\"", v);
    p->url_given = true;
    return 0;
}

static int
on_port(parser_t *p, const char *v)
{
    uint64_t port;
    if (p->url_given)
        return fail(p, "--url and --port: give one of them");
    if (uint_value(p, "port", v, 1, 65535, &port) != 0)
        return -1;
    char url[64];
    snprintf(url, sizeof url, "ws://127.0.0.1:%u/control", (unsigned)port);
    sl_cli_parse_url(url, &p->a->endpoint);
    p->port_given = true;
    return 0;
}

static int
on_key(parser_t *p, const char *v)
{
    p->a->key = v;
    return 0;
}

static int
on_key_file(parser_t *p, const char *v)
{
    p->a->key_file = v;
    return 0;
}

static int
on_cacert(parser_t *p, const char *v)
{
    p->a->cacert = v;
    return 0;
}

static int
on_insecure(parser_t *p, const char *v)
{
    (void)v;
    p->a->insecure = true;
    return 0;
}

static int
on_timeout(parser_t *p, const char *v)
{
    uint64_t secs;
    if (uint_value(p, "timeout", v, 1, 86400, &secs) != 0)
        return -1;
    p->a->timeout_ms = secs * 1000;
    return 0;
}

static int
on_json(parser_t *p, const char *v)
{
    (void)v;
    p->a->json = true;
    return 0;
}

static int
on_providers(parser_t *p, const char *v)
{
    (void)v;
    p->a->topic_providers = true;
    return 0;
}

static int
on_count(parser_t *p, const char *v)
{
    return uint_value(p, "count", v, 1, WIRE_MAX, &p->a->count);
}

static int
on_client(parser_t *p, const char *v)
{
    if (*v == '\0')
        return fail(p, "--client: expected a client key's name");
    p->a->client = v;
    return 0;
}

static int
on_provider(parser_t *p, const char *v)
{
    if (*v == '\0')
        return fail(p, "--provider: expected an upstream's name");
    p->a->provider = v;
    return 0;
}

static int
on_model(parser_t *p, const char *v)
{
    p->a->model = v;
    return 0;
}

static int
on_status(parser_t *p, const char *v)
{
    uint64_t status;
    if (uint_value(p, "status", v, 100, 999, &status) != 0)
        return -1;
    p->a->has_status = true;
    p->a->status = (uint32_t)status;
    return 0;
}

static int
on_since(parser_t *p, const char *v)
{
    return duration_value(p, "since", v, &p->a->since_ms);
}

static int
on_limit(parser_t *p, const char *v)
{
    uint64_t n;
    if (uint_value(p, "limit", v, 1, 100000, &n) != 0)
        return -1;
    p->a->limit = (uint32_t)n;
    return 0;
}

static int
on_cursor(parser_t *p, const char *v)
{
    p->a->cursor = v;
    return 0;
}

static int
on_per(parser_t *p, const char *v)
{
    sl_proto_period_t per;
    if (sl_proto_period_parse(v, &per) != 0)
        return fail(p, "--per: expected minute, hour, day, week or month, got \"%s\"", v);
    if (p->a->limits_len == SL_CLI_MAX_LIMITS)
        return fail(p, "too many limits (at most %d)", SL_CLI_MAX_LIMITS);
    sl_proto_limit_t *l = &p->a->limits[p->a->limits_len++];
    memset(l, 0, sizeof *l);
    l->per = per;
    l->every = 1;
    return 0;
}

/* The limit the group options after the last --per belong to, or NULL (with err) before any --per. */
static sl_proto_limit_t *
open_limit(parser_t *p, const char *name)
{
    if (p->a->limits_len == 0) {
        fail(p, "--%s belongs to a limit: start it with --per PERIOD", name);
        return NULL;
    }
    return &p->a->limits[p->a->limits_len - 1];
}

static int
on_every(parser_t *p, const char *v)
{
    sl_proto_limit_t *l = open_limit(p, "every");
    uint64_t every;
    if (l == NULL || uint_value(p, "every", v, 1, UINT32_MAX, &every) != 0)
        return -1;
    l->every = (uint32_t)every;
    return 0;
}

enum measure { MEASURE_REQUESTS, MEASURE_TOKENS, MEASURE_COST };

/* Sets the measure of the open limit; a second one in the same group is refused. */
static int
set_measure(parser_t *p, enum measure m, const char *v)
{
    static const char *const names[] = {"requests", "tokens", "cost"};
    sl_proto_limit_t *l = open_limit(p, names[m]);
    if (l == NULL)
        return -1;
    size_t i = p->a->limits_len - 1;
    if (p->measured[i])
        return fail(p,
                    "limit %zu (--per %s): one measure per limit (--requests, --tokens or --cost); start "
                    "another limit with --per",
                    i + 1, sl_proto_period_slug(l->per));
    uint64_t amount;
    if (m == MEASURE_COST) {
        if (sl_cli_parse_usd(v, &amount) != 0)
            return fail(
                p, "--cost: expected US dollars above 0 with at most 6 decimals (e.g. 20 or 0.5), got \"%s\"",
                v);
    } else if (uint_value(p, names[m], v, 1, WIRE_MAX, &amount) != 0) {
        return -1;
    }
    switch (m) {
    case MEASURE_REQUESTS:
        l->has_requests = true;
        l->requests = amount;
        break;
    case MEASURE_TOKENS:
        l->has_tokens = true;
        l->tokens = amount;
        break;
    case MEASURE_COST:
        l->has_cost_micros = true;
        l->cost_micros = amount;
        break;
    }
    p->measured[i] = true;
    return 0;
}

static int
on_requests(parser_t *p, const char *v)
{
    return set_measure(p, MEASURE_REQUESTS, v);
}

static int
on_tokens(parser_t *p, const char *v)
{
    return set_measure(p, MEASURE_TOKENS, v);
}

static int
on_cost(parser_t *p, const char *v)
{
    return set_measure(p, MEASURE_COST, v);
}

static int
on_for(parser_t *p, const char *v)
{
    return duration_value(p, "for", v, &p->a->pause_ms);
}

static int
on_revision(parser_t *p, const char *v)
{
    p->a->has_revision = true;
    return uint_value(p, "revision", v, 0, WIRE_MAX, &p->a->revision);
}

static int
on_repair(parser_t *p, const char *v)
{
    (void)v;
    p->a->repair = true;
    return 0;
}

#define CMD(c)     (1u << (c))
#define EVERYWHERE (~0u)
#define LIMITS     (CMD(SL_CLI_LIMITS_SET) | CMD(SL_CLI_LIMITS_CLEAR))
#define LIMIT_SET  CMD(SL_CLI_LIMITS_SET)

/* Every option: its name, whether it takes a value, the commands it belongs to. */
static const struct option {
    const char *name;
    bool value;
    unsigned commands;
    int (*apply)(parser_t *p, const char *value);
} options[] = {
    {"url", true, EVERYWHERE, on_url},
    {"port", true, EVERYWHERE, on_port},
    {"key", true, EVERYWHERE, on_key},
    {"key-file", true, EVERYWHERE, on_key_file},
    {"cacert", true, EVERYWHERE, on_cacert},
    {"insecure", false, EVERYWHERE, on_insecure},
    {"timeout", true, EVERYWHERE, on_timeout},
    {"help", false, EVERYWHERE, NULL},
    {"json", false, CMD(SL_CLI_EVENTS) | CMD(SL_CLI_PROVIDERS) | CMD(SL_CLI_IN_FLIGHT) | CMD(SL_CLI_HISTORY),
     on_json},
    {"providers", false, CMD(SL_CLI_EVENTS), on_providers},
    {"count", true, CMD(SL_CLI_EVENTS), on_count},
    {"client", true, LIMITS | CMD(SL_CLI_HISTORY), on_client},
    {"provider", true, CMD(SL_CLI_HISTORY), on_provider},
    {"model", true, CMD(SL_CLI_HISTORY), on_model},
    {"status", true, CMD(SL_CLI_HISTORY), on_status},
    {"since", true, CMD(SL_CLI_HISTORY), on_since},
    {"limit", true, CMD(SL_CLI_HISTORY), on_limit},
    {"cursor", true, CMD(SL_CLI_HISTORY), on_cursor},
    {"per", true, LIMIT_SET, on_per},
    {"every", true, LIMIT_SET, on_every},
    {"requests", true, LIMIT_SET, on_requests},
    {"tokens", true, LIMIT_SET, on_tokens},
    {"cost", true, LIMIT_SET, on_cost},
    {"for", true, CMD(SL_CLI_PAUSE), on_for},
    {"revision", true, CMD(SL_CLI_CONFIG_PUT), on_revision},
    {"repair", false, CMD(SL_CLI_CONFIG_GET), on_repair},
};

/* The command words: `word [sub] OPERAND...`. */
static const struct command_word {
    const char *word, *sub;
    sl_cli_command_t command;
} command_words[] = {
    {"events", NULL, SL_CLI_EVENTS},       {"providers", NULL, SL_CLI_PROVIDERS},
    {"in-flight", NULL, SL_CLI_IN_FLIGHT}, {"history", NULL, SL_CLI_HISTORY},
    {"limits", "set", SL_CLI_LIMITS_SET},  {"limits", "clear", SL_CLI_LIMITS_CLEAR},
    {"pause", NULL, SL_CLI_PAUSE},         {"resume", NULL, SL_CLI_RESUME},
    {"cancel", NULL, SL_CLI_CANCEL},       {"config", "get", SL_CLI_CONFIG_GET},
    {"config", "put", SL_CLI_CONFIG_PUT},  {"help", NULL, SL_CLI_HELP},
};

static const char *
command_name(sl_cli_command_t c)
{
    for (size_t i = 0; i < N(command_words); i++)
        if (command_words[i].command == c) {
            static char name[32];
            snprintf(name, sizeof name, "%s%s%s", command_words[i].word, command_words[i].sub ? " " : "",
                     command_words[i].sub ? command_words[i].sub : "");
            return name;
        }
    return "sluicectl";
}

static const struct option *
find_option(const char *name, size_t len)
{
    for (size_t i = 0; i < N(options); i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
            return &options[i];
    return NULL;
}

/*
 * Resolves the command from the first positionals; *used is how many words it took.
 * partial: a word that needs a sub-word may stand alone (for help).
 */
static int
resolve_command(parser_t *p, char *const *pos, size_t npos, bool partial, sl_cli_command_t *out, size_t *used)
{
    if (npos == 0) {
        *out = SL_CLI_NONE;
        *used = 0;
        return 0;
    }
    bool word_known = false;
    for (size_t i = 0; i < N(command_words); i++) {
        const struct command_word *w = &command_words[i];
        if (strcmp(w->word, pos[0]) != 0)
            continue;
        word_known = true;
        if (w->sub == NULL) {
            *out = w->command;
            *used = 1;
            return 0;
        }
        if (npos > 1 && strcmp(w->sub, pos[1]) == 0) {
            *out = w->command;
            *used = 2;
            return 0;
        }
    }
    if (!word_known)
        return fail(p, "unknown command \"%s\"", pos[0]);
    if (partial) {
        /* `limits --help`: the help of limits covers both sub-commands */
        for (size_t i = 0; i < N(command_words); i++)
            if (strcmp(command_words[i].word, pos[0]) == 0) {
                *out = command_words[i].command;
                *used = npos > 1 ? 2 : 1;
                return 0;
            }
    }
    if (strcmp(pos[0], "limits") == 0)
        return fail(p, "limits: expected `limits set` or `limits clear`");
    return fail(p, "config: expected `config get` or `config put`");
}

/* The operands after the command words. */
static int
take_operands(parser_t *p, char *const *ops, size_t n)
{
    sl_cli_args_t *a = p->a;
    size_t want = 0;
    switch (a->command) {
    case SL_CLI_LIMITS_SET:
    case SL_CLI_LIMITS_CLEAR:
        if (a->client != NULL && n > 0)
            return fail(p, "%s: give a provider or --client NAME, not both", command_name(a->command));
        if (a->client == NULL) {
            if (n == 0)
                return fail(p, "%s: name the provider, or a client key with --client NAME",
                            command_name(a->command));
            a->provider = ops[0];
            want = 1;
        }
        break;
    case SL_CLI_PAUSE:
    case SL_CLI_RESUME:
        if (n == 0)
            return fail(p, "%s: name the provider", command_name(a->command));
        a->provider = ops[0];
        want = 1;
        break;
    case SL_CLI_CANCEL:
        if (n == 0)
            return fail(p, "cancel: give the request's ID");
        if (sl_cli_parse_uint(ops[0], 0, WIRE_MAX, &a->id) != 0)
            return fail(p, "cancel: expected a request ID (a whole number), got \"%s\"", ops[0]);
        want = 1;
        break;
    case SL_CLI_CONFIG_PUT:
        if (n == 0)
            return fail(p, "config put: give the FILE to apply (- for stdin)");
        a->config_file = ops[0];
        want = 1;
        break;
    default:
        break;
    }
    if (n > want)
        return fail(p, "%s: unexpected argument \"%s\"", command_name(a->command), ops[want]);
    if (a->provider != NULL && *a->provider == '\0')
        return fail(p, "%s: the provider's name is empty", command_name(a->command));
    return 0;
}

static int
check_limits(parser_t *p)
{
    sl_cli_args_t *a = p->a;
    if (a->command == SL_CLI_LIMITS_SET && a->limits_len == 0)
        return fail(p,
                    "limits set: give at least one limit (--per PERIOD and a measure); to remove them all, "
                    "use `limits clear`");
    for (size_t i = 0; i < a->limits_len; i++)
        if (!p->measured[i])
            return fail(p, "limit %zu (--per %s): give its measure: --requests N, --tokens N or --cost USD",
                        i + 1, sl_proto_period_slug(a->limits[i].per));
    return 0;
}

int
sl_cli_parse(int argc, char *const argv[], sl_cli_args_t *a, char *err, size_t errlen)
{
    parser_t p = {.a = a, .err = err, .errlen = errlen};
    memset(a, 0, sizeof *a);
    sl_cli_parse_url(SL_CLI_DEFAULT_URL, &a->endpoint);
    a->key_file = SL_CLI_DEFAULT_KEY_FILE;
    a->timeout_ms = SL_CLI_REPLY_TIMEOUT_MS;
    a->limit = SL_CLI_HISTORY_LIMIT;
    if (errlen > 0)
        err[0] = '\0';

    /* Pass 1: the positionals (the command is needed to know which options belong), and --help. */
    char *pos[16];
    size_t npos = 0;
    bool options_end = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_end && strcmp(arg, "--") == 0) {
            options_end = true;
        } else if (!options_end && (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)) {
            a->help = true;
        } else if (!options_end && arg[0] == '-' && arg[1] != '\0') {
            if (arg[1] != '-')
                return fail(&p, "unknown option %s", arg);
            const char *name = arg + 2, *eq = strchr(name, '=');
            const struct option *o = find_option(name, eq ? (size_t)(eq - name) : strlen(name));
            if (o == NULL)
                return fail(&p, "unknown option --%.*s", (int)(eq ? eq - name : (int)strlen(name)), name);
            if (o->value && eq == NULL) {
                if (i + 1 >= argc)
                    return fail(&p, "--%s needs a value", o->name);
                i++;
            } else if (!o->value && eq != NULL) {
                return fail(&p, "--%s takes no value", o->name);
            }
        } else {
            if (npos == N(pos))
                return fail(&p, "too many arguments");
            pos[npos++] = argv[i];
        }
    }

    size_t used;
    if (resolve_command(&p, pos, npos, a->help, &a->command, &used) != 0)
        return -1;
    if (a->command == SL_CLI_HELP) {
        a->help = true;
        if (npos > used && resolve_command(&p, pos + used, npos - used, true, &a->help_of, &used) != 0)
            return -1;
        a->command = a->help_of;
        return 0;
    }
    if (a->help)
        return 0;
    if (a->command == SL_CLI_NONE)
        return fail(&p, "no command given");

    /* Pass 2: the options in order (a limit group's options follow its --per). */
    options_end = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (options_end || arg[0] != '-' || arg[1] == '\0')
            continue;
        if (strcmp(arg, "--") == 0) {
            options_end = true;
            continue;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        const struct option *o = find_option(name, eq ? (size_t)(eq - name) : strlen(name));
        const char *value = NULL;
        if (o->value)
            value = eq ? eq + 1 : argv[++i];
        if (!(o->commands & CMD(a->command)))
            return fail(&p, "%s: unknown option --%s", command_name(a->command), o->name);
        if (o->apply(&p, value) != 0)
            return -1;
    }
    if (take_operands(&p, pos + used, npos - used) != 0)
        return -1;
    return check_limits(&p);
}

/* ---- requests ------------------------------------------------------------------------------------ */

void
sl_cli_build_hello(const char *key, sl_proto_message_t *out)
{
    sl_proto_message_init(out, SL_PROTO_MESSAGE_HELLO);
    out->hello.protocol = SL_PROTO_VERSION;
    out->hello.key = sl_xstrdup(key);
    out->hello.client = sl_xstrdup(SL_CLI_CLIENT_NAME);
}

void
sl_cli_build_put_config(uint32_t req, const char *yaml, uint64_t revision, sl_proto_message_t *out)
{
    sl_proto_message_init(out, SL_PROTO_MESSAGE_PUT_CONFIG);
    out->put_config.req = req;
    out->put_config.yaml = sl_xstrdup(yaml);
    out->put_config.expect_revision = revision;
}

void
sl_cli_build_subscribe(const sl_cli_args_t *a, uint32_t req, sl_proto_message_t *out)
{
    sl_proto_message_init(out, SL_PROTO_MESSAGE_SUBSCRIBE);
    out->subscribe.req = req;
    out->subscribe.topics = sl_xcalloc(2, sizeof(sl_proto_topic_t));
    out->subscribe.topics[out->subscribe.topics_len++] = SL_PROTO_TOPIC_EVENTS;
    if (a->topic_providers)
        out->subscribe.topics[out->subscribe.topics_len++] = SL_PROTO_TOPIC_PROVIDERS;
}

static sl_proto_limit_t *
copy_limits(const sl_cli_args_t *a)
{
    if (a->command != SL_CLI_LIMITS_SET || a->limits_len == 0)
        return NULL;
    sl_proto_limit_t *l = sl_xcalloc(a->limits_len, sizeof *l);
    memcpy(l, a->limits, a->limits_len * sizeof *l);
    return l;
}

static char *
dup_or_null(const char *s)
{
    return s != NULL ? sl_xstrdup(s) : NULL;
}

int
sl_cli_build_request(const sl_cli_args_t *a, uint32_t req, uint64_t now_ms, const char *yaml,
                     sl_proto_message_t *out)
{
    switch (a->command) {
    case SL_CLI_EVENTS:
        sl_cli_build_subscribe(a, req, out);
        return 0;
    case SL_CLI_PROVIDERS:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_GET_PROVIDERS);
        out->get_providers.req = req;
        return 0;
    case SL_CLI_IN_FLIGHT:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_GET_IN_FLIGHT);
        out->get_in_flight.req = req;
        return 0;
    case SL_CLI_HISTORY: {
        sl_proto_message_init(out, SL_PROTO_MESSAGE_HISTORY);
        sl_proto_history_msg_t *h = &out->history;
        h->req = req;
        h->since_ms = a->since_ms == 0 ? 0 : (a->since_ms < now_ms ? now_ms - a->since_ms : 0);
        h->limit = a->limit;
        h->filter.client = dup_or_null(a->client);
        h->filter.provider = dup_or_null(a->provider);
        h->filter.model = dup_or_null(a->model);
        h->filter.has_status = a->has_status;
        h->filter.status = a->status;
        h->cursor = dup_or_null(a->cursor);
        return 0;
    }
    case SL_CLI_LIMITS_SET:
    case SL_CLI_LIMITS_CLEAR:
        if (a->client != NULL) {
            sl_proto_message_init(out, SL_PROTO_MESSAGE_SET_KEY_LIMITS);
            out->set_key_limits.req = req;
            out->set_key_limits.client = sl_xstrdup(a->client);
            out->set_key_limits.limits = copy_limits(a);
            out->set_key_limits.limits_len = out->set_key_limits.limits ? a->limits_len : 0;
        } else {
            sl_proto_message_init(out, SL_PROTO_MESSAGE_SET_PROVIDER_LIMITS);
            out->set_provider_limits.req = req;
            out->set_provider_limits.provider = sl_xstrdup(a->provider);
            out->set_provider_limits.limits = copy_limits(a);
            out->set_provider_limits.limits_len = out->set_provider_limits.limits ? a->limits_len : 0;
        }
        return 0;
    case SL_CLI_PAUSE:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_PAUSE_PROVIDER);
        out->pause_provider.req = req;
        out->pause_provider.provider = sl_xstrdup(a->provider);
        out->pause_provider.until_ms = a->pause_ms == 0 ? 0 : now_ms + a->pause_ms;
        return 0;
    case SL_CLI_RESUME:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_RESUME_PROVIDER);
        out->resume_provider.req = req;
        out->resume_provider.provider = sl_xstrdup(a->provider);
        return 0;
    case SL_CLI_CANCEL:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_CANCEL_REQUEST);
        out->cancel_request.req = req;
        out->cancel_request.id = a->id;
        return 0;
    case SL_CLI_CONFIG_PUT:
        if (a->has_revision) {
            sl_cli_build_put_config(req, yaml != NULL ? yaml : "", a->revision, out);
            return 0;
        }
        /* Learn the revision first. */
        sl_proto_message_init(out, SL_PROTO_MESSAGE_GET_CONFIG);
        out->get_config.req = req;
        return 0;
    case SL_CLI_CONFIG_GET:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_GET_CONFIG);
        out->get_config.req = req;
        return 0;
    default:
        memset(out, 0, sizeof *out);
        return -1;
    }
}

/* ---- small texts --------------------------------------------------------------------------------- */

void
sl_cli_clock(uint64_t ms, char out[16])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (localtime_r(&t, &tm) == NULL) {
        snprintf(out, 16, "??:??:??.%03u", (unsigned)(ms % 1000));
        return;
    }
    snprintf(out, 16, "%02d:%02d:%02d.%03u", tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(ms % 1000));
}

/* YYYY-MM-DD HH:MM:SS in local time. */
static void
date_time(uint64_t ms, char out[32])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (localtime_r(&t, &tm) == NULL || strftime(out, 32, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(out, 32, "@%llu", (unsigned long long)ms);
}

void
sl_cli_duration_text(uint64_t ms, char out[32])
{
    if (ms < 1000)
        snprintf(out, 32, "%llums", (unsigned long long)ms);
    else
        snprintf(out, 32, "%llu.%03llus", (unsigned long long)(ms / 1000), (unsigned long long)(ms % 1000));
}

void
sl_cli_usd_text(uint64_t micros, char out[32])
{
    char frac[8];
    snprintf(frac, sizeof frac, "%06llu", (unsigned long long)(micros % 1000000));
    /* Cents always; smaller fractions only when there are any. */
    size_t keep = strlen(frac);
    while (keep > 2 && frac[keep - 1] == '0')
        keep--;
    frac[keep] = '\0';
    snprintf(out, 32, "$%llu.%s", (unsigned long long)(micros / 1000000), frac);
}

/* "minute", "5 min", "hour", "2 h", "day", "3 days". */
static void
span_text(sl_proto_period_t per, uint32_t every, char *out, size_t size)
{
    const char *slug = sl_proto_period_slug(per);
    if (slug == NULL)
        slug = "period";
    if (every <= 1)
        snprintf(out, size, "%s", slug);
    else if (per == SL_PROTO_PERIOD_MINUTE)
        snprintf(out, size, "%u min", (unsigned)every);
    else if (per == SL_PROTO_PERIOD_HOUR)
        snprintf(out, size, "%u h", (unsigned)every);
    else
        snprintf(out, size, "%u %ss", (unsigned)every, slug);
}

/* The limit, with used/ before its amount when used != NULL. */
static void
limit_text(const sl_proto_limit_t *l, const uint64_t *used, char *out, size_t size)
{
    char span[32];
    span_text(l->per, l->every, span, sizeof span);
    if (l->has_cost_micros) {
        char amount[32], spent[32];
        sl_cli_usd_text(l->cost_micros, amount);
        if (used != NULL) {
            sl_cli_usd_text(*used, spent);
            snprintf(out, size, "%s/%s per %s", spent, amount, span);
        } else {
            snprintf(out, size, "%s per %s", amount, span);
        }
        return;
    }
    const char *unit = l->has_tokens ? "tokens" : "requests";
    uint64_t amount = l->has_tokens ? l->tokens : l->requests;
    if (used != NULL)
        snprintf(out, size, "%llu/%llu %s per %s", (unsigned long long)*used, (unsigned long long)amount,
                 unit, span);
    else
        snprintf(out, size, "%llu %s per %s", (unsigned long long)amount, unit, span);
}

void
sl_cli_limit_text(const sl_proto_limit_t *limit, char *out, size_t size)
{
    limit_text(limit, NULL, out, size);
}

static void
limit_view_text(const sl_proto_limit_view_t *v, char *out, size_t size)
{
    sl_proto_limit_t l = {
        .per = v->per,
        .every = v->every,
        .has_requests = v->has_requests,
        .requests = v->requests,
        .has_tokens = v->has_tokens,
        .tokens = v->tokens,
        .has_cost_micros = v->has_cost_micros,
        .cost_micros = v->cost_micros,
    };
    limit_text(&l, &v->used, out, size);
}

/* ---- key=value lines ----------------------------------------------------------------------------- */

/* A value as is when it is one plain word, else in double quotes with \" \\ \n \t and \xHH escapes. */
static void
put_value(sl_strbuf_t *b, const char *v)
{
    bool plain = *v != '\0';
    for (const unsigned char *c = (const unsigned char *)v; *c && plain; c++)
        if (*c <= ' ' || *c == '"' || *c == '\\' || *c == 0x7f)
            plain = false;
    if (plain) {
        sl_strbuf_append(b, v, strlen(v));
        return;
    }
    sl_strbuf_append(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if (*c == '"' || *c == '\\')
            sl_strbuf_appendf(b, "\\%c", *c);
        else if (*c == '\n')
            sl_strbuf_append(b, "\\n", 2);
        else if (*c == '\t')
            sl_strbuf_append(b, "\\t", 2);
        else if (*c < ' ' || *c == 0x7f)
            sl_strbuf_appendf(b, "\\x%02x", *c);
        else
            sl_strbuf_append(b, (const char *)c, 1);
    }
    sl_strbuf_append(b, "\"", 1);
}

static void
kv(sl_strbuf_t *b, const char *key, const char *value)
{
    sl_strbuf_appendf(b, " %s=", key);
    put_value(b, value != NULL ? value : "");
}

static void
kv_u(sl_strbuf_t *b, const char *key, uint64_t value)
{
    sl_strbuf_appendf(b, " %s=%llu", key, (unsigned long long)value);
}

static void
kv_ms(sl_strbuf_t *b, const char *key, uint64_t ms)
{
    char text[32];
    sl_cli_duration_text(ms, text);
    sl_strbuf_appendf(b, " %s=%s", key, text);
}

static void
kv_clock(sl_strbuf_t *b, const char *key, uint64_t ms)
{
    char text[16];
    sl_cli_clock(ms, text);
    sl_strbuf_appendf(b, " %s=%s", key, text);
}

static void
kv_list(sl_strbuf_t *b, const char *key, char *const *items, size_t n)
{
    sl_strbuf_t joined = {0};
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            sl_strbuf_append(&joined, ",", 1);
        sl_strbuf_append(&joined, items[i], strlen(items[i]));
    }
    char *s = sl_strbuf_finish(&joined);
    kv(b, key, *s ? s : "-");
    free(s);
}

static void
kv_usage(sl_strbuf_t *b, const sl_proto_usage_t *u)
{
    sl_strbuf_appendf(b, " tokens=%s%llu/%llu", u->estimated ? "~" : "", (unsigned long long)u->input,
                      (unsigned long long)u->output);
    if (u->cache_read != 0 || u->cache_write != 0)
        sl_strbuf_appendf(b, " cache=%llu/%llu", (unsigned long long)u->cache_read,
                          (unsigned long long)u->cache_write);
}

static void
kv_limits(sl_strbuf_t *b, const char *key, const sl_proto_limit_t *limits, size_t n)
{
    sl_strbuf_appendf(b, " %s=[", key);
    for (size_t i = 0; i < n; i++) {
        char text[128];
        sl_cli_limit_text(&limits[i], text, sizeof text);
        sl_strbuf_appendf(b, "%s%s", i > 0 ? ", " : "", text);
    }
    sl_strbuf_append(b, "]", 1);
}

static void
throttle_fields(sl_strbuf_t *b, const sl_proto_throttle_t *t)
{
    kv(b, "kind", sl_proto_throttle_kind_slug(t->kind));
    if (t->has_until_ms)
        kv_clock(b, "until", t->until_ms);
    kv_u(b, "consecutive", t->consecutive);
    kv(b, "reason", t->reason.code);
}

static void
attempt_fields(sl_strbuf_t *b, const sl_proto_attempt_view_t *v)
{
    kv(b, "provider", v->provider);
    if (v->model != NULL)
        kv(b, "model", v->model);
    kv(b, "outcome", sl_proto_outcome_slug(v->outcome));
    if (v->has_status)
        kv_u(b, "status", v->status);
    if (v->error != NULL)
        kv(b, "code", v->error->code);
    if (v->has_skipped)
        kv(b, "skipped", sl_proto_serve_skip_slug(v->skipped));
    kv_ms(b, "took", v->ms);
    if (v->has_retry)
        kv_u(b, "retry", v->retry);
    if (v->has_backoff_ms)
        kv_ms(b, "backoff", v->backoff_ms);
    if (v->has_pause_ms)
        kv_ms(b, "queued", v->pause_ms);
}

static void
provider_view_fields(sl_strbuf_t *b, const sl_proto_provider_view_t *v)
{
    kv(b, "provider", v->name);
    kv(b, "health", v->disabled ? "disabled" : sl_proto_health_state_slug(v->health));
    if (v->throttle != NULL) {
        kv(b, "throttle", sl_proto_throttle_kind_slug(v->throttle->kind));
        if (v->throttle->has_until_ms)
            kv_clock(b, "until", v->throttle->until_ms);
    }
    if (v->has_max_concurrent)
        sl_strbuf_appendf(b, " in_flight=%u/%u", (unsigned)v->in_flight, (unsigned)v->max_concurrent);
    else
        kv_u(b, "in_flight", v->in_flight);
    kv_u(b, "queued", v->queued);
}

/* The id of a request event; false for the state events. */
static bool
event_id(const sl_proto_event_t *ev, uint64_t *id)
{
    switch (ev->kind) {
#define ID_OF(K, f)                                                                                          \
    case K:                                                                                                  \
        *id = ev->f.id;                                                                                      \
        return true;
        ID_OF(SL_PROTO_EVENT_REQUEST_STARTED, request_started)
        ID_OF(SL_PROTO_EVENT_REQUEST_ROUTED, request_routed)
        ID_OF(SL_PROTO_EVENT_ATTEMPT, attempt)
        ID_OF(SL_PROTO_EVENT_REQUEST_HEADERS, request_headers)
        ID_OF(SL_PROTO_EVENT_REQUEST_FIRST_TOKEN, request_first_token)
        ID_OF(SL_PROTO_EVENT_REQUEST_QUEUED, request_queued)
        ID_OF(SL_PROTO_EVENT_REQUEST_DEQUEUED, request_dequeued)
        ID_OF(SL_PROTO_EVENT_REQUEST_RETRYING, request_retrying)
        ID_OF(SL_PROTO_EVENT_REQUEST_FINISHED, request_finished)
        ID_OF(SL_PROTO_EVENT_REQUEST_FAILED, request_failed)
        ID_OF(SL_PROTO_EVENT_REQUEST_CANCELLED, request_cancelled)
        ID_OF(SL_PROTO_EVENT_SECRETS_FOUND, secrets_found)
        ID_OF(SL_PROTO_EVENT_CONTENT_MATCHED, content_matched)
#undef ID_OF
    default:
        return false;
    }
}

/* Every event starts with at_ms (the schema's common field), whatever its kind. */
static uint64_t
event_at(const sl_proto_event_t *ev)
{
    return ev->request_started.at_ms;
}

/* The event's salient fields, each " key=value"; with_id false leaves a request event's id out. */
static void
event_fields(const sl_proto_event_t *ev, bool with_id, sl_strbuf_t *b)
{
    uint64_t id;
    if (with_id && event_id(ev, &id))
        kv_u(b, "id", id);
    switch (ev->kind) {
    case SL_PROTO_EVENT_REQUEST_STARTED: {
        const sl_proto_request_started_t *e = &ev->request_started;
        kv(b, "client", e->client);
        if (e->key_masked != NULL)
            kv(b, "key", e->key_masked);
        kv(b, "dialect", sl_proto_dialect_slug(e->dialect));
        kv(b, "model", e->model);
        kv(b, "stream", e->stream ? "yes" : "no");
        kv(b, "path", e->path);
        if (e->session != NULL)
            kv(b, "session", e->session);
        break;
    }
    case SL_PROTO_EVENT_REQUEST_ROUTED: {
        const sl_proto_request_routed_t *e = &ev->request_routed;
        kv(b, "route", e->route);
        kv_list(b, "candidates", e->candidates, e->candidates_len);
        if (e->has_affinity)
            kv(b, "affinity", sl_proto_affinity_slug(e->affinity));
        break;
    }
    case SL_PROTO_EVENT_ATTEMPT:
        attempt_fields(b, &ev->attempt.view);
        break;
    case SL_PROTO_EVENT_REQUEST_HEADERS:
        kv_u(b, "status", ev->request_headers.status);
        kv_ms(b, "ttfb", ev->request_headers.ttfb_ms);
        break;
    case SL_PROTO_EVENT_REQUEST_FIRST_TOKEN:
        kv_ms(b, "ttft", ev->request_first_token.ttft_ms);
        break;
    case SL_PROTO_EVENT_REQUEST_QUEUED: {
        const sl_proto_request_queued_t *e = &ev->request_queued;
        kv_list(b, "upstreams", e->upstreams, e->upstreams_len);
        sl_strbuf_t gates = {0};
        for (size_t i = 0; i < e->gates_len; i++) {
            const sl_proto_gate_t *g = &e->gates[i];
            sl_strbuf_appendf(&gates, "%s%s:%s", i > 0 ? "," : "", g->upstream,
                              sl_proto_serve_skip_slug(g->skip));
            if (g->has_until_ms) {
                char clock[16];
                sl_cli_clock(g->until_ms, clock);
                sl_strbuf_appendf(&gates, "@%s", clock);
            }
        }
        char *s = sl_strbuf_finish(&gates);
        kv(b, "gates", *s ? s : "-");
        free(s);
        kv_clock(b, "until", e->until_ms);
        break;
    }
    case SL_PROTO_EVENT_REQUEST_DEQUEUED:
        if (ev->request_dequeued.upstream != NULL)
            kv(b, "upstream", ev->request_dequeued.upstream);
        break;
    case SL_PROTO_EVENT_REQUEST_RETRYING: {
        const sl_proto_request_retrying_t *e = &ev->request_retrying;
        kv_u(b, "attempt", e->attempt);
        kv_list(b, "upstreams", e->upstreams, e->upstreams_len);
        kv_clock(b, "retry_at", e->retry_at_ms);
        kv_clock(b, "until", e->until_ms);
        kv(b, "cause", sl_proto_retry_cause_slug(e->cause));
        kv(b, "last_error", e->last_error.code);
        break;
    }
    case SL_PROTO_EVENT_REQUEST_FINISHED: {
        const sl_proto_request_finished_t *e = &ev->request_finished;
        kv_u(b, "status", e->status);
        kv_ms(b, "duration", e->duration_ms);
        kv_u(b, "bytes", e->bytes);
        if (e->usage != NULL)
            kv_usage(b, e->usage);
        if (e->has_cost_micros) {
            char usd[32];
            sl_cli_usd_text(e->cost_micros, usd);
            kv(b, "cost", usd);
        }
        break;
    }
    case SL_PROTO_EVENT_REQUEST_FAILED: {
        const sl_proto_request_failed_t *e = &ev->request_failed;
        kv(b, "source", sl_proto_failure_source_slug(e->source));
        kv(b, "code", e->message.code);
        kv_ms(b, "duration", e->duration_ms);
        kv(b, "text", e->message.text);
        break;
    }
    case SL_PROTO_EVENT_REQUEST_CANCELLED:
        kv_ms(b, "duration", ev->request_cancelled.duration_ms);
        break;
    case SL_PROTO_EVENT_THROTTLE_CHANGED:
        kv(b, "provider", ev->throttle_changed.provider);
        if (ev->throttle_changed.throttle != NULL)
            throttle_fields(b, ev->throttle_changed.throttle);
        else
            sl_strbuf_append(b, " recovered", 10);
        break;
    case SL_PROTO_EVENT_HEALTH_CHANGED: {
        const sl_proto_health_changed_t *e = &ev->health_changed;
        kv(b, "provider", e->provider);
        kv(b, "state", sl_proto_health_state_slug(e->state));
        if (e->has_until_ms)
            kv_clock(b, "until", e->until_ms);
        if (e->reason != NULL)
            kv(b, "reason", e->reason->code);
        break;
    }
    case SL_PROTO_EVENT_LIMITS_CHANGED: {
        const sl_proto_limits_changed_t *e = &ev->limits_changed;
        kv(b, "target", sl_proto_limit_target_slug(e->target));
        kv(b, "name", e->name);
        kv_limits(b, "limits", e->limits, e->limits_len);
        break;
    }
    case SL_PROTO_EVENT_SECRETS_FOUND:
        kv_u(b, "count", ev->secrets_found.count);
        break;
    case SL_PROTO_EVENT_CONTENT_MATCHED:
        kv(b, "rule", ev->content_matched.rule);
        break;
    case SL_PROTO_EVENT_PROVIDER_CHANGED:
        provider_view_fields(b, &ev->provider_changed.view);
        break;
    case SL_PROTO_EVENT_ROWS_DROPPED:
        kv_u(b, "count", ev->rows_dropped.count);
        break;
    case SL_PROTO_EVENT_CONFIG_RELOADED:
        kv_u(b, "revision", ev->config_reloaded.revision);
        kv(b, "source", sl_proto_config_source_slug(ev->config_reloaded.source));
        break;
    case SL_PROTO_EVENT_CONFIG_REJECTED: {
        const sl_proto_config_rejected_t *e = &ev->config_rejected;
        kv(b, "source", sl_proto_config_source_slug(e->source));
        kv_u(b, "problems", e->problems_len);
        for (size_t i = 0; i < e->problems_len; i++)
            kv(b, "problem", e->problems[i].text);
        break;
    }
    }
}

void
sl_cli_event_line(const sl_proto_event_t *ev, sl_strbuf_t *out)
{
    char clock[16];
    const char *slug = sl_proto_event_kind_slug((int)ev->kind);
    sl_cli_clock(event_at(ev), clock);
    sl_strbuf_appendf(out, "%s %s", clock, slug != NULL ? slug : "?");
    event_fields(ev, true, out);
    sl_strbuf_append(out, "\n", 1);
}

/* ---- JSON: through the codec, so names and order are the schema's --------------------------------- */

static json_t *
object_json(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_STR: {
        json_t *s = json_stringn(o->via.str.ptr, o->via.str.size);
        return s != NULL ? s : json_string("\xef\xbf\xbd");
    }
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; i < o->via.array.size; i++)
            json_array_append_new(a, object_json(&o->via.array.ptr[i]));
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_STR)
                json_object_setn_new(m, kv->key.via.str.ptr, kv->key.via.str.size, object_json(&kv->val));
        }
        return m;
    }
    default: /* the wire has no floats, bins or exts (the codec refuses them) */
        return json_null();
    }
}

/* The value at path (map keys; "#0" takes an array's first item) inside o, or NULL. */
static const msgpack_object *
object_at(const msgpack_object *o, const char *const *path)
{
    for (; *path != NULL && o != NULL; path++) {
        if (strcmp(*path, "#0") == 0) {
            o = o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size > 0 ? &o->via.array.ptr[0] : NULL;
            continue;
        }
        const msgpack_object *found = NULL;
        if (o->type == MSGPACK_OBJECT_MAP)
            for (uint32_t i = 0; i < o->via.map.size && found == NULL; i++) {
                const msgpack_object *k = &o->via.map.ptr[i].key;
                if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(*path) &&
                    memcmp(k->via.str.ptr, *path, k->via.str.size) == 0)
                    found = &o->via.map.ptr[i].val;
            }
        o = found;
    }
    return o;
}

/* Encodes m with the codec and appends the JSON line of the value at path in it ("null" if none). */
static void
wire_json_line(const sl_proto_message_t *m, const char *const *path, sl_strbuf_t *out)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    json_t *j = NULL;
    if (sl_proto_encode(m, &sb) == 0) {
        msgpack_unpacked u;
        size_t off = 0;
        msgpack_unpacked_init(&u);
        if (msgpack_unpack_next(&u, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *o = object_at(&u.data, path);
            if (o != NULL)
                j = object_json(o);
        }
        msgpack_unpacked_destroy(&u);
    }
    msgpack_sbuffer_destroy(&sb);
    char *s = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) : NULL;
    sl_strbuf_appendf(out, "%s\n", s != NULL ? s : "null");
    free(s);
    json_decref(j);
}

/*
 * The wrappers below borrow the caller's value into a message on the stack
 * (a shallow copy, never freed here): the codec only reads it.
 */
void
sl_cli_event_json(const sl_proto_event_t *ev, sl_strbuf_t *out)
{
    static const char *const path[] = {"event", NULL};
    sl_proto_message_t m;
    memset(&m, 0, sizeof m);
    m.kind = SL_PROTO_MESSAGE_EVENT;
    m.event.event = *ev;
    wire_json_line(&m, path, out);
}

void
sl_cli_provider_json(const sl_proto_provider_view_t *view, sl_strbuf_t *out)
{
    static const char *const path[] = {"providers", "#0", NULL};
    sl_proto_message_t m;
    memset(&m, 0, sizeof m);
    m.kind = SL_PROTO_MESSAGE_OK;
    m.ok.has_providers = true;
    m.ok.providers = (sl_proto_provider_view_t *)view;
    m.ok.providers_len = 1;
    wire_json_line(&m, path, out);
}

void
sl_cli_history_json(const sl_proto_history_row_t *row, sl_strbuf_t *out)
{
    static const char *const path[] = {"rows", "#0", NULL};
    sl_proto_message_t m;
    memset(&m, 0, sizeof m);
    m.kind = SL_PROTO_MESSAGE_OK;
    m.ok.has_rows = true;
    m.ok.rows = (sl_proto_history_row_t *)row;
    m.ok.rows_len = 1;
    wire_json_line(&m, path, out);
}

void
sl_cli_in_flight_json(const sl_proto_in_flight_request_t *request, sl_strbuf_t *out)
{
    static const char *const path[] = {"in_flight", "requests", "#0", NULL};
    sl_proto_in_flight_t in_flight = {.requests = (sl_proto_in_flight_request_t *)request, .requests_len = 1};
    sl_proto_message_t m;
    memset(&m, 0, sizeof m);
    m.kind = SL_PROTO_MESSAGE_OK;
    m.ok.in_flight = &in_flight;
    wire_json_line(&m, path, out);
}

/* ---- tables -------------------------------------------------------------------------------------- */

/* Rows of owned cells, printed with the columns aligned ('l'eft or 'r'ight per column); the last is not
 * padded. */
typedef struct table {
    size_t ncols;
    const char *align;
    char **cells; /* row-major */
    size_t nrows, cap_rows;
} table_t;

static void
table_add(table_t *t, ...)
{
    va_list ap;
    if (t->nrows == t->cap_rows) {
        t->cap_rows = t->cap_rows ? t->cap_rows * 2 : 16;
        t->cells = sl_xrealloc(t->cells, t->cap_rows * t->ncols * sizeof(char *));
    }
    va_start(ap, t);
    for (size_t c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = va_arg(ap, char *);
    va_end(ap);
    t->nrows++;
}

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *
xprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = sl_xmalloc((size_t)(n > 0 ? n : 0) + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)(n > 0 ? n : 0) + 1, fmt, ap);
    va_end(ap);
    return s;
}

static void
table_finish(table_t *t, sl_strbuf_t *out)
{
    size_t width[16] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < t->ncols; c++) {
            size_t w = strlen(t->cells[r * t->ncols + c]);
            if (w > width[c])
                width[c] = w;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            bool last = c + 1 == t->ncols;
            if (c > 0)
                sl_strbuf_append(out, "  ", 2);
            if (t->align[c] == 'r')
                sl_strbuf_appendf(out, "%*s", (int)width[c], cell);
            else if (last)
                sl_strbuf_appendf(out, "%s", cell);
            else
                sl_strbuf_appendf(out, "%-*s", (int)width[c], cell);
            free(t->cells[r * t->ncols + c]);
        }
        sl_strbuf_append(out, "\n", 1);
    }
    free(t->cells);
    memset(t, 0, sizeof *t);
}

void
sl_cli_providers_table(const sl_proto_provider_view_t *views, size_t n, uint64_t now_ms, sl_strbuf_t *out)
{
    table_t t = {.ncols = 7, .align = "llllrrl"};
    table_add(&t, xprintf("NAME"), xprintf("PROTOCOL"), xprintf("HEALTH"), xprintf("THROTTLE"),
              xprintf("IN-FLIGHT"), xprintf("QUEUED"), xprintf("LIMITS"));
    for (size_t i = 0; i < n; i++) {
        const sl_proto_provider_view_t *v = &views[i];
        char *throttle;
        if (v->throttle == NULL) {
            throttle = xprintf("-");
        } else if (v->throttle->has_until_ms) {
            uint64_t left = v->throttle->until_ms > now_ms ? v->throttle->until_ms - now_ms : 0;
            throttle = xprintf("%s %llus", sl_proto_throttle_kind_slug(v->throttle->kind),
                               (unsigned long long)((left + 999) / 1000));
        } else {
            throttle = xprintf("%s", sl_proto_throttle_kind_slug(v->throttle->kind));
        }
        char *in_flight = v->has_max_concurrent
                              ? xprintf("%u/%u", (unsigned)v->in_flight, (unsigned)v->max_concurrent)
                              : xprintf("%u", (unsigned)v->in_flight);
        sl_strbuf_t limits = {0};
        for (size_t k = 0; k < v->limits_len; k++) {
            char text[160];
            limit_view_text(&v->limits[k], text, sizeof text);
            sl_strbuf_appendf(&limits, "%s%s", k > 0 ? ", " : "", text);
        }
        if (limits.len == 0)
            sl_strbuf_append(&limits, "-", 1);
        table_add(&t, xprintf("%s", v->name), xprintf("%s", sl_proto_dialect_slug(v->protocol)),
                  xprintf("%s", v->disabled ? "disabled" : sl_proto_health_state_slug(v->health)), throttle,
                  in_flight, xprintf("%u", (unsigned)v->queued), sl_strbuf_finish(&limits));
    }
    table_finish(&t, out);
}

void
sl_cli_history_table(const sl_proto_history_row_t *rows, size_t n, sl_strbuf_t *out)
{
    table_t t = {.ncols = 10, .align = "lrlllrrrrr"};
    table_add(&t, xprintf("TIME"), xprintf("ID"), xprintf("CLIENT"), xprintf("MODEL"), xprintf("PROVIDER"),
              xprintf("STATUS"), xprintf("DURATION"), xprintf("TTFT"), xprintf("TOKENS"), xprintf("COST"));
    for (size_t i = 0; i < n; i++) {
        const sl_proto_history_row_t *r = &rows[i];
        char when[32], duration[32], ttft[32] = "-", cost[32] = "-";
        date_time(r->at_ms, when);
        sl_cli_duration_text(r->duration_ms, duration);
        if (r->has_ttft_ms)
            sl_cli_duration_text(r->ttft_ms, ttft);
        if (r->has_cost_micros)
            sl_cli_usd_text(r->cost_micros, cost);
        char *tokens = r->usage != NULL ? xprintf("%s%llu/%llu", r->usage->estimated ? "~" : "",
                                                  (unsigned long long)r->usage->input,
                                                  (unsigned long long)r->usage->output)
                                        : xprintf("-");
        table_add(&t, xprintf("%s", when), xprintf("%llu", (unsigned long long)r->id),
                  xprintf("%s", r->client), xprintf("%s", r->model),
                  xprintf("%s", r->provider != NULL ? r->provider : "-"), xprintf("%u", (unsigned)r->status),
                  xprintf("%s", duration), xprintf("%s", ttft), tokens, xprintf("%s", cost));
    }
    table_finish(&t, out);
}

void
sl_cli_in_flight_lines(const sl_proto_in_flight_t *in_flight, sl_strbuf_t *out)
{
    for (size_t i = 0; i < in_flight->requests_len; i++) {
        const sl_proto_in_flight_request_t *r = &in_flight->requests[i];
        sl_strbuf_appendf(out, "id=%llu", (unsigned long long)r->id);
        if (r->events_len > 0 && r->events[0].kind == SL_PROTO_EVENT_REQUEST_STARTED) {
            const sl_proto_request_started_t *s = &r->events[0].request_started;
            kv(out, "client", s->client);
            kv(out, "model", s->model);
            kv_ms(out, "age", in_flight->now_ms > s->at_ms ? in_flight->now_ms - s->at_ms : 0);
        }
        if (r->events_len > 0) {
            const sl_proto_event_t *last = &r->events[r->events_len - 1];
            const char *slug = sl_proto_event_kind_slug((int)last->kind);
            kv_clock(out, "last", event_at(last));
            sl_strbuf_appendf(out, " %s", slug != NULL ? slug : "?");
            event_fields(last, false, out);
        }
        sl_strbuf_append(out, "\n", 1);
    }
}

/* ---- replies ------------------------------------------------------------------------------------- */

static void
msg_line(const char *prefix, const sl_proto_msg_t *m, sl_strbuf_t *out)
{
    sl_strbuf_appendf(out, "%s%s [%s]\n", prefix, m->text != NULL ? m->text : "",
                      m->code != NULL ? m->code : "?");
}

void
sl_cli_error_lines(const sl_proto_error_msg_t *e, sl_strbuf_t *out)
{
    msg_line("error: ", &e->message, out);
    for (size_t i = 0; i < e->problems_len; i++)
        msg_line("  ", &e->problems[i], out);
}

void
sl_cli_refused_line(const sl_proto_refused_msg_t *r, sl_strbuf_t *out)
{
    msg_line("refused: ", &r->message, out);
}

static void
limits_target(const sl_cli_args_t *a, sl_strbuf_t *out)
{
    if (a->client != NULL)
        sl_strbuf_appendf(out, "client %s", a->client);
    else
        sl_strbuf_appendf(out, "provider %s", a->provider);
}

void
sl_cli_ok_lines(const sl_cli_args_t *a, const sl_proto_ok_msg_t *ok, uint64_t now_ms, sl_strbuf_t *out,
                sl_strbuf_t *err)
{
    switch (a->command) {
    case SL_CLI_PROVIDERS:
        if (a->json) {
            for (size_t i = 0; i < ok->providers_len; i++)
                sl_cli_provider_json(&ok->providers[i], out);
        } else {
            sl_cli_providers_table(ok->providers, ok->providers_len, now_ms, out);
        }
        break;
    case SL_CLI_IN_FLIGHT:
        if (ok->in_flight == NULL || ok->in_flight->requests_len == 0) {
            sl_strbuf_appendf(err, "no requests in flight\n");
        } else if (a->json) {
            for (size_t i = 0; i < ok->in_flight->requests_len; i++)
                sl_cli_in_flight_json(&ok->in_flight->requests[i], out);
        } else {
            sl_cli_in_flight_lines(ok->in_flight, out);
        }
        break;
    case SL_CLI_HISTORY:
        if (a->json) {
            for (size_t i = 0; i < ok->rows_len; i++)
                sl_cli_history_json(&ok->rows[i], out);
        } else {
            sl_cli_history_table(ok->rows, ok->rows_len, out);
        }
        if (ok->next_cursor != NULL)
            sl_strbuf_appendf(err, "more rows: add --cursor %s\n", ok->next_cursor);
        break;
    case SL_CLI_LIMITS_SET:
        sl_strbuf_appendf(out, "limits of ");
        limits_target(a, out);
        sl_strbuf_appendf(out, " set:");
        for (size_t i = 0; i < a->limits_len; i++) {
            char text[128];
            sl_cli_limit_text(&a->limits[i], text, sizeof text);
            sl_strbuf_appendf(out, "%s %s", i > 0 ? "," : "", text);
        }
        sl_strbuf_append(out, "\n", 1);
        break;
    case SL_CLI_LIMITS_CLEAR:
        sl_strbuf_appendf(out, "limits of ");
        limits_target(a, out);
        sl_strbuf_appendf(out, " cleared\n");
        break;
    case SL_CLI_PAUSE:
        if (a->pause_ms == 0) {
            sl_strbuf_appendf(out, "paused %s until resumed\n", a->provider);
        } else {
            char clock[16];
            sl_cli_clock(now_ms + a->pause_ms, clock);
            sl_strbuf_appendf(out, "paused %s until %s\n", a->provider, clock);
        }
        break;
    case SL_CLI_RESUME:
        sl_strbuf_appendf(out, "resumed %s\n", a->provider);
        break;
    case SL_CLI_CANCEL:
        sl_strbuf_appendf(out, "cancelled request %llu\n", (unsigned long long)a->id);
        break;
    case SL_CLI_CONFIG_GET: {
        const char *text = a->repair ? ok->repair_yaml : ok->yaml;
        if (text != NULL) {
            size_t len = strlen(text);
            sl_strbuf_append(out, text, len);
            if (len > 0 && text[len - 1] != '\n')
                sl_strbuf_append(out, "\n", 1);
        } else if (a->repair) {
            sl_strbuf_appendf(err, "not in safe mode: there is no file to repair\n");
        }
        if (ok->has_revision)
            sl_strbuf_appendf(
                err, "revision %llu%s\n", (unsigned long long)ok->revision,
                ok->has_persisted && !ok->persisted ? " (not backed by a file: changes stay in memory)" : "");
        if (ok->problems_len > 0) {
            sl_strbuf_appendf(err, "safe mode: the configuration file was not applied:\n");
            for (size_t i = 0; i < ok->problems_len; i++)
                msg_line("  ", &ok->problems[i], err);
            if (ok->repair_yaml != NULL && !a->repair)
                sl_strbuf_appendf(err, "the file to repair: sluicectl config get --repair\n");
        }
        break;
    }
    case SL_CLI_CONFIG_PUT:
        sl_strbuf_appendf(out, "configuration applied\n");
        break;
    default:
        break;
    }
}

/* ---- the event stream ---------------------------------------------------------------------------- */

static sl_cli_stream_shown_t *
shown_find(sl_cli_stream_t *s, uint64_t id)
{
    for (size_t i = 0; i < s->shown_len; i++)
        if (s->shown[i].id == id)
            return &s->shown[i];
    return NULL;
}

static void
shown_remove(sl_cli_stream_t *s, uint64_t id)
{
    sl_cli_stream_shown_t *e = shown_find(s, id);
    if (e != NULL)
        *e = s->shown[--s->shown_len];
}

static void
shown_note(sl_cli_stream_t *s, const sl_proto_event_t *ev)
{
    uint64_t id;
    if (!event_id(ev, &id))
        return;
    if (ev->kind == SL_PROTO_EVENT_REQUEST_FINISHED || ev->kind == SL_PROTO_EVENT_REQUEST_FAILED ||
        ev->kind == SL_PROTO_EVENT_REQUEST_CANCELLED) {
        shown_remove(s, id);
        return;
    }
    sl_cli_stream_shown_t *e = shown_find(s, id);
    if (e == NULL) {
        if (s->shown_len == s->shown_cap) {
            s->shown_cap = s->shown_cap ? s->shown_cap * 2 : 16;
            s->shown = sl_xrealloc(s->shown, s->shown_cap * sizeof *s->shown);
        }
        e = &s->shown[s->shown_len++];
        e->id = id;
        e->events = 0;
    }
    e->events++;
}

static void
print_event(sl_cli_stream_t *s, const sl_proto_event_t *ev, sl_strbuf_t *out)
{
    if (sl_cli_stream_done(s))
        return;
    if (s->json)
        sl_cli_event_json(ev, out);
    else
        sl_cli_event_line(ev, out);
    s->printed++;
    shown_note(s, ev);
}

bool
sl_cli_stream_done(const sl_cli_stream_t *s)
{
    return s->max_events != 0 && s->printed >= s->max_events;
}

void
sl_cli_stream_snapshot(sl_cli_stream_t *s, const sl_proto_snapshot_msg_t *snap, sl_strbuf_t *out,
                       sl_strbuf_t *err)
{
    (void)err;
    /* Requests that ended while events were being dropped: their end is lost, forget them. */
    for (size_t i = 0; i < s->shown_len;) {
        bool live = false;
        for (size_t k = 0; k < snap->in_flight_len && !live; k++)
            live = snap->in_flight[k].id == s->shown[i].id;
        if (live)
            i++;
        else
            s->shown[i] = s->shown[--s->shown_len];
    }
    if (s->topic_providers)
        for (size_t i = 0; i < snap->providers_len; i++) {
            sl_proto_event_t ev;
            memset(&ev, 0, sizeof ev);
            ev.kind = SL_PROTO_EVENT_PROVIDER_CHANGED;
            ev.provider_changed.at_ms = snap->now_ms;
            ev.provider_changed.view = snap->providers[i]; /* borrowed, not freed */
            print_event(s, &ev, out);
        }
    for (size_t i = 0; i < snap->in_flight_len; i++) {
        const sl_proto_in_flight_request_t *r = &snap->in_flight[i];
        sl_cli_stream_shown_t *e = shown_find(s, r->id);
        size_t skip = e != NULL ? e->events : 0;
        for (size_t k = skip; k < r->events_len; k++)
            print_event(s, &r->events[k], out);
    }
    s->synced = true;
    s->has_seq = true;
    s->seq = snap->seq;
}

void
sl_cli_stream_event(sl_cli_stream_t *s, const sl_proto_event_msg_t *ev, sl_strbuf_t *out, sl_strbuf_t *err)
{
    if (!s->synced)
        return; /* before the first snapshot, or while resyncing: the next snapshot reflects it */
    if (s->has_seq && ev->seq == s->seq + 2)
        sl_strbuf_appendf(err, "sluicectl: event %llu is missing from the stream\n",
                          (unsigned long long)(s->seq + 1));
    else if (s->has_seq && ev->seq > s->seq + 2)
        sl_strbuf_appendf(err, "sluicectl: events %llu to %llu are missing from the stream\n",
                          (unsigned long long)(s->seq + 1), (unsigned long long)(ev->seq - 1));
    s->has_seq = true;
    s->seq = ev->seq;
    print_event(s, &ev->event, out);
}

void
sl_cli_stream_dropped(sl_cli_stream_t *s, uint64_t count, sl_strbuf_t *err)
{
    sl_strbuf_appendf(err, "sluicectl: the server dropped %llu events (this client fell behind); resyncing\n",
                      (unsigned long long)count);
    s->synced = false;
}

void
sl_cli_stream_free(sl_cli_stream_t *s)
{
    free(s->shown);
    memset(s, 0, sizeof *s);
}
