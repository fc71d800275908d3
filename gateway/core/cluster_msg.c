#include "core/cluster_msg.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/xalloc.h"

static const char *const op_slugs[SL_CLUSTER_OP_COUNT] = {
    [SL_CLUSTER_PAUSE_429] = "429",
    [SL_CLUSTER_PAUSE_MANUAL] = "manual",
    [SL_CLUSTER_RESUME] = "resume",
    [SL_CLUSTER_ANSWERED] = "answered",
    [SL_CLUSTER_PROBE_ABANDONED] = "abandoned",
    [SL_CLUSTER_SLOT_FREED] = "freed",
    [SL_CLUSTER_LIMITS] = "limits",
    [SL_CLUSTER_BREAKER_OPEN] = "breaker",
    [SL_CLUSTER_BREAKER_CLOSED] = "healthy",
    [SL_CLUSTER_CONFIG] = "config",
};

static const char *const per_slugs[] = {"minute", "hour", "day", "week", "month"};
static const char *const measure_slugs[] = {"requests", "tokens", "cost"};

/* "-" or PER/EVERY/MEASURE/AMOUNT,... into out; false when it does not fit. */
static bool
encode_limits(const sl_cluster_msg_t *m, char *out, size_t size)
{
    if (m->n_limits == 0)
        return snprintf(out, size, "-") < (int)size;
    size_t len = 0;
    for (size_t i = 0; i < m->n_limits; i++) {
        const sl_limit_t *l = &m->limits[i];
        int n = snprintf(out + len, size - len, "%s%s/%" PRIu32 "/%s/%" PRId64, i > 0 ? "," : "",
                         per_slugs[l->per], l->every, measure_slugs[l->measure], l->amount);
        if (n < 0 || (size_t)n >= size - len)
            return false;
        len += (size_t)n;
    }
    return true;
}

size_t
sl_cluster_msg_encode(const sl_cluster_msg_t *m, char *out, size_t size)
{
    if (m->op == SL_CLUSTER_LIMITS) {
        char limits[SL_CLUSTER_MAX_LIMITS * 48];
        if (!encode_limits(m, limits, sizeof(limits)))
            return 0;
        int n = snprintf(out, size, "v1 %.*s limits %c %s - %.*s", (int)m->origin_len, m->origin,
                         m->subject_kind == 'k' ? 'k' : 'p', limits, (int)m->upstream_len, m->upstream);
        return n > 0 && (size_t)n < size ? (size_t)n : 0;
    }
    char until[24];
    if (m->until_ms == SL_CLUSTER_NEVER)
        snprintf(until, sizeof(until), "never");
    else if (m->until_ms < 0)
        snprintf(until, sizeof(until), "-");
    else
        snprintf(until, sizeof(until), "%" PRId64, m->until_ms);
    int n = snprintf(out, size, "v1 %.*s %s %s %" PRIu32 " %" PRId64 " %.*s", (int)m->origin_len, m->origin,
                     op_slugs[m->op], until, m->consecutive, m->grace_ms < 0 ? 0 : m->grace_ms,
                     (int)m->upstream_len, m->upstream);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

/* The next space-separated field of [*p, end): false when there is none. */
static bool
next_field(const char **p, const char *end, const char **field, size_t *len)
{
    const char *s = *p;
    const char *sp = memchr(s, ' ', (size_t)(end - s));
    if (sp == NULL || sp == s)
        return false;
    *field = s;
    *len = (size_t)(sp - s);
    *p = sp + 1;
    return true;
}

/* A decimal number of at most 18 digits (no sign): false otherwise. */
static bool
parse_number(const char *s, size_t len, int64_t *out)
{
    if (len == 0 || len > 18)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static bool
field_is(const char *f, size_t len, const char *word)
{
    return len == strlen(word) && memcmp(f, word, len) == 0;
}

static bool
slug_index(const char *f, size_t n, const char *const *slugs, size_t count, size_t *out)
{
    for (size_t i = 0; i < count; i++) {
        if (field_is(f, n, slugs[i])) {
            *out = i;
            return true;
        }
    }
    return false;
}

/* One PER/EVERY/MEASURE/AMOUNT. */
static bool
decode_limit(const char *s, size_t len, sl_limit_t *out)
{
    const char *parts[4];
    size_t lens[4], k = 0;
    const char *p = s, *end = s + len;
    while (k < 4) {
        const char *slash = k < 3 ? memchr(p, '/', (size_t)(end - p)) : end;
        if (slash == NULL)
            return false;
        parts[k] = p;
        lens[k++] = (size_t)(slash - p);
        p = slash + 1;
    }
    size_t per, measure;
    int64_t every, amount;
    if (!slug_index(parts[0], lens[0], per_slugs, 5, &per) || !parse_number(parts[1], lens[1], &every) ||
        every < 1 || every > UINT32_MAX || !slug_index(parts[2], lens[2], measure_slugs, 3, &measure) ||
        !parse_number(parts[3], lens[3], &amount))
        return false;
    *out = (sl_limit_t){.per = (sl_limit_per_t)per,
                        .every = (uint32_t)every,
                        .measure = (sl_limit_measure_t)measure,
                        .amount = amount};
    return true;
}

static bool
decode_limits(const char *s, size_t len, sl_cluster_msg_t *out)
{
    if (field_is(s, len, "-"))
        return true;
    const char *p = s, *end = s + len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        if (out->n_limits == SL_CLUSTER_MAX_LIMITS ||
            !decode_limit(p, (size_t)(stop - p), &out->limits[out->n_limits]))
            return false;
        out->n_limits++;
        p = comma != NULL ? comma + 1 : end;
        if (comma != NULL && p == end)
            return false;
    }
    return out->n_limits > 0;
}

bool
sl_cluster_msg_decode(const char *text, size_t len, sl_cluster_msg_t *out)
{
    const char *p = text, *end = text + len;
    const char *f;
    size_t n;
    *out = (sl_cluster_msg_t){0};
    if (!next_field(&p, end, &f, &n) || !field_is(f, n, "v1"))
        return false;
    if (!next_field(&p, end, &out->origin, &out->origin_len))
        return false;
    if (!next_field(&p, end, &f, &n))
        return false;
    size_t op = 0;
    while (op < SL_CLUSTER_OP_COUNT && !field_is(f, n, op_slugs[op]))
        op++;
    if (op == SL_CLUSTER_OP_COUNT)
        return false;
    out->op = (sl_cluster_op_t)op;
    if (!next_field(&p, end, &f, &n))
        return false;
    if (out->op == SL_CLUSTER_LIMITS) {
        if (n != 1 || (f[0] != 'p' && f[0] != 'k'))
            return false;
        out->subject_kind = f[0];
        out->until_ms = -1;
        if (!next_field(&p, end, &f, &n) || !decode_limits(f, n, out))
            return false;
        if (!next_field(&p, end, &f, &n) || !field_is(f, n, "-") || p >= end)
            return false;
        out->upstream = p;
        out->upstream_len = (size_t)(end - p);
        return true;
    }
    if (field_is(f, n, "never"))
        out->until_ms = SL_CLUSTER_NEVER;
    else if (field_is(f, n, "-"))
        out->until_ms = -1;
    else if (!parse_number(f, n, &out->until_ms))
        return false;
    int64_t v;
    if (!next_field(&p, end, &f, &n) || !parse_number(f, n, &v) || v > UINT32_MAX)
        return false;
    out->consecutive = (uint32_t)v;
    if (!next_field(&p, end, &f, &n) || !parse_number(f, n, &out->grace_ms))
        return false;
    if (p >= end)
        return false;
    out->upstream = p;
    out->upstream_len = (size_t)(end - p);
    return true;
}

size_t
sl_cluster_key(char *out, size_t size, const char *name, const char *kind, const char *id)
{
    int n = id != NULL ? snprintf(out, size, "{sl:%s}:%s:%s", name, kind, id)
                       : snprintf(out, size, "{sl:%s}:%s", name, kind);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

size_t
sl_cluster_limit_key(char *out, size_t size, const char *name, char subject_kind, const char *subject,
                     const sl_limit_t *limit, int64_t period_start_ms)
{
    const char *per = per_slugs[limit->per], *measure = measure_slugs[limit->measure];
    bool rolling = limit->per == SL_PER_MINUTE || limit->per == SL_PER_HOUR;
    int n = rolling ? snprintf(out, size, "{sl:%s}:win:%c:%s:%s:%" PRIu32 ":%s", name, subject_kind, subject,
                               per, limit->every, measure)
                    : snprintf(out, size, "{sl:%s}:period:%c:%s:%s:%s:%" PRId64, name, subject_kind, subject,
                               per, measure, period_start_ms);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

int64_t
sl_cluster_redis_ms_of(int64_t mono_ms, int64_t now_mono, int64_t now_wall, int64_t offset_ms)
{
    if (mono_ms == INT64_MAX)
        return SL_CLUSTER_NEVER;
    return mono_ms - now_mono + now_wall + offset_ms;
}

int64_t
sl_cluster_mono_ms_of(int64_t redis_ms, int64_t now_mono, int64_t now_wall, int64_t offset_ms)
{
    if (redis_ms == SL_CLUSTER_NEVER)
        return INT64_MAX;
    return redis_ms - offset_ms - now_wall + now_mono;
}

int64_t
sl_cluster_offset_ms(int64_t redis_ms, int64_t sent_wall, int64_t got_wall)
{
    return redis_ms - (sent_wall + (got_wall - sent_wall) / 2);
}

size_t
sl_cluster_ticket_name(char *out, size_t size, const char *instance, uint64_t id)
{
    int n = snprintf(out, size, "%s:%020llu", instance, (unsigned long long)id);
    return n < 0 || (size_t)n >= size ? 0 : (size_t)n;
}

char *
sl_cluster_config_record(uint64_t revision, const char *origin, const char *text, size_t text_len,
                         size_t *len)
{
    char head[256];
    int n = snprintf(head, sizeof(head), "%" PRIu64 " %s\n", revision, origin);
    size_t head_len = n > 0 && (size_t)n < sizeof(head) ? (size_t)n : 0;
    char *out = sl_xmalloc(head_len + text_len + 1);
    memcpy(out, head, head_len);
    memcpy(out + head_len, text, text_len);
    out[head_len + text_len] = '\0';
    *len = head_len + text_len;
    return out;
}

bool
sl_cluster_config_parse(const char *record, size_t len, uint64_t *revision, const char **origin,
                        size_t *origin_len, const char **text, size_t *text_len)
{
    const char *end = record + len, *p = record;
    const char *nl = memchr(record, '\n', len);
    const char *field;
    size_t field_len;
    int64_t rev;
    if (nl == NULL || !next_field(&p, nl, &field, &field_len) || !parse_number(field, field_len, &rev) ||
        p >= nl || memchr(p, ' ', (size_t)(nl - p)) != NULL)
        return false;
    *revision = (uint64_t)rev;
    *origin = p;
    *origin_len = (size_t)(nl - p);
    *text = nl + 1;
    *text_len = (size_t)(end - (nl + 1));
    return true;
}

bool
sl_cluster_config_is_newer(uint64_t revision, const char *origin, size_t origin_len, uint64_t last_revision,
                           const char *last_origin)
{
    if (revision != last_revision)
        return revision > last_revision;
    size_t last_len = strlen(last_origin);
    int c = memcmp(origin, last_origin, origin_len < last_len ? origin_len : last_len);
    return c > 0 || (c == 0 && origin_len > last_len);
}
