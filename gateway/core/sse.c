/*
 * SSE framing in two passes over each event: a resumable search for the blank
 * line that ends it (each byte looked at once, whatever the read sizes), then
 * one walk over the complete event's lines to pick out its fields.
 */
#include "core/sse.h"

#include <string.h>

static const char utf8_bom[3] = {'\xEF', '\xBB', '\xBF'};

void
sl_sse_init(sl_sse_scanner_t *s, size_t max_event, char *scratch, size_t scratch_cap)
{
    *s = (sl_sse_scanner_t){
        .max_event = max_event,
        .scratch = scratch,
        .scratch_cap = scratch ? scratch_cap : 0,
        .line = SL_SSE_AT_LINE_START,
    };
}

static void
reset_pending(sl_sse_scanner_t *s)
{
    s->scanned = 0;
    s->first_line = 0;
    s->line = SL_SSE_AT_LINE_START;
    s->seen_line = false;
}

/*
 * The first CR or LF in buf[from..end), or end: vectorised scans rather than
 * a byte loop. They go a window at a time, so that lines ended by CR alone
 * cannot make the search for an LF run to the end of the buffer each time.
 */
static size_t
line_end(const char *buf, size_t from, size_t end)
{
    enum { WINDOW = 512 };
    while (from < end) {
        size_t window_end = end - from > WINDOW ? from + WINDOW : end;
        const char *lf = memchr(buf + from, '\n', window_end - from);
        size_t stop = lf != NULL ? (size_t)(lf - buf) : window_end;
        const char *cr = memchr(buf + from, '\r', stop - from);
        if (cr != NULL)
            return (size_t)(cr - buf);
        if (lf != NULL)
            return stop;
        from = window_end;
    }
    return end;
}

/*
 * Advances the search over buf[s->scanned..limit). Returns the offset just
 * past the terminator of the blank line that ends the event, or 0 when the
 * event does not end before limit. A CR that ends the blank line ends the
 * event at once, without waiting to see whether an LF follows (the caller
 * takes it along when it is already there): an LF that arrives later reads
 * as a blank line leading the next event, which SSE ignores, so every split
 * of a CRLF stream yields the same events.
 */
static size_t
search_end(sl_sse_scanner_t *s, const char *buf, size_t limit)
{
    for (size_t i = s->scanned; i < limit; i++) {
        if (s->line == SL_SSE_IN_LINE && (i = line_end(buf, i, limit)) == limit)
            break;
        char c = buf[i];
        if (c == '\n' && s->line == SL_SSE_AFTER_CR) {
            s->line = SL_SSE_AT_LINE_START;
            continue;
        }
        if (c != '\r' && c != '\n') {
            if (!s->seen_line) {
                s->seen_line = true;
                s->first_line = i;
            }
            s->line = SL_SSE_IN_LINE;
            continue;
        }
        if (s->line != SL_SSE_IN_LINE && s->seen_line)
            return i + 1;
        s->line = c == '\r' ? SL_SSE_AFTER_CR : SL_SSE_AT_LINE_START;
    }
    s->scanned = limit;
    return 0;
}

/* Appends one data line's value; false when a join does not fit the scratch. */
static bool
add_data(sl_sse_scanner_t *s, sl_sse_event_t *ev, const char *value, size_t n)
{
    if (ev->data_lines++ == 0) {
        ev->data = value;
        ev->data_len = n;
        return true;
    }
    size_t need = ev->data_len + 1 + n;
    if (need > s->scratch_cap)
        return false;
    if (ev->data != s->scratch) {
        memcpy(s->scratch, ev->data, ev->data_len);
        ev->data = s->scratch;
    }
    s->scratch[ev->data_len] = '\n';
    memcpy(s->scratch + ev->data_len + 1, value, n);
    ev->data_len = need;
    return true;
}

/* Reads the fields of the complete event buf[from..end) into *ev; false when its data does not fit. */
static bool
read_fields(sl_sse_scanner_t *s, const char *buf, size_t from, size_t end, sl_sse_event_t *ev)
{
    size_t p = from;
    while (p < end) {
        size_t eol = line_end(buf, p, end);
        const char *line = buf + p;
        size_t n = eol - p;
        p = eol + 1;
        if (eol + 1 < end && buf[eol] == '\r' && buf[eol + 1] == '\n')
            p++;
        if (n == 0 || line[0] == ':')
            continue;
        const char *colon = memchr(line, ':', n);
        size_t name_len = colon ? (size_t)(colon - line) : n;
        const char *value = colon ? colon + 1 : line + n;
        size_t value_len = (size_t)(line + n - value);
        if (value_len > 0 && value[0] == ' ') {
            value++;
            value_len--;
        }
        if (name_len == 5 && memcmp(line, "event", 5) == 0) {
            ev->name = value_len ? value : NULL;
            ev->name_len = value_len;
        } else if (name_len == 4 && memcmp(line, "data", 4) == 0) {
            if (!add_data(s, ev, value, value_len))
                return false;
        }
        /* id:, retry: and unknown fields carry nothing a gateway acts on */
    }
    ev->comment_only = ev->data_lines == 0 && ev->name == NULL;
    return true;
}

sl_sse_status_t
sl_sse_next(sl_sse_scanner_t *s, const char *buf, size_t len, sl_sse_event_t *ev)
{
    if (len == 0)
        return SL_SSE_MORE;
    if (!s->started) {
        size_t n = len < sizeof utf8_bom ? len : sizeof utf8_bom;
        if (memcmp(buf, utf8_bom, n) == 0) {
            if (len < sizeof utf8_bom)
                return SL_SSE_MORE;
            s->scanned = sizeof utf8_bom;
        }
        s->started = true;
    }
    size_t limit = len < s->max_event ? len : s->max_event;
    size_t end = search_end(s, buf, limit);
    if (end == 0)
        return len >= s->max_event ? SL_SSE_TOO_LARGE : SL_SSE_MORE;
    if (buf[end - 1] == '\r' && end < limit && buf[end] == '\n')
        end++; /* a CRLF that has fully arrived stays with its event */

    sl_sse_event_t got = {.len = end};
    bool fits = read_fields(s, buf, s->first_line, end, &got);
    reset_pending(s);
    if (!fits)
        return SL_SSE_TOO_LARGE;
    *ev = got;
    return SL_SSE_EVENT;
}

bool
sl_sse_event_is(const sl_sse_event_t *ev, const char *name)
{
    size_t n = strlen(name);
    return ev->name != NULL && ev->name_len == n && memcmp(ev->name, name, n) == 0;
}
