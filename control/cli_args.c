/*
 * The command line into sl_cli_args_t: the options as one table (name,
 * whether it takes a value, the commands it belongs to, what it sets), the
 * command words, and the two passes of sl_cli_parse (positionals and
 * --help first, so that the command is known, then the options in order,
 * a limit group's options after its --per), with a one-line reason for
 * every usage error.
 */
#include "cli_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
    {"json", false,
     CMD(SL_CLI_EVENTS) | CMD(SL_CLI_PROVIDERS) | CMD(SL_CLI_INSTANCES) | CMD(SL_CLI_IN_FLIGHT) |
         CMD(SL_CLI_HISTORY) | CMD(SL_CLI_METRICS),
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
    {"instances", NULL, SL_CLI_INSTANCES}, {"metrics", NULL, SL_CLI_METRICS},
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

/* The option of --NAME or --NAME=VALUE (name is what follows the dashes), or NULL; *eq: the '=' or NULL. */
static const struct option *
find_option(const char *name, const char **eq)
{
    size_t len = strcspn(name, "=");
    *eq = name[len] == '=' ? name + len : NULL;
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
            const char *name = arg + 2, *eq;
            const struct option *o = find_option(name, &eq);
            if (o == NULL)
                return fail(&p, "unknown option --%.*s", (int)strcspn(name, "="), name);
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
        const char *eq;
        const struct option *o = find_option(arg + 2, &eq);
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
