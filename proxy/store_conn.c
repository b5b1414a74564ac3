/*
 * store_conn.c - one connection to one Redis node (store_int.h): resolve the
 * name, connect, TLS, set up, check the role, reconnect with backoff.
 *
 * Each attempt: (1) a host name is resolved with evdns on the worker's loop
 * (never getaddrinfo, which blocks), bounded by redis.timeout; an address
 * literal or a unix socket skips this; (2) hiredis connects to the address
 * (connect_timeout = redis.timeout) and, for rediss://, TLS runs inside
 * hiredis' non-blocking reads and writes on an SSL of our SSL_CTX; (3) the
 * setup is pipelined: AUTH [user] password, SELECT db, CONFIG GET
 * maxmemory-policy (may be denied), ROLE (must be "master"), PING. Steps 2
 * and 3 together have one deadline, redis.timeout. Ready once PING answered.
 * Any failure logs the address and the reason, and the next attempt starts
 * after a backoff (100 ms doubling to 2 s, reset when ready), with the name
 * resolved again: a DNS-based failover is followed, and a demoted primary
 * (READONLY) is left.
 *
 * With a locate hook (redis.sentinel) each attempt starts by asking the
 * owner where the node is (CONN_LOCATING); the rest is the same. A
 * connection to a sentinel sets up with AUTH (the sentinel's credentials)
 * and PING only, logs nothing of its own failures and makes one attempt:
 * its owner hears of the failure (down) and decides. So does a cluster
 * probe (STORE_NODE_PROBE), with the data nodes' credentials.
 *
 * Command timeouts come from hiredis (command_timeout = redis.timeout): past
 * it, every pending reply is NULL with REDIS_ERR_TIMEOUT and the connection
 * drops. Its timer is one per connection, pushed back by every read and
 * write, so under steady traffic to a stalled Redis it would not fire: the
 * watchdog here watches the oldest unanswered command and, once it is older
 * than redis.timeout, runs the library's timeout (redisAsyncHandleTimeout).
 */
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

#define STORE_CONN_BACKOFF_MIN_MS 100
#define STORE_CONN_BACKOFF_MAX_MS 2000

/* The setup commands of a new connection, in the order they are sent. */
enum store_setup_step { SETUP_AUTH, SETUP_SELECT, SETUP_POLICY, SETUP_ROLE, SETUP_PING };
static const char *const store_setup_name[] = {
    [SETUP_AUTH] = "AUTH", [SETUP_SELECT] = "SELECT", [SETUP_POLICY] = "CONFIG GET",
    [SETUP_ROLE] = "ROLE", [SETUP_PING] = "PING",
};

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
    char host[256];                 /* where the locate hook said the node is (node.host) */
    pthread_mutex_t addr_lock;      /* addr, written on the loop, read by store_conn_ready_addr */
    char addr[300];                 /* host:port or the socket path, for log lines */
    char why[400];                  /* the last failure, for store_conn_last_error */
    bool restart;                   /* store_conn_restart while locating or resolving */
    store_conn_message_cb *sub_cb;  /* store_conn_subscribe's */
    void *sub_arg;
    enum store_conn_state state;
    _Atomic bool ready;             /* state == CONN_READY, for other threads (readiness) */
    bool destroying;
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
};

static void conn_attempt(struct store_conn *c);
static void conn_restart_now(struct store_conn *c);

/* ---- failing and losing ------------------------------------------------ */

static void conn_schedule_reconnect(struct store_conn *c)
{
    struct timeval tv;

    if (c->destroying || evtimer_pending(&c->reconnect_ev, NULL))
        return;
    tv = clock_ms_to_timeval(c->backoff_ms);
    evtimer_add(&c->reconnect_ev, &tv);
    c->backoff_ms = c->backoff_ms * 2 > STORE_CONN_BACKOFF_MAX_MS ? STORE_CONN_BACKOFF_MAX_MS
                                                                   : c->backoff_ms * 2;
}

/*
 * An attempt failed before a connection existed: say why, try again after
 * the backoff. A sentinel's owner is told instead (one attempt).
 */
static void conn_fail(struct store_conn *c, const char *why)
{
    c->state = CONN_IDLE;
    event_del(&c->attempt_ev);
    snprintf(c->why, sizeof(c->why), "%s", why);
    if (c->node.kind != STORE_NODE_DATA) { /* a sentinel or a cluster probe: one attempt */
        c->hooks.down(c->hooks.owner);
        return;
    }
    log_msg(LOG_ERROR, "redis %s: %s; not ready, reconnecting", c->addr, why);
    conn_schedule_reconnect(c);
}

/*
 * ac is gone or going (connect failed, setup failed, timeout, closed,
 * dropped): forget it, say why, tell the owner, reconnect with backoff.
 * Once per ac: later notices of the same ac (its other NULL replies, its
 * disconnect) find c->ac changed. Never frees ac (hiredis or the caller does).
 */
static void conn_lost(struct store_conn *c, const redisAsyncContext *ac, const char *why)
{
    bool was_ready = c->state == CONN_READY;

    if (ac == NULL || c->ac != ac)
        return;
    c->ac = NULL;
    c->ssl = NULL;
    c->state = CONN_IDLE;
    c->ready = false;
    event_del(&c->attempt_ev);
    event_del(&c->watchdog_ev);
    if (c->destroying)
        return;
    snprintf(c->why, sizeof(c->why), "%s", why);
    if (c->node.kind != STORE_NODE_DATA) { /* a sentinel or a cluster probe: one attempt */
        c->hooks.down(c->hooks.owner);
        return;
    }
    if (was_ready)
        log_msg(LOG_WARN, "redis %s: connection lost: %s; not ready, reconnecting", c->addr, why);
    else
        log_msg(LOG_ERROR, "redis %s: %s; not ready, reconnecting", c->addr, why);
    conn_schedule_reconnect(c);
    c->hooks.down(c->hooks.owner);
}

/*
 * Why a TLS session ssl failed before it was ready: the certificate check's
 * error (OpenSSL's string), else the alert or error OpenSSL queued for this
 * thread. False when TLS has nothing to say.
 */
static bool conn_tls_reason(const struct store_conn *c, const SSL *ssl, char *buf, size_t len)
{
    long verify = SSL_get_verify_result(ssl);
    unsigned long e = ERR_peek_last_error();

    if (c->cfg->redis_tls_verify && verify != X509_V_OK) {
        snprintf(buf, len, "TLS: certificate verify failed: %s",
                 X509_verify_cert_error_string(verify));
    } else if (e != 0) {
        const char *reason = ERR_reason_error_string(e);

        snprintf(buf, len, "TLS: %s", reason != NULL ? reason : "handshake failed");
    } else if (!SSL_is_init_finished(ssl)) {
        snprintf(buf, len, "TLS: the handshake did not complete");
    } else {
        return false;
    }
    ERR_clear_error();
    return true;
}

/* Why ac failed, for the log: timeout, TLS, or hiredis' error text. */
static void conn_reason(const struct store_conn *c, const redisAsyncContext *ac, char *buf,
                        size_t len)
{
    if (ac->err == REDIS_ERR_TIMEOUT)
        snprintf(buf, len, "no answer within redis.timeout (%llu ms)%s",
                 (unsigned long long)c->cfg->redis_timeout_ms,
                 c->state == CONN_READY ? "" : " while connecting and setting up");
    else if (c->ssl != NULL && c->state != CONN_READY && conn_tls_reason(c, c->ssl, buf, len))
        return;
    else if (ac->err != 0 && ac->errstr != NULL && ac->errstr[0] != '\0')
        snprintf(buf, len, "%s", ac->errstr);
    else
        snprintf(buf, len, "the server closed the connection");
}

void store_conn_drop(struct store_conn *c, const char *why)
{
    redisAsyncContext *ac = c->ac;

    if (ac == NULL)
        return;
    conn_lost(c, ac, why);
    redisAsyncFree(ac); /* deferred by hiredis when called from one of its callbacks */
}

/* ---- commands ----------------------------------------------------------- */

/* Arm the watchdog for the oldest unanswered command, unless it is armed. */
static void conn_watchdog_arm(struct store_conn *c)
{
    struct store_conn_call *oldest = TAILQ_FIRST(&c->calls);
    double left;
    struct timeval tv;

    if (oldest == NULL || evtimer_pending(&c->watchdog_ev, NULL))
        return;
    left = oldest->sent_ms + (double)c->cfg->redis_timeout_ms - clock_mono_ms();
    tv = clock_ms_to_timeval(left > 0 ? (uint64_t)left + 1 : 0);
    evtimer_add(&c->watchdog_ev, &tv);
}

static void conn_on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    struct store_conn *c = arg;
    struct store_conn_call *oldest = TAILQ_FIRST(&c->calls);

    (void)fd;
    (void)what;
    if (c->ac == NULL || oldest == NULL)
        return;
    if (clock_mono_ms() - oldest->sent_ms < (double)c->cfg->redis_timeout_ms) {
        conn_watchdog_arm(c); /* answered meanwhile: watch the next one */
        return;
    }
    /* the library's timeout: every pending reply NULL (REDIS_ERR_TIMEOUT), then disconnect */
    redisAsyncHandleTimeout(c->ac);
}

static void conn_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct store_conn_call *call = privdata;
    struct store_conn *c = call->c;
    store_conn_reply_cb *cb = call->cb;
    void *arg = call->privdata;
    enum store_status st = STORE_OK;

    TAILQ_REMOVE(&c->calls, call, link);
    free(call);
    if (reply == NULL) {
        char why[400];

        st = ac->err == REDIS_ERR_TIMEOUT ? STORE_TIMEOUT : STORE_LOST;
        if (c->ac == ac) { /* not ready before the owner hears of the failure */
            conn_reason(c, ac, why, sizeof(why));
            conn_lost(c, ac, why);
        }
    } else if (c->ac == ac) {
        c->last_reply_ms = clock_mono_ms();
    }
    cb(st, reply, arg);
}

int store_conn_send(struct store_conn *c, store_conn_reply_cb *cb, void *privdata, int argc,
                    const char **argv, const size_t *argvlen)
{
    struct store_conn_call *call;

    if (c->state != CONN_READY || c->ac == NULL)
        return -1;
    call = malloc(sizeof(*call));
    if (call == NULL)
        return -1;
    call->c = c;
    call->cb = cb;
    call->privdata = privdata;
    call->sent_ms = clock_mono_ms();
    if (redisAsyncCommandArgv(c->ac, conn_on_reply, call, argc, argv, argvlen) != REDIS_OK) {
        free(call);
        return -1;
    }
    TAILQ_INSERT_TAIL(&c->calls, call, link);
    conn_watchdog_arm(c);
    return 0;
}

/* ---- setup -------------------------------------------------------------- */

/* Evicted records re-execute their retries: say so when Redis may evict. */
static void conn_check_policy(const struct store_conn *c, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return; /* CONFIG may be disabled or denied (managed Redis, ACL): nothing to check */
    if (strcmp(r->element[1]->str, "noeviction") != 0)
        log_msg(LOG_WARN, "redis %s: maxmemory-policy is %s; an evicted record lets a retry "
                "execute again: use noeviction", c->addr, r->element[1]->str);
}

bool store_role_is_primary(const redisReply *r, char *what, size_t len)
{
    const char *role;

    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(what, len, "ROLE failed: %.200s (the proxy checks that the node is the "
                 "primary: allow +role for its user)", r->str);
        return false;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING) {
        snprintf(what, len, "ROLE failed: unexpected reply type %d", r->type);
        return false;
    }
    role = r->element[0]->str;
    if (strcmp(role, "master") == 0)
        return true;
    if (strcmp(role, "slave") == 0 || strcmp(role, "replica") == 0)
        snprintf(what, len, "the node is a replica (ROLE %.20s), not the primary", role);
    else
        snprintf(what, len, "the node's ROLE is %.40s, not master (the primary)", role);
    return false;
}

/* The credentials of AUTH: a sentinel's own, or the data nodes'. */
static const char *conn_username(const struct store_conn *c)
{
    return c->node.kind == STORE_NODE_SENTINEL ? c->cfg->redis_sentinel_username
                                               : c->cfg->redis_username;
}

static const char *conn_password(const struct store_conn *c)
{
    return c->node.kind == STORE_NODE_SENTINEL ? c->cfg->redis_sentinel_password
                                               : c->cfg->redis_password;
}

static void conn_setup_done(struct store_conn *c)
{
    c->state = CONN_READY;
    c->ready = true;
    c->backoff_ms = STORE_CONN_BACKOFF_MIN_MS;
    event_del(&c->attempt_ev);
    if (c->node.kind == STORE_NODE_DATA)
        log_msg(LOG_INFO, "redis %s: ready (primary%s)", c->addr, c->ssl != NULL ? ", TLS" : "");
    c->hooks.ready(c->hooks.owner);
}

/*
 * A reply to a setup command. AUTH and SELECT must succeed, ROLE must say
 * master, PING (sent last) must answer; CONFIG GET may fail. The error text
 * of Redis never carries the password we sent.
 */
static void conn_on_setup_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    const redisReply *r = reply;
    struct store_conn *c = ac->data;
    enum store_setup_step step = (enum store_setup_step)(intptr_t)privdata;
    char what[400];

    if (c == NULL || c->ac != ac)
        return; /* the connection is gone: whoever noticed first has handled it */
    if (r == NULL) {
        conn_reason(c, ac, what, sizeof(what));
        conn_lost(c, ac, what);
        return;
    }
    c->last_reply_ms = clock_mono_ms();
    if (step == SETUP_POLICY) {
        conn_check_policy(c, r);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0 &&
        conn_password(c) == NULL) {
        snprintf(what, sizeof(what), "AUTH failed: the server requires a password and "
                 "%s is not set (%s answered %.200s)",
                 c->node.kind == STORE_NODE_SENTINEL ? "redis.sentinel.password"
                                                     : "redis.password",
                 store_setup_name[step], r->str);
        store_conn_drop(c, what);
        return;
    }
    if (step == SETUP_ROLE) {
        if (!store_role_is_primary(r, what, sizeof(what)))
            store_conn_drop(c, what);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (step == SETUP_AUTH && conn_username(c) != NULL)
            snprintf(what, sizeof(what), "AUTH failed for user %.64s: %.200s",
                     conn_username(c), r->str);
        else
            snprintf(what, sizeof(what), "%s failed: %.200s", store_setup_name[step], r->str);
        store_conn_drop(c, what);
    } else if (r->type != REDIS_REPLY_STATUS) {
        snprintf(what, sizeof(what), "%s failed: unexpected reply type %d",
                 store_setup_name[step], r->type);
        store_conn_drop(c, what);
    } else if (step == SETUP_PING) {
        conn_setup_done(c);
    }
}

static void conn_setup_command(redisAsyncContext *ac, enum store_setup_step step, int argc,
                               const char **argv, const size_t *argvlen)
{
    redisAsyncCommandArgv(ac, conn_on_setup_reply, (void *)(intptr_t)step, argc, argv, argvlen);
}

/* Queue the setup; its replies arrive in this order. A sentinel: AUTH and PING only. */
static void conn_send_setup(struct store_conn *c, redisAsyncContext *ac)
{
    const struct config *cfg = c->cfg;
    const char *user = conn_username(c), *password = conn_password(c);
    bool data = c->node.kind == STORE_NODE_DATA;

    if (password != NULL && user != NULL) {
        const char *argv[] = { "AUTH", user, password };
        const size_t argvlen[] = { 4, strlen(user), strlen(password) };
        conn_setup_command(ac, SETUP_AUTH, 3, argv, argvlen);
    } else if (password != NULL) {
        const char *argv[] = { "AUTH", password };
        const size_t argvlen[] = { 4, strlen(password) };
        conn_setup_command(ac, SETUP_AUTH, 2, argv, argvlen);
    }
    if (data && cfg->redis_db != 0) {
        char db[16];
        int n = snprintf(db, sizeof(db), "%d", cfg->redis_db);
        const char *argv[] = { "SELECT", db };
        const size_t argvlen[] = { 6, (size_t)n };
        conn_setup_command(ac, SETUP_SELECT, 2, argv, argvlen);
    }
    if (data) {
        const char *argv[] = { "CONFIG", "GET", "maxmemory-policy" };
        const size_t argvlen[] = { 6, 3, 16 };
        conn_setup_command(ac, SETUP_POLICY, 3, argv, argvlen);
    }
    if (data) {
        const char *argv[] = { "ROLE" };
        const size_t argvlen[] = { 4 };
        conn_setup_command(ac, SETUP_ROLE, 1, argv, argvlen);
    }
    {
        const char *argv[] = { "PING" };
        const size_t argvlen[] = { 4 };
        conn_setup_command(ac, SETUP_PING, 1, argv, argvlen);
    }
}

/* ---- connect ------------------------------------------------------------ */

static bool conn_is_address(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return evutil_inet_pton(AF_INET, host, buf) == 1 || evutil_inet_pton(AF_INET6, host, buf) == 1;
}

/*
 * TLS on ac: an SSL of our SSL_CTX that checks the server name (SNI too,
 * unless it is an address), handed to hiredis, which runs the handshake in
 * its non-blocking reads and writes. -1 with why.
 */
static int conn_start_tls(struct store_conn *c, redisAsyncContext *ac, char *why, size_t len)
{
    const char *name = c->cfg->redis_tls_server_name != NULL ? c->cfg->redis_tls_server_name
                                                             : c->node.host;
    SSL *ssl = SSL_new(c->tls);

    if (ssl == NULL ||
        (!conn_is_address(name) && SSL_set_tlsext_host_name(ssl, name) != 1) ||
        (c->cfg->redis_tls_verify && SSL_set1_host(ssl, name) != 1)) {
        snprintf(why, len, "TLS: cannot set up the session for %s", name);
        SSL_free(ssl);
        return -1;
    }
    if (redisInitiateSSL(&ac->c, ssl) != REDIS_OK) {
        /* the handshake can fail at once on a fast loopback */
        if (!conn_tls_reason(c, ssl, why, len))
            snprintf(why, len, "TLS: %s", ac->c.errstr);
        SSL_free(ssl); /* hiredis takes it only on success */
        return -1;
    }
    c->ssl = ssl;
    return 0;
}

static void conn_on_connect(const redisAsyncContext *ac, int status)
{
    struct store_conn *c = ac->data;
    char why[400], reason[360];

    if (c == NULL || c->ac != ac)
        return;
    if (status != REDIS_OK) {
        conn_reason(c, ac, reason, sizeof(reason));
        snprintf(why, sizeof(why), "connect failed: %s", reason);
        c->turn++; /* the next attempt tries the next resolved address */
        conn_lost(c, ac, why); /* hiredis frees ac after this callback */
        return;
    }
    if (c->node.host != NULL && strcmp(c->node.host, c->ip) != 0)
        log_msg(c->node.kind == STORE_NODE_DATA ? LOG_INFO : LOG_DEBUG,
                "redis %s: connected to %s", c->addr, c->ip);
    else
        log_msg(c->node.kind == STORE_NODE_DATA ? LOG_INFO : LOG_DEBUG, "redis %s: connected",
                c->addr);
    c->last_reply_ms = clock_mono_ms();
}

static void conn_on_disconnect(const redisAsyncContext *ac, int status)
{
    struct store_conn *c = ac->data;
    char why[400];

    (void)status;
    if (c == NULL || c->ac != ac)
        return;
    conn_reason(c, ac, why, sizeof(why));
    conn_lost(c, ac, why);
}

/* Connect to c->ip (or the socket), start TLS, queue the setup; all within redis.timeout. */
static void conn_connect(struct store_conn *c)
{
    struct timeval tv = clock_ms_to_timeval(c->cfg->redis_timeout_ms);
    redisOptions opts;
    redisAsyncContext *ac;
    char why[400];

    memset(&opts, 0, sizeof(opts));
    if (c->node.unix_path != NULL)
        REDIS_OPTIONS_SET_UNIX(&opts, c->node.unix_path);
    else
        REDIS_OPTIONS_SET_TCP(&opts, c->ip, c->node.port);
    opts.connect_timeout = &tv;
    opts.command_timeout = &tv;
    ERR_clear_error(); /* a failed handshake's reason is read from this thread's queue */
    ac = redisAsyncConnectWithOptions(&opts);
    if (ac == NULL || ac->err) {
        snprintf(why, sizeof(why), "connect failed: %s", ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        c->turn++;
        conn_fail(c, why);
        return;
    }
    ac->data = c;
    if (redisLibeventAttach(ac, c->base) != REDIS_OK) {
        redisAsyncFree(ac);
        conn_fail(c, "connect failed: out of memory");
        return;
    }
    c->ac = ac;
    c->state = CONN_CONNECTING;
    redisAsyncSetConnectCallback(ac, conn_on_connect);
    redisAsyncSetDisconnectCallback(ac, conn_on_disconnect);
    evtimer_add(&c->attempt_ev, &tv);
    if (c->tls != NULL && conn_start_tls(c, ac, why, sizeof(why)) < 0) {
        store_conn_drop(c, why);
        return;
    }
    conn_send_setup(c, ac);
}

/* ---- resolve ------------------------------------------------------------ */

static void conn_on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
    struct store_conn_resolve *r = arg;
    struct store_conn *c = r->c;
    char why[400];
    size_t n = 0;

    free(r);
    if (c == NULL) { /* abandoned: its deadline passed, or c is gone */
        if (res != NULL)
            evutil_freeaddrinfo(res);
        return;
    }
    c->resolve = NULL;
    event_del(&c->attempt_ev);
    if (c->restart) { /* the node moved meanwhile: start over */
        if (res != NULL)
            evutil_freeaddrinfo(res);
        conn_restart_now(c);
        return;
    }
    if (result != 0) {
        if (res != NULL)
            evutil_freeaddrinfo(res);
        snprintf(why, sizeof(why), "DNS: cannot resolve %s: %s", c->node.host,
                 evutil_gai_strerror(result));
        conn_fail(c, why);
        return;
    }
    for (struct evutil_addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
        n++;
    /* several addresses: each failed connect moves on to the next */
    struct evutil_addrinfo *pick = res;
    for (size_t i = 0; n > 0 && i < c->turn % n; i++)
        pick = pick->ai_next;
    if (pick == NULL ||
        (pick->ai_family == AF_INET &&
         evutil_inet_ntop(AF_INET, &((struct sockaddr_in *)pick->ai_addr)->sin_addr, c->ip,
                          sizeof(c->ip)) == NULL) ||
        (pick->ai_family == AF_INET6 &&
         evutil_inet_ntop(AF_INET6, &((struct sockaddr_in6 *)pick->ai_addr)->sin6_addr, c->ip,
                          sizeof(c->ip)) == NULL) ||
        (pick->ai_family != AF_INET && pick->ai_family != AF_INET6)) {
        if (res != NULL)
            evutil_freeaddrinfo(res);
        snprintf(why, sizeof(why), "DNS: no usable address for %s", c->node.host);
        conn_fail(c, why);
        return;
    }
    evutil_freeaddrinfo(res);
    conn_connect(c);
}

/* The name resolution's deadline: a resolver that does not answer delays nothing past it. */
static void conn_on_attempt_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct store_conn *c = arg;
    char why[400];

    (void)fd;
    (void)what;
    if (c->state == CONN_RESOLVING && c->resolve != NULL) {
        struct store_conn_resolve *r = c->resolve;

        c->resolve = NULL;
        r->c = NULL; /* its callback, which libevent still runs, only frees it */
        if (r->req != NULL)
            evdns_getaddrinfo_cancel(r->req);
        snprintf(why, sizeof(why), "DNS: no answer for %s within redis.timeout (%llu ms)",
                 c->node.host, (unsigned long long)c->cfg->redis_timeout_ms);
        conn_fail(c, why);
    } else if (c->state == CONN_CONNECTING && c->ac != NULL) {
        snprintf(why, sizeof(why), "no answer to the connection setup within redis.timeout "
                 "(%llu ms)", (unsigned long long)c->cfg->redis_timeout_ms);
        store_conn_drop(c, why);
    }
}

static void conn_resolve(struct store_conn *c)
{
    struct store_conn_resolve *r;
    struct evutil_addrinfo hints;
    struct evdns_getaddrinfo_request *req;
    struct timeval tv = clock_ms_to_timeval(c->cfg->redis_timeout_ms);

    if (c->dns == NULL) {
        conn_fail(c, "DNS: no resolver (libevent could not read /etc/resolv.conf)");
        return;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        conn_fail(c, "DNS: out of memory");
        return;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    r->c = c;
    c->resolve = r;
    c->state = CONN_RESOLVING;
    evtimer_add(&c->attempt_ev, &tv);
    req = evdns_getaddrinfo(c->dns, c->node.host, NULL, &hints, conn_on_resolved, r);
    if (c->resolve == r) /* else it was answered at once (/etc/hosts) and r is freed */
        r->req = req;
}

/* Resolve the name (every time: a failover may have moved it) or connect. */
static void conn_go(struct store_conn *c)
{
    if (c->node.unix_path != NULL) {
        conn_connect(c);
    } else if (conn_is_address(c->node.host)) {
        snprintf(c->ip, sizeof(c->ip), "%s", c->node.host);
        conn_connect(c);
    } else {
        conn_resolve(c);
    }
}

/* One attempt: ask the owner where the node is first (locate hook), or go. */
static void conn_attempt(struct store_conn *c)
{
    c->restart = false;
    if (c->hooks.locate == NULL) {
        conn_go(c);
        return;
    }
    c->state = CONN_LOCATING;
    c->hooks.locate(c->hooks.owner, c);
}

static void conn_on_reconnect(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_attempt(arg);
}

/* A new attempt from the loop's next turn, without backoff (the node moved). */
static void conn_restart_now(struct store_conn *c)
{
    struct timeval now = { 0, 0 };

    c->restart = false;
    c->state = CONN_IDLE;
    event_del(&c->reconnect_ev);
    evtimer_add(&c->reconnect_ev, &now);
}

/* c->addr for node host:port (or the socket path), "sentinel " before a sentinel's. */
static void conn_set_addr(struct store_conn *c)
{
    const char *kind = c->node.kind == STORE_NODE_SENTINEL ? "sentinel " : "";

    pthread_mutex_lock(&c->addr_lock);
    if (c->node.unix_path != NULL)
        snprintf(c->addr, sizeof(c->addr), "%s%s", kind, c->node.unix_path);
    else if (c->node.host == NULL)
        snprintf(c->addr, sizeof(c->addr), "primary (not located yet)");
    else if (strchr(c->node.host, ':') != NULL)
        snprintf(c->addr, sizeof(c->addr), "%s[%s]:%u", kind, c->node.host, c->node.port);
    else
        snprintf(c->addr, sizeof(c->addr), "%s%s:%u", kind, c->node.host, c->node.port);
    pthread_mutex_unlock(&c->addr_lock);
}

void store_conn_located(struct store_conn *c, const char *host, uint16_t port)
{
    if (c->state != CONN_LOCATING)
        return;
    if (c->restart) {
        conn_restart_now(c);
        return;
    }
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->node.host = c->host;
    c->node.port = port;
    conn_set_addr(c);
    conn_go(c);
}

void store_conn_locate_failed(struct store_conn *c, const char *why)
{
    if (c->state != CONN_LOCATING)
        return;
    if (c->restart)
        conn_restart_now(c);
    else
        conn_fail(c, why);
}

void store_conn_restart(struct store_conn *c, const char *why)
{
    if (c->destroying)
        return;
    if (c->state == CONN_LOCATING || c->state == CONN_RESOLVING) {
        c->restart = true; /* its answer may be from before the move */
        return;
    }
    if (c->ac != NULL)
        store_conn_drop(c, why);
    else
        log_msg(LOG_INFO, "redis %s: %s; reconnecting now", c->addr, why);
    c->backoff_ms = STORE_CONN_BACKOFF_MIN_MS;
    conn_restart_now(c);
}

/*
 * A message, or the confirmation of the subscription, on c's subscribed
 * connection. A refusal (NOPERM: the user lacks the channel) drops the
 * connection: a subscription that never delivers must not look alive.
 */
static void conn_on_message(redisAsyncContext *ac, void *reply, void *privdata)
{
    const redisReply *r = reply;
    struct store_conn *c = ac->data;
    char why[300];

    (void)privdata;
    if (c == NULL || c->ac != ac || r == NULL)
        return; /* gone: whoever noticed first has handled it */
    c->last_reply_ms = clock_mono_ms();
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, sizeof(why), "SUBSCRIBE failed: %.200s", r->str);
        store_conn_drop(c, why);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(r->element[0]->str, "subscribe") == 0)
        c->sub_cb(r->element[1]->str, NULL, 0, c->sub_arg);
    else if (strcmp(r->element[0]->str, "message") == 0 &&
             r->element[2]->type == REDIS_REPLY_STRING)
        c->sub_cb(r->element[1]->str, r->element[2]->str, r->element[2]->len, c->sub_arg);
}

int store_conn_subscribe(struct store_conn *c, const char *channel, store_conn_message_cb *cb,
                         void *arg)
{
    const char *argv[] = { "SUBSCRIBE", channel };
    const size_t argvlen[] = { 9, strlen(channel) };

    if (c->state != CONN_READY || c->ac == NULL)
        return -1;
    c->sub_cb = cb;
    c->sub_arg = arg;
    return redisAsyncCommandArgv(c->ac, conn_on_message, NULL, 2, argv, argvlen) == REDIS_OK ? 0
                                                                                           : -1;
}

const char *store_conn_last_error(const struct store_conn *c)
{
    return c->why;
}

bool store_conn_ready_addr(struct store_conn *c, char *addr, size_t len)
{
    bool ready;

    pthread_mutex_lock(&c->addr_lock);
    ready = c->ready;
    if (ready)
        snprintf(addr, len, "%s", c->addr);
    pthread_mutex_unlock(&c->addr_lock);
    return ready;
}

/* ---- life --------------------------------------------------------------- */

struct store_conn *store_conn_create(struct event_base *base, const struct config *cfg,
                                     const struct store_node *node, struct evdns_base *dns,
                                     SSL_CTX *tls, const struct store_conn_hooks *hooks)
{
    struct store_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->base = base;
    c->cfg = cfg;
    c->node = *node;
    c->dns = dns;
    c->tls = tls;
    c->hooks = *hooks;
    c->backoff_ms = STORE_CONN_BACKOFF_MIN_MS;
    c->last_reply_ms = clock_mono_ms();
    TAILQ_INIT(&c->calls);
    if (pthread_mutex_init(&c->addr_lock, NULL) != 0) {
        free(c);
        return NULL;
    }
    conn_set_addr(c);
    evtimer_assign(&c->reconnect_ev, base, conn_on_reconnect, c);
    evtimer_assign(&c->attempt_ev, base, conn_on_attempt_deadline, c);
    evtimer_assign(&c->watchdog_ev, base, conn_on_watchdog, c);
    return c;
}

void store_conn_start(struct store_conn *c)
{
    struct timeval now = { 0, 0 };

    evtimer_add(&c->reconnect_ev, &now);
}

void store_conn_start_now(struct store_conn *c)
{
    conn_attempt(c);
}

bool store_conn_destroy(struct store_conn *c)
{
    bool cancelled = false;

    if (c == NULL)
        return false;
    c->destroying = true;
    event_del(&c->reconnect_ev);
    event_del(&c->attempt_ev);
    event_del(&c->watchdog_ev);
    if (c->resolve != NULL) {
        c->resolve->c = NULL;
        if (c->resolve->req != NULL)
            evdns_getaddrinfo_cancel(c->resolve->req);
        c->resolve = NULL;
        cancelled = true;
    }
    if (c->ac != NULL) {
        redisAsyncContext *ac = c->ac;

        conn_lost(c, ac, "shutting down"); /* quiet while destroying */
        redisAsyncFree(ac);                /* pending replies: STORE_LOST */
    }
    pthread_mutex_destroy(&c->addr_lock);
    free(c);
    return cancelled;
}

bool store_conn_ready(const struct store_conn *c)
{
    return c->ready;
}

bool store_conn_setting_up(const struct store_conn *c)
{
    return c->state == CONN_CONNECTING;
}

double store_conn_idle_ms(const struct store_conn *c)
{
    return clock_mono_ms() - c->last_reply_ms;
}

const char *store_conn_addr(const struct store_conn *c)
{
    return c->addr;
}

/* ---- TLS context and resolver ------------------------------------------- */

/* A passphrase-protected key is refused: OpenSSL's default would read the terminal. */
static int store_tls_no_passphrase(char *buf, int size, int rwflag, void *arg)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)arg;
    return 0;
}

/* "redis.tls.KEY FILE: OpenSSL's reason" into err; clears the error queue. */
static void store_tls_error(char *err, size_t errlen, const char *key, const char *file)
{
    unsigned long e = ERR_peek_last_error();
    const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;

    snprintf(err, errlen, "redis.tls.%s %s: %s", key, file != NULL ? file : "",
             reason != NULL ? reason : "cannot be used");
    ERR_clear_error();
}

SSL_CTX *store_tls_context(const struct config *cfg, char *err, size_t errlen)
{
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (ctx == NULL) {
        store_tls_error(err, errlen, "context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_default_passwd_cb(ctx, store_tls_no_passphrase);
    SSL_CTX_set_verify(ctx, cfg->redis_tls_verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (cfg->redis_tls_ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, cfg->redis_tls_ca_file, NULL) != 1) {
            store_tls_error(err, errlen, "ca_file", cfg->redis_tls_ca_file);
            goto failed;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        store_tls_error(err, errlen, "ca_file", "(the system's default CAs)");
        goto failed;
    }
    if (cfg->redis_tls_cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cfg->redis_tls_cert_file) != 1) {
            store_tls_error(err, errlen, "cert_file", cfg->redis_tls_cert_file);
            goto failed;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, cfg->redis_tls_key_file, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1) {
            store_tls_error(err, errlen, "key_file", cfg->redis_tls_key_file);
            goto failed;
        }
    }
    if (!cfg->redis_tls_verify && !atomic_flag_test_and_set(&warned))
        log_msg(LOG_WARN, "redis.tls.verify is false: any certificate is accepted from Redis, "
                "so a man in the middle can read and change every record");
    return ctx;
failed:
    SSL_CTX_free(ctx);
    return NULL;
}

struct evdns_base *store_dns_create(struct event_base *base)
{
    struct evdns_base *dns =
        evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);

    if (dns == NULL)
        log_msg(LOG_ERROR, "redis: cannot set up a resolver from /etc/resolv.conf: host names "
                "in redis.url cannot be resolved");
    return dns;
}
