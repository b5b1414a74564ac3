/*
 * config.c - the configuration module's front door: load a file or a text
 * into plain structs (config.h), free them, the reference-counted heap
 * config the worker threads share, and the route queries.
 *
 * libyaml builds the document (with line marks); nothing here reads YAML
 * syntax by hand. Three passes, as twemproxy does:
 *
 *   1. structure (config_structure.c): every mapping is checked against the
 *      key tables: unknown keys, duplicate keys, and the kind of each value
 *      (a single value, a list, a section);
 *   2. typed setters (config_apply.c): for each key present in the file the
 *      pass expands ${VAR} in the value and runs the key's setter
 *      (config_set.c), which converts the text into the struct field; the
 *      key is marked as set;
 *   3. defaults and cross-field checks (config_finish.c): every key still
 *      unset takes its value from `defaults:` (routes only) and then from
 *      the built-in defaults document, applied by the same setters; then
 *      the checks that involve several keys (retention >= lease, verify
 *      needs a secret, ...; the redis section's in config_redis.c and
 *      config_replicas.c), and last the keyring file (config_keyring.c).
 *
 * The key tables are the schema (config_schema.c). The rest of the module:
 * config_int.h (the types and helpers its files share, and the setters'
 * ownership rule), config_node.c (messages, reading nodes), config_value.c
 * (pure value parsers), config_file.c (the file and its libyaml document),
 * config_secret.c (secrets read from files); route patterns live in route.c.
 */
#include "config_int.h"
#include "keyring.h"
#include "route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

/* ---- loading ----------------------------------------------------------- */

static void config_loader_deinit(struct config_loader *ld)
{
    if (ld->user.loaded)
        yaml_document_delete(&ld->user.yaml);
    if (ld->builtin.loaded)
        yaml_document_delete(&ld->builtin.yaml);
    free(ld->set_routes);
    free(ld->route_nodes);
    free(ld->redis_url_username);
    free(ld->redis_url_password);
}

int config_load_string(struct config *cfg, const char *yaml, size_t len,
                       const char *name, char *err, size_t errlen)
{
    struct config_loader ld;

    memset(cfg, 0, sizeof(*cfg));
    memset(&ld, 0, sizeof(ld));
    ld.cfg = cfg;
    ld.err = err;
    ld.errlen = errlen;
    ld.user.name = name;
    ld.builtin.name = "built-in defaults";
    ld.cur = &ld.user;
    if (err != NULL && errlen > 0)
        err[0] = '\0';

    if (config_doc_parse(&ld, &ld.builtin, config_builtin_yaml, strlen(config_builtin_yaml)) < 0 ||
        config_doc_parse(&ld, &ld.user, yaml, len) < 0)
        goto failed;
    /* pass 1: structure */
    if (config_check_structure(&ld, &ld.builtin) < 0 || config_check_structure(&ld, &ld.user) < 0)
        goto failed;
    /* pass 2: the file's own keys */
    if (config_apply_doc(&ld, &ld.user) < 0 || config_apply_routes(&ld) < 0)
        goto failed;
    /* pass 3: inheritance, built-in defaults, cross-field checks */
    if (config_finish(&ld) < 0)
        goto failed;
    config_loader_deinit(&ld);
    return 0;
failed:
    config_loader_deinit(&ld);
    config_deinit(cfg);
    return -1;
}

/* Frees a secret (a password, a webhook or signing secret), wiped first. NULL is fine. */
static void config_free_secret(char *secret)
{
    if (secret == NULL)
        return;
    OPENSSL_cleanse(secret, strlen(secret));
    free(secret);
}

static void config_policy_deinit(struct route_policy *policy)
{
    free(policy->key_header);
    for (size_t i = 0; i < policy->n_scope_headers; i++)
        free(policy->scope_headers[i]);
    config_key_pattern_free(policy);
    for (size_t i = 0; i < policy->n_fingerprint_ignore; i++)
        free(policy->fingerprint_ignore[i]);
    free(policy->key_json_pointer);
    free(policy->record_source);
    for (size_t i = 0; i < policy->n_secrets; i++)
        config_free_secret(policy->secrets[i]);
    for (size_t i = 0; i < policy->delivery.n_sign_secrets; i++)
        config_free_secret(policy->delivery.sign_secrets[i]);
}

void config_deinit(struct config *cfg)
{
    free(cfg->listen.host);
    free(cfg->admin_listen.host);
    free(cfg->health_listen.host);
    free(cfg->admin_token_file);
    free(cfg->admin_operators_file);
    free(cfg->audit_log);
    free(cfg->operators);
    free(cfg->upstream_url);
    free(cfg->upstream_base);
    free(cfg->upstream_unix_path);
    free(cfg->upstream_record_id_header);
    for (size_t i = 0; i < cfg->n_upstream_record_id_retired; i++)
        free(cfg->upstream_record_id_retired[i]);
    free(cfg->upstream_record_id_retired);
    free(cfg->redis_url);
    free(cfg->redis_host);
    free(cfg->redis_unix_path);
    free(cfg->redis_username);
    config_free_secret(cfg->redis_password);
    free(cfg->redis_tls_ca_file);
    free(cfg->redis_tls_cert_file);
    free(cfg->redis_tls_key_file);
    free(cfg->redis_tls_server_name);
    free(cfg->redis_sentinel_master);
    for (size_t i = 0; i < cfg->redis_sentinels.n; i++)
        free(cfg->redis_sentinels.at[i].host);
    free(cfg->redis_sentinel_username);
    config_free_secret(cfg->redis_sentinel_password);
    for (size_t i = 0; i < cfg->redis_cluster.n; i++)
        free(cfg->redis_cluster.at[i].host);
    free(cfg->key_prefix);
    config_policy_deinit(&cfg->defaults);
    for (size_t i = 0; i < cfg->n_routes; i++) {
        route_pattern_free(&cfg->routes[i]);
        config_policy_deinit(&cfg->routes[i].policy);
    }
    free(cfg->routes);
    free(cfg->keyring_file);
    keyring_unref(cfg->keyring);
    memset(cfg, 0, sizeof(*cfg));
}

int config_load(struct config *cfg, const char *file, char *err, size_t errlen)
{
    char *text;
    size_t len;
    int rc;

    memset(cfg, 0, sizeof(*cfg));
    if (config_file_read(file, &text, &len, err, errlen) < 0)
        return -1;
    rc = config_load_string(cfg, text, len, file, err, errlen);
    free(text);
    return rc;
}

/* ---- the shared heap config ---------------------------------------------- */

struct config *config_create(const char *file, char *err, size_t errlen)
{
    struct config *cfg = malloc(sizeof(*cfg));

    if (cfg == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (config_load(cfg, file, err, errlen) != 0) {
        free(cfg);
        return NULL;
    }
    cfg->refs = 1;
    return cfg;
}

struct config *config_ref(struct config *cfg)
{
    cfg->refs++;
    return cfg;
}

void config_unref(struct config *cfg)
{
    if (cfg == NULL || --cfg->refs > 0)
        return;
    config_deinit(cfg);
    free(cfg);
}

/* ---- queries: route.c does the work ------------------------------------ */

const struct route *config_match_route(const struct config *cfg, const char *path)
{
    return route_match(cfg->routes, cfg->n_routes, path);
}

size_t config_route_warnings(const struct config *cfg, const char *file, char *out,
                             size_t outsize)
{
    return route_warnings(cfg->routes, cfg->n_routes, file, out, outsize);
}
