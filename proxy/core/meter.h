/*
 * meter.h - the memory a worker takes while it reads a request body into a
 * structure (the json fingerprint's jansson tree, the form fingerprint's
 * pairs, the tree a key_from: json route reads its key from;
 * docs/operations.md#memory), counted under limits.max_buffered like
 * the bodies and answers it holds, and bounded per request.
 *
 * A meter belongs to one thread and is active between meter_begin and
 * meter_end on that thread: meter_malloc / meter_free (which jansson uses
 * once meter_install has run) count what they allocate and free while it
 * is active, and are malloc / free otherwise. Memory is taken from the
 * budget in chunks (budget_admit, so a full budget refuses) and given back
 * whole at meter_end.
 */
#ifndef IDEM_METER_H
#define IDEM_METER_H

#include <stdbool.h>
#include <stddef.h>

#include "budget.h"

/* Bytes a meter takes from its budget at a time (fewer atomic operations per body). */
#define METER_CHUNK (64u * 1024u)

enum meter_refusal {
    METER_FITS = 0,
    METER_OVER_CAP,     /* this one request needed more than the meter's cap */
    METER_OVER_BUDGET,  /* the budget was full (other requests hold it): try again later */
};

struct mem_meter {
    struct budget_hold hold;    /* what it took from the budget (NULL budget: nothing) */
    size_t cap;                 /* bytes this request may take at most */
    size_t reserved;            /* bytes taken in chunks, counted against cap */
    size_t used;                /* bytes allocated now (malloc_usable_size) */
    enum meter_refusal refused; /* the first refusal; allocations fail from then on */
};

/*
 * Let jansson allocate through meter_malloc / meter_free. Call once, in the
 * main thread before any other thread starts and before jansson is used
 * (json_set_alloc_funcs is process-wide and not thread-safe). Idempotent.
 */
void meter_install(void);

/*
 * Start counting this thread's metered allocations in m (caller-owned,
 * outliving meter_end) against budget (may be NULL) and cap bytes.
 * Meters do not nest.
 */
void meter_begin(struct mem_meter *m, struct budget *budget, size_t cap);

/* Stop counting and give back to the budget every byte m took. Returns m->refused. */
enum meter_refusal meter_end(struct mem_meter *m);

/*
 * Count bytes for memory the caller allocates by other means (libevent's
 * decoding, a buffer it sizes itself) in this thread's active meter: false
 * (and nothing counted) when it does not fit; true without a meter.
 */
bool meter_reserve(size_t bytes) __attribute__((warn_unused_result));

/* False when this thread's active meter has refused an allocation (true without one). */
bool meter_fits(void);

/* malloc / free, counted in this thread's active meter (NULL when it refuses). */
void *meter_malloc(size_t n);
void meter_free(void *p);

#endif
