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

/*
 * Print the object as one JSON line on stdout with a "time" member added;
 * steals entry. stdout is block-buffered (log_init): lines reach it at the
 * next log_flush, which the event loop calls every LOG_FLUSH_INTERVAL_MS.
 */
void log_access(json_t *entry);

#define LOG_FLUSH_INTERVAL_MS 100

/* Make stdout block-buffered (64 KiB), so the access log costs no write per request. */
void log_init(void);

/* Write out buffered access-log lines. */
void log_flush(void);

#endif
