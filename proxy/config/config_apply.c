/*
 * config_apply.c - pass 2 (config.c): the setter of every key a document
 * holds runs on its value, under config_int.h's ownership rule, and the key
 * is marked as set. Pass 3 runs the same functions over the built-in
 * defaults, so a key the file left out takes its default the same way.
 */
#include "config_int.h"

#include <stdlib.h>
#include <string.h>

int config_key_index(const struct config_key *table, const char *name)
{
    for (int i = 0; table[i].name != NULL; i++) {
        if (strcmp(table[i].name, name) == 0)
            return i;
    }
    return -1;
}

/*
 * Runs key's setter on value, under config_int.h's ownership rule: each
 * scalar is expanded here and lent to the setter, and whatever text the
 * setter did not take is freed here. A list key starts with key->begin (its
 * length, a fresh field), then the setter runs once per item.
 */
static int config_apply_key(struct config_loader *ld, const struct config_key *key,
                            yaml_node_t *value, void *obj)
{
    size_t n = 1;

    if (key->kind != CONFIG_SCALAR) {
        n = config_items(value);
        if (key->begin != NULL && key->begin(ld, key, value, n, obj) < 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *node = config_item(ld, value, i);
        char *text = config_scalar(ld, key, node);
        int rc = text != NULL ? key->set(ld, key, node, &text, obj) : -1;

        free(text);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/*
 * Runs the setter of every key of table that map holds and *set does not
 * have yet, and marks it. Keys of other tables (a route's path, sections)
 * are left to their own calls.
 */
int config_apply_mapping(struct config_loader *ld, struct config_doc *doc, yaml_node_t *map,
                                const struct config_key *table, void *obj, uint32_t *set)
{
    ld->cur = doc;
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return 0;
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
         pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *knode = config_node(doc, pair->key);
        int i = config_key_index(table, (const char *)knode->data.scalar.value);

        if (i < 0 || table[i].set == NULL || (*set & (1u << i)))
            continue;
        if (config_apply_key(ld, &table[i], config_node(doc, pair->value), obj) < 0)
            return -1;
        *set |= 1u << i;
    }
    return 0;
}

/* Everything but routes: pass 2 with the file, pass 3 with the built-in defaults. */
int config_apply_doc(struct config_loader *ld, struct config_doc *doc)
{
    struct config *cfg = ld->cfg;
    yaml_node_t *root = doc->root;

    if (config_apply_mapping(ld, doc, root, config_root_keys, cfg, &ld->set_root) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "upstream"), config_upstream_keys,
                             cfg, &ld->set_upstream) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "redis"), config_redis_keys,
                             cfg, &ld->set_redis) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, config_lookup(doc, root, "redis"), "tls"),
                             config_redis_tls_keys, cfg, &ld->set_redis_tls) < 0 ||
        config_apply_mapping(ld, doc,
                             config_lookup(doc, config_lookup(doc, root, "redis"), "sentinel"),
                             config_redis_sentinel_keys, cfg, &ld->set_redis_sentinel) < 0 ||
        config_apply_mapping(ld, doc,
                             config_lookup(doc, config_lookup(doc, root, "redis"), "cluster"),
                             config_redis_cluster_keys, cfg, &ld->set_redis_cluster) < 0 ||
        config_apply_mapping(ld, doc,
                             config_lookup(doc, config_lookup(doc, root, "redis"), "reassert"),
                             config_redis_reassert_keys, cfg, &ld->set_redis_reassert) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "limits"), config_limits_keys,
                             cfg, &ld->set_limits) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "errors"), config_errors_keys,
                             cfg, &ld->set_errors) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "log"), config_log_keys,
                             cfg, &ld->set_log) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "admin"), config_admin_keys,
                             cfg, &ld->set_admin) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "encryption"),
                             config_encryption_keys, cfg, &ld->set_encryption) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "defaults"), config_policy_keys,
                             &cfg->defaults, &ld->set_defaults) < 0 ||
        config_apply_mapping(ld, doc,
                             config_lookup(doc, config_lookup(doc, root, "defaults"), "errors"),
                             config_route_errors_keys, &cfg->defaults,
                             &ld->set_defaults_errors) < 0)
        return -1;
    return 0;
}

/* What a route's delivery is when it says nothing: direct, and the documented defaults. */
static void config_delivery_defaults(struct delivery_policy *d)
{
    *d = (struct delivery_policy){
        .mode = DELIVERY_DIRECT,
        .max_attempts = 12,
        .max_age_ms = 72ull * 3600 * 1000,
        .backoff_initial_ms = 1000,
        .backoff_max_ms = 3600ull * 1000,
        .visibility_timeout_ms = 30000,
        .concurrency = 16,
        .ack_status = 202,
        .dead_retention_ms = 7ull * 24 * 3600 * 1000,
    };
}
/* Each route's own keys; what it leaves unset is inherited in pass 3. */
int config_apply_routes(struct config_loader *ld)
{
    struct config *cfg = ld->cfg;
    struct config_doc *doc = &ld->user;
    yaml_node_t *list = config_lookup(doc, doc->root, "routes");
    size_t n;

    ld->cur = doc;
    n = list ? config_items(list) : 0;
    if (n == 0)
        return 0;
    cfg->routes = calloc(n, sizeof(*cfg->routes));
    ld->set_routes = calloc(n, sizeof(*ld->set_routes));
    ld->route_nodes = calloc(n, sizeof(*ld->route_nodes));
    if (cfg->routes == NULL || ld->set_routes == NULL || ld->route_nodes == NULL)
        return config_oom(ld, list);
    cfg->n_routes = n;
    for (size_t i = 0; i < n; i++) {
        struct route *route = &cfg->routes[i];
        yaml_node_t *item = config_item(ld, list, i);
        uint32_t path_set = 0;

        yaml_node_t *delivery = config_lookup(doc, item, "delivery");
        uint32_t delivery_set = 0, backoff_set = 0, sign_set = 0, errors_set = 0;

        ld->route_nodes[i] = item;
        route->line = (int)item->start_mark.line + 1;
        config_delivery_defaults(&route->policy.delivery);
        if (config_apply_mapping(ld, doc, item, config_route_keys, route, &path_set) < 0 ||
            config_apply_mapping(ld, doc, item, config_policy_keys, &route->policy,
                                 &ld->set_routes[i]) < 0 ||
            config_apply_mapping(ld, doc, delivery, config_delivery_keys,
                                 &route->policy.delivery, &delivery_set) < 0 ||
            config_apply_mapping(ld, doc, config_lookup(doc, delivery, "backoff"),
                                 config_delivery_backoff_keys, &route->policy.delivery,
                                 &backoff_set) < 0 ||
            config_apply_mapping(ld, doc, config_lookup(doc, delivery, "sign"),
                                 config_delivery_sign_keys, &route->policy.delivery,
                                 &sign_set) < 0 ||
            config_apply_mapping(ld, doc, config_lookup(doc, item, "errors"),
                                 config_route_errors_keys, &route->policy, &errors_set) < 0)
            return -1;
        /* the section's one key set marks the section: config_finish_route inherits the rest */
        if (errors_set != 0)
            ld->set_routes[i] |= 1u << config_key_index(config_policy_keys, "errors");
    }
    return 0;
}
