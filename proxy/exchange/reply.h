/*
 * reply.h - building and sending the answers of the client listener: the
 * proxy's own problem details (RFC 9457, docs/client-contract.md#problem-details), a stored record
 * replayed (docs/client-contract.md#how-a-request-is-handled), the upstream's answer without its
 * hop-by-hop fields (RFC 9110 7.6.1), and tracking each answer until
 * http_server has written it out (the SIGTERM drain waits for that).
 */
#ifndef IDEM_REPLY_H
#define IDEM_REPLY_H

#include <stdbool.h>

#include "budget.h"
#include "problem.h"

struct http_req;
struct evkeyvalq;
struct evbuffer;
struct record;

/*
 * The field that names a held record on the client's answer
 * (docs/client-contract.md#outcome-unknown).
 */
#define REPLY_RECORD_ID_HEADER "Idempotency-Record-Id"

/*
 * Retry-After of every outcome-unknown answer, seconds: how often a client
 * retries to pick up an operator's resolution (docs/client-contract.md#outcome-unknown).
 * Over 60 s: an SDK that waits out a Retry-After of up to a minute inside
 * one call would otherwise hold its caller that long per retry.
 */
#define REPLY_OUTCOME_UNKNOWN_RETRY_AFTER_S 120

/*
 * Add the header fields of the proxy's own answer to req and return its body
 * (a new evbuffer the caller passes to reply_send), or NULL when out of
 * memory: RFC 9457 problem+json, or with stripe (`errors.format: stripe`)
 * the {"error": {...}} body Stripe's SDKs take for a failure, plus the
 * Stripe-Should-Retry hint their retry loop obeys. retry_after_s > 0 adds
 * Retry-After; replayed adds Idempotent-Replayed: true; record_id (NULL:
 * none; borrowed) adds the body's record_id member and REPLY_RECORD_ID_HEADER.
 */
struct evbuffer *reply_problem(struct http_req *req, enum problem p, int status,
                               const char *detail, int retry_after_s, bool replayed,
                               const char *record_id, bool stripe);

/*
 * Move the end-to-end fields of an upstream answer from `from` into req's
 * output headers (RFC 9110 7.6.1: hop-by-hop ones, fields named by
 * Connection, Content-Length and values with a bare CR or LF stay behind).
 * A moved entry is freed with req, as evhttp_add_header's would be.
 */
void reply_move_headers(struct http_req *req, struct evkeyvalq *from);

/*
 * Mark the upstream's answer to this request's own execution, its fields
 * already in req's output headers (docs/client-contract.md#the-replay-marker):
 * drop any Idempotent-Replayed field the upstream sent (the proxy alone
 * says whether an answer is a replay), then, with say_false
 * (replayed_header_on_first), add Idempotent-Replayed: false. Never
 * stored: the record is written from the upstream's fields without it,
 * and a replay says true.
 */
void reply_mark_executed(struct http_req *req, bool say_false);

/*
 * Add a finished record's stored fields and Idempotent-Replayed: true to req
 * and return its body (a new evbuffer; NULL when out of memory). http_server
 * writes a fresh Content-Length.
 */
struct evbuffer *reply_replay(struct http_req *req, const struct record *rec);

/*
 * Send status with body (may be NULL; freed here) on req, which http_server
 * then owns. With close, the connection closes after it (a draining proxy
 * moves keep-alive clients away). *unflushed (any thread reads it) is
 * incremented until the answer is written out or its connection closed.
 * What held counts (the answer's bytes under limits.max_buffered) is moved
 * out of it and given back at that moment too (at once when the client is
 * gone).
 */
void reply_send(struct http_req *req, int status, struct evbuffer *body, bool close,
                _Atomic unsigned *unflushed, struct budget_hold *held);

/*
 * End a streamed answer on req (http_server_reply_end, with trailers, NULL:
 * none) or cut it short (http_server_reply_abort: the connection closes).
 * Its count in *unflushed, taken when it began, is given back once its last
 * byte is out or the client is gone (at once for a cut). After this call
 * req is http_server's.
 */
void reply_stream_end(struct http_req *req, const struct evkeyvalq *trailers,
                      _Atomic unsigned *unflushed);
void reply_stream_cut(struct http_req *req, _Atomic unsigned *unflushed);

#endif
