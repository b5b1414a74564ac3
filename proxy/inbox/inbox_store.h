/*
 * inbox_store.h - the webhook inbox's Redis commands
 * (docs/webhooks.md#webhook-inbox): a route's Redis Stream, its consumer
 * group, the retry schedule, the dead-letter stream, the pause and the
 * rate limiter, each a command (store_command) or one of the inbox's Lua
 * scripts (store_script_run), which the inbox registers with the store
 * itself (inbox_store.c). Each call names keys of one route only, all with
 * the route's hash tag `{...}`, so that one call stays in one cluster
 * slot. Every call reports through its callback exactly once, never from
 * inside the call (store_redis.h), with the reply as plain values.
 */
#ifndef IDEM_INBOX_STORE_H
#define IDEM_INBOX_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store_redis.h"

/* The keys of one route's inbox, all in one slot. */
struct inbox_store_keys {
    const char *stream;     /* the Redis Stream of accepted deliveries */
    const char *retries;    /* sorted set: entry id by due time, ms */
    const char *payloads;   /* hash: entry id -> the fields of a scheduled retry */
    const char *dead;       /* the dead-letter stream */
    const char *group;      /* the consumer group's name */
    const char *rate;       /* string: the route's limiter, its theoretical arrival time (us) */
    const char *paused;     /* string, no TTL: exists while the route is paused */
};

/*
 * What a gated read or takeover may take: delivery.rate as an emission
 * interval (GCRA, 0: no rate) and a burst tolerance, both microseconds.
 */
struct inbox_store_rate {
    uint64_t interval_us;
    uint64_t tolerance_us;
};

/*
 * XADD stream * fields... (nfields name/value pairs in fv, lengths in fvlen):
 * the new entry's id (STORE_STR). Never MAXLEN: Redis 7.0 trims entries that
 * are still pending; entries are deleted once acknowledged instead.
 */
void inbox_store_append(struct store *s, const struct inbox_store_keys *k, size_t nfields,
                        const char *const *fv, const size_t *fvlen, store_reply_cb *cb,
                        void *arg);

/* XGROUP CREATE stream group 0 MKSTREAM, an existing group counting as success (Lua). */
void inbox_store_ensure_group(struct store *s, const struct inbox_store_keys *k,
                              store_reply_cb *cb, void *arg);

/*
 * The gate and the read, in one script (docs/webhooks.md#webhook-inbox: pause,
 * rate): nothing while the route's paused key exists; else as many
 * entries as the route's limiter allows now (GCRA on Redis's clock, shared
 * by every instance: conforming while the theoretical arrival time is at
 * most now + tolerance), at most count, read with XREADGROUP GROUP group
 * consumer COUNT n STREAMS stream > (no BLOCK); only the entries read are
 * charged. Reply [paused 0|1, wait_ms until the limiter allows one more,
 * NIL or XREADGROUP's reply].
 */
void inbox_store_read(struct store *s, const struct inbox_store_keys *k, const char *consumer,
                      unsigned count, const struct inbox_store_rate *rate, store_reply_cb *cb,
                      void *arg);

/*
 * As inbox_store_read, with XAUTOCLAIM stream group consumer min_idle_ms
 * start COUNT n instead: entries left pending longer than min_idle_ms (a
 * crashed instance's) become consumer's; its reply's first element is
 * where the next call starts ("0-0" once the whole pending list was
 * scanned). Reply [paused, wait_ms, NIL or XAUTOCLAIM's reply].
 */
void inbox_store_autoclaim(struct store *s, const struct inbox_store_keys *k,
                           const char *consumer, uint64_t min_idle_ms, const char *start,
                           unsigned count, const struct inbox_store_rate *rate,
                           store_reply_cb *cb, void *arg);

/*
 * The receiver answered 429/503 with Retry-After: the whole route waits
 * hold_ms (Redis's clock), every instance, by moving the limiter's
 * theoretical arrival time that far ahead (never back; rate: the route's
 * tolerance, so that the first delivery after it conforms). STORE_INT 1.
 */
void inbox_store_hold(struct store *s, const struct inbox_store_keys *k, uint64_t hold_ms,
                      const struct inbox_store_rate *rate, store_reply_cb *cb, void *arg);

/* POST /inbox/<route>/pause (paused true: SET paused 1, no TTL) and /resume (DEL). */
void inbox_store_set_paused(struct store *s, const struct inbox_store_keys *k, bool paused,
                            store_reply_cb *cb, void *arg);

/*
 * Bulk redelivery (Lua): scan at most batch dead letters from after `after`
 * ("-" at first, else an id: exclusive), and move back into the stream
 * (attempts 0, received now_ms) each whose reason contains reason (plain
 * substring; "" matches all) and that died before before_ms (0: any); a
 * letter kept packed (too many fields) stays. Reply [moved, last id
 * scanned or "" at the end of the stream].
 */
void inbox_store_redeliver_bulk(struct store *s, const struct inbox_store_keys *k,
                                const char *after, unsigned batch, const char *reason,
                                uint64_t before_ms, uint64_t now_ms, store_reply_cb *cb,
                                void *arg);

/*
 * XCLAIM stream group consumer 0 ids... IDLE idle_ms JUSTID: with idle_ms 0
 * it renews the entries consumer is still delivering, so no other instance
 * takes them; with visibility_timeout it releases them (SIGTERM), so
 * another instance takes them at once.
 */
void inbox_store_renew(struct store *s, const struct inbox_store_keys *k, const char *consumer,
                       const char *const *ids, size_t n, uint64_t idle_ms, store_reply_cb *cb,
                       void *arg);

/* Acknowledged by the receiver: XACK and XDEL id (Lua): STORE_INT 1 when it was pending. */
void inbox_store_ack(struct store *s, const struct inbox_store_keys *k, const char *id,
                     store_reply_cb *cb, void *arg);

/*
 * A failed attempt with attempts left (Lua): the entry's fields, with
 * `attempts` set to attempts, are kept in payloads and scheduled in retries
 * delay_ms after now by Redis's clock (TIME: the one clock of a schedule
 * that every instance shares); then XACK and XDEL. STORE_INT 0 when the
 * entry was gone (acknowledged by someone else).
 */
void inbox_store_retry(struct store *s, const struct inbox_store_keys *k, const char *id,
                       unsigned attempts, uint64_t delay_ms, store_reply_cb *cb, void *arg);

/*
 * No attempts or age left (Lua): the entry's fields plus attempts, reason
 * and died (unix ms) go to the dead-letter stream; then XACK and XDEL. An
 * entry with more fields than a script may unpack (only an older version
 * queued one) keeps its named fields, and the whole list as one msgpack
 * value `fields`.
 */
void inbox_store_bury(struct store *s, const struct inbox_store_keys *k, const char *id,
                      unsigned attempts, const char *reason, uint64_t now_ms,
                      store_reply_cb *cb, void *arg);

/*
 * Retries due by Redis's clock, at most count of them, back into the stream
 * (Lua): STORE_INT moved. One too large to unpack goes to the dead-letter
 * stream instead (as inbox_store_bury keeps it), so it stalls nothing
 * behind it. Then deletes the dead letters that died more than
 * dead_retention_ms (ms, Redis's clock) ago (delivery.dead_retention).
 */
void inbox_store_promote(struct store *s, const struct inbox_store_keys *k, unsigned count,
                         uint64_t dead_retention_ms, store_reply_cb *cb, void *arg);

/*
 * The route's numbers (Lua), STORE_ARR of STORE_INT: depth (XLEN), pending
 * (read, not acknowledged), scheduled retries, the oldest entry's `received`
 * (unix ms, 0 when empty), dead letters.
 */
void inbox_store_stats(struct store *s, const struct inbox_store_keys *k, store_reply_cb *cb,
                       void *arg);

/* XRANGE dead - + COUNT count: the dead letters, oldest first. */
void inbox_store_dead_list(struct store *s, const struct inbox_store_keys *k, unsigned count,
                           store_reply_cb *cb, void *arg);

/*
 * Redeliver dead letter id (Lua): its delivery fields go back into the
 * stream with attempts 0 and a fresh `received`, then it is deleted from
 * the dead stream. STORE_INT 0 when there is no such dead letter, -1 when
 * it holds more fields than a delivery may (kept packed: see
 * inbox_store_bury), which stays where it is.
 */
void inbox_store_redeliver(struct store *s, const struct inbox_store_keys *k, const char *id,
                           uint64_t now_ms, store_reply_cb *cb, void *arg);

/*
 * Whether the Redis user may run every command the inbox needs (Lua, each
 * probed with arguments that change nothing; GET, SET, DEL and WAIT are
 * the core user's): STORE_STR "" when it may, else the name of the first
 * command refused ("XAUTOCLAIM", "XGROUP CREATE", ...).
 */
void inbox_store_probe(struct store *s, const struct inbox_store_keys *k, store_reply_cb *cb,
                       void *arg);

/* XDEL dead id: STORE_INT 1 when it was there. */
void inbox_store_dead_delete(struct store *s, const struct inbox_store_keys *k, const char *id,
                             store_reply_cb *cb, void *arg);

/* ---- the inbox's Lua scripts (tests/unit/test_store_script.c reads them) ---- */

enum inbox_script {
    INBOX_SCRIPT_GROUP, INBOX_SCRIPT_ACK, INBOX_SCRIPT_RETRY, INBOX_SCRIPT_BURY,
    INBOX_SCRIPT_PROMOTE, INBOX_SCRIPT_STATS, INBOX_SCRIPT_REDELIVER, INBOX_SCRIPT_GATE,
    INBOX_SCRIPT_HOLD, INBOX_SCRIPT_REDELIVER_BULK, INBOX_SCRIPT_PROBE, INBOX_SCRIPT_COUNT
};

/*
 * The script id, registered with the store (store_script_register) on the
 * first call of any thread: its text is a plain constant of inbox_store.c.
 * Static storage; never NULL for an id below INBOX_SCRIPT_COUNT.
 */
const struct store_script *inbox_store_script(enum inbox_script id);

#endif
