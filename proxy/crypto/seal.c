/*
 * seal.c - sealed values (AES-256-GCM under a per-value HKDF key) and keyed
 * fingerprints (HMAC-SHA-256), seal.h. AES-256-GCM and HMAC are fetched
 * once per process; each thread keeps one encrypting and one decrypting
 * context, re-keyed per value (EVP_CipherInit_ex2 with no cipher keeps the
 * fetched one), and a few HMAC contexts keyed with a keyring key's prk or
 * fingerprint key (seal_mac), so that a value key (HKDF-Expand of 32 bytes,
 * which is one HMAC: RFC 5869 section 2.3, T(1) = HMAC(PRK, info || 0x01))
 * and a fingerprint each cost one HMAC over their input, not a key setup.
 * Seeds and nonces are drawn from RAND_bytes a pool at a time (public
 * values: both are stored in the value), refilled after a fork.
 */
#include "seal.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "hex.h"

/* The HKDF info in front of a value's seed (seal.h); never change it: no value would open. */
static const char seal_value_label[] = "idempotency-proxy value key v1";

#define SEAL_KEY_LEN 32                     /* AES-256 */
#define SEAL_CHUNK ((size_t)1 << 30)        /* EVP lengths are ints */

static EVP_CIPHER *seal_aes_gcm;
static EVP_MAC *seal_hmac;
static pthread_once_t seal_fetch_once = PTHREAD_ONCE_INIT;
static _Thread_local EVP_CIPHER_CTX *seal_ctx[2];  /* [0] decrypts, [1] encrypts */

static void seal_fetch(void)
{
    seal_aes_gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
    seal_hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

/* ---- keyed HMAC contexts, per thread ---------------------------------------------- */

/* Which key of a keyring key a context holds. */
enum seal_mac_kind { SEAL_MAC_PRK, SEAL_MAC_FINGERPRINT };

/* Contexts per thread: a rotation uses two keys of two kinds; more are made again. */
#define SEAL_MAC_SLOTS 8

struct seal_mac_slot {
    uint64_t serial;            /* keyring_serial of the keyring; 0: empty */
    size_t index;               /* the key's index in it */
    enum seal_mac_kind kind;
    EVP_MAC_CTX *ctx;           /* keyed; EVP_MAC_init with no key starts it again */
};

static _Thread_local struct seal_mac_slot seal_macs[SEAL_MAC_SLOTS];
static _Thread_local unsigned seal_mac_next;

/*
 * The calling thread's HMAC-SHA-256 context keyed with key i of kr (its prk
 * or fingerprint key), ready for EVP_MAC_init(ctx, NULL, 0, NULL); made on
 * first use, in the place of the slot used longest ago. The context holds
 * HMAC's padded key state in OpenSSL's heap (wiped by EVP_MAC_CTX_free);
 * the keys themselves stay in the keyring's locked area. NULL when OpenSSL
 * fails.
 */
static EVP_MAC_CTX *seal_mac(const struct keyring *kr, size_t i, enum seal_mac_kind kind)
{
    uint64_t serial = keyring_serial(kr);
    struct seal_mac_slot *slot;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    const unsigned char *key;

    for (unsigned s = 0; s < SEAL_MAC_SLOTS; s++)
        if (seal_macs[s].serial == serial && seal_macs[s].index == i &&
            seal_macs[s].kind == kind && seal_macs[s].ctx != NULL)
            return seal_macs[s].ctx;
    pthread_once(&seal_fetch_once, seal_fetch);
    slot = &seal_macs[seal_mac_next++ % SEAL_MAC_SLOTS];
    EVP_MAC_CTX_free(slot->ctx);
    *slot = (struct seal_mac_slot){ 0 };
    key = kind == SEAL_MAC_PRK ? keyring_prk(kr, i) : keyring_fingerprint_key(kr, i);
    if (seal_hmac == NULL || (slot->ctx = EVP_MAC_CTX_new(seal_hmac)) == NULL)
        return NULL;
    if (EVP_MAC_init(slot->ctx, key, KDF_SHA256_LEN, params) != 1) {
        EVP_MAC_CTX_free(slot->ctx);
        slot->ctx = NULL;
        return NULL;
    }
    slot->serial = serial;
    slot->index = i;
    slot->kind = kind;
    return slot->ctx;
}

/* HMAC-SHA-256 under key i of kr (kind) over the n parts, into out (KDF_SHA256_LEN bytes). */
static int seal_mac_parts(const struct keyring *kr, size_t i, enum seal_mac_kind kind,
                          const struct kdf_bytes *parts, size_t n, unsigned char *out)
{
    return kdf_hmac_sha256_with(seal_mac(kr, i, kind), NULL, 0, parts, n, out);
}

/* ---- seeds and nonces ----------------------------------------------------------- */

/* A pool of 64 values' seed and nonce, drawn at once: each RAND_bytes call costs more than its bytes. */
#define SEAL_POOL_LEN (64 * (SEAL_SEED_LEN + SEAL_NONCE_LEN))

static _Thread_local unsigned char seal_pool[SEAL_POOL_LEN];
static _Thread_local size_t seal_pool_left;
static _Thread_local pid_t seal_pool_pid;

/*
 * n (<= SEAL_POOL_LEN) random bytes into out. A forked child never hands
 * out its parent's bytes: the pool is drawn again in a new process. 0, or
 * -1 when RAND_bytes fails.
 */
static int seal_random(unsigned char *out, size_t n)
{
    pid_t pid = getpid();

    if (seal_pool_left < n || seal_pool_pid != pid) {
        if (RAND_bytes(seal_pool, sizeof(seal_pool)) != 1) {
            seal_pool_left = 0;
            return -1;
        }
        seal_pool_left = sizeof(seal_pool);
        seal_pool_pid = pid;
    }
    memcpy(out, seal_pool + sizeof(seal_pool) - seal_pool_left, n);
    OPENSSL_cleanse(seal_pool + sizeof(seal_pool) - seal_pool_left, n); /* handed out once */
    seal_pool_left -= n;
    return 0;
}

/* The calling thread's context for encrypt (1) or decrypt (0); NULL when OpenSSL fails. */
static EVP_CIPHER_CTX *seal_context(int encrypt)
{
    EVP_CIPHER_CTX *ctx = seal_ctx[encrypt];

    if (ctx != NULL)
        return ctx;
    pthread_once(&seal_fetch_once, seal_fetch);
    if (seal_aes_gcm == NULL || (ctx = EVP_CIPHER_CTX_new()) == NULL)
        return NULL;
    if (EVP_CipherInit_ex2(ctx, seal_aes_gcm, NULL, NULL, encrypt, NULL) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return NULL;
    }
    seal_ctx[encrypt] = ctx;
    return ctx;
}

void seal_thread_forget(void)
{
    for (int i = 0; i < 2; i++) {
        EVP_CIPHER_CTX_free(seal_ctx[i]);   /* wipes the last value key's schedule */
        seal_ctx[i] = NULL;
    }
    for (unsigned s = 0; s < SEAL_MAC_SLOTS; s++) {
        EVP_MAC_CTX_free(seal_macs[s].ctx); /* wipes the key state it held */
        seal_macs[s] = (struct seal_mac_slot){ 0 };
    }
    kdf_thread_end();
}

/* ---- the pieces of a value ----------------------------------------------------- */

/*
 * The length of the head (version, key id, seed, nonce) of value (len
 * bytes) with its key id's length in *id_len; 0 when value is not of
 * format 1 or too short to hold a tag after its head.
 */
static size_t seal_head(const unsigned char *value, size_t len, size_t *id_len)
{
    size_t l;

    if (len < 2 || value[0] != SEAL_FORMAT_V1)
        return 0;
    l = value[1];
    if (len < SEAL_OVERHEAD(l) || !keyring_id_valid((const char *)value + 2, l))
        return 0;
    *id_len = l;
    return SEAL_OVERHEAD(l) - SEAL_TAG_LEN;
}

/*
 * The key of one value: HKDF-Expand(prk of key i, label || seed),
 * SEAL_KEY_LEN bytes. SEAL_KEY_LEN is SHA-256's length, so the expand is
 * its first block alone, T(1) = HMAC(prk, label || seed || 0x01) (RFC 5869
 * section 2.3), computed with the thread's context keyed with prk; the
 * same bytes as kdf_hkdf_expand (test_seal checks it).
 */
static int seal_value_key(const struct keyring *kr, size_t i, const unsigned char *seed,
                          unsigned char *key)
{
    static const unsigned char first = 0x01;
    const struct kdf_bytes info[] = {
        { seal_value_label, sizeof(seal_value_label) - 1 }, { seed, SEAL_SEED_LEN }, { &first, 1 },
    };

    _Static_assert(SEAL_KEY_LEN == KDF_SHA256_LEN, "a value key is one HKDF-Expand block");
    return seal_mac_parts(kr, i, SEAL_MAC_PRK, info, 3, key);
}

/* EVP_CipherUpdate over len bytes in int-sized chunks; out NULL feeds associated data. */
static bool seal_update(EVP_CIPHER_CTX *ctx, unsigned char *out, const unsigned char *in,
                        size_t len)
{
    while (len > 0) {
        int n = (int)(len < SEAL_CHUNK ? len : SEAL_CHUNK), written;

        if (EVP_CipherUpdate(ctx, out, &written, in, n) != 1 || written != (out ? n : written))
            return false;
        in += n;
        if (out != NULL)
            out += n;
        len -= (size_t)n;
    }
    return true;
}

/* Associated data up to this many bytes goes to GCM in one call (each call costs more than its bytes). */
#define SEAL_AAD_BATCH 512

/*
 * Keys ctx for one value and feeds its associated data: the head (head_len
 * bytes of the value), then each part as its 4-byte big-endian length and
 * its bytes; gathered into one buffer while they fit SEAL_AAD_BATCH.
 */
static bool seal_begin(EVP_CIPHER_CTX *ctx, const unsigned char *key, const unsigned char *head,
                       size_t head_len, const struct kdf_bytes *aad, size_t n_aad)
{
    const unsigned char *nonce = head + head_len - SEAL_NONCE_LEN;
    unsigned char batch[SEAL_AAD_BATCH];
    size_t used = 0;

    if (n_aad > SEAL_MAX_PARTS || EVP_CipherInit_ex2(ctx, NULL, key, nonce, -1, NULL) != 1)
        return false;
    memcpy(batch, head, head_len);  /* head_len <= 2 + KEYRING_ID_MAX + 44 */
    used = head_len;
    for (size_t i = 0; i < n_aad; i++) {
        size_t len = aad[i].len;

        if (len > UINT32_MAX)
            return false;
        if (used + 4 + len > sizeof(batch)) {
            if (!seal_update(ctx, NULL, batch, used))
                return false;
            used = 0;
        }
        for (int b = 0; b < 4; b++)
            batch[used++] = (unsigned char)(len >> (24 - 8 * b));
        if (used + len <= sizeof(batch)) {
            if (len > 0)
                memcpy(batch + used, aad[i].data, len);
            used += len;
        } else if (!seal_update(ctx, NULL, batch, used) || !seal_update(ctx, NULL, aad[i].data, len)) {
            return false;
        } else {
            used = 0;
        }
    }
    return seal_update(ctx, NULL, batch, used);
}

/* ---- sealing and opening ------------------------------------------------------- */

size_t seal_size(const struct keyring *kr, size_t plain_len)
{
    size_t overhead = SEAL_OVERHEAD(strlen(keyring_id(kr, 0)));

    return plain_len > SIZE_MAX - overhead ? 0 : plain_len + overhead;
}

int seal_value(const struct keyring *kr, const struct kdf_bytes *aad, size_t n_aad,
               const void *plain, size_t plain_len, unsigned char *out, size_t outsize,
               size_t *out_len)
{
    const char *id = keyring_id(kr, 0);
    size_t id_len = strlen(id), need = seal_size(kr, plain_len), head_len;
    EVP_CIPHER_CTX *ctx = seal_context(1);
    unsigned char key[SEAL_KEY_LEN], *seed, *body;
    int last;
    bool ok;

    if (keyring_size(kr) == 0 || need == 0 || outsize < need || ctx == NULL)
        return -1;
    head_len = need - plain_len - SEAL_TAG_LEN;
    seed = out + 2 + id_len;
    body = out + head_len;
    out[0] = SEAL_FORMAT_V1;
    out[1] = (unsigned char)id_len;
    memcpy(out + 2, id, id_len);
    /* seed and nonce in one draw */
    if (seal_random(seed, SEAL_SEED_LEN + SEAL_NONCE_LEN) != 0 ||
        seal_value_key(kr, 0, seed, key) != 0)
        return -1;
    ok = seal_begin(ctx, key, out, head_len, aad, n_aad) &&
         seal_update(ctx, body, plain, plain_len) &&
         EVP_EncryptFinal_ex(ctx, body + plain_len, &last) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, SEAL_TAG_LEN, body + plain_len) == 1;
    OPENSSL_cleanse(key, sizeof(key));
    if (!ok)
        return -1;
    keyring_count(kr, 0, KEYRING_SEALED);
    *out_len = need;
    return 0;
}

int seal_key_id(const unsigned char *value, size_t len, char *key_id)
{
    size_t id_len;

    key_id[0] = '\0';
    if (seal_head(value, len, &id_len) == 0)
        return -1;
    memcpy(key_id, value + 2, id_len);
    key_id[id_len] = '\0';
    return 0;
}

int seal_open(const struct keyring *kr, const struct kdf_bytes *aad, size_t n_aad,
              const unsigned char *value, size_t len, unsigned char *plain, size_t plainsize,
              size_t *plain_len, char *key_id)
{
    size_t id_len = 0, head_len = seal_head(value, len, &id_len), n;
    unsigned char key[SEAL_KEY_LEN], tag[SEAL_TAG_LEN], none[1];
    const char *id;
    EVP_CIPHER_CTX *ctx;
    int i, last;
    bool began;

    if (key_id != NULL)
        key_id[0] = '\0';
    if (head_len == 0) {
        keyring_count_id(NULL, 0, KEYRING_UNREADABLE);
        return SEAL_UNREADABLE;
    }
    id = (const char *)value + 2;
    if (key_id != NULL) {
        memcpy(key_id, id, id_len);
        key_id[id_len] = '\0';
    }
    if (plain == NULL) { /* room for an empty plaintext only: GCM wants somewhere to write */
        plain = none;
        plainsize = 0;
    }
    if ((i = keyring_find(kr, id, id_len)) < 0) {
        keyring_count_id(id, id_len, KEYRING_UNAVAILABLE);
        return SEAL_KEY_UNAVAILABLE;
    }
    n = len - head_len - SEAL_TAG_LEN;
    if (plainsize < n || (ctx = seal_context(0)) == NULL ||
        seal_value_key(kr, (size_t)i, value + 2 + id_len, key) != 0)
        return -1;
    memcpy(tag, value + head_len + n, SEAL_TAG_LEN);
    began = seal_begin(ctx, key, value, head_len, aad, n_aad) &&
            seal_update(ctx, plain, value + head_len, n) &&
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, SEAL_TAG_LEN, tag) == 1;
    OPENSSL_cleanse(key, sizeof(key));
    if (!began) {
        OPENSSL_cleanse(plain, n);
        return -1;
    }
    /* the one check that matters: the tag over the associated data and the ciphertext */
    if (EVP_DecryptFinal_ex(ctx, plain + n, &last) != 1) {
        OPENSSL_cleanse(plain, n);
        keyring_count(kr, (size_t)i, KEYRING_UNREADABLE);
        return SEAL_UNREADABLE;
    }
    keyring_count(kr, (size_t)i, KEYRING_OPENED);
    *plain_len = n;
    return SEAL_OK;
}

/* ---- keyed fingerprints ---------------------------------------------------------- */

int seal_fingerprint(const struct keyring *kr, const char *key_id, size_t id_len,
                     const char *method, const char *target, const void *body, size_t len,
                     char *hex)
{
    /* NUL separators, as fingerprint_request: neither a method nor a target holds one */
    const struct kdf_bytes parts[] = {
        { method, strlen(method) + 1 }, { target, strlen(target) + 1 }, { body, len },
    };
    unsigned char mac[KDF_SHA256_LEN];
    int i = key_id == NULL ? (keyring_size(kr) > 0 ? 0 : -1) : keyring_find(kr, key_id, id_len);

    _Static_assert(FINGERPRINT_HEX_LEN / 2 <= KDF_SHA256_LEN, "a fingerprint is a cut MAC");
    hex[0] = '\0';
    if (i < 0)
        return SEAL_KEY_UNAVAILABLE;
    if (seal_mac_parts(kr, (size_t)i, SEAL_MAC_FINGERPRINT, parts, 3, mac) != 0)
        return -1;
    hex_lower(mac, FINGERPRINT_HEX_LEN / 2, hex);
    return SEAL_OK;
}
