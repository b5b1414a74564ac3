/*
 * janitor.c - releasing claims that may have landed unanswered; see janitor.h.
 *
 * Each claim is looked at with a GET: our claim (state C, our owner token)
 * is released with the compare-and-set; no record means not landed (yet) and
 * is looked at again later; any other record ends the watch. A GET first,
 * rather than the release, costs one command per look at a claim that never
 * lands, the common case once Redis answers.
 *
 * Released claims are remembered for a while, and released again when the
 * store follows a failover (janitor.h): the new primary may have been a
 * replica that got the claim and not its release.
 */
#include "janitor.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "clock.h"
#include "log.h"
#include "record.h"
#include "store.h"

struct orphan_claim {
    struct janitor *j;
    char owner[33];
    double give_up_ms;                      /* monotonic: its retention is out */
    uint64_t absent_delay_ms;               /* the next look after "no record" */
    bool answered;                          /* Redis has answered for it: not in pending */
    struct event timer;
    TAILQ_ENTRY(orphan_claim) link;
    char record_key[];                      /* NUL-terminated */
};

struct released_claim {
    struct janitor *j;
    char owner[33];
    double until_ms;                        /* monotonic: forgotten then */
    bool sending;                           /* its release is on its way: kept until answered */
    struct event timer;                     /* a failed release sent again */
    TAILQ_ENTRY(released_claim) link;
    char record_key[];                      /* NUL-terminated */
};

static void janitor_free(struct orphan_claim *o)
{
    event_del(&o->timer);
    TAILQ_REMOVE(&o->j->claims, o, link);
    o->j->n_claims--;
    if (!o->answered)
        o->j->pending--;
    free(o);
}

/* Redis has answered for o: a SIGTERM drain need not wait for it any more. */
static void janitor_answered(struct orphan_claim *o)
{
    if (!o->answered) {
        o->answered = true;
        o->j->pending--;
    }
}

/* A command for o is on its way again (its release): a SIGTERM drain waits for its answer. */
static void janitor_waiting(struct orphan_claim *o)
{
    if (o->answered) {
        o->answered = false;
        o->j->pending++;
    }
}

/* Look at o again in delay_ms, or give up once its retention is out. */
static void janitor_later(struct orphan_claim *o, uint64_t delay_ms)
{
    struct timeval tv = clock_ms_to_timeval(delay_ms);

    if (clock_mono_ms() + (double)delay_ms > o->give_up_ms) {
        log_msg(LOG_ERROR, "gave up releasing a claim that was never forwarded (record key %s) "
                "after its retention; if a retry reports outcome-unknown, purge it "
                "(DELETE /records/<id>)", o->record_key);
        janitor_free(o);
        return;
    }
    evtimer_add(&o->timer, &tv);
}

static void janitor_on_released(enum store_status st, bool applied, void *arg)
{
    struct orphan_claim *o = arg;

    if (st == STORE_OK && applied) {
        log_msg(LOG_INFO, "released a claim that reached Redis after its request was "
                "refused (record key %s)", o->record_key);
        o->j->released(o->record_key, o->j->arg);
        janitor_remember(o->j, o->record_key, o->owner);
        janitor_free(o);
    } else {
        /* a store failure, or it changed since the GET (expired, taken over): look again */
        janitor_later(o, JANITOR_RETRY_MS);
    }
}

static void janitor_on_read(enum store_status st, const char *value, size_t len, void *arg)
{
    struct orphan_claim *o = arg;
    struct record rec;

    if (st != STORE_OK) {
        janitor_later(o, JANITOR_RETRY_MS);
        return;
    }
    if (value == NULL) {
        janitor_answered(o);
        /* not there: gone, or still on its way (a dropped socket, a stalled Redis) */
        uint64_t delay = o->absent_delay_ms;

        o->absent_delay_ms = delay * 2 > JANITOR_RETRY_MAX_MS ? JANITOR_RETRY_MAX_MS : delay * 2;
        janitor_later(o, delay);
        return;
    }
    if (record_decode(value, len, &rec) == 0 && rec.state == RECORD_CLAIMED &&
        memcmp(rec.owner, o->owner, RECORD_OWNER_LEN) == 0) {
        /* landed: a drain waits until the release is answered, not only the GET */
        janitor_waiting(o);
        store_release_owned(o->j->store, o->record_key, o->owner, janitor_on_released, o);
        return;
    }
    /* someone else's record holds the key: our claim cannot land on it */
    janitor_free(o);
}

static void janitor_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct orphan_claim *o = arg;

    (void)fd;
    (void)what;
    store_get(o->j->store, o->record_key, janitor_on_read, o);
}

void janitor_init(struct janitor *j, struct event_base *base, struct store *store,
                  janitor_released_cb *released, void *arg)
{
    j->base = base;
    j->store = store;
    TAILQ_INIT(&j->claims);
    j->n_claims = 0;
    j->pending = 0;
    j->released = released;
    j->arg = arg;
    TAILQ_INIT(&j->released_claims);
    j->n_released = 0;
}

void janitor_release(struct janitor *j, const char *record_key, const char *owner,
                     uint64_t retention_ms)
{
    size_t key_len = strlen(record_key);
    struct orphan_claim *o = NULL;
    struct timeval first = clock_ms_to_timeval(JANITOR_RETRY_MS);

    if (j->n_claims < JANITOR_MAX_CLAIMS)
        o = calloc(1, sizeof(*o) + key_len + 1);
    if (o == NULL) {
        log_msg(LOG_ERROR, "cannot keep releasing a claim that was never forwarded (record key "
                "%s): %u claims wait already; if a retry reports outcome-unknown, purge it "
                "(DELETE /records/<id>)", record_key, j->n_claims);
        return;
    }
    o->j = j;
    memcpy(o->record_key, record_key, key_len + 1);
    memcpy(o->owner, owner, sizeof(o->owner) - 1);
    /*
     * until the claim itself would be gone: once its lease ends it would read
     * as "outcome unknown" (on_ambiguous: hold), though nothing was forwarded
     */
    o->give_up_ms = clock_mono_ms() + (double)retention_ms + JANITOR_RETRY_MS;
    o->absent_delay_ms = JANITOR_RETRY_MS;
    evtimer_assign(&o->timer, j->base, janitor_on_timer, o);
    TAILQ_INSERT_TAIL(&j->claims, o, link);
    j->n_claims++;
    j->pending++;
    evtimer_add(&o->timer, &first);
}

/* ---- released claims, released again after a failover -------------------- */

static void janitor_forget(struct released_claim *r)
{
    event_del(&r->timer);
    TAILQ_REMOVE(&r->j->released_claims, r, link);
    r->j->n_released--;
    free(r);
}

/* Forget the claims remembered past JANITOR_REMEMBER_MS (not one whose release is on its way). */
static void janitor_forget_old(struct janitor *j)
{
    double now = clock_mono_ms();
    struct released_claim *r = TAILQ_FIRST(&j->released_claims), *next;

    for (; r != NULL && r->until_ms < now; r = next) {
        next = TAILQ_NEXT(r, link);
        if (!r->sending)
            janitor_forget(r);
    }
}

static void janitor_send_again(struct released_claim *r);

static void janitor_on_released_again(enum store_status st, bool applied, void *arg)
{
    struct released_claim *r = arg;
    struct timeval tv = clock_ms_to_timeval(JANITOR_RETRY_MS);

    r->sending = false;
    if (st == STORE_OK && applied) {
        log_msg(LOG_WARN, "released again a claim that was never forwarded (record key %s): "
                "the primary followed after a failover had it without its release",
                r->record_key);
        r->j->released(r->record_key, r->j->arg);
    } else if (st != STORE_OK && clock_mono_ms() + JANITOR_RETRY_MS < r->until_ms) {
        evtimer_add(&r->timer, &tv);
    }
}

static void janitor_send_again(struct released_claim *r)
{
    r->sending = true;
    store_release_owned(r->j->store, r->record_key, r->owner, janitor_on_released_again, r);
}

static void janitor_on_again_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    janitor_send_again(arg);
}

void janitor_remember(struct janitor *j, const char *record_key, const char *owner)
{
    size_t key_len = strlen(record_key);
    struct released_claim *r = NULL, *old;

    janitor_forget_old(j);
    for (old = TAILQ_FIRST(&j->released_claims);
         old != NULL && j->n_released >= JANITOR_MAX_REMEMBERED; old = TAILQ_NEXT(old, link)) {
        if (!old->sending) {
            janitor_forget(old);
            break;
        }
    }
    if (j->n_released < JANITOR_MAX_REMEMBERED)
        r = calloc(1, sizeof(*r) + key_len + 1);
    if (r == NULL) {
        log_msg(LOG_WARN, "cannot remember a released claim (record key %s) to release it "
                "again after a failover", record_key);
        return;
    }
    r->j = j;
    memcpy(r->record_key, record_key, key_len + 1);
    memcpy(r->owner, owner, sizeof(r->owner) - 1);
    r->until_ms = clock_mono_ms() + JANITOR_REMEMBER_MS;
    evtimer_assign(&r->timer, j->base, janitor_on_again_timer, r);
    TAILQ_INSERT_TAIL(&j->released_claims, r, link);
    j->n_released++;
}

void janitor_failed_over(struct janitor *j)
{
    struct released_claim *r;

    janitor_forget_old(j);
    TAILQ_FOREACH(r, &j->released_claims, link) {
        if (!r->sending) {
            event_del(&r->timer);
            janitor_send_again(r);
        }
    }
}

void janitor_deinit(struct janitor *j)
{
    while (!TAILQ_EMPTY(&j->claims))
        janitor_free(TAILQ_FIRST(&j->claims));
    while (!TAILQ_EMPTY(&j->released_claims))
        janitor_forget(TAILQ_FIRST(&j->released_claims));
}
