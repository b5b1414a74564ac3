/*
 * test_keyring.c - the keyring (keyring.h) and its loader (config_keyring.c):
 * every bad keyring gives its KEYRING:LINE error, a file that cannot be read
 * names the config's line, the warnings (a world-readable file, keys not
 * locked in memory: run with CAP_IPC_LOCK dropped and RLIMIT_MEMLOCK 0, the
 * keys still work), the locked page as the kernel shows it (/proc/self/smaps:
 * locked, not dumped), and the counters per key id.
 *
 * Runs in a temporary directory of its own. Prints `ok NAME` or
 * `FAIL NAME: why` per check (unit.h); exits 1 if any check failed.
 */
#include <errno.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "keyring.h"
#include "seal.h"
#include "unit.h"

/* The sanitizers intercept mlock and make it a no-op that succeeds: what it does is unseen there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MLOCK_IS_REAL 0
#else
#define MLOCK_IS_REAL 1
#endif

#define SKIP(name, why) printf("skip %s: %s\n", (name), (why))

#define CONFIG_NAME "test.yaml"
#define KEYRING "keyring.yaml"

/* base64 of 32 bytes of 0x00, 0x01, 0x02; of 31 and 33 zero bytes (EVP_DecodeBlock says 33 for all three) */
#define S0 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
#define S1 "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
#define S2 "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="
#define S31 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="
#define S33 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
#define KEY(id, secret) "  - id: " id "\n    secret: " secret "\n"

static char dir[] = "/tmp/test_keyring.XXXXXX";

static void write_file(const char *name, const char *text, mode_t mode)
{
    FILE *f = fopen(name, "w");

    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0 || chmod(name, mode) != 0) {
        perror(name);
        exit(1);
    }
}

/* Loads a config whose encryption.keyring (line 2) is path; 0 or -1 with err. */
static int load_keyring_at(const char *path, struct config *cfg, char *err, size_t errlen)
{
    char yaml[512];

    snprintf(yaml, sizeof(yaml), "listen: 127.0.0.1:18080\nencryption:\n  keyring: %s\n", path);
    return config_load_string(cfg, yaml, strlen(yaml), CONFIG_NAME, err, errlen);
}

/* Writes text as the keyring (mode 0600) and loads a config that names it. */
static int load_keyring(const char *text, struct config *cfg, char *err, size_t errlen)
{
    write_file(KEYRING, text, 0600);
    return load_keyring_at(KEYRING, cfg, err, errlen);
}

/* ---- bad keyrings: KEYRING:LINE ------------------------------------------- */

static char seventeen[2048];

static const struct {
    const char *name, *text;
    int line;
    const char *words;
} bad_cases[] = {
    { "an empty file", "", 1, "the keyring is empty" },
    { "a comment only", "# nothing yet\n", 1, "the keyring is empty" },
    { "an empty list", "keys: []\n", 1, "keys is empty" },
    { "keys with nothing after it", "\nkeys:\n", 2, "has no keys" },
    { "no keys at all", "other: 1\n", 1, "unknown key 'other' in the keyring (allowed: keys)" },
    { "a list at the top", "- id: a\n", 1, "a keyring is a mapping" },
    { "keys not a list", "keys: a\n", 1, "keys must be a list" },
    { "keys twice", "keys:\n" KEY("a", S0) "keys:\n" KEY("b", S1), 4, "duplicate key 'keys'" },
    { "a key not a mapping", "keys:\n  - a\n", 2, "must be a mapping" },
    { "a key without a secret", "keys:\n  - id: a\n", 2, "needs an id and a secret" },
    { "a key without an id", "keys:\n  - secret: " S0 "\n", 2, "needs an id and a secret" },
    { "an unknown key in a key", "keys:\n" KEY("a", S0) "    extra: 1\n", 4,
      "unknown key 'extra' in a key (allowed: id, secret)" },
    { "an id twice in a key", "keys:\n" KEY("a", S0) "    id: b\n", 4, "duplicate key 'id' in a key" },
    { "a duplicate id", "keys:\n" KEY("a", S0) KEY("b", S1) KEY("a", S2), 6,
      "duplicate id 'a' (first at line 2)" },
    { "an id with a space", "keys:\n" KEY("\"a b\"", S0), 2, "id 'a b' must be 1..32" },
    { "an id with a slash", "keys:\n" KEY("a/b", S0), 2, "id 'a/b' must be" },
    { "an empty id", "keys:\n" KEY("\"\"", S0), 2, "id '' must be" },
    { "an id of 33 characters", "keys:\n" KEY("abcdefghijklmnopqrstuvwxyz0123456", S0), 2,
      "must be 1..32" },
    { "an id that is a list", "keys:\n" KEY("[a]", S0), 2, "must be a single value" },
    { "a secret of 31 bytes", "keys:\n" KEY("a", S31), 3, "decodes to 31 bytes" },
    { "a secret of 33 bytes", "keys:\n" KEY("a", S33), 3, "decodes to 33 bytes" },
    { "a secret that is not base64", "keys:\n" KEY("a", "not*base64*at*all"), 3,
      "not base64 of 32 bytes" },
    { "a url-safe base64 secret", "keys:\n" KEY("a", "-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_s="),
      3, "not base64 of 32 bytes" },
    { "an empty secret", "keys:\n" KEY("a", "\"\""), 3, "not base64 of 32 bytes" },
    { "a ${VAR} secret", "keys:\n" KEY("a", "${KEYRING_SECRET}"), 3, "takes no ${VAR}" },
    { "a secret that is a list", "keys:\n" KEY("a", "[" S0 "]"), 3, "must be a single value" },
    { "the second key bad", "keys:\n" KEY("a", S0) KEY("b", S31), 5, "key 'b'" },
    { "a YAML syntax error", "keys:\n  - id: a\n   secret: x\n", 3, "YAML syntax error" },
    { "seventeen keys", seventeen, 34, "more than 16 keys" },
};

static void run_bad_cases(void)
{
    size_t at = (size_t)snprintf(seventeen, sizeof(seventeen), "keys:\n");

    for (int i = 0; i < 17; i++)
        at += (size_t)snprintf(seventeen + at, sizeof(seventeen) - at,
                               "  - id: k%d\n    secret: " S0 "\n", i);
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        struct config cfg;
        char err[512], where[64], name[160];
        int rc = load_keyring(bad_cases[i].text, &cfg, err, sizeof(err));

        snprintf(name, sizeof(name), "bad keyring: %s", bad_cases[i].name);
        snprintf(where, sizeof(where), "%s:%d: ", KEYRING, bad_cases[i].line);
        UNIT_CHECK(name, rc != 0 && strncmp(err, where, strlen(where)) == 0 &&
                         strstr(err, bad_cases[i].words) != NULL && cfg.keyring == NULL,
                   "rc %d: %s", rc, err);
        /* a secret is never echoed */
        strncat(name, ": no secret in the message", sizeof(name) - strlen(name) - 1);
        UNIT_CHECK(name, strstr(err, "AAAAAAAA") == NULL && strstr(err, "base64*at") == NULL,
                   "the secret is in the message: %s", err);
        if (rc == 0)
            config_deinit(&cfg);
    }
}

/* ---- the file, as the config names it ------------------------------------- */

static void run_file_cases(void)
{
    struct config cfg;
    char err[512];

    UNIT_CHECK("a missing keyring names the config's line",
               load_keyring_at("missing.yaml", &cfg, err, sizeof(err)) != 0 &&
               strncmp(err, CONFIG_NAME ":3: encryption.keyring: cannot open missing.yaml: ",
                       strlen(CONFIG_NAME ":3: encryption.keyring: cannot open missing.yaml: "))
                   == 0 && strstr(err, "No such file") != NULL, "%s", err);
    mkdir("a-directory", 0700);
    UNIT_CHECK("an unreadable keyring (a directory) names the config's line",
               load_keyring_at("a-directory", &cfg, err, sizeof(err)) != 0 &&
               strstr(err, CONFIG_NAME ":3: encryption.keyring: cannot read a-directory: not a "
                      "regular file") != NULL, "%s", err);
    rmdir("a-directory");
    UNIT_CHECK("an empty keyring path is refused",
               load_keyring_at("\"\"", &cfg, err, sizeof(err)) != 0 &&
               strncmp(err, CONFIG_NAME ":3:", strlen(CONFIG_NAME ":3:")) == 0, "%s", err);
    unsetenv("IDEM_TEST_KEYRING");
    UNIT_CHECK("an unset ${VAR} as the keyring path is refused, not read as no keyring",
               load_keyring_at("${IDEM_TEST_KEYRING}", &cfg, err, sizeof(err)) != 0 &&
               strstr(err, "${IDEM_TEST_KEYRING} is not set") != NULL, "%s", err);
    setenv("IDEM_TEST_KEYRING", KEYRING, 1);
    write_file(KEYRING, "keys:\n" KEY("a", S0), 0600);
    UNIT_CHECK("the keyring path takes ${VAR} like any config string",
               load_keyring_at("${IDEM_TEST_KEYRING}", &cfg, err, sizeof(err)) == 0 &&
               cfg.keyring != NULL, "%s", err);
    config_deinit(&cfg);
    UNIT_CHECK("no encryption section: no keyring",
               config_load_string(&cfg, "", 0, CONFIG_NAME, err, sizeof(err)) == 0 &&
               cfg.keyring == NULL && config_keyring_warnings(&cfg, err, sizeof(err)) == 0,
               "%s", err);
    config_keyring_describe(&cfg, err, sizeof(err));
    UNIT_CHECK("no keyring: the log line says so", strstr(err, "plaintext") != NULL, "%s", err);
    config_deinit(&cfg);
}

/* ---- a good keyring --------------------------------------------------------- */

/* The VmFlags of the mapping that holds addr, from /proc/self/smaps; "" when none. */
static void vm_flags(const void *addr, char *out, size_t outlen)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    bool inside = false;

    out[0] = '\0';
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;

        /* a mapping's header starts "LO-HI "; no field line parses so */
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, outlen, "%s", line + 8);
            break;
        }
    }
    if (f != NULL)
        fclose(f);
}

static void run_good_cases(void)
{
    struct config cfg;
    char err[512], text[512], flags[512];

    UNIT_CHECK("a keyring of two keys loads",
               load_keyring("# rotation: 2026-12 first\nkeys:\n" KEY("2026-12", S1)
                            KEY("2026-09", S0), &cfg, err, sizeof(err)) == 0 &&
               cfg.keyring != NULL && keyring_size(cfg.keyring) == 2, "%s", err);
    if (cfg.keyring == NULL)
        return;
    UNIT_CHECK("the first key encrypts, the ids in order",
               strcmp(keyring_id(cfg.keyring, 0), "2026-12") == 0 &&
               strcmp(keyring_id(cfg.keyring, 1), "2026-09") == 0 &&
               keyring_find(cfg.keyring, "2026-09", 7) == 1 &&
               keyring_find(cfg.keyring, "2026-1", 6) == -1, "order");
    config_keyring_describe(&cfg, text, sizeof(text));
    UNIT_CHECK("the log line names the ids, the encrypting one first, never a secret",
               strcmp(text, "keyring " KEYRING ": 2 keys: 2026-12 (encrypts), 2026-09") == 0,
               "%s", text);
    UNIT_CHECK("a keyring readable by its owner only: no warning",
               config_keyring_warnings(&cfg, text, sizeof(text)) == 0 && text[0] == '\0',
               "%s", text);
    UNIT_CHECK("the keys are locked in memory", keyring_locked(cfg.keyring, NULL), "not locked");
    vm_flags(keyring_prk(cfg.keyring, 0), flags, sizeof(flags));
    UNIT_CHECK("the kernel has the page out of core dumps", strstr(flags, " dd") != NULL,
               "VmFlags:%s", flags);
    if (MLOCK_IS_REAL)
        UNIT_CHECK("the kernel has the page locked", strstr(flags, " lo") != NULL, "VmFlags:%s",
                   flags);
    else
        SKIP("the kernel has the page locked", "the sanitizer's mlock does nothing");
    config_deinit(&cfg);

    write_file(KEYRING, "keys:\n" KEY("a", S0), 0644);
    UNIT_CHECK("a world-readable keyring loads", load_keyring_at(KEYRING, &cfg, err,
               sizeof(err)) == 0, "%s", err);
    UNIT_CHECK("a world-readable keyring is warned about",
               config_keyring_warnings(&cfg, text, sizeof(text)) == 1 &&
               strncmp(text, KEYRING ": warning: every user", strlen(KEYRING ": warning: every "
                       "user")) == 0 && strstr(text, "defaultMode: 0440") != NULL, "%s", text);
    config_deinit(&cfg);
    /* a Kubernetes Secret volume with defaultMode 0440 and an fsGroup */
    write_file(KEYRING, "keys:\n" KEY("a", S0), 0440);
    UNIT_CHECK("a group-readable keyring is not warned about",
               load_keyring_at(KEYRING, &cfg, err, sizeof(err)) == 0 &&
               config_keyring_warnings(&cfg, text, sizeof(text)) == 0, "%s%s", err, text);
    config_deinit(&cfg);
}

/* ---- mlock refused ------------------------------------------------------------ */

/* Drops CAP_IPC_LOCK (which lets root lock past any limit), then sets RLIMIT_MEMLOCK to 0. */
static int refuse_mlock(void)
{
    struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[2];
    struct rlimit none = { 0, 0 };

    if (syscall(SYS_capget, &hdr, data) != 0)
        return -1;
    data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
    if (syscall(SYS_capset, &hdr, data) != 0)
        return -1;
    return setrlimit(RLIMIT_MEMLOCK, &none);
}

/* In a child: bit 0 load failed, 1 locked anyway, 2 no warning, 3 keys do not work, 4 setup. */
static int mlock_refused_child(void)
{
    struct config cfg;
    char err[512], text[512], flags[512], id[KEYRING_ID_MAX + 1];
    unsigned char value[128], plain[128];
    size_t value_len = 0, plain_len = 0;
    int error = 0, bits = 0;

    if (refuse_mlock() != 0)
        return 1 << 4;
    if (load_keyring("keys:\n" KEY("a", S0), &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1 << 0;
    }
    vm_flags(keyring_prk(cfg.keyring, 0), flags, sizeof(flags));
    if (keyring_locked(cfg.keyring, &error) || (error != EPERM && error != ENOMEM) ||
        strstr(flags, " lo") != NULL || strstr(flags, " dd") == NULL)
        bits |= 1 << 1;
    if (config_keyring_warnings(&cfg, text, sizeof(text)) != 1 ||
        strstr(text, "not locked in memory (mlock: ") == NULL)
        bits |= 1 << 2;
    if (seal_value(cfg.keyring, NULL, 0, "pan", 3, value, sizeof(value), &value_len) != 0 ||
        seal_open(cfg.keyring, NULL, 0, value, value_len, plain, sizeof(plain), &plain_len,
                  id) != SEAL_OK || plain_len != 3 || memcmp(plain, "pan", 3) != 0)
        bits |= 1 << 3;
    config_deinit(&cfg);
    seal_thread_forget();
    return bits;
}

static void run_mlock_refused_case(void)
{
    pid_t pid;
    int status = 0;

    if (!MLOCK_IS_REAL) {
        SKIP("mlock refused", "the sanitizer's mlock does nothing, and succeeds");
        return;
    }
    pid = fork();
    if (pid == 0)
        _exit(mlock_refused_child());
    waitpid(pid, &status, 0);
    UNIT_CHECK("mlock refused: the child ran", WIFEXITED(status) &&
               (WEXITSTATUS(status) & (1 << 4)) == 0, "status %d", status);
    UNIT_CHECK("mlock refused: the keyring still loads", WIFEXITED(status) &&
               (WEXITSTATUS(status) & 1) == 0, "status %d", status);
    UNIT_CHECK("mlock refused: the keyring says it is not locked (still not dumped)",
               WIFEXITED(status) && (WEXITSTATUS(status) & 2) == 0, "status %d", status);
    UNIT_CHECK("mlock refused: one warning names mlock", WIFEXITED(status) &&
               (WEXITSTATUS(status) & 4) == 0, "status %d", status);
    UNIT_CHECK("mlock refused: the keys still seal and open", WIFEXITED(status) &&
               (WEXITSTATUS(status) & 8) == 0, "status %d", status);
}

/* ---- the object ------------------------------------------------------------------- */

static void run_object_cases(void)
{
    static const unsigned char secret[KEYRING_SECRET_LEN] = { 7 };
    char err[128], text[64], id[8];
    struct keyring *kr = keyring_create(err, sizeof(err));
    int i;

    if (kr == NULL) {
        UNIT_CHECK("keyring_create", false, "%s", err);
        return;
    }
    UNIT_CHECK("a bad id is refused", keyring_add(kr, "a b", 3, secret) == KEYRING_BAD_ID &&
               keyring_add(kr, "", 0, secret) == KEYRING_BAD_ID && keyring_size(kr) == 0, "added");
    UNIT_CHECK("ids are 1..32 of A-Z a-z 0-9 . _ -",
               keyring_id_valid("Az09._-", 7) && keyring_id_valid("abcdefghijklmnopqrstuvwxyz012345", 32) &&
               !keyring_id_valid("abcdefghijklmnopqrstuvwxyz0123456", 33) &&
               !keyring_id_valid("a:b", 3) && !keyring_id_valid("\xc3\xa9", 2), "valid");
    for (i = 0; i < KEYRING_MAX_KEYS; i++) {
        snprintf(id, sizeof(id), "k%d", i);
        if (keyring_add(kr, id, strlen(id), secret) != KEYRING_ADDED)
            break;
    }
    UNIT_CHECK("a keyring holds KEYRING_MAX_KEYS keys", i == KEYRING_MAX_KEYS &&
               keyring_add(kr, "more", 4, secret) == KEYRING_FULL, "%d", i);
    UNIT_CHECK("a duplicate id is refused", keyring_add(kr, "k3", 2, secret) ==
               KEYRING_DUPLICATE_ID, "added");
    UNIT_CHECK("a describe that does not fit is cut, and says how long it wanted",
               keyring_describe(kr, text, sizeof(text)) > (int)sizeof(text) &&
               strlen(text) == sizeof(text) - 1 && strncmp(text, "16 keys: k0 (encrypts), k1",
                                                           26) == 0, "%s", text);
    UNIT_CHECK("a reference keeps it", keyring_ref(kr) == kr, "ref");
    keyring_unref(kr);
    UNIT_CHECK("one reference still there", keyring_size(kr) == KEYRING_MAX_KEYS, "freed");
    keyring_unref(kr);
    keyring_unref(NULL);
}

/* ---- counters ------------------------------------------------------------------------ */

static const struct keyring_counts *counts_of(const struct keyring_counts *all, size_t n,
                                              const char *id)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(all[i].id, id) == 0)
            return &all[i];
    }
    return NULL;
}

static void run_counter_cases(void)
{
    static struct keyring_counts all[KEYRING_COUNTED_IDS + 1];
    const struct keyring_counts *c;
    char id[16];
    size_t n;

    keyring_count_id("gone-2025", 9, KEYRING_UNAVAILABLE);
    keyring_count_id("gone-2025", 9, KEYRING_UNAVAILABLE);
    keyring_count_id("bad id", 6, KEYRING_UNREADABLE);
    keyring_count_id(NULL, 0, KEYRING_UNREADABLE);
    n = keyring_counters_read(all, KEYRING_COUNTED_IDS + 1);
    c = counts_of(all, n, "gone-2025");
    UNIT_CHECK("an unknown key id is counted under its id",
               c != NULL && c->n[KEYRING_UNAVAILABLE] == 2 && c->n[KEYRING_SEALED] == 0, "%zu", n);
    c = counts_of(all, n, "");
    UNIT_CHECK("a value without a readable id is counted under \"\", last",
               c != NULL && c == &all[n - 1] && c->n[KEYRING_UNREADABLE] == 2, "%zu", n);
    UNIT_CHECK("ids the keyrings held keep their counters", counts_of(all, n, "2026-12") != NULL &&
               counts_of(all, n, "k15") != NULL, "%zu", n);
    for (int i = 0; i < 2 * KEYRING_COUNTED_IDS; i++) {
        snprintf(id, sizeof(id), "junk-%d", i);
        keyring_count_id(id, strlen(id), KEYRING_UNAVAILABLE);
    }
    n = keyring_counters_read(all, KEYRING_COUNTED_IDS + 1);
    c = counts_of(all, n, "");
    UNIT_CHECK("ids past KEYRING_COUNTED_IDS are counted under \"\": the metrics stay bounded",
               n == KEYRING_COUNTED_IDS + 1 && c != NULL && c->n[KEYRING_UNAVAILABLE] > 0 &&
               counts_of(all, n, "junk-127") == NULL, "%zu", n);
}

int main(void)
{
    if (mkdtemp(dir) == NULL || chdir(dir) != 0) {
        perror(dir);
        return 1;
    }
    run_bad_cases();
    run_file_cases();
    run_good_cases();
    run_mlock_refused_case();
    run_object_cases();
    run_counter_cases();
    unlink(KEYRING);
    rmdir(dir);
    seal_thread_forget();
    UNIT_DONE();
}
