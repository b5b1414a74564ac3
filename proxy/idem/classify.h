/*
 * classify.h - what the proxy does with a request before any I/O: the route,
 * whether the method is protected, the idempotency key, the limits, and a
 * webhook's signature (docs/client-contract.md#how-a-request-is-handled and 8), and the
 * route's rules for keys and scope (docs/client-contract.md#key-rules). Pure: no I/O, no
 * clock (the caller passes the time), unit-tested by a table of requests.
 */
#ifndef IDEM_CLASSIFY_H
#define IDEM_CLASSIFY_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "config.h"
#include "problem.h"

struct evkeyvalq;

/* Bytes of a key buffer that holds any configurable key and its NUL. */
#define CLASSIFY_KEY_MAX (CONFIG_MAX_KEY_LENGTH + 1)

/* Bytes of a refusal's detail that names a configured value (a length, a header, a pointer). */
#define CLASSIFY_DETAIL_MAX 512

enum classify_verdict {
    CLASSIFY_REFUSE,        /* answer the problem; nothing claimed, nothing forwarded */
    CLASSIFY_PASS_THROUGH,  /* no route, or a method the route does not protect */
    CLASSIFY_UNPROTECTED,   /* protected route, no key, require_key false */
    CLASSIFY_PROTECT,       /* a valid key: claim it */
};

struct classify_input {
    const char *method;             /* "POST", ...; static or outliving the call */
    const char *path;               /* the target's path as sent, no query */
    bool invalid_target;            /* control characters, or not a form we forward */
    const struct evkeyvalq *headers;
    const char *body;               /* raw bytes, may be NULL when body_len is 0 */
    size_t body_len;                /* bytes */
    int64_t now_s;                  /* wall clock, unix seconds (signature timestamps) */
};

struct classify_result {
    enum classify_verdict verdict;
    const struct route *route;      /* matched route (owned by cfg), even for a method it
                                       does not protect; NULL when none matched */
    enum problem problem;           /* REFUSE: the cause */
    int status;                     /* REFUSE: the HTTP status */
    const char *detail;             /* REFUSE: a static human string, or detail_text */
    size_t key_len;                 /* PROTECT: bytes of the key in the caller's buffer */
    char detail_text[CLASSIFY_DETAIL_MAX]; /* REFUSE: a detail that names the route's rule
                                       (never the request's data); detail points here then,
                                       so it is valid while this result is */
};

/*
 * Classify in under cfg. key: caller-owned, keysize bytes, at least the
 * route's key_max_length + 1 (CLASSIFY_KEY_MAX covers every configurable
 * length); on PROTECT it holds the key, NUL-terminated. Never fails: an
 * input it cannot classify with certainty is a REFUSE.
 */
void classify_request(const struct config *cfg, const struct classify_input *in, char *key,
                      size_t keysize, struct classify_result *out);

/*
 * Whether classify_request's verdict is known from the head alone (in's
 * body is ignored) and is one that forwards without protection:
 * PASS_THROUGH (no route, or a method the route does not protect) or
 * UNPROTECTED (no key where none is required), which the caller may then
 * stream (docs/operations.md#streaming: no body limit applies). False for
 * anything else (a key to claim, a refusal, a route whose body carries the
 * key or a signature): read the body whole and call classify_request. out
 * as for classify_request when true. Borrows everything; pure.
 */
bool classify_streams(const struct config *cfg, const struct classify_input *in, char *key,
                      size_t keysize, struct classify_result *out);

/*
 * The route path (the target's path as sent, no query) names, matched as
 * classify_request matches it; NULL when none does, when the path cannot be
 * normalised, or when its two-slash reading names another route (those
 * requests are refused as invalid-target). For an answer the proxy gives
 * before the request is classified, whose shape is its route's
 * errors.format (docs/client-contract.md#errors-per-route). The route is
 * cfg's; borrows; pure.
 */
const struct route *classify_route_of(const struct config *cfg, const char *path);

/*
 * What classify_request decides about the idempotency key of a request on
 * path with method (NULL: any method the route protects) whose key header
 * carries key_value (as sent: key_parse reads it, as for a request; on a
 * route with key_from json, key_value is the key itself, as the body
 * holds it) and whose
 * scope header fields are headers; without a body, a signature or the
 * limits, which do not change the record a key maps to. For the admin
 * lookup (`record-id`, GET /records/lookup), which must find the record the
 * exchange would claim. PROTECT with the key in key (keysize bytes, as for
 * classify_request) and out->route; PASS_THROUGH when no route matches or
 * it does not protect method (out->route says which); else REFUSE with a
 * static detail. Borrows everything; pure.
 */
void classify_lookup(const struct config *cfg, const char *method, const char *path,
                     const struct evkeyvalq *headers, const char *key_value, char *key,
                     size_t keysize, struct classify_result *out);

#endif
