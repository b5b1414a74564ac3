/*
 * log.c - the two logs.
 */
#include "log.h"

#include <jansson.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static enum log_level log_threshold = LOG_INFO;

void log_set_level(enum log_level level)
{
    log_threshold = level;
}

/* RFC 3339 UTC with milliseconds into buf (at least 32 bytes); the seconds are formatted once per second. */
static void log_timestamp(char *buf, size_t len)
{
    static _Thread_local time_t cached_s = -1;
    static _Thread_local char cached[24];
    static _Thread_local size_t cached_len;
    struct timeval tv;

    gettimeofday(&tv, NULL);
    if (tv.tv_sec != cached_s) {
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        cached_len = strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &tm);
        cached_s = tv.tv_sec;
    }
    memcpy(buf, cached, cached_len);
    snprintf(buf + cached_len, len - cached_len, ".%03dZ", (int)(tv.tv_usec / 1000));
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    static const char *const names[] = { "error", "warn", "info", "debug" };
    char ts[40];
    va_list ap;

    if (level > log_threshold)
        return;
    log_timestamp(ts, sizeof(ts));
    flockfile(stderr);
    fprintf(stderr, "%s %s ", ts, names[level]);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    funlockfile(stderr);
}

/* The access-log line: one object per thread, its members kept in this order and refilled per line. */
enum { F_ROUTE, F_METHOD, F_PATH, F_OUTCOME, F_STATUS, F_RECORD_ID, F_UPSTREAM_MS, F_TOTAL_MS,
       F_TIME, F_COUNT };
static const char *const access_names[F_COUNT] = {
    "route", "method", "path", "outcome", "status", "record_id", "upstream_ms", "total_ms", "time",
};
static _Thread_local json_t *access_line;
static _Thread_local json_t *access_value[F_COUNT]; /* our own reference to each member's value */

static int access_line_create(void)
{
    access_line = json_object();
    for (int i = 0; i < F_COUNT; i++) {
        access_value[i] = i == F_STATUS ? json_integer(0)
                          : i == F_UPSTREAM_MS || i == F_TOTAL_MS ? json_real(0.0)
                          : json_string("");
        if (access_line == NULL || access_value[i] == NULL ||
            json_object_set(access_line, access_names[i], access_value[i]) != 0)
            return -1;
    }
    return 0;
}

/* Member i becomes s, or null when s is NULL, or "(not UTF-8)" when s is not UTF-8. */
static void access_set_string(int i, const char *s)
{
    if (s == NULL) {
        json_object_set_new(access_line, access_names[i], json_null());
        return;
    }
    if (json_string_set(access_value[i], s) != 0)
        json_string_set(access_value[i], "(not UTF-8)");
    if (json_object_get(access_line, access_names[i]) != access_value[i])
        json_object_set(access_line, access_names[i], access_value[i]);
}

void log_thread_end(void)
{
    for (int i = 0; i < F_COUNT; i++) {
        json_decref(access_value[i]);
        access_value[i] = NULL;
    }
    json_decref(access_line);
    access_line = NULL;
}

void log_access(const struct access_entry *e)
{
    char ts[40], small[2048];
    size_t n;

    if (access_line == NULL && access_line_create() != 0) {
        log_thread_end();
        return;
    }
    log_timestamp(ts, sizeof(ts));
    access_set_string(F_ROUTE, e->route);
    access_set_string(F_METHOD, e->method);
    access_set_string(F_PATH, e->path);
    access_set_string(F_OUTCOME, e->outcome);
    json_integer_set(access_value[F_STATUS], e->status);
    access_set_string(F_RECORD_ID, e->record_id);
    json_real_set(access_value[F_UPSTREAM_MS], e->upstream_ms);
    json_real_set(access_value[F_TOTAL_MS], e->total_ms);
    access_set_string(F_TIME, ts);

    n = json_dumpb(access_line, small, sizeof(small), JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (n > 0 && n < sizeof(small)) {
        small[n++] = '\n';
        fwrite(small, 1, n, stdout); /* one call: stdout's lock keeps the line whole */
    } else if (n >= sizeof(small)) {
        char *line = json_dumps(access_line, JSON_COMPACT | JSON_REAL_PRECISION(6));
        if (line != NULL) {
            flockfile(stdout);
            fputs(line, stdout);
            fputc('\n', stdout);
            funlockfile(stdout);
            free(line);
        }
    }
}

void log_init(void)
{
    static char buf[64 * 1024];

    setvbuf(stdout, buf, _IOFBF, sizeof(buf));
}

void log_flush(void)
{
    fflush(stdout);
}
