/*
 * http_server_parse.c - the requests of http_server.c and libhttp-parser's
 * callbacks, which fill them: the target, the head's fields (trimmed as
 * RFC 9110 5.5 says), the body and a chunked body's trailers. A callback
 * that wants the server to act sets a flag on the connection and pauses
 * the parser; http_server.c acts on it.
 */
#include "http_server_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "http_wire.h"

struct http_req *http_req_new(struct http_conn *c)
{
    struct http_req *req = calloc(1, sizeof(*req));

    if (req == NULL || (req->body = evbuffer_new()) == NULL) {
        free(req);
        return NULL;
    }
    req->conn = c;
    TAILQ_INIT(&req->in);
    TAILQ_INIT(&req->out);
    TAILQ_INIT(&req->trailers);
    memcpy(req->peer, c->peer, sizeof(req->peer));
    return req;
}

void http_req_free(struct http_req *req)
{
    if (req == NULL)
        return;
    if (req->release != NULL)
        req->release(req->attached);
    free(req->target);
    if (req->uri != NULL)
        evhttp_uri_free(req->uri);
    evhttp_clear_headers(&req->in);
    evhttp_clear_headers(&req->out);
    evhttp_clear_headers(&req->trailers);
    evbuffer_free(req->body);
    free(req);
}
/* ---- the parser's callbacks ---- */

/*
 * The field just read, into the request's fields. -1 past max_header_fields
 * (head_error: 431) or for a field evhttp refuses (a parser error: 400).
 */
static int http_conn_end_field(struct http_conn *c)
{
    size_t nlen = evbuffer_get_length(c->field), vlen = evbuffer_get_length(c->value);
    size_t trimmed = vlen;
    const char *value, *name;
    int rc;

    if (!c->in_value)
        return 0;
    c->in_value = false;
    if (++c->fields > c->server->limits.max_header_fields) {
        c->head_error = true;
        return -1;
    }
    evbuffer_add(c->field, "", 1);
    name = (const char *)evbuffer_pullup(c->field, -1);
    value = (const char *)evbuffer_pullup(c->value, -1);
    /*
     * Values are kept as C strings, so a NUL ends one here; in a framing field
     * the parser would still read the bytes after it (`chunked\0x` is not
     * chunked to it): two readings of one body's length, refused (400).
     */
    if (vlen > 0 && memchr(value, '\0', vlen) != NULL &&
        (strcasecmp(name, "Transfer-Encoding") == 0 || strcasecmp(name, "Content-Length") == 0))
        return -1;
    http_wire_rtrim(value, &trimmed);
    evbuffer_add(c->value, "", 1);
    value = (const char *)evbuffer_pullup(c->value, -1);
    ((char *)value)[trimmed] = '\0';
    /* fields after a chunked body are its trailers (RFC 9112 7.1.2), apart from the head's */
    rc = evhttp_add_header(c->state == CONN_HEAD ? &c->req->in : &c->req->trailers, name, value);
    evbuffer_drain(c->field, nlen + 1);
    evbuffer_drain(c->value, vlen + 1);
    return rc;
}

static int http_on_message_begin(http_parser *p)
{
    struct http_conn *c = p->data;

    if (c->req == NULL)
        c->req = http_req_new(c);
    return c->req != NULL ? 0 : -1;
}

static int http_on_url(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    size_t have = c->req->target != NULL ? strlen(c->req->target) : 0;
    char *t = realloc(c->req->target, have + len + 1);

    if (t == NULL)
        return -1;
    memcpy(t + have, at, len);
    t[have + len] = '\0';
    c->req->target = t;
    return 0;
}

static int http_on_header_field(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;

    c->line_done = true;
    if (http_conn_end_field(c) != 0)
        return -1;
    return evbuffer_add(c->field, at, len);
}

static int http_on_header_value(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;

    c->in_value = true;
    return evbuffer_add(c->value, at, len);
}

static int http_on_headers_complete(http_parser *p)
{
    struct http_conn *c = p->data;

    if (http_conn_end_field(c) != 0)
        return -1;
    c->head_done = true;
    http_parser_pause(p, 1);
    return 0;
}

/*
 * Check, from `from` on, the CRLF that must follow a chunk's data (RFC 9112
 * 7.1): libhttp-parser, as Debian builds it (not HTTP_PARSER_STRICT), takes
 * any two bytes there, so a front proxy that reads them otherwise would see
 * other requests in the body than we do (smuggling). What lies beyond the
 * bytes being parsed is checked at the next ones (http_server_crlf_check).
 * Returns -1 when a byte is not the one due.
 */
static int http_chunk_crlf(struct http_conn *c, const char *from)
{
    while (c->crlf_at != 0 && from < c->seg_end) {
        if (*from++ != "\r\n"[c->crlf_at - 1]) {
            c->bad_chunk = true;
            return -1;
        }
        c->crlf_at = c->crlf_at == 2 ? 0 : c->crlf_at + 1;
    }
    return 0;
}

int http_server_crlf_check(struct http_conn *c)
{
    return http_chunk_crlf(c, c->seg);
}

static int http_on_body(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;

    if ((p->flags & F_CHUNKED) && p->content_length == 0) { /* this piece ends a chunk */
        c->crlf_at = 1;
        if (http_chunk_crlf(c, at + len) != 0)
            return -1;
    }

    if (c->req->window != 0) { /* streamed: parsing waits once the window is full */
        c->body_grew = true;
        if (evbuffer_add(c->req->body, at, len) != 0)
            return -1;
        if (evbuffer_get_length(c->req->body) >= c->req->window) {
            c->body_full = true;
            http_parser_pause(p, 1);
        }
        return 0;
    }
    if (evbuffer_get_length(c->req->body) + len > c->req->body_limit) {
        c->too_large = true;
        http_parser_pause(p, 1);
        return 0;
    }
    return evbuffer_add(c->req->body, at, len);
}

static int http_on_message_complete(http_parser *p)
{
    struct http_conn *c = p->data;

    if (http_conn_end_field(c) != 0) /* the last trailer field */
        return -1;
    c->message_done = true;
    http_parser_pause(p, 1);
    return 0;
}

void http_server_parser_settings(http_parser_settings *settings)
{
    http_parser_settings_init(settings);
    settings->on_message_begin = http_on_message_begin;
    settings->on_url = http_on_url;
    settings->on_header_field = http_on_header_field;
    settings->on_header_value = http_on_header_value;
    settings->on_headers_complete = http_on_headers_complete;
    settings->on_body = http_on_body;
    settings->on_message_complete = http_on_message_complete;
}
