/*
 * janitor.c - releasing claims that may have landed unanswered; see janitor.h.
 */
#include "janitor.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "clock.h"
#include "log.h"
#include "store.h"

struct orphan_claim {
    struct janitor *j;
    char owner[33];
    unsigned attempts_left;
    struct event timer;
    TAILQ_ENTRY(orphan_claim) link;
    char record_key[];                      /* NUL-terminated */
};

static void janitor_free(struct orphan_claim *o)
{
    event_del(&o->timer);
    TAILQ_REMOVE(&o->j->claims, o, link);
    o->j->pending--;
    free(o);
}

static void janitor_on_released(enum store_status st, bool applied, void *arg)
{
    struct orphan_claim *o = arg;
    struct timeval retry = clock_ms_to_timeval(JANITOR_RETRY_MS);

    if (st == STORE_OK) {
        if (applied)
            log_msg(LOG_INFO, "released a claim that reached Redis after its request was "
                    "refused (record key %s)", o->record_key);
        o->j->released(o->record_key, o->j->arg);
        janitor_free(o);
    } else if (o->attempts_left-- > 0) {
        evtimer_add(&o->timer, &retry);
    } else {
        log_msg(LOG_ERROR, "gave up releasing a claim that was never forwarded (record key %s) "
                "after its retention; if a retry reports outcome-unknown, purge it "
                "(DELETE /records/<id>)", o->record_key);
        janitor_free(o);
    }
}

static void janitor_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct orphan_claim *o = arg;

    (void)fd;
    (void)what;
    store_release_owned(o->j->store, o->record_key, o->owner, janitor_on_released, o);
}

void janitor_init(struct janitor *j, struct event_base *base, struct store *store,
                  janitor_released_cb *released, void *arg)
{
    j->base = base;
    j->store = store;
    TAILQ_INIT(&j->claims);
    j->pending = 0;
    j->released = released;
    j->arg = arg;
}

void janitor_release(struct janitor *j, const char *record_key, const char *owner,
                     uint64_t retention_ms)
{
    size_t key_len = strlen(record_key);
    struct orphan_claim *o = NULL;
    struct timeval first = clock_ms_to_timeval(JANITOR_RETRY_MS);

    if (j->pending < JANITOR_MAX_CLAIMS)
        o = calloc(1, sizeof(*o) + key_len + 1);
    if (o == NULL) {
        log_msg(LOG_ERROR, "cannot keep releasing a claim that was never forwarded (record key "
                "%s): %u claims wait already; if a retry reports outcome-unknown, purge it "
                "(DELETE /records/<id>)", record_key, (unsigned)j->pending);
        return;
    }
    o->j = j;
    memcpy(o->record_key, record_key, key_len + 1);
    memcpy(o->owner, owner, sizeof(o->owner) - 1);
    /*
     * until the claim itself would be gone: once its lease ends it would read
     * as "outcome unknown" (on_ambiguous: hold), though nothing was forwarded
     */
    o->attempts_left = (unsigned)(retention_ms / JANITOR_RETRY_MS) + 1;
    evtimer_assign(&o->timer, j->base, janitor_on_timer, o);
    TAILQ_INSERT_TAIL(&j->claims, o, link);
    j->pending++;
    evtimer_add(&o->timer, &first);
}

void janitor_deinit(struct janitor *j)
{
    while (!TAILQ_EMPTY(&j->claims))
        janitor_free(TAILQ_FIRST(&j->claims));
}
