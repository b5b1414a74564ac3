/*
 * config.h - the YAML configuration as plain structs (README "Configuration").
 *
 * Parsed in three passes, twemproxy-style: structure (libyaml document with
 * line marks), typed setters into fields that start "unset", then defaults
 * and cross-field checks (config.c, config_set.c, config_value.c). These
 * structs are read-only once loaded; runtime objects (listeners, connections)
 * live elsewhere and point into them. Route patterns and their matching are
 * route.c's (route.h); the config_* entry points below call it.
 */
#ifndef IDEM_CONFIG_H
#define IDEM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"
#include "route.h"

/* `errors.format`: the shape of the answers the proxy makes itself. */
enum error_format { ERROR_FORMAT_PROBLEM, ERROR_FORMAT_STRIPE };

/*
 * `log.access`: which requests get an access-log line. ACCESS_LOG_ERRORS
 * keeps the lines of outcome_is_error (outcome.h) and of a status >= 400.
 */
enum access_log { ACCESS_LOG_ALL, ACCESS_LOG_ERRORS, ACCESS_LOG_OFF };

/*
 * Longest redis.key_prefix, in bytes. A record's Redis key is
 * "PREFIX:{RECORD_ID}" and must never be cut (two identities would share
 * one record): RECORD_KEY_MAX (fingerprint.h) is derived from this.
 */
#define CONFIG_MAX_KEY_PREFIX 128

/*
 * Longest duration any key takes, in ms: 3650d. A lease deadline is
 * written as 16 decimal digits in the record (record.h) and Redis PX
 * must not overflow, so now + any duration has to stay far below both.
 */
#define CONFIG_MAX_DURATION_MS (3650ull * 24 * 60 * 60 * 1000)

struct endpoint {
    char *host;                     /* owned, IPv6 without brackets; NULL when disabled */
    uint16_t port;
};

/* Most replicas `redis.min_replicas` may ask for. */
#define CONFIG_MAX_MIN_REPLICAS 16

/* Most sentinels `redis.sentinel.addresses` may list. */
#define CONFIG_MAX_SENTINELS 16

/* Most seed nodes `redis.cluster.addresses` may list. */
#define CONFIG_MAX_CLUSTER_SEEDS 16

/* Most worker threads `workers:` may ask for. */
#define CONFIG_MAX_WORKERS 64

struct config {
    _Atomic unsigned refs;          /* config_create / config_ref / config_unref */
    struct endpoint listen;
    struct endpoint admin_listen;   /* host NULL: admin listener disabled */
    unsigned workers;               /* threads serving `listen`, 1..CONFIG_MAX_WORKERS;
                                       0 for `auto` (config_workers resolves it) */

    char *upstream_url;             /* as written; owned */
    char *upstream_base;            /* scheme://host:port[/path] without a trailing '/'
                                       (http://localhost for a unix socket); owned */
    char *upstream_unix_path;       /* unix socket, or NULL; owned */
    uint64_t upstream_connect_timeout_ms;
    uint64_t upstream_timeout_ms;

    char *redis_url;                /* as written; may hold the password: never log it; owned */
    char *redis_host;               /* TCP host, or NULL for a unix socket; owned */
    uint16_t redis_port;            /* 0 for a unix socket */
    char *redis_unix_path;          /* owned or NULL */
    int redis_db;
    char *redis_username;           /* ACL user for AUTH USER PASSWORD; owned or NULL (none:
                                       AUTH PASSWORD, the default user) */
    char *redis_password;           /* owned or NULL (empty counts as none) */
    bool redis_tls;                 /* rediss://, redis.sentinel.tls or redis.cluster.tls: TLS
                                       to Redis (with Sentinel: to the sentinels and the data
                                       nodes; with a cluster: to every node) */
    char *redis_tls_ca_file;        /* PEM CAs that sign the server's certificate; NULL: the
                                       system's default CAs; owned */
    char *redis_tls_cert_file;      /* client certificate chain (mutual TLS), PEM; owned or NULL */
    char *redis_tls_key_file;       /* its private key, PEM, unencrypted; owned or NULL */
    char *redis_tls_server_name;    /* name the certificate must carry and SNI; NULL: the
                                       URL's host; owned */
    bool redis_tls_verify;          /* false: any certificate is accepted (warned at startup) */
    /* redis.sentinel (README "Redis in production"): the sentinels name the primary */
    char *redis_sentinel_master;    /* the master's name at the sentinels; NULL: no Sentinel,
                                       redis.url says where Redis is; owned */
    struct endpoint redis_sentinels[CONFIG_MAX_SENTINELS]; /* in the order written */
    size_t n_redis_sentinels;
    char *redis_sentinel_username;  /* the sentinels' own ACL user; owned or NULL */
    char *redis_sentinel_password;  /* owned or NULL (empty counts as none) */
    /* redis.cluster (README "Redis Cluster"): the slot map comes from any of these seeds */
    struct endpoint redis_cluster[CONFIG_MAX_CLUSTER_SEEDS]; /* in the order written */
    size_t n_redis_cluster;         /* 0: no cluster */
    char *key_prefix;               /* owned */
    unsigned redis_min_replicas;    /* WAIT for this many replicas after a claim before it is
                                       forwarded, 0..CONFIG_MAX_MIN_REPLICAS; 0: no WAIT */
    uint64_t redis_replica_timeout_ms; /* WAIT's timeout, ms, > 0 */
    uint64_t redis_timeout_ms;

    size_t max_request_body;        /* bytes */
    size_t max_stored_response;     /* bytes */

    enum error_format error_format; /* problem (RFC 9457) or stripe ({"error": {...}}) */
    enum access_log access_log;     /* log.access: all, errors or off */

    struct route_policy defaults;
    struct route *routes;           /* owned array */
    size_t n_routes;
};

/*
 * Load and check FILE into *cfg (zeroed by the callee first). Returns 0;
 * keys the file leaves out take the README "Configuration" defaults, and each
 * route inherits `defaults:` key by key (a webhook route with key_from
 * defaults to fingerprint none). Release with config_deinit.
 * On error returns -1, leaves *cfg empty, and writes one line into err
 * (errlen bytes, truncated to fit) of the form "FILE:LINE: what is wrong"
 * ("FILE: ..." when no line applies, e.g. the file cannot be read).
 * ${VAR} in values is expanded from the environment; an unset VAR is an
 * error that names it, except in redis.username, redis.password and
 * redis.sentinel's username and password (unset reads as empty).
 */
int config_load(struct config *cfg, const char *file, char *err, size_t errlen);

/*
 * Same from yaml, len bytes in memory (borrowed, need not be NUL-terminated);
 * name (borrowed) is the FILE of messages. Same returns. For unit tests.
 */
int config_load_string(struct config *cfg, const char *yaml, size_t len,
                       const char *name, char *err, size_t errlen);

/*
 * Free everything config_load allocated (not cfg itself) and zero *cfg; safe
 * on a zeroed or failed config. Not for a config_create one: config_unref it.
 */
void config_deinit(struct config *cfg);

/*
 * Load FILE into a new heap config holding one reference: shared by the
 * worker threads and the exchanges that started under it, freed with the
 * last reference on whichever thread drops it (config_unref). NULL on error,
 * with "FILE:LINE: what" in err (errlen bytes, as config_load).
 */
struct config *config_create(const char *file, char *err, size_t errlen);

/* Take a reference to a config_create config (atomically: any thread); returns cfg. */
struct config *config_ref(struct config *cfg);

/* Drop a reference (atomically: any thread); the last one frees cfg. NULL is fine. */
void config_unref(struct config *cfg);

/*
 * The first route whose normalised pattern (route->match) matches path (path
 * only, no query; callers pass it through path_normalize first), compared
 * case-insensitively; NULL when none does (then the request is a plain
 * pass-through, section 4.1). A pattern matches exactly, or, when it ended in
 * '*', every path that starts with the rest ("/v1/payments*" matches
 * /v1/payments, /v1/payments/1 and /v1/paymentsX). No decoding. Returned
 * pointer is owned by cfg (valid while cfg is). route_match does the work.
 */
const struct route *config_match_route(const struct config *cfg, const char *path);

/*
 * Routes no request can reach because an earlier route takes every path they
 * match (first match wins): an earlier prefix route whose prefix starts their
 * normalised pattern, or an earlier identical pattern. Writes one line per
 * such route into out (caller-owned), "FILE:LINE: warning: ...\n" (file,
 * borrowed, names cfg's file), truncated to outsize bytes and always
 * NUL-terminated (outsize > 0). Returns how many routes are shadowed (no
 * error return). Pure; for `-t` and the startup log.
 */
size_t config_route_warnings(const struct config *cfg, const char *file, char *out,
                             size_t outsize);

/*
 * The number of worker threads cfg asks for: `workers:` as written, or for
 * `auto` the CPUs this process may run on (sched_getaffinity), at most
 * CONFIG_MAX_WORKERS. Always at least 1 (1 when the affinity cannot be read);
 * no error return.
 */
unsigned config_workers(const struct config *cfg);

/*
 * The enum method_bit for an HTTP method name (borrowed), or 0 if unknown.
 * Case-sensitive (RFC 9110 9.1): "patch" is unknown.
 */
unsigned config_method_bit(const char *name);

/*
 * Parse "250ms", "30s", "5m", "24h", "7d" into *out_ms, milliseconds: a whole
 * number and a required unit, no sign or spaces, at most
 * CONFIG_MAX_DURATION_MS (3650d). Returns 0, or -1 with *out_ms untouched.
 */
int config_parse_duration_ms(const char *text, uint64_t *out_ms);

/*
 * Parse "512B", "64KiB", "1MiB", "1GiB" into *out_bytes (powers of 1024), at
 * most SIZE_MAX. Returns 0, or -1 with *out_bytes untouched.
 */
int config_parse_size(const char *text, size_t *out_bytes);

/*
 * Whether SIGHUP may swap running for next without changing the record id
 * of any key a client may still retry (README "Reload"). Pure: compares the
 * two configs only. Route insertions, removals and reordering are fine (a
 * record id does not depend on which route matched, fingerprint.h); refused:
 * redis.key_prefix changing, and for a route pattern present in both (same
 * path and '*', compared case-insensitively as matching does) its key
 * source (key_header / key_from) or its scope_headers changing.
 * Returns NULL, or a static string naming what changed, for the log line.
 * The route part is route_reload_refusal's.
 */
const char *config_reload_refusal(const struct config *running, const struct config *next);

/*
 * Whether a and b have the same queued webhook routes (by path as written)
 * with the same delivery settings (README "Webhook inbox"). Each worker's
 * inbox consumers are made at startup from the boot config, so a reload that
 * adds, removes or retunes one needs a restart. Pure.
 */
bool config_same_inboxes(const struct config *a, const struct config *b);

#endif
