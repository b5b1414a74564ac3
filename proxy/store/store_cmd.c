/*
 * store_cmd.c - the store's commands: their objects (and the spares kept
 * for reuse), the queue of commands that wait for a connection's setup,
 * dispatch, what each reply means (store_reply.c), NOSCRIPT resends and
 * cluster redirects (store.c's header says how they behave).
 */
#include "store_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "record.h"

/* Done with cmd: kept as a spare for the next command, or freed. */
void store_cmd_free(struct store_cmd *cmd)
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
 * Run the caller's callback once; later outcomes of the same command are
 * swallowed. During a successful reply's callback reply_conn names the
 * connection it came on, for store_wait_replicas.
 */
void store_cmd_report(struct store_cmd *cmd, enum store_status st, const redisReply *r)
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
        cmd->cb.raw(st, st == STORE_OK ? r : NULL, cmd->arg);
        break;
    case REPLY_WAIT:
        cmd->cb.integer(st, st == STORE_OK ? r->integer : 0, cmd->arg);
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
void store_fail_later(struct store_cmd *cmd)
{
    struct store *s = cmd->s;

    TAILQ_INSERT_TAIL(&s->failed, cmd, link);
    if (!s->destroying)
        event_active(&s->failed_ev, EV_TIMEOUT, 0);
}

void store_on_failed(evutil_socket_t fd, short what, void *arg)
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

int store_send(struct store_cmd *cmd, int argc, const char **argv, const size_t *argvlen)
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
    cmd->argv[1] = (char *)cmd->script;
    cmd->argvlen[1] = strlen(cmd->argv[1]);
    rc = store_send(cmd, cmd->argc, (const char **)cmd->argv, cmd->argvlen);
    cmd->argv[0] = (char *)argv0;
    cmd->argvlen[0] = len0;
    cmd->argv[1] = (char *)argv1;
    cmd->argvlen[1] = len1;
    return rc;
}

/*
 * An error reply fails the command: STORE_REFUSED when it proves the
 * command did not run and the node cannot take it now (the caller may send
 * it again), STORE_WRONG_TYPE when the key holds another type (WRONGTYPE),
 * else STORE_ERROR. One that says the node is not the primary
 * now drops the connection first, so nothing more goes to it before the
 * role is checked again.
 */
static void store_on_error_reply(struct store_cmd *cmd, const redisReply *r)
{
    struct store *s = cmd->s;
    enum store_reply_class cls = store_reply_class(r->str, r->len);

    if (cls == STORE_REPLY_NOSCRIPT && cmd->script != NULL && !cmd->resent &&
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
    store_cmd_report(cmd, store_reply_class_refused(cls) ? STORE_REFUSED
                          : cls == STORE_REPLY_WRONG_TYPE ? STORE_WRONG_TYPE : STORE_ERROR, NULL);
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

struct store_cmd *store_cmd_new(struct store *s, enum store_reply_kind kind, void *arg)
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
    cmd->script = NULL;
    gettimeofday(&cmd->submitted, NULL);
    return cmd;
}

/*
 * Keep a copy of argv in cmd: a script may need it again, a queued command
 * later. One block holds the pointers, the lengths and the bytes (each
 * argument NUL-terminated); a spare's block is reused when it is big enough.
 */
void store_cmd_save(struct store_cmd *cmd, int argc, const char **argv, const size_t *argvlen)
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
void store_dispatch(struct store_cmd *cmd)
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
bool store_claims_held(const struct store *s)
{
    return s->grace_until_ms > 0 && clock_mono_ms() < s->grace_until_ms;
}

void store_submit(struct store_cmd *cmd, int argc, const char **argv,
                         const size_t *argvlen)
{
    struct store *s = cmd->s;
    bool ready, queue;

    if (cmd->claim && store_claims_held(s)) { /* a new claim waits for the journals: unsent */
        store_fail_later(cmd);
        return;
    }
    if (s->cluster != NULL && !s->destroying) {
        /* the key: argv[1], or a script's KEYS[1] after EVALSHA sha 1, or where it says */
        int k = cmd->key_arg > 0 ? cmd->key_arg : cmd->script != NULL ? 3 : 1;

        store_cmd_save(cmd, argc, argv, argvlen); /* a redirection sends it again */
        cmd->conn = argc > k ? store_cluster_route(s->cluster, argv[k], argvlen[k]) : NULL;
        store_dispatch(cmd);
        return;
    }
    ready = !s->destroying && store_conn_ready(s->conn);
    queue = !s->destroying && !ready && store_conn_setting_up(s->conn);
    if (cmd->script != NULL || queue)
        store_cmd_save(cmd, argc, argv, argvlen);
    if (queue)
        TAILQ_INSERT_TAIL(&s->queued, cmd, link);
    else if (!ready || store_send(cmd, argc, argv, argvlen) != 0)
        store_fail_later(cmd);
}

/*
 * r is a redirection (redis.cluster: MOVED or ASK): the node did not run
 * the command, so it goes to the node named; past STORE_MAX_REDIRECTS, or
 * with no connection there, it fails, refused (it did not run). False: r is
 * no redirection.
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
        store_cmd_report(cmd, STORE_REFUSED, NULL);
        store_cmd_free(cmd);
        return true;
    }
    cmd->conn = to;
    cmd->asking = ask;
    cmd->resent = false; /* another node, another script cache */
    store_dispatch(cmd);
    return true;
}

bool store_status_retryable(enum store_status st)
{
    return st == STORE_UNAVAILABLE || st == STORE_TIMEOUT || st == STORE_LOST ||
           st == STORE_REFUSED;
}

const char *store_status_name(enum store_status st)
{
    switch (st) {
    case STORE_OK:
        return "ok";
    case STORE_UNAVAILABLE:
        return "no connection";
    case STORE_TIMEOUT:
        return "timeout";
    case STORE_ERROR:
        return "error reply";
    case STORE_LOST:
        return "connection lost";
    case STORE_REFUSED:
        return "refused for now";
    case STORE_WRONG_TYPE:
        return "not a record (another type)";
    }
    return "failed";
}
