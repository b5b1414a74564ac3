/*
 * route.c - route patterns: normalisation at load, matching, shadowed
 * routes and the reload rule (route.h). Pure: no I/O, no YAML.
 */
#include "route.h"
#include "path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum route_pattern_status route_set_pattern(struct route *route, char **text,
                                            const char **reason)
{
    char *pattern = *text, *match;
    size_t len = strlen(pattern), size;
    bool prefix;
    enum path_status st;

    if (pattern[0] != '/')
        return ROUTE_PATTERN_NOT_ABSOLUTE;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)pattern[i];

        if (c <= ' ' || c == 0x7f || c == '?' || c == '#' || (c == '*' && i != len - 1))
            return ROUTE_PATTERN_BAD_CHAR;
    }
    prefix = pattern[len - 1] == '*';
    if (prefix)
        pattern[--len] = '\0';
    size = path_normalized_size(pattern) + 1; /* + a prefix's trailing '/' */
    match = malloc(size);
    if (match == NULL) {
        pattern[len] = prefix ? '*' : '\0'; /* as written, for the caller's message */
        return ROUTE_PATTERN_NOMEM;
    }
    st = path_normalize(pattern, match, size);
    if (st != PATH_OK) {
        pattern[len] = prefix ? '*' : '\0';
        free(match);
        *reason = path_status_reason(st);
        return ROUTE_PATTERN_UNMATCHABLE;
    }
    if (prefix && len > 0 && (pattern[len - 1] == '/' || pattern[len - 1] == '\\') &&
        strcmp(match, "/") != 0)
        strcat(match, "/");
    route_pattern_free(route);
    route->prefix = prefix;
    route->path = pattern;
    route->path_len = len;
    route->match = match;
    route->match_len = strlen(match);
    *text = NULL;
    return ROUTE_PATTERN_OK;
}

void route_pattern_free(struct route *route)
{
    free(route->path);
    free(route->match);
    route->path = NULL;
    route->match = NULL;
}

const struct route *route_match(const struct route *routes, size_t n, const char *path)
{
    size_t len = strlen(path);

    for (size_t i = 0; i < n; i++) {
        const struct route *route = &routes[i];

        if (route->prefix
                ? len >= route->match_len && strncasecmp(path, route->match, route->match_len) == 0
                : len == route->match_len && strncasecmp(path, route->match, len) == 0)
            return route;
    }
    return NULL;
}

/* Whether every path route b matches is matched by route a. */
static bool route_covers(const struct route *a, const struct route *b)
{
    if (a->prefix)
        return b->match_len >= a->match_len &&
               strncasecmp(b->match, a->match, a->match_len) == 0;
    return !b->prefix && strcasecmp(a->match, b->match) == 0;
}

/* ms in the config's own spelling, the largest whole unit (7d, 72h, 1500ms), for warnings. */
static void route_duration(uint64_t ms, char *buf, size_t len)
{
    static const struct { uint64_t ms; const char *unit; } units[] = {
        { 86400000, "d" }, { 3600000, "h" }, { 60000, "m" }, { 1000, "s" },
    };

    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (ms > 0 && ms % units[i].ms == 0) {
            snprintf(buf, len, "%llu%s", (unsigned long long)(ms / units[i].ms), units[i].unit);
            return;
        }
    snprintf(buf, len, "%llums", (unsigned long long)ms);
}

size_t route_warnings(const struct route *routes, size_t n, const char *file, char *out,
                      size_t outsize)
{
    size_t shadowed = 0, used = 0;

    out[0] = '\0';
    for (size_t j = 0; j < n; j++) {
        const struct route *b = &routes[j];
        int len;

        for (size_t i = 0; i < j; i++) {
            const struct route *a = &routes[i];
            if (!route_covers(a, b))
                continue;
            shadowed++;
            len = snprintf(out + used, outsize - used,
                           "%s:%d: warning: route '%s%s' is never reached: the earlier route at "
                           "line %d ('%s%s') matches every path it matches\n",
                           file, b->line, b->path, b->prefix ? "*" : "", a->line, a->path,
                           a->prefix ? "*" : "");
            if (len > 0)
                used += (size_t)len < outsize - used ? (size_t)len : outsize - used - 1;
            break;
        }
        if (b->policy.webhook && b->policy.verify == VERIFY_NONE && used < outsize) {
            /* verify: none had to be written out (config refuses it left unset) */
            shadowed++;
            len = snprintf(out + used, outsize - used,
                           "%s:%d: warning: route '%s%s' takes its key from the request without "
                           "verify: anyone who can reach it can pre-claim an event id\n",
                           file, b->line, b->path, b->prefix ? "*" : "");
            if (len > 0)
                used += (size_t)len < outsize - used ? (size_t)len : outsize - used - 1;
        }
        if (b->policy.webhook && b->policy.delivery.mode == DELIVERY_QUEUED &&
            b->policy.retention_ms < b->policy.delivery.max_age_ms && used < outsize) {
            /* a redelivery after retention has forgotten the event id is delivered again */
            char retention[32], max_age[32];

            route_duration(b->policy.retention_ms, retention, sizeof(retention));
            route_duration(b->policy.delivery.max_age_ms, max_age, sizeof(max_age));
            shadowed++;
            len = snprintf(out + used, outsize - used,
                           "%s:%d: warning: route '%s%s' has retention (%s) shorter than "
                           "delivery.max_age (%s): a provider's redelivery after the event id "
                           "is forgotten is queued and delivered again\n",
                           file, b->line, b->path, b->prefix ? "*" : "", retention, max_age);
            if (len > 0)
                used += (size_t)len < outsize - used ? (size_t)len : outsize - used - 1;
        }
    }
    if (n == 0 && used < outsize) {
        int len = snprintf(out + used, outsize - used,
                           "%s: warning: no routes: every request is forwarded as it is, with no "
                           "idempotency key checked or recorded\n", file);
        if (len > 0)
            used += (size_t)len < outsize - used ? (size_t)len : outsize - used - 1;
        shadowed++;
    }
    return shadowed;
}

size_t route_unprotected(const struct route *running, size_t n_running, const struct route *next,
                         size_t n_next, const char *file, char *out, size_t outsize)
{
    size_t dropped = 0, used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n_running && used < outsize; i++) {
        const struct route *a = &running[i];
        int len;

        if (route_match(next, n_next, a->match) != NULL)
            continue;
        dropped++;
        len = snprintf(out + used, outsize - used,
                       "%s: warning: the reload leaves '%s%s' without a route: its requests are "
                       "now forwarded unprotected, and a retry of a key it recorded executes "
                       "again\n", file, a->path, a->prefix ? "*" : "");
        if (len > 0)
            used += (size_t)len < outsize - used ? (size_t)len : outsize - used - 1;
    }
    return dropped;
}

/*
 * Whether the route serving path changes identity between running and next.
 * Both route lists match normalised paths (route->match).
 */
static const char *route_path_changes(const struct route *running, size_t n_running,
                                      const struct route *next, size_t n_next, const char *path,
                                      route_identity_change *changed, void *arg)
{
    const struct route *a = route_match(running, n_running, path);
    const struct route *b = route_match(next, n_next, path);

    return a != NULL && b != NULL ? changed(a, b, arg) : NULL;
}

/*
 * Every path a client may send falls in one class of the patterns it
 * matches; one path per class is enough: each pattern as written (normalised),
 * and, after each prefix pattern, a path longer than it that no longer
 * pattern matches (DEL cannot appear in a normalised pattern).
 */
static const char *route_patterns_change(const struct route *set, size_t n,
                                         const struct route *running, size_t n_running,
                                         const struct route *next, size_t n_next,
                                         route_identity_change *changed, void *arg)
{
    for (size_t i = 0; i < n; i++) {
        const char *why = route_path_changes(running, n_running, next, n_next, set[i].match,
                                             changed, arg);
        char *longer;

        if (why != NULL)
            return why;
        if (!set[i].prefix)
            continue;
        longer = malloc(set[i].match_len + 2);
        if (longer == NULL)
            return "the routes (out of memory while comparing them)";
        memcpy(longer, set[i].match, set[i].match_len);
        memcpy(longer + set[i].match_len, "\x7f", 2);
        why = route_path_changes(running, n_running, next, n_next, longer, changed, arg);
        free(longer);
        if (why != NULL)
            return why;
    }
    return NULL;
}

const char *route_reload_refusal(const struct route *running, size_t n_running,
                                 const struct route *next, size_t n_next,
                                 route_identity_change *changed, void *arg)
{
    const char *why = route_patterns_change(running, n_running, running, n_running, next,
                                            n_next, changed, arg);

    return why != NULL ? why
                       : route_patterns_change(next, n_next, running, n_running, next, n_next,
                                               changed, arg);
}
