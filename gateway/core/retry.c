#include "retry.h"

/* Nominal pauses before retry rounds 1, 2, 3, 4 and every later one (behaviour.md §5). */
static const int64_t round_pause_ms[] = {2000, 4000, 8000, 16000};

/* Pauses after the 1st, 2nd, … consecutive 429 without a hint; the last repeats (behaviour.md §6). */
static const int64_t ratelimit_pause_ms[] = {5000, 10000, 20000, 40000, 60000};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static int64_t
sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* The row of a 1-based step in a schedule whose last row repeats. */
static size_t
step_row(uint32_t step, size_t rows)
{
    size_t k = step > 0 ? step - 1 : 0;
    return k < rows ? k : rows - 1;
}

int64_t
sl_retry_scaled_ms(int64_t ms, const sl_retry_params_t *p)
{
    double scale = p->time_scale;
    /* Written so that NaN fails the test too. */
    if (ms <= 0 || !(scale > 0.0 && scale < 1.0))
        return ms;
    int64_t scaled = (int64_t)((double)ms * scale + 0.5);
    return scaled > 0 ? scaled : 1;
}

int64_t
sl_retry_pause_ms(uint32_t round, double jitter_unit, const sl_retry_params_t *p)
{
    int64_t nominal = round_pause_ms[step_row(round, N(round_pause_ms))];
    double u = p->no_jitter || !(jitter_unit >= 0.0 && jitter_unit < 1.0) ? 0.5 : jitter_unit;
    int64_t low = nominal * 4 / 5, span = nominal * 2 / 5;
    /* u * 2^32 is exact and below 2^32; in integers add stays below span, a float product could round up. */
    int64_t add = (int64_t)(((uint64_t)span * (uint64_t)(u * 4294967296.0)) >> 32);
    return sl_retry_scaled_ms(low + add, p);
}

int64_t
sl_retry_hint_floor(int64_t pause_ms, int64_t hint_ms, const sl_retry_params_t *p, bool *by_hint)
{
    int64_t hint = hint_ms > 0 ? sl_retry_scaled_ms(hint_ms, p) : -1;
    if (by_hint != NULL)
        *by_hint = hint >= pause_ms;
    return hint > pause_ms ? hint : pause_ms;
}

bool
sl_retry_may_wait(uint32_t wait_secs, bool count_tokens)
{
    return wait_secs > 0 && !count_tokens;
}

int64_t
sl_retry_deadline_ms(int64_t arrival_ms, uint32_t wait_secs, const sl_retry_params_t *p)
{
    return sat_add(arrival_ms, sl_retry_scaled_ms((int64_t)wait_secs * 1000, p));
}

bool
sl_retry_fits(int64_t now_ms, int64_t pause_ms, int64_t deadline_ms)
{
    int64_t end;
    return !__builtin_add_overflow(now_ms, pause_ms, &end) && end <= deadline_ms;
}

size_t
sl_retry_select(const bool *temporary, const bool *cooling, size_t n, size_t pinned, bool *next)
{
    size_t count = 0;
    if (pinned < n) {
        /* History bound to one upstream is useless anywhere else: only it is retried, cooling or not. */
        for (size_t i = 0; i < n; i++) {
            next[i] = i == pinned && temporary[i];
            count += next[i];
        }
        return count;
    }
    bool any_warm = false;
    for (size_t i = 0; i < n; i++)
        any_warm |= temporary[i] && !cooling[i];
    for (size_t i = 0; i < n; i++) {
        next[i] = temporary[i] && (!any_warm || !cooling[i]);
        count += next[i];
    }
    return count;
}

uint32_t
sl_ratelimit_streak_next(uint32_t streak, bool got_429)
{
    if (!got_429)
        return 0;
    return streak < UINT32_MAX ? streak + 1 : streak;
}

int64_t
sl_ratelimit_pause_ms(uint32_t streak, int64_t hint_ms, uint32_t max_pause_secs, const sl_retry_params_t *p)
{
    if (hint_ms > 0) {
        int64_t cap = (int64_t)(max_pause_secs > 0 ? max_pause_secs : 1) * 1000;
        return sl_retry_scaled_ms(hint_ms < cap ? hint_ms : cap, p);
    }
    return sl_retry_scaled_ms(ratelimit_pause_ms[step_row(streak, N(ratelimit_pause_ms))], p);
}

int64_t
sl_keepalive_due_ms(bool stream, int64_t last_sent_ms, int64_t now_ms, const sl_retry_params_t *p)
{
    if (!stream)
        return SL_RETRY_NEVER;
    int64_t due = sat_add(last_sent_ms, sl_retry_scaled_ms(SL_KEEPALIVE_INTERVAL_MS, p));
    return due > now_ms ? due : now_ms;
}
