/*
 * admin_int.h - what the files of the admin listener share and nothing
 * outside them includes. Calls run one way: admin.c (the dispatch) calls
 * probe.c, admin_auth.c, admin_records.c, admin_extend.c, admin_bulk.c,
 * admin_list.c, admin_lookup.c and admin_audit.c; admin_records.c calls
 * admin_resolve.c; admin_resolve.c and admin_bulk.c call admin_answer.c;
 * they all call admin_check.c, admin_audit.c and admin_reply.c; probe.c
 * calls admin_reply.c only; admin_answer.c, admin_check.c, admin_reply.c
 * and admin_audit.c call no other admin file.
 *
 *   admin.c          the endpoints: the probes first (open, unless
 *                    health_listen serves them), the rest classified
 *                    (the right each needs) and after the token check
 *   probe.c          /healthz, /readyz and /metrics (probe.h: their own
 *                    environment, nothing of the admin's), and the
 *                    health listener that serves only them
 *   admin_auth.c     the operator of Authorization: Bearer (401), the
 *                    right (403), the bound on wrong tokens (429); it
 *                    calls admin_audit.c
 *   admin_records.c  GET and DELETE /records/<id>
 *   admin_resolve.c  PUT /records/<id>: an operator's answer for a held record
 *   admin_extend.c   POST /records/<id>/extend: a held record kept longer
 *   admin_bulk.c     POST /records/bulk: resolve or purge every match
 *   admin_answer.c   an operator's answer: read from JSON, made a record
 *   admin_check.c    the rules of an operator's change: holds, reasons,
 *                    If-Match, the JSON of a request's body
 *   admin_list.c     GET /records[?state=]: the held records, paged
 *   admin_lookup.c   GET /records/lookup
 *   admin_audit.c    the audit line of each request (log_audit)
 *   admin_reply.c    answers: text, JSON, problem details
 */
#ifndef IDEM_ADMIN_INT_H
#define IDEM_ADMIN_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include <jansson.h>
#include <event2/keyvalq_struct.h>

#include "admin.h"
#include "bearer.h"
#include "config.h"
#include "problem.h"
#include "record.h"
#include "record_id.h"

struct config;
struct evbuffer;
struct http_req;

/* Bytes of an operator's reason at most (admin_reason_check). */
#define ADMIN_REASON_MAX 512

/* Seconds an extension may ask for at most: 30 days. */
#define ADMIN_EXTEND_MAX_S 2592000

/*
 * The 409 error of a record endpoint whose key holds a Redis value of
 * another type (STORE_WRONG_TYPE: a hash under the records' prefix, say).
 */
#define ADMIN_NOT_A_RECORD                                                                      \
    "not a record: the key holds a Redis value of another type than the proxy's records "     \
    "(strings); nothing was done"

/* Records one bulk call matches at most; the walk goes on with its next_cursor. */
#define ADMIN_BULK_MAX 1000
#define ADMIN_BULK_MAX_IDS 1000         /* record_ids of one bulk change at most */

/* Pages of the listing (store_list) one bulk call walks at most. */
#define ADMIN_BULK_PAGES 64

/*
 * Who an admin request acts as, for its rights and its audit line: the
 * operator (config.h: admin.operators_file's name, "token" for
 * admin.token_file, "" when the listener takes no token: a loopback
 * admin_listen without either), the fingerprint of the token presented
 * (bearer.h; "-" for none), the client's address as the request came, and
 * the right the request uses (enum config_right; a bulk change's is known
 * once its body is read). Copies: a reload may free the configuration the
 * operator came from while a Redis command is out, and the client may leave
 * while a bulk change goes on.
 */
struct admin_actor {
    char token[BEARER_FINGERPRINT_LEN + 1];
    char client[64];
    char name[CONFIG_OPERATOR_NAME_MAX + 1];
    unsigned rights;                /* the operator's rights (enum config_right bits) */
    unsigned right;                 /* the one this request uses (one bit) */
};

/*
 * What an admin request does (admin.c classifies it by method and path,
 * before its body is read): the audit line's action (static), the right it
 * needs, and whether its handler writes the audit line itself (a change:
 * its outcome is known there) or the dispatcher writes it once the answer
 * is out (a read, a 404, a 405).
 */
struct admin_op {
    const char *action;
    unsigned right;                 /* enum config_right, one bit */
    bool self_audited;
    char record_id[RECORD_ID_HEX_LEN + 1]; /* the record the path names, or "" */
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
 * Wrong tokens from one client address that admin_auth_check takes in a
 * window (a request without a token guesses nothing and is not counted).
 */
#define ADMIN_AUTH_FAILURES_MAX 50
#define ADMIN_AUTH_WINDOW_MS 60000      /* the window, ms */

/*
 * Whether req may do op (CONTRACT sections 13 and 16). With operators
 * configured (admin.operators_file, admin.token_file), its Authorization
 * must be `Bearer <token>` whose SHA-256 is an operator's
 * (config_operator_find), and that operator must hold op->right; without
 * any the listener is on loopback (config_finish refuses any other
 * address) and takes everyone with every right. A client address that
 * sent ADMIN_AUTH_FAILURES_MAX wrong tokens within ADMIN_AUTH_WINDOW_MS is
 * refused before any check, 429 problem admin-throttled with Retry-After
 * (seconds), until its window ends. True with *actor set; false after
 * answering 401 + WWW-Authenticate: Bearer (RFC 6750 section 3), 403
 * admin-forbidden or 429, each with its audit line (op's action, the right,
 * the result), a warning on stderr (never the token) and its counter. The
 * operators are read from the running configuration (exchange_set_conf
 * (env->set)), so a SIGHUP that rereads the files applies to the next
 * request. Keeps its failure counts in env->throttle (the admin worker's
 * thread only).
 */
bool admin_auth_check(struct admin_env *env, struct http_req *req, const struct admin_op *op,
                      struct admin_actor *actor);

/*
 * Whether actor holds right (a bulk change, whose right is known once its
 * body is read): true with actor->right set; false after answering 403
 * admin-forbidden with its audit line (action, static; record_id, the
 * record the request names, or NULL) and counter.
 */
bool admin_auth_allowed(const struct admin_env *env, struct http_req *req,
                        struct admin_actor *actor, unsigned right, const char *action,
                        const char *record_id);

/* ---- admin_audit.c ---- */

/* The name of one right ("read", "resolve", "purge"); "-" for none. Static string. */
const char *admin_right_name(unsigned right);

/*
 * The result an audit line names for the status an action answered:
 * 2xx "ok", 404 "not-found", 409 and 412 "conflict", another 4xx
 * "refused" (nothing was changed), 5xx "error", 0 "unknown" (sent, never
 * answered: it may have happened). Static string.
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
 * The audit line of a change of a record that answered status (a bulk
 * item: the status its own request would have answered): admin_audit's
 * with action (static: "resolve", "purge", "extend", "bulk-resolve",
 * "bulk-purge"), the operator's reason (NULL: none given) and
 * recorded_status, the status of the answer a resolve recorded (0 when
 * none was: the line says null). Borrows everything.
 */
void admin_audit_record(struct http_req *req, const struct admin_actor *actor,
                        const char *action, const char *record_id, const char *route,
                        const char *reason, int status, int recorded_status);

/*
 * For a request whose line is written once its answer is out (a read, or an
 * inbox change its handler answers itself): write its audit line with the
 * status answered, once the answer is written (http_server_on_done); if the
 * connection fails first, the line says "unknown" with status 0 (a change
 * may have happened; its answer was never seen). Copies record_id,
 * dead_letter_id and route (each may be NULL). When out of memory the line
 * is written at once, with result "unknown".
 */
void admin_audit_on_answer(struct http_req *req, const struct admin_actor *actor,
                           const char *action, const char *record_id,
                           const char *dead_letter_id, const char *route);

/* ---- admin_check.c (no I/O) ---- */

/* What a record holds, for what an operator may do to it. */
enum admin_hold {
    ADMIN_HOLD_IN_FLIGHT,   /* a claim whose lease is live: its request is at the upstream */
    ADMIN_HOLD_CLAIM,       /* a claim whose lease ran out (held) */
    ADMIN_HOLD_UNKNOWN,     /* outcome unknown (held) */
    ADMIN_HOLD_RESOLVED,    /* an operator's resolution (held) */
    ADMIN_HOLD_ANSWERED,    /* the upstream's answer, or its tombstone: never replaced */
};

/* What decoded rec holds at now_ms (ms since the epoch). Pure. */
enum admin_hold admin_hold_of(const struct record *rec, uint64_t now_ms);

/*
 * The name the admin endpoints give state: "claimed", "done",
 * "outcome-unknown", "not-replayable", "resolved". Static string.
 */
const char *admin_state_name(enum record_state st);

/*
 * Whether reason (len bytes) is an operator's reason: 1..ADMIN_REASON_MAX
 * bytes of UTF-8 without a control character (C0, DEL, C1), a line or
 * paragraph separator or a bidirectional control (U+2028, U+2029,
 * U+202A..U+202E, U+2066..U+2069). 0, or -1 with
 * why (whylen bytes, for a 400). Pure.
 */
int admin_reason_check(const char *reason, size_t len, char *why, size_t whylen);

/* Whether id (len bytes) is a record id: RECORD_ID_HEX_LEN lowercase hex characters. */
bool admin_record_id_ok(const char *id, size_t len);

/* What req's If-Match fields say of a record whose entity tag is etag (record_etag). */
enum admin_if_match {
    ADMIN_IF_MATCH_NONE,        /* no If-Match field */
    ADMIN_IF_MATCH_OK,          /* one of its entity tags is etag (strong comparison) */
    ADMIN_IF_MATCH_ANY,         /* "*", and no tag that is etag */
    ADMIN_IF_MATCH_STALE,       /* entity tags, none of them etag: the record changed */
    ADMIN_IF_MATCH_MALFORMED,   /* not a list of entity tags (RFC 9110 section 13.1.1) */
};

/* Every If-Match field of req against etag (borrowed), RFC 9110 section 13.1.1. */
enum admin_if_match admin_if_match(struct http_req *req, const char *etag);

/* Whether req's If-Match fields, if any, are a list of entity tags (checked before Redis). */
bool admin_if_match_valid(struct http_req *req);

/*
 * req's body as a JSON object (jansson, duplicate members refused): a new
 * reference the caller owns, or NULL with why (len bytes) for the 400.
 */
json_t *admin_body_json(struct http_req *req, char *why, size_t len);

/* 0 when every member of doc is named in allowed (NULL-terminated), else -1 with why. */
int admin_json_members(const json_t *doc, const char *const *allowed, char *why, size_t len);

/*
 * doc's required member "reason", checked (admin_reason_check), copied into
 * out (caller's, ADMIN_REASON_MAX + 1 bytes). 0, or -1 with why (len
 * bytes) naming `reason`.
 */
int admin_json_reason(const json_t *doc, char *out, char *why, size_t len);

/* ---- admin_answer.c (no I/O) ---- */

/* An operator's answer for a held record (all owned; admin_answer_init/_deinit). */
struct admin_answer {
    int status;                     /* the HTTP status to replay */
    struct evkeyvalq headers;       /* its fields, in the order given */
    unsigned char *body;            /* its body, decoded; body_len bytes */
    size_t body_len;
    size_t max_stored;              /* bytes: the limit the answer is checked against */
};

/* Start a, empty, to be checked against max_stored bytes (limits.max_stored_response). */
void admin_answer_init(struct admin_answer *a, size_t max_stored);

/* Free what a holds (it stays initialised and empty). */
void admin_answer_deinit(struct admin_answer *a);

/*
 * Read the members "status", "headers" and "body_base64" of doc into a
 * (other members are the caller's to check): 0, or -1 with why (len
 * bytes) for the 400 problem invalid-resolution: RFC 9110 field rules,
 * headers.c header_is_stored, a->max_stored, RFC 4648 section 4 base64.
 */
int admin_answer_parse(struct admin_answer *a, const json_t *doc, char *why, size_t len);

/*
 * Whether an upstream answer with a's status would release the claim on
 * the route of conf whose path is route (NULL or "": none): its
 * release_statuses, and every non-2xx on a webhook route (decide_releases).
 * Such an answer is never recorded, so it is never a resolution.
 */
bool admin_answer_released(const struct admin_answer *a, const struct config *conf,
                           const char *route);

/*
 * The resolution of the record old (decoded, borrowed) with answer a: a
 * record in state resolved that keeps old's owner token, fingerprint, key
 * id, route and created time, completed now, encoded (sealed under
 * conf's keyring, bound to record_key) into a new malloc'd buffer of *len
 * bytes; *stored_headers (may be NULL) gets its field count. NULL when it
 * cannot be encoded (out of memory, a sealing failure).
 */
char *admin_answer_record(const struct admin_answer *a, const struct record *old,
                          const struct config *conf, const char *record_key, size_t *len,
                          size_t *stored_headers);

/* ---- admin_records.c ---- */

/*
 * GET, PUT and DELETE /records/<id>; id is the path after "/records/"
 * (checked here: 32 lowercase hex). A DELETE writes its audit line (action
 * "purge") whatever its outcome; a PUT goes on to admin_resolve.
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
 * answer the body gives as the record's resolution; see admin.h. Writes
 * its audit line (action "resolve") whatever the outcome. key is the
 * record's Redis key (copied).
 */
void admin_resolve(const struct admin_env *env, struct http_req *req, const char *id,
                   const char *key, const struct admin_actor *actor);

/* ---- admin_extend.c ---- */

/*
 * POST /records/<id>/extend (id: the path between "/records/" and
 * "/extend", checked here); see admin.h. Writes its audit line (action
 * "extend") whatever the outcome.
 */
void admin_extend(const struct admin_env *env, struct http_req *req, const char *id,
                  size_t id_len, const struct admin_actor *actor);

/* ---- admin_bulk.c ---- */

/*
 * POST /records/bulk; see admin.h. Each record changed (not in a dry run)
 * writes its audit line (action "bulk-resolve" or "bulk-purge"); a request
 * refused whole writes one line without a record id.
 */
void admin_bulk(const struct admin_env *env, struct http_req *req,
                const struct admin_actor *actor);

/* ---- admin_list.c ---- */

/* GET /records[?state=outcome-unknown|claimed|resolved][&limit=N][&cursor=C]; see admin.h. */
void admin_list(const struct admin_env *env, struct http_req *req);

/* ---- admin_lookup.c ---- */

/* GET /records/lookup?path=&key=[&method=][&header=Name: value]...; see admin.h. */
void admin_lookup(const struct admin_env *env, struct http_req *req);

#endif
