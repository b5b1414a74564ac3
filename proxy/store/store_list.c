/*
 * store_list.c - the listing of held records (store.h, store_list), page
 * by page, for the admin's GET /records?state=.
 *
 * A page walks the record keys with SCAN MATCH PREFIX:{<32 characters>},
 * node by node (the primary; with redis.cluster every primary in turn, in
 * the order of the lowest slot each owns: store_cluster_primary), and looks
 * at each key found with one script that sends back only the records in the
 * states asked for (SCRIPT_PEEK), so a finished record's body never leaves
 * Redis; the caller's keep decides which of those are listed. A page is
 * bounded: at most STORE_LIST_ROUNDS SCANs of STORE_LIST_COUNT_MIN..1000
 * keys each, and at most limit records. The cursor is "NODE-SCAN-SKIP": the
 * node's index, its SCAN cursor, and how many listed records of the batch
 * that SCAN cursor gives were on pages already (a batch that held more than
 * the page had room for goes on in the next page). SCAN's guarantee carries
 * over: a record held for the whole walk is listed; one that changes
 * meanwhile may or may not be, or twice.
 */
#include "store_int.h"

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
    unsigned skip;                      /* listed records of that batch on pages already */
    unsigned rounds;
    char match[STORE_WALK_MATCH_MAX];
    struct store_list_peek *page;       /* the page's records (value set), n_page of them */
    size_t n_page;
    struct store_list_peek *peeks;      /* the round's keys */
    size_t n_peeks, pending;
    char next_scan[STORE_WALK_CURSOR_MAX];
    bool failed;                        /* a look at a key failed: the page fails */
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
    char cursor[64];

    if (c->n_page > 0 && out == NULL) {
        store_list_fail(c, STORE_ERROR, "out of memory");
        return;
    }
    for (size_t i = 0; i < c->n_page; i++)
        out[i] = (struct store_listed){ c->page[i].key, c->page[i].value, c->page[i].len,
                                        c->page[i].ttl_ms };
    snprintf(cursor, sizeof(cursor), "%u-%s-%u", c->node, c->scan, c->skip);
    c->cb(STORE_OK, out, c->n_page, c->node >= c->nodes ? NULL : cursor, NULL, c->arg);
    free(out);
    store_list_free(c);
}

static void store_list_round(struct store_list_call *c);

/* Every key of the round was looked at: take what the page has room for, then go on. */
static void store_list_round_done(struct store_list_call *c)
{
    size_t room = c->limit - c->n_page, held = 0, taken = 0;

    if (c->failed) {
        store_list_fail(c, STORE_UNAVAILABLE, "redis unavailable: a record could not be read");
        return;
    }
    for (size_t i = 0; i < c->n_peeks; i++) {
        if (c->peeks[i].value == NULL)
            continue;
        if (held++ < c->skip)
            continue;
        if (taken == room)
            break;
        c->page[c->n_page++] = c->peeks[i];
        c->peeks[i].value = NULL;
        taken++;
    }
    store_list_peeks_free(c->peeks, c->n_peeks);
    c->peeks = NULL;
    c->n_peeks = 0;
    if (held > c->skip + taken) {
        /* the batch holds more than the page has room for: the next page starts it again */
        c->skip += (unsigned)taken;
        store_list_finish(c);
        return;
    }
    c->skip = 0;
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
        c->failed = true;
    } else if (r->type == STORE_ARR && r->n == 2 && r->elem[0].type == STORE_STR &&
               r->elem[1].type == STORE_INT && strrchr(p->key, '{') != NULL &&
               c->keep(r->elem[0].str, r->elem[0].len, c->arg)) {
        p->value = malloc(r->elem[0].len + 1);
        if (p->value == NULL) {
            c->failed = true;
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

/* A SCAN's reply: [next cursor, [keys]]. */
static void store_list_on_scan(enum store_status st, const struct store_reply *r, void *arg)
{
    struct store_list_call *c = arg;
    const struct store_reply *keys;

    if (st != STORE_OK) {
        store_list_fail(c, st, "redis unavailable: a node's keys could not be walked");
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
    if (c->n_peeks == 0) {
        store_list_round_done(c);
        return;
    }
    c->pending = c->n_peeks;
    for (size_t i = 0; i < c->n_peeks; i++) {
        struct store_list_peek *p = &c->peeks[i];

        p->c = c;
        if (keys->elem[i].type == STORE_STR && keys->elem[i].len < sizeof(p->key))
            memcpy(p->key, keys->elem[i].str, keys->elem[i].len + 1);
        /* every callback comes from the loop, after this loop is over (store.h) */
        store_list_peek(p);
    }
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

/* "NODE-SCAN-SKIP", three decimals, into c when c is not NULL; false when it is not one. */
static bool store_list_cursor_read(struct store_list_call *c, const char *cursor)
{
    size_t n1 = strspn(cursor, "0123456789"), n2, n3;

    if (n1 == 0 || n1 > 9 || cursor[n1] != '-')
        return false;
    n2 = strspn(cursor + n1 + 1, "0123456789");
    if (n2 == 0 || n2 >= STORE_WALK_CURSOR_MAX || cursor[n1 + 1 + n2] != '-')
        return false;
    n3 = strspn(cursor + n1 + 2 + n2, "0123456789");
    if (n3 == 0 || n3 > 9 || cursor[n1 + 2 + n2 + n3] != '\0')
        return false;
    if (c != NULL) {
        c->node = (unsigned)strtoull(cursor, NULL, 10);
        c->skip = (unsigned)strtoull(cursor + n1 + 2 + n2, NULL, 10);
        memcpy(c->scan, cursor + n1 + 1, n2);
        c->scan[n2] = '\0';
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
