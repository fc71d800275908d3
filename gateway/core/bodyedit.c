#include "core/bodyedit.h"

#include <stdlib.h>
#include <string.h>

static int
by_offset(const void *a, const void *b)
{
    const sl_body_edit_t *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

char *
sl_body_apply(const char *body, size_t len, const sl_body_edit_t *edits, size_t n, size_t *out_len)
{
    if (n == 0)
        return NULL;
    sl_body_edit_t sorted[n];
    memcpy(sorted, edits, n * sizeof(*edits));
    qsort(sorted, n, sizeof(*sorted), by_offset);
    size_t total = len;
    for (size_t i = 0; i < n; i++)
        total = total - sorted[i].len + sorted[i].text_len;
    char *out = sl_xmalloc(total + 1);
    size_t from = 0, to = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + to, body + from, sorted[i].off - from);
        to += sorted[i].off - from;
        memcpy(out + to, sorted[i].text, sorted[i].text_len);
        to += sorted[i].text_len;
        from = sorted[i].off + sorted[i].len;
    }
    memcpy(out + to, body + from, len - from);
    to += len - from;
    out[to] = '\0';
    *out_len = to;
    return out;
}

#define LIT(s) s, sizeof(s) - 1

/* The first byte after the opening brace of the object at span (whitespace skipped), and whether it is empty.
 */
static size_t
inside_object(const char *body, sl_jspan_t span, bool *empty)
{
    size_t at = span.off + 1;
    size_t end = span.off + span.len - 1;
    size_t p = at;
    while (p < end && (body[p] == ' ' || body[p] == '\t' || body[p] == '\n' || body[p] == '\r'))
        p++;
    *empty = p == end;
    return at;
}

bool
sl_body_ask_for_usage(const char *body, size_t len, const sl_jscan_t *f, sl_body_edit_t *edit)
{
    if (f->include_usage.len == 4 && memcmp(body + f->include_usage.off, "true", 4) == 0)
        return false;
    if (f->include_usage.len > 0) {
        *edit = (sl_body_edit_t){f->include_usage.off, f->include_usage.len, LIT("true")};
        return true;
    }
    bool empty;
    if (f->stream_options.len > 0) {
        size_t at = inside_object(body, f->stream_options, &empty);
        *edit = empty ? (sl_body_edit_t){at, 0, LIT("\"include_usage\":true")}
                      : (sl_body_edit_t){at, 0, LIT("\"include_usage\":true,")};
        return true;
    }
    /*
     * The body is one object (jscan said so): its last non-space byte is the
     * closing brace. The member goes right before it, so that it is the last
     * stream_options and wins over one that is not an object ("stream_options":
     * null): the upstream reads the last of duplicate members.
     */
    size_t close = len;
    while (close > 0 && body[close - 1] != '}')
        close--;
    close = close > 0 ? close - 1 : 0;
    /* A body "{}" has nothing before the brace but its open: no comma. */
    size_t p = close;
    while (p > 0 && (body[p - 1] == ' ' || body[p - 1] == '\t' || body[p - 1] == '\n' || body[p - 1] == '\r'))
        p--;
    empty = p > 0 && body[p - 1] == '{';
    *edit = empty ? (sl_body_edit_t){close, 0, LIT("\"stream_options\":{\"include_usage\":true}")}
                  : (sl_body_edit_t){close, 0, LIT(",\"stream_options\":{\"include_usage\":true}")};
    return true;
}
