/*
 * store_wait.c - WAIT for replicas (redis.min_replicas): the calls of one
 * loop turn share one WAIT, one in flight at a time (store.c's header), and
 * the replica lag an idle ROLE shows.
 */
#include "store_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "record.h"

/* Whether too few replicas acknowledge writes now (readiness), and since when. */
void store_replicas_short(struct store *s, bool is_short)
{
    if (is_short && !s->replicas_short)
        s->replicas_short_ms = clock_mono_ms();
    s->replicas_short = is_short;
}

/*
 * An idle primary's ROLE reply: "master", its replication offset, and its
 * online replicas as [ip, port, acknowledged offset]. With redis.min_replicas,
 * fewer replicas listed than that means every claim would be refused: not
 * ready. A listed replica counts while it lags by at most
 * STORE_REPLICA_LAG_MS (store_replica_lag, over the offsets of the last
 * ROLEs): a live one acknowledges every second, a connected but stalled one
 * stops; too many lagging means not ready, also without traffic. After a
 * shortfall (a WAIT's, or a ROLE's), only what a replica acknowledged since
 * counts it again. While the samples cannot tell yet (the first ROLE after a
 * reconnect, or the first after traffic), readiness stays as it was.
 */
static void store_count_replicas(struct store *s, const redisReply *role)
{
    unsigned need = s->cfg->redis_min_replicas, within = 0, lagging = 0;
    const redisReply *list;
    double now = clock_mono_ms();

    if (need == 0)
        return;
    if (role->elements < 3 || role->element[1]->type != REDIS_REPLY_INTEGER ||
        role->element[2]->type != REDIS_REPLY_ARRAY || role->element[2]->elements < need) {
        store_replicas_short(s, true);
        return;
    }
    list = role->element[2];
    if (s->n_offsets == STORE_OFFSET_SAMPLES)
        memmove(&s->offsets[0], &s->offsets[1], --s->n_offsets * sizeof(s->offsets[0]));
    s->offsets[s->n_offsets].at_ms = now;
    s->offsets[s->n_offsets++].offset = role->element[1]->integer;
    for (size_t i = 0; i < list->elements; i++) {
        const redisReply *r = list->element[i];
        long long ack = r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
                        r->element[2]->type == REDIS_REPLY_STRING
                        ? strtoll(r->element[2]->str, NULL, 10) : -1;

        switch (store_replica_lag(s->offsets, s->n_offsets, ack, now, STORE_REPLICA_LAG_MS,
                                  s->replicas_short_ms)) {
        case STORE_REPLICA_WITHIN:
            within++;
            break;
        case STORE_REPLICA_LAGGING:
            lagging++;
            break;
        case STORE_REPLICA_UNKNOWN:
            break;
        }
    }
    if (within >= need)
        store_replicas_short(s, false);
    else if (list->elements - lagging < need)
        store_replicas_short(s, true);
}

/* Report st and replicas to every waiter of list (emptied first: callbacks may add more). */
void store_waiters_report(struct store_waiter_list *list, enum store_status st,
                                 long long replicas)
{
    struct store_waiter_list done = TAILQ_HEAD_INITIALIZER(done);

    TAILQ_CONCAT(&done, list, link);
    while (!TAILQ_EMPTY(&done)) {
        struct store_waiter *w = TAILQ_FIRST(&done);
        TAILQ_REMOVE(&done, w, link);
        w->cb(st, replicas, w->arg);
        free(w);
    }
}

static void store_wait_answered(struct store *s, enum store_status st, long long replicas);

/* The WAIT's reply (REPLY_WAIT's cb.integer). arg: s. */
static void store_on_wait_reply(enum store_status st, long long replicas, void *arg)
{
    store_wait_answered(arg, st, replicas);
}

/*
 * The end of a loop turn: one WAIT for every call made since the last one
 * went out, on the connection their writes came on. A call whose write came
 * on another connection (dropped or replaced since) fails with STORE_LOST.
 */
void store_on_wait_turn(evutil_socket_t fd, short what, void *arg)
{
    struct store *s = arg;
    struct store_waiter_list stale = TAILQ_HEAD_INITIALIZER(stale);
    struct store_waiter *w, *next;
    struct store_conn *to = NULL;
    struct store_cmd *cmd;
    char n[16], ms[24];
    const char *argv[3] = { "WAIT", n, ms };
    size_t argvlen[3] = { 4, 0, 0 };

    (void)fd;
    (void)what;
    if (s->wait_in_flight)
        return; /* its answer starts the next one */
    /* every call waiting now goes out with this WAIT or fails, but another primary's */
    s->wait_now = false;
    event_del(&s->wait_lazy_ev);
    /* this WAIT goes to the first waiter's connection; another's (a cluster) waits its turn */
    for (w = TAILQ_FIRST(&s->wait_next); w != NULL; w = next) {
        next = TAILQ_NEXT(w, link);
        if (s->destroying || w->conn == NULL || !store_conn_ready(w->conn)) {
            TAILQ_REMOVE(&s->wait_next, w, link);
            TAILQ_INSERT_TAIL(&stale, w, link);
        } else if (to == NULL || w->conn == to) {
            to = w->conn;
            TAILQ_REMOVE(&s->wait_next, w, link);
            TAILQ_INSERT_TAIL(&s->wait_sent, w, link);
        }
    }
    if (to != NULL) {
        s->wait_in_flight = true;
        argvlen[1] = (size_t)snprintf(n, sizeof(n), "%u", s->cfg->redis_min_replicas);
        argvlen[2] = (size_t)snprintf(ms, sizeof(ms), "%llu",
                                      (unsigned long long)s->cfg->redis_replica_timeout_ms);
        cmd = store_cmd_new(s, REPLY_WAIT, s);
        cmd->cb.integer = store_on_wait_reply;
        cmd->conn = to;
        /* never queued for a later connection: that one's WAIT would not cover these writes */
        if (store_send(cmd, 3, argv, argvlen) != 0)
            store_fail_later(cmd);
    }
    store_waiters_report(&stale, STORE_LOST, 0);
}

/*
 * The WAIT in flight answered (or failed): fan it out, then start the next
 * one: at once for a call that wants it now or whose lazy delay ran out
 * meanwhile, else when the delay ends.
 */
static void store_wait_answered(struct store *s, enum store_status st, long long replicas)
{
    s->wait_in_flight = false;
    if (st == STORE_OK) {
        s->wait_counted_ms = clock_mono_ms();
        store_replicas_short(s, replicas < (long long)s->cfg->redis_min_replicas);
    }
    store_waiters_report(&s->wait_sent, st, replicas);
    if (!TAILQ_EMPTY(&s->wait_next) && !s->destroying &&
        (s->wait_now || !evtimer_pending(&s->wait_lazy_ev, NULL)))
        event_active(&s->wait_ev, EV_TIMEOUT, 0);
}

void store_wait_replicas(struct store *s, bool now, store_int_cb *cb, void *arg)
{
    struct store_waiter *w = calloc(1, sizeof(*w));
    struct timeval lazy = clock_ms_to_timeval(STORE_WAIT_LAZY_MS);

    if (w == NULL) {
        log_msg(LOG_ERROR, "redis: out of memory");
        abort();
    }
    w->cb = cb;
    w->arg = arg;
    w->conn = s->reply_conn;
    TAILQ_INSERT_TAIL(&s->wait_next, w, link);
    if (s->destroying)
        return;
    if (now) {
        s->wait_now = true;
        if (!s->wait_in_flight)
            event_active(&s->wait_ev, EV_TIMEOUT, 0);
    } else if (!evtimer_pending(&s->wait_lazy_ev, NULL)) {
        evtimer_add(&s->wait_lazy_ev, &lazy);
    }
}

void store_on_health_reply(enum store_status st, const redisReply *r, void *arg)
{
    struct store *s = arg;

    s->health_in_flight = false;
    if (st == STORE_OK)
        store_count_replicas(s, r);
}
