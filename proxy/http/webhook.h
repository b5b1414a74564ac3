/*
 * webhook.h - webhook receivers (README, "Webhooks"): checking a provider's
 * signature over the raw body, and taking the idempotency key from the
 * provider's event id inside the JSON body.
 *
 * Pure: no I/O, no clock (the caller passes the time), no logging. The
 * caller runs webhook_verify before anything is claimed, so that nobody can
 * pre-claim an event id, and answers any verdict other than WEBHOOK_OK with
 * the 401 problem `signature-invalid`.
 */
#ifndef IDEM_WEBHOOK_H
#define IDEM_WEBHOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a webhook route checks signatures (a route's `verify:`, docs/webhooks.md). */
enum verify_scheme { VERIFY_NONE, VERIFY_STANDARD_WEBHOOKS, VERIFY_GITHUB, VERIFY_STRIPE };

/* Signatures older or newer than this are refused (Standard Webhooks, Stripe: 5 minutes). */
#define WEBHOOK_TOLERANCE_S 300

enum webhook_verdict {
    WEBHOOK_OK,         /* a configured secret signed exactly these bytes, recently enough */
    WEBHOOK_MISSING,    /* a header the scheme needs is absent or empty */
    WEBHOOK_MALFORMED,  /* the header does not parse (no t=, no sha256=, bad timestamp, ...) */
    WEBHOOK_MISMATCH,   /* it parses, but no signature matches any secret (forged, wrong secret) */
    WEBHOOK_STALE,      /* a valid signature whose timestamp is outside +-WEBHOOK_TOLERANCE_S */
};

/*
 * The request headers the schemes read, NUL-terminated values as received,
 * NULL when the header is absent. Leading/trailing spaces and tabs are
 * ignored (OWS, RFC 9110 5.5).
 */
struct webhook_headers {
    const char *webhook_id;         /* webhook-id (Standard Webhooks) */
    const char *webhook_timestamp;  /* webhook-timestamp (Standard Webhooks), unix seconds */
    const char *webhook_signature;  /* webhook-signature (Standard Webhooks) */
    const char *svix_id;            /* svix-id: Svix's default spelling of webhook-id */
    const char *svix_timestamp;     /* svix-timestamp */
    const char *svix_signature;     /* svix-signature */
    const char *hub_signature_256;  /* X-Hub-Signature-256 (GitHub) */
    const char *stripe_signature;   /* Stripe-Signature (Stripe) */
};

/*
 * Check the signature of one delivery under scheme, trying every secret
 * (n_secrets of them, usually 1, 2 while a secret is rotated) against every
 * signature the header carries; comparisons are constant-time
 * (CRYPTO_memcmp).
 *
 *   VERIFY_STANDARD_WEBHOOKS  Standard Webhooks spec, "Signature scheme" and
 *       "Verifying webhook authenticity": HMAC-SHA256 over
 *       `{webhook-id}.{webhook-timestamp}.{body}`; the secret is base64 after
 *       an optional `whsec_` prefix; webhook-signature is a space-separated
 *       list of `v1,<base64>` entries (other versions, e.g. `v1a`, are
 *       ignored); webhook-timestamp within +-5 minutes of now_s.
 *       Svix sends the same three headers as svix-id, svix-timestamp and
 *       svix-signature unless its account sends the standard names, so both
 *       spellings are read: each set of which at least one header is present
 *       is checked on its own (webhook-* first), and the first that verifies
 *       wins. When none verifies, the verdict and reason are those of the
 *       first set present; with neither present, WEBHOOK_MISSING.
 *   VERIFY_GITHUB  GitHub "Validating webhook deliveries":
 *       `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the body with the
 *       secret's bytes as the key. No timestamp.
 *   VERIFY_STRIPE  Stripe "Verify webhook signatures manually":
 *       `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...][,v0=...]`,
 *       HMAC-SHA256 over `{t}.{body}` with the secret's bytes (`whsec_...`
 *       as-is) as the key; every v1 is tried, v0 and unknown schemes ignored;
 *       t within +-5 minutes of now_s.
 *   VERIFY_NONE  nothing to check: WEBHOOK_OK.
 *
 * The signature is checked before the timestamp, so WEBHOOK_STALE means
 * "authentic but too old or too new" (a replay or a skewed clock) and a
 * forged delivery is WEBHOOK_MISMATCH whatever its timestamp.
 *
 * secrets: borrowed, NUL-terminated (config route_policy.secrets). A
 *     Standard Webhooks secret that is not valid base64 signs nothing; see
 *     webhook_secret_check to refuse it at config time.
 * h: borrowed; only the headers of scheme are read.
 * body: the raw request body, body_len bytes, binary-safe (may hold NULs,
 *     need not be NUL-terminated; NULL allowed when body_len is 0).
 * now_s: the wall clock, unix seconds.
 * reason: if not NULL, set to a short static human string for logs and
 *     problem details; it never contains secret, header or body data.
 * id_header: if not NULL, set to the name of the event id header whose set
 *     verified ("webhook-id" or "svix-id", static) on WEBHOOK_OK under
 *     VERIFY_STANDARD_WEBHOOKS, NULL otherwise. The caller takes the
 *     idempotency key from that header, as only the id of the set that
 *     verified is signed.
 * Returns the verdict; nothing is allocated that outlives the call.
 */
enum webhook_verdict webhook_verify(enum verify_scheme scheme, char *const *secrets,
                                    size_t n_secrets, const struct webhook_headers *h,
                                    const char *body, size_t body_len, int64_t now_s,
                                    const char **reason, const char **id_header);

/* Shortest webhook secret accepted, in bytes (decoded for Standard Webhooks). */
#define WEBHOOK_MIN_SECRET_BYTES 16

/*
 * Whether secret can sign anything under scheme: for Standard Webhooks it
 * must be base64 (after an optional `whsec_`) of at least
 * WEBHOOK_MIN_SECRET_BYTES decoded bytes; for GitHub and Stripe the string
 * itself is the key and needs that many bytes. Shorter keys can be guessed
 * offline from one signed delivery. For the config checks
 * (`-t`), so a mistyped secret is a startup error rather than a stream of
 * 401s. Returns 0, or -1 with *reason (if not NULL) set to a static string.
 */
int webhook_secret_check(enum verify_scheme scheme, const char *secret, const char **reason);

/*
 * Take a route's idempotency key from the JSON body (`key_from: json:/id`,
 * docs/webhooks.md, docs/client-contract.md#the-key-in-the-body): parse body (len bytes, binary-safe, need
 * not be NUL-terminated) with jansson, follow the RFC 6901 JSON Pointer
 * `pointer` (NUL-terminated; "" is the whole document, "/a/b" descends,
 * `~1` is '/', `~0` is '~', array elements by decimal index without leading
 * zeros, RFC 6901 section 4), and copy the string found there.
 *
 * out: caller-owned, outsize bytes; on success holds the value
 *     NUL-terminated, its length in bytes in *out_len.
 * Returns
 *     0   success;
 *    -1   the pointer is not a valid JSON Pointer or does not resolve in
 *         the document (no such member, index out of range, descends into
 *         a scalar): "no key";
 *    -2   the pointer resolves, but not to a usable key: not a JSON string,
 *         the empty string, a string containing NUL (\u0000), or longer
 *         than outsize - 1 bytes;
 *    -3   the body is not one JSON document (an empty body included),
 *         repeats an object member name, has a number beyond a double
 *         (an integer past 64 bits is read as a double, which is fine) or
 *         nests deeper than jansson's 2048 levels, so whether it holds a
 *         key cannot be told; out of memory while parsing shows as this too.
 * out is unspecified on failure.
 */
int webhook_key_from_json(const char *body, size_t len, const char *pointer, char *out,
                          size_t outsize, size_t *out_len);

/* Shortest delivery.sign secret, decoded bytes (Standard Webhooks: 24 to 64 bytes). */
#define WEBHOOK_MIN_SIGN_SECRET_BYTES 24

/*
 * Whether secret can sign the inbox's deliveries (`delivery.sign.secret`):
 * `whsec_` followed by base64 (RFC 4648 section 4) of at least
 * WEBHOOK_MIN_SIGN_SECRET_BYTES bytes, the Standard Webhooks spec's "Signing
 * secrets". Returns 0, or -1 with *reason (if not NULL) set to a static
 * string that never contains the secret.
 */
int webhook_sign_secret_check(const char *secret, const char **reason);

/*
 * Whether name (case-insensitive) is a signature header of a scheme the
 * proxy verifies: Stripe-Signature, X-Hub-Signature-256, X-Hub-Signature,
 * webhook-id/-timestamp/-signature and their svix-* spellings. A signed
 * delivery (delivery.sign) drops them: the receiver verifies the proxy.
 */
bool webhook_is_signature_header(const char *name);

/* Longest webhook-signature webhook_sign writes: two `v1,<44 base64>` and a space, and NUL. */
#define WEBHOOK_SIGNATURE_MAX 100

/*
 * Sign one delivery attempt the Standard Webhooks way ("Signature scheme"):
 * for each of the n_secrets secrets (1 or 2, each passing
 * webhook_sign_secret_check; borrowed), `v1,` and the padded base64 of
 * HMAC-SHA256 (OpenSSL EVP_MAC, EVP_EncodeBlock) over
 * `{id}.{timestamp}.{body}`, space-separated, into out (outsize bytes,
 * at least WEBHOOK_SIGNATURE_MAX), NUL-terminated.
 * id: the webhook-id value (NUL-terminated); timestamp_s: webhook-timestamp,
 * unix seconds; body: body_len bytes, binary-safe (NULL when 0).
 * Pure. Returns 0, or -1 (a secret that does not decode, HMAC failed,
 * out too small) with out empty.
 */
int webhook_sign(char *const *secrets, size_t n_secrets, const char *id, int64_t timestamp_s,
                 const char *body, size_t body_len, char *out, size_t outsize);

/* "ok", "missing", "malformed", "mismatch", "stale": for logs and metrics labels. Static. */
const char *webhook_verdict_name(enum webhook_verdict v);

#endif
