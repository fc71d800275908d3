/*
 * One debug log line per event: lets an operator (and the end-to-end tests)
 * watch what the data plane reports in the log. The control endpoint writes
 * them as it consumes the bus; without a control endpoint, a small thread
 * of its own consumes the bus for them.
 */
#ifndef SL_EVENTLOG_H
#define SL_EVENTLOG_H

#include "bus.h"

/* Logs ev at debug level (nothing when debug is off). */
void sl_eventlog_write(const sl_proto_event_t *ev);

typedef struct sl_eventlog sl_eventlog_t;

/* Activates the bus and starts the logging thread. */
sl_eventlog_t *sl_eventlog_start(sl_bus_t *bus);
/* Logs what is still pending and stops the thread. */
void sl_eventlog_stop(sl_eventlog_t *log);

#endif
