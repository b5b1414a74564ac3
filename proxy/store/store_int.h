/*
 * store_int.h - the store's command layer, private to the store module
 * (only proxy/store/ includes it): the store object that store.h and
 * store_redis.h name, its commands and WAIT waiters, the records' scripts.
 * It stands on the connections (store_conn_int.h) and the small types
 * (store_types.h).
 *
 * Calls run one way: store.c (the store's life: create, destroy, node
 * events, the health tick), store_verbs.c (the public commands) and
 * store_list.c (the listing of held records, and the walk over the record
 * keys it shares) call store_wait.c (WAIT batching, replica lag) and
 * store_cmd.c (command objects, the setup queue, dispatch, replies,
 * redirects); store_census.c (the census of held records) calls
 * store_list.c's walk and store_verbs.c's store_any; store_wait.c calls
 * store_cmd.c; store_cmd.c calls none of them.
 */
#ifndef IDEM_STORE_INT_H
#define IDEM_STORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/queue.h>
#include <sys/time.h>

#include <event2/event_struct.h>
#include <event2/util.h>
#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "store.h"
#include "store_conn_int.h"
#include "store_redis.h"
#include "store_reply.h"
#include "store_types.h"

/* ---- the records' scripts (store_script.c) ------------------------------- */

/*
 * The Lua scripts of the records: each is SHA1'd once per store
 * (store_scripts_build in store.c), then sent with EVALSHA (the body again
 * after NOSCRIPT). Other modules bring their own (store_script_register).
 */
enum store_record_script {
    SCRIPT_REPLACE, SCRIPT_RELEASE, SCRIPT_TAKEOVER, SCRIPT_DELETE_UNCHANGED,
    SCRIPT_RESOLVE, SCRIPT_PEEK, SCRIPT_EXTEND, SCRIPT_CENSUS, SCRIPT_REASSERT, SCRIPT_COUNT
};

/* script's Lua text (store_script.c): a constant, static storage, never NULL. */
const char *store_script_text(enum store_record_script script);

/* The hex SHA1 of text (NUL-terminated) for EVALSHA into out (STORE_SCRIPT_SHA_LEN + 1 bytes). */
void store_script_digest(const char *text, char out[STORE_SCRIPT_SHA_LEN + 1]);

/*
 * Send a command (queued, routed and classified like every store command)
 * whose caller gets the reply as plain values: cb runs once, with r NULL
 * unless st is STORE_OK (store_reply_cb). argv (argc strings of argvlen
 * bytes, borrowed) is copied before the call returns. script: the text of
 * the script an EVALSHA runs (its body is sent after NOSCRIPT), or NULL.
 * key_arg: the argv index of the key (redis.cluster's routing); 0: argv[1],
 * or KEYS[1] of an EVALSHA. Out of memory aborts.
 */
void store_any(struct store *s, const char *script, int key_arg, int argc, const char **argv,
               const size_t *argvlen, store_reply_cb *cb, void *arg);

/* ---- store_list.c: the walk over the record keys, node by node ---- */

#define STORE_WALK_CURSOR_MAX 24    /* a SCAN cursor: a 64-bit decimal, and its NUL */
#define STORE_WALK_MATCH_MAX 300    /* SCAN MATCH's pattern of the record keys, and its NUL */

/*
 * SCAN MATCH's pattern of every record key under prefix (redis.key_prefix,
 * borrowed), "PREFIX:{" 32 '?' "}" with the prefix's glob characters
 * escaped, into match (caller-owned, STORE_WALK_MATCH_MAX bytes).
 */
void store_walk_match(const char *prefix, char *match);

/*
 * How many primaries a walk visits: 1 (redis.url, redis.sentinel), or with
 * redis.cluster those of the slot map now (0: no map yet).
 */
unsigned store_walk_nodes(struct store *s);

/*
 * `SCAN cursor MATCH match COUNT count` on node (0..store_walk_nodes - 1),
 * never redirected: the primary, or with redis.cluster the node-th primary
 * of the map (store_cluster_primary); a node not in the map fails
 * STORE_UNAVAILABLE. cursor and match are copied; cb runs once (store.h).
 */
void store_walk_scan(struct store *s, unsigned node, const char *cursor, const char *match,
                     unsigned count, store_reply_cb *cb, void *arg);

/*
 * A SCAN reply's parts: the next cursor copied into next (caller-owned,
 * STORE_WALK_CURSOR_MAX bytes), and in *keys the array of keys (r's
 * element; NULL for none). -1 when r is not [decimal cursor, keys].
 */
int store_walk_reply(const struct store_reply *r, char *next, const struct store_reply **keys);

#define STORE_HEALTH_MS 1000

/*
 * How long a store_wait_replicas call that nobody waits on (a record's) may
 * wait for another call's WAIT to share before it sends its own: under
 * traffic the next claim's WAIT covers it, so a request costs one WAIT.
 */
#define STORE_WAIT_LAZY_MS 10

/* A replica that lags an idle primary by more than this (ms) is stalled (not ready). */
#define STORE_REPLICA_LAG_MS 3000

/* The idle ROLEs' offsets kept to judge that lag: at about one a second, 8 s of them. */
#define STORE_OFFSET_SAMPLES 8

/*
 * Finished commands are kept for the next ones (store_cmd_new), each with
 * its block for a saved argv, so a steady stream of commands allocates
 * nothing here: at most STORE_SPARE_MAX of them, and a block above
 * STORE_SPARE_SAVE_MAX bytes (a large record's) is freed, not kept, so the
 * spares hold at most 128 * 4 KiB per worker.
 */
#define STORE_SPARE_MAX 128
#define STORE_SPARE_SAVE_MAX 4096

/* Redirections (MOVED, ASK) one command may follow before it fails (redis.cluster). */
#define STORE_MAX_REDIRECTS 5


struct store_cmd;
TAILQ_HEAD(store_cmd_queue, store_cmd);

/*
 * One store_wait_replicas call: the write it covers came on conn, which was
 * ready then; a waiter is failed when conn goes down, so conn is alive.
 */
struct store_waiter {
    store_int_cb *cb;
    void *arg;
    struct store_conn *conn;    /* NULL: not called from a write's successful reply */
    TAILQ_ENTRY(store_waiter) link;
};
TAILQ_HEAD(store_waiter_list, store_waiter);

struct store {
    struct event_base *base;
    const struct config *cfg;
    struct store_auth auth;         /* the passwords of the next connections; its loop's
                                       thread only (store_set_credentials) */
    struct store_conn *conn;        /* the node: redis.url, or the primary redis.sentinel names;
                                       NULL with redis.cluster */
    struct store_cluster *cluster;  /* redis.cluster's slot map and connections; or NULL */
    store_event_observer *event_observer;
    void *event_arg;
    struct store_sentinel *sentinel; /* redis.sentinel's discovery; NULL with redis.url */
    store_failover_observer *failover_observer;
    void *failover_arg;
    struct evdns_base *dns;         /* resolves host names; NULL for an address (redis.url) */
    SSL_CTX *tls;                   /* rediss://; NULL otherwise */
    struct store_cmd_queue queued;  /* waiting for the connection's setup, in order */
    struct store_cmd_queue failed;  /* not sent: reported STORE_UNAVAILABLE from the loop */
    struct store_cmd_queue spare;   /* finished commands kept for reuse (STORE_SPARE_MAX) */
    unsigned n_spare;
    struct event failed_ev;
    bool destroying;
    struct event health_ev;         /* every STORE_HEALTH_MS: ROLE on an idle connection */
    bool health_in_flight;
    char script_sha[SCRIPT_COUNT][SHA_DIGEST_LENGTH * 2 + 1];
    store_observer *observer;
    void *observer_arg;
    struct store_conn *reply_conn;  /* while a reply is reported OK: the connection it came on */
    struct store_waiter_list wait_next; /* for the next WAIT */
    struct store_waiter_list wait_sent; /* the WAIT in flight answers them */
    bool wait_in_flight;
    bool wait_now;                  /* wait_next holds a call that wants its WAIT this turn */
    struct event wait_ev;           /* active: send the next WAIT at the end of this turn */
    struct event wait_lazy_ev;      /* STORE_WAIT_LAZY_MS after a call that can wait */
    _Atomic bool replicas_short;    /* the last WAIT or idle ROLE saw < redis.min_replicas */
    double replicas_short_ms;       /* when it last turned short (monotonic); 0: at the start */
    double wait_counted_ms;         /* when a WAIT last answered a count (monotonic); 0: never */
    struct store_offset_sample offsets[STORE_OFFSET_SAMPLES]; /* the idle ROLEs' offsets of
                                       this connection, oldest first */
    size_t n_offsets;
    /* redis.reassert (store_reassert.c) */
    TAILQ_HEAD(reassert_journal, reassert_entry) journal; /* writes that applied, oldest first */
    size_t journal_bytes;
    _Atomic double grace_until_ms;  /* monotonic: new claims refused until then; 0: never (any
                                       thread reads it: store_unready) */
    bool claimless;                 /* store_set_claimless: the journal is off */
    bool primary_seen;              /* a connection was ready before: the next may be another */
    unsigned reassert_round;        /* replays so far; a put-back's answer names its round */
    unsigned reassert_outstanding;  /* put-backs of this round not answered yet */
    bool reassert_failed;           /* one of this round's put-backs failed (logged once) */
    bool reassert_recheck;          /* a put-back of this round found another owner's record */
    struct event reassert_ev;       /* the grace's end: the journal once more when rechecking */
    bool reassert_ev_set;
    char primary_replid[STORE_REPLID_LEN + 1]; /* the last ready primary's; "" unread */
};

/*
 * What a command's reply is read as: REPLY_HEALTH (ROLE) gives its callback
 * the whole reply (cb.raw), REPLY_WAIT the count (cb.integer).
 */
enum store_reply_kind { REPLY_VALUE, REPLY_CAS, REPLY_INT, REPLY_HEALTH, REPLY_WAIT, REPLY_ANY };

/* A ROLE's reply as it came (NULL unless st is STORE_OK); borrowed for the call. */
typedef void store_raw_cb(enum store_status st, const redisReply *r, void *arg);

struct store_cmd {
    struct store *s;
    enum store_reply_kind kind;
    union {
        store_value_cb *value;
        store_cas_cb *cas;
        store_int_cb *integer;
        store_reply_cb *any;
        store_raw_cb *raw;
    } cb;
    void *arg;
    struct store_conn *conn;    /* where it is sent or queued; NULL: no connection */
    bool asking;                /* ASK: send ASKING before it */
    int redirects;              /* MOVED and ASK followed so far */
    bool reported;              /* the caller's callback has run */
    TAILQ_ENTRY(store_cmd) link; /* in s->queued, s->failed or s->spare */
    const char *script;         /* the text of the script an EVALSHA runs, or NULL */
    int key_arg;                /* redis.cluster: argv index of the key; 0: the usual one */
    bool resent;                /* a script's body went out after NOSCRIPT */
    bool claim;                 /* a claim or takeover: refused in redis.reassert.grace
                                   (store_claims_held), also when it waited for the setup */
    struct timeval submitted;
    int argc;                   /* saved argv of a script (for the NOSCRIPT resend) or of a
                                   queued command */
    char **argv;                /* into `saved` */
    size_t *argvlen;            /* into `saved` */
    void *saved;                /* argv, argvlen and the argument bytes; kept by a spare */
    size_t saved_cap;           /* bytes of `saved` */
};

/* ---- store_reassert.c: writes put back after a failover (redis.reassert) ---- */

struct reassert_entry;

/* Whether s journals its writes: redis.reassert.window > 0, one primary (not redis.cluster). */
bool store_reassert_on(const struct store *s);

/*
 * Whether the last round of put-backs is not all answered OK (one still on
 * its way, or one failed): the next connection sends the journal again,
 * whatever its replication ID.
 */
bool store_reassert_incomplete(const struct store *s);


/*
 * A write of key (owner token: RECORD_OWNER_LEN chars; value of len bytes;
 * a takeover's expected record, the one it replaces, of expected_len bytes,
 * else NULL and 0; all copied) about to be sent with PX px_ms (0: KEEPTTL); release: an
 * owner-checked delete. Pass the result as the write's callback argument
 * with store_reassert_on_claimed (a claim) or store_reassert_on_written
 * (a compare-and-set), after store_reassert_wrap_*: the write is journalled
 * when it applied, then the caller's cb runs. Out of memory aborts.
 */
struct reassert_entry *store_reassert_begin(struct store *s, const char *key,
                                            const char *owner, const char *value, size_t len,
                                            const char *expected, size_t expected_len,
                                            uint64_t px_ms, bool release);
void store_reassert_wrap_value(struct reassert_entry *e, store_value_cb *cb, void *arg);
void store_reassert_wrap_cas(struct reassert_entry *e, store_cas_cb *cb, void *arg);
store_value_cb store_reassert_on_claimed;
store_cas_cb store_reassert_on_written;

/*
 * The connection is ready on another primary than the last (addr, for the
 * log; why: how that was told): send the journal, in order, before
 * anything else, and refuse new claims for redis.reassert.grace.
 */
void store_reassert_replay(struct store *s, const char *addr, const char *why);

/*
 * The store's first connection is ready on a primary that was a promoted
 * replica (addr, for the log): a proxy that starts cannot tell whether it
 * was promoted just now, with other proxies still putting back their
 * writes, so new claims wait redis.reassert.grace.
 */
void store_reassert_first(struct store *s, const char *addr);

/* Forget the writes older than redis.reassert.window (the health tick, each write). */
void store_reassert_prune(struct store *s);

/* Count ev for the store's event observer (metrics). */
void store_reassert_count(struct store *s, enum store_event ev);

/* Forget the whole journal (store_destroy). */
void store_reassert_clear(struct store *s);

/* ---- store_cmd.c: command objects, the setup queue, dispatch, replies ---- */

/* A command for s (a spare reused, or a new one; out of memory aborts); cb is the caller's to set. */
struct store_cmd *store_cmd_new(struct store *s, enum store_reply_kind kind, void *arg);

/* Done with cmd: kept as a spare for the next command, or freed. */
void store_cmd_free(struct store_cmd *cmd);

/* Send cmd on cmd->conn now (argv borrowed); 0 sent, -1 not (the caller fails it). */
int store_send(struct store_cmd *cmd, int argc, const char **argv, const size_t *argvlen);

/* Report st (and r, NULL unless STORE_OK) to cmd's caller, once; cmd stays the caller's to free. */
void store_cmd_report(struct store_cmd *cmd, enum store_status st, const redisReply *r);

/* Not sent: report STORE_UNAVAILABLE from the loop (never inside the caller's store_* call). */
void store_fail_later(struct store_cmd *cmd);

/* s->failed_ev: report the commands that were not sent. */
void store_on_failed(evutil_socket_t fd, short what, void *arg);

/*
 * Whether s is in its grace after following a new primary (redis.reassert):
 * a claim or takeover (cmd->claim) is then failed unsent, STORE_UNAVAILABLE,
 * by store_submit and by the flush of the setup queue. Any thread.
 */
bool store_claims_held(const struct store *s);

/*
 * Send cmd (argv copied when it must wait), queue it for its connection's
 * setup, or fail it (also a claim while store_claims_held).
 */
void store_submit(struct store_cmd *cmd, int argc, const char **argv, const size_t *argvlen);

/* Keep a copy of argv (argc strings of argvlen bytes, borrowed) in cmd; out of memory aborts. */
void store_cmd_save(struct store_cmd *cmd, int argc, const char **argv, const size_t *argvlen);

/* Send a queued (or redirected) cmd with its saved argv on the connection it now has. */
void store_dispatch(struct store_cmd *cmd);

/* ---- store_wait.c: WAIT batching and replica lag ---- */

/* Record whether the replicas fall short of redis.min_replicas now. */
void store_replicas_short(struct store *s, bool is_short);

/* A ROLE's reply (REPLY_HEALTH's cb.raw): the role checked, the replicas counted. arg: s. */
void store_on_health_reply(enum store_status st, const redisReply *r, void *arg);

/* Report every waiter of list (st, replicas) and free them. */
void store_waiters_report(struct store_waiter_list *list, enum store_status st,
                          long long replicas);

/* s->wait_ev, s->wait_lazy_ev: send the next WAIT. arg: s. */
void store_on_wait_turn(evutil_socket_t fd, short what, void *arg);

#endif
