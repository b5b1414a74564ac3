/*
 * meter.c - a request's parsing memory counted under limits.max_buffered; see meter.h.
 */
#include "meter.h"

#include <malloc.h>
#include <stdlib.h>

#include <jansson.h>

static _Thread_local struct mem_meter *meter_current;

void meter_install(void)
{
    json_set_alloc_funcs(meter_malloc, meter_free);
}

void meter_begin(struct mem_meter *m, struct budget *budget, size_t cap)
{
    *m = (struct mem_meter){ .cap = cap };
    budget_hold_init(&m->hold, budget);
    meter_current = m;
}

enum meter_refusal meter_end(struct mem_meter *m)
{
    if (meter_current == m)
        meter_current = NULL;
    budget_hold_set(&m->hold, 0);
    m->reserved = 0;
    return m->refused;
}

/* m counts bytes more in use: take chunks from its budget as needed. False when refused. */
static bool meter_grow(struct mem_meter *m, size_t bytes)
{
    size_t need, chunk;

    if (m->refused != METER_FITS)
        return false;
    if (bytes > m->cap) {
        m->refused = METER_OVER_CAP;
        return false;
    }
    if (bytes <= m->reserved - m->used)
        goto fits;
    need = m->used + bytes - m->reserved;
    chunk = need > METER_CHUNK ? need : METER_CHUNK;
    if (m->reserved + chunk > m->cap)
        chunk = m->cap > m->reserved ? m->cap - m->reserved : 0;
    if (chunk < need) {
        m->refused = METER_OVER_CAP;
        return false;
    }
    if (m->hold.budget != NULL) {
        if (!budget_admit(m->hold.budget, chunk)) {
            m->refused = METER_OVER_BUDGET;
            return false;
        }
        budget_hold_take(&m->hold, chunk);
    }
    m->reserved += chunk;
fits:
    m->used += bytes;
    return true;
}

bool meter_reserve(size_t bytes)
{
    return meter_current == NULL || meter_grow(meter_current, bytes);
}

bool meter_fits(void)
{
    return meter_current == NULL || meter_current->refused == METER_FITS;
}

void *meter_malloc(size_t n)
{
    struct mem_meter *m = meter_current;
    void *p;

    if (m == NULL)
        return malloc(n);
    /* counted as asked first (a refusal allocates nothing), then as malloc gave it */
    if (!meter_grow(m, n))
        return NULL;
    p = malloc(n);
    m->used -= n;
    if (p == NULL || !meter_grow(m, malloc_usable_size(p))) {
        free(p);
        return NULL;
    }
    return p;
}

void meter_free(void *p)
{
    struct mem_meter *m = meter_current;
    size_t n;

    if (m != NULL && p != NULL) {
        /* a block from before meter_begin may be freed now: never count below zero */
        n = malloc_usable_size(p);
        m->used = n < m->used ? m->used - n : 0;
    }
    free(p);
}
