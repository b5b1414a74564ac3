/*
 * inbox.h - the durable webhook inbox (docs/webhooks.md#webhook-inbox): a webhook
 * route with `delivery: {mode: queued}` answers the provider once the
 * delivery is appended to a per-route Redis Stream, and delivers it to the
 * upstream from there, at least once, with retries, a dead-letter stream
 * and takeover of a crashed instance's entries.
 *
 *   inbox.c          the route's keys, and accepting a delivery (append)
 *   inbox_deliver.c  the consumer of each worker: read, deliver, ack,
 *                    retry with backoff, dead-letter, take over, renew
 *   inbox_admin.c    GET /inbox, the dead letters, redeliver and delete
 *   inbox_store.c    the inbox's Redis commands and Lua scripts
 *                    (inbox_store.h), through store.h's commands
 *
 * Every Redis command goes through inbox_store.h; each names the keys of
 * one route only, which share the route's hash tag (one cluster slot).
 */
#ifndef IDEM_INBOX_H
#define IDEM_INBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "route.h"
#include "inbox_store.h"

struct event_base;
struct http_req;
struct evkeyvalq;
struct config;
struct metrics;
struct route;
struct upstream;
struct inbox;

/* The consumer group every instance and worker joins, one consumer each. */
#define INBOX_GROUP "idem-inbox"

/* Longest key of a route's inbox: key_prefix (CONFIG_MAX_KEY_PREFIX) and a fixed tail. */
#define INBOX_KEY_MAX 200

/* One route's inbox keys, `<key_prefix>:inbox:{<hash of the route path>}:<part>`. */
struct inbox_keys {
    char stream[INBOX_KEY_MAX];
    char retries[INBOX_KEY_MAX];
    char payloads[INBOX_KEY_MAX];
    char dead[INBOX_KEY_MAX];
    char rate[INBOX_KEY_MAX];
    char paused[INBOX_KEY_MAX];
    struct inbox_store_keys k;      /* points into the arrays above */
};

/*
 * Fill keys for route under key_prefix. The hash tag is 16 hex digits of
 * XXH3-64 of the route's path as written (a prefix route's hash seeded once
 * more with its '*', so an exact and a prefix route of one path differ), so
 * a path with braces cannot break it. keys must not move afterwards (k
 * points into it).
 */
void inbox_keys_init(struct inbox_keys *keys, const char *key_prefix, const struct route *route);

/*
 * The route's path as written in the config, a prefix route's with its
 * trailing '*' (docs/webhooks.md#webhook-inbox: the <route> of the admin endpoints,
 * percent-encoded). Malloc'd, the caller frees; NULL when out of memory.
 */
char *inbox_route_name(const struct route *route);

/* Whether name (decoded, NUL-terminated) is inbox_route_name(route). Borrows both. */
bool inbox_route_named(const struct route *route, const char *name);

/*
 * Append callback: ok means the delivery is in the stream (and, with
 * redis.min_replicas, that many replicas confirmed it); false means the
 * provider must retry (nothing is left in the stream that a retry would
 * duplicate, unless an XDEL after a WAIT shortfall failed too).
 */
typedef void inbox_append_cb(bool ok, void *arg);

/*
 * Accept one verified, claimed delivery of a queued route: XADD to its
 * stream the event id, the record id (what the logs name it by: never the
 * event id, which is the idempotency key), method, target (origin-form), the client address
 * (may be NULL), the time received (unix ms), attempts 0, the request
 * fields the upstream would get (header_is_forwarded: the signature
 * headers too) and the raw body (len bytes, binary-safe). All arguments are
 * copied before the call returns. cb runs once, from the event loop.
 */
void inbox_append(struct store *s, const struct config *cfg, const struct route *route,
                  const char *event_id, const char *record_id, const char *method, const char *target,
                  const char *client_addr, const struct evkeyvalq *headers, const char *body,
                  size_t len, inbox_append_cb *cb, void *arg);

/* Whether cfg has a queued route, so that each worker needs a consumer. */
bool inbox_wanted(const struct config *cfg);

/*
 * The consumer of one worker: one consumer `<host>-<pid>-<worker>` in every
 * queued route's group, delivering through up. cfg (the configuration the
 * worker started with; one reference is taken) fixes the routes. Starts on
 * the loop's next turn. NULL when no route is queued or out of memory.
 * report_gauges: this worker polls the routes' depth and oldest age into
 * metrics (one worker does).
 */
struct inbox *inbox_create(struct event_base *base, struct store *s, struct upstream *up,
                           struct config *cfg, struct metrics *metrics, unsigned worker,
                           bool report_gauges);

/*
 * What a reload (cfg; ib takes a reference) changes for the consumer, which
 * keeps the routes and delivery settings of its boot config: the keyring
 * entries are opened with (NULL: none) and encryption.accept_plaintext_until,
 * so a rotation and the migration window reach it; and the delivery.sign
 * secrets each attempt is signed with, those of cfg's queued route of the
 * same path as written (a rotated delivery.sign.secret or secret_file signs
 * the next attempts; a route cfg lacks keeps its boot secrets). Its thread
 * only. NULL ib is fine.
 */
void inbox_set_config(struct inbox *ib, struct config *cfg);

/* A delivery was just appended: read now rather than at the next poll. NULL is fine. */
void inbox_kick(struct inbox *ib);

/*
 * SIGTERM: read no more entries. Deliveries in flight may finish for 5 s
 * (inbox_busy counts them); then they are released, their idle time set to
 * visibility_timeout, so another instance takes them over at once.
 */
void inbox_stop(struct inbox *ib);

/*
 * Why the inbox cannot deliver, for /readyz: NULL, or a static reason when
 * the Redis user may not run a command it needs (probed after every
 * connect and after a failed read; the log names the command). Any thread
 * may ask; NULL counts as ready.
 */
const char *inbox_unready(const struct inbox *ib);

/* Redis commands pending, and deliveries in flight until released; any thread may ask. NULL counts 0. */
unsigned inbox_busy(const struct inbox *ib);

/*
 * Free, with the loop stopped and after the store and the upstream client
 * are destroyed (their callbacks may still reach the deliveries). Entries
 * still pending stay in the group: another instance takes them over after
 * visibility_timeout. NULL is fine.
 */
void inbox_destroy(struct inbox *ib);

/*
 * The admin endpoints under /inbox (docs/webhooks.md#webhook-inbox); rest is the
 * path after "/inbox" ("" or "/<route>/dead..."). Answers req itself,
 * through s, for the routes of cfg (which must outlive the answer).
 */
void inbox_admin(struct http_req *req, struct store *s, const struct config *cfg,
                 const char *rest);

#endif
