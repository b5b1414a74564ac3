/*
 * http_wire.c - the byte-level pieces of an HTTP/1.1 message; see http_wire.h.
 */
#include "http_wire.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>

#include <http_parser.h>

const char *http_wire_reason(int status)
{
    const char *r;

    switch (status) { /* RFC 9110 section 15 renamed these; libhttp-parser keeps older names */
    case 413: return "Content Too Large";
    case 422: return "Unprocessable Content";
    case 425: return "Too Early";
    }
    r = http_status_str((enum http_status)status);

    return r != NULL && strcmp(r, "<unknown>") != 0 ? r : "Unknown";
}

bool http_wire_status_bodiless(int status)
{
    return (status >= 100 && status < 200) || status == 204 || status == 304;
}

bool http_wire_method(unsigned parser_method, enum evhttp_cmd_type *cmd)
{
    switch ((enum http_method)parser_method) {
    case HTTP_GET: *cmd = EVHTTP_REQ_GET; return true;
    case HTTP_POST: *cmd = EVHTTP_REQ_POST; return true;
    case HTTP_HEAD: *cmd = EVHTTP_REQ_HEAD; return true;
    case HTTP_PUT: *cmd = EVHTTP_REQ_PUT; return true;
    case HTTP_DELETE: *cmd = EVHTTP_REQ_DELETE; return true;
    case HTTP_OPTIONS: *cmd = EVHTTP_REQ_OPTIONS; return true;
    case HTTP_TRACE: *cmd = EVHTTP_REQ_TRACE; return true;
    case HTTP_CONNECT: *cmd = EVHTTP_REQ_CONNECT; return true;
    case HTTP_PATCH: *cmd = EVHTTP_REQ_PATCH; return true;
    default: return false;
    }
}

/* A field this layer writes itself, whatever the caller put in the list. */
static bool http_wire_own_field(const char *name)
{
    return strcasecmp(name, "Content-Length") == 0 || strcasecmp(name, "Connection") == 0 ||
           strcasecmp(name, "Transfer-Encoding") == 0 || strcasecmp(name, "Date") == 0;
}

int http_wire_write_head(struct evbuffer *out, int status, const char *reason,
                         const struct evkeyvalq *fields, long long content_length, bool chunked,
                         bool close, bool keep_alive_10)
{
    const struct evkeyval *h;
    struct tm tm;
    time_t now = time(NULL);
    char date[64];
    int rc = 0;

    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm); /* RFC 9110 5.6.7 */
    rc |= evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n", status,
                              reason != NULL ? reason : http_wire_reason(status)) < 0;
    TAILQ_FOREACH(h, fields, next)
        if (!http_wire_own_field(h->key))
            rc |= evbuffer_add_printf(out, "%s: %s\r\n", h->key, h->value) < 0;
    rc |= evbuffer_add_printf(out, "Date: %s\r\n", date) < 0;
    if (!http_wire_status_bodiless(status)) {
        if (chunked)
            rc |= evbuffer_add_printf(out, "Transfer-Encoding: chunked\r\n") < 0;
        else if (content_length >= 0)
            rc |= evbuffer_add_printf(out, "Content-Length: %lld\r\n", content_length) < 0;
    }
    if (close)
        rc |= evbuffer_add_printf(out, "Connection: close\r\n") < 0;
    else if (keep_alive_10)
        rc |= evbuffer_add_printf(out, "Connection: keep-alive\r\n") < 0;
    rc |= evbuffer_add(out, "\r\n", 2);
    return rc != 0 ? -1 : 0;
}

void http_wire_rtrim(const char *v, size_t *len)
{
    while (*len > 0 && (v[*len - 1] == ' ' || v[*len - 1] == '\t'))
        (*len)--;
}

/* Whether the line of n bytes at line names field (case-insensitive) before its colon. */
static bool http_wire_line_is(const char *line, size_t n, const char *field)
{
    size_t flen = strlen(field);

    return n > flen && line[flen] == ':' && strncasecmp(line, field, flen) == 0;
}

const char *http_wire_head_fault(const char *head, size_t len)
{
    const char *end = head + len, *line = memchr(head, '\n', len);

    /* the request line is not checked: the parser refuses what it cannot read */
    while (line != NULL && ++line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        size_t n = (size_t)((eol != NULL ? eol : end) - line);

        if (n > 0 && (line[0] == ' ' || line[0] == '\t'))
            return "a header field is continued on a folded line (obs-fold, RFC 9112 section "
                   "5.2)";
        if (http_wire_line_is(line, n, "Content-Length") ||
            http_wire_line_is(line, n, "Transfer-Encoding")) {
            const char *v = memchr(line, ':', n) + 1;
            for (; v < line + n && (*v == ' ' || *v == '\t'); v++)
                if (*v == '\t')
                    return "a Content-Length or Transfer-Encoding value is preceded by a tab";
        }
        line = eol;
    }
    return NULL;
}
