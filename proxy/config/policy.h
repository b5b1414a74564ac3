/*
 * policy.h - what a route decides (`defaults:` and each route), as plain
 * values. Its own small header so that the pure modules that read a policy
 * (decide, webhook, classify) need not see the loader.
 */
#ifndef IDEM_POLICY_H
#define IDEM_POLICY_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "webhook.h" /* enum verify_scheme */

/* HTTP methods a route may protect, as a bit set. */
enum method_bit {
    METHOD_GET = 1u << 0,
    METHOD_HEAD = 1u << 1,
    METHOD_POST = 1u << 2,
    METHOD_PUT = 1u << 3,
    METHOD_PATCH = 1u << 4,
    METHOD_DELETE = 1u << 5,
    METHOD_OPTIONS = 1u << 6,
};

/*
 * How a route fingerprints a keyed request (docs/client-contract.md#the-fingerprint-and-what-is-recorded):
 * the raw bytes, nothing, or method and target with the body's canonical
 * form (canonical.h). Stored as int (config_set_enum): values appended only.
 */
enum fingerprint_mode { FINGERPRINT_REQUEST, FINGERPRINT_NONE, FINGERPRINT_JSON, FINGERPRINT_FORM };
enum in_flight_mode { IN_FLIGHT_WAIT, IN_FLIGHT_REJECT };
enum ambiguous_mode { AMBIGUOUS_HOLD, AMBIGUOUS_RELEASE };
/* `on_store_error`: what a request gets when Redis cannot decide (not a store status). */
enum on_store_error_mode { ON_STORE_ERROR_REJECT, ON_STORE_ERROR_PASS };

/* Where a route takes its idempotency key from: a header, or a JSON Pointer into the body. */
enum key_source { KEY_FROM_HEADER, KEY_FROM_JSON };

/* `errors.format` (top level, `defaults:`, a route): the shape of the proxy's own answers. */
enum error_format { ERROR_FORMAT_PROBLEM, ERROR_FORMAT_STRIPE };

#define CONFIG_MAX_SCOPE_HEADERS 8
/* fingerprint_ignore: at most this many JSON Pointers, each 1..CONFIG_MAX_IGNORE_POINTER bytes */
#define CONFIG_MAX_FINGERPRINT_IGNORE 32
#define CONFIG_MAX_IGNORE_POINTER 255
#define CONFIG_MAX_RELEASE_STATUSES 16
#define CONFIG_MAX_SECRETS 2
/* Longest key_max_length a route may set, bytes. */
#define CONFIG_MAX_KEY_LENGTH 8192

/*
 * A webhook route's `delivery:`: direct forwards
 * synchronously; queued appends to a Redis Stream, answers ack_status, and
 * delivers to the upstream from there, at least once.
 */
enum delivery_mode { DELIVERY_DIRECT, DELIVERY_QUEUED };

#define DELIVERY_MAX_ATTEMPTS 1000
#define DELIVERY_MAX_CONCURRENCY 4096
/* Highest N of delivery.rate (N/s or N/min). */
#define DELIVERY_MAX_RATE 100000
/*
 * Most request header fields a queued delivery stores (header_is_queued),
 * as a record stores at most RECORD_MAX_HEADERS: one with more is refused
 * on arrival (431), before anything is claimed, so that every entry stays
 * small enough for the inbox's scripts to move it between Redis keys.
 */
#define DELIVERY_MAX_HEADERS 128

struct delivery_policy {
    enum delivery_mode mode;
    unsigned max_attempts;          /* deliveries in total, the first included; >= 1 */
    uint64_t max_age_ms;            /* from acceptance; then the dead-letter stream */
    uint64_t backoff_initial_ms;    /* first retry's ceiling; doubles per attempt */
    uint64_t backoff_max_ms;        /* the ceiling's ceiling */
    uint64_t visibility_timeout_ms; /* idle pending entries are taken over after this */
    unsigned concurrency;           /* deliveries in flight per worker and route */
    int ack_status;                 /* 200..299: what the provider gets */
    uint64_t dead_retention_ms;     /* a dead letter is deleted this long after it died;
                                       >= max_age */
    /* delivery.sign: Standard Webhooks signing of every attempt (webhook_sign) */
    char *sign_secrets[CONFIG_MAX_SECRETS]; /* owned, `whsec_...` after ${VAR} expansion */
    size_t n_sign_secrets;          /* 0: deliveries carry the provider's headers as received */
    /* delivery.rate: rate_count deliveries per rate_period_ms across all instances; 0: none */
    unsigned rate_count;
    uint64_t rate_period_ms;        /* 1000 (/s) or 60000 (/min) */
};

/* Everything a route decides; `defaults:` fills one, each route copies and overrides it. */
struct route_policy {
    char *key_header;               /* "Idempotency-Key"; owned */
    unsigned methods;               /* enum method_bit set */
    bool require_key;
    size_t key_max_length;          /* bytes, after unquoting */
    size_t key_min_length;          /* bytes, after unquoting; 1..key_max_length */
    char *key_pattern;              /* key_pattern as written (POSIX ERE); NULL: none; owned */
    regex_t *key_regex;             /* "^(" key_pattern ")$", compiled once at load
                                       (REG_EXTENDED | REG_NOSUB); NULL: none; owned */
    bool scope_required;            /* a protected request must send every scope header,
                                       non-empty (else 400 missing-scope) */
    enum fingerprint_mode fingerprint;
    char *fingerprint_ignore[CONFIG_MAX_FINGERPRINT_IGNORE]; /* RFC 6901 pointers left out of a
                                       json fingerprint (canonical.h); owned */
    size_t n_fingerprint_ignore;
    char *scope_headers[CONFIG_MAX_SCOPE_HEADERS]; /* owned */
    size_t n_scope_headers;
    uint64_t lease_ms;
    uint64_t retention_ms;
    enum in_flight_mode in_flight;
    uint64_t wait_timeout_ms;
    int mismatch_status;            /* 409 or 422 */
    int release_statuses[CONFIG_MAX_RELEASE_STATUSES];
    size_t n_release_statuses;
    enum ambiguous_mode on_ambiguous;
    enum on_store_error_mode on_store_error;
    enum error_format error_format; /* errors.format: the route's, else defaults:', else the
                                       top level's */
    bool replayed_header_on_first;  /* an executed answer carries Idempotent-Replayed: false
                                       (routes: the route's, else the top level's) */
    /* the key's source, and webhook receivers */
    bool webhook;                   /* key_from and verify (or delivery): a webhook receiver;
                                       key_from alone is an ordinary protected route */
    enum key_source key_from;       /* KEY_FROM_HEADER uses key_header */
    bool key_from_header;           /* the route wrote key_from: header:NAME (not key_header):
                                       Idempotency-Key without NAME is refused, not passed */
    char *key_json_pointer;         /* RFC 6901, KEY_FROM_JSON only; owned */
    char *record_source;            /* what record ids hash as the key source:
                                       "header:<lowercased name>" or "json:<pointer>";
                                       owned (routes only; NULL in defaults) */
    enum verify_scheme verify;
    char *secrets[CONFIG_MAX_SECRETS]; /* owned, after ${VAR} expansion */
    size_t n_secrets;
    struct delivery_policy delivery; /* routes only (webhook routes) */
};

#endif
