/*
 * admin.h - the admin listener (README "Operations").
 */
#ifndef IDEM_ADMIN_H
#define IDEM_ADMIN_H

struct evhttp_request;
struct exchange_set;
struct metrics;
struct metrics_gauges;

/*
 * What the admin listener reads, filled in by the worker that runs it (the
 * arrow runs one way: worker -> admin). The callbacks cover the whole pool.
 */
struct admin_env {
    const struct exchange_set *set;         /* its store and running config (key_prefix) */
    struct metrics *metrics;                /* the process's */
    void (*gauges)(void *arg, struct metrics_gauges *g);   /* summed over the workers */
    const char *(*unready)(void *arg);      /* why not ready ("draining", ...), or NULL */
    void *arg;
};

/*
 * evhttp callback of the admin listener; arg is the struct admin_env, on the
 * thread of the worker that owns set.
 *   GET /healthz          200 while the process runs
 *   GET /readyz           200 when every worker's Redis is connected and the
 *                         process is not draining, else 503
 *   GET /metrics          Prometheus text format 0.0.4
 *   GET /records/<id>     a record's state, fingerprint, status, times and TTL as
 *                         JSON; never its body or header values (404 if none)
 *   DELETE /records/<id>  purge the record (404 if none; 409 while a claim's lease is live)
 * <id> is the 32-hex record id the access log prints. Redis failures give 503.
 */
void admin_handle(struct evhttp_request *req, void *arg);

#endif
