/*
 * store_conn_int.h - the store's connections, private to the store module
 * (only proxy/store/ includes it): one connection to one Redis node
 * (store_conn.c, store_conn_setup.c, store_conn_io.c), which the command
 * layer (store_int.h: commands, scripts, the queue, reply classes) drives, the
 * Sentinel discovery (store_sentinel.c) that tells a connection where the
 * primary is, and the Redis Cluster slot map (store_cluster.c) that says
 * which primary's connection a key's commands go to.
 *
 * A node connection is one unit: it resolves the name (evdns, off the loop),
 * connects (hiredis async on the worker's event_base, connect and command
 * timeouts from the library), runs TLS (an SSL of our own SSL_CTX handed to
 * hiredis), sets the connection up (AUTH [user] password, SELECT, CONFIG GET
 * maxmemory-policy, ROLE, PING) and reconnects with backoff, resolving the
 * name again each time. It is ready only once ROLE said "master" and PING
 * answered. Its owner learns of ready and down through hooks, and sends
 * commands only while it is ready. With a locate hook (redis.sentinel) the
 * owner is asked where the node is before every attempt. A connection to a
 * sentinel (STORE_NODE_SENTINEL) sets up with the sentinel's credentials and
 * PING only, and makes one attempt: its owner decides what comes next.
 *
 * Calls run one way: store_conn.c (resolve, connect, attempts, life) calls
 * store_conn_setup.c (AUTH, SELECT, the eviction policy, ROLE, PING) and
 * store_conn_io.c (the state, failing and losing, commands, accessors);
 * store_conn_setup.c calls store_conn_io.c. The internals at the end
 * (struct store_conn, conn_*) are those three files' only.
 */
#ifndef IDEM_STORE_CONN_INT_H
#define IDEM_STORE_CONN_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/hiredis_ssl.h>
#if __has_include(<hiredict/hiredict_ssl.h>)
/* hiredict's shim maps redisInitiateSSL but does not declare it */
#include <hiredict/hiredict_ssl.h>
#endif
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "store_reply.h"
#include "store_types.h"

/* A replication ID: 40 hex characters (INFO replication's master_replid). */
#define STORE_REPLID_LEN 40

struct event_base;
struct evdns_base;
struct config;
struct store_conn;

/* What a connection talks to, and so how it is set up. */
enum store_node_kind {
    STORE_NODE_DATA,        /* a Redis data node: redis.username/password, SELECT, ROLE master;
                               reconnects with backoff */
    STORE_NODE_SENTINEL,    /* a sentinel: redis.sentinel.username/password, PING; one attempt */
    STORE_NODE_PROBE,       /* a cluster node asked for the slot map (any role):
                               redis.username/password, PING; one attempt */
};

/*
 * Where a node is. store_conn_create copies host (a cluster forgets a node
 * while a command may still be on its connection); unix_path is borrowed and
 * must outlive the connection. host and unix_path both NULL: not known yet,
 * the locate hook says (before every attempt).
 */
struct store_node {
    const char *host;       /* a name or an address literal (IPv6 without brackets); NULL for
                               a unix socket */
    uint16_t port;
    const char *unix_path;  /* NULL for TCP */
    enum store_node_kind kind;
};

/*
 * What a connection tells its owner, on the loop: ready (setup and role
 * check succeeded: commands may be sent) and down (it was connecting or
 * ready and is gone; a reconnect is already scheduled).
 */
struct store_conn_hooks {
    void (*ready)(void *owner);
    void (*down)(void *owner);
    void *owner;
    /*
     * Optional (NULL: the node is where store_node says): where the node is
     * now, asked at the start of every attempt; the owner answers later, on
     * the loop, with store_conn_located or store_conn_locate_failed.
     */
    void (*locate)(void *owner, struct store_conn *c);
};

/*
 * The reply to one command: st is STORE_OK with r (valid during the call
 * only), or STORE_TIMEOUT (no reply within redis.timeout: it may have been
 * applied) or STORE_LOST (the connection dropped after sending: it may have
 * been applied) with r NULL.
 */
typedef void store_conn_reply_cb(enum store_status st, const redisReply *r, void *privdata);

/*
 * The passwords AUTH sends, read at each new connection's setup (never
 * copied by the connection): one per store, on its loop's thread only.
 * store_set_credentials points them at a reload's config, so a rotated
 * password is sent from the next connection on, while a connection set up
 * already stays as it is (docs/redis.md#authentication).
 */
struct store_auth {
    const char *password;           /* redis.password: the data nodes' (and a cluster's);
                                       NULL: none */
    const char *sentinel_password;  /* redis.sentinel.password; NULL: none */
    struct config *held;            /* the config they point into, one reference; NULL: the
                                       store's own cfg, which outlives it */
};

/*
 * A connection to node for base, set up from cfg (user name, db, TLS
 * options, redis.timeout) and auth (the passwords, read at each setup),
 * not started. dns (borrowed) resolves host names; NULL is fine for a unix
 * socket or an address literal. tls (borrowed, from store_tls_context)
 * makes it TLS; NULL is plain. All must outlive the connection. NULL on
 * allocation failure.
 */
struct store_conn *store_conn_create(struct event_base *base, const struct config *cfg,
                                     const struct store_auth *auth,
                                     const struct store_node *node, struct evdns_base *dns,
                                     SSL_CTX *tls, const struct store_conn_hooks *hooks);

/* Start the first attempt (from the loop's first turn, never synchronously). */
void store_conn_start(struct store_conn *c);

/*
 * Start the first attempt now, for a connection without a locate hook that
 * a command is about to wait for: when it returns the connection is setting
 * up (store_conn_setting_up), or it failed already (logged, retried after
 * backoff; down may have run from inside this call).
 */
void store_conn_start_now(struct store_conn *c);

/*
 * Close and free c; pending replies get STORE_LOST first. Not from inside a
 * reply callback. Returns true when a name resolution was cancelled: its
 * callback (which frees libevent's request) then waits for the loop to turn
 * once more before the evdns_base may be freed (store_destroy does that).
 */
bool store_conn_destroy(struct store_conn *c);

/*
 * c is being given up (its owner closes it from the loop soon, with
 * store_conn_destroy): from now on it is not ready, nothing more is sent on
 * it, it never reconnects and its owner hears nothing more from it. Replies
 * already on their way still reach their callbacks, or STORE_LOST at
 * store_conn_destroy; since c is not ready, no reply on it can name it as
 * the connection a write came on (store_wait_replicas would keep it past
 * its free). May be called from a reply callback, also c's own.
 */
void store_conn_retire(struct store_conn *c);

/* Setup and role check succeeded and the connection holds (any thread may ask). */
bool store_conn_ready(const struct store_conn *c);

/* A connection exists and is being set up: a command may wait for ready or down. */
bool store_conn_setting_up(const struct store_conn *c);

/*
 * Send argv (argc strings of argvlen bytes, copied before the call returns)
 * on a ready connection; cb gets its reply exactly once, never from inside
 * this call. Bounded: a command unanswered for redis.timeout times out
 * (STORE_TIMEOUT) and drops the connection. Returns 0, or -1 when it was
 * not sent (not ready, or hiredis refused it) and cb will not run.
 */
int store_conn_send(struct store_conn *c, store_conn_reply_cb *cb, void *privdata, int argc,
                    const char **argv, const size_t *argvlen);

/*
 * Drop the connection now, saying why in the log, and reconnect with
 * backoff (the name is resolved and ROLE checked again). Pending replies
 * get STORE_LOST; down runs first. May be called from a reply callback.
 */
void store_conn_drop(struct store_conn *c, const char *why);

/*
 * The answer to the locate hook: the node is at host (a name or an address
 * literal, copied) and port; the attempt goes on (resolve, connect, setup).
 */
void store_conn_located(struct store_conn *c, const char *host, uint16_t port);

/* The answer to the locate hook: nowhere known now (why, for the log); retried after backoff. */
void store_conn_locate_failed(struct store_conn *c, const char *why);

/*
 * Start over now (a hint that the node moved, e.g. Sentinel's +switch-master):
 * a connection is dropped (saying why), a pending reconnect runs at once,
 * and a locate or resolution under way is answered but not used: the
 * attempt starts again. May be called from a reply callback.
 */
void store_conn_restart(struct store_conn *c, const char *why);

/*
 * What a message on a subscribed channel calls: the channel and the payload
 * (len bytes); payload NULL once, when Redis confirms the subscription.
 */
typedef void store_conn_message_cb(const char *channel, const char *payload, size_t len,
                                   void *arg);

/*
 * SUBSCRIBE channel on a ready connection (after which only PING may be
 * sent on it); cb (with arg) gets the confirmation and each message, on the
 * loop, while the connection holds; a refusal drops the connection (down).
 * One subscription per connection. Returns 0, or -1 when it was not sent.
 */
int store_conn_subscribe(struct store_conn *c, const char *channel, store_conn_message_cb *cb,
                         void *arg);

/* Why the last attempt failed or the connection was lost ("" if it never was); borrowed. */
const char *store_conn_last_error(const struct store_conn *c);

/*
 * The node's "host:port" into addr (len bytes) while the connection is
 * ready (a confirmed primary for a data node); false otherwise. Any thread.
 */
bool store_conn_ready_addr(struct store_conn *c, char *addr, size_t len);

/*
 * The replication ID (STORE_REPLID_LEN hex chars) of the primary the
 * connection's last setup reached, "" when INFO replication was refused
 * or is still to come; borrowed until the next setup. The loop's thread.
 */
const char *store_conn_replid(const struct store_conn *c);

/*
 * Whether the primary the connection's last setup reached was once a
 * replica promoted (INFO replication's master_replid2 is set); false when
 * INFO was refused. The loop's thread.
 */
bool store_conn_promoted(const struct store_conn *c);

/* ms since the connection last carried a reply (monotonic); for the idle health check. */
double store_conn_idle_ms(const struct store_conn *c);

/*
 * "host:port" or the socket path (with "sentinel " before it for a
 * sentinel), for log lines (borrowed; the loop's thread only: a located
 * connection changes it).
 */
const char *store_conn_addr(const struct store_conn *c);

/*
 * The client SSL_CTX for cfg's redis.tls: TLS >= 1.2, the CA file (else the
 * system's default CAs), the client certificate and key when set, peer
 * verification unless redis.tls.verify is false (warned once per process).
 * Returns the context (caller frees with SSL_CTX_free), or NULL with
 * "redis.tls.KEY FILE: reason" in err (errlen bytes).
 */
SSL_CTX *store_tls_context(const struct config *cfg, char *err, size_t errlen);

/*
 * A resolver for base from /etc/resolv.conf (and /etc/hosts), idle when no
 * name is being resolved. NULL when libevent cannot make one (logged).
 */
struct evdns_base *store_dns_create(struct event_base *base);

/* ---- Sentinel (store_sentinel.c; docs/redis.md) ---------- */

struct store_sentinel;

/*
 * Called on the loop when a discovery names a primary other than the one
 * named before (a failover followed): from and to are "host:port" (borrowed
 * for the call).
 */
typedef void store_sentinel_followed_cb(const char *from, const char *to, void *arg);

/*
 * The discovery of redis.sentinel for the data connection data (borrowed,
 * must outlive it), on base: answers data's locate hook (see
 * store_sentinel_locate), and keeps one connection subscribed to
 * +switch-master at one sentinel, restarting data when our master moves.
 * auth, dns and tls (borrowed; dns and tls may be NULL) as for
 * store_conn_create. followed
 * (may be NULL) hears of primaries that changed. NULL on allocation
 * failure.
 */
struct store_sentinel *store_sentinel_create(struct event_base *base, const struct config *cfg,
                                             const struct store_auth *auth,
                                             struct evdns_base *dns, SSL_CTX *tls,
                                             struct store_conn *data,
                                             store_sentinel_followed_cb *followed, void *arg);

/*
 * data's locate hook: ask the sentinels in turn (the one that answered last
 * first), each within redis.timeout, `SENTINEL MASTER MASTER`; the first
 * address named with a config-epoch no older than the one followed goes to
 * store_conn_located, and when none names one, store_conn_locate_failed
 * says what each answered. Never answers from inside this call.
 */
void store_sentinel_locate(struct store_sentinel *sn, struct store_conn *data);

/*
 * Close the sentinel connections and free sn (before data). Not from a
 * callback. Returns true when a name resolution was cancelled (see
 * store_conn_destroy). NULL is fine.
 */
bool store_sentinel_destroy(struct store_sentinel *sn);

/* ---- Redis Cluster (store_cluster.c; docs/redis.md#redis-cluster) -------------- */

struct store_cluster;

/*
 * What the slot map tells the store, on the loop. ready and down are a
 * primary's connection's (store_conn_hooks, with the connection named):
 * ready, commands may go; down, those queued for it fail and its replies
 * are lost. down also runs, before it is closed, for a connection the map
 * no longer needs (its node is not a primary any more). event counts map
 * refreshes and redirections (metrics).
 */
struct store_cluster_hooks {
    void (*ready)(void *owner, struct store_conn *c);
    void (*down)(void *owner, struct store_conn *c);
    void (*event)(void *owner, enum store_event ev);
    void *owner;
};

/*
 * The slot map of redis.cluster for base: loaded at once (from the loop's
 * first turn) through any reachable seed of cfg->redis_cluster, then kept up
 * to date (every second, sooner after a redirection or a lost primary) with
 * CLUSTER SHARDS, or CLUSTER SLOTS on servers older than 7.0. One data
 * connection (store_conn, ROLE master) per primary in the map, opened when
 * the map names it or a redirection does. auth, dns and tls (borrowed; dns
 * and tls may be NULL) as for store_conn_create. NULL on allocation failure.
 */
struct store_cluster *store_cluster_create(struct event_base *base, const struct config *cfg,
                                           const struct store_auth *auth,
                                           struct evdns_base *dns, SSL_CTX *tls,
                                           const struct store_cluster_hooks *hooks);

/*
 * Close every connection (pending replies get STORE_LOST; down is not
 * called) and free cl. Not from a callback. Returns true when a name
 * resolution was cancelled (see store_conn_destroy). NULL is fine.
 */
bool store_cluster_destroy(struct store_cluster *cl);

/*
 * The connection to the primary that owns key's slot (key: len bytes, its
 * hash tag decides), or NULL while the map does not cover that slot. It may
 * not be ready yet (store_conn_ready / store_conn_setting_up say).
 */
struct store_conn *store_cluster_route(struct store_cluster *cl, const char *key, size_t len);

/*
 * Whether the error reply err (len bytes) is a redirection (MOVED or ASK,
 * store_reply_redirect), and where to: *ask, and *to, the named node's
 * connection (opened now when there was none; NULL when it cannot be made).
 * MOVED also points the slot at that node and refreshes the map soon; ASK
 * changes nothing (the slot is migrating). False for any other reply.
 */
bool store_cluster_redirect(struct store_cluster *cl, const char *err, size_t len, bool *ask,
                            struct store_conn **to);

/*
 * Every slot is owned by a primary whose connection is ready (readiness).
 * Any thread may ask while cl exists.
 */
bool store_cluster_covered(const struct store_cluster *cl);

/*
 * With redis.min_replicas: some primary that owns slots has fewer replicas
 * online (CLUSTER SHARDS' health; a replica in its first sync is not) than
 * that, so its claims would be refused. Any thread may ask while cl exists.
 */
bool store_cluster_replicas_short(const struct store_cluster *cl);

/* Primaries in the map whose connection is ready. Any thread may ask while cl exists. */
unsigned store_cluster_primaries_ready(const struct store_cluster *cl);

/*
 * The index-th primary of the map, the primaries ordered by the lowest slot
 * each owns (an order every worker and every proxy instance reading the
 * same map agrees on, so a listing's cursor names the same node on the next
 * page), and in *count how many primaries own slots. NULL when index is not
 * below *count; the connection may not be ready (store_conn_ready says).
 * For SCAN, which walks one node's keys and carries no key to route by.
 */
struct store_conn *store_cluster_primary(struct store_cluster *cl, unsigned index,
                                         unsigned *count);

/* ---- the connection's internals (store_conn.c, store_conn_setup.c, store_conn_io.c) ---- */

/* What a data connection last read of its node's maxmemory-policy. */
enum store_policy { POLICY_UNREAD, POLICY_NOEVICTION, POLICY_EVICTS };

#define STORE_CONN_BACKOFF_MIN_MS 100
#define STORE_CONN_BACKOFF_MAX_MS 2000

enum store_conn_state {
    CONN_IDLE,          /* waiting for the reconnect timer */
    CONN_LOCATING,      /* the owner's locate hook is finding the node */
    CONN_RESOLVING,     /* evdns looks the name up */
    CONN_CONNECTING,    /* ac exists: TCP, TLS and the setup run */
    CONN_READY,         /* ROLE master, PING answered */
};

/* A command sent and not answered yet; c->calls holds them oldest first. */
struct store_conn_call {
    struct store_conn *c;
    store_conn_reply_cb *cb;
    void *privdata;
    double sent_ms;             /* monotonic */
    TAILQ_ENTRY(store_conn_call) link;
};

/*
 * One name resolution. libevent calls back exactly once, also after a
 * cancel; c is NULL once the resolution was abandoned (its deadline, or c
 * destroyed), and the callback then only frees this.
 */
struct store_conn_resolve {
    struct store_conn *c;
    struct evdns_getaddrinfo_request *req;
};

struct store_conn {
    struct event_base *base;
    const struct config *cfg;
    const struct store_auth *auth;  /* borrowed: the passwords of the next setup */
    struct store_node node;
    struct evdns_base *dns;         /* borrowed; NULL: names cannot be resolved */
    SSL_CTX *tls;                   /* borrowed; NULL: plain TCP or unix */
    struct store_conn_hooks hooks;
    char host[256];                 /* node.host: a copy of store_conn_create's, or where the
                                       locate hook said the node is */
    pthread_mutex_t addr_lock;      /* addr, written on the loop, read by store_conn_ready_addr */
    char addr[300];                 /* host:port or the socket path, for log lines */
    char why[400];                  /* the last failure, for store_conn_last_error */
    bool restart;                   /* store_conn_restart while locating or resolving */
    store_conn_message_cb *sub_cb;  /* store_conn_subscribe's */
    void *sub_arg;
    enum store_conn_state state;
    _Atomic bool ready;             /* state == CONN_READY, for other threads (readiness) */
    bool destroying;                /* store_conn_retire or _destroy: quiet, never ready again */
    redisAsyncContext *ac;          /* set from connect until the connection is lost */
    SSL *ssl;                       /* ac's, owned by hiredis once initiated; for the reason of
                                       a failed handshake */
    struct store_conn_resolve *resolve; /* the resolution under way, or NULL */
    unsigned turn;                  /* which resolved address the next connect takes */
    char ip[INET6_ADDRSTRLEN];      /* the address connected to */
    struct event attempt_ev;        /* deadline of the resolution, or of connect + TLS + setup */
    struct event reconnect_ev;
    struct event watchdog_ev;       /* the oldest unanswered command's deadline */
    unsigned backoff_ms;
    TAILQ_HEAD(, store_conn_call) calls;
    double last_reply_ms;           /* monotonic */
    enum store_policy policy;       /* its node's maxmemory-policy, as last read */
    char replid[STORE_REPLID_LEN + 1]; /* its primary's master_replid (INFO replication) read
                                       by this setup; "": not read (INFO refused) */
    bool promoted;                  /* that primary was a promoted replica (master_replid2) */
};


/* ---- store_conn_io.c ---- */

/*
 * The one place c->state changes; the atomic ready flag other threads read
 * follows it (ready: CONN_READY and not retired).
 */
void conn_enter(struct store_conn *c, enum store_conn_state to);

/* Arm the reconnect timer after the backoff, then double the backoff. */
void conn_schedule_reconnect(struct store_conn *c);

/* An attempt failed before a connection existed (why: logged); the next after the backoff. */
void conn_fail(struct store_conn *c, const char *why);

/* ac was lost (why: logged): pending replies fail, the owner hears, a reconnect follows. */
void conn_lost(struct store_conn *c, const redisAsyncContext *ac, const char *why);

/* Why ac failed, into buf (len bytes): hiredis' error, or the TLS check's. */
void conn_reason(const struct store_conn *c, const redisAsyncContext *ac, char *buf, size_t len);

/* Why the TLS session ssl failed before it was ready, into buf (len bytes); false: no reason known. */
bool conn_tls_reason(const struct store_conn *c, const SSL *ssl, char *buf, size_t len);

/* c->watchdog_ev: the oldest unanswered command is older than redis.timeout. */
void conn_on_watchdog(evutil_socket_t fd, short what, void *arg);

/* Arm the watchdog for the oldest unanswered command, or disarm it. */
void conn_watchdog_arm(struct store_conn *c);

/* ---- store_conn_setup.c ---- */

/* Count c under policy p for store_eviction_policy_ok (POLICY_UNREAD on create and destroy). */
void conn_set_policy(struct store_conn *c, enum store_policy p);

/* A new c counts under POLICY_UNREAD (conn_set_policy(c, POLICY_UNREAD) takes it back). */
void conn_policy_join(struct store_conn *c);

/* Pipeline the setup commands on ac, a new connection of c. */
void conn_send_setup(struct store_conn *c, redisAsyncContext *ac);

#endif
