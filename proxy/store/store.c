/*
 * store.c - the record store's commands over one node connection
 * (store_conn.c): the compare-and-set scripts, the queue of commands that
 * wait for a connection's setup, and what each reply means (store_reply.c).
 *
 * Commands are sent only on a ready connection (setup done, ROLE master).
 * While a connection is being set up they wait in a queue, which the setup's
 * own deadline (redis.timeout) bounds: they are sent once it is ready, or
 * fail with STORE_UNAVAILABLE, unsent, when it fails. With no connection at
 * all (resolving, backoff) they fail at once. Sent commands are bounded by
 * the connection (redis.timeout; STORE_TIMEOUT), and a connection that
 * drops reports them STORE_LOST. Error replies are classified: the ones
 * that say "not the primary now" also drop the connection, which then
 * reconnects and checks the role again. A connection that is idle gets a
 * ROLE every STORE_HEALTH_MS (and, with redis.min_replicas, one as soon as
 * it is ready, and one every STORE_HEALTH_MS that no WAIT counted replicas
 * in, busy or not), so a stalled Redis, a demoted primary or a stalled
 * replica is noticed (readiness) without client traffic.
 *
 * WAIT (redis.min_replicas) counts the replicas that acknowledged every
 * earlier write of its own connection, so it is sent on the connection that
 * carried the write, and one WAIT covers every write before it: the
 * store_wait_replicas calls of one loop turn share one WAIT, sent at the end
 * of the turn (an event made active, which runs after the callbacks already
 * active), with its reply fanned out to each. One WAIT is in flight at a
 * time: calls made meanwhile share the next, so a command never waits
 * behind more than one blocked WAIT. A call that nobody waits on (now
 * false) starts no WAIT of its own for STORE_WAIT_LAZY_MS. A call whose
 * write's connection went down (or was replaced) before its WAIT went out
 * fails with STORE_LOST.
 *
 * With redis.sentinel the connection asks store_sentinel.c where the primary is
 * before every attempt. With redis.cluster each command goes to the
 * connection of the primary that owns its key's slot (store_cluster.c); a
 * MOVED or ASK reply, which proves the command did not run, sends it again
 * to the node named (ASKING first for ASK), at most STORE_MAX_REDIRECTS
 * times; a reply that never came is never resent. WAIT then goes out once
 * per connection that carried the writes, one at a time.
 */
#include "store_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/time.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "record.h"

/*
 * conn is ready: send the commands that waited for it, in order; a claim
 * or takeover among them fails unsent (STORE_UNAVAILABLE) when the store
 * has just followed a new primary (redis.reassert.grace), as one submitted
 * now would.
 */
static void store_on_node_ready(void *owner, struct store_conn *conn)
{
    struct store *s = owner;
    struct store_cmd *cmd, *next;
    bool grace = store_claims_held(s);

    for (cmd = TAILQ_FIRST(&s->queued); cmd != NULL; cmd = next) {
        next = TAILQ_NEXT(cmd, link);
        if (cmd->conn != conn)
            continue;
        TAILQ_REMOVE(&s->queued, cmd, link);
        if ((cmd->claim && grace) ||
            store_send(cmd, cmd->argc, (const char **)cmd->argv, cmd->argvlen) != 0)
            store_fail_later(cmd);
    }
}

/*
 * conn is gone (or its setup failed): the commands that waited for it
 * fail, never sent, and so do the WAITs not yet sent for its writes (a WAIT
 * on its next connection would not cover them). Their callbacks may submit
 * again: conn is not ready or setting up any more, so those fail from the
 * event loop.
 */
static void store_on_node_down(void *owner, struct store_conn *conn)
{
    struct store *s = owner;
    struct store_cmd_queue failed = TAILQ_HEAD_INITIALIZER(failed);
    struct store_waiter_list stale = TAILQ_HEAD_INITIALIZER(stale);
    struct store_cmd *cmd, *next;
    struct store_waiter *w, *wnext;

    if (conn == s->conn)
        s->health_in_flight = false;
    for (cmd = TAILQ_FIRST(&s->queued); cmd != NULL; cmd = next) {
        next = TAILQ_NEXT(cmd, link);
        if (cmd->conn == conn) {
            TAILQ_REMOVE(&s->queued, cmd, link);
            TAILQ_INSERT_TAIL(&failed, cmd, link);
        }
    }
    for (w = TAILQ_FIRST(&s->wait_next); w != NULL; w = wnext) {
        wnext = TAILQ_NEXT(w, link);
        if (w->conn == conn) {
            TAILQ_REMOVE(&s->wait_next, w, link);
            TAILQ_INSERT_TAIL(&stale, w, link);
        }
    }
    while (!TAILQ_EMPTY(&failed)) {
        cmd = TAILQ_FIRST(&failed);
        TAILQ_REMOVE(&failed, cmd, link);
        store_cmd_report(cmd, STORE_UNAVAILABLE, NULL);
        store_cmd_free(cmd);
    }
    store_waiters_report(&stale, STORE_LOST, 0);
}

/* ROLE on the connection (one at a time): its role and, with redis.min_replicas, its replicas. */
static void store_health_check(struct store *s)
{
    static const char *const argv[] = { "ROLE" };
    static const size_t argvlen[] = { 4 };

    if (s->conn == NULL || !store_conn_ready(s->conn) || s->health_in_flight)
        return;
    s->health_in_flight = true;
    struct store_cmd *cmd = store_cmd_new(s, REPLY_HEALTH, s);

    cmd->cb.raw = store_on_health_reply;
    store_submit(cmd, 1, (const char **)argv, argvlen);
}

/*
 * The connection is ready: on the primary of before, or on another one (a
 * failover followed, a node that came back empty)? The replication ID
 * tells; one that cannot be read (INFO refused) is taken for another
 * primary (fail closed). With redis.reassert, another primary gets the
 * journal first (store_reassert.c); with redis.url, it is also a failover
 * followed for the observer (redis.sentinel reports its own).
 */
static void store_follow_primary(struct store *s)
{
    const char *replid = store_conn_replid(s->conn);
    bool same = replid[0] != '\0' && strcmp(replid, s->primary_replid) == 0;
    bool seen = s->primary_seen;
    char addr[300] = "";

    s->primary_seen = true;
    snprintf(s->primary_replid, sizeof(s->primary_replid), "%s", replid);
    store_conn_ready_addr(s->conn, addr, sizeof(addr));
    if (!seen && store_reassert_on(s) && store_conn_promoted(s->conn))
        store_reassert_first(s, addr);
    if (!seen || (same && !store_reassert_incomplete(s)))
        return;
    if (store_reassert_on(s))
        store_reassert_replay(s, addr, same ? "the last put-back did not finish"
                              : replid[0] != '\0' ? "a new primary (another replication ID)"
                              : "reconnected, and INFO replication is refused: taken for a "
                                "new primary");
    if (same)
        return; /* the same primary: no failover to count */
    if (s->sentinel == NULL && s->failover_observer != NULL)
        s->failover_observer("", replid[0] != '\0' ? replid : addr, s->failover_arg);
}

/* The single connection's hooks (redis.url, redis.sentinel). */
static void store_on_conn_ready(void *owner)
{
    struct store *s = owner;

    store_follow_primary(s); /* its journal goes before what waited for the connection */
    store_on_node_ready(s, s->conn);
    /* perhaps another primary: its replicas are counted afresh, from now (not the next tick) */
    s->n_offsets = 0;
    if (s->cfg->redis_min_replicas > 0)
        store_health_check(s);
}

static void store_on_conn_down(void *owner)
{
    store_on_node_down(owner, ((struct store *)owner)->conn);
}

/* A Redis Cluster's map refreshed or redirected a command: tell the observer (metrics). */
static void store_on_cluster_event(void *owner, enum store_event ev)
{
    struct store *s = owner;

    if (s->event_observer != NULL)
        s->event_observer(ev, s->event_arg);
}

/*
 * An idle connection is checked with ROLE: a stalled Redis times out (not
 * ready without client traffic), a demoted primary is left. Idle for half
 * the period is enough: the last ROLE's own reply must not push the next one
 * to every other tick (store_count_replicas wants about one a second). With
 * redis.min_replicas a busy connection gets its ROLE too when no WAIT counted
 * the replicas over the last period: a queued inbox reads every
 * INBOX_TICK_MS without a WAIT, and readiness would keep its first count.
 */
static void store_on_health_tick(evutil_socket_t fd, short what, void *arg)
{
    struct store *s = arg;

    (void)fd;
    (void)what;
    /* a cluster's connections are checked by its map refreshes (store_cluster.c) */
    if (s->conn == NULL)
        return;
    store_reassert_prune(s);
    if (store_conn_idle_ms(s->conn) >= STORE_HEALTH_MS / 2 ||
        (s->cfg->redis_min_replicas > 0 &&
         clock_mono_ms() - s->wait_counted_ms >= STORE_HEALTH_MS))
        store_health_check(s);
}

/* ---- WAIT for replicas ----------------------------------------------------- */

/* The records' scripts' SHA1 for EVALSHA (their text is store_script.c's constants). */
static void store_scripts_build(struct store *s)
{
    for (int i = 0; i < SCRIPT_COUNT; i++)
        store_script_digest(store_script_text((enum store_record_script)i), s->script_sha[i]);
}

/* The data connection's locate hook (redis.sentinel): discovery answers it. */
static void store_on_conn_locate(void *owner, struct store_conn *c)
{
    struct store *s = owner;

    store_sentinel_locate(s->sentinel, c);
}

/* store_create ran out of memory after the name resolver and TLS context: free them and s. */
static struct store *store_create_failed(struct store *s, char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    if (s->dns != NULL)
        evdns_base_free(s->dns, 0);
    SSL_CTX_free(s->tls);
    free(s);
    return NULL;
}

/* A discovery named another primary than before: tell the observer (metrics). */
static void store_on_followed(const char *from, const char *to, void *arg)
{
    struct store *s = arg;

    if (s->failover_observer != NULL)
        s->failover_observer(from, to, s->failover_arg);
}

struct store *store_create(struct event_base *base, const struct config *cfg, char *err,
                           size_t errlen)
{
    struct timeval health = clock_ms_to_timeval(STORE_HEALTH_MS);
    struct store *s = calloc(1, sizeof(*s));
    bool sentinel = cfg->redis_sentinel_master != NULL;
    const struct store_node node = { cfg->redis_host, cfg->redis_port, cfg->redis_unix_path,
                                     STORE_NODE_DATA };
    const struct store_conn_hooks hooks = { store_on_conn_ready, store_on_conn_down, s,
                                            sentinel ? store_on_conn_locate : NULL };
    const struct store_cluster_hooks cluster_hooks = { store_on_node_ready, store_on_node_down,
                                                       store_on_cluster_event, s };
    bool cluster = cfg->redis_cluster.n > 0;
    unsigned char addr[16];

    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->base = base;
    s->cfg = cfg;
    s->auth = (struct store_auth){ cfg->redis_password, cfg->redis_sentinel_password, NULL };
    /* no replica seen yet: ready once a ROLE or WAIT counts enough of them */
    s->replicas_short = cfg->redis_min_replicas > 0;
    TAILQ_INIT(&s->queued);
    TAILQ_INIT(&s->failed);
    TAILQ_INIT(&s->spare);
    TAILQ_INIT(&s->wait_next);
    TAILQ_INIT(&s->wait_sent);
    TAILQ_INIT(&s->journal);
    event_assign(&s->failed_ev, base, -1, 0, store_on_failed, s);
    event_assign(&s->wait_ev, base, -1, 0, store_on_wait_turn, s);
    evtimer_assign(&s->wait_lazy_ev, base, store_on_wait_turn, s);
    event_assign(&s->health_ev, base, -1, EV_PERSIST, store_on_health_tick, s);
    store_scripts_build(s);
    if (cfg->redis_tls && (s->tls = store_tls_context(cfg, err, errlen)) == NULL) {
        free(s);
        return NULL;
    }
    /* sentinels, cluster nodes and the primaries they name may be host names too */
    if (sentinel || cluster || (cfg->redis_host != NULL &&
                                evutil_inet_pton(AF_INET, cfg->redis_host, addr) != 1 &&
                                evutil_inet_pton(AF_INET6, cfg->redis_host, addr) != 1))
        s->dns = store_dns_create(base);
    if (cluster) {
        s->cluster = store_cluster_create(base, cfg, &s->auth, s->dns, s->tls, &cluster_hooks);
        if (s->cluster == NULL)
            return store_create_failed(s, err, errlen);
        return s; /* it reads the slot map from the loop's first turn */
    }
    s->conn = store_conn_create(base, cfg, &s->auth, &node, s->dns, s->tls, &hooks);
    if (s->conn != NULL && sentinel &&
        (s->sentinel = store_sentinel_create(base, cfg, &s->auth, s->dns, s->tls, s->conn,
                                             store_on_followed, s)) == NULL) {
        store_conn_destroy(s->conn);
        s->conn = NULL;
    }
    if (s->conn == NULL)
        return store_create_failed(s, err, errlen);
    event_add(&s->health_ev, &health);
    store_conn_start(s->conn);
    return s;
}

void store_destroy(struct store *s)
{
    bool dns_pending;

    if (s == NULL)
        return;
    s->destroying = true;
    event_del(&s->health_ev);
    event_del(&s->failed_ev);
    event_del(&s->wait_ev);
    event_del(&s->wait_lazy_ev);
    /* the discovery first: it holds the data connection */
    dns_pending = store_sentinel_destroy(s->sentinel);
    s->sentinel = NULL;
    /* pending replies: STORE_LOST; what their callbacks submit lands in s->failed */
    dns_pending |= store_cluster_destroy(s->cluster);
    s->cluster = NULL;
    dns_pending |= store_conn_destroy(s->conn);
    s->conn = NULL;
    TAILQ_CONCAT(&s->failed, &s->queued, link); /* never sent: STORE_UNAVAILABLE */
    while (!TAILQ_EMPTY(&s->failed) || !TAILQ_EMPTY(&s->wait_next)) {
        store_on_failed(-1, 0, s);
        store_waiters_report(&s->wait_next, STORE_LOST, 0);
    }
    if (s->dns != NULL) {
        /*
         * A cancelled resolution's callback (which frees libevent's request)
         * runs from the loop: let it turn once before the resolver goes.
         */
        if (dns_pending)
            event_base_loop(s->base, EVLOOP_NONBLOCK);
        evdns_base_free(s->dns, 0);
    }
    SSL_CTX_free(s->tls);
    store_reassert_clear(s);
    while (!TAILQ_EMPTY(&s->spare)) {
        struct store_cmd *cmd = TAILQ_FIRST(&s->spare);
        TAILQ_REMOVE(&s->spare, cmd, link);
        free(cmd->saved);
        free(cmd);
    }
    config_unref(s->auth.held); /* after the connections, which read it */
    free(s);
}

void store_set_credentials(struct store *s, struct config *cfg)
{
    struct config *was = s->auth.held;

    s->auth = (struct store_auth){ cfg->redis_password, cfg->redis_sentinel_password,
                                   config_ref(cfg) };
    config_unref(was);
}

void store_set_claimless(struct store *s)
{
    s->claimless = true;
}

void store_set_observer(struct store *s, store_observer *fn, void *arg)
{
    s->observer = fn;
    s->observer_arg = arg;
}

bool store_ready(const struct store *s)
{
    if (s->cluster != NULL)
        return store_cluster_covered(s->cluster);
    return s->conn != NULL && store_conn_ready(s->conn);
}

const char *store_unready(const struct store *s)
{
    if (!store_ready(s))
        return "redis unreachable";
    /* a cluster counts each primary's replicas in its slot map, not in one ROLE or WAIT */
    if (s->cluster != NULL ? store_cluster_replicas_short(s->cluster) : s->replicas_short)
        return "too few replicas acknowledge writes (redis.min_replicas)";
    if (store_claims_held(s))
        return "putting back recent writes after a failover (redis.reassert.grace)";
    return NULL;
}

bool store_primary(struct store *s, char *address, size_t len)
{
    if (s->cluster != NULL) {
        /* many primaries: /metrics counts them in idempotency_proxy_redis_cluster_nodes */
        snprintf(address, len, "cluster");
        return store_cluster_covered(s->cluster);
    }
    return s->conn != NULL && store_conn_ready_addr(s->conn, address, len);
}

int store_primaries_ready(const struct store *s)
{
    return s->cluster != NULL ? (int)store_cluster_primaries_ready(s->cluster) : -1;
}

void store_set_event_observer(struct store *s, store_event_observer *fn, void *arg)
{
    s->event_observer = fn;
    s->event_arg = arg;
}

void store_set_failover_observer(struct store *s, store_failover_observer *fn, void *arg)
{
    s->failover_observer = fn;
    s->failover_arg = arg;
}
