/*
 * store_list.c - the listing of held records (store.h, store_list), page
 * by page, for the admin's GET /records?state= and POST /records/bulk.
 *
 * A page walks the record keys with SCAN MATCH PREFIX:{<32 characters>},
 * node by node (the primary; with redis.cluster every primary in turn, in
 * the order of the lowest slot each owns: store_cluster_primary), and looks
 * at each key found with one script that sends back only the records in the
 * states asked for (SCRIPT_PEEK), so a finished record's body never leaves
 * Redis; the caller's keep decides which of those are listed. A key whose
 * id is not 32 lowercase hex characters is not one the proxy wrote
 * (record_key_format) and is not looked at. A page is bounded: at most
 * STORE_LIST_ROUNDS SCANs of STORE_LIST_COUNT_MIN..1000 keys each, and at
 * most limit records.
 *
 * The records of one SCAN batch are taken in record-id order. A page that
 * ends at a batch's end has the cursor "NODE-SCAN-0": the node's index and
 * the SCAN cursor of the next batch. A page that ends inside a batch (it
 * held more than the page had room for) has "NODE-SCAN-ID-END": the SCAN
 * cursor of that batch, the id of the last record listed from it, and the
 * cursor that batch's SCAN answered. The next page sends that SCAN again;
 * when it ends no further than END, it covered no key the first one did
 * not (Redis moves a cursor by incrementing its bits reversed, so the
 * reversed values order cursors whatever the table's size: dictScan), and
 * the ids up to ID are passed over: each was in the batch looked at before
 * (or came meanwhile). When it ends further (keys were deleted: a purge, an
 * expiry, a shrink), the batch is listed whole again. Positions count ids,
 * never records or keys, so a record of the batch that is resolved, purged
 * or expires between pages moves nothing else. SCAN's guarantee carries
 * over: a record held for the whole walk is listed; one that changes
 * meanwhile may or may not be, or twice (so may one whose batch is listed
 * again).
 */
#include "store_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "oom.h"
#include "record_id.h"

#define STORE_LIST_ROUNDS 8         /* SCANs per page at most */
#define STORE_LIST_COUNT_MIN 100    /* keys per SCAN at least (its COUNT) */

struct store_list_call;

/* One key of a round, and what it gave: a copy of the record when it is listed, else NULL. */
struct store_list_peek {
    struct store_list_call *c;
    char key[RECORD_KEY_MAX];
    char id[RECORD_ID_HEX_LEN + 1]; /* the key's record id; "" when it is not one */
    char *value;
    size_t len;
    long long ttl_ms;
};

struct store_list_call {
    struct store *s;
    char states[9];                     /* the record.h state letters asked for */
    unsigned limit;                     /* records per page */
    store_list_keep *keep;
    store_list_cb *cb;
    void *arg;
    unsigned node, nodes;               /* where the walk is, of how many */
    char scan[STORE_WALK_CURSOR_MAX];   /* the node's SCAN cursor this round starts from */
    char after[RECORD_ID_HEX_LEN + 1];  /* the batch at scan was listed up to this id ("") */
    char after_end[STORE_WALK_CURSOR_MAX]; /* ... when its SCAN answered this cursor */
    unsigned rounds;
    char match[STORE_WALK_MATCH_MAX];
    struct store_list_peek *page;       /* the page's records (value set), n_page of them */
    size_t n_page;
    struct store_list_peek *peeks;      /* the round's keys */
    size_t n_peeks, pending;
    char next_scan[STORE_WALK_CURSOR_MAX];
    enum store_status failed;           /* a look at a key failed: the page fails */
};

/* Free the values of n peeks and the array. */
static void store_list_peeks_free(struct store_list_peek *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(p[i].value);
    free(p);
}

static void store_list_free(struct store_list_call *c)
{
    store_list_peeks_free(c->peeks, c->n_peeks);
    store_list_peeks_free(c->page, c->n_page);
    free(c);
}

/* Report the page's failure (why: static) and free c. */
static void store_list_fail(struct store_list_call *c, enum store_status st, const char *why)
{
    c->cb(st, NULL, 0, NULL, why, c->arg);
    store_list_free(c);
}

/* The page is complete: its records, and the cursor of the next one (NULL: the walk is over). */
static void store_list_finish(struct store_list_call *c)
{
    struct store_listed *out = c->n_page > 0 ? calloc(c->n_page, sizeof(*out)) : NULL;
    char cursor[STORE_LIST_CURSOR_MAX];

    _Static_assert(STORE_LIST_CURSOR_MAX >= 10 + 2 * STORE_WALK_CURSOR_MAX + RECORD_ID_HEX_LEN + 2,
                   "NODE-SCAN-ID-END fits");
    if (c->n_page > 0 && out == NULL) {
        store_list_fail(c, STORE_ERROR, "out of memory");
        return;
    }
    for (size_t i = 0; i < c->n_page; i++)
        out[i] = (struct store_listed){ c->page[i].key, c->page[i].value, c->page[i].len,
                                        c->page[i].ttl_ms };
    if (c->after[0] != '\0')
        snprintf(cursor, sizeof(cursor), "%u-%s-%s-%s", c->node, c->scan, c->after,
                 c->after_end);
    else
        snprintf(cursor, sizeof(cursor), "%u-%s-0", c->node, c->scan);
    c->cb(STORE_OK, out, c->n_page, c->node >= c->nodes ? NULL : cursor, NULL, c->arg);
    free(out);
    store_list_free(c);
}

static void store_list_round(struct store_list_call *c);

/* A SCAN cursor's place in a node's walk: its bits reversed (dictScan's order). */
static uint64_t store_list_scan_place(const char *cursor)
{
    uint64_t v = strtoull(cursor, NULL, 10), r = 0;

    for (int i = 0; i < 64; i++, v >>= 1)
        r = (r << 1) | (v & 1);
    return r;
}

/* Whether the SCAN that answered end covered no more than the one that answered before. */
static bool store_list_scan_within(const char *end, const char *before)
{
    /* "0" answered: the node's walk is over, the farthest place */
    if (strcmp(before, "0") == 0)
        return true;
    return strcmp(end, "0") != 0 && store_list_scan_place(end) <= store_list_scan_place(before);
}

/* qsort: the round's keys in record-id order ("" first: not looked at). */
static int store_list_peek_order(const void *a, const void *b)
{
    return strcmp(((const struct store_list_peek *)a)->id,
                  ((const struct store_list_peek *)b)->id);
}

/*
 * Every key of the round was looked at: take what the page has room for,
 * in record-id order, after the cursor's id when this is the batch it
 * names and its SCAN ended no further than before; then go on.
 */
static void store_list_round_done(struct store_list_call *c)
{
    size_t room = c->limit - c->n_page;
    bool skipping = c->after[0] != '\0' && store_list_scan_within(c->next_scan, c->after_end);
    bool more = false;
    char after[RECORD_ID_HEX_LEN + 1];

    if (c->failed != STORE_OK) {
        store_list_fail(c, c->failed, c->failed == STORE_ERROR
                        ? "redis answered the listing's script with an error (NOPERM: an ACL "
                          "user without +scan +getrange, +evalsha or +pttl? the redis line "
                          "of the proxy's log says what Redis refused)"
                        : "redis unavailable: a record could not be read");
        return;
    }
    if (c->n_peeks > 1) /* an empty batch has no array: qsort takes no NULL (C11 7.22.5) */
        qsort(c->peeks, c->n_peeks, sizeof(*c->peeks), store_list_peek_order);
    memcpy(after, c->after, sizeof(after));
    c->after[0] = '\0'; /* the cursor's id holds for its own batch only */
    for (size_t i = 0; i < c->n_peeks; i++) {
        struct store_list_peek *p = &c->peeks[i];

        if (p->value == NULL || (skipping && strcmp(p->id, after) <= 0))
            continue;
        if (room == 0) {
            more = true;
            break;
        }
        c->page[c->n_page++] = *p;
        p->value = NULL;
        room--;
    }
    store_list_peeks_free(c->peeks, c->n_peeks);
    c->peeks = NULL;
    c->n_peeks = 0;
    if (more) {
        /* the batch holds more than the page has room for: the next page goes on after the last */
        memcpy(c->after, c->page[c->n_page - 1].id, sizeof(c->after));
        memcpy(c->after_end, c->next_scan, sizeof(c->after_end));
        store_list_finish(c);
        return;
    }
    if (strcmp(c->next_scan, "0") == 0) {
        c->node++;
        snprintf(c->scan, sizeof(c->scan), "0");
    } else {
        memcpy(c->scan, c->next_scan, sizeof(c->scan));
    }
    store_list_round(c);
}

/*
 * A key's look (SCRIPT_PEEK): nil unless it holds a record in a state
 * asked for, else [record, PTTL]; kept when the caller's keep lists it.
 */
static void store_list_on_peek(enum store_status st, const struct store_reply *r, void *arg)
{
    struct store_list_peek *p = arg;
    struct store_list_call *c = p->c;

    if (st != STORE_OK) {
        if (c->failed == STORE_OK)
            c->failed = st;
    } else if (r->type == STORE_ARR && r->n == 2 && r->elem[0].type == STORE_STR &&
               r->elem[1].type == STORE_INT && c->keep(r->elem[0].str, r->elem[0].len, c->arg)) {
        p->value = malloc(r->elem[0].len + 1);
        if (p->value == NULL) {
            c->failed = STORE_ERROR;
        } else {
            memcpy(p->value, r->elem[0].str, r->elem[0].len + 1);
            p->len = r->elem[0].len;
            p->ttl_ms = r->elem[1].integer;
        }
    }
    if (--c->pending == 0)
        store_list_round_done(c);
}

/* Look at one key of the round (SCRIPT_PEEK with the states asked for). */
static void store_list_peek(struct store_list_peek *p)
{
    struct store *s = p->c->s;
    const char *argv[] = { "EVALSHA", s->script_sha[SCRIPT_PEEK], "1", p->key, p->c->states };
    const size_t argvlen[] = { 7, strlen(s->script_sha[SCRIPT_PEEK]), 1, strlen(p->key),
                               strlen(p->c->states) };

    store_any(s, store_script_text(SCRIPT_PEEK), 0, 5, argv, argvlen, store_list_on_peek, p);
}

/*
 * The record id of a key SCAN found (len bytes, "PREFIX:{ID}") into id
 * (RECORD_ID_HEX_LEN + 1 bytes): true when ID is 32 lowercase hex
 * characters, a record key the proxy writes (record_key_format).
 */
static bool store_list_key_id(const char *key, size_t len, char *id)
{
    const char *p = key + len - 1 - RECORD_ID_HEX_LEN;

    if (len < RECORD_ID_HEX_LEN + 3 || key[len - 1] != '}' || p[-1] != '{' ||
        strspn(p, "0123456789abcdef") < RECORD_ID_HEX_LEN)
        return false;
    memcpy(id, p, RECORD_ID_HEX_LEN);
    id[RECORD_ID_HEX_LEN] = '\0';
    return true;
}

int store_walk_reply(const struct store_reply *r, char *next, const struct store_reply **keys)
{
    if (r->type != STORE_ARR || r->n != 2 || r->elem[0].type != STORE_STR ||
        r->elem[0].len == 0 || r->elem[0].len >= STORE_WALK_CURSOR_MAX ||
        strspn(r->elem[0].str, "0123456789") != r->elem[0].len ||
        (r->elem[1].type != STORE_ARR && r->elem[1].type != STORE_NIL))
        return -1;
    memcpy(next, r->elem[0].str, r->elem[0].len + 1);
    *keys = r->elem[1].type == STORE_ARR ? &r->elem[1] : NULL;
    return 0;
}

/* A SCAN's reply: [next cursor, [keys]]; each record key of it looked at. */
static void store_list_on_scan(enum store_status st, const struct store_reply *r, void *arg)
{
    struct store_list_call *c = arg;
    const struct store_reply *keys;

    if (st != STORE_OK) {
        store_list_fail(c, st, st == STORE_ERROR
                               ? "redis answered the listing's SCAN with an error (NOPERM: an "
                                 "ACL user without +scan +getrange? the redis line of the "
                                 "proxy's log says what Redis refused)"
                               : "redis unavailable: a node's keys could not be walked");
        return;
    }
    if (store_walk_reply(r, c->next_scan, &keys) != 0) {
        store_list_fail(c, STORE_ERROR,
                        "redis answered SCAN with something else than a cursor and keys");
        return;
    }
    c->n_peeks = keys != NULL ? keys->n : 0;
    c->peeks = c->n_peeks > 0 ? calloc(c->n_peeks, sizeof(*c->peeks)) : NULL;
    if (c->n_peeks > 0 && c->peeks == NULL) {
        c->n_peeks = 0;
        store_list_fail(c, STORE_ERROR, "out of memory");
        return;
    }
    c->pending = 1; /* held until every look is sent: none can end the round before */
    for (size_t i = 0; i < c->n_peeks; i++) {
        struct store_list_peek *p = &c->peeks[i];
        const struct store_reply *k = &keys->elem[i];

        p->c = c;
        if (k->type != STORE_STR || k->len >= sizeof(p->key) ||
            !store_list_key_id(k->str, k->len, p->id))
            continue;
        memcpy(p->key, k->str, k->len + 1);
        c->pending++;
        /* every callback comes from the loop, after this loop is over (store.h) */
        store_list_peek(p);
    }
    if (--c->pending == 0)
        store_list_round_done(c);
}

void store_walk_scan(struct store *s, unsigned node, const char *cursor, const char *match,
                     unsigned count, store_reply_cb *cb, void *arg)
{
    char n[16];
    const char *argv[] = { "SCAN", cursor, "MATCH", match, "COUNT", n };
    size_t argvlen[6];
    struct store_cmd *cmd = store_cmd_new(s, REPLY_ANY, arg);
    unsigned nodes = 1;

    snprintf(n, sizeof(n), "%u", count);
    for (int i = 0; i < 6; i++)
        argvlen[i] = strlen(argv[i]);
    cmd->cb.any = cb;
    if (s->cluster == NULL && node == 0) {
        store_submit(cmd, 6, argv, argvlen);
        return;
    }
    /* a node's own keys: no key to route by, and no redirection to follow */
    cmd->conn = s->cluster != NULL && !s->destroying
                    ? store_cluster_primary(s->cluster, node, &nodes) : NULL;
    store_cmd_save(cmd, 6, argv, argvlen);
    store_dispatch(cmd);
}

static void store_list_round(struct store_list_call *c)
{
    unsigned count = c->limit < STORE_LIST_COUNT_MIN ? STORE_LIST_COUNT_MIN : c->limit;

    if (c->node >= c->nodes || c->rounds == STORE_LIST_ROUNDS || c->n_page >= c->limit) {
        store_list_finish(c);
        return;
    }
    c->rounds++;
    store_walk_scan(c->s, c->node, c->scan, c->match, count, store_list_on_scan, c);
}

/*
 * A next cursor (the file's header): "NODE-SCAN-0", or "NODE-SCAN-ID-END"
 * with ID 32 lowercase hex; into c when c is not NULL. False when it is
 * not one. The third part of an earlier release's cursor counted records
 * of the batch ("NODE-SCAN-N"): read as 0, nothing is passed over.
 */
static bool store_list_cursor_read(struct store_list_call *c, const char *cursor)
{
    const char *scan, *id = NULL, *end = NULL, *p = cursor;
    size_t n = strspn(p, "0123456789"), n_scan, n_end = 0;

    if (n == 0 || n > 9 || p[n] != '-')
        return false;
    scan = p += n + 1;
    n_scan = strspn(p, "0123456789");
    if (n_scan == 0 || n_scan >= STORE_WALK_CURSOR_MAX || p[n_scan] != '-')
        return false;
    p += n_scan + 1;
    n = strspn(p, "0123456789");
    if (n == 0 || n > 9 || p[n] != '\0') {
        if (strspn(p, "0123456789abcdef") != RECORD_ID_HEX_LEN || p[RECORD_ID_HEX_LEN] != '-')
            return false;
        id = p;
        end = p += RECORD_ID_HEX_LEN + 1;
        n_end = strspn(p, "0123456789");
        if (n_end == 0 || n_end >= STORE_WALK_CURSOR_MAX || p[n_end] != '\0')
            return false;
    }
    if (c != NULL) {
        c->node = (unsigned)strtoull(cursor, NULL, 10);
        memcpy(c->scan, scan, n_scan);
        c->scan[n_scan] = '\0';
        if (id != NULL) {
            memcpy(c->after, id, RECORD_ID_HEX_LEN);
            c->after[RECORD_ID_HEX_LEN] = '\0';
            memcpy(c->after_end, end, n_end);
            c->after_end[n_end] = '\0';
        }
    }
    return true;
}

bool store_list_cursor_valid(const char *cursor)
{
    return strcmp(cursor, "0") == 0 || store_list_cursor_read(NULL, cursor);
}

void store_walk_match(const char *prefix, char *match)
{
    size_t n = 0;

    _Static_assert(STORE_WALK_MATCH_MAX >= 2 * CONFIG_MAX_KEY_PREFIX + RECORD_ID_HEX_LEN + 4,
                   "an escaped prefix, :{, the id's ?s, } and the NUL fit");
    for (const char *p = prefix; *p != '\0' && n < 2 * CONFIG_MAX_KEY_PREFIX; p++) {
        if (strchr("*?[]\\", *p) != NULL)
            match[n++] = '\\';
        match[n++] = *p;
    }
    match[n++] = ':';
    match[n++] = '{';
    for (int i = 0; i < RECORD_ID_HEX_LEN; i++)
        match[n++] = '?';
    match[n++] = '}';
    match[n] = '\0';
}

unsigned store_walk_nodes(struct store *s)
{
    unsigned nodes = 1;

    if (s->cluster != NULL)
        (void)store_cluster_primary(s->cluster, 0, &nodes);
    return nodes;
}

/* The loop's turn after a listing that has no node to walk: no slot map yet. */
static void store_list_on_no_map(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    store_list_fail(arg, STORE_UNAVAILABLE, "redis unavailable: no Redis Cluster slot map yet");
}

void store_list(struct store *s, const char *prefix, const char *states, unsigned limit,
                const char *cursor, store_list_keep *keep, store_list_cb *cb, void *arg)
{
    struct store_list_call *c = oom_check(calloc(1, sizeof(*c)), "a listing of records");
    const struct timeval now = { 0, 0 };

    c->page = oom_check(calloc(limit > 0 ? limit : 1, sizeof(*c->page)), "a listing's page");
    snprintf(c->scan, sizeof(c->scan), "0");
    if (cursor != NULL && strcmp(cursor, "0") != 0)
        (void)store_list_cursor_read(c, cursor); /* checked by the caller: store_list_cursor_valid */
    c->s = s;
    snprintf(c->states, sizeof(c->states), "%s", states);
    c->limit = limit;
    c->keep = keep;
    c->cb = cb;
    c->arg = arg;
    c->nodes = store_walk_nodes(s);
    store_walk_match(prefix, c->match);
    if (c->nodes == 0) {
        if (event_base_once(s->base, -1, EV_TIMEOUT, store_list_on_no_map, c, &now) != 0)
            oom_abort("a listing of records");
        return;
    }
    store_list_round(c);
}
