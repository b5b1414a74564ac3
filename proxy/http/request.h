/*
 * request.h - a client request as the proxy forwards, routes and
 * fingerprints it: the method, the target in origin-form (RFC 9112 3.2.1),
 * its path, the body and the client's address.
 */
#ifndef IDEM_REQUEST_H
#define IDEM_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

struct http_req;
struct evbuffer;

struct request_view {
    const char *method;             /* static string */
    char *target;                   /* path with query, origin-form; in `small` or owned */
    char *path;                     /* the target's path (no query), as sent; in `small` or owned */
    bool invalid_target;            /* a control character, or neither origin- nor absolute-form */
    const char *body_bytes;         /* the body, contiguous in req's input buffer; NULL when empty */
    size_t body_len;                /* bytes */
    char client_addr[64];           /* the peer's address, "" when unknown */
    char small[256];                /* target and path when both fit: no allocation */
};

/*
 * Fill v from req. An absolute-form target (RFC 9112 3.2.2) is rewritten to
 * origin-form: the upstream gets, and the routes and the fingerprint see,
 * its path and query. body_bytes points into req's body (made contiguous
 * there, no copy): valid while req is, i.e. until the answer is sent
 * (http_server keeps a request whose client left until then). Returns 0, or
 * -1 when out of memory (v is then empty). Release with request_view_deinit.
 */
int request_view_init(struct request_view *v, struct http_req *req);

/*
 * Body framing that a server or proxy on the path may read otherwise than
 * the client meant, or NULL when there is none (RFC 9112 6.1, 6.3, 11.2:
 * request smuggling), decided from the head alone, before any body byte is
 * read: Transfer-Encoding other than exactly one "chunked", or with a
 * Content-Length, or on HTTP/1.0; Content-Length twice or not all digits;
 * a body framed on HEAD or TRACE (a bodiless method may say
 * "Content-Length: 0"); a version other than 1.0 and 1.1. Also refused: a
 * header field name that is not a token (RFC 9112 5.1: whitespace before
 * the colon), where an upstream's parser may end the header block. The
 * caller refuses such a request whole and closes the connection. Returns a
 * static human reason.
 */
const char *request_framing_fault(struct http_req *req);

/* Free what request_view_init allocated; safe on a zeroed view. */
void request_view_deinit(struct request_view *v);

#endif
