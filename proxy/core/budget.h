/*
 * budget.h - the process's budget of buffered bytes (`limits.max_buffered`,
 * docs/operations.md#memory): the request bodies, upstream answers and records that
 * the proxy holds for the requests it has taken on, counted across the
 * worker threads. A new request is admitted only while its body and a
 * reservation for its answer fit (budget_admit); what it holds afterwards is
 * counted as it comes (never refused: a forwarded request is never cut off).
 *
 * A hold is one holder's share (a request's body, its answer, its record):
 * it knows how many bytes it counts now, so a holder says what it holds and
 * the hold adds or gives back the difference. A hold belongs to one thread;
 * the budget it counts in is shared (atomics).
 */
#ifndef IDEM_BUDGET_H
#define IDEM_BUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct budget {
    _Atomic size_t used;    /* bytes counted now, every hold of every thread */
    _Atomic size_t limit;   /* bytes: limits.max_buffered; admission stops at it */
};

struct budget_hold {
    struct budget *budget;  /* NULL: nothing is counted */
    size_t bytes;           /* counted in budget for this hold */
};

/* An empty budget admitting up to limit bytes. */
void budget_init(struct budget *b, size_t limit);

/* Admit up to limit bytes from now on (a reload); any thread. What is held stays held. */
void budget_set_limit(struct budget *b, size_t limit);

/* Bytes counted now, and the limit; any thread (for /metrics). */
size_t budget_used(const struct budget *b);
size_t budget_limit(const struct budget *b);

/*
 * Count bytes more if used + bytes stays within the limit, atomically
 * against every other thread: true, and the caller hands those bytes to its
 * holds with budget_hold_take; false, and nothing was counted.
 */
bool budget_admit(struct budget *b, size_t bytes) __attribute__((warn_unused_result));

/*
 * budget_admit, but only while the count, bytes included, stays within
 * 1/share of the limit (share >= 1): a class of requests that may take no
 * more than that part, leaving the rest to the others (streamed exchanges
 * take at most half, docs/operations.md#memory).
 */
bool budget_admit_share(struct budget *b, size_t bytes, unsigned share)
    __attribute__((warn_unused_result));

/* An empty hold counting in b (NULL: a hold that counts nothing). */
void budget_hold_init(struct budget_hold *h, struct budget *b);

/* h takes over bytes that budget_admit counted for it. */
void budget_hold_take(struct budget_hold *h, size_t bytes);

/* h counts exactly bytes from now on: adds what it holds more, gives back what it holds less. */
void budget_hold_set(struct budget_hold *h, size_t bytes);

/* h counts at least bytes: grows to it when it counts less, else keeps its reservation. */
void budget_hold_cover(struct budget_hold *h, size_t bytes);

/*
 * Hand bytes (at most what from counts) from one hold to another of the same
 * budget, the count unchanged: a holder that takes over another's memory takes
 * over its count first, then sets its own, so the sum moves in one change.
 */
void budget_hold_give(struct budget_hold *to, struct budget_hold *from, size_t bytes);

/* budget_hold_give of everything from counts (to may be empty: it takes from's budget). */
void budget_hold_move(struct budget_hold *to, struct budget_hold *from);

#endif
