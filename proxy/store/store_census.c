/*
 * store_census.c - one step of the census of held records (store.h,
 * store_census_step): one SCAN on one node (store_list.c's walk), then the
 * keys it found classified where they are by SCRIPT_CENSUS, which sends back
 * nine integers per batch (three counts, three created times, three times to
 * live) and never a record. A command of the script that Redis refuses (an
 * ACL user without +getrange: NOPERM) fails the script, and so the step:
 * never a batch counted as holding nothing. Without redis.cluster a batch is up to
 * STORE_CENSUS_BATCH keys in one script, so the step costs Redis one SCAN
 * and a few short scripts; with it every key is its own script (a script's
 * keys must share a slot, and each record's key has a slot of its own).
 */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "oom.h"

/* One step in flight: its SCAN, then its scripts. */
struct store_census_call {
    struct store *s;
    struct store_census_walk *w;
    store_census_cb *cb;
    void *arg;
    uint64_t now_ms;
    char match[STORE_WALK_MATCH_MAX];
    char next_scan[STORE_WALK_CURSOR_MAX];
    size_t pending;                 /* scripts not yet answered */
    uint64_t keys;                  /* keys sent to the scripts */
    struct store_held held[STORE_HELD_STATES]; /* what the step's scripts counted */
    const char *why;                /* the first failure (static), or NULL */
    enum store_status failed;       /* its status */
};

_Static_assert(STORE_CENSUS_CURSOR_MAX == STORE_WALK_CURSOR_MAX, "a walk's cursor is a SCAN's");

void store_census_init(struct store_census_walk *w)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->scan, sizeof(w->scan), "0");
}

/* Add a's counts to into: counts summed, the earliest created time and expiry kept. */
static void store_census_add(struct store_held *into, const struct store_held *a)
{
    into->records += a->records;
    if (a->oldest_created_ms != 0 &&
        (into->oldest_created_ms == 0 || a->oldest_created_ms < into->oldest_created_ms))
        into->oldest_created_ms = a->oldest_created_ms;
    if (a->soonest_expiry_ms != 0 &&
        (into->soonest_expiry_ms == 0 || a->soonest_expiry_ms < into->soonest_expiry_ms))
        into->soonest_expiry_ms = a->soonest_expiry_ms;
}

/* The step is over: its counts go into the walk when it succeeded, then cb. */
static void store_census_finish(struct store_census_call *c)
{
    struct store_census_walk *w = c->w;

    if (c->why != NULL) {
        c->cb(c->failed, c->why, c->arg);
        free(c);
        return;
    }
    for (int i = 0; i < STORE_HELD_STATES; i++)
        store_census_add(&w->held[i], &c->held[i]);
    w->keys += c->keys;
    if (strcmp(c->next_scan, "0") == 0) {
        w->node++;
        snprintf(w->scan, sizeof(w->scan), "0");
        w->done = w->node >= w->nodes;
    } else {
        memcpy(w->scan, c->next_scan, sizeof(w->scan));
    }
    c->cb(STORE_OK, NULL, c->arg);
    free(c);
}

/* Note the step's first failure; the others that follow it say nothing new. */
static void store_census_failed(struct store_census_call *c, enum store_status st, const char *why)
{
    if (c->why == NULL) {
        c->why = why;
        c->failed = st;
    }
}

/* A script's reply: [n1, n2, n3, created1, created2, created3, pttl1, pttl2, pttl3]. */
static void store_census_on_script(enum store_status st, const struct store_reply *r, void *arg)
{
    struct store_census_call *c = arg;
    bool ok = st == STORE_OK && r->type == STORE_ARR && r->n == 3 * STORE_HELD_STATES;

    for (size_t i = 0; ok && i < r->n; i++)
        ok = r->elem[i].type == STORE_INT && r->elem[i].integer >= (i < 6 ? 0 : -1);
    if (st == STORE_ERROR) {
        store_census_failed(c, st, "redis answered the census script with an error (NOPERM: "
                            "an ACL user without +scan +getrange, +evalsha or +pttl? the "
                            "redis line before says what Redis refused)");
    } else if (st != STORE_OK) {
        store_census_failed(c, st, "redis unavailable: the census could not read the records");
    } else if (!ok) {
        store_census_failed(c, STORE_ERROR,
                            "redis answered the census script with something else than counts");
    } else {
        for (int i = 0; i < STORE_HELD_STATES; i++) {
            long long ttl = r->elem[6 + i].integer;
            struct store_held h = {
                .records = (uint64_t)r->elem[i].integer,
                .oldest_created_ms = (uint64_t)r->elem[3 + i].integer,
                .soonest_expiry_ms = ttl >= 0 ? c->now_ms + (uint64_t)ttl : 0,
            };

            store_census_add(&c->held[i], &h);
        }
    }
    if (--c->pending == 0)
        store_census_finish(c);
}

/* SCRIPT_CENSUS over n keys (borrowed from the SCAN's reply), the step's clock in ARGV[1]. */
static void store_census_script(struct store_census_call *c, const struct store_reply *keys,
                                size_t n)
{
    struct store *s = c->s;
    const char *argv[3 + STORE_CENSUS_BATCH + 1];
    size_t argvlen[3 + STORE_CENSUS_BATCH + 1];
    char numkeys[16], now[24];

    snprintf(numkeys, sizeof(numkeys), "%zu", n);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)c->now_ms);
    argv[0] = "EVALSHA";
    argv[1] = s->script_sha[SCRIPT_CENSUS];
    argv[2] = numkeys;
    for (size_t i = 0; i < n; i++) {
        argv[3 + i] = keys[i].str;
        argvlen[3 + i] = keys[i].len;
    }
    argv[3 + n] = now;
    argvlen[0] = 7;
    argvlen[1] = strlen(argv[1]);
    argvlen[2] = strlen(numkeys);
    argvlen[3 + n] = strlen(now);
    c->pending++;
    c->keys += n;
    store_any(s, store_script_text(SCRIPT_CENSUS), 0, (int)(4 + n), argv, argvlen,
              store_census_on_script, c);
}

/* The step's SCAN: [next cursor, [keys]]; then the scripts over the keys it found. */
static void store_census_on_scan(enum store_status st, const struct store_reply *r, void *arg)
{
    struct store_census_call *c = arg;
    const struct store_reply *keys;
    size_t per, n;

    if (st != STORE_OK) {
        store_census_failed(c, st, st == STORE_ERROR
                                       ? "redis answered the census's SCAN with an error "
                                         "(NOPERM: an ACL user without +scan +getrange?)"
                                       : "redis unavailable: a node's keys could not be walked");
        store_census_finish(c);
        return;
    }
    if (store_walk_reply(r, c->next_scan, &keys) != 0) {
        store_census_failed(c, STORE_ERROR,
                            "redis answered SCAN with something else than a cursor and keys");
        store_census_finish(c);
        return;
    }
    n = keys != NULL ? keys->n : 0;
    for (size_t i = 0; i < n; i++) {
        if (keys->elem[i].type != STORE_STR) {
            store_census_failed(c, STORE_ERROR, "redis answered SCAN with a key not a string");
            store_census_finish(c);
            return;
        }
    }
    /* one slot per script with redis.cluster (store.h) */
    per = c->s->cluster != NULL ? 1 : STORE_CENSUS_BATCH;
    c->pending = 1; /* held until every script is sent: none can finish the step before */
    for (size_t i = 0; i < n; i += per)
        store_census_script(c, &keys->elem[i], n - i < per ? n - i : per);
    if (--c->pending == 0)
        store_census_finish(c);
}

/* The loop's turn after a step that has no node to walk: no slot map yet. */
static void store_census_on_no_map(evutil_socket_t fd, short what, void *arg)
{
    struct store_census_call *c = arg;

    (void)fd;
    (void)what;
    store_census_failed(c, STORE_UNAVAILABLE, "redis unavailable: no Redis Cluster slot map yet");
    store_census_finish(c);
}

void store_census_step(struct store *s, const char *prefix, struct store_census_walk *w,
                       uint64_t now_ms, unsigned count, store_census_cb *cb, void *arg)
{
    struct store_census_call *c = oom_check(calloc(1, sizeof(*c)), "a census step");
    const struct timeval now = { 0, 0 };

    c->s = s;
    c->w = w;
    c->cb = cb;
    c->arg = arg;
    c->now_ms = now_ms;
    store_walk_match(prefix, c->match);
    if (!w->started) {
        w->started = true;
        w->nodes = store_walk_nodes(s);
    }
    if (w->nodes == 0 || w->node >= w->nodes) {
        if (event_base_once(s->base, -1, EV_TIMEOUT, store_census_on_no_map, c, &now) != 0)
            oom_abort("a census step");
        return;
    }
    store_walk_scan(s, w->node, w->scan, c->match, count, store_census_on_scan, c);
}
