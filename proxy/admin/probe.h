/*
 * probe.h - the probes: GET /healthz, /readyz and /metrics, what the
 * kubelet and Prometheus ask, open to every client. A handler with its own
 * small environment: it needs nothing of the admin listener's (no token,
 * no store, no records), so a listener of its own could serve it; today
 * the admin listener asks it first (admin.h).
 */
#ifndef IDEM_PROBE_H
#define IDEM_PROBE_H

#include <stdbool.h>

struct http_req;
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
    const char *(*unready)(void *arg);      /* why not ready ("draining", ...; static), or NULL */
    void *arg;
};

/* Whether path (a request's, as parsed) is a probe's: /healthz, /readyz or /metrics. */
bool probe_path(const char *path);

/*
 * Answer req (an http_server request, http_server.h) when its path is a
 * probe's, and return true; else false, with req untouched. Every answer
 * is Cache-Control: no-store:
 *   GET /healthz   200 "ok\n" (text/plain) while the process runs
 *   GET /readyz    200 "ready\n" when env->unready says nothing, else 503
 *                  with its reason and "\n" (text/plain)
 *   GET /metrics   200, Prometheus text format 0.0.4 (metrics_render of
 *                  env->metrics and env->gauges)
 * POST, PUT and DELETE get 405 "method not allowed\n" (text/plain); any
 * other method is answered as GET (the admin listener lets only HEAD
 * through besides). On the thread of the listener's worker.
 */
bool probe_answer(const struct probe_env *env, struct http_req *req);

#endif
