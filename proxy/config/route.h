/*
 * route.h - route patterns (`routes:`): normalised once at load, matched per
 * request (first match wins; no match is a plain pass-through), and the two
 * whole-table checks: routes an earlier one shadows, and what a reload may
 * not change about a route.
 *
 * Depends on policy.h only: config.h embeds struct route in struct config, so
 * this header must not include config.h (the include graph stays one-way).
 * The public entry points keep their config_* names in config.h; these are
 * what they call, over a plain array of routes.
 */
#ifndef IDEM_ROUTE_H
#define IDEM_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#include "policy.h"

struct route {
    char *path;                     /* pattern without the trailing '*', as written (record
                                       identity, logs, metrics); owned */
    size_t path_len;                /* bytes of path */
    char *match;                    /* path normalised as requests are (path.h), a prefix
                                       keeping its trailing '/'; what matching compares; owned */
    size_t match_len;               /* bytes of match */
    bool prefix;                    /* pattern ended in '*' */
    int line;                       /* where it was defined, for messages */
    struct route_policy policy;
};

/* Why route_set_pattern refused a pattern; the loader words the message. */
enum route_pattern_status {
    ROUTE_PATTERN_OK,
    ROUTE_PATTERN_NOT_ABSOLUTE,     /* does not start with '/' */
    ROUTE_PATTERN_BAD_CHAR,         /* '?', '#', space, control character, or '*' not last */
    ROUTE_PATTERN_UNMATCHABLE,      /* path_normalize refuses it: no request can match it */
    ROUTE_PATTERN_NOMEM,
};

/*
 * Sets route's pattern from text, "/exact" or "/prefix*" ('*' only as the
 * last character), after ${VAR} expansion. The pattern is normalised with the
 * requests' path_normalize, so "/V1//payments/" matches as "/v1/payments"; a
 * prefix written with a trailing '/' keeps it ("/v1/x/" then '*' does not
 * match /v1/x itself). A pattern the normaliser refuses (an encoded slash,
 * invalid UTF-8, ...) names a path no request is ever routed by, so it is
 * refused too.
 * Ownership: on ROUTE_PATTERN_OK takes the malloc'd *text (sets *text to NULL;
 * it becomes route->path without the '*') and frees route's previous pattern.
 * On any other status neither *text (bytes unchanged) nor route is touched;
 * for ROUTE_PATTERN_UNMATCHABLE *reason is path_status_reason's static text.
 */
enum route_pattern_status route_set_pattern(struct route *route, char **text,
                                            const char **reason);

/* Frees route's path and match strings (not its policy); safe on a zeroed route. */
void route_pattern_free(struct route *route);

/*
 * The first of the n routes whose normalised pattern (route->match) matches
 * path (path only, no query; callers pass it through path_normalize first),
 * compared case-insensitively; NULL when none does. A pattern matches
 * exactly, or, when it ended in '*', every path that starts with the rest
 * ("/v1/payments*" matches /v1/payments, /v1/payments/1 and /v1/paymentsX).
 * No decoding. Returns a pointer into routes (borrowed, not owned).
 */
const struct route *route_match(const struct route *routes, size_t n, const char *path);

/*
 * What -t and startup warn about: routes no request can reach because an
 * earlier route takes every path they match (an earlier prefix route whose
 * prefix starts their normalised pattern, or an earlier identical pattern),
 * webhook routes written with verify: none (anyone can pre-claim an
 * event id), and a configuration with no routes at all (nothing is protected). Writes one line per warning into out (caller-owned, outsize > 0
 * bytes), "FILE:LINE: warning: ...\n", truncated to fit and always
 * NUL-terminated. Returns how many warnings. Pure.
 */
size_t route_warnings(const struct route *routes, size_t n, const char *file, char *out,
                      size_t outsize);

/*
 * What a reload warns about: each running route whose own pattern (route->match) no route of
 * next matches, so its requests are forwarded unprotected from the reload on, and a retry of a
 * key it recorded executes again (the record is never looked up). Writes one line per such
 * route into out (caller-owned, outsize > 0 bytes), "FILE: warning: ...\n", truncated to fit
 * and NUL-terminated. Returns how many routes. Pure.
 */
size_t route_unprotected(const struct route *running, size_t n_running, const struct route *next,
                         size_t n_next, const char *file, char *out, size_t outsize);

/*
 * Whether route a (of the running config) and route b (of the next one),
 * which both serve some path, would give that path another record
 * identity: NULL when not, else static words naming what differs. The
 * config module says which settings form identity (its schema's IDENTITY
 * keys); arg is route_reload_refusal's. Pure.
 */
typedef const char *route_identity_change(const struct route *a, const struct route *b,
                                          void *arg);

/*
 * Whether some path that a route protects in running and a route protects
 * in next would be served under another record identity, as changed says
 * for the two routes. That would change record ids under retrying clients.
 * Paths are compared as matching sees them (normalised patterns), so a
 * pattern spelled differently is the same pattern: one path per class of
 * the patterns it matches is tried, each pattern as written and, after
 * each prefix pattern, a path longer than it that no longer pattern
 * matches. Insertions, removals and reordering that keep every path's
 * identity are fine. Returns NULL, or the first of changed's answers.
 * Pure.
 */
const char *route_reload_refusal(const struct route *running, size_t n_running,
                                 const struct route *next, size_t n_next,
                                 route_identity_change *changed, void *arg);

#endif
