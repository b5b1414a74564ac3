/*
 * store_cluster.c - the Redis Cluster slot map (store_conn_int.h; docs/redis.md#redis-cluster): which primary owns each of the 16384 slots, one data
 * connection per primary, and what MOVED and ASK change.
 *
 * The map is read with CLUSTER SHARDS (CLUSTER SLOTS where that is unknown,
 * Redis < 7.0, or refused by the ACL) on a
 * ready primary's connection, taken in turn (so the refresh also exercises
 * each idle connection: a stalled node times out), or, while none is ready,
 * on a probe: a one-attempt connection to a seed of redis.cluster.addresses
 * or a node of the last map, in turn. It is read again every second, every
 * 200 ms while some slot has no ready primary (a failover in progress), and
 * at once after MOVED or a lost primary. A map that cannot be read keeps
 * the last one: commands to a slot whose primary is gone fail (fail closed).
 * Readiness: every slot's primary has a ready connection and, with
 * redis.min_replicas, that many replicas the map calls online.
 *
 * A node that the map stops naming as a primary (a failed-over primary, now
 * a replica) loses its connection: it is not ready from that moment on
 * (store_conn_retire: a write's reply still on its way, even in the same
 * loop pass, cannot have a WAIT sent on it or be waited on), the store hears
 * down (its queued commands fail unsent, its unsent WAITs fail), then it is
 * closed from the loop, never from inside a reply callback (its pending
 * replies are lost).
 */
#include "store_conn_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "clock.h"
#include "config.h"
#include "log.h"

#define CLUSTER_MAX_NODES 256      /* primaries of the last map and redirection targets since */
#define CLUSTER_REFRESH_MS 1000    /* the map is read again this often */
#define CLUSTER_UNCOVERED_MS 200   /* ... or this often while a slot has no ready primary */
#define CLUSTER_SOON_MS 20         /* after MOVED or a lost primary */

struct store_cluster;

struct cluster_node {
    struct store_cluster *cl;
    char host[256];
    uint16_t port;
    struct store_conn *conn;    /* NULL: not opened, or closed (not a primary now) */
    bool master;                /* the last map (or a MOVED) names it a primary */
    unsigned replicas;          /* its replicas the last map says are online */
};

struct store_cluster {
    struct event_base *base;
    const struct config *cfg;
    const struct store_auth *auth;  /* borrowed */
    struct evdns_base *dns;
    SSL_CTX *tls;
    struct store_cluster_hooks hooks;
    struct cluster_node *nodes[CLUSTER_MAX_NODES];
    size_t n_nodes;
    struct cluster_node *slot[STORE_CLUSTER_SLOTS];  /* NULL: no primary known */
    int16_t next[STORE_CLUSTER_SLOTS];              /* the map being read: node index or -1 */
    bool have_map;
    _Atomic bool covered;
    _Atomic unsigned primaries_ready;
    _Atomic bool replicas_short; /* a primary with slots has < redis.min_replicas replicas */
    bool destroying;
    bool use_slots;             /* CLUSTER SHARDS is unknown (Redis < 7.0): CLUSTER SLOTS */
    bool in_flight;             /* a map is being read */
    bool again;                 /* read it again as soon as this one is done */
    size_t turn;                /* which ready primary reads the map next */
    struct store_conn *probe;   /* while no primary is ready: a seed or known node */
    bool probe_asked;           /* the map was asked on the probe: its reply ends the read */
    size_t probe_turn;          /* which candidate the next probe goes to */
    struct event refresh_ev;
    struct event reap_ev;       /* closes the connections in dead, from the loop */
    struct store_conn **dead;
    size_t n_dead, cap_dead;
    bool dns_pending;           /* a closed connection cancelled a name resolution */
};

static void cluster_refresh(struct store_cluster *cl);

/* ---- readiness ----------------------------------------------------------- */

static bool cluster_node_ready(const struct cluster_node *n)
{
    return n != NULL && n->conn != NULL && store_conn_ready(n->conn);
}

/*
 * Recount the ready primaries, whether every slot has one, and whether
 * every primary that owns slots has redis.min_replicas online replicas (for
 * other threads).
 */
static void cluster_update(struct store_cluster *cl)
{
    unsigned ready = 0;
    bool covered = cl->have_map, is_short = false;

    for (size_t i = 0; i < cl->n_nodes; i++)
        if (cl->nodes[i]->master && cluster_node_ready(cl->nodes[i]))
            ready++;
    for (size_t s = 0; covered && s < STORE_CLUSTER_SLOTS; s++) {
        covered = cluster_node_ready(cl->slot[s]);
        if (covered && cl->slot[s]->replicas < cl->cfg->redis_min_replicas)
            is_short = true;
    }
    cl->primaries_ready = ready;
    cl->covered = covered;
    cl->replicas_short = is_short;
}

/* ---- connections ------------------------------------------------------------ */

/* Close c from the loop (not from inside one of its own callbacks). */
static void cluster_reap_later(struct store_cluster *cl, struct store_conn *c)
{
    if (cl->n_dead == cl->cap_dead) {
        size_t cap = cl->cap_dead ? cl->cap_dead * 2 : 8;
        struct store_conn **d = realloc(cl->dead, cap * sizeof(*d));

        if (d == NULL) {
            log_msg(LOG_ERROR, "redis: out of memory");
            abort();
        }
        cl->dead = d;
        cl->cap_dead = cap;
    }
    cl->dead[cl->n_dead++] = c;
    if (!cl->destroying)
        event_active(&cl->reap_ev, EV_TIMEOUT, 0);
}

static void cluster_on_reap(evutil_socket_t fd, short what, void *arg)
{
    struct store_cluster *cl = arg;

    (void)fd;
    (void)what;
    while (cl->n_dead > 0)
        cl->dns_pending |= store_conn_destroy(cl->dead[--cl->n_dead]);
}

static void cluster_on_node_ready(void *owner)
{
    struct cluster_node *n = owner;

    if (n->conn == NULL)
        return; /* closed (cluster_close), waiting to be freed */
    cluster_update(n->cl);
    n->cl->hooks.ready(n->cl->hooks.owner, n->conn);
}

/* A primary's connection went down: it may have failed over; read the map soon. */
static void cluster_on_node_down(void *owner)
{
    struct cluster_node *n = owner;
    struct store_cluster *cl = n->cl;

    if (n->conn == NULL)
        return; /* closed: the store heard down then */
    cluster_update(cl);
    cl->hooks.down(cl->hooks.owner, n->conn);
    cl->again = true;
    cluster_refresh(cl);
}

/* A data connection to n, started now (a command may be about to wait for it). */
static void cluster_open(struct cluster_node *n)
{
    const struct store_node where = { n->host, n->port, NULL, STORE_NODE_DATA };
    const struct store_conn_hooks hooks = { cluster_on_node_ready, cluster_on_node_down, n, NULL };

    if (n->conn != NULL)
        return;
    n->conn = store_conn_create(n->cl->base, n->cl->cfg, n->cl->auth, &where, n->cl->dns,
                                n->cl->tls, &hooks);
    if (n->conn != NULL)
        store_conn_start_now(n->conn);
}

/* n is not a primary any more: the store hears down, then the connection is closed. */
static void cluster_close(struct cluster_node *n)
{
    struct store_conn *c = n->conn;

    if (c == NULL)
        return;
    log_msg(LOG_INFO, "redis %s: not a primary in the cluster's slot map any more; closing",
            store_conn_addr(c));
    n->conn = NULL;
    store_conn_retire(c);
    cluster_update(n->cl);
    n->cl->hooks.down(n->cl->hooks.owner, c);
    cluster_reap_later(n->cl, c);
}

/* The node at host:port, added when new; NULL when the table is full. */
static struct cluster_node *cluster_node(struct store_cluster *cl, const char *host, uint16_t port)
{
    struct cluster_node *n;

    for (size_t i = 0; i < cl->n_nodes; i++)
        if (cl->nodes[i]->port == port && strcmp(cl->nodes[i]->host, host) == 0)
            return cl->nodes[i];
    if (cl->n_nodes == CLUSTER_MAX_NODES || strlen(host) >= sizeof(n->host))
        return NULL;
    n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    n->cl = cl;
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    cl->nodes[cl->n_nodes++] = n;
    return n;
}

/* ---- reading the map --------------------------------------------------------- */

/* The string value of field name in a RESP2 key/value array r, or NULL. */
static const redisReply *cluster_field(const redisReply *r, const char *name)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, name) == 0)
            return r->element[i + 1];
    return NULL;
}

/* Slots from..to (inclusive) go to the primary at host:port, with replicas online, in cl->next. */
static bool cluster_assign(struct store_cluster *cl, const char *host, long long port,
                           long long from, long long to, unsigned replicas)
{
    struct cluster_node *n;

    size_t i = 0;

    /* to == from - 1: a primary without slots (it may be importing some) */
    if (host == NULL || host[0] == '\0' || strcmp(host, "?") == 0 || port <= 0 ||
        port > 65535 || from < 0 || to < from - 1 || to >= STORE_CLUSTER_SLOTS)
        return false;
    n = cluster_node(cl, host, (uint16_t)port);
    if (n == NULL)
        return false;
    n->master = true;
    n->replicas = replicas;
    while (cl->nodes[i] != n)
        i++;
    for (long long s = from; s <= to; s++)
        cl->next[s] = (int16_t)i;
    return true;
}

/*
 * One shard of CLUSTER SHARDS: "slots" (pairs of integers) and "nodes", of
 * which the one with role master (online, if there is a choice) owns them.
 */
static bool cluster_read_shard(struct store_cluster *cl, const redisReply *shard)
{
    const redisReply *slots = cluster_field(shard, "slots"), *nodes = cluster_field(shard, "nodes");
    const redisReply *primary = NULL, *primary_health = NULL;
    unsigned replicas = 0;

    if (slots == NULL || nodes == NULL || slots->type != REDIS_REPLY_ARRAY ||
        nodes->type != REDIS_REPLY_ARRAY || slots->elements % 2 != 0)
        return false;
    for (size_t i = 0; i < nodes->elements; i++) {
        const redisReply *role = cluster_field(nodes->element[i], "role");
        const redisReply *health = cluster_field(nodes->element[i], "health");

        if (role == NULL || role->type != REDIS_REPLY_STRING)
            continue;
        if (strcmp(role->str, "master") != 0) {
            /* a replica still in its first sync is "loading": it holds nothing yet */
            if (health != NULL && health->type == REDIS_REPLY_STRING &&
                strcmp(health->str, "online") == 0)
                replicas++;
            continue;
        }
        if (primary == NULL || (health != NULL && health->type == REDIS_REPLY_STRING &&
                                strcmp(health->str, "online") == 0)) {
            primary = nodes->element[i];
            primary_health = health;
        }
    }
    if (primary == NULL)
        return slots->elements == 0; /* no primary: its slots stay uncovered */
    {
        const redisReply *endpoint = cluster_field(primary, "endpoint");
        const redisReply *ip = cluster_field(primary, "ip");
        const redisReply *port = cluster_field(primary, cl->cfg->redis_tls ? "tls-port" : "port");
        const char *host = endpoint != NULL && endpoint->type == REDIS_REPLY_STRING &&
                           endpoint->len > 0 && strcmp(endpoint->str, "?") != 0
                           ? endpoint->str
                           : ip != NULL && ip->type == REDIS_REPLY_STRING ? ip->str : NULL;

        if (port == NULL || port->type != REDIS_REPLY_INTEGER)
            return false;
        /* a failed primary whose slots went to its replica stays listed, slotless */
        if (slots->elements == 0 && (primary_health == NULL ||
                                     primary_health->type != REDIS_REPLY_STRING ||
                                     strcmp(primary_health->str, "online") != 0))
            return true;
        if (slots->elements == 0)
            return cluster_assign(cl, host, port->integer, 0, -1, replicas);
        for (size_t i = 0; i < slots->elements; i += 2) {
            if (slots->element[i]->type != REDIS_REPLY_INTEGER ||
                slots->element[i + 1]->type != REDIS_REPLY_INTEGER ||
                !cluster_assign(cl, host, port->integer, slots->element[i]->integer,
                                slots->element[i + 1]->integer, replicas))
                return false;
        }
    }
    return true;
}

/*
 * One range of CLUSTER SLOTS: start, end, the primary [host, port, id, ...],
 * then its replicas (listed whatever their health).
 */
static bool cluster_read_range(struct store_cluster *cl, const redisReply *range)
{
    const redisReply *p;

    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        range->element[0]->type != REDIS_REPLY_INTEGER ||
        range->element[1]->type != REDIS_REPLY_INTEGER)
        return false;
    p = range->element[2];
    if (p->type != REDIS_REPLY_ARRAY || p->elements < 2 ||
        p->element[0]->type != REDIS_REPLY_STRING || p->element[1]->type != REDIS_REPLY_INTEGER)
        return false;
    return cluster_assign(cl, p->element[0]->str, p->element[1]->integer,
                          range->element[0]->integer, range->element[1]->integer,
                          (unsigned)(range->elements - 3));
}

/*
 * A map was not taken: the first `known` nodes get back the roles the last
 * one gave them; the nodes it added (nothing points at them yet: no
 * connection, no slot) are forgotten.
 */
static void cluster_restore_roles(struct store_cluster *cl, size_t known, const bool *was_master,
                                  const unsigned *had_replicas)
{
    for (size_t j = 0; j < known; j++) {
        cl->nodes[j]->master = was_master[j];
        cl->nodes[j]->replicas = had_replicas[j];
    }
    while (cl->n_nodes > known)
        free(cl->nodes[--cl->n_nodes]);
}

/*
 * Forget the nodes the map just taken does not name as primaries: their
 * connections were closed (cluster_close; a command still on one holds the
 * connection, which copied the address, not the node) and no slot points at
 * them. Addresses change with every restart of a pod, and a table that only
 * grew would fill up (CLUSTER_MAX_NODES) and refuse every later map and
 * redirection to a new address.
 */
static void cluster_forget_unnamed(struct store_cluster *cl)
{
    size_t kept = 0;

    for (size_t i = 0; i < cl->n_nodes; i++) {
        if (!cl->nodes[i]->master && cl->nodes[i]->conn == NULL)
            free(cl->nodes[i]);
        else
            cl->nodes[kept++] = cl->nodes[i];
    }
    cl->n_nodes = kept;
}

/* Whether the map being read (cl->next) gives any slot a primary. */
static bool cluster_any_slot(const struct store_cluster *cl)
{
    for (size_t s = 0; s < STORE_CLUSTER_SLOTS; s++)
        if (cl->next[s] >= 0)
            return true;
    return false;
}

/*
 * The map in r becomes the map: slots point at their primaries, a primary
 * without a connection gets one, a node no longer a primary loses its own
 * and is forgotten.
 * False (the old map stays) when r cannot be read with certainty, or gives
 * no slot a primary.
 */
static bool cluster_read_map(struct store_cluster *cl, const redisReply *r)
{
    bool was_master[CLUSTER_MAX_NODES];
    unsigned had_replicas[CLUSTER_MAX_NODES];
    size_t known = cl->n_nodes;

    if (r->type != REDIS_REPLY_ARRAY)
        return false;
    for (size_t i = 0; i < cl->n_nodes; i++) {
        was_master[i] = cl->nodes[i]->master;
        had_replicas[i] = cl->nodes[i]->replicas;
        cl->nodes[i]->master = false;
        cl->nodes[i]->replicas = 0;
    }
    for (size_t s = 0; s < STORE_CLUSTER_SLOTS; s++)
        cl->next[s] = -1;
    for (size_t i = 0; i < r->elements; i++) {
        if (!(cl->use_slots ? cluster_read_range(cl, r->element[i])
                            : cluster_read_shard(cl, r->element[i]))) {
            cluster_restore_roles(cl, known, was_master, had_replicas);
            return false;
        }
    }
    if (!cluster_any_slot(cl)) {
        /*
         * No primary owns a slot: the node answering was reset or removed
         * from the cluster (redis-cli --cluster del-node leaves it running,
         * soft-reset), not the cluster losing every slot at once. Taking
         * its map would pin this worker to it.
         */
        cluster_restore_roles(cl, known, was_master, had_replicas);
        return false;
    }
    for (size_t s = 0; s < STORE_CLUSTER_SLOTS; s++)
        cl->slot[s] = cl->next[s] >= 0 ? cl->nodes[cl->next[s]] : NULL;
    cl->have_map = true;
    for (size_t i = 0; i < cl->n_nodes; i++) {
        if (cl->nodes[i]->master)
            cluster_open(cl->nodes[i]);
        else
            cluster_close(cl->nodes[i]);
    }
    cluster_forget_unnamed(cl);
    cluster_update(cl);
    return true;
}

/* The read is over (ok: a new map): the next one after its interval, or at once. */
static void cluster_refresh_done(struct store_cluster *cl, bool ok)
{
    struct timeval tv;

    cl->in_flight = false;
    if (cl->destroying)
        return;
    if (ok && cl->hooks.event != NULL)
        cl->hooks.event(cl->hooks.owner, STORE_EVENT_MAP_REFRESH);
    tv = clock_ms_to_timeval(cl->again ? CLUSTER_SOON_MS
                             : cl->covered ? CLUSTER_REFRESH_MS : CLUSTER_UNCOVERED_MS);
    cl->again = false;
    evtimer_add(&cl->refresh_ev, &tv);
}

static void cluster_on_map(enum store_status st, const redisReply *r, void *arg)
{
    struct store_cluster *cl = arg;
    bool ok = false;

    if (cl->destroying)
        return;
    if (cl->probe_asked) {
        cl->probe_asked = false;
        cluster_reap_later(cl, cl->probe);
        cl->probe = NULL;
    }
    if (st == STORE_OK && r->type == REDIS_REPLY_ERROR && !cl->use_slots &&
        (strncasecmp(r->str, "ERR unknown", 11) == 0 || strncmp(r->str, "NOPERM", 6) == 0)) {
        /* Redis < 7.0 ("ERR Unknown subcommand" in 6.2), or an ACL user with +cluster|slots */
        log_msg(LOG_INFO, "redis: CLUSTER SHARDS refused (%.200s); reading CLUSTER SLOTS", r->str);
        cl->use_slots = true;
        cl->again = true;
    } else if (st == STORE_OK) {
        ok = cluster_read_map(cl, r);
        if (!ok)
            log_msg(LOG_ERROR, "redis: the cluster's slot map could not be read (%s); keeping "
                    "the last one", r->type == REDIS_REPLY_ERROR ? r->str
                    : "unexpected reply, or no slot has a primary: a node reset or removed "
                      "from the cluster?");
    }
    cluster_refresh_done(cl, ok);
}

/* Ask for the map on c; false when it could not be sent. */
static bool cluster_ask(struct store_cluster *cl, struct store_conn *c)
{
    const char *argv[] = { "CLUSTER", cl->use_slots ? "SLOTS" : "SHARDS" };
    const size_t argvlen[] = { 7, strlen(argv[1]) };

    return store_conn_send(c, cluster_on_map, cl, 2, argv, argvlen) == 0;
}

static void cluster_on_probe_ready(void *owner)
{
    struct store_cluster *cl = owner;

    cl->probe_asked = cluster_ask(cl, cl->probe);
    if (!cl->probe_asked) {
        cluster_reap_later(cl, cl->probe);
        cl->probe = NULL;
        cluster_refresh_done(cl, false);
    }
}

/* The probe could not be reached or set up (or dropped before it was asked). */
static void cluster_on_probe_down(void *owner)
{
    struct store_cluster *cl = owner;

    if (cl->probe_asked || cl->probe == NULL)
        return; /* the reply (lost) ends the read */
    log_msg(LOG_WARN, "redis %s: cannot read the cluster's slot map there: %s",
            store_conn_addr(cl->probe), store_conn_last_error(cl->probe));
    cluster_reap_later(cl, cl->probe);
    cl->probe = NULL;
    cluster_refresh_done(cl, false);
}

/* A probe to the next candidate: a seed, or a node of the last map. */
static void cluster_probe(struct store_cluster *cl)
{
    size_t n = cl->cfg->redis_cluster.n + cl->n_nodes, i = cl->probe_turn++ % n;
    struct store_node where = { NULL, 0, NULL, STORE_NODE_PROBE };
    const struct store_conn_hooks hooks = { cluster_on_probe_ready, cluster_on_probe_down, cl,
                                            NULL };

    if (i < cl->cfg->redis_cluster.n) {
        where.host = cl->cfg->redis_cluster.at[i].host;
        where.port = cl->cfg->redis_cluster.at[i].port;
    } else {
        where.host = cl->nodes[i - cl->cfg->redis_cluster.n]->host;
        where.port = cl->nodes[i - cl->cfg->redis_cluster.n]->port;
    }
    cl->probe = store_conn_create(cl->base, cl->cfg, cl->auth, &where, cl->dns, cl->tls,
                                  &hooks);
    if (cl->probe == NULL) {
        cluster_refresh_done(cl, false);
        return;
    }
    store_conn_start(cl->probe);
}

/* Read the map now, through the next ready primary or a probe; once at a time. */
static void cluster_refresh(struct store_cluster *cl)
{
    if (cl->destroying)
        return;
    if (cl->in_flight || cl->probe != NULL) {
        cl->again = true;
        return;
    }
    cl->in_flight = true;
    evtimer_del(&cl->refresh_ev);
    for (size_t k = 0; k < cl->n_nodes; k++) {
        struct cluster_node *n = cl->nodes[(cl->turn + k) % cl->n_nodes];

        if (n->master && cluster_node_ready(n)) {
            cl->turn += k + 1;
            if (cluster_ask(cl, n->conn))
                return;
            break;
        }
    }
    cluster_probe(cl);
}

static void cluster_on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_refresh(arg);
}

/* ---- the interface ---------------------------------------------------------- */

struct store_cluster *store_cluster_create(struct event_base *base, const struct config *cfg,
                                           const struct store_auth *auth,
                                           struct evdns_base *dns, SSL_CTX *tls,
                                           const struct store_cluster_hooks *hooks)
{
    struct store_cluster *cl = calloc(1, sizeof(*cl));
    struct timeval now = { 0, 0 };

    if (cl == NULL)
        return NULL;
    cl->base = base;
    cl->cfg = cfg;
    cl->auth = auth;
    cl->dns = dns;
    cl->tls = tls;
    cl->hooks = *hooks;
    evtimer_assign(&cl->refresh_ev, base, cluster_on_refresh_timer, cl);
    event_assign(&cl->reap_ev, base, -1, 0, cluster_on_reap, cl);
    evtimer_add(&cl->refresh_ev, &now);
    return cl;
}

bool store_cluster_destroy(struct store_cluster *cl)
{
    bool dns_pending;

    if (cl == NULL)
        return false;
    cl->destroying = true;
    event_del(&cl->refresh_ev);
    event_del(&cl->reap_ev);
    if (cl->probe != NULL)
        cluster_reap_later(cl, cl->probe);
    for (size_t i = 0; i < cl->n_nodes; i++) {
        if (cl->nodes[i]->conn != NULL)
            cluster_reap_later(cl, cl->nodes[i]->conn);
        cl->nodes[i]->conn = NULL;
    }
    cluster_on_reap(-1, 0, cl);
    dns_pending = cl->dns_pending;
    for (size_t i = 0; i < cl->n_nodes; i++)
        free(cl->nodes[i]);
    free(cl->dead);
    free(cl);
    return dns_pending;
}

struct store_conn *store_cluster_route(struct store_cluster *cl, const char *key, size_t len)
{
    struct cluster_node *n = cl->slot[store_key_slot(key, len)];

    if (n == NULL)
        return NULL;
    cluster_open(n); /* a primary whose connection could not be made at the last map */
    return n->conn;
}

bool store_cluster_redirect(struct store_cluster *cl, const char *err, size_t len, bool *ask,
                            struct store_conn **to)
{
    char host[256];
    unsigned slot;
    uint16_t port;
    struct cluster_node *n;

    if (!store_reply_redirect(err, len, ask, &slot, host, sizeof(host), &port))
        return false;
    *to = NULL;
    n = cluster_node(cl, host, port);
    if (n == NULL)
        return true;
    cluster_open(n);
    *to = n->conn;
    if (cl->hooks.event != NULL)
        cl->hooks.event(cl->hooks.owner, *ask ? STORE_EVENT_ASK : STORE_EVENT_MOVED);
    if (!*ask) {
        n->master = true;
        cl->slot[slot] = n;
        cluster_update(cl);
        cl->again = true;
        cluster_refresh(cl);
    }
    return true;
}

bool store_cluster_covered(const struct store_cluster *cl)
{
    return cl->covered;
}

bool store_cluster_replicas_short(const struct store_cluster *cl)
{
    return cl->replicas_short;
}

unsigned store_cluster_primaries_ready(const struct store_cluster *cl)
{
    return cl->primaries_ready;
}

struct store_conn *store_cluster_primary(struct store_cluster *cl, unsigned index,
                                         unsigned *count)
{
    struct cluster_node *seen[CLUSTER_MAX_NODES], *found = NULL;
    unsigned n = 0;

    for (size_t slot = 0; slot < STORE_CLUSTER_SLOTS; slot++) {
        struct cluster_node *node = cl->slot[slot];
        bool known = node == NULL || (slot > 0 && node == cl->slot[slot - 1]);

        for (unsigned i = 0; !known && i < n; i++)
            known = seen[i] == node;
        if (known || n == CLUSTER_MAX_NODES)
            continue;
        if (n == index)
            found = node;
        seen[n++] = node;
    }
    *count = n;
    if (found == NULL)
        return NULL;
    cluster_open(found);
    return found->conn;
}
