/*
 * seal.h - sealed values: what the proxy stores of a request or an answer,
 * encrypted and authenticated under the keyring (keyring.h), and keyed
 * fingerprints.
 *
 * AES-256-GCM (NIST SP 800-38D) through OpenSSL's EVP interface, under a
 * key of its own per value, as Kubernetes' KMS v2 does:
 *
 *   value key = HKDF-SHA-256(IKM = keyring secret, salt = none,
 *                            info = "idempotency-proxy value key v1" || seed)
 *
 * where seed is 32 random bytes (RAND_bytes) stored in the value. The
 * extract step of that HKDF does not depend on the value, so it runs once
 * per key at load (keyring.h, the key's prk) and a value takes one
 * HKDF-Expand (RFC 5869 section 2.3). A random 96-bit nonce (SP 800-38D
 * 8.2.2) goes with it; since every value has its own key, not even a
 * repeated nonce would repeat a (key, nonce) pair.
 *
 * Value layout, format version 1 (bytes; L is the key id's length):
 *
 *   off      len  field
 *   0        1    format version: SEAL_FORMAT_V1 (0x01)
 *   1        1    L, 1..KEYRING_ID_MAX
 *   2        L    key id, ASCII [A-Za-z0-9._-]: the key that sealed it
 *   2+L      32   seed: the value's part of the HKDF info
 *   34+L     12   nonce: the GCM IV
 *   46+L     n    ciphertext, n = the plaintext's length
 *   46+L+n   16   GCM tag
 *
 * The associated data (authenticated, not stored) is the value's first
 * 46+L bytes (version, key id, seed, nonce), then each of the caller's
 * parts as a 4-byte big-endian length and its bytes. The parts bind a value
 * to where it belongs: a value copied under another Redis key, or given
 * other parts, fails to open. Callers pass a constant naming what the value
 * is first, then what identifies it, e.g. {"record", Redis key,
 * fingerprint} or {"delivery", route, event id}, so that no value of one
 * kind opens as another.
 *
 * What a value costs in CPU (seal, open, keyed fingerprint) is what
 * tests/unit/bench_seal.c measures; its largest parts are OpenSSL's own
 * overheads per call of HKDF, GCM's re-keying and RAND_bytes, not the bytes.
 */
#ifndef IDEM_SEAL_H
#define IDEM_SEAL_H

#include <stddef.h>

#include "fingerprint.h"
#include "kdf.h"
#include "keyring.h"

#define SEAL_FORMAT_V1 0x01
#define SEAL_SEED_LEN 32
#define SEAL_NONCE_LEN 12
#define SEAL_TAG_LEN 16

/* Bytes a value adds to its plaintext under a key id of id_len chars. */
#define SEAL_OVERHEAD(id_len) (2 + (id_len) + SEAL_SEED_LEN + SEAL_NONCE_LEN + SEAL_TAG_LEN)

/* The most a value adds to its plaintext, bytes. */
#define SEAL_OVERHEAD_MAX SEAL_OVERHEAD(KEYRING_ID_MAX)

/* Most parts of associated data a value takes. */
#define SEAL_MAX_PARTS 8

/* What seal_open and seal_fingerprint make of their input. */
enum seal_result {
    SEAL_OK = 0,
    SEAL_KEY_UNAVAILABLE,   /* its key id is not in the keyring (key_id says which) */
    SEAL_UNREADABLE,        /* not a value of this format, or it fails authentication */
};

/*
 * Bytes seal_value writes for plain_len bytes of plaintext under kr's
 * encrypting key: plain_len + SEAL_OVERHEAD(its id's length). 0 when that
 * overflows a size_t.
 */
size_t seal_size(const struct keyring *kr, size_t plain_len);

/*
 * Seal plain (plain_len bytes; may be NULL when 0) under kr's encrypting key
 * (its first; -1 for a keyring without keys, which the loader never makes), bound to the n_aad parts of aad (at most SEAL_MAX_PARTS, each
 * under 4 GiB), into out (caller-owned, outsize bytes, at least
 * seal_size(kr, plain_len)); *out_len gets the bytes written. All inputs
 * borrowed. Counts KEYRING_SEALED for the key. Returns 0, or -1 (nothing
 * usable in out) when out is too small, a part too large, or OpenSSL
 * fails (no randomness, no AES-256-GCM).
 */
int seal_value(const struct keyring *kr, const struct kdf_bytes *aad, size_t n_aad,
               const void *plain, size_t plain_len, unsigned char *out, size_t outsize,
               size_t *out_len);

/*
 * Open value (len bytes, as seal_value wrote it) with kr, bound to the
 * same parts of aad it was sealed with, into plain (caller-owned,
 * plainsize bytes; len bytes always suffice); *plain_len gets the
 * plaintext's length. key_id (caller-owned, KEYRING_ID_MAX + 1 bytes, may
 * be NULL) gets the value's key id, "" when none can be read. All inputs
 * borrowed.
 * Returns SEAL_OK (counted KEYRING_OPENED), SEAL_KEY_UNAVAILABLE (the key
 * id is not in kr; counted under that id) or SEAL_UNREADABLE (not this
 * format, or authentication failed: a changed byte, another Redis key or
 * other parts; counted for the key, or under "" when no id can be read);
 * then plain holds nothing (wiped: GCM decrypts before the tag is checked)
 * and the caller must not forward or replay anything. -1 when plainsize is
 * too small or OpenSSL fails.
 */
int seal_open(const struct keyring *kr, const struct kdf_bytes *aad, size_t n_aad,
              const unsigned char *value, size_t len, unsigned char *plain, size_t plainsize,
              size_t *plain_len, char *key_id);

/*
 * The key id of value (len bytes) into key_id (caller-owned, KEYRING_ID_MAX
 * + 1 bytes), without a keyring and without opening it (for the log line of
 * a value that cannot be opened). Returns 0, or -1 when value is not of
 * this format (key_id "").
 */
int seal_key_id(const unsigned char *value, size_t len, char *key_id);

/*
 * The keyed fingerprint of a request: HMAC-SHA-256 under the fingerprint
 * key of key id (id_len bytes, borrowed; NULL: kr's encrypting key) over
 * the input fingerprint_request hashes (method and its NUL, request-target
 * and its NUL, the raw body: len bytes, may be NULL when 0), cut to 128
 * bits: FINGERPRINT_HEX_LEN lowercase hex chars and a NUL into hex
 * (caller-owned), the shape of today's record head. Keyed, so a stored
 * fingerprint cannot be brute-forced from a known body template (PCI DSS
 * 4.0 3.5.1.1). A retry is compared under its record's key id: a rotation
 * never turns it into a mismatch. Returns SEAL_OK, SEAL_KEY_UNAVAILABLE
 * (no such key in kr; hex ""), or -1 when OpenSSL fails (hex "").
 */
int seal_fingerprint(const struct keyring *kr, const char *key_id, size_t id_len,
                     const char *method, const char *target, const void *body, size_t len,
                     char *hex);

/*
 * Free the calling thread's cipher, keyed HMAC and KDF contexts (OpenSSL
 * wipes what they held): the next seal or open makes them again. Call when
 * a thread that sealed ends, and when it takes a reloaded config, so that
 * no context keyed from a key reloaded away outlives the reload
 * (docs/data-protection.md#key-material).
 */
void seal_thread_forget(void);

#endif
