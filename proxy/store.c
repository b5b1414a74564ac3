/*
 * store.c - the record store's commands over one node connection
 * (store_conn.c): the compare-and-set scripts, the queue of commands that
 * wait for a connection's setup, and what each reply means (store_reply.c).
 *
 * Commands are sent only on a ready connection (setup done, ROLE master).
 * While a connection is being set up they wait in a queue, which the setup's
 * own deadline (redis.timeout) bounds: they are sent once it is ready, or
 * fail with STORE_UNAVAILABLE, unsent, when it fails. With no connection at
 * all (resolving, backoff) they fail at once. Sent commands are bounded by
 * the connection (redis.timeout; STORE_TIMEOUT), and a connection that
 * drops reports them STORE_LOST. Error replies are classified: the ones
 * that say "not the primary now" also drop the connection, which then
 * reconnects and checks the role again. A connection that has carried no
 * reply for STORE_HEALTH_MS gets a ROLE, so a stalled Redis or a demoted
 * primary is noticed (readiness) without client traffic.
 *
 * WAIT (redis.min_replicas) counts the replicas that acknowledged every
 * earlier write of its own connection, so it is sent on the connection that
 * carried the write, and one WAIT covers every write before it: the
 * store_wait_replicas calls of one loop turn share one WAIT, sent at the end
 * of the turn (an event made active, which runs after the callbacks already
 * active), with its reply fanned out to each. One WAIT is in flight at a
 * time: calls made meanwhile share the next, so a command never waits
 * behind more than one blocked WAIT. A call that nobody waits on (now
 * false) starts no WAIT of its own for STORE_WAIT_LAZY_MS. A call whose
 * write's connection went down (or was replaced) before its WAIT went out
 * fails with STORE_LOST.
 *
 * With redis.sentinel the connection asks store_sentinel.c where the primary is
 * before every attempt. With redis.cluster each command goes to the
 * connection of the primary that owns its key's slot (store_cluster.c); a
 * MOVED or ASK reply, which proves the command did not run, sends it again
 * to the node named (ASKING first for ASK), at most STORE_MAX_REDIRECTS
 * times; a reply that never came is never resent. WAIT then goes out once
 * per connection that carried the writes, one at a time.
 */
#include "store.h"
#include "store_int.h"
#include "store_reply.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/time.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "record.h"

#define STORE_HEALTH_MS 1000

/*
 * How long a store_wait_replicas call that nobody waits on (a record's) may
 * wait for another call's WAIT to share before it sends its own: under
 * traffic the next claim's WAIT covers it, so a request costs one WAIT.
 */
#define STORE_WAIT_LAZY_MS 10

/* An idle primary's replicas behind its offset this long (ms): one is stalled (not ready). */
#define STORE_REPLICA_LAG_MS 3000

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

/*
 * Every later change of a record is a compare-and-set on state 'C' and the
 * owner token. The scripts read both by their offsets in record.h; "%s"
 * in a template stands for that test (store_scripts_build fills it in).
 * REPLACE is idempotent for its owner: a record already byte-for-byte the
 * value (which carries the owner token) is reported applied, so a write
 * that timed out, may have landed and is sent again succeeds; anyone
 * else's value still differs and is refused. The SCRIPT_INBOX_* entries are
 * NULL here: their templates are store_inbox_script_template's.
 */
#define STORE_SCRIPT_MAX 2048
static const char *const store_script_template[SCRIPT_COUNT] = {
    [SCRIPT_REPLACE] =
        "local v = redis.call('GET', KEYS[1])\n"
        "if v == ARGV[2] then\n"
        "  return 1\n"
        "end\n"
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
    char script_text[SCRIPT_COUNT][STORE_SCRIPT_MAX];
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
    uint64_t replicas_lag_since_ms; /* idle ROLEs have seen too few caught up since; 0: not */
};

enum store_reply_kind { REPLY_VALUE, REPLY_CAS, REPLY_INT, REPLY_HEALTH, REPLY_WAIT, REPLY_ANY };

struct store_cmd {
    struct store *s;
    enum store_reply_kind kind;
    union {
        store_value_cb *value;
        store_cas_cb *cas;
        store_int_cb *integer;
        store_reply_cb *any;
    } cb;
    void *arg;
    struct store_conn *conn;    /* where it is sent or queued; NULL: no connection */
    bool asking;                /* ASK: send ASKING before it */
    int redirects;              /* MOVED and ASK followed so far */
    bool reported;              /* the caller's callback has run */
    TAILQ_ENTRY(store_cmd) link; /* in s->queued, s->failed or s->spare */
    int script;                 /* enum store_script, or -1 */
    int key_arg;                /* redis.cluster: argv index of the key; 0: the usual one */
    bool resent;                /* a script's body went out after NOSCRIPT */
    struct timeval submitted;
    int argc;                   /* saved argv of a script (for the NOSCRIPT resend) or of a
                                   queued command */
    char **argv;                /* into `saved` */
    size_t *argvlen;            /* into `saved` */
    void *saved;                /* argv, argvlen and the argument bytes; kept by a spare */
    size_t saved_cap;           /* bytes of `saved` */
};

/* Done with cmd: kept as a spare for the next command, or freed. */
static void store_cmd_free(struct store_cmd *cmd)
{
    struct store *s = cmd->s;

    if (s->n_spare < STORE_SPARE_MAX && cmd->saved_cap <= STORE_SPARE_SAVE_MAX) {
        TAILQ_INSERT_HEAD(&s->spare, cmd, link);
        s->n_spare++;
        return;
    }
    free(cmd->saved);
    free(cmd);
}

static void store_wait_answered(struct store *s, enum store_status st, long long replicas);

/* r as plain values into out (its arrays malloc'd; store_reply_free); -1 out of memory. */
static int store_reply_convert(const redisReply *r, struct store_reply *out)
{
    struct store_reply *elem;

    memset(out, 0, sizeof(*out));
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        out->type = STORE_INT;
        out->integer = r->integer;
        return 0;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_VERB:
        out->type = STORE_STR;
        out->str = r->str;
        out->len = r->len;
        return 0;
    case REDIS_REPLY_ARRAY:
    case REDIS_REPLY_MAP:
    case REDIS_REPLY_SET:
        out->type = STORE_ARR;
        if (r->elements == 0)
            return 0;
        elem = calloc(r->elements, sizeof(*elem));
        if (elem == NULL)
            return -1;
        out->elem = elem;
        out->n = r->elements;
        for (size_t i = 0; i < r->elements; i++)
            if (store_reply_convert(r->element[i], &elem[i]) != 0)
                return -1;
        return 0;
    default:
        out->type = STORE_NIL;
        return 0;
    }
}

static void store_reply_free(struct store_reply *r)
{
    if (r->type != STORE_ARR || r->elem == NULL)
        return;
    for (size_t i = 0; i < r->n; i++)
        store_reply_free((struct store_reply *)&r->elem[i]);
    free((void *)r->elem);
}

/* REPLY_ANY: the caller gets the reply as plain values. */
static void store_report_any(struct store_cmd *cmd, enum store_status st, const redisReply *r)
{
    struct store_reply plain;

    if (st != STORE_OK || r == NULL) {
        cmd->cb.any(st, NULL, cmd->arg);
        return;
    }
    if (store_reply_convert(r, &plain) != 0) {
        store_reply_free(&plain);
        log_msg(LOG_ERROR, "redis: out of memory");
        abort();
    }
    cmd->cb.any(st, &plain, cmd->arg);
    store_reply_free(&plain);
}

/*
 * An idle primary's ROLE reply: "master", its replication offset, and its
 * online replicas as [ip, port, acknowledged offset]. With redis.min_replicas,
 * fewer replicas listed than that means every claim would be refused: not
 * ready. A listed replica counts once it has acknowledged the whole offset;
 * a live one does within a second (replicas acknowledge every second, and
 * an idle primary's offset moves only with its pings to them), so too few
 * caught up for STORE_REPLICA_LAG_MS means a replica that is connected but
 * stalled: not ready either, also without traffic.
 */
static void store_count_replicas(struct store *s, const redisReply *role)
{
    unsigned need = s->cfg->redis_min_replicas, caught_up = 0;
    const redisReply *list;

    if (need == 0)
        return;
    if (role->elements < 3 || role->element[1]->type != REDIS_REPLY_INTEGER ||
        role->element[2]->type != REDIS_REPLY_ARRAY || role->element[2]->elements < need) {
        s->replicas_short = true;
        return;
    }
    list = role->element[2];
    for (size_t i = 0; i < list->elements; i++) {
        const redisReply *r = list->element[i];
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
            r->element[2]->type == REDIS_REPLY_STRING &&
            strtoll(r->element[2]->str, NULL, 10) >= role->element[1]->integer)
            caught_up++;
    }
    if (caught_up >= need) {
        s->replicas_short = false;
        s->replicas_lag_since_ms = 0;
    } else if (s->replicas_lag_since_ms == 0) {
        s->replicas_lag_since_ms = clock_now_ms();
    } else if (clock_now_ms() - s->replicas_lag_since_ms >= STORE_REPLICA_LAG_MS) {
        s->replicas_short = true;
    }
}

/*
 * Run the caller's callback once; later outcomes of the same command are
 * swallowed. During a successful reply's callback reply_conn names the
 * connection it came on, for store_wait_replicas.
 */
static void store_cmd_report(struct store_cmd *cmd, enum store_status st, const redisReply *r)
{
    struct store *s = cmd->s;
    struct store_conn *outer = s->reply_conn;

    if (cmd->reported)
        return;
    cmd->reported = true;
    if (cmd->s->observer != NULL) {
        struct timeval now, d;
        gettimeofday(&now, NULL);
        timersub(&now, &cmd->submitted, &d);
        cmd->s->observer((double)d.tv_sec + (double)d.tv_usec / 1e6, st == STORE_OK,
                         cmd->s->observer_arg);
    }
    /* a lost connection's replies come NULL: an OK one came on the connection that is ready */
    s->reply_conn = st == STORE_OK && cmd->conn != NULL && store_conn_ready(cmd->conn) ? cmd->conn
                                                                                     : NULL;
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
        cmd->s->health_in_flight = false;
        if (st == STORE_OK)
            store_count_replicas(s, r);
        break;
    case REPLY_WAIT:
        store_wait_answered(s, st, st == STORE_OK ? r->integer : 0);
        break;
    case REPLY_ANY:
        store_report_any(cmd, st, r);
        break;
    }
    s->reply_conn = outer;
}

static bool store_reply_fits(const struct store_cmd *cmd, const redisReply *r)
{
    switch (cmd->kind) {
    case REPLY_VALUE:
        return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL;
    case REPLY_CAS:
    case REPLY_INT:
    case REPLY_WAIT:
        return r->type == REDIS_REPLY_INTEGER;
    case REPLY_HEALTH:
        return r->type == REDIS_REPLY_ARRAY;
    case REPLY_ANY:
        return true;
    }
    return false;
}

/* Not sent: report STORE_UNAVAILABLE from the loop (never inside the caller's store_* call). */
static void store_fail_later(struct store_cmd *cmd)
{
    struct store *s = cmd->s;

    TAILQ_INSERT_TAIL(&s->failed, cmd, link);
    if (!s->destroying)
        event_active(&s->failed_ev, EV_TIMEOUT, 0);
}

static void store_on_failed(evutil_socket_t fd, short what, void *arg)
{
    struct store *s = arg;

    (void)fd;
    (void)what;
    while (!TAILQ_EMPTY(&s->failed)) {
        struct store_cmd *cmd = TAILQ_FIRST(&s->failed);
        TAILQ_REMOVE(&s->failed, cmd, link);
        store_cmd_report(cmd, STORE_UNAVAILABLE, NULL);
        store_cmd_free(cmd);
    }
}

static void store_on_reply(enum store_status st, const redisReply *r, void *privdata);
static bool store_redirect(struct store_cmd *cmd, const redisReply *r);

/* ASKING's own reply: an error shows in the command's reply that follows it. */
static void store_on_asking(enum store_status st, const redisReply *r, void *privdata)
{
    (void)st;
    (void)r;
    (void)privdata;
}

static int store_send(struct store_cmd *cmd, int argc, const char **argv, const size_t *argvlen)
{
    static const char *const asking[] = { "ASKING" };
    static const size_t asking_len[] = { 6 };

    if (cmd->conn == NULL)
        return -1;
    /* ASKING holds for the very next command of the connection: nothing goes between */
    if (cmd->asking && store_conn_send(cmd->conn, store_on_asking, NULL, 1,
                                       (const char **)asking, asking_len) != 0)
        return -1;
    return store_conn_send(cmd->conn, store_on_reply, cmd, argc, argv, argvlen);
}

/* A restarted or replaced Redis has an empty script cache: send the body once. */
static int store_resend_script(struct store_cmd *cmd)
{
    const char *argv0 = cmd->argv[0], *argv1 = cmd->argv[1];
    size_t len0 = cmd->argvlen[0], len1 = cmd->argvlen[1];
    int rc;

    cmd->resent = true;
    cmd->argv[0] = "EVAL";
    cmd->argvlen[0] = 4;
    cmd->argv[1] = cmd->s->script_text[cmd->script];
    cmd->argvlen[1] = strlen(cmd->s->script_text[cmd->script]);
    rc = store_send(cmd, cmd->argc, (const char **)cmd->argv, cmd->argvlen);
    cmd->argv[0] = (char *)argv0;
    cmd->argvlen[0] = len0;
    cmd->argv[1] = (char *)argv1;
    cmd->argvlen[1] = len1;
    return rc;
}

/*
 * An error reply fails the command (STORE_ERROR: the route's on_store_error
 * decides); one that says the node is not the primary now drops the
 * connection first, so nothing more goes to it before the role is checked
 * again.
 */
static void store_on_error_reply(struct store_cmd *cmd, const redisReply *r)
{
    struct store *s = cmd->s;
    enum store_reply_class cls = store_reply_class(r->str, r->len);

    if (cls == STORE_REPLY_NOSCRIPT && cmd->script >= 0 && !cmd->resent &&
        store_resend_script(cmd) == 0)
        return;
    if (s->cluster != NULL && store_redirect(cmd, r))
        return;
    if (cls == STORE_REPLY_NOT_PRIMARY) {
        char why[300];

        snprintf(why, sizeof(why), "%s: %.200s", store_reply_class_name(cls), r->str);
        store_conn_drop(cmd->conn, why);
    } else {
        log_msg(LOG_WARN, "redis %s: error reply (%s): %.*s", store_conn_addr(cmd->conn),
                store_reply_class_name(cls), (int)r->len, r->str);
    }
    store_cmd_report(cmd, STORE_ERROR, NULL);
    store_cmd_free(cmd);
}

static void store_on_reply(enum store_status st, const redisReply *r, void *privdata)
{
    struct store_cmd *cmd = privdata;

    if (st != STORE_OK) {
        store_cmd_report(cmd, st, NULL);
    } else if (r->type == REDIS_REPLY_ERROR) {
        store_on_error_reply(cmd, r);
        return;
    } else if (!store_reply_fits(cmd, r)) {
        log_msg(LOG_WARN, "redis %s: unexpected reply type %d", store_conn_addr(cmd->conn),
                r->type);
        store_cmd_report(cmd, STORE_ERROR, NULL);
    } else {
        char why[300];

        /* a primary demoted while the connection was idle: not ready from now on */
        if (cmd->kind == REPLY_HEALTH && !store_role_is_primary(r, why, sizeof(why)))
            store_conn_drop(cmd->conn, why);
        store_cmd_report(cmd, STORE_OK, r);
    }
    store_cmd_free(cmd);
}

static struct store_cmd *store_cmd_new(struct store *s, enum store_reply_kind kind, void *arg)
{
    struct store_cmd *cmd = TAILQ_FIRST(&s->spare);

    if (cmd != NULL) {
        void *saved = cmd->saved;
        size_t cap = cmd->saved_cap;

        TAILQ_REMOVE(&s->spare, cmd, link);
        s->n_spare--;
        memset(cmd, 0, sizeof(*cmd));
        cmd->saved = saved;
        cmd->saved_cap = cap;
    } else if ((cmd = calloc(1, sizeof(*cmd))) == NULL) {
        log_msg(LOG_ERROR, "redis: out of memory");
        abort();
    }
    cmd->s = s;
    cmd->kind = kind;
    cmd->arg = arg;
    cmd->conn = s->conn;
    cmd->script = -1;
    gettimeofday(&cmd->submitted, NULL);
    return cmd;
}

/*
 * Keep a copy of argv in cmd: a script may need it again, a queued command
 * later. One block holds the pointers, the lengths and the bytes (each
 * argument NUL-terminated); a spare's block is reused when it is big enough.
 */
static void store_cmd_save(struct store_cmd *cmd, int argc, const char **argv,
                           const size_t *argvlen)
{
    size_t head = (size_t)argc * (sizeof(char *) + sizeof(size_t));
    size_t need = head;
    char *bytes;

    for (int i = 0; i < argc; i++)
        need += argvlen[i] + 1;
    if (need > cmd->saved_cap) {
        free(cmd->saved);
        cmd->saved_cap = need < 512 ? 512 : need;
        if ((cmd->saved = malloc(cmd->saved_cap)) == NULL) {
            log_msg(LOG_ERROR, "redis: out of memory");
            abort();
        }
    }
    cmd->argc = argc;
    cmd->argv = cmd->saved;
    cmd->argvlen = (size_t *)(cmd->argv + argc);
    bytes = (char *)cmd->saved + head;
    for (int i = 0; i < argc; i++) {
        memcpy(bytes, argv[i], argvlen[i]);
        bytes[argvlen[i]] = '\0';
        cmd->argv[i] = bytes;
        cmd->argvlen[i] = argvlen[i];
        bytes += argvlen[i] + 1;
    }
}

/*
 * Send cmd (argv saved in it) on cmd->conn when it is ready, queue it while
 * that connection is being set up, or report STORE_UNAVAILABLE from the
 * event loop.
 */
static void store_dispatch(struct store_cmd *cmd)
{
    struct store *s = cmd->s;
    bool ready = !s->destroying && cmd->conn != NULL && store_conn_ready(cmd->conn);

    if (!ready && !s->destroying && cmd->conn != NULL && store_conn_setting_up(cmd->conn))
        TAILQ_INSERT_TAIL(&s->queued, cmd, link);
    else if (!ready || store_send(cmd, cmd->argc, (const char **)cmd->argv, cmd->argvlen) != 0)
        store_fail_later(cmd);
}

/*
 * Send argv on a ready connection (with redis.cluster: the one of the
 * primary of its key's slot), queue it while the connection is being set
 * up, or report STORE_UNAVAILABLE from the event loop.
 */
static void store_submit(struct store_cmd *cmd, int argc, const char **argv,
                         const size_t *argvlen)
{
    struct store *s = cmd->s;
    bool ready, queue;

    if (s->cluster != NULL && !s->destroying) {
        /* the key: argv[1], or a script's KEYS[1] after EVALSHA sha 1, or where it says */
        int k = cmd->key_arg > 0 ? cmd->key_arg : cmd->script >= 0 ? 3 : 1;

        store_cmd_save(cmd, argc, argv, argvlen); /* a redirection sends it again */
        cmd->conn = argc > k ? store_cluster_route(s->cluster, argv[k], argvlen[k]) : NULL;
        store_dispatch(cmd);
        return;
    }
    ready = !s->destroying && store_conn_ready(s->conn);
    queue = !s->destroying && !ready && store_conn_setting_up(s->conn);
    if (cmd->script >= 0 || queue)
        store_cmd_save(cmd, argc, argv, argvlen);
    if (queue)
        TAILQ_INSERT_TAIL(&s->queued, cmd, link);
    else if (!ready || store_send(cmd, argc, argv, argvlen) != 0)
        store_fail_later(cmd);
}

/*
 * r is a redirection (redis.cluster: MOVED or ASK): the node did not run
 * the command, so it goes to the node named; past STORE_MAX_REDIRECTS, or
 * with no connection there, it fails. False: r is no redirection.
 */
static bool store_redirect(struct store_cmd *cmd, const redisReply *r)
{
    struct store_conn *to;
    bool ask;

    if (!store_cluster_redirect(cmd->s->cluster, r->str, r->len, &ask, &to))
        return false;
    if (++cmd->redirects > STORE_MAX_REDIRECTS || to == NULL) {
        log_msg(LOG_WARN, "redis %s: %s; not followed (%s)", store_conn_addr(cmd->conn),
                ask ? "ASK" : "MOVED", to == NULL ? "no connection to the node named"
                                                  : "too many redirections");
        store_cmd_report(cmd, STORE_ERROR, NULL);
        store_cmd_free(cmd);
        return true;
    }
    cmd->conn = to;
    cmd->asking = ask;
    cmd->resent = false; /* another node, another script cache */
    store_dispatch(cmd);
    return true;
}

/* conn is ready: send the commands that waited for it, in order. */
static void store_on_node_ready(void *owner, struct store_conn *conn)
{
    struct store *s = owner;
    struct store_cmd *cmd, *next;

    for (cmd = TAILQ_FIRST(&s->queued); cmd != NULL; cmd = next) {
        next = TAILQ_NEXT(cmd, link);
        if (cmd->conn != conn)
            continue;
        TAILQ_REMOVE(&s->queued, cmd, link);
        if (store_send(cmd, cmd->argc, (const char **)cmd->argv, cmd->argvlen) != 0)
            store_fail_later(cmd);
    }
}

static void store_waiters_report(struct store_waiter_list *list, enum store_status st,
                                 long long replicas);

/*
 * conn is gone (or its setup failed): the commands that waited for it
 * fail, never sent, and so do the WAITs not yet sent for its writes (a WAIT
 * on its next connection would not cover them). Their callbacks may submit
 * again: conn is not ready or setting up any more, so those fail from the
 * event loop.
 */
static void store_on_node_down(void *owner, struct store_conn *conn)
{
    struct store *s = owner;
    struct store_cmd_queue failed = TAILQ_HEAD_INITIALIZER(failed);
    struct store_waiter_list stale = TAILQ_HEAD_INITIALIZER(stale);
    struct store_cmd *cmd, *next;
    struct store_waiter *w, *wnext;

    if (conn == s->conn)
        s->health_in_flight = false;
    for (cmd = TAILQ_FIRST(&s->queued); cmd != NULL; cmd = next) {
        next = TAILQ_NEXT(cmd, link);
        if (cmd->conn == conn) {
            TAILQ_REMOVE(&s->queued, cmd, link);
            TAILQ_INSERT_TAIL(&failed, cmd, link);
        }
    }
    for (w = TAILQ_FIRST(&s->wait_next); w != NULL; w = wnext) {
        wnext = TAILQ_NEXT(w, link);
        if (w->conn == conn) {
            TAILQ_REMOVE(&s->wait_next, w, link);
            TAILQ_INSERT_TAIL(&stale, w, link);
        }
    }
    while (!TAILQ_EMPTY(&failed)) {
        cmd = TAILQ_FIRST(&failed);
        TAILQ_REMOVE(&failed, cmd, link);
        store_cmd_report(cmd, STORE_UNAVAILABLE, NULL);
        store_cmd_free(cmd);
    }
    store_waiters_report(&stale, STORE_LOST, 0);
}

/* The single connection's hooks (redis.url, redis.sentinel). */
static void store_on_conn_ready(void *owner)
{
    store_on_node_ready(owner, ((struct store *)owner)->conn);
}

static void store_on_conn_down(void *owner)
{
    store_on_node_down(owner, ((struct store *)owner)->conn);
}

/* A Redis Cluster's map refreshed or redirected a command: tell the observer (metrics). */
static void store_on_cluster_event(void *owner, enum store_event ev)
{
    struct store *s = owner;

    if (s->event_observer != NULL)
        s->event_observer(ev, s->event_arg);
}

/*
 * An idle connection is checked with ROLE: a stalled Redis times out (not
 * ready without client traffic), a demoted primary is left.
 */
static void store_on_health_tick(evutil_socket_t fd, short what, void *arg)
{
    struct store *s = arg;
    static const char *const argv[] = { "ROLE" };
    static const size_t argvlen[] = { 4 };

    (void)fd;
    (void)what;
    /* a cluster's connections are checked by its map refreshes (store_cluster.c) */
    if (s->conn == NULL || !store_conn_ready(s->conn) || s->health_in_flight ||
        store_conn_idle_ms(s->conn) < STORE_HEALTH_MS)
        return;
    s->health_in_flight = true;
    store_submit(store_cmd_new(s, REPLY_HEALTH, NULL), 1, (const char **)argv, argvlen);
}

/* ---- WAIT for replicas ----------------------------------------------------- */

/* Report st and replicas to every waiter of list (emptied first: callbacks may add more). */
static void store_waiters_report(struct store_waiter_list *list, enum store_status st,
                                 long long replicas)
{
    struct store_waiter_list done = TAILQ_HEAD_INITIALIZER(done);

    TAILQ_CONCAT(&done, list, link);
    while (!TAILQ_EMPTY(&done)) {
        struct store_waiter *w = TAILQ_FIRST(&done);
        TAILQ_REMOVE(&done, w, link);
        w->cb(st, replicas, w->arg);
        free(w);
    }
}

/*
 * The end of a loop turn: one WAIT for every call made since the last one
 * went out, on the connection their writes came on. A call whose write came
 * on another connection (dropped or replaced since) fails with STORE_LOST.
 */
static void store_on_wait_turn(evutil_socket_t fd, short what, void *arg)
{
    struct store *s = arg;
    struct store_waiter_list stale = TAILQ_HEAD_INITIALIZER(stale);
    struct store_waiter *w, *next;
    struct store_conn *to = NULL;
    struct store_cmd *cmd;
    char n[16], ms[24];
    const char *argv[3] = { "WAIT", n, ms };
    size_t argvlen[3] = { 4, 0, 0 };

    (void)fd;
    (void)what;
    if (s->wait_in_flight)
        return; /* its answer starts the next one */
    /* every call waiting now goes out with this WAIT or fails, but another primary's */
    s->wait_now = false;
    event_del(&s->wait_lazy_ev);
    /* this WAIT goes to the first waiter's connection; another's (a cluster) waits its turn */
    for (w = TAILQ_FIRST(&s->wait_next); w != NULL; w = next) {
        next = TAILQ_NEXT(w, link);
        if (s->destroying || w->conn == NULL || !store_conn_ready(w->conn)) {
            TAILQ_REMOVE(&s->wait_next, w, link);
            TAILQ_INSERT_TAIL(&stale, w, link);
        } else if (to == NULL || w->conn == to) {
            to = w->conn;
            TAILQ_REMOVE(&s->wait_next, w, link);
            TAILQ_INSERT_TAIL(&s->wait_sent, w, link);
        }
    }
    if (to != NULL) {
        s->wait_in_flight = true;
        argvlen[1] = (size_t)snprintf(n, sizeof(n), "%u", s->cfg->redis_min_replicas);
        argvlen[2] = (size_t)snprintf(ms, sizeof(ms), "%llu",
                                      (unsigned long long)s->cfg->redis_replica_timeout_ms);
        cmd = store_cmd_new(s, REPLY_WAIT, NULL);
        cmd->conn = to;
        /* never queued for a later connection: that one's WAIT would not cover these writes */
        if (store_send(cmd, 3, argv, argvlen) != 0)
            store_fail_later(cmd);
    }
    store_waiters_report(&stale, STORE_LOST, 0);
}

/*
 * The WAIT in flight answered (or failed): fan it out, then start the next
 * one: at once for a call that wants it now or whose lazy delay ran out
 * meanwhile, else when the delay ends.
 */
static void store_wait_answered(struct store *s, enum store_status st, long long replicas)
{
    s->wait_in_flight = false;
    if (st == STORE_OK)
        s->replicas_short = replicas < (long long)s->cfg->redis_min_replicas;
    store_waiters_report(&s->wait_sent, st, replicas);
    if (!TAILQ_EMPTY(&s->wait_next) && !s->destroying &&
        (s->wait_now || !evtimer_pending(&s->wait_lazy_ev, NULL)))
        event_active(&s->wait_ev, EV_TIMEOUT, 0);
}

/*
 * The scripts' text from their templates (the records' here, the inbox's in
 * store_inbox.c) and record.h's layout, and their SHA1 for EVALSHA.
 */
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
        const char *tmpl = store_script_template[i] != NULL ? store_script_template[i]
                                                             : store_inbox_script_template[i];
        snprintf(s->script_text[i], sizeof(s->script_text[i]), tmpl, owned);
        SHA1((const unsigned char *)text, strlen(text), digest);
        for (int j = 0; j < SHA_DIGEST_LENGTH; j++)
            snprintf(&s->script_sha[i][2 * j], 3, "%02x", digest[j]);
    }
}

/* The data connection's locate hook (redis.sentinel): discovery answers it. */
static void store_on_conn_locate(void *owner, struct store_conn *c)
{
    struct store *s = owner;

    store_sentinel_locate(s->sentinel, c);
}

/* store_create ran out of memory after the name resolver and TLS context: free them and s. */
static struct store *store_create_failed(struct store *s, char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    if (s->dns != NULL)
        evdns_base_free(s->dns, 0);
    SSL_CTX_free(s->tls);
    free(s);
    return NULL;
}

/* A discovery named another primary than before: tell the observer (metrics). */
static void store_on_followed(const char *from, const char *to, void *arg)
{
    struct store *s = arg;

    if (s->failover_observer != NULL)
        s->failover_observer(from, to, s->failover_arg);
}

struct store *store_create(struct event_base *base, const struct config *cfg, char *err,
                           size_t errlen)
{
    struct timeval health = clock_ms_to_timeval(STORE_HEALTH_MS);
    struct store *s = calloc(1, sizeof(*s));
    bool sentinel = cfg->redis_sentinel_master != NULL;
    const struct store_node node = { cfg->redis_host, cfg->redis_port, cfg->redis_unix_path,
                                     STORE_NODE_DATA };
    const struct store_conn_hooks hooks = { store_on_conn_ready, store_on_conn_down, s,
                                            sentinel ? store_on_conn_locate : NULL };
    const struct store_cluster_hooks cluster_hooks = { store_on_node_ready, store_on_node_down,
                                                       store_on_cluster_event, s };
    bool cluster = cfg->n_redis_cluster > 0;
    unsigned char addr[16];

    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->base = base;
    s->cfg = cfg;
    /* no replica seen yet: ready once a ROLE or WAIT counts enough of them */
    s->replicas_short = cfg->redis_min_replicas > 0;
    TAILQ_INIT(&s->queued);
    TAILQ_INIT(&s->failed);
    TAILQ_INIT(&s->spare);
    TAILQ_INIT(&s->wait_next);
    TAILQ_INIT(&s->wait_sent);
    event_assign(&s->failed_ev, base, -1, 0, store_on_failed, s);
    event_assign(&s->wait_ev, base, -1, 0, store_on_wait_turn, s);
    evtimer_assign(&s->wait_lazy_ev, base, store_on_wait_turn, s);
    event_assign(&s->health_ev, base, -1, EV_PERSIST, store_on_health_tick, s);
    store_scripts_build(s);
    if (cfg->redis_tls && (s->tls = store_tls_context(cfg, err, errlen)) == NULL) {
        free(s);
        return NULL;
    }
    /* sentinels, cluster nodes and the primaries they name may be host names too */
    if (sentinel || cluster || (cfg->redis_host != NULL &&
                                evutil_inet_pton(AF_INET, cfg->redis_host, addr) != 1 &&
                                evutil_inet_pton(AF_INET6, cfg->redis_host, addr) != 1))
        s->dns = store_dns_create(base);
    if (cluster) {
        s->cluster = store_cluster_create(base, cfg, s->dns, s->tls, &cluster_hooks);
        if (s->cluster == NULL)
            return store_create_failed(s, err, errlen);
        return s; /* it reads the slot map from the loop's first turn */
    }
    s->conn = store_conn_create(base, cfg, &node, s->dns, s->tls, &hooks);
    if (s->conn != NULL && sentinel &&
        (s->sentinel = store_sentinel_create(base, cfg, s->dns, s->tls, s->conn,
                                             store_on_followed, s)) == NULL) {
        store_conn_destroy(s->conn);
        s->conn = NULL;
    }
    if (s->conn == NULL)
        return store_create_failed(s, err, errlen);
    event_add(&s->health_ev, &health);
    store_conn_start(s->conn);
    return s;
}

void store_destroy(struct store *s)
{
    bool dns_pending;

    if (s == NULL)
        return;
    s->destroying = true;
    event_del(&s->health_ev);
    event_del(&s->failed_ev);
    event_del(&s->wait_ev);
    event_del(&s->wait_lazy_ev);
    /* the discovery first: it holds the data connection */
    dns_pending = store_sentinel_destroy(s->sentinel);
    s->sentinel = NULL;
    /* pending replies: STORE_LOST; what their callbacks submit lands in s->failed */
    dns_pending |= store_cluster_destroy(s->cluster);
    s->cluster = NULL;
    dns_pending |= store_conn_destroy(s->conn);
    s->conn = NULL;
    TAILQ_CONCAT(&s->failed, &s->queued, link); /* never sent: STORE_UNAVAILABLE */
    while (!TAILQ_EMPTY(&s->failed) || !TAILQ_EMPTY(&s->wait_next)) {
        store_on_failed(-1, 0, s);
        store_waiters_report(&s->wait_next, STORE_LOST, 0);
    }
    if (s->dns != NULL) {
        /*
         * A cancelled resolution's callback (which frees libevent's request)
         * runs from the loop: let it turn once before the resolver goes.
         */
        if (dns_pending)
            event_base_loop(s->base, EVLOOP_NONBLOCK);
        evdns_base_free(s->dns, 0);
    }
    SSL_CTX_free(s->tls);
    while (!TAILQ_EMPTY(&s->spare)) {
        struct store_cmd *cmd = TAILQ_FIRST(&s->spare);
        TAILQ_REMOVE(&s->spare, cmd, link);
        free(cmd->saved);
        free(cmd);
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
    if (s->cluster != NULL)
        return store_cluster_covered(s->cluster);
    return s->conn != NULL && store_conn_ready(s->conn);
}

const char *store_unready(const struct store *s)
{
    if (!store_ready(s))
        return "redis unreachable";
    /* a cluster counts each primary's replicas in its slot map, not in one ROLE or WAIT */
    if (s->cluster != NULL ? store_cluster_replicas_short(s->cluster) : s->replicas_short)
        return "too few replicas acknowledge writes (redis.min_replicas)";
    return NULL;
}

bool store_primary(struct store *s, char *address, size_t len)
{
    if (s->cluster != NULL) {
        /* many primaries: /metrics counts them in idempotency_proxy_redis_cluster_nodes */
        snprintf(address, len, "cluster");
        return store_cluster_covered(s->cluster);
    }
    return s->conn != NULL && store_conn_ready_addr(s->conn, address, len);
}

int store_primaries_ready(const struct store *s)
{
    return s->cluster != NULL ? (int)store_cluster_primaries_ready(s->cluster) : -1;
}

void store_set_event_observer(struct store *s, store_event_observer *fn, void *arg)
{
    s->event_observer = fn;
    s->event_arg = arg;
}

void store_set_failover_observer(struct store *s, store_failover_observer *fn, void *arg)
{
    s->failover_observer = fn;
    s->failover_arg = arg;
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

void store_wait_replicas(struct store *s, bool now, store_int_cb *cb, void *arg)
{
    struct store_waiter *w = calloc(1, sizeof(*w));
    struct timeval lazy = clock_ms_to_timeval(STORE_WAIT_LAZY_MS);

    if (w == NULL) {
        log_msg(LOG_ERROR, "redis: out of memory");
        abort();
    }
    w->cb = cb;
    w->arg = arg;
    w->conn = s->reply_conn;
    TAILQ_INSERT_TAIL(&s->wait_next, w, link);
    if (s->destroying)
        return;
    if (now) {
        s->wait_now = true;
        if (!s->wait_in_flight)
            event_active(&s->wait_ev, EV_TIMEOUT, 0);
    } else if (!evtimer_pending(&s->wait_lazy_ev, NULL)) {
        evtimer_add(&s->wait_lazy_ev, &lazy);
    }
}

/* ---- for the webhook inbox (store_inbox.c) ---------------------------------- */

/* key_arg: where the key is in argv (for redis.cluster's routing), 0: argv[1] or KEYS[1]. */
void store_any(struct store *s, int script, int key_arg, int argc, const char **argv,
               const size_t *argvlen, store_reply_cb *cb, void *arg)
{
    struct store_cmd *cmd = store_cmd_new(s, REPLY_ANY, arg);

    cmd->cb.any = cb;
    cmd->script = script;
    cmd->key_arg = key_arg;
    store_submit(cmd, argc, argv, argvlen);
}

const char *store_script_sha(const struct store *s, enum store_script script)
{
    return s->script_sha[script];
}
