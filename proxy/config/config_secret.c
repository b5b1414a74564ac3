/*
 * config_secret.c - secrets read from files (CONTRACT 16;
 * docs/configuration.md#secrets-from-files): redis.password_file,
 * redis.sentinel.password_file, a webhook route's secret_file and
 * delivery.sign.secret_file. Each file is read whole by every load (start,
 * `-t`, SIGHUP), as admin.token_file is, so a SIGHUP takes a rewritten
 * file; its secret goes where the inline key's (`password`, `secret`)
 * goes, and pass 3 refuses a mapping that sets both. No secret is ever
 * written into a message: they name the file and the key's line.
 */
#include "config_int.h"
#include "webhook.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

/* Frees a secret, wiped first. NULL is fine. */
static void config_secret_free(char *secret)
{
    if (secret == NULL)
        return;
    OPENSSL_cleanse(secret, strlen(secret));
    free(secret);
}

/*
 * Reads the secret of the file at path (the key's value, lent) for the key
 * what ("redis.password_file") whose value is node: into *secret,
 * malloc'd and NUL-terminated (caller frees, wiped). Returns 0, or -1 after
 * config_error, with nothing to free.
 */
static int config_secret_read(struct config_loader *ld, yaml_node_t *node, const char *what,
                              const char *path, char **secret)
{
    char why[600];
    const char *bad = NULL;
    char *buf;
    size_t len;

    if (path[0] == '\0')
        return config_error(ld, node, "%s may not be empty: name the file that holds the "
                            "secret, or leave the key out", what);
    if (config_file_read_max(path, CONFIG_SECRET_FILE_MAX, &buf, &len, why, sizeof(why)) < 0)
        return config_error(ld, node, "%s: %s", what, why);
    /* what an editor or `echo` adds: one line end, LF or CRLF (a lone CR is the secret's) */
    if (len > 0 && buf[len - 1] == '\n') {
        len--;
        if (len > 0 && buf[len - 1] == '\r')
            len--;
    }
    if (len == 0)
        bad = "the file is empty";
    else if (memchr(buf, '\0', len) != NULL)
        bad = "the file holds a NUL byte";
    else if (memchr(buf, '\n', len) != NULL || memchr(buf, '\r', len) != NULL)
        bad = "the file holds more than one line (one trailing newline is trimmed)";
    *secret = bad == NULL ? malloc(len + 1) : NULL;
    if (*secret != NULL) {
        memcpy(*secret, buf, len);
        (*secret)[len] = '\0';
    }
    OPENSSL_cleanse(buf, len);
    free(buf);
    if (bad != NULL)
        return config_error(ld, node, "%s: %s: %s", what, path, bad);
    if (*secret == NULL)
        return config_oom(ld, node);
    return 0;
}

/*
 * redis.password_file and redis.sentinel.password_file: the password at
 * key->offset (redis_password, redis_sentinel_password), as `password`
 * would set it; a Redis password is any bytes but NUL and line ends.
 */
int config_set_password_file(struct config_loader *ld, const struct config_key *key,
                             yaml_node_t *node, char **text, void *obj)
{
    char **field = (char **)((char *)obj + key->offset);
    bool sentinel = key->offset == offsetof(struct config, redis_sentinel_password);
    char what[64];
    char *secret;

    snprintf(what, sizeof(what), "%s.%s", sentinel ? "redis.sentinel" : "redis", key->name);
    if (config_secret_read(ld, node, what, *text, &secret) < 0)
        return -1;
    config_secret_free(*field);
    *field = secret;
    return 0;
}

/* The start of a list of secret files: one path, or CONFIG_MAX_SECRETS during a rotation. */
static int config_begin_files(struct config_loader *ld, yaml_node_t *list, size_t n,
                              const char *what, char **secrets, size_t *n_secrets)
{
    if (n == 0 || n > CONFIG_MAX_SECRETS)
        return config_error(ld, list, "%s takes one path, or a list of at most %d during a "
                            "rotation", what, CONFIG_MAX_SECRETS);
    for (size_t i = 0; i < *n_secrets; i++) {
        config_secret_free(secrets[i]);
        secrets[i] = NULL;
    }
    *n_secrets = 0;
    return 0;
}

/* A webhook route's secret_file: obj is its route_policy. */
int config_begin_secret_files(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *list, size_t n, void *obj)
{
    struct route_policy *policy = obj;

    return config_begin_files(ld, list, n, key->name, policy->secrets, &policy->n_secrets);
}

/* One item of secret_file; checked against verify in pass 3, where the scheme is known. */
int config_set_secret_file(struct config_loader *ld, const struct config_key *key,
                           yaml_node_t *node, char **text, void *obj)
{
    struct route_policy *policy = obj;
    char *secret;

    if (config_secret_read(ld, node, key->name, *text, &secret) < 0)
        return -1;
    policy->secrets[policy->n_secrets++] = secret;
    return 0;
}

/* delivery.sign.secret_file: obj is the route's delivery_policy. */
int config_begin_sign_secret_files(struct config_loader *ld, const struct config_key *key,
                                   yaml_node_t *list, size_t n, void *obj)
{
    struct delivery_policy *d = obj;
    char what[64];

    snprintf(what, sizeof(what), "delivery.sign.%s", key->name);
    return config_begin_files(ld, list, n, what, d->sign_secrets, &d->n_sign_secrets);
}

/* One item of delivery.sign.secret_file: a `whsec_` secret, as delivery.sign.secret takes. */
int config_set_sign_secret_file(struct config_loader *ld, const struct config_key *key,
                                yaml_node_t *node, char **text, void *obj)
{
    struct delivery_policy *d = obj;
    const char *why = NULL;
    char what[64];
    char *secret;

    snprintf(what, sizeof(what), "delivery.sign.%s", key->name);
    if (config_secret_read(ld, node, what, *text, &secret) < 0)
        return -1;
    if (webhook_sign_secret_check(secret, &why) != 0) {
        config_secret_free(secret);
        return config_error(ld, node, "%s: %s: bad signing secret: %s", what, *text, why);
    }
    d->sign_secrets[d->n_sign_secrets++] = secret;
    return 0;
}

/* The key node of name in map (the user's file), null value or not; NULL when absent. */
static yaml_node_t *config_key_node(struct config_loader *ld, yaml_node_t *map, const char *name)
{
    yaml_node_pair_t *pair = config_lookup_pair(&ld->user, map, name);

    return pair != NULL ? config_node(&ld->user, pair->key) : NULL;
}

int config_check_secret_source(struct config_loader *ld, yaml_node_t *map, const char *section,
                               const char *name)
{
    char file_name[64];
    yaml_node_t *file;
    const char *dot = section[0] != '\0' ? "." : "";

    snprintf(file_name, sizeof(file_name), "%s_file", name);
    file = config_key_node(ld, map, file_name);
    if (file == NULL || config_key_node(ld, map, name) == NULL)
        return 0;
    ld->cur = &ld->user;
    return config_error(ld, file, "%s%s%s and %s%s%s both give the secret; keep one", section,
                        dot, name, section, dot, file_name);
}

/* ---- what a reload changed --------------------------------------------------- */

/* The same n secrets in the same order. */
static bool config_same_secrets(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

/* The route of next with route's pattern as written (path and '*'), or NULL. */
static const struct route *config_same_route(const struct config *next, const struct route *route)
{
    for (size_t i = 0; i < next->n_routes; i++)
        if (next->routes[i].prefix == route->prefix &&
            strcmp(next->routes[i].path, route->path) == 0)
            return &next->routes[i];
    return NULL;
}

/* Appends one line to out (outsize bytes, truncated, NUL-terminated). */
static void config_change_line(char *out, size_t outsize, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void config_change_line(char *out, size_t outsize, const char *fmt, ...)
{
    size_t used = strnlen(out, outsize);
    va_list ap;

    if (used + 1 < outsize) {
        va_start(ap, fmt);
        vsnprintf(out + used, outsize - used, fmt, ap);
        va_end(ap);
    }
}

const char *config_secret_changes(const struct config *running, const struct config *next,
                                  char *out, size_t outsize)
{
    out[0] = '\0';
    if (!config_same_string(running->redis_password, next->redis_password))
        config_change_line(out, outsize, "redis.password changed: each worker sends it from "
                           "its next connection to Redis; the connections open now keep theirs\n");
    if (!config_same_string(running->redis_sentinel_password, next->redis_sentinel_password))
        config_change_line(out, outsize, "redis.sentinel.password changed: each worker sends "
                           "it from its next connection to a sentinel\n");
    for (size_t i = 0; i < running->n_routes; i++) {
        const struct route *was = &running->routes[i];
        const struct route *now = config_same_route(next, was);
        const char *star = was->prefix ? "*" : "";

        if (now == NULL)
            continue;
        if (!config_same_secrets(was->policy.secrets, was->policy.n_secrets,
                                 now->policy.secrets, now->policy.n_secrets))
            config_change_line(out, outsize, "the webhook secret of route %s%s changed: "
                               "deliveries from now on are verified with the new one\n",
                               was->path, star);
        if (was->policy.delivery.mode == DELIVERY_QUEUED &&
            !config_same_secrets(was->policy.delivery.sign_secrets,
                                 was->policy.delivery.n_sign_secrets,
                                 now->policy.delivery.sign_secrets,
                                 now->policy.delivery.n_sign_secrets))
            config_change_line(out, outsize, "the delivery.sign secret of route %s%s "
                               "changed: the next delivery attempts are signed with it\n",
                               was->path, star);
    }
    return out;
}
