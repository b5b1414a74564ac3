/*
 * reply.h - building and sending the answers of the client listener: the
 * proxy's own problem details (RFC 9457, docs/client-contract.md#problem-details), a stored record
 * replayed (docs/client-contract.md#how-a-request-is-handled), the upstream's answer without its
 * hop-by-hop fields (RFC 9110 7.6.1), and tracking each answer until evhttp
 * has written it out (the SIGTERM drain waits for that).
 */
#ifndef IDEM_REPLY_H
#define IDEM_REPLY_H

#include <stdbool.h>

#include "budget.h"
#include "problem.h"

struct evhttp_request;
struct evkeyvalq;
struct evbuffer;
struct record;

/*
 * Add the header fields of the proxy's own answer to req and return its body
 * (a new evbuffer the caller passes to reply_send), or NULL when out of
 * memory: RFC 9457 problem+json, or with stripe (`errors.format: stripe`)
 * the {"error": {...}} body Stripe's SDKs take for a failure, plus the
 * Stripe-Should-Retry hint their retry loop obeys. retry_after_s > 0 adds
 * Retry-After; replayed adds Idempotent-Replayed: true.
 */
struct evbuffer *reply_problem(struct evhttp_request *req, enum problem p, int status,
                               const char *detail, int retry_after_s, bool replayed,
                               bool stripe);

/*
 * Move the end-to-end fields of an upstream answer from `from` into req's
 * output headers (RFC 9110 7.6.1: hop-by-hop ones, fields named by
 * Connection, Content-Length and values with a bare CR or LF stay behind).
 * A moved entry is freed with req, as evhttp_add_header's would be.
 */
void reply_move_headers(struct evhttp_request *req, struct evkeyvalq *from);

/*
 * Add a finished record's stored fields and Idempotent-Replayed: true to req
 * and return its body (a new evbuffer; NULL when out of memory). evhttp
 * computes a fresh Content-Length.
 */
struct evbuffer *reply_replay(struct evhttp_request *req, const struct record *rec);

/*
 * The client connections of one worker (embedded in its exchange set). Each
 * connection that carried a request has a record here until evhttp frees
 * it: its answer-in-flight flag and a second EV_READ event on its socket
 * (see reply.c) that keeps the socket in epoll while evhttp pauses reading
 * during a request, so a request costs no epoll_ctl pair.
 */
struct reply_conn;
struct reply_conns {
    struct event_base *base;
    _Atomic unsigned *unflushed;    /* answers evhttp is still writing (any thread reads it) */
    struct reply_conn **by_fd;      /* indexed by socket */
    size_t n_by_fd;
};

/* Set up conns for base; *unflushed counts the answers not yet written out. */
void reply_conns_init(struct reply_conns *conns, struct event_base *base,
                      _Atomic unsigned *unflushed);

/*
 * Forget every connection record (their events removed, evhttp's close
 * callbacks unset). Call before the evhttp that owns the connections is
 * freed, on the worker's thread.
 */
void reply_conns_deinit(struct reply_conns *conns);

/*
 * A request arrived on req's connection: make sure the connection has its
 * record and its read event. Call first thing in the request callback.
 */
void reply_watch(struct reply_conns *conns, struct evhttp_request *req);

/*
 * Send status with body (may be NULL; freed here) on req, which evhttp then
 * owns. With close, the connection closes after it (a draining proxy moves
 * keep-alive clients away). conns->unflushed is incremented until evhttp has
 * written the answer out or the connection closed. What held counts (the
 * answer's bytes under limits.max_buffered) is moved out of it and given
 * back at that moment too (at once when there is nothing to wait for: the
 * client is gone, or HEAD).
 */
void reply_send(struct evhttp_request *req, int status, struct evbuffer *body, bool close,
                struct reply_conns *conns, struct budget_hold *held);

#endif
