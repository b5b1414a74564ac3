/*
 * store_reassert.c - the writes a failover could lose, put back on the new
 * primary (redis.reassert; docs/redis.md#re-assertion-after-a-failover).
 *
 * Replication to Redis replicas is asynchronous: a claim or a record the
 * primary acknowledged just before it died can be missing on the replica
 * promoted in its place, and a retry of that key would then execute again.
 * The proxy that wrote it usually outlives the primary and still knows
 * what it wrote. So each store keeps a journal of its own writes that
 * applied (claims won, takeovers, renewals, completions: store.h's
 * store_claim, store_takeover, store_replace_owned; and the releases of
 * store_release_owned), for redis.reassert.window, in the order they
 * applied, within the worker's share of redis.reassert.max_bytes (the
 * oldest dropped first, counted).
 *
 * When a connection becomes ready on a primary other than the last one
 * (store.c: a new replication ID, or one that cannot be read), the journal
 * is sent, in order and before any command that waited for the
 * connection, as owner-checked writes (SCRIPT_REASSERT, SCRIPT_RELEASE):
 * a key that is gone gets its value back with the time to live it had
 * left; a key that holds the same value or a later record of the same
 * owner is left; a key another owner claimed afresh is left and logged
 * (that key may have run twice). For redis.reassert.grace from then, new
 * claims and takeovers are refused (STORE_UNAVAILABLE: the exchange answers
 * 503 store-unavailable, never forwards), so that the other workers and
 * proxies, which follow the new primary at slightly different times, put
 * back theirs before anyone claims afresh. A worker's own claims are sent
 * after its journal on the same connection, so Redis applies its journal
 * first whatever the grace.
 *
 * Covered: a write whose proxy process outlives the failover, made within
 * the window before it. Not covered: a proxy that dies with the primary
 * (its journal dies with it), a write older than the window that the
 * replica still lacked, Redis Cluster (its slots' primaries are not
 * followed here), an operator's resolve, purge or extension.
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
#include "oom.h"
#include "record.h"

/*
 * A write this store made: on its way (the caller's callback, then it is
 * journalled if it applied), then kept to be put back (s->journal, oldest
 * first).
 */
struct reassert_entry {
    struct store *s;
    TAILQ_ENTRY(reassert_entry) link;
    bool release;               /* a release (owner-checked delete); else a write */
    double written_ms;          /* monotonic: when it applied */
    double expires_ms;          /* monotonic: the key's expiry as written; 0: kept (KEEPTTL) */
    size_t bytes;               /* counted against the store's share of max_bytes */
    char owner[RECORD_OWNER_LEN + 1];
    size_t value_len;
    char *value;                /* into data, after the key */
    size_t expected_len;        /* a takeover: the record it replaced (0: none) */
    char *expected;             /* into data, after the value */
    uint64_t px_ms;             /* the write's PX (0: KEEPTTL) */
    union {                     /* the caller's, while the write is on its way */
        store_value_cb *value;
        store_cas_cb *cas;
    } cb;
    void *arg;
    char data[];                /* the key (NUL-terminated), the value, the expected record */
};

/* A put-back on its way: the record key its log line names. */
struct reassert_sent {
    struct store *s;
    unsigned round;             /* the replay it belongs to (s->reassert_round) */
    bool final;                 /* the last look: another owner's record is reported */
    char record_key[];
};

bool store_reassert_on(const struct store *s)
{
    return s->cfg->redis_reassert_window_ms > 0 && s->cluster == NULL && !s->claimless;
}

bool store_reassert_incomplete(const struct store *s)
{
    return s->reassert_outstanding > 0 || s->reassert_failed;
}

static void reassert_free(struct store *s, struct reassert_entry *e)
{
    TAILQ_REMOVE(&s->journal, e, link);
    s->journal_bytes -= e->bytes;
    free(e);
}

/* The journal's share of this store: redis.reassert.max_bytes over the workers. */
static size_t reassert_budget(const struct store *s)
{
    unsigned workers = s->cfg->workers > 0 ? s->cfg->workers : 1;

    return s->cfg->redis_reassert_max_bytes / workers;
}

void store_reassert_prune(struct store *s)
{
    double old = clock_mono_ms() - (double)s->cfg->redis_reassert_window_ms;
    struct reassert_entry *e;

    while ((e = TAILQ_FIRST(&s->journal)) != NULL && e->written_ms < old)
        reassert_free(s, e);
}

/*
 * A release applied: the earlier writes of its key and owner are not put
 * back any more (a claim put back and then released would find the key
 * claimed afresh by someone else meanwhile, a false alarm); the release
 * itself is, for a new primary that still has the claim. Releases are rare
 * (a refused or ambiguous request): a walk from the newest entry.
 */
static void reassert_forget_key(struct store *s, const struct reassert_entry *release)
{
    struct reassert_entry *e, *prev;

    for (e = TAILQ_LAST(&s->journal, reassert_journal); e != NULL; e = prev) {
        prev = TAILQ_PREV(e, reassert_journal, link);
        if (!e->release && strcmp(e->data, release->data) == 0 &&
            strcmp(e->owner, release->owner) == 0)
            reassert_free(s, e);
    }
}

/* e applied: journal it, the oldest dropped while the store's share is exceeded. */
static void reassert_keep(struct store *s, struct reassert_entry *e)
{
    size_t budget = reassert_budget(s);
    struct reassert_entry *old;

    e->written_ms = clock_mono_ms();
    store_reassert_prune(s);
    if (e->bytes > budget) { /* never fits: the others keep their place */
        free(e);
        store_reassert_count(s, STORE_EVENT_REASSERT_DROPPED);
        return;
    }
    if (e->release)
        reassert_forget_key(s, e);
    while ((old = TAILQ_FIRST(&s->journal)) != NULL && s->journal_bytes + e->bytes > budget) {
        reassert_free(s, old);
        store_reassert_count(s, STORE_EVENT_REASSERT_DROPPED);
    }
    TAILQ_INSERT_TAIL(&s->journal, e, link);
    s->journal_bytes += e->bytes;
}

struct reassert_entry *store_reassert_begin(struct store *s, const char *key,
                                            const char *owner, const char *value, size_t len,
                                            const char *expected, size_t expected_len,
                                            uint64_t px_ms, bool release)
{
    size_t key_len = strlen(key);
    struct reassert_entry *e = oom_check(malloc(sizeof(*e) + key_len + 1 + len + expected_len),
                                         "a journalled write");

    memset(e, 0, sizeof(*e));
    e->s = s;
    e->release = release;
    e->bytes = sizeof(*e) + key_len + 1 + len + expected_len;
    snprintf(e->owner, sizeof(e->owner), "%.*s", RECORD_OWNER_LEN, owner);
    memcpy(e->data, key, key_len + 1);
    e->value = e->data + key_len + 1;
    memcpy(e->value, value, len);
    e->value_len = len;
    e->expected = e->value + len;
    if (expected_len > 0)
        memcpy(e->expected, expected, expected_len);
    e->expected_len = expected_len;
    e->px_ms = px_ms;
    return e;
}

/* The write of e was answered: e journalled when it applied, else freed. */
static void reassert_end(struct reassert_entry *e, bool applied)
{
    if (applied) {
        e->expires_ms = e->px_ms > 0 ? clock_mono_ms() + (double)e->px_ms : 0;
        reassert_keep(e->s, e);
    } else {
        free(e);
    }
}

void store_reassert_on_claimed(enum store_status st, const char *value, size_t len, void *arg)
{
    struct reassert_entry *e = arg;
    store_value_cb *cb = e->cb.value;
    void *cb_arg = e->arg;

    reassert_end(e, st == STORE_OK && value == NULL); /* won: no record held the key */
    cb(st, value, len, cb_arg);
}

void store_reassert_on_written(enum store_status st, bool applied, void *arg)
{
    struct reassert_entry *e = arg;
    store_cas_cb *cb = e->cb.cas;
    void *cb_arg = e->arg;

    reassert_end(e, st == STORE_OK && applied);
    cb(st, applied, cb_arg);
}

void store_reassert_wrap_value(struct reassert_entry *e, store_value_cb *cb, void *arg)
{
    e->cb.value = cb;
    e->arg = arg;
}

void store_reassert_wrap_cas(struct reassert_entry *e, store_cas_cb *cb, void *arg)
{
    e->cb.cas = cb;
    e->arg = arg;
}

/* ---- the put-back after a failover ----------------------------------------- */

void store_reassert_count(struct store *s, enum store_event ev)
{
    if (s->event_observer != NULL)
        s->event_observer(ev, s->event_arg);
}

/* A put-back answered: counted by what it found (SCRIPT_REASSERT's or SCRIPT_RELEASE's reply). */
static void reassert_on_sent(struct reassert_sent *sent, enum store_status st, long long result,
                             bool release)
{
    struct store *s = sent->s;
    const char *record_key = sent->record_key;
    bool current = sent->round == s->reassert_round;

    if (current)
        s->reassert_outstanding--;
    if (st != STORE_OK) {
        if (current && !s->reassert_failed)
            log_msg(LOG_WARN, "could not put back a recent write on the new primary (record "
                    "key %s): %s; the whole journal goes again on the next connection",
                    record_key, store_status_name(st));
        if (current)
            s->reassert_failed = true;
        store_reassert_count(s, STORE_EVENT_REASSERT_FAILED);
    } else if (release && result == 1) {
        log_msg(LOG_INFO, "released again a claim that the new primary still had (record key "
                "%s), after a failover", record_key);
        store_reassert_count(s, STORE_EVENT_REASSERT_RESTORED);
    } else if (release) {
        store_reassert_count(s, STORE_EVENT_REASSERT_PRESENT);
    } else if (result == 2) {
        store_reassert_count(s, STORE_EVENT_REASSERT_RESTORED);
    } else if (result == 0 && !sent->final) {
        s->reassert_recheck = true; /* perhaps a claim another proxy's put-back releases */
    } else if (result == 0) {
        log_msg(LOG_WARN, "re-asserting a recent write after a failover: record key %s holds "
                "another owner's record on the new primary (claimed afresh before the "
                "write was put back: that key may have executed twice)", record_key);
        store_reassert_count(s, STORE_EVENT_REASSERT_SUPERSEDED);
    } else {
        store_reassert_count(s, STORE_EVENT_REASSERT_PRESENT);
    }
}

static void reassert_on_write_reply(enum store_status st, const struct store_reply *r, void *arg)
{
    struct reassert_sent *sent = arg;
    long long result = -1;

    if (st == STORE_OK && r->type == STORE_INT)
        result = r->integer;
    else if (st == STORE_OK)
        st = STORE_ERROR; /* not what the script sends */
    reassert_on_sent(sent, st, result, false);
    free(sent);
}

static void reassert_on_release_reply(enum store_status st, const struct store_reply *r,
                                      void *arg)
{
    struct reassert_sent *sent = arg;
    long long result = st == STORE_OK && r->type == STORE_INT ? r->integer : 0;

    reassert_on_sent(sent, st, result, true);
    free(sent);
}

/* Send e as an owner-checked put-back (argv through store_cmd.c's submit). */
static void reassert_send(struct store *s, const struct reassert_entry *e, double now,
                          bool final)
{
    enum store_record_script script = e->release ? SCRIPT_RELEASE : SCRIPT_REASSERT;
    size_t key_len = strlen(e->data);
    struct reassert_sent *sent = oom_check(malloc(sizeof(*sent) + key_len + 1),
                                           "a put-back");
    struct store_cmd *cmd = store_cmd_new(s, REPLY_ANY, sent);
    char px[24];
    int n;

    sent->s = s;
    sent->round = s->reassert_round;
    sent->final = final;
    memcpy(sent->record_key, e->data, key_len + 1);
    if (e->expires_ms > 0) {
        double left = e->expires_ms - now;
        n = snprintf(px, sizeof(px), "%llu", (unsigned long long)(left < 1 ? 1 : left));
    } else {
        n = snprintf(px, sizeof(px), "0");
    }
    /*
     * EVAL, not EVALSHA: a new primary's script cache is empty, and an
     * EVALSHA's NOSCRIPT would send the body only after the claims
     * pipelined behind it had run
     */
    const char *text = store_script_text(script);
    const char *argv[] = { "EVAL", text, "1", e->data, e->owner, e->value, px, e->expected };
    const size_t argvlen[] = { 4, strlen(text), 1, key_len, strlen(e->owner), e->value_len,
                               (size_t)n, e->expected_len };

    cmd->cb.any = e->release ? reassert_on_release_reply : reassert_on_write_reply;
    store_submit(cmd, e->release ? 5 : 8, argv, argvlen);
}

/* Send the whole journal, in order (one round); how many were sent. */
static unsigned reassert_send_all(struct store *s, bool final)
{
    double now = clock_mono_ms();
    struct reassert_entry *e, *next;
    unsigned sent = 0;

    s->reassert_round++;
    s->reassert_failed = false;
    s->reassert_recheck = false;
    store_reassert_prune(s);
    for (e = TAILQ_FIRST(&s->journal); e != NULL; e = next) {
        next = TAILQ_NEXT(e, link);
        if (e->expires_ms > 0 && e->expires_ms <= now + 1) {
            reassert_free(s, e); /* its key has expired by now anyway */
            continue;
        }
        reassert_send(s, e, now, final);
        sent++;
    }
    s->reassert_outstanding = sent;
    return sent;
}

/*
 * The grace is over: when a put-back found another owner's record, the
 * journal goes once more. That record may have been a claim whose release
 * another proxy's put-back has brought back since (a claim released, the key
 * claimed afresh, and the primary that had both lost them); what still
 * holds another owner's record now is reported (superseded).
 */
static void reassert_on_grace_over(evutil_socket_t fd, short what, void *arg)
{
    struct store *s = arg;

    (void)fd;
    (void)what;
    if (!s->reassert_recheck || s->conn == NULL || !store_conn_ready(s->conn))
        return;
    log_msg(LOG_INFO, "redis: sending the journal once more after the grace (a put-back found "
            "another owner's record): %u writes", reassert_send_all(s, true));
}

void store_reassert_replay(struct store *s, const char *addr, const char *why)
{
    struct timeval grace = clock_ms_to_timeval(s->cfg->redis_reassert_grace_ms);
    bool final = s->cfg->redis_reassert_grace_ms == 0;
    unsigned sent;

    s->grace_until_ms = clock_mono_ms() + (double)s->cfg->redis_reassert_grace_ms;
    sent = reassert_send_all(s, final);
    if (!final) {
        if (!s->reassert_ev_set) {
            evtimer_assign(&s->reassert_ev, s->base, reassert_on_grace_over, s);
            s->reassert_ev_set = true;
        }
        evtimer_add(&s->reassert_ev, &grace);
    }
    store_reassert_count(s, STORE_EVENT_NEW_PRIMARY);
    log_msg(LOG_WARN, "redis %s: %s; putting back %u writes of the last %llu ms, new claims "
            "refused for %llu ms (redis.reassert)", addr, why, sent,
            (unsigned long long)s->cfg->redis_reassert_window_ms,
            (unsigned long long)s->cfg->redis_reassert_grace_ms);
}

void store_reassert_first(struct store *s, const char *addr)
{
    if (s->cfg->redis_reassert_grace_ms == 0)
        return;
    s->grace_until_ms = clock_mono_ms() + (double)s->cfg->redis_reassert_grace_ms;
    log_msg(LOG_INFO, "redis %s: first connection, to a promoted replica: new claims refused "
            "for %llu ms (redis.reassert.grace: if it was just promoted, it may still lack "
            "writes that other proxies re-assert)", addr,
            (unsigned long long)s->cfg->redis_reassert_grace_ms);
}

void store_reassert_clear(struct store *s)
{
    if (s->reassert_ev_set)
        event_del(&s->reassert_ev);
    while (!TAILQ_EMPTY(&s->journal))
        reassert_free(s, TAILQ_FIRST(&s->journal));
}
