/*
 * store_conn_core.h - what the files of one Redis connection share and
 * nothing else includes. Calls run one way: store_conn.c (resolve,
 * connect, attempts, life) calls store_conn_setup.c (AUTH, SELECT, the
 * eviction policy, ROLE, PING) and store_conn_io.c (the state, failing and
 * losing, commands, accessors); store_conn_setup.c calls store_conn_io.c.
 */
#ifndef IDEM_STORE_CONN_CORE_H
#define IDEM_STORE_CONN_CORE_H

#include "store_int.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
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
#include <hiredis/hiredis_ssl.h>
#if __has_include(<hiredict/hiredict_ssl.h>)
/* hiredict's shim maps redisInitiateSSL but does not declare it */
#include <hiredict/hiredict_ssl.h>
#endif
#include <openssl/err.h>
#include <openssl/x509_vfy.h>

#include "clock.h"
#include "config.h"
#include "log.h"

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
