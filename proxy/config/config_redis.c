/*
 * config_redis.c - pass 3 of the redis section (config_int.h), once the
 * built-in defaults are in: where Redis is (redis.url, redis.sentinel or redis.cluster,
 * complete), the credentials (the keys over the URL's, the sentinels' own),
 * and TLS.
 */
#include "config_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A credential: the key's value wins over the URL's; "" (an unset ${VAR})
 * means none, and then the URL's, when it has one, is taken.
 */
static void config_take_credential(char **field, char **from_url)
{
    if (*field != NULL && (*field)[0] == '\0') {
        free(*field);
        *field = NULL;
    }
    if (*field == NULL && from_url != NULL && *from_url != NULL && (*from_url)[0] != '\0') {
        *field = *from_url;
        *from_url = NULL;
    }
}

/* A file named by redis.tls.KEY must be readable now: a typo fails at startup and at -t. */
static int config_check_readable(struct config_loader *ld, yaml_node_t *tls, const char *key,
                                 const char *path)
{
    FILE *f;

    if (path == NULL)
        return 0;
    f = fopen(path, "r");
    if (f == NULL)
        return config_error(ld, config_lookup(&ld->user, tls, key), "redis.tls.%s: cannot "
                            "read %s: %s", key, path, strerror(errno));
    fclose(f);
    return 0;
}

/*
 * redis.sentinel (config_finish has already refused it beside redis.url):
 * the master's name and at least one address, and the sentinels' own
 * credentials ("" is none; a user needs a password).
 */
static int config_finish_sentinel(struct config_loader *ld, yaml_node_t *sentinel)
{
    struct config *cfg = ld->cfg;

    if (cfg->redis_sentinel_master == NULL || cfg->redis_sentinels.n == 0)
        return config_error(ld, sentinel, "redis.sentinel needs master (the name the sentinels "
                            "monitor it by) and addresses (host:port of each sentinel)");
    if (config_check_secret_source(ld, sentinel, "redis.sentinel", "password") < 0)
        return -1;
    config_take_credential(&cfg->redis_sentinel_username, NULL);
    config_take_credential(&cfg->redis_sentinel_password, NULL);
    if (cfg->redis_sentinel_username != NULL && cfg->redis_sentinel_password == NULL)
        return config_error(ld, sentinel, "redis.sentinel: a user name without a password: "
                            "set redis.sentinel.password or redis.sentinel.password_file");
    return 0;
}

/* redis.cluster (config_finish has already refused it beside redis.url): a seed at least. */
static int config_finish_cluster(struct config_loader *ld, yaml_node_t *cluster)
{
    if (ld->cfg->redis_cluster.n == 0)
        return config_error(ld, cluster, "redis.cluster needs addresses (host:port of one or "
                            "more cluster nodes: the slot map is read from the first that "
                            "answers)");
    return 0;
}

int config_finish_redis(struct config_loader *ld)
{
    struct config *cfg = ld->cfg;
    yaml_node_t *redis = config_lookup(&ld->user, ld->user.root, "redis");
    yaml_node_t *tls = config_lookup(&ld->user, redis, "tls");
    yaml_node_t *sentinel = config_lookup(&ld->user, redis, "sentinel");
    yaml_node_t *cluster = config_lookup(&ld->user, redis, "cluster");

    ld->cur = &ld->user;
    if (sentinel != NULL && config_finish_sentinel(ld, sentinel) < 0)
        return -1;
    if (cluster != NULL && config_finish_cluster(ld, cluster) < 0)
        return -1;
    if (config_check_secret_source(ld, redis, "redis", "password") < 0)
        return -1;
    /* the file is the one source: a password left in the URL would be a second */
    if ((ld->set_redis & (1u << config_key_index(config_redis_keys, "password_file"))) &&
        ld->redis_url_password != NULL && ld->redis_url_password[0] != '\0')
        return config_error(ld, config_lookup(&ld->user, redis, "password_file"),
                            "redis.password_file and a password in redis.url both give the "
                            "password; keep one (write the URL without it)");
    config_take_credential(&cfg->redis_username, &ld->redis_url_username);
    config_take_credential(&cfg->redis_password, &ld->redis_url_password);
    /* the name is not echoed: redis://SECRET@host may have meant a password */
    if (cfg->redis_username != NULL && cfg->redis_password == NULL)
        return config_error(ld, redis, "redis: a user name without a password: set "
                            "redis.password or redis.password_file, or write "
                            "redis://USER:PASSWORD@host (for the "
                            "default user: redis://:PASSWORD@host)");
    if (tls != NULL && cfg->redis_unix_path != NULL)
        return config_error(ld, tls, "redis.tls with a unix: socket: TLS on a unix socket is "
                            "not supported (drop redis.tls, or use rediss://host:port)");
    if (tls != NULL && !cfg->redis_tls)
        return config_error(ld, tls, sentinel != NULL
                            ? "redis.tls needs redis.sentinel.tls: true (TLS to the sentinels "
                              "and the data nodes)"
                            : cluster != NULL
                            ? "redis.tls needs redis.cluster.tls: true (TLS to every node)"
                            : "redis.tls needs a rediss:// URL in redis.url (redis:// is plain "
                              "TCP)");
    if ((cfg->redis_tls_cert_file == NULL) != (cfg->redis_tls_key_file == NULL))
        return config_error(ld, tls, "redis.tls needs both cert_file and key_file (a client "
                            "certificate for mutual TLS), or neither");
    if (config_check_readable(ld, tls, "ca_file", cfg->redis_tls_ca_file) < 0 ||
        config_check_readable(ld, tls, "cert_file", cfg->redis_tls_cert_file) < 0 ||
        config_check_readable(ld, tls, "key_file", cfg->redis_tls_key_file) < 0)
        return -1;
    return 0;
}
