#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int current_level = SL_LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int
sl_log_level_parse(const char *name, sl_log_level_t *out)
{
    for (int i = 0; i <= SL_LOG_DEBUG; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (sl_log_level_t)i;
            return 0;
        }
    }
    return -1;
}

void
sl_log_set_level(sl_log_level_t level)
{
    atomic_store(&current_level, (int)level);
}

int
sl_log_enabled(sl_log_level_t level)
{
    return (int)level <= atomic_load(&current_level);
}

void
sl_log(sl_log_level_t level, uint64_t request_id, const char *fmt, ...)
{
    if (!sl_log_enabled(level))
        return;
    char line[4096];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                     level_names[level]);
    if (request_id != 0)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "[req %llu] ", (unsigned long long)request_id);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
}
