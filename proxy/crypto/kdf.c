/*
 * kdf.c - HKDF-SHA-256 (EVP_KDF "HKDF") and HMAC-SHA-256 (EVP_MAC "HMAC"):
 * the algorithms fetched once, a context of each per thread.
 */
#include "kdf.h"

#include <pthread.h>
#include <stdbool.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

static EVP_KDF *kdf_hkdf;
static EVP_MAC *kdf_hmac;
static pthread_once_t kdf_fetch_once = PTHREAD_ONCE_INIT;

/* The digest is set once, at creation: setting it per call would fetch SHA-256 by name each time. */
static _Thread_local EVP_KDF_CTX *kdf_hkdf_ctx;
static _Thread_local EVP_MAC_CTX *kdf_hmac_ctx;

static void kdf_fetch(void)
{
    kdf_hkdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    kdf_hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

/* Sets ctx's digest to SHA-256; whether it could. */
static bool kdf_hkdf_sha256(EVP_KDF_CTX *ctx)
{
    OSSL_PARAM digest[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };

    return EVP_KDF_CTX_set_params(ctx, digest) == 1;
}

/* The calling thread's HKDF context, made on first use; NULL when OpenSSL has no HKDF. */
static EVP_KDF_CTX *kdf_hkdf_context(void)
{
    if (kdf_hkdf_ctx != NULL)
        return kdf_hkdf_ctx;
    pthread_once(&kdf_fetch_once, kdf_fetch);
    if (kdf_hkdf == NULL || (kdf_hkdf_ctx = EVP_KDF_CTX_new(kdf_hkdf)) == NULL)
        return NULL;
    if (!kdf_hkdf_sha256(kdf_hkdf_ctx)) {
        EVP_KDF_CTX_free(kdf_hkdf_ctx);
        kdf_hkdf_ctx = NULL;
    }
    return kdf_hkdf_ctx;
}

/* The calling thread's HMAC-SHA-256 context, made on first use; NULL when OpenSSL has no HMAC. */
static EVP_MAC_CTX *kdf_hmac_context(void)
{
    OSSL_PARAM digest[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };

    if (kdf_hmac_ctx != NULL)
        return kdf_hmac_ctx;
    pthread_once(&kdf_fetch_once, kdf_fetch);
    if (kdf_hmac == NULL || (kdf_hmac_ctx = EVP_MAC_CTX_new(kdf_hmac)) == NULL)
        return NULL;
    if (EVP_MAC_CTX_set_params(kdf_hmac_ctx, digest) != 1) {
        EVP_MAC_CTX_free(kdf_hmac_ctx);
        kdf_hmac_ctx = NULL;
    }
    return kdf_hmac_ctx;
}

/*
 * One derivation in mode on the thread's context. Every parameter a mode
 * reads is passed on every call (the context keeps what an earlier call
 * set): the key, and the salt (extract) or the info (expand). An empty salt
 * or info cannot be passed: OpenSSL 3.0 ignores a zero-length salt and
 * crashes on a zero-length info after a longer one (RFC 5869 A.3 after
 * A.2 shows both), so the context is reset instead, which leaves both
 * empty. Then the context's copy of the key is replaced by an empty one,
 * which OpenSSL wipes (OPENSSL_clear_free): no key outlives the call in
 * its heap.
 */
static int kdf_hkdf_derive(int mode, const unsigned char *key, size_t key_len,
                           const char *param, const unsigned char *data, size_t data_len,
                           unsigned char *out, size_t out_len)
{
    static const unsigned char none[1];
    EVP_KDF_CTX *ctx = kdf_hkdf_context();
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)key, key_len),
        OSSL_PARAM_construct_octet_string(param, (void *)data, data_len),
        OSSL_PARAM_construct_end(),
    };
    OSSL_PARAM scrub[] = {
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)none, 0),
        OSSL_PARAM_construct_end(),
    };
    bool ok;

    if (ctx == NULL)
        return -1;
    if (data_len == 0) {
        EVP_KDF_CTX_reset(ctx);     /* wipes what it held, digest included */
        params[2] = OSSL_PARAM_construct_end();
        if (!kdf_hkdf_sha256(ctx)) {
            kdf_thread_end();       /* made again on the next call */
            return -1;
        }
    }
    ok = EVP_KDF_derive(ctx, out, out_len, params) == 1;
    EVP_KDF_CTX_set_params(ctx, scrub);
    if (!ok)
        OPENSSL_cleanse(out, out_len);
    return ok ? 0 : -1;
}

int kdf_hkdf_extract(const unsigned char *salt, size_t salt_len, const unsigned char *ikm,
                     size_t ikm_len, unsigned char *prk)
{
    return kdf_hkdf_derive(EVP_KDF_HKDF_MODE_EXTRACT_ONLY, ikm, ikm_len, OSSL_KDF_PARAM_SALT,
                           salt, salt_len, prk, KDF_SHA256_LEN);
}

int kdf_hkdf_expand(const unsigned char *prk, size_t prk_len, const unsigned char *info,
                    size_t info_len, unsigned char *out, size_t out_len)
{
    return kdf_hkdf_derive(EVP_KDF_HKDF_MODE_EXPAND_ONLY, prk, prk_len, OSSL_KDF_PARAM_INFO,
                           info, info_len, out, out_len);
}

int kdf_hmac_sha256(const unsigned char *key, size_t key_len, const struct kdf_bytes *parts,
                    size_t n, unsigned char *out)
{
    return kdf_hmac_sha256_with(kdf_hmac_context(), key, key_len, parts, n, out);
}

int kdf_hmac_sha256_with(EVP_MAC_CTX *ctx, const unsigned char *key, size_t key_len,
                         const struct kdf_bytes *parts, size_t n, unsigned char *out)
{
    size_t out_len = 0;

    if (ctx == NULL || EVP_MAC_init(ctx, key, key != NULL ? key_len : 0, NULL) != 1)
        goto failed;
    for (size_t i = 0; i < n; i++) {
        if (parts[i].len > 0 && EVP_MAC_update(ctx, parts[i].data, parts[i].len) != 1)
            goto failed;
    }
    if (EVP_MAC_final(ctx, out, &out_len, KDF_SHA256_LEN) != 1 || out_len != KDF_SHA256_LEN)
        goto failed;
    return 0;
failed:
    OPENSSL_cleanse(out, KDF_SHA256_LEN);
    return -1;
}

void kdf_thread_end(void)
{
    /* both free functions wipe what the context held */
    EVP_KDF_CTX_free(kdf_hkdf_ctx);
    kdf_hkdf_ctx = NULL;
    EVP_MAC_CTX_free(kdf_hmac_ctx);
    kdf_hmac_ctx = NULL;
}
