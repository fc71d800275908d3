/*
 * YAML -> sl_config_t. The walker visits the document once, with one table
 * of known fields per mapping, and records every problem it meets with the
 * path and line where it is; cross-field rules run after each section.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

#include "core/arena.h"
#include "core/dialect.h"
#include "core/mask.h"
#include "core/text.h"
#include "core/xalloc.h"

/* The base URL each dialect's official SDK uses; bedrock's depends on the region. */
static const char *const dialect_default_base_url[SL_DIALECT_COUNT] = {
    "https://api.anthropic.com", "https://api.openai.com/v1", "https://api.openai.com/v1",
    "https://generativelanguage.googleapis.com", NULL};

static const char *const per_slugs[] = {"minute", "hour", "day", "week", "month"};

/* ---- the walker ---------------------------------------------------------- */

typedef struct {
    yaml_document_t *doc;
    const sl_config_env_t *env;
    sl_config_t *cfg;
    sl_arena_t *arena;
    sl_msgs_t *errors, *warnings;
    char path[512];
    size_t path_len;
    char line_buf[16];
    yaml_node_t *routes_node; /* routes are resolved after providers */
    char routes_path[512];
    uint32_t *provider_lines, *client_lines;
} walker_t;

static const char *
line_str(walker_t *w, const yaml_node_t *node)
{
    snprintf(w->line_buf, sizeof(w->line_buf), "%zu", node != NULL ? node->start_mark.line + 1 : (size_t)0);
    return w->line_buf;
}

#define PROBLEM(list, w, node, code, ...)                                                                    \
    sl_msgs_push((list),                                                                                     \
                 sl_msg_make((code), "path", (w)->path, "line", line_str((w), (node)), __VA_ARGS__, NULL))
#define ERROR(w, node, code, ...) PROBLEM((w)->errors, w, node, code, __VA_ARGS__)
#define ERROR0(w, node, code)                                                                                \
    sl_msgs_push((w)->errors, sl_msg_make((code), "path", (w)->path, "line", line_str((w), (node)), NULL))

static size_t
push_key(walker_t *w, const char *key)
{
    size_t saved = w->path_len;
    int n =
        snprintf(w->path + w->path_len, sizeof(w->path) - w->path_len, "%s%s", w->path_len ? "." : "", key);
    if (n > 0)
        w->path_len = strlen(w->path);
    return saved;
}

static size_t
push_index(walker_t *w, size_t i)
{
    size_t saved = w->path_len;
    snprintf(w->path + w->path_len, sizeof(w->path) - w->path_len, "[%zu]", i);
    w->path_len = strlen(w->path);
    return saved;
}

static void
pop_to(walker_t *w, size_t saved)
{
    w->path_len = saved;
    w->path[saved] = '\0';
}

static yaml_node_t *
node_at(walker_t *w, int index)
{
    return yaml_document_get_node(w->doc, index);
}

static const char *
scalar(const yaml_node_t *node)
{
    return (const char *)node->data.scalar.value;
}

static bool
is_plain(const yaml_node_t *node)
{
    return node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static bool
is_null(const yaml_node_t *node)
{
    if (node->type != YAML_SCALAR_NODE || !is_plain(node))
        return false;
    const char *s = scalar(node);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcasecmp(s, "null") == 0;
}

static bool
expect_type(walker_t *w, yaml_node_t *node, yaml_node_type_t type, const char *expected)
{
    if (node->type == type && !(type == YAML_SCALAR_NODE && is_null(node)) &&
        !(type == YAML_SCALAR_NODE && strlen(scalar(node)) != node->data.scalar.length))
        return true;
    ERROR(w, node, SL_CODE_CONFIG_WRONG_TYPE, "expected", expected);
    return false;
}

static size_t
seq_len(const yaml_node_t *seq)
{
    return (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

/* ---- scalar conversions -------------------------------------------------- */

/* Parses a plain unsigned integer; returns 0 ok, -1 not an integer, -2 negative or too large. */
static int
parse_uint(const yaml_node_t *node, uint64_t *out)
{
    const char *s = scalar(node);
    if (!is_plain(node) || *s == '\0')
        return -1;
    bool negative = *s == '-';
    if (negative || *s == '+')
        s++;
    if (*s == '\0')
        return -1;
    uint64_t v = 0;
    bool overflow = false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (UINT64_MAX - 9) / 10)
            overflow = true;
        else
            v = v * 10 + (uint64_t)(*s - '0');
    }
    if (negative && v != 0)
        return -2;
    if (overflow)
        return -2;
    *out = v;
    return 0;
}

/* Parses a plain non-negative decimal with at most 6 fractional digits into millionths. */
static int
parse_micros(const yaml_node_t *node, int64_t *out)
{
    const char *s = scalar(node);
    if (!is_plain(node) || *s == '\0')
        return -1;
    if (*s == '-')
        return -2;
    return sl_decimal_millionths(s, INT64_MAX, out);
}

static bool
get_uint(walker_t *w, yaml_node_t *node, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!expect_type(w, node, YAML_SCALAR_NODE, "an integer"))
        return false;
    uint64_t v;
    int rc = parse_uint(node, &v);
    if (rc == -1) {
        ERROR(w, node, SL_CODE_CONFIG_WRONG_TYPE, "expected", "an integer");
        return false;
    }
    if (rc == -2 || v < min || v > max) {
        char lo[24], hi[24];
        snprintf(lo, sizeof(lo), "%" PRIu64, min);
        snprintf(hi, sizeof(hi), "%" PRIu64, max);
        ERROR(w, node, SL_CODE_CONFIG_OUT_OF_RANGE, "value", scalar(node), "min", lo, "max", hi);
        return false;
    }
    *out = v;
    return true;
}

static bool
get_micros(walker_t *w, yaml_node_t *node, int64_t *out)
{
    if (!expect_type(w, node, YAML_SCALAR_NODE, "a number"))
        return false;
    int rc = parse_micros(node, out);
    if (rc == -1) {
        ERROR(w, node, SL_CODE_CONFIG_WRONG_TYPE, "expected", "a number with at most 6 decimals");
        return false;
    }
    if (rc == -2) {
        ERROR(w, node, SL_CODE_CONFIG_OUT_OF_RANGE, "value", scalar(node), "min", "0", "max",
              "1000000000000");
        return false;
    }
    return true;
}

static bool
get_bool(walker_t *w, yaml_node_t *node, bool *out)
{
    if (!expect_type(w, node, YAML_SCALAR_NODE, "true or false"))
        return false;
    if (is_plain(node) && strcasecmp(scalar(node), "true") == 0) {
        *out = true;
        return true;
    }
    if (is_plain(node) && strcasecmp(scalar(node), "false") == 0) {
        *out = false;
        return true;
    }
    ERROR(w, node, SL_CODE_CONFIG_WRONG_TYPE, "expected", "true or false");
    return false;
}

static char *
get_string(walker_t *w, yaml_node_t *node)
{
    if (!expect_type(w, node, YAML_SCALAR_NODE, "a string"))
        return NULL;
    return sl_arena_strndup(w->arena, scalar(node), node->data.scalar.length);
}

/* Expands ${VAR} references (keys, headers, passwords); NULL after reporting a problem. */
static char *
expand_vars(walker_t *w, yaml_node_t *node, const char *in)
{
    sl_strbuf_t out = {0};
    bool ok = true;
    for (const char *p = in; *p;) {
        if (p[0] != '$' || p[1] != '{') {
            sl_strbuf_append(&out, p, 1);
            p++;
            continue;
        }
        const char *name = p + 2, *end = name;
        if ((*end >= 'A' && *end <= 'Z') || (*end >= 'a' && *end <= 'z') || *end == '_') {
            while ((*end >= 'A' && *end <= 'Z') || (*end >= 'a' && *end <= 'z') ||
                   (*end >= '0' && *end <= '9') || *end == '_')
                end++;
        }
        if (end == name || *end != '}') {
            ERROR0(w, node, SL_CODE_CONFIG_BAD_VARIABLE);
            ok = false;
            break;
        }
        char var[256];
        snprintf(var, sizeof(var), "%.*s", (int)(end - name), name);
        const char *value = w->env->getenv(w->env->ctx, var);
        if (value == NULL) {
            ERROR(w, node, SL_CODE_CONFIG_UNSET_VARIABLE, "variable", var);
            ok = false;
        } else {
            sl_strbuf_append(&out, value, strlen(value));
        }
        p = end + 1;
    }
    char *s = sl_strbuf_finish(&out);
    char *result = ok ? sl_arena_strdup(w->arena, s) : NULL;
    free(s);
    return result;
}

static char *
get_secret(walker_t *w, yaml_node_t *node)
{
    char *raw = get_string(w, node);
    return raw != NULL ? expand_vars(w, node, raw) : NULL;
}

static bool
valid_name(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
              *s == '_' || *s == '-'))
            return false;
    }
    return true;
}

static char *
get_name(walker_t *w, yaml_node_t *node)
{
    char *s = get_string(w, node);
    if (s != NULL && !valid_name(s)) {
        ERROR(w, node, SL_CODE_CONFIG_BAD_NAME, "value", s);
        return NULL;
    }
    return s;
}

/* Index of value in slugs, or -1 after reporting the allowed values. */
static int
get_enum(walker_t *w, yaml_node_t *node, const char *const *slugs, size_t n)
{
    if (!expect_type(w, node, YAML_SCALAR_NODE, "a string"))
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(scalar(node), slugs[i]) == 0)
            return (int)i;
    }
    sl_strbuf_t allowed = {0};
    for (size_t i = 0; i < n; i++)
        sl_strbuf_appendf(&allowed, "%s%s", i ? ", " : "", slugs[i]);
    char *list = sl_strbuf_finish(&allowed);
    ERROR(w, node, SL_CODE_CONFIG_UNKNOWN_VALUE, "value", scalar(node), "allowed", list);
    free(list);
    return -1;
}

static bool
valid_base_url(const char *s)
{
    sl_base_url_t url;
    return sl_base_url_parse(s, &url) == 0;
}

/* RFC 9110 token characters, for header names. */
static bool
valid_header_name(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("!#$%&'*+-.^_`|~", *s) != NULL))
            return false;
    }
    return true;
}

static bool
valid_header_value(const char *s)
{
    for (; *s; s++) {
        if (*s == '\r' || *s == '\n')
            return false;
    }
    return true;
}

/* ---- table-driven mappings ----------------------------------------------- */

typedef enum { F_STRING, F_SECRET, F_NAME, F_UINT, F_BOOL, F_CUSTOM } field_kind_t;

typedef void (*field_fn)(walker_t *w, yaml_node_t *value, void *target);

typedef struct {
    const char *name;
    field_kind_t kind;
    size_t offset; /* into the target struct */
    size_t size;   /* of an F_UINT field: 2, 4 or 8 */
    uint64_t min, max;
    bool required;
    field_fn custom;
} field_t;

#define MAX_FIELDS 24

static size_t
edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 31 || lb > 31)
        return 99;
    size_t d[32][32];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    }
    return d[la][lb];
}

static void
report_unknown_field(walker_t *w, yaml_node_t *key, const field_t *fields, size_t n)
{
    const char *best = NULL;
    size_t best_d = 3;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(scalar(key), fields[i].name);
        if (d < best_d) {
            best_d = d;
            best = fields[i].name;
        }
    }
    char hint[64] = "";
    if (best != NULL)
        snprintf(hint, sizeof(hint), "; did you mean '%s'?", best);
    ERROR(w, key, SL_CODE_CONFIG_UNKNOWN_FIELD, "field", scalar(key), "hint", hint);
}

static void
set_field(walker_t *w, const field_t *f, yaml_node_t *value, void *target)
{
    char *base = target;
    switch (f->kind) {
    case F_STRING:
    case F_SECRET:
    case F_NAME: {
        char *s = f->kind == F_STRING   ? get_string(w, value)
                  : f->kind == F_SECRET ? get_secret(w, value)
                                        : get_name(w, value);
        if (s != NULL)
            *(char **)(base + f->offset) = s;
        break;
    }
    case F_UINT: {
        uint64_t v;
        if (!get_uint(w, value, f->min, f->max, &v))
            break;
        if (f->size == 2)
            *(uint16_t *)(base + f->offset) = (uint16_t)v;
        else if (f->size == 4)
            *(uint32_t *)(base + f->offset) = (uint32_t)v;
        else
            *(uint64_t *)(base + f->offset) = v;
        break;
    }
    case F_BOOL:
        get_bool(w, value, (bool *)(base + f->offset));
        break;
    case F_CUSTOM:
        f->custom(w, value, target);
        break;
    }
}

/*
 * Walks a mapping against a field table: unknown and duplicate keys are
 * reported, known ones set, missing required ones reported. seen[i] gets the
 * value node of fields[i] (NULL when absent). Returns false when node is not a
 * mapping (after reporting it).
 */
static bool
walk_fields(walker_t *w, yaml_node_t *node, const field_t *fields, size_t n, void *target, yaml_node_t **seen)
{
    yaml_node_t *local_seen[MAX_FIELDS];
    if (seen == NULL)
        seen = local_seen;
    for (size_t i = 0; i < n; i++)
        seen[i] = NULL;
    if (!expect_type(w, node, YAML_MAPPING_NODE, "a mapping"))
        return false;
    yaml_node_t *seen_keys[MAX_FIELDS] = {0};
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *key = node_at(w, pair->key), *value = node_at(w, pair->value);
        if (key->type != YAML_SCALAR_NODE) {
            ERROR(w, key, SL_CODE_CONFIG_WRONG_TYPE, "expected", "a plain field name");
            continue;
        }
        size_t i = 0;
        while (i < n && strcmp(fields[i].name, scalar(key)) != 0)
            i++;
        size_t saved = push_key(w, scalar(key));
        if (i == n) {
            report_unknown_field(w, key, fields, n);
        } else if (seen_keys[i] != NULL) {
            char first[16];
            snprintf(first, sizeof(first), "%zu", seen_keys[i]->start_mark.line + 1);
            ERROR(w, key, SL_CODE_CONFIG_DUPLICATE_KEY, "field", scalar(key), "first_line", first);
        } else {
            seen_keys[i] = key;
            seen[i] = value;
            set_field(w, &fields[i], value, target);
        }
        pop_to(w, saved);
    }
    for (size_t i = 0; i < n; i++) {
        if (fields[i].required && seen[i] == NULL)
            ERROR(w, node, SL_CODE_CONFIG_MISSING_FIELD, "field", fields[i].name);
    }
    return true;
}

#define NFIELDS(t) (sizeof(t) / sizeof((t)[0]))
#define U(type, member, lo, hi)                                                                              \
    .kind = F_UINT, .offset = offsetof(type, member), .size = sizeof(((type *)0)->member), .min = (lo),      \
    .max = (hi)

/* Walks a sequence, calling item(w, node, index, ctx) with the path at [index]. */
static bool
walk_seq(walker_t *w, yaml_node_t *node, void (*item)(walker_t *, yaml_node_t *, size_t, void *), void *ctx)
{
    if (!expect_type(w, node, YAML_SEQUENCE_NODE, "a list"))
        return false;
    size_t i = 0;
    for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top;
         it++, i++) {
        size_t saved = push_index(w, i);
        item(w, node_at(w, *it), i, ctx);
        pop_to(w, saved);
    }
    return true;
}

/* ---- limits -------------------------------------------------------------- */

typedef struct {
    sl_limit_t limit;
    uint64_t requests, tokens;
    int64_t cost;
} limit_draft_t;

static void
set_limit_per(walker_t *w, yaml_node_t *value, void *target)
{
    int i = get_enum(w, value, per_slugs, NFIELDS(per_slugs));
    if (i >= 0)
        ((limit_draft_t *)target)->limit.per = (sl_limit_per_t)i;
}

static void
set_limit_cost(walker_t *w, yaml_node_t *value, void *target)
{
    get_micros(w, value, &((limit_draft_t *)target)->cost);
}

static const field_t limit_fields[] = {
    {"per", F_CUSTOM, .required = true, .custom = set_limit_per},
    {"every", U(limit_draft_t, limit.every, 1, 1440)},
    {"requests", U(limit_draft_t, requests, 1, 1000000000000ULL)},
    {"tokens", U(limit_draft_t, tokens, 1, 1000000000000000ULL)},
    {"cost", F_CUSTOM, .custom = set_limit_cost},
};

typedef struct {
    sl_limit_t *limits;
    size_t *n;
} limits_ctx_t;

static void
walk_limit(walker_t *w, yaml_node_t *node, size_t index, void *ctx)
{
    (void)index;
    limits_ctx_t *lc = ctx;
    limit_draft_t d = {.limit = {.every = 1}};
    yaml_node_t *seen[NFIELDS(limit_fields)];
    size_t errors_before = w->errors->len;
    if (!walk_fields(w, node, limit_fields, NFIELDS(limit_fields), &d, seen) ||
        w->errors->len != errors_before)
        return;
    int measures = (seen[2] != NULL) + (seen[3] != NULL) + (seen[4] != NULL);
    if (measures != 1) {
        ERROR0(w, node, SL_CODE_CONFIG_LIMIT_MEASURE);
        return;
    }
    if (seen[1] != NULL && d.limit.per != SL_PER_MINUTE && d.limit.per != SL_PER_HOUR) {
        ERROR0(w, seen[1], SL_CODE_CONFIG_LIMIT_EVERY);
        return;
    }
    if (seen[2] != NULL) {
        d.limit.measure = SL_MEASURE_REQUESTS;
        d.limit.amount = (int64_t)d.requests;
    } else if (seen[3] != NULL) {
        d.limit.measure = SL_MEASURE_TOKENS;
        d.limit.amount = (int64_t)d.tokens;
    } else {
        d.limit.measure = SL_MEASURE_COST;
        d.limit.amount = d.cost;
        if (d.cost <= 0) {
            ERROR(w, seen[4], SL_CODE_CONFIG_OUT_OF_RANGE, "value", scalar(seen[4]), "min", "0.000001", "max",
                  "1000000");
            return;
        }
    }
    lc->limits[(*lc->n)++] = d.limit;
}

static void
walk_limits(walker_t *w, yaml_node_t *node, sl_limit_t **limits, size_t *n)
{
    if (node->type != YAML_SEQUENCE_NODE) {
        expect_type(w, node, YAML_SEQUENCE_NODE, "a list");
        return;
    }
    *limits = sl_arena_alloc(w->arena, seq_len(node) * sizeof(sl_limit_t));
    *n = 0;
    limits_ctx_t ctx = {*limits, n};
    walk_seq(w, node, walk_limit, &ctx);
}

/* ---- listen -------------------------------------------------------------- */

typedef struct {
    char *cert, *key;
} tls_draft_t;

static const field_t tls_fields[] = {
    {"cert", .kind = F_STRING, .offset = offsetof(tls_draft_t, cert)},
    {"key", .kind = F_STRING, .offset = offsetof(tls_draft_t, key)},
};

static void
set_listen_tls(walker_t *w, yaml_node_t *value, void *target)
{
    sl_listen_t *l = target;
    tls_draft_t d = {0};
    yaml_node_t *seen[NFIELDS(tls_fields)];
    if (!walk_fields(w, value, tls_fields, NFIELDS(tls_fields), &d, seen))
        return;
    if (seen[0] == NULL || seen[1] == NULL) {
        ERROR0(w, value, SL_CODE_CONFIG_TLS_INCOMPLETE);
        return;
    }
    bool ok = d.cert != NULL && d.key != NULL;
    for (size_t i = 0; i < 2; i++) {
        char *file = i == 0 ? d.cert : d.key;
        if (file != NULL && !w->env->file_readable(w->env->ctx, file)) {
            size_t saved = push_key(w, tls_fields[i].name);
            ERROR(w, seen[i], SL_CODE_CONFIG_FILE_MISSING, "value", file);
            pop_to(w, saved);
            ok = false;
        }
    }
    if (ok) {
        l->tls_cert = d.cert;
        l->tls_key = d.key;
    }
}

static void
set_listen_bind(walker_t *w, yaml_node_t *value, void *target)
{
    char *s = get_string(w, value);
    int family;
    uint8_t addr[16];
    if (s == NULL)
        return;
    if (!sl_ip_parse(s, &family, addr)) {
        ERROR(w, value, SL_CODE_CONFIG_BAD_ADDRESS, "value", s);
        return;
    }
    ((sl_listen_t *)target)->bind = s;
}

static void
walk_cidr(walker_t *w, yaml_node_t *node, size_t index, void *ctx)
{
    sl_listen_t *l = ctx;
    char *s = get_string(w, node);
    if (s == NULL)
        return;
    if (!sl_cidr_parse(s, &l->allow_from[l->n_allow_from])) {
        ERROR(w, node, SL_CODE_CONFIG_BAD_CIDR, "value", s);
        return;
    }
    (void)index;
    l->n_allow_from++;
}

static void
set_listen_allow_from(walker_t *w, yaml_node_t *value, void *target)
{
    sl_listen_t *l = target;
    if (value->type == YAML_SEQUENCE_NODE) {
        l->allow_from = sl_arena_alloc(w->arena, seq_len(value) * sizeof(sl_cidr_t));
        l->n_allow_from = 0;
    }
    walk_seq(w, value, walk_cidr, l);
}

static const field_t gateway_listen_fields[] = {
    {"bind", F_CUSTOM, .custom = set_listen_bind},
    {"port", U(sl_listen_t, port, 0, 65535)},
    {"tls", F_CUSTOM, .custom = set_listen_tls},
    {"allow_from", F_CUSTOM, .custom = set_listen_allow_from},
};

static const char *const metrics_access_slugs[] = {"keyed", "open"};

static void
set_listen_metrics(walker_t *w, yaml_node_t *value, void *target)
{
    int i = get_enum(w, value, metrics_access_slugs, NFIELDS(metrics_access_slugs));
    if (i >= 0)
        ((sl_listen_t *)target)->metrics_open = i == 1;
}

static const field_t control_listen_fields[] = {
    {"bind", F_CUSTOM, .custom = set_listen_bind},
    {"port", U(sl_listen_t, port, 0, 65535)},
    {"tls", F_CUSTOM, .custom = set_listen_tls},
    {"allow_from", F_CUSTOM, .custom = set_listen_allow_from},
    {"key", .kind = F_SECRET, .offset = offsetof(sl_listen_t, key)},
    {"metrics", F_CUSTOM, .custom = set_listen_metrics},
};

static void
set_listen_gateway(walker_t *w, yaml_node_t *value, void *target)
{
    walk_fields(w, value, gateway_listen_fields, NFIELDS(gateway_listen_fields),
                &((sl_config_t *)target)->gateway, NULL);
}

static void
set_listen_control(walker_t *w, yaml_node_t *value, void *target)
{
    sl_listen_t *l = &((sl_config_t *)target)->control;
    yaml_node_t *seen[NFIELDS(control_listen_fields)];
    if (!walk_fields(w, value, control_listen_fields, NFIELDS(control_listen_fields), l, seen))
        return;
    /* A control endpoint reachable from the network must not take keys in clear text. */
    if (l->tls_cert == NULL && seen[2] == NULL && !sl_ip_is_loopback(l->bind)) {
        size_t saved = push_key(w, "bind");
        ERROR(w, seen[0] != NULL ? seen[0] : value, SL_CODE_CONFIG_CONTROL_REMOTE_WITHOUT_TLS, "value",
              l->bind);
        pop_to(w, saved);
    }
}

static const field_t listen_fields[] = {
    {"gateway", F_CUSTOM, .custom = set_listen_gateway},
    {"control", F_CUSTOM, .custom = set_listen_control},
};

static void
set_listen(walker_t *w, yaml_node_t *value, void *target)
{
    walk_fields(w, value, listen_fields, NFIELDS(listen_fields), target, NULL);
}

/* ---- clients ------------------------------------------------------------- */

static void
set_client_limits(walker_t *w, yaml_node_t *value, void *target)
{
    sl_client_t *c = target;
    walk_limits(w, value, &c->limits, &c->n_limits);
}

static const field_t client_fields[] = {
    {"name", .kind = F_NAME, .offset = offsetof(sl_client_t, name), .required = true},
    {"key", .kind = F_SECRET, .offset = offsetof(sl_client_t, key), .required = true},
    {"limits", F_CUSTOM, .custom = set_client_limits},
};

static void
walk_client(walker_t *w, yaml_node_t *node, size_t index, void *ctx)
{
    (void)ctx;
    sl_config_t *cfg = w->cfg;
    sl_client_t c = {0};
    yaml_node_t *seen[NFIELDS(client_fields)];
    if (!walk_fields(w, node, client_fields, NFIELDS(client_fields), &c, seen) || c.name == NULL ||
        c.key == NULL)
        return;
    for (size_t i = 0; i < cfg->n_clients; i++) {
        char first[16];
        snprintf(first, sizeof(first), "%" PRIu32, w->client_lines[i]);
        if (strcmp(cfg->clients[i].name, c.name) == 0) {
            size_t saved = push_key(w, "name");
            ERROR(w, seen[0], SL_CODE_CONFIG_DUPLICATE_NAME, "name", c.name, "first_line", first);
            pop_to(w, saved);
            return;
        }
        /* The key is what identifies a client: two clients with one key would be ambiguous. */
        if (strcmp(cfg->clients[i].key, c.key) == 0) {
            size_t saved = push_key(w, "key");
            ERROR(w, seen[1], SL_CODE_CONFIG_DUPLICATE_CLIENT_KEY, "name", c.name, "other",
                  cfg->clients[i].name);
            pop_to(w, saved);
            return;
        }
    }
    (void)index;
    w->client_lines[cfg->n_clients] = (uint32_t)node->start_mark.line + 1;
    cfg->clients[cfg->n_clients++] = c;
}

static void
set_clients(walker_t *w, yaml_node_t *value, void *target)
{
    sl_config_t *cfg = target;
    if (value->type == YAML_SEQUENCE_NODE) {
        cfg->clients = sl_arena_alloc(w->arena, seq_len(value) * sizeof(sl_client_t));
        w->client_lines = sl_arena_alloc(w->arena, seq_len(value) * sizeof(uint32_t));
    }
    walk_seq(w, value, walk_client, NULL);
}

/* ---- providers ----------------------------------------------------------- */

static void
set_provider_protocol(walker_t *w, yaml_node_t *value, void *target)
{
    const char *slugs[SL_DIALECT_COUNT];
    for (int d = 0; d < SL_DIALECT_COUNT; d++)
        slugs[d] = sl_dialect_slug((sl_dialect_t)d);
    int i = get_enum(w, value, slugs, SL_DIALECT_COUNT);
    if (i >= 0)
        ((sl_provider_t *)target)->protocol = (sl_dialect_t)i;
}

/* An http:// or https:// URL with a host (sl_base_url_parse), or NULL after the error. */
static char *
get_base_url(walker_t *w, yaml_node_t *value)
{
    char *s = get_string(w, value);
    if (s != NULL && !valid_base_url(s)) {
        ERROR(w, value, SL_CODE_CONFIG_BAD_URL, "value", s);
        return NULL;
    }
    return s;
}

static void
set_provider_base_url(walker_t *w, yaml_node_t *value, void *target)
{
    char *s = get_base_url(w, value);
    if (s == NULL)
        return;
    /* sluice appends the dialect's path, so a trailing slash would double it. */
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
    ((sl_provider_t *)target)->base_url = s;
}

static void
walk_model(walker_t *w, yaml_node_t *node, size_t index, void *ctx)
{
    sl_provider_t *p = ctx;
    char *s = get_string(w, node);
    (void)index;
    if (s != NULL)
        p->models[p->n_models++] = s;
}

static void
set_provider_models(walker_t *w, yaml_node_t *value, void *target)
{
    sl_provider_t *p = target;
    if (value->type == YAML_SEQUENCE_NODE) {
        p->models = sl_arena_alloc(w->arena, seq_len(value) * sizeof(char *));
        p->n_models = 0;
    }
    walk_seq(w, value, walk_model, p);
}

/* Walks a mapping of string -> string into pairs; values optionally ${VAR}-expanded. */
static void
walk_pairs(walker_t *w, yaml_node_t *node, bool headers, sl_pair_t **out, size_t *n)
{
    if (!expect_type(w, node, YAML_MAPPING_NODE, "a mapping"))
        return;
    size_t cap = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
    *out = sl_arena_alloc(w->arena, cap * sizeof(sl_pair_t));
    *n = 0;
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *key = node_at(w, pair->key), *value = node_at(w, pair->value);
        if (!expect_type(w, key, YAML_SCALAR_NODE, "a string key"))
            continue;
        size_t saved = push_key(w, scalar(key));
        char *v = headers ? get_secret(w, value) : get_string(w, value);
        const yaml_node_t *first = NULL;
        for (yaml_node_pair_t *prev = node->data.mapping.pairs.start; prev < pair && first == NULL; prev++) {
            const yaml_node_t *k = node_at(w, prev->key);
            if (k->type == YAML_SCALAR_NODE &&
                (headers ? strcasecmp(scalar(k), scalar(key)) : strcmp(scalar(k), scalar(key))) == 0)
                first = k;
        }
        if (first != NULL) {
            char first_line[16];
            snprintf(first_line, sizeof(first_line), "%zu", first->start_mark.line + 1);
            ERROR(w, key, SL_CODE_CONFIG_DUPLICATE_KEY, "field", scalar(key), "first_line", first_line);
        } else if (headers && !valid_header_name(scalar(key))) {
            ERROR(w, key, SL_CODE_CONFIG_BAD_HEADER, "value", scalar(key), "part", "name");
        } else if (headers && v != NULL && !valid_header_value(v)) {
            ERROR(w, value, SL_CODE_CONFIG_BAD_HEADER, "value", scalar(value), "part", "value");
        } else if (v != NULL) {
            (*out)[*n].name = sl_arena_strdup(w->arena, scalar(key));
            (*out)[*n].value = v;
            (*n)++;
        }
        pop_to(w, saved);
    }
}

static void
set_provider_model_map(walker_t *w, yaml_node_t *value, void *target)
{
    sl_provider_t *p = target;
    walk_pairs(w, value, false, &p->model_map, &p->n_model_map);
}

static void
set_provider_headers(walker_t *w, yaml_node_t *value, void *target)
{
    sl_provider_t *p = target;
    walk_pairs(w, value, true, &p->headers, &p->n_headers);
}

static void
set_provider_limits(walker_t *w, yaml_node_t *value, void *target)
{
    sl_provider_t *p = target;
    walk_limits(w, value, &p->limits, &p->n_limits);
}

static const field_t aws_fields[] = {
    {"access_key_id", .kind = F_SECRET, .offset = offsetof(sl_provider_t, aws_access_key_id),
     .required = true},
    {"secret_access_key", .kind = F_SECRET, .offset = offsetof(sl_provider_t, aws_secret_access_key),
     .required = true},
    {"session_token", .kind = F_SECRET, .offset = offsetof(sl_provider_t, aws_session_token)},
};

static void
set_provider_aws(walker_t *w, yaml_node_t *value, void *target)
{
    walk_fields(w, value, aws_fields, NFIELDS(aws_fields), target, NULL);
}

enum { PROVIDER_NAME, PROVIDER_PROTOCOL, PROVIDER_BASE_URL, PROVIDER_KEY, PROVIDER_REGION, PROVIDER_AWS };

static const field_t provider_fields[] = {
    [PROVIDER_NAME] = {"name", .kind = F_NAME, .offset = offsetof(sl_provider_t, name), .required = true},
    [PROVIDER_PROTOCOL] = {"protocol", F_CUSTOM, .required = true, .custom = set_provider_protocol},
    [PROVIDER_BASE_URL] = {"base_url", F_CUSTOM, .custom = set_provider_base_url},
    [PROVIDER_KEY] = {"key", .kind = F_SECRET, .offset = offsetof(sl_provider_t, key)},
    [PROVIDER_REGION] = {"region", .kind = F_NAME, .offset = offsetof(sl_provider_t, region)},
    [PROVIDER_AWS] = {"aws", F_CUSTOM, .custom = set_provider_aws},
    {"models", F_CUSTOM, .custom = set_provider_models},
    {"model_map", F_CUSTOM, .custom = set_provider_model_map},
    {"headers", F_CUSTOM, .custom = set_provider_headers},
    {"max_concurrent", U(sl_provider_t, max_concurrent, 1, 1000000)},
    {"limits", F_CUSTOM, .custom = set_provider_limits},
    {"disabled", .kind = F_BOOL, .offset = offsetof(sl_provider_t, disabled)},
};

static char *const match_everything[] = {"*"};

/*
 * Bedrock with neither key nor aws signs with the standard AWS_* variables
 * (config.md): read here, once per load, so that no hop reads the
 * environment. Without an access key id and a secret it has none.
 */
static void
aws_from_env(walker_t *w, sl_provider_t *p)
{
    const char *id = w->env->getenv(w->env->ctx, "AWS_ACCESS_KEY_ID");
    const char *secret = w->env->getenv(w->env->ctx, "AWS_SECRET_ACCESS_KEY");
    const char *token = w->env->getenv(w->env->ctx, "AWS_SESSION_TOKEN");
    if (id == NULL || *id == '\0' || secret == NULL || *secret == '\0')
        return;
    p->aws_access_key_id = sl_arena_strdup(w->arena, id);
    p->aws_secret_access_key = sl_arena_strdup(w->arena, secret);
    p->aws_session_token = token != NULL && *token != '\0' ? sl_arena_strdup(w->arena, token) : NULL;
}

static void
walk_provider(walker_t *w, yaml_node_t *node, size_t index, void *ctx)
{
    (void)ctx;
    (void)index;
    sl_config_t *cfg = w->cfg;
    sl_provider_t p = {.protocol = SL_DIALECT_COUNT};
    yaml_node_t *seen[NFIELDS(provider_fields)];
    if (!walk_fields(w, node, provider_fields, NFIELDS(provider_fields), &p, seen))
        return;
    if (p.name == NULL)
        return;
    for (size_t i = 0; i < cfg->n_providers; i++) {
        if (strcmp(cfg->providers[i].name, p.name) == 0) {
            char first[16];
            snprintf(first, sizeof(first), "%" PRIu32, w->provider_lines[i]);
            size_t saved = push_key(w, "name");
            ERROR(w, seen[PROVIDER_NAME], SL_CODE_CONFIG_DUPLICATE_NAME, "name", p.name, "first_line", first);
            pop_to(w, saved);
            return;
        }
    }
    bool ok = p.protocol != SL_DIALECT_COUNT;
    for (int f = PROVIDER_REGION; f <= PROVIDER_AWS && ok; f++) {
        if (seen[f] != NULL && p.protocol != SL_DIALECT_BEDROCK) {
            size_t saved = push_key(w, provider_fields[f].name);
            ERROR(w, seen[f], SL_CODE_CONFIG_NOT_FOR_PROTOCOL, "field", provider_fields[f].name, "protocol",
                  "bedrock");
            pop_to(w, saved);
            ok = false;
        }
    }
    if (ok && p.base_url == NULL && seen[PROVIDER_BASE_URL] == NULL) {
        if (p.protocol == SL_DIALECT_BEDROCK) {
            if (p.region == NULL) {
                ERROR(w, node, SL_CODE_CONFIG_MISSING_FIELD, "field", "region");
                ok = false;
            } else {
                char url[160];
                snprintf(url, sizeof(url), "https://bedrock-runtime.%s.amazonaws.com", p.region);
                p.base_url = sl_arena_strdup(w->arena, url);
            }
        } else {
            p.base_url = (char *)dialect_default_base_url[p.protocol];
        }
    }
    if (!ok || p.base_url == NULL)
        return;
    if (seen[6] == NULL) {
        p.models = (char **)match_everything;
        p.n_models = 1;
    }
    if (p.protocol == SL_DIALECT_BEDROCK && p.key == NULL && seen[PROVIDER_AWS] == NULL)
        aws_from_env(w, &p);
    w->provider_lines[cfg->n_providers] = (uint32_t)node->start_mark.line + 1;
    cfg->providers[cfg->n_providers++] = p;
}

static void
set_providers(walker_t *w, yaml_node_t *value, void *target)
{
    sl_config_t *cfg = target;
    if (value->type == YAML_SEQUENCE_NODE) {
        cfg->providers = sl_arena_alloc(w->arena, seq_len(value) * sizeof(sl_provider_t));
        w->provider_lines = sl_arena_alloc(w->arena, seq_len(value) * sizeof(uint32_t));
    }
    walk_seq(w, value, walk_provider, NULL);
}

/* ---- routes (resolved after providers) ------------------------------------ */

static void
set_routes(walker_t *w, yaml_node_t *value, void *target)
{
    ((sl_config_t *)target)->has_routes = true;
    w->routes_node = value;
    snprintf(w->routes_path, sizeof(w->routes_path), "%s", w->path);
}

typedef struct {
    char *name;
    uint32_t weight;
} member_draft_t;

static const field_t member_fields[] = {
    {"name", .kind = F_NAME, .offset = offsetof(member_draft_t, name), .required = true},
    {"weight", U(member_draft_t, weight, 1, 10000)},
};

/* One of a route's provider lists: its members (weights for load_balance) or its context_fallback. */
typedef struct {
    sl_route_member_t *members;
    size_t *n;
    bool weighted;
} member_list_t;

static void
walk_member(walker_t *w, yaml_node_t *node, size_t index, void *ctx)
{
    member_list_t *list = ctx;
    member_draft_t d = {.weight = 1};
    (void)index;
    if (node->type == YAML_MAPPING_NODE && list->weighted) {
        if (!walk_fields(w, node, member_fields, NFIELDS(member_fields), &d, NULL) || d.name == NULL)
            return;
    } else if ((d.name = get_name(w, node)) == NULL) {
        return;
    }
    size_t i = 0;
    while (i < w->cfg->n_providers && strcmp(w->cfg->providers[i].name, d.name) != 0)
        i++;
    if (i == w->cfg->n_providers) {
        ERROR(w, node, SL_CODE_CONFIG_UNKNOWN_PROVIDER, "name", d.name);
        return;
    }
    for (size_t m = 0; m < *list->n; m++) {
        if (list->members[m].provider == i) {
            ERROR(w, node, SL_CODE_CONFIG_ROUTE_DUPLICATE_MEMBER, "name", d.name);
            return;
        }
    }
    list->members[*list->n].provider = i;
    list->members[*list->n].weight = d.weight;
    (*list->n)++;
}

static void
walk_members(walker_t *w, yaml_node_t *value, sl_route_member_t **members, size_t *n, bool weighted)
{
    if (value->type == YAML_SEQUENCE_NODE)
        *members = sl_arena_alloc(w->arena, (seq_len(value) + 1) * sizeof(sl_route_member_t));
    member_list_t list = {.members = *members, .n = n, .weighted = weighted};
    walk_seq(w, value, walk_member, &list); /* not a list: walk_seq reports it, nothing is walked */
}

static void
set_route_failover(walker_t *w, yaml_node_t *value, void *target)
{
    sl_route_t *r = target;
    if (r->members != NULL)
        return; /* both lists given: walk_route reports it */
    r->kind = SL_ROUTE_FAILOVER;
    walk_members(w, value, &r->members, &r->n_members, false);
}

static void
set_route_load_balance(walker_t *w, yaml_node_t *value, void *target)
{
    sl_route_t *r = target;
    if (r->members != NULL)
        return; /* both lists given: walk_route reports it */
    r->kind = SL_ROUTE_LOAD_BALANCE;
    walk_members(w, value, &r->members, &r->n_members, true);
}

static void
set_route_context_fallback(walker_t *w, yaml_node_t *value, void *target)
{
    sl_route_t *r = target;
    walk_members(w, value, &r->context_fallback, &r->n_context_fallback, false);
}

static const field_t route_fields[] = {
    {"match", .kind = F_STRING, .offset = offsetof(sl_route_t, match), .required = true},
    {"failover", F_CUSTOM, .custom = set_route_failover},
    {"load_balance", F_CUSTOM, .custom = set_route_load_balance},
    {"context_fallback", F_CUSTOM, .custom = set_route_context_fallback},
    {"first_token_secs", U(sl_route_t, first_token_secs, 0, 600)},
};

static void
warn_mixed_protocols(walker_t *w, yaml_node_t *node, const sl_route_t *r)
{
    bool present[SL_DIALECT_COUNT] = {0};
    size_t kinds = 0;
    for (size_t m = 0; m < r->n_members; m++) {
        sl_dialect_t d = w->cfg->providers[r->members[m].provider].protocol;
        kinds += !present[d];
        present[d] = true;
    }
    if (kinds < 2)
        return;
    sl_strbuf_t list = {0};
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        if (present[d])
            sl_strbuf_appendf(&list, "%s%s", list.len ? ", " : "", sl_dialect_slug((sl_dialect_t)d));
    }
    char *s = sl_strbuf_finish(&list);
    PROBLEM(w->warnings, w, node, SL_CODE_CONFIG_ROUTE_MIXED_PROTOCOLS, "protocols", s);
    free(s);
}

static void
walk_route(walker_t *w, yaml_node_t *node, size_t index, void *ctx)
{
    (void)ctx;
    (void)index;
    sl_route_t r = {0};
    yaml_node_t *seen[NFIELDS(route_fields)];
    size_t errors_before = w->errors->len;
    if (!walk_fields(w, node, route_fields, NFIELDS(route_fields), &r, seen))
        return;
    if ((seen[1] != NULL) == (seen[2] != NULL) || (w->errors->len == errors_before && r.n_members == 0)) {
        ERROR0(w, node, SL_CODE_CONFIG_ROUTE_MEMBERS);
        return;
    }
    if (w->errors->len != errors_before || r.match == NULL)
        return;
    r.has_first_token_secs = seen[4] != NULL;
    warn_mixed_protocols(w, node, &r);
    w->cfg->routes[w->cfg->n_routes++] = r;
}

static void
resolve_routes(walker_t *w)
{
    if (w->routes_node == NULL)
        return;
    size_t saved = w->path_len;
    snprintf(w->path, sizeof(w->path), "%s", w->routes_path);
    w->path_len = strlen(w->path);
    if (w->routes_node->type == YAML_SEQUENCE_NODE)
        w->cfg->routes = sl_arena_alloc(w->arena, seq_len(w->routes_node) * sizeof(sl_route_t));
    walk_seq(w, w->routes_node, walk_route, NULL);
    pop_to(w, saved);
}

/* ---- failover, pricing, the rest ----------------------------------------- */

static const field_t failover_fields[] = {
    {"wait_secs", U(sl_failover_t, wait_secs, 0, 600)},
    {"failures_to_pause", U(sl_failover_t, failures_to_pause, 1, 1000)},
    {"pause_secs", U(sl_failover_t, pause_secs, 1, 86400)},
    {"max_pause_secs", U(sl_failover_t, max_pause_secs, 1, 86400)},
    {"rate_limit_max_pause_secs", U(sl_failover_t, rate_limit_max_pause_secs, 1, 86400)},
    {"no_balance_pause_secs", U(sl_failover_t, no_balance_pause_secs, 1, 604800)},
    {"quota_pause_secs", U(sl_failover_t, quota_pause_secs, 1, 2678400)},
    {"idle_timeout_secs", U(sl_failover_t, idle_timeout_secs, 1, 86400)},
    {"connect_timeout_secs", U(sl_failover_t, connect_timeout_secs, 1, 600)},
    {"total_timeout_secs", U(sl_failover_t, total_timeout_secs, 1, 86400)},
    {"first_token_secs", U(sl_failover_t, first_token_secs, 0, 600)},
};

static void
set_failover(walker_t *w, yaml_node_t *value, void *target)
{
    sl_failover_t *f = &((sl_config_t *)target)->failover;
    yaml_node_t *seen[NFIELDS(failover_fields)];
    if (!walk_fields(w, value, failover_fields, NFIELDS(failover_fields), f, seen))
        return;
    if (f->max_pause_secs < f->pause_secs) {
        char lo[16], hi[16];
        snprintf(lo, sizeof(lo), "%" PRIu32, f->pause_secs);
        snprintf(hi, sizeof(hi), "%" PRIu32, f->max_pause_secs);
        size_t saved = push_key(w, "max_pause_secs");
        ERROR(w, seen[3] != NULL ? seen[3] : seen[2], SL_CODE_CONFIG_PAUSE_ORDER, "max", hi, "value", lo);
        pop_to(w, saved);
    }
}

#define PRICE_SETTER(member)                                                                                 \
    static void set_price_##member(walker_t *w, yaml_node_t *value, void *target)                            \
    {                                                                                                        \
        get_micros(w, value, &((sl_price_t *)target)->member);                                               \
    }
PRICE_SETTER(input)
PRICE_SETTER(output)
PRICE_SETTER(cache_read)
PRICE_SETTER(cache_write)

static const field_t price_fields[] = {
    {"input", F_CUSTOM, .required = true, .custom = set_price_input},
    {"output", F_CUSTOM, .required = true, .custom = set_price_output},
    {"cache_read", F_CUSTOM, .custom = set_price_cache_read},
    {"cache_write", F_CUSTOM, .custom = set_price_cache_write},
};

static void
set_pricing(walker_t *w, yaml_node_t *value, void *target)
{
    sl_config_t *cfg = target;
    if (!expect_type(w, value, YAML_MAPPING_NODE, "a mapping of model globs to prices"))
        return;
    size_t cap = (size_t)(value->data.mapping.pairs.top - value->data.mapping.pairs.start);
    cfg->pricing = sl_arena_alloc(w->arena, cap * sizeof(sl_price_t));
    for (yaml_node_pair_t *pair = value->data.mapping.pairs.start; pair < value->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *key = node_at(w, pair->key), *price = node_at(w, pair->value);
        if (!expect_type(w, key, YAML_SCALAR_NODE, "a model glob"))
            continue;
        size_t saved = push_key(w, scalar(key));
        sl_price_t p = {0};
        size_t errors_before = w->errors->len;
        if (walk_fields(w, price, price_fields, NFIELDS(price_fields), &p, NULL) &&
            w->errors->len == errors_before) {
            p.model_glob = sl_arena_strdup(w->arena, scalar(key));
            cfg->pricing[cfg->n_pricing++] = p;
        }
        pop_to(w, saved);
    }
}

static void
set_version(walker_t *w, yaml_node_t *value, void *target)
{
    uint64_t v;
    if (!get_uint(w, value, 0, UINT32_MAX, &v))
        return;
    if (v != 1) {
        ERROR(w, value, SL_CODE_CONFIG_UNSUPPORTED_VERSION, "value", scalar(value));
        return;
    }
    ((sl_config_t *)target)->version = (uint32_t)v;
}

/* A zone from its TZif file (env->read_zone); NULL when there is none or it does not parse. */
static sl_tz_t *
load_zone(const sl_config_env_t *env, const char *name)
{
    size_t len;
    char *bytes = env->read_zone(env->ctx, name, &len);
    sl_tz_t *tz = bytes != NULL ? sl_tz_parse_tzif(bytes, len, NULL, 0) : NULL;
    free(bytes);
    return tz;
}

/*
 * The zone the C library would use: TZ when it names one (a zone name or a
 * file, with or without the leading ':', or a POSIX TZ string), else the
 * system's (/etc/localtime), else UTC.
 */
static sl_tz_t *
system_zone(const sl_config_env_t *env)
{
    const char *tz = env->getenv(env->ctx, "TZ");
    sl_tz_t *zone = NULL;
    if (tz != NULL && *tz != '\0') {
        const char *name = tz[0] == ':' ? tz + 1 : tz;
        zone = load_zone(env, name);
        if (zone == NULL)
            zone = sl_tz_parse_posix(name, NULL, 0);
    }
    if (zone == NULL)
        zone = load_zone(env, NULL);
    return zone != NULL ? zone : sl_tz_parse_posix("UTC0", NULL, 0);
}

/* Read and parsed here, once per load: calendar periods and texts convert with it from then on. */
static void
set_timezone(walker_t *w, yaml_node_t *value, void *target)
{
    char *s = get_string(w, value);
    if (s == NULL)
        return;
    sl_tz_t *tz = strstr(s, "..") == NULL && s[0] != '/' ? load_zone(w->env, s) : NULL;
    if (tz == NULL) {
        ERROR(w, value, SL_CODE_CONFIG_UNKNOWN_TIMEZONE, "value", s);
        return;
    }
    sl_config_t *c = target;
    sl_tz_free(c->tz);
    c->tz = tz;
    c->timezone = s;
}

/* ---- cluster ------------------------------------------------------------- */

/* Why a Redis URL was refused, as the message's reason (never quoting the userinfo). */
static void bad_redis_url(walker_t *w, yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
bad_redis_url(walker_t *w, yaml_node_t *node, const char *fmt, ...)
{
    char reason[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    ERROR(w, node, SL_CODE_CONFIG_CLUSTER_BAD_REDIS_URL, "reason", reason);
}

/*
 * A decimal in s[0..n) no larger than max into *out; false when it is empty,
 * holds anything but digits or is too large (*too_large tells which).
 */
static bool
url_number(const char *s, size_t n, uint32_t max, uint32_t *out, bool *too_large)
{
    *too_large = false;
    if (n == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        if (v <= max)
            v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > max) {
        *too_large = true;
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

/* The database number of s[0..n) ("db" in messages), 0..15 as Redis has by default. */
static bool
url_db(walker_t *w, yaml_node_t *node, const char *s, size_t n, uint32_t *db)
{
    bool too_large;
    if (url_number(s, n, 15, db, &too_large))
        return true;
    if (too_large)
        bad_redis_url(w, node, "the database %.*s is out of range 0..15", (int)(n > 20 ? 20 : n), s);
    else
        bad_redis_url(w, node, "the database '%.*s' is not a number 0..15", (int)(n > 32 ? 32 : n), s);
    return false;
}

static bool
valid_host_name(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

/* host[:port][/db] of a redis:// URL into u. */
static bool
parse_redis_tcp(walker_t *w, yaml_node_t *node, const char *s, sl_cluster_config_t *u)
{
    const char *host = s, *end;
    size_t host_len;
    if (*s == '[') {
        end = strchr(s, ']');
        if (end == NULL) {
            bad_redis_url(w, node, "the IPv6 address has no closing ']'");
            return false;
        }
        host = s + 1;
        host_len = (size_t)(end - host);
        char ip[64];
        int family = 0;
        uint8_t addr[16];
        if (host_len < sizeof(ip)) {
            memcpy(ip, host, host_len);
            ip[host_len] = '\0';
        }
        if (host_len >= sizeof(ip) || !sl_ip_parse(ip, &family, addr) || family != AF_INET6) {
            bad_redis_url(w, node, "'%.*s' is not an IPv6 address", (int)(host_len > 64 ? 64 : host_len),
                          host);
            return false;
        }
        end++;
        if (*end != '\0' && *end != ':' && *end != '/') {
            bad_redis_url(w, node, "']' is not followed by ':port' or '/db'");
            return false;
        }
    } else {
        end = s + strcspn(s, ":/");
        host_len = (size_t)(end - s);
        if (host_len == 0) {
            bad_redis_url(w, node, "there is no host");
            return false;
        }
        if (!valid_host_name(s, host_len)) {
            bad_redis_url(w, node, "'%.*s' is not a host name or IP address",
                          (int)(host_len > 64 ? 64 : host_len), s);
            return false;
        }
    }
    u->redis_host = sl_arena_strndup(w->arena, host, host_len);
    if (*end == ':') {
        const char *port = end + 1;
        size_t n = strcspn(port, "/");
        uint32_t v = 0;
        bool too_large;
        bool number = url_number(port, n, 65535, &v, &too_large);
        if (n == 0) {
            bad_redis_url(w, node, "the port after ':' is missing");
            return false;
        }
        if (!number && !too_large) {
            bad_redis_url(w, node, "the port '%.*s' is not a number", (int)(n > 32 ? 32 : n), port);
            return false;
        }
        if (!number || v == 0) {
            bad_redis_url(w, node, "the port %.*s is out of range 1..65535", (int)(n > 20 ? 20 : n), port);
            return false;
        }
        u->redis_port = (uint16_t)v;
        end = port + n;
    }
    /* A lone trailing '/' names no database: the default one. */
    if (*end == '/' && end[1] != '\0')
        return url_db(w, node, end + 1, strlen(end + 1), &u->redis_db);
    return true;
}

/* /absolute/path[?db=N] of a unix:// URL into u. */
static bool
parse_redis_unix(walker_t *w, yaml_node_t *node, const char *s, sl_cluster_config_t *u)
{
    size_t n = strcspn(s, "?");
    if (s[0] != '/' || n < 2) {
        bad_redis_url(w, node, "the socket path must be absolute, as in unix:///run/redis.sock");
        return false;
    }
    u->redis_unix_path = sl_arena_strndup(w->arena, s, n);
    if (s[n] == '\0')
        return true;
    const char *query = s + n + 1;
    if (strncmp(query, "db=", 3) != 0) {
        /* Only the parameter's name: its value could be anything. */
        size_t name = strcspn(query, "=&");
        bad_redis_url(w, node, "unknown parameter '%.*s' (only db=N is taken)", (int)(name > 32 ? 32 : name),
                      query);
        return false;
    }
    if (strchr(query, '&') != NULL) {
        bad_redis_url(w, node, "db=N is the only parameter taken");
        return false;
    }
    return url_db(w, node, query + 3, strlen(query + 3), &u->redis_db);
}

/*
 * cluster.redis, once its ${VAR}s are expanded, into u's redis_* fields:
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   unix://[[user]:password@]/absolute/path[?db=N]
 *
 * The scheme in any case. The userinfo runs to the last '@' and the user to
 * the first ':' in it (sl_url_password): a password may hold any character,
 * taken as written (no %-decoding), so a ${VAR} password needs no escaping;
 * an empty one is none, and a user without a password is refused (AUTH
 * takes one). host is a name or IPv4 literal ([A-Za-z0-9._-], at most 253)
 * or an IPv6 literal in brackets, kept without them; port 1..65535, 6379
 * when absent; db 0..15, 0 when absent (a lone trailing '/' too). A unix
 * path is absolute and runs to '?'; db is its only parameter. rediss:// has
 * its own code: Debian's hiredis has no TLS. Reasons never quote the
 * userinfo. Returns false after reporting the problem, u half-set.
 */
static bool
parse_redis_url(walker_t *w, yaml_node_t *node, const char *url, sl_cluster_config_t *u)
{
    const char *sep = strstr(url, "://");
    size_t scheme = sep != NULL ? (size_t)(sep - url) : 0;
    bool tcp = scheme == 5 && strncasecmp(url, "redis", 5) == 0;
    bool unix_socket = scheme == 4 && strncasecmp(url, "unix", 4) == 0;
    if (scheme == 6 && strncasecmp(url, "rediss", 6) == 0) {
        ERROR0(w, node, SL_CODE_CONFIG_CLUSTER_TLS_UNSUPPORTED);
        return false;
    }
    if (!tcp && !unix_socket) {
        bool shown = sep != NULL && scheme > 0 && scheme <= 16 &&
                     strspn(url, "abcdefghijklmnopqrstuvwxyz"
                                 "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789+-.") == scheme;
        if (shown)
            bad_redis_url(w, node, "the scheme '%.*s' is neither redis nor unix", (int)scheme, url);
        else
            bad_redis_url(w, node, "it does not start with redis:// or unix://");
        return false;
    }
    const char *rest = sep + 3;
    size_t at, n;
    if (sl_url_password(url, strlen(url), &at, &n)) {
        const char *user = rest, *colon = url + at - 1;
        if (colon > user)
            u->redis_user = sl_arena_strndup(w->arena, user, (size_t)(colon - user));
        if (n > 0)
            u->redis_password = sl_arena_strndup(w->arena, url + at, n);
        rest = url + at + n + 1;
    } else if (*rest != '/' && strchr(rest, '@') != NULL) {
        bad_redis_url(w, node, "the part before '@' has no ':' (write user:password@, or :password@)");
        return false;
    }
    if (u->redis_user != NULL && u->redis_password == NULL) {
        bad_redis_url(w, node, "a user name needs a password (user:password@)");
        return false;
    }
    return tcp ? parse_redis_tcp(w, node, rest, u) : parse_redis_unix(w, node, rest, u);
}

static void
set_cluster_redis(walker_t *w, yaml_node_t *value, void *target)
{
    char *raw = get_string(w, value);
    char *url = raw != NULL ? expand_vars(w, value, raw) : NULL;
    sl_cluster_config_t u = {.redis_port = 6379};
    if (url == NULL || !parse_redis_url(w, value, url, &u))
        return;
    sl_cluster_config_t *c = target;
    c->redis_host = u.redis_host;
    c->redis_port = u.redis_port;
    c->redis_unix_path = u.redis_unix_path;
    c->redis_user = u.redis_user;
    c->redis_password = u.redis_password;
    c->redis_db = u.redis_db;
}

/* 1..max characters of letters, digits and the bytes of extra: they go into Redis key names and events. */
static bool
valid_token(const char *s, size_t max, const char *extra)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (; *s; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr(extra, *s) != NULL))
            return false;
    }
    return true;
}

static void
set_cluster_name(walker_t *w, yaml_node_t *value, void *target)
{
    char *s = get_string(w, value);
    if (s == NULL)
        return;
    if (!valid_token(s, 64, "._-")) {
        ERROR(w, value, SL_CODE_CONFIG_CLUSTER_BAD_NAME, "value", s);
        return;
    }
    ((sl_cluster_config_t *)target)->name = s;
}

static void
set_cluster_instance(walker_t *w, yaml_node_t *value, void *target)
{
    char *s = get_secret(w, value);
    if (s == NULL)
        return;
    if (!valid_token(s, 128, "._:-")) {
        ERROR(w, value, SL_CODE_CONFIG_CLUSTER_BAD_INSTANCE, "value", s);
        return;
    }
    ((sl_cluster_config_t *)target)->instance = s;
}

static const char *const redis_down_slugs[] = {
    [SL_REDIS_DOWN_LOCAL] = "local", [SL_REDIS_DOWN_CLOSED] = "closed"};

static void
set_cluster_when_redis_down(walker_t *w, yaml_node_t *value, void *target)
{
    int i = get_enum(w, value, redis_down_slugs, NFIELDS(redis_down_slugs));
    if (i >= 0)
        ((sl_cluster_config_t *)target)->when_redis_down = (sl_redis_down_t)i;
}

static const field_t cluster_fields[] = {
    {"redis", F_CUSTOM, .required = true, .custom = set_cluster_redis},
    {"name", F_CUSTOM, .custom = set_cluster_name},
    {"instance", F_CUSTOM, .custom = set_cluster_instance},
    {"timeout_ms", U(sl_cluster_config_t, timeout_ms, 1, 10000)},
    {"when_redis_down", F_CUSTOM, .custom = set_cluster_when_redis_down},
};

/* The section is taken whole or not at all: a config with errors keeps the defaults (cluster off). */
static void
set_cluster(walker_t *w, yaml_node_t *value, void *target)
{
    sl_config_t *cfg = target;
    sl_cluster_config_t c = cfg->cluster;
    size_t errors_before = w->errors->len;
    if (!walk_fields(w, value, cluster_fields, NFIELDS(cluster_fields), &c, NULL) ||
        w->errors->len != errors_before)
        return;
    c.enabled = true;
    cfg->cluster = c;
}

static void
bad_store_url(walker_t *w, yaml_node_t *node, const char *reason)
{
    char shown[256];
    snprintf(shown, sizeof(shown), "%s", reason);
    /* libpq's reasons may quote the URL: never its password. */
    sl_scrub_secrets(shown, strlen(shown));
    size_t n = strlen(shown);
    while (n > 0 && (shown[n - 1] == '\n' || shown[n - 1] == ' '))
        shown[--n] = '\0';
    ERROR(w, node, SL_CODE_CONFIG_STORE_BAD_URL, "reason", shown);
}

/*
 * store.url, once its ${VAR}s are expanded: a libpq connection URI
 * (postgres:// or postgresql://), checked by libpq's own parser so that
 * what loads is what connects. libpq %-decodes the userinfo, so a password
 * holding '@', ':' or '/' is written %-encoded.
 */
static void
set_store_url(walker_t *w, yaml_node_t *value, void *target)
{
    char *raw = get_string(w, value);
    char *url = raw != NULL ? expand_vars(w, value, raw) : NULL;
    if (url == NULL)
        return;
    if (strncmp(url, "postgres://", 11) != 0 && strncmp(url, "postgresql://", 13) != 0) {
        bad_store_url(w, value, "it does not start with postgres:// or postgresql://");
        return;
    }
    char *why = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &why);
    if (opts == NULL) {
        bad_store_url(w, value, why != NULL ? why : "out of memory");
        PQfreemem(why);
        return;
    }
    PQconninfoFree(opts);
    ((sl_config_t *)target)->store_url = url;
}

static const field_t spool_fields[] = {
    {"path", .kind = F_STRING, .offset = offsetof(sl_config_t, spool_path)},
    {"max_bytes", U(sl_config_t, spool_max_bytes, 1ULL << 20, 1ULL << 40)},
};

static void
set_spool(walker_t *w, yaml_node_t *value, void *target)
{
    walk_fields(w, value, spool_fields, NFIELDS(spool_fields), target, NULL);
}

enum { STORE_PATH, STORE_URL };
static const field_t store_fields[] = {
    [STORE_PATH] = {"path", .kind = F_STRING, .offset = offsetof(sl_config_t, store_path)},
    [STORE_URL] = {"url", F_CUSTOM, .custom = set_store_url},
    {"spool", F_CUSTOM, .custom = set_spool},
    {"retention_days", U(sl_config_t, retention_days, 1, 36500)},
};

static void
set_store(walker_t *w, yaml_node_t *value, void *target)
{
    yaml_node_t *seen[NFIELDS(store_fields)];
    if (!walk_fields(w, value, store_fields, NFIELDS(store_fields), target, seen))
        return;
    if (seen[STORE_PATH] != NULL && seen[STORE_URL] != NULL) {
        size_t saved = push_key(w, "url");
        ERROR0(w, seen[STORE_URL], SL_CODE_CONFIG_STORE_PATH_AND_URL);
        pop_to(w, saved);
    }
}

static void
set_otlp_endpoint(walker_t *w, yaml_node_t *value, void *target)
{
    char *s = get_base_url(w, value);
    if (s != NULL)
        ((sl_config_t *)target)->otlp_endpoint = s;
}

/* sample: a share from 0 to 1, at most 6 decimals (0.25, 1.0). */
static void
set_trace_sample(walker_t *w, yaml_node_t *value, void *target)
{
    int64_t micros;
    if (!expect_type(w, value, YAML_SCALAR_NODE, "a number"))
        return;
    int rc = parse_micros(value, &micros);
    if (rc == -1) {
        ERROR(w, value, SL_CODE_CONFIG_WRONG_TYPE, "expected", "a number with at most 6 decimals");
        return;
    }
    if (rc == -2 || micros > 1000000) {
        ERROR(w, value, SL_CODE_CONFIG_OUT_OF_RANGE, "value", scalar(value), "min", "0", "max", "1");
        return;
    }
    ((sl_config_t *)target)->trace_sample_ppm = (uint32_t)micros;
}

static const field_t telemetry_fields[] = {
    {"otlp_endpoint", F_CUSTOM, .required = true, .custom = set_otlp_endpoint},
    {"service_name", .kind = F_STRING, .offset = offsetof(sl_config_t, service_name)},
    {"sample", F_CUSTOM, .custom = set_trace_sample},
};

static const field_t security_fields[] = {
    {"redact", .kind = F_BOOL, .offset = offsetof(sl_config_t, redact)},
};

static const field_t size_limit_fields[] = {
    {"max_body_bytes", U(sl_config_t, max_body_bytes, 1024, 1ULL << 32)},
    {"max_waiting_bytes", U(sl_config_t, max_waiting_bytes, 0, 1ULL << 40)},
};

#define SECTION_SETTER(fn, table)                                                                            \
    static void fn(walker_t *w, yaml_node_t *value, void *target)                                            \
    {                                                                                                        \
        walk_fields(w, value, table, NFIELDS(table), target, NULL);                                          \
    }
SECTION_SETTER(set_security, security_fields)
SECTION_SETTER(set_size_limits, size_limit_fields)
SECTION_SETTER(set_telemetry, telemetry_fields)

static const field_t root_fields[] = {
    {"version", F_CUSTOM, .custom = set_version},
    {"listen", F_CUSTOM, .custom = set_listen},
    {"clients", F_CUSTOM, .custom = set_clients},
    {"providers", F_CUSTOM, .custom = set_providers},
    {"routes", F_CUSTOM, .custom = set_routes},
    {"failover", F_CUSTOM, .custom = set_failover},
    {"timezone", F_CUSTOM, .custom = set_timezone},
    {"pricing", F_CUSTOM, .custom = set_pricing},
    {"store", F_CUSTOM, .custom = set_store},
    {"security", F_CUSTOM, .custom = set_security},
    {"limits", F_CUSTOM, .custom = set_size_limits},
    {"cluster", F_CUSTOM, .custom = set_cluster},
    {"telemetry", F_CUSTOM, .custom = set_telemetry},
    {"shutdown_grace_secs", U(sl_config_t, shutdown_grace_secs, 0, 3600)},
};

/* ---- entry points -------------------------------------------------------- */

/* name in the directory of the config file at source_path; in the working directory without a file. */
static char *
beside(sl_arena_t *arena, const char *source_path, const char *name)
{
    const char *slash = source_path != NULL ? strrchr(source_path, '/') : NULL;
    int dir_len = slash != NULL ? (int)(slash - source_path) + 1 : 0;
    size_t n = (size_t)dir_len + strlen(name) + 1;
    char *path = sl_arena_alloc(arena, n);
    snprintf(path, n, "%.*s%s", dir_len, source_path != NULL ? source_path : "", name);
    return path;
}

static sl_config_t *
config_with_defaults(const char *source_path, const sl_config_env_t *env)
{
    sl_arena_t *arena = sl_arena_new();
    sl_config_t *c = sl_arena_alloc(arena, sizeof(*c));
    c->arena = arena;
    c->source_path = source_path != NULL ? sl_arena_strdup(arena, source_path) : NULL;
    c->version = 1;
    c->gateway = (sl_listen_t){.bind = "127.0.0.1", .port = 8080};
    c->control = (sl_listen_t){.bind = "127.0.0.1", .port = 8081};
    c->failover = (sl_failover_t){
        .wait_secs = 120,
        .failures_to_pause = 3,
        .pause_secs = 60,
        .max_pause_secs = 600,
        .rate_limit_max_pause_secs = 3600,
        .no_balance_pause_secs = 1800,
        .quota_pause_secs = 3600,
        .idle_timeout_secs = 300,
        .connect_timeout_secs = 10,
        .total_timeout_secs = 3600,
    };
    c->store_path = "sluice.db";
    c->spool_path = beside(arena, source_path, "sluice.spool");
    c->spool_max_bytes = 256ULL << 20;
    c->retention_days = 30;
    c->redact = true;
    c->max_body_bytes = 32u * 1024 * 1024;
    c->max_waiting_bytes = 1024u * 1024 * 1024;
    c->shutdown_grace_secs = 30;
    c->service_name = "sluice";
    c->trace_sample_ppm = 1000000;
    c->cluster = (sl_cluster_config_t){
        .redis_port = 6379,
        .name = "sluice",
        .timeout_ms = 50,
        .when_redis_down = SL_REDIS_DOWN_LOCAL,
    };
    c->tz = system_zone(env);
    return c;
}

static unsigned long
msg_line(const sl_msg_t *m)
{
    const char *line = sl_msg_arg(m, "line");
    return line != NULL ? strtoul(line, NULL, 10) : 0;
}

typedef struct {
    unsigned long line;
    size_t index;
    sl_msg_t msg;
} sortable_msg_t;

static int
compare_sortable(const void *a, const void *b)
{
    const sortable_msg_t *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Problems in file order (routes are checked after providers, wherever they stand); stable. */
static void
sort_by_line(sl_msgs_t *msgs)
{
    sortable_msg_t *tmp = sl_xmalloc(msgs->len * sizeof(*tmp));
    for (size_t i = 0; i < msgs->len; i++)
        tmp[i] = (sortable_msg_t){msg_line(&msgs->items[i]), i, msgs->items[i]};
    qsort(tmp, msgs->len, sizeof(*tmp), compare_sortable);
    for (size_t i = 0; i < msgs->len; i++)
        msgs->items[i] = tmp[i].msg;
    free(tmp);
}

sl_config_result_t
sl_config_parse(const char *yaml, size_t len, const char *source_path, const sl_config_env_t *env)
{
    sl_config_result_t res = {.config = config_with_defaults(source_path, env)};
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        fputs("sluice: out of memory\n", stderr);
        abort();
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        char line[16];
        snprintf(line, sizeof(line), "%zu", parser.problem_mark.line + 1);
        sl_strbuf_t reason = {0};
        sl_strbuf_appendf(&reason, "%s", parser.problem ? parser.problem : "cannot parse");
        if (parser.context)
            sl_strbuf_appendf(&reason, " (%s)", parser.context);
        char *r = sl_strbuf_finish(&reason);
        sl_msgs_push(&res.errors,
                     sl_msg_make(SL_CODE_CONFIG_YAML_SYNTAX, "path", "", "line", line, "reason", r, NULL));
        free(r);
        yaml_parser_delete(&parser);
        return res;
    }
    walker_t w = {
        .doc = &doc,
        .env = env,
        .cfg = res.config,
        .arena = res.config->arena,
        .errors = &res.errors,
        .warnings = &res.warnings,
    };
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    /* An empty file is the defaults. */
    if (root != NULL && !is_null(root)) {
        walk_fields(&w, root, root_fields, NFIELDS(root_fields), res.config, NULL);
        resolve_routes(&w);
    }
    sort_by_line(&res.errors);
    sort_by_line(&res.warnings);
    if (res.config->n_providers == 0 && res.errors.len == 0)
        sl_msgs_push(&res.warnings, sl_msg_make(SL_CODE_CONFIG_NO_PROVIDERS, NULL));
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return res;
}

/* Why read_file failed. */
typedef enum { READ_OK, READ_UNOPENED, READ_FAILED, READ_TOO_LARGE } read_status_t;

/* The bytes of path, at most max (NUL-terminated; caller frees). READ_UNOPENED leaves errno set. */
static read_status_t
read_file(const char *path, size_t max, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return READ_UNOPENED;
    char *buf = sl_xmalloc(max + 2);
    size_t n = fread(buf, 1, max + 1, f);
    int read_error = ferror(f);
    fclose(f);
    if (read_error || n > max) {
        free(buf);
        return read_error ? READ_FAILED : READ_TOO_LARGE;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return READ_OK;
}

sl_config_result_t
sl_config_load_file(const char *path, const sl_config_env_t *env)
{
    char *buf;
    size_t n;
    read_status_t st = read_file(path, SL_CONFIG_MAX_FILE_BYTES, &buf, &n);
    if (st == READ_OK) {
        sl_config_result_t res = sl_config_parse(buf, n, path, env);
        free(buf);
        return res;
    }
    const char *reason = st == READ_UNOPENED ? strerror(errno) : "read error";
    sl_config_result_t res = {.config = config_with_defaults(path, env)};
    char max[24];
    snprintf(max, sizeof(max), "%d", SL_CONFIG_MAX_FILE_BYTES);
    sl_msgs_push(&res.errors,
                 st == READ_TOO_LARGE
                     ? sl_msg_make(SL_CODE_CONFIG_FILE_TOO_LARGE, "path", path, "max", max, NULL)
                     : sl_msg_make(SL_CODE_CONFIG_FILE_UNREADABLE, "path", path, "reason", reason, NULL));
    return res;
}

char *
sl_config_default_yaml(const sl_config_env_t *env)
{
    static const struct {
        const char *env_var, *name, *protocol, *models;
    } defaults[] = {
        {"ANTHROPIC_API_KEY", "anthropic", "anthropic", "[\"claude-*\"]"},
        {"OPENAI_API_KEY", "openai-chat", "openai-chat",
         "[\"gpt-*\", \"o1*\", \"o3*\", \"o4*\", \"chatgpt-*\"]"},
        {"OPENAI_API_KEY", "openai-responses", "openai-responses",
         "[\"gpt-*\", \"o1*\", \"o3*\", \"o4*\", \"codex-*\"]"},
        {"GEMINI_API_KEY", "gemini", "gemini", "[\"gemini-*\"]"},
    };
    sl_strbuf_t y = {0};
    sl_strbuf_appendf(&y, "version: 1\n"
                          "listen:\n"
                          "  gateway: {bind: 127.0.0.1, port: 8080}\n"
                          "  control: {bind: 127.0.0.1, port: 8081}\n");
    bool any = false;
    for (size_t i = 0; i < NFIELDS(defaults); i++) {
        const char *v = env->getenv(env->ctx, defaults[i].env_var);
        if (v == NULL || *v == '\0')
            continue;
        if (!any)
            sl_strbuf_appendf(&y, "providers:\n");
        any = true;
        /* The key stays a ${VAR} reference so the text never holds a secret. */
        sl_strbuf_appendf(&y, "  - name: %s\n    protocol: %s\n    key: \"${%s}\"\n    models: %s\n",
                          defaults[i].name, defaults[i].protocol, defaults[i].env_var, defaults[i].models);
    }
    const char *aws_id = env->getenv(env->ctx, "AWS_ACCESS_KEY_ID");
    const char *aws_secret = env->getenv(env->ctx, "AWS_SECRET_ACCESS_KEY");
    if (aws_id != NULL && *aws_id != '\0' && aws_secret != NULL && *aws_secret != '\0') {
        const char *region = env->getenv(env->ctx, "AWS_REGION");
        if (region == NULL || !valid_name(region))
            region = env->getenv(env->ctx, "AWS_DEFAULT_REGION");
        if (region == NULL || !valid_name(region))
            region = "us-east-1";
        if (!any)
            sl_strbuf_appendf(&y, "providers:\n");
        /* Without key or aws, a bedrock provider signs with the AWS_* environment. */
        sl_strbuf_appendf(&y, "  - name: bedrock\n    protocol: bedrock\n    region: %s\n", region);
    }
    return sl_strbuf_finish(&y);
}

bool
sl_config_errors_under(const sl_msgs_t *errors, const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < errors->len; i++) {
        const char *p = sl_msg_arg(&errors->items[i], "path");
        if (p == NULL || strncmp(p, path, n) != 0)
            continue;
        if (p[n] == '\0' || p[n] == '.' || p[n] == '[')
            return true;
    }
    return false;
}

char *
sl_config_summary(const sl_config_t *c, uint16_t gateway_port, uint16_t control_port)
{
    sl_strbuf_t s = {0};
    sl_strbuf_appendf(&s, "%zu provider%s", c->n_providers, c->n_providers == 1 ? "" : "s");
    for (size_t i = 0; i < c->n_providers; i++)
        sl_strbuf_appendf(&s, "%s%s (%s)", i ? ", " : ": ", c->providers[i].name,
                          sl_dialect_slug(c->providers[i].protocol));
    sl_strbuf_appendf(
        &s, "; %zu route%s%s; %zu client%s; gateway %s:%u%s; control %s:%u%s; wait %" PRIu32 " s",
        c->n_routes, c->n_routes == 1 ? "" : "s", c->has_routes ? "" : " (models decide)", c->n_clients,
        c->n_clients == 1 ? "" : "s", c->gateway.bind, gateway_port, c->gateway.tls_cert ? " (tls)" : "",
        c->control.bind, control_port, c->control.tls_cert ? " (tls)" : "", c->failover.wait_secs);
    /* Where Redis is, never who logs in to it. */
    const sl_cluster_config_t *k = &c->cluster;
    if (k->enabled && k->redis_unix_path != NULL)
        sl_strbuf_appendf(&s, "; cluster %s on unix:%s", k->name, k->redis_unix_path);
    else if (k->enabled)
        sl_strbuf_appendf(&s, "; cluster %s on %s%s%s:%u", k->name, strchr(k->redis_host, ':') ? "[" : "",
                          k->redis_host, strchr(k->redis_host, ':') ? "]" : "", k->redis_port);
    if (k->enabled && k->redis_db != 0)
        sl_strbuf_appendf(&s, " db %" PRIu32, k->redis_db);
    return sl_strbuf_finish(&s);
}

void
sl_config_free(sl_config_t *config)
{
    if (config == NULL)
        return;
    sl_tz_free(config->tz);
    sl_arena_free(config->arena);
}

void
sl_config_result_free(sl_config_result_t *result)
{
    sl_config_free(result->config);
    sl_msgs_clear(&result->errors);
    sl_msgs_clear(&result->warnings);
    result->config = NULL;
}

/* ---- the system environment ------------------------------------------------ */

/* TZif files are a few kilobytes; anything this large is not one. */
#define ZONE_MAX_BYTES (256 * 1024)

static const char *
system_getenv(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

static char *
system_read_zone(void *ctx, const char *name, size_t *len)
{
    (void)ctx;
    char path[4096];
    const char *dir = getenv("TZDIR");
    if (name == NULL)
        snprintf(path, sizeof(path), "/etc/localtime");
    else if (name[0] == '/')
        snprintf(path, sizeof(path), "%s", name);
    else
        snprintf(path, sizeof(path), "%s/%s", dir != NULL ? dir : "/usr/share/zoneinfo", name);
    char *bytes;
    return read_file(path, ZONE_MAX_BYTES, &bytes, len) == READ_OK ? bytes : NULL;
}

static bool
system_file_readable(void *ctx, const char *path)
{
    (void)ctx;
    return access(path, R_OK) == 0;
}

const sl_config_env_t *
sl_config_env_system(void)
{
    static const sl_config_env_t env = {system_getenv, system_read_zone, system_file_readable, NULL};
    return &env;
}
