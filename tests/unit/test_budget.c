/*
 * The budget of buffered bytes (limits.max_buffered, README "Memory"):
 * admission against the limit, holds that count what their holder keeps,
 * and threads that admit at once never taking more than the limit together;
 * the meter that counts a body's parsed form under the budget (meter.h).
 */
#include <pthread.h>
#include <stdint.h>

#include "budget.h"
#include "meter.h"
#include "unit.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

/* One admission after the budget holds `used` of `limit`. */
static const struct {
    const char *name;
    size_t limit, used, ask;
    bool admitted;
} admit_cases[] = {
    { "an empty budget admits up to its limit", 64 * MIB, 0, 64 * MIB, true },
    { "an empty budget refuses more than its limit", 64 * MIB, 0, 64 * MIB + 1, false },
    { "room left is admitted", 64 * MIB, 62 * MIB, 2 * MIB, true },
    { "one byte past the room is refused", 64 * MIB, 62 * MIB, 2 * MIB + 1, false },
    { "a budget over its limit refuses even nothing more", 64 * MIB, 65 * MIB, 0, false },
    { "a request larger than the address space is refused", 64 * MIB, KIB, SIZE_MAX, false },
};

static void run_admit_cases(void)
{
    for (size_t i = 0; i < sizeof(admit_cases) / sizeof(admit_cases[0]); i++) {
        struct budget b;
        struct budget_hold filler;
        bool admitted;

        budget_init(&b, admit_cases[i].limit);
        budget_hold_init(&filler, &b);
        budget_hold_set(&filler, admit_cases[i].used); /* arrived bytes are never refused */
        admitted = budget_admit(&b, admit_cases[i].ask);
        UNIT_CHECK(admit_cases[i].name,
                   admitted == admit_cases[i].admitted &&
                       budget_used(&b) == admit_cases[i].used +
                                              (admitted ? admit_cases[i].ask : 0),
                   "admitted %d, used %zu", admitted, budget_used(&b));
    }
}

static void run_hold_cases(void)
{
    struct budget b;
    struct budget_hold body, answer, reply, uncounted;

    budget_init(&b, 4 * MIB);
    budget_hold_init(&body, &b);
    budget_hold_init(&answer, &b);
    budget_hold_init(&reply, &b);
    UNIT_CHECK("admission counts body and reservation", budget_admit(&b, 3 * MIB),
               "used %zu", budget_used(&b));
    budget_hold_take(&body, MIB);
    budget_hold_take(&answer, 2 * MIB);
    UNIT_CHECK("taking admitted bytes counts nothing twice", budget_used(&b) == 3 * MIB,
               "used %zu", budget_used(&b));
    budget_hold_cover(&answer, MIB);
    UNIT_CHECK("an answer within its reservation adds nothing", budget_used(&b) == 3 * MIB,
               "used %zu", budget_used(&b));
    budget_hold_cover(&answer, 5 * MIB);
    UNIT_CHECK("an answer past its reservation is counted past the limit",
               budget_used(&b) == 6 * MIB && !budget_admit(&b, 0), "used %zu", budget_used(&b));
    budget_hold_set(&body, 0);
    budget_hold_set(&answer, 300 * KIB);
    UNIT_CHECK("dropping the body and the unused reservation gives them back",
               budget_used(&b) == 300 * KIB, "used %zu", budget_used(&b));
    budget_hold_move(&reply, &answer);
    UNIT_CHECK("a moved hold keeps counting under its new holder",
               budget_used(&b) == 300 * KIB && answer.bytes == 0 && reply.bytes == 300 * KIB,
               "used %zu", budget_used(&b));
    budget_hold_set(&answer, 2 * MIB);
    budget_hold_give(&reply, &answer, MIB);
    UNIT_CHECK("a hold handed part of another's count moves nothing in the budget",
               budget_used(&b) == 2 * MIB + 300 * KIB && answer.bytes == MIB &&
                   reply.bytes == MIB + 300 * KIB, "used %zu", budget_used(&b));
    budget_hold_give(&reply, &answer, 4 * MIB);
    UNIT_CHECK("handing more than a hold counts hands what it counts",
               answer.bytes == 0 && reply.bytes == 2 * MIB + 300 * KIB, "reply %zu", reply.bytes);
    budget_hold_set(&answer, 0);
    budget_hold_set(&reply, 0);
    UNIT_CHECK("released holds leave the budget empty", budget_used(&b) == 0, "used %zu",
               budget_used(&b));
    budget_set_limit(&b, MIB);
    UNIT_CHECK("a new limit applies to the next admission",
               budget_limit(&b) == MIB && !budget_admit(&b, MIB + 1) && budget_admit(&b, MIB),
               "used %zu", budget_used(&b));
    budget_hold_init(&uncounted, NULL);
    budget_hold_set(&uncounted, 8 * MIB);
    budget_hold_set(&uncounted, 0);
    UNIT_CHECK("a hold without a budget counts nothing", budget_used(&b) == MIB, "used %zu",
               budget_used(&b));
}

/* Threads that admit and release at once: together never past the limit. */
#define RACE_THREADS 4
#define RACE_ROUNDS 20000
#define RACE_LIMIT 10u
#define RACE_ASK 3u

struct race {
    struct budget budget;
    _Atomic unsigned held;          /* admitted bytes not yet released, by the threads' count */
    _Atomic unsigned worst;         /* the most the threads held at once */
};

static void *race_thread(void *arg)
{
    struct race *r = arg;

    for (int i = 0; i < RACE_ROUNDS; i++) {
        struct budget_hold h;
        unsigned now;

        budget_hold_init(&h, &r->budget);
        if (!budget_admit(&r->budget, RACE_ASK))
            continue;
        budget_hold_take(&h, RACE_ASK);
        now = r->held += RACE_ASK;
        for (unsigned w = r->worst; now > w && !atomic_compare_exchange_weak(&r->worst, &w, now);)
            ;
        r->held -= RACE_ASK;
        budget_hold_set(&h, 0);
    }
    return NULL;
}

static void run_race(void)
{
    struct race r = { .held = 0, .worst = 0 };
    pthread_t t[RACE_THREADS];

    budget_init(&r.budget, RACE_LIMIT);
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_create(&t[i], NULL, race_thread, &r);
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(t[i], NULL);
    UNIT_CHECK("threads admitting at once stay within the limit together",
               r.worst <= RACE_LIMIT && budget_used(&r.budget) == 0, "worst %u, used %zu",
               (unsigned)r.worst, budget_used(&r.budget));
}

/*
 * A meter (meter.h): what it allocates is counted in the budget while it is
 * active, in chunks; its cap refuses one request's excess, a full budget
 * refuses any; meter_end gives every byte back.
 */
static void run_meter_cases(void)
{
    struct budget b;
    struct budget_hold others;
    struct mem_meter m;
    void *small, *big;

    budget_init(&b, 8 * MIB);
    meter_begin(&m, &b, 2 * MIB);
    small = meter_malloc(100);
    UNIT_CHECK("a metered allocation takes a chunk from the budget",
               small != NULL && budget_used(&b) == METER_CHUNK, "used %zu", budget_used(&b));
    big = meter_malloc(3 * MIB);
    UNIT_CHECK("an allocation past the meter's cap is refused", big == NULL &&
               m.refused == METER_OVER_CAP, "refused %d", (int)m.refused);
    UNIT_CHECK("after a refusal the meter refuses everything", meter_malloc(1) == NULL &&
               !meter_reserve(1), "refused %d", (int)m.refused);
    meter_free(small);
    UNIT_CHECK("meter_end gives back what the meter took", meter_end(&m) == METER_OVER_CAP &&
               budget_used(&b) == 0, "used %zu", budget_used(&b));

    budget_hold_init(&others, &b);
    budget_hold_set(&others, 8 * MIB - KIB); /* other requests hold the budget */
    meter_begin(&m, &b, 2 * MIB);
    UNIT_CHECK("a full budget refuses a metered allocation", meter_malloc(100) == NULL &&
               m.refused == METER_OVER_BUDGET, "refused %d", (int)m.refused);
    UNIT_CHECK("and the meter counted nothing", meter_end(&m) == METER_OVER_BUDGET &&
               budget_used(&b) == 8 * MIB - KIB, "used %zu", budget_used(&b));
    budget_hold_set(&others, 0);

    meter_begin(&m, &b, 2 * MIB);
    UNIT_CHECK("reservations within the cap fit", meter_reserve(MIB) && meter_reserve(MIB - KIB),
               "refused %d", (int)m.refused);
    UNIT_CHECK("one past the cap does not", !meter_reserve(2 * KIB), "refused %d",
               (int)m.refused);
    meter_end(&m);
    small = meter_malloc(10 * MIB);
    UNIT_CHECK("without an active meter, meter_malloc is malloc, counted nowhere",
               small != NULL && budget_used(&b) == 0, "used %zu", budget_used(&b));
    meter_free(small);
}

int main(void)
{
    run_admit_cases();
    run_hold_cases();
    run_race();
    run_meter_cases();
    UNIT_DONE();
}
