/*
 * server.h - a worker: one event_base with its client listener, admin
 * listener, Redis store and upstream client. Exchanges belong to a worker.
 */
#ifndef IDEM_SERVER_H
#define IDEM_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "config.h"
#include "metrics.h"

struct event_base;
struct evhttp;
struct evhttp_bound_socket;
struct store;
struct upstream;
struct exchange;
struct orphan_claim;

/*
 * A loaded configuration shared by the worker and the exchanges that started
 * under it: a SIGHUP reload swaps the worker's, and the old one is freed when
 * its last exchange ends.
 */
struct worker_config {
    struct config cfg;
    unsigned refs;
};

struct worker {
    struct event_base *base;
    struct worker_config *conf;             /* current: routes, policies, limits; one ref */
    struct worker_config *boot;             /* listeners, Redis, upstream: fixed until restart; one ref */
    struct store *store;
    struct upstream *upstream;
    struct evhttp *http;
    struct evhttp_bound_socket *listener;
    struct evhttp *admin_http;
    unsigned active;                        /* exchanges not yet freed */
    unsigned unflushed;                     /* answers evhttp is still writing */
    unsigned waiting;                       /* exchanges in `waiters` */
    TAILQ_HEAD(, exchange) waiters;         /* waiting on another request's record */
    TAILQ_HEAD(, orphan_claim) orphans;     /* claims that may have landed unanswered */
    bool draining;
    struct metrics metrics;
};

/*
 * Load FILE into a new worker_config holding one reference. NULL on error,
 * with "FILE:LINE: what" in err (errlen bytes).
 */
struct worker_config *worker_config_load(const char *file, char *err, size_t errlen);

/* Take / drop a reference; the last put frees the configuration. NULL is fine for put. */
struct worker_config *worker_config_get(struct worker_config *wc);
void worker_config_put(struct worker_config *wc);

/*
 * Set up w on base with wc (w takes its own references): bind the client and
 * admin listeners, create the store and upstream client. Returns 0, or -1
 * with one line in err (errlen bytes), e.g. the port in use.
 */
int worker_init(struct worker *w, struct event_base *base, struct worker_config *wc, char *err,
                size_t errlen);

/*
 * SIGHUP: load FILE and apply its routes, policies and limits to new requests
 * (requests in flight finish under the old ones). Refused, with the reason
 * logged and the running configuration kept, when FILE is invalid or changes
 * what needs a restart (listeners, upstream, redis). Returns 0 applied, -1 refused.
 */
int worker_reload(struct worker *w, const char *file);

/* Stop accepting new connections (SIGTERM drain); in-flight exchanges go on. */
void worker_stop_accepting(struct worker *w);

/* Free what worker_init made; call once no exchange is active (or at exit). */
void worker_deinit(struct worker *w);

/* Wall clock, ms since the epoch (record timestamps, lease deadlines). */
uint64_t worker_now_ms(void);

#endif
