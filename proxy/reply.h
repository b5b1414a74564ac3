/*
 * reply.h - building and sending the answers of the client listener: the
 * proxy's own problem details (RFC 9457, README "Problem details"), a stored record
 * replayed (README "How a request is handled" "Replay"), the upstream's answer without its
 * hop-by-hop fields (RFC 9110 7.6.1), and tracking each answer until evhttp
 * has written it out (the SIGTERM drain waits for that).
 */
#ifndef IDEM_REPLY_H
#define IDEM_REPLY_H

#include <stdbool.h>

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
 * Send status with body (may be NULL; freed here) on req, which evhttp then
 * owns. With close, the connection closes after it (a draining proxy moves
 * keep-alive clients away). *unflushed is incremented until evhttp has
 * written the answer out or the connection closed (any thread may read it).
 */
void reply_send(struct evhttp_request *req, int status, struct evbuffer *body, bool close,
                _Atomic unsigned *unflushed);

#endif
