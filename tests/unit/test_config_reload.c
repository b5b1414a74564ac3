/*
 * test_config_reload.c - what a SIGHUP may change (config_reload_check,
 * config.h) against the schema's reload classes (config_schema.c).
 *
 * The schema itself first: every key has a reload class, and every key a
 * reload compares has a comparison; then one case per key of the schema
 * (a config, and the same config with that key changed) whose outcome must
 * be the class its row says, so a key added without a case fails here too;
 * then the keys other modules read from the running and the boot config
 * alike, which must never become live; then the route identity rules, the
 * queued routes, and the two baselines (restart keys against the boot
 * config, identity keys against the running one), and the record id
 * header names a reload keeps dropping. Prints `ok NAME` or
 * `FAIL NAME: why` per check (unit.h); exits 1 if any check failed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_int.h"
#include "unit.h"

#define FILE_NAME "test.yaml"

static const char *class_name(enum config_reload r)
{
    switch (r) {
    case CONFIG_RELOAD_UNSET: return "unset";
    case CONFIG_RELOAD_LIVE: return "live";
    case CONFIG_RELOAD_RESTART: return "restart";
    case CONFIG_RELOAD_IDENTITY: return "identity";
    case CONFIG_RELOAD_BY_KEYS: return "by its keys";
    }
    return "?";
}

/* Loads yaml into *cfg; false (with a FAIL line under name) when it does not load. */
static bool load(const char *name, const char *what, const char *yaml, struct config *cfg)
{
    char err[512];

    if (config_load_string(cfg, yaml, strlen(yaml), FILE_NAME, err, sizeof(err)) == 0)
        return true;
    UNIT_CHECK(name, false, "%s did not load: %s", what, err);
    return false;
}

/* Loads a and b; false (a FAIL line, nothing left to free) when either does not load. */
static bool load_pair(const char *name, const char *yaml_a, const char *yaml_b, struct config *a,
                      struct config *b)
{
    if (!load(name, "the first config", yaml_a, a))
        return false;
    if (load(name, "the second config", yaml_b, b))
        return true;
    config_deinit(a);
    return false;
}

/* ---- the schema -------------------------------------------------------- */

/* Every key of the schema's leaves, as config_key_reload spells them. */
struct leaf {
    char path[96];
    const struct config_key *key;
};

static struct leaf leaves[128];
static size_t n_leaves;

/*
 * Checks every key of table (under prefix) and collects the leaves: a
 * class, BY_KEYS exactly for sections and the routes (with a section or a
 * comparison of their own), a comparison for every RESTART and IDENTITY key.
 */
static void walk_table(const struct config_key *table, unsigned exclude, const char *prefix)
{
    for (const struct config_key *key = table; key->name != NULL; key++) {
        char path[96], name[160];
        bool container = key->kind == CONFIG_SECTION || key->kind == CONFIG_ROUTES;

        if (key->flags & exclude)
            continue;
        snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", key->name);
        snprintf(name, sizeof(name), "schema: %s has a reload class", path);
        UNIT_CHECK(name, key->reload != CONFIG_RELOAD_UNSET &&
                         (key->reload == CONFIG_RELOAD_BY_KEYS) == container,
                   "%s is %s", path, class_name(key->reload));
        if (key->reload == CONFIG_RELOAD_RESTART || key->reload == CONFIG_RELOAD_IDENTITY) {
            snprintf(name, sizeof(name), "schema: %s has a comparison", path);
            UNIT_CHECK(name, key->compare != NULL,
                       "no comparison: write its class as RESTART(cmp) or IDENTITY(cmp)");
        }
        snprintf(name, sizeof(name), "schema: config_key_reload(%s)", path);
        if (key->kind == CONFIG_ROUTES) {
            /* route keys are written as under `routes:`, without a prefix */
            for (size_t t = 0; t < 2 && key->section->tables[t] != NULL; t++)
                walk_table(key->section->tables[t], key->section->exclude, "");
            continue;
        }
        if (strcmp(path, "defaults") != 0) /* the route policy keys, walked under routes */
            UNIT_CHECK(name, config_key_reload(path) == key->reload, "%s",
                       class_name(config_key_reload(path)));
        if (key->kind == CONFIG_SECTION) {
            if (strcmp(path, "defaults") != 0)
                walk_table(key->section->tables[0], key->section->exclude, path);
            continue;
        }
        if (n_leaves < sizeof(leaves) / sizeof(leaves[0])) {
            snprintf(leaves[n_leaves].path, sizeof(leaves[n_leaves].path), "%s", path);
            leaves[n_leaves++].key = key;
        }
    }
}

static void run_schema_cases(void)
{
    walk_table(config_root_section.tables[0], 0, "");
    UNIT_CHECK("schema: leaves counted", n_leaves > 40 && n_leaves < 128, "%zu", n_leaves);
    UNIT_CHECK("schema: an unknown path has no class",
               config_key_reload("redis.nope") == CONFIG_RELOAD_UNSET &&
               config_key_reload("nope") == CONFIG_RELOAD_UNSET &&
               config_key_reload("listen.port") == CONFIG_RELOAD_UNSET, "a class");
    UNIT_CHECK("schema: a section is by its keys",
               config_key_reload("redis.tls") == CONFIG_RELOAD_BY_KEYS &&
               config_key_reload("delivery.backoff") == CONFIG_RELOAD_BY_KEYS, "not by keys");
}

/*
 * The exchange, inbox_append and the admin API read these from the config
 * a request started under; the store and the inbox consumers read them
 * from the boot config. The two agree only because no reload can change
 * them (config.h, config_reload_check): none may become LIVE.
 */
static const char *const boot_pinned_keys[] = {
    "redis.min_replicas", "redis.timeout", "redis.key_prefix",
};

static void run_boot_pinned_cases(void)
{
    for (size_t i = 0; i < sizeof(boot_pinned_keys) / sizeof(boot_pinned_keys[0]); i++) {
        enum config_reload r = config_key_reload(boot_pinned_keys[i]);
        char name[160];

        snprintf(name, sizeof(name), "read beside the boot config, never live: %s",
                 boot_pinned_keys[i]);
        UNIT_CHECK(name, r == CONFIG_RELOAD_RESTART || r == CONFIG_RELOAD_IDENTITY, "%s",
                   class_name(r));
    }
}

/* ---- one case per key ---------------------------------------------------- */

#define R_P "routes:\n  - path: /v1/p*\n"
#define R_GH "routes:\n  - path: /hooks/gh\n    key_from: header:X-GitHub-Delivery\n"
#define R_GH_NONE R_GH "    verify: none\n"
#define R_GH_SIGNED R_GH "    verify: github\n"
#define R_Q R_GH_NONE "    delivery:\n      mode: queued\n"
#define TLS "redis:\n  url: rediss://127.0.0.1:6380/0\n  tls:\n"
#define MTLS TLS "    cert_file: /dev/null\n    key_file: /dev/null\n"
#define SENT "redis:\n  sentinel:\n    master: m\n    addresses: [127.0.0.1:26379]\n"
#define SENT_AUTH SENT "    username: u\n    password: p\n"
#define CLU "redis:\n  cluster:\n    addresses: [127.0.0.1:7000]\n"
#define SECRET "0123456789abcdef0123"
/* keyrings main writes into the temporary directory it runs in */
#define KEYRING_A "keyring-a.yaml"
#define KEYRING_B "keyring-b.yaml"
#define TOKEN_A "admin-token-a"
#define TOKEN_B "admin-token-b"
#define OPERATORS_A "operators-a.yaml"
#define AUDIT_A "audit-a.log"
#define PW_A "redis-password-a"
#define PW_B "redis-password-b"
#define WH_A "webhook-secret-a"
#define WH_B "webhook-secret-b"
#define SIGN_A "sign-secret-a"
#define SIGN_B "sign-secret-b"

/* A config, and the same config with the key at path changed. */
static const struct {
    const char *path, *base, *next;
} key_cases[] = {
    { "listen", "", "listen: 127.0.0.1:18081\n" },
    { "admin_listen", "", "admin_listen: \"\"\n" },
    { "health_listen", "", "health_listen: 127.0.0.1:19902\n" },
    { "readiness", "", "readiness: process\n" },
    { "workers", "", "workers: 2\n" },
    { "upstream.url", "", "upstream:\n  url: http://127.0.0.1:3001\n" },
    { "upstream.connect_timeout", "", "upstream:\n  connect_timeout: 3s\n" },
    { "upstream.timeout", "", "upstream:\n  timeout: 31s\n" },
    { "upstream.record_id_header", "", "upstream:\n  record_id_header: X-Correlation-Id\n" },
    { "redis.url", "", "redis:\n  url: redis://127.0.0.1:6380/0\n" },
    { "redis.username", "redis:\n  password: p\n", "redis:\n  username: u\n  password: p\n" },
    { "redis.password", "", "redis:\n  password: p\n" },
    { "redis.password_file", "redis:\n  password_file: " PW_A "\n",
      "redis:\n  password_file: " PW_B "\n" },
    { "redis.key_prefix", "", "redis:\n  key_prefix: other\n" },
    { "redis.min_replicas", "", "redis:\n  min_replicas: 1\n" },
    { "redis.replica_timeout", "", "redis:\n  replica_timeout: 100ms\n" },
    { "redis.timeout", "", "redis:\n  timeout: 600ms\n" },
    { "redis.reassert.window", "", "redis:\n  reassert:\n    window: 0s\n" },
    { "redis.reassert.grace", "", "redis:\n  reassert:\n    grace: 0s\n" },
    { "redis.reassert.max_bytes", "", "redis:\n  reassert:\n    max_bytes: 1MiB\n" },
    { "redis.tls.ca_file", TLS "    verify: true\n", TLS "    ca_file: /dev/null\n" },
    { "redis.tls.cert_file", MTLS, TLS "    cert_file: /dev/zero\n    key_file: /dev/null\n" },
    { "redis.tls.key_file", MTLS, TLS "    cert_file: /dev/null\n    key_file: /dev/zero\n" },
    { "redis.tls.server_name", TLS "    verify: true\n", TLS "    server_name: redis.internal\n" },
    { "redis.tls.verify", TLS "    verify: true\n", TLS "    verify: false\n" },
    { "redis.sentinel.master", SENT, "redis:\n  sentinel:\n    master: n\n"
      "    addresses: [127.0.0.1:26379]\n" },
    { "redis.sentinel.addresses", SENT, "redis:\n  sentinel:\n    master: m\n"
      "    addresses: [127.0.0.1:26379, 127.0.0.1:26380]\n" },
    { "redis.sentinel.username", SENT_AUTH, SENT "    username: v\n    password: p\n" },
    { "redis.sentinel.password", SENT_AUTH, SENT "    username: u\n    password: q\n" },
    { "redis.sentinel.password_file", SENT "    password_file: " PW_A "\n",
      SENT "    password_file: " PW_B "\n" },
    { "redis.sentinel.tls", SENT, SENT "    tls: true\n" },
    { "redis.cluster.addresses", CLU, "redis:\n  cluster:\n    addresses: [127.0.0.1:7001]\n" },
    { "redis.cluster.tls", CLU, CLU "    tls: true\n" },
    { "limits.max_request_body", "", "limits:\n  max_request_body: 2MiB\n" },
    { "limits.max_stored_response", "", "limits:\n  max_stored_response: 2MiB\n" },
    { "limits.max_buffered", "", "limits:\n  max_buffered: 128MiB\n" },
    { "limits.max_connections", "", "limits:\n  max_connections: 50\n" },
    { "limits.stream_window", "", "limits:\n  stream_window: 64KiB\n" },
    { "limits.header_timeout", "", "limits:\n  header_timeout: 5s\n" },
    { "limits.idle_timeout", "", "limits:\n  idle_timeout: 30s\n" },
    { "errors.format", "", "errors:\n  format: stripe\n" },
    { "replayed_header_on_first", "", "replayed_header_on_first: true\n" },
    { "log.access", "", "log:\n  access: errors\n" },
    { "log.audit", "", "log:\n  audit: " AUDIT_A "\n" },
    /* two token files: the path changes, and with it the token */
    { "admin.token_file", "admin:\n  token_file: " TOKEN_A "\n",
      "admin:\n  token_file: " TOKEN_B "\n" },
    { "admin.operators_file", "", "admin:\n  operators_file: " OPERATORS_A "\n" },
    { "admin.held_refresh", "", "admin:\n  held_refresh: 5s\n" },
    { "encryption.keyring", "encryption:\n  keyring: " KEYRING_A "\n",
      "encryption:\n  keyring: " KEYRING_B "\n" },
    { "encryption.accept_plaintext_until", "encryption:\n  keyring: " KEYRING_A "\n",
      "encryption:\n  keyring: " KEYRING_A "\n  accept_plaintext_until: 2026-12-31T00:00:00Z\n" },
    { "path", R_P, "routes:\n  - path: /v1/q*\n" },
    { "key_header", R_P, R_P "    key_header: X-Key\n" },
    { "methods", R_P, R_P "    methods: [POST]\n" },
    { "require_key", R_P, R_P "    require_key: true\n" },
    { "key_max_length", R_P, R_P "    key_max_length: 100\n" },
    { "key_min_length", R_P, R_P "    key_min_length: 16\n" },
    { "key_pattern", R_P, R_P "    key_pattern: '[0-9a-f-]+'\n" },
    { "fingerprint", R_P, R_P "    fingerprint: none\n" },
    { "fingerprint_ignore", R_P "    fingerprint: json\n",
      R_P "    fingerprint: json\n    fingerprint_ignore: [/ts]\n" },
    { "scope_headers", R_P, R_P "    scope_headers: [X-Tenant]\n" },
    { "scope_required", R_P, R_P "    scope_required: true\n" },
    { "lease", R_P, R_P "    lease: 30s\n" },
    { "retention", R_P, R_P "    retention: 1h\n" },
    { "in_flight", R_P, R_P "    in_flight: reject\n" },
    { "wait_timeout", R_P, R_P "    wait_timeout: 5s\n" },
    { "mismatch_status", R_P, R_P "    mismatch_status: 422\n" },
    { "release_statuses", R_P, R_P "    release_statuses: [503]\n" },
    { "on_ambiguous", R_P, R_P "    on_ambiguous: release\n" },
    { "on_store_error", R_P, R_P "    on_store_error: pass\n" },
    { "key_from", R_GH_NONE, "routes:\n  - path: /hooks/gh\n    key_from: json:/id\n"
      "    verify: none\n" },
    { "verify", R_GH_SIGNED "    secret: " SECRET "\n",
      R_GH "    verify: stripe\n    secret: " SECRET "\n" },
    { "secret", R_GH_SIGNED "    secret: " SECRET "\n", R_GH_SIGNED "    secret: " SECRET "x\n" },
    { "secret_file", R_GH_SIGNED "    secret_file: " WH_A "\n",
      R_GH_SIGNED "    secret_file: [" WH_B ", " WH_A "]\n" },
    { "delivery.mode", R_GH_NONE, R_Q },
    { "delivery.max_attempts", R_Q, R_Q "      max_attempts: 3\n" },
    { "delivery.max_age", R_Q, R_Q "      max_age: 24h\n" },
    { "delivery.backoff.initial", R_Q, R_Q "      backoff: {initial: 2s}\n" },
    { "delivery.backoff.max", R_Q, R_Q "      backoff: {max: 2h}\n" },
    { "delivery.visibility_timeout", R_Q, R_Q "      visibility_timeout: 60s\n" },
    { "delivery.concurrency", R_Q, R_Q "      concurrency: 8\n" },
    { "delivery.ack_status", R_Q, R_Q "      ack_status: 200\n" },
    { "delivery.sign.secret", R_Q "      sign: {secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}\n",
      R_Q "      sign: {secret: whsec_cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r}\n" },
    { "delivery.sign.secret_file", R_Q "      sign: {secret_file: " SIGN_A "}\n",
      R_Q "      sign: {secret_file: " SIGN_B "}\n" },
    { "delivery.rate", R_Q, R_Q "      rate: 20/s\n" },
    { "delivery.dead_retention", R_Q, R_Q "      dead_retention: 8d\n" },
};

/*
 * Each case's reload must have the outcome its key's class says, naming it
 * as the log line does: a restart key by its top-level key, an identity key
 * by its path or its comparison's words.
 */
static void run_key_cases(void)
{
    for (size_t i = 0; i < n_leaves; i++) {
        bool found = false;
        char name[160];

        for (size_t j = 0; j < sizeof(key_cases) / sizeof(key_cases[0]) && !found; j++)
            found = strcmp(key_cases[j].path, leaves[i].path) == 0;
        snprintf(name, sizeof(name), "key %.95s has a reload case", leaves[i].path);
        UNIT_CHECK(name, found, "add one to key_cases");
    }
    for (size_t j = 0; j < sizeof(key_cases) / sizeof(key_cases[0]); j++) {
        enum config_reload want = config_key_reload(key_cases[j].path), got;
        struct config base, next;
        char name[160], why[256], top[64];

        snprintf(name, sizeof(name), "reload of %s is %s", key_cases[j].path, class_name(want));
        if (!load_pair(name, key_cases[j].base, key_cases[j].next, &base, &next))
            continue;
        got = config_reload_check(&base, &base, &next, why, sizeof(why));
        snprintf(top, sizeof(top), "%.*s changed, ", (int)strcspn(key_cases[j].path, "."),
                 key_cases[j].path);
        UNIT_CHECK(name, got == want, "got %s: %s", class_name(got), why);
        if (got == CONFIG_RELOAD_LIVE)
            UNIT_CHECK(name, why[0] == '\0', "a reason for an accepted reload: %s", why);
        else if (got == CONFIG_RELOAD_RESTART && strchr(key_cases[j].path, '.') != NULL &&
                 strncmp(key_cases[j].path, "delivery.", 9) != 0)
            UNIT_CHECK(name, strncmp(why, top, strlen(top)) == 0, "named %s", why);
        /* the same config is always accepted */
        got = config_reload_check(&next, &next, &next, why, sizeof(why));
        UNIT_CHECK(name, got == CONFIG_RELOAD_LIVE, "itself refused: %s", why);
        config_deinit(&base);
        config_deinit(&next);
    }
}

/* ---- the log line's words -------------------------------------------------- */

static void run_message_cases(void)
{
    static const struct {
        const char *name, *base, *next, *why;
    } cases[] = {
        { "a restart key is named by its top-level key", "", "workers: 2\n",
          "workers changed, which needs a restart" },
        { "a redis key is named redis", "", "redis:\n  tls:\n    verify: false\n"
          "  url: rediss://127.0.0.1:6380/0\n", "redis changed, which needs a restart" },
        { "the first change in table order is named", "",
          "redis:\n  timeout: 1s\nupstream:\n  timeout: 1s\n",
          "upstream changed, which needs a restart" },
        { "a restart change is named before an identity change", "",
          "redis:\n  key_prefix: other\n  timeout: 1s\n", "redis changed, which needs a restart" },
        { "an identity key is named by its path", "", "redis:\n  key_prefix: other\n",
          "redis.key_prefix changed, which changes record identity (retries of earlier keys "
          "would execute again)" },
        { "a route's identity by its comparison's words", R_P, R_P "    key_header: X-Key\n",
          "the key source (key_header or key_from) of a route changed, which changes record "
          "identity (retries of earlier keys would execute again)" },
        { "a queued route's delivery", R_Q, R_Q "      concurrency: 8\n",
          "a queued route or its delivery settings changed, which needs a restart" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct config base, next;
        char why[256];

        if (!load_pair(cases[i].name, cases[i].base, cases[i].next, &base, &next))
            continue;
        config_reload_check(&base, &base, &next, why, sizeof(why));
        UNIT_CHECK(cases[i].name, strcmp(why, cases[i].why) == 0, "got '%s'", why);
        config_deinit(&base);
        config_deinit(&next);
    }
}

/* ---- route identity and queued routes ------------------------------------ */

struct config_reload_case {
    const char *name;
    const char *running;
    const char *next;
    const char *word;           /* NULL: accepted; else a word of the reason */
};

#define R_PAY "  - path: /v1/payments*\n"
#define R_REF "  - path: /v1/refunds\n"
#define R_HOOK "  - path: /hooks/gh\n    key_from: header:X-GitHub-Delivery\n    verify: none\n"

static const struct config_reload_case config_reload_cases[] = {
    { "same config", "routes:\n" R_PAY R_REF, "routes:\n" R_PAY R_REF, NULL },
    { "a route appended", "routes:\n" R_PAY, "routes:\n" R_PAY R_REF, NULL },
    { "a route inserted in front", "routes:\n" R_PAY, "routes:\n" R_REF R_PAY, NULL },
    { "a route removed", "routes:\n" R_PAY R_REF, "routes:\n" R_PAY, NULL },
    { "routes reordered", "routes:\n" R_PAY R_REF R_HOOK, "routes:\n" R_HOOK R_REF R_PAY, NULL },
    { "no routes at all any more", "routes:\n" R_PAY, "", NULL },
    { "other policy keys change", "routes:\n" R_PAY,
      "routes:\n" R_PAY "    lease: 5s\n    require_key: true\n    fingerprint: none\n", NULL },
    { "key_header case only", "routes:\n" R_PAY,
      "routes:\n" R_PAY "    key_header: idempotency-key\n", NULL },
    { "scope header case only", "routes:\n" R_PAY "    scope_headers: [Authorization]\n",
      "routes:\n" R_PAY "    scope_headers: [authorization]\n", NULL },
    { "pattern case only is the same route", "routes:\n" R_PAY,
      "routes:\n  - path: /V1/Payments*\n    scope_headers: [X-Tenant]\n", "scope_headers" },
    { "scope_headers of a route", "routes:\n" R_PAY R_REF,
      "routes:\n" R_PAY R_REF "    scope_headers: [Authorization, X-Tenant]\n", "scope_headers" },
    { "scope_headers emptied", "routes:\n" R_PAY, "routes:\n" R_PAY "    scope_headers: []\n",
      "scope_headers" },
    { "scope_headers through defaults", "routes:\n" R_PAY,
      "defaults:\n  scope_headers: [X-Tenant]\nroutes:\n" R_PAY, "scope_headers" },
    { "key_header of a route", "routes:\n" R_PAY,
      "routes:\n" R_PAY "    key_header: X-Request-Id\n", "key source" },
    { "key_from of a webhook route", "routes:\n" R_HOOK,
      "routes:\n  - path: /hooks/gh\n    key_from: json:/id\n    verify: none\n", "key source" },
    /* the route-level keys whose default is a top-level key, and errors per route: live */
    { "a route's errors.format and replayed_header_on_first", "routes:\n" R_PAY,
      "routes:\n" R_PAY "    errors: {format: stripe}\n    replayed_header_on_first: true\n",
      NULL },
    { "errors.format through defaults:", "routes:\n" R_PAY,
      "defaults:\n  errors: {format: stripe}\nroutes:\n" R_PAY, NULL },
    { "key rules and scope_required through defaults:", "routes:\n" R_PAY,
      "defaults:\n  key_min_length: 8\n  key_pattern: '[a-z0-9]+'\n  scope_required: true\n"
      "routes:\n" R_PAY, NULL },
    /* key_from on an ordinary route: the pointer or header is its key source */
    { "key_from added to an ordinary route", "routes:\n" R_PAY,
      "routes:\n" R_PAY "    key_from: json:/reference\n", "key source" },
    { "key_from header: the same as key_header", "routes:\n" R_PAY "    key_header: X-Ref\n",
      "routes:\n" R_PAY "    key_from: header:X-Ref\n", NULL },
    /* verify beside key_from makes a webhook receiver, whose event ids are per route */
    { "verify added beside key_from", "routes:\n  - path: /hooks/gh\n    key_from: json:/id\n",
      "routes:\n  - path: /hooks/gh\n    key_from: json:/id\n    verify: none\n",
      "key source" },
    { "redis.key_prefix", "redis:\n  key_prefix: a\n", "redis:\n  key_prefix: b\n",
      "redis.key_prefix" },
    { "a route that takes over paths of another identity", "routes:\n" R_PAY,
      "routes:\n  - path: /v1/payments/refunds\n    scope_headers: [X-Tenant]\n" R_PAY,
      "scope_headers" },
    { "a route of a disjoint pattern may differ", "routes:\n" R_PAY,
      "routes:\n  - path: /v2/payments\n    scope_headers: [X-Tenant]\n" R_PAY, NULL },
    { "a pattern spelled differently is the same route", "routes:\n" R_PAY,
      "routes:\n  - path: /v1//payments*\n    scope_headers: [X-Tenant]\n", "scope_headers" },
    { "a new prefix route in front over an old one", "routes:\n" R_REF,
      "routes:\n  - path: /v1/*\n    key_header: X-Key\n" R_REF, "key source" },
    { "removing a route hands its paths to another identity", "routes:\n" R_REF
      "  - path: /v1/*\n    key_header: X-Key\n",
      "routes:\n  - path: /v1/*\n    key_header: X-Key\n", "key source" },
};

/* queued routes need a restart to change: the inbox consumers were made from the boot config */
static const struct {
    const char *name, *running, *next;
    bool same;
    bool renamed;   /* the route's pattern changes: its record identity too */
} config_inbox_cases[] = {
    { "same queued route", "routes:\n" R_HOOK "    delivery: {mode: queued}\n",
      "routes:\n" R_PAY R_HOOK "    delivery: {mode: queued}\n", true, false },
    { "a route becomes queued", "routes:\n" R_HOOK,
      "routes:\n" R_HOOK "    delivery: {mode: queued}\n", false, false },
    { "a queued route goes direct", "routes:\n" R_HOOK "    delivery: {mode: queued}\n",
      "routes:\n" R_HOOK, false, false },
    { "a queued route's other delivery keys", "routes:\n" R_HOOK "    delivery: {mode: queued}\n",
      "routes:\n" R_HOOK "    delivery: {mode: queued, max_attempts: 3}\n", false, false },
    { "a queued route becomes a prefix route", "routes:\n" R_HOOK "    delivery: {mode: queued}\n",
      "routes:\n  - path: /hooks/gh*\n    key_from: header:X-GitHub-Delivery\n    verify: none\n"
      "    delivery: {mode: queued}\n", false, true },
};


static void run_identity_cases(void)
{
    for (size_t i = 0; i < sizeof(config_reload_cases) / sizeof(config_reload_cases[0]); i++) {
        const struct config_reload_case *c = &config_reload_cases[i];
        struct config running, next;
        char name[160], why[256];
        enum config_reload got;

        snprintf(name, sizeof(name), "reload %s", c->name);
        if (!load_pair(name, c->running, c->next, &running, &next))
            continue;
        got = config_reload_check(&running, &running, &next, why, sizeof(why));
        UNIT_CHECK(name, c->word == NULL ? got == CONFIG_RELOAD_LIVE
                                         : got == CONFIG_RELOAD_IDENTITY &&
                                               strstr(why, c->word) != NULL,
                   "got %s (%s), want %s", class_name(got), why, c->word ? c->word : "accepted");
        config_deinit(&running);
        config_deinit(&next);
    }
}

static void run_inbox_cases(void)
{
    for (size_t i = 0; i < sizeof(config_inbox_cases) / sizeof(config_inbox_cases[0]); i++) {
        struct config a, b;
        char name[160], why[256];
        enum config_reload got;

        snprintf(name, sizeof(name), "inboxes: %s", config_inbox_cases[i].name);
        if (!load_pair(name, config_inbox_cases[i].running, config_inbox_cases[i].next, &a, &b))
            continue;
        got = config_reload_check(&a, &a, &b, why, sizeof(why));
        UNIT_CHECK(name, got == (config_inbox_cases[i].same ? CONFIG_RELOAD_LIVE
                                                            : CONFIG_RELOAD_RESTART),
                   "got %s (%s), want %s", class_name(got), why,
                   config_inbox_cases[i].same ? "same" : "a restart");
        /* identity alone (boot = next): a webhook route's identity names its route */
        got = config_reload_check(&b, &a, &b, why, sizeof(why));
        UNIT_CHECK(name, got == (config_inbox_cases[i].renamed ? CONFIG_RELOAD_IDENTITY
                                                               : CONFIG_RELOAD_LIVE),
                   "identity: got %s (%s)", class_name(got), why);
        config_deinit(&a);
        config_deinit(&b);
    }
}

/* ---- the two baselines ------------------------------------------------------ */

#define R_ORDERS "  - path: /v1/orders*\n"

static void run_baseline_cases(void)
{
    struct config boot, running, next, live;
    char why[256];

    if (!load("baselines", "boot", "routes:\n" R_PAY, &boot))
        return;
    if (!load("baselines", "running", "routes:\n" R_PAY R_ORDERS, &running) ||
        !load("baselines", "next", "routes:\n" R_PAY R_ORDERS
              "    scope_headers: [Authorization, X-Tenant]\n", &next) ||
        !load("baselines", "live", "routes:\n" R_PAY R_ORDERS "    lease: 30s\n"
              "listen: 127.0.0.1:18082\n", &live))
        exit(1);
    /* a first SIGHUP added /v1/orders*; its records hold its scope */
    UNIT_CHECK("identity against running: a route a first reload added keeps its scope",
               config_reload_check(&boot, &running, &next, why, sizeof(why)) ==
                   CONFIG_RELOAD_IDENTITY && strstr(why, "scope_headers") != NULL, "%s", why);
    UNIT_CHECK("identity against boot would have missed it (why it is the running config)",
               config_reload_check(&boot, &boot, &next, why, sizeof(why)) == CONFIG_RELOAD_LIVE,
               "%s", why);
    /* the listeners were made from boot, whatever the running config is */
    UNIT_CHECK("restart against boot: listen of the boot config",
               config_reload_check(&boot, &running, &live, why, sizeof(why)) ==
                   CONFIG_RELOAD_RESTART && strstr(why, "listen changed") != NULL, "%s", why);
    UNIT_CHECK("restart against boot even when running already had it",
               config_reload_check(&boot, &live, &live, why, sizeof(why)) ==
                   CONFIG_RELOAD_RESTART, "%s", why);
    config_deinit(&boot);
    config_deinit(&running);
    config_deinit(&next);
    config_deinit(&live);
}

/* ---- retired record id header names ------------------------------------ */

/* next's retired names, joined by ' ' ("" for none), into out. */
static const char *retired_names(const struct config *next, char *out, size_t len)
{
    size_t used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < next->n_upstream_record_id_retired; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%s", i > 0 ? " " : "",
                                 next->upstream_record_id_retired[i]);
    return out;
}

/*
 * A chain of reloads, each of yaml[i] over the one before: after each, the
 * names the next config still drops and whether the running one was retired.
 */
static void run_retired_cases(void)
{
    static const struct {
        const char *name, *yaml, *want;
        int rc;
    } steps[] = {
        { "the first name", "upstream:\n  record_id_header: X-One\n", "", 0 },
        { "a rename retires the old name", "upstream:\n  record_id_header: X-Two\n", "X-One",
          1 },
        { "\"\" retires the name too", "upstream:\n  record_id_header: \"\"\n", "X-One X-Two",
          1 },
        { "a name that comes back is no longer retired ('_' as '-')",
          "upstream:\n  record_id_header: X_One\n", "X-Two", 0 },
        { "a retired name a route now reads as its key is not dropped",
          "upstream:\n  record_id_header: X-Three\nroutes:\n  - path: /v1/p*\n"
          "    key_header: X-Two\n", "X_One", 1 },
        { "the same name again retires nothing", "upstream:\n  record_id_header: x-three\n",
          "X_One", 0 },
    };
    struct config cfg[2];
    char got[512], name[160];
    int cur = 0;

    if (!load("retired record id names", "the first config", steps[0].yaml, &cfg[0]))
        return;
    for (size_t i = 1; i < sizeof(steps) / sizeof(steps[0]); i++) {
        int next = 1 - cur, rc;

        if (!load(steps[i].name, "the next config", steps[i].yaml, &cfg[next]))
            break;
        rc = config_retire_record_id_header(&cfg[next], &cfg[cur]);
        snprintf(name, sizeof(name), "retired record id names: %s", steps[i].name);
        UNIT_CHECK(name, rc == steps[i].rc &&
                   strcmp(retired_names(&cfg[next], got, sizeof(got)), steps[i].want) == 0,
                   "rc %d, kept '%s'; want %d, '%s'", rc, got, steps[i].rc, steps[i].want);
        config_deinit(&cfg[cur]);
        cur = next;
    }
    config_deinit(&cfg[cur]);

    /* ten renames: the newest CONFIG_RECORD_ID_RETIRED_MAX are kept, oldest first */
    char yaml[96], want[512] = "";
    size_t used = 0;

    snprintf(yaml, sizeof(yaml), "upstream:\n  record_id_header: X-R0\n");
    if (!load("retired record id names: at most 8", "X-R0", yaml, &cfg[0]))
        return;
    cur = 0;
    for (int i = 1; i <= 10; i++) {
        int next = 1 - cur;

        snprintf(yaml, sizeof(yaml), "upstream:\n  record_id_header: X-R%d\n", i);
        if (!load("retired record id names: at most 8", yaml, yaml, &cfg[next]))
            break;
        UNIT_CHECK("retired record id names: at most 8 (each rename)",
                   config_retire_record_id_header(&cfg[next], &cfg[cur]) == 1, "X-R%d", i);
        config_deinit(&cfg[cur]);
        cur = next;
    }
    for (int i = 10 - CONFIG_RECORD_ID_RETIRED_MAX; i < 10; i++)
        used += (size_t)snprintf(want + used, sizeof(want) - used, "%sX-R%d", used ? " " : "", i);
    UNIT_CHECK("retired record id names: at most 8, the newest",
               strcmp(retired_names(&cfg[cur], got, sizeof(got)), want) == 0, "kept '%s'", got);
    config_deinit(&cfg[cur]);
}

static char keyring_dir[] = "/tmp/test_config_reload.XXXXXX";

/*
 * Writes the keyrings, token files and secret files the cases name into a
 * new temporary directory and enters it.
 */
static void enter_keyring_dir(void)
{
    static const char *const files[][2] = {
        { KEYRING_A, "keys:\n  - id: a\n    secret: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n" },
        { KEYRING_B, "keys:\n  - id: b\n    secret: AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"
                     "  - id: a\n    secret: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n" },
        { TOKEN_A, "token-a-0123456789abcdef0123456789abcdef\n" },
        { TOKEN_B, "token-b-0123456789abcdef0123456789abcdef\n" },
        { OPERATORS_A, "operators:\n  - name: alice\n    token_sha256: "
                       "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"
                       "    rights: [read]\n" },
        { PW_A, "password-a\n" },
        { PW_B, "password-b\n" },
        { WH_A, SECRET "\n" },
        { WH_B, SECRET "y\n" },
        { SIGN_A, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n" },
        { SIGN_B, "whsec_cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r\r\n" },
    };
    if (mkdtemp(keyring_dir) == NULL || chdir(keyring_dir) != 0) {
        perror("keyring directory");
        exit(1);
    }
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        FILE *f = fopen(files[i][0], "w");

        if (f == NULL || fputs(files[i][1], f) < 0 || fclose(f) != 0) {
            perror(files[i][0]);
            exit(1);
        }
    }
}

/* The keyring a config holds is read with it: a reload to another keyring is live. */
static void run_keyring_cases(void)
{
    struct config a, b;
    char why[256];

    if (!load_pair("a keyring travels with its config", "encryption:\n  keyring: " KEYRING_A
                   "\n", "encryption:\n  keyring: " KEYRING_B "\n", &a, &b))
        return;
    UNIT_CHECK("a keyring travels with its config",
               a.keyring != NULL && b.keyring != NULL && a.keyring != b.keyring, "no keyrings");
    UNIT_CHECK("a keyring travels with its config: the next one is live",
               config_reload_check(&a, &a, &b, why, sizeof(why)) == CONFIG_RELOAD_LIVE &&
               config_reload_check(&b, &b, &a, why, sizeof(why)) == CONFIG_RELOAD_LIVE, "%s", why);
    config_deinit(&a);
    config_deinit(&b);
}

int main(void)
{
    enter_keyring_dir();
    run_schema_cases();
    run_boot_pinned_cases();
    run_key_cases();
    run_message_cases();
    run_identity_cases();
    run_inbox_cases();
    run_baseline_cases();
    run_keyring_cases();
    run_retired_cases();
    unlink(KEYRING_A);
    unlink(KEYRING_B);
    unlink(TOKEN_A);
    unlink(TOKEN_B);
    unlink(OPERATORS_A);
    unlink(AUDIT_A);
    unlink(PW_A);
    unlink(PW_B);
    unlink(WH_A);
    unlink(WH_B);
    unlink(SIGN_A);
    unlink(SIGN_B);
    rmdir(keyring_dir);
    UNIT_DONE();
}
