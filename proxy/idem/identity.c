/*
 * identity.c - a protected request's record id and Redis key; see identity.h.
 */
#include "identity.h"
#include "record_id.h"

#include <event2/http.h>

int identity_compute(const struct config *cfg, const struct route_policy *policy,
                     const struct evkeyvalq *headers, const char *key, size_t key_len,
                     char *record_id, char *record_key, size_t record_key_size)
{
    const char *scope[CONFIG_MAX_SCOPE_HEADERS];

    for (size_t i = 0; i < policy->n_scope_headers; i++)
        scope[i] = evhttp_find_header(headers, policy->scope_headers[i]);
    record_id_compute(policy->record_source, policy->scope_headers, scope,
                      policy->n_scope_headers, key, key_len, record_id);
    return record_key_format(cfg->key_prefix, record_id, record_key, record_key_size);
}
