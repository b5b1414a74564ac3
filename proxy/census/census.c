/*
 * census.c - the census of held records on one worker's loop (census.h):
 * the tick that reads the last result into the gauges and may take the
 * lock, the walk step by step, its lock renewed as it goes, the result
 * written and the lock released.
 *
 * The walker renews its lock whenever a third of a period has passed since
 * the last renewal, so a pass longer than the period keeps it; a walker
 * that finds its lock gone (it stalled for a whole period and another
 * instance took over) drops its pass. A pass that fails (Redis unreachable,
 * a reply that cannot be read) is dropped too, and the next tick starts
 * afresh; the gauges keep the last result meanwhile, and the census's age
 * says how old it is.
 */
#include "census.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "clock.h"
#include "config.h"
#include "fingerprint.h"
#include "log.h"
#include "metrics.h"
#include "store_redis.h"

#define CENSUS_RESULT_TTL_MS (7ULL * 24 * 3600 * 1000) /* a result no census replaces goes */

/* The lock's scripts: compare-and-set on the holder's token. */
enum census_script { CENSUS_SCRIPT_RENEW, CENSUS_SCRIPT_RELEASE, CENSUS_SCRIPT_COUNT };

static const char *const census_script_text[CENSUS_SCRIPT_COUNT] = {
    [CENSUS_SCRIPT_RENEW] =
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
        "  return 0\n"
        "end\n"
        "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
        "return 1\n",
    [CENSUS_SCRIPT_RELEASE] =
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
        "  return 0\n"
        "end\n"
        "redis.call('DEL', KEYS[1])\n"
        "return 1\n",
};

static struct store_script census_scripts[CENSUS_SCRIPT_COUNT];
static pthread_once_t census_scripts_once = PTHREAD_ONCE_INIT;

static void census_scripts_register(void)
{
    for (int i = 0; i < CENSUS_SCRIPT_COUNT; i++) {
        census_scripts[i].text = census_script_text[i];
        store_script_register(&census_scripts[i]);
    }
}

struct census {
    struct event_base *base;
    struct store *store;                /* borrowed */
    struct metrics *metrics;            /* borrowed */
    char prefix[CONFIG_MAX_KEY_PREFIX + 1];
    char lock_key[CONFIG_MAX_KEY_PREFIX + 24];
    char result_key[CONFIG_MAX_KEY_PREFIX + 24];
    char token[33];                     /* this instance's, in the lock while it walks */
    uint64_t period_ms;                 /* admin.held_refresh */
    struct event tick;                  /* every period: read the result, maybe walk */
    struct event step;                  /* the walk's next step */
    bool stopped;                       /* census_stop: every reply is dropped */
    bool ticking;                       /* the tick's read (and lock) is out */
    bool walking;                       /* this instance holds the lock and walks */
    bool seen;                          /* a result was read or written: seen_started_ms */
    uint64_t seen_started_ms;           /* the start of the last pass seen, ms since the epoch */
    double renewed_mono_ms;             /* when the lock was last taken or renewed */
    struct census_result pass;          /* the pass under way: its start */
    struct store_census_walk walk;
    const char *trouble;                /* the last failure logged (static), NULL: none */
};

static const char census_unread[] = "the census result could not be read from Redis";

/* Say once why the census fails, until it works again (census_well). */
static void census_trouble(struct census *c, const char *why)
{
    if (c->trouble == why)
        return;
    c->trouble = why;
    log_msg(LOG_WARN, "held census: %s; the held-record gauges show the last census read "
            "(idempotency_proxy_held_census_age_seconds says how old)", why);
}

static void census_well(struct census *c)
{
    if (c->trouble == NULL)
        return;
    c->trouble = NULL;
    log_msg(LOG_INFO, "held census: works again");
}

static void census_arm(struct event *ev, uint64_t ms)
{
    struct timeval tv = clock_ms_to_timeval(ms);

    event_add(ev, &tv);
}

/* The result's counts into the gauges. */
static void census_show(struct census *c, const struct census_result *r)
{
    struct metrics_held h = { .finished_ms = r->finished_ms };

    _Static_assert((int)METRICS_HELD_STATES == (int)STORE_HELD_STATES &&
                       (int)METRICS_HELD_CLAIMED_EXPIRED == (int)STORE_HELD_CLAIMED_EXPIRED &&
                       (int)METRICS_HELD_OUTCOME_UNKNOWN == (int)STORE_HELD_OUTCOME_UNKNOWN &&
                       (int)METRICS_HELD_RESOLVED == (int)STORE_HELD_RESOLVED,
                   "the gauges' states are the census's");
    for (int i = 0; i < STORE_HELD_STATES; i++) {
        h.state[i].records = r->held[i].records;
        h.state[i].oldest_created_ms = r->held[i].oldest_created_ms;
        h.state[i].soonest_expiry_ms = r->held[i].soonest_expiry_ms;
    }
    metrics_held_set(c->metrics, &h);
    c->seen = true;
    c->seen_started_ms = r->started_ms;
}

/* Whether a pass is due: none seen, or the last one started 3/4 of a period ago or more. */
static bool census_due(const struct census *c, uint64_t now_ms)
{
    if (!c->seen || c->seen_started_ms > now_ms + c->period_ms) /* another's clock far ahead */
        return true;
    return now_ms >= c->seen_started_ms + c->period_ms / 4 * 3;
}

/* The lock's compare-and-set (renew for lease_ms, or release), cb's reply an integer. */
static void census_lock_script(struct census *c, enum census_script script, store_reply_cb *cb)
{
    const char *keys[] = { c->lock_key };
    char lease[24];
    const char *args[] = { c->token, lease };

    snprintf(lease, sizeof(lease), "%llu", (unsigned long long)c->period_ms);
    pthread_once(&census_scripts_once, census_scripts_register);
    store_script_run(c->store, &census_scripts[script], 1, keys,
                     script == CENSUS_SCRIPT_RENEW ? 2 : 1, args, cb, c);
}

static void census_on_released(enum store_status st, const struct store_reply *r, void *arg)
{
    (void)st;
    (void)r;
    (void)arg;  /* a release that failed ends with the lock's lease */
}

/* The walk is over (done or dropped): the lock goes, at once or with its lease. */
static void census_walk_end(struct census *c)
{
    c->walking = false;
    census_lock_script(c, CENSUS_SCRIPT_RELEASE, census_on_released);
}

static void census_on_published(enum store_status st, const struct store_reply *r, void *arg)
{
    struct census *c = arg;

    if (c->stopped)
        return;
    if (st != STORE_OK || r->type != STORE_STR) {
        census_trouble(c, "the census result could not be written to Redis");
    } else {
        census_well(c);
        census_show(c, &c->pass);
        log_msg(LOG_DEBUG, "held census: %llu record keys in %llu ms: %llu claimed_expired, %llu "
                "outcome_unknown, %llu resolved", (unsigned long long)c->pass.keys,
                (unsigned long long)(c->pass.finished_ms - c->pass.started_ms),
                (unsigned long long)c->pass.held[STORE_HELD_CLAIMED_EXPIRED].records,
                (unsigned long long)c->pass.held[STORE_HELD_OUTCOME_UNKNOWN].records,
                (unsigned long long)c->pass.held[STORE_HELD_RESOLVED].records);
    }
    census_walk_end(c);
}

/* Every node was walked: the result into Redis with its times. */
static void census_publish(struct census *c)
{
    size_t len = 0;
    char *text;
    char ttl[24];

    c->pass.finished_ms = clock_now_ms();
    c->pass.keys = c->walk.keys;
    memcpy(c->pass.held, c->walk.held, sizeof(c->pass.held));
    text = census_result_encode(&c->pass, &len);
    if (text == NULL) {
        census_trouble(c, "out of memory for the census result");
        census_walk_end(c);
        return;
    }
    snprintf(ttl, sizeof(ttl), "%llu", CENSUS_RESULT_TTL_MS);
    store_command(c->store, 5, (const char *[]){ "SET", c->result_key, text, "PX", ttl },
                  (const size_t[]){ 3, strlen(c->result_key), len, 2, strlen(ttl) },
                  census_on_published, c);
    free(text);
}

static void census_on_step(enum store_status st, const char *why, void *arg)
{
    struct census *c = arg;

    if (c->stopped)
        return;
    if (st != STORE_OK) {
        census_trouble(c, why);
        census_walk_end(c);
    } else if (c->walk.done) {
        census_publish(c);
    } else {
        census_arm(&c->step, CENSUS_STEP_MS);
    }
}

static void census_walk_step(struct census *c)
{
    store_census_step(c->store, c->prefix, &c->walk, clock_now_ms(), CENSUS_STEP_KEYS,
                      census_on_step, c);
}

static void census_on_renewed(enum store_status st, const struct store_reply *r, void *arg)
{
    struct census *c = arg;

    if (c->stopped)
        return;
    if (st != STORE_OK || r->type != STORE_INT) {
        census_trouble(c, "the census lock could not be renewed");
        census_walk_end(c);
    } else if (r->integer != 1) {
        /* it stalled for a whole period and another instance took over: its pass counts */
        log_msg(LOG_INFO, "held census: another instance took the census lock over; this "
                "pass is dropped");
        c->walking = false;
    } else {
        c->renewed_mono_ms = clock_mono_ms();
        census_walk_step(c);
    }
}

/* c->step: the walk's next step, its lock renewed first once a third of a period has gone. */
static void census_on_step_timer(evutil_socket_t fd, short what, void *arg)
{
    struct census *c = arg;

    (void)fd;
    (void)what;
    if (c->stopped || !c->walking)
        return;
    if (clock_mono_ms() - c->renewed_mono_ms >= (double)c->period_ms / 3)
        census_lock_script(c, CENSUS_SCRIPT_RENEW, census_on_renewed);
    else
        census_walk_step(c);
}

/* SET lock token NX PX period: "OK" when this instance walks now, nil when another does. */
static void census_on_lock(enum store_status st, const struct store_reply *r, void *arg)
{
    struct census *c = arg;

    if (c->stopped)
        return;
    c->ticking = false;
    if (st != STORE_OK) {
        census_trouble(c, "the census lock could not be taken");
        return;
    }
    if (r->type != STORE_STR)
        return;
    c->walking = true;
    c->renewed_mono_ms = clock_mono_ms();
    memset(&c->pass, 0, sizeof(c->pass));
    c->pass.started_ms = clock_now_ms();
    store_census_init(&c->walk);
    census_walk_step(c);
}

/* The last result (nil: none yet) into the gauges; then the lock, when a pass is due. */
static void census_on_read(enum store_status st, const struct store_reply *r, void *arg)
{
    struct census *c = arg;
    struct census_result res;
    char px[24];

    if (c->stopped)
        return;
    if (st != STORE_OK) {
        c->ticking = false;
        census_trouble(c, census_unread);
        event_del(&c->tick);
        census_arm(&c->tick, c->period_ms < CENSUS_RETRY_MS ? c->period_ms : CENSUS_RETRY_MS);
        return;
    }
    if (c->trouble == census_unread)
        census_well(c);
    if (r->type == STORE_STR && census_result_decode(r->str, r->len, &res) == 0) {
        census_show(c, &res);
    } else if (r->type != STORE_NIL) {
        /* fail closed: no count is made up; the next pass writes a readable one */
        census_trouble(c, "the census result in Redis is not one this version reads");
        c->seen = false;
    }
    if (c->walking || !census_due(c, clock_now_ms())) {
        c->ticking = false;
        return;
    }
    snprintf(px, sizeof(px), "%llu", (unsigned long long)c->period_ms);
    store_command(c->store, 6, (const char *[]){ "SET", c->lock_key, c->token, "NX", "PX", px },
                  (const size_t[]){ 3, strlen(c->lock_key), strlen(c->token), 2, 2, strlen(px) },
                  census_on_lock, c);
}

/* c->tick: every period, read the last result (one read at a time). */
static void census_on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct census *c = arg;

    (void)fd;
    (void)what;
    if (c->stopped)
        return;
    if (!store_ready(c->store)) {
        /* connecting, or Redis is down (idempotency_proxy_redis_up says so): look again soon */
        census_arm(&c->tick, c->period_ms < CENSUS_RETRY_MS ? c->period_ms : CENSUS_RETRY_MS);
        return;
    }
    census_arm(&c->tick, c->period_ms);
    if (c->ticking)
        return;
    c->ticking = true;
    store_command(c->store, 2, (const char *[]){ "GET", c->result_key },
                  (const size_t[]){ 3, strlen(c->result_key) }, census_on_read, c);
}

struct census *census_create(struct event_base *base, struct store *store,
                             struct metrics *metrics, const char *key_prefix,
                             uint64_t period_ms)
{
    struct census *c = calloc(1, sizeof(*c));

    if (c == NULL || owner_token_create(c->token) != 0) {
        free(c);
        return NULL;
    }
    c->base = base;
    c->store = store;
    c->metrics = metrics;
    c->period_ms = period_ms;
    snprintf(c->prefix, sizeof(c->prefix), "%s", key_prefix);
    snprintf(c->lock_key, sizeof(c->lock_key), "%s:census:{held}:lock", key_prefix);
    snprintf(c->result_key, sizeof(c->result_key), "%s:census:{held}:result", key_prefix);
    event_assign(&c->tick, base, -1, 0, census_on_tick, c);
    event_assign(&c->step, base, -1, 0, census_on_step_timer, c);
    /* a period after the start, as every later tick: the store has connected by then */
    census_arm(&c->tick, period_ms);
    return c;
}

void census_set_period(struct census *c, uint64_t period_ms)
{
    if (c == NULL || c->stopped || c->period_ms == period_ms)
        return;
    c->period_ms = period_ms;
    event_del(&c->tick);
    census_arm(&c->tick, period_ms);
}

void census_stop(struct census *c)
{
    if (c == NULL)
        return;
    c->stopped = true;
    event_del(&c->tick);
    event_del(&c->step);
}

void census_destroy(struct census *c)
{
    if (c == NULL)
        return;
    census_stop(c);
    free(c);
}
