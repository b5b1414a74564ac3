/*
 * admin_list.c - GET /records[?state=outcome-unknown|claimed|resolved]
 * [&limit=N][&cursor=C]: the records an operator has to act on (or acted
 * on: resolved), paged; without state=, every held state.
 *
 * A page is the record store's (store_list, store.h): the records in the
 * states asked for, at most limit of them, from the cursor of the page
 * before; this file reads the query, decides which records are listed (a
 * claim only once its lease ran out) and writes each one's entry: its id,
 * route, state, creation time, TTL and, for a claim, its lease deadline.
 * The cursor is the store's (a place in the walk by record id, store_list.c);
 * its guarantee carries over: a record held for the whole walk is listed,
 * whatever happens to the others meanwhile; one that changes meanwhile may
 * or may not be, or twice. A page the store could not walk (NOPERM, Redis
 * unreachable) is a 503 with the store's reason, never an empty page.
 */
#include "admin_int.h"

#include <ctype.h>
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
#include "fingerprint.h"
#include "record_id.h"
#include "headers.h"
#include "record.h"
#include "store.h"

#define ADMIN_LIST_MAX 1000         /* entries per page at most */
#define ADMIN_LIST_DEFAULT 100      /* entries per page without limit= */

struct admin_list_call {
    struct http_req *req;
    const char *states;                 /* the record.h state letters listed (static) */
    const char *state_name;             /* as asked, or NULL: every held state */
};

/*
 * The states of state= (NULL: not given) as record.h letters: every held
 * state without it. NULL for a name that is none.
 */
static const char *admin_list_states(const char *name)
{
    static const char all[] = { RECORD_CLAIMED, RECORD_UNKNOWN, RECORD_RESOLVED, '\0' };
    static const char claimed[] = { RECORD_CLAIMED, '\0' }, unknown[] = { RECORD_UNKNOWN, '\0' },
                      resolved[] = { RECORD_RESOLVED, '\0' };

    if (name == NULL)
        return all;
    if (strcmp(name, "claimed") == 0)
        return claimed;
    if (strcmp(name, "outcome-unknown") == 0)
        return unknown;
    if (strcmp(name, "resolved") == 0)
        return resolved;
    return NULL;
}

/*
 * Whether a record the walk found in a state asked for is listed: it
 * decodes, and is held (a claim only once its lease ran out)
 * (store_list_keep).
 */
static bool admin_list_keep(const char *value, size_t len, void *arg)
{
    const struct admin_list_call *c = arg;
    struct record rec;
    enum admin_hold hold;

    if (record_decode(value, len, &rec) != 0 || strchr(c->states, (char)rec.state) == NULL)
        return false;
    hold = admin_hold_of(&rec, clock_now_ms());
    return hold == ADMIN_HOLD_CLAIM || hold == ADMIN_HOLD_UNKNOWN || hold == ADMIN_HOLD_RESOLVED;
}

/* A listed record's entry, with its TTL; NULL when it cannot be built. */
static json_t *admin_list_entry(const struct store_listed *l)
{
    const char *brace = strrchr(l->key, '{');
    const char *route;
    char route_buf[256];
    struct record rec;
    json_t *entry;

    if (brace == NULL || record_decode(l->value, l->len, &rec) != 0)
        return NULL;
    route = admin_record_route(&rec, route_buf, sizeof(route_buf));
    entry = json_pack("{s:s#, s:o, s:s, s:I, s:I}", "record_id", brace + 1,
                      (int)RECORD_ID_HEX_LEN, "route",
                      route != NULL && route[0] != '\0' ? json_string(route) : json_null(),
                      "state", admin_state_name(rec.state),
                      "created_ms", (json_int_t)rec.created_ms,
                      "ttl_ms", (json_int_t)l->ttl_ms);
    if (entry != NULL && rec.state == RECORD_CLAIMED)
        json_object_set_new(entry, "lease_deadline_ms", json_integer((json_int_t)rec.lease_deadline_ms));
    return entry;
}

/* The page (store_list_cb): its entries, and the cursor of the next one (null: the walk is over). */
static void admin_list_on_page(enum store_status st, const struct store_listed *records,
                               size_t n, const char *next, const char *why, void *arg)
{
    struct admin_list_call *c = arg;
    json_t *list, *doc = NULL;

    if (st != STORE_OK) {
        admin_reply_error(c->req, strcmp(why, "out of memory") == 0 ? 500 : 503, why);
        free(c);
        return;
    }
    list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++) {
        json_t *entry = admin_list_entry(&records[i]);

        if (entry != NULL)
            json_array_append_new(list, entry);
    }
    if (list != NULL)
        doc = json_pack("{s:o, s:o, s:o}", "state",
                        c->state_name != NULL ? json_string(c->state_name) : json_null(),
                        "records", list,
                        "next_cursor", next == NULL ? json_null() : json_string(next));
    admin_reply_json(c->req, doc != NULL ? 200 : 500, doc);
    free(c);
}

void admin_list(const struct admin_env *env, struct http_req *req)
{
    const struct evhttp_uri *uri = http_server_uri(req);
    const char *query = uri != NULL ? evhttp_uri_get_query(uri) : NULL;
    const char *state, *limit, *cursor;
    struct evkeyvalq params;
    struct admin_list_call *c = NULL;
    int n_state = 0, n_limit = 0, n_cursor = 0;
    unsigned n = ADMIN_LIST_DEFAULT;

    if (http_server_command(req) != EVHTTP_REQ_GET) {
        admin_reply_error(req, 405, "GET");
        return;
    }
    TAILQ_INIT(&params);
    if (query != NULL && evhttp_parse_query_str(query, &params) != 0) {
        admin_reply_error(req, 400, "expected [?state=outcome-unknown|claimed|resolved]"
                                    "[&limit=N][&cursor=C]");
        goto done;
    }
    state = header_find_all(&params, "state", &n_state);
    limit = header_find_all(&params, "limit", &n_limit);
    cursor = header_find_all(&params, "cursor", &n_cursor);
    if (n_state > 1 || n_limit > 1 || n_cursor > 1 ||
        (n_state == 1 && admin_list_states(state) == NULL)) {
        admin_reply_error(req, 400, "give state=outcome-unknown, claimed or resolved at most "
                                    "once (none: every held state), limit= and cursor= at most "
                                    "once");
        goto done;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        admin_reply_error(req, 500, "out of memory");
        goto done;
    }
    c->req = req;
    c->states = admin_list_states(n_state == 1 ? state : NULL);
    /* a static name: the query's strings are freed before the page comes */
    c->state_name = n_state == 0 ? NULL
                    : strcmp(state, "claimed") == 0 ? "claimed"
                    : strcmp(state, "resolved") == 0 ? "resolved" : "outcome-unknown";
    if (limit != NULL) {
        size_t digits = strspn(limit, "0123456789");
        unsigned long v = digits > 0 && digits <= 4 && limit[digits] == '\0'
                              ? strtoul(limit, NULL, 10) : 0;
        if (v < 1 || v > ADMIN_LIST_MAX) {
            admin_reply_error(req, 400, "limit= is a number of records, 1..1000");
            free(c);
            goto done;
        }
        n = (unsigned)v;
    }
    if (cursor != NULL && !store_list_cursor_valid(cursor)) {
        admin_reply_error(req, 400, "cursor= is a next_cursor this listing gave");
        free(c);
        goto done;
    }
    store_list(env->store, exchange_set_conf(env->set)->key_prefix, c->states, n, cursor,
               admin_list_keep, admin_list_on_page, c);
done:
    evhttp_clear_headers(&params);
}
