/*
 * admin.c - the admin listener's endpoints: the probes and the metrics,
 * open to every client, and behind the token check (admin_auth.c) the
 * records, the record lookup and the inbox. See admin_int.h for the files.
 */
#include "admin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "config.h"
#include "exchange.h"
#include "inbox.h"
#include "metrics.h"

#define ADMIN_RECORDS_PATH "/records/"
#define ADMIN_LOOKUP_PATH "/records/lookup"
#define ADMIN_LIST_PATH "/records"
#define ADMIN_INBOX_PATH "/inbox"

static void admin_metrics(const struct admin_env *env, struct evhttp_request *req)
{
    struct evbuffer *body = evbuffer_new();
    struct metrics_gauges g;

    env->gauges(env->arg, &g);
    metrics_render(env->metrics, body, &g);
    admin_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", body);
    evbuffer_free(body);
}

/* GET /healthz, /readyz and /metrics: what the kubelet and Prometheus ask, without a token. */
static bool admin_probe(const struct admin_env *env, struct evhttp_request *req, const char *path)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    bool read = cmd != EVHTTP_REQ_POST && cmd != EVHTTP_REQ_DELETE && cmd != EVHTTP_REQ_PUT;

    if (strcmp(path, "/healthz") == 0 && read) {
        admin_reply_text(req, 200, "ok\n");
    } else if (strcmp(path, "/readyz") == 0 && read) {
        const char *why = env->unready(env->arg);
        char text[64];
        snprintf(text, sizeof(text), "%s\n", why != NULL ? why : "ready");
        admin_reply_text(req, why != NULL ? 503 : 200, text);
    } else if (strcmp(path, "/metrics") == 0 && read) {
        admin_metrics(env, req);
    } else if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0 ||
               strcmp(path, "/metrics") == 0) {
        admin_reply_text(req, 405, "method not allowed\n");
    } else {
        return false;
    }
    return true;
}

/*
 * A change to a dead letter (POST .../redeliver, DELETE .../dead/<id>), a
 * bulk redelivery, a pause or a resume of a route: the inbox answers it,
 * and its audit line is written from that answer. The
 * route and the id are taken from the path as sent (decoded), for the line.
 */
static void admin_inbox_audit(struct evhttp_request *req, const struct admin_actor *actor,
                              const char *rest)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    const char *dead = rest[0] == '/' ? strstr(rest + 1, "/dead/") : NULL;
    char *route = NULL, *id = NULL, *encoded;
    size_t id_len;
    bool redeliver;

    const char *slash = rest[0] == '/' ? strchr(rest + 1, '/') : NULL;
    const char *action = NULL;

    /* the route-wide actions: POST /<route>/pause, /resume, /dead/redeliver */
    if (cmd == EVHTTP_REQ_POST && slash != NULL) {
        if (strcmp(slash, "/pause") == 0)
            action = "inbox-pause";
        else if (strcmp(slash, "/resume") == 0)
            action = "inbox-resume";
        else if (strcmp(slash, "/dead/redeliver") == 0)
            action = "bulk-redeliver";
    }
    if (action != NULL) {
        encoded = strndup(rest + 1, (size_t)(slash - rest - 1));
        if (encoded != NULL)
            route = evhttp_uridecode(encoded, 0, NULL);
        free(encoded);
        admin_audit_on_answer(req, actor, action, NULL, route);
        free(route);
        return;
    }
    if ((cmd != EVHTTP_REQ_POST && cmd != EVHTTP_REQ_DELETE) || dead == NULL)
        return;
    id_len = strcspn(dead + 6, "/");
    redeliver = strcmp(dead + 6 + id_len, "/redeliver") == 0;
    if (id_len == 0 || (cmd == EVHTTP_REQ_POST) != redeliver ||
        (!redeliver && dead[6 + id_len] != '\0'))
        return; /* not an action: the inbox answers 404 or 405 and changes nothing */
    encoded = strndup(rest + 1, (size_t)(dead - rest - 1));
    if (encoded != NULL)
        route = evhttp_uridecode(encoded, 0, NULL);
    free(encoded);
    /* an id is two numbers (the inbox checks it): longer is noise, not worth a line's room */
    id = id_len <= 64 ? strndup(dead + 6, id_len) : NULL;
    admin_audit_on_answer(req, actor, redeliver ? "redeliver" : "dead-letter-delete", id, route);
    free(route);
    free(id);
}

void admin_handle(struct evhttp_request *req, void *arg)
{
    const struct admin_env *env = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
    struct admin_actor actor;

    if (path == NULL)
        path = "";
    if (admin_probe(env, req, path))
        return;
    if (!admin_auth_check(env, req, &actor))
        return;
    if (strcmp(path, ADMIN_LOOKUP_PATH) == 0) {
        admin_lookup(env, req);
    } else if (strcmp(path, ADMIN_LIST_PATH) == 0) {
        admin_list(env, req);
    } else if (strncmp(path, ADMIN_RECORDS_PATH, strlen(ADMIN_RECORDS_PATH)) == 0) {
        admin_records(env, req, path + strlen(ADMIN_RECORDS_PATH), &actor);
    } else if (strcmp(path, ADMIN_INBOX_PATH) == 0 ||
               strncmp(path, ADMIN_INBOX_PATH "/", strlen(ADMIN_INBOX_PATH) + 1) == 0) {
        admin_inbox_audit(req, &actor, path + strlen(ADMIN_INBOX_PATH));
        inbox_admin(req, env->set->store, env->set->conf, path + strlen(ADMIN_INBOX_PATH));
    } else if (evhttp_request_get_command(req) == EVHTTP_REQ_POST ||
               evhttp_request_get_command(req) == EVHTTP_REQ_DELETE ||
               evhttp_request_get_command(req) == EVHTTP_REQ_PUT) {
        admin_reply_text(req, 405, "method not allowed\n");
    } else {
        admin_reply_text(req, 404, "not found\n");
    }
}
