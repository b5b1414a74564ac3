/*
 * inbox_deliver_int.h - what the consumer's two files share and nothing
 * else includes: inbox_deliver.c (the loop: reading, takeover, renewal,
 * retries, life) calls inbox_delivery.c (one delivery and its settlement),
 * never the other way.
 */
#ifndef IDEM_INBOX_DELIVER_INT_H
#define IDEM_INBOX_DELIVER_INT_H

#include "inbox.h"
#include "inbox_seal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "seal.h"
#include "upstream.h"
#include "webhook.h"

#define INBOX_TICK_MS 50
#define INBOX_PROMOTE_MS 200
#define INBOX_STATS_MS 1000
#define INBOX_PROMOTE_BATCH 100
/* SIGTERM: how long deliveries in flight may finish before they are released to other instances. */
#define INBOX_DRAIN_GRACE_MS 5000
/* A refused permission is probed again this often (ms), so a fixed ACL is noticed. */
#define INBOX_PROBE_AGAIN_MS 2000
/* delivery.rate's burst: this many ms worth of deliveries may start at once (inbox_rate_init). */
#define INBOX_RATE_BURST_MS 100

struct inbox_route;

/* What the receiver's answer decided for an entry, until Redis has it. */
enum inbox_settle { SETTLE_NONE, SETTLE_ACK, SETTLE_RETRY, SETTLE_BURY };

/* One entry being delivered; it is this consumer's pending entry until acked, retried or buried. */
struct inbox_delivery {
    struct inbox_route *r;
    char id[64];
    char *event, *method, *target, *client;   /* owned */
    char record[40];                          /* the record id: logs name a delivery by it */
    char *body;                               /* owned, body_len bytes */
    size_t body_len;
    char *sealed;                             /* owned: header fields and body, sealed
                                                 (inbox_seal.h), sealed_len bytes; NULL: none */
    size_t sealed_len;
    unsigned plain_fields;                    /* "h:" fields the entry carries in plaintext */
    uint64_t received_ms;                     /* unix ms, when the provider's delivery came */
    unsigned attempts;                        /* deliveries before this one */
    struct evkeyvalq headers;
    enum inbox_settle settle;                 /* decided; sent again after a Redis failure */
    bool settling;                            /* its command is in flight */
    bool settle_failed;                       /* logged once */
    unsigned settle_attempts;                 /* SETTLE_RETRY / SETTLE_BURY: attempts so far */
    uint64_t settle_ms;                       /* SETTLE_RETRY: the wait, ms; SETTLE_BURY: died,
                                                 unix ms */
    char reason[256];                         /* SETTLE_BURY */
    TAILQ_ENTRY(inbox_delivery) link;
};

struct inbox_route {
    struct inbox *ib;
    const struct route *route;
    char *name;                               /* owned: inbox_route_name, what seals bind */
    const struct delivery_policy *policy;     /* the boot config's: the delivery's settings */
    const struct delivery_policy *sign;       /* whose sign_secrets sign each attempt: the last
                                                 reload's route of this path
                                                 (inbox_set_config), else policy */
    struct inbox_keys keys;
    struct inbox_store_rate rate;             /* delivery.rate as the gate script takes it */
    bool paused;                              /* as the last gated read found it */
    double read_after_ms;                     /* monotonic: the limiter said wait until then */
    struct event *wake;                       /* fires then, so the route keeps its rate */
    bool probed, probing;                     /* the user's permissions checked (since connect) */
    double next_probe_ms;                     /* monotonic: again after a refusal */
    bool group_ready, group_pending, reading, claiming, renewing, promoting, stats_pending;
    unsigned in_flight;                       /* deliveries in the list */
    char claim_from[64];                      /* where the next XAUTOCLAIM scan starts */
    double next_claim_ms, next_renew_ms, next_promote_ms, next_stats_ms; /* monotonic */
    TAILQ_HEAD(, inbox_delivery) deliveries;
};

struct inbox {
    struct event_base *base;
    struct store *store;
    struct upstream *up;
    struct config *cfg;                       /* one reference */
    struct config *sign_cfg;                  /* the last reload's, the routes' sign points
                                                 into it; one reference, NULL: none yet */
    struct keyring *keyring;                  /* the last config's (inbox_set_config); one
                                                 reference, NULL: none */
    uint64_t plaintext_until_ms;              /* the last config's
                                                 encryption.accept_plaintext_until, unix ms;
                                                 0: unset */
    struct metrics *metrics;
    bool report_gauges;
    char consumer[300];
    struct inbox_route *routes;
    size_t n_routes;
    struct event *tick;                       /* every INBOX_TICK_MS */
    struct event *soon;                       /* a turn now (inbox_schedule, inbox_kick): not
                                                 the tick, whose persistent timeout each manual
                                                 activation would push INBOX_TICK_MS further */
    _Atomic bool stopping;
    _Atomic bool noperm;                      /* a command the inbox needs is refused (/readyz) */
    double stopped_ms;                        /* monotonic ms of inbox_stop */
    _Atomic bool released;                    /* the deliveries in flight were released */
    _Atomic unsigned busy;                    /* Redis commands in flight */
    _Atomic unsigned delivering;              /* deliveries in flight */
    uint64_t rng;                             /* xorshift64 state, for the jitter */
};

/* ---- inbox_delivery.c ---- */

/* Deliver the stream entry (borrowed) of route r: parsed, opened, signed, sent upstream. */
void inbox_deliver(struct inbox_route *r, const struct store_reply *entry);

/* Send what d's answer decided (d->settle) to Redis; sent again after a failure. */
void inbox_settle(struct inbox_delivery *d);

/* Take d out of its route's list and free it and everything it owns. */
void inbox_delivery_free(struct inbox_delivery *d);

#endif
