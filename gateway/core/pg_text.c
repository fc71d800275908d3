#include "pg_text.h"

#include <string.h>

#include "text.h"
#include "xalloc.h"

char *
sl_pg_array_literal(const char *const *cells, size_t n, size_t stride)
{
    sl_strbuf_t b = {0};
    sl_strbuf_append(&b, "{", 1);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            sl_strbuf_append(&b, ",", 1);
        const char *s = cells[i * stride];
        if (s == NULL) {
            sl_strbuf_append(&b, "NULL", 4);
            continue;
        }
        sl_strbuf_append(&b, "\"", 1);
        for (const char *run = s;; s++) {
            if (*s == '"' || *s == '\\' || *s == '\0') {
                sl_strbuf_append(&b, run, (size_t)(s - run));
                if (*s == '\0')
                    break;
                sl_strbuf_append(&b, "\\", 1);
                run = s;
            }
        }
        sl_strbuf_append(&b, "\"", 1);
    }
    sl_strbuf_append(&b, "}", 1);
    return sl_strbuf_finish(&b);
}

void
sl_pg_copy_line(sl_strbuf_t *out, const char *const *cells, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            sl_strbuf_append(out, "\t", 1);
        const char *s = cells[i];
        if (s == NULL) {
            sl_strbuf_append(out, "\\N", 2);
            continue;
        }
        for (const char *run = s;; s++) {
            char esc = *s == '\\' ? '\\' : *s == '\t' ? 't' : *s == '\n' ? 'n' : *s == '\r' ? 'r' : 0;
            if (esc == 0 && *s != '\0')
                continue;
            sl_strbuf_append(out, run, (size_t)(s - run));
            if (*s == '\0')
                break;
            char pair[2] = {'\\', esc};
            sl_strbuf_append(out, pair, 2);
            run = s + 1;
        }
    }
    sl_strbuf_append(out, "\n", 1);
}

char *
sl_pg_utf8_copy(const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s);
    sl_strbuf_t b = {0};
    size_t run = 0, i = 0;
    while (i < n) {
        size_t len = sl_utf8_len((const unsigned char *)s + i, n - i);
        if (len != 0 && len != SL_UTF8_CUT) {
            i += len;
            continue;
        }
        sl_strbuf_append(&b, s + run, i - run);
        sl_strbuf_append(&b, "\xef\xbf\xbd", 3);
        run = ++i;
    }
    sl_strbuf_append(&b, s + run, n - run);
    return sl_strbuf_finish(&b);
}

bool
sl_pg_sqlstate_transient(const char *sqlstate)
{
    if (sqlstate == NULL || strlen(sqlstate) != 5)
        return true;
    static const char *const classes[] = {"08", "40", "53", "57", "58"};
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        if (strncmp(sqlstate, classes[i], 2) == 0)
            return true;
    }
    return false;
}
