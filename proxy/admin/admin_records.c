/*
 * admin_records.c - GET /records/<id> (inspect, with the record's entity
 * tag) and DELETE /records/<id> (purge, audited); PUT /records/<id> goes
 * on to admin_resolve.c.
 *
 * A purge of a held record (a claim whose lease ran out, an outcome
 * unknown) is what clears it for the next retry, as before. A record that
 * holds an answer (the upstream's, its tombstone, or an operator's
 * resolution) is purged only when the operator says that the next retry
 * will execute again (confirm=re-execute) and why (reason=): purged, it is
 * forgotten, and a retry of its key executes the request again.
 */
#include "admin_int.h"

#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "http_server.h"
#include "canonical.h"
#include "clock.h"
#include "config.h"
#include "exchange.h"
#include "headers.h"
#include "record_id.h"
#include "record.h"
#include "store.h"

/* One admin request waiting on Redis. */
struct admin_records_call {
    struct http_req *req;
    const struct admin_env *env;
    struct admin_actor actor;
    char record_id[RECORD_ID_HEX_LEN + 1];
    char record_key[RECORD_KEY_MAX];
    json_t *doc;                /* GET: the answer being built */
    char etag[RECORD_ETAG_LEN + 1]; /* GET: the record's entity tag */
    char route[RECORD_ROUTE_MAX + 1];            /* DELETE: the route the record names, "" for none */
    char reason[ADMIN_REASON_MAX + 1]; /* DELETE: reason=, "" when not given */
    bool confirmed;             /* DELETE: confirm=re-execute */
    const char *state;          /* DELETE: the state purged (static), NULL until read */
};

static void admin_records_free(struct admin_records_call *c)
{
    json_decref(c->doc);
    free(c);
}

/*
 * A purge's answer: its audit line first (the record id is known to be
 * well-formed), then the answer. Steals doc.
 */
static void admin_records_purged(struct admin_records_call *c, int status, json_t *doc)
{
    admin_audit_record(c->req, &c->actor, "purge", c->record_id,
                       c->route[0] != '\0' ? c->route : NULL,
                       c->reason[0] != '\0' ? c->reason : NULL, status, 0);
    admin_reply_json(c->req, status, doc);
    admin_records_free(c);
}

/* A purge refused with problem p: its audit line, then the problem. */
static void admin_records_purge_refused(struct admin_records_call *c, enum problem p,
                                        const char *detail)
{
    admin_audit_record(c->req, &c->actor, "purge", c->record_id,
                       c->route[0] != '\0' ? c->route : NULL,
                       c->reason[0] != '\0' ? c->reason : NULL, problem_status(p), 0);
    admin_reply_problem(c->req, p, detail);
    admin_records_free(c);
}

static void admin_on_pttl(enum store_status st, long long ttl_ms, void *arg)
{
    struct admin_records_call *c = arg;

    if (st != STORE_OK) {
        admin_reply_error(c->req, 503, "redis unavailable");
    } else {
        json_object_set_new(c->doc, "ttl_ms", json_integer(ttl_ms));
        evhttp_add_header(http_server_output_headers(c->req), "ETag", c->etag);
        admin_reply_json(c->req, 200, json_incref(c->doc));
    }
    admin_records_free(c);
}

/*
 * The status and error of a read that found no record (404; 409 for a key
 * of another type; 503); 0 when there is one.
 */
static int admin_records_missing(enum store_status st, const char *value, const char **error)
{
    if (st == STORE_WRONG_TYPE) {
        *error = ADMIN_NOT_A_RECORD;
        return 409;
    }
    if (st != STORE_OK) {
        *error = "redis unavailable";
        return 503;
    }
    if (value == NULL) {
        *error = "no such record";
        return 404;
    }
    return 0;
}

/* How the record's fingerprint was made: its mode and fingerprint_ignore (IR3; "request" before). */
static void admin_records_basis(json_t *doc, const struct fingerprint_basis *basis)
{
    json_t *ignore = json_array();

    for (size_t i = 0; ignore != NULL && i < basis->ignore.n; i++)
        json_array_append_new(ignore, json_stringn(basis->ignore.pointer[i], basis->ignore.len[i]));
    json_object_set_new(doc, "fingerprint_mode", json_string(canonical_mode_name(basis->mode)));
    json_object_set_new(doc, "fingerprint_ignore", ignore);
}

static void admin_on_get(enum store_status st, const char *value, size_t len, void *arg)
{
    struct admin_records_call *c = arg;
    const char *error;
    struct record rec;
    int status = admin_records_missing(st, value, &error);

    if (status != 0) {
        admin_reply_error(c->req, status, error);
    } else if (record_decode(value, len, &rec) != 0) {
        admin_reply_error(c->req, 500, "malformed record");
    } else {
        record_etag(value, len, c->etag);
        c->doc = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:i, s:i, s:I}",
                           "record_id", c->record_id,
                           "redis_key", c->record_key,
                           "state", admin_state_name(rec.state),
                           "fingerprint", rec.fingerprint,
                           "created_ms", (json_int_t)rec.created_ms,
                           "completed_ms", (json_int_t)rec.completed_ms,
                           "lease_deadline_ms", (json_int_t)rec.lease_deadline_ms,
                           "lease_expired", rec.state == RECORD_CLAIMED &&
                                                clock_now_ms() >= rec.lease_deadline_ms,
                           "status", rec.status,
                           "stored_headers", (int)rec.n_headers,
                           "body_bytes", (json_int_t)rec.body_len);
        /* a sealed answer stays sealed here: status, fields and body are the client's */
        if (c->doc != NULL) {
            json_object_set_new(c->doc, "encrypted", json_boolean(rec.sealed != NULL));
            json_object_set_new(c->doc, "key_id", json_string(rec.key_id));
            admin_records_basis(c->doc, &rec.basis);
            json_object_set_new(c->doc, "route", json_stringn(rec.route, rec.route_len));
            json_object_set_new(c->doc, "etag", json_string(c->etag));
        }
        store_pttl(c->env->store, c->record_key, admin_on_pttl, c);
        return;
    }
    admin_records_free(c);
}

static void admin_on_delete(enum store_status st, bool applied, void *arg)
{
    struct admin_records_call *c = arg;

    if (st != STORE_OK)
        admin_records_purged(c, 503, json_pack("{s:s}", "error", "redis unavailable"));
    else if (!applied)
        admin_records_purged(c, 409, json_pack("{s:s}", "error",
                                               "the record changed (or went away) since it was "
                                               "read; nothing was deleted: look at it again"));
    else
        admin_records_purged(c, 200, json_pack("{s:s, s:b, s:s}", "record_id", c->record_id,
                                               "deleted", 1, "state", c->state));
}

/*
 * DELETE looks first: purging a claim whose lease is live would let a retry
 * execute while the first request is still at the upstream, and purging an
 * answer lets the next retry execute again (only when confirmed). A record
 * this release cannot read may hold an answer: it is treated as one. The
 * delete is a compare-and-set on the record just read, so a retry that
 * claims or takes the record over between the look and the delete keeps
 * its claim (409).
 */
static void admin_on_get_before_delete(enum store_status st, const char *value, size_t len,
                                       void *arg)
{
    struct admin_records_call *c = arg;
    const char *error;
    char etag[RECORD_ETAG_LEN + 1];
    struct record rec;
    int status = admin_records_missing(st, value, &error);
    bool readable = status == 0 && record_decode(value, len, &rec) == 0;
    enum admin_hold hold = readable ? admin_hold_of(&rec, clock_now_ms()) : ADMIN_HOLD_ANSWERED;

    if (readable && admin_record_route(&rec, c->route, sizeof(c->route)) == NULL)
        c->route[0] = '\0';
    c->state = readable ? admin_state_name(rec.state) : "unreadable";
    if (status != 0) {
        admin_records_purged(c, status, json_pack("{s:s}", "error", error));
        return;
    }
    if (hold == ADMIN_HOLD_IN_FLIGHT) {
        admin_records_purged(c, 409, json_pack("{s:s}", "error",
                                               "the record is claimed by a request still in "
                                               "flight (its lease is live); purging it would let "
                                               "a retry execute again"));
        return;
    }
    if ((hold == ADMIN_HOLD_ANSWERED || hold == ADMIN_HOLD_RESOLVED) && !c->confirmed) {
        char detail[400];

        snprintf(detail, sizeof(detail), "the record holds %s (state %s): purged, it is "
                 "forgotten, and the next retry of its key executes the request at the upstream "
                 "again. Nothing was deleted. To do that on purpose, send "
                 "confirm=re-execute and a reason= (the CLI: --confirm re-execute --reason R)",
                 hold == ADMIN_HOLD_RESOLVED ? "an operator's resolution"
                 : readable ? "the upstream's answer" : "a value this release cannot read",
                 c->state);
        admin_records_purge_refused(c, PROBLEM_RE_EXECUTE_NOT_CONFIRMED, detail);
        return;
    }
    record_etag(value, len, etag);
    if (admin_if_match(c->req, etag) == ADMIN_IF_MATCH_STALE) {
        admin_records_purge_refused(c, PROBLEM_PRECONDITION_FAILED,
                                    "the record changed since the ETag in If-Match was read; "
                                    "nothing was deleted: look at it again");
        return;
    }
    store_delete_if_unchanged(c->env->store, c->record_key, value, len, admin_on_delete, c);
}

/*
 * DELETE's query: reason= (optional; required with confirm) and
 * confirm=re-execute, each at most once, nothing else. 0, or -1 with why
 * (len bytes) for the 400.
 */
static int admin_records_purge_query(struct admin_records_call *c, char *why, size_t len)
{
    const struct evhttp_uri *uri = http_server_uri(c->req);
    const char *query = uri != NULL ? evhttp_uri_get_query(uri) : NULL;
    const char *reason, *confirm;
    struct evkeyvalq params;
    const struct evkeyval *p;
    int n_reason = 0, n_confirm = 0, rc = -1;

    TAILQ_INIT(&params);
    /* a decoded value is a C string: %00 would cut the reason the audit line keeps */
    if (query != NULL && strcasestr(query, "%00") != NULL) {
        snprintf(why, len, "the query holds %%00 (NUL), which no reason= or confirm= may");
        goto done;
    }
    if (query != NULL && evhttp_parse_query_str(query, &params) != 0) {
        snprintf(why, len, "the query must be reason=...[&confirm=re-execute], percent-encoded");
        goto done;
    }
    TAILQ_FOREACH(p, &params, next) {
        if (strcmp(p->key, "reason") != 0 && strcmp(p->key, "confirm") != 0) {
            snprintf(why, len, "unknown parameter \"%.64s\": only reason= and confirm=", p->key);
            goto done;
        }
    }
    reason = header_find_all(&params, "reason", &n_reason);
    confirm = header_find_all(&params, "confirm", &n_confirm);
    if (n_reason > 1 || n_confirm > 1) {
        snprintf(why, len, "give reason= and confirm= at most once each");
        goto done;
    }
    if (confirm != NULL && strcmp(confirm, "re-execute") != 0) {
        snprintf(why, len, "confirm= takes one value, re-execute: the next retry of the key "
                 "executes the request again");
        goto done;
    }
    if (reason != NULL && admin_reason_check(reason, strlen(reason), why, len) != 0)
        goto done;
    if (confirm != NULL && reason == NULL) {
        snprintf(why, len, "confirm=re-execute needs a reason= (for the audit trail)");
        goto done;
    }
    if (reason != NULL)
        memcpy(c->reason, reason, strlen(reason) + 1);
    c->confirmed = confirm != NULL;
    rc = 0;
done:
    evhttp_clear_headers(&params);
    return rc;
}

/* A purge's checks before Redis; false when it was refused (answered, c freed). */
static bool admin_records_purge_begin(struct admin_records_call *c)
{
    char why[256];

    if (admin_records_purge_query(c, why, sizeof(why)) != 0) {
        admin_records_purged(c, 400, json_pack("{s:s}", "error", why));
        return false;
    }
    if (!admin_if_match_valid(c->req)) {
        admin_records_purged(c, 400, json_pack("{s:s}", "error", "If-Match must be the ETag "
                                               "that GET /records/<id> gave"));
        return false;
    }
    return true;
}

void admin_records(const struct admin_env *env, struct http_req *req, const char *id,
                   const struct admin_actor *actor)
{
    enum evhttp_cmd_type cmd = http_server_command(req);
    bool purge = cmd == EVHTTP_REQ_DELETE;
    const char *prefix = exchange_set_conf(env->set)->key_prefix;
    struct admin_records_call *c;
    char key[RECORD_KEY_MAX];

    if (!admin_record_id_ok(id, strlen(id))) {
        /* a change of no record at all is still an attempt: on record, without the id sent */
        if (purge)
            admin_audit_record(req, actor, "purge", NULL, NULL, NULL, 400, 0);
        if (cmd == EVHTTP_REQ_PUT)
            admin_audit_record(req, actor, "resolve", NULL, NULL, NULL, 400, 0);
        admin_reply_error(req, 400, "a record id is 32 lowercase hex characters");
        return;
    }
    if (cmd == EVHTTP_REQ_PUT) {
        if (record_key_format(prefix, id, key, sizeof(key)) != 0) {
            admin_audit_record(req, actor, "resolve", id, NULL, NULL, 500, 0);
            admin_reply_error(req, 500, "the record key does not fit");
            return;
        }
        admin_resolve(env, req, id, key, actor);
        return;
    }
    if (cmd != EVHTTP_REQ_GET && !purge) {
        admin_reply_error(req, 405, "GET, PUT or DELETE");
        return;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        if (purge)
            admin_audit_record(req, actor, "purge", id, NULL, NULL, 500, 0);
        admin_reply_error(req, 500, "out of memory");
        return;
    }
    c->req = req;
    c->env = env;
    c->actor = *actor;
    memcpy(c->record_id, id, RECORD_ID_HEX_LEN + 1);
    if (record_key_format(prefix, id, c->record_key, sizeof(c->record_key)) != 0) {
        if (purge)
            admin_records_purged(c, 500, json_pack("{s:s}", "error",
                                                   "the record key does not fit"));
        else {
            admin_reply_error(req, 500, "the record key does not fit");
            admin_records_free(c);
        }
        return;
    }
    if (purge && !admin_records_purge_begin(c))
        return;
    if (purge)
        store_get(env->store, c->record_key, admin_on_get_before_delete, c);
    else
        store_get(env->store, c->record_key, admin_on_get, c);
}
