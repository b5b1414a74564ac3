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

struct event_base;
struct evhttp;
struct evhttp_bound_socket;
struct config;
struct store;
struct upstream;
struct exchange;

struct worker {
    struct event_base *base;
    const struct config *cfg;
    struct store *store;
    struct upstream *upstream;
    struct evhttp *http;
    struct evhttp_bound_socket *listener;
    struct evhttp *admin_http;
    unsigned active;                        /* exchanges not yet freed */
    TAILQ_HEAD(, exchange) waiters;         /* waiting on another request's record */
    bool draining;
};

/*
 * Set up w on base: bind the client and admin listeners, create the store and
 * upstream client. cfg must outlive w. Returns 0, or -1 with one line in err
 * (errlen bytes), e.g. the port in use.
 */
int worker_init(struct worker *w, struct event_base *base, const struct config *cfg, char *err,
                size_t errlen);

/* Stop accepting new connections (SIGTERM drain); in-flight exchanges go on. */
void worker_stop_accepting(struct worker *w);

/* Free what worker_init made; call once no exchange is active (or at exit). */
void worker_deinit(struct worker *w);

/* Wall clock, ms since the epoch (record timestamps, lease deadlines). */
uint64_t worker_now_ms(void);

#endif
