/*
 * request.c - the client request as the proxy sees it; see request.h.
 */
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "headers.h"
#include "http_server.h"

static const char *request_method_name(enum evhttp_cmd_type cmd)
{
    switch (cmd) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    }
    return "GET";
}

/* The target as forwarded (origin-form) and its path; invalid_target for what we refuse. */
static int request_take_target(struct request_view *v, struct http_req *req)
{
    const char *target = http_server_target(req);

    if (target != NULL && target[0] == '/') {
        /* origin-form: the path is everything before '?'; "//x" is a path here, not an authority */
        size_t len = strlen(target), path_len = strcspn(target, "?#");
        if (len + 1 + path_len + 1 <= sizeof(v->small)) {
            v->target = memcpy(v->small, target, len + 1);
            v->path = memcpy(v->small + len + 1, target, path_len);
            v->path[path_len] = '\0';
        } else {
            v->target = strdup(target);
            v->path = strndup(target, path_len);
        }
    } else {
        const struct evhttp_uri *uri = http_server_uri(req);
        const char *p = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
        const char *q = uri != NULL ? evhttp_uri_get_query(uri) : NULL;
        v->path = strdup(p != NULL && p[0] == '/' ? p : "/");
        if (v->path != NULL && asprintf(&v->target, "%s%s%s", v->path, q != NULL ? "?" : "",
                                        q != NULL ? q : "") < 0)
            v->target = NULL;
        v->invalid_target = target == NULL || uri == NULL || evhttp_uri_get_host(uri) == NULL;
    }
    /* RFC 9112 3.2: no control character, space or fragment in a request-target */
    for (const char *c = v->target; c != NULL && *c != '\0' && !v->invalid_target; c++)
        v->invalid_target = (unsigned char)*c <= 0x20 || *c == 0x7f || *c == '#';
    return v->target != NULL && v->path != NULL ? 0 : -1;
}

int request_view_init(struct request_view *v, struct http_req *req)
{
    struct evbuffer *body = http_server_body(req);
    size_t addr_len = strnlen(http_server_peer(req), sizeof(v->client_addr) - 1);

    v->method = request_method_name(http_server_command(req));
    v->target = v->path = NULL;
    v->invalid_target = false;
    v->client_addr[0] = '\0';
    if (request_take_target(v, req) != 0) {
        request_view_deinit(v);
        return -1;
    }
    v->body_len = evbuffer_get_length(body);
    v->body_bytes = v->body_len > 0 ? (const char *)evbuffer_pullup(body, -1) : NULL;
    if (v->body_len > 0 && v->body_bytes == NULL) {
        request_view_deinit(v);
        return -1;
    }
    memcpy(v->client_addr, http_server_peer(req), addr_len);
    v->client_addr[addr_len] = '\0';
    return 0;
}

void request_view_deinit(struct request_view *v)
{
    if (v->target != v->small) { /* else both live in v->small */
        free(v->target);
        free(v->path);
    }
    v->target = v->path = NULL;
    v->body_bytes = NULL;
    v->body_len = 0;
}

/* Whether a body may be framed for cmd (RFC 9110 9.3.2, 9.3.8: HEAD and TRACE have none). */
static bool request_method_reads_body(enum evhttp_cmd_type cmd)
{
    return cmd != EVHTTP_REQ_HEAD && cmd != EVHTTP_REQ_TRACE;
}

/* RFC 9110 5.6.2: tchar, the characters of a token such as a field name. */
static bool request_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/*
 * A header line our parser took as given but another parser may read
 * otherwise: a field name that is not a token (RFC 9112 5.1: "X-Note : v",
 * whitespace before the colon, must be refused; an upstream that stops its
 * header block there would read the body as a next request). Values are
 * line-bounded, so a control character in one cannot move the framing; the
 * key's own rules refuse one there (invalid-key). NULL when none.
 */
static const char *request_header_fault(const struct evkeyvalq *headers)
{
    const struct evkeyval *h;

    TAILQ_FOREACH(h, headers, next) {
        if (h->key[0] == '\0')
            return "a header line has an empty field name";
        for (const unsigned char *c = (const unsigned char *)h->key; *c != '\0'; c++)
            if (!request_tchar(*c))
                return "a header field name has a character outside RFC 9110 tchar, such as "
                       "whitespace before the colon";
    }
    return NULL;
}

const char *request_framing_fault(struct http_req *req)
{
    const struct evkeyvalq *headers = http_server_input_headers(req);
    int n_cl, n_te, major, minor;
    const char *cl = header_find_all(headers, "Content-Length", &n_cl);
    const char *te = header_find_all(headers, "Transfer-Encoding", &n_te);
    bool reads_body = request_method_reads_body(http_server_command(req));

    http_server_version(req, &major, &minor);
    if (major != 1 || minor > 1)
        return "only HTTP/1.0 and HTTP/1.1 requests are served";
    const char *fault = request_header_fault(headers);
    if (fault != NULL)
        return fault;
    if (n_te > 0) {
        if (n_te > 1 || strcasecmp(te, "chunked") != 0)
            return "Transfer-Encoding must be exactly one 'chunked'";
        if (n_cl > 0)
            return "a request must not carry both Transfer-Encoding and Content-Length";
        if (minor == 0)
            return "Transfer-Encoding is not defined for HTTP/1.0 requests";
        if (!reads_body)
            return "this method has no body, so it must not carry Transfer-Encoding";
        return NULL;
    }
    if (n_cl > 1)
        return "Content-Length must appear once";
    if (n_cl == 1) {
        if (cl[0] == '\0' || strspn(cl, "0123456789") != strlen(cl))
            return "Content-Length must be decimal digits only";
        if (!reads_body && strspn(cl, "0") != strlen(cl))
            return "this method has no body, so its Content-Length must be 0";
    }
    return NULL;
}
