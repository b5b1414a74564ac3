/*
 * config_set.c - pass 2's typed setters (config_int.h): each converts one
 * value, already ${VAR}-expanded by the pass, into its struct field, and
 * words the error with the key's name and the value's line. They all follow
 * config_int.h's ownership rule: a setter takes *text when it keeps it, and
 * never frees it.
 */
#include "config_int.h"
#include "headers.h"
#include "route.h"
#include "webhook.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

char *config_take(char **text)
{
    char *s = *text;

    *text = NULL;
    return s;
}

/* Takes the text without its first skip bytes ("header:X-Id" -> "X-Id"). */
static char *config_take_after(char **text, size_t skip)
{
    memmove(*text, *text + skip, strlen(*text + skip) + 1);
    return config_take(text);
}

void config_free_strings(char **list, size_t *n)
{
    for (size_t i = 0; i < *n; i++) {
        free(list[i]);
        list[i] = NULL;
    }
    *n = 0;
}

/* listen, admin_listen, health_listen: host:port; "" disables the listener (CONFIG_EMPTY_OFF). */
int config_set_endpoint(struct config_loader *ld, const struct config_key *key,
                        yaml_node_t *node, char **text, void *obj)
{
    struct endpoint *ep = (struct endpoint *)((char *)obj + key->offset);
    const char *why;

    free(ep->host);
    ep->host = NULL;
    ep->port = 0;
    if ((*text)[0] == '\0' && (key->flags & CONFIG_EMPTY_OFF))
        return 0;
    why = config_endpoint_split(*text, &ep->host, &ep->port);
    if (why != NULL)
        return config_error(ld, node, "bad %s address '%s': %s%s", key->name, *text, why,
                            (key->flags & CONFIG_EMPTY_OFF) ? ", or \"\" to disable it" : "");
    return 0;
}

int config_set_upstream_url(struct config_loader *ld, const struct config_key *key,
                            yaml_node_t *node, char **text, void *obj)
{
    struct config *cfg = obj;
    char *base, *unix_path;
    const char *why = config_upstream_parse(*text, &base, &unix_path);

    (void)key;
    if (why != NULL) /* the url itself is not repeated: it may carry credentials */
        return config_error(ld, node, "bad upstream url: %s", why);
    free(cfg->upstream_url);
    free(cfg->upstream_base);
    free(cfg->upstream_unix_path);
    cfg->upstream_url = config_take(text);
    cfg->upstream_base = base;
    cfg->upstream_unix_path = unix_path;
    return 0;
}

int config_set_redis_url(struct config_loader *ld, const struct config_key *key,
                         yaml_node_t *node, char **text, void *obj)
{
    struct config *cfg = obj;
    struct config_redis_target t;
    const char *why = config_redis_parse(*text, &t);

    (void)key;
    if (why != NULL) /* the URL is not echoed: it may hold the password */
        return config_error(ld, node, "bad redis url: %s", why);
    free(cfg->redis_url);
    free(cfg->redis_host);
    free(cfg->redis_unix_path);
    free(ld->redis_url_username);
    free(ld->redis_url_password);
    cfg->redis_url = config_take(text);
    cfg->redis_host = t.host;
    cfg->redis_port = t.port;
    cfg->redis_unix_path = t.unix_path;
    cfg->redis_db = t.db;
    cfg->redis_tls = t.tls;
    /* redis.username and redis.password, when set, win (pass 3) */
    ld->redis_url_username = t.username;
    ld->redis_url_password = t.password;
    return 0;
}

int config_set_duration(struct config_loader *ld, const struct config_key *key,
                        yaml_node_t *node, char **text, void *obj)
{
    uint64_t *field = (uint64_t *)((char *)obj + key->offset);

    if (config_parse_duration_ms(*text, field) < 0)
        return config_error(ld, node, "bad duration '%s' for %s: expected a whole number and a "
                            "unit (ms, s, m, h, d) of at most 3650d, e.g. 250ms or 24h", *text,
                            key->name);
    if (*field == 0 && (key->flags & CONFIG_POSITIVE))
        return config_error(ld, node, "%s must be longer than 0", key->name);
    return 0;
}

int config_set_size(struct config_loader *ld, const struct config_key *key,
                    yaml_node_t *node, char **text, void *obj)
{
    size_t *field = (size_t *)((char *)obj + key->offset);

    if (config_parse_size(*text, field) < 0)
        return config_error(ld, node, "bad size '%s' for %s: expected a whole number and a unit "
                            "(B, KiB, MiB, GiB), e.g. 1MiB", *text, key->name);
    if (*field == 0 && (key->flags & CONFIG_POSITIVE))
        return config_error(ld, node, "%s must be larger than 0", key->name);
    return 0;
}

/* limits.max_connections: 1..CONFIG_MAX_CONNECTIONS. */
int config_set_connections(struct config_loader *ld, const struct config_key *key,
                           yaml_node_t *node, char **text, void *obj)
{
    unsigned *field = (unsigned *)((char *)obj + key->offset);
    uint64_t n = 0;

    if (config_parse_uint(*text, CONFIG_MAX_CONNECTIONS, &n) < 0 || n == 0)
        return config_error(ld, node, "bad %s '%s': expected a whole number from 1 to %d",
                            key->name, *text, CONFIG_MAX_CONNECTIONS);
    *field = (unsigned)n;
    return 0;
}

/* admin.held_refresh: a duration from CONFIG_HELD_REFRESH_MIN_MS to CONFIG_HELD_REFRESH_MAX_MS. */
int config_set_held_refresh(struct config_loader *ld, const struct config_key *key,
                            yaml_node_t *node, char **text, void *obj)
{
    uint64_t *field = (uint64_t *)((char *)obj + key->offset);

    if (config_parse_duration_ms(*text, field) < 0 || *field < CONFIG_HELD_REFRESH_MIN_MS ||
        *field > CONFIG_HELD_REFRESH_MAX_MS)
        return config_error(ld, node, "bad %s '%s': expected a duration from 1s to 1h, e.g. "
                            "60s", key->name, *text);
    return 0;
}

/* workers: 1..CONFIG_MAX_WORKERS, or auto (stored as 0, config_workers resolves it). */
int config_set_workers(struct config_loader *ld, const struct config_key *key,
                       yaml_node_t *node, char **text, void *obj)
{
    unsigned *field = (unsigned *)((char *)obj + key->offset);
    uint64_t n = 0;

    if (strcmp(*text, "auto") == 0) {
        *field = 0;
        return 0;
    }
    if (config_parse_uint(*text, CONFIG_MAX_WORKERS, &n) < 0 || n == 0)
        return config_error(ld, node, "bad %s '%s': expected a whole number from 1 to %d, or "
                            "auto (one per CPU)", key->name, *text, CONFIG_MAX_WORKERS);
    *field = (unsigned)n;
    return 0;
}

int config_set_string(struct config_loader *ld, const struct config_key *key,
                      yaml_node_t *node, char **text, void *obj)
{
    char **field = (char **)((char *)obj + key->offset);

    if ((*text)[0] == '\0' && (key->flags & CONFIG_NONEMPTY))
        return config_error(ld, node, "%s may not be empty", key->name);
    free(*field);
    *field = config_take(text);
    return 0;
}

/*
 * upstream.record_id_header: "" sends none (NULL); else a field name the
 * proxy does not keep for itself (header_is_reserved) nor one upstreams or
 * intermediaries act on (header_is_interpreted), as the proxy drops
 * whatever the client sent under it. '-' and '_' read alike (an upstream
 * may, header_name_alike): the client's fields alike it are dropped too.
 * Its clash with a route's key or scope header is config_finish's to find.
 */
int config_set_record_id_header(struct config_loader *ld, const struct config_key *key,
                                yaml_node_t *node, char **text, void *obj)
{
    struct config *cfg = obj;
    char *dashed;
    bool reserved;

    if ((*text)[0] != '\0' && !config_is_token(*text))
        return config_error(ld, node, "bad %s '%s': expected an HTTP header name (RFC 9110 "
                            "token), or \"\" to send none", key->name, *text);
    if ((*text)[0] == '\0') {
        free(cfg->upstream_record_id_header);
        cfg->upstream_record_id_header = NULL;
        return 0;
    }
    /* the reserved names are written with '-': compare the name so spelled */
    if ((dashed = strdup(*text)) == NULL)
        return config_error(ld, node, "out of memory");
    for (char *c = dashed; *c != '\0'; c++)
        *c = *c == '_' ? '-' : *c;
    reserved = header_is_reserved(dashed) || webhook_is_signature_header(dashed);
    free(dashed);
    if (reserved)
        return config_error(ld, node, "%s '%s' names a field the proxy or the upstream needs "
                            "as the client sent it (hop-by-hop, framing, routing, credentials, "
                            "idempotency or webhook signature fields; '_' reads as '-'), and "
                            "the proxy drops the client's field of this name from every "
                            "forwarded request; pick another name, such as "
                            "Idempotency-Record-Id, or \"\" to send none", key->name, *text);
    if (header_is_interpreted(*text))
        return config_error(ld, node, "%s '%s' names a field upstreams or intermediaries act "
                            "on (client address or scheme, X-Forwarded-*, Via, conditions "
                            "If-*, Range, caching, Accept*, Content-*, Prefer, Origin, Referer, "
                            "User-Agent, method overrides, signatures; '_' reads as '-'), and "
                            "the proxy drops the client's field of this name from every "
                            "forwarded request; pick a name of its own, such as "
                            "Idempotency-Record-Id, or \"\" to send none", key->name, *text);
    free(cfg->upstream_record_id_header);
    cfg->upstream_record_id_header = config_take(text);
    return 0;
}

/*
 * admin.token_file: the file is read here, at every load, so `-t`, startup
 * and each SIGHUP check the token the admin listener will ask for; only
 * its digest is kept (bearer.h), and the bytes read are wiped.
 */
int config_set_token_file(struct config_loader *ld, const struct config_key *key,
                          yaml_node_t *node, char **text, void *obj)
{
    struct config *cfg = obj;
    char why[600];
    const char *bad;
    char *token;
    size_t len;

    if ((*text)[0] == '\0')
        return config_error(ld, node, "admin.%s may not be empty: name the file that holds "
                            "the admin token, or leave the key out", key->name);
    /* a token is at most BEARER_TOKEN_MAX_LEN and a line break: a device that never ends stops */
    if (config_file_read_max(*text, BEARER_TOKEN_MAX_LEN + 2, &token, &len, why, sizeof(why)) < 0)
        return config_error(ld, node, "admin.%s: %s", key->name, why);
    bad = bearer_token_set(&cfg->admin_token, token, len);
    OPENSSL_cleanse(token, len);
    free(token);
    if (bad != NULL)
        return config_error(ld, node, "admin.%s: %s: %s", key->name, *text, bad);
    free(cfg->admin_token_file);
    cfg->admin_token_file = config_take(text);
    return 0;
}

/*
 * redis.key_prefix: 1..CONFIG_MAX_KEY_PREFIX bytes of printable ASCII
 * without spaces, '{' or '}'. The length bounds the record key so it is
 * never cut (record_key_format); a brace would move the Redis Cluster hash
 * tag away from {RECORD_ID}.
 */
int config_set_key_prefix(struct config_loader *ld, const struct config_key *key,
                          yaml_node_t *node, char **text, void *obj)
{
    char **field = (char **)((char *)obj + key->offset);
    size_t len = strlen(*text);

    if (len == 0 || len > CONFIG_MAX_KEY_PREFIX)
        return config_error(ld, node, "%s must be 1 to %d bytes long, not %zu", key->name,
                            CONFIG_MAX_KEY_PREFIX, len);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)(*text)[i];

        if (c <= ' ' || c >= 0x7f || c == '{' || c == '}')
            return config_error(ld, node, "bad %s: printable ASCII without spaces, '{' or '}' "
                                "(braces would break the Redis Cluster hash tag)", key->name);
    }
    free(*field);
    *field = config_take(text);
    return 0;
}

/*
 * redis.sentinel.master: the name the sentinels monitor the primary by, 1 to
 * 255 bytes without spaces or control characters (a +switch-master message
 * is the name and four words, split at spaces).
 */
int config_set_sentinel_master(struct config_loader *ld, const struct config_key *key,
                               yaml_node_t *node, char **text, void *obj)
{
    char **field = (char **)((char *)obj + key->offset);
    size_t len = strlen(*text);

    if (len == 0 || len > 255)
        return config_error(ld, node, "redis.sentinel.%s must be 1 to 255 bytes long, not %zu",
                            key->name, len);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)(*text)[i];

        if (c <= ' ' || c == 0x7f)
            return config_error(ld, node, "bad redis.sentinel.%s: a name without spaces or "
                                "control characters", key->name);
    }
    free(*field);
    *field = config_take(text);
    return 0;
}

/* How one endpoint list is named in its messages. */
struct config_endpoint_words {
    const char *section;            /* "redis.sentinel" */
    const char *item;               /* "sentinel address" */
    const char *items;              /* "sentinels" */
    const char *example;            /* "10.0.0.5:26379" */
    size_t max;                     /* at most this many, <= CONFIG_MAX_ENDPOINTS */
};

static const struct config_endpoint_words config_sentinel_words = {
    "redis.sentinel", "sentinel address", "sentinels", "10.0.0.5:26379", CONFIG_MAX_SENTINELS };
static const struct config_endpoint_words config_cluster_words = {
    "redis.cluster", "cluster node address", "seed nodes", "10.0.0.5:6379",
    CONFIG_MAX_CLUSTER_SEEDS };

_Static_assert(CONFIG_MAX_SENTINELS <= CONFIG_MAX_ENDPOINTS &&
               CONFIG_MAX_CLUSTER_SEEDS <= CONFIG_MAX_ENDPOINTS, "the lists hold their maximum");

/* The start of an endpoint list key: at most w->max items; the list at key->offset emptied. */
static int config_begin_endpoints(struct config_loader *ld, const struct config_key *key,
                                  yaml_node_t *list, size_t n, void *obj,
                                  const struct config_endpoint_words *w)
{
    struct endpoint_list *eps = (struct endpoint_list *)((char *)obj + key->offset);

    if (n > w->max)
        return config_error(ld, list, "%s.%s takes at most %zu %s", w->section, key->name,
                            w->max, w->items);
    for (size_t i = 0; i < eps->n; i++) {
        free(eps->at[i].host);
        eps->at[i].host = NULL;
    }
    eps->n = 0;
    return 0;
}

/* One item of an endpoint list: host:port (IPv6 in brackets), appended in the order written. */
static int config_set_endpoint_item(struct config_loader *ld, const struct config_key *key,
                                    yaml_node_t *node, char **text, void *obj,
                                    const struct config_endpoint_words *w)
{
    struct endpoint_list *eps = (struct endpoint_list *)((char *)obj + key->offset);
    struct endpoint *ep = &eps->at[eps->n];
    const char *why = config_endpoint_split(*text, &ep->host, &ep->port);

    if (why != NULL)
        return config_error(ld, node, "bad %s '%s' in %s.%s: %s (write host:port, e.g. %s)",
                            w->item, *text, w->section, key->name, why, w->example);
    eps->n++;
    return 0;
}

int config_begin_sentinel_addresses(struct config_loader *ld, const struct config_key *key,
                                    yaml_node_t *list, size_t n, void *obj)
{
    return config_begin_endpoints(ld, key, list, n, obj, &config_sentinel_words);
}

/* One item of redis.sentinel.addresses: host:port of a sentinel. */
int config_set_sentinel_address(struct config_loader *ld, const struct config_key *key,
                                yaml_node_t *node, char **text, void *obj)
{
    return config_set_endpoint_item(ld, key, node, text, obj, &config_sentinel_words);
}

int config_begin_cluster_addresses(struct config_loader *ld, const struct config_key *key,
                                   yaml_node_t *list, size_t n, void *obj)
{
    return config_begin_endpoints(ld, key, list, n, obj, &config_cluster_words);
}

/* One item of redis.cluster.addresses: host:port of a cluster node. */
int config_set_cluster_address(struct config_loader *ld, const struct config_key *key,
                               yaml_node_t *node, char **text, void *obj)
{
    return config_set_endpoint_item(ld, key, node, text, obj, &config_cluster_words);
}

int config_set_bool(struct config_loader *ld, const struct config_key *key,
                    yaml_node_t *node, char **text, void *obj)
{
    bool *field = (bool *)((char *)obj + key->offset);
    /* only YAML's plain true/false: "true" quoted is a string, True a spelling we refuse */
    bool plain = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;

    if (plain && strcmp(*text, "true") == 0)
        *field = true;
    else if (plain && strcmp(*text, "false") == 0)
        *field = false;
    else
        return config_error(ld, node, "bad %s %s%s%s: expected true or false (lower case, "
                            "unquoted)", key->name, plain ? "'" : "", *text,
                            plain ? "'" : " (quoted)");
    return 0;
}

/* A route's `path`: route.c checks and normalises the pattern; the messages are worded here. */
int config_set_route_path(struct config_loader *ld, const struct config_key *key,
                          yaml_node_t *node, char **text, void *obj)
{
    const char *reason = NULL;

    (void)key;
    switch (route_set_pattern(obj, text, &reason)) {
    case ROUTE_PATTERN_OK:
        return 0;
    case ROUTE_PATTERN_NOT_ABSOLUTE:
        return config_error(ld, node, "bad route path '%s': it must start with '/'", *text);
    case ROUTE_PATTERN_BAD_CHAR:
        return config_error(ld, node, "bad route path '%s': a path without query, spaces or "
                            "control characters, with '*' only as the last character", *text);
    case ROUTE_PATTERN_UNMATCHABLE:
        return config_error(ld, node, "bad route path '%s': no request can ever match it: %s",
                            *text, reason);
    case ROUTE_PATTERN_NOMEM:
        break;
    }
    return config_oom(ld, node);
}

int config_set_key_header(struct config_loader *ld, const struct config_key *key,
                          yaml_node_t *node, char **text, void *obj)
{
    struct route_policy *policy = obj;

    if (!config_is_token(*text))
        return config_error(ld, node, "bad %s '%s': expected an HTTP header name", key->name,
                            *text);
    free(policy->key_header);
    policy->key_header = config_take(text);
    return 0;
}

int config_begin_methods(struct config_loader *ld, const struct config_key *key,
                         yaml_node_t *list, size_t n, void *obj)
{
    struct route_policy *policy = obj;
    char allowed[128];

    if (n == 0) {
        config_enum_list(config_method_names, allowed, sizeof(allowed));
        return config_error(ld, list, "%s must name at least one of %s", key->name, allowed);
    }
    policy->methods = 0;
    return 0;
}

/* One item of `methods:`: an RFC 9110 9.1 method name, upper case. */
int config_set_method(struct config_loader *ld, const struct config_key *key,
                      yaml_node_t *node, char **text, void *obj)
{
    struct route_policy *policy = obj;
    unsigned bit = config_method_bit(*text);
    char allowed[128];

    if (bit == 0) {
        config_enum_list(config_method_names, allowed, sizeof(allowed));
        return config_error(ld, node, "unknown method '%s' in %s: expected %s (upper case)",
                            *text, key->name, allowed);
    }
    policy->methods |= bit;
    return 0;
}

/* key_max_length, key_min_length: a key's bound in bytes, 1..CONFIG_MAX_KEY_LENGTH, a size_t. */
int config_set_key_length(struct config_loader *ld, const struct config_key *key,
                          yaml_node_t *node, char **text, void *obj)
{
    uint64_t n;
    size_t v;

    if (config_parse_uint(*text, CONFIG_MAX_KEY_LENGTH, &n) < 0 || n == 0)
        return config_error(ld, node, "bad %s '%s': expected a whole number of bytes from 1 "
                            "to %d", key->name, *text, CONFIG_MAX_KEY_LENGTH);
    v = (size_t)n;
    memcpy((char *)obj + key->offset, &v, sizeof(v));
    return 0;
}

int config_begin_scope_headers(struct config_loader *ld, const struct config_key *key,
                               yaml_node_t *list, size_t n, void *obj)
{
    struct route_policy *policy = obj;

    if (n > CONFIG_MAX_SCOPE_HEADERS)
        return config_error(ld, list, "%s takes at most %d headers", key->name,
                            CONFIG_MAX_SCOPE_HEADERS);
    config_free_strings(policy->scope_headers, &policy->n_scope_headers);
    return 0;
}

/* One item of `scope_headers:`: a header name. */
int config_set_scope_header(struct config_loader *ld, const struct config_key *key,
                            yaml_node_t *node, char **text, void *obj)
{
    struct route_policy *policy = obj;

    if (!config_is_token(*text))
        return config_error(ld, node, "bad header name '%s' in %s", *text, key->name);
    policy->scope_headers[policy->n_scope_headers++] = config_take(text);
    return 0;
}

int config_begin_release_statuses(struct config_loader *ld, const struct config_key *key,
                                  yaml_node_t *list, size_t n, void *obj)
{
    struct route_policy *policy = obj;

    if (n > CONFIG_MAX_RELEASE_STATUSES)
        return config_error(ld, list, "%s takes at most %d statuses", key->name,
                            CONFIG_MAX_RELEASE_STATUSES);
    policy->n_release_statuses = 0;
    return 0;
}

/* One item of `release_statuses:`: an HTTP status, 100..599. */
int config_set_release_status(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *node, char **text, void *obj)
{
    struct route_policy *policy = obj;
    uint64_t status;

    if (config_parse_uint(*text, 599, &status) < 0 || status < 100)
        return config_error(ld, node, "bad HTTP status '%s' in %s: expected 100 to 599", *text,
                            key->name);
    policy->release_statuses[policy->n_release_statuses++] = (int)status;
    return 0;
}

/* Every enum-valued key (fingerprint, in_flight, mismatch_status, ...): one of key->names. */
int config_set_enum(struct config_loader *ld, const struct config_key *key,
                    yaml_node_t *node, char **text, void *obj)
{
    _Static_assert(sizeof(enum fingerprint_mode) == sizeof(int) &&
                   sizeof(enum verify_scheme) == sizeof(int) &&
                   sizeof(enum error_format) == sizeof(int) &&
                   sizeof(enum access_log) == sizeof(int) &&
                   sizeof(enum readiness) == sizeof(int), "enums are stored as int");
    char allowed[256];
    int v;

    if (config_enum_value(key->names, *text, &v) < 0) {
        config_enum_list(key->names, allowed, sizeof(allowed));
        return config_error(ld, node, "bad %s '%s': expected one of %s", key->name, *text,
                            allowed);
    }
    memcpy((char *)obj + key->offset, &v, sizeof(v));
    return 0;
}

/*
 * key_from: header:NAME or json:/pointer (RFC 6901). With verify written
 * out the route is a webhook receiver (config_finish_route decides).
 */
int config_set_key_from(struct config_loader *ld, const struct config_key *key,
                        yaml_node_t *node, char **text, void *obj)
{
    struct route_policy *policy = obj;

    if (strncmp(*text, "header:", 7) == 0 && config_is_token(*text + 7)) {
        policy->key_from = KEY_FROM_HEADER;
        policy->key_from_header = true;
        free(policy->key_header);
        policy->key_header = config_take_after(text, 7);
    } else if (strncmp(*text, "json:", 5) == 0 && config_is_json_pointer(*text + 5)) {
        policy->key_from = KEY_FROM_JSON;
        policy->key_from_header = false;
        free(policy->key_json_pointer);
        policy->key_json_pointer = config_take_after(text, 5);
    } else {
        return config_error(ld, node, "bad %s '%s': expected header:NAME (e.g. "
                            "header:X-GitHub-Delivery) or json:/pointer (e.g. json:/id)",
                            key->name, *text);
    }
    return 0;
}

/* secret: one string, or a list of two while a secret is rotated. */
int config_begin_secrets(struct config_loader *ld, const struct config_key *key,
                         yaml_node_t *list, size_t n, void *obj)
{
    struct route_policy *policy = obj;

    if (n == 0 || n > CONFIG_MAX_SECRETS)
        return config_error(ld, list, "%s takes one string, or a list of at most %d during a "
                            "rotation", key->name, CONFIG_MAX_SECRETS);
    config_free_strings(policy->secrets, &policy->n_secrets);
    return 0;
}

int config_set_secret(struct config_loader *ld, const struct config_key *key,
                      yaml_node_t *node, char **text, void *obj)
{
    struct route_policy *policy = obj;

    if ((*text)[0] == '\0')
        return config_error(ld, node, "%s is empty", key->name);
    policy->secrets[policy->n_secrets++] = config_take(text);
    return 0;
}

/* delivery.sign.secret: one string, or a list of two while the receiver rotates it. */
int config_begin_sign_secrets(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *list, size_t n, void *obj)
{
    struct delivery_policy *d = obj;

    if (n == 0 || n > CONFIG_MAX_SECRETS)
        return config_error(ld, list, "delivery.sign.%s takes one string, or a list of at most "
                            "%d during a rotation", key->name, CONFIG_MAX_SECRETS);
    config_free_strings(d->sign_secrets, &d->n_sign_secrets);
    return 0;
}

/* Checked whole in config_check_delivery (webhook_sign_secret_check), where the line is known. */
int config_set_sign_secret(struct config_loader *ld, const struct config_key *key,
                           yaml_node_t *node, char **text, void *obj)
{
    struct delivery_policy *d = obj;
    const char *why = NULL;

    if (webhook_sign_secret_check(*text, &why) != 0)
        return config_error(ld, node, "bad delivery.sign.%s: %s", key->name, why);
    d->sign_secrets[d->n_sign_secrets++] = config_take(text);
    return 0;
}

/* delivery.rate: `N/s` or `N/min`, N from 1 to DELIVERY_MAX_RATE. */
int config_set_delivery_rate(struct config_loader *ld, const struct config_key *key,
                             yaml_node_t *node, char **text, void *obj)
{
    struct delivery_policy *d = obj;
    const char *slash = strchr(*text, '/');
    char count[24];
    uint64_t n;

    if (slash == NULL || (size_t)(slash - *text) >= sizeof(count))
        goto failed;
    memcpy(count, *text, (size_t)(slash - *text));
    count[slash - *text] = '\0';
    if (config_parse_uint(count, DELIVERY_MAX_RATE, &n) < 0 || n == 0)
        goto failed;
    if (strcmp(slash + 1, "s") == 0)
        d->rate_period_ms = 1000;
    else if (strcmp(slash + 1, "min") == 0)
        d->rate_period_ms = 60000;
    else
        goto failed;
    d->rate_count = (unsigned)n;
    return 0;
failed:
    return config_error(ld, node, "bad %s '%s': expected N/s or N/min, N a whole number from 1 "
                        "to %d (e.g. 20/s)", key->name, *text, DELIVERY_MAX_RATE);
}

/* delivery.max_attempts (1..DELIVERY_MAX_ATTEMPTS) and delivery.concurrency (1..DELIVERY_MAX_CONCURRENCY). */
int config_set_delivery_count(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *node, char **text, void *obj)
{
    unsigned *field = (unsigned *)((char *)obj + key->offset);
    uint64_t max = strcmp(key->name, "concurrency") == 0 ? DELIVERY_MAX_CONCURRENCY
                                                         : DELIVERY_MAX_ATTEMPTS;
    uint64_t n;

    if (config_parse_uint(*text, max, &n) < 0 || n == 0)
        return config_error(ld, node, "bad %s '%s': expected a whole number from 1 to %llu",
                            key->name, *text, (unsigned long long)max);
    *field = (unsigned)n;
    return 0;
}

/* delivery.ack_status: a 2xx, or the provider would retry a delivery that was accepted. */
int config_set_ack_status(struct config_loader *ld, const struct config_key *key,
                          yaml_node_t *node, char **text, void *obj)
{
    int *field = (int *)((char *)obj + key->offset);
    uint64_t n;

    if (config_parse_uint(*text, 299, &n) < 0 || n < 200)
        return config_error(ld, node, "bad %s '%s': expected a 2xx status (200 to 299)",
                            key->name, *text);
    *field = (int)n;
    return 0;
}
