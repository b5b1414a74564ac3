/*
 * test_seal.c - sealed values and keyed fingerprints (seal.h) and the
 * primitives under them (kdf.h).
 *
 * The wrappers first, against the RFCs' vectors (RFC 5869 appendix A for
 * HKDF-SHA-256, RFC 4231 section 4 for HMAC-SHA-256), so a misuse of the
 * EVP API (a parameter kept from the previous call, a part dropped) fails
 * here; then a value opened by hand with OpenSSL's one-shot HKDF and
 * AES-256-GCM, which pins the layout and the derivation seal.h documents;
 * round trips, a changed byte, another Redis key, an unknown key id,
 * rotation, keyed fingerprints (stable under one keyring, different under
 * two, a pinned vector), the counters, and threads sealing at once.
 * Prints `ok NAME` or `FAIL NAME: why` per check (unit.h); exits 1 if any
 * check failed.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>

#include "fingerprint.h"
#include "kdf.h"
#include "keyring.h"
#include "seal.h"
#include "unit.h"

/* hex (borrowed) as bytes: OpenSSL's parser, the caller frees. */
static unsigned char *unhex(const char *hex, long *len)
{
    unsigned char *b = OPENSSL_hexstr2buf(hex, len);

    if (b == NULL) {
        fprintf(stderr, "bad hex in a vector: %s\n", hex);
        exit(1);
    }
    return b;
}

static bool equals_hex(const unsigned char *got, size_t len, const char *hex)
{
    long want_len;
    unsigned char *want = unhex(hex, &want_len);
    bool same = (size_t)want_len == len && memcmp(got, want, len) == 0;

    OPENSSL_free(want);
    return same;
}

/* ---- the primitives: RFC 5869 and RFC 4231 ----------------------------------- */

static const struct {
    const char *name, *ikm, *salt, *info, *prk, *okm;
} hkdf_vectors[] = {
    { "RFC 5869 A.1", "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "000102030405060708090a0b0c",
      "f0f1f2f3f4f5f6f7f8f9",
      "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5",
      "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865" },
    { "RFC 5869 A.2",
      "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
      "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
      "404142434445464748494a4b4c4d4e4f",
      "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
      "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
      "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf",
      "b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacbcccdcecf"
      "d0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef"
      "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff",
      "06a6b88c5853361a06104c9ceb35b45cef760014904671014a193f40c15fc244",
      "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c"
      "59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71"
      "cc30c58179ec3e87c14c01d5c1f3434f1d87" },
    /* zero-length salt and info: a salt or info left from the previous vector would show */
    { "RFC 5869 A.3", "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "", "",
      "19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04",
      "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8" },
};

static void run_hkdf_vectors(void)
{
    for (int round = 0; round < 2; round++) {   /* twice: the thread's context is reused */
        for (size_t i = 0; i < sizeof(hkdf_vectors) / sizeof(hkdf_vectors[0]); i++) {
            long ikm_len, salt_len = 0, info_len = 0, okm_len;
            unsigned char *ikm = unhex(hkdf_vectors[i].ikm, &ikm_len);
            unsigned char *salt = hkdf_vectors[i].salt[0] ? unhex(hkdf_vectors[i].salt, &salt_len)
                                                          : NULL;
            unsigned char *info = hkdf_vectors[i].info[0] ? unhex(hkdf_vectors[i].info, &info_len)
                                                          : NULL;
            unsigned char *want = unhex(hkdf_vectors[i].okm, &okm_len);
            unsigned char prk[KDF_SHA256_LEN], okm[128];
            char name[96];

            snprintf(name, sizeof(name), "%s: HKDF-Extract (round %d)", hkdf_vectors[i].name, round);
            UNIT_CHECK(name, kdf_hkdf_extract(salt, (size_t)salt_len, ikm, (size_t)ikm_len, prk) ==
                             0 && equals_hex(prk, sizeof(prk), hkdf_vectors[i].prk), "PRK differs");
            snprintf(name, sizeof(name), "%s: HKDF-Expand (round %d)", hkdf_vectors[i].name, round);
            UNIT_CHECK(name, kdf_hkdf_expand(prk, sizeof(prk), info, (size_t)info_len, okm,
                                             (size_t)okm_len) == 0 &&
                             memcmp(okm, want, (size_t)okm_len) == 0, "OKM differs");
            OPENSSL_free(ikm);
            OPENSSL_free(salt);
            OPENSSL_free(info);
            OPENSSL_free(want);
        }
    }
}

#define AA131 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static const struct {
    const char *name, *key, *data, *mac;    /* key in hex; data as text, or hex after "0x" */
} hmac_vectors[] = {
    { "RFC 4231 4.2", "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "Hi There",
      "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" },
    { "RFC 4231 4.3", "4a656665", "what do ya want for nothing?",
      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" },
    { "RFC 4231 4.4", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      "0xdddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
      "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe" },
    { "RFC 4231 4.5", "0102030405060708090a0b0c0d0e0f10111213141516171819",
      "0xcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
      "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b" },
    { "RFC 4231 4.7", AA131, "Test Using Larger Than Block-Size Key - Hash Key First",
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54" },
    { "RFC 4231 4.8", AA131, "This is a test using a larger than block-size key and a larger "
      "than block-size data. The key needs to be hashed before being used by the HMAC algorithm.",
      "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2" },
};

static void run_hmac_vectors(void)
{
    for (size_t i = 0; i < sizeof(hmac_vectors) / sizeof(hmac_vectors[0]); i++) {
        long key_len, data_len;
        unsigned char *key = unhex(hmac_vectors[i].key, &key_len), mac[KDF_SHA256_LEN];
        bool is_hex = strncmp(hmac_vectors[i].data, "0x", 2) == 0;
        unsigned char *data = is_hex ? unhex(hmac_vectors[i].data + 2, &data_len)
                                     : (unsigned char *)hmac_vectors[i].data;
        size_t len = is_hex ? (size_t)data_len : strlen(hmac_vectors[i].data);
        /* the message in three parts (one empty): the parts are concatenated */
        struct kdf_bytes parts[] = { { data, len / 3 }, { NULL, 0 }, { data + len / 3, len - len / 3 } };
        char name[96];

        snprintf(name, sizeof(name), "%s: HMAC-SHA-256 over parts", hmac_vectors[i].name);
        UNIT_CHECK(name, kdf_hmac_sha256(key, (size_t)key_len, parts, 3, mac) == 0 &&
                         equals_hex(mac, sizeof(mac), hmac_vectors[i].mac), "MAC differs");
        OPENSSL_free(key);
        if (is_hex)
            OPENSSL_free(data);
    }
}

/* ---- keyrings ------------------------------------------------------------------ */

/* A keyring of n keys: ids[i] with 32 bytes of fill[i]. */
static struct keyring *ring(size_t n, const char *const *ids, const unsigned char *fill)
{
    char err[128];
    struct keyring *kr = keyring_create(err, sizeof(err));

    for (size_t i = 0; kr != NULL && i < n; i++) {
        unsigned char secret[KEYRING_SECRET_LEN];

        memset(secret, fill[i], sizeof(secret));
        if (keyring_add(kr, ids[i], strlen(ids[i]), secret) != KEYRING_ADDED) {
            keyring_unref(kr);
            kr = NULL;
        }
    }
    if (kr == NULL) {
        fprintf(stderr, "cannot make a keyring: %s\n", err);
        exit(1);
    }
    return kr;
}

static struct keyring *ring1(const char *id, unsigned char fill)
{
    return ring(1, &id, &fill);
}

static struct keyring *ring2(const char *a, unsigned char fa, const char *b, unsigned char fb)
{
    const char *ids[] = { a, b };
    const unsigned char fill[] = { fa, fb };

    return ring(2, ids, fill);
}

/* The associated data of a record at redis_key with fingerprint fp. */
#define RECORD_AAD(redis_key, fp)                                                           \
    (struct kdf_bytes[]) { { "record", 6 }, { redis_key, strlen(redis_key) }, { fp, strlen(fp) } }

static const char marker[] = "4111 1111 1111 1111 exp 12/29 name=ALICE";

/* Seals marker under kr for key; returns the value's length (0 on failure). */
static size_t seal_marker(const struct keyring *kr, const char *redis_key, unsigned char *out,
                          size_t outsize)
{
    size_t len = 0;

    if (seal_value(kr, RECORD_AAD(redis_key, "fp"), 3, marker, sizeof(marker), out, outsize,
                   &len) != 0)
        return 0;
    return len;
}

/* Opens value under kr as a record at redis_key; the result, and whether plain is marker. */
static int open_marker(const struct keyring *kr, const char *redis_key,
                       const unsigned char *value, size_t len, char *key_id, bool *is_marker)
{
    unsigned char plain[256];
    size_t plain_len = 0;
    int rc;

    memset(plain, 0xee, sizeof(plain));
    rc = seal_open(kr, RECORD_AAD(redis_key, "fp"), 3, value, len, plain, sizeof(plain),
                   &plain_len, key_id);
    *is_marker = rc == SEAL_OK && plain_len == sizeof(marker) &&
                 memcmp(plain, marker, sizeof(marker)) == 0;
    /* whatever the outcome, no byte of the plaintext escapes a failed open */
    if (rc != SEAL_OK && memmem(plain, sizeof(plain), "ALICE", 5) != NULL)
        return 99;
    return rc;
}

/* ---- the layout, opened by hand ------------------------------------------------ */

/*
 * Opens value (sealed under a key of 32 bytes of fill) with OpenSSL's
 * one-shot HKDF (extract and expand, no salt) and AES-256-GCM, following
 * seal.h's layout, bound to parts.
 */
static bool open_by_hand(const unsigned char *value, size_t len, unsigned char fill,
                         const struct kdf_bytes *parts, size_t n, unsigned char *plain)
{
    static const char label[] = "idempotency-proxy value key v1";
    unsigned char secret[32], info[sizeof(label) - 1 + 32], key[32], tag[16];
    size_t l = value[1], head = 2 + l + 32 + 12, ct = len - head - 16;
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *kctx = EVP_KDF_CTX_new(kdf);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, secret, sizeof(secret)),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, sizeof(info)),
        OSSL_PARAM_construct_end(),
    };
    int outl;
    bool ok;

    memset(secret, fill, sizeof(secret));
    memcpy(info, label, sizeof(label) - 1);
    memcpy(info + sizeof(label) - 1, value + 2 + l, 32);
    memcpy(tag, value + head + ct, 16);
    ok = value[0] == 1 && EVP_KDF_derive(kctx, key, sizeof(key), params) == 1 &&
         EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, value + 2 + l + 32) == 1 &&
         EVP_DecryptUpdate(c, NULL, &outl, value, (int)head) == 1;
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char be[4] = { (unsigned char)(parts[i].len >> 24), (unsigned char)(parts[i].len >> 16),
                                (unsigned char)(parts[i].len >> 8), (unsigned char)parts[i].len };

        ok = EVP_DecryptUpdate(c, NULL, &outl, be, 4) == 1 &&
             EVP_DecryptUpdate(c, NULL, &outl, parts[i].data, (int)parts[i].len) == 1;
    }
    ok = ok && EVP_DecryptUpdate(c, plain, &outl, value + head, (int)ct) == 1 &&
         EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, tag) == 1 &&
         EVP_DecryptFinal_ex(c, plain + outl, &outl) == 1;
    EVP_CIPHER_CTX_free(c);
    EVP_KDF_CTX_free(kctx);
    EVP_KDF_free(kdf);
    return ok;
}

static void run_layout_cases(void)
{
    struct keyring *kr = ring1("2026-12", 0x01);
    unsigned char value[256], plain[256];
    size_t len = seal_marker(kr, "idem:{abc}", value, sizeof(value));
    struct kdf_bytes parts[] = { { "record", 6 }, { "idem:{abc}", 10 }, { "fp", 2 } };
    char id[KEYRING_ID_MAX + 1];
    unsigned char prk[KDF_SHA256_LEN], secret[32];

    UNIT_CHECK("layout: version, key id length and key id lead the value",
               len == sizeof(marker) + SEAL_OVERHEAD(7) && value[0] == SEAL_FORMAT_V1 &&
               value[1] == 7 && memcmp(value + 2, "2026-12", 7) == 0, "len %zu", len);
    UNIT_CHECK("layout: the value opens by hand with one-shot HKDF(secret, no salt, label || seed) "
               "and AES-256-GCM over head || parts",
               open_by_hand(value, len, 0x01, parts, 3, plain) &&
               memcmp(plain, marker, sizeof(marker)) == 0, "does not open");
    UNIT_CHECK("layout: the ciphertext does not show the plaintext",
               memmem(value, len, "ALICE", 5) == NULL && memmem(value, len, "4111", 4) == NULL,
               "plaintext in the value");
    UNIT_CHECK("layout: seal_key_id reads the id without a keyring",
               seal_key_id(value, len, id) == 0 && strcmp(id, "2026-12") == 0 &&
               seal_key_id(value, 10, id) == -1 && id[0] == '\0', "%s", id);
    /* the prk the keyring keeps is HKDF-Extract of the secret with no salt */
    memset(secret, 0x01, sizeof(secret));
    UNIT_CHECK("layout: the keyring keeps HKDF-Extract(no salt, secret), not the secret",
               kdf_hkdf_extract(NULL, 0, secret, sizeof(secret), prk) == 0 &&
               memcmp(prk, keyring_prk(kr, 0), sizeof(prk)) == 0 &&
               memmem(keyring_prk(kr, 0), 2 * KDF_SHA256_LEN, secret, 8) == NULL, "prk differs");
    UNIT_CHECK("layout: two seals of one plaintext differ (seed, nonce)",
               seal_marker(kr, "idem:{abc}", plain, sizeof(plain)) == len &&
               memcmp(plain + 9, value + 9, len - 9) != 0, "same bytes");
    keyring_unref(kr);
}

/* ---- round trips and failures ----------------------------------------------------- */

static void run_round_trips(void)
{
    struct keyring *kr = ring1("k", 0x02);
    static const size_t sizes[] = { 0, 1, 15, 16, 17, 1024, 70000 };
    static unsigned char plain[70000], value[70000 + SEAL_OVERHEAD_MAX], back[70000];

    for (size_t i = 0; i < sizeof(plain); i++)
        plain[i] = (unsigned char)(i * 7 + 3);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = 0, back_len = 1;
        char name[64], id[KEYRING_ID_MAX + 1];
        int rc = seal_value(kr, RECORD_AAD("idem:{r}", "f"), 3, sizes[s] ? plain : NULL,
                            sizes[s], value, sizeof(value), &len);

        snprintf(name, sizeof(name), "round trip of %zu bytes", sizes[s]);
        UNIT_CHECK(name, rc == 0 && len == seal_size(kr, sizes[s]) &&
                   seal_open(kr, RECORD_AAD("idem:{r}", "f"), 3, value, len,
                             sizes[s] ? back : NULL, sizes[s], &back_len, id) == SEAL_OK &&
                   back_len == sizes[s] && memcmp(back, plain, sizes[s]) == 0 &&
                   strcmp(id, "k") == 0, "rc %d len %zu back %zu", rc, len, back_len);
    }
    UNIT_CHECK("an output one byte short is refused",
               seal_value(kr, NULL, 0, plain, 10, value, seal_size(kr, 10) - 1, &(size_t){0}) ==
               -1, "sealed");
    {
        size_t len = 0, back_len;

        seal_value(kr, NULL, 0, plain, 10, value, sizeof(value), &len);
        UNIT_CHECK("a plaintext buffer too small is refused, not overrun",
                   seal_open(kr, NULL, 0, value, len, back, 9, &back_len, NULL) == -1, "opened");
    }
    keyring_unref(kr);
}

static void run_failure_cases(void)
{
    struct keyring *kr = ring1("2026-12", 0x03), *other = ring1("2026-12", 0x04);
    unsigned char value[256], changed[256];
    size_t len = seal_marker(kr, "idem:{abc}", value, sizeof(value));
    char id[KEYRING_ID_MAX + 1];
    bool is_marker = false;
    int rc, never_ok = 0;

    UNIT_CHECK("the value opens where it was sealed",
               open_marker(kr, "idem:{abc}", value, len, id, &is_marker) == SEAL_OK && is_marker,
               "does not open");
    /* every byte, one bit changed */
    for (size_t i = 0; i < len; i++) {
        memcpy(changed, value, len);
        changed[i] ^= 0x01;
        rc = open_marker(kr, "idem:{abc}", changed, len, id, &is_marker);
        if (rc == SEAL_OK || rc == 99 || rc < 0)
            never_ok++;
    }
    UNIT_CHECK("a value with any one bit changed never opens, and nothing of it escapes",
               never_ok == 0, "%d bytes", never_ok);
    memcpy(changed, value, len);
    changed[len - 20] ^= 0x80;      /* the ciphertext */
    UNIT_CHECK("a value with one byte of its ciphertext changed is unreadable",
               open_marker(kr, "idem:{abc}", changed, len, id, &is_marker) == SEAL_UNREADABLE &&
               strcmp(id, "2026-12") == 0, "not unreadable");
    memcpy(changed, value, len);
    changed[len - 1] ^= 0x80;       /* the tag */
    UNIT_CHECK("a value with one byte of its tag changed is unreadable",
               open_marker(kr, "idem:{abc}", changed, len, id, &is_marker) == SEAL_UNREADABLE,
               "not unreadable");
    memcpy(changed, value, len);
    changed[2 + 7 + 3] ^= 0x80;     /* the seed: another value key */
    UNIT_CHECK("a value with one byte of its seed changed is unreadable",
               open_marker(kr, "idem:{abc}", changed, len, id, &is_marker) == SEAL_UNREADABLE,
               "not unreadable");
    UNIT_CHECK("a value copied under another Redis key is unreadable",
               open_marker(kr, "idem:{abd}", value, len, id, &is_marker) == SEAL_UNREADABLE,
               "opened");
    rc = seal_open(kr, (struct kdf_bytes[]){ { "record", 6 }, { "idem:{abc}fp", 12 } }, 2, value,
                   len, changed, sizeof(changed), &(size_t){0}, id);
    UNIT_CHECK("the same bytes in other parts are another binding", rc == SEAL_UNREADABLE,
               "rc %d", rc);
    rc = seal_open(kr, (struct kdf_bytes[]){ { "delivery", 8 }, { "idem:{abc}", 10 }, { "fp", 2 } },
                   3, value, len, changed, sizeof(changed), &(size_t){0}, id);
    UNIT_CHECK("a record does not open as a delivery", rc == SEAL_UNREADABLE, "rc %d", rc);
    UNIT_CHECK("the same key id with another secret is unreadable, not another answer",
               open_marker(other, "idem:{abc}", value, len, id, &is_marker) == SEAL_UNREADABLE,
               "opened");
    UNIT_CHECK("a truncated value is unreadable",
               open_marker(kr, "idem:{abc}", value, len - 1, id, &is_marker) == SEAL_UNREADABLE &&
               open_marker(kr, "idem:{abc}", value, SEAL_OVERHEAD(7) - 1, id, &is_marker) ==
                   SEAL_UNREADABLE && open_marker(kr, "idem:{abc}", value, 0, id, &is_marker) ==
                   SEAL_UNREADABLE && id[0] == '\0', "opened");
    memcpy(changed, value, len);
    changed[0] = 2;
    UNIT_CHECK("another format version is unreadable, no key id read",
               open_marker(kr, "idem:{abc}", changed, len, id, &is_marker) == SEAL_UNREADABLE &&
               id[0] == '\0', "opened");
    UNIT_CHECK("a plaintext record of today is unreadable as a sealed value",
               open_marker(kr, "idem:{abc}", (const unsigned char *)"IR1D0000", 8, id,
                           &is_marker) == SEAL_UNREADABLE, "opened");
    keyring_unref(kr);
    keyring_unref(other);
}

/* ---- rotation ------------------------------------------------------------------------- */

static void run_rotation_cases(void)
{
    struct keyring *a = ring1("A", 0x0a), *ab = ring2("A", 0x0a, "B", 0x0b);
    struct keyring *ba = ring2("B", 0x0b, "A", 0x0a), *b = ring1("B", 0x0b);
    unsigned char va[256], vab[256], vba[256];
    size_t la = seal_marker(a, "idem:{r}", va, sizeof(va));
    size_t lab = seal_marker(ab, "idem:{r}", vab, sizeof(vab));
    size_t lba = seal_marker(ba, "idem:{r}", vba, sizeof(vba));
    char id[KEYRING_ID_MAX + 1], id2[KEYRING_ID_MAX + 1];
    bool m1 = false, m2 = false, m3 = false;

    /* 1. B added second: A still encrypts, both decrypt */
    seal_key_id(vab, lab, id);
    UNIT_CHECK("rotation 1: B added second, A still encrypts", strcmp(id, "A") == 0, "%s", id);
    UNIT_CHECK("rotation 1: values under A open",
               open_marker(ab, "idem:{r}", va, la, id, &m1) == SEAL_OK && m1 &&
               open_marker(ab, "idem:{r}", vab, lab, id2, &m2) == SEAL_OK && m2, "not opened");
    /* 2. B moved first: B encrypts, A still decrypts; an instance still at step 1 opens B's */
    seal_key_id(vba, lba, id);
    UNIT_CHECK("rotation 2: B first, B encrypts", strcmp(id, "B") == 0, "%s", id);
    UNIT_CHECK("rotation 2: values under A still open, and B's open at an instance still at step 1",
               open_marker(ba, "idem:{r}", va, la, id, &m1) == SEAL_OK && m1 &&
               open_marker(ab, "idem:{r}", vba, lba, id2, &m2) == SEAL_OK && m2 &&
               strcmp(id2, "B") == 0 && open_marker(ba, "idem:{r}", vba, lba, id, &m3) ==
               SEAL_OK && m3, "not opened");
    /* 3. A removed too early: its values are unavailable, naming A; B's open */
    UNIT_CHECK("rotation 3: A removed, a value under A is key-unavailable naming A",
               open_marker(b, "idem:{r}", va, la, id, &m1) == SEAL_KEY_UNAVAILABLE &&
               strcmp(id, "A") == 0 && !m1, "%s", id);
    UNIT_CHECK("rotation 3: values under B open",
               open_marker(b, "idem:{r}", vba, lba, id, &m1) == SEAL_OK && m1, "not opened");
    UNIT_CHECK("an instance without the new key finds B's values key-unavailable naming B",
               open_marker(a, "idem:{r}", vba, lba, id, &m1) == SEAL_KEY_UNAVAILABLE &&
               strcmp(id, "B") == 0, "%s", id);
    keyring_unref(a);
    keyring_unref(ab);
    keyring_unref(ba);
    keyring_unref(b);
}

/* ---- keyed fingerprints ------------------------------------------------------------------- */

#define BODY "{\"a\":1}"

static int fp(const struct keyring *kr, const char *id, const char *method, const char *target,
              const char *body, char *hex)
{
    return seal_fingerprint(kr, id, id ? strlen(id) : 0, method, target, body, strlen(body), hex);
}

static void run_fingerprint_cases(void)
{
    struct keyring *one = ring1("2026-12", 0x01), *again = ring1("2026-12", 0x01);
    struct keyring *two = ring1("2026-12", 0x02), *both = ring2("2026-09", 0x02, "2026-12", 0x01);
    char h1[33], h2[33], h3[33], h4[33], plain[33];

    fp(one, NULL, "POST", "/v1/payments", BODY, h1);
    UNIT_CHECK("keyed fingerprint: a pinned vector (HMAC-SHA-256 under HKDF-Expand(prk, label), "
               "cut to 128 bits)", strcmp(h1, "a685e84d9129fe0e0b25eb5b9310464e") == 0, "%s", h1);
    fp(one, NULL, "POST", "/v1/payments", BODY, h2);
    fp(again, NULL, "POST", "/v1/payments", BODY, h3);
    UNIT_CHECK("keyed fingerprint: one keyring, the same request: the same fingerprint (also "
               "after a reload)", strcmp(h1, h2) == 0 && strcmp(h1, h3) == 0, "%s %s", h2, h3);
    fp(two, NULL, "POST", "/v1/payments", BODY, h2);
    UNIT_CHECK("keyed fingerprint: two keyrings, the same request: two fingerprints",
               strcmp(h1, h2) != 0 && strlen(h2) == FINGERPRINT_HEX_LEN, "%s", h2);
    fingerprint_request("POST", "/v1/payments", BODY, strlen(BODY), plain);
    UNIT_CHECK("keyed fingerprint: not today's XXH3 fingerprint", strcmp(h1, plain) != 0, "%s",
               plain);
    /* compared under the record's key id: a rotation keeps retries matching */
    UNIT_CHECK("keyed fingerprint: under a given key id, whichever key encrypts",
               fp(both, "2026-12", "POST", "/v1/payments", BODY, h2) == SEAL_OK &&
               strcmp(h1, h2) == 0 && fp(both, NULL, "POST", "/v1/payments", BODY, h3) ==
               SEAL_OK && strcmp(h3, h1) != 0, "%s %s", h2, h3);
    UNIT_CHECK("keyed fingerprint: a key id not in the keyring is key-unavailable",
               fp(one, "2026-09", "POST", "/v1/payments", BODY, h2) == SEAL_KEY_UNAVAILABLE &&
               h2[0] == '\0', "%s", h2);
    fp(one, NULL, "POST", "/v1/payments?x=1", BODY, h2);
    fp(one, NULL, "PATCH", "/v1/payments", BODY, h3);
    fp(one, NULL, "POST", "/v1/payments", "{\"a\":2}", h4);
    UNIT_CHECK("keyed fingerprint: method, target and body each count",
               strcmp(h1, h2) != 0 && strcmp(h1, h3) != 0 && strcmp(h1, h4) != 0, "same");
    fp(one, NULL, "POST", "/ab", "", h2);
    fp(one, NULL, "POST", "/a", "b", h3);
    UNIT_CHECK("keyed fingerprint: the fields are delimited", strcmp(h2, h3) != 0, "same");
    for (size_t i = 0; i < FINGERPRINT_HEX_LEN; i++)
        if (!((h1[i] >= '0' && h1[i] <= '9') || (h1[i] >= 'a' && h1[i] <= 'f')))
            h1[0] = 'X';
    UNIT_CHECK("keyed fingerprint: lowercase hex, the record head's shape", h1[0] != 'X', "%s", h1);
    keyring_unref(one);
    keyring_unref(again);
    keyring_unref(two);
    keyring_unref(both);
}

/* ---- counters ------------------------------------------------------------------------------ */

static uint64_t counted(const char *id, enum keyring_counter c)
{
    static struct keyring_counts all[KEYRING_COUNTED_IDS + 1];
    size_t n = keyring_counters_read(all, KEYRING_COUNTED_IDS + 1);

    for (size_t i = 0; i < n; i++) {
        if (strcmp(all[i].id, id) == 0)
            return all[i].n[c];
    }
    return 0;
}

static void run_counter_cases(void)
{
    struct keyring *kr = ring2("count-b", 0x21, "count-a", 0x20), *a = ring1("count-a", 0x20);
    unsigned char value[256];
    size_t len;
    char id[KEYRING_ID_MAX + 1];
    bool m;

    seal_marker(kr, "idem:{c}", value, sizeof(value));
    len = seal_marker(kr, "idem:{c}", value, sizeof(value));
    open_marker(kr, "idem:{c}", value, len, id, &m);
    open_marker(kr, "idem:{other}", value, len, id, &m);
    open_marker(a, "idem:{c}", value, len, id, &m);
    len = seal_marker(a, "idem:{c}", value, sizeof(value));
    open_marker(kr, "idem:{c}", value, len, id, &m);
    UNIT_CHECK("counters per key id: sealed, opened, unreadable, unavailable",
               counted("count-b", KEYRING_SEALED) == 2 && counted("count-b", KEYRING_OPENED) == 1 &&
               counted("count-b", KEYRING_UNREADABLE) == 1 &&
               counted("count-b", KEYRING_UNAVAILABLE) == 1 &&
               counted("count-a", KEYRING_SEALED) == 1 && counted("count-a", KEYRING_OPENED) == 1,
               "b %llu %llu %llu %llu a %llu %llu",
               (unsigned long long)counted("count-b", KEYRING_SEALED),
               (unsigned long long)counted("count-b", KEYRING_OPENED),
               (unsigned long long)counted("count-b", KEYRING_UNREADABLE),
               (unsigned long long)counted("count-b", KEYRING_UNAVAILABLE),
               (unsigned long long)counted("count-a", KEYRING_SEALED),
               (unsigned long long)counted("count-a", KEYRING_OPENED));
    keyring_unref(kr);
    keyring_unref(a);
}

/* ---- threads ----------------------------------------------------------------------------------- */

#define THREADS 4
#define ROUNDS 2000

static void *seal_many(void *arg)
{
    const struct keyring *kr = arg;
    uintptr_t bad = 0;

    for (int i = 0; i < ROUNDS; i++) {
        unsigned char value[256];
        char id[KEYRING_ID_MAX + 1], hex[33];
        size_t len = seal_marker(kr, "idem:{t}", value, sizeof(value));
        bool m = false;

        if (len == 0 || open_marker(kr, "idem:{t}", value, len, id, &m) != SEAL_OK || !m ||
            fp(kr, NULL, "POST", "/t", BODY, hex) != SEAL_OK)
            bad++;
    }
    seal_thread_forget();
    return (void *)bad;
}

static void run_thread_cases(void)
{
    struct keyring *kr = ring1("threads", 0x33);
    pthread_t t[THREADS];
    uintptr_t bad = 0;

    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, seal_many, kr);
    for (int i = 0; i < THREADS; i++) {
        void *r;

        pthread_join(t[i], &r);
        bad += (uintptr_t)r;
    }
    UNIT_CHECK("threads seal, open and fingerprint with one shared keyring at once",
               bad == 0 && counted("threads", KEYRING_SEALED) == THREADS * ROUNDS &&
               counted("threads", KEYRING_OPENED) == THREADS * ROUNDS, "%lu failed",
               (unsigned long)bad);
    keyring_unref(kr);
}

int main(void)
{
    run_hkdf_vectors();
    run_hmac_vectors();
    run_layout_cases();
    run_round_trips();
    run_failure_cases();
    run_rotation_cases();
    run_fingerprint_cases();
    run_counter_cases();
    run_thread_cases();
    seal_thread_forget();
    UNIT_DONE();
}
