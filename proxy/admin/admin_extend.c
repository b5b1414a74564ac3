/*
 * admin_extend.c - POST /records/<id>/extend {"seconds": N, "reason":
 * "..."}: an operator keeps a held record (a claim whose lease ran out, an
 * outcome unknown, a resolution) longer than its retention would, so that
 * its key is not forgotten (and a retry executed again) while the
 * upstream is still being asked. The record's time to live becomes N
 * seconds from now, never shorter than it is; the record itself is not
 * changed (its entity tag stays). One compare-and-set on the record as it
 * was read (store_extend_unchanged), audited.
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
#include "record_id.h"
#include "record.h"
#include "store.h"

/* An extension waiting on Redis. */
struct admin_extend_call {
    struct http_req *req;
    const struct admin_env *env;
    struct admin_actor actor;
    char record_id[RECORD_ID_HEX_LEN + 1];
    char record_key[RECORD_KEY_MAX];
    char reason[ADMIN_REASON_MAX + 1]; /* "" until read */
    char route[RECORD_ROUTE_MAX + 1];                /* the record's route, "" for none */
    const char *state;              /* the record's state name (static), once read */
    long long seconds;              /* the time to live asked for */
    long long ttl_ms;               /* the time to live set, while its replicas are waited for */
    bool changed;
};

/* The audit line, then doc (stolen) as the answer; frees c. */
static void admin_extend_done(struct admin_extend_call *c, int status, json_t *doc)
{
    admin_audit_record(c->req, &c->actor, "extend",
                       c->record_id[0] != '\0' ? c->record_id : NULL,
                       c->route[0] != '\0' ? c->route : NULL,
                       c->reason[0] != '\0' ? c->reason : NULL, status, 0);
    admin_reply_json(c->req, status, doc);
    free(c);
}

static void admin_extend_answer(struct admin_extend_call *c, long long ttl_ms, bool changed)
{
    admin_extend_done(c, 200, json_pack("{s:s, s:s, s:I, s:b}", "record_id", c->record_id,
                                        "state", c->state, "ttl_ms", (json_int_t)ttl_ms,
                                        "changed", changed));
}

/*
 * redis.min_replicas: the extension is answered 200 only once that many
 * replicas hold it; else 503 (the CLI's "could not tell"): on the primary,
 * not yet where a failover would look (docs/operations.md#extending-a-hold).
 */
static void admin_extend_on_replicated(enum store_status st, long long replicas, void *arg)
{
    struct admin_extend_call *c = arg;
    unsigned want = exchange_set_conf(c->env->set)->redis_min_replicas;

    if (st == STORE_OK && replicas >= (long long)want)
        admin_extend_answer(c, c->ttl_ms, c->changed);
    else
        admin_extend_done(c, 503, json_pack(
            "{s:s, s:I}", "error", "extended on the primary, but not confirmed by "
            "redis.min_replicas replicas within redis.replica_timeout: a failover now could "
            "lose it; look at its ttl_ms (GET /records/<id>) and extend again", "ttl_ms",
            (json_int_t)c->ttl_ms));
}

static void admin_extend_on_done(enum store_status st, bool applied, bool changed,
                                 long long ttl_ms, void *arg)
{
    struct admin_extend_call *c = arg;

    if (st != STORE_OK)
        admin_extend_done(c, 503, json_pack(
            "{s:s}", "error", st == STORE_LOST || st == STORE_TIMEOUT
                ? "redis did not answer; the record may or may not be extended: look at its "
                  "ttl_ms (GET /records/<id>)"
                : "redis unavailable; nothing was changed"));
    else if (!applied)
        admin_extend_done(c, 409, json_pack(
            "{s:s}", "error", "the record changed (or went away) since it was read; nothing was "
                              "changed: look at it again"));
    else if (changed && exchange_set_conf(c->env->set)->redis_min_replicas > 0) {
        /* an extension a failover loses would let the key expire as it was due to */
        c->ttl_ms = ttl_ms;
        c->changed = changed;
        store_wait_replicas(c->env->store, true, admin_extend_on_replicated, c);
    } else
        admin_extend_answer(c, ttl_ms, changed);
}

/* The record as read: held (and, with If-Match, the one named), then extended. */
static void admin_extend_on_get(enum store_status st, const char *value, size_t len, void *arg)
{
    struct admin_extend_call *c = arg;
    char etag[RECORD_ETAG_LEN + 1];
    struct record rec;
    enum admin_hold hold;

    if (st != STORE_OK) {
        admin_extend_done(c, st == STORE_WRONG_TYPE ? 409 : 503, json_pack(
            "{s:s}", "error", st == STORE_WRONG_TYPE ? ADMIN_NOT_A_RECORD
                                                     : "redis unavailable; nothing was changed"));
        return;
    }
    if (value == NULL) {
        admin_extend_done(c, 404, json_pack("{s:s}", "error", "no such record"));
        return;
    }
    if (record_decode(value, len, &rec) != 0) {
        admin_extend_done(c, 500, json_pack("{s:s}", "error", "the record cannot be read; "
                                            "nothing was changed"));
        return;
    }
    if (admin_record_route(&rec, c->route, sizeof(c->route)) == NULL)
        c->route[0] = '\0';
    c->state = admin_state_name(rec.state);
    hold = admin_hold_of(&rec, clock_now_ms());
    if (hold == ADMIN_HOLD_IN_FLIGHT || hold == ADMIN_HOLD_ANSWERED) {
        admin_extend_done(c, 409, json_pack(
            "{s:s, s:s}", "error", hold == ADMIN_HOLD_IN_FLIGHT
                ? "the record is claimed by a request still in flight (its lease is live): "
                  "its own answer will be recorded; nothing was changed"
                : "the record holds the upstream's answer: it is not held; nothing was changed",
            "state", c->state));
        return;
    }
    record_etag(value, len, etag);
    if (admin_if_match(c->req, etag) == ADMIN_IF_MATCH_STALE) {
        admin_audit_record(c->req, &c->actor, "extend", c->record_id,
                           c->route[0] != '\0' ? c->route : NULL, c->reason, 412, 0);
        admin_reply_problem(c->req, PROBLEM_PRECONDITION_FAILED,
                            "the record changed since the ETag in If-Match was read; nothing "
                            "was changed: look at it again");
        free(c);
        return;
    }
    store_extend_unchanged(c->env->store, c->record_key, value, len,
                           (uint64_t)c->seconds * 1000, admin_extend_on_done, c);
}

/* The body: {"seconds": 1..ADMIN_EXTEND_MAX_S, "reason": "..."}. 0, or -1 with why. */
static int admin_extend_parse(struct admin_extend_call *c, char *why, size_t len)
{
    static const char *const members[] = { "seconds", "reason", NULL };
    json_t *doc = admin_body_json(c->req, why, len);
    const json_t *seconds;
    int rc = -1;

    if (doc == NULL)
        return -1;
    if (admin_json_members(doc, members, why, len) != 0 ||
        admin_json_reason(doc, c->reason, why, len) != 0)
        goto done;
    seconds = json_object_get(doc, "seconds");
    if (!json_is_integer(seconds) || json_integer_value(seconds) < 1 ||
        json_integer_value(seconds) > ADMIN_EXTEND_MAX_S) {
        snprintf(why, len, "\"seconds\" must be an integer 1..%d (30 days): the record's time "
                 "to live from now", ADMIN_EXTEND_MAX_S);
        goto done;
    }
    c->seconds = (long long)json_integer_value(seconds);
    rc = 0;
done:
    json_decref(doc);
    return rc;
}

void admin_extend(const struct admin_env *env, struct http_req *req, const char *id,
                  size_t id_len, const struct admin_actor *actor)
{
    struct admin_extend_call *c = calloc(1, sizeof(*c));
    char why[256];

    if (c == NULL) {
        admin_audit_record(req, actor, "extend", NULL, NULL, NULL, 500, 0);
        admin_reply_error(req, 500, "out of memory");
        return;
    }
    c->req = req;
    c->env = env;
    c->actor = *actor;
    if (http_server_command(req) != EVHTTP_REQ_POST) {
        admin_reply_error(req, 405, "POST");
        free(c);
        return;
    }
    if (!admin_record_id_ok(id, id_len)) {
        admin_extend_done(c, 400, json_pack("{s:s}", "error",
                                            "a record id is 32 lowercase hex characters"));
        return;
    }
    memcpy(c->record_id, id, RECORD_ID_HEX_LEN);
    if (admin_extend_parse(c, why, sizeof(why)) != 0) {
        admin_extend_done(c, 400, json_pack("{s:s}", "error", why));
        return;
    }
    if (!admin_if_match_valid(req)) {
        admin_extend_done(c, 400, json_pack("{s:s}", "error", "If-Match must be the ETag that "
                                            "GET /records/<id> gave"));
        return;
    }
    if (record_key_format(exchange_set_conf(env->set)->key_prefix, c->record_id, c->record_key,
                          sizeof(c->record_key)) != 0) {
        admin_extend_done(c, 500, json_pack("{s:s}", "error", "the record key does not fit"));
        return;
    }
    store_get(env->store, c->record_key, admin_extend_on_get, c);
}
