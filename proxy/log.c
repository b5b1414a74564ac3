/*
 * log.c - the two logs.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static enum log_level log_threshold = LOG_INFO;

void log_set_level(enum log_level level)
{
    log_threshold = level;
}

/* RFC 3339 UTC with milliseconds into buf (at least 32 bytes). */
static void log_timestamp(char *buf, size_t len)
{
    struct timeval tv;
    struct tm tm;

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03dZ", (int)(tv.tv_usec / 1000));
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

void log_access(json_t *entry)
{
    char ts[40];
    char *line;

    log_timestamp(ts, sizeof(ts));
    json_object_set_new(entry, "time", json_string(ts));
    line = json_dumps(entry, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(entry);
    if (line == NULL)
        return;
    fputs(line, stdout);
    fputc('\n', stdout);
    free(line);
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
