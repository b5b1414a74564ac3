/*
 * config_fingerprint.c - a route's fingerprint_ignore (the JSON Pointers a
 * json fingerprint leaves out, docs/client-contract.md#fingerprint-json):
 * its setter, and the pass-3 check that ties it to fingerprint: json. The
 * fingerprint mode itself is a plain enum (config_schema.c).
 */
#include "config_int.h"
#include "json_pointer.h"

#include <string.h>

int config_begin_fingerprint_ignore(struct config_loader *ld, const struct config_key *key,
                                    yaml_node_t *list, size_t n, void *obj)
{
    struct route_policy *policy = obj;

    if (n > CONFIG_MAX_FINGERPRINT_IGNORE)
        return config_error(ld, list, "%s takes at most %d JSON Pointers", key->name,
                            CONFIG_MAX_FINGERPRINT_IGNORE);
    config_free_strings(policy->fingerprint_ignore, &policy->n_fingerprint_ignore);
    return 0;
}

/*
 * One item of `fingerprint_ignore:`: an RFC 6901 pointer to a member or an
 * element, so not "" (the whole body: that is fingerprint: none), at most
 * CONFIG_MAX_IGNORE_POINTER bytes (a record stores the list it was made with).
 */
int config_set_fingerprint_ignore(struct config_loader *ld, const struct config_key *key,
                                  yaml_node_t *node, char **text, void *obj)
{
    struct route_policy *policy = obj;
    size_t len = strlen(*text);

    if (len == 0 || len > CONFIG_MAX_IGNORE_POINTER || !json_pointer_valid(*text, len))
        return config_error(ld, node, "bad JSON Pointer '%s' in %s: expected /member or "
                            "/member/0/... (RFC 6901: '~0' for '~', '~1' for '/'), 1 to %d "
                            "bytes", *text, key->name, CONFIG_MAX_IGNORE_POINTER);
    policy->fingerprint_ignore[policy->n_fingerprint_ignore++] = config_take(text);
    return 0;
}

int config_check_fingerprint(struct config_loader *ld, const struct route_policy *policy,
                             yaml_node_t *map)
{
    if (policy->n_fingerprint_ignore == 0 || policy->fingerprint == FINGERPRINT_JSON)
        return 0;
    /* the route's own line; a route that inherits the list is named by its fingerprint */
    return config_error(ld, config_blame(&ld->user, map, "fingerprint_ignore", "fingerprint"),
                        "fingerprint_ignore is for fingerprint: json only (it names JSON "
                        "members): drop it, or write fingerprint_ignore: [] on a route that "
                        "inherits it from defaults:");
}
