/*
 * admin.h - the admin listener: probes, metrics, and the record and inbox
 * endpoints behind the admin token.
 */
#ifndef IDEM_ADMIN_H
#define IDEM_ADMIN_H

#include <stddef.h>

#include "probe.h"

struct http_req;
struct exchange_set;
struct metrics;
struct store;

/*
 * What the admin listener reads, filled in by the worker that runs it (the
 * arrow runs one way: worker -> admin).
 */
struct admin_env {
    struct probe_env probe;                 /* the probes (probe.h), answered first */
    struct store *store;                    /* the worker's, borrowed */
    const struct exchange_set *set;         /* the worker's: its running config
                                               (exchange_set_conf: the token, key_prefix) */
    struct metrics *metrics;                /* the process's */
    size_t resolve_body_limit;              /* bytes: PUT /records/<id>'s body (the worker's) */
};

/* Bytes of a body every admin request but a resolve may carry. */
#define ADMIN_MAX_BODY 4096

/*
 * http_server head callback of the admin listener (arg: struct admin_env),
 * before any body is read: a request behind the token without a valid one
 * gets its 401 here; a body announced larger than ADMIN_MAX_BODY (for
 * PUT /records/<id>: env->resolve_body_limit) gets 413 problem
 * body-too-large here. Either way its body is never read.
 */
void admin_head(struct http_req *req, void *arg);

/* http_server too_large callback: a chunked body that grew past its limit (413). */
void admin_too_large(struct http_req *req, void *arg);

/*
 * http_server request callback of the admin listener (the body is read);
 * arg is the struct admin_env, on the thread of the worker that owns set. Open to every
 * client, answered first by probe_answer (env->probe):
 *   GET /healthz          200 while the process runs
 *   GET /readyz           200 when every worker's Redis is connected and the
 *                         process is not draining, else 503
 *   GET /metrics          Prometheus text format 0.0.4
 * Every other path first needs `Authorization: Bearer <admin.token_file's
 * token>` when that key is set (401 + WWW-Authenticate: Bearer otherwise,
 * RFC 6750 section 3); without it the listener is on a loopback address:
 *   GET /records/<id>     a record's state, fingerprint, status, times and TTL as
 *                         JSON; never its body or header values (404 if none)
 *   DELETE /records/<id>  purge the record (404 if none; 409 while a claim's lease is live)
 *   PUT /records/<id>     resolve: {"status", "headers": [[name, value]...], "body_base64"}
 *                         becomes the finished answer of an outcome-unknown record or
 *                         of a claim whose lease ran out, so retries replay it; one
 *                         compare-and-set on the record as read, its TTL kept (404 if
 *                         none; 409 on a live lease, a finished record, a record that
 *                         changed; 400 problem invalid-resolution for an answer that
 *                         would not be stored: RFC 9110 field rules, headers.c
 *                         header_is_stored, limits.max_stored_response, RFC 4648 base64)
 *   GET /records?state=outcome-unknown|claimed[&limit=N][&cursor=C]
 *                         the held records (claimed: leases that ran out), paged: at
 *                         most limit (1..1000, default 100) per page, the walk's next
 *                         cursor or null; SCAN on each primary, bounded per page
 *   GET /records/lookup?path=P&key=K[&method=M][&header=Name: value]...
 *                         the record id and Redis key of that request (lookup.h),
 *                         and whether Redis holds the record; scope headers from
 *                         header= parameters, else the request's own fields but
 *                         Authorization and Host
 *   /inbox...             the webhook inbox (inbox_admin)
 * <id> is the 32-hex record id the access log prints. Redis failures give
 * 503. A purge, a resolve, a redeliver and a dead-letter delete each write
 * one audit line (log_audit), whatever their outcome.
 */
void admin_handle(struct http_req *req, void *arg);

#endif
