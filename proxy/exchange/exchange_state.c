/*
 * exchange_state.c - the legal-transition table and the reference rule
 * (exchange_state.h has the diagram).
 */
#include "exchange_state.h"

#include <stdlib.h>

#include "log.h"

static const char *const exchange_state_names[X_STATES] = {
    [X_NEW] = "new",
    [X_PASSING] = "passing",
    [X_CLAIMING] = "claiming",
    [X_WAITING] = "waiting",
    [X_REPLICATING] = "replicating",
    [X_FORWARDING] = "forwarding",
    [X_WRITING] = "writing",
    [X_ANSWERED_WRITING] = "answered-writing",
    [X_ANSWERED] = "answered",
};

/* exchange_legal[from] has bit `to` set when from -> to is a legal transition. */
#define X_BIT(s) (1u << (s))
static const unsigned exchange_legal[X_STATES] = {
    [X_NEW] = X_BIT(X_PASSING) | X_BIT(X_CLAIMING) | X_BIT(X_ANSWERED),
    [X_PASSING] = X_BIT(X_ANSWERED),
    [X_CLAIMING] = X_BIT(X_CLAIMING) | X_BIT(X_WAITING) | X_BIT(X_REPLICATING) |
                   X_BIT(X_FORWARDING) | X_BIT(X_PASSING) | X_BIT(X_ANSWERED),
    [X_WAITING] = X_BIT(X_CLAIMING) | X_BIT(X_ANSWERED),
    [X_REPLICATING] = X_BIT(X_FORWARDING) | X_BIT(X_ANSWERED),
    [X_FORWARDING] = X_BIT(X_WRITING),
    [X_WRITING] = X_BIT(X_ANSWERED) | X_BIT(X_ANSWERED_WRITING),
    [X_ANSWERED_WRITING] = X_BIT(X_ANSWERED),
    [X_ANSWERED] = 0,
};

const char *exchange_state_name(enum exchange_state s)
{
    return (unsigned)s < X_STATES ? exchange_state_names[s] : "?";
}

bool exchange_state_answered(enum exchange_state s)
{
    return s == X_ANSWERED || s == X_ANSWERED_WRITING;
}

/* A bug in the exchange's code: stop here in debug builds and tests. */
static void exchange_bug(void)
{
#ifndef NDEBUG
    abort();
#endif
}

bool exchange_transition_check(const char *record_id, enum exchange_state from,
                               enum exchange_state to)
{
    if ((unsigned)from < X_STATES && (unsigned)to < X_STATES &&
        (exchange_legal[from] & X_BIT(to)))
        return true;
    log_msg(LOG_ERROR, "exchange %s: illegal transition %s -> %s",
            record_id != NULL && record_id[0] ? record_id : "-", exchange_state_name(from),
            exchange_state_name(to));
    exchange_bug();
    return false;
}

void exchange_ref_take(unsigned *refs)
{
    (*refs)++;
}

bool exchange_ref_drop(unsigned *refs, const char *record_id)
{
    if (*refs == 0) {
        log_msg(LOG_ERROR, "exchange %s: a reference dropped that was not held",
                record_id != NULL && record_id[0] ? record_id : "-");
        exchange_bug();
        return false;
    }
    return --*refs == 0;
}
