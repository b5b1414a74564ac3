/*
 * log.h - diagnostics on stderr, and the JSON access log on stdout.
 * Neither ever carries a raw idempotency key, a body or an Authorization value:
 * requests are named by their record id.
 */
#ifndef IDEM_LOG_H
#define IDEM_LOG_H

#include <stddef.h>

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Set the lowest level printed (default LOG_INFO). */
void log_set_level(enum log_level level);

/* One line "TIME LEVEL message" on stderr. printf-style; never pass request data. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* log_msg once per line of text (borrowed; lines end in '\n' or at the NUL), empty lines skipped. */
void log_lines(enum log_level level, const char *text);

/* One access-log line. Strings are borrowed for the call. */
struct access_entry {
    const char *route;      /* the matched route's path pattern, or NULL (printed as null) */
    const char *method;
    const char *path;       /* printed as "(not UTF-8)" when it is not UTF-8 */
    const char *outcome;
    int status;
    const char *record_id;  /* or NULL (printed as null) */
    double upstream_ms;     /* ms */
    double total_ms;        /* ms */
};

/*
 * Print e as one JSON line on stdout with a "time" member added: the fixed
 * member order of docs/operations.md#logs, strings JSON-encoded by jansson (or copied
 * when they need no escaping), upstream_ms and total_ms with three decimals.
 * The line is built in a buffer kept per thread; lines of different threads
 * never interleave. The caller decides whether to log (log.access).
 * stdout is block-buffered (log_init): lines reach it at the next log_flush,
 * which the event loop calls every LOG_FLUSH_INTERVAL_MS.
 */
void log_access(const struct access_entry *e);

/*
 * One admin action that may change Redis (purge, resolve, extend, a bulk
 * change's item, redeliver, dead-letter delete, pause, resume). Strings are
 * borrowed for the call; NULL prints null.
 */
struct audit_entry {
    const char *action;         /* "purge", "resolve", "extend", "bulk-resolve", "bulk-purge",
                                   "redeliver", "dead-letter-delete", ... */
    const char *record_id;      /* the record acted on, or NULL */
    const char *dead_letter_id; /* the dead letter acted on, or NULL */
    const char *route;          /* the route, or NULL when the request does not name one */
    const char *client;         /* the admin client's address */
    const char *token;          /* the admin token's fingerprint (bearer.h), "-" for none */
    const char *result;         /* "ok", "not-found", "conflict", "refused", "error" */
    int status;                 /* the HTTP status answered */
    int recorded_status;        /* a resolve: the status recorded; 0: none (null) */
    const char *reason;         /* the operator's reason (a record's change), or NULL */
    const char *operator;       /* the operator's name, or NULL: the listener takes no token,
                                   or the request had no operator's token */
    const char *right;          /* the right the request uses: "read", "resolve", "purge" */
};

/*
 * Print e as one JSON line on the audit stream (log_audit_open; stdout
 * until then), built by jansson: "audit": true, "time" (RFC 3339 UTC, ms),
 * "operator", "right", then the other members of e in the order above, and
 * flush at once: its line must not wait in a buffer for a crash to lose
 * it. Always written: log.access does not apply, and nothing samples it
 * (docs/operations.md#the-audit-trail). A line that cannot be written is said on
 * stderr. Never pass a token, a key or a body. Any thread.
 */
void log_audit(const struct audit_entry *e);

/*
 * Send the audit lines to where (log.audit, CONTRACT section 16): "stdout"
 * (or NULL), "stderr", or a file opened for appending (created 0640), which
 * replaces the one before (closed): a SIGHUP calls it again, so a rotated
 * file is reopened. Returns 0, or -1 with why in err (errlen bytes) and the
 * stream before kept. Any thread.
 */
int log_audit_open(const char *where, char *err, size_t errlen);

/*
 * Open the audit file again by the name log_audit_open last took (nothing
 * for stdout or stderr): a SIGHUP whose reload is refused still lets
 * logrotate move the file away. 0, or -1 with why in err and the stream
 * before kept. Any thread.
 */
int log_audit_reopen(char *err, size_t errlen);

/* Close the audit file (at exit), back to stdout. */
void log_audit_close(void);

/* Free the calling thread's access-log object; call as a thread that logged ends. */
void log_thread_end(void);

#define LOG_FLUSH_INTERVAL_MS 100

/* Make stdout block-buffered (64 KiB), so the access log costs no write per request. */
void log_init(void);

/* Write out buffered access-log lines. */
void log_flush(void);

#endif
