/*
 * Webhook signatures and event ids (README, "Webhooks"): Standard Webhooks
 * ("Signature scheme"), GitHub ("Validating webhook deliveries", X-Hub-Signature-256),
 * Stripe ("Verify webhook signatures manually"), RFC 6901 JSON Pointer.
 *
 * Expected signatures come from three places, so that a bug shared by the
 * module and the test cannot pass: the providers' published vectors, values
 * computed with `openssl dgst -sha256 -hmac` when the test was written
 * (pasted as literals), and, for the table, the sender signing here with
 * OpenSSL's one-shot HMAC() and raw key bytes (never the module's base64).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "unit.h"
#include "webhook.h"

#define NOW INT64_C(1700000000)
#define BODY(s) s, sizeof(s) - 1

#define SW_SPEC "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define SW_NEW "whsec_cm90YXRpb24ta2V5LW9uZS0zMi1ieXRlcy1sb25nISE="
#define SW_OLD "whsec_cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r"
#define SW_LONG "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYwMTIzNDU2Nzg5YWJjZGVmMDEy" \
    "MzQ1Njc4OWFiY2RlZg=="
#define SW_OLD_BARE "cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r"
#define GH_DOCS "It's a Secret to Everybody"
#define GH_OTHER "gh-other-secret"
#define ST_A "whsec_test_secret"
#define ST_B "whsec_rotated_secret"

/* A secret as configured, and the HMAC key bytes the sender holds for it. */
static const struct {
    const char *configured;
    const char *raw;
    size_t raw_len;
} sender_keys[] = {
    /* Standard Webhooks spec example; raw bytes from `base64 -d | xxd -p` */
    { SW_SPEC,
      "\x31\xf2\x90\xf6\xbf\x06\x29\x8a\xab\x4f\x08\xd4\x3c\x3f\x08\x2c\xf6\x48\xa3\x62\xda\x2d"
      "\xa4\xb0", 24 },
    /* 32 bytes: its base64 ends in '=' */
    { SW_NEW, "rotation-key-one-32-bytes-long!!", 32 },
    { SW_OLD, "previous-key-24-bytes-ok", 24 },
    /*
     * 64 bytes, base64 ends in "==": HMAC pads short keys with zeros, so only
     * a key longer than SHA-256's 64-byte block shows a padding byte decoded
     * as key material
     */
    { SW_LONG, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 64 },
    { SW_OLD_BARE, "previous-key-24-bytes-ok", 24 },
};

/*
 * One delivery. Header templates expand {t} to ts, {sig} to the signature
 * the sender computes with signer over signed_body (body when NULL) and
 * {forged} to that signature with one character changed. A NULL template
 * means the header is absent. now 0 means NOW.
 */
struct verify_case {
    const char *name;
    enum verify_scheme scheme;
    const char *secrets[2];
    size_t n_secrets;
    const char *signer;
    int64_t ts;
    int64_t now;
    const char *id;         /* webhook-id */
    const char *ts_hdr;     /* webhook-timestamp */
    const char *sig_hdr;    /* webhook-signature, X-Hub-Signature-256 or Stripe-Signature */
    const char *body;
    size_t body_len;
    const char *signed_body;
    size_t signed_len;
    enum webhook_verdict want;
};

static const struct verify_case verify_cases[] = {
    /* ---- Standard Webhooks ---- */
    { "standard: the spec's published vector", VERIFY_STANDARD_WEBHOOKS, { SW_SPEC }, 1, NULL,
      0, 1614265330, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330",
      "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", BODY("{\"test\": 2432232314}"),
      NULL, 0, WEBHOOK_OK },
    { "standard: openssl dgst value, padded 32-byte secret", VERIFY_STANDARD_WEBHOOKS,
      { SW_NEW }, 1, NULL, 0, NOW, "msg_2Z1", "1700000000",
      "v1,zLokMLN5KfqTTvMQobR5zRYpvBsSevo8fguNUkM0qgo=", BODY("{\"type\":\"invoice.paid\"}"),
      NULL, 0, WEBHOOK_OK },
    { "standard: openssl dgst value, 64-byte secret", VERIFY_STANDARD_WEBHOOKS, { SW_LONG }, 1,
      NULL, 0, NOW, "msg_long", "1700000000", "v1,RJ29clw3hJi345lOQK81bajSfTUbEcvX3MCqz8BZcI8=",
      BODY("{}"), NULL, 0, WEBHOOK_OK },
    { "standard: valid, 64-byte secret", VERIFY_STANDARD_WEBHOOKS, { SW_LONG }, 1, SW_LONG, NOW,
      0, "msg_1", "{t}", "v1,{sig}", BODY("{\"a\":1}"), NULL, 0, WEBHOOK_OK },
    { "standard: valid", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW, NOW, 0, "msg_1", "{t}",
      "v1,{sig}", BODY("{\"type\":\"payment.succeeded\"}"), NULL, 0, WEBHOOK_OK },
    { "standard: secret without the whsec_ prefix", VERIFY_STANDARD_WEBHOOKS, { SW_OLD_BARE }, 1,
      SW_OLD, NOW, 0, "msg_1", "{t}", "v1,{sig}", BODY("{}"), NULL, 0, WEBHOOK_OK },
    { "standard: forged signature (one character)", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1,
      SW_NEW, NOW, 0, "msg_1", "{t}", "v1,{forged}", BODY("{\"a\":1}"), NULL, 0,
      WEBHOOK_MISMATCH },
    { "standard: body changed by one byte", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW, NOW,
      0, "msg_1", "{t}", "v1,{sig}", BODY("{\"amount\":1000}"), BODY("{\"amount\":1001}"),
      WEBHOOK_MISMATCH },
    { "standard: webhook-id is signed (no pre-claiming another id)", VERIFY_STANDARD_WEBHOOKS,
      { SW_SPEC }, 1, NULL, 0, 1614265330, "msg_p5jXN8AQM9LWM0D4loKWxJel", "1614265330",
      "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", BODY("{\"test\": 2432232314}"),
      NULL, 0, WEBHOOK_MISMATCH },
    { "standard: wrong secret", VERIFY_STANDARD_WEBHOOKS, { SW_OLD }, 1, SW_NEW, NOW, 0, "msg_1",
      "{t}", "v1,{sig}", BODY("{}"), NULL, 0, WEBHOOK_MISMATCH },
    { "standard: rotation, the second secret matches", VERIFY_STANDARD_WEBHOOKS,
      { SW_NEW, SW_OLD }, 2, SW_OLD, NOW, 0, "msg_1", "{t}", "v1,{sig}", BODY("{}"), NULL, 0,
      WEBHOOK_OK },
    { "standard: rotation, the first secret matches", VERIFY_STANDARD_WEBHOOKS,
      { SW_NEW, SW_OLD }, 2, SW_NEW, NOW, 0, "msg_1", "{t}", "v1,{sig}", BODY("{}"), NULL, 0,
      WEBHOOK_OK },
    { "standard: multi-signature, only the second is valid", VERIFY_STANDARD_WEBHOOKS,
      { SW_NEW }, 1, SW_NEW, NOW, 0, "msg_1", "{t}", "v1,{forged} v1,{sig}", BODY("{}"), NULL, 0,
      WEBHOOK_OK },
    { "standard: other versions are ignored", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW,
      NOW, 0, "msg_1", "{t}", "v1a,c2lnbmF0dXJl v2,{sig} v1,{sig}", BODY("{}"), NULL, 0,
      WEBHOOK_OK },
    { "standard: a valid signature under another version", VERIFY_STANDARD_WEBHOOKS, { SW_NEW },
      1, SW_NEW, NOW, 0, "msg_1", "{t}", "v2,{sig}", BODY("{}"), NULL, 0, WEBHOOK_MISMATCH },
    { "standard: binary body with NUL", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW, NOW, 0,
      "msg_1", "{t}", "v1,{sig}", BODY("\x00\x01\xff{\"a\":\x00}"), NULL, 0, WEBHOOK_OK },
    { "standard: bytes after a NUL are signed too", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1,
      SW_NEW, NOW, 0, "msg_1", "{t}", "v1,{sig}", BODY("ab\x00" "cd"), BODY("ab\x00" "ce"),
      WEBHOOK_MISMATCH },
    { "standard: empty body", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW, NOW, 0, "msg_1",
      "{t}", "v1,{sig}", NULL, 0, NULL, 0, WEBHOOK_OK },
    { "standard: 300 s old is within tolerance", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW,
      NOW - 300, 0, "msg_1", "{t}", "v1,{sig}", BODY("{}"), NULL, 0, WEBHOOK_OK },
    { "standard: stale timestamp (301 s old)", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW,
      NOW - 301, 0, "msg_1", "{t}", "v1,{sig}", BODY("{}"), NULL, 0, WEBHOOK_STALE },
    { "standard: published vector a day later is stale", VERIFY_STANDARD_WEBHOOKS, { SW_SPEC },
      1, NULL, 0, 1614265330 + 86400, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330",
      "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", BODY("{\"test\": 2432232314}"),
      NULL, 0, WEBHOOK_STALE },
    { "standard: future timestamp (301 s ahead)", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1,
      SW_NEW, NOW + 301, 0, "msg_1", "{t}", "v1,{sig}", BODY("{}"), NULL, 0, WEBHOOK_STALE },
    { "standard: stale and forged is a mismatch", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1,
      SW_NEW, NOW - 3600, 0, "msg_1", "{t}", "v1,{forged}", BODY("{}"), NULL, 0,
      WEBHOOK_MISMATCH },
    { "standard: missing webhook-signature", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW,
      NOW, 0, "msg_1", "{t}", NULL, BODY("{}"), NULL, 0, WEBHOOK_MISSING },
    { "standard: missing webhook-id", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW, NOW, 0,
      NULL, "{t}", "v1,{sig}", BODY("{}"), NULL, 0, WEBHOOK_MISSING },
    { "standard: missing webhook-timestamp", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW,
      NOW, 0, "msg_1", NULL, "v1,{sig}", BODY("{}"), NULL, 0, WEBHOOK_MISSING },
    { "standard: empty webhook-signature", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW, NOW,
      0, "msg_1", "{t}", "  ", BODY("{}"), NULL, 0, WEBHOOK_MISSING },
    { "standard: malformed signature header", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW,
      NOW, 0, "msg_1", "{t}", "garbage", BODY("{}"), NULL, 0, WEBHOOK_MALFORMED },
    { "standard: malformed timestamp", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW, NOW, 0,
      "msg_1", "{t}.5", "v1,{sig}", BODY("{}"), NULL, 0, WEBHOOK_MALFORMED },
    { "standard: negative timestamp", VERIFY_STANDARD_WEBHOOKS, { SW_NEW }, 1, SW_NEW, NOW, 0,
      "msg_1", "-{t}", "v1,{sig}", BODY("{}"), NULL, 0, WEBHOOK_MALFORMED },
    { "standard: a secret that is not base64 signs nothing", VERIFY_STANDARD_WEBHOOKS,
      { "whsec_not*base64" }, 1, SW_NEW, NOW, 0, "msg_1", "{t}", "v1,{sig}", BODY("{}"), NULL, 0,
      WEBHOOK_MISMATCH },
    { "standard: a bad secret does not hide a good one", VERIFY_STANDARD_WEBHOOKS,
      { "whsec_", SW_NEW }, 2, SW_NEW, NOW, 0, "msg_1", "{t}", "v1,{sig}", BODY("{}"), NULL, 0,
      WEBHOOK_OK },

    /* ---- GitHub ---- */
    { "github: the docs' published vector", VERIFY_GITHUB, { GH_DOCS }, 1, NULL, 0, 0, NULL, NULL,
      "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
      BODY("Hello, World!"), NULL, 0, WEBHOOK_OK },
    { "github: upper-case hex is the same signature", VERIFY_GITHUB, { GH_DOCS }, 1, NULL, 0, 0,
      NULL, NULL, "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17",
      BODY("Hello, World!"), NULL, 0, WEBHOOK_OK },
    { "github: valid", VERIFY_GITHUB, { GH_DOCS }, 1, GH_DOCS, 0, 0, NULL, NULL, "sha256={sig}",
      BODY("{\"action\":\"opened\"}"), NULL, 0, WEBHOOK_OK },
    { "github: no timestamp, any clock", VERIFY_GITHUB, { GH_DOCS }, 1, NULL, 0, INT64_C(1) << 40,
      NULL, NULL, "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
      BODY("Hello, World!"), NULL, 0, WEBHOOK_OK },
    { "github: forged signature (one character)", VERIFY_GITHUB, { GH_DOCS }, 1, GH_DOCS, 0, 0,
      NULL, NULL, "sha256={forged}", BODY("Hello, World!"), NULL, 0, WEBHOOK_MISMATCH },
    { "github: body changed by one byte", VERIFY_GITHUB, { GH_DOCS }, 1, NULL, 0, 0, NULL, NULL,
      "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
      BODY("Hello, World?"), NULL, 0, WEBHOOK_MISMATCH },
    { "github: rotation, the second secret matches", VERIFY_GITHUB, { GH_OTHER, GH_DOCS }, 2,
      NULL, 0, 0, NULL, NULL,
      "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
      BODY("Hello, World!"), NULL, 0, WEBHOOK_OK },
    { "github: wrong secret", VERIFY_GITHUB, { GH_OTHER }, 1, GH_DOCS, 0, 0, NULL, NULL,
      "sha256={sig}", BODY("{}"), NULL, 0, WEBHOOK_MISMATCH },
    { "github: binary body with NUL", VERIFY_GITHUB, { GH_DOCS }, 1, GH_DOCS, 0, 0, NULL, NULL,
      "sha256={sig}", BODY("\x00\x00PK\x03\x04\x00"), NULL, 0, WEBHOOK_OK },
    { "github: bytes after a NUL are signed too", VERIFY_GITHUB, { GH_DOCS }, 1, GH_DOCS, 0, 0,
      NULL, NULL, "sha256={sig}", BODY("a\x00" "b"), BODY("a\x00" "c"), WEBHOOK_MISMATCH },
    { "github: missing header", VERIFY_GITHUB, { GH_DOCS }, 1, GH_DOCS, 0, 0, NULL, NULL, NULL,
      BODY("{}"), NULL, 0, WEBHOOK_MISSING },
    { "github: sha1 header is malformed here", VERIFY_GITHUB, { GH_DOCS }, 1, NULL, 0, 0, NULL,
      NULL, "sha1=0a4d55a8d778e5022fab701977c5d840bbc486d0", BODY("Hello, World!"), NULL, 0,
      WEBHOOK_MALFORMED },
    { "github: short hex is malformed", VERIFY_GITHUB, { GH_DOCS }, 1, NULL, 0, 0, NULL, NULL,
      "sha256=757107ea", BODY("Hello, World!"), NULL, 0, WEBHOOK_MALFORMED },
    { "github: non-hex is malformed", VERIFY_GITHUB, { GH_DOCS }, 1, NULL, 0, 0, NULL, NULL,
      "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1g",
      BODY("Hello, World!"), NULL, 0, WEBHOOK_MALFORMED },

    /* ---- Stripe ---- */
    { "stripe: openssl dgst value", VERIFY_STRIPE, { ST_A }, 1, NULL, 0, NOW + 10, NULL, NULL,
      "t=1700000000,v1=0d82a261071768f1ddd21d94f6476ec95b9b2a1f4de9fd55aa93ad34e86c6ca1",
      BODY("{\"id\":\"evt_1NG8Du2eZvKYlo2CUI79vXWy\",\"object\":\"event\"}"), NULL, 0,
      WEBHOOK_OK },
    { "stripe: valid", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL, "t={t},v1={sig}",
      BODY("{\"id\":\"evt_1\"}"), NULL, 0, WEBHOOK_OK },
    { "stripe: valid with a v0 entry", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL,
      "t={t},v1={sig},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
      BODY("{\"id\":\"evt_1\"}"), NULL, 0, WEBHOOK_OK },
    { "stripe: forged signature (one character)", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL,
      NULL, "t={t},v1={forged}", BODY("{\"id\":\"evt_1\"}"), NULL, 0, WEBHOOK_MISMATCH },
    { "stripe: body changed by one byte", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL,
      "t={t},v1={sig}", BODY("{\"id\":\"evt_2\"}"), BODY("{\"id\":\"evt_1\"}"),
      WEBHOOK_MISMATCH },
    { "stripe: timestamp is signed", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL,
      "t=1700000001,v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_MISMATCH },
    { "stripe: wrong secret", VERIFY_STRIPE, { ST_B }, 1, ST_A, NOW, 0, NULL, NULL,
      "t={t},v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_MISMATCH },
    { "stripe: rotation, the second secret matches", VERIFY_STRIPE, { ST_B, ST_A }, 2, ST_A, NOW,
      0, NULL, NULL, "t={t},v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_OK },
    { "stripe: multi-signature, only the second v1 is valid", VERIFY_STRIPE, { ST_A }, 1, ST_A,
      NOW, 0, NULL, NULL, "t={t},v1={forged},v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_OK },
    { "stripe: a valid signature under v0 only", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL,
      NULL, "t={t},v0={sig}", BODY("{}"), NULL, 0, WEBHOOK_MISMATCH },
    { "stripe: binary body with NUL", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL,
      "t={t},v1={sig}", BODY("\x00{\"id\":\"evt\x00\"}\x00"), NULL, 0, WEBHOOK_OK },
    { "stripe: bytes after a NUL are signed too", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL,
      NULL, "t={t},v1={sig}", BODY("x\x00" "1"), BODY("x\x00" "2"), WEBHOOK_MISMATCH },
    { "stripe: 300 s old is within tolerance", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW - 300, 0,
      NULL, NULL, "t={t},v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_OK },
    { "stripe: stale timestamp (301 s old)", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW - 301, 0, NULL,
      NULL, "t={t},v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_STALE },
    { "stripe: future timestamp (301 s ahead)", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW + 301, 0,
      NULL, NULL, "t={t},v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_STALE },
    { "stripe: missing header", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL, NULL,
      BODY("{}"), NULL, 0, WEBHOOK_MISSING },
    { "stripe: malformed header", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL,
      "garbage", BODY("{}"), NULL, 0, WEBHOOK_MALFORMED },
    { "stripe: no timestamp", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL, "v1={sig}",
      BODY("{}"), NULL, 0, WEBHOOK_MALFORMED },
    { "stripe: timestamp not a number", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL,
      "t=soon,v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_MALFORMED },
    { "stripe: two timestamps", VERIFY_STRIPE, { ST_A }, 1, ST_A, NOW, 0, NULL, NULL,
      "t={t},t=1,v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_MALFORMED },
    { "stripe: secret used as-is, not base64-decoded", VERIFY_STRIPE,
      { "whsec_cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r" }, 1, "whsec_cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r",
      NOW, 0, NULL, NULL, "t={t},v1={sig}", BODY("{}"), NULL, 0, WEBHOOK_OK },

    /* ---- policy ---- */
    { "none: nothing to check", VERIFY_NONE, { NULL }, 0, NULL, 0, 0, NULL, NULL, NULL,
      BODY("{}"), NULL, 0, WEBHOOK_OK },
    { "no secret configured verifies nothing", VERIFY_GITHUB, { NULL }, 0, NULL, 0, 0, NULL, NULL,
      "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
      BODY("Hello, World!"), NULL, 0, WEBHOOK_MISMATCH },
};

/* The sender's HMAC key for a configured secret: raw bytes for Standard Webhooks. */
static void sender_key(enum verify_scheme scheme, const char *secret, const void **key,
                       size_t *len)
{
    *key = secret;
    *len = strlen(secret);
    if (scheme != VERIFY_STANDARD_WEBHOOKS)
        return;
    for (size_t i = 0; i < sizeof(sender_keys) / sizeof(sender_keys[0]); i++) {
        if (strcmp(sender_keys[i].configured, secret) == 0) {
            *key = sender_keys[i].raw;
            *len = sender_keys[i].raw_len;
            return;
        }
    }
    fprintf(stderr, "no raw key for %s\n", secret);
    abort();
}

/* Replace each {name} in tmpl; values[i] stands for names[i]. out holds outsize bytes. */
static void expand(const char *tmpl, const char *const *names, const char *const *values,
                   size_t n, char *out, size_t outsize)
{
    size_t o = 0;

    while (*tmpl != '\0') {
        size_t i;

        for (i = 0; i < n; i++) {
            size_t nl = strlen(names[i]);
            if (strncmp(tmpl, names[i], nl) == 0)
                break;
        }
        if (i < n) {
            size_t vl = strlen(values[i]);
            if (o + vl >= outsize)
                abort();
            memcpy(out + o, values[i], vl);
            o += vl;
            tmpl += strlen(names[i]);
        } else {
            if (o + 1 >= outsize)
                abort();
            out[o++] = *tmpl++;
        }
    }
    out[o] = '\0';
}

/* What the sender puts in the signature: base64 (Standard Webhooks) or lower-case hex. */
static void sender_sign(const struct verify_case *c, const char *ts_text, char *sig, size_t size)
{
    const void *key;
    size_t keylen, blen = c->signed_body ? c->signed_len : c->body_len, n = 0;
    const char *b = c->signed_body ? c->signed_body : c->body;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char *content = malloc(blen + 128);

    if (content == NULL)
        abort();
    if (c->scheme == VERIFY_STANDARD_WEBHOOKS)
        n = (size_t)snprintf(content, 128, "%s.%s.", c->id ? c->id : "", ts_text);
    else if (c->scheme == VERIFY_STRIPE)
        n = (size_t)snprintf(content, 128, "%" PRId64 ".", c->ts);
    if (blen > 0)
        memcpy(content + n, b, blen);
    n += blen;
    sender_key(c->scheme, c->signer, &key, &keylen);
    if (HMAC(EVP_sha256(), key, (int)keylen, (unsigned char *)content, n, md, &mdlen) == NULL)
        abort();
    free(content);
    if (c->scheme == VERIFY_STANDARD_WEBHOOKS) {
        EVP_EncodeBlock((unsigned char *)sig, md, (int)mdlen);
    } else {
        for (unsigned i = 0; i < mdlen && 2 * i + 2 < size; i++)
            snprintf(sig + 2 * i, 3, "%02x", md[i]);
    }
}

static void run_verify_case(const struct verify_case *c)
{
    char t[32], sig[128] = "", forged[128] = "", ts_hdr[256], sig_hdr[512];
    const char *names[] = { "{t}", "{sig}", "{forged}" };
    const char *values[] = { t, sig, forged };
    struct webhook_headers h = { 0 };
    const char *reason = NULL;
    enum webhook_verdict v;

    snprintf(t, sizeof(t), "%" PRId64, c->ts);
    if (c->ts_hdr != NULL)
        expand(c->ts_hdr, names, values, 1, ts_hdr, sizeof(ts_hdr));
    if (c->signer != NULL) {
        sender_sign(c, c->ts_hdr ? ts_hdr : t, sig, sizeof(sig));
        strcpy(forged, sig);
        forged[0] = forged[0] == 'a' ? 'b' : 'a';
    }
    if (c->sig_hdr != NULL)
        expand(c->sig_hdr, names, values, 3, sig_hdr, sizeof(sig_hdr));

    switch (c->scheme) {
    case VERIFY_STANDARD_WEBHOOKS:
        h.webhook_id = c->id;
        h.webhook_timestamp = c->ts_hdr ? ts_hdr : NULL;
        h.webhook_signature = c->sig_hdr ? sig_hdr : NULL;
        break;
    case VERIFY_GITHUB:
        h.hub_signature_256 = c->sig_hdr ? sig_hdr : NULL;
        break;
    case VERIFY_STRIPE:
        h.stripe_signature = c->sig_hdr ? sig_hdr : NULL;
        break;
    case VERIFY_NONE:
        break;
    }

    v = webhook_verify(c->scheme, (char *const *)c->secrets, c->n_secrets, &h, c->body,
                       c->body_len, c->now ? c->now : NOW, &reason, NULL);
    int ok = v == c->want && reason != NULL;
    for (size_t i = 0; ok && i < c->n_secrets; i++)
        ok = strstr(reason, c->secrets[i]) == NULL;
    UNIT_CHECK(c->name, ok, "verdict %s (want %s), reason \"%s\"", webhook_verdict_name(v),
               webhook_verdict_name(c->want), reason ? reason : "(null)");
}

static const struct {
    const char *name;
    enum verify_scheme scheme;
    const char *secret;
    int want;
    const char *word;   /* the reason must contain it; NULL: any reason */
} secret_cases[] = {
    { "secret check: whsec_ base64", VERIFY_STANDARD_WEBHOOKS, SW_SPEC, 0, NULL },
    { "secret check: padded base64", VERIFY_STANDARD_WEBHOOKS, SW_NEW, 0, NULL },
    { "secret check: base64 without prefix", VERIFY_STANDARD_WEBHOOKS, SW_OLD_BARE, 0, NULL },
    { "secret check: not base64", VERIFY_STANDARD_WEBHOOKS, "whsec_not base64!", -1, NULL },
    { "secret check: unpadded base64", VERIFY_STANDARD_WEBHOOKS, "whsec_QUJDRA", -1, NULL },
    { "secret check: padding in the middle", VERIFY_STANDARD_WEBHOOKS, "whsec_QQ==QUJD", -1, NULL },
    { "secret check: prefix only", VERIFY_STANDARD_WEBHOOKS, "whsec_", -1, NULL },
    { "secret check: github takes any string of 16 bytes", VERIFY_GITHUB, "not base64! 16 b", 0, NULL },
    { "secret check: stripe takes whsec_ as-is", VERIFY_STRIPE, "whsec_not base64!", 0, NULL },
    { "secret check: empty", VERIFY_GITHUB, "", -1, NULL },
    /* under 16 bytes of key: guessable offline from one signed delivery */
    { "secret check: one decoded byte", VERIFY_STANDARD_WEBHOOKS, "whsec_AA==", -1, "16 bytes" },
    { "secret check: 15 decoded bytes", VERIFY_STANDARD_WEBHOOKS, "whsec_MDEyMzQ1Njc4OWFiY2Rl", -1,
      "16 bytes" },
    { "secret check: 16 decoded bytes", VERIFY_STANDARD_WEBHOOKS, "whsec_MDEyMzQ1Njc4OWFiY2RlZg==",
      0, NULL },
    { "secret check: stripe one space", VERIFY_STRIPE, " ", -1, "16 bytes" },
    { "secret check: stripe one byte", VERIFY_STRIPE, "x", -1, "16 bytes" },
    { "secret check: github 15 bytes", VERIFY_GITHUB, "0123456789abcde", -1, "16 bytes" },
    { "secret check: github 16 bytes", VERIFY_GITHUB, "0123456789abcdef", 0, NULL },
    { "secret check: stripe docs secret is 17 bytes", VERIFY_STRIPE, "whsec_test_secret", 0, NULL },
    { "secret check: github docs secret is 26 bytes", VERIFY_GITHUB, "It's a Secret to Everybody", 0,
      NULL },
    /* no whsec_ written: the reason must not claim there was one */
    { "secret check: bare non-base64 says so", VERIFY_STANDARD_WEBHOOKS, "not*base64*at*all", -1,
      "is not base64" },
    { "secret check: whsec_ non-base64 says after whsec_", VERIFY_STANDARD_WEBHOOKS,
      "whsec_not*base64*at*all", -1, "not base64 after whsec_" },
};

static const struct {
    const char *name;
    const char *body;
    size_t len;
    const char *pointer;
    size_t outsize;
    int want;
    const char *key;
} json_cases[] = {
    { "json: /id string", BODY("{\"id\":\"evt_1NG8Du2eZvKYlo2CUI79vXWy\",\"object\":\"event\"}"),
      "/id", 256, 0, "evt_1NG8Du2eZvKYlo2CUI79vXWy" },
    { "json: nested /data/object/id", BODY("{\"id\":\"evt_1\",\"data\":{\"object\":{\"id\":"
      "\"pi_3\",\"amount\":100}}}"), "/data/object/id", 256, 0, "pi_3" },
    { "json: ~1 is a slash", BODY("{\"a/b\":\"slash\",\"a\":{\"b\":\"nested\"}}"), "/a~1b", 256,
      0, "slash" },
    { "json: ~0 is a tilde", BODY("{\"m~n\":\"tilde\"}"), "/m~0n", 256, 0, "tilde" },
    { "json: ~01 is a tilde then 1", BODY("{\"~1\":\"right\",\"/\":\"wrong\"}"), "/~01", 256, 0,
      "right" },
    { "json: array index", BODY("{\"events\":[{\"id\":\"e0\"},{\"id\":\"e1\"}]}"), "/events/1/id",
      256, 0, "e1" },
    { "json: array index 0", BODY("[\"first\",\"second\"]"), "/0", 256, 0, "first" },
    { "json: array index with a leading zero", BODY("[\"first\",\"second\"]"), "/01", 256, -1,
      NULL },
    { "json: array index past the end", BODY("[\"first\"]"), "/1", 256, -1, NULL },
    { "json: array index '-'", BODY("[\"first\"]"), "/-", 256, -1, NULL },
    { "json: array index not a number", BODY("[\"first\"]"), "/id", 256, -1, NULL },
    { "json: empty member name", BODY("{\"\":\"blank\"}"), "/", 256, 0, "blank" },
    { "json: whole document", BODY("\"evt_top\""), "", 256, 0, "evt_top" },
    { "json: UTF-8 copied as bytes", BODY("{\"id\":\"\\u00e9vt\"}"), "/id", 256, 0, "\xc3\xa9vt" },
    { "json: missing member", BODY("{\"type\":\"charge.succeeded\"}"), "/id", 256, -1, NULL },
    { "json: descends into a string", BODY("{\"id\":\"evt_1\"}"), "/id/x", 256, -1, NULL },
    { "json: number value", BODY("{\"id\":12345}"), "/id", 256, -2, NULL },
    { "json: null value", BODY("{\"id\":null}"), "/id", 256, -2, NULL },
    { "json: object value", BODY("{\"id\":{\"v\":\"x\"}}"), "/id", 256, -2, NULL },
    { "json: empty string", BODY("{\"id\":\"\"}"), "/id", 256, -2, NULL },
    { "json: string with NUL", BODY("{\"id\":\"a\\u0000b\"}"), "/id", 256, -2, NULL },
    { "json: exactly outsize - 1", BODY("{\"id\":\"abcde\"}"), "/id", 6, 0, "abcde" },
    { "json: longer than outsize - 1", BODY("{\"id\":\"abcdef\"}"), "/id", 6, -2, NULL },
    { "json: not JSON", BODY("id=evt_1&type=charge"), "/id", 256, -3, NULL },
    { "json: truncated", BODY("{\"id\":\"evt_1\""), "/id", 256, -3, NULL },
    { "json: trailing garbage", BODY("{\"id\":\"evt_1\"} x"), "/id", 256, -3, NULL },
    { "json: empty body", "", 0, "/id", 256, -3, NULL },
    { "json: binary body", BODY("\x00{\"id\":\"evt_1\"}"), "/id", 256, -3, NULL },
    { "json: duplicate member", BODY("{\"id\":\"evt_1\",\"id\":\"evt_2\"}"), "/id", 256, -3,
      NULL },
    { "json: an integer past 64 bits beside the key", BODY("{\"id\":\"evt_1\",\"n\":"
      "99999999999999999999}"), "/id", 256, 0, "evt_1" },
    { "json: an integer past 64 bits, no key", BODY("{\"n\":-99999999999999999999}"), "/id", 256,
      -1, NULL },
    { "json: a number beyond a double", BODY("{\"id\":\"evt_1\",\"n\":1e400}"), "/id", 256, -3,
      NULL },
    { "json: pointer without a leading slash", BODY("{\"id\":\"evt_1\"}"), "id", 256, -1, NULL },
    { "json: bad escape ~2", BODY("{\"a~2\":\"x\"}"), "/a~2", 256, -1, NULL },
    { "json: body length is honoured", "{\"id\":\"evt_1\"}{\"id\":\"evt_2\"}", 14, "/id", 256, 0,
      "evt_1" },
};

/*
 * Both spellings of the Standard Webhooks headers (webhook-* and Svix's
 * default svix-*), with the spec's published vector as the valid set: the
 * verdict, and which id header the caller must take the key from.
 */
#define SPEC_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define SPEC_TS "1614265330"
#define SPEC_SIG "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
#define SPEC_FORGED "v1,h0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
#define SPEC_BODY "{\"test\": 2432232314}"

static const struct {
    const char *name;
    struct webhook_headers h;
    enum webhook_verdict want;
    const char *want_id_header;     /* NULL: none */
    const char *reason_has;         /* NULL: not checked */
} spelling_cases[] = {
    { "svix-* alone verifies, key from svix-id",
      { .svix_id = SPEC_ID, .svix_timestamp = SPEC_TS, .svix_signature = SPEC_SIG },
      WEBHOOK_OK, "svix-id", NULL },
    { "webhook-* alone verifies, key from webhook-id",
      { .webhook_id = SPEC_ID, .webhook_timestamp = SPEC_TS, .webhook_signature = SPEC_SIG },
      WEBHOOK_OK, "webhook-id", NULL },
    { "both spellings valid: webhook-id",
      { .webhook_id = SPEC_ID, .webhook_timestamp = SPEC_TS, .webhook_signature = SPEC_SIG,
        .svix_id = SPEC_ID, .svix_timestamp = SPEC_TS, .svix_signature = SPEC_SIG },
      WEBHOOK_OK, "webhook-id", NULL },
    { "forged webhook-* next to valid svix-*: svix-id",
      { .webhook_id = "msg_other", .webhook_timestamp = SPEC_TS, .webhook_signature = SPEC_SIG,
        .svix_id = SPEC_ID, .svix_timestamp = SPEC_TS, .svix_signature = SPEC_SIG },
      WEBHOOK_OK, "svix-id", NULL },
    { "a lone unsigned webhook-id next to valid svix-*: svix-id",
      { .webhook_id = "msg_other", .svix_id = SPEC_ID, .svix_timestamp = SPEC_TS,
        .svix_signature = SPEC_SIG },
      WEBHOOK_OK, "svix-id", NULL },
    { "valid webhook-* next to forged svix-*: webhook-id",
      { .webhook_id = SPEC_ID, .webhook_timestamp = SPEC_TS, .webhook_signature = SPEC_SIG,
        .svix_id = SPEC_ID, .svix_timestamp = SPEC_TS, .svix_signature = SPEC_FORGED },
      WEBHOOK_OK, "webhook-id", NULL },
    { "svix-* forged",
      { .svix_id = SPEC_ID, .svix_timestamp = SPEC_TS, .svix_signature = SPEC_FORGED },
      WEBHOOK_MISMATCH, NULL, "no signature matches" },
    { "svix-id is signed",
      { .svix_id = "msg_p5jXN8AQM9LWM0D4loKWxJel", .svix_timestamp = SPEC_TS,
        .svix_signature = SPEC_SIG },
      WEBHOOK_MISMATCH, NULL, NULL },
    { "svix-timestamp is signed",
      { .svix_id = SPEC_ID, .svix_timestamp = "1614265331", .svix_signature = SPEC_SIG },
      WEBHOOK_MISMATCH, NULL, NULL },
    { "svix-* without svix-timestamp",
      { .svix_id = SPEC_ID, .svix_signature = SPEC_SIG },
      WEBHOOK_MISSING, NULL, "svix-id, svix-timestamp or svix-signature header missing" },
    { "svix-timestamp not a number",
      { .svix_id = SPEC_ID, .svix_timestamp = "soon", .svix_signature = SPEC_SIG },
      WEBHOOK_MALFORMED, NULL, "svix-timestamp" },
    { "both forged: the webhook-* verdict",
      { .webhook_id = SPEC_ID, .webhook_timestamp = "x", .webhook_signature = SPEC_SIG,
        .svix_id = SPEC_ID, .svix_timestamp = SPEC_TS, .svix_signature = SPEC_FORGED },
      WEBHOOK_MALFORMED, NULL, "webhook-timestamp" },
    { "neither spelling",
      { .stripe_signature = "t=1,v1=00" },
      WEBHOOK_MISSING, NULL, "neither webhook-* nor svix-*" },
};

int main(void)
{
    for (size_t i = 0; i < sizeof(verify_cases) / sizeof(verify_cases[0]); i++)
        run_verify_case(&verify_cases[i]);

    for (size_t i = 0; i < sizeof(spelling_cases) / sizeof(spelling_cases[0]); i++) {
        static char *const spec_secret[] = { SW_SPEC };
        const char *reason = NULL, *id_header = "unset";
        enum webhook_verdict v = webhook_verify(VERIFY_STANDARD_WEBHOOKS, spec_secret, 1,
                                                &spelling_cases[i].h, BODY(SPEC_BODY),
                                                INT64_C(1614265330), &reason, &id_header);
        const char *want = spelling_cases[i].want_id_header;
        int ok = v == spelling_cases[i].want && reason != NULL &&
                 (want == NULL ? id_header == NULL : id_header != NULL && strcmp(id_header, want) == 0) &&
                 (spelling_cases[i].reason_has == NULL ||
                  strstr(reason, spelling_cases[i].reason_has) != NULL);
        UNIT_CHECK(spelling_cases[i].name, ok, "verdict %s (want %s), id header %s, reason \"%s\"",
                   webhook_verdict_name(v), webhook_verdict_name(spelling_cases[i].want),
                   id_header ? id_header : "(null)", reason ? reason : "(null)");
    }
    {
        /* only standard-webhooks names an id header */
        static char *const gh_secret[] = { GH_DOCS };
        const struct webhook_headers h = {
            .hub_signature_256 =
                "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            .webhook_id = SPEC_ID,
        };
        const char *id_header = "unset";
        enum webhook_verdict v = webhook_verify(VERIFY_GITHUB, gh_secret, 1, &h,
                                                BODY("Hello, World!"), NOW, NULL, &id_header);
        UNIT_CHECK("github: no id header", v == WEBHOOK_OK && id_header == NULL, "verdict %s",
                   webhook_verdict_name(v));
    }

    for (size_t i = 0; i < sizeof(secret_cases) / sizeof(secret_cases[0]); i++) {
        const char *reason = NULL;
        int rc = webhook_secret_check(secret_cases[i].scheme, secret_cases[i].secret, &reason);
        UNIT_CHECK(secret_cases[i].name, rc == secret_cases[i].want &&
                   (rc == 0 || (reason != NULL && strstr(reason, "base64!") == NULL)) &&
                   (secret_cases[i].word == NULL ||
                    (reason != NULL && strstr(reason, secret_cases[i].word) != NULL)) &&
                   (strncmp(secret_cases[i].secret, "whsec_", 6) == 0 || reason == NULL ||
                    strstr(reason, "whsec_") == NULL),
                   "rc %d (want %d), reason %s", rc, secret_cases[i].want,
                   reason ? reason : "(null)");
    }

    for (size_t i = 0; i < sizeof(json_cases) / sizeof(json_cases[0]); i++) {
        char out[256];
        size_t len = 0;
        int rc = webhook_key_from_json(json_cases[i].body, json_cases[i].len,
                                       json_cases[i].pointer, out, json_cases[i].outsize, &len);
        int ok = rc == json_cases[i].want;
        if (ok && rc == 0)
            ok = len == strlen(json_cases[i].key) && strcmp(out, json_cases[i].key) == 0;
        UNIT_CHECK(json_cases[i].name, ok, "rc %d (want %d)", rc, json_cases[i].want);
    }

    /* delivery.sign: the Standard Webhooks spec's example, signed by the proxy */
    {
        static char *const one[] = { SW_SPEC };
        char sig[WEBHOOK_SIGNATURE_MAX];
        int rc = webhook_sign(one, 1, SPEC_ID, INT64_C(1614265330), BODY(SPEC_BODY), sig,
                              sizeof(sig));
        UNIT_CHECK("sign: the spec's example signature", rc == 0 && strcmp(sig, SPEC_SIG) == 0,
                   "rc %d, %s", rc, sig);
    }
    {
        /* two secrets while the receiver rotates: two entries, each verifies on its own */
        static char *const two[] = { "whsec_" "QUNMLXVzZXItc2lnbmluZy1zZWNyZXQtMzI=", SW_SPEC };
        char sig[WEBHOOK_SIGNATURE_MAX];
        int rc = webhook_sign(two, 2, SPEC_ID, NOW, BODY(SPEC_BODY), sig, sizeof(sig));
        const struct webhook_headers h = { .webhook_id = SPEC_ID, .webhook_timestamp = "1700000000",
                                           .webhook_signature = sig };
        enum webhook_verdict v0 = webhook_verify(VERIFY_STANDARD_WEBHOOKS, two, 1, &h,
                                                 BODY(SPEC_BODY), NOW, NULL, NULL);
        enum webhook_verdict v1 = webhook_verify(VERIFY_STANDARD_WEBHOOKS, two + 1, 1, &h,
                                                 BODY(SPEC_BODY), NOW, NULL, NULL);
        UNIT_CHECK("sign: two secrets, two signatures", rc == 0 && strchr(sig, ' ') != NULL &&
                   strlen(sig) == 2 * 47 + 1 && v0 == WEBHOOK_OK && v1 == WEBHOOK_OK,
                   "rc %d, %s, %s %s", rc, sig, webhook_verdict_name(v0),
                   webhook_verdict_name(v1));
        rc = webhook_sign(two, 2, SPEC_ID, NOW, BODY(SPEC_BODY), sig, 60);
        UNIT_CHECK("sign: out too small", rc == -1 && sig[0] == '\0', "rc %d", rc);
    }
    {
        static const struct {
            const char *name, *secret;
            int want;
            const char *word;
        } sign_cases[] = {
            { "sign secret: the spec's (24 bytes)", SW_SPEC, 0, NULL },
            { "sign secret: 16 bytes is too short", "whsec_MDEyMzQ1Njc4OWFiY2RlZg==", -1, "24" },
            { "sign secret: needs whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", -1, "whsec_" },
            { "sign secret: not base64", "whsec_MfKQ9r8GKYqrTwjU*D8ILPZIo2LaLaSw", -1, "base64" },
            { "sign secret: empty after whsec_", "whsec_", -1, NULL },
        };
        for (size_t i = 0; i < sizeof(sign_cases) / sizeof(sign_cases[0]); i++) {
            const char *reason = NULL;
            int rc = webhook_sign_secret_check(sign_cases[i].secret, &reason);
            UNIT_CHECK(sign_cases[i].name, rc == sign_cases[i].want &&
                       (rc == 0) == (reason == NULL) &&
                       (sign_cases[i].word == NULL || strstr(reason, sign_cases[i].word) != NULL) &&
                       (reason == NULL || strstr(reason, "MfKQ") == NULL),
                       "rc %d, reason %s", rc, reason ? reason : "(null)");
        }
    }
    UNIT_CHECK("signature headers: each scheme's, any case",
               webhook_is_signature_header("stripe-signature") &&
               webhook_is_signature_header("X-Hub-Signature-256") &&
               webhook_is_signature_header("WEBHOOK-SIGNATURE") &&
               webhook_is_signature_header("svix-timestamp") &&
               !webhook_is_signature_header("Content-Type") &&
               !webhook_is_signature_header("X-GitHub-Delivery"), "wrong set");

    /* libcurl shares the thread's OpenSSL error queue: bad input must not leave errors on it */
    UNIT_CHECK("no OpenSSL error left queued", ERR_peek_error() == 0, "error %lu queued",
               ERR_peek_error());

    {
        static const char *const names[] = { "ok", "missing", "malformed", "mismatch", "stale" };
        int ok = 1;
        for (int v = WEBHOOK_OK; v <= WEBHOOK_STALE; v++)
            ok = ok && strcmp(webhook_verdict_name((enum webhook_verdict)v), names[v]) == 0;
        UNIT_CHECK("verdict names", ok, "a verdict has another name");
    }
    UNIT_DONE();
}
