/*
 * inbox_admin.c - the inbox's admin endpoints (docs/webhooks.md#webhook-inbox):
 *
 *   GET    /inbox                              per queued route: depth, pending,
 *                                              scheduled, oldest_age_s, dead
 *   GET    /inbox/<route>/dead                 dead letters, without bodies
 *   POST   /inbox/<route>/dead/<id>/redeliver  back into the stream, attempts 0
 *   DELETE /inbox/<route>/dead/<id>            drop one dead letter
 *   POST   /inbox/<route>/dead/redeliver       every dead letter (optional reason
 *                                              substring, before unix ms), in batches
 *   POST   /inbox/<route>/pause, /resume       stop and start deliveries (state in Redis)
 *
 * <route> is the route's path as written in the config, percent-encoded
 * (`%2Fwebhooks%2Fstripe`), the string GET /inbox lists as "route".
 */
#include "inbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "http_server.h"
#include "clock.h"
#include "config.h"

#define INBOX_DEAD_LIST_MAX 1000
/* Dead letters one bulk-redelivery script call scans: each call is one bounded Redis step. */
#define INBOX_REDELIVER_BATCH 100
/* Longest `reason` filter of a bulk redelivery, bytes. */
#define INBOX_REASON_MAX 160

/* One admin request waiting on Redis; for GET /inbox, one stats call per route. */
struct inbox_admin_call {
    struct http_req *req;
    struct inbox_keys keys;
    json_t *doc;
    size_t waiting;             /* GET /inbox: stats still to come */
    bool failed;
};

static void inbox_admin_reply(struct http_req *req, int status, json_t *doc)
{
    struct evbuffer *body = evbuffer_new();
    char *text = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(9));

    if (body != NULL && text != NULL) {
        evbuffer_add(body, text, strlen(text));
        evbuffer_add(body, "\n", 1);
    }
    evhttp_add_header(http_server_output_headers(req), "Content-Type", "application/json");
    evhttp_add_header(http_server_output_headers(req), "Cache-Control", "no-store");
    http_server_reply(req, status, NULL, body);
    free(text);
    if (body != NULL)
        evbuffer_free(body);
    json_decref(doc);
}

static void inbox_admin_error(struct http_req *req, int status, const char *error)
{
    inbox_admin_reply(req, status, json_pack("{s:s}", "error", error));
}

static void inbox_admin_done(struct inbox_admin_call *c, enum store_status st)
{
    inbox_admin_error(c->req, 503, st == STORE_TIMEOUT ? "redis timed out" : "redis failed");
    json_decref(c->doc);
    free(c);
}

/* ---- GET /inbox ---------------------------------------------------------- */

struct inbox_admin_route {
    struct inbox_admin_call *call;
    json_t *entry;              /* borrowed from call->doc */
    struct inbox_keys keys;
};

static void inbox_admin_on_stats(enum store_status st, const struct store_reply *r, void *arg)
{
    struct inbox_admin_route *ar = arg;
    struct inbox_admin_call *c = ar->call;

    if (st != STORE_OK || r->type != STORE_ARR || r->n != 6) {
        c->failed = true;
    } else {
        uint64_t now = clock_now_ms(), oldest = (uint64_t)r->elem[3].integer;
        json_object_set_new(ar->entry, "depth", json_integer(r->elem[0].integer));
        json_object_set_new(ar->entry, "pending", json_integer(r->elem[1].integer));
        json_object_set_new(ar->entry, "scheduled", json_integer(r->elem[2].integer));
        json_object_set_new(ar->entry, "oldest_age_s",
                            json_real(oldest > 0 && now > oldest ? (double)(now - oldest) / 1000.0
                                                                 : 0.0));
        json_object_set_new(ar->entry, "dead", json_integer(r->elem[4].integer));
        json_object_set_new(ar->entry, "paused", json_boolean(r->elem[5].integer == 1));
    }
    free(ar);
    if (--c->waiting > 0)
        return;
    if (c->failed) {
        inbox_admin_done(c, st);
        return;
    }
    inbox_admin_reply(c->req, 200, c->doc);
    free(c);
}

static void inbox_admin_list(struct http_req *req, struct store *s, const struct config *cfg)
{
    struct inbox_admin_call *c = calloc(1, sizeof(*c));
    json_t *routes = json_array();

    if (c == NULL || routes == NULL) {
        free(c);
        json_decref(routes);
        inbox_admin_error(req, 500, "out of memory");
        return;
    }
    c->req = req;
    c->doc = json_pack("{s:o}", "routes", routes);
    for (size_t i = 0; i < cfg->n_routes; i++) {
        const struct route *route = &cfg->routes[i];
        struct inbox_admin_route *ar;
        char *name, *encoded = NULL;

        if (route->policy.delivery.mode != DELIVERY_QUEUED)
            continue;
        ar = calloc(1, sizeof(*ar));
        name = inbox_route_name(route);
        if (name != NULL)
            encoded = evhttp_uriencode(name, -1, 0);
        if (ar == NULL || encoded == NULL) {
            free(ar);
            free(name);
            free(encoded);
            c->failed = true;
            continue;
        }
        ar->call = c;
        ar->entry = json_pack("{s:s,s:s}", "route", name, "admin", encoded);
        free(name);
        free(encoded);
        json_array_append_new(routes, ar->entry);
        inbox_keys_init(&ar->keys, cfg->key_prefix, route);
        c->waiting++;
        inbox_store_stats(s, &ar->keys.k, inbox_admin_on_stats, ar);
    }
    if (c->waiting == 0) {
        inbox_admin_reply(req, 200, c->doc);
        free(c);
    }
}

/* ---- dead letters -------------------------------------------------------- */

static void inbox_admin_on_dead_list(enum store_status st, const struct store_reply *r,
                                     void *arg)
{
    struct inbox_admin_call *c = arg;
    json_t *list;

    if (st != STORE_OK || r->type != STORE_ARR) {
        inbox_admin_done(c, st);
        return;
    }
    list = json_array();
    for (size_t i = 0; i < r->n; i++) {
        const struct store_reply *e = &r->elem[i];
        json_t *item;

        if (e->type != STORE_ARR || e->n != 2 || e->elem[0].type != STORE_STR ||
            e->elem[1].type != STORE_ARR)
            continue;
        item = json_object();
        json_object_set_new(item, "id", json_stringn(e->elem[0].str, e->elem[0].len));
        for (size_t j = 0; j + 1 < e->elem[1].n; j += 2) {
            const struct store_reply *k = &e->elem[1].elem[j], *v = &e->elem[1].elem[j + 1];
            static const char *const shown[] = { "event", "method", "target", "received",
                                                 "attempts", "reason", "died" };
            /* no body, no header values (signatures): the operator needs the what and why */
            for (size_t n = 0; n < sizeof(shown) / sizeof(shown[0]); n++) {
                if (k->len == strlen(shown[n]) && memcmp(k->str, shown[n], k->len) == 0) {
                    json_t *value = json_stringn(v->str, v->len);
                    if (value == NULL) /* not UTF-8 */
                        value = json_string("(not UTF-8)");
                    json_object_set_new(item, shown[n], value);
                }
            }
        }
        json_array_append_new(list, item);
    }
    json_object_set_new(c->doc, "dead", list);
    inbox_admin_reply(c->req, 200, c->doc);
    free(c);
}

static void inbox_admin_on_changed(enum store_status st, const struct store_reply *r, void *arg)
{
    struct inbox_admin_call *c = arg;

    if (st != STORE_OK || r->type != STORE_INT) {
        inbox_admin_done(c, st);
        return;
    }
    if (r->integer <= 0) {
        /* -1: a letter an older version queued with more header fields than a delivery may carry */
        inbox_admin_error(c->req, r->integer == 0 ? 404 : 409,
                          r->integer == 0 ? "no such dead letter"
                                          : "this dead letter has more fields than a delivery "
                                            "may carry, so it cannot be queued again; its "
                                            "fields stay in the dead-letter stream");
        json_decref(c->doc);
        free(c);
        return;
    }
    inbox_admin_reply(c->req, 200, c->doc);
    free(c);
}

/* ---- pause, resume ------------------------------------------------------ */

static void inbox_admin_on_paused(enum store_status st, const struct store_reply *r, void *arg)
{
    struct inbox_admin_call *c = arg;

    (void)r; /* SET's OK, DEL's count: either way the state is now the one asked for */
    if (st != STORE_OK) {
        inbox_admin_done(c, st);
        return;
    }
    inbox_admin_reply(c->req, 200, c->doc);
    free(c);
}

/* ---- bulk redelivery ----------------------------------------------------- */

struct inbox_admin_bulk {
    struct inbox_admin_call *call;
    struct store *store;
    char reason[INBOX_REASON_MAX + 1];
    uint64_t before_ms, now_ms;
    long long moved;
    char after[64];
};

static void inbox_admin_on_bulk(enum store_status st, const struct store_reply *r, void *arg)
{
    struct inbox_admin_bulk *b = arg;
    struct inbox_admin_call *c = b->call;

    if (st != STORE_OK || r->type != STORE_ARR || r->n != 2 || r->elem[0].type != STORE_INT ||
        r->elem[1].type != STORE_STR || r->elem[1].len >= sizeof(b->after)) {
        /* the batches already moved stay moved: the answer says how many */
        json_object_set_new(c->doc, "redelivered", json_integer(b->moved));
        json_object_set_new(c->doc, "error", json_string(st == STORE_TIMEOUT ? "redis timed out"
                                                                             : "redis failed"));
        inbox_admin_reply(c->req, 503, c->doc);
        free(c);
        free(b);
        return;
    }
    b->moved += r->elem[0].integer;
    if (r->elem[1].len > 0) {
        memcpy(b->after, r->elem[1].str, r->elem[1].len);
        b->after[r->elem[1].len] = '\0';
        inbox_store_redeliver_bulk(b->store, &c->keys.k, b->after, INBOX_REDELIVER_BATCH,
                                   b->reason, b->before_ms, b->now_ms, inbox_admin_on_bulk, b);
        return;
    }
    json_object_set_new(c->doc, "redelivered", json_integer(b->moved));
    inbox_admin_reply(c->req, 200, c->doc);
    free(c);
    free(b);
}

/*
 * A bulk redelivery's `before`: unix ms (as a dead letter's `died`), or UTC
 * in RFC 3339's `YYYY-MM-DDTHH:MM:SSZ` form (clock_parse_utc). False when
 * it is neither.
 */
static bool inbox_admin_time(const char *text, uint64_t *ms)
{
    size_t len = strlen(text);

    if (len > 0 && len <= 19 && strspn(text, "0123456789") == len) {
        *ms = strtoull(text, NULL, 10);
        return true;
    }
    return clock_parse_utc(text, ms);
}

/*
 * POST /inbox/<route>/dead/redeliver[?reason=<substring>&before=<time>]:
 * the query parsed by libevent; 400 for anything else in it.
 */
static void inbox_admin_bulk(struct http_req *req, struct store *s,
                             struct inbox_admin_call *c)
{
    const char *query = evhttp_uri_get_query(http_server_uri(req));
    struct evkeyvalq params;
    struct inbox_admin_bulk *b = calloc(1, sizeof(*b));
    const struct evkeyval *kv;
    const char *bad = NULL;

    TAILQ_INIT(&params);
    if (b == NULL || (query != NULL && evhttp_parse_query_str(query, &params) != 0)) {
        bad = b == NULL ? NULL : "the query does not parse";
        goto failed;
    }
    TAILQ_FOREACH(kv, &params, next) {
        if (strcmp(kv->key, "reason") == 0 && strlen(kv->value) <= INBOX_REASON_MAX) {
            snprintf(b->reason, sizeof(b->reason), "%s", kv->value);
        } else if (strcmp(kv->key, "before") == 0 && inbox_admin_time(kv->value, &b->before_ms)) {
            continue;
        } else {
            bad = "expected ?reason=<substring of the reason, at most 160 bytes>&before=<unix ms, "
                  "or UTC as 2026-12-01T09:30:00Z>";
            goto failed;
        }
    }
    evhttp_clear_headers(&params);
    b->call = c;
    b->store = s;
    b->now_ms = clock_now_ms();
    snprintf(b->after, sizeof(b->after), "-");
    inbox_store_redeliver_bulk(s, &c->keys.k, b->after, INBOX_REDELIVER_BATCH, b->reason,
                               b->before_ms, b->now_ms, inbox_admin_on_bulk, b);
    return;
failed:
    evhttp_clear_headers(&params);
    free(b);
    json_decref(c->doc);
    free(c);
    inbox_admin_error(req, bad != NULL ? 400 : 500, bad != NULL ? bad : "out of memory");
}

/* A stream entry id: digits '-' digits. */
static bool inbox_admin_id_ok(const char *id)
{
    size_t a = strspn(id, "0123456789");

    return a > 0 && a <= 20 && id[a] == '-' && strspn(id + a + 1, "0123456789") > 0 &&
           strspn(id + a + 1, "0123456789") <= 20 && id[a + 1 + strspn(id + a + 1, "0123456789")] == '\0';
}

void inbox_admin(struct http_req *req, struct store *s, const struct config *cfg,
                 const char *rest)
{
    enum evhttp_cmd_type cmd = http_server_command(req);
    const struct route *route = NULL;
    struct inbox_admin_call *c;
    char encoded[512], id[64] = "", action[32] = "";
    const char *slash, *after;
    char *decoded;

    if (rest[0] == '\0' || strcmp(rest, "/") == 0) {
        if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
            inbox_admin_error(req, 405, "GET");
            return;
        }
        inbox_admin_list(req, s, cfg);
        return;
    }
    /* /<route>/pause, /<route>/resume, /<route>/dead[/redeliver | /<id>[/redeliver]] */
    slash = strchr(rest + 1, '/');
    bool pause = slash != NULL && strcmp(slash, "/pause") == 0;
    bool resume = slash != NULL && strcmp(slash, "/resume") == 0;
    bool bulk = slash != NULL && strcmp(slash, "/dead/redeliver") == 0;
    if (rest[0] != '/' || slash == NULL || (size_t)(slash - rest - 1) >= sizeof(encoded) ||
        (!pause && !resume && (strncmp(slash, "/dead", 5) != 0 ||
                               (slash[5] != '\0' && slash[5] != '/')))) {
        inbox_admin_error(req, 404, "expected /inbox/<route>/pause, /resume or "
                          "/dead[/redeliver | /<id>[/redeliver]], the route percent-encoded as "
                          "GET /inbox lists it");
        return;
    }
    memcpy(encoded, rest + 1, (size_t)(slash - rest - 1));
    encoded[slash - rest - 1] = '\0';
    decoded = evhttp_uridecode(encoded, 0, NULL);
    for (size_t i = 0; decoded != NULL && i < cfg->n_routes; i++)
        if (cfg->routes[i].policy.delivery.mode == DELIVERY_QUEUED &&
            inbox_route_named(&cfg->routes[i], decoded))
            route = &cfg->routes[i];
    free(decoded);
    if (route == NULL) {
        inbox_admin_error(req, 404, "no queued route with this path (GET /inbox lists them)");
        return;
    }
    if (pause || resume || bulk) {
        if (cmd != EVHTTP_REQ_POST) {
            inbox_admin_error(req, 405, "POST");
            return;
        }
        c = calloc(1, sizeof(*c));
        char *name = inbox_route_name(route);
        if (c == NULL || name == NULL) {
            free(c);
            free(name);
            inbox_admin_error(req, 500, "out of memory");
            return;
        }
        c->req = req;
        inbox_keys_init(&c->keys, cfg->key_prefix, route);
        c->doc = json_pack("{s:s}", "route", name);
        free(name);
        if (bulk) {
            inbox_admin_bulk(req, s, c);
            return;
        }
        json_object_set_new(c->doc, "paused", json_boolean(pause));
        inbox_store_set_paused(s, &c->keys.k, pause, inbox_admin_on_paused, c);
        return;
    }
    after = slash + 5;
    if (*after == '/') {
        const char *end = strchr(after + 1, '/');
        size_t len = end != NULL ? (size_t)(end - after - 1) : strlen(after + 1);
        if (len >= sizeof(id) || (end != NULL && strlen(end + 1) >= sizeof(action))) {
            inbox_admin_error(req, 404, "no such dead letter");
            return;
        }
        memcpy(id, after + 1, len);
        id[len] = '\0';
        if (end != NULL)
            snprintf(action, sizeof(action), "%s", end + 1);
        if (!inbox_admin_id_ok(id) || (end != NULL && strcmp(action, "redeliver") != 0)) {
            inbox_admin_error(req, 404, "expected /inbox/<route>/dead/<id>[/redeliver], the id "
                              "as GET /inbox/<route>/dead lists it");
            return;
        }
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        inbox_admin_error(req, 500, "out of memory");
        return;
    }
    c->req = req;
    inbox_keys_init(&c->keys, cfg->key_prefix, route);
    {
        char *name = inbox_route_name(route);
        c->doc = name != NULL ? json_pack("{s:s}", "route", name) : NULL;
        free(name);
    }
    if (id[0] == '\0' && (cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD)) {
        inbox_store_dead_list(s, &c->keys.k, INBOX_DEAD_LIST_MAX, inbox_admin_on_dead_list, c);
    } else if (id[0] != '\0' && action[0] != '\0' && cmd == EVHTTP_REQ_POST) {
        json_object_set_new(c->doc, "redelivered", json_string(id));
        inbox_store_redeliver(s, &c->keys.k, id, clock_now_ms(), inbox_admin_on_changed, c);
    } else if (id[0] != '\0' && action[0] == '\0' && cmd == EVHTTP_REQ_DELETE) {
        json_object_set_new(c->doc, "deleted", json_string(id));
        inbox_store_dead_delete(s, &c->keys.k, id, inbox_admin_on_changed, c);
    } else {
        json_decref(c->doc);
        free(c);
        inbox_admin_error(req, 405, id[0] == '\0' ? "GET"
                                    : action[0] != '\0' ? "POST" : "DELETE");
    }
}
