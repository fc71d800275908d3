#include "http1.h"

#include <string.h>
#include <strings.h>

#include "text.h"

static bool
is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* The next element of a comma-separated list in [*at, end), trimmed; false when none is left. */
static bool
next_element(const char **at, const char *end, const char **elem, size_t *len)
{
    const char *p = *at;
    while (p < end && (is_ows(*p) || *p == ','))
        p++;
    if (p == end)
        return false;
    const char *start = p;
    while (p < end && *p != ',')
        p++;
    const char *stop = p;
    while (stop > start && is_ows(stop[-1]))
        stop--;
    *elem = start;
    *len = (size_t)(stop - start);
    *at = p;
    return true;
}

/* Whether [s, s + len) is word, in any case (word is lowercase). */
static bool
is_word(const char *s, size_t len, const char *word)
{
    return len == strlen(word) && strncasecmp(s, word, len) == 0;
}

/* A Content-Length value (a list of equal numbers is allowed, RFC 9110 §8.6); false if it is not one. */
static bool
parse_length(const char *value, size_t len, uint64_t *out, bool *seen)
{
    const char *at = value, *end = value + len, *elem;
    size_t elen;
    bool any = false;
    while (next_element(&at, end, &elem, &elen)) {
        if (elen == 0 || elen > 19)
            return false;
        uint64_t n = 0;
        for (size_t i = 0; i < elen; i++) {
            if (elem[i] < '0' || elem[i] > '9')
                return false;
            n = n * 10 + (uint64_t)(elem[i] - '0');
        }
        if (*seen && n != *out)
            return false;
        *out = n;
        *seen = true;
        any = true;
    }
    return any;
}

bool
sl_http1_framing(int minor_version, int status, const sl_http1_field_t *fields, size_t n_fields,
                 sl_http1_framing_t *out)
{
    bool keep_alive = minor_version >= 1, has_length = false, has_coding = false, chunked_last = false;
    uint64_t length = 0;
    for (size_t i = 0; i < n_fields; i++) {
        const sl_http1_field_t *f = &fields[i];
        const char *at = f->value, *end = f->value + f->value_len, *elem;
        size_t elen;
        if (is_word(f->name, f->name_len, "connection")) {
            while (next_element(&at, end, &elem, &elen)) {
                if (is_word(elem, elen, "close"))
                    keep_alive = false;
                else if (is_word(elem, elen, "keep-alive") && minor_version == 0)
                    keep_alive = true;
            }
        } else if (is_word(f->name, f->name_len, "transfer-encoding")) {
            while (next_element(&at, end, &elem, &elen)) {
                has_coding = true;
                chunked_last = is_word(elem, elen, "chunked");
            }
        } else if (is_word(f->name, f->name_len, "content-length")) {
            if (!parse_length(f->value, f->value_len, &length, &has_length))
                return false;
        }
    }
    *out = (sl_http1_framing_t){.keep_alive = keep_alive};
    if ((status >= 100 && status < 200) || status == 204 || status == 304) {
        out->body = SL_HTTP1_NO_BODY;
    } else if (has_coding) {
        out->body = chunked_last ? SL_HTTP1_CHUNKED : SL_HTTP1_UNTIL_CLOSE;
        out->keep_alive = keep_alive && chunked_last && !has_length;
    } else if (has_length) {
        out->body = SL_HTTP1_LENGTH;
        out->content_length = length;
    } else {
        out->body = SL_HTTP1_UNTIL_CLOSE;
        out->keep_alive = false;
    }
    return true;
}

/* Where the decoder is in the chunked coding (RFC 9112 §7.1). */
enum {
    AT_SIZE,          /* the chunk-size's hex digits */
    AT_EXTENSION,     /* after the size: extensions (ignored) up to the line's end */
    AT_SIZE_LF,       /* the size line's CR was read */
    AT_DATA,          /* the chunk's data */
    AT_DATA_CR,       /* the CRLF after the data */
    AT_DATA_LF,       /* the CR after the data was read */
    AT_TRAILER_START, /* the start of a trailer line, or the final blank line */
    AT_TRAILER_LINE,  /* inside a trailer field line (ignored) */
    AT_FINAL_LF,      /* the final blank line's CR was read */
};

/* The size line ended: data follows, or (a zero size) the trailer section. */
static void
size_line_done(sl_chunked_t *d)
{
    d->state = d->left > 0 ? AT_DATA : AT_TRAILER_START;
    d->digits = 0;
}

sl_chunked_status_t
sl_chunked_decode(sl_chunked_t *d, char *buf, size_t *len, size_t *after)
{
    size_t in = 0, out = 0, n = *len;
    while (in < n) {
        char c = buf[in];
        switch (d->state) {
        case AT_SIZE: {
            int v = sl_hex_digit(c);
            if (v >= 0) {
                if (d->left > (UINT64_MAX >> 4) || d->digits == 16)
                    goto bad;
                d->left = d->left << 4 | (uint64_t)v;
                d->digits++;
                in++;
                break;
            }
            if (d->digits == 0)
                goto bad;
            if (c == ';' || is_ows(c)) {
                d->state = AT_EXTENSION;
            } else if (c == '\r') {
                d->state = AT_SIZE_LF;
            } else if (c == '\n') {
                size_line_done(d);
            } else {
                goto bad;
            }
            in++;
            break;
        }
        case AT_EXTENSION:
            if (c == '\r')
                d->state = AT_SIZE_LF;
            else if (c == '\n')
                size_line_done(d);
            in++;
            break;
        case AT_SIZE_LF:
            if (c != '\n')
                goto bad;
            size_line_done(d);
            in++;
            break;
        case AT_DATA: {
            size_t take = n - in;
            if ((uint64_t)take > d->left)
                take = (size_t)d->left;
            if (out != in)
                memmove(buf + out, buf + in, take);
            out += take;
            in += take;
            d->left -= take;
            if (d->left == 0)
                d->state = AT_DATA_CR;
            break;
        }
        case AT_DATA_CR:
            if (c == '\r')
                d->state = AT_DATA_LF;
            else if (c == '\n')
                d->state = AT_SIZE;
            else
                goto bad;
            in++;
            break;
        case AT_DATA_LF:
            if (c != '\n')
                goto bad;
            d->state = AT_SIZE;
            in++;
            break;
        case AT_TRAILER_START:
            in++;
            if (c == '\r') {
                d->state = AT_FINAL_LF;
            } else if (c == '\n') {
                goto end;
            } else {
                d->state = AT_TRAILER_LINE;
            }
            break;
        case AT_TRAILER_LINE:
            if (c == '\n')
                d->state = AT_TRAILER_START;
            in++;
            break;
        case AT_FINAL_LF:
            if (c != '\n')
                goto bad;
            in++;
            goto end;
        default:
            goto bad;
        }
    }
    *len = out;
    return SL_CHUNKED_MORE;
end:
    *len = out;
    *after = n - in;
    return SL_CHUNKED_END;
bad:
    *len = out;
    return SL_CHUNKED_BAD;
}
