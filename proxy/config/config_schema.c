/*
 * config_schema.c - the schema: one key table per section of the YAML
 * configuration, each row saying everything about its key: its reload
 * class and how a reload compares it, its kind, its setter, the field it
 * fills, its flags; and the built-in defaults written as YAML. The passes
 * (config.c) and the reload check (config_reload.c) read nothing but these
 * tables.
 *
 * The reload class (enum config_reload, config.h) says what a SIGHUP does
 * with a change of the key: LIVE applies it to the requests that start
 * after the reload; RESTART refuses it (it was built into the listeners,
 * threads, upstream client, store or inbox consumers at startup);
 * IDENTITY refuses it (retries of recorded keys would find no record and
 * execute again); BY_KEYS is a section or the routes, whose keys say. A
 * RESTART or IDENTITY key names the comparison of its field in its class,
 * RESTART(config_changed_u64) (config_compare.c): a row without one does
 * not compile. test_config_reload fails on a key without a class, on a
 * RESTART or IDENTITY key without a comparison, and on a key without a
 * reload case of its own; tests/unit/check_config_keys.py reads the rows
 * with a regex (and compares each class with docs/configuration.md), so
 * keep one `{ "name", .reload = ...` entry per line in the `const struct
 * config_key config_*_keys[]` arrays.
 */
#include "config_int.h"

#include <stddef.h>

#define CFG(field) offsetof(struct config, field)
#define POL(field) offsetof(struct route_policy, field)
#define RTE(field) offsetof(struct route, field)

/*
 * The reload classes, short, for the rows below. A key a reload compares
 * names its comparison (config_compare.c) in its class: RESTART(cmp),
 * IDENTITY(cmp). A row that leaves it out does not compile: RESTART and
 * IDENTITY alone name nothing, and RESTART() sets `.compare = ()`.
 */
#define LIVE CONFIG_RELOAD_LIVE
#define RESTART(cmp) CONFIG_RELOAD_RESTART, .compare = (cmp)
#define IDENTITY(cmp) CONFIG_RELOAD_IDENTITY, .compare = (cmp)
#define BY_KEYS CONFIG_RELOAD_BY_KEYS

/* Values of the enum-valued policy keys; config_set_enum stores them as int. */
static const struct config_enum config_fingerprint_names[] = {
    { "request", FINGERPRINT_REQUEST }, { "json", FINGERPRINT_JSON },
    { "form", FINGERPRINT_FORM }, { "none", FINGERPRINT_NONE }, { NULL, 0 },
};
static const struct config_enum config_in_flight_names[] = {
    { "wait", IN_FLIGHT_WAIT }, { "reject", IN_FLIGHT_REJECT }, { NULL, 0 },
};
static const struct config_enum config_ambiguous_names[] = {
    { "hold", AMBIGUOUS_HOLD }, { "release", AMBIGUOUS_RELEASE }, { NULL, 0 },
};
static const struct config_enum config_store_error_names[] = {
    { "reject", ON_STORE_ERROR_REJECT }, { "pass", ON_STORE_ERROR_PASS }, { NULL, 0 },
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
static const struct config_enum config_readiness_names[] = {
    { "store", READINESS_STORE }, { "process", READINESS_PROCESS }, { NULL, 0 },
};
static const struct config_enum config_access_log_names[] = {
    { "all", ACCESS_LOG_ALL }, { "errors", ACCESS_LOG_ERRORS }, { "off", ACCESS_LOG_OFF },
    { NULL, 0 },
};

/* Each table ends with { .name = NULL }. */

const struct config_key config_upstream_keys[] = {
    { "url", .reload = RESTART(config_changed_string), .set = config_set_upstream_url, .offset = CFG(upstream_url) },
    { "connect_timeout", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = CFG(upstream_connect_timeout_ms), .flags = CONFIG_POSITIVE },
    { "timeout", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = CFG(upstream_timeout_ms), .flags = CONFIG_POSITIVE },
    { "record_id_header", .reload = LIVE, .set = config_set_record_id_header },
    { .name = NULL },
};

static const struct config_section config_redis_tls_section;
static const struct config_section config_redis_sentinel_section;
static const struct config_section config_redis_cluster_section;
static const struct config_section config_redis_reassert_section;

/*
 * The passwords (password, password_file; the sentinels' too) are live:
 * each worker's store sends a reload's at its next connection
 * (store_set_credentials), while the connections set up stay as they are.
 * A *_file key is read again by every load, its path changed or not.
 */
const struct config_key config_redis_keys[] = {
    { "url", .reload = RESTART(config_changed_string), .set = config_set_redis_url, .offset = CFG(redis_url) },
    { "sentinel", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_redis_sentinel_section },
    { "cluster", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_redis_cluster_section },
    { "username", .reload = RESTART(config_changed_string), .set = config_set_string, .offset = CFG(redis_username), .flags = CONFIG_UNSET_EMPTY },
    { "password", .reload = LIVE, .set = config_set_string, .offset = CFG(redis_password), .flags = CONFIG_UNSET_EMPTY },
    { "password_file", .reload = LIVE, .set = config_set_password_file, .offset = CFG(redis_password) },
    { "tls", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_redis_tls_section },
    { "key_prefix", .reload = IDENTITY(config_changed_string), .set = config_set_key_prefix, .offset = CFG(key_prefix) },
    { "min_replicas", .reload = RESTART(config_changed_unsigned), .set = config_set_min_replicas, .offset = CFG(redis_min_replicas) },
    { "replica_timeout", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = CFG(redis_replica_timeout_ms), .flags = CONFIG_POSITIVE },
    { "timeout", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = CFG(redis_timeout_ms), .flags = CONFIG_POSITIVE },
    { "reassert", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_redis_reassert_section },
    { .name = NULL },
};

/* redis.reassert: each store's journal (store_reassert.c), set up when the store is made. */
const struct config_key config_redis_reassert_keys[] = {
    { "window", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = CFG(redis_reassert_window_ms) },
    { "grace", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = CFG(redis_reassert_grace_ms) },
    { "max_bytes", .reload = RESTART(config_changed_size), .set = config_set_size, .offset = CFG(redis_reassert_max_bytes), .flags = CONFIG_POSITIVE },
    { .name = NULL },
};

/* redis.tls: used with a rediss:// URL only (config_finish_redis). */
const struct config_key config_redis_tls_keys[] = {
    { "ca_file", .reload = RESTART(config_changed_string), .set = config_set_string, .offset = CFG(redis_tls_ca_file), .flags = CONFIG_NONEMPTY },
    { "cert_file", .reload = RESTART(config_changed_string), .set = config_set_string, .offset = CFG(redis_tls_cert_file), .flags = CONFIG_NONEMPTY },
    { "key_file", .reload = RESTART(config_changed_string), .set = config_set_string, .offset = CFG(redis_tls_key_file), .flags = CONFIG_NONEMPTY },
    { "server_name", .reload = RESTART(config_changed_string), .set = config_set_string, .offset = CFG(redis_tls_server_name), .flags = CONFIG_NONEMPTY },
    { "verify", .reload = RESTART(config_changed_bool), .set = config_set_bool, .offset = CFG(redis_tls_verify) },
    { .name = NULL },
};

/* redis.sentinel: instead of redis.url (config_finish); its credentials are the sentinels'. */
const struct config_key config_redis_sentinel_keys[] = {
    { "master", .reload = RESTART(config_changed_string), .set = config_set_sentinel_master, .offset = CFG(redis_sentinel_master) },
    { "addresses", .reload = RESTART(config_changed_endpoints), .kind = CONFIG_LIST, .set = config_set_sentinel_address, .offset = CFG(redis_sentinels), .begin = config_begin_sentinel_addresses },
    { "username", .reload = RESTART(config_changed_string), .set = config_set_string, .offset = CFG(redis_sentinel_username), .flags = CONFIG_UNSET_EMPTY },
    { "password", .reload = LIVE, .set = config_set_string, .offset = CFG(redis_sentinel_password), .flags = CONFIG_UNSET_EMPTY },
    { "password_file", .reload = LIVE, .set = config_set_password_file, .offset = CFG(redis_sentinel_password) },
    { "tls", .reload = RESTART(config_changed_bool), .set = config_set_bool, .offset = CFG(redis_tls) },
    { .name = NULL },
};

/* redis.cluster: instead of redis.url (config_finish); the data nodes' credentials. */
const struct config_key config_redis_cluster_keys[] = {
    { "addresses", .reload = RESTART(config_changed_endpoints), .kind = CONFIG_LIST, .set = config_set_cluster_address, .offset = CFG(redis_cluster), .begin = config_begin_cluster_addresses },
    { "tls", .reload = RESTART(config_changed_bool), .set = config_set_bool, .offset = CFG(redis_tls) },
    { .name = NULL },
};

const struct config_key config_limits_keys[] = {
    { "max_request_body", .reload = LIVE, .set = config_set_size, .offset = CFG(max_request_body) },
    { "max_stored_response", .reload = LIVE, .set = config_set_size, .offset = CFG(max_stored_response) },
    { "max_buffered", .reload = LIVE, .set = config_set_size, .offset = CFG(max_buffered) },
    { "stream_window", .reload = LIVE, .set = config_set_size, .offset = CFG(stream_window) },
    { "max_connections", .reload = LIVE, .set = config_set_connections, .offset = CFG(max_connections) },
    { "header_timeout", .reload = LIVE, .set = config_set_duration, .offset = CFG(header_timeout_ms), .flags = CONFIG_POSITIVE },
    { "idle_timeout", .reload = LIVE, .set = config_set_duration, .offset = CFG(idle_timeout_ms), .flags = CONFIG_POSITIVE },
    { .name = NULL },
};

const struct config_key config_errors_keys[] = {
    { "format", .reload = LIVE, .set = config_set_enum, .offset = CFG(error_format), .names = config_error_format_names },
    { .name = NULL },
};

const struct config_key config_log_keys[] = {
    { "access", .reload = LIVE, .set = config_set_enum, .offset = CFG(access_log), .names = config_access_log_names },
    { "audit", .reload = LIVE, .set = config_set_audit_log, .offset = CFG(audit_log) },
    { .name = NULL },
};

/*
 * encryption: the keyring (config_keyring.c reads it); none: what is stored stays plaintext.
 * accept_plaintext_until: the migration window for what was stored before the keyring.
 */
const struct config_key config_encryption_keys[] = {
    { "keyring", .reload = LIVE, .set = config_set_string, .offset = CFG(keyring_file), .flags = CONFIG_NONEMPTY },
    { "accept_plaintext_until", .reload = LIVE, .set = config_set_rfc3339, .offset = CFG(accept_plaintext_until_ms) },
    { .name = NULL },
};

/*
 * admin.token_file and admin.operators_file are read again by every load
 * (config_operators.c), so a SIGHUP rereads them even when their paths are
 * unchanged: a rotated token, or an operator removed, applies at once.
 */
const struct config_key config_admin_keys[] = {
    { "token_file", .reload = LIVE, .set = config_set_token_file, .offset = CFG(admin_token_file) },
    { "operators_file", .reload = LIVE, .set = config_set_string, .offset = CFG(admin_operators_file), .flags = CONFIG_NONEMPTY },
    { "held_refresh", .reload = LIVE, .set = config_set_held_refresh, .offset = CFG(held_refresh_ms) },
    { .name = NULL },
};

/*
 * A route's errors (and defaults:'): the shape of the answers the proxy
 * makes for a request the route matched. Unset, a route takes defaults:'
 * and defaults: the top-level errors.format (config_finish.c).
 */
const struct config_key config_route_errors_keys[] = {
    { "format", .reload = LIVE, .set = config_set_enum, .offset = POL(error_format), .names = config_error_format_names },
    { .name = NULL },
};

static const struct config_section config_route_errors_section = {
    "errors", { config_route_errors_keys, NULL }, 0 };

/*
 * `defaults:` takes these without the route-only ones (the webhook keys,
 * and replayed_header_on_first, whose default is the top-level key); a
 * route takes all. The identity keys are compared route by route, for every path
 * (config_changed_routes): what `defaults:` says reaches requests only
 * through the routes that inherit it.
 */
const struct config_key config_policy_keys[] = {
    { "key_header", .reload = IDENTITY(config_changed_key_source), .set = config_set_key_header },
    { "methods", .reload = LIVE, .kind = CONFIG_LIST, .set = config_set_method, .begin = config_begin_methods },
    { "require_key", .reload = LIVE, .set = config_set_bool, .offset = POL(require_key) },
    { "key_max_length", .reload = LIVE, .set = config_set_key_length, .offset = POL(key_max_length) },
    { "key_min_length", .reload = LIVE, .set = config_set_key_length, .offset = POL(key_min_length) },
    { "key_pattern", .reload = LIVE, .set = config_set_key_pattern },
    { "fingerprint", .reload = LIVE, .set = config_set_enum, .offset = POL(fingerprint), .names = config_fingerprint_names },
    { "fingerprint_ignore", .reload = LIVE, .kind = CONFIG_LIST, .set = config_set_fingerprint_ignore, .begin = config_begin_fingerprint_ignore },
    { "scope_headers", .reload = IDENTITY(config_changed_scope_headers), .kind = CONFIG_LIST, .set = config_set_scope_header, .begin = config_begin_scope_headers },
    { "scope_required", .reload = LIVE, .set = config_set_bool, .offset = POL(scope_required) },
    { "lease", .reload = LIVE, .set = config_set_duration, .offset = POL(lease_ms), .flags = CONFIG_POSITIVE },
    { "retention", .reload = LIVE, .set = config_set_duration, .offset = POL(retention_ms), .flags = CONFIG_POSITIVE },
    { "in_flight", .reload = LIVE, .set = config_set_enum, .offset = POL(in_flight), .names = config_in_flight_names },
    { "wait_timeout", .reload = LIVE, .set = config_set_duration, .offset = POL(wait_timeout_ms), .flags = CONFIG_POSITIVE },
    { "mismatch_status", .reload = LIVE, .set = config_set_enum, .offset = POL(mismatch_status), .names = config_mismatch_names },
    { "release_statuses", .reload = LIVE, .kind = CONFIG_LIST, .set = config_set_release_status, .begin = config_begin_release_statuses },
    { "on_ambiguous", .reload = LIVE, .set = config_set_enum, .offset = POL(on_ambiguous), .names = config_ambiguous_names },
    { "on_store_error", .reload = LIVE, .set = config_set_enum, .offset = POL(on_store_error), .names = config_store_error_names },
    { "errors", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_route_errors_section },
    { "replayed_header_on_first", .reload = LIVE, .set = config_set_bool, .offset = POL(replayed_header_on_first), .flags = CONFIG_ROUTE_ONLY },
    { "key_from", .reload = IDENTITY(config_changed_key_source), .set = config_set_key_from, .flags = CONFIG_ROUTE_ONLY },
    { "verify", .reload = LIVE, .set = config_set_enum, .offset = POL(verify), .flags = CONFIG_ROUTE_ONLY, .names = config_verify_names },
    { "secret", .reload = LIVE, .kind = CONFIG_SCALAR_OR_LIST, .set = config_set_secret, .flags = CONFIG_ROUTE_ONLY, .begin = config_begin_secrets },
    { "secret_file", .reload = LIVE, .kind = CONFIG_SCALAR_OR_LIST, .set = config_set_secret_file, .flags = CONFIG_ROUTE_ONLY, .begin = config_begin_secret_files },
    { .name = NULL },
};

#define DLV(f) offsetof(struct delivery_policy, f)

static const struct config_enum config_delivery_mode_names[] = {
    { "direct", DELIVERY_DIRECT }, { "queued", DELIVERY_QUEUED }, { NULL, 0 },
};

/* A webhook route's delivery.backoff: how long a queued delivery waits before each retry. */
const struct config_key config_delivery_backoff_keys[] = {
    { "initial", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = DLV(backoff_initial_ms), .flags = CONFIG_POSITIVE },
    { "max", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = DLV(backoff_max_ms), .flags = CONFIG_POSITIVE },
    { .name = NULL },
};

static const struct config_section config_delivery_backoff_section = {
    "delivery.backoff", { config_delivery_backoff_keys, NULL }, 0 };

/*
 * A queued route's delivery.sign: the proxy signs every attempt itself
 * (Standard Webhooks); one `whsec_` secret, or a list of two while the
 * receiver rotates it. Live: each attempt is signed with the secrets of the
 * last reload (inbox_set_config).
 */
const struct config_key config_delivery_sign_keys[] = {
    { "secret", .reload = LIVE, .kind = CONFIG_SCALAR_OR_LIST, .set = config_set_sign_secret, .begin = config_begin_sign_secrets },
    { "secret_file", .reload = LIVE, .kind = CONFIG_SCALAR_OR_LIST, .set = config_set_sign_secret_file, .begin = config_begin_sign_secret_files },
    { .name = NULL },
};

static const struct config_section config_delivery_sign_section = {
    "delivery.sign", { config_delivery_sign_keys, NULL }, 0 };

/* A webhook route's delivery: direct, or queued in the inbox; obj is its struct delivery_policy. */
const struct config_key config_delivery_keys[] = {
    { "mode", .reload = RESTART(config_changed_int), .set = config_set_enum, .offset = DLV(mode), .names = config_delivery_mode_names },
    { "max_attempts", .reload = RESTART(config_changed_unsigned), .set = config_set_delivery_count, .offset = DLV(max_attempts) },
    { "max_age", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = DLV(max_age_ms), .flags = CONFIG_POSITIVE },
    { "backoff", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_delivery_backoff_section },
    { "visibility_timeout", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = DLV(visibility_timeout_ms), .flags = CONFIG_POSITIVE },
    { "concurrency", .reload = RESTART(config_changed_unsigned), .set = config_set_delivery_count, .offset = DLV(concurrency) },
    { "ack_status", .reload = RESTART(config_changed_int), .set = config_set_ack_status, .offset = DLV(ack_status) },
    { "dead_retention", .reload = RESTART(config_changed_u64), .set = config_set_duration, .offset = DLV(dead_retention_ms), .flags = CONFIG_POSITIVE },
    { "sign", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_delivery_sign_section },
    { "rate", .reload = RESTART(config_changed_delivery_rate), .set = config_set_delivery_rate },
    { .name = NULL },
};

static const struct config_section config_delivery_section = {
    "delivery", { config_delivery_keys, NULL }, 0 };

/*
 * A route is `path` plus any key of config_policy_keys. A queued route is
 * known to the inbox consumers by its path as written: renaming it is a
 * change of its delivery (config_changed_routes).
 */
const struct config_key config_route_keys[] = {
    { "path", .reload = LIVE, .set = config_set_route_path },
    { "delivery", .reload = BY_KEYS, .kind = CONFIG_SECTION, .offset = RTE(policy.delivery), .section = &config_delivery_section },
    { .name = NULL },
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
static const struct config_section config_redis_reassert_section = {
    "redis.reassert", { config_redis_reassert_keys, NULL }, 0 };
static const struct config_section config_redis_cluster_section = {
    "redis.cluster", { config_redis_cluster_keys, NULL }, 0 };
static const struct config_section config_limits_section = {
    "limits", { config_limits_keys, NULL }, 0 };
static const struct config_section config_errors_section = {
    "errors", { config_errors_keys, NULL }, 0 };
static const struct config_section config_log_section = {
    "log", { config_log_keys, NULL }, 0 };
static const struct config_section config_encryption_section = {
    "encryption", { config_encryption_keys, NULL }, 0 };
static const struct config_section config_admin_section = {
    "admin", { config_admin_keys, NULL }, 0 };
static const struct config_section config_defaults_section = {
    "defaults", { config_policy_keys, NULL }, CONFIG_ROUTE_ONLY };
static const struct config_section config_route_section = {
    "a route", { config_route_keys, config_policy_keys }, 0 };

const struct config_key config_root_keys[] = {
    { "listen", .reload = RESTART(config_changed_endpoint), .set = config_set_endpoint, .offset = CFG(listen) },
    { "admin_listen", .reload = RESTART(config_changed_endpoint), .set = config_set_endpoint, .offset = CFG(admin_listen), .flags = CONFIG_EMPTY_OFF },
    { "health_listen", .reload = RESTART(config_changed_endpoint), .set = config_set_endpoint, .offset = CFG(health_listen), .flags = CONFIG_EMPTY_OFF },
    { "readiness", .reload = LIVE, .set = config_set_enum, .offset = CFG(readiness), .names = config_readiness_names },
    { "admin", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_admin_section },
    { "workers", .reload = RESTART(config_changed_unsigned), .set = config_set_workers, .offset = CFG(workers) },
    { "upstream", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_upstream_section },
    { "redis", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_redis_section },
    { "limits", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_limits_section },
    { "errors", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_errors_section },
    { "replayed_header_on_first", .reload = LIVE, .set = config_set_bool, .offset = CFG(replayed_header_on_first) },
    { "log", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_log_section },
    { "encryption", .reload = BY_KEYS, .kind = CONFIG_SECTION, .section = &config_encryption_section },
    { "defaults", .reload = BY_KEYS, .kind = CONFIG_SECTION, .offset = CFG(defaults), .section = &config_defaults_section, .compare = config_changed_inherited },
    { "routes", .reload = BY_KEYS, .kind = CONFIG_ROUTES, .section = &config_route_section, .compare = config_changed_routes },
    { .name = NULL },
};

const struct config_section config_root_section = {
    "the top level", { config_root_keys, NULL }, 0 };

/*
 * Searched when a key is unknown, to say where it belongs instead (not
 * redis.tls: its verify would send a webhook's verify there).
 */
const struct config_section *const config_sections[] = {
    &config_root_section, &config_upstream_section, &config_redis_section,
    &config_redis_sentinel_section, &config_redis_cluster_section,
    &config_redis_reassert_section, &config_limits_section, &config_defaults_section, &config_route_section,
    &config_errors_section, &config_log_section, &config_encryption_section,
    &config_admin_section, &config_delivery_section,
    &config_delivery_backoff_section, &config_delivery_sign_section,
};
const size_t config_n_sections = CONFIG_ARRAY_SIZE(config_sections);

/*
 * The documented default of every key that has one (a route's delivery
 * takes config_delivery_defaults'). Pass 3 applies it, with the same
 * setters, to every key the file left unset. No password: a Redis without
 * AUTH is the default.
 */
const char config_builtin_yaml[] =
    "listen: 0.0.0.0:8080\n"
    "admin_listen: 127.0.0.1:9901\n"
    "readiness: store\n"
    "admin:\n"
    "  held_refresh: 60s\n"
    "workers: 1\n"
    "upstream:\n"
    "  url: http://127.0.0.1:3000\n"
    "  connect_timeout: 2s\n"
    "  timeout: 30s\n"
    "  record_id_header: Idempotency-Record-Id\n"
    "redis:\n"
    "  url: redis://127.0.0.1:6379/0\n"
    "  key_prefix: idem\n"
    "  min_replicas: 0\n"
    "  replica_timeout: 200ms\n"
    "  timeout: 500ms\n"
    "  reassert:\n"
    "    window: 10s\n"
    "    grace: 2s\n"
    "    max_bytes: 64MiB\n"
    "  tls:\n"
    "    verify: true\n"
    "limits:\n"
    "  max_request_body: 1MiB\n"
    "  max_stored_response: 1MiB\n"
    "  max_buffered: 64MiB\n"
    "  stream_window: 64KiB\n"
    "  max_connections: 512\n"
    "  header_timeout: 20s\n"
    "  idle_timeout: 75s\n"
    "errors:\n"
    "  format: problem\n"
    "replayed_header_on_first: false\n"
    "log:\n"
    "  access: all\n"
    "  audit: stdout\n"
    "defaults:\n"
    "  key_header: Idempotency-Key\n"
    "  methods: [POST, PATCH]\n"
    "  require_key: false\n"
    "  key_max_length: 255\n"
    "  key_min_length: 1\n"
    "  fingerprint: request\n"
    "  fingerprint_ignore: []\n"
    "  scope_headers: [Authorization]\n"
    "  scope_required: false\n"
    "  lease: 60s\n"
    "  retention: 24h\n"
    "  in_flight: wait\n"
    "  wait_timeout: 10s\n"
    "  mismatch_status: 409\n"
    "  release_statuses: [408, 425, 429, 503]\n"
    "  on_ambiguous: hold\n"
    "  on_store_error: reject\n";
