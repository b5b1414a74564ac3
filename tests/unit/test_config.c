/*
 * test_config.c - the configuration loader: the keys, their values, their defaults,
 * webhook routes and the errors it words (what a reload may change is
 * test_config_reload.c's).
 *
 * One table case per behaviour: a YAML text, and either the line and a word
 * the error must name, or checks of the loaded structs. Prints `ok NAME`
 * or `FAIL NAME: why` per check (unit.h); exits 1 if any check failed.
 *
 * Usage: test_config [SAMPLE_CONFIG]  (also loads the sample file if given)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bearer.h"
#include "config.h"
#include "unit.h"
#include "unit_config.h"

#define FILE_NAME "test.yaml"

/* One UNIT_CHECK per expectation of the loaded cfg, each under the case's name. */
typedef unit_config_check config_check;

struct config_case {
    const char *name;
    const char *yaml;
    int err_line;               /* 0: must load; else the line the error names */
    const char *err_word;       /* and a word the message must contain */
    config_check *check;        /* for cases that load */
};

#define STREQ(a, b) ((a) != NULL && strcmp((a), (b)) == 0)

static const struct route *route_at(const struct config *cfg, size_t i)
{
    return i < cfg->n_routes ? &cfg->routes[i] : NULL;
}

/* ---- checks of loaded configurations ----------------------------------- */

#define P16 "abcdefghijklmnop"
#define P128 P16 P16 P16 P16 P16 P16 P16 P16

static void check_prefix_128(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->key_prefix, P128), "line %d", __LINE__);
}

static void check_record_source(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(route_at(cfg, 0)->policy.record_source, "header:idempotency-key"),
                     "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(route_at(cfg, 1)->policy.record_source, "header:x-request-id"),
                     "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(route_at(cfg, 2)->policy.record_source,
                           "header:x-github-delivery route:/c"),
                     "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(route_at(cfg, 3)->policy.record_source, "json:/data/id route:/d"),
                     "line %d", __LINE__);
}

static void check_bools(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->defaults.require_key == true, "line %d", __LINE__);
    UNIT_CHECK(name, route_at(cfg, 0)->policy.require_key == false, "line %d", __LINE__);
}

static void check_max_durations(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->defaults.lease_ms == 3650ull * 86400000, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->defaults.retention_ms == 3650ull * 86400000, "line %d", __LINE__);
}

static void check_unset_password_empty(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_password == NULL, "line %d", __LINE__);
}

static void check_defaults(const char *name, const struct config *cfg)
{
    const struct route_policy *d = &cfg->defaults;

    UNIT_CHECK(name, STREQ(cfg->listen.host, "0.0.0.0") && cfg->listen.port == 8080,
                     "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->admin_listen.host, "127.0.0.1") && cfg->admin_listen.port == 9901,
                     "line %d", __LINE__);
    UNIT_CHECK(name, cfg->workers == 1 && config_workers(cfg) == 1, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->held_refresh_ms == 60000, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->upstream_url, "http://127.0.0.1:3000"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->upstream_base, "http://127.0.0.1:3000"), "line %d", __LINE__);
    UNIT_CHECK(name, cfg->upstream_unix_path == NULL, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->upstream_connect_timeout_ms == 2000, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->upstream_timeout_ms == 30000, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->upstream_record_id_header, "Idempotency-Record-Id"), "line %d",
               __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_url, "redis://127.0.0.1:6379/0"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_host, "127.0.0.1") && cfg->redis_port == 6379,
                     "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_unix_path == NULL && cfg->redis_db == 0, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_password == NULL, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->key_prefix, "idem"), "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_timeout_ms == 500, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_min_replicas == 0 && cfg->redis_replica_timeout_ms == 200,
                     "line %d", __LINE__);
    UNIT_CHECK(name, cfg->max_request_body == 1024 * 1024, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->max_stored_response == 1024 * 1024, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->max_buffered == 64 * 1024 * 1024, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(d->key_header, "Idempotency-Key"), "line %d", __LINE__);
    UNIT_CHECK(name, d->methods == (METHOD_POST | METHOD_PATCH), "line %d", __LINE__);
    UNIT_CHECK(name, d->require_key == false, "line %d", __LINE__);
    UNIT_CHECK(name, d->key_max_length == 255, "line %d", __LINE__);
    UNIT_CHECK(name, d->fingerprint == FINGERPRINT_REQUEST, "line %d", __LINE__);
    UNIT_CHECK(name, d->n_scope_headers == 1 && STREQ(d->scope_headers[0], "Authorization"),
                     "line %d", __LINE__);
    UNIT_CHECK(name, d->lease_ms == 60000, "line %d", __LINE__);
    UNIT_CHECK(name, d->retention_ms == 24ull * 3600 * 1000, "line %d", __LINE__);
    UNIT_CHECK(name, d->in_flight == IN_FLIGHT_WAIT, "line %d", __LINE__);
    UNIT_CHECK(name, d->wait_timeout_ms == 10000, "line %d", __LINE__);
    UNIT_CHECK(name, d->mismatch_status == 409, "line %d", __LINE__);
    UNIT_CHECK(name, d->n_release_statuses == 4 && d->release_statuses[0] == 408 &&
                     d->release_statuses[1] == 425 && d->release_statuses[2] == 429 &&
                     d->release_statuses[3] == 503, "line %d", __LINE__);
    UNIT_CHECK(name, d->on_ambiguous == AMBIGUOUS_HOLD, "line %d", __LINE__);
    UNIT_CHECK(name, d->on_store_error == ON_STORE_ERROR_REJECT, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->error_format == ERROR_FORMAT_PROBLEM, "line %d", __LINE__);
    UNIT_CHECK(name, d->key_from == KEY_FROM_HEADER && d->key_json_pointer == NULL,
                     "line %d", __LINE__);
    UNIT_CHECK(name, d->verify == VERIFY_NONE && d->n_secrets == 0, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->n_routes == 0 && cfg->routes == NULL, "line %d", __LINE__);
}

static void check_duration_units(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->upstream_connect_timeout_ms == 250, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->upstream_timeout_ms == 45000, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_timeout_ms == 2 * 60000, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->defaults.lease_ms == 3ull * 3600000, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->defaults.retention_ms == 7ull * 86400000, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->defaults.wait_timeout_ms == 1500, "line %d", __LINE__);
}

static void check_size_units(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->max_request_body == 512, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->max_stored_response == 64 * 1024, "line %d", __LINE__);
}

static void check_workers_4(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->workers == 4 && config_workers(cfg) == 4, "line %d", __LINE__);
}

static void check_workers_auto(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->workers == 0, "line %d", __LINE__);
    UNIT_CHECK(name, config_workers(cfg) >= 1 && config_workers(cfg) <= CONFIG_MAX_WORKERS,
                     "line %d", __LINE__);
}

static void check_size_mib(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->max_request_body == 2 * 1024 * 1024, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->max_stored_response == (size_t)1024 * 1024 * 1024, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->max_buffered == (size_t)2 * 1024 * 1024 * 1024, "line %d", __LINE__);
}

static void check_buffered_exact(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->max_buffered == 1088 * 1024, "line %d", __LINE__);
    UNIT_CHECK(name, config_answer_reservation(cfg) == CONFIG_ANSWER_RESERVATION_MAX,
               "line %d", __LINE__);
}

/* For cases whose point is that the file loads at all. */
static void check_loads(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg != NULL, "line %d", __LINE__);
}

static void check_errors_stripe(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->error_format == ERROR_FORMAT_STRIPE, "line %d", __LINE__);
}

static void check_health_off(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->health_listen.host == NULL && cfg->readiness == READINESS_STORE,
               "line %d", __LINE__);
}

static void check_health_listen(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->health_listen.host, "0.0.0.0") && cfg->health_listen.port == 9902,
               "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->admin_listen.host, "127.0.0.1"), "line %d", __LINE__);
}

static void check_health_alone(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->admin_listen.host == NULL && cfg->health_listen.port == 9902,
               "line %d", __LINE__);
}

static void check_readiness_process(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->readiness == READINESS_PROCESS, "line %d", __LINE__);
}

static void check_everything_set(const char *name, const struct config *cfg)
{
    const struct route_policy *d = &cfg->defaults;

    UNIT_CHECK(name, STREQ(cfg->listen.host, "127.0.0.1") && cfg->listen.port == 18080,
                     "line %d", __LINE__);
    UNIT_CHECK(name, cfg->admin_listen.host == NULL && cfg->admin_listen.port == 0,
                     "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->upstream_base, "https://api.example.com:8443/legacy"),
                     "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_host, "redis.internal") && cfg->redis_port == 6380,
                     "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_db == 3, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->key_prefix, "pay"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(d->key_header, "X-Request-Id"), "line %d", __LINE__);
    UNIT_CHECK(name, d->methods == (METHOD_POST | METHOD_PUT | METHOD_DELETE), "line %d", __LINE__);
    UNIT_CHECK(name, d->require_key == true, "line %d", __LINE__);
    UNIT_CHECK(name, d->key_max_length == 64, "line %d", __LINE__);
    UNIT_CHECK(name, d->fingerprint == FINGERPRINT_NONE, "line %d", __LINE__);
    UNIT_CHECK(name, d->n_scope_headers == 2 && STREQ(d->scope_headers[1], "X-Tenant"),
                     "line %d", __LINE__);
    UNIT_CHECK(name, d->in_flight == IN_FLIGHT_REJECT, "line %d", __LINE__);
    UNIT_CHECK(name, d->mismatch_status == 422, "line %d", __LINE__);
    UNIT_CHECK(name, d->n_release_statuses == 0, "line %d", __LINE__);
    UNIT_CHECK(name, d->on_ambiguous == AMBIGUOUS_RELEASE, "line %d", __LINE__);
    UNIT_CHECK(name, d->on_store_error == ON_STORE_ERROR_PASS, "line %d", __LINE__);
}

static void check_env_expansion(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_password, "s3cret"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->key_prefix, "idem-eu-1-x"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->upstream_base, "http://legacy.local:3000"), "line %d", __LINE__);
}

static void check_no_password(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_password == NULL, "line %d", __LINE__);
}

static void check_url_password(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_password, "p@ss"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_host, "cache") && cfg->redis_port == 6379 &&
                     cfg->redis_db == 2, "line %d", __LINE__);
}

static void check_password_key_wins(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_password, "fromkey"), "line %d", __LINE__);
}

static void check_url_user(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_username, "idem-proxy"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_password, "p@ss:w"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_host, "cache") && cfg->redis_port == 6380 &&
                     cfg->redis_db == 1 && !cfg->redis_tls, "line %d", __LINE__);
}

static void check_username_key_wins(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_username, "fromkey"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_password, "p@ss:w"), "line %d", __LINE__);
}

static void check_no_user(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_username == NULL, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_password, "pw"), "line %d", __LINE__);
}

static void check_rediss(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_tls && cfg->redis_tls_verify, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_host, "redis.internal") && cfg->redis_port == 6379,
                     "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_tls_ca_file == NULL && cfg->redis_tls_cert_file == NULL &&
                     cfg->redis_tls_server_name == NULL, "line %d", __LINE__);
}

static void check_rediss_mutual(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_tls && !cfg->redis_tls_verify, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_tls_ca_file, "/dev/null") &&
                     STREQ(cfg->redis_tls_cert_file, "/dev/null") &&
                     STREQ(cfg->redis_tls_key_file, "/dev/null") &&
                     STREQ(cfg->redis_tls_server_name, "redis.example"), "line %d", __LINE__);
}

static void check_redis_unix(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_host == NULL, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_unix_path, "/run/redis/redis.sock"), "line %d", __LINE__);
}

static void check_replicas(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_min_replicas == 16 && cfg->redis_replica_timeout_ms == 250,
                     "line %d", __LINE__);
}

static void check_replica_timeout_unused(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_min_replicas == 0 && cfg->redis_replica_timeout_ms == 2000,
                     "line %d", __LINE__);
}

static void check_upstream_unix(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->upstream_unix_path, "/run/legacy.sock"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->upstream_base, "http://localhost"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->upstream_url, "unix:/run/legacy.sock"), "line %d", __LINE__);
}

static void check_record_id_header_off(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->upstream_record_id_header == NULL, "line %d", __LINE__);
}

static void check_record_id_header_named(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->upstream_record_id_header, "X-Correlation-Id"), "line %d",
               __LINE__);
}

static void check_record_id_header_accepted(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->upstream_record_id_header, "Accepted-Ref"), "line %d",
               __LINE__);
}

static void check_ipv6_listen(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->listen.host, "::") && cfg->listen.port == 8080,
                     "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->upstream_base, "http://[::1]:3000"), "line %d", __LINE__);
}

static void check_null_sections(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->n_routes == 0, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->upstream_timeout_ms == 30000, "line %d", __LINE__);
}

static void check_inheritance(const char *name, const struct config *cfg)
{
    const struct route *a = route_at(cfg, 0), *b = route_at(cfg, 1);

    UNIT_CHECK(name, cfg->n_routes == 2, "line %d", __LINE__);
    if (cfg->n_routes != 2)
        return;
    /* a: inherits `defaults:` and the built-in defaults, overrides require_key */
    UNIT_CHECK(name, STREQ(a->path, "/v1/payments") && a->prefix && a->path_len == 12,
                     "line %d", __LINE__);
    UNIT_CHECK(name, a->line == 6, "line %d", __LINE__);
    UNIT_CHECK(name, a->policy.require_key == true, "line %d", __LINE__);
    UNIT_CHECK(name, a->policy.lease_ms == 30000, "line %d", __LINE__);   /* from defaults: */
    UNIT_CHECK(name, a->policy.n_scope_headers == 1 &&
                     STREQ(a->policy.scope_headers[0], "X-Tenant"), "line %d", __LINE__);
    UNIT_CHECK(name, a->policy.retention_ms == 24ull * 3600000, "line %d", __LINE__); /* built in */
    UNIT_CHECK(name, STREQ(a->policy.key_header, "Idempotency-Key"), "line %d", __LINE__);
    UNIT_CHECK(name, a->policy.fingerprint == FINGERPRINT_REQUEST, "line %d", __LINE__);
    /* b: overrides what defaults: set, and more */
    UNIT_CHECK(name, STREQ(b->path, "/v1/refunds") && !b->prefix, "line %d", __LINE__);
    UNIT_CHECK(name, b->policy.lease_ms == 5000, "line %d", __LINE__);
    UNIT_CHECK(name, b->policy.methods == METHOD_PUT, "line %d", __LINE__);
    UNIT_CHECK(name, b->policy.n_scope_headers == 0, "line %d", __LINE__);
    UNIT_CHECK(name, b->policy.mismatch_status == 422, "line %d", __LINE__);
    UNIT_CHECK(name, b->policy.require_key == false, "line %d", __LINE__);
    /* the defaults themselves are unchanged by the routes */
    UNIT_CHECK(name, cfg->defaults.lease_ms == 30000 && cfg->defaults.mismatch_status == 409,
                     "line %d", __LINE__);
}

static void check_webhook_header(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);

    UNIT_CHECK(name, r != NULL, "line %d", __LINE__);
    if (r == NULL)
        return;
    UNIT_CHECK(name, r->policy.key_from == KEY_FROM_HEADER, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(r->policy.key_header, "X-GitHub-Delivery"), "line %d", __LINE__);
    UNIT_CHECK(name, r->policy.fingerprint == FINGERPRINT_NONE, "line %d", __LINE__);
    UNIT_CHECK(name, r->policy.verify == VERIFY_GITHUB, "line %d", __LINE__);
    UNIT_CHECK(name, r->policy.n_secrets == 1 &&
                     STREQ(r->policy.secrets[0], "gh-secret-0123456789"), "line %d", __LINE__);
}

static void check_webhook_json(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);

    UNIT_CHECK(name, r != NULL, "line %d", __LINE__);
    if (r == NULL)
        return;
    UNIT_CHECK(name, r->policy.key_from == KEY_FROM_JSON, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(r->policy.key_json_pointer, "/id"), "line %d", __LINE__);
    UNIT_CHECK(name, r->policy.fingerprint == FINGERPRINT_NONE, "line %d", __LINE__);
    UNIT_CHECK(name, r->policy.verify == VERIFY_STRIPE, "line %d", __LINE__);
    UNIT_CHECK(name, r->policy.n_secrets == 2 &&
                     STREQ(r->policy.secrets[0], "whsec_old_secret_01") &&
                     STREQ(r->policy.secrets[1], "whsec_new_secret_02"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(r->policy.key_header, "Idempotency-Key"), "line %d", __LINE__);
}

static void check_webhook_fingerprint_kept(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);

    UNIT_CHECK(name, r != NULL && r->policy.fingerprint == FINGERPRINT_REQUEST,
                     "line %d", __LINE__);
    if (r == NULL)
        return;
    UNIT_CHECK(name, r->policy.verify == VERIFY_STANDARD_WEBHOOKS, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(r->policy.key_header, "webhook-id"), "line %d", __LINE__);
}

/* defaults: json ignoring /ts and /nonce; route 0 inherits it, route 1 is form with [] */
static void check_fingerprint_modes(const char *name, const struct config *cfg)
{
    const struct route *json = route_at(cfg, 0), *form = route_at(cfg, 1);

    UNIT_CHECK(name, cfg->defaults.fingerprint == FINGERPRINT_JSON &&
                     cfg->defaults.n_fingerprint_ignore == 2, "line %d", __LINE__);
    UNIT_CHECK(name, json != NULL && json->policy.fingerprint == FINGERPRINT_JSON &&
                     json->policy.n_fingerprint_ignore == 2 &&
                     STREQ(json->policy.fingerprint_ignore[0], "/ts") &&
                     STREQ(json->policy.fingerprint_ignore[1], "/items/0/nonce"),
               "line %d", __LINE__);
    UNIT_CHECK(name, form != NULL && form->policy.fingerprint == FINGERPRINT_FORM &&
                     form->policy.n_fingerprint_ignore == 0, "line %d", __LINE__);
}

/* a webhook route beside defaults that ignore a member: none, and no list inherited */
static void check_webhook_no_ignore(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);

    UNIT_CHECK(name, r != NULL && r->policy.fingerprint == FINGERPRINT_NONE &&
                     r->policy.n_fingerprint_ignore == 0, "line %d", __LINE__);
}

static void check_plain_route_fingerprint(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);

    UNIT_CHECK(name, r != NULL && r->policy.fingerprint == FINGERPRINT_REQUEST,
                     "line %d", __LINE__);
    if (r == NULL)
        return;
    UNIT_CHECK(name, r->policy.key_from == KEY_FROM_HEADER && r->policy.verify == VERIFY_NONE,
                     "line %d", __LINE__);
}

static void check_sentinel(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_sentinel_master, "payments"), "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_sentinels.n == 3, "line %d", __LINE__);
    if (cfg->redis_sentinels.n != 3)
        return;
    UNIT_CHECK(name, STREQ(cfg->redis_sentinels.at[0].host, "10.0.0.5") &&
                     cfg->redis_sentinels.at[0].port == 26379, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_sentinels.at[1].host, "sentinel-b.internal") &&
                     cfg->redis_sentinels.at[1].port == 26380, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_sentinels.at[2].host, "::1") &&
                     cfg->redis_sentinels.at[2].port == 26381, "line %d", __LINE__);
    /* the built-in redis.url does not apply: nothing but the sentinels says where Redis is */
    UNIT_CHECK(name, cfg->redis_url == NULL && cfg->redis_host == NULL &&
                     cfg->redis_unix_path == NULL && cfg->redis_db == 0, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_sentinel_username, "watcher") &&
                     STREQ(cfg->redis_sentinel_password, "s3cret"), "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_password, "datapw") && cfg->redis_username == NULL,
                     "line %d", __LINE__);
    UNIT_CHECK(name, !cfg->redis_tls, "line %d", __LINE__);
}

static void check_sentinel_no_credentials(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_sentinel_username == NULL &&
                     cfg->redis_sentinel_password == NULL, "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_sentinels.n == 1 && cfg->redis_url == NULL, "line %d", __LINE__);
}

/* The token of the file TEST_IDEM_TOKEN names (written by main), and its SHA-256's first hex. */
#define TEST_TOKEN "0123456789abcdef0123456789abcdef0123456789abcdef"
#define TEST_TOKEN_FINGERPRINT "34c26e154bab"

static void check_admin_token(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->admin_token_file != NULL &&
                     STREQ(cfg->admin_token.fingerprint, TEST_TOKEN_FINGERPRINT),
               "fingerprint %s", cfg->admin_token.fingerprint);
    UNIT_CHECK(name, bearer_check(&cfg->admin_token, "Bearer " TEST_TOKEN, 1) == BEARER_OK,
               "the file's token is refused");
    UNIT_CHECK(name, STREQ(cfg->admin_listen.host, "0.0.0.0"), "admin_listen %s",
               cfg->admin_listen.host);
}

static void check_held_refresh(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->held_refresh_ms == 1500, "held_refresh %llu ms",
               (unsigned long long)cfg->held_refresh_ms);
}

static void check_loopback_admin(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->admin_token_file == NULL && cfg->admin_listen.host != NULL,
               "token file %s", cfg->admin_token_file);
}

static void check_sentinel_tls(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_tls && !cfg->redis_tls_verify, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_tls_ca_file, "/dev/null"), "line %d", __LINE__);
}

static void check_cluster(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_cluster.n == 2, "line %d", __LINE__);
    if (cfg->redis_cluster.n != 2)
        return;
    UNIT_CHECK(name, STREQ(cfg->redis_cluster.at[0].host, "10.0.0.21") &&
                     cfg->redis_cluster.at[0].port == 6379, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_cluster.at[1].host, "::1") &&
                     cfg->redis_cluster.at[1].port == 7000, "line %d", __LINE__);
    /* the built-in redis.url does not apply */
    UNIT_CHECK(name, cfg->redis_url == NULL && cfg->redis_host == NULL &&
                     cfg->redis_db == 0 && cfg->redis_sentinel_master == NULL, "line %d", __LINE__);
    UNIT_CHECK(name, STREQ(cfg->redis_password, "datapw") && cfg->redis_min_replicas == 1,
               "line %d", __LINE__);
    UNIT_CHECK(name, cfg->redis_tls && STREQ(cfg->redis_tls_ca_file, "/dev/null"),
               "line %d", __LINE__);
}

/* ---- the table --------------------------------------------------------- */

#define R_HOOK_GH "  - path: /hooks/gh\n    key_from: header:X-GitHub-Delivery\n" \
    "    verify: github\n    secret: gh-secret-0123456789\n"

static void check_delivery_defaults(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);
    const struct delivery_policy *d = r != NULL ? &r->policy.delivery : NULL;

    UNIT_CHECK(name, d != NULL, "line %d", __LINE__);
    if (d == NULL)
        return;
    UNIT_CHECK(name, d->mode == DELIVERY_DIRECT && d->max_attempts == 12, "line %d", __LINE__);
    UNIT_CHECK(name, d->max_age_ms == 72ull * 3600000 && d->backoff_initial_ms == 1000 &&
                     d->backoff_max_ms == 3600000, "line %d", __LINE__);
    UNIT_CHECK(name, d->visibility_timeout_ms == 30000 && d->concurrency == 16 &&
                     d->ack_status == 202, "line %d", __LINE__);
}

static void check_visibility_1s(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);

    UNIT_CHECK(name, r != NULL && r->policy.delivery.visibility_timeout_ms == 1000, "line %d",
               __LINE__);
}

static void check_visibility_3s(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);

    UNIT_CHECK(name, r != NULL && r->policy.delivery.visibility_timeout_ms == 3000, "line %d",
               __LINE__);
}

static void check_delivery_queued(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);
    const struct delivery_policy *d = r != NULL ? &r->policy.delivery : NULL;

    UNIT_CHECK(name, d != NULL, "line %d", __LINE__);
    if (d == NULL)
        return;
    UNIT_CHECK(name, d->mode == DELIVERY_QUEUED && d->max_attempts == 3, "line %d", __LINE__);
    UNIT_CHECK(name, d->max_age_ms == 3600000 && d->backoff_initial_ms == 250 &&
                     d->backoff_max_ms == 10000, "line %d", __LINE__);
    UNIT_CHECK(name, d->visibility_timeout_ms == 5000 && d->concurrency == 100 &&
                     d->ack_status == 200, "line %d", __LINE__);
}

static const struct config_case config_cases[] = {
    /* defaults */
    { "empty file takes the contract defaults", "", 0, NULL, check_defaults },
    { "empty mapping takes the contract defaults", "{}\n", 0, NULL, check_defaults },
    { "comments only take the contract defaults", "# nothing\n\n# here\n", 0, NULL, check_defaults },
    { "null sections count as empty", "upstream:\nroutes:\ndefaults: ~\n", 0, NULL,
      check_null_sections },
    { "every key set", "listen: 127.0.0.1:18080\nadmin_listen: \"\"\n"
      "upstream:\n  url: https://api.example.com:8443/legacy/\n"
      "redis:\n  url: redis://redis.internal:6380/3\n  key_prefix: pay\n"
      "defaults:\n  key_header: X-Request-Id\n  methods: [POST, PUT, DELETE]\n"
      "  require_key: true\n  key_max_length: 64\n  fingerprint: none\n"
      "  scope_headers: [Authorization, X-Tenant]\n  in_flight: reject\n"
      "  mismatch_status: 422\n  release_statuses: []\n  on_ambiguous: release\n"
      "  on_store_error: pass\n", 0, NULL, check_everything_set },

    /* units */
    { "durations take ms s m h d", "upstream:\n  connect_timeout: 250ms\n  timeout: 45s\n"
      "redis:\n  timeout: 2m\ndefaults:\n  lease: 3h\n  retention: 7d\n  wait_timeout: 1500ms\n",
      0, NULL, check_duration_units },
    { "sizes take B and KiB", "limits:\n  max_request_body: 512B\n  max_stored_response: 64KiB\n",
      0, NULL, check_size_units },
    { "sizes take MiB and GiB", "limits:\n  max_request_body: 2MiB\n  max_stored_response: 1GiB\n"
      "  max_buffered: 2GiB\n", 0, NULL, check_size_mib },
    /* limits.max_buffered: every request reserves its body and room for its answer */
    { "max_buffered may be exactly body plus answer reservation",
      "limits:\n  max_request_body: 1MiB\n  max_stored_response: 2MiB\n  max_buffered: 1088KiB\n",
      0, NULL, check_buffered_exact },
    { "max_buffered below body plus answer reservation names its line",
      "limits:\n  max_request_body: 1MiB\n  max_buffered: 1087KiB\n", 3, "(1087KiB) must be at "
      "least max_request_body (1MiB) + 64KiB", NULL },
    { "a small max_stored_response is the whole reservation",
      "limits:\n  max_request_body: 1KiB\n  max_stored_response: 1KiB\n  max_buffered: 1KiB\n",
      4, "max_request_body (1KiB) + 1KiB", NULL },
    { "max_request_body past the default max_buffered names its own line",
      "upstream:\n  timeout: 30s\nlimits:\n  max_request_body: 64MiB\n", 4,
      "max_buffered (64MiB)", NULL },

    /* errors */
    { "errors.format takes stripe", "errors:\n  format: stripe\n", 0, NULL, check_errors_stripe },
    { "errors.format lists the choices", "errors:\n  format: json\n", 2, "problem, stripe", NULL },
    { "errors takes only format", "errors:\n  formats: stripe\n", 2, "'formats'", NULL },

    /* workers */
    { "workers takes a number", "workers: 4\n", 0, NULL, check_workers_4 },
    { "workers takes auto", "workers: auto\n", 0, NULL, check_workers_auto },
    { "workers at least 1", "listen: 0.0.0.0:8080\nworkers: 0\n", 2, "from 1 to 64", NULL },
    { "workers at most 64", "workers: 65\n", 1, "from 1 to 64", NULL },
    { "workers is a number", "workers: -2\n", 1, "or auto", NULL },

    /* ${VAR} */
    { "env vars expand in strings", "upstream:\n  url: http://${TEST_IDEM_HOST}:3000\n"
      "redis:\n  password: ${TEST_IDEM_PASSWORD}\n  key_prefix: idem-${TEST_IDEM_REGION}-x\n",
      0, NULL, check_env_expansion },
    /* the record key "PREFIX:{ID}" must never be cut (two clients would share a record) */
    { "key_prefix of 128 bytes", "redis:\n  key_prefix: " P128 "\n", 0, NULL, check_prefix_128 },
    { "key_prefix of 129 bytes", "redis:\n  key_prefix: " P128 "x\n", 2, "1 to 128 bytes", NULL },
    { "key_prefix of 253 bytes", "\nredis:\n  key_prefix: " P128 P16 P16 P16 P16 P16 P16 P16
      "abcdefghijklm\n", 3, "1 to 128 bytes", NULL },
    { "key_prefix empty", "redis:\n  key_prefix: \"\"\n", 2, "1 to 128 bytes", NULL },
    { "key_prefix with a space", "redis:\n  key_prefix: \"a b\"\n", 2, "without spaces", NULL },
    { "key_prefix with a brace", "redis:\n  key_prefix: \"a{b\"\n", 2, "hash tag", NULL },
    { "key_prefix with a closing brace", "redis:\n  key_prefix: \"a}\"\n", 2, "hash tag", NULL },
    { "key_prefix not ASCII", "redis:\n  key_prefix: \"caf\xc3\xa9\"\n", 2, "printable ASCII",
      NULL },
    { "key_prefix with a tab", "redis:\n  key_prefix: \"a\\tb\"\n", 2, "printable ASCII", NULL },
    /* a webhook route's source names the route: one event id goes to each endpoint */
    { "record source: header lowercased, json as written",
      "routes:\n  - path: /a\n  - path: /b\n    key_header: X-Request-ID\n"
      "  - path: /c\n    key_from: header:X-GitHub-Delivery\n    verify: none\n"
      "  - path: /d\n    key_from: json:/data/id\n    verify: none\n", 0, NULL,
      check_record_source },
    /* at least 16 bytes of key (decoded for standard-webhooks) */
    { "webhook secret of one decoded byte", "routes:\n  - path: /h\n    key_from: json:/id\n"
      "    verify: standard-webhooks\n    secret: whsec_AA==\n", 5, "16 bytes", NULL },
    { "stripe secret of one byte", "routes:\n  - path: /h\n    key_from: json:/id\n"
      "    verify: stripe\n    secret: x\n", 5, "16 bytes", NULL },
    { "stripe secret of a space", "routes:\n  - path: /h\n    key_from: json:/id\n"
      "    verify: stripe\n    secret: \" \"\n", 5, "16 bytes", NULL },
    { "second rotation secret too short", "routes:\n  - path: /h\n    key_from: json:/id\n"
      "    verify: github\n    secret: [It's a Secret to Everybody, short]\n", 5, "16 bytes",
      NULL },
    { "standard-webhooks secret without whsec_, not base64", "routes:\n  - path: /h\n"
      "    key_from: json:/id\n    verify: standard-webhooks\n    secret: not*base64*at*all\n",
      5, "is not base64", NULL },
    { "unset env password means none", "redis:\n  password: ${TEST_IDEM_UNSET}\n", 0, NULL,
      check_no_password },
    /* an unset ${VAR} silently read as "" sends traffic to port 80 or to another Redis */
    { "unset env in upstream url names it", "upstream:\n  url: http://127.0.0.1:${TEST_IDEM_UNSET}\n",
      2, "${TEST_IDEM_UNSET} is not set", NULL },
    { "unset env in redis url names it", "redis:\n  url: redis://${TEST_IDEM_UNSET}:6380/0\n",
      2, "${TEST_IDEM_UNSET} is not set", NULL },
    { "unset env in key_prefix names it", "redis:\n  key_prefix: idem-${TEST_IDEM_UNSET}\n",
      2, "${TEST_IDEM_UNSET} is not set", NULL },
    { "unset env in a duration names it", "defaults:\n  lease: ${TEST_IDEM_UNSET}s\n",
      2, "${TEST_IDEM_UNSET} is not set", NULL },
    { "unset env in a list names it", "defaults:\n  scope_headers:\n    - X-${TEST_IDEM_UNSET}\n",
      3, "${TEST_IDEM_UNSET} is not set", NULL },
    { "unset env in a route path names it", "routes:\n  - path: /v1/${TEST_IDEM_UNSET}\n",
      2, "${TEST_IDEM_UNSET} is not set", NULL },
    { "unset env in redis.password reads as empty", "redis:\n  password: ${TEST_IDEM_UNSET}\n",
      0, NULL, check_unset_password_empty },
    { "bad env reference is an error", "redis:\n  key_prefix: a${1X}\n", 2, "${NAME}", NULL },
    { "unterminated env reference is an error", "redis:\n  key_prefix: a${X\n", 2, "${NAME}", NULL },

    /* URLs */
    { "redis url password is used", "redis:\n  url: redis://:p%40ss@cache/2\n", 0, NULL,
      check_url_password },
    { "redis url password with empty password key", "redis:\n  url: redis://:p%40ss@cache/2\n"
      "  password: ${TEST_IDEM_UNSET}\n", 0, NULL, check_url_password },
    { "redis password key beats the url", "redis:\n  password: fromkey\n"
      "  url: redis://:p%40ss@cache/2\n", 0, NULL, check_password_key_wins },
    { "redis unix socket", "redis:\n  url: unix:/run/redis/redis.sock\n", 0, NULL, check_redis_unix },
    { "min_replicas 16, replica_timeout half of timeout", "redis:\n  min_replicas: 16\n"
      "  replica_timeout: 250ms\n  timeout: 500ms\n", 0, NULL, check_replicas },
    { "replica_timeout is not checked without min_replicas", "redis:\n"
      "  replica_timeout: 2s\n", 0, NULL, check_replica_timeout_unused },
    { "min_replicas above 16", "redis:\n  min_replicas: 17\n", 2, "from 0 to 16", NULL },
    { "min_replicas negative", "redis:\n  min_replicas: -1\n", 2, "from 0 to 16", NULL },
    { "min_replicas not a number", "redis:\n  min_replicas: one\n", 2, "whole number", NULL },
    { "replica_timeout 0", "redis:\n  replica_timeout: 0ms\n", 2, "longer than 0", NULL },
    { "reassert max_bytes 0", "redis:\n  reassert:\n    max_bytes: 0MiB\n", 3,
      "max_bytes must be larger than 0", NULL },
    { "reassert window bad", "redis:\n  reassert:\n    window: soon\n", 3, "bad duration", NULL },
    { "reassert unknown key", "redis:\n  reassert:\n    windows: 1s\n", 3, "windows", NULL },
    { "replica_timeout without a unit", "redis:\n  replica_timeout: 200\n", 2, "bad duration",
      NULL },
    { "replica_timeout over half of redis.timeout", "redis:\n  min_replicas: 1\n"
      "  replica_timeout: 251ms\n", 2, "at most half of redis.timeout (500ms)", NULL },
    { "upstream unix socket", "upstream:\n  url: unix:/run/legacy.sock\n", 0, NULL,
      check_upstream_unix },
    { "ipv6 addresses", "listen: '[::]:8080'\nupstream:\n  url: http://[::1]:3000\n", 0, NULL,
      check_ipv6_listen },
    { "record_id_header \"\" sends none", "upstream:\n  record_id_header: \"\"\n", 0, NULL,
      check_record_id_header_off },
    { "record_id_header takes another name", "upstream:\n  record_id_header: X-Correlation-Id\n",
      0, NULL, check_record_id_header_named },
    { "record_id_header must be a token", "upstream:\n  record_id_header: X Record\n", 2,
      "expected an HTTP header name", NULL },
    { "record_id_header may not be hop-by-hop", "upstream:\n  record_id_header: Connection\n",
      2, "names a field the proxy or the upstream needs", NULL },
    { "record_id_header may not be Authorization",
      "upstream:\n  record_id_header: authorization\n", 2,
      "names a field the proxy or the upstream needs", NULL },
    { "record_id_header may not be a signature header",
      "upstream:\n  record_id_header: Stripe-Signature\n", 2,
      "names a field the proxy or the upstream needs", NULL },
    { "record_id_header may not be a route's key header",
      "upstream:\n  record_id_header: X-Op-Key\nroutes:\n  - path: /v1/p*\n"
      "    key_header: x-op-key\n", 2, "key header or a scope header of route /v1/p", NULL },
    { "record_id_header may not be a route's scope header",
      "upstream:\n  record_id_header: X-Tenant\nroutes:\n  - path: /v1/p*\n"
      "    scope_headers: [Authorization, X-Tenant]\n", 2,
      "key header or a scope header of route /v1/p", NULL },
    { "record_id_header with '_' may not alias a reserved field",
      "upstream:\n  record_id_header: X_Forwarded_For\n", 2,
      "names a field the proxy or the upstream needs", NULL },
    { "record_id_header with '_' may not alias a signature header",
      "upstream:\n  record_id_header: stripe_signature\n", 2,
      "names a field the proxy or the upstream needs", NULL },
    { "record_id_header may not be X-Forwarded-Proto",
      "upstream:\n  record_id_header: X-Forwarded-Proto\n", 2,
      "names a field upstreams or intermediaries act on", NULL },
    { "record_id_header may not be X-Forwarded-Host",
      "upstream:\n  record_id_header: x-forwarded-host\n", 2,
      "names a field upstreams or intermediaries act on", NULL },
    { "record_id_header may not be X-Real-IP", "upstream:\n  record_id_header: X-Real-IP\n",
      2, "names a field upstreams or intermediaries act on", NULL },
    { "record_id_header may not be Range", "upstream:\n  record_id_header: Range\n", 2,
      "names a field upstreams or intermediaries act on", NULL },
    { "record_id_header may not be an If- field", "upstream:\n  record_id_header: If-Match\n",
      2, "names a field upstreams or intermediaries act on", NULL },
    { "record_id_header may not be an Accept field",
      "upstream:\n  record_id_header: Accept_Language\n", 2,
      "names a field upstreams or intermediaries act on", NULL },
    { "record_id_header may not be Via", "upstream:\n  record_id_header: via\n", 2,
      "names a field upstreams or intermediaries act on", NULL },
    { "record_id_header may be a name that only starts like one",
      "upstream:\n  record_id_header: Accepted-Ref\n", 0, NULL, check_record_id_header_accepted },
    { "record_id_header may not alias a route's key header with '_'",
      "upstream:\n  record_id_header: X_Op_Key\nroutes:\n  - path: /v1/p*\n"
      "    key_header: x-op-key\n", 2, "key header or a scope header of route /v1/p", NULL },
    { "the default record_id_header against a route's key header",
      "routes:\n  - path: /v1/p*\n    key_header: Idempotency-Record-Id\n", 2,
      "upstream.record_id_header 'Idempotency-Record-Id' is also", NULL },
    { "upstream url must be http https or unix", "upstream:\n  url: ftp://h/\n", 2,
      "upstream url", NULL },
    { "upstream url needs a host", "upstream:\n  url: http://\n", 2, "upstream url", NULL },
    { "upstream unix path must be absolute", "upstream:\n  url: unix:legacy.sock\n", 2,
      "unix:/path", NULL },
    { "redis url must be redis or unix", "redis:\n  url: http://127.0.0.1:6379\n", 2,
      "redis url", NULL },
    { "redis url user and password", "redis:\n  url: redis://idem%2Dproxy:p%40ss:w@cache:6380/1\n",
      0, NULL, check_url_user },
    { "redis username key beats the url", "redis:\n  username: fromkey\n"
      "  url: redis://idem-proxy:p%40ss:w@cache:6380/1\n", 0, NULL, check_username_key_wins },
    { "unset env username reads as empty: the url's", "redis:\n  username: ${TEST_IDEM_UNSET}\n"
      "  url: redis://idem-proxy:p%40ss:w@cache:6380/1\n", 0, NULL, check_url_user },
    { "redis url empty user is the default user", "redis:\n  url: redis://:pw@h/0\n", 0, NULL,
      check_no_user },
    { "redis url user without password", "redis:\n  url: redis://admin@h:6379/0\n", 2,
      "without a password", NULL },
    { "redis username key without password", "redis:\n  username: admin\n", 2,
      "without a password", NULL },
    { "rediss url is tls, verified", "redis:\n  url: rediss://redis.internal/0\n", 0, NULL,
      check_rediss },
    { "rediss with mutual tls", "redis:\n  url: rediss://10.0.0.1:6380/0\n  tls:\n"
      "    ca_file: /dev/null\n    cert_file: /dev/null\n    key_file: /dev/null\n"
      "    server_name: redis.example\n    verify: false\n", 0, NULL, check_rediss_mutual },
    { "redis.tls needs rediss", "redis:\n  url: redis://h/0\n  tls:\n    verify: false\n", 4,
      "rediss://", NULL },
    { "redis.tls on a unix socket", "redis:\n  url: unix:/run/redis.sock\n  tls:\n"
      "    ca_file: /dev/null\n", 4, "unix socket", NULL },
    { "redis.tls cert_file without key_file", "redis:\n  url: rediss://h/0\n  tls:\n"
      "    cert_file: /dev/null\n", 4, "both cert_file and key_file", NULL },
    { "redis.tls unreadable ca_file", "redis:\n  url: rediss://h/0\n  tls:\n"
      "    ca_file: /nonexistent/ca.pem\n", 4, "cannot read", NULL },
    { "redis.tls unknown key", "redis:\n  url: rediss://h/0\n  tls:\n    ca: x\n", 4,
      "allowed: ca_file", NULL },
    { "redis.tls verify must be a bool", "redis:\n  url: rediss://h/0\n  tls:\n    verify: no\n",
      4, "true or false", NULL },
    { "redis url database must be a number", "redis:\n  url: redis://h:6379/zero\n", 2,
      "database", NULL },
    { "redis url port out of range", "redis:\n  url: redis://h:70000/0\n", 2, "redis url", NULL },

    /* redis.sentinel */
    { "redis.sentinel", "redis:\n  password: datapw\n  sentinel:\n    master: payments\n"
      "    addresses: [10.0.0.5:26379, sentinel-b.internal:26380, '[::1]:26381']\n"
      "    username: watcher\n    password: ${TEST_IDEM_PASSWORD}\n", 0, NULL, check_sentinel },
    { "redis.sentinel credentials from unset env read as none", "redis:\n  sentinel:\n"
      "    master: payments\n    addresses: [127.0.0.1:26379]\n"
      "    username: ${TEST_IDEM_UNSET}\n    password: ${TEST_IDEM_UNSET}\n", 0, NULL,
      check_sentinel_no_credentials },
    { "redis.url and redis.sentinel exclude each other", "redis:\n  sentinel:\n"
      "    master: payments\n    addresses: [127.0.0.1:26379]\n"
      "  url: redis://127.0.0.1:6379/0\n", 5, "keep one", NULL },
    { "redis.sentinel needs addresses", "redis:\n  sentinel:\n    master: payments\n", 3,
      "addresses", NULL },
    { "redis.sentinel needs master", "redis:\n  sentinel:\n    addresses: [h:26379]\n", 3,
      "needs master", NULL },
    { "redis.sentinel address needs a port", "redis:\n  sentinel:\n    master: m\n"
      "    addresses:\n      - 10.0.0.5\n", 5, "host:port", NULL },
    { "redis.sentinel master without spaces", "redis:\n  sentinel:\n    master: my master\n"
      "    addresses: [h:26379]\n", 3, "without spaces", NULL },
    { "redis.sentinel at most 16 addresses", "redis:\n  sentinel:\n    master: m\n"
      "    addresses:\n"
      "    - 10.0.0.1:26379\n"
      "    - 10.0.0.2:26379\n"
      "    - 10.0.0.3:26379\n"
      "    - 10.0.0.4:26379\n"
      "    - 10.0.0.5:26379\n"
      "    - 10.0.0.6:26379\n"
      "    - 10.0.0.7:26379\n"
      "    - 10.0.0.8:26379\n"
      "    - 10.0.0.9:26379\n"
      "    - 10.0.0.10:26379\n"
      "    - 10.0.0.11:26379\n"
      "    - 10.0.0.12:26379\n"
      "    - 10.0.0.13:26379\n"
      "    - 10.0.0.14:26379\n"
      "    - 10.0.0.15:26379\n"
      "    - 10.0.0.16:26379\n"
      "    - 10.0.0.17:26379\n"
      , 5, "at most 16", NULL },
    { "redis.sentinel user without a password", "redis:\n  sentinel:\n    master: m\n"
      "    addresses: [h:26379]\n    username: watcher\n", 3, "redis.sentinel.password",
      NULL },
    { "redis.sentinel unknown key", "redis:\n  sentinel:\n    name: m\n", 3,
      "allowed: master", NULL },
    { "redis.sentinel key in redis", "redis:\n  master: m\n", 2, "redis.sentinel", NULL },
    { "redis.tls with redis.sentinel needs its tls", "redis:\n  sentinel:\n    master: m\n"
      "    addresses: [h:26379]\n  tls:\n    verify: false\n", 6, "redis.sentinel.tls",
      NULL },
    /* redis.cluster */
    { "redis.cluster", "redis:\n  password: datapw\n  min_replicas: 1\n  replica_timeout: 100ms\n"
      "  cluster:\n    addresses: [10.0.0.21:6379, '[::1]:7000']\n    tls: true\n"
      "  tls:\n    ca_file: /dev/null\n", 0, NULL, check_cluster },
    { "redis.url and redis.cluster exclude each other", "redis:\n  cluster:\n"
      "    addresses: [127.0.0.1:7000]\n  url: redis://127.0.0.1:6379/0\n", 4, "keep one",
      NULL },
    { "redis.sentinel and redis.cluster exclude each other", "redis:\n  sentinel:\n"
      "    master: m\n    addresses: [h:26379]\n  cluster:\n    addresses: [h:7000]\n", 6,
      "keep one", NULL },
    { "redis.cluster needs addresses", "redis:\n  cluster:\n    tls: false\n", 3, "addresses",
      NULL },
    { "redis.cluster address needs a port", "redis:\n  cluster:\n    addresses: [10.0.0.5]\n",
      3, "host:port", NULL },
    { "redis.cluster unknown key", "redis:\n  cluster:\n    master: m\n", 3, "redis.cluster",
      NULL },
    { "redis.tls with redis.cluster needs its tls", "redis:\n  cluster:\n"
      "    addresses: [h:7000]\n  tls:\n    verify: false\n", 5, "redis.cluster.tls", NULL },
    { "redis.sentinel.tls takes redis.tls", "redis:\n  sentinel:\n    master: m\n"
      "    addresses: [h:26379]\n    tls: true\n  tls:\n    verify: false\n"
      "    ca_file: /dev/null\n", 0, NULL, check_sentinel_tls },

    /* listen addresses */
    { "listen needs a port", "listen: 0.0.0.0\n", 1, "host:port", NULL },
    { "listen port 0 is refused", "listen: 0.0.0.0:0\n", 1, "1 to 65535", NULL },
    { "listen port above 65535 is refused", "listen: 0.0.0.0:65536\n", 1, "1 to 65535", NULL },
    { "listen may not be empty", "listen: \"\"\n", 1, "host:port", NULL },
    { "admin_listen same port as listen", "listen: 0.0.0.0:9000\nadmin_listen: 127.0.0.1:9000\n",
      2, "same port", NULL },
    { "health_listen is off by default", "", 0, NULL, check_health_off },
    { "health_listen is read, on any address", "health_listen: 0.0.0.0:9902\n", 0, NULL,
      check_health_listen },
    { "health_listen may stand without admin_listen",
      "admin_listen: \"\"\nhealth_listen: 127.0.0.1:9902\n", 0, NULL, check_health_alone },
    { "health_listen same port as admin_listen names its line",
      "admin_listen: 127.0.0.1:9901\nhealth_listen: 0.0.0.0:9901\n", 2,
      "health_listen and admin_listen use the same port 9901", NULL },
    { "health_listen same port as listen names its line",
      "listen: 0.0.0.0:9000\nworkers: 1\nhealth_listen: 127.0.0.1:9000\n", 3,
      "health_listen and listen use the same port 9000", NULL },
    { "health_listen needs a port", "health_listen: 0.0.0.0\n", 1, "host:port", NULL },
    { "readiness takes process", "readiness: process\n", 0, NULL, check_readiness_process },
    { "readiness lists the choices", "readiness: redis\n", 1, "store, process", NULL },

    /* the census of held records */
    { "admin.held_refresh is read", "admin:\n  held_refresh: 1500ms\n", 0, NULL,
      check_held_refresh },
    { "admin.held_refresh under 1s is refused", "admin:\n  held_refresh: 999ms\n", 2,
      "bad held_refresh '999ms': expected a duration from 1s to 1h", NULL },
    { "admin.held_refresh over 1h is refused", "admin:\n  held_refresh: 61m\n", 2,
      "from 1s to 1h", NULL },
    { "admin.held_refresh needs a unit", "admin:\n  held_refresh: 60\n", 2, "bad held_refresh",
      NULL },

    /* the admin token */
    { "admin_listen on every interface needs admin.token_file", "admin_listen: 0.0.0.0:9901\n",
      1, "is not a loopback address and neither admin.operators_file nor admin.token_file is set", NULL },
    { "admin_listen on an IPv6 wildcard needs admin.token_file", "admin_listen: \"[::]:9901\"\n",
      1, "[::]:9901 is not a loopback address", NULL },
    { "admin_listen on a host name needs admin.token_file", "listen: 127.0.0.1:8080\n"
      "admin_listen: localhost:9901\n", 2, "a host name is not taken as loopback", NULL },
    { "admin_listen on another address needs admin.token_file", "admin_listen: 10.0.0.5:9901\n",
      1, "admin.token_file", NULL },
    { "admin_listen on 127.0.0.0/8 needs no token", "admin_listen: 127.0.0.2:9901\n", 0, NULL,
      check_loopback_admin },
    { "admin_listen on ::1 needs no token", "admin_listen: \"[::1]:9901\"\n", 0, NULL,
      check_loopback_admin },
    { "admin.token_file is read, and kept as its digest", "admin_listen: 0.0.0.0:9901\n"
      "admin:\n  token_file: ${TEST_IDEM_TOKEN}\n", 0, NULL, check_admin_token },
    { "admin.token_file: a CRLF line end is trimmed", "admin_listen: 0.0.0.0:9901\n"
      "admin:\n  token_file: ${TEST_IDEM_TOKEN_CRLF}\n", 0, NULL, check_admin_token },
    { "admin.token_file missing names its line", "listen: 127.0.0.1:8080\nadmin:\n"
      "  token_file: /nonexistent/admin-token\n", 3, "/nonexistent/admin-token: cannot open",
      NULL },
    { "admin.token_file empty", "admin:\n  token_file: ${TEST_IDEM_TOKEN_EMPTY}\n", 2,
      "the file is empty", NULL },
    { "admin.token_file with only a newline", "admin:\n  token_file: ${TEST_IDEM_TOKEN_NL}\n",
      2, "the file is empty", NULL },
    { "admin.token_file shorter than 32", "admin:\n  token_file: ${TEST_IDEM_TOKEN_SHORT}\n",
      2, "shorter than 32", NULL },
    { "admin.token_file with a space", "admin:\n  token_file: ${TEST_IDEM_TOKEN_SPACE}\n", 2,
      "cannot carry", NULL },
    { "admin.token_file two lines", "admin:\n  token_file: ${TEST_IDEM_TOKEN_TWO}\n", 2,
      "cannot carry", NULL },
    { "admin.token_file may not be empty", "admin:\n  token_file: \"\"\n", 2,
      "may not be empty", NULL },
    { "admin unknown key", "admin:\n  token: x\n", 2, "'token' in admin", NULL },

    /* structure */
    { "yaml syntax error names the line", "listen: 0.0.0.0:8080\nupstream:\n  url: x\n"
      "   timeout: 2s: x\n", 4, "YAML syntax", NULL },
    { "unclosed flow list", "defaults:\n  methods: [POST\n", 3, "YAML syntax", NULL },
    { "top level must be a mapping", "- listen\n", 1, "mapping", NULL },
    { "second document is refused", "listen: 0.0.0.0:8080\n---\nlisten: 0.0.0.0:8081\n", 3,
      "document", NULL },
    { "unknown top level key", "listen: 0.0.0.0:8080\nlissen: 1\n", 2, "'lissen'", NULL },
    { "misplaced key says where it belongs", "timeout: 2s\n", 1, "belongs in upstream, redis",
      NULL },
    { "unknown key in defaults lists the allowed", "defaults:\n  lease: 1m\n  lese: 2m\n", 3,
      "allowed: key_header", NULL },
    { "webhook key in defaults belongs in a route", "defaults:\n  verify: github\n", 2,
      "belongs in a route", NULL },
    { "unknown key in a route", "routes:\n  - path: /a\n    requier_key: true\n", 3,
      "'requier_key' in a route", NULL },
    { "duplicate top level key", "listen: 0.0.0.0:8080\nadmin_listen: \"\"\n"
      "listen: 0.0.0.0:8081\n", 3, "duplicate key 'listen'", NULL },
    { "duplicate key in defaults", "defaults:\n  lease: 1m\n  retention: 1d\n  lease: 2m\n", 4,
      "first at line 2", NULL },
    { "duplicate key in a route", "routes:\n  - path: /a\n    path: /b\n", 3, "duplicate", NULL },
    { "list where a value is expected", "listen: [0.0.0.0:8080]\n", 1, "single value", NULL },
    { "mapping where a list is expected", "defaults:\n  methods: {POST: true}\n", 2, "a list",
      NULL },
    { "value where a section is expected", "upstream: http://x\n", 1, "a mapping", NULL },
    { "list item must be a value", "defaults:\n  methods:\n    - [POST]\n", 3, "single value",
      NULL },
    { "routes must be a list", "routes:\n  path: /a\n", 2, "list of routes", NULL },
    { "route must be a mapping", "routes:\n  - /v1/payments\n", 2, "mapping", NULL },
    { "route needs a path", "routes:\n  - require_key: true\n", 2, "needs a path", NULL },

    /* typed values */
    { "booleans: plain true and false", "defaults:\n  require_key: true\n"
      "routes:\n  - path: /a\n    require_key: false\n", 0, NULL, check_bools },
    { "booleans: True is refused", "defaults:\n  require_key: True\n", 2, "true or false", NULL },
    { "booleans: TRUE is refused", "defaults:\n  require_key: TRUE\n", 2, "true or false", NULL },
    { "booleans: False is refused", "defaults:\n  require_key: False\n", 2, "true or false", NULL },
    { "booleans: quoted true is refused", "defaults:\n  require_key: \"true\"\n", 2, "quoted",
      NULL },
    { "booleans: single-quoted false is refused", "defaults:\n  require_key: 'false'\n", 2,
      "quoted", NULL },
    { "booleans: yes is refused", "defaults:\n  require_key: yes\n", 2, "true or false", NULL },
    { "require_key maybe", "defaults:\n  require_key: maybe\n", 2, "true or false", NULL },
    { "key_max_length negative", "defaults:\n  key_max_length: -3\n", 2, "key_max_length", NULL },
    { "key_max_length zero", "defaults:\n  key_max_length: 0\n", 2, "from 1", NULL },
    { "key_header must be a header name", "defaults:\n  key_header: \"Idem Key\"\n", 2,
      "header name", NULL },
    { "scope header must be a header name", "defaults:\n  scope_headers: [\"a:b\"]\n", 2,
      "header name", NULL },
    { "duration needs a unit", "defaults:\n  lease: 60\n", 2, "bad duration", NULL },
    { "duration unknown unit", "defaults:\n  lease: 60sec\n", 2, "ms, s, m, h, d", NULL },
    { "duration negative", "defaults:\n  lease: -5s\n", 2, "bad duration", NULL },
    { "duration without number", "defaults:\n  lease: s\n", 2, "bad duration", NULL },
    { "durations up to 3650d", "defaults:\n  lease: 3650d\n  retention: 3650d\n", 0, NULL,
      check_max_durations },
    { "duration above 3650d", "defaults:\n  lease: 60s\n  retention: 3651d\n", 3, "3650d", NULL },
    { "duration INT64_MAX ms is refused", "defaults:\n  lease: 9223372036854775807ms\n", 2,
      "at most 3650d", NULL },
    { "duration overflow", "defaults:\n  retention: 99999999999999999999d\n", 2, "bad duration",
      NULL },
    { "duration overflow after the unit", "defaults:\n  retention: 106751991167301d\n", 2,
      "bad duration", NULL },
    { "size unknown unit", "limits:\n  max_request_body: 1MB\n", 2, "B, KiB, MiB", NULL },
    { "size without number", "limits:\n  max_request_body: MiB\n", 2, "bad size", NULL },
    { "size negative", "limits:\n  max_request_body: -1MiB\n", 2, "bad size", NULL },
    { "size overflow", "limits:\n  max_stored_response: 18446744073709551615GiB\n", 2,
      "bad size", NULL },
    { "in_flight lists the choices", "defaults:\n  in_flight: queue\n", 2, "wait, reject", NULL },
    { "fingerprint lists the choices", "defaults:\n  fingerprint: body\n", 2,
      "request, json, form, none", NULL },
    { "fingerprint json and form, fingerprint_ignore inherited and cleared",
      "defaults:\n  fingerprint: json\n  fingerprint_ignore: [/ts, /items/0/nonce]\nroutes:\n"
      "  - path: /v1/payments*\n  - path: /v1/forms*\n    fingerprint: form\n"
      "    fingerprint_ignore: []\n", 0, NULL, check_fingerprint_modes },
    { "fingerprint_ignore beside request refused, at its line",
      "defaults:\n  fingerprint: request\n  fingerprint_ignore: [/ts]\n", 3,
      "fingerprint_ignore is for fingerprint: json", NULL },
    { "fingerprint_ignore inherited by a form route refused, at the route's fingerprint",
      "defaults:\n  fingerprint: json\n  fingerprint_ignore: [/ts]\nroutes:\n"
      "  - path: /v1/forms*\n    fingerprint: form\n", 6, "fingerprint_ignore: []", NULL },
    { "a webhook route inherits no fingerprint_ignore",
      "defaults:\n  fingerprint: json\n  fingerprint_ignore: [/ts]\nroutes:\n"
      "  - path: /hooks/x\n    key_from: json:/id\n    verify: none\n", 0, NULL,
      check_webhook_no_ignore },
    { "fingerprint_ignore of the whole body refused", "defaults:\n  fingerprint: json\n"
      "  fingerprint_ignore: [\"\"]\n", 3, "bad JSON Pointer", NULL },
    { "fingerprint_ignore without a leading slash refused", "defaults:\n  fingerprint: json\n"
      "  fingerprint_ignore: [ts]\n", 3, "bad JSON Pointer", NULL },
    { "fingerprint_ignore with a bad ~ escape refused", "defaults:\n  fingerprint: json\n"
      "  fingerprint_ignore: [/a~2]\n", 3, "RFC 6901", NULL },
    { "fingerprint_ignore over 255 bytes refused", "defaults:\n  fingerprint: json\n"
      "  fingerprint_ignore: [/" P128 P128 "]\n", 3, "1 to 255", NULL },
    { "fingerprint_ignore of 33 pointers refused", "defaults:\n  fingerprint: json\n"
      "  fingerprint_ignore: [/a, /b, /c, /d, /e, /f, /g, /h, /i, /j, /k, /l, /m, /n, /o, /p, "
      "/q, /r, /s, /t, /u, /v, /w, /x, /y, /z, /A, /B, /C, /D, /E, /F, /G]\n", 3,
      "at most 32", NULL },
    { "on_ambiguous lists the choices", "defaults:\n  on_ambiguous: retry\n", 2, "hold, release",
      NULL },
    { "on_store_error lists the choices", "defaults:\n  on_store_error: ignore\n", 2,
      "reject, pass", NULL },
    { "mismatch_status only 409 or 422", "defaults:\n  mismatch_status: 418\n", 2, "409, 422",
      NULL },
    { "release status below 100", "defaults:\n  release_statuses: [503, 99]\n", 2, "100 to 599",
      NULL },
    { "release status above 599", "defaults:\n  release_statuses:\n    - 408\n    - 600\n", 4,
      "100 to 599", NULL },
    { "methods are upper case", "defaults:\n  methods: [POST, patch]\n", 2, "GET, HEAD, POST",
      NULL },
    { "methods may not be empty", "defaults:\n  methods: []\n", 2, "at least one", NULL },
    { "too many scope headers", "defaults:\n  scope_headers: [a, b, c, d, e, f, g, h, i]\n", 2,
      "at most 8", NULL },

    /* cross-field */
    { "lease 0 is refused", "defaults:\n  lease: 0s\n", 2, "longer than 0", NULL },
    { "wait_timeout 0 is refused", "defaults:\n  wait_timeout: 0ms\n", 2, "longer than 0", NULL },
    { "retention shorter than lease", "defaults:\n  lease: 2h\n  retention: 1h\n", 3,
      "retention (1h) must be at least lease (2h)", NULL },
    { "retention shorter than default lease", "defaults:\n  retention: 30s\n", 2, "retention",
      NULL },
    { "route lease longer than inherited retention", "routes:\n  - path: /a\n    lease: 2d\n", 3,
      "retention (1d)", NULL },

    /* routes */
    { "route path must start with a slash", "routes:\n  - path: v1/payments\n", 2,
      "start with '/'", NULL },
    { "route star only at the end", "routes:\n  - path: /v1/*/refunds\n", 2, "last character",
      NULL },
    { "route path without query", "routes:\n  - path: /v1?x=1\n", 2, "query", NULL },
    /* patterns no normalised request path can ever equal (path.h refuses these spellings) */
    { "route with an encoded slash never matches", "routes:\n  - path: /v1%2Fpayments\n", 2,
      "ever match", NULL },
    { "route prefix with an encoded backslash never matches",
      "routes:\n  - path: /v1%5c*\n", 2, "encoded slash", NULL },
    { "route with an encoded NUL never matches", "routes:\n  - path: /v1/pay%00\n", 2,
      "ever match", NULL },
    { "route with an encoded question mark never matches", "routes:\n  - path: /v1/x%3Fy\n", 2,
      "ever match", NULL },
    { "route with an overlong UTF-8 form never matches", "routes:\n  - path: /v1%C0%AFx\n", 2,
      "UTF-8", NULL },
    { "route inherits defaults and overrides", "defaults:\n  lease: 30s\n"
      "  scope_headers: [X-Tenant]\n"
      "routes:\n"
      "  # payments\n"
      "  - path: /v1/payments*\n"
      "    require_key: true\n"
      "  - path: /v1/refunds\n"
      "    lease: 5s\n    methods: [PUT]\n    scope_headers: []\n    mismatch_status: 422\n",
      0, NULL, check_inheritance },

    /* the webhook inbox: a route's delivery */
    { "delivery defaults to direct", "routes:\n" R_HOOK_GH, 0, NULL, check_delivery_defaults },
    { "delivery queued with every key", "routes:\n" R_HOOK_GH
      "    delivery:\n      mode: queued\n      max_attempts: 3\n      max_age: 1h\n"
      "      backoff: {initial: 250ms, max: 10s}\n      visibility_timeout: 5s\n"
      "      concurrency: 100\n      ack_status: 200\n", 0, NULL, check_delivery_queued },
    { "delivery only on webhook routes", "routes:\n  - path: /v1/x\n    delivery:\n"
      "      mode: queued\n", 4, "webhook routes", NULL },
    { "delivery not in defaults", "defaults:\n  delivery: {mode: queued}\n", 2,
      "'delivery'", NULL },
    { "delivery.mode lists the choices", "routes:\n" R_HOOK_GH "    delivery: {mode: async}\n",
      6, "direct, queued", NULL },
    { "delivery.ack_status is a 2xx", "routes:\n" R_HOOK_GH "    delivery: {ack_status: 302}\n",
      6, "2xx", NULL },
    { "delivery.max_attempts at least 1", "routes:\n" R_HOOK_GH
      "    delivery: {max_attempts: 0}\n", 6, "from 1 to 1000", NULL },
    { "delivery.concurrency at most 4096", "routes:\n" R_HOOK_GH
      "    delivery: {concurrency: 4097}\n", 6, "from 1 to 4096", NULL },
    { "delivery.backoff.initial not above max", "routes:\n" R_HOOK_GH
      "    delivery: {backoff: {initial: 2h}}\n", 6, "backoff.initial", NULL },
    { "delivery.backoff takes initial and max", "routes:\n" R_HOOK_GH
      "    delivery: {backoff: {first: 1s}}\n", 6, "'first'", NULL },
    { "delivery.visibility_timeout above 0", "routes:\n" R_HOOK_GH
      "    delivery: {visibility_timeout: 0s}\n", 6, "longer than 0", NULL },
    /* renewed every visibility_timeout/3: 1ms let two instances deliver everything */
    { "delivery.visibility_timeout 1ms refused", "routes:\n" R_HOOK_GH
      "    delivery: {mode: queued, visibility_timeout: 1ms}\n", 6, "at least 1s", NULL },
    { "delivery.visibility_timeout 999ms refused", "routes:\n" R_HOOK_GH
      "    delivery: {visibility_timeout: 999ms}\n", 6,
      "delivery.visibility_timeout (999ms) must be at least 1s", NULL },
    { "delivery.visibility_timeout 1s accepted", "routes:\n" R_HOOK_GH
      "    delivery: {mode: queued, visibility_timeout: 1s}\n", 0, NULL,
      check_visibility_1s },
    { "delivery.visibility_timeout under 1.5 x redis.timeout refused",
      "redis:\n  timeout: 2s\nroutes:\n" R_HOOK_GH
      "    lease: 3s\n    delivery: {mode: queued, visibility_timeout: 2999ms}\n", 9,
      "1.5 x redis.timeout (2s)", NULL },
    { "delivery.visibility_timeout 1.5 x redis.timeout accepted",
      "redis:\n  timeout: 2s\nroutes:\n" R_HOOK_GH
      "    lease: 3s\n    delivery: {mode: queued, visibility_timeout: 3s}\n", 0, NULL,
      check_visibility_3s },

    /* webhooks */
    { "webhook header key defaults to fingerprint none", "routes:\n  - path: /hooks/github\n"
      "    key_from: header:X-GitHub-Delivery\n    verify: github\n    secret: gh-secret-0123456789\n",
      0, NULL, check_webhook_header },
    { "webhook json key with two secrets", "routes:\n  - path: /hooks/stripe\n"
      "    key_from: json:/id\n    verify: stripe\n    secret: [whsec_old_secret_01, whsec_new_secret_02]\n",
      0, NULL, check_webhook_json },
    { "webhook keeps an explicit fingerprint", "routes:\n  - path: /hooks/std\n"
      "    fingerprint: request\n    key_from: header:webhook-id\n"
      "    verify: standard-webhooks\n    secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n", 0, NULL,
      check_webhook_fingerprint_kept },
    { "standard-webhooks secret must be base64", "routes:\n  - path: /hooks/std\n"
      "    key_from: header:webhook-id\n    verify: standard-webhooks\n"
      "    secret: whsec_abc\n", 5, "bad secret", NULL },
    { "route without key_from keeps fingerprint request", "defaults:\n  fingerprint: request\n"
      "routes:\n  - path: /v1/x\n", 0, NULL, check_plain_route_fingerprint },
    { "key_from with delivery but without verify refused", "routes:\n  - path: /h\n"
      "    key_from: json:/id\n    delivery:\n      mode: queued\n", 4, "delivery needs verify",
      NULL },
    { "key_from with an explicit verify: none loads",
      "routes:\n  - path: /h\n    key_from: json:/id\n    verify: none\n", 0, NULL,
      check_loads },
    { "lease under 1s refused", "defaults:\n  lease: 999ms\n", 2, "at least 1s", NULL },
    { "lease under 1.5 x redis.timeout refused", "redis:\n  timeout: 2s\ndefaults:\n  lease: 2999ms\n",
      4, "1.5 x redis.timeout (2s)", NULL },
    { "lease of 1.5 x redis.timeout loads", "redis:\n  timeout: 2s\ndefaults:\n  lease: 3s\n", 0,
      NULL, check_loads },
    { "key_from needs header or json", "routes:\n  - path: /h\n    key_from: query:id\n", 3,
      "header:NAME", NULL },
    { "key_from json pointer starts with a slash", "routes:\n  - path: /h\n    key_from: json:id\n",
      3, "json:/pointer", NULL },
    { "verify lists the schemes", "routes:\n  - path: /h\n    verify: hmac\n", 3,
      "standard-webhooks, github, stripe, none", NULL },
    { "verify needs a secret", "routes:\n  - path: /h\n    key_from: header:X-Id\n"
      "    verify: github\n", 4, "needs a secret", NULL },
    { "verify with an unset secret variable", "routes:\n  - path: /h\n    verify: github\n"
      "    secret: ${TEST_IDEM_UNSET}\n", 4, "${TEST_IDEM_UNSET} is not set", NULL },
    { "secret without verify", "routes:\n  - path: /h\n    secret: abc\n", 3,
      "secret without verify", NULL },
    { "secret with verify none", "routes:\n  - path: /h\n    verify: none\n    secret: abc\n", 4,
      "secret without verify", NULL },
    { "at most two secrets", "routes:\n  - path: /h\n    verify: github\n    secret: [a, b, c]\n",
      4, "at most 2", NULL },
    { "key_header and key_from header conflict", "routes:\n  - path: /h\n"
      "    key_header: X-A\n    key_from: header:X-B\n", 3, "keep one", NULL },
};

/* ---- the key and scope rules, key_from, the replay marker, errors per route ---- */

/* The first two routes of cfg into *a and *b; whether both are there (checked). */
static bool first_two(const char *name, const struct config *cfg, const struct route **a,
                      const struct route **b)
{
    *a = route_at(cfg, 0);
    *b = route_at(cfg, 1);
    UNIT_CHECK(name, *a != NULL && *b != NULL, "line %d", __LINE__);
    return *a != NULL && *b != NULL;
}

static void check_key_rules_defaults(const char *name, const struct config *cfg)
{
    const struct route *r = route_at(cfg, 0);

    UNIT_CHECK(name, cfg->defaults.key_min_length == 1 && cfg->defaults.key_regex == NULL &&
                     cfg->defaults.key_pattern == NULL && !cfg->defaults.scope_required,
                     "line %d", __LINE__);
    UNIT_CHECK(name, !cfg->replayed_header_on_first && cfg->error_format == ERROR_FORMAT_PROBLEM &&
                     cfg->defaults.error_format == ERROR_FORMAT_PROBLEM, "line %d", __LINE__);
    UNIT_CHECK(name, r != NULL && r->policy.key_min_length == 1 && r->policy.key_regex == NULL &&
                     !r->policy.scope_required && !r->policy.replayed_header_on_first &&
                     r->policy.error_format == ERROR_FORMAT_PROBLEM, "line %d", __LINE__);
}

static void check_key_rules_set(const char *name, const struct config *cfg)
{
    const struct route *a, *b;

    if (!first_two(name, cfg, &a, &b))
        return;
    /* a inherits defaults:, b overrides it */
    UNIT_CHECK(name, a->policy.key_min_length == 16 && a->policy.scope_required &&
                     STREQ(a->policy.key_pattern, "[0-9a-f-]+") && a->policy.key_regex != NULL,
                     "line %d", __LINE__);
    UNIT_CHECK(name, b->policy.key_min_length == 4 && !b->policy.scope_required &&
                     STREQ(b->policy.key_pattern, "[A-Z]+") && b->policy.key_regex != NULL &&
                     b->policy.key_regex != a->policy.key_regex, "line %d", __LINE__);
    UNIT_CHECK(name, regexec(a->policy.key_regex, "0123-abcd", 0, NULL, 0) == 0 &&
                     regexec(a->policy.key_regex, "0123-ABCD", 0, NULL, 0) != 0,
                     "line %d", __LINE__);
}

/* key_pattern is anchored whole: an alternation cannot leave one end free */
static void check_key_pattern_anchored(const char *name, const struct config *cfg)
{
    const regex_t *re = route_at(cfg, 0) != NULL ? route_at(cfg, 0)->policy.key_regex : NULL;

    UNIT_CHECK(name, re != NULL, "line %d", __LINE__);
    if (re == NULL)
        return;
    UNIT_CHECK(name, regexec(re, "a", 0, NULL, 0) == 0 && regexec(re, "b", 0, NULL, 0) == 0,
                     "line %d", __LINE__);
    UNIT_CHECK(name, regexec(re, "xb", 0, NULL, 0) != 0 && regexec(re, "ax", 0, NULL, 0) != 0 &&
                     regexec(re, "ab", 0, NULL, 0) != 0, "line %d", __LINE__);
}

static void check_errors_per_route(const char *name, const struct config *cfg)
{
    const struct route *a, *b;

    if (!first_two(name, cfg, &a, &b))
        return;
    UNIT_CHECK(name, cfg->error_format == ERROR_FORMAT_PROBLEM &&
                     cfg->defaults.error_format == ERROR_FORMAT_PROBLEM, "line %d", __LINE__);
    UNIT_CHECK(name, a->policy.error_format == ERROR_FORMAT_STRIPE &&
                     b->policy.error_format == ERROR_FORMAT_PROBLEM, "line %d", __LINE__);
}

/* the top level is defaults:' default, and defaults: the routes' */
static void check_errors_inherited(const char *name, const struct config *cfg)
{
    const struct route *a, *b;

    if (!first_two(name, cfg, &a, &b))
        return;
    UNIT_CHECK(name, cfg->error_format == ERROR_FORMAT_STRIPE &&
                     cfg->defaults.error_format == ERROR_FORMAT_STRIPE &&
                     a->policy.error_format == ERROR_FORMAT_STRIPE &&
                     b->policy.error_format == ERROR_FORMAT_PROBLEM, "line %d", __LINE__);
}

static void check_errors_from_defaults(const char *name, const struct config *cfg)
{
    const struct route *a = route_at(cfg, 0);

    UNIT_CHECK(name, cfg->error_format == ERROR_FORMAT_PROBLEM &&
                     cfg->defaults.error_format == ERROR_FORMAT_STRIPE && a != NULL &&
                     a->policy.error_format == ERROR_FORMAT_STRIPE, "line %d", __LINE__);
}

static void check_replayed_marker(const char *name, const struct config *cfg)
{
    const struct route *a = route_at(cfg, 0), *b = route_at(cfg, 1);

    UNIT_CHECK(name, cfg->replayed_header_on_first && a != NULL && b != NULL &&
                     a->policy.replayed_header_on_first && !b->policy.replayed_header_on_first,
                     "line %d", __LINE__);
}

/* key_from without verify: an ordinary protected route keyed from the body or a header */
static void check_key_from_ordinary(const char *name, const struct config *cfg)
{
    const struct route *a = route_at(cfg, 0), *b = route_at(cfg, 1), *c = route_at(cfg, 2);

    UNIT_CHECK(name, a != NULL && b != NULL && c != NULL, "line %d", __LINE__);
    if (a == NULL || b == NULL || c == NULL)
        return;
    UNIT_CHECK(name, !a->policy.webhook && a->policy.key_from == KEY_FROM_JSON &&
                     a->policy.fingerprint == FINGERPRINT_REQUEST &&
                     STREQ(a->policy.record_source, "json:/reference"), "line %d", __LINE__);
    UNIT_CHECK(name, !b->policy.webhook && b->policy.key_from == KEY_FROM_HEADER &&
                     STREQ(b->policy.key_header, "X-Reference") &&
                     b->policy.fingerprint == FINGERPRINT_REQUEST &&
                     STREQ(b->policy.record_source, "header:x-reference"), "line %d", __LINE__);
    /* verify written out, none included: a webhook receiver as before */
    UNIT_CHECK(name, c->policy.webhook && c->policy.fingerprint == FINGERPRINT_NONE &&
                     STREQ(c->policy.record_source, "json:/id route:/hooks"), "line %d",
                     __LINE__);
}

#define UUID_PATTERN "'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}'"

static const struct config_case key_rule_cases[] = {
    { "key rules default: min 1, no pattern, scope not required, no marker, problem",
      "routes:\n  - path: /v1/x\n", 0, NULL, check_key_rules_defaults },
    { "key rules in defaults: and a route",
      "defaults:\n  key_min_length: 16\n  key_pattern: '[0-9a-f-]+'\n"
      "  scope_headers: [X-Account-Id]\n  scope_required: true\n"
      "routes:\n  - path: /v1/a\n  - path: /v1/b\n    key_min_length: 4\n"
      "    key_pattern: '[A-Z]+'\n    scope_required: false\n", 0, NULL, check_key_rules_set },
    { "key_pattern is anchored around an alternation", "routes:\n  - path: /v1/a\n"
      "    key_pattern: a|b\n", 0, NULL, check_key_pattern_anchored },
    { "a UUID key_pattern loads", "routes:\n  - path: /v1/a\n    key_pattern: " UUID_PATTERN
      "\n", 0, NULL, check_loads },
    { "key_min_length 0 refused", "defaults:\n  key_min_length: 0\n", 2, "from 1 to 8192",
      NULL },
    { "key_min_length over key_max_length refused", "routes:\n  - path: /v1/a\n"
      "    key_max_length: 32\n    key_min_length: 33\n", 4,
      "key_min_length (33) must not be more than key_max_length (32)", NULL },
    { "key_min_length over an inherited key_max_length names the route's line",
      "defaults:\n  key_max_length: 8\nroutes:\n  - path: /v1/a\n    key_min_length: 9\n", 5,
      "must not be more than key_max_length (8)", NULL },
    { "key_min_length in defaults: over a route's key_max_length names its line",
      "defaults:\n  key_min_length: 16\nroutes:\n  - path: /v1/a\n    key_max_length: 8\n",
      5, "key_min_length (16) must not be more than key_max_length (8)", NULL },
    { "a key_pattern regcomp refuses names its line and why", "routes:\n  - path: /v1/a\n"
      "    key_pattern: 'a(b'\n", 3, "bad key_pattern 'a(b': Unmatched ( or \\(", NULL },
    { "an unbalanced key_pattern cannot escape its anchors", "routes:\n  - path: /v1/a\n"
      "    key_pattern: 'a)|(b'\n", 3, "bad key_pattern", NULL },
    /* glibc reads a lone ')' as a literal: "^(a)|x(b))$" would take any key starting with a */
    { "a key_pattern with a ')' without its '(' refused", "routes:\n  - path: /v1/a\n"
      "    key_pattern: 'a)|x(b)'\n", 3, "a ')' without its '('", NULL },
    { "a literal ')' written \\) loads", "routes:\n  - path: /v1/a\n"
      "    key_pattern: 'a\\)|x(b)'\n", 0, NULL, check_loads },
    { "a key_pattern with a back-reference refused", "routes:\n  - path: /v1/a\n"
      "    key_pattern: '(a+)\\1'\n", 3, "back-references", NULL },
    { "an empty key_pattern refused", "defaults:\n  key_pattern: \"\"\n", 2, "may not be empty",
      NULL },
    { "scope_required without scope_headers refused", "routes:\n  - path: /v1/a\n"
      "    scope_required: true\n    scope_headers: []\n", 4, "scope_required needs "
      "scope_headers", NULL },
    { "scope_required in defaults: with a route's empty scope_headers names its line",
      "defaults:\n  scope_headers: [X-Account-Id]\n  scope_required: true\n"
      "routes:\n  - path: /v1/a\n  - path: /v1/b\n    scope_headers: []\n", 7,
      "scope_required needs scope_headers", NULL },
    { "scope_required in defaults: without scope_headers refused", "defaults:\n"
      "  scope_required: true\n  scope_headers: []\n", 3, "scope_required needs", NULL },
    { "scope_required must be a boolean", "defaults:\n  scope_required: yes\n", 2,
      "expected true or false", NULL },
    { "errors.format per route", "routes:\n  - path: /v1/a\n    errors:\n      format: stripe\n"
      "  - path: /v1/b\n", 0, NULL, check_errors_per_route },
    { "errors.format: the top level, then defaults:, then the route", "errors:\n  format: stripe\n"
      "routes:\n  - path: /v1/a\n  - path: /v1/b\n    errors: {format: problem}\n", 0, NULL,
      check_errors_inherited },
    { "errors.format in defaults: reaches the routes", "defaults:\n  errors: {format: stripe}\n"
      "routes:\n  - path: /v1/a\n    errors: {}\n", 0, NULL, check_errors_from_defaults },
    { "a route's errors.format is checked", "routes:\n  - path: /v1/a\n    errors:\n"
      "      format: xml\n", 4, "expected one of problem, stripe", NULL },
    { "a route's errors takes format only", "routes:\n  - path: /v1/a\n    errors:\n"
      "      shape: stripe\n", 4, "unknown key 'shape' in errors (allowed: format)", NULL },
    { "replayed_header_on_first: the top level is the routes' default",
      "replayed_header_on_first: true\nroutes:\n  - path: /v1/a\n  - path: /v1/b\n"
      "    replayed_header_on_first: false\n", 0, NULL, check_replayed_marker },
    { "replayed_header_on_first is not a defaults: key",
      "defaults:\n  replayed_header_on_first: true\n", 2, "belongs in the top level, a route",
      NULL },
    { "key_from without verify: an ordinary protected route",
      "routes:\n  - path: /v1/a\n    key_from: json:/reference\n"
      "  - path: /v1/b\n    key_from: header:X-Reference\n"
      "  - path: /hooks\n    key_from: json:/id\n    verify: none\n", 0, NULL,
      check_key_from_ordinary },
};

/* ---- route matching ---------------------------------------------------- */

static const char config_match_yaml[] =
    "routes:\n"
    "  - path: /v1/payments/refunds\n"   /* 0: exact, before the prefix */
    "    mismatch_status: 422\n"
    "  - path: /v1/payments*\n"          /* 1: prefix */
    "  - path: /v1/payments/special\n"   /* 2: shadowed by 1 */
    "  - path: /health\n"                /* 3: exact only */
    "  - path: /*\n";                    /* 4: only for the table without it */

struct config_match_case {
    const char *name;
    const char *path;
    int route;              /* index, or -1 for no match */
    bool without_catchall;  /* match against routes 0..3 only */
};

static const struct config_match_case config_match_cases[] = {
    { "exact match", "/v1/payments/refunds", 0, true },
    { "exact does not match a longer path", "/v1/payments/refunds/1", 1, true },
    { "prefix matches the bare prefix", "/v1/payments", 1, true },
    { "prefix matches below it", "/v1/payments/pay_123", 1, true },
    { "first match wins over a later exact route", "/v1/payments/special", 1, true },
    { "exact route matches only itself", "/health", 3, true },
    { "exact route refuses a suffix", "/healthz", -1, true },
    { "no match", "/v2/payments", -1, true },
    { "shorter than the prefix", "/v1/pay", -1, true },
    { "match ignores case (a spelling must not skip protection)", "/V1/payments", 1, true },
    { "catch-all prefix", "/anything", 4, false },
};

/* ---- runner ------------------------------------------------------------ */

static void run_case(const struct config_case *c)
{
    char err[512];

    unit_config_case(FILE_NAME, c->name, c->yaml, c->err_line, c->err_word, c->check, err,
                     sizeof(err));
}

static void run_match_cases(void)
{
    struct config all, some;
    char err[512];
    size_t cut = strlen(config_match_yaml) - strlen("  - path: /*\n");
    bool loaded = config_load_string(&all, config_match_yaml, strlen(config_match_yaml), FILE_NAME,
                                     err, sizeof(err)) == 0;

    if (loaded && config_load_string(&some, config_match_yaml, cut, FILE_NAME, err,
                                     sizeof(err)) != 0) {
        config_deinit(&all);
        loaded = false;
    }
    UNIT_CHECK("route matching loads", loaded, "did not load: %s", err);
    if (!loaded)
        return;
    for (size_t i = 0; i < sizeof(config_match_cases) / sizeof(config_match_cases[0]); i++) {
        const struct config_match_case *c = &config_match_cases[i];
        const struct config *cfg = c->without_catchall ? &some : &all;
        const struct route *got = config_match_route(cfg, c->path);
        int index = got ? (int)(got - cfg->routes) : -1;
        char name[160];

        snprintf(name, sizeof(name), "route %s", c->name);
        UNIT_CHECK(name, index == c->route, "%s matched route %d, expected %d", c->path, index,
                   c->route);
    }
    UNIT_CHECK("route policy of the match",
               config_match_route(&some, "/v1/payments/refunds")->policy.mismatch_status == 422,
               "wrong route");
    config_deinit(&all);
    config_deinit(&some);
}

/* ---- route patterns: normalised at load, shadowed ones named ----------- */

static const char config_pattern_yaml[] =
    "routes:\n"
    "  - path: /V1//Payments/\n"        /* 0 (line 2): exact, spelled oddly */
    "  - path: /v1\\refunds/./x/..\n"    /* 3: backslash and dot segments */
    "  - path: /v2/items/*\n"           /* 4: prefix keeping its trailing slash */
    "  - path: /v2/pay%6Dents*\n"       /* 5: encoded letter */
    "  - path: /v1/payments\n"          /* 6: the same as route 0 */
    "  - path: /v2/items/special\n"     /* 7: under route 2's prefix */
    "  - path: /v2/items\n"             /* 8: not under it */
    "  - path: /v2/payments/x*\n";      /* 9: under route 3's prefix */

static const struct config_match_case config_pattern_cases[] = {
    { "pattern normalised: odd exact spelling", "/v1/payments", 0, true },
    { "pattern normalised: backslash and dots", "/v1/refunds", 1, true },
    { "pattern prefix keeps its trailing slash", "/v2/items/1", 2, true },
    { "pattern prefix with a slash does not match the bare path", "/v2/items", 6, true },
    { "pattern with an encoded letter decodes", "/v2/payments/1", 3, true },
};

static void run_pattern_cases(void)
{
    static const char want[] =
        "f.yaml:6: warning: route '/v1/payments' is never reached: the earlier route at line 2 "
        "('/V1//Payments/') matches every path it matches\n"
        "f.yaml:7: warning: route '/v2/items/special' is never reached: the earlier route at "
        "line 4 ('/v2/items/*') matches every path it matches\n"
        "f.yaml:9: warning: route '/v2/payments/x*' is never reached: the earlier route at "
        "line 5 ('/v2/pay%6Dents*') matches every path it matches\n";
    struct config cfg;
    char err[512], out[1024], tiny[16];
    size_t n;
    int rc = config_load_string(&cfg, config_pattern_yaml, strlen(config_pattern_yaml), FILE_NAME,
                                err, sizeof(err));

    UNIT_CHECK("route patterns load", rc == 0, "did not load: %s", err);
    if (rc != 0)
        return;
    for (size_t i = 0; i < sizeof(config_pattern_cases) / sizeof(config_pattern_cases[0]); i++) {
        const struct config_match_case *c = &config_pattern_cases[i];
        const struct route *got = config_match_route(&cfg, c->path);
        int index = got ? (int)(got - cfg.routes) : -1;

        UNIT_CHECK(c->name, index == c->route, "%s matched route %d, expected %d", c->path, index,
                   c->route);
    }
    n = config_route_warnings(&cfg, "f.yaml", out, sizeof(out));
    UNIT_CHECK("shadowed routes are named", n == 3 && strcmp(out, want) == 0, "%zu\n%s", n, out);
    n = config_route_warnings(&cfg, "f.yaml", tiny, sizeof(tiny));
    UNIT_CHECK("route warnings truncate", n == 3 && strlen(tiny) == sizeof(tiny) - 1, "%zu '%s'",
               n, tiny);
    config_deinit(&cfg);
}

/* -t warns when a queued route forgets event ids before max_age. */
static void run_delivery_warning_cases(void)
{
    static const struct { const char *name, *yaml, *want; } cases[] = {
        { "retention shorter than max_age warns", "routes:\n" R_HOOK_GH
          "    retention: 1h\n    delivery: {mode: queued, max_age: 72h}\n",
          "f.yaml:2: warning: route '/hooks/gh' has retention (1h) shorter than "
          "delivery.max_age (3d): a provider's redelivery after the event id is forgotten is "
          "queued and delivered again\n" },
        { "retention as long as max_age is quiet", "routes:\n" R_HOOK_GH
          "    retention: 72h\n    delivery: {mode: queued, max_age: 72h}\n", "" },
        { "a direct route's max_age is not checked", "routes:\n" R_HOOK_GH
          "    retention: 1h\n    delivery: {mode: direct, max_age: 72h}\n", "" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct config cfg;
        char err[512], out[1024];
        size_t n;
        int rc = config_load_string(&cfg, cases[i].yaml, strlen(cases[i].yaml), FILE_NAME, err,
                                    sizeof(err));

        UNIT_CHECK(cases[i].name, rc == 0, "did not load: %s", err);
        if (rc != 0)
            continue;
        n = config_route_warnings(&cfg, "f.yaml", out, sizeof(out));
        UNIT_CHECK(cases[i].name, n == (cases[i].want[0] != '\0') &&
                   strcmp(out, cases[i].want) == 0, "%zu\n%s", n, out);
        config_deinit(&cfg);
    }
}

struct config_unit_case {
    const char *text;
    int rc;
    uint64_t value;
};

static void run_unit_cases(void)
{
    static const struct config_unit_case durations[] = {
        { "250ms", 0, 250 }, { "30s", 0, 30000 }, { "5m", 0, 300000 }, { "24h", 0, 86400000 },
        { "7d", 0, 604800000 }, { "0s", 0, 0 }, { "007s", 0, 7000 },
        { "60", -1, 0 }, { "", -1, 0 }, { "ms", -1, 0 }, { "1.5s", -1, 0 }, { "-1s", -1, 0 },
        { "+1s", -1, 0 }, { "1 s", -1, 0 }, { "1S", -1, 0 }, { "1w", -1, 0 }, { "1sx", -1, 0 },
        { "18446744073709551616ms", -1, 0 }, { "9223372036854775807ms", -1, 0 },
        /* at most 3650d: a lease deadline and Redis PX stay far from overflowing */
        { "3650d", 0, 315360000000ull }, { "315360000000ms", 0, 315360000000ull },
        { "315360000001ms", -1, 0 }, { "3651d", -1, 0 }, { "87601h", -1, 0 },
        { "9223372036854775808ms", -1, 0 },
    };
    static const struct config_unit_case sizes[] = {
        { "512B", 0, 512 }, { "64KiB", 0, 65536 }, { "1MiB", 0, 1048576 },
        { "2GiB", 0, 2147483648ull }, { "0B", 0, 0 },
        { "1", -1, 0 }, { "1KB", -1, 0 }, { "1kib", -1, 0 }, { "1M", -1, 0 }, { "-1B", -1, 0 },
        { "B", -1, 0 }, { "18446744073709551616B", -1, 0 },
    };
    char name[64];

    for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++) {
        uint64_t ms = 0;
        int rc = config_parse_duration_ms(durations[i].text, &ms);

        snprintf(name, sizeof(name), "duration '%s'", durations[i].text);
        UNIT_CHECK(name, rc == durations[i].rc && (rc != 0 || ms == durations[i].value),
                   "rc %d value %llu", rc, (unsigned long long)ms);
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t bytes = 0;
        int rc = config_parse_size(sizes[i].text, &bytes);

        snprintf(name, sizeof(name), "size '%s'", sizes[i].text);
        UNIT_CHECK(name, rc == sizes[i].rc && (rc != 0 || bytes == sizes[i].value),
                   "rc %d value %zu", rc, bytes);
    }
    UNIT_CHECK("method bits", config_method_bit("PATCH") == METHOD_PATCH &&
               config_method_bit("patch") == 0 && config_method_bit("TRACE") == 0,
               "PATCH %u patch %u TRACE %u", config_method_bit("PATCH"), config_method_bit("patch"),
               config_method_bit("TRACE"));
}

static void run_file_cases(const char *sample)
{
    struct config cfg;
    char err[512];
    bool loaded = config_load(&cfg, "/nonexistent/idempotency-proxy.yaml", err, sizeof(err)) == 0;

    UNIT_CHECK("missing file names the file",
               !loaded && strstr(err, "/nonexistent/idempotency-proxy.yaml: cannot open") == err,
               "%s", err);
    config_deinit(&cfg);
    if (sample == NULL)
        return;
    loaded = config_load(&cfg, sample, err, sizeof(err)) == 0;
    UNIT_CHECK("sample config loads", loaded, "%s", err);
    if (!loaded)
        return;
    /* the demo relies on these (the documented defaults) */
    UNIT_CHECK("sample config has the demo's listen, upstream, redis and route",
               STREQ(cfg.listen.host, "0.0.0.0") && cfg.listen.port == 8080 &&
               STREQ(cfg.upstream_base, "http://127.0.0.1:3000") &&
               STREQ(cfg.redis_host, "127.0.0.1") && cfg.redis_port == 6379 && cfg.redis_db == 0 &&
               config_match_route(&cfg, "/v1/payments") != NULL &&
               config_match_route(&cfg, "/v1/payments/1")->policy.require_key,
               "listen %s:%u upstream %s", cfg.listen.host, cfg.listen.port, cfg.upstream_base);
    config_deinit(&cfg);
}

/* The token files the admin cases name through ${TEST_IDEM_TOKEN...}, in a temp dir. */
static const struct {
    const char *env, *name, *text;
} token_files[] = {
    { "TEST_IDEM_TOKEN", "good", TEST_TOKEN "\n" },
    { "TEST_IDEM_TOKEN_CRLF", "crlf", TEST_TOKEN "\r\n" },
    { "TEST_IDEM_TOKEN_EMPTY", "empty", "" },
    { "TEST_IDEM_TOKEN_NL", "nl", "\n" },
    { "TEST_IDEM_TOKEN_SHORT", "short", "0123456789abcdef\n" },
    { "TEST_IDEM_TOKEN_SPACE", "space", "0123456789abcdef 0123456789abcdef0123\n" },
    { "TEST_IDEM_TOKEN_TWO", "two", TEST_TOKEN "\n" TEST_TOKEN "\n" },
};
static char token_dir[64];

static void write_token_files(void)
{
    snprintf(token_dir, sizeof(token_dir), "/tmp/idem-test-config.XXXXXX");
    if (mkdtemp(token_dir) == NULL) {
        UNIT_CHECK("token files written", false, "mkdtemp failed");
        return;
    }
    for (size_t i = 0; i < sizeof(token_files) / sizeof(token_files[0]); i++) {
        char path[128];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", token_dir, token_files[i].name);
        f = fopen(path, "w");
        UNIT_CHECK("token files written", f != NULL, "%s", path);
        if (f != NULL) {
            fputs(token_files[i].text, f);
            fclose(f);
        }
        setenv(token_files[i].env, path, 1);
    }
}

static void remove_token_files(void)
{
    for (size_t i = 0; i < sizeof(token_files) / sizeof(token_files[0]); i++) {
        char path[128];

        snprintf(path, sizeof(path), "%s/%s", token_dir, token_files[i].name);
        remove(path);
    }
    rmdir(token_dir);
}

int main(int argc, char **argv)
{
    setenv("TEST_IDEM_HOST", "legacy.local", 1);
    setenv("TEST_IDEM_PASSWORD", "s3cret", 1);
    setenv("TEST_IDEM_REGION", "eu-1", 1);
    unsetenv("TEST_IDEM_UNSET");
    write_token_files();

    for (size_t i = 0; i < sizeof(config_cases) / sizeof(config_cases[0]); i++)
        run_case(&config_cases[i]);
    for (size_t i = 0; i < sizeof(key_rule_cases) / sizeof(key_rule_cases[0]); i++)
        run_case(&key_rule_cases[i]);
    run_match_cases();
    run_pattern_cases();
    run_delivery_warning_cases();
    run_unit_cases();
    run_file_cases(argc > 1 ? argv[1] : NULL);
    remove_token_files();
    UNIT_DONE();
}
