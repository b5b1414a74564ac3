/*
 * store_reply.h - what a reply from Redis means to the store: the class of
 * an error reply, a cluster redirection, a replica's lag, and the ROLE and
 * SENTINEL MASTER answers read (store_reply.c, store_sentinel_reply.c).
 * Pure (no I/O, no state; the last two read a hiredis reply), so they are
 * unit-tested (tests/unit/test_store.c).
 *
 * A payments proxy must fail closed: a reply that says "this node cannot
 * take the write now" proves the command did not run (STORE_REFUSED): a
 * claim that gets it fails its request (the route's on_store_error), while
 * an owner's record write, release or renewal, which must not be lost, is
 * sent again later; the replies that say "this node is not the primary any
 * more" also drop the connection, so that the store reconnects, resolves
 * the name again and checks ROLE before it is ready again (a failover
 * behind a DNS name, or a primary demoted to a replica).
 */
#ifndef IDEM_STORE_REPLY_H
#define IDEM_STORE_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

enum store_reply_class {
    STORE_REPLY_FAILED,      /* any other error (ERR, NOPERM, OOM, ...): this command
                                failed, the connection is fine */
    STORE_REPLY_NOSCRIPT,    /* the script cache is empty (a restarted or new Redis): send the
                                script's body with EVAL */
    STORE_REPLY_NOT_NOW,     /* NOREPLICAS, BUSY, TRYAGAIN, CLUSTERDOWN: the node refuses writes
                                for now; this command failed, the connection is kept */
    STORE_REPLY_NOT_PRIMARY, /* READONLY, LOADING, MASTERDOWN, MOVED, ASK: not the primary (or
                                not usable) now; this command failed and the connection must
                                be dropped, re-resolved and its ROLE checked again */
    STORE_REPLY_WRONG_TYPE,  /* WRONGTYPE: the key holds another type (STORE_WRONG_TYPE); this
                                command failed, the connection is fine */
};

/*
 * The class of the error reply err (len bytes, need not be NUL-terminated):
 * its first word, the error code Redis puts before the first space, compared
 * exactly (codes are upper case). NULL or empty is STORE_REPLY_FAILED.
 */
enum store_reply_class store_reply_class(const char *err, size_t len);

/*
 * Whether an error reply of class c proves that the command did not run and
 * says the node cannot take it now, so that the same command may succeed
 * later (STORE_REFUSED): STORE_REPLY_NOT_NOW and STORE_REPLY_NOT_PRIMARY
 * (MOVED and ASK included: they are followed with redis.cluster, and one
 * that cannot be followed did not run either). Redis checks these before a
 * command runs, and a script's first write is checked before it writes
 * anything (later writes of a script are never refused), so a script that
 * got one wrote nothing.
 */
bool store_reply_class_refused(enum store_reply_class c);

/* A short name of the class for log lines ("not the primary", ...); static. */
const char *store_reply_class_name(enum store_reply_class c);

/* Slots of a Redis Cluster (Redis Cluster specification, "Key distribution model"). */
#define STORE_CLUSTER_SLOTS 16384

/*
 * CRC16-XMODEM (polynomial 0x1021, initial value 0, no reflection) of len
 * bytes, the checksum the Redis Cluster specification hashes keys with
 * ("123456789" is 0x31C3).
 */
uint16_t store_crc16(const char *buf, size_t len);

/*
 * The cluster slot of key (len bytes): CRC16 of its hash tag (the bytes
 * between the first '{' and the next '}', when that is not empty), else of
 * the whole key, mod 16384 (Redis Cluster specification, "Hash tags").
 */
unsigned store_key_slot(const char *key, size_t len);

/*
 * A cluster redirection in the error reply err (len bytes): "MOVED SLOT
 * HOST:PORT" or "ASK SLOT HOST:PORT" (the host may be an IPv6 literal, the
 * port after the last ':'). True with *ask, *slot, host (copied into
 * hostlen bytes, without brackets) and *port; false for any other reply or
 * a malformed one (the command then fails: fail closed).
 */
bool store_reply_redirect(const char *err, size_t len, bool *ask, unsigned *slot, char *host,
                          size_t hostlen, uint16_t *port);

/* The primary's replication offset (ROLE's second element) seen at at_ms (monotonic). */
struct store_offset_sample {
    double at_ms;
    long long offset;
};

enum store_replica_lag {
    STORE_REPLICA_WITHIN,   /* it acknowledged all the primary held bound_ms ago, or later */
    STORE_REPLICA_LAGGING,  /* the primary held more than it acknowledged over bound_ms ago */
    STORE_REPLICA_UNKNOWN,  /* the samples do not reach back far enough to say */
};

/*
 * Whether a replica whose last acknowledgement (REPLCONF ACK, once a second,
 * as ROLE lists it) is ack lags the primary by more than bound_ms, judged
 * from samples (n of them, oldest first, the newest taken at now_ms) of the
 * primary's offset: within when some sample at most bound_ms old, and taken
 * at since_ms or later (after a shortfall seen otherwise: only what the
 * replica acknowledged since then clears it), had an offset of at most ack;
 * lagging when some sample over bound_ms old had more. Not "ack equals the
 * offset now": on an idle primary that Sentinel's hello messages write to
 * about 1.5 times a second, a live replica is behind by its last second in
 * a third of the samples.
 */
enum store_replica_lag store_replica_lag(const struct store_offset_sample *samples, size_t n,
                                         long long ack, double now_ms, double bound_ms,
                                         double since_ms);

/* ---- replies read whole (hiredis replies) ---- */

/*
 * ROLE's reply r says master. A replica would refuse the claims (READONLY)
 * or, once promoted by hand, hold a stale copy: the store talks to the
 * primary only. False with the reason (replica, sentinel, an error such as
 * NOPERM, an unexpected reply) in what (len bytes).
 */
bool store_role_is_primary(const redisReply *r, char *what, size_t len);

/* A sentinel's answer to SENTINEL MASTER (store_sentinel_master_read). */
struct sentinel_master {
    char host[256];             /* the primary's ip, NUL-terminated */
    uint16_t port;
    uint64_t epoch;             /* its config-epoch: the failover that made it the primary */
};

/*
 * Read the reply r to `SENTINEL MASTER master` into *out: true; or false
 * with why (whylen bytes): an error reply, a master the sentinel does not
 * monitor ("does not monitor a master named ..."), a reply without ip, port
 * (1-65535) or config-epoch. Pure (store_sentinel_reply.c).
 */
bool store_sentinel_master_read(const redisReply *r, const char *master,
                                struct sentinel_master *out, char *why, size_t whylen);

#endif
