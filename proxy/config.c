/*
 * config.c - load the YAML configuration into plain structs (CONTRACT section 3).
 *
 * libyaml builds the document (with line marks); nothing here reads YAML
 * syntax by hand. Three passes, as twemproxy does:
 *
 *   1. structure: every mapping is checked against the key tables below:
 *      unknown keys, duplicate keys, and the kind of each value (a single
 *      value, a list, a section);
 *   2. typed setters: each key present in the file runs its setter, which
 *      expands ${VAR}, converts the text into the struct field and marks
 *      the key as set;
 *   3. defaults and cross-field checks: every key still unset takes its
 *      value from `defaults:` (routes only) and then from the built-in
 *      defaults document, which is the contract's section 3 written as
 *      YAML and applied by the same setters; then the checks that involve
 *      several keys (retention >= lease, verify needs a secret, ...).
 *
 * The key tables are the schema. tests/unit/check_config_keys.py reads
 * them with a regex, so keep one `{ "name", ...` entry per line in the
 * `static const struct config_key config_*_keys[]` arrays.
 */
#include "config.h"
#include "config_value.h"
#include "route.h"
#include "webhook.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#define CONFIG_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

struct config_loader;
struct config_key;
struct config_section;

/* Converts node into the field of obj that key names; -1 after config_error. */
typedef int config_setter(struct config_loader *ld, const struct config_key *key,
                          yaml_node_t *node, void *obj);

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
};

struct config_section {
    const char *name;                      /* in messages: "in NAME" */
    const struct config_key *tables[2];    /* a route takes path + policy keys */
    unsigned exclude;                      /* key flags not allowed here */
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
    uint32_t set_root, set_upstream, set_redis, set_limits, set_defaults;
    uint32_t *set_routes;                  /* one mask per route */
    yaml_node_t **route_nodes;             /* each route's mapping, for lines */
    char *redis_url_password;              /* from redis://:PASSWORD@ */
};

static config_setter config_set_endpoint, config_set_upstream_url, config_set_redis_url,
    config_set_duration, config_set_size, config_set_string, config_set_bool,
    config_set_route_path, config_set_key_header, config_set_methods,
    config_set_key_max_length, config_set_enum, config_set_scope_headers,
    config_set_release_statuses, config_set_key_from, config_set_secret, config_set_workers,
    config_set_key_prefix;

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

/* The schema (CONTRACT section 3). Each table ends with { NULL }. */

static const struct config_key config_upstream_keys[] = {
    { "url", CONFIG_SCALAR, config_set_upstream_url, 0, 0, NULL, NULL },
    { "connect_timeout", CONFIG_SCALAR, config_set_duration, CFG(upstream_connect_timeout_ms), CONFIG_POSITIVE, NULL, NULL },
    { "timeout", CONFIG_SCALAR, config_set_duration, CFG(upstream_timeout_ms), CONFIG_POSITIVE, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL },
};

static const struct config_key config_redis_keys[] = {
    { "url", CONFIG_SCALAR, config_set_redis_url, 0, 0, NULL, NULL },
    { "password", CONFIG_SCALAR, config_set_string, CFG(redis_password), CONFIG_UNSET_EMPTY, NULL, NULL },
    { "key_prefix", CONFIG_SCALAR, config_set_key_prefix, CFG(key_prefix), 0, NULL, NULL },
    { "timeout", CONFIG_SCALAR, config_set_duration, CFG(redis_timeout_ms), CONFIG_POSITIVE, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL },
};

static const struct config_key config_limits_keys[] = {
    { "max_request_body", CONFIG_SCALAR, config_set_size, CFG(max_request_body), 0, NULL, NULL },
    { "max_stored_response", CONFIG_SCALAR, config_set_size, CFG(max_stored_response), 0, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL },
};

/* `defaults:` takes these without the route-only (webhook) ones; a route takes all. */
static const struct config_key config_policy_keys[] = {
    { "key_header", CONFIG_SCALAR, config_set_key_header, 0, 0, NULL, NULL },
    { "methods", CONFIG_LIST, config_set_methods, 0, 0, NULL, NULL },
    { "require_key", CONFIG_SCALAR, config_set_bool, POL(require_key), 0, NULL, NULL },
    { "key_max_length", CONFIG_SCALAR, config_set_key_max_length, 0, 0, NULL, NULL },
    { "fingerprint", CONFIG_SCALAR, config_set_enum, POL(fingerprint), 0, NULL, config_fingerprint_names },
    { "scope_headers", CONFIG_LIST, config_set_scope_headers, 0, 0, NULL, NULL },
    { "lease", CONFIG_SCALAR, config_set_duration, POL(lease_ms), CONFIG_POSITIVE, NULL, NULL },
    { "retention", CONFIG_SCALAR, config_set_duration, POL(retention_ms), CONFIG_POSITIVE, NULL, NULL },
    { "in_flight", CONFIG_SCALAR, config_set_enum, POL(in_flight), 0, NULL, config_in_flight_names },
    { "wait_timeout", CONFIG_SCALAR, config_set_duration, POL(wait_timeout_ms), CONFIG_POSITIVE, NULL, NULL },
    { "mismatch_status", CONFIG_SCALAR, config_set_enum, POL(mismatch_status), 0, NULL, config_mismatch_names },
    { "release_statuses", CONFIG_LIST, config_set_release_statuses, 0, 0, NULL, NULL },
    { "on_ambiguous", CONFIG_SCALAR, config_set_enum, POL(on_ambiguous), 0, NULL, config_ambiguous_names },
    { "on_store_error", CONFIG_SCALAR, config_set_enum, POL(on_store_error), 0, NULL, config_store_error_names },
    { "key_from", CONFIG_SCALAR, config_set_key_from, 0, CONFIG_ROUTE_ONLY, NULL, NULL },
    { "verify", CONFIG_SCALAR, config_set_enum, POL(verify), CONFIG_ROUTE_ONLY, NULL, config_verify_names },
    { "secret", CONFIG_SCALAR_OR_LIST, config_set_secret, 0, CONFIG_ROUTE_ONLY, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL },
};

/* A route is `path` plus any key of config_policy_keys. */
static const struct config_key config_route_keys[] = {
    { "path", CONFIG_SCALAR, config_set_route_path, 0, 0, NULL, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL },
};

_Static_assert(CONFIG_ARRAY_SIZE(config_policy_keys) - 1 <= 32, "set masks are 32 bits");

static const struct config_section config_upstream_section = {
    "upstream", { config_upstream_keys, NULL }, 0 };
static const struct config_section config_redis_section = {
    "redis", { config_redis_keys, NULL }, 0 };
static const struct config_section config_limits_section = {
    "limits", { config_limits_keys, NULL }, 0 };
static const struct config_section config_defaults_section = {
    "defaults", { config_policy_keys, NULL }, CONFIG_ROUTE_ONLY };
static const struct config_section config_route_section = {
    "a route", { config_route_keys, config_policy_keys }, 0 };

static const struct config_key config_root_keys[] = {
    { "listen", CONFIG_SCALAR, config_set_endpoint, CFG(listen), 0, NULL, NULL },
    { "admin_listen", CONFIG_SCALAR, config_set_endpoint, CFG(admin_listen), CONFIG_EMPTY_OFF, NULL, NULL },
    { "workers", CONFIG_SCALAR, config_set_workers, CFG(workers), 0, NULL, NULL },
    { "upstream", CONFIG_SECTION, NULL, 0, 0, &config_upstream_section, NULL },
    { "redis", CONFIG_SECTION, NULL, 0, 0, &config_redis_section, NULL },
    { "limits", CONFIG_SECTION, NULL, 0, 0, &config_limits_section, NULL },
    { "defaults", CONFIG_SECTION, NULL, 0, 0, &config_defaults_section, NULL },
    { "routes", CONFIG_ROUTES, NULL, 0, 0, &config_route_section, NULL },
    { NULL, 0, NULL, 0, 0, NULL, NULL },
};

static const struct config_section config_root_section = {
    "the top level", { config_root_keys, NULL }, 0 };

/* Searched when a key is unknown, to say where it belongs instead. */
static const struct config_section *const config_sections[] = {
    &config_root_section, &config_upstream_section, &config_redis_section,
    &config_limits_section, &config_defaults_section, &config_route_section,
};

/*
 * CONTRACT section 3 with its defaults. Pass 3 applies it, with the same
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
    "  timeout: 500ms\n"
    "limits:\n"
    "  max_request_body: 1MiB\n"
    "  max_stored_response: 1MiB\n"
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

/* ---- messages ---------------------------------------------------------- */

/* Writes "FILE:LINE: message" (LINE 1-based; no LINE without a node). Returns -1. */
static int __attribute__((format(printf, 3, 4)))
config_error(struct config_loader *ld, const yaml_node_t *node, const char *fmt, ...)
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

static int config_oom(struct config_loader *ld, const yaml_node_t *node)
{
    return config_error(ld, node, "out of memory");
}

/* ---- reading nodes ----------------------------------------------------- */

static yaml_node_t *config_node(struct config_doc *doc, int index)
{
    return yaml_document_get_node(&doc->yaml, index);
}

/* YAML's null (`~`, `null`, or nothing after the colon). */
static bool config_is_null(const yaml_node_t *node)
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

/* The value of key name in mapping map; NULL when absent, null, or map is NULL. */
static yaml_node_t *config_lookup(struct config_doc *doc, yaml_node_t *map, const char *name)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
         pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = config_node(doc, pair->key);
        yaml_node_t *value = config_node(doc, pair->value);

        if (key->type == YAML_SCALAR_NODE && strcmp((const char *)key->data.scalar.value, name) == 0)
            return config_is_null(value) ? NULL : value;
    }
    return NULL;
}

/* Items of a list, or of one scalar seen as a list of one; null is []. */
static size_t config_items(const yaml_node_t *node)
{
    if (node->type == YAML_SEQUENCE_NODE)
        return (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    return config_is_null(node) ? 0 : 1;
}

static yaml_node_t *config_item(struct config_loader *ld, yaml_node_t *node, size_t i)
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
static char *config_scalar(struct config_loader *ld, const struct config_key *key,
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

/* The value of a scalar among names; -1 after an error listing them. */
static int config_scalar_enum(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *node, const struct config_enum *names, int *out)
{
    char allowed[256];
    char *text = config_scalar(ld, key, node);

    if (text == NULL)
        return -1;
    if (config_enum_value(names, text, out) == 0) {
        free(text);
        return 0;
    }
    config_enum_list(names, allowed, sizeof(allowed));
    config_error(ld, node, "bad %s '%s': expected one of %s", key->name, text, allowed);
    free(text);
    return -1;
}

/* ---- pass 2: typed setters --------------------------------------------- */

static int config_set_endpoint(struct config_loader *ld, const struct config_key *key,
                               yaml_node_t *node, void *obj)
{
    struct endpoint *ep = (struct endpoint *)((char *)obj + key->offset);
    char *text = config_scalar(ld, key, node);
    const char *why;

    if (text == NULL)
        return -1;
    free(ep->host);
    ep->host = NULL;
    ep->port = 0;
    if (text[0] == '\0' && (key->flags & CONFIG_EMPTY_OFF)) {
        free(text);
        return 0;
    }
    why = config_endpoint_split(text, &ep->host, &ep->port);
    if (why != NULL) {
        config_error(ld, node, "bad %s address '%s': %s%s", key->name, text, why,
                     (key->flags & CONFIG_EMPTY_OFF) ? ", or \"\" to disable it" : "");
        goto failed;
    }
    free(text);
    return 0;
failed:
    free(text);
    return -1;
}

static int config_set_upstream_url(struct config_loader *ld, const struct config_key *key,
                                   yaml_node_t *node, void *obj)
{
    struct config *cfg = obj;
    char *text = config_scalar(ld, key, node);
    char *base, *unix_path;
    const char *why;

    if (text == NULL)
        return -1;
    why = config_upstream_parse(text, &base, &unix_path);
    if (why != NULL) {
        /* the url itself is not repeated: it may carry credentials */
        config_error(ld, node, "bad upstream url: %s", why);
        free(text);
        return -1;
    }
    free(cfg->upstream_url);
    free(cfg->upstream_base);
    free(cfg->upstream_unix_path);
    cfg->upstream_url = text;
    cfg->upstream_base = base;
    cfg->upstream_unix_path = unix_path;
    return 0;
}

static int config_set_redis_url(struct config_loader *ld, const struct config_key *key,
                                yaml_node_t *node, void *obj)
{
    struct config *cfg = obj;
    struct config_redis_target t;
    char *text = config_scalar(ld, key, node);
    const char *why;

    if (text == NULL)
        return -1;
    why = config_redis_parse(text, &t);
    if (why != NULL) {
        /* the URL is not echoed: it may hold the password */
        config_error(ld, node, "bad redis url: %s", why);
        free(text);
        return -1;
    }
    free(cfg->redis_url);
    free(cfg->redis_host);
    free(cfg->redis_unix_path);
    free(ld->redis_url_password);
    cfg->redis_url = text;
    cfg->redis_host = t.host;
    cfg->redis_port = t.port;
    cfg->redis_unix_path = t.unix_path;
    cfg->redis_db = t.db;
    ld->redis_url_password = t.password;
    return 0;
}

static int config_set_duration(struct config_loader *ld, const struct config_key *key,
                               yaml_node_t *node, void *obj)
{
    uint64_t *field = (uint64_t *)((char *)obj + key->offset);
    char *text = config_scalar(ld, key, node);

    if (text == NULL)
        return -1;
    if (config_parse_duration_ms(text, field) < 0) {
        config_error(ld, node, "bad duration '%s' for %s: expected a whole number and a unit "
                     "(ms, s, m, h, d) of at most 3650d, e.g. 250ms or 24h", text, key->name);
        goto failed;
    }
    if (*field == 0 && (key->flags & CONFIG_POSITIVE)) {
        config_error(ld, node, "%s must be longer than 0", key->name);
        goto failed;
    }
    free(text);
    return 0;
failed:
    free(text);
    return -1;
}

static int config_set_size(struct config_loader *ld, const struct config_key *key,
                           yaml_node_t *node, void *obj)
{
    size_t *field = (size_t *)((char *)obj + key->offset);
    char *text = config_scalar(ld, key, node);
    int rc = 0;

    if (text == NULL)
        return -1;
    if (config_parse_size(text, field) < 0)
        rc = config_error(ld, node, "bad size '%s' for %s: expected a whole number and a unit "
                          "(B, KiB, MiB, GiB), e.g. 1MiB", text, key->name);
    free(text);
    return rc;
}

static int config_set_workers(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *node, void *obj)
{
    unsigned *field = (unsigned *)((char *)obj + key->offset);
    char *text = config_scalar(ld, key, node);
    uint64_t n = 0;
    int rc = 0;

    if (text == NULL)
        return -1;
    if (strcmp(text, "auto") == 0)
        *field = 0;
    else if (config_parse_uint(text, CONFIG_MAX_WORKERS, &n) < 0 || n == 0)
        rc = config_error(ld, node, "bad %s '%s': expected a whole number from 1 to %d, or auto "
                          "(one per CPU)", key->name, text, CONFIG_MAX_WORKERS);
    else
        *field = (unsigned)n;
    free(text);
    return rc;
}

static int config_set_string(struct config_loader *ld, const struct config_key *key,
                             yaml_node_t *node, void *obj)
{
    char **field = (char **)((char *)obj + key->offset);
    char *text = config_scalar(ld, key, node);

    if (text == NULL)
        return -1;
    if (text[0] == '\0' && (key->flags & CONFIG_NONEMPTY)) {
        free(text);
        return config_error(ld, node, "%s may not be empty", key->name);
    }
    free(*field);
    *field = text;
    return 0;
}

/*
 * redis.key_prefix: 1..CONFIG_MAX_KEY_PREFIX bytes of printable ASCII
 * without spaces, '{' or '}'. The length bounds the record key so it is
 * never cut (record_key_format); a brace would move the Redis Cluster hash
 * tag away from {RECORD_ID}.
 */
static int config_set_key_prefix(struct config_loader *ld, const struct config_key *key,
                                 yaml_node_t *node, void *obj)
{
    char **field = (char **)((char *)obj + key->offset);
    char *text = config_scalar(ld, key, node);
    size_t len;

    if (text == NULL)
        return -1;
    len = strlen(text);
    if (len == 0 || len > CONFIG_MAX_KEY_PREFIX) {
        free(text);
        return config_error(ld, node, "%s must be 1 to %d bytes long, not %zu", key->name,
                            CONFIG_MAX_KEY_PREFIX, len);
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];

        if (c <= ' ' || c >= 0x7f || c == '{' || c == '}') {
            free(text);
            return config_error(ld, node, "bad %s: printable ASCII without spaces, '{' or '}' "
                                "(braces would break the Redis Cluster hash tag)", key->name);
        }
    }
    free(*field);
    *field = text;
    return 0;
}

static int config_set_bool(struct config_loader *ld, const struct config_key *key,
                           yaml_node_t *node, void *obj)
{
    bool *field = (bool *)((char *)obj + key->offset);
    char *text = config_scalar(ld, key, node);
    /* only YAML's plain true/false: "true" quoted is a string, True a spelling we refuse */
    bool plain = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    int rc = 0;

    if (text == NULL)
        return -1;
    if (plain && strcmp(text, "true") == 0)
        *field = true;
    else if (plain && strcmp(text, "false") == 0)
        *field = false;
    else
        rc = config_error(ld, node, "bad %s %s%s%s: expected true or false (lower case, "
                          "unquoted)", key->name, plain ? "'" : "", text, plain ? "'" : " (quoted)");
    free(text);
    return rc;
}

/* `path`: route.c checks and normalises the pattern; the messages are worded here. */
static int config_set_route_path(struct config_loader *ld, const struct config_key *key,
                                 yaml_node_t *node, void *obj)
{
    char *text = config_scalar(ld, key, node);
    const char *reason = NULL;
    enum route_pattern_status st;
    int rc = -1;

    if (text == NULL)
        return -1;
    st = route_set_pattern(obj, &text, &reason);
    if (st == ROUTE_PATTERN_OK)
        rc = 0;
    else if (st == ROUTE_PATTERN_NOT_ABSOLUTE)
        config_error(ld, node, "bad route path '%s': it must start with '/'", text);
    else if (st == ROUTE_PATTERN_BAD_CHAR)
        config_error(ld, node, "bad route path '%s': a path without query, spaces or control "
                     "characters, with '*' only as the last character", text);
    else if (st == ROUTE_PATTERN_UNMATCHABLE)
        config_error(ld, node, "bad route path '%s': no request can ever match it: %s", text,
                     reason);
    else
        config_oom(ld, node);
    free(text);
    return rc;
}

static int config_set_key_header(struct config_loader *ld, const struct config_key *key,
                                 yaml_node_t *node, void *obj)
{
    struct route_policy *policy = obj;
    char *text = config_scalar(ld, key, node);

    if (text == NULL)
        return -1;
    if (!config_is_token(text)) {
        config_error(ld, node, "bad %s '%s': expected an HTTP header name", key->name, text);
        free(text);
        return -1;
    }
    free(policy->key_header);
    policy->key_header = text;
    return 0;
}

static int config_set_methods(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *node, void *obj)
{
    struct route_policy *policy = obj;
    unsigned methods = 0;
    char allowed[128];

    config_enum_list(config_method_names, allowed, sizeof(allowed));
    for (size_t i = 0; i < config_items(node); i++) {
        yaml_node_t *item = config_item(ld, node, i);
        char *text = config_scalar(ld, key, item);
        unsigned bit;

        if (text == NULL)
            return -1;
        bit = config_method_bit(text);
        if (bit == 0) {
            config_error(ld, item, "unknown method '%s' in %s: expected %s (upper case)",
                         text, key->name, allowed);
            free(text);
            return -1;
        }
        free(text);
        methods |= bit;
    }
    if (methods == 0)
        return config_error(ld, node, "%s must name at least one of %s", key->name, allowed);
    policy->methods = methods;
    return 0;
}

static int config_set_key_max_length(struct config_loader *ld, const struct config_key *key,
                                     yaml_node_t *node, void *obj)
{
    struct route_policy *policy = obj;
    char *text = config_scalar(ld, key, node);
    uint64_t n;
    int rc = 0;

    if (text == NULL)
        return -1;
    if (config_parse_uint(text, CONFIG_MAX_KEY_LENGTH, &n) < 0 || n == 0)
        rc = config_error(ld, node, "bad %s '%s': expected a whole number of bytes from 1 to %d",
                          key->name, text, CONFIG_MAX_KEY_LENGTH);
    else
        policy->key_max_length = (size_t)n;
    free(text);
    return rc;
}

static int config_set_scope_headers(struct config_loader *ld, const struct config_key *key,
                                    yaml_node_t *node, void *obj)
{
    struct route_policy *policy = obj;
    size_t n = config_items(node);

    if (n > CONFIG_MAX_SCOPE_HEADERS)
        return config_error(ld, node, "%s takes at most %d headers", key->name,
                            CONFIG_MAX_SCOPE_HEADERS);
    for (size_t i = 0; i < policy->n_scope_headers; i++) {
        free(policy->scope_headers[i]);
        policy->scope_headers[i] = NULL;
    }
    policy->n_scope_headers = 0;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = config_item(ld, node, i);
        char *text = config_scalar(ld, key, item);

        if (text == NULL)
            return -1;
        if (!config_is_token(text)) {
            config_error(ld, item, "bad header name '%s' in %s", text, key->name);
            free(text);
            return -1;
        }
        policy->scope_headers[policy->n_scope_headers++] = text;
    }
    return 0;
}

static int config_set_release_statuses(struct config_loader *ld, const struct config_key *key,
                                       yaml_node_t *node, void *obj)
{
    struct route_policy *policy = obj;
    size_t n = config_items(node);

    if (n > CONFIG_MAX_RELEASE_STATUSES)
        return config_error(ld, node, "%s takes at most %d statuses", key->name,
                            CONFIG_MAX_RELEASE_STATUSES);
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = config_item(ld, node, i);
        char *text = config_scalar(ld, key, item);
        uint64_t status;

        if (text == NULL)
            return -1;
        if (config_parse_uint(text, 599, &status) < 0 || status < 100) {
            config_error(ld, item, "bad HTTP status '%s' in %s: expected 100 to 599",
                         text, key->name);
            free(text);
            return -1;
        }
        free(text);
        policy->release_statuses[i] = (int)status;
    }
    policy->n_release_statuses = n;
    return 0;
}

/* Every enum-valued key (fingerprint, in_flight, mismatch_status, ...): one of key->names. */
static int config_set_enum(struct config_loader *ld, const struct config_key *key,
                           yaml_node_t *node, void *obj)
{
    _Static_assert(sizeof(enum fingerprint_mode) == sizeof(int) &&
                   sizeof(enum verify_scheme) == sizeof(int), "enums are stored as int");
    int v;

    if (config_scalar_enum(ld, key, node, key->names, &v) < 0)
        return -1;
    memcpy((char *)obj + key->offset, &v, sizeof(v));
    return 0;
}

/* header:NAME or json:/pointer (CONTRACT section 8). */
static int config_set_key_from(struct config_loader *ld, const struct config_key *key,
                               yaml_node_t *node, void *obj)
{
    struct route_policy *policy = obj;
    char *text = config_scalar(ld, key, node);
    char *value;

    if (text == NULL)
        return -1;
    if (strncmp(text, "header:", 7) == 0 && config_is_token(text + 7)) {
        value = strdup(text + 7);
        if (value == NULL) {
            config_oom(ld, node);
            goto failed;
        }
        policy->key_from = KEY_FROM_HEADER;
        policy->webhook = true;
        free(policy->key_header);
        policy->key_header = value;
    } else if (strncmp(text, "json:", 5) == 0 && config_is_json_pointer(text + 5)) {
        value = strdup(text + 5);
        if (value == NULL) {
            config_oom(ld, node);
            goto failed;
        }
        policy->key_from = KEY_FROM_JSON;
        policy->webhook = true;
        free(policy->key_json_pointer);
        policy->key_json_pointer = value;
    } else {
        config_error(ld, node, "bad %s '%s': expected header:NAME (e.g. header:X-GitHub-Delivery) "
                     "or json:/pointer (e.g. json:/id)", key->name, text);
        goto failed;
    }
    free(text);
    return 0;
failed:
    free(text);
    return -1;
}

/* One string, or a list of two while a secret is rotated. */
static int config_set_secret(struct config_loader *ld, const struct config_key *key,
                             yaml_node_t *node, void *obj)
{
    struct route_policy *policy = obj;
    size_t n = config_items(node);

    if (n == 0 || n > CONFIG_MAX_SECRETS)
        return config_error(ld, node, "%s takes one string, or a list of at most %d during a "
                            "rotation", key->name, CONFIG_MAX_SECRETS);
    for (size_t i = 0; i < policy->n_secrets; i++) {
        free(policy->secrets[i]);
        policy->secrets[i] = NULL;
    }
    policy->n_secrets = 0;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = config_item(ld, node, i);
        char *text = config_scalar(ld, key, item);

        if (text == NULL)
            return -1;
        if (text[0] == '\0') {
            free(text);
            return config_error(ld, item, "%s is empty", key->name);
        }
        policy->secrets[policy->n_secrets++] = text;
    }
    return 0;
}

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
        if (table[i].set(ld, &table[i], config_node(doc, pair->value), obj) < 0)
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
        config_apply_mapping(ld, doc, config_lookup(doc, root, "limits"), config_limits_keys,
                             cfg, &ld->set_limits) < 0 ||
        config_apply_mapping(ld, doc, config_lookup(doc, root, "defaults"), config_policy_keys,
                             &cfg->defaults, &ld->set_defaults) < 0)
        return -1;
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

        ld->route_nodes[i] = item;
        route->line = (int)item->start_mark.line + 1;
        if (config_apply_mapping(ld, doc, item, config_route_keys, route, &path_set) < 0 ||
            config_apply_mapping(ld, doc, item, config_policy_keys, &route->policy,
                                 &ld->set_routes[i]) < 0)
            return -1;
    }
    return 0;
}

/* ---- pass 3: defaults and cross-field checks --------------------------- */

/* retention >= lease: a finished record must outlive the claim it replaces. */
static int config_check_policy(struct config_loader *ld, const struct route_policy *policy,
                               yaml_node_t *map)
{
    char lease[32], retention[32];
    yaml_node_t *where;

    ld->cur = &ld->user;
    if (policy->retention_ms >= policy->lease_ms)
        return 0;
    where = config_lookup(&ld->user, map, "retention");
    if (where == NULL)
        where = config_lookup(&ld->user, map, "lease");
    if (where == NULL)
        where = map;
    config_format_duration(policy->lease_ms, lease, sizeof(lease));
    config_format_duration(policy->retention_ms, retention, sizeof(retention));
    return config_error(ld, where, "retention (%s) must be at least lease (%s)", retention, lease);
}

/*
 * The key source record ids hash (fingerprint.h): "header:" and the key
 * header lowercased (header names are case-insensitive, RFC 9110 5.1), or
 * "json:" and the pointer as written.
 */
static int config_set_record_source(struct config_loader *ld, struct route_policy *policy,
                                    yaml_node_t *map)
{
    char *source;

    if (policy->webhook && policy->key_from == KEY_FROM_JSON) {
        source = config_printf_dup("json:%s", policy->key_json_pointer);
    } else {
        source = config_printf_dup("header:%s", policy->key_header);
        for (char *c = source ? source : ""; *c != '\0'; c++)
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c - 'A' + 'a');
    }
    if (source == NULL)
        return config_oom(ld, map);
    free(policy->record_source);
    policy->record_source = source;
    return 0;
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
        /* providers change the body between deliveries (CONTRACT section 8) */
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
    if (config_set_record_source(ld, policy, map) < 0)
        return -1;
    for (size_t i = 0; i < policy->n_secrets; i++) {
        const char *why = NULL;
        /* a mistyped secret fails here, not as a 401 on every delivery */
        if (webhook_secret_check(policy->verify, policy->secrets[i], &why) != 0)
            return config_error(ld, secret, "bad secret: %s", why != NULL ? why : "unusable");
    }
    return config_check_policy(ld, policy, map);
}

static bool config_is_wildcard(const char *host)
{
    return strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0;
}

static int config_finish(struct config_loader *ld)
{
    struct config *cfg = ld->cfg;

    if (config_apply_doc(ld, &ld->builtin) < 0)
        return -1;
    ld->cur = &ld->user;

    /* redis.password wins over a password in the URL; "" means none */
    if (cfg->redis_password != NULL && cfg->redis_password[0] == '\0') {
        free(cfg->redis_password);
        cfg->redis_password = NULL;
    }
    if (cfg->redis_password == NULL && ld->redis_url_password != NULL &&
        ld->redis_url_password[0] != '\0') {
        cfg->redis_password = ld->redis_url_password;
        ld->redis_url_password = NULL;
    }

    if (cfg->admin_listen.host != NULL && cfg->admin_listen.port == cfg->listen.port &&
        (strcmp(cfg->admin_listen.host, cfg->listen.host) == 0 ||
         config_is_wildcard(cfg->admin_listen.host) || config_is_wildcard(cfg->listen.host))) {
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

static size_t config_line_at(const char *text, size_t len, size_t offset)
{
    size_t line = 1;

    for (size_t i = 0; i < offset && i < len; i++) {
        if (text[i] == '\n')
            line++;
    }
    return line;
}

static int config_syntax_error(struct config_loader *ld, const yaml_parser_t *parser,
                               const char *text, size_t len)
{
    size_t line;

    if (parser->error == YAML_MEMORY_ERROR)
        return config_oom(ld, NULL);
    if (ld->err == NULL || ld->errlen == 0)
        return -1;
    /* a reader error (bad UTF-8, control character) has an offset, not a mark */
    if (parser->error == YAML_READER_ERROR)
        line = config_line_at(text, len, parser->problem_offset);
    else
        line = parser->problem_mark.line + 1;
    if (parser->context != NULL)
        snprintf(ld->err, ld->errlen, "%s:%zu: YAML syntax error: %s %s that starts at line %zu",
                 ld->cur->name, line, parser->problem ? parser->problem : "",
                 parser->context, (size_t)parser->context_mark.line + 1);
    else
        snprintf(ld->err, ld->errlen, "%s:%zu: YAML syntax error: %s", ld->cur->name, line,
                 parser->problem ? parser->problem : "unknown problem");
    return -1;
}

/* Builds doc from text with libyaml; a second document is an error. */
static int config_doc_parse(struct config_loader *ld, struct config_doc *doc,
                            const char *text, size_t len)
{
    yaml_parser_t parser;
    yaml_document_t extra;
    yaml_node_t *root, *extra_root;

    ld->cur = doc;
    if (!yaml_parser_initialize(&parser))
        return config_oom(ld, NULL);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc->yaml)) {
        config_syntax_error(ld, &parser, text, len);
        goto failed;
    }
    doc->loaded = true;
    root = yaml_document_get_root_node(&doc->yaml);
    if (root != NULL) {
        if (!yaml_parser_load(&parser, &extra)) {
            config_syntax_error(ld, &parser, text, len);
            goto failed;
        }
        extra_root = yaml_document_get_root_node(&extra);
        if (extra_root != NULL)
            config_error(ld, extra_root, "a second YAML document; a configuration file holds one");
        yaml_document_delete(&extra);
        if (extra_root != NULL)
            goto failed;
        doc->root = config_is_null(root) ? NULL : root;
    }
    yaml_parser_delete(&parser);
    return 0;
failed:
    yaml_parser_delete(&parser);
    return -1;
}

static void config_loader_deinit(struct config_loader *ld)
{
    if (ld->user.loaded)
        yaml_document_delete(&ld->user.yaml);
    if (ld->builtin.loaded)
        yaml_document_delete(&ld->builtin.yaml);
    free(ld->set_routes);
    free(ld->route_nodes);
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

int config_load(struct config *cfg, const char *file, char *err, size_t errlen)
{
    FILE *fp;
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc;

    memset(cfg, 0, sizeof(*cfg));
    fp = fopen(file, "rb");
    if (fp == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", file, strerror(errno));
        return -1;
    }
    for (;;) {
        size_t n;

        if (len == cap) {
            char *grown = realloc(text, cap ? cap * 2 : 4096);

            if (grown == NULL) {
                snprintf(err, errlen, "%s: out of memory", file);
                goto failed;
            }
            text = grown;
            cap = cap ? cap * 2 : 4096;
        }
        n = fread(text + len, 1, cap - len, fp);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(fp)) {
        snprintf(err, errlen, "%s: cannot read: %s", file, strerror(errno));
        goto failed;
    }
    fclose(fp);
    rc = config_load_string(cfg, text, len, file, err, errlen);
    free(text);
    return rc;
failed:
    fclose(fp);
    free(text);
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
    free(cfg->redis_password);
    free(cfg->key_prefix);
    config_policy_deinit(&cfg->defaults);
    for (size_t i = 0; i < cfg->n_routes; i++) {
        route_pattern_free(&cfg->routes[i]);
        config_policy_deinit(&cfg->routes[i].policy);
    }
    free(cfg->routes);
    memset(cfg, 0, sizeof(*cfg));
}

struct config *config_create(const char *file, char *err, size_t errlen)
{
    struct config *cfg = malloc(sizeof(*cfg));

    if (cfg == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (config_load(cfg, file, err, errlen) != 0) {
        free(cfg);
        return NULL;
    }
    cfg->refs = 1;
    return cfg;
}

struct config *config_ref(struct config *cfg)
{
    cfg->refs++;
    return cfg;
}

void config_unref(struct config *cfg)
{
    if (cfg == NULL || --cfg->refs > 0)
        return;
    config_deinit(cfg);
    free(cfg);
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

const char *config_reload_refusal(const struct config *running, const struct config *next)
{
    /* a new prefix would hide every record: retries would execute again */
    if (!config_same_string(running->key_prefix, next->key_prefix))
        return "redis.key_prefix";
    return route_reload_refusal(running->routes, running->n_routes, next->routes, next->n_routes);
}
