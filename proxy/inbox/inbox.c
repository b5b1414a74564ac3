/*
 * inbox.c - a queued webhook route's keys, and accepting a delivery: XADD
 * to the route's stream, WAIT-confirmed with redis.min_replicas (README
 * "Webhook inbox"). The exchange records the event id with ack_status only
 * after the append callback said ok.
 */
#include "inbox.h"
#include "inbox_seal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/queue.h>

#include <event2/keyvalq_struct.h>
#include <xxhash.h>

#include "clock.h"
#include "config.h"
#include "headers.h"
#include "log.h"
#include "store.h"

void inbox_keys_init(struct inbox_keys *keys, const char *key_prefix, const struct route *route)
{
    unsigned long long h = (unsigned long long)XXH3_64bits(route->path, route->path_len);

    if (route->prefix)
        h = (unsigned long long)XXH3_64bits_withSeed("*", 1, h);

    snprintf(keys->stream, sizeof(keys->stream), "%s:inbox:{%016llx}:stream", key_prefix, h);
    snprintf(keys->retries, sizeof(keys->retries), "%s:inbox:{%016llx}:retries", key_prefix, h);
    snprintf(keys->payloads, sizeof(keys->payloads), "%s:inbox:{%016llx}:payloads", key_prefix,
             h);
    snprintf(keys->dead, sizeof(keys->dead), "%s:inbox:{%016llx}:dead", key_prefix, h);
    snprintf(keys->rate, sizeof(keys->rate), "%s:inbox:{%016llx}:rate", key_prefix, h);
    snprintf(keys->paused, sizeof(keys->paused), "%s:inbox:{%016llx}:paused", key_prefix, h);
    keys->k = (struct inbox_store_keys){ .stream = keys->stream, .retries = keys->retries,
                                         .payloads = keys->payloads, .dead = keys->dead,
                                         .group = INBOX_GROUP, .rate = keys->rate,
                                         .paused = keys->paused };
}

char *inbox_route_name(const struct route *route)
{
    char *name = malloc(route->path_len + 2);

    if (name != NULL) {
        memcpy(name, route->path, route->path_len);
        memcpy(name + route->path_len, route->prefix ? "*" : "", route->prefix ? 2 : 1);
    }
    return name;
}

bool inbox_route_named(const struct route *route, const char *name)
{
    return strncmp(name, route->path, route->path_len) == 0 &&
           strcmp(name + route->path_len, route->prefix ? "*" : "") == 0;
}

/* One append in flight: the keys (for the XDEL after a WAIT shortfall) and the caller. */
struct inbox_append {
    struct store *s;
    unsigned min_replicas;
    struct inbox_keys keys;
    char id[64];
    inbox_append_cb *cb;
    void *arg;
};

static void inbox_on_undone(enum store_status st, const struct store_reply *r, void *arg)
{
    struct inbox_append *a = arg;

    (void)r;
    if (st != STORE_OK)
        log_msg(LOG_ERROR, "inbox %s: an entry that fewer than redis.min_replicas replicas "
                "confirmed could not be deleted; it will be delivered, and the provider's "
                "retry may be delivered too", a->id);
    free(a);
}

static void inbox_on_replicated(enum store_status st, long long replicas, void *arg)
{
    struct inbox_append *a = arg;

    if (st == STORE_OK && replicas >= (long long)a->min_replicas) {
        a->cb(true, a->arg);
        free(a);
        return;
    }
    log_msg(LOG_WARN, "inbox %s: the appended delivery reached %lld of %u replicas; the "
            "provider gets 503 and retries", a->id, st == STORE_OK ? replicas : 0,
            a->min_replicas);
    a->cb(false, a->arg);
    /* the provider retries: take this copy back so that the retry is the only one */
    inbox_store_ack(a->s, &a->keys.k, a->id, inbox_on_undone, a);
}

static void inbox_on_appended(enum store_status st, const struct store_reply *r, void *arg)
{
    struct inbox_append *a = arg;

    if (st != STORE_OK || r == NULL || r->type != STORE_STR || r->len >= sizeof(a->id)) {
        a->cb(false, a->arg);
        free(a);
        return;
    }
    memcpy(a->id, r->str, r->len);
    a->id[r->len] = '\0';
    if (a->min_replicas == 0) {
        a->cb(true, a->arg);
        free(a);
        return;
    }
    /* from inside the XADD's reply callback, as store_wait_replicas needs */
    store_wait_replicas(a->s, true, inbox_on_replicated, a);
}

void inbox_append(struct store *s, const struct config *cfg, const struct route *route,
                  const char *event_id, const char *record_id, const char *method, const char *target,
                  const char *client_addr, const struct evkeyvalq *headers, const char *body,
                  size_t len, inbox_append_cb *cb, void *arg)
{
    struct inbox_append *a = calloc(1, sizeof(*a));
    size_t n = 0, cap = 10; /* the fixed fields, then one per header field */
    const struct evkeyval *h;
    char received[24];
    const char **fv;
    size_t *fvlen;
    char **names;

    TAILQ_FOREACH(h, headers, next)
        cap++;
    fv = calloc(2 * cap, sizeof(*fv));
    fvlen = calloc(2 * cap, sizeof(*fvlen));
    names = calloc(cap, sizeof(*names));
    if (a == NULL || fv == NULL || fvlen == NULL || names == NULL) {
        log_msg(LOG_ERROR, "inbox: out of memory");
        abort();
    }
    a->s = s;
    a->min_replicas = cfg->redis_min_replicas;
    a->cb = cb;
    a->arg = arg;
    inbox_keys_init(&a->keys, cfg->key_prefix, route);
    snprintf(received, sizeof(received), "%llu", (unsigned long long)clock_now_ms());

#define INBOX_FIELD(name, value, vlen)          \
    do {                                        \
        fv[2 * n] = (name);                     \
        fvlen[2 * n] = strlen(name);            \
        fv[2 * n + 1] = (value);                \
        fvlen[2 * n + 1] = (vlen);              \
        n++;                                    \
    } while (0)
    INBOX_FIELD("event", event_id, strlen(event_id));
    INBOX_FIELD("record", record_id, strlen(record_id));
    INBOX_FIELD("method", method, strlen(method));
    INBOX_FIELD("target", target, strlen(target));
    INBOX_FIELD("received", received, strlen(received));
    INBOX_FIELD("attempts", "0", 1);
    if (client_addr != NULL)
        INBOX_FIELD("client", client_addr, strlen(client_addr));
    /* with a keyring, header fields and body in one sealed value (inbox_seal.h) */
    char *sealed = NULL;
    size_t sealed_len = 0;
    if (cfg->keyring != NULL) {
        char *name = inbox_route_name(route);
        struct inbox_seal_bind b = { name, route->path, event_id, method, target, record_id };
        int sealed_rc = name == NULL ? -1
                                     : inbox_seal(cfg->keyring, &b, headers, body,
                                                  body != NULL ? len : 0, &sealed, &sealed_len);

        free(name);
        if (sealed_rc != 0) {
            log_msg(LOG_ERROR, "inbox %s: cannot seal the delivery of record %s; the provider "
                    "gets 503 and retries", route->path, record_id);
            free(names);
            free(fv);
            free(fvlen);
            free(a);
            cb(false, arg);
            return;
        }
        INBOX_FIELD("key", keyring_id(cfg->keyring, 0), strlen(keyring_id(cfg->keyring, 0)));
        INBOX_FIELD("sealed", sealed, sealed_len);
    } else {
        INBOX_FIELD("body", body != NULL ? body : "", body != NULL ? len : 0);
    }
    /* the fields the upstream would get in direct mode, the signature headers among them */
    size_t nh = 0;
    TAILQ_FOREACH(h, headers, next) {
        if (sealed != NULL)
            break;
        if (!header_is_queued(h->key))
            continue;
        size_t klen = strlen(h->key);
        names[nh] = malloc(klen + 3);
        if (names[nh] == NULL) {
            log_msg(LOG_ERROR, "inbox: out of memory");
            abort();
        }
        memcpy(names[nh], "h:", 2);
        memcpy(names[nh] + 2, h->key, klen + 1);
        INBOX_FIELD(names[nh], h->value, strlen(h->value));
        nh++;
    }
#undef INBOX_FIELD
    inbox_store_append(s, &a->keys.k, n, fv, fvlen, inbox_on_appended, a);
    for (size_t i = 0; i < nh; i++)
        free(names[i]);
    free(sealed);
    free(names);
    free(fv);
    free(fvlen);
}
