/*
 * keyring.c - the keyring object (keyring.h): keys derived into one locked
 * page, shared by reference count, and the process-wide counters per key id.
 */
#include "keyring.h"
#include "kdf.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "log.h"

/* The HKDF info of the fingerprint key (keyring.h); never change it: fingerprints would. */
static const char keyring_fingerprint_label[] = "idempotency-proxy fingerprint key v1";

/* What each key takes in the locked area: its prk, then its fingerprint key. */
#define KEYRING_KEY_AREA (2 * KDF_SHA256_LEN)

/* One key id's counters, for the life of the process. */
struct keyring_slot {
    char id[KEYRING_ID_MAX + 1];            /* written once, before the slot is published */
    _Atomic uint64_t n[KEYRING_N_COUNTERS];
};

struct keyring_key {
    char id[KEYRING_ID_MAX + 1];
    size_t id_len;
    unsigned char *keys;                    /* KEYRING_KEY_AREA bytes in the area */
    struct keyring_slot *counts;            /* its id's process-wide slot */
};

struct keyring {
    _Atomic unsigned refs;
    size_t n;
    struct keyring_key keys[KEYRING_MAX_KEYS];
    unsigned char *area;                    /* mmap'd, area_len bytes */
    size_t area_len;
    bool locked;
    int lock_error;                         /* mlock's errno when not locked */
    uint64_t serial;                        /* keyring_serial: unique in the process */
};

static _Atomic uint64_t keyring_serials;

static pthread_once_t keyring_no_dumps_once = PTHREAD_ONCE_INIT;
static int keyring_no_dumps_errno = -1;     /* -1: no keyring yet; 0: dumps off; else errno */
static atomic_flag keyring_no_dumps_noted = ATOMIC_FLAG_INIT;

/*
 * No core dump from now on: the contexts OpenSSL keys from the keyring (the
 * HMAC state of each key's prk and fingerprint key, the value keys' AES
 * schedules) are in its ordinary heap, which MADV_DONTDUMP does not cover.
 * Neither call can be undone by the process itself without privilege
 * (RLIMIT_CORE's hard limit goes to 0 too). keyring_note_core_dumps logs it.
 */
static void keyring_no_dumps(void)
{
    const struct rlimit none = { 0, 0 };
    int limit = setrlimit(RLIMIT_CORE, &none) == 0 ? 0 : errno;
    int dumpable = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : errno;

    keyring_no_dumps_errno = limit != 0 ? limit : dumpable;
}

void keyring_note_core_dumps(void)
{
    if (keyring_no_dumps_errno < 0 || atomic_flag_test_and_set(&keyring_no_dumps_noted))
        return;
    if (keyring_no_dumps_errno == 0)
        log_msg(LOG_INFO, "a keyring is loaded: core dumps are off for the life of the process "
                "(RLIMIT_CORE 0, not dumpable)");
    else
        log_msg(LOG_WARN, "a keyring is loaded, but core dumps could not be turned off: %s",
                strerror(keyring_no_dumps_errno));
}

/* ---- the object ------------------------------------------------------------ */

struct keyring *keyring_create(char *err, size_t errlen)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t need = (size_t)KEYRING_MAX_KEYS * KEYRING_KEY_AREA;
    struct keyring *kr = calloc(1, sizeof(*kr));

    if (kr != NULL)
        kr->serial = ++keyring_serials;

    if (kr == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    kr->area_len = page > 0 ? (size_t)page : 4096;
    if (kr->area_len < need)
        kr->area_len = (need + kr->area_len - 1) / kr->area_len * kr->area_len;
    kr->area = mmap(NULL, kr->area_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
    if (kr->area == MAP_FAILED) {
        snprintf(err, errlen, "cannot map memory for the keyring: %s", strerror(errno));
        free(kr);
        return NULL;
    }
    /* never in a core dump, whether or not the lock below succeeds */
    if (madvise(kr->area, kr->area_len, MADV_DONTDUMP) != 0) {
        snprintf(err, errlen, "cannot keep the keyring out of core dumps (madvise): %s",
                 strerror(errno));
        munmap(kr->area, kr->area_len);
        free(kr);
        return NULL;
    }
    pthread_once(&keyring_no_dumps_once, keyring_no_dumps);
    kr->locked = mlock(kr->area, kr->area_len) == 0;
    kr->lock_error = kr->locked ? 0 : errno;
    kr->refs = 1;
    return kr;
}

bool keyring_id_valid(const char *id, size_t len)
{
    if (len == 0 || len > KEYRING_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = id[i];

        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static struct keyring_slot *keyring_slot(const char *id, size_t len);

enum keyring_add_result keyring_add(struct keyring *kr, const char *id, size_t id_len,
                                    const unsigned char *secret)
{
    struct keyring_key *key;

    if (!keyring_id_valid(id, id_len))
        return KEYRING_BAD_ID;
    if (keyring_find(kr, id, id_len) >= 0)
        return KEYRING_DUPLICATE_ID;
    if (kr->n == KEYRING_MAX_KEYS)
        return KEYRING_FULL;
    key = &kr->keys[kr->n];
    key->keys = kr->area + kr->n * KEYRING_KEY_AREA;
    if (kdf_hkdf_extract(NULL, 0, secret, KEYRING_SECRET_LEN, key->keys) != 0 ||
        kdf_hkdf_expand(key->keys, KDF_SHA256_LEN,
                        (const unsigned char *)keyring_fingerprint_label,
                        sizeof(keyring_fingerprint_label) - 1, key->keys + KDF_SHA256_LEN,
                        KDF_SHA256_LEN) != 0) {
        OPENSSL_cleanse(key->keys, KEYRING_KEY_AREA);
        return KEYRING_FAILED;
    }
    memcpy(key->id, id, id_len);
    key->id[id_len] = '\0';
    key->id_len = id_len;
    key->counts = keyring_slot(id, id_len);
    kr->n++;
    return KEYRING_ADDED;
}

struct keyring *keyring_ref(struct keyring *kr)
{
    kr->refs++;
    return kr;
}

void keyring_unref(struct keyring *kr)
{
    if (kr == NULL || --kr->refs > 0)
        return;
    OPENSSL_cleanse(kr->area, kr->area_len);
    if (kr->locked)
        munlock(kr->area, kr->area_len);
    munmap(kr->area, kr->area_len);
    free(kr);
}

size_t keyring_size(const struct keyring *kr)
{
    return kr->n;
}

const char *keyring_id(const struct keyring *kr, size_t i)
{
    return kr->keys[i].id;
}

int keyring_find(const struct keyring *kr, const char *id, size_t len)
{
    for (size_t i = 0; i < kr->n; i++) {
        if (kr->keys[i].id_len == len && memcmp(kr->keys[i].id, id, len) == 0)
            return (int)i;
    }
    return -1;
}

bool keyring_locked(const struct keyring *kr, int *error)
{
    if (error != NULL)
        *error = kr->lock_error;
    return kr->locked;
}

int keyring_describe(const struct keyring *kr, char *out, size_t outsize)
{
    int len = snprintf(out, outsize, "%zu key%s:", kr->n, kr->n == 1 ? "" : "s");

    for (size_t i = 0; i < kr->n && len >= 0; i++) {
        size_t at = (size_t)len < outsize ? (size_t)len : outsize - 1;
        int n = snprintf(out + at, outsize - at, "%s %s%s", i == 0 ? "" : ",", kr->keys[i].id,
                         i == 0 ? " (encrypts)" : "");

        len = n < 0 ? n : len + n;
    }
    return len;
}

const unsigned char *keyring_prk(const struct keyring *kr, size_t i)
{
    return kr->keys[i].keys;
}

const unsigned char *keyring_fingerprint_key(const struct keyring *kr, size_t i)
{
    return kr->keys[i].keys + KDF_SHA256_LEN;
}

/* ---- counters -------------------------------------------------------------- */

/*
 * Slots are published in order: the id is written, then the count is
 * raised with release order, so a reader that sees a slot (acquire) sees
 * its id. Slots are never removed, so an id keeps its counters across
 * reloads, and a pointer to a slot stays valid for the process's life.
 */
static struct keyring_slot keyring_slots[KEYRING_COUNTED_IDS];
static _Atomic size_t keyring_n_slots;
static struct keyring_slot keyring_other;  /* id "": none readable, or past the table */
static pthread_mutex_t keyring_slots_lock = PTHREAD_MUTEX_INITIALIZER;

static struct keyring_slot *keyring_slot_find(const char *id, size_t len, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strlen(keyring_slots[i].id) == len && memcmp(keyring_slots[i].id, id, len) == 0)
            return &keyring_slots[i];
    }
    return NULL;
}

/* The slot of id (len bytes, a valid id), made when new; keyring_other when the table is full. */
static struct keyring_slot *keyring_slot(const char *id, size_t len)
{
    struct keyring_slot *slot = keyring_slot_find(id, len, keyring_n_slots);
    size_t n;

    if (slot != NULL)
        return slot;
    pthread_mutex_lock(&keyring_slots_lock);
    n = keyring_n_slots;
    slot = keyring_slot_find(id, len, n);
    if (slot == NULL && n < KEYRING_COUNTED_IDS) {
        slot = &keyring_slots[n];
        memcpy(slot->id, id, len);
        slot->id[len] = '\0';
        keyring_n_slots = n + 1;    /* seq_cst: publishes the id */
    }
    pthread_mutex_unlock(&keyring_slots_lock);
    return slot != NULL ? slot : &keyring_other;
}

void keyring_count(const struct keyring *kr, size_t i, enum keyring_counter c)
{
    atomic_fetch_add_explicit(&kr->keys[i].counts->n[c], 1, memory_order_relaxed);
}

void keyring_count_id(const char *id, size_t len, enum keyring_counter c)
{
    struct keyring_slot *slot = id != NULL && keyring_id_valid(id, len) ? keyring_slot(id, len)
                                                                        : &keyring_other;

    atomic_fetch_add_explicit(&slot->n[c], 1, memory_order_relaxed);
}

/* Copies slot into out; whether it counted anything. */
static bool keyring_slot_read(const struct keyring_slot *slot, struct keyring_counts *out)
{
    bool any = false;

    memcpy(out->id, slot->id, sizeof(out->id));
    for (int c = 0; c < KEYRING_N_COUNTERS; c++) {
        out->n[c] = atomic_load_explicit(&slot->n[c], memory_order_relaxed);
        any = any || out->n[c] > 0;
    }
    return any;
}

size_t keyring_counters_read(struct keyring_counts *out, size_t max)
{
    size_t n = keyring_n_slots, written = 0;

    for (size_t i = 0; i < n && written < max; i++)
        keyring_slot_read(&keyring_slots[i], &out[written++]);
    if (written < max && keyring_slot_read(&keyring_other, &out[written]))
        written++;
    return written;
}

uint64_t keyring_serial(const struct keyring *kr)
{
    return kr->serial;
}
