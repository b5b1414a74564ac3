/*
 * test_config_secret.c - secrets read from files (config_secret.c; CONTRACT
 * 16): redis.password_file, redis.sentinel.password_file, a webhook route's
 * secret_file and delivery.sign.secret_file. What a file may hold (one line
 * end trimmed; empty, missing, NUL, a second line, too large refused, each
 * naming the file and the key's line), one source per secret, the secret's
 * own checks, a file read again by the next load, what the reload log says,
 * and that no message carries a secret.
 *
 * The files are written into a temporary directory the test runs in; the
 * cases name them relative to it. Prints `ok NAME` or `FAIL NAME: why` per
 * check (unit.h); exits 1 if any check failed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "unit.h"
#include "unit_config.h"

#define FILE_NAME "test.yaml"
#define STREQ(a, b) ((a) != NULL && strcmp((a), (b)) == 0)

/* What the files hold; every secret here is one no message may repeat. */
#define PW "pw-from-file:0123"
#define GH "github-secret-0123456789"
#define WHSEC "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

static const struct {
    const char *name;
    const char *text;
    size_t len;                     /* 0: strlen(text) */
} files[] = {
    { "pw", PW "\n", 0 },
    { "pw-crlf", PW "\r\n", 0 },
    { "pw-bare", PW, 0 },
    { "pw-spaces", "  " PW " \n", 0 },
    { "empty", "", 0 },
    { "newline", "\n", 0 },
    { "crlf-only", "\r\n", 0 },
    { "two-lines", PW "\n" PW "\n", 0 },
    { "two-newlines", PW "\n\n", 0 },
    { "nul", PW "\0" "x\n", sizeof(PW "\0" "x\n") - 1 },
    { "gh", GH "\n", 0 },
    { "gh-next", GH "-next\n", 0 },
    { "gh-short", "tiny-key\n", 0 },
    { "sign", WHSEC "\n", 0 },
    { "sign-bad", "not-whsec-" GH "\n", 0 },
};

static char dir[] = "/tmp/test_config_secret.XXXXXX";

static bool write_file(const char *name, const char *text, size_t len)
{
    FILE *f = fopen(name, "wb");
    bool ok = f != NULL && fwrite(text, 1, len, f) == len;

    if (f != NULL && fclose(f) != 0)
        ok = false;
    return ok;
}

/* Writes the files above, and one of exactly the limit and one past it, into dir; enters it. */
static void enter_dir(void)
{
    char big[4097];

    if (mkdtemp(dir) == NULL || chdir(dir) != 0) {
        perror("secret files directory");
        exit(1);
    }
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        size_t len = files[i].len != 0 ? files[i].len : strlen(files[i].text);

        if (!write_file(files[i].name, files[i].text, len)) {
            perror(files[i].name);
            exit(1);
        }
    }
    memset(big, 'p', sizeof(big));
    if (!write_file("at-limit", big, 4096) || !write_file("past-limit", big, 4097) ||
        !write_file("lone-cr", PW "\r", strlen(PW) + 1) || mkfifo("a-fifo", 0600) != 0) {
        perror("large secret files");
        exit(1);
    }
}

static void leave_dir(void)
{
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        unlink(files[i].name);
    unlink("at-limit");
    unlink("past-limit");
    unlink("lone-cr");
    unlink("a-fifo");
    unlink("rotated");
    if (chdir("/") == 0)
        rmdir(dir);
}

/* ---- loading ------------------------------------------------------------- */

typedef unit_config_check secret_check;

struct secret_case {
    const char *name;
    const char *yaml;
    int err_line;               /* 0: must load; else the line the error names */
    const char *err_word;       /* and words the message must hold */
    secret_check *check;        /* for cases that load */
};

static void check_pw(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_password, PW), "password %s",
               cfg->redis_password != NULL ? "differs" : "unset");
}

static void check_pw_spaces(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_password, "  " PW " "), "spaces not kept");
}

static void check_at_limit(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, cfg->redis_password != NULL && strlen(cfg->redis_password) == 4096,
               "not 4096 bytes");
}

static void check_pw_user(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_username, "proxy") && STREQ(cfg->redis_password, PW),
               "user or password differs");
}

static void check_sentinel_pw(const char *name, const struct config *cfg)
{
    UNIT_CHECK(name, STREQ(cfg->redis_sentinel_password, PW) && cfg->redis_password == NULL,
               "sentinel password differs, or the data nodes got it");
}

static const struct route *first_route(const struct config *cfg)
{
    return cfg->n_routes > 0 ? &cfg->routes[0] : NULL;
}

static void check_gh(const char *name, const struct config *cfg)
{
    const struct route *r = first_route(cfg);

    UNIT_CHECK(name, r != NULL && r->policy.n_secrets == 1 && STREQ(r->policy.secrets[0], GH),
               "secrets differ");
}

static void check_gh_two(const char *name, const struct config *cfg)
{
    const struct route *r = first_route(cfg);

    UNIT_CHECK(name, r != NULL && r->policy.n_secrets == 2 &&
                     STREQ(r->policy.secrets[0], GH "-next") && STREQ(r->policy.secrets[1], GH),
               "secrets differ");
}

static void check_sign(const char *name, const struct config *cfg)
{
    const struct route *r = first_route(cfg);

    UNIT_CHECK(name, r != NULL && r->policy.delivery.n_sign_secrets == 1 &&
                     STREQ(r->policy.delivery.sign_secrets[0], WHSEC), "sign secrets differ");
}

#define SENT "redis:\n  sentinel:\n    master: m\n    addresses: [127.0.0.1:26379]\n"
#define R_GH "routes:\n  - path: /hooks/gh\n    key_from: header:X-GitHub-Delivery\n"
#define R_GH_SIGNED R_GH "    verify: github\n"
#define R_Q R_GH "    verify: none\n    delivery:\n      mode: queued\n"

static const struct secret_case cases[] = {
    /* what a file may hold */
    { "password_file: a trailing LF is trimmed", "redis:\n  password_file: pw\n", 0, NULL,
      check_pw },
    { "password_file: a trailing CRLF is trimmed", "redis:\n  password_file: pw-crlf\n", 0, NULL,
      check_pw },
    { "password_file: no line end at all", "redis:\n  password_file: pw-bare\n", 0, NULL,
      check_pw },
    { "password_file: spaces are the password's", "redis:\n  password_file: pw-spaces\n", 0,
      NULL, check_pw_spaces },
    { "password_file: 4096 bytes are taken", "redis:\n  password_file: at-limit\n", 0, NULL,
      check_at_limit },
    { "password_file: past 4096 bytes names file and line",
      "listen: 0.0.0.0:8080\nredis:\n  password_file: past-limit\n", 3,
      "redis.password_file: past-limit: larger than 4096 bytes", NULL },
    { "password_file: a device that never ends is refused",
      "redis:\n  password_file: /dev/zero\n", 2, "/dev/zero: not a regular file", NULL },
    { "password_file: missing names file and line",
      "redis:\n  timeout: 1s\n  password_file: /nonexistent/redis-password\n", 3,
      "redis.password_file: /nonexistent/redis-password: cannot open", NULL },
    { "password_file: empty names file and line", "redis:\n  password_file: empty\n", 2,
      "redis.password_file: empty: the file is empty", NULL },
    { "password_file: only a newline is empty", "redis:\n  password_file: newline\n", 2,
      "the file is empty", NULL },
    { "password_file: only a CRLF is empty", "redis:\n  password_file: crlf-only\n", 2,
      "the file is empty", NULL },
    { "password_file: a NUL byte", "redis:\n  password_file: nul\n", 2,
      "nul: the file holds a NUL byte", NULL },
    { "password_file: two lines", "redis:\n  password_file: two-lines\n", 2,
      "more than one line", NULL },
    { "password_file: one line end is trimmed, not two",
      "redis:\n  password_file: two-newlines\n", 2, "more than one line", NULL },
    { "password_file: a directory", "redis:\n  password_file: /\n", 2,
      "redis.password_file: /: not a regular file", NULL },
    /* a FIFO without a writer: refused at once, never waited on (the load would hang) */
    { "password_file: a FIFO", "redis:\n  password_file: a-fifo\n", 2,
      "redis.password_file: a-fifo: not a regular file", NULL },
    { "password_file: a lone CR is the secret's, and so not one line",
      "redis:\n  password_file: lone-cr\n", 2, "more than one line", NULL },
    { "password_file may not be empty", "redis:\n  password_file: \"\"\n", 2,
      "may not be empty", NULL },
    { "password_file: an unset variable is an error",
      "redis:\n  password_file: ${TEST_IDEM_UNSET}\n", 2, "TEST_IDEM_UNSET", NULL },

    /* one source per secret */
    { "password and password_file both: refused at the file's line",
      "redis:\n  password: p\n  password_file: pw\n", 3,
      "redis.password and redis.password_file both give the secret; keep one", NULL },
    { "password_file and an empty password both: refused",
      "redis:\n  password_file: pw\n  password: ${TEST_IDEM_UNSET}\n", 2,
      "keep one", NULL },
    { "password_file and a password in the URL: refused",
      "redis:\n  url: redis://:urlpw@127.0.0.1:6379/0\n  password_file: pw\n", 3,
      "redis.password_file and a password in redis.url", NULL },
    { "password_file with a user in the URL", "redis:\n  url: redis://proxy@127.0.0.1:6379/0\n"
      "  password_file: pw\n", 0, NULL, check_pw_user },
    { "password_file with redis.username", "redis:\n  username: proxy\n  password_file: pw\n",
      0, NULL, check_pw_user },
    { "sentinel password_file is the sentinels'", SENT "    password_file: pw\n", 0, NULL,
      check_sentinel_pw },
    { "sentinel password and password_file both: refused",
      SENT "    password: p\n    password_file: pw\n", 6,
      "redis.sentinel.password and redis.sentinel.password_file both give", NULL },
    { "sentinel password_file missing names file and line",
      SENT "    password_file: /nonexistent/s\n", 5,
      "redis.sentinel.password_file: /nonexistent/s: cannot open", NULL },

    /* a webhook route's secret_file */
    { "secret_file verifies a route", R_GH_SIGNED "    secret_file: gh\n", 0, NULL, check_gh },
    { "secret_file: two during a rotation", R_GH_SIGNED "    secret_file: [gh-next, gh]\n", 0,
      NULL, check_gh_two },
    { "secret_file: three are refused", R_GH_SIGNED "    secret_file: [gh, gh, gh]\n", 5,
      "secret_file takes one path, or a list of at most 2", NULL },
    { "secret_file: a short secret names the file, not the secret",
      R_GH_SIGNED "    secret_file: [gh, gh-short]\n", 5, "secret_file: gh-short: bad secret",
      NULL },
    { "secret and secret_file both: refused",
      R_GH_SIGNED "    secret: " GH "\n    secret_file: gh\n", 6,
      "secret and secret_file both give the secret", NULL },
    { "secret_file without verify", R_GH "    verify: none\n    secret_file: gh\n", 5,
      "secret_file without verify", NULL },
    { "verify without secret names secret_file", R_GH_SIGNED, 4, "or a secret_file", NULL },
    { "secret_file missing names file and line", R_GH_SIGNED "    secret_file: /nonexistent/gh\n",
      5, "secret_file: /nonexistent/gh: cannot open", NULL },
    { "secret_file is not for defaults", "defaults:\n  secret_file: gh\n", 2, "secret_file",
      NULL },

    /* delivery.sign.secret_file */
    { "sign.secret_file signs queued deliveries", R_Q "      sign:\n        secret_file: sign\n",
      0, NULL, check_sign },
    { "sign.secret_file: not whsec_ names the file",
      R_Q "      sign:\n        secret_file: sign-bad\n", 8,
      "delivery.sign.secret_file: sign-bad: bad signing secret", NULL },
    { "sign.secret and secret_file both: refused",
      R_Q "      sign:\n        secret: " WHSEC "\n        secret_file: sign\n", 9,
      "delivery.sign.secret and delivery.sign.secret_file both give the secret", NULL },
    { "sign.secret_file empty names file and line",
      R_Q "      sign:\n        secret_file: empty\n", 8,
      "delivery.sign.secret_file: empty: the file is empty", NULL },
};

/* No message may repeat what a file holds. */
static bool holds_a_secret(const char *err)
{
    return strstr(err, PW) != NULL || strstr(err, GH) != NULL || strstr(err, WHSEC) != NULL ||
           strstr(err, "not-whsec-") != NULL ||
           strstr(err, "tiny-key") != NULL || strstr(err, "pppp") != NULL;
}

static void run_case(const struct secret_case *c)
{
    char err[512];

    if (unit_config_case(FILE_NAME, c->name, c->yaml, c->err_line, c->err_word, c->check, err,
                         sizeof(err)))
        UNIT_CHECK(c->name, !holds_a_secret(err), "the message holds a secret: %s", err);
}

/* ---- a load reads the file again; what the reload log says ---------------- */

static bool load(const char *name, const char *yaml, struct config *cfg)
{
    char err[512];
    bool ok = config_load_string(cfg, yaml, strlen(yaml), FILE_NAME, err, sizeof(err)) == 0;

    UNIT_CHECK(name, ok, "did not load: %s", err);
    return ok;
}

static void run_reread_cases(void)
{
    static const char yaml[] =
        "redis:\n  password_file: rotated\n"
        R_GH_SIGNED "    secret_file: rotated\n";
    const char *name = "a load reads the file again: a rotation is live";
    struct config a, b;
    char why[256], log[1024];

    if (!write_file("rotated", GH "\n", strlen(GH "\n")) || !load(name, yaml, &a))
        return;
    if (!write_file("rotated", GH "-next\n", strlen(GH "-next\n")) || !load(name, yaml, &b)) {
        config_deinit(&a);
        return;
    }
    UNIT_CHECK(name, STREQ(a.redis_password, GH) && STREQ(b.redis_password, GH "-next") &&
                     STREQ(b.routes[0].policy.secrets[0], GH "-next"), "not read again");
    UNIT_CHECK(name, config_reload_check(&a, &a, &b, why, sizeof(why)) == CONFIG_RELOAD_LIVE,
               "refused: %s", why);

    config_secret_changes(&a, &b, log, sizeof(log));
    UNIT_CHECK("the reload log names the changed secrets",
               strstr(log, "redis.password changed: each worker sends it from its next "
                      "connection") != NULL &&
               strstr(log, "the webhook secret of route /hooks/gh changed") != NULL,
               "got \"%s\"", log);
    UNIT_CHECK("the reload log holds no secret", strstr(log, GH) == NULL, "it does");
    config_secret_changes(&b, &b, log, sizeof(log));
    UNIT_CHECK("the reload log says nothing when no secret changed", log[0] == '\0',
               "got \"%s\"", log);
    config_deinit(&a);
    config_deinit(&b);
}

/* A password reload is live with either source, and from one source to the other. */
static void run_reload_cases(void)
{
    static const struct {
        const char *name, *a, *b;
    } reloads[] = {
        { "password -> password_file is live", "redis:\n  password: p\n",
          "redis:\n  password_file: pw\n" },
        { "password_file -> none is live", "redis:\n  password_file: pw\n", "" },
        { "sentinel password_file -> password is live", SENT "    password_file: pw\n",
          SENT "    password: p\n" },
        { "sign.secret -> sign.secret_file is live",
          R_Q "      sign: {secret: whsec_cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r}\n",
          R_Q "      sign: {secret_file: sign}\n" },
        { "a queued route signed from a reload on is live", R_Q,
          R_Q "      sign: {secret_file: sign}\n" },
    };
    for (size_t i = 0; i < sizeof(reloads) / sizeof(reloads[0]); i++) {
        struct config a, b;
        char why[256];

        if (!load(reloads[i].name, reloads[i].a, &a))
            continue;
        if (load(reloads[i].name, reloads[i].b, &b)) {
            UNIT_CHECK(reloads[i].name,
                       config_reload_check(&a, &a, &b, why, sizeof(why)) == CONFIG_RELOAD_LIVE,
                       "refused: %s", why);
            config_deinit(&b);
        }
        config_deinit(&a);
    }
    UNIT_CHECK("the *_file keys are live",
               config_key_reload("redis.password_file") == CONFIG_RELOAD_LIVE &&
               config_key_reload("redis.sentinel.password_file") == CONFIG_RELOAD_LIVE &&
               config_key_reload("secret_file") == CONFIG_RELOAD_LIVE &&
               config_key_reload("delivery.sign.secret_file") == CONFIG_RELOAD_LIVE &&
               config_key_reload("redis.password") == CONFIG_RELOAD_LIVE &&
               config_key_reload("delivery.sign.secret") == CONFIG_RELOAD_LIVE, "one is not");
    UNIT_CHECK("the user names stay restart",
               config_key_reload("redis.username") == CONFIG_RELOAD_RESTART &&
               config_key_reload("redis.sentinel.username") == CONFIG_RELOAD_RESTART, "one is not");
}

int main(void)
{
    unsetenv("TEST_IDEM_UNSET");
    enter_dir();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_case(&cases[i]);
    run_reread_cases();
    run_reload_cases();
    leave_dir();
    UNIT_DONE();
}
