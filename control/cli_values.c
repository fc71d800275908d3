/*
 * The value parsers of sluicectl's command line: whole numbers, US dollars
 * into micro-dollars, durations, ws:// and wss:// URLs, and the key file's
 * trimming. Each either sets its out-parameter or leaves it untouched.
 */
#include "cli_internal.h"

#include <string.h>

#include "core/text.h"

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
