/*
 * bench_seal.c - the CPU cost of sealing (seal.h): µs per seal and per open
 * of a 1 KiB and of a 100-byte value, per keyed fingerprint of a 1 KiB and
 * of a 100-byte body beside today's XXH3 fingerprint, and the HKDF-Expand
 * and the draw of randomness inside a seal. Thread CPU time
 * (CLOCK_THREAD_CPUTIME_ID), best of 5 runs, so a busy machine inflates
 * nothing it did not run.
 *
 * Usage: bench_seal [ITERATIONS]   (default 200000; `meson test --benchmark`
 * runs it). Build it with -Dbuildtype=release for the figures that count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "fingerprint.h"
#include "record_id.h"
#include "kdf.h"
#include "keyring.h"
#include "seal.h"

static long iterations = 200000;

static double cpu_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* What one case does once; false on failure. */
typedef int bench_fn(void *arg);

static void bench(const char *name, bench_fn *fn, void *arg)
{
    double best = 0;

    for (int run = 0; run < 5; run++) {
        double t0 = cpu_us(), us;

        for (long i = 0; i < iterations; i++) {
            if (fn(arg) != 0) {
                fprintf(stderr, "%s failed\n", name);
                exit(1);
            }
        }
        us = (cpu_us() - t0) / (double)iterations;
        if (run == 0 || us < best)
            best = us;
    }
    printf("%-44s %7.3f us\n", name, best);
}

struct value_case {
    struct keyring *kr;
    size_t len;                         /* plaintext bytes */
    unsigned char plain[1024];
    unsigned char value[1024 + SEAL_OVERHEAD_MAX];
    size_t value_len;
    unsigned char back[1024 + SEAL_OVERHEAD_MAX];
};

#define AAD(v) (struct kdf_bytes[]) { { "record", 6 }, { "idem:{0123456789abcdef0123456789abcdef}", 39 }, \
                                      { "a685e84d9129fe0e0b25eb5b9310464e", 32 } }

static int do_seal(void *arg)
{
    struct value_case *c = arg;

    return seal_value(c->kr, AAD(c), 3, c->plain, c->len, c->value, sizeof(c->value),
                      &c->value_len);
}

static int do_open(void *arg)
{
    struct value_case *c = arg;
    size_t n;

    return seal_open(c->kr, AAD(c), 3, c->value, c->value_len, c->back, sizeof(c->back), &n,
                     NULL);
}

struct fingerprint_case {
    struct keyring *kr;
    size_t len;
    char body[1024];
    char hex[FINGERPRINT_HEX_LEN + 1];
};

static int do_keyed(void *arg)
{
    struct fingerprint_case *c = arg;

    return seal_fingerprint(c->kr, NULL, 0, "POST", "/v1/payments", c->body, c->len, c->hex);
}

static int do_xxh3(void *arg)
{
    struct fingerprint_case *c = arg;

    fingerprint_request("POST", "/v1/payments", c->body, c->len, c->hex);
    return 0;
}

static int do_expand(void *arg)
{
    unsigned char info[62], key[32];

    memset(info, 7, sizeof(info));
    return kdf_hkdf_expand(keyring_prk(arg, 0), KDF_SHA256_LEN, info, sizeof(info), key,
                           sizeof(key));
}

static int do_rand(void *arg)
{
    unsigned char r[SEAL_SEED_LEN + SEAL_NONCE_LEN];

    (void)arg;
    return RAND_bytes(r, sizeof(r)) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
    static const unsigned char secret[KEYRING_SECRET_LEN] = { 1, 2, 3 };
    static struct value_case v;
    static struct fingerprint_case f;
    char err[128], name[64];
    struct keyring *kr = keyring_create(err, sizeof(err));

    if (argc > 1)
        iterations = atol(argv[1]);
    if (kr == NULL || iterations <= 0 || keyring_add(kr, "2026-12", 7, secret) != KEYRING_ADDED) {
        fprintf(stderr, "bench_seal: cannot set up: %s\n", err);
        return 1;
    }
    v.kr = f.kr = kr;
    memset(v.plain, 'x', sizeof(v.plain));
    memset(f.body, 'y', sizeof(f.body));
    printf("%ld iterations, best of 5, thread CPU time\n", iterations);
    for (int i = 0; i < 2; i++) {
        v.len = f.len = i == 0 ? 1024 : 100;
        snprintf(name, sizeof(name), "seal, %zu-byte value", v.len);
        bench(name, do_seal, &v);
        snprintf(name, sizeof(name), "open, %zu-byte value", v.len);
        bench(name, do_open, &v);
        snprintf(name, sizeof(name), "keyed fingerprint, %zu-byte body", f.len);
        bench(name, do_keyed, &f);
        snprintf(name, sizeof(name), "XXH3 fingerprint (today), %zu-byte body", f.len);
        bench(name, do_xxh3, &f);
    }
    bench("  EVP_KDF HKDF-Expand (a seal uses a keyed HMAC)", do_expand, kr);
    bench("  one RAND_bytes call (a seal draws a pool)", do_rand, NULL);
    keyring_unref(kr);
    seal_thread_forget();
    record_id_thread_end();
    return 0;
}
