/*
 * log.c - the two logs.
 */
#include "log.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

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
    if (len < cached_len + 6) {
        buf[0] = '\0';
        return;
    }
    memcpy(buf, cached, cached_len);
    buf += cached_len;
    *buf++ = '.';
    *buf++ = (char)('0' + tv.tv_usec / 100000);
    *buf++ = (char)('0' + tv.tv_usec / 10000 % 10);
    *buf++ = (char)('0' + tv.tv_usec / 1000 % 10);
    *buf++ = 'Z';
    *buf = '\0';
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

void log_lines(enum log_level level, const char *text)
{
    while (*text != '\0') {
        size_t len = strcspn(text, "\n");

        if (len > 0)
            log_msg(level, "%.*s", (int)len, text);
        text += len + (text[len] == '\n');
    }
}

/*
 * The access-log line: a fixed schema written into one buffer per thread,
 * kept between lines. Member names are constants. Strings from outside (the
 * route pattern, the request path) are JSON-encoded by jansson (json_dumpb of
 * a string, into the buffer), except that a string of printable ASCII
 * without '"' and '\' is copied as it is: RFC 8259 section 7 lets every such
 * byte stand unescaped, so the copy is exactly what jansson would write. Our
 * own strings (method, outcome, record id, time) are drawn from fixed
 * alphabets and go through the same check. Numbers are written by the
 * helpers below (digits only, a valid JSON number for every value).
 */
struct log_line {
    char *buf;
    size_t len, cap;
    bool failed;        /* out of memory: the line is dropped */
};

static _Thread_local struct log_line access_buf;
static _Thread_local json_t *access_string; /* reused for jansson's encoding */

static bool log_reserve(struct log_line *l, size_t more)
{
    size_t cap;
    char *grown;

    if (l->failed)
        return false;
    if (l->len + more <= l->cap)
        return true;
    cap = l->cap > 0 ? l->cap : 1024;
    while (cap < l->len + more)
        cap *= 2;
    grown = realloc(l->buf, cap);
    if (grown == NULL) {
        l->failed = true;
        return false;
    }
    l->buf = grown;
    l->cap = cap;
    return true;
}

static void log_put(struct log_line *l, const char *s, size_t n)
{
    if (log_reserve(l, n)) {
        memcpy(l->buf + l->len, s, n);
        l->len += n;
    }
}

#define LOG_PUT_LITERAL(l, lit) log_put((l), (lit), sizeof(lit) - 1)

/* Printable ASCII without '"' and '\': JSON's unescaped characters, as they are. */
static bool log_plain(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            return false;
    }
    return true;
}

/* s as a JSON string; null for NULL; "(not UTF-8)" when it is not UTF-8. */
static void log_put_string(struct log_line *l, const char *s)
{
    size_t n, need;

    if (s == NULL) {
        LOG_PUT_LITERAL(l, "null");
        return;
    }
    n = strlen(s);
    if (log_plain(s, n)) {
        if (log_reserve(l, n + 2)) {
            l->buf[l->len++] = '"';
            memcpy(l->buf + l->len, s, n);
            l->len += n;
            l->buf[l->len++] = '"';
        }
        return;
    }
    if (access_string == NULL && (access_string = json_string("")) == NULL) {
        l->failed = true;
        return;
    }
    if (json_string_setn(access_string, s, n) != 0)
        json_string_set(access_string, "(not UTF-8)");
    /* at most 6 bytes per input byte (\u00XX) and the quotes */
    need = 6 * n + 2;
    if (log_reserve(l, need)) {
        size_t written = json_dumpb(access_string, l->buf + l->len, need, JSON_ENCODE_ANY);
        if (written == 0 || written > need)
            l->failed = true;
        else
            l->len += written;
    }
}

/* v in decimal. */
static void log_put_uint(struct log_line *l, uint64_t v)
{
    char digits[20];
    size_t n = 0;

    do {
        digits[sizeof(digits) - ++n] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    log_put(l, digits + sizeof(digits) - n, n);
}

/* ms with three decimals (µs resolution), e.g. 12.345; negative or not a number: 0.000. */
static void log_put_ms(struct log_line *l, double ms)
{
    uint64_t us = ms >= 0 && ms < 1e15 ? (uint64_t)(ms * 1000.0 + 0.5) : 0;
    char frac[4] = { '.', (char)('0' + us / 100 % 10), (char)('0' + us / 10 % 10),
                     (char)('0' + us % 10) };

    log_put_uint(l, us / 1000);
    log_put(l, frac, sizeof(frac));
}

void log_thread_end(void)
{
    free(access_buf.buf);
    access_buf = (struct log_line){ 0 };
    json_decref(access_string);
    access_string = NULL;
}

void log_access(const struct access_entry *e)
{
    struct log_line *l = &access_buf;
    char ts[40];

    l->len = 0;
    l->failed = false;
    log_timestamp(ts, sizeof(ts));
    LOG_PUT_LITERAL(l, "{\"route\":");
    log_put_string(l, e->route);
    LOG_PUT_LITERAL(l, ",\"method\":");
    log_put_string(l, e->method);
    LOG_PUT_LITERAL(l, ",\"path\":");
    log_put_string(l, e->path);
    LOG_PUT_LITERAL(l, ",\"outcome\":");
    log_put_string(l, e->outcome);
    LOG_PUT_LITERAL(l, ",\"status\":");
    log_put_uint(l, e->status > 0 ? (uint64_t)e->status : 0);
    LOG_PUT_LITERAL(l, ",\"record_id\":");
    log_put_string(l, e->record_id);
    LOG_PUT_LITERAL(l, ",\"upstream_ms\":");
    log_put_ms(l, e->upstream_ms);
    LOG_PUT_LITERAL(l, ",\"total_ms\":");
    log_put_ms(l, e->total_ms);
    LOG_PUT_LITERAL(l, ",\"time\":");
    log_put_string(l, ts);
    LOG_PUT_LITERAL(l, "}\n");
    if (!l->failed)
        fwrite(l->buf, 1, l->len, stdout); /* one call: stdout's lock keeps the line whole */
}

/* s as a JSON value for the audit line: null for NULL, "(not UTF-8)" when it is not UTF-8. */
static json_t *log_audit_string(const char *s)
{
    json_t *v;

    if (s == NULL)
        return json_null();
    v = json_string(s);
    return v != NULL ? v : json_string("(not UTF-8)");
}

/*
 * Where the audit lines go: stdout (LOG_AUDIT_STDOUT, the default), stderr,
 * or a file descriptor opened O_APPEND. The lock keeps a reopen (SIGHUP)
 * from closing the descriptor under a line being written.
 */
#define LOG_AUDIT_STDOUT (-1)
#define LOG_AUDIT_STDERR (-2)
static pthread_mutex_t log_audit_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_audit_fd = LOG_AUDIT_STDOUT;
static char *log_audit_path;            /* the file's, for log_audit_reopen; NULL: a stream */

int log_audit_open(const char *where, char *err, size_t errlen)
{
    char *path = NULL;
    int fd, old;

    if (where == NULL || strcmp(where, "stdout") == 0) {
        fd = LOG_AUDIT_STDOUT;
    } else if (strcmp(where, "stderr") == 0) {
        fd = LOG_AUDIT_STDERR;
    } else {
        struct stat st;

        /* O_NONBLOCK: a FIFO without a reader must not stop the worker that reloads */
        fd = open(where, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0640);
        if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
            snprintf(err, errlen, "the audit log %s is not a regular file (a FIFO or a device "
                     "could stop the threads that write to it)", where);
            close(fd);
            return -1;
        }
        if (fd < 0 || (path = strdup(where)) == NULL) {
            snprintf(err, errlen, "cannot open the audit log %s: %s", where,
                     fd < 0 ? strerror(errno) : "out of memory");
            if (fd >= 0)
                close(fd);
            return -1;
        }
    }
    pthread_mutex_lock(&log_audit_lock);
    old = log_audit_fd;
    log_audit_fd = fd;
    free(log_audit_path);
    log_audit_path = path;
    pthread_mutex_unlock(&log_audit_lock);
    if (old >= 0)
        close(old);
    return 0;
}

int log_audit_reopen(char *err, size_t errlen)
{
    char *path;
    int rc;

    pthread_mutex_lock(&log_audit_lock);
    path = log_audit_path != NULL ? strdup(log_audit_path) : NULL;
    rc = log_audit_path != NULL && path == NULL ? -1 : 0;
    pthread_mutex_unlock(&log_audit_lock);
    if (rc != 0)
        snprintf(err, errlen, "out of memory");
    else if (path != NULL)
        rc = log_audit_open(path, err, errlen);
    free(path);
    return rc;
}

void log_audit_close(void)
{
    pthread_mutex_lock(&log_audit_lock);
    if (log_audit_fd >= 0)
        close(log_audit_fd);
    log_audit_fd = LOG_AUDIT_STDOUT;
    free(log_audit_path);
    log_audit_path = NULL;
    pthread_mutex_unlock(&log_audit_lock);
}

/* text (len bytes, a whole line with its newline) to the audit stream; false when not all of it went. */
static bool log_audit_write(const char *text, size_t len)
{
    bool ok = true;
    FILE *fp = NULL;

    pthread_mutex_lock(&log_audit_lock);
    if (log_audit_fd == LOG_AUDIT_STDOUT)
        fp = stdout;
    else if (log_audit_fd == LOG_AUDIT_STDERR)
        fp = stderr;
    if (fp != NULL) {
        flockfile(fp);
        ok = fwrite(text, 1, len, fp) == len && fflush(fp) == 0;
        funlockfile(fp);
    } else {
        /*
         * one write of an O_APPEND descriptor: the line is never split by another; one
         * cut short (a full disk) is taken back, so the next line starts on its own
         */
        off_t end = lseek(log_audit_fd, 0, SEEK_END);
        size_t done = 0;

        while (ok && done < len) {
            ssize_t n = write(log_audit_fd, text + done, len - done);

            if (n < 0 && errno == EINTR)
                continue;
            ok = n > 0;
            done += n > 0 ? (size_t)n : 0;
        }
        if (!ok && done > 0 && end >= 0) {
            int error = errno; /* the write's, for the message */

            if (ftruncate(log_audit_fd, end) != 0) {
                /* the piece stays: the stderr line says the audit line was not written */
            }
            errno = error;
        }
    }
    pthread_mutex_unlock(&log_audit_lock);
    return ok;
}

void log_audit(const struct audit_entry *e)
{
    char ts[40], *text;
    json_t *line;

    log_timestamp(ts, sizeof(ts));
    line = json_pack("{s:b, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:o, s:o}",
                     "audit", 1, "time", ts, "operator", log_audit_string(e->operator),
                     "right", log_audit_string(e->right),
                     "action", log_audit_string(e->action),
                     "record_id", log_audit_string(e->record_id),
                     "dead_letter_id", log_audit_string(e->dead_letter_id),
                     "route", log_audit_string(e->route), "client", log_audit_string(e->client),
                     "token", log_audit_string(e->token != NULL ? e->token : "-"),
                     "result", log_audit_string(e->result), "status", e->status,
                     "recorded_status",
                     e->recorded_status > 0 ? json_integer(e->recorded_status) : json_null(),
                     "reason", log_audit_string(e->reason));
    text = line != NULL ? json_dumps(line, JSON_COMPACT) : NULL;
    if (text == NULL) {
        /* the action happened: say so where an operator looks, without the line's data */
        log_msg(LOG_ERROR, "audit: out of memory: the line of an admin request is lost");
    } else {
        size_t len = strlen(text);
        char *nl = realloc(text, len + 2);

        if (nl != NULL) {
            text = nl;
            text[len++] = '\n';
            text[len] = '\0';
        }
        if (nl == NULL || !log_audit_write(text, len))
            /* what the line said, but its reason (free text): the trail must not go quiet */
            log_msg(LOG_ERROR, "audit: a line could not be written to the audit log (%s): "
                    "operator %s, action %s, record %s, dead letter %s, result %s, status %d",
                    nl == NULL ? "out of memory" : strerror(errno),
                    e->operator != NULL ? e->operator : "-", e->action != NULL ? e->action : "-",
                    e->record_id != NULL ? e->record_id : "-",
                    e->dead_letter_id != NULL ? e->dead_letter_id : "-",
                    e->result != NULL ? e->result : "-", e->status);
    }
    free(text);
    json_decref(line);
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
