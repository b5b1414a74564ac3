/*
 * config_replicas.c - redis.min_replicas and redis.replica_timeout (a claim
 * WAITed for by replicas before it is forwarded): the setter of the count
 * and the check that ties replica_timeout to redis.timeout. The key tables
 * that name them are config_schema.c's; replica_timeout itself is a plain
 * duration.
 */
#include "config_int.h"

#include <stdio.h>

int config_set_min_replicas(struct config_loader *ld, const struct config_key *key,
                            yaml_node_t *node, char **text, void *obj)
{
    unsigned *field = (unsigned *)((char *)obj + key->offset);
    uint64_t n;

    if (config_parse_uint(*text, CONFIG_MAX_MIN_REPLICAS, &n) < 0)
        return config_error(ld, node, "bad %s '%s': expected a whole number of replicas from 0 "
                            "to %d (0: claims are not waited for)", key->name, *text,
                            CONFIG_MAX_MIN_REPLICAS);
    *field = (unsigned)n;
    return 0;
}

/*
 * WAIT blocks the worker's Redis connection for up to replica_timeout, and
 * every command sent behind it waits as long; a command unanswered for
 * redis.timeout drops the connection. At most half leaves the other half
 * for the command's own round trip, so a slow replica costs 503s for the
 * claims it could not confirm, never a dropped connection for everyone.
 */
int config_check_replicas(struct config_loader *ld, yaml_node_t *redis)
{
    const struct config *cfg = ld->cfg;
    char wait[32], timeout[32];

    if (cfg->redis_min_replicas == 0 ||
        cfg->redis_replica_timeout_ms * 2 <= cfg->redis_timeout_ms)
        return 0;
    config_format_duration(cfg->redis_replica_timeout_ms, wait, sizeof(wait));
    config_format_duration(cfg->redis_timeout_ms, timeout, sizeof(timeout));
    return config_error(ld, redis, "redis.replica_timeout (%s) must be at most half of "
                        "redis.timeout (%s) with min_replicas %u: WAIT holds the connection "
                        "that long, and every command behind it must still be answered within "
                        "redis.timeout", wait, timeout, cfg->redis_min_replicas);
}
