/*
 * admin.c - the admin listener's endpoints: the probes and the metrics
 * (probe.c), open to every client unless health_listen serves them, and
 * behind the token check (admin_auth.c) the records, the record lookup and
 * the inbox. See admin_int.h for the files.
 */
#include "admin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "http_server.h"
#include "config.h"
#include "exchange.h"
#include "inbox.h"
#include "probe.h"

#define ADMIN_RECORDS_PATH "/records/"
#define ADMIN_LOOKUP_PATH "/records/lookup"
#define ADMIN_LIST_PATH "/records"
#define ADMIN_INBOX_PATH "/inbox"
#define ADMIN_BULK_PATH "/records/bulk"
#define ADMIN_EXTEND_SUFFIX "/extend"

/* The request's path, "" when its target has none. */
static const char *admin_path(struct http_req *req)
{
    const char *path = evhttp_uri_get_path(http_server_uri(req));

    return path != NULL ? path : "";
}

/*
 * A change to a dead letter (POST .../redeliver, DELETE .../dead/<id>), a
 * bulk redelivery, a pause or a resume of a route: the inbox answers it,
 * and its audit line is written from that answer. The
 * route and the id are taken from the path as sent (decoded), for the line.
 */
static void admin_inbox_audit(struct http_req *req, const struct admin_actor *actor,
                              const char *rest)
{
    enum evhttp_cmd_type cmd = http_server_command(req);
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

/* The most body bytes req may carry: a resolve's answer (one, or a bulk one), or a few KiB. */
static size_t admin_body_limit(const struct admin_env *env, struct http_req *req)
{
    const char *path = admin_path(req);

    if ((http_server_command(req) == EVHTTP_REQ_PUT &&
         strncmp(path, ADMIN_RECORDS_PATH, strlen(ADMIN_RECORDS_PATH)) == 0) ||
        (http_server_command(req) == EVHTTP_REQ_POST && strcmp(path, ADMIN_BULK_PATH) == 0))
        return env->resolve_body_limit;
    return ADMIN_MAX_BODY;
}

/* Whether path is /records/<something>/extend; *id_len: the bytes of <something>. */
static bool admin_extend_path(const char *path, size_t *id_len)
{
    size_t n = strlen(path), pre = strlen(ADMIN_RECORDS_PATH), suf = strlen(ADMIN_EXTEND_SUFFIX);

    if (n <= pre + suf || strncmp(path, ADMIN_RECORDS_PATH, pre) != 0 ||
        strcmp(path + n - suf, ADMIN_EXTEND_SUFFIX) != 0)
        return false;
    *id_len = n - pre - suf;
    return true;
}

void admin_too_large(struct http_req *req, void *arg)
{
    const struct admin_env *env = arg;
    char detail[160];

    snprintf(detail, sizeof(detail), "the admin listener takes a body of at most %zu bytes here",
             admin_body_limit(env, req));
    admin_reply_problem(req, PROBLEM_BODY_TOO_LARGE, detail);
}

void admin_head(struct http_req *req, void *arg)
{
    const struct admin_env *env = arg;
    size_t limit = admin_body_limit(env, req);
    long long announced = http_server_content_length(req);
    struct admin_actor actor;

    /* the token first: without it, not even the size of the body is anyone's business */
    if (!(env->probes && probe_path(admin_path(req))) && !admin_auth_check(env, req, &actor))
        return;
    if (announced > 0 && (unsigned long long)announced > limit) {
        admin_too_large(req, arg);
        return;
    }
    http_server_accept_body(req, limit);
}

void admin_handle(struct http_req *req, void *arg)
{
    const struct admin_env *env = arg;
    const char *path = admin_path(req);
    struct admin_actor actor;
    size_t id_len;

    if (env->probes && probe_answer(&env->probe, req))
        return;
    if (!admin_auth_check(env, req, &actor))
        return;
    if (strcmp(path, ADMIN_LOOKUP_PATH) == 0) {
        admin_lookup(env, req);
    } else if (strcmp(path, ADMIN_LIST_PATH) == 0) {
        admin_list(env, req);
    } else if (strcmp(path, ADMIN_BULK_PATH) == 0) {
        admin_bulk(env, req, &actor);
    } else if (admin_extend_path(path, &id_len)) {
        admin_extend(env, req, path + strlen(ADMIN_RECORDS_PATH), id_len, &actor);
    } else if (strncmp(path, ADMIN_RECORDS_PATH, strlen(ADMIN_RECORDS_PATH)) == 0) {
        admin_records(env, req, path + strlen(ADMIN_RECORDS_PATH), &actor);
    } else if (strcmp(path, ADMIN_INBOX_PATH) == 0 ||
               strncmp(path, ADMIN_INBOX_PATH "/", strlen(ADMIN_INBOX_PATH) + 1) == 0) {
        admin_inbox_audit(req, &actor, path + strlen(ADMIN_INBOX_PATH));
        inbox_admin(req, env->store, exchange_set_conf(env->set),
                    path + strlen(ADMIN_INBOX_PATH));
    } else if (http_server_command(req) == EVHTTP_REQ_POST ||
               http_server_command(req) == EVHTTP_REQ_DELETE ||
               http_server_command(req) == EVHTTP_REQ_PUT) {
        admin_reply_text(req, 405, "method not allowed\n");
    } else {
        admin_reply_text(req, 404, "not found\n");
    }
}
