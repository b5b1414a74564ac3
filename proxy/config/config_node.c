/*
 * config_node.c - reading the libyaml document for the passes (config_int.h):
 * the "FILE:LINE: what" messages, a key's value in a mapping, YAML's null,
 * list items (a single value seen as a list of one), and a scalar's text
 * with ${VAR} expanded. No YAML syntax is read by hand: libyaml built the
 * nodes.
 */
#include "config_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ---------------------------------------------------------- */

int config_error(struct config_loader *ld, const yaml_node_t *node, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (ld->err == NULL || ld->errlen == 0)
        return -1;
    if (node != NULL)
        n = snprintf(ld->err, ld->errlen, "%s:%zu: ", ld->cur->name,
                     (size_t)node->start_mark.line + 1);
    else
        n = snprintf(ld->err, ld->errlen, "%s: ", ld->cur->name);
    if (n < 0 || (size_t)n >= ld->errlen)
        return -1;
    va_start(ap, fmt);
    vsnprintf(ld->err + n, ld->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

int config_oom(struct config_loader *ld, const yaml_node_t *node)
{
    return config_error(ld, node, "out of memory");
}

/* ---- reading nodes ----------------------------------------------------- */

yaml_node_t *config_node(struct config_doc *doc, int index)
{
    return yaml_document_get_node(&doc->yaml, index);
}

/* YAML's null (`~`, `null`, or nothing after the colon). */
bool config_is_null(const yaml_node_t *node)
{
    static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    for (size_t i = 0; i < CONFIG_ARRAY_SIZE(nulls); i++) {
        if (strcmp((const char *)node->data.scalar.value, nulls[i]) == 0)
            return true;
    }
    return false;
}

yaml_node_pair_t *config_lookup_pair(struct config_doc *doc, yaml_node_t *map, const char *name)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
         pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = config_node(doc, pair->key);

        if (key->type == YAML_SCALAR_NODE && strcmp((const char *)key->data.scalar.value, name) == 0)
            return pair;
    }
    return NULL;
}

/* The value of key name in mapping map; NULL when absent, null, or map is NULL. */
yaml_node_t *config_lookup(struct config_doc *doc, yaml_node_t *map, const char *name)
{
    yaml_node_pair_t *pair = config_lookup_pair(doc, map, name);
    yaml_node_t *value = pair != NULL ? config_node(doc, pair->value) : NULL;

    return value != NULL && !config_is_null(value) ? value : NULL;
}

yaml_node_t *config_blame(struct config_doc *doc, yaml_node_t *map, const char *name,
                          const char *other)
{
    yaml_node_t *where = config_lookup(doc, map, name);

    if (where == NULL)
        where = config_lookup(doc, map, other);
    return where != NULL ? where : map;
}

/* Items of a list, or of one scalar seen as a list of one; null is []. */
size_t config_items(const yaml_node_t *node)
{
    if (node->type == YAML_SEQUENCE_NODE)
        return (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    return config_is_null(node) ? 0 : 1;
}

yaml_node_t *config_item(struct config_loader *ld, yaml_node_t *node, size_t i)
{
    if (node->type == YAML_SEQUENCE_NODE)
        return config_node(ld->cur, node->data.sequence.items.start[i]);
    return node;
}

/*
 * The scalar's text, malloc'd, with each ${NAME} replaced by getenv(NAME);
 * YAML null reads as "". An unset NAME is an error naming it unless key
 * (NULL: none) has CONFIG_UNSET_EMPTY: a silent "" would turn
 * http://127.0.0.1:${PORT} into port 80, or a Redis URL into someone
 * else's Redis. NULL after config_error.
 */
char *config_scalar(struct config_loader *ld, const struct config_key *key,
                           yaml_node_t *node)
{
    const char *text = (const char *)node->data.scalar.value;
    bool unset_empty = key != NULL && (key->flags & CONFIG_UNSET_EMPTY);
    const char *name = NULL;
    size_t name_len = 0;
    char *out;

    if (config_is_null(node))
        text = "";
    else if (strlen(text) != node->data.scalar.length) {
        config_error(ld, node, "a value may not contain a NUL byte");
        return NULL;
    }
    switch (config_expand_env(text, unset_empty, &out, &name, &name_len)) {
    case CONFIG_EXPAND_OK:
        return out;
    case CONFIG_EXPAND_BAD_SYNTAX:
        config_error(ld, node, "bad ${...} in '%s': write ${NAME}, NAME made of letters, "
                     "digits and _", text);
        break;
    case CONFIG_EXPAND_UNSET:
        config_error(ld, node, "%s%s${%.*s} is not set (export it, or write the value "
                     "itself)", key != NULL ? key->name : "", key != NULL ? ": " : "",
                     (int)name_len, name);
        break;
    case CONFIG_EXPAND_NOMEM:
        config_oom(ld, node);
        break;
    }
    return NULL;
}
