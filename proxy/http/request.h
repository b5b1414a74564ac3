/*
 * request.h - a client request as the proxy forwards, routes and
 * fingerprints it: the method, the target in origin-form (RFC 9112 3.2.1),
 * its path, the body and the client's address.
 */
#ifndef IDEM_REQUEST_H
#define IDEM_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

struct evhttp_request;
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
 * its path and query. body_bytes points into req's input buffer (made
 * contiguous there, no copy): valid while req is, i.e. until the answer is
 * sent (evhttp keeps a request whose client left until then). Returns 0, or
 * -1 when out of memory (v is then empty). Release with request_view_deinit.
 */
int request_view_init(struct request_view *v, struct evhttp_request *req);

/*
 * Body framing that libevent 2.1 may have read otherwise than the client (or
 * a proxy in front) meant, or NULL when there is none (RFC 9112 6.1, 6.3,
 * 11.2: request smuggling). libevent takes the first Content-Length through
 * strtoll (a sign, leading blanks and an obs-folded line pass), dechunks
 * only when Transfer-Encoding is exactly "chunked" (else falls back to
 * Content-Length or to no body), and never reads a body for HEAD or TRACE;
 * the bytes it leaves unread would be parsed as a next request on the
 * connection. The caller refuses such a request whole and closes the
 * connection. A bodiless method may say "Content-Length: 0". Also refused:
 * a header field name that is not a token (RFC 9112 5.1: whitespace before
 * the colon), where an upstream's parser may end the header block. Returns
 * a static human reason.
 */
const char *request_framing_fault(struct evhttp_request *req);

/*
 * The address of req's peer (evhttp_connection_get_peer: the numeric host,
 * no port) into out (caller-owned, outsize bytes > 0, cut to fit, always
 * NUL-terminated); "" when the connection is gone or unknown.
 */
void request_client_addr(struct evhttp_request *req, char *out, size_t outsize);

/* Free what request_view_init allocated; safe on a zeroed view. */
void request_view_deinit(struct request_view *v);

#endif
