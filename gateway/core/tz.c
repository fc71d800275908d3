/*
 * TZif and POSIX TZ strings (see tz.h): parsing with every count and index
 * checked against the bytes before it is used, and the conversions.
 */
#include "core/tz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/civil.h"
#include "core/text.h"
#include "core/xalloc.h"

#define DAY_SECS       86400
#define HEADER_LEN     44
#define MAX_UTOFF      93599 /* 25:59:59, RFC 8536's bound */
#define MAX_RULE_HOURS 167   /* RFC 8536 3.3.1 */
#define MAX_TYPES      256   /* an index is one byte */
/* The years around an instant whose switches decide it (a switch may lie 167 h + 26 h outside its year). */
#define RULE_YEARS 5

/* ---- POSIX TZ strings ------------------------------------------------------------------------------- */

typedef struct {
    const char *p, *end;
} cursor_t;

static bool
at_end(const cursor_t *c)
{
    return c->p == c->end;
}

static bool
is_alpha(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static bool
is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

/* A name: 3 or more letters, or <3 or more letters, digits, '+' or '-'>. */
static bool
parse_name(cursor_t *c, char out[SL_TZ_ABBR_MAX])
{
    const char *start = c->p;
    size_t n = 0;
    if (!at_end(c) && *c->p == '<') {
        start = ++c->p;
        while (!at_end(c) && (is_alpha(*c->p) || is_digit(*c->p) || *c->p == '+' || *c->p == '-'))
            c->p++;
        n = (size_t)(c->p - start);
        if (at_end(c) || *c->p != '>')
            return false;
        c->p++;
    } else {
        while (!at_end(c) && is_alpha(*c->p))
            c->p++;
        n = (size_t)(c->p - start);
    }
    if (n < 3 || n >= SL_TZ_ABBR_MAX)
        return false;
    memcpy(out, start, n);
    out[n] = '\0';
    return true;
}

/* An unsigned decimal of at most max. */
static bool
parse_number(cursor_t *c, int max, int *out)
{
    if (at_end(c) || !is_digit(*c->p))
        return false;
    int v = 0;
    while (!at_end(c) && is_digit(*c->p)) {
        v = v * 10 + (*c->p++ - '0');
        if (v > max)
            return false;
    }
    *out = v;
    return true;
}

/* [+-]hh[:mm[:ss]] with hh up to max_hours, as seconds. */
static bool
parse_hms(cursor_t *c, int max_hours, int32_t *out)
{
    int sign = 1, h, m = 0, s = 0;
    if (!at_end(c) && (*c->p == '+' || *c->p == '-'))
        sign = *c->p++ == '-' ? -1 : 1;
    if (!parse_number(c, max_hours, &h))
        return false;
    if (!at_end(c) && *c->p == ':') {
        c->p++;
        if (!parse_number(c, 59, &m))
            return false;
        if (!at_end(c) && *c->p == ':') {
            c->p++;
            if (!parse_number(c, 59, &s))
                return false;
        }
    }
    *out = sign * (h * 3600 + m * 60 + s);
    return true;
}

/* date[/time]: Jn, n or Mm.w.d, the time 02:00 unless given. */
static bool
parse_change(cursor_t *c, sl_tz_change_t *out)
{
    sl_tz_change_t ch = {.secs = 7200};
    if (!at_end(c) && *c->p == 'J') {
        c->p++;
        ch.form = SL_TZ_JULIAN_NO_LEAP;
        if (!parse_number(c, 365, &ch.day) || ch.day < 1)
            return false;
    } else if (!at_end(c) && *c->p == 'M') {
        c->p++;
        ch.form = SL_TZ_MONTH_WEEK_DAY;
        if (!parse_number(c, 12, &ch.month) || ch.month < 1 || at_end(c) || *c->p++ != '.' ||
            !parse_number(c, 5, &ch.week) || ch.week < 1 || at_end(c) || *c->p++ != '.' ||
            !parse_number(c, 6, &ch.day))
            return false;
    } else {
        ch.form = SL_TZ_JULIAN;
        if (!parse_number(c, 365, &ch.day))
            return false;
    }
    if (!at_end(c) && *c->p == '/') {
        c->p++;
        if (!parse_hms(c, MAX_RULE_HOURS, &ch.secs))
            return false;
    }
    *out = ch;
    return true;
}

static bool
parse_rule(const char *s, size_t n, sl_tz_rule_t *out)
{
    cursor_t c = {s, s + n};
    sl_tz_rule_t r = {0};
    int32_t west;
    if (!parse_name(&c, r.std.abbr) || !parse_hms(&c, 24, &west))
        return false;
    r.std.utoff = -west;
    if (!at_end(&c)) {
        r.has_dst = true;
        r.dst.is_dst = true;
        if (!parse_name(&c, r.dst.abbr))
            return false;
        r.dst.utoff = r.std.utoff + 3600;
        if (!at_end(&c) && *c.p != ',') {
            if (!parse_hms(&c, 24, &west))
                return false;
            r.dst.utoff = -west;
        }
        if (at_end(&c)) {
            r.start = (sl_tz_change_t){SL_TZ_MONTH_WEEK_DAY, .day = 0, .month = 3, .week = 2, .secs = 7200};
            r.end = (sl_tz_change_t){SL_TZ_MONTH_WEEK_DAY, .day = 0, .month = 11, .week = 1, .secs = 7200};
        } else if (*c.p++ != ',' || !parse_change(&c, &r.start) || at_end(&c) || *c.p++ != ',' ||
                   !parse_change(&c, &r.end)) {
            return false;
        }
    }
    if (!at_end(&c))
        return false;
    *out = r;
    return true;
}

/* The instant year's switch ch happens, ch.secs being local time at utoff. */
static int64_t
change_instant(const sl_tz_change_t *ch, int64_t year, int32_t utoff)
{
    int64_t day = sl_civil_days(year, 1, 1);
    switch (ch->form) {
    case SL_TZ_JULIAN_NO_LEAP:
        day += ch->day - 1 + (sl_civil_is_leap(year) && ch->day >= 60);
        break;
    case SL_TZ_JULIAN:
        day += ch->day;
        break;
    case SL_TZ_MONTH_WEEK_DAY: {
        int64_t first = sl_civil_days(year, ch->month, 1);
        int mday = 1 + (ch->day - sl_civil_weekday(first) + 7) % 7 + (ch->week - 1) * 7;
        while (mday > sl_civil_month_days(year, ch->month))
            mday -= 7;
        day = first + mday - 1;
        break;
    }
    }
    return day * DAY_SECS + ch->secs - utoff;
}

typedef struct {
    int64_t at;
    bool to_dst;
} switch_t;

/*
 * The rule's type at t, and the next switch after t. The switches of the
 * years around t's are sorted; the last at or before t decides. Ties go to
 * the later switch of the rule's own order (start before end in a year), so
 * an end that meets the next year's start (J365/25 with 0/0: DST all year)
 * leaves DST on, and a start that meets its own end leaves it off.
 */
static const sl_tz_type_t *
rule_type_at(const sl_tz_rule_t *r, int64_t t, int64_t *next)
{
    *next = INT64_MAX;
    if (!r->has_dst)
        return &r->std;
    int64_t y;
    int m, d;
    sl_civil_from_days(sl_floor_div(t, DAY_SECS), &y, &m, &d);
    switch_t sw[2 * RULE_YEARS];
    size_t n = 0;
    for (int64_t k = y - RULE_YEARS / 2; k <= y + RULE_YEARS / 2; k++) {
        sw[n++] = (switch_t){change_instant(&r->start, k, r->std.utoff), true};
        sw[n++] = (switch_t){change_instant(&r->end, k, r->dst.utoff), false};
    }
    /* Insertion sort, stable: equal instants keep the rule's order. */
    for (size_t i = 1; i < n; i++) {
        switch_t v = sw[i];
        size_t j = i;
        for (; j > 0 && sw[j - 1].at > v.at; j--)
            sw[j] = sw[j - 1];
        sw[j] = v;
    }
    bool dst = !sw[0].to_dst;
    for (size_t i = 0; i < n; i++) {
        if (sw[i].at > t) {
            *next = sw[i].at;
            break;
        }
        dst = sw[i].to_dst;
    }
    return dst ? &r->dst : &r->std;
}

/* ---- TZif ------------------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t left;
} bytes_t;

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t
be64(const uint8_t *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

static const uint8_t *
take(bytes_t *b, uint64_t n)
{
    if (n > b->left)
        return NULL;
    const uint8_t *at = b->p;
    b->p += n;
    b->left -= (size_t)n;
    return at;
}

typedef struct {
    uint32_t isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt;
} counts_t;

/* The header: magic, version (0 for version 1, else its digit), the six counts. */
static bool
read_header(bytes_t *b, int *version, counts_t *c, char *err, size_t err_size)
{
    const uint8_t *h = take(b, HEADER_LEN);
    if (h == NULL) {
        sl_text_reason(err, err_size, "truncated TZif header");
        return false;
    }
    if (memcmp(h, "TZif", 4) != 0) {
        sl_text_reason(err, err_size, "not a TZif file (no TZif magic)");
        return false;
    }
    if (h[4] != 0 && (h[4] < '2' || h[4] > '4')) {
        sl_text_reason(err, err_size, "unknown TZif version 0x%02x", h[4]);
        return false;
    }
    *version = h[4] == 0 ? 1 : h[4] - '0';
    *c = (counts_t){be32(h + 20), be32(h + 24), be32(h + 28), be32(h + 32), be32(h + 36), be32(h + 40)};
    if (c->typecnt == 0 || c->typecnt > MAX_TYPES || c->charcnt == 0 ||
        (c->isutcnt != 0 && c->isutcnt != c->typecnt) || (c->isstdcnt != 0 && c->isstdcnt != c->typecnt)) {
        sl_text_reason(err, err_size, "inconsistent TZif counts");
        return false;
    }
    return true;
}

/* The size of the data block the header announces, times of time_size bytes. */
static uint64_t
block_size(const counts_t *c, unsigned time_size)
{
    return (uint64_t)c->timecnt * (time_size + 1) + (uint64_t)c->typecnt * 6 + c->charcnt +
           (uint64_t)c->leapcnt * (time_size + 4) + c->isstdcnt + c->isutcnt;
}

/*
 * The data block into a fresh zone (one allocation: the struct, then the
 * times, types and indices). Every value is checked; NULL on the first bad one.
 */
static sl_tz_t *
read_block(bytes_t *b, const counts_t *c, unsigned time_size, char *err, size_t err_size)
{
    const uint8_t *blk = take(b, block_size(c, time_size));
    if (blk == NULL) {
        sl_text_reason(err, err_size, "truncated TZif data (%u transitions, %u types announced)", c->timecnt,
                       c->typecnt);
        return NULL;
    }
    if (c->leapcnt != 0) {
        sl_text_reason(err, err_size, "leap-second records (a right/ zone) are not supported");
        return NULL;
    }
    const uint8_t *times = blk, *idx = times + (size_t)c->timecnt * time_size, *ttinfo = idx + c->timecnt,
                  *chars = ttinfo + (size_t)c->typecnt * 6, *isstd = chars + c->charcnt,
                  *isut = isstd + c->isstdcnt;
    size_t size = sizeof(sl_tz_t) + (size_t)c->timecnt * sizeof(int64_t) + c->typecnt * sizeof(sl_tz_type_t) +
                  c->timecnt;
    sl_tz_t *tz = sl_xcalloc(1, size);
    int64_t *at = (int64_t *)(tz + 1);
    sl_tz_type_t *types = (sl_tz_type_t *)(at + c->timecnt);
    uint8_t *types_at = (uint8_t *)(types + c->typecnt);
    *tz = (sl_tz_t){
        at, types_at, c->timecnt, types, c->typecnt, .min_utoff = INT32_MAX, .max_utoff = INT32_MIN};
    const char *why = NULL;
    for (uint32_t i = 0; i < c->timecnt && why == NULL; i++) {
        at[i] = time_size == 8 ? be64(times + 8 * (size_t)i) : (int32_t)be32(times + 4 * (size_t)i);
        types_at[i] = idx[i];
        if (i > 0 && at[i] <= at[i - 1])
            why = "transitions out of order";
        else if (idx[i] >= c->typecnt)
            why = "a transition's type index is out of range";
    }
    for (uint32_t i = 0; i < c->typecnt && why == NULL; i++) {
        const uint8_t *ti = ttinfo + 6 * (size_t)i;
        int32_t utoff = (int32_t)be32(ti);
        uint8_t desig = ti[5];
        const uint8_t *nul = desig < c->charcnt ? memchr(chars + desig, 0, c->charcnt - desig) : NULL;
        if (utoff < -MAX_UTOFF || utoff > MAX_UTOFF)
            why = "a UT offset beyond 25:59:59";
        else if (ti[4] > 1 || (c->isstdcnt != 0 && isstd[i] > 1) || (c->isutcnt != 0 && isut[i] > 1))
            why = "a flag that is neither 0 nor 1";
        else if (desig >= c->charcnt)
            why = "an abbreviation index past the abbreviations";
        else if (nul == NULL)
            why = "an abbreviation without its NUL";
        else if ((size_t)(nul - (chars + desig)) >= SL_TZ_ABBR_MAX)
            why = "an abbreviation longer than 15 characters";
        if (why != NULL)
            break;
        types[i].utoff = utoff;
        types[i].is_dst = ti[4] == 1;
        memcpy(types[i].abbr, chars + desig, (size_t)(nul - (chars + desig)) + 1);
        tz->min_utoff = utoff < tz->min_utoff ? utoff : tz->min_utoff;
        tz->max_utoff = utoff > tz->max_utoff ? utoff : tz->max_utoff;
    }
    if (why != NULL) {
        sl_text_reason(err, err_size, "%s", why);
        free(tz);
        return NULL;
    }
    return tz;
}

static void
widen_by_rule(sl_tz_t *tz)
{
    const sl_tz_type_t *both[2] = {&tz->rule.std, &tz->rule.dst};
    for (int i = 0; i < (tz->rule.has_dst ? 2 : 1); i++) {
        tz->min_utoff = both[i]->utoff < tz->min_utoff ? both[i]->utoff : tz->min_utoff;
        tz->max_utoff = both[i]->utoff > tz->max_utoff ? both[i]->utoff : tz->max_utoff;
    }
}

sl_tz_t *
sl_tz_parse_tzif(const void *data, size_t len, char *err, size_t err_size)
{
    bytes_t b = {data, data != NULL ? len : 0};
    int version, version2;
    counts_t c;
    if (!read_header(&b, &version, &c, err, err_size))
        return NULL;
    if (version == 1)
        return read_block(&b, &c, 4, err, err_size);
    /* Versions 2 and later repeat the data with 64-bit times, then end with a TZ string between newlines. */
    if (take(&b, block_size(&c, 4)) == NULL) {
        sl_text_reason(err, err_size, "truncated TZif version 1 data");
        return NULL;
    }
    if (!read_header(&b, &version2, &c, err, err_size))
        return NULL;
    sl_tz_t *tz = read_block(&b, &c, 8, err, err_size);
    if (tz == NULL)
        return NULL;
    const uint8_t *nl = b.left > 0 && b.p[0] == '\n' ? memchr(b.p + 1, '\n', b.left - 1) : NULL;
    if (nl == NULL) {
        sl_text_reason(err, err_size, "no TZ string footer");
        free(tz);
        return NULL;
    }
    size_t n = (size_t)(nl - (b.p + 1));
    if (n > 0) {
        if (!parse_rule((const char *)b.p + 1, n, &tz->rule)) {
            sl_text_reason(err, err_size, "the footer '%.*s' is not a TZ string", (int)(n > 64 ? 64 : n),
                           b.p + 1);
            free(tz);
            return NULL;
        }
        tz->has_rule = true;
        widen_by_rule(tz);
    }
    return tz;
}

sl_tz_t *
sl_tz_parse_posix(const char *spec, char *err, size_t err_size)
{
    sl_tz_rule_t rule;
    if (spec == NULL || !parse_rule(spec, strlen(spec), &rule)) {
        sl_text_reason(err, err_size, "'%.64s' is not a TZ string", spec != NULL ? spec : "");
        return NULL;
    }
    sl_tz_t *tz = sl_xcalloc(1, sizeof(*tz));
    tz->types = &tz->rule.std;
    tz->n_types = 1;
    tz->has_rule = true;
    tz->rule = rule;
    tz->min_utoff = INT32_MAX;
    tz->max_utoff = INT32_MIN;
    widen_by_rule(tz);
    return tz;
}

void
sl_tz_free(sl_tz_t *tz)
{
    free(tz);
}

/* ---- conversions ------------------------------------------------------------------------------------ */

/* The type in effect at t, and the next instant after t at which it may change (INT64_MAX: never). */
static const sl_tz_type_t *
type_at(const sl_tz_t *tz, int64_t t, int64_t *next)
{
    *next = INT64_MAX;
    if (tz->n_times == 0)
        return tz->has_rule ? rule_type_at(&tz->rule, t, next) : &tz->types[0];
    if (t < tz->times[0]) {
        *next = tz->times[0];
        return &tz->types[0];
    }
    size_t lo = 0, hi = tz->n_times; /* times[lo] <= t < times[hi] (hi == n_times: past the last) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (tz->times[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    if (hi < tz->n_times) {
        *next = tz->times[hi];
        return &tz->types[tz->types_at[lo]];
    }
    return tz->has_rule ? rule_type_at(&tz->rule, t, next) : &tz->types[tz->types_at[lo]];
}

bool
sl_tz_local(const sl_tz_t *tz, int64_t t, sl_tz_local_t *out)
{
    if (t < -SL_TZ_RANGE_SECS || t > SL_TZ_RANGE_SECS)
        return false;
    int64_t next;
    const sl_tz_type_t *type = type_at(tz, t, &next);
    int64_t local = t + type->utoff;
    int64_t days = sl_floor_div(local, DAY_SECS), secs = local - days * DAY_SECS;
    sl_tz_local_t l = {
        .hour = (int)(secs / 3600),
        .min = (int)(secs / 60 % 60),
        .sec = (int)(secs % 60),
        .wday = sl_civil_weekday(days),
        .utoff = type->utoff,
        .is_dst = type->is_dst,
        .abbr = type->abbr,
    };
    sl_civil_from_days(days, &l.year, &l.month, &l.mday);
    *out = l;
    return true;
}

bool
sl_tz_utc_of_local(const sl_tz_t *tz, int64_t year, int64_t month, int64_t mday, int64_t secs, int64_t *t)
{
    /* Generous bounds that keep every sum below in range; the result is checked against the zone's after. */
    const int64_t years = SL_TZ_RANGE_SECS / DAY_SECS / 365 + 2;
    if (year < -years || year > years || month < -12 * years || month > 12 * years || mday < -366 * years ||
        mday > 366 * years || secs < -DAY_SECS * 366 * years || secs > DAY_SECS * 366 * years)
        return false;
    int64_t y = year + sl_floor_div(month - 1, 12);
    int m = (int)sl_floor_mod(month - 1, 12) + 1;
    int64_t local = (sl_civil_days(y, m, 1) + mday - 1) * DAY_SECS + secs;
    if (local < -SL_TZ_RANGE_SECS - MAX_UTOFF || local > SL_TZ_RANGE_SECS + MAX_UTOFF)
        return false;
    /*
     * The clock reads u + offset(u). Before local - max_utoff it reads less
     * than local, and at local - min_utoff it reads local or more: walk the
     * stretches of one offset from the first bound; in each, the earliest u
     * whose reading reaches local is max(its start, local - offset), if
     * that is still inside it.
     */
    int64_t u = local - tz->max_utoff;
    for (;;) {
        int64_t next;
        const sl_tz_type_t *type = type_at(tz, u, &next);
        int64_t reach = local - type->utoff > u ? local - type->utoff : u;
        /* Found by the stretch holding local - min_utoff at the latest, so u never passes it. */
        if (reach < next) {
            if (reach < -SL_TZ_RANGE_SECS || reach > SL_TZ_RANGE_SECS)
                return false;
            *t = reach;
            return true;
        }
        u = next;
    }
}
