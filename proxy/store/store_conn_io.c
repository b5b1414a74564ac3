/*
 * store_conn_io.c - one connection's state (conn_enter), how it fails and
 * is lost, its commands and their watchdog, its subscription, and what
 * other files and threads read of it. store_conn.c's header says how a
 * connection behaves.
 */
#include "store_conn_int.h"

void conn_enter(struct store_conn *c, enum store_conn_state to)
{
    c->state = to;
    c->ready = to == CONN_READY && !c->destroying;
}

void conn_schedule_reconnect(struct store_conn *c)
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
void conn_fail(struct store_conn *c, const char *why)
{
    conn_enter(c, CONN_IDLE);
    event_del(&c->attempt_ev);
    snprintf(c->why, sizeof(c->why), "%s", why);
    if (c->destroying)
        return;
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
void conn_lost(struct store_conn *c, const redisAsyncContext *ac, const char *why)
{
    bool was_ready = c->state == CONN_READY;

    if (ac == NULL || c->ac != ac)
        return;
    c->ac = NULL;
    c->ssl = NULL;
    conn_enter(c, CONN_IDLE);
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
bool conn_tls_reason(const struct store_conn *c, const SSL *ssl, char *buf, size_t len)
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
void conn_reason(const struct store_conn *c, const redisAsyncContext *ac, char *buf,
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

/* Arm the watchdog for the oldest unanswered command, unless it is armed. */
void conn_watchdog_arm(struct store_conn *c)
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

void conn_on_watchdog(evutil_socket_t fd, short what, void *arg)
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

    if (c->state != CONN_READY || c->ac == NULL || c->destroying)
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

const char *store_conn_replid(const struct store_conn *c)
{
    return c->replid;
}

bool store_conn_promoted(const struct store_conn *c)
{
    return c->promoted;
}

bool store_conn_ready(const struct store_conn *c)
{
    return c->ready;
}

bool store_conn_setting_up(const struct store_conn *c)
{
    return c->state == CONN_CONNECTING && !c->destroying;
}

double store_conn_idle_ms(const struct store_conn *c)
{
    return clock_mono_ms() - c->last_reply_ms;
}

const char *store_conn_addr(const struct store_conn *c)
{
    return c->addr;
}
