/*
 * config_finish.c - pass 3 (config.c): what the file left unset is
 * inherited (a route from `defaults:`, everything from the built-in
 * defaults), then the checks that involve several keys: one place says
 * where Redis is, lease and retention against redis.timeout, webhook rules,
 * delivery, the memory budget. The redis section's own are config_redis.c's
 * and config_replicas.c's; the keyring is config_keyring.c's.
 */
#include "config_int.h"
#include "headers.h"
#include "webhook.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The bit of policy key name in a route's set mask. */
static uint32_t config_policy_bit(const char *name)
{
    int i = config_key_index(config_policy_keys, name);

    return i < 0 ? 0 : 1u << i;
}

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
    if (config_check_secret_source(ld, config_lookup(&ld->user, delivery, "sign"),
                                   "delivery.sign", "secret") < 0)
        return -1;
    if (!policy->webhook)
        return config_error(ld, delivery, "delivery is for webhook routes (key_from and "
                            "verify): queued delivery dedupes by the provider's event id");
    if (d->mode != DELIVERY_QUEUED && (d->n_sign_secrets > 0 || d->rate_count > 0))
        return config_error(ld, config_blame(&ld->user, delivery, "sign", "rate"),
                            "delivery.sign and delivery.rate are for queued delivery (mode: "
                            "queued)");
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
    if (d->dead_retention_ms < d->max_age_ms) {
        yaml_node_t *where = config_lookup(&ld->user, delivery, "dead_retention");
        char age[32];

        config_format_duration(d->dead_retention_ms, vt, sizeof(vt));
        config_format_duration(d->max_age_ms, age, sizeof(age));
        return config_error(ld, where != NULL ? where : delivery,
                            "delivery.dead_retention (%s) must be at least delivery.max_age "
                            "(%s): a dead letter must outlive the deliveries it stands for", vt,
                            age);
    }
    return 0;
}

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
    if (config_check_fingerprint(ld, policy, map) < 0)
        return -1;
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
    config_format_duration(policy->retention_ms, retention, sizeof(retention));
    return config_error(ld, config_blame(&ld->user, map, "retention", "lease"),
                        "retention (%s) must be at least lease (%s)", retention, lease);
}

/*
 * Webhook rules, then inheritance: `defaults:` first, the built-in
 * defaults for what neither sets (errors.format: defaults:', else the top
 * level's; replayed_header_on_first: the top level's). Then the checks of
 * the whole policy.
 *
 * A route with key_from is a webhook receiver when it also writes verify
 * out (none included): signed deliveries only, fingerprint none, non-2xx
 * releases, an event id per route. key_from without verify is an ordinary
 * protected route that reads its key from that header or the JSON body
 * (docs/client-contract.md#the-key-in-the-body); a queued delivery
 * (delivery:) is a webhook receiver's, so it needs verify.
 */
static int config_finish_route(struct config_loader *ld, size_t i)
{
    struct route_policy *policy = &ld->cfg->routes[i].policy;
    yaml_node_t *map = ld->route_nodes[i];
    uint32_t *set = &ld->set_routes[i];
    yaml_node_pair_t *delivery = config_lookup_pair(&ld->user, map, "delivery");
    yaml_node_t *verify, *secret, *secret_file;

    ld->cur = &ld->user;
    if (*set & config_policy_bit("key_from")) {
        if (policy->key_from == KEY_FROM_HEADER) {
            if (*set & config_policy_bit("key_header"))
                return config_error(ld, config_lookup(&ld->user, map, "key_header"),
                                    "key_header and key_from: header:... both name the key "
                                    "header; keep one");
            *set |= config_policy_bit("key_header");
        }
        policy->webhook = (*set & config_policy_bit("verify")) != 0;
        /* unsigned, anyone who reaches the route could pre-claim a provider's event id */
        if (!policy->webhook && delivery != NULL)
            return config_error(ld, config_node(&ld->user, delivery->key),
                                "delivery needs verify (stripe, github or standard-webhooks): "
                                "a queued route takes the provider's event id as it comes, and "
                                "without a signature check anyone who reaches this route can "
                                "pre-claim one; write verify: none to accept that");
        /* providers change the body between deliveries (a retry adds attempt counts) */
        if (policy->webhook && !(*set & config_policy_bit("fingerprint"))) {
            policy->fingerprint = FINGERPRINT_NONE;
            *set |= config_policy_bit("fingerprint");
            /* nor the fingerprint_ignore of defaults:, which is for their json fingerprint */
            *set |= config_policy_bit("fingerprint_ignore");
        }
    }
    if (config_apply_mapping(ld, &ld->user, config_lookup(&ld->user, ld->user.root, "defaults"),
                             config_policy_keys, policy, set) < 0 ||
        config_apply_mapping(ld, &ld->builtin,
                             config_lookup(&ld->builtin, ld->builtin.root, "defaults"),
                             config_policy_keys, policy, set) < 0)
        return -1;
    if (!(*set & config_policy_bit("errors")))
        policy->error_format = ld->cfg->defaults.error_format;
    if (!(*set & config_policy_bit("replayed_header_on_first")))
        policy->replayed_header_on_first = ld->cfg->replayed_header_on_first;

    ld->cur = &ld->user;
    if (config_check_secret_source(ld, map, "", "secret") < 0)
        return -1;
    verify = config_lookup(&ld->user, map, "verify");
    secret = config_lookup(&ld->user, map, "secret");
    secret_file = config_lookup(&ld->user, map, "secret_file");
    if (policy->verify != VERIFY_NONE && policy->n_secrets == 0)
        return config_error(ld, verify, "verify needs a secret (one string, or a list of two "
                            "during a rotation) or a secret_file");
    if (policy->verify == VERIFY_NONE && (secret != NULL || secret_file != NULL))
        return config_error(ld, secret != NULL ? secret : secret_file, "%s without verify: set "
                            "verify to standard-webhooks, github or stripe",
                            secret != NULL ? "secret" : "secret_file");
    free(policy->record_source);
    policy->record_source = config_record_source(policy, ld->cfg->routes[i].match,
                                                  ld->cfg->routes[i].prefix);
    if (policy->record_source == NULL)
        return config_oom(ld, map);
    for (size_t i = 0; i < policy->n_secrets; i++) {
        const char *why = NULL;
        yaml_node_t *file;

        /* a mistyped secret fails here, not as a 401 on every delivery */
        if (webhook_secret_check(policy->verify, policy->secrets[i], &why) == 0)
            continue;
        if (secret_file == NULL)
            return config_error(ld, secret, "bad secret: %s", why != NULL ? why : "unusable");
        file = config_item(ld, secret_file, i); /* the path as written, never the secret */
        return config_error(ld, file, "secret_file: %s: bad secret: %s",
                            (const char *)file->data.scalar.value,
                            why != NULL ? why : "unusable");
    }
    if (config_check_delivery(ld, policy, map) < 0 || config_check_key_rules(ld, policy, map) < 0)
        return -1;
    return config_check_policy(ld, policy, map);
}

/*
 * max_buffered >= max_request_body + the answer reservation: a request is
 * admitted when its body and the reservation for its answer fit (budget.h),
 * so a smaller budget would refuse a request at the limits with
 * 503 overloaded forever, even on an idle proxy.
 */
static int config_check_limits(struct config_loader *ld)
{
    const struct config *cfg = ld->cfg;
    size_t reservation = config_answer_reservation(cfg);
    yaml_node_t *limits = config_lookup(&ld->user, ld->user.root, "limits");
    yaml_node_t *where = config_lookup(&ld->user, limits, "max_buffered");
    char buffered[32], body[32], reserved[32];

    if (cfg->stream_window == 0) /* a streamed exchange must move bytes */
        return config_error(ld, config_lookup(&ld->user, limits, "stream_window"),
                            "stream_window must be more than 0");
    if (cfg->max_request_body <= cfg->max_buffered &&
        reservation <= cfg->max_buffered - cfg->max_request_body)
        return 0;
    if (where == NULL) /* the default budget: blame the limit the file raised */
        where = config_lookup(&ld->user, limits, "max_request_body");
    config_format_size(cfg->max_buffered, buffered, sizeof(buffered));
    config_format_size(cfg->max_request_body, body, sizeof(body));
    config_format_size(reservation, reserved, sizeof(reserved));
    return config_error(ld, where, "max_buffered (%s) must be at least max_request_body (%s) + "
                        "%s: every request reserves its body and room for its answer "
                        "(max_stored_response, at most 64KiB)", buffered, body, reserved);
}

/*
 * upstream.record_id_header must not be a route's key header or one of its
 * scope headers ('-' and '_' alike, header_name_alike): the proxy drops the
 * client's fields of that name from the requests it forwards, so the
 * upstream would no longer see what the client sent (and a key read by the
 * upstream too would become the record id).
 */
static int config_check_record_id_header(struct config_loader *ld)
{
    const struct config *cfg = ld->cfg;
    const char *name = cfg->upstream_record_id_header;
    yaml_node_t *where = config_lookup(&ld->user,
                                       config_lookup(&ld->user, ld->user.root, "upstream"),
                                       "record_id_header");

    if (name == NULL)
        return 0;
    for (size_t i = 0; i < cfg->n_routes; i++) {
        const struct route_policy *policy = &cfg->routes[i].policy;
        bool clash = policy->key_from == KEY_FROM_HEADER &&
                     header_name_alike(policy->key_header, name);

        for (size_t j = 0; j < policy->n_scope_headers && !clash; j++)
            clash = header_name_alike(policy->scope_headers[j], name);
        if (clash)
            return config_error(ld, where != NULL ? where : ld->route_nodes[i],
                                "upstream.record_id_header '%s' is also the key header or a "
                                "scope header of route %s (line %d): the proxy replaces that "
                                "field with the record id on every request it forwards; give "
                                "record_id_header another name, or \"\" to send none", name,
                                cfg->routes[i].path, cfg->routes[i].line);
    }
    return 0;
}

/*
 * health_listen takes a port of its own: neither listen's nor admin_listen's
 * (CONTRACT section 16). The error names health_listen's line.
 */
static int config_check_health_listen(struct config_loader *ld)
{
    const struct config *cfg = ld->cfg;
    yaml_node_t *where = config_lookup(&ld->user, ld->user.root, "health_listen");
    const struct endpoint *other = NULL;
    const char *name = NULL;

    if (config_endpoints_clash(&cfg->health_listen, &cfg->listen)) {
        other = &cfg->listen;
        name = "listen";
    } else if (config_endpoints_clash(&cfg->health_listen, &cfg->admin_listen)) {
        other = &cfg->admin_listen;
        name = "admin_listen";
    }
    if (other == NULL)
        return 0;
    return config_error(ld, where, "health_listen and %s use the same port %u; give "
                        "health_listen another port, or \"\" to disable it", name,
                        (unsigned)other->port);
}

int config_finish(struct config_loader *ld)
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
    /* defaults: without errors: takes the top level's format; the routes take defaults:' */
    if (ld->set_defaults_errors == 0)
        cfg->defaults.error_format = cfg->error_format;

    if (config_finish_redis(ld) < 0)
        return -1;
    if (config_check_replicas(ld, config_lookup(&ld->user, ld->user.root, "redis")) < 0)
        return -1;

    if (config_endpoints_clash(&cfg->admin_listen, &cfg->listen))
        return config_error(ld, config_blame(&ld->user, ld->user.root, "admin_listen", "listen"),
                            "admin_listen and listen use the same port %u; give "
                            "admin_listen another port, or \"\" to disable it",
                            (unsigned)cfg->listen.port);

    if (config_check_health_listen(ld) < 0)
        return -1;

    if (cfg->admin_listen.host != NULL && cfg->admin_token_file == NULL &&
        cfg->admin_operators_file == NULL && !config_endpoint_is_loopback(&cfg->admin_listen)) {
        yaml_node_t *where = config_lookup(&ld->user, ld->user.root, "admin_listen");

        bool v6 = strchr(cfg->admin_listen.host, ':') != NULL;

        return config_error(ld, where, "admin_listen %s%s%s:%u is not a loopback address and "
                            "neither admin.operators_file nor admin.token_file is set: anyone who "
                            "reaches that port could purge records (a retry would then execute "
                            "again) and redeliver dead letters; name the operators "
                            "(admin.operators_file) or set admin.token_file, or bind "
                            "admin_listen to "
                            "127.0.0.1 or ::1 (a host name is not taken as loopback)",
                            v6 ? "[" : "", cfg->admin_listen.host, v6 ? "]" : "",
                            (unsigned)cfg->admin_listen.port);
    }

    if (config_check_limits(ld) < 0)
        return -1;
    if (config_check_policy(ld, &cfg->defaults,
                            config_lookup(&ld->user, ld->user.root, "defaults")) < 0 ||
        config_check_key_rules(ld, &cfg->defaults,
                               config_lookup(&ld->user, ld->user.root, "defaults")) < 0)
        return -1;
    for (size_t i = 0; i < cfg->n_routes; i++) {
        if (config_finish_route(ld, i) < 0)
            return -1;
    }
    if (config_check_record_id_header(ld) < 0)
        return -1;
    if (config_finish_operators(ld) < 0)
        return -1;
    /* last: the checks above cost nothing, this one reads a file and derives keys */
    return config_finish_keyring(ld);
}
