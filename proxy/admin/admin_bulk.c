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
 * audit line, and the next page is asked for once they all answered.
 *
 * What one call holds is bounded, whatever the answer's size: at most
 * ADMIN_BULK_WRITES changes are out at a time, and at most
 * ADMIN_BULK_WRITE_BYTES of records (the new one and the one compared;
 * one change at a time when a single one is larger); a resolution is
 * encoded only as its change is sent. One call matches at most `limit`
 * (ADMIN_BULK_MAX) records, walks at most ADMIN_BULK_PAGES pages and sends
 * about ADMIN_BULK_CALL_BYTES of records at most (a resolve's pages are
 * sized by its answer): next_cursor then says where the next call goes
 * on.
 */
#include "admin_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "http_server.h"
#include "clock.h"
#include "config.h"
#include "exchange.h"
#include "metrics.h"
#include "record_id.h"
#include "record.h"
#include "store.h"

/* Records a page of the walk holds at most (their values are in memory meanwhile). */
#define ADMIN_BULK_PAGE 250

/* Changes out at a time at most, and bytes of records they send at most (at least one). */
#define ADMIN_BULK_WRITES 16
#define ADMIN_BULK_WRITE_BYTES (8u << 20)

/* Bytes of records one call sends, about: then it answers with its next_cursor. */
#define ADMIN_BULK_CALL_BYTES (64u << 20)

/* A resolution's bytes beside its answer's (head, key id, route, sealing), for sizing pages. */
#define ADMIN_BULK_RECORD_OVERHEAD 4608

struct admin_bulk_call;

/* One record of a page to change: waiting to be sent, or on its compare-and-set. */
struct admin_bulk_item {
    struct admin_bulk_call *c;
    json_t *entry;                  /* its entry in the answer (borrowed from c->records) */
    char key[RECORD_KEY_MAX];
    char record_id[RECORD_ID_HEX_LEN + 1];
    char route[RECORD_ROUTE_MAX + 1];                /* "" for none */
    char *value;                    /* the record as the walk read it (owned), len bytes */
    size_t len;
    char *encoded;                  /* resolve: the new record once made (owned), encoded_len */
    size_t encoded_len;
    size_t bytes;                   /* what its change sends: value and new record */
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
    uint64_t created_by_ms;         /* created at or before (older_than_seconds,
                                       created_before_ms) */
    uint64_t as_of_ms;              /* when the call began (wall clock): the answer's as_of_ms */
    unsigned limit;                 /* records to match at most */
    char reason[ADMIN_REASON_MAX + 1]; /* "" when not given (a dry run) */
    struct admin_answer answer;     /* resolve: the answer recorded */
    char cursor[STORE_LIST_CURSOR_MAX]; /* where the walk goes on; "" from the start */
    bool walk_over;
    unsigned pages;
    size_t matched, changed;
    struct admin_bulk_item *items;  /* the page's changes, sent in order */
    size_t n_items, next;           /* of them; the next to send */
    size_t inflight, inflight_bytes; /* changes out, and the bytes they sent */
    uint64_t sent_bytes;            /* bytes of records this call sent */
    json_t *records;
    const char *failed;             /* static: why the walk stopped, or NULL */
    char (*ids)[RECORD_ID_HEX_LEN + 1]; /* record_ids, sorted (owned); NULL: every record */
    size_t n_ids;
};

/* The page's items and what they still hold. */
static void admin_bulk_items_free(struct admin_bulk_call *c)
{
    for (size_t i = 0; i < c->n_items; i++) {
        free(c->items[i].value);
        free(c->items[i].encoded);
    }
    free(c->items);
    c->items = NULL;
    c->n_items = c->next = 0;
}

static void admin_bulk_free(struct admin_bulk_call *c)
{
    admin_bulk_items_free(c);
    admin_answer_deinit(&c->answer);
    json_decref(c->records);
    free(c->route);
    free(c->ids);
    free(c);
}

static const char *admin_bulk_action(const struct admin_bulk_call *c)
{
    return c->resolve ? "bulk-resolve" : "bulk-purge";
}

/* The action of the request's own line: a dry run's reads, or the change it made item by item. */
static const char *admin_bulk_request_action(const struct admin_bulk_call *c)
{
    if (c->dry_run)
        return c->resolve ? "bulk-resolve-dry-run" : "bulk-purge-dry-run";
    return admin_bulk_action(c);
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
    json_t *doc = json_pack("{s:s, s:b, s:I, s:I, s:I, s:O, s:o}", "action",
                            c->resolve ? "resolve" : "purge", "dry_run", c->dry_run,
                            "as_of_ms", (json_int_t)c->as_of_ms,
                            "matched", (json_int_t)c->matched, "changed", (json_int_t)c->changed,
                            "records", c->records, "next_cursor",
                            c->walk_over ? json_null() : json_string(c->cursor));

    int status = doc == NULL ? 500 : c->failed != NULL ? 503 : 200;

    if (doc != NULL && c->failed != NULL)
        json_object_set_new(doc, "error", json_string(c->failed));
    /* the request's own line, beside each item's: what was asked, by whom, how it ended */
    admin_audit_record(c->req, &c->actor, admin_bulk_request_action(c), NULL, c->route,
                       c->reason[0] != '\0' ? c->reason : NULL, status, 0);
    admin_reply_json(c->req, status, doc);
    admin_bulk_free(c);
}

static void admin_bulk_page(struct admin_bulk_call *c);

/* Every change of a page answered: the next page, or the answer. */
static void admin_bulk_next(struct admin_bulk_call *c)
{
    admin_bulk_items_free(c);
    if (c->failed != NULL || c->walk_over || c->matched >= c->limit ||
        c->pages >= ADMIN_BULK_PAGES || c->sent_bytes >= ADMIN_BULK_CALL_BYTES)
        admin_bulk_finish(c);
    else
        admin_bulk_page(c);
}

static void admin_bulk_pump(struct admin_bulk_call *c);

/*
 * An item's outcome: its result in the answer and its audit line
 * (status 0: its compare-and-set answered with st and applied; else the
 * status of a change never sent).
 */
static void admin_bulk_item_result(struct admin_bulk_item *it, int status, enum store_status st,
                                   bool applied)
{
    struct admin_bulk_call *c = it->c;
    const char *result;

    /* sent and not answered (a lost connection, a timeout, a shutdown): it may have happened */
    bool unknown = status == 0 && (st == STORE_LOST || st == STORE_TIMEOUT);

    if (status == 0)
        status = st != STORE_OK ? 503 : applied ? 200 : 409;
    result = unknown ? "unknown" : status == 200 ? (c->resolve ? "resolved" : "purged")
             : status == 409 ? "conflict" : status == 400 ? "refused" : "error";
    json_object_set_new(it->entry, "result", json_string(result));
    if (unknown)
        status = 0; /* the audit line's "unknown" (admin_audit_result) */
    if (status == 200) {
        c->changed++;
        if (c->resolve)
            metrics_count(c->env->metrics, METRICS_RECORDS_RESOLVED);
    }
    admin_audit_record(c->req, &c->actor, admin_bulk_action(c), it->record_id,
                       it->route[0] != '\0' ? it->route : NULL, c->reason, status,
                       status == 200 && c->resolve ? c->answer.status : 0);
}

static void admin_bulk_on_changed(enum store_status st, bool applied, void *arg)
{
    struct admin_bulk_item *it = arg;
    struct admin_bulk_call *c = it->c;

    admin_bulk_item_result(it, 0, st, applied);
    c->inflight--;
    c->inflight_bytes -= it->bytes;
    admin_bulk_pump(c);
}

/*
 * Make a resolve item's new record (its route may refuse the status:
 * release_statuses); false when it cannot be changed (its result and audit
 * line are written then).
 */
static bool admin_bulk_encode(struct admin_bulk_call *c, struct admin_bulk_item *it)
{
    const struct config *conf = exchange_set_conf(c->env->set);
    struct record rec;

    if (record_decode(it->value, it->len, &rec) != 0) {
        admin_bulk_item_result(it, 500, STORE_OK, false); /* kept by admin_bulk_keep: decodes */
        return false;
    }
    if (admin_answer_released(&c->answer, conf, it->route)) {
        /* this record's route never records that status (release_statuses) */
        admin_bulk_item_result(it, 400, STORE_OK, false);
        return false;
    }
    it->encoded = admin_answer_record(&c->answer, &rec, conf, it->key, &it->encoded_len, NULL);
    if (it->encoded == NULL) {
        admin_bulk_item_result(it, 500, STORE_OK, false);
        return false;
    }
    return true;
}

/*
 * Send the page's changes in order while fewer than ADMIN_BULK_WRITES are
 * out and what they send stays within ADMIN_BULK_WRITE_BYTES (one at a
 * time when a single one is larger); once every change of the page
 * answered, the walk goes on. Each answer calls this again.
 */
static void admin_bulk_pump(struct admin_bulk_call *c)
{
    while (c->next < c->n_items && c->inflight < ADMIN_BULK_WRITES) {
        struct admin_bulk_item *it = &c->items[c->next];

        if (c->resolve && it->encoded == NULL && !admin_bulk_encode(c, it)) {
            c->next++;
            continue;
        }
        it->bytes = it->len + it->encoded_len;
        if (c->inflight > 0 && c->inflight_bytes + it->bytes > ADMIN_BULK_WRITE_BYTES)
            break;
        c->next++;
        c->inflight++;
        c->inflight_bytes += it->bytes;
        c->sent_bytes += it->bytes;
        /* both copy what they send: the item's buffers go now */
        if (c->resolve)
            store_replace_unchanged(c->env->store, it->key, it->value, it->len, it->encoded,
                                    it->encoded_len, admin_bulk_on_changed, it);
        else
            store_delete_if_unchanged(c->env->store, it->key, it->value, it->len,
                                      admin_bulk_on_changed, it);
        free(it->value);
        free(it->encoded);
        it->value = it->encoded = NULL;
    }
    if (c->inflight == 0 && c->next == c->n_items)
        admin_bulk_next(c);
}

/* Whether a record the walk found in the state asked for matches (store_list_keep). */
static int admin_bulk_id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, RECORD_ID_HEX_LEN);
}

/* Whether record_id (its first RECORD_ID_HEX_LEN bytes) is one record_ids names (all without). */
static bool admin_bulk_named(const struct admin_bulk_call *c, const char *record_id)
{
    return c->ids == NULL ||
           bsearch(record_id, c->ids, c->n_ids, sizeof(*c->ids), admin_bulk_id_cmp) != NULL;
}

/*
 * "record_ids": at most ADMIN_BULK_MAX_IDS record ids (32 lowercase hex)
 * that bound the change to the records a dry run listed, so that a record
 * held after the review (or grown past older_than_seconds) is never
 * changed unseen. 0, or -1 with why.
 */
static int admin_bulk_ids(struct admin_bulk_call *c, const json_t *ids, char *why, size_t len)
{
    size_t i;
    const json_t *id;

    if (ids == NULL)
        return 0;
    if (!json_is_array(ids) || json_array_size(ids) == 0 ||
        json_array_size(ids) > ADMIN_BULK_MAX_IDS) {
        snprintf(why, len, "\"record_ids\" must be an array of 1..%d record ids",
                 ADMIN_BULK_MAX_IDS);
        return -1;
    }
    c->ids = calloc(json_array_size(ids), sizeof(*c->ids));
    if (c->ids == NULL) {
        snprintf(why, len, "out of memory");
        return -1;
    }
    json_array_foreach(ids, i, id) {
        if (!json_is_string(id) ||
            !admin_record_id_ok(json_string_value(id), json_string_length(id))) {
            snprintf(why, len, "\"record_ids\"[%zu] is not a record id (32 lowercase hex)", i);
            return -1;
        }
        memcpy(c->ids[i], json_string_value(id), RECORD_ID_HEX_LEN + 1);
    }
    c->n_ids = json_array_size(ids);
    qsort(c->ids, c->n_ids, sizeof(*c->ids), admin_bulk_id_cmp);
    return 0;
}

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

/* A page of the walk: its matches into the answer, and (no dry run) its changes sent. */
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
    if (!c->dry_run && n > 0 && (c->items = calloc(n, sizeof(*c->items))) == NULL) {
        c->failed = "out of memory";
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        const char *brace = strrchr(records[i].key, '{');
        struct admin_bulk_item *it;
        char route[RECORD_ROUTE_MAX + 1];
        struct record rec;
        json_t *entry;

        if (brace == NULL || record_decode(records[i].value, records[i].len, &rec) != 0)
            continue; /* kept by admin_bulk_keep: decodes */
        if (!admin_bulk_named(c, brace + 1))
            continue; /* record_ids: not one the operator reviewed */
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
        if (c->dry_run)
            continue;
        it = &c->items[c->n_items];
        if ((it->value = malloc(records[i].len + 1)) == NULL) {
            json_object_set_new(entry, "result", json_string("error"));
            continue;
        }
        it->c = c;
        it->entry = entry;
        snprintf(it->key, sizeof(it->key), "%s", records[i].key);
        memcpy(it->record_id, brace + 1, RECORD_ID_HEX_LEN);
        memcpy(it->value, records[i].value, records[i].len);
        it->len = records[i].len;
        if (admin_record_route(&rec, it->route, sizeof(it->route)) == NULL)
            it->route[0] = '\0';
        c->n_items++;
    }
    admin_bulk_pump(c);
}

/*
 * The next page: at most ADMIN_BULK_PAGE records and what the call may
 * still match; a resolve's, only as many as the bytes the call may still
 * send hold of its answer (at least one).
 */
static void admin_bulk_page(struct admin_bulk_call *c)
{
    size_t room = c->limit - c->matched;

    if (room > ADMIN_BULK_PAGE)
        room = ADMIN_BULK_PAGE;
    if (c->resolve && !c->dry_run) {
        size_t each = ADMIN_BULK_RECORD_OVERHEAD + c->answer.body_len;
        struct evkeyval *h;
        size_t fit;

        TAILQ_FOREACH(h, &c->answer.headers, next)
            each += strlen(h->key) + strlen(h->value) + 6;
        fit = (ADMIN_BULK_CALL_BYTES - c->sent_bytes) / each;
        if (fit < room)
            room = fit > 0 ? fit : 1;
    }
    store_list(c->env->store, exchange_set_conf(c->env->set)->key_prefix, c->state,
               (unsigned)room, c->cursor[0] != '\0' ? c->cursor : NULL, admin_bulk_keep,
               admin_bulk_on_page, c);
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
    const json_t *route = json_object_get(doc, "route"), *older, *limit, *cursor, *before;
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
    c->as_of_ms = clock_now_ms();
    c->created_by_ms = (uint64_t)seconds * 1000 < c->as_of_ms
                           ? c->as_of_ms - (uint64_t)seconds * 1000 : 0;
    /* created_before_ms: a dry run's as_of_ms; a record claimed since was never reviewed */
    before = json_object_get(doc, "created_before_ms");
    if (before != NULL && (!json_is_integer(before) || json_integer_value(before) < 1)) {
        snprintf(why, len, "\"created_before_ms\" must be a time in ms since the epoch (a dry "
                 "run's as_of_ms): only records created before it");
        return -1;
    }
    if (before != NULL && (uint64_t)json_integer_value(before) - 1 < c->created_by_ms)
        c->created_by_ms = (uint64_t)json_integer_value(before) - 1;
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
    if (cursor != NULL && (!json_is_string(cursor) || json_string_length(cursor) >= STORE_LIST_CURSOR_MAX ||
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
        "limit", "cursor", "status", "headers", "body_base64", "record_ids",
        "created_before_ms", NULL,
    };
    const json_t *dry = json_object_get(doc, "dry_run"), *confirm;

    if (admin_json_members(doc, members, why, len) != 0 ||
        admin_bulk_state(c, json_object_get(doc, "state"), why, len) != 0 ||
        admin_bulk_filters(c, doc, why, len) != 0 ||
        admin_bulk_ids(c, json_object_get(doc, "record_ids"), why, len) != 0)
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
    if (!admin_auth_allowed(env, req, &c->actor,
                            c->dry_run ? CONFIG_RIGHT_READ
                                       : c->resolve ? CONFIG_RIGHT_RESOLVE : CONFIG_RIGHT_PURGE,
                            admin_bulk_request_action(c), NULL)) {
        admin_bulk_free(c);
        return;
    }
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
