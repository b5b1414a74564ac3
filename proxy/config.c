/*
 * config.c - load the YAML configuration into plain structs (README "Configuration").
 *
 * libyaml builds the document (with line marks); nothing here reads YAML
 * syntax by hand. Three passes, as twemproxy does:
 *
 *   1. structure: every mapping is checked against the key tables below:
 *      unknown keys, duplicate keys, and the kind of each value (a single
 *      value, a list, a section);
 *   2. typed setters: for each key present in the file the pass expands
 *      ${VAR} in the value and runs the key's setter (config_set.c), which
 *      converts the text into the struct field; the key is marked as set;
 *   3. defaults and cross-field checks: every key still unset takes its
 *      value from `defaults:` (routes only) and then from the built-in
 *      defaults document, which is the contract's section 3 written as
 *      YAML and applied by the same setters; then the checks that involve
 *      several keys (retention >= lease, verify needs a secret, ...).
 *
 * The key tables are the schema. tests/unit/check_config_keys.py reads
 * them with a regex, so keep one `{ "name", ...` entry per line in the
 * `static const struct config_key config_*_keys[]` arrays.
 *
 * The rest of the module: config_int.h (the types and helpers its files
 * share, and the setters' ownership rule), config_node.c (messages, reading
 * nodes), config_set.c (the setters), config_redis.c (the redis section's
 * pass 3), config_replicas.c (min_replicas), config_value.c (pure value
 * parsers), config_file.c (the file, its libyaml document, the shared heap
 * config); route patterns live in route.c.
 */
#include "config_int.h"
#include "route.h"
#include "webhook.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

struct config_section {
    const char *name;                      /* in messages: "in NAME" */
    const struct config_key *tables[2];    /* a route takes path + policy keys */
    unsigned exclude;                      /* key flags not allowed here */
};

#define CFG(field) offsetof(struct config, field)
#define POL(field) offsetof(struct route_policy, field)

/* Values of the enum-valued policy keys; config_set_enum stores them as int. */
static const struct config_enum config_fingerprint_names[] = {
    { "request", FINGERPRINT_REQUEST }, { "none", FINGERPRINT_NONE }, { NULL, 0 },
};
static const struct config_enum config_in_flight_names[] = {
    { "wait", IN_FLIGHT_WAIT }, { "reject", IN_FLIGHT_REJECT }, { NULL, 0 },
};
static const struct config_enum config_ambiguous_names[] = {
    { "hold", AMBIGUOUS_HOLD }, { "release", AMBIGUOUS_RELEASE }, { NULL, 0 },
};
static const struct config_enum config_store_error_names[] = {
    { "reject", STORE_ERROR_REJECT }, { "pass", STORE_ERROR_PASS }, { NULL, 0 },
};
static const struct config_enum config_verify_names[] = {
    { "standard-webhooks", VERIFY_STANDARD_WEBHOOKS }, { "github", VERIFY_GITHUB },
    { "stripe", VERIFY_STRIPE }, { "none", VERIFY_NONE }, { NULL, 0 },
};
static const struct config_enum config_mismatch_names[] = {
    { "409", 409 }, { "422", 422 }, { NULL, 0 },
};
static const struct config_enum config_error_format_names[] = {
    { "problem", ERROR_FORMAT_PROBLEM }, { "stripe", ERROR_FORMAT_STRIPE }, { NULL, 0 },
};
static const struct config_enum config_access_log_names[] = {
    { "all", ACCESS_LOG_ALL }, { "errors", ACCESS_LOG_ERRORS }, { "off", ACCESS_LOG_OFF },
    { NULL, 0 },
};

/* The schema (README "Configuration"). Each table ends with { NULL }. */

static const struct config_key config_upstream_keys[] = {
    { "url", CONFIG_SCALAR, config_set_upstream_url, 0, 0, NULL, NULL, NULL },
    { "connect_timeout", CONFIG_SCALAR, config_set_duration, CFG(upstream_connect_timeout_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { "timeout", CONFIG_SCALAR, config_set_duration, CFG(upstream_timeout_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

static const struct config_section config_redis_tls_section;
static const struct config_section config_redis_sentinel_section;
static const struct config_section config_redis_cluster_section;

static const struct config_key config_redis_keys[] = {
    { "url", CONFIG_SCALAR, config_set_redis_url, 0, 0, NULL, NULL, NULL },
    { "sentinel", CONFIG_SECTION, NULL, 0, 0, &config_redis_sentinel_section, NULL, NULL },
    { "cluster", CONFIG_SECTION, NULL, 0, 0, &config_redis_cluster_section, NULL, NULL },
    { "username", CONFIG_SCALAR, config_set_string, CFG(redis_username), CONFIG_UNSET_EMPTY, NULL, NULL, NULL },
    { "password", CONFIG_SCALAR, config_set_string, CFG(redis_password), CONFIG_UNSET_EMPTY, NULL, NULL, NULL },
    { "tls", CONFIG_SECTION, NULL, 0, 0, &config_redis_tls_section, NULL, NULL },
    { "key_prefix", CONFIG_SCALAR, config_set_key_prefix, CFG(key_prefix), 0, NULL, NULL, NULL },
    { "min_replicas", CONFIG_SCALAR, config_set_min_replicas, CFG(redis_min_replicas), 0, NULL, NULL, NULL },
    { "replica_timeout", CONFIG_SCALAR, config_set_duration, CFG(redis_replica_timeout_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { "timeout", CONFIG_SCALAR, config_set_duration, CFG(redis_timeout_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

/* redis.tls: used with a rediss:// URL only (config_finish_redis). */
static const struct config_key config_redis_tls_keys[] = {
    { "ca_file", CONFIG_SCALAR, config_set_string, CFG(redis_tls_ca_file), CONFIG_NONEMPTY, NULL, NULL, NULL },
    { "cert_file", CONFIG_SCALAR, config_set_string, CFG(redis_tls_cert_file), CONFIG_NONEMPTY, NULL, NULL, NULL },
    { "key_file", CONFIG_SCALAR, config_set_string, CFG(redis_tls_key_file), CONFIG_NONEMPTY, NULL, NULL, NULL },
    { "server_name", CONFIG_SCALAR, config_set_string, CFG(redis_tls_server_name), CONFIG_NONEMPTY, NULL, NULL, NULL },
    { "verify", CONFIG_SCALAR, config_set_bool, CFG(redis_tls_verify), 0, NULL, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

/* redis.sentinel: instead of redis.url (config_finish); its credentials are the sentinels'. */
static const struct config_key config_redis_sentinel_keys[] = {
    { "master", CONFIG_SCALAR, config_set_sentinel_master, CFG(redis_sentinel_master), 0, NULL, NULL, NULL },
    { "addresses", CONFIG_LIST, config_set_sentinel_address, 0, 0, NULL, NULL, config_begin_sentinel_addresses },
    { "username", CONFIG_SCALAR, config_set_string, CFG(redis_sentinel_username), CONFIG_UNSET_EMPTY, NULL, NULL, NULL },
    { "password", CONFIG_SCALAR, config_set_string, CFG(redis_sentinel_password), CONFIG_UNSET_EMPTY, NULL, NULL, NULL },
    { "tls", CONFIG_SCALAR, config_set_bool, CFG(redis_tls), 0, NULL, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

/* redis.cluster: instead of redis.url (config_finish); the data nodes' credentials. */
static const struct config_key config_redis_cluster_keys[] = {
    { "addresses", CONFIG_LIST, config_set_cluster_address, 0, 0, NULL, NULL, config_begin_cluster_addresses },
    { "tls", CONFIG_SCALAR, config_set_bool, CFG(redis_tls), 0, NULL, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

static const struct config_key config_limits_keys[] = {
    { "max_request_body", CONFIG_SCALAR, config_set_size, CFG(max_request_body), 0, NULL, NULL, NULL },
    { "max_stored_response", CONFIG_SCALAR, config_set_size, CFG(max_stored_response), 0, NULL, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

static const struct config_key config_errors_keys[] = {
    { "format", CONFIG_SCALAR, config_set_enum, CFG(error_format), 0, NULL, config_error_format_names, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

static const struct config_key config_log_keys[] = {
    { "access", CONFIG_SCALAR, config_set_enum, CFG(access_log), 0, NULL, config_access_log_names, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

/* `defaults:` takes these without the route-only (webhook) ones; a route takes all. */
static const struct config_key config_policy_keys[] = {
    { "key_header", CONFIG_SCALAR, config_set_key_header, 0, 0, NULL, NULL, NULL },
    { "methods", CONFIG_LIST, config_set_method, 0, 0, NULL, NULL, config_begin_methods },
    { "require_key", CONFIG_SCALAR, config_set_bool, POL(require_key), 0, NULL, NULL, NULL },
    { "key_max_length", CONFIG_SCALAR, config_set_key_max_length, 0, 0, NULL, NULL, NULL },
    { "fingerprint", CONFIG_SCALAR, config_set_enum, POL(fingerprint), 0, NULL, config_fingerprint_names, NULL },
    { "scope_headers", CONFIG_LIST, config_set_scope_header, 0, 0, NULL, NULL, config_begin_scope_headers },
    { "lease", CONFIG_SCALAR, config_set_duration, POL(lease_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { "retention", CONFIG_SCALAR, config_set_duration, POL(retention_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { "in_flight", CONFIG_SCALAR, config_set_enum, POL(in_flight), 0, NULL, config_in_flight_names, NULL },
    { "wait_timeout", CONFIG_SCALAR, config_set_duration, POL(wait_timeout_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { "mismatch_status", CONFIG_SCALAR, config_set_enum, POL(mismatch_status), 0, NULL, config_mismatch_names, NULL },
    { "release_statuses", CONFIG_LIST, config_set_release_status, 0, 0, NULL, NULL, config_begin_release_statuses },
    { "on_ambiguous", CONFIG_SCALAR, config_set_enum, POL(on_ambiguous), 0, NULL, config_ambiguous_names, NULL },
    { "on_store_error", CONFIG_SCALAR, config_set_enum, POL(on_store_error), 0, NULL, config_store_error_names, NULL },
    { "key_from", CONFIG_SCALAR, config_set_key_from, 0, CONFIG_ROUTE_ONLY, NULL, NULL, NULL },
    { "verify", CONFIG_SCALAR, config_set_enum, POL(verify), CONFIG_ROUTE_ONLY, NULL, config_verify_names, NULL },
    { "secret", CONFIG_SCALAR_OR_LIST, config_set_secret, 0, CONFIG_ROUTE_ONLY, NULL, NULL, config_begin_secrets },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

#define DLV(f) offsetof(struct delivery_policy, f)

static const struct config_enum config_delivery_mode_names[] = {
    { "direct", DELIVERY_DIRECT }, { "queued", DELIVERY_QUEUED }, { NULL, 0 },
};

/* A webhook route's delivery.backoff (README "Webhook inbox"). */
static const struct config_key config_delivery_backoff_keys[] = {
    { "initial", CONFIG_SCALAR, config_set_duration, DLV(backoff_initial_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { "max", CONFIG_SCALAR, config_set_duration, DLV(backoff_max_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

static const struct config_section config_delivery_backoff_section = {
    "delivery.backoff", { config_delivery_backoff_keys, NULL }, 0 };

/* A webhook route's delivery (README "Webhook inbox"); obj is its struct delivery_policy. */
static const struct config_key config_delivery_keys[] = {
    { "mode", CONFIG_SCALAR, config_set_enum, DLV(mode), 0, NULL, config_delivery_mode_names, NULL },
    { "max_attempts", CONFIG_SCALAR, config_set_delivery_count, DLV(max_attempts), 0, NULL, NULL, NULL },
    { "max_age", CONFIG_SCALAR, config_set_duration, DLV(max_age_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { "backoff", CONFIG_SECTION, NULL, 0, 0, &config_delivery_backoff_section, NULL, NULL },
    { "visibility_timeout", CONFIG_SCALAR, config_set_duration, DLV(visibility_timeout_ms), CONFIG_POSITIVE, NULL, NULL, NULL },
    { "concurrency", CONFIG_SCALAR, config_set_delivery_count, DLV(concurrency), 0, NULL, NULL, NULL },
    { "ack_status", CONFIG_SCALAR, config_set_ack_status, DLV(ack_status), 0, NULL, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

static const struct config_section config_delivery_section = {
    "delivery", { config_delivery_keys, NULL }, 0 };

/* A route is `path` plus any key of config_policy_keys. */
static const struct config_key config_route_keys[] = {
    { "path", CONFIG_SCALAR, config_set_route_path, 0, 0, NULL, NULL, NULL },
    { "delivery", CONFIG_SECTION, NULL, 0, 0, &config_delivery_section, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

_Static_assert(CONFIG_ARRAY_SIZE(config_policy_keys) - 1 <= 32, "set masks are 32 bits");

static const struct config_section config_upstream_section = {
    "upstream", { config_upstream_keys, NULL }, 0 };
static const struct config_section config_redis_section = {
    "redis", { config_redis_keys, NULL }, 0 };
static const struct config_section config_redis_tls_section = {
    "redis.tls", { config_redis_tls_keys, NULL }, 0 };
static const struct config_section config_redis_sentinel_section = {
    "redis.sentinel", { config_redis_sentinel_keys, NULL }, 0 };
static const struct config_section config_redis_cluster_section = {
    "redis.cluster", { config_redis_cluster_keys, NULL }, 0 };
static const struct config_section config_limits_section = {
    "limits", { config_limits_keys, NULL }, 0 };
static const struct config_section config_errors_section = {
    "errors", { config_errors_keys, NULL }, 0 };
static const struct config_section config_log_section = {
    "log", { config_log_keys, NULL }, 0 };
static const struct config_section config_defaults_section = {
    "defaults", { config_policy_keys, NULL }, CONFIG_ROUTE_ONLY };
static const struct config_section config_route_section = {
    "a route", { config_route_keys, config_policy_keys }, 0 };

static const struct config_key config_root_keys[] = {
    { "listen", CONFIG_SCALAR, config_set_endpoint, CFG(listen), 0, NULL, NULL, NULL },
    { "admin_listen", CONFIG_SCALAR, config_set_endpoint, CFG(admin_listen), CONFIG_EMPTY_OFF, NULL, NULL, NULL },
    { "workers", CONFIG_SCALAR, config_set_workers, CFG(workers), 0, NULL, NULL, NULL },
    { "upstream", CONFIG_SECTION, NULL, 0, 0, &config_upstream_section, NULL, NULL },
    { "redis", CONFIG_SECTION, NULL, 0, 0, &config_redis_section, NULL, NULL },
    { "limits", CONFIG_SECTION, NULL, 0, 0, &config_limits_section, NULL, NULL },
    { "errors", CONFIG_SECTION, NULL, 0, 0, &config_errors_section, NULL, NULL },
    { "log", CONFIG_SECTION, NULL, 0, 0, &config_log_section, NULL, NULL },
    { "defaults", CONFIG_SECTION, NULL, 0, 0, &config_defaults_section, NULL, NULL },
    { "routes", CONFIG_ROUTES, NULL, 0, 0, &config_route_section, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL, NULL },
};

static const struct config_section config_root_section = {
    "the top level", { config_root_keys, NULL }, 0 };

/*
 * Searched when a key is unknown, to say where it belongs instead (not
 * redis.tls: its verify would send a webhook's verify there).
 */
static const struct config_section *const config_sections[] = {
    &config_root_section, &config_upstream_section, &config_redis_section,
    &config_redis_sentinel_section, &config_redis_cluster_section, &config_limits_section, &config_defaults_section, &config_route_section,
    &config_errors_section, &config_log_section, &config_delivery_section,
    &config_delivery_backoff_section,
};

/*
 * README "Configuration" with its defaults. Pass 3 applies it, with the same
 * setters, to every key the file left unset. No password: a Redis without
 * AUTH is the default.
 */
static const char config_builtin_yaml[] =
    "listen: 0.0.0.0:8080\n"
    "admin_listen: 127.0.0.1:9901\n"
    "workers: 1\n"
    "upstream:\n"
    "  url: http://127.0.0.1:3000\n"
    "  connect_timeout: 2s\n"
    "  timeout: 30s\n"
    "redis:\n"
    "  url: redis://127.0.0.1:6379/0\n"
    "  key_prefix: idem\n"
    "  min_replicas: 0\n"
    "  replica_timeout: 200ms\n"
    "  timeout: 500ms\n"
    "  tls:\n"
    "    verify: true\n"
    "limits:\n"
    "  max_request_body: 1MiB\n"
    "  max_stored_response: 1MiB\n"
    "errors:\n"
    "  format: problem\n"
    "log:\n"
    "  access: all\n"
    "defaults:\n"
    "  key_header: Idempotency-Key\n"
    "  methods: [POST, PATCH]\n"
    "  require_key: false\n"
    "  key_max_length: 255\n"
    "  fingerprint: request\n"
    "  scope_headers: [Authorization]\n"
    "  lease: 60s\n"
    "  retention: 24h\n"
    "  in_flight: wait\n"
    "  wait_timeout: 10s\n"
    "  mismatch_status: 409\n"
    "  release_statuses: [408, 425, 429, 503]\n"
    "  on_ambiguous: hold\n"
    "  on_store_error: reject\n";

/* ---- pass 1: structure ------------------------------------------------- */

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

    for (size_t i = 0; i < CONFIG_ARRAY_SIZE(config_sections); i++) {
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

static int config_check_structure(struct config_loader *ld, struct config_doc *doc)
{
    ld->cur = doc;
    if (doc->root == NULL)
        return 0;
    return config_check_mapping(ld, doc->root, &config_root_section);
}

/* ---- pass 2: apply a document ------------------------------------------ */

static int config_key_index(const struct config_key *table, const char *name)
{
    for (int i = 0; table[i].name != NULL; i++) {
        if (strcmp(table[i].name, name) == 0)
            return i;
    }
    return -1;
}

static uint32_t config_policy_bit(const char *name)
{
    int i = config_key_index(config_policy_keys, name);

    return i < 0 ? 0 : 1u << i;
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
static int config_apply_mapping(struct config_loader *ld, struct config_doc *doc, yaml_node_t *map,
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
static int config_apply_doc(struct config_loader *ld, struct config_doc *doc)
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
        config_apply_mapping(ld, doc, config_lookup(doc, root, "limits"), config_limits_keys,
                             cfg, &ld->set_limits) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "errors"), config_errors_keys,
                             cfg, &ld->set_errors) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "log"), config_log_keys,
                             cfg, &ld->set_log) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "defaults"), config_policy_keys,
                             &cfg->defaults, &ld->set_defaults) < 0)
        return -1;
    return 0;
}

/* README "Webhook inbox": what a route's delivery is when it says nothing. */
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
    };
}

/*
 * delivery: only on a webhook route (queued mode dedupes by the event id
 * before it answers the provider), and a backoff that can grow.
 */
/* Shortest visibility_timeout, ms: as the lease, an entry must outlive one renewal interval. */
#define CONFIG_MIN_VISIBILITY_MS 1000

/*
 * delivery: only on webhook routes; backoff.initial <= backoff.max;
 * visibility_timeout >= 1s and >= 1.5 x redis.timeout: a live instance
 * renews the entries it delivers every visibility_timeout/3 (inbox_deliver.c)
 * and a renewal may take redis.timeout to land, so it must land before the
 * entry goes idle, or another instance takes a live delivery over and the
 * receiver gets every delivery twice. Returns 0, or -1 with the error set.
 */
static int config_check_delivery(struct config_loader *ld, const struct route_policy *policy,
                                 yaml_node_t *map)
{
    yaml_node_t *delivery = config_lookup(&ld->user, map, "delivery");
    const struct delivery_policy *d = &policy->delivery;
    uint64_t redis_timeout_ms = ld->cfg->redis_timeout_ms;
    char vt[32], timeout[32];

    if (delivery == NULL)
        return 0;
    if (!policy->webhook)
        return config_error(ld, delivery, "delivery is for webhook routes (key_from and "
                            "verify): queued delivery dedupes by the provider's event id");
    if (d->backoff_initial_ms > d->backoff_max_ms)
        return config_error(ld, delivery, "delivery.backoff.initial must not be longer than "
                            "delivery.backoff.max");
    if (d->visibility_timeout_ms < CONFIG_MIN_VISIBILITY_MS ||
        d->visibility_timeout_ms * 2 < redis_timeout_ms * 3) {
        yaml_node_t *where = config_lookup(&ld->user, delivery, "visibility_timeout");

        config_format_duration(d->visibility_timeout_ms, vt, sizeof(vt));
        config_format_duration(redis_timeout_ms, timeout, sizeof(timeout));
        return config_error(ld, where != NULL ? where : delivery,
                            "delivery.visibility_timeout (%s) must be at least 1s and at least "
                            "1.5 x redis.timeout (%s): an entry in delivery is renewed every "
                            "visibility_timeout/3 and a renewal may take redis.timeout to land",
                            vt, timeout);
    }
    return 0;
}

/* Each route's own keys; what it leaves unset is inherited in pass 3. */
static int config_apply_routes(struct config_loader *ld)
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
        uint32_t delivery_set = 0, backoff_set = 0;

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
                                 &backoff_set) < 0)
            return -1;
    }
    return 0;
}

/* ---- pass 3: defaults and cross-field checks --------------------------- */

/* retention >= lease: a finished record must outlive the claim it replaces. */
/* Shortest lease: a claim must outlive one renewal interval plus a slow renewal. */
#define CONFIG_MIN_LEASE_MS 1000

/*
 * retention >= lease: a finished record must outlive the claim it replaces.
 * lease >= 1s and lease >= 1.5 x redis.timeout: a renewal is sent every
 * lease/3 and may take redis.timeout to land, so it must land before the
 * lease ends, or a live request reads as dead to other instances.
 */
static int config_check_policy(struct config_loader *ld, const struct route_policy *policy,
                               yaml_node_t *map)
{
    char lease[32], retention[32], timeout[32];
    uint64_t redis_timeout_ms = ld->cfg->redis_timeout_ms;
    yaml_node_t *where;

    ld->cur = &ld->user;
    config_format_duration(policy->lease_ms, lease, sizeof(lease));
    if (policy->lease_ms < CONFIG_MIN_LEASE_MS || policy->lease_ms * 2 < redis_timeout_ms * 3) {
        where = config_lookup(&ld->user, map, "lease");
        config_format_duration(redis_timeout_ms, timeout, sizeof(timeout));
        return config_error(ld, where != NULL ? where : map,
                            "lease (%s) must be at least 1s and at least 1.5 x redis.timeout "
                            "(%s): the claim is renewed every lease/3 and a renewal may take "
                            "redis.timeout to land", lease, timeout);
    }
    if (policy->retention_ms >= policy->lease_ms)
        return 0;
    where = config_lookup(&ld->user, map, "retention");
    if (where == NULL)
        where = config_lookup(&ld->user, map, "lease");
    if (where == NULL)
        where = map;
    config_format_duration(policy->retention_ms, retention, sizeof(retention));
    return config_error(ld, where, "retention (%s) must be at least lease (%s)", retention, lease);
}

/*
 * Webhook rules, then inheritance: `defaults:` first, the built-in
 * defaults for what neither sets. Then the checks of the whole policy.
 */
static int config_finish_route(struct config_loader *ld, size_t i)
{
    struct route_policy *policy = &ld->cfg->routes[i].policy;
    yaml_node_t *map = ld->route_nodes[i];
    uint32_t *set = &ld->set_routes[i];
    yaml_node_t *verify, *secret;

    ld->cur = &ld->user;
    if (*set & config_policy_bit("key_from")) {
        if (policy->key_from == KEY_FROM_HEADER) {
            if (*set & config_policy_bit("key_header"))
                return config_error(ld, config_lookup(&ld->user, map, "key_header"),
                                    "key_header and key_from: header:... both name the key "
                                    "header; keep one");
            *set |= config_policy_bit("key_header");
        }
        /* unsigned, anyone who reaches the route could pre-claim a provider's event id */
        if (!(*set & config_policy_bit("verify")))
            return config_error(ld, config_lookup(&ld->user, map, "key_from"),
                                "key_from needs verify (stripe, github or standard-webhooks): "
                                "without a signature check anyone who reaches this route can "
                                "pre-claim an event id; write verify: none to accept that");
        /* providers change the body between deliveries (README "Webhooks") */
        if (!(*set & config_policy_bit("fingerprint"))) {
            policy->fingerprint = FINGERPRINT_NONE;
            *set |= config_policy_bit("fingerprint");
        }
    }
    if (config_apply_mapping(ld, &ld->user, config_lookup(&ld->user, ld->user.root, "defaults"),
                             config_policy_keys, policy, set) < 0 ||
        config_apply_mapping(ld, &ld->builtin,
                             config_lookup(&ld->builtin, ld->builtin.root, "defaults"),
                             config_policy_keys, policy, set) < 0)
        return -1;

    ld->cur = &ld->user;
    verify = config_lookup(&ld->user, map, "verify");
    secret = config_lookup(&ld->user, map, "secret");
    if (policy->verify != VERIFY_NONE && policy->n_secrets == 0)
        return config_error(ld, verify, "verify needs a secret (one string, or a list of two "
                            "during a rotation)");
    if (policy->verify == VERIFY_NONE && secret != NULL)
        return config_error(ld, secret, "secret without verify: set verify to "
                            "standard-webhooks, github or stripe");
    free(policy->record_source);
    policy->record_source = config_record_source(policy, ld->cfg->routes[i].match,
                                                  ld->cfg->routes[i].prefix);
    if (policy->record_source == NULL)
        return config_oom(ld, map);
    for (size_t i = 0; i < policy->n_secrets; i++) {
        const char *why = NULL;
        /* a mistyped secret fails here, not as a 401 on every delivery */
        if (webhook_secret_check(policy->verify, policy->secrets[i], &why) != 0)
            return config_error(ld, secret, "bad secret: %s", why != NULL ? why : "unusable");
    }
    if (config_check_delivery(ld, policy, map) < 0)
        return -1;
    return config_check_policy(ld, policy, map);
}

static int config_finish(struct config_loader *ld)
{
    struct config *cfg = ld->cfg;
    yaml_node_t *redis = config_lookup(&ld->user, ld->user.root, "redis");

    /* one place says where Redis is; the built-in url is no choice of the user's */
    if (config_lookup(&ld->user, redis, "sentinel") != NULL &&
        config_lookup(&ld->user, redis, "cluster") != NULL)
        return config_error(ld, config_lookup(&ld->user, redis, "cluster"), "redis.sentinel "
                            "and redis.cluster both say where Redis is; keep one");
    for (int i = 0; i < 2; i++) {
        const char *name = i == 0 ? "sentinel" : "cluster";
        uint32_t url = 1u << config_key_index(config_redis_keys, "url");

        if (config_lookup(&ld->user, redis, name) == NULL)
            continue;
        if (ld->set_redis & url)
            return config_error(ld, config_lookup(&ld->user, redis, "url"), "redis.url and "
                                "redis.%s both say where Redis is; keep one", name);
        ld->set_redis |= url;
    }
    if (config_apply_doc(ld, &ld->builtin) < 0)
        return -1;
    ld->cur = &ld->user;

    if (config_finish_redis(ld) < 0)
        return -1;
    if (config_check_replicas(ld, config_lookup(&ld->user, ld->user.root, "redis")) < 0)
        return -1;

    if (config_endpoints_clash(&cfg->admin_listen, &cfg->listen)) {
        yaml_node_t *where = config_lookup(&ld->user, ld->user.root, "admin_listen");

        if (where == NULL)
            where = config_lookup(&ld->user, ld->user.root, "listen");
        return config_error(ld, where, "admin_listen and listen use the same port %u; give "
                            "admin_listen another port, or \"\" to disable it",
                            (unsigned)cfg->listen.port);
    }

    if (config_check_policy(ld, &cfg->defaults,
                            config_lookup(&ld->user, ld->user.root, "defaults")) < 0)
        return -1;
    for (size_t i = 0; i < cfg->n_routes; i++) {
        if (config_finish_route(ld, i) < 0)
            return -1;
    }
    return 0;
}

/* ---- loading ----------------------------------------------------------- */

static void config_loader_deinit(struct config_loader *ld)
{
    if (ld->user.loaded)
        yaml_document_delete(&ld->user.yaml);
    if (ld->builtin.loaded)
        yaml_document_delete(&ld->builtin.yaml);
    free(ld->set_routes);
    free(ld->route_nodes);
    free(ld->redis_url_username);
    free(ld->redis_url_password);
}

int config_load_string(struct config *cfg, const char *yaml, size_t len,
                       const char *name, char *err, size_t errlen)
{
    struct config_loader ld;

    memset(cfg, 0, sizeof(*cfg));
    memset(&ld, 0, sizeof(ld));
    ld.cfg = cfg;
    ld.err = err;
    ld.errlen = errlen;
    ld.user.name = name;
    ld.builtin.name = "built-in defaults";
    ld.cur = &ld.user;
    if (err != NULL && errlen > 0)
        err[0] = '\0';

    if (config_doc_parse(&ld, &ld.builtin, config_builtin_yaml, strlen(config_builtin_yaml)) < 0 ||
        config_doc_parse(&ld, &ld.user, yaml, len) < 0)
        goto failed;
    /* pass 1: structure */
    if (config_check_structure(&ld, &ld.builtin) < 0 || config_check_structure(&ld, &ld.user) < 0)
        goto failed;
    /* pass 2: the file's own keys */
    if (config_apply_doc(&ld, &ld.user) < 0 || config_apply_routes(&ld) < 0)
        goto failed;
    /* pass 3: inheritance, built-in defaults, cross-field checks */
    if (config_finish(&ld) < 0)
        goto failed;
    config_loader_deinit(&ld);
    return 0;
failed:
    config_loader_deinit(&ld);
    config_deinit(cfg);
    return -1;
}

static void config_policy_deinit(struct route_policy *policy)
{
    free(policy->key_header);
    for (size_t i = 0; i < policy->n_scope_headers; i++)
        free(policy->scope_headers[i]);
    free(policy->key_json_pointer);
    free(policy->record_source);
    for (size_t i = 0; i < policy->n_secrets; i++)
        free(policy->secrets[i]);
}

void config_deinit(struct config *cfg)
{
    free(cfg->listen.host);
    free(cfg->admin_listen.host);
    free(cfg->upstream_url);
    free(cfg->upstream_base);
    free(cfg->upstream_unix_path);
    free(cfg->redis_url);
    free(cfg->redis_host);
    free(cfg->redis_unix_path);
    free(cfg->redis_username);
    free(cfg->redis_password);
    free(cfg->redis_tls_ca_file);
    free(cfg->redis_tls_cert_file);
    free(cfg->redis_tls_key_file);
    free(cfg->redis_tls_server_name);
    free(cfg->redis_sentinel_master);
    for (size_t i = 0; i < cfg->n_redis_sentinels; i++)
        free(cfg->redis_sentinels[i].host);
    free(cfg->redis_sentinel_username);
    free(cfg->redis_sentinel_password);
    for (size_t i = 0; i < cfg->n_redis_cluster; i++)
        free(cfg->redis_cluster[i].host);
    free(cfg->key_prefix);
    config_policy_deinit(&cfg->defaults);
    for (size_t i = 0; i < cfg->n_routes; i++) {
        route_pattern_free(&cfg->routes[i]);
        config_policy_deinit(&cfg->routes[i].policy);
    }
    free(cfg->routes);
    memset(cfg, 0, sizeof(*cfg));
}

/* ---- queries: route.c does the work ------------------------------------ */

const struct route *config_match_route(const struct config *cfg, const char *path)
{
    return route_match(cfg->routes, cfg->n_routes, path);
}

size_t config_route_warnings(const struct config *cfg, const char *file, char *out,
                             size_t outsize)
{
    return route_warnings(cfg->routes, cfg->n_routes, file, out, outsize);
}

static bool config_same_delivery(const struct delivery_policy *a, const struct delivery_policy *b)
{
    return a->mode == b->mode && a->max_attempts == b->max_attempts &&
           a->max_age_ms == b->max_age_ms && a->backoff_initial_ms == b->backoff_initial_ms &&
           a->backoff_max_ms == b->backoff_max_ms &&
           a->visibility_timeout_ms == b->visibility_timeout_ms &&
           a->concurrency == b->concurrency && a->ack_status == b->ack_status;
}

/*
 * Every queued route of a is a queued route of b, by its path as written (a
 * prefix route's with its '*'), with the same delivery.
 */
static bool config_same_queued(const struct config *a, const struct config *b)
{
    for (size_t i = 0; i < a->n_routes; i++) {
        bool found = false;

        if (a->routes[i].policy.delivery.mode != DELIVERY_QUEUED)
            continue;
        for (size_t j = 0; j < b->n_routes && !found; j++)
            found = b->routes[j].policy.delivery.mode == DELIVERY_QUEUED &&
                    a->routes[i].prefix == b->routes[j].prefix &&
                    strcmp(a->routes[i].path, b->routes[j].path) == 0 &&
                    config_same_delivery(&a->routes[i].policy.delivery,
                                         &b->routes[j].policy.delivery);
        if (!found)
            return false;
    }
    return true;
}

bool config_same_inboxes(const struct config *a, const struct config *b)
{
    return config_same_queued(a, b) && config_same_queued(b, a);
}

const char *config_reload_refusal(const struct config *running, const struct config *next)
{
    /* a new prefix would hide every record: retries would execute again */
    if (!config_same_string(running->key_prefix, next->key_prefix))
        return "redis.key_prefix";
    return route_reload_refusal(running->routes, running->n_routes, next->routes, next->n_routes);
}
