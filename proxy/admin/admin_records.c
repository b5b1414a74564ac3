/*
 * admin_records.c - GET /records/<id> (inspect) and DELETE /records/<id>
 * (purge, audited); PUT /records/<id> goes on to admin_resolve.c.
 */
#include "admin_int.h"

#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "http_server.h"
#include "clock.h"
#include "config.h"
#include "exchange.h"
#include "fingerprint.h"
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
    char route[256];            /* DELETE: the route the record names, "" for none */
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
    admin_audit(c->req, &c->actor, "purge", c->record_id, NULL,
                c->route[0] != '\0' ? c->route : NULL, status);
    admin_reply_json(c->req, status, doc);
    admin_records_free(c);
}

static const char *admin_state_name(enum record_state st)
{
    switch (st) {
    case RECORD_CLAIMED: return "claimed";
    case RECORD_DONE: return "done";
    case RECORD_UNKNOWN: return "outcome-unknown";
    case RECORD_TOMBSTONE: return "not-replayable";
    case RECORD_RESOLVED: return "resolved";
    }
    return "invalid";
}

static void admin_on_pttl(enum store_status st, long long ttl_ms, void *arg)
{
    struct admin_records_call *c = arg;

    if (st != STORE_OK) {
        admin_reply_error(c->req, 503, "redis unavailable");
    } else {
        json_object_set_new(c->doc, "ttl_ms", json_integer(ttl_ms));
        admin_reply_json(c->req, 200, json_incref(c->doc));
    }
    admin_records_free(c);
}

/* The status and error of a read that found no record (503 or 404); 0 when there is one. */
static int admin_records_missing(enum store_status st, const char *value, const char **error)
{
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
            json_object_set_new(c->doc, "route", json_stringn(rec.route, rec.route_len));
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
        admin_records_purged(c, 200, json_pack("{s:s, s:b}", "record_id", c->record_id,
                                               "deleted", 1));
}

/*
 * DELETE looks first: purging a claim whose lease is live would let a retry
 * execute while the first request is still at the upstream. The delete is a
 * compare-and-set on the record just read, so a retry that claims or takes
 * the record over between the look and the delete keeps its claim (409).
 */
static void admin_on_get_before_delete(enum store_status st, const char *value, size_t len,
                                       void *arg)
{
    struct admin_records_call *c = arg;
    const char *error;
    struct record rec;
    int status = admin_records_missing(st, value, &error);

    if (status == 0 && record_decode(value, len, &rec) == 0 &&
        admin_record_route(&rec, c->route, sizeof(c->route)) == NULL)
        c->route[0] = '\0';
    if (status != 0) {
        admin_records_purged(c, status, json_pack("{s:s}", "error", error));
    } else if (record_decode(value, len, &rec) == 0 && rec.state == RECORD_CLAIMED &&
               clock_now_ms() < rec.lease_deadline_ms) {
        admin_records_purged(c, 409, json_pack("{s:s}", "error",
                                               "the record is claimed by a request still in "
                                               "flight (its lease is live); purging it would let "
                                               "a retry execute again"));
    } else {
        store_delete_if_unchanged(c->env->store, c->record_key, value, len, admin_on_delete,
                                  c);
    }
}

void admin_records(const struct admin_env *env, struct http_req *req, const char *id,
                   const struct admin_actor *actor)
{
    enum evhttp_cmd_type cmd = http_server_command(req);
    bool purge = cmd == EVHTTP_REQ_DELETE;
    const char *prefix = exchange_set_conf(env->set)->key_prefix;
    struct admin_records_call *c;
    char key[RECORD_KEY_MAX];

    if (strlen(id) != RECORD_ID_HEX_LEN || strspn(id, "0123456789abcdef") != RECORD_ID_HEX_LEN) {
        /* a change of no record at all is still an attempt: on record, without the id sent */
        if (purge)
            admin_audit(req, actor, "purge", NULL, NULL, NULL, 400);
        if (cmd == EVHTTP_REQ_PUT)
            admin_audit_resolve(req, actor, NULL, NULL, 400, 0);
        admin_reply_error(req, 400, "a record id is 32 lowercase hex characters");
        return;
    }
    if (cmd == EVHTTP_REQ_PUT) {
        if (record_key_format(prefix, id, key, sizeof(key)) != 0) {
            admin_audit_resolve(req, actor, id, NULL, 500, 0);
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
            admin_audit(req, actor, "purge", id, NULL, NULL, 500);
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
    if (purge)
        store_get(env->store, c->record_key, admin_on_get_before_delete, c);
    else
        store_get(env->store, c->record_key, admin_on_get, c);
}
