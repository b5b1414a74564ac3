/*
 * admin_list.c - GET /records?state=outcome-unknown|claimed[&limit=N][&cursor=C]:
 * the records an operator has to act on, paged.
 *
 * A page walks the record keys with SCAN MATCH PREFIX:{<32 characters>}
 * (store_scan), node by node (the primary; with redis.cluster every primary
 * in turn), and looks at each key found with one script that sends back
 * only the records in the state asked for (store_record_peek), so a
 * finished record's body never leaves Redis. A page is bounded: at most
 * ADMIN_LIST_ROUNDS SCANs of ADMIN_LIST_COUNT_MIN..ADMIN_LIST_MAX keys each,
 * and at most limit entries. The cursor is "NODE-SCAN-SKIP": the node's
 * index, its SCAN cursor, and how many held records of the batch that SCAN
 * cursor gives were listed already (a batch that held more than the page
 * had room for goes on in the next page). SCAN's guarantee carries over: a
 * record held for the whole walk is listed; one that changes meanwhile may
 * or may not be, or twice.
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

#define ADMIN_LIST_MAX 1000         /* entries per page at most, and keys per SCAN */
#define ADMIN_LIST_DEFAULT 100      /* entries per page without limit= */
#define ADMIN_LIST_ROUNDS 8         /* SCANs per page at most */
#define ADMIN_LIST_COUNT_MIN 100    /* keys per SCAN at least (its COUNT) */
#define ADMIN_LIST_CURSOR_MAX 24    /* a SCAN cursor: a 64-bit decimal */

struct admin_list_call;

/* One key of a round, and the entry it gives (NULL: not held in the state asked for). */
struct admin_list_peek {
    struct admin_list_call *c;
    char key[RECORD_KEY_MAX];
    json_t *entry;
};

struct admin_list_call {
    struct http_req *req;
    const struct admin_env *env;
    enum record_state state;            /* RECORD_UNKNOWN or RECORD_CLAIMED */
    const char *state_name;             /* as asked: "outcome-unknown" or "claimed" */
    unsigned limit;                     /* entries per page */
    unsigned node, nodes;               /* where the walk is, of how many */
    char scan[ADMIN_LIST_CURSOR_MAX];   /* the node's SCAN cursor this round starts from */
    unsigned skip;                      /* held records of that batch listed already */
    unsigned rounds;
    char match[2 * CONFIG_MAX_KEY_PREFIX + RECORD_ID_HEX_LEN + 8];
    json_t *records;                    /* the page's entries */
    struct admin_list_peek *peeks;      /* the round's keys */
    size_t n_peeks, pending;
    char next_scan[ADMIN_LIST_CURSOR_MAX];
    bool failed;                        /* a look at a key failed: the page is 503 */
};

static void admin_list_free(struct admin_list_call *c)
{
    for (size_t i = 0; i < c->n_peeks; i++)
        json_decref(c->peeks[i].entry);
    free(c->peeks);
    json_decref(c->records);
    free(c);
}

static void admin_list_fail(struct admin_list_call *c, const char *why)
{
    admin_reply_error(c->req, 503, why);
    admin_list_free(c);
}

/* The page is complete: its entries, and the cursor of the next one (null: the walk is over). */
static void admin_list_finish(struct admin_list_call *c)
{
    char cursor[64];
    json_t *doc;

    snprintf(cursor, sizeof(cursor), "%u-%s-%u", c->node, c->scan, c->skip);
    doc = json_pack("{s:s, s:O, s:o}", "state", c->state_name, "records", c->records,
                    "next_cursor", c->node >= c->nodes ? json_null() : json_string(cursor));
    admin_reply_json(c->req, doc != NULL ? 200 : 500, doc);
    admin_list_free(c);
}

static void admin_list_round(struct admin_list_call *c);

/*
 * A key's look: the entry of a record in the state asked for (a claim only
 * once its lease ran out), with its TTL; NULL otherwise.
 */
static json_t *admin_list_entry(const struct admin_list_call *c, const char *key,
                                const struct store_reply *r)
{
    const char *brace = strrchr(key, '{');
    const char *route;
    char route_buf[256];
    struct record rec;
    json_t *entry;

    if (r->type != STORE_ARR || r->n != 2 || r->elem[0].type != STORE_STR ||
        r->elem[1].type != STORE_INT || brace == NULL)
        return NULL;
    if (record_decode(r->elem[0].str, r->elem[0].len, &rec) != 0 || rec.state != c->state ||
        (rec.state == RECORD_CLAIMED && clock_now_ms() < rec.lease_deadline_ms))
        return NULL;
    route = admin_record_route(&rec, route_buf, sizeof(route_buf));
    entry = json_pack("{s:s#, s:o, s:s, s:I, s:I}", "record_id", brace + 1,
                      (int)RECORD_ID_HEX_LEN, "route",
                      route != NULL && route[0] != '\0' ? json_string(route) : json_null(),
                      "state", c->state_name, "created_ms", (json_int_t)rec.created_ms,
                      "ttl_ms", (json_int_t)r->elem[1].integer);
    if (entry != NULL && rec.state == RECORD_CLAIMED)
        json_object_set_new(entry, "lease_deadline_ms", json_integer((json_int_t)rec.lease_deadline_ms));
    return entry;
}

/* Every key of the round was looked at: take what the page has room for, then go on. */
static void admin_list_round_done(struct admin_list_call *c)
{
    size_t room = c->limit - json_array_size(c->records), held = 0, taken = 0;

    if (c->failed) {
        admin_list_fail(c, "redis unavailable: a record could not be read");
        return;
    }
    for (size_t i = 0; i < c->n_peeks; i++) {
        if (c->peeks[i].entry == NULL)
            continue;
        if (held++ < c->skip)
            continue;
        if (taken == room)
            break;
        json_array_append(c->records, c->peeks[i].entry);
        taken++;
    }
    for (size_t i = 0; i < c->n_peeks; i++)
        json_decref(c->peeks[i].entry);
    free(c->peeks);
    c->peeks = NULL;
    c->n_peeks = 0;
    if (held > c->skip + taken) {
        /* the batch holds more than the page has room for: the next page starts it again */
        c->skip += (unsigned)taken;
        admin_list_finish(c);
        return;
    }
    c->skip = 0;
    if (strcmp(c->next_scan, "0") == 0) {
        c->node++;
        snprintf(c->scan, sizeof(c->scan), "0");
    } else {
        memcpy(c->scan, c->next_scan, sizeof(c->scan));
    }
    admin_list_round(c);
}

static void admin_list_on_peek(enum store_status st, const struct store_reply *r, void *arg)
{
    struct admin_list_peek *p = arg;
    struct admin_list_call *c = p->c;

    if (st != STORE_OK)
        c->failed = true;
    else
        p->entry = admin_list_entry(c, p->key, r);
    if (--c->pending == 0)
        admin_list_round_done(c);
}

/* A SCAN's reply: [next cursor, [keys]]. */
static void admin_list_on_scan(enum store_status st, const struct store_reply *r, void *arg)
{
    struct admin_list_call *c = arg;
    const struct store_reply *keys;

    if (st != STORE_OK) {
        admin_list_fail(c, "redis unavailable: a node's keys could not be walked");
        return;
    }
    if (r->type != STORE_ARR || r->n != 2 || r->elem[0].type != STORE_STR ||
        r->elem[0].len == 0 || r->elem[0].len >= ADMIN_LIST_CURSOR_MAX ||
        strspn(r->elem[0].str, "0123456789") != r->elem[0].len ||
        (r->elem[1].type != STORE_ARR && r->elem[1].type != STORE_NIL)) {
        admin_list_fail(c, "redis answered SCAN with something else than a cursor and keys");
        return;
    }
    memcpy(c->next_scan, r->elem[0].str, r->elem[0].len + 1);
    keys = &r->elem[1];
    c->n_peeks = keys->type == STORE_ARR ? keys->n : 0;
    c->peeks = c->n_peeks > 0 ? calloc(c->n_peeks, sizeof(*c->peeks)) : NULL;
    if (c->n_peeks > 0 && c->peeks == NULL) {
        c->n_peeks = 0;
        admin_reply_error(c->req, 500, "out of memory");
        admin_list_free(c);
        return;
    }
    if (c->n_peeks == 0) {
        admin_list_round_done(c);
        return;
    }
    c->pending = c->n_peeks;
    for (size_t i = 0; i < c->n_peeks; i++) {
        struct admin_list_peek *p = &c->peeks[i];

        p->c = c;
        if (keys->elem[i].type == STORE_STR && keys->elem[i].len < sizeof(p->key))
            memcpy(p->key, keys->elem[i].str, keys->elem[i].len + 1);
        /* every callback comes from the loop, after this loop is over (store.h) */
        store_record_peek(c->env->set->store, p->key, (char)c->state, admin_list_on_peek,
                          p);
    }
}

static void admin_list_round(struct admin_list_call *c)
{
    unsigned count = c->limit < ADMIN_LIST_COUNT_MIN ? ADMIN_LIST_COUNT_MIN : c->limit;

    if (c->node >= c->nodes || c->rounds == ADMIN_LIST_ROUNDS ||
        json_array_size(c->records) >= c->limit) {
        admin_list_finish(c);
        return;
    }
    c->rounds++;
    store_scan(c->env->set->store, c->node, c->scan, c->match, count, admin_list_on_scan, c);
}

/* "NODE-SCAN-SKIP", three decimals; false when cursor is not one the listing gave. */
static bool admin_list_cursor(struct admin_list_call *c, const char *cursor)
{
    size_t n1 = strspn(cursor, "0123456789"), n2, n3;
    unsigned long long node, skip;

    if (n1 == 0 || n1 > 9 || cursor[n1] != '-')
        return false;
    n2 = strspn(cursor + n1 + 1, "0123456789");
    if (n2 == 0 || n2 >= ADMIN_LIST_CURSOR_MAX || cursor[n1 + 1 + n2] != '-')
        return false;
    n3 = strspn(cursor + n1 + 2 + n2, "0123456789");
    if (n3 == 0 || n3 > 9 || cursor[n1 + 2 + n2 + n3] != '\0')
        return false;
    node = strtoull(cursor, NULL, 10);
    skip = strtoull(cursor + n1 + 2 + n2, NULL, 10);
    memcpy(c->scan, cursor + n1 + 1, n2);
    c->scan[n2] = '\0';
    c->node = (unsigned)node;
    c->skip = (unsigned)skip;
    return true;
}

/* SCAN MATCH's pattern of every record key: the prefix with glob characters escaped. */
static void admin_list_match(struct admin_list_call *c, const char *prefix)
{
    size_t n = 0;

    for (const char *p = prefix; *p != '\0'; p++) {
        if (strchr("*?[]\\", *p) != NULL)
            c->match[n++] = '\\';
        c->match[n++] = *p;
    }
    c->match[n++] = ':';
    c->match[n++] = '{';
    for (int i = 0; i < RECORD_ID_HEX_LEN; i++)
        c->match[n++] = '?';
    c->match[n++] = '}';
    c->match[n] = '\0';
}

void admin_list(const struct admin_env *env, struct http_req *req)
{
    const struct evhttp_uri *uri = http_server_uri(req);
    const char *query = uri != NULL ? evhttp_uri_get_query(uri) : NULL;
    const char *state, *limit, *cursor;
    struct evkeyvalq params;
    struct admin_list_call *c = NULL;
    int n_state = 0, n_limit = 0, n_cursor = 0;

    if (http_server_command(req) != EVHTTP_REQ_GET) {
        admin_reply_error(req, 405, "GET");
        return;
    }
    TAILQ_INIT(&params);
    if (query == NULL || evhttp_parse_query_str(query, &params) != 0) {
        admin_reply_error(req, 400, "expected ?state=outcome-unknown|claimed[&limit=N]"
                                    "[&cursor=C]");
        goto done;
    }
    state = header_find_all(&params, "state", &n_state);
    limit = header_find_all(&params, "limit", &n_limit);
    cursor = header_find_all(&params, "cursor", &n_cursor);
    if (n_state != 1 || n_limit > 1 || n_cursor > 1 ||
        (strcmp(state, "outcome-unknown") != 0 && strcmp(state, "claimed") != 0)) {
        admin_reply_error(req, 400, "give state=outcome-unknown or state=claimed once "
                                    "(limit= and cursor= at most once)");
        goto done;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || (c->records = json_array()) == NULL) {
        free(c);
        admin_reply_error(req, 500, "out of memory");
        goto done;
    }
    c->req = req;
    c->env = env;
    c->state = strcmp(state, "claimed") == 0 ? RECORD_CLAIMED : RECORD_UNKNOWN;
    c->state_name = c->state == RECORD_CLAIMED ? "claimed" : "outcome-unknown";
    c->limit = ADMIN_LIST_DEFAULT;
    snprintf(c->scan, sizeof(c->scan), "0");
    if (limit != NULL) {
        size_t digits = strspn(limit, "0123456789");
        unsigned long v = digits > 0 && digits <= 4 && limit[digits] == '\0'
                              ? strtoul(limit, NULL, 10) : 0;
        if (v < 1 || v > ADMIN_LIST_MAX) {
            admin_reply_error(req, 400, "limit= is a number of records, 1..1000");
            admin_list_free(c);
            goto done;
        }
        c->limit = (unsigned)v;
    }
    if (cursor != NULL && strcmp(cursor, "0") != 0 && !admin_list_cursor(c, cursor)) {
        admin_reply_error(req, 400, "cursor= is a next_cursor this listing gave");
        admin_list_free(c);
        goto done;
    }
    c->nodes = store_scan_nodes(env->set->store);
    if (c->nodes == 0) {
        admin_list_fail(c, "redis unavailable: no Redis Cluster slot map yet");
        goto done;
    }
    admin_list_match(c, env->set->conf->key_prefix);
    admin_list_round(c);
done:
    evhttp_clear_headers(&params);
}
