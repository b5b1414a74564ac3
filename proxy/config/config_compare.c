/*
 * config_compare.c - how a reload compares a key between two configs: one
 * comparison per field type, the comparisons of the keys no field type
 * reads (a route's key source and scope_headers, the routes themselves),
 * and the walk of a table that finds the first key of a class that
 * changed. Each row of the schema (config_schema.c) names its comparison
 * in its reload class (`.reload = RESTART(config_changed_string)`);
 * config_reload.c walks it from the top. The routes are one
 * key whose comparison pairs them: by path as matching sees it for identity
 * (route_reload_refusal), by path as written for the queued routes the
 * inbox consumers were made from. Pure: no I/O.
 */
#include "config_int.h"
#include "route.h"

#include <string.h>
#include <strings.h>

/* The field key names in obj (a struct its table's offsets point into). */
#define CONFIG_FIELD(type, obj, key) (*(const type *)((const char *)(obj) + (key)->offset))

/* ---- one comparison per field type (config_int.h names them) -------------- */

bool config_changed_string(const struct config_key *key, enum config_reload cls,
                           const void *a, const void *b, const char **what)
{
    (void)cls;
    (void)what;
    return !config_same_string(CONFIG_FIELD(char *, a, key), CONFIG_FIELD(char *, b, key));
}

/* A comparison of a field of one plain type (compared with !=). */
#define CONFIG_CHANGED_PLAIN(fn, type)                                                         \
    bool fn(const struct config_key *key, enum config_reload cls, const void *a,               \
            const void *b, const char **what)                                                  \
    {                                                                                          \
        (void)cls;                                                                             \
        (void)what;                                                                            \
        return CONFIG_FIELD(type, a, key) != CONFIG_FIELD(type, b, key);                       \
    }

CONFIG_CHANGED_PLAIN(config_changed_bool, bool)
CONFIG_CHANGED_PLAIN(config_changed_u64, uint64_t)      /* durations, ms */
CONFIG_CHANGED_PLAIN(config_changed_size, size_t)       /* sizes, bytes */
CONFIG_CHANGED_PLAIN(config_changed_int, int)           /* enums (stored as int) and statuses */
CONFIG_CHANGED_PLAIN(config_changed_unsigned, unsigned) /* counts: workers (0: auto), replicas,
                                                           a delivery's attempts, concurrency */

static bool config_same_endpoint(const struct endpoint *a, const struct endpoint *b)
{
    return config_same_string(a->host, b->host) && a->port == b->port;
}

/* listen, admin_listen, health_listen (host NULL: disabled) */
bool config_changed_endpoint(const struct config_key *key, enum config_reload cls, const void *a,
                             const void *b, const char **what)
{
    (void)cls;
    (void)what;
    return !config_same_endpoint(&CONFIG_FIELD(struct endpoint, a, key),
                                 &CONFIG_FIELD(struct endpoint, b, key));
}

/* the same addresses in the same order: the order is the order they are tried in */
bool config_changed_endpoints(const struct config_key *key, enum config_reload cls, const void *a,
                              const void *b, const char **what)
{
    const struct endpoint_list *ea = &CONFIG_FIELD(struct endpoint_list, a, key);
    const struct endpoint_list *eb = &CONFIG_FIELD(struct endpoint_list, b, key);

    (void)cls;
    (void)what;
    if (ea->n != eb->n)
        return true;
    for (size_t i = 0; i < ea->n; i++) {
        if (!config_same_endpoint(&ea->at[i], &eb->at[i]))
            return true;
    }
    return false;
}

/* ---- the keys no field type's comparison reads ------------------------------ */

/* delivery.rate (a, b: struct delivery_policy). */
bool config_changed_delivery_rate(const struct config_key *key, enum config_reload cls,
                                  const void *a, const void *b, const char **what)
{
    const struct delivery_policy *da = a, *db = b;

    (void)key;
    (void)cls;
    (void)what;
    return da->rate_count != db->rate_count || da->rate_period_ms != db->rate_period_ms;
}

/*
 * key_header and key_from of a route (a, b: its route_policy): what record
 * ids hash as the key source, header names lowercased (record_source), so a
 * key_header that only changes case is the same source.
 */
bool config_changed_key_source(const struct config_key *key, enum config_reload cls,
                               const void *a, const void *b, const char **what)
{
    const struct route_policy *pa = a, *pb = b;

    (void)key;
    (void)cls;
    *what = "the key source (key_header or key_from) of a route";
    return !config_same_string(pa->record_source, pb->record_source);
}

/* scope_headers of a route: the same header names in the same order, case-insensitively. */
bool config_changed_scope_headers(const struct config_key *key, enum config_reload cls,
                                  const void *a, const void *b, const char **what)
{
    const struct route_policy *pa = a, *pb = b;

    (void)key;
    (void)cls;
    *what = "the scope_headers of a route";
    if (pa->n_scope_headers != pb->n_scope_headers)
        return true;
    for (size_t i = 0; i < pa->n_scope_headers; i++) {
        if (strcasecmp(pa->scope_headers[i], pb->scope_headers[i]) != 0)
            return true;
    }
    return false;
}

/*
 * `defaults:` reaches requests only through the routes that inherit it (a
 * path no route matches is a plain pass-through), and the routes' own
 * comparison sees what each route ended up with: nothing to compare here.
 */
bool config_changed_inherited(const struct config_key *key, enum config_reload cls,
                              const void *a, const void *b, const char **what)
{
    (void)key;
    (void)cls;
    (void)a;
    (void)b;
    (void)what;
    return false;
}

/* ---- the walk ---------------------------------------------------------------- */

/* config_int.h says what it finds; a key of its class without a comparison counts as changed. */
bool config_walk(const struct config_section *sec, size_t t, enum config_reload cls, const void *a,
                 const void *b, const char *top, struct config_change *ch)
{
    for (const struct config_key *key = sec->tables[t]; key->name != NULL; key++) {
        const char *under = top != NULL ? top : key->name;
        config_compare *compare = key->compare;
        const char *what = NULL;

        if (key->flags & sec->exclude)
            continue;
        if (key->reload == CONFIG_RELOAD_BY_KEYS && compare == NULL) {
            if (config_walk(key->section, 0, cls, (const char *)a + key->offset,
                            (const char *)b + key->offset, under, ch))
                return true;
            continue;
        }
        if (key->reload != cls && key->reload != CONFIG_RELOAD_BY_KEYS)
            continue;
        if (compare == NULL || compare(key, cls, a, b, &what)) {
            *ch = (struct config_change){ key, sec, under, what, top == NULL };
            return true;
        }
    }
    return false;
}

/* What a pair of routes is walked for, as route_reload_refusal's arg. */
struct config_route_walk {
    const struct config_section *section;   /* the routes key's: route keys, then policy keys */
    enum config_reload cls;
};

/*
 * route_identity_change, and the restart comparison of two queued routes:
 * the first key of the class that differs between route a and route b (a
 * route's first table reads the route, its second the route's policy),
 * named by its comparison's words or its name; NULL when none does.
 */
static const char *config_route_changed(const struct route *a, const struct route *b, void *arg)
{
    const struct config_route_walk *w = arg;
    struct config_change ch;

    if (!config_walk(w->section, 0, w->cls, a, b, NULL, &ch) &&
        !config_walk(w->section, 1, w->cls, &a->policy, &b->policy, NULL, &ch))
        return NULL;
    return ch.what != NULL ? ch.what : ch.key->name;
}

/*
 * Every queued route of a is a queued route of b, by its path as written (a
 * prefix route's with its '*'), and no RESTART key of the route differs:
 * each worker's inbox consumers were made from the boot config's queued
 * routes and their delivery settings.
 */
static bool config_queued_kept(const struct config *a, const struct config *b,
                               struct config_route_walk *w)
{
    for (size_t i = 0; i < a->n_routes; i++) {
        const struct route *ra = &a->routes[i];
        bool found = false;

        if (ra->policy.delivery.mode != DELIVERY_QUEUED)
            continue;
        for (size_t j = 0; j < b->n_routes && !found; j++) {
            const struct route *rb = &b->routes[j];

            found = rb->policy.delivery.mode == DELIVERY_QUEUED && ra->prefix == rb->prefix &&
                    strcmp(ra->path, rb->path) == 0 && config_route_changed(ra, rb, w) == NULL;
        }
        if (!found)
            return false;
    }
    return true;
}

/*
 * `routes:` (a, b: struct config). RESTART: the queued routes, both ways.
 * IDENTITY: for every path a route serves in both, the IDENTITY keys of the
 * two routes that serve it (route_reload_refusal); inserting, removing and
 * reordering routes is fine as long as no path changes identity.
 */
bool config_changed_routes(const struct config_key *key, enum config_reload cls, const void *a,
                           const void *b, const char **what)
{
    const struct config *ca = a, *cb = b;
    struct config_route_walk w = { key->section, cls };

    if (cls == CONFIG_RELOAD_RESTART) {
        *what = "a queued route or its delivery settings";
        return !config_queued_kept(ca, cb, &w) || !config_queued_kept(cb, ca, &w);
    }
    if (cls == CONFIG_RELOAD_IDENTITY) {
        *what = route_reload_refusal(ca->routes, ca->n_routes, cb->routes, cb->n_routes,
                                     config_route_changed, &w);
        return *what != NULL;
    }
    return false;
}
