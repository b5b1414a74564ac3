/*
 * keyring.h - the keys that seal what the proxy stores (seal.h), as one
 * reference-counted object that the worker threads share read-only.
 *
 * A keyring is an ordered list of keys, each a key id and a 32-byte secret:
 * the first key encrypts, every key decrypts. Which key made a value is
 * stored beside it (its id), so a key can be added, moved first and
 * removed by reloads, one step at a time. The secrets themselves are not
 * kept: at keyring_add each one is turned into the two keys the proxy uses
 * (HKDF, RFC 5869, kdf.h) and then wiped:
 *
 *   prk             = HKDF-Extract(salt = none, IKM = secret)
 *   fingerprint key = HKDF-Expand(prk, "idempotency-proxy fingerprint key v1", 32)
 *
 * and seal.c derives a key per value from prk (HKDF-Expand with the value's
 * random seed). Both live in one area of locked memory per keyring (one
 * page, mmap): mlock'd so it is never written to swap, MADV_DONTDUMP so it
 * is never in a core dump, wiped with OPENSSL_cleanse when the keyring is
 * freed. If mlock fails (RLIMIT_MEMLOCK, a container's memlock limit), the
 * keyring still works and keyring_locked says so: the loader warns
 * (config_keyring_warnings); refusing to start would leave a payments
 * sidecar down over a limit that matters only where memory is swapped.
 * Key material is never logged: the ids are not secret, the rest is.
 *
 * Loading the file is the config module's (config_keyring.c): this module
 * knows no YAML and no file. It also keeps the per key id counters of what
 * was sealed and opened (keyring_count), for the metrics.
 */
#ifndef IDEM_KEYRING_H
#define IDEM_KEYRING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KEYRING_SECRET_LEN 32   /* bytes of a keyring secret (AES-256's key size) */
#define KEYRING_ID_MAX 32       /* longest key id, chars */
#define KEYRING_MAX_KEYS 16     /* keys per keyring: a rotation needs two or three */

struct keyring;

/*
 * A new empty keyring holding one reference, with its locked area (one
 * page: room for KEYRING_MAX_KEYS keys). A failed mlock is not an error
 * (keyring_locked). The first keyring of the process also turns core dumps
 * off for the rest of its life (RLIMIT_CORE 0 and PR_SET_DUMPABLE 0;
 * keyring_note_core_dumps logs it): OpenSSL's contexts keyed from the keys
 * live in its ordinary heap (docs/data-protection.md#key-material). Returns NULL, with a line in err
 * (errlen bytes), when the area cannot be mapped.
 */
struct keyring *keyring_create(char *err, size_t errlen);

/* What keyring_add made of a key. */
enum keyring_add_result {
    KEYRING_ADDED = 0,
    KEYRING_BAD_ID,         /* not 1..KEYRING_ID_MAX of [A-Za-z0-9._-] */
    KEYRING_DUPLICATE_ID,   /* a key of kr already has this id */
    KEYRING_FULL,           /* kr holds KEYRING_MAX_KEYS keys */
    KEYRING_FAILED,         /* OpenSSL failed to derive the keys */
};

/*
 * Append the key id (id_len bytes, borrowed) with secret
 * (KEYRING_SECRET_LEN bytes, borrowed: the caller wipes its copy) to kr:
 * its keys are derived into the locked area. The first key added encrypts.
 * Only while kr is being built, before it is shared. Returns KEYRING_ADDED
 * or why not (kr then unchanged).
 */
enum keyring_add_result keyring_add(struct keyring *kr, const char *id, size_t id_len,
                                    const unsigned char *secret);

/* Whether id (len bytes) is a valid key id: 1..KEYRING_ID_MAX of [A-Za-z0-9._-]. Pure. */
bool keyring_id_valid(const char *id, size_t len);

/*
 * Log, once per process and only after a keyring was made, that core dumps
 * are off (or the error that kept them on). Called by the running daemon
 * after start and after each reload, never by `-t`. On the thread that
 * loads configurations (the main thread).
 */
void keyring_note_core_dumps(void);

/* Take a reference (atomically: any thread); returns kr. */
struct keyring *keyring_ref(struct keyring *kr);

/*
 * Drop a reference (atomically: any thread); the last one wipes the
 * locked area, unlocks, unmaps and frees kr. NULL is fine.
 */
void keyring_unref(struct keyring *kr);

/*
 * A number no other keyring of the process has had or will have (from 1):
 * what a per-thread cache of contexts keyed with kr's keys (seal.c) tells
 * keyrings apart by, as a freed keyring's address may be reused. Pure.
 */
uint64_t keyring_serial(const struct keyring *kr);

/* The number of keys of kr. */
size_t keyring_size(const struct keyring *kr);

/* The id of key i (< keyring_size; 0 encrypts), NUL-terminated; owned by kr. */
const char *keyring_id(const struct keyring *kr, size_t i);

/* The index of the key with id (len bytes, borrowed), or -1 when kr has none. */
int keyring_find(const struct keyring *kr, const char *id, size_t len);

/*
 * Whether kr's area is locked in memory. When it is not, *error (may be
 * NULL) is mlock's errno (ENOMEM: over RLIMIT_MEMLOCK; EPERM: a limit of 0).
 */
bool keyring_locked(const struct keyring *kr, int *error);

/*
 * "N keys: ID (encrypts), ID, ..." into out (caller-owned, outsize > 0
 * bytes, truncated, NUL-terminated), for the startup and reload log: ids
 * only, never key material. Returns the length it wanted, as snprintf.
 */
int keyring_describe(const struct keyring *kr, char *out, size_t outsize);

/*
 * The keys of key i (< keyring_size), KDF_SHA256_LEN bytes each, in the
 * locked area; owned by kr, valid while the caller holds a reference. For
 * seal.c only: nothing else reads key material.
 */
const unsigned char *keyring_prk(const struct keyring *kr, size_t i);
const unsigned char *keyring_fingerprint_key(const struct keyring *kr, size_t i);

/* ---- counters ------------------------------------------------------------ */

/* What a counter counts; one set per key id. */
enum keyring_counter {
    KEYRING_SEALED,             /* values sealed under the key (seal_value) */
    KEYRING_OPENED,             /* values opened (seal_open authenticated them) */
    KEYRING_UNREADABLE,         /* values under the key that failed authentication */
    KEYRING_UNAVAILABLE,        /* values whose key id was not in the keyring */
    KEYRING_N_COUNTERS,
};

/*
 * Count one event for key i (< keyring_size) of kr: relaxed atomics, any
 * thread, no lock, no allocation.
 */
void keyring_count(const struct keyring *kr, size_t i, enum keyring_counter c);

/*
 * Count one event for a key id kr does not hold (KEYRING_UNAVAILABLE), or
 * for a value whose key id cannot be read (id NULL or invalid: counted
 * under the id ""). Takes a lock when the id is new to the process; ids
 * past KEYRING_COUNTED_IDS are counted under "" too, so a corrupted Redis
 * cannot grow the metrics without bound.
 */
void keyring_count_id(const char *id, size_t len, enum keyring_counter c);

/* Most distinct key ids the process counts (the rest are counted under ""). */
#define KEYRING_COUNTED_IDS 64

/* One key id's counters, as keyring_counters_read copies them. */
struct keyring_counts {
    char id[KEYRING_ID_MAX + 1];        /* "": no key id, or one past KEYRING_COUNTED_IDS */
    uint64_t n[KEYRING_N_COUNTERS];     /* by enum keyring_counter */
};

/*
 * Copy the counters of every key id counted since the process started, in
 * the order each id was first seen (by any keyring: a reload keeps an id's
 * counters, so they only grow), into out (caller-owned, max entries), the
 * "" entry last when it counted anything. Returns the number of entries
 * written (at most KEYRING_COUNTED_IDS + 1). Any thread; each counter is
 * read atomically, the set is not a snapshot.
 */
size_t keyring_counters_read(struct keyring_counts *out, size_t max);

#endif
