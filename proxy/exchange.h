/*
 * exchange.h - one client request's life through the proxy: classify, claim,
 * forward once, record, answer; or replay, refuse, wait. One owner, one
 * explicit state; it answers exactly once and is freed only when no Redis,
 * upstream or timer callback can still reach it.
 */
#ifndef IDEM_EXCHANGE_H
#define IDEM_EXCHANGE_H

struct evhttp_request;
struct worker;

#include "fingerprint.h"

/* Longest Redis key of a record ("PREFIX:{RECORD_ID}") plus its NUL, in bytes. */
#define EXCHANGE_RECORD_KEY_MAX RECORD_KEY_MAX

/*
 * The evhttp request callback of the client listener (CONTRACT 4 and 5).
 * Takes over req until it has been answered; arg is the struct worker.
 */
void exchange_handle(struct evhttp_request *req, void *arg);

/*
 * A record changed (completed, released): let this worker's requests waiting
 * on record_key look again now instead of at their next poll. This worker
 * only: the exchange tells the others through worker_wake_others.
 */
void exchange_wake_waiters(struct worker *w, const char *record_key);

/* Free the orphan-claim releases still pending (at exit, after the store is gone). */
void exchange_forget_orphans(struct worker *w);

#endif
