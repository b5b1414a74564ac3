/*
 * budget.c - the budget of buffered bytes; see budget.h. Relaxed atomics:
 * the count orders nothing else, it only has to add up; the admission is one
 * compare-and-swap, so two threads cannot both take the last room.
 */
#include "budget.h"

void budget_init(struct budget *b, size_t limit)
{
    atomic_init(&b->used, 0);
    atomic_init(&b->limit, limit);
}

void budget_set_limit(struct budget *b, size_t limit)
{
    atomic_store_explicit(&b->limit, limit, memory_order_relaxed);
}

size_t budget_used(const struct budget *b)
{
    return atomic_load_explicit(&b->used, memory_order_relaxed);
}

size_t budget_limit(const struct budget *b)
{
    return atomic_load_explicit(&b->limit, memory_order_relaxed);
}

bool budget_admit(struct budget *b, size_t bytes)
{
    return budget_admit_share(b, bytes, 1);
}

bool budget_admit_share(struct budget *b, size_t bytes, unsigned share)
{
    size_t limit = atomic_load_explicit(&b->limit, memory_order_relaxed) / (share > 0 ? share : 1);
    size_t used = atomic_load_explicit(&b->used, memory_order_relaxed);

    do {
        if (bytes > limit || used > limit - bytes)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&b->used, &used, used + bytes,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

void budget_hold_init(struct budget_hold *h, struct budget *b)
{
    h->budget = b;
    h->bytes = 0;
}

void budget_hold_take(struct budget_hold *h, size_t bytes)
{
    h->bytes += bytes;
}

void budget_hold_set(struct budget_hold *h, size_t bytes)
{
    if (h->budget != NULL && bytes > h->bytes)
        atomic_fetch_add_explicit(&h->budget->used, bytes - h->bytes, memory_order_relaxed);
    else if (h->budget != NULL && bytes < h->bytes)
        atomic_fetch_sub_explicit(&h->budget->used, h->bytes - bytes, memory_order_relaxed);
    h->bytes = bytes;
}

void budget_hold_cover(struct budget_hold *h, size_t bytes)
{
    if (bytes > h->bytes)
        budget_hold_set(h, bytes);
}

void budget_hold_give(struct budget_hold *to, struct budget_hold *from, size_t bytes)
{
    if (bytes > from->bytes)
        bytes = from->bytes;
    to->budget = from->budget;
    to->bytes += bytes;
    from->bytes -= bytes;
}

void budget_hold_move(struct budget_hold *to, struct budget_hold *from)
{
    budget_hold_give(to, from, from->bytes);
}
