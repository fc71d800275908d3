/*
 * A consumer of the event bus that writes one debug log line per event. It
 * runs when sluice logs at debug level, until the control endpoint is the
 * bus's consumer; it lets an operator (and the end-to-end tests) watch what
 * the data plane reports.
 */
#ifndef SL_EVENTLOG_H
#define SL_EVENTLOG_H

#include "bus.h"

typedef struct sl_eventlog sl_eventlog_t;

/* Activates the bus and starts the logging thread. */
sl_eventlog_t *sl_eventlog_start(sl_bus_t *bus);
/* Logs what is still pending and stops the thread. */
void sl_eventlog_stop(sl_eventlog_t *log);

#endif
