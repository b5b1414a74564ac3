/*
 * store_sentinel.c - where the primary is, asked of Redis Sentinel
 * (redis.sentinel; store_conn_int.h; docs/redis.md), as the
 * Sentinel client guidelines say
 * (https://redis.io/docs/latest/develop/reference/sentinel-clients/):
 *
 *   discovery  the data connection's locate hook, so it runs before every
 *              attempt: on every reconnect, and so whenever the connection
 *              drops (a "not the primary now" reply, a timeout, a closed
 *              connection, a failed ROLE check). The sentinels are asked in
 *              turn, `SENTINEL MASTER MASTER` (its ip, port and
 *              config-epoch), each on a connection of its own (name
 *              resolved with evdns, TLS, AUTH with the sentinels'
 *              credentials, PING) and each within redis.timeout; the first
 *              that names an address with a config-epoch no older than the
 *              one followed moves to the front of the list, and the data
 *              connection goes there, where ROLE must say master before
 *              anything is sent (store_conn.c).
 *   epoch      the config-epoch of the primary followed only grows: a
 *              sentinel that names another primary with an older epoch (a
 *              minority sentinel that has not heard of the failover, in a
 *              split) is not followed, in discovery or in the check.
 *   hint       one connection subscribed to +switch-master at one sentinel;
 *              a message for our master restarts the data connection (so
 *              discovery runs again) and moves that sentinel to the front.
 *              When the subscription drops, the next sentinel is subscribed
 *              to at once (after a backoff once a whole round failed). An
 *              idle subscription is PINGed every second, so a sentinel that
 *              stopped answering is left within redis.timeout.
 *   check      while the data connection is ready, one sentinel is asked
 *              again every second, on a connection kept open for it; when
 *              it names another primary whose ROLE says master (a sentinel
 *              that has not caught up may name a demoted one), the data
 *              connection starts over (discovery, that sentinel first). A hint is a message, and a worker cut off
 *              from the sentinels during the failover never gets it: without
 *              the check it stayed on the old primary, which takes writes
 *              (split brain) until Sentinel demotes it, about 10 s later. A
 *              sentinel that fails to answer is left for the next one, at
 *              once until a whole round failed, then from the next second.
 *
 * Everything runs on the worker's loop and never blocks it. Connections are
 * closed from events of our own, never from inside their callbacks.
 */
#include "store_conn_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "config.h"
#include "log.h"

#define SENTINEL_PING_MS 1000      /* an idle subscription is PINGed, the primary re-checked */
#define SENTINEL_BACKOFF_MIN_MS 100
#define SENTINEL_BACKOFF_MAX_MS 2000
#define SENTINEL_CHANNEL "+switch-master"

enum sentinel_answer { ASK_PENDING, ASK_FOUND, ASK_FAILED };

struct store_sentinel {
    struct event_base *base;
    const struct config *cfg;
    const struct store_auth *auth;  /* borrowed */
    struct evdns_base *dns;         /* borrowed */
    SSL_CTX *tls;                   /* borrowed */
    struct store_conn *data;        /* borrowed: the connection we locate */
    store_sentinel_followed_cb *followed;
    void *followed_arg;
    bool destroying;
    size_t order[CONFIG_MAX_SENTINELS]; /* indexes of cfg->redis_sentinels, who answered last first */
    char primary[300];              /* host:port the last discovery found; "" before the first */
    uint64_t epoch;                 /* its config-epoch (0 before the first) */

    /* discovery */
    bool asking;                    /* a discovery runs; its answer goes to data */
    size_t pos;                     /* order[pos] is being asked */
    struct store_conn *ask;         /* the connection to it, or NULL */
    enum sentinel_answer answer;
    struct sentinel_master found;
    char why[400];                  /* why the sentinel asked gave no address */
    char tried[1200];               /* each sentinel's why, for the summary */
    struct event ask_deadline;      /* redis.timeout for each sentinel */
    struct event ask_step;          /* from the loop: close the asked connection, go on */

    /* +switch-master */
    size_t sub_index;               /* cfg->redis_sentinels.at[sub_index] is subscribed to */
    struct store_conn *sub;
    bool sub_up;                    /* the sentinel confirmed the subscription */
    bool sub_ping_in_flight;
    double sub_sent_ms;             /* when SUBSCRIBE went out (monotonic) */
    unsigned sub_failures;          /* in a row, without a subscription */
    unsigned sub_backoff_ms;
    struct event sub_restart;       /* close the subscription's connection, open the next */
    struct event sub_tick;          /* every SENTINEL_PING_MS: PING an idle subscription, and
                                       re-check the primary */

    /* the primary re-checked while the data connection is ready */
    size_t check_index;             /* cfg->redis_sentinels[check_index] is asked */
    struct store_conn *check;       /* the connection to it, or NULL */
    bool check_in_flight;           /* the question is out */
    unsigned check_failures;        /* in a row */
    struct event check_restart;     /* from the loop: close the check's connection, go on */
    struct store_conn *confirm;     /* to the other primary a sentinel named: its ROLE, or NULL */
    char confirm_why[700];          /* who named it, for the log */
    struct event confirm_done;      /* from the loop: close the confirm's connection */
};

/* "host:port" into buf (len bytes), "[host]:port" for IPv6: primaries compared and logged. */
static void sentinel_addr(char *buf, size_t len, const char *host, unsigned port)
{
    snprintf(buf, len, strchr(host, ':') != NULL ? "[%s]:%u" : "%s:%u", host, port);
}

/* "host:port" of sentinel i ([host]:port for IPv6), for log lines. */
static void sentinel_name(const struct store_sentinel *sn, size_t i, char *buf, size_t len)
{
    const struct endpoint *ep = &sn->cfg->redis_sentinels.at[i];

    sentinel_addr(buf, len, ep->host, ep->port);
}

/* Sentinel i is asked first from now on (it answered, or told us of a failover). */
static void sentinel_to_front(struct store_sentinel *sn, size_t i)
{
    size_t at = 0;

    while (at < sn->cfg->redis_sentinels.n && sn->order[at] != i)
        at++;
    if (at == sn->cfg->redis_sentinels.n)
        return;
    memmove(&sn->order[1], &sn->order[0], at * sizeof(sn->order[0]));
    sn->order[0] = i;
}

static struct store_conn *sentinel_connect(struct store_sentinel *sn, size_t i,
                                           const struct store_conn_hooks *hooks)
{
    const struct endpoint *ep = &sn->cfg->redis_sentinels.at[i];
    const struct store_node node = { ep->host, ep->port, NULL, STORE_NODE_SENTINEL };
    struct store_conn *c = store_conn_create(sn->base, sn->cfg, sn->auth, &node, sn->dns,
                                             sn->tls, hooks);

    if (c != NULL)
        store_conn_start(c);
    return c;
}

/* Close *c (from the loop, never inside its own callbacks) and forget it; NULL is fine. */
static void sentinel_close(struct store_conn **c)
{
    struct store_conn *old = *c;

    *c = NULL;
    store_conn_destroy(old);
}

/* ---- discovery ---------------------------------------------------------- */

/* The sentinel asked gave no address: go on from the loop (never inside its callbacks). */
static void sentinel_ask_failed(struct store_sentinel *sn, const char *why)
{
    if (sn->destroying || sn->answer != ASK_PENDING)
        return;
    sn->answer = ASK_FAILED;
    snprintf(sn->why, sizeof(sn->why), "%s", why);
    event_active(&sn->ask_step, EV_TIMEOUT, 0);
}

/*
 * The reply (st, r) to SENTINEL MASTER on c into *m, true; or false with
 * why (whylen bytes): no answer, an error, a master the sentinel does not
 * know, or a primary other than ours named with a config-epoch older than
 * the one followed (a sentinel that has not heard of the last failover).
 */
static bool sentinel_read_master(const struct store_sentinel *sn, const struct store_conn *c,
                                 enum store_status st, const redisReply *r,
                                 struct sentinel_master *m, char *why, size_t whylen)
{
    char to[300];

    if (st != STORE_OK) {
        snprintf(why, whylen, "%s", st == STORE_TIMEOUT ? "no answer within redis.timeout"
                                                        : store_conn_last_error(c));
        return false;
    }
    if (!store_sentinel_master_read(r, sn->cfg->redis_sentinel_master, m, why, whylen))
        return false;
    sentinel_addr(to, sizeof(to), m->host, m->port);
    if (m->epoch < sn->epoch && strcmp(to, sn->primary) != 0) {
        snprintf(why, whylen, "names %.100s with config-epoch %llu, older than the primary "
                 "followed (%.100s, config-epoch %llu): not followed", to,
                 (unsigned long long)m->epoch, sn->primary, (unsigned long long)sn->epoch);
        return false;
    }
    return true;
}

/* Ask for our master's address on c (ready); cb gets the reply. 0, or -1 when not sent. */
static int sentinel_send_question(struct store_sentinel *sn, struct store_conn *c,
                                  store_conn_reply_cb *cb)
{
    const char *master = sn->cfg->redis_sentinel_master;
    const char *argv[] = { "SENTINEL", "MASTER", master };
    const size_t argvlen[] = { 8, 6, strlen(master) };

    return store_conn_send(c, cb, sn, 3, argv, argvlen);
}

/* The reply to SENTINEL MASTER: the primary's fields, or an error for an unknown master. */
static void sentinel_on_ask_reply(enum store_status st, const redisReply *r, void *arg)
{
    struct store_sentinel *sn = arg;
    char why[400];

    if (sn->destroying || sn->answer != ASK_PENDING)
        return;
    if (!sentinel_read_master(sn, sn->ask, st, r, &sn->found, why, sizeof(why))) {
        sentinel_ask_failed(sn, why);
        return;
    }
    sn->answer = ASK_FOUND;
    event_active(&sn->ask_step, EV_TIMEOUT, 0);
}

static void sentinel_on_ask_ready(void *owner)
{
    struct store_sentinel *sn = owner;

    if (sentinel_send_question(sn, sn->ask, sentinel_on_ask_reply) != 0)
        sentinel_ask_failed(sn, "the command could not be sent");
}

static void sentinel_on_ask_down(void *owner)
{
    struct store_sentinel *sn = owner;

    sentinel_ask_failed(sn, store_conn_last_error(sn->ask));
}

static void sentinel_on_ask_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct store_sentinel *sn = arg;
    char why[100];

    (void)fd;
    (void)what;
    snprintf(why, sizeof(why), "no address within redis.timeout (%llu ms)",
             (unsigned long long)sn->cfg->redis_timeout_ms);
    sentinel_ask_failed(sn, why);
}

/* Ask order[pos], within redis.timeout. */
static void sentinel_ask(struct store_sentinel *sn)
{
    const struct store_conn_hooks hooks = { sentinel_on_ask_ready, sentinel_on_ask_down, sn,
                                            NULL };
    struct timeval tv = clock_ms_to_timeval(sn->cfg->redis_timeout_ms);

    sn->answer = ASK_PENDING;
    sn->why[0] = '\0';
    sn->ask = sentinel_connect(sn, sn->order[sn->pos], &hooks);
    if (sn->ask == NULL) {
        sentinel_ask_failed(sn, "out of memory");
        return;
    }
    evtimer_add(&sn->ask_deadline, &tv);
}

/* A sentinel named the primary: it goes first from now on, the data connection goes there. */
static void sentinel_found(struct store_sentinel *sn, const char *sentinel)
{
    char to[300];

    sentinel_addr(to, sizeof(to), sn->found.host, sn->found.port);
    sentinel_to_front(sn, sn->order[sn->pos]);
    if (sn->primary[0] != '\0' && strcmp(sn->primary, to) != 0) {
        log_msg(LOG_WARN, "redis sentinel %s: the primary of %s is now %s (was %s; "
                "config-epoch %llu): following the failover", sentinel,
                sn->cfg->redis_sentinel_master, to, sn->primary,
                (unsigned long long)sn->found.epoch);
        if (sn->followed != NULL)
            sn->followed(sn->primary, to, sn->followed_arg);
    } else {
        log_msg(LOG_INFO, "redis sentinel %s: the primary of %s is %s", sentinel,
                sn->cfg->redis_sentinel_master, to);
    }
    snprintf(sn->primary, sizeof(sn->primary), "%s", to);
    if (sn->found.epoch > sn->epoch)
        sn->epoch = sn->found.epoch;
    sn->asking = false;
    store_conn_located(sn->data, sn->found.host, sn->found.port);
}

/* The asked sentinel answered or failed: close its connection, then report or ask the next. */
static void sentinel_on_ask_step(evutil_socket_t fd, short what, void *arg)
{
    struct store_sentinel *sn = arg;
    char sentinel[300], why[1600];
    size_t used;

    (void)fd;
    (void)what;
    event_del(&sn->ask_deadline);
    sentinel_close(&sn->ask);
    if (!sn->asking)
        return;
    sentinel_name(sn, sn->order[sn->pos], sentinel, sizeof(sentinel));
    if (sn->answer == ASK_FOUND) {
        sentinel_found(sn, sentinel);
        return;
    }
    used = strlen(sn->tried);
    snprintf(sn->tried + used, sizeof(sn->tried) - used, "%s%s: %s", used > 0 ? "; " : "",
             sentinel, sn->why);
    if (++sn->pos < sn->cfg->redis_sentinels.n) {
        log_msg(LOG_WARN, "redis sentinel %s: %s; asking the next sentinel", sentinel, sn->why);
        sentinel_ask(sn);
        return;
    }
    sn->asking = false;
    snprintf(why, sizeof(why), "no sentinel named the primary of %s (%s)",
             sn->cfg->redis_sentinel_master, sn->tried);
    store_conn_locate_failed(sn->data, why);
}

void store_sentinel_locate(struct store_sentinel *sn, struct store_conn *data)
{
    (void)data; /* always sn->data */
    if (sn->asking || sn->destroying)
        return;
    sn->asking = true;
    sn->pos = 0;
    sn->tried[0] = '\0';
    sentinel_ask(sn);
}

/* ---- the +switch-master hint -------------------------------------------- */

static void sentinel_sub_open(struct store_sentinel *sn);
static void sentinel_check(struct store_sentinel *sn);

/*
 * The subscription is gone (why): subscribe at the next sentinel from the
 * loop, at once, or after a backoff once every sentinel failed in a row.
 */
static void sentinel_sub_lost(struct store_sentinel *sn, const char *why)
{
    char sentinel[300];
    struct timeval tv = { 0, 0 };

    if (sn->destroying || evtimer_pending(&sn->sub_restart, NULL))
        return;
    sentinel_name(sn, sn->sub_index, sentinel, sizeof(sentinel));
    /* once per streak of failures: a sentinel that refuses it (NOPERM) is worth a warning */
    log_msg(sn->sub_up || sn->sub_failures == 0 ? LOG_WARN : LOG_DEBUG, "redis sentinel %s: the "
            "%s subscription %s: %s; subscribing at the next sentinel", sentinel,
            SENTINEL_CHANNEL, sn->sub_up ? "was lost" : "failed", why);
    sn->sub_up = false;
    sn->sub_ping_in_flight = false;
    if (++sn->sub_failures >= sn->cfg->redis_sentinels.n) {
        tv = clock_ms_to_timeval(sn->sub_backoff_ms);
        sn->sub_backoff_ms = sn->sub_backoff_ms * 2 > SENTINEL_BACKOFF_MAX_MS
                                 ? SENTINEL_BACKOFF_MAX_MS
                                 : sn->sub_backoff_ms * 2;
    }
    evtimer_add(&sn->sub_restart, &tv);
}

/* Whether the data connection is ready on host:port (a sentinel's answer) already. */
static bool sentinel_data_on(struct store_sentinel *sn, const char *host, unsigned port)
{
    char to[300], now[300];

    if (!store_conn_ready_addr(sn->data, now, sizeof(now)))
        return false;
    sentinel_addr(to, sizeof(to), host, port);
    return strcmp(to, now) == 0;
}

/*
 * Whether the data connection is ready on the new primary of a
 * +switch-master message already (rest: "<old ip> <old port> <new ip> <new
 * port>", NUL-terminated): a discovery got there first, nothing to redo.
 */
static bool sentinel_already_there(struct store_sentinel *sn, const char *rest)
{
    char old_ip[256], new_ip[256];
    unsigned old_port, new_port;

    return sscanf(rest, "%255s %u %255s %u", old_ip, &old_port, new_ip, &new_port) == 4 &&
           sentinel_data_on(sn, new_ip, new_port);
}

/*
 * A message on +switch-master: "<master> <old ip> <old port> <new ip> <new
 * port>". Ours: the data connection starts over (discovery asks again,
 * this sentinel first: it knows of the failover).
 */
static void sentinel_on_switch(const char *channel, const char *payload, size_t len, void *arg)
{
    struct store_sentinel *sn = arg;
    const char *master = sn->cfg->redis_sentinel_master;
    size_t mlen = strlen(master);
    char sentinel[300], why[700];

    if (strcmp(channel, SENTINEL_CHANNEL) != 0)
        return;
    sentinel_name(sn, sn->sub_index, sentinel, sizeof(sentinel));
    if (payload == NULL) { /* the sentinel confirmed the subscription */
        sn->sub_up = true;
        sn->sub_failures = 0;
        sn->sub_backoff_ms = SENTINEL_BACKOFF_MIN_MS;
        log_msg(LOG_INFO, "redis sentinel %s: subscribed to %s for %s", sentinel,
                SENTINEL_CHANNEL, master);
        return;
    }
    if (len <= mlen || memcmp(payload, master, mlen) != 0 || payload[mlen] != ' ')
        return;
    if (sentinel_already_there(sn, payload + mlen + 1))
        return;
    snprintf(why, sizeof(why), "sentinel %s said %s %.*s", sentinel, SENTINEL_CHANNEL,
             (int)(len < 300 ? len : 300), payload);
    log_msg(LOG_WARN, "redis %s; asking the sentinels for the primary again", why);
    sentinel_to_front(sn, sn->sub_index);
    store_conn_restart(sn->data, why);
}

static void sentinel_on_sub_ready(void *owner)
{
    struct store_sentinel *sn = owner;

    if (store_conn_subscribe(sn->sub, SENTINEL_CHANNEL, sentinel_on_switch, sn) != 0)
        sentinel_sub_lost(sn, "SUBSCRIBE could not be sent");
    sn->sub_sent_ms = clock_mono_ms();
}

static void sentinel_on_sub_down(void *owner)
{
    struct store_sentinel *sn = owner;

    sentinel_sub_lost(sn, store_conn_last_error(sn->sub));
}

static void sentinel_sub_open(struct store_sentinel *sn)
{
    const struct store_conn_hooks hooks = { sentinel_on_sub_ready, sentinel_on_sub_down, sn,
                                            NULL };

    sn->sub = sentinel_connect(sn, sn->sub_index, &hooks);
    if (sn->sub == NULL)
        sentinel_sub_lost(sn, "out of memory");
}

static void sentinel_on_sub_restart(evutil_socket_t fd, short what, void *arg)
{
    struct store_sentinel *sn = arg;

    (void)fd;
    (void)what;
    sentinel_close(&sn->sub);
    sn->sub_index = (sn->sub_index + 1) % sn->cfg->redis_sentinels.n;
    sentinel_sub_open(sn);
}

/* PING's reply (["pong", ""] on a subscribed connection); a failure drops the connection. */
static void sentinel_on_sub_pong(enum store_status st, const redisReply *r, void *arg)
{
    struct store_sentinel *sn = arg;

    (void)st;
    (void)r;
    if (!sn->destroying)
        sn->sub_ping_in_flight = false;
}

static void sentinel_on_sub_tick(evutil_socket_t fd, short what, void *arg)
{
    struct store_sentinel *sn = arg;
    static const char *const argv[] = { "PING" };
    static const size_t argvlen[] = { 4 };

    (void)fd;
    (void)what;
    sentinel_check(sn);
    if (sn->sub == NULL || !store_conn_ready(sn->sub))
        return;
    if (!sn->sub_up) { /* SUBSCRIBE sent: the confirmation is due within redis.timeout */
        if (clock_mono_ms() - sn->sub_sent_ms > (double)sn->cfg->redis_timeout_ms)
            sentinel_sub_lost(sn, "no confirmation of SUBSCRIBE within redis.timeout");
        return;
    }
    if (sn->sub_ping_in_flight || store_conn_idle_ms(sn->sub) < SENTINEL_PING_MS)
        return;
    if (store_conn_send(sn->sub, sentinel_on_sub_pong, sn, 1, (const char **)argv, argvlen) == 0)
        sn->sub_ping_in_flight = true;
}

/* ---- the primary re-checked ------------------------------------------- */

/*
 * The sentinel asked gave no answer (why, at debug level: while the
 * sentinels are unreachable this runs every second): close its connection
 * from the loop and ask the next one, at once until a whole round failed.
 */
static void sentinel_check_failed(struct store_sentinel *sn, const char *why)
{
    char sentinel[300];
    struct timeval now = { 0, 0 };

    if (sn->destroying || evtimer_pending(&sn->check_restart, NULL))
        return;
    sentinel_name(sn, sn->check_index, sentinel, sizeof(sentinel));
    log_msg(LOG_DEBUG, "redis sentinel %s: re-checking the primary of %s: %s", sentinel,
            sn->cfg->redis_sentinel_master, why);
    sn->check_in_flight = false;
    sn->check_failures++;
    evtimer_add(&sn->check_restart, &now);
}

/* The confirmation is over: its connection is closed from the loop. */
static void sentinel_confirm_over(struct store_sentinel *sn)
{
    if (!sn->destroying)
        event_active(&sn->confirm_done, EV_TIMEOUT, 0);
}

/*
 * ROLE of the primary a sentinel named: master moves the data connection
 * there (discovery runs again, that sentinel first); anything else leaves it
 * where it is (a sentinel that has not caught up yet names a demoted node:
 * following it would drop a good connection every second).
 */
static void sentinel_on_confirm_role(enum store_status st, const redisReply *r, void *arg)
{
    struct store_sentinel *sn = arg;
    char what[300];

    if (sn->destroying)
        return;
    if (st != STORE_OK || !store_role_is_primary(r, what, sizeof(what))) {
        log_msg(LOG_DEBUG, "redis %s, but %s: staying", sn->confirm_why,
                st != STORE_OK ? "its ROLE did not answer" : what);
    } else if (!sn->asking && store_conn_ready(sn->data)) {
        log_msg(LOG_WARN, "redis %s; asking the sentinels for the primary again",
                sn->confirm_why);
        sentinel_to_front(sn, sn->check_index);
        store_conn_restart(sn->data, sn->confirm_why);
    }
    sentinel_confirm_over(sn);
}

static void sentinel_on_confirm_ready(void *owner)
{
    struct store_sentinel *sn = owner;
    static const char *const argv[] = { "ROLE" };
    static const size_t argvlen[] = { 4 };

    if (store_conn_send(sn->confirm, sentinel_on_confirm_role, sn, 1, (const char **)argv,
                        argvlen) != 0)
        sentinel_confirm_over(sn);
}

static void sentinel_on_confirm_down(void *owner)
{
    struct store_sentinel *sn = owner;

    log_msg(LOG_DEBUG, "redis %s, but it cannot be reached: %s", sn->confirm_why,
            store_conn_last_error(sn->confirm));
    sentinel_confirm_over(sn);
}

static void sentinel_on_confirm_done(evutil_socket_t fd, short what, void *arg)
{
    struct store_sentinel *sn = arg;

    (void)fd;
    (void)what;
    sentinel_close(&sn->confirm);
}

/* A sentinel named host:port, not our primary: its ROLE decides (one at a time). */
static void sentinel_confirm(struct store_sentinel *sn, const char *host, uint16_t port)
{
    const struct store_node node = { host, port, NULL, STORE_NODE_PROBE };
    const struct store_conn_hooks hooks = { sentinel_on_confirm_ready, sentinel_on_confirm_down,
                                            sn, NULL };

    if (sn->confirm != NULL)
        return;
    sn->confirm = store_conn_create(sn->base, sn->cfg, sn->auth, &node, sn->dns, sn->tls,
                                    &hooks);
    if (sn->confirm != NULL)
        store_conn_start(sn->confirm);
}

static void sentinel_on_check_reply(enum store_status st, const redisReply *r, void *arg)
{
    struct store_sentinel *sn = arg;
    struct sentinel_master m;
    char why[700], sentinel[300];

    if (sn->destroying || sn->check == NULL)
        return; /* lost as its connection closes (sentinel_close) */
    sn->check_in_flight = false;
    if (!sentinel_read_master(sn, sn->check, st, r, &m, why, sizeof(why))) {
        sentinel_check_failed(sn, why);
        return;
    }
    sn->check_failures = 0;
    /* a discovery runs, or the connection is on its way elsewhere: that answer decides */
    if (sn->asking || !store_conn_ready(sn->data) || sentinel_data_on(sn, m.host, m.port))
        return;
    sentinel_name(sn, sn->check_index, sentinel, sizeof(sentinel));
    snprintf(sn->confirm_why, sizeof(sn->confirm_why), "sentinel %s names %s:%u as the "
             "primary of %s (config-epoch %llu)", sentinel, m.host, (unsigned)m.port,
             sn->cfg->redis_sentinel_master, (unsigned long long)m.epoch);
    sentinel_confirm(sn, m.host, m.port);
}

static void sentinel_on_check_ready(void *owner)
{
    sentinel_check(owner);
}

static void sentinel_on_check_down(void *owner)
{
    struct store_sentinel *sn = owner;

    sentinel_check_failed(sn, store_conn_last_error(sn->check));
}

static void sentinel_on_check_restart(evutil_socket_t fd, short what, void *arg)
{
    struct store_sentinel *sn = arg;

    (void)fd;
    (void)what;
    sentinel_close(&sn->check);
    sn->check_index = (sn->check_index + 1) % sn->cfg->redis_sentinels.n;
    if (sn->check_failures % sn->cfg->redis_sentinels.n != 0)
        sentinel_check(sn); /* else the next second's */
}

/*
 * Ask again where the primary is, while the data connection is ready and no
 * discovery runs: on the check's connection once it is set up (opened now
 * when there is none).
 */
static void sentinel_check(struct store_sentinel *sn)
{
    const struct store_conn_hooks hooks = { sentinel_on_check_ready, sentinel_on_check_down, sn,
                                            NULL };

    if (sn->destroying || sn->asking || sn->check_in_flight || sn->confirm != NULL ||
        !store_conn_ready(sn->data) || evtimer_pending(&sn->check_restart, NULL))
        return;
    if (sn->check == NULL) {
        sn->check = sentinel_connect(sn, sn->check_index, &hooks);
        if (sn->check == NULL)
            sentinel_check_failed(sn, "out of memory");
        return; /* asked once it is ready */
    }
    if (!store_conn_ready(sn->check))
        return; /* being set up */
    if (sentinel_send_question(sn, sn->check, sentinel_on_check_reply) == 0)
        sn->check_in_flight = true;
    else
        sentinel_check_failed(sn, "the command could not be sent");
}

/* ---- life --------------------------------------------------------------- */

struct store_sentinel *store_sentinel_create(struct event_base *base, const struct config *cfg,
                                             const struct store_auth *auth,
                                             struct evdns_base *dns, SSL_CTX *tls,
                                             struct store_conn *data,
                                             store_sentinel_followed_cb *followed, void *arg)
{
    struct store_sentinel *sn = calloc(1, sizeof(*sn));
    struct timeval tick = clock_ms_to_timeval(SENTINEL_PING_MS);

    if (sn == NULL)
        return NULL;
    sn->base = base;
    sn->cfg = cfg;
    sn->auth = auth;
    sn->dns = dns;
    sn->tls = tls;
    sn->data = data;
    sn->followed = followed;
    sn->followed_arg = arg;
    for (size_t i = 0; i < cfg->redis_sentinels.n; i++)
        sn->order[i] = i;
    sn->sub_backoff_ms = SENTINEL_BACKOFF_MIN_MS;
    evtimer_assign(&sn->ask_deadline, base, sentinel_on_ask_deadline, sn);
    event_assign(&sn->ask_step, base, -1, 0, sentinel_on_ask_step, sn);
    evtimer_assign(&sn->sub_restart, base, sentinel_on_sub_restart, sn);
    evtimer_assign(&sn->check_restart, base, sentinel_on_check_restart, sn);
    event_assign(&sn->confirm_done, base, -1, 0, sentinel_on_confirm_done, sn);
    event_assign(&sn->sub_tick, base, -1, EV_PERSIST, sentinel_on_sub_tick, sn);
    event_add(&sn->sub_tick, &tick);
    sentinel_sub_open(sn);
    return sn;
}

bool store_sentinel_destroy(struct store_sentinel *sn)
{
    bool pending = false;

    if (sn == NULL)
        return false;
    sn->destroying = true;
    event_del(&sn->ask_deadline);
    event_del(&sn->ask_step);
    event_del(&sn->sub_restart);
    event_del(&sn->sub_tick);
    event_del(&sn->check_restart);
    event_del(&sn->confirm_done);
    if (sn->ask != NULL)
        pending |= store_conn_destroy(sn->ask);
    if (sn->check != NULL)
        pending |= store_conn_destroy(sn->check);
    if (sn->confirm != NULL)
        pending |= store_conn_destroy(sn->confirm);
    if (sn->sub != NULL)
        pending |= store_conn_destroy(sn->sub);
    free(sn);
    return pending;
}
