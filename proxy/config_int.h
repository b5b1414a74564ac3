/*
 * config_int.h - what the files of the config module share and nothing
 * outside it includes: the schema's types (a key, its kind and flags), the
 * loader's state, the message and node helpers (config_node.c), the typed
 * setters that config_set.c implements and config.c's key tables name, and
 * the redis section's pass 3 (config_redis.c).
 *
 * Ownership rule of every setter: the pass that runs a setter expands the
 * scalar itself (config_scalar: ${VAR}, null as "") and lends the text in
 * *text; a setter that keeps the string takes it by setting *text = NULL;
 * the pass always frees *text afterwards. So a setter never frees the text
 * and an error is simply `return config_error(...)`.
 */
#ifndef IDEM_CONFIG_INT_H
#define IDEM_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "config.h"
#include "config_value.h"

struct config_loader;
struct config_key;
struct config_section;

/*
 * Converts one expanded value into the field of obj that key names (obj is
 * the struct config, a struct route_policy or a struct route, as the key's
 * table says); node is where the value sits, for the message. Takes *text
 * (sets it NULL) when it keeps the string. Returns 0, or -1 after
 * config_error. For a list key it runs once per item.
 */
typedef int config_setter(struct config_loader *ld, const struct config_key *key,
                          yaml_node_t *node, char **text, void *obj);

/*
 * A list key's start, before its setter runs per item: checks the count n
 * of items of list and resets the field. Returns 0, or -1 after config_error.
 */
typedef int config_list_begin(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *list, size_t n, void *obj);

/* What kind of YAML node a key takes; checked in pass 1. */
enum config_kind {
    CONFIG_SCALAR,          /* one value */
    CONFIG_LIST,            /* a list of values; null counts as [] */
    CONFIG_SCALAR_OR_LIST,  /* one value or a list of values (secret) */
    CONFIG_SECTION,         /* a mapping with its own key table; null counts as {} */
    CONFIG_ROUTES,          /* a list of route mappings; null counts as [] */
};

#define CONFIG_ROUTE_ONLY 0x1u  /* webhook keys: in a route, not in defaults: */
#define CONFIG_POSITIVE   0x2u  /* durations: 0 is an error */
#define CONFIG_EMPTY_OFF  0x4u  /* endpoints: "" disables the listener */
#define CONFIG_NONEMPTY   0x8u  /* strings: "" is an error */
#define CONFIG_UNSET_EMPTY 0x10u /* an unset ${VAR} reads as "" (documented optional values);
                                    elsewhere it is an error that names VAR */

struct config_key {
    const char *name;
    enum config_kind kind;
    config_setter *set;                    /* NULL: a section the passes walk */
    size_t offset;                         /* of the field, for generic setters */
    unsigned flags;
    const struct config_section *section;  /* CONFIG_SECTION, CONFIG_ROUTES */
    const struct config_enum *names;       /* config_set_enum: the allowed values */
    config_list_begin *begin;              /* CONFIG_LIST, CONFIG_SCALAR_OR_LIST */
};

/* One parsed YAML text: the user's file or the built-in defaults. */
struct config_doc {
    const char *name;                      /* the FILE of "FILE:LINE:" */
    yaml_document_t yaml;
    bool loaded;
    yaml_node_t *root;                     /* a mapping; NULL for an empty file */
};

struct config_loader {
    struct config *cfg;
    char *err;
    size_t errlen;
    struct config_doc user;
    struct config_doc builtin;
    struct config_doc *cur;                /* the document being read */
    /* pass 2/3: which keys are set, one bit per index in their table */
    uint32_t set_root, set_upstream, set_redis, set_redis_tls, set_limits, set_defaults;
    uint32_t set_redis_sentinel, set_redis_cluster;
    uint32_t set_errors, set_log;
    uint32_t *set_routes;                  /* one mask per route */
    yaml_node_t **route_nodes;             /* each route's mapping, for lines */
    char *redis_url_username;              /* from redis://USER:PASSWORD@; owned */
    char *redis_url_password;              /* from redis://[USER]:PASSWORD@; owned */
};

/*
 * Writes "FILE:LINE: message" into ld->err (ld->errlen bytes, truncated to
 * fit), FILE being the document being read and LINE node's (1-based); just
 * "FILE: message" when node is NULL. Returns -1, for `return config_error(...)`.
 */
int config_error(struct config_loader *ld, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* config_error(ld, node, "out of memory"); returns -1. */
int config_oom(struct config_loader *ld, const yaml_node_t *node);

/* YAML's null (`~`, `null`, or nothing after the colon) (config.c). */
bool config_is_null(const yaml_node_t *node);

/*
 * Builds doc (its name set, the rest zeroed) from text (len bytes, borrowed)
 * with libyaml, line marks kept; doc->root is NULL for an empty or null
 * document, and doc->loaded says yaml_document_delete is due. A syntax
 * error or a second document is an error with its line. Returns 0, or -1
 * after config_error (config_file.c).
 */
int config_doc_parse(struct config_loader *ld, struct config_doc *doc, const char *text,
                     size_t len);

/* The node of index in doc (libyaml's numbering); NULL when there is none. */
yaml_node_t *config_node(struct config_doc *doc, int index);

/* The value of key name in mapping map; NULL when absent, null, or map is NULL. */
yaml_node_t *config_lookup(struct config_doc *doc, yaml_node_t *map, const char *name);

/* Items of a list, or of one scalar seen as a list of one; null is []. */
size_t config_items(const yaml_node_t *node);

/* Item i (< config_items) of node in the document being read. */
yaml_node_t *config_item(struct config_loader *ld, yaml_node_t *node, size_t i);

/*
 * The scalar's text, malloc'd (caller frees), with each ${NAME} replaced by
 * getenv(NAME); null reads as "". An unset NAME is an error naming it
 * unless key (NULL: none) has CONFIG_UNSET_EMPTY. NULL after config_error.
 */
char *config_scalar(struct config_loader *ld, const struct config_key *key, yaml_node_t *node);

/*
 * Pass 3 of the redis section, after the built-in defaults (config_redis.c):
 * the credentials (keys over the URL's), redis.sentinel complete (master
 * and addresses), and redis.tls (with rediss:// or redis.sentinel.tls, a
 * client certificate with its key, every file readable). Returns 0, or -1
 * after config_error.
 */
int config_finish_redis(struct config_loader *ld);

/* The typed setters (config_set.c), named by the key tables of config.c. */
config_setter config_set_endpoint, config_set_upstream_url, config_set_redis_url,
    config_set_duration, config_set_size, config_set_workers, config_set_string,
    config_set_key_prefix, config_set_bool, config_set_route_path, config_set_key_header,
    config_set_method, config_set_key_max_length, config_set_enum, config_set_scope_header,
    config_set_release_status, config_set_key_from, config_set_secret,
    config_set_sentinel_master, config_set_sentinel_address,
    config_set_cluster_address;

/* redis.min_replicas (config_replicas.c). */
config_setter config_set_min_replicas;

/* delivery.max_attempts / delivery.concurrency, and delivery.ack_status (config_set.c). */
config_setter config_set_delivery_count, config_set_ack_status;

/*
 * Pass 3: with redis.min_replicas > 0, redis.replica_timeout must be at most
 * half of redis.timeout (README "Redis in production"); redis (may be NULL)
 * is the section's node, for the line. Returns 0, or -1 after config_error
 * (config_replicas.c).
 */
int config_check_replicas(struct config_loader *ld, yaml_node_t *redis);

/* The starts of the list keys (config_set.c). */
config_list_begin config_begin_methods, config_begin_scope_headers,
    config_begin_release_statuses, config_begin_secrets, config_begin_sentinel_addresses,
    config_begin_cluster_addresses;

#endif
