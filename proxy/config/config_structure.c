/*
 * config_structure.c - pass 1 (config.c): every mapping of a document is
 * checked against the key tables (config_schema.c) before any value is
 * read: unknown keys (with where they belong instead), duplicate keys, and
 * the kind of each value (a single value, a list, a section, the routes).
 */
#include "config_int.h"

#include <string.h>

/* The key table entry for name where sec allows it; NULL when it does not. */
static const struct config_key *config_section_key(const struct config_section *sec, const char *name)
{
    for (size_t t = 0; t < CONFIG_ARRAY_SIZE(sec->tables) && sec->tables[t] != NULL; t++) {
        for (const struct config_key *key = sec->tables[t]; key->name != NULL; key++) {
            if (strcmp(key->name, name) == 0)
                return (key->flags & sec->exclude) ? NULL : key;
        }
    }
    return NULL;
}

/* Says where a misplaced key belongs, or which keys the section takes. */
static int config_unknown_key(struct config_loader *ld, yaml_node_t *knode,
                              const struct config_section *sec, const char *name)
{
    char list[512] = "";

    for (size_t i = 0; i < config_n_sections; i++) {
        if (config_sections[i] != sec && config_section_key(config_sections[i], name) != NULL)
            config_list_append(list, sizeof(list), config_sections[i]->name);
    }
    if (list[0] != '\0')
        return config_error(ld, knode, "key '%s' is not allowed in %s; it belongs in %s",
                            name, sec->name, list);
    for (size_t t = 0; t < CONFIG_ARRAY_SIZE(sec->tables) && sec->tables[t] != NULL; t++) {
        for (const struct config_key *key = sec->tables[t]; key->name != NULL; key++) {
            if (!(key->flags & sec->exclude))
                config_list_append(list, sizeof(list), key->name);
        }
    }
    return config_error(ld, knode, "unknown key '%s' in %s (allowed: %s)", name, sec->name, list);
}

static const char *config_node_kind(const yaml_node_t *node)
{
    switch (node->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a list";
    default:
        return "a single value";
    }
}

static int config_check_mapping(struct config_loader *ld, yaml_node_t *map,
                                const struct config_section *sec);

/* A list whose items are all single values. */
static int config_check_scalars(struct config_loader *ld, const struct config_key *key,
                                yaml_node_t *list)
{
    for (size_t i = 0; i < config_items(list); i++) {
        yaml_node_t *item = config_item(ld, list, i);

        if (item->type != YAML_SCALAR_NODE)
            return config_error(ld, item, "each item of '%s' must be a single value, not %s",
                                key->name, config_node_kind(item));
    }
    return 0;
}

static int config_check_routes(struct config_loader *ld, const struct config_key *key,
                               yaml_node_t *list)
{
    for (size_t i = 0; i < config_items(list); i++) {
        yaml_node_t *item = config_item(ld, list, i);

        if (item->type != YAML_MAPPING_NODE)
            return config_error(ld, item, "each item of '%s' must be a mapping (- path: ...), "
                                "not %s", key->name, config_node_kind(item));
        if (config_check_mapping(ld, item, key->section) < 0)
            return -1;
        if (config_lookup(ld->cur, item, "path") == NULL)
            return config_error(ld, item, "a route needs a path");
    }
    return 0;
}

/* The value of key has the kind the table says (null counts as an empty list or section). */
static int config_check_value(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *value)
{
    bool null = config_is_null(value);
    const char *want = NULL;

    switch (key->kind) {
    case CONFIG_SCALAR:
        if (value->type != YAML_SCALAR_NODE)
            want = "a single value";
        break;
    case CONFIG_LIST:
        if (value->type != YAML_SEQUENCE_NODE && !null)
            want = "a list";
        break;
    case CONFIG_SCALAR_OR_LIST:
        if (value->type == YAML_MAPPING_NODE)
            want = "a single value or a list";
        break;
    case CONFIG_SECTION:
        if (value->type != YAML_MAPPING_NODE && !null)
            want = "a mapping";
        break;
    case CONFIG_ROUTES:
        if (value->type != YAML_SEQUENCE_NODE && !null)
            want = "a list of routes";
        break;
    }
    if (want != NULL)
        return config_error(ld, value, "'%s' must be %s, not %s", key->name, want,
                            config_node_kind(value));
    if (null)
        return 0;
    switch (key->kind) {
    case CONFIG_LIST:
    case CONFIG_SCALAR_OR_LIST:
        return config_check_scalars(ld, key, value);
    case CONFIG_SECTION:
        return config_check_mapping(ld, value, key->section);
    case CONFIG_ROUTES:
        return config_check_routes(ld, key, value);
    default:
        return 0;
    }
}

/* Every key known to sec, none twice, each value of the right kind. */
static int config_check_mapping(struct config_loader *ld, yaml_node_t *map,
                                const struct config_section *sec)
{
    yaml_node_pair_t *start;

    if (map->type != YAML_MAPPING_NODE)
        return config_error(ld, map, "%s must be a mapping of keys, not %s", sec->name,
                            config_node_kind(map));
    start = map->data.mapping.pairs.start;
    for (yaml_node_pair_t *pair = start; pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *knode = config_node(ld->cur, pair->key);
        const struct config_key *key;
        const char *name;

        if (knode->type != YAML_SCALAR_NODE)
            return config_error(ld, knode, "keys in %s must be plain names, not %s", sec->name,
                                config_node_kind(knode));
        name = (const char *)knode->data.scalar.value;
        key = config_section_key(sec, name);
        if (key == NULL)
            return config_unknown_key(ld, knode, sec, name);
        for (yaml_node_pair_t *prev = start; prev < pair; prev++) {
            yaml_node_t *pnode = config_node(ld->cur, prev->key);

            if (strcmp((const char *)pnode->data.scalar.value, name) == 0)
                return config_error(ld, knode, "duplicate key '%s' in %s (first at line %zu)",
                                    name, sec->name, (size_t)pnode->start_mark.line + 1);
        }
        if (config_check_value(ld, key, config_node(ld->cur, pair->value)) < 0)
            return -1;
    }
    return 0;
}

int config_check_structure(struct config_loader *ld, struct config_doc *doc)
{
    ld->cur = doc;
    if (doc->root == NULL)
        return 0;
    return config_check_mapping(ld, doc->root, &config_root_section);
}
