/*
 * oom.h - the one out-of-memory policy of the proxy.
 *
 * Every allocation is checked. Two cases, by what is at stake:
 *
 * - Before anything is claimed or sent upstream, while a request can still
 *   be answered whole (its admission, exchange_create, a config being
 *   loaded), a failed allocation is an answer: 500 (or 503) problem
 *   details, or the config refused with FILE:LINE. Nothing is claimed,
 *   nothing forwarded.
 * - Anywhere else (a buffer an answer or a record needs once the upstream
 *   has run, a store command object, a Redis client's buffers) the process
 *   stops with oom_abort(what): a half-built exchange must not answer as if
 *   it were whole, and a crash is the failure the claims and their leases
 *   already make safe (the claim holds until its lease ends; a retry then
 *   gets what on_ambiguous says). The supervisor restarts the process.
 *
 * Never: an unchecked allocation, or one that silently drops what it could
 * not allocate.
 */
#ifndef IDEM_OOM_H
#define IDEM_OOM_H

#include <stdlib.h>

#include "log.h"

/* Out of memory where no answer can be given: log what (static text) and abort. */
__attribute__((noreturn, cold)) static inline void oom_abort(const char *what)
{
    log_msg(LOG_ERROR, "out of memory: %s", what);
    abort();
}

/* p, or oom_abort(what) when p is NULL (an allocation just made). */
static inline void *oom_check(void *p, const char *what)
{
    if (p == NULL)
        oom_abort(what);
    return p;
}

#endif
