/*
 * store_conn_setup.c - a new connection's setup, pipelined: AUTH, SELECT,
 * CONFIG GET maxmemory-policy (or INFO memory), ROLE, INFO replication (its
 * replication ID: redis.reassert tells a new primary by it), PING; and the
 * process's count of the eviction policies its data connections read.
 */
#include "store_conn_int.h"

/*
 * The setup commands of a new connection, in the order they are sent;
 * SETUP_POLICY_INFO only when CONFIG GET was refused, after the others.
 */
enum store_setup_step {
    SETUP_AUTH, SETUP_SELECT, SETUP_POLICY, SETUP_ROLE, SETUP_REPLID, SETUP_PING,
    SETUP_POLICY_INFO
};
static const char *const store_setup_name[] = {
    [SETUP_AUTH] = "AUTH", [SETUP_SELECT] = "SELECT", [SETUP_POLICY] = "CONFIG GET",
    [SETUP_ROLE] = "ROLE", [SETUP_REPLID] = "INFO replication", [SETUP_PING] = "PING",
    [SETUP_POLICY_INFO] = "INFO memory",
};

/*
 * The process's data connections by what they read, for
 * store_eviction_policy_ok: the gauge is one per process, and a cluster's
 * connections are many and come and go.
 */
static _Atomic unsigned store_policy_count[3];
static _Atomic bool store_policy_unreadable_logged;

static void conn_on_setup_reply(redisAsyncContext *ac, void *reply, void *privdata);

static void conn_setup_command(redisAsyncContext *ac, enum store_setup_step step, int argc,
                               const char **argv, const size_t *argvlen)
{
    redisAsyncCommandArgv(ac, conn_on_setup_reply, (void *)(intptr_t)step, argc, argv, argvlen);
}

void conn_policy_join(struct store_conn *c)
{
    c->policy = POLICY_UNREAD;
    store_policy_count[POLICY_UNREAD]++;
}

void conn_set_policy(struct store_conn *c, enum store_policy p)
{
    store_policy_count[c->policy]--;
    store_policy_count[p]++;
    c->policy = p;
}

int store_eviction_policy_ok(void)
{
    if (store_policy_count[POLICY_EVICTS] > 0)
        return 0;
    return store_policy_count[POLICY_NOEVICTION] > 0 ? 1 : -1;
}

/* Evicted records re-execute their retries: say so when Redis may evict. */
static void conn_policy_read(struct store_conn *c, const char *policy, size_t len)
{
    bool safe = len == 10 && memcmp(policy, "noeviction", 10) == 0;

    if (!safe)
        log_msg(LOG_WARN, "redis %s: maxmemory-policy is %.*s; an evicted record lets a retry "
                "execute again: use noeviction", c->addr, (int)(len > 64 ? 64 : len), policy);
    conn_set_policy(c, safe ? POLICY_NOEVICTION : POLICY_EVICTS);
}

/*
 * CONFIG GET maxmemory-policy answered: the policy, or a refusal (CONFIG is
 * renamed away on managed Redis, an ACL user may lack +config|get); then
 * INFO memory, which managed services allow, carries it too.
 */
static void conn_check_policy(struct store_conn *c, redisAsyncContext *ac, const redisReply *r)
{
    static const char *const argv[] = { "INFO", "memory" };
    static const size_t argvlen[] = { 4, 6 };

    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING) {
        conn_policy_read(c, r->element[1]->str, r->element[1]->len);
        return;
    }
    conn_setup_command(ac, SETUP_POLICY_INFO, 2, (const char **)argv, argvlen);
}

/*
 * The value of an INFO reply's `field` line (field ends with ':'): its
 * start, and its length in *len; NULL when r is not an INFO text (INFO
 * refused) or has no such line.
 */
static const char *conn_info_field(const redisReply *r, const char *field, size_t *len)
{
    size_t flen = strlen(field);
    const char *line = NULL, *end;

    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_VERB)
        return NULL;
    for (const char *p = r->str; p != NULL && p < r->str + r->len;) {
        if ((size_t)(r->str + r->len - p) > flen && memcmp(p, field, flen) == 0) {
            line = p + flen;
            break;
        }
        p = memchr(p, '\n', (size_t)(r->str + r->len - p));
        if (p != NULL)
            p++;
    }
    if (line == NULL)
        return NULL;
    for (end = line; end < r->str + r->len && *end != '\r' && *end != '\n'; end++)
        ;
    *len = (size_t)(end - line);
    return line;
}

/* INFO memory answered: its `maxmemory_policy:` line, or nothing to check (INFO refused too). */
static void conn_check_policy_info(struct store_conn *c, const redisReply *r)
{
    size_t len;
    const char *line = conn_info_field(r, "maxmemory_policy:", &len);

    if (line == NULL) {
        if (!atomic_exchange(&store_policy_unreadable_logged, true))
            log_msg(LOG_INFO, "redis %s: maxmemory-policy cannot be read (CONFIG GET and INFO "
                    "refused): allow +info or +config|get for the eviction check", c->addr);
        return;
    }
    conn_policy_read(c, line, len);
}

/*
 * INFO replication answered: its master_replid, the ID of the primary's
 * history (a promoted replica and a restarted node get a new one; the same
 * node keeps it across reconnections). Refused or not one: "" (unknown).
 */
static void conn_read_replid(struct store_conn *c, const redisReply *r)
{
    size_t len = 0, len2 = 0;
    const char *id = conn_info_field(r, "master_replid:", &len);
    const char *id2 = conn_info_field(r, "master_replid2:", &len2);

    c->replid[0] = '\0';
    if (id != NULL && len == STORE_REPLID_LEN) {
        memcpy(c->replid, id, len);
        c->replid[len] = '\0';
    }
    /* a replica promoted keeps its former primary's ID as master_replid2; else all zeros */
    c->promoted = id2 != NULL && len2 == STORE_REPLID_LEN &&
                  strspn(id2, "0") < STORE_REPLID_LEN;
}

/* The credentials of AUTH: a sentinel's own, or the data nodes'. */
static const char *conn_username(const struct store_conn *c)
{
    return c->node.kind == STORE_NODE_SENTINEL ? c->cfg->redis_sentinel_username
                                               : c->cfg->redis_username;
}

/* The password of this setup: the last reload's (store_set_credentials), never kept. */
static const char *conn_password(const struct store_conn *c)
{
    return c->node.kind == STORE_NODE_SENTINEL ? c->auth->sentinel_password
                                               : c->auth->password;
}

static void conn_setup_done(struct store_conn *c)
{
    if (c->destroying)
        return; /* retired while it was set up: its owner closes it */
    conn_enter(c, CONN_READY);
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
        conn_check_policy(c, ac, r);
        return;
    }
    if (step == SETUP_POLICY_INFO) {
        conn_check_policy_info(c, r);
        return;
    }
    if (step == SETUP_REPLID) {
        conn_read_replid(c, r);
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

/* Queue the setup; its replies arrive in this order. A sentinel: AUTH and PING only. */
void conn_send_setup(struct store_conn *c, redisAsyncContext *ac)
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
    if (data) {
        const char *argv[] = { "INFO", "replication" };
        const size_t argvlen[] = { 4, 11 };
        c->replid[0] = '\0';
        c->promoted = false;
        conn_setup_command(ac, SETUP_REPLID, 2, argv, argvlen);
    }
    {
        const char *argv[] = { "PING" };
        const size_t argvlen[] = { 4 };
        conn_setup_command(ac, SETUP_PING, 1, argv, argvlen);
    }
}
