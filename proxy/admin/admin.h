/*
 * admin.h - the admin listener: probes, metrics, and the record and inbox
 * endpoints behind the admin token.
 */
#ifndef IDEM_ADMIN_H
#define IDEM_ADMIN_H

#include <stdbool.h>
#include <stddef.h>

#include "probe.h"

struct admin_throttle;
struct http_req;
struct exchange_set;
struct metrics;
struct store;

/*
 * What the admin listener reads, filled in by the worker that runs it (the
 * arrow runs one way: worker -> admin).
 */
struct admin_env {
    struct probe_env probe;                 /* the probes (probe.h) */
    bool probes;                            /* answer them first, open to every client; false
                                               with health_listen: they are ordinary paths here,
                                               behind the token (CONTRACT section 16) */
    struct store *store;                    /* the worker's, borrowed */
    const struct exchange_set *set;         /* the worker's: its running config
                                               (exchange_set_conf: the token, key_prefix) */
    struct metrics *metrics;                /* the process's */
    size_t resolve_body_limit;              /* bytes: PUT /records/<id>'s body (the worker's) */
    struct admin_throttle *throttle;        /* failed authentications by client address:
                                               made at the first failure, owned
                                               (admin_env_deinit frees it) */
};

/* Free what env owns (its throttle); the rest is the worker's. */
void admin_env_deinit(struct admin_env *env);

/* Bytes of a body every admin request but a resolve may carry. */
#define ADMIN_MAX_BODY 4096

/*
 * http_server head callback of the admin listener (arg: struct admin_env),
 * before any body is read: a request without an operator's token gets its
 * 401 here, one whose operator lacks the right its method and path need its
 * 403 (admin_auth_check; CONTRACT section 16); then a body announced larger
 * than ADMIN_MAX_BODY (for PUT /records/<id> and POST /records/bulk:
 * env->resolve_body_limit) gets 413 problem body-too-large with its audit
 * line. Either way its body is never read.
 */
void admin_head(struct http_req *req, void *arg);

/*
 * http_server too_large callback: a chunked body that grew past its limit
 * (413, audited as the operator's request; the token is checked first).
 */
void admin_too_large(struct http_req *req, void *arg);

/*
 * http_server request callback of the admin listener (the body is read);
 * arg is the struct admin_env, on the thread of the worker that owns set. Unless
 * health_listen serves them (env->probes false), open to every client, answered
 * first by probe_answer (env->probe):
 *   GET /healthz          200 while the process runs
 *   GET /readyz           200 when every worker's Redis is connected (or with
 *                         readiness: process, whatever the store) and the
 *                         process is not draining, else 503
 *   GET /metrics          Prometheus text format 0.0.4
 * Every other path (the three above too, with health_listen: then 404) first needs `Authorization: Bearer <admin.token_file's
 * token>` when that key is set (401 + WWW-Authenticate: Bearer otherwise,
 * RFC 6750 section 3); without it the listener is on a loopback address:
 *   GET /records/<id>     a record's state, fingerprint, status, times and TTL as
 *                         JSON; never its body or header values (404 if none); ETag:
 *                         the record's entity tag (record_etag)
 *   DELETE /records/<id>[?reason=R][&confirm=re-execute]
 *                         purge the record (404 if none; 409 while a claim's lease is
 *                         live; a record that holds an answer, the upstream's or an
 *                         operator's, only with confirm=re-execute and a reason: 409
 *                         problem re-execute-not-confirmed without; 412 on a stale
 *                         If-Match)
 *   PUT /records/<id>     resolve: {"status", "headers": [[name, value]...], "body_base64",
 *                         "reason"} becomes the resolution (state resolved, replayed
 *                         like the upstream's answer) of an outcome-unknown record, of a
 *                         claim whose lease ran out, or (with If-Match: its ETag) of a
 *                         resolution made before, so retries replay it; one
 *                         compare-and-set on the record as read, its TTL kept (404 if
 *                         none; 409 on a live lease, an answer the upstream gave, a
 *                         record that changed; 428 problem precondition-required
 *                         replacing a resolution without If-Match, 412 problem
 *                         precondition-failed with a stale one; 400 problem
 *                         invalid-resolution for an answer that would not be stored:
 *                         RFC 9110 field rules, headers.c header_is_stored,
 *                         limits.max_stored_response, RFC 4648 base64; or no reason)
 *   POST /records/<id>/extend  {"seconds": N, "reason"}: a held record's TTL becomes
 *                         N s from now (1..ADMIN_EXTEND_MAX_S), never shorter than it
 *                         is; one compare-and-set (409 on a live lease or an answer)
 *   POST /records/bulk    {"action": "resolve"|"purge", "state", "route",
 *                         "older_than_seconds", "reason", "dry_run" (default true),
 *                         "confirm", "limit", "cursor", and a resolve's answer}: every
 *                         held record that matches, each by its own compare-and-set
 *                         and audit line, at most ADMIN_BULK_MAX a call, a bounded
 *                         number of changes and bytes out at a time (admin_bulk.c)
 *   GET /records[?state=outcome-unknown|claimed|resolved][&limit=N][&cursor=C]
 *                         the held records (claimed: leases that ran out; without
 *                         state=, every held state), paged: at most limit (1..1000,
 *                         default 100) per page, the walk's next cursor or null; SCAN
 *                         on each primary, bounded per page
 *   GET /records/lookup?path=P&key=K[&method=M][&header=Name: value]...
 *                         the record id and Redis key of that request (lookup.h),
 *                         and whether Redis holds the record; scope headers from
 *                         header= parameters, else the request's own fields but
 *                         Authorization and Host
 *   /inbox...             the webhook inbox (inbox_admin)
 * <id> is the 32-hex record id the access log prints. Redis failures give
 * 503 (a refused command of the listing's walk: naming NOPERM); a key of
 * another type than a record gives 409 (STORE_WRONG_TYPE). A purge, a resolve, an extension, each record a bulk change
 * changes, a redeliver and a dead-letter delete each write one audit line
 * (log_audit), whatever their outcome, with the operator's reason.
 */
void admin_handle(struct http_req *req, void *arg);

#endif
