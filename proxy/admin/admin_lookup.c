/*
 * admin_lookup.c - GET /records/lookup: the record a request maps to
 * (lookup.h), and whether Redis holds it.
 */
#include "admin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "http_server.h"
#include "config.h"
#include "exchange.h"
#include "headers.h"
#include "lookup.h"
#include "record.h"
#include "store.h"

struct admin_lookup_call {
    struct http_req *req;
    json_t *doc;
};

/* Whether Redis holds the record, and its state (null: none, or one this release cannot read). */
static void admin_lookup_on_get(enum store_status st, const char *value, size_t len, void *arg)
{
    struct admin_lookup_call *c = arg;
    struct record rec;

    if (st != STORE_OK && st != STORE_WRONG_TYPE) {
        admin_reply_error(c->req, 503, "redis unavailable");
        json_decref(c->doc);
    } else if (st == STORE_WRONG_TYPE) {
        /* a key of another type: there, and no record */
        json_object_set_new(c->doc, "exists", json_true());
        json_object_set_new(c->doc, "state", json_null());
        admin_reply_json(c->req, 200, c->doc);
    } else {
        json_object_set_new(c->doc, "exists", json_boolean(value != NULL));
        json_object_set_new(c->doc, "state",
                            value != NULL && record_decode(value, len, &rec) == 0
                                ? json_string(admin_state_name(rec.state)) : json_null());
        admin_reply_json(c->req, 200, c->doc);
    }
    free(c);
}

/*
 * The one value of query parameter name (NULL when absent); *twice when it
 * is given more than once (the lookup cannot guess which one is meant).
 */
static const char *admin_lookup_param(const struct evkeyvalq *params, const char *name,
                                      bool *twice)
{
    int n;
    const char *value = header_find_all(params, name, &n);

    if (n > 1)
        *twice = true;
    return value;
}

/*
 * The scope header fields of the request looked up: every header=Name:
 * value parameter, then the lookup's own fields that no parameter named,
 * except Authorization and Host, which belong to this admin request (its
 * token, the admin listener's address), not to the one looked up. NULL on
 * success, else a static reason (400).
 */
static const char *admin_lookup_scope(struct http_req *req, const struct evkeyvalq *params,
                                      struct evkeyvalq *scope)
{
    const struct evkeyval *p, *given, *last_given = NULL;
    const char *why;

    TAILQ_FOREACH(p, params, next) {
        if (strcmp(p->key, "header") != 0)
            continue;
        if (lookup_add_header(scope, p->value, &why) != 0)
            return why;
        last_given = TAILQ_LAST(scope, evkeyvalq);
    }
    TAILQ_FOREACH(p, http_server_input_headers(req), next) {
        bool named = false;

        if (strcasecmp(p->key, "Authorization") == 0 || strcasecmp(p->key, "Host") == 0)
            continue;
        /* a parameter wins over the field; two fields of one name stay two (refused) */
        for (given = last_given != NULL ? TAILQ_FIRST(scope) : NULL; given != NULL && !named;
             given = given == last_given ? NULL : TAILQ_NEXT(given, next))
            named = strcasecmp(given->key, p->key) == 0;
        if (!named && evhttp_add_header(scope, p->key, p->value) != 0)
            return "a header field has a line break";
    }
    return NULL;
}

void admin_lookup(const struct admin_env *env, struct http_req *req)
{
    const struct evhttp_uri *uri = http_server_uri(req);
    const char *query = uri != NULL ? evhttp_uri_get_query(uri) : NULL;
    const char *path, *key, *method, *why = NULL;
    struct evkeyvalq params, scope;
    struct lookup_result r;
    struct admin_lookup_call *c;
    char reason[512];
    bool twice = false;

    if (http_server_command(req) != EVHTTP_REQ_GET) {
        admin_reply_error(req, 405, "GET");
        return;
    }
    TAILQ_INIT(&params);
    TAILQ_INIT(&scope);
    if (query == NULL || evhttp_parse_query_str(query, &params) != 0) {
        admin_reply_error(req, 400, "expected ?path=...&key=...[&method=...][&header=Name: "
                                    "value]..., percent-encoded");
        goto done;
    }
    path = admin_lookup_param(&params, "path", &twice);
    key = admin_lookup_param(&params, "key", &twice);
    method = admin_lookup_param(&params, "method", &twice);
    if (path == NULL || key == NULL || twice) {
        admin_reply_error(req, 400, "give path= and key= once each (method= at most once)");
        goto done;
    }
    why = admin_lookup_scope(req, &params, &scope);
    if (why != NULL) {
        snprintf(reason, sizeof(reason), "header=: %s", why);
        admin_reply_error(req, 400, reason);
        goto done;
    }
    if (lookup_record(exchange_set_conf(env->set), method, path, &scope, key, &r, reason,
                      sizeof(reason)) != 0) {
        admin_reply_error(req, 400, reason);
        goto done;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || (c->doc = lookup_json(&r)) == NULL) {
        free(c);
        admin_reply_error(req, 500, "out of memory");
        goto done;
    }
    c->req = req;
    store_get(env->store, r.redis_key, admin_lookup_on_get, c);
done:
    evhttp_clear_headers(&params);
    evhttp_clear_headers(&scope);
}
