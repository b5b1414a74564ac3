/*
 * http_server.h - a small HTTP/1.1 server (RFC 9112) over libevent
 * bufferevents and an evconnlistener, parsing with libhttp-parser. It knows
 * nothing of what it serves: its bounds are checked before a handler sees a
 * request, and a handler sees each request's head before its body is read,
 * so it can refuse the body (401, 413) without reading it.
 *
 * Bounds (struct http_server_limits): connections at once (at the cap the
 * listener stops accepting, so further connections wait in the kernel's
 * backlog and cost the process nothing), bytes and fields of a head (431),
 * the time from a connection's accept, or the end of its previous answer,
 * to the end of the next head (the connection is closed), the time between
 * two reads of a body and to write an answer (closed), and a body's size
 * (the head callback's choice; 413 by the too_large callback).
 *
 * One request per connection at a time: bytes a client pipelines wait in
 * the connection's buffer (at most max_head_bytes) until the answer is out.
 * Everything runs on the event_base's thread.
 */
#ifndef IDEM_HTTP_SERVER_H
#define IDEM_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/http.h>

struct event_base;
struct evbuffer;
struct evconnlistener;
struct evhttp_uri;
struct evkeyvalq;
struct http_server;
struct http_req;

struct http_server_limits {
    unsigned max_connections;       /* open at once; 0: no cap */
    size_t max_head_bytes;          /* request line and fields, bytes (431 past it) */
    unsigned max_header_fields;     /* fields of a head (431 past it) */
    unsigned head_timeout_ms;       /* accept or end of the previous answer -> end of the head;
                                       with idle_timeout_ms: first byte of the head -> its end */
    unsigned idle_timeout_ms;       /* 0, or: accept or end of the previous answer -> first
                                       byte of the next head (a kept-alive connection's idle) */
    unsigned read_timeout_ms;       /* longest wait for the next bytes of a body */
    unsigned write_timeout_ms;      /* longest wait for the client to take an answer's bytes */
    unsigned methods;               /* enum evhttp_cmd_type mask; others get 501 */
    bool close_over_cap;            /* at max_connections: accept and close at once, evicting
                                       none (else: make room by closing the connection that has
                                       waited longest for a head, or stop accepting while every
                                       connection is busy: the kernel's backlog waits) */
    size_t linger_bytes;            /* after a closing answer: unread bytes dropped at most; 0: 1 MiB */
    bool any_target;                /* hand on every target the parser reads (absolute-form,
                                       "*"): the handler checks it; else only origin-form */
    bool lenient_values;            /* control characters in field values reach the handler,
                                       whose rules refuse them where they matter */
};

/* Why the server refuses a request before a handler has it (the refuse callback). */
enum http_server_fault {
    HTTP_SERVER_FAULT_TARGET,       /* the request line cannot be read: 400 */
    HTTP_SERVER_FAULT_FRAMING,      /* the fields or the body's framing cannot be read safely: 400 */
    HTTP_SERVER_FAULT_HEAD_TOO_LARGE, /* request line and fields over the bounds: 431 */
    HTTP_SERVER_FAULT_METHOD,       /* a method outside limits.methods: 501 */
};

/*
 * What a server calls, each with its arg, on its event_base's thread. A
 * request is answered exactly once, with http_server_reply, by whichever
 * callback (or a later event) answers it.
 */
struct http_server_callbacks {
    /*
     * The head is read (method allowed, target parsed): answer the request
     * now (then its body is never read, and the connection closes after
     * the answer when a body was announced), or let the body be read with
     * http_server_accept_body, or neither (then only a request without a
     * body goes on). The request belongs to the server until request().
     */
    void (*head)(struct http_req *req, void *arg);
    /* The body is read (http_server_body): the request is the handler's until it answers. */
    void (*request)(struct http_req *req, void *arg);
    /*
     * The body is larger than the head callback accepted (Content-Length
     * known at the head, or a chunked body as it grows): answer it (413);
     * the connection closes after that answer. NULL: a plain 413.
     */
    void (*too_large)(struct http_req *req, void *arg);
    /*
     * The server refuses the request (fault, with status): answer it with
     * http_server_reply (the connection closes after it; the head may be
     * partly read: only the version, method and the fields read so far are
     * there, the target may be NULL). NULL: a plain-text answer.
     */
    void (*refuse)(struct http_req *req, int status, enum http_server_fault fault, void *arg);
    void *arg;
};

/*
 * A server on base taking the connections of lev (taken over: freed with the
 * server; its callbacks are the server's). limits and cb are copied.
 * Returns NULL when out of memory (lev is freed then too).
 */
struct http_server *http_server_new(struct event_base *base, struct evconnlistener *lev,
                                    const struct http_server_limits *limits,
                                    const struct http_server_callbacks *cb);

/*
 * Close every connection and the listener and free s (NULL is fine). A
 * request its handler still holds stays valid until answered (the answer
 * then goes nowhere). On base's thread, with base no longer running.
 */
void http_server_free(struct http_server *s);

/* Connections open now. */
unsigned http_server_connections(const struct http_server *s);

/*
 * New bounds for s (copied): connections accepted from now on, and every
 * wait armed from now on, use them.
 */
void http_server_set_limits(struct http_server *s, const struct http_server_limits *limits);

/* Connections closed at once because s was at limits.max_connections (close_over_cap). */
unsigned long long http_server_refused(const struct http_server *s);

/*
 * Stop accepting: the listening socket is closed (new connections are
 * refused by the kernel); open connections go on. For a drain.
 */
void http_server_stop_accepting(struct http_server *s);

/* ---- a request ---- */

/* Its method; only methods in limits.methods reach a callback. */
enum evhttp_cmd_type http_server_command(const struct http_req *req);

/* Its target as sent (RFC 9112 section 3.2), NUL-terminated; NULL only in the refuse callback. */
const char *http_server_target(const struct http_req *req);

/* Its HTTP version (RFC 9112 section 2.3), e.g. 1 and 1. */
void http_server_version(const struct http_req *req, int *major, int *minor);

/*
 * The target parsed (evhttp_uri_parse_with_flags, EVHTTP_URI_NONCONFORMANT);
 * never NULL without limits.any_target, may be NULL with it.
 */
const struct evhttp_uri *http_server_uri(const struct http_req *req);

/* The request's fields as sent, in order (evhttp_find_header reads them). */
struct evkeyvalq *http_server_input_headers(struct http_req *req);

/* The fields of its answer: add them before http_server_reply. */
struct evkeyvalq *http_server_output_headers(struct http_req *req);

/* The trailer fields of a chunked body (RFC 9112 section 7.1.2), kept apart from the head's. */
struct evkeyvalq *http_server_input_trailers(struct http_req *req);

/* The body read (empty before request(), or without one). */
struct evbuffer *http_server_body(struct http_req *req);

/*
 * Content-Length of the body announced, -1 when the body is chunked (its
 * size unknown until read), 0 without a body.
 */
long long http_server_content_length(const struct http_req *req);

/* From the head callback: read a body of up to max_bytes (more: too_large). */
void http_server_accept_body(struct http_req *req, size_t max_bytes);

/* The client's numeric address, "" once the client went away. Static per request. */
const char *http_server_peer(const struct http_req *req);

/* The connection closes after req's answer (Connection: close). Before http_server_reply. */
void http_server_close_after(struct http_req *req);

/*
 * Attach data to req: release(data) runs once when req is freed (answered
 * and written, or its client gone before a handler had it). One per request.
 */
void http_server_attach(struct http_req *req, void *data, void (*release)(void *data));

/* What http_server_attach attached, or NULL. */
void *http_server_attached(const struct http_req *req);

/* The status of the answer given, 0 before http_server_reply. */
int http_server_status(const struct http_req *req);

/*
 * Called once for req: written true once its answer's last byte went to
 * the socket, false when the connection failed or closed first (before the
 * answer, or while it was written). Set before answering.
 */
void http_server_on_done(struct http_req *req, void (*cb)(struct http_req *req, bool written,
                                                          void *arg), void *arg);

/*
 * Answer req: status (100..599), reason (static; NULL: the standard one),
 * the output headers and body (its bytes are moved out; NULL: empty).
 * Content-Length (the body's length, also for HEAD, which gets no body;
 * none for 1xx, 204 and 304, which have no body: RFC 9110 8.6), Date, and
 * Connection: close when the connection ends after it (the client asked,
 * HTTP/1.0 without keep-alive, a body left unread, the client half-closed,
 * or http_server_close_after). A request whose client went away is freed
 * here (its done callback told first). After this call req is the
 * server's: do not touch it.
 */
void http_server_reply(struct http_req *req, int status, const char *reason,
                       struct evbuffer *body);

/* ---- streaming ---- */

/*
 * From the head callback: hand the body on as it arrives instead of whole.
 * At most about window bytes wait in http_server_body(req) (parsing stops
 * while it holds that many; the connection then reads no more than its
 * input bound from the socket); readable(req, arg) runs from the event loop
 * when bytes arrived or the body is complete (http_server_body_complete).
 * The request callback is not called: the handler holds req from now on,
 * even after its client went away (the done callback says so), until it
 * answers (http_server_reply, or http_server_reply_start ... _end) or calls
 * http_server_reply_abort. No body limit applies.
 */
void http_server_stream_body(struct http_req *req, size_t window,
                             void (*readable)(struct http_req *req, void *arg), void *arg);

/* The handler took bytes out of http_server_body(req): read on (from the event loop, later). */
void http_server_body_resume(struct http_req *req);

/* Whether a streamed body's last byte has been read (true at once without a body). */
bool http_server_body_complete(const struct http_req *req);

/*
 * Begin a streamed answer: the status line and req's output headers, framed
 * by content_length (bytes; -1 unknown: chunked for HTTP/1.1, the end of the
 * connection for HTTP/1.0; written for HEAD too, which gets no body; none
 * for 1xx, 204, 304). May come while the body is still arriving. Returns 0,
 * or -1 when the client is gone or an answer was begun.
 */
int http_server_reply_start(struct http_req *req, int status, const char *reason,
                            long long content_length);

/*
 * Append the bytes of data (moved out of it) to the answer begun. Returns 0,
 * or -1 when the client is gone (the bytes are dropped).
 */
int http_server_reply_data(struct http_req *req, struct evbuffer *data);

/* Bytes of the answer written but not yet taken by the client's socket. */
size_t http_server_output_pending(const struct http_req *req);

/*
 * Call cb(req, arg) once, from the event loop, when no more than below
 * bytes of the answer wait for the client (back-pressure: stop feeding the
 * answer while http_server_output_pending is high, resume from cb).
 */
void http_server_on_writable(struct http_req *req, size_t below,
                             void (*cb)(struct http_req *req, void *arg), void *arg);

/*
 * End the answer begun (a chunked one with trailers, RFC 9112 7.1.2; NULL:
 * none). The connection closes after it when the body was not read whole.
 * After this call req is the server's; the done callback says whether the
 * last byte went out.
 */
void http_server_reply_end(struct http_req *req, const struct evkeyvalq *trailers);

/*
 * Give up req: its connection is closed at once (an answer begun stays cut
 * short, which the client sees as such), req is freed; the done callback
 * is not called.
 */
void http_server_reply_abort(struct http_req *req);

#endif
