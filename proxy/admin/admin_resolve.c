/*
 * admin_resolve.c - PUT /records/<id>: an operator records the answer they
 * found at the upstream for a held record (outcome unknown, or a claim
 * whose lease ran out), so that the client's retries replay it instead of
 * getting 502 outcome-unknown, and nothing executes a second time; or
 * replaces a resolution an operator made before, naming it by its entity
 * tag (If-Match: the ETag GET /records/<id> gave). An answer the upstream
 * gave is never replaced.
 *
 * The body is JSON (jansson): the answer (admin_answer.c: {"status",
 * "headers", "body_base64"}) and the operator's "reason", refused whole
 * with 400 problem invalid-resolution when it cannot be recorded. The
 * record (state resolved) is written by one compare-and-set on the record
 * as it was read (store_replace_unchanged), which keeps the key's TTL.
 */
#include "admin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "http_server.h"
#include "clock.h"
#include "config.h"
#include "exchange.h"
#include "metrics.h"
#include "record_id.h"
#include "record.h"
#include "store.h"

/* A resolve waiting on Redis, with the answer it records (all owned). */
struct admin_resolve_call {
    struct http_req *req;
    const struct admin_env *env;
    struct admin_actor actor;
    char record_id[RECORD_ID_HEX_LEN + 1];
    char record_key[RECORD_KEY_MAX];
    struct admin_answer answer;
    char reason[ADMIN_REASON_MAX + 1]; /* "" until read */
    size_t stored_headers;          /* fields in the record written */
    char route[RECORD_ROUTE_MAX + 1];                /* the record's route (admin_record_route), "" for none */
    char etag[RECORD_ETAG_LEN + 1]; /* the entity tag of the record written */
};

static void admin_resolve_free(struct admin_resolve_call *c)
{
    admin_answer_deinit(&c->answer);
    free(c);
}

/* The audit line (with the record's route once it was read and the reason once known). */
static void admin_resolve_audit(struct admin_resolve_call *c, int status)
{
    admin_audit_record(c->req, &c->actor, "resolve", c->record_id,
                       c->route[0] != '\0' ? c->route : NULL,
                       c->reason[0] != '\0' ? c->reason : NULL, status,
                       status == 200 ? c->answer.status : 0);
}

/* The audit line, then doc (stolen) as the JSON answer; frees c. */
static void admin_resolve_done(struct admin_resolve_call *c, int status, json_t *doc)
{
    admin_resolve_audit(c, status);
    admin_reply_json(c->req, status, doc);
    admin_resolve_free(c);
}

/* The audit line, then problem p with detail; frees c. */
static void admin_resolve_refused(struct admin_resolve_call *c, enum problem p,
                                  const char *detail)
{
    admin_resolve_audit(c, problem_status(p));
    admin_reply_problem(c->req, p, detail);
    admin_resolve_free(c);
}

/*
 * The request body: the answer to record and the reason (read first, so
 * that the audit line of a refused answer carries it). 0, or -1 with why
 * (len bytes).
 */
static int admin_resolve_parse(struct admin_resolve_call *c, char *why, size_t len)
{
    static const char *const members[] = { "status", "headers", "body_base64", "reason", NULL };
    json_t *doc = admin_body_json(c->req, why, len);
    char reason_why[256];
    int rc = -1, reason;

    if (doc == NULL)
        return -1;
    if (admin_json_members(doc, members, why, len) != 0)
        goto done;
    reason = admin_json_reason(doc, c->reason, reason_why, sizeof(reason_why));
    if (reason != 0)
        c->reason[0] = '\0';
    if (admin_answer_parse(&c->answer, doc, why, len) != 0)
        goto done;
    if (reason != 0) {
        snprintf(why, len, "%s", reason_why);
        goto done;
    }
    rc = 0;
done:
    json_decref(doc);
    return rc;
}

static void admin_resolve_on_written(enum store_status st, bool applied, void *arg)
{
    struct admin_resolve_call *c = arg;

    if (st != STORE_OK) {
        admin_resolve_done(c, 503, json_pack(
            "{s:s}", "error", st == STORE_LOST || st == STORE_TIMEOUT
                ? "redis did not answer; the answer may or may not be recorded: look at the "
                  "record (GET /records/<id>) before trying again"
                : "redis unavailable; nothing was written"));
        return;
    }
    if (!applied) {
        admin_resolve_done(c, 409, json_pack(
            "{s:s}", "error", "the record changed (or went away) since it was read; nothing "
                              "was written: look at it again"));
        return;
    }
    metrics_count(c->env->metrics, METRICS_RECORDS_RESOLVED);
    evhttp_add_header(http_server_output_headers(c->req), "ETag", c->etag);
    admin_resolve_done(c, 200, json_pack(
        "{s:s, s:s, s:i, s:I, s:I, s:s}", "record_id", c->record_id, "state", "resolved",
        "status", c->answer.status, "stored_headers", (json_int_t)c->stored_headers,
        "body_bytes", (json_int_t)c->answer.body_len, "etag", c->etag));
}

/*
 * Whether the record as read may take the answer (else the refusal is
 * answered and c freed): a held record; an operator's resolution only
 * with an If-Match naming it; never a live claim or the upstream's answer.
 */
static bool admin_resolve_allowed(struct admin_resolve_call *c, const struct record *old,
                                  const char *value, size_t len)
{
    char etag[RECORD_ETAG_LEN + 1];
    enum admin_hold hold = admin_hold_of(old, clock_now_ms());
    enum admin_if_match im;

    if (hold == ADMIN_HOLD_IN_FLIGHT) {
        admin_resolve_done(c, 409, json_pack(
            "{s:s}", "error", "the record is claimed by a request still in flight (its lease "
                              "is live); its own answer will be recorded"));
        return false;
    }
    if (hold == ADMIN_HOLD_ANSWERED) {
        admin_resolve_done(c, 409, json_pack(
            "{s:s, s:s}", "error", "the record holds the upstream's answer (or says it was too "
                                   "large to keep); an answer the upstream gave is never "
                                   "replaced; nothing was written",
            "state", admin_state_name(old->state)));
        return false;
    }
    record_etag(value, len, etag);
    im = admin_if_match(c->req, etag);
    if (im == ADMIN_IF_MATCH_STALE) {
        admin_resolve_refused(c, PROBLEM_PRECONDITION_FAILED,
                              "the record changed since the ETag in If-Match was read; nothing "
                              "was written: GET /records/<id> again and decide on what it "
                              "holds now");
        return false;
    }
    if (hold == ADMIN_HOLD_RESOLVED && im != ADMIN_IF_MATCH_OK) {
        admin_resolve_refused(c, PROBLEM_PRECONDITION_REQUIRED,
                              "the record holds an operator's resolution: replacing it needs "
                              "If-Match with the ETag that GET /records/<id> gives for it (not "
                              "*); nothing was written");
        return false;
    }
    return true;
}

/*
 * The record as read: checked (admin_resolve_allowed), then the new record
 * keeps its fingerprint (the retry's must match), owner token and created
 * time, and is written only if the record is still exactly value.
 */
static void admin_resolve_on_get(enum store_status st, const char *value, size_t len, void *arg)
{
    struct admin_resolve_call *c = arg;
    const struct config *conf = exchange_set_conf(c->env->set);
    struct record old;
    char *encoded;
    size_t encoded_len = 0;

    if (st != STORE_OK) {
        admin_resolve_done(c, st == STORE_WRONG_TYPE ? 409 : 503, json_pack(
            "{s:s}", "error", st == STORE_WRONG_TYPE ? ADMIN_NOT_A_RECORD
                                                     : "redis unavailable; nothing was written"));
        return;
    }
    if (value == NULL) {
        admin_resolve_done(c, 404, json_pack("{s:s}", "error", "no such record"));
        return;
    }
    if (record_decode(value, len, &old) != 0) {
        admin_resolve_done(c, 500, json_pack("{s:s}", "error", "the record cannot be read; "
                                             "nothing was written"));
        return;
    }
    if (admin_record_route(&old, c->route, sizeof(c->route)) == NULL)
        c->route[0] = '\0';
    if (!admin_resolve_allowed(c, &old, value, len))
        return;
    if (admin_answer_released(&c->answer, conf, c->route)) {
        char why[512];

        /* the route's release_statuses are never recorded: each retry would replay "retry" */
        snprintf(why, sizeof(why), "route %.200s never records status %d (its "
                 "release_statuses, or a non-2xx on a webhook route): an upstream answer with "
                 "it releases the claim, so a retry executes", c->route, c->answer.status);
        admin_resolve_refused(c, PROBLEM_INVALID_RESOLUTION, why);
        return;
    }
    encoded = admin_answer_record(&c->answer, &old, conf, c->record_key, &encoded_len,
                                  &c->stored_headers);
    if (encoded == NULL) {
        /* checked in admin_resolve_parse: a build defect, not the operator's */
        admin_resolve_done(c, 500, json_pack("{s:s}", "error", "the answer cannot be "
                                             "encoded; nothing was written"));
        return;
    }
    record_etag(encoded, encoded_len, c->etag);
    store_replace_unchanged(c->env->store, c->record_key, value, len, encoded, encoded_len,
                            admin_resolve_on_written, c);
    free(encoded);
}

void admin_resolve(const struct admin_env *env, struct http_req *req, const char *id,
                   const char *key, const struct admin_actor *actor)
{
    struct admin_resolve_call *c = calloc(1, sizeof(*c));
    char why[256];

    if (c == NULL) {
        admin_audit_record(req, actor, "resolve", id, NULL, NULL, 500, 0);
        admin_reply_error(req, 500, "out of memory");
        return;
    }
    c->req = req;
    c->env = env;
    c->actor = *actor;
    memcpy(c->record_id, id, RECORD_ID_HEX_LEN + 1);
    snprintf(c->record_key, sizeof(c->record_key), "%s", key);
    /*
     * The limit an upstream answer is stored under (exchange.c: the global
     * one). ROUTE: should a route get its own max_stored_response, the
     * record's route (admin_record_route) names the one to check.
     */
    admin_answer_init(&c->answer, exchange_set_conf(env->set)->max_stored_response);
    if (admin_resolve_parse(c, why, sizeof(why)) != 0) {
        admin_resolve_refused(c, PROBLEM_INVALID_RESOLUTION, why);
        return;
    }
    if (!admin_if_match_valid(req)) {
        admin_resolve_refused(c, PROBLEM_INVALID_RESOLUTION,
                              "If-Match must be the ETag that GET /records/<id> gave (a quoted "
                              "entity tag, RFC 9110 section 13.1.1)");
        return;
    }
    store_get(env->store, c->record_key, admin_resolve_on_get, c);
}
