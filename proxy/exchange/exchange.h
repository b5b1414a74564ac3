/*
 * exchange.h - one client request's life through the proxy: classify, claim,
 * forward once, record, answer; or replay, refuse, wait. One owner, one
 * explicit state; it answers exactly once and is freed only when no Redis,
 * upstream or timer callback can still reach it.
 *
 * The exchanges of one worker thread form an exchange set: the I/O objects
 * they use, the configuration new requests start under, the lists and the
 * counters. The worker owns the set and talks to it through the calls
 * below (its fields are the exchange module's own); the exchange never
 * learns what a worker is (the arrow runs one way: worker -> exchange), and
 * tells other threads about a changed record through the wake callback the
 * worker installs.
 */
#ifndef IDEM_EXCHANGE_H
#define IDEM_EXCHANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "http_server.h"

struct http_req;
struct event_base;
struct config;
struct store;
struct upstream;
struct metrics;
struct budget;
struct inbox;

/* Tell the other threads that the record at record_key changed (best effort). */
typedef void exchange_wake_cb(const char *record_key, void *arg);

/*
 * One worker thread's exchanges: opaque outside proxy/exchange/
 * (exchange_int.h). Its owner is the thread whose event_base it runs on:
 * only that thread calls the functions below, but for the counters
 * (exchange_set_active, _waiting, _unflushed, _unreleased, _busy), which are
 * atomic and which any thread may read.
 */
struct exchange_set;

/*
 * A set for base and its store, upstream client and inbox consumer (NULL:
 * no queued route), all borrowed and outliving it; it takes a reference
 * to conf, the configuration new requests start under. Its requests count
 * what they hold in budget (shared by every set of the process,
 * docs/operations.md#memory); wake_others (may be NULL) is told of every
 * record this set's exchanges change. Owned by the caller
 * (exchange_set_destroy); NULL when out of memory.
 */
struct exchange_set *exchange_set_create(struct event_base *base, struct store *store,
                                         struct upstream *upstream, struct inbox *inbox,
                                         struct metrics *metrics, struct budget *budget,
                                         struct config *conf, exchange_wake_cb *wake_others,
                                         void *wake_arg);

/*
 * Drop the configuration, forget pending releases and free set (NULL: a
 * no-op): at exit, after the store is gone. Owner's thread.
 */
void exchange_set_destroy(struct exchange_set *set);

/*
 * New requests start under conf (a reference is taken); those in flight
 * keep theirs. Owner's thread.
 */
void exchange_set_config(struct exchange_set *set, struct config *conf);

/*
 * The configuration new requests start under (the running one), borrowed:
 * valid until the next exchange_set_config. Owner's thread.
 */
const struct config *exchange_set_conf(const struct exchange_set *set);

/*
 * SIGTERM: from now on a new request is refused (503 shutting-down) and an
 * answer closes its connection; a record write sent again while Redis is
 * away stops in time for deadline_ms (wall clock, ms since the epoch), when
 * the drain ends. Owner's thread.
 */
void exchange_set_drain(struct exchange_set *set, uint64_t deadline_ms);

/* Exchanges not yet freed (a count). Any thread. */
unsigned exchange_set_active(const struct exchange_set *set);

/* Exchanges waiting on another request's record (a count; the waiting gauge). Any thread. */
unsigned exchange_set_waiting(const struct exchange_set *set);

/* Answers still being written to their clients (a count). Any thread. */
unsigned exchange_set_unflushed(const struct exchange_set *set);

/*
 * Claims of refused requests not yet released (a count; the janitor's
 * pending releases, janitor.h). Any thread.
 */
unsigned exchange_set_unreleased(const struct exchange_set *set);

/*
 * Exchanges in flight, answers unsent, and claims of refused requests not
 * yet released, summed; any thread may read them (the SIGTERM drain sums them).
 */
unsigned exchange_set_busy(const struct exchange_set *set);

/*
 * The worker's store followed a failover (redis.sentinel): the claims
 * released unforwarded lately are released again (janitor_failed_over).
 * Owner's thread.
 */
void exchange_set_failed_over(struct exchange_set *set);

/*
 * The client listener's callbacks (http_server.h), arg the struct
 * exchange_set, on its owner's thread (docs/client-contract.md#how-a-request-is-handled).
 *
 * exchange_head: a request's head is read. Refuses framing a server on the
 * path may read otherwise (400 invalid-framing, RFC 9112 11.2) and a
 * Content-Length over limits.max_request_body (413 body-too-large), both
 * before any body byte is read; else lets the body be read up to that limit.
 *
 * exchange_handle: the request is whole; takes it over until it has been
 * answered.
 *
 * exchange_too_large: a chunked body grew past the limit: 413 body-too-large.
 *
 * exchange_refuse: the listener cannot read the request (fault): the
 * problem answer for it (400 invalid-target or invalid-framing, 431
 * head-too-large, 501 method-not-implemented), logged and counted like
 * every refusal.
 */
void exchange_head(struct http_req *req, void *arg);
void exchange_handle(struct http_req *req, void *arg);
void exchange_too_large(struct http_req *req, void *arg);
void exchange_refuse(struct http_req *req, int status, enum http_server_fault fault, void *arg);

/*
 * A record changed (completed, released): let this set's requests waiting on
 * record_key look again now instead of at their next poll. Owner's thread.
 */
void exchange_wake_waiters(struct exchange_set *set, const char *record_key);

#endif
