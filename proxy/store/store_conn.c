/*
 * store_conn.c - one connection to one Redis node (store_conn_int.h): resolve the
 * name, connect, TLS, set up, check the role, reconnect with backoff.
 *
 * Each attempt: (1) a host name is resolved with evdns on the worker's loop
 * (never getaddrinfo, which blocks), bounded by redis.timeout; an address
 * literal or a unix socket skips this; (2) hiredis connects to the address
 * (connect_timeout = redis.timeout) and, for rediss://, TLS runs inside
 * hiredis' non-blocking reads and writes on an SSL of our SSL_CTX; (3) the
 * setup is pipelined: AUTH [user] password, SELECT db, CONFIG GET
 * maxmemory-policy (may be denied: then INFO memory, after the others, may
 * tell it), ROLE (must be "master"), PING. Steps 2
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
#include "store_conn_int.h"

static void conn_attempt(struct store_conn *c);
static void conn_restart_now(struct store_conn *c);

/* ---- failing and losing ------------------------------------------------ */

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
    conn_enter(c, CONN_CONNECTING);
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
    conn_enter(c, CONN_RESOLVING);
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
    conn_enter(c, CONN_LOCATING);
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
    conn_enter(c, CONN_IDLE);
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

/* ---- life --------------------------------------------------------------- */

struct store_conn *store_conn_create(struct event_base *base, const struct config *cfg,
                                     const struct store_auth *auth,
                                     const struct store_node *node, struct evdns_base *dns,
                                     SSL_CTX *tls, const struct store_conn_hooks *hooks)
{
    struct store_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->base = base;
    c->cfg = cfg;
    c->auth = auth;
    c->node = *node;
    if (node->host != NULL) {
        snprintf(c->host, sizeof(c->host), "%s", node->host);
        c->node.host = c->host;
    }
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
    conn_policy_join(c);
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
    conn_set_policy(c, POLICY_UNREAD);
    pthread_mutex_destroy(&c->addr_lock);
    free(c);
    return cancelled;
}

void store_conn_retire(struct store_conn *c)
{
    c->destroying = true;
    conn_enter(c, c->state); /* never ready again */
    event_del(&c->reconnect_ev);
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
