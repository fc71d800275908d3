/*
 * Logging to stderr: one line per call, written with a single write(2) so
 * lines from worker threads never interleave. Anything that may hold a
 * credential must go through core/mask.h before it is logged.
 */
#ifndef SL_LOG_H
#define SL_LOG_H

#include <stdint.h>

typedef enum { SL_LOG_ERROR, SL_LOG_WARN, SL_LOG_INFO, SL_LOG_DEBUG } sl_log_level_t;

/* Parses "error", "warn", "info" or "debug"; returns 0 on success, -1 otherwise. */
int sl_log_level_parse(const char *name, sl_log_level_t *out);
void sl_log_set_level(sl_log_level_t level);
int sl_log_enabled(sl_log_level_t level);

/* Logs one line; request_id 0 means the line belongs to no request. */
void sl_log(sl_log_level_t level, uint64_t request_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sl_log_error(...) sl_log(SL_LOG_ERROR, 0, __VA_ARGS__)
#define sl_log_warn(...)  sl_log(SL_LOG_WARN, 0, __VA_ARGS__)
#define sl_log_info(...)  sl_log(SL_LOG_INFO, 0, __VA_ARGS__)
#define sl_log_debug(...) sl_log(SL_LOG_DEBUG, 0, __VA_ARGS__)

#endif
