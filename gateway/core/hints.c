#include "hints.h"

#include <string.h>

#include "core/civil.h"

/* ---- numbers ------------------------------------------------------------------------------------- */

/*
 * A non-negative decimal as written. whole stops growing once it is past
 * SL_HINT_MAX_MS (only "too big" matters then), so no figure can overflow.
 */
typedef struct {
    int64_t whole;
    int64_t micro; /* the first six fraction digits, in millionths */
    bool more;     /* a non-zero fraction digit beyond the sixth */
} decimal_t;

static bool
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static char
ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + ('a' - 'A')) : c;
}

static bool
is_alpha(char c)
{
    char l = ascii_lower(c);
    return l >= 'a' && l <= 'z';
}

/* Reads digits ["." digits] at s[*i..n) and advances *i past them; a dot without a digit after it is not
 * read. */
static bool
read_decimal(const char *s, size_t n, size_t *i, decimal_t *out)
{
    size_t k = *i;
    if (k >= n || !is_digit(s[k]))
        return false;
    decimal_t d = {0};
    for (; k < n && is_digit(s[k]); k++) {
        if (d.whole <= SL_HINT_MAX_MS)
            d.whole = d.whole * 10 + (s[k] - '0');
    }
    if (k + 1 < n && s[k] == '.' && is_digit(s[k + 1])) {
        int64_t place = 100000;
        for (k++; k < n && is_digit(s[k]); k++) {
            if (place > 0) {
                d.micro += (s[k] - '0') * place;
                place /= 10;
            } else if (s[k] != '0') {
                d.more = true;
            }
        }
    }
    *i = k;
    *out = d;
    return true;
}

/* d units of unit_ms each, rounded up to whole ms and capped; 0 only for an exact zero. */
static int64_t
decimal_ms(decimal_t d, int64_t unit_ms)
{
    if (d.whole > SL_HINT_MAX_MS / unit_ms)
        return SL_HINT_MAX_MS;
    /* Digits past the sixth count as one more millionth: the pause may end a hair late, never early. */
    int64_t frac = ((d.micro + (d.more ? 1 : 0)) * unit_ms + 999999) / 1000000;
    int64_t ms = d.whole * unit_ms + frac;
    return ms < SL_HINT_MAX_MS ? ms : SL_HINT_MAX_MS;
}

static bool
is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static void
trim_ows(const char **s, size_t *n)
{
    while (*n > 0 && is_ows((*s)[0])) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && is_ows((*s)[*n - 1]))
        (*n)--;
}

/*
 * A header value that must be one decimal number and nothing else. The
 * thresholds ("under 1 ms" / "under 1 s" count as missing) are one whole
 * unit, so the test is on the whole part, before any rounding up.
 */
static int64_t
header_number(const char *value, size_t len, int64_t unit_ms)
{
    trim_ows(&value, &len);
    size_t i = 0;
    decimal_t d;
    if (!read_decimal(value, len, &i, &d) || i != len || d.whole < 1)
        return -1;
    return decimal_ms(d, unit_ms);
}

int64_t
sl_hint_parse_retry_after_ms(const char *value, size_t len)
{
    return header_number(value, len, 1);
}

/* ---- HTTP-date ----------------------------------------------------------------------------------- */

static const char *const day_names[] = {"mon",      "tue",    "wed",      "thu",     "fri",
                                        "sat",      "sun",    "monday",   "tuesday", "wednesday",
                                        "thursday", "friday", "saturday", "sunday"};

static const char *const month_names[12] = {"jan", "feb", "mar", "apr", "may", "jun",
                                            "jul", "aug", "sep", "oct", "nov", "dec"};

static size_t
letters_at(const char *s, size_t n, size_t i)
{
    size_t k = i;
    while (k < n && is_alpha(s[k]))
        k++;
    return k - i;
}

/* Whether s[0..n) equals the lower-case word, ignoring ASCII case. */
static bool
word_is(const char *s, size_t n, const char *word)
{
    if (strlen(word) != n)
        return false;
    for (size_t k = 0; k < n; k++) {
        if (ascii_lower(s[k]) != word[k])
            return false;
    }
    return true;
}

/* The index of the word at s[*i..n) in names (a whole run of letters), advancing *i; -1 when it is none. */
static int
read_name(const char *s, size_t n, size_t *i, const char *const *names, size_t count)
{
    size_t w = letters_at(s, n, *i);
    for (size_t k = 0; k < count; k++) {
        if (word_is(s + *i, w, names[k])) {
            *i += w;
            return (int)k;
        }
    }
    return -1;
}

static bool
read_char(const char *s, size_t n, size_t *i, char c)
{
    if (*i >= n || s[*i] != c)
        return false;
    (*i)++;
    return true;
}

/* Exactly count digits. */
static bool
read_fixed(const char *s, size_t n, size_t *i, size_t count, int *out)
{
    if (*i > n || n - *i < count)
        return false;
    int v = 0;
    for (size_t k = 0; k < count; k++) {
        if (!is_digit(s[*i + k]))
            return false;
        v = v * 10 + (s[*i + k] - '0');
    }
    *i += count;
    *out = v;
    return true;
}

/* "HH:MM:SS" */
static bool
read_time(const char *s, size_t n, size_t *i, int *h, int *m, int *sec)
{
    return read_fixed(s, n, i, 2, h) && read_char(s, n, i, ':') && read_fixed(s, n, i, 2, m) &&
           read_char(s, n, i, ':') && read_fixed(s, n, i, 2, sec);
}

static bool
read_gmt(const char *s, size_t n, size_t *i)
{
    size_t w = letters_at(s, n, *i);
    if (!word_is(s + *i, w, "gmt"))
        return false;
    *i += w;
    return true;
}

/* The Gregorian year of a Unix time in ms. */
static int64_t
year_of(int64_t ms)
{
    int64_t y;
    int m, d;
    sl_civil_from_days(sl_floor_div(ms, 86400000), &y, &m, &d);
    return y;
}

bool
sl_http_date_parse(const char *value, size_t len, int64_t now_wall_ms, int64_t *out_ms)
{
    const char *s = value;
    size_t n = len, i = 0;
    trim_ows(&s, &n);
    int day, month, year, hour, min, sec;
    int64_t full_year;
    if (read_name(s, n, &i, day_names, sizeof(day_names) / sizeof(day_names[0])) < 0)
        return false;
    if (read_char(s, n, &i, ',')) {
        if (!read_char(s, n, &i, ' ') || !read_fixed(s, n, &i, 2, &day))
            return false;
        /* The separator after the day tells IMF-fixdate (space, yyyy) from RFC 850 (dash, yy). */
        char sep = i < n ? s[i] : '\0';
        if (sep != ' ' && sep != '-')
            return false;
        i++;
        if ((month = read_name(s, n, &i, month_names, 12)) < 0 || !read_char(s, n, &i, sep) ||
            !read_fixed(s, n, &i, sep == ' ' ? 4 : 2, &year))
            return false;
        full_year = year;
        if (sep == '-') {
            int64_t now_year = year_of(now_wall_ms);
            full_year = now_year - (now_year - sl_floor_div(now_year, 100) * 100) + year;
            if (full_year > now_year + 50)
                full_year -= 100;
        }
        if (!read_char(s, n, &i, ' ') || !read_time(s, n, &i, &hour, &min, &sec) ||
            !read_char(s, n, &i, ' ') || !read_gmt(s, n, &i))
            return false;
    } else {
        /* asctime: the day of the month is two digits or a space and one digit. */
        if (!read_char(s, n, &i, ' ') || (month = read_name(s, n, &i, month_names, 12)) < 0 ||
            !read_char(s, n, &i, ' '))
            return false;
        if (!(read_char(s, n, &i, ' ') ? read_fixed(s, n, &i, 1, &day) : read_fixed(s, n, &i, 2, &day)))
            return false;
        if (!read_char(s, n, &i, ' ') || !read_time(s, n, &i, &hour, &min, &sec) ||
            !read_char(s, n, &i, ' ') || !read_fixed(s, n, &i, 4, &year))
            return false;
        full_year = year;
    }
    month++;
    if (i != n || day < 1 || day > sl_civil_month_days(full_year, month) || hour > 23 || min > 59 || sec > 60)
        return false;
    /* Only an RFC 850 year read against an absurd now can leave int64 range; refuse it rather than wrap. */
    int64_t ms;
    if (__builtin_mul_overflow(sl_civil_days(full_year, month, day), 86400000, &ms) ||
        __builtin_add_overflow(ms, ((int64_t)hour * 3600 + min * 60 + sec) * 1000, &ms))
        return false;
    *out_ms = ms;
    return true;
}

int64_t
sl_hint_parse_retry_after(const char *value, size_t len, int64_t now_wall_ms)
{
    trim_ows(&value, &len);
    /* Every HTTP-date starts with a day name, so a leading digit means delta-seconds. */
    if (len > 0 && is_digit(value[0]))
        return header_number(value, len, 1000);
    int64_t at, ahead;
    if (!sl_http_date_parse(value, len, now_wall_ms, &at))
        return -1;
    if (__builtin_sub_overflow(at, now_wall_ms, &ahead))
        ahead = at > now_wall_ms ? INT64_MAX : INT64_MIN;
    if (ahead < 1000)
        return -1;
    return ahead < SL_HINT_MAX_MS ? ahead : SL_HINT_MAX_MS;
}

/* ---- headers ------------------------------------------------------------------------------------- */

static sl_hint_t
headers_hint(const sl_headers_t *headers, int64_t now_wall_ms)
{
    const char *v;
    size_t n;
    int64_t ms;
    if (sl_headers_find(headers, "retry-after-ms", &v, &n) && (ms = sl_hint_parse_retry_after_ms(v, n)) > 0)
        return (sl_hint_t){ms, SL_HINT_RETRY_AFTER_MS};
    if (sl_headers_find(headers, "retry-after", &v, &n) &&
        (ms = sl_hint_parse_retry_after(v, n, now_wall_ms)) > 0)
        return (sl_hint_t){ms, SL_HINT_RETRY_AFTER};
    return (sl_hint_t){-1, SL_HINT_NONE};
}

int64_t
sl_hint_from_headers(const sl_headers_t *headers, int64_t now_wall_ms)
{
    return headers_hint(headers, now_wall_ms).ms;
}

/* ---- body ---------------------------------------------------------------------------------------- */

static const struct {
    const char *word;
    int64_t ms;
} units[] = {
    {"ms", 1},      {"msec", 1},     {"msecs", 1},     {"millisecond", 1}, {"milliseconds", 1},
    {"s", 1000},    {"sec", 1000},   {"secs", 1000},   {"second", 1000},   {"seconds", 1000},
    {"m", 60000},   {"min", 60000},  {"mins", 60000},  {"minute", 60000},  {"minutes", 60000},
    {"h", 3600000}, {"hr", 3600000}, {"hrs", 3600000}, {"hour", 3600000},  {"hours", 3600000},
};

/* The ms per unit of the unit word at s[*i..n), advancing *i past it; 0 when there is none. */
static int64_t
read_unit(const char *s, size_t n, size_t *i)
{
    size_t w = letters_at(s, n, *i);
    for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
        if (word_is(s + *i, w, units[k].word)) {
            *i += w;
            return units[k].ms;
        }
    }
    return 0;
}

/* A phrase's duration at s[i..n): compact "1m30s" / "250ms", or spelled "20 seconds". ms, 0 for zero, -1. */
static int64_t
phrase_duration(const char *s, size_t n, size_t i)
{
    decimal_t d;
    if (!read_decimal(s, n, &i, &d))
        return -1;
    bool spelled = i + 1 < n && s[i] == ' ' && is_alpha(s[i + 1]);
    i += spelled;
    int64_t unit = read_unit(s, n, &i);
    if (unit == 0)
        return -1;
    int64_t total = decimal_ms(d, unit);
    while (!spelled && i < n && is_digit(s[i])) {
        read_decimal(s, n, &i, &d);
        if ((unit = read_unit(s, n, &i)) == 0)
            return -1;
        int64_t part = decimal_ms(d, unit);
        total = part < SL_HINT_MAX_MS - total ? total + part : SL_HINT_MAX_MS;
    }
    return total;
}

static const char *const phrases[] = {"try again in", "retry in", "retry after"};

static int64_t
phrase_hint(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && is_alpha(s[i - 1]))
            continue;
        for (size_t p = 0; p < sizeof(phrases) / sizeof(phrases[0]); p++) {
            size_t plen = strlen(phrases[p]);
            if (n - i <= plen || !word_is(s + i, plen, phrases[p]) || s[i + plen] != ' ')
                continue;
            size_t j = i + plen;
            while (j < n && s[j] == ' ')
                j++;
            int64_t ms = phrase_duration(s, n, j);
            if (ms > 0)
                return ms;
        }
    }
    return -1;
}

/* Just past the JSON string token whose opening quote is s[i] (n when it is not closed). */
static size_t
string_end(const char *s, size_t n, size_t i)
{
    for (size_t k = i + 1; k < n; k++) {
        if (s[k] == '\\')
            k++;
        else if (s[k] == '"')
            return k + 1;
    }
    return n;
}

static bool
is_json_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The value after a "retryDelay" name ending at s[i]: `: "<seconds>s"`. ms, 0 for zero, -1. */
static int64_t
retry_delay_value(const char *s, size_t n, size_t i)
{
    while (i < n && is_json_ws(s[i]))
        i++;
    if (!read_char(s, n, &i, ':'))
        return -1;
    while (i < n && is_json_ws(s[i]))
        i++;
    decimal_t d;
    if (!read_char(s, n, &i, '"') || !read_decimal(s, n, &i, &d) || !read_char(s, n, &i, 's') ||
        !read_char(s, n, &i, '"'))
        return -1;
    return decimal_ms(d, 1000);
}

/*
 * Walking string token by string token keeps the scan from matching the
 * name inside some other string (a message quoting it): a raw quote in JSON
 * only ever opens or closes a string.
 */
static int64_t
retry_delay_hint(const char *s, size_t n)
{
    static const char name[] = "\"retryDelay\"";
    for (size_t i = 0; i < n;) {
        if (s[i] != '"') {
            i++;
            continue;
        }
        size_t end = string_end(s, n, i);
        int64_t ms;
        if (end - i == sizeof(name) - 1 && memcmp(s + i, name, end - i) == 0 &&
            (ms = retry_delay_value(s, n, end)) > 0)
            return ms;
        i = end;
    }
    return -1;
}

int64_t
sl_hint_from_body(const char *body, size_t len)
{
    if (body == NULL)
        return -1;
    if (len > SL_HINT_MAX_BODY)
        len = SL_HINT_MAX_BODY;
    int64_t ms = retry_delay_hint(body, len);
    return ms > 0 ? ms : phrase_hint(body, len);
}

/* ---- combined ------------------------------------------------------------------------------------ */

sl_hint_t
sl_hint_find(const sl_headers_t *headers, const char *body, size_t body_len, int64_t now_wall_ms)
{
    if (headers != NULL) {
        sl_hint_t h = headers_hint(headers, now_wall_ms);
        if (h.source != SL_HINT_NONE)
            return h;
    }
    int64_t ms = sl_hint_from_body(body, body_len);
    return ms > 0 ? (sl_hint_t){ms, SL_HINT_BODY} : (sl_hint_t){-1, SL_HINT_NONE};
}

static const char *const source_names[SL_HINT_SOURCE_COUNT] = {
    [SL_HINT_NONE] = "",
    [SL_HINT_RETRY_AFTER_MS] = "retry-after-ms",
    [SL_HINT_RETRY_AFTER] = "retry-after",
    [SL_HINT_BODY] = "body",
};

const char *
sl_hint_source_name(sl_hint_source_t source)
{
    return source < SL_HINT_SOURCE_COUNT ? source_names[source] : "";
}
