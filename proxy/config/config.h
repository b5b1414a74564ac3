/*
 * config.h - the YAML configuration file as plain structs.
 *
 * Parsed in three passes, twemproxy-style: structure (libyaml document with
 * line marks), typed setters into fields that start "unset", then defaults
 * and cross-field checks (config.c runs them over the key tables of
 * config_schema.c, which also give each key its reload class: a reload is
 * config_reload_check's). These structs are read-only once loaded; runtime
 * objects (listeners, connections) live elsewhere and point into them. Route patterns and their matching are
 * route.c's (route.h); the config_* entry points below call it.
 */
#ifndef IDEM_CONFIG_H
#define IDEM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bearer.h"
#include "policy.h"
#include "route.h"

struct keyring;

/*
 * `log.access`: which requests get an access-log line. ACCESS_LOG_ERRORS
 * keeps the lines of outcome_is_error (outcome.h) and of a status >= 400.
 */
enum access_log { ACCESS_LOG_ALL, ACCESS_LOG_ERRORS, ACCESS_LOG_OFF };

/*
 * `readiness`: what /readyz answers 503 for (CONTRACT section 16). STORE:
 * the store unable to take claims, or the drain; PROCESS: only the drain
 * (keyed requests still get 503 store-unavailable while the store is away).
 */
enum readiness { READINESS_STORE, READINESS_PROCESS };

/*
 * Longest redis.key_prefix, in bytes. A record's Redis key is
 * "PREFIX:{RECORD_ID}" and must never be cut (two identities would share
 * one record): RECORD_KEY_MAX (record_id.h) is derived from this.
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

/* Most addresses an endpoint list holds. */
#define CONFIG_MAX_ENDPOINTS 16

/* Most sentinels `redis.sentinel.addresses` may list. */
#define CONFIG_MAX_SENTINELS CONFIG_MAX_ENDPOINTS

/* Most seed nodes `redis.cluster.addresses` may list. */
#define CONFIG_MAX_CLUSTER_SEEDS CONFIG_MAX_ENDPOINTS

/*
 * A list of host:port addresses in the order written: redis.sentinel.addresses
 * and redis.cluster.addresses. The hosts are owned (config_deinit frees them).
 */
struct endpoint_list {
    struct endpoint at[CONFIG_MAX_ENDPOINTS];
    size_t n;                       /* 0: the list is empty (no Sentinel, no cluster) */
};

/* Most worker threads `workers:` may ask for. */
#define CONFIG_MAX_WORKERS 64
#define CONFIG_MAX_CONNECTIONS 1000000 /* limits.max_connections at most */
#define CONFIG_HELD_REFRESH_MIN_MS 1000     /* admin.held_refresh at least: 1s */
#define CONFIG_HELD_REFRESH_MAX_MS 3600000  /* and at most: 1h */
/* Most earlier upstream.record_id_header names a running proxy still drops (the newest kept). */
#define CONFIG_RECORD_ID_RETIRED_MAX 8

/*
 * The rights of an admin operator (CONTRACT section 16), a bit set.
 * resolve and purge include read: each change is made after reading the
 * record (its ETag for If-Match, its state).
 */
enum config_right {
    CONFIG_RIGHT_READ = 1,      /* GET of records, the lookup, the listing, the inbox */
    CONFIG_RIGHT_RESOLVE = 2,   /* resolve, extend, inbox pause, resume, redeliver */
    CONFIG_RIGHT_PURGE = 4,     /* purge, bulk purge, dead-letter delete */
};
#define CONFIG_RIGHTS_ALL (CONFIG_RIGHT_READ | CONFIG_RIGHT_RESOLVE | CONFIG_RIGHT_PURGE)

/* Bytes of an operator's name at most (admin.operators_file). */
#define CONFIG_OPERATOR_NAME_MAX 64
/* Operators one file may name at most. */
#define CONFIG_OPERATORS_MAX 256

/*
 * One admin operator: admin.operators_file's entry, or admin.token_file's
 * token as the operator "token" with every right. Never the token itself.
 */
struct config_operator {
    char name[CONFIG_OPERATOR_NAME_MAX + 1];
    char token_sha256[65];          /* the token's SHA-256, 64 lowercase hex digits */
    unsigned rights;                /* enum config_right bits; never 0 */
};

struct config {
    _Atomic unsigned refs;          /* config_create / config_ref / config_unref */
    struct endpoint listen;
    struct endpoint admin_listen;   /* host NULL: admin listener disabled */
    struct endpoint health_listen;  /* the probes' own listener; host NULL: none (then
                                       admin_listen serves the probes and /metrics) */
    enum readiness readiness;       /* readiness: what /readyz follows; live */
    char *admin_token_file;         /* admin.token_file as written; NULL: none, and then
                                       admin_listen must be a loopback address; owned */
    struct bearer_token admin_token; /* that file's token, as its digest (admin_token_file set) */
    char *admin_operators_file;     /* admin.operators_file as written; NULL: none; owned */
    struct config_operator *operators; /* every operator the admin listener knows: the file's,
                                       then admin.token_file's "token"; owned */
    size_t n_operators;             /* 0: no token is asked (a loopback admin_listen) */
    uint64_t held_refresh_ms;       /* admin.held_refresh: the census of held records runs and
                                       is read this often, ms (CONFIG_HELD_REFRESH_MIN_MS..MAX) */
    unsigned workers;               /* threads serving `listen`, 1..CONFIG_MAX_WORKERS;
                                       0 for `auto` (config_workers resolves it) */

    char *upstream_url;             /* as written; owned */
    char *upstream_base;            /* scheme://host:port[/path] without a trailing '/'
                                       (http://localhost for a unix socket); owned */
    char *upstream_unix_path;       /* unix socket, or NULL; owned */
    uint64_t upstream_connect_timeout_ms;
    uint64_t upstream_timeout_ms;
    char *upstream_record_id_header; /* upstream.record_id_header: the field that carries the
                                       record id on each forwarded protected request; NULL:
                                       none (written ""); owned */
    char **upstream_record_id_retired; /* the names record_id_header had before the reloads
                                       since the start, oldest first, at most
                                       CONFIG_RECORD_ID_RETIRED_MAX: a client's field of one of
                                       them is still dropped (config_retire_record_id_header);
                                       each owned, like the array; NULL when none */
    size_t n_upstream_record_id_retired;

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
    /* redis.sentinel: the sentinels name the primary, asked again on every reconnect */
    char *redis_sentinel_master;    /* the master's name at the sentinels; NULL: no Sentinel,
                                       redis.url says where Redis is; owned */
    struct endpoint_list redis_sentinels;
    char *redis_sentinel_username;  /* the sentinels' own ACL user; owned or NULL */
    char *redis_sentinel_password;  /* owned or NULL (empty counts as none) */
    /* redis.cluster: the slot map comes from any of these seeds */
    struct endpoint_list redis_cluster; /* n 0: no cluster */
    /*
     * key_prefix, redis_min_replicas and redis_timeout_ms are read from a
     * request's config and from the boot config alike (the exchange and the
     * store): a reload must never change them (config_reload_check;
     * test_config_reload checks they stay so).
     */
    char *key_prefix;               /* owned; an identity key */
    unsigned redis_min_replicas;    /* WAIT for this many replicas after a claim before it is
                                       forwarded, 0..CONFIG_MAX_MIN_REPLICAS; 0: no WAIT */
    uint64_t redis_replica_timeout_ms; /* WAIT's timeout, ms, > 0 */
    uint64_t redis_timeout_ms;      /* per command, ms */
    /* redis.reassert (store_reassert.c): writes put back after a failover */
    uint64_t redis_reassert_window_ms; /* how long a write is kept to be put back, ms; 0: off */
    uint64_t redis_reassert_grace_ms;  /* new claims refused after a new primary, ms */
    size_t redis_reassert_max_bytes;   /* the journal's bound, bytes, the process's (split
                                          evenly among the workers) */

    size_t max_request_body;        /* bytes */
    size_t max_stored_response;     /* bytes */
    size_t max_buffered;            /* bytes: the budget of buffered bytes (budget.h), at least
                                       max_request_body + config_answer_reservation; a reload
                                       applies it */
    size_t stream_window;           /* bytes a streamed exchange holds per direction, > 0 */
    unsigned max_connections;       /* client connections open at once, the process's total,
                                       split evenly among the workers; 1..CONFIG_MAX_CONNECTIONS */
    uint64_t header_timeout_ms;     /* first byte of a request head -> its end, ms, > 0 */
    uint64_t idle_timeout_ms;       /* a kept-alive connection's wait for a request, and a
                                       stalled read or write, ms, > 0 */

    enum error_format error_format; /* problem (RFC 9457) or stripe ({"error": {...}}): the
                                       answers of requests no route matches, and the default
                                       of defaults: and the routes (policy.h) */
    bool replayed_header_on_first;  /* the routes' default: executed answers carry
                                       Idempotent-Replayed: false */
    enum access_log access_log;     /* log.access: all, errors or off */
    char *audit_log;                /* log.audit: "stdout", "stderr" or a file; owned */

    struct route_policy defaults;
    struct route *routes;           /* owned array */
    size_t n_routes;

    /*
     * encryption.keyring: read with the rest of the file (config_keyring.c),
     * so a SIGHUP rereads it and a bad keyring refuses the reload like a bad
     * config; an exchange holds its config and so the keyring it started with.
     */
    char *keyring_file;             /* as written; NULL: no keyring; owned */
    struct keyring *keyring;        /* NULL: no keyring, what is stored stays plaintext;
                                       one reference (config_deinit drops it) */
    bool keyring_world_readable;    /* the file's mode has o+r (config_keyring_warnings) */
    /*
     * encryption.accept_plaintext_until: with a keyring, records and queued
     * deliveries that are not sealed (written before the keyring) are read
     * until then, and refused after (config_accepts_plaintext).
     */
    uint64_t accept_plaintext_until_ms; /* unix ms; 0: unset (never accepted) */
    char accept_plaintext_until_at[256]; /* "FILE:LINE" where it is set, for its warnings */
};

/*
 * Load and check FILE into *cfg (zeroed by the callee first). Returns 0;
 * keys the file leaves out take their documented defaults, and each
 * route inherits `defaults:` key by key (a webhook route, key_from with
 * verify, defaults to fingerprint none; errors.format comes from defaults:
 * and then the top level, replayed_header_on_first from the top level). Release with config_deinit.
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
 * pass-through, never stored). A pattern matches exactly, or, when it ended in
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
 * What an operator should hear about cfg's keyring, one line each,
 * "KEYRING: warning: ...\n" (KEYRING the file as written), into out
 * (caller-owned, truncated to outsize bytes, always NUL-terminated when
 * outsize > 0): a keyring any user may read (mode & 0004; a Kubernetes
 * Secret volume with defaultMode 0440 and an fsGroup is not), and keys
 * that could not be locked in memory (mlock failed: they may be written
 * to swap); and encryption.accept_plaintext_until set without a keyring,
 * already past (read on the wall clock), or further ahead than the
 * routes' longest retention plus longest dead_retention
 * ("FILE:LINE: warning: encryption.accept_plaintext_until ..."). Returns how many
 * lines. For `-t`, the startup log and the reload log.
 */
size_t config_keyring_warnings(const struct config *cfg, char *out, size_t outsize);

/*
 * Whether cfg accepts a record or queued delivery that is not sealed at
 * now_ms (unix ms): always without a keyring (plaintext is the format);
 * with one, only before encryption.accept_plaintext_until
 * (docs/data-protection.md, "Turning encryption on"). Pure.
 */
bool config_accepts_plaintext(const struct config *cfg, uint64_t now_ms);

/*
 * One phrase for the startup and reload log line into out (caller-owned,
 * outsize > 0 bytes, truncated, NUL-terminated): "keyring FILE: N keys: ID
 * (encrypts), ID, ..." (ids only, never key material), or "no keyring
 * (encryption.keyring): what is stored stays plaintext". Pure.
 */
void config_keyring_describe(const struct config *cfg, char *out, size_t outsize);

/*
 * The number of worker threads cfg asks for: `workers:` as written, or for
 * `auto` the CPUs this process may run on (sched_getaffinity), at most
 * CONFIG_MAX_WORKERS. Always at least 1 (1 when the affinity cannot be read);
 * no error return.
 */
unsigned config_workers(const struct config *cfg);

/*
 * The window a streamed exchange holds per direction, bytes: stream_window,
 * at most a quarter of max_buffered (so a small budget still streams). Pure.
 */
size_t config_stream_window(const struct config *cfg);

/* The most an admitted request reserves for its answer under limits.max_buffered, bytes. */
#define CONFIG_ANSWER_RESERVATION_MAX (64 * 1024)

/*
 * The room an admitted request reserves for its answer under limits.max_buffered
 * (budget.h), bytes: max_stored_response, at most CONFIG_ANSWER_RESERVATION_MAX.
 * Small, so that many requests with the usual small answers fit at once; a larger
 * answer is counted as it arrives. No error return.
 */
size_t config_answer_reservation(const struct config *cfg);

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
 * What a SIGHUP does with a change of a configuration key. Every key of
 * the schema has one (config_schema.c), as pgbouncer's CF_NO_RELOAD and
 * redis's IMMUTABLE_CONFIG mark theirs; there is no other list.
 */
enum config_reload {
    CONFIG_RELOAD_UNSET,        /* no class: test_config_reload fails on such a key */
    CONFIG_RELOAD_LIVE,         /* a reload applies it to the requests that start after it */
    CONFIG_RELOAD_RESTART,      /* built into the process at startup: a change is refused */
    CONFIG_RELOAD_IDENTITY,     /* part of record identity: a change is refused */
    CONFIG_RELOAD_BY_KEYS,      /* a section or the routes: the keys under it say */
};

/*
 * Whether SIGHUP may swap the running config for next: walks the schema
 * and compares every RESTART key with boot and every IDENTITY key with
 * running; LIVE keys may change. All three borrowed; pure.
 *
 * Two baselines, because the two classes protect different things:
 * - RESTART against boot: the listeners, threads, upstream client, store
 *   and inbox consumers were built from the boot config and keep it, whatever
 *   reloads ran since; next must agree with what they were built from.
 * - IDENTITY against running: record ids depend on the route that serves a
 *   path (its key source and scope_headers), and that is not an equality:
 *   a route added by a first SIGHUP holds records under its identity that
 *   the boot config knows nothing of, so a second SIGHUP that changed that
 *   route's scope would be accepted against boot and make their retries
 *   execute again. A second SIGHUP must not undo what a first kept.
 * Route identity is judged per path as matching sees it (config_changed_routes,
 * route_reload_refusal): routes may be inserted, removed and reordered as
 * long as every path keeps its record identity.
 *
 * Since an accepted reload equals boot on every RESTART key and running on
 * every IDENTITY key, every config that ever runs holds the boot values of
 * both. That is what lets a module read such a key from the config a
 * request started under while another reads it from the boot config: the
 * exchange and inbox_append take redis.min_replicas, redis.timeout and
 * redis.key_prefix from the running config, the store and the inbox
 * consumers from the boot one. test_config_reload checks those keys keep a
 * class that is not LIVE (boot_pinned_keys).
 *
 * Returns CONFIG_RELOAD_LIVE when next may run; else CONFIG_RELOAD_RESTART
 * or CONFIG_RELOAD_IDENTITY, the class of the first refused change in table
 * order (restart keys first), with why (whylen bytes, truncated, always
 * NUL-terminated when whylen > 0) set to "X changed, which needs a restart"
 * or "X changed, which changes record identity (retries of earlier keys
 * would execute again)"; X names a restart key by its top-level key (the
 * part of the process built from it: listen, workers, upstream, redis, or
 * "a queued route or its delivery settings") and an identity key by its
 * path ("redis.key_prefix", "the scope_headers of a route"). A reload
 * that leaves the admin listener without any operator while the running
 * config has one (admin.operators_file and admin.token_file both removed)
 * is CONFIG_RELOAD_RESTART too (CONTRACT section 16: fail closed), its why
 * saying so.
 */
enum config_reload config_reload_check(const struct config *boot, const struct config *running,
                                       const struct config *next, char *why, size_t whylen);

/*
 * Before next replaces running (a reload config_reload_check accepted):
 * next keeps dropping, from the requests it forwards, the client's fields
 * under the names upstream.record_id_header had since the start (running's
 * name and the ones running kept), so that after a rename a client cannot
 * write the name the upstream's logs still hold
 * (docs/operations.md#correlating-with-the-upstream). Left out: next's own
 * name, a route's key or scope header in next (the upstream needs it as
 * the client sent it), repeats ('-' and '_' alike, header_name_alike), and
 * all but the newest CONFIG_RECORD_ID_RETIRED_MAX. Sets
 * next->upstream_record_id_retired (next must not be shared yet); running
 * is borrowed. Returns 1 when running's own name is among the kept (a
 * rename the log should tell), 0 when not, -1 when out of memory (next
 * unchanged: refuse the reload).
 */
int config_retire_record_id_header(struct config *next, const struct config *running)
    __attribute__((warn_unused_result));

/*
 * What a reload (running -> next, both borrowed) changed of the secrets,
 * one line each ending in '\n', never a secret, into out (caller-owned,
 * truncated to outsize bytes, NUL-terminated; outsize > 0): the Redis and
 * the sentinels' passwords (sent from each worker's next connection), a
 * webhook route's verify secrets, a queued route's delivery.sign secrets
 * (routes paired by their pattern as written). Returns out, "" when none
 * changed. For the reload log (config_secret.c); pure.
 */
const char *config_secret_changes(const struct config *running, const struct config *next,
                                  char *out, size_t outsize);

/*
 * The reload class of the key at path (borrowed), dotted as the documents
 * write it: "redis.tls.ca_file", a route policy key as under `routes:`
 * ("lease", "delivery.backoff.initial", "path"). CONFIG_RELOAD_UNSET for
 * a path the schema does not have. Pure.
 */
enum config_reload config_key_reload(const char *path);

/*
 * The operator of cfg whose token has the SHA-256 token_sha256 (64
 * lowercase hex digits, borrowed), or NULL. Every operator is compared, each
 * with CRYPTO_memcmp, so the time taken tells nothing of which matched
 * (config_operators.c; CONTRACT section 16). The result is cfg's.
 */
const struct config_operator *config_operator_find(const struct config *cfg,
                                                   const char *token_sha256);

#endif
