/*
 * upstream_int.h - what the files of proxy/upstream/ share, and no one else.
 *
 * The files stand in one line, each calling only those below it:
 *
 *   upstream.c, upstream_stream.c   the public entry points: buffered and streamed transfers
 *   upstream_call.c                 one transfer's common parts: easy handles, the request,
 *                                   its outcome
 *   upstream_socket.c               libcurl's multi-socket API on the event_base: sockets,
 *                                   the timer, collecting finished transfers
 *
 * upstream_socket.c hands a finished transfer back up through the call's own
 * finish function (struct upstream_call), so it never names the files above.
 */
#ifndef IDEM_UPSTREAM_INT_H
#define IDEM_UPSTREAM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/queue.h>

#include <curl/curl.h>
#include <event2/event_struct.h>
#include <event2/keyvalq_struct.h>

#include "upstream.h"

/*
 * Reuse an idle upstream connection only while it is younger than this. A
 * request written onto a connection the upstream is closing at that moment
 * is an ambiguous outcome (we never resend), so stay under common upstream
 * keep-alive timeouts (Node.js 5 s, nginx 75 s).
 */
#define UPSTREAM_MAX_IDLE_S 4L
#define UPSTREAM_MAX_IDLE_CONNECTIONS 1024L

/*
 * Easy handles kept for reuse: curl_easy_reset keeps a handle's buffers, so a
 * reused handle spares the per-request allocation of curl's 16 KiB receive
 * and 64 KiB upload buffers.
 */
#define UPSTREAM_HANDLE_POOL 256

/*
 * One transfer, buffered (upstream.c) or streamed (upstream_stream.c): each
 * kind embeds this as its first member and sets finish and discard.
 */
struct upstream_call {
    struct upstream *up;
    CURL *easy;
    bool added;                     /* in the multi handle */
    struct curl_slist *request_headers;
    int transmissions;              /* PREREQFUNCTION calls: request send attempts */
    bool resend_refused;
    struct evkeyvalq response_headers;
    upstream_done_cb *cb;
    void *arg;
    /* curl completed the transfer (rc: its result): answer cb once, then free the call */
    void (*finish)(struct upstream_call *call, CURLcode rc);
    /* free the call without calling back (upstream_destroy) */
    void (*discard)(struct upstream_call *call);
    char error[CURL_ERROR_SIZE];
    TAILQ_ENTRY(upstream_call) link;
};

/*
 * One upstream socket, from curl's open callback to its close callback. A
 * socket that has carried a request stays registered with the event loop
 * while its connection idles in curl's pool (EV_READ), so reusing it for the
 * next transfer costs no epoll_ctl: curl's socket callback only says which
 * events a transfer waits for, and CURL_POLL_REMOVE (the transfer is done, or
 * paused in both directions it still has) changes nothing but `in_use`.
 *
 * libcurl 7.88 closes a socket whose connect failed (connect timeout, refused,
 * the losing address of happy eyeballs) with close(2) alone: no close
 * callback, and CURL_POLL_REMOVE only after the close. Such a socket was only
 * ever watched for EV_WRITE (connecting), never asked for CURL_POLL_IN; so
 * only a socket that was (`carried`: connected, it sent a request) is kept
 * watched after CURL_POLL_REMOVE, and a record left behind by a silent close
 * is dropped when its number comes back (upstream_open_socket).
 *
 * curl also asks us to watch sockets it opened itself: the threaded
 * resolver's wake-up socket, while a host name is resolved. Such a socket
 * (`foreign`) gets a record when curl first asks for it, and loses it at
 * CURL_POLL_REMOVE; curl closes it without a close callback, possibly before
 * that REMOVE, so its number can come back first, as after a silent close.
 */
struct upstream_socket {
    struct upstream *up;
    curl_socket_t fd;
    struct event ev;
    short watched;      /* EV_READ|EV_WRITE while ev is added, 0 when not */
    bool in_use;        /* a transfer waits on it (curl asked for events, no REMOVE since) */
    bool carried;       /* curl asked for CURL_POLL_IN once: connected, closed through us */
    bool foreign;       /* curl opened it, not upstream_open_socket (the resolver's) */
};

struct upstream {
    struct event_base *base;
    const struct config *cfg;
    CURLM *multi;
    struct event timer;
    _Atomic unsigned in_flight; /* read by other threads (metrics) */
    /*
     * > 0 while a stream's head, data or read callback runs inside a curl
     * callback: curl refuses to remove a handle then, so upstream_abort waits
     * for the event loop.
     */
    unsigned in_callback;
    TAILQ_HEAD(, upstream_call) calls;
    CURL *pool[UPSTREAM_HANDLE_POOL];   /* idle easy handles, their fixed options set */
    size_t n_pool;
    struct upstream_socket **sockets;   /* by fd: the sockets curl opened through us */
    size_t n_sockets;                   /* length of sockets */
};

/* upstream_socket.c */

/* Wire up->multi's socket and timer callbacks onto up->base (upstream_create). */
void upstream_socket_wire(struct upstream *up);

/* Open and close e's sockets through up, so the event loop knows each one. */
void upstream_socket_wire_easy(struct upstream *up, CURL *e);

/*
 * Forget every socket record and stop the timer: after curl_multi_cleanup,
 * which closes the idle connections (upstream_destroy).
 */
void upstream_sockets_free(struct upstream *up);

/* upstream_call.c */

/*
 * Set up call (zeroed by the caller) for a request to up: an easy handle
 * from the pool, the URL (upstream base + target, copied), the request's
 * header fields (RFC 9110 7.6.1: hop-by-hop ones dropped; client_addr
 * appended to X-Forwarded-For), and the options every transfer sets.
 * with_body: the request has content (Content-Type is then not made up).
 * The caller then sets the method and body, and its own callbacks, and
 * calls upstream_call_add. Returns 0, or -1 when out of memory (then
 * upstream_call_deinit frees what was set up).
 */
int upstream_call_init(struct upstream_call *call, struct upstream *up, const char *target,
                       const struct evkeyvalq *headers, const char *client_addr, bool with_body)
    __attribute__((warn_unused_result));

/*
 * The method and body of call's request, every option a previous transfer
 * on the handle may have set (NOBODY, POST, POSTFIELDS, CUSTOMREQUEST) set
 * again. body != NULL: len bytes in memory (borrowed until the transfer
 * ends). body == NULL and len != 0: read from CURLOPT_READFUNCTION, len
 * bytes, or chunked (RFC 9112 7.1) when len is -1. with_body false: no
 * content (GET, HEAD, DELETE...).
 */
void upstream_call_set_method(struct upstream_call *call, const char *method, bool with_body,
                              const char *body, long long len);

/* Whether method carries content even when empty (POST, PUT, PATCH). */
bool upstream_method_has_body(const char *method);

/* Start the transfer: 0, or -1 when curl refuses it (then nothing was sent). */
int upstream_call_add(struct upstream_call *call) __attribute__((warn_unused_result));

/*
 * Free what upstream_call_init and upstream_call_add took: the transfer
 * leaves the multi handle (one still running loses its connection), the
 * easy handle goes back to the pool. Not call itself. Never from inside a
 * curl callback.
 */
void upstream_call_deinit(struct upstream_call *call);

/*
 * The outcome of a transfer that ended with rc, its static detail, and for a
 * failure the log's cause (the upstream's address, curl's reason) in cause.
 */
enum upstream_outcome upstream_call_outcome(const struct upstream_call *call, CURLcode rc,
                                            const char **detail, char *cause,
                                            size_t cause_size);

/*
 * Append the fields of the last response curl received, of one origin
 * (CURLH_HEADER: the final head's; CURLH_TRAILER: the trailer section's), in
 * order, to call->response_headers (a field evhttp refuses is left out).
 */
void upstream_call_read_fields(struct upstream_call *call, unsigned int origin);

#endif
