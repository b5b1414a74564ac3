/*
 * exchange.h - one client request's life through the proxy: classify, claim,
 * forward once, record, answer; or replay, refuse, wait. One owner, one
 * explicit state; it answers exactly once and is freed only when no Redis,
 * upstream or timer callback can still reach it.
 *
 * The exchanges of one worker thread form an exchange set: the I/O objects
 * they use, the configuration new requests start under, the lists and the
 * counters. The worker owns the set and fills it in; the exchange never
 * learns what a worker is (the arrow runs one way: worker -> exchange), and
 * tells other threads about a changed record through the wake callback the
 * worker installs.
 */
#ifndef IDEM_EXCHANGE_H
#define IDEM_EXCHANGE_H

#include <stdbool.h>
#include <sys/queue.h>

#include "janitor.h"
#include "reply.h"

struct evhttp_request;
struct event_base;
struct config;
struct store;
struct upstream;
struct metrics;
struct budget;
struct exchange;
struct inbox;

/* Tell the other threads that the record at record_key changed (best effort). */
typedef void exchange_wake_cb(const char *record_key, void *arg);

struct exchange_set {
    struct event_base *base;
    struct store *store;                    /* borrowed from the worker */
    struct upstream *upstream;              /* borrowed */
    struct inbox *inbox;                    /* this worker's inbox consumer, or NULL; borrowed */
    struct metrics *metrics;                /* the process's, shared */
    struct budget *budget;                  /* limits.max_buffered: the process's, shared */
    struct config *conf;                    /* new requests start under it; one reference */
    bool draining;                          /* after SIGTERM: refuse new requests */
    uint64_t drain_deadline_ms;             /* wall clock: when the drain ends (draining) */
    _Atomic unsigned active;                /* exchanges not yet freed */
    _Atomic unsigned unflushed;             /* answers evhttp is still writing */
    _Atomic unsigned waiting;               /* exchanges in `waiters` */
    TAILQ_HEAD(, exchange) waiters;         /* waiting on another request's record */
    struct reply_conns conns;               /* the client connections (reply.h) */
    struct janitor janitor;                 /* claims of refused requests to release */
    exchange_wake_cb *wake_others;
    void *wake_arg;
};

/*
 * Set up set (embedded) for base and its store and upstream client, taking a
 * reference to conf; its requests count what they hold in budget (shared by
 * every set of the process, docs/operations.md#memory); wake_others (may be NULL) is
 * told of every record this set's exchanges change.
 */
void exchange_set_init(struct exchange_set *set, struct event_base *base, struct store *store,
                       struct upstream *upstream, struct metrics *metrics,
                       struct budget *budget, struct config *conf,
                       exchange_wake_cb *wake_others, void *wake_arg);

/* New requests start under conf (a reference is taken); those in flight keep theirs. */
void exchange_set_config(struct exchange_set *set, struct config *conf);

/*
 * Exchanges in flight, answers unsent, and claims of refused requests not
 * yet released; any thread may read them (the SIGTERM drain sums them).
 */
unsigned exchange_set_busy(const struct exchange_set *set);

/*
 * The worker's store followed a failover (redis.sentinel): the claims
 * released unforwarded lately are released again (janitor_failed_over).
 */
void exchange_set_failed_over(struct exchange_set *set);

/* Drop the configuration and forget pending releases: at exit, after the store is gone. */
void exchange_set_deinit(struct exchange_set *set);

/*
 * The evhttp request callback of the client listener (docs/client-contract.md#how-a-request-is-handled and 5).
 * Takes over req until it has been answered; arg is the struct exchange_set.
 */
void exchange_handle(struct evhttp_request *req, void *arg);

/*
 * A record changed (completed, released): let this set's requests waiting on
 * record_key look again now instead of at their next poll.
 */
void exchange_wake_waiters(struct exchange_set *set, const char *record_key);

#endif
