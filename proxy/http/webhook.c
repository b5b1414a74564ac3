/*
 * webhook.c - provider signatures and event ids for webhook routes
 * (docs/webhooks.md). HMAC, base64 and hex come from OpenSSL, JSON from
 * jansson; what is written here is only which bytes each provider signs and
 * how its header lists the signatures.
 */
#include "webhook.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "json_pointer.h"

#define WEBHOOK_DIGEST_LEN 32   /* HMAC-SHA256, bytes */
#define WEBHOOK_HEX_LEN 64      /* the digest as hex, chars */
#define WEBHOOK_B64_LEN 44      /* the digest as padded base64, chars */
#define WEBHOOK_MAX_B64_SECRET 684 /* base64 chars of a whsec_ secret: up to 513 bytes of key */
#define WEBHOOK_MAX_UNIX_DIGITS 18 /* keeps a timestamp far from int64 overflow */
#define WEBHOOK_WHSEC_PREFIX "whsec_"

/* A run of bytes that is part of the signed content. */
struct webhook_span {
    const void *p;
    size_t len;
};

static bool webhook_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* s without surrounding OWS; its length in *len. s must not be NULL. */
static const char *webhook_trim(const char *s, size_t *len)
{
    const char *end = s + strlen(s);

    while (s < end && webhook_ows(*s))
        s++;
    while (end > s && webhook_ows(end[-1]))
        end--;
    *len = (size_t)(end - s);
    return s;
}

/* Unix seconds as decimal digits only (no sign, no fraction). 0 or -1. */
static int webhook_parse_unix(const char *p, size_t len, int64_t *out)
{
    int64_t n = 0;

    if (len == 0 || len > WEBHOOK_MAX_UNIX_DIGITS)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        n = n * 10 + (p[i] - '0');
    }
    *out = n;
    return 0;
}

/* Standard Webhooks and Stripe both allow +-5 minutes; exactly 300 s is still fine. */
static enum webhook_verdict webhook_check_time(int64_t ts, int64_t now_s, const char **reason)
{
    if (ts < now_s && (uint64_t)now_s - (uint64_t)ts > WEBHOOK_TOLERANCE_S) {
        *reason = "signature timestamp is more than 5 minutes old";
        return WEBHOOK_STALE;
    }
    if (ts > now_s && (uint64_t)ts - (uint64_t)now_s > WEBHOOK_TOLERANCE_S) {
        *reason = "signature timestamp is more than 5 minutes in the future";
        return WEBHOOK_STALE;
    }
    *reason = "signature valid";
    return WEBHOOK_OK;
}

/* HMAC-SHA256 (RFC 2104) of the spans in order, via EVP_MAC. 0 or -1. */
static int webhook_hmac_sha256(const unsigned char *key, size_t keylen,
                               const struct webhook_span *spans, size_t n_spans,
                               unsigned char md[WEBHOOK_DIGEST_LEN])
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
    EVP_MAC_CTX *ctx = NULL;
    OSSL_PARAM params[2];
    size_t mdlen = 0;
    int rc = -1;

    if (mac == NULL)
        goto failed;
    ctx = EVP_MAC_CTX_new(mac);
    if (ctx == NULL)
        goto failed;
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    if (!EVP_MAC_init(ctx, key, keylen, params))
        goto failed;
    for (size_t i = 0; i < n_spans; i++) {
        if (spans[i].len > 0 && !EVP_MAC_update(ctx, spans[i].p, spans[i].len))
            goto failed;
    }
    if (!EVP_MAC_final(ctx, md, &mdlen, WEBHOOK_DIGEST_LEN) || mdlen != WEBHOOK_DIGEST_LEN)
        goto failed;
    rc = 0;
failed:
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return rc;
}

/*
 * 64 hex digits (either case) into 32 bytes. The length and digits are
 * checked first so that OpenSSL never puts an error on the thread's queue.
 */
static bool webhook_hex_digest(const char *p, size_t len, unsigned char out[WEBHOOK_DIGEST_LEN])
{
    char hex[WEBHOOK_HEX_LEN + 1];
    size_t n = 0;

    if (len != WEBHOOK_HEX_LEN)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (OPENSSL_hexchar2int((unsigned char)p[i]) < 0)
            return false;
    }
    memcpy(hex, p, len);
    hex[len] = '\0';
    return OPENSSL_hexstr2buf_ex(out, WEBHOOK_DIGEST_LEN, &n, hex, '\0') == 1 &&
           n == WEBHOOK_DIGEST_LEN;
}

static bool webhook_b64_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '+' || c == '/';
}

/*
 * Decode padded standard base64 (RFC 4648 section 4). EVP_DecodeBlock skips
 * surrounding whitespace, takes '=' anywhere as zero bits and counts padding
 * as output bytes, so the shape is checked here and the padding subtracted.
 * out must hold 3 * len / 4 bytes. 0 or -1.
 */
static int webhook_b64_decode(const char *in, size_t len, unsigned char *out, size_t *out_len)
{
    size_t pad = 0;
    int n;

    if (len == 0 || len % 4 != 0)
        return -1;
    while (pad < 2 && in[len - 1 - pad] == '=')
        pad++;
    for (size_t i = 0; i < len - pad; i++) {
        if (!webhook_b64_char(in[i]))
            return -1;
    }
    n = EVP_DecodeBlock(out, (const unsigned char *)in, (int)len);
    if (n < 0 || (size_t)n != 3 * (len / 4))
        return -1;
    *out_len = (size_t)n - pad;
    return 0;
}

/*
 * The HMAC key a Standard Webhooks secret stands for: base64 after an
 * optional whsec_ prefix (the reference libraries accept both).
 * key holds WEBHOOK_MAX_B64_SECRET / 4 * 3 bytes. 0 or -1.
 */
static int webhook_standard_key(const char *secret, unsigned char *key, size_t *keylen,
                                const char **reason)
{
    size_t len = strlen(secret);
    bool prefixed = strncmp(secret, WEBHOOK_WHSEC_PREFIX, strlen(WEBHOOK_WHSEC_PREFIX)) == 0;

    if (prefixed) {
        secret += strlen(WEBHOOK_WHSEC_PREFIX);
        len -= strlen(WEBHOOK_WHSEC_PREFIX);
    }
    if (len > WEBHOOK_MAX_B64_SECRET) {
        *reason = "standard-webhooks secret is too long";
        return -1;
    }
    if (webhook_b64_decode(secret, len, key, keylen) < 0 || *keylen == 0) {
        *reason = prefixed ? "standard-webhooks secret is not base64 after whsec_"
                           : "standard-webhooks secret is not base64";
        return -1;
    }
    return 0;
}

/*
 * The next space-separated entry of a webhook-signature value, starting at
 * *pos; false at the end. Empty entries (double spaces) are skipped.
 */
static bool webhook_next_entry(const char *s, size_t len, size_t *pos, const char **entry,
                               size_t *entry_len)
{
    while (*pos < len && s[*pos] == ' ')
        (*pos)++;
    if (*pos >= len)
        return false;
    *entry = s + *pos;
    while (*pos < len && s[*pos] != ' ')
        (*pos)++;
    *entry_len = (size_t)(s + *pos - *entry);
    return true;
}

/* In a `version,signature` entry, the v1 signature; false for other versions or shapes. */
static bool webhook_standard_v1(const char *entry, size_t len, const char **sig, size_t *sig_len)
{
    if (len < 3 || memcmp(entry, "v1,", 3) != 0)
        return false;
    *sig = entry + 3;
    *sig_len = len - 3;
    return true;
}

/*
 * One spelling of the Standard Webhooks headers, with the reasons that name
 * it: webhook-* (the spec) or svix-* (what Svix sends by default).
 */
struct webhook_standard_set {
    const char *id, *timestamp, *signature;     /* header values, NULL when absent */
    const char *id_header;                      /* "webhook-id" or "svix-id" */
    const char *missing, *empty, *bad_timestamp, *no_entry, *no_v1;
};

#define WEBHOOK_STANDARD_REASONS(p)                                                   \
    p "-id, " p "-timestamp or " p "-signature header missing",                      \
    p "-id, " p "-timestamp or " p "-signature header empty",                        \
    p "-timestamp is not unix seconds", p "-signature has no version,signature entry", \
    p "-signature has no v1 signature"

/* Standard Webhooks, "Verifying webhook authenticity", over one spelling of the headers. */
static enum webhook_verdict webhook_verify_standard(char *const *secrets, size_t n_secrets,
                                                    const struct webhook_standard_set *h,
                                                    const char *body, size_t body_len,
                                                    int64_t now_s, const char **reason)
{
    const char *id, *ts, *sig, *entry, *v1;
    size_t id_len, ts_len, sig_len, entry_len, v1_len, pos;
    size_t n_entries = 0, n_v1 = 0, n_usable = 0;
    int64_t t;

    if (h->id == NULL || h->timestamp == NULL || h->signature == NULL) {
        *reason = h->missing;
        return WEBHOOK_MISSING;
    }
    id = webhook_trim(h->id, &id_len);
    ts = webhook_trim(h->timestamp, &ts_len);
    sig = webhook_trim(h->signature, &sig_len);
    if (id_len == 0 || ts_len == 0 || sig_len == 0) {
        *reason = h->empty;
        return WEBHOOK_MISSING;
    }
    if (webhook_parse_unix(ts, ts_len, &t) < 0) {
        *reason = h->bad_timestamp;
        return WEBHOOK_MALFORMED;
    }
    for (pos = 0; webhook_next_entry(sig, sig_len, &pos, &entry, &entry_len);) {
        if (memchr(entry, ',', entry_len) != NULL)
            n_entries++;
        if (webhook_standard_v1(entry, entry_len, &v1, &v1_len))
            n_v1++;
    }
    if (n_entries == 0) {
        *reason = h->no_entry;
        return WEBHOOK_MALFORMED;
    }
    if (n_v1 == 0) {
        *reason = h->no_v1;
        return WEBHOOK_MISMATCH;
    }

    /* signed content: {webhook-id}.{webhook-timestamp}.{body}, as received */
    const struct webhook_span spans[] = {
        { id, id_len }, { ".", 1 }, { ts, ts_len }, { ".", 1 }, { body, body_len },
    };
    *reason = "no signature matches a configured secret";
    for (size_t i = 0; i < n_secrets; i++) {
        unsigned char key[WEBHOOK_MAX_B64_SECRET / 4 * 3];
        unsigned char md[WEBHOOK_DIGEST_LEN];
        char expected[WEBHOOK_B64_LEN + 1];
        const char *why = NULL;
        size_t keylen = 0;
        bool match = false;

        if (webhook_standard_key(secrets[i], key, &keylen, &why) < 0) {
            if (n_usable == 0)
                *reason = why;
            continue;
        }
        n_usable++;
        *reason = "no signature matches a configured secret";
        int rc = webhook_hmac_sha256(key, keylen, spans, sizeof(spans) / sizeof(spans[0]), md);
        OPENSSL_cleanse(key, sizeof(key));
        if (rc < 0) {
            *reason = "HMAC-SHA256 failed";
            continue;
        }
        /* compare as padded base64: EVP_EncodeBlock always pads, as senders do */
        if (EVP_EncodeBlock((unsigned char *)expected, md, WEBHOOK_DIGEST_LEN) != WEBHOOK_B64_LEN)
            continue;
        for (pos = 0; !match && webhook_next_entry(sig, sig_len, &pos, &entry, &entry_len);) {
            if (webhook_standard_v1(entry, entry_len, &v1, &v1_len) && v1_len == WEBHOOK_B64_LEN &&
                CRYPTO_memcmp(v1, expected, WEBHOOK_B64_LEN) == 0)
                match = true;
        }
        if (match)
            return webhook_check_time(t, now_s, reason);
    }
    return WEBHOOK_MISMATCH;
}

/*
 * Both spellings: each set with at least one header present is checked on its
 * own, so the id that becomes the key is always the one its signature
 * covers; a forged webhook-id next to a valid svix-* set is never read.
 */
static enum webhook_verdict webhook_verify_standard_sets(char *const *secrets, size_t n_secrets,
                                                         const struct webhook_headers *h,
                                                         const char *body, size_t body_len,
                                                         int64_t now_s, const char **reason,
                                                         const char **id_header)
{
    const struct webhook_standard_set sets[] = {
        { h->webhook_id, h->webhook_timestamp, h->webhook_signature, "webhook-id",
          WEBHOOK_STANDARD_REASONS("webhook") },
        { h->svix_id, h->svix_timestamp, h->svix_signature, "svix-id",
          WEBHOOK_STANDARD_REASONS("svix") },
    };
    enum webhook_verdict first = WEBHOOK_MISSING;
    const char *first_reason = NULL;

    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        const char *why = NULL;
        enum webhook_verdict v;

        if (sets[i].id == NULL && sets[i].timestamp == NULL && sets[i].signature == NULL)
            continue;
        v = webhook_verify_standard(secrets, n_secrets, &sets[i], body, body_len, now_s, &why);
        if (v == WEBHOOK_OK) {
            *reason = why;
            *id_header = sets[i].id_header;
            return v;
        }
        if (first_reason == NULL) {
            first = v;
            first_reason = why;
        }
    }
    *reason = first_reason != NULL ? first_reason
                                   : "neither webhook-* nor svix-* signature headers present";
    return first;
}

/* GitHub, "Validating webhook deliveries". */
static enum webhook_verdict webhook_verify_github(char *const *secrets, size_t n_secrets,
                                                  const struct webhook_headers *h,
                                                  const char *body, size_t body_len,
                                                  const char **reason)
{
    static const char prefix[] = "sha256=";
    unsigned char want[WEBHOOK_DIGEST_LEN];
    const char *sig;
    size_t sig_len;

    if (h->hub_signature_256 == NULL) {
        *reason = "X-Hub-Signature-256 header missing";
        return WEBHOOK_MISSING;
    }
    sig = webhook_trim(h->hub_signature_256, &sig_len);
    if (sig_len == 0) {
        *reason = "X-Hub-Signature-256 header empty";
        return WEBHOOK_MISSING;
    }
    if (sig_len < sizeof(prefix) - 1 || memcmp(sig, prefix, sizeof(prefix) - 1) != 0 ||
        !webhook_hex_digest(sig + sizeof(prefix) - 1, sig_len - (sizeof(prefix) - 1), want)) {
        *reason = "X-Hub-Signature-256 is not sha256=<64 hex digits>";
        return WEBHOOK_MALFORMED;
    }

    const struct webhook_span spans[] = { { body, body_len } };
    *reason = "no signature matches a configured secret";
    for (size_t i = 0; i < n_secrets; i++) {
        unsigned char md[WEBHOOK_DIGEST_LEN];

        if (webhook_hmac_sha256((const unsigned char *)secrets[i], strlen(secrets[i]), spans, 1,
                                md) < 0) {
            *reason = "HMAC-SHA256 failed";
            continue;
        }
        if (CRYPTO_memcmp(md, want, WEBHOOK_DIGEST_LEN) == 0) {
            *reason = "signature valid";
            return WEBHOOK_OK;
        }
    }
    return WEBHOOK_MISMATCH;
}

/* The next `key=value` item of a Stripe-Signature value, OWS-trimmed; false at the end. */
static bool webhook_next_item(const char *s, size_t len, size_t *pos, const char **item,
                              size_t *item_len)
{
    const char *start, *end;

    if (*pos > len)
        return false;
    start = s + *pos;
    end = memchr(start, ',', len - *pos);
    if (end == NULL)
        end = s + len;
    *pos = (size_t)(end - s) + 1;
    while (start < end && webhook_ows(*start))
        start++;
    while (end > start && webhook_ows(end[-1]))
        end--;
    *item = start;
    *item_len = (size_t)(end - start);
    return true;
}

/* Stripe, "Verify webhook signatures manually". */
static enum webhook_verdict webhook_verify_stripe(char *const *secrets, size_t n_secrets,
                                                  const struct webhook_headers *h,
                                                  const char *body, size_t body_len,
                                                  int64_t now_s, const char **reason)
{
    const char *sig, *item, *t_text = NULL;
    size_t sig_len, item_len, t_len = 0, pos, n_v1 = 0;
    int64_t t;

    if (h->stripe_signature == NULL) {
        *reason = "Stripe-Signature header missing";
        return WEBHOOK_MISSING;
    }
    sig = webhook_trim(h->stripe_signature, &sig_len);
    if (sig_len == 0) {
        *reason = "Stripe-Signature header empty";
        return WEBHOOK_MISSING;
    }
    for (pos = 0; webhook_next_item(sig, sig_len, &pos, &item, &item_len);) {
        if (item_len >= 2 && memcmp(item, "t=", 2) == 0) {
            if (t_text != NULL) {
                *reason = "Stripe-Signature has two timestamps";
                return WEBHOOK_MALFORMED;
            }
            t_text = item + 2;
            t_len = item_len - 2;
        } else if (item_len >= 3 && memcmp(item, "v1=", 3) == 0) {
            n_v1++;
        }
    }
    if (t_text == NULL || webhook_parse_unix(t_text, t_len, &t) < 0) {
        *reason = "Stripe-Signature has no t=<unix seconds>";
        return WEBHOOK_MALFORMED;
    }
    if (n_v1 == 0) {
        *reason = "Stripe-Signature has no v1 signature";
        return WEBHOOK_MISMATCH;
    }

    /* signed payload: {t}.{body}, t as received */
    const struct webhook_span spans[] = { { t_text, t_len }, { ".", 1 }, { body, body_len } };
    *reason = "no signature matches a configured secret";
    for (size_t i = 0; i < n_secrets; i++) {
        unsigned char md[WEBHOOK_DIGEST_LEN];

        if (webhook_hmac_sha256((const unsigned char *)secrets[i], strlen(secrets[i]), spans,
                                sizeof(spans) / sizeof(spans[0]), md) < 0) {
            *reason = "HMAC-SHA256 failed";
            continue;
        }
        for (pos = 0; webhook_next_item(sig, sig_len, &pos, &item, &item_len);) {
            unsigned char want[WEBHOOK_DIGEST_LEN];

            if (item_len >= 3 && memcmp(item, "v1=", 3) == 0 &&
                webhook_hex_digest(item + 3, item_len - 3, want) &&
                CRYPTO_memcmp(md, want, WEBHOOK_DIGEST_LEN) == 0)
                return webhook_check_time(t, now_s, reason);
        }
    }
    return WEBHOOK_MISMATCH;
}

enum webhook_verdict webhook_verify(enum verify_scheme scheme, char *const *secrets,
                                    size_t n_secrets, const struct webhook_headers *h,
                                    const char *body, size_t body_len, int64_t now_s,
                                    const char **reason, const char **id_header)
{
    const char *why = NULL, *signed_id = NULL;
    enum webhook_verdict v;

    if (body == NULL)
        body_len = 0;
    if (scheme != VERIFY_NONE && n_secrets == 0) {
        v = WEBHOOK_MISMATCH;
        why = "no secret configured";
    } else {
        switch (scheme) {
        case VERIFY_STANDARD_WEBHOOKS:
            v = webhook_verify_standard_sets(secrets, n_secrets, h, body, body_len, now_s, &why,
                                             &signed_id);
            break;
        case VERIFY_GITHUB:
            v = webhook_verify_github(secrets, n_secrets, h, body, body_len, &why);
            break;
        case VERIFY_STRIPE:
            v = webhook_verify_stripe(secrets, n_secrets, h, body, body_len, now_s, &why);
            break;
        case VERIFY_NONE:
        default:
            v = WEBHOOK_OK;
            why = "route does not verify signatures";
            break;
        }
    }
    if (reason != NULL)
        *reason = why;
    if (id_header != NULL)
        *id_header = v == WEBHOOK_OK ? signed_id : NULL;
    return v;
}

int webhook_secret_check(enum verify_scheme scheme, const char *secret, const char **reason)
{
    unsigned char key[WEBHOOK_MAX_B64_SECRET / 4 * 3];
    const char *why = NULL;
    size_t keylen;
    int rc = 0;

    if (secret == NULL || secret[0] == '\0') {
        why = "secret is empty";
        rc = -1;
    } else if (scheme == VERIFY_STANDARD_WEBHOOKS) {
        rc = webhook_standard_key(secret, key, &keylen, &why);
        OPENSSL_cleanse(key, sizeof(key));
        if (rc == 0 && keylen < WEBHOOK_MIN_SECRET_BYTES) {
            why = "standard-webhooks secret decodes to fewer than 16 bytes";
            rc = -1;
        }
    } else if (strlen(secret) < WEBHOOK_MIN_SECRET_BYTES) {
        why = "secret is shorter than 16 bytes";
        rc = -1;
    }
    if (reason != NULL)
        *reason = why;
    return rc;
}

bool webhook_is_signature_header(const char *name)
{
    static const char *const names[] = {
        "Stripe-Signature", "X-Hub-Signature-256", "X-Hub-Signature", "webhook-id",
        "webhook-timestamp", "webhook-signature", "svix-id", "svix-timestamp", "svix-signature",
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcasecmp(name, names[i]) == 0)
            return true;
    return false;
}

int webhook_sign_secret_check(const char *secret, const char **reason)
{
    unsigned char key[WEBHOOK_MAX_B64_SECRET / 4 * 3];
    const char *why = NULL;
    size_t keylen = 0;
    int rc = -1;

    if (secret == NULL || strncmp(secret, WEBHOOK_WHSEC_PREFIX, strlen(WEBHOOK_WHSEC_PREFIX)) != 0)
        why = "expected whsec_ followed by base64 (Standard Webhooks)";
    else if (webhook_standard_key(secret, key, &keylen, &why) == 0 &&
             keylen < WEBHOOK_MIN_SIGN_SECRET_BYTES)
        why = "the secret decodes to fewer than 24 bytes";
    else if (why == NULL)
        rc = 0;
    OPENSSL_cleanse(key, sizeof(key));
    if (reason != NULL)
        *reason = why;
    return rc;
}

int webhook_sign(char *const *secrets, size_t n_secrets, const char *id, int64_t timestamp_s,
                 const char *body, size_t body_len, char *out, size_t outsize)
{
    char ts[24];
    size_t used = 0;

    if (outsize == 0)
        return -1;
    out[0] = '\0';
    snprintf(ts, sizeof(ts), "%lld", (long long)timestamp_s);
    for (size_t i = 0; i < n_secrets; i++) {
        unsigned char key[WEBHOOK_MAX_B64_SECRET / 4 * 3], md[WEBHOOK_DIGEST_LEN];
        const char *why = NULL;
        size_t keylen = 0;
        const struct webhook_span spans[] = {
            { (const unsigned char *)id, strlen(id) }, { (const unsigned char *)".", 1 },
            { (const unsigned char *)ts, strlen(ts) }, { (const unsigned char *)".", 1 },
            { (const unsigned char *)body, body_len },
        };
        int rc = webhook_standard_key(secrets[i], key, &keylen, &why);

        if (rc == 0)
            rc = webhook_hmac_sha256(key, keylen, spans, sizeof(spans) / sizeof(spans[0]), md);
        OPENSSL_cleanse(key, sizeof(key));
        /* "v1," + 44 base64 characters (+ a space before the second) + NUL */
        if (rc < 0 || used + (i > 0) + 3 + WEBHOOK_B64_LEN + 1 > outsize) {
            out[0] = '\0';
            return -1;
        }
        if (i > 0)
            out[used++] = ' ';
        memcpy(out + used, "v1,", 3);
        used += 3;
        used += (size_t)EVP_EncodeBlock((unsigned char *)out + used, md, WEBHOOK_DIGEST_LEN);
        out[used] = '\0';
    }
    return 0;
}

int webhook_key_from_json(const char *body, size_t len, const char *pointer, char *out,
                          size_t outsize, size_t *out_len)
{
    json_error_t error;
    json_t *root, *node;
    const char *s;
    size_t slen;
    int rc = -1;

    if (body == NULL)
        return -3;
    /*
     * providers never repeat a member; if a body does, which "id" is meant is
     * ambiguous. An integer past 64 bits is read as a double: only the key's
     * string is used, so a body with one is as readable as any other.
     */
    root = json_loadb(body, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL |
                                     JSON_DECODE_INT_AS_REAL, &error);
    if (root == NULL)
        return -3;
    node = json_pointer_get(root, pointer);
    if (node == NULL)
        goto failed;
    rc = -2;
    if (!json_is_string(node))
        goto failed;
    s = json_string_value(node);
    slen = json_string_length(node);
    if (slen == 0 || slen >= outsize || memchr(s, '\0', slen) != NULL)
        goto failed;
    memcpy(out, s, slen);
    out[slen] = '\0';
    *out_len = slen;
    rc = 0;
failed:
    json_decref(root);
    return rc;
}

const char *webhook_verdict_name(enum webhook_verdict v)
{
    switch (v) {
    case WEBHOOK_OK:
        return "ok";
    case WEBHOOK_MISSING:
        return "missing";
    case WEBHOOK_MALFORMED:
        return "malformed";
    case WEBHOOK_MISMATCH:
        return "mismatch";
    case WEBHOOK_STALE:
        return "stale";
    }
    return "unknown";
}
