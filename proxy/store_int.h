/*
 * store_int.h - what the files of the store module share and nothing outside
 * it includes: one connection to one Redis node (store_conn.c), which
 * store.c (commands, scripts, the queue, reply classes) drives.
 *
 * A node connection is one unit: it resolves the name (evdns, off the loop),
 * connects (hiredis async on the worker's event_base, connect and command
 * timeouts from the library), runs TLS (an SSL of our own SSL_CTX handed to
 * hiredis), sets the connection up (AUTH [user] password, SELECT, CONFIG GET
 * maxmemory-policy, ROLE, PING) and reconnects with backoff, resolving the
 * name again each time. It is ready only once ROLE said "master" and PING
 * answered. Its owner learns of ready and down through hooks, and sends
 * commands only while it is ready.
 */
#ifndef IDEM_STORE_INT_H
#define IDEM_STORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>
#include <openssl/ssl.h>

#include "store.h"

struct event_base;
struct evdns_base;
struct config;
struct store_conn;

/* Where a node is; the strings are borrowed and must outlive the connection. */
struct store_node {
    const char *host;       /* a name or an address literal (IPv6 without brackets); NULL for
                               a unix socket */
    uint16_t port;
    const char *unix_path;  /* NULL for TCP */
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
};

/*
 * The reply to one command: st is STORE_OK with r (valid during the call
 * only), or STORE_TIMEOUT (no reply within redis.timeout: it may have been
 * applied) or STORE_LOST (the connection dropped after sending: it may have
 * been applied) with r NULL.
 */
typedef void store_conn_reply_cb(enum store_status st, const redisReply *r, void *privdata);

/*
 * A connection to node for base, set up from cfg (credentials, db, TLS
 * options, redis.timeout), not started. dns (borrowed) resolves host names;
 * NULL is fine for a unix socket or an address literal. tls (borrowed, from
 * store_tls_context) makes it TLS; NULL is plain. All must outlive the
 * connection. NULL on allocation failure.
 */
struct store_conn *store_conn_create(struct event_base *base, const struct config *cfg,
                                     const struct store_node *node, struct evdns_base *dns,
                                     SSL_CTX *tls, const struct store_conn_hooks *hooks);

/* Start the first attempt (from the loop's first turn, never synchronously). */
void store_conn_start(struct store_conn *c);

/*
 * Close and free c; pending replies get STORE_LOST first. Not from inside a
 * reply callback. Returns true when a name resolution was cancelled: its
 * callback (which frees libevent's request) then waits for the loop to turn
 * once more before the evdns_base may be freed (store_destroy does that).
 */
bool store_conn_destroy(struct store_conn *c);

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
 * ROLE's reply r says master. A replica would refuse the claims (READONLY)
 * or, once promoted by hand, hold a stale copy: the store talks to the
 * primary only. False with the reason (replica, sentinel, an error such as
 * NOPERM) in what (len bytes).
 */
bool store_role_is_primary(const redisReply *r, char *what, size_t len);

/* ms since the connection last carried a reply (monotonic); for the idle health check. */
double store_conn_idle_ms(const struct store_conn *c);

/* "host:port" or the socket path, for log lines (borrowed). */
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

#endif
