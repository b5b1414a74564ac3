/*
 * exchange_state.h - the exchange's states, the table of legal transitions
 * between them, and the reference rule that decides when an exchange may be
 * freed. Pure: no event loop, no store; exchange.c applies them and
 * tests/unit/test_exchange.c breaks them on purpose.
 *
 *   NEW --classify--> PASSING ----------------------------------> ANSWERED
 *    |                  ^ on_store_error: pass
 *    +--claim--> CLAIMING --won--> FORWARDING --> WRITING ------> ANSWERED
 *                  |  ^   |             (lease renewed meanwhile)   |
 *                  |  |   |                                         +--write failed for want
 *                  |  |   |                                            of Redis: answer sent -->
 *                  |  |   |      ANSWERED_WRITING --write lands / deadline--> ANSWERED
 *                  |  |   |       (the record write is sent again, the lease renewed)
 *                  |  |   +--min_replicas--> REPLICATING --confirmed--> FORWARDING
 *                  |  |                        +--shortfall--> 503, claim released --> ANSWERED
 *                  |  |                           (on_store_error: pass: FORWARDING)
 *                  |  +-- takeover (expired lease, on_ambiguous: release)
 *                  +--existing--> replay | mismatch | outcome unknown | ... --> ANSWERED
 *                  +--in flight--> WAITING --poll/wake--> CLAIMING again
 *
 * References: an exchange holds one reference per callback that can still
 * reach it (a store command, the upstream call, the append, the write's
 * retries). Take one where the callback is armed (exchange_ref_take), drop
 * one where it runs (exchange_ref_drop). It is freed once it is ANSWERED and
 * holds none. Dropping one it does not hold is a bug.
 *
 * Bugs (an illegal transition, a reference dropped twice): in debug builds
 * and tests (NDEBUG not defined; meson b_ndebug=if-release) the process
 * aborts, naming the two states or the reference; in release builds the
 * check returns false and the caller answers 500 (a client never hangs on a
 * bug) and frees the exchange once no callback can reach it.
 */
#ifndef IDEM_EXCHANGE_STATE_H
#define IDEM_EXCHANGE_STATE_H

#include <stdbool.h>

enum exchange_state {
    X_NEW,
    X_PASSING,          /* forwarded unprotected */
    X_CLAIMING,         /* SET NX / takeover / re-read in flight */
    X_WAITING,          /* another request holds the claim */
    X_REPLICATING,      /* we own the claim; WAIT for redis.min_replicas replicas in flight */
    X_FORWARDING,       /* we own the claim; upstream call in flight */
    X_WRITING,          /* upstream done; writing the record (see enum exchange_write) */
    X_ANSWERED_WRITING, /* the client has its answer; the record write is sent again and the
                           lease renewed until it lands or its deadline passes */
    X_ANSWERED,
    X_STATES
};

/* The state's name for logs ("answered-writing"); static storage. */
const char *exchange_state_name(enum exchange_state s);

/* True when the client has its answer (ANSWERED or ANSWERED_WRITING). */
bool exchange_state_answered(enum exchange_state s);

/*
 * True when from -> to is in the table of legal transitions. Otherwise a
 * bug: logged with both names and the exchange's record id (may be NULL),
 * then abort() unless NDEBUG is defined, else false.
 */
bool exchange_transition_check(const char *record_id, enum exchange_state from,
                               enum exchange_state to);

/* Take one reference (*refs, a count) for a callback about to be armed. */
void exchange_ref_take(unsigned *refs);

/*
 * Drop one reference where its callback runs; true when none remain. Dropping
 * one not held (*refs is 0) is a bug: logged, then abort() unless NDEBUG is
 * defined, else *refs stays 0 and the answer is false (nothing is freed twice).
 */
bool exchange_ref_drop(unsigned *refs, const char *record_id);

#endif
