/*
 * admin.c - probes, metrics and record administration.
 */
#include "admin.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "clock.h"
#include "config.h"
#include "exchange.h"
#include "fingerprint.h"
#include "inbox.h"
#include "metrics.h"
#include "record.h"
#include "store.h"

#define ADMIN_RECORDS_PATH "/records/"

/* One admin request waiting on Redis. */
struct admin_lookup {
    struct evhttp_request *req;
    const struct admin_env *env;
    char record_id[RECORD_ID_HEX_LEN + 1];
    char record_key[RECORD_KEY_MAX];
    json_t *doc;                /* GET: the answer being built */
};

static void admin_reply(struct evhttp_request *req, int status, const char *content_type,
                        struct evbuffer *body)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", content_type);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    evhttp_send_reply(req, status, NULL, body);
}

static void admin_reply_text(struct evhttp_request *req, int status, const char *text)
{
    struct evbuffer *body = evbuffer_new();

    evbuffer_add(body, text, strlen(text));
    admin_reply(req, status, "text/plain; charset=utf-8", body);
    evbuffer_free(body);
}

/* Steals doc. */
static void admin_reply_json(struct evhttp_request *req, int status, json_t *doc)
{
    struct evbuffer *body = evbuffer_new();
    char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);

    if (text != NULL) {
        evbuffer_add(body, text, strlen(text));
        evbuffer_add(body, "\n", 1);
    }
    free(text);
    json_decref(doc);
    admin_reply(req, status, "application/json", body);
    evbuffer_free(body);
}

static void admin_reply_error(struct evhttp_request *req, int status, const char *error)
{
    admin_reply_json(req, status, json_pack("{s:s}", "error", error));
}

static void admin_lookup_free(struct admin_lookup *l)
{
    json_decref(l->doc);
    free(l);
}

static const char *admin_state_name(enum record_state st)
{
    switch (st) {
    case RECORD_CLAIMED: return "claimed";
    case RECORD_DONE: return "done";
    case RECORD_UNKNOWN: return "outcome-unknown";
    case RECORD_TOMBSTONE: return "not-replayable";
    }
    return "invalid";
}

static void admin_on_pttl(enum store_status st, long long ttl_ms, void *arg)
{
    struct admin_lookup *l = arg;

    if (st != STORE_OK) {
        admin_reply_error(l->req, 503, "redis unavailable");
    } else {
        json_object_set_new(l->doc, "ttl_ms", json_integer(ttl_ms));
        admin_reply_json(l->req, 200, json_incref(l->doc));
    }
    admin_lookup_free(l);
}

/* Answer 503 or 404 when a lookup found no record; false when there is one. */
static bool admin_lookup_failed(struct admin_lookup *l, enum store_status st, const char *value)
{
    if (st != STORE_OK)
        admin_reply_error(l->req, 503, "redis unavailable");
    else if (value == NULL)
        admin_reply_error(l->req, 404, "no such record");
    else
        return false;
    return true;
}

static void admin_on_get(enum store_status st, const char *value, size_t len, void *arg)
{
    struct admin_lookup *l = arg;
    struct record rec;

    if (admin_lookup_failed(l, st, value)) {
        /* answered */
    } else if (record_decode(value, len, &rec) != 0) {
        admin_reply_error(l->req, 500, "malformed record");
    } else {
        l->doc = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:i, s:i, s:I}",
                           "record_id", l->record_id,
                           "redis_key", l->record_key,
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
        store_pttl(l->env->set->store, l->record_key, admin_on_pttl, l);
        return;
    }
    admin_lookup_free(l);
}

static void admin_on_delete(enum store_status st, bool applied, void *arg)
{
    struct admin_lookup *l = arg;

    if (st != STORE_OK)
        admin_reply_error(l->req, 503, "redis unavailable");
    else if (!applied)
        admin_reply_error(l->req, 409, "the record changed (or went away) since it was read; "
                                       "nothing was deleted: look at it again");
    else
        admin_reply_json(l->req, 200, json_pack("{s:s, s:b}", "record_id", l->record_id,
                                                "deleted", 1));
    admin_lookup_free(l);
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
    struct admin_lookup *l = arg;
    struct record rec;

    if (admin_lookup_failed(l, st, value)) {
        /* answered */
    } else if (record_decode(value, len, &rec) == 0 && rec.state == RECORD_CLAIMED &&
               clock_now_ms() < rec.lease_deadline_ms) {
        admin_reply_error(l->req, 409, "the record is claimed by a request still in flight "
                                       "(its lease is live); purging it would let a retry "
                                       "execute again");
    } else {
        store_delete_if_unchanged(l->env->set->store, l->record_key, value, len, admin_on_delete, l);
        return;
    }
    admin_lookup_free(l);
}

static void admin_records(const struct admin_env *env, struct evhttp_request *req, const char *id)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    struct admin_lookup *l;

    if (strlen(id) != RECORD_ID_HEX_LEN || strspn(id, "0123456789abcdef") != RECORD_ID_HEX_LEN) {
        admin_reply_error(req, 400, "a record id is 32 lowercase hex characters");
        return;
    }
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_DELETE) {
        admin_reply_error(req, 405, "GET or DELETE");
        return;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        admin_reply_error(req, 500, "out of memory");
        return;
    }
    l->req = req;
    l->env = env;
    memcpy(l->record_id, id, RECORD_ID_HEX_LEN + 1);
    if (record_key_format(env->set->conf->key_prefix, id, l->record_key, sizeof(l->record_key)) != 0) {
        free(l);
        admin_reply_error(req, 500, "the record key does not fit");
        return;
    }
    if (cmd == EVHTTP_REQ_GET)
        store_get(env->set->store, l->record_key, admin_on_get, l);
    else
        store_get(env->set->store, l->record_key, admin_on_get_before_delete, l);
}

static void admin_metrics(const struct admin_env *env, struct evhttp_request *req)
{
    struct evbuffer *body = evbuffer_new();
    struct metrics_gauges g;

    env->gauges(env->arg, &g);
    metrics_render(env->metrics, body, &g);
    admin_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", body);
    evbuffer_free(body);
}

void admin_handle(struct evhttp_request *req, void *arg)
{
    const struct admin_env *env = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;

    if (path == NULL)
        path = "";
    if (strncmp(path, ADMIN_RECORDS_PATH, strlen(ADMIN_RECORDS_PATH)) == 0) {
        admin_records(env, req, path + strlen(ADMIN_RECORDS_PATH));
        return;
    }
    if (strcmp(path, "/inbox") == 0 || strncmp(path, "/inbox/", 7) == 0) {
        inbox_admin(req, env->set->store, env->set->conf, path + 6);
        return;
    }
    if (evhttp_request_get_command(req) == EVHTTP_REQ_POST) {
        admin_reply_text(req, 405, "method not allowed\n");
        return;
    }
    if (evhttp_request_get_command(req) == EVHTTP_REQ_DELETE) {
        admin_reply_text(req, 405, "method not allowed\n");
    } else if (strcmp(path, "/healthz") == 0) {
        admin_reply_text(req, 200, "ok\n");
    } else if (strcmp(path, "/readyz") == 0) {
        const char *why = env->unready(env->arg);
        char text[64];
        snprintf(text, sizeof(text), "%s\n", why != NULL ? why : "ready");
        admin_reply_text(req, why != NULL ? 503 : 200, text);
    } else if (strcmp(path, "/metrics") == 0) {
        admin_metrics(env, req);
    } else {
        admin_reply_text(req, 404, "not found\n");
    }
}
