/*
 * probe.h - the probes: GET /healthz, /readyz and /metrics, what the
 * kubelet and Prometheus ask, open to every client. A handler with its own
 * small environment: it needs nothing of the admin listener's (no token,
 * no store, no records). With health_listen the probes have a listener of
 * their own (probe_listen), which serves nothing else; without it the
 * admin listener asks probe_answer first (admin.h). CONTRACT section 16.
 */
#ifndef IDEM_PROBE_H
#define IDEM_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include "http_server.h"

struct endpoint;
struct event_base;
struct http_req;
struct http_server;
struct metrics;
struct metrics_gauges;

/*
 * What the probes read, filled in by the worker that runs their listener
 * (the arrow runs one way: worker -> probe). The callbacks cover the whole
 * pool and are called on that listener's thread, so they must be safe
 * from any thread (atomics, or the metrics lock).
 */
struct probe_env {
    struct metrics *metrics;                /* the process's, shared */
    void (*gauges)(void *arg, struct metrics_gauges *g);   /* summed over the workers */
    /*
     * Why not ready ("draining", the store's reason; static), or NULL. *away:
     * set to the store's reason (static) when the store cannot take claims
     * but readiness: process does not count it, else NULL.
     */
    const char *(*unready)(void *arg, const char **away);
    void *arg;
};

/* Whether path (a request's, as parsed) is a probe's: /healthz, /readyz or /metrics. */
bool probe_path(const char *path);

/*
 * Answer req (an http_server request, http_server.h) when its path is a
 * probe's, and return true; else false, with req untouched. Every answer
 * is Cache-Control: no-store:
 *   GET /healthz   200 "ok\n" (text/plain) while the process runs
 *   GET /readyz    200 "ready\n" when env->unready says nothing; 200
 *                  "ready (readiness: process; the store is away: REASON)\n"
 *                  when it only says the store is away; else 503 with its
 *                  reason and "\n" (text/plain)
 *   GET /metrics   200, Prometheus text format 0.0.4 (metrics_render of
 *                  env->metrics and env->gauges)
 * POST, PUT and DELETE get 405 "method not allowed\n" (text/plain); any
 * other method is answered as GET (the listeners let only HEAD through
 * besides). On the thread of the listener's worker.
 */
bool probe_answer(const struct probe_env *env, struct http_req *req);

/*
 * The bounds of the admin worker's two listeners, admin_listen's and
 * health_listen's (docs/operations.md "Bounds of the admin listener"): 64
 * connections, a head of 16 KiB and 64 fields within 10 s (ms), 30 s (ms)
 * to read or to take an answer; the methods the admin endpoints take.
 */
extern const struct http_server_limits probe_listener_limits;

/*
 * The health listener (health_listen): bind ep on base and serve the probes
 * there with env (borrowed: it must outlive the server), never with a
 * token. GET and HEAD of the three probe paths only: another path is 404
 * "not found\n", another method 405 (Allow: GET, HEAD; 501 for a method
 * the admin listener does not take either), a request with a body 413
 * problem body-too-large before the body is read. Bounds: the admin
 * listener's, probe_listener_limits. Returns the server, the caller's (http_server_free on base's
 * thread), or NULL with one line in err (errlen bytes): the address
 * cannot be bound, or out of memory.
 */
struct http_server *probe_listen(struct event_base *base, const struct endpoint *ep,
                                 struct probe_env *env, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
