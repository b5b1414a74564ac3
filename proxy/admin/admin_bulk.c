/*
 * admin_bulk.c - POST /records/bulk: resolve or purge every held record
 * that matches a state, a route and an age, or (a dry run, the default)
 * list what would change.
 *
 * The body is JSON: {"action": "resolve"|"purge", "state":
 * "claimed"|"outcome-unknown"|"resolved", "route", "older_than_seconds",
 * "reason", "dry_run", "confirm", "limit", "cursor"} and, to resolve, the
 * answer (admin_answer.c: "status", "headers", "body_base64"). The records
 * are walked as the listing walks them (store_list: SCAN on every
 * primary), a page at a time; each match of a page is changed by its own
 * compare-and-set on the record as the walk read it
 * (store_replace_unchanged, store_delete_if_unchanged), with its own
 * audit line, and the next page is asked for once they all answered. One
 * call matches at most `limit` (ADMIN_BULK_MAX) records and walks at most
 * ADMIN_BULK_PAGES pages: next_cursor then says where the next call goes
 * on.
 */
#include "admin_int.h"

#include <stdint.h>
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

/* Records a page of the walk holds at most (their values are in memory meanwhile). */
#define ADMIN_BULK_PAGE 250

struct admin_bulk_call;

/* One record changed, waiting on its compare-and-set. */
struct admin_bulk_item {
    struct admin_bulk_call *c;
    json_t *entry;                  /* its entry in the answer (borrowed from c->records) */
    char record_id[RECORD_ID_HEX_LEN + 1];
    char route[256];                /* "" for none */
};

struct admin_bulk_call {
    struct http_req *req;
    const struct admin_env *env;
    struct admin_actor actor;
    bool resolve;                   /* action resolve; else purge */
    bool dry_run;
    bool confirmed;                 /* confirm: re-execute */
    char state[2];                  /* the record.h letter of the state asked for */
    const char *state_name;         /* static */
    char *route;                    /* the route asked for (owned), NULL: every route */
    uint64_t created_by_ms;         /* created at or before (older_than_seconds) */
    unsigned limit;                 /* records to match at most */
    char reason[ADMIN_REASON_MAX + 1]; /* "" when not given (a dry run) */
    struct admin_answer answer;     /* resolve: the answer recorded */
    char cursor[64];                /* where the walk goes on; "" from the start */
    bool walk_over;
    unsigned pages;
    size_t matched, changed, pending;
    json_t *records;
    const char *failed;             /* static: why the walk stopped, or NULL */
};

static void admin_bulk_free(struct admin_bulk_call *c)
{
    admin_answer_deinit(&c->answer);
    json_decref(c->records);
    free(c->route);
    free(c);
}

static const char *admin_bulk_action(const struct admin_bulk_call *c)
{
    return c->resolve ? "bulk-resolve" : "bulk-purge";
}

/* A request refused whole (nothing was changed): one audit line without a record, then doc. */
static void admin_bulk_refused(struct admin_bulk_call *c, const char *action, int status,
                               json_t *doc)
{
    admin_audit_record(c->req, &c->actor, action, NULL, c->route,
                       c->reason[0] != '\0' ? c->reason : NULL, status, 0);
    admin_reply_json(c->req, status, doc);
    admin_bulk_free(c);
}

/* The walk is over for this call (or failed): the answer, with what was done. */
static void admin_bulk_finish(struct admin_bulk_call *c)
{
    json_t *doc = json_pack("{s:s, s:b, s:I, s:I, s:O, s:o}", "action",
                            c->resolve ? "resolve" : "purge", "dry_run", c->dry_run,
                            "matched", (json_int_t)c->matched, "changed", (json_int_t)c->changed,
                            "records", c->records, "next_cursor",
                            c->walk_over ? json_null() : json_string(c->cursor));

    if (doc != NULL && c->failed != NULL)
        json_object_set_new(doc, "error", json_string(c->failed));
    admin_reply_json(c->req, doc == NULL ? 500 : c->failed != NULL ? 503 : 200, doc);
    admin_bulk_free(c);
}

static void admin_bulk_page(struct admin_bulk_call *c);

/* Every change of a page answered: the next page, or the answer. */
static void admin_bulk_next(struct admin_bulk_call *c)
{
    if (c->failed != NULL || c->walk_over || c->matched >= c->limit ||
        c->pages >= ADMIN_BULK_PAGES)
        admin_bulk_finish(c);
    else
        admin_bulk_page(c);
}

/* An item's outcome: its result in the answer, its audit line; the page goes on once all are in. */
static void admin_bulk_item_done(struct admin_bulk_item *it, enum store_status st, bool applied)
{
    struct admin_bulk_call *c = it->c;
    int status = st != STORE_OK ? 503 : applied ? 200 : 409;
    const char *result = st != STORE_OK ? "error" : !applied ? "conflict"
                         : c->resolve ? "resolved" : "purged";

    json_object_set_new(it->entry, "result", json_string(result));
    if (status == 200)
        c->changed++;
    admin_audit_record(c->req, &c->actor, admin_bulk_action(c), it->record_id,
                       it->route[0] != '\0' ? it->route : NULL, c->reason, status,
                       status == 200 && c->resolve ? c->answer.status : 0);
    free(it);
    if (--c->pending == 0)
        admin_bulk_next(c);
}

static void admin_bulk_on_changed(enum store_status st, bool applied, void *arg)
{
    admin_bulk_item_done(arg, st, applied);
}

/*
 * Change one record of the page (l: as the walk read it) by its own
 * compare-and-set; false when it is not sent (its result and audit line
 * are written then).
 */
static bool admin_bulk_change(struct admin_bulk_call *c, const struct store_listed *l,
                              const struct record *rec, json_t *entry)
{
    const struct config *conf = exchange_set_conf(c->env->set);
    struct admin_bulk_item *it = calloc(1, sizeof(*it));
    const char *brace = strrchr(l->key, '{');
    char *encoded;
    size_t len = 0;
    int status;

    if (it == NULL) {
        json_object_set_new(entry, "result", json_string("error"));
        return false;
    }
    it->c = c;
    it->entry = entry;
    memcpy(it->record_id, brace + 1, RECORD_ID_HEX_LEN);
    if (admin_record_route(rec, it->route, sizeof(it->route)) == NULL)
        it->route[0] = '\0';
    if (!c->resolve) {
        store_delete_if_unchanged(c->env->store, l->key, l->value, l->len,
                                  admin_bulk_on_changed, it);
        return true;
    }
    if (admin_answer_released(&c->answer, conf, it->route)) {
        /* this record's route never records that status (release_statuses) */
        status = 400;
        encoded = NULL;
    } else {
        encoded = admin_answer_record(&c->answer, rec, conf, l->key, &len, NULL);
        status = encoded == NULL ? 500 : 0;
    }
    if (encoded == NULL) {
        json_object_set_new(entry, "result", json_string(status == 400 ? "refused" : "error"));
        admin_audit_record(c->req, &c->actor, admin_bulk_action(c), it->record_id,
                           it->route[0] != '\0' ? it->route : NULL, c->reason, status, 0);
        free(it);
        return false;
    }
    store_replace_unchanged(c->env->store, l->key, l->value, l->len, encoded, len,
                            admin_bulk_on_changed, it);
    free(encoded);
    return true;
}

/* Whether a record the walk found in the state asked for matches (store_list_keep). */
static bool admin_bulk_keep(const char *value, size_t len, void *arg)
{
    const struct admin_bulk_call *c = arg;
    struct record rec;
    enum admin_hold hold;

    if (record_decode(value, len, &rec) != 0 || (char)rec.state != c->state[0])
        return false;
    hold = admin_hold_of(&rec, clock_now_ms());
    if (hold != ADMIN_HOLD_CLAIM && hold != ADMIN_HOLD_UNKNOWN && hold != ADMIN_HOLD_RESOLVED)
        return false; /* a live claim: its request is at the upstream */
    if (c->route != NULL &&
        (rec.route_len != strlen(c->route) || memcmp(rec.route, c->route, rec.route_len) != 0))
        return false;
    return rec.created_ms <= c->created_by_ms;
}

static void admin_bulk_on_page(enum store_status st, const struct store_listed *records,
                               size_t n, const char *next, const char *why, void *arg)
{
    struct admin_bulk_call *c = arg;

    if (st != STORE_OK) {
        c->failed = why; /* static (store.h); the walk goes on from c->cursor */
        admin_bulk_finish(c);
        return;
    }
    c->pages++;
    c->walk_over = next == NULL;
    if (next != NULL)
        snprintf(c->cursor, sizeof(c->cursor), "%s", next);
    c->pending = 1; /* held until every change of the page is sent */
    for (size_t i = 0; i < n; i++) {
        const char *brace = strrchr(records[i].key, '{');
        char route[256];
        struct record rec;
        json_t *entry;

        if (brace == NULL || record_decode(records[i].value, records[i].len, &rec) != 0)
            continue; /* kept by admin_bulk_keep: decodes */
        entry = json_pack("{s:s#, s:o, s:s, s:s}", "record_id", brace + 1,
                          (int)RECORD_ID_HEX_LEN, "route",
                          admin_record_route(&rec, route, sizeof(route)) != NULL
                              ? json_string(route) : json_null(),
                          "state", c->state_name, "result",
                          c->dry_run ? (c->resolve ? "would-resolve" : "would-purge")
                                     : "pending");
        if (entry == NULL || json_array_append_new(c->records, entry) != 0) {
            c->failed = "out of memory";
            break;
        }
        c->matched++;
        if (!c->dry_run && admin_bulk_change(c, &records[i], &rec, entry))
            c->pending++;
    }
    if (--c->pending == 0)
        admin_bulk_next(c);
}

static void admin_bulk_page(struct admin_bulk_call *c)
{
    size_t room = c->limit - c->matched;

    store_list(c->env->store, exchange_set_conf(c->env->set)->key_prefix, c->state,
               (unsigned)(room < ADMIN_BULK_PAGE ? room : ADMIN_BULK_PAGE),
               c->cursor[0] != '\0' ? c->cursor : NULL, admin_bulk_keep, admin_bulk_on_page, c);
}

/* "state": a held state's name into c. 0, or -1 with why. */
static int admin_bulk_state(struct admin_bulk_call *c, const json_t *state, char *why,
                            size_t len)
{
    static const struct { const char *name; char letter; } held[] = {
        { "claimed", RECORD_CLAIMED },
        { "outcome-unknown", RECORD_UNKNOWN },
        { "resolved", RECORD_RESOLVED },
    };

    for (size_t i = 0; json_is_string(state) && i < sizeof(held) / sizeof(held[0]); i++) {
        if (strcmp(json_string_value(state), held[i].name) == 0) {
            c->state[0] = held[i].letter;
            c->state_name = held[i].name;
            return 0;
        }
    }
    snprintf(why, len, "\"state\" must be one held state: claimed (a lease that ran out), "
             "outcome-unknown or resolved");
    return -1;
}

/* The filters: route, older_than_seconds, limit, cursor. 0, or -1 with why. */
static int admin_bulk_filters(struct admin_bulk_call *c, const json_t *doc, char *why,
                              size_t len)
{
    const json_t *route = json_object_get(doc, "route"), *older, *limit, *cursor;
    json_int_t seconds = 0;

    if (route != NULL && (!json_is_string(route) || json_string_length(route) == 0 ||
                          json_string_length(route) > RECORD_ROUTE_MAX)) {
        snprintf(why, len, "\"route\" must be a route as the listing names it (\"/v1/payments\")");
        return -1;
    }
    if (route != NULL && (c->route = strdup(json_string_value(route))) == NULL) {
        snprintf(why, len, "out of memory");
        return -1;
    }
    older = json_object_get(doc, "older_than_seconds");
    if (older != NULL && (!json_is_integer(older) || (seconds = json_integer_value(older)) < 0 ||
                          seconds > 100LL * 365 * 86400)) {
        snprintf(why, len, "\"older_than_seconds\" must be an integer >= 0: records created at "
                 "least that long ago");
        return -1;
    }
    c->created_by_ms = (uint64_t)seconds * 1000 < clock_now_ms()
                           ? clock_now_ms() - (uint64_t)seconds * 1000 : 0;
    limit = json_object_get(doc, "limit");
    c->limit = ADMIN_BULK_MAX;
    if (limit != NULL && (!json_is_integer(limit) || json_integer_value(limit) < 1 ||
                          json_integer_value(limit) > ADMIN_BULK_MAX)) {
        snprintf(why, len, "\"limit\" must be an integer 1..%d", ADMIN_BULK_MAX);
        return -1;
    }
    if (limit != NULL)
        c->limit = (unsigned)json_integer_value(limit);
    cursor = json_object_get(doc, "cursor");
    if (cursor != NULL && (!json_is_string(cursor) || json_string_length(cursor) >= 64 ||
                           !store_list_cursor_valid(json_string_value(cursor)))) {
        snprintf(why, len, "\"cursor\" must be a next_cursor this endpoint gave");
        return -1;
    }
    if (cursor != NULL)
        snprintf(c->cursor, sizeof(c->cursor), "%s", json_string_value(cursor));
    return 0;
}

/* The body, into c. 0, or -1 with why (len bytes) for the 400. */
static int admin_bulk_parse(struct admin_bulk_call *c, const json_t *doc, char *why, size_t len)
{
    static const char *const members[] = {
        "action", "state", "route", "older_than_seconds", "reason", "dry_run", "confirm",
        "limit", "cursor", "status", "headers", "body_base64", NULL,
    };
    const json_t *dry = json_object_get(doc, "dry_run"), *confirm;

    if (admin_json_members(doc, members, why, len) != 0 ||
        admin_bulk_state(c, json_object_get(doc, "state"), why, len) != 0 ||
        admin_bulk_filters(c, doc, why, len) != 0)
        return -1;
    if (dry != NULL && !json_is_boolean(dry)) {
        snprintf(why, len, "\"dry_run\" must be true or false (default true: nothing changes)");
        return -1;
    }
    c->dry_run = dry == NULL || json_is_true(dry);
    /* a dry run is a read: its reason is optional */
    if ((!c->dry_run || json_object_get(doc, "reason") != NULL) &&
        admin_json_reason(doc, c->reason, why, len) != 0)
        return -1;
    confirm = json_object_get(doc, "confirm");
    if (confirm != NULL && (c->resolve || !json_is_string(confirm) ||
                            strcmp(json_string_value(confirm), "re-execute") != 0)) {
        snprintf(why, len, "\"confirm\" is for a purge and takes one value, \"re-execute\"");
        return -1;
    }
    c->confirmed = confirm != NULL;
    if (!c->resolve) {
        if (json_object_get(doc, "status") != NULL || json_object_get(doc, "headers") != NULL ||
            json_object_get(doc, "body_base64") != NULL) {
            snprintf(why, len, "\"status\", \"headers\" and \"body_base64\" are a resolve's");
            return -1;
        }
        return 0;
    }
    if (c->state[0] == RECORD_RESOLVED) {
        snprintf(why, len, "a resolution is replaced one record at a time (PUT /records/<id> "
                 "with If-Match), not in bulk");
        return -1;
    }
    /* a dry run lists what would be resolved: the answer may come with the real change only */
    if (c->dry_run && json_object_get(doc, "status") == NULL &&
        json_object_get(doc, "headers") == NULL && json_object_get(doc, "body_base64") == NULL)
        return 0;
    return admin_answer_parse(&c->answer, doc, why, len);
}

void admin_bulk(const struct admin_env *env, struct http_req *req,
                const struct admin_actor *actor)
{
    struct admin_bulk_call *c = calloc(1, sizeof(*c));
    const json_t *action;
    json_t *doc;
    char why[256];

    if (http_server_command(req) != EVHTTP_REQ_POST) {
        free(c);
        admin_reply_error(req, 405, "POST");
        return;
    }
    if (c == NULL || (c->records = json_array()) == NULL) {
        free(c);
        admin_audit_record(req, actor, "bulk", NULL, NULL, NULL, 500, 0);
        admin_reply_error(req, 500, "out of memory");
        return;
    }
    c->req = req;
    c->env = env;
    c->actor = *actor;
    admin_answer_init(&c->answer, exchange_set_conf(env->set)->max_stored_response);
    doc = admin_body_json(req, why, sizeof(why));
    action = json_object_get(doc, "action");
    if (doc == NULL || !json_is_string(action) ||
        (strcmp(json_string_value(action), "resolve") != 0 &&
         strcmp(json_string_value(action), "purge") != 0)) {
        if (doc != NULL)
            snprintf(why, sizeof(why), "\"action\" must be \"resolve\" or \"purge\"");
        json_decref(doc);
        admin_bulk_refused(c, "bulk", 400, json_pack("{s:s}", "error", why));
        return;
    }
    c->resolve = strcmp(json_string_value(action), "resolve") == 0;
    if (admin_bulk_parse(c, doc, why, sizeof(why)) != 0) {
        json_decref(doc);
        admin_bulk_refused(c, admin_bulk_action(c), 400, json_pack("{s:s}", "error", why));
        return;
    }
    json_decref(doc);
    if (!c->resolve && !c->dry_run && c->state[0] == RECORD_RESOLVED && !c->confirmed) {
        admin_audit_record(req, &c->actor, admin_bulk_action(c), NULL, c->route, c->reason,
                           409, 0);
        admin_reply_problem(req, PROBLEM_RE_EXECUTE_NOT_CONFIRMED,
                            "the records hold operators' resolutions: purged, each is "
                            "forgotten, and the next retry of its key executes the request at "
                            "the upstream again. Nothing was deleted. To do that on purpose, "
                            "send \"confirm\": \"re-execute\" with the reason");
        admin_bulk_free(c);
        return;
    }
    admin_bulk_page(c);
}
