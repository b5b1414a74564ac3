/*
 * store.c - Redis through hiredis async. The only file that includes hiredis.
 *
 * hiredis 0.14 has no command timeouts, so each command carries its own
 * timer. A command that times out is reported at once; its late reply is
 * swallowed. A timeout also drops the connection (a stalled Redis would
 * otherwise pile up commands forever) and the store reconnects with backoff.
 * A connection that has carried no reply for STORE_HEALTH_MS gets a timed
 * PING, so a stalled Redis is noticed (readiness) without client traffic.
 *
 * A new connection is set up first (AUTH, SELECT, CONFIG GET, PING), and the
 * store is ready only once that succeeded: a client command sent right behind
 * a failed AUTH or SELECT would run unauthenticated or in db 0. Client commands
 * submitted meanwhile wait in a queue (each still bounded by redis.timeout)
 * and are sent once the setup succeeded, or fail with STORE_UNAVAILABLE.
 */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/time.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "record.h"

#define STORE_BACKOFF_MIN_MS 100
#define STORE_BACKOFF_MAX_MS 2000
#define STORE_HEALTH_MS 1000

enum store_script {
    SCRIPT_REPLACE, SCRIPT_RELEASE, SCRIPT_TAKEOVER, SCRIPT_DELETE_UNCHANGED, SCRIPT_COUNT
};

/*
 * Every later change of a record is a compare-and-set on state 'C' and the
 * owner token. The scripts read both by their offsets in record.h; "%s"
 * in a template stands for that test (store_scripts_build fills it in).
 */
#define STORE_SCRIPT_MAX 512
static const char *const store_script_template[SCRIPT_COUNT] = {
    [SCRIPT_REPLACE] =
        "local v = redis.call('GET', KEYS[1])\n"
        "if not v or %s then\n"
        "  return 0\n"
        "end\n"
        "if ARGV[3] == '0' then\n"
        "  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')\n"
        "else\n"
        "  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
        "end\n"
        "return 1\n",
    [SCRIPT_RELEASE] =
        "local v = redis.call('GET', KEYS[1])\n"
        "if not v or %s then\n"
        "  return 0\n"
        "end\n"
        "redis.call('DEL', KEYS[1])\n"
        "return 1\n",
    [SCRIPT_TAKEOVER] =
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
        "  return 0\n"
        "end\n"
        "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
        "return 1\n",
    [SCRIPT_DELETE_UNCHANGED] =
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
        "  return 0\n"
        "end\n"
        "redis.call('DEL', KEYS[1])\n"
        "return 1\n",
};

/* The setup commands of a new connection, in the order they are sent. */
enum store_setup_step { SETUP_AUTH, SETUP_SELECT, SETUP_POLICY, SETUP_PING };
static const char *const store_setup_name[] = {
    [SETUP_AUTH] = "AUTH", [SETUP_SELECT] = "SELECT", [SETUP_POLICY] = "CONFIG GET",
    [SETUP_PING] = "PING",
};

struct store_cmd;
TAILQ_HEAD(store_cmd_queue, store_cmd);

struct store {
    struct event_base *base;
    const struct config *cfg;
    char addr[300];             /* host:port or the unix path, for log lines */
    redisAsyncContext *ac;      /* NULL while disconnected */
    _Atomic bool connected;     /* the setup of ac succeeded (AUTH, SELECT, PING answered):
                                   a TCP connect alone is not enough, the kernel completes
                                   it for a stalled Redis too; ac is set while it holds;
                                   read by other threads (metrics, readiness) */
    struct event setup_ev;      /* the setup's deadline, redis.timeout after connecting */
    struct store_cmd_queue queued; /* client commands waiting for the setup, in order */
    bool destroying;
    unsigned backoff_ms;        /* reset once Redis answers on a new connection */
    struct event reconnect_ev;
    struct event health_ev;     /* every STORE_HEALTH_MS: PING an idle connection */
    struct timeval last_reply;  /* when a reply last came back */
    bool health_in_flight;
    char script_text[SCRIPT_COUNT][STORE_SCRIPT_MAX];
    char script_sha[SCRIPT_COUNT][SHA_DIGEST_LENGTH * 2 + 1];
    store_observer *observer;
    void *observer_arg;
};

enum store_reply_kind { REPLY_VALUE, REPLY_CAS, REPLY_INT, REPLY_HEALTH };

struct store_cmd {
    struct store *s;
    enum store_reply_kind kind;
    union {
        store_value_cb *value;
        store_cas_cb *cas;
        store_int_cb *integer;
    } cb;
    void *arg;
    struct event timer;         /* the timeout, and the deferred failure report */
    bool timer_armed;
    bool reported;              /* the caller's callback has run */
    bool in_redis;              /* hiredis holds privdata and will call back */
    bool queued;                /* in s->queued, waiting for the connection's setup */
    TAILQ_ENTRY(store_cmd) link;
    int script;                 /* enum store_script, or -1 */
    struct timeval submitted;
    int argc;                   /* saved argv of a script (for the NOSCRIPT resend) or of a
                                   queued command */
    char **argv;
    size_t *argvlen;
};

static void store_connect(struct store *s);

static void store_cmd_free(struct store_cmd *cmd)
{
    if (cmd->timer_armed)
        event_del(&cmd->timer);
    for (int i = 0; i < cmd->argc; i++)
        free(cmd->argv[i]);
    free(cmd->argv);
    free(cmd->argvlen);
    free(cmd);
}

/* Run the caller's callback once; later outcomes of the same command are swallowed. */
static void store_cmd_report(struct store_cmd *cmd, enum store_status st, const redisReply *r)
{
    if (cmd->reported)
        return;
    cmd->reported = true;
    if (cmd->s != NULL && cmd->s->observer != NULL) {
        struct timeval now, d;
        gettimeofday(&now, NULL);
        timersub(&now, &cmd->submitted, &d);
        cmd->s->observer((double)d.tv_sec + (double)d.tv_usec / 1e6, st == STORE_OK,
                         cmd->s->observer_arg);
    }
    switch (cmd->kind) {
    case REPLY_VALUE:
        if (st == STORE_OK && r->type == REDIS_REPLY_STRING)
            cmd->cb.value(st, r->str, r->len, cmd->arg);
        else
            cmd->cb.value(st, NULL, 0, cmd->arg);
        break;
    case REPLY_CAS:
        cmd->cb.cas(st, st == STORE_OK && r->integer == 1, cmd->arg);
        break;
    case REPLY_INT:
        cmd->cb.integer(st, st == STORE_OK ? r->integer : 0, cmd->arg);
        break;
    case REPLY_HEALTH:
        if (cmd->s != NULL)
            cmd->s->health_in_flight = false;
        break;
    }
}

static bool store_reply_fits(const struct store_cmd *cmd, const redisReply *r)
{
    switch (cmd->kind) {
    case REPLY_VALUE:
        return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL;
    case REPLY_CAS:
    case REPLY_INT:
        return r->type == REDIS_REPLY_INTEGER;
    case REPLY_HEALTH:
        return r->type == REDIS_REPLY_STATUS;
    }
    return false;
}

/*
 * The connection is gone (or going): not ready, and the commands that waited
 * for its setup fail, never sent. Their callbacks may submit again: s->ac is
 * already NULL then, so those fail from the event loop.
 */
static void store_forget_connection(struct store *s)
{
    s->ac = NULL;
    s->connected = false;
    event_del(&s->setup_ev);
    while (!TAILQ_EMPTY(&s->queued)) {
        struct store_cmd *cmd = TAILQ_FIRST(&s->queued);
        TAILQ_REMOVE(&s->queued, cmd, link);
        cmd->queued = false;
        store_cmd_report(cmd, STORE_UNAVAILABLE, NULL);
        store_cmd_free(cmd);
    }
}

/* Forget the connection; hiredis calls every pending callback with a NULL reply. */
static void store_drop_connection(struct store *s, const char *why)
{
    redisAsyncContext *ac = s->ac;

    if (ac == NULL)
        return;
    log_msg(LOG_WARN, "redis %s: dropping the connection: %s", s->addr, why);
    store_forget_connection(s);
    redisAsyncFree(ac); /* deferred by hiredis when called from one of its callbacks */
}

static void store_schedule_reconnect(struct store *s)
{
    struct timeval tv;

    if (s->destroying || event_pending(&s->reconnect_ev, EV_TIMEOUT, NULL))
        return;
    tv = clock_ms_to_timeval(s->backoff_ms);
    evtimer_add(&s->reconnect_ev, &tv);
    s->backoff_ms = s->backoff_ms * 2 > STORE_BACKOFF_MAX_MS ? STORE_BACKOFF_MAX_MS
                                                               : s->backoff_ms * 2;
}

static int store_send(struct store_cmd *cmd, int argc, const char **argv, const size_t *argvlen);

static void store_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct store_cmd *cmd = privdata;
    redisReply *r = reply;
    struct store *s = ac->data;

    cmd->in_redis = false;
    if (r != NULL && s != NULL && s->ac == ac)
        gettimeofday(&s->last_reply, NULL);
    if (r == NULL) {
        store_cmd_report(cmd, STORE_LOST, NULL);
    } else if (r->type == REDIS_REPLY_ERROR && cmd->script >= 0 && !cmd->reported &&
               strncmp(r->str, "NOSCRIPT", 8) == 0 && s != NULL && s->ac == ac) {
        /* A restarted or replaced Redis has an empty script cache: send the body once. */
        const char *argv0 = cmd->argv[0], *argv1 = cmd->argv[1];
        size_t len0 = cmd->argvlen[0], len1 = cmd->argvlen[1];
        cmd->argv[0] = "EVAL";
        cmd->argvlen[0] = 4;
        cmd->argv[1] = s->script_text[cmd->script];
        cmd->argvlen[1] = strlen(s->script_text[cmd->script]);
        int rc = store_send(cmd, cmd->argc, (const char **)cmd->argv, cmd->argvlen);
        cmd->argv[0] = (char *)argv0;
        cmd->argvlen[0] = len0;
        cmd->argv[1] = (char *)argv1;
        cmd->argvlen[1] = len1;
        if (rc == 0)
            return;
        store_cmd_report(cmd, STORE_UNAVAILABLE, NULL);
    } else if (r->type == REDIS_REPLY_ERROR) {
        log_msg(LOG_WARN, "redis %s: error reply: %.*s", s != NULL ? s->addr : "-",
                (int)r->len, r->str);
        store_cmd_report(cmd, STORE_ERROR, NULL);
    } else if (!store_reply_fits(cmd, r)) {
        log_msg(LOG_WARN, "redis %s: unexpected reply type %d", s != NULL ? s->addr : "-",
                r->type);
        store_cmd_report(cmd, STORE_ERROR, NULL);
    } else {
        store_cmd_report(cmd, STORE_OK, r);
    }
    store_cmd_free(cmd);
}

static void store_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct store_cmd *cmd = arg;
    struct store *s = cmd->s;

    (void)fd;
    (void)what;
    cmd->timer_armed = false;
    if (cmd->queued) {
        /* the setup did not finish within redis.timeout: never sent, so it cannot land */
        TAILQ_REMOVE(&s->queued, cmd, link);
        cmd->queued = false;
        store_cmd_report(cmd, STORE_UNAVAILABLE, NULL);
        store_cmd_free(cmd);
        return;
    }
    if (!cmd->in_redis) {
        /* deferred report of a command that could not be sent */
        store_cmd_report(cmd, STORE_UNAVAILABLE, NULL);
        store_cmd_free(cmd);
        return;
    }
    store_cmd_report(cmd, STORE_TIMEOUT, NULL);
    /* cmd is freed by its own NULL-reply callback inside the drop */
    store_drop_connection(s, "a command exceeded redis.timeout");
    store_schedule_reconnect(s);
}

static int store_send(struct store_cmd *cmd, int argc, const char **argv, const size_t *argvlen)
{
    struct store *s = cmd->s;

    if (s->ac == NULL ||
        redisAsyncCommandArgv(s->ac, store_on_reply, cmd, argc, argv, argvlen) != REDIS_OK)
        return -1;
    cmd->in_redis = true;
    return 0;
}

static struct store_cmd *store_cmd_new(struct store *s, enum store_reply_kind kind, void *arg)
{
    struct store_cmd *cmd = calloc(1, sizeof(*cmd));

    if (cmd == NULL) {
        log_msg(LOG_ERROR, "redis: out of memory");
        abort();
    }
    cmd->s = s;
    cmd->kind = kind;
    cmd->arg = arg;
    cmd->script = -1;
    gettimeofday(&cmd->submitted, NULL);
    evtimer_assign(&cmd->timer, s->base, store_on_timer, cmd);
    return cmd;
}

/*
 * Send argv, queue it while the connection is being set up, or report
 * STORE_UNAVAILABLE from the event loop; arms the timeout.
 */
static void store_submit(struct store_cmd *cmd, int argc, const char **argv,
                         const size_t *argvlen)
{
    struct store *s = cmd->s;
    struct timeval tv;
    bool queue = s->ac != NULL && !s->connected;

    if (cmd->script >= 0 || queue) {
        cmd->argc = argc;
        cmd->argv = calloc((size_t)argc, sizeof(char *));
        cmd->argvlen = calloc((size_t)argc, sizeof(size_t));
        for (int i = 0; i < argc; i++) {
            cmd->argv[i] = malloc(argvlen[i] + 1);
            memcpy(cmd->argv[i], argv[i], argvlen[i]);
            cmd->argv[i][argvlen[i]] = '\0';
            cmd->argvlen[i] = argvlen[i];
        }
    }
    if (queue) {
        TAILQ_INSERT_TAIL(&s->queued, cmd, link);
        cmd->queued = true;
    } else if (store_send(cmd, argc, argv, argvlen) != 0) {
        event_active(&cmd->timer, EV_TIMEOUT, 0);
        return;
    }
    tv = clock_ms_to_timeval(s->cfg->redis_timeout_ms);
    evtimer_add(&cmd->timer, &tv);
    cmd->timer_armed = true;
}

/* The setup failed: not ready; drop the connection and reconnect with backoff. */
static void store_setup_failed(struct store *s, const char *what)
{
    log_msg(LOG_ERROR, "redis %s: %s; not ready, reconnecting", s->addr, what);
    store_drop_connection(s, "its setup failed");
    store_schedule_reconnect(s);
}

/* The setup succeeded: ready; send the commands that waited for it, in order. */
static void store_setup_done(struct store *s)
{
    s->connected = true;
    s->backoff_ms = STORE_BACKOFF_MIN_MS;
    event_del(&s->setup_ev);
    log_msg(LOG_INFO, "redis %s: ready", s->addr);
    while (!TAILQ_EMPTY(&s->queued)) {
        struct store_cmd *cmd = TAILQ_FIRST(&s->queued);
        TAILQ_REMOVE(&s->queued, cmd, link);
        cmd->queued = false;
        if (store_send(cmd, cmd->argc, (const char **)cmd->argv, cmd->argvlen) != 0) {
            if (cmd->timer_armed) {
                event_del(&cmd->timer);
                cmd->timer_armed = false;
            }
            event_active(&cmd->timer, EV_TIMEOUT, 0); /* reports STORE_UNAVAILABLE */
        }
    }
}

/* Evicted records re-execute their retries: say so when Redis may evict. */
static void store_check_policy(struct store *s, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return; /* CONFIG may be disabled (managed Redis): nothing to check */
    if (strcmp(r->element[1]->str, "noeviction") != 0)
        log_msg(LOG_WARN, "redis %s: maxmemory-policy is %s; an evicted record lets a retry "
                "execute again: use noeviction", s->addr, r->element[1]->str);
}

/*
 * A reply to a setup command. AUTH and SELECT must succeed and PING (sent
 * last) must answer PONG; CONFIG GET may fail (managed Redis disables it).
 * The error text of Redis never carries the password we sent.
 */
static void store_on_setup_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    const redisReply *r = reply;
    struct store *s = ac->data;
    enum store_setup_step step = (enum store_setup_step)(intptr_t)privdata;
    char what[320];

    if (r == NULL || s == NULL || s->ac != ac)
        return; /* the connection is gone: whoever dropped it has handled the setup */
    gettimeofday(&s->last_reply, NULL);
    if (step == SETUP_POLICY) {
        store_check_policy(s, r);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOAUTH", 6) == 0 &&
            (s->cfg->redis_password == NULL || s->cfg->redis_password[0] == '\0'))
            snprintf(what, sizeof(what), "AUTH failed: the server requires a password and "
                     "redis.password is not set (%s answered %.200s)", store_setup_name[step],
                     r->str);
        else
            snprintf(what, sizeof(what), "%s failed: %.200s", store_setup_name[step], r->str);
        store_setup_failed(s, what);
    } else if (r->type != REDIS_REPLY_STATUS) {
        snprintf(what, sizeof(what), "%s failed: unexpected reply type %d",
                 store_setup_name[step], r->type);
        store_setup_failed(s, what);
    } else if (step == SETUP_PING) {
        store_setup_done(s);
    }
}

/* The setup did not finish within redis.timeout of connecting: a stalled Redis. */
static void store_on_setup_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct store *s = arg;

    (void)fd;
    (void)what;
    if (s->ac == NULL || s->connected)
        return;
    store_setup_failed(s, "no answer to the connection setup within redis.timeout");
}

static void store_on_connect(const redisAsyncContext *ac, int status)
{
    struct store *s = ac->data;

    if (s == NULL || s->ac != ac)
        return;
    if (status != REDIS_OK) {
        log_msg(LOG_WARN, "redis %s: connect failed: %s", s->addr, ac->errstr);
        store_forget_connection(s); /* hiredis frees ac after this callback */
        store_schedule_reconnect(s);
        return;
    }
    /* ready, and the backoff reset, once the setup succeeded: store_setup_done */
    log_msg(LOG_INFO, "redis %s: connected", s->addr);
    gettimeofday(&s->last_reply, NULL); /* the health PING waits one period for the setup */
}

static void store_on_disconnect(const redisAsyncContext *ac, int status)
{
    struct store *s = ac->data;

    (void)status;
    if (s == NULL)
        return;
    if (s->ac == ac) {
        log_msg(LOG_WARN, "redis %s: connection lost%s%s", s->addr, ac->err ? ": " : "",
                ac->err ? ac->errstr : "");
        store_forget_connection(s);
    }
    store_schedule_reconnect(s);
}

/* Queue one setup command; its reply goes to store_on_setup_reply. */
static void store_setup_command(redisAsyncContext *ac, enum store_setup_step step, int argc,
                                const char **argv, const size_t *argvlen)
{
    redisAsyncCommandArgv(ac, store_on_setup_reply, (void *)(intptr_t)step, argc, argv,
                          argvlen);
}

static void store_connect(struct store *s)
{
    const struct config *cfg = s->cfg;
    redisAsyncContext *ac;
    struct timeval tv;

    ac = cfg->redis_unix_path != NULL ? redisAsyncConnectUnix(cfg->redis_unix_path)
                                      : redisAsyncConnect(cfg->redis_host, cfg->redis_port);
    if (ac == NULL || ac->err) {
        log_msg(LOG_WARN, "redis %s: cannot connect: %s", s->addr,
                ac != NULL ? ac->errstr : "no memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        store_schedule_reconnect(s);
        return;
    }
    ac->data = s;
    s->ac = ac;
    redisLibeventAttach(ac, s->base);
    redisAsyncSetConnectCallback(ac, store_on_connect);
    redisAsyncSetDisconnectCallback(ac, store_on_disconnect);
    /* Client commands wait in s->queued until the PING, sent last, answers. */
    if (cfg->redis_password != NULL && cfg->redis_password[0] != '\0') {
        const char *argv[] = { "AUTH", cfg->redis_password };
        const size_t argvlen[] = { 4, strlen(cfg->redis_password) };
        store_setup_command(ac, SETUP_AUTH, 2, argv, argvlen);
    }
    if (cfg->redis_db != 0) {
        char db[16];
        int n = snprintf(db, sizeof(db), "%d", cfg->redis_db);
        const char *argv[] = { "SELECT", db };
        const size_t argvlen[] = { 6, (size_t)n };
        store_setup_command(ac, SETUP_SELECT, 2, argv, argvlen);
    }
    {
        const char *argv[] = { "CONFIG", "GET", "maxmemory-policy" };
        const size_t argvlen[] = { 6, 3, 16 };
        store_setup_command(ac, SETUP_POLICY, 3, argv, argvlen);
    }
    {
        const char *argv[] = { "PING" };
        const size_t argvlen[] = { 4 };
        store_setup_command(ac, SETUP_PING, 1, argv, argvlen);
    }
    tv.tv_sec = (time_t)(cfg->redis_timeout_ms / 1000);
    tv.tv_usec = (suseconds_t)(cfg->redis_timeout_ms % 1000) * 1000;
    evtimer_add(&s->setup_ev, &tv);
}

static void store_on_reconnect(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    store_connect(arg);
}

static void store_on_health_tick(evutil_socket_t fd, short what, void *arg)
{
    struct store *s = arg;
    struct timeval now, idle;
    static const char *const argv[] = { "PING" };
    static const size_t argvlen[] = { 4 };

    (void)fd;
    (void)what;
    gettimeofday(&now, NULL);
    timersub(&now, &s->last_reply, &idle);
    if (!s->connected || s->health_in_flight ||
        (uint64_t)idle.tv_sec * 1000 + (uint64_t)idle.tv_usec / 1000 < STORE_HEALTH_MS)
        return;
    s->health_in_flight = true;
    store_submit(store_cmd_new(s, REPLY_HEALTH, NULL), 1, (const char **)argv, argvlen);
}

/* The scripts' text from their templates and record.h's layout, and their SHA1 for EVALSHA. */
static void store_scripts_build(struct store *s)
{
    char owned[128];

    /* Lua strings count from 1 */
    snprintf(owned, sizeof(owned),
             "string.sub(v, %d, %d) ~= '%c' or string.sub(v, %d, %d) ~= ARGV[1]",
             RECORD_STATE_OFFSET + 1, RECORD_STATE_OFFSET + 1, (char)RECORD_CLAIMED,
             RECORD_OWNER_OFFSET + 1, RECORD_OWNER_OFFSET + RECORD_OWNER_LEN);
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        unsigned char digest[SHA_DIGEST_LENGTH];
        const char *text = s->script_text[i];
        snprintf(s->script_text[i], sizeof(s->script_text[i]), store_script_template[i], owned);
        SHA1((const unsigned char *)text, strlen(text), digest);
        for (int j = 0; j < SHA_DIGEST_LENGTH; j++)
            snprintf(&s->script_sha[i][2 * j], 3, "%02x", digest[j]);
    }
}

struct store *store_create(struct event_base *base, const struct config *cfg)
{
    struct timeval health = clock_ms_to_timeval(STORE_HEALTH_MS);
    struct store *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->base = base;
    s->cfg = cfg;
    s->backoff_ms = STORE_BACKOFF_MIN_MS;
    TAILQ_INIT(&s->queued);
    if (cfg->redis_unix_path != NULL)
        snprintf(s->addr, sizeof(s->addr), "%s", cfg->redis_unix_path);
    else if (strchr(cfg->redis_host, ':') != NULL)
        snprintf(s->addr, sizeof(s->addr), "[%s]:%u", cfg->redis_host, cfg->redis_port);
    else
        snprintf(s->addr, sizeof(s->addr), "%s:%u", cfg->redis_host, cfg->redis_port);
    evtimer_assign(&s->reconnect_ev, base, store_on_reconnect, s);
    evtimer_assign(&s->setup_ev, base, store_on_setup_timeout, s);
    event_assign(&s->health_ev, base, -1, EV_PERSIST, store_on_health_tick, s);
    event_add(&s->health_ev, &health);
    store_scripts_build(s);
    store_connect(s);
    return s;
}

void store_destroy(struct store *s)
{
    if (s == NULL)
        return;
    s->destroying = true;
    event_del(&s->reconnect_ev);
    event_del(&s->health_ev);
    if (s->ac != NULL) {
        redisAsyncContext *ac = s->ac;
        store_forget_connection(s);
        ac->data = NULL;
        redisAsyncFree(ac);
    }
    free(s);
}

void store_set_observer(struct store *s, store_observer *fn, void *arg)
{
    s->observer = fn;
    s->observer_arg = arg;
}

bool store_ready(const struct store *s)
{
    return s->connected;
}

static void store_eval(struct store *s, enum store_script script, store_cas_cb *cb, void *arg,
                       int argc, const char **argv, size_t *argvlen)
{
    struct store_cmd *cmd = store_cmd_new(s, REPLY_CAS, arg);

    cmd->cb.cas = cb;
    cmd->script = (int)script;
    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = s->script_sha[script];
    argvlen[1] = strlen(s->script_sha[script]);
    argv[2] = "1";
    argvlen[2] = 1;
    store_submit(cmd, argc, argv, argvlen);
}

void store_claim(struct store *s, const char *key, const char *value, size_t len,
                 uint64_t px_ms, store_value_cb *cb, void *arg)
{
    char px[24];
    int n = snprintf(px, sizeof(px), "%llu", (unsigned long long)px_ms);
    const char *argv[] = { "SET", key, value, "NX", "GET", "PX", px };
    const size_t argvlen[] = { 3, strlen(key), len, 2, 3, 2, (size_t)n };

    struct store_cmd *cmd = store_cmd_new(s, REPLY_VALUE, arg);

    cmd->cb.value = cb;
    store_submit(cmd, 7, argv, argvlen);
}

void store_get(struct store *s, const char *key, store_value_cb *cb, void *arg)
{
    const char *argv[] = { "GET", key };
    const size_t argvlen[] = { 3, strlen(key) };

    struct store_cmd *cmd = store_cmd_new(s, REPLY_VALUE, arg);

    cmd->cb.value = cb;
    store_submit(cmd, 2, argv, argvlen);
}

void store_replace_owned(struct store *s, const char *key, const char *owner, const char *value,
                         size_t len, uint64_t px_ms, store_cas_cb *cb, void *arg)
{
    char px[24];
    int n = snprintf(px, sizeof(px), "%llu", (unsigned long long)px_ms);
    const char *argv[] = { NULL, NULL, NULL, key, owner, value, px };
    size_t argvlen[] = { 0, 0, 0, strlen(key), strlen(owner), len, (size_t)n };

    store_eval(s, SCRIPT_REPLACE, cb, arg, 7, argv, argvlen);
}

void store_release_owned(struct store *s, const char *key, const char *owner, store_cas_cb *cb,
                         void *arg)
{
    const char *argv[] = { NULL, NULL, NULL, key, owner };
    size_t argvlen[] = { 0, 0, 0, strlen(key), strlen(owner) };

    store_eval(s, SCRIPT_RELEASE, cb, arg, 5, argv, argvlen);
}

void store_takeover(struct store *s, const char *key, const char *expected, size_t expected_len,
                    const char *value, size_t len, uint64_t px_ms, store_cas_cb *cb, void *arg)
{
    char px[24];
    int n = snprintf(px, sizeof(px), "%llu", (unsigned long long)px_ms);
    const char *argv[] = { NULL, NULL, NULL, key, expected, value, px };
    size_t argvlen[] = { 0, 0, 0, strlen(key), expected_len, len, (size_t)n };

    store_eval(s, SCRIPT_TAKEOVER, cb, arg, 7, argv, argvlen);
}

void store_delete_if_unchanged(struct store *s, const char *key, const char *expected,
                               size_t expected_len, store_cas_cb *cb, void *arg)
{
    const char *argv[] = { NULL, NULL, NULL, key, expected };
    size_t argvlen[] = { 0, 0, 0, strlen(key), expected_len };

    store_eval(s, SCRIPT_DELETE_UNCHANGED, cb, arg, 5, argv, argvlen);
}

void store_pttl(struct store *s, const char *key, store_int_cb *cb, void *arg)
{
    const char *argv[] = { "PTTL", key };
    const size_t argvlen[] = { 4, strlen(key) };

    struct store_cmd *cmd = store_cmd_new(s, REPLY_INT, arg);

    cmd->cb.integer = cb;
    store_submit(cmd, 2, argv, argvlen);
}
