/*
 * The JSON walk (jwalk.h): each function reads forward from a pointer and
 * never past the end it is given.
 */
#include <string.h>

#include "core/jwalk.h"

const char *
sl_jval_skip_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* p at an opening quote: returns just past the closing one, or NULL when the string is cut. */
static const char *
skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\') {
            if (++p == end)
                return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

static bool
is_scalar_byte(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
           c == '+' || c == '.';
}

/* Containers are matched by depth only: a hint for the walk, not a validation, which is all a
 * classification (or picking a few counts) needs. */
const char *
sl_jval_skip_value(const char *p, const char *end)
{
    if (p >= end)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        size_t depth = 0;
        while (p < end) {
            if (*p == '"') {
                if ((p = skip_string(p, end)) == NULL)
                    return NULL;
                continue;
            }
            if (*p == '{' || *p == '[')
                depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
            p++;
        }
        return NULL;
    }
    const char *q = p;
    while (q < end && is_scalar_byte(*q))
        q++;
    return q > p ? q : NULL;
}

bool
sl_jwalk_open(sl_jval_t v, char open, sl_jwalk_t *w)
{
    const char *p = sl_jval_skip_space(v.p, v.end);
    if (p >= v.end || *p != open)
        return false;
    *w = (sl_jwalk_t){.p = p + 1, .end = v.end, .close = open == '{' ? '}' : ']', .first = true};
    return true;
}

bool
sl_jwalk_next(sl_jwalk_t *w, sl_jval_t *key, sl_jval_t *value)
{
    const char *p = sl_jval_skip_space(w->p, w->end);
    if (p < w->end && *p == w->close) {
        w->p = p + 1;
        return false;
    }
    if (!w->first) {
        if (p >= w->end || *p != ',')
            goto bad;
        p = sl_jval_skip_space(p + 1, w->end);
    }
    if (key != NULL) {
        const char *k = p;
        if (p >= w->end || *p != '"' || (p = skip_string(p, w->end)) == NULL)
            goto bad;
        *key = (sl_jval_t){k + 1, p - 1};
        p = sl_jval_skip_space(p, w->end);
        if (p >= w->end || *p != ':')
            goto bad;
        p = sl_jval_skip_space(p + 1, w->end);
    }
    const char *v_end = sl_jval_skip_value(p, w->end);
    if (v_end == NULL)
        goto bad;
    *value = (sl_jval_t){p, v_end};
    w->p = v_end;
    w->first = false;
    return true;
bad:
    w->bad = true;
    return false;
}

bool
sl_jval_is(sl_jval_t v, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t)(v.end - v.p) == n && memcmp(v.p, lit, n) == 0;
}

int64_t
sl_jval_count(sl_jval_t v)
{
    size_t n = (size_t)(v.end - v.p);
    if (n == 0 || n > 18)
        return -1;
    int64_t x = 0;
    for (const char *p = v.p; p < v.end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        x = x * 10 + (*p - '0');
    }
    return x;
}
