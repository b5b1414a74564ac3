/*
 * admin_int.h - what the files of the admin listener share and nothing
 * outside them includes. Calls run one way: admin.c (the dispatch) calls
 * probe.c, admin_auth.c, admin_records.c, admin_list.c, admin_lookup.c and
 * admin_audit.c; admin_records.c calls admin_resolve.c; they call
 * admin_audit.c and admin_reply.c; probe.c calls admin_reply.c only;
 * admin_reply.c and admin_audit.c call no other admin file.
 *
 *   admin.c          the endpoints: the probes first (open), the rest
 *                    after the token check
 *   probe.c          /healthz, /readyz and /metrics (probe.h: their own
 *                    environment, nothing of the admin's)
 *   admin_auth.c     Authorization: Bearer against admin.token_file (401)
 *   admin_records.c  GET and DELETE /records/<id>
 *   admin_resolve.c  PUT /records/<id>: an operator's answer for a held record
 *   admin_list.c     GET /records?state=: the held records, paged
 *   admin_lookup.c   GET /records/lookup
 *   admin_audit.c    the audit line of each change (log_audit)
 *   admin_reply.c    answers: text, JSON, problem details
 */
#ifndef IDEM_ADMIN_INT_H
#define IDEM_ADMIN_INT_H

#include <stdbool.h>

#include <jansson.h>

#include "admin.h"
#include "bearer.h"
#include "problem.h"

struct evbuffer;
struct http_req;
struct record;

/*
 * Who an admin request acts as, for its audit line: the fingerprint of
 * the token it presented (bearer.h), or "-" when the listener takes no
 * token (a loopback admin_listen without admin.token_file). A copy: a
 * reload may free the configuration the token came from while a Redis
 * command is out.
 */
struct admin_actor {
    char token[BEARER_FINGERPRINT_LEN + 1];
};

/* ---- admin_reply.c ---- */

/* Answer req with status, content_type (static) and body (borrowed), no-store. */
void admin_reply(struct http_req *req, int status, const char *content_type,
                 struct evbuffer *body);

/* Answer req with status and text (borrowed) as text/plain. */
void admin_reply_text(struct http_req *req, int status, const char *text);

/* Answer req with doc (stolen; NULL answers an empty body) as one line of JSON. */
void admin_reply_json(struct http_req *req, int status, json_t *doc);

/* Answer req with {"error": error} (borrowed). */
void admin_reply_error(struct http_req *req, int status, const char *error);

/*
 * Answer req with problem details (RFC 9457) of cause p (problem.h) at its
 * status, with detail (borrowed; never a secret, a key or a body).
 */
void admin_reply_problem(struct http_req *req, enum problem p, const char *detail);

/* ---- admin_auth.c ---- */

/*
 * Whether req may use the endpoints behind the token (every one but the
 * probes and /metrics): with admin.token_file set, its Authorization must
 * be `Bearer <that token>` (bearer_check); without it the listener is on
 * loopback (config_finish refuses any other address) and takes everyone.
 * True with *actor set; false after answering 401 + WWW-Authenticate:
 * Bearer (RFC 6750 section 3) with problem details, a warning line (no
 * token) and idempotency_proxy_admin_unauthorized_total. The token is read
 * from the running configuration (exchange_set_conf(env->set)), so a
 * SIGHUP that rereads the file applies to the next request.
 */
bool admin_auth_check(const struct admin_env *env, struct http_req *req,
                      struct admin_actor *actor);

/* ---- admin_audit.c ---- */

/*
 * The result an audit line names for the status an action answered:
 * 2xx "ok", 404 "not-found", 409 "conflict", another 4xx "refused"
 * (nothing was sent to Redis), 5xx "error". Static string.
 */
const char *admin_audit_result(int status);

/*
 * Write the audit line (log_audit) of an action that answered status: action
 * (static: "purge", ...), the record id or dead-letter id acted on (either
 * NULL), the route (NULL when the request names none), the client's address
 * and actor's token fingerprint. Call it before the answer is sent, once
 * the action's outcome is known. Borrows everything.
 */
void admin_audit(struct http_req *req, const struct admin_actor *actor, const char *action,
                 const char *record_id, const char *dead_letter_id, const char *route,
                 int status);

/*
 * The audit line of a resolve (PUT /records/<id>) that answered status:
 * admin_audit's with action "resolve" and recorded_status, the status of
 * the answer recorded (0 when none was: the line says null). Borrows
 * everything.
 */
void admin_audit_resolve(struct http_req *req, const struct admin_actor *actor,
                         const char *record_id, const char *route, int status,
                         int recorded_status);

/*
 * For an action whose handler answers req itself (the inbox's redeliver and
 * dead-letter delete): write its audit line with the status that handler
 * answers, once the answer is written (http_server_on_done);
 * if the connection fails first, the line says "unknown" with status 0 (the
 * action may have happened; its answer was never seen). Copies
 * route and dead_letter_id (either may be NULL). When out of memory the
 * line is written at once, with result "unknown".
 */
void admin_audit_on_answer(struct http_req *req, const struct admin_actor *actor,
                           const char *action, const char *dead_letter_id, const char *route);

/* ---- admin_records.c ---- */

/*
 * GET and DELETE /records/<id>; id is the path after "/records/" (checked
 * here: 32 lowercase hex). A DELETE writes its audit line (action "purge")
 * whatever its outcome.
 */
void admin_records(const struct admin_env *env, struct http_req *req, const char *id,
                   const struct admin_actor *actor);

/*
 * The name of the route a decoded record was written under, for the
 * listing and the audit lines, copied NUL-terminated into out (caller's,
 * outsize > 0 bytes; cut to fit). Returns out, or NULL (shown as null) when
 * the record names none (an IR1 record of 0.3 or earlier).
 */
const char *admin_record_route(const struct record *rec, char *out, size_t outsize);

/* ---- admin_resolve.c ---- */

/*
 * PUT /records/<id> (id already checked: 32 lowercase hex): record the
 * answer the body gives as the record's finished answer; see admin.h.
 * Writes its audit line (action "resolve") whatever the outcome. key is
 * the record's Redis key (copied).
 */
void admin_resolve(const struct admin_env *env, struct http_req *req, const char *id,
                   const char *key, const struct admin_actor *actor);

/* ---- admin_list.c ---- */

/* GET /records?state=outcome-unknown|claimed[&limit=N][&cursor=C]; see admin.h. */
void admin_list(const struct admin_env *env, struct http_req *req);

/* ---- admin_lookup.c ---- */

/* GET /records/lookup?path=&key=[&method=][&header=Name: value]...; see admin.h. */
void admin_lookup(const struct admin_env *env, struct http_req *req);

#endif
