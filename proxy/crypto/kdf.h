/*
 * kdf.h - the keyed primitives under the keyring: HKDF-SHA-256 (RFC 5869)
 * through OpenSSL's EVP_KDF "HKDF", and HMAC-SHA-256 (RFC 2104, FIPS 198-1)
 * through EVP_MAC "HMAC". No hashing of our own: each function is a thin
 * wrapper over one EVP call, checked against the RFCs' test vectors
 * (tests/unit/test_seal.c).
 *
 * The algorithms are fetched once per process; each thread keeps one
 * context of each, reused call after call (a fetch and a context per call
 * cost more than the hash itself). Free them with kdf_thread_end as a
 * thread that used them ends. OpenSSL copies a key into its context for
 * the call and keeps it there until the next call or kdf_thread_end, in
 * its own heap (not locked memory): the HKDF context's copy is wiped right
 * after each derivation; the HMAC context keeps its keyed state until the
 * next call.
 */
#ifndef IDEM_KDF_H
#define IDEM_KDF_H

#include <stddef.h>

#include <openssl/types.h>

/* Bytes of a SHA-256 output: HKDF's PRK and HMAC-SHA-256's tag. */
#define KDF_SHA256_LEN 32

/* A byte string borrowed for one call: one of the parts a MAC or an AEAD's associated data covers. */
struct kdf_bytes {
    const void *data;       /* may be NULL when len is 0 */
    size_t len;             /* bytes */
};

/*
 * HKDF-Extract (RFC 5869 section 2.2): prk = HMAC-SHA-256(salt, ikm), into
 * prk (caller-owned, KDF_SHA256_LEN bytes). salt may be NULL with salt_len
 * 0: "not provided", a string of HashLen zeros. All inputs borrowed.
 * Returns 0, or -1 when OpenSSL fails (prk then wiped).
 */
int kdf_hkdf_extract(const unsigned char *salt, size_t salt_len, const unsigned char *ikm,
                     size_t ikm_len, unsigned char *prk);

/*
 * HKDF-Expand (RFC 5869 section 2.3): out_len bytes (1..255 * 32) of output
 * keying material from prk (prk_len bytes, at least KDF_SHA256_LEN) and
 * info (info_len bytes, may be NULL when 0), into out (caller-owned). All
 * inputs borrowed. Returns 0, or -1 when OpenSSL fails (out then wiped).
 */
int kdf_hkdf_expand(const unsigned char *prk, size_t prk_len, const unsigned char *info,
                    size_t info_len, unsigned char *out, size_t out_len);

/*
 * HMAC-SHA-256 (RFC 2104) under key (key_len bytes) over the concatenation
 * of the n parts, into out (caller-owned, KDF_SHA256_LEN bytes). All inputs
 * borrowed. Returns 0, or -1 when OpenSSL fails (out then wiped).
 */
int kdf_hmac_sha256(const unsigned char *key, size_t key_len, const struct kdf_bytes *parts,
                    size_t n, unsigned char *out);

/*
 * HMAC-SHA-256 (RFC 2104) with ctx, an EVP_MAC_CTX of OpenSSL's "HMAC" with
 * digest SHA-256 (borrowed), over the concatenation of the n parts, into
 * out (caller-owned, KDF_SHA256_LEN bytes): keyed with key (key_len bytes),
 * or, with key NULL, under the key ctx already holds (a context keyed once
 * and reused). Returns 0, or -1 when OpenSSL fails (out then wiped).
 */
int kdf_hmac_sha256_with(EVP_MAC_CTX *ctx, const unsigned char *key, size_t key_len,
                         const struct kdf_bytes *parts, size_t n, unsigned char *out);

/* Free the calling thread's contexts; call as a thread that derived or MACed ends. */
void kdf_thread_end(void);

#endif
