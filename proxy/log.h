/*
 * log.h - diagnostics on stderr, and the JSON access log on stdout.
 * Neither ever carries a raw idempotency key, a body or an Authorization value:
 * requests are named by their record id.
 */
#ifndef IDEM_LOG_H
#define IDEM_LOG_H

#include <jansson.h>

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Set the lowest level printed (default LOG_INFO). */
void log_set_level(enum log_level level);

/* One line "TIME LEVEL message" on stderr. printf-style; never pass request data. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print the object as one JSON line on stdout with a "time" member added; steals entry. */
void log_access(json_t *entry);

#endif
